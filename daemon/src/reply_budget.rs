//! The daemon's reply budget (SPEC.md §8; the `outbound` module documents the
//! bounds): the reply bytes queued over every connection, and the estimate of each
//! kind of large screen that decides whether a PEEK or CAPTURE may cut one now.

use std::cell::Cell;

use latch_wire::limits::{REPLY_BUDGET_BYTES, REPLY_QUEUE_BYTES};
use latch_wire::PeekRequest;
use tokio::sync::Notify;

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
    pub(crate) fn cut(&self, peek: ScreenAsk, cost: usize) {
        self.screens[Self::kind(peek)].set(cost);
    }

    fn kind(ask: ScreenAsk) -> usize {
        match ask {
            ScreenAsk::Peek(peek) => usize::from(peek.plain) * 2 + usize::from(peek.full),
            ScreenAsk::Capture { full } => 4 + usize::from(full),
        }
    }

    /// One connection's reply bytes went from `before` to `after`.
    pub(crate) fn moved(&self, before: usize, after: usize) {
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

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn each_kind_of_screen_keeps_its_own_estimate() {
        let b = ReplyBudget::new(1 << 20);
        let asks = [
            ScreenAsk::Peek(PeekRequest {
                plain: false,
                full: false,
            }),
            ScreenAsk::Peek(PeekRequest {
                plain: false,
                full: true,
            }),
            ScreenAsk::Peek(PeekRequest {
                plain: true,
                full: false,
            }),
            ScreenAsk::Peek(PeekRequest {
                plain: true,
                full: true,
            }),
            ScreenAsk::Capture { full: false },
            ScreenAsk::Capture { full: true },
        ];
        for (i, ask) in asks.iter().enumerate() {
            b.cut(*ask, 100 + i);
        }
        for (i, ask) in asks.iter().enumerate() {
            assert_eq!(b.last_screen(*ask), 100 + i, "{ask:?}");
        }
    }

    #[test]
    fn freeing_wakes_the_waiters_and_the_count_never_goes_below_zero() {
        let b = ReplyBudget::new(1000);
        b.moved(0, 10);
        let woken = b.freed.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        b.moved(10, 0);
        assert!(futures_util::FutureExt::now_or_never(woken).is_some());
        b.moved(5, 0);
        assert_eq!(b.queued(), 0);
    }
}
