//! `peek --format svg|png|html`: a screen as a picture (SPEC §4.4 "Pictures"),
//! drawn here from the daemon's cell-grid capture (CAPTURE, SPEC §4.1), never in
//! the daemon: it only cuts the capture, so the drawing code and the rasteriser
//! are never touched on a daemon's paths.
//!
//! Every format is drawn on one grid: cells of [`CELL_W`] × [`CELL_H`] pixels,
//! [`MARGIN`] pixels from the edge. Colours the program chose by index, and the
//! default colours, are resolved against the program's own palette (OSC 4, 10,
//! 11, 12) where it set one, else the theme's.

mod html;
mod png;
mod svg;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use latch_client::{Bound, ClientError, Mismatch};
use latch_screen::capture::{self, attr, Capture, Colour, CursorShape, Style, Width};

use crate::cli::TargetArgs;

/// A cell's width in pixels.
pub(crate) const CELL_W: u32 = 9;
/// A cell's height in pixels.
pub(crate) const CELL_H: u32 = 18;
/// Pixels around the grid.
pub(crate) const MARGIN: u32 = 8;
/// The font's size in pixels.
pub(crate) const FONT_PX: u32 = 15;
/// The baseline, in pixels below a cell's top.
pub(crate) const BASELINE: u32 = 14;
/// The most pixels a PNG may have (SPEC §8).
pub(crate) use latch_wire::limits::PNG_MAX_PIXELS;
/// The monospace family stack of the SVG and the HTML (no font is embedded).
pub(crate) const FONT_STACK: &str = "'DejaVu Sans Mono', 'Liberation Mono', 'Noto Sans Mono', \
     Menlo, Consolas, 'Courier New', monospace";

/// The picture formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    /// SVG 1.1: one text run per attribute span, on the cell grid.
    Svg,
    /// PNG, rasterised here from the SVG with a system monospace font.
    Png,
    /// A self-contained HTML page: a `pre` of styled spans.
    Html,
}

/// The colours a program did not set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum Theme {
    /// The colours latch's terminal reports to programs (SPEC §4.4): xterm's
    /// palette, light grey on black.
    #[default]
    Dark,
    /// Dark text on white, with a palette made for a light background.
    Light,
}

/// `peek`'s picture options (SPEC §4.4).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct PictureArgs {
    /// Draw the screen as a picture: svg, png or html (with --full, the scrollback
    /// too). A PNG is never written to a terminal: use --out, or a pipe.
    #[arg(long, value_enum, value_name = "FORMAT",
          conflicts_with_all = ["plain", "ansi", "follow", "since", "raw", "wait"])]
    pub format: Option<Format>,
    /// Write the picture to FILE instead of stdout.
    #[arg(long, value_name = "FILE", requires = "format")]
    pub out: Option<PathBuf>,
    /// The colours the program did not set (default: dark).
    #[arg(long, value_enum, value_name = "THEME", requires = "format")]
    pub theme: Option<Theme>,
}

/// Why a picture could not be made.
#[derive(Debug)]
pub(crate) enum PictureError {
    /// No monospace font is installed for the PNG.
    NoMonospaceFont,
    /// The PNG would be larger than [`PNG_MAX_PIXELS`].
    TooLarge {
        /// Its size in pixels.
        width: u64,
        /// Its size in pixels.
        height: u64,
        /// Whether `--full` made it so.
        full: bool,
    },
    /// A PNG for a terminal, without `--out`.
    PngToTerminal,
    /// The daemon's capture is unusable.
    Capture(capture::CaptureError),
    /// The rasteriser failed on our own SVG.
    Render(String),
    /// `--out FILE` could not be written.
    Write(PathBuf, std::io::Error),
}

impl From<PictureError> for ClientError {
    fn from(e: PictureError) -> Self {
        match e {
            PictureError::NoMonospaceFont => ClientError::Other(
                "no monospace font is installed for the PNG: install one (Debian and \
                 Ubuntu: apt-get install fonts-dejavu-core), or use --format svg or html"
                    .into(),
            ),
            PictureError::TooLarge {
                width,
                height,
                full,
            } => ClientError::Usage(format!(
                "the PNG would be {width} x {height} pixels, over the cap of \
                 {PNG_MAX_PIXELS} pixels (SPEC §8){}; --format svg or html has no cap",
                if full { "; leave out --full" } else { "" }
            )),
            PictureError::PngToTerminal => ClientError::Usage(
                "a PNG is not written to a terminal: give --out FILE, or redirect stdout".into(),
            ),
            PictureError::Capture(e) => ClientError::protocol(Mismatch::BadFrame, e.to_string()),
            PictureError::Render(e) => ClientError::failed("cannot draw the PNG", e),
            PictureError::Write(path, e) => {
                ClientError::Other(format!("cannot write {}: {e}", path.display()))
            }
        }
    }
}

