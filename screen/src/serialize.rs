//! The serializers: the ATTACH repaint and the text captures, written from
//! alacritty_terminal's grid (it has no serializer of its own).

use std::fmt::Write as _;

use alacritty_terminal::grid::Dimensions;
use alacritty_terminal::index::{Column, Line};
use alacritty_terminal::term::cell::{Cell, Flags};
use alacritty_terminal::term::TermMode;
use alacritty_terminal::vte::ansi::{Color, NamedColor};

use crate::emulator::Emulator;

impl Emulator {
    /// Repaints a terminal exactly: cursor visibility, attribute reset, clear, every
    /// visible cell with its attributes, the cursor position (and a pending wrap),
    /// then the current pen.
    pub fn formatted(&mut self) -> String {
        self.flush();
        let grid = self.term.grid();
        let (rows, cols) = (grid.screen_lines(), grid.columns());
        let mut out = String::with_capacity(rows * (cols + 8) + 64);
        out.push_str(if self.term.mode().contains(TermMode::SHOW_CURSOR) {
            "\x1b[?25h"
        } else {
            "\x1b[?25l"
        });
        out.push_str("\x1b[m\x1b[H\x1b[J");
        let mut pen = Pen::default();
        for (r, line) in (0..rows).zip(0i32..) {
            let row = &grid[Line(line)];
            let end = content_end(row, cols);
            if end == 0 {
                continue;
            }
            let _ = write!(out, "\x1b[{}H", r + 1);
            for c in 0..end {
                write_cell(&mut out, &mut pen, &row[Column(c)]);
            }
        }
        let cursor = &grid.cursor;
        let (line, col) = (cursor.point.line, cursor.point.column);
        let _ = write!(out, "\x1b[{};{}H", line.0.saturating_add(1), col.0 + 1);
        if cursor.input_needs_wrap {
            // Re-print the last cell so the next character wraps, as it would here.
            let cell = &grid[line][col];
            let mut forced = Pen::Unknown;
            write_cell(&mut out, &mut forced, cell);
            if !cell_prints(cell) {
                out.push(' ');
            }
        }
        out.push_str("\x1b[0");
        write_attrs(&mut out, &cursor.template);
        out.push('m');
        out
    }

    /// Text without attributes, one line per row (a wrapped row continues on the
    /// same line), trailing blanks and trailing empty lines dropped. `full` starts
    /// with the scrollback.
    pub fn plain(&mut self, full: bool) -> String {
        self.flush();
        let mut out = String::new();
        self.lines(full, &mut out, |out, row, end, _| {
            for c in 0..end {
                push_char(out, &row[Column(c)]);
            }
        });
        out
    }

    /// Like [`plain`](Self::plain) with SGR attributes (and no other escapes): the
    /// caller wraps it in attribute resets.
    pub fn formatted_lines(&mut self, full: bool) -> String {
        self.flush();
        let mut out = String::new();
        self.lines(full, &mut out, |out, row, end, pen| {
            for c in 0..end {
                write_cell(out, pen, &row[Column(c)]);
            }
        });
        out
    }

    fn lines(
        &self,
        full: bool,
        out: &mut String,
        mut each: impl FnMut(&mut String, &alacritty_terminal::grid::Row<Cell>, usize, &mut Pen),
    ) {
        let grid = self.term.grid();
        let shown = grid.screen_lines() + if full { self.history_len() } else { 0 };
        out.reserve(shown * (grid.columns() / 2));
        let mut pen = Pen::default();
        self.each_row(full, |_, row| {
            // A compact scrollback row keeps the width it had (SPEC §4.4).
            let cols = row.len();
            let wrapped = row[Column(cols - 1)].flags.contains(Flags::WRAPLINE);
            let end = if wrapped {
                cols
            } else {
                content_end(row, cols)
            };
            each(out, row, end, &mut pen);
            if !wrapped {
                // Every line stands alone (grep, head, less -R): attributes end
                // with it.
                if pen != Pen::default() {
                    out.push_str("\x1b[m");
                    pen = Pen::default();
                }
                out.push('\n');
            }
        });
        let trimmed = out.trim_end_matches('\n').len();
        out.truncate(trimmed);
        if pen != Pen::default() {
            out.push_str("\x1b[m");
        }
    }
}

/// The attributes a terminal was last told to use, to skip redundant SGRs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Pen {
    /// After a reset.
    #[default]
    Reset,
    /// These.
    Set(Color, Color, Flags, Option<Color>),
    /// Not known: the next cell writes its SGR.
    Unknown,
}

/// Attribute flags that show on a blank cell.
const VISIBLE_ON_BLANK: Flags = Flags::INVERSE
    .union(Flags::ALL_UNDERLINES)
    .union(Flags::STRIKEOUT);

/// Flags that are layout, not attributes.
pub(crate) const LAYOUT: Flags = Flags::WRAPLINE
    .union(Flags::WIDE_CHAR)
    .union(Flags::WIDE_CHAR_SPACER)
    .union(Flags::LEADING_WIDE_CHAR_SPACER);

