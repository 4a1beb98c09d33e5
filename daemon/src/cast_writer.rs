//! A recording's writer (SPEC §4.8): a thread of its own that opens the cast file
//! and writes asciicast v2 lines to it, so that the disk (or a FIFO's reader) never
//! stalls the daemon's one thread. The daemon hands it timestamped events through
//! a channel whose bytes it counts ([`Shared::queued`]); the writer only turns
//! them into lines.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{oneshot, Notify};

/// The writer thread's stack: it formats lines of at most a read's size.
const STACK: usize = 256 * 1024;
/// Output queued for one writer at most before the daemon stops queueing and
/// later re-reads the ring (SPEC §8 `CAST_QUEUE_BYTES`).
pub(crate) const QUEUE_BYTES: usize = latch_wire::limits::CAST_QUEUE_BYTES;
/// Room kept for the final marker under `--max-bytes`.
pub(crate) const FINAL_RESERVE: u64 = 256;

/// Why a cast file could not be opened (SPEC §4.8).
#[derive(Debug)]
pub(crate) enum OpenError {
    /// Something is already there (and it is not a FIFO).
    Exists,
    /// The last component is a symbolic link: never followed.
    Symlink,
    /// A FIFO nobody reads yet.
    NoReader,
    /// Any other failure.
    Io(io::Error),
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Exists => f.write_str("it already exists; a recording never overwrites a file"),
            Self::Symlink => f.write_str("it is a symbolic link, which a recording never follows"),
            Self::NoReader => f.write_str("it is a FIFO that nobody reads yet"),
            Self::Io(e) => write!(f, "{e}"),
        }
    }
}

/// Opens a cast file: created 0600, exclusively, never through a symlink. The one
/// existing file taken is a FIFO that already has a reader (a live stream).
pub(crate) fn open(path: &str) -> Result<File, OpenError> {
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path);
    match created {
        Ok(f) => Ok(f),
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => open_fifo(path),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => Err(OpenError::Symlink),
        Err(e) => Err(OpenError::Io(e)),
    }
}

/// An existing name: only a FIFO is opened, looked at first through O_PATH (which
/// opens nothing: no device is ever opened by mistake).
fn open_fifo(path: &str) -> Result<File, OpenError> {
    use std::os::unix::fs::FileTypeExt;
    let at = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path);
    let at = match at {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(OpenError::Symlink),
        Err(e) => return Err(OpenError::Io(e)),
    };
    let kind = at.metadata().map_err(OpenError::Io)?.file_type();
    if kind.is_symlink() {
        return Err(OpenError::Symlink);
    }
    if !kind.is_fifo() {
        return Err(OpenError::Exists);
    }
    // Reopened by its descriptor, so it is the FIFO just looked at; non-blocking,
    // so a FIFO without a reader is refused instead of waited for.
    let by_fd = format!("/proc/self/fd/{}", at.as_raw_fd());
    let f = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(by_fd)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ENXIO) => OpenError::NoReader,
            _ => OpenError::Io(e),
        })?;
    // The writer's writes wait for the reader, on the writer's thread.
    let flags = rustix::fs::fcntl_getfl(&f).map_err(|e| OpenError::Io(e.into()))?;
    rustix::fs::fcntl_setfl(&f, flags - rustix::fs::OFlags::NONBLOCK)
        .map_err(|e| OpenError::Io(e.into()))?;
    Ok(f)
}

/// One event for the writer, timed by the daemon (seconds since the recording
/// began, when the daemon read the output), never by the writer.
#[derive(Debug)]
pub(crate) enum Msg {
    /// The header line, first.
    Header(String),
    /// `"o"`: output.
    Output(f64, Bytes),
    /// `"r"`: the terminal's new size.
    Resize(f64, u16, u16),
    /// `"m"`: a marker.
    Marker(f64, String),
    /// The final marker; the recording ends after it.
    End(f64, String),
}

impl Msg {
    /// The bytes it counts in the writer's queue.
    pub(crate) fn weight(&self) -> usize {
        match self {
            Self::Output(_, b) => b.len(),
            Self::Header(s) | Self::Marker(_, s) | Self::End(_, s) => s.len(),
            Self::Resize(..) => 16,
        }
    }
}

