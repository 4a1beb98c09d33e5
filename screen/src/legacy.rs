//! The screens the older `pty` client prints (SPEC.md §7, "Legacy screens"): its
//! daemon's PEEK serializers, written from alacritty_terminal's grid.
//!
//! pty's daemon keeps its screen in xterm.js and answers PEEK with
//!
//! | PEEK flags      | bytes                                                           |
//! |-----------------|-----------------------------------------------------------------|
//! | plain           | each visible row's text, right-trimmed, joined by `\n`, trailing empty rows dropped |
//! | plain, full     | the same over the scrollback and the visible rows               |
//! | (none)          | a mode prefix, then xterm's serialize addon over the visible rows: SGR, text, `\r\n` between rows, relative cursor moves (`CUF`, `CUB`, `CUU`, `CUD`) and `ECH` only; then the cursor's pen and the terminal modes |
//! | full            | the same over the scrollback and the visible rows               |
//!
//! No absolute move and no clear: the client prints it into the caller's terminal
//! where its cursor is. This module reproduces those bytes. xterm tells a cell a
//! program wrote (a space included) from one it never wrote or erased (a "null"
//! cell); alacritty keeps a space in both. So a run of blanks counts as written when
//! text follows it on its row, or when it ends at the cursor on the cursor's row (a
//! prompt's trailing space), and as null otherwise, or when it starts with a tab
//! (xterm's tab writes no cell). Trailing spaces a program wrote and then moved away
//! from are the one case that differs from pty's bytes.
//!
//! While the program uses the alternate screen, pty sends the main screen, then
//! `CSI ? 1049 h`, `CSI H` and the alternate screen. alacritty keeps the main screen
//! private, so it is sent as if it were blank (nothing before `CSI ? 1049 h`).

use std::fmt::Write as _;

use alacritty_terminal::grid::{Dimensions, Row};
use alacritty_terminal::index::Column;
use alacritty_terminal::term::cell::{Cell, Flags};
use alacritty_terminal::term::TermMode;
use alacritty_terminal::vte::ansi::{Color, NamedColor};
use bytes::Bytes;

use crate::emulator::Emulator;

/// The largest SCREEN the legacy framing carries (its 32 MiB packet cap), with room
/// to spare.
const LEGACY_SCREEN_MAX: usize = 32 * 1024 * 1024 - 1024;

/// Terminal modes pty's STATUS reports (`modes`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LegacyModes {
    /// SGR mouse encoding (`CSI ? 1006 h`).
    pub sgr_mouse: bool,
    /// The cursor is hidden (`CSI ? 25 l`).
    pub cursor_hidden: bool,
    /// The kitty keyboard flags in force, if any.
    pub kitty_keyboard_flags: Vec<u8>,
}

/// Lines pty's STATUS reports: `(used, capacity)` = (scrollback + rows, rows + the
/// scrollback limit).
pub fn legacy_lines(term: &mut Emulator) -> (usize, usize) {
    term.flush();
    let grid = term.term.grid();
    (
        term.history_len() + grid.screen_lines(),
        grid.screen_lines() + term.history.scrollback,
    )
}

/// The modes pty's STATUS reports.
pub fn legacy_modes(term: &mut Emulator) -> LegacyModes {
    term.flush();
    let mode = *term.term.mode();
    let kitty = kitty_flags(mode);
    LegacyModes {
        sgr_mouse: mode.contains(TermMode::SGR_MOUSE),
        cursor_hidden: !mode.contains(TermMode::SHOW_CURSOR),
        kitty_keyboard_flags: if kitty == 0 { Vec::new() } else { vec![kitty] },
    }
}

fn kitty_flags(mode: TermMode) -> u8 {
    let mut f = 0;
    for (m, bit) in [
        (TermMode::DISAMBIGUATE_ESC_CODES, 1),
        (TermMode::REPORT_EVENT_TYPES, 2),
        (TermMode::REPORT_ALTERNATE_KEYS, 4),
        (TermMode::REPORT_ALL_KEYS_AS_ESC, 8),
        (TermMode::REPORT_ASSOCIATED_TEXT, 16),
    ] {
        if mode.contains(m) {
            f |= bit;
        }
    }
    f
}

