//! Lifecycle: gc, exec inside a session, restart (SPEC.md §11 I5, 6).
//!
//! Every action follows one discipline: observe, then take the session lock,
//! re-read the record, and act only if it still holds the incarnation observed (and
//! the same status class); otherwise skip with the reason. Nothing is signalled
//! unless its identity is proven (pidfd, start time, boot id).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use latch_registry::events::{Change, Event, EventKind, ReadEvent};
use latch_registry::proc::{prove, OrphanError, ProofError};
use latch_registry::spec::{ENV_INCARNATION, ENV_ROOT, ENV_SESSION_ID};
use latch_registry::{Record, RegistryError, DEFAULT_LOCK_WAIT};
use latch_wire::{Incarnation, SessionId, SessionRef};
use serde::Serialize;

use crate::client::{derive_status, Client, Entry, KillOutcome, SessionStatus};
use crate::create::Created;
use crate::error::ClientError;
use crate::options::RemoveMode;

/// Options for [`Client::gc`].
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct GcOptions {
    /// Report what would happen; change nothing.
    pub dry_run: bool,
    /// Also stop and remove running sessions whose working directory is gone.
    pub abandoned_cwd: bool,
    /// How long an orphaned program gets after SIGTERM before SIGKILL.
    pub grace: Duration,
    /// Also stop and remove running sessions idle at least this long: no input and
    /// no output on their PTY (its access and modification times).
    pub idle: Option<Duration>,
}

/// How long `record`'s PTY has seen neither input nor output, if it can be told.
fn tty_idle(record: &Record) -> Option<Duration> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(record.tty.as_deref()?).ok()?;
    let last = meta.atime().max(meta.mtime());
    let now = i64::try_from(latch_registry::now_ms() / 1000).ok()?;
    u64::try_from(now.checked_sub(last)?)
        .ok()
        .map(Duration::from_secs)
}

/// What gc did, or why it did nothing, for one session.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct GcReport {
    /// The id (or file stem for a degraded record).
    pub id: String,
    /// The incarnation observed, if readable.
    pub incarnation: Option<String>,
    /// The status observed.
    pub observed: String,
    /// What was done (SPEC §9.12).
    pub action: GcAction,
    /// Why (SPEC §9.12).
    pub reason: Option<GcReason>,
}

/// What gc did to one session, or would do with `--dry-run` (SPEC §9.12).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum GcAction {
    /// An ended session's files removed.
    Removed,
    /// Would be removed.
    WouldRemove,
    /// An orphaned program's session hung up, then removed.
    OrphanSignaledAndRemoved,
    /// Would be hung up and removed.
    WouldSignalOrphan,
    /// A running session (abandoned or idle) stopped, then removed.
    StoppedAndRemoved,
    /// Would be stopped and removed.
    WouldStop,
    /// Files without a record removed.
    OrphanFilesRemoved,
    /// Would be removed.
    WouldRemoveOrphanFiles,
    /// The events of a long-removed session removed.
    EventsRemoved,
    /// Would be removed.
    WouldRemoveEvents,
    /// Nothing to do (a running session).
    None,
    /// Not done, for the reason given.
    Skipped,
}

impl GcAction {
    /// Its name, as `gc --json` gives it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Removed => "removed",
            Self::WouldRemove => "would-remove",
            Self::OrphanSignaledAndRemoved => "orphan-signaled-and-removed",
            Self::WouldSignalOrphan => "would-signal-orphan",
            Self::StoppedAndRemoved => "stopped-and-removed",
            Self::WouldStop => "would-stop",
            Self::OrphanFilesRemoved => "orphan-files-removed",
            Self::WouldRemoveOrphanFiles => "would-remove-orphan-files",
            Self::EventsRemoved => "events-removed",
            Self::WouldRemoveEvents => "would-remove-events",
            Self::None => "none",
            Self::Skipped => "skipped",
        }
    }
}

