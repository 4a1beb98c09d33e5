//! The SVG (SPEC §4.4): the background, one rect per run of cells sharing a
//! background, one `<text>` per attribute span whose characters are placed one
//! per cell (`x` lists; spaces kept, `xml:space="preserve"`), underlines and
//! strike-outs as rects, and the cursor. A span ends after a wide character, and a
//! grapheme that is more than one BMP character (combining marks, an astral
//! character) gets a `<text>` of its own, placed at its cell, so whatever a
//! renderer counts as a character, every cell stays on the grid. No font is
//! embedded: a monospace family stack names the fonts to use.

use std::fmt::Write as _;

use latch_screen::capture::{Capture, CursorShape};

use super::{
    cursor_col, escape, row_cells, size, Drawn, Look, Palette, Rgb, Theme, BASELINE, CELL_H,
    CELL_W, FONT_PX, FONT_STACK, MARGIN,
};

/// The SVG of `capture`.
pub(crate) fn render(capture: &Capture, theme: Theme) -> String {
    let palette = Palette::new(theme, capture);
    let (width, height) = size(capture);
    let mut out = String::with_capacity(capture.lines.len() * capture.width() * 24 + 1024);
    let _ = write!(
        out,
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" xml:space=\"preserve\" width=\"{width}\" \
         height=\"{height}\" viewBox=\"0 0 {width} {height}\" font-family=\"{FONT_STACK}\" \
         font-size=\"{FONT_PX}\">\n\
         <rect width=\"{width}\" height=\"{height}\" fill=\"{}\"/>\n",
        palette.bg
    );
    for index in 0..capture.lines.len() {
        let cells = row_cells(capture, &palette, index, false);
        let top = MARGIN
            + u32::try_from(index)
                .unwrap_or(u32::MAX)
                .saturating_mul(CELL_H);
        backgrounds(&mut out, &cells, &palette, top);
        texts(&mut out, &cells, top);
        decorations(&mut out, &cells, top);
        if let Some(col) = cursor_col(capture, index) {
            cursor(&mut out, capture.cursor.shape, &palette, col, top);
        }
    }
    out.push_str("</svg>\n");
    out
}

fn x_of(col: usize) -> u32 {
    MARGIN
        + u32::try_from(col)
            .unwrap_or(u32::MAX)
            .saturating_mul(CELL_W)
}

fn cols_px(cols: usize) -> u32 {
    u32::try_from(cols)
        .unwrap_or(u32::MAX)
        .saturating_mul(CELL_W)
}