/// pty's PEEK screen (module table).
pub fn legacy_peek_snapshot(term: &mut Emulator, view: crate::View) -> Bytes {
    let plain = view.form == crate::Form::Plain;
    let full = view.extent == crate::Extent::Scrollback;
    term.flush();
    let text = if plain {
        plain_text(term, full)
    } else {
        let mut out = mode_prefix(term);
        if term.term.mode().contains(TermMode::ALT_SCREEN) {
            // The main screen is not kept here: as if it were blank (module docs).
            out.push_str("\x1b[?1049h\x1b[H");
            out.push_str(&Serializer::new(term, true).run());
        } else {
            out.push_str(&Serializer::new(term, full).run());
        }
        out.push_str(&mode_suffix(*term.term.mode()));
        out
    };
    Bytes::from(keep_tail(text))
}

/// Keeps the newest whole rows that fit the legacy packet cap.
fn keep_tail(text: String) -> String {
    if text.len() <= LEGACY_SCREEN_MAX {
        return text;
    }
    let from = text.len() - LEGACY_SCREEN_MAX;
    let start = text
        .get(from..)
        .and_then(|rest| rest.find('\n'))
        .map_or(text.len(), |i| from + i + 1);
    text.get(start..).unwrap_or_default().to_owned()
}

/// pty's `getModePrefix()` for PEEK: mouse tracking, SGR mouse, a hidden cursor,
/// kitty keyboard flags.
fn mode_prefix(term: &Emulator) -> String {
    let mode = *term.term.mode();
    let mut p = String::new();
    for (m, seq) in [
        (TermMode::MOUSE_REPORT_CLICK, "\x1b[?1000h"),
        (TermMode::MOUSE_DRAG, "\x1b[?1002h"),
        (TermMode::MOUSE_MOTION, "\x1b[?1003h"),
        (TermMode::SGR_MOUSE, "\x1b[?1006h"),
    ] {
        if mode.contains(m) {
            p.push_str(seq);
        }
    }
    if !mode.contains(TermMode::SHOW_CURSOR) {
        p.push_str("\x1b[?25l");
    }
    let kitty = kitty_flags(mode);
    if kitty != 0 {
        let _ = write!(p, "\x1b[>{kitty}u");
    }
    p
}

/// The serialize addon's trailing modes.
fn mode_suffix(mode: TermMode) -> String {
    let mut s = String::new();
    for (m, seq) in [
        (TermMode::APP_CURSOR, "\x1b[?1h"),
        (TermMode::APP_KEYPAD, "\x1b[?66h"),
        (TermMode::BRACKETED_PASTE, "\x1b[?2004h"),
        (TermMode::INSERT, "\x1b[4h"),
        (TermMode::ORIGIN, "\x1b[?6h"),
        (TermMode::FOCUS_IN_OUT, "\x1b[?1004h"),
    ] {
        if mode.contains(m) {
            s.push_str(seq);
        }
    }
    if !mode.contains(TermMode::LINE_WRAP) {
        s.push_str("\x1b[?7l");
    }
    if mode.contains(TermMode::MOUSE_REPORT_CLICK) {
        s.push_str("\x1b[?1000h");
    } else if mode.contains(TermMode::MOUSE_DRAG) {
        s.push_str("\x1b[?1002h");
    } else if mode.contains(TermMode::MOUSE_MOTION) {
        s.push_str("\x1b[?1003h");
    }
    s
}

/// A colour as xterm keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Col {
    Default,
    Palette(u8),
    Rgb(u8, u8, u8),
}

