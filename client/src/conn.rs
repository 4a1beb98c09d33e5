//! Connections to a session daemon (SPEC.md §5): connect, check the daemon's
//! uid, HELLO, BIND, then requests. Blocking IO with timeouts; no runtime.

use latch_wire::Size;
use std::io::{self, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use latch_wire::client::{ClientHandshake, Negotiated};
use latch_wire::{ClientFrame, ErrorCode, ExitStatus, ServerFrame, SessionRef, StatusReply};

use crate::error::ClientError;
use crate::options::{AttachMode, PeekOptions};
use crate::proto::{self, Attachment, Inbox, Op, Outbox, Step};

#[path = "conn_terminal.rs"]
mod terminal;

/// Time allowed for connect + HELLO + BIND, and for each request's answer.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// The reading end of a connection.
#[derive(Debug)]
struct FrameReader {
    stream: UnixStream,
    inbox: Inbox,
    /// One read's worth of bytes, allocated once.
    chunk: Box<[u8]>,
}

/// The writing end of a connection.
#[derive(Debug)]
struct FrameWriter {
    stream: UnixStream,
    outbox: Outbox,
}

impl FrameReader {
    /// Reads the next frame. `Ok(None)`: the daemon closed the connection cleanly.
    fn read_frame(&mut self) -> Result<Option<ServerFrame>, ClientError> {
        loop {
            if let Some(f) = self.inbox.decode()? {
                return Ok(Some(f));
            }
            match self.fill(false) {
                Ok(true) => {}
                Ok(false) => return self.inbox.eof(),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.inbox.read_error(e)),
            }
        }
    }

    /// The next frame if one is buffered or readable without waiting: `Ok(None)`
    /// when nothing more has arrived yet. (A close reads as `Some(None)`.)
    fn try_read_frame(&mut self) -> Result<Option<Option<ServerFrame>>, ClientError> {
        loop {
            if let Some(f) = self.inbox.decode()? {
                return Ok(Some(Some(f)));
            }
            match self.fill(true) {
                Ok(true) => {}
                Ok(false) => return self.inbox.eof().map(Some),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.inbox.read_error(e)),
            }
        }
    }

    /// Reads once into the inbox's buffer (without waiting if `nowait`); false
    /// at EOF.
    fn fill(&mut self, nowait: bool) -> io::Result<bool> {
        use nix::sys::socket::{recv, MsgFlags};
        use std::os::fd::AsRawFd;
        let flags = if nowait {
            MsgFlags::MSG_DONTWAIT
        } else {
            MsgFlags::empty()
        };
        let n = recv(self.stream.as_raw_fd(), &mut self.chunk, flags)?;
        self.inbox.feed(self.chunk.get(..n).unwrap_or_default());
        Ok(n > 0)
    }

    /// Sets the read timeout (`None`: block).
    fn set_timeout(&self, t: Option<Duration>) -> Result<(), ClientError> {
        self.stream
            .set_read_timeout(t)
            .map_err(|e| ClientError::failed("", e))
    }
}

impl FrameWriter {
    /// Writes one frame.
    fn write_frame(&mut self, f: &ClientFrame) -> Result<(), ClientError> {
        let bytes = self.outbox.encode(f)?;
        self.stream
            .write_all(bytes)
            .map_err(|e| proto::io_err("write", e))
    }
}

/// A connection that completed HELLO but is not bound: it may only ask STATUS.
#[derive(Debug)]
pub struct Connection {
    reader: FrameReader,
    writer: FrameWriter,
    negotiated: Negotiated,
}

impl Connection {
    /// Connects to the socket at `path` and negotiates a version. `timeout` bounds
    /// the handshake and each later answer.
    pub fn open(path: &Path, timeout: Duration) -> Result<Self, ClientError> {
        let stream = UnixStream::connect(path).map_err(|e| proto::connect_err(path, e))?;
        Self::over(stream, timeout)
    }

