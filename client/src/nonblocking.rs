//! Async connections on tokio (the `tokio` feature): the same typestate
//! ([`Connection`] → [`Bound`] → [`Attached`]), the same errors and the same
//! guarantees as the blocking [`crate::Connection`], for callers that drive many
//! sessions from one runtime.
//!
//! Only the byte moving is async: every request is the same sans-IO exchange the
//! blocking connection runs (frames out, a step function fed the frames that come
//! back), so both follow one set of protocol rules (SPEC.md §5).
//!
//! Each request (HELLO, BIND, STATUS, PEEK, a confirmed effect) must complete
//! within the connection's timeout, or fails with
//! [`UnreachableCause::TimedOut`](crate::UnreachableCause::TimedOut).
//! [`AttachReader::next_event`] waits without a deadline and is cancel-safe: wrap
//! it in `tokio::time::timeout` to bound it.
//!
//! ```
//! # mod doc { include!(concat!(env!("CARGO_MANIFEST_DIR"), "/doctest_support.rs")); }
//! # use doc::*;
//! # let (_dir, client) = scratch_client();
//! use latch_client::{NewSession, PeekOptions};
//!
//! let mut new = NewSession::default();
//! new.command = vec!["cat".into()];
//! let created = client.create(new)?;
//! let session = created.session();
//!
//! let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
//! rt.block_on(async {
//!     let mut bound = client.connect_async(&session).await?;
//!     bound.send(b"hello from tokio\n").await?;
//!     let screen = client
//!         .wait_for_text_async(&session, "hello from tokio", PeekOptions::plain(),
//!                              std::time::Duration::from_secs(10))
//!         .await?;
//!     assert!(String::from_utf8_lossy(&screen).contains("hello from tokio"));
//!     assert_eq!(bound.status().await?.incarnation, session.incarnation);
//!     Ok::<_, latch_client::ClientError>(())
//! })?;
//! # client.kill(&session, libc::SIGKILL, Some(std::time::Duration::from_secs(5)))?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use latch_wire::Size;
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use latch_wire::client::{ClientHandshake, Negotiated};
use latch_wire::{ClientFrame, ServerFrame, SessionRef, StatusReply};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;

use std::sync::Arc;

use crate::client::Client;
use crate::conn::{AttachEvent, DEFAULT_TIMEOUT};
use crate::error::ClientError;
use crate::options::{AttachMode, PeekFormat, PeekOptions};
use crate::proto::{self, Attachment, Inbox, Op, Outbox, Step};
use crate::run::{RunOptions, RunResult};
use crate::wait::{Condition, Waited};

/// The reading end of an async connection.
#[derive(Debug)]
struct FrameReader {
    half: OwnedReadHalf,
    inbox: Inbox,
}

/// The writing end of an async connection.
#[derive(Debug)]
struct FrameWriter {
    /// Always `Some` until dropped.
    half: Option<OwnedWriteHalf>,
    outbox: Outbox,
}

impl Drop for FrameWriter {
    /// Dropping the writing half alone must not end an attachment (tokio would
    /// shut the socket's write side down, which the daemon reads as the client
    /// leaving): as with the blocking halves, the connection closes when both
    /// halves are gone.
    fn drop(&mut self) {
        if let Some(half) = self.half.take() {
            half.forget();
        }
    }
}

impl FrameReader {
    /// The next frame; `Ok(None)` when the daemon closed cleanly. Cancel-safe:
    /// bytes read go straight into the buffer.
    async fn read_frame(&mut self) -> Result<Option<ServerFrame>, ClientError> {
        loop {
            if let Some(f) = self.inbox.decode()? {
                return Ok(Some(f));
            }
            let n = match self.half.read_buf(self.inbox.buf_mut()).await {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.inbox.read_error(e)),
            };
            if n == 0 {
                return self.inbox.eof();
            }
        }
    }
}

impl FrameWriter {
    async fn write_frame(&mut self, f: &ClientFrame) -> Result<(), ClientError> {
        let bytes = self.outbox.encode(f)?;
        let Some(half) = self.half.as_mut() else {
            return Err(proto::io_err(
                "write",
                std::io::ErrorKind::BrokenPipe.into(),
            ));
        };
        half.write_all(bytes)
            .await
            .map_err(|e| proto::io_err("write", e))
    }
}

/// An async connection that completed HELLO but is not bound: it may only ask
/// STATUS.
#[derive(Debug)]
pub struct Connection {
    reader: FrameReader,
    writer: FrameWriter,
    negotiated: Negotiated,
    timeout: Duration,
}

impl Connection {
    /// Connects to the socket at `path` and negotiates a version. `timeout` bounds
    /// the handshake and each later request.
    pub async fn open(path: &Path, timeout: Duration) -> Result<Self, ClientError> {
        let stream = UnixStream::connect(path)
            .await
            .map_err(|e| proto::connect_err(path, e))?;
        Self::over(stream, timeout).await
    }

