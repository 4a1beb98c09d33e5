//! The `--json` shapes of SPEC.md §10, one type each: the schema is these types,
//! and a test pins SPEC.md §10's field lists to them.

use std::collections::BTreeMap;

use latch_client::{ClientError, Created, Entry, SessionStatus};
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

/// `peek --since --json`: the output after a cursor (SPEC §10).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OutputJson {
    pub id: String,
    pub incarnation: String,
    pub output_range: RangeJson,
    pub dropped_bytes: u64,
    pub output: String,
}

/// `wait --json` (SPEC §10).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaitedJson {
    pub id: String,
    pub incarnation: String,
    pub condition: &'static str,
    pub output_cursor: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_signal: Option<i32>,
}

/// `outputRange`: a range of output cursors, `end` excluded.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct RangeJson {
    pub start: u64,
    pub end: u64,
}

/// `kill --json` and `rm --json`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ActionJson {
    pub id: String,
    pub incarnation: String,
    #[schemars(with = "Option<String>")]
    pub owner: Option<Owner>,
    pub outcome: &'static str,
}

/// `tag`, `rename` and `meta patch`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct PatchedJson {
    pub changed: Vec<String>,
    pub metadata: SessionJson,
}

/// `receipt verify --json`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct VerdictJson {
    pub verdict: &'static str,
    pub detail: String,
    pub id: Option<String>,
    pub incarnation: Option<String>,
    #[schemars(with = "Option<String>")]
    pub owner: Option<Owner>,
}

/// `legacy-dir --json`: the directory and the ids it holds entries for.
#[derive(Debug, Clone, Serialize)]
pub struct LegacyDirJson {
    pub dir: std::path::PathBuf,
    pub sessions: Vec<String>,
}

/// The error object printed with `--json`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorBody {
    pub kind: &'static str,
    pub message: String,
    pub exit_code: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidates: Option<Vec<String>>,
}

/// A host `ls --host` could not list (SPEC.md §12.6).
#[derive(Debug, Clone, Serialize)]
pub struct HostDownJson {
    pub host: String,
    pub status: &'static str,
    pub error: String,
}

/// An error body as read back from another host's latch (`--host`, SPEC.md §12).
pub use latch_client::remote::ErrorBody as ErrorBodyOwned;

/// `{"error": ...}`.
#[derive(Debug, Clone, Serialize)]
pub struct ErrorJson {
    pub error: ErrorBody,
}

impl From<&ClientError> for ErrorJson {
    fn from(e: &ClientError) -> Self {
        Self {
            error: ErrorBody {
                kind: e.kind(),
                message: e.to_string(),
                exit_code: e.exit_code(),
                candidates: match e {
                    ClientError::Ambiguous { ids, .. } => {
                        Some(ids.iter().map(ToString::to_string).collect())
                    }
                    _ => None,
                },
            },
        }
    }
}

