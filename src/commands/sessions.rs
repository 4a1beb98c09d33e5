//! Sessions and their terminals: new, attach, peek, send, resize.

use std::collections::BTreeMap;
use std::path::PathBuf;

use std::path::Path;

use latch_client::{
    exit, Client, ClientError, Entry, Location, NewSession, SessionStatus, Target, UnreachableCause,
};
use latch_registry::shell::Integration;
use latch_wire::{LegacyPolicy, SessionId, SessionRef};

use super::at::At;
use super::{open, parse_kv, parse_owner, usage};
use crate::cli::{NewArgs, Preconditions, TargetArgs};
use crate::shapes::{self, CreatedJson};
use crate::{attach, keys};

fn terminal_size() -> (u16, u16) {
    match attach::size() {
        (0, 0) => (24, 80),
        rc => rc,
    }
}

/// The detach key: `flag`, else `detachKey` in defaults.json, else `^\`.
fn detach_key(client: &Client, flag: Option<&str>) -> Result<Option<u8>, ClientError> {
    let defaults = client.registry().defaults()?;
    let file = client.registry().root().join(latch_registry::DEFAULTS_FILE);
    choose_detach_key(flag, defaults.detach_key.as_deref(), &file.display())
}

/// The detach key: `flag`, else `default` (the `detachKey` of the defaults.json
/// named by `file`), else `^\`.
pub(crate) fn choose_detach_key(
    flag: Option<&str>,
    default: Option<&str>,
    file: &dyn std::fmt::Display,
) -> Result<Option<u8>, ClientError> {
    if let Some(k) = flag {
        return keys::parse_detach_key(k).map_err(|e| usage(format!("--detach-key: {e}")));
    }
    match default {
        Some(k) => {
            keys::parse_detach_key(k).map_err(|e| usage(format!("detachKey in {file}: {e}")))
        }
        None => Ok(Some(keys::DEFAULT_DETACH_KEY)),
    }
}

/// The scrollback lines an attach writes first: `flag`, else `attachHistory` from
/// defaults.json, else none; at most the scrollback a session keeps.
pub(crate) fn choose_history(flag: Option<usize>, default: Option<u32>) -> usize {
    flag.unwrap_or_else(|| default.map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX)))
        .min(latch_wire::limits::MAX_SCROLLBACK)
}

/// Whether this process runs inside `session` itself (its environment names it).
fn inside(session: &SessionRef) -> bool {
    use latch_registry::spec::{ENV_INCARNATION, ENV_SESSION_ID};
    std::env::var(ENV_SESSION_ID).is_ok_and(|id| id == session.id.as_str())
        && std::env::var(ENV_INCARNATION).is_ok_and(|inc| inc == session.incarnation.to_string())
}

/// Refuses to attach a session to itself: its output would be fed back into it
/// with no way out (as tmux refuses nesting), unless `force`.
pub(crate) fn refuse_inside(session: &SessionRef, force: bool) -> Result<(), ClientError> {
    if inside(session) && !force {
        return Err(ClientError::Refused(format!(
            "this terminal is session {}'s own: attaching it to itself would feed its \
             output back into it; detach first (or pass --force)",
            session.id
        )));
    }
    Ok(())
}

/// Checks that a receipt can be written at `path` (resolved against the current
/// directory) before anything is created: a temp file is made beside it and
/// removed.
pub(crate) fn prepare_receipt(path: &Path) -> Result<PathBuf, ClientError> {
    let abs = std::path::absolute(path)
        .map_err(|e| usage(format!("--receipt {}: {e}", path.display())))?;
    if abs.is_dir() {
        return Err(usage(format!(
            "--receipt {}: is a directory; nothing was created",
            abs.display()
        )));
    }
    let (file, tmp) = latch_registry::record::create_temp(&abs).map_err(|e| {
        usage(format!(
            "--receipt {}: cannot write there ({e}); nothing was created",
            abs.display()
        ))
    })?;
    drop(file);
    let _ = std::fs::remove_file(tmp);
    Ok(abs)
}

