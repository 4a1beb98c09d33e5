//! The cell-grid capture (SPEC §4.4): every cell of the screen (and, with `full`,
//! the scrollback) with its grapheme, colours and attributes, the cursor, and the
//! colours the program set (OSC 4, 10, 11, 12). The pictures (`peek --format`) are
//! drawn from it; the daemon only cuts it and encodes it with postcard, so it never
//! touches the code that draws.
//!
//! A line holds its cells' text once, and each cell how many bytes of it are its
//! own, so a capture costs a few bytes a cell on the wire and in memory. Trailing
//! blank cells (a space with the default background and nothing that shows on a
//! blank) are left out of a line that did not wrap.

use std::collections::HashMap;

use alacritty_terminal::grid::Dimensions;
use alacritty_terminal::index::Column;
use alacritty_terminal::term::cell::{Cell as AlacrittyCell, Flags};
use alacritty_terminal::term::TermMode;
use alacritty_terminal::vte::ansi::{Color, CursorShape as AlacrittyShape, NamedColor};
use serde::{Deserialize, Serialize};

use crate::emulator::Emulator;

/// Combining marks kept per cell: more than any script stacks, fewer than a
/// program that prints thousands onto one cell would make a capture hold.
pub const MARKS_MAX: usize = 16;

/// The most bytes a capture's lines and styles take: what fits one server frame
/// with room for the frame's header, the capture's own fields and a full palette.
pub const CAPTURE_MAX: usize = latch_wire::limits::MAX_SERVER_FRAME - 8192;

/// Attribute bits of a [`Style`].
pub mod attr {
    /// SGR 1.
    pub const BOLD: u16 = 1;
    /// SGR 2.
    pub const DIM: u16 = 1 << 1;
    /// SGR 3.
    pub const ITALIC: u16 = 1 << 2;
    /// SGR 4 (and `4:1`).
    pub const UNDERLINE: u16 = 1 << 3;
    /// SGR `4:2` (and 21).
    pub const DOUBLE_UNDERLINE: u16 = 1 << 4;
    /// SGR `4:3`.
    pub const CURLY_UNDERLINE: u16 = 1 << 5;
    /// SGR `4:4`.
    pub const DOTTED_UNDERLINE: u16 = 1 << 6;
    /// SGR `4:5`.
    pub const DASHED_UNDERLINE: u16 = 1 << 7;
    /// SGR 7.
    pub const INVERSE: u16 = 1 << 8;
    /// SGR 8.
    pub const HIDDEN: u16 = 1 << 9;
    /// SGR 9.
    pub const STRIKEOUT: u16 = 1 << 10;
    /// Any kind of underline.
    pub const ANY_UNDERLINE: u16 =
        UNDERLINE | DOUBLE_UNDERLINE | CURLY_UNDERLINE | DOTTED_UNDERLINE | DASHED_UNDERLINE;
}

/// A colour as the program chose it; resolved against the palette when drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Colour {
    /// Index 0. The default foreground or background.
    Default,
    /// Index 1. A palette entry (0 to 15: the 16 colours, then the 256-colour cube
    /// and greys).
    Indexed(u8),
    /// Index 2. Truecolor.
    Rgb(u8, u8, u8),
}

/// The attributes of a run of cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Style {
    /// Foreground.
    pub fg: Colour,
    /// Background.
    pub bg: Colour,
    /// The underline's own colour (SGR 58), when set.
    pub underline: Option<Colour>,
    /// [`attr`] bits.
    pub attrs: u16,
}

impl Style {
    /// Default colours, no attributes.
    pub const PLAIN: Self = Self {
        fg: Colour::Default,
        bg: Colour::Default,
        underline: None,
        attrs: 0,
    };

    /// Whether it has these [`attr`] bits (any of them).
    pub fn has(&self, bits: u16) -> bool {
        self.attrs & bits != 0
    }
}

/// How many columns a cell takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Width {
    /// Index 0. One column.
    Single,
    /// Index 1. The first column of a wide character; the next cell is its spacer.
    Wide,
    /// Index 2. The second column of a wide character: no text of its own.
    Spacer,
}

/// One cell: its style and the bytes of its line's text that are its grapheme
/// (a base character and its combining marks; none for a spacer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cell {
    /// Index into [`Capture::styles`].
    pub style: u32,
    /// Bytes of [`Line::text`] this cell holds, after the cells before it.
    pub len: u16,
    /// Columns it takes.
    pub width: Width,
}

/// One row of cells.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Line {
    /// Every cell's grapheme, in order.
    pub text: String,
    /// The cells, from the first column; trailing blanks left out unless it wrapped.
    pub cells: Vec<Cell>,
    /// The program's output continued on the next row (soft wrap).
    pub wrapped: bool,
}

