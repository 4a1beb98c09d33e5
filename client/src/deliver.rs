//! `send` with delivery options (SPEC.md §4.7): input that arrives, on one
//! connection that holds the run lease: when the program is ready, pasted,
//! submitted, then a wait anchored at the cursor just before it.

use std::time::{Duration, Instant};

use latch_screen::MarkKind;

use crate::conn::Bound;
use crate::error::ClientError;
use crate::run::{Got, Runner};
use crate::wait::Finder;

/// What to wait for after the input was sent.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum After {
    /// Nothing.
    Nothing,
    /// The program has written nothing for this long (on the stream).
    Idle(Duration),
    /// This text in the output written after the send; with shell integration,
    /// after the C of the command the send started, so the echo never matches.
    Text(String),
}

/// How a send is delivered.
#[derive(Debug, Clone)]
pub struct SendOptions {
    /// Inside bracketed paste when the program enabled mode 2004.
    pub paste: bool,
    /// CR after the text.
    pub submit: bool,
    /// First wait until the program is ready for input (SPEC.md §4.7).
    pub when_ready: bool,
    /// Then wait for this.
    pub after: After,
    /// The deadline of the whole send.
    pub timeout: Duration,
}

/// What a delivered send found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Sent {
    /// The output cursor just before the input was sent.
    pub start: u64,
    /// The cursor where the wait held (or, with nothing to wait for, `start`).
    pub end: u64,
    /// The text was pasted inside bracketed paste.
    pub pasted: bool,
}

/// Sends `text` through `bound` as `opts` says (SPEC.md §4.7), watching the
/// stream through `watch`, a second connection bound to the same creation: reads
/// the daemon's facts with LEASE (given back at once: a send never holds the run
/// lease, so it can feed a command that `run` started), attaches `watch`
/// read-only, waits until ready, sends (confirmed by the daemon), waits. Errors
/// as [`crate::run_bound`]'s, and [`ClientError::TimedOut`] at the deadline.
pub fn send_bound(
    mut bound: Bound,
    watch: Bound,
    text: &[u8],
    opts: &SendOptions,
) -> Result<Sent, ClientError> {
    let deadline = Instant::now() + opts.timeout;
    let session = bound.target().clone();
    let facts = bound.lease()?;
    if facts.granted {
        bound.release()?;
    }
    let integrated = facts.integration || facts.marked;
    let mut r = Runner::attach(watch, &session, deadline, None)?;
    if opts.when_ready {
        r.until_ready(integrated, facts.reading)?;
    }
    let pasted = opts.paste && r.paste.on;
    let mut bytes = Vec::with_capacity(text.len() + 16);
    if pasted {
        bytes.extend_from_slice(b"\x1b[200~");
    }
    bytes.extend_from_slice(text);
    if pasted {
        bytes.extend_from_slice(b"\x1b[201~");
    }
    if opts.submit {
        bytes.push(b'\r');
    }
    let start = r.cursor;
    bound.send(&bytes)?;
    let end = match &opts.after {
        After::Nothing => start,
        After::Idle(quiet) => idle(&mut r, *quiet)?,
        After::Text(t) => text_after(&mut r, t, integrated, start)?,
    };
    Ok(Sent { start, end, pasted })
}

/// The cursor once the stream has been quiet for `quiet`.
fn idle(r: &mut Runner<'_>, quiet: Duration) -> Result<u64, ClientError> {
    let mut last = Instant::now();
    loop {
        match r.next(last + quiet)? {
            Got::Output(..) | Got::Skipped => last = Instant::now(),
            Got::Deadline if Instant::now() >= r.deadline => {
                return Err(ClientError::TimedOut(format!(
                    "session {}: never quiet for {quiet:?} after the send",
                    r.session
                )))
            }
            Got::Deadline | Got::Interrupted => return Ok(r.cursor),
        }
    }
}

/// The cursor after the output chunk that completes `text`, looked for from the
/// send on; with integration, from the end of the C of the command the send
/// started (the echo of the typed line comes before it).
fn text_after(
    r: &mut Runner<'_>,
    text: &str,
    integrated: bool,
    start: u64,
) -> Result<u64, ClientError> {
    let mut finder: Option<Finder<'_>> = (!integrated).then(|| Finder::new(text, start));
    loop {
        let (at, bytes) = match r.next(r.deadline)? {
            Got::Output(at, b) => (at, b),
            Got::Skipped | Got::Interrupted => continue,
            Got::Deadline => {
                return Err(ClientError::TimedOut(format!(
                    "session {}: no {text:?} after the send",
                    r.session
                )))
            }
        };
        if finder.is_none() {
            let marks = r.feed(&bytes);
            if let Some(c) = marks
                .iter()
                .find(|m| matches!(m.kind, MarkKind::CommandStart { .. }))
            {
                finder = Some(Finder::new(text, c.end));
            }
        }
        if let Some(f) = finder.as_mut() {
            if let Some(found) = f.feed(at, &bytes) {
                return Ok(found);
            }
        }
    }
}
