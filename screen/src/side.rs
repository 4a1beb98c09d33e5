//! The side scanner: finds, in program output, the few sequences alacritty_terminal's
//! parser drops (XTVERSION and the desktop notifications OSC 9, OSC 99 and OSC 777),
//! and where each ends, so the emulator can act on them in order with everything the
//! parser does (SPEC §4.4). It also reports every sequence that may clear the
//! scrollback (any `CSI … J`, any `ESC … c`), so the compact scrollback is cleared
//! with alacritty's.
//!
//! It follows the escape grammar coarsely, across pushes: text is skipped with
//! `memchr`, a CSI's parameters and an OSC's payload are kept up to
//! [`CAPTURE_MAX`] bytes (longer ones are followed to their end and ignored).
//!
//! It also bounds what the parser holds of an OSC (SPEC §4.4): alacritty_terminal's
//! parser keeps a whole OSC in memory until its end, so an OSC beyond [`OSC_MAX`]
//! bytes (a title beyond [`TITLE_MAX`]) is cut before the parser sees the rest: the
//! scanner reports the bytes up to its terminator as [`Seq::Skip`], and the parser
//! then sees the OSC end as written. The cut falls on a UTF-8 character boundary.
//! Only the emulator's copy is cut; attached terminals get the output as written.

/// The most of one sequence kept (a longer notification is ignored, never cut).
pub(crate) const CAPTURE_MAX: usize = 4096;
/// The most of one OSC (its number, `;` and payload) the parser is given: a path of
/// PATH_MAX bytes in an OSC 7 `file://HOST/PATH` fits (SPEC §4.4).
pub const OSC_MAX: usize = 8192;
/// The most of a title (OSC 0, 1, 2, after `N;`) the parser is given (SPEC §4.4).
pub const TITLE_MAX: usize = 4096;
/// A UTF-8 character has at most this many continuation bytes.
const UTF8_TAIL_MAX: usize = 3;

const ESC: u8 = 0x1b;
const BEL: u8 = 0x07;
const CAN: u8 = 0x18;
const SUB: u8 = 0x1a;

/// A sequence the side scanner reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seq {
    /// `CSI > q` or `CSI > 0 q`: the terminal's name and version.
    XtVersion,
    /// An OSC whose number is 9, 99 or 777, with its whole payload (after `NUMBER;`).
    Notify { osc: u16, payload: Vec<u8> },
    /// A `CSI … J` or an `ESC … c`; `likely`: it reads as `CSI 3 J` (erase the
    /// scrollback) or RIS (`ESC c`) as alacritty's parser reads them.
    Clear { likely: bool },
    /// The `len` bytes from here belong to an OSC past its bound: the parser must
    /// not see them (it sees the OSC's terminator next).
    Skip { len: usize },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum St {
    #[default]
    Ground,
    Esc,
    Csi,
    Osc,
    OscEsc,
    /// DCS, SOS, PM, APC: skipped to their ST.
    Str,
    StrEsc,
}

/// The scanner's state between pushes.
#[derive(Debug, Default)]
pub(crate) struct Side {
    st: St,
    buf: Vec<u8>,
    /// The current sequence outgrew `CAPTURE_MAX`.
    over: bool,
    /// Bytes of the current OSC given to the parser.
    osc_len: usize,
    /// Where the current OSC is cut ([`OSC_MAX`], less for a title).
    osc_limit: usize,
    /// The rest of the current OSC is being skipped.
    skipping: bool,
}

impl Side {
    /// Back to ground (output was dropped unparsed: plain text, which ends in ground).
    pub(crate) fn reset(&mut self) {
        self.st = St::Ground;
        self.buf.clear();
        self.over = false;
    }

    fn keep(&mut self, b: u8) {
        if self.buf.len() < CAPTURE_MAX {
            self.buf.push(b);
        } else {
            self.over = true;
        }
    }

    fn start(&mut self, st: St) {
        self.st = st;
        self.buf.clear();
        self.over = false;
        self.osc_len = 0;
        self.osc_limit = OSC_MAX;
        self.skipping = false;
    }

    /// An OSC's payload byte `b` at `at`: counted and kept, or, past the bound, the
    /// start of a skip to the OSC's terminator. Returns where scanning goes on.
    fn osc_byte(&mut self, bytes: &[u8], at: usize, hit: &mut impl FnMut(usize, Seq)) -> usize {
        let b = bytes.get(at).copied().unwrap_or_default();
        let tail = b & 0xc0 == 0x80 && self.osc_len < self.osc_limit + UTF8_TAIL_MAX;
        if !self.skipping && (self.osc_len < self.osc_limit || tail) {
            if b == b';' && matches!(&self.buf[..], b"0" | b"1" | b"2") {
                self.osc_limit = self.osc_len + 1 + TITLE_MAX;
            }
            self.osc_len += 1;
            self.keep(b);
            return at + 1;
        }
        let rest = bytes.get(at..).unwrap_or_default();
        let ends = memchr::memchr3(BEL, ESC, CAN, rest);
        let len = rest
            .get(..ends.unwrap_or(rest.len()))
            .and_then(|r| memchr::memchr(SUB, r))
            .or(ends)
            .unwrap_or(rest.len());
        hit(at, Seq::Skip { len });
        self.skipping = true;
        self.over = true;
        at + len
    }

