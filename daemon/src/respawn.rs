//! Restart policies, the parent's end and `--rm`: what the daemon does after its
//! program ends (SPEC.md §9.16).
//!
//! ```text
//! program ends ─ under the lock: exit recorded; decide ─┬─ end (kill, parent, policy)
//!                                                       ├─ flapping: exited, event
//!                                                       └─ restarting: socket gone,
//!   EXIT, close every connection (serve)                   statusReason restarting
//!   wait the delay (a change of the record, SIGTERM or the parent's end cut it short)
//!   under the lock: still ours, still restarting, no kill recorded?
//!     mint a new incarnation, bind, spawn the record's command, rewrite the record
//!     (previousIncarnation), session_respawn ── serve the new session
//! ```
//!
//! Each incarnation is a new [`Session`]: a fresh screen, ring and cursor, and a
//! state machine that knows only the new incarnation, so anything bound to the old
//! one is refused as `replaced`.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use latch_registry::events::{Event, EventKind};
use latch_registry::supervision::{RestartPolicy, StatusReason};
use latch_registry::{CreateSpec, Record, Registry, SessionLock, DEFAULT_LOCK_WAIT};
use latch_wire::SessionRef;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::net::UnixListener;

use crate::create::{self, Created};
use crate::parent;
use crate::serve::{self, Signals};
use crate::session::Session;

/// What follows the program's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// The daemon ends.
    End,
    /// The program is started again after `delay`.
    Restart { delay: Duration },
}

/// The supervision every incarnation of one daemon shares.
#[derive(Debug)]
pub(crate) struct Supervisor {
    policy: Option<RestartPolicy>,
    ephemeral: bool,
    /// When each restart inside the window was made.
    recent: RefCell<VecDeque<Instant>>,
    parent: Option<parent::Watch>,
    next: Cell<Next>,
}

impl Supervisor {
    /// The supervision `spec` asks for; the parent is proven now.
    pub fn new(registry: &Registry, spec: &CreateSpec) -> Rc<Self> {
        let sup = &spec.supervision;
        Rc::new(Self {
            policy: sup.restart,
            ephemeral: sup.ephemeral,
            recent: RefCell::new(VecDeque::new()),
            parent: sup
                .parent
                .as_ref()
                .map(|p| parent::Watch::start(registry, p)),
            next: Cell::new(Next::End),
        })
    }

    /// Resolves once, when the parent has ended (never without a parent).
    pub async fn parent_ended(&self) {
        match &self.parent {
            Some(w) => w.ended().await,
            None => std::future::pending().await,
        }
    }

    fn parent_gone(&self) -> bool {
        self.parent.as_ref().is_some_and(parent::Watch::has_ended)
    }

    /// At the program's exit, under the session lock, with the exit in `rec`:
    /// decides what follows and notes it in `rec.status_reason`; returns the event
    /// to append after `session_exit`, if any. `draining`: the daemon was stopped
    /// (a kill's STOP, SIGTERM) and restarts nothing.
    pub fn decide(&self, rec: &mut Record, draining: bool) -> Option<EventKind> {
        rec.status_reason = None;
        self.next.set(Next::End);
        if self.parent_gone() {
            rec.status_reason = Some(StatusReason::ParentEnded);
            return None;
        }
        let policy = self.policy?;
        let (code, signal) = rec
            .exit
            .as_ref()
            .map_or((None, None), |e| (e.code, e.signal));
        let killed = draining || rec.kill_requested_at_ms.is_some();
        if !policy.wants_restart(code, signal, killed) {
            return None;
        }
        let now = Instant::now();
        let window = Duration::from_millis(policy.window_ms);
        let mut recent = self.recent.borrow_mut();
        recent.retain(|t| now.duration_since(*t) < window);
        let made = u32::try_from(recent.len()).unwrap_or(u32::MAX);
        if made >= policy.max_restarts {
            rec.status_reason = Some(StatusReason::Flapping);
            log!("{made} restart(s) inside {window:?}: flapping, no more restarts");
            return Some(EventKind::SessionFlapping {
                restarts: made,
                window_ms: policy.window_ms,
            });
        }
        rec.status_reason = Some(StatusReason::Restarting);
        let delay = policy.delay(made);
        log!("restarting in {delay:?} ({made} restart(s) inside the window so far)");
        self.next.set(Next::Restart { delay });
        None
    }
}

