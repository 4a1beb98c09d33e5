//! The command line (SPEC.md §10).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

mod args;
mod lazy;
mod parse;
mod subcommands;

pub(crate) use args::{Legacy, MetaOp, NewArgs, ReceiptOp, Shell, StatusFilter};
pub(crate) use lazy::Lazy;
pub(crate) use parse::{Dur, EventTypeParser, SignalParser};
pub(crate) use subcommands::*;

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
    New(Lazy<NewArgs>),
    /// Record a running session into FILE as asciicast v2, or stop recording it.
    Cast(Lazy<crate::commands::cast::CastArgs>),
    /// Attach this terminal to a session (without REF: the most recently used
    /// running one).
    #[command(visible_alias = "a")]
    Attach(Lazy<AttachArgs>),
    /// Print a session's screen.
    Peek(Lazy<PeekArgs>),
    /// Send text (or, with --keys, key names such as Enter, C-c, Up) to a session.
    Send(Lazy<SendArgs>),
    /// Wait until a session's output holds a condition, evaluated on its daemon's
    /// stream: text written after a cursor, quiet, the shell's prompt, or the end.
    /// Prints the output cursor where it held (with --exit, the program's code).
    Wait(Lazy<WaitArgs>),
    /// Type a command into a session's shell, wait for its end, print exactly its
    /// output and exit with its code (shell integration, SPEC §4.7).
    Run(Lazy<crate::commands::run::RunArgs>),
    /// The command blocks the session's daemon saw (SPEC §4.7).
    Commands(Lazy<crate::commands::run::CommandsArgs>),
    /// Set a session's terminal size.
    Resize(Lazy<ResizeArgs>),
    /// List sessions.
    Ls(Lazy<LsArgs>),
    /// Show one session's status, as its daemon reports it.
    Status(Lazy<StatusArgs>),
    /// End a session: hang up its terminal (every process of the session gets
    /// SIGHUP, as when a terminal closes), or send --signal to its program; once the
    /// program has exited, the rest of its session is hung up, then killed.
    Kill(Lazy<KillArgs>),
    /// Remove an exited session's files (--force: kill it first).
    Rm(Lazy<RmArgs>),
    /// Set or delete tags: k=v sets, k= deletes.
    Tag(Lazy<TagArgs>),
    /// Change a session's display name.
    Rename(Lazy<RenameArgs>),
    /// Metadata operations.
    Meta(Lazy<MetaArgs>),
    /// Show a session's events (or every session's, with --all).
    Events(Lazy<EventsArgs>),
    /// Receipt operations.
    Receipt(Lazy<ReceiptArgs>),
    /// Clean up after exited, vanished and (on request) abandoned sessions, acting
    /// only with proof.
    Gc(Lazy<GcArgs>),
    /// Create or refresh DIR, a directory for older `pty` tools: one entry per
    /// running session whose legacy policy is not off (SPEC.md §7).
    LegacyDir(Lazy<LegacyDirArgs>),
    /// Inside a session: replace its stored command (so a restart runs it) and run it.
    Exec(Lazy<ExecArgs>),
    /// End a session and start its stored command under the same id, with a new
    /// incarnation.
    Restart(Lazy<RestartArgs>),
    /// Create the sessions a TOML file declares, idempotently (SPEC.md §9.17).
    Up(Lazy<crate::commands::up::UpArgs>),
    /// Kill and remove the sessions `up` created from a file (SPEC.md §9.17).
    Down(Lazy<crate::commands::up::DownArgs>),
    /// Bring back sessions that vanished with a reboot: same id, a new incarnation,
    /// the resume command (else the start command), the last screen shown first.
    Resurrect(Lazy<crate::commands::resurrect::ResurrectArgs>),
    /// What a session's processes use: CPU, memory, process count; its daemon's
    /// memory, clients and output cursor (no signal is sent).
    Stats(Lazy<crate::commands::stats::StatsArgs>),
    /// Append a user event, user.NAME, to a session's events (SPEC.md §9.9).
    Emit(Lazy<crate::commands::emit::EmitArgs>),
    /// A long-lived JSON-RPC 2.0 server on stdin and stdout, for programs (SPEC §13).
    Control(Lazy<crate::control::ControlArgs>),
    /// A Model Context Protocol server on stdin and stdout, for agents (SPEC §14).
    Mcp(Lazy<crate::mcp::McpArgs>),
    /// Print a shell completion script (ids and names complete too): see the README.
    Completions(Lazy<CompletionsArgs>),
    /// Print latch's manual page (roff): `latch man | man -l -`.
    Man,
    /// The remote end of --host (internal): one request on stdin (SPEC.md §12).
    #[command(hide = true)]
    Bridge,
    /// Run a session daemon (internal).
    #[command(hide = true)]
    Daemon(DaemonArgs),
}

