//! latch-registry: the on-disk registry (SPEC.md §9).
//!
//! What it does: resolves and checks the root (0700, owned by the user, never a
//! symlink); loads or creates the key (0600, created exclusively); mints and
//! verifies incarnations; reads and atomically writes metadata records,
//! preserving unknown fields; takes per-session flock locks with a bounded wait;
//! proves process identities before anything is signaled.
//!
//! What it does not do: talk to daemons (that is `latch-client` and
//! `latch-daemon`), or decide policy about what to kill or remove.

pub mod checkpoint;
pub mod error;
pub mod events;
pub mod file;
pub mod key;
pub mod lock;
pub mod proc;
pub mod reboot;
pub mod record;
pub mod root;
pub mod screen;
pub mod shell;
pub mod spec;
pub mod supervision;
pub mod tail;
pub mod usage;
pub mod user_events;

// Entry points for the fuzz targets in fuzz/ (not a public API).
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;

use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use error::RegistryError;
pub use key::Key;
pub use lock::{SessionLock, DEFAULT_LOCK_WAIT};
pub use proc::{PidFd, ProcIdentity, ProofError};
pub use record::{ExitRecord, Record, RECORD_VERSION};
pub use screen::{FinalScreen, FINAL_SCREEN_VERSION};
pub use spec::{CastSpec, CreateSpec, ReadyMessage};

use latch_wire::{Incarnation, SessionId};

/// Name of the key file inside the root.
pub const KEY_FILE: &str = "registry.key";
/// Name of the optional registry-wide defaults file inside the root (SPEC.md §9.1).
pub const DEFAULTS_FILE: &str = "defaults.json";
/// Ids refused at creation and never listed as sessions (SPEC.md §2.1): their record
/// path would be a registry file (`defaults` -> `defaults.json`).
pub const RESERVED_IDS: &[&str] = &["defaults"];
/// Largest daemon log before the daemon rotates it to `<id>.log.1` (SPEC.md §9.1).
pub const LOG_MAX_BYTES: u64 = 1024 * 1024;
/// `sun_path` holds 108 bytes including the terminating NUL.
pub const SUN_PATH_MAX: usize = 107;

/// `<root>/defaults.json` (SPEC.md §9.1).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct Defaults {
    /// The legacy policy for `latch new` without `--legacy`.
    #[serde(default)]
    pub legacy_policy: latch_wire::LegacyPolicy,
    /// Scrollback lines `latch attach` writes first without `--history`.
    #[serde(default)]
    pub attach_history: Option<u32>,
    /// The detach key of `latch attach` and `latch new` without `--detach-key`, in
    /// their notation (`^X`, `C-x`, `none`).
    #[serde(default)]
    pub detach_key: Option<String>,
    /// `false`: `latch new` starts shells without integration (SPEC.md §4.6).
    #[serde(default)]
    pub shell_integration: Option<bool>,
}

/// An opened registry: a checked root and its key.
#[derive(Debug)]
pub struct Registry {
    root: PathBuf,
    key: Key,
}

