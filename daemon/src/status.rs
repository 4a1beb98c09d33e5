//! The legacy STATUS object (SPEC.md §7). The strict STATUS is the typed
//! `latch_wire::StatusReply`; both are built from the daemon's memory, never by
//! re-reading the registry by id (SPEC.md §11 I2).
//!
//! Legacy STATUS reply, one JSON object: the shape pty 0.12.0's daemon sends
//! (`StatsResult` in its client), every field it reads present and typed as it types
//! it, then latch's own fields:
//!
//! ```text
//! {
//!   "name": "build",                  display name, or the id when there is none
//!   "terminal": {"cols": 80, "rows": 24,
//!                "cursorX": 5, "cursorY": 0,          0-based
//!                "scrollbackUsed": 24,                scrollback + screen lines
//!                "scrollbackCapacity": 10024},        screen + scrollback limit
//!   "process": {"alive": true,
//!               "exitCode": null,     once exited: the code, or 128 + signal
//!               "pid": 1234,          null once exited
//!               "resources": {"rssKb": 3100, "cpuPercent": 0.1} | null},
//!   "daemon": {"pid": 1233, "resources": {"rssKb": …, "cpuPercent": …} | null},
//!   "clients": {"total": 2, "attached": 1, "readOnly": 1,
//!               "connections": [
//!                 {"role": "writable", "rows": 24, "cols": 80,
//!                  "lastRequestSequence": 7, "constrains": {"rows": true, "cols": true}},
//!                 {"role": "readonly", "constrains": {"rows": false, "cols": false}}]},
//!   "modes": {"sgrMouse": false, "cursorHidden": false,
//!             "kittyKeyboard": false, "kittyKeyboardFlags": []},
//!   "uptimeSeconds": 12,              whole seconds since this daemon created it
//!   "createdAt": "2024-05-01T12:00:00.000Z",   ISO-8601 UTC with milliseconds
//!   "id": "s1",                       latch's own fields from here
//!   "incarnation": "v1.<32 hex>.<32 hex>",
//!   "createdAtMs": 1714564800000,
//!   "legacyPolicy": "observe",        off | observe | full
//!   "draining": false,
//!   "owner": "A"                      the creation's owner, or null
//! }
//! ```
//!
//! `resources` is read from `/proc` (`VmRSS`, and CPU time over the process's
//! lifetime, as `ps -o pcpu` reports it), null when it cannot be read.
//! `lastRequestSequence` is the connection's number, which grows with every
//! connection the daemon accepts.

use latch_screen::LegacyModes;
use latch_wire::StatusReply;
use serde_json::{json, Value};

use crate::logging::iso8601_ms;
use latch_wire::legacy::legacy_exit_code;

/// One attached connection, for `clients.connections`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LegacyConn {
    /// Read-write.
    pub writer: bool,
    /// The size it announced.
    pub size: Option<(u16, u16)>,
    /// Its connection number.
    pub seq: u64,
}

/// What the legacy STATUS carries beyond the strict STATUS.
#[derive(Debug, Clone)]
pub(crate) struct LegacyFacts {
    pub name: String,
    pub uptime_seconds: u64,
    /// (used, capacity) lines.
    pub lines: (usize, usize),
    pub modes: LegacyModes,
    pub connections: Vec<LegacyConn>,
}

/// `{rssKb, cpuPercent}` of a process from `/proc`, or null.
pub(crate) fn resources(pid: u32) -> Value {
    read_resources(pid).map_or(
        Value::Null,
        |(rss, cpu)| json!({ "rssKb": rss, "cpuPercent": cpu }),
    )
}

fn read_resources(pid: u32) -> Option<(u64, f64)> {
    // Both files are small and bounded by the kernel.
    let status = latch_registry::proc::read_proc(&format!("/proc/{pid}/status")).ok()?;
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())?;
    let stat = latch_registry::proc::read_proc(&format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.get(stat.rfind(')')? + 2..)?.split(' ').collect();
    // Fields 14, 15 and 22 of stat (utime, stime, starttime), in USER_HZ (100).
    let ticks = |i: usize| fields.get(i - 3).and_then(|f| f.parse::<f64>().ok());
    let cpu = ticks(14)? + ticks(15)?;
    let uptime: f64 = std::fs::read_to_string("/proc/uptime")
        .ok()?
        .split(' ')
        .next()?
        .parse()
        .ok()?;
    let elapsed = uptime - ticks(22)? / 100.0;
    let pcpu = if elapsed > 0.0 {
        (cpu / 100.0 / elapsed * 1000.0).round() / 10.0
    } else {
        0.0
    };
    Some((rss, pcpu))
}

