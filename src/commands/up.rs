//! `latch up` and `latch down`: a declared set of sessions in a TOML file (SPEC.md
//! §9.17).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use latch_client::{exit, Client, ClientError, Entry, KillOutcome, NewSession, RemoveMode};
use latch_registry::supervision::{RestartMode, RestartPolicy};
use latch_wire::{LegacyPolicy, Owner, SessionId, SessionRef};
use serde::{Deserialize, Serialize};

use super::{open, parse_owner, usage};
use crate::cli::Dur;
use crate::shapes;

/// The largest file `up` reads.
pub const UP_FILE_MAX_BYTES: u64 = 1024 * 1024;
/// The most sessions one file declares.
pub const UP_SESSIONS_MAX: usize = 1000;

/// `latch up`.
#[derive(Debug, Clone, clap::Args)]
pub struct UpArgs {
    /// The file of sessions.
    #[arg(
        short = 'f',
        long = "file",
        value_name = "FILE",
        default_value = "latch.toml"
    )]
    pub file: PathBuf,
    /// Replace a running session whose stored command differs (drift).
    #[arg(long)]
    pub replace: bool,
}

/// `latch down`.
#[derive(Debug, Clone, clap::Args)]
pub struct DownArgs {
    /// The file of sessions.
    #[arg(
        short = 'f',
        long = "file",
        value_name = "FILE",
        default_value = "latch.toml"
    )]
    pub file: PathBuf,
    /// Every session proven this owner's, file or not (the sessions of a file that
    /// moved without an `owner` key).
    #[arg(long, value_name = "OWNER")]
    pub owner: Option<String>,
}

/// The file (SPEC §9.17): keys in camelCase; an unknown key is refused.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct UpFile {
    owner: Option<String>,
    #[serde(default)]
    sessions: BTreeMap<String, Declared>,
}

/// One declared session.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Declared {
    command: Vec<String>,
    cwd: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    tags: BTreeMap<String, String>,
    restart: Option<String>,
    max_restarts: Option<u32>,
    restart_window: Option<String>,
    restart_delay: Option<String>,
    resume_command: Option<Vec<String>>,
    legacy: Option<String>,
}

/// What `up` or `down` did with one session (`up --json`, `down --json`).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UpReport {
    pub id: String,
    /// created, unchanged, drift, replaced, restarted, foreign, degraded, removed,
    /// absent.
    pub action: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub incarnation: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// A parsed, checked file: its owner and sessions, nothing created yet.
struct Plan {
    owner: Owner,
    sessions: Vec<(SessionId, NewSession)>,
}

/// Reads `path`: a regular file, at most [`UP_FILE_MAX_BYTES`].
fn read_file(path: &Path) -> Result<String, ClientError> {
    let f = std::fs::File::open(path).map_err(|e| usage(format!("{}: {e}", path.display())))?;
    let meta = f
        .metadata()
        .map_err(|e| usage(format!("{}: {e}", path.display())))?;
    if !meta.is_file() {
        return Err(usage(format!("{} is not a regular file", path.display())));
    }
    let mut text = String::new();
    f.take(UP_FILE_MAX_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| usage(format!("{}: {e}", path.display())))?;
    if text.len() as u64 > UP_FILE_MAX_BYTES {
        return Err(usage(format!(
            "{} is over {UP_FILE_MAX_BYTES} bytes",
            path.display()
        )));
    }
    Ok(text)
}

/// `file:LINE:COLUMN: message` for a TOML error.
fn parse_error(path: &Path, text: &str, e: &toml::de::Error) -> ClientError {
    let at = e.span().map_or(0, |s| s.start).min(text.len());
    let before = text.get(..at).unwrap_or_default();
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    usage(format!(
        "{}:{line}:{col}: {}",
        path.display(),
        e.message().trim()
    ))
}

/// The owner of a file without an `owner` key: `up:` and the SHA-256 of its
/// canonical path, in hex (67 characters).
fn path_owner(canonical: &Path) -> Result<Owner, ClientError> {
    use std::os::unix::ffi::OsStrExt;
    let digest = ring::digest::digest(&ring::digest::SHA256, canonical.as_os_str().as_bytes());
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    Owner::new(format!("up:{hex}")).map_err(|e| usage(format!("owner: {e}")))
}

