//! Per-connection outbound queues, the backpressure bounds, and the PTY size rule.
//!
//! # Backpressure (SPEC.md §8 cites this)
//!
//! Every connection has one outbound queue and one writer task that drains it to
//! the socket. Two kinds of frame share the queue, in order:
//!
//! - **replies** to the connection's own requests (WELCOME, STATUS, PONG, a PEEK's
//!   SCREEN, errors). They are always queued; instead, the connection's reader stops
//!   reading requests while more than [`REPLY_QUEUE_BYTES`] of replies are pending,
//!   so a client that sends requests without reading the answers only fills its own
//!   socket buffer. Replies are also counted across every connection
//!   ([`ReplyBudget`]): a PEEK's SCREEN larger than [`REPLY_QUEUE_BYTES`] is queued
//!   only while the daemon's unread replies leave room for it within
//!   [`REPLY_BUDGET_BYTES`]; otherwise that PEEK waits, and its connection is not
//!   read, until there is room (it is never refused);
//! - **stream** frames fanned out to an attached client (OUTPUT, GEOMETRY, the
//!   attach SCREEN, EXIT). Enqueueing never waits. When a stream frame would take
//!   the queue over [`CLIENT_QUEUE_BYTES`] or [`CLIENT_QUEUE_ITEMS`], the client has
//!   **fallen behind**: every stream frame still queued is dropped (replies stay),
//!   and nothing more is queued for it until its writer has emptied the queue — the
//!   client is reading again. Then the session **resynchronises** it: GEOMETRY and a
//!   fresh SCREEN, cut exactly as on ATTACH, then live output again (as tmux redraws
//!   a client instead of relaying what it missed).
//!
//! Each frame counts what it really holds: the queue slot plus its heap bytes
//! ([`cost`]). So memory per client stays under the bound plus one frame plus the
//! writer's batch ([`WRITE_BATCH`]), whatever the client does, and a stopped client
//! costs no more than that until it reads again.
//!
//! The only disconnection left is for a client that reads nothing at all for
//! [`CLIENT_STALL_MS`] while its writer has bytes for it: it is sent
//! `too-slow` (best effort, within [`CUT_WRITE_TIMEOUT`]) and closed.

use std::cell::{Cell, RefCell, RefMut};
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Duration;

use bytes::BytesMut;
use latch_wire::codec::Outbound;
use latch_wire::legacy::LegacyServerFrame;
use latch_wire::limits::{
    CLIENT_QUEUE_BYTES, CLIENT_QUEUE_ITEMS, CLIENT_STALL_MS, REPLY_BUDGET_BYTES, REPLY_QUEUE_BYTES,
};
use latch_wire::server::ServerConn;
use latch_wire::{ErrorCode, PeekRequest, ServerFrame};
use tokio::sync::Notify;

/// How long a cut-off client's writer may take to finish its half-written frame and
/// the `too-slow` error before the socket is closed regardless.
pub(crate) const CUT_WRITE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a politely closing connection (DETACH, a fatal refusal, EOF, daemon
/// exit) may take to flush its queue before the socket is closed regardless.
pub(crate) const CLOSE_FLUSH_TIMEOUT: Duration = Duration::from_secs(5);
/// Encoded bytes the writer takes from the queue per socket write.
pub(crate) const WRITE_BATCH: usize = 256 * 1024;

/// The environment variable that lowers [`CLIENT_STALL_MS`] for tests (SPEC.md §8).
pub(crate) const ENV_STALL_MS: &str = "LATCH_TEST_STALL_MS";

/// The environment variable that lowers [`REPLY_BUDGET_BYTES`] for tests (SPEC.md §8).
pub(crate) const ENV_REPLY_BUDGET: &str = "LATCH_TEST_REPLY_BUDGET";

/// The reply bytes queued across every connection of the daemon, and the bound a
/// large reply must fit in (SPEC.md §8). Every queued reply counts; only a PEEK's
/// SCREEN larger than [`REPLY_QUEUE_BYTES`] waits for room ([`ReplyBudget::admits`]).
#[derive(Debug)]
pub(crate) struct ReplyBudget {
    queued: Cell<usize>,
    limit: usize,
    /// Wakes every PEEK waiting for room: replies were written or dropped.
    pub freed: Notify,
    /// Per kind of PEEK (plain or not, full or not) and of CAPTURE (full or not),
    /// the cost of its last reply: what the next one is expected to cost before
    /// it is cut.
    screens: [Cell<usize>; 6],
}

/// A request whose reply is a large screen: PEEK's SCREEN, or CAPTURE's cells
/// (SPEC.md §8: both wait for the reply budget alike).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScreenAsk {
    /// PEEK.
    Peek(PeekRequest),
    /// CAPTURE, with the scrollback if `full`.
    Capture {
        /// The scrollback too.
        full: bool,
    },
}

impl From<PeekRequest> for ScreenAsk {
    fn from(peek: PeekRequest) -> Self {
        Self::Peek(peek)
    }
}