fn col(c: Color) -> Col {
    match c {
        Color::Spec(rgb) => Col::Rgb(rgb.r, rgb.g, rgb.b),
        Color::Indexed(i) => Col::Palette(i),
        Color::Named(n) => {
            let v = n as usize;
            let dim = NamedColor::DimBlack as usize;
            if v < 16 {
                Col::Palette(u8::try_from(v).unwrap_or(0))
            } else if (dim..dim + 8).contains(&v) {
                Col::Palette(u8::try_from(v - dim).unwrap_or(0))
            } else {
                Col::Default
            }
        }
    }
}

/// The attribute flags xterm compares, in its SGR order.
const ATTR_FLAGS: [(Flags, u8, u8); 6] = [
    (Flags::INVERSE, 7, 27),
    (Flags::BOLD, 1, 22),
    (Flags::ALL_UNDERLINES, 4, 24),
    (Flags::HIDDEN, 8, 28),
    (Flags::ITALIC, 3, 23),
    (Flags::DIM, 2, 22),
];

/// A cell's attributes as xterm compares them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Attr {
    fg: Col,
    bg: Col,
    flags: [bool; 7],
}

impl Attr {
    const DEFAULT: Attr = Attr {
        fg: Col::Default,
        bg: Col::Default,
        flags: [false; 7],
    };

    fn of(cell: &Cell) -> Self {
        let mut flags = [false; 7];
        for (i, (f, _, _)) in ATTR_FLAGS.iter().enumerate() {
            flags[i] = cell.flags.intersects(*f);
        }
        flags[6] = cell.flags.contains(Flags::STRIKEOUT);
        Attr {
            fg: col(cell.fg),
            bg: col(cell.bg),
            flags,
        }
    }

    /// A null (blank) cell keeps only its background.
    fn null(bg: Col) -> Self {
        Attr {
            bg,
            ..Self::DEFAULT
        }
    }

    fn is_default(&self) -> bool {
        *self == Self::DEFAULT
    }
}

/// The addon's `_diffStyle`: SGR parameters taking `old` to `new`.
fn diff_style(new: &Attr, old: &Attr) -> Vec<u32> {
    let mut seq = Vec::new();
    let fg = new.fg != old.fg;
    let bg = new.bg != old.bg;
    let flags = new.flags != old.flags;
    if !(fg || bg || flags) {
        return seq;
    }
    if new.is_default() {
        if !old.is_default() {
            seq.push(0);
        }
        return seq;
    }
    let colour = |seq: &mut Vec<u32>, c: Col, base: u32, bright: u32, ext: u32| match c {
        Col::Rgb(r, g, b) => seq.extend([ext, 2, r.into(), g.into(), b.into()]),
        Col::Palette(i) if i >= 16 => seq.extend([ext, 5, i.into()]),
        Col::Palette(i) if i & 8 != 0 => seq.push(bright + u32::from(i & 7)),
        Col::Palette(i) => seq.push(base + u32::from(i & 7)),
        Col::Default => seq.push(base + 9),
    };
    if fg {
        colour(&mut seq, new.fg, 30, 90, 38);
    }
    if bg {
        colour(&mut seq, new.bg, 40, 100, 48);
    }
    if flags {
        for (i, (_, on, off)) in ATTR_FLAGS.iter().enumerate() {
            if new.flags[i] != old.flags[i] {
                seq.push(u32::from(if new.flags[i] { *on } else { *off }));
            }
        }
        if new.flags[6] != old.flags[6] {
            seq.push(if new.flags[6] { 9 } else { 29 });
        }
    }
    seq
}

fn sgr(out: &mut String, seq: &[u32]) {
    out.push_str("\x1b[");
    for (i, p) in seq.iter().enumerate() {
        if i > 0 {
            out.push(';');
        }
        let _ = write!(out, "{p}");
    }
    out.push('m');
}

/// One cell as the serializer sees it.
#[derive(Debug, Clone)]
struct XCell {
    /// Empty for a null cell.
    chars: String,
    /// 0 for the second half of a wide character, 2 for a wide one.
    width: usize,
    attr: Attr,
}

