//! The one way latch opens a file in the root (SPEC §9.1, §9.14).
//!
//! Every read opens `O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC`, so a symlink
//! is refused and a FIFO never blocks the open; `fstat` then refuses anything that
//! is not a regular file, and at most the kind's cap (plus one byte, to tell an
//! oversized file) is read. Appends open the same way, with `O_WRONLY | O_APPEND |
//! O_CREAT`, and refuse a non-regular file too, so a FIFO planted at an append
//! target never freezes the writer (it may hold the session lock).

use std::fmt;
use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The kinds of file latch reads in the root, each with its cap (SPEC §9.14).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FileKind {
    /// `<id>.json`.
    Record,
    /// `defaults.json`.
    Defaults,
    /// A receipt (anywhere the caller names).
    Receipt,
    /// `registry.key`.
    Key,
    /// `<id>.events.jsonl`, read from its end.
    Events,
    /// `<id>.screen`.
    FinalScreen,
    /// `<id>.checkpoint`.
    Checkpoint,
}

/// The most read from a record (SPEC §9.14).
pub const RECORD_MAX_BYTES: u64 = 4 << 20;
/// The most read from `defaults.json` (SPEC §9.14).
pub const DEFAULTS_MAX_BYTES: u64 = 64 << 10;
/// The most read from a receipt (SPEC §9.14).
pub const RECEIPT_MAX_BYTES: u64 = 64 << 10;

impl FileKind {
    /// The most bytes read from a file of this kind; a larger one is refused
    /// ([`FileError::TooLarge`]), except an events file, whose last bytes are read.
    pub const fn max_bytes(self) -> u64 {
        match self {
            Self::Record => RECORD_MAX_BYTES,
            Self::Defaults => DEFAULTS_MAX_BYTES,
            Self::Receipt => RECEIPT_MAX_BYTES,
            Self::Key => crate::key::KEY_LEN as u64,
            Self::Events => crate::events::EVENTS_READ_MAX_BYTES,
            Self::FinalScreen => crate::screen::FINAL_SCREEN_MAX_BYTES,
            Self::Checkpoint => crate::checkpoint::CHECKPOINT_MAX_BYTES,
        }
    }

    /// What the file is, for messages.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Record => "record",
            Self::Defaults => "defaults file",
            Self::Receipt => "receipt",
            Self::Key => "registry key",
            Self::Events => "events file",
            Self::FinalScreen => "final screen",
            Self::Checkpoint => "checkpoint",
        }
    }
}

/// Why a file in the root could not be opened or read. Each names the file.
#[derive(Debug)]
#[non_exhaustive]
pub enum FileError {
    /// A symlink, FIFO, socket, device or directory where a regular file belongs.
    NotRegular {
        /// The file.
        path: PathBuf,
        /// What it is instead (`a symbolic link`, `a FIFO`, …).
        what: &'static str,
    },
    /// Larger than its kind's cap.
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The cap, in bytes.
        max: u64,
    },
    /// Any other failure to open, stat or read it.
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
}

impl FileError {
    /// The file named.
    pub fn path(&self) -> &Path {
        match self {
            Self::NotRegular { path, .. } | Self::TooLarge { path, .. } | Self::Io { path, .. } => {
                path
            }
        }
    }

    /// Why, without the path (for errors that name the path themselves).
    pub fn reason(&self) -> String {
        match self {
            Self::NotRegular { what, .. } => format!("it is {what}, not a regular file"),
            Self::TooLarge { max, .. } => format!("it is larger than {max} bytes"),
            Self::Io { source, .. } => source.to_string(),
        }
    }
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path().display(), self.reason())
    }
}

impl std::error::Error for FileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

fn file_type_name(t: fs::FileType) -> &'static str {
    if t.is_symlink() {
        "a symbolic link"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else {
        "not a regular file"
    }
}

fn checked(path: &Path, opened: io::Result<fs::File>) -> Result<Option<fs::File>, FileError> {
    let io_err = |source| FileError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = match opened {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        // O_NOFOLLOW on a symlink.
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(FileError::NotRegular {
                path: path.to_path_buf(),
                what: "a symbolic link",
            })
        }
        // A directory opened for writing; a device with no reader behind it.
        Err(e) if matches!(e.raw_os_error(), Some(libc::EISDIR | libc::ENXIO)) => {
            let what = fs::symlink_metadata(path)
                .map_or("not a regular file", |m| file_type_name(m.file_type()));
            return Err(FileError::NotRegular {
                path: path.to_path_buf(),
                what,
            });
        }
        Err(e) => return Err(io_err(e)),
    };
    let meta = file.metadata().map_err(io_err)?;
    if !meta.is_file() {
        return Err(FileError::NotRegular {
            path: path.to_path_buf(),
            what: file_type_name(meta.file_type()),
        });
    }
    Ok(Some(file))
}