impl std::fmt::Display for GcAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why gc did (or did not do) what it did (SPEC §9.12). In JSON, one string: the
/// name, `degraded: …`, `unverifiable: …`, `signal-failed: …`, or words.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum GcReason {
    /// The session lock is held elsewhere.
    Busy,
    /// The record changed between the observation and the lock.
    ChangedSinceObserved,
    /// Not the required owner's.
    NotOwner,
    /// Tagged `keep`.
    KeptByTag,
    /// Vanished with a reboot and has a resume command (SPEC §9.18).
    Resurrectable,
    /// The program did not end within the grace.
    ShutdownTimedOut,
    /// A running session: nothing to do.
    Running,
    /// The record cannot be read.
    Degraded(String),
    /// Liveness, or a process's identity, cannot be proven.
    Unverifiable(String),
    /// Signalling failed.
    SignalFailed(String),
    /// Anything else, in words: why a running session is stopped, which files an
    /// orphan or an events file left, an error.
    Detail(String),
}

impl std::fmt::Display for GcReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Busy => f.write_str("busy"),
            Self::ChangedSinceObserved => f.write_str("changed-since-observed"),
            Self::NotOwner => f.write_str("not-owner"),
            Self::KeptByTag => f.write_str("kept-by-tag"),
            Self::Resurrectable => f.write_str("resurrectable"),
            Self::ShutdownTimedOut => f.write_str("shutdown-timed-out"),
            Self::Running => f.write_str("running"),
            Self::Degraded(d) => write!(f, "degraded: {d}"),
            Self::Unverifiable(d) => write!(f, "unverifiable: {d}"),
            Self::SignalFailed(d) => write!(f, "signal-failed: {d}"),
            Self::Detail(d) => f.write_str(d),
        }
    }
}

impl std::str::FromStr for GcReason {
    type Err = std::convert::Infallible;
    /// The reason a string names; words for any other (another host's, say).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let prefixed = |p: &str| s.strip_prefix(p).map(str::to_owned);
        Ok(match s {
            "busy" => Self::Busy,
            "changed-since-observed" => Self::ChangedSinceObserved,
            "not-owner" => Self::NotOwner,
            "kept-by-tag" => Self::KeptByTag,
            "resurrectable" => Self::Resurrectable,
            "shutdown-timed-out" => Self::ShutdownTimedOut,
            "running" => Self::Running,
            _ => {
                if let Some(d) = prefixed("degraded: ") {
                    Self::Degraded(d)
                } else if let Some(d) = prefixed("unverifiable: ") {
                    Self::Unverifiable(d)
                } else if let Some(d) = prefixed("signal-failed: ") {
                    Self::SignalFailed(d)
                } else {
                    Self::Detail(s.to_owned())
                }
            }
        })
    }
}

impl Serialize for GcReason {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for GcReason {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <String as serde::Deserialize>::deserialize(d)?;
        Ok(s.parse().unwrap_or(Self::Detail(s)))
    }
}

impl GcReport {
    /// A report that `observed` session `id` got `action` (no reason, no
    /// incarnation): what gc builds before it knows more.
    pub fn new(id: impl Into<String>, observed: impl Into<String>, action: GcAction) -> Self {
        Self {
            id: id.into(),
            incarnation: None,
            observed: observed.into(),
            action,
            reason: None,
        }
    }
}

/// The tag that makes gc keep an exited session.
pub const KEEP_TAG: &str = "keep";

/// How long gc keeps the events of a removed session after their last change
/// (SPEC.md §9.12).
pub const EVENTS_RETENTION: Duration = Duration::from_secs(7 * 86_400);

