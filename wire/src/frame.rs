//! The strict protocol's frames (SPEC.md §4).
//!
//! Frames are postcard-encoded Rust enums. postcard encodes an enum variant as
//! its index, so **variants are append-only**: never reorder, remove or insert
//! in the middle. Tests pin every variant's index to SPEC.md.
//!
//! No frame type is recursive (postcard has no recursion limit).

use bytes::Bytes;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::ids::{Incarnation, SessionId};
use crate::owner::Owner;
use crate::version::VersionRange;

/// Longest client name accepted in HELLO, in bytes.
pub const CLIENT_NAME_MAX_LEN: usize = 64;

/// ATTACH's fields (SPEC.md §4.1), also the attach effect the state machine emits.
/// Encoded inline, as the fields of a struct variant would be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachRequest {
    /// The client's terminal rows (0 with `cols` 0: unknown, does not count toward
    /// the PTY size).
    pub rows: u16,
    /// The client's terminal columns.
    pub cols: u16,
    /// A read-only client may not send input, resize or signal.
    pub read_only: bool,
}

/// PEEK's fields (SPEC.md §4.1), also the peek effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeekRequest {
    /// Plain text without attributes.
    pub plain: bool,
    /// The whole scrollback, not just the visible screen.
    pub full: bool,
}

/// A terminal size: RESIZE's fields (SPEC.md §4.1), also the resize effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Size {
    /// Rows.
    pub rows: u16,
    /// Columns.
    pub cols: u16,
}

/// ATTACH_TERMINAL's fields (SPEC.md §4.1, §5.7), also its effect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminalRequest {
    /// The terminal's rows (as ATTACH).
    pub rows: u16,
    /// The terminal's columns.
    pub cols: u16,
    /// A read-only attachment: keys other than the detach key are dropped.
    pub read_only: bool,
    /// The detach key (`None`: none), with its double press (SPEC.md §5.4).
    pub detach_key: Option<u8>,
    /// What the daemon writes before the attach repaint's preface: the client's
    /// `--history` lines, as `latch_screen::attach::history` made them.
    pub history: Bytes,
}