impl Line {
    /// Each cell with its grapheme (empty for a spacer). A cell whose bytes do not
    /// fall within the text (a capture that was not [`validate`](Capture::validate)d)
    /// gets an empty grapheme.
    pub fn graphemes(&self) -> impl Iterator<Item = (&Cell, &str)> {
        let mut at = 0usize;
        self.cells.iter().map(move |cell| {
            let end = at.saturating_add(usize::from(cell.len));
            let text = self.text.get(at..end).unwrap_or_default();
            at = end;
            (cell, text)
        })
    }
}

/// The cursor's shape, as the program set it (DECSCUSR).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CursorShape {
    /// Index 0.
    Block,
    /// Index 1.
    Underline,
    /// Index 2.
    Beam,
    /// Index 3.
    HollowBlock,
}

/// Where the cursor is on the screen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    /// Row on the screen (0 is the top of the screen, not of the scrollback).
    pub row: u16,
    /// Column.
    pub col: u16,
    /// Whether the program shows it (DECTCEM).
    pub visible: bool,
    /// Its shape.
    pub shape: CursorShape,
}

/// A colour the program set: palette index 0 to 255 (OSC 4), 256 the default
/// foreground (OSC 10), 257 the default background (OSC 11), 258 the cursor (OSC 12).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaletteEntry {
    /// The index.
    pub index: u16,
    /// Red, green, blue.
    pub rgb: (u8, u8, u8),
}

/// Palette index of the default foreground.
pub const FOREGROUND: u16 = 256;
/// Palette index of the default background.
pub const BACKGROUND: u16 = 257;
/// Palette index of the cursor colour.
pub const CURSOR: u16 = 258;

/// A screen as cells (module docs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capture {
    /// The screen's rows.
    pub rows: u16,
    /// The screen's columns.
    pub cols: u16,
    /// Lines of scrollback at the start of `lines` (0 without `full`).
    pub history: u32,
    /// Older scrollback lines left out so the capture fits one frame.
    pub omitted: u32,
    /// The scrollback's lines, oldest first, then exactly `rows` screen lines.
    pub lines: Vec<Line>,
    /// The styles cells name.
    pub styles: Vec<Style>,
    /// The cursor.
    pub cursor: Cursor,
    /// The colours the program set; every other one is the theme's.
    pub palette: Vec<PaletteEntry>,
}

/// What makes a capture unusable (a daemon that sent a broken one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaptureError {
    /// Not a capture at all: postcard could not decode it.
    Undecodable(String),
    /// Decoded, but inconsistent: what is wrong.
    Invalid(&'static str),
}

impl std::fmt::Display for CaptureError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Undecodable(e) => write!(f, "the capture cannot be decoded: {e}"),
            Self::Invalid(what) => write!(f, "the capture is inconsistent: {what}"),
        }
    }
}

impl std::error::Error for CaptureError {}

impl Capture {
    /// The capture encoded with postcard (what the CAPTURE frame carries).
    pub fn encode(&self) -> Vec<u8> {
        postcard::to_stdvec(self).unwrap_or_default()
    }

    /// Decodes and [`validate`](Self::validate)s an encoded capture.
    pub fn decode(bytes: &[u8]) -> Result<Self, CaptureError> {
        let capture: Self =
            postcard::from_bytes(bytes).map_err(|e| CaptureError::Undecodable(e.to_string()))?;
        capture.validate()?;
        Ok(capture)
    }

    /// Checks what a renderer relies on: sizes within SPEC §8's limits, `rows`
    /// screen lines after `history`, cells within their text and on character
    /// boundaries, styles that exist, a cursor on the screen.
    pub fn validate(&self) -> Result<(), CaptureError> {
        let bad = |what| Err(CaptureError::Invalid(what));
        if latch_wire::limits::check_size(self.rows, self.cols).is_err() || self.rows == 0 {
            return bad("its size is outside the limits");
        }
        let history = usize::try_from(self.history).unwrap_or(usize::MAX);
        if self.lines.len().checked_sub(history) != Some(usize::from(self.rows)) {
            return bad("its line count is not the scrollback plus the screen");
        }
        if self.cursor.row >= self.rows || self.cursor.col >= self.cols {
            return bad("its cursor is off the screen");
        }
        if self.palette.iter().any(|p| p.index > CURSOR) {
            return bad("a palette index is out of range");
        }
        let styles = self.styles.len();
        for line in &self.lines {
            if line.cells.len() > usize::from(latch_wire::limits::MAX_COLS) {
                return bad("a line is wider than the limits");
            }
            let mut at = 0usize;
            for cell in &line.cells {
                if usize::try_from(cell.style).map_or(true, |s| s >= styles) {
                    return bad("a cell names a style that does not exist");
                }
                at += usize::from(cell.len);
                if !line.text.is_char_boundary(at) {
                    return bad("a cell's text is not on a character boundary");
                }
            }
            if at != line.text.len() {
                return bad("a line's cells do not cover its text");
            }
        }
        Ok(())
    }

