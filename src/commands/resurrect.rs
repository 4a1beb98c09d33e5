//! `latch resurrect [REF...|--all] [--dry-run]`: brings back the sessions whose
//! machine restarted under them (SPEC.md §9.18): same id, a new incarnation that
//! names its predecessor, the owner kept, the checkpointed screen shown first, and
//! the resume command (else the start command) run in the stored environment.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Args;
use latch_client::{exit, Client, ClientError, Entry, NewSession, RemoveMode, SessionStatus};
use latch_registry::reboot::died_with_machine;
use latch_registry::Record;
use latch_wire::SessionRef;
use serde::Serialize;

use super::{open, parse_owner, usage};
use crate::output;
use crate::shapes;

/// `latch resurrect`.
#[derive(Debug, Args, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResurrectArgs {
    /// Sessions to bring back: ID or ID@INCARNATION (each vanished by a reboot).
    #[arg(add = crate::complete::refs(), required_unless_present = "all")]
    pub references: Vec<String>,
    /// Every session vanished by a reboot.
    #[arg(long, conflicts_with = "references")]
    pub all: bool,
    /// Say what would run; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Only sessions proven to be OWNER's.
    #[arg(long, value_name = "OWNER")]
    pub owner: Option<String>,
}

/// Each `resurrect --json` element (SPEC §10).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResurrectedJson {
    pub id: String,
    pub previous_incarnation: String,
    pub incarnation: Option<String>,
    pub command: Vec<String>,
    pub cwd: String,
    pub owner: Option<latch_wire::Owner>,
    pub screen: bool,
    pub outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `new --resume-cmd CMD`: run by `sh -c` (SPEC §9.3).
pub(crate) fn resume_argv(cmd: Option<&str>) -> Result<Option<Vec<String>>, ClientError> {
    match cmd {
        None => Ok(None),
        Some(c) if c.trim().is_empty() => Err(usage("--resume-cmd needs a command")),
        Some(c) => Ok(Some(vec!["sh".into(), "-c".into(), c.to_owned()])),
    }
}

/// The environment for a record that stored none (SPEC §9.18): never the caller's.
fn fallback_env() -> BTreeMap<String, String> {
    let home = nix::unistd::User::from_uid(nix::unistd::geteuid())
        .ok()
        .flatten()
        .and_then(|u| u.dir.to_str().map(str::to_owned))
        .unwrap_or_else(|| "/".into());
    BTreeMap::from([
        ("HOME".into(), home),
        ("LANG".into(), "C.UTF-8".into()),
        ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
        ("TERM".into(), "xterm-256color".into()),
    ])
}

fn program(record: &Record) -> Vec<String> {
    record
        .resume_command
        .clone()
        .unwrap_or_else(|| record.command.clone())
}

/// The sessions to act on: every one vanished by a reboot (`--all`), or each REF,
/// which must be one.
fn candidates(client: &Client, args: &ResurrectArgs) -> Result<Vec<Record>, ClientError> {
    if args.all {
        return Ok(client
            .list()?
            .into_iter()
            .filter_map(|e| match e {
                Entry::Session { record, status }
                    if status == SessionStatus::Vanished && died_with_machine(&record) =>
                {
                    Some(*record)
                }
                _ => None,
            })
            .filter(|r| {
                client
                    .required_owner()
                    .is_none_or(|o| r.owner.as_ref() == Some(o))
            })
            .collect());
    }
    let mut out = Vec::new();
    for r in &args.references {
        let target = client.resolve(r, None)?;
        let record = target.record;
        if latch_client::derive_status(&record) != SessionStatus::Vanished
            || !died_with_machine(&record)
        {
            return Err(ClientError::Refused(format!(
                "session {} did not vanish with a reboot; only such sessions are resurrected",
                record.id
            )));
        }
        out.push(record);
    }
    Ok(out)
}