/// A frame sent by a client to a daemon. Each variant's doc names its reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClientFrame {
    /// Index 0. Opens negotiation; must be the first frame. Reply: [`ServerFrame::Welcome`]
    /// or [`ServerFrame::Error`] `version-unsupported`.
    Hello {
        /// The protocol versions the client speaks.
        versions: VersionRange,
        /// Free-form client name for the daemon's log (at most 64 bytes).
        client: String,
    },
    /// Index 1. Asks who the daemon is. Legal once negotiated, bound or not.
    /// Reply: [`ServerFrame::Status`], authored from the daemon's memory.
    Status,
    /// Index 2. Binds the connection to one creation. Reply: [`ServerFrame::Bound`], or an
    /// error `id-mismatch` / `incarnation-mismatch` / `already-bound` / `draining`.
    Bind {
        /// The id the client means.
        id: SessionId,
        /// The creation the client means.
        incarnation: Incarnation,
    },
    /// Index 3. Attaches to the terminal. Reply: [`ServerFrame::Geometry`], one
    /// [`ServerFrame::Screen`], then every [`ServerFrame::Output`] and [`ServerFrame::Exit`]
    /// produced after the screen was cut.
    Attach(AttachRequest),
    /// Index 4. One snapshot of the screen. Reply: one [`ServerFrame::Screen`].
    Peek(PeekRequest),
    /// Index 5. Bytes for the program's terminal. No reply on success.
    Input(Bytes),
    /// Index 6. Sets this client's terminal size. No reply on success; attached clients
    /// receive [`ServerFrame::Geometry`] when the PTY size changes.
    Resize(Size),
    /// Index 7. Sends a signal to the program (through the daemon's pidfd). No reply on
    /// success.
    Signal {
        /// The signal number (Linux numbering).
        signal: i32,
    },
    /// Index 8. Ends the connection politely. Reply: [`ServerFrame::Detached`], then close.
    Detach,
    /// Index 9. Liveness probe, legal in every strict state. Reply: [`ServerFrame::Pong`].
    Ping(u64),
    /// Index 10. Ends the session: the daemon starts draining (no new binds or effects
    /// except further STOPs) and sends `signal` to the program through its pidfd. No
    /// reply on success; the daemon closes every connection once the program has exited.
    Stop {
        /// The signal number (Linux numbering).
        signal: i32,
    },
    /// Index 11, version 3. The output the program wrote after output cursor
    /// `since` that the daemon's ring still holds, at most `max` bytes of it.
    /// Reply: [`ServerFrame::OutputRange`].
    OutputSince {
        /// The output cursor to read from.
        since: u64,
        /// The most bytes wanted (the daemon sends fewer if its frame limit says so).
        max: u32,
    },
    /// Index 12, version 3. Takes the session's run lease for this connection (or
    /// re-reads its facts when it already holds it). Reply: [`ServerFrame::Leased`].
    Lease,
    /// Index 13, version 3. Gives the run lease back. No reply.
    Release,
    /// Index 14, version 3. The newest `last` command blocks the daemon keeps.
    /// Reply: [`ServerFrame::Commands`].
    Commands {
        /// How many, newest last (the daemon keeps at most COMMANDS_KEPT).
        last: u32,
    },
    /// Index 15, version 3. Starts recording the session into a new file
    /// (SPEC.md §4.8). Reply: [`ServerFrame::Casts`] naming the new recording.
    CastStart(CastRequest),
    /// Index 16, version 3. The active recordings; with `stop`, each is stopped
    /// first (SPEC.md §4.8). Reply: [`ServerFrame::Casts`].
    Casts {
        /// Stop every active recording, and answer with those stopped.
        stop: bool,
    },
    /// Index 17, version 4. ATTACH with the user's terminal passed alongside by
    /// SCM_RIGHTS: the daemon reads its keys and writes the stream to it itself
    /// (SPEC.md §5.7). Reply: GEOMETRY, then DETACHED or EXIT (the stream goes to
    /// the terminal), or ERROR.
    AttachTerminal(TerminalRequest),
    // Indices 18 and 19 are allocated to frames of version 3 not built yet
    // (SPEC.md §4.1); each decodes and is refused as `malformed`.
    #[doc(hidden)]
    Reserved18,
    #[doc(hidden)]
    Reserved19,
    /// Index 20, version 3. The screen as cells (with `full`, the scrollback
    /// first), for the pictures. Reply: [`ServerFrame::Capture`].
    Capture {
        /// The scrollback too.
        full: bool,
    },
}

/// CAST_START's fields (SPEC.md §4.1, §4.8).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CastRequest {
    /// The file to create, an absolute path.
    pub file: String,
    /// End the recording cleanly once its file would pass this many bytes.
    pub max_bytes: Option<u64>,
}

/// One active recording, as CASTS reports it (SPEC.md §4.2, §4.8).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CastInfo {
    /// The file, an absolute path.
    pub file: String,
    /// Bytes written to the file so far.
    pub bytes: u64,
    /// The output cursor at which the recording began.
    pub start_cursor: u64,
    /// Output bytes the recording lost because its writer fell behind the ring.
    pub dropped_bytes: u64,
    /// When it began, ms since the Unix epoch.
    pub started_at_ms: u64,
    /// Its `--max-bytes`, if any.
    pub max_bytes: Option<u64>,
}

