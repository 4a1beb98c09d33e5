//! `latch events`: print, follow, or wait for session events.
//!
//! Following is event-driven: an inotify watch on the registry root wakes the loop
//! whenever an events file is appended to, created, or replaced by rotation.

use std::collections::BTreeMap;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use latch_client::{exit, Client, ClientError, UnreachableCause};
use latch_registry::events::ReadEvent;
use latch_wire::{Incarnation, SessionId, SessionRef};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use serde_json::Value;

struct Stream {
    id: SessionId,
    only: Option<Incarnation>,
    /// The last line printed (or skipped), to find our place again after rotation.
    last: Option<Vec<u8>>,
}

fn ids_with_events(client: &Client) -> Result<Vec<SessionId>, ClientError> {
    Ok(client.registry().event_ids()?)
}

fn streams(
    client: &Client,
    reference: Option<&str>,
    all: bool,
) -> Result<Vec<Stream>, ClientError> {
    if all {
        return Ok(ids_with_events(client)?
            .into_iter()
            .map(|id| Stream {
                id,
                only: None,
                last: None,
            })
            .collect());
    }
    let Some(r) = reference else {
        return Err(ClientError::Usage("give a session REF or --all".into()));
    };
    if r.contains('@') {
        let s: SessionRef = r
            .parse()
            .map_err(|e| ClientError::Usage(format!("{r:?}: {e}")))?;
        return Ok(vec![Stream {
            id: s.id,
            only: Some(s.incarnation),
            last: None,
        }]);
    }
    if let Ok(id) = SessionId::new(r) {
        // An exact id: its whole history, across incarnations, even once removed.
        if client.registry().events_path(&id).exists() || client.read_checked(&id)?.is_some() {
            return Ok(vec![Stream {
                id,
                only: None,
                last: None,
            }]);
        }
    }
    let t = client.resolve(r, None)?;
    Ok(vec![Stream {
        id: t.session.id,
        only: Some(t.session.incarnation),
        last: None,
    }])
}

fn matches(ev: &ReadEvent, only: Option<&Incarnation>) -> bool {
    only.is_none_or(|inc| ev.incarnation() == Some(inc.to_string()))
}

fn print(ev: &ReadEvent, json: bool) {
    let value = ev.to_value();
    let ev = &value;
    if json {
        println!("{ev}");
        return;
    }
    if ev["type"] == latch_registry::events::UNREADABLE {
        println!(
            "{:<29} {:<16} {} line={}",
            "?",
            "(unreadable)",
            ev["id"].as_str().unwrap_or("?"),
            ev["line"]
        );
        return;
    }
    let mut rest: BTreeMap<&str, &Value> = BTreeMap::new();
    if let Value::Object(o) = ev {
        for (k, v) in o {
            if !["ts", "type", "id", "incarnation"].contains(&k.as_str()) {
                rest.insert(k, v);
            }
        }
    }
    let details: Vec<String> = rest.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let ts = ev["ts"]
        .as_u64()
        .map_or_else(|| "?".to_owned(), crate::output::rfc3339_local);
    println!(
        "{} {:<16} {}@{} {}",
        ts,
        ev["type"].as_str().unwrap_or("?"),
        ev["id"].as_str().unwrap_or("?"),
        ev["incarnation"].as_str().unwrap_or("?"),
        details.join(" ")
    );
}

/// New lines of one stream since the last call; `Err` only for unreadable files.
/// Reads are bounded (SPEC.md §9.9); a line that cannot be parsed is an
/// `unreadable` event.
fn fresh(client: &Client, s: &mut Stream) -> Result<Vec<ReadEvent>, ClientError> {
    let lines = client
        .registry()
        .read_event_lines(&s.id)
        .map_err(|e| ClientError::unreachable(UnreachableCause::Io, e.to_string()))?;
    let start = match &s.last {
        None => 0,
        Some(last) => lines.iter().rposition(|l| l == last).map_or(0, |p| p + 1),
    };
    let mut out = Vec::new();
    for l in &lines[start..] {
        let ev = latch_registry::events::parse_line(&s.id, l);
        if matches(&ev, s.only.as_ref()) {
            out.push(ev);
        }
    }
    if let Some(l) = lines.into_iter().last() {
        s.last = Some(l);
    }
    Ok(out)
}

/// Runs `latch events`.
pub fn run(
    client: &Client,
    reference: Option<&str>,
    all: bool,
    follow: bool,
    json: bool,
    wait: Option<&str>,
    timeout: Duration,
) -> Result<i32, ClientError> {
    let mut streams = streams(client, reference, all)?;
    // Watch before the first read so nothing appended in between is missed.
    let inotify = Inotify::init(InitFlags::IN_CLOEXEC)
        .map_err(|e| ClientError::Other(format!("inotify: {e}")))?;
    inotify
        .add_watch(
            client.registry().root(),
            AddWatchFlags::IN_MODIFY | AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO,
        )
        .map_err(|e| ClientError::Other(format!("inotify watch: {e}")))?;
    let deadline = Instant::now() + timeout;
    loop {
        // Every stream's new events, merged in time order (one stream is already
        // in order; a line without a time keeps the time of the one before it).
        let mut batch = Vec::new();
        for s in &mut streams {
            let mut at = 0;
            for ev in fresh(client, s)? {
                at = ev.ts().unwrap_or(at);
                batch.push((at, ev));
            }
        }
        batch.sort_by_key(|(at, _)| *at);
        {
            for (_, ev) in batch {
                match wait {
                    Some(t) if ev.type_name() == t => {
                        print(&ev, json);
                        return Ok(exit::OK);
                    }
                    Some(_) => {}
                    None => print(&ev, json),
                }
            }
        }
        if wait.is_none() && !follow {
            return Ok(exit::OK);
        }
        if all {
            for id in ids_with_events(client)? {
                if !streams.iter().any(|s| s.id == id) {
                    streams.push(Stream {
                        id,
                        only: None,
                        last: None,
                    });
                }
            }
        }
        let ms = if wait.is_some() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ClientError::TimedOut(format!(
                    "no {} event within {:.1} s",
                    wait.unwrap_or("?"),
                    timeout.as_secs_f64()
                )));
            }
            PollTimeout::from(u16::try_from(left.as_millis()).unwrap_or(u16::MAX))
        } else {
            PollTimeout::NONE
        };
        let mut fds = [PollFd::new(inotify.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, ms) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
            Ok(_) => {
                let _ = inotify.read_events();
            }
            Err(e) => return Err(ClientError::Other(format!("poll: {e}"))),
        }
    }
}