impl ReplyBudget {
    /// An empty budget of `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Self {
            queued: Cell::new(0),
            limit,
            freed: Notify::new(),
            screens: Default::default(),
        }
    }

    /// [`REPLY_BUDGET_BYTES`], or the test override read at daemon start.
    pub fn from_env() -> Self {
        let limit = std::env::var(ENV_REPLY_BUDGET)
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|&b| b > 0)
            .unwrap_or(REPLY_BUDGET_BYTES);
        Self::new(limit)
    }

    /// Reply bytes queued now, over every connection.
    pub fn queued(&self) -> usize {
        self.queued.get()
    }

    /// The bound.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Whether a reply costing `cost` may be queued now: a small one always (each
    /// connection's own bound holds it), a large one if it fits within the bound or
    /// nothing at all is queued (so the largest reply is always served in the end).
    pub fn admits(&self, cost: usize) -> bool {
        let queued = self.queued.get();
        cost <= REPLY_QUEUE_BYTES || queued == 0 || queued.saturating_add(cost) <= self.limit
    }

    /// The cost of the last SCREEN cut for a PEEK of this kind (0 before any).
    pub fn last_screen(&self, peek: impl Into<ScreenAsk>) -> usize {
        self.screens[Self::kind(peek.into())].get()
    }

    /// A SCREEN of this kind, costing `cost`, was cut.
    fn cut(&self, peek: ScreenAsk, cost: usize) {
        self.screens[Self::kind(peek)].set(cost);
    }

    fn kind(ask: ScreenAsk) -> usize {
        match ask {
            ScreenAsk::Peek(peek) => usize::from(peek.plain) * 2 + usize::from(peek.full),
            ScreenAsk::Capture { full } => 4 + usize::from(full),
        }
    }

    /// One connection's reply bytes went from `before` to `after`.
    fn moved(&self, before: usize, after: usize) {
        if after >= before {
            self.queued
                .set(self.queued.get().saturating_add(after - before));
        } else {
            self.queued
                .set(self.queued.get().saturating_sub(before - after));
            self.freed.notify_waiters();
        }
    }
}

/// A connection's queue, borrowed: on release, the change in its reply bytes is
/// carried to the daemon's [`ReplyBudget`], whatever the operation was.
struct Tracked<'a> {
    queue: RefMut<'a, Queue>,
    before: usize,
    budget: &'a ReplyBudget,
}

impl std::ops::Deref for Tracked<'_> {
    type Target = Queue;
    fn deref(&self) -> &Queue {
        &self.queue
    }
}

impl std::ops::DerefMut for Tracked<'_> {
    fn deref_mut(&mut self) -> &mut Queue {
        &mut self.queue
    }
}

impl Drop for Tracked<'_> {
    fn drop(&mut self) {
        self.budget.moved(self.before, self.queue.replies());
    }
}

/// How long a client may read nothing while output is pending for it.
pub(crate) fn stall_timeout() -> Duration {
    let ms = std::env::var(ENV_STALL_MS)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|&ms| ms > 0)
        .unwrap_or(CLIENT_STALL_MS);
    Duration::from_millis(ms)
}

/// Which lane a queued frame travels in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lane {
    /// A reply to this connection's own request.
    Reply,
    /// Part of the attached output stream.
    Stream,
}

/// What a queued frame really costs: its queue slot plus the heap bytes it holds.
pub(crate) fn cost(item: &Outbound) -> usize {
    let heap = match item {
        Outbound::Strict(frame) => match frame {
            ServerFrame::Output(b) | ServerFrame::Screen(b) | ServerFrame::Capture(b) => b.len(),
            ServerFrame::Error { detail, .. } => detail.len(),
            ServerFrame::Welcome { server, .. } => server.len(),
            ServerFrame::Status(s) => s.id.as_str().len(),
            ServerFrame::Status3(s) => {
                let shell = &s.output.shell;
                s.base.id.as_str().len()
                    + shell.command.as_ref().map_or(0, String::len)
                    + shell.cwd.as_ref().map_or(0, String::len)
            }
            ServerFrame::OutputRange(r) => r.bytes.len(),
            ServerFrame::Cut(c) => {
                c.shell.command.as_ref().map_or(0, String::len)
                    + c.shell.cwd.as_ref().map_or(0, String::len)
            }
            ServerFrame::Bound { id, .. } => id.as_str().len(),
            ServerFrame::Casts(c) => c.iter().map(|c| c.file.len() + 48).sum(),
            ServerFrame::Leased(l) => {
                std::mem::size_of::<latch_wire::LeaseFacts>()
                    + l.output.shell.command.as_ref().map_or(0, String::len)
                    + l.output.shell.cwd.as_ref().map_or(0, String::len)
            }
            ServerFrame::Commands(v) => v
                .iter()
                .map(|b| {
                    std::mem::size_of::<latch_wire::CommandBlock>()
                        + b.command.as_ref().map_or(0, String::len)
                        + b.cwd.as_ref().map_or(0, String::len)
                })
                .sum(),
            ServerFrame::Geometry { .. }
            | ServerFrame::Exit(_)
            | ServerFrame::Pong(_)
            | ServerFrame::Detached
            | ServerFrame::Reserved16
            | ServerFrame::Reserved17
            | ServerFrame::Reserved18 => 0,
        },
        Outbound::Legacy(frame) => match frame {
            LegacyServerFrame::Data(b)
            | LegacyServerFrame::Screen(b)
            | LegacyServerFrame::Status(b) => b.len(),
            LegacyServerFrame::Exit(_) | LegacyServerFrame::Geometry { .. } => 0,
        },
    };
    heap.saturating_add(std::mem::size_of::<(Lane, Outbound)>())
}

