//! The daemon side of a connection: the one place that decides what is legal
//! when (SPEC.md §5).
//!
//! ```text
//!            HELLO ok               BIND {own id, own incarnation}
//! Accepted ----------> Negotiated ---------------------------------> Bound
//!    |                   |  STATUS, PING                              |  every effect
//!    | legacy packet     |  anything else: typed refusal              |  STATUS, PING
//!    v                   v                                            v
//!  Legacy (policy)     Closed  <----------- fatal error / DETACH -----+
//! ```
//!
//! Call order: construct with [`ServerConfig`] and the time the connection was
//! accepted; feed every decoded [`Inbound`] frame to [`ServerConn::handle`] with the
//! current time and the daemon's [`Env`]; a decoding failure to
//! [`ServerConn::handle_decode_error`]; sleep until [`ServerConn::poll_timeout`] and
//! then call [`ServerConn::handle_timeout`]; carry out the returned [`Out`] items in
//! order. Nothing here does IO or reads a clock: the caller passes time in (as
//! quinn-proto's `Connection` does), so the deadlines of SPEC.md §8 are rules of
//! this machine, covered by its tests and fuzz target like every other rule.
//!
//! **Central property** (SPEC.md §11 I3, checked by proptest and fuzzing):
//! a strict connection yields [`Out::Effect`] only while it is bound to the
//! daemon's own `{id, incarnation}`; a legacy connection yields a mutating effect
//! (input, resize, signal, read-write attach) only under [`LegacyPolicy::Full`].

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use crate::codec::{Framing, Inbound, Outbound, ServerCodec};
use crate::error::FrameError;
use crate::frame::{
    AttachRequest, ClientFrame, ErrorCode, LegacyPolicy, Limits, PeekRequest, ServerFrame, Size,
    TerminalRequest, CLIENT_NAME_MAX_LEN,
};
use crate::ids::SessionRef;
use crate::legacy::LegacyClientFrame;
use crate::limits::{check_size, HANDSHAKE_TIMEOUT_MS, IDLE_UNBOUND_MS};
use crate::version::{negotiate, VersionRange, CURSORS_VERSION, TERMINAL_VERSION};

/// Fixed facts about the daemon, given once per connection.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The daemon's own creation.
    pub own: SessionRef,
    /// Versions the daemon speaks.
    pub versions: VersionRange,
    /// Limits announced in WELCOME.
    pub limits: Limits,
    /// Name announced in WELCOME.
    pub server_name: String,
    /// The legacy policy in force.
    pub legacy_policy: LegacyPolicy,
}

/// The daemon's changing state that bears on legality.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Env {
    /// A kill or restart has begun: no new binds, no effects.
    pub draining: bool,
    /// The program has exited: input, resize and signals are refused with
    /// `exited` (the daemon closes every connection once it has recorded the
    /// exit, SPEC.md §5.3).
    pub exited: bool,
}

/// An effect on the session. Carried out only when the state machine emits it.
///
/// Each carries the facts about its connection that carrying it out needs, so the
/// daemon never asks the state machine again after a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Attach: send GEOMETRY, one SCREEN cut, then output and exit in order.
    Attach(AttachRequest),
    /// Attach with the terminal the client passed (version 4, SPEC.md §5.7): as
    /// ATTACH, but the stream goes to that terminal, and its keys come from it.
    AttachTerminal(TerminalRequest),
    /// Send one screen snapshot.
    Peek(PeekRequest),
    /// A legacy PEEK: subscribe read-only, as ATTACH does, with pty's PEEK screen
    /// (SPEC.md §7).
    Subscribe(PeekRequest),
    /// Write bytes to the PTY.
    Input {
        /// The bytes.
        bytes: Bytes,
        /// From the attached read-write connection: while the program's input is
        /// full it is queued and the connection waits; from any other, refused with
        /// `input-full` (SPEC.md §8).
        attached_writer: bool,
    },
    /// Set this connection's size (attached) or the PTY size (not attached).
    Resize {
        /// The size.
        size: Size,
        /// From the attached read-write connection: its size counts toward the
        /// PTY size rule; from any other, the PTY takes it directly.
        attached_writer: bool,
    },
    /// Signal the program.
    Signal(i32),
    /// Start draining, then signal the program.
    Stop(i32),
    /// The client detached; drop its attachment.
    Detach,
    /// Send the output after `since` that the ring holds, at most `max` bytes
    /// (version 3).
    OutputSince {
        /// The cursor to read from.
        since: u64,
        /// The most bytes wanted.
        max: u32,
    },
    /// Start recording into a new file (version 3, SPEC.md §4.8).
    CastStart(crate::frame::CastRequest),
    /// Report the active recordings, stopping them first with `stop` (version 3).
    Casts {
        /// Stop them.
        stop: bool,
    },
    /// Take (or re-read) the run lease: answer LEASED (version 3).
    Lease,
    /// Give the run lease back (version 3).
    Release,
    /// Send the newest `last` command blocks (version 3).
    Commands {
        /// How many.
        last: u32,
    },
    /// Send the cell-grid capture, with the scrollback if `full` (version 3).
    Capture {
        /// The scrollback too.
        full: bool,
    },
}

