//! latch-screen: a session's terminal screen. alacritty_terminal's grid and escape
//! parser, the serializers latch's snapshots are made of, and the snapshots
//! themselves. No IO, no clock, no protocol state: bytes in, screens out.
//!
//! Chosen over vt100 by measurement (BENCHMARKS.md, `bench/emulator`): it parses
//! plain and base64-like output several times faster and holds less memory per
//! scrollback line. It has no serializer of its own, so this module writes the
//! repaint and the text captures from its grid.
//!
//! `bench/emulator` measures this very crate.
//!
//! Terminal queries (DA, DSR, DECRQM, XTVERSION, colours, ...) are answered as one
//! fixed terminal (SPEC §4.4) while [`Emulator::set_answering`] is on: the daemon
//! turns it off while a read-write client's own terminal answers. Bells, titles,
//! notifications and cursor visibility are collected as [`TermEvent`]s.
//! Synchronized updates (`CSI ? 2026 h`) are not buffered by the parser.
//!
//! **Output is applied lazily.** [`Emulator::push`] only queues bytes; every method
//! that reads the terminal ([`formatted`](Emulator::formatted), [`plain`](Emulator::plain),
//! [`cursor`](Emulator::cursor), ...) and [`resize`](Emulator::resize) first applies
//! everything queued, so what they see reflects exactly the bytes pushed before them.
//! The daemon applies the queue when the program goes quiet, and whenever it grows
//! past a threshold. Then, under a flood, most of it need not be parsed at all:
//!
//! **Fast-forward.** Plain text (UTF-8 without control characters other than CR, LF
//! and TAB, and complete SGR sequences) only writes cells, moves the cursor and
//! changes the pen. If such a run holds more line feeds than the scrollback plus the
//! screen can show, with the scroll region at its default (full screen), everything
//! it wrote before its last `scrollback + rows + 2` lines scrolls out of the
//! scrollback whether it was parsed or not. So that part is dropped unparsed except
//! its SGR sequences from the last reset on (which set the pen the rest is drawn
//! with); the rest is parsed as usual. The resulting screen, scrollback, cursor and
//! pen are the ones full parsing gives. A small scanner (`Scan`) follows the escape
//! state across pushes to know where such runs start: never inside an escape
//! sequence, never while a scroll region may be set.
//!
//! **Scrollback.** alacritty keeps history rows as full cells (24 bytes each, blanks
//! included), about 20 MB for 10,000 rows of 80 columns. It keeps only a window of the
//! newest rows here (`compact::WINDOW`); output is parsed in pieces, and after each
//! one the rows older than the window move to a compact store (text plus attribute
//! runs, about a twentieth of the size: `compact`), bounded with them by the
//! scrollback limit, and are rebuilt into alacritty's cells for every capture that
//! reads them, so every capture is byte for byte what alacritty holding every row
//! gives ([`Emulator::new_uncompacted`], the tests' reference). `CSI 3 J` and RIS
//! clear the store with alacritty's history; the alternate screen shows none of it;
//! a change of width reflows the window and the compact rows alike, 1,024 compact
//! rows at a time and never splitting a wrapped line from its continuation, so a
//! capture after a resize is the same too, unless one line spans hundreds of rows
//! (SPEC §4.4).
//!
//! ## Snapshots
//!
//! Pure functions over an [`Emulator`]:
//!
//! | request              | bytes                                                        |
//! |----------------------|--------------------------------------------------------------|
//! | ATTACH               | the screen in use (`CSI ? 1049 h/l`), then [`Emulator::formatted`]: cursor visibility, attribute reset, clear screen, every visible cell with its attributes, the cursor position, the current pen; then every tracked mode set or reset, and the cursor shape |
//! | PEEK                 | the visible rows, one line per line of output (a wrapped row continues its line), with SGR attributes only (no cursor motion, nothing cleared), wrapped in attribute resets |
//! | PEEK plain           | visible text, no attributes, rows separated by `\n` (a wrapped row continues its line), trailing blanks and blank lines dropped |
//! | PEEK full            | every scrollback row, then the visible rows, as PEEK, wrapped in attribute resets |
//! | PEEK full plain      | the same rows as plain text, trailing blank lines dropped    |
//!
//! A snapshot never exceeds the largest server frame: a longer one (possible only with
//! `full`) keeps its newest lines and drops the oldest.
//!
//! CAPTURE is not text but cells: [`capture::Capture`], every cell's grapheme,
//! colours and attributes, the cursor and the program's palette, for the pictures.

