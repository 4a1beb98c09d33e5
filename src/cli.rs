//! The command line (SPEC.md §10).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

mod args;
mod parse;

pub(crate) use args::{Legacy, MetaOp, NewArgs, ReceiptOp, Shell, StatusFilter};
pub(crate) use parse::{Dur, EventTypeParser, SignalParser};

/// latch: terminal sessions that outlive their terminal, and actions that reach exactly
/// the session creation they mean.
#[derive(Debug, Parser)]
#[command(name = "latch", version, about, max_term_width = 100)]
pub struct Cli {
    /// Registry root (else $LATCH_ROOT, $XDG_STATE_HOME/latch, ~/.local/state/latch).
    #[arg(long, global = true, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// Output JSON (SPEC.md §10); errors are also printed as JSON on stdout.
    #[arg(long, global = true)]
    pub json: bool,
    /// Run the command against the registry on HOST, through ssh (SPEC.md §12):
    /// an ssh alias or user@host; `ls` takes several (repeated, or a,b).
    #[arg(
        long,
        global = true,
        value_name = "HOST",
        env = "LATCH_HOST",
        value_delimiter = ','
    )]
    pub host: Vec<String>,
    /// Act on this host's registry only: $LATCH_HOST is ignored, and a REF such as
    /// `prod:db` is a local display name, not HOST:ID (SPEC.md §12.1).
    #[arg(long, global = true)]
    pub local: bool,
    /// Without a command: the running sessions, and how to create and attach.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The session an acting command acts on, and its preconditions.
#[derive(Debug, Args, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TargetArgs {
    /// ID, unique display name, or ID@INCARNATION.
    #[arg(add = crate::complete::refs())]
    pub reference: String,
    #[command(flatten)]
    pub pre: Preconditions,
}

