//! The daemon's life after readiness: the PTY pumps, the connection acceptor, and
//! the program's exit.
//!
//! ```text
//! accept loop ──> one task per connection (conn)
//! PTY -> emulator + fan-out          (pump_output)
//! input queue -> PTY                 (pump_input)
//! pidfd readable ─> waitpid ─> drain PTY ─> record exit + unlink socket (if ours,
//!                   under the lock) ─> EXIT to attached clients ─> close every
//!                   connection, flush for at most FLUSH_AT_EXIT ─> return 0
//! ```
//!
//! **SIGTERM and SIGHUP to the daemon** are not a way to lose the program: the daemon
//! starts draining (no new binds or effects; STATUS still answers), forwards SIGHUP to
//! the program through its pidfd, as a terminal hang-up would, and keeps serving
//! attached clients until the program has exited; then it records the exit as usual.
//! A program that ignores SIGHUP keeps the session alive: stop it by its proven
//! identity (the record's `child`), or SIGKILL the daemon, which leaves a record that
//! `ls` reports truthfully and `gc` can clean up.

use std::os::fd::AsFd;
use std::rc::Rc;
use std::time::Duration;

use latch_registry::proc;
use latch_wire::ExitStatus;
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::net::UnixListener;
use tokio::time::{timeout_at, Instant};

use crate::conn;
use crate::pty;
use crate::respawn::Supervisor;
use crate::session::{Session, READ_BUF};
use crate::watch::watch;

/// How long connections may take to flush after the program's exit.
const FLUSH_AT_EXIT: Duration = Duration::from_secs(2);
/// How long the terminal must stay quiet before queued output is applied to the
/// emulator (sooner if the queue grows, or when anything reads the screen).
const APPLY_WHEN_QUIET: Duration = Duration::from_millis(5);
/// The least room worth a PTY read: one line-discipline buffer.
const MIN_READ: usize = 4096;

/// The daemon's own shutdown signals, installed before creation so that a SIGTERM
/// arriving at any point after spawn is handled, never fatal.
///
/// SIGTERM and SIGHUP are blocked and read from a signalfd: the daemon's one
/// thread (and any thread started after, which inherits the mask) never runs a
/// handler, and an idle daemon keeps no per-signal table (tokio's, 64 entries of
/// 352 bytes, was 22.5 KB of every idle daemon's heap: SPEC §4.4 "Hibernation").
/// The program starts with an empty mask (`pty::spawn`).
pub(crate) struct Signals {
    fd: Option<AsyncFd<SignalFd>>,
}

/// The signals a daemon handles.
fn handled() -> SigSet {
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGHUP);
    set
}

impl Signals {
    /// Blocks SIGTERM and SIGHUP and opens their signalfd (must run inside the
    /// runtime). If either step fails the signals are left unblocked: fatal, as for
    /// any process, but never lost in a mask nobody reads.
    pub fn install() -> Self {
        let set = handled();
        if let Err(e) = set.thread_block() {
            log!("cannot handle SIGTERM and SIGHUP: {e}");
            return Self { fd: None };
        }
        let fd = SignalFd::with_flags(&set, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
            .map_err(std::io::Error::from)
            .and_then(|fd| watch(fd, Interest::READABLE));
        match fd {
            Ok(fd) => Self { fd: Some(fd) },
            Err(e) => {
                log!("cannot handle SIGTERM and SIGHUP: {e}");
                let _ =
                    nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_UNBLOCK, Some(&set), None);
                Self { fd: None }
            }
        }
    }

    /// Resolves at the next SIGTERM or SIGHUP with its name (never, if they could
    /// not be handled).
    pub async fn next(&mut self) -> &'static str {
        let Some(fd) = self.fd.as_ref() else {
            return std::future::pending().await;
        };
        loop {
            let Ok(mut guard) = fd.readable().await else {
                return std::future::pending().await;
            };
            match guard.try_io(|fd| Ok(fd.get_ref().read_signal()?)) {
                Ok(Ok(Some(info))) if info.ssi_signo == libc::SIGHUP as u32 => return "SIGHUP",
                Ok(Ok(Some(_))) => return "SIGTERM",
                Ok(Ok(None)) => guard.clear_ready(),
                Ok(Err(e)) => {
                    log!("cannot read the daemon's signals: {e}");
                    return std::future::pending().await;
                }
                Err(_would_block) => {}
            }
        }
    }

    /// Resolves at the next SIGTERM or SIGHUP (during a restart delay, SPEC §9.16).
    pub async fn stop_requested(&mut self) {
        self.next().await;
    }
}