// No unsafe code at all in this crate (the protocol and the screen are pure data).
#![forbid(unsafe_code)]

pub mod attach;
pub mod capture;
mod compact;
mod effects;
mod emulator;
#[cfg(test)]
mod emulator_tests;
mod hibernate;
#[cfg(test)]
mod hibernate_tests;
mod legacy;
mod modes;
mod scan;
#[cfg(test)]
mod scrollback_tests;
mod serialize;
pub mod shell;
mod side;
mod strip;

pub use effects::{default_color, xtversion_answer, TermEvent, DA2_ANSWER};
pub use emulator::{Emulator, NoSync};
pub use legacy::{legacy_lines, legacy_modes, legacy_peek_snapshot, LegacyModes};
pub use modes::RESTORE_MODES;
pub use shell::{Mark, MarkKind, ShellState, ShellTracker};
pub use side::{OSC_MAX, TITLE_MAX};
pub use strip::PlainStream;

use bytes::Bytes;
use latch_wire::limits::MAX_SERVER_FRAME;

/// Room left in a SCREEN frame for the frame's own header and length varint.
const SCREEN_MAX: usize = MAX_SERVER_FRAME - 64;

/// SGR reset.
const RESET: &str = "\x1b[m";

/// The ATTACH snapshot: puts a terminal in the program's state exactly: the screen
/// it is on (main or alternate), every cell, the cursor, then the modes
/// (SPEC §5.4).
pub fn attach_snapshot(term: &mut Emulator) -> Bytes {
    let before = term.modes_before();
    let cells = term.formatted();
    let after = term.modes_after();
    let mut out = String::with_capacity(before.len() + cells.len() + after.len());
    out.push_str(before);
    out.push_str(&cells);
    out.push_str(&after);
    Bytes::from(out)
}

/// What a text capture shows (SPEC §4.4): plain text or line-based ANSI, of the
/// visible screen or of the scrollback and the screen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct View {
    /// Its form.
    pub form: Form,
    /// How much of the session it covers.
    pub extent: Extent,
}

/// A capture's form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// Text, escapes stripped.
    Plain,
    /// Line-based ANSI (SGR kept).
    Ansi,
}

/// A capture's extent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extent {
    /// The visible screen.
    Screen,
    /// The scrollback, then the screen.
    Scrollback,
}

impl View {
    /// The visible screen as plain text.
    pub const PLAIN: Self = Self::new(true, false);
    /// The visible screen as line-based ANSI.
    pub const ANSI: Self = Self::new(false, false);

    /// The view a wire frame's two flags name (SPEC §4.1's PEEK).
    pub const fn new(plain: bool, full: bool) -> Self {
        Self {
            form: if plain { Form::Plain } else { Form::Ansi },
            extent: if full {
                Extent::Scrollback
            } else {
                Extent::Screen
            },
        }
    }

    /// The same form over the scrollback too.
    pub const fn full(self) -> Self {
        Self {
            form: self.form,
            extent: Extent::Scrollback,
        }
    }

    fn flags(self) -> (bool, bool) {
        (
            matches!(self.form, Form::Plain),
            matches!(self.extent, Extent::Scrollback),
        )
    }
}

/// The PEEK snapshot (see the module table).
pub fn peek_snapshot(term: &mut Emulator, view: View) -> Bytes {
    Bytes::from(capture(term, view, SCREEN_MAX))
}

