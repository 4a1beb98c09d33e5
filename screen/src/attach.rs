//! The terminal side of an interactive attach, without IO: the detach key with its
//! double press, read-only input filtering, and what a terminal gets before the
//! attach repaint (SPEC §5.4). The modes every exit path undoes are
//! [`RESTORE_MODES`](crate::RESTORE_MODES).
//!
//! Whoever holds the user's terminal runs this: today the CLI's attach loop. Time
//! is passed in; nothing here reads a clock, a file or a socket.

use std::time::{Duration, Instant};

/// How long after a detach key a second one sends it to the program instead.
pub const DOUBLE_PRESS: Duration = Duration::from_millis(500);

/// What [`KeyFilter::feed`] decided about the keys just read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Keys {
    /// Bytes for the program (none for a read-only attachment).
    pub send: Vec<u8>,
    /// Detach now.
    pub detach: bool,
}

/// The detach key and its double press: a detach key detaches unless the next
/// key, within [`DOUBLE_PRESS`], is the detach key again; then one detach key goes
/// to the program. A read-only attachment sends nothing, but detaches the same way.
#[derive(Debug, Clone)]
pub struct KeyFilter {
    key: Option<u8>,
    read_only: bool,
    /// When a detach key was pressed and no second one has come yet.
    pending: Option<Instant>,
}

impl KeyFilter {
    /// A filter for `key` (`None`: no detach key, everything passes).
    pub fn new(key: Option<u8>, read_only: bool) -> Self {
        Self {
            key,
            read_only,
            pending: None,
        }
    }

    /// The keys read at `now`.
    pub fn feed(&mut self, bytes: &[u8], now: Instant) -> Keys {
        let mut out = Keys::default();
        for &b in bytes {
            if self.pending.take().is_some() {
                if Some(b) == self.key {
                    out.send.push(b);
                    continue;
                }
                // Anything else after the detach key: detach; the rest is not sent.
                out.detach = true;
                break;
            }
            if Some(b) == self.key {
                self.pending = Some(now);
            } else {
                out.send.push(b);
            }
        }
        if self.read_only {
            out.send.clear();
        }
        out
    }

    /// When a pending detach key becomes a detach, if one is pending.
    pub fn deadline(&self) -> Option<Instant> {
        self.pending.map(|at| at + DOUBLE_PRESS)
    }

    /// Whether, at `now`, a pending detach key has waited long enough to detach
    /// (and then it is no longer pending).
    pub fn expired(&mut self, now: Instant) -> bool {
        if self.deadline().is_some_and(|d| now >= d) {
            self.pending = None;
            return true;
        }
        false
    }
}