/// Prints one shape as a JSON line on stdout.
pub fn print<T: Serialize>(value: &T) -> Result<(), ClientError> {
    let line = serde_json::to_string(value).map_err(|e| ClientError::Other(e.to_string()))?;
    println!("{line}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    const SPEC: &str = include_str!("../SPEC.md");

    /// SPEC.md §10's table: shape -> (fields, optional fields).
    fn spec_shapes() -> BTreeMap<String, (Vec<String>, Vec<String>)> {
        let start = SPEC.find("## 10. Command-line JSON").expect("SPEC §10");
        SPEC[start..]
            .lines()
            .skip_while(|l| !l.starts_with("| "))
            .take_while(|l| l.starts_with('|'))
            .skip(2)
            .map(|l| {
                let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
                let (mut all, mut optional) = (Vec::new(), Vec::new());
                for f in cells[2].split(", ") {
                    match f.strip_suffix('?') {
                        Some(f) => {
                            all.push(f.to_owned());
                            optional.push(f.to_owned());
                        }
                        None => all.push(f.to_owned()),
                    }
                }
                (cells[0].to_owned(), (all, optional))
            })
            .collect()
    }

    fn keys(v: &Value) -> Vec<String> {
        let mut k: Vec<String> = v.as_object().expect("an object").keys().cloned().collect();
        k.sort();
        k
    }

    /// `full` has every optional field, `bare` none: the fields are the table's.
    fn check(
        shapes: &BTreeMap<String, (Vec<String>, Vec<String>)>,
        name: &str,
        full: Value,
        bare: Value,
    ) {
        let (all, optional) = shapes
            .get(name)
            .unwrap_or_else(|| panic!("SPEC §10 has no shape {name:?}"));
        let mut want = all.clone();
        want.sort();
        assert_eq!(
            keys(&full),
            want,
            "shape {name}: SPEC §10 and the type differ"
        );
        let mut required: Vec<String> = all
            .iter()
            .filter(|f| !optional.contains(f))
            .cloned()
            .collect();
        required.sort();
        assert_eq!(
            keys(&bare),
            required,
            "shape {name}: optional fields differ"
        );
    }

    fn session(reason: Option<&str>) -> SessionJson {
        SessionJson {
            id: "a".into(),
            incarnation: "v1.x".into(),
            name: None,
            status: "running",
            exit_code: None,
            exit_signal: None,
            command: vec!["sh".into()],
            cwd: "/".into(),
            created_at: 1,
            daemon_pid: 2,
            child_pid: 3,
            tags: BTreeMap::new(),
            legacy_policy: "observe",
            owner: None,
            status_reason: reason.map(str::to_owned),
            last_output_at: reason.map(|_| 1),
            foreground: reason.map(|_| ForegroundJson { pid: 3, name: None }),
        }
    }

    fn daemon() -> DaemonJson {
        DaemonJson {
            id: "a".into(),
            incarnation: "v1.x".into(),
            daemon_pid: 2,
            child_pid: 3,
            rows: 24,
            cols: 80,
            cursor: CursorJson { row: 0, col: 0 },
            writers: 0,
            readers: 0,
            created_at: 1,
            exit: None,
            draining: false,
            legacy_policy: "observe",
            owner: None,
        }
    }

    fn created() -> CreatedJson {
        CreatedJson {
            id: "a".into(),
            incarnation: "v1.x".into(),
            daemon_pid: 2,
            child_pid: 3,
            created_at: 1,
            owner: None,
        }
    }

    fn error(candidates: Option<Vec<String>>) -> ErrorBody {
        ErrorBody {
            kind: "ambiguous",
            message: "m".into(),
            exit_code: 5,
            candidates,
        }
    }

    #[test]
    fn spec_section_10_names_exactly_the_fields_of_each_shape() {
        let v = |x: &dyn erased::Ser| x.value();
        let shapes = spec_shapes();
        check(
            &shapes,
            "session",
            v(&session(Some("why"))),
            v(&session(None)),
        );
        let degraded = DegradedJson {
            id: "a".into(),
            status: "degraded",
            error: "e".into(),
        };
        check(&shapes, "degraded", v(&degraded), v(&degraded));
        check(&shapes, "created", v(&created()), v(&created()));
        let restarted = RestartedJson {
            created: created(),
            previous_incarnation: "v1.y".into(),
        };
        check(&shapes, "restarted", v(&restarted), v(&restarted));
        let status = |with: bool| StatusJson {
            // `ls --json` alone carries the session's `lastOutputAt` and
            // `foreground`; status has its own.
            session: SessionJson {
                last_output_at: None,
                foreground: None,
                ..session(with.then_some("why"))
            },
            daemon: with.then(daemon),
            hint: with.then(|| "latch rm a".into()),
            output_cursor: with.then_some(7),
            last_output_at: with.then_some(None),
            shell: with.then(shell),
            foreground: with.then_some(ForegroundJson { pid: 9, name: None }),
            casts: with.then(Vec::new),
        };
        check(&shapes, "status", v(&status(true)), v(&status(false)));
        let cast = crate::commands::cast::CastJson {
            file: "/c".into(),
            bytes: 1,
            start_cursor: 0,
            dropped_bytes: 0,
            started_at: 2,
            max_bytes: None,
        };
        check(&shapes, "cast", v(&cast), v(&cast));
        let casts = crate::commands::cast::CastsJson {
            id: "a".into(),
            incarnation: "v1.x".into(),
            casts: vec![cast],
        };
        check(&shapes, "casts", v(&casts), v(&casts));
        check(&shapes, "shell", v(&shell()), v(&shell()));
        let fg = ForegroundJson {
            pid: 1,
            name: Some("vim".into()),
        };
        check(&shapes, "foreground", v(&fg), v(&fg));
        let output = OutputJson {
            id: "a".into(),
            incarnation: "v1.x".into(),
            output_range: RangeJson { start: 0, end: 2 },
            dropped_bytes: 0,
            output: "ok".into(),
        };
        check(&shapes, "output", v(&output), v(&output));
        let waited = |exit: bool| WaitedJson {
            id: "a".into(),
            incarnation: "v1.x".into(),
            condition: "exit",
            output_cursor: None,
            exit_code: exit.then_some(0),
            exit_signal: exit.then_some(9),
        };
        check(&shapes, "waited", v(&waited(true)), v(&waited(false)));
        check(&shapes, "daemon", v(&daemon()), v(&daemon()));
        let action = ActionJson {
            id: "a".into(),
            incarnation: "v1.x".into(),
            owner: None,
            outcome: "removed",
        };
        check(&shapes, "action", v(&action), v(&action));
        let patched = PatchedJson {
            changed: vec![],
            metadata: session(None),
        };
        check(&shapes, "patched", v(&patched), v(&patched));
        let verdict = VerdictJson {
            verdict: "current",
            detail: "running".into(),
            id: None,
            incarnation: None,
            owner: None,
        };
        check(&shapes, "verdict", v(&verdict), v(&verdict));
        let report = latch_client::GcReport::new("a", "exited", "removed");
        check(&shapes, "gc report", v(&report), v(&report));
        let dir = LegacyDirJson {
            dir: "/d".into(),
            sessions: vec![],
        };
        check(&shapes, "legacy dir", v(&dir), v(&dir));
        let err = ErrorJson { error: error(None) };
        check(&shapes, "error", v(&err), v(&err));
        check(
            &shapes,
            "error body",
            v(&error(Some(vec!["a".into()]))),
            v(&error(None)),
        );
        let down = HostDownJson {
            host: "h".into(),
            status: "unreachable",
            error: "e".into(),
        };
        check(&shapes, "host down", v(&down), v(&down));
        let up = |full: bool| crate::commands::up::UpReport {
            id: "a".into(),
            action: "drift",
            incarnation: full.then(|| "v1.x".into()),
            detail: full.then(|| "d".into()),
        };
        check(&shapes, "up report", v(&up(true)), v(&up(false)));
        let stats = |with: bool| crate::commands::stats::StatsJson {
            id: "a".into(),
            incarnation: "v1.x".into(),
            status: "running",
            processes: 1,
            cpu_ms: with.then_some(1),
            rss_bytes: None,
            pss_bytes: None,
            daemon: with.then_some(crate::commands::stats::DaemonUsageJson {
                pid: 1,
                rss_bytes: 2,
                pss_bytes: None,
            }),
            writers: None,
            readers: None,
            output_cursor: None,
            last_output_at: None,
        };
        check(&shapes, "stats", v(&stats(true)), v(&stats(false)));
        let du = crate::commands::stats::DaemonUsageJson {
            pid: 1,
            rss_bytes: 2,
            pss_bytes: Some(3),
        };
        check(&shapes, "daemon usage", v(&du), v(&du));
        let res = |with: bool| crate::commands::resurrect::ResurrectedJson {
            id: "a".into(),
            previous_incarnation: "v1.x".into(),
            incarnation: None,
            command: vec!["sh".into()],
            cwd: "/".into(),
            owner: None,
            screen: true,
            outcome: "failed",
            error: with.then(|| "e".into()),
        };
        check(&shapes, "resurrected", v(&res(true)), v(&res(false)));
        let run = crate::commands::run::RunJson {
            id: "a".into(),
            incarnation: "v1.x".into(),
            command: "ls".into(),
            exit_code: Some(0),
            output: String::new(),
            output_range: RangeJson { start: 0, end: 0 },
            dropped_bytes: 0,
            started_at: 0,
            ended_at: 0,
            cwd: None,
        };
        check(&shapes, "run", v(&run), v(&run));
        let cmd = crate::commands::run::CommandJson {
            id: "a".into(),
            incarnation: "v1.x".into(),
            command: None,
            cwd: None,
            started_at: 0,
            ended_at: None,
            exit_code: None,
            output_range: crate::commands::run::CommandRangeJson {
                start: 0,
                end: None,
            },
        };
        check(&shapes, "command", v(&cmd), v(&cmd));
        let sent = crate::commands::send::SentJson {
            id: "a".into(),
            incarnation: "v1.x".into(),
            bytes: 1,
            pasted: false,
            output_range: RangeJson { start: 0, end: 0 },
        };
        check(&shapes, "sent", v(&sent), v(&sent));
        let screen = crate::commands::turns::ScreenJson {
            id: "a".into(),
            incarnation: "v1.x".into(),
            output_cursor: Some(1),
            screen: String::new(),
        };
        check(&shapes, "screen", v(&screen), v(&screen));
        assert_eq!(shapes.len(), 28, "a shape in SPEC §10 without a type here");
    }

    fn shell() -> ShellJson {
        ShellJson::from(&latch_wire::ShellFacts {
            state: latch_wire::ShellPhase::Prompt,
            command: None,
            cwd: Some("/".into()),
            last_exit: Some(0),
        })
    }

    /// Serialising any shape to a JSON value, through one signature.
    mod erased {
        pub trait Ser {
            fn value(&self) -> serde_json::Value;
        }
        impl<T: serde::Serialize> Ser for T {
            fn value(&self) -> serde_json::Value {
                serde_json::to_value(self).unwrap()
            }
        }
    }
}
