//! The legacy STATUS object (SPEC.md §7). The strict STATUS is the typed
//! `latch_wire::StatusReply`; both are built from the daemon's memory, never by
//! re-reading the registry by id (SPEC.md §11 I2).
//!
//! Legacy STATUS reply, one JSON object:
//!
//! ```text
//! {
//!   "name": "build",                  display name, or the id when there is none
//!   "id": "s1",
//!   "incarnation": "v1.<32 hex>.<32 hex>",
//!   "rows": 24, "cols": 80,           the PTY size
//!   "cursor": {"row": 0, "col": 5},   0-based, top-left is {0, 0}
//!   "process": {
//!     "alive": true,                  false once the program has exited
//!     "exitCode": null,               the exit code; 128 + signal if killed by one
//!     "pid": 1234                     the program's pid
//!   },
//!   "daemonPid": 1233,
//!   "clients": {"writers": 1, "readers": 0},   attached read-write / read-only
//!   "uptimeSeconds": 12,              whole seconds since this daemon created it
//!   "createdAt": "2024-05-01T12:00:00.000Z",   ISO-8601 UTC with milliseconds
//!   "createdAtMs": 1714564800000,     the same instant, ms since the Unix epoch
//!   "draining": false,
//!   "legacyPolicy": "observe",        off | observe | full
//!   "owner": "A"                      the creation's owner, or null
//! }
//! ```

use latch_wire::StatusReply;
use serde_json::{json, Value};

use crate::fanout::legacy_exit_code;
use crate::logging::iso8601_ms;

/// The legacy STATUS object for `reply` (see the module docs for the shape).
pub(crate) fn legacy_json(reply: &StatusReply, name: &str, uptime_seconds: u64) -> Value {
    json!({
        "name": name,
        "id": reply.id.as_str(),
        "incarnation": reply.incarnation.to_string(),
        "rows": reply.rows,
        "cols": reply.cols,
        "cursor": { "row": reply.cursor_row, "col": reply.cursor_col },
        "process": {
            "alive": reply.exit.is_none(),
            "exitCode": reply.exit.map(legacy_exit_code),
            "pid": reply.child_pid,
        },
        "daemonPid": reply.daemon_pid,
        "clients": { "writers": reply.writers, "readers": reply.readers },
        "uptimeSeconds": uptime_seconds,
        "createdAt": iso8601_ms(reply.created_at_ms),
        "createdAtMs": reply.created_at_ms,
        "draining": reply.draining,
        "legacyPolicy": reply.legacy_policy.as_str(),
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

    #[test]
    fn legacy_status_shape_is_pinned() {
        let v = legacy_json(&reply(), "build", 42);
        assert_eq!(
            v,
            json!({
                "name": "build",
                "id": "s1",
                "incarnation": Incarnation::from_parts([1; 16], [2; 16]).to_string(),
                "rows": 24,
                "cols": 80,
                "cursor": {"row": 3, "col": 7},
                "process": {"alive": true, "exitCode": null, "pid": 11},
                "daemonPid": 10,
                "clients": {"writers": 1, "readers": 2},
                "uptimeSeconds": 42,
                "createdAt": "2023-11-14T22:13:20.123Z",
                "createdAtMs": 1_700_000_000_123u64,
                "draining": false,
                "legacyPolicy": "observe",
                "owner": "A",
            })
        );
    }

    #[test]
    fn legacy_status_after_exit() {
        let mut r = reply();
        r.exit = Some(ExitStatus {
            code: None,
            signal: Some(9),
        });
        let v = legacy_json(&r, "s1", 0);
        assert_eq!(v["process"]["alive"], json!(false));
        assert_eq!(v["process"]["exitCode"], json!(137));
        r.exit = Some(ExitStatus {
            code: Some(3),
            signal: None,
        });
        assert_eq!(legacy_json(&r, "s1", 0)["process"]["exitCode"], json!(3));
    }
}
