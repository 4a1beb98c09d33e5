//! The command line (SPEC.md §10).

use std::path::PathBuf;

use clap::builder::{EnumValueParser, PossibleValue, TypedValueParser};
use clap::{Args, Parser, Subcommand, ValueEnum};

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
#[derive(Debug, Args, Clone)]
pub struct TargetArgs {
    /// ID, unique display name, or ID@INCARNATION.
    #[arg(add = crate::complete::refs())]
    pub reference: String,
    #[command(flatten)]
    pub pre: Preconditions,
}

/// Preconditions every acting command takes.
#[derive(Debug, Args, Clone, Default)]
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

#[derive(Debug, Args)]
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

impl Cli {
    /// Whether errors should also be printed as JSON (`meta patch` always prints JSON).
    pub fn wants_json(&self) -> bool {
        self.json || matches!(self.command, Some(Command::Meta { .. }))
    }
}

/// `--legacy`: the legacy-client policy (SPEC.md §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
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

/// `events --wait`: an event type (SPEC.md §9.9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum EventType {
    /// The session was created.
    SessionStart,
    /// The program ended.
    SessionExit,
    /// Name, tags or command changed.
    MetadataChange,
    /// A kill was requested.
    KillRequested,
    /// The session was removed.
    Removed,
    /// The program rang the bell.
    Bell,
    /// The program set the window title.
    TitleChange,
    /// The program sent a desktop notification.
    Notification,
    /// The program showed or hid the cursor.
    CursorVisible,
    /// The daemon started the program again (a restart policy).
    SessionRespawn,
    /// The restarts ran out.
    SessionFlapping,
    /// A recording began.
    CastStart,
    /// A recording ended.
    CastStop,
}

impl EventType {
    /// The `type` field's value.
    pub fn name(self) -> &'static str {
        use latch_registry::events::kind;
        match self {
            Self::SessionStart => kind::SESSION_START,
            Self::SessionExit => kind::SESSION_EXIT,
            Self::MetadataChange => kind::METADATA_CHANGE,
            Self::KillRequested => kind::KILL_REQUESTED,
            Self::Removed => kind::REMOVED,
            Self::Bell => kind::BELL,
            Self::TitleChange => kind::TITLE_CHANGE,
            Self::Notification => kind::NOTIFICATION,
            Self::CursorVisible => kind::CURSOR_VISIBLE,
            Self::SessionRespawn => kind::SESSION_RESPAWN,
            Self::SessionFlapping => kind::SESSION_FLAPPING,
            Self::CastStart => kind::CAST_START,
            Self::CastStop => kind::CAST_STOP,
        }
    }
}

/// Parses `events --wait`: an [`EventType`], or a user event type `user.NAME`
/// (SPEC.md §9.9); `--help` lists the built-in types.
#[derive(Debug, Clone, Copy)]
pub struct EventTypeParser;

impl TypedValueParser for EventTypeParser {
    type Value = String;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<String, clap::Error> {
        let text = value.to_string_lossy();
        if text.starts_with(latch_registry::user_events::USER_PREFIX) {
            return latch_registry::user_events::validate_type(&text)
                .map(|()| text.into_owned())
                .map_err(|e| clap::Error::raw(clap::error::ErrorKind::InvalidValue, e));
        }
        EnumValueParser::<EventType>::new()
            .parse_ref(cmd, arg, value)
            .map(|t| t.name().to_owned())
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(
            EventType::value_variants()
                .iter()
                .filter_map(ValueEnum::to_possible_value),
        ))
    }
}

/// Signal names `kill --signal` takes (or a number).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "UPPER")]
pub enum SignalName {
    Hup,
    Int,
    Quit,
    Kill,
    Term,
    Usr1,
    Usr2,
    Cont,
    Stop,
    Tstp,
    Winch,
    Alrm,
    Pipe,
}

impl SignalName {
    fn number(self) -> i32 {
        use nix::sys::signal::Signal as S;
        (match self {
            Self::Hup => S::SIGHUP,
            Self::Int => S::SIGINT,
            Self::Quit => S::SIGQUIT,
            Self::Kill => S::SIGKILL,
            Self::Term => S::SIGTERM,
            Self::Usr1 => S::SIGUSR1,
            Self::Usr2 => S::SIGUSR2,
            Self::Cont => S::SIGCONT,
            Self::Stop => S::SIGSTOP,
            Self::Tstp => S::SIGTSTP,
            Self::Winch => S::SIGWINCH,
            Self::Alrm => S::SIGALRM,
            Self::Pipe => S::SIGPIPE,
        }) as i32
    }
}

/// Parses `--signal`: a number, or a [`SignalName`] with or without `SIG`, in any
/// case; `--help` lists the names and a typo gets clap's suggestion.
#[derive(Debug, Clone, Copy)]
pub struct SignalParser;

impl TypedValueParser for SignalParser {
    type Value = i32;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<i32, clap::Error> {
        let text = value.to_string_lossy();
        if let Ok(n) = text.parse::<i32>() {
            return Ok(n);
        }
        let upper = text.to_ascii_uppercase();
        let name = upper.strip_prefix("SIG").unwrap_or(&upper);
        EnumValueParser::<SignalName>::new()
            .parse_ref(cmd, arg, std::ffi::OsStr::new(name))
            .map(SignalName::number)
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(
            SignalName::value_variants()
                .iter()
                .filter_map(ValueEnum::to_possible_value),
        ))
    }
}

/// `latch completions SHELL`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_wait_offers_every_event_type() {
        let names: Vec<&str> = EventType::value_variants()
            .iter()
            .map(|t| t.name())
            .collect();
        assert_eq!(names, latch_registry::events::kind::ALL);
        for t in EventType::value_variants() {
            assert_eq!(t.to_possible_value().unwrap().get_name(), t.name());
        }
    }

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}

/// A duration, as every option takes one (SPEC §10): a number with an optional unit,
/// `ms`, `s` or `m`; a bare number is seconds (`2.5`, `500ms`, `1m`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Dur(pub std::time::Duration);

impl std::str::FromStr for Dur {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || {
            format!("invalid duration {s:?}: a number with an optional unit ms, s or m (a bare number is seconds)")
        };
        let t = s.trim();
        let (number, scale) = if let Some(n) = t.strip_suffix("ms") {
            (n, 0.001)
        } else if let Some(n) = t.strip_suffix('s') {
            (n, 1.0)
        } else if let Some(n) = t.strip_suffix('m') {
            (n, 60.0)
        } else {
            (t, 1.0)
        };
        let n: f64 = number.trim().parse().map_err(|_| bad())?;
        if !n.is_finite() || n < 0.0 {
            return Err(bad());
        }
        std::time::Duration::try_from_secs_f64(n * scale)
            .map(Dur)
            .map_err(|_| bad())
    }
}

#[cfg(test)]
mod duration_tests {
    use super::Dur;
    use std::time::Duration;

    #[test]
    fn one_grammar_for_every_duration() {
        for (text, want) in [
            ("10", Duration::from_secs(10)),
            ("2.5", Duration::from_millis(2500)),
            ("500ms", Duration::from_millis(500)),
            ("2s", Duration::from_secs(2)),
            ("1m", Duration::from_secs(60)),
            ("0.5m", Duration::from_secs(30)),
            ("0", Duration::ZERO),
        ] {
            assert_eq!(text.parse::<Dur>(), Ok(Dur(want)), "{text}");
        }
        for bad in ["", "ms", "-1", "1h", "1e400", "NaN", "inf", "1 ss", "x"] {
            assert!(bad.parse::<Dur>().is_err(), "{bad:?}");
        }
    }
}
