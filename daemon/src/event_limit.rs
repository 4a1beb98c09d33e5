//! The terminal events' rate limit (SPEC §9.9): per event type, a token bucket of
//! [`EVENT_BURST`] events at once, then one more per [`EVENT_REFILL`]; the next event
//! recorded of that type says how many were dropped meanwhile.
//!
//! Time is passed in, so the rule is tested without a clock.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use latch_registry::events::{kind, EventKind};
use latch_screen::TermEvent;

/// Terminal events of one type recorded at once at most (SPEC §9.9).
pub(crate) const EVENT_BURST: f64 = 10.0;
/// Then one more per this long.
pub(crate) const EVENT_REFILL: Duration = Duration::from_secs(1);

/// One type's bucket.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
    dropped: u64,
}

/// Every type's bucket.
#[derive(Debug, Default)]
pub(crate) struct EventLimiter {
    buckets: HashMap<&'static str, Bucket>,
}

impl EventLimiter {
    /// An event of type `kind` at `now`: `Some(carried)` if it is to be recorded,
    /// carrying the count dropped before it (`None` when none was), or `None` if it
    /// is dropped (and counted for the next one).
    pub(crate) fn admit(&mut self, kind: &'static str, now: Instant) -> Option<Option<u64>> {
        let b = self.buckets.entry(kind).or_insert(Bucket {
            tokens: EVENT_BURST,
            at: now,
            dropped: 0,
        });
        let refill = now.saturating_duration_since(b.at).as_secs_f64() / EVENT_REFILL.as_secs_f64();
        b.tokens = (b.tokens + refill).min(EVENT_BURST);
        b.at = now;
        if b.tokens < 1.0 {
            b.dropped += 1;
            return None;
        }
        b.tokens -= 1.0;
        let dropped = std::mem::take(&mut b.dropped);
        Some((dropped > 0).then_some(dropped))
    }

    /// An admitted event of type `kind` was not recorded after all (the writer
    /// could not take it): it counts as dropped, with the `carried` it carried.
    pub(crate) fn not_recorded(&mut self, kind: &'static str, carried: Option<u64>) {
        if let Some(b) = self.buckets.get_mut(kind) {
            b.dropped += carried.unwrap_or(0) + 1;
        }
    }
}

/// The event type of a terminal event, as the event log names it.
pub(crate) fn kind_of(e: &TermEvent) -> &'static str {
    match e {
        TermEvent::Bell => kind::BELL,
        TermEvent::Title(_) => kind::TITLE_CHANGE,
        TermEvent::Notification { .. } => kind::NOTIFICATION,
        TermEvent::CursorVisible(_) => kind::CURSOR_VISIBLE,
    }
}

/// The event log's record of a terminal event, with the count dropped before it and
/// the output cursor it lies at or before (SPEC §9.9).
pub(crate) fn event_kind(e: TermEvent, dropped: Option<u64>, at: Option<u64>) -> EventKind {
    match e {
        TermEvent::Bell => EventKind::Bell {
            dropped,
            output_cursor: at,
        },
        TermEvent::Title(title) => EventKind::TitleChange {
            title,
            dropped,
            output_cursor: at,
        },
        TermEvent::Notification { osc, title, body } => EventKind::Notification {
            source: format!("osc{osc}"),
            title,
            body,
            dropped,
            output_cursor: at,
        },
        TermEvent::CursorVisible(visible) => EventKind::CursorVisible {
            visible,
            dropped,
            output_cursor: at,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BURST: u32 = 10;

    #[test]
    fn a_burst_passes_then_one_per_refill_carrying_the_dropped_count() {
        assert_eq!(EVENT_BURST, f64::from(BURST));
        let t0 = Instant::now();
        let mut l = EventLimiter::default();
        for i in 0..BURST {
            assert_eq!(
                l.admit(kind::BELL, t0),
                Some(None),
                "event {i} of the burst"
            );
        }
        assert_eq!(l.admit(kind::BELL, t0), None);
        assert_eq!(l.admit(kind::BELL, t0), None);
        // Half a refill is not a token yet.
        assert_eq!(l.admit(kind::BELL, t0 + EVENT_REFILL / 2), None);
        // A full one is, and the event says three were dropped before it.
        assert_eq!(l.admit(kind::BELL, t0 + EVENT_REFILL), Some(Some(3)));
        assert_eq!(l.admit(kind::BELL, t0 + EVENT_REFILL), None);
        // After a long quiet, the bucket is full again, but no fuller than a burst.
        let later = t0 + EVENT_REFILL * 1000;
        assert_eq!(l.admit(kind::BELL, later), Some(Some(1)));
        for _ in 1..BURST {
            assert_eq!(l.admit(kind::BELL, later), Some(None));
        }
        assert_eq!(l.admit(kind::BELL, later), None);
    }

    #[test]
    fn each_type_has_its_own_bucket() {
        let t0 = Instant::now();
        let mut l = EventLimiter::default();
        for _ in 0..=BURST {
            l.admit(kind::BELL, t0);
        }
        assert_eq!(l.admit(kind::BELL, t0), None);
        assert_eq!(l.admit(kind::TITLE_CHANGE, t0), Some(None));
    }

    #[test]
    fn an_event_not_recorded_counts_as_dropped_with_what_it_carried() {
        let t0 = Instant::now();
        let mut l = EventLimiter::default();
        for _ in 0..BURST {
            l.admit(kind::TITLE_CHANGE, t0);
        }
        assert_eq!(l.admit(kind::TITLE_CHANGE, t0), None);
        let carried = l.admit(kind::TITLE_CHANGE, t0 + EVENT_REFILL).unwrap();
        assert_eq!(carried, Some(1));
        // The writer's queue was full: that event and the one it carried are lost.
        l.not_recorded(kind::TITLE_CHANGE, carried);
        let next = l.admit(kind::TITLE_CHANGE, t0 + EVENT_REFILL * 2);
        assert_eq!(next, Some(Some(2)));
    }

    #[test]
    fn terminal_events_become_their_records() {
        let title = TermEvent::Title("t".into());
        assert_eq!(kind_of(&title), kind::TITLE_CHANGE);
        assert_eq!(
            event_kind(title, Some(4), Some(7)),
            EventKind::TitleChange {
                title: "t".into(),
                dropped: Some(4),
                output_cursor: Some(7),
            }
        );
        let n = TermEvent::Notification {
            osc: 777,
            title: Some("a".into()),
            body: "b".into(),
        };
        assert_eq!(kind_of(&n), kind::NOTIFICATION);
        assert!(matches!(
            event_kind(n, None, None),
            EventKind::Notification { source, .. } if source == "osc777"
        ));
        assert_eq!(kind_of(&TermEvent::Bell), kind::BELL);
        assert_eq!(
            kind_of(&TermEvent::CursorVisible(true)),
            kind::CURSOR_VISIBLE
        );
    }
}