/// How a writer ended on its own.
pub(crate) const ENDED_NO: u8 = 0;
/// It reached `--max-bytes`.
pub(crate) const ENDED_MAX: u8 = 1;
/// Its file failed.
pub(crate) const ENDED_FAILED: u8 = 2;
/// It wrote its final marker.
pub(crate) const ENDED_DONE: u8 = 3;

/// What the daemon and the writer share.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    /// Bytes queued for the writer and not yet written.
    pub queued: AtomicUsize,
    /// Bytes written to the file.
    pub written: AtomicU64,
    /// The daemon stopped queueing output: wake it once the queue has room.
    pub lagging: AtomicBool,
    /// `ENDED_*`.
    pub ended: AtomicU8,
}

/// Where the writer's file comes from.
pub(crate) enum Source {
    /// Opened by the daemon already (`new --cast`, before the program starts).
    File(File),
    /// Opened by the writer, which answers through `opened`.
    Path(String, oneshot::Sender<Result<(), OpenError>>),
}

/// Starts a writer thread; it sends `()` on `done` (by dropping it) when it ends.
pub(crate) fn spawn(
    source: Source,
    rx: Receiver<Msg>,
    shared: Arc<Shared>,
    wake: Arc<Notify>,
    max_bytes: Option<u64>,
    done: oneshot::Sender<()>,
) -> io::Result<()> {
    std::thread::Builder::new()
        .name("cast".into())
        .stack_size(STACK)
        .spawn(move || {
            let file = match source {
                Source::File(f) => f,
                Source::Path(path, opened) => match open(&path) {
                    Ok(f) => {
                        let _ = opened.send(Ok(()));
                        f
                    }
                    Err(e) => {
                        let _ = opened.send(Err(e));
                        return;
                    }
                },
            };
            let mut w = Writer {
                out: BufWriter::with_capacity(64 * 1024, file),
                shared: &shared,
                wake: &wake,
                max_bytes,
                carry: Vec::new(),
            };
            let end = w.run(&rx);
            shared.ended.store(end, Ordering::SeqCst);
            shared.queued.store(0, Ordering::SeqCst);
            wake.notify_one();
            drop(done);
        })
        .map(drop)
}

struct Writer<'a> {
    out: BufWriter<File>,
    shared: &'a Shared,
    wake: &'a Notify,
    max_bytes: Option<u64>,
    /// The start of a UTF-8 sequence that the next output chunk completes.
    carry: Vec<u8>,
}

