//! The params of each control method (SPEC §13.4), by name: the schema
//! `latch control --schema` prints is these types. A key no type names is refused
//! (-32602), so a misspelt precondition never lets an action through unchecked.

use std::collections::BTreeMap;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

/// `initialize`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InitializeParams {
    /// The lowest control-protocol version the client speaks (default 1).
    pub min_version: Option<u32>,
    /// The highest control-protocol version the client speaks (default: its min).
    pub max_version: Option<u32>,
}

/// A receipt: the path of a receipt file, or its contents (SPEC §9.10).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ReceiptParam {
    Path(PathBuf),
    Contents(BTreeMap<String, Value>),
}

/// The session an acting method acts on, and the CLI's preconditions.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TargetParams {
    /// ID, unique display name, or ID@INCARNATION (pins the creation).
    pub session: String,
    /// Act only if the session is still this incarnation.
    pub expect: Option<String>,
    /// Act only if the session's proven owner is this (else error 12).
    pub owner: Option<String>,
    /// Act only on the creation this receipt names.
    pub receipt: Option<ReceiptParam>,
}

/// A duration: seconds, or a string of the CLI's grammar (`2.5`, `500ms`, `1m`).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum DurParam {
    Seconds(f64),
    Text(String),
}

/// `list`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListParams {
    /// Only sessions with every one of these tags.
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    /// Only sessions in this status: running, exited, vanished, unknown, degraded.
    pub status: Option<String>,
    /// Only sessions proven to be this owner's.
    pub owner: Option<String>,
}

/// `status`, `remove` and the other methods that take only a target.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusParams {
    #[serde(flatten)]
    pub target: TargetParams,
}

/// `create`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreateParams {
    /// The session id (default: a fresh one).
    pub id: Option<String>,
    /// Display name.
    pub name: Option<String>,
    /// The program and its arguments (default $SHELL).
    #[serde(default)]
    pub command: Vec<String>,
    /// Working directory.
    pub cwd: Option<PathBuf>,
    /// Environment variables.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Tags.
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    /// Terminal rows (default 24).
    pub rows: Option<u16>,
    /// Terminal columns (default 80).
    pub cols: Option<u16>,
    /// Legacy-client policy: off, observe, full (default: defaults.json).
    pub legacy: Option<String>,
    /// The session's owner, set once.
    pub owner: Option<String>,
    /// Write a receipt for this creation to this file (mode 0600).
    pub receipt: Option<PathBuf>,
    /// Start a lone bash, zsh or fish with latch's prompt marks (default on).
    pub shell_integration: Option<bool>,
    /// Restart the program when it ends, as `new --restart` (SPEC §9.16): `no`
    /// (default), `on-failure` or `always`.
    pub restart: Option<String>,
    /// With restart: restarts allowed inside restartWindow before the session is
    /// flapping (default 5).
    pub max_restarts: Option<u32>,
    /// With restart: the window restarts are counted in (default 60 s).
    pub restart_window: Option<DurParam>,
    /// With restart: the first delay before a restart, doubling up to 30 s
    /// (default 250 ms).
    pub restart_delay: Option<DurParam>,
    /// Hang the session up when this process (a PID) or session creation (a
    /// REF) ends, as `new --with-parent`.
    pub with_parent: Option<ParentParam>,
    /// Remove the session's files once its exit has been delivered, as `new
    /// --rm` (not with restart).
    #[serde(default)]
    pub rm: bool,
    /// The command `latch resurrect` runs in place of the program (`sh -c`), as
    /// `new --resume-cmd`.
    pub resume_command: Option<String>,
    /// Record the output as asciicast to this file, as `new --cast` (SPEC §4.8;
    /// relative to the control process's working directory).
    pub cast: Option<PathBuf>,
}

/// `withParent`: a process id, or a session REF (as a string; a string of digits
/// is a process id, as on the command line).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ParentParam {
    Pid(u32),
    Ref(String),
}

/// `peek`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PeekParams {
    #[serde(flatten)]
    pub target: TargetParams,
    /// `plain` (default), `ansi` (SGR only, one line per row), or a picture of
    /// the screen: `svg`, `html`, or `png` (base64 in `screen`).
    pub format: Option<String>,
    /// The whole scrollback, not just the visible screen.
    #[serde(default)]
    pub full: bool,
    /// The output written after this output cursor, as plain text (the output
    /// shape; checked against the creation only with ID@INCARNATION or expect).
    pub since: Option<u64>,
    /// With since: at most this many bytes of output (default 1 MiB); the result's
    /// outputRange.end is the cursor to continue from.
    pub max_bytes: Option<u32>,
}