/// Where the picture goes, checked before anything is asked of the daemon.
#[derive(Debug)]
pub(crate) struct Sink {
    format: Format,
    theme: Theme,
    out: Option<PathBuf>,
}

impl Sink {
    /// The picture options of a `peek` that has `--format`; a PNG for a terminal
    /// without `--out` is refused here.
    pub(crate) fn open(format: Format, args: &PictureArgs) -> Result<Self, ClientError> {
        if format == Format::Png && args.out.is_none() && std::io::stdout().is_terminal() {
            return Err(PictureError::PngToTerminal.into());
        }
        Ok(Self {
            format,
            theme: args.theme.unwrap_or_default(),
            out: args.out.clone(),
        })
    }

    /// Draws `capture` and writes it.
    fn draw(&self, capture: &Capture, full: bool) -> Result<(), ClientError> {
        let bytes = render(self.format, self.theme, capture, full)?;
        match &self.out {
            Some(path) => write_file(path, &bytes)?,
            // A failed stdout is `output`'s (SPEC §10).
            None => {
                crate::output::out_bytes(&bytes);
            }
        }
        Ok(())
    }
}

/// The picture of `capture` in `format`: every caller's one drawing path.
fn render(
    format: Format,
    theme: Theme,
    capture: &Capture,
    full: bool,
) -> Result<Vec<u8>, ClientError> {
    Ok(match format {
        Format::Svg => svg::render(capture, theme).into_bytes(),
        Format::Html => html::render(capture, theme).into_bytes(),
        Format::Png => png::render(capture, theme, full)?,
    })
}

/// The picture of a session's screen, as `peek --format` draws it, for control's
/// and MCP's `peek` (SPEC §13.4): the daemon's CAPTURE, or an ended session's
/// final screen; the default theme.
pub(crate) fn picture_of(
    loc: latch_client::Location<'_>,
    target: &latch_client::Found,
    full: bool,
    format: Format,
) -> Result<Vec<u8>, ClientError> {
    let capture = match loc.connect(target) {
        Ok(mut bound) => {
            let bytes = bound.capture(full)?;
            Capture::decode(&bytes).map_err(PictureError::Capture)?
        }
        Err(e) => {
            if !matches!(e, ClientError::Unreachable { .. }) {
                return Err(e);
            }
            let screen = loc.final_screen(target)?.ok_or(e)?;
            let text = if full {
                &screen.full_ansi
            } else {
                &screen.ansi
            };
            from_lines(screen.rows, screen.cols, text, full)
        }
    };
    render(format, Theme::default(), &capture, full)
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), PictureError> {
    std::fs::write(path, bytes).map_err(|e| PictureError::Write(path.to_owned(), e))
}

/// `peek REF --format F`, here.
/// Pictures of another host's screen are drawn here, from the CAPTURE its daemon
/// cuts (SPEC.md §12.3).
pub(crate) fn peek(
    at: &crate::commands::At,
    target: &TargetArgs,
    full: bool,
    format: Format,
    args: &PictureArgs,
) -> Result<i32, ClientError> {
    let sink = Sink::open(format, args)?;
    let found = at.resolve(target)?;
    match at.loc().connect(&found) {
        Ok(bound) => draw_bound(bound, full, &sink),
        Err(e) => draw_exited(at.loc(), &found, e, full, &sink),
    }
}

/// Draws the capture a bound connection's daemon cuts (local, or over a relay).
pub(crate) fn draw_bound(mut bound: Bound, full: bool, sink: &Sink) -> Result<i32, ClientError> {
    let bytes = bound.capture(full)?;
    let capture = Capture::decode(&bytes).map_err(PictureError::Capture)?;
    sink.draw(&capture, full)?;
    Ok(latch_client::exit::OK)
}

/// An ended session: its final screen (SPEC §9.15), when `e` is because it exited.
fn draw_exited(
    loc: latch_client::Location<'_>,
    target: &latch_client::Found,
    e: ClientError,
    full: bool,
    sink: &Sink,
) -> Result<i32, ClientError> {
    if !matches!(e, ClientError::Unreachable { .. }) {
        return Err(e);
    }
    let screen = loc.final_screen(target)?.ok_or(e)?;
    draw_final(&screen, full, sink)
}

/// Draws a final screen from its line-based ANSI capture (without the program's
/// palette or cursor, which it does not keep; SPEC §4.4), then says it ended.
pub(crate) fn draw_final(
    screen: &latch_registry::FinalScreen,
    full: bool,
    sink: &Sink,
) -> Result<i32, ClientError> {
    let text = if full {
        &screen.full_ansi
    } else {
        &screen.ansi
    };
    sink.draw(&from_lines(screen.rows, screen.cols, text, full), full)?;
    eprintln!(
        "{}",
        crate::attach::ended_line(&screen.id, screen.exit.code, screen.exit.signal)
    );
    Ok(latch_client::exit::OK)
}

