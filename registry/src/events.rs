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
use std::path::{Path, PathBuf};

use std::collections::BTreeMap;

use latch_wire::{Incarnation, Owner, SessionId};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::error::RegistryError;
use crate::file::{open_append, open_regular, FileError, FileKind};
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

/// Event types (the `type` field), as [`Event::type_name`] reports them.
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
    /// The daemon started the program again, as a new incarnation (SPEC §9.16).
    pub const SESSION_RESPAWN: &str = "session_respawn";
    /// The restarts ran out inside their window (SPEC §9.16).
    pub const SESSION_FLAPPING: &str = "session_flapping";
    /// A recording began (`file`, `startCursor`; SPEC §4.8).
    pub const CAST_START: &str = "cast_start";
    /// A recording ended (`file`, `reason`, `bytes`, `droppedBytes`).
    pub const CAST_STOP: &str = "cast_stop";
    /// Every type a build of this version writes, in SPEC.md §9.9's order.
    pub const ALL: [&str; 13] = [
        SESSION_START,
        SESSION_EXIT,
        METADATA_CHANGE,
        KILL_REQUESTED,
        REMOVED,
        BELL,
        TITLE_CHANGE,
        NOTIFICATION,
        CURSOR_VISIBLE,
        SESSION_RESPAWN,
        SESSION_FLAPPING,
        CAST_START,
        CAST_STOP,
    ];
}

/// One change of a `metadata_change` event: the value before and after (`null`
/// when absent).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Change {
    /// Before.
    pub old: Value,
    /// After.
    pub new: Value,
}

/// What happened, with the fields of its type (SPEC.md §9.9); the serde tag is
/// the event's `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    /// The daemon created the session (after writing its record).
    #[serde(rename_all = "camelCase")]
    SessionStart {
        /// Program and arguments.
        command: Vec<String>,
        /// The daemon's pid.
        daemon_pid: u32,
        /// The program's pid.
        child_pid: u32,
        /// The creation's owner (SPEC.md §2.4).
        owner: Option<Owner>,
    },
    /// The program ended; written after the exit was recorded.
    SessionExit {
        /// Exit code.
        code: Option<i32>,
        /// Signal.
        signal: Option<i32>,
    },
    /// Metadata changed: `displayName`, `tags.K` or `command`.
    MetadataChange {
        /// Key -> {old, new}.
        changes: BTreeMap<String, Change>,
    },
    /// A kill was requested (after checking the incarnation under the lock).
    KillRequested {
        /// The signal.
        signal: i32,
    },
    /// The session's files are about to go.
    Removed,
    /// The program rang the bell (rate-limited, SPEC.md §9.9).
    Bell {
        /// How many bells were dropped by the rate limit before this one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dropped: Option<u64>,
        /// The output cursor after the output in which it was found (it lies at
        /// or before it, SPEC.md §9.9), of this event's incarnation.
        #[serde(
            default,
            rename = "outputCursor",
            skip_serializing_if = "Option::is_none"
        )]
        output_cursor: Option<u64>,
    },
    /// The program set the window title (a reset is `""`).
    TitleChange {
        /// The title.
        title: String,
        /// How many changes were dropped by the rate limit before this one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dropped: Option<u64>,
        /// The output cursor after the output in which it was found (it lies at
        /// or before it, SPEC.md §9.9), of this event's incarnation.
        #[serde(
            default,
            rename = "outputCursor",
            skip_serializing_if = "Option::is_none"
        )]
        output_cursor: Option<u64>,
    },
    /// The program sent a desktop notification.
    Notification {
        /// `osc9`, `osc777` or `osc99`.
        source: String,
        /// The title, if any.
        title: Option<String>,
        /// The body (at most 1024 bytes).
        body: String,
        /// How many notifications were dropped by the rate limit before this one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dropped: Option<u64>,
        /// The output cursor after the output in which it was found (it lies at
        /// or before it, SPEC.md §9.9), of this event's incarnation.
        #[serde(
            default,
            rename = "outputCursor",
            skip_serializing_if = "Option::is_none"
        )]
        output_cursor: Option<u64>,
    },
    /// The program showed or hid the cursor.
    CursorVisible {
        /// Shown.
        visible: bool,
        /// How many changes were dropped by the rate limit before this one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dropped: Option<u64>,
        /// The output cursor after the output in which it was found (it lies at
        /// or before it, SPEC.md §9.9), of this event's incarnation.
        #[serde(
            default,
            rename = "outputCursor",
            skip_serializing_if = "Option::is_none"
        )]
        output_cursor: Option<u64>,
    },
    /// The daemon started the program again as this incarnation (SPEC §9.16).
    #[serde(rename_all = "camelCase")]
    SessionRespawn {
        /// The creation this one replaced.
        previous_incarnation: Incarnation,
        /// Program and arguments (the record's, which `exec` may have changed).
        command: Vec<String>,
        /// The program's pid.
        child_pid: u32,
        /// Restarts inside the window, this one included.
        restarts: u32,
    },
    /// The restarts ran out: the session stays exited (SPEC §9.16).
    #[serde(rename_all = "camelCase")]
    SessionFlapping {
        /// Restarts made inside the window.
        restarts: u32,
        /// The window, in ms.
        window_ms: u64,
    },
    /// A recording began (SPEC.md §4.8).
    #[serde(rename_all = "camelCase")]
    CastStart {
        /// The file, an absolute path.
        file: String,
        /// The output cursor it begins at.
        start_cursor: u64,
        /// Its `--max-bytes`, if any.
        max_bytes: Option<u64>,
    },
    /// A recording ended (SPEC.md §4.8).
    #[serde(rename_all = "camelCase")]
    CastStop {
        /// The file, an absolute path.
        file: String,
        /// `stopped`, `max-bytes`, `exit` or `failed`.
        reason: String,
        /// Bytes its writer had written when it ended (the final marker may follow).
        bytes: u64,
        /// Output bytes it lost behind the ring.
        dropped_bytes: u64,
    },
}