/// `send`: with any of paste, submit, whenReady, waitIdle or waitText, the
/// delivered send of `latch send` (SPEC §4.7, §13.4).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SendParams {
    #[serde(flatten)]
    pub target: TargetParams,
    /// Text, sent as it is.
    pub text: Option<String>,
    /// Key names after the text (Enter, Tab, Escape, C-c, Up…); an item that is
    /// no key name is sent as text, as `send --keys` does.
    #[serde(default)]
    pub keys: Vec<String>,
    /// As `send --paste`: inside bracketed paste when the program enabled it.
    #[serde(default)]
    pub paste: bool,
    /// As `send --submit`: Enter after the text was taken.
    #[serde(default)]
    pub submit: bool,
    /// As `send --when-ready`: first wait for the prompt (or the program reading).
    #[serde(default)]
    pub when_ready: bool,
    /// As `send --wait-idle`: then wait until the program is quiet this long.
    pub wait_idle: Option<DurParam>,
    /// As `send --wait-text`: then wait for this text in the output after the send.
    pub wait_text: Option<String>,
    /// The deadline of a delivered send (default 10 s).
    pub timeout: Option<DurParam>,
}

/// `resize`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResizeParams {
    #[serde(flatten)]
    pub target: TargetParams,
    pub rows: u16,
    pub cols: u16,
}

/// `tag`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TagParams {
    #[serde(flatten)]
    pub target: TargetParams,
    /// Tags to set; an empty value deletes the tag.
    pub tags: BTreeMap<String, String>,
}

/// `patch`: a JSON merge object, as `meta patch` reads (SPEC §10).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PatchParams {
    #[serde(flatten)]
    pub target: TargetParams,
    /// The new display name, or null to clear it.
    #[serde(default)]
    pub display_name: Option<Option<String>>,
    /// Tags to set (a string) or delete (null).
    #[serde(default)]
    pub tags: Option<BTreeMap<String, Option<String>>>,
}

/// `rename`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RenameParams {
    #[serde(flatten)]
    pub target: TargetParams,
    pub name: String,
}

/// A signal: a number, or a name with or without SIG.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum SignalParam {
    Number(i32),
    Name(String),
}

/// `kill`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KillParams {
    #[serde(flatten)]
    pub target: TargetParams,
    /// The signal for the program (default HUP: hang up the whole session).
    pub signal: Option<SignalParam>,
    /// Wait until the session has ended.
    #[serde(default)]
    pub wait: bool,
    /// How long to wait with wait (default 10 s).
    pub timeout: Option<DurParam>,
}

/// `remove`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RemoveParams {
    #[serde(flatten)]
    pub target: TargetParams,
    /// Kill a running session first.
    #[serde(default)]
    pub force: bool,
}

/// `restart`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestartParams {
    #[serde(flatten)]
    pub target: TargetParams,
    /// How long after SIGTERM before SIGKILL (default 5 s).
    pub grace: Option<DurParam>,
}

/// `events`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventsParams {
    /// ID (its whole history), display name or ID@INCARNATION (that creation's).
    pub session: Option<String>,
    /// Every session's.
    #[serde(default)]
    pub all: bool,
}

/// `gc`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GcParams {
    #[serde(default)]
    pub dry_run: bool,
    #[serde(default)]
    pub abandoned: bool,
    pub idle_days: Option<f64>,
    /// How long an orphaned program gets after SIGTERM (default 3 s).
    pub grace: Option<DurParam>,
    pub owner: Option<String>,
}

/// `verifyReceipt`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerifyParams {
    pub receipt: ReceiptParam,
}

/// `wait`: exactly one of text, idle, prompt, exit (SPEC §4.7).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaitParams {
    #[serde(flatten)]
    pub target: TargetParams,
    /// Output written after `after` (default: now) contains this text.
    pub text: Option<String>,
    /// The program has written nothing for this long.
    pub idle: Option<DurParam>,
    /// The shell is at its prompt.
    #[serde(default)]
    pub prompt: bool,
    /// The program has ended.
    #[serde(default)]
    pub exit: bool,
    /// With text: look from this output cursor.
    pub after: Option<u64>,
    /// How long to wait at most (default 10 s).
    pub timeout: Option<DurParam>,
}

/// `run`: a command typed at the shell's prompt, its output and exit code
/// (SPEC §4.7).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunParams {
    #[serde(flatten)]
    pub target: TargetParams,
    /// The command line, as typed.
    pub command: String,
    /// How long the whole run may take (default 600 s); at the deadline the
    /// command is left running and the answer is error 10.
    pub timeout: Option<DurParam>,
    /// Type the marker line instead of relying on shell integration (dash).
    #[serde(default)]
    pub marker: bool,
}

/// `subscribe` (SPEC §13.5).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubscribeParams {
    #[serde(flatten)]
    pub target: TargetParams,
    /// Push `output` notifications (default true).
    pub output: Option<bool>,
    /// Push `event` notifications (default false).
    #[serde(default)]
    pub events: bool,
    /// Start from this output cursor (the ring's output first), not from now.
    pub since: Option<u64>,
    /// `base64` (default: exact bytes) or `text` (whole UTF-8 sequences, invalid
    /// bytes as U+FFFD).
    pub format: Option<String>,
}

/// `cancel`: a pending request by its id, or a subscription by its number.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CancelParams {
    pub id: Option<Value>,
    pub subscription: Option<u64>,
}