/// What a terminal of `rows` rows gets before the attach repaint, so that nothing
/// it showed is lost (SPEC §5.4): unless the repaint switches to the alternate
/// screen (which keeps this one) and there is no history, from the bottom row, the
/// history lines and then a screenful of line feeds scroll everything into the
/// terminal's own scrollback, out of reach of the repaint's clear. Nothing when
/// `rows` is 0 (not a terminal).
pub fn preface(history: &[u8], repaint: &[u8], rows: u16) -> Vec<u8> {
    let alternate = repaint.starts_with(b"\x1b[?1049h");
    if rows == 0 || (alternate && history.is_empty()) {
        return Vec::new();
    }
    let mut out = format!("\x1b[{rows};1H").into_bytes();
    out.extend_from_slice(history);
    for _ in 0..rows {
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// The last `n` lines of scrollback above the visible screen (`attach --history`),
/// from a full line-based capture and the visible one (SPEC §4.4 PEEK and PEEK
/// full): each line with its attributes reset and a CR LF.
pub fn history(full: &str, visible: &str, n: usize) -> Vec<u8> {
    let shown = visible.lines().count();
    let lines: Vec<&str> = full.lines().collect();
    let above = lines.len().saturating_sub(shown);
    let kept = lines
        .get(above.saturating_sub(n)..above)
        .unwrap_or_default();
    let mut out = Vec::new();
    for line in kept {
        out.extend_from_slice(line.as_bytes());
        out.extend_from_slice(b"\x1b[m\r\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(f: &mut KeyFilter, bytes: &[u8]) -> (Vec<u8>, bool, bool) {
        let k = f.feed(bytes, Instant::now());
        (k.send, f.deadline().is_some(), k.detach)
    }

    #[test]
    fn the_detach_key_detaches_and_twice_sends_it() {
        let k = Some(0x1c);
        // Plain typing passes through.
        assert_eq!(
            feed(&mut KeyFilter::new(k, false), b"ls\r"),
            (b"ls\r".to_vec(), false, false)
        );
        // The key alone: pending, nothing sent yet; pressed again: one key goes.
        let mut f = KeyFilter::new(k, false);
        assert_eq!(feed(&mut f, b"ab\x1c"), (b"ab".to_vec(), true, false));
        assert_eq!(feed(&mut f, b"\x1c"), (vec![0x1c], false, false));
        assert_eq!(
            feed(&mut KeyFilter::new(k, false), b"\x1c\x1cx"),
            (vec![0x1c, b'x'], false, false)
        );
        // Anything else after it: detach, and the rest is not sent.
        let mut f = KeyFilter::new(k, false);
        feed(&mut f, b"\x1c");
        assert_eq!(feed(&mut f, b"xyz"), (Vec::new(), false, true));
        assert_eq!(
            feed(&mut KeyFilter::new(k, false), b"a\x1cb"),
            (b"a".to_vec(), false, true)
        );
        // No detach key: everything passes.
        assert_eq!(
            feed(&mut KeyFilter::new(None, false), b"\x1c"),
            (vec![0x1c], false, false)
        );
    }

    #[test]
    fn a_single_press_detaches_once_its_double_press_time_is_over() {
        let t0 = Instant::now();
        let mut f = KeyFilter::new(Some(0x1c), false);
        assert!(!f.feed(b"\x1c", t0).detach);
        assert_eq!(f.deadline(), Some(t0 + DOUBLE_PRESS));
        assert!(!f.expired(t0 + DOUBLE_PRESS / 2));
        assert!(f.expired(t0 + DOUBLE_PRESS));
        assert_eq!(f.deadline(), None);
        assert!(!f.expired(t0 + DOUBLE_PRESS * 3), "once");
    }

    #[test]
    fn read_only_sends_nothing_but_still_detaches() {
        let mut f = KeyFilter::new(Some(0x1c), true);
        assert_eq!(f.feed(b"rm -rf /\r", Instant::now()), Keys::default());
        f.feed(b"\x1c", Instant::now());
        assert!(f.feed(b"q", Instant::now()).detach);
    }

    #[test]
    fn the_preface_scrolls_the_terminal_unless_the_repaint_keeps_it() {
        assert_eq!(preface(b"", b"\x1b[?1049l...", 2), b"\x1b[2;1H\r\n\r\n");
        assert_eq!(preface(b"", b"\x1b[?1049h...", 2), b"");
        assert_eq!(preface(b"h\r\n", b"\x1b[?1049h", 1), b"\x1b[1;1Hh\r\n\r\n");
        assert_eq!(preface(b"h", b"", 0), b"");
    }

    #[test]
    fn history_is_the_lines_above_the_screen() {
        let full = "a\nb\nc\nscreen1\nscreen2\n";
        let visible = "screen1\nscreen2\n";
        assert_eq!(history(full, visible, 2), b"b\x1b[m\r\nc\x1b[m\r\n");
        assert_eq!(
            history(full, visible, 10),
            b"a\x1b[m\r\nb\x1b[m\r\nc\x1b[m\r\n"
        );
        assert_eq!(history(visible, visible, 5), b"");
    }
}