impl Writer<'_> {
    /// Writes what comes until the final marker; returns how it ended.
    fn run(&mut self, rx: &Receiver<Msg>) -> u8 {
        loop {
            let msg = match rx.try_recv() {
                Ok(m) => m,
                Err(TryRecvError::Empty) => {
                    // Everything queued is written: hand it to the file.
                    if self.out.flush().is_err() {
                        return ENDED_FAILED;
                    }
                    match rx.recv() {
                        Ok(m) => m,
                        Err(_) => return ENDED_DONE,
                    }
                }
                Err(TryRecvError::Disconnected) => break,
            };
            let weight = msg.weight();
            let last = matches!(msg, Msg::End(..));
            let step = self.write(msg);
            let left = self
                .shared
                .queued
                .fetch_sub(weight, Ordering::SeqCst)
                .saturating_sub(weight);
            // Room again: the daemon catches up from its ring (SPEC §4.8).
            if left < QUEUE_BYTES / 2 && self.shared.lagging.swap(false, Ordering::SeqCst) {
                self.wake.notify_one();
            }
            match step {
                Ok(true) if !last => {}
                Ok(true) => break,
                Ok(false) => {
                    let _ = self.out.flush();
                    return ENDED_MAX;
                }
                Err(_) => return ENDED_FAILED,
            }
        }
        if self.out.flush().is_err() {
            return ENDED_FAILED;
        }
        ENDED_DONE
    }

    /// Writes one event; `Ok(false)` once `--max-bytes` ended the recording.
    fn write(&mut self, msg: Msg) -> io::Result<bool> {
        let line = match msg {
            Msg::Header(h) => h,
            Msg::Output(t, bytes) => {
                let text = self.text(&bytes);
                if text.is_empty() {
                    return Ok(true);
                }
                event(t, "o", &text)
            }
            Msg::Resize(t, rows, cols) => event(t, "r", &format!("{cols}x{rows}")),
            // A sequence cut before a loss is never completed (SPEC §4.8).
            Msg::Marker(t, label) | Msg::End(t, label) => {
                let rest = std::mem::take(&mut self.carry);
                if !rest.is_empty() {
                    self.line(&event(t, "o", &String::from_utf8_lossy(&rest)))?;
                }
                event(t, "m", &label)
            }
        };
        let written = self.shared.written.load(Ordering::SeqCst);
        if let Some(max) = self.max_bytes {
            if written + line.len() as u64 + FINAL_RESERVE > max {
                let t = last_time(&line);
                let label = format!("latch: --max-bytes {max} reached; the recording ends");
                self.line(&event(t, "m", &label))?;
                return Ok(false);
            }
        }
        self.line(&line)?;
        Ok(true)
    }

    fn line(&mut self, line: &str) -> io::Result<()> {
        self.out.write_all(line.as_bytes())?;
        self.shared
            .written
            .fetch_add(line.len() as u64, Ordering::SeqCst);
        Ok(())
    }

    /// Output as valid UTF-8 (SPEC §4.8): a sequence cut at the chunk's end waits
    /// for the next chunk; invalid bytes become U+FFFD.
    fn text(&mut self, bytes: &[u8]) -> String {
        let mut buf = std::mem::take(&mut self.carry);
        buf.extend_from_slice(bytes);
        let mut out = String::with_capacity(buf.len());
        let mut rest = &buf[..];
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    break;
                }
                Err(e) => {
                    let (ok, bad) = rest.split_at(e.valid_up_to());
                    // `ok` is valid UTF-8, by `valid_up_to`.
                    out.push_str(std::str::from_utf8(ok).unwrap_or_default());
                    match e.error_len() {
                        Some(n) => {
                            out.push('\u{FFFD}');
                            rest = bad.get(n..).unwrap_or_default();
                        }
                        None => {
                            self.carry = bad.to_vec();
                            break;
                        }
                    }
                }
            }
        }
        out
    }
}

/// One event line: `[t, "code", "data"]`.
pub(crate) fn event(t: f64, code: &str, data: &str) -> String {
    let data = serde_json::to_string(data).unwrap_or_else(|_| "\"\"".into());
    format!("[{t:.6}, \"{code}\", {data}]\n")
}

/// The time of an event line (for the marker that replaces it).
fn last_time(line: &str) -> f64 {
    line.strip_prefix('[')
        .and_then(|l| l.split(',').next())
        .and_then(|t| t.parse().ok())
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer_text(chunks: &[&[u8]]) -> String {
        let tmp = tempfile::tempdir().unwrap();
        let f = File::create(tmp.path().join("c")).unwrap();
        let shared = Shared::default();
        let wake = Notify::new();
        let mut w = Writer {
            out: BufWriter::new(f),
            shared: &shared,
            wake: &wake,
            max_bytes: None,
            carry: Vec::new(),
        };
        chunks.iter().map(|c| w.text(c)).collect()
    }

    #[test]
    fn a_sequence_split_across_chunks_is_kept_and_invalid_bytes_replaced() {
        let wide = "界".as_bytes();
        assert_eq!(writer_text(&[&wide[..1], &wide[1..]]), "界");
        assert_eq!(writer_text(&[b"a\xffb", b"\xe7"]), "a\u{FFFD}b");
        assert_eq!(writer_text(&[b"\xe7\x95", b"x"]), "\u{FFFD}x");
    }

    #[test]
    fn event_lines_are_json() {
        let line = event(1.5, "o", "a\"\u{1b}[0m\n");
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v[0], 1.5);
        assert_eq!(v[1], "o");
        assert_eq!(v[2], "a\"\u{1b}[0m\n");
        assert_eq!(last_time(&line), 1.5);
    }
}
