//! The arguments of the subcommands written inline before: each is its own
//! `Args` type so that `Lazy` can defer building it until it is the one invoked.
//! Their help texts are the variants' in `Command`; these carry none of their own
//! (a doc comment here would replace the variant's `about` when built).

use std::path::PathBuf;

use clap::Args;

use super::{
    Dur, EventTypeParser, MetaOp, Preconditions, ReceiptOp, Shell, SignalParser, StatusFilter,
    TargetArgs,
};

// `latch attach`.
#[derive(Debug, Args)]
pub struct AttachArgs {
    /// ID, unique display name, or ID@INCARNATION (default: the most recently
    /// used running session).
    #[arg(add = crate::complete::refs())]
    pub reference: Option<String>,
    #[command(flatten)]
    pub pre: Preconditions,
    /// Watch without sending input or resizing.
    #[arg(long)]
    pub read_only: bool,
    /// Detach key: ^X notation, C-x, or "none"; press it twice to send it to the
    /// program (default: detachKey in defaults.json, else ^\).
    #[arg(long, value_name = "KEY")]
    pub detach_key: Option<String>,
    /// Attach even from inside the session itself (its output would feed back
    /// into it).
    #[arg(long)]
    pub force: bool,
    /// First write up to N lines of the session's scrollback into this terminal,
    /// so it can scroll back (default N: 10000; default without the flag:
    /// `attachHistory` in defaults.json, else none).
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "10000")]
    pub history: Option<usize>,
}

// `latch peek`.
#[derive(Debug, Args)]
pub struct PeekArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Plain text (the default).
    #[arg(long, conflicts_with = "ansi")]
    pub plain: bool,
    /// Keep colours and attributes (SGR only: one line per row, no cursor
    /// movement, safe for files and `less -R`).
    #[arg(long)]
    pub ansi: bool,
    /// The whole scrollback, not just the visible screen.
    #[arg(long)]
    pub full: bool,
    /// Wait until the screen contains TEXT.
    #[arg(long, value_name = "TEXT")]
    pub wait: Option<String>,
    /// How long to wait for --wait (default 10 s; a duration: 2.5, 500ms, 1m).
    #[arg(long, value_name = "DUR", default_value = "10")]
    pub timeout: Dur,
    /// Print the screen, then stream new output until the program exits; exit
    /// with its code.
    #[arg(short = 'f', long, conflicts_with_all = ["wait", "full"])]
    pub follow: bool,
    /// The output written after output cursor N (from `status --json`'s
    /// `outputCursor`), as plain text; checked against the creation only with
    /// ID@INCARNATION or --expect.
    #[arg(long, value_name = "N", conflicts_with_all = ["wait", "full", "follow", "ansi"])]
    pub since: Option<u64>,
    /// With --since: the raw bytes, escape sequences and all.
    #[arg(long, requires = "since")]
    pub raw: bool,
    #[command(flatten)]
    pub picture: crate::pictures::PictureArgs,
}

// `latch send`.
#[derive(Debug, Args)]
pub struct SendArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Text to send, concatenated as given.
    #[arg(required_unless_present = "file")]
    pub text: Vec<String>,
    /// Treat each argument as a key name when it is one (Enter, Tab, Escape, C-c, Up...).
    #[arg(short, long)]
    pub keys: bool,
    #[command(flatten)]
    pub deliver: crate::commands::send::DeliverArgs,
}

// `latch wait`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("condition").required(true).args(["text", "idle", "prompt", "exit"])))]
pub struct WaitArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Output written after --after (default: now) contains TEXT (plain text:
    /// never old scrollback, nor an echo already on the screen).
    #[arg(long, value_name = "TEXT")]
    pub text: Option<String>,
    /// The program has written nothing for DUR (500ms, 2s, 1m).
    #[arg(long, value_name = "DUR")]
    pub idle: Option<Dur>,
    /// The shell is at its prompt (shell integration, SPEC §4.6).
    #[arg(long)]
    pub prompt: bool,
    /// The program has ended.
    #[arg(long)]
    pub exit: bool,
    /// With --text: look from output cursor N (checked against the creation
    /// only with ID@INCARNATION or --expect).
    #[arg(long, value_name = "N", requires = "text")]
    pub after: Option<u64>,
    /// How long to wait at most (default 10 s).
    #[arg(long, value_name = "DUR", default_value = "10")]
    pub timeout: Dur,
}

