//! What a record of version 2 adds for supervision (SPEC.md §9.3, §9.16): the
//! restart policy, the parent a session's life is bound to, and the reason a status
//! carries.

use std::time::Duration;

use latch_wire::{Incarnation, SessionId};
use serde::{Deserialize, Serialize};

use crate::proc::ProcIdentity;

/// Restarts at most this many times inside the window, by default.
pub const DEFAULT_MAX_RESTARTS: u32 = 5;
/// The default window the restarts are counted in.
pub const DEFAULT_RESTART_WINDOW: Duration = Duration::from_secs(60);
/// The first delay before a restart, by default; it doubles with each restart
/// inside the window.
pub const DEFAULT_RESTART_DELAY: Duration = Duration::from_millis(250);
/// The longest delay before a restart.
pub const MAX_RESTART_DELAY: Duration = Duration::from_secs(30);

/// When the daemon starts the program again (SPEC §9.16).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RestartMode {
    /// Never.
    No,
    /// After a non-zero exit, or a signal other than the hang-up of latch's kill.
    OnFailure,
    /// After every end but a kill.
    Always,
}

impl RestartMode {
    /// The mode's name, as `--restart` takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::No => "no",
            Self::OnFailure => "on-failure",
            Self::Always => "always",
        }
    }
}

/// A restart policy as the record keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RestartPolicy {
    /// When to restart.
    pub mode: RestartMode,
    /// Restarts allowed inside `window_ms`; one more end makes it `flapping`.
    pub max_restarts: u32,
    /// The window, in ms.
    pub window_ms: u64,
    /// The first delay, in ms (doubling up to [`MAX_RESTART_DELAY`]).
    pub delay_ms: u64,
}

impl RestartPolicy {
    /// `mode` with the default bounds.
    pub fn new(mode: RestartMode) -> Self {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Self {
            mode,
            max_restarts: DEFAULT_MAX_RESTARTS,
            window_ms: ms(DEFAULT_RESTART_WINDOW),
            delay_ms: ms(DEFAULT_RESTART_DELAY),
        }
    }

    /// Whether a program that ended so is started again (before the flapping
    /// bound). `killed`: latch's own kill was recorded for this creation.
    pub fn wants_restart(&self, code: Option<i32>, signal: Option<i32>, killed: bool) -> bool {
        if killed {
            return false;
        }
        match self.mode {
            RestartMode::No => false,
            RestartMode::Always => true,
            RestartMode::OnFailure => code.is_some_and(|c| c != 0) || signal.is_some(),
        }
    }

    /// The delay before the restart that follows `recent` restarts inside the
    /// window: `delayMs` doubled `recent` times, at most [`MAX_RESTART_DELAY`].
    pub fn delay(&self, recent: u32) -> Duration {
        let max = MAX_RESTART_DELAY;
        let base = Duration::from_millis(self.delay_ms).min(max);
        base.checked_mul(1u32.checked_shl(recent.min(31)).unwrap_or(u32::MAX))
            .unwrap_or(max)
            .min(max)
    }
}

/// The parent a session's life is bound to (`new --with-parent`): a process, or the
/// program of one session creation. Either way it is watched through a pidfd proven
/// against `process`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Parent {
    /// The process watched.
    pub process: ProcIdentity,
    /// The parent session, when the parent is one (its program is `process`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<ParentSession>,
}

/// A parent session creation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ParentSession {
    /// Its id.
    pub id: SessionId,
    /// Its incarnation: a replacement is another parent, which counts as ended.
    pub incarnation: Incarnation,
}

/// Why a session is in its status (`statusReason`, SPEC §9.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StatusReason {
    /// The program ended and the daemon starts it again after a delay.
    Restarting,
    /// The restarts were used up inside the window; no more are made.
    Flapping,
    /// The parent ended, and the session was hung up.
    ParentEnded,
    /// The daemon died with its machine (SPEC.md §9.7): derived from the boot id
    /// when a record is shown, never recorded.
    Reboot,
    /// A reason a newer build wrote.
    #[serde(other)]
    Other,
}

impl StatusReason {
    /// The reason's name in `statusReason`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Restarting => "restarting",
            Self::Flapping => "flapping",
            Self::ParentEnded => "parent-ended",
            Self::Reboot => crate::reboot::REBOOT,
            Self::Other => "other",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_supervised_record_is_written_as_version_2() {
        use crate::{Record, Registry};
        let tmp = tempfile::tempdir().unwrap();
        let reg = Registry::open(&tmp.path().join("r")).unwrap();
        let id = SessionId::new("s").unwrap();
        let lock = reg.lock(&id, Duration::ZERO).unwrap();
        let me = ProcIdentity::of(std::process::id()).unwrap();
        let inc = reg.mint(&id).unwrap();
        let mut rec: Record = serde_json::from_value(serde_json::json!({
            "version": 1, "id": "s", "incarnation": inc, "command": ["sh"], "cwd": "/",
            "createdAtMs": 1, "daemon": me, "child": me,
            "ownerMac": reg.owner_mac(&id, &inc, None),
        }))
        .unwrap();
        let version = || {
            let v: serde_json::Value =
                serde_json::from_slice(&std::fs::read(reg.record_path(&id)).unwrap()).unwrap();
            v["version"].as_u64().unwrap()
        };
        reg.write_record(&lock, &rec).unwrap();
        assert_eq!(version(), 1);
        rec.restart = Some(RestartPolicy::new(RestartMode::Always));
        reg.write_record(&lock, &rec).unwrap();
        assert_eq!(version(), 2);
        let back = reg.read_record(&id).unwrap().unwrap();
        assert_eq!(back.restart, rec.restart);
        // A version this build does not know is degraded, never read as its own.
        let mut v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(reg.record_path(&id)).unwrap()).unwrap();
        v["version"] = 3.into();
        std::fs::write(reg.record_path(&id), serde_json::to_vec(&v).unwrap()).unwrap();
        assert!(matches!(
            reg.read_record(&id),
            Err(crate::RegistryError::Corrupt { .. })
        ));
    }

    #[test]
    fn delay_doubles_up_to_the_cap() {
        let p = RestartPolicy::new(RestartMode::Always);
        assert_eq!(p.delay(0), Duration::from_millis(250));
        assert_eq!(p.delay(1), Duration::from_millis(500));
        assert_eq!(p.delay(3), Duration::from_secs(2));
        assert_eq!(p.delay(20), MAX_RESTART_DELAY);
        assert_eq!(p.delay(u32::MAX), MAX_RESTART_DELAY);
        let huge = RestartPolicy {
            delay_ms: u64::MAX,
            ..p
        };
        assert_eq!(huge.delay(0), MAX_RESTART_DELAY);
    }

    #[test]
    fn on_failure_spares_clean_exits_and_kills() {
        let p = RestartPolicy::new(RestartMode::OnFailure);
        assert!(!p.wants_restart(Some(0), None, false));
        assert!(p.wants_restart(Some(3), None, false));
        assert!(p.wants_restart(None, Some(libc::SIGSEGV), false));
        assert!(!p.wants_restart(None, Some(libc::SIGHUP), true));
        let a = RestartPolicy::new(RestartMode::Always);
        assert!(a.wants_restart(Some(0), None, false));
        assert!(!a.wants_restart(Some(1), None, true));
        let n = RestartPolicy::new(RestartMode::No);
        assert!(!n.wants_restart(Some(1), None, false));
    }
}
