//! The value parsers of the command line: durations (one grammar for every option,
//! SPEC §10), signals and event types.

use clap::builder::{EnumValueParser, PossibleValue, TypedValueParser};
use clap::ValueEnum;

/// A duration, as every option takes one (SPEC §10): a number with an optional unit,
/// `ms`, `s` or `m`; a bare number is seconds (`2.5`, `500ms`, `1m`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Dur(pub std::time::Duration);

/// On the wire (a create sent to another host, SPEC.md §12.2): milliseconds.
impl serde::Serialize for Dur {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(self.0.as_millis()).unwrap_or(u64::MAX))
    }
}

impl<'de> serde::Deserialize<'de> for Dur {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let ms = <u64 as serde::Deserialize>::deserialize(d)?;
        Ok(Self(std::time::Duration::from_millis(ms)))
    }
}

impl std::str::FromStr for Dur {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || {
            format!("invalid duration {s:?}: a number with an optional unit ms, s or m (a bare number is seconds)")
        };
        let t = s.trim();
        let (number, scale) = if let Some(n) = t.strip_suffix("ms") {
            (n, 0.001)
        } else if let Some(n) = t.strip_suffix('s') {
            (n, 1.0)
        } else if let Some(n) = t.strip_suffix('m') {
            (n, 60.0)
        } else {
            (t, 1.0)
        };
        let n: f64 = number.trim().parse().map_err(|_| bad())?;
        if !n.is_finite() || n < 0.0 {
            return Err(bad());
        }
        std::time::Duration::try_from_secs_f64(n * scale)
            .map(Dur)
            .map_err(|_| bad())
    }
}

/// `events --wait`: an event type (SPEC.md §9.9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum EventType {
    /// The session was created.
    SessionStart,
    /// The program ended.
    SessionExit,
    /// Name, tags or command changed.
    MetadataChange,
    /// A kill was requested.
    KillRequested,
    /// The session was removed.
    Removed,
    /// The program rang the bell.
    Bell,
    /// The program set the window title.
    TitleChange,
    /// The program sent a desktop notification.
    Notification,
    /// The program showed or hid the cursor.
    CursorVisible,
    /// The daemon started the program again (a restart policy).
    SessionRespawn,
    /// The restarts ran out.
    SessionFlapping,
    /// A recording began.
    CastStart,
    /// A recording ended.
    CastStop,
}

impl EventType {
    /// The `type` field's value.
    pub fn name(self) -> &'static str {
        use latch_registry::events::kind;
        match self {
            Self::SessionStart => kind::SESSION_START,
            Self::SessionExit => kind::SESSION_EXIT,
            Self::MetadataChange => kind::METADATA_CHANGE,
            Self::KillRequested => kind::KILL_REQUESTED,
            Self::Removed => kind::REMOVED,
            Self::Bell => kind::BELL,
            Self::TitleChange => kind::TITLE_CHANGE,
            Self::Notification => kind::NOTIFICATION,
            Self::CursorVisible => kind::CURSOR_VISIBLE,
            Self::SessionRespawn => kind::SESSION_RESPAWN,
            Self::SessionFlapping => kind::SESSION_FLAPPING,
            Self::CastStart => kind::CAST_START,
            Self::CastStop => kind::CAST_STOP,
        }
    }
}

/// Parses `events --wait`: an [`EventType`], or a user event type `user.NAME`
/// (SPEC.md §9.9); `--help` lists the built-in types.
#[derive(Debug, Clone, Copy)]
pub struct EventTypeParser;

impl TypedValueParser for EventTypeParser {
    type Value = String;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<String, clap::Error> {
        let text = value.to_string_lossy();
        if text.starts_with(latch_registry::user_events::USER_PREFIX) {
            return latch_registry::user_events::validate_type(&text)
                .map(|()| text.into_owned())
                .map_err(|e| clap::Error::raw(clap::error::ErrorKind::InvalidValue, e));
        }
        EnumValueParser::<EventType>::new()
            .parse_ref(cmd, arg, value)
            .map(|t| t.name().to_owned())
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(
            EventType::value_variants()
                .iter()
                .filter_map(ValueEnum::to_possible_value),
        ))
    }
}

/// Signal names `kill --signal` takes (or a number).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "UPPER")]
pub enum SignalName {
    Hup,
    Int,
    Quit,
    Kill,
    Term,
    Usr1,
    Usr2,
    Cont,
    Stop,
    Tstp,
    Winch,
    Alrm,
    Pipe,
}

impl SignalName {
    fn number(self) -> i32 {
        use nix::sys::signal::Signal as S;
        (match self {
            Self::Hup => S::SIGHUP,
            Self::Int => S::SIGINT,
            Self::Quit => S::SIGQUIT,
            Self::Kill => S::SIGKILL,
            Self::Term => S::SIGTERM,
            Self::Usr1 => S::SIGUSR1,
            Self::Usr2 => S::SIGUSR2,
            Self::Cont => S::SIGCONT,
            Self::Stop => S::SIGSTOP,
            Self::Tstp => S::SIGTSTP,
            Self::Winch => S::SIGWINCH,
            Self::Alrm => S::SIGALRM,
            Self::Pipe => S::SIGPIPE,
        }) as i32
    }
}

/// Parses `--signal`: a number, or a [`SignalName`] with or without `SIG`, in any
/// case; `--help` lists the names and a typo gets clap's suggestion.
#[derive(Debug, Clone, Copy)]
pub struct SignalParser;

impl TypedValueParser for SignalParser {
    type Value = i32;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<i32, clap::Error> {
        let text = value.to_string_lossy();
        if let Ok(n) = text.parse::<i32>() {
            return Ok(n);
        }
        let upper = text.to_ascii_uppercase();
        let name = upper.strip_prefix("SIG").unwrap_or(&upper);
        EnumValueParser::<SignalName>::new()
            .parse_ref(cmd, arg, std::ffi::OsStr::new(name))
            .map(SignalName::number)
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(
            SignalName::value_variants()
                .iter()
                .filter_map(ValueEnum::to_possible_value),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn one_grammar_for_every_duration() {
        for (text, want) in [
            ("10", Duration::from_secs(10)),
            ("2.5", Duration::from_millis(2500)),
            ("500ms", Duration::from_millis(500)),
            ("2s", Duration::from_secs(2)),
            ("1m", Duration::from_secs(60)),
            ("0.5m", Duration::from_secs(30)),
            ("0", Duration::ZERO),
        ] {
            assert_eq!(text.parse::<Dur>(), Ok(Dur(want)), "{text}");
        }
        for bad in ["", "ms", "-1", "1h", "1e400", "NaN", "inf", "1 ss", "x"] {
            assert!(bad.parse::<Dur>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn events_wait_offers_every_event_type() {
        let names: Vec<&str> = EventType::value_variants()
            .iter()
            .map(|t| t.name())
            .collect();
        assert_eq!(names, latch_registry::events::kind::ALL);
        for t in EventType::value_variants() {
            assert_eq!(t.to_possible_value().unwrap().get_name(), t.name());
        }
    }
}