/// Notes on stderr the running sessions other than `id` that carry `name`: a REF
/// of that name is ambiguous while they run (SPEC.md §9.8).
fn note_shared_name(client: &Client, name: &str, id: &SessionId) {
    let Ok(list) = client.list() else { return };
    let others: Vec<String> = list
        .iter()
        .filter_map(|e| match e {
            Entry::Session { record, status }
                if *status == SessionStatus::Running
                    && record.display_name.as_deref() == Some(name)
                    && &record.id != id =>
            {
                Some(record.id.to_string())
            }
            _ => None,
        })
        .collect();
    if !others.is_empty() {
        eprintln!(
            "latch: note: running session {} also carries the name {name:?}; while both \
             run, the name is ambiguous (exit 5): use ids",
            others.join(", ")
        );
    }
}

/// For `new -A`: the running session `id`, if any; an exited or vanished one is
/// an error (remove it first), never silently replaced.
fn running_target(client: &Client, id: &SessionId) -> Result<Option<Target>, ClientError> {
    let Some(record) = client.read_checked(id)? else {
        return Ok(None);
    };
    match latch_client::derive_status(&record) {
        SessionStatus::Running => {
            // Pinned to the incarnation read, with the owner precondition.
            let pinned = format!("{}@{}", record.id, record.incarnation);
            client.resolve(&pinned, None).map(Some)
        }
        SessionStatus::Unknown { reason } => Err(ClientError::unreachable(
            UnreachableCause::Unprovable,
            format!("session {id} exists, but whether it runs cannot be told: {reason}"),
        )),
        _ => Err(ClientError::Exists(id.clone())),
    }
}

/// The created shape for an existing creation (`new -A` joining it).
pub(crate) fn created_json(record: &latch_registry::Record) -> CreatedJson {
    CreatedJson {
        id: record.id.to_string(),
        incarnation: record.incarnation.to_string(),
        daemon_pid: record.daemon.pid,
        child_pid: record.child.pid,
        created_at: record.created_at_ms,
        owner: record.owner.clone(),
    }
}

/// `--no-shell-integration`, else `shellIntegration` in defaults.json, else on
/// (SPEC §4.6).
fn shell_integration(client: &Client, off: bool) -> Result<Integration, ClientError> {
    let on = !off && client.registry().defaults()?.shell_integration != Some(false);
    Ok(if on {
        Integration::On
    } else {
        Integration::Off
    })
}

/// The creation `new`'s arguments ask for, at `size` (rows, columns).
pub(crate) fn new_session(
    client: &Client,
    args: &NewArgs,
    id: Option<SessionId>,
    owner: Option<latch_wire::Owner>,
    size: (u16, u16),
) -> Result<NewSession, ClientError> {
    let mut new = NewSession::default();
    new.id = id;
    new.name = args.name.clone();
    new.command.clone_from(&args.command);
    new.cwd.clone_from(&args.cwd);
    new.env = parse_kv(&args.env, "--env")?;
    new.tags = parse_kv(&args.tags, "--tag")?
        .into_iter()
        .collect::<BTreeMap<_, _>>();
    (new.rows, new.cols) = size;
    new.legacy_policy = match args.legacy {
        Some(p) => LegacyPolicy::from(p),
        None => client.registry().default_legacy_policy()?,
    };
    new.owner = owner;
    new.resume_command = super::resurrect::resume_argv(args.resume_cmd.as_deref())?;
    new.shell_integration = shell_integration(client, args.no_shell_integration)?;
    super::supervise::apply(&args.supervise, client, &mut new)?;
    new.cast = crate::commands::cast::new_spec(args.cast.as_deref(), false)?;
    Ok(new)
}

/// What `new` made: a creation, or (with -A) the running session it joined.
pub(crate) enum Made {
    Created(latch_client::Created),
    Joined(Box<Target>),
}

/// This registry's client for `new`'s arguments: with -A, an existing session is
/// joined only if it is provably OWNER's.
pub(crate) fn new_client(root: Option<&PathBuf>, args: &NewArgs) -> Result<Client, ClientError> {
    let owner = parse_owner(args.owner.as_deref())?;
    Ok(open(root)?
        .with_owner(owner.filter(|_| args.attach_or_create))
        // `new` forks its daemon, without a second start (SPEC §9.6).
        .with_daemon_entry(super::lifecycle::run_daemon))
}

