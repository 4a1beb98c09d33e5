//! The compact scrollback (SPEC §4.4, crate docs "Scrollback"): rows that scrolled
//! past alacritty_terminal's window of recent history, kept as text plus attribute
//! runs and rebuilt into alacritty's own rows whenever a capture reads them.
//!
//! alacritty keeps every history row as full cells (24 bytes each, blank ones
//! included); a row here is its cells' characters as UTF-8 up to the last cell that
//! is not a default blank, and one run per stretch of cells with the same colours,
//! flags and extras (combining marks, underline colour, hyperlink). Decoding gives
//! back cells equal to the ones encoded, so every serializer reads the same cells
//! either way. Extras are rare and may be large (a hyperlink's URI): they are not
//! copied but shared, alacritty's own `Arc`s kept in a side table for the rows that
//! have any, so the store never holds more of them than alacritty did.
//!
//! One row's bytes:
//!
//! ```text
//! width, cells, text length   varints
//! text                        UTF-8, one character per cell (`cells` of them)
//! runs                        until they cover `cells`: HEADER [fg] [bg] [flags] [extra] count
//! ```
//!
//! `HEADER` says which of the optional fields follow (a default colour, no flags and
//! no extra are left out); a colour is a tag and its value; `extra` is an index into
//! the row's table of extras.

use std::collections::VecDeque;
use std::sync::Arc;

use alacritty_terminal::grid::{Dimensions, Grid, Row};
use alacritty_terminal::index::{Column, Line, Point};
use alacritty_terminal::term::cell::{Cell, CellExtra, Flags};
use alacritty_terminal::term::{Term, TermMode};
use alacritty_terminal::vte::ansi::{Color, NamedColor, Processor, Rgb};

use crate::effects::Listener;
use crate::emulator::NoSync;

/// History rows alacritty keeps as full cells (the newest; a resize reflows them, and
/// a taller screen takes its new top rows from them).
pub(crate) const WINDOW: usize = 200;
/// Compact rows reflowed in one alacritty grid on a change of width.
const REFLOW_CHUNK: usize = 1024;
/// Rows alacritty's history may grow past [`WINDOW`] before the oldest are moved
/// here; output is parsed in pieces of at most this many line feeds.
const SLACK: usize = 200;

const FG: u8 = 1;
const BG: u8 = 2;
const FLAGS: u8 = 4;
const EXTRA: u8 = 8;

/// Every named colour, in the order their tags index.
const NAMED: [NamedColor; 29] = [
    NamedColor::Black,
    NamedColor::Red,
    NamedColor::Green,
    NamedColor::Yellow,
    NamedColor::Blue,
    NamedColor::Magenta,
    NamedColor::Cyan,
    NamedColor::White,
    NamedColor::BrightBlack,
    NamedColor::BrightRed,
    NamedColor::BrightGreen,
    NamedColor::BrightYellow,
    NamedColor::BrightBlue,
    NamedColor::BrightMagenta,
    NamedColor::BrightCyan,
    NamedColor::BrightWhite,
    NamedColor::Foreground,
    NamedColor::Background,
    NamedColor::Cursor,
    NamedColor::DimBlack,
    NamedColor::DimRed,
    NamedColor::DimGreen,
    NamedColor::DimYellow,
    NamedColor::DimBlue,
    NamedColor::DimMagenta,
    NamedColor::DimCyan,
    NamedColor::DimWhite,
    NamedColor::BrightForeground,
    NamedColor::DimForeground,
];

const DEFAULT_FG: Color = Color::Named(NamedColor::Foreground);
const DEFAULT_BG: Color = Color::Named(NamedColor::Background);

/// The rows older than alacritty's window, oldest first.
#[derive(Debug, Default)]
pub(crate) struct Store {
    rows: VecDeque<Box<[u8]>>,
    /// The extras of the rows that have any, by row number, oldest first.
    extras: VecDeque<(u64, Box<[Arc<CellExtra>]>)>,
    /// The row number of `rows[0]`.
    first: u64,
    /// Encoding scratch, reused.
    buf: Vec<u8>,
    scratch: Scratch,
}

