//! The client's registry-level operations: create, list, resolve, connect, kill, rm.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use latch_registry::events::{Event, EventKind};
use latch_registry::proc::{prove, OrphanError, OrphanHangup, PidFd, ProofError};
use latch_registry::{CreateSpec, Record, Registry, RegistryError, DEFAULT_LOCK_WAIT};
use latch_wire::{Incarnation, LegacyPolicy, Owner, SessionId, SessionRef};
use serde::Serialize;

use crate::conn::{Bound, Connection, DEFAULT_TIMEOUT};
use crate::create::{spawn_daemon, Created};
use crate::error::{ClientError, Mismatch, UnreachableCause};
use crate::names::validate_display_name;
use crate::options::RemoveMode;

/// A session's derived status (never stored; carried typed between hosts, SPEC.md
/// §12.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(tag = "status", rename_all = "camelCase")]
#[non_exhaustive]
pub enum SessionStatus {
    /// The daemon is proven alive (pidfd + start time + boot id).
    Running,
    /// The program's exit is recorded.
    Exited {
        /// Exit code.
        code: Option<i32>,
        /// Signal.
        signal: Option<i32>,
    },
    /// The daemon is proven gone and no exit was recorded (it crashed or was killed).
    Vanished,
    /// Could not tell.
    Unknown {
        /// Why.
        reason: String,
    },
}

impl SessionStatus {
    /// The status's name as used by `ls --status`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Exited { .. } => "exited",
            Self::Vanished => "vanished",
            Self::Unknown { .. } => "unknown",
        }
    }

    /// The status a name and its facts describe (a target line's `status`,
    /// `exitCode`, `exitSignal` and `statusReason`, SPEC.md §12.2).
    pub fn from_parts(
        name: Option<&str>,
        code: Option<i32>,
        signal: Option<i32>,
        reason: Option<String>,
    ) -> Self {
        match name {
            Some("running") => Self::Running,
            Some("exited") => Self::Exited { code, signal },
            Some("vanished") => Self::Vanished,
            _ => Self::Unknown {
                reason: reason.unwrap_or_else(|| "not reported".into()),
            },
        }
    }
}

impl std::fmt::Display for SessionStatus {
    /// For people: `running`, `exited with code 5`, `killed by signal 9 (SIGKILL)`,
    /// `vanished (…)`, `unknown: …`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Running => f.write_str("running"),
            Self::Exited {
                signal: Some(s), ..
            } => match nix::sys::signal::Signal::try_from(*s) {
                Ok(sig) => write!(f, "killed by signal {s} ({})", sig.as_str()),
                Err(_) => write!(f, "killed by signal {s}"),
            },
            Self::Exited { code: Some(c), .. } => write!(f, "exited with code {c}"),
            Self::Exited { .. } => f.write_str("exited"),
            Self::Vanished => {
                f.write_str("vanished (its daemon ended without recording the program's exit)")
            }
            Self::Unknown { reason } => write!(f, "unknown: {reason}"),
        }
    }
}

/// Derives the status of a record: its recorded exit, or whether its daemon is
/// observed running (SPEC.md §9.7). An observation, never the basis of a signal.
pub fn derive_status(record: &Record) -> SessionStatus {
    if let Some(exit) = &record.exit {
        return SessionStatus::Exited {
            code: exit.code,
            signal: exit.signal,
        };
    }
    match latch_registry::proc::observe(&record.daemon) {
        Ok(_) => SessionStatus::Running,
        Err(ProofError::Gone | ProofError::Mismatch) => SessionStatus::Vanished,
        Err(e) => SessionStatus::Unknown {
            reason: e.to_string(),
        },
    }
}

/// One line of `ls`.
#[derive(Debug, Clone)]
pub enum Entry {
    /// A readable record.
    Session {
        /// The record.
        record: Box<Record>,
        /// Its derived status.
        status: SessionStatus,
    },
    /// A record that exists but cannot be read (a degraded read, not an absence).
    Degraded {
        /// The id (or file stem, if not a valid id).
        id: String,
        /// Why.
        error: String,
    },
}

/// A resolved reference: exactly one creation and its record as read.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Target {
    /// The creation.
    pub session: SessionRef,
    /// The record as read during resolution.
    pub record: Record,
}

