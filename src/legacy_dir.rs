//! `latch legacy-dir DIR`: a directory of its own for the older `pty` tools
//! (SPEC.md §7, "A directory for older tools").
//!
//! ```text
//! DIR/ (0700, never the root nor inside it)
//!   <id>.sock  symlink to <root>/<id>.sock     one per running session, policy not off
//!   <id>.json  what pty's list/peek/attach/kill read (0600)
//! ```
//!
//! No `<id>.pid`: `pty kill` signals a pid read from that file without proof. Instead
//! `<id>.json` carries `daemonPid` with `recovery.processStartToken` (the daemon's
//! start time, as pty reads it), which pty checks against `/proc` before it signals;
//! SIGTERM to a latch daemon is its STOP path (SPEC.md §5.6).
//!
//! Entries of sessions that ended (or whose policy is off) are removed, and so is
//! anything an older tool left for them in DIR (`<id>.*`).

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use latch_client::{Client, ClientError, Entry, SessionStatus};
use latch_registry::record::write_atomic;
use latch_wire::LegacyPolicy;
use serde_json::{json, Value};

/// Tags pty's gc acts on (`parent`: reaped with its parent; `strategy`: respawned or
/// reaped when abandoned): never copied, so an older gc never stops a latch session.
const UNSAFE_TAGS: [&str; 2] = ["parent", "strategy"];

/// Marks DIR as made by this command: an existing directory without it must be empty,
/// so no one else's files are ever removed.
const MARKER: &str = ".latch-legacy-dir";

/// The files older tools keep per session; only these are removed.
const SUFFIXES: [&str; 5] = [".sock", ".json", ".pid", ".lock", ".events.jsonl"];

fn other(msg: String) -> ClientError {
    ClientError::Other(msg)
}

/// Creates DIR (0700) or checks it, refusing the registry root and anything inside it.
fn prepare(dir: &Path, root: &Path) -> Result<PathBuf, ClientError> {
    // Checked before anything is created: DIR's parent resolved, plus its name.
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let resolved = parent
        .canonicalize()
        .map_err(|e| other(format!("{}: {e}", parent.display())))?
        .join(dir.file_name().unwrap_or_default());
    if resolved.starts_with(root) {
        return Err(inside_root(&resolved));
    }
    match fs::symlink_metadata(dir) {
        Ok(m) if m.file_type().is_symlink() || !m.is_dir() => {
            return Err(ClientError::Usage(format!(
                "{} exists and is not a directory",
                dir.display()
            )))
        }
        Ok(m) => {
            if m.uid() != nix::unistd::geteuid().as_raw() {
                return Err(other(format!("{} is not owned by you", dir.display())));
            }
            let empty = fs::read_dir(dir)
                .map_err(|e| other(format!("{}: {e}", dir.display())))?
                .next()
                .is_none();
            if !empty && !dir.join(MARKER).exists() {
                return Err(ClientError::Usage(format!(
                    "{} is not empty and was not made by `latch legacy-dir`; choose a new \
                     directory",
                    dir.display()
                )));
            }
            if m.mode() & 0o777 != 0o700 {
                fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
                    .map_err(|e| other(format!("chmod 0700 {}: {e}", dir.display())))?;
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => fs::DirBuilder::new()
            .mode(0o700)
            .create(dir)
            .map_err(|e| other(format!("create {}: {e}", dir.display())))?,
        Err(e) => return Err(other(format!("{}: {e}", dir.display()))),
    }
    write_atomic(&dir.join(MARKER), b"").map_err(ClientError::from)?;
    let dir = dir
        .canonicalize()
        .map_err(|e| other(format!("{}: {e}", dir.display())))?;
    if dir.starts_with(root) {
        return Err(inside_root(&dir));
    }
    Ok(dir)
}

fn inside_root(dir: &Path) -> ClientError {
    ClientError::Usage(format!(
        "{} is latch's registry root or inside it: older tools delete and rewrite files \
         there; choose a directory of its own",
        dir.display()
    ))
}

/// The `<id>.json` pty reads (its `SessionMetadata`).
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
        "daemonPid": record.daemon.pid,
        "recovery": { "processStartToken": format!("linux:{}", record.daemon.start_time) },
        "latch": { "id": record.id.as_str(), "incarnation": record.incarnation.to_string() },
    });
    if let Some(name) = &record.display_name {
        m["displayName"] = Value::from(name.clone());
    }
    m
}

/// Points `link` at `target`, replacing whatever `link` was, atomically.
fn symlink_atomic(target: &Path, link: &Path) -> Result<(), ClientError> {
    if fs::read_link(link).is_ok_and(|t| t == target) {
        return Ok(());
    }
    let (f, tmp) = latch_registry::record::create_temp(link)
        .map_err(|e| other(format!("{}: {e}", link.display())))?;
    drop(f);
    let _ = fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp)
        .and_then(|()| fs::rename(&tmp, link))
        .map_err(|e| {
            let _ = fs::remove_file(&tmp);
            other(format!("link {}: {e}", link.display()))
        })
}

/// Creates or refreshes DIR; returns the ids it holds.
pub fn refresh(client: &Client, dir: &Path) -> Result<(PathBuf, Vec<String>), ClientError> {
    let root = client
        .registry()
        .root()
        .canonicalize()
        .map_err(|e| other(e.to_string()))?;
    let dir = prepare(dir, &root)?;
    let mut keep = BTreeSet::new();
    for entry in client.list()? {
        let Entry::Session { record, status } = entry else {
            continue;
        };
        if status != SessionStatus::Running || record.legacy_policy == LegacyPolicy::Off {
            continue;
        }
        let id = record.id.to_string();
        symlink_atomic(
            &root.join(format!("{id}.sock")),
            &dir.join(format!("{id}.sock")),
        )?;
        let json =
            serde_json::to_vec_pretty(&metadata(&record)).map_err(|e| other(e.to_string()))?;
        write_atomic(&dir.join(format!("{id}.json")), &json).map_err(ClientError::from)?;
        keep.insert(id);
    }
    // Sessions that ended: their entries go, with whatever older tools left for them.
    let listing = fs::read_dir(&dir).map_err(|e| other(format!("{}: {e}", dir.display())))?;
    for item in listing.flatten() {
        let name = item.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(stem) = SUFFIXES.iter().find_map(|s| name.strip_suffix(s)) else {
            continue;
        };
        let is_file = item.file_type().is_ok_and(|t| !t.is_dir());
        if is_file && latch_wire::SessionId::new(stem).is_ok() && !keep.contains(stem) {
            let _ = fs::remove_file(item.path());
        }
    }
    Ok((dir, keep.into_iter().collect()))
}