impl Effect {
    /// Whether the effect needs the program to be running (input, resize and
    /// signals reach it; attach, peek and detach only observe).
    pub fn needs_program(&self) -> bool {
        matches!(
            self,
            Self::Input { .. }
                | Self::Resize { .. }
                | Self::Signal(_)
                | Self::Stop(_)
                | Self::CastStart(_)
        )
    }

    /// Whether the effect can change the session (as opposed to observing it).
    pub fn is_mutating(&self) -> bool {
        match self {
            Self::Attach(AttachRequest { read_only, .. })
            | Self::AttachTerminal(TerminalRequest { read_only, .. }) => !read_only,
            Self::Peek(_)
            | Self::Subscribe(_)
            | Self::Detach
            | Self::OutputSince { .. }
            | Self::Casts { .. }
            | Self::Release
            | Self::Commands { .. }
            | Self::Capture { .. } => false,
            // A recording observes, but writes a file as the daemon's user.
            Self::CastStart(_) => true,
            Self::Lease => true,
            Self::Input { .. } | Self::Resize { .. } | Self::Signal(_) | Self::Stop(_) => true,
        }
    }
}

/// Which STATUS a connection gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusForm {
    /// STATUS (version 2).
    Strict,
    /// STATUS3: STATUS's fields, then the output's (version 3, SPEC.md §4.2).
    WithOutput,
    /// The legacy STATUS packet's JSON (SPEC.md §7).
    Legacy,
}

/// One thing for the daemon to do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Out {
    /// Send this frame.
    Send(Outbound),
    /// Send the daemon's STATUS, in this form.
    Status(StatusForm),
    /// Carry out this effect.
    Effect(Effect),
    /// Close the connection after sending what precedes.
    Close,
}

/// How a bound connection is attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Bound, not attached.
    Unattached,
    /// Attached read-only: output only; never input, resize or signals.
    ReadOnly,
    /// Attached read-write: its size counts toward the PTY's.
    ReadWrite,
}

/// Where a connection stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnState {
    /// Nothing received yet.
    Accepted,
    /// HELLO accepted at this version.
    Negotiated {
        /// The chosen version.
        version: u16,
    },
    /// BIND accepted.
    Bound {
        /// The chosen version.
        version: u16,
        /// Whether and how it is attached.
        access: Access,
    },
    /// Legacy framing.
    Legacy {
        /// Attached (as writer or read-only).
        attached: bool,
    },
    /// Closed; every further frame is ignored.
    Closed,
}

/// The daemon side of one connection.
///
/// It owns the connection's codec, so which framing the connection speaks is
/// recorded once, where its first bytes were classified: the reader decodes, the
/// writer encodes and the protocol rules ask through this one value.
#[derive(Debug)]
pub struct ServerConn {
    config: ServerConfig,
    codec: ServerCodec,
    state: ConnState,
    /// When the connection was accepted.
    opened: Instant,
    /// When its last frame arrived.
    last_frame: Instant,
    /// A legacy connection that sent PEEK: a read-only subscription (SPEC.md §7).
    legacy_peek: bool,
    /// The daemon granted this connection the run lease: it may send INPUT and
    /// SIGNAL while attached read-only (SPEC.md §4.7).
    leased: bool,
}