fn is_blank(cell: &Cell) -> bool {
    matches!(cell.c, ' ' | '\t' | '\0') && cell.zerowidth().is_none()
}

/// A row's cells, with blank runs classified as written or null (module docs).
fn row_cells(row: &Row<Cell>, cols: usize, cursor_col: Option<usize>) -> Vec<XCell> {
    let last_text = (0..cols)
        .rev()
        .find(|&c| {
            let cell = &row[Column(c)];
            !is_blank(cell)
                && !cell
                    .flags
                    .intersects(Flags::WIDE_CHAR_SPACER | Flags::LEADING_WIDE_CHAR_SPACER)
        })
        .map_or(0, |c| c + 1);
    let mut cells = Vec::with_capacity(cols);
    let mut c = 0;
    while c < cols {
        let cell = &row[Column(c)];
        if cell.flags.contains(Flags::WIDE_CHAR_SPACER) {
            cells.push(XCell {
                chars: String::new(),
                width: 0,
                attr: Attr::of(cell),
            });
            c += 1;
            continue;
        }
        if cell.flags.contains(Flags::LEADING_WIDE_CHAR_SPACER) || is_blank(cell) {
            // A run of blanks.
            let start = c;
            let mut end = c;
            while end < cols {
                let b = &row[Column(end)];
                if !(is_blank(b) || b.flags.contains(Flags::LEADING_WIDE_CHAR_SPACER)) {
                    break;
                }
                end += 1;
            }
            let tab = row[Column(start)].c == '\t';
            let leading = cell.flags.contains(Flags::LEADING_WIDE_CHAR_SPACER);
            let written =
                !tab && !leading && (end <= last_text || cursor_col.is_some_and(|cc| start < cc));
            // A trailing run before the cursor is written up to the cursor only.
            for k in start..end {
                let b = &row[Column(k)];
                let w = written
                    && (end <= last_text || cursor_col.is_some_and(|cc| k < cc))
                    && !b.flags.contains(Flags::LEADING_WIDE_CHAR_SPACER);
                cells.push(if w {
                    XCell {
                        chars: " ".into(),
                        width: 1,
                        attr: Attr::of(b),
                    }
                } else {
                    XCell {
                        chars: String::new(),
                        width: 1,
                        attr: Attr::null(col(b.bg)),
                    }
                });
            }
            c = end;
            continue;
        }
        let mut chars = String::new();
        chars.push(cell.c);
        if let Some(zw) = cell.zerowidth() {
            chars.extend(zw.iter());
        }
        cells.push(XCell {
            chars,
            width: if cell.flags.contains(Flags::WIDE_CHAR) {
                2
            } else {
                1
            },
            attr: Attr::of(cell),
        });
        c += 1;
    }
    cells
}

/// pty's `getPlainScreen()` / `getFullPlainScreen()`: every row on its own line (a
/// wrapped row too), right-trimmed of null cells, trailing empty lines dropped.
fn plain_text(term: &Emulator, full: bool) -> String {
    let cursor = term.term.grid().cursor.point;
    let cursor_row = term.history_len() + usize::try_from(cursor.line.0).unwrap_or(0);
    let mut lines: Vec<String> = Vec::new();
    term.each_row(full, |abs, row| {
        let cursor_col = (abs == cursor_row).then_some(cursor.column.0);
        // A compact scrollback row keeps the width it had (SPEC §4.4).
        let cells = row_cells(row, row.len(), cursor_col);
        let trimmed = cells
            .iter()
            .rposition(|x| !x.chars.is_empty())
            .map_or(0, |i| i + 1);
        let mut s = String::new();
        for x in cells.iter().take(trimmed) {
            match x.width {
                0 => {}
                _ if x.chars.is_empty() => s.push(' '),
                _ => s.push_str(&x.chars),
            }
        }
        lines.push(s);
    });
    while lines.last().is_some_and(String::is_empty) {
        lines.pop();
    }
    lines.join("\n")
}

