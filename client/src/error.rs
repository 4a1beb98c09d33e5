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
    /// The latch on another host is older: it cannot read this request (a
    /// version-2 operation, SPEC.md §12.2), though it may serve version 1.
    OlderRemote,
}

impl Mismatch {
    /// Whether restarting the session with this latch would help.
    fn hints_upgrade(self) -> bool {
        !matches!(self, Self::BadFrame | Self::Remote | Self::OlderRemote)
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
    /// Something latch called failed (a system call, a thread, an encoder): the
    /// context, and that error kept as the source.
    Failed {
        /// What was being done (may be empty).
        context: String,
        /// The error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl ClientError {
    /// `source` failed while doing `context` (class `other`, exit 1), kept as the
    /// error's source.
    pub fn failed(
        context: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Self::Failed {
            context: context.into(),
            source: source.into(),
        }
    }

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

    /// The class of this failure: its exit code, kind and message prefix (one
    /// table, [`Class`]).
    pub fn class(&self) -> Class {
        match self {
            Self::Usage(_) => Class::Usage,
            Self::NotFound(_) => Class::NotFound,
            Self::Replaced { .. } => Class::Replaced,
            Self::NotOwner { .. } => Class::NotOwner,
            Self::Ambiguous { .. } => Class::Ambiguous,
            Self::Busy(_) => Class::Busy,
            Self::Unreachable { .. } => Class::Unreachable,
            Self::Protocol { .. } => Class::Protocol,
            Self::Refused(_) => Class::Refused,
            Self::TimedOut(_) => Class::TimedOut,
            Self::Exists(_) => Class::Exists,
            Self::Other(_) | Self::Failed { .. } => Class::Other,
            Self::Create { kind, .. } => match kind {
                FailureKind::Exists => Class::Exists,
                FailureKind::Busy => Class::Busy,
                FailureKind::Invalid => Class::Usage,
                FailureKind::Refused => Class::Refused,
                _ => Class::Other,
            },
            Self::Registry(e) => match e {
                RegistryError::UnsafeRoot { .. } | RegistryError::UnsafeKey { .. } => {
                    Class::Refused
                }
                RegistryError::Busy { .. } => Class::Busy,
                RegistryError::Corrupt { .. } => Class::Unreachable,
                RegistryError::IdTooLongForSocket { .. } | RegistryError::ReservedId { .. } => {
                    Class::Usage
                }
                _ => Class::Other,
            },
            Self::Daemon { code, .. } => Class::of_daemon(*code),
            Self::Relayed { kind, .. } => Class::of_kind(kind),
        }
    }

    /// The exit code (SPEC.md §10); a relayed error keeps the one its host gave.
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::Relayed { exit_code, .. } => *exit_code,
            other => other.class().code(),
        }
    }

    /// The kind named in `--json` errors and relayed between hosts: the class's
    /// name, or a daemon's own code name (`draining`, `incarnation-mismatch`…).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Daemon { code, .. } => code.name(),
            Self::Relayed { kind, .. } => match ErrorCode::from_name(kind) {
                Some(code) => code.name(),
                None => Class::of_kind(kind).kind(),
            },
            other => other.class().kind(),
        }
    }
}

