//! Program output as plain text, as it streams: escapes removed, text kept in
//! order (`latch peek --follow --plain`). Not a screen: cursor moves are dropped,
//! so what a program overwrites stays in the stream, as in a log.

use alacritty_terminal::vte::{Parser, Perform};

/// A stateful stripper: a sequence split across chunks is still removed whole.
#[derive(Default)]
pub struct PlainStream {
    parser: Parser,
}

impl std::fmt::Debug for PlainStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PlainStream")
    }
}

struct Text<'a>(&'a mut String);

impl Perform for Text<'_> {
    fn print(&mut self, c: char) {
        self.0.push(c);
    }
    fn execute(&mut self, byte: u8) {
        if byte == b'\n' || byte == b'\t' {
            self.0.push(char::from(byte));
        }
    }
}

impl PlainStream {
    /// The text in `bytes`: printable characters, line feeds and tabs.
    pub fn strip(&mut self, bytes: &[u8]) -> String {
        let mut out = String::with_capacity(bytes.len());
        self.parser.advance(&mut Text(&mut out), bytes);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_escapes_across_chunks() {
        let mut s = PlainStream::default();
        let a = s.strip(b"\x1b[1mred\x1b[");
        let b = s.strip(b"0m and\r\n\x1b]0;t\x07plain\tx\x07");
        assert_eq!(format!("{a}{b}"), "red and\nplain\tx");
    }
}