/// One event of one creation: `{"ts", "type", "id", "incarnation", ...}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// When, ms since the epoch.
    pub ts: u64,
    /// The session id.
    pub id: SessionId,
    /// The creation.
    pub incarnation: Incarnation,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

impl Event {
    /// An event of `kind` for `{id, inc}`, stamped now.
    pub fn new(id: &SessionId, inc: &Incarnation, kind: EventKind) -> Self {
        Self {
            ts: now_ms(),
            id: id.clone(),
            incarnation: *inc,
            kind,
        }
    }

    /// The `type` field.
    pub fn type_name(&self) -> &'static str {
        self.kind.type_name()
    }
}

impl EventKind {
    /// The `type` field.
    pub fn type_name(&self) -> &'static str {
        match self {
            EventKind::SessionStart { .. } => kind::SESSION_START,
            EventKind::SessionExit { .. } => kind::SESSION_EXIT,
            EventKind::MetadataChange { .. } => kind::METADATA_CHANGE,
            EventKind::KillRequested { .. } => kind::KILL_REQUESTED,
            EventKind::Removed => kind::REMOVED,
            EventKind::Bell { .. } => kind::BELL,
            EventKind::TitleChange { .. } => kind::TITLE_CHANGE,
            EventKind::Notification { .. } => kind::NOTIFICATION,
            EventKind::CursorVisible { .. } => kind::CURSOR_VISIBLE,
            EventKind::SessionRespawn { .. } => kind::SESSION_RESPAWN,
            EventKind::SessionFlapping { .. } => kind::SESSION_FLAPPING,
            EventKind::CastStart { .. } => kind::CAST_START,
            EventKind::CastStop { .. } => kind::CAST_STOP,
        }
    }
}

/// The type of the event standing for a line that cannot be read.
pub const UNREADABLE: &str = "unreadable";