/// A port of the serialize addon's `StringSerializeHandler` over absolute rows
/// (0 is the oldest scrollback row).
struct Serializer {
    rows: Vec<Vec<XCell>>,
    wrapped: Vec<bool>,
    first: usize,
    term_rows: usize,
    cursor_row: usize,
    cursor_col: usize,
    pen: Attr,
    all_rows: Vec<String>,
    separators: Vec<String>,
    current: String,
    null_count: usize,
    cursor_style: Attr,
    cursor_style_at: (usize, usize),
    background: Attr,
    last_cursor: (usize, usize),
    last_content: (usize, usize),
    total: usize,
}

impl Serializer {
    fn new(term: &Emulator, full: bool) -> Self {
        let grid = term.term.grid();
        let cols = grid.columns();
        let history = term.history_len();
        let screen = grid.screen_lines();
        let total = history + screen;
        let first = if full { 0 } else { history };
        let cursor = &grid.cursor;
        let cursor_row = history + usize::try_from(cursor.point.line.0).unwrap_or(0);
        let cursor_col = if cursor.input_needs_wrap {
            cols
        } else {
            cursor.point.column.0
        };
        let mut rows = Vec::with_capacity(total - first);
        let mut wrapped = Vec::with_capacity(total - first);
        term.each_row(full, |abs, row| {
            let cc = (abs == cursor_row).then_some(cursor_col);
            // A compact scrollback row keeps the width it had (SPEC §4.4).
            let width = row.len();
            rows.push(row_cells(row, width, cc));
            wrapped.push(row[Column(width - 1)].flags.contains(Flags::WRAPLINE));
        });
        Self {
            rows,
            wrapped,
            first,
            term_rows: screen,
            cursor_row,
            cursor_col,
            pen: Attr::of(&cursor.template),
            all_rows: Vec::new(),
            separators: Vec::new(),
            current: String::new(),
            null_count: 0,
            cursor_style: Attr::DEFAULT,
            cursor_style_at: (first, 0),
            background: Attr::DEFAULT,
            last_cursor: (first, 0),
            last_content: (first, 0),
            total,
        }
    }

    fn cell(&self, row: usize, col: usize) -> Option<&XCell> {
        self.rows.get(row.checked_sub(self.first)?)?.get(col)
    }

    fn run(mut self) -> String {
        let n = self.rows.len();
        for i in 0..n {
            let row = self.first + i;
            let cells = std::mem::take(&mut self.rows[i]);
            for (col, cell) in cells.iter().enumerate() {
                self.next_cell(cell, row, col);
            }
            self.rows[i] = cells;
            self.row_end(row, i + 1 == n);
        }
        self.finish()
    }

    fn next_cell(&mut self, cell: &XCell, row: usize, col: usize) {
        if cell.width == 0 {
            return;
        }
        let empty = cell.chars.is_empty();
        let seq = diff_style(&cell.attr, &self.cursor_style);
        let changed = if empty {
            self.cursor_style.bg != cell.attr.bg
        } else {
            !seq.is_empty()
        };
        if changed {
            if self.null_count > 0 {
                if self.cursor_style.bg != self.background.bg {
                    let _ = write!(self.current, "\x1b[{}X", self.null_count);
                }
                let _ = write!(self.current, "\x1b[{}C", self.null_count);
                self.null_count = 0;
            }
            self.last_content = (row, col);
            self.last_cursor = (row, col);
            sgr(&mut self.current, &seq);
            self.cursor_style = cell.attr;
            self.cursor_style_at = (row, col);
        }
        if empty {
            self.null_count += cell.width;
        } else {
            if self.null_count > 0 {
                if self.cursor_style.bg == self.background.bg {
                    let _ = write!(self.current, "\x1b[{}C", self.null_count);
                } else {
                    let _ = write!(self.current, "\x1b[{0}X\x1b[{0}C", self.null_count);
                }
                self.null_count = 0;
            }
            self.current.push_str(&cell.chars);
            self.last_content = (row, col + cell.width);
            self.last_cursor = self.last_content;
        }
    }

