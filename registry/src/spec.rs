//! What a client hands a new daemon, and what the daemon answers once ready
//! (SPEC.md §9.6). Shared here because the daemon and the client never import
//! each other.

use std::collections::BTreeMap;

use latch_wire::{Incarnation, LegacyPolicy, Owner, SessionId};
use serde::{Deserialize, Serialize};

/// The environment variable naming the session id, set in the program's environment.
pub const ENV_SESSION_ID: &str = "LATCH_SESSION_ID";
/// The environment variable naming the incarnation, set in the program's environment.
pub const ENV_INCARNATION: &str = "LATCH_INCARNATION";
/// The environment variable naming the registry root, set in the program's environment.
pub const ENV_ROOT: &str = "LATCH_ROOT";

/// Default scrollback, in lines.
pub const DEFAULT_SCROLLBACK: usize = 10_000;

/// Everything a daemon needs to create a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateSpec {
    /// The id to create.
    pub id: SessionId,
    /// Optional display name (already validated).
    pub display_name: Option<String>,
    /// Program and arguments (non-empty).
    pub command: Vec<String>,
    /// Working directory.
    pub cwd: String,
    /// The program's complete environment (the daemon adds the LATCH_* variables).
    pub env: BTreeMap<String, String>,
    /// Initial rows.
    pub rows: u16,
    /// Initial columns.
    pub cols: u16,
    /// Initial tags.
    pub tags: BTreeMap<String, String>,
    /// Legacy policy.
    pub legacy_policy: LegacyPolicy,
    /// Scrollback lines kept by the emulator.
    pub scrollback: usize,
    /// The creation's owner (SPEC.md §2.4); validated when the spec is parsed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<Owner>,
    /// Whether a lone shell is started with latch's integration (SPEC.md §4.6).
    #[serde(default)]
    pub shell_integration: crate::shell::Integration,
    /// `new --cast FILE`: record from the first byte (SPEC.md §4.8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cast: Option<CastSpec>,
    /// Supervision (SPEC.md §9.16): the restart policy, the parent, `--rm`, the
    /// environment the record keeps, and what `latch resurrect` carries.
    #[serde(default, flatten)]
    pub supervision: Supervision,
}

/// What a creation asks of the daemon's supervision (SPEC.md §9.16).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Supervision {
    /// The restart policy, recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<crate::supervision::RestartPolicy>,
    /// The parent the session's life is bound to, recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<crate::supervision::Parent>,
    /// `--rm`: the session's files are removed once its exit has been delivered.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ephemeral: bool,
    /// The environment the record keeps (`Record::env`), when a restart needs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record_env: Option<BTreeMap<String, String>>,
    /// The creation this one replaces (`latch restart`, a respawn, `latch
    /// resurrect`), recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_incarnation: Option<Incarnation>,
    /// The record's `resumeCommand` (`latch resurrect`, SPEC.md §9.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_command: Option<Vec<String>>,
    /// The predecessor's checkpointed screen (`peek --ansi` text), drawn before
    /// the program starts (`latch resurrect`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_screen: Option<String>,
}

/// A recording asked for at creation (SPEC.md §4.8).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CastSpec {
    /// The file to create, an absolute path.
    pub file: String,
    /// End the recording once its file would pass this many bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u64>,
}

/// The one JSON line a daemon writes to its readiness pipe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "camelCase")]
pub enum ReadyMessage {
    /// The socket is listening and the record is written.
    #[serde(rename_all = "camelCase")]
    Ready {
        /// The minted incarnation.
        incarnation: Incarnation,
        /// The daemon's pid.
        daemon_pid: u32,
        /// The program's pid.
        child_pid: u32,
        /// Creation time, ms since the epoch.
        created_at_ms: u64,
    },
    /// Creation failed; nothing was left behind.
    #[serde(rename_all = "camelCase")]
    Failed {
        /// Why, as a kind the client maps to an error (and exit code).
        kind: FailureKind,
        /// What went wrong.
        message: String,
    },
}

/// Why a creation failed, as the readiness line says (SPEC.md §9.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum FailureKind {
    /// The id already has a record (readable or not) or a live socket.
    Exists,
    /// The session lock is held elsewhere.
    Busy,
    /// The creation spec is invalid (size, scrollback, id, program).
    Invalid,
    /// The registry is unsafe (root or key): refused.
    Refused,
    /// The program could not be started.
    Spawn,
    /// Any other failure (IO, the runtime).
    Io,
    /// A kind this build does not know (a newer daemon).
    #[serde(other)]
    Other,
}

impl FailureKind {
    /// The kind's name on the readiness line.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Exists => "exists",
            Self::Busy => "busy",
            Self::Invalid => "invalid",
            Self::Refused => "refused",
            Self::Spawn => "spawn",
            Self::Io => "io",
            Self::Other => "other",
        }
    }
}

impl std::fmt::Display for FailureKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