/// The result of [`Queue::push_stream`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pushed {
    /// The frame is queued.
    Queued,
    /// The frame would take the queue over a bound; nothing was queued.
    Overflow,
}

/// A bounded queue of outbound frames (pure accounting, no IO).
#[derive(Debug)]
pub(crate) struct Queue {
    items: VecDeque<(Lane, Outbound)>,
    pending: usize,
    replies: usize,
    limit: usize,
    max_items: usize,
}

impl Queue {
    /// An empty queue bounded by `limit` pending bytes and `max_items` frames.
    pub fn new(limit: usize, max_items: usize) -> Self {
        Self {
            items: VecDeque::new(),
            pending: 0,
            replies: 0,
            limit,
            max_items,
        }
    }

    /// Queues a reply (always; the reader bounds replies by not reading requests).
    pub fn push_reply(&mut self, item: Outbound) {
        let c = cost(&item);
        self.pending = self.pending.saturating_add(c);
        self.replies = self.replies.saturating_add(c);
        self.items.push_back((Lane::Reply, item));
    }

    /// Queues a stream frame unless it would take a non-empty queue over a bound.
    /// One frame larger than the bound (a full-scrollback SCREEN) fits an empty
    /// queue alone.
    pub fn push_stream(&mut self, item: Outbound) -> Pushed {
        let c = cost(&item);
        if !self.items.is_empty()
            && (self.pending.saturating_add(c) > self.limit || self.items.len() >= self.max_items)
        {
            return Pushed::Overflow;
        }
        self.pending = self.pending.saturating_add(c);
        self.items.push_back((Lane::Stream, item));
        Pushed::Queued
    }

    /// Takes the oldest frame, with its lane.
    pub fn pop(&mut self) -> Option<(Lane, Outbound)> {
        let (lane, item) = self.items.pop_front()?;
        let c = cost(&item);
        self.pending = self.pending.saturating_sub(c);
        if lane == Lane::Reply {
            self.replies = self.replies.saturating_sub(c);
        }
        Some((lane, item))
    }

    /// Drops every stream frame; replies stay, in order.
    pub fn drop_stream(&mut self) -> usize {
        let before = self.pending;
        self.items.retain(|(lane, _)| *lane == Lane::Reply);
        self.pending = self.replies;
        before.saturating_sub(self.pending)
    }

    /// Drops everything pending.
    pub fn clear(&mut self) {
        self.items.clear();
        self.pending = 0;
        self.replies = 0;
    }

    /// Bytes pending (both lanes).
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// Reply bytes pending.
    pub fn replies(&self) -> usize {
        self.replies
    }

    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// Where a connection stands, from the writer's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Serving.
    Open,
    /// Closing politely: flush what is queued (within [`CLOSE_FLUSH_TIMEOUT`]), then
    /// close.
    Closing,
    /// Cut off: finish the half-written frame and the `too-slow` error (within
    /// [`CUT_WRITE_TIMEOUT`]), then close.
    Cut,
}

/// One connection, shared by its reader, its writer and the fan-out: its protocol
/// state machine (which also holds its codec, so its framing is recorded once) and
/// its outbound queue. The fan-out queues frames of the strict protocol for every
/// connection; the writer encodes each in the connection's framing.
#[derive(Debug)]
pub(crate) struct Peer {
    /// Connection number, for the session's tables and the log.
    pub id: u64,
    /// Borrowed only inside [`Peer::with_conn`] and [`Peer::fill`], never across
    /// an await.
    conn: RefCell<ServerConn>,
    queue: RefCell<Queue>,
    phase: Cell<Phase>,
    /// Fell behind: stream frames are dropped until the session resynchronises it.
    behind: Cell<bool>,
    /// Times this client was resynchronised.
    resyncs: Cell<u64>,
    /// Wakes the writer: something was queued or the phase changed.
    pub wake_writer: Notify,
    /// Wakes the writer out of a blocked socket write: the client was cut off.
    pub cut: Notify,
    /// Stops the reader: the connection is closing.
    pub stop_reader: Notify,
    /// Wakes a reader waiting for its replies to drain.
    pub replies_drained: Notify,
    /// The daemon's reply budget, shared by every connection.
    budget: Rc<ReplyBudget>,
    /// A PEEK waiting for room in the budget, and the size its SCREEN had.
    parked: Cell<Option<(ScreenAsk, usize)>>,
    /// The writer's encoded bytes not yet written, in runs by lane, in order: a
    /// reply counts in the budget until the socket has taken it.
    unwritten: RefCell<VecDeque<(Lane, usize)>>,
    /// The reply bytes among them.
    unwritten_replies: Cell<usize>,
}

