//! Emulator tests: fast-forward against full parsing, repaint and captures.

use alacritty_terminal::index::{Column, Line};
use alacritty_terminal::term::TermMode;

use crate::serialize::LAYOUT;
use crate::{Emulator, TermEvent};

fn emu(rows: u16, cols: u16, input: &str) -> Emulator {
    let mut e = Emulator::new(rows, cols, 100);
    e.process(input.as_bytes());
    e
}

/// Parses everything, never fast-forwarding: the reference.
fn eager(rows: u16, cols: u16, scrollback: usize, input: &[u8]) -> Emulator {
    let mut e = Emulator::new(rows, cols, scrollback);
    e.parser.advance(&mut e.term, input);
    e
}

/// proptest's deterministic generator, seeded per case.
struct Rng(proptest::test_runner::TestRng);
impl Rng {
    fn new(seed: u64) -> Self {
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&seed.to_le_bytes());
        Self(proptest::test_runner::TestRng::from_seed(
            proptest::test_runner::RngAlgorithm::XorShift,
            &bytes,
        ))
    }
    fn next(&mut self) -> u64 {
        use proptest::prelude::Rng as _;
        self.0.next_u64()
    }
    fn below(&mut self, n: u64) -> usize {
        usize::try_from(self.next() % n).unwrap()
    }
}

/// Pushes `input` in chunks of random sizes and checks every view against full
/// parsing; returns the bytes skipped.
fn same_as_eager(rows: u16, cols: u16, scrollback: usize, input: &[u8], seed: u64) -> u64 {
    let mut rng = Rng::new(seed);
    let mut lazy = Emulator::new(rows, cols, scrollback);
    let mut rest = input;
    while !rest.is_empty() {
        let n = (1 + rng.below(20_000)).min(rest.len());
        let (chunk, tail) = rest.split_at(n);
        lazy.push(chunk);
        rest = tail;
    }
    let mut full = eager(rows, cols, scrollback, input);
    let skipped = lazy.skipped();
    assert_eq!(lazy.plain(true), full.plain(true), "text and scrollback");
    assert_eq!(lazy.formatted(), full.formatted(), "cells, cursor and pen");
    assert_eq!(lazy.formatted_lines(true), full.formatted_lines(true));
    assert_eq!(lazy.cursor(), full.cursor());
    assert_eq!(lazy.history(), full.history());
    skipped
}

