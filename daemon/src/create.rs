//! Creation under the session lock (SPEC.md §9.6), and giving the claim back.
//!
//! ```text
//! lock(id) ── record exists or unreadable? ── exists
//!    │        socket answers?               ── exists
//!    ├─ mint incarnation
//!    ├─ bind <id>.sock (umask 077, then chmod 0600), remember its (dev, ino)
//!    ├─ open PTY, spawn program (setsid + TIOCSCTTY), pidfd_open(program)
//!    ├─ write record (daemon and program identities, created_at)
//!    └─ unlock
//! ```
//!
//! A failure at any step undoes the earlier ones: the program is killed through a
//! pidfd and reaped, and the socket is unlinked only if it is still the inode this
//! daemon bound. The [`Claim`] kept afterwards is what lets the daemon, at exit,
//! touch the record and the socket only while they are still its own.

use std::cell::RefCell;
use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixListener as StdUnixListener;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::rc::Rc;
use std::sync::Arc;

use latch_registry::events::{Event, EventKind};
use latch_registry::spec::{FailureKind, ENV_INCARNATION, ENV_ROOT, ENV_SESSION_ID};
use latch_registry::FinalScreen;
use latch_registry::{
    now_ms, CreateSpec, ExitRecord, PidFd, ProcIdentity, Record, Registry, RegistryError,
    SessionLock, DEFAULT_LOCK_WAIT, RECORD_VERSION,
};
use latch_wire::{Incarnation, SessionId, SessionRef};
use nix::sys::stat::{umask, Mode};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use crate::event_writer::{EventWriter, NotQueued};
use crate::pty::{self, ChildProc, Program};
use crate::respawn::Supervisor;

/// Why creation failed: `kind` is the [`latch_registry::ReadyMessage::Failed`] kind
/// (`exists`, `busy`, `invalid`, `spawn`, `io`).
#[derive(Debug)]
pub(crate) struct CreateError {
    /// The failure kind.
    pub kind: FailureKind,
    /// What went wrong, for a person.
    pub message: String,
}

impl CreateError {
    fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    fn io(context: &str, e: impl std::fmt::Display) -> Self {
        Self::new(FailureKind::Io, format!("{context}: {e}"))
    }
}

pub(crate) fn registry_error(e: RegistryError) -> CreateError {
    let kind = match &e {
        RegistryError::Busy { .. } => FailureKind::Busy,
        RegistryError::UnsafeRoot { .. } | RegistryError::UnsafeKey { .. } => FailureKind::Refused,
        RegistryError::NoRoot
        | RegistryError::IdTooLongForSocket { .. }
        | RegistryError::ReservedId { .. } => FailureKind::Invalid,
        RegistryError::Corrupt { .. } => FailureKind::Exists,
        _ => FailureKind::Io,
    };
    CreateError::new(kind, e.to_string())
}

/// What a successful creation hands to the server.
#[derive(Debug)]
pub(crate) struct Created {
    /// The registry entries this daemon owns.
    pub claim: Claim,
    /// The listening socket.
    pub listener: tokio::net::UnixListener,
    /// The PTY master, non-blocking.
    pub master: AsyncFd<OwnedFd>,
    /// The program, watched through its pidfd.
    pub child: AsyncFd<ChildProc>,
    /// The program's pid.
    pub child_pid: u32,
    /// Creation time, ms since the epoch (as recorded).
    pub created_at_ms: u64,
    /// The `session_start` event, appended in order under the creation lock, made
    /// durable once readiness is reported (off the creator's wait; the record
    /// itself is durable before readiness).
    pub start_event: Option<latch_registry::events::PendingSync>,
}