impl Drop for Peer {
    fn drop(&mut self) {
        // What it never wrote leaves the budget with it.
        let held = self.queue.get_mut().replies() + self.unwritten_replies.get();
        self.budget.moved(held, 0);
    }
}

impl Peer {
    /// A new open connection, counting its replies in `budget`.
    pub fn new(id: u64, conn: ServerConn, budget: Rc<ReplyBudget>) -> Self {
        Self::with_bounds(id, conn, budget, CLIENT_QUEUE_BYTES, CLIENT_QUEUE_ITEMS)
    }

    /// A new open connection with other bounds (tests).
    pub fn with_bounds(
        id: u64,
        conn: ServerConn,
        budget: Rc<ReplyBudget>,
        bytes: usize,
        items: usize,
    ) -> Self {
        Self {
            id,
            conn: RefCell::new(conn),
            queue: RefCell::new(Queue::new(bytes, items)),
            phase: Cell::new(Phase::Open),
            behind: Cell::new(false),
            resyncs: Cell::new(0),
            wake_writer: Notify::new(),
            cut: Notify::new(),
            stop_reader: Notify::new(),
            replies_drained: Notify::new(),
            budget,
            parked: Cell::new(None),
            unwritten: RefCell::new(VecDeque::new()),
            unwritten_replies: Cell::new(0),
        }
    }

    /// The writer's socket took `n` more bytes of what [`Peer::fill`] encoded.
    pub fn written(&self, mut n: usize) {
        let mut runs = self.unwritten.borrow_mut();
        let mut replies = 0;
        while n > 0 {
            let Some((lane, len)) = runs.front_mut() else {
                break;
            };
            let took = n.min(*len);
            if *lane == Lane::Reply {
                replies += took;
            }
            *len -= took;
            n -= took;
            if *len == 0 {
                runs.pop_front();
            }
        }
        drop(runs);
        self.forget_unwritten(replies);
    }

    /// `n` reply bytes of the writer's buffer are gone (written, or dropped).
    fn forget_unwritten(&self, n: usize) {
        if n > 0 {
            let held = self.unwritten_replies.get();
            self.unwritten_replies.set(held.saturating_sub(n));
            self.budget.moved(held, held.saturating_sub(n));
        }
    }

