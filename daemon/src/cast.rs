//! Recordings (SPEC §4.8): asciicast v2 files of one creation's output, written by
//! a thread per recording (`cast_writer`) so the daemon's thread never waits for a
//! disk.
//!
//! ```text
//! Session::output ── queue < CAST_QUEUE_BYTES ──> "o" (daemon's time) ──> writer
//!        │        └─ else: lagging, note (cursor, time) ──┐
//! writer drained below half ── wake ──> settle: ring still holds the lag?
//!        yes: the held bytes, at their noted times         │
//!        no:  "m" N bytes lost, "r", a fresh screen, then live again
//! ```

use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use latch_registry::events::EventKind;
use latch_screen::{Mark, MarkKind};
use latch_wire::{CastInfo, CastRequest, ErrorCode, ServerFrame, SessionRef};
use tokio::sync::{oneshot, Notify};

pub(crate) use crate::cast_session::{exit_label, pump};
use crate::cast_writer::{self, Msg, OpenError, Shared, Source, QUEUE_BYTES};
use crate::cursor::OutputLog;

use latch_wire::limits::{CASTS_MAX, CAST_MAX_BYTES_MIN as MAX_BYTES_MIN};
/// Output times noted while a writer lags, at most (then every other one goes).
const LAG_TIMES_MAX: usize = 512;
/// Resizes and marks noted while a writer lags, at most (the rest are lost).
const LAG_EVENTS_MAX: usize = 256;
/// Header strings (TERM, SHELL, the title) are cut to this many bytes.
const HEADER_STRING_MAX: usize = 256;

/// What the header says of the creation.
#[derive(Debug, Clone)]
pub(crate) struct HeaderFacts {
    pub own: SessionRef,
    pub title: String,
    pub term: Option<String>,
    pub shell: Option<String>,
}

/// A writer fell behind: output is noted, not queued, until it drains.
#[derive(Debug, Default)]
struct Lag {
    /// The cursor of the first byte not queued.
    from: u64,
    /// (cursor after a read, its time), in order.
    times: Vec<(u64, f64)>,
    /// Resizes and marks at their cursors.
    events: Vec<(u64, Msg)>,
    /// A resize was among the events (a fresh screen then says the size).
    resized: bool,
}

/// One active recording.
#[derive(Debug)]
struct Cast {
    file: String,
    tx: mpsc::Sender<Msg>,
    shared: Arc<Shared>,
    t0: Instant,
    start_cursor: u64,
    started_at_ms: u64,
    max_bytes: Option<u64>,
    lag: Option<Lag>,
    dropped: u64,
    done: oneshot::Receiver<()>,
}

impl Cast {
    fn send(&self, msg: Msg) {
        self.shared.queued.fetch_add(msg.weight(), Ordering::SeqCst);
        // The writer is gone only once it ended, which `settle` then reports.
        let _ = self.tx.send(msg);
    }

    fn info(&self) -> CastInfo {
        CastInfo {
            file: self.file.clone(),
            bytes: self.shared.written.load(Ordering::SeqCst),
            start_cursor: self.start_cursor,
            dropped_bytes: self.dropped,
            started_at_ms: self.started_at_ms,
            max_bytes: self.max_bytes,
        }
    }

    fn stop_event(&self, reason: &str) -> EventKind {
        EventKind::CastStop {
            file: self.file.clone(),
            reason: reason.to_owned(),
            bytes: self.shared.written.load(Ordering::SeqCst),
            dropped_bytes: self.dropped,
        }
    }
}

/// A recording whose writer is opening its file.
#[derive(Debug)]
pub(crate) struct Starting {
    cast: Cast,
    opened: Option<oneshot::Receiver<Result<(), OpenError>>>,
    /// Counts it among the recordings until it is added or dropped.
    _slot: std::rc::Rc<()>,
}

impl Starting {
    /// Waits (without blocking the daemon's thread) for the writer's open.
    pub(crate) async fn opened(&mut self) -> Result<(), ServerFrame> {
        let Some(rx) = self.opened.take() else {
            return Ok(());
        };
        let refuse = |code, why: &dyn std::fmt::Display| {
            ServerFrame::error(
                code,
                format!("cannot record into {}: {why}", self.cast.file),
            )
        };
        match rx.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(OpenError::Io(e))) => Err(refuse(ErrorCode::Internal, &e)),
            Ok(Err(e)) => Err(refuse(ErrorCode::InvalidArgument, &e)),
            Err(_) => Err(refuse(ErrorCode::Internal, &"its writer ended")),
        }
    }
}

