use super::*;

fn screen(rows: u16, cols: u16, bytes: &[u8]) -> Capture {
    let mut emu = Emulator::new(rows, cols, 100);
    emu.process(bytes);
    emu.capture(false, CAPTURE_MAX)
}

/// Each cell of `line` as (grapheme, style, width).
fn cells(c: &Capture, line: usize) -> Vec<(String, Style, Width)> {
    c.lines[line]
        .graphemes()
        .map(|(cell, text)| (text.to_owned(), c.style(cell), cell.width))
        .collect()
}

#[test]
fn colours_and_attributes() {
    let c = screen(
        3,
        40,
        b"\x1b[41m \x1b[m \x1b[1;32mGREEN\x1b[m \x1b[38;5;200mx\x1b[38;2;1;2;3my\x1b[m",
    );
    let row = cells(&c, 0);
    assert_eq!(row[0].0, " ");
    assert_eq!(row[0].1.bg, Colour::Indexed(1));
    assert_eq!(row[1].1, Style::PLAIN);
    let green = &row[2];
    assert_eq!(green.0, "G");
    assert_eq!(green.1.fg, Colour::Indexed(2));
    assert!(green.1.has(attr::BOLD) && !green.1.has(attr::ITALIC));
    assert_eq!(row[8].1.fg, Colour::Indexed(200));
    assert_eq!(row[9].1.fg, Colour::Rgb(1, 2, 3));
    assert_eq!(row.len(), 10, "trailing blanks are left out");
    // One style per distinct look.
    assert_eq!(c.styles.len(), 5);
    c.validate().unwrap();
}

#[test]
fn every_attribute() {
    let c = screen(
        2,
        40,
        b"\x1b[2ma\x1b[0;3mb\x1b[0;4mc\x1b[0;4:2md\x1b[0;4:3me\x1b[0;7mf\x1b[0;8mg\x1b[0;9mh\x1b[0;4;58;5;9mi\x1b[m",
    );
    let row = cells(&c, 0);
    let want = [
        attr::DIM,
        attr::ITALIC,
        attr::UNDERLINE,
        attr::DOUBLE_UNDERLINE,
        attr::CURLY_UNDERLINE,
        attr::INVERSE,
        attr::HIDDEN,
        attr::STRIKEOUT,
        attr::UNDERLINE,
    ];
    for (i, bits) in want.iter().enumerate() {
        assert_eq!(row[i].1.attrs, *bits, "cell {i}");
    }
    assert_eq!(row[8].1.underline, Some(Colour::Indexed(9)));
}

#[test]
fn a_blank_with_a_background_is_kept() {
    let c = screen(2, 20, b"a\x1b[44m   \x1b[m");
    let row = cells(&c, 0);
    assert_eq!(row.len(), 4);
    assert_eq!(row[3].1.bg, Colour::Indexed(4));
}

#[test]
fn wide_and_combining_characters() {
    let c = screen(2, 20, "\u{4e2d}x e\u{301}\u{302}".as_bytes());
    let row = cells(&c, 0);
    assert_eq!(row[0].0, "\u{4e2d}");
    assert_eq!(row[0].2, Width::Wide);
    assert_eq!(row[1].0, "");
    assert_eq!(row[1].2, Width::Spacer);
    assert_eq!(row[2].0, "x");
    assert_eq!(row[4].0, "e\u{301}\u{302}", "marks stay with their base");
    assert_eq!(row.len(), 5);
}

#[test]
fn marks_on_one_cell_are_bounded() {
    let mut text = String::from("a");
    text.extend(std::iter::repeat_n('\u{301}', 1000));
    let c = screen(2, 20, text.as_bytes());
    let row = cells(&c, 0);
    assert_eq!(row[0].0.chars().count(), 1 + MARKS_MAX);
}

#[test]
fn a_wide_character_that_does_not_fit_wraps() {
    let c = screen(3, 5, "abcd\u{4e2d}".as_bytes());
    assert!(c.lines[0].wrapped);
    let first = cells(&c, 0);
    assert_eq!(first.len(), 5);
    assert_eq!(first[4].0, " ", "the leading spacer is a blank");
    assert_eq!(cells(&c, 1)[0].2, Width::Wide);
}

#[test]
fn cursor_position_visibility_and_shape() {
    let c = screen(5, 20, b"ab\r\ncd");
    assert_eq!((c.cursor.row, c.cursor.col), (1, 2));
    assert!(c.cursor.visible);
    assert_eq!(c.cursor.shape, CursorShape::Block);
    let c = screen(5, 20, b"\x1b[?25l\x1b[3;4H");
    assert_eq!((c.cursor.row, c.cursor.col), (2, 3));
    assert!(!c.cursor.visible);
    let c = screen(5, 20, b"\x1b[5 q");
    assert_eq!(c.cursor.shape, CursorShape::Beam);
    let c = screen(5, 20, b"\x1b[4 q");
    assert_eq!(c.cursor.shape, CursorShape::Underline);
}