impl Registry {
    /// Opens (creating if needed) the registry at `root`. The registry keeps the
    /// root canonicalised (absolute, no symlinks, SPEC.md §9.1): it is handed to
    /// daemons and to programs (`LATCH_ROOT`), whose working directory differs.
    pub fn open(root: &Path) -> Result<Self, RegistryError> {
        root::ensure_root(root)?;
        let root = root
            .canonicalize()
            .map_err(|e| RegistryError::io(format!("resolve {}", root.display()), e))?;
        let key = Key::load_or_create(&root.join(KEY_FILE))?;
        Ok(Self { root, key })
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The key.
    pub fn key(&self) -> &Key {
        &self.key
    }

    fn file(&self, id: &SessionId, ext: &str) -> PathBuf {
        self.root.join(format!("{id}.{ext}"))
    }

    /// `<root>/<id>.sock`.
    pub fn socket_path(&self, id: &SessionId) -> PathBuf {
        self.file(id, "sock")
    }

    /// `<root>/<id>.json`.
    pub fn record_path(&self, id: &SessionId) -> PathBuf {
        self.file(id, "json")
    }

    /// `<root>/<id>.lock`.
    pub fn lock_path(&self, id: &SessionId) -> PathBuf {
        self.file(id, "lock")
    }

    /// `<root>/<id>.log` (the daemon's stderr).
    pub fn log_path(&self, id: &SessionId) -> PathBuf {
        self.file(id, "log")
    }

    /// `<root>/<id>.log.1`: the daemon's previous log, once rotated.
    pub fn rotated_log_path(&self, id: &SessionId) -> PathBuf {
        self.file(id, "log.1")
    }

    /// `<root>/<id>.events.jsonl`.
    pub fn events_path(&self, id: &SessionId) -> PathBuf {
        self.file(id, "events.jsonl")
    }

    /// Refuses an id that cannot be created: a reserved one, or one whose socket path
    /// would not fit `sun_path`.
    pub fn check_new_id(&self, id: &SessionId) -> Result<(), RegistryError> {
        if is_reserved(id) {
            return Err(RegistryError::ReservedId { id: id.to_string() });
        }
        self.check_socket_fits(id)
    }

    /// Refuses an id whose socket path would not fit `sun_path`.
    pub fn check_socket_fits(&self, id: &SessionId) -> Result<(), RegistryError> {
        let path = self.socket_path(id);
        let len = path.as_os_str().as_bytes().len();
        if len > SUN_PATH_MAX {
            return Err(RegistryError::IdTooLongForSocket {
                path,
                len,
                max: SUN_PATH_MAX,
            });
        }
        Ok(())
    }

    /// A fresh random id, `s-` and 8 lowercase hex digits, for sessions created
    /// without one.
    pub fn fresh_id(&self) -> Result<SessionId, RegistryError> {
        use ring::rand::SecureRandom;
        let mut bytes = [0u8; 4];
        ring::rand::SystemRandom::new()
            .fill(&mut bytes)
            .map_err(|_| RegistryError::NoRandomness)?;
        let id = format!("s-{:08x}", u32::from_be_bytes(bytes));
        // Always valid: "s-" and eight hex digits.
        SessionId::new(id).map_err(|_| RegistryError::NoRandomness)
    }

    /// The registry-wide default legacy policy: `legacyPolicy` in
    /// `<root>/defaults.json`, or `observe` when the file does not exist. A file that
    /// exists but cannot be read or parsed is an error, never a silent default.
    pub fn default_legacy_policy(&self) -> Result<latch_wire::LegacyPolicy, RegistryError> {
        self.defaults().map(|d| d.legacy_policy)
    }

    /// `<root>/defaults.json` (SPEC §9.1), or every default when it does not exist.
    /// A file that exists but cannot be read or parsed is an error.
    pub fn defaults(&self) -> Result<Defaults, RegistryError> {
        let path = self.root.join(DEFAULTS_FILE);
        let parsed = match file::read_bounded(&path, file::FileKind::Defaults) {
            Ok(None) => return Ok(Default::default()),
            Err(e) => Err(e.reason()),
            Ok(Some(bytes)) => serde_json::from_slice::<Defaults>(&bytes).map_err(|e| {
                if serde_json::from_slice::<Record>(&bytes).is_ok() {
                    // Before `defaults` was reserved, a session could take that id.
                    format!(
                        "it holds the record of a session with id `defaults`, made by an \
                         older latch before the id was reserved; end and remove that \
                         session (latch rm --force defaults) ({e})"
                    )
                } else {
                    e.to_string()
                }
            }),
        };
        parsed.map_err(|reason| RegistryError::Corrupt { path, reason })
    }

    /// Mints a fresh incarnation for `id`.
    pub fn mint(&self, id: &SessionId) -> Result<Incarnation, RegistryError> {
        self.key.mint(id)
    }

    /// Whether `inc` was minted for `id` under this registry's key.
    pub fn verify(&self, id: &SessionId, inc: &Incarnation) -> bool {
        self.key.verify(id, inc)
    }

    /// Takes the session lock, waiting at most `wait`.
    pub fn lock(&self, id: &SessionId, wait: Duration) -> Result<SessionLock, RegistryError> {
        SessionLock::acquire(&self.lock_path(id), id, wait)
    }

    /// Reads a record without the lock (writes are atomic renames, so never torn),
    /// and verifies it under the key: its incarnation must be minted for its id, and
    /// its `ownerMac` must bind its owner (or the absence of one) to that creation.
    /// A record that fails either, or has no `ownerMac`, is `Corrupt`, a degraded
    /// read (SPEC.md §9.3), never an unowned record or someone else's.
    pub fn read_record(&self, id: &SessionId) -> Result<Option<Record>, RegistryError> {
        let path = self.record_path(id);
        let Some(record) = record::read_record_file(&path, id)? else {
            return Ok(None);
        };
        let corrupt = |reason: &str| RegistryError::Corrupt {
            path: path.clone(),
            reason: reason.to_owned(),
        };
        if !self.key.verify(id, &record.incarnation) {
            return Err(corrupt(
                "its incarnation was not minted for this id under the registry key (edited by hand, or another root's?)",
            ));
        }
        let Some(mac) = &record.owner_mac else {
            return Err(corrupt(
                "it has no ownerMac, which every record carries (edited by hand?)",
            ));
        };
        let ok = record::from_hex(mac).is_some_and(|mac| {
            self.key
                .verify_owner(id, &record.incarnation, record.owner.as_ref(), &mac)
        });
        if !ok {
            return Err(corrupt(
                "its owner does not verify against ownerMac under the registry key (edited by hand?)",
            ));
        }
        Ok(Some(record))
    }

    /// The `ownerMac` text binding `owner` (or its absence) to `{id, inc}` (SPEC.md
    /// §2.4).
    pub fn owner_mac(
        &self,
        id: &SessionId,
        inc: &Incarnation,
        owner: Option<&latch_wire::Owner>,
    ) -> String {
        record::to_hex(&self.key.owner_mac(id, inc, owner))
    }

    /// Writes a record under its session lock.
    pub fn write_record(&self, lock: &SessionLock, record: &Record) -> Result<(), RegistryError> {
        if lock.id() != &record.id {
            return Err(RegistryError::WrongLock {
                lock: lock.id().to_string(),
                record: record.id.to_string(),
            });
        }
        let mut record = record.clone();
        record.version = record.needed_version();
        let record = &record;
        let bytes = serde_json::to_vec_pretty(record).map_err(|source| RegistryError::Encode {
            what: "record",
            source,
        })?;
        if bytes.len() as u64 > file::RECORD_MAX_BYTES {
            // Never write a record no reader would read (SPEC §9.14).
            return Err(RegistryError::io(
                format!("write {}", self.record_path(&record.id).display()),
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "the record would be {} bytes, over RECORD_MAX_BYTES ({})",
                        bytes.len(),
                        file::RECORD_MAX_BYTES
                    ),
                ),
            ));
        }
        record::write_atomic(&self.record_path(&record.id), &bytes)
    }

    /// Removes a session's record, final screen, log and lock file, under its lock. The events
    /// file is kept: it is the id's history across incarnations, ending with the
    /// `removed` event (bounded in size, §9.9). The socket is not touched here: only
    /// its daemon, or a caller that proved it dead, removes it (see
    /// [`Registry::remove_stale_socket`]).
    ///
    /// Nothing is removed halfway: when one of them is a directory (which latch
    /// never makes), nothing is removed and the error names it (SPEC §9.15); callers
    /// check [`Registry::check_removable`] before they log `removed`.
    pub fn remove_files(&self, lock: SessionLock) -> Result<(), RegistryError> {
        let id = lock.id().clone();
        self.check_removable(&id)?;
        for path in self.removable_paths(&id) {
            match fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(RegistryError::io(format!("remove {}", path.display()), e)),
            }
        }
        lock.unlink()
            .map_err(|e| RegistryError::io("remove lock file", e))?;
        Ok(())
    }

    fn removable_paths(&self, id: &SessionId) -> [PathBuf; 5] {
        [
            self.record_path(id),
            self.final_screen_path(id),
            self.checkpoint_path(id),
            self.log_path(id),
            self.rotated_log_path(id),
        ]
    }

    /// Whether [`Registry::remove_files`] can remove every file of `id`: none of them
    /// is a directory. A directory is degraded (`Corrupt`, exit 7), named, and
    /// left for the user (SPEC §9.15).
    pub fn check_removable(&self, id: &SessionId) -> Result<(), RegistryError> {
        for path in self.removable_paths(id) {
            if fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
                return Err(RegistryError::Corrupt {
                    path,
                    reason: "it is a directory, which latch never makes nor removes; \
                             nothing was removed"
                        .into(),
                });
            }
        }
        Ok(())
    }

    /// Unlinks `<id>.sock` only if connecting to it fails (nobody is listening),
    /// under the session lock. Returns whether it was removed. A socket that
    /// answers is never unlinked.
    pub fn remove_stale_socket(&self, lock: &SessionLock) -> Result<bool, RegistryError> {
        let path = self.socket_path(lock.id());
        match std::os::unix::net::UnixStream::connect(&path) {
            Ok(_) => Ok(false),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                match fs::remove_file(&path) {
                    Ok(()) => Ok(true),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
                    Err(e) => Err(RegistryError::io(format!("remove {}", path.display()), e)),
                }
            }
            Err(e) => Err(RegistryError::io(format!("probe {}", path.display()), e)),
        }
    }

    /// Every valid, unreserved id with a file `<id><suffix>` in the root, sorted.
    pub fn ids_with_suffix(&self, suffix: &str) -> Result<Vec<SessionId>, RegistryError> {
        let dir = fs::read_dir(&self.root)
            .map_err(|e| RegistryError::io(format!("read {}", self.root.display()), e))?;
        let mut ids = Vec::new();
        for entry in dir {
            let entry = entry.map_err(|e| RegistryError::io("read registry", e))?;
            let name = entry.file_name();
            let Some(stem) = name.as_bytes().strip_suffix(suffix.as_bytes()) else {
                continue;
            };
            if let Ok(id) = SessionId::new(OsStr::from_bytes(stem).to_string_lossy()) {
                if !is_reserved(&id) {
                    ids.push(id);
                }
            }
        }
        ids.sort();
        Ok(ids)
    }

    /// Every id with a record file, sorted, plus the names of `.json` files that are
    /// not valid ids (reported, never dropped silently). Reserved ids are not session
    /// ids: `defaults.json` is configuration.
    pub fn list_ids(&self) -> Result<(Vec<SessionId>, Vec<String>), RegistryError> {
        let mut ids = Vec::new();
        let mut bad = Vec::new();
        let dir = fs::read_dir(&self.root)
            .map_err(|e| RegistryError::io(format!("read {}", self.root.display()), e))?;
        for entry in dir {
            let entry = entry.map_err(|e| RegistryError::io("read registry", e))?;
            let name = entry.file_name();
            let Some(stem) = name.as_bytes().strip_suffix(b".json") else {
                continue;
            };
            let stem = OsStr::from_bytes(stem).to_string_lossy().into_owned();
            match SessionId::new(stem.clone()) {
                Ok(id) if is_reserved(&id) => {}
                Ok(id) => ids.push(id),
                Err(_) => bad.push(stem),
            }
        }
        ids.sort();
        bad.sort();
        Ok((ids, bad))
    }
}