fn plan(path: &Path) -> Result<Plan, ClientError> {
    let text = read_file(path)?;
    let file: UpFile = toml::from_str(&text).map_err(|e| parse_error(path, &text, &e))?;
    let canonical = path
        .canonicalize()
        .map_err(|e| usage(format!("{}: {e}", path.display())))?;
    let base = canonical.parent().unwrap_or(Path::new("/")).to_path_buf();
    let owner = match &file.owner {
        Some(o) => Owner::new(o.as_str()).map_err(|e| usage(format!("owner {o:?}: {e}")))?,
        None => path_owner(&canonical)?,
    };
    if file.sessions.len() > UP_SESSIONS_MAX {
        return Err(usage(format!(
            "{} declares {} sessions, over {UP_SESSIONS_MAX}",
            path.display(),
            file.sessions.len()
        )));
    }
    let mut sessions = Vec::new();
    for (id, d) in file.sessions {
        let what = |e: String| usage(format!("{}: session {id:?}: {e}", path.display()));
        let sid = SessionId::new(id.as_str()).map_err(|e| what(e.to_string()))?;
        let new = declared(&sid, d, &base, &owner).map_err(|e| what(e.to_string()))?;
        sessions.push((sid, new));
    }
    Ok(Plan { owner, sessions })
}

fn declared(id: &SessionId, d: Declared, base: &Path, owner: &Owner) -> Result<NewSession, String> {
    if d.command.is_empty() {
        return Err("command is empty".into());
    }
    if d.resume_command.as_ref().is_some_and(Vec::is_empty) {
        return Err("resumeCommand is empty".into());
    }
    for (k, v) in &d.tags {
        latch_client::validate_tag(k, Some(v)).map_err(|e| e.to_string())?;
    }
    let legacy = match d.legacy.as_deref() {
        None | Some("observe") => LegacyPolicy::Observe,
        Some("off") => LegacyPolicy::Off,
        Some("full") => LegacyPolicy::Full,
        Some(other) => return Err(format!("legacy {other:?}: not off, observe or full")),
    };
    let mut new = NewSession::default();
    new.id = Some(id.clone());
    new.command = d.command;
    // What `latch resurrect` runs after a reboot (SPEC.md §9.18), as the file says.
    new.resume_command = d.resume_command;
    new.cwd = Some(match d.cwd {
        Some(c) => base.join(c),
        None => base.to_path_buf(),
    });
    new.env = d.env.into_iter().collect();
    new.tags = d.tags;
    new.legacy_policy = legacy;
    new.owner = Some(owner.clone());
    new.restart = restart_policy(
        d.restart.as_deref(),
        d.max_restarts,
        d.restart_window.as_deref(),
        d.restart_delay.as_deref(),
    )?;
    Ok(new)
}

fn restart_policy(
    mode: Option<&str>,
    max: Option<u32>,
    window: Option<&str>,
    delay: Option<&str>,
) -> Result<Option<RestartPolicy>, String> {
    let mode = match mode {
        None | Some("no") => {
            if max.is_some() || window.is_some() || delay.is_some() {
                return Err("maxRestarts, restartWindow and restartDelay need restart".into());
            }
            return Ok(None);
        }
        Some("on-failure") => RestartMode::OnFailure,
        Some("always") => RestartMode::Always,
        Some(other) => return Err(format!("restart {other:?}: not no, on-failure or always")),
    };
    let ms = |s: &str| -> Result<u64, String> {
        let d: Dur = s.parse()?;
        Ok(u64::try_from(d.0.as_millis()).unwrap_or(u64::MAX))
    };
    let mut p = RestartPolicy::new(mode);
    if let Some(n) = max {
        p.max_restarts = n;
    }
    if let Some(w) = window {
        p.window_ms = ms(w)?;
    }
    if let Some(d) = delay {
        p.delay_ms = ms(d)?;
    }
    Ok(Some(p))
}

/// `latch up`: creates what is missing, leaves matching running sessions alone,
/// reports drift (replaces it with `--replace`), restarts its own ended sessions,
/// and never touches a session another owner made (SPEC §9.17).
pub(crate) fn up(root: Option<&PathBuf>, args: &UpArgs, json: bool) -> Result<i32, ClientError> {
    let plan = plan(&args.file)?;
    let client = open(root)?;
    let mut reports = Vec::new();
    for (id, new) in plan.sessions {
        reports.push(up_one(&client, &plan.owner, id, new, args.replace)?);
    }
    print(&reports, json)?;
    Ok(exit::OK)
}

fn report(
    id: &SessionId,
    action: &'static str,
    inc: Option<String>,
    detail: Option<String>,
) -> UpReport {
    UpReport {
        id: id.to_string(),
        action,
        incarnation: inc,
        detail,
    }
}