/// The registry entries one creation owns: its record (while it names this
/// incarnation) and its socket (while it is the inode this daemon bound).
#[derive(Debug)]
pub(crate) struct Claim {
    registry: Arc<Registry>,
    own: SessionRef,
    socket_path: PathBuf,
    socket_ident: (u64, u64),
    /// The terminal-event writer, started at the first event (SPEC §9.9).
    events: RefCell<Option<EventWriter>>,
    /// The restart policy and parent, shared by every incarnation (SPEC §9.16).
    supervisor: Rc<Supervisor>,
}

impl Claim {
    /// The daemon's own creation.
    pub fn own(&self) -> &SessionRef {
        &self.own
    }

    /// `<root>/<id>.log`, the daemon's stderr as the client set it up.
    pub fn log_path(&self) -> PathBuf {
        self.registry.log_path(&self.own.id)
    }

    /// `<root>/<id>.log.1`, where the log is rotated to.
    pub fn rotated_log_path(&self) -> PathBuf {
        self.registry.rotated_log_path(&self.own.id)
    }

    /// The daemon's incarnation.
    pub fn incarnation(&self) -> Incarnation {
        self.own.incarnation
    }

    /// Queues a terminal event (SPEC §9.9) for the writer, which appends it if the
    /// record is still this creation's. Never waits: the lock and the sync are the
    /// writer's (`event_writer`).
    pub fn record_event(&self, kind: EventKind) -> Result<(), NotQueued> {
        let mut writer = self.events.borrow_mut();
        if writer.is_none() {
            match EventWriter::start(self.registry.clone(), self.own.clone()) {
                Ok(w) => *writer = Some(w),
                Err(e) => {
                    log!("cannot start the event writer: {e}");
                    return Err(NotQueued::Gone);
                }
            }
        }
        writer
            .as_ref()
            .map_or(Err(NotQueued::Gone), |w| w.send(kind))
    }

    /// Writes the terminal events still queued and ends their writer.
    fn close_events(&self) {
        if let Some(mut w) = self.events.borrow_mut().take() {
            w.close();
        }
    }

    /// At the program's exit, under the session lock: keeps the final screen and
    /// records `exit` if the record still names this incarnation, and unlinks the
    /// socket if it is still ours.
    pub fn finish(&self, exit: ExitRecord, screen: Option<FinalScreen>, draining: bool) {
        // Every terminal event precedes session_exit.
        self.close_events();
        let Some(lock) = self.lock_patiently() else {
            // Without the lock the record cannot be touched. The socket can: while our
            // listener is open nobody can have replaced it through the registry
            // (a creator unlinks only a socket that refuses connections), and the
            // inode check catches a replacement by hand.
            self.unlink_socket_if_ours();
            return;
        };
        // Unlink first, so that the exit record and event imply the socket is gone.
        self.unlink_socket_if_ours();
        match self.registry.read_record(&self.own.id) {
            Ok(Some(mut rec)) if rec.incarnation == self.own.incarnation => {
                let kind = EventKind::SessionExit {
                    code: exit.code,
                    signal: exit.signal,
                };
                rec.exit = Some(exit);
                // Under this lock: restart, flapping, or the end (SPEC §9.16).
                let then = self.supervisor.decide(&mut rec, draining);
                // The final screen first, so an exit on record implies its screen.
                if let Some(screen) = &screen {
                    if let Err(e) = self.registry.write_final_screen(&lock, screen) {
                        log!("cannot keep the final screen: {e}");
                    }
                }
                match self.registry.write_record(&lock, &rec) {
                    Ok(()) => log!("exit recorded"),
                    Err(e) => log!("cannot record the exit: {e}"),
                }
                let ev = Event::new(&self.own.id, &self.own.incarnation, kind);
                if let Err(e) = self.registry.append_event(&lock, &ev) {
                    log!("cannot append the exit event: {e}");
                }
                if let Some(kind) = then {
                    let ev = Event::new(&self.own.id, &self.own.incarnation, kind);
                    if let Err(e) = self.registry.append_event(&lock, &ev) {
                        log!("cannot append the supervision event: {e}");
                    }
                }
            }
            Ok(Some(rec)) => log!(
                "record now belongs to incarnation {}; leaving it alone",
                rec.incarnation
            ),
            Ok(None) => log!("record was removed; not recreating it"),
            Err(e) => log!("cannot read the record ({e}); leaving it alone"),
        }
        drop(lock);
    }

