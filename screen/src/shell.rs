//! Shell integration marks (OSC 133, OSC 7) found in a program's output, and the
//! shell state they imply (SPEC §4.6).
//!
//! The tracker is fed the raw output stream, in any chunking, with the byte offset
//! of each chunk in the creation's output (the output cursor). It recognises:
//!
//! ```text
//! ESC ] 133 ; A [; opts] ST     prompt start            -> Prompt
//! ESC ] 133 ; B [; opts] ST     prompt end (input)      -> Prompt
//! ESC ] 133 ; C [; opts] ST     command start           -> Running
//!                               opts: cmdline_url=PERCENT-ENCODED (kitty) or cmdline=TEXT
//! ESC ] 133 ; D [; N] [; opts] ST  command end, exit N  -> Prompt once A follows
//! ESC ] 7 ; file://HOST/PATH ST    working directory (percent-encoded path)
//! ```
//!
//! ST is BEL or `ESC \`. Anything else passes by unseen. A sequence longer than
//! [`MARK_MAX`] is not a mark (its bytes are skipped, the tracker resynchronises on
//! the next ESC). Duplicate marks collapse, so a shell that emits its own marks as
//! well as latch's (fish 4) is read as one: a C while a command runs, or a D while
//! none does, is ignored. The tracker does no IO and holds at most `MARK_MAX` bytes.

/// The longest OSC 133 or OSC 7 sequence understood (its payload, in bytes): room
/// for a `PATH_MAX` path percent-encoded, or a command line of 4 KiB.
pub const MARK_MAX: usize = 3 * 4096 + 64;

/// What the shell is doing, as its marks tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShellState {
    /// No mark seen yet (no integration, or the shell has not drawn a prompt).
    Unknown,
    /// At its prompt: A (or B) seen since the last C.
    Prompt,
    /// Running a command: C seen, D not yet.
    Running {
        /// The command line, when the shell said it.
        command: Option<String>,
    },
}

/// One mark, with where it lies in the output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    /// What it says.
    pub kind: MarkKind,
    /// The output cursor of its first byte (the ESC).
    pub start: u64,
    /// The output cursor just after its terminator.
    pub end: u64,
}

