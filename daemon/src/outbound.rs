//! Per-connection outbound queues and the backpressure bounds: a connection's queue
//! accounting is `queue`, the reply bytes of every connection `reply_budget`.
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
//!   [`REPLY_BUDGET_BYTES`](latch_wire::limits::REPLY_BUDGET_BYTES); otherwise that PEEK waits, and its connection is not
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
use latch_wire::limits::{
    CLIENT_QUEUE_BYTES, CLIENT_QUEUE_ITEMS, CLIENT_STALL_MS, REPLY_QUEUE_BYTES,
};
use latch_wire::server::ServerConn;
use latch_wire::{ErrorCode, ServerFrame};
use tokio::sync::Notify;

use crate::queue::{cost, Lane, Pushed, Queue};
pub(crate) use crate::reply_budget::{ReplyBudget, ScreenAsk};

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
    /// A terminal the client passed (SPEC §5.7).
    pub tty: crate::terminal::Slot,
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
            tty: crate::terminal::Slot::default(),
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

    /// Takes the oldest queued frame, for a writer that routes each frame itself
    /// (a passed terminal's, SPEC §5.7); a reply leaves the budget here.
    pub fn pop_item(&self) -> Option<(Lane, Outbound)> {
        let mut q = self.queue_mut();
        let had_replies = q.replies() > 0;
        let item = q.pop();
        let drained = had_replies && q.replies() <= REPLY_QUEUE_BYTES;
        drop(q);
        if drained {
            self.replies_drained.notify_one();
        }
        item
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
#[cfg(test)]
#[path = "outbound_tests.rs"]
mod tests;