/// Serves the session, and each incarnation that follows it, until the daemon
/// ends; returns its exit code.
pub(crate) async fn supervise(
    root: &Path,
    spec: CreateSpec,
    mut session: Rc<Session>,
    mut listener: UnixListener,
    mut signals: Signals,
    sup: Rc<Supervisor>,
) -> i32 {
    let mut spec = spec;
    let mut respawns: u32 = 0;
    loop {
        let own = session.own.clone();
        // The screen kept against a reboot (SPEC.md §9.18), one task per creation.
        let checkpoints =
            tokio::task::spawn_local(crate::checkpoint::run(session.clone(), root.to_path_buf()));
        let code = serve::serve(session, listener, &mut signals, &sup).await;
        checkpoints.abort();
        let delay = match sup.next.get() {
            Next::End => {
                if sup.ephemeral {
                    remove_ephemeral(root, &own);
                }
                return code;
            }
            Next::Restart { delay } => delay,
        };
        let Some((created, next_spec)) =
            restart_after(root, &spec, &own, delay, &mut signals, &sup).await
        else {
            return code;
        };
        spec = next_spec;
        if let Some(Err(e)) = created
            .start_event
            .map(latch_registry::events::PendingSync::sync)
        {
            log!("cannot sync the session_respawn event: {e}");
        }
        let created = Created {
            start_event: None,
            ..created
        };
        let (s, l) = Session::new(created, &spec);
        log!(
            "respawned: incarnation {} replaces {}, program pid {}",
            s.own.incarnation,
            own.incarnation,
            s.child_pid
        );
        session = Rc::new(s);
        listener = l;
        respawns += 1;
        // `new --cast`: each incarnation is recorded into its own file, FILE.N,
        // before its first byte is read (SPEC §4.8).
        if let Some(first) = spec.cast.as_ref() {
            let next = latch_registry::CastSpec {
                file: crate::cast::incarnation_file(&first.file, respawns),
                max_bytes: first.max_bytes,
            };
            match crate::cast_session::open_first(&next) {
                Ok(file) => session.start_first_cast(file, &next),
                Err((_, message)) => log!("not recording this incarnation: {message}"),
            }
        }
    }
}

/// Waits `delay`, then starts the program again if, under the lock, the record
/// still holds `own`, restarting, with no kill recorded. A change of the record
/// (a kill, `rm`), SIGTERM or SIGHUP to the daemon, or the parent's end during the
/// delay stops it for good.
async fn restart_after(
    root: &Path,
    spec: &CreateSpec,
    own: &SessionRef,
    delay: Duration,
    signals: &mut Signals,
    sup: &Rc<Supervisor>,
) -> Option<(Created, CreateSpec)> {
    let registry = match Registry::open(root) {
        Ok(r) => Arc::new(r),
        Err(e) => {
            log!("cannot open the registry to restart: {e}");
            return None;
        }
    };
    let changes = RecordChanges::watch(&registry);
    // A kill recorded before the watch began is seen now, not at the delay's end.
    if still_restarting(&registry, own).is_none() {
        log!("the record changed before the restart delay (a kill or rm): not restarting");
        stop(&registry, own, None);
        return None;
    }
    let deadline = tokio::time::Instant::now() + delay;
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(deadline) => break,
            () = changes.next() => {
                if still_restarting(&registry, own).is_none() {
                    log!("the record changed during the restart delay (a kill or rm): not restarting");
                    stop(&registry, own, None);
                    return None;
                }
            }
            () = signals.stop_requested() => {
                log!("stopped during the restart delay: not restarting");
                stop(&registry, own, None);
                return None;
            }
            () = sup.parent_ended() => {
                log!("the parent ended during the restart delay: not restarting");
                stop(&registry, own, Some(StatusReason::ParentEnded));
                return None;
            }
        }
    }
    let lock = registry.lock(&own.id, DEFAULT_LOCK_WAIT).ok()?;
    let previous = still_restarting(&registry, own)?;
    let next = respawn_spec(spec, &previous);
    let restarts = {
        let mut recent = sup.recent.borrow_mut();
        recent.push_back(Instant::now());
        u32::try_from(recent.len()).unwrap_or(u32::MAX)
    };
    match create::respawn(
        registry.clone(),
        &lock,
        &next,
        &previous,
        restarts,
        sup.clone(),
    ) {
        Ok(created) => Some((created, next)),
        Err(e) => {
            log!("cannot start the program again ({}): {}", e.kind, e.message);
            end_restarting(&registry, &lock, own, None);
            None
        }
    }
}