    /// Follows `bytes`; calls `hit(end, seq)` for each sequence found, `end` being
    /// the offset just past it.
    pub(crate) fn feed(&mut self, bytes: &[u8], mut hit: impl FnMut(usize, Seq)) {
        let mut i = 0;
        while i < bytes.len() {
            if self.st == St::Ground {
                match memchr::memchr(ESC, bytes.get(i..).unwrap_or_default()) {
                    Some(at) => {
                        i += at + 1;
                        self.start(St::Esc);
                    }
                    None => return,
                }
                continue;
            }
            let b = bytes.get(i).copied().unwrap_or_default();
            i += 1;
            if b == CAN || b == SUB {
                self.start(St::Ground);
                continue;
            }
            match self.st {
                St::Ground => {}
                St::Esc => match b {
                    b'[' => self.start(St::Csi),
                    b']' => self.start(St::Osc),
                    b'P' | b'X' | b'^' | b'_' => self.start(St::Str),
                    ESC => self.start(St::Esc),
                    // Intermediates keep the escape going; anything else ends it.
                    0x20..=0x2f => self.keep(b),
                    b'c' => {
                        hit(
                            i,
                            Seq::Clear {
                                likely: self.buf.is_empty(),
                            },
                        );
                        self.start(St::Ground);
                    }
                    _ => self.start(St::Ground),
                },
                St::Csi => match b {
                    0x40..=0x7e => {
                        if b == b'q' && !self.over && matches!(&self.buf[..], b">" | b">0") {
                            hit(i, Seq::XtVersion);
                        }
                        if b == b'J' {
                            let likely = !self.over && erases_scrollback(&self.buf);
                            hit(i, Seq::Clear { likely });
                        }
                        self.start(St::Ground);
                    }
                    ESC => self.start(St::Esc),
                    // C0 controls inside a CSI are executed, not part of it.
                    0x00..=0x1f => {}
                    _ => self.keep(b),
                },
                St::Osc => match b {
                    BEL => {
                        self.osc_end(i, &mut hit);
                    }
                    ESC => self.st = St::OscEsc,
                    _ => i = self.osc_byte(bytes, i - 1, &mut hit),
                },
                St::OscEsc => {
                    if b == b'\\' {
                        self.osc_end(i, &mut hit);
                    } else {
                        // ESC ends the OSC and starts a new escape.
                        self.start(St::Esc);
                        i -= 1;
                    }
                }
                St::Str => {
                    if b == ESC {
                        self.st = St::StrEsc;
                    } else if b == BEL {
                        self.start(St::Ground);
                    }
                }
                St::StrEsc => {
                    if b == b'\\' {
                        self.start(St::Ground);
                    } else {
                        self.start(St::Esc);
                        i -= 1;
                    }
                }
            }
        }
    }

    fn osc_end(&mut self, end: usize, hit: &mut impl FnMut(usize, Seq)) {
        if !self.over {
            let buf = &self.buf[..];
            let split = buf.iter().position(|&b| b == b';');
            if let Some(at) = split {
                let num = std::str::from_utf8(&buf[..at])
                    .ok()
                    .and_then(|s| s.parse::<u16>().ok());
                if let Some(osc @ (9 | 99 | 777)) = num {
                    hit(
                        end,
                        Seq::Notify {
                            osc,
                            payload: buf[at + 1..].to_vec(),
                        },
                    );
                }
            }
        }
        self.start(St::Ground);
    }
}