/// Parameters for a new session.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct NewSession {
    /// The id; a fresh one if `None`.
    pub id: Option<SessionId>,
    /// Display name.
    pub name: Option<String>,
    /// Program and arguments; `$SHELL` (or /bin/sh) if empty.
    pub command: Vec<String>,
    /// Working directory; the current one if `None`.
    pub cwd: Option<PathBuf>,
    /// Extra environment on top of the caller's.
    pub env: Vec<(String, String)>,
    /// Initial size.
    pub rows: u16,
    /// Initial size.
    pub cols: u16,
    /// Initial tags.
    pub tags: BTreeMap<String, String>,
    /// Legacy policy.
    pub legacy_policy: LegacyPolicy,
    /// The creation's owner (SPEC.md §2.4): set here, once, and never changed.
    pub owner: Option<Owner>,
    /// Whether a lone bash, zsh or fish starts with latch's shell integration
    /// (SPEC.md §4.6); on by default.
    pub shell_integration: latch_registry::shell::Integration,
    /// The restart policy (SPEC.md §9.16).
    pub restart: Option<latch_registry::supervision::RestartPolicy>,
    /// The parent the session's life is bound to ([`Client::parent_process`],
    /// [`Client::parent_session`]).
    pub parent: Option<latch_registry::supervision::Parent>,
    /// `--rm`: the session's files are removed once its exit has been delivered.
    pub ephemeral: bool,
    /// The program's environment instead of the caller's (a restart's, kept in the
    /// record); `env` goes on top.
    pub base_env: Option<BTreeMap<String, String>>,
    /// The creation this one replaces (a restart), recorded as
    /// `previousIncarnation`.
    pub previous: Option<Incarnation>,
    /// The command `latch resurrect` runs (SPEC.md §9.3); with it, the environment
    /// is kept in the record too.
    pub resume_command: Option<Vec<String>>,
    /// `latch resurrect`: the predecessor's checkpointed screen, drawn before the
    /// program starts.
    pub initial_screen: Option<String>,
    /// Record from the first byte into this file (SPEC.md §4.8).
    pub cast: Option<latch_registry::CastSpec>,
}

/// A handle on one registry.
#[derive(Debug)]
pub struct Client {
    registry: Registry,
    daemon_program: PathBuf,
    /// The owner precondition every conditional operation checks (SPEC.md §9.11).
    required_owner: Option<Owner>,
    /// Sockets that answered in the older framing (or closed on our HELLO as an
    /// older daemon does): never probed again by this client (SPEC.md §6), since an
    /// older daemon may die of a second header it cannot read. Keyed by the socket
    /// file's identity (device, inode, change time: an inode number is reused), not
    /// its path: a daemon that replaces the session binds a new socket at the same
    /// path, and is probed afresh.
    older_daemons: std::sync::Mutex<std::collections::HashSet<(u64, u64, i64, i64)>>,
    /// The daemon's entry, for a create that forks without exec (SPEC §9.6).
    daemon_entry: Option<crate::DaemonEntry>,
}

impl Client {
    /// Opens (creating if needed) the registry at `root`; daemons are started by
    /// running `daemon_program daemon ...` (the `latch` binary).
    pub fn open(root: &Path, daemon_program: PathBuf) -> Result<Self, ClientError> {
        Ok(Self {
            registry: Registry::open(root)?,
            daemon_program,
            required_owner: None,
            older_daemons: std::sync::Mutex::default(),
            daemon_entry: None,
        })
    }

    /// The same client, creating by forking this process into the daemon and
    /// running `entry` there, without exec, whenever this process is one thread
    /// (SPEC §9.6); otherwise, and without an entry, a create spawns
    /// `daemon_program daemon ...`. For a program that is the `latch` binary, whose
    /// `latch daemon` entry `entry` must be.
    #[must_use]
    pub fn with_daemon_entry(mut self, entry: crate::DaemonEntry) -> Self {
        self.daemon_entry = Some(entry);
        self
    }

    /// The same client with an owner precondition (SPEC.md §2.4, §9.11): from now on
    /// every operation on a session (resolve, patch, kill, remove, restart, connect
    /// and the effects through it, gc) acts only if the session's proven owner is
    /// `owner`, checked in the same critical section as the incarnation, and fails
    /// with [`ClientError::NotOwner`] otherwise. `None` removes the precondition.
    #[must_use]
    pub fn with_owner(mut self, owner: Option<Owner>) -> Self {
        self.required_owner = owner;
        self
    }

    /// The owner precondition, if any.
    pub fn required_owner(&self) -> Option<&Owner> {
        self.required_owner.as_ref()
    }

    /// Checks the owner precondition against a record read through
    /// [`Registry::read_record`] (so its owner is proven). Callers that act under
    /// the session lock call it under that lock, beside the incarnation check.
    pub(crate) fn check_owner(&self, record: &Record) -> Result<(), ClientError> {
        self.check_owner_of(&record.id, record.owner.as_ref())
    }

    fn check_owner_of(&self, id: &SessionId, actual: Option<&Owner>) -> Result<(), ClientError> {
        match &self.required_owner {
            Some(want) if actual != Some(want) => Err(ClientError::NotOwner {
                id: id.clone(),
                expected: want.clone(),
                actual: actual.cloned(),
            }),
            _ => Ok(()),
        }
    }