    /// Negotiates over an already connected stream: checks the peer's uid, sends
    /// HELLO and checks the answer (SPEC.md §5.1).
    pub fn over(stream: UnixStream, timeout: Duration) -> Result<Self, ClientError> {
        proto::check_peer_uid(&stream)?;
        stream
            .set_read_timeout(Some(timeout))
            .and_then(|()| stream.set_write_timeout(Some(timeout)))
            .map_err(|e| ClientError::failed("", e))?;
        let write_half = stream.try_clone().map_err(|e| ClientError::failed("", e))?;
        let (inbox, outbox) = proto::halves();
        let mut writer = FrameWriter {
            stream: write_half,
            outbox,
        };
        let mut reader = FrameReader {
            stream,
            inbox,
            chunk: vec![0; proto::READ_CHUNK].into_boxed_slice(),
        };
        let hs = ClientHandshake::default();
        let wrote = writer.write_frame(&hs.hello());
        let negotiated = proto::welcome(&hs, wrote, reader.read_frame())?;
        Ok(Self {
            reader,
            writer,
            negotiated,
        })
    }

    /// The negotiated version and limits.
    pub fn negotiated(&self) -> Negotiated {
        self.negotiated
    }

    /// Asks who the daemon is (legal before BIND); the answer comes from the
    /// daemon's memory, never from the registry (SPEC.md §11 I2).
    pub fn status(&mut self) -> Result<StatusReply, ClientError> {
        self.run(proto::status())
    }

    /// STATUS with a version-3 daemon's output facts (`None` from version 2).
    pub fn status_full(
        &mut self,
    ) -> Result<(StatusReply, Option<latch_wire::OutputFacts>), ClientError> {
        self.run(proto::status_full())
    }

    /// Binds to `target`; the daemon refuses any other creation
    /// ([`ClientError::Replaced`]).
    pub fn bind(mut self, target: &SessionRef) -> Result<Bound, ClientError> {
        self.run(proto::bind(target))?;
        Ok(Bound {
            conn: self,
            target: target.clone(),
        })
    }

    /// Sends `op`'s frames, then feeds it frames until it is done.
    fn run<T>(&mut self, op: Op<T>) -> Result<T, ClientError> {
        for f in &op.send {
            self.writer.write_frame(f)?;
        }
        let mut step = op.step;
        loop {
            if let Step::Done(r) = step(self.reader.read_frame()?) {
                return r;
            }
        }
    }
}

/// A connection bound to exactly one session creation: effects are allowed, and
/// reach that creation or nothing.
#[derive(Debug)]
pub struct Bound {
    conn: Connection,
    target: SessionRef,
}

impl Bound {
    /// The creation this connection is bound to.
    pub fn target(&self) -> &SessionRef {
        &self.target
    }

    /// The negotiated version and limits.
    pub fn negotiated(&self) -> latch_wire::client::Negotiated {
        self.conn.negotiated
    }

    /// The daemon's status (authored from its memory).
    pub fn status(&mut self) -> Result<StatusReply, ClientError> {
        self.conn.status()
    }

    /// The daemon's status and, from a daemon of protocol version 3, its output
    /// facts: the output cursor, when the program last wrote, and the shell's
    /// state (SPEC.md §4.2, §4.6); `None` from a version-2 daemon.
    pub fn status_full(
        &mut self,
    ) -> Result<(StatusReply, Option<latch_wire::OutputFacts>), ClientError> {
        self.conn.status_full()
    }

    /// The output the program wrote after output cursor `since` that the daemon
    /// still holds (its ring, SPEC.md §8), at most `max` bytes, with how much after
    /// `since` was lost. A cursor means something only in the creation this
    /// connection is bound to. A version-2 daemon: [`ClientError::Protocol`]
    /// (exit 8).
    pub fn output_since(
        &mut self,
        since: u64,
        max: u32,
    ) -> Result<latch_wire::OutputRange, ClientError> {
        let op = proto::output_since(&self.conn.negotiated, since, max)?;
        self.conn.run(op)
    }

