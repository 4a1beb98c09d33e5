//! The metadata record: `<root>/<id>.json` (SPEC.md §9.3).
//!
//! Written only under the session lock, by temp file + fsync + rename + fsync of
//! the directory, so a reader sees the old record or the new one, never a torn
//! one. Fields this build does not know are kept in `extra` and written back.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use latch_wire::{Incarnation, LegacyPolicy, Owner, SessionId};
use serde::{Deserialize, Serialize};

use crate::error::RegistryError;
use crate::proc::ProcIdentity;

/// The newest record format version this build writes; a record that needs none of
/// version 2's fields is still written as version 1 (SPEC.md §9.3).
pub const RECORD_VERSION: u32 = 2;

/// How the program ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExitRecord {
    /// Exit code for a normal exit.
    pub code: Option<i32>,
    /// Signal number if killed by a signal.
    pub signal: Option<i32>,
    /// When the daemon saw the exit (ms since the epoch).
    pub exited_at_ms: u64,
}

/// One session's metadata.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// Format version.
    pub version: u32,
    /// The id (must match the file name).
    pub id: SessionId,
    /// The creation (immutable).
    pub incarnation: Incarnation,
    /// Mutable, non-unique display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// The program and its arguments.
    pub command: Vec<String>,
    /// Working directory of the program.
    pub cwd: String,
    /// Creation time, ms since the epoch.
    pub created_at_ms: u64,
    /// The daemon process.
    pub daemon: ProcIdentity,
    /// The program's process.
    pub child: ProcIdentity,
    /// Tags.
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    /// The legacy policy in force.
    #[serde(default)]
    pub legacy_policy: LegacyPolicy,
    /// Set once the program has ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<ExitRecord>,
    /// The PTY's slave path; its access and modification times are the session's
    /// last input and output (gc's idle test).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tty: Option<String>,
    /// The creation's owner, set at creation only (SPEC.md §2.4). Trust it only from
    /// [`crate::Registry::read_record`], which verifies `owner_mac`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<Owner>,
    /// Lowercase hex of the MAC binding `owner` (or its absence) to `{id,
    /// incarnation}` under the registry key. Every record carries it: one without
    /// it is degraded (SPEC.md §9.3); it is optional here only to report that.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_mac: Option<String>,
    /// Version 2 (SPEC.md §9.3, §9.16): the restart policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<crate::supervision::RestartPolicy>,
    /// Version 2: the creation this one replaced (a restart or a respawn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_incarnation: Option<Incarnation>,
    /// Version 2: the parent this session's life is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<crate::supervision::Parent>,
    /// Version 2: when latch's kill of this creation was recorded, under the lock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kill_requested_at_ms: Option<u64>,
    /// Version 2: why the session is in its status (`restarting`, `flapping`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_reason: Option<crate::supervision::StatusReason>,
    /// Version 2: what `latch resurrect` runs instead of `command`: set by
    /// `new --resume-cmd`, changed only by `meta patch --id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_command: Option<Vec<String>>,
    /// Version 2: the program's environment for a restart, a respawn or a
    /// resurrection: the creation's `--env` overlay with TERM, PATH, LANG and HOME
    /// as they were, kept only when a restart policy or a resume command needs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    /// Fields written by another build, preserved on rewrite.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl Record {
    /// The version this record is written as: 2 if it carries any field of version
    /// 2, else 1, so that older builds keep reading plain sessions (SPEC.md §9.3).
    pub fn needed_version(&self) -> u32 {
        let v2 = self.restart.is_some()
            || self.previous_incarnation.is_some()
            || self.parent.is_some()
            || self.kill_requested_at_ms.is_some()
            || self.status_reason.is_some()
            || self.env.is_some()
            || self.resume_command.is_some();
        if v2 {
            RECORD_VERSION
        } else {
            1
        }
    }
}

/// Reads and parses a record file. `Ok(None)`: no such file. `Err(Corrupt)`: the file
/// exists but cannot be read or parsed (a degraded read, never an absence). Not
/// verified under the key: [`crate::Registry::read_record`] is the reader to trust.
pub fn read_record_file(path: &Path, id: &SessionId) -> Result<Option<Record>, RegistryError> {
    // Bounded, no-follow, regular files only (SPEC §9.14).
    let Some(bytes) = crate::file::read_bounded(path, crate::file::FileKind::Record)? else {
        return Ok(None);
    };
    let record: Record = serde_json::from_slice(&bytes).map_err(|e| RegistryError::Corrupt {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    if &record.id != id {
        return Err(RegistryError::Corrupt {
            path: path.to_path_buf(),
            reason: format!("record names id {}, file is for {id}", record.id),
        });
    }
    // A version this build does not know may carry what it cannot verify: degraded,
    // never read as if it were its own (SPEC §9.3).
    if !(1..=RECORD_VERSION).contains(&record.version) {
        return Err(RegistryError::Corrupt {
            path: path.to_path_buf(),
            reason: format!(
                "record version {}; this latch reads versions 1 to {RECORD_VERSION}",
                record.version
            ),
        });
    }
    Ok(Some(record))
}

/// Lowercase hex of `bytes`.
pub fn to_hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 0x0f)]));
    }
    s
}

