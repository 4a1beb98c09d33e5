//! The compact scrollback against alacritty holding the whole scrollback: the same
//! output gives the same captures, byte for byte (crate docs, "Scrollback").

use alacritty_terminal::grid::Dimensions;

use crate::compact::WINDOW;
use crate::{capture, legacy_lines, legacy_peek_snapshot, Emulator};

/// Every capture that reads the scrollback or the screen.
pub(crate) fn captures(e: &mut Emulator) -> Vec<(String, Vec<u8>)> {
    let mut out = vec![
        ("plain full".into(), e.plain(true).into_bytes()),
        ("plain".into(), e.plain(false).into_bytes()),
        ("ansi full".into(), e.formatted_lines(true).into_bytes()),
        ("ansi".into(), e.formatted_lines(false).into_bytes()),
        ("repaint".into(), crate::attach_snapshot(e).to_vec()),
        (
            "capture".into(),
            capture(e, crate::View::ANSI.full(), 1 << 20).into_bytes(),
        ),
        (
            "lines".into(),
            format!("{:?}", legacy_lines(e)).into_bytes(),
        ),
        ("cursor".into(), format!("{:?}", e.cursor()).into_bytes()),
        ("history".into(), e.history().to_string().into_bytes()),
    ];
    for (plain, full) in [(true, true), (false, true), (true, false), (false, false)] {
        out.push((
            format!("legacy plain={plain} full={full}"),
            legacy_peek_snapshot(e, crate::View::new(plain, full)).to_vec(),
        ));
    }
    out
}

fn assert_same(compact: &mut Emulator, full: &mut Emulator, what: &str) {
    for ((name, a), (_, b)) in captures(compact).into_iter().zip(captures(full)) {
        assert!(
            a == b,
            "{what}: {name} differs\ncompact: {:?}\nfull:    {:?}",
            String::from_utf8_lossy(&a),
            String::from_utf8_lossy(&b)
        );
    }
}

/// Rows held compactly (the test is moot without some).
fn stored(e: &Emulator) -> usize {
    e.history.store.len()
}

/// A pair fed the same chunks.
struct Pair {
    compact: Emulator,
    full: Emulator,
}

impl Pair {
    fn new(rows: u16, cols: u16, scrollback: usize) -> Self {
        Self {
            compact: Emulator::new(rows, cols, scrollback),
            full: Emulator::new_uncompacted(rows, cols, scrollback),
        }
    }
    fn push(&mut self, bytes: &[u8]) {
        self.compact.push(bytes);
        self.full.push(bytes);
    }
    fn check(&mut self, what: &str) {
        assert_same(&mut self.compact, &mut self.full, what);
    }
}

/// Lines of everything a row can hold: 16/256/RGB colours, bold, underline styles
/// and colours, inverse, wide characters, emoji, combining marks, tabs, erased and
/// background-filled lines, hyperlinks, lines wrapped past the edge.
pub(crate) fn hand_made(i: usize) -> String {
    match i % 12 {
        0 => format!("\x1b[31mred {i}\x1b[m \x1b[1;92mbright bold\x1b[m plain"),
        1 => format!(
            "\x1b[38;5;{}m256 {i}\x1b[48;5;{}m on\x1b[m",
            i % 256,
            (i * 7) % 256
        ),
        2 => format!(
            "\x1b[38;2;{};{};{}mrgb {i}\x1b[48;2;1;2;3m bg \x1b[m",
            i % 256,
            (i * 3) % 256,
            (i * 5) % 256
        ),
        3 => format!(
            "\x1b[4mul\x1b[4:3m\x1b[58;5;{}mcurl\x1b[24m \x1b[7minv {i}\x1b[27m \x1b[9;2;3mx\x1b[m",
            i % 256
        ),
        4 => format!("wide \u{4e2d}\u{6587}\u{5b57} emoji \u{1f600}\u{1f44d}\u{1f3fd} {i}"),
        5 => format!("e\u{301} a\u{308}\u{323} n\u{303} combining {i}"),
        6 => format!("a\tb\tc {i}\t\x1b[1md\x1b[m"),
        7 => format!("erased {i} \x1b[44m\x1b[K\x1b[m"),
        8 => format!(
            "{} wraps {i}",
            "long words wrapping past the right edge ".repeat(3)
        ),
        9 => format!("\x1b[41m\x1b[2K\x1b[m{i}\x1b[5G\x1b[42m  \x1b[m"),
        10 => format!("\x1b]8;id=l{i};https://example.com/{i}\x07link\x1b]8;;\x07 after {i}"),
        _ => format!("{}\u{4e2d}{i}", "x".repeat(39)),
    }
}