/// A PEEK capture as text, keeping at most `max` bytes (its newest whole lines).
pub fn capture(term: &mut Emulator, view: View, max: usize) -> String {
    let text = match view.flags() {
        (true, full) => term.plain(full),
        (false, full) => {
            let capture = term.formatted_lines(full);
            let mut text = String::with_capacity(capture.len() + 2 * RESET.len());
            text.push_str(RESET);
            text.push_str(&capture);
            text.push_str(RESET);
            text
        }
    };
    keep_tail(text, max)
}

/// Keeps at most `max` bytes: the newest whole lines, after an attribute reset.
fn keep_tail(text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let from = text.len() - max + RESET.len();
    // Start after the first newline at or beyond `from`, so no line is cut in half.
    let start = text
        .get(from..)
        .and_then(|rest| rest.find('\n'))
        .map_or(text.len(), |i| from + i + 1);
    let mut out = String::with_capacity(text.len() - start + RESET.len());
    out.push_str(RESET);
    out.push_str(text.get(start..).unwrap_or_default());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parser(rows: u16, cols: u16, scrollback: usize) -> Emulator {
        Emulator::new(rows, cols, scrollback)
    }

    #[test]
    fn plain_and_formatted_visible() {
        let mut p = parser(4, 20, 100);
        p.process(b"one\r\n\x1b[1mtwo\x1b[m\r\nthree");
        let plain = peek_snapshot(&mut p, View::PLAIN);
        assert_eq!(&plain[..], b"one\ntwo\nthree");
        let ansi = peek_snapshot(&mut p, View::ANSI);
        let ansi = std::str::from_utf8(&ansi).unwrap();
        // Line-based: SGR only, one line per row, never a cursor move or a clear.
        assert_eq!(ansi, "\x1b[mone\n\x1b[0;1mtwo\x1b[m\nthree\x1b[m");
        let repaint = attach_snapshot(&mut p);
        let repaint = std::str::from_utf8(&repaint).unwrap();
        assert!(
            repaint.contains("\x1b[H\x1b[J"),
            "clears the screen: {repaint:?}"
        );
        // Repainting a fresh terminal with the snapshot reproduces the screen.
        let mut copy = parser(4, 20, 0);
        copy.process(repaint.as_bytes());
        assert_eq!(copy.plain(false), p.plain(false));
        assert_eq!(copy.cursor(), p.cursor());
    }

    #[test]
    fn full_includes_scrollback_then_screen() {
        let mut p = parser(3, 20, 100);
        for i in 0..10 {
            p.process(format!("line {i}\r\n").as_bytes());
        }
        let visible = peek_snapshot(&mut p, View::PLAIN);
        assert!(!String::from_utf8_lossy(&visible).contains("line 0"));
        let full = peek_snapshot(&mut p, View::PLAIN.full());
        let want: Vec<String> = (0..10).map(|i| format!("line {i}")).collect();
        assert_eq!(String::from_utf8_lossy(&full), want.join("\n"));
        let ansi = peek_snapshot(&mut p, View::ANSI.full());
        let ansi = String::from_utf8_lossy(&ansi);
        assert!(ansi.starts_with(RESET) && ansi.ends_with(RESET));
        assert!(ansi.contains("line 0\nline 1"));
    }

    #[test]
    fn scrollback_is_capped() {
        let mut p = parser(2, 10, 5);
        for i in 0..50 {
            p.process(format!("{i}\r\n").as_bytes());
        }
        let full = peek_snapshot(&mut p, View::PLAIN.full());
        assert_eq!(String::from_utf8_lossy(&full).lines().count(), 6);
    }

    #[test]
    fn oversized_text_keeps_newest_whole_lines() {
        let text: String = (0..100).map(|i| format!("row {i:03}\n")).collect();
        let kept = keep_tail(text, 100);
        assert!(kept.len() <= 100, "{}", kept.len());
        assert!(kept.starts_with(RESET));
        let body = &kept[RESET.len()..];
        assert!(body.starts_with("row "), "{body:?}");
        assert!(body.ends_with("row 099\n"));
        assert_eq!(keep_tail("short".into(), 100), "short");
    }
}
