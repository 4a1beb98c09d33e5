//! Hibernation against a terminal that never sleeps: the same output and resizes
//! give the same captures, modes, cursor, answers and events, byte for byte,
//! wherever the one hibernates and wakes (SPEC §4.4, "Hibernation").

use alacritty_terminal::grid::Dimensions;

use crate::scrollback_tests::{captures, hand_made, Rng};
use crate::{legacy_modes, Emulator};

/// Everything a reader sees, and what the terminal said back.
fn seen(e: &mut Emulator) -> Vec<(String, Vec<u8>)> {
    let mut out = captures(e);
    out.push(("cells".into(), e.capture(true, 1 << 20).encode()));
    out.push((
        "modes".into(),
        format!("{:?}", legacy_modes(e)).into_bytes(),
    ));
    out.push(("paste".into(), vec![u8::from(e.bracketed_paste())]));
    out.push(("answers".into(), e.take_replies()));
    out.push((
        "events".into(),
        format!("{:?}", e.take_events()).into_bytes(),
    ));
    out
}

fn assert_same(sleeper: &mut Emulator, awake: &mut Emulator, what: &str) {
    for ((name, a), (_, b)) in seen(sleeper).into_iter().zip(seen(awake)) {
        assert!(
            a == b,
            "{what}: {name} differs\nhibernated: {:?}\nawake:      {:?}",
            String::from_utf8_lossy(&a),
            String::from_utf8_lossy(&b)
        );
    }
}

/// Output touching every piece of state a terminal keeps besides its cells:
/// cursor moves, the saved cursor, scroll regions, the alternate screen, tab stops,
/// charsets, the pending wrap, modes, the title and its stack, the palette, the
/// cursor's shape, and queries answered from them. Some are cut in two, so that a
/// hibernation may be asked for in the middle of a sequence.
const PIECES: [&[u8]; 48] = [
    b"\r\n",
    b"\n",
    b"\x1bM",
    b"\x1b[3;7r",
    b"\x1b[2;4r",
    b"\x1b[r",
    b"\x1b[H",
    b"\x1b[5;9H",
    b"\x1b[2A",
    b"\x1b[3C",
    b"\x1b[K",
    b"\x1b[2J",
    b"\x1b[3J",
    b"\x1b[2L",
    b"\x1b[P",
    b"\x1b7",
    b"\x1b8",
    b"\x1b[?1049h",
    b"\x1b[?1049l",
    b"\x1b[?1049h\x1b[?1049l",
    b"\tx\t",
    b"\x1bH",
    b"\x1b[3g",
    b"\x1b[g",
    b"\x1b(0lqqk\x1b(B",
    b"\x1b)0\x0elqk",
    b"\x0f",
    b"0123456789abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "\u{4e2d}\u{6587}\u{1f600}e\u{301}".as_bytes(),
    b"\x1b[1;31;4m",
    b"\x1b[38;2;1;2;3;48;5;99m",
    b"\x1b[m",
    b"\x1b[?6h",
    b"\x1b[?6l",
    b"\x1b[?7l",
    b"\x1b[?7h",
    b"\x1b[4h",
    b"\x1b[4l",
    b"\x1b[?2004h\x1b[?1000h\x1b[?1006h\x1b[?25l\x1b[5 q",
    b"\x1b[?2004l\x1b[?1000l\x1b[?25h\x1b[0 q",
    b"\x1b]0;title\x07\x1b[22t\x1b]2;other\x07",
    b"\x1b[23t",
    b"\x1b]4;1;rgb:12/34/56\x07\x1b]11;rgb:01/02/03\x07",
    b"\x1b]4;1;?\x07\x1b]10;?\x07\x1b]11;?\x1b\\",
    b"\x1b[6n\x1b[c\x1b[>c\x1b[5n",
    b"\x1b[?2004$p\x1b[?1049$p",
    b"\x1b[",
    b"1;32m\x1b]0;ha",
];