impl Store {
    pub(crate) fn len(&self) -> usize {
        self.rows.len()
    }

    /// Appends `row` as the newest compact row.
    pub(crate) fn push(&mut self, row: &Row<Cell>) {
        self.buf.clear();
        self.scratch.table.clear();
        encode(row, &mut self.buf, &mut self.scratch);
        if !self.scratch.table.is_empty() {
            let number = self.first + self.rows.len() as u64;
            self.extras
                .push_back((number, self.scratch.table.drain(..).collect()));
        }
        self.rows.push_back(Box::from(&self.buf[..]));
    }

    /// Drops the oldest rows until at most `keep` remain.
    pub(crate) fn keep_newest(&mut self, keep: usize) {
        let drop = self.rows.len().saturating_sub(keep);
        self.rows.drain(..drop);
        self.first += drop as u64;
        while self.extras.front().is_some_and(|(n, _)| *n < self.first) {
            self.extras.pop_front();
        }
        if self.rows.is_empty() {
            self.rows = VecDeque::new();
            self.extras = VecDeque::new();
        }
    }

    /// Decodes row `i` (0 is the oldest) into `into`.
    pub(crate) fn get(&self, i: usize, into: &mut Row<Cell>) {
        let number = self.first + i as u64;
        let table = self
            .extras
            .binary_search_by_key(&number, |(n, _)| *n)
            .ok()
            .and_then(|at| self.extras.get(at))
            .map_or(&[][..], |(_, t)| &t[..]);
        decode(self.rows.get(i).map_or(&[][..], |b| &b[..]), table, into);
    }

    /// Reflows every row to `columns`, as alacritty reflows its own history: the
    /// rows are rebuilt into grids of alacritty's own, a chunk of lines at a time
    /// ([`REFLOW_CHUNK`] rows, so a resize never holds the whole scrollback in full
    /// cells), which are resized and stored again. Rows past `limit` are dropped,
    /// the oldest first. Compaction never splits a wrapped line between this store
    /// and alacritty's window ([`History::compact`]), and a chunk ends at a line's
    /// end, so each line is reflowed whole (one longer than eight chunks is cut).
    pub(crate) fn reflow(&mut self, columns: usize, limit: usize) {
        self.reflow_in_chunks(columns, limit, REFLOW_CHUNK);
    }

    pub(crate) fn reflow_in_chunks(&mut self, columns: usize, limit: usize, chunk: usize) {
        let n = self.rows.len();
        let Some(width) = (0..n).find_map(|i| {
            let mut row = Row::new(1);
            self.get(i, &mut row);
            (row.len() > 0).then_some(row.len())
        }) else {
            return;
        };
        if width == columns || columns == 0 {
            return;
        }
        // No reflow makes more rows than there are cells, plus one per empty row.
        let most = n.saturating_mul(width).saturating_add(n);
        let mut store = Store {
            first: self.first,
            ..Store::default()
        };
        let mut row = Row::new(width);
        let mut i = 0;
        while i < n {
            // The rows go into the grid's history through its one screen line, on
            // which the cursor stays: alacritty's reflow treats them as history.
            let mut grid: Grid<Cell> = Grid::new(1, width, most);
            let mut taken = 0;
            loop {
                self.get(i, &mut row);
                match row.len().cmp(&width) {
                    std::cmp::Ordering::Less => row.grow(width),
                    std::cmp::Ordering::Greater => {
                        let _ = row.shrink(width);
                    }
                    std::cmp::Ordering::Equal => {}
                }
                let line_ends = !wraps(&row);
                grid[Line(0)] = std::mem::replace(&mut row, Row::new(width));
                grid.scroll_up::<Color>(&(Line(0)..Line(1)), 1);
                i += 1;
                taken += 1;
                if i >= n || (taken >= chunk && line_ends) || taken >= chunk.saturating_mul(8) {
                    break;
                }
            }
            grid.cursor.point = Point::new(Line(0), Column(0));
            grid.resize::<Color>(true, 1, columns);
            let history = grid.history_size();
            let oldest = -i32::try_from(history).unwrap_or(i32::MAX);
            for k in 0..history {
                store.push(&grid[Line(oldest.saturating_add(i32::try_from(k).unwrap_or(0)))]);
            }
        }
        store.keep_newest(limit);
        *self = store;
    }