/// Preconditions every acting command takes.
#[derive(Debug, Args, Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Preconditions {
    /// Act only if the session is still this incarnation.
    #[arg(long, value_name = "INCARNATION")]
    pub expect: Option<String>,
    /// Act only on the creation this receipt (from `latch new --receipt`) names.
    #[arg(long, value_name = "FILE")]
    pub receipt: Option<PathBuf>,
    /// Act only if the session's proven owner is OWNER (else exit 12).
    #[arg(long, value_name = "OWNER")]
    pub owner: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create a session (and attach to it, unless -d).
    New(NewArgs),
    /// Record a running session into FILE as asciicast v2, or stop recording it.
    Cast(crate::commands::cast::CastArgs),
    /// Attach this terminal to a session (without REF: the most recently used
    /// running one).
    #[command(visible_alias = "a")]
    Attach {
        /// ID, unique display name, or ID@INCARNATION (default: the most recently
        /// used running session).
        #[arg(add = crate::complete::refs())]
        reference: Option<String>,
        #[command(flatten)]
        pre: Preconditions,
        /// Watch without sending input or resizing.
        #[arg(long)]
        read_only: bool,
        /// Detach key: ^X notation, C-x, or "none"; press it twice to send it to the
        /// program (default: detachKey in defaults.json, else ^\).
        #[arg(long, value_name = "KEY")]
        detach_key: Option<String>,
        /// Attach even from inside the session itself (its output would feed back
        /// into it).
        #[arg(long)]
        force: bool,
        /// First write up to N lines of the session's scrollback into this terminal,
        /// so it can scroll back (default N: 10000; default without the flag:
        /// `attachHistory` in defaults.json, else none).
        #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "10000")]
        history: Option<usize>,
    },
    /// Print a session's screen.
    Peek {
        #[command(flatten)]
        target: TargetArgs,
        /// Plain text (the default).
        #[arg(long, conflicts_with = "ansi")]
        plain: bool,
        /// Keep colours and attributes (SGR only: one line per row, no cursor
        /// movement, safe for files and `less -R`).
        #[arg(long)]
        ansi: bool,
        /// The whole scrollback, not just the visible screen.
        #[arg(long)]
        full: bool,
        /// Wait until the screen contains TEXT.
        #[arg(long, value_name = "TEXT")]
        wait: Option<String>,
        /// How long to wait for --wait (default 10 s; a duration: 2.5, 500ms, 1m).
        #[arg(long, value_name = "DUR", default_value = "10")]
        timeout: Dur,
        /// Print the screen, then stream new output until the program exits; exit
        /// with its code.
        #[arg(short = 'f', long, conflicts_with_all = ["wait", "full"])]
        follow: bool,
        /// The output written after output cursor N (from `status --json`'s
        /// `outputCursor`), as plain text; checked against the creation only with
        /// ID@INCARNATION or --expect.
        #[arg(long, value_name = "N", conflicts_with_all = ["wait", "full", "follow", "ansi"])]
        since: Option<u64>,
        /// With --since: the raw bytes, escape sequences and all.
        #[arg(long, requires = "since")]
        raw: bool,
        #[command(flatten)]
        picture: crate::pictures::PictureArgs,
    },
    /// Send text (or, with --keys, key names such as Enter, C-c, Up) to a session.
    Send {
        #[command(flatten)]
        target: TargetArgs,
        /// Text to send, concatenated as given.
        #[arg(required_unless_present = "file")]
        text: Vec<String>,
        /// Treat each argument as a key name when it is one (Enter, Tab, Escape, C-c, Up...).
        #[arg(short, long)]
        keys: bool,
        #[command(flatten)]
        deliver: crate::commands::send::DeliverArgs,
    },
    /// Wait until a session's output holds a condition, evaluated on its daemon's
    /// stream: text written after a cursor, quiet, the shell's prompt, or the end.
    /// Prints the output cursor where it held (with --exit, the program's code).
    #[command(group(clap::ArgGroup::new("condition").required(true).args(["text", "idle", "prompt", "exit"])))]
    Wait {
        #[command(flatten)]
        target: TargetArgs,
        /// Output written after --after (default: now) contains TEXT (plain text:
        /// never old scrollback, nor an echo already on the screen).
        #[arg(long, value_name = "TEXT")]
        text: Option<String>,
        /// The program has written nothing for DUR (500ms, 2s, 1m).
        #[arg(long, value_name = "DUR")]
        idle: Option<Dur>,
        /// The shell is at its prompt (shell integration, SPEC §4.6).
        #[arg(long)]
        prompt: bool,
        /// The program has ended.
        #[arg(long)]
        exit: bool,
        /// With --text: look from output cursor N (checked against the creation
        /// only with ID@INCARNATION or --expect).
        #[arg(long, value_name = "N", requires = "text")]
        after: Option<u64>,
        /// How long to wait at most (default 10 s).
        #[arg(long, value_name = "DUR", default_value = "10")]
        timeout: Dur,
    },
    /// Type a command into a session's shell, wait for its end, print exactly its
    /// output and exit with its code (shell integration, SPEC §4.7).
    Run(crate::commands::run::RunArgs),
    /// The command blocks the session's daemon saw (SPEC §4.7).
    Commands(crate::commands::run::CommandsArgs),
    /// Set a session's terminal size.
    Resize {
        #[command(flatten)]
        target: TargetArgs,
        /// Rows.
        rows: u16,
        /// Columns.
        cols: u16,
    },
    /// List sessions.
    Ls {
        /// Only sessions with this tag (repeatable).
        #[arg(long = "tag", value_name = "K=V")]
        tags: Vec<String>,
        /// Only sessions in this status.
        #[arg(long, value_enum)]
        status: Option<StatusFilter>,
        /// Only sessions proven to be OWNER's (degraded records stay listed).
        #[arg(long, value_name = "OWNER")]
        owner: Option<String>,
    },
    /// Show one session's status, as its daemon reports it.
    Status {
        #[command(flatten)]
        target: TargetArgs,
    },
    /// End a session: hang up its terminal (every process of the session gets
    /// SIGHUP, as when a terminal closes), or send --signal to its program; once the
    /// program has exited, the rest of its session is hung up, then killed.
    Kill {
        #[command(flatten)]
        target: TargetArgs,
        /// Signal for the program, by name (with or without SIG) or number (HUP: hang
        /// up the whole session).
        #[arg(long, short, default_value = "HUP", value_parser = SignalParser)]
        signal: i32,
        /// Wait until the session has ended.
        #[arg(long)]
        wait: bool,
        /// How long to wait with --wait (a duration: 2.5, 500ms, 1m).
        #[arg(long, value_name = "DUR", default_value = "10")]
        timeout: Dur,
    },
    /// Remove an exited session's files (--force: kill it first).
    Rm {
        #[command(flatten)]
        target: TargetArgs,
        /// Kill a running session first.
        #[arg(long)]
        force: bool,
    },
    /// Set or delete tags: k=v sets, k= deletes.
    Tag {
        #[command(flatten)]
        target: TargetArgs,
        /// k=v (set) or k= (delete).
        #[arg(required = true, value_name = "K=V")]
        tags: Vec<String>,
    },
    /// Change a session's display name.
    Rename {
        #[command(flatten)]
        target: TargetArgs,
        /// The new display name.
        name: String,
    },
    /// Metadata operations.
    Meta {
        #[command(subcommand)]
        op: MetaOp,
    },
    /// Show a session's events (or every session's, with --all).
    Events {
        /// ID, unique display name, or ID@INCARNATION (only that creation's events).
        #[arg(add = crate::complete::refs())]
        reference: Option<String>,
        /// Every session.
        #[arg(long, conflicts_with = "reference")]
        all: bool,
        /// Keep printing new events.
        #[arg(long)]
        follow: bool,
        /// Wait for an event of this type (or a user event, user.NAME), print it
        /// and exit.
        #[arg(long, value_name = "TYPE", value_parser = EventTypeParser)]
        wait: Option<String>,
        /// How long to wait with --wait (a duration: 2.5, 500ms, 1m).
        #[arg(long, value_name = "DUR", default_value = "10")]
        timeout: Dur,
    },
    /// Receipt operations.
    Receipt {
        #[command(subcommand)]
        op: ReceiptOp,
    },
    /// Clean up after exited, vanished and (on request) abandoned sessions, acting
    /// only with proof.
    Gc {
        /// Report what would happen; change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Also stop and remove running sessions whose working directory is gone.
        #[arg(long)]
        abandoned: bool,
        /// Also stop and remove running sessions with no input or output for DAYS.
        #[arg(long, value_name = "DAYS")]
        idle_days: Option<f64>,
        /// How long an orphaned program gets after SIGTERM before SIGKILL.
        #[arg(long, value_name = "DUR", default_value = "3")]
        grace: Dur,
        /// Act only on sessions proven to be OWNER's.
        #[arg(long, value_name = "OWNER")]
        owner: Option<String>,
    },
    /// Create or refresh DIR, a directory for older `pty` tools: one entry per
    /// running session whose legacy policy is not off (SPEC.md §7).
    LegacyDir {
        /// The directory (never the registry root; 0700).
        dir: PathBuf,
    },
    /// Inside a session: replace its stored command (so a restart runs it) and run it.
    Exec {
        /// The program and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// End a session and start its stored command under the same id, with a new
    /// incarnation.
    Restart {
        #[command(flatten)]
        target: TargetArgs,
        /// How long to wait after SIGTERM before SIGKILL.
        #[arg(long, value_name = "DUR", default_value = "5")]
        grace: Dur,
    },
    /// Create the sessions a TOML file declares, idempotently (SPEC.md §9.17).
    Up(crate::commands::up::UpArgs),
    /// Kill and remove the sessions `up` created from a file (SPEC.md §9.17).
    Down(crate::commands::up::DownArgs),
    /// Bring back sessions that vanished with a reboot: same id, a new incarnation,
    /// the resume command (else the start command), the last screen shown first.
    Resurrect(crate::commands::resurrect::ResurrectArgs),
    /// What a session's processes use: CPU, memory, process count; its daemon's
    /// memory, clients and output cursor (no signal is sent).
    Stats(crate::commands::stats::StatsArgs),
    /// Append a user event, user.NAME, to a session's events (SPEC.md §9.9).
    Emit(crate::commands::emit::EmitArgs),
    /// A long-lived JSON-RPC 2.0 server on stdin and stdout, for programs (SPEC §13).
    Control(crate::control::ControlArgs),
    /// A Model Context Protocol server on stdin and stdout, for agents (SPEC §14).
    Mcp(crate::mcp::McpArgs),
    /// Print a shell completion script (ids and names complete too): see the README.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: Shell,
    },
    /// Print latch's manual page (roff): `latch man | man -l -`.
    Man,
    /// The remote end of --host (internal): one request on stdin (SPEC.md §12).
    #[command(hide = true)]
    Bridge,
    /// Run a session daemon (internal).
    #[command(hide = true)]
    Daemon {
        /// The registry root.
        #[arg(long)]
        root: PathBuf,
        /// The creation spec, JSON (default: read from stdin, which keeps the
        /// program's environment out of the world-readable argv).
        #[arg(long)]
        spec: Option<String>,
    },
}

