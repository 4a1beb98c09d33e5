//! The fast-forward scanner: follows the escape state across pushes to find where a
//! plain-text run starts (crate docs, "Fast-forward").

/// Where the scanner stands in the escape-sequence grammar (a coarse copy of the
/// parser's states: enough to know where a plain-text run may start).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum St {
    #[default]
    Ground,
    Esc,
    EscInter,
    Csi {
        params: bool,
        private: bool,
    },
    Str,
    StrEsc,
}

/// The scanner: escape state and whether a scroll region may be set.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Scan {
    st: St,
    /// A `CSI Pt;Pb r` with parameters was seen and not undone since (by `CSI r`,
    /// RIS or a resize). Conservative: any parameters count.
    pub(crate) region: bool,
    /// That sequence's top and bottom as written (0: left out), for a repaint to set
    /// the same region in the attached terminal.
    pub(crate) region_params: (u16, u16),
    /// The first two numeric parameters of the CSI sequence being read.
    csi: [u16; 2],
    /// Which of them is being read (2 and up: past them).
    csi_at: u8,
}

const ESC: u8 = 0x1b;
const CAN: u8 = 0x18;
const SUB: u8 = 0x1a;
const BEL: u8 = 0x07;

/// Whether a byte ends a plain-text stretch in ground state.
fn breaks_text(b: u8) -> bool {
    (b < 0x20 && b != b'\n' && b != b'\r' && b != b'\t') || b == 0x7f
}

/// The last [`breaks_text`] byte: 32 bytes at a time from the end with a branch-free
/// test the compiler vectorises, then byte by byte in the block that has one.
fn last_control(seg: &[u8]) -> Option<usize> {
    let mut end = seg.len();
    while end >= 32 {
        let block = seg.get(end - 32..end).unwrap_or_default();
        if block.iter().fold(false, |any, &b| any | breaks_text(b)) {
            return block
                .iter()
                .rposition(|&b| breaks_text(b))
                .map(|i| end - 32 + i);
        }
        end -= 32;
    }
    seg.get(..end)?.iter().rposition(|&b| breaks_text(b))
}

/// The length of a complete SGR sequence (`ESC [ [0-9;:]* m`) at the start of `b`.
fn sgr_len(b: &[u8]) -> Option<usize> {
    if b.get(..2)? != [ESC, b'['] {
        return None;
    }
    let params = b
        .get(2..)?
        .iter()
        .take_while(|&&c| c.is_ascii_digit() || c == b';' || c == b':')
        .count();
    (*b.get(2 + params)? == b'm').then_some(3 + params)
}

impl Scan {
    /// Whether the bytes followed so far end in ground state (no escape sequence
    /// begun and not ended).
    pub(crate) fn ground(&self) -> bool {
        self.st == St::Ground
    }

