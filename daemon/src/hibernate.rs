//! Hibernation of a quiet, detached session (SPEC §4.4 "Hibernation", §8
//! `HIBERNATE_QUIET`): a task of the daemon's own. Once neither output nor a
//! connection's end has come for `HIBERNATE_QUIET`, and nothing keeps the session
//! awake (an attached client or a legacy PEEK subscription, a recording, the run
//! lease, queued input, the program's exit or a drain), the emulator hibernates
//! (its grids move into compact rows: `latch_screen::Emulator::hibernate`), the
//! output ring is freed, and the allocator's free pages go back to the system. The
//! emulator wakes itself on the next output or read of the screen; the quiet
//! period then starts again (after output, or when the connection that woke it
//! ends). A hibernated session's task waits without a timer.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use tokio::sync::Notify;

use crate::session::Session;

/// How long a session must be quiet before it hibernates (SPEC §8
/// `HIBERNATE_QUIET_MS`).
pub(crate) const HIBERNATE_QUIET: Duration =
    Duration::from_millis(latch_wire::limits::HIBERNATE_QUIET_MS);

/// What the session keeps for its hibernation.
#[derive(Debug, Default)]
pub(crate) struct Hibernation {
    /// Output came, or a reader woke the emulator: the quiet period starts again.
    poke: Notify,
    /// The task waits for a poke with the emulator hibernated.
    asleep: Cell<bool>,
}

impl Hibernation {
    /// Output came: the quiet period starts again.
    pub(crate) fn poke(&self) {
        self.asleep.set(false);
        self.poke.notify_one();
    }

    /// A connection ended: if it woke the emulator (a capture, an attach), the
    /// quiet period starts again. Other connections' ends change nothing: a
    /// session is quiet while its program is (`peek --since` does not wake it).
    pub(crate) fn woken(&self, term: &latch_screen::Emulator) {
        if self.asleep.get() && !term.hibernated() {
            self.poke();
        }
    }
}

/// Runs until the program exits (the task is aborted then).
pub(crate) async fn run(session: Rc<Session>) {
    let poke = &session.hibernation.poke;
    loop {
        if session.term.borrow().hibernated() {
            poke.notified().await;
        }
        // The quiet period, restarted by every poke.
        while tokio::time::timeout(HIBERNATE_QUIET, poke.notified())
            .await
            .is_ok()
        {}
        hibernate(&session);
    }
}

/// Hibernates the session if nothing keeps it awake; returns whether it did.
pub(crate) fn hibernate(session: &Session) -> bool {
    if !may_hibernate(session) {
        return false;
    }
    if !session.term.borrow_mut().hibernate() {
        return false;
    }
    // Applying the queue may have produced answers or events.
    session.settle();
    session.log.borrow_mut().free_ring();
    session.hibernation.asleep.set(true);
    crate::memory::trim_memory(true);
    log!("hibernated: quiet and detached for {HIBERNATE_QUIET:?}");
    // Last, so that as little code as possible runs between it and the wait for
    // the next event (each page touched maps its neighbours back too).
    crate::memory::release_file_pages();
    // The read of /proc/self/smaps left its buffer at the top of the heap.
    crate::memory::trim_heap();
    true
}

/// Nothing keeps the session awake (module docs).
fn may_hibernate(session: &Session) -> bool {
    let (writers, readers) = session.attached.borrow().counts();
    session.exited().is_none()
        && !session.draining()
        && writers + readers == 0
        && session.casts.borrow().is_empty()
        && !session.lease.held()
        && !session.input_pending()
        && !session.term.borrow().hibernated()
}