/// The record, if it still holds `own`, waiting to restart, with no kill recorded.
fn still_restarting(registry: &Registry, own: &SessionRef) -> Option<Record> {
    match registry.read_record(&own.id) {
        Ok(Some(r))
            if r.incarnation == own.incarnation
                && r.status_reason == Some(StatusReason::Restarting)
                && r.kill_requested_at_ms.is_none() =>
        {
            Some(r)
        }
        _ => None,
    }
}

/// Ends a restart that will not happen: the record (if still `own`'s) shows the
/// exit, with `reason`.
fn stop(registry: &Registry, own: &SessionRef, reason: Option<StatusReason>) {
    match registry.lock(&own.id, DEFAULT_LOCK_WAIT) {
        Ok(lock) => end_restarting(registry, &lock, own, reason),
        Err(e) => log!("cannot take the session lock to end the restart: {e}"),
    }
}

fn end_restarting(
    registry: &Registry,
    lock: &SessionLock,
    own: &SessionRef,
    reason: Option<StatusReason>,
) {
    if let Ok(Some(mut r)) = registry.read_record(&own.id) {
        if r.incarnation == own.incarnation && r.status_reason == Some(StatusReason::Restarting) {
            r.status_reason = reason;
            if let Err(e) = registry.write_record(lock, &r) {
                log!("cannot record the end of the restart: {e}");
            }
        }
    }
}

/// The next incarnation's spec: the record's command (which `exec` may have
/// changed), working directory, name, tags, owner and supervision; the creation's
/// environment, size and scrollback.
fn respawn_spec(spec: &CreateSpec, rec: &Record) -> CreateSpec {
    let mut next = spec.clone();
    next.display_name = rec.display_name.clone();
    next.command = rec.command.clone();
    next.cwd = rec.cwd.clone();
    next.tags = rec.tags.clone();
    next.owner = rec.owner.clone();
    next.legacy_policy = rec.legacy_policy;
    next.supervision.restart = rec.restart;
    next.supervision.parent = rec.parent.clone();
    next.supervision.record_env = rec.env.clone();
    next.supervision.previous_incarnation = None;
    next.supervision.resume_command = rec.resume_command.clone();
    // The screen a resurrection drew first is not drawn again.
    next.supervision.initial_screen = None;
    next
}

/// `--rm`: once the exit has reached attached clients (serve flushed them), the
/// events log (`session_exit`, then `removed`) and the record, the session's files
/// go, if the record still holds `own`.
fn remove_ephemeral(root: &Path, own: &SessionRef) {
    let removed = Registry::open(root).and_then(|reg| {
        let lock = reg.lock(&own.id, DEFAULT_LOCK_WAIT)?;
        match reg.read_record(&own.id)? {
            Some(r) if r.incarnation == own.incarnation => {}
            _ => return Ok(false),
        }
        reg.check_removable(&own.id)?;
        reg.append_event_or_lose(
            &lock,
            &Event::new(&own.id, &own.incarnation, EventKind::Removed),
        )?;
        reg.remove_files(lock)?;
        Ok(true)
    });
    match removed {
        Ok(true) => log!("--rm: the session's files were removed"),
        Ok(false) => log!("--rm: the record is no longer this session's; left alone"),
        Err(e) => log!("--rm: cannot remove the session's files: {e}"),
    }
}

/// Changes in the root (the record renamed over or removed), through inotify; with
/// no watch, none are seen and the delay runs out.
struct RecordChanges {
    fd: Option<AsyncFd<Ino>>,
}

struct Ino(Inotify);

impl AsRawFd for Ino {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

// The Inotify owns its descriptor.
impl crate::watch::OwnsFd for Ino {}

impl RecordChanges {
    fn watch(registry: &Registry) -> Self {
        let ino = Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK).and_then(|i| {
            i.add_watch(
                registry.root(),
                AddWatchFlags::IN_MOVED_TO | AddWatchFlags::IN_DELETE,
            )?;
            Ok(i)
        });
        let fd = match ino {
            Ok(i) => crate::watch::watch(Ino(i), Interest::READABLE).ok(),
            Err(e) => {
                log!("cannot watch the registry during the restart delay: {e}");
                None
            }
        };
        Self { fd }
    }

    /// Resolves at the next batch of changes.
    async fn next(&self) {
        let Some(fd) = &self.fd else {
            return std::future::pending().await;
        };
        match fd.readable().await {
            Ok(mut guard) => {
                let _ = guard.get_inner().0.read_events();
                guard.clear_ready();
            }
            Err(_) => std::future::pending().await,
        }
    }
}