/// Why the events file of `id` may go, if it may: no record for the id, its last
/// event `removed` (or no readable last event), unchanged for [`EVENTS_RETENTION`].
/// Returns the last event's incarnation (if any) and the file's age.
fn expired_events(
    reg: &latch_registry::Registry,
    id: &SessionId,
) -> Option<(Option<String>, Duration)> {
    if std::fs::symlink_metadata(reg.record_path(id)).is_ok() {
        return None;
    }
    let meta = std::fs::symlink_metadata(reg.events_path(id)).ok()?;
    if !meta.file_type().is_file() {
        return None;
    }
    let age = meta.modified().ok()?.elapsed().ok()?;
    if age < EVENTS_RETENTION {
        return None;
    }
    let lines = reg.read_event_lines(id).ok()?;
    let last = lines
        .last()
        .map(|l| latch_registry::events::parse_line(id, l));
    match &last {
        None
        | Some(ReadEvent::Unreadable { .. })
        | Some(ReadEvent::Known(Event {
            kind: EventKind::Removed,
            ..
        })) => {}
        Some(_) => return None,
    }
    let inc = last.and_then(|ev| ev.incarnation());
    Some((inc, age))
}

impl Client {
    /// Classifies every session and acts only with proof; reports every session (with
    /// an owner precondition, [`Client::with_owner`]: every session proven to be that
    /// owner's, and every degraded record).
    pub fn gc(&self, opts: &GcOptions) -> Result<Vec<GcReport>, ClientError> {
        let mut out = Vec::new();
        for entry in self.list()? {
            let (record, status) = match entry {
                Entry::Degraded { id, error } => {
                    out.push(GcReport {
                        id,
                        incarnation: None,
                        observed: "degraded".into(),
                        action: GcAction::Skipped,
                        reason: Some(GcReason::Degraded(error)),
                    });
                    continue;
                }
                Entry::Session { record, status } => (*record, status),
            };
            // With an owner precondition, gc considers only the sessions proven to
            // be that owner's (degraded records were reported above: they cannot be
            // proven not to be).
            if self.check_owner(&record).is_err() {
                continue;
            }
            out.push(self.gc_one(&record, &status, opts));
        }
        out.extend(self.gc_events(opts)?);
        // Files without a record cannot be proven to be anyone's: not with --owner.
        if self.required_owner().is_none() {
            out.extend(self.gc_orphans(opts)?);
        }
        Ok(out)
    }

    /// Files an id keeps while it has a record (lock, log, rotated log, socket)
    /// left without one, by a creation that failed or a process killed mid-way
    /// (SPEC.md §9.12): removed under the id's lock, while still no record exists,
    /// once the youngest is [`ORPHAN_MIN_AGE`] old, and the socket only if nobody
    /// answers on it.
    fn gc_orphans(&self, opts: &GcOptions) -> Result<Vec<GcReport>, ClientError> {
        let reg = self.registry();
        let mut ids = BTreeMap::new();
        for suffix in ORPHAN_SUFFIXES {
            for id in reg.ids_with_suffix(suffix)? {
                ids.entry(id).or_insert(());
            }
        }
        let mut out = Vec::new();
        for id in ids.into_keys() {
            let Some(files) = orphan_files(reg, &id) else {
                continue;
            };
            let mut report = GcReport {
                id: id.to_string(),
                incarnation: None,
                observed: "orphan".into(),
                action: GcAction::WouldRemoveOrphanFiles,
                reason: Some(GcReason::Detail(format!(
                    "files without a record: {}",
                    files.join(", ")
                ))),
            };
            if !opts.dry_run {
                report = match reg.lock(&id, DEFAULT_LOCK_WAIT) {
                    Ok(lock) => match orphan_files(reg, &id) {
                        None => skip_report(report, GcReason::ChangedSinceObserved),
                        Some(_) => match reg.remove_stale_socket(&lock) {
                            Ok(_) if reg.socket_path(&id).exists() => skip_report(
                                report,
                                GcReason::Detail("a daemon answers on its socket".into()),
                            ),
                            Ok(_) => {
                                for p in [reg.log_path(&id), reg.rotated_log_path(&id)] {
                                    let _ = std::fs::remove_file(p);
                                }
                                let _ = lock.unlink();
                                GcReport {
                                    action: GcAction::OrphanFilesRemoved,
                                    ..report
                                }
                            }
                            Err(e) => skip_report(report, GcReason::Detail(e.to_string())),
                        },
                    },
                    Err(RegistryError::Busy { .. }) => skip_report(report, GcReason::Busy),
                    Err(e) => skip_report(report, GcReason::Detail(e.to_string())),
                };
            }
            out.push(report);
        }
        Ok(out)
    }

