//! The registry's typed errors.

use std::fmt;
use std::path::PathBuf;

/// Something the registry could not do. Each variant maps to one exit code in the CLI.
#[derive(Debug)]
#[non_exhaustive]
pub enum RegistryError {
    /// The root is unsafe: wrong owner, wrong mode, a symlink, or not a directory.
    UnsafeRoot {
        /// The root.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The key file is unsafe or malformed.
    UnsafeKey {
        /// The key file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// No home directory to derive the default root from.
    NoRoot,
    /// The socket path for this id would not fit `sun_path`.
    IdTooLongForSocket {
        /// The path that would not fit.
        path: PathBuf,
        /// Its length in bytes.
        len: usize,
        /// The limit in bytes.
        max: usize,
    },
    /// The id is reserved for a registry file (SPEC.md §2.1).
    ReservedId {
        /// The id.
        id: String,
    },
    /// The session lock stayed held by someone else past the wait.
    Busy {
        /// The session.
        id: String,
    },
    /// A file of the root (the record, its final screen, `defaults.json`, an events
    /// file) exists but cannot be read or parsed: a degraded read, not an absence.
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The system's random number generator failed.
    NoRandomness,
    /// A record or event could not be encoded as JSON.
    Encode {
        /// What was being encoded.
        what: &'static str,
        /// The encoder's error.
        source: serde_json::Error,
    },
    /// A record was to be written under another id's lock (a bug in the caller).
    WrongLock {
        /// The lock's id.
        lock: String,
        /// The record's id.
        record: String,
    },
    /// An IO error on a registry file.
    Io {
        /// What was being done.
        context: String,
        /// The error.
        source: std::io::Error,
    },
}

impl From<crate::file::FileError> for RegistryError {
    /// A file in the root that cannot be read (not regular, too large, or an IO
    /// error) is a degraded read naming it (SPEC §9.3, §9.14).
    fn from(e: crate::file::FileError) -> Self {
        Self::Corrupt {
            path: e.path().to_path_buf(),
            reason: e.reason(),
        }
    }
}

impl RegistryError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }
}

impl fmt::Display for RegistryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnsafeRoot { path, reason } => {
                write!(f, "refusing registry root {}: {reason}", path.display())
            }
            Self::UnsafeKey { path, reason } => {
                write!(f, "refusing registry key {}: {reason}", path.display())
            }
            Self::NoRoot => f.write_str(
                "cannot find a registry root: set --root, LATCH_ROOT, XDG_STATE_HOME or HOME",
            ),
            Self::IdTooLongForSocket { path, len, max } => write!(
                f,
                "socket path {} is {len} bytes, over the {max}-byte limit: use a shorter id or root",
                path.display()
            ),
            Self::ReservedId { id } => write!(
                f,
                "session id {id:?} is reserved (its record would be the registry's \
                 {id}.json); choose another id"
            ),
            Self::Busy { id } => write!(f, "session {id} is busy (its lock is held elsewhere)"),
            Self::Corrupt { path, reason } => {
                let shown = path.display().to_string();
                write!(
                    f,
                    "{shown} is unreadable: {reason}; latch changes nothing it cannot \
                     read: inspect the file, or move it aside with `mv -- {} {}` and run \
                     `latch gc` (SPEC.md §9.3)",
                    shell_quote(&shown),
                    shell_quote(&format!("{shown}.unreadable"))
                )
            }
            Self::NoRandomness => f.write_str("the system's random number generator failed"),
            Self::Encode { what, source } => write!(f, "cannot encode {what}: {source}"),
            Self::WrongLock { lock, record } => {
                write!(f, "record for {record} written under the lock of {lock}")
            }
            Self::Io { context, source } => write!(f, "{context}: {source}"),
        }
    }
}

impl std::error::Error for RegistryError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            Self::Encode { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// `s` quoted for a POSIX shell (single quotes, `'` written as `'\''`).
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}
