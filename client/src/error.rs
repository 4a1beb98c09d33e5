//! The client's typed errors and their exit codes (SPEC.md §10).

use std::fmt;

use latch_registry::spec::FailureKind;
use latch_registry::RegistryError;
use latch_wire::{ErrorCode, Incarnation, Owner, SessionId};

/// What to do about a daemon that speaks another protocol, appended once to every
/// protocol mismatch that calls for it.
const UPGRADE_HINT: &str =
    "restart the session with this latch (latch restart) to upgrade its daemon, \
     or use the latch that started it";

/// Why a daemon could not be reached, or a read degraded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum UnreachableCause {
    /// Nothing listens on the session's socket.
    NotListening,
    /// The daemon (or a new daemon's readiness line) did not answer in time.
    TimedOut,
    /// The daemon closed the connection.
    Closed,
    /// The session's program has exited; its daemon is gone or finishing.
    Exited,
    /// The session's daemon is gone without recording an exit (vanished).
    Vanished,
    /// A record, receipt or events file exists but cannot be read.
    Degraded,
    /// A process named in the record cannot be proven, or signalled.
    Unprovable,
    /// Another IO failure on the connection.
    Io,
    /// Another host could not be reached through ssh (`--host`, SPEC.md §12).
    Host,
}

/// What a client found instead of a daemon speaking its protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mismatch {
    /// A daemon answering in the older `pty` framing (SPEC.md §6).
    LegacyPeer,
    /// Something that is neither latch protocol nor the legacy framing.
    NotLatch,
    /// The peer closed or reset the connection without answering HELLO.
    NoAnswer,
    /// No common protocol version, or an answer below the version asked (no
    /// downgrade).
    Version,
    /// A frame that does not decode, or one the protocol does not allow here.
    BadFrame,
    /// The latch on another host is missing, or speaks no remote protocol version
    /// this one does (`--host`, SPEC.md §12).
    Remote,
}

impl Mismatch {
    /// Whether restarting the session with this latch would help.
    fn hints_upgrade(self) -> bool {
        !matches!(self, Self::BadFrame | Self::Remote)
    }
}

/// Exit codes shared by the library and the CLI.
pub mod exit {
    /// Success.
    pub const OK: i32 = 0;
    /// Any other error.
    pub const OTHER: i32 = 1;
    /// Bad usage.
    pub const USAGE: i32 = 2;
    /// No such session.
    pub const NOT_FOUND: i32 = 3;
    /// The session was replaced (incarnation mismatch).
    pub const REPLACED: i32 = 4;
    /// A display name matches several live sessions.
    pub const AMBIGUOUS: i32 = 5;
    /// A lock is held elsewhere, or the session is draining.
    pub const BUSY: i32 = 6;
    /// The daemon cannot be reached, or a read degraded.
    pub const UNREACHABLE: i32 = 7;
    /// Protocol or version mismatch.
    pub const PROTOCOL: i32 = 8;
    /// Refused by permission or policy.
    pub const REFUSED: i32 = 9;
    /// A wait ended at its deadline without what it waited for (`peek --wait`,
    /// `events --wait`).
    pub const TIMED_OUT: i32 = 10;
    /// The session was created, but its receipt could not be written.
    pub const RECEIPT_NOT_WRITTEN: i32 = 11;
    /// An owner precondition failed: the session's proven owner is not the one
    /// required, or it has none (SPEC.md §2.4).
    pub const NOT_OWNER: i32 = 12;
}

