//! `run`: type one command into a shell and read back exactly what it did
//! (SPEC.md §4.7), on one connection bound to one creation.
//!
//! ```text
//! BIND ─ LEASE (busy: refused) ─ ATTACH read-only (SCREEN, CUT)
//!   └ wait for the prompt (OSC 133 A/B) ─ INPUT the line (bracketed paste when
//!     mode 2004 is on) + CR ─ C: the output starts ─ D;N: it ends, code N
//! ```
//!
//! The output is exactly the bytes between the end of C and the start of D: no
//! prompt, no echo of the typed line. A creation that ends or is replaced while
//! the command runs ends the run with an error, never with another creation's
//! output.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use latch_screen::shell::MARK_MAX;
use latch_screen::{MarkKind, ShellState, ShellTracker};
use latch_wire::{SessionRef, ShellPhase};

use crate::client::Client;
use crate::conn::{AttachEvent, AttachReader, AttachWriter, Bound};
use crate::error::{ClientError, UnreachableCause};
use crate::options::AttachMode;

/// How long a shell without integration must be quiet after its first output
/// before a `--marker` run types into it (when its foreground process is not
/// seen reading the terminal).
pub const QUIET_READY: Duration = Duration::from_millis(200);

/// How a run goes.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// The whole run's deadline: the prompt, the typing and the command's end.
    pub timeout: Duration,
    /// Type the marker line (SPEC.md §4.7) instead of relying on the shell's
    /// integration: for POSIX shells without it.
    pub marker: bool,
}

/// What a run found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunResult {
    /// The command's exit code (from its D mark); `None` when the shell did not
    /// say, or the run stopped waiting ([`RunResult::interrupted`]).
    pub exit_code: Option<i32>,
    /// The output cursors of the command's first byte and of its D mark.
    pub output_range: (u64, u64),
    /// Output of the command this reader lost (a resynchronisation skipped it).
    pub dropped_bytes: u64,
    /// When C and D were read, ms since the Unix epoch.
    pub started_at_ms: u64,
    /// When D was read (or the run stopped waiting).
    pub ended_at_ms: u64,
    /// The shell's working directory when the command started.
    pub cwd: Option<String>,
    /// The shell drew a new prompt without running anything (an empty line, a
    /// comment).
    pub nothing_ran: bool,
    /// A second interrupt stopped the wait; the command may still be running.
    pub interrupted: bool,
}

impl Client {
    /// Runs `command` in `session`'s shell (SPEC.md §4.7): see [`run_bound`].
    /// A session whose program ends before the command does is
    /// [`ClientError::Replaced`] (exit 4) when the id now names another creation,
    /// else [`ClientError::NotFound`] (exit 3).
    pub fn run(
        &self,
        session: &SessionRef,
        command: &str,
        opts: &RunOptions,
        interrupts: Option<&AtomicU32>,
        on_output: &mut dyn FnMut(&[u8]),
    ) -> Result<RunResult, ClientError> {
        let bound = self.connect(session)?;
        match run_bound(bound, command, opts, interrupts, on_output) {
            Err(ClientError::NotFound(m)) => match self.read_checked(&session.id) {
                Ok(Some(r)) if r.incarnation != session.incarnation => Err(ClientError::replaced(
                    &session.id,
                    session.incarnation,
                    Some(r.incarnation),
                )),
                _ => Err(ClientError::NotFound(m)),
            },
            other => other,
        }
    }
}