#[test]
fn hand_made_output_gives_the_same_captures() {
    for (rows, cols, scrollback) in [(24, 80, 10_000), (10, 40, 1000), (5, 20, 700)] {
        let mut p = Pair::new(rows, cols, scrollback);
        for i in 0..3000 {
            p.push(hand_made(i).as_bytes());
            p.push(b"\r\n");
            if i % 997 == 0 {
                p.check(&format!("{rows}x{cols} line {i}"));
            }
        }
        // Ends mid-line, with a pen set.
        p.push(b"\x1b[1;35mpending \xe4\xb8\xad");
        p.check(&format!("{rows}x{cols} end"));
        assert!(stored(&p.compact) > 0, "{rows}x{cols}: nothing compacted");
        assert_eq!(stored(&p.full), 0);
    }
}

/// proptest's deterministic generator, seeded per case.
pub(crate) struct Rng(proptest::test_runner::TestRng);
impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&seed.to_le_bytes());
        Self(proptest::test_runner::TestRng::from_seed(
            proptest::test_runner::RngAlgorithm::XorShift,
            &bytes,
        ))
    }
    pub(crate) fn below(&mut self, n: usize) -> usize {
        use proptest::prelude::Rng as _;
        usize::try_from(self.0.next_u64() % n as u64).unwrap()
    }
}

#[test]
fn random_output_gives_the_same_captures() {
    // Everything that touches the scrollback: line feeds of all kinds, scrolling,
    // regions, clears (of the screen, of the scrollback), RIS, the alternate screen,
    // resets of the pen, invalid UTF-8.
    let pieces: [&[u8]; 24] = [
        b"\r\n",
        b"\n",
        b"\x0b",
        b"\x1bD",
        b"\x1bE",
        b"\x1bM",
        b"\x1b[3S",
        b"\x1b[2T",
        b"\x1b[2J",
        b"\x1b[3J",
        b"\x1b[?3J",
        b"\x1b[03;1J",
        b"\x1bc",
        b"\x1b[?1049h",
        b"\x1b[?1049l",
        b"\x1b[3;7r",
        b"\x1b[r",
        b"\x1b[H",
        b"\x1b[K",
        b"\x1b[1;31m",
        b"\x1b[m",
        b"\t",
        b"\xff\xc2",
        "\u{4e2d}\u{1f600}e\u{301}".as_bytes(),
    ];
    for seed in 1..9u64 {
        let mut rng = Rng::new(seed * 7919);
        let rows = 5 + u16::try_from(rng.below(20)).unwrap();
        let cols = 10 + u16::try_from(rng.below(70)).unwrap();
        let mut p = Pair::new(rows, cols, 500 + rng.below(2000));
        let mut compacted = false;
        let mut resizes = Rng::new(seed * 104_729);
        for step in 0..60_000 {
            // Mostly lines, so that the scrollback fills and rows get compacted.
            if rng.below(3 + usize::try_from(seed).unwrap() * 40) == 0 {
                p.push(pieces[rng.below(pieces.len())]);
            } else {
                p.push(hand_made(step).as_bytes());
                p.push(b"\r\n");
            }
            // Now and then the terminal is resized (from a generator of its own, so
            // the output stays what it was): lines reflow on both sides.
            if resizes.below(4000) == 0 {
                let r = 5 + u16::try_from(resizes.below(20)).unwrap();
                let c = 10 + u16::try_from(resizes.below(100)).unwrap();
                p.compact.resize(r, c);
                p.full.resize(r, c);
            }
            if step % 15_000 == 14_999 {
                p.check(&format!("seed {seed} step {step}"));
                compacted |= stored(&p.compact) > 0;
            }
        }
        p.check(&format!("seed {seed} end"));
        assert!(compacted, "seed {seed}: nothing compacted");
    }
}

#[test]
fn the_store_holds_the_oldest_rows_and_alacritty_a_window() {
    let mut e = Emulator::new(24, 80, 10_000);
    for i in 0..50_000 {
        e.push(format!("line {i}\r\n").as_bytes());
    }
    assert_eq!(e.history(), 10_000);
    let alacritty = e.term.grid().history_size();
    assert!(alacritty < 2 * WINDOW + 1, "{alacritty}");
    assert_eq!(stored(&e) + alacritty, 10_000);
    let full = e.plain(true);
    let first = full.lines().next().unwrap();
    assert_eq!(first, format!("line {}", 50_000 - 10_000 - 23));
}