    /// The queue, its reply bytes carried to the budget when released.
    fn queue_mut(&self) -> Tracked<'_> {
        let queue = self.queue.borrow_mut();
        Tracked {
            before: queue.replies(),
            queue,
            budget: &self.budget,
        }
    }

    /// Runs `f` on the connection's state machine.
    pub fn with_conn<R>(&self, f: impl FnOnce(&mut ServerConn) -> R) -> R {
        f(&mut self.conn.borrow_mut())
    }

    /// The current phase.
    pub fn phase(&self) -> Phase {
        self.phase.get()
    }

    /// Queues a reply. Returns false if the connection is closing.
    pub fn send(&self, item: Outbound) -> bool {
        if self.phase.get() != Phase::Open {
            return false;
        }
        self.queue_mut().push_reply(item);
        self.wake_writer.notify_one();
        true
    }

    /// Whether a PEEK may cut its screen now: a screen of its kind as large as the
    /// last one cut must fit the budget (SPEC.md §8). Otherwise it is parked without
    /// cutting anything (a full scrollback takes long to cut), and the reader serves
    /// it once there is room ([`Peer::serve_parked`]).
    pub fn may_cut(&self, peek: impl Into<ScreenAsk>) -> bool {
        let peek = peek.into();
        let guess = self.budget.last_screen(peek);
        if self.phase.get() != Phase::Open || self.budget.admits(guess) {
            return true;
        }
        self.park(peek, guess);
        false
    }

    /// Queues the SCREEN answering `peek` if the daemon's reply budget admits it
    /// (SPEC.md §8). Otherwise nothing is queued and the PEEK is parked, as by
    /// [`Peer::may_cut`].
    pub fn send_screen(&self, item: Outbound, peek: impl Into<ScreenAsk>) {
        let peek = peek.into();
        let c = cost(&item);
        self.budget.cut(peek, c);
        if self.phase.get() != Phase::Open || self.budget.admits(c) {
            self.send(item);
            return;
        }
        self.park(peek, c);
    }

    fn park(&self, peek: ScreenAsk, c: usize) {
        log!(
            "connection {}: PEEK waits for the reply budget ({} of {} bytes of replies \
             queued; its screen is about {c} bytes)",
            self.id,
            self.budget.queued(),
            self.budget.limit()
        );
        self.parked.set(Some((peek, c)));
    }

    /// Serves a parked PEEK again with `peek` once the budget has room for a screen
    /// of the size it had (a new screen is cut then), until it is queued or the
    /// connection closes.
    pub async fn serve_parked(&self, peek: impl Fn(ScreenAsk)) {
        while let Some((request, c)) = self.parked.get() {
            let freed = self.budget.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if self.phase.get() != Phase::Open {
                self.parked.set(None);
                return;
            }
            if self.budget.admits(c) {
                self.parked.set(None);
                peek(request);
                continue;
            }
            tokio::select! {
                () = freed => {}
                () = self.stop_reader.notified() => {
                    self.parked.set(None);
                    return;
                }
            }
        }
    }

    /// Queues a stream frame. Returns false if it was not queued: the connection
    /// is closing, or the client is behind (it may have fallen behind just now).
    pub fn stream(&self, item: Outbound) -> bool {
        if self.phase.get() != Phase::Open || self.behind.get() {
            return false;
        }
        let pushed = self.queue_mut().push_stream(item);
        match pushed {
            Pushed::Queued => {
                self.wake_writer.notify_one();
                true
            }
            Pushed::Overflow => {
                self.fall_behind();
                false
            }
        }
    }

    /// Queues a stream frame that must arrive whatever the bound (EXIT, after a
    /// resynchronisation at the program's exit). Returns false if closing.
    pub fn stream_final(&self, item: Outbound) -> bool {
        if self.phase.get() != Phase::Open {
            return false;
        }
        self.queue_mut().push_reply(item);
        self.wake_writer.notify_one();
        true
    }

    /// Drops every queued stream frame and stops queueing more until the session
    /// resynchronises the client.
    fn fall_behind(&self) {
        self.behind.set(true);
        let dropped = self.queue_mut().drop_stream();
        log!(
            "connection {} fell behind: {dropped} bytes of output dropped; \
             it gets a fresh screen once it has read what is queued",
            self.id
        );
        self.wake_writer.notify_one();
    }

    /// Whether the client is behind and has read everything queued: time to
    /// resynchronise it.
    pub fn wants_resync(&self) -> bool {
        self.behind.get() && self.phase.get() == Phase::Open && self.queue.borrow().is_empty()
    }

    /// The session has queued a fresh GEOMETRY and SCREEN: stream again.
    pub fn resynced(&self) {
        self.behind.set(false);
        self.resyncs.set(self.resyncs.get().saturating_add(1));
    }

    /// Whether the client is behind (stream frames are being dropped).
    pub fn is_behind(&self) -> bool {
        self.behind.get()
    }

    /// Times the client was resynchronised.
    pub fn resyncs(&self) -> u64 {
        self.resyncs.get()
    }

    /// Whether the reader should stop reading requests until replies drain.
    pub fn replies_full(&self) -> bool {
        self.queue.borrow().replies() > REPLY_QUEUE_BYTES
    }

    /// Cuts the client off: it read nothing for the stall timeout. Drops its queue,
    /// queues `too-slow` (which the legacy framing cannot carry: it is not written
    /// there) and closes the connection.
    pub fn cut_off(&self, stalled: Duration) {
        self.phase.set(Phase::Cut);
        let mut q = self.queue_mut();
        log!(
            "connection {} cut off: read nothing for {} s with output pending ({} bytes dropped)",
            self.id,
            stalled.as_secs(),
            q.pending()
        );
        q.clear();
        // Into the emptied queue.
        q.push_reply(Outbound::Strict(ServerFrame::error(
            ErrorCode::TooSlow,
            format!(
                "client read nothing for {} s with output pending and was cut off",
                stalled.as_secs()
            ),
        )));
        drop(q);
        self.cut.notify_one();
        self.wake_writer.notify_one();
        self.stop_reader.notify_one();
        self.replies_drained.notify_one();
    }

    /// Closes politely: what is queued is still written.
    pub fn close(&self) {
        if self.phase.get() == Phase::Open {
            self.phase.set(Phase::Closing);
        }
        self.wake_writer.notify_one();
        self.stop_reader.notify_one();
        self.replies_drained.notify_one();
    }

    /// The socket failed: nothing more can be written.
    pub fn fail(&self) {
        if self.phase.get() == Phase::Open {
            self.phase.set(Phase::Closing);
        }
        self.queue_mut().clear();
        // Nor will the writer's buffer be.
        self.unwritten.borrow_mut().clear();
        self.forget_unwritten(self.unwritten_replies.get());
        self.stop_reader.notify_one();
        self.replies_drained.notify_one();
    }

    /// Moves queued frames into `buf`, encoded in the connection's framing, until
    /// it holds `max` bytes or the queue is empty. Replies stay in the budget until
    /// [`Peer::written`] says the socket took them.
    pub fn fill(&self, buf: &mut BytesMut, max: usize) {
        let mut codec = self.conn.borrow_mut();
        let mut q = self.queue_mut();
        let mut runs = self.unwritten.borrow_mut();
        let had_replies = q.replies() > 0;
        let mut replies = 0;
        while buf.len() < max {
            let Some((lane, item)) = q.pop() else { break };
            let start = buf.len();
            if let Err(e) = codec.encode(&item, buf) {
                log!("connection {}: cannot encode a frame: {e}", self.id);
                if let Outbound::Strict(_) = item {
                    let refusal = ServerFrame::error(ErrorCode::Internal, e.to_string());
                    let _ = codec.encode(&Outbound::Strict(refusal), buf);
                }
            }
            let n = buf.len() - start;
            match runs.back_mut() {
                Some((l, len)) if *l == lane => *len += n,
                _ => runs.push_back((lane, n)),
            }
            if lane == Lane::Reply {
                replies += n;
            }
        }
        let drained = had_replies && q.replies() <= REPLY_QUEUE_BYTES;
        drop(runs);
        drop(q);
        drop(codec);
        let held = self.unwritten_replies.get();
        self.unwritten_replies.set(held + replies);
        self.budget.moved(held, held + replies);
        if drained {
            self.replies_drained.notify_one();
        }
    }
}