/// The STATUS a strict connection at `version` gets.
fn status_form(version: u16) -> StatusForm {
    if version >= CURSORS_VERSION {
        StatusForm::WithOutput
    } else {
        StatusForm::Strict
    }
}

fn refuse(code: ErrorCode, detail: impl Into<String>) -> Vec<Out> {
    let mut out = vec![Out::Send(Outbound::Strict(ServerFrame::error(
        code, detail,
    )))];
    if code.is_fatal() {
        out.push(Out::Close);
    }
    out
}

impl ServerConn {
    /// A fresh connection, accepted at `now`.
    pub fn new(config: ServerConfig, now: Instant) -> Self {
        Self::with_codec(config, ServerCodec::default(), now)
    }

    /// A fresh connection whose codec has other limits.
    pub fn with_codec(config: ServerConfig, codec: ServerCodec, now: Instant) -> Self {
        Self {
            config,
            codec,
            state: ConnState::Accepted,
            opened: now,
            last_frame: now,
            legacy_peek: false,
            leased: false,
        }
    }

    /// Whether this connection holds the run lease.
    pub fn is_leased(&self) -> bool {
        self.leased
    }

    /// The daemon granted (or took back) the run lease of this connection.
    pub fn set_leased(&mut self, leased: bool) {
        self.leased = leased;
    }