    /// The sessions proven to be `owner`'s, and every degraded record (which cannot
    /// be proven not to be). A record whose owner does not verify is degraded, so it
    /// is listed as such, never as unowned or as someone else's.
    pub fn list_owned(&self, owner: &Owner) -> Result<Vec<Entry>, ClientError> {
        Ok(self
            .list()?
            .into_iter()
            .filter(|e| match e {
                Entry::Session { record, .. } => record.owner.as_ref() == Some(owner),
                Entry::Degraded { .. } => true,
            })
            .collect())
    }

    /// The registry.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Creates a session and returns once its daemon listens and its record is written.
    pub fn create(&self, new: NewSession) -> Result<Created, ClientError> {
        if let Some(name) = &new.name {
            validate_display_name(name).map_err(|e| ClientError::Usage(e.to_string()))?;
        }
        let id = match new.id {
            Some(id) => id,
            None => self.registry.fresh_id()?,
        };
        let command = if new.command.is_empty() {
            vec![std::env::var("SHELL")
                .ok()
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "/bin/sh".into())]
        } else {
            new.command
        };
        let cwd = match new.cwd {
            Some(c) => c,
            None => std::env::current_dir().map_err(|e| ClientError::failed("", e))?,
        };
        // Stored canonical (SPEC.md §9.3): the record outlives the creator's working
        // directory, and gc tests it from wherever gc runs.
        let cwd = cwd
            .canonicalize()
            .map_err(|e| ClientError::Other(format!("working directory {}: {e}", cwd.display())))?;
        // The record and the creation spec are JSON: a working directory that is not
        // UTF-8 is refused clearly rather than stored mangled.
        let cwd_text = cwd.to_str().map(str::to_owned).ok_or_else(|| {
            ClientError::Usage(format!(
                "working directory {} is not UTF-8; latch records paths as text",
                cwd.display()
            ))
        })?;
        // Variables whose name or value is not UTF-8 cannot travel in the JSON
        // creation spec; they are left out (SPEC.md §9.6), never a panic.
        let mut env: BTreeMap<String, String> = match new.base_env.clone() {
            Some(base) => base,
            None => std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
                .collect(),
        };
        for key in ["LATCH_SESSION_ID", "LATCH_INCARNATION", "TMUX", "STY"] {
            env.remove(key);
        }
        env.entry("TERM".into())
            .or_insert_with(|| "xterm-256color".into());
        let ask = crate::supervise::Ask {
            restart: new.restart,
            parent: new.parent.as_ref(),
            ephemeral: new.ephemeral,
            env: &new.env,
            previous: new.previous,
            resume_command: new.resume_command,
            initial_screen: new.initial_screen,
            base_env: new.base_env.as_ref(),
        };
        let supervision = crate::supervise::spec_of(ask, &env)?;
        env.extend(new.env);
        let rows = if new.rows == 0 { 24 } else { new.rows };
        let cols = if new.cols == 0 { 80 } else { new.cols };
        latch_wire::limits::check_size(rows, cols)
            .map_err(|e| ClientError::Usage(format!("terminal size {rows}x{cols}: {e}")))?;
        let spec = CreateSpec {
            id,
            display_name: new.name,
            command,
            cwd: cwd_text,
            env,
            rows,
            cols,
            tags: new.tags,
            legacy_policy: new.legacy_policy,
            scrollback: latch_registry::spec::DEFAULT_SCROLLBACK,
            owner: new.owner,
            shell_integration: new.shell_integration,
            supervision,
            cast: new.cast,
        };
        spawn_daemon(
            &self.registry,
            &self.daemon_program,
            self.daemon_entry,
            &spec,
        )
    }

    /// Every session in the registry, unreadable ones included as degraded.
    pub fn list(&self) -> Result<Vec<Entry>, ClientError> {
        let (ids, bad) = self.registry.list_ids()?;
        // Reading a record and observing its daemon is independent per id: split a
        // large registry over the available cores, keeping the listing's order.
        let mut out = crate::parallel::map(&ids, crate::parallel::PER_THREAD, |id| self.entry(id));
        for stem in bad {
            out.push(Entry::Degraded {
                error: format!("{stem:?} is not a valid session id"),
                id: stem,
            });
        }
        Ok(out)
    }

    /// One id's line of `ls`: `None` if it was removed between listing and reading.
    fn entry(&self, id: &SessionId) -> Option<Entry> {
        match self.registry.read_record(id) {
            Ok(Some(record)) => {
                let status = derive_status(&record);
                Some(Entry::Session {
                    record: Box::new(record),
                    status,
                })
            }
            Ok(None) => None,
            Err(e) => Some(Entry::Degraded {
                id: id.to_string(),
                error: e.to_string(),
            }),
        }
    }

    /// Reads `session`'s record and checks that it still holds `session`'s
    /// incarnation (constant time): `Replaced` otherwise, with what the id holds now.
    /// Then the owner precondition, if any (`NotOwner`). Called under the session
    /// lock, both checks and the act that follows form one critical section.
    pub fn read_expecting(&self, session: &SessionRef) -> Result<Record, ClientError> {
        let record = self
            .read_checked(&session.id)?
            .ok_or_else(|| ClientError::replaced(&session.id, session.incarnation, None))?;
        if !record.incarnation.ct_eq(&session.incarnation) {
            return Err(ClientError::replaced(
                &session.id,
                session.incarnation,
                Some(record.incarnation),
            ));
        }
        self.check_owner(&record)?;
        Ok(record)
    }

    /// Sends input to `session`. `Ok(true)`: the daemon confirmed it. `Ok(false)`:
    /// the session ended while the input was being confirmed (the input was `exit`,
    /// say), so delivery is unconfirmed but the session is gone, as expected.
    pub fn send(&self, session: &SessionRef, bytes: &[u8]) -> Result<bool, ClientError> {
        match self.connect(session)?.send(bytes) {
            Ok(()) => Ok(true),
            Err(ClientError::Unreachable { .. }) if self.has_exited(session) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Whether `session`'s exit is recorded (the record still holds its
    /// incarnation): how a caller tells "the daemon closed because the session
    /// ended" from any other broken connection.
    pub fn has_exited(&self, session: &SessionRef) -> bool {
        matches!(
            self.registry.read_record(&session.id),
            Ok(Some(r)) if r.incarnation.ct_eq(&session.incarnation) && r.exit.is_some()
        )
    }

    /// The screen `session`'s program left when it exited (SPEC §9.15), if its exit
    /// is recorded and its screen was kept. An unreadable screen file is a degraded
    /// read (exit 7).
    pub fn final_screen(
        &self,
        session: &SessionRef,
    ) -> Result<Option<latch_registry::FinalScreen>, ClientError> {
        // The daemon unlinks its socket, keeps the screen and records the exit in
        // one critical section: under the lock, a gone socket implies both.
        let _lock = self
            .registry
            .lock(&session.id, latch_registry::DEFAULT_LOCK_WAIT)?;
        if !self.has_exited(session) {
            return Ok(None);
        }
        self.registry
            .read_final_screen(&session.id, &session.incarnation)
            .map_err(|e| ClientError::unreachable(UnreachableCause::Degraded, e.to_string()))
    }

    /// Reads a record; a corrupt one is a degraded read (exit 7), never an absence.
    pub fn read_checked(&self, id: &SessionId) -> Result<Option<Record>, ClientError> {
        match self.registry.read_record(id) {
            Ok(r) => Ok(r),
            Err(e @ RegistryError::Corrupt { .. }) => Err(ClientError::unreachable(
                UnreachableCause::Degraded,
                format!("degraded read of session {id}: {e}"),
            )),
            Err(e) => Err(e.into()),
        }
    }

    /// Resolves a reference: `ID@INCARNATION`, an exact id (always wins), or a display
    /// name carried by exactly one running session. With `expect`, the resolved
    /// creation must be that incarnation; with an owner precondition, its proven
    /// owner must be that owner (names resolve as without one, then the check applies).
    pub fn resolve(
        &self,
        reference: &str,
        expect: Option<&Incarnation>,
    ) -> Result<Target, ClientError> {
        let target = self.resolve_unchecked(reference)?;
        if let Some(want) = expect {
            if !want.ct_eq(&target.session.incarnation) {
                return Err(ClientError::replaced(
                    &target.session.id,
                    *want,
                    Some(target.record.incarnation),
                ));
            }
        }
        // Early refusal; every act re-checks under its lock or through the daemon.
        self.check_owner(&target.record)?;
        Ok(target)
    }

    fn resolve_unchecked(&self, reference: &str) -> Result<Target, ClientError> {
        // No id and no display name is empty (SPEC.md §2.1, §9.8).
        if reference.is_empty() {
            return Err(ClientError::Usage("empty session reference".into()));
        }
        if reference.contains('@') {
            let pinned: SessionRef = reference
                .parse()
                .map_err(|e| ClientError::Usage(format!("{reference:?}: {e}")))?;
            let record = self
                .read_checked(&pinned.id)?
                .ok_or_else(|| ClientError::replaced(&pinned.id, pinned.incarnation, None))?;
            if !record.incarnation.ct_eq(&pinned.incarnation) {
                return Err(ClientError::replaced(
                    &pinned.id,
                    pinned.incarnation,
                    Some(record.incarnation),
                ));
            }
            return Ok(Target {
                session: pinned,
                record,
            });
        }
        if let Ok(id) = SessionId::new(reference) {
            if let Some(record) = self.read_checked(&id)? {
                return Ok(Target {
                    session: SessionRef::new(id, record.incarnation),
                    record,
                });
            }
        }
        let mut matches = Vec::new();
        let mut degraded = Vec::new();
        for entry in self.list()? {
            match entry {
                Entry::Session { record, status } => {
                    if record.display_name.as_deref() == Some(reference)
                        && status == SessionStatus::Running
                    {
                        matches.push(*record);
                    }
                }
                Entry::Degraded { id, .. } => degraded.push(id),
            }
        }
        match matches.len() {
            1 => {
                let record = matches.remove(0);
                Ok(Target {
                    session: SessionRef::new(record.id.clone(), record.incarnation),
                    record,
                })
            }
            0 if !degraded.is_empty() => Err(ClientError::unreachable(
                UnreachableCause::Degraded,
                format!(
                    "no session {reference:?} among readable records, and {} could not be read: {}",
                    degraded.len(),
                    degraded.join(", ")
                ),
            )),
            0 => Err(ClientError::NotFound(format!("{reference:?}"))),
            _ => Err(ClientError::Ambiguous {
                name: reference.to_owned(),
                ids: matches.into_iter().map(|r| r.id).collect(),
            }),
        }
    }

    /// Connects to a session's daemon and negotiates, without binding. A socket
    /// that answered this client in the older framing, or closed on its HELLO, is
    /// not probed again: the same mismatch is reported at once.
    pub fn connect_unbound(&self, id: &SessionId) -> Result<Connection, ClientError> {
        let path = self.registry.socket_path(id);
        let socket = {
            use std::os::unix::fs::MetadataExt;
            std::fs::symlink_metadata(&path)
                .ok()
                .map(|m| (m.dev(), m.ino(), m.ctime(), m.ctime_nsec()))
        };
        let known_older = socket.is_some_and(|s| {
            self.older_daemons
                .lock()
                .is_ok_and(|seen| seen.contains(&s))
        });
        if known_older {
            return Err(ClientError::protocol(
                Mismatch::LegacyPeer,
                format!(
                    "the daemon at {} answered in the older framing earlier in this \
                     command; not probed again",
                    path.display()
                ),
            ));
        }
        let result = Connection::open(&path, DEFAULT_TIMEOUT);
        if let Err(ClientError::Protocol {
            found: Mismatch::LegacyPeer | Mismatch::NoAnswer,
            ..
        }) = &result
        {
            if let (Some(s), Ok(mut seen)) = (socket, self.older_daemons.lock()) {
                seen.insert(s);
            }
        }
        result
    }

    /// Connects and binds to exactly `session`: every later effect reaches that
    /// creation or nothing. With an owner precondition, the daemon's STATUS (its
    /// memory, not the file) must first name `session` and that owner, on the very
    /// connection that is then bound.
    pub fn connect(&self, session: &SessionRef) -> Result<Bound, ClientError> {
        let mut conn = self.open_to(session)?;
        if self.required_owner.is_some() {
            let st = conn.status()?;
            self.check_daemon_is(session, &st)?;
        }
        conn.bind(session)
    }

    /// The daemon's STATUS names `session` and the required owner (if any).
    pub(crate) fn check_daemon_is(
        &self,
        session: &SessionRef,
        st: &latch_wire::StatusReply,
    ) -> Result<(), ClientError> {
        Self::check_status_is(session, st)?;
        self.check_owner_of(&session.id, st.owner.as_ref())
    }

    fn check_status_is(
        session: &SessionRef,
        st: &latch_wire::StatusReply,
    ) -> Result<(), ClientError> {
        if session.matches(&SessionRef::new(st.id.clone(), st.incarnation)) {
            Ok(())
        } else {
            Err(ClientError::replaced(
                &session.id,
                session.incarnation,
                Some(st.incarnation),
            ))
        }
    }

    /// Connects and negotiates with `session`'s daemon, explaining a failure through
    /// the record: an unreachable daemon of an exited, vanished or replaced session
    /// says so.
    fn open_to(&self, session: &SessionRef) -> Result<Connection, ClientError> {
        self.connect_unbound(&session.id)
            .map_err(|e| self.explain_open_error(session, e))
    }

    /// Explains a failure to open a connection to `session`'s daemon through the
    /// record.
    pub(crate) fn explain_open_error(&self, session: &SessionRef, e: ClientError) -> ClientError {
        match e {
            ClientError::Unreachable { cause, detail } => {
                self.explain_unreachable(session, cause, detail)
            }
            // A daemon that closes without answering is either older (legacy) or
            // ending right now; the record tells the two apart.
            ClientError::Protocol { found, detail } => match self.registry.read_record(&session.id)
            {
                Ok(Some(r))
                    if derive_status(&r) == SessionStatus::Running
                        && r.incarnation.ct_eq(&session.incarnation) =>
                {
                    ClientError::Protocol { found, detail }
                }
                _ => self.explain_unreachable(session, UnreachableCause::Closed, detail),
            },
            other => other,
        }
    }

    fn explain_unreachable(
        &self,
        session: &SessionRef,
        cause: UnreachableCause,
        detail: String,
    ) -> ClientError {
        match self.registry.read_record(&session.id) {
            Ok(Some(r)) if !r.incarnation.ct_eq(&session.incarnation) => {
                ClientError::replaced(&session.id, session.incarnation, Some(r.incarnation))
            }
            Ok(Some(r)) => match derive_status(&r) {
                st @ SessionStatus::Exited { .. } => ClientError::unreachable(
                    UnreachableCause::Exited,
                    format!("session {} has ended: {st}", session.id),
                ),
                SessionStatus::Vanished => ClientError::unreachable(
                    UnreachableCause::Vanished,
                    format!(
                        "session {}'s daemon is gone (vanished); `latch rm {}` removes it",
                        session.id, session.id
                    ),
                ),
                _ => ClientError::unreachable(cause, detail),
            },
            Ok(None) => ClientError::replaced(&session.id, session.incarnation, None),
            Err(_) => ClientError::unreachable(cause, detail),
        }
    }

    /// The daemon's STATUS, asked without binding (a query, legal while draining);
    /// fails with `Replaced` unless the daemon is exactly `session`, and with
    /// `NotOwner` unless it reports the required owner (if any).
    pub fn status_of(&self, session: &SessionRef) -> Result<latch_wire::StatusReply, ClientError> {
        Ok(self.status_full_of(session)?.0)
    }

    /// [`status_of`](Self::status_of) with a version-3 daemon's output facts
    /// (the output cursor, the shell; SPEC.md §4.2), `None` from version 2.
    pub fn status_full_of(
        &self,
        session: &SessionRef,
    ) -> Result<(latch_wire::StatusReply, Option<latch_wire::OutputFacts>), ClientError> {
        let mut conn = self.open_to(session)?;
        let (st, output) = conn.status_full()?;
        self.check_daemon_is(session, &st)?;
        Ok((st, output))
    }

    /// Sends `signal` through a bound connection; with `wait`, waits until the daemon
    /// closes (the program ended), at most `wait`. When the daemon cannot be asked,
    /// the program's proven identity is signalled instead (SPEC.md §9.11).
    pub fn kill(
        &self,
        session: &SessionRef,
        signal: i32,
        wait: Option<Duration>,
    ) -> Result<KillOutcome, ClientError> {
        self.log_kill_requested(session, signal)?;
        kill_through(&(self, session), signal, wait)
    }

    /// kill's fallback when the daemon cannot be asked (SPEC.md §9.11). With
    /// `draining`, another stop is under way (the fence refused BIND): its program
    /// may be ignoring that stop's signal, so ours goes to the program's proven
    /// identity (pidfd, start time, boot id, under the lock, only while the record
    /// still holds this incarnation), and the stop is followed to its end.
    pub(crate) fn kill_fallback(
        &self,
        session: &SessionRef,
        signal: i32,
        wait: Option<Duration>,
        draining: bool,
        why: String,
    ) -> Result<KillOutcome, ClientError> {
        if !draining {
            return self.kill_by_proof(session, signal, wait, why);
        }
        self.signal_proven_child(session, signal)?;
        match wait {
            None => Ok(KillOutcome::Signaled),
            Some(limit) => self.wait_daemon_gone(session, limit),
        }
    }

    /// kill when the daemon cannot be asked: signals the program's proven identity
    /// and hangs up the rest of its session ([`Client::signal_proven_child`]), then,
    /// with `wait`, follows the daemon to its end. `why` says why the daemon could
    /// not be asked, for the error when nothing can be proven either.
    fn kill_by_proof(
        &self,
        session: &SessionRef,
        signal: i32,
        wait: Option<Duration>,
        why: String,
    ) -> Result<KillOutcome, ClientError> {
        match self.hang_up_proven(session, signal) {
            // Outside the lock (the pidfds pin every process): what is left of the
            // session once the program has ended is killed, as its daemon would
            // (SPEC.md §5.6).
            // The program gets `wait`, else the same 1 s.
            Ok(Some((program, hung))) => {
                let grace = wait.unwrap_or(latch_registry::proc::KILL_GRACE);
                hung.finish(&program, grace, false);
            }
            // The program is gone: the daemon is finishing; follow it if asked.
            Ok(None) => {
                if let Some(limit) = wait {
                    self.wait_daemon_gone(session, limit)?;
                }
                return Ok(KillOutcome::AlreadyExited);
            }
            Err(ClientError::Unreachable { cause, detail }) => {
                return Err(ClientError::unreachable(
                    cause,
                    format!("{why}; and {detail}"),
                ))
            }
            Err(e) => return Err(e),
        }
        match wait {
            None => Ok(KillOutcome::Signaled),
            Some(limit) => self.wait_daemon_gone(session, limit),
        }
    }

    /// Signals `session`'s program through a pidfd after proving its identity, under
    /// the session lock and only while the record holds `session`'s incarnation;
    /// and hangs up (SIGHUP, SIGCONT) every other process of its terminal session.
    /// Returns whether the program was signalled (false: it is gone).
    pub(crate) fn signal_proven_child(
        &self,
        session: &SessionRef,
        signal: i32,
    ) -> Result<bool, ClientError> {
        Ok(self.hang_up_proven(session, signal)?.is_some())
    }

    /// [`Client::signal_proven_child`], keeping the program's pidfd and the members
    /// hung up. The members are found while the program's pidfd holds its pid, and
    /// the program is checked alive after the scan, before anything is signalled
    /// (`latch_registry::proc::hang_up_orphan`, SPEC.md §5.6). `None`: it is gone.
    fn hang_up_proven(
        &self,
        session: &SessionRef,
        signal: i32,
    ) -> Result<Option<(PidFd, OrphanHangup)>, ClientError> {
        let _lock = self.registry.lock(&session.id, DEFAULT_LOCK_WAIT)?;
        let record = self.read_expecting(session)?;
        let program = match prove(&record.child) {
            Ok(fd) => fd,
            Err(ProofError::Gone) => return Ok(None),
            Err(e) => {
                return Err(ClientError::unreachable(
                    UnreachableCause::Unprovable,
                    format!(
                        "cannot prove session {}'s program: {e}; not signalled",
                        session.id
                    ),
                ))
            }
        };
        match latch_registry::proc::hang_up_orphan(&program, signal) {
            Ok(hung) => Ok(Some((program, hung))),
            Err(OrphanError::Gone) => Ok(None),
            Err(e) => Err(ClientError::unreachable(
                UnreachableCause::Unprovable,
                format!("cannot signal session {}'s program: {e}", session.id),
            )),
        }
    }

    /// Waits until `session`'s daemon is gone (proven through its pidfd), at most
    /// `limit`.
    pub(crate) fn wait_daemon_gone(
        &self,
        session: &SessionRef,
        limit: Duration,
    ) -> Result<KillOutcome, ClientError> {
        let record = self.read_expecting(session)?;
        let fd = match prove(&record.daemon) {
            Ok(fd) => fd,
            Err(ProofError::Gone | ProofError::Mismatch) => return Ok(KillOutcome::Killed),
            Err(e) => {
                return Err(ClientError::unreachable(
                    UnreachableCause::Unprovable,
                    e.to_string(),
                ))
            }
        };
        Ok(if fd.wait_exit(limit) {
            KillOutcome::Killed
        } else {
            KillOutcome::TimedOut
        })
    }

    /// Records `kill_requested` under the lock, only if the record still holds
    /// `session`'s incarnation.
    pub(crate) fn log_kill_requested(
        &self,
        session: &SessionRef,
        signal: i32,
    ) -> Result<(), ClientError> {
        let lock = self.registry.lock(&session.id, DEFAULT_LOCK_WAIT)?;
        let mut record = self.read_expecting(session)?;
        if record.restart.is_some() {
            // Recorded under the lock, where the daemon decides a restart: no
            // replacement runs after this kill (SPEC.md §9.16).
            record.kill_requested_at_ms = Some(latch_registry::now_ms());
            self.registry.write_record(&lock, &record)?;
        }
        // An events file that is not a regular file loses the event, never the
        // kill (SPEC §9.9).
        self.registry.append_event_or_lose(
            &lock,
            &Event::new(
                &session.id,
                &session.incarnation,
                EventKind::KillRequested { signal },
            ),
        )?;
        Ok(())
    }

    /// Removes an exited or vanished session's files, under its lock, only if the
    /// record still holds `session`'s incarnation. A running session is refused
    /// unless [`RemoveMode::Force`], which kills it through a bound connection first.
    pub fn remove(&self, session: &SessionRef, mode: RemoveMode) -> Result<(), ClientError> {
        let record = self.read_expecting(session)?;
        // Before any effect, a kill included (SPEC §9.15); checked again under the lock.
        self.registry.check_removable(&session.id)?;
        if derive_status(&record) == SessionStatus::Running {
            if mode != RemoveMode::Force {
                return Err(ClientError::Refused(format!(
                    "session {} is running; kill it first or use rm --force",
                    session.id
                )));
            }
            // How long `rm --force` waits for the program to end.
            const FORCE_WAIT: Duration = Duration::from_secs(5);
            let outcome = self.kill(session, libc::SIGKILL, Some(FORCE_WAIT))?;
            if outcome == KillOutcome::TimedOut {
                return Err(ClientError::Busy(format!(
                    "session {} did not stop within {} s",
                    session.id,
                    FORCE_WAIT.as_secs()
                )));
            }
        }
        let lock = self.registry.lock(&session.id, DEFAULT_LOCK_WAIT)?;
        // Compare and act under one lock: re-read, re-check, then remove.
        let now = self.read_expecting(session)?;
        let status = derive_status(&now);
        if status == SessionStatus::Running {
            return Err(ClientError::Busy(format!(
                "session {} is still running",
                session.id
            )));
        }
        if let SessionStatus::Unknown { reason } = status {
            return Err(ClientError::unreachable(
                UnreachableCause::Unprovable,
                format!("cannot prove session {} has stopped: {reason}", session.id),
            ));
        }
        // The daemon is proven gone: a socket left by a crash cannot be a
        // successor's while we hold the lock, and it is removed only if nobody answers.
        self.registry.check_removable(&session.id)?;
        self.registry.remove_stale_socket(&lock)?;
        self.registry.append_event_or_lose(
            &lock,
            &Event::new(&session.id, &session.incarnation, EventKind::Removed),
        )?;
        self.registry.remove_files(lock)?;
        Ok(())
    }
}

/// The acts kill is made of, wherever the session lives ([`Client::kill`],
/// [`Location::kill`](crate::Location::kill)).
pub(crate) trait Kills {
    /// A connection bound to the creation.
    fn bind(&self) -> Result<Bound, ClientError>;
    /// Whether its exit is recorded.
    fn has_exited(&self) -> bool;
    /// The fallback through the program's proven identity.
    fn by_proof(
        &self,
        signal: i32,
        wait: Option<Duration>,
        draining: bool,
        why: String,
    ) -> Result<KillOutcome, ClientError>;
}

impl Kills for (&Client, &SessionRef) {
    fn bind(&self) -> Result<Bound, ClientError> {
        self.0.connect(self.1)
    }
    fn has_exited(&self) -> bool {
        self.0.has_exited(self.1)
    }
    fn by_proof(
        &self,
        signal: i32,
        wait: Option<Duration>,
        draining: bool,
        why: String,
    ) -> Result<KillOutcome, ClientError> {
        self.0.kill_fallback(self.1, signal, wait, draining, why)
    }
}

/// kill (SPEC.md §5.6, §9.11), once for every location: the STOP through a bound
/// connection, and when the daemon cannot be asked (its socket gone, no answer,
/// every slot taken, or it closed before confirming the STOP while the program
/// still runs), the fallback through the program's proven identity. Another stop
/// under way (BIND refused as draining) gets our signal the same way.
pub(crate) fn kill_through(
    at: &impl Kills,
    signal: i32,
    wait: Option<Duration>,
) -> Result<KillOutcome, ClientError> {
    let mut bound = match at.bind() {
        Ok(b) => b,
        Err(ClientError::Daemon {
            code: latch_wire::ErrorCode::Draining,
            ..
        }) => return at.by_proof(signal, wait, true, String::new()),
        Err(e) => {
            let Some(why) = crate::location::daemon_unreachable(&e) else {
                return Err(e);
            };
            if matches!(e, ClientError::Unreachable { .. }) && at.has_exited() {
                return Ok(KillOutcome::AlreadyExited);
            }
            return at.by_proof(signal, wait, false, why);
        }
    };
    match bound.stop(signal) {
        Ok(()) => {}
        Err(ClientError::Daemon {
            code: latch_wire::ErrorCode::Exited,
            ..
        }) => return Ok(KillOutcome::AlreadyExited),
        // The daemon closed while confirming: the session ended under us (its
        // daemon records the exit before closing), or the daemon died and the
        // program still runs, for the fallback.
        Err(e @ ClientError::Unreachable { .. }) => {
            if at.has_exited() {
                return Ok(KillOutcome::Killed);
            }
            let why = e.to_string();
            return at.by_proof(signal, wait, false, why);
        }
        Err(e) => return Err(e),
    }
    match wait {
        None => Ok(KillOutcome::Signaled),
        Some(t) => Ok(if bound.wait_closed(t)? {
            KillOutcome::Killed
        } else {
            KillOutcome::TimedOut
        }),
    }
}

/// What `kill` achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KillOutcome {
    /// Signal delivered; not waited for.
    Signaled,
    /// Signal delivered and the session ended.
    Killed,
    /// The program had already exited.
    AlreadyExited,
    /// Signal delivered, but the session was still alive at the deadline.
    TimedOut,
}
