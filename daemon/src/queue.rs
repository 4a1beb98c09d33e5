//! A connection's bounded outbound queue (pure accounting, no IO; the `outbound`
//! module documents the bounds, SPEC.md §8): two lanes, replies and stream frames,
//! in one order, each frame counted at what it really holds.

use std::collections::VecDeque;

use latch_wire::codec::Outbound;
use latch_wire::legacy::LegacyServerFrame;
use latch_wire::ServerFrame;

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

#[cfg(test)]
mod tests {
    use super::*;

    fn out(n: usize) -> Outbound {
        Outbound::Strict(ServerFrame::Output(bytes::Bytes::from(vec![b'x'; n])))
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
    fn dropping_the_stream_keeps_the_replies_in_order() {
        let mut q = Queue::new(usize::MAX, 100);
        let pong = |n| Outbound::Strict(ServerFrame::Pong(n));
        q.push_reply(pong(1));
        assert_eq!(q.push_stream(out(100)), Pushed::Queued);
        q.push_reply(pong(2));
        assert_eq!(q.push_stream(out(200)), Pushed::Queued);
        let replies = cost(&pong(1)) + cost(&pong(2));
        assert_eq!(q.replies(), replies);
        assert_eq!(q.drop_stream(), cost(&out(100)) + cost(&out(200)));
        assert_eq!(q.pending(), replies);
        assert_eq!(q.pop(), Some((Lane::Reply, pong(1))));
        assert_eq!(q.pop(), Some((Lane::Reply, pong(2))));
        assert!(q.is_empty());
        assert_eq!((q.pending(), q.replies()), (0, 0));
    }
}