/// Parses lowercase hex; `None` for anything else.
pub fn from_hex(s: &str) -> Option<Vec<u8>> {
    let val = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    if !s.len().is_multiple_of(2) {
        return None;
    }
    s.as_bytes()
        .chunks_exact(2)
        .map(|p| Some((val(p[0])? << 4) | val(p[1])?))
        .collect()
}

/// Writes `bytes` to `path` atomically: a fresh temp file beside it ([`create_temp`]),
/// fsync, rename over `path`, fsync of the directory.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), RegistryError> {
    let dir = parent_dir(path);
    let (mut f, tmp) =
        create_temp(path).map_err(|e| RegistryError::io(format!("write {}", path.display()), e))?;
    let result = (|| -> io::Result<()> {
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)?;
        fs::File::open(dir)?.sync_all()
    })();
    result.map_err(|e| {
        // Ours to remove: created exclusively a moment ago.
        let _ = fs::remove_file(&tmp);
        RegistryError::io(format!("write {}", path.display()), e)
    })
}

/// The directory holding `path` (`.` for a bare file name).
pub(crate) fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// How many random temp names are tried before giving up.
const TEMP_ATTEMPTS: usize = 16;

/// Creates a new, empty temp file beside `path`, named `<name>.tmp.<16 random hex
/// digits>`, with `O_CREAT | O_EXCL | O_NOFOLLOW` and mode 0600, retrying with
/// another name if one exists. The name cannot be predicted, and nothing planted in
/// the directory (a file, a symlink, a FIFO) is ever opened, followed or replaced
/// (SPEC.md §9.1).
pub fn create_temp(path: &Path) -> io::Result<(fs::File, std::path::PathBuf)> {
    use ring::rand::SecureRandom;
    let rng = ring::rand::SystemRandom::new();
    let dir = parent_dir(path);
    let base = path.file_name().unwrap_or_default();
    for _ in 0..TEMP_ATTEMPTS {
        let mut nonce = [0u8; 8];
        rng.fill(&mut nonce)
            .map_err(|_| io::Error::other("no system randomness"))?;
        let mut name = base.to_os_string();
        name.push(format!(".tmp.{:016x}", u64::from_be_bytes(nonce)));
        let tmp = dir.join(name);
        match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
        {
            Ok(f) => return Ok((f, tmp)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!(
            "no free temp name beside {} after {TEMP_ATTEMPTS} attempts",
            path.display()
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Record {
        let me = ProcIdentity::of(std::process::id()).unwrap();
        Record {
            version: RECORD_VERSION,
            id: SessionId::new("s1").unwrap(),
            incarnation: Incarnation::from_parts([1; 16], [2; 16]),
            display_name: Some("build".into()),
            command: vec!["sh".into()],
            cwd: "/".into(),
            created_at_ms: 1,
            daemon: me.clone(),
            child: me,
            tags: BTreeMap::new(),
            legacy_policy: LegacyPolicy::Observe,
            exit: None,
            tty: None,
            owner: None,
            owner_mac: None,
            restart: None,
            previous_incarnation: None,
            parent: None,
            kill_requested_at_ms: None,
            status_reason: None,
            resume_command: None,
            env: None,
            extra: serde_json::Map::new(),
        }
    }

    #[test]
    fn unknown_fields_survive_a_rewrite() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("s1.json");
        let mut v = serde_json::to_value(sample()).unwrap();
        v["futureField"] = serde_json::json!({"x": [1, 2]});
        fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
        let id = SessionId::new("s1").unwrap();
        let mut rec = read_record_file(&path, &id).unwrap().unwrap();
        rec.tags.insert("k".into(), "v".into());
        write_atomic(&path, &serde_json::to_vec(&rec).unwrap()).unwrap();
        let back: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
        assert_eq!(back["futureField"], serde_json::json!({"x": [1, 2]}));
        assert_eq!(back["tags"]["k"], "v");
    }

    #[test]
    fn atomic_writes_never_open_a_planted_temp_name() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("r.json");
        // The name older builds used: a symlink there must be left alone.
        let planted = tmp
            .path()
            .join(format!("r.json.tmp.{}", std::process::id()));
        std::os::unix::fs::symlink("/nonexistent/target", &planted).unwrap();
        write_atomic(&path, b"{}").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"{}");
        assert!(fs::symlink_metadata(&planted)
            .unwrap()
            .file_type()
            .is_symlink());
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o600);
        // Only the planted file and the result remain: no temp file is left behind.
        assert_eq!(fs::read_dir(tmp.path()).unwrap().count(), 2);
    }

    #[test]
    fn missing_is_none_and_garbage_is_corrupt() {
        let tmp = tempfile::tempdir().unwrap();
        let id = SessionId::new("s1").unwrap();
        let path = tmp.path().join("s1.json");
        assert!(read_record_file(&path, &id).unwrap().is_none());
        fs::write(&path, b"{not json").unwrap();
        assert!(matches!(
            read_record_file(&path, &id),
            Err(RegistryError::Corrupt { .. })
        ));
        // A record that names another id is corrupt too.
        fs::write(&path, serde_json::to_vec(&sample()).unwrap()).unwrap();
        let other = SessionId::new("s2").unwrap();
        assert!(matches!(
            read_record_file(&path, &other),
            Err(RegistryError::Corrupt { .. })
        ));
    }
}