    /// Follows `bytes`; returns the final plain-text run (module docs) as a range,
    /// if the bytes end in one: UTF-8 text without controls other than CR, LF and
    /// TAB, and complete SGRs, starting in ground state with no scroll region set.
    pub(crate) fn run(&mut self, bytes: &[u8]) -> Option<(usize, usize)> {
        let len = bytes.len();
        let mut start = (self.st == St::Ground && !self.region).then_some(0);
        // Where the run stops being plain: an incomplete sequence at the end.
        let mut end = len;
        let mut i = 0;
        while i < len {
            match self.st {
                St::Ground => {
                    let rest = bytes.get(i..).unwrap_or_default();
                    let j = memchr::memchr(ESC, rest).unwrap_or(rest.len());
                    // Control characters keep ground but are not plain text: a run
                    // starts after the last one.
                    let last_control = rest.get(..j).and_then(last_control);
                    if let Some(k) = last_control {
                        if end == len {
                            start = (!self.region).then_some(i + k + 1);
                        }
                    }
                    i += j;
                    let tail = bytes.get(i..).unwrap_or_default();
                    if tail.is_empty() {
                        break;
                    }
                    if let Some(n) = sgr_len(tail) {
                        i += n;
                        continue;
                    }
                    let could_be_sgr = tail.len() < 2
                        || (tail.get(1) == Some(&b'[')
                            && tail
                                .get(2..)
                                .unwrap_or_default()
                                .iter()
                                .all(|&c| c.is_ascii_digit() || c == b';' || c == b':'));
                    if could_be_sgr && end == len {
                        // Possibly an SGR cut in half by the read: the run ends before
                        // it, and the scanner goes on as for any escape.
                        end = i;
                    } else {
                        start = None;
                    }
                    self.st = St::Esc;
                    i += 1;
                }
                St::Str => {
                    let rest = bytes.get(i..).unwrap_or_default();
                    let Some(j) = rest
                        .iter()
                        .position(|&b| matches!(b, BEL | ESC | CAN | SUB))
                    else {
                        break;
                    };
                    i += j;
                    self.st = if bytes.get(i) == Some(&ESC) {
                        St::StrEsc
                    } else {
                        St::Ground
                    };
                    i += 1;
                }
                st => {
                    let b = bytes.get(i).copied().unwrap_or_default();
                    i += 1;
                    self.st = match (st, b) {
                        (_, CAN | SUB) => St::Ground,
                        (St::StrEsc, b'\\') => St::Ground,
                        (_, ESC) => St::Esc,
                        (St::Esc | St::StrEsc, b'[') => {
                            self.csi = [0, 0];
                            self.csi_at = 0;
                            St::Csi {
                                params: false,
                                private: false,
                            }
                        }
                        (St::Esc | St::StrEsc, b']' | b'P' | b'X' | b'^' | b'_') => St::Str,
                        (St::Esc | St::StrEsc, b'c') => {
                            // RIS resets the scroll region.
                            self.region = false;
                            St::Ground
                        }
                        (St::Esc | St::StrEsc | St::EscInter, 0x20..=0x2f) => St::EscInter,
                        (St::Esc | St::StrEsc | St::EscInter, 0x30..=0x7e) => St::Ground,
                        (St::Csi { private, .. }, b'0'..=b'9') => {
                            if let Some(p) = self.csi.get_mut(usize::from(self.csi_at)) {
                                *p = p.saturating_mul(10).saturating_add(u16::from(b - b'0'));
                            }
                            St::Csi {
                                params: true,
                                private,
                            }
                        }
                        (St::Csi { .. }, b';') => {
                            self.csi_at = self.csi_at.saturating_add(1);
                            st
                        }
                        (St::Csi { params, .. }, b'<'..=b'?') => St::Csi {
                            params,
                            private: true,
                        },
                        (St::Csi { params, private }, 0x40..=0x7e) => {
                            if b == b'r' && !private {
                                self.region = params;
                                self.region_params = (self.csi[0], self.csi[1]);
                            }
                            St::Ground
                        }
                        (st, _) => st,
                    };
                    if self.st == St::Ground && !self.region && end == len {
                        start = Some(i);
                    }
                }
            }
            // Past an SGR cut in half at the end, the run is over: only the state
            // still moves.
            if end == len && (self.st != St::Ground || self.region) {
                start = None;
            }
        }
        let start = start?;
        // Only valid UTF-8 is plain: an invalid byte may be a C1 control.
        let mut from = start;
        loop {
            let text = bytes.get(from..end)?;
            match std::str::from_utf8(text) {
                Ok(_) => return Some((from, end)),
                Err(e) => match e.error_len() {
                    Some(n) => from += e.valid_up_to() + n,
                    None => return Some((from, from + e.valid_up_to())),
                },
            }
        }
    }
}

/// The position just after the line feed that leaves exactly `keep` line feeds after
/// it in `text`, if `text` holds more than `keep`.
pub(crate) fn nth_line_from_end(text: &[u8], keep: usize) -> Option<usize> {
    memchr::memrchr_iter(b'\n', text).nth(keep).map(|i| i + 1)
}

/// The SGR sequences of a plain-text run that still count for the pen at its end:
/// those from the last one that starts with a reset (`ESC [ m`, `ESC [ 0 ...m`).
pub(crate) fn pen_sgrs(text: &[u8]) -> Vec<&[u8]> {
    let mut sgrs: Vec<&[u8]> = Vec::new();
    let mut i = 0;
    while let Some(j) = text.get(i..).and_then(|t| memchr::memchr(ESC, t)) {
        i += j;
        let Some(n) = text.get(i..).and_then(sgr_len) else {
            i += 1;
            continue;
        };
        let sgr = text.get(i..i + n).unwrap_or_default();
        let first = sgr
            .get(2..)
            .unwrap_or_default()
            .split(|&c| c == b';' || c == b':' || c == b'm')
            .next()
            .unwrap_or_default();
        if first.iter().all(|&c| c == b'0') {
            sgrs.clear();
        }
        sgrs.push(sgr);
        i += n;
    }
    sgrs
}