/// The legacy STATUS object for `reply` (see the module docs for the shape).
pub(crate) fn legacy_json(reply: &StatusReply, facts: &LegacyFacts) -> Value {
    let alive = reply.exit.is_none();
    let writers = facts.connections.iter().filter(|c| c.writer).count();
    let connections: Vec<Value> = facts
        .connections
        .iter()
        .map(|c| {
            if c.writer {
                let (rows, cols) = c.size.unwrap_or((0, 0));
                json!({
                    "role": "writable",
                    "rows": rows,
                    "cols": cols,
                    "lastRequestSequence": c.seq,
                    "constrains": { "rows": rows == reply.rows, "cols": cols == reply.cols },
                })
            } else {
                json!({ "role": "readonly", "constrains": { "rows": false, "cols": false } })
            }
        })
        .collect();
    json!({
        "name": facts.name,
        "terminal": {
            "cols": reply.cols,
            "rows": reply.rows,
            "cursorX": reply.cursor_col,
            "cursorY": reply.cursor_row,
            "scrollbackUsed": facts.lines.0,
            "scrollbackCapacity": facts.lines.1,
        },
        "process": {
            "alive": alive,
            "exitCode": reply.exit.map(legacy_exit_code),
            "pid": if alive { Value::from(reply.child_pid) } else { Value::Null },
            "resources": if alive { resources(reply.child_pid) } else { Value::Null },
        },
        "daemon": { "pid": reply.daemon_pid, "resources": resources(reply.daemon_pid) },
        "clients": {
            "total": facts.connections.len(),
            "attached": writers,
            "readOnly": facts.connections.len() - writers,
            "connections": connections,
        },
        "modes": {
            "sgrMouse": facts.modes.sgr_mouse,
            "cursorHidden": facts.modes.cursor_hidden,
            "kittyKeyboard": !facts.modes.kitty_keyboard_flags.is_empty(),
            "kittyKeyboardFlags": facts.modes.kitty_keyboard_flags,
        },
        "uptimeSeconds": facts.uptime_seconds,
        "createdAt": iso8601_ms(reply.created_at_ms),
        "id": reply.id.as_str(),
        "incarnation": reply.incarnation.to_string(),
        "createdAtMs": reply.created_at_ms,
        "legacyPolicy": reply.legacy_policy.as_str(),
        "draining": reply.draining,
        "owner": reply.owner.as_ref().map(latch_wire::Owner::as_str),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use latch_wire::{ExitStatus, Incarnation, LegacyPolicy, Owner, SessionId};

    fn reply() -> StatusReply {
        StatusReply {
            id: SessionId::new("s1").unwrap(),
            incarnation: Incarnation::from_parts([1; 16], [2; 16]),
            daemon_pid: 10,
            child_pid: 11,
            rows: 24,
            cols: 80,
            cursor_row: 3,
            cursor_col: 7,
            writers: 1,
            readers: 2,
            created_at_ms: 1_700_000_000_123,
            exit: None,
            draining: false,
            legacy_policy: LegacyPolicy::Observe,
            owner: Some(Owner::new("A").unwrap()),
        }
    }

    fn facts() -> LegacyFacts {
        LegacyFacts {
            name: "build".into(),
            uptime_seconds: 42,
            lines: (30, 10_024),
            modes: LegacyModes {
                sgr_mouse: true,
                cursor_hidden: false,
                kitty_keyboard_flags: vec![1],
            },
            connections: vec![
                LegacyConn {
                    writer: true,
                    size: Some((24, 100)),
                    seq: 7,
                },
                LegacyConn {
                    writer: false,
                    size: None,
                    seq: 8,
                },
            ],
        }
    }

    #[test]
    fn legacy_status_shape_is_pinned() {
        let mut v = legacy_json(&reply(), &facts());
        // Read from /proc: this test's own pids are not the reply's.
        v["process"]["resources"] = Value::Null;
        v["daemon"]["resources"] = Value::Null;
        assert_eq!(
            v,
            json!({
                "name": "build",
                "terminal": {"cols": 80, "rows": 24, "cursorX": 7, "cursorY": 3,
                             "scrollbackUsed": 30, "scrollbackCapacity": 10_024},
                "process": {"alive": true, "exitCode": null, "pid": 11, "resources": null},
                "daemon": {"pid": 10, "resources": null},
                "clients": {"total": 2, "attached": 1, "readOnly": 1, "connections": [
                    {"role": "writable", "rows": 24, "cols": 100, "lastRequestSequence": 7,
                     "constrains": {"rows": true, "cols": false}},
                    {"role": "readonly", "constrains": {"rows": false, "cols": false}},
                ]},
                "modes": {"sgrMouse": true, "cursorHidden": false,
                          "kittyKeyboard": true, "kittyKeyboardFlags": [1]},
                "uptimeSeconds": 42,
                "createdAt": "2023-11-14T22:13:20.123Z",
                "id": "s1",
                "incarnation": Incarnation::from_parts([1; 16], [2; 16]).to_string(),
                "createdAtMs": 1_700_000_000_123u64,
                "legacyPolicy": "observe",
                "draining": false,
                "owner": "A",
            })
        );
    }

    #[test]
    fn resources_of_a_live_process() {
        let r = resources(std::process::id());
        assert!(r["rssKb"].as_u64().is_some_and(|k| k > 0), "{r}");
        assert!(r["cpuPercent"].as_f64().is_some(), "{r}");
        assert_eq!(resources(u32::MAX), Value::Null);
    }

    #[test]
    fn legacy_status_after_exit() {
        let mut r = reply();
        r.exit = Some(ExitStatus {
            code: None,
            signal: Some(9),
        });
        let v = legacy_json(&r, &facts());
        assert_eq!(v["process"]["alive"], json!(false));
        assert_eq!(v["process"]["exitCode"], json!(137));
        assert_eq!(v["process"]["pid"], Value::Null);
        r.exit = Some(ExitStatus {
            code: Some(3),
            signal: None,
        });
        assert_eq!(legacy_json(&r, &facts())["process"]["exitCode"], json!(3));
    }
}