/// One line of an events file as read: a typed event; a JSON object this build
/// does not know (another version's type, say), kept whole; or a line that is not
/// a JSON object at all.
#[derive(Debug, Clone, PartialEq)]
pub enum ReadEvent {
    /// A typed event.
    Known(Event),
    /// A JSON object that is not an event of this build's types.
    Other(Map<String, Value>),
    /// Not a JSON object: `{"type": "unreadable", "id", "line"}` with the line's
    /// first 256 bytes, lossily decoded.
    Unreadable {
        /// The events file's id.
        id: SessionId,
        /// The excerpt.
        line: String,
    },
}

impl ReadEvent {
    /// The `type` field (`unreadable` for an unreadable line; `?` when missing).
    pub fn type_name(&self) -> &str {
        match self {
            Self::Known(e) => e.type_name(),
            Self::Other(o) => o.get("type").and_then(Value::as_str).unwrap_or("?"),
            Self::Unreadable { .. } => UNREADABLE,
        }
    }

    /// The `ts` field, if any.
    pub fn ts(&self) -> Option<u64> {
        match self {
            Self::Known(e) => Some(e.ts),
            Self::Other(o) => o.get("ts").and_then(Value::as_u64),
            Self::Unreadable { .. } => None,
        }
    }

    /// The `incarnation` field's text, if any.
    pub fn incarnation(&self) -> Option<String> {
        match self {
            Self::Known(e) => Some(e.incarnation.to_string()),
            Self::Other(o) => o
                .get("incarnation")
                .and_then(Value::as_str)
                .map(str::to_owned),
            Self::Unreadable { .. } => None,
        }
    }

    /// The event as a JSON object (what `latch events --json` prints).
    pub fn to_value(&self) -> Value {
        match self {
            Self::Known(e) => serde_json::to_value(e).unwrap_or(Value::Null),
            Self::Other(o) => Value::Object(o.clone()),
            Self::Unreadable { id, line } => json!({
                "type": UNREADABLE,
                "id": id.as_str(),
                "line": line,
            }),
        }
    }
}

/// Parses one line of `id`'s events file (see [`ReadEvent`]).
pub fn parse_line(id: &SessionId, line: &[u8]) -> ReadEvent {
    match serde_json::from_slice::<Value>(line) {
        Ok(Value::Object(o)) => match serde_json::from_value::<Event>(Value::Object(o.clone())) {
            Ok(e) => ReadEvent::Known(e),
            Err(_) => ReadEvent::Other(o),
        },
        _ => {
            let cut = line.get(..UNREADABLE_EXCERPT).unwrap_or(line);
            ReadEvent::Unreadable {
                id: id.clone(),
                line: String::from_utf8_lossy(cut).into_owned(),
            }
        }
    }
}

/// The whole lines among the last `cap` bytes of `path` (fewer when the file is
/// shorter), oldest first, without their newlines; a line cut by the cap is left
/// out. `Ok(None)`: no such file.
/// The file is opened through [`crate::file::open_regular`]: a symlink, FIFO or
/// other non-regular file is an error naming it, never followed or waited on.
pub fn read_tail_lines(path: &Path, cap: u64) -> Result<Option<Vec<Vec<u8>>>, FileError> {
    let Some(f) = open_regular(path)? else {
        return Ok(None);
    };
    read_tail_of(path, f, cap).map(Some)
}

fn read_tail_of(path: &Path, mut f: fs::File, cap: u64) -> Result<Vec<Vec<u8>>, FileError> {
    let io_err = |source| FileError::Io {
        path: path.to_path_buf(),
        source,
    };
    let len = f.metadata().map_err(io_err)?.len();
    // Start one byte early, to tell whether the first byte begins a line.
    let start = len.saturating_sub(cap);
    let from = start.saturating_sub(1);
    f.seek(SeekFrom::Start(from)).map_err(io_err)?;
    let mut buf = Vec::new();
    f.take(len - from).read_to_end(&mut buf).map_err(io_err)?;
    let body = if start == 0 {
        &buf[..]
    } else {
        match buf.iter().position(|&b| b == b'\n') {
            Some(p) => &buf[p + 1..],
            None => &[][..],
        }
    };
    Ok(body
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(<[u8]>::to_vec)
        .collect())
}

