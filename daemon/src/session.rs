//! The session's shared state and the effects the connection state machine emits.
//!
//! Split by concern: the fan-out and the PTY size rule (`fanout`), the attached
//! stream (`stream`: ATTACH, resynchronisation, DETACH, RESIZE), the replies cut
//! from the session's state (`replies`), the program's input queue (`input`), the
//! terminal events' rate limit (`event_limit`) and memory trimming (`memory`).
//!
//! Everything runs on one thread (a current-thread runtime with a `LocalSet`), and no
//! method here awaits. So each method is atomic with respect to PTY output: output is
//! sent to every attached client and queued for the emulator in one step, and ATTACH
//! applies the emulator's queue, cuts its SCREEN and joins the fan-out in one step
//! (the consistent cut: the snapshot reflects exactly the bytes fanned out before).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::num::NonZeroU16;
use std::os::fd::{AsFd, OwnedFd};
use std::rc::Rc;
use std::time::Instant;

use bytes::{Buf, Bytes};
use latch_registry::{CreateSpec, ExitRecord};
use latch_wire::codec::Outbound;
use latch_wire::limits::{CLIENT_QUEUE_BYTES, MAX_CLIENT_FRAME, MAX_SERVER_FRAME};
use latch_wire::server::{ServerConfig, ServerConn};
use latch_wire::{
    ErrorCode, ExitStatus, LegacyPolicy, Limits, Owner, ServerFrame, SessionRef, SUPPORTED,
};
use tokio::io::unix::AsyncFd;
use tokio::net::UnixListener;
use tokio::sync::Notify;

use crate::create::{Claim, Created};
use crate::cursor::OutputLog;
use crate::event_limit::{self, EventLimiter};
use crate::fanout::Fanout;
use crate::input::InputQueue;
use crate::outbound::{Peer, ReplyBudget};
use crate::pty::{self, ChildProc};
use latch_screen as screen;

/// Most output drained from the PTY after the program exits (a background process
/// that keeps writing cannot hold the exit up forever).
const EXIT_DRAIN_MAX: usize = 4 * 1024 * 1024;
/// Bytes per PTY read.
pub(crate) const READ_BUF: usize = 64 * 1024;

/// The session: identity (immutable), terminal, clients, program state.
pub(crate) struct Session {
    /// The daemon's own creation.
    pub own: SessionRef,
    pub(crate) display_name: Option<String>,
    pub(crate) created_at_ms: u64,
    pub(crate) started: Instant,
    pub(crate) daemon_pid: u32,
    /// The program's pid.
    pub child_pid: u32,
    legacy_policy: LegacyPolicy,
    pub(crate) owner: Option<Owner>,
    pub(crate) claim: Claim,
    /// The PTY master.
    pub master: AsyncFd<OwnedFd>,
    /// The program, through its pidfd.
    pub child: AsyncFd<ChildProc>,
    pub(crate) term: RefCell<screen::Emulator>,
    pub(crate) size: Cell<(u16, u16)>,
    /// The attached connections (SPEC §5.4).
    pub(crate) attached: RefCell<Fanout>,
    clients: RefCell<HashMap<u64, Rc<Peer>>>,
    next_client: Cell<u64>,
    /// Reply bytes queued over every connection (SPEC.md §8).
    replies: Rc<ReplyBudget>,
    pub(crate) input: RefCell<InputQueue>,
    /// Wakes the PTY writer: input was queued.
    pub input_ready: Notify,
    /// Wakes connections waiting for room in the input queue.
    pub input_room: Notify,
    /// Wakes the exit path: a connection ended.
    pub connection_gone: Notify,
    pub(crate) exit: Cell<Option<ExitStatus>>,
    pub(crate) draining: Cell<bool>,
    /// Per terminal-event type, its rate limit (SPEC §9.9).
    event_limit: RefCell<EventLimiter>,
    /// The output cursor, the ring and the shell's marks (SPEC §4.6, §8).
    pub(crate) log: RefCell<OutputLog>,
    /// The recordings (SPEC §4.8).
    pub(crate) casts: RefCell<crate::cast::Casts>,
    /// Wakes the checkpoint task: the program wrote (SPEC §9.18).
    pub output_seen: Notify,
    /// The run lease (SPEC §4.7) and whether the program was started with
    /// latch's shell integration.
    pub(crate) lease: crate::lease::Lease,
    pub(crate) integration: bool,
    /// Hibernation's quiet period (SPEC §4.4).
    pub(crate) hibernation: crate::hibernate::Hibernation,
}