impl Cli {
    /// Whether errors should also be printed as JSON (`meta patch` always prints JSON).
    pub fn wants_json(&self) -> bool {
        self.json || matches!(self.command, Some(Command::Meta { .. }))
    }
}

impl Command {
    /// The target of a command that acts on one session by a `TargetArgs`.
    pub(crate) fn target(&self) -> Option<&TargetArgs> {
        match self {
            Command::Peek { target, .. }
            | Command::Send { target, .. }
            | Command::Wait { target, .. }
            | Command::Resize { target, .. }
            | Command::Status { target }
            | Command::Kill { target, .. }
            | Command::Rm { target, .. }
            | Command::Tag { target, .. }
            | Command::Rename { target, .. }
            | Command::Restart { target, .. } => Some(target),
            Command::Cast(args) => Some(&args.target),
            Command::Emit(a) => Some(&a.target),
            Command::Run(a) => Some(&a.target),
            Command::Commands(a) => Some(&a.target),
            _ => None,
        }
    }

    /// The REF of a command, if it takes one.
    pub(crate) fn reference(&self) -> Option<&str> {
        if let Some(t) = self.target() {
            return Some(&t.reference);
        }
        match self {
            Command::Stats(a) => a.reference.as_deref(),
            Command::Attach { reference, .. } | Command::Events { reference, .. } => {
                reference.as_deref()
            }
            _ => None,
        }
    }