/// The recordings of one creation.
#[derive(Debug)]
pub(crate) struct Casts {
    list: Vec<Cast>,
    /// Ended writers that may still be writing (waited for at exit, bounded).
    finishing: Vec<oneshot::Receiver<()>>,
    /// Writers wake the daemon through this (queue drained, or ended).
    pub wake: Arc<Notify>,
    facts: HeaderFacts,
    /// One more reference per recording whose file is being opened.
    opening: std::rc::Rc<()>,
}

impl Casts {
    pub(crate) fn new(facts: HeaderFacts) -> Self {
        Self {
            list: Vec::new(),
            finishing: Vec::new(),
            wake: Arc::new(Notify::new()),
            facts,
            opening: std::rc::Rc::new(()),
        }
    }

    /// Checks a CAST_START before anything is opened.
    pub(crate) fn check(&self, req: &CastRequest) -> Result<(), ServerFrame> {
        let invalid = |why: String| Err(ServerFrame::error(ErrorCode::InvalidArgument, why));
        if !req.file.starts_with('/') {
            return invalid(format!("{:?} is not an absolute path", req.file));
        }
        let opening = std::rc::Rc::strong_count(&self.opening) - 1;
        if self.list.len() + opening >= CASTS_MAX {
            return invalid(format!("{CASTS_MAX} recordings are active already"));
        }
        match req.max_bytes {
            Some(m) if m < MAX_BYTES_MIN => invalid(format!(
                "--max-bytes {m} is below the least a recording needs, {MAX_BYTES_MIN}"
            )),
            _ => Ok(()),
        }
    }

    /// Starts a writer for `req`: on `file` (opened already) or opening the path.
    pub(crate) fn spawn(
        &self,
        req: CastRequest,
        file: Option<std::fs::File>,
    ) -> Result<Starting, ServerFrame> {
        let (tx, rx) = mpsc::channel();
        let shared = Arc::new(Shared::default());
        let (done_tx, done) = oneshot::channel();
        let (source, opened) = match file {
            Some(f) => (Source::File(f), None),
            None => {
                let (otx, orx) = oneshot::channel();
                (Source::Path(req.file.clone(), otx), Some(orx))
            }
        };
        let wake = self.wake.clone();
        cast_writer::spawn(source, rx, shared.clone(), wake, req.max_bytes, done_tx).map_err(
            |e| ServerFrame::error(ErrorCode::Internal, format!("cannot start a writer: {e}")),
        )?;
        let cast = Cast {
            file: req.file,
            tx,
            shared,
            t0: Instant::now(),
            start_cursor: 0,
            started_at_ms: 0,
            max_bytes: req.max_bytes,
            lag: None,
            dropped: 0,
            done,
        };
        Ok(Starting {
            cast,
            opened,
            _slot: self.opening.clone(),
        })
    }

    /// Makes an opened recording active at `cursor`: the header, then `screen`
    /// (the attach repaint, for one started mid-session), then live output.
    pub(crate) fn add(
        &mut self,
        starting: Starting,
        size: (u16, u16),
        cursor: u64,
        screen: Option<Bytes>,
    ) -> (CastInfo, EventKind) {
        let mut cast = starting.cast;
        cast.t0 = Instant::now();
        cast.started_at_ms = latch_registry::now_ms();
        cast.start_cursor = cursor;
        cast.send(Msg::Header(self.header(size, cast.started_at_ms)));
        if let Some(s) = screen {
            cast.send(Msg::Output(0.0, s));
        }
        let event = EventKind::CastStart {
            file: cast.file.clone(),
            start_cursor: cursor,
            max_bytes: cast.max_bytes,
        };
        let info = cast.info();
        self.list.push(cast);
        (info, event)
    }