/// Serves the session until the program exits; returns the daemon's exit code.
pub(crate) async fn serve(
    session: Rc<Session>,
    listener: UnixListener,
    signals: &mut Signals,
    sup: &Supervisor,
) -> i32 {
    let accept = tokio::task::spawn_local(conn::accept_loop(session.clone(), listener));
    let reader = tokio::task::spawn_local(pump_output(session.clone()));
    let writer = tokio::task::spawn_local(pump_input(session.clone()));
    let casts = tokio::task::spawn_local(crate::cast::pump(session.clone()));
    let hibernation = tokio::task::spawn_local(crate::hibernate::run(session.clone()));

    let status = watch_child(&session, signals, sup).await;
    log!(
        "program exited: code {:?}, signal {:?}",
        status.code,
        status.signal
    );
    reader.abort();
    writer.abort();
    hibernation.abort();
    // Every byte the program wrote reaches clients before EXIT.
    session.drain_pty();
    // The listener is still open here, so the socket cannot have been replaced
    // through the registry while it is unlinked.
    session.program_exited(status);
    accept.abort();
    session.close_all();
    let deadline = Instant::now() + FLUSH_AT_EXIT;
    while session.connections() > 0 {
        if timeout_at(deadline, session.connection_gone.notified())
            .await
            .is_err()
        {
            log!(
                "{} connection(s) still flushing at exit; closing them",
                session.connections()
            );
            break;
        }
    }
    // The recordings' writers finish their files (their final markers), bounded.
    casts.abort();
    session.finish_casts(Instant::now() + FLUSH_AT_EXIT).await;
    0
}

/// Waits for the program to exit and reaps it. SIGTERM/SIGHUP to the daemon are
/// forwarded to the program as SIGHUP (module docs).
async fn watch_child(session: &Session, signals: &mut Signals, sup: &Supervisor) -> ExitStatus {
    loop {
        tokio::select! {
            ready = session.child.readable() => match ready {
                Ok(mut guard) => {
                    // The program has exited but is not reaped yet: its pid still
                    // names its session, so the rest of the session can be proven.
                    sweep(session).await;
                    if let Some(status) = reap(session.child_pid, WaitPidFlag::WNOHANG) {
                        return status;
                    }
                    guard.clear_ready();
                }
                Err(e) => {
                    log!("cannot watch the program's pidfd ({e}); waiting for it");
                    loop {
                        if let Some(status) = reap(session.child_pid, WaitPidFlag::empty()) {
                            return status;
                        }
                    }
                }
            },
            what = signals.next() => forward_hangup(session, what),
            // The session's life is bound to its parent (SPEC §9.16).
            () = sup.parent_ended() => forward_hangup(session, "the parent ended"),
        }
    }
}

fn forward_hangup(session: &Session, what: &str) {
    session.set_draining();
    log!("{what} received: draining, hanging up the terminal session");
    session.hang_up();
}

/// After a kill (the session is draining), whatever is left of the program's
/// terminal session once the program has exited is hung up (SIGHUP, SIGCONT) and,
/// if still there after `KILL_GRACE`, killed (SIGKILL): the whole-session kill
/// gc and the CLI share (`latch_registry::proc`, SPEC.md §5.6). Must run before the
/// program is reaped (`Leader::Unreaped`). A program that ends by itself leaves its
/// background jobs alone, as a terminal does.
async fn sweep(session: &Session) {
    if !session.draining() {
        return;
    }
    let members =
        proc::hang_up_session(proc::Leader::Unreaped(session.child_pid)).unwrap_or_default();
    if members.is_empty() {
        return;
    }
    log!(
        "program exited after a kill: hung up {} remaining process(es) of its session",
        members.len()
    );
    // Waiting on pidfds blocks: off the runtime's thread, so clients are served.
    let killed =
        tokio::task::spawn_blocking(move || proc::kill_remaining(members, proc::KILL_GRACE))
            .await
            .unwrap_or(0);
    if killed > 0 {
        log!("{killed} process(es) ignored the hangup and were killed");
    }
}