    /// CAST_START or CASTS (SPEC.md §4.8): starts, lists or stops recordings; the
    /// daemon's answer. A version-2 daemon: [`ClientError::Protocol`] (exit 8).
    pub fn casts(&mut self, frame: ClientFrame) -> Result<Vec<latch_wire::CastInfo>, ClientError> {
        let op = proto::casts(&self.conn.negotiated, frame)?;
        self.conn.run(op)
    }

    /// Takes the session's run lease (SPEC.md §4.7), or re-reads its facts when
    /// this connection holds it: `granted` is false while another connection
    /// holds it. The holder may type while attached read-only. A version-2
    /// daemon: [`ClientError::Protocol`] (exit 8).
    pub fn lease(&mut self) -> Result<latch_wire::LeaseFacts, ClientError> {
        let op = proto::lease(&self.conn.negotiated)?;
        self.conn.run(op)
    }

    /// Gives the run lease back (closing the connection does too).
    pub fn release(&mut self) -> Result<(), ClientError> {
        self.conn.run(proto::confirmed(ClientFrame::Release))
    }

    /// The newest `last` command blocks the daemon keeps, oldest first (SPEC.md
    /// §4.7). A version-2 daemon: [`ClientError::Protocol`] (exit 8).
    pub fn commands(&mut self, last: u32) -> Result<Vec<latch_wire::CommandBlock>, ClientError> {
        let op = proto::commands(&self.conn.negotiated, last)?;
        self.conn.run(op)
    }

    /// One snapshot of the screen.
    pub fn peek(&mut self, opts: PeekOptions) -> Result<Bytes, ClientError> {
        self.conn.run(proto::peek(opts))
    }

    /// The screen as cells (with `full`, the scrollback first): latch-screen's
    /// `Capture`, postcard-encoded, for `Capture::decode` (SPEC.md §4.4). A
    /// version-2 daemon: [`ClientError::Protocol`] (exit 8).
    pub fn capture(&mut self, full: bool) -> Result<Bytes, ClientError> {
        let op = proto::capture(&self.conn.negotiated, full)?;
        self.conn.run(op)
    }

    /// Writes bytes to the program's terminal; returns once the daemon has written
    /// them to the PTY.
    pub fn send(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        for frame in proto::input_frames(&self.conn.negotiated, bytes) {
            self.conn.run(proto::confirmed(frame))?;
        }
        Ok(())
    }

    /// Sets the PTY size.
    pub fn resize(&mut self, rows: u16, cols: u16) -> Result<(), ClientError> {
        self.conn
            .run(proto::confirmed(ClientFrame::Resize(Size { rows, cols })))
    }

    /// Sends a signal to the program.
    pub fn signal(&mut self, signal: i32) -> Result<(), ClientError> {
        self.conn
            .run(proto::confirmed(ClientFrame::Signal { signal }))
    }

    /// Ends the session: the daemon raises its draining fence (no new binds or
    /// effects), then signals the program (SPEC.md §5.6).
    pub fn stop(&mut self, signal: i32) -> Result<(), ClientError> {
        self.conn
            .run(proto::confirmed(ClientFrame::Stop { signal }))
    }

    /// Waits until the daemon closes the connection (it does when the session ends),
    /// at most `timeout`. `Ok(true)`: closed; `Ok(false)`: still open at the deadline.
    pub fn wait_closed(&mut self, timeout: Duration) -> Result<bool, ClientError> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            self.conn.reader.set_timeout(Some(left))?;
            if let Some(done) = proto::closed_outcome(self.conn.reader.read_frame()) {
                return done;
            }
        }
    }

    /// Attaches with this client's terminal size (`0, 0`: none, as a watcher).
    /// Returns the first GEOMETRY and SCREEN, and the two halves for the live
    /// stream (SPEC.md §5.4).
    pub fn attach(
        mut self,
        rows: u16,
        cols: u16,
        mode: AttachMode,
    ) -> Result<Attached, ClientError> {
        let cursors = self.conn.negotiated.version >= latch_wire::CURSORS_VERSION;
        let preface = self.conn.run(proto::attach(rows, cols, mode, cursors))?;
        self.conn.reader.set_timeout(None)?;
        Ok(Attachment::new(
            preface,
            AttachReader {
                reader: self.conn.reader,
            },
            AttachWriter {
                writer: self.conn.writer,
            },
        ))
    }
}

