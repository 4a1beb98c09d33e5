//! Commands on a creation's output by output cursor (SPEC §4.7): `peek --since`,
//! `wait`. Each is written once, against a bound connection, local or `--host`.

use crate::commands::At;

use latch_client::{exit, Bound, ClientError, Condition, Waited};
use latch_screen::PlainStream;

use crate::cli::TargetArgs;
use crate::commands::usage;
use crate::shapes::{self, OutputJson, RangeJson, WaitedJson};

/// How much one OUTPUT_SINCE asks for; the daemon answers at most
/// REPLY_QUEUE_BYTES at a time (SPEC §4.7), and the loop asks again.
const CHUNK: u32 = 1 << 20;

/// `peek REF --since N [--raw]`: the output written after cursor N that the
/// daemon still holds, as plain text (escape sequences removed, `\r` dropped) or
/// the raw bytes; what the ring no longer holds is said on stderr (`lagged: N
/// bytes`) or as `droppedBytes`, never silently. A cursor is checked against its
/// creation only when REF is `ID@INCARNATION` or `--expect` is given: the BIND
/// then refuses a replaced creation (exit 4).
pub(crate) fn peek_since(
    at: &At,
    target: &TargetArgs,
    since: u64,
    raw: bool,
    json: bool,
) -> Result<i32, ClientError> {
    check_flags(raw, json)?;
    let found = at.resolve(target)?;
    let mut bound = at.loc().connect(&found)?;
    print_since(&mut bound, since, raw, json)
}

/// `--raw` and `--json` together are a usage error (exit 2).
pub(crate) fn check_flags(raw: bool, json: bool) -> Result<(), ClientError> {
    if raw && json {
        return Err(usage(
            "--raw writes the output's bytes; --json gives it as plain text: choose one",
        ));
    }
    Ok(())
}

/// What [`read_since`] read: the range it covers and what the ring had dropped.
pub(crate) struct Read {
    pub start: u64,
    pub end: u64,
    pub dropped: u64,
}

/// Reads the output after `since` (SPEC §4.7), at most `max` bytes, chunk by
/// chunk into `each` until caught up with the output as it stood when the daemon
/// answered, or `each` returns false: `peek --since` and control's `peek` alike.
pub(crate) fn read_since(
    bound: &mut Bound,
    since: u64,
    max: u64,
    mut each: impl FnMut(&[u8]) -> bool,
) -> Result<Read, ClientError> {
    let (mut cursor, mut dropped, mut start, mut left) = (since, 0u64, None, max);
    loop {
        let ask = u32::try_from(left.min(u64::from(CHUNK))).unwrap_or(CHUNK);
        let range = bound.output_since(cursor, ask)?;
        dropped += range.dropped;
        start.get_or_insert(range.start);
        let n = range.bytes.len() as u64;
        cursor = range.start + n;
        left = left.saturating_sub(n);
        if !each(&range.bytes) || cursor >= range.end || n == 0 || left == 0 {
            break;
        }
    }
    Ok(Read {
        start: start.unwrap_or(since),
        end: cursor,
        dropped,
    })
}

/// The output shape of SPEC §10 for what was read.
pub(crate) fn output_json(
    session: &latch_wire::SessionRef,
    read: &Read,
    text: String,
) -> OutputJson {
    OutputJson {
        id: session.id.to_string(),
        incarnation: session.incarnation.to_string(),
        output_range: RangeJson {
            start: read.start,
            end: read.end,
        },
        dropped_bytes: read.dropped,
        output: text,
    }
}

/// `peek --since` through a connection bound to the creation, wherever it lives
/// (here, or behind `--host`).
pub(crate) fn print_since(
    bound: &mut Bound,
    since: u64,
    raw: bool,
    json: bool,
) -> Result<i32, ClientError> {
    let session = bound.target().clone();
    let mut plain = PlainStream::default();
    let mut text = String::new();
    let read = read_since(bound, since, u64::MAX, |bytes| {
        if raw {
            crate::output::out_bytes(bytes)
        } else if json {
            text.push_str(&plain.strip(bytes));
            true
        } else {
            crate::output::out_bytes(plain.strip(bytes).as_bytes())
        }
    })?;
    let dropped = read.dropped;
    if json {
        shapes::print(&output_json(&session, &read, text))?;
    } else if dropped > 0 {
        eprintln!("lagged: {dropped} bytes");
    }
    Ok(exit::OK)
}

