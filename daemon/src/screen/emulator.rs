//! The terminal emulator: alacritty_terminal's grid and escape parser, and the
//! serializers the daemon's snapshots are made of.
//!
//! Chosen over vt100 by measurement (BENCHMARKS.md, `bench/emulator`): it parses
//! plain and base64-like output several times faster and holds less memory per
//! scrollback line. It has no serializer of its own, so this module writes the
//! repaint and the text captures from its grid.
//!
//! Self-contained (std and alacritty_terminal only) so that `bench/emulator` measures
//! this very file.
//!
//! Terminal queries (DA, DSR, ...) are not answered: the daemon has no terminal of
//! its own, an attached one answers. Synchronized updates (`CSI ? 2026 h`) are not
//! buffered by the parser.
//!
//! **Output is applied lazily.** [`Emulator::push`] only queues bytes; every method
//! that reads the terminal ([`formatted`](Emulator::formatted), [`plain`](Emulator::plain),
//! [`cursor`](Emulator::cursor), ...) and [`resize`](Emulator::resize) first applies
//! everything queued, so what they see reflects exactly the bytes pushed before them.
//! The daemon applies the queue when the program goes quiet, and whenever it grows
//! past a threshold. Then, under a flood, most of it need not be parsed at all:
//!
//! **Fast-forward.** Plain text (UTF-8 without control characters other than CR, LF
//! and TAB, and complete SGR sequences) only writes cells, moves the cursor and
//! changes the pen. If such a run holds more line feeds than the scrollback plus the
//! screen can show, with the scroll region at its default (full screen), everything
//! it wrote before its last `scrollback + rows + 2` lines scrolls out of the
//! scrollback whether it was parsed or not. So that part is dropped unparsed except
//! its SGR sequences from the last reset on (which set the pen the rest is drawn
//! with); the rest is parsed as usual. The resulting screen, scrollback, cursor and
//! pen are the ones full parsing gives. A small scanner (`Scan`) follows the escape
//! state across pushes to know where such runs start: never inside an escape
//! sequence, never while a scroll region may be set.

use std::fmt::Write as _;
use std::time::Duration;

use alacritty_terminal::event::VoidListener;
use alacritty_terminal::grid::Dimensions;
use alacritty_terminal::index::{Column, Line};
use alacritty_terminal::term::cell::{Cell, Flags};
use alacritty_terminal::term::{Config, Term, TermMode};
use alacritty_terminal::vte::ansi::{Color, NamedColor, Processor, Timeout};

/// The smallest grid alacritty_terminal supports (a wide character needs two columns).
const MIN_COLUMNS: u16 = 2;

/// Never starts a synchronized-update buffer (see the module docs).
#[derive(Debug, Default)]
pub struct NoSync;

impl Timeout for NoSync {
    fn set_timeout(&mut self, _: Duration) {}
    fn clear_timeout(&mut self) {}
    fn pending_timeout(&self) -> bool {
        false
    }
}

#[derive(Debug, Clone, Copy)]
struct Size {
    rows: usize,
    cols: usize,
}

impl Size {
    fn new(rows: u16, cols: u16) -> Self {
        Self {
            rows: usize::from(rows.max(1)),
            cols: usize::from(cols.max(MIN_COLUMNS)),
        }
    }
}

impl Dimensions for Size {
    fn total_lines(&self) -> usize {
        self.rows
    }
    fn screen_lines(&self) -> usize {
        self.rows
    }
    fn columns(&self) -> usize {
        self.cols
    }
}

/// Queued output beyond which [`Emulator::push`] applies the queue (fast-forwarding
/// what it can): the floor and ceiling of that limit, whatever the scrollback.
const QUEUE_MIN: usize = 1 << 20;
const QUEUE_MAX: usize = 16 << 20;

/// Screen, scrollback (capped), cursor and pen of one session's terminal.
pub struct Emulator {
    term: Term<VoidListener>,
    parser: Processor<NoSync>,
    /// Lines kept above the screen at most.
    scrollback: usize,
    /// Output pushed but not applied yet, in order.
    queue: Vec<u8>,
    /// The scanner's state at the start of `queue`.
    scan: Scan,
    /// Bytes dropped unparsed by fast-forward, for the benchmarks and the log.
    skipped: u64,
    /// The queue length that triggers fast-forward: four times what the last one
    /// kept (so each byte is scanned about 1.3 times), within `QUEUE_MIN..QUEUE_MAX`.
    limit: usize,
}

impl std::fmt::Debug for Emulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let grid = self.term.grid();
        f.debug_struct("Emulator")
            .field("rows", &grid.screen_lines())
            .field("cols", &grid.columns())
            .field("history", &grid.history_size())
            .finish()
    }
}