    /// Frees the encoding scratch and the rows' spare capacity (a store that
    /// stops growing).
    pub(crate) fn shrink(&mut self) {
        self.buf = Vec::new();
        self.scratch = Scratch::default();
        self.rows.shrink_to_fit();
        self.extras.shrink_to_fit();
    }

    /// Bytes held, allocation overhead and shared extras aside (for the benchmarks).
    pub(crate) fn bytes(&self) -> usize {
        self.rows.iter().map(|r| r.len()).sum::<usize>()
            + self.rows.capacity() * std::mem::size_of::<Box<[u8]>>()
    }
}

/// The scrollback: alacritty's window of recent history plus the compact rows
/// older than it, at most `scrollback` rows in all (the newest).
#[derive(Debug)]
pub(crate) struct History {
    pub(crate) store: Store,
    /// Lines kept above the screen at most.
    pub(crate) scrollback: usize,
    /// `None`: alacritty holds the whole scrollback (the reference).
    window: Option<usize>,
    /// Rows were moved here since alacritty's row cache was last released.
    moved: bool,
}

impl History {
    pub(crate) fn new(scrollback: usize, compact: bool) -> Self {
        Self {
            store: Store::default(),
            scrollback,
            window: compact.then_some(WINDOW),
            moved: false,
        }
    }

    /// Parses `bytes` into `term`, in pieces after each of which the rows past the
    /// window move here. Returns alacritty's history length (main screen; 0 on the
    /// alternate one) before the last piece.
    pub(crate) fn advance(
        &mut self,
        term: &mut Term<Listener>,
        parser: &mut Processor<NoSync>,
        bytes: &[u8],
    ) -> usize {
        if self.window.is_none() {
            let before = main_history(term);
            parser.advance(term, bytes);
            return before;
        }
        // At most SLACK line feeds, and at most SLACK rows of wrapped text, per piece.
        let max = SLACK.saturating_mul(term.grid().columns()).max(4096);
        let mut rest = bytes;
        loop {
            let head = rest.get(..rest.len().min(max)).unwrap_or_default();
            let cut = memchr::memchr_iter(b'\n', head)
                .nth(SLACK - 1)
                .map_or(head.len(), |i| i + 1);
            let (piece, tail) = rest.split_at(cut);
            let before = main_history(term);
            parser.advance(term, piece);
            self.compact(term);
            rest = tail;
            if rest.is_empty() {
                return before;
            }
        }
    }

    /// Moves the rows past the window here and drops what the scrollback no longer
    /// holds. On the alternate screen alacritty's main grid is out of reach: that
    /// waits until the program is back on the main screen.
    pub(crate) fn compact(&mut self, term: &mut Term<Listener>) {
        if term.mode().contains(TermMode::ALT_SCREEN) {
            return;
        }
        let grid = term.grid_mut();
        let history = grid.history_size();
        if let Some(window) = self.window.filter(|&w| history > w + SLACK) {
            let oldest = -i32::try_from(history).unwrap_or(i32::MAX);
            let line = |i: usize| Line(oldest.saturating_add(i32::try_from(i).unwrap_or(0)));
            // Up to the end of a line: a wrapped line is never split between here and
            // alacritty's window (so each side reflows it whole), unless it is longer
            // than everything there is to move.
            let due = history - window;
            let moved = (1..=due)
                .rev()
                .find(|&k| !wraps(&grid[line(k - 1)]))
                .unwrap_or(due);
            for i in 0..moved {
                self.store.push(&grid[line(i)]);
            }
            // Drops the oldest rows from alacritty's history, then restores its limit.
            grid.update_history(history - moved);
            grid.update_history(self.scrollback);
            self.moved = true;
        }
        let history = grid.history_size();
        if self.store.len() + history > self.scrollback {
            self.store
                .keep_newest(self.scrollback.saturating_sub(history));
        }
    }

