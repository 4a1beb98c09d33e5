//! `send`, `wait` and `run` (SPEC §4.7, §13.4): the turns of `latch send`,
//! `latch wait` and `latch run`, with their shapes.

use std::time::Duration;

use latch_client::{Condition, Found, Waited};
use latch_wire::SessionRef;

use super::methods::{duration, to_value, Reply};
use super::params::*;
use super::rpc::RpcError;
use super::schema::*;
use super::{At, Place};
use crate::commands::sessions;
use crate::shapes::{RangeJson, WaitedJson};

pub(super) fn send(place: &Place<'_>, t: &Found, p: SendParams) -> Reply {
    let loc = place.loc();
    let mut bytes = p.text.clone().unwrap_or_default().into_bytes();
    bytes.extend(sessions::input_bytes(&p.keys, true));
    let s = &t.session;
    let delivered =
        p.paste || p.submit || p.when_ready || p.wait_idle.is_some() || p.wait_text.is_some();
    if !delivered {
        let confirmed = loc.send(t, &bytes).at(s)?;
        return to_value(&SentJson {
            id: s.id.to_string(),
            incarnation: s.incarnation.to_string(),
            bytes: bytes.len(),
            confirmed,
            pasted: None,
            output_range: None,
        });
    }
    // `latch send`'s delivered send (SPEC §4.7): one bound connection types, a
    // second watches.
    let after = match (&p.wait_idle, p.wait_text) {
        (Some(d), _) => latch_client::After::Idle(duration(Some(d), Duration::ZERO)?),
        (None, Some(text)) => latch_client::After::Text(text),
        (None, None) => latch_client::After::Nothing,
    };
    let opts = latch_client::SendOptions {
        paste: p.paste,
        submit: p.submit,
        when_ready: p.when_ready,
        after,
        timeout: duration(p.timeout.as_ref(), Duration::from_secs(10))?,
    };
    let sent = loc
        .connect(t)
        .and_then(|bound| {
            let watch = loc.connect(t)?;
            latch_client::send_bound(bound, watch, &bytes, &opts)
        })
        .at(s)?;
    to_value(&SentJson {
        id: s.id.to_string(),
        incarnation: s.incarnation.to_string(),
        bytes: bytes.len(),
        confirmed: true,
        pasted: Some(sent.pasted),
        output_range: Some(RangeJson {
            start: sent.start,
            end: sent.end,
        }),
    })
}

pub(super) fn wait(place: &Place<'_>, t: &Found, p: WaitParams) -> Reply {
    let idle = p
        .idle
        .as_ref()
        .map(|d| duration(Some(d), Duration::ZERO))
        .transpose()?;
    let n = usize::from(p.text.is_some()) + usize::from(idle.is_some()) + usize::from(p.prompt);
    if n + usize::from(p.exit) != 1 {
        return Err(RpcError::params("give exactly one of text, idle, prompt, exit").into());
    }
    let condition = match (p.text, idle) {
        (Some(text), _) => Condition::Text(text),
        (None, Some(d)) => Condition::Idle(d),
        (None, None) if p.prompt => Condition::Prompt,
        (None, None) => Condition::Exit,
    };
    let timeout = duration(p.timeout.as_ref(), Duration::from_secs(10))?;
    let s = &t.session;
    let waited = place.loc().wait(t, &condition, p.after, timeout).at(s)?;
    to_value(&waited_json(s, &condition, waited))
}

/// `run`: the same run as `latch run --json` (SPEC §4.7), and its shape.
pub(super) fn run(place: &Place<'_>, t: &Found, p: RunParams) -> Reply {
    let opts = latch_client::RunOptions {
        timeout: duration(p.timeout.as_ref(), Duration::from_secs(600))?,
        marker: p.marker,
    };
    let s = &t.session;
    let mut collected = crate::commands::run::Collected::new(true);
    let res = place
        .loc()
        .run(t, &p.command, &opts, None, &mut |b| collected.push(b))
        .at(s)?;
    to_value(&crate::commands::run::run_json(
        s, res, collected, &p.command,
    ))
}

/// `wait --json`'s shape.
pub(crate) fn waited_json(s: &SessionRef, condition: &Condition, waited: Waited) -> WaitedJson {
    let (cursor, exit) = match waited {
        Waited::At { cursor } => (Some(cursor), None),
        Waited::Exited(e) => (None, Some(e)),
        _ => (None, None),
    };
    WaitedJson {
        id: s.id.to_string(),
        incarnation: s.incarnation.to_string(),
        condition: condition.name(),
        output_cursor: cursor,
        exit_code: exit.and_then(|e| e.code),
        exit_signal: exit.and_then(|e| e.signal),
    }
}