impl Emulator {
    /// A blank `rows` x `cols` terminal keeping at most `scrollback` lines above the
    /// screen.
    pub fn new(rows: u16, cols: u16, scrollback: usize) -> Self {
        let config = Config {
            scrolling_history: scrollback,
            ..Config::default()
        };
        Self {
            term: Term::new(config, &Size::new(rows, cols), VoidListener),
            parser: Processor::new(),
            scrollback,
            queue: Vec::new(),
            scan: Scan::default(),
            skipped: 0,
            limit: QUEUE_MIN,
        }
    }

    /// Applies program output at once.
    #[allow(dead_code)] // tests and bench/emulator
    pub fn process(&mut self, bytes: &[u8]) {
        self.push(bytes);
        self.flush();
    }

    /// Queues program output; applies the queue once it passes the threshold (see
    /// the module docs).
    pub fn push(&mut self, bytes: &[u8]) {
        self.queue.extend_from_slice(bytes);
        if self.queue.len() >= self.limit {
            self.fast_forward();
        }
    }

    /// Bytes queued and not applied yet.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Bytes dropped unparsed so far by fast-forward.
    #[allow(dead_code)] // tests and bench/emulator
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Applies everything queued.
    pub fn flush(&mut self) {
        if self.queue.is_empty() {
            return;
        }
        self.scan.run(&self.queue);
        self.parser.advance(&mut self.term, &self.queue);
        self.queue.clear();
        if self.queue.capacity() > QUEUE_MIN {
            self.queue.shrink_to(64 * 1024);
        }
    }

    /// Line feeds a skippable run must keep: they push everything before them out.
    fn keep_lines(&self) -> usize {
        self.scrollback
            .saturating_add(self.term.grid().screen_lines())
            .saturating_add(2)
    }

    /// Applies the queue, dropping unparsed whatever a long plain-text run at its end
    /// makes invisible (module docs). Keeps the run's last `keep_lines` lines queued.
    fn fast_forward(&mut self) {
        let mut scan = self.scan;
        let run = scan.run(&self.queue);
        let keep = self.keep_lines();
        let cut = run.and_then(|(start, end)| {
            let text = self.queue.get(start..end)?;
            nth_line_from_end(text, keep).map(|q| (start, start + q))
        });
        let Some((start, cut)) = cut else {
            match run {
                // A plain run too short yet: apply what precedes it and keep the run
                // queued until it holds enough lines (up to the ceiling).
                Some((start, _)) if self.queue.len() < QUEUE_MAX => {
                    let before = self.queue.get(..start).unwrap_or_default();
                    self.parser.advance(&mut self.term, before);
                    self.queue.drain(..start);
                    self.scan = Scan::default();
                    self.limit = self
                        .queue
                        .len()
                        .saturating_mul(2)
                        .clamp(QUEUE_MIN, QUEUE_MAX);
                }
                _ => {
                    self.flush();
                    self.limit = QUEUE_MIN;
                }
            }
            return;
        };
        let (before, rest) = self.queue.split_at(start);
        self.parser.advance(&mut self.term, before);
        let dropped = rest.get(..cut - start).unwrap_or_default();
        for sgr in pen_sgrs(dropped) {
            self.parser.advance(&mut self.term, sgr);
        }
        self.skipped += dropped.len() as u64;
        self.queue.drain(..cut);
        // The run is plain text: ground state, default scroll region, at its start
        // and so at the cut.
        self.scan = Scan::default();
        let kept = self.queue.len();
        if kept > QUEUE_MAX / 4 {
            // Lines too long to keep that many of: parse them.
            self.flush();
            self.limit = QUEUE_MIN;
        } else {
            self.limit = kept.saturating_mul(4).clamp(QUEUE_MIN, QUEUE_MAX);
        }
    }

    /// Resizes the screen (lines reflow as in alacritty).
    pub fn resize(&mut self, rows: u16, cols: u16) {
        self.flush();
        self.term.resize(Size::new(rows, cols));
        // Resizing resets the scroll region.
        self.scan.region = false;
    }

    /// The cursor, 0-based (row, col), top-left is (0, 0).
    pub fn cursor(&mut self) -> (u16, u16) {
        self.flush();
        let p = self.term.grid().cursor.point;
        (
            u16::try_from(p.line.0).unwrap_or(0),
            u16::try_from(p.column.0).unwrap_or(u16::MAX),
        )
    }