/// The PTY size rule: the minimum rows and the minimum columns over the attached
/// read-write clients that announced a size. Read-only clients never count. `None`
/// when no client counts (the size then stays as it is).
pub(crate) fn pty_size(
    members: impl IntoIterator<Item = (bool, Option<(u16, u16)>)>,
) -> Option<(u16, u16)> {
    members
        .into_iter()
        .filter_map(|(writer, size)| if writer { size } else { None })
        .filter(|&(r, c)| r > 0 && c > 0)
        .reduce(|(r1, c1), (r2, c2)| (r1.min(r2), c1.min(c2)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn() -> ServerConn {
        latch_wire::fuzzing::server_conn_at(
            latch_wire::LegacyPolicy::Full,
            std::time::Instant::now(),
        )
    }

    fn budget() -> Rc<ReplyBudget> {
        Rc::new(ReplyBudget::new(REPLY_BUDGET_BYTES))
    }

    fn screen(n: usize) -> Outbound {
        Outbound::Strict(ServerFrame::Screen(bytes::Bytes::from(vec![b's'; n])))
    }

    const FULL: PeekRequest = PeekRequest {
        plain: true,
        full: true,
    };

    #[test]
    fn the_budget_admits_small_replies_always_and_large_ones_within_its_bound() {
        let b = ReplyBudget::new(1 << 20);
        assert!(b.admits(64 << 20), "anything when nothing is queued");
        b.moved(0, 900 << 10);
        assert!(b.admits(REPLY_QUEUE_BYTES), "a small reply always");
        assert!(b.admits(100 << 10));
        assert!(
            !b.admits(REPLY_QUEUE_BYTES + 1),
            "a large one only within the bound"
        );
        b.moved(900 << 10, 0);
        assert_eq!(b.queued(), 0);
        assert!(b.admits(1 << 20));
    }

    fn drain(c: &Peer, codec: &mut latch_wire::ClientCodec) -> Vec<ServerFrame> {
        let mut buf = BytesMut::new();
        c.fill(&mut buf, usize::MAX);
        c.written(buf.len());
        let mut frames = Vec::new();
        while let Some(f) = codec.decode_server(&mut buf).unwrap() {
            frames.push(f);
        }
        frames
    }

    #[test]
    fn replies_are_counted_across_connections_and_a_large_peek_waits_for_room() {
        let shared = Rc::new(ReplyBudget::new(1 << 20));
        let a = Peer::new(1, conn(), shared.clone());
        let b = Peer::new(2, conn(), shared.clone());
        let (mut ca, mut cb) = (
            latch_wire::ClientCodec::default(),
            latch_wire::ClientCodec::default(),
        );
        // Every reply counts, on every connection.
        a.send_screen(screen(700 << 10), FULL);
        assert_eq!(shared.queued(), cost(&screen(700 << 10)));
        assert!(b.send(Outbound::Strict(ServerFrame::Pong(1))));
        let both = cost(&screen(700 << 10)) + cost(&Outbound::Strict(ServerFrame::Pong(1)));
        assert_eq!(shared.queued(), both);
        // A second large screen does not fit: nothing is queued, the PEEK waits.
        b.send_screen(screen(700 << 10), FULL);
        assert_eq!(shared.queued(), both, "not queued");
        assert!(b.parked.get().is_some());
        // A small one still goes.
        b.send_screen(screen(1000), FULL);
        assert_eq!(drain(&b, &mut cb).len(), 2, "PONG and the small screen");
        // The parked PEEK is served once A's screen has been written.
        let served = Cell::new(0);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let wait = b.serve_parked(|p| {
                served.set(served.get() + 1);
                b.send_screen(screen(700 << 10), p);
            });
            tokio::pin!(wait);
            assert!(
                futures_util::FutureExt::now_or_never(wait.as_mut()).is_none(),
                "waits while A's reply is unread"
            );
            // Taken by A's writer but not yet by its socket: it still counts.
            let mut buf = BytesMut::new();
            a.fill(&mut buf, usize::MAX);
            assert_eq!(shared.queued(), buf.len());
            assert!(futures_util::FutureExt::now_or_never(wait.as_mut()).is_none());
            a.written(buf.len() / 2);
            assert!(futures_util::FutureExt::now_or_never(wait.as_mut()).is_none());
            a.written(buf.len() - buf.len() / 2);
            assert_eq!(shared.queued(), 0);
            let frames = ca.decode_server(&mut buf).unwrap();
            assert!(matches!(frames, Some(ServerFrame::Screen(_))));
            wait.await;
        });
        assert_eq!(served.get(), 1);
        assert_eq!(shared.queued(), cost(&screen(700 << 10)));
        let frames = drain(&b, &mut cb);
        assert!(matches!(&frames[..], [ServerFrame::Screen(s)] if s.len() == 700 << 10));
        assert_eq!(shared.queued(), 0);
    }

    #[test]
    fn a_peek_expected_not_to_fit_waits_before_its_screen_is_cut() {
        let shared = Rc::new(ReplyBudget::new(1 << 20));
        let a = Peer::new(1, conn(), shared.clone());
        let b = Peer::new(2, conn(), shared.clone());
        assert!(a.may_cut(FULL), "nothing is known, nothing is queued");
        a.send_screen(screen(700 << 10), FULL);
        assert_eq!(shared.last_screen(FULL), cost(&screen(700 << 10)));
        assert!(!b.may_cut(FULL), "a screen like the last one would not fit");
        assert!(b.parked.get().is_some());
        let visible = PeekRequest {
            plain: true,
            full: false,
        };
        let c = Peer::new(3, conn(), shared.clone());
        assert!(c.may_cut(visible), "another kind has its own estimate");
    }

    #[test]
    fn a_capture_waits_for_the_budget_as_a_peek_of_its_own_kind() {
        let shared = Rc::new(ReplyBudget::new(1 << 20));
        let a = Peer::new(1, conn(), shared.clone());
        let b = Peer::new(2, conn(), shared.clone());
        let full = ScreenAsk::Capture { full: true };
        let cells = || Outbound::Strict(ServerFrame::Capture(vec![0; 700 << 10].into()));
        assert!(a.may_cut(full));
        a.send_screen(cells(), full);
        assert_eq!(shared.last_screen(full), cost(&cells()));
        for (plain, full) in [(false, false), (false, true), (true, false), (true, true)] {
            let peek = PeekRequest { plain, full };
            assert_eq!(
                shared.last_screen(peek),
                0,
                "PEEK's estimates are their own"
            );
        }
        assert!(!b.may_cut(full));
        assert_eq!(b.parked.get().map(|(ask, _)| ask), Some(full));
        let visible = ScreenAsk::Capture { full: false };
        assert!(Peer::new(3, conn(), shared.clone()).may_cut(visible));
    }

    #[test]
    fn a_connection_that_ends_or_fails_gives_its_replies_back() {
        let shared = Rc::new(ReplyBudget::new(1 << 20));
        let a = Peer::new(1, conn(), shared.clone());
        a.send_screen(screen(500 << 10), FULL);
        a.fail();
        assert_eq!(shared.queued(), 0, "fail");
        let b = Peer::new(2, conn(), shared.clone());
        b.send_screen(screen(500 << 10), FULL);
        b.close();
        assert!(shared.queued() > 0, "a closing connection still flushes");
        drop(b);
        assert_eq!(shared.queued(), 0, "dropped");
        let c = Peer::new(3, conn(), shared.clone());
        c.send_screen(screen(500 << 10), FULL);
        c.cut_off(Duration::from_secs(60));
        assert!(shared.queued() < 1024, "only the too-slow error is left");
        drop(c);
        assert_eq!(shared.queued(), 0);
    }

    fn out(n: usize) -> Outbound {
        Outbound::Strict(ServerFrame::Output(bytes::Bytes::from(vec![b'x'; n])))
    }

    #[test]
    fn size_rule_table() {
        let w = |r, c| (true, Some((r, c)));
        let ro = |r, c| (false, Some((r, c)));
        type Member = (bool, Option<(u16, u16)>);
        type Case = (Vec<Member>, Option<(u16, u16)>);
        let cases: Vec<Case> = vec![
            (vec![], None),
            (vec![w(24, 80)], Some((24, 80))),
            (vec![w(24, 80), w(50, 70)], Some((24, 70))),
            // Read-only clients never count, however small.
            (vec![w(24, 80), ro(5, 5)], Some((24, 80))),
            (vec![ro(5, 5)], None),
            // A writer without a size does not count.
            (vec![(true, None), w(30, 100)], Some((30, 100))),
            (vec![(true, None)], None),
            (vec![w(0, 80), w(30, 90)], Some((30, 90))),
        ];
        for (members, want) in cases {
            assert_eq!(pty_size(members.clone()), want, "{members:?}");
        }
    }

    fn slot() -> usize {
        std::mem::size_of::<(Lane, Outbound)>()
    }

    #[test]
    fn queue_accounting_and_bound() {
        let limit = 1000 + 2 * slot();
        let mut q = Queue::new(limit, 100);
        assert_eq!(q.push_stream(out(500)), Pushed::Queued);
        assert_eq!(q.pending(), 500 + slot());
        assert_eq!(q.push_stream(out(400)), Pushed::Queued);
        assert_eq!(q.pending(), 900 + 2 * slot());
        assert_eq!(q.push_stream(out(101)), Pushed::Overflow);
        assert_eq!(q.pending(), 900 + 2 * slot(), "nothing queued");
        assert!(q.pop().is_some());
        assert_eq!(q.pending(), 400 + slot());
        assert_eq!(q.push_stream(out(100)), Pushed::Queued);
        q.clear();
        assert_eq!(q.pending(), 0);
        // One frame larger than the bound fits an empty queue, and only alone.
        assert_eq!(q.push_stream(out(5000)), Pushed::Queued);
        assert_eq!(q.push_stream(out(1)), Pushed::Overflow);
        assert!(q.pop().is_some());
        assert!(q.pop().is_none());
        assert_eq!(q.pending(), 0);
    }

    #[test]
    fn small_frames_count_their_real_size_and_the_item_cap_holds() {
        // A PONG is not free: it costs its queue slot.
        let pong = Outbound::Strict(ServerFrame::Pong(1));
        assert!(cost(&pong) >= 64, "{}", cost(&pong));
        let mut q = Queue::new(usize::MAX, 10);
        for _ in 0..10 {
            assert_eq!(q.push_stream(out(1)), Pushed::Queued);
        }
        assert_eq!(q.push_stream(out(1)), Pushed::Overflow, "item cap");
    }

    #[test]
    fn falling_behind_drops_stream_keeps_replies_and_resyncs_once_drained() {
        let c = Peer::with_bounds(1, conn(), budget(), 10 * 1024, 1000);
        assert!(c.send(Outbound::Strict(ServerFrame::Pong(7))));
        let mut streamed = 0;
        while c.stream(out(1024)) {
            streamed += 1;
            assert!(streamed < 100, "bound not enforced");
        }
        assert!(c.is_behind());
        assert_eq!(c.phase(), Phase::Open, "never cut off for falling behind");
        assert!(!c.stream(out(1)), "nothing streams while behind");
        assert!(!c.wants_resync(), "the reply is still queued");
        // The writer drains: only the reply was left.
        let mut buf = BytesMut::new();
        c.fill(&mut buf, usize::MAX);
        let mut codec = latch_wire::ClientCodec::default();
        assert_eq!(
            codec.decode_server(&mut buf).unwrap().unwrap(),
            ServerFrame::Pong(7)
        );
        assert!(buf.is_empty(), "stream frames were dropped");
        assert!(c.wants_resync());
        c.resynced();
        assert!(!c.is_behind());
        assert!(c.stream(out(1)));
        assert_eq!(c.resyncs(), 1);
    }

    #[test]
    fn a_stalled_client_is_cut_off_with_too_slow() {
        let c = Peer::new(1, conn(), budget());
        assert!(c.stream(out(10)));
        c.cut_off(Duration::from_secs(60));
        assert_eq!(c.phase(), Phase::Cut);
        assert!(!c.stream(out(1)), "a cut client takes nothing more");
        let mut buf = BytesMut::new();
        c.fill(&mut buf, usize::MAX);
        let mut client = latch_wire::ClientCodec::default();
        let frame = client.decode_server(&mut buf).unwrap().unwrap();
        assert!(matches!(
            frame,
            ServerFrame::Error {
                code: ErrorCode::TooSlow,
                ..
            }
        ));
        assert!(buf.is_empty());
    }

    #[test]
    fn a_legacy_connection_gets_legacy_packets_and_no_too_slow() {
        let c = Peer::new(2, conn(), budget());
        // Its first bytes (a legacy STATUS request) decide the framing, once.
        let mut opening = BytesMut::from(&[7u8, 0, 0, 0, 0][..]);
        assert!(c
            .with_conn(|conn| conn.decode(&mut opening))
            .unwrap()
            .is_some());
        assert!(c.with_conn(|conn| conn.is_legacy()));
        assert!(c.stream(Outbound::Strict(ServerFrame::Exit(
            latch_wire::ExitStatus {
                code: None,
                signal: Some(9)
            }
        ))));
        let mut buf = BytesMut::new();
        c.fill(&mut buf, usize::MAX);
        assert_eq!(&buf[..], &[4, 0, 0, 0, 4, 0, 0, 0, 137][..], "EXIT 128+9");
        assert!(c.stream(out(10)));
        c.cut_off(Duration::from_secs(60));
        buf.clear();
        c.fill(&mut buf, usize::MAX);
        assert!(buf.is_empty(), "the old framing has no error packet");
    }
}
