//! The program's input queue (SPEC §8): INPUT from clients and the emulator's answers
//! to the program's queries, in arrival order, waiting for the PTY to take them.
//!
//! Answers are bounded on their own: a program that floods queries and never reads
//! its input would otherwise grow the queue without end. At most
//! [`ANSWERS_QUEUED_MAX`] bytes of answers wait here; a batch that does not fit
//! makes room by dropping the oldest answers not yet started (they answer queries
//! of a program that has stopped reading, as a terminal that is not read answers
//! nothing more), so the newest answers, those a program gets first once it reads
//! again, are never the ones dropped. Answers count toward `INPUT_QUEUE_BYTES`
//! like any input.

use std::collections::VecDeque;

use bytes::{Buf, Bytes};
use latch_wire::limits::{ANSWERS_QUEUED_MAX, INPUT_QUEUE_BYTES};

/// A run of input bytes: from a client, or the emulator's answers.
#[derive(Debug)]
struct Chunk {
    bytes: Bytes,
    /// The emulator's answers (which may be dropped while the program does not read).
    answer: bool,
    /// Part of it was written (it can no longer be dropped whole).
    started: bool,
    /// How many answers it holds (0 for a client's input).
    count: u64,
}

/// Input waiting for the PTY, in arrival order.
#[derive(Debug, Default)]
pub(crate) struct InputQueue {
    chunks: VecDeque<Chunk>,
    /// Bytes queued, answers included.
    pending: usize,
    /// Answer bytes queued.
    answers: usize,
    /// Answers dropped so far.
    dropped: u64,
    /// The last batch of answers lost some: a stretch of drops is under way.
    dropping: bool,
}

/// What became of a batch of answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Answered {
    /// Answers dropped (old or new).
    pub(crate) dropped: u64,
    /// This batch began a stretch of drops: the program has stopped reading its
    /// input (said once per stretch; a batch queued whole ends it).
    pub(crate) began_dropping: bool,
}

impl InputQueue {
    /// Bytes queued, answers included.
    pub(crate) fn pending(&self) -> usize {
        self.pending
    }

    /// Answer bytes queued.
    pub(crate) fn answers(&self) -> usize {
        self.answers
    }

    /// Answers dropped so far.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Whether nothing is queued.
    pub(crate) fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// Whether there is room for more INPUT (connections wait, or are refused, if not).
    pub(crate) fn has_room(&self) -> bool {
        self.pending <= INPUT_QUEUE_BYTES
    }

    /// Queues a client's INPUT.
    pub(crate) fn push_input(&mut self, bytes: Bytes) {
        if bytes.is_empty() {
            return;
        }
        self.pending = self.pending.saturating_add(bytes.len());
        self.chunks.push_back(Chunk {
            bytes,
            answer: false,
            started: false,
            count: 0,
        });
    }

    /// Queues answers (each one whole), within [`ANSWERS_QUEUED_MAX`]: the batch's
    /// first answers that fit the bound alone are kept, and older answers not yet
    /// started are dropped to make room for them.
    pub(crate) fn push_answers(&mut self, answers: Vec<Vec<u8>>) -> Answered {
        let before = self.dropped;
        self.queue_answers(answers);
        let dropped = self.dropped - before;
        let began_dropping = dropped > 0 && !self.dropping;
        self.dropping = dropped > 0;
        Answered {
            dropped,
            began_dropping,
        }
    }

    /// [`InputQueue::push_answers`]'s bookkeeping; returns how many were dropped.
    fn queue_answers(&mut self, answers: Vec<Vec<u8>>) -> u64 {
        let before = self.dropped;
        let mut batch = Vec::new();
        let mut count = 0;
        for a in answers {
            if batch.len() + a.len() <= ANSWERS_QUEUED_MAX {
                batch.extend_from_slice(&a);
                count += 1;
            } else {
                self.dropped += 1;
            }
        }
        if batch.is_empty() {
            return self.dropped - before;
        }
        while self.answers + batch.len() > ANSWERS_QUEUED_MAX {
            let Some(at) = self.chunks.iter().position(|c| c.answer && !c.started) else {
                break;
            };
            let Some(old) = self.chunks.remove(at) else {
                break;
            };
            self.answers -= old.bytes.len();
            self.pending -= old.bytes.len();
            self.dropped += old.count;
        }
        if self.answers + batch.len() > ANSWERS_QUEUED_MAX {
            // Only a started answer is left, and it is being written: the batch waits
            // for nobody (a terminal that is not read answers nothing more).
            self.dropped += count;
            return self.dropped - before;
        }
        self.answers += batch.len();
        self.pending += batch.len();
        self.chunks.push_back(Chunk {
            bytes: Bytes::from(batch),
            answer: true,
            started: false,
            count,
        });
        self.dropped - before
    }