    /// Lines kept above the screen.
    #[cfg(test)]
    pub fn history(&mut self) -> usize {
        self.flush();
        self.term.grid().history_size()
    }

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
        let cols = grid.columns();
        let top = if full {
            -i32::try_from(grid.history_size()).unwrap_or(0)
        } else {
            0
        };
        let bottom = i32::try_from(grid.screen_lines()).unwrap_or(i32::MAX);
        out.reserve(usize::try_from(bottom - top).unwrap_or(0) * (cols / 2));
        let mut pen = Pen::default();
        for line in top..bottom {
            let row = &grid[Line(line)];
            let wrapped = row[Column(cols - 1)].flags.contains(Flags::WRAPLINE);
            let end = if wrapped {
                cols
            } else {
                content_end(row, cols)
            };
            each(out, row, end, &mut pen);
            if !wrapped {
                out.push('\n');
            }
        }
        let trimmed = out.trim_end_matches('\n').len();
        out.truncate(trimmed);
        if pen != Pen::default() {
            out.push_str("\x1b[m");
        }
    }
}

/// Where the scanner stands in the escape-sequence grammar (a coarse copy of the
/// parser's states: enough to know where a plain-text run may start).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum St {
    #[default]
    Ground,
    Esc,
    EscInter,
    Csi {
        params: bool,
        private: bool,
    },
    Str,
    StrEsc,
}

/// The scanner: escape state and whether a scroll region may be set.
#[derive(Debug, Clone, Copy, Default)]
struct Scan {
    st: St,
    /// A `CSI Pt;Pb r` with parameters was seen and not undone since (by `CSI r`,
    /// RIS or a resize). Conservative: any parameters count.
    region: bool,
}

const ESC: u8 = 0x1b;
const CAN: u8 = 0x18;
const SUB: u8 = 0x1a;
const BEL: u8 = 0x07;

/// Whether a byte ends a plain-text stretch in ground state.
fn breaks_text(b: u8) -> bool {
    (b < 0x20 && b != b'\n' && b != b'\r' && b != b'\t') || b == 0x7f
}

/// The last [`breaks_text`] byte: 32 bytes at a time from the end with a branch-free
/// test the compiler vectorises, then byte by byte in the block that has one.
fn last_control(seg: &[u8]) -> Option<usize> {
    let mut end = seg.len();
    while end >= 32 {
        let block = seg.get(end - 32..end).unwrap_or_default();
        if block.iter().fold(false, |any, &b| any | breaks_text(b)) {
            return block
                .iter()
                .rposition(|&b| breaks_text(b))
                .map(|i| end - 32 + i);
        }
        end -= 32;
    }
    seg.get(..end)?.iter().rposition(|&b| breaks_text(b))
}

/// The length of a complete SGR sequence (`ESC [ [0-9;:]* m`) at the start of `b`.
fn sgr_len(b: &[u8]) -> Option<usize> {
    if b.get(..2)? != [ESC, b'['] {
        return None;
    }
    let params = b
        .get(2..)?
        .iter()
        .take_while(|&&c| c.is_ascii_digit() || c == b';' || c == b':')
        .count();
    (*b.get(2 + params)? == b'm').then_some(3 + params)
}

