//! `latch legacy-dir DIR`: a directory of its own for the older `pty` tools
//! (SPEC.md §7, "A directory for older tools").
//!
//! ```text
//! DIR/ (0700, never the root nor inside it)
//!   <id>.sock  symlink to <root>/<id>.sock     one per running session, policy not off
//!   <id>.json  what pty's list/peek/attach/kill read, marked latch's (0600)
//! ```
//!
//! No `<id>.pid`: `pty kill` signals a pid read from that file without proof. Under
//! `full`, `<id>.json` carries `daemonPid` with `recovery.processStartToken` (the
//! daemon's start time, as pty reads it), which pty checks against `/proc` before it
//! signals; SIGTERM to a latch daemon is its STOP path (SPEC.md §5.6). Under
//! `observe` no pid is published at all, so pty's kill and restart cannot end it.
//!
//! Every act goes through one descriptor on the directory that was validated
//! (`openat`, `unlinkat`, `symlinkat`, `renameat`), never through DIR's path again:
//! swapping DIR for a symlink after the check changes nothing latch does. A refresh
//! removes only what latch made: symlinks to its own sockets, `.json` files carrying
//! its mark, and beside such a `.json` what older tools left for that session.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use latch_client::{Client, ClientError, Entry, SessionStatus};
use latch_registry::RegistryError;
use latch_wire::LegacyPolicy;
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;
use serde_json::{json, Value};

/// Tags pty's gc acts on (`parent`: reaped with its parent; `strategy`: respawned or
/// reaped when abandoned): never copied, so an older gc never stops a latch session.
const UNSAFE_TAGS: [&str; 2] = ["parent", "strategy"];

/// Marks DIR as made by this command: an existing directory without it must be empty,
/// so no one else's files are ever removed.
const MARKER: &str = ".latch-legacy-dir";

/// The field that marks a `<id>.json` as written by this command (SPEC.md §7).
const MARK_FIELD: &str = "latchLegacyDir";

/// The most read of a `<id>.json` to tell whether it is latch's; a longer one is not.
const VIEW_JSON_MAX_BYTES: u64 = 4 * 1024 * 1024;

/// What an older tool may leave beside a session's metadata; removed with a latch
/// `.json` once its session has ended.
const LEFTOVERS: [&str; 3] = [".pid", ".lock", ".events.jsonl"];

/// How many `..` steps are followed looking for the root before giving up.
const MAX_DEPTH: usize = 4096;

fn io_err(context: String, e: impl Into<io::Error>) -> ClientError {
    ClientError::Registry(RegistryError::Io {
        context,
        source: e.into(),
    })
}

/// A directory's identity: device and inode.
type DirId = (u64, u64);

fn dir_id(fd: BorrowedFd<'_>) -> io::Result<DirId> {
    let st = rustix::fs::fstat(fd)?;
    Ok((st.st_dev, st.st_ino))
}