/// Brings one session back: its checkpoint read (degraded is an error, never an
/// absence), its files removed under the lock while the record still holds the
/// creation observed, then the new creation.
fn revive(client: &Client, record: &Record) -> Result<latch_client::Created, ClientError> {
    let (id, inc) = (&record.id, record.incarnation);
    if !std::path::Path::new(&record.cwd).is_dir() {
        return Err(ClientError::Refused(format!(
            "session {id}'s working directory {} is gone; nothing was changed",
            record.cwd
        )));
    }
    let checkpoint = client.registry().read_checkpoint(id, &inc)?;
    client.remove(&SessionRef::new(id.clone(), inc), RemoveMode::ExitedOnly)?;
    let mut new = NewSession::default();
    // The size the screen was kept at, so it is drawn as it was.
    if let Some(cp) = &checkpoint {
        (new.rows, new.cols) = (cp.rows, cp.cols);
    }
    let screen = checkpoint.map(|c| c.ansi);
    new.id = Some(id.clone());
    new.name.clone_from(&record.display_name);
    new.command = program(record);
    new.cwd = Some(record.cwd.clone().into());
    new.tags.clone_from(&record.tags);
    new.legacy_policy = record.legacy_policy;
    new.owner.clone_from(&record.owner);
    new.resume_command.clone_from(&record.resume_command);
    // The restart policy carries over; a parent does not outlive a reboot.
    new.restart = record.restart;
    new.previous = Some(inc);
    new.initial_screen = screen;
    // Never the caller's environment (SPEC.md §9.3).
    new.base_env = Some(record.env.clone().unwrap_or_else(fallback_env));
    client.create(new)
}

fn report(
    client: &Client,
    record: &Record,
    dry_run: bool,
) -> (ResurrectedJson, Option<ClientError>) {
    let mut row = ResurrectedJson {
        id: record.id.to_string(),
        previous_incarnation: record.incarnation.to_string(),
        incarnation: None,
        command: program(record),
        cwd: record.cwd.clone(),
        owner: record.owner.clone(),
        screen: matches!(
            client
                .registry()
                .read_checkpoint(&record.id, &record.incarnation),
            Ok(Some(_))
        ),
        outcome: "would-resurrect",
        error: None,
    };
    if dry_run {
        return (row, None);
    }
    match revive(client, record) {
        Ok(created) => {
            row.incarnation = Some(created.incarnation.to_string());
            row.outcome = "resurrected";
            (row, None)
        }
        Err(e) => {
            row.outcome = "failed";
            row.error = Some(e.to_string());
            (row, Some(e))
        }
    }
}

/// Runs `latch resurrect`.
pub(crate) fn resurrect(
    root: Option<&PathBuf>,
    args: &ResurrectArgs,
    json: bool,
) -> Result<i32, ClientError> {
    let client = open(root)?.with_owner(parse_owner(args.owner.as_deref())?);
    let mut rows = Vec::new();
    let mut failed = None;
    for record in candidates(&client, args)? {
        let (row, err) = report(&client, &record, args.dry_run);
        rows.push(row);
        failed = failed.or(err);
    }
    if json {
        shapes::print(&rows)?;
    } else if rows.is_empty() {
        println!("nothing to resurrect");
    }
    for r in rows.iter().filter(|_| !json) {
        let cmd = output::escape(&output::shell_join(&r.command)).into_owned();
        match (r.outcome, &r.incarnation, &r.error) {
            ("resurrected", Some(inc), _) => println!(
                "{}@{inc}: resurrected (was {}): {cmd}",
                r.id, r.previous_incarnation
            ),
            (_, _, Some(e)) => println!("{}: failed: {}", r.id, output::escape(e)),
            _ => println!(
                "{}@{}: would run {cmd} in {}{}",
                r.id,
                r.previous_incarnation,
                output::escape(&r.cwd),
                if r.screen {
                    ", its checkpointed screen first"
                } else {
                    ""
                }
            ),
        }
    }
    Ok(failed.map_or(exit::OK, |e| e.exit_code()))
}