    /// The retention rule for events of removed sessions (SPEC.md §9.12): reports
    /// only the files it removes (or would remove).
    fn gc_events(&self, opts: &GcOptions) -> Result<Vec<GcReport>, ClientError> {
        let reg = self.registry();
        let ids = reg.event_ids()?;
        let mut out = Vec::new();
        for id in ids {
            let Some((inc, age)) = expired_events(reg, &id) else {
                continue;
            };
            let mut report = GcReport {
                id: id.to_string(),
                incarnation: inc,
                observed: "removed".into(),
                action: GcAction::WouldRemoveEvents,
                reason: Some(GcReason::Detail(format!(
                    "events of a removed session, unchanged for {:.1} days",
                    age.as_secs_f64() / 86_400.0
                ))),
            };
            if !opts.dry_run {
                report = match reg.lock(&id, DEFAULT_LOCK_WAIT) {
                    // Re-check under the lock: a creation may have reused the id.
                    Ok(lock) => match expired_events(reg, &id) {
                        Some(_) => match std::fs::remove_file(reg.events_path(&id)) {
                            Ok(()) => {
                                // The lock file is the id's too; nothing else is left.
                                let _ = lock.unlink();
                                GcReport {
                                    action: GcAction::EventsRemoved,
                                    ..report
                                }
                            }
                            Err(e) => {
                                skip_report(report, GcReason::Detail(format!("remove failed: {e}")))
                            }
                        },
                        None => skip_report(report, GcReason::ChangedSinceObserved),
                    },
                    Err(RegistryError::Busy { .. }) => skip_report(report, GcReason::Busy),
                    Err(e) => skip_report(report, GcReason::Detail(e.to_string())),
                };
            }
            out.push(report);
        }
        Ok(out)
    }