fn open_dir_at(at: BorrowedFd<'_>, name: impl rustix::path::Arg) -> Result<OwnedFd, Errno> {
    rustix::fs::openat(
        at,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Whether the directory `fd` is the root or below it, walking `..` up to `/`.
fn within_root(fd: BorrowedFd<'_>, root: DirId) -> io::Result<bool> {
    let mut cur = open_dir_at(fd, ".")?;
    let mut id = dir_id(cur.as_fd())?;
    for _ in 0..MAX_DEPTH {
        if id == root {
            return Ok(true);
        }
        let up = open_dir_at(cur.as_fd(), "..")?;
        let up_id = dir_id(up.as_fd())?;
        if up_id == id {
            return Ok(false);
        }
        (cur, id) = (up, up_id);
    }
    Ok(true)
}

fn inside_root(dir: &Path) -> ClientError {
    ClientError::Usage(format!(
        "{} is latch's registry root or inside it: older tools delete and rewrite files \
         there; choose a directory of its own",
        dir.display()
    ))
}

fn not_a_directory(dir: &Path) -> ClientError {
    ClientError::Usage(format!(
        "{} exists and is not a directory (a symlink is refused, with or without a \
         trailing slash)",
        dir.display()
    ))
}

/// Opens DIR's last component under its parent without following it, creating it
/// (0700) when absent. Returns the descriptor and whether it was created.
fn open_or_create(dir: &Path, root: DirId) -> Result<(OwnedFd, bool), ClientError> {
    // `Path` drops a trailing slash, so `link/` names `link` itself, opened with
    // O_NOFOLLOW: a symlink is refused, never followed.
    let Some(name) = dir.file_name() else {
        return Err(ClientError::Usage(format!(
            "{}: name the directory itself (not `.`, `..` or `/`)",
            dir.display()
        )));
    };
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let pfd = rustix::fs::open(
        parent,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io_err(parent.display().to_string(), e))?;
    if within_root(pfd.as_fd(), root).map_err(|e| io_err(parent.display().to_string(), e))? {
        return Err(inside_root(dir));
    }
    match open_dir_at(pfd.as_fd(), name) {
        Ok(fd) => Ok((fd, false)),
        Err(Errno::NOENT) => {
            rustix::fs::mkdirat(pfd.as_fd(), name, Mode::from_raw_mode(0o700))
                .map_err(|e| io_err(format!("create {}", dir.display()), e))?;
            match open_dir_at(pfd.as_fd(), name) {
                Ok(fd) => Ok((fd, true)),
                Err(Errno::LOOP | Errno::NOTDIR) => Err(not_a_directory(dir)),
                Err(e) => Err(io_err(dir.display().to_string(), e)),
            }
        }
        Err(Errno::LOOP | Errno::NOTDIR) => Err(not_a_directory(dir)),
        Err(e) => Err(io_err(dir.display().to_string(), e)),
    }
}

/// Every name in the directory `fd` but `.` and `..`.
fn names(fd: BorrowedFd<'_>) -> io::Result<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    for entry in rustix::fs::Dir::read_from(fd)? {
        let name = entry?.file_name().to_bytes().to_vec();
        if name != b"." && name != b".." {
            out.push(name);
        }
    }
    Ok(out)
}

/// Opens DIR (creating it 0700) and checks it: a directory, not a symlink, owned by
/// the user, neither the root nor inside it, and empty or marked. Every later act goes
/// through the returned descriptor.
fn prepare(dir: &Path, root: DirId) -> Result<OwnedFd, ClientError> {
    let (fd, created) = open_or_create(dir, root)?;
    let ctx = || dir.display().to_string();
    let st = rustix::fs::fstat(&fd).map_err(|e| io_err(ctx(), e))?;
    if st.st_uid != rustix::process::geteuid().as_raw() {
        return Err(ClientError::Refused(format!(
            "{} is not owned by you",
            dir.display()
        )));
    }
    if within_root(fd.as_fd(), root).map_err(|e| io_err(ctx(), e))? {
        return Err(inside_root(dir));
    }
    if !created {
        let empty = names(fd.as_fd()).map_err(|e| io_err(ctx(), e))?.is_empty();
        let marked = rustix::fs::statat(&fd, MARKER, AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|m| FileType::from_raw_mode(m.st_mode) == FileType::RegularFile);
        if !empty && !marked {
            return Err(ClientError::Usage(format!(
                "{} is not empty and was not made by `latch legacy-dir`; choose a new \
                 directory",
                dir.display()
            )));
        }
    }
    if st.st_mode & 0o777 != 0o700 {
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o700))
            .map_err(|e| io_err(format!("chmod 0700 {}", dir.display()), e))?;
    }
    let marker = rustix::fs::openat(
        &fd,
        MARKER,
        OFlags::WRONLY | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
    .map_err(|e| io_err(format!("{}/{MARKER}", dir.display()), e))?;
    drop(marker);
    Ok(fd)
}

/// The `<id>.json` pty reads (its `SessionMetadata`), marked as latch's. The daemon's
/// pid is published only under `full` (SPEC.md §7).
fn metadata(record: &latch_registry::Record) -> Value {
    let (command, args) = match record.command.split_first() {
        Some((c, a)) => (c.clone(), a.to_vec()),
        None => (String::new(), Vec::new()),
    };
    let tags: serde_json::Map<String, Value> = record
        .tags
        .iter()
        .filter(|(k, _)| !UNSAFE_TAGS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), Value::from(v.clone())))
        .collect();
    let mut m = json!({
        "command": command,
        "args": args,
        "displayCommand": record.command.join(" "),
        "cwd": record.cwd,
        "createdAt": latch_registry::iso8601_ms(record.created_at_ms),
        "tags": tags,
        "latch": { "id": record.id.as_str(), "incarnation": record.incarnation.to_string() },
    });
    m[MARK_FIELD] = Value::Bool(true);
    if record.legacy_policy == LegacyPolicy::Full {
        m["daemonPid"] = Value::from(record.daemon.pid);
        m["recovery"] =
            json!({ "processStartToken": format!("linux:{}", record.daemon.start_time) });
    }
    if let Some(name) = &record.display_name {
        m["displayName"] = Value::from(name.clone());
    }
    m
}

/// Who an entry of DIR belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// Nothing there.
    Free,
    /// Made by latch: safe to replace or remove.
    Ours,
    /// Anything else: never touched.
    Foreign,
}