impl Session {
    /// The session for a fresh creation, and the listening socket to serve it on.
    pub fn new(created: Created, spec: &CreateSpec) -> (Self, UnixListener) {
        let rows = NonZeroU16::new(spec.rows).unwrap_or(NonZeroU16::MIN);
        let cols = NonZeroU16::new(spec.cols).unwrap_or(NonZeroU16::MIN);
        let facts = cast_facts(&created, spec);
        let session = Self {
            own: created.claim.own().clone(),
            display_name: spec.display_name.clone(),
            created_at_ms: created.created_at_ms,
            started: Instant::now(),
            daemon_pid: std::process::id(),
            child_pid: created.child_pid,
            legacy_policy: spec.legacy_policy,
            owner: spec.owner.clone(),
            claim: created.claim,
            master: created.master,
            child: created.child,
            term: RefCell::new(screen::Emulator::new(
                rows.get(),
                cols.get(),
                spec.scrollback,
            )),
            size: Cell::new((rows.get(), cols.get())),
            attached: RefCell::new(Fanout::default()),
            clients: RefCell::new(HashMap::new()),
            next_client: Cell::new(1),
            replies: Rc::new(ReplyBudget::from_env()),
            input: RefCell::new(InputQueue::default()),
            input_ready: Notify::new(),
            input_room: Notify::new(),
            connection_gone: Notify::new(),
            exit: Cell::new(None),
            draining: Cell::new(false),
            event_limit: RefCell::new(EventLimiter::default()),
            log: RefCell::new(OutputLog::default()),
            output_seen: Notify::new(),
            casts: RefCell::new(crate::cast::Casts::new(facts)),
            lease: crate::lease::Lease::default(),
            integration: spec.shell_integration != latch_registry::shell::Integration::Off
                && latch_registry::shell::Shell::of(&spec.command).is_some(),
            hibernation: crate::hibernate::Hibernation::default(),
        };
        if let Some(screen) = &spec.supervision.initial_screen {
            crate::checkpoint::draw(&mut session.term.borrow_mut(), screen);
        }
        (session, created.listener)
    }

    /// The state machine's fixed facts for a new connection.
    pub fn server_config(&self) -> ServerConfig {
        let u32_of = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        ServerConfig {
            own: self.own.clone(),
            versions: SUPPORTED,
            limits: Limits {
                max_client_frame: u32_of(MAX_CLIENT_FRAME),
                max_server_frame: u32_of(MAX_SERVER_FRAME),
                client_queue_bytes: u32_of(CLIENT_QUEUE_BYTES),
            },
            server_name: concat!("latch-daemon ", env!("CARGO_PKG_VERSION")).to_owned(),
            legacy_policy: self.legacy_policy,
        }
    }

    /// The legacy policy in force.
    pub fn legacy_policy(&self) -> LegacyPolicy {
        self.legacy_policy
    }

    /// How the program ended, once it has.
    pub fn exited(&self) -> Option<ExitStatus> {
        self.exit.get()
    }

    /// Whether the daemon was asked to shut down (no new binds or effects).
    pub fn draining(&self) -> bool {
        self.draining.get()
    }

    /// Starts draining (SIGTERM/SIGHUP to the daemon).
    pub fn set_draining(&self) {
        self.draining.set(true);
        // The run lease ends with the creation (SPEC §4.7).
        if let Some(holder) = self.lease.revoke() {
            let peer = self.clients.borrow().get(&holder).cloned();
            if let Some(peer) = peer {
                peer.with_conn(|c| c.set_leased(false));
                let mut facts = self.lease_facts(false);
                facts.granted = false;
                peer.send(Outbound::Strict(ServerFrame::Leased(Box::new(facts))));
            }
        }
    }