/// A frame sent by a daemon to a client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ServerFrame {
    /// Index 0. Negotiation succeeded.
    Welcome {
        /// The version chosen: the highest both sides speak.
        version: u16,
        /// The daemon's limits.
        limits: Limits,
        /// Free-form daemon name and build, for diagnostics.
        server: String,
    },
    /// Index 1. Who the daemon is (SPEC.md §11 I2: from its own memory). Boxed
    /// to keep every frame small; a `Box` encodes exactly as its contents.
    Status(Box<StatusReply>),
    /// Index 2. The connection is bound to this creation.
    Bound {
        /// The daemon's id.
        id: SessionId,
        /// The daemon's incarnation.
        incarnation: Incarnation,
    },
    /// Index 3. The PTY's size.
    Geometry {
        /// Rows.
        rows: u16,
        /// Columns.
        cols: u16,
    },
    /// Index 4. A screen snapshot: ANSI to repaint a terminal (attach, or peek without
    /// `plain`), or plain text (peek with `plain`).
    Screen(Bytes),
    /// Index 5. Program output, in order.
    Output(Bytes),
    /// Index 6. The program ended.
    Exit(ExitStatus),
    /// Index 7. A typed refusal or failure. Whether the connection stays open is
    /// [`ErrorCode::is_fatal`].
    Error {
        /// What went wrong.
        code: ErrorCode,
        /// Human-readable detail, lowercase, no trailing period.
        detail: String,
    },
    /// Index 8. Answer to [`ClientFrame::Ping`] with the same value.
    Pong(u64),
    /// Index 9. Answer to [`ClientFrame::Detach`]; the daemon closes next.
    Detached,
    /// Index 10, version 3. STATUS on a version-3 connection: every field of
    /// [`ServerFrame::Status`], then the output facts.
    Status3(Box<Status3>),
    /// Index 11, version 3. Answer to [`ClientFrame::OutputSince`].
    OutputRange(OutputRange),
    /// Index 12, version 3. On an attached version-3 connection, right after each
    /// SCREEN of the stream (the attach cut, a resynchronisation): the output cursor
    /// at that cut, which the OUTPUT after it continues from, and the shell there.
    Cut(CutFacts),
    /// Index 13, version 3. Answer to [`ClientFrame::Lease`].
    Leased(Box<crate::lease::LeaseFacts>),
    /// Index 14, version 3. Answer to [`ClientFrame::Commands`], oldest first.
    Commands(Vec<crate::lease::CommandBlock>),
    /// Index 15, version 3. Answer to [`ClientFrame::CastStart`] and
    /// [`ClientFrame::Casts`]: recordings (SPEC.md §4.8).
    Casts(Vec<CastInfo>),
    // Indices 16 to 18 are allocated to frames of this version not built yet
    // (SPEC.md §4.2); a daemon never sends them.
    #[doc(hidden)]
    Reserved16,
    #[doc(hidden)]
    Reserved17,
    #[doc(hidden)]
    Reserved18,
    /// Index 19, version 3. Answer to [`ClientFrame::Capture`]: latch-screen's
    /// cell-grid capture, postcard-encoded (SPEC.md §4.4), at most
    /// MAX_SERVER_FRAME in all.
    Capture(Bytes),
}

/// STATUS of version 3 (SPEC.md §4.2): STATUS's fields, then the output's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status3 {
    /// Every field of version 2's STATUS, in its order.
    pub base: StatusReply,
    /// The output cursor and the shell, as the daemon knows them.
    pub output: OutputFacts,
}

/// What the daemon knows of its program's output (SPEC.md §4.2, §4.6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputFacts {
    /// Bytes the program has written since the creation began (the output cursor).
    pub output_cursor: u64,
    /// When it last wrote, milliseconds since the Unix epoch (`None`: never).
    pub last_output_ms: Option<u64>,
    /// The shell's state from its OSC 133 and OSC 7 marks.
    pub shell: ShellFacts,
}

/// The shell's state (SPEC.md §4.6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShellFacts {
    /// Unknown, at its prompt, or running a command.
    pub state: ShellPhase,
    /// The running command's line, when the shell said it.
    pub command: Option<String>,
    /// The working directory it last reported.
    pub cwd: Option<String>,
    /// The exit code of the last command that ended with one.
    pub last_exit: Option<i32>,
}

/// [`ShellFacts::state`]: an enum on the wire (0, 1, 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum ShellPhase {
    /// Index 0. No mark yet, or between a command's end and the next prompt.
    #[default]
    Unknown,
    /// Index 1. At its prompt.
    Prompt,
    /// Index 2. Running a command.
    Running,
}

