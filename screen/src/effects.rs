//! What the emulator does besides drawing: answers to the program's terminal
//! queries while nobody else answers them, and the terminal events (bell, title,
//! notifications, cursor visibility) a watcher wants to know about (SPEC §4.4, §9.9).

use std::sync::{Arc, Mutex};

use alacritty_terminal::event::{Event, EventListener, WindowSize};
use alacritty_terminal::term::color::Colors;
use alacritty_terminal::vte::ansi::Rgb;

use crate::side::Seq;

/// DA2, as the fixed terminal type latch answers as (SPEC §4.4): a VT100-class
/// terminal, firmware 0, no cartridge.
pub const DA2_ANSWER: &str = "\x1b[>0;0;0c";
/// The cell size, in pixels, reported for `CSI 14 t`.
const CELL: (u16, u16) = (8, 16);

/// XTVERSION's answer (SPEC §4.4).
pub fn xtversion_answer() -> String {
    format!("\x1bP>|latch {}\x1b\\", env!("CARGO_PKG_VERSION"))
}

/// A terminal event for the session's event log (SPEC §9.9).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TermEvent {
    /// BEL.
    Bell,
    /// OSC 0/2 set the window title (empty: reset).
    Title(String),
    /// A desktop notification: OSC 9 (body), OSC 777 (`notify;TITLE;BODY`) or
    /// OSC 99 (kitty: `METADATA;PAYLOAD`).
    Notification {
        /// 9, 99 or 777.
        osc: u16,
        /// The title, if the sequence carries one.
        title: Option<String>,
        /// The text.
        body: String,
    },
    /// The cursor was shown (`true`) or hidden.
    CursorVisible(bool),
}

/// What alacritty_terminal asked for while parsing, in order.
enum Raw {
    Write(String),
    Color(usize, Arc<dyn Fn(Rgb) -> String + Sync + Send + 'static>),
    Size(Arc<dyn Fn(WindowSize) -> String + Sync + Send + 'static>),
    Event(TermEvent),
}

/// The parser's event sink: collects, the emulator resolves after each parse step.
#[derive(Clone, Default)]
pub(crate) struct Listener(Arc<Mutex<Vec<Raw>>>);

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Listener")
    }
}

impl EventListener for Listener {
    fn send_event(&self, event: Event) {
        let raw = match event {
            Event::PtyWrite(s) => Raw::Write(s),
            Event::ColorRequest(i, f) => Raw::Color(i, f),
            Event::TextAreaSizeRequest(f) => Raw::Size(f),
            Event::Bell => Raw::Event(TermEvent::Bell),
            // The scanner cuts a title for the parser already (SPEC §4.4).
            Event::Title(t) => Raw::Event(TermEvent::Title(clip(t, crate::TITLE_MAX))),
            Event::ResetTitle => Raw::Event(TermEvent::Title(String::new())),
            _ => return,
        };
        if let Ok(mut q) = self.0.lock() {
            q.push(raw);
        }
    }
}

/// Most answer bytes held for the daemon to collect (a program that floods queries
/// while nobody collects cannot grow this without bound).
const REPLIES_MAX: usize = 64 * 1024;
/// Most events held for the daemon to collect.
const EVENTS_MAX: usize = 1024;

/// Answers and events waiting for the daemon.
#[derive(Debug)]
pub(crate) struct Effects {
    pub(crate) listener: Listener,
    /// Whether queries are answered (no read-write client's terminal answers them).
    pub(crate) answering: bool,
    pub(crate) replies: Vec<u8>,
    /// Where each answer in `replies` ends.
    pub(crate) reply_ends: Vec<usize>,
    pub(crate) events: Vec<TermEvent>,
    /// The cursor's visibility as last reported.
    pub(crate) cursor_visible: bool,
}

impl Default for Effects {
    fn default() -> Self {
        Self {
            listener: Listener::default(),
            answering: true,
            replies: Vec::new(),
            reply_ends: Vec::new(),
            events: Vec::new(),
            cursor_visible: true,
        }
    }
}

impl Effects {
    fn reply(&mut self, s: &str) {
        if self.answering && self.replies.len() + s.len() <= REPLIES_MAX {
            self.replies.extend_from_slice(s.as_bytes());
            self.reply_ends.push(self.replies.len());
        }
    }

    fn event(&mut self, e: TermEvent) {
        if self.events.len() < EVENTS_MAX {
            self.events.push(e);
        }
    }