    /// Negotiates over an already connected stream: checks the peer's uid, sends
    /// HELLO and checks the answer (SPEC.md §5.1).
    pub async fn over(stream: UnixStream, timeout: Duration) -> Result<Self, ClientError> {
        proto::check_peer_uid(&stream)?;
        let (read, write) = stream.into_split();
        let (inbox, outbox) = proto::halves();
        let mut reader = FrameReader { half: read, inbox };
        let mut writer = FrameWriter {
            half: Some(write),
            outbox,
        };
        let hs = ClientHandshake::default();
        let negotiated = within(timeout, "HELLO", async {
            let wrote = writer.write_frame(&hs.hello()).await;
            proto::welcome(&hs, wrote, reader.read_frame().await)
        })
        .await?;
        Ok(Self {
            reader,
            writer,
            negotiated,
            timeout,
        })
    }

    /// The negotiated version and limits.
    pub fn negotiated(&self) -> Negotiated {
        self.negotiated
    }

    /// Asks who the daemon is (legal before BIND); the answer comes from the
    /// daemon's memory.
    pub async fn status(&mut self) -> Result<StatusReply, ClientError> {
        self.run(proto::status()).await
    }

    /// Binds to `target`; the daemon refuses any other creation
    /// ([`ClientError::Replaced`]).
    pub async fn bind(mut self, target: &SessionRef) -> Result<Bound, ClientError> {
        self.run(proto::bind(target)).await?;
        Ok(Bound {
            conn: self,
            target: target.clone(),
        })
    }

    /// Sends `op`'s frames, then feeds it frames until it is done, within the
    /// connection's timeout.
    async fn run<T>(&mut self, op: Op<T>) -> Result<T, ClientError> {
        let (reader, writer) = (&mut self.reader, &mut self.writer);
        within(self.timeout, "request", async move {
            for f in &op.send {
                writer.write_frame(f).await?;
            }
            let mut step = op.step;
            loop {
                if let Step::Done(r) = step(reader.read_frame().await?) {
                    return r;
                }
            }
        })
        .await
    }
}

/// Runs `fut`, failing with [`UnreachableCause::TimedOut`] after `limit`.
async fn within<T>(
    limit: Duration,
    what: &str,
    fut: impl std::future::Future<Output = Result<T, ClientError>>,
) -> Result<T, ClientError> {
    tokio::time::timeout(limit, fut)
        .await
        .unwrap_or_else(|_| Err(proto::timed_out(what)))
}