/// The condition of `wait`'s flags (clap requires exactly one).
pub(crate) fn condition(
    text: Option<String>,
    idle: Option<crate::cli::Dur>,
    prompt: bool,
    _exit: bool,
) -> Condition {
    match (text, idle) {
        (Some(t), _) => Condition::Text(t),
        (None, Some(d)) => Condition::Idle(d.0),
        (None, None) if prompt => Condition::Prompt,
        (None, None) => Condition::Exit,
    }
}

/// `wait REF CONDITION` (SPEC §4.7): evaluated on the daemon's stream.
pub(crate) fn wait(
    at: &At,
    target: &TargetArgs,
    condition: &Condition,
    after: Option<u64>,
    timeout: std::time::Duration,
    json: bool,
) -> Result<i32, ClientError> {
    let found = at.resolve(target)?;
    let waited = at.loc().wait(&found, condition, after, timeout)?;
    print_waited(&found.session, condition, waited, json)
}

/// What `wait` prints once the condition held: the output cursor (with `--exit`,
/// the program's code: `exited with code N` / `killed by signal N`).
pub(crate) fn print_waited(
    session: &latch_wire::SessionRef,
    condition: &Condition,
    waited: Waited,
    json: bool,
) -> Result<i32, ClientError> {
    let (cursor, exit) = match waited {
        Waited::At { cursor } => (Some(cursor), None),
        Waited::Exited(s) => (None, Some(s)),
        _ => (None, None),
    };
    if json {
        shapes::print(&WaitedJson {
            id: session.id.to_string(),
            incarnation: session.incarnation.to_string(),
            condition: condition.name(),
            output_cursor: cursor,
            exit_code: exit.and_then(|s| s.code),
            exit_signal: exit.and_then(|s| s.signal),
        })?;
        return Ok(exit::OK);
    }
    match (cursor, exit) {
        (Some(c), _) => println!("{c}"),
        (None, Some(s)) => match (s.code, s.signal) {
            (_, Some(sig)) => println!("killed by signal {sig}"),
            (Some(code), None) => println!("exited with code {code}"),
            (None, None) => println!("exited"),
        },
        (None, None) => {}
    }
    Ok(exit::OK)
}

/// `peek --json` (SPEC §10, the `screen` shape): the screen, with the output
/// cursor at which it was cut and the creation it belongs to.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScreenJson {
    pub id: String,
    pub incarnation: String,
    pub output_cursor: Option<u64>,
    pub screen: String,
}

/// One PEEK with the output cursor of its cut (SPEC §4.7): the cursor asked
/// before and after the PEEK on the same connection, again while output moves
/// it (at most three times; then the cursor after the cut). `None` from a
/// version-2 daemon.
pub(crate) fn print_peek_json(
    bound: &mut Bound,
    opts: latch_client::PeekOptions,
) -> Result<i32, ClientError> {
    let session = bound.target().clone();
    let cursor = |b: &mut Bound| -> Result<Option<u64>, ClientError> {
        Ok(b.status_full()?.1.map(|f| f.output_cursor))
    };
    let mut before = cursor(bound)?;
    let mut screen = bound.peek(opts)?;
    let mut after = cursor(bound)?;
    for _ in 0..2 {
        if before == after {
            break;
        }
        before = after;
        screen = bound.peek(opts)?;
        after = cursor(bound)?;
    }
    shapes::print(&ScreenJson {
        id: session.id.to_string(),
        incarnation: session.incarnation.to_string(),
        output_cursor: after,
        screen: String::from_utf8_lossy(&screen).into_owned(),
    })?;
    Ok(exit::OK)
}
