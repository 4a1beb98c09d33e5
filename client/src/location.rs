//! Where a session lives: this registry, or another host's through ssh (SPEC.md
//! §12). A command is written once against a [`Location`]: it resolves a reference
//! to a [`Found`] creation, connects to it (HELLO, then BIND end to end), and asks
//! the registry-side acts (kill's fallback, the final screen, a status) of the
//! location, which runs them where the session's registry is.

use std::sync::Mutex;
use std::time::Duration;

use latch_registry::{FinalScreen, Record};
use latch_wire::{Incarnation, Owner, SessionRef};

use crate::remote::proto::{self, ConnectRequest, KillByProof, Op, Pinned};
use crate::remote::{self, Answer, AttachDefaults, Host, Relay, Remote};
use crate::{
    derive_status, Bound, Client, ClientError, Connection, KillOutcome, Receipt, SessionStatus,
};

/// Where a command's session lives.
#[derive(Debug, Clone, Copy)]
pub enum Location<'a> {
    /// This registry.
    Here(&'a Client),
    /// Another host's registry, through its bridge (SPEC.md §12.2).
    There(&'a There),
}

/// Another host's registry: the host, its `--root`, and the owner precondition.
#[derive(Debug, Clone)]
pub struct There {
    /// The host and the ssh that reaches it.
    pub remote: Remote,
    /// `--root` there, as given.
    pub root: Option<String>,
    /// The owner every act requires (SPEC.md §9.11).
    pub owner: Option<Owner>,
}

/// One creation, resolved through a [`Location`]: its record and status as read,
/// the defaults that shape an attach there, and (for another host) the relay the
/// resolution opened, which the first [`Location::connect`] uses.
#[derive(Debug)]
pub struct Found {
    /// The creation.
    pub session: SessionRef,
    /// Its record as read during resolution.
    pub record: Record,
    /// Its status then.
    pub status: SessionStatus,
    /// The `defaults.json` values of its registry that shape an attach.
    pub defaults: AttachDefaults,
    /// Its host, when it is another's.
    pub host: Option<Host>,
    /// What a create there printed (`new --json`), and its receipt.
    pub created: Option<serde_json::Value>,
    /// The receipt a create there sent.
    pub receipt: Option<Receipt>,
    /// The final screen the bridge sent with a session whose daemon is gone.
    final_screen: Option<FinalScreen>,
    relay: Mutex<Option<Relay>>,
}

impl Found {
    fn from_relay(relay: Relay, host: &Host) -> Self {
        let mut relay = relay;
        let t = &mut relay.target;
        let found = Self {
            session: t.session.clone(),
            record: t.record.clone(),
            status: t.status.clone(),
            defaults: t.defaults.clone(),
            host: Some(host.clone()),
            created: t.created.take(),
            receipt: t.receipt.take(),
            final_screen: t.final_screen.take(),
            relay: Mutex::new(None),
        };
        if relay.has_stream() {
            if let Ok(mut r) = found.relay.lock() {
                *r = Some(relay);
            }
        }
        found
    }

    /// Whether the daemon was found gone, with its program's final screen kept.
    pub fn ended_with_screen(&self) -> bool {
        self.final_screen.is_some()
    }
}

impl<'a> Location<'a> {
    /// The host, for another host's registry.
    pub fn host(&self) -> Option<&Host> {
        match self {
            Self::Here(_) => None,
            Self::There(t) => Some(&t.remote.host),
        }
    }

    /// This registry's client, if the location is here.
    pub fn client(&self) -> Option<&'a Client> {
        match self {
            Self::Here(c) => Some(c),
            Self::There(_) => None,
        }
    }

    /// Resolves `reference` under `expect` and a receipt (SPEC.md §9.10): exactly
    /// one creation, or a typed refusal. A receipt pins the creation; the reference
    /// must name its id.
    pub fn resolve(
        &self,
        reference: &str,
        expect: Option<Incarnation>,
        receipt: Option<Receipt>,
    ) -> Result<Found, ClientError> {
        self.resolve_as(reference, expect, receipt, None)
    }

    /// [`resolve`](Self::resolve) for a kill: `kill_requested` with `signal` is
    /// recorded under the lock while the record holds the creation (SPEC.md §9.9).
    pub fn resolve_for_kill(
        &self,
        reference: &str,
        expect: Option<Incarnation>,
        receipt: Option<Receipt>,
        signal: i32,
    ) -> Result<Found, ClientError> {
        self.resolve_as(reference, expect, receipt, Some(signal))
    }

    fn resolve_as(
        &self,
        reference: &str,
        mut expect: Option<Incarnation>,
        receipt: Option<Receipt>,
        kill: Option<i32>,
    ) -> Result<Found, ClientError> {
        if let Some(r) = &receipt {
            if expect.is_some_and(|w| !w.ct_eq(&r.incarnation)) {
                return Err(ClientError::Usage(
                    "--expect and --receipt name different incarnations".into(),
                ));
            }
            expect = Some(r.incarnation);
        }
        match self {
            Self::Here(client) => {
                let target = client.resolve(reference, expect.as_ref())?;
                if let Some(r) = &receipt {
                    if target.session.id != r.id {
                        return Err(ClientError::Usage(format!(
                            "receipt is for session {}, not {}",
                            r.id, target.session.id
                        )));
                    }
                }
                if let Some(signal) = kill {
                    client.log_kill_requested(&target.session, signal)?;
                }
                let defaults = client.registry().defaults().ok();
                Ok(Found {
                    status: derive_status(&target.record),
                    session: target.session,
                    record: target.record,
                    defaults: AttachDefaults {
                        attach_history: defaults.as_ref().and_then(|d| d.attach_history),
                        detach_key: defaults.and_then(|d| d.detach_key),
                    },
                    host: None,
                    created: None,
                    receipt: None,
                    final_screen: None,
                    relay: Mutex::new(None),
                })
            }
            Self::There(there) => {
                let relay = remote::connect(
                    &there.remote,
                    ConnectRequest {
                        root: there.root.clone(),
                        reference: Some(reference.to_owned()),
                        kill,
                        expect: expect.map(|e| e.to_string()),
                        receipt,
                        ..ConnectRequest::default()
                    },
                )?;
                let s = &relay.target.session;
                if let Some(want) = expect.filter(|w| !w.ct_eq(&s.incarnation)) {
                    return Err(ClientError::replaced(&s.id, want, Some(s.incarnation)));
                }
                Ok(Found::from_relay(relay, &there.remote.host))
            }
        }
    }

    /// Creates a session on another host with `latch new`'s arguments (SPEC.md
    /// §12.2), and resolves it.
    pub fn create_there(&self, args: serde_json::Value) -> Result<Found, ClientError> {
        let Self::There(there) = self else {
            return Err(ClientError::Usage(
                "a create through a bridge needs a host".into(),
            ));
        };
        let relay = remote::connect(
            &there.remote,
            ConnectRequest {
                root: there.root.clone(),
                create: Some(args),
                ..ConnectRequest::default()
            },
        )?;
        Ok(Found::from_relay(relay, &there.remote.host))
    }

    /// Connects to the creation's daemon and negotiates, without binding.
    pub fn connect_unbound(&self, found: &Found) -> Result<Connection, ClientError> {
        match self {
            Self::Here(client) => client
                .connect_unbound(&found.session.id)
                .map_err(|e| client.explain_open_error(&found.session, e)),
            Self::There(there) => {
                let spare = found.relay.lock().ok().and_then(|mut r| r.take());
                let mut relay = match spare {
                    Some(r) => r,
                    None => self.pinned_relay(there, found)?,
                };
                relay.negotiate()
            }
        }
    }

    /// A relay to exactly this creation (its reference pinned to the incarnation).
    fn pinned_relay(&self, there: &There, found: &Found) -> Result<Relay, ClientError> {
        let relay = remote::connect(
            &there.remote,
            ConnectRequest {
                root: there.root.clone(),
                reference: Some(found.session.to_string()),
                expect: Some(found.session.incarnation.to_string()),
                ..ConnectRequest::default()
            },
        )?;
        if !relay.target.session.matches(&found.session) {
            return Err(ClientError::replaced(
                &found.session.id,
                found.session.incarnation,
                Some(relay.target.session.incarnation),
            ));
        }
        Ok(relay)
    }

    /// Connects and binds to exactly this creation, end to end: with an owner
    /// precondition, the daemon's STATUS on that very connection must name it first.
    pub fn connect(&self, found: &Found) -> Result<Bound, ClientError> {
        match self {
            Self::Here(client) => client.connect(&found.session),
            Self::There(there) => {
                let mut conn = self.connect_unbound(found)?;
                if let Some(owner) = &there.owner {
                    let st = conn.status()?;
                    check_daemon(&found.session, &st, owner)?;
                }
                conn.bind(&found.session)
            }
        }
    }

    /// The daemon's STATUS (with a version-3 daemon's output facts), which must
    /// name this creation and the required owner.
    pub fn status_full(
        &self,
        found: &Found,
    ) -> Result<(latch_wire::StatusReply, Option<latch_wire::OutputFacts>), ClientError> {
        match self {
            Self::Here(client) => client.status_full_of(&found.session),
            Self::There(there) => {
                let mut conn = self.connect_unbound(found)?;
                let (st, output) = conn.status_full()?;
                if !found
                    .session
                    .matches(&SessionRef::new(st.id.clone(), st.incarnation))
                {
                    return Err(ClientError::replaced(
                        &found.session.id,
                        found.session.incarnation,
                        Some(st.incarnation),
                    ));
                }
                if let Some(owner) = &there.owner {
                    check_daemon(&found.session, &st, owner)?;
                }
                Ok((st, output))
            }
        }
    }

    /// The screen the creation's program left when it exited (SPEC.md §9.15), if
    /// its exit is recorded and the screen was kept.
    pub fn final_screen(&self, found: &Found) -> Result<Option<FinalScreen>, ClientError> {
        match self {
            Self::Here(client) => client.final_screen(&found.session),
            Self::There(there) => {
                if let Some(s) = &found.final_screen {
                    return Ok(Some(s.clone()));
                }
                // The daemon ended since: the bridge sends the screen with the
                // target once it is gone.
                let relay = self.pinned_relay(there, found)?;
                Ok(relay.target.final_screen.clone())
            }
        }
    }

    /// The creation's status now, read from its registry.
    pub fn status_now(&self, found: &Found) -> Result<SessionStatus, ClientError> {
        match self {
            Self::Here(client) => Ok(derive_status(&client.read_expecting(&found.session)?)),
            Self::There(there) => remote::call(
                &there.remote,
                Op::Status(pinned(there, &found.session)),
                Answer::Status,
                None,
            ),
        }
    }

    /// Whether the creation's exit is recorded.
    pub fn has_exited(&self, found: &Found) -> bool {
        match self {
            Self::Here(client) => client.has_exited(&found.session),
            Self::There(_) => matches!(self.status_now(found), Ok(SessionStatus::Exited { .. })),
        }
    }

    /// Sends `signal` to the creation through a bound connection (STOP, SPEC.md
    /// §5.6); with `wait`, follows it to its end. When the daemon cannot be asked,
    /// the program is signalled through its proven identity where its registry is
    /// (SPEC.md §9.11). `found` comes from [`resolve_for_kill`](Self::resolve_for_kill).
    pub fn kill(
        &self,
        found: &Found,
        signal: i32,
        wait: Option<Duration>,
    ) -> Result<KillOutcome, ClientError> {
        crate::client::kill_through(&(self, found), signal, wait)
    }

    /// kill's fallback where the creation's registry is: the program's proven
    /// identity signalled (and, `draining`, the stop under way followed), else the
    /// session hung up (SPEC.md §9.11).
    pub fn kill_by_proof(
        &self,
        found: &Found,
        signal: i32,
        wait: Option<Duration>,
        draining: bool,
        why: String,
    ) -> Result<KillOutcome, ClientError> {
        match self {
            Self::Here(client) => client.kill_fallback(&found.session, signal, wait, draining, why),
            Self::There(there) => remote::call(
                &there.remote,
                Op::KillByProof(KillByProof {
                    target: pinned(there, &found.session),
                    signal,
                    wait_ms: wait.map(|w| u64::try_from(w.as_millis()).unwrap_or(u64::MAX)),
                    draining,
                }),
                Answer::Status,
                None,
            ),
        }
    }
}