    /// After a sequence that may clear the scrollback (`CSI 3 J`, RIS: `likely`
    /// says the side scanner read it as one): if alacritty cleared its history, or had
    /// none to clear, the compact rows go too. `before` is [`advance`](Self::advance)'s.
    pub(crate) fn after_clear(&mut self, term: &Term<Listener>, before: usize, likely: bool) {
        if term.mode().contains(TermMode::ALT_SCREEN) || term.grid().history_size() > 0 {
            return;
        }
        if before > 0 || likely {
            self.store.keep_newest(0);
        }
    }

    /// Whether [`release`](Self::release) would release anything.
    pub(crate) fn releasable(&self, term: &Term<Listener>) -> bool {
        self.moved && !term.mode().contains(TermMode::ALT_SCREEN)
    }

    /// Releases the full-cell rows alacritty caches beyond its history (up to a
    /// thousand) once rows have moved here: the window does not need them. Not
    /// after every parse: alacritty allocates the thousand again at the next line
    /// feed. Returns whether it released them.
    pub(crate) fn release(&mut self, term: &mut Term<Listener>) -> bool {
        if !self.releasable(term) {
            return false;
        }
        term.grid_mut().truncate();
        self.moved = false;
        true
    }

    /// Compact rows a capture shows: none on the alternate screen, which has no
    /// scrollback.
    pub(crate) fn shown(&self, term: &Term<Listener>) -> usize {
        if term.mode().contains(TermMode::ALT_SCREEN) {
            0
        } else {
            self.store.len()
        }
    }
}

/// Whether `row` continues on the next one (its last cell wraps).
fn wraps(row: &Row<Cell>) -> bool {
    row.len() > 0 && row[Column(row.len() - 1)].flags.contains(Flags::WRAPLINE)
}

