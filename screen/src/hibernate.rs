//! Hibernation (SPEC §4.4, "Hibernation"): a quiet session's grids, the live screen
//! and the alternate one with alacritty's window of recent history, move into
//! compact rows (`compact::Store`), and alacritty's full cells are dropped. Only
//! the grids' storage goes: the rest of alacritty's terminal (modes, charsets, tab
//! stops, the scroll region, the title, the palette) and the parser stay as they
//! are, so nothing but the cells is ever rebuilt.
//!
//! alacritty reaches the inactive grid only through `swap_alt`, which has side
//! effects when it enters the alternate screen: the main grid's saved cursor
//! becomes its cursor, and the alternate grid takes that cursor and is reset
//! (its first `occ` cells of each row only: what lies beyond stays, and a wider
//! terminal shows it again). Each swap here is made so that they fall on
//! placeholders or on state nothing reads, which limits what may hibernate:
//! - the alternate grid held while the main screen is shown, only if the
//!   alternate screen was never used (a reset then changes nothing);
//! - the main grid held while the alternate screen is shown, only while its saved
//!   cursor equals its cursor (always, unless the terminal was resized on the
//!   alternate screen).
//!
//! The other grids stay as they are in alacritty.

use alacritty_terminal::grid::{Cursor, Dimensions, Grid, Row};
use alacritty_terminal::index::Line;
use alacritty_terminal::term::cell::Cell;
use alacritty_terminal::term::{Term, TermMode};
use alacritty_terminal::vte::ansi::Color;

use crate::compact::Store;
use crate::effects::Listener;

/// One grid in compact rows: alacritty's history (oldest first), then the screen.
#[derive(Debug)]
struct FrozenGrid {
    rows: Store,
    /// Each row's count of cells alacritty resets (`occ`, see `occupied`).
    occupied: Vec<u16>,
    history: usize,
    lines: usize,
    columns: usize,
    max_scroll: usize,
    cursor: Cursor<Cell>,
    saved: Cursor<Cell>,
}

impl FrozenGrid {
    fn freeze(grid: &Grid<Cell>, max_scroll: usize) -> Self {
        let history = grid.history_size();
        let lines = grid.screen_lines();
        let mut rows = Store::default();
        let mut occupied = Vec::with_capacity(history + lines);
        let top = -i32::try_from(history).unwrap_or(0);
        let bottom = i32::try_from(lines).unwrap_or(i32::MAX);
        for line in top..bottom {
            let row = &grid[Line(line)];
            rows.push(row);
            occupied.push(occupied_cells(row));
        }
        rows.shrink();
        Self {
            rows,
            occupied,
            history,
            lines,
            columns: grid.columns(),
            max_scroll,
            cursor: grid.cursor.clone(),
            saved: grid.saved_cursor.clone(),
        }
    }

    /// The grid again: history rows enter through the top screen line, as
    /// alacritty's own scrolling puts them there; then the screen's rows.
    fn thaw(self) -> Grid<Cell> {
        let mut grid = Grid::new(self.lines, self.columns, self.max_scroll);
        let screen = Line(0)..Line(i32::try_from(self.lines).unwrap_or(i32::MAX));
        for i in 0..self.history {
            grid[Line(0)] = self.row(i);
            grid.scroll_up::<Color>(&screen, 1);
        }
        for i in 0..self.lines {
            let line = Line(i32::try_from(i).unwrap_or(0));
            grid[line] = self.row(self.history + i);
        }
        // The rows alacritty reserved while scrolling: not part of the grid.
        grid.truncate();
        grid.cursor = self.cursor;
        grid.saved_cursor = self.saved;
        grid
    }
}

impl FrozenGrid {
    /// Row `i` as alacritty held it: its cells and how many of them a reset clears.
    fn row(&self, i: usize) -> Row<Cell> {
        let mut row = Row::new(1);
        self.rows.get(i, &mut row);
        let len = row.len();
        let occupied = self.occupied.get(i).map_or(len, |&n| usize::from(n));
        Row::from_vec(row.front_split_off(len), occupied.min(len))
    }
}

/// alacritty's `occ` of `row`: how many of its first cells a reset clears (all,
/// when the template's background differs from its last cell's), the rest left
/// as they are (visible again if the terminal grows wider), and what reflow and
/// splitting count from. It is not public; the row's `Debug` form ends with it, so
/// that is read, keeping only the form's tail.
fn occupied_cells(row: &Row<Cell>) -> u16 {
    use std::fmt::Write as _;
    let mut tail = Tail::default();
    if write!(tail, "{row:?}").is_err() {
        return u16::try_from(row.len()).unwrap_or(u16::MAX);
    }
    tail.occ()
        .unwrap_or_else(|| u16::try_from(row.len()).unwrap_or(u16::MAX))
}