/// `<id>.sock` is latch's when it is a symlink to `<root>/<id>.sock`.
fn sock_slot(dir: BorrowedFd<'_>, id: &str, root: &Path) -> Slot {
    let name = format!("{id}.sock");
    match rustix::fs::readlinkat(dir, name.as_str(), Vec::new()) {
        Ok(target) if Path::new(OsStr::from_bytes(target.as_bytes())) == root.join(&name) => {
            Slot::Ours
        }
        Ok(_) => Slot::Foreign,
        Err(Errno::NOENT) => Slot::Free,
        Err(_) => Slot::Foreign,
    }
}

/// Reads a regular file of DIR, no-follow and non-blocking, at most `cap` bytes;
/// `None` for anything else (absent, not regular, too long).
fn read_regular(dir: BorrowedFd<'_>, name: &str, cap: u64) -> Result<Option<Vec<u8>>, Errno> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let st = rustix::fs::fstat(&fd)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Ok(None);
    }
    let mut bytes = Vec::new();
    let read = std::fs::File::from(fd)
        .take(cap + 1)
        .read_to_end(&mut bytes);
    Ok(read
        .ok()
        .filter(|_| bytes.len() as u64 <= cap)
        .map(|_| bytes))
}

/// `<id>.json` is latch's when it is a regular file whose JSON carries the mark and
/// this id. Returns the slot and, when ours, its bytes.
fn json_slot(dir: BorrowedFd<'_>, id: &str) -> (Slot, Vec<u8>) {
    match read_regular(dir, &format!("{id}.json"), VIEW_JSON_MAX_BYTES) {
        Err(Errno::NOENT) => (Slot::Free, Vec::new()),
        Ok(Some(bytes)) => {
            let v: Option<Value> = serde_json::from_slice(&bytes).ok();
            let ours = v.is_some_and(|v| v[MARK_FIELD] == true && v["latch"]["id"] == id);
            if ours {
                (Slot::Ours, bytes)
            } else {
                (Slot::Foreign, Vec::new())
            }
        }
        _ => (Slot::Foreign, Vec::new()),
    }
}

