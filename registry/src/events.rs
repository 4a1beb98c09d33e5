//! Per-session events: `<root>/<id>.events.jsonl` (SPEC.md §9.9).
//!
//! One JSON object per line, appended under the session lock, so events of one
//! session are totally ordered and never interleaved. The file is bounded: when an
//! append would take it past [`EVENTS_MAX_BYTES`], the oldest lines are dropped
//! (the newest half is kept) by an atomic rewrite.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;

use latch_wire::{Incarnation, SessionId};
use serde_json::{json, Map, Value};

use crate::error::RegistryError;
use crate::lock::SessionLock;
use crate::record::write_atomic;
use crate::{now_ms, Registry};

/// Largest events file before older lines are rotated out.
pub const EVENTS_MAX_BYTES: u64 = 256 * 1024;

/// Event types (the `type` field).
pub mod kind {
    /// The session was created.
    pub const SESSION_START: &str = "session_start";
    /// The program ended (`code`, `signal`).
    pub const SESSION_EXIT: &str = "session_exit";
    /// Display name or tags changed (`changes`: key -> {old, new}).
    pub const METADATA_CHANGE: &str = "metadata_change";
    /// A kill was requested (`signal`).
    pub const KILL_REQUESTED: &str = "kill_requested";
    /// The session's files were removed.
    pub const REMOVED: &str = "removed";
}

/// Builds an event object: `{"ts", "type", "id", "incarnation", ...fields}`.
pub fn event(kind: &str, id: &SessionId, inc: &Incarnation, fields: Map<String, Value>) -> Value {
    let mut obj = Map::new();
    obj.insert("ts".into(), json!(now_ms()));
    obj.insert("type".into(), json!(kind));
    obj.insert("id".into(), json!(id.as_str()));
    obj.insert("incarnation".into(), json!(inc.to_string()));
    obj.extend(fields);
    Value::Object(obj)
}

impl Registry {
    /// Appends one event under the session lock, rotating old lines out if needed.
    pub fn append_event(&self, lock: &SessionLock, ev: &Value) -> Result<(), RegistryError> {
        let path = self.events_path(lock.id());
        let mut line = serde_json::to_vec(ev)
            .map_err(|e| RegistryError::io("encode event", io::Error::other(e)))?;
        line.push(b'\n');
        let len = fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        if len + line.len() as u64 > EVENTS_MAX_BYTES {
            let old = fs::read(&path).unwrap_or_default();
            let keep_from = old.len() / 2;
            let start = old[keep_from..]
                .iter()
                .position(|&b| b == b'\n')
                .map_or(old.len(), |p| keep_from + p + 1);
            let mut kept = old[start..].to_vec();
            kept.extend_from_slice(&line);
            return write_atomic(&path, &kept);
        }
        let mut f = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| RegistryError::io(format!("open {}", path.display()), e))?;
        f.write_all(&line)
            .and_then(|()| f.sync_data())
            .map_err(|e| RegistryError::io(format!("append {}", path.display()), e))
    }

    /// Reads a session's events, oldest first. Lines that do not parse are returned
    /// as `{"type": "unreadable", "line": ...}` rather than dropped.
    pub fn read_events(&self, id: &SessionId) -> Result<Vec<Value>, RegistryError> {
        let path = self.events_path(id);
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(RegistryError::io(format!("read {}", path.display()), e)),
        };
        Ok(text
            .lines()
            .filter(|l| !l.is_empty())
            .map(|l| {
                serde_json::from_str(l).unwrap_or_else(|_| json!({"type": "unreadable", "line": l}))
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn appends_in_order_and_rotates_within_bound() {
        let tmp = tempfile::tempdir().unwrap();
        let reg = Registry::open(&tmp.path().join("r")).unwrap();
        let id = SessionId::new("s").unwrap();
        let inc = reg.mint(&id).unwrap();
        let lock = reg.lock(&id, Duration::ZERO).unwrap();
        let pad = "x".repeat(1000);
        for i in 0..600 {
            let mut f = Map::new();
            f.insert("n".into(), json!(i));
            f.insert("pad".into(), json!(pad));
            reg.append_event(&lock, &event(kind::METADATA_CHANGE, &id, &inc, f))
                .unwrap();
        }
        let size = fs::metadata(reg.events_path(&id)).unwrap().len();
        assert!(size <= EVENTS_MAX_BYTES, "{size}");
        let evs = reg.read_events(&id).unwrap();
        let ns: Vec<i64> = evs.iter().map(|e| e["n"].as_i64().unwrap()).collect();
        assert_eq!(*ns.last().unwrap(), 599, "newest kept");
        assert!(
            ns.windows(2).all(|w| w[1] == w[0] + 1),
            "contiguous and ordered"
        );
        assert!(ns[0] > 0, "oldest rotated out");
    }
}