    /// Gives the creation back (the creator never learnt of it): removes the record
    /// if it still names this incarnation and unlinks the socket if it is still ours.
    pub fn withdraw(&self) {
        self.close_events();
        let lock = self.lock_patiently();
        if lock.is_some() {
            match self.registry.read_record(&self.own.id) {
                Ok(Some(rec)) if rec.incarnation == self.own.incarnation => {
                    let path = self.registry.record_path(&self.own.id);
                    if let Err(e) = fs::remove_file(&path) {
                        log!("cannot remove {}: {e}", path.display());
                    }
                }
                Ok(_) => {}
                Err(e) => log!("cannot read the record ({e}); leaving it alone"),
            }
        }
        self.unlink_socket_if_ours();
    }

    fn lock_patiently(&self) -> Option<SessionLock> {
        for attempt in 1..=3 {
            match self.registry.lock(&self.own.id, DEFAULT_LOCK_WAIT) {
                Ok(lock) => return Some(lock),
                Err(e) => log!("cannot take the session lock (attempt {attempt}): {e}"),
            }
        }
        None
    }

    /// Unlinks the socket path only if it is still the inode this daemon bound.
    fn unlink_socket_if_ours(&self) {
        unlink_if_ours(&self.socket_path, self.socket_ident);
    }
}

fn unlink_if_ours(path: &Path, ident: (u64, u64)) {
    match fs::symlink_metadata(path) {
        Ok(m) if (m.dev(), m.ino()) == ident => {
            if let Err(e) = fs::remove_file(path) {
                log!("cannot unlink {}: {e}", path.display());
            }
        }
        Ok(_) => log!(
            "{} is no longer this daemon's socket; leaving it alone",
            path.display()
        ),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => log!("cannot stat {}: {e}", path.display()),
    }
}

/// What to undo if a later step fails.
#[derive(Debug, Default)]
struct Undo {
    socket: Option<(PathBuf, (u64, u64))>,
    child: Option<Child>,
    record: Option<(SessionId, Incarnation)>,
}

impl Undo {
    fn run(mut self, registry: &Registry) {
        if let Some(mut child) = self.child.take() {
            // Unreaped, so the pid cannot have been recycled: the pidfd names it.
            let killed = PidFd::open(child.id()).and_then(|fd| fd.send_signal(libc::SIGKILL));
            if let Err(e) = killed {
                log!("cannot kill the program through a pidfd ({e}); using its child handle");
                let _ = child.kill();
            }
            let _ = child.wait();
        }
        if let Some((id, inc)) = &self.record {
            if let Ok(Some(rec)) = registry.read_record(id) {
                if rec.incarnation == *inc {
                    let _ = fs::remove_file(registry.record_path(id));
                }
            }
        }
        if let Some((path, ident)) = &self.socket {
            unlink_if_ours(path, *ident);
        }
    }
}

