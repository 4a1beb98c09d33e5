//! Connections to a session daemon (SPEC.md §5): connect, check the daemon's
//! uid, HELLO, BIND, then requests. Blocking IO with timeouts; no runtime.

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use latch_wire::client::{ClientHandshake, HandshakeError, Negotiated};
use latch_wire::{
    ClientCodec, ClientFrame, ErrorCode, ExitStatus, FrameError, ServerFrame, SessionRef,
    StatusReply,
};

use crate::error::{ClientError, Mismatch, UnreachableCause};

/// Time allowed for connect + HELLO + BIND, and for each request's answer.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// One end of a connection that reads frames.
#[derive(Debug)]
pub struct FrameReader {
    stream: UnixStream,
    codec: ClientCodec,
    buf: BytesMut,
    /// Whether a whole frame has been read (errors before it are handshake errors).
    read_one: bool,
}

/// One end of a connection that writes frames.
#[derive(Debug)]
pub struct FrameWriter {
    stream: UnixStream,
    codec: ClientCodec,
    out: BytesMut,
}

/// Maps a framing error; `buf` holds the unread bytes (the peer's answer, for
/// `BadOpening`), `first` whether no frame has been read yet on this connection.
fn frame_err(e: FrameError, buf: &[u8], first: bool) -> ClientError {
    match e {
        FrameError::LegacyPeer(_) => ClientError::protocol(
            Mismatch::LegacyPeer,
            format!("{e}; the daemon is older than this client"),
        ),
        FrameError::BadOpening => {
            let shown: Vec<String> = buf.iter().take(8).map(|b| format!("{b:02x}")).collect();
            ClientError::protocol(
                Mismatch::NotLatch,
                format!(
                    "the peer's answer is neither latch protocol nor the legacy pty framing \
                     (first bytes {}): something other than a latch daemon listens on the \
                     session's socket; nothing was sent beyond HELLO",
                    shown.join(" ")
                ),
            )
        }
        other if first => ClientError::protocol(
            Mismatch::NotLatch,
            format!(
                "the daemon's first frame is invalid ({other}): it does not speak latch \
                 protocol as this client does"
            ),
        ),
        other => ClientError::protocol(Mismatch::BadFrame, other.to_string()),
    }
}

fn io_err(context: &str, e: io::Error) -> ClientError {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => ClientError::unreachable(
            UnreachableCause::TimedOut,
            format!("{context}: the daemon did not answer in time"),
        ),
        _ => ClientError::unreachable(UnreachableCause::Io, format!("{context}: {e}")),
    }
}