    fn header(&self, (rows, cols): (u16, u16), at_ms: u64) -> String {
        let cut = |s: &str| {
            let mut end = s.len().min(HEADER_STRING_MAX);
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            s[..end].to_owned()
        };
        let mut env = serde_json::Map::new();
        for (k, v) in [("TERM", &self.facts.term), ("SHELL", &self.facts.shell)] {
            if let Some(v) = v {
                env.insert(k.into(), cut(v).into());
            }
        }
        let latch = serde_json::json!({
            "id": self.facts.own.id.as_str(),
            "incarnation": self.facts.own.incarnation.to_string(),
        });
        let title = serde_json::Value::from(cut(&self.facts.title));
        // In asciicast's own order, `version` first (SPEC §4.8).
        format!(
            "{{\"version\": 2, \"width\": {cols}, \"height\": {rows}, \"timestamp\": {}, \
             \"env\": {}, \"title\": {title}, \"latch\": {latch}}}\n",
            at_ms / 1000,
            serde_json::Value::Object(env),
        )
    }

    /// Whether any recording is active.
    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Output the daemon read, `data` starting at cursor `from`, with the shell's
    /// marks in it (SPEC §4.6): queued for every writer with room, else noted.
    pub(crate) fn output(&mut self, data: &[u8], from: u64, marks: &[Mark]) {
        if self.list.is_empty() {
            return;
        }
        let now = Instant::now();
        let bytes = Bytes::copy_from_slice(data);
        let end = from + data.len() as u64;
        for cast in &mut self.list {
            let t = now.duration_since(cast.t0).as_secs_f64();
            if cast.lag.is_none() {
                let queued = cast.shared.queued.load(Ordering::SeqCst);
                if queued + data.len() <= QUEUE_BYTES {
                    send_marked(cast, t, &bytes, from, marks);
                    continue;
                }
                cast.lag = Some(Lag {
                    from,
                    ..Lag::default()
                });
                cast.shared.lagging.store(true, Ordering::SeqCst);
                // Drained meanwhile: nobody would wake us.
                if cast.shared.queued.load(Ordering::SeqCst) < QUEUE_BYTES / 2 {
                    self.wake.notify_one();
                }
            }
            if let Some(lag) = cast.lag.as_mut() {
                note_time(lag, end, t);
                for (at, label) in marks.iter().filter_map(marker) {
                    note_event(lag, at, Msg::Marker(t, label));
                }
            }
        }
    }

    /// The terminal's new size, at output cursor `cursor`.
    pub(crate) fn resize(&mut self, rows: u16, cols: u16, cursor: u64) {
        for cast in &mut self.list {
            let t = cast.t0.elapsed().as_secs_f64();
            match cast.lag.as_mut() {
                None => cast.send(Msg::Resize(t, rows, cols)),
                Some(lag) => {
                    lag.resized = true;
                    note_event(lag, cursor, Msg::Resize(t, rows, cols));
                }
            }
        }
    }

    /// After a writer's wake: ended writers leave (their `cast_stop` events are
    /// returned), lagging ones with room catch up from the ring.
    pub(crate) fn settle(
        &mut self,
        log: &OutputLog,
        screen: &mut dyn FnMut() -> (Bytes, (u16, u16)),
    ) -> Vec<EventKind> {
        let mut events = Vec::new();
        let mut i = 0;
        while let Some(cast) = self.list.get_mut(i) {
            let reason = match cast.shared.ended.load(Ordering::SeqCst) {
                cast_writer::ENDED_NO => None,
                cast_writer::ENDED_MAX => Some("max-bytes"),
                _ => Some("failed"),
            };
            if let Some(reason) = reason {
                let cast = self.list.remove(i);
                log!("recording into {} ended: {reason}", cast.file);
                events.push(cast.stop_event(reason));
                continue;
            }
            let room = cast.shared.queued.load(Ordering::SeqCst) < QUEUE_BYTES / 2;
            if room {
                if let Some(lag) = cast.lag.take() {
                    catch_up(cast, lag, log, screen);
                }
            }
            i += 1;
        }
        events
    }

    /// Ends every recording with a final marker `label`, after what a lagging
    /// one missed (or its loss and a fresh screen); their infos and `cast_stop`
    /// events. Their writers finish on their own threads.
    pub(crate) fn stop_all(
        &mut self,
        (label, reason): (&str, &str),
        log: &OutputLog,
        screen: &mut dyn FnMut() -> (Bytes, (u16, u16)),
    ) -> (Vec<CastInfo>, Vec<EventKind>) {
        let mut infos = Vec::new();
        let mut events = Vec::new();
        for mut cast in std::mem::take(&mut self.list) {
            if let Some(lag) = cast.lag.take() {
                catch_up(&mut cast, lag, log, screen);
            }
            let t = cast.t0.elapsed().as_secs_f64();
            cast.send(Msg::End(t, label.to_owned()));
            infos.push(cast.info());
            events.push(cast.stop_event(reason));
            self.finishing.push(cast.done);
        }
        (infos, events)
    }

