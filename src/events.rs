//! `latch events`: print, follow, or wait for session events.
//!
//! Following is event-driven: an inotify watch on the registry root wakes the loop
//! whenever an events file is appended to, created, or replaced by rotation.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use latch_client::{exit, Client, ClientError, EventScope};
use latch_registry::events::ReadEvent;
use latch_wire::{SessionId, SessionRef};
use serde_json::Value;

pub(crate) fn scope(
    client: &Client,
    reference: Option<&str>,
    all: bool,
) -> Result<EventScope, ClientError> {
    if all {
        return Ok(EventScope::All);
    }
    let Some(r) = reference else {
        return Err(ClientError::Usage("give a session REF or --all".into()));
    };
    if r.contains('@') {
        let s: SessionRef = r
            .parse()
            .map_err(|e| ClientError::Usage(format!("{r:?}: {e}")))?;
        return Ok(EventScope::Creation(s));
    }
    if let Ok(id) = SessionId::new(r) {
        // An exact id: its whole history, across incarnations, even once removed.
        if client.registry().events_path(&id).exists() || client.read_checked(&id)?.is_some() {
            return Ok(EventScope::Id(id));
        }
    }
    let t = client.resolve(r, None)?;
    Ok(EventScope::Creation(t.session))
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
            crate::output::escape(ev["id"].as_str().unwrap_or("?")),
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
    // An events file is anyone's to shape: escaped for a terminal (SPEC §10).
    let line = format!(
        "{} {:<16} {}@{} {}",
        ts,
        ev["type"].as_str().unwrap_or("?"),
        ev["id"].as_str().unwrap_or("?"),
        ev["incarnation"].as_str().unwrap_or("?"),
        details.join(" ")
    );
    println!("{}", crate::output::escape(&line));
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
    let mut events = client.follow_events(scope(client, reference, all)?)?;
    let deadline = Instant::now() + timeout;
    loop {
        // Streamed: each event is printed as the merge yields it (SPEC §9.9).
        let mut found = false;
        events.for_each_new(|ev| match wait {
            Some(t) if ev.kind() == t => {
                print(ev.read(), json);
                found = true;
                false
            }
            Some(_) => true,
            None => {
                print(ev.read(), json);
                true
            }
        })?;
        if found {
            return Ok(exit::OK);
        }
        // A closed stdout ends a follow (SPEC §10).
        if (wait.is_none() && !follow) || !crate::output::stdout_ok() {
            return Ok(exit::OK);
        }
        let left = if wait.is_some() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ClientError::TimedOut(format!(
                    "no {} event within {:.1} s",
                    wait.unwrap_or("?"),
                    timeout.as_secs_f64()
                )));
            }
            Some(left)
        } else {
            None
        };
        events.wait(left)?;
    }
}