impl FrameReader {
    /// Reads the next frame. `Ok(None)`: the daemon closed the connection cleanly.
    pub fn read_frame(&mut self) -> Result<Option<ServerFrame>, ClientError> {
        let mut chunk = [0u8; 64 * 1024];
        loop {
            match self.codec.decode_server(&mut self.buf) {
                Ok(Some(f)) => {
                    self.read_one = true;
                    return Ok(Some(f));
                }
                Ok(None) => {}
                Err(e) => return Err(frame_err(e, &self.buf, !self.read_one)),
            }
            let n = match self.stream.read(&mut chunk) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // An older daemon reads MAGIC as a legacy header (type 0x89, 1.2 GiB),
                // refuses it and closes with the rest of HELLO unread: on a Unix socket
                // that reaches us as a reset, not EOF (SPEC.md §6). Same as EOF here.
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset && !self.codec.answered() => {
                    return Err(ClientError::protocol(
                        Mismatch::NoAnswer,
                        "the daemon reset the connection without answering latch protocol 2; \
                         it may be an older daemon",
                    ));
                }
                Err(e) => return Err(io_err("read", e)),
            };
            if n == 0 {
                if !self.codec.answered() {
                    return Err(ClientError::protocol(
                        Mismatch::NoAnswer,
                        "the daemon closed the connection without answering latch protocol 2; \
                         it may be an older daemon",
                    ));
                }
                if self.buf.is_empty() {
                    return Ok(None);
                }
                return Err(ClientError::protocol(
                    Mismatch::BadFrame,
                    "connection closed mid-frame",
                ));
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Sets the read timeout (`None`: block).
    pub fn set_timeout(&self, t: Option<Duration>) -> Result<(), ClientError> {
        self.stream
            .set_read_timeout(t)
            .map_err(|e| ClientError::Other(e.to_string()))
    }
}

impl FrameWriter {
    /// Writes one frame.
    pub fn write_frame(&mut self, f: &ClientFrame) -> Result<(), ClientError> {
        self.out.clear();
        self.codec
            .encode_client(f, &mut self.out)
            .map_err(|e| ClientError::Usage(e.to_string()))?;
        self.stream
            .write_all(&self.out)
            .map_err(|e| io_err("write", e))
    }
}

/// A connection that completed HELLO but is not bound: it may only ask STATUS.
#[derive(Debug)]
pub struct Connection {
    reader: FrameReader,
    writer: FrameWriter,
    negotiated: Negotiated,
}

/// Checks that the peer of `stream` runs as our effective uid (SPEC.md §11 I9).
fn check_peer_uid(stream: &UnixStream) -> Result<(), ClientError> {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    let cred = getsockopt(stream, PeerCredentials).map_err(|e| {
        ClientError::unreachable(
            UnreachableCause::Io,
            format!("cannot read peer credentials: {e}"),
        )
    })?;
    let me = nix::unistd::geteuid().as_raw();
    if cred.uid() != me {
        return Err(ClientError::Refused(format!(
            "the daemon runs as uid {}, not as you (uid {me})",
            cred.uid()
        )));
    }
    Ok(())
}

impl Connection {
    /// Connects to the socket at `path` and negotiates a version.
    pub fn open(path: &Path, timeout: Duration) -> Result<Self, ClientError> {
        let stream = UnixStream::connect(path).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused => ClientError::unreachable(
                UnreachableCause::NotListening,
                format!("no daemon listening at {}: {e}", path.display()),
            ),
            _ => ClientError::unreachable(
                UnreachableCause::Io,
                format!("connect {}: {e}", path.display()),
            ),
        })?;
        Self::over(stream, timeout)
    }

