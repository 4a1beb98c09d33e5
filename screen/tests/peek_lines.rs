//! SPEC §4.4: PEEK (line-based ANSI) and PEEK plain both give one line per line of
//! output: a row the program's output soft-wrapped continues on the same line, as
//! `tmux capture-pane -p -J` (with `-e` for the ANSI one). A hard line break (CR LF)
//! ends a line even when it falls on the last column.

use latch_screen::{peek_snapshot, Emulator};

fn peek(term: &mut Emulator, plain: bool) -> String {
    String::from_utf8(peek_snapshot(term, latch_screen::View::new(plain, false)).to_vec()).unwrap()
}

/// The lines of a capture with its SGR sequences removed.
fn text_lines(s: &str) -> Vec<String> {
    let mut out = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            // CSI ... final byte
            if chars.next_if_eq(&'[').is_some() {
                for f in chars.by_ref() {
                    if ('@'..='~').contains(&f) {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out.lines().map(str::to_owned).collect()
}

#[test]
fn ansi_and_plain_peek_join_soft_wrapped_rows() {
    let mut term = Emulator::new(6, 20, 100);
    let long = "x".repeat(45);
    term.process(format!("\x1b[31m{long}\x1b[m\r\nnext\r\n{}\r\nend", "y".repeat(20)).as_bytes());
    for plain in [true, false] {
        let lines = text_lines(&peek(&mut term, plain));
        assert_eq!(
            lines,
            vec![long.clone(), "next".into(), "y".repeat(20), "end".into()],
            "plain={plain}"
        );
    }
    let ansi = peek(&mut term, false);
    assert!(
        ansi.contains("31m"),
        "the ANSI capture keeps colour: {ansi:?}"
    );
}
