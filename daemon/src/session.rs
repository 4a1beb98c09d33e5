//! The session's shared state and the effects the connection state machine emits.
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
use latch_wire::legacy::LegacyServerFrame;
use latch_wire::limits::{
    CLIENT_QUEUE_BYTES, MAX_CLIENT_FRAME, MAX_OUTPUT_CHUNK, MAX_SERVER_FRAME,
};
use latch_wire::server::{ServerConfig, ServerConn};
use latch_wire::{
    ErrorCode, ExitStatus, LegacyPolicy, Limits, Owner, ServerFrame, SessionRef, StatusReply,
    SUPPORTED,
};
use tokio::io::unix::AsyncFd;
use tokio::net::UnixListener;
use tokio::sync::Notify;

use crate::create::{Claim, Created};
use crate::cursor::OutputLog;
use crate::input::InputQueue;
use crate::outbound::{pty_size, Peer, Phase, ReplyBudget, ScreenAsk};
use crate::pty::{self, ChildProc};
use crate::status;
use latch_screen as screen;

/// Most output drained from the PTY after the program exits (a background process
/// that keeps writing cannot hold the exit up forever).
const EXIT_DRAIN_MAX: usize = 4 * 1024 * 1024;
/// Bytes per PTY read.
pub(crate) const READ_BUF: usize = 64 * 1024;

/// One attached connection.
#[derive(Debug)]
struct Attached {
    client: Rc<Peer>,
    /// Read-write (its size counts) or read-only.
    writer: bool,
    /// Its terminal size, if it announced one.
    size: Option<(u16, u16)>,
    /// The SCREEN it gets, on joining and on each resynchronisation.
    screen: Screen,
}

/// Which SCREEN an attached connection is cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Screen {
    /// The full repaint (ATTACH, strict or legacy).
    Repaint,
    /// pty's PEEK screen: a legacy PEEK subscription (SPEC.md §7).
    LegacyPeek { plain: bool, full: bool },
}

impl Screen {
    fn cut(self, term: &mut screen::Emulator) -> Bytes {
        match self {
            Self::Repaint => screen::attach_snapshot(term),
            Self::LegacyPeek { plain, full } => screen::legacy_peek_snapshot(term, plain, full),
        }
    }
}

/// The session: identity (immutable), terminal, clients, program state.
pub(crate) struct Session {
    /// The daemon's own creation.
    pub own: SessionRef,
    display_name: Option<String>,
    created_at_ms: u64,
    started: Instant,
    daemon_pid: u32,
    /// The program's pid.
    pub child_pid: u32,
    legacy_policy: LegacyPolicy,
    owner: Option<Owner>,
    pub(crate) claim: Claim,
    /// The PTY master.
    pub master: AsyncFd<OwnedFd>,
    /// The program, through its pidfd.
    pub child: AsyncFd<ChildProc>,
    pub(crate) term: RefCell<screen::Emulator>,
    pub(crate) size: Cell<(u16, u16)>,
    attached: RefCell<Vec<Attached>>,
    clients: RefCell<HashMap<u64, Rc<Peer>>>,
    next_client: Cell<u64>,
    /// Reply bytes queued over every connection (SPEC.md §8).
    replies: Rc<ReplyBudget>,
    input: RefCell<InputQueue>,
    /// Wakes the PTY writer: input was queued.
    pub input_ready: Notify,
    /// Wakes connections waiting for room in the input queue.
    pub input_room: Notify,
    /// Wakes the exit path: a connection ended.
    pub connection_gone: Notify,
    exit: Cell<Option<ExitStatus>>,
    draining: Cell<bool>,
    /// Query answers are being dropped (the program does not read them).
    answers_dropping: Cell<bool>,
    /// Per terminal-event type, its rate limit (SPEC §9.9).
    event_buckets: RefCell<HashMap<&'static str, Bucket>>,
    /// The output cursor, the ring and the shell's marks (SPEC §4.6, §8).
    pub(crate) log: RefCell<OutputLog>,
    /// The recordings (SPEC §4.8).
    pub(crate) casts: RefCell<crate::cast::Casts>,
    /// Wakes the checkpoint task: the program wrote (SPEC §9.18).
    pub output_seen: Notify,
    /// The run lease (SPEC §4.7) and whether the program was started with
    /// latch's shell integration.
    lease: crate::lease::Lease,
    integration: bool,
}