/// The last bytes written to it.
#[derive(Default)]
struct Tail {
    buf: [u8; 32],
    len: usize,
}

impl std::fmt::Write for Tail {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let bytes = s.as_bytes();
        let cap = self.buf.len();
        if bytes.len() >= cap {
            self.buf.copy_from_slice(&bytes[bytes.len() - cap..]);
            self.len = cap;
            return Ok(());
        }
        let keep = (cap - bytes.len()).min(self.len);
        self.buf.copy_within(self.len - keep..self.len, 0);
        self.buf[keep..keep + bytes.len()].copy_from_slice(bytes);
        self.len = keep + bytes.len();
        Ok(())
    }
}

impl Tail {
    /// The number in a tail `..., occ: N }`.
    fn occ(&self) -> Option<u16> {
        let text = std::str::from_utf8(self.buf.get(..self.len)?).ok()?;
        let (_, n) = text.rsplit_once("occ: ")?;
        n.trim_end_matches(['}', ' ']).parse().ok()
    }
}

/// A hibernated terminal's grids.
#[derive(Debug)]
pub(crate) struct Frozen {
    /// The grid shown (the alternate one on the alternate screen).
    active: FrozenGrid,
    /// The other one, unless it stayed in alacritty (module docs).
    inactive: Option<FrozenGrid>,
}

impl Frozen {
    /// The cursor of the grid shown.
    pub(crate) fn cursor(&self) -> &Cursor<Cell> {
        &self.active.cursor
    }
}

/// The smallest grid: what alacritty holds in a hibernated grid's place.
fn placeholder() -> Grid<Cell> {
    Grid::new(1, 2, 0)
}

fn on_alt(term: &Term<Listener>) -> bool {
    term.mode().contains(TermMode::ALT_SCREEN)
}

/// Moves `term`'s grids out. `main_moved`: the main grid's cursors may differ while
/// the alternate screen is shown; `alt_pristine`: the alternate screen was never
/// used (module docs). `scrollback` is the main grid's
/// history limit. `None` when the grid is scrolled back (never, in latch).
pub(crate) fn freeze(
    term: &mut Term<Listener>,
    main_moved: bool,
    alt_pristine: bool,
    scrollback: usize,
) -> Option<Frozen> {
    if term.grid().display_offset() != 0 {
        return None;
    }
    let alt = on_alt(term);
    let limit = |is_alt: bool| if is_alt { 0 } else { scrollback };
    let active = std::mem::replace(term.grid_mut(), placeholder());
    let active = FrozenGrid::freeze(&active, limit(alt));
    if (!alt && !alt_pristine) || (alt && main_moved) {
        return Some(Frozen {
            active,
            inactive: None,
        });
    }
    // From the alternate screen the swap is plain; from the main one its side
    // effects fall on the placeholder and on the alternate grid's dead state.
    term.swap_alt();
    let other = std::mem::replace(term.grid_mut(), placeholder());
    let inactive = FrozenGrid::freeze(&other, limit(!alt));
    drop(other);
    // Back: from the main screen (when `alt`) the side effects fall on the two
    // placeholders; from the alternate one the swap is plain.
    term.swap_alt();
    Some(Frozen {
        active,
        inactive: Some(inactive),
    })
}

/// Puts the grids back, in the places [`freeze`] took them from.
pub(crate) fn thaw(term: &mut Term<Listener>, frozen: Frozen) {
    let Frozen { active, inactive } = frozen;
    let Some(inactive) = inactive else {
        *term.grid_mut() = active.thaw();
        return;
    };
    if on_alt(term) {
        // Plain swap to the main placeholder; the main grid goes in; the swap back
        // sets its saved cursor to its cursor (equal, module docs) and clears the
        // alternate placeholder, which the alternate grid then replaces.
        term.swap_alt();
        *term.grid_mut() = inactive.thaw();
        term.swap_alt();
        *term.grid_mut() = active.thaw();
    } else {
        // The swap's side effects fall on the placeholders; back is plain.
        term.swap_alt();
        *term.grid_mut() = inactive.thaw();
        term.swap_alt();
        *term.grid_mut() = active.thaw();
    }
}
