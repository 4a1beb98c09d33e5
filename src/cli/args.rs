//! The arguments of `new` and `meta`/`receipt`, and the value enums options take
//! (SPEC.md §10).

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

use super::Preconditions;

#[derive(Debug, Subcommand)]
pub enum MetaOp {
    /// Apply a JSON merge object from stdin: {"displayName"?: s|null, "tags"?: {k: s|null},
    /// "resumeCommand"?: [s, ...]|null}.
    Patch {
        /// The exact session id (names are not accepted).
        #[arg(long)]
        id: String,
        #[command(flatten)]
        pre: Preconditions,
    },
}

#[derive(Debug, Subcommand)]
pub enum ReceiptOp {
    /// Say what a receipt's session is now: current, exited, replaced, removed, foreign
    /// or unreadable (exit 0, 1, 4, 3, 9, 7).
    Verify {
        /// The receipt file.
        file: PathBuf,
    },
}

/// `new`'s arguments; a create sent to another host carries them as they were
/// parsed here (SPEC.md §12.2), less `--receipt`, `--detach-key` and `-d`.
#[derive(Debug, Default, Args, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct NewArgs {
    /// Do not attach.
    #[arg(short = 'd', long)]
    pub detached: bool,
    /// Start a bash, zsh or fish exactly as given, without latch's prompt and
    /// command marks (default: shellIntegration in defaults.json, else on).
    #[arg(long)]
    pub no_shell_integration: bool,
    /// Create or attach: if session --id is running, attach to it (with -d, print
    /// it); otherwise create it. Concurrent calls yield one session.
    #[arg(short = 'A', requires = "id")]
    pub attach_or_create: bool,
    /// Detach key when attaching: ^X notation, C-x, or "none" (default: detachKey
    /// in defaults.json, else ^\).
    #[arg(long, value_name = "KEY")]
    pub detach_key: Option<String>,
    /// The session id (default: a fresh one).
    #[arg(long)]
    pub id: Option<String>,
    /// Display name.
    #[arg(long)]
    pub name: Option<String>,
    /// Tag (repeatable).
    #[arg(long = "tag", value_name = "K=V")]
    pub tags: Vec<String>,
    /// Working directory.
    #[arg(long)]
    pub cwd: Option<PathBuf>,
    /// Environment variable (repeatable).
    #[arg(long = "env", value_name = "K=V")]
    pub env: Vec<String>,
    /// Legacy-client policy (default: the registry's defaults.json, else observe).
    #[arg(long, value_name = "POLICY", value_enum)]
    pub legacy: Option<Legacy>,
    /// Write a receipt for this creation to FILE (mode 0600).
    #[arg(long, value_name = "FILE")]
    pub receipt: Option<PathBuf>,
    /// The session's owner, set once and never changed: 1-128 printable characters
    /// (a project digest, say).
    #[arg(long, value_name = "OWNER")]
    pub owner: Option<String>,
    /// Restart policy, parent, --rm (SPEC.md §9.16).
    #[command(flatten)]
    pub supervise: crate::commands::supervise::SuperviseArgs,
    /// The command `latch resurrect` runs when it brings the session back after a
    /// reboot (run by `sh -c`; e.g. 'claude --continue'); changed only by `meta
    /// patch --id`.
    #[arg(long, value_name = "CMD")]
    pub resume_cmd: Option<String>,
    /// Record the session from its first byte into FILE, as asciicast v2 (SPEC §4.8).
    #[arg(long, value_name = "FILE", conflicts_with = "attach_or_create")]
    pub cast: Option<PathBuf>,
    /// The program and its arguments (default $SHELL).
    #[arg(last = true)]
    pub command: Vec<String>,
}

/// `--legacy`: the legacy-client policy (SPEC.md §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Legacy {
    /// Close older clients at once.
    Off,
    /// Let them read (status, peek, read-only attach); drop their input.
    Observe,
    /// Also accept their input and resizes (trusted tools only).
    Full,
}

impl From<Legacy> for latch_wire::LegacyPolicy {
    fn from(l: Legacy) -> Self {
        match l {
            Legacy::Off => Self::Off,
            Legacy::Observe => Self::Observe,
            Legacy::Full => Self::Full,
        }
    }
}

/// `ls --status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatusFilter {
    /// The daemon is proven alive.
    Running,
    /// The program's exit is recorded.
    Exited,
    /// The daemon is proven gone without recording an exit.
    Vanished,
    /// Liveness could not be told.
    Unknown,
    /// The record cannot be read.
    Degraded,
}

impl StatusFilter {
    /// The status's name (SPEC.md §9.7).
    pub fn name(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Exited => "exited",
            Self::Vanished => "vanished",
            Self::Unknown => "unknown",
            Self::Degraded => "degraded",
        }
    }
}
/// `latch completions SHELL`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}