impl ShellPhase {
    /// The name used in JSON (`unknown`, `prompt`, `running`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unknown => "unknown",
            Self::Prompt => "prompt",
            Self::Running => "running",
        }
    }
}

/// The answer to OUTPUT_SINCE (SPEC.md §4.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputRange {
    /// The output cursor of the first byte of `bytes`.
    pub start: u64,
    /// Bytes after the asked cursor that the ring no longer holds (lost to this
    /// reader; `start` is then past the asked cursor by this much).
    pub dropped: u64,
    /// The output cursor now: `start + len(bytes)` when everything was sent, more
    /// when `max` cut the answer short.
    pub end: u64,
    /// The output, raw.
    pub bytes: Bytes,
}

/// CUT's fields (SPEC.md §4.2): where a stream's SCREEN was cut.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CutFacts {
    /// The output cursor at the cut: the first OUTPUT after it starts here.
    pub cursor: u64,
    /// The shell at the cut.
    pub shell: ShellFacts,
}

/// Limits a daemon announces in WELCOME.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Largest client frame payload the daemon accepts, in bytes.
    pub max_client_frame: u32,
    /// Largest server frame payload the daemon sends, in bytes.
    pub max_server_frame: u32,
    /// Bytes of output the daemon queues for one client before cutting it off.
    pub client_queue_bytes: u32,
}

/// How the program ended: `code` for a normal exit, `signal` when killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitStatus {
    /// The exit code, if the program exited.
    pub code: Option<i32>,
    /// The signal number, if the program was killed by one.
    pub signal: Option<i32>,
}

/// The daemon's answer to STATUS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusReply {
    /// The daemon's own id.
    pub id: SessionId,
    /// The daemon's own incarnation.
    pub incarnation: Incarnation,
    /// The daemon's pid.
    pub daemon_pid: u32,
    /// The program's pid.
    pub child_pid: u32,
    /// PTY rows.
    pub rows: u16,
    /// PTY columns.
    pub cols: u16,
    /// Cursor row (0-based).
    pub cursor_row: u16,
    /// Cursor column (0-based).
    pub cursor_col: u16,
    /// Attached read-write clients.
    pub writers: u32,
    /// Attached read-only clients.
    pub readers: u32,
    /// Creation time, milliseconds since the Unix epoch, from the daemon's memory.
    pub created_at_ms: u64,
    /// The exit status, once the program has ended.
    pub exit: Option<ExitStatus>,
    /// Whether a kill or restart has begun (the daemon refuses new effects).
    pub draining: bool,
    /// The legacy policy in force (SPEC.md §7).
    pub legacy_policy: LegacyPolicy,
    /// The creation's owner, from the daemon's memory (SPEC.md §2.4); `None` for a
    /// creation made without one. Appended last: it is the final field on the wire.
    pub owner: Option<Owner>,
}

/// How a daemon treats connections that speak the legacy framing (SPEC.md §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LegacyPolicy {
    /// Index 0. Close legacy connections at once.
    Off,
    /// Index 1. STATUS and PEEK; ATTACH is read-only; no input, resize or kill.
    #[default]
    Observe,
    /// Index 2. The old unbound behaviour, for a migration window.
    Full,
}

impl LegacyPolicy {
    /// The policy's name as used on the command line and in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Observe => "observe",
            Self::Full => "full",
        }
    }

    /// Parses `off`, `observe` or `full`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "off" => Some(Self::Off),
            "observe" => Some(Self::Observe),
            "full" => Some(Self::Full),
            _ => None,
        }
    }
}

