//! The emulator wrapper: alacritty_terminal's grid and parser behind a lazy output
//! queue with fast-forward (crate docs).

use std::time::Duration;

use alacritty_terminal::grid::{Dimensions, Row};
use alacritty_terminal::index::Line;
use alacritty_terminal::term::cell::Cell;
use alacritty_terminal::term::{Config, Term, TermMode};
use alacritty_terminal::vte::ansi::{Processor, Timeout};

use crate::compact::History;
use crate::effects::{Effects, Listener, TermEvent};
use crate::hibernate::{self, Frozen};
use crate::scan::{nth_line_from_end, pen_sgrs, Scan};
use crate::side::{Seq, Side};

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
    pub(crate) term: Term<Listener>,
    pub(crate) parser: Processor<NoSync>,
    /// The scrollback beyond alacritty's window of recent rows, and its limit.
    pub(crate) history: History,
    /// Output pushed but not applied yet, in order.
    pub(crate) queue: Vec<u8>,
    /// The scanner's state at the start of `queue`.
    pub(crate) scan: Scan,
    /// Bytes dropped unparsed by fast-forward, for the benchmarks and the log.
    pub(crate) skipped: u64,
    /// The queue length that triggers fast-forward: four times what the last one
    /// kept (so each byte is scanned about 1.3 times), within `QUEUE_MIN..QUEUE_MAX`.
    pub(crate) limit: usize,
    /// Finds what the parser drops (XTVERSION, notifications), in order.
    pub(crate) side: Side,
    /// Answers and events waiting to be collected.
    pub(crate) fx: Effects,
    /// The grids while hibernated (SPEC §4.4, "Hibernation"; `hibernate`).
    frozen: Option<Box<Frozen>>,
    /// The terminal was resized on the alternate screen since the main screen was
    /// last seen: the main grid's cursors may differ (`hibernate`).
    main_moved: bool,
    /// The alternate screen may have been used: until then its grid is as
    /// alacritty made it, and may hibernate from the main screen (`hibernate`).
    alt_used: bool,
}

/// Parses `bytes` into `term`, acting in order on what the side scanner finds, and
/// resolves the answers and events the parser asked for.
fn apply(
    term: &mut Term<Listener>,
    parser: &mut Processor<NoSync>,
    history: &mut History,
    side: &mut Side,
    fx: &mut Effects,
    bytes: &[u8],
) {
    let mut hits = Vec::new();
    side.feed(bytes, |end, seq| hits.push((end, seq)));
    let mut from = 0;
    for (end, seq) in hits {
        let before = history.advance(term, parser, bytes.get(from..end).unwrap_or_default());
        collect(term, fx);
        from = end;
        match seq {
            Seq::Clear { likely } => history.after_clear(term, before, likely),
            // An OSC past its bound: the parser never holds the rest (SPEC §4.4).
            Seq::Skip { len } => from = end + len,
            seq => fx.side(seq),
        }
    }
    history.advance(term, parser, bytes.get(from..).unwrap_or_default());
    collect(term, fx);
}

/// Whether `bytes`, just applied, may have used the alternate screen: the
/// terminal is on it, or they hold the number of its mode (1049, the one alacritty
/// knows; a sequence cut between two applies either leaves the terminal there or
/// holds it whole in the second).
fn used_alt(term: &Term<Listener>, bytes: &[u8]) -> bool {
    term.mode().contains(TermMode::ALT_SCREEN) || memchr::memmem::find(bytes, b"1049").is_some()
}

fn collect(term: &Term<Listener>, fx: &mut Effects) {
    let grid = term.grid();
    let shown = term.mode().contains(TermMode::SHOW_CURSOR);
    fx.collect(term.colors(), grid.screen_lines(), grid.columns(), shown);
}

impl std::fmt::Debug for Emulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let grid = self.term.grid();
        f.debug_struct("Emulator")
            .field("rows", &grid.screen_lines())
            .field("cols", &grid.columns())
            .field("history", &grid.history_size())
            .field("compact", &self.history.store.len())
            .field("hibernated", &self.frozen.is_some())
            .finish()
    }
}

impl Emulator {
    /// A blank `rows` x `cols` terminal keeping at most `scrollback` lines above the
    /// screen (all but the newest few hundred in the compact store: crate docs).
    pub fn new(rows: u16, cols: u16, scrollback: usize) -> Self {
        Self::with_history(rows, cols, History::new(scrollback, true))
    }

