//! The terminal-event writer (SPEC §9.9): a thread of its own that appends the bell,
//! title, notification and cursor events to `<id>.events.jsonl`, so that waiting
//! for the session lock (another process may hold it for long) and `fdatasync` never
//! happen on the daemon's one thread, where they would stall output and every
//! connection. Events keep their order; at most [`EVENTS_QUEUED_MAX`] wait, and one
//! beyond that is dropped and counted in the `dropped` of the next one recorded of
//! its type, as the rate limiter does.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use latch_registry::events::{Event, EventKind, PendingSync};
use latch_registry::{Registry, RegistryError};
use latch_wire::SessionRef;

/// Terminal events waiting for the writer at most (SPEC §9.9).
pub(crate) const EVENTS_QUEUED_MAX: usize = 256;
/// Each wait for the lock; the writer waits again while the daemon runs.
const LOCK_TRY: Duration = Duration::from_secs(1);
/// The writer thread's stack: it serialises events and appends lines.
const STACK: usize = 256 * 1024;

/// Why an event was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotQueued {
    /// The writer is behind: [`EVENTS_QUEUED_MAX`] events wait.
    Full,
    /// The writer is gone (it could not start, or the daemon is closing).
    Gone,
}

/// The daemon's handle on its event writer.
#[derive(Debug)]
pub(crate) struct EventWriter {
    tx: Option<SyncSender<EventKind>>,
    closing: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl EventWriter {
    /// Starts the writer for `own`'s events in `registry`.
    pub(crate) fn start(registry: Arc<Registry>, own: SessionRef) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::sync_channel(EVENTS_QUEUED_MAX);
        let closing = Arc::new(AtomicBool::new(false));
        let flag = closing.clone();
        let thread = std::thread::Builder::new()
            .name("events".into())
            .stack_size(STACK)
            .spawn(move || run(&registry, &own, &rx, &flag))?;
        Ok(Self {
            tx: Some(tx),
            closing,
            thread: Some(thread),
        })
    }

    /// Queues an event without waiting.
    pub(crate) fn send(&self, kind: EventKind) -> Result<(), NotQueued> {
        let tx = self.tx.as_ref().ok_or(NotQueued::Gone)?;
        tx.try_send(kind).map_err(|e| match e {
            TrySendError::Full(_) => NotQueued::Full,
            TrySendError::Disconnected(_) => NotQueued::Gone,
        })
    }

    /// Writes what is queued and ends the writer (at the program's exit, before its
    /// `session_exit`, so every terminal event precedes it). Waits for the lock at
    /// most one more [`LOCK_TRY`].
    pub(crate) fn close(&mut self) {
        self.closing.store(true, Ordering::SeqCst);
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The writer thread: batches what is queued, then writes it under one lock.
fn run(registry: &Registry, own: &SessionRef, rx: &Receiver<EventKind>, closing: &AtomicBool) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while let Ok(next) = rx.try_recv() {
            batch.push(next);
        }
        write(registry, own, batch, closing);
    }
}

/// Appends `batch` under the session lock if the record still names `own`, then
/// syncs it after the lock is released.
fn write(registry: &Registry, own: &SessionRef, batch: Vec<EventKind>, closing: &AtomicBool) {
    let lock = loop {
        match registry.lock(&own.id, LOCK_TRY) {
            Ok(lock) => break lock,
            Err(RegistryError::Busy { .. }) if !closing.load(Ordering::SeqCst) => continue,
            Err(e) => {
                log!("{} terminal event(s) not recorded: {e}", batch.len());
                return;
            }
        }
    };
    match registry.read_record(&own.id) {
        Ok(Some(rec)) if rec.incarnation == own.incarnation => {}
        _ => return,
    }
    let mut pending: Vec<PendingSync> = Vec::new();
    for kind in batch {
        let ev = Event::new(&own.id, &own.incarnation, kind);
        match registry.append_event_unsynced(&lock, &ev) {
            Ok(p) => pending.push(p),
            Err(e) => log!("cannot append the {} event: {e}", ev.type_name()),
        }
    }
    drop(lock);
    for p in pending {
        if let Err(e) = p.sync() {
            log!("cannot sync a terminal event: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// While another holder keeps the lock, the writer takes what it can and the
    /// queue stays bounded: sending never waits, and past the bound it says `Full`.
    #[test]
    fn sending_never_waits_and_the_queue_is_bounded() {
        let tmp = tempfile::tempdir().unwrap();
        let registry = Arc::new(Registry::open(&tmp.path().join("r")).unwrap());
        let own = SessionRef::new(
            latch_wire::SessionId::new("w").unwrap(),
            latch_wire::Incarnation::parse(&format!("v1.{}.{}", "1".repeat(32), "2".repeat(32)))
                .unwrap(),
        );
        let held = registry.lock(&own.id, Duration::ZERO).unwrap();
        let mut writer = EventWriter::start(registry.clone(), own).unwrap();
        let mut queued = 0;
        let full = (0..100_000).find(|_| {
            let r = writer.send(EventKind::Bell {
                dropped: None,
                output_cursor: None,
            });
            queued += usize::from(r.is_ok());
            r == Err(NotQueued::Full)
        });
        assert!(full.is_some(), "never full after {queued}");
        drop(held);
        // No record names the creation: closing writes nothing and ends at once.
        writer.close();
        assert_eq!(
            writer.send(EventKind::Bell {
                dropped: None,
                output_cursor: None,
            }),
            Err(NotQueued::Gone)
        );
    }
}