    /// The widest line, in cells: at least the screen's columns (a scrollback row
    /// keeps the width it was reflowed to, SPEC §4.4).
    pub fn width(&self) -> usize {
        self.lines
            .iter()
            .map(|l| l.cells.len())
            .max()
            .unwrap_or(0)
            .max(usize::from(self.cols))
    }

    /// The colour the program set at palette `index`, if it set one.
    pub fn program_colour(&self, index: u16) -> Option<(u8, u8, u8)> {
        self.palette
            .iter()
            .find(|p| p.index == index)
            .map(|p| p.rgb)
    }

    /// The style a cell names ([`Style::PLAIN`] for one that does not exist).
    pub fn style(&self, cell: &Cell) -> Style {
        usize::try_from(cell.style)
            .ok()
            .and_then(|i| self.styles.get(i))
            .copied()
            .unwrap_or(Style::PLAIN)
    }
}

impl Emulator {
    /// The cell-grid capture of the screen (with `full`, the scrollback first),
    /// keeping at most `max` encoded bytes: the oldest scrollback lines are left
    /// out first (`omitted` counts them), the screen always stays.
    pub fn capture(&mut self, full: bool, max: usize) -> Capture {
        self.flush();
        let mut cut = Cutter::default();
        let mut lines = std::collections::VecDeque::new();
        let mut size = 0usize;
        let screen_at = self.history_len();
        let mut history = 0usize;
        let mut omitted = 0usize;
        self.each_row(full, |index, row| {
            let line = cut.line(row);
            size += encoded_len(&line);
            lines.push_back(line);
            if index < screen_at {
                history += 1;
            }
            // Only scrollback goes: the screen's rows come last and always stay.
            // The styles stay too (`cut.bytes` counts them).
            while size + cut.bytes > max && history > 0 {
                if let Some(old) = lines.pop_front() {
                    size -= encoded_len(&old);
                }
                history -= 1;
                omitted += 1;
            }
        });
        let grid = self.term.grid();
        let point = grid.cursor.point;
        let rows = u16::try_from(grid.screen_lines()).unwrap_or(u16::MAX);
        let cols = u16::try_from(grid.columns()).unwrap_or(u16::MAX);
        let cursor = Cursor {
            row: u16::try_from(point.line.0).unwrap_or(0).min(rows - 1),
            col: u16::try_from(point.column.0).unwrap_or(0).min(cols - 1),
            visible: self.term.mode().contains(TermMode::SHOW_CURSOR)
                && self.term.cursor_style().shape != AlacrittyShape::Hidden,
            shape: match self.term.cursor_style().shape {
                AlacrittyShape::Underline => CursorShape::Underline,
                AlacrittyShape::Beam => CursorShape::Beam,
                AlacrittyShape::HollowBlock => CursorShape::HollowBlock,
                AlacrittyShape::Block | AlacrittyShape::Hidden => CursorShape::Block,
            },
        };
        let colors = self.term.colors();
        let palette = (0..=CURSOR)
            .filter_map(|index| {
                let rgb = colors[usize::from(index)]?;
                Some(PaletteEntry {
                    index,
                    rgb: (rgb.r, rgb.g, rgb.b),
                })
            })
            .collect();
        Capture {
            rows,
            cols,
            history: u32::try_from(history).unwrap_or(u32::MAX),
            omitted: u32::try_from(omitted).unwrap_or(u32::MAX),
            lines: lines.into(),
            styles: cut.styles,
            cursor,
            palette,
        }
    }
}

/// Turns alacritty's rows into [`Line`]s, numbering the styles it meets.
#[derive(Default)]
struct Cutter {
    styles: Vec<Style>,
    known: HashMap<Style, u32>,
    /// Bytes postcard takes for `styles`.
    bytes: usize,
}

impl Cutter {
    fn style(&mut self, style: Style) -> u32 {
        if let Some(&i) = self.known.get(&style) {
            return i;
        }
        let i = u32::try_from(self.styles.len()).unwrap_or(u32::MAX);
        self.bytes += style_len(&style);
        self.styles.push(style);
        self.known.insert(style, i);
        i
    }

    fn line(&mut self, row: &alacritty_terminal::grid::Row<AlacrittyCell>) -> Line {
        let cols = row.len();
        let wrapped = cols > 0 && row[Column(cols - 1)].flags.contains(Flags::WRAPLINE);
        let end = if wrapped {
            cols
        } else {
            (0..cols)
                .rev()
                .find(|&c| !blank(&row[Column(c)]))
                .map_or(0, |c| c + 1)
        };
        let mut line = Line {
            text: String::new(),
            cells: Vec::with_capacity(end),
            wrapped,
        };
        for c in 0..end {
            let cell = &row[Column(c)];
            let before = line.text.len();
            let width = if cell.flags.contains(Flags::WIDE_CHAR_SPACER) {
                Width::Spacer
            } else {
                push_grapheme(&mut line.text, cell);
                if cell.flags.contains(Flags::WIDE_CHAR) {
                    Width::Wide
                } else {
                    Width::Single
                }
            };
            let style = self.style(style_of(cell));
            let len = u16::try_from(line.text.len() - before).unwrap_or(u16::MAX);
            line.cells.push(Cell { style, len, width });
        }
        line
    }
}