// `latch resize`.
#[derive(Debug, Args)]
pub struct ResizeArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Rows.
    pub rows: u16,
    /// Columns.
    pub cols: u16,
}

// `latch ls`.
#[derive(Debug, Args)]
pub struct LsArgs {
    /// Only sessions with this tag (repeatable).
    #[arg(long = "tag", value_name = "K=V")]
    pub tags: Vec<String>,
    /// Only sessions in this status.
    #[arg(long, value_enum)]
    pub status: Option<StatusFilter>,
    /// Only sessions proven to be OWNER's (degraded records stay listed).
    #[arg(long, value_name = "OWNER")]
    pub owner: Option<String>,
}

// `latch status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub target: TargetArgs,
}

// `latch kill`.
#[derive(Debug, Args)]
pub struct KillArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Signal for the program, by name (with or without SIG) or number (HUP: hang
    /// up the whole session).
    #[arg(long, short, default_value = "HUP", value_parser = SignalParser)]
    pub signal: i32,
    /// Wait until the session has ended.
    #[arg(long)]
    pub wait: bool,
    /// How long to wait with --wait (a duration: 2.5, 500ms, 1m).
    #[arg(long, value_name = "DUR", default_value = "10")]
    pub timeout: Dur,
}

// `latch rm`.
#[derive(Debug, Args)]
pub struct RmArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Kill a running session first.
    #[arg(long)]
    pub force: bool,
}

// `latch tag`.
#[derive(Debug, Args)]
pub struct TagArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// k=v (set) or k= (delete).
    #[arg(required = true, value_name = "K=V")]
    pub tags: Vec<String>,
}

// `latch rename`.
#[derive(Debug, Args)]
pub struct RenameArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// The new display name.
    pub name: String,
}

// `latch meta`.
#[derive(Debug, Args)]
pub struct MetaArgs {
    #[command(subcommand)]
    pub op: MetaOp,
}

// `latch events`.
#[derive(Debug, Args)]
pub struct EventsArgs {
    /// ID, unique display name, or ID@INCARNATION (only that creation's events).
    #[arg(add = crate::complete::refs())]
    pub reference: Option<String>,
    /// Every session.
    #[arg(long, conflicts_with = "reference")]
    pub all: bool,
    /// Keep printing new events.
    #[arg(long)]
    pub follow: bool,
    /// Wait for an event of this type (or a user event, user.NAME), print it
    /// and exit.
    #[arg(long, value_name = "TYPE", value_parser = EventTypeParser)]
    pub wait: Option<String>,
    /// How long to wait with --wait (a duration: 2.5, 500ms, 1m).
    #[arg(long, value_name = "DUR", default_value = "10")]
    pub timeout: Dur,
}

// `latch receipt`.
#[derive(Debug, Args)]
pub struct ReceiptArgs {
    #[command(subcommand)]
    pub op: ReceiptOp,
}

// `latch gc`.
#[derive(Debug, Args)]
pub struct GcArgs {
    /// Report what would happen; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Also stop and remove running sessions whose working directory is gone.
    #[arg(long)]
    pub abandoned: bool,
    /// Also stop and remove running sessions with no input or output for DAYS.
    #[arg(long, value_name = "DAYS")]
    pub idle_days: Option<f64>,
    /// How long an orphaned program gets after SIGTERM before SIGKILL.
    #[arg(long, value_name = "DUR", default_value = "3")]
    pub grace: Dur,
    /// Act only on sessions proven to be OWNER's.
    #[arg(long, value_name = "OWNER")]
    pub owner: Option<String>,
}

// `latch legacy-dir`.
#[derive(Debug, Args)]
pub struct LegacyDirArgs {
    /// The directory (never the registry root; 0700).
    pub dir: PathBuf,
}

// `latch exec`.
#[derive(Debug, Args)]
pub struct ExecArgs {
    /// The program and its arguments.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

// `latch restart`.
#[derive(Debug, Args)]
pub struct RestartArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// How long to wait after SIGTERM before SIGKILL.
    #[arg(long, value_name = "DUR", default_value = "5")]
    pub grace: Dur,
}

// `latch completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: Shell,
}

// `latch daemon`.
#[derive(Debug, Args)]
pub struct DaemonArgs {
    /// The registry root.
    #[arg(long)]
    pub root: PathBuf,
    /// The creation spec, JSON (default: read from stdin, which keeps the
    /// program's environment out of the world-readable argv).
    #[arg(long)]
    pub spec: Option<String>,
}