    // ----- connections -----

    /// Registers a new connection.
    pub fn register(&self) -> Rc<Peer> {
        let id = self.next_client.get();
        self.next_client.set(id.wrapping_add(1));
        let conn = ServerConn::new(self.server_config(), Instant::now());
        let client = Rc::new(Peer::new(id, conn, self.replies.clone()));
        self.clients.borrow_mut().insert(id, client.clone());
        client
    }

    /// Forgets a finished connection.
    pub fn unregister(&self, id: u64) {
        self.detach(id);
        self.lease.give_back(id);
        self.clients.borrow_mut().remove(&id);
        self.connection_gone.notify_one();
        self.hibernation.woken(&self.term.borrow());
    }

    /// Connections being served.
    pub fn connections(&self) -> usize {
        self.clients.borrow().len()
    }

    /// Closes every connection politely (at exit: queues are flushed first).
    pub fn close_all(&self) {
        let clients: Vec<Rc<Peer>> = self.clients.borrow().values().cloned().collect();
        for c in clients {
            c.close();
        }
    }

    // ----- output -----

    /// Sends program output to every attached client, in chunks of at most
    /// `MAX_OUTPUT_CHUNK` sharing one buffer, then queues it for the emulator, which
    /// applies it lazily (`screen::Emulator::push`). Every reader of the emulator
    /// applies the queue first, so a snapshot still reflects exactly the bytes
    /// fanned out before it.
    pub fn output(&self, data: &[u8]) {
        let cut = self.attached.borrow().output(data);
        for id in cut {
            self.detach(id);
        }
        {
            let mut log = self.log.borrow_mut();
            let from = log.cursor();
            log.push(data, latch_registry::now_ms());
            self.casts.borrow_mut().output(data, from, log.marks());
        }
        self.term.borrow_mut().push(data);
        self.settle();
        self.output_seen.notify_one();
        self.hibernation.poke();
    }

    /// The output cursor (SPEC §4.7).
    pub fn output_cursor(&self) -> u64 {
        self.log.borrow().facts().output_cursor
    }

    /// Whether output is queued for the emulator (or memory it can free).
    pub fn output_queued(&self) -> bool {
        let term = self.term.borrow();
        term.queued() > 0 || term.releasable()
    }

    /// Applies the output queued for the emulator (when the program is quiet).
    pub fn apply_output(&self) {
        // After a burst that moved rows into the compact scrollback, the
        // emulator's spare rows (and the burst's read buffer) were freed in the
        // middle of the heap: hand their pages back, and the stack the parsing
        // touched. After a keystroke's echo nothing of the kind was freed, and a
        // trim there would cost every quiet moment of an interactive session
        // hundreds of microseconds.
        if self.term.borrow_mut().release() {
            crate::memory::trim_memory(false);
        }
        self.settle();
    }

    /// Acts on what the emulator produced besides the screen: its answers to the
    /// program's queries go to the program's input queue, and terminal events go
    /// to the event log, as far as the rate limit allows (`event_limit`, SPEC §4.4, §9.9).
    pub(crate) fn settle(&self) {
        let (answers, events) = {
            let mut term = self.term.borrow_mut();
            (term.take_answers(), term.take_events())
        };
        if !answers.is_empty() && self.exit.get().is_none() {
            self.queue_answers(answers);
        }
        for e in events {
            self.term_event(e);
        }
    }

    /// Queues answers for the program, within the answers' bound (SPEC §8); logs
    /// when the program stops reading them, once per stretch of drops.
    fn queue_answers(&self, answers: Vec<Vec<u8>>) {
        let mut q = self.input.borrow_mut();
        let answered = q.push_answers(answers);
        let queued = !q.is_empty();
        let (total, held) = (q.dropped(), q.answers());
        drop(q);
        if answered.began_dropping {
            log!(
                "the program does not read its input: query answers beyond {held} bytes \
                 are dropped ({total} so far)"
            );
        }
        if queued {
            self.input_ready.notify_one();
        }
    }

