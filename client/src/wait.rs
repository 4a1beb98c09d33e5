//! Waiting for text on a session's screen, driven by its output (no polling).

use std::time::{Duration, Instant};

use bytes::Bytes;
use latch_wire::SessionRef;

use crate::client::Client;
use crate::conn::{AttachEvent, AttachReader, Bound};
use crate::error::{ClientError, UnreachableCause};
use crate::options::{AttachMode, PeekFormat, PeekOptions};
use crate::proto;

impl Client {
    /// Waits until `session`'s screen (plain text, over `opts.scope`) shows `text`,
    /// at most `timeout`, and returns that screen in `opts.format`.
    ///
    /// Event-driven: a read-only attachment wakes the wait on every output, and each
    /// wake peeks again through a connection bound to `session`, so the text is
    /// only ever read from that creation. Fails with [`ClientError::TimedOut`]
    /// (exit 10) at the deadline and with [`UnreachableCause::Exited`] if the
    /// session ends first.
    pub fn wait_for_text(
        &self,
        session: &SessionRef,
        text: &str,
        opts: PeekOptions,
        timeout: Duration,
    ) -> Result<Bytes, ClientError> {
        let mut bound = self.connect(session)?;
        let wake = self
            .connect(session)?
            .attach(0, 0, AttachMode::ReadOnly)?
            .reader;
        bound.wait_for_text(wake, text, opts, timeout)
    }
}

impl Bound {
    /// Waits until the screen of the creation this connection is bound to (plain
    /// text, over `opts.scope`) shows `text`, at most `timeout`, and returns that
    /// screen in `opts.format`. `wake` is a read-only attachment to the same
    /// creation: every output it reports wakes the wait, and each wake peeks again
    /// through `self`, so the text is only ever read from that creation
    /// ([`Client::wait_for_text`] opens both; a caller with connections of its own,
    /// such as a relay to another host, passes them here).
    pub fn wait_for_text(
        &mut self,
        mut wake: AttachReader,
        text: &str,
        opts: PeekOptions,
        timeout: Duration,
    ) -> Result<Bytes, ClientError> {
        let deadline = Instant::now() + timeout;
        let plain = opts.with_format(PeekFormat::Plain);
        loop {
            let screen = self.peek(plain)?;
            if proto::shows(&screen, text) {
                return match opts.format {
                    PeekFormat::Plain => Ok(screen),
                    PeekFormat::Ansi => self.peek(opts),
                };
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(proto::wait_timed_out(text, timeout));
            }
            wake.set_timeout(Some(left))?;
            match wake.next_event() {
                Ok(event) => proto::wait_wake(event, text)?,
                Err(ClientError::Unreachable {
                    cause: UnreachableCause::TimedOut,
                    ..
                }) => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// What [`Client::wait`] waits for (SPEC.md §4.7). Each is evaluated on the
/// daemon's stream of one creation, so nothing scrolls past between polls and a
/// wait never spans two creations.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Condition {
    /// The output written after the start cursor contains this text, as plain text
    /// (escape sequences removed, `\r` dropped): never old scrollback, nor an echo
    /// already on the screen when the wait began.
    Text(String),
    /// The program has written nothing for this long.
    Idle(Duration),
    /// The shell is at its prompt (an OSC 133 A or B since its last C, SPEC.md §4.6).
    Prompt,
    /// The program has ended.
    Exit,
}

impl Condition {
    /// Its name in `wait --json` (`text`, `idle`, `prompt`, `exit`).
    pub fn name(&self) -> &'static str {
        match self {
            Self::Text(_) => "text",
            Self::Idle(_) => "idle",
            Self::Prompt => "prompt",
            Self::Exit => "exit",
        }
    }
}

/// How a wait ended well.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Waited {
    /// The condition held at this output cursor: where the text's output chunk
    /// ended, where the prompt's mark ended, or where the quiet began.
    At {
        /// The output cursor.
        cursor: u64,
    },
    /// The program ended so ([`Condition::Exit`]).
    Exited(latch_wire::ExitStatus),
}

/// The most plain text kept for a text wait beyond the text's own length: a match
/// is found within this window (SPEC.md §4.7).
pub const TEXT_WINDOW: usize = 64 * 1024;

impl Client {
    /// Waits until `condition` holds in `session`, at most `timeout`. Text is looked
    /// for in the output after cursor `after` (default: the output cursor when the
    /// wait began). A condition that already holds returns at once.
    ///
    /// Errors: [`ClientError::TimedOut`] (exit 10) at the deadline;
    /// [`ClientError::NotFound`] (exit 3) when the program ends first (for
    /// anything but [`Condition::Exit`]); [`ClientError::Replaced`] (exit 4) for
    /// another creation; a daemon of protocol version 2: [`ClientError::Protocol`]
    /// (exit 8).
    pub fn wait(
        &self,
        session: &SessionRef,
        condition: &Condition,
        after: Option<u64>,
        timeout: Duration,
    ) -> Result<Waited, ClientError> {
        let deadline = Instant::now() + timeout;
        let r = match self.connect(session) {
            Ok(b) => wait_bound(b, || self.connect(session), condition, after, timeout),
            Err(e @ ClientError::Unreachable { .. }) => {
                return match self.final_screen(session)? {
                    Some(f) => ended(session, condition, f.exit.code, f.exit.signal),
                    None => Err(e),
                }
            }
            Err(e) => Err(e),
        };
        match r {
            // A daemon that is stopping its program (SPEC.md §4.7): the exit is
            // on its way to the record.
            Err(ClientError::Daemon {
                code: latch_wire::ErrorCode::Draining,
                ..
            }) if *condition == Condition::Exit => self.until_recorded_exit(session, deadline),
            other => other,
        }
    }