/// Runs `command` over `bound`, wherever its session lives: takes the run
/// lease, waits for the prompt, types the command, and hands `on_output` the
/// command's output bytes (C to D) as they come. `interrupts` counts the caller's
/// Ctrl-C: the first sends C-c to the command, the second stops waiting.
///
/// Errors: [`ClientError::Busy`] (another run holds the lease),
/// [`ClientError::Refused`] (no shell integration, or a continuation prompt),
/// [`ClientError::TimedOut`] (the command is left running),
/// [`ClientError::NotFound`] (the program ended first), a version-2 daemon
/// [`ClientError::Protocol`]. Nothing is typed unless the shell was at its prompt.
pub fn run_bound(
    mut bound: Bound,
    command: &str,
    opts: &RunOptions,
    interrupts: Option<&AtomicU32>,
    on_output: &mut dyn FnMut(&[u8]),
) -> Result<RunResult, ClientError> {
    let deadline = Instant::now() + opts.timeout;
    let session = bound.target().clone();
    let facts = bound.lease()?;
    if !facts.granted {
        return Err(ClientError::Busy(format!(
            "session {session}: another run holds its run lease; nothing was typed"
        )));
    }
    let integrated = facts.integration || facts.marked;
    if !opts.marker && !integrated {
        return Err(ClientError::Refused(format!(
            "session {session}: its program marks no prompts (no shell integration: not \
             bash, zsh or fish started by latch, and no OSC 133 seen), so run cannot tell \
             where a command's output starts and ends; nothing was typed (for a POSIX shell, \
             try run --marker)"
        )));
    }
    let mut r = Runner::attach(bound, &session, deadline, interrupts)?;
    r.until_ready(integrated, facts.reading)?;
    r.type_line(&typed_line(command, opts.marker))?;
    r.until_end(opts.marker, on_output)
}

/// The line typed for `command`: with `marker`, the marker line of SPEC.md §4.7
/// (POSIX sh quoting); else the command itself. Either begins with a space, to
/// stay out of the history; a command with `!` goes through `eval '…'`, where
/// bash and zsh do no history expansion.
pub fn typed_line(command: &str, marker: bool) -> String {
    let quoted = || format!("'{}'", command.replace('\'', r"'\''"));
    if marker {
        format!(
            r#" printf '\033]133;C\007'; command eval {}; printf '\033]133;D;%s\007' "$?""#,
            quoted()
        )
    } else if command.contains('!') {
        format!(" eval {}", quoted())
    } else {
        format!(" {command}")
    }
}

pub(crate) fn phase_state(p: ShellPhase) -> ShellState {
    match p {
        ShellPhase::Prompt => ShellState::Prompt,
        ShellPhase::Running => ShellState::Running { command: None },
        ShellPhase::Unknown => ShellState::Unknown,
    }
}

/// Whether bracketed paste is on, from the attach SCREEN (which sets every tracked
/// mode explicitly, SPEC.md §4.4) and then the stream.
#[derive(Debug)]
pub(crate) struct Paste {
    pub(crate) on: bool,
    /// The stream's last bytes, for a mode change split between chunks.
    tail: Vec<u8>,
}

impl Paste {
    const ON: &'static [u8] = b"\x1b[?2004h";
    const OFF: &'static [u8] = b"\x1b[?2004l";

    pub(crate) fn from_screen(screen: &[u8]) -> Self {
        let mut p = Self {
            on: false,
            tail: Vec::new(),
        };
        p.feed(screen);
        p.tail.clear();
        p
    }

    pub(crate) fn feed(&mut self, bytes: &[u8]) {
        self.tail.extend_from_slice(bytes);
        let last = |pat: &[u8]| self.tail.windows(pat.len()).rposition(|w| w == pat);
        match (last(Self::ON), last(Self::OFF)) {
            (Some(a), Some(b)) => self.on = a > b,
            (Some(_), None) => self.on = true,
            (None, Some(_)) => self.on = false,
            (None, None) => {}
        }
        let keep = Self::ON.len() - 1;
        if self.tail.len() > keep {
            self.tail.drain(..self.tail.len() - keep);
        }
    }
}

/// One run's stream and state.
pub(crate) struct Runner<'a> {
    pub(crate) session: &'a SessionRef,
    pub(crate) reader: AttachReader,
    pub(crate) writer: AttachWriter,
    pub(crate) deadline: Instant,
    pub(crate) interrupts: Option<&'a AtomicU32>,
    pub(crate) sent_cc: bool,
    /// The output cursor after everything read.
    pub(crate) cursor: u64,
    pub(crate) tracker: ShellTracker,
    pub(crate) paste: Paste,
    pub(crate) dropped: u64,
    /// The working directory at the cut, until the stream says another.
    pub(crate) cwd: Option<String>,
}