/// Opens `path` for reading, no-follow and non-blocking, and only if it is a
/// regular file. `Ok(None)`: no such file.
pub fn open_regular(path: &Path) -> Result<Option<fs::File>, FileError> {
    let opened = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path);
    checked(path, opened)
}

/// Opens (creating with `mode` if missing) `path` for appending, no-follow and
/// non-blocking, and only if it is a regular file: a FIFO there is refused
/// without waiting for a reader (SPEC §9.1).
pub fn open_append(path: &Path, mode: u32) -> Result<fs::File, FileError> {
    let opened = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path);
    checked(path, opened)?.ok_or_else(|| FileError::Io {
        path: path.to_path_buf(),
        source: io::Error::from(io::ErrorKind::NotFound),
    })
}

/// The most [`read_capped`] reserves before reading.
const READ_AHEAD: usize = 16 * 1024;

/// Reads at most `max` bytes of an opened file; more is [`FileError::TooLarge`].
pub fn read_capped(path: &Path, file: fs::File, max: u64) -> Result<Vec<u8>, FileError> {
    // Room for a whole record (about 600 bytes) up front: grown from nothing, a
    // read costs seven calls where two do, and `ls` reads every record.
    let mut bytes =
        Vec::with_capacity(usize::try_from(max + 1).map_or(READ_AHEAD, |m| m.min(READ_AHEAD)));
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| FileError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    if bytes.len() as u64 > max {
        return Err(FileError::TooLarge {
            path: path.to_path_buf(),
            max,
        });
    }
    Ok(bytes)
}

/// Reads the whole of `path`, a file of `kind`, through [`open_regular`], at most
/// [`FileKind::max_bytes`]. `Ok(None)`: no such file.
pub fn read_bounded(path: &Path, kind: FileKind) -> Result<Option<Vec<u8>>, FileError> {
    match open_regular(path)? {
        None => Ok(None),
        Some(f) => read_capped(path, f, kind.max_bytes()).map(Some),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_fifos_symlinks_directories_and_oversize_without_blocking() {
        let tmp = tempfile::tempdir().unwrap();
        let fifo = tmp.path().join("f");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let err = read_bounded(&fifo, FileKind::Record).unwrap_err();
        assert!(
            matches!(err, FileError::NotRegular { what: "a FIFO", .. }),
            "{err}"
        );
        let err = open_append(&fifo, 0o600).unwrap_err();
        assert!(matches!(err, FileError::NotRegular { .. }), "{err}");

        let link = tmp.path().join("l");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        let err = read_bounded(&link, FileKind::Record).unwrap_err();
        assert!(matches!(err, FileError::NotRegular { .. }), "{err}");
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert!(open_append(&link, 0o600).is_err());

        let dir = tmp.path().join("d");
        fs::create_dir(&dir).unwrap();
        let err = read_bounded(&dir, FileKind::Record).unwrap_err();
        assert!(
            matches!(
                err,
                FileError::NotRegular {
                    what: "a directory",
                    ..
                }
            ),
            "{err}"
        );
        assert!(open_append(&dir, 0o600).is_err());

        let big = tmp.path().join("b");
        let max = usize::try_from(DEFAULTS_MAX_BYTES).unwrap();
        fs::write(&big, vec![b' '; max + 1]).unwrap();
        let err = read_bounded(&big, FileKind::Defaults).unwrap_err();
        assert!(matches!(err, FileError::TooLarge { .. }), "{err}");
        assert!(err.to_string().starts_with(&big.display().to_string()));
        fs::write(&big, vec![b' '; max]).unwrap();
        assert_eq!(
            read_bounded(&big, FileKind::Defaults)
                .unwrap()
                .unwrap()
                .len() as u64,
            DEFAULTS_MAX_BYTES
        );
        assert!(read_bounded(&tmp.path().join("none"), FileKind::Record)
            .unwrap()
            .is_none());
    }
}