    fn gc_one(&self, observed: &Record, status: &SessionStatus, opts: &GcOptions) -> GcReport {
        let mut report = GcReport {
            id: observed.id.to_string(),
            incarnation: Some(observed.incarnation.to_string()),
            observed: status.name().into(),
            action: GcAction::None,
            reason: None,
        };
        let skip = |r: GcReport, why: GcReason| skip_report(r, why);
        match status {
            SessionStatus::Unknown { reason } => {
                return skip(report, GcReason::Unverifiable(reason.clone()))
            }
            SessionStatus::Exited { .. } if observed.tags.contains_key(KEEP_TAG) => {
                return skip(report, GcReason::KeptByTag)
            }
            SessionStatus::Running => {
                let cwd_gone = opts.abandoned_cwd && !Path::new(&observed.cwd).is_dir();
                let idle = opts
                    .idle
                    .and_then(|limit| tty_idle(observed).filter(|d| *d >= limit));
                let why = match (cwd_gone, idle) {
                    (true, _) => "working directory is gone".to_owned(),
                    (false, Some(d)) => format!("idle for {:.1} days", d.as_secs_f64() / 86_400.0),
                    (false, None) => {
                        report.reason = Some(GcReason::Running);
                        return report;
                    }
                };
                if opts.dry_run {
                    report.action = GcAction::WouldStop;
                    report.reason = Some(GcReason::Detail(why));
                    return report;
                }
                let target = SessionRef::new(observed.id.clone(), observed.incarnation);
                return match self.kill(
                    &target,
                    libc::SIGTERM,
                    Some(opts.grace.max(Duration::from_secs(1))),
                ) {
                    Ok(KillOutcome::Killed | KillOutcome::AlreadyExited) => {
                        match self.remove(&target, RemoveMode::ExitedOnly) {
                            Ok(()) => {
                                report.action = GcAction::StoppedAndRemoved;
                                report.reason = Some(GcReason::Detail(why));
                                report
                            }
                            Err(e) => skip(report, gc_reason(&e)),
                        }
                    }
                    Ok(_) => skip(report, GcReason::ShutdownTimedOut),
                    Err(e) => skip(report, gc_reason(&e)),
                };
            }
            SessionStatus::Exited { .. } | SessionStatus::Vanished => {}
        }
        let vanished = matches!(status, SessionStatus::Vanished);
        // A session that vanished with its machine and has a resume command is
        // kept for `latch resurrect` (SPEC.md §9.12, §9.18): gc after a reboot
        // must not lose what the user asked to bring back.
        if vanished
            && observed.resume_command.is_some()
            && latch_registry::reboot::died_with_machine(observed)
        {
            return skip(report, GcReason::Resurrectable);
        }
        // An orphaned program whose daemon is gone: prove it before anything.
        // A recorded pid that now belongs to another process (start time or boot id
        // differ) makes the record inconsistent with the machine: gc does not act on
        // it (`latch rm` can, explicitly); it never signals that process.
        let orphan = if vanished {
            if let Err(ProofError::Mismatch) = prove(&observed.daemon) {
                return skip(
                    report,
                    GcReason::Unverifiable(format!(
                        "daemon pid {} now belongs to another process",
                        observed.daemon.pid
                    )),
                );
            }
            match prove(&observed.child) {
                Ok(fd) => Some(fd),
                Err(ProofError::Gone) => None,
                Err(ProofError::Mismatch) => {
                    return skip(
                        report,
                        GcReason::Unverifiable(format!(
                            "program pid {} now belongs to another process",
                            observed.child.pid
                        )),
                    )
                }
                Err(e) => return skip(report, GcReason::Unverifiable(e.to_string())),
            }
        } else {
            None
        };
        if opts.dry_run {
            report.action = if orphan.is_some() {
                GcAction::WouldSignalOrphan
            } else {
                GcAction::WouldRemove
            };
            return report;
        }
        let lock = match self.registry().lock(&observed.id, DEFAULT_LOCK_WAIT) {
            Ok(l) => l,
            Err(RegistryError::Busy { .. }) => return skip(report, GcReason::Busy),
            Err(e) => return skip(report, GcReason::Detail(e.to_string())),
        };
        // Re-check under the lock: still the incarnation and the status observed.
        match self.registry().read_record(&observed.id) {
            Ok(Some(now)) if now.incarnation.ct_eq(&observed.incarnation) => {
                if derive_status(&now).name() != status.name() {
                    return skip(report, GcReason::ChangedSinceObserved);
                }
                if self.check_owner(&now).is_err() {
                    return skip(report, GcReason::NotOwner);
                }
            }
            _ => return skip(report, GcReason::ChangedSinceObserved),
        }
        if let Some(fd) = orphan {
            // The whole session, as its daemon would have ended it (SPEC.md §5.6,
            // §9.12): its background jobs too, never only the program.
            match latch_registry::proc::hang_up_orphan(&fd, libc::SIGTERM) {
                Ok(hung) => {
                    if !hung.finish(&fd, opts.grace, true) {
                        return skip(report, GcReason::ShutdownTimedOut);
                    }
                }
                Err(OrphanError::Gone) => {}
                Err(e) => return skip(report, GcReason::SignalFailed(e.to_string())),
            }
            report.action = GcAction::OrphanSignaledAndRemoved;
        } else {
            report.action = GcAction::Removed;
        }
        let reg = self.registry();
        let result = reg
            .check_removable(&observed.id)
            .and_then(|()| reg.remove_stale_socket(&lock))
            .and_then(|_| {
                reg.append_event_or_lose(
                    &lock,
                    &Event::new(&observed.id, &observed.incarnation, EventKind::Removed),
                )
            })
            .and_then(|_| reg.remove_files(lock));
        if let Err(e) = result {
            return skip(report, GcReason::Detail(e.to_string()));
        }
        report
    }