/// Writes `bytes` to a new temp file in DIR (O_EXCL, no-follow, 0600) and renames it
/// over `name`. DIR is the user's own 0700 directory, so the temp name need not be
/// unpredictable, only unused.
fn write_at(dir: BorrowedFd<'_>, name: &str, bytes: &[u8]) -> io::Result<()> {
    let (tmp, fd) = create_temp_at(name, |tmp| {
        rustix::fs::openat(
            dir,
            tmp,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map(Some)
    })?;
    let mut f = std::fs::File::from(fd.ok_or_else(|| io::Error::other("no temp file"))?);
    let done = f
        .write_all(bytes)
        .and_then(|()| f.sync_all())
        .and_then(|()| Ok(rustix::fs::renameat(dir, tmp.as_str(), dir, name)?));
    if done.is_err() {
        let _ = rustix::fs::unlinkat(dir, tmp.as_str(), AtFlags::empty());
    }
    done
}

/// Points DIR's `name` at `target`, replacing what was there, atomically.
fn symlink_at(dir: BorrowedFd<'_>, name: &str, target: &Path) -> io::Result<()> {
    let (tmp, _) = create_temp_at(name, |tmp| {
        rustix::fs::symlinkat(target, dir, tmp).map(|()| None)
    })?;
    rustix::fs::renameat(dir, tmp.as_str(), dir, name).map_err(|e| {
        let _ = rustix::fs::unlinkat(dir, tmp.as_str(), AtFlags::empty());
        e.into()
    })
}

/// Makes `<name>.tmp.<pid>.<n>` with `make`, trying the next `n` while the name is
/// taken.
fn create_temp_at(
    name: &str,
    make: impl Fn(&str) -> Result<Option<OwnedFd>, Errno>,
) -> io::Result<(String, Option<OwnedFd>)> {
    let pid = std::process::id();
    for n in 0..64 {
        let tmp = format!("{name}.tmp.{pid}.{n}");
        match make(&tmp) {
            Ok(fd) => return Ok((tmp, fd)),
            Err(Errno::EXIST) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!("no free temp name beside {name}"),
    ))
}

/// Publishes one session's entries unless an entry in the way is not latch's; returns
/// whether it did.
fn publish(
    dir: BorrowedFd<'_>,
    root: &Path,
    record: &latch_registry::Record,
) -> Result<bool, ClientError> {
    let id = record.id.as_str();
    let sock = sock_slot(dir, id, root);
    let (json, old) = json_slot(dir, id);
    if sock == Slot::Foreign || json == Slot::Foreign {
        let _ = writeln!(
            io::stderr(),
            "latch: legacy-dir: {id}.sock or {id}.json there is not latch's (an older \
             tool's own session?); left as it is, {id} not published"
        );
        return Ok(false);
    }
    let target = root.join(format!("{id}.sock"));
    if sock == Slot::Free {
        symlink_at(dir, &format!("{id}.sock"), &target)
            .map_err(|e| io_err(format!("link {id}.sock"), e))?;
    }
    let json =
        serde_json::to_vec_pretty(&metadata(record)).map_err(|e| ClientError::failed("", e))?;
    if old != json {
        write_at(dir, &format!("{id}.json"), &json)
            .map_err(|e| io_err(format!("write {id}.json"), e))?;
    }
    Ok(true)
}

/// Removes the entries latch made for sessions not in `skip`: its socket links, its
/// marked `.json`, and beside a marked `.json` (when the socket slot is not someone
/// else's) the `.pid`, `.lock` and `.events.jsonl` older tools left for it.
fn sweep(dir: BorrowedFd<'_>, root: &Path, skip: &BTreeSet<String>) -> io::Result<()> {
    let mut stems = BTreeSet::new();
    for name in names(dir)? {
        let Ok(name) = std::str::from_utf8(&name) else {
            continue;
        };
        let stem = [".sock", ".json"]
            .iter()
            .chain(LEFTOVERS.iter())
            .find_map(|s| name.strip_suffix(s));
        if let Some(stem) = stem {
            if latch_wire::SessionId::new(stem).is_ok() && !skip.contains(stem) {
                stems.insert(stem.to_owned());
            }
        }
    }
    for id in stems {
        let sock = sock_slot(dir, &id, root);
        let (json, _) = json_slot(dir, &id);
        let mut remove: Vec<String> = Vec::new();
        if sock == Slot::Ours {
            remove.push(format!("{id}.sock"));
        }
        if json == Slot::Ours {
            remove.push(format!("{id}.json"));
            if sock != Slot::Foreign {
                remove.extend(LEFTOVERS.iter().map(|s| format!("{id}{s}")));
            }
        }
        for name in remove {
            // Not a directory: unlinkat without AT_REMOVEDIR refuses one.
            let _ = rustix::fs::unlinkat(dir, name.as_str(), AtFlags::empty());
        }
    }
    rustix::fs::fsync(dir)?;
    Ok(())
}

/// The path DIR's descriptor names now, for the report; `given` if unknown.
fn shown_path(fd: BorrowedFd<'_>, given: &Path) -> PathBuf {
    use std::os::fd::AsRawFd;
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .unwrap_or_else(|_| given.to_path_buf())
}

/// Creates or refreshes DIR; returns the ids it holds.
pub fn refresh(client: &Client, dir: &Path) -> Result<(PathBuf, Vec<String>), ClientError> {
    let root = client
        .registry()
        .root()
        .canonicalize()
        .map_err(|e| io_err(client.registry().root().display().to_string(), e))?;
    let root_fd = rustix::fs::open(
        &root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io_err(root.display().to_string(), e))?;
    let root_id = dir_id(root_fd.as_fd()).map_err(|e| io_err(root.display().to_string(), e))?;
    let fd = prepare(dir, root_id)?;
    debug_pause();
    let mut keep = BTreeSet::new();
    let mut skip = BTreeSet::new();
    for entry in client.list()? {
        let Entry::Session { record, status } = entry else {
            continue;
        };
        if status != SessionStatus::Running || record.legacy_policy == LegacyPolicy::Off {
            continue;
        }
        let id = record.id.to_string();
        if publish(fd.as_fd(), &root, &record)? {
            keep.insert(id.clone());
        }
        skip.insert(id);
    }
    sweep(fd.as_fd(), &root, &skip).map_err(|e| io_err(dir.display().to_string(), e))?;
    Ok((shown_path(fd.as_fd(), dir), keep.into_iter().collect()))
}

/// Debug builds only: waits on the FIFO named by `LATCH_DEBUG_LEGACY_DIR_PAUSE`
/// between validating DIR and acting in it, so a test can swap DIR at that instant
/// deterministically. Release builds have no such hook.
#[cfg(debug_assertions)]
fn debug_pause() {
    if let Some(fifo) = std::env::var_os("LATCH_DEBUG_LEGACY_DIR_PAUSE") {
        // Opening blocks until the test opens the write end; EOF means go on.
        if let Ok(mut f) = std::fs::File::open(fifo) {
            let _ = f.read_to_end(&mut Vec::new());
        }
    }
}

#[cfg(not(debug_assertions))]
fn debug_pause() {}