impl<'a> Runner<'a> {
    /// Attaches `bound` read-only and starts from its cut: the cursor, the shell's
    /// state, the paste mode and the cwd the daemon reported there (SPEC.md §4.7).
    pub(crate) fn attach(
        bound: Bound,
        session: &'a SessionRef,
        deadline: Instant,
        interrupts: Option<&'a AtomicU32>,
    ) -> Result<Self, ClientError> {
        let attached = bound.attach(0, 0, AttachMode::ReadOnly)?;
        let cut = attached.cut.clone().ok_or_else(|| {
            ClientError::protocol(
                crate::error::Mismatch::BadFrame,
                "no CUT after the attach SCREEN",
            )
        })?;
        Ok(Runner {
            session,
            reader: attached.reader,
            writer: attached.writer,
            deadline,
            interrupts,
            sent_cc: false,
            cursor: cut.cursor,
            tracker: ShellTracker::resume(cut.cursor, phase_state(cut.shell.state)),
            paste: Paste::from_screen(&attached.screen),
            dropped: 0,
            cwd: cut.shell.cwd.clone(),
        })
    }

    /// Waits until the program is ready for input: the shell's prompt with
    /// integration, else the foreground process reading (or output then quiet).
    pub(crate) fn until_ready(
        &mut self,
        integrated: bool,
        reading: bool,
    ) -> Result<(), ClientError> {
        if integrated {
            self.until_prompt()
        } else {
            self.until_quiet(reading)
        }
    }
}

/// What one wait on the stream brought.
pub(crate) enum Got {
    /// Output at this cursor.
    Output(u64, bytes::Bytes),
    /// A resynchronisation skipped to this cut.
    Skipped,
    /// The caller pressed Ctrl-C twice.
    Interrupted,
    /// The deadline.
    Deadline,
}

