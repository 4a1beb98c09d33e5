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

/// The most of one sequence kept (a longer notification is ignored, never cut).
pub(crate) const CAPTURE_MAX: usize = 4096;

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
                    _ => self.keep(b),
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
}