impl Cli {
    /// Whether errors should also be printed as JSON (`meta patch` always prints JSON).
    pub fn wants_json(&self) -> bool {
        self.json || matches!(self.command, Some(Command::Meta(Lazy(MetaArgs { .. }))))
    }
}

impl Command {
    /// The target of a command that acts on one session by a `TargetArgs`.
    pub(crate) fn target(&self) -> Option<&TargetArgs> {
        match self {
            Command::Peek(Lazy(PeekArgs { target, .. }))
            | Command::Send(Lazy(SendArgs { target, .. }))
            | Command::Wait(Lazy(WaitArgs { target, .. }))
            | Command::Resize(Lazy(ResizeArgs { target, .. }))
            | Command::Status(Lazy(StatusArgs { target }))
            | Command::Kill(Lazy(KillArgs { target, .. }))
            | Command::Rm(Lazy(RmArgs { target, .. }))
            | Command::Tag(Lazy(TagArgs { target, .. }))
            | Command::Rename(Lazy(RenameArgs { target, .. }))
            | Command::Restart(Lazy(RestartArgs { target, .. })) => Some(target),
            Command::Cast(Lazy(args)) => Some(&args.target),
            Command::Emit(Lazy(a)) => Some(&a.target),
            Command::Run(Lazy(a)) => Some(&a.target),
            Command::Commands(Lazy(a)) => Some(&a.target),
            _ => None,
        }
    }

    /// The REF of a command, if it takes one.
    pub(crate) fn reference(&self) -> Option<&str> {
        if let Some(t) = self.target() {
            return Some(&t.reference);
        }
        match self {
            Command::Stats(Lazy(a)) => a.reference.as_deref(),
            Command::Attach(Lazy(AttachArgs { reference, .. }))
            | Command::Events(Lazy(EventsArgs { reference, .. })) => reference.as_deref(),
            _ => None,
        }
    }

    /// The receipt file a command acts by (`--receipt`, `receipt verify FILE`).
    pub(crate) fn receipt_file(&self) -> Option<&std::path::Path> {
        if let Some(t) = self.target() {
            return t.pre.receipt.as_deref();
        }
        let pre = match self {
            Command::Stats(Lazy(a)) => &a.pre,
            Command::Attach(Lazy(AttachArgs { pre, .. })) => pre,
            Command::Meta(Lazy(MetaArgs {
                op: MetaOp::Patch { pre, .. },
            })) => pre,
            Command::Receipt(Lazy(ReceiptArgs {
                op: ReceiptOp::Verify { file },
            })) => return Some(file),
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

    /// A subcommand's arguments are built only when it is the one invoked
    /// (`Lazy`), and the whole tree still has every argument once built, as help,
    /// completion and the manual page build it.
    #[test]
    fn subcommand_arguments_are_built_only_when_needed() {
        use clap::CommandFactory;
        let args = |cmd: &clap::Command, sub: &str| {
            let sub = cmd.find_subcommand(sub).expect(sub);
            sub.get_arguments().filter(|a| !a.is_global_set()).count()
        };
        let mut cli = Cli::command();
        for sub in cli.get_subcommands() {
            let own = sub.get_arguments().filter(|a| !a.is_global_set()).count();
            let eager = ["daemon", "man", "bridge", "help"].contains(&sub.get_name());
            assert!(eager || own == 0, "{} was built eagerly", sub.get_name());
        }
        cli.build();
        assert!(args(&cli, "peek") >= 10 && args(&cli, "new") >= 20);
        // A parse builds the subcommand it selected: its defaults and checks hold.
        let parsed = Cli::try_parse_from(["latch", "peek", "a", "--plain", "--ansi"]);
        assert!(parsed.is_err(), "peek's --plain/--ansi conflict is lost");
        match Cli::try_parse_from(["latch", "peek", "a"]).unwrap().command {
            Some(Command::Peek(Lazy(p))) => assert_eq!(p.timeout, Dur(Duration::from_secs(10))),
            other => panic!("{other:?}"),
        }
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
        let mut cli = Cli::command();
        cli.build();
        walk(&cli, "latch", &mut found);
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
                Some(
                    Command::Gc(Lazy(GcArgs { grace, .. }))
                    | Command::Restart(Lazy(RestartArgs { grace, .. })),
                ) => grace,
                Some(Command::Kill(Lazy(KillArgs { timeout, .. }))) => timeout,
                other => panic!("{argv:?}: {other:?}"),
            };
            assert_eq!(grace, Dur(want), "{argv:?}");
        }
    }
}