    /// `latch exec` inside a session: checks the owner identity the daemon put in
    /// this process's environment against the record under the lock, stores the new
    /// command, and returns (the caller then execs it). Refuses outside a session and
    /// fails closed when the session was replaced.
    pub fn exec_update(
        env: &BTreeMap<String, String>,
        command: &[String],
    ) -> Result<Client, ClientError> {
        let (Some(id), Some(inc), Some(root)) = (
            env.get(ENV_SESSION_ID),
            env.get(ENV_INCARNATION),
            env.get(ENV_ROOT),
        ) else {
            return Err(ClientError::Refused(format!(
                "not inside a latch session ({ENV_SESSION_ID}, {ENV_INCARNATION} and {ENV_ROOT} must be set)"
            )));
        };
        if command.is_empty() {
            return Err(ClientError::Usage("exec needs a command".into()));
        }
        let id = SessionId::new(id.as_str())
            .map_err(|e| ClientError::Refused(format!("{ENV_SESSION_ID}: {e}")))?;
        let inc = Incarnation::parse(inc)
            .map_err(|e| ClientError::Refused(format!("{ENV_INCARNATION}: {e}")))?;
        let client = Client::open(Path::new(root), std::env::current_exe().unwrap_or_default())?;
        let reg = client.registry();
        if !reg.verify(&id, &inc) {
            return Err(ClientError::Refused(
                "the session identity in this environment was not minted by this registry".into(),
            ));
        }
        let lock = reg.lock(&id, DEFAULT_LOCK_WAIT)?;
        let mut record = client
            .read_checked(&id)?
            .ok_or_else(|| ClientError::replaced(&id, inc, None))?;
        if !record.incarnation.ct_eq(&inc) {
            return Err(ClientError::replaced(&id, inc, Some(record.incarnation)));
        }
        let old = std::mem::replace(&mut record.command, command.to_vec());
        reg.write_record(&lock, &record)?;
        let change = Change {
            old: serde_json::json!(old),
            new: serde_json::json!(command),
        };
        let changes = BTreeMap::from([("command".to_owned(), change)]);
        reg.append_event_or_lose(
            &lock,
            &Event::new(&id, &inc, EventKind::MetadataChange { changes }),
        )?;
        drop(lock);
        Ok(client)
    }

    /// Ends `session` and starts its stored command under the same id with a new
    /// incarnation. Refuses if the session was replaced meanwhile.
    pub fn restart(&self, session: &SessionRef, grace: Duration) -> Result<Created, ClientError> {
        let record = self.read_expecting(session)?;
        if derive_status(&record) == SessionStatus::Running {
            match self.kill(session, libc::SIGTERM, Some(grace)) {
                Ok(KillOutcome::TimedOut) => {
                    self.kill(session, libc::SIGKILL, Some(Duration::from_secs(5)))?;
                }
                Ok(_) => {}
                // The daemon speaks an older protocol: restarting is how it gets
                // upgraded, so end the program through its proven identity (pidfd,
                // start time, boot id, under the lock while the record still holds
                // this incarnation) and follow its daemon to the end.
                Err(ClientError::Protocol { .. }) => {
                    self.signal_proven_child(session, libc::SIGTERM)?;
                    if self.wait_daemon_gone(session, grace)? == KillOutcome::TimedOut {
                        self.signal_proven_child(session, libc::SIGKILL)?;
                        if self.wait_daemon_gone(session, Duration::from_secs(5))?
                            == KillOutcome::TimedOut
                        {
                            return Err(ClientError::Busy(format!(
                                "session {}'s older daemon did not stop",
                                session.id
                            )));
                        }
                    }
                }
                Err(e) => return Err(e),
            }
        }
        self.remove(session, RemoveMode::ExitedOnly)?;
        self.create(crate::supervise::restart_of(&record))
    }
}

/// How old the youngest of an id's files without a record must be before gc calls
/// them orphans: a creation under way has written its log before its daemon takes
/// the lock, and reports ready (or fails) within `READY_TIMEOUT`.
pub const ORPHAN_MIN_AGE: Duration = Duration::from_secs(60);