/// The marks of [`Mark`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MarkKind {
    /// OSC 133 A.
    PromptStart,
    /// OSC 133 B.
    PromptEnd,
    /// OSC 133 C, with the command line when given.
    CommandStart {
        /// The command line.
        command: Option<String>,
    },
    /// OSC 133 D, with the exit code when given.
    CommandEnd {
        /// The command's exit code.
        exit: Option<i32>,
    },
    /// OSC 7: the working directory.
    Cwd(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Parse {
    Ground,
    /// After ESC.
    Esc,
    /// Inside `ESC ]`, collecting the payload.
    Osc,
    /// Inside an OSC, after ESC (a `\` ends it).
    OscEsc,
    /// Inside an OSC that is too long: skipped to its end.
    Skip,
    /// Inside a skipped OSC, after ESC.
    SkipEsc,
}

/// Follows a creation's output for OSC 133 and OSC 7 (module docs).
#[derive(Debug, Clone)]
pub struct ShellTracker {
    parse: Parse,
    buf: Vec<u8>,
    /// The output cursor of the ESC that opened the sequence being parsed.
    seq_start: u64,
    /// The output cursor of the next byte fed.
    pos: u64,
    state: ShellState,
    cwd: Option<String>,
    last_exit: Option<i32>,
    /// Every OSC 133 A read, duplicates included, and A with `k=s` (a secondary,
    /// continuation prompt, as kitty marks PS2) apart.
    prompts: u64,
    continuations: u64,
}

impl Default for ShellTracker {
    fn default() -> Self {
        Self::new()
    }
}

impl ShellTracker {
    /// A tracker at output cursor 0.
    pub fn new() -> Self {
        Self {
            parse: Parse::Ground,
            buf: Vec::new(),
            seq_start: 0,
            pos: 0,
            state: ShellState::Unknown,
            cwd: None,
            last_exit: None,
            prompts: 0,
            continuations: 0,
        }
    }

    /// Prompt starts (OSC 133 A) read so far, duplicates included: a shell that
    /// draws a new prompt without running anything (an empty line) still counts.
    pub fn prompts(&self) -> u64 {
        self.prompts
    }

    /// Continuation prompts (OSC 133 A with `k=s`, a shell's PS2) read so far; they
    /// change no state (SPEC §4.6).
    pub fn continuations(&self) -> u64 {
        self.continuations
    }

    /// A tracker that continues from output cursor `cursor`, where the shell was
    /// in `state` (as a daemon reported it at a cut): marks after it are read as
    /// they would have been by a tracker fed from the start.
    pub fn resume(cursor: u64, state: ShellState) -> Self {
        Self {
            pos: cursor,
            state,
            ..Self::new()
        }
    }

    /// The shell's state after everything fed.
    pub fn state(&self) -> &ShellState {
        &self.state
    }

    /// The working directory the shell last reported (OSC 7).
    pub fn cwd(&self) -> Option<&str> {
        self.cwd.as_deref()
    }

    /// The exit code of the last command that ended with one.
    pub fn last_exit(&self) -> Option<i32> {
        self.last_exit
    }

    /// The output cursor: bytes fed so far.
    pub fn cursor(&self) -> u64 {
        self.pos
    }

    /// Feeds the next output bytes; appends the marks they complete to `marks`, each
    /// one that changed something (duplicates collapse, module docs).
    pub fn feed(&mut self, bytes: &[u8], marks: &mut Vec<Mark>) {
        let mut i = 0;
        while i < bytes.len() {
            let rest = &bytes[i..];
            // Runs that cannot change the parse are skipped (or collected) whole.
            let run = match self.parse {
                Parse::Ground => memchr::memchr(0x1b, rest).unwrap_or(rest.len()),
                Parse::Osc | Parse::Skip => memchr::memchr2(0x07, 0x1b, rest).unwrap_or(rest.len()),
                _ => 0,
            };
            if run > 0 {
                if self.parse == Parse::Osc {
                    if self.buf.len() + run > MARK_MAX {
                        self.buf = Vec::new();
                        self.parse = Parse::Skip;
                    } else {
                        self.buf.extend_from_slice(&rest[..run]);
                    }
                }
                i += run;
                continue;
            }
            self.step(rest[0], self.pos + i as u64, marks);
            i += 1;
        }
        self.pos += bytes.len() as u64;
    }

    /// One byte that may change the parse: an ESC, a terminator, or the byte after
    /// an ESC.
    fn step(&mut self, b: u8, here: u64, marks: &mut Vec<Mark>) {
        self.parse = match (self.parse, b) {
            (Parse::Ground | Parse::Esc | Parse::OscEsc | Parse::SkipEsc, 0x1b) => {
                // An ESC inside an OSC aborts it (as a terminal does) unless `\\`
                // follows; either way it may open the next sequence.
                self.buf.clear();
                self.seq_start = here;
                Parse::Esc
            }
            (Parse::Esc, b']') => {
                self.buf.clear();
                Parse::Osc
            }
            (Parse::Osc, 0x07) => {
                self.finish(here + 1, marks);
                Parse::Ground
            }
            (Parse::Osc, 0x1b) => Parse::OscEsc,
            (Parse::OscEsc, b'\\') => {
                self.finish(here + 1, marks);
                Parse::Ground
            }
            (Parse::Skip, 0x07) => Parse::Ground,
            (Parse::Skip, 0x1b) => Parse::SkipEsc,
            (Parse::Osc | Parse::Skip, _) => {
                // Unreachable through `feed` (runs are consumed there); kept total.
                self.parse
            }
            (Parse::Ground | Parse::Esc | Parse::OscEsc | Parse::SkipEsc, _) => {
                self.buf.clear();
                Parse::Ground
            }
        };
    }

    /// A complete OSC whose payload is in `buf`, ending just before `end`.
    fn finish(&mut self, end: u64, marks: &mut Vec<Mark>) {
        let payload = std::mem::take(&mut self.buf);
        let kind = if let Some(rest) = payload.strip_prefix(b"133;") {
            if rest.first() == Some(&b'A') {
                if rest.split(|&b| b == b';').skip(1).any(|o| o == b"k=s") {
                    self.continuations += 1;
                    self.buf = payload;
                    self.buf.clear();
                    return;
                }
                self.prompts += 1;
            }
            parse_133(rest)
        } else if let Some(rest) = payload.strip_prefix(b"7;") {
            parse_osc7(rest).map(MarkKind::Cwd)
        } else {
            None
        };
        self.buf = payload;
        self.buf.clear();
        let Some(kind) = kind else { return };
        if self.apply(&kind) {
            marks.push(Mark {
                kind,
                start: self.seq_start,
                end,
            });
        }
    }

    /// Applies a mark to the state; `false` when it changes nothing (a duplicate).
    fn apply(&mut self, kind: &MarkKind) -> bool {
        match kind {
            MarkKind::PromptStart | MarkKind::PromptEnd => {
                if matches!(self.state, ShellState::Prompt) {
                    return matches!(kind, MarkKind::PromptEnd);
                }
                self.state = ShellState::Prompt;
            }
            MarkKind::CommandStart { command } => {
                if matches!(self.state, ShellState::Running { .. }) {
                    return false;
                }
                self.state = ShellState::Running {
                    command: command.clone(),
                };
            }
            MarkKind::CommandEnd { exit } => {
                if !matches!(self.state, ShellState::Running { .. }) {
                    return false;
                }
                self.last_exit = *exit;
                // Until the next prompt is drawn the shell is between states; it is
                // not at its prompt yet (no A), and runs nothing.
                self.state = ShellState::Unknown;
            }
            MarkKind::Cwd(dir) => {
                if self.cwd.as_deref() == Some(dir.as_str()) {
                    return false;
                }
                self.cwd = Some(dir.clone());
            }
        }
        true
    }
}

/// `A`, `B`, `C[;opts]`, `D[;N][;opts]` (the bytes after `133;`).
fn parse_133(rest: &[u8]) -> Option<MarkKind> {
    let mut parts = rest.split(|&b| b == b';');
    let letter = parts.next()?;
    Some(match letter {
        b"A" => MarkKind::PromptStart,
        b"B" => MarkKind::PromptEnd,
        b"C" => MarkKind::CommandStart {
            command: parts.find_map(cmdline),
        },
        b"D" => MarkKind::CommandEnd {
            exit: parts
                .next()
                .and_then(|n| std::str::from_utf8(n).ok())
                .and_then(|n| n.parse().ok()),
        },
        _ => return None,
    })
}

/// The command line of a C option: `cmdline_url=` (percent-encoded, as kitty) or
/// `cmdline=` (as is).
fn cmdline(opt: &[u8]) -> Option<String> {
    if let Some(url) = opt.strip_prefix(b"cmdline_url=") {
        return Some(String::from_utf8_lossy(&percent_decode(url)).into_owned());
    }
    opt.strip_prefix(b"cmdline=")
        .map(|s| String::from_utf8_lossy(s).into_owned())
}

/// `file://HOST/PATH` → PATH, percent-decoded; anything else is not a cwd.
fn parse_osc7(rest: &[u8]) -> Option<String> {
    let after = rest.strip_prefix(b"file://")?;
    let slash = after.iter().position(|&b| b == b'/')?;
    let path = percent_decode(&after[slash..]);
    String::from_utf8(path).ok()
}

fn percent_decode(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if s[i] == b'%' && i + 2 < s.len() {
            if let (Some(h), Some(l)) = (hex(s[i + 1]), hex(s[i + 2])) {
                out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
                i += 3;
                continue;
            }
        }
        out.push(s[i]);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(chunks: &[&[u8]]) -> (ShellTracker, Vec<Mark>) {
        let mut t = ShellTracker::new();
        let mut marks = Vec::new();
        for c in chunks {
            t.feed(c, &mut marks);
        }
        (t, marks)
    }

    const SESSION: &[u8] =
        b"\x1b]7;file://host/tmp/a%20b\x07\x1b]133;A\x07$ \x1b]133;B\x1b\\ echo hi\r\n\
\x1b]133;C;cmdline_url=echo%20hi\x07hi\r\n\x1b]133;D;7\x07\x1b]133;A\x07$ ";

    #[test]
    fn a_session_gives_its_marks_states_and_positions() {
        let (t, marks) = all(&[SESSION]);
        let kinds: Vec<_> = marks.iter().map(|m| m.kind.clone()).collect();
        assert_eq!(
            kinds,
            vec![
                MarkKind::Cwd("/tmp/a b".into()),
                MarkKind::PromptStart,
                MarkKind::PromptEnd,
                MarkKind::CommandStart {
                    command: Some("echo hi".into())
                },
                MarkKind::CommandEnd { exit: Some(7) },
                MarkKind::PromptStart,
            ]
        );
        assert_eq!(t.state(), &ShellState::Prompt);
        assert_eq!(t.last_exit(), Some(7));
        assert_eq!(t.cwd(), Some("/tmp/a b"));
        // The command's output is exactly what lies between C's end and D's start.
        let c = &marks[3];
        let d = &marks[4];
        let at = |cursor: u64| usize::try_from(cursor).unwrap();
        assert_eq!(&SESSION[at(c.end)..at(d.start)], b"hi\r\n");
        assert_eq!(SESSION[at(c.start)], 0x1b);
        assert_eq!(t.cursor(), SESSION.len() as u64);
    }

    #[test]
    fn every_split_gives_the_same_marks() {
        let (_, whole) = all(&[SESSION]);
        for at in 0..=SESSION.len() {
            let (a, b) = SESSION.split_at(at);
            assert_eq!(all(&[a, b]).1, whole, "split at {at}");
        }
        let bytes: Vec<&[u8]> = SESSION.chunks(1).collect();
        assert_eq!(all(&bytes).1, whole);
    }

    #[test]
    fn duplicates_collapse_and_states_follow() {
        // fish 4 and latch's script both mark: each mark twice.
        let (t, marks) = all(&[
            b"\x1b]133;A\x07\x1b]133;A\x07$ ",
            b"\x1b]133;C\x07\x1b]133;C\x07out\x1b]133;D;0\x07\x1b]133;D;0\x07",
        ]);
        let kinds: Vec<_> = marks.iter().map(|m| m.kind.clone()).collect();
        assert_eq!(
            kinds,
            vec![
                MarkKind::PromptStart,
                MarkKind::CommandStart { command: None },
                MarkKind::CommandEnd { exit: Some(0) },
            ]
        );
        assert_eq!(
            t.state(),
            &ShellState::Unknown,
            "D without a new prompt yet"
        );
    }

    #[test]
    fn other_sequences_and_malformed_marks_are_not_marks() {
        let (t, marks) = all(&[
            b"\x1b]0;title\x07\x1b]133;Z\x07\x1b]1337;x\x07\x1b[31m\x1b]7;http://x/y\x07",
            b"\x1b]133;D;notanumber\x07\x1b]133;A\x1bX\x1b]133;B\x07",
        ]);
        // The aborted A (ESC X) is dropped; B counts; the D with no command running
        // collapses.
        assert_eq!(
            marks.iter().map(|m| m.kind.clone()).collect::<Vec<_>>(),
            vec![MarkKind::PromptEnd]
        );
        assert_eq!(t.state(), &ShellState::Prompt);
        assert_eq!(t.cwd(), None);
    }

    #[test]
    fn an_overlong_sequence_is_skipped_and_bounded() {
        let mut t = ShellTracker::new();
        let mut marks = Vec::new();
        t.feed(b"\x1b]133;C;cmdline=", &mut marks);
        for _ in 0..100 {
            t.feed(&[b'x'; 1 << 16], &mut marks);
            assert!(t.buf.capacity() <= 2 * MARK_MAX, "bounded");
        }
        t.feed(b"\x07\x1b]133;A\x07", &mut marks);
        assert_eq!(
            marks.iter().map(|m| m.kind.clone()).collect::<Vec<_>>(),
            vec![MarkKind::PromptStart]
        );
    }

    #[test]
    fn a_resumed_tracker_counts_from_its_cursor() {
        let mut t = ShellTracker::resume(1000, ShellState::Running { command: None });
        let mut marks = Vec::new();
        t.feed(b"x\x1b]133;D;3\x07\x1b]133;A\x07", &mut marks);
        assert_eq!(marks[0].kind, MarkKind::CommandEnd { exit: Some(3) });
        assert_eq!(marks[0].start, 1001);
        assert_eq!(t.state(), &ShellState::Prompt);
        assert_eq!(t.cursor(), 1000 + 19);
    }

    #[test]
    fn exit_codes_and_options() {
        for (seq, exit) in [
            (&b"\x1b]133;D;130\x07"[..], Some(130)),
            (b"\x1b]133;D\x07", None),
            (b"\x1b]133;D;1;aid=9\x07", Some(1)),
            (b"\x1b]133;D;-1\x07", Some(-1)),
        ] {
            let (t, marks) = all(&[b"\x1b]133;C\x07", seq]);
            assert_eq!(
                marks.last().map(|m| m.kind.clone()),
                Some(MarkKind::CommandEnd { exit }),
                "{seq:?}"
            );
            assert_eq!(t.last_exit(), exit);
        }
    }
}
