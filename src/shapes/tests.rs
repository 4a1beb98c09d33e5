use std::collections::{BTreeMap, BTreeSet};

use super::session::{CursorJson, DegradedJson};
use super::*;
use serde_json::Value;

const SPEC: &str = include_str!("../../SPEC.md");

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

/// SPEC.md §10's table, and the shapes checked against it so far.
struct Table {
    shapes: BTreeMap<String, (Vec<String>, Vec<String>)>,
    checked: BTreeSet<String>,
}

impl Table {
    fn of_spec() -> Self {
        Self {
            shapes: spec_shapes(),
            checked: BTreeSet::new(),
        }
    }

    /// `full` has every optional field, `bare` none: the fields are the table's.
    fn check(&mut self, name: &str, full: &dyn erased::Ser, bare: &dyn erased::Ser) {
        let (full, bare) = (full.value(), bare.value());
        let (all, optional) = self
            .shapes
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
        self.checked.insert(name.to_owned());
    }
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
    let mut t = Table::of_spec();
    session_shapes(&mut t);
    result_shapes(&mut t);
    fleet_shapes(&mut t);
    turn_shapes(&mut t);
    assert_eq!(
        t.shapes.len(),
        28,
        "a shape in SPEC §10 without a type here"
    );
    let unchecked: Vec<&String> = t
        .shapes
        .keys()
        .filter(|k| !t.checked.contains(*k))
        .collect();
    assert!(
        unchecked.is_empty(),
        "shapes of SPEC §10 left unchecked: {unchecked:?}"
    );
}

/// The shapes of a session: `ls`, `status`, `new` and `restart`.
fn session_shapes(t: &mut Table) {
    t.check("session", &session(Some("why")), &session(None));
    let degraded = DegradedJson {
        id: "a".into(),
        status: "degraded",
        error: "e".into(),
    };
    t.check("degraded", &degraded, &degraded);
    t.check("created", &created(), &created());
    let restarted = RestartedJson {
        created: created(),
        previous_incarnation: "v1.y".into(),
    };
    t.check("restarted", &restarted, &restarted);
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
    t.check("status", &status(true), &status(false));
    t.check("shell", &shell(), &shell());
    let fg = ForegroundJson {
        pid: 1,
        name: Some("vim".into()),
    };
    t.check("foreground", &fg, &fg);
    t.check("daemon", &daemon(), &daemon());
}

/// The acting commands' answers, and the errors.
fn result_shapes(t: &mut Table) {
    let output = OutputJson {
        id: "a".into(),
        incarnation: "v1.x".into(),
        output_range: RangeJson { start: 0, end: 2 },
        dropped_bytes: 0,
        output: "ok".into(),
    };
    t.check("output", &output, &output);
    let waited = |exit: bool| WaitedJson {
        id: "a".into(),
        incarnation: "v1.x".into(),
        condition: "exit",
        output_cursor: None,
        exit_code: exit.then_some(0),
        exit_signal: exit.then_some(9),
    };
    t.check("waited", &waited(true), &waited(false));
    let action = ActionJson {
        id: "a".into(),
        incarnation: "v1.x".into(),
        owner: None,
        outcome: "removed",
    };
    t.check("action", &action, &action);
    let patched = PatchedJson {
        changed: vec![],
        metadata: session(None),
    };
    t.check("patched", &patched, &patched);
    let verdict = VerdictJson {
        verdict: "current",
        detail: "running".into(),
        id: None,
        incarnation: None,
        owner: None,
    };
    t.check("verdict", &verdict, &verdict);
    let report = latch_client::GcReport::new("a", "exited", latch_client::GcAction::Removed);
    t.check("gc report", &report, &report);
    let dir = LegacyDirJson {
        dir: "/d".into(),
        sessions: vec![],
    };
    t.check("legacy dir", &dir, &dir);
    let err = ErrorJson { error: error(None) };
    t.check("error", &err, &err);
    t.check("error body", &error(Some(vec!["a".into()])), &error(None));
    let down = HostDownJson {
        host: "h".into(),
        status: "unreachable",
        error: "e".into(),
    };
    t.check("host down", &down, &down);
}

/// Recordings, `up`, `stats` and `resurrect`.
fn fleet_shapes(t: &mut Table) {
    let cast = crate::commands::cast::CastJson {
        file: "/c".into(),
        bytes: 1,
        start_cursor: 0,
        dropped_bytes: 0,
        started_at: 2,
        max_bytes: None,
    };
    t.check("cast", &cast, &cast);
    let casts = crate::commands::cast::CastsJson {
        id: "a".into(),
        incarnation: "v1.x".into(),
        casts: vec![cast],
    };
    t.check("casts", &casts, &casts);
    let up = |full: bool| crate::commands::up::UpReport {
        id: "a".into(),
        action: "drift",
        incarnation: full.then(|| "v1.x".into()),
        detail: full.then(|| "d".into()),
    };
    t.check("up report", &up(true), &up(false));
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
    t.check("stats", &stats(true), &stats(false));
    let du = crate::commands::stats::DaemonUsageJson {
        pid: 1,
        rss_bytes: 2,
        pss_bytes: Some(3),
    };
    t.check("daemon usage", &du, &du);
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
    t.check("resurrected", &res(true), &res(false));
}

/// `run`, `commands`, a delivered `send` and the screen.
fn turn_shapes(t: &mut Table) {
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
    t.check("run", &run, &run);
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
    t.check("command", &cmd, &cmd);
    let sent = crate::commands::send::SentJson {
        id: "a".into(),
        incarnation: "v1.x".into(),
        bytes: 1,
        pasted: false,
        output_range: RangeJson { start: 0, end: 0 },
    };
    t.check("sent", &sent, &sent);
    let screen = crate::commands::turns::ScreenJson {
        id: "a".into(),
        incarnation: "v1.x".into(),
        output_cursor: Some(1),
        screen: String::new(),
    };
    t.check("screen", &screen, &screen);
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