    fn row_end(&mut self, row: usize, last: bool) {
        if self.null_count > 0 && self.cursor_style.bg != self.background.bg {
            let _ = write!(self.current, "\x1b[{}X", self.null_count);
        }
        let mut sep = String::new();
        if !last {
            if row - self.first >= self.term_rows {
                // The addon's "enable BCE": the background becomes the style's.
                let (r, c) = self.cursor_style_at;
                if let Some(x) = self.cell(r, c) {
                    self.background = x.attr;
                }
            }
            let i = row - self.first;
            if !self.wrapped[i] {
                sep.push_str("\r\n");
                self.last_cursor = (row + 1, 0);
            } else {
                let cols = self.rows[i].len();
                let blank = XCell {
                    chars: String::new(),
                    width: 1,
                    attr: Attr::DEFAULT,
                };
                let this_last = self.rows[i].last().cloned().unwrap_or(blank.clone());
                let this_second = if cols >= 2 {
                    self.rows[i][cols - 2].clone()
                } else {
                    blank.clone()
                };
                let next_first = self.rows[i + 1].first().cloned().unwrap_or(blank);
                let next_wide = next_first.width > 1;
                let mut valid = false;
                let fits = if !next_first.chars.is_empty() && next_wide {
                    self.null_count <= 1
                } else {
                    self.null_count == 0
                };
                if fits {
                    if (!this_last.chars.is_empty() || this_last.width == 0)
                        && this_last.attr.bg == next_first.attr.bg
                    {
                        valid = true;
                    }
                    if next_wide
                        && (!this_second.chars.is_empty() || this_second.width == 0)
                        && this_last.attr.bg == next_first.attr.bg
                        && this_second.attr.bg == next_first.attr.bg
                    {
                        valid = true;
                    }
                }
                if !valid {
                    sep.push_str(&"-".repeat(self.null_count + 1));
                    sep.push_str("\x1b[1D\x1b[1X");
                    if self.null_count > 0 {
                        let _ = write!(
                            sep,
                            "\x1b[A\x1b[{0}C\x1b[{1}X\x1b[{0}D\x1b[B",
                            cols - self.null_count,
                            self.null_count
                        );
                    }
                    self.last_content = (row + 1, 0);
                    self.last_cursor = (row + 1, 0);
                }
            }
        }
        self.all_rows.push(std::mem::take(&mut self.current));
        self.separators.push(sep);
        self.null_count = 0;
    }