/// Something the client could not do.
#[derive(Debug)]
#[non_exhaustive]
pub enum ClientError {
    /// The request itself is invalid.
    Usage(String),
    /// No session matches.
    NotFound(String),
    /// The id now names another creation (or none that matches the expectation).
    Replaced {
        /// The id.
        id: SessionId,
        /// What the caller expected.
        expected: Incarnation,
        /// What the registry or daemon holds now, if known.
        actual: Option<Incarnation>,
    },
    /// The session's proven owner is not the one required (or it has none).
    NotOwner {
        /// The id.
        id: SessionId,
        /// The owner required.
        expected: Owner,
        /// The session's proven owner, if it has one.
        actual: Option<Owner>,
    },
    /// A display name matches several live sessions.
    Ambiguous {
        /// The name.
        name: String,
        /// The candidate ids.
        ids: Vec<SessionId>,
    },
    /// Busy: a lock held elsewhere, or the session is draining.
    Busy(String),
    /// The daemon could not be reached, or a read degraded (corrupt record, timeout).
    Unreachable {
        /// Why.
        cause: UnreachableCause,
        /// What happened, for a person.
        detail: String,
    },
    /// The peer does not speak a compatible protocol.
    Protocol {
        /// What was found instead.
        found: Mismatch,
        /// What happened, for a person (the upgrade hint is added by `Display`).
        detail: String,
    },
    /// Refused: permission, policy, or an unsafe registry.
    Refused(String),
    /// A wait reached its deadline without what it waited for.
    TimedOut(String),
    /// A session with this id already exists.
    Exists(SessionId),
    /// The daemon refused a request with a typed error.
    Daemon {
        /// The code.
        code: ErrorCode,
        /// The daemon's detail.
        detail: String,
    },
    /// The new session's daemon reported that creation failed; nothing was left.
    Create {
        /// Why, as the readiness line says.
        kind: FailureKind,
        /// What went wrong, for a person.
        message: String,
    },
    /// A registry operation failed (the source is kept).
    Registry(RegistryError),
    /// An error the latch on another host reported (`--host`, SPEC.md §12), with
    /// its kind and exit code as it gave them.
    Relayed {
        /// The host.
        host: String,
        /// The error's kind (SPEC.md §10).
        kind: String,
        /// Its exit code.
        exit_code: i32,
        /// Its message.
        message: String,
    },
    /// Anything else.
    Other(String),
}

impl ClientError {
    /// A daemon could not be reached, or a read degraded.
    pub fn unreachable(cause: UnreachableCause, detail: impl Into<String>) -> Self {
        Self::Unreachable {
            cause,
            detail: detail.into(),
        }
    }

    /// The peer does not speak a compatible protocol.
    pub fn protocol(found: Mismatch, detail: impl Into<String>) -> Self {
        Self::Protocol {
            found,
            detail: detail.into(),
        }
    }

    /// `id` no longer names the creation `expected`; `actual` is what it names now.
    pub fn replaced(id: &SessionId, expected: Incarnation, actual: Option<Incarnation>) -> Self {
        Self::Replaced {
            id: id.clone(),
            expected,
            actual,
        }
    }

    /// Why a daemon could not be reached, if that is what happened.
    pub fn unreachable_cause(&self) -> Option<UnreachableCause> {
        match self {
            Self::Unreachable { cause, .. } => Some(*cause),
            _ => None,
        }
    }