/// The files an id keeps while it has a record, besides the record and events.
const ORPHAN_SUFFIXES: [&str; 4] = [".lock", ".log", ".log.1", ".sock"];

/// The names of `id`'s orphaned files, if it has no record and they are all at
/// least [`ORPHAN_MIN_AGE`] old.
fn orphan_files(reg: &latch_registry::Registry, id: &SessionId) -> Option<Vec<String>> {
    if std::fs::symlink_metadata(reg.record_path(id)).is_ok() {
        return None;
    }
    let mut names = Vec::new();
    for suffix in ORPHAN_SUFFIXES {
        let name = format!("{id}{suffix}");
        let Ok(meta) = std::fs::symlink_metadata(reg.root().join(&name)) else {
            continue;
        };
        let age = meta.modified().ok()?.elapsed().unwrap_or_default();
        if age < ORPHAN_MIN_AGE {
            return None;
        }
        names.push(name);
    }
    (!names.is_empty()).then_some(names)
}

fn skip_report(mut r: GcReport, why: GcReason) -> GcReport {
    r.action = GcAction::Skipped;
    r.reason = Some(why);
    r
}

fn gc_reason(e: &ClientError) -> GcReason {
    match e {
        ClientError::Busy(_) | ClientError::Registry(RegistryError::Busy { .. }) => GcReason::Busy,
        ClientError::Replaced { .. } | ClientError::NotFound(_) => GcReason::ChangedSinceObserved,
        ClientError::NotOwner { .. } => GcReason::NotOwner,
        other => GcReason::Detail(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::{GcAction, GcReason};

    /// gc's JSON names (SPEC §9.12) are the enums' serde forms, both ways.
    #[test]
    fn actions_and_reasons_keep_their_json_names() {
        for a in [
            GcAction::Removed,
            GcAction::WouldRemove,
            GcAction::OrphanSignaledAndRemoved,
            GcAction::WouldSignalOrphan,
            GcAction::StoppedAndRemoved,
            GcAction::WouldStop,
            GcAction::OrphanFilesRemoved,
            GcAction::WouldRemoveOrphanFiles,
            GcAction::EventsRemoved,
            GcAction::WouldRemoveEvents,
            GcAction::None,
            GcAction::Skipped,
        ] {
            let json = serde_json::to_value(a).unwrap();
            assert_eq!(json, a.name(), "{a:?}");
            assert_eq!(serde_json::from_value::<GcAction>(json).unwrap(), a);
        }
        for (r, text) in [
            (GcReason::Busy, "busy"),
            (GcReason::ChangedSinceObserved, "changed-since-observed"),
            (GcReason::NotOwner, "not-owner"),
            (GcReason::KeptByTag, "kept-by-tag"),
            (GcReason::Resurrectable, "resurrectable"),
            (GcReason::ShutdownTimedOut, "shutdown-timed-out"),
            (GcReason::Running, "running"),
            (GcReason::Degraded("bad json".into()), "degraded: bad json"),
            (
                GcReason::Unverifiable("pid 7".into()),
                "unverifiable: pid 7",
            ),
            (
                GcReason::SignalFailed("EPERM".into()),
                "signal-failed: EPERM",
            ),
            (
                GcReason::Detail("idle for 3.0 days".into()),
                "idle for 3.0 days",
            ),
        ] {
            let json = serde_json::to_value(&r).unwrap();
            assert_eq!(json, text);
            assert_eq!(serde_json::from_value::<GcReason>(json).unwrap(), r);
        }
    }

    #[test]
    fn events_retention_matches_spec() {
        let spec = include_str!("../../SPEC.md");
        assert!(spec.contains("| EVENTS_RETENTION | 7 days |"));
        assert_eq!(super::EVENTS_RETENTION.as_secs(), 7 * 86_400);
        assert!(spec.contains("| ORPHAN_MIN_AGE | 60 s |"));
        assert_eq!(super::ORPHAN_MIN_AGE.as_secs(), 60);
    }
}
