//! The HTML (SPEC §4.4): one self-contained page, a `<pre>` of lines, a `<span>`
//! with an inline style for each run of cells that does not look like the
//! default. Everything the program printed is escaped, so no text of it can open
//! an element. The browser lays the characters out, so a wide character takes
//! its font's width; every cursor shape is drawn as a block.

use std::fmt::Write as _;

use latch_screen::capture::Capture;

use super::{escape, row_cells, Drawn, Look, Palette, Theme, CELL_H, FONT_PX, FONT_STACK, MARGIN};

/// The page of `capture`.
pub(crate) fn render(capture: &Capture, theme: Theme) -> String {
    let palette = Palette::new(theme, capture);
    let mut out = String::with_capacity(capture.lines.len() * capture.width() * 8 + 1024);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>latch</title>\n</head>\n<body style=\"margin:0;background:{bg}\">\n\
         <pre style=\"margin:0;padding:{MARGIN}px;font-family:{FONT_STACK};\
         font-size:{FONT_PX}px;line-height:{CELL_H}px;color:{fg};background:{bg}\">",
        fg = palette.fg,
        bg = palette.bg,
    );
    let plain = palette.look(&latch_screen::capture::Style::PLAIN);
    for index in 0..capture.lines.len() {
        if index > 0 {
            out.push('\n');
        }
        let cells = row_cells(capture, &palette, index, true);
        line(&mut out, &cells, plain);
    }
    out.push_str("</pre>\n</body>\n</html>\n");
    out
}

/// One line: blanks where no cell is, and a span per run of one look.
fn line(out: &mut String, cells: &[Drawn<'_>], plain: Look) {
    let mut col = 0;
    let mut open: Option<Look> = None;
    for d in cells {
        if d.col > col {
            close(out, &mut open);
            out.extend(std::iter::repeat_n(' ', d.col - col));
        }
        if open != Some(d.look) {
            close(out, &mut open);
            if d.look != plain {
                out.push_str("<span style=\"");
                style(out, &d.look);
                out.push_str("\">");
                open = Some(d.look);
            }
        }
        escape(out, d.text);
        col = d.col + d.width;
    }
    close(out, &mut open);
}

fn close(out: &mut String, open: &mut Option<Look>) {
    if open.take().is_some() {
        out.push_str("</span>");
    }
}

fn style(out: &mut String, look: &Look) {
    let _ = write!(out, "color:{};background:{}", look.fg, look.bg);
    if look.bold {
        out.push_str(";font-weight:bold");
    }
    if look.italic {
        out.push_str(";font-style:italic");
    }
    let decoration = match (look.underline, look.strike) {
        (Some(_), true) => Some("underline line-through"),
        (Some(_), false) => Some("underline"),
        (None, true) => Some("line-through"),
        (None, false) => None,
    };
    if let Some(d) = decoration {
        let _ = write!(out, ";text-decoration:{d}");
    }
    if let Some((colour, double)) = look.underline {
        let _ = write!(out, ";text-decoration-color:{colour}");
        if double {
            out.push_str(";text-decoration-style:double");
        }
    }
}