/// An attached session: the replayed screen and the live stream's halves.
pub type Attached = Attachment<AttachReader, AttachWriter>;

/// What arrives on an attached connection.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AttachEvent {
    /// Program output.
    Output(Bytes),
    /// The PTY size changed.
    Geometry {
        /// Rows.
        rows: u16,
        /// Columns.
        cols: u16,
    },
    /// A fresh screen (a full repaint): this client fell behind the output and the
    /// daemon resynchronised it instead of relaying what it missed (SPEC.md §8).
    /// A GEOMETRY precedes it.
    Screen(Bytes),
    /// The program ended.
    Exit(ExitStatus),
    /// The daemon acknowledged DETACH.
    Detached,
    /// A typed error from the daemon.
    Error {
        /// Code.
        code: ErrorCode,
        /// Detail.
        detail: String,
    },
    /// The daemon closed the connection.
    Closed,
    /// After a resynchronisation's [`Screen`](Self::Screen), from a daemon of
    /// version 3: the output cursor at that cut (the output after it continues
    /// from there; what was skipped is the difference of two cursors) and the
    /// shell there (SPEC.md §4.7).
    Cut(latch_wire::CutFacts),
    /// The run lease this connection held was revoked: the session began
    /// draining (a kill or restart, SPEC.md §4.7).
    LeaseRevoked,
}

/// The reading half of an attachment.
#[derive(Debug)]
pub struct AttachReader {
    reader: FrameReader,
}

impl AttachReader {
    /// Blocks for the next event.
    pub fn next_event(&mut self) -> Result<AttachEvent, ClientError> {
        loop {
            if let Some(ev) = proto::attach_event(self.reader.read_frame()?) {
                return ev;
            }
        }
    }

    /// The next event if one has already arrived, without waiting: `Ok(None)` when
    /// none has. For callers that wait on its file descriptor themselves
    /// ([`AsFd`](std::os::fd::AsFd)): one poll loop over the terminal, this
    /// connection and signals.
    pub fn try_next_event(&mut self) -> Result<Option<AttachEvent>, ClientError> {
        loop {
            let Some(frame) = self.reader.try_read_frame()? else {
                return Ok(None);
            };
            if let Some(ev) = proto::attach_event(frame) {
                return ev.map(Some);
            }
        }
    }

    /// Sets a read timeout for [`AttachReader::next_event`].
    pub fn set_timeout(&self, t: Option<Duration>) -> Result<(), ClientError> {
        self.reader.set_timeout(t)
    }
}

impl std::os::fd::AsFd for AttachReader {
    /// The connection's socket: readable when an event may have arrived.
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.reader.stream.as_fd()
    }
}

/// The writing half of an attachment.
#[derive(Debug)]
pub struct AttachWriter {
    writer: FrameWriter,
}

impl AttachWriter {
    /// Sends input bytes.
    pub fn input(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        for chunk in bytes.chunks(16 * 1024) {
            self.writer
                .write_frame(&ClientFrame::Input(Bytes::copy_from_slice(chunk)))?;
        }
        Ok(())
    }

    /// Reports this client's terminal size.
    pub fn resize(&mut self, rows: u16, cols: u16) -> Result<(), ClientError> {
        self.writer
            .write_frame(&ClientFrame::Resize(Size { rows, cols }))
    }

    /// Asks to detach; the reader then sees [`AttachEvent::Detached`].
    pub fn detach(&mut self) -> Result<(), ClientError> {
        self.writer.write_frame(&ClientFrame::Detach)
    }

    /// Sends a raw frame (for tests of the daemon's refusals).
    pub fn send_frame(&mut self, f: &ClientFrame) -> Result<(), ClientError> {
        self.writer.write_frame(f)
    }
}