    /// The receipt file a command acts by (`--receipt`, `receipt verify FILE`).
    pub(crate) fn receipt_file(&self) -> Option<&std::path::Path> {
        if let Some(t) = self.target() {
            return t.pre.receipt.as_deref();
        }
        let pre = match self {
            Command::Stats(a) => &a.pre,
            Command::Attach { pre, .. } => pre,
            Command::Meta {
                op: MetaOp::Patch { pre, .. },
            } => pre,
            Command::Receipt {
                op: ReceiptOp::Verify { file },
            } => return Some(file),
            _ => return None,
        };
        pre.receipt.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    /// Every option that takes a time takes the one duration grammar (SPEC §10):
    /// [`Dur`]'s parser, shown as DUR; `gc --idle-days` alone counts days.
    #[test]
    fn every_duration_option_takes_the_one_grammar() {
        fn walk(cmd: &clap::Command, path: &str, found: &mut Vec<String>) {
            const TIMES: [&str; 6] = ["timeout", "grace", "idle", "delay", "window", "interval"];
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                let flag = arg.get_long().unwrap_or(id);
                let dur = arg.get_value_parser().type_id() == std::any::TypeId::of::<Dur>();
                let named = arg.get_value_names().is_some_and(|n| n == ["DUR"]);
                let timeish = TIMES.iter().any(|t| id.contains(t)) && id != "idle_days";
                if dur || named || timeish {
                    assert!(dur && named, "{path} --{flag}: not the duration grammar");
                    found.push(format!("{path} --{flag}"));
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), found);
            }
        }
        use clap::CommandFactory;
        let mut found = Vec::new();
        walk(&Cli::command(), "latch", &mut found);
        for option in [
            "latch gc --grace",
            "latch new --restart-delay",
            "latch send --timeout",
        ] {
            assert!(found.iter().any(|f| f == option), "{option} in {found:?}");
        }
        for (argv, want) in [
            (
                &["latch", "gc", "--grace", "500ms"][..],
                Duration::from_millis(500),
            ),
            (&["latch", "gc", "--grace", "2"], Duration::from_secs(2)),
            (
                &["latch", "restart", "a", "--grace", "1m"],
                Duration::from_secs(60),
            ),
            (
                &["latch", "kill", "a", "--wait", "--timeout", "2.5"],
                Duration::from_millis(2500),
            ),
        ] {
            let grace = match Cli::try_parse_from(argv).unwrap().command {
                Some(Command::Gc { grace, .. } | Command::Restart { grace, .. }) => grace,
                Some(Command::Kill { timeout, .. }) => timeout,
                other => panic!("{argv:?}: {other:?}"),
            };
            assert_eq!(grace, Dur(want), "{argv:?}");
        }
    }
}
