//! Terminal modes: the ones a repaint must carry so an attaching terminal ends up
//! as if it had been attached all along, and the sequence that undoes every mode a
//! session may have set (SPEC §5.4).

use std::fmt::Write as _;

use alacritty_terminal::term::TermMode;
use alacritty_terminal::vte::ansi::{CursorShape, CursorStyle};

use crate::emulator::Emulator;

/// Undoes every mode a session may have set in the attached terminal, without
/// clearing anything: leaves the alternate screen (the terminal shows what it
/// showed before), turns off every mouse mode, focus events, bracketed paste and
/// application cursor keys and keypad, pops the kitty keyboard flags, shows the
/// cursor with its default shape, resets the pen, turns autowrap back on, and
/// resets the scroll region (cursor saved and restored around it, since DECSTBM
/// homes the cursor). The client writes it on every exit path.
pub const RESTORE_MODES: &[u8] = b"\x1b[?1049l\
\x1b[?9l\x1b[?1000l\x1b[?1001l\x1b[?1002l\x1b[?1003l\x1b[?1005l\x1b[?1006l\x1b[?1015l\x1b[?1016l\
\x1b[?1004l\x1b[?2004l\
\x1b[?1l\x1b>\
\x1b[=0;1u\x1b[<99u\
\x1b[?25h\x1b[0 q\
\x1b[4l\x1b[?7h\
\x1b[m\
\x1b7\x1b[r\x1b8";

/// `(mode, DEC private number)` for every mode the repaint carries after the cells.
const PRIVATE: [(TermMode, u16); 9] = [
    (TermMode::APP_CURSOR, 1),
    (TermMode::LINE_WRAP, 7),
    (TermMode::MOUSE_REPORT_CLICK, 1000),
    (TermMode::MOUSE_DRAG, 1002),
    (TermMode::MOUSE_MOTION, 1003),
    (TermMode::FOCUS_IN_OUT, 1004),
    (TermMode::UTF8_MOUSE, 1005),
    (TermMode::SGR_MOUSE, 1006),
    (TermMode::BRACKETED_PASTE, 2004),
];

impl Emulator {
    /// What a repaint must send before its cells: the screen it draws on.
    pub(crate) fn modes_before(&mut self) -> &'static str {
        self.flush();
        if self.term.mode().contains(TermMode::ALT_SCREEN) {
            "\x1b[?1049h"
        } else {
            "\x1b[?1049l"
        }
    }

    /// What a repaint must send after its cells: every other mode the emulator
    /// tracks, each set or reset explicitly (a resynchronised terminal may hold
    /// stale ones), and the cursor's shape.
    pub(crate) fn modes_after(&mut self) -> String {
        self.flush();
        let mode = *self.term.mode();
        let mut out = String::with_capacity(128);
        // Resets first: a reset of one mouse mode clears the others in many
        // terminals (tmux, xterm).
        for (_, n) in PRIVATE.iter().filter(|(m, _)| !mode.contains(*m)) {
            let _ = write!(out, "\x1b[?{n}l");
        }
        for (_, n) in PRIVATE.iter().filter(|(m, _)| mode.contains(*m)) {
            let _ = write!(out, "\x1b[?{n}h");
        }
        // The scroll region, set or reset, inside a cursor save and restore since
        // DECSTBM homes the cursor.
        out.push_str("\x1b7\x1b[");
        if self.scan.region {
            let (top, bottom) = self.scan.region_params;
            if top > 0 {
                let _ = write!(out, "{top}");
            }
            if bottom > 0 {
                let _ = write!(out, ";{bottom}");
            }
        }
        out.push_str("r\x1b8");
        out.push_str(if mode.contains(TermMode::APP_KEYPAD) {
            "\x1b="
        } else {
            "\x1b>"
        });
        out.push_str(if mode.contains(TermMode::INSERT) {
            "\x1b[4h"
        } else {
            "\x1b[4l"
        });
        let style = self.term.cursor_style();
        if style == CursorStyle::default() {
            // Never set (or set to the default): the terminal's own default.
            out.push_str("\x1b[0 q");
            return out;
        }
        let shape = match style.shape {
            CursorShape::Block | CursorShape::HollowBlock | CursorShape::Hidden => 1,
            CursorShape::Underline => 3,
            CursorShape::Beam => 5,
        };
        let n = if style.blinking { shape } else { shape + 1 };
        let _ = write!(out, "\x1b[{n} q");
        out
    }
}