    /// Writes the oldest queued bytes with `write`; returns how many were written.
    pub(crate) fn write_front(
        &mut self,
        write: impl FnOnce(&[u8]) -> std::io::Result<usize>,
    ) -> std::io::Result<usize> {
        let Some(front) = self.chunks.front_mut() else {
            return Ok(0);
        };
        let n = write(&front.bytes).map(|n| n.min(front.bytes.len()))?;
        front.bytes.advance(n);
        front.started |= n > 0;
        if front.answer {
            self.answers -= n;
        }
        if front.bytes.is_empty() {
            self.chunks.pop_front();
        }
        self.pending -= n;
        Ok(n)
    }

    /// Drops everything queued.
    pub(crate) fn clear(&mut self) {
        self.chunks.clear();
        self.pending = 0;
        self.answers = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn da1() -> Vec<u8> {
        b"\x1b[?6c".to_vec()
    }

    /// Writes everything queued, as a program reading its input would take it.
    fn drain(q: &mut InputQueue) -> Vec<u8> {
        let mut out = Vec::new();
        while !q.is_empty() {
            q.write_front(|b| {
                out.extend_from_slice(b);
                Ok(b.len())
            })
            .unwrap();
        }
        out
    }

    #[test]
    fn answers_of_a_program_that_does_not_read_stay_within_the_cap() {
        let mut q = InputQueue::default();
        for _ in 0..10_000 {
            q.push_answers(vec![da1(); 100]);
            assert!(q.answers() <= ANSWERS_QUEUED_MAX, "{}", q.answers());
            assert!(q.pending() <= ANSWERS_QUEUED_MAX);
        }
        assert!(q.dropped() > 900_000, "{}", q.dropped());
        // Only whole answers are queued.
        let out = drain(&mut q);
        assert_eq!(out.len() % 5, 0);
        assert!(out.chunks(5).all(|a| a == b"\x1b[?6c"));
        assert_eq!((q.pending(), q.answers()), (0, 0));
    }

    #[test]
    fn the_newest_answers_are_kept_after_a_flood() {
        let mut q = InputQueue::default();
        for _ in 0..100 {
            q.push_answers(vec![da1(); 1000]);
        }
        // A shell's startup probes, before it reads anything.
        q.push_answers(vec![b"\x1b[?6c".to_vec(), b"\x1b[1;1R".to_vec()]);
        let out = drain(&mut q);
        assert!(out.ends_with(b"\x1b[?6c\x1b[1;1R"));
        // Once it reads, every answer is queued again.
        q.push_answers(vec![b"\x1b]11;rgb:0000/0000/0000\x07".to_vec()]);
        assert_eq!(drain(&mut q), b"\x1b]11;rgb:0000/0000/0000\x07");
    }

    #[test]
    fn a_started_answer_is_never_cut_and_client_input_is_never_dropped() {
        let mut q = InputQueue::default();
        q.push_input(Bytes::from_static(b"typed"));
        q.push_answers(vec![vec![0x1b; ANSWERS_QUEUED_MAX]]);
        // The PTY takes the typed input and part of the answer.
        q.write_front(|b| Ok(b.len())).unwrap();
        q.write_front(|_| Ok(1)).unwrap();
        assert_eq!(q.answers(), ANSWERS_QUEUED_MAX - 1);
        // No room while the started answer is written: the new one is dropped.
        assert_eq!(q.push_answers(vec![da1()]).dropped, 1);
        q.push_input(Bytes::from_static(b"more"));
        let out = drain(&mut q);
        assert_eq!(out.len(), ANSWERS_QUEUED_MAX - 1 + 4);
        assert!(out.ends_with(b"more"));
    }

    #[test]
    fn a_stretch_of_drops_is_reported_once_and_ends_when_a_batch_fits() {
        let mut q = InputQueue::default();
        let flood = || vec![da1(); ANSWERS_QUEUED_MAX];
        let first = q.push_answers(flood());
        assert!(first.dropped > 0 && first.began_dropping, "{first:?}");
        let again = q.push_answers(flood());
        assert!(again.dropped > 0 && !again.began_dropping, "{again:?}");
        drain(&mut q);
        let whole = q.push_answers(vec![da1()]);
        assert_eq!(
            whole,
            Answered {
                dropped: 0,
                began_dropping: false
            }
        );
        let next = q.push_answers(flood());
        assert!(next.began_dropping, "a new stretch: {next:?}");
    }

    #[test]
    fn answers_count_toward_the_input_bound() {
        let mut q = InputQueue::default();
        q.push_input(Bytes::from(vec![b'x'; INPUT_QUEUE_BYTES - 10]));
        assert!(q.has_room());
        q.push_answers(vec![da1(); 10]);
        assert_eq!(q.pending(), INPUT_QUEUE_BYTES + 40);
        assert!(!q.has_room());
    }
}