/// An async connection bound to exactly one session creation: effects are
/// allowed, and reach that creation or nothing.
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
    pub async fn status(&mut self) -> Result<StatusReply, ClientError> {
        self.conn.status().await
    }

    /// The daemon's status and, from a daemon of protocol version 3, its output
    /// facts: the output cursor, when the program last wrote, and the shell's
    /// state (SPEC.md §4.2, §4.6); `None` from a version-2 daemon.
    pub async fn status_full(
        &mut self,
    ) -> Result<(StatusReply, Option<latch_wire::OutputFacts>), ClientError> {
        self.conn.run(proto::status_full()).await
    }

    /// The output the program wrote after output cursor `since` that the daemon
    /// still holds (its ring, SPEC.md §8), at most `max` bytes, with how much after
    /// `since` was lost. A cursor means something only in the creation this
    /// connection is bound to. A version-2 daemon: [`ClientError::Protocol`]
    /// (exit 8).
    pub async fn output_since(
        &mut self,
        since: u64,
        max: u32,
    ) -> Result<latch_wire::OutputRange, ClientError> {
        let op = proto::output_since(&self.conn.negotiated, since, max)?;
        self.conn.run(op).await
    }

    /// One snapshot of the screen.
    pub async fn peek(&mut self, opts: PeekOptions) -> Result<Bytes, ClientError> {
        self.conn.run(proto::peek(opts)).await
    }

    /// Writes bytes to the program's terminal; returns once the daemon has written
    /// them to the PTY.
    pub async fn send(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        for frame in proto::input_frames(&self.conn.negotiated, bytes) {
            self.conn.run(proto::confirmed(frame)).await?;
        }
        Ok(())
    }

    /// Sets the PTY size.
    pub async fn resize(&mut self, rows: u16, cols: u16) -> Result<(), ClientError> {
        self.conn
            .run(proto::confirmed(ClientFrame::Resize(Size { rows, cols })))
            .await
    }

    /// Sends a signal to the program.
    pub async fn signal(&mut self, signal: i32) -> Result<(), ClientError> {
        self.conn
            .run(proto::confirmed(ClientFrame::Signal { signal }))
            .await
    }

    /// Ends the session: the daemon raises its draining fence, then signals the
    /// program (SPEC.md §5.6).
    pub async fn stop(&mut self, signal: i32) -> Result<(), ClientError> {
        self.conn
            .run(proto::confirmed(ClientFrame::Stop { signal }))
            .await
    }

    /// Waits until the daemon closes the connection (it does when the session
    /// ends), at most `timeout`. `Ok(true)`: closed; `Ok(false)`: still open.
    pub async fn wait_closed(&mut self, timeout: Duration) -> Result<bool, ClientError> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let read = within(left, "wait", self.conn.reader.read_frame()).await;
            if let Some(done) = proto::closed_outcome(read) {
                return done;
            }
        }
    }

    /// Attaches with this client's terminal size (`0, 0`: none, as a watcher).
    /// Returns the first GEOMETRY and SCREEN, and the two halves for the live
    /// stream (SPEC.md §5.4).
    pub async fn attach(
        mut self,
        rows: u16,
        cols: u16,
        mode: AttachMode,
    ) -> Result<Attached, ClientError> {
        let cursors = self.conn.negotiated.version >= latch_wire::CURSORS_VERSION;
        let preface = self
            .conn
            .run(proto::attach(rows, cols, mode, cursors))
            .await?;
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

/// The reading half of an async attachment.
#[derive(Debug)]
pub struct AttachReader {
    reader: FrameReader,
}

impl AttachReader {
    /// The next event. Cancel-safe: no output is lost if the future is dropped.
    pub async fn next_event(&mut self) -> Result<AttachEvent, ClientError> {
        loop {
            if let Some(ev) = proto::attach_event(self.reader.read_frame().await?) {
                return ev;
            }
        }
    }
}

/// The writing half of an async attachment.
#[derive(Debug)]
pub struct AttachWriter {
    writer: FrameWriter,
}

impl AttachWriter {
    /// Sends input bytes (dropped by the daemon on a read-only attachment).
    pub async fn input(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        for chunk in bytes.chunks(16 * 1024) {
            self.writer
                .write_frame(&ClientFrame::Input(Bytes::copy_from_slice(chunk)))
                .await?;
        }
        Ok(())
    }

    /// Reports this client's terminal size.
    pub async fn resize(&mut self, rows: u16, cols: u16) -> Result<(), ClientError> {
        self.writer
            .write_frame(&ClientFrame::Resize(Size { rows, cols }))
            .await
    }

    /// Asks to detach; the reader then sees [`AttachEvent::Detached`].
    pub async fn detach(&mut self) -> Result<(), ClientError> {
        self.writer.write_frame(&ClientFrame::Detach).await
    }
}

impl Client {
    /// [`Client::connect`], async: connects and binds to exactly `session`, with
    /// the same owner precondition and the same explanations of a daemon that
    /// cannot be reached (read from the registry, a short blocking file read).
    pub async fn connect_async(&self, session: &SessionRef) -> Result<Bound, ClientError> {
        let path = self.registry().socket_path(&session.id);
        let mut conn = Connection::open(&path, DEFAULT_TIMEOUT)
            .await
            .map_err(|e| self.explain_open_error(session, e))?;
        if self.required_owner().is_some() {
            let st = conn.status().await?;
            self.check_daemon_is(session, &st)?;
        }
        conn.bind(session).await
    }

    /// [`Client::wait_for_text`], async.
    pub async fn wait_for_text_async(
        &self,
        session: &SessionRef,
        text: &str,
        opts: PeekOptions,
        timeout: Duration,
    ) -> Result<Bytes, ClientError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut bound = self.connect_async(session).await?;
        let mut reader = self
            .connect_async(session)
            .await?
            .attach(0, 0, AttachMode::ReadOnly)
            .await?
            .reader;
        let plain = opts.with_format(PeekFormat::Plain);
        loop {
            let screen = bound.peek(plain).await?;
            if proto::shows(&screen, text) {
                return match opts.format {
                    PeekFormat::Plain => Ok(screen),
                    PeekFormat::Ansi => bound.peek(opts).await,
                };
            }
            match tokio::time::timeout_at(deadline, reader.next_event()).await {
                Ok(event) => proto::wait_wake(event?, text)?,
                Err(_) => return Err(proto::wait_timed_out(text, timeout)),
            }
        }
    }
}

/// [`Client::wait`], async (SPEC.md §4.7): the one implementation of the waits,
/// run on tokio's blocking pool, so no runtime thread waits on it. Dropping the
/// future stops nothing: the wait still ends at its condition or its timeout.
pub async fn wait(
    client: Arc<Client>,
    session: SessionRef,
    condition: Condition,
    after: Option<u64>,
    timeout: Duration,
) -> Result<Waited, ClientError> {
    joined(
        tokio::task::spawn_blocking(move || client.wait(&session, &condition, after, timeout))
            .await,
    )
}

/// [`Client::run`], async (SPEC.md §4.7), as [`wait`] is: the one run, on the
/// blocking pool; `on_output` gets the command's output as it comes.
pub async fn run(
    client: Arc<Client>,
    session: SessionRef,
    command: String,
    opts: RunOptions,
    mut on_output: impl FnMut(&[u8]) + Send + 'static,
) -> Result<RunResult, ClientError> {
    joined(
        tokio::task::spawn_blocking(move || {
            client.run(&session, &command, &opts, None, &mut on_output)
        })
        .await,
    )
}

/// A blocking task's answer: its panic goes on as a panic here.
fn joined<T>(r: Result<Result<T, ClientError>, tokio::task::JoinError>) -> Result<T, ClientError> {
    match r {
        Ok(answer) => answer,
        Err(e) => match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(_) => Err(ClientError::Refused(
                "the runtime shut down before the answer".into(),
            )),
        },
    }
}