#[test]
fn the_programs_palette() {
    let c = screen(2, 20, b"x");
    assert!(c.palette.is_empty(), "{:?}", c.palette);
    let c = screen(
        2,
        20,
        b"\x1b]4;1;rgb:12/34/56\x07\x1b]10;rgb:aa/bb/cc\x1b\\\x1b]11;#010203\x07x",
    );
    assert_eq!(c.program_colour(1), Some((0x12, 0x34, 0x56)));
    assert_eq!(c.program_colour(FOREGROUND), Some((0xaa, 0xbb, 0xcc)));
    assert_eq!(c.program_colour(BACKGROUND), Some((1, 2, 3)));
    assert_eq!(c.program_colour(2), None);
}

#[test]
fn full_puts_the_scrollback_first() {
    let mut emu = Emulator::new(3, 20, 100);
    for i in 0..10 {
        emu.process(format!("line {i}\r\n").as_bytes());
    }
    let visible = emu.capture(false, CAPTURE_MAX);
    assert_eq!((visible.history, visible.lines.len()), (0, 3));
    assert_eq!(visible.lines[0].text, "line 8");
    assert_eq!(visible.lines[2].text, "");
    let full = emu.capture(true, CAPTURE_MAX);
    assert_eq!(full.history, 8);
    assert_eq!(full.lines.len(), 11);
    assert_eq!(full.lines[0].text, "line 0");
    assert_eq!(full.lines[8].text, "line 8");
    assert_eq!(full.omitted, 0);
    full.validate().unwrap();
}

#[test]
fn full_keeps_the_newest_scrollback_that_fits() {
    let mut emu = Emulator::new(3, 20, 1000);
    for i in 0..500 {
        emu.process(format!("line {i:03}\r\n").as_bytes());
    }
    let whole = emu.capture(true, CAPTURE_MAX);
    let cut = emu.capture(true, 2_000);
    assert!(cut.omitted > 0);
    assert_eq!(cut.history + cut.omitted, whole.history);
    assert!(cut.encode().len() <= 2_000 + 4096, "{}", cut.encode().len());
    assert_eq!(cut.lines.last(), whole.lines.last());
    // The screen always stays, however small the bound.
    let tiny = emu.capture(true, 1);
    assert_eq!((tiny.history, tiny.lines.len()), (0, 3));
    tiny.validate().unwrap();
}

#[test]
fn encoded_len_is_postcards() {
    let c = screen(
        4,
        30,
        "\x1b[41m \x1b[m\u{4e2d}e\u{301} plain \x1b[38;2;1;2;3mtrue\r\n\r\nx".as_bytes(),
    );
    let mut many = Line {
        text: "a".repeat(300),
        cells: Vec::new(),
        wrapped: true,
    };
    many.cells = (0..300)
        .map(|i| Cell {
            style: i * 1000,
            len: 1,
            width: Width::Single,
        })
        .collect();
    for line in c.lines.iter().chain([&many]) {
        assert_eq!(encoded_len(line), postcard::to_stdvec(line).unwrap().len());
    }
    for style in c.styles.iter().chain(&[Style {
        fg: Colour::Rgb(1, 2, 3),
        bg: Colour::Indexed(200),
        underline: Some(Colour::Rgb(4, 5, 6)),
        attrs: attr::STRIKEOUT | attr::BOLD,
    }]) {
        assert_eq!(style_len(style), postcard::to_stdvec(style).unwrap().len());
    }
}

#[test]
fn round_trip_and_validation() {
    let c = screen(3, 20, "a\u{4e2d}\x1b[1mb\x1b]4;3;#ffffff\x07".as_bytes());
    let bytes = c.encode();
    assert_eq!(Capture::decode(&bytes).unwrap(), c);
    assert!(matches!(
        Capture::decode(b"\xff\xff\xff"),
        Err(CaptureError::Undecodable(_))
    ));
    let broken = |f: &dyn Fn(&mut Capture)| {
        let mut b = c.clone();
        f(&mut b);
        Capture::decode(&b.encode())
    };
    for f in [
        &(|b: &mut Capture| b.lines[0].cells[0].style = 99) as &dyn Fn(&mut Capture),
        &|b| b.lines[0].cells[1].len = 1,
        &|b| b.lines[0].cells[0].len = 7,
        &|b| b.cursor.row = 3,
        &|b| b.cursor.col = 20,
        &|b| b.history = 1,
        &|b| {
            b.lines.pop();
        },
        &|b| b.rows = 0,
        &|b| b.cols = 1001,
        &|b| b.palette[0].index = 259,
    ] {
        assert!(
            matches!(broken(f), Err(CaptureError::Invalid(_))),
            "{:?}",
            broken(f)
        );
    }
}

#[test]
fn graphemes_of_a_broken_line_are_empty_not_a_panic() {
    let line = Line {
        text: "ab".into(),
        cells: vec![
            Cell {
                style: 0,
                len: 5,
                width: Width::Single,
            };
            3
        ],
        wrapped: false,
    };
    let got: Vec<&str> = line.graphemes().map(|(_, t)| t).collect();
    assert_eq!(got, ["", "", ""]);
}