    fn term_event(&self, e: screen::TermEvent) {
        let kind = event_limit::kind_of(&e);
        let Some(carried) = self.event_limit.borrow_mut().admit(kind, Instant::now()) else {
            return;
        };
        // The output the emulator has applied: the event lies at or before it
        // (SPEC §9.9).
        let at = Some(
            self.log
                .borrow()
                .facts()
                .output_cursor
                .saturating_sub(self.term.borrow().queued() as u64),
        );
        // Queued for the event writer, never written here (SPEC §9.9). One it cannot
        // take counts as dropped, with those it carried.
        let event = event_limit::event_kind(e, carried, at);
        if self.claim.record_event(event).is_err() {
            self.event_limit.borrow_mut().not_recorded(kind, carried);
        }
    }

    /// Whether the emulator answers the program's queries: only while no
    /// read-write client is attached, whose terminal answers them (SPEC §4.4).
    pub(crate) fn update_answering(&self) {
        let writers = self.attached.borrow().has_writer();
        self.term.borrow_mut().set_answering(!writers);
        self.settle();
    }

    /// Reads whatever the PTY still holds, without waiting (at the program's exit, so
    /// that every byte reaches clients before EXIT).
    pub fn drain_pty(&self) {
        let mut buf = vec![0u8; READ_BUF];
        let mut total = 0usize;
        while total < EXIT_DRAIN_MAX {
            match pty::read(self.master.get_ref().as_fd(), &mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    total += n;
                    self.output(buf.get(..n).unwrap_or_default());
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                // WouldBlock: nothing left; EIO: the slave side is closed.
                Err(_) => break,
            }
        }
    }

    /// INPUT: queue bytes for the PTY, in arrival order across all connections.
    ///
    /// While the queue is over `INPUT_QUEUE_BYTES` (the program is not reading),
    /// INPUT from an attached read-write client is still queued, and that client's
    /// connection stops being read until there is room (backpressure on the typist
    /// alone); INPUT from any other connection is refused with `input-full` and
    /// nothing of it is queued (SPEC.md §8). No other connection ever waits.
    pub fn input(&self, bytes: Bytes, attached_writer: bool) -> Result<(), ServerFrame> {
        if bytes.is_empty() {
            return Ok(());
        }
        if !attached_writer && !self.input_has_room() {
            return Err(ServerFrame::error(
                ErrorCode::InputFull,
                format!(
                    "the program is not reading its input ({} bytes queued); nothing was queued",
                    self.input.borrow().pending()
                ),
            ));
        }
        let mut bytes = bytes;
        if self.input.borrow().is_empty() {
            // Nothing is queued before these bytes: write what the terminal takes
            // now, so a keystroke reaches the program without a task hop; the
            // writer task takes the rest (and any error) in order.
            if let Ok(n) = pty::write(self.master.get_ref().as_fd(), &bytes) {
                if n >= bytes.len() {
                    return Ok(());
                }
                bytes.advance(n);
            }
        }
        self.input.borrow_mut().push_input(bytes);
        self.input_ready.notify_one();
        Ok(())
    }

    /// Whether the input queue has room (connections wait on `input_room` if not).
    pub fn input_has_room(&self) -> bool {
        self.input.borrow().has_room()
    }

    /// The PTY writer's view: writes the oldest queued input with `write`; returns
    /// whether anything is left.
    pub fn write_input(
        &self,
        write: impl FnOnce(&[u8]) -> std::io::Result<usize>,
    ) -> std::io::Result<bool> {
        let mut q = self.input.borrow_mut();
        if q.is_empty() {
            return Ok(false);
        }
        q.write_front(write)?;
        let more = !q.is_empty();
        let room = q.has_room();
        drop(q);
        if room {
            self.input_room.notify_waiters();
        }
        Ok(more)
    }

    /// Drops queued input (the program's side is gone).
    pub fn discard_input(&self) {
        self.input.borrow_mut().clear();
        self.input_room.notify_waiters();
    }