#[test]
fn clearing_the_scrollback_clears_the_compact_rows() {
    for (clear, cleared) in [
        (&b"\x1b[3J"[..], true),
        (b"\x1bc", true),
        (b"\x1b[2J", false),
        (b"\x1b[?3J", false),
        (b"\x1b[?1049h\x1b[3J\x1b[?1049l", false),
    ] {
        let mut p = Pair::new(10, 30, 2000);
        for i in 0..1500 {
            p.push(format!("\x1b[32mline {i}\x1b[m\r\n").as_bytes());
        }
        p.check("before");
        assert!(stored(&p.compact) > 0);
        p.push(clear);
        p.push(b"after\r\n");
        p.check(&format!("{clear:?}"));
        let full = p.compact.plain(true);
        assert_eq!(full.contains("line 0\n"), !cleared, "{clear:?}: {full:?}");
    }
}

#[test]
fn the_alternate_screen_shows_no_scrollback() {
    let mut p = Pair::new(10, 30, 2000);
    for i in 0..1500 {
        p.push(format!("line {i}\r\n").as_bytes());
    }
    p.push(b"\x1b[?1049h\x1b[Hfull-screen app");
    p.check("on the alternate screen");
    assert_eq!(p.compact.plain(true), "full-screen app");
    // Resized while there: the main screen's rows go to its history meanwhile.
    p.compact.resize(6, 30);
    p.full.resize(6, 30);
    p.push(b"\x1b[?1049l");
    p.check("back on the main screen");
}

#[test]
fn a_resize_of_rows_gives_the_same_captures() {
    let mut p = Pair::new(30, 40, 3000);
    for i in 0..2500 {
        p.push(hand_made(i).as_bytes());
        p.push(b"\r\n");
    }
    let half = u16::try_from(WINDOW / 2).unwrap();
    for rows in [10, 50, 24, 24 + half, 5] {
        p.compact.resize(rows, 40);
        p.full.resize(rows, 40);
        p.check(&format!("{rows} rows"));
        p.push(b"more\r\n");
        p.check(&format!("{rows} rows, then output"));
    }
}

#[test]
fn a_resize_of_columns_reflows_the_compact_rows_as_alacritty_does() {
    // Long wrapped lines, wide characters at the edges, colours and links: what a
    // reflow must carry across rows.
    let mut p = Pair::new(10, 40, 3000);
    for i in 0..1500 {
        p.push(hand_made(i).as_bytes());
        if i % 7 == 0 {
            p.push(format!("{}\u{4e2d}{i}", "y".repeat(37 + i % 5)).as_bytes());
        }
        p.push(b"\r\n");
    }
    p.check("before");
    assert!(stored(&p.compact) > 0);
    for cols in [25, 80, 33, 120, 39, 40, 7] {
        p.compact.resize(10, cols);
        p.full.resize(10, cols);
        p.check(&format!("{cols} columns"));
        p.push(format!("more at {cols}\r\n").as_bytes());
        p.check(&format!("{cols} columns, then output"));
    }
}

#[test]
fn a_reflow_in_small_chunks_gives_what_one_grid_gives() {
    let fill = || {
        let mut e = Emulator::new(10, 40, 3000);
        for i in 0..1500 {
            e.process(hand_made(i).as_bytes());
            if i % 5 == 0 {
                e.process(format!("{}\u{4e2d}{i}", "z".repeat(70 + i % 9)).as_bytes());
            }
            e.process(b"\r\n");
        }
        let _ = e.plain(false);
        e
    };
    for cols in [25, 97, 7] {
        let (mut whole, mut chunked) = (fill(), fill());
        assert!(stored(&whole) > 0);
        let limit = whole.history.scrollback;
        whole
            .history
            .store
            .reflow_in_chunks(cols, limit, usize::MAX);
        chunked.history.store.reflow_in_chunks(cols, limit, 7);
        whole.resize(10, u16::try_from(cols).unwrap());
        chunked.resize(10, u16::try_from(cols).unwrap());
        assert_same(&mut chunked, &mut whole, &format!("{cols} columns"));
    }
}
