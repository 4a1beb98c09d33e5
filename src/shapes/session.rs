//! The shapes of a session (SPEC.md §10): `ls --json`'s elements, `status --json`
//! and its parts, `new --json` and `restart --json`.

use std::collections::BTreeMap;

use latch_client::{Created, Entry, SessionStatus};
use latch_registry::Record;
use latch_wire::{Owner, StatusReply};
use serde::Serialize;

/// A session (`ls --json` element, `status --json`, `metadata` of a patch).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionJson {
    pub id: String,
    pub incarnation: String,
    pub name: Option<String>,
    pub status: &'static str,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub command: Vec<String>,
    pub cwd: String,
    pub created_at: u64,
    pub daemon_pid: u32,
    pub child_pid: u32,
    pub tags: BTreeMap<String, String>,
    pub legacy_policy: &'static str,
    #[schemars(with = "Option<String>")]
    pub owner: Option<Owner>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_reason: Option<String>,
    /// `ls --json` of a running session: when its terminal last took output, from
    /// the PTY's mtime (SPEC §10), and its foreground process group.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_output_at: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub foreground: Option<ForegroundJson>,
}

impl SessionJson {
    pub fn new(record: &Record, status: &SessionStatus) -> Self {
        let (exit_code, exit_signal) = match status {
            SessionStatus::Exited { code, signal } => (*code, *signal),
            _ => (None, None),
        };
        Self {
            id: record.id.to_string(),
            incarnation: record.incarnation.to_string(),
            name: record.display_name.clone(),
            status: latch_client::shown_status(record, status).0,
            exit_code,
            exit_signal,
            command: record.command.clone(),
            cwd: record.cwd.clone(),
            created_at: record.created_at_ms,
            daemon_pid: record.daemon.pid,
            child_pid: record.child.pid,
            tags: record.tags.clone(),
            legacy_policy: record.legacy_policy.as_str(),
            owner: record.owner.clone(),
            last_output_at: None,
            foreground: None,
            status_reason: match status {
                SessionStatus::Unknown { reason } => Some(reason.clone()),
                // restarting, flapping, parent-ended (SPEC §9.16).
                _ => latch_client::shown_status(record, status)
                    .1
                    .map(|r| r.as_str().to_owned()),
            },
        }
    }
}

/// A record that cannot be read (`ls --json` element).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct DegradedJson {
    pub id: String,
    pub status: &'static str,
    pub error: String,
}

/// One `ls --json` element.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum EntryJson {
    Session(Box<SessionJson>),
    Degraded(DegradedJson),
}

impl From<&Entry> for EntryJson {
    fn from(e: &Entry) -> Self {
        match e {
            Entry::Session { record, status } => {
                Self::Session(Box::new(SessionJson::new(record, status)))
            }
            Entry::Degraded { id, error } => Self::Degraded(DegradedJson {
                id: id.clone(),
                status: "degraded",
                error: error.clone(),
            }),
        }
    }
}

/// `new --json`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedJson {
    pub id: String,
    pub incarnation: String,
    pub daemon_pid: u32,
    pub child_pid: u32,
    pub created_at: u64,
    #[schemars(with = "Option<String>")]
    pub owner: Option<Owner>,
}

impl From<&Created> for CreatedJson {
    fn from(c: &Created) -> Self {
        Self {
            id: c.id.to_string(),
            incarnation: c.incarnation.to_string(),
            daemon_pid: c.daemon_pid,
            child_pid: c.child_pid,
            created_at: c.created_at_ms,
            owner: c.owner.clone(),
        }
    }
}

/// `restart --json`: `new --json`'s object plus the incarnation it replaced.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestartedJson {
    #[serde(flatten)]
    pub created: CreatedJson,
    pub previous_incarnation: String,
}

/// The cursor in [`DaemonJson`].
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct CursorJson {
    pub row: u16,
    pub col: u16,
}

/// The program's end in [`DaemonJson`].
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ExitJson {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

/// What the daemon reported with STATUS (`status --json`'s `daemon`).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DaemonJson {
    pub id: String,
    pub incarnation: String,
    pub daemon_pid: u32,
    pub child_pid: u32,
    pub rows: u16,
    pub cols: u16,
    pub cursor: CursorJson,
    pub writers: u32,
    pub readers: u32,
    pub created_at: u64,
    pub exit: Option<ExitJson>,
    pub draining: bool,
    pub legacy_policy: &'static str,
    #[schemars(with = "Option<String>")]
    pub owner: Option<Owner>,
}

impl From<&StatusReply> for DaemonJson {
    fn from(s: &StatusReply) -> Self {
        Self {
            id: s.id.to_string(),
            incarnation: s.incarnation.to_string(),
            daemon_pid: s.daemon_pid,
            child_pid: s.child_pid,
            rows: s.rows,
            cols: s.cols,
            cursor: CursorJson {
                row: s.cursor_row,
                col: s.cursor_col,
            },
            writers: s.writers,
            readers: s.readers,
            created_at: s.created_at_ms,
            exit: s.exit.map(|e| ExitJson {
                code: e.code,
                signal: e.signal,
            }),
            draining: s.draining,
            legacy_policy: s.legacy_policy.as_str(),
            owner: s.owner.clone(),
        }
    }
}

/// `status --json`: the session object, plus the daemon's report when it answered.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusJson {
    #[serde(flatten)]
    pub session: SessionJson,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub daemon: Option<DaemonJson>,
    /// For an ended session: the command that removes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// The output cursor (a daemon of protocol version 3, SPEC §4.2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_cursor: Option<u64>,
    /// When the program last wrote, ms since the epoch (null: never).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_output_at: Option<Option<u64>>,
    /// The shell, from its marks (SPEC §4.6).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shell: Option<ShellJson>,
    /// The terminal's foreground process group, from `/proc`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub foreground: Option<ForegroundJson>,
    /// The active recordings (SPEC §4.8), from a daemon of version 3.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub casts: Option<Vec<crate::commands::cast::CastJson>>,
}

/// `shell` of `status --json`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShellJson {
    pub state: &'static str,
    pub command: Option<String>,
    pub cwd: Option<String>,
    pub last_exit: Option<i32>,
}

impl From<&latch_wire::ShellFacts> for ShellJson {
    fn from(s: &latch_wire::ShellFacts) -> Self {
        Self {
            state: s.state.as_str(),
            command: s.command.clone(),
            cwd: s.cwd.clone(),
            last_exit: s.last_exit,
        }
    }
}

/// `foreground` of `status --json`: the process group reading the terminal.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ForegroundJson {
    pub pid: u32,
    pub name: Option<String>,
}