    /// Like [`new`](Self::new), with alacritty holding the whole scrollback as full
    /// rows: the reference the compact store is tested and measured against.
    #[doc(hidden)]
    pub fn new_uncompacted(rows: u16, cols: u16, scrollback: usize) -> Self {
        Self::with_history(rows, cols, History::new(scrollback, false))
    }

    fn with_history(rows: u16, cols: u16, history: History) -> Self {
        let scrollback = history.scrollback;
        let config = Config {
            scrolling_history: scrollback,
            ..Config::default()
        };
        let fx = Effects::default();
        Self {
            term: Term::new(config, &Size::new(rows, cols), fx.listener.clone()),
            parser: Processor::new(),
            history,
            queue: Vec::new(),
            scan: Scan::default(),
            skipped: 0,
            limit: QUEUE_MIN,
            side: Side::default(),
            fx,
            frozen: None,
            main_moved: false,
            alt_used: false,
        }
    }

    /// Whether the emulator answers the program's terminal queries (DA, DSR, ...;
    /// SPEC §4.4): only while no read-write client's terminal does. Everything
    /// queued so far is applied under the previous setting first, so each query is
    /// answered by whoever was attached when it was output.
    pub fn set_answering(&mut self, on: bool) {
        if self.fx.answering != on {
            self.flush();
            self.fx.answering = on;
        }
    }

    /// Takes the answers to the program's queries, to be written to its input.
    pub fn take_replies(&mut self) -> Vec<u8> {
        self.fx.reply_ends.clear();
        std::mem::take(&mut self.fx.replies)
    }

    /// Takes the answers to the program's queries one by one, in order (so a bound
    /// on them drops whole answers, SPEC §8).
    pub fn take_answers(&mut self) -> Vec<Vec<u8>> {
        let ends = std::mem::take(&mut self.fx.reply_ends);
        let all = std::mem::take(&mut self.fx.replies);
        let mut start = 0;
        let mut out = Vec::with_capacity(ends.len());
        for end in ends {
            if let Some(a) = all.get(start..end) {
                out.push(a.to_vec());
            }
            start = end;
        }
        out
    }

    /// Takes the terminal events seen so far (SPEC §9.9).
    pub fn take_events(&mut self) -> Vec<TermEvent> {
        std::mem::take(&mut self.fx.events)
    }

    /// Applies program output at once.
    pub fn process(&mut self, bytes: &[u8]) {
        self.push(bytes);
        self.flush();
    }