    /// The active recordings.
    pub(crate) fn infos(&self) -> Vec<CastInfo> {
        self.list.iter().map(Cast::info).collect()
    }

    /// The writers still finishing (the daemon waits for them at exit, bounded).
    pub(crate) fn take_finishing(&mut self) -> Vec<oneshot::Receiver<()>> {
        std::mem::take(&mut self.finishing)
    }
}

/// Queues one read's output, split after each command mark, with the mark.
fn send_marked(cast: &Cast, t: f64, bytes: &Bytes, from: u64, marks: &[Mark]) {
    let mut pos = 0usize;
    for (at, label) in marks.iter().filter_map(marker) {
        let cut = usize::try_from(at.saturating_sub(from))
            .unwrap_or(usize::MAX)
            .min(bytes.len());
        if cut > pos {
            cast.send(Msg::Output(t, bytes.slice(pos..cut)));
            pos = cut;
        }
        cast.send(Msg::Marker(t, label));
    }
    if pos < bytes.len() {
        cast.send(Msg::Output(t, bytes.slice(pos..)));
    }
}

/// The `"m"` label of a command's start or end (SPEC §4.8), at the cursor after it.
fn marker(m: &Mark) -> Option<(u64, String)> {
    let label = match &m.kind {
        MarkKind::CommandStart { command: Some(c) } => format!("command start: {c}"),
        MarkKind::CommandStart { command: None } => "command start".to_owned(),
        MarkKind::CommandEnd { exit: Some(n) } => format!("command end: exit {n}"),
        MarkKind::CommandEnd { exit: None } => "command end".to_owned(),
        _ => return None,
    };
    Some((m.end, label))
}

fn note_time(lag: &mut Lag, end: u64, t: f64) {
    if lag.times.len() >= LAG_TIMES_MAX {
        // Halve the resolution: a byte then takes the time of a later read.
        let mut keep = false;
        lag.times.retain(|_| {
            keep = !keep;
            !keep
        });
    }
    lag.times.push((end, t));
}

fn note_event(lag: &mut Lag, at: u64, msg: Msg) {
    if lag.events.len() < LAG_EVENTS_MAX {
        lag.events.push((at, msg));
    }
}

/// A lagging writer has room: queue what it missed from the ring at the times
/// noted, or, if the ring no longer holds it, say how much was lost and start
/// again from a fresh screen (SPEC §4.8).
fn catch_up(
    cast: &mut Cast,
    lag: Lag,
    log: &OutputLog,
    screen: &mut dyn FnMut() -> (Bytes, (u16, u16)),
) {
    let held = log.since(lag.from, usize::MAX);
    let t_now = cast.t0.elapsed().as_secs_f64();
    if held.dropped > 0 {
        let lost = held.end.saturating_sub(lag.from);
        cast.dropped += lost;
        let label = format!("latch: {lost} bytes lost: the recording fell behind");
        cast.send(Msg::Marker(t_now, label));
        let (repaint, (rows, cols)) = screen();
        if lag.resized {
            cast.send(Msg::Resize(t_now, rows, cols));
        }
        cast.send(Msg::Output(t_now, repaint));
        return;
    }
    let mut pos = held.start;
    let bytes = held.bytes;
    let piece = |a: u64, b: u64| {
        let at = |c: u64| {
            usize::try_from(c.saturating_sub(held.start))
                .unwrap_or(0)
                .min(bytes.len())
        };
        bytes.slice(at(a)..at(b))
    };
    let mut events = lag.events.into_iter().peekable();
    for (end, t) in lag.times.into_iter().chain([(held.end, t_now)]) {
        while let Some((at, _)) = events.peek() {
            if *at > end {
                break;
            }
            let Some((at, msg)) = events.next() else {
                break;
            };
            if at > pos {
                cast.send(Msg::Output(t, piece(pos, at)));
                pos = at;
            }
            cast.send(msg);
        }
        if end > pos {
            cast.send(Msg::Output(t, piece(pos, end)));
            pos = end;
        }
    }
    for (_, msg) in events {
        cast.send(msg);
    }
}