/// The longest line an event is written as, its newline included (SPEC §9.9,
/// §9.14): a quarter of [`EVENTS_MAX_BYTES`], so a compaction, which keeps half of
/// it, always keeps history beside the newest line.
pub const EVENT_LINE_MAX_BYTES: usize = (EVENTS_MAX_BYTES / 4) as usize;
/// The longest string field of an event line that is over
/// [`EVENT_LINE_MAX_BYTES`]: longer ones are cut to it, at a character boundary.
pub const EVENT_STRING_MAX_BYTES: usize = 4096;

/// `ev` as one JSON line (with its newline) of at most [`EVENT_LINE_MAX_BYTES`]:
/// as it is when it fits; else with every string longer than
/// [`EVENT_STRING_MAX_BYTES`] cut to it; else only `ts`, `type`, `id` and
/// `incarnation`, with `"truncated": true` (SPEC §9.9).
pub fn event_line(ev: &Event) -> Result<Vec<u8>, RegistryError> {
    let encode = |v: &Value| {
        let mut line = serde_json::to_vec(v).map_err(|source| RegistryError::Encode {
            what: "event",
            source,
        })?;
        line.push(b'\n');
        Ok::<_, RegistryError>(line)
    };
    let mut v = serde_json::to_value(ev).map_err(|source| RegistryError::Encode {
        what: "event",
        source,
    })?;
    let line = encode(&v)?;
    if line.len() <= EVENT_LINE_MAX_BYTES {
        return Ok(line);
    }
    cut_strings(&mut v, EVENT_STRING_MAX_BYTES);
    let line = encode(&v)?;
    if line.len() <= EVENT_LINE_MAX_BYTES {
        return Ok(line);
    }
    let bare = json!({
        "ts": ev.ts,
        "type": ev.type_name(),
        "id": ev.id.as_str(),
        "incarnation": ev.incarnation.to_string(),
        "truncated": true,
    });
    encode(&bare)
}

/// Cuts every string inside `v` longer than `max` bytes to its longest prefix of at
/// most `max` bytes that ends at a character boundary.
fn cut_strings(v: &mut Value, max: usize) {
    match v {
        Value::String(s) if s.len() > max => {
            let mut end = max;
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            s.truncate(end);
        }
        Value::Array(a) => a.iter_mut().for_each(|x| cut_strings(x, max)),
        Value::Object(o) => o.values_mut().for_each(|x| cut_strings(x, max)),
        _ => {}
    }
}

/// An events file that cannot be appended to is an IO failure of the append (the
/// [`FileError`], which names the file, is its source), not a degraded record.
fn append_error(e: FileError) -> RegistryError {
    RegistryError::io("append event", io::Error::other(e))
}

/// An appended event whose data is not yet known to be on disk.
#[derive(Debug)]
#[must_use = "an appended event is durable only once synced"]
pub struct PendingSync {
    file: Option<fs::File>,
    path: PathBuf,
}

impl PendingSync {
    /// fdatasync: the event is on disk once this returns.
    pub fn sync(self) -> Result<(), RegistryError> {
        match self.file {
            Some(f) => f
                .sync_data()
                .map_err(|e| RegistryError::io(format!("sync {}", self.path.display()), e)),
            None => Ok(()),
        }
    }
}

impl Registry {
    /// Appends one event under the session lock, rotating old lines out if needed,
    /// and makes it durable (fdatasync) before returning.
    pub fn append_event(&self, lock: &SessionLock, ev: &Event) -> Result<(), RegistryError> {
        let pending = self.append_event_unsynced(lock, ev)?;
        pending.sync()
    }