/// Calls `each(first, last, key)` for every run of adjacent cells that `key`
/// maps to the same `Some`.
fn runs<'c, K: PartialEq + Copy>(
    cells: &'c [Drawn<'c>],
    key: impl Fn(&Drawn<'c>) -> Option<K>,
    mut each: impl FnMut(&[Drawn<'c>], K),
) {
    let mut start = 0;
    while start < cells.len() {
        let Some(k) = key(&cells[start]) else {
            start += 1;
            continue;
        };
        let mut end = start + 1;
        while end < cells.len()
            && cells[end].col == cells[end - 1].col + cells[end - 1].width
            && key(&cells[end]) == Some(k)
        {
            end += 1;
        }
        each(&cells[start..end], k);
        start = end;
    }
}

fn span_px(run: &[Drawn<'_>]) -> (u32, u32) {
    let first = run.first().map_or(0, |d| d.col);
    let end = run.last().map_or(first, |d| d.col + d.width);
    (x_of(first), cols_px(end - first))
}

fn backgrounds(out: &mut String, cells: &[Drawn<'_>], palette: &Palette, top: u32) {
    let key = |d: &Drawn<'_>| (d.look.bg != palette.bg).then_some(d.look.bg);
    runs(cells, key, |run, bg| {
        let (x, w) = span_px(run);
        let _ = writeln!(
            out,
            "<rect x=\"{x}\" y=\"{top}\" width=\"{w}\" height=\"{CELL_H}\" fill=\"{bg}\"/>"
        );
    });
}

/// What a text run shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ink {
    fg: Rgb,
    bold: bool,
    italic: bool,
}

fn ink(look: &Look) -> Ink {
    Ink {
        fg: look.fg,
        bold: look.bold,
        italic: look.italic,
    }
}

/// A grapheme a renderer may count as more than one character.
fn single(text: &str) -> bool {
    let mut chars = text.chars();
    matches!((chars.next(), chars.next()), (Some(c), None) if u32::from(c) <= 0xffff)
}

/// A cell that shows no glyph: a blank, or text in its own background.
fn blank(d: &Drawn<'_>) -> bool {
    d.text == " " || d.look.fg == d.look.bg
}

/// The text runs of one row. A run is the adjacent cells of one ink, with the
/// blanks between them as spaces, and ends after a wide character; a grapheme
/// that is not one BMP character is a run of its own. Every character gets its
/// cell's `x`; a renderer that honours only a run's first `x` (librsvg) still
/// starts each run on its cell, and a monospace font's advance keeps the rest
/// there.
fn texts(out: &mut String, cells: &[Drawn<'_>], top: u32) {
    let y = top + BASELINE;
    let mut i = 0;
    while i < cells.len() {
        let first = &cells[i];
        i += 1;
        if blank(first) {
            continue;
        }
        let mut run = vec![first];
        if single(first.text) {
            while let Some(d) = cells.get(i) {
                let prev = run[run.len() - 1];
                let joins = prev.width == 1
                    && d.col == prev.col + 1
                    && (blank(d) || (ink(&d.look) == ink(&first.look) && single(d.text)));
                if !joins {
                    break;
                }
                run.push(d);
                i += 1;
            }
        }
        while run.last().is_some_and(|d| blank(d)) {
            run.pop();
        }
        text_element(out, ink(&first.look), y, &run);
    }
}

fn text_element(out: &mut String, ink: Ink, y: u32, cells: &[&Drawn<'_>]) {
    out.push_str("<text x=\"");
    for (i, d) in cells.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let _ = write!(out, "{}", x_of(d.col));
    }
    let _ = write!(out, "\" y=\"{y}\" fill=\"{}\"", ink.fg);
    if ink.bold {
        out.push_str(" font-weight=\"bold\"");
    }
    if ink.italic {
        out.push_str(" font-style=\"italic\"");
    }
    out.push('>');
    for d in cells {
        if blank(d) {
            out.push(' ');
        } else {
            escape(out, d.text);
        }
    }
    out.push_str("</text>\n");
}

fn decorations(out: &mut String, cells: &[Drawn<'_>], top: u32) {
    runs(
        cells,
        |d| d.look.underline,
        |run, (colour, double)| {
            let (x, w) = span_px(run);
            let y = top + BASELINE + 2;
            line_rect(out, x, y, w, colour);
            if double {
                line_rect(out, x, y + 2, w, colour);
            }
        },
    );
    runs(
        cells,
        |d| d.look.strike.then_some(d.look.fg),
        |run, colour| {
            let (x, w) = span_px(run);
            line_rect(out, x, top + CELL_H / 2, w, colour);
        },
    );
}

fn line_rect(out: &mut String, x: u32, y: u32, w: u32, colour: Rgb) {
    let _ = writeln!(
        out,
        "<rect x=\"{x}\" y=\"{y}\" width=\"{w}\" height=\"1\" fill=\"{colour}\"/>"
    );
}

/// The cursor when it is not a block (a block is drawn into its cell's colours).
fn cursor(out: &mut String, shape: CursorShape, palette: &Palette, col: usize, top: u32) {
    let (x, c) = (x_of(col), palette.cursor);
    let _ = match shape {
        CursorShape::Block => Ok(()),
        CursorShape::Beam => writeln!(
            out,
            "<rect x=\"{x}\" y=\"{top}\" width=\"2\" height=\"{CELL_H}\" fill=\"{c}\"/>"
        ),
        CursorShape::Underline => writeln!(
            out,
            "<rect x=\"{x}\" y=\"{}\" width=\"{CELL_W}\" height=\"2\" fill=\"{c}\"/>",
            top + CELL_H - 2
        ),
        CursorShape::HollowBlock => writeln!(
            out,
            "<rect x=\"{}.5\" y=\"{}.5\" width=\"{}\" height=\"{}\" fill=\"none\" \
             stroke=\"{c}\"/>",
            x,
            top,
            CELL_W - 1,
            CELL_H - 1
        ),
    };
}
