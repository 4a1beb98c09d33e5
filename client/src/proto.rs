//! The client's side of the protocol (SPEC.md §5), without IO: turning bytes into
//! frames, frames into answers, and every failure into a typed [`ClientError`].
//!
//! The blocking connections ([`crate::conn`]) and the async ones
//! (`crate::nonblocking`) only move bytes: each request is an [`Op`] (the frames to
//! send and a step function fed every frame that arrives), so both drive exactly
//! the same rules.

use latch_wire::{AttachRequest, PeekRequest};
use std::io;
use std::path::Path;

use bytes::{Bytes, BytesMut};
use latch_wire::client::{ClientHandshake, HandshakeError, Negotiated};
use latch_wire::{
    ClientCodec, ClientFrame, CutFacts, ErrorCode, FrameError, OutputFacts, OutputRange,
    ServerFrame, SessionRef, StatusReply, CURSORS_VERSION,
};

use crate::conn::AttachEvent;
use crate::error::{ClientError, Mismatch, UnreachableCause};
use crate::options::{AttachMode, PeekOptions};

/// How many bytes one read asks the socket for.
pub(crate) const READ_CHUNK: usize = 64 * 1024;

/// Inbound bytes, decoded into server frames.
#[derive(Debug)]
pub(crate) struct Inbox {
    codec: ClientCodec,
    buf: BytesMut,
    /// Whether a whole frame has been read (errors before it are handshake errors).
    read_one: bool,
}

/// Outbound frames, encoded.
#[derive(Debug)]
pub(crate) struct Outbox {
    codec: ClientCodec,
    out: BytesMut,
}

/// A fresh connection's two halves: the codec's state is per direction.
pub(crate) fn halves() -> (Inbox, Outbox) {
    let codec = ClientCodec::default();
    (
        Inbox {
            codec: codec.clone(),
            buf: BytesMut::new(),
            read_one: false,
        },
        Outbox {
            codec,
            out: BytesMut::new(),
        },
    )
}

impl Inbox {
    /// The next whole frame in the buffer, if there is one.
    pub(crate) fn decode(&mut self) -> Result<Option<ServerFrame>, ClientError> {
        match self.codec.decode_server(&mut self.buf) {
            Ok(Some(f)) => {
                self.read_one = true;
                Ok(Some(f))
            }
            Ok(None) => Ok(None),
            Err(e) => Err(frame_err(e, &self.buf, !self.read_one)),
        }
    }

    /// Appends bytes read from the socket.
    pub(crate) fn feed(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The buffer, for reads that fill it in place.
    #[cfg(feature = "tokio")]
    pub(crate) fn buf_mut(&mut self) -> &mut BytesMut {
        self.buf.reserve(READ_CHUNK);
        &mut self.buf
    }

    /// The peer closed its end. `Ok(None)`: a clean close between frames.
    pub(crate) fn eof(&self) -> Result<Option<ServerFrame>, ClientError> {
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
        Err(ClientError::protocol(
            Mismatch::BadFrame,
            "connection closed mid-frame",
        ))
    }

    /// A read failed.
    pub(crate) fn read_error(&self, e: io::Error) -> ClientError {
        // An older daemon reads MAGIC as a legacy header (type 0x89, 1.2 GiB),
        // refuses it and closes with the rest of HELLO unread: on a Unix socket
        // that reaches us as a reset, not EOF (SPEC.md §6). Same as EOF here.
        if e.kind() == io::ErrorKind::ConnectionReset && !self.codec.answered() {
            return ClientError::protocol(
                Mismatch::NoAnswer,
                "the daemon reset the connection without answering latch protocol 2; \
                 it may be an older daemon",
            );
        }
        io_err("read", e)
    }
}

impl Outbox {
    /// Encodes one frame; the bytes are valid until the next call.
    pub(crate) fn encode(&mut self, f: &ClientFrame) -> Result<&[u8], ClientError> {
        self.out.clear();
        self.codec
            .encode_client(f, &mut self.out)
            .map_err(|e| ClientError::Usage(e.to_string()))?;
        Ok(&self.out)
    }
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

/// Maps an IO error on the connection.
pub(crate) fn io_err(context: &str, e: io::Error) -> ClientError {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => timed_out(context),
        _ => ClientError::unreachable(UnreachableCause::Io, format!("{context}: {e}")),
    }
}

/// The daemon did not answer within the connection's timeout.
pub(crate) fn timed_out(context: &str) -> ClientError {
    ClientError::unreachable(
        UnreachableCause::TimedOut,
        format!("{context}: the daemon did not answer in time"),
    )
}

/// Maps a failed connect to the socket at `path`.
pub(crate) fn connect_err(path: &Path, e: io::Error) -> ClientError {
    match e.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused => ClientError::unreachable(
            UnreachableCause::NotListening,
            format!("no daemon listening at {}: {e}", path.display()),
        ),
        _ => ClientError::unreachable(
            UnreachableCause::Io,
            format!("connect {}: {e}", path.display()),
        ),
    }
}