impl Runner<'_> {
    /// The next output, skip, interrupt or deadline; the program's end and the
    /// connection's are errors.
    pub(crate) fn next(&mut self, until: Instant) -> Result<Got, ClientError> {
        loop {
            let presses = self.interrupts.map_or(0, |n| n.load(Ordering::Relaxed));
            if presses >= 2 {
                return Ok(Got::Interrupted);
            }
            if presses == 1 && !self.sent_cc {
                self.sent_cc = true;
                self.writer.input(b"\x03")?;
            }
            let mut left = until
                .min(self.deadline)
                .saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(Got::Deadline);
            }
            if self.interrupts.is_some() {
                left = left.min(Duration::from_millis(100));
            }
            self.reader.set_timeout(Some(left))?;
            let event = match self.reader.next_event() {
                Ok(e) => e,
                Err(ClientError::Unreachable {
                    cause: UnreachableCause::TimedOut,
                    ..
                }) => continue,
                Err(e) => return Err(e),
            };
            match event {
                AttachEvent::Output(b) => {
                    let at = self.cursor;
                    self.cursor += b.len() as u64;
                    self.paste.feed(&b);
                    return Ok(Got::Output(at, b));
                }
                AttachEvent::Cut(c) => {
                    self.dropped += c.cursor.saturating_sub(self.cursor);
                    self.cursor = c.cursor;
                    self.tracker = ShellTracker::resume(c.cursor, phase_state(c.shell.state));
                    self.cwd = c.shell.cwd;
                    return Ok(Got::Skipped);
                }
                AttachEvent::Exit(s) => {
                    let how = match (s.code, s.signal) {
                        (_, Some(sig)) => format!("was killed by signal {sig}"),
                        (Some(c), None) => format!("exited with code {c}"),
                        (None, None) => "exited".to_owned(),
                    };
                    return Err(ClientError::NotFound(format!(
                        "{} running: its program {how} before the command ended",
                        self.session
                    )));
                }
                AttachEvent::Closed | AttachEvent::Detached => {
                    return Err(ClientError::unreachable(
                        UnreachableCause::Closed,
                        format!("session {}'s daemon closed the connection", self.session),
                    ))
                }
                AttachEvent::Error { code, detail } => {
                    return Err(ClientError::Daemon { code, detail })
                }
                AttachEvent::LeaseRevoked => {
                    return Err(ClientError::NotFound(format!(
                        "{} running: it is being stopped (killed or restarted) before the \
                         command ended",
                        self.session
                    )))
                }
                AttachEvent::Geometry { .. } | AttachEvent::Screen(_) => {}
            }
        }
    }

    pub(crate) fn feed(&mut self, bytes: &[u8]) -> Vec<latch_screen::Mark> {
        let mut marks = Vec::new();
        self.tracker.feed(bytes, &mut marks);
        marks
    }

    /// Waits until the shell is at its prompt; nothing is typed before.
    pub(crate) fn until_prompt(&mut self) -> Result<(), ClientError> {
        while self.tracker.state() != &ShellState::Prompt {
            match self.next(self.deadline)? {
                Got::Output(_, b) => {
                    self.feed(&b);
                }
                Got::Skipped => {}
                Got::Interrupted => return Err(interrupted_before(self.session)),
                Got::Deadline => {
                    let doing = match self.tracker.state() {
                        ShellState::Running { command: Some(c) } => format!("still runs {c:?}"),
                        ShellState::Running { command: None } => "still runs a command".into(),
                        _ => "has drawn no prompt".into(),
                    };
                    return Err(ClientError::TimedOut(format!(
                        "session {}: the shell {doing}; nothing was typed",
                        self.session
                    )));
                }
            }
        }
        Ok(())
    }

    /// A shell without integration: ready when its foreground process reads the
    /// terminal (`reading`, as the daemon saw it), else once it has written and
    /// then been quiet for [`QUIET_READY`].
    pub(crate) fn until_quiet(&mut self, reading: bool) -> Result<(), ClientError> {
        if reading {
            return Ok(());
        }
        let mut last: Option<Instant> = None;
        loop {
            let until = last.map_or(self.deadline, |l| l + QUIET_READY);
            match self.next(until)? {
                Got::Output(..) | Got::Skipped => last = Some(Instant::now()),
                Got::Interrupted => return Err(interrupted_before(self.session)),
                Got::Deadline if Instant::now() >= self.deadline => {
                    return Err(ClientError::TimedOut(format!(
                        "session {}: the program never went quiet; nothing was typed",
                        self.session
                    )))
                }
                Got::Deadline => return Ok(()),
            }
        }
    }

    /// Types `line` and Enter: inside bracketed paste when the program enabled
    /// it, so a multi-line command arrives as one.
    fn type_line(&mut self, line: &str) -> Result<(), ClientError> {
        let mut bytes = Vec::with_capacity(line.len() + 16);
        if self.paste.on {
            bytes.extend_from_slice(b"\x1b[200~");
            bytes.extend_from_slice(line.as_bytes());
            bytes.extend_from_slice(b"\x1b[201~");
        } else {
            bytes.extend_from_slice(line.as_bytes());
        }
        bytes.push(b'\r');
        self.writer.input(&bytes)
    }

    /// After typing: the command's C, its output, its D.
    fn until_end(
        &mut self,
        marker: bool,
        on_output: &mut dyn FnMut(&[u8]),
    ) -> Result<RunResult, ClientError> {
        // The marker line's own C and D are the ones that count: a prompt that
        // printed a C before (a prompt containing the marker) does not.
        if marker {
            self.tracker = ShellTracker::resume(self.cursor, ShellState::Unknown);
        }
        let (prompts, continuations) = (self.tracker.prompts(), self.tracker.continuations());
        let mut out = Pending::default();
        let mut res = RunResult {
            exit_code: None,
            output_range: (0, 0),
            dropped_bytes: 0,
            started_at_ms: 0,
            ended_at_ms: 0,
            cwd: None,
            nothing_ran: false,
            interrupted: false,
        };
        let mut started: Option<u64> = None;
        loop {
            let (at, bytes) = match self.next(self.deadline)? {
                Got::Output(at, b) => (at, b),
                Got::Skipped => {
                    let running = matches!(self.tracker.state(), ShellState::Running { .. });
                    if started.is_some() && !running {
                        // D went by in what was skipped.
                        res.exit_code = self.tracker.last_exit();
                        return Ok(self.finish(res, started, self.cursor, &mut out, on_output));
                    }
                    continue;
                }
                Got::Interrupted => {
                    res.interrupted = true;
                    let end = self.cursor;
                    return Ok(self.finish(res, started, end, &mut out, on_output));
                }
                Got::Deadline => {
                    let what = if started.is_some() {
                        "the command is still running (it was left running)"
                    } else {
                        // Nothing started: the shell still edits a line it did
                        // not mark incomplete (SPEC §4.6). Cancel it.
                        self.writer.input(b"\x03")?;
                        "the shell did not start the command (an incomplete line?); \
                         the line was cancelled with C-c"
                    };
                    return Err(ClientError::TimedOut(format!(
                        "session {}: {what}",
                        self.session
                    )));
                }
            };
            let marks = self.feed(&bytes);
            let mut end = None;
            for m in &marks {
                match &m.kind {
                    MarkKind::CommandStart { .. } if started.is_none() => {
                        started = Some(m.end);
                        res.started_at_ms = latch_registry::now_ms();
                        res.cwd = self.tracker.cwd().map(str::to_owned).or(self.cwd.clone());
                    }
                    MarkKind::CommandEnd { exit } if started.is_some() && end.is_none() => {
                        res.exit_code = *exit;
                        end = Some(m.start);
                    }
                    _ => {}
                }
            }
            if let Some(s) = started {
                let chunk_end = at + bytes.len() as u64;
                let from = s.max(at);
                let to = end.unwrap_or(chunk_end).min(chunk_end);
                if to > from {
                    let lo = usize::try_from(from - at).unwrap_or(0);
                    let hi = usize::try_from(to - at).unwrap_or(bytes.len());
                    out.push(from, &bytes[lo..hi], on_output);
                }
                if let Some(e) = end {
                    return Ok(self.finish(res, started, e, &mut out, on_output));
                }
            } else if self.tracker.continuations() > continuations {
                // An unclosed quote: the shell waits for more. Cancel the line,
                // and wait for the fresh prompt, so that what is typed next is
                // not flushed with the interrupt.
                self.writer.input(b"\x03")?;
                let drawn = self.tracker.prompts();
                while self.tracker.prompts() == drawn {
                    match self.next(self.deadline)? {
                        Got::Output(_, b) => {
                            self.feed(&b);
                        }
                        Got::Skipped => {}
                        Got::Interrupted | Got::Deadline => break,
                    }
                }
                return Err(ClientError::Refused(format!(
                    "session {}: the command is incomplete (the shell showed its continuation \
                     prompt); nothing ran, and the line was cancelled with C-c",
                    self.session
                )));
            } else if self.tracker.prompts() > prompts {
                res.nothing_ran = true;
                res.exit_code = Some(0);
                return Ok(self.finish(res, Some(self.cursor), self.cursor, &mut out, on_output));
            }
        }
    }

    fn finish(
        &mut self,
        mut res: RunResult,
        started: Option<u64>,
        end: u64,
        out: &mut Pending,
        on_output: &mut dyn FnMut(&[u8]),
    ) -> RunResult {
        out.flush(on_output);
        let start = started.unwrap_or(end);
        res.output_range = (start, end.max(start));
        res.dropped_bytes = self.dropped;
        res.ended_at_ms = latch_registry::now_ms();
        if res.started_at_ms == 0 {
            res.started_at_ms = res.ended_at_ms;
        }
        res
    }
}

