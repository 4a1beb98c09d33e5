//! latch-daemon: one process per session.
//!
//! What it does, in order (SPEC.md §9.6 for creation, §5 for connections):
//!
//! 1. **Creation, under the session lock** (`create`): checks the registry root,
//!    refuses an id that already has a record (or an unreadable one) or a socket that
//!    answers, mints the incarnation, binds `<root>/<id>.sock` (0600), opens a PTY,
//!    spawns the program as a session leader with the PTY as its controlling terminal,
//!    opens a pidfd for it, writes the record, and only then reports
//!    [`ReadyMessage::Ready`] on its stdout (the readiness pipe) and points stdout at
//!    `/dev/null`. Any failure before that undoes what was done and reports
//!    [`ReadyMessage::Failed`].
//! 2. **Serving** (`conn`): checks every peer's uid (SO_PEERCRED) before reading a
//!    byte, bounds the number of connections, times the handshake, and feeds every
//!    frame to `latch_wire::server::ServerConn`, which alone decides what is legal. The
//!    daemon only carries out what it returns: no effect without BIND.
//! 3. **The terminal** (`session`, `pty`, and the `latch-screen` crate): PTY output goes out to attached
//!    clients first and is queued for an alacritty_terminal emulator (screen +
//!    bounded scrollback), applied before any snapshot; ATTACH applies the queue,
//!    cuts a screen snapshot and joins the fan-out in one synchronous step on a
//!    single-threaded runtime, so a client sees every byte after its snapshot exactly
//!    once. A client that falls behind is resynchronised with a fresh screen, and only
//!    one that reads nothing for a minute is cut off (`outbound` documents the bounds).
//! 4. **Exit** (`serve`): when the program ends, the remaining output is drained,
//!    the exit is recorded (only while the record is still this incarnation's), EXIT
//!    goes to every attached client, and the socket is unlinked only if it is still
//!    the one this daemon bound.
//!
//! What it deliberately does not do: read the registry to learn who it is (STATUS is
//! answered from memory, SPEC.md §11 I2); signal anything but its own child,
//! and that only through the pidfd it opened at spawn (invariant 5); decide protocol
//! legality itself; touch another creation's record or socket, or any log or events
//! file (its own record is removed only when its creator never learnt of it); answer
//! terminal queries on behalf of the program (an attached terminal does that); or
//! exit before its child (SIGTERM/SIGHUP to the daemon are forwarded to the child as
//! SIGHUP, and the daemon keeps serving until the child has exited).

// Log lines go to stderr, which the client points at `<root>/<id>.log`.
macro_rules! log {
    ($($arg:tt)*) => {
        $crate::logging::line(format_args!($($arg)*))
    };
}

mod cast;
mod cast_session;
mod cast_writer;
mod checkpoint;
mod conn;
mod create;
mod cursor;
mod event_limit;
mod event_writer;
mod fanout;
mod hibernate;
mod input;
mod lease;
mod logging;
mod memory;
mod outbound;
mod parent;
mod pty;
mod queue;
mod replies;
mod reply_budget;
mod respawn;
mod ring;

mod serve;
mod session;
mod status;
mod stream;
mod terminal;
mod watch;

use std::os::fd::AsFd;
use std::path::PathBuf;

use latch_registry::spec::FailureKind;
use latch_registry::{CreateSpec, ReadyMessage};

/// Runs one session daemon to completion and returns the process exit code: 0 once
/// the program has exited and been recorded, non-zero if creation failed (after
/// reporting [`ReadyMessage::Failed`] on stdout).
///
/// Expects the client's setup: stdin `/dev/null`, stdout the readiness pipe, stderr
/// the log file, already in a new session, and no other thread.
///
/// A clean process (SPEC.md §9.6): it first closes every file descriptor above 2
/// (so the caller must own none it still needs), then resolves `root` and the spec's
/// working directory against the directory it was started in, and moves to `/`, so
/// it holds neither a caller's pipe nor a caller's directory busy.
///
/// SIGPIPE must be ignored, as the Rust runtime does before `main` in every Rust
/// binary (the `latch` binary runs this): a write to a vanished client is then an
/// EPIPE error, never a signal that kills the daemon and orphans its child. The
/// child gets the default disposition back (`std::process::Command` resets it).
pub fn run(root: PathBuf, mut spec: CreateSpec) -> i32 {
    close_inherited_fds();
    memory::fixed_mmap_threshold();
    let root = match leave_start_directory(&root, &mut spec) {
        Ok(root) => root,
        Err(e) => {
            log!("cannot resolve the daemon's paths: {e}");
            report_failure(
                FailureKind::Io,
                &format!("cannot resolve the daemon's paths: {e}"),
            );
            return 1;
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        // A daemon waits on a handful of descriptors (its PTY, listener, clients):
        // 64 events a tick is plenty (more wait for the next tick), where tokio's
        // default of 1,024 is a 12 KiB array an idle daemon keeps resident.
        .max_io_events_per_tick(64)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            log!("cannot start the runtime: {e}");
            report_failure(
                FailureKind::Io,
                &format!("cannot start the daemon's runtime: {e}"),
            );
            return 1;
        }
    };
    let local = tokio::task::LocalSet::new();
    // On the heap: pinned on this frame, the daemon's state machine would hold the
    // main thread's stack pages for its whole life (SPEC §4.4 "Hibernation": an
    // idle daemon hands back the stack below its live frames, never these).
    local.block_on(&rt, Box::pin(daemon(root, spec)))
}