fn is_default_bg(c: Color) -> bool {
    matches!(c, Color::Named(NamedColor::Background))
}

fn is_default_fg(c: Color) -> bool {
    matches!(
        c,
        Color::Named(
            NamedColor::Foreground | NamedColor::BrightForeground | NamedColor::DimForeground
        )
    )
}

/// Whether a cell looks like a cleared one (so a cleared screen already shows it).
fn is_blank(cell: &Cell) -> bool {
    (matches!(cell.c, ' ' | '\0' | '\t') || cell.flags.contains(Flags::LEADING_WIDE_CHAR_SPACER))
        && is_default_bg(cell.bg)
        && !cell.flags.intersects(VISIBLE_ON_BLANK)
        && cell.zerowidth().is_none()
}

/// Whether writing this cell prints something (a spacer prints nothing).
fn cell_prints(cell: &Cell) -> bool {
    !cell
        .flags
        .intersects(Flags::WIDE_CHAR_SPACER | Flags::LEADING_WIDE_CHAR_SPACER)
}

/// Columns up to and including the last non-blank cell.
fn content_end(row: &alacritty_terminal::grid::Row<Cell>, cols: usize) -> usize {
    (0..cols)
        .rev()
        .find(|&c| !is_blank(&row[Column(c)]))
        .map_or(0, |c| c + 1)
}

fn push_char(out: &mut String, cell: &Cell) {
    if !cell_prints(cell) {
        return;
    }
    // A tab leaves '\t' in the cell it started from (alacritty keeps it for copying);
    // the screen shows a blank there, so that is what is written.
    out.push(match cell.c {
        '\0' | '\t' => ' ',
        c => c,
    });
    if let Some(zw) = cell.zerowidth() {
        out.extend(zw.iter());
    }
}

fn write_cell(out: &mut String, pen: &mut Pen, cell: &Cell) {
    if !cell_prints(cell) {
        return;
    }
    let want = Pen::Set(
        cell.fg,
        cell.bg,
        cell.flags.difference(LAYOUT),
        cell.underline_color(),
    );
    let plain = Pen::Set(
        Color::Named(NamedColor::Foreground),
        Color::Named(NamedColor::Background),
        Flags::empty(),
        None,
    );
    let same = *pen == want || (*pen == Pen::Reset && want == plain);
    if !same {
        out.push_str("\x1b[0");
        write_attrs(out, cell);
        out.push('m');
        *pen = if want == plain { Pen::Reset } else { want };
    }
    push_char(out, cell);
}

/// `;`-prefixed SGR parameters for a cell's attributes (after a `0`).
fn write_attrs(out: &mut String, cell: &Cell) {
    let f = cell.flags;
    for (flag, code) in [
        (Flags::BOLD, ";1"),
        (Flags::DIM, ";2"),
        (Flags::ITALIC, ";3"),
        (Flags::INVERSE, ";7"),
        (Flags::HIDDEN, ";8"),
        (Flags::STRIKEOUT, ";9"),
    ] {
        if f.contains(flag) {
            out.push_str(code);
        }
    }
    if f.contains(Flags::UNDERLINE) {
        out.push_str(";4");
    } else if f.contains(Flags::DOUBLE_UNDERLINE) {
        out.push_str(";4:2");
    } else if f.contains(Flags::UNDERCURL) {
        out.push_str(";4:3");
    } else if f.contains(Flags::DOTTED_UNDERLINE) {
        out.push_str(";4:4");
    } else if f.contains(Flags::DASHED_UNDERLINE) {
        out.push_str(";4:5");
    }
    if !is_default_fg(cell.fg) {
        write_color(out, cell.fg, 30, 90, 38);
    }
    if !is_default_bg(cell.bg) {
        write_color(out, cell.bg, 40, 100, 48);
    }
    if let Some(c) = cell.underline_color() {
        write_color(out, c, 0, 0, 58);
    }
}

fn write_color(out: &mut String, color: Color, base: u16, bright: u16, extended: u16) {
    match color {
        Color::Spec(rgb) => {
            let _ = write!(out, ";{extended};2;{};{};{}", rgb.r, rgb.g, rgb.b);
        }
        Color::Indexed(i) => {
            let _ = write!(out, ";{extended};5;{i}");
        }
        Color::Named(n) => {
            let Some(i) = named_index(n) else { return };
            if base == 0 {
                let _ = write!(out, ";{extended};5;{i}");
            } else if i < 8 {
                let _ = write!(out, ";{}", base + u16::from(i));
            } else {
                let _ = write!(out, ";{}", bright + u16::from(i - 8));
            }
        }
    }
}

/// The palette index of a named colour (dim variants map to their base colour);
/// `None` for the default colours.
fn named_index(n: NamedColor) -> Option<u8> {
    let v = n as usize;
    let dim = NamedColor::DimBlack as usize;
    if v < 16 {
        u8::try_from(v).ok()
    } else if (dim..dim + 8).contains(&v) {
        u8::try_from(v - dim).ok()
    } else {
        None
    }
}