/// Creates the session `new`'s arguments ask for, at `size`, or with -A joins the
/// running one: the one creation step of `new` here and of a create a bridge
/// serves (SPEC.md §12.2).
pub(crate) fn create_or_join(
    client: &Client,
    args: &NewArgs,
    size: (u16, u16),
) -> Result<Made, ClientError> {
    let owner = parse_owner(args.owner.as_deref())?;
    let id = args
        .id
        .as_deref()
        .map(|s| SessionId::new(s).map_err(|e| usage(format!("--id {s:?}: {e}"))))
        .transpose()?;
    let new = new_session(client, args, id.clone(), owner, size)?;
    // -A: join the running session, else create it. Two racing calls both find
    // none; the daemon's creation under the session lock lets exactly one win
    // (SPEC.md §9.6) and the other joins the winner.
    let running = match (&id, args.attach_or_create) {
        (Some(id), true) => running_target(client, id)?,
        _ => None,
    };
    if let Some(t) = running {
        return Ok(Made::Joined(Box::new(t)));
    }
    match client.create(new) {
        Ok(created) => {
            if let Some(name) = &args.name {
                note_shared_name(client, name, &created.id);
            }
            Ok(Made::Created(created))
        }
        Err(ClientError::Exists(id)) if args.attach_or_create => Ok(Made::Joined(Box::new(
            running_target(client, &id)?.ok_or(ClientError::Exists(id))?,
        ))),
        Err(e) => Err(e),
    }
}

pub(crate) fn new(root: Option<&PathBuf>, args: NewArgs, json: bool) -> Result<i32, ClientError> {
    let client = new_client(root, &args)?;
    let key = if args.detached {
        None
    } else {
        detach_key(&client, args.detach_key.as_deref())?
    };
    let receipt = args.receipt.as_deref().map(prepare_receipt).transpose()?;
    let target = match create_or_join(&client, &args, terminal_size())? {
        Made::Created(created) => {
            return created_session(&client, &created, &args, receipt, key, json);
        }
        Made::Joined(t) => *t,
    };
    if let Some(path) = &receipt {
        let created = latch_client::Created::of_record(&target.record);
        client.write_receipt(path, &created)?;
    }
    if args.detached {
        if json {
            shapes::print(&created_json(&target.record))?;
        } else {
            println!("{}", target.session);
        }
        eprintln!("latch: session {} was already running", target.session.id);
        return Ok(exit::OK);
    }
    refuse_inside(&target.session, false)?;
    attach_here(&client, &target.session, key)
}

/// Attaches to a creation of this registry (after `new`).
fn attach_here(client: &Client, session: &SessionRef, key: Option<u8>) -> Result<i32, ClientError> {
    let handled = attach::block_signals()?;
    let here = Location::Here(client);
    let found = here.resolve(&session.to_string(), Some(session.incarnation), None)?;
    attach::interactive(handled, here, &found, false, key, 0)
}

/// After a creation: the receipt, the output, the name note, then attach.
fn created_session(
    client: &Client,
    created: &latch_client::Created,
    args: &NewArgs,
    receipt: Option<PathBuf>,
    key: Option<u8>,
    json: bool,
) -> Result<i32, ClientError> {
    let session = SessionRef::new(created.id.clone(), created.incarnation);
    let print = || -> Result<(), ClientError> {
        if json {
            shapes::print(&CreatedJson::from(created))
        } else {
            println!("{session}");
            Ok(())
        }
    };
    if let Some(path) = &receipt {
        if let Err(e) = client.write_receipt(path, created) {
            // The session exists: say so, with its incarnation, and a code of its own.
            print()?;
            eprintln!(
                "latch: session {session} was created and runs, but its receipt could not be \
                 written: {e}; `latch kill {session}` ends it"
            );
            return Ok(exit::RECEIPT_NOT_WRITTEN);
        }
    }
    if json || args.detached {
        print()?;
    }
    if args.detached {
        return Ok(exit::OK);
    }
    attach_here(client, &session, key)
}

