//! Supervision on the client's side (SPEC.md §9.16): what a creation asks of its
//! daemon (restart policy, parent, `--rm`, the environment a restart keeps), the
//! parent's proven identity, and the status a record shows while it restarts.

use std::collections::BTreeMap;

use latch_registry::proc::{prove, ProofError};
use latch_registry::spec::Supervision;
use latch_registry::supervision::{Parent, ParentSession, StatusReason};
use latch_registry::{ProcIdentity, Record};

use crate::client::{Client, NewSession, SessionStatus, Target};
use crate::error::{ClientError, UnreachableCause};

/// The variables of the program's environment a restart keeps besides the `--env`
/// overlay (SPEC.md §9.16).
pub const KEPT_ENV: [&str; 4] = ["TERM", "PATH", "LANG", "HOME"];

/// The parts of a [`NewSession`] supervision reads.
#[derive(Debug, Clone)]
pub(crate) struct Ask<'a> {
    pub restart: Option<latch_registry::supervision::RestartPolicy>,
    pub parent: Option<&'a Parent>,
    pub ephemeral: bool,
    pub env: &'a [(String, String)],
    pub previous: Option<latch_wire::Incarnation>,
    pub resume_command: Option<Vec<String>>,
    pub initial_screen: Option<String>,
    /// The environment given instead of the caller's (a restart's or a
    /// resurrection's, as the record kept it).
    pub base_env: Option<&'a BTreeMap<String, String>>,
}

/// What `new` asks of the daemon's supervision; `env` is the program's whole
/// environment. `--rm` with a restart policy is refused (exit 2).
pub(crate) fn spec_of(
    new: Ask<'_>,
    env: &BTreeMap<String, String>,
) -> Result<Supervision, ClientError> {
    if new.ephemeral && new.restart.is_some() {
        return Err(ClientError::Usage(
            "--rm and --restart cannot be combined: a session that restarts has no end to remove its files at"
                .into(),
        ));
    }
    // Kept only when a restart policy or a resume command needs it (SPEC.md §9.16);
    // a kept environment given back (a restart, a resurrection) is kept whole, so
    // the overlay survives every later restart too.
    let keep = new.restart.is_some() || new.resume_command.is_some();
    let record_env = keep.then(|| {
        let mut kept: BTreeMap<String, String> = match new.base_env {
            Some(base) => base.clone(),
            None => KEPT_ENV
                .iter()
                .filter_map(|k| Some(((*k).to_owned(), env.get(*k)?.clone())))
                .collect(),
        };
        kept.extend(new.env.iter().cloned());
        kept
    });
    Ok(Supervision {
        restart: new.restart,
        parent: new.parent.cloned(),
        ephemeral: new.ephemeral,
        record_env,
        previous_incarnation: new.previous,
        resume_command: new.resume_command,
        initial_screen: new.initial_screen,
    })
}

/// The status a record shows (`ls`, `status`) and its reason: while its daemon
/// waits to restart the program, `running` with `restarting`; after the restarts
/// ran out, `exited` with `flapping`; after its parent ended, `parent-ended`;
/// after its machine restarted under it, `vanished` with `reboot`.
pub fn shown_status(
    record: &Record,
    status: &SessionStatus,
) -> (&'static str, Option<StatusReason>) {
    let reason = record.status_reason;
    match (status, reason) {
        (SessionStatus::Exited { .. }, Some(StatusReason::Restarting)) => {
            if latch_registry::proc::observe(&record.daemon).is_ok() {
                ("running", reason)
            } else {
                // Its daemon died during the delay: nothing will restart it.
                (status.name(), None)
            }
        }
        (SessionStatus::Exited { .. }, Some(_)) => (status.name(), reason),
        (SessionStatus::Vanished, _) if latch_registry::reboot::died_with_machine(record) => {
            (status.name(), Some(StatusReason::Reboot))
        }
        _ => (status.name(), None),
    }
}

impl Client {
    /// The parent `--with-parent PID` names: the process's proven identity, read
    /// after a pidfd pins it (SPEC.md §9.16). A pid that names no process is
    /// `NotFound`.
    pub fn parent_process(&self, pid: u32) -> Result<Parent, ClientError> {
        let gone = || ClientError::NotFound(format!("no process {pid} to bind the session to"));
        let fd = latch_registry::PidFd::open(pid).map_err(|_| gone())?;
        let process = ProcIdentity::of(pid).map_err(|_| gone())?;
        if !fd.is_alive() {
            return Err(gone());
        }
        Ok(Parent {
            process,
            session: None,
        })
    }

    /// The parent `--with-parent REF` names: that creation's program, proven
    /// against its record while the record holds the creation (SPEC.md §9.16).
    pub fn parent_session(&self, target: &Target) -> Result<Parent, ClientError> {
        let record = self.read_expecting(&target.session)?;
        if record.exit.is_some() {
            return Err(ClientError::Refused(format!(
                "session {} has exited; it cannot be a parent",
                target.session
            )));
        }
        match prove(&record.child) {
            Ok(_) => Ok(Parent {
                process: record.child.clone(),
                session: Some(ParentSession {
                    id: record.id.clone(),
                    incarnation: record.incarnation,
                }),
            }),
            Err(ProofError::Gone | ProofError::Mismatch) => Err(ClientError::Refused(format!(
                "session {}'s program has ended; it cannot be a parent",
                target.session
            ))),
            Err(e) => Err(ClientError::unreachable(
                UnreachableCause::Unprovable,
                format!("cannot prove session {}'s program: {e}", target.session),
            )),
        }
    }
}

/// A restart's creation: the record's command, working directory, tags, owner,
/// supervision and kept environment (never the caller's, SPEC.md §9.16).
pub(crate) fn restart_of(record: &Record) -> NewSession {
    NewSession {
        id: Some(record.id.clone()),
        name: record.display_name.clone(),
        command: record.command.clone(),
        cwd: Some(record.cwd.clone().into()),
        tags: record.tags.clone(),
        legacy_policy: record.legacy_policy,
        // The owner belongs to the session, not to one incarnation: restart keeps
        // it (read from the verified record) and binds it to the new creation.
        owner: record.owner.clone(),
        restart: record.restart,
        parent: record.parent.clone(),
        base_env: record.env.clone(),
        previous: Some(record.incarnation),
        // The resume command carries over with the environment kept for it
        // (SPEC.md §9.3).
        resume_command: record.resume_command.clone(),
        ..NewSession::default()
    }
}