/// Whether `CSI params J` erases the scrollback as alacritty's parser reads it: no
/// private marker or intermediate, the first parameter 3 (its first sub-parameter;
/// leading zeros allowed), at most 32 parameters.
fn erases_scrollback(params: &[u8]) -> bool {
    if !params
        .iter()
        .all(|&b| b.is_ascii_digit() || b == b';' || b == b':')
    {
        return false;
    }
    if params.iter().filter(|&&b| b == b';' || b == b':').count() >= 32 {
        return false;
    }
    let first = params
        .split(|&b| b == b';' || b == b':')
        .next()
        .unwrap_or_default();
    let value = first.iter().fold(0u16, |v, &d| {
        v.saturating_mul(10).saturating_add(u16::from(d - b'0'))
    });
    value == 3
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(chunks: &[&[u8]]) -> Vec<(usize, Seq)> {
        let mut side = Side::default();
        let mut out = Vec::new();
        let mut base = 0;
        for c in chunks {
            side.feed(c, |end, s| out.push((base + end, s)));
            base += c.len();
        }
        out
    }

    #[test]
    fn finds_xtversion_and_notifications_across_pushes() {
        let got = scan(&[
            b"ab\x1b[>",
            b"q\x1b]9;hi\x07x\x1b]777;notify;T;B\x1b",
            b"\\",
        ]);
        assert_eq!(
            got,
            vec![
                (6, Seq::XtVersion),
                (
                    13,
                    Seq::Notify {
                        osc: 9,
                        payload: b"hi".to_vec()
                    }
                ),
                (
                    32,
                    Seq::Notify {
                        osc: 777,
                        payload: b"notify;T;B".to_vec()
                    }
                ),
            ]
        );
    }

    #[test]
    fn reports_what_may_clear_the_scrollback() {
        let got = scan(&[b"\x1b[3J\x1b[J\x1b[2J\x1b[?3J\x1b[03;1J\x1b(c\x1bc"]);
        let likely: Vec<bool> = got
            .iter()
            .map(|(_, s)| match s {
                Seq::Clear { likely } => *likely,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(likely, [true, false, false, false, true, false, true]);
    }

    #[test]
    fn ignores_others_and_oversized() {
        assert!(scan(&[b"\x1b[>1q\x1b[q\x1b]2;title\x07\x1bP>|x\x1b\\"]).is_empty());
        let mut long = b"\x1b]9;".to_vec();
        long.extend(std::iter::repeat_n(b'x', CAPTURE_MAX + 10));
        long.push(BEL);
        long.extend_from_slice(b"\x1b]9;ok\x07");
        let got = scan(&[&long]);
        assert_eq!(got.len(), 1);
        assert_eq!(
            got[0].1,
            Seq::Notify {
                osc: 9,
                payload: b"ok".to_vec()
            }
        );
    }

    /// What of `chunks` the parser is given: everything but the skipped bytes.
    fn parsed(chunks: &[&[u8]]) -> Vec<u8> {
        let mut side = Side::default();
        let mut out = Vec::new();
        for c in chunks {
            let mut from = 0;
            side.feed(c, |end, s| {
                if let Seq::Skip { len } = s {
                    out.extend_from_slice(&c[from..end]);
                    from = end + len;
                }
            });
            out.extend_from_slice(&c[from..]);
        }
        out
    }

    #[test]
    fn a_long_title_reaches_the_parser_cut_across_pushes() {
        let x = vec![b'x'; 3 * TITLE_MAX];
        let got = parsed(&[b"a\x1b]2;", &x, &x, b"\x07b"]);
        let mut want = b"a\x1b]2;".to_vec();
        want.extend(std::iter::repeat_n(b'x', TITLE_MAX));
        want.extend_from_slice(b"\x07b");
        assert_eq!(got, want);
        // ST, CAN and SUB end the skip too, and the next OSC is whole.
        for end in [&b"\x1b\\"[..], b"\x18", b"\x1a"] {
            let got = parsed(&[b"\x1b]0;", &x, end, b"\x1b]2;t\x07"]);
            assert_eq!(got.len(), 4 + TITLE_MAX + end.len() + 6, "{end:?}");
            assert!(got.ends_with(b"\x1b]2;t\x07"));
        }
    }

    #[test]
    fn any_osc_is_cut_at_its_bound_on_a_character_boundary() {
        let big = vec![b'A'; 10 * OSC_MAX];
        let got = parsed(&[b"\x1b]52;c;", &big, b"\x07"]);
        assert_eq!(got.len(), 2 + OSC_MAX + 1);
        // A title of two-byte characters is cut after a whole one.
        let e = "\u{e9}".repeat(TITLE_MAX);
        let got = parsed(&[b"\x1b]2;", &e.as_bytes()[..1], &e.as_bytes()[1..], b"\x07"]);
        let title = std::str::from_utf8(&got[4..got.len() - 1]).unwrap();
        assert!(title.len() <= TITLE_MAX + 1 && title.len() >= TITLE_MAX - 1);
        // Invalid continuation bytes are not a way past the bound.
        let tails = vec![0x80u8; 2 * TITLE_MAX];
        assert!(parsed(&[b"\x1b]2;", &tails]).len() <= 4 + TITLE_MAX + 3);
        // An unterminated OSC never ends: the parser gets its bound, no more.
        let chunks: Vec<&[u8]> = std::iter::once(&b"\x1b]9;"[..])
            .chain(std::iter::repeat_n(&big[..], 50))
            .collect();
        assert_eq!(parsed(&chunks).len(), 2 + OSC_MAX);
    }
}