/// Writes [`ErrorCode`] and its conversions from one table (as rustls's
/// `enum_builder!`): each row is `number, name, fatal, Variant, doc`. The number
/// is the code on the wire; the name is SPEC.md §4.3's and `--json`'s; a fatal
/// code closes the connection after it is sent.
macro_rules! error_codes {
    ($($n:literal, $name:literal, $fatal:literal, $variant:ident, $doc:literal;)*) => {
        /// A typed refusal (SPEC.md §5). Encoded as a `u16` so that a client can carry
        /// a code it does not know ([`ErrorCode::Other`]) instead of failing to decode.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum ErrorCode {
            $(
                #[doc = concat!(stringify!($n), ": ", $doc)]
                $variant,
            )*
            /// A code this build does not know.
            Other(u16),
        }

        impl ErrorCode {
            /// The code's number on the wire.
            pub fn to_u16(self) -> u16 {
                match self {
                    $(Self::$variant => $n,)*
                    Self::Other(n) => n,
                }
            }

            /// The code for a number on the wire.
            pub fn from_u16(n: u16) -> Self {
                match n {
                    $($n => Self::$variant,)*
                    n => Self::Other(n),
                }
            }

            /// The code's name as written in SPEC.md and `--json` output.
            pub fn name(self) -> &'static str {
                match self {
                    $(Self::$variant => $name,)*
                    Self::Other(_) => "other",
                }
            }

            /// The code a name of [`name`](Self::name) stands for (a code this
            /// build does not know has no name).
            pub fn from_name(name: &str) -> Option<Self> {
                match name {
                    $($name => Some(Self::$variant),)*
                    _ => None,
                }
            }

            /// Whether the daemon closes the connection after sending this error
            /// (SPEC.md §4.3). Refusals of a single request keep the connection open.
            pub fn is_fatal(self) -> bool {
                match self {
                    $(Self::$variant => $fatal,)*
                    Self::Other(_) => false,
                }
            }
        }
    };
}

error_codes! {
    1, "not-negotiated", true, NotNegotiated, "a frame other than HELLO arrived before negotiation.";
    2, "not-bound", false, NotBound, "an effect arrived before BIND.";
    3, "already-bound", true, AlreadyBound, "a second BIND on a bound connection.";
    4, "id-mismatch", true, IdMismatch, "BIND named another session id.";
    5, "incarnation-mismatch", true, IncarnationMismatch, "BIND named another creation of this id.";
    6, "version-unsupported", true, VersionUnsupported, "no protocol version in common; detail carries the daemon's range.";
    7, "forbidden-by-policy", false, ForbiddenByPolicy, "the daemon's policy forbids this (read-only client, legacy policy).";
    8, "malformed", true, Malformed, "the frame could not be decoded.";
    9, "frame-too-large", true, FrameTooLarge, "the frame's declared length exceeds the maximum.";
    10, "too-slow", true, TooSlow, "the client read nothing for CLIENT_STALL_MS and was cut off.";
    11, "already-negotiated", true, AlreadyNegotiated, "a second HELLO.";
    12, "draining", false, Draining, "the session is shutting down; no new binds or effects.";
    13, "too-many-connections", true, TooManyConnections, "the daemon has too many connections.";
    14, "handshake-timeout", true, HandshakeTimeout, "the handshake (or BIND) did not come in time.";
    15, "not-attached", false, NotAttached, "reserved: a request that needs an attachment.";
    16, "exited", false, Exited, "the program has already exited.";
    17, "internal", false, Internal, "the daemon failed to perform the effect (detail says why).";
    18, "invalid-argument", false, InvalidArgument, "a field is out of range (a size over the limits, an unknown signal, an overlong name).";
    19, "already-attached", false, AlreadyAttached, "ATTACH on a connection that is already attached.";
    20, "input-full", false, InputFull, "the program is not reading its input and the queue is full (SPEC.md §8); nothing of the refused INPUT was queued.";
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u16(self.to_u16())
    }
}

impl<'de> Deserialize<'de> for ErrorCode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Self::from_u16(u16::deserialize(d)?))
    }
}

impl ServerFrame {
    /// Convenience constructor for [`ServerFrame::Error`].
    pub fn error(code: ErrorCode, detail: impl Into<String>) -> Self {
        Self::Error {
            code,
            detail: detail.into(),
        }
    }
}