    /// Whether input is queued.
    pub fn input_pending(&self) -> bool {
        !self.input.borrow().is_empty()
    }

    /// SIGNAL: through the pidfd opened at spawn, never by pid.
    pub fn signal(&self, sig: i32) -> Result<(), ServerFrame> {
        self.child.get_ref().pidfd.send_signal(sig).map_err(|e| {
            if e.raw_os_error() == Some(libc::ESRCH) {
                ServerFrame::error(ErrorCode::Exited, "the program has exited")
            } else {
                ServerFrame::error(ErrorCode::Internal, format!("cannot signal: {e}"))
            }
        })
    }

    /// STOP's signal (SPEC.md §5.6): SIGHUP is a hangup of the whole terminal
    /// session, as when a terminal closes or tmux kills a pane: SIGHUP then SIGCONT to
    /// the program and to every other process whose session is the program's
    /// (proven, `latch_registry::proc::session_members`). Any other signal goes to
    /// the program alone; when it has exited, whatever is left of its session is
    /// hung up, then killed (`serve::sweep`).
    pub fn stop(&self, sig: i32) -> Result<(), ServerFrame> {
        if sig != libc::SIGHUP {
            return self.signal(sig);
        }
        self.hang_up();
        Ok(())
    }

    /// Hangs the terminal session up: SIGHUP and SIGCONT to the program and every
    /// proven member of its session. The program is this daemon's unreaped child,
    /// so its pid cannot name another session meanwhile.
    pub fn hang_up(&self) {
        let members = latch_registry::proc::signal_session_members(
            self.child_pid,
            &[libc::SIGHUP, libc::SIGCONT],
        );
        let pidfd = &self.child.get_ref().pidfd;
        for sig in [libc::SIGHUP, libc::SIGCONT] {
            if let Err(e) = pidfd.send_signal(sig) {
                if e.raw_os_error() != Some(libc::ESRCH) {
                    log!("cannot signal the program: {e}");
                }
            }
        }
        log!(
            "hung up the terminal session: the program and {} other process(es)",
            members.len()
        );
    }

    // ----- exit -----

    /// The program has exited: refuse further input, record the exit (if the record
    /// is still ours) and unlink the socket (if still ours), then send EXIT to every
    /// attached client.
    pub fn program_exited(&self, status: ExitStatus) {
        self.exit.set(Some(status));
        self.discard_input();
        let exit = ExitRecord {
            code: status.code,
            signal: status.signal,
            exited_at_ms: latch_registry::now_ms(),
        };
        let screen = self.final_screen(exit.clone());
        // Every recording ends here, its cast_stop before session_exit (SPEC §4.8).
        self.end_casts(&crate::cast::exit_label(status), "exit");
        self.claim.finish(exit, Some(screen), self.draining());
        // EXIT reaches every attached client, after a fresh screen for any that is
        // behind, whatever the bound.
        let attached = self.attached.borrow_mut().take_all();
        for a in &attached {
            self.resync_now(&a.client, a.screen);
            a.client
                .stream_final(Outbound::Strict(ServerFrame::Exit(status)));
        }
    }

    /// The creator never learnt of this session: kill the program through its pidfd,
    /// reap it, and give the registry entries back.
    pub fn abandon(&self) {
        if let Err(e) = self.child.get_ref().pidfd.send_signal(libc::SIGKILL) {
            log!("cannot kill the program: {e}");
        }
        if let Ok(pid) = i32::try_from(self.child_pid) {
            let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
        }
        self.claim.withdraw();
    }
}

/// What a recording's header says of the creation (SPEC §4.8).
fn cast_facts(created: &Created, spec: &CreateSpec) -> crate::cast::HeaderFacts {
    crate::cast::HeaderFacts {
        own: created.claim.own().clone(),
        title: spec
            .display_name
            .clone()
            .unwrap_or_else(|| spec.id.to_string()),
        term: spec.env.get("TERM").cloned(),
        shell: spec.env.get("SHELL").cloned(),
    }
}
