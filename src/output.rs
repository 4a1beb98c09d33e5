//! Text and JSON output. The JSON shapes are documented in SPEC.md §10.

use latch_client::{ClientError, Entry, SessionStatus};
use latch_registry::Record;
use serde_json::{json, Value};

/// Prints an error (and, with `--json`, a JSON error object on stdout); returns its
/// exit code.
pub fn report_error(e: &ClientError, json: bool) -> i32 {
    let code = e.exit_code();
    if json {
        let mut obj = json!({
            "error": { "kind": e.kind(), "message": e.to_string(), "exitCode": code }
        });
        if let ClientError::Ambiguous { ids, .. } = e {
            obj["error"]["candidates"] =
                json!(ids.iter().map(ToString::to_string).collect::<Vec<_>>());
        }
        println!("{obj}");
    }
    eprintln!("latch: {e}");
    code
}

/// The JSON object for one record and its status.
pub fn record_json(record: &Record, status: &SessionStatus) -> Value {
    let (code, signal) = match status {
        SessionStatus::Exited { code, signal } => (*code, *signal),
        _ => (None, None),
    };
    let mut v = json!({
        "id": record.id.as_str(),
        "incarnation": record.incarnation.to_string(),
        "name": record.display_name,
        "status": status.name(),
        "exitCode": code,
        "exitSignal": signal,
        "command": record.command,
        "cwd": record.cwd,
        "createdAt": record.created_at_ms,
        "daemonPid": record.daemon.pid,
        "childPid": record.child.pid,
        "tags": record.tags,
        "legacyPolicy": record.legacy_policy.as_str(),
        "owner": record.owner,
    });
    if let SessionStatus::Unknown { reason } = status {
        v["statusReason"] = json!(reason);
    }
    v
}

/// The JSON object for one `ls` entry.
pub fn entry_json(entry: &Entry) -> Value {
    match entry {
        Entry::Session { record, status } => record_json(record, status),
        Entry::Degraded { id, error } => json!({ "id": id, "status": "degraded", "error": error }),
    }
}

/// One text line for `ls`.
pub fn entry_line(entry: &Entry) -> String {
    match entry {
        Entry::Session { record, status } => {
            let st = match status {
                SessionStatus::Exited { code: Some(c), .. } => format!("exited({c})"),
                SessionStatus::Exited {
                    signal: Some(s), ..
                } => format!("killed({s})"),
                other => other.name().to_owned(),
            };
            format!(
                "{:<20} {:<10} {:<20} {}",
                record.id,
                st,
                record.display_name.as_deref().unwrap_or("-"),
                record.command.join(" ")
            )
        }
        Entry::Degraded { id, error } => format!("{id:<20} {:<10} {error}", "degraded"),
    }
}