/// The running session used most recently (its terminal's last input or output,
/// else its creation), other than the one this process runs in; says which on
/// stderr.
fn most_recent(client: &Client) -> Result<String, ClientError> {
    let listed = match client.required_owner() {
        Some(o) => client.list_owned(o)?,
        None => client.list()?,
    };
    let mut running: Vec<(u64, latch_registry::Record)> = listed
        .into_iter()
        .filter_map(|e| match e {
            Entry::Session {
                record,
                status: SessionStatus::Running,
            } => {
                let own = SessionRef::new(record.id.clone(), record.incarnation);
                (!inside(&own)).then(|| (last_used_ms(&record), *record))
            }
            _ => None,
        })
        .collect();
    running.sort_by_key(|(used, r)| (std::cmp::Reverse(*used), r.id.clone()));
    let n = running.len();
    let Some((_, record)) = running.into_iter().next() else {
        return Err(ClientError::NotFound(
            "running to attach to; start one with `latch new`".into(),
        ));
    };
    let name = record
        .display_name
        .as_deref()
        .map(|n| format!(" ({n})"))
        .unwrap_or_default();
    if n == 1 {
        eprintln!(
            "latch: attaching to {}{name}, the only running session",
            record.id
        );
    } else {
        eprintln!(
            "latch: attaching to {}{name}, the most recently used of {n} running sessions",
            record.id
        );
    }
    Ok(record.id.to_string())
}

/// When a session was last used: its terminal's last input or output (the PTY's
/// access and modification times, as `w` reads them), else its creation; ms.
fn last_used_ms(record: &latch_registry::Record) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let tty = record
        .tty
        .as_deref()
        .and_then(|t| std::fs::metadata(t).ok())
        .map_or(0, |m| {
            let ms = |s: i64, ns: i64| {
                u64::try_from(s).unwrap_or(0) * 1000 + u64::try_from(ns).unwrap_or(0) / 1_000_000
            };
            ms(m.atime(), m.atime_nsec()).max(ms(m.mtime(), m.mtime_nsec()))
        });
    tty.max(record.created_at_ms)
}

pub(crate) fn attach(
    at: &At,
    reference: Option<&str>,
    pre: &Preconditions,
    read_only: bool,
    detach_key_flag: Option<&str>,
    force: bool,
    history: Option<usize>,
) -> Result<i32, ClientError> {
    let reference = match (reference, at.receipt(pre)?, at.loc().client()) {
        (Some(r), _, _) => r.to_owned(),
        (None, Some(r), _) => r.id.to_string(),
        (None, None, Some(client)) => most_recent(client)?,
        (None, None, None) => return Err(usage("attach with --host needs a REF")),
    };
    let handled = attach::block_signals()?;
    let found = at.resolve_ref(&reference, pre)?;
    // Never this terminal's own session; the defaults of the session's registry
    // for what the flags leave open (SPEC.md §12.3).
    refuse_inside(&found.session, force)?;
    let key = choose_detach_key(
        detach_key_flag,
        found.defaults.detach_key.as_deref(),
        &at.defaults_file(),
    )?;
    let history = choose_history(history, found.defaults.attach_history);
    attach::interactive(handled, at.loc(), &found, read_only, key, history)
}

pub(crate) fn send(
    at: &At,
    target: &TargetArgs,
    text: &[String],
    as_keys: bool,
) -> Result<i32, ClientError> {
    let found = at.resolve(target)?;
    let bytes = input_bytes(text, as_keys);
    if !at.loc().send(&found, &bytes)? {
        eprintln!(
            "latch: session {} ended while the input was being confirmed",
            found.session.id
        );
    }
    Ok(exit::OK)
}

/// `send`'s arguments as bytes: text, or with `as_keys` key names where they are.
pub(crate) fn input_bytes(text: &[String], as_keys: bool) -> Vec<u8> {
    let mut bytes = Vec::new();
    for arg in text {
        match keys::key_bytes(arg).filter(|_| as_keys) {
            Some(b) => bytes.extend_from_slice(&b),
            None => bytes.extend_from_slice(arg.as_bytes()),
        }
    }
    bytes
}

pub(crate) fn resize(
    at: &At,
    target: &TargetArgs,
    rows: u16,
    cols: u16,
) -> Result<i32, ClientError> {
    latch_wire::limits::check_size(rows, cols).map_err(|e| usage(e.to_string()))?;
    let found = at.resolve(target)?;
    at.loc().connect(&found)?.resize(rows, cols)?;
    Ok(exit::OK)
}

pub(crate) use super::peek::{ended_screen, final_text, peek, peek_follow, peek_options};
