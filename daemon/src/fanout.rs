//! Per-connection outbound queues, the backpressure bound, and the PTY size rule.
//!
//! # Backpressure (SPEC.md §8 cites this)
//!
//! Every connection has one outbound queue, shared by its replies and by the output
//! fanned out to it, and one writer task that drains the queue to the socket. The
//! queue is bounded by [`CLIENT_QUEUE_BYTES`] of *pending* bytes: each queued frame
//! costs its payload length plus [`FRAME_OVERHEAD`]. Enqueueing never waits:
//!
//! - if the frame fits (or the queue is empty: one frame larger than the bound, such
//!   as a full-scrollback SCREEN, is accepted alone), it is queued;
//! - otherwise the client is **cut off**: its pending queue is dropped, a strict
//!   client is sent `ServerFrame::Error { code: too-slow }` after whatever frame was
//!   already half-written (best effort, within [`CUT_WRITE_TIMEOUT`]), and the
//!   connection is closed. A legacy client (no error packet) is just closed.
//!
//! So the PTY reader and the other clients never wait on a slow client; a client that
//! falls more than 8 MiB behind loses its connection with a typed reason, never
//! silently loses bytes in the middle of its stream. Memory per client stays under
//! the bound plus one frame plus the writer's batch ([`WRITE_BATCH`]).

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use latch_wire::codec::{Outbound, ServerCodec};
use latch_wire::legacy::LegacyServerFrame;
use latch_wire::limits::CLIENT_QUEUE_BYTES;
use latch_wire::{ErrorCode, ExitStatus, ServerFrame};
use tokio::sync::Notify;

/// Accounting overhead per queued frame (header, variant, length varint), in bytes.
pub(crate) const FRAME_OVERHEAD: usize = 16;
/// How long a cut-off client's writer may take to finish its half-written frame and
/// the `too-slow` error before the socket is closed regardless.
pub(crate) const CUT_WRITE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a politely closing connection (DETACH, a fatal refusal, EOF, daemon
/// exit) may take to flush its queue before the socket is closed regardless.
pub(crate) const CLOSE_FLUSH_TIMEOUT: Duration = Duration::from_secs(5);
/// Encoded bytes the writer takes from the queue per socket write.
pub(crate) const WRITE_BATCH: usize = 256 * 1024;

/// What a queued frame costs against the bound.
pub(crate) fn cost(item: &Outbound) -> usize {
    let payload = match item {
        Outbound::Strict(ServerFrame::Output(b) | ServerFrame::Screen(b))
        | Outbound::Legacy(
            LegacyServerFrame::Data(b)
            | LegacyServerFrame::Screen(b)
            | LegacyServerFrame::Status(b),
        ) => b.len(),
        Outbound::Strict(ServerFrame::Error { detail, .. }) => detail.len(),
        Outbound::Strict(ServerFrame::Welcome { server, .. }) => server.len(),
        Outbound::Strict(ServerFrame::Status(_)) => 128,
        _ => 0,
    };
    payload.saturating_add(FRAME_OVERHEAD)
}

/// The result of [`Queue::push`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pushed {
    /// The frame is queued.
    Queued,
    /// The frame would take the queue over its bound; nothing was queued.
    Overflow,
}

/// A bounded queue of outbound frames (pure accounting, no IO).
#[derive(Debug)]
pub(crate) struct Queue {
    items: VecDeque<Outbound>,
    pending: usize,
    limit: usize,
}

impl Queue {
    /// An empty queue bounded by `limit` pending bytes.
    pub fn new(limit: usize) -> Self {
        Self {
            items: VecDeque::new(),
            pending: 0,
            limit,
        }
    }

    /// Queues `item` unless it would take a non-empty queue over the bound.
    pub fn push(&mut self, item: Outbound) -> Pushed {
        let c = cost(&item);
        if self.pending > 0 && self.pending.saturating_add(c) > self.limit {
            return Pushed::Overflow;
        }
        self.pending = self.pending.saturating_add(c);
        self.items.push_back(item);
        Pushed::Queued
    }

    /// Takes the oldest frame.
    pub fn pop(&mut self) -> Option<Outbound> {
        let item = self.items.pop_front()?;
        self.pending = self.pending.saturating_sub(cost(&item));
        Some(item)
    }

    /// Drops everything pending.
    pub fn clear(&mut self) {
        self.items.clear();
        self.pending = 0;
    }