/// One random run: a sleeper and a twin fed the same output and resizes; the
/// sleeper hibernates at random points, and is read at others.
fn run(seed: u64, steps: usize) -> usize {
    let mut rng = Rng::new(seed * 6151);
    let rows = 3 + u16::try_from(rng.below(20)).unwrap();
    let cols = 5 + u16::try_from(rng.below(80)).unwrap();
    let scrollback = 50 + rng.below(1500);
    let mut sleeper = Emulator::new(rows, cols, scrollback);
    let mut awake = Emulator::new(rows, cols, scrollback);
    let mut slept = 0;
    for step in 0..steps {
        if rng.below(3) == 0 {
            let piece = PIECES[rng.below(PIECES.len())];
            sleeper.push(piece);
            awake.push(piece);
        } else {
            let line = hand_made(step);
            let end: &[u8] = if rng.below(4) == 0 { b"" } else { b"\r\n" };
            for bytes in [line.as_bytes(), end] {
                sleeper.push(bytes);
                awake.push(bytes);
            }
        }
        if rng.below(40) == 0 {
            let r = 2 + u16::try_from(rng.below(25)).unwrap();
            let c = 3 + u16::try_from(rng.below(100)).unwrap();
            sleeper.resize(r, c);
            awake.resize(r, c);
        }
        match rng.below(12) {
            0..=3 => {
                // Hibernating applies the queue first: so does the twin, so that
                // both apply output in the same pieces (events come in the order
                // each piece reports them).
                awake.flush();
                if sleeper.hibernate() {
                    slept += 1;
                    // The cursor is read without waking.
                    assert_eq!(sleeper.cursor(), awake.cursor(), "seed {seed} step {step}");
                    assert!(sleeper.hibernated());
                }
            }
            4 => assert_same(
                &mut sleeper,
                &mut awake,
                &format!("seed {seed} step {step}"),
            ),
            _ => {}
        }
    }
    awake.flush();
    sleeper.hibernate();
    assert_same(&mut sleeper, &mut awake, &format!("seed {seed} end"));
    slept
}

#[test]
fn random_output_and_resizes_give_the_same_screens_across_hibernation() {
    // 16 runs take about 15 s optimised and 130 s in a debug build: the debug
    // build that CI's test run uses takes the first 5.
    let seeds = if cfg!(debug_assertions) {
        1..6u64
    } else {
        1..17
    };
    for seed in seeds {
        let slept = run(seed, 1000);
        assert!(slept > 30, "seed {seed}: hibernated only {slept} times");
    }
}

#[test]
fn a_long_scrollback_survives_hibernation() {
    // Enough lines that alacritty's window and the compact store both hold rows.
    for seed in 41..43u64 {
        let mut rng = Rng::new(seed);
        let mut sleeper = Emulator::new(24, 80, 10_000);
        let mut awake = Emulator::new(24, 80, 10_000);
        for i in 0..5000 {
            let line = format!("{}\r\n", hand_made(i));
            sleeper.push(line.as_bytes());
            awake.push(line.as_bytes());
            if rng.below(500) == 0 {
                assert!(sleeper.hibernate());
            }
        }
        assert!(sleeper.hibernate());
        assert_same(&mut sleeper, &mut awake, &format!("seed {seed}"));
    }
}

#[test]
fn hibernating_drops_the_full_cells_and_waits_for_ground_state() {
    let mut e = Emulator::new(24, 80, 1000);
    for i in 0..300 {
        e.push(format!("{}\r\n", hand_made(i)).as_bytes());
    }
    e.push(b"\x1b[?1049h\x1b[Hon the alternate screen");
    assert!(e.hibernate());
    // What alacritty holds meanwhile: one line of two cells, no history.
    assert_eq!(e.term.grid().screen_lines(), 1);
    assert_eq!(e.term.grid().columns(), 2);
    assert_eq!(e.term.grid().history_size(), 0);
    // Reading the screen wakes it.
    assert_eq!(e.plain(false), "on the alternate screen");
    assert!(!e.hibernated());
    assert_eq!(e.term.grid().screen_lines(), 24);
    // In the middle of an escape sequence it stays awake.
    e.push(b"\x1b]0;unfinished");
    assert!(!e.hibernate());
    e.push(b"\x07");
    assert!(e.hibernate());
    // Output wakes it.
    e.push(b"x");
    assert!(!e.hibernated());
}

#[test]
fn a_resize_on_the_alternate_screen_keeps_the_main_grid_awake() {
    let mut sleeper = Emulator::new(10, 40, 100);
    let mut awake = Emulator::new(10, 40, 100);
    for e in [&mut sleeper, &mut awake] {
        e.process(b"main 1\r\nmain 2\r\nwrapped line wrapped line wrapped line wrapped line");
        e.process(b"\x1b[?1049halt");
        e.resize(8, 25);
    }
    assert!(sleeper.hibernate());
    for e in [&mut sleeper, &mut awake] {
        e.process(b"\x1b[?1049l\x1b8after");
    }
    assert_same(&mut sleeper, &mut awake, "back on the main screen");
}

#[test]
fn an_unused_alternate_screen_hibernates_too() {
    let mut e = Emulator::new(24, 80, 1000);
    e.process(b"a prompt $ ");
    assert!(e.hibernate());
    // Both of alacritty's grids are placeholders: the main one shown, and the
    // alternate one behind it.
    assert_eq!(e.term.grid().screen_lines(), 1);
    e.term.swap_alt();
    assert_eq!(e.term.grid().screen_lines(), 1);
    e.term.swap_alt();
    assert_eq!(e.plain(false), "a prompt $");
    e.process(b"\x1b[?1049h\x1b[Halt\x1b[?1049l");
    assert!(e.hibernate());
    e.term.swap_alt();
    assert_eq!(e.term.grid().screen_lines(), 24, "a used one stays");
    e.term.swap_alt();
}
