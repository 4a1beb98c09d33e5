//! Everything `latch control` writes goes through one writer thread (SPEC §13.5):
//! answers first, then notifications, each subscription's within its own byte
//! budget. A blocked stdout blocks only that thread: subscriptions keep reading
//! their daemons and drop locally, and memory stays bounded by the caps.

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::sync::{Condvar, Mutex};

/// The outgoing lines.
#[derive(Debug, Default)]
pub struct Outbox {
    state: Mutex<State>,
    ready: Condvar,
}

#[derive(Debug, Default)]
struct State {
    answers: VecDeque<String>,
    notes: VecDeque<(u64, String)>,
    /// Bytes queued per subscription.
    queued: HashMap<u64, usize>,
    /// Answers queued or being written (EOF waits for them).
    unwritten: usize,
}

impl Outbox {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Queues an answer: always (answers are bounded by the requests in flight).
    pub fn answer(&self, line: String) {
        let mut s = self.lock();
        s.answers.push_back(line);
        s.unwritten += 1;
        self.ready.notify_all();
    }

    /// Queues `lines` for subscription `sub` if the last one fits its budget with
    /// the others (`budget` bytes queued at most); `false`: nothing was queued.
    pub fn notify_if_room(&self, sub: u64, lines: Vec<String>, budget: usize) -> bool {
        let mut s = self.lock();
        let have = s.queued.get(&sub).copied().unwrap_or(0);
        let want: usize = lines.iter().map(String::len).sum();
        if have > 0 && have + want > budget {
            return false;
        }
        *s.queued.entry(sub).or_default() += want;
        s.notes.extend(lines.into_iter().map(|l| (sub, l)));
        self.ready.notify_all();
        true
    }

    /// Whether `want` more bytes for `sub` would fit its budget now (a cheap check
    /// before a notification is built; [`Outbox::notify_if_room`] decides).
    pub fn has_room(&self, sub: u64, want: usize, budget: usize) -> bool {
        let have = self.lock().queued.get(&sub).copied().unwrap_or(0);
        have == 0 || have + want <= budget
    }

    /// Queues a notification whatever the budget: the few small ones that end or
    /// explain a subscription (`lagged`, `exit`, `replaced`, `closed`).
    pub fn notify(&self, sub: u64, line: String) {
        let mut s = self.lock();
        *s.queued.entry(sub).or_default() += line.len();
        s.notes.push_back((sub, line));
        self.ready.notify_all();
    }

    /// Waits until every answer queued so far is written.
    pub fn drain_answers(&self) {
        let mut s = self.lock();
        while s.unwritten > 0 {
            s = self
                .ready
                .wait(s)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }

    /// The writer: runs until writing fails (stdout closed), then returns.
    pub fn write_all(&self, out: &mut impl Write) {
        loop {
            let (line, sub) = {
                let mut s = self.lock();
                loop {
                    if let Some(l) = s.answers.pop_front() {
                        break (l, None);
                    }
                    if let Some((sub, l)) = s.notes.pop_front() {
                        break (l, Some(sub));
                    }
                    s = self
                        .ready
                        .wait(s)
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                }
            };
            let ok = out
                .write_all(line.as_bytes())
                .and_then(|()| out.write_all(b"\n"))
                .and_then(|()| {
                    // Flush when nothing else is waiting, so lines are batched
                    // under load and prompt when idle.
                    let idle = {
                        let s = self.lock();
                        s.answers.is_empty() && s.notes.is_empty()
                    };
                    if idle || sub.is_none() {
                        out.flush()
                    } else {
                        Ok(())
                    }
                });
            let mut s = self.lock();
            match sub {
                None => s.unwritten -= 1,
                Some(sub) => {
                    if let Some(q) = s.queued.get_mut(&sub) {
                        *q = q.saturating_sub(line.len());
                        if *q == 0 {
                            s.queued.remove(&sub);
                        }
                    }
                }
            }
            self.ready.notify_all();
            if ok.is_err() {
                return;
            }
        }
    }
}