/// The capture of line-based ANSI (PEEK's) replayed on a screen of its size.
fn from_lines(rows: u16, cols: u16, text: &str, full: bool) -> Capture {
    let lines = text.lines().count();
    let scrollback = lines.min(latch_wire::limits::MAX_SCROLLBACK);
    let mut emu = latch_screen::Emulator::new(rows, cols, scrollback);
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            emu.push(b"\r\n");
        }
        emu.push(line.as_bytes());
    }
    let mut capture = emu.capture(full, capture::CAPTURE_MAX);
    capture.cursor.visible = false;
    capture
}

/// A colour to draw with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rgb(pub u8, pub u8, pub u8);

impl std::fmt::Display for Rgb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "#{:02x}{:02x}{:02x}", self.0, self.1, self.2)
    }
}

impl Rgb {
    /// Two thirds of `self`, one of `other` (SGR 2, dim).
    fn dimmed(self, other: Self) -> Self {
        let mix = |a: u8, b: u8| u8::try_from((u16::from(a) * 2 + u16::from(b)) / 3).unwrap_or(a);
        Self(
            mix(self.0, other.0),
            mix(self.1, other.1),
            mix(self.2, other.2),
        )
    }
}

/// The 16 colours of each theme (the rest is xterm's 256-colour cube and greys).
const DARK: [u32; 16] = [
    0x000000, 0xcd0000, 0x00cd00, 0xcdcd00, 0x0000ee, 0xcd00cd, 0x00cdcd, 0xe5e5e5, 0x7f7f7f,
    0xff0000, 0x00ff00, 0xffff00, 0x5c5cff, 0xff00ff, 0x00ffff, 0xffffff,
];
const LIGHT: [u32; 16] = [
    0x000000, 0xc91b00, 0x00a600, 0x999900, 0x0225c7, 0xc930c7, 0x00a6b2, 0xbfbfbf, 0x686868,
    0xff6e67, 0x2fb938, 0xb5a800, 0x6871ff, 0xff77ff, 0x00b5c5, 0xffffff,
];

fn rgb(v: u32) -> Rgb {
    let byte = |shift: u32| u8::try_from((v >> shift) & 0xff).unwrap_or(0);
    Rgb(byte(16), byte(8), byte(0))
}

/// Every colour a capture can name, resolved: the program's where it set them,
/// else the theme's.
#[derive(Debug, Clone)]
pub(crate) struct Palette {
    colours: [Rgb; 256],
    /// The default foreground.
    pub fg: Rgb,
    /// The default background.
    pub bg: Rgb,
    /// The cursor.
    pub cursor: Rgb,
}

impl Palette {
    pub(crate) fn new(theme: Theme, capture: &Capture) -> Self {
        let (base, fg, bg) = match theme {
            Theme::Dark => (&DARK, rgb(0xe5e5e5), rgb(0x000000)),
            Theme::Light => (&LIGHT, rgb(0x1f1f1f), rgb(0xffffff)),
        };
        let mut colours = [Rgb(0, 0, 0); 256];
        for (i, c) in colours.iter_mut().enumerate() {
            *c = match base.get(i) {
                Some(&v) => rgb(v),
                None => {
                    let x = latch_screen::default_color(i);
                    Rgb(x.r, x.g, x.b)
                }
            };
        }
        let program = |index: u16| capture.program_colour(index).map(|(r, g, b)| Rgb(r, g, b));
        for (i, c) in (0u16..).zip(colours.iter_mut()) {
            if let Some(p) = program(i) {
                *c = p;
            }
        }
        let fg = program(capture::FOREGROUND).unwrap_or(fg);
        Self {
            colours,
            fg,
            bg: program(capture::BACKGROUND).unwrap_or(bg),
            cursor: program(capture::CURSOR).unwrap_or(fg),
        }
    }

    fn colour(&self, c: Colour, default: Rgb) -> Rgb {
        match c {
            Colour::Default => default,
            Colour::Indexed(i) => self.colours[usize::from(i)],
            Colour::Rgb(r, g, b) => Rgb(r, g, b),
        }
    }

    /// How a style looks.
    pub(crate) fn look(&self, style: &Style) -> Look {
        let mut fg = self.colour(style.fg, self.fg);
        let mut bg = self.colour(style.bg, self.bg);
        if style.has(attr::DIM) {
            fg = fg.dimmed(bg);
        }
        if style.has(attr::INVERSE) {
            std::mem::swap(&mut fg, &mut bg);
        }
        let underline = style.has(attr::ANY_UNDERLINE).then(|| {
            let colour = style.underline.map_or(fg, |c| self.colour(c, fg));
            (colour, style.has(attr::DOUBLE_UNDERLINE))
        });
        if style.has(attr::HIDDEN) {
            fg = bg;
        }
        Look {
            fg,
            bg,
            bold: style.has(attr::BOLD),
            italic: style.has(attr::ITALIC),
            underline,
            strike: style.has(attr::STRIKEOUT),
        }
    }
}