    /// Bytes pending.
    pub fn pending(&self) -> usize {
        self.pending
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

/// One connection's outbound side, shared by its reader, its writer and the fan-out.
#[derive(Debug)]
pub(crate) struct Client {
    /// Connection number, for the session's tables and the log.
    pub id: u64,
    legacy: Cell<bool>,
    queue: RefCell<Queue>,
    phase: Cell<Phase>,
    /// Wakes the writer: something was queued or the phase changed.
    pub wake_writer: Notify,
    /// Wakes the writer out of a blocked socket write: the client was cut off.
    pub cut: Notify,
    /// Stops the reader: the connection is closing.
    pub stop_reader: Notify,
}

impl Client {
    /// A new open connection.
    pub fn new(id: u64) -> Self {
        Self {
            id,
            legacy: Cell::new(false),
            queue: RefCell::new(Queue::new(CLIENT_QUEUE_BYTES)),
            phase: Cell::new(Phase::Open),
            wake_writer: Notify::new(),
            cut: Notify::new(),
            stop_reader: Notify::new(),
        }
    }

    /// Records that the connection speaks the legacy framing.
    pub fn set_legacy(&self) {
        self.legacy.set(true);
    }

    /// Whether the connection speaks the legacy framing.
    pub fn is_legacy(&self) -> bool {
        self.legacy.get()
    }

    /// The current phase.
    pub fn phase(&self) -> Phase {
        self.phase.get()
    }

    /// Queues a frame. Returns false if the connection is closing or was just cut
    /// off by this frame (the caller then drops the client from the fan-out).
    pub fn send(&self, item: Outbound) -> bool {
        if self.phase.get() != Phase::Open {
            return false;
        }
        let pushed = self.queue.borrow_mut().push(item);
        match pushed {
            Pushed::Queued => {
                self.wake_writer.notify_one();
                true
            }
            Pushed::Overflow => {
                self.cut_off();
                false
            }
        }
    }

    /// Cuts the client off: drops its queue, queues `too-slow` (strict only) and
    /// closes the connection.
    fn cut_off(&self) {
        self.phase.set(Phase::Cut);
        let mut q = self.queue.borrow_mut();
        log!(
            "connection {} cut off: more than {} bytes of output pending ({} dropped)",
            self.id,
            CLIENT_QUEUE_BYTES,
            q.pending()
        );
        q.clear();
        if !self.legacy.get() {
            // Into the emptied queue: always accepted.
            let _ = q.push(Outbound::Strict(ServerFrame::error(
                ErrorCode::TooSlow,
                format!("client fell more than {CLIENT_QUEUE_BYTES} bytes behind and was cut off"),
            )));
        }
        drop(q);
        self.cut.notify_one();
        self.wake_writer.notify_one();
        self.stop_reader.notify_one();
    }

    /// Closes politely: what is queued is still written.
    pub fn close(&self) {
        if self.phase.get() == Phase::Open {
            self.phase.set(Phase::Closing);
        }
        self.wake_writer.notify_one();
        self.stop_reader.notify_one();
    }

    /// The socket failed: nothing more can be written.
    pub fn fail(&self) {
        if self.phase.get() == Phase::Open {
            self.phase.set(Phase::Closing);
        }
        self.queue.borrow_mut().clear();
        self.stop_reader.notify_one();
    }

    /// Moves queued frames into `buf`, encoded, until it holds `max` bytes or the
    /// queue is empty.
    pub fn fill(&self, codec: &mut ServerCodec, buf: &mut BytesMut, max: usize) {
        let mut q = self.queue.borrow_mut();
        while buf.len() < max {
            let Some(item) = q.pop() else { break };
            if let Err(e) = codec.encode_outbound(&item, buf) {
                log!("connection {}: cannot encode a frame: {e}", self.id);
                if let Outbound::Strict(_) = item {
                    let refusal = ServerFrame::error(ErrorCode::Internal, e.to_string());
                    let _ = codec.encode_outbound(&Outbound::Strict(refusal), buf);
                }
            }
        }
    }

    /// OUTPUT (strict) or DATA (legacy).
    pub fn output_frame(&self, chunk: Bytes) -> Outbound {
        if self.is_legacy() {
            Outbound::Legacy(LegacyServerFrame::Data(chunk))
        } else {
            Outbound::Strict(ServerFrame::Output(chunk))
        }
    }

    /// SCREEN in the connection's framing.
    pub fn screen_frame(&self, screen: Bytes) -> Outbound {
        if self.is_legacy() {
            Outbound::Legacy(LegacyServerFrame::Screen(screen))
        } else {
            Outbound::Strict(ServerFrame::Screen(screen))
        }
    }

    /// GEOMETRY in the connection's framing.
    pub fn geometry_frame(&self, rows: u16, cols: u16) -> Outbound {
        if self.is_legacy() {
            Outbound::Legacy(LegacyServerFrame::Geometry { rows, cols })
        } else {
            Outbound::Strict(ServerFrame::Geometry { rows, cols })
        }
    }

    /// EXIT in the connection's framing: the legacy packet carries one i32, the
    /// exit code, or 128 + the signal number for a program killed by a signal.
    pub fn exit_frame(&self, status: ExitStatus) -> Outbound {
        if self.is_legacy() {
            Outbound::Legacy(LegacyServerFrame::Exit(legacy_exit_code(status)))
        } else {
            Outbound::Strict(ServerFrame::Exit(status))
        }
    }
}

/// The single exit code the legacy framing carries: the code, or 128 + signal, or
/// -1 if neither is known.
pub(crate) fn legacy_exit_code(status: ExitStatus) -> i32 {
    match (status.code, status.signal) {
        (Some(code), _) => code,
        (None, Some(sig)) => sig.saturating_add(128),
        (None, None) => -1,
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

    fn out(n: usize) -> Outbound {
        Outbound::Strict(ServerFrame::Output(Bytes::from(vec![b'x'; n])))
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

    #[test]
    fn queue_accounting_and_bound() {
        let limit = 1000;
        let mut q = Queue::new(limit);
        assert_eq!(q.push(out(500)), Pushed::Queued);
        assert_eq!(q.pending(), 500 + FRAME_OVERHEAD);
        assert_eq!(q.push(out(400)), Pushed::Queued);
        assert_eq!(q.pending(), 900 + 2 * FRAME_OVERHEAD);
        // 932 + 116 > 1000.
        assert_eq!(q.push(out(100)), Pushed::Overflow);
        assert_eq!(q.pending(), 900 + 2 * FRAME_OVERHEAD, "nothing queued");
        assert!(q.pop().is_some());
        assert_eq!(q.pending(), 400 + FRAME_OVERHEAD);
        assert_eq!(q.push(out(100)), Pushed::Queued);
        q.clear();
        assert_eq!(q.pending(), 0);
        // One frame larger than the bound fits an empty queue, and only alone.
        assert_eq!(q.push(out(5000)), Pushed::Queued);
        assert_eq!(q.push(out(1)), Pushed::Overflow);
        assert!(q.pop().is_some());
        assert!(q.pop().is_none());
        assert_eq!(q.pending(), 0);
    }

    #[test]
    fn overflow_cuts_off_with_too_slow_and_refuses_more() {
        let c = Client::new(1);
        let chunk = latch_wire::limits::MAX_OUTPUT_CHUNK;
        let mut sent = 0usize;
        while c.send(out(chunk)) {
            sent += chunk;
            assert!(sent <= CLIENT_QUEUE_BYTES, "bound not enforced");
        }
        assert!(
            sent + 2 * chunk > CLIENT_QUEUE_BYTES,
            "cut too early: {sent}"
        );
        assert_eq!(c.phase(), Phase::Cut);
        assert!(!c.send(out(1)), "a cut client takes nothing more");
        // The only frame left is the typed reason.
        let mut codec = ServerCodec::default();
        let mut buf = BytesMut::new();
        c.fill(&mut codec, &mut buf, usize::MAX);
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
    fn legacy_cut_sends_nothing_and_legacy_frames_are_legacy() {
        let c = Client::new(2);
        c.set_legacy();
        assert!(matches!(
            c.exit_frame(ExitStatus {
                code: None,
                signal: Some(9)
            }),
            Outbound::Legacy(LegacyServerFrame::Exit(137))
        ));
        while c.send(out(latch_wire::limits::MAX_OUTPUT_CHUNK)) {}
        let mut buf = BytesMut::new();
        c.fill(&mut ServerCodec::default(), &mut buf, usize::MAX);
        assert!(buf.is_empty());
    }

    #[test]
    fn legacy_exit_codes() {
        let s = |code, signal| ExitStatus { code, signal };
        assert_eq!(legacy_exit_code(s(Some(3), None)), 3);
        assert_eq!(legacy_exit_code(s(None, Some(15))), 143);
        assert_eq!(legacy_exit_code(s(None, None)), -1);
    }
}
