use latch_screen::capture::{
    Cell, Cursor, CursorShape, Line, PaletteEntry, Style, Width, BACKGROUND, CAPTURE_MAX,
};

use super::*;

fn capture_of(rows: u16, cols: u16, bytes: &[u8]) -> Capture {
    let mut emu = latch_screen::Emulator::new(rows, cols, 100);
    emu.process(bytes);
    emu.capture(false, CAPTURE_MAX)
}

/// A one-line capture holding `text` in one cell per character, as a broken or
/// hostile daemon could send (the emulator itself never stores controls).
fn raw_capture(text: &str) -> Capture {
    let cells = text
        .chars()
        .map(|c| Cell {
            style: 0,
            len: u16::try_from(c.len_utf8()).unwrap(),
            width: Width::Single,
        })
        .collect();
    Capture {
        rows: 1,
        cols: 1000,
        history: 0,
        omitted: 0,
        lines: vec![Line {
            text: text.to_owned(),
            cells,
            wrapped: false,
        }],
        styles: vec![Style::PLAIN],
        cursor: Cursor {
            row: 0,
            col: 0,
            visible: true,
            shape: CursorShape::Block,
        },
        palette: Vec::new(),
    }
}

#[test]
fn escape_covers_markup_and_what_xml_forbids() {
    let mut out = String::new();
    escape(
        &mut out,
        "<a href='x'>&\"]]>\u{0}\u{1b}\u{7f}\u{85}\u{fffe}\u{1ffff}é中",
    );
    assert_eq!(
        out,
        "&lt;a href=&#39;x&#39;&gt;&amp;&quot;]]&gt;\u{2400}\u{241b}\u{2421}\u{fffd}\u{fffd}\u{fffd}é中"
    );
}

#[test]
fn palette_program_colours_win_over_the_theme() {
    let plain = capture_of(2, 10, b"x");
    let dark = Palette::new(Theme::Dark, &plain);
    assert_eq!((dark.fg, dark.bg), (Rgb(0xe5, 0xe5, 0xe5), Rgb(0, 0, 0)));
    assert_eq!(dark.colour(Colour::Indexed(1), dark.fg), Rgb(0xcd, 0, 0));
    assert_eq!(dark.colour(Colour::Indexed(196), dark.fg), Rgb(0xff, 0, 0));
    assert_eq!(dark.colour(Colour::Indexed(232), dark.fg), Rgb(8, 8, 8));
    let light = Palette::new(Theme::Light, &plain);
    assert_eq!(light.bg, Rgb(0xff, 0xff, 0xff));
    let set = capture_of(2, 10, b"\x1b]4;1;rgb:01/02/03\x07\x1b]11;rgb:10/20/30\x07x");
    for theme in [Theme::Dark, Theme::Light] {
        let p = Palette::new(theme, &set);
        assert_eq!(p.colour(Colour::Indexed(1), p.fg), Rgb(1, 2, 3));
        assert_eq!(p.bg, Rgb(0x10, 0x20, 0x30));
    }
    assert_eq!(set.palette[1].index, BACKGROUND);
}

#[test]
fn looks_resolve_attributes() {
    let c = capture_of(2, 10, b"x");
    let p = Palette::new(Theme::Dark, &c);
    let style = |attrs| Style {
        fg: Colour::Indexed(2),
        bg: Colour::Indexed(4),
        underline: None,
        attrs,
    };
    let l = p.look(&style(attr::INVERSE | attr::BOLD));
    assert_eq!((l.fg, l.bg), (Rgb(0, 0, 0xee), Rgb(0, 0xcd, 0)));
    assert!(l.bold);
    let l = p.look(&style(attr::HIDDEN));
    assert_eq!(l.fg, l.bg);
    let l = p.look(&style(attr::DIM));
    assert_eq!(l.fg, Rgb(0, 0x88, 0x4f));
    let l = p.look(&style(attr::DOUBLE_UNDERLINE | attr::STRIKEOUT));
    assert_eq!(l.underline, Some((Rgb(0, 0xcd, 0), true)));
    assert!(l.strike);
}