/// The file of the `n`th creation a restart policy makes of one recorded session
/// (`FILE`, then `FILE.1`, … SPEC §4.8): the hook for supervision, which starts
/// each incarnation's recording with [`Casts::spawn`] on this name.
pub(crate) fn incarnation_file(file: &str, n: u32) -> String {
    if n == 0 {
        file.to_owned()
    } else {
        format!("{file}.{n}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use latch_wire::limits::OUTPUT_RING_BYTES;

    /// A recording held back by its writer, within the ring: the missed output
    /// comes back whole, from the ring, at the times it was read, with a resize
    /// in its place; beyond the ring, the loss is said and a screen follows.
    #[test]
    fn a_lagging_recording_catches_up_from_the_ring_at_the_noted_times() {
        let facts = HeaderFacts {
            own: SessionRef::new(
                latch_wire::SessionId::new("t").unwrap(),
                latch_wire::Incarnation::from_parts([1; 16], [2; 16]),
            ),
            title: "t".into(),
            term: None,
            shell: None,
        };
        let mut casts = Casts::new(facts);
        let (tx, rx) = mpsc::channel();
        let (_done_tx, done) = oneshot::channel();
        let shared = Arc::new(Shared::default());
        casts.list.push(Cast {
            file: "/t".into(),
            tx,
            shared: shared.clone(),
            t0: Instant::now(),
            start_cursor: 0,
            started_at_ms: 0,
            max_bytes: None,
            lag: None,
            dropped: 0,
            done,
        });
        let mut log = OutputLog::default();
        fn push(casts: &mut Casts, log: &mut OutputLog, bytes: &[u8]) {
            let from = log.cursor();
            log.push(bytes, 0);
            casts.output(bytes, from, &[]);
        }
        shared.queued.store(QUEUE_BYTES, Ordering::SeqCst);
        push(&mut casts, &mut log, b"one ");
        casts.resize(30, 100, 4);
        push(&mut casts, &mut log, b"two");
        assert!(rx.try_recv().is_err(), "nothing is queued while it lags");
        shared.queued.store(0, Ordering::SeqCst);
        let mut screen = || (Bytes::from_static(b"SCREEN"), (30, 100));
        assert!(casts.settle(&log, &mut screen).is_empty());
        let got: Vec<Msg> = rx.try_iter().collect();
        let (t1, t2) = match &got[..] {
            [Msg::Output(t1, a), Msg::Resize(_, 30, 100), Msg::Output(t2, b)] => {
                assert_eq!((&a[..], &b[..]), (&b"one "[..], &b"two"[..]));
                (*t1, *t2)
            }
            other => panic!("{other:?}"),
        };
        assert!(t1 <= t2, "each read keeps its own time, in order");

        // Now past the ring: the loss, then a fresh screen.
        shared.queued.store(QUEUE_BYTES, Ordering::SeqCst);
        push(&mut casts, &mut log, &vec![b'x'; OUTPUT_RING_BYTES + 10]);
        shared.queued.store(0, Ordering::SeqCst);
        casts.settle(&log, &mut screen);
        let got: Vec<Msg> = rx.try_iter().collect();
        assert!(
            matches!(&got[..], [Msg::Marker(_, m), Msg::Output(_, s)]
                if m.contains(&format!("{} bytes lost", OUTPUT_RING_BYTES + 10)) && &s[..] == b"SCREEN"),
            "{got:?}"
        );
    }

    #[test]
    fn each_incarnation_gets_its_own_file() {
        assert_eq!(incarnation_file("/t/a.cast", 0), "/t/a.cast");
        assert_eq!(incarnation_file("/t/a.cast", 2), "/t/a.cast.2");
    }

    #[test]
    fn marks_become_labels() {
        let m = |kind| Mark {
            kind,
            start: 0,
            end: 9,
        };
        let start = marker(&m(MarkKind::CommandStart {
            command: Some("ls".into()),
        }));
        assert_eq!(start, Some((9, "command start: ls".into())));
        let end = marker(&m(MarkKind::CommandEnd { exit: Some(1) }));
        assert_eq!(end, Some((9, "command end: exit 1".into())));
        assert_eq!(marker(&m(MarkKind::PromptStart)), None);
    }
}