/// `waitpid` on the program: its status once it has exited.
fn reap(pid: u32, flags: WaitPidFlag) -> Option<ExitStatus> {
    let pid = Pid::from_raw(i32::try_from(pid).ok()?);
    match waitpid(pid, Some(flags)) {
        Ok(WaitStatus::Exited(_, code)) => Some(ExitStatus {
            code: Some(code),
            signal: None,
        }),
        Ok(WaitStatus::Signaled(_, sig, _)) => Some(ExitStatus {
            code: None,
            signal: Some(sig as i32),
        }),
        Ok(_) | Err(nix::errno::Errno::EINTR) => None,
        Err(e) => {
            log!("cannot reap the program: {e}");
            Some(ExitStatus {
                code: None,
                signal: None,
            })
        }
    }
}

/// PTY output -> attached clients and the emulator's queue, until the slave side is
/// closed or the program has exited (then `Session::drain_pty` takes the rest). The
/// queue is applied once the terminal has been quiet for `APPLY_WHEN_QUIET`.
async fn pump_output(session: Rc<Session>) {
    // Held only while output flows: an idle session keeps no read buffer.
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let ready = if session.output_queued() {
            match tokio::time::timeout(APPLY_WHEN_QUIET, session.master.readable()).await {
                Ok(ready) => ready,
                Err(_quiet) => {
                    buf = Vec::new();
                    session.apply_output();
                    continue;
                }
            }
        } else {
            session.master.readable().await
        };
        let mut guard = match ready {
            Ok(g) => g,
            Err(e) => {
                log!("cannot watch the terminal: {e}");
                return;
            }
        };
        if session.exited().is_some() {
            return;
        }
        if buf.is_empty() {
            buf = vec![0u8; READ_BUF];
        }
        // Read until the terminal has nothing more or the buffer is nearly full, and
        // hand the batch on at once: fewer frames, wakeups and writes per byte (a
        // PTY read returns at most one line-discipline buffer, 4 KiB).
        let mut filled = 0;
        let mut ended = false;
        while let Some(spare) = buf.get_mut(filled..).filter(|b| b.len() >= MIN_READ) {
            match guard.try_io(|fd| pty::read(fd.get_ref().as_fd(), spare)) {
                Ok(Ok(0)) => {
                    ended = true;
                    break;
                }
                Ok(Ok(n)) => filled += n,
                Ok(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Ok(Err(e)) => {
                    // EIO: every slave fd is closed (the program and its children
                    // are done with the terminal).
                    if e.raw_os_error() != Some(libc::EIO) {
                        log!("terminal read failed: {e}");
                    }
                    ended = true;
                    break;
                }
                Err(_would_block) => break,
            }
        }
        if filled > 0 {
            session.output(buf.get(..filled).unwrap_or_default());
        }
        if ended {
            return;
        }
        if filled > 0 {
            // Let the connection writers drain before reading more: without this
            // the pump could run for a whole coop budget (128 reads, 8 MiB) before
            // any writer ran, and a client that keeps up would look stalled.
            tokio::task::yield_now().await;
        }
    }
}

/// Queued input -> PTY, in order, without blocking the thread.
async fn pump_input(session: Rc<Session>) {
    loop {
        if !session.input_pending() {
            session.input_ready.notified().await;
            continue;
        }
        let mut guard = match session.master.writable().await {
            Ok(g) => g,
            Err(e) => {
                log!("cannot watch the terminal for writing: {e}");
                session.discard_input();
                return;
            }
        };
        let wrote = guard.try_io(|fd| session.write_input(|b| pty::write(fd.get_ref().as_fd(), b)));
        match wrote {
            Ok(Ok(_)) | Err(_) => {}
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Ok(Err(e)) => {
                if e.raw_os_error() != Some(libc::EIO) {
                    log!("terminal write failed: {e}; queued input dropped");
                }
                session.discard_input();
            }
        }
    }
}