    /// [`Registry::append_event`], except that when the events file is not a regular
    /// file (a FIFO, a symlink, a directory: nothing latch made), the event is lost
    /// and `Ok(false)` returned, so the act it records (kill, rm, gc) still happens
    /// (SPEC §9.9). `Ok(true)`: appended and durable.
    pub fn append_event_or_lose(
        &self,
        lock: &SessionLock,
        ev: &Event,
    ) -> Result<bool, RegistryError> {
        let path = self.events_path(lock.id());
        if fs::symlink_metadata(&path).is_ok_and(|m| !m.is_file()) {
            return Ok(false);
        }
        self.append_event(lock, ev).map(|()| true)
    }

    /// Appends one event under the session lock, in order with every other event
    /// of the id, leaving its durability (fdatasync) to the caller's
    /// [`PendingSync::sync`], which may run after the lock is released and off a
    /// latency-critical path (SPEC.md §9.9).
    pub fn append_event_unsynced(
        &self,
        lock: &SessionLock,
        ev: &Event,
    ) -> Result<PendingSync, RegistryError> {
        if &ev.id != lock.id() {
            return Err(RegistryError::io(
                "append event",
                io::Error::other(format!("lock is for {}, event is for {}", lock.id(), ev.id)),
            ));
        }
        self.append_line_unsynced(lock, event_line(ev)?)
    }

    /// Appends one whole line (its newline included, at most
    /// [`EVENT_LINE_MAX_BYTES`]) to the lock's events file, as
    /// [`Registry::append_event_unsynced`] does (SPEC §9.9).
    pub(crate) fn append_line_unsynced(
        &self,
        lock: &SessionLock,
        line: Vec<u8>,
    ) -> Result<PendingSync, RegistryError> {
        let path = self.events_path(lock.id());
        // Opened first, non-blocking and no-follow: a FIFO or symlink planted here
        // is refused at once, never waited on under the lock (SPEC §9.1).
        let mut f = open_append(&path, 0o600).map_err(append_error)?;
        let len = f
            .metadata()
            .map_err(|e| RegistryError::io(format!("stat {}", path.display()), e))?
            .len();
        if len + line.len() as u64 > EVENTS_MAX_BYTES {
            // Keep the newest whole lines that fit in half the limit with the new
            // one (read from the end: a file found far over the limit is never read
            // whole).
            let budget = (EVENTS_MAX_BYTES / 2).saturating_sub(line.len() as u64);
            drop(f);
            let old = read_tail_lines(&path, budget)
                .map_err(append_error)?
                .unwrap_or_default();
            let mut kept = Vec::with_capacity(budget as usize + line.len());
            for l in old {
                kept.extend_from_slice(&l);
                kept.push(b'\n');
            }
            kept.extend_from_slice(&line);
            // Compaction writes a whole new file durably.
            write_atomic(&path, &kept)?;
            return Ok(PendingSync { file: None, path });
        }
        f.write_all(&line)
            .map_err(|e| RegistryError::io(format!("append {}", path.display()), e))?;
        Ok(PendingSync {
            file: Some(f),
            path,
        })
    }

    /// The raw lines of a session's events file, oldest first, from at most its last
    /// [`EVENTS_READ_MAX_BYTES`]; empty when there is no file.
    pub fn read_event_lines(&self, id: &SessionId) -> Result<Vec<Vec<u8>>, RegistryError> {
        let path = self.events_path(id);
        Ok(read_tail_lines(&path, FileKind::Events.max_bytes())?.unwrap_or_default())
    }

    /// Reads a session's events, oldest first ([`Registry::read_event_lines`]). Lines
    /// that do not parse are returned as `unreadable` events ([`parse_line`]) rather
    /// than dropped.
    pub fn read_events(&self, id: &SessionId) -> Result<Vec<ReadEvent>, RegistryError> {
        Ok(self
            .read_event_lines(id)?
            .iter()
            .map(|l| parse_line(id, l))
            .collect())
    }