#[test]
fn row_cells_fold_spacers_and_draw_the_cursor() {
    let c = capture_of(3, 20, "\u{4e2d}x\r\nab".as_bytes());
    let p = Palette::new(Theme::Dark, &c);
    let first = row_cells(&c, &p, 0, false);
    assert_eq!(first.len(), 2);
    assert_eq!((first[0].col, first[0].width), (0, 2));
    assert_eq!(first[1].col, 2);
    // The cursor sits after "ab", past the line's cells: a blank cell of its own.
    let second = row_cells(&c, &p, 1, false);
    let last = second.last().unwrap();
    assert_eq!((last.col, last.text), (2, " "));
    assert_eq!(last.look.bg, p.cursor);
    // A beam is drawn by the SVG as a bar, into the cell by the HTML.
    let beam = capture_of(3, 20, b"ab\x1b[5 q");
    assert_eq!(row_cells(&beam, &p, 0, false).len(), 2);
    assert_eq!(row_cells(&beam, &p, 0, true).len(), 3);
    assert!(svg::render(&beam, Theme::Dark).contains("width=\"2\" height=\"18\""));
    // Hidden: nothing extra.
    let hidden = capture_of(3, 20, b"ab\x1b[?25l");
    assert_eq!(row_cells(&hidden, &p, 0, false).len(), 2);
}

#[test]
fn svg_places_every_cell_on_the_grid() {
    let c = capture_of(
        3,
        20,
        "\x1b[41m \x1b[m\x1b[1;32mGO\x1b[m \u{4e2d}Z e\u{301}".as_bytes(),
    );
    let svg = svg::render(&c, Theme::Dark);
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let texts: Vec<_> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .collect();
    let find = |t: &str| {
        texts
            .iter()
            .find(|n| n.text() == Some(t))
            .unwrap_or_else(|| panic!("no text {t:?} in {svg}"))
    };
    let go = find("GO");
    assert_eq!(go.attribute("x"), Some("17 26"));
    assert_eq!(go.attribute("fill"), Some("#00cd00"));
    assert_eq!(go.attribute("font-weight"), Some("bold"));
    // The wide character takes columns 4 and 5 and ends its run; Z is at column 6.
    assert_eq!(find("\u{4e2d}").attribute("x"), Some("44"));
    assert_eq!(find("Z").attribute("x"), Some("62"));
    // A grapheme with a mark has its own element at its cell.
    assert_eq!(find("e\u{301}").attribute("x"), Some("80"));
    let red = doc
        .descendants()
        .find(|n| n.attribute("fill") == Some("#cd0000"))
        .unwrap();
    assert_eq!(red.attribute("x"), Some("8"));
    assert_eq!(red.attribute("width"), Some("9"));
}

#[test]
fn hostile_cells_stay_text() {
    let mut hostile =
        String::from("</text><script>alert(1)</script>&]]><!--\u{0}\u{8}\u{1b}\u{7f}");
    hostile.push_str(&"w".repeat(1000 - hostile.chars().count()));
    let mut c = raw_capture(&hostile);
    c.validate().unwrap();
    // (A cursor on the first cell would split the first `<` into a span of its own.)
    c.cursor.visible = false;
    let svg = svg::render(&c, Theme::Dark);
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let names: std::collections::BTreeSet<_> = doc
        .descendants()
        .filter(|n| n.is_element())
        .map(|n| n.tag_name().name().to_owned())
        .collect();
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        ["rect", "svg", "text"]
    );
    let shown: String = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .collect();
    assert!(shown.contains("</text><script>"), "{shown}");
    assert!(shown.contains("\u{2400}\u{2408}\u{241b}\u{2421}"));
    let html = html::render(&c, Theme::Light);
    assert!(!html.contains("<script"));
    assert!(html.contains("&lt;/text&gt;&lt;script&gt;"));
    assert!(!html.chars().any(|c| c.is_control() && c != '\n'));
}

#[test]
fn html_is_one_pre_of_spans() {
    let c = capture_of(2, 20, b"\x1b[1;32mGO\x1b[m ok\x1b[4mu\x1b[m");
    let html = html::render(&c, Theme::Dark);
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(
        html.contains(
            "<span style=\"color:#00cd00;background:#000000;font-weight:bold\">GO</span> ok"
        ),
        "{html}"
    );
    assert!(html.contains("text-decoration:underline"));
}

#[test]
fn png_size_is_capped() {
    let c = capture_of(1000, 500, b"x");
    let err = png::render(&c, Theme::Dark, false).unwrap_err();
    assert!(matches!(
        err,
        PictureError::TooLarge {
            width: 4516,
            height: 18016,
            full: false
        }
    ));
}

#[test]
fn palette_entries_out_of_order_resolve() {
    let mut c = raw_capture("x");
    c.palette = vec![
        PaletteEntry {
            index: 257,
            rgb: (9, 9, 9),
        },
        PaletteEntry {
            index: 0,
            rgb: (1, 1, 1),
        },
    ];
    let p = Palette::new(Theme::Dark, &c);
    assert_eq!(p.bg, Rgb(9, 9, 9));
    assert_eq!(p.colour(Colour::Indexed(0), p.fg), Rgb(1, 1, 1));
}
