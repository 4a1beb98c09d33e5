//! Text output for people; the JSON shapes are in `shapes` (SPEC.md §10).

use latch_client::{ClientError, Entry, SessionStatus};

use crate::shapes::{self, ErrorJson};

/// Prints an error (and, with `--json`, a JSON error object on stdout); returns its
/// exit code.
pub fn report_error(e: &ClientError, json: bool) -> i32 {
    if json {
        let _ = shapes::print(&ErrorJson::from(e));
    }
    eprintln!("latch: {e}");
    e.exit_code()
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