async fn daemon(root: PathBuf, spec: CreateSpec) -> i32 {
    let signals = serve::Signals::install();
    // Opened once: the supervisor reads it, and creation goes on with it.
    let registry = match latch_registry::Registry::open(&root) {
        Ok(reg) => reg,
        Err(e) => {
            log!("creation of {} failed: {e}", spec.id);
            let e = create::registry_error(e);
            report_failure(e.kind, &e.message);
            return 1;
        }
    };
    let supervisor = respawn::Supervisor::new(&registry, &spec);
    // `new --cast`: the file is opened before the program exists, so the
    // recording has its first byte (SPEC §4.8).
    let cast = match spec.cast.as_ref().map(cast_session::open_first).transpose() {
        Ok(c) => c,
        Err((kind, message)) => {
            report_failure(kind, &message);
            return 1;
        }
    };
    let mut created = match create::create(registry, &spec, supervisor.clone()) {
        Ok(c) => c,
        Err(e) => {
            log!("creation of {} failed ({}): {}", spec.id, e.kind, e.message);
            if let (Some(file), Some(c)) = (cast, spec.cast.as_ref()) {
                cast_session::discard(&c.file, &file);
            }
            report_failure(e.kind, &e.message);
            return 1;
        }
    };
    let ready = ReadyMessage::Ready {
        incarnation: created.claim.incarnation(),
        daemon_pid: std::process::id(),
        child_pid: created.child_pid,
        created_at_ms: created.created_at_ms,
    };
    let start_event = created.start_event.take();
    logging::rotate_at(created.claim.log_path(), created.claim.rotated_log_path());
    let (session, listener) = session::Session::new(created, &spec);
    let session = std::rc::Rc::new(session);
    if let (Some(file), Some(c)) = (cast, spec.cast.as_ref()) {
        session.start_first_cast(file, c);
    }
    if let Err(e) = report(&ready) {
        // The creator never learnt about this session: it must not linger as a
        // creation nobody asked for.
        log!("cannot report readiness ({e}); withdrawing the session");
        session.abandon();
        return 1;
    }
    if let Err(e) = stdout_to_devnull() {
        log!("cannot point stdout at /dev/null: {e}");
    }
    // The creator has its answer: now make session_start durable (SPEC.md §9.9).
    if let Some(Err(e)) = start_event.map(latch_registry::events::PendingSync::sync) {
        log!("cannot sync the session_start event: {e}");
    }
    log!(
        "session {} ready: incarnation {}, program pid {}",
        session.own.id,
        session.own.incarnation,
        session.child_pid
    );
    // What creation touched and freed is not needed again.
    memory::trim_memory(true);
    respawn::supervise(&root, spec, session, listener, signals, supervisor).await
}

/// Writes one readiness line to fd 1 (the readiness pipe), unbuffered.
fn report(msg: &ReadyMessage) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(msg).map_err(std::io::Error::other)?;
    line.push(b'\n');
    logging::write_all_fd(std::io::stdout().as_fd(), &line)
}

fn report_failure(kind: FailureKind, message: &str) {
    let msg = ReadyMessage::Failed {
        kind,
        message: message.to_owned(),
    };
    if let Err(e) = report(&msg) {
        log!("cannot report the failure: {e}");
    }
}

/// Replaces fd 1 with `/dev/null` so the readiness pipe is closed on our side and a
/// stray write can never block on or reach the creator.
fn stdout_to_devnull() -> std::io::Result<()> {
    let null = std::fs::OpenOptions::new().write(true).open("/dev/null")?;
    nix::unistd::dup2_stdout(&null)?;
    Ok(())
}

/// Closes every file descriptor above stderr. Whatever the creator's process had open
/// without close-on-exec (a shell's `3>&1`, a pipe to `| cat`) would otherwise stay
/// open for the session's whole life: a reader of that pipe would never see EOF.
fn close_inherited_fds() {
    // SAFETY: close_range takes no pointers; the fds above 2 are owned by nothing in
    // this process yet (the daemon has opened nothing, and `run` is documented to
    // take them over).
    let ret = unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
    if ret == 0 {
        return;
    }
    // Kernels before 5.9: close what /proc lists (the listing's own fd included,
    // which is closed again harmlessly once dropped).
    let fds: Vec<i32> = match std::fs::read_dir("/proc/self/fd") {
        Ok(dir) => dir
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .filter(|&fd| fd > 2)
            .collect(),
        Err(e) => {
            log!("cannot close inherited file descriptors: {e}");
            return;
        }
    };
    for fd in fds {
        // Nothing in this process owns these fds yet (as above); EBADF for one
        // already closed is harmless.
        let _ = nix::unistd::close(fd);
    }
}

/// Makes `root` and `spec.cwd` absolute (against the directory the daemon was
/// started in; the client already canonicalised both), then changes to `/`.
fn leave_start_directory(
    root: &std::path::Path,
    spec: &mut CreateSpec,
) -> std::io::Result<PathBuf> {
    let root = std::path::absolute(root)?;
    let cwd = std::path::absolute(&spec.cwd)?;
    spec.cwd = cwd.to_string_lossy().into_owned();
    nix::unistd::chdir("/")?;
    Ok(root)
}
