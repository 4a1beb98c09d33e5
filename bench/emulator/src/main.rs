//! Emulator choice by measurement.
//!
//! ```sh
//! cd bench/emulator && cargo run --release            # vt100, alacritty_terminal, avt
//! cargo run --release --features termwiz              # + termwiz's escape parser alone
//! cargo run --release -- scrollback                   # the scrollback's memory only
//! ```
//!
//! For each candidate and each input (about 50 MB each, as a PTY delivers it: `\r\n`
//! line ends, fed in 16 KiB chunks like the daemon's reads), the parse throughput in
//! MB/s (best of `RUNS`, since the machine is shared and noisy), the heap the
//! emulator holds afterwards (scrollback capped at 10,000 lines, 24x80), and the cost
//! of one full-screen ANSI snapshot of a 50x200 screen of colourful text.
//!
//! The alacritty_terminal snapshot is the daemon's own serializer
//! (the `latch-screen` crate), so the figure is what the
//! daemon pays; vt100's is its `contents_formatted`, avt's its `dump`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Counts live heap bytes, to report what each emulator holds after a flood.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator and only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size(), Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new, Ordering::Relaxed);
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

use latch_screen as emulator;

const TARGET: usize = 50 * 1000 * 1000;
const CHUNK: usize = 16 * 1024;
const RUNS: usize = 3;
const SCROLLBACK: usize = 10_000;