impl Scan {
    /// Follows `bytes`; returns the final plain-text run (module docs) as a range,
    /// if the bytes end in one: UTF-8 text without controls other than CR, LF and
    /// TAB, and complete SGRs, starting in ground state with no scroll region set.
    fn run(&mut self, bytes: &[u8]) -> Option<(usize, usize)> {
        let len = bytes.len();
        let mut start = (self.st == St::Ground && !self.region).then_some(0);
        // Where the run stops being plain: an incomplete sequence at the end.
        let mut end = len;
        let mut i = 0;
        while i < len {
            match self.st {
                St::Ground => {
                    let rest = bytes.get(i..).unwrap_or_default();
                    let j = memchr::memchr(ESC, rest).unwrap_or(rest.len());
                    // Control characters keep ground but are not plain text: a run
                    // starts after the last one.
                    let last_control = rest.get(..j).and_then(last_control);
                    if let Some(k) = last_control {
                        if end == len {
                            start = (!self.region).then_some(i + k + 1);
                        }
                    }
                    i += j;
                    let tail = bytes.get(i..).unwrap_or_default();
                    if tail.is_empty() {
                        break;
                    }
                    if let Some(n) = sgr_len(tail) {
                        i += n;
                        continue;
                    }
                    let could_be_sgr = tail.len() < 2
                        || (tail.get(1) == Some(&b'[')
                            && tail
                                .get(2..)
                                .unwrap_or_default()
                                .iter()
                                .all(|&c| c.is_ascii_digit() || c == b';' || c == b':'));
                    if could_be_sgr && end == len {
                        // Possibly an SGR cut in half by the read: the run ends before
                        // it, and the scanner goes on as for any escape.
                        end = i;
                    } else {
                        start = None;
                    }
                    self.st = St::Esc;
                    i += 1;
                }
                St::Str => {
                    let rest = bytes.get(i..).unwrap_or_default();
                    let Some(j) = rest
                        .iter()
                        .position(|&b| matches!(b, BEL | ESC | CAN | SUB))
                    else {
                        break;
                    };
                    i += j;
                    self.st = if bytes.get(i) == Some(&ESC) {
                        St::StrEsc
                    } else {
                        St::Ground
                    };
                    i += 1;
                }
                st => {
                    let b = bytes.get(i).copied().unwrap_or_default();
                    i += 1;
                    self.st = match (st, b) {
                        (_, CAN | SUB) => St::Ground,
                        (St::StrEsc, b'\\') => St::Ground,
                        (_, ESC) => St::Esc,
                        (St::Esc | St::StrEsc, b'[') => St::Csi {
                            params: false,
                            private: false,
                        },
                        (St::Esc | St::StrEsc, b']' | b'P' | b'X' | b'^' | b'_') => St::Str,
                        (St::Esc | St::StrEsc, b'c') => {
                            // RIS resets the scroll region.
                            self.region = false;
                            St::Ground
                        }
                        (St::Esc | St::StrEsc | St::EscInter, 0x20..=0x2f) => St::EscInter,
                        (St::Esc | St::StrEsc | St::EscInter, 0x30..=0x7e) => St::Ground,
                        (St::Csi { private, .. }, b'0'..=b'9') => St::Csi {
                            params: true,
                            private,
                        },
                        (St::Csi { params, .. }, b'<'..=b'?') => St::Csi {
                            params,
                            private: true,
                        },
                        (St::Csi { params, private }, 0x40..=0x7e) => {
                            if b == b'r' && !private {
                                self.region = params;
                            }
                            St::Ground
                        }
                        (st, _) => st,
                    };
                    if self.st == St::Ground && !self.region && end == len {
                        start = Some(i);
                    }
                }
            }
            // Past an SGR cut in half at the end, the run is over: only the state
            // still moves.
            if end == len && (self.st != St::Ground || self.region) {
                start = None;
            }
        }
        let start = start?;
        // Only valid UTF-8 is plain: an invalid byte may be a C1 control.
        let mut from = start;
        loop {
            let text = bytes.get(from..end)?;
            match std::str::from_utf8(text) {
                Ok(_) => return Some((from, end)),
                Err(e) => match e.error_len() {
                    Some(n) => from += e.valid_up_to() + n,
                    None => return Some((from, from + e.valid_up_to())),
                },
            }
        }
    }
}

/// The position just after the line feed that leaves exactly `keep` line feeds after
/// it in `text`, if `text` holds more than `keep`.
fn nth_line_from_end(text: &[u8], keep: usize) -> Option<usize> {
    memchr::memrchr_iter(b'\n', text).nth(keep).map(|i| i + 1)
}

/// The SGR sequences of a plain-text run that still count for the pen at its end:
/// those from the last one that starts with a reset (`ESC [ m`, `ESC [ 0 ...m`).
fn pen_sgrs(text: &[u8]) -> Vec<&[u8]> {
    let mut sgrs: Vec<&[u8]> = Vec::new();
    let mut i = 0;
    while let Some(j) = text.get(i..).and_then(|t| memchr::memchr(ESC, t)) {
        i += j;
        let Some(n) = text.get(i..).and_then(sgr_len) else {
            i += 1;
            continue;
        };
        let sgr = text.get(i..i + n).unwrap_or_default();
        let first = sgr
            .get(2..)
            .unwrap_or_default()
            .split(|&c| c == b';' || c == b':' || c == b'm')
            .next()
            .unwrap_or_default();
        if first.iter().all(|&c| c == b'0') {
            sgrs.clear();
        }
        sgrs.push(sgr);
        i += n;
    }
    sgrs
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
const LAYOUT: Flags = Flags::WRAPLINE
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
    (cell.c == ' ' || cell.c == '\0' || cell.flags.contains(Flags::LEADING_WIDE_CHAR_SPACER))
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
    out.push(if cell.c == '\0' { ' ' } else { cell.c });
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

#[cfg(test)]
mod tests {
    use super::*;

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

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> usize {
            usize::try_from(self.next() % n).unwrap()
        }
    }

    /// Pushes `input` in chunks of random sizes and checks every view against full
    /// parsing; returns the bytes skipped.
    fn same_as_eager(rows: u16, cols: u16, scrollback: usize, input: &[u8], seed: u64) -> u64 {
        let mut rng = Rng(seed);
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
        let mut rng = Rng(seed);
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
            let mut rng = Rng(seed * 7919);
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
        assert_eq!(ansi, "\x1b[0;1ma\n\x1b[0mb");
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
}