fn up_one(
    client: &Client,
    owner: &Owner,
    id: SessionId,
    new: NewSession,
    replace: bool,
) -> Result<UpReport, ClientError> {
    let record = match client.read_checked(&id) {
        Ok(r) => r,
        Err(e) => return Ok(report(&id, "degraded", None, Some(e.to_string()))),
    };
    let Some(record) = record else {
        let created = client.create(new)?;
        return Ok(report(
            &id,
            "created",
            Some(created.incarnation.to_string()),
            None,
        ));
    };
    let inc = Some(record.incarnation.to_string());
    if record.owner.as_ref() != Some(owner) {
        let whose = record
            .owner
            .as_ref()
            .map_or("no owner".into(), |o| format!("owner {o}"));
        return Ok(report(
            &id,
            "foreign",
            inc,
            Some(format!("made by {whose}; left alone")),
        ));
    }
    let status = latch_client::derive_status(&record);
    let (shown, _) = latch_client::shown_status(&record, &status);
    let session = SessionRef::new(id.clone(), record.incarnation);
    if shown == "running" {
        if record.command == new.command {
            return Ok(report(&id, "unchanged", inc, None));
        }
        let detail = format!("running {:?}, declared {:?}", record.command, new.command);
        if !replace {
            return Ok(report(&id, "drift", inc, Some(detail)));
        }
        let created = replace_with(client, &session, new)?;
        return Ok(report(&id, "replaced", Some(created), Some(detail)));
    }
    let detail = format!("was {}", crate::output::status_word(&status));
    let created = replace_with(client, &session, new)?;
    Ok(report(&id, "restarted", Some(created), Some(detail)))
}

/// Ends `session` (a hang-up, then a kill), removes it and creates `new` in its
/// place; returns the new incarnation.
fn replace_with(
    client: &Client,
    session: &SessionRef,
    new: NewSession,
) -> Result<String, ClientError> {
    stop(client, session)?;
    let mut new = new;
    new.previous = Some(session.incarnation);
    Ok(client.create(new)?.incarnation.to_string())
}

fn stop(client: &Client, session: &SessionRef) -> Result<(), ClientError> {
    let record = client.read_expecting(session)?;
    if latch_client::derive_status(&record) == latch_client::SessionStatus::Running {
        let out = client.kill(session, libc::SIGHUP, Some(Duration::from_secs(5)))?;
        if out == KillOutcome::TimedOut {
            client.kill(session, libc::SIGKILL, Some(Duration::from_secs(5)))?;
        }
    }
    client.remove(session, RemoveMode::Force)
}

/// `latch down`: kills and removes exactly the file's sessions that are proven its
/// owner's; with `--owner`, every session proven that owner's.
pub(crate) fn down(
    root: Option<&PathBuf>,
    args: &DownArgs,
    json: bool,
) -> Result<i32, ClientError> {
    let (owner, ids) = match parse_owner(args.owner.as_deref())? {
        Some(o) => (o, None),
        None => {
            let plan = plan(&args.file)?;
            let ids: Vec<SessionId> = plan.sessions.into_iter().map(|(id, _)| id).collect();
            (plan.owner, Some(ids))
        }
    };
    let client = open(root)?.with_owner(Some(owner.clone()));
    let ids = match ids {
        Some(ids) => ids,
        None => client
            .list_owned(&owner)?
            .into_iter()
            .filter_map(|e| match e {
                Entry::Session { record, .. } => Some(record.id.clone()),
                Entry::Degraded { .. } => None,
            })
            .collect(),
    };
    let mut reports = Vec::new();
    for id in ids {
        reports.push(down_one(&client, &owner, &id)?);
    }
    print(&reports, json)?;
    Ok(exit::OK)
}

fn down_one(client: &Client, owner: &Owner, id: &SessionId) -> Result<UpReport, ClientError> {
    let record = match client.read_checked(id) {
        Ok(Some(r)) => r,
        Ok(None) => return Ok(report(id, "absent", None, None)),
        Err(e) => return Ok(report(id, "degraded", None, Some(e.to_string()))),
    };
    let inc = Some(record.incarnation.to_string());
    if record.owner.as_ref() != Some(owner) {
        return Ok(report(
            id,
            "foreign",
            inc,
            Some("not this file's; left alone".into()),
        ));
    }
    stop(client, &SessionRef::new(id.clone(), record.incarnation))?;
    Ok(report(id, "removed", inc, None))
}

fn print(reports: &[UpReport], json: bool) -> Result<(), ClientError> {
    if json {
        return shapes::print(&reports);
    }
    for r in reports {
        let inc = r
            .incarnation
            .as_deref()
            .map(|i| format!("@{i}"))
            .unwrap_or_default();
        match &r.detail {
            Some(d) => println!("{}{inc}: {} ({d})", r.id, r.action),
            None => println!("{}{inc}: {}", r.id, r.action),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn up_bounds_are_spec_9_17s() {
        let spec = include_str!("../../SPEC.md");
        assert!(spec.contains("at most 1 MiB (`UP_FILE_MAX_BYTES`)"));
        assert_eq!(UP_FILE_MAX_BYTES, 1024 * 1024);
        assert!(spec.contains("declaring at most 1000 sessions"));
        assert_eq!(UP_SESSIONS_MAX, 1000);
    }

    #[test]
    fn a_path_owner_fits_the_owner_bound() {
        let o = path_owner(Path::new("/home/someone/project/latch.toml")).unwrap();
        assert_eq!(o.as_str().len(), 67);
        assert!(o.as_str().starts_with("up:"));
    }
}
