//! Log lines and timestamps. The daemon's stderr is `<root>/<id>.log`; each line is
//! `<ISO-8601 UTC time> latch-daemon[<pid>]: <message>`. Input bytes are never logged.
//!
//! The log is bounded (SPEC.md §9.1): once the daemon knows its log's path
//! ([`rotate_at`]), a line that would take the log past `LOG_MAX_BYTES` first renames
//! it to `<id>.log.1` (replacing the previous one) and points stderr at a fresh
//! `<id>.log`, so the two files never hold more than twice the limit.

use std::fmt;
use std::fs;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use latch_registry::LOG_MAX_BYTES;

/// `<id>.log` and `<id>.log.1`, once known.
static ROTATION: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
/// Serialises writing and rotating.
static WRITING: Mutex<()> = Mutex::new(());

/// From now on, rotate the log at `log` (which stderr must be) to `rotated`.
pub(crate) fn rotate_at(log: PathBuf, rotated: PathBuf) {
    let _ = ROTATION.set((log, rotated));
}

/// Writes one log line to stderr (fd 2) in a single `write`, so lines from
/// successive daemons appending to one log never interleave. Used through the
/// crate's `log!` macro. Logging never fails the daemon.
pub(crate) fn line(args: fmt::Arguments<'_>) {
    let text = format!(
        "{} latch-daemon[{}]: {args}\n",
        iso8601_ms(latch_registry::now_ms()),
        std::process::id()
    );
    let _guard = WRITING.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((log, rotated)) = ROTATION.get() {
        if let Err(e) = rotate_if_full(log, rotated, text.len() as u64) {
            let msg = format!("cannot rotate {}: {e}\n", log.display());
            let _ = write_all_fd(std::io::stderr().as_fd(), msg.as_bytes());
        }
    }
    let _ = write_all_fd(std::io::stderr().as_fd(), text.as_bytes());
}

/// Rotates when `incoming` more bytes would take stderr past the limit, and only
/// while stderr is still the file at `log` (never someone else's file).
fn rotate_if_full(log: &PathBuf, rotated: &PathBuf, incoming: u64) -> io::Result<()> {
    let err = nix::sys::stat::fstat(std::io::stderr().as_fd())?;
    let size = u64::try_from(err.st_size).unwrap_or(0);
    if size == 0 || size + incoming <= LOG_MAX_BYTES {
        return Ok(());
    }
    let current = match fs::symlink_metadata(log) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if (current.dev(), current.ino()) != (err.st_dev, err.st_ino) {
        return Ok(());
    }
    fs::rename(log, rotated)?;
    let fresh = match fs::OpenOptions::new()
        .append(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(log)
    {
        // Only a creator of this id can have made it meanwhile (the root is ours
        // alone): append to it, as that creator's daemon would, through the one
        // reader's rules (no-follow, non-blocking, a regular file only: SPEC §9.1).
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            latch_registry::file::open_append(log, 0o600)
                .map_err(|e| io::Error::other(e.to_string()))?
        }
        other => other?,
    };
    nix::unistd::dup2_stderr(&fresh)?;
    Ok(())
}

/// `write(2)` until everything is written, without std's stdio locks or buffers.
pub(crate) fn write_all_fd(
    fd: std::os::fd::BorrowedFd<'_>,
    mut bytes: &[u8],
) -> std::io::Result<()> {
    while !bytes.is_empty() {
        match nix::unistd::write(fd, bytes) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = bytes.get(n..).unwrap_or_default(),
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

pub(crate) use latch_registry::iso8601_ms;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso8601_table() {
        let cases = [
            (0, "1970-01-01T00:00:00.000Z"),
            (951_782_400_000, "2000-02-29T00:00:00.000Z"),
            (1_700_000_000_123, "2023-11-14T22:13:20.123Z"),
            (4_107_542_399_999, "2100-02-28T23:59:59.999Z"),
            (1_709_251_199_000, "2024-02-29T23:59:59.000Z"),
        ];
        for (ms, want) in cases {
            assert_eq!(iso8601_ms(ms), want, "{ms}");
        }
    }
}

/// What happened to one legacy connection, for [`legacy_seen`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LegacySeen {
    /// Served under `observe` or `full`.
    Served,
    /// Closed at its first packet under `off`.
    Refused,
    /// Its input or resize was dropped (once per connection).
    Dropped,
}

/// Legacy connections counted since the last summary line.
#[derive(Debug, Default)]
struct LegacyCounts {
    served: u64,
    refused: u64,
    dropped: u64,
    last: Option<std::time::Instant>,
}

static LEGACY: Mutex<LegacyCounts> = Mutex::new(LegacyCounts {
    served: 0,
    refused: 0,
    dropped: 0,
    last: None,
});

/// How often, at most, legacy connections are summarised in the log.
const LEGACY_SUMMARY_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// Counts a legacy connection event; logs one summary line at most once a minute
/// (the first event at once), never a line per connection.
pub(crate) fn legacy_seen(what: LegacySeen, policy: &str) {
    let now = std::time::Instant::now();
    let summary = {
        let mut c = LEGACY.lock().unwrap_or_else(|e| e.into_inner());
        match what {
            LegacySeen::Served => c.served += 1,
            LegacySeen::Refused => c.refused += 1,
            LegacySeen::Dropped => c.dropped += 1,
        }
        if c.last
            .is_some_and(|t| now.duration_since(t) < LEGACY_SUMMARY_EVERY)
        {
            return;
        }
        let s = format!(
            "legacy connections since the last summary (policy {policy}): {} served, {} refused, {} with input or resize dropped",
            c.served, c.refused, c.dropped
        );
        *c = LegacyCounts {
            last: Some(now),
            ..LegacyCounts::default()
        };
        s
    };
    line(format_args!("{summary}"));
}