/// Creates the session described by `spec` in `registry`. Must run inside the
/// daemon's runtime (the listener, PTY and pidfd are registered with it).
pub(crate) fn create(
    registry: Registry,
    spec: &CreateSpec,
    supervisor: Rc<Supervisor>,
) -> Result<Created, CreateError> {
    if spec.command.is_empty() {
        return Err(CreateError::new(FailureKind::Invalid, "no program to run"));
    }
    // Checked before anything is allocated for them (SPEC.md §8).
    if let Err(e) = latch_wire::limits::check_size(spec.rows, spec.cols) {
        return Err(CreateError::new(
            FailureKind::Invalid,
            format!("terminal size {}x{} is invalid: {e}", spec.rows, spec.cols),
        ));
    }
    if spec.scrollback > latch_wire::limits::MAX_SCROLLBACK {
        return Err(CreateError::new(
            FailureKind::Invalid,
            format!(
                "scrollback of {} lines is over the limit of {}",
                spec.scrollback,
                latch_wire::limits::MAX_SCROLLBACK
            ),
        ));
    }
    registry.check_new_id(&spec.id).map_err(registry_error)?;
    let lock = registry
        .lock(&spec.id, DEFAULT_LOCK_WAIT)
        .map_err(registry_error)?;
    let mut undo = Undo::default();
    match create_locked(&registry, &lock, spec, &mut undo, None) {
        Ok(made) => {
            drop(lock);
            Ok(into_created(made, Arc::new(registry), supervisor))
        }
        Err(e) => {
            undo.run(&registry);
            drop(lock);
            Err(e)
        }
    }
}

/// Starts the program again as a new incarnation of the session whose ended
/// incarnation `previous` records, under its lock (SPEC §9.16); `restarts` counts
/// this one.
pub(crate) fn respawn(
    registry: Arc<Registry>,
    lock: &SessionLock,
    spec: &CreateSpec,
    previous: &Record,
    restarts: u32,
    supervisor: Rc<Supervisor>,
) -> Result<Created, CreateError> {
    let mut undo = Undo::default();
    match create_locked(&registry, lock, spec, &mut undo, Some((previous, restarts))) {
        Ok(made) => Ok(into_created(made, registry, supervisor)),
        Err(e) => {
            undo.run(&registry);
            Err(e)
        }
    }
}

type Made = (Parts, SessionRef, PathBuf, (u64, u64));

fn into_created(made: Made, registry: Arc<Registry>, supervisor: Rc<Supervisor>) -> Created {
    let (parts, own, socket_path, socket_ident) = made;
    Created {
        claim: Claim {
            registry,
            own,
            socket_path,
            socket_ident,
            events: RefCell::new(None),
            supervisor,
        },
        listener: parts.listener,
        master: parts.master,
        child: parts.child,
        child_pid: parts.child_pid,
        created_at_ms: parts.created_at_ms,
        start_event: Some(parts.start_event),
    }
}

struct Parts {
    listener: tokio::net::UnixListener,
    master: AsyncFd<OwnedFd>,
    child: AsyncFd<ChildProc>,
    child_pid: u32,
    created_at_ms: u64,
    start_event: latch_registry::events::PendingSync,
}