fn colourful_lines(n: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    for i in 0..n {
        match rng.below(4) {
            0 => out.extend_from_slice(b"\x1b[1;32mok\x1b[m "),
            1 => out.extend_from_slice(format!("\x1b[38;5;{}m", rng.below(256)).as_bytes()),
            2 => out.extend_from_slice(b"\x1b[0;4m\xc3\xa9t\xc3\xa9 "),
            _ => {}
        }
        out.extend_from_slice(format!("line {i} {}", "x".repeat(rng.below(100))).as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

#[test]
fn fast_forward_gives_the_same_terminal() {
    // 40k lines with colours: most of it is skipped.
    let input = colourful_lines(40_000, 1);
    let skipped = same_as_eager(24, 80, 1000, &input, 7);
    assert!(skipped > input.len() as u64 / 2, "skipped only {skipped}");
    // The pen set by a skipped SGR still colours what follows.
    let mut input = colourful_lines(40_000, 2);
    input.extend_from_slice(b"\x1b[1;31mstill red");
    same_as_eager(24, 80, 1000, &input, 8);
}

#[test]
fn no_fast_forward_under_a_scroll_region_or_inside_a_sequence() {
    let mut input = b"\x1b[5;10r".to_vec();
    input.extend(colourful_lines(40_000, 3));
    assert_eq!(same_as_eager(24, 80, 1000, &input, 9), 0);
    // The region reset: skipping resumes.
    input.extend_from_slice(b"\x1b[r");
    input.extend(colourful_lines(40_000, 4));
    assert!(same_as_eager(24, 80, 1000, &input, 10) > 0);
    // An OSC string left open swallows everything after it.
    let mut input = b"\x1b]0;title ".to_vec();
    input.extend(colourful_lines(40_000, 5));
    same_as_eager(24, 80, 1000, &input, 11);
}

#[test]
fn mixed_random_streams_match_full_parsing() {
    let pieces: [&[u8]; 16] = [
        b"plain text ",
        b"\r\n",
        b"\n",
        b"\t",
        b"\x1b[1m",
        b"\x1b[m",
        b"\x1b[38;2;1;2;3m",
        b"\x1b[2K",
        b"\x1b[H",
        b"\x1b[3;7r",
        b"\x1b[r",
        b"\x1b]2;t\x07",
        b"\x07\x08",
        b"\xff\xc2\x85",
        b"\xe4\xb8\xad",
        b"\x1b[?1049h",
    ];
    let mut skipped = 0;
    for seed in 1..6u64 {
        let mut rng = Rng::new(seed * 7919);
        let mut input = Vec::new();
        while input.len() < 3 << 20 {
            // Mostly lines, so that fast-forward gets its chance (more often with
            // each seed).
            if rng.below(4 + (seed - 1) * 300) == 0 {
                input.extend_from_slice(pieces[rng.below(16)]);
            } else {
                input.extend_from_slice(b"some words on a line\r\n");
            }
        }
        skipped += same_as_eager(10, 40, 200, &input, seed);
    }
    assert!(skipped > 0);
}

#[test]
fn repaint_reproduces_cells_attributes_and_cursor() {
    let input = "plain \x1b[1;31mbold red\x1b[m \x1b[38;5;200;48;2;1;2;3mx\x1b[m\r\n\
                 \x1b[4;7mul-inv\x1b[m wide:\u{4e2d}\u{6587} e\u{301}\r\n   \x1b[44m  \x1b[m\x1b[2;5H\x1b[3m";
    let mut a = emu(5, 30, input);
    let snap = a.formatted();
    let mut b = emu(5, 30, &snap);
    for line in 0..5 {
        for col in 0..30 {
            let (x, y) = (
                &a.term.grid()[Line(line)][Column(col)],
                &b.term.grid()[Line(line)][Column(col)],
            );
            assert_eq!(
                (x.c, x.fg, x.bg, x.flags.difference(LAYOUT), x.zerowidth()),
                (y.c, y.fg, y.bg, y.flags.difference(LAYOUT), y.zerowidth()),
                "cell {line},{col} of {snap:?}"
            );
        }
    }
    assert_eq!(a.cursor(), (1, 4));
    assert_eq!(b.cursor(), a.cursor());
    assert_eq!(
        b.term.grid().cursor.template.flags,
        a.term.grid().cursor.template.flags,
        "the pen is restored"
    );
    assert!(snap.starts_with("\x1b[?25h\x1b[m\x1b[H\x1b[J"), "{snap:?}");
}

#[test]
fn pending_wrap_and_hidden_cursor_survive() {
    let mut a = emu(3, 5, "\x1b[?25labcde");
    let mut b = emu(3, 5, &a.formatted());
    assert_eq!(b.cursor(), (0, 4));
    assert!(!b.term.mode().contains(TermMode::SHOW_CURSOR));
    b.process(b"f");
    assert_eq!(b.plain(false), "abcdef");
}

#[test]
fn plain_joins_wrapped_rows_and_trims() {
    let mut e = emu(4, 5, "abcdefg\r\nx  \r\n");
    assert_eq!(e.plain(false), "abcdefg\nx");
    let mut e = emu(4, 5, "");
    assert_eq!(e.plain(false), "");
}

#[test]
fn full_has_scrollback_then_screen_and_is_capped() {
    let mut e = Emulator::new(2, 10, 5);
    for i in 0..50 {
        e.process(format!("{i}\r\n").as_bytes());
    }
    assert_eq!(e.history(), 5);
    let full = e.plain(true);
    assert_eq!(full, "44\n45\n46\n47\n48\n49");
    let ansi = emu(3, 10, "\x1b[1ma\x1b[m\r\nb").formatted_lines(true);
    assert_eq!(ansi, "\x1b[0;1ma\x1b[m\nb");
}

#[test]
fn resize_keeps_text_and_clamps_cursor() {
    let mut e = emu(4, 20, "hello\r\nworld");
    e.resize(2, 10);
    assert_eq!(e.plain(false), "hello\nworld");
    let (r, c) = e.cursor();
    assert!(r < 2 && c < 10, "{r},{c}");
    e.resize(0, 0);
    assert_eq!(e.cursor().0, 0);
}

#[test]
fn a_tab_is_the_blanks_it_shows() {
    // 'a', TAB to column 8, 'b': the screen shows seven blanks, never the TAB too.
    let mut e = emu(4, 20, "a\tb\r\n\tc\r\nx\t\r\n");
    assert_eq!(e.plain(false), "a       b\n        c\nx");
    assert!(!e.formatted_lines(true).contains('\t'));
    // The repaint must not send a TAB either: it would move the cursor and shift
    // every cell after it.
    let repaint = e.formatted();
    assert!(!repaint.contains('\t'), "{repaint:?}");
    let mut copy = emu(4, 20, &repaint);
    assert_eq!(copy.plain(false), e.plain(false));
}

#[test]
fn queries_are_answered_in_order_only_while_answering() {
    let mut e = emu(5, 20, "ab");
    e.process(b"\x1b[6n\x1b[c\x1b[>c\x1b[>q\x1b[5n\x1b[?2004$p\x1b]11;?\x07\x1b]4;1;?\x1b\\");
    let want = format!(
        "\x1b[1;3R\x1b[?6c{}{}\x1b[0n\x1b[?2004;2$y\x1b]11;rgb:0000/0000/0000\x07\x1b]4;1;rgb:cdcd/0000/0000\x1b\\",
        crate::DA2_ANSWER,
        crate::xtversion_answer()
    );
    assert_eq!(String::from_utf8(e.take_replies()).unwrap(), want);
    // Queued while answering, applied after answering stops: still answered.
    e.push(b"\x1b[6n");
    e.set_answering(false);
    assert_eq!(e.take_replies(), b"\x1b[1;3R");
    e.process(b"\x1b[6n\x1b[c\x1b[>q");
    assert!(e.take_replies().is_empty());
}

#[test]
fn answers_are_taken_one_by_one() {
    let mut e = emu(5, 20, "ab");
    e.process(b"\x1b[6n\x1b[c\x1b[>q\x1b]11;?\x07");
    let got = e.take_answers();
    let want: Vec<Vec<u8>> = vec![
        b"\x1b[1;3R".to_vec(),
        b"\x1b[?6c".to_vec(),
        crate::xtversion_answer().into_bytes(),
        b"\x1b]11;rgb:0000/0000/0000\x07".to_vec(),
    ];
    assert_eq!(got, want);
    assert!(e.take_answers().is_empty() && e.take_replies().is_empty());
}

#[test]
fn a_huge_title_is_capped_and_the_terminal_keeps_working() {
    let mut e = Emulator::new(5, 20, 100);
    e.process(b"\x1b]2;");
    let chunk = "\u{e9}".repeat(32 * 1024);
    for _ in 0..100 {
        e.push(chunk.as_bytes());
    }
    e.process(b"\x07after");
    let titles: Vec<String> = e
        .take_events()
        .into_iter()
        .filter_map(|ev| match ev {
            TermEvent::Title(t) => Some(t),
            _ => None,
        })
        .collect();
    assert_eq!(titles.len(), 1);
    let t = &titles[0];
    assert!(t.len() <= crate::TITLE_MAX && t.len() >= crate::TITLE_MAX - 2);
    assert!(t.chars().all(|c| c == '\u{e9}'));
    assert!(crate::capture(&mut e, crate::View::PLAIN, 1 << 20).contains("after"));
}

#[test]
fn terminal_events_are_collected() {
    let mut e = emu(5, 40, "");
    e.process(
        b"\x07\x1b]2;build\x07\x1b]9;done\x07\x1b]777;notify;T;B\x1b\\\x1b[?25l\x1b]9;4;1;50\x07",
    );
    assert_eq!(
        e.take_events(),
        vec![
            TermEvent::Bell,
            TermEvent::Title("build".into()),
            TermEvent::Notification {
                osc: 9,
                title: None,
                body: "done".into()
            },
            TermEvent::Notification {
                osc: 777,
                title: Some("T".into()),
                body: "B".into()
            },
            TermEvent::CursorVisible(false),
        ]
    );
    assert!(e.take_events().is_empty());
}

#[test]
fn attach_repaint_carries_the_modes() {
    let mut e = emu(
        5,
        20,
        "\x1b[?1049h\x1b[?1000h\x1b[?1006h\x1b[?1h\x1b=\x1b[?2004h\x1b[5 qvim",
    );
    let snap = crate::attach_snapshot(&mut e);
    let snap = std::str::from_utf8(&snap).unwrap();
    assert!(snap.starts_with("\x1b[?1049h"), "{snap:?}");
    for m in [
        "\x1b[?1000h",
        "\x1b[?1006h",
        "\x1b[?1h",
        "\x1b=",
        "\x1b[?2004h",
        "\x1b[5 q",
    ] {
        assert!(snap.contains(m), "{m:?} in {snap:?}");
    }
    // A terminal that replays it is in the same state.
    let mut copy = emu(5, 20, snap);
    assert_eq!(copy.term.mode(), e.term.mode());
    assert_eq!(copy.plain(false), "vim");
    let mut plain = emu(5, 20, "x");
    let snap = crate::attach_snapshot(&mut plain);
    let snap = std::str::from_utf8(&snap).unwrap();
    assert!(snap.starts_with("\x1b[?1049l") && snap.contains("\x1b[?1000l\x1b[?1002l"));
    assert!(snap.ends_with("\x1b>\x1b[4l\x1b[0 q"), "{snap:?}");
}

#[test]
fn the_repaint_sets_the_scroll_region_the_program_set() {
    let snap =
        |e: &mut crate::Emulator| String::from_utf8(crate::attach_snapshot(e).to_vec()).unwrap();
    let mut e = emu(24, 80, "top\x1b[5;20r\x1b[20;1Hin the region");
    let with = snap(&mut e);
    assert!(with.contains("\x1b7\x1b[5;20r\x1b8"), "{with:?}");
    // A terminal that replays it scrolls inside the same region.
    let mut copy = emu(24, 80, &with);
    e.process(b"\n\n\n");
    copy.process(b"\n\n\n");
    assert_eq!(copy.plain(false), e.plain(false));
    assert!(e.plain(false).starts_with("top\n"), "{:?}", e.plain(false));
    // Reset by the program, by a resize: the repaint resets it too.
    e.process(b"\x1b[r");
    assert!(snap(&mut e).contains("\x1b7\x1b[r\x1b8"));
    e.process(b"\x1b[3r");
    assert!(snap(&mut e).contains("\x1b7\x1b[3r\x1b8"));
    e.resize(24, 80);
    e.resize(20, 70);
    assert!(snap(&mut e).contains("\x1b7\x1b[r\x1b8"));
}

#[test]
fn the_terminal_type_is_the_one_spec_documents() {
    let spec = include_str!("../../SPEC.md");
    assert!(spec.contains("| DA2 `CSI > c` | `CSI > 0 ; 0 ; 0 c` |"));
    assert_eq!(crate::DA2_ANSWER, "\x1b[>0;0;0c");
    assert!(spec.contains("| XTVERSION `CSI > q`, `CSI > 0 q` | `DCS > \\| latch VERSION ST` |"));
    assert!(crate::xtversion_answer().starts_with("\x1bP>|latch "));
    assert!(spec.contains("foreground `e5e5e5`, background `000000`"));
    assert_eq!(
        crate::default_color(257),
        alacritty_terminal::vte::ansi::Rgb { r: 0, g: 0, b: 0 }
    );
    assert_eq!(
        crate::default_color(256),
        alacritty_terminal::vte::ansi::Rgb {
            r: 0xe5,
            g: 0xe5,
            b: 0xe5
        }
    );
    assert!(spec.contains("(`EVENT_BURST`)"));
}