/// One row per class of failure: the variant, its exit code, its kind, and the
/// prefix its message carries. Everything that names a class (exit codes, kinds,
/// Display, decoding a relayed kind) reads this table.
macro_rules! classes {
    ($($(#[$doc:meta])* $variant:ident = $code:path, $kind:literal, $prefix:expr;)*) => {
        /// A class of failure (SPEC.md §10's exit codes).
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[non_exhaustive]
        pub enum Class {
            $($(#[$doc])* $variant,)*
        }

        impl Class {
            /// Every class, in table order.
            pub const ALL: &'static [Class] = &[$(Class::$variant,)*];

            /// Its exit code.
            pub fn code(self) -> i32 {
                match self { $(Self::$variant => $code,)* }
            }

            /// Its kind's name.
            pub fn kind(self) -> &'static str {
                match self { $(Self::$variant => $kind,)* }
            }

            /// The prefix of its messages (`busy: …`), if it has one.
            pub fn prefix(self) -> Option<&'static str> {
                match self { $(Self::$variant => $prefix,)* }
            }

            /// The class a kind's name stands for; `Other` for a name this build
            /// does not know.
            pub fn of_kind(kind: &str) -> Class {
                match kind {
                    $($kind => Self::$variant,)*
                    other => match ErrorCode::from_name(other) {
                        Some(code) => Self::of_daemon(code),
                        None => Self::Other,
                    },
                }
            }
        }
    };
}

classes! {
    /// Anything else.
    Other = exit::OTHER, "other", None;
    /// A usage error.
    Usage = exit::USAGE, "usage", None;
    /// No such session.
    NotFound = exit::NOT_FOUND, "not-found", None;
    /// The id now holds another creation.
    Replaced = exit::REPLACED, "replaced", None;
    /// A name matches several sessions.
    Ambiguous = exit::AMBIGUOUS, "ambiguous", None;
    /// Busy: try again.
    Busy = exit::BUSY, "busy", Some("busy");
    /// Unreachable or degraded.
    Unreachable = exit::UNREACHABLE, "unreachable", Some("unreachable");
    /// A protocol or version mismatch.
    Protocol = exit::PROTOCOL, "protocol", Some("protocol mismatch");
    /// Refused (policy, permissions, a foreign uid).
    Refused = exit::REFUSED, "refused", Some("refused");
    /// A wait timed out.
    TimedOut = exit::TIMED_OUT, "timed-out", Some("timed out");
    /// The owner precondition failed.
    NotOwner = exit::NOT_OWNER, "not-owner", None;
    /// The id is taken.
    Exists = exit::OTHER, "exists", None;
}

impl Class {
    /// The class of a daemon's refusal.
    pub fn of_daemon(code: ErrorCode) -> Class {
        match code {
            ErrorCode::IncarnationMismatch | ErrorCode::IdMismatch => Class::Replaced,
            // The session cannot take this now; trying again later may work.
            ErrorCode::Draining | ErrorCode::InputFull => Class::Busy,
            ErrorCode::TooManyConnections | ErrorCode::HandshakeTimeout => Class::Unreachable,
            ErrorCode::ForbiddenByPolicy => Class::Refused,
            ErrorCode::VersionUnsupported
            | ErrorCode::NotNegotiated
            | ErrorCode::AlreadyNegotiated
            | ErrorCode::Malformed
            | ErrorCode::FrameTooLarge => Class::Protocol,
            ErrorCode::InvalidArgument => Class::Usage,
            // Cut off for not keeping up: a degraded stream, not a protocol fault.
            ErrorCode::TooSlow => Class::Unreachable,
            _ => Class::Other,
        }
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Usage(m) | Self::Other(m) => f.write_str(m),
            Self::Failed { context, source } if context.is_empty() => write!(f, "{source}"),
            Self::Failed { context, source } => write!(f, "{context}: {source}"),
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
            Self::Busy(m) | Self::Refused(m) | Self::TimedOut(m) => {
                write!(f, "{}: {m}", prefix(self))
            }
            Self::Unreachable { detail, .. } => write!(f, "{}: {detail}", prefix(self)),
            Self::Protocol { found, detail } => {
                write!(f, "{}: {detail}", prefix(self))?;
                if found.hints_upgrade() {
                    write!(f, "; {UPGRADE_HINT}")?;
                }
                Ok(())
            }
            Self::Create { message, .. } => f.write_str(message),
            Self::Registry(e) => match self.class().prefix() {
                Some(p) => write!(f, "{p}: {e}"),
                None => write!(f, "{e}"),
            },
            Self::Exists(id) => write!(
                f,
                "session {id} already exists; remove it first with: latch rm {id}"
            ),
            Self::Daemon { code, detail } => write!(f, "daemon refused ({code}): {detail}"),
            Self::Relayed { host, message, .. } => write!(f, "{host}: {message}"),
        }
    }
}

/// The prefix of a class that has one (every caller's class does).
fn prefix(e: &ClientError) -> &'static str {
    e.class().prefix().unwrap_or_default()
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Registry(e) => Some(e),
            Self::Failed { source, .. } => Some(source.as_ref()),
            _ => None,
        }
    }
}

impl From<RegistryError> for ClientError {
    fn from(e: RegistryError) -> Self {
        Self::Registry(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_names_its_class_and_code() {
        for &class in Class::ALL {
            assert_eq!(Class::of_kind(class.kind()), class, "{class:?}");
        }
        assert_eq!(Class::of_kind("no-such-kind"), Class::Other);
    }

    /// A daemon's refusal relayed over one hop keeps its kind and class: before
    /// the table, a relayed `draining` read `other`.
    #[test]
    fn a_relayed_daemon_refusal_keeps_its_kind() {
        for code in [
            ErrorCode::Draining,
            ErrorCode::IncarnationMismatch,
            ErrorCode::InputFull,
            ErrorCode::TooSlow,
        ] {
            let local = ClientError::Daemon {
                code,
                detail: "x".into(),
            };
            let relayed = ClientError::Relayed {
                host: "h".into(),
                kind: local.kind().into(),
                exit_code: local.exit_code(),
                message: local.to_string(),
            };
            assert_eq!(relayed.kind(), code.name());
            assert_eq!(relayed.class(), local.class());
            assert_eq!(relayed.exit_code(), local.exit_code());
        }
    }

    #[test]
    fn prefixes_come_from_the_table() {
        assert_eq!(
            ClientError::Busy("locked".into()).to_string(),
            "busy: locked"
        );
        assert_eq!(
            ClientError::TimedOut("t".into()).to_string(),
            "timed out: t"
        );
        assert_eq!(
            ClientError::unreachable(UnreachableCause::Io, "gone").to_string(),
            "unreachable: gone"
        );
        assert_eq!(ClientError::Refused("no".into()).exit_code(), exit::REFUSED);
    }
}