fn create_locked(
    registry: &Registry,
    lock: &SessionLock,
    spec: &CreateSpec,
    undo: &mut Undo,
    previous: Option<(&Record, u32)>,
) -> Result<Made, CreateError> {
    let id = &spec.id;
    match registry.read_record(id) {
        // A respawn replaces the ended incarnation it checked under this lock.
        _ if previous.is_some() => {}
        Ok(None) => {}
        Ok(Some(rec)) => {
            return Err(CreateError::new(FailureKind::Exists,
                format!(
                    "session {id} already exists (incarnation {}); remove it first with `latch rm {id}`",
                    rec.incarnation
                ),
            ))
        }
        Err(RegistryError::Corrupt { path, reason }) => {
            return Err(CreateError::new(FailureKind::Exists,
                format!(
                    "session {id} already has a record that cannot be read ({}: {reason}); \
                     remove it first with `latch rm {id}`",
                    path.display()
                ),
            ))
        }
        Err(e) => return Err(registry_error(e)),
    }
    registry.remove_stale_socket(lock).map_err(registry_error)?;
    let socket_path = registry.socket_path(id);
    if fs::symlink_metadata(&socket_path).is_ok() {
        return Err(CreateError::new(
            FailureKind::Exists,
            format!(
                "a daemon is still listening on {}; remove the session first with `latch rm {id}`",
                socket_path.display()
            ),
        ));
    }
    let incarnation = registry.mint(id).map_err(registry_error)?;
    let own = SessionRef::new(id.clone(), incarnation);

    let (listener, socket_ident) = bind_private(&socket_path)?;
    undo.socket = Some((socket_path.clone(), socket_ident));

    let pair = pty::open(spec.rows, spec.cols)
        .map_err(|e| CreateError::io("cannot open a terminal", e))?;
    let mut env: Vec<(OsString, OsString)> = spec
        .env
        .iter()
        .filter(|(k, _)| ![ENV_SESSION_ID, ENV_INCARNATION, ENV_ROOT].contains(&k.as_str()))
        .map(|(k, v)| (k.into(), v.into()))
        .collect();
    env.push((ENV_SESSION_ID.into(), id.as_str().into()));
    env.push((ENV_INCARNATION.into(), incarnation.to_string().into()));
    env.push((ENV_ROOT.into(), registry.root().as_os_str().to_owned()));
    // A lone shell starts with latch's integration (SPEC §4.6); the record keeps
    // the command as given. Scripts that cannot be put in place mean none, never
    // a failed creation.
    let launch = integration(registry, spec);
    let command = match launch {
        Some(l) => {
            env.retain(|(k, _)| !l.unset.contains(k) && !l.set.iter().any(|(s, _)| s == k));
            env.extend(l.set);
            l.command
        }
        None => spec.command.clone(),
    };
    let program = Program {
        command: &command,
        env,
        cwd: &spec.cwd,
    };
    let tty_name = pair.name.clone();
    let child =
        pty::spawn(&program, pair.slave).map_err(|e| CreateError::new(FailureKind::Spawn, e.0))?;
    let child_pid = child.id();
    undo.child = Some(child);
    // The program is our unreaped child, so its pid still names it: no race.
    let pidfd = PidFd::open(child_pid)
        .map_err(|e| CreateError::io("cannot open a pidfd for the program", e))?;

    let record = new_record(registry, spec, incarnation, child_pid, tty_name, previous)?;

    // Register with the runtime before the record makes the session visible.
    pty::set_nonblocking(pair.master.as_fd())
        .map_err(|e| CreateError::io("cannot configure the terminal", e))?;
    let master = crate::watch::watch(pair.master, Interest::READABLE | Interest::WRITABLE)
        .map_err(|e| CreateError::io("cannot watch the terminal", e))?;
    let child = crate::watch::watch(ChildProc { pidfd }, Interest::READABLE)
        .map_err(|e| CreateError::io("cannot watch the program", e))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| CreateError::io("cannot configure the socket", e))?;
    let listener = tokio::net::UnixListener::from_std(listener)
        .map_err(|e| CreateError::io("cannot watch the socket", e))?;

    // A respawn's record replaces the session's only one: never removed on failure.
    if previous.is_none() {
        undo.record = Some((id.clone(), incarnation));
    }
    registry
        .write_record(lock, &record)
        .map_err(registry_error)?;
    let start = start_kind(&record, previous);
    let start_event = registry
        .append_event_unsynced(lock, &Event::new(id, &incarnation, start))
        .map_err(registry_error)?;
    // Success: nothing to undo. The std handle is dropped without waiting; the
    // program is reaped by the exit watcher through waitpid.
    undo.child = None;
    undo.socket = None;
    undo.record = None;
    Ok((
        Parts {
            listener,
            master,
            child,
            child_pid,
            created_at_ms: record.created_at_ms,
            start_event,
        },
        own,
        socket_path,
        socket_ident,
    ))
}

