//! Per-session events: `<root>/<id>.events.jsonl` (SPEC.md §9.9).
//!
//! One JSON object per line, appended under the session lock, so events of one
//! session are totally ordered and never interleaved. The file is bounded: when an
//! append would take it past [`EVENTS_MAX_BYTES`] (or finds it past it), the file is
//! rewritten atomically with only its newest whole lines that fit in half of it,
//! then the new line. No read takes more than [`EVENTS_READ_MAX_BYTES`] from the end
//! of the file, however large it has grown, and a line that is not a JSON object
//! (invalid UTF-8 included) is an `unreadable` event, never an error.

use std::fs;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use latch_wire::{Incarnation, SessionId};
use serde_json::{json, Map, Value};

use crate::error::RegistryError;
use crate::lock::SessionLock;
use crate::record::write_atomic;
use crate::{now_ms, Registry};

/// Largest events file before older lines are rotated out.
pub const EVENTS_MAX_BYTES: u64 = 256 * 1024;
/// The most any reader takes from an events file: the limit plus slack for the
/// line that crossed it. Older lines of a file grown past it are not read.
pub const EVENTS_READ_MAX_BYTES: u64 = EVENTS_MAX_BYTES + 64 * 1024;
/// The longest excerpt of an unreadable line kept in its `unreadable` event.
const UNREADABLE_EXCERPT: usize = 256;

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
    /// The program rang the bell (SPEC §9.9; rate-limited).
    pub const BELL: &str = "bell";
    /// The program set the window title (`title`).
    pub const TITLE_CHANGE: &str = "title_change";
    /// The program sent a desktop notification (`source`, `title`, `body`).
    pub const NOTIFICATION: &str = "notification";
    /// The program showed or hid the cursor (`visible`).
    pub const CURSOR_VISIBLE: &str = "cursor_visible";
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

/// The type of the event standing for a line that cannot be read.
pub const UNREADABLE: &str = "unreadable";

/// Parses one line of `id`'s events file. A line that is not one JSON object
/// becomes `{"type": "unreadable", "id": id, "line": <excerpt, lossily decoded>}`.
pub fn parse_line(id: &SessionId, line: &[u8]) -> Value {
    match serde_json::from_slice::<Value>(line) {
        Ok(v @ Value::Object(_)) => v,
        _ => {
            let cut = line.get(..UNREADABLE_EXCERPT).unwrap_or(line);
            json!({
                "type": UNREADABLE,
                "id": id.as_str(),
                "line": String::from_utf8_lossy(cut),
            })
        }
    }
}

/// The whole lines among the last `cap` bytes of `path` (fewer when the file is
/// shorter), oldest first, without their newlines; a line cut by the cap is left
/// out. `Ok(None)`: no such file.
pub fn read_tail_lines(path: &Path, cap: u64) -> io::Result<Option<Vec<Vec<u8>>>> {
    let mut f = match fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let len = f.metadata()?.len();
    // Start one byte early, to tell whether the first byte begins a line.
    let start = len.saturating_sub(cap);
    let from = start.saturating_sub(1);
    f.seek(SeekFrom::Start(from))?;
    let mut buf = Vec::new();
    f.take(len - from).read_to_end(&mut buf)?;
    let body = if start == 0 {
        &buf[..]
    } else {
        match buf.iter().position(|&b| b == b'\n') {
            Some(p) => &buf[p + 1..],
            None => &[][..],
        }
    };
    Ok(Some(
        body.split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(<[u8]>::to_vec)
            .collect(),
    ))
}

impl Registry {
    /// Appends one event under the session lock, rotating old lines out if needed.
    pub fn append_event(&self, lock: &SessionLock, ev: &Value) -> Result<(), RegistryError> {
        let path = self.events_path(lock.id());
        let mut line = serde_json::to_vec(ev).map_err(|source| RegistryError::Encode {
            what: "event",
            source,
        })?;
        line.push(b'\n');
        let len = fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        if len + line.len() as u64 > EVENTS_MAX_BYTES {
            // Keep the newest whole lines that fit in half the limit with the new
            // one (read from the end: a file found far over the limit is never read
            // whole). A line alone over the limit is kept alone.
            let budget = (EVENTS_MAX_BYTES / 2).saturating_sub(line.len() as u64);
            let old = read_tail_lines(&path, budget)
                .map_err(|e| RegistryError::io(format!("read {}", path.display()), e))?
                .unwrap_or_default();
            let mut kept = Vec::with_capacity(budget as usize + line.len());
            for l in old {
                kept.extend_from_slice(&l);
                kept.push(b'\n');
            }
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

    /// The raw lines of a session's events file, oldest first, from at most its last
    /// [`EVENTS_READ_MAX_BYTES`]; empty when there is no file.
    pub fn read_event_lines(&self, id: &SessionId) -> Result<Vec<Vec<u8>>, RegistryError> {
        let path = self.events_path(id);
        read_tail_lines(&path, EVENTS_READ_MAX_BYTES)
            .map(Option::unwrap_or_default)
            .map_err(|e| RegistryError::io(format!("read {}", path.display()), e))
    }

    /// Reads a session's events, oldest first ([`Registry::read_event_lines`]). Lines
    /// that do not parse are returned as `unreadable` events ([`parse_line`]) rather
    /// than dropped.
    pub fn read_events(&self, id: &SessionId) -> Result<Vec<Value>, RegistryError> {
        Ok(self
            .read_event_lines(id)?
            .iter()
            .map(|l| parse_line(id, l))
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

    #[test]
    fn a_file_far_over_the_limit_is_read_from_its_end_and_trimmed_on_append() {
        let tmp = tempfile::tempdir().unwrap();
        let reg = Registry::open(&tmp.path().join("r")).unwrap();
        let id = SessionId::new("s").unwrap();
        let inc = reg.mint(&id).unwrap();
        let path = reg.events_path(&id);
        let mut f = fs::File::create(&path).unwrap();
        f.write_all(b"{\"type\":\"first\"}\n").unwrap();
        // A hole: 4 MiB of NULs, then a bad line and a good one.
        f.set_len(4 << 20).unwrap();
        f.seek(SeekFrom::End(0)).unwrap();
        f.write_all(b"\n\xff\xfe{\n{\"type\":\"last\"}\n").unwrap();
        drop(f);
        let evs = reg.read_events(&id).unwrap();
        let types: Vec<&str> = evs.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(types, [UNREADABLE, "last"], "{evs:?}");
        assert_eq!(evs[0]["id"], "s");
        let lock = reg.lock(&id, Duration::ZERO).unwrap();
        reg.append_event(&lock, &event(kind::REMOVED, &id, &inc, Map::new()))
            .unwrap();
        assert!(fs::metadata(&path).unwrap().len() <= EVENTS_MAX_BYTES);
        let types: Vec<String> = reg
            .read_events(&id)
            .unwrap()
            .iter()
            .map(|e| e["type"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(types, [UNREADABLE, "last", kind::REMOVED]);
    }
}