    /// Resolves what the parser asked for, against the terminal's current state.
    pub(crate) fn collect(&mut self, colors: &Colors, rows: usize, cols: usize, shown: bool) {
        let raw = match self.listener.0.lock() {
            Ok(mut q) if !q.is_empty() => std::mem::take(&mut *q),
            _ => Vec::new(),
        };
        for r in raw {
            match r {
                Raw::Write(s) if s.starts_with("\x1b[>") && s.ends_with('c') => {
                    self.reply(DA2_ANSWER);
                }
                Raw::Write(s) => self.reply(&s),
                Raw::Color(i, f) => {
                    let rgb = colors[i].unwrap_or_else(|| default_color(i));
                    self.reply(&f(rgb));
                }
                Raw::Size(f) => {
                    let u = |n: usize| u16::try_from(n).unwrap_or(u16::MAX);
                    self.reply(&f(WindowSize {
                        num_lines: u(rows),
                        num_cols: u(cols),
                        cell_width: CELL.0,
                        cell_height: CELL.1,
                    }));
                }
                Raw::Event(e) => self.event(e),
            }
        }
        if shown != self.cursor_visible {
            self.cursor_visible = shown;
            self.event(TermEvent::CursorVisible(shown));
        }
    }

    /// Acts on a sequence the side scanner found.
    pub(crate) fn side(&mut self, seq: Seq) {
        match seq {
            Seq::XtVersion => self.reply(&xtversion_answer()),
            Seq::Notify { osc, payload } => {
                if let Some(e) = notification(osc, &payload) {
                    self.event(e);
                }
            }
            // The emulator's own business (the compact scrollback, the OSC bound).
            Seq::Clear { .. } | Seq::Skip { .. } => {}
        }
    }
}

/// Decodes a notification payload (after `OSC N ;`).
fn notification(osc: u16, payload: &[u8]) -> Option<TermEvent> {
    let text = String::from_utf8_lossy(payload);
    let (title, body) = match osc {
        // ConEmu's OSC 9;N;... are not notifications (progress, cwd, ...).
        9 => {
            let first = text.split(';').next().unwrap_or_default();
            if text.contains(';') && !first.is_empty() && first.bytes().all(|b| b.is_ascii_digit())
            {
                return None;
            }
            (None, text.into_owned())
        }
        777 => {
            let mut parts = text.splitn(3, ';');
            if parts.next() != Some("notify") {
                return None;
            }
            let title = parts.next().unwrap_or_default().to_owned();
            (Some(title), parts.next().unwrap_or_default().to_owned())
        }
        // kitty: METADATA;PAYLOAD (p=title marks a title chunk).
        99 => {
            let (meta, body) = text.split_once(';')?;
            let is_title = meta.split(':').any(|kv| kv == "p=title");
            if is_title {
                (Some(body.to_owned()), String::new())
            } else {
                (None, body.to_owned())
            }
        }
        _ => return None,
    };
    Some(TermEvent::Notification {
        osc,
        title,
        body: clip(body, TEXT_MAX),
    })
}

/// Notification text kept for the event log.
const TEXT_MAX: usize = 1024;

/// `s` cut to at most `max` bytes, on a character boundary.
fn clip(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut at = max;
        while !s.is_char_boundary(at) {
            at -= 1;
        }
        s.truncate(at);
    }
    s
}

/// The fixed terminal's colours (SPEC §4.4): xterm's 256-colour palette, light grey
/// on black, cursor the foreground.
pub fn default_color(index: usize) -> Rgb {
    const BASE: [(u8, u8, u8); 16] = [
        (0x00, 0x00, 0x00),
        (0xcd, 0x00, 0x00),
        (0x00, 0xcd, 0x00),
        (0xcd, 0xcd, 0x00),
        (0x00, 0x00, 0xee),
        (0xcd, 0x00, 0xcd),
        (0x00, 0xcd, 0xcd),
        (0xe5, 0xe5, 0xe5),
        (0x7f, 0x7f, 0x7f),
        (0xff, 0x00, 0x00),
        (0x00, 0xff, 0x00),
        (0xff, 0xff, 0x00),
        (0x5c, 0x5c, 0xff),
        (0xff, 0x00, 0xff),
        (0x00, 0xff, 0xff),
        (0xff, 0xff, 0xff),
    ];
    let rgb = |(r, g, b): (u8, u8, u8)| Rgb { r, g, b };
    match index {
        0..=15 => rgb(BASE[index]),
        16..=231 => {
            let i = index - 16;
            let level = |v: usize| {
                if v == 0 {
                    0
                } else {
                    u8::try_from(55 + v * 40).unwrap_or(u8::MAX)
                }
            };
            rgb((level(i / 36), level((i / 6) % 6), level(i % 6)))
        }
        232..=255 => {
            let v = u8::try_from(8 + (index - 232) * 10).unwrap_or(u8::MAX);
            rgb((v, v, v))
        }
        // NamedColor::Background.
        257 => rgb((0, 0, 0)),
        // Foreground, cursor and anything else.
        _ => rgb((0xe5, 0xe5, 0xe5)),
    }
}