    /// Negotiates over an already connected stream.
    pub fn over(stream: UnixStream, timeout: Duration) -> Result<Self, ClientError> {
        check_peer_uid(&stream)?;
        stream
            .set_read_timeout(Some(timeout))
            .and_then(|()| stream.set_write_timeout(Some(timeout)))
            .map_err(|e| ClientError::Other(e.to_string()))?;
        let write_half = stream
            .try_clone()
            .map_err(|e| ClientError::Other(e.to_string()))?;
        let codec = ClientCodec::default();
        let mut writer = FrameWriter {
            stream: write_half,
            codec: codec.clone(),
            out: BytesMut::new(),
        };
        let mut reader = FrameReader {
            stream,
            codec,
            buf: BytesMut::new(),
            read_one: false,
        };
        let hs = ClientHandshake::default();
        // A daemon that refuses the connection (too many connections) writes its
        // refusal and closes without reading: our HELLO may then meet a broken
        // pipe, yet the refusal is waiting to be read. Read it before giving up.
        let wrote = writer.write_frame(&hs.hello());
        let answer = match (wrote, reader.read_frame()) {
            (_, Ok(Some(f))) => Some(f),
            (Err(e), _) => return Err(e),
            (Ok(()), read) => read?,
        };
        let answer = answer.ok_or_else(|| {
            ClientError::protocol(
                Mismatch::NoAnswer,
                "the daemon closed the connection instead of answering HELLO",
            )
        })?;
        let negotiated = hs.on_welcome(answer).map_err(handshake_err)?;
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

    /// Asks who the daemon is (legal before BIND).
    pub fn status(&mut self) -> Result<StatusReply, ClientError> {
        self.writer.write_frame(&ClientFrame::Status)?;
        match self.next_reply()? {
            ServerFrame::Status(s) => Ok(*s),
            other => Err(unexpected(&other)),
        }
    }

    /// Binds to `target`; the daemon refuses any other creation.
    pub fn bind(mut self, target: &SessionRef) -> Result<Bound, ClientError> {
        let hs = ClientHandshake::default();
        self.writer.write_frame(&hs.bind(target))?;
        let answer = self.reader.read_frame()?.ok_or_else(|| {
            ClientError::unreachable(
                UnreachableCause::Closed,
                "the daemon closed the connection during BIND",
            )
        })?;
        hs.on_bound(target, answer).map_err(|e| match e {
            HandshakeError::Refused {
                code: ErrorCode::IncarnationMismatch | ErrorCode::IdMismatch,
                ..
            }
            | HandshakeError::WrongBinding => {
                ClientError::replaced(&target.id, target.incarnation, None)
            }
            other => handshake_err(other),
        })?;
        Ok(Bound {
            conn: self,
            target: target.clone(),
        })
    }

    fn next_reply(&mut self) -> Result<ServerFrame, ClientError> {
        match self.reader.read_frame()? {
            Some(ServerFrame::Error { code, detail }) => Err(ClientError::Daemon { code, detail }),
            Some(f) => Ok(f),
            None => Err(ClientError::unreachable(
                UnreachableCause::Closed,
                "the daemon closed the connection",
            )),
        }
    }
}

fn handshake_err(e: HandshakeError) -> ClientError {
    match e {
        HandshakeError::Downgrade { .. } => ClientError::protocol(
            Mismatch::Version,
            format!("{e}; refused (no downgrade), nothing was sent beyond HELLO"),
        ),
        HandshakeError::Refused {
            code: ErrorCode::VersionUnsupported,
            detail,
        } => ClientError::protocol(
            Mismatch::Version,
            format!("no common protocol version ({detail})"),
        ),
        HandshakeError::Refused { code, detail } => ClientError::Daemon { code, detail },
        other => ClientError::protocol(Mismatch::NotLatch, other.to_string()),
    }
}

fn unexpected(f: &ServerFrame) -> ClientError {
    ClientError::protocol(
        Mismatch::BadFrame,
        format!("unexpected frame from the daemon: {f:?}"),
    )
}

/// A connection bound to exactly one session creation: effects are allowed.
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

    /// The daemon's status (authored from its memory).
    pub fn status(&mut self) -> Result<StatusReply, ClientError> {
        self.conn.status()
    }

    /// One snapshot of the screen.
    pub fn peek(&mut self, plain: bool, full: bool) -> Result<Bytes, ClientError> {
        self.conn
            .writer
            .write_frame(&ClientFrame::Peek { plain, full })?;
        match self.conn.next_reply()? {
            ServerFrame::Screen(b) => Ok(b),
            other => Err(unexpected(&other)),
        }
    }

    /// Sends a request with no reply of its own, then a PING, so that a refusal is
    /// reported and success means the daemon has carried it out.
    fn confirmed(&mut self, f: ClientFrame) -> Result<(), ClientError> {
        self.conn.writer.write_frame(&f)?;
        let token = u64::from(std::process::id());
        self.conn.writer.write_frame(&ClientFrame::Ping(token))?;
        loop {
            match self.conn.next_reply()? {
                ServerFrame::Pong(t) if t == token => return Ok(()),
                ServerFrame::Geometry { .. } | ServerFrame::Pong(_) => continue,
                other => return Err(unexpected(&other)),
            }
        }
    }

