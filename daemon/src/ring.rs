//! The output ring: the newest bytes a creation's program wrote, by output cursor
//! (SPEC §8, `OUTPUT_RING_BYTES`). No IO.
//!
//! The output cursor is the number of bytes the program has written since the
//! creation began: it only grows, and it means nothing in another creation. The ring
//! keeps the newest `cap` of them, so the output after any cursor it still covers can
//! be read back whole; for an older cursor, the reader is told how many bytes it
//! lost. Its memory is allocated on the first output, never more than `cap`.

/// What [`Ring::since`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Since {
    /// Bytes after the asked cursor that the ring no longer holds.
    pub dropped: u64,
    /// The cursor of the first byte in `bytes`.
    pub start: u64,
    /// The bytes from `start` to the end of the output, at most the ring's content.
    pub bytes: Vec<u8>,
}

/// A byte ring over the output stream (module docs).
#[derive(Debug)]
pub(crate) struct Ring {
    cap: usize,
    /// The ring's storage: empty until the first output, then `cap` bytes.
    buf: Vec<u8>,
    /// The total output so far: the cursor after the newest byte.
    end: u64,
    /// How many of the newest bytes `buf` holds (at most `cap`).
    held: usize,
}

impl Ring {
    /// An empty ring of `cap` bytes at cursor 0; nothing allocated.
    pub fn new(cap: usize) -> Self {
        Self {
            cap,
            buf: Vec::new(),
            end: 0,
            held: 0,
        }
    }

    /// The output cursor: bytes written so far.
    pub fn cursor(&self) -> u64 {
        self.end
    }

    /// Frees the storage (the session hibernates, SPEC §4.4): everything before
    /// the cursor now counts as lost; the next output allocates it again.
    pub fn free(&mut self) {
        self.buf = Vec::new();
        self.held = 0;
    }

    /// The oldest cursor whose byte the ring still holds.
    pub fn start(&self) -> u64 {
        self.end - self.held as u64
    }

    /// The bytes of memory it holds.
    #[cfg(test)]
    pub fn allocated(&self) -> usize {
        self.buf.capacity()
    }

    /// Appends output; the oldest bytes beyond `cap` fall out.
    pub fn push(&mut self, bytes: &[u8]) {
        self.end += bytes.len() as u64;
        if self.cap == 0 || bytes.is_empty() {
            return;
        }
        if self.buf.is_empty() {
            self.buf = vec![0; self.cap];
        }
        // Only the newest `cap` bytes of a large push can stay.
        let keep = &bytes[bytes.len().saturating_sub(self.cap)..];
        let first = self.slot(self.end - keep.len() as u64);
        let (a, b) = keep.split_at(keep.len().min(self.cap - first));
        self.buf[first..first + a.len()].copy_from_slice(a);
        self.buf[..b.len()].copy_from_slice(b);
        self.held = (self.held + keep.len()).min(self.cap);
    }

    /// The output after `cursor` that is still held, and how much after it was
    /// lost. A cursor beyond the end reads nothing (and loses nothing).
    pub fn since(&self, cursor: u64) -> Since {
        let from = cursor.clamp(self.start(), self.end);
        let dropped = from - cursor.min(from);
        let len = usize::try_from(self.end - from).unwrap_or(usize::MAX);
        let mut bytes = Vec::with_capacity(len);
        if len > 0 {
            let first = self.slot(from);
            let (a, b) = if first + len <= self.cap {
                (&self.buf[first..first + len], &[][..])
            } else {
                (&self.buf[first..], &self.buf[..len - (self.cap - first)])
            };
            bytes.extend_from_slice(a);
            bytes.extend_from_slice(b);
        }
        Since {
            dropped,
            start: from,
            bytes,
        }
    }

    /// The index in `buf` of the byte at `cursor`.
    fn slot(&self, cursor: u64) -> usize {
        // cap > 0 here, and the remainder is below cap, which is a usize.
        usize::try_from(cursor % self.cap as u64).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn nothing_is_allocated_before_output() {
        let mut r = Ring::new(1 << 20);
        assert_eq!(r.allocated(), 0);
        r.push(b"");
        assert_eq!(r.allocated(), 0);
        r.push(b"hello");
        assert_eq!(r.allocated(), 1 << 20);
        assert_eq!(r.since(2).bytes, b"llo");
    }

    #[test]
    fn wraps_and_reports_what_fell_out() {
        let mut r = Ring::new(4);
        r.push(b"abc");
        r.push(b"def");
        assert_eq!(r.cursor(), 6);
        assert_eq!(r.start(), 2);
        assert_eq!(
            r.since(0),
            Since {
                dropped: 2,
                start: 2,
                bytes: b"cdef".to_vec()
            }
        );
        assert_eq!(r.since(4).bytes, b"ef");
        assert_eq!(r.since(6).bytes, b"");
        assert_eq!(r.since(99).dropped, 0);
        r.push(b"0123456789");
        assert_eq!(r.since(0).bytes, b"6789");
        assert_eq!(r.since(0).dropped, 12);
    }

    proptest! {
        /// Against a Vec that keeps everything: every `since` is its suffix, cut
        /// to the newest `cap` bytes, with the rest counted as dropped.
        #[test]
        fn since_is_the_suffix_of_the_whole_output(
            cap in 1usize..64,
            pushes in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..100), 0..20),
            ask in 0u64..2000,
        ) {
            let mut r = Ring::new(cap);
            let mut all = Vec::new();
            for p in &pushes {
                r.push(p);
                all.extend_from_slice(p);
            }
            let got = r.since(ask);
            let ask = usize::try_from(ask).unwrap().min(all.len());
            let keep_from = all.len().saturating_sub(cap).max(ask);
            prop_assert_eq!(&got.bytes[..], &all[keep_from..]);
            prop_assert_eq!(got.dropped, (keep_from - ask) as u64);
            prop_assert_eq!(got.start, keep_from as u64);
            prop_assert_eq!(r.cursor(), all.len() as u64);
        }
    }
}
