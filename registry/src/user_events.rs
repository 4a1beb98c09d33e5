//! User events: `latch emit REF user.NAME [--data JSON]` (SPEC.md §9.9).
//!
//! A user event is `{"ts", "type": "user.NAME", "id", "incarnation", "data"?}`,
//! appended under the session lock like every other event. Its name and data are
//! bounded and checked here, before anything is written, so a hostile name or a
//! huge or deeply nested document never reaches the events file.

use std::fmt;

use latch_wire::{Incarnation, SessionId};
use serde_json::{json, Value};

use crate::error::RegistryError;
use crate::lock::SessionLock;
use crate::{now_ms, Registry};

/// What every user event's type starts with.
pub const USER_PREFIX: &str = "user.";
/// The longest NAME after `user.`, in bytes (SPEC §9.14).
pub const USER_NAME_MAX_BYTES: usize = 64;
/// The longest `data`, as compact JSON, in bytes (SPEC §9.14).
pub const USER_DATA_MAX_BYTES: usize = 8192;
/// The deepest nesting of arrays and objects in `data` (SPEC §9.14).
pub const USER_DATA_MAX_DEPTH: usize = 16;

/// Why a user event was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum UserEventError {
    /// The type does not start with `user.`.
    NotUser,
    /// NAME is empty, too long, or holds a byte outside `[A-Za-z0-9_.-]`, or does
    /// not start with a letter or digit.
    BadName,
    /// `data` is not JSON.
    NotJson(String),
    /// `data` is longer than [`USER_DATA_MAX_BYTES`].
    TooLarge(usize),
    /// `data` nests deeper than [`USER_DATA_MAX_DEPTH`].
    TooDeep,
}

impl fmt::Display for UserEventError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotUser => write!(f, "a user event's type is {USER_PREFIX}NAME"),
            Self::BadName => write!(
                f,
                "NAME in {USER_PREFIX}NAME must be 1 to {USER_NAME_MAX_BYTES} bytes of \
                 letters, digits, '_', '-' and '.', starting with a letter or digit"
            ),
            Self::NotJson(e) => write!(f, "--data is not JSON: {e}"),
            Self::TooLarge(n) => write!(
                f,
                "--data is {n} bytes as compact JSON, over {USER_DATA_MAX_BYTES}"
            ),
            Self::TooDeep => write!(f, "--data nests deeper than {USER_DATA_MAX_DEPTH} levels"),
        }
    }
}

impl std::error::Error for UserEventError {}

/// Checks a user event type, `user.NAME` (SPEC §9.9).
pub fn validate_type(kind: &str) -> Result<(), UserEventError> {
    let name = kind
        .strip_prefix(USER_PREFIX)
        .ok_or(UserEventError::NotUser)?;
    let ok = !name.is_empty()
        && name.len() <= USER_NAME_MAX_BYTES
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(UserEventError::BadName)
    }
}

fn depth(v: &Value) -> usize {
    match v {
        Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
        Value::Object(o) => 1 + o.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// Parses and checks `--data`: JSON, at most [`USER_DATA_MAX_BYTES`] (the text is
/// refused before it is parsed when it is over four times that), nesting at most
/// [`USER_DATA_MAX_DEPTH`].
pub fn parse_data(text: &str) -> Result<Value, UserEventError> {
    if text.len() > 4 * USER_DATA_MAX_BYTES {
        return Err(UserEventError::TooLarge(text.len()));
    }
    // serde_json refuses nesting past 128 levels itself, so parsing is bounded.
    let v: Value =
        serde_json::from_str(text).map_err(|e| UserEventError::NotJson(e.to_string()))?;
    if depth(&v) > USER_DATA_MAX_DEPTH {
        return Err(UserEventError::TooDeep);
    }
    let n = serde_json::to_vec(&v).map_or(usize::MAX, |b| b.len());
    if n > USER_DATA_MAX_BYTES {
        return Err(UserEventError::TooLarge(n));
    }
    Ok(v)
}

impl Registry {
    /// Appends the user event `kind` (checked by [`validate_type`]) with `data`
    /// (from [`parse_data`]) for `{id, inc}` under its lock, durably. The caller
    /// has checked, under the same lock, that the record holds `inc`. Returns the
    /// event as written.
    pub fn append_user_event(
        &self,
        lock: &SessionLock,
        inc: &Incarnation,
        kind: &str,
        data: Option<&Value>,
    ) -> Result<Value, RegistryError> {
        let bad = |e: UserEventError| {
            RegistryError::io("append user event", std::io::Error::other(e.to_string()))
        };
        validate_type(kind).map_err(bad)?;
        let id: &SessionId = lock.id();
        let mut ev = json!({
            "ts": now_ms(),
            "type": kind,
            "id": id.as_str(),
            "incarnation": inc.to_string(),
        });
        if let Some(d) = data {
            ev["data"] = d.clone();
        }
        let mut line = serde_json::to_vec(&ev).map_err(|source| RegistryError::Encode {
            what: "event",
            source,
        })?;
        line.push(b'\n');
        if line.len() > crate::events::EVENT_LINE_MAX_BYTES {
            return Err(bad(UserEventError::TooLarge(line.len())));
        }
        self.append_line_unsynced(lock, line)?.sync()?;
        Ok(ev)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_bounded_and_plain() {
        for good in ["user.done", "user.a", "user.build-1.ok_2", "user.9"] {
            assert_eq!(validate_type(good), Ok(()), "{good}");
        }
        let long = format!("user.{}", "a".repeat(USER_NAME_MAX_BYTES + 1));
        let max = format!("user.{}", "a".repeat(USER_NAME_MAX_BYTES));
        assert_eq!(validate_type(&max), Ok(()));
        for bad in [
            "user.",
            "done",
            "session_exit",
            "User.x",
            "user..x",
            "user.-x",
            "user.a b",
            "user.a\nb",
            "user.\u{1b}[2J",
            "user.é",
            "user.a/b",
            long.as_str(),
        ] {
            assert!(validate_type(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn data_is_bounded_in_size_and_depth() {
        assert_eq!(parse_data(r#"{"a":[1,2]}"#).unwrap(), json!({"a": [1, 2]}));
        assert!(matches!(
            parse_data("{not json"),
            Err(UserEventError::NotJson(_))
        ));
        let deep = format!("{}{}", "[".repeat(17), "]".repeat(17));
        assert_eq!(parse_data(&deep), Err(UserEventError::TooDeep));
        let ok_deep = format!("{}{}", "[".repeat(16), "]".repeat(16));
        assert!(parse_data(&ok_deep).is_ok());
        let very_deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(parse_data(&very_deep).is_err());
        let big = format!("\"{}\"", "x".repeat(USER_DATA_MAX_BYTES));
        assert!(matches!(parse_data(&big), Err(UserEventError::TooLarge(_))));
    }
}

#[cfg(test)]
mod spec_pins {
    const SPEC: &str = include_str!("../../SPEC.md");

    #[test]
    fn user_event_bounds_match_spec() {
        for (row, value) in [
            ("USER_NAME_MAX_BYTES", super::USER_NAME_MAX_BYTES),
            ("USER_DATA_MAX_BYTES", super::USER_DATA_MAX_BYTES),
            ("USER_DATA_MAX_DEPTH", super::USER_DATA_MAX_DEPTH),
        ] {
            assert!(SPEC.contains(&format!("| {row} | {value} |")), "{row}");
        }
    }
}