/// A cell's grapheme: its character (a blank for NUL, TAB and the spacer a wide
/// character that did not fit leaves) and at most [`MARKS_MAX`] combining marks.
fn push_grapheme(text: &mut String, cell: &AlacrittyCell) {
    let c = if cell.flags.contains(Flags::LEADING_WIDE_CHAR_SPACER) {
        ' '
    } else {
        match cell.c {
            '\0' | '\t' => ' ',
            c => c,
        }
    };
    text.push(c);
    if let Some(marks) = cell.zerowidth() {
        text.extend(marks.iter().take(MARKS_MAX));
    }
}

/// Whether a cell shows nothing a cleared one would not.
fn blank(cell: &AlacrittyCell) -> bool {
    (matches!(cell.c, ' ' | '\0' | '\t') || cell.flags.contains(Flags::LEADING_WIDE_CHAR_SPACER))
        && matches!(cell.bg, Color::Named(NamedColor::Background))
        && !cell
            .flags
            .intersects(Flags::INVERSE | Flags::ALL_UNDERLINES | Flags::STRIKEOUT)
        && cell.zerowidth().is_none()
}

fn style_of(cell: &AlacrittyCell) -> Style {
    let f = cell.flags;
    let mut attrs = 0;
    for (flag, bit) in [
        (Flags::BOLD, attr::BOLD),
        (Flags::DIM, attr::DIM),
        (Flags::ITALIC, attr::ITALIC),
        (Flags::UNDERLINE, attr::UNDERLINE),
        (Flags::DOUBLE_UNDERLINE, attr::DOUBLE_UNDERLINE),
        (Flags::UNDERCURL, attr::CURLY_UNDERLINE),
        (Flags::DOTTED_UNDERLINE, attr::DOTTED_UNDERLINE),
        (Flags::DASHED_UNDERLINE, attr::DASHED_UNDERLINE),
        (Flags::INVERSE, attr::INVERSE),
        (Flags::HIDDEN, attr::HIDDEN),
        (Flags::STRIKEOUT, attr::STRIKEOUT),
    ] {
        if f.contains(flag) {
            attrs |= bit;
        }
    }
    Style {
        fg: colour(cell.fg),
        bg: colour(cell.bg),
        underline: cell.underline_color().map(colour),
        attrs,
    }
}

/// A colour as the program chose it: the 16 named colours (and their dim
/// variants, which alacritty names after SGR 2) as palette indices, the rest as
/// they are.
fn colour(c: Color) -> Colour {
    match c {
        Color::Spec(rgb) => Colour::Rgb(rgb.r, rgb.g, rgb.b),
        Color::Indexed(i) => Colour::Indexed(i),
        Color::Named(n) => {
            let v = n as usize;
            let dim = NamedColor::DimBlack as usize;
            if v < 16 {
                Colour::Indexed(u8::try_from(v).unwrap_or(0))
            } else if (dim..dim + 8).contains(&v) {
                Colour::Indexed(u8::try_from(v - dim).unwrap_or(0))
            } else {
                Colour::Default
            }
        }
    }
}

/// Bytes postcard takes for a varint of `n`.
fn varint_len(n: usize) -> usize {
    let bits = usize::BITS - n.leading_zeros();
    (bits.max(1) as usize).div_ceil(7)
}

/// Bytes postcard takes for `line` (pinned to postcard by a test).
fn encoded_len(line: &Line) -> usize {
    let cells: usize = line
        .cells
        .iter()
        .map(|c| {
            varint_len(usize::try_from(c.style).unwrap_or(usize::MAX))
                + varint_len(usize::from(c.len))
                + 1
        })
        .sum();
    varint_len(line.text.len()) + line.text.len() + varint_len(line.cells.len()) + cells + 1
}

/// Bytes postcard takes for `style` (pinned to postcard by a test).
fn style_len(style: &Style) -> usize {
    let colour = |c: &Colour| match c {
        Colour::Default => 1,
        Colour::Indexed(_) => 2,
        Colour::Rgb(..) => 4,
    };
    colour(&style.fg)
        + colour(&style.bg)
        + 1
        + style.underline.as_ref().map_or(0, colour)
        + varint_len(usize::from(style.attrs))
}

#[cfg(test)]
#[path = "capture_tests.rs"]
mod tests;