/// Checks that the peer of `stream` runs as our effective uid (SPEC.md §5.5), before
/// a byte is sent.
pub fn check_peer_uid(stream: &impl std::os::fd::AsFd) -> Result<(), ClientError> {
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

/// The outcome of HELLO (SPEC.md §5.1). A daemon that refuses the connection (too
/// many connections) writes its refusal and closes without reading: our HELLO may
/// then meet a broken pipe, yet the refusal is waiting to be read, so a frame read
/// wins over a failed write.
pub(crate) fn welcome(
    hs: &ClientHandshake,
    wrote: Result<(), ClientError>,
    read: Result<Option<ServerFrame>, ClientError>,
) -> Result<Negotiated, ClientError> {
    let answer = match (wrote, read) {
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
    hs.on_welcome(answer).map_err(handshake_err)
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

/// Where a request stands after a frame.
pub(crate) enum Step<T> {
    /// Wait for the next frame.
    More,
    /// The answer.
    Done(Result<T, ClientError>),
}

/// What a step function is fed: the next frame, or `None` when the daemon closed
/// the connection cleanly.
type StepFn<T> = Box<dyn FnMut(Option<ServerFrame>) -> Step<T> + Send>;

/// One request: the frames to send, then a step function fed every frame that
/// arrives until it is done.
pub(crate) struct Op<T> {
    /// The frames, in order.
    pub(crate) send: Vec<ClientFrame>,
    /// Fed each frame read.
    pub(crate) step: StepFn<T>,
}

/// One answer frame, `Error` and a close mapped to errors.
fn reply(f: Option<ServerFrame>) -> Result<ServerFrame, ClientError> {
    match f {
        Some(ServerFrame::Error { code, detail }) => Err(ClientError::Daemon { code, detail }),
        Some(f) => Ok(f),
        None => Err(ClientError::unreachable(
            UnreachableCause::Closed,
            "the daemon closed the connection",
        )),
    }
}

/// BIND to `target` (SPEC.md §5.2): the answer must name exactly `target`.
pub(crate) fn bind(target: &SessionRef) -> Op<()> {
    let hs = ClientHandshake::default();
    let frame = hs.bind(target);
    let target = target.clone();
    Op {
        send: vec![frame],
        step: Box::new(move |f| {
            let Some(answer) = f else {
                return Step::Done(Err(ClientError::unreachable(
                    UnreachableCause::Closed,
                    "the daemon closed the connection during BIND",
                )));
            };
            Step::Done(hs.on_bound(&target, answer).map_err(|e| match e {
                HandshakeError::Refused {
                    code: ErrorCode::IncarnationMismatch | ErrorCode::IdMismatch,
                    ..
                }
                | HandshakeError::WrongBinding => {
                    ClientError::replaced(&target.id, target.incarnation, None)
                }
                other => handshake_err(other),
            }))
        }),
    }
}

/// STATUS (legal before BIND): a version-2 daemon's STATUS, or a version-3
/// daemon's STATUS3 less its output facts.
pub(crate) fn status() -> Op<StatusReply> {
    Op {
        send: vec![ClientFrame::Status],
        step: Box::new(|f| Step::Done(reply(f).and_then(status_reply).map(|(s, _)| s))),
    }
}

/// STATUS with what a version-3 daemon adds (`None` from a version-2 one).
pub(crate) fn status_full() -> Op<(StatusReply, Option<OutputFacts>)> {
    Op {
        send: vec![ClientFrame::Status],
        step: Box::new(|f| Step::Done(reply(f).and_then(status_reply))),
    }
}

fn status_reply(f: ServerFrame) -> Result<(StatusReply, Option<OutputFacts>), ClientError> {
    match f {
        ServerFrame::Status(s) => Ok((*s, None)),
        ServerFrame::Status3(s) => {
            let s = *s;
            Ok((s.base, Some(s.output)))
        }
        other => Err(unexpected(&other)),
    }
}

/// OUTPUT_SINCE (SPEC.md §4.2): the held output after `since`, at most `max`
/// bytes. A daemon of version 2 has no output cursor: a protocol mismatch (exit
/// 8) naming both versions, with nothing sent.
pub(crate) fn output_since(
    negotiated: &Negotiated,
    since: u64,
    max: u32,
) -> Result<Op<OutputRange>, ClientError> {
    needs_version(negotiated, CURSORS_VERSION, "output cursors")?;
    Ok(Op {
        send: vec![ClientFrame::OutputSince { since, max }],
        step: Box::new(|f| {
            Step::Done(reply(f).and_then(|f| match f {
                ServerFrame::OutputRange(r) => Ok(r),
                other => Err(unexpected(&other)),
            }))
        }),
    })
}

/// CAST_START or CASTS (SPEC.md §4.8): the recordings the daemon answers with.
/// A version-2 daemon records nothing: a protocol mismatch (exit 8), nothing sent.
pub(crate) fn casts(
    negotiated: &Negotiated,
    frame: ClientFrame,
) -> Result<Op<Vec<latch_wire::CastInfo>>, ClientError> {
    needs_version(negotiated, CURSORS_VERSION, "recordings")?;
    Ok(Op {
        send: vec![frame],
        step: Box::new(|f| {
            Step::Done(reply(f).and_then(|f| match f {
                ServerFrame::Casts(c) => Ok(c),
                other => Err(unexpected(&other)),
            }))
        }),
    })
}

/// LEASE (SPEC.md §4.7): the run lease, and the facts for typing.
pub(crate) fn lease(negotiated: &Negotiated) -> Result<Op<latch_wire::LeaseFacts>, ClientError> {
    needs_version(negotiated, CURSORS_VERSION, "runs")?;
    Ok(Op {
        send: vec![ClientFrame::Lease],
        step: Box::new(|f| {
            Step::Done(reply(f).and_then(|f| match f {
                ServerFrame::Leased(l) => Ok(*l),
                other => Err(unexpected(&other)),
            }))
        }),
    })
}

/// COMMANDS (SPEC.md §4.7): the newest `last` command blocks.
pub(crate) fn commands(
    negotiated: &Negotiated,
    last: u32,
) -> Result<Op<Vec<latch_wire::CommandBlock>>, ClientError> {
    needs_version(negotiated, CURSORS_VERSION, "command blocks")?;
    Ok(Op {
        send: vec![ClientFrame::Commands { last }],
        step: Box::new(|f| {
            Step::Done(reply(f).and_then(|f| match f {
                ServerFrame::Commands(v) => Ok(v),
                other => Err(unexpected(&other)),
            }))
        }),
    })
}

/// A mismatch unless the connection speaks `version` or later.
pub(crate) fn needs_version(
    negotiated: &Negotiated,
    version: u16,
    what: &str,
) -> Result<(), ClientError> {
    if negotiated.version >= version {
        return Ok(());
    }
    Err(ClientError::protocol(
        Mismatch::Version,
        format!(
            "{what} need protocol version {version}; this session's daemon speaks version {} \
             (this latch speaks {})",
            negotiated.version,
            latch_wire::SUPPORTED
        ),
    ))
}

/// One CAPTURE (SPEC.md §4.4): the screen as cells, postcard-encoded. A daemon of
/// version 2 has none: a protocol mismatch (exit 8) naming both versions.
pub(crate) fn capture(negotiated: &Negotiated, full: bool) -> Result<Op<Bytes>, ClientError> {
    needs_version(negotiated, CURSORS_VERSION, "pictures")?;
    Ok(Op {
        send: vec![ClientFrame::Capture { full }],
        step: Box::new(|f| {
            Step::Done(reply(f).and_then(|f| match f {
                ServerFrame::Capture(b) => Ok(b),
                other => Err(unexpected(&other)),
            }))
        }),
    })
}

/// One PEEK.
pub(crate) fn peek(opts: PeekOptions) -> Op<Bytes> {
    let (plain, full) = opts.flags();
    Op {
        send: vec![ClientFrame::Peek(PeekRequest { plain, full })],
        step: Box::new(|f| {
            Step::Done(reply(f).and_then(|f| match f {
                ServerFrame::Screen(b) => Ok(b),
                other => Err(unexpected(&other)),
            }))
        }),
    }
}

/// A request with no reply of its own, then a PING, so that a refusal is reported
/// and success means the daemon has carried it out (SPEC.md §5.3).
pub(crate) fn confirmed(frame: ClientFrame) -> Op<()> {
    let token = u64::from(std::process::id());
    Op {
        send: vec![frame, ClientFrame::Ping(token)],
        step: Box::new(move |f| match reply(f) {
            Ok(ServerFrame::Pong(t)) if t == token => Step::Done(Ok(())),
            Ok(ServerFrame::Geometry { .. } | ServerFrame::Pong(_)) => Step::More,
            Ok(other) => Step::Done(Err(unexpected(&other))),
            Err(e) => Step::Done(Err(e)),
        }),
    }
}

/// The INPUT frames carrying `bytes`, each within the daemon's frame limit.
pub(crate) fn input_frames(negotiated: &Negotiated, bytes: &[u8]) -> Vec<ClientFrame> {
    let max = usize::try_from(negotiated.limits.max_client_frame)
        .unwrap_or(usize::MAX)
        .saturating_sub(64)
        .max(1);
    bytes
        .chunks(max)
        .map(|c| ClientFrame::Input(Bytes::copy_from_slice(c)))
        .collect()
}

/// What ATTACH answers first (SPEC.md §5.4): the PTY size and the screen cut.
pub(crate) struct Preface {
    pub(crate) rows: u16,
    pub(crate) cols: u16,
    pub(crate) screen: Bytes,
    pub(crate) cut: Option<CutFacts>,
}

/// An attached session, blocking ([`crate::Attached`]) or async
/// (`nonblocking::Attached`): the replayed screen and the live stream's halves.
#[derive(Debug)]
#[non_exhaustive]
pub struct Attachment<R, W> {
    /// PTY rows at attach time.
    pub rows: u16,
    /// PTY columns at attach time.
    pub cols: u16,
    /// The screen cut at attach time (ANSI, repaints a terminal).
    pub screen: Bytes,
    /// From a daemon of protocol version 3: the output cursor at the cut (the
    /// first output after it starts there) and the shell there (SPEC.md §4.7).
    pub cut: Option<CutFacts>,
    /// Reads the live stream.
    pub reader: R,
    /// Sends input, resizes and detach.
    pub writer: W,
}

impl<R, W> Attachment<R, W> {
    pub(crate) fn new(preface: Preface, reader: R, writer: W) -> Self {
        Self {
            rows: preface.rows,
            cols: preface.cols,
            screen: preface.screen,
            cut: preface.cut,
            reader,
            writer,
        }
    }
}

/// ATTACH: GEOMETRY, then SCREEN, then (version 3, `cursors`) CUT.
pub(crate) fn attach(rows: u16, cols: u16, mode: AttachMode, cursors: bool) -> Op<Preface> {
    let mut size = None;
    let mut cut_screen = None;
    Op {
        send: vec![ClientFrame::Attach(AttachRequest {
            rows,
            cols,
            read_only: mode.read_only(),
        })],
        step: Box::new(move |f| match (reply(f), size) {
            (Ok(ServerFrame::Geometry { rows, cols }), None) => {
                size = Some((rows, cols));
                Step::More
            }
            (Ok(ServerFrame::Screen(screen)), Some((rows, cols))) if !cursors => {
                Step::Done(Ok(Preface {
                    rows,
                    cols,
                    screen,
                    cut: None,
                }))
            }
            (Ok(ServerFrame::Screen(screen)), Some(_)) if cut_screen.is_none() => {
                cut_screen = Some(screen);
                Step::More
            }
            (Ok(ServerFrame::Cut(cut)), Some((rows, cols))) if cut_screen.is_some() => {
                Step::Done(Ok(Preface {
                    rows,
                    cols,
                    screen: cut_screen.take().unwrap_or_default(),
                    cut: Some(cut),
                }))
            }
            (Ok(other), _) => Step::Done(Err(unexpected(&other))),
            (Err(e), _) => Step::Done(Err(e)),
        }),
    }
}

/// What a frame on an attached connection means; `None` for one to skip.
pub(crate) fn attach_event(f: Option<ServerFrame>) -> Option<Result<AttachEvent, ClientError>> {
    Some(Ok(match f {
        None => AttachEvent::Closed,
        Some(ServerFrame::Output(b)) => AttachEvent::Output(b),
        Some(ServerFrame::Geometry { rows, cols }) => AttachEvent::Geometry { rows, cols },
        Some(ServerFrame::Exit(s)) => AttachEvent::Exit(s),
        Some(ServerFrame::Screen(b)) => AttachEvent::Screen(b),
        Some(ServerFrame::Detached) => AttachEvent::Detached,
        Some(ServerFrame::Error { code, detail }) => AttachEvent::Error { code, detail },
        Some(ServerFrame::Cut(c)) => AttachEvent::Cut(c),
        Some(ServerFrame::Leased(l)) if !l.granted => AttachEvent::LeaseRevoked,
        Some(ServerFrame::Pong(_)) => return None,
        Some(other) => return Some(Err(unexpected(&other))),
    }))
}

/// While waiting for the daemon to close: `Some(closed?)` once it is decided,
/// `None` to keep reading.
pub(crate) fn closed_outcome(
    read: Result<Option<ServerFrame>, ClientError>,
) -> Option<Result<bool, ClientError>> {
    match read {
        Ok(None) => Some(Ok(true)),
        Ok(Some(_)) => None,
        Err(ClientError::Unreachable {
            cause: UnreachableCause::TimedOut,
            ..
        }) => Some(Ok(false)),
        Err(ClientError::Unreachable { .. }) => Some(Ok(true)),
        Err(e) => Some(Err(e)),
    }
}

/// While waiting for text: what an event on the watching attachment means.
/// `Ok(())`: look at the screen again.
pub(crate) fn wait_wake(event: AttachEvent, text: &str) -> Result<(), ClientError> {
    match event {
        AttachEvent::Output(_)
        | AttachEvent::Screen(_)
        | AttachEvent::Geometry { .. }
        | AttachEvent::Cut(_)
        | AttachEvent::LeaseRevoked => Ok(()),
        AttachEvent::Exit(_) | AttachEvent::Closed | AttachEvent::Detached => {
            Err(ClientError::unreachable(
                UnreachableCause::Exited,
                format!("session ended before {text:?} appeared"),
            ))
        }
        AttachEvent::Error { code, detail } => Err(ClientError::Daemon { code, detail }),
    }
}

/// Whether a plain screen shows `text`.
pub(crate) fn shows(screen: &[u8], text: &str) -> bool {
    String::from_utf8_lossy(screen).contains(text)
}

/// The error when `text` did not appear within `timeout`.
pub(crate) fn wait_timed_out(text: &str, timeout: std::time::Duration) -> ClientError {
    ClientError::TimedOut(format!(
        "{text:?} did not appear within {:.1} s",
        timeout.as_secs_f64()
    ))
}

#[cfg(test)]
mod version_tests {
    use super::*;
    use latch_wire::Limits;

    fn negotiated(version: u16) -> Negotiated {
        Negotiated {
            version,
            limits: Limits {
                max_client_frame: 65_536,
                max_server_frame: 16 << 20,
                client_queue_bytes: 8 << 20,
            },
        }
    }

    /// A command that needs cursors, against a version-2 daemon: exit 8 naming
    /// both versions, with nothing sent (SPEC.md §4.2).
    #[test]
    fn output_since_needs_version_3() {
        let Err(e) = output_since(&negotiated(2), 0, 1) else {
            panic!("a version-2 daemon has no output cursor")
        };
        assert_eq!(e.exit_code(), crate::exit::PROTOCOL);
        let text = e.to_string();
        assert!(text.contains("version 3"), "{text}");
        assert!(text.contains("speaks version 2"), "{text}");
        assert!(output_since(&negotiated(3), 0, 1).is_ok());
    }

    /// A picture against a version-2 daemon: exit 8 naming both versions, with
    /// nothing sent (SPEC.md §4.2, §4.4).
    #[test]
    fn capture_needs_version_3() {
        let Err(e) = capture(&negotiated(2), true) else {
            panic!("a version-2 daemon has no CAPTURE")
        };
        assert_eq!(e.exit_code(), crate::exit::PROTOCOL);
        let text = e.to_string();
        assert!(
            text.contains("version 3") && text.contains("speaks version 2"),
            "{text}"
        );
        let op = capture(&negotiated(3), false).unwrap();
        assert_eq!(op.send, vec![ClientFrame::Capture { full: false }]);
    }
}