/// xorshift64*: deterministic inputs without a dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// `seq 1 N` through a PTY.
fn seq_text() -> Vec<u8> {
    let mut out = Vec::with_capacity(TARGET + 64);
    let mut i = 1u64;
    while out.len() < TARGET {
        out.extend_from_slice(i.to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
        i += 1;
    }
    out
}

/// `base64 /dev/urandom`: 76 columns, `\r\n`.
fn base64_text() -> Vec<u8> {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut out = Vec::with_capacity(TARGET + 128);
    while out.len() < TARGET {
        for _ in 0..76 {
            out.push(A[(rng.next() >> 58) as usize]);
        }
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Colourful log/`ls --color`-like output: a coloured level, 256-colour and
/// truecolour words, bold/underline runs, resets.
fn sgr_text() -> Vec<u8> {
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    let levels: [&[u8]; 4] = [
        b"\x1b[1;32mINFO\x1b[0m ",
        b"\x1b[1;33mWARN\x1b[0m ",
        b"\x1b[1;31mERROR\x1b[0m",
        b"\x1b[2;37mDEBUG\x1b[0m",
    ];
    let words: [&[u8]; 8] = [
        b"request", b"handled", b"in", b"ms", b"user", b"session", b"cache", b"miss",
    ];
    let mut out = Vec::with_capacity(TARGET + 512);
    while out.len() < TARGET {
        out.extend_from_slice(levels[(rng.next() % 4) as usize]);
        out.push(b' ');
        for _ in 0..8 {
            let w = words[(rng.next() % 8) as usize];
            match rng.next() % 4 {
                0 => out.extend_from_slice(format!("\x1b[38;5;{}m", rng.next() % 256).as_bytes()),
                1 => out.extend_from_slice(
                    format!(
                        "\x1b[38;2;{};{};{}m",
                        rng.next() % 256,
                        rng.next() % 256,
                        rng.next() % 256
                    )
                    .as_bytes(),
                ),
                2 => out.extend_from_slice(b"\x1b[1;4m"),
                _ => {}
            }
            out.extend_from_slice(w);
            out.extend_from_slice(b"\x1b[m ");
        }
        out.extend_from_slice(b"\r\n");
    }
    out
}

trait Emu {
    const NAME: &'static str;
    fn new(rows: u16, cols: u16, scrollback: usize) -> Self;
    fn feed(&mut self, bytes: &[u8]);
    /// Feeds the terminal the snapshots are taken of.
    fn feed_for_snapshot(&mut self, bytes: &[u8]) {
        self.feed(bytes);
    }
    /// A full-screen ANSI repaint; returns its length.
    fn snapshot(&mut self) -> usize;
    /// The visible text without attributes; returns its length.
    fn plain(&mut self) -> usize;
}

struct Vt100(vt100::Parser);
impl Emu for Vt100 {
    const NAME: &'static str = "vt100 0.18";
    fn new(rows: u16, cols: u16, scrollback: usize) -> Self {
        let nz = |n| std::num::NonZeroU16::new(n).unwrap();
        Self(vt100::Parser::new(nz(rows), nz(cols), scrollback))
    }
    fn feed(&mut self, bytes: &[u8]) {
        self.0.process(bytes);
    }
    fn snapshot(&mut self) -> usize {
        self.0.screen().contents_formatted().len()
    }
    fn plain(&mut self) -> usize {
        self.0.screen().contents().len()
    }
}

/// Parse figures: alacritty_terminal's own `Term` and parser. Snapshot figures: the
/// daemon's serializer (`daemon/src/screen/emulator.rs`).
struct Alacritty {
    term: alacritty_terminal::Term<alacritty_terminal::event::VoidListener>,
    parser: alacritty_terminal::vte::ansi::Processor,
    daemon: emulator::Emulator,
}
struct Dims(usize, usize);
impl alacritty_terminal::grid::Dimensions for Dims {
    fn total_lines(&self) -> usize {
        self.0
    }
    fn screen_lines(&self) -> usize {
        self.0
    }
    fn columns(&self) -> usize {
        self.1
    }
}
impl Emu for Alacritty {
    const NAME: &'static str = "alacritty_terminal 0.26";
    fn new(rows: u16, cols: u16, scrollback: usize) -> Self {
        let config = alacritty_terminal::term::Config {
            scrolling_history: scrollback,
            ..Default::default()
        };
        Self {
            term: alacritty_terminal::Term::new(
                config,
                &Dims(rows.into(), cols.into()),
                alacritty_terminal::event::VoidListener,
            ),
            parser: Default::default(),
            daemon: emulator::Emulator::new(rows, cols, scrollback),
        }
    }
    fn feed(&mut self, bytes: &[u8]) {
        self.parser.advance(&mut self.term, bytes);
    }
    fn feed_for_snapshot(&mut self, bytes: &[u8]) {
        self.daemon.process(bytes);
    }
    fn snapshot(&mut self) -> usize {
        self.daemon.formatted().len()
    }
    fn plain(&mut self) -> usize {
        self.daemon.plain(false).len()
    }
}

/// avt takes `&str`: the daemon would need its own UTF-8 carry-over; these inputs
/// are ASCII, so that cost is not counted here (it favours avt).
struct Avt(avt::Vt);
impl Emu for Avt {
    const NAME: &'static str = "avt 0.16";
    fn new(rows: u16, cols: u16, scrollback: usize) -> Self {
        Self(
            avt::Vt::builder()
                .size(cols as usize, rows as usize)
                .scrollback_limit(scrollback)
                .build(),
        )
    }
    fn feed(&mut self, bytes: &[u8]) {
        let s = std::str::from_utf8(bytes).unwrap_or("");
        black_box(self.0.feed_str(s));
    }
    fn snapshot(&mut self) -> usize {
        self.0.dump().len()
    }
    fn plain(&mut self) -> usize {
        self.0.text().iter().map(|l| l.len() + 1).sum()
    }
}

struct Row {
    name: &'static str,
    mbps: [f64; 3],
    held_mb: f64,
    snap_us: f64,
    snap_bytes: usize,
    plain_us: f64,
}

fn feed_all<E: Emu>(e: &mut E, input: &[u8]) {
    for chunk in input.chunks(CHUNK) {
        e.feed(chunk);
    }
}

fn parse_rate<E: Emu>(input: &[u8]) -> (f64, usize) {
    let mut best = Duration::MAX;
    let mut held = 0;
    for _ in 0..RUNS {
        let before = LIVE.load(Ordering::Relaxed);
        let mut e = E::new(24, 80, SCROLLBACK);
        let t = Instant::now();
        feed_all(&mut e, input);
        best = best.min(t.elapsed());
        held = LIVE.load(Ordering::Relaxed).saturating_sub(before);
        black_box(&e);
    }
    (input.len() as f64 / best.as_secs_f64() / 1e6, held)
}

fn per_call(n: usize, mut f: impl FnMut() -> usize) -> (f64, usize) {
    let mut len = 0;
    let t = Instant::now();
    for _ in 0..n {
        len = black_box(f());
    }
    (t.elapsed().as_secs_f64() * 1e6 / n as f64, len)
}

fn measure<E: Emu>(inputs: &[Vec<u8>; 3], sgr_tail: &[u8]) -> Row {
    let mut mbps = [0.0; 3];
    let mut held = 0;
    for (i, input) in inputs.iter().enumerate() {
        let (rate, h) = parse_rate::<E>(input);
        mbps[i] = rate;
        if i == 2 {
            held = h;
        }
    }
    let mut e = E::new(50, 200, SCROLLBACK);
    e.feed_for_snapshot(sgr_tail);
    let (snap_us, snap_bytes) = per_call(2000, || e.snapshot());
    let (plain_us, _) = per_call(2000, || e.plain());
    Row {
        name: E::NAME,
        mbps,
        held_mb: held as f64 / 1e6,
        snap_us,
        snap_bytes,
        plain_us,
    }
}

/// The daemon's path: `push` per read (fast-forwarding plain text under a flood),
/// then one `flush`, as when the program goes quiet.
fn daemon_path(inputs: &[Vec<u8>; 3]) -> ([f64; 3], [u64; 3]) {
    let mut rates = [0.0; 3];
    let mut skipped = [0; 3];
    for (i, input) in inputs.iter().enumerate() {
        let mut best = Duration::MAX;
        for _ in 0..RUNS {
            let mut e = emulator::Emulator::new(24, 80, SCROLLBACK);
            let t = Instant::now();
            for chunk in input.chunks(CHUNK) {
                e.push(chunk);
            }
            e.flush();
            best = best.min(t.elapsed());
            skipped[i] = e.skipped();
            black_box(&e);
        }
        rates[i] = input.len() as f64 / best.as_secs_f64() / 1e6;
    }
    (rates, skipped)
}

/// `cargo run --release -- scrollback`: heap held after a 72 MB flood of 70-column
/// lines (24x80, scrollback 10,000, the daemon's path: push per 16 KiB, then what it
/// does when the program is quiet: apply the queue and release spare rows),
/// with the compact scrollback and with alacritty holding every row (the reference),
/// in the same run; the compact store's own bytes per row; and that path's
/// throughput on the same input and on the SGR-heavy one (best of `RUNS`).
fn scrollback_memory() {
    let mut text = Vec::with_capacity(72_000_000 + 128);
    let mut line = 0u64;
    while text.len() < 72_000_000 {
        let mut l = format!("{line:09} ");
        l.extend((0..60).map(|i| char::from(b'a' + ((line * 7 + i) % 26) as u8)));
        text.extend_from_slice(l.as_bytes());
        text.extend_from_slice(b"\r\n");
        line += 1;
    }
    let sgr = sgr_text();
    let make = |compact: bool| {
        if compact {
            emulator::Emulator::new(24, 80, SCROLLBACK)
        } else {
            emulator::Emulator::new_uncompacted(24, 80, SCROLLBACK)
        }
    };
    let rate = |compact: bool, input: &[u8]| {
        let mut best = Duration::MAX;
        for _ in 0..RUNS {
            let mut e = make(compact);
            let t = Instant::now();
            for chunk in input.chunks(CHUNK) {
                e.push(chunk);
            }
            e.flush();
            best = best.min(t.elapsed());
            black_box(&e);
        }
        input.len() as f64 / best.as_secs_f64() / 1e6
    };
    println!("| scrollback (72 MB of 70-column lines, 24x80, 10,000 lines) | heap held | compact store | bytes per compact row | rows kept | daemon path, these lines MB/s | daemon path, SGR-heavy MB/s |");
    println!("|---|---|---|---|---|---|---|");
    for (name, compact) in [("alacritty holds every row (before)", false), ("compact store (after)", true)] {
        let before = LIVE.load(Ordering::Relaxed);
        let mut e = make(compact);
        for chunk in text.chunks(CHUNK) {
            e.push(chunk);
        }
        // What the daemon does once the program is quiet.
        e.release();
        let held = LIVE.load(Ordering::Relaxed).saturating_sub(before);
        let (bytes, rows) = e.compact_bytes();
        let kept = e.plain(true).lines().count();
        black_box(&e);
        drop(e);
        println!(
            "| {name} | {:.2} MB | {:.2} MB | {} | {kept} | {:.1} | {:.1} |",
            held as f64 / 1e6,
            bytes as f64 / 1e6,
            if rows > 0 { format!("{:.1}", bytes as f64 / rows as f64) } else { "—".into() },
            rate(compact, &text),
            rate(compact, &sgr),
        );
    }
}

#[cfg(feature = "termwiz")]
fn termwiz_parse(inputs: &[Vec<u8>; 3]) -> [f64; 3] {
    let mut out = [0.0; 3];
    for (i, input) in inputs.iter().enumerate() {
        let mut best = Duration::MAX;
        for _ in 0..RUNS {
            let mut p = termwiz::escape::parser::Parser::new();
            let t = Instant::now();
            let mut n = 0usize;
            for chunk in input.chunks(CHUNK) {
                p.parse(chunk, |a| {
                    black_box(&a);
                    n += 1;
                });
            }
            black_box(n);
            best = best.min(t.elapsed());
        }
        out[i] = input.len() as f64 / best.as_secs_f64() / 1e6;
    }
    out
}

fn main() {
    if std::env::args().any(|a| a == "scrollback") {
        scrollback_memory();
        return;
    }
    let t = Instant::now();
    let inputs = [seq_text(), base64_text(), sgr_text()];
    // About two 50x200 screens of colourful lines, wrapped at 200 columns.
    let sgr_tail = &inputs[2][..40_000];
    eprintln!(
        "inputs: {} / {} / {} bytes, made in {:?}",
        inputs[0].len(),
        inputs[1].len(),
        inputs[2].len(),
        t.elapsed()
    );
    let rows = [
        measure::<Vt100>(&inputs, sgr_tail),
        measure::<Alacritty>(&inputs, sgr_tail),
        measure::<Avt>(&inputs, sgr_tail),
    ];
    println!(
        "| emulator | seq text MB/s | base64 MB/s | SGR-heavy MB/s | heap after flood (10k lines x 80) | ANSI snapshot 50x200 | snapshot bytes | plain text 50x200 |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {:.1} | {:.1} | {:.1} | {:.1} MB | {:.1} µs | {} | {:.1} µs |",
            r.name, r.mbps[0], r.mbps[1], r.mbps[2], r.held_mb, r.snap_us, r.snap_bytes, r.plain_us
        );
    }
    let (m, skipped) = daemon_path(&inputs);
    println!(
        "| alacritty_terminal 0.26 behind latch's lazy queue + fast-forward (the daemon's path; skipped {:.0}% / {:.0}% / {:.0}% unparsed) | {:.1} | {:.1} | {:.1} | — | — | — | — |",
        skipped[0] as f64 * 100.0 / inputs[0].len() as f64,
        skipped[1] as f64 * 100.0 / inputs[1].len() as f64,
        skipped[2] as f64 * 100.0 / inputs[2].len() as f64,
        m[0], m[1], m[2]
    );
    #[cfg(feature = "termwiz")]
    {
        let m = termwiz_parse(&inputs);
        println!(
            "| termwiz 0.23 (escape parser only, no screen) | {:.1} | {:.1} | {:.1} | — | — | — | — |",
            m[0], m[1], m[2]
        );
    }
    eprintln!("total {:?}", t.elapsed());
}