    /// Waits until `session`'s exit is in its record, polling it until `deadline`.
    fn until_recorded_exit(
        &self,
        session: &SessionRef,
        deadline: Instant,
    ) -> Result<Waited, ClientError> {
        loop {
            match self.read_checked(&session.id)? {
                Some(r) if r.incarnation != session.incarnation => {
                    return Err(ClientError::replaced(
                        &session.id,
                        session.incarnation,
                        Some(r.incarnation),
                    ))
                }
                Some(r) => {
                    if let Some(e) = r.exit {
                        return ended(session, &Condition::Exit, e.code, e.signal);
                    }
                }
                None => return Err(ClientError::NotFound(format!("session {session} is gone"))),
            }
            if Instant::now() >= deadline {
                return Err(timed_out(session, &Condition::Exit));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// [`Client::wait`] over a bound connection, wherever its session lives;
/// `second` opens another connection bound to the same creation (for the output
/// between `after` and the cut).
pub fn wait_bound(
    mut bound: Bound,
    second: impl FnOnce() -> Result<Bound, ClientError>,
    condition: &Condition,
    after: Option<u64>,
    timeout: Duration,
) -> Result<Waited, ClientError> {
    let deadline = Instant::now() + timeout;
    let session = bound.target().clone();
    let (_, facts) = bound.status_full()?;
    let Some(facts) = facts else {
        proto::needs_version(&bound.negotiated(), latch_wire::CURSORS_VERSION, "waits")?;
        return Err(ClientError::protocol(
            crate::error::Mismatch::BadFrame,
            "a version-3 daemon answered STATUS without its output facts",
        ));
    };
    if *condition == Condition::Prompt && facts.shell.state == latch_wire::ShellPhase::Prompt {
        return Ok(Waited::At {
            cursor: facts.output_cursor,
        });
    }
    let attached = bound.attach(0, 0, AttachMode::ReadOnly)?;
    let cut = attached.cut.clone().ok_or_else(|| {
        ClientError::protocol(
            crate::error::Mismatch::BadFrame,
            "no CUT after the attach SCREEN",
        )
    })?;
    let mut w = Watch {
        session: &session,
        reader: attached.reader,
        deadline,
        cursor: cut.cursor,
    };
    match condition {
        Condition::Text(text) => {
            let start = after.unwrap_or(cut.cursor);
            let mut finder = Finder::new(text, start);
            if start < cut.cursor {
                let mut earlier = second()?;
                let mut from = start;
                while from < cut.cursor {
                    let r = earlier.output_since(from, 1 << 20)?;
                    let want = usize::try_from(cut.cursor.saturating_sub(r.start))
                        .unwrap_or(usize::MAX)
                        .min(r.bytes.len());
                    if let Some(at) = finder.feed(r.start, &r.bytes[..want]) {
                        return Ok(Waited::At { cursor: at });
                    }
                    from = r.start + want as u64;
                    if want == 0 {
                        break;
                    }
                }
            }
            w.until(condition, |chunk_start, bytes| {
                finder.feed(chunk_start, bytes)
            })
        }
        Condition::Prompt => {
            let state = match cut.shell.state {
                latch_wire::ShellPhase::Prompt => latch_screen::ShellState::Prompt,
                latch_wire::ShellPhase::Running => {
                    latch_screen::ShellState::Running { command: None }
                }
                latch_wire::ShellPhase::Unknown => latch_screen::ShellState::Unknown,
            };
            let mut tracker = latch_screen::ShellTracker::resume(cut.cursor, state);
            let mut marks = Vec::new();
            w.until(condition, |_, bytes| {
                marks.clear();
                tracker.feed(bytes, &mut marks);
                (tracker.state() == &latch_screen::ShellState::Prompt)
                    .then(|| marks.last().map_or(tracker.cursor(), |m| m.end))
            })
        }
        Condition::Idle(quiet) => {
            // Quiet is the daemon's to tell (a reader that fell behind sees gaps
            // that were not there): the stream only says when to ask it, through
            // a second connection, whether its program has been quiet long enough.
            let mut second = Some(second);
            let mut asker: Option<Bound> = None;
            let ask = move || -> Result<(Duration, u64), ClientError> {
                if let Some(open) = second.take() {
                    asker = Some(open()?);
                }
                let Some(b) = asker.as_mut() else {
                    return Err(ClientError::Other("no second connection".into()));
                };
                let (_, f) = b.status_full()?;
                let f = f.ok_or_else(|| {
                    ClientError::protocol(crate::error::Mismatch::Version, "no output facts")
                })?;
                Ok((quiet_since(f.last_output_ms), f.output_cursor))
            };
            w.idle(*quiet, quiet_since(facts.last_output_ms), ask)
        }
        Condition::Exit => w.until(condition, |_, _| None),
    }
}

/// The stream of one read-only attachment, with the wait's deadline.
struct Watch<'a> {
    session: &'a SessionRef,
    reader: crate::conn::AttachReader,
    deadline: Instant,
    /// The output cursor after everything read.
    cursor: u64,
}

impl Watch<'_> {
    /// The next event, or `None` at `until` (or the deadline, whichever is first).
    fn next(&mut self, until: Instant) -> Result<Option<AttachEvent>, ClientError> {
        let left = until
            .min(self.deadline)
            .saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        self.reader.set_timeout(Some(left))?;
        match self.reader.next_event() {
            Ok(e) => Ok(Some(e)),
            Err(ClientError::Unreachable {
                cause: UnreachableCause::TimedOut,
                ..
            }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Feeds each output chunk (its start cursor, its bytes) to `found` until it
    /// names the cursor where the condition held, the program ends, or the
    /// deadline passes.
    fn until(
        &mut self,
        condition: &Condition,
        mut found: impl FnMut(u64, &[u8]) -> Option<u64>,
    ) -> Result<Waited, ClientError> {
        loop {
            let deadline = self.deadline;
            match self.next(deadline)? {
                None => return Err(timed_out(self.session, condition)),
                Some(AttachEvent::Output(b)) => {
                    let start = self.cursor;
                    self.cursor += b.len() as u64;
                    if let Some(at) = found(start, &b) {
                        return Ok(Waited::At { cursor: at });
                    }
                }
                Some(other) => {
                    if let Some(end) = self.other(condition, other) {
                        return end;
                    }
                }
            }
        }
    }

    /// What any event but output means for a wait: a resynchronisation's CUT
    /// moves the cursor on (`None`: go on), the program's end or the connection's
    /// ends the wait.
    fn other(
        &mut self,
        condition: &Condition,
        event: AttachEvent,
    ) -> Option<Result<Waited, ClientError>> {
        match event {
            // A resynchronisation: the stream goes on from the cut's cursor.
            AttachEvent::Cut(c) => {
                self.cursor = c.cursor;
                None
            }
            AttachEvent::Exit(s) => Some(ended(self.session, condition, s.code, s.signal)),
            AttachEvent::Closed | AttachEvent::Detached => Some(Err(ClientError::unreachable(
                UnreachableCause::Closed,
                format!("session {}'s daemon closed the connection", self.session),
            ))),
            AttachEvent::Error { code, detail } => Some(Err(ClientError::Daemon { code, detail })),
            _ => None,
        }
    }

    /// Waits until the program has written nothing for `quiet`, `since` having
    /// passed already since its last output; `ask` asks the daemon how long its
    /// program has been quiet, and its output cursor, whenever the stream has been
    /// quiet that long here.
    fn idle(
        &mut self,
        quiet: Duration,
        mut since: Duration,
        mut ask: impl FnMut() -> Result<(Duration, u64), ClientError>,
    ) -> Result<Waited, ClientError> {
        let condition = Condition::Idle(quiet);
        if since >= quiet {
            return Ok(Waited::At {
                cursor: self.cursor,
            });
        }
        loop {
            let mut last = Instant::now()
                .checked_sub(since)
                .unwrap_or_else(Instant::now);
            while Instant::now() < last + quiet {
                match self.next(last + quiet)? {
                    None if Instant::now() >= self.deadline => {
                        return Err(timed_out(self.session, &condition))
                    }
                    None => {}
                    Some(AttachEvent::Output(b)) => {
                        self.cursor += b.len() as u64;
                        last = Instant::now();
                    }
                    Some(other) => {
                        if let Some(end) = self.other(&condition, other) {
                            return end;
                        }
                    }
                }
            }
            let (daemon_since, cursor) = ask()?;
            if daemon_since >= quiet {
                return Ok(Waited::At { cursor });
            }
            if Instant::now() >= self.deadline {
                return Err(timed_out(self.session, &condition));
            }
            since = daemon_since;
        }
    }
}

/// How long ago the program last wrote (forever when it never has), by the
/// daemon's clock: `last_output_ms` is its time of the last read from the PTY.
fn quiet_since(last_output_ms: Option<u64>) -> Duration {
    last_output_ms.map_or(Duration::MAX, |ms| {
        Duration::from_millis(latch_registry::now_ms().saturating_sub(ms))
    })
}

/// Plain text of the output from a start cursor, searched for `text` within a
/// bounded window.
pub(crate) struct Finder<'a> {
    text: &'a str,
    start: u64,
    plain: latch_screen::PlainStream,
    window: String,
}

impl<'a> Finder<'a> {
    pub(crate) fn new(text: &'a str, start: u64) -> Self {
        Self {
            text,
            start,
            plain: latch_screen::PlainStream::default(),
            window: String::new(),
        }
    }

    /// The chunk of output at cursor `at`: the cursor after it when the text is
    /// now found (bytes before the start cursor are not looked at).
    pub(crate) fn feed(&mut self, at: u64, bytes: &[u8]) -> Option<u64> {
        let skip = usize::try_from(self.start.saturating_sub(at))
            .unwrap_or(usize::MAX)
            .min(bytes.len());
        let bytes = &bytes[skip..];
        if bytes.is_empty() {
            return None;
        }
        self.window.push_str(&self.plain.strip(bytes));
        let found = self.window.contains(self.text);
        let keep = self.text.len() + TEXT_WINDOW;
        if self.window.len() > keep {
            let mut cut = self.window.len() - keep;
            while !self.window.is_char_boundary(cut) {
                cut += 1;
            }
            self.window.drain(..cut);
        }
        found.then(|| at + skip as u64 + bytes.len() as u64)
    }
}

fn timed_out(session: &SessionRef, condition: &Condition) -> ClientError {
    ClientError::TimedOut(format!(
        "session {session}: no {} before the deadline",
        condition.name()
    ))
}

/// The program ended: what an exit wait waited for, anything else's failure.
pub(crate) fn ended(
    session: &SessionRef,
    condition: &Condition,
    code: Option<i32>,
    signal: Option<i32>,
) -> Result<Waited, ClientError> {
    let status = latch_wire::ExitStatus { code, signal };
    if *condition == Condition::Exit {
        return Ok(Waited::Exited(status));
    }
    let how = match (code, signal) {
        (_, Some(sig)) => format!("killed by signal {sig}"),
        (Some(c), None) => format!("exited with code {c}"),
        (None, None) => "exited".to_owned(),
    };
    Err(ClientError::NotFound(format!(
        "{session} running: its program {how} before the {} wait held",
        condition.name()
    )))
}