/// Whether `id` is reserved (SPEC.md §2.1).
pub fn is_reserved(id: &SessionId) -> bool {
    RESERVED_IDS.contains(&id.as_str())
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Formats milliseconds since the Unix epoch as ISO-8601 UTC with milliseconds, the
/// shape of JavaScript's `Date.prototype.toISOString` (`1970-01-01T00:00:00.000Z`),
/// which the legacy `pty` clients parse.
pub fn iso8601_ms(ms: u64) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
        .unwrap_or_else(|| "9999-12-31T23:59:59.999Z".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_default_comes_from_the_defaults_file() {
        let tmp = tempfile::tempdir().unwrap();
        let reg = Registry::open(&tmp.path().join("r")).unwrap();
        assert_eq!(
            reg.default_legacy_policy().unwrap(),
            latch_wire::LegacyPolicy::Observe
        );
        fs::write(
            reg.root().join(DEFAULTS_FILE),
            br#"{"legacyPolicy": "off"}"#,
        )
        .unwrap();
        assert_eq!(
            reg.default_legacy_policy().unwrap(),
            latch_wire::LegacyPolicy::Off
        );
        fs::write(
            reg.root().join(DEFAULTS_FILE),
            br#"{"legacyPolicy": "sometimes"}"#,
        )
        .unwrap();
        assert!(matches!(
            reg.default_legacy_policy(),
            Err(RegistryError::Corrupt { .. })
        ));
        fs::write(reg.root().join(DEFAULTS_FILE), br#"{"detachKey": "^]"}"#).unwrap();
        let d = reg.defaults().unwrap();
        assert_eq!(d.detach_key.as_deref(), Some("^]"));
        assert_eq!(d.legacy_policy, latch_wire::LegacyPolicy::Observe);
    }

    #[test]
    fn a_record_whose_owner_does_not_verify_is_corrupt() {
        use latch_wire::Owner;
        let tmp = tempfile::tempdir().unwrap();
        let reg = Registry::open(&tmp.path().join("r")).unwrap();
        let id = SessionId::new("s").unwrap();
        let lock = reg.lock(&id, Duration::ZERO).unwrap();
        let me = ProcIdentity::of(std::process::id()).unwrap();
        let inc = reg.mint(&id).unwrap();
        let a = Owner::new("A").unwrap();
        let mut rec = Record {
            version: RECORD_VERSION,
            id: id.clone(),
            incarnation: inc,
            display_name: None,
            command: vec!["sh".into()],
            cwd: "/".into(),
            created_at_ms: 1,
            daemon: me.clone(),
            child: me,
            tags: Default::default(),
            legacy_policy: Default::default(),
            exit: None,
            tty: None,
            owner: Some(a.clone()),
            owner_mac: Some(reg.owner_mac(&id, &inc, Some(&a))),
            restart: None,
            previous_incarnation: None,
            parent: None,
            kill_requested_at_ms: None,
            status_reason: None,
            resume_command: None,
            env: None,
            extra: Default::default(),
        };
        reg.write_record(&lock, &rec).unwrap();
        assert_eq!(reg.read_record(&id).unwrap().unwrap().owner, Some(a));
        let corrupt = |rec: &Record| {
            reg.write_record(&lock, rec).unwrap();
            matches!(reg.read_record(&id), Err(RegistryError::Corrupt { .. }))
        };
        let good = rec.clone();
        rec.owner = Some(Owner::new("B").unwrap());
        assert!(corrupt(&rec), "owner swapped");
        rec.owner = None;
        assert!(corrupt(&rec), "owner stripped, mac kept");
        rec = good.clone();
        rec.owner_mac = None;
        assert!(corrupt(&rec), "mac stripped, owner kept");
        rec.owner_mac = Some("zz".into());
        assert!(corrupt(&rec), "mac not hex");
        // Neither field: no downgrade to "written before owners" (SPEC §9.3).
        rec.owner = None;
        rec.owner_mac = None;
        assert!(corrupt(&rec), "both stripped");
        // An incarnation never minted for the id, with a mac made for it anyway.
        let forged = latch_wire::Incarnation::from_parts([7; 16], [9; 16]);
        rec.incarnation = forged;
        rec.owner_mac = Some(reg.owner_mac(&id, &forged, None));
        assert!(corrupt(&rec), "never-minted incarnation");
        rec.incarnation = inc;
        // An unowned record of this build binds the absence too.
        rec.owner_mac = Some(reg.owner_mac(&id, &inc, None));
        reg.write_record(&lock, &rec).unwrap();
        assert_eq!(reg.read_record(&id).unwrap().unwrap().owner, None);
    }

    #[test]
    fn reserved_ids_are_refused_and_never_listed() {
        let tmp = tempfile::tempdir().unwrap();
        let reg = Registry::open(&tmp.path().join("r")).unwrap();
        let defaults = SessionId::new("defaults").unwrap();
        assert!(matches!(
            reg.check_new_id(&defaults),
            Err(RegistryError::ReservedId { .. })
        ));
        assert!(reg
            .check_new_id(&SessionId::new("defaults2").unwrap())
            .is_ok());
        fs::write(
            reg.root().join(DEFAULTS_FILE),
            br#"{"legacyPolicy": "off"}"#,
        )
        .unwrap();
        assert_eq!(reg.list_ids().unwrap(), (Vec::new(), Vec::new()));
        // No file a registry keeps for an id is a registry file.
        let id = SessionId::new("registry").unwrap();
        for p in [
            reg.record_path(&id),
            reg.socket_path(&id),
            reg.lock_path(&id),
            reg.log_path(&id),
            reg.rotated_log_path(&id),
            reg.events_path(&id),
            reg.final_screen_path(&id),
        ] {
            assert_ne!(p, reg.root().join(KEY_FILE));
            assert_ne!(p, reg.root().join(DEFAULTS_FILE));
        }
    }

    #[test]
    fn socket_path_limit() {
        let tmp = tempfile::tempdir().unwrap();
        let reg = Registry::open(&tmp.path().join("r".repeat(60))).unwrap();
        let base = reg.root().as_os_str().len() + "/".len() + ".sock".len();
        let fits = SessionId::new("a".repeat(SUN_PATH_MAX - base)).unwrap();
        assert!(reg.check_socket_fits(&fits).is_ok());
        let too_long = SessionId::new("a".repeat(SUN_PATH_MAX - base + 1)).unwrap();
        assert!(matches!(
            reg.check_socket_fits(&too_long),
            Err(RegistryError::IdTooLongForSocket { .. })
        ));
    }

    #[test]
    fn stale_socket_is_removed_but_a_live_one_is_not() {
        let tmp = tempfile::tempdir().unwrap();
        let reg = Registry::open(&tmp.path().join("r")).unwrap();
        let id = SessionId::new("s").unwrap();
        let lock = reg.lock(&id, Duration::ZERO).unwrap();
        let path = reg.socket_path(&id);
        let live = std::os::unix::net::UnixListener::bind(&path).unwrap();
        assert!(!reg.remove_stale_socket(&lock).unwrap());
        assert!(path.exists());
        drop(live);
        assert!(reg.remove_stale_socket(&lock).unwrap());
        assert!(!path.exists());
    }
}