/// A cell's resolved colours and attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Look {
    pub fg: Rgb,
    pub bg: Rgb,
    pub bold: bool,
    pub italic: bool,
    /// The underline's colour, and whether it is double.
    pub underline: Option<(Rgb, bool)>,
    pub strike: bool,
}

/// One cell to draw: its column, grapheme, width in columns and look.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Drawn<'a> {
    pub col: usize,
    pub text: &'a str,
    pub width: usize,
    pub look: Look,
}

/// The cells of line `index` to draw, left to right (spacers fold into their wide
/// character), with the cursor drawn into its cell when it is a visible block (any
/// shape, with `any_shape`); a cursor past the line's last cell gets a blank cell
/// of its own.
pub(crate) fn row_cells<'a>(
    capture: &'a Capture,
    palette: &Palette,
    index: usize,
    any_shape: bool,
) -> Vec<Drawn<'a>> {
    let Some(line) = capture.lines.get(index) else {
        return Vec::new();
    };
    let cursor = cursor_col(capture, index).filter(|_| any_shape || block_cursor(capture));
    let mut out: Vec<Drawn<'a>> = Vec::with_capacity(line.cells.len() + 1);
    for (col, (cell, text)) in line.graphemes().enumerate() {
        let look = palette.look(&capture.style(cell));
        match cell.width {
            Width::Spacer => {
                // A spacer not after its wide character (a broken capture): a blank.
                if !out.last().is_some_and(|d| d.width == 2 && d.col + 1 == col) {
                    out.push(Drawn {
                        col,
                        text: " ",
                        width: 1,
                        look,
                    });
                }
            }
            Width::Wide => out.push(Drawn {
                col,
                text,
                width: 2,
                look,
            }),
            Width::Single => out.push(Drawn {
                col,
                text,
                width: 1,
                look,
            }),
        }
    }
    if let Some(col) = cursor {
        match out
            .iter_mut()
            .find(|d| d.col <= col && col < d.col + d.width)
        {
            Some(d) => d.look = cursor_look(palette, d.look),
            None => out.push(Drawn {
                col,
                text: " ",
                width: 1,
                look: cursor_look(palette, palette.look(&Style::PLAIN)),
            }),
        }
    }
    out
}

/// The cursor's column, when it is visible on line `index`.
pub(crate) fn cursor_col(capture: &Capture, index: usize) -> Option<usize> {
    let c = capture.cursor;
    let row = usize::try_from(capture.history).ok()? + usize::from(c.row);
    (c.visible && row == index).then_some(usize::from(c.col))
}

/// Whether the cursor is drawn as a filled cell (a block).
fn block_cursor(capture: &Capture) -> bool {
    capture.cursor.shape == CursorShape::Block
}

/// A cell under a block cursor: the cursor's colour behind, the cell's
/// background as its text.
fn cursor_look(palette: &Palette, look: Look) -> Look {
    Look {
        fg: look.bg,
        bg: palette.cursor,
        ..look
    }
}

/// The picture's size in pixels for `capture`.
pub(crate) fn size(capture: &Capture) -> (u64, u64) {
    let cols = u64::try_from(capture.width()).unwrap_or(u64::MAX);
    let rows = u64::try_from(capture.lines.len()).unwrap_or(u64::MAX);
    let px = |cells: u64, cell: u32| cells.saturating_mul(u64::from(cell)) + 2 * u64::from(MARGIN);
    (px(cols, CELL_W), px(rows, CELL_H))
}

/// Writes `text` escaped for XML and HTML text and attribute values: the five
/// markup characters as entities, and the characters XML 1.0 forbids even as
/// references (C0 controls other than none, which a cell never holds anyway) as
/// their visible Control Pictures (U+2400 + code, DEL as U+2421); C1 controls and
/// noncharacters as U+FFFD (SPEC §4.4).
pub(crate) fn escape(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(visible(c)),
        }
    }
}

/// A character XML 1.0 and HTML can carry as it is, or its visible stand-in.
pub(crate) fn visible(c: char) -> char {
    match u32::from(c) {
        v @ 0..=0x1f => char::from_u32(0x2400 + v).unwrap_or('\u{fffd}'),
        0x7f => '\u{2421}',
        0x80..=0x9f | 0xfdd0..=0xfdef => '\u{fffd}',
        v if v & 0xfffe == 0xfffe => '\u{fffd}',
        _ => c,
    }
}

#[cfg(test)]
mod tests;
