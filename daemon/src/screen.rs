//! Screen snapshots from the emulator (pure functions over a `vt100::Screen`).
//!
//! | request              | bytes                                                        |
//! |----------------------|--------------------------------------------------------------|
//! | ATTACH               | `contents_formatted()`: resets attributes, clears the screen, draws every visible cell, restores the cursor position and visibility |
//! | PEEK                 | the same                                                     |
//! | PEEK plain           | `contents()`: visible text, no attributes, trailing blank lines dropped |
//! | PEEK full            | every scrollback row, then the visible rows, one line each, with SGR attributes only (no cursor motion), wrapped in attribute resets |
//! | PEEK full plain      | the same rows as plain text, trailing blank lines dropped    |
//!
//! A snapshot never exceeds the largest server frame: a longer one (possible only with
//! `full`) keeps its newest lines and drops the oldest.

use bytes::Bytes;
use latch_wire::limits::MAX_SERVER_FRAME;
use vt100::capture::{basic_formatted_to_plain, BasicFormattedCaptureRange};

/// Room left in a SCREEN frame for the frame's own header and length varint.
const SCREEN_MAX: usize = MAX_SERVER_FRAME - 64;

/// SGR reset.
const RESET: &str = "\x1b[m";

/// The ATTACH snapshot: repaints a terminal exactly (clear, cells, cursor).
pub(crate) fn attach_snapshot(screen: &vt100::Screen) -> Bytes {
    Bytes::from(screen.contents_formatted())
}

/// The PEEK snapshot (see the module table).
pub(crate) fn peek_snapshot(screen: &vt100::Screen, plain: bool, full: bool) -> Bytes {
    let text = match (plain, full) {
        (false, false) => return Bytes::from(screen.contents_formatted()),
        (true, false) => screen.contents(),
        (plain, true) => {
            let mut capture = String::new();
            // Writing into a String cannot fail.
            let _ = screen.write_contents_formatted_basic(
                &mut capture,
                BasicFormattedCaptureRange::Full(&mut Default::default()),
            );
            if plain {
                let mut text: String = basic_formatted_to_plain(&capture).collect();
                trim_trailing_newlines(&mut text);
                text
            } else {
                trim_trailing_newlines(&mut capture);
                let mut text = String::with_capacity(capture.len() + 2 * RESET.len());
                text.push_str(RESET);
                text.push_str(&capture);
                text.push_str(RESET);
                text
            }
        }
    };
    Bytes::from(keep_tail(text, SCREEN_MAX))
}

fn trim_trailing_newlines(s: &mut String) {
    let trimmed = s.trim_end_matches('\n').len();
    s.truncate(trimmed);
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
    use std::num::NonZeroU16;

    fn parser(rows: u16, cols: u16, scrollback: usize) -> vt100::Parser {
        vt100::Parser::new(
            NonZeroU16::new(rows).unwrap(),
            NonZeroU16::new(cols).unwrap(),
            scrollback,
        )
    }

    #[test]
    fn plain_and_formatted_visible() {
        let mut p = parser(4, 20, 100);
        p.process(b"one\r\n\x1b[1mtwo\x1b[m\r\nthree");
        let plain = peek_snapshot(p.screen(), true, false);
        assert_eq!(&plain[..], b"one\ntwo\nthree");
        let ansi = peek_snapshot(p.screen(), false, false);
        let ansi = std::str::from_utf8(&ansi).unwrap();
        assert!(ansi.contains("\x1b[H\x1b[J"), "clears the screen: {ansi:?}");
        assert!(ansi.contains("\x1b[1m"), "keeps attributes: {ansi:?}");
        assert_eq!(
            attach_snapshot(p.screen()),
            peek_snapshot(p.screen(), false, false)
        );
        // Repainting a fresh terminal with the snapshot reproduces the screen.
        let mut copy = parser(4, 20, 0);
        copy.process(ansi.as_bytes());
        assert_eq!(copy.screen().contents(), p.screen().contents());
        assert_eq!(
            copy.screen().cursor_position(),
            p.screen().cursor_position()
        );
    }

    #[test]
    fn full_includes_scrollback_then_screen() {
        let mut p = parser(3, 20, 100);
        for i in 0..10 {
            p.process(format!("line {i}\r\n").as_bytes());
        }
        let visible = peek_snapshot(p.screen(), true, false);
        assert!(!String::from_utf8_lossy(&visible).contains("line 0"));
        let full = peek_snapshot(p.screen(), true, true);
        let want: Vec<String> = (0..10).map(|i| format!("line {i}")).collect();
        assert_eq!(String::from_utf8_lossy(&full), want.join("\n"));
        let ansi = peek_snapshot(p.screen(), false, true);
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
        let full = peek_snapshot(p.screen(), true, true);
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