    /// Writes bytes to the program's terminal.
    pub fn send(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        let max = usize::try_from(self.conn.negotiated.limits.max_client_frame)
            .unwrap_or(usize::MAX)
            .saturating_sub(64)
            .max(1);
        for chunk in bytes.chunks(max) {
            self.confirmed(ClientFrame::Input(Bytes::copy_from_slice(chunk)))?;
        }
        Ok(())
    }

    /// Sets the PTY size.
    pub fn resize(&mut self, rows: u16, cols: u16) -> Result<(), ClientError> {
        self.confirmed(ClientFrame::Resize { rows, cols })
    }

    /// Sends a signal to the program.
    pub fn signal(&mut self, signal: i32) -> Result<(), ClientError> {
        self.confirmed(ClientFrame::Signal { signal })
    }

    /// Ends the session: the daemon raises its draining fence (no new binds or
    /// effects), then signals the program.
    pub fn stop(&mut self, signal: i32) -> Result<(), ClientError> {
        self.confirmed(ClientFrame::Stop { signal })
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
            match self.conn.reader.read_frame() {
                Ok(None) => return Ok(true),
                Ok(Some(_)) => continue,
                Err(ClientError::Unreachable {
                    cause: UnreachableCause::TimedOut,
                    ..
                }) => return Ok(false),
                Err(ClientError::Unreachable { .. }) => return Ok(true),
                Err(e) => return Err(e),
            }
        }
    }

    /// Attaches. Returns the first GEOMETRY and SCREEN, and the two halves for the
    /// live stream.
    pub fn attach(
        mut self,
        rows: u16,
        cols: u16,
        read_only: bool,
    ) -> Result<Attached, ClientError> {
        self.conn.writer.write_frame(&ClientFrame::Attach {
            rows,
            cols,
            read_only,
        })?;
        let (g_rows, g_cols) = match self.conn.next_reply()? {
            ServerFrame::Geometry { rows, cols } => (rows, cols),
            other => return Err(unexpected(&other)),
        };
        let screen = match self.conn.next_reply()? {
            ServerFrame::Screen(b) => b,
            other => return Err(unexpected(&other)),
        };
        self.conn.reader.set_timeout(None)?;
        Ok(Attached {
            rows: g_rows,
            cols: g_cols,
            screen,
            reader: AttachReader {
                reader: self.conn.reader,
            },
            writer: AttachWriter {
                writer: self.conn.writer,
            },
        })
    }
}

/// An attached session: the replayed screen and the live stream's halves.
#[derive(Debug)]
pub struct Attached {
    /// PTY rows at attach time.
    pub rows: u16,
    /// PTY columns at attach time.
    pub cols: u16,
    /// The screen cut at attach time (ANSI, repaints a terminal).
    pub screen: Bytes,
    /// Reads the live stream.
    pub reader: AttachReader,
    /// Sends input, resizes and detach.
    pub writer: AttachWriter,
}

/// What arrives on an attached connection.
#[derive(Debug, Clone, PartialEq, Eq)]
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
            return Ok(match self.reader.read_frame()? {
                None => AttachEvent::Closed,
                Some(ServerFrame::Output(b)) => AttachEvent::Output(b),
                Some(ServerFrame::Geometry { rows, cols }) => AttachEvent::Geometry { rows, cols },
                Some(ServerFrame::Exit(s)) => AttachEvent::Exit(s),
                Some(ServerFrame::Screen(b)) => AttachEvent::Screen(b),
                Some(ServerFrame::Detached) => AttachEvent::Detached,
                Some(ServerFrame::Error { code, detail }) => AttachEvent::Error { code, detail },
                Some(ServerFrame::Pong(_)) => continue,
                Some(other) => return Err(unexpected(&other)),
            });
        }
    }

    /// Sets a read timeout for [`AttachReader::next_event`].
    pub fn set_timeout(&self, t: Option<Duration>) -> Result<(), ClientError> {
        self.reader.set_timeout(t)
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
        self.writer.write_frame(&ClientFrame::Resize { rows, cols })
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