fn interrupted_before(session: &SessionRef) -> ClientError {
    ClientError::Usage(format!(
        "session {session}: interrupted before anything was typed"
    ))
}

/// Output held back from the last ESC that may open a mark (a D split between
/// chunks), so that exactly the bytes before D reach the caller.
#[derive(Debug, Default)]
struct Pending {
    bytes: Vec<u8>,
}

impl Pending {
    fn push(&mut self, _at: u64, bytes: &[u8], on_output: &mut dyn FnMut(&[u8])) {
        self.bytes.extend_from_slice(bytes);
        let hold = match self.bytes.iter().rposition(|&b| b == 0x1b) {
            Some(esc) => {
                // Only an OSC (ESC ]) can be a mark; one not yet ended is held.
                let rest = &self.bytes[esc + 1..];
                let open_osc = rest.is_empty()
                    || (rest[0] == b']' && !rest.contains(&0x07) && !rest.contains(&b'\\'));
                if open_osc && rest.len() <= MARK_MAX {
                    esc
                } else {
                    self.bytes.len()
                }
            }
            None => self.bytes.len(),
        };
        if hold > 0 {
            on_output(&self.bytes[..hold]);
            self.bytes.drain(..hold);
        }
    }

    fn flush(&mut self, on_output: &mut dyn FnMut(&[u8])) {
        // What is held back is the start of the D mark, or a sequence cut off
        // by the end: never the command's text.
        self.bytes.clear();
        let _ = on_output;
    }
}

#[cfg(test)]
#[path = "run_tests.rs"]
mod tests;
