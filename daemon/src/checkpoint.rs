//! The screen kept against a reboot, `<id>.checkpoint` (SPEC.md §9.18).
//!
//! A task of the daemon's own, woken by output: once the program has been quiet
//! for `QUIET` (or has written for `MAX_DELAY` without a pause), it captures the
//! visible screen on the runtime's thread (a bounded copy) and writes it from a
//! blocking thread, under the session lock and only while the record holds this
//! creation, so output and connections never wait on the disk. At most one write
//! per `MIN_INTERVAL`; an idle session writes nothing.

use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use latch_registry::checkpoint::{Checkpoint, CHECKPOINT_SCREEN_MAX_BYTES, CHECKPOINT_VERSION};
use latch_registry::Registry;
use tokio::time::Instant;

use crate::session::Session;

/// How long output must pause before the screen is kept.
const QUIET: Duration = Duration::from_millis(500);
/// How long a stream of output without a pause goes unsaved at most.
const MAX_DELAY: Duration = Duration::from_secs(5);
/// The least time between two writes.
const MIN_INTERVAL: Duration = Duration::from_secs(2);

/// Draws a predecessor's checkpointed screen (`peek --ansi` text) into a fresh
/// emulator before the program starts, so the first screen a client sees is the
/// one the session had (`latch resurrect`). Whatever the text would make the
/// emulator answer or report is dropped: it never reaches the program.
pub(crate) fn draw(term: &mut latch_screen::Emulator, screen: &str) {
    let mut bytes = Vec::with_capacity(screen.len() + 16);
    for (i, line) in screen.split('\n').enumerate() {
        if i > 0 {
            bytes.extend_from_slice(b"\r\n");
        }
        bytes.extend_from_slice(line.as_bytes());
    }
    // Attributes off, and the program starts on a line of its own.
    bytes.extend_from_slice(b"\x1b[0m\r\n");
    term.process(&bytes);
    term.flush();
    drop(term.take_answers());
    drop(term.take_replies());
    drop(term.take_events());
}

/// Runs until the program exits (the task is dropped with the runtime).
pub(crate) async fn run(session: Rc<Session>, root: PathBuf) {
    let registry = match Registry::open(&root) {
        Ok(r) => Arc::new(r),
        Err(e) => {
            log!("no checkpoints: cannot open the registry: {e}");
            return;
        }
    };
    let mut saved = session.output_cursor();
    let mut last_write: Option<Instant> = None;
    loop {
        session.output_seen.notified().await;
        if session.output_cursor() == saved {
            continue;
        }
        settle(&session).await;
        if let Some(at) = last_write {
            tokio::time::sleep_until(at + MIN_INTERVAL).await;
        }
        if session.exited().is_some() {
            return;
        }
        let cp = capture(&session);
        saved = cp.output_cursor;
        last_write = Some(Instant::now());
        let reg = registry.clone();
        let written = tokio::task::spawn_blocking(move || write(&reg, &cp)).await;
        if let Ok(Err(e)) = written {
            log!("cannot write the checkpoint: {e}");
        }
    }
}

/// Waits until output pauses for `QUIET`, or `MAX_DELAY` has passed.
async fn settle(session: &Session) {
    let start = Instant::now();
    loop {
        let before = session.output_cursor();
        tokio::time::sleep(QUIET).await;
        if session.output_cursor() == before || start.elapsed() >= MAX_DELAY {
            return;
        }
    }
}

fn capture(session: &Session) -> Checkpoint {
    let (ansi, plain, (rows, cols)) = session.visible_screen(CHECKPOINT_SCREEN_MAX_BYTES);
    Checkpoint {
        version: CHECKPOINT_VERSION,
        id: session.own.id.clone(),
        incarnation: session.own.incarnation,
        rows,
        cols,
        saved_at_ms: latch_registry::now_ms(),
        output_cursor: session.output_cursor(),
        ansi,
        plain,
    }
}

/// Under the lock, skipped (not waited for) while another holds it: the next
/// quiet moment writes again.
fn write(registry: &Registry, cp: &Checkpoint) -> Result<(), latch_registry::RegistryError> {
    let lock = match registry.lock(&cp.id, Duration::from_millis(200)) {
        Ok(l) => l,
        Err(latch_registry::RegistryError::Busy { .. }) => return Ok(()),
        Err(e) => return Err(e),
    };
    registry.write_checkpoint(&lock, cp).map(drop)
}