fn main_history(term: &Term<Listener>) -> usize {
    if term.mode().contains(TermMode::ALT_SCREEN) {
        0
    } else {
        term.grid().history_size()
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: usize) {
    while v >= 0x80 {
        out.push(u8::try_from(v & 0x7f).unwrap_or_default() | 0x80);
        v >>= 7;
    }
    out.push(u8::try_from(v).unwrap_or_default());
}

fn put_color(out: &mut Vec<u8>, c: Color) {
    match c {
        Color::Named(n) => {
            let i = NAMED.iter().position(|&x| x == n).unwrap_or(0);
            out.push(0);
            out.push(u8::try_from(i).unwrap_or_default());
        }
        Color::Indexed(i) => {
            out.push(1);
            out.push(i);
        }
        Color::Spec(Rgb { r, g, b }) => out.extend_from_slice(&[2, r, g, b]),
    }
}

/// The style a run shares: everything of a cell but its character.
fn same_style(a: &Cell, b: &Cell) -> bool {
    a.fg == b.fg && a.bg == b.bg && a.flags == b.flags && a.extra == b.extra
}

/// Encoding scratch, reused from row to row.
#[derive(Debug, Default)]
struct Scratch {
    text: Vec<u8>,
    runs: Vec<u8>,
    table: Vec<Arc<CellExtra>>,
}

fn is_default(cell: &Cell) -> bool {
    cell.c == ' '
        && cell.flags.is_empty()
        && cell.extra.is_none()
        && cell.fg == DEFAULT_FG
        && cell.bg == DEFAULT_BG
}

/// One pass over the cells (after finding the trailing default ones from the end):
/// this runs for every row that scrolls past the window.
fn encode(row: &Row<Cell>, out: &mut Vec<u8>, s: &mut Scratch) {
    let all = &row[..];
    let n = all
        .iter()
        .rposition(|c| !is_default(c))
        .map_or(0, |i| i + 1);
    let cells = all.get(..n).unwrap_or_default();
    s.text.clear();
    s.runs.clear();
    let mut start = 0;
    for (i, cell) in cells.iter().enumerate() {
        if cell.c.is_ascii() {
            s.text.push(cell.c as u8);
        } else {
            let mut utf8 = [0u8; 4];
            s.text
                .extend_from_slice(cell.c.encode_utf8(&mut utf8).as_bytes());
        }
        let head = &cells[start];
        if i > start && !same_style(cell, head) {
            encode_style(head, &mut s.runs, &mut s.table);
            put_varint(&mut s.runs, i - start);
            start = i;
        }
    }
    if let Some(head) = cells.get(start) {
        encode_style(head, &mut s.runs, &mut s.table);
        put_varint(&mut s.runs, n - start);
    }
    put_varint(out, all.len());
    put_varint(out, n);
    put_varint(out, s.text.len());
    out.extend_from_slice(&s.text);
    out.extend_from_slice(&s.runs);
}

fn encode_style(cell: &Cell, out: &mut Vec<u8>, table: &mut Vec<Arc<CellExtra>>) {
    let mut header = 0;
    if cell.fg != DEFAULT_FG {
        header |= FG;
    }
    if cell.bg != DEFAULT_BG {
        header |= BG;
    }
    if !cell.flags.is_empty() {
        header |= FLAGS;
    }
    if cell.extra.is_some() {
        header |= EXTRA;
    }
    out.push(header);
    if header & FG != 0 {
        put_color(out, cell.fg);
    }
    if header & BG != 0 {
        put_color(out, cell.bg);
    }
    if header & FLAGS != 0 {
        out.extend_from_slice(&cell.flags.bits().to_le_bytes());
    }
    if let Some(extra) = &cell.extra {
        let at = table
            .iter()
            .position(|t| Arc::ptr_eq(t, extra))
            .unwrap_or_else(|| {
                table.push(Arc::clone(extra));
                table.len() - 1
            });
        put_varint(out, at);
    }
}

/// Reads what [`encode`] wrote. The bytes are this module's own; a malformed row
/// (never written) decodes to blanks rather than panicking.
struct Reader<'a>(&'a [u8], &'a [Arc<CellExtra>]);

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }

    fn varint(&mut self) -> Option<usize> {
        let mut v = 0usize;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= usize::from(b & 0x7f).checked_shl(shift)?;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.0.len() {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn color(&mut self) -> Option<Color> {
        Some(match self.byte()? {
            0 => Color::Named(*NAMED.get(usize::from(self.byte()?))?),
            1 => Color::Indexed(self.byte()?),
            _ => {
                let b = self.take(3)?;
                Color::Spec(Rgb {
                    r: b[0],
                    g: b[1],
                    b: b[2],
                })
            }
        })
    }

    /// A run's style as a cell (its character left blank).
    fn style(&mut self) -> Option<Cell> {
        let header = self.byte()?;
        let mut cell = Cell::default();
        if header & FG != 0 {
            cell.fg = self.color()?;
        }
        if header & BG != 0 {
            cell.bg = self.color()?;
        }
        if header & FLAGS != 0 {
            let b = self.take(2)?;
            cell.flags = Flags::from_bits_retain(u16::from_le_bytes([b[0], b[1]]));
        }
        if header & EXTRA != 0 {
            let at = self.varint()?;
            cell.extra = Some(Arc::clone(self.1.get(at)?));
        }
        Some(cell)
    }
}

fn decode(bytes: &[u8], extras: &[Arc<CellExtra>], into: &mut Row<Cell>) {
    let mut r = Reader(bytes, extras);
    let width = r.varint().unwrap_or(0).max(1);
    if into.len() != width {
        *into = Row::new(width);
    }
    let cells = &mut into[..];
    let filled = decode_cells(&mut r, cells).unwrap_or(0);
    for cell in cells.get_mut(filled..).unwrap_or_default() {
        *cell = Cell::default();
    }
}

/// Writes the encoded cells into `row`; returns how many.
fn decode_cells(r: &mut Reader<'_>, row: &mut [Cell]) -> Option<usize> {
    let cells = r.varint()?.min(row.len());
    let len = r.varint()?;
    let text = std::str::from_utf8(r.take(len)?).ok()?;
    let mut chars = text.chars();
    let mut at = 0;
    while at < cells {
        let style = r.style()?;
        let n = r.varint()?;
        for _ in 0..n.min(cells - at) {
            let slot = row.get_mut(at)?;
            slot.clone_from(&style);
            slot.c = chars.next()?;
            at += 1;
        }
    }
    Some(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Emulator;
    use alacritty_terminal::grid::Dimensions;
    use alacritty_terminal::index::{Column, Line};

    /// Every row of an uncompacted emulator's grid survives encoding cell for cell.
    fn round_trips(input: &[u8], cols: u16) {
        let mut e = Emulator::new_uncompacted(4, cols, 1000);
        e.process(input);
        let grid = e.term.grid();
        let history = i32::try_from(grid.history_size()).unwrap();
        let screen = i32::try_from(grid.screen_lines()).unwrap();
        let mut store = Store::default();
        let mut back = Row::new(1);
        for line in -history..screen {
            let row = &grid[Line(line)];
            store.push(row);
            store.get(store.len() - 1, &mut back);
            assert_eq!(back.len(), row.len());
            for c in 0..row.len() {
                assert_eq!(back[Column(c)], row[Column(c)], "line {line} col {c}");
            }
        }
    }

    #[test]
    fn rows_round_trip_cell_for_cell() {
        round_trips(
            "plain\r\n\x1b[1;31mbold red\x1b[m \x1b[38;5;200;48;2;1;2;3mrgb\x1b[m\r\n\
             \x1b[4;7;9mul-inv-strike\x1b[m wide \u{4e2d}\u{6587} e\u{301} \u{1f600}\r\n\
             \x1b[4:3m\x1b[58;2;9;8;7mcurly\x1b[m \x1b]8;id=x;http://a/\x07link\x1b]8;;\x07\r\n\
             a\tb\t\x1b[44m  bg  \x1b[K\x1b[m\r\n\x1b[2;3;8mdim\x1b[m 0123456789abcdef wrapped past the edge\r\n\
             \x1b[41m\x1b[2K\x1b[m\r\n1234567\u{4e2d}x"
                .as_bytes(),
            8,
        );
    }

    #[test]
    fn extras_are_shared_not_copied() {
        // Alternating long hyperlinks: alacritty shares two; so does the store.
        let uri = "x".repeat(100_000);
        let mut input = String::new();
        for i in 0..10 {
            input.push_str(&format!(
                "\x1b]8;;http://{i}/{uri}\x07a\x1b]8;;http://b/{uri}\x07b"
            ));
        }
        let mut e = Emulator::new_uncompacted(4, 40, 100);
        e.process(input.as_bytes());
        let row = &e.term.grid()[Line(0)];
        let mut store = Store::default();
        store.push(row);
        assert!(store.bytes() < 1000, "{}", store.bytes());
        let mut back = Row::new(1);
        store.get(0, &mut back);
        for c in 0..20 {
            let (a, b) = (&row[Column(c)].extra, &back[Column(c)].extra);
            assert!(
                Arc::ptr_eq(a.as_ref().unwrap(), b.as_ref().unwrap()),
                "col {c}"
            );
        }
        // Rows keep their own extras as older ones are dropped.
        store.push(&Row::new(40));
        store.push(row);
        store.keep_newest(2);
        store.get(0, &mut back);
        assert!(back[Column(0)].extra.is_none());
        store.get(1, &mut back);
        assert_eq!(back[Column(3)], row[Column(3)]);
    }

    #[test]
    fn a_row_of_blanks_is_a_few_bytes() {
        let mut store = Store::default();
        store.push(&Row::new(80));
        assert!(store.bytes() < 80, "{}", store.bytes());
        let mut back = Row::new(3);
        store.get(0, &mut back);
        assert_eq!(back.len(), 80);
        assert!((0..80).all(|c| back[Column(c)] == Cell::default()));
    }

    #[test]
    fn malformed_bytes_decode_to_blanks() {
        let mut back = Row::new(3);
        for bytes in [
            &[][..],
            &[5, 9, 200],
            &[3, 3, 3, b'a'],
            &[3, 1, 1, b'a', 0xff],
        ] {
            decode(bytes, &[], &mut back);
            assert!(back.len() >= 1);
        }
    }
}