impl Location<'_> {
    /// Waits until the creation's screen shows `text` (SPEC.md §4.6): one
    /// connection peeks, a read-only attachment through a second wakes it.
    pub fn wait_for_text(
        &self,
        found: &Found,
        text: &str,
        opts: crate::PeekOptions,
        timeout: Duration,
    ) -> Result<bytes::Bytes, ClientError> {
        let mut bound = self.connect(found)?;
        let wake = self
            .connect(found)?
            .attach(0, 0, crate::AttachMode::ReadOnly)?
            .reader;
        bound.wait_for_text(wake, text, opts, timeout)
    }

    /// Sends input. `Ok(false)`: the session ended while the input was being
    /// confirmed (the input was `exit`, say), as expected.
    pub fn send(&self, found: &Found, bytes: &[u8]) -> Result<bool, ClientError> {
        match self.connect(found)?.send(bytes) {
            Ok(()) => Ok(true),
            Err(ClientError::Unreachable { .. }) if self.has_exited(found) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Waits on the creation's stream until `condition` holds (SPEC.md §4.7); an
    /// ended session answers from its final screen.
    pub fn wait(
        &self,
        found: &Found,
        condition: &crate::Condition,
        after: Option<u64>,
        timeout: Duration,
    ) -> Result<crate::Waited, ClientError> {
        if let Self::Here(client) = self {
            // Here an exit wait also follows a draining daemon's record (SPEC.md §4.7).
            return client.wait(&found.session, condition, after, timeout);
        }
        let bound = match self.connect(found) {
            Ok(b) => b,
            Err(e @ ClientError::Unreachable { .. }) => {
                return match self.final_screen(found)? {
                    Some(f) => {
                        crate::wait::ended(&found.session, condition, f.exit.code, f.exit.signal)
                    }
                    None => Err(e),
                }
            }
            Err(e) => return Err(e),
        };
        crate::wait_bound(bound, || self.connect(found), condition, after, timeout)
    }

    /// Runs `command` in the creation's shell (SPEC.md §4.7, [`crate::run_bound`]).
    /// A program that ends first is `Replaced` when the id now names another
    /// creation, else `NotFound`.
    pub fn run(
        &self,
        found: &Found,
        command: &str,
        opts: &crate::RunOptions,
        interrupts: Option<&std::sync::atomic::AtomicU32>,
        on_output: &mut dyn FnMut(&[u8]),
    ) -> Result<crate::RunResult, ClientError> {
        match self {
            Self::Here(client) => client.run(&found.session, command, opts, interrupts, on_output),
            Self::There(_) => {
                crate::run_bound(self.connect(found)?, command, opts, interrupts, on_output)
            }
        }
    }
}

/// The registry acts of one creation that a reference and its preconditions
/// name (SPEC.md §9.10, §9.11): resolved and done where the registry is, under
/// its lock, in one request to another host.
impl Location<'_> {
    fn resolve_request(
        there: &There,
        reference: &str,
        expect: Option<Incarnation>,
        receipt: Option<Receipt>,
    ) -> proto::Resolve {
        proto::Resolve {
            root: there.root.clone(),
            reference: reference.to_owned(),
            expect: expect.map(|e| e.to_string()),
            receipt,
            owner: there.owner.as_ref().map(|o| o.as_str().to_owned()),
        }
    }

    /// Applies `patch` to the creation, only while the record still holds it.
    /// With `exact_id`, the reference must be the session's id itself (never a
    /// name): `meta patch --id`.
    pub fn patch(
        &self,
        reference: &str,
        expect: Option<Incarnation>,
        receipt: Option<Receipt>,
        patch: &crate::MetaPatch,
        exact_id: bool,
    ) -> Result<crate::Patched, ClientError> {
        match self {
            Self::Here(client) => {
                let found = self.resolve(reference, expect, receipt)?;
                if exact_id && found.session.id.as_str() != reference {
                    return Err(ClientError::NotFound(format!("{reference:?}")));
                }
                client.patch(&found.session.id, Some(&found.session.incarnation), patch)
            }
            Self::There(there) => {
                let answer: proto::PatchedAnswer = remote::call(
                    &there.remote,
                    Op::Patch(proto::PatchRequest {
                        target: Self::resolve_request(there, reference, expect, receipt),
                        patch: patch.to_json(),
                        exact_id,
                    }),
                    Answer::Status,
                    None,
                )?;
                Ok(crate::Patched {
                    changed: answer.changed,
                    record: answer.record,
                })
            }
        }
    }

    /// Removes the creation (`rm`; with `force`, a running one is stopped first).
    /// Returns it and its owner.
    pub fn remove(
        &self,
        reference: &str,
        expect: Option<Incarnation>,
        receipt: Option<Receipt>,
        force: bool,
    ) -> Result<(SessionRef, Option<Owner>), ClientError> {
        match self {
            Self::Here(client) => {
                let found = self.resolve(reference, expect, receipt)?;
                let mode = if force {
                    crate::RemoveMode::Force
                } else {
                    crate::RemoveMode::ExitedOnly
                };
                client.remove(&found.session, mode)?;
                Ok((found.session, found.record.owner))
            }
            Self::There(there) => {
                let answer: proto::Removed = remote::call(
                    &there.remote,
                    Op::Remove(proto::Removal {
                        target: Self::resolve_request(there, reference, expect, receipt),
                        force,
                    }),
                    Answer::Status,
                    None,
                )?;
                Ok((
                    parse_session(&answer.session, &there.remote.host)?,
                    owner_of(answer.owner),
                ))
            }
        }
    }

    /// Restarts the creation (SPEC.md §9.12): the previous one, and the new
    /// creation's record.
    pub fn restart(
        &self,
        reference: &str,
        expect: Option<Incarnation>,
        receipt: Option<Receipt>,
        grace: Duration,
    ) -> Result<(SessionRef, crate::Created), ClientError> {
        match self {
            Self::Here(client) => {
                let found = self.resolve(reference, expect, receipt)?;
                let created = client.restart(&found.session, grace)?;
                Ok((found.session, created))
            }
            Self::There(there) => {
                let answer: proto::RestartedAnswer = remote::call(
                    &there.remote,
                    Op::Restart(proto::Restarting {
                        target: Self::resolve_request(there, reference, expect, receipt),
                        grace_ms: u64::try_from(grace.as_millis()).unwrap_or(u64::MAX),
                    }),
                    Answer::Status,
                    None,
                )?;
                let previous = parse_session(&answer.previous, &there.remote.host)?;
                Ok((previous, crate::Created::of_record(&answer.record)))
            }
        }
    }

    /// What a receipt says now (SPEC.md §9.10), in its registry.
    pub fn verify(&self, receipt: Receipt) -> Result<proto::Verified, ClientError> {
        match self {
            Self::Here(client) => {
                let (verdict, receipt, detail) = client.verify_receipt_value(receipt);
                Ok(proto::Verified {
                    verdict,
                    receipt,
                    detail,
                })
            }
            Self::There(there) => remote::call(
                &there.remote,
                Op::Verify(proto::VerifyRequest {
                    root: there.root.clone(),
                    receipt,
                }),
                Answer::Status,
                None,
            ),
        }
    }

    /// gc in the location's registry (SPEC.md §9.12).
    pub fn gc(&self, opts: &crate::GcOptions) -> Result<Vec<crate::GcReport>, ClientError> {
        match self {
            Self::Here(client) => client.gc(opts),
            Self::There(there) => remote::call(
                &there.remote,
                Op::Gc(proto::GcRequest {
                    root: there.root.clone(),
                    dry_run: opts.dry_run,
                    abandoned_cwd: opts.abandoned_cwd,
                    grace_ms: u64::try_from(opts.grace.as_millis()).unwrap_or(u64::MAX),
                    idle_ms: opts
                        .idle
                        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                    owner: there.owner.as_ref().map(|o| o.as_str().to_owned()),
                }),
                Answer::Ls,
                None,
            ),
        }
    }
}