    /// Queues program output; applies the queue once it passes the threshold (see
    /// the module docs).
    pub fn push(&mut self, bytes: &[u8]) {
        self.wake();
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
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Applies everything queued.
    pub fn flush(&mut self) {
        self.wake();
        if self.queue.is_empty() {
            return;
        }
        self.scan.run(&self.queue);
        apply(
            &mut self.term,
            &mut self.parser,
            &mut self.history,
            &mut self.side,
            &mut self.fx,
            &self.queue,
        );
        self.alt_used |= used_alt(&self.term, &self.queue);
        self.queue.clear();
        if self.queue.capacity() > QUEUE_MIN {
            self.queue.shrink_to(64 * 1024);
        }
        if !self.term.mode().contains(TermMode::ALT_SCREEN) {
            self.main_moved = false;
        }
    }

    /// Line feeds a skippable run must keep: they push everything before them out.
    fn keep_lines(&self) -> usize {
        self.history
            .scrollback
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
                    apply(
                        &mut self.term,
                        &mut self.parser,
                        &mut self.history,
                        &mut self.side,
                        &mut self.fx,
                        before,
                    );
                    self.alt_used |= used_alt(&self.term, before);
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
        apply(
            &mut self.term,
            &mut self.parser,
            &mut self.history,
            &mut self.side,
            &mut self.fx,
            before,
        );
        self.alt_used |= used_alt(&self.term, before);
        let dropped = rest.get(..cut - start).unwrap_or_default();
        for sgr in pen_sgrs(dropped) {
            self.parser.advance(&mut self.term, sgr);
        }
        // Plain text ends where it started: in ground state.
        self.side.reset();
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

    /// Resizes the screen; a change of width reflows every line, the compact
    /// scrollback's as alacritty's (SPEC §4.4).
    pub fn resize(&mut self, rows: u16, cols: u16) {
        self.flush();
        self.main_moved = self.term.mode().contains(TermMode::ALT_SCREEN);
        if usize::from(cols) != self.term.grid().columns() {
            let limit = self.history.scrollback;
            self.history.store.reflow(usize::from(cols), limit);
        }
        self.term.resize(Size::new(rows, cols));
        self.history.compact(&mut self.term);
        // Resizing resets the scroll region.
        self.scan.region = false;
    }

    /// The cursor, 0-based (row, col), top-left is (0, 0).
    pub fn cursor(&mut self) -> (u16, u16) {
        let p = match &self.frozen {
            // Read without waking: the cursor is kept as it is.
            Some(frozen) if self.queue.is_empty() => frozen.cursor().point,
            _ => {
                self.flush();
                self.term.grid().cursor.point
            }
        };
        (
            u16::try_from(p.line.0).unwrap_or(0),
            u16::try_from(p.column.0).unwrap_or(u16::MAX),
        )
    }

    /// Whether the program enabled bracketed paste (mode 2004), after the
    /// queued output.
    pub fn bracketed_paste(&mut self) -> bool {
        if self.frozen.is_none() || !self.queue.is_empty() {
            self.flush();
        }
        self.term.mode().contains(TermMode::BRACKETED_PASTE)
    }

    /// Lines kept above the screen.
    #[cfg(test)]
    pub fn history(&mut self) -> usize {
        self.flush();
        self.history_len()
    }

    /// Rows above the screen a capture shows: the compact ones, then alacritty's.
    pub(crate) fn history_len(&self) -> usize {
        self.history.shown(&self.term) + self.term.grid().history_size()
    }

    /// Calls `each(index, row)` for every row from the oldest of the scrollback
    /// (`full`) or the screen's top to the screen's bottom; `index` counts from the
    /// oldest scrollback row. Compact rows are rebuilt as alacritty's.
    pub(crate) fn each_row(&self, full: bool, mut each: impl FnMut(usize, &Row<Cell>)) {
        let grid = self.term.grid();
        let stored = self.history.shown(&self.term);
        let history = grid.history_size();
        let mut index = 0;
        if full {
            let mut row = Row::new(1);
            for i in 0..stored {
                self.history.store.get(i, &mut row);
                each(index, &row);
                index += 1;
            }
        } else {
            index = stored + history;
        }
        let top = if full {
            -i32::try_from(history).unwrap_or(0)
        } else {
            0
        };
        let bottom = i32::try_from(grid.screen_lines()).unwrap_or(i32::MAX);
        for line in top..bottom {
            each(index, &grid[Line(line)]);
            index += 1;
        }
    }

    /// Whether [`release`](Self::release) has memory to release: rows moved to the
    /// compact scrollback since it last ran.
    pub fn releasable(&self) -> bool {
        self.frozen.is_none() && self.history.releasable(&self.term)
    }

    /// Applies everything queued, then frees the full-cell rows alacritty keeps in
    /// reserve once rows have moved to the compact scrollback (for when the program
    /// is quiet; under a flood they would be allocated again at once). Returns
    /// whether it freed them: the moment for a daemon to hand free memory back to
    /// the system.
    pub fn release(&mut self) -> bool {
        self.flush();
        self.history.release(&mut self.term)
    }

    /// Heap bytes the compact scrollback holds (allocation overhead aside), and its
    /// rows: for the benchmarks.
    #[doc(hidden)]
    pub fn compact_bytes(&mut self) -> (usize, usize) {
        self.flush();
        (self.history.store.bytes(), self.history.store.len())
    }

    /// Hibernates (SPEC §4.4, "Hibernation"): applies everything queued, then, in
    /// the parser's ground state, moves the screen, the alternate screen and
    /// alacritty's window of history into compact rows and frees alacritty's full
    /// cells and the spare queue. Every later reader, output or resize wakes it
    /// first ([`wake`](Self::wake)); captures, modes, the cursor and query answers
    /// are the same as if it never slept. Returns whether it is hibernated.
    pub fn hibernate(&mut self) -> bool {
        self.flush();
        if self.frozen.is_some() {
            return true;
        }
        if !self.scan.ground() {
            return false;
        }
        self.history.release(&mut self.term);
        let Some(frozen) = hibernate::freeze(
            &mut self.term,
            self.main_moved,
            !self.alt_used,
            self.history.scrollback,
        ) else {
            return false;
        };
        self.frozen = Some(Box::new(frozen));
        self.queue = Vec::new();
        true
    }

    /// Rebuilds the grids of a hibernated terminal (nothing if awake).
    pub fn wake(&mut self) {
        if let Some(frozen) = self.frozen.take() {
            hibernate::thaw(&mut self.term, *frozen);
        }
    }

    /// Whether it is hibernated.
    pub fn hibernated(&self) -> bool {
        self.frozen.is_some()
    }
}