/// The record of a new creation (or a respawn of `previous`), as written.
fn new_record(
    registry: &Registry,
    spec: &CreateSpec,
    incarnation: Incarnation,
    child_pid: u32,
    tty_name: String,
    previous: Option<(&Record, u32)>,
) -> Result<Record, CreateError> {
    let id = &spec.id;
    Ok(Record {
        version: RECORD_VERSION,
        id: id.clone(),
        incarnation,
        display_name: spec.display_name.clone(),
        command: spec.command.clone(),
        cwd: spec.cwd.clone(),
        created_at_ms: now_ms(),
        daemon: ProcIdentity::of(std::process::id())
            .map_err(|e| CreateError::io("cannot read the daemon's identity", e))?,
        child: ProcIdentity::of(child_pid)
            .map_err(|e| CreateError::io("cannot read the program's identity", e))?,
        tags: spec.tags.clone(),
        legacy_policy: spec.legacy_policy,
        exit: None,
        tty: Some(tty_name),
        // Bound to this creation under the key (SPEC.md §2.4): an owner edited by
        // hand, added or stripped later no longer verifies.
        owner: spec.owner.clone(),
        owner_mac: Some(registry.owner_mac(id, &incarnation, spec.owner.as_ref())),
        restart: spec.supervision.restart,
        previous_incarnation: previous
            .map(|(p, _)| p.incarnation)
            .or(spec.supervision.previous_incarnation),
        parent: spec.supervision.parent.clone(),
        kill_requested_at_ms: None,
        status_reason: None,
        env: spec.supervision.record_env.clone(),
        resume_command: spec.supervision.resume_command.clone(),
        // What other builds wrote stays with the session across a respawn.
        extra: previous.map(|(p, _)| p.extra.clone()).unwrap_or_default(),
    })
}

/// `session_start`, or for a respawn `session_respawn` (SPEC §9.9).
fn start_kind(record: &Record, previous: Option<(&Record, u32)>) -> EventKind {
    match previous {
        Some((p, restarts)) => EventKind::SessionRespawn {
            previous_incarnation: p.incarnation,
            command: record.command.clone(),
            child_pid: record.child.pid,
            restarts,
        },
        None => EventKind::SessionStart {
            command: record.command.clone(),
            daemon_pid: record.daemon.pid,
            child_pid: record.child.pid,
            owner: record.owner.clone(),
        },
    }
}

/// Binds `path` with mode 0600 from the start (umask 077 around `bind`, so there is
/// no window where the socket is reachable by others), and returns its (dev, ino).
fn bind_private(path: &Path) -> Result<(StdUnixListener, (u64, u64)), CreateError> {
    // The process is single-threaded here, so the umask change affects nobody else;
    // it is restored at once because the program inherits the daemon's umask.
    let old = umask(Mode::from_bits_truncate(0o077));
    let bound = StdUnixListener::bind(path);
    umask(old);
    let listener = bound.map_err(|e| {
        if e.kind() == io::ErrorKind::AddrInUse {
            CreateError::new(
                FailureKind::Exists,
                format!("{} appeared while creating; try again", path.display()),
            )
        } else {
            CreateError::io(&format!("cannot bind {}", path.display()), e)
        }
    })?;
    let fixed = fs::set_permissions(path, fs::Permissions::from_mode(0o600))
        .and_then(|()| fs::symlink_metadata(path));
    match fixed {
        Ok(meta) => Ok((listener, (meta.dev(), meta.ino()))),
        Err(e) => {
            // We bound it a moment ago under the lock: it is ours to remove.
            let _ = fs::remove_file(path);
            Err(CreateError::io(
                &format!("cannot secure {}", path.display()),
                e,
            ))
        }
    }
}

/// How the spec's program is started with shell integration, if it is a lone
/// shell latch knows and integration is on (SPEC §4.6).
fn integration(
    registry: &latch_registry::Registry,
    spec: &CreateSpec,
) -> Option<latch_registry::shell::Launch> {
    use latch_registry::shell;
    if spec.shell_integration == shell::Integration::Off {
        return None;
    }
    shell::Shell::of(&spec.command)?;
    if let Err(e) = shell::install(registry.root()) {
        log!("shell integration is off for this session: cannot write its scripts: {e}");
        return None;
    }
    shell::launch(registry.root(), &spec.command, |k| {
        spec.env.get(k).map(std::ffi::OsString::from)
    })
}