/// A token bucket: `EVENT_BURST` events of one type at once, then one per
/// `EVENT_REFILL`; the next event recorded says how many were dropped.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
    dropped: u64,
}

/// Terminal events of one type recorded at once at most (SPEC §9.9).
const EVENT_BURST: f64 = 10.0;
/// Then one more per this long.
const EVENT_REFILL: std::time::Duration = std::time::Duration::from_secs(1);

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
            attached: RefCell::new(Vec::new()),
            clients: RefCell::new(HashMap::new()),
            next_client: Cell::new(1),
            replies: Rc::new(ReplyBudget::from_env()),
            input: RefCell::new(InputQueue::default()),
            input_ready: Notify::new(),
            input_room: Notify::new(),
            connection_gone: Notify::new(),
            exit: Cell::new(None),
            draining: Cell::new(false),
            answers_dropping: Cell::new(false),
            event_buckets: RefCell::new(HashMap::new()),
            log: RefCell::new(OutputLog::default()),
            output_seen: Notify::new(),
            casts: RefCell::new(crate::cast::Casts::new(facts)),
            lease: crate::lease::Lease::default(),
            integration: spec.shell_integration != latch_registry::shell::Integration::Off
                && latch_registry::shell::Shell::of(&spec.command).is_some(),
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
        let mut cut = Vec::new();
        {
            let attached = self.attached.borrow();
            if !attached.is_empty() {
                let bytes = Bytes::copy_from_slice(data);
                for a in attached.iter() {
                    let mut rest = bytes.clone();
                    while !rest.is_empty() {
                        let chunk = rest.split_to(rest.len().min(MAX_OUTPUT_CHUNK));
                        // Not queued: the client is behind (it is resynchronised
                        // once it reads again) or closing (it leaves the fan-out).
                        if !a
                            .client
                            .stream(Outbound::Strict(ServerFrame::Output(chunk)))
                        {
                            if a.client.phase() != Phase::Open {
                                cut.push(a.client.id);
                            }
                            break;
                        }
                    }
                }
            }
        }
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
    }

    /// The output cursor (SPEC §4.7).
    pub fn output_cursor(&self) -> u64 {
        self.log.borrow().facts().output_cursor
    }

    /// The visible screen as `peek --ansi` and `--plain` show it, at most `max`
    /// bytes each, and the terminal's size (SPEC §9.18).
    pub fn visible_screen(&self, max: usize) -> (String, String, (u16, u16)) {
        let captured = {
            let mut term = self.term.borrow_mut();
            (
                screen::capture(&mut term, false, false, max),
                screen::capture(&mut term, true, false, max),
            )
        };
        self.settle();
        (captured.0, captured.1, self.size.get())
    }

    /// Whether output is queued for the emulator (or memory it can free).
    pub fn output_queued(&self) -> bool {
        let term = self.term.borrow();
        term.queued() > 0 || term.releasable()
    }

    /// Applies the output queued for the emulator (when the program is quiet).
    pub fn apply_output(&self) {
        self.term.borrow_mut().release();
        // The burst's buffers (the read buffer, the emulator's spare rows) were
        // freed in the middle of the heap: hand their pages back, and the stack
        // the parsing touched.
        trim_memory();
        self.settle();
    }

    /// Acts on what the emulator produced besides the screen: its answers to the
    /// program's queries go to the program's input queue, and terminal events go
    /// to the event log, as far as each type's `Bucket` allows (SPEC §4.4, §9.9).
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
        let dropped = q.push_answers(answers);
        let queued = !q.is_empty();
        let (total, held) = (q.dropped(), q.answers());
        drop(q);
        if dropped > 0 && !self.answers_dropping.replace(true) {
            log!(
                "the program does not read its input: query answers beyond {held} bytes \
                 are dropped ({total} so far)"
            );
        } else if dropped == 0 {
            self.answers_dropping.set(false);
        }
        if queued {
            self.input_ready.notify_one();
        }
    }

    fn term_event(&self, e: screen::TermEvent) {
        use latch_registry::events::{kind, EventKind};
        let kind = match &e {
            screen::TermEvent::Bell => kind::BELL,
            screen::TermEvent::Title(_) => kind::TITLE_CHANGE,
            screen::TermEvent::Notification { .. } => kind::NOTIFICATION,
            screen::TermEvent::CursorVisible(_) => kind::CURSOR_VISIBLE,
        };
        let now = Instant::now();
        let dropped = {
            let mut buckets = self.event_buckets.borrow_mut();
            let b = buckets.entry(kind).or_insert(Bucket {
                tokens: EVENT_BURST,
                at: now,
                dropped: 0,
            });
            let refill = now.duration_since(b.at).as_secs_f64() / EVENT_REFILL.as_secs_f64();
            b.tokens = (b.tokens + refill).min(EVENT_BURST);
            b.at = now;
            if b.tokens < 1.0 {
                b.dropped += 1;
                return;
            }
            b.tokens -= 1.0;
            std::mem::take(&mut b.dropped)
        };
        let carried = (dropped > 0).then_some(dropped);
        // The output the emulator has applied: the event lies at or before it
        // (SPEC §9.9).
        let at = Some(
            self.log
                .borrow()
                .facts()
                .output_cursor
                .saturating_sub(self.term.borrow().queued() as u64),
        );
        let event = match e {
            screen::TermEvent::Bell => EventKind::Bell {
                dropped: carried,
                output_cursor: at,
            },
            screen::TermEvent::Title(title) => EventKind::TitleChange {
                title,
                dropped: carried,
                output_cursor: at,
            },
            screen::TermEvent::Notification { osc, title, body } => EventKind::Notification {
                source: format!("osc{osc}"),
                title,
                body,
                dropped: carried,
                output_cursor: at,
            },
            screen::TermEvent::CursorVisible(visible) => EventKind::CursorVisible {
                visible,
                dropped: carried,
                output_cursor: at,
            },
        };
        // Queued for the event writer, never written here (SPEC §9.9). One it cannot
        // take counts as dropped, with those it carried.
        if self.claim.record_event(event).is_err() {
            if let Some(b) = self.event_buckets.borrow_mut().get_mut(kind) {
                b.dropped += dropped + 1;
            }
        }
    }

    /// Whether the emulator answers the program's queries: only while no
    /// read-write client is attached, whose terminal answers them (SPEC §4.4).
    fn update_answering(&self) {
        let writers = self.attached.borrow().iter().any(|a| a.writer);
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

    // ----- effects -----

    /// ATTACH: GEOMETRY, then one SCREEN cut, then (by joining the fan-out in the same
    /// step) every OUTPUT and EXIT after the cut. If the program has already exited,
    /// EXIT follows the SCREEN at once.
    pub fn attach(&self, client: &Rc<Peer>, rows: u16, cols: u16, read_only: bool) {
        self.join(client, rows, cols, read_only, Screen::Repaint);
    }

    /// ATTACH, or a legacy PEEK (read-only, with pty's screen): see [`attach`].
    pub fn join(&self, client: &Rc<Peer>, rows: u16, cols: u16, read_only: bool, kind: Screen) {
        let writer = !read_only;
        let size = (rows > 0 && cols > 0).then_some((rows, cols));
        if writer && self.exit.get().is_none() {
            // Resize first, so the snapshot is cut at the size the client will see.
            let members = self
                .attached
                .borrow()
                .iter()
                .map(|a| (a.writer, a.size))
                .chain([(writer, size)])
                .collect::<Vec<_>>();
            if let Some((r, c)) = pty_size(members) {
                self.apply_size(r, c);
            }
        }
        let (r, c) = self.size.get();
        let snapshot = kind.cut(&mut self.term.borrow_mut());
        self.settle();
        // Stream frames: a client that falls behind already here is resynchronised
        // like any other.
        client.stream(Outbound::Strict(ServerFrame::Geometry { rows: r, cols: c }));
        client.stream(Outbound::Strict(ServerFrame::Screen(snapshot)));
        self.stream_cut(client, false);
        if client.phase() != Phase::Open {
            return;
        }
        if let Some(status) = self.exit.get() {
            self.resync_now(client, kind);
            client.stream_final(Outbound::Strict(ServerFrame::Exit(status)));
            return;
        }
        self.attached.borrow_mut().push(Attached {
            client: client.clone(),
            writer,
            size,
            screen: kind,
        });
        self.update_answering();
    }

    /// Resynchronises a client that fell behind and has since read everything
    /// queued for it: GEOMETRY and a fresh SCREEN, cut exactly as on ATTACH (the
    /// emulator's queue is applied first), then live output again. Called by the
    /// connection's writer; does nothing for a client that is not behind.
    pub fn resync(&self, client: &Rc<Peer>) {
        if !client.wants_resync() {
            return;
        }
        let attached = self
            .attached
            .borrow()
            .iter()
            .find(|a| a.client.id == client.id)
            .map(|a| a.screen);
        let Some(kind) = attached else {
            client.resynced();
            return;
        };
        self.resync_now(client, kind);
        log!(
            "connection {} resynchronised with a fresh screen ({} so far)",
            client.id,
            client.resyncs()
        );
    }

    /// Queues GEOMETRY and a fresh SCREEN for a client that is behind, whatever
    /// is still queued for it (at the program's exit, before EXIT).
    fn resync_now(&self, client: &Peer, kind: Screen) {
        if !client.is_behind() {
            return;
        }
        client.resynced();
        let (r, c) = self.size.get();
        let snapshot = kind.cut(&mut self.term.borrow_mut());
        self.settle();
        client.stream_final(Outbound::Strict(ServerFrame::Geometry { rows: r, cols: c }));
        client.stream_final(Outbound::Strict(ServerFrame::Screen(snapshot)));
        self.stream_cut(client, true);
    }

    /// After a stream's SCREEN, on a version-3 connection: CUT, the output cursor
    /// and shell at that cut (SPEC §4.2), which the OUTPUT after it continues from.
    fn stream_cut(&self, client: &Peer, last: bool) {
        if client.with_conn(|c| c.version()) < Some(latch_wire::CURSORS_VERSION) {
            return;
        }
        let frame = Outbound::Strict(ServerFrame::Cut(self.log.borrow().cut()));
        if last {
            client.stream_final(frame);
        } else {
            client.stream(frame);
        }
    }

    /// STATUS for a version-3 connection: STATUS's fields, then the output's.
    pub fn status3(&self) -> latch_wire::Status3 {
        latch_wire::Status3 {
            base: self.status(),
            output: self.log.borrow().facts(),
        }
    }

    /// OUTPUT_SINCE: the held output after `since`, at most REPLY_QUEUE_BYTES in
    /// one reply, so that one connection's unread answers stay within the bound
    /// after which it is no longer read (SPEC §4.7, §8); a reader asks again.
    pub fn output_since(&self, client: &Peer, since: u64, max: u32) {
        let max = usize::try_from(max)
            .unwrap_or(usize::MAX)
            .min(latch_wire::limits::REPLY_QUEUE_BYTES);
        let range = self.log.borrow().since(since, max);
        client.send(Outbound::Strict(ServerFrame::OutputRange(range)));
    }

    /// LEASE (SPEC §4.7): the run lease for `client` if nobody else holds it, and
    /// the facts a client that types needs, read now.
    pub fn lease(&self, client: &Peer) {
        let granted = self.lease.take(client.id);
        client.with_conn(|c| c.set_leased(granted));
        let facts = self.lease_facts(granted);
        client.send(Outbound::Strict(ServerFrame::Leased(Box::new(facts))));
    }

    fn lease_facts(&self, granted: bool) -> latch_wire::LeaseFacts {
        let paste = self.term.borrow_mut().bracketed_paste();
        self.settle();
        latch_wire::LeaseFacts {
            granted,
            integration: self.integration,
            marked: self.log.borrow().marked(),
            bracketed_paste: paste,
            reading: crate::lease::foreground_reading(self.child_pid),
            output: self.log.borrow().facts(),
        }
    }

    /// RELEASE, or the end of `client`'s connection: the lease is free again.
    pub fn release(&self, client: &Peer) {
        self.lease.give_back(client.id);
        client.with_conn(|c| c.set_leased(false));
    }

    /// COMMANDS: the newest `last` command blocks (SPEC §4.7).
    pub fn commands(&self, client: &Peer, last: u32) {
        let blocks = self.log.borrow().blocks.last(last);
        client.send(Outbound::Strict(ServerFrame::Commands(blocks)));
    }

    /// Strict PEEK: one SCREEN (a legacy PEEK is a subscription, [`join`]).
    pub fn peek(&self, client: &Peer, plain: bool, full: bool) {
        let snapshot = screen::peek_snapshot(&mut self.term.borrow_mut(), plain, full);
        self.settle();
        let peek = latch_wire::PeekRequest { plain, full };
        client.send_screen(Outbound::Strict(ServerFrame::Screen(snapshot)), peek);
    }

    /// CAPTURE: the cell-grid capture, postcard-encoded (SPEC.md §4.4); only cut
    /// and encoded here, never drawn.
    pub fn capture(&self, client: &Peer, full: bool) {
        let capture = self
            .term
            .borrow_mut()
            .capture(full, screen::capture::CAPTURE_MAX);
        self.settle();
        let frame = ServerFrame::Capture(Bytes::from(capture.encode()));
        client.send_screen(Outbound::Strict(frame), ScreenAsk::Capture { full });
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

    /// RESIZE: for an attached read-write connection, its size, then the PTY size is
    /// recomputed over all attached read-write clients; for any other bound
    /// connection, the PTY size directly.
    pub fn resize(
        &self,
        client_id: u64,
        attached_writer: bool,
        rows: u16,
        cols: u16,
    ) -> Result<(), ServerFrame> {
        if !attached_writer {
            self.apply_size(rows, cols);
            return Ok(());
        }
        let mut attached = self.attached.borrow_mut();
        if let Some(a) = attached.iter_mut().find(|a| a.client.id == client_id) {
            a.size = Some((rows, cols));
        }
        let new = pty_size(attached.iter().map(|a| (a.writer, a.size)));
        drop(attached);
        if let Some((r, c)) = new {
            self.apply_size(r, c);
        }
        Ok(())
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

    /// DETACH (or a connection ending): leaves the fan-out; the PTY size is
    /// recomputed if it was a read-write client.
    pub fn detach(&self, client_id: u64) {
        let mut attached = self.attached.borrow_mut();
        let Some(pos) = attached.iter().position(|a| a.client.id == client_id) else {
            return;
        };
        let gone = attached.remove(pos);
        let new = pty_size(attached.iter().map(|a| (a.writer, a.size)));
        drop(attached);
        if gone.writer {
            self.update_answering();
        }
        if gone.writer && self.exit.get().is_none() {
            if let Some((r, c)) = new {
                self.apply_size(r, c);
            }
        }
    }

    /// Sets the PTY and emulator size and tells every attached client.
    fn apply_size(&self, rows: u16, cols: u16) {
        if self.size.get() == (rows, cols) {
            return;
        }
        let (Some(r), Some(c)) = (NonZeroU16::new(rows), NonZeroU16::new(cols)) else {
            return;
        };
        if let Err(e) = pty::set_size(self.master.get_ref().as_fd(), rows, cols) {
            log!("cannot resize the terminal to {rows}x{cols}: {e}");
            return;
        }
        self.term.borrow_mut().resize(r.get(), c.get());
        if cols != self.size.get().1 {
            // A reflow of the scrollback rebuilt its rows in full cells for a moment.
            trim_memory();
        }
        self.settle();
        self.size.set((rows, cols));
        let cursor = self.log.borrow().cursor();
        self.casts.borrow_mut().resize(rows, cols, cursor);
        self.broadcast(|| Outbound::Strict(ServerFrame::Geometry { rows, cols }));
    }

    fn broadcast(&self, frame: impl Fn() -> Outbound) {
        let mut cut = Vec::new();
        for a in self.attached.borrow().iter() {
            // A client that is behind gets the current geometry when resynchronised.
            if !a.client.stream(frame()) && a.client.phase() != Phase::Open {
                cut.push(a.client.id);
            }
        }
        for id in cut {
            self.detach(id);
        }
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
        let attached = std::mem::take(&mut *self.attached.borrow_mut());
        for a in &attached {
            self.resync_now(&a.client, a.screen);
            a.client
                .stream_final(Outbound::Strict(ServerFrame::Exit(status)));
        }
    }

    /// The screen as the program left it, for `<id>.screen` (SPEC §9.15).
    fn final_screen(&self, exit: ExitRecord) -> latch_registry::FinalScreen {
        use latch_registry::screen::FINAL_FULL_MAX_BYTES as MAX;
        let mut term = self.term.borrow_mut();
        let (rows, cols) = self.size.get();
        latch_registry::FinalScreen {
            version: latch_registry::FINAL_SCREEN_VERSION,
            id: self.own.id.clone(),
            incarnation: self.own.incarnation,
            rows,
            cols,
            exit,
            plain: screen::capture(&mut term, true, false, MAX),
            ansi: screen::capture(&mut term, false, false, MAX),
            full_plain: screen::capture(&mut term, true, true, MAX),
            full_ansi: screen::capture(&mut term, false, true, MAX),
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

    // ----- status -----

    /// STATUS from memory (SPEC.md §11 I2).
    pub fn status(&self) -> StatusReply {
        let (rows, cols) = self.size.get();
        let (cursor_row, cursor_col) = self.term.borrow_mut().cursor();
        self.settle();
        let attached = self.attached.borrow();
        let writers = attached.iter().filter(|a| a.writer).count();
        let readers = attached.len() - writers;
        StatusReply {
            id: self.own.id.clone(),
            incarnation: self.own.incarnation,
            daemon_pid: self.daemon_pid,
            child_pid: self.child_pid,
            rows,
            cols,
            cursor_row,
            cursor_col,
            writers: u32::try_from(writers).unwrap_or(u32::MAX),
            readers: u32::try_from(readers).unwrap_or(u32::MAX),
            created_at_ms: self.created_at_ms,
            exit: self.exit.get(),
            draining: self.draining.get(),
            legacy_policy: self.legacy_policy,
            owner: self.owner.clone(),
        }
    }

    /// The legacy STATUS packet (shape in `status`).
    pub fn legacy_status(&self) -> Outbound {
        let name = self
            .display_name
            .clone()
            .unwrap_or_else(|| self.own.id.to_string());
        let facts = {
            let mut term = self.term.borrow_mut();
            status::LegacyFacts {
                name,
                uptime_seconds: self.started.elapsed().as_secs(),
                lines: screen::legacy_lines(&mut term),
                modes: screen::legacy_modes(&mut term),
                connections: self
                    .attached
                    .borrow()
                    .iter()
                    .map(|a| status::LegacyConn {
                        writer: a.writer,
                        size: a.size,
                        seq: a.client.id,
                    })
                    .collect(),
            }
        };
        let json = status::legacy_json(&self.status(), &facts);
        Outbound::Legacy(LegacyServerFrame::Status(Bytes::from(json.to_string())))
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

/// Hands back what an idle daemon does not need: the allocator's free pages and
/// the stack below the live frames.
pub(crate) fn trim_memory() {
    trim_heap();
    trim_stack();
}

/// Hands the allocator's free pages back to the system. The emulator frees the
/// full-cell rows its scrollback no longer needs in the middle of the heap, where
/// `free` alone keeps them resident (glibc).
fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory; no pointer is involved.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Hands back the main thread's stack pages below the current frame. Creation and
/// the parsing of a burst touch them once; an idle daemon never needs them, and
/// the kernel keeps them resident otherwise (a fresh daemon's stack was 92 KiB).
/// Pages touched again later are simply zero-filled anew.
fn trim_stack() {
    // Only the main thread's stack is the `[stack]` mapping.
    if rustix::thread::gettid() != rustix::process::getpid() {
        return;
    }
    let Some(low) = main_stack_low() else { return };
    let marker = 0u8;
    let here = std::ptr::addr_of!(marker) as usize;
    // Stay clear of this frame, the red zone below it and madvise's own frames.
    const MARGIN: usize = 16 * 1024;
    let page = rustix::param::page_size();
    let high = here.saturating_sub(MARGIN) & !(page - 1);
    if high <= low {
        return;
    }
    // SAFETY: [low, high) lies in this thread's stack mapping strictly below the
    // live frames (the current one, minus a margin larger than the red zone and
    // any frame madvise needs); nothing refers to memory there, and a later touch
    // gets a zeroed page.
    let _ = unsafe {
        rustix::mm::madvise(
            low as *mut std::ffi::c_void,
            high - low,
            rustix::mm::Advice::LinuxDontNeed,
        )
    };
}

/// The lowest address of the main thread's stack mapping, from /proc/self/maps.
fn main_stack_low() -> Option<usize> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let line = maps.lines().find(|l| l.ends_with("[stack]"))?;
    let (low, _) = line.split_once('-')?;
    usize::from_str_radix(low, 16).ok()
}

/// Large buffers (output queue, full-scrollback snapshots) get their own mappings,
/// returned to the system when freed: glibc would otherwise raise its threshold to
/// the largest buffer freed so far and keep every later one in the heap.
pub(crate) fn fixed_mmap_threshold() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: sets an allocator parameter; no pointer is involved.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}