    fn finish(mut self) -> String {
        let mut row_end = self.all_rows.len();
        if self.total - self.first <= self.term_rows {
            row_end = (self.last_content.0 + 1 - self.first).min(row_end);
            self.last_cursor = self.last_content;
        }
        let mut out = String::new();
        for i in 0..row_end {
            out.push_str(&self.all_rows[i]);
            if i + 1 < row_end {
                out.push_str(&self.separators[i]);
            }
        }
        let (lr, lc) = self.last_cursor;
        let (cr, cc) = (self.cursor_row, self.cursor_col);
        if (cr, cc) != (lr, lc) {
            if cr > lr {
                let _ = write!(out, "\x1b[{}B", cr - lr);
            } else if cr < lr {
                let _ = write!(out, "\x1b[{}A", lr - cr);
            }
            if cc > lc {
                let _ = write!(out, "\x1b[{}C", cc - lc);
            } else if cc < lc {
                let _ = write!(out, "\x1b[{}D", lc - cc);
            }
        }
        let seq = diff_style(&self.pen, &self.cursor_style);
        if !seq.is_empty() {
            sgr(&mut out, &seq);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(input, plain, ANSI)` on a 3x10 terminal, each expected value produced by
    /// pty 0.12.0's daemon serializers (xterm.js headless 6 and its serialize addon)
    /// from the same input.
    const CASES: &[(&[u8], &str, &str)] = &[
        (
            b"\x1b[32mgreen\x1b[44m on blue\x1b[0m\r\n\x1b[38;5;200mi200\x1b[38;2;1;2;3mrgb\x1b[m",
            "green on b\nlue\ni200rgb",
            "\x1b[32mgreen\x1b[44m on blue\x1b[0m\r\n\x1b[38;5;200mi200\x1b[38;2;1;2;3mrgb\x1b[0m",
        ),
        (
            "日本語abc\r\nx日y".as_bytes(),
            "日本語abc\nx日y",
            "日本語abc\r\nx日y",
        ),
        (
            b"hello world\r\nmid\x1b[1;2H",
            "hello worl\nd\nmid",
            "hello world\r\nmid\x1b[2A\x1b[2D",
        ),
        (
            b"\x1b[?25l\x1b[?1000h\x1b[?1006hx\x1b[7minv\x1b[41m",
            "xinv",
            "\x1b[?1000h\x1b[?1006h\x1b[?25lx\x1b[7minv\x1b[41m\x1b[?1000h",
        ),
        ("123456789日x".as_bytes(), "123456789\n日x", "123456789日x"),
        (
            b"l1\r\nl2\r\nl3\r\nl4\r\nl5\r\nl6",
            "l4\nl5\nl6",
            "l4\r\nl5\r\nl6",
        ),
        (b"a\tb\r\n$ ", "a       b\n$ ", "a\x1b[7Cb\r\n$ "),
        (
            b"\x1b[?1049h\x1b[Halt screen",
            "alt screen",
            "\x1b[?1049h\x1b[Halt screen",
        ),
    ];

    fn term(input: &[u8]) -> Emulator {
        let mut t = Emulator::new(3, 10, 100);
        t.process(input);
        t
    }

    fn text(b: Bytes) -> String {
        String::from_utf8(b.to_vec()).unwrap()
    }

    #[test]
    fn peek_bytes_are_ptys() {
        for (input, plain, ansi) in CASES {
            let mut t = term(input);
            assert_eq!(
                text(legacy_peek_snapshot(&mut t, crate::View::new(true, false))),
                *plain,
                "{input:?}"
            );
            assert_eq!(
                text(legacy_peek_snapshot(&mut t, crate::View::new(false, false))),
                *ansi,
                "{input:?}"
            );
        }
    }

    #[test]
    fn full_adds_the_scrollback() {
        let mut t = term(b"l1\r\nl2\r\nl3\r\nl4\r\nl5\r\nl6");
        assert_eq!(
            text(legacy_peek_snapshot(&mut t, crate::View::new(true, true))),
            "l1\nl2\nl3\nl4\nl5\nl6"
        );
        assert_eq!(
            text(legacy_peek_snapshot(&mut t, crate::View::new(false, true))),
            "l1\r\nl2\r\nl3\r\nl4\r\nl5\r\nl6"
        );
    }

    #[test]
    fn ansi_peek_never_clears_or_moves_absolutely() {
        for (input, _, _) in CASES {
            let mut t = term(input);
            let ansi = text(legacy_peek_snapshot(&mut t, crate::View::new(false, false)));
            assert!(
                !ansi.contains("\x1b[2J") && !ansi.contains("\x1b[J"),
                "{ansi:?}"
            );
            let absolute = ansi.match_indices("\x1b[").any(|(i, _)| {
                let rest = &ansi[i + 2..];
                let end = rest.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(0);
                rest[end..].starts_with('H') && !ansi[..i].ends_with("\x1b[?1049h")
            });
            assert!(!absolute, "{ansi:?}");
        }
    }

    #[test]
    fn status_lines_and_modes() {
        let mut t = term(b"l1\r\nl2\r\nl3\r\nl4\x1b[?1006h\x1b[?25l");
        assert_eq!(legacy_lines(&mut t), (4, 103));
        assert_eq!(
            legacy_modes(&mut t),
            LegacyModes {
                sgr_mouse: true,
                cursor_hidden: true,
                kitty_keyboard_flags: Vec::new()
            }
        );
    }
}