    /// The exit code the CLI uses for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::Usage(_) => exit::USAGE,
            Self::NotFound(_) => exit::NOT_FOUND,
            Self::Replaced { .. } => exit::REPLACED,
            Self::NotOwner { .. } => exit::NOT_OWNER,
            Self::Ambiguous { .. } => exit::AMBIGUOUS,
            Self::Busy(_) => exit::BUSY,
            Self::Unreachable { .. } => exit::UNREACHABLE,
            Self::Protocol { .. } => exit::PROTOCOL,
            Self::Refused(_) => exit::REFUSED,
            Self::TimedOut(_) => exit::TIMED_OUT,
            Self::Exists(_) | Self::Other(_) => exit::OTHER,
            Self::Relayed { exit_code, .. } => *exit_code,
            Self::Create { kind, .. } => match kind {
                FailureKind::Exists => exit::OTHER,
                FailureKind::Busy => exit::BUSY,
                FailureKind::Invalid => exit::USAGE,
                FailureKind::Refused => exit::REFUSED,
                _ => exit::OTHER,
            },
            Self::Registry(e) => match e {
                RegistryError::UnsafeRoot { .. } | RegistryError::UnsafeKey { .. } => exit::REFUSED,
                RegistryError::Busy { .. } => exit::BUSY,
                RegistryError::Corrupt { .. } => exit::UNREACHABLE,
                RegistryError::IdTooLongForSocket { .. } | RegistryError::ReservedId { .. } => {
                    exit::USAGE
                }
                _ => exit::OTHER,
            },
            Self::Daemon { code, .. } => match code {
                ErrorCode::IncarnationMismatch | ErrorCode::IdMismatch => exit::REPLACED,
                // The session cannot take this now; trying again later may work.
                ErrorCode::Draining | ErrorCode::InputFull => exit::BUSY,
                ErrorCode::TooManyConnections | ErrorCode::HandshakeTimeout => exit::UNREACHABLE,
                ErrorCode::ForbiddenByPolicy => exit::REFUSED,
                ErrorCode::VersionUnsupported
                | ErrorCode::NotNegotiated
                | ErrorCode::AlreadyNegotiated
                | ErrorCode::Malformed
                | ErrorCode::FrameTooLarge => exit::PROTOCOL,
                ErrorCode::InvalidArgument => exit::USAGE,
                // Cut off for not keeping up: a degraded stream, not a protocol fault.
                ErrorCode::TooSlow => exit::UNREACHABLE,
                _ => exit::OTHER,
            },
        }
    }

    /// A short stable name for `--json` output.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Usage(_) => "usage",
            Self::NotFound(_) => "not-found",
            Self::Replaced { .. } => "replaced",
            Self::NotOwner { .. } => "not-owner",
            Self::Ambiguous { .. } => "ambiguous",
            Self::Busy(_) => "busy",
            Self::Unreachable { .. } => "unreachable",
            Self::Protocol { .. } => "protocol",
            Self::Refused(_) => "refused",
            Self::TimedOut(_) => "timed-out",
            Self::Exists(_) => "exists",
            Self::Create { kind, .. } => match kind {
                FailureKind::Exists => "exists",
                FailureKind::Busy => "busy",
                FailureKind::Invalid => "usage",
                FailureKind::Refused => "refused",
                _ => "other",
            },
            Self::Registry(e) => match e {
                RegistryError::UnsafeRoot { .. } | RegistryError::UnsafeKey { .. } => "refused",
                RegistryError::Busy { .. } => "busy",
                RegistryError::Corrupt { .. } => "unreachable",
                RegistryError::IdTooLongForSocket { .. } | RegistryError::ReservedId { .. } => {
                    "usage"
                }
                _ => "other",
            },
            Self::Daemon { code, .. } => code.name(),
            Self::Relayed { kind, .. } => match kind.as_str() {
                "usage" => "usage",
                "not-found" => "not-found",
                "replaced" => "replaced",
                "not-owner" => "not-owner",
                "ambiguous" => "ambiguous",
                "busy" => "busy",
                "unreachable" => "unreachable",
                "protocol" => "protocol",
                "refused" => "refused",
                "timed-out" => "timed-out",
                "exists" => "exists",
                _ => "other",
            },
            Self::Other(_) => "other",
        }
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Usage(m) | Self::Other(m) => f.write_str(m),
            Self::NotFound(what) => write!(f, "no session {what}"),
            Self::Replaced {
                id,
                expected,
                actual,
            } => match actual {
                Some(a) => write!(
                    f,
                    "session {id} was replaced: expected incarnation {expected}, found {a}"
                ),
                None => write!(
                    f,
                    "session {id} is no longer incarnation {expected} (it was replaced or removed)"
                ),
            },
            Self::NotOwner {
                id,
                expected,
                actual,
            } => match actual {
                Some(a) => write!(
                    f,
                    "session {id} is not owned by {:?}: its proven owner is {:?}; nothing was done",
                    expected.as_str(),
                    a.as_str()
                ),
                None => write!(
                    f,
                    "session {id} is not owned by {:?}: it was created without an owner; nothing was done",
                    expected.as_str()
                ),
            },
            Self::Ambiguous { name, ids } => {
                let ids: Vec<String> = ids.iter().map(ToString::to_string).collect();
                write!(
                    f,
                    "name {name:?} matches {} live sessions: {}; use an id",
                    ids.len(),
                    ids.join(", ")
                )
            }
            Self::Busy(m) => write!(f, "busy: {m}"),
            Self::Unreachable { detail, .. } => write!(f, "unreachable: {detail}"),
            Self::Protocol { found, detail } => {
                write!(f, "protocol mismatch: {detail}")?;
                if found.hints_upgrade() {
                    write!(f, "; {UPGRADE_HINT}")?;
                }
                Ok(())
            }
            Self::Create { message, .. } => f.write_str(message),
            Self::Registry(e) => match e {
                RegistryError::Busy { .. } => write!(f, "busy: {e}"),
                RegistryError::UnsafeRoot { .. } | RegistryError::UnsafeKey { .. } => {
                    write!(f, "refused: {e}")
                }
                RegistryError::Corrupt { .. } => write!(f, "unreachable: {e}"),
                _ => write!(f, "{e}"),
            },
            Self::Refused(m) => write!(f, "refused: {m}"),
            Self::TimedOut(m) => write!(f, "timed out: {m}"),
            Self::Exists(id) => write!(
                f,
                "session {id} already exists; remove it first with: latch rm {id}"
            ),
            Self::Daemon { code, detail } => write!(f, "daemon refused ({code}): {detail}"),
            Self::Relayed { host, message, .. } => write!(f, "{host}: {message}"),
        }
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Registry(e) => Some(e),
            _ => None,
        }
    }
}

impl From<RegistryError> for ClientError {
    fn from(e: RegistryError) -> Self {
        Self::Registry(e)
    }
}