    /// When the connection must next be woken if no frame arrives
    /// ([`ServerConn::handle_timeout`]): its first complete frame is due
    /// HANDSHAKE_TIMEOUT_MS after it was accepted, and a negotiated connection that
    /// has not bound must send a frame within IDLE_UNBOUND_MS of its last one
    /// (SPEC.md §8). Bound, legacy and closed connections have no deadline.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.state {
            ConnState::Accepted => Some(self.opened + Duration::from_millis(HANDSHAKE_TIMEOUT_MS)),
            ConnState::Negotiated { .. } => {
                Some(self.last_frame + Duration::from_millis(IDLE_UNBOUND_MS))
            }
            ConnState::Bound { .. } | ConnState::Legacy { .. } | ConnState::Closed => None,
        }
    }

    /// Decodes the next inbound frame from `src` (classifying the connection from
    /// its first bytes); feed it to [`ServerConn::handle`].
    pub fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Inbound>, FrameError> {
        self.codec.decode_inbound(src)
    }

    /// Encodes one outbound frame in the connection's framing
    /// ([`ServerCodec::encode_outbound`]).
    pub fn encode(&mut self, item: &Outbound, dst: &mut BytesMut) -> Result<(), FrameError> {
        self.codec.encode_outbound(item, dst)
    }

    /// The framing the connection speaks, as far as its bytes have told.
    pub fn framing(&self) -> Framing {
        self.codec.framing()
    }

    /// The deadline may have passed at `now`. Past the deadline the connection
    /// closes, with ERROR `handshake-timeout` first if it opened in the strict
    /// framing (a connection that sent nothing, or part of a legacy header, is
    /// closed without a word: it may not speak this protocol at all).
    pub fn handle_timeout(&mut self, now: Instant) -> Vec<Out> {
        match self.poll_timeout() {
            Some(deadline) if now >= deadline => {}
            _ => return Vec::new(),
        }
        let detail = match self.state {
            ConnState::Accepted => format!("no complete frame within {HANDSHAKE_TIMEOUT_MS} ms"),
            _ => format!("no BIND and no frame within {IDLE_UNBOUND_MS} ms"),
        };
        self.state = ConnState::Closed;
        match self.framing() {
            Framing::Strict => vec![
                Out::Send(Outbound::Strict(ServerFrame::error(
                    ErrorCode::HandshakeTimeout,
                    detail,
                ))),
                Out::Close,
            ],
            Framing::Undecided | Framing::Legacy => vec![Out::Close],
        }
    }

    /// The codec could not decode the next frame: the stream is corrupt and the
    /// connection closes. A connection that opened in the strict framing is told
    /// why first (the error's code: `malformed`, `frame-too-large`); the legacy
    /// framing has no error packet, and an undecided opening gets no answer.
    pub fn handle_decode_error(&mut self, error: &FrameError) -> Vec<Out> {
        if self.state == ConnState::Closed {
            return Vec::new();
        }
        self.state = ConnState::Closed;
        match self.framing() {
            Framing::Strict => vec![
                Out::Send(Outbound::Strict(ServerFrame::error(
                    error.error_code(),
                    error.to_string(),
                ))),
                Out::Close,
            ],
            Framing::Undecided | Framing::Legacy => vec![Out::Close],
        }
    }

    /// The current state.
    pub fn state(&self) -> ConnState {
        self.state
    }

    /// The negotiated strict version, once negotiated (`None` before, on a legacy
    /// connection, and once closed): it decides which STATUS a connection gets and
    /// whether its stream carries CUT (SPEC.md §4.2).
    pub fn version(&self) -> Option<u16> {
        match self.state {
            ConnState::Negotiated { version } | ConnState::Bound { version, .. } => Some(version),
            _ => None,
        }
    }

    /// Whether the connection speaks the legacy framing.
    pub fn is_legacy(&self) -> bool {
        self.framing() == Framing::Legacy
    }

    /// Whether the connection is attached read-write (its size counts).
    pub fn is_writer(&self) -> bool {
        matches!(
            self.state,
            ConnState::Bound {
                access: Access::ReadWrite,
                ..
            }
        ) || (matches!(self.state, ConnState::Legacy { attached: true })
            && self.config.legacy_policy == LegacyPolicy::Full
            && !self.legacy_peek)
    }

    /// Whether the connection is attached at all.
    pub fn is_attached(&self) -> bool {
        matches!(
            self.state,
            ConnState::Bound {
                access: Access::ReadOnly | Access::ReadWrite,
                ..
            } | ConnState::Legacy { attached: true }
        )
    }

    /// Marks the connection closed (the daemon calls this on a fatal IO or frame
    /// error, or when it cuts a slow client off).
    pub fn close(&mut self) {
        self.state = ConnState::Closed;
    }

    /// Feeds one decoded frame, arrived at `now`; returns what to do, in order.
    pub fn handle(&mut self, now: Instant, frame: Inbound, env: Env) -> Vec<Out> {
        self.last_frame = now;
        let out = match frame {
            Inbound::Strict(f) => {
                self.codec.settle(Framing::Strict);
                self.handle_strict(f, env)
            }
            Inbound::Legacy(f) => {
                self.codec.settle(Framing::Legacy);
                self.handle_legacy(f, env)
            }
        };
        if out.iter().any(|o| matches!(o, Out::Close)) {
            self.state = ConnState::Closed;
        }
        out
    }

    fn handle_strict(&mut self, frame: ClientFrame, env: Env) -> Vec<Out> {
        match self.state {
            ConnState::Closed => Vec::new(),
            ConnState::Legacy { .. } => {
                refuse(ErrorCode::Malformed, "strict frame on a legacy connection")
            }
            ConnState::Accepted => match frame {
                ClientFrame::Hello { versions, client } => self.hello(versions, &client),
                _ => refuse(ErrorCode::NotNegotiated, "send HELLO first"),
            },
            ConnState::Negotiated { version } => match frame {
                ClientFrame::Hello { .. } => refuse(ErrorCode::AlreadyNegotiated, "second HELLO"),
                ClientFrame::Status => vec![Out::Status(status_form(version))],
                ClientFrame::Ping(n) => vec![Out::Send(Outbound::Strict(ServerFrame::Pong(n)))],
                ClientFrame::Bind { id, incarnation } => {
                    if env.draining {
                        return refuse(ErrorCode::Draining, "session is shutting down");
                    }
                    let asked = SessionRef::new(id, incarnation);
                    // Compare the incarnation in constant time whatever the id says.
                    let inc_ok = asked.incarnation.ct_eq(&self.config.own.incarnation);
                    let id_ok = asked.id == self.config.own.id;
                    if !id_ok {
                        return refuse(
                            ErrorCode::IdMismatch,
                            format!("this daemon serves id {}", self.config.own.id),
                        );
                    }
                    if !inc_ok {
                        // The asked incarnation may be an older creation's or one
                        // that never existed: say only what this daemon knows.
                        return refuse(
                            ErrorCode::IncarnationMismatch,
                            format!(
                                "this daemon serves another creation of id {}",
                                self.config.own.id
                            ),
                        );
                    }
                    self.state = ConnState::Bound {
                        version,
                        access: Access::Unattached,
                    };
                    vec![Out::Send(Outbound::Strict(ServerFrame::Bound {
                        id: self.config.own.id.clone(),
                        incarnation: self.config.own.incarnation,
                    }))]
                }
                _ => refuse(ErrorCode::NotBound, "send BIND before any effect"),
            },
            ConnState::Bound { version, access } => self.bound(version, access, frame, env),
        }
    }

    fn hello(&mut self, versions: VersionRange, client: &str) -> Vec<Out> {
        if client.len() > CLIENT_NAME_MAX_LEN {
            let mut out = refuse(
                ErrorCode::InvalidArgument,
                format!("client name longer than {CLIENT_NAME_MAX_LEN} bytes"),
            );
            out.push(Out::Close);
            return out;
        }
        match negotiate(versions, self.config.versions) {
            Some(version) => {
                self.state = ConnState::Negotiated { version };
                vec![Out::Send(Outbound::Strict(ServerFrame::Welcome {
                    version,
                    limits: self.config.limits,
                    server: self.config.server_name.clone(),
                }))]
            }
            None => refuse(
                ErrorCode::VersionUnsupported,
                format!(
                    "daemon speaks {} and client asked {versions}",
                    self.config.versions
                ),
            ),
        }
    }

    fn bound(&mut self, version: u16, access: Access, frame: ClientFrame, env: Env) -> Vec<Out> {
        // The run lease's holder types its command while it watches the stream
        // read-only (SPEC.md §4.7); STOP stays a read-write client's.
        let read_only = access == Access::ReadOnly && !self.leased;
        let is_stop = matches!(frame, ClientFrame::Stop { .. });
        let effect = match frame {
            ClientFrame::Hello { .. } => {
                return refuse(ErrorCode::AlreadyNegotiated, "second HELLO")
            }
            ClientFrame::Bind { .. } => return refuse(ErrorCode::AlreadyBound, "second BIND"),
            ClientFrame::Status => return vec![Out::Status(status_form(version))],
            ClientFrame::Ping(n) => return vec![Out::Send(Outbound::Strict(ServerFrame::Pong(n)))],
            ClientFrame::Detach => {
                return vec![
                    Out::Effect(Effect::Detach),
                    Out::Send(Outbound::Strict(ServerFrame::Detached)),
                    Out::Close,
                ]
            }
            ClientFrame::Attach(AttachRequest {
                rows,
                cols,
                read_only,
            }) => {
                if access != Access::Unattached {
                    return refuse(ErrorCode::AlreadyAttached, "connection is already attached");
                }
                // 0x0 means "size unknown" (it does not count toward the PTY size);
                // anything announced is checked before the daemon allocates for it.
                if (rows, cols) != (0, 0) {
                    if let Err(e) = check_size(rows, cols) {
                        return refuse(ErrorCode::InvalidArgument, e.to_string());
                    }
                }
                Effect::Attach(AttachRequest {
                    rows,
                    cols,
                    read_only,
                })
            }
            ClientFrame::Peek(PeekRequest { plain, full }) => {
                Effect::Peek(PeekRequest { plain, full })
            }
            ClientFrame::Input(b) => {
                if read_only {
                    return refuse(
                        ErrorCode::ForbiddenByPolicy,
                        "read-only client cannot send input",
                    );
                }
                Effect::Input {
                    bytes: b,
                    attached_writer: access == Access::ReadWrite,
                }
            }
            ClientFrame::Resize(Size { rows, cols }) => {
                if read_only {
                    return refuse(
                        ErrorCode::ForbiddenByPolicy,
                        "read-only client cannot resize",
                    );
                }
                if let Err(e) = check_size(rows, cols) {
                    return refuse(ErrorCode::InvalidArgument, e.to_string());
                }
                Effect::Resize {
                    size: Size { rows, cols },
                    attached_writer: access == Access::ReadWrite,
                }
            }
            ClientFrame::Signal { signal } | ClientFrame::Stop { signal } => {
                if read_only || (is_stop && access == Access::ReadOnly) {
                    return refuse(
                        ErrorCode::ForbiddenByPolicy,
                        "read-only client cannot signal",
                    );
                }
                if !(1..=64).contains(&signal) {
                    return refuse(
                        ErrorCode::InvalidArgument,
                        format!("no such signal {signal}"),
                    );
                }
                if is_stop {
                    Effect::Stop(signal)
                } else {
                    Effect::Signal(signal)
                }
            }
            ClientFrame::OutputSince { since, max } => {
                // A frame version 2 does not have is, on a version-2 connection,
                // an unknown variant: `malformed` (SPEC.md §3).
                if version < CURSORS_VERSION {
                    self.state = ConnState::Closed;
                    return refuse(
                        ErrorCode::Malformed,
                        format!(
                            "OUTPUT_SINCE needs version {CURSORS_VERSION}; this connection speaks {version}"
                        ),
                    );
                }
                Effect::OutputSince { since, max }
            }
            ClientFrame::CastStart(req) => {
                if version < CURSORS_VERSION {
                    self.state = ConnState::Closed;
                    return refuse(
                        ErrorCode::Malformed,
                        format!("CAST_START needs version {CURSORS_VERSION}"),
                    );
                }
                if read_only {
                    return refuse(
                        ErrorCode::ForbiddenByPolicy,
                        "read-only client cannot start a recording",
                    );
                }
                Effect::CastStart(req)
            }
            ClientFrame::Casts { stop } => {
                if version < CURSORS_VERSION {
                    self.state = ConnState::Closed;
                    return refuse(
                        ErrorCode::Malformed,
                        format!("CASTS needs version {CURSORS_VERSION}"),
                    );
                }
                Effect::Casts { stop }
            }
            ClientFrame::Lease | ClientFrame::Release | ClientFrame::Commands { .. } => {
                if version < CURSORS_VERSION {
                    self.state = ConnState::Closed;
                    return refuse(
                        ErrorCode::Malformed,
                        format!(
                            "a run lease needs version {CURSORS_VERSION}; this connection speaks {version}"
                        ),
                    );
                }
                match frame {
                    ClientFrame::Lease => Effect::Lease,
                    ClientFrame::Release => Effect::Release,
                    ClientFrame::Commands { last } => Effect::Commands { last },
                    _ => return Vec::new(),
                }
            }
            ClientFrame::Capture { full } => {
                // Version 3's, as OUTPUT_SINCE (SPEC.md §4.1).
                if version < CURSORS_VERSION {
                    self.state = ConnState::Closed;
                    return refuse(
                        ErrorCode::Malformed,
                        format!("CAPTURE needs version {CURSORS_VERSION}; this connection speaks {version}"),
                    );
                }
                Effect::Capture { full }
            }
            ClientFrame::AttachTerminal(req) => {
                return self.attach_terminal(version, access, req, env)
            }
            ClientFrame::Reserved18 | ClientFrame::Reserved19 => {
                self.state = ConnState::Closed;
                return refuse(
                    ErrorCode::Malformed,
                    "a frame index this daemon does not serve",
                );
            }
        };
        // Once the program has exited, nothing can reach it (SPEC.md §5.3).
        if env.exited && effect.needs_program() {
            return refuse(ErrorCode::Exited, "the program has exited");
        }
        // A STOP continues (or escalates) the drain already under way.
        if env.draining && !matches!(effect, Effect::Stop(_)) {
            return refuse(ErrorCode::Draining, "session is shutting down");
        }
        if let Effect::Attach(AttachRequest { read_only, .. }) = effect {
            self.attached_as(version, read_only);
        }
        vec![Out::Effect(effect)]
    }

    /// Marks the connection attached, read-only or read-write.
    fn attached_as(&mut self, version: u16, read_only: bool) {
        self.state = ConnState::Bound {
            version,
            access: if read_only {
                Access::ReadOnly
            } else {
                Access::ReadWrite
            },
        };
    }

    /// ATTACH_TERMINAL (version 4, SPEC.md §5.7): ATTACH's rules; on an older
    /// connection an unknown frame (`malformed`, fatal).
    fn attach_terminal(
        &mut self,
        version: u16,
        access: Access,
        req: TerminalRequest,
        env: Env,
    ) -> Vec<Out> {
        if version < TERMINAL_VERSION {
            self.state = ConnState::Closed;
            return refuse(
                ErrorCode::Malformed,
                format!("ATTACH_TERMINAL needs version {TERMINAL_VERSION}; this connection speaks {version}"),
            );
        }
        if access != Access::Unattached {
            return refuse(ErrorCode::AlreadyAttached, "connection is already attached");
        }
        if (req.rows, req.cols) != (0, 0) {
            if let Err(e) = check_size(req.rows, req.cols) {
                return refuse(ErrorCode::InvalidArgument, e.to_string());
            }
        }
        if env.draining {
            return refuse(ErrorCode::Draining, "session is shutting down");
        }
        self.attached_as(version, req.read_only);
        vec![Out::Effect(Effect::AttachTerminal(req))]
    }

    fn handle_legacy(&mut self, frame: LegacyClientFrame, env: Env) -> Vec<Out> {
        let attached = match self.state {
            ConnState::Closed => return Vec::new(),
            ConnState::Accepted => false,
            ConnState::Legacy { attached } => attached,
            // A connection that opened strict never turns legacy (no downgrade).
            ConnState::Negotiated { .. } | ConnState::Bound { .. } => {
                return refuse(ErrorCode::Malformed, "legacy packet on a strict connection")
            }
        };
        let policy = self.config.legacy_policy;
        if policy == LegacyPolicy::Off {
            return vec![Out::Close];
        }
        self.state = ConnState::Legacy { attached };
        let full = policy == LegacyPolicy::Full;
        match frame {
            LegacyClientFrame::Status => vec![Out::Status(StatusForm::Legacy)],
            LegacyClientFrame::Detach => vec![Out::Effect(Effect::Detach), Out::Close],
            LegacyClientFrame::Unknown(_) => Vec::new(),
            // A second ATTACH or PEEK on an attached (or peeking) connection is
            // ignored, as before.
            LegacyClientFrame::Attach(_) | LegacyClientFrame::Peek { .. } if attached => Vec::new(),
            // While draining, PEEK and ATTACH cannot be served, and the old framing has
            // no error packet: close, so the client is not left waiting for a SCREEN
            // that never comes (a drain need not end). Input and resize are dropped.
            LegacyClientFrame::Peek { .. } | LegacyClientFrame::Attach(_) if env.draining => {
                vec![Out::Close]
            }
            _ if env.draining => Vec::new(),
            // Nothing reaches a program that has exited; the old framing has no
            // error packet, so input and resize are dropped.
            LegacyClientFrame::Data(_) | LegacyClientFrame::Resize(_) if env.exited => Vec::new(),
            // PEEK subscribes read-only: GEOMETRY, SCREEN, then DATA and EXIT; its
            // DATA and RESIZE are dropped under every policy (SPEC.md §7).
            LegacyClientFrame::Peek { plain, full } => {
                self.state = ConnState::Legacy { attached: true };
                self.legacy_peek = true;
                vec![Out::Effect(Effect::Subscribe(PeekRequest { plain, full }))]
            }
            LegacyClientFrame::Attach(size) => {
                self.state = ConnState::Legacy { attached: true };
                // The old framing has no error packet: a size over the limits (or a
                // zero one) is treated as unknown, never allocated for.
                let (rows, cols) = size
                    .filter(|&(r, c)| check_size(r, c).is_ok())
                    .unwrap_or((0, 0));
                vec![Out::Effect(Effect::Attach(AttachRequest {
                    rows,
                    cols,
                    read_only: !full,
                }))]
            }
            // An attached legacy client under `full` is its session's read-write
            // client (`is_writer`).
            LegacyClientFrame::Data(b) if full && !self.legacy_peek => {
                vec![Out::Effect(Effect::Input {
                    bytes: b,
                    attached_writer: attached,
                })]
            }
            LegacyClientFrame::Resize(Some((rows, cols)))
                if full && !self.legacy_peek && check_size(rows, cols).is_ok() =>
            {
                vec![Out::Effect(Effect::Resize {
                    size: Size { rows, cols },
                    attached_writer: attached,
                })]
            }
            // Observe: input and resize never reach the session; the old framing has
            // no error packet, so they are dropped (the daemon logs them). So is a
            // resize over the §8 limits under any policy.
            LegacyClientFrame::Data(_) | LegacyClientFrame::Resize(_) => Vec::new(),
        }
    }
}