fn parse_session(s: &str, host: &Host) -> Result<SessionRef, ClientError> {
    s.parse().map_err(|e| {
        ClientError::protocol(
            crate::Mismatch::Remote,
            format!("host {host} named an unreadable creation {s:?} ({e})"),
        )
    })
}

fn owner_of(owner: Option<String>) -> Option<Owner> {
    owner.and_then(|o| Owner::new(&o).ok())
}

fn pinned(there: &There, session: &SessionRef) -> Pinned {
    Pinned {
        root: there.root.clone(),
        session: session.to_string(),
        owner: there.owner.as_ref().map(|o| o.as_str().to_owned()),
    }
}

/// The daemon's STATUS must name the creation resolved and the owner required.
fn check_daemon(
    session: &SessionRef,
    st: &latch_wire::StatusReply,
    owner: &Owner,
) -> Result<(), ClientError> {
    if !session.matches(&SessionRef::new(st.id.clone(), st.incarnation)) {
        return Err(ClientError::replaced(
            &session.id,
            session.incarnation,
            Some(st.incarnation),
        ));
    }
    if st.owner.as_ref() != Some(owner) {
        return Err(ClientError::NotOwner {
            id: session.id.clone(),
            expected: owner.clone(),
            actual: st.owner.clone(),
        });
    }
    Ok(())
}

impl crate::client::Kills for (&Location<'_>, &Found) {
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
        self.0.kill_by_proof(self.1, signal, wait, draining, why)
    }
}

/// Why a daemon could not be asked, if that is what `e` says (kill's fallback).
pub(crate) fn daemon_unreachable(e: &ClientError) -> Option<String> {
    match e {
        ClientError::Unreachable { detail, .. } => Some(detail.clone()),
        ClientError::Daemon {
            code:
                code @ (latch_wire::ErrorCode::TooManyConnections
                | latch_wire::ErrorCode::HandshakeTimeout),
            detail,
        } => Some(format!("{code}: {detail}")),
        _ => None,
    }
}