    /// Every id with an events file (`<id>.events.jsonl`), sorted; the history of
    /// removed sessions included.
    pub fn event_ids(&self) -> Result<Vec<SessionId>, RegistryError> {
        self.ids_with_suffix(".events.jsonl")
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
            let change = |new: Value| Change {
                old: Value::Null,
                new,
            };
            let changes = BTreeMap::from([
                ("n".to_owned(), change(json!(i))),
                ("pad".to_owned(), change(json!(pad))),
            ]);
            let ev = Event::new(&id, &inc, EventKind::MetadataChange { changes });
            reg.append_event(&lock, &ev).unwrap();
        }
        let size = fs::metadata(reg.events_path(&id)).unwrap().len();
        assert!(size <= EVENTS_MAX_BYTES, "{size}");
        let evs = reg.read_events(&id).unwrap();
        let ns: Vec<i64> = evs
            .iter()
            .map(|e| match e {
                ReadEvent::Known(Event {
                    kind: EventKind::MetadataChange { changes },
                    ..
                }) => changes["n"].new.as_i64().unwrap(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(*ns.last().unwrap(), 599, "newest kept");
        assert!(
            ns.windows(2).all(|w| w[1] == w[0] + 1),
            "contiguous and ordered"
        );
        assert!(ns[0] > 0, "oldest rotated out");
    }

    #[test]
    fn a_huge_title_is_cut_and_never_erases_the_history() {
        let tmp = tempfile::tempdir().unwrap();
        let reg = Registry::open(&tmp.path().join("r")).unwrap();
        let id = SessionId::new("s").unwrap();
        let inc = reg.mint(&id).unwrap();
        let lock = reg.lock(&id, Duration::ZERO).unwrap();
        for _ in 0..20 {
            reg.append_event(
                &lock,
                &Event::new(
                    &id,
                    &inc,
                    EventKind::Bell {
                        dropped: None,
                        output_cursor: None,
                    },
                ),
            )
            .unwrap();
        }
        // A 1 MB title, in 2-byte characters, so the cut must find a boundary.
        let title = "é".repeat(512 << 10);
        let ev = Event::new(
            &id,
            &inc,
            EventKind::TitleChange {
                title,
                dropped: None,
                output_cursor: None,
            },
        );
        reg.append_event(&lock, &ev).unwrap();
        let size = fs::metadata(reg.events_path(&id)).unwrap().len();
        assert!(size <= EVENTS_MAX_BYTES, "{size}");
        let evs = reg.read_events(&id).unwrap();
        let types: Vec<&str> = evs.iter().map(ReadEvent::type_name).collect();
        assert_eq!(types.len(), 21, "{types:?}");
        assert!(types[..20].iter().all(|t| *t == kind::BELL), "{types:?}");
        match &evs[20] {
            ReadEvent::Known(Event {
                kind: EventKind::TitleChange { title, .. },
                ..
            }) => assert_eq!(title.len(), EVENT_STRING_MAX_BYTES),
            other => panic!("{other:?}"),
        }
        // Too many fields to cut down: the bare event, marked.
        let many = (0..20_000)
            .map(|i| {
                (
                    format!("tags.k{i}"),
                    Change {
                        old: Value::Null,
                        new: json!("v"),
                    },
                )
            })
            .collect();
        let ev = Event::new(&id, &inc, EventKind::MetadataChange { changes: many });
        let line = event_line(&ev).unwrap();
        assert!(line.len() <= EVENT_LINE_MAX_BYTES);
        let v: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(v["truncated"], true);
        assert_eq!(v["type"], kind::METADATA_CHANGE);
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
        let types: Vec<&str> = evs.iter().map(ReadEvent::type_name).collect();
        assert_eq!(types, [UNREADABLE, "last"], "{evs:?}");
        assert_eq!(evs[0].to_value()["id"], "s");
        let lock = reg.lock(&id, Duration::ZERO).unwrap();
        reg.append_event(&lock, &Event::new(&id, &inc, EventKind::Removed))
            .unwrap();
        assert!(fs::metadata(&path).unwrap().len() <= EVENTS_MAX_BYTES);
        let types: Vec<String> = reg
            .read_events(&id)
            .unwrap()
            .iter()
            .map(|e| e.type_name().to_owned())
            .collect();
        assert_eq!(types, [UNREADABLE, "last", kind::REMOVED]);
    }
}
