//! Registry operations: ls, status, tag, rename, meta patch, receipt verify.

use crate::commands::At;
use latch_client::{Found, Location};
use std::path::PathBuf;

use latch_client::{exit, Client, ClientError, Entry, MetaPatch, SessionStatus};
use latch_wire::{Owner, SessionId};

use super::{open, parse_kv, parse_owner, usage};
use crate::cli::{MetaOp, ReceiptOp, TargetArgs};
use crate::output;
use crate::shapes::{
    self, DaemonJson, EntryJson, ForegroundJson, LegacyDirJson, PatchedJson, SessionJson,
    ShellJson, StatusJson, VerdictJson,
};

pub(crate) fn ls(
    root: Option<&PathBuf>,
    json: bool,
    tags: &[String],
    status: Option<&str>,
    owner: Option<&str>,
) -> Result<i32, ClientError> {
    let owner = parse_owner(owner)?;
    let want_tags = parse_kv(tags, "--tag")?;
    let client = open(root)?;
    let entries = list_entries(&client, &want_tags, status, owner.as_ref())?;
    if json {
        let arr = ls_entries(&entries);
        shapes::print(&arr)?;
    } else if entries.is_empty() {
        if status.is_some() || !want_tags.is_empty() || owner.is_some() {
            println!("no sessions match");
        } else {
            println!("no sessions (start one with: latch new)");
        }
    } else {
        for line in output::ls_table(&entries).render(output::width()) {
            println!("{line}");
        }
    }
    Ok(exit::OK)
}

/// `ls --json`'s elements, in order; what `/proc` tells of each running session is
/// read on every core, as the records were.
pub(crate) fn ls_entries(entries: &[Entry]) -> Vec<EntryJson> {
    latch_client::parallel::map(entries, latch_client::parallel::PER_THREAD, |e| {
        Some(ls_entry(e))
    })
}

/// One `ls --json` element; a running session adds what `/proc` and its PTY's
/// inode tell, and nothing a daemon would have to be asked (SPEC §10).
fn ls_entry(e: &Entry) -> EntryJson {
    let mut j = EntryJson::from(e);
    if let (EntryJson::Session(s), Entry::Session { record, status }) = (&mut j, e) {
        if matches!(status, latch_client::SessionStatus::Running) {
            s.last_output_at = record.tty.as_deref().and_then(tty_mtime_ms);
            s.foreground = latch_registry::proc::foreground(record.child.pid)
                .map(|(pid, name)| shapes::ForegroundJson { pid, name });
        }
    }
    j
}

/// The mtime of a terminal device, in ms since the epoch: the kernel sets it
/// when the program writes, to 8 s (it keeps the low three bits of the seconds).
fn tty_mtime_ms(path: &str) -> Option<u64> {
    let m = std::fs::metadata(path).ok()?.modified().ok()?;
    let d = m.duration_since(std::time::UNIX_EPOCH).ok()?;
    u64::try_from(d.as_millis()).ok()
}

/// `ls`'s entries: those with every tag of `want_tags`, in `status`, proven
/// `owner`'s (degraded records stay unless another status is asked).
pub(crate) fn list_entries(
    client: &Client,
    want_tags: &[(String, String)],
    status: Option<&str>,
    owner: Option<&Owner>,
) -> Result<Vec<Entry>, ClientError> {
    let listed = match owner {
        Some(o) => client.list_owned(o)?,
        None => client.list()?,
    };
    Ok(listed
        .into_iter()
        .filter(|e| match e {
            Entry::Session { record, status: st } => {
                status.is_none_or(|s| s == latch_client::shown_status(record, st).0)
                    && want_tags.iter().all(|(k, v)| record.tags.get(k) == Some(v))
            }
            // A degraded record cannot prove it lacks a tag: it is shown unless the
            // caller asked for another status.
            Entry::Degraded { .. } => status.is_none_or(|s| s == "degraded"),
        })
        .collect())
}

/// `latch` alone: the running sessions, and how to create and attach. It acts on
/// nothing: a bare command that created or attached by a guess would surprise a
/// script, and a picker needs a terminal.
pub(crate) fn summary(root: Option<&PathBuf>, json: bool) -> Result<i32, ClientError> {
    let client = open(root)?;
    let (running, others): (Vec<Entry>, Vec<Entry>) = client.list()?.into_iter().partition(|e| {
        matches!(
            e,
            Entry::Session {
                status: SessionStatus::Running,
                ..
            }
        )
    });
    if json {
        let arr: Vec<EntryJson> = running.iter().map(EntryJson::from).collect();
        shapes::print(&arr)?;
        return Ok(exit::OK);
    }
    if running.is_empty() {
        println!("no running sessions");
    } else {
        for line in output::ls_table(&running).render(output::width()) {
            println!("{line}");
        }
    }
    if !others.is_empty() {
        println!(
            "({} more: exited, vanished or unreadable; see latch ls)",
            others.len()
        );
    }
    println!();
    println!("  latch new                 start $SHELL in a new session (Ctrl-\\ detaches)");
    println!("  latch new -A --id ID      attach to session ID, creating it if needed");
    println!("  latch attach [REF]        attach (no REF: the most recently used session)");
    println!("  latch ls | latch --help   every session | every command");
    Ok(exit::OK)
}

pub(crate) fn status(at: &At, target: &TargetArgs, json: bool) -> Result<i32, ClientError> {
    let target = at.resolve(target)?;
    let (derived, reply, output, casts) = status_at(at.loc(), &target)?;
    print_status(
        &target.record,
        &derived,
        (reply.as_ref(), output.as_ref(), casts),
        json,
    )
}

/// What `status` reports: the derived status and, for a session not ended, the
/// daemon's STATUS, output facts and recordings.
pub(crate) type StatusParts = (
    SessionStatus,
    Option<latch_wire::StatusReply>,
    Option<latch_wire::OutputFacts>,
    Option<Vec<crate::commands::cast::CastJson>>,
);

/// [`StatusParts`] of one resolved session, wherever it lives.
pub(crate) fn status_at(loc: Location<'_>, target: &Found) -> Result<StatusParts, ClientError> {
    let derived = target.status.clone();
    // An ended session (exited, or its daemon vanished) is reported from its
    // record, with how to remove it; only a running one is asked (STATUS is a
    // query, legal before BIND and while the session drains), and the daemon must
    // be the creation resolved.
    let daemon = match derived {
        SessionStatus::Exited { .. } | SessionStatus::Vanished => None,
        _ => Some(loc.status_full(target)?),
    };
    let (reply, output) = match daemon {
        Some((reply, output)) => (Some(reply), output),
        None => (None, None),
    };
    // Recordings (SPEC §4.8), from a daemon of version 3 that still runs.
    let casts = match &output {
        Some(_) => loc
            .connect(target)
            .ok()
            .and_then(|mut b| crate::commands::cast::casts_of(&mut b)),
        None => None,
    };
    Ok((derived, reply, output, casts))
}

/// Prints `status` from a record, its derived status and (when asked) the daemon's
/// STATUS.
pub(crate) fn print_status(
    r: &latch_registry::Record,
    derived: &SessionStatus,
    (daemon, output, casts): (
        Option<&latch_wire::StatusReply>,
        Option<&latch_wire::OutputFacts>,
        Option<Vec<crate::commands::cast::CastJson>>,
    ),
    json: bool,
) -> Result<i32, ClientError> {
    let shape = status_json(r, derived, (daemon, output, casts));
    if json {
        shapes::print(&shape)?;
        return Ok(exit::OK);
    }
    let StatusJson {
        hint,
        foreground,
        casts,
        ..
    } = shape;
    let status = match daemon.and_then(|s| s.exit) {
        // The daemon saw the program end and is finishing.
        Some(e) => SessionStatus::Exited {
            code: e.code,
            signal: e.signal,
        }
        .to_string(),
        None if *derived == SessionStatus::Vanished
            && latch_registry::reboot::died_with_machine(r) =>
        {
            format!(
                "vanished (reboot: its machine restarted since; `latch resurrect {}` brings it back)",
                r.id
            )
        }
        None => derived.to_string(),
    };
    // Values are escaped for a terminal (SPEC §10): a command, a name or a cwd may
    // hold control characters.
    let field = |k: &str, v: &str| println!("{:<13}{}", format!("{k}:"), output::escape(v));
    field("id", r.id.as_str());
    field("incarnation", &r.incarnation.to_string());
    field("name", r.display_name.as_deref().unwrap_or("-"));
    let status = match latch_client::shown_status(r, derived) {
        (shown, Some(why)) if daemon.is_none() => format!("{shown} ({})", why.as_str()),
        _ => status,
    };
    field("status", &status);
    field("command", &output::shell_join(&r.command));
    field("cwd", &r.cwd);
    for c in casts.unwrap_or_default() {
        field("recording", &format!("{} ({} bytes)", c.file, c.bytes));
    }
    if !r.tags.is_empty() {
        let tags: Vec<String> = r.tags.iter().map(|(k, v)| format!("{k}={v}")).collect();
        field("tags", &tags.join(" "));
    }
    field(
        "created",
        &format!(
            "{} ({} ago)",
            output::rfc3339_local(r.created_at_ms),
            output::age(r.created_at_ms)
        ),
    );
    if let Some(s) = &daemon {
        field("size", &format!("{} cols × {} rows", s.cols, s.rows));
        field(
            "clients",
            &format!(
                "{} writer{}, {} reader{}",
                s.writers,
                if s.writers == 1 { "" } else { "s" },
                s.readers,
                if s.readers == 1 { "" } else { "s" }
            ),
        );
    }
    field(
        "pids",
        &format!("daemon {}, program {}", r.daemon.pid, r.child.pid),
    );
    if let Some(o) = output {
        field("output", &format!("{} bytes", o.output_cursor));
        let shell = &o.shell;
        let mut line = shell.state.as_str().to_owned();
        if let Some(c) = &shell.command {
            line.push_str(&format!(": {c}"));
        }
        if let Some(code) = shell.last_exit {
            line.push_str(&format!(" (last exit {code})"));
        }
        field("shell", &line);
        if let Some(cwd) = &shell.cwd {
            field("shell cwd", cwd);
        }
    }
    if let Some(fg) = &foreground {
        field(
            "foreground",
            &format!("{} ({})", fg.pid, fg.name.as_deref().unwrap_or("?")),
        );
    }
    field("legacy", r.legacy_policy.as_str());
    field("owner", r.owner.as_ref().map_or("-", Owner::as_str));
    if let Some(h) = &hint {
        field("hint", &format!("`{h}` removes it"));
    }
    Ok(exit::OK)
}

/// `status --json`'s shape.
pub(crate) fn status_json(
    r: &latch_registry::Record,
    derived: &SessionStatus,
    (daemon, output, casts): (
        Option<&latch_wire::StatusReply>,
        Option<&latch_wire::OutputFacts>,
        Option<Vec<crate::commands::cast::CastJson>>,
    ),
) -> StatusJson {
    // The terminal's foreground process group (SPEC §10), from /proc, while the
    // daemon answers for the program.
    let foreground = daemon
        .filter(|s| s.exit.is_none())
        .and_then(|s| latch_registry::proc::foreground(s.child_pid))
        .map(|(pid, name)| ForegroundJson { pid, name });
    StatusJson {
        session: SessionJson::new(r, derived),
        daemon: daemon.map(DaemonJson::from),
        hint: daemon.is_none().then(|| format!("latch rm {}", r.id)),
        output_cursor: output.map(|o| o.output_cursor),
        last_output_at: output.map(|o| o.last_output_ms),
        shell: output.map(|o| ShellJson::from(&o.shell)),
        foreground,
        casts,
    }
}

pub(crate) fn tag(
    at: &At,
    target: &TargetArgs,
    tags: &[String],
    json: bool,
) -> Result<i32, ClientError> {
    let patch = tag_patch(parse_kv(tags, "tag")?)?;
    patched(at, target, &patch, json)
}

/// `tag`'s patch: `k=v` sets, `k=` deletes.
pub(crate) fn tag_patch(tags: Vec<(String, String)>) -> Result<MetaPatch, ClientError> {
    let mut patch = MetaPatch::default();
    for (k, v) in tags {
        latch_client::validate_tag(&k, Some(&v))?;
        patch.tags.insert(k, (!v.is_empty()).then_some(v));
    }
    Ok(patch)
}

/// `rename`'s patch.
pub(crate) fn rename_patch(name: String) -> Result<MetaPatch, ClientError> {
    latch_client::validate_display_name(&name).map_err(|e| usage(e.to_string()))?;
    Ok(MetaPatch {
        display_name: Some(Some(name)),
        ..MetaPatch::default()
    })
}

pub(crate) fn rename(
    at: &At,
    target: &TargetArgs,
    name: String,
    json: bool,
) -> Result<i32, ClientError> {
    let patch = rename_patch(name)?;
    patched(at, target, &patch, json)
}

/// A patch of the target, wherever it lives: the resolved incarnation is always
/// the precondition, so a replacement that slips in after resolution is refused
/// under the lock (exit 4).
fn patched(
    at: &At,
    target: &TargetArgs,
    patch: &MetaPatch,
    json: bool,
) -> Result<i32, ClientError> {
    let done = at.patch(&target.reference, &target.pre, patch, false)?;
    let id = &done.record.id;
    if json {
        print_patched(&done)?;
    } else if done.changed.is_empty() {
        println!("{id}: unchanged");
    } else {
        println!("{id}: changed {}", output::escape(&done.changed.join(", ")));
    }
    Ok(exit::OK)
}

fn print_patched(done: &latch_client::Patched) -> Result<(), ClientError> {
    shapes::print(&patched_json(done))
}

/// The patched shape of SPEC §10.
pub(crate) fn patched_json(done: &latch_client::Patched) -> PatchedJson {
    let status = latch_client::derive_status(&done.record);
    PatchedJson {
        changed: done.changed.clone(),
        metadata: SessionJson::new(&done.record, &status),
    }
}

/// The most `meta patch` reads from stdin (SPEC.md §10): a patch is one small JSON
/// object, and more is refused before anything is parsed or written.
pub(crate) const PATCH_MAX_BYTES: usize = 64 * 1024;

/// Reads a patch of at most [`PATCH_MAX_BYTES`] (a usage error beyond, exit 2),
/// without ever holding more than one byte over the bound.
pub(crate) fn read_patch(from: impl std::io::Read) -> Result<String, ClientError> {
    use std::io::Read;
    let mut bytes = Vec::new();
    from.take(PATCH_MAX_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| usage(format!("reading the patch from stdin: {e}")))?;
    if bytes.len() > PATCH_MAX_BYTES {
        return Err(usage(format!(
            "the patch on stdin is over its bound of {PATCH_MAX_BYTES} bytes; nothing was changed"
        )));
    }
    String::from_utf8(bytes).map_err(|e| usage(format!("the patch is not UTF-8: {e}")))
}

/// `meta patch --id ID` (SPEC.md §10): an exact id, the patch read (bounded)
/// from stdin here, wherever the session lives.
pub(crate) fn meta(at: &At, op: MetaOp) -> Result<i32, ClientError> {
    let MetaOp::Patch { id, pre } = op;
    let id = SessionId::new(at.reference(id.as_str())).map_err(|e| {
        usage(format!(
            "--id {id:?}: {e} (meta patch takes exact ids only)"
        ))
    })?;
    let text = read_patch(std::io::stdin())?;
    let patch = MetaPatch::from_json(&text)?;
    let done = at.patch(id.as_str(), &pre, &patch, true)?;
    print_patched(&done)?;
    Ok(exit::OK)
}

/// `receipt verify FILE` (SPEC.md §9.10) in the receipt's registry: this one, or
/// the host a host receipt names (its contents travel, never its file name).
pub(crate) fn receipt(at: &At, op: ReceiptOp, json: bool) -> Result<i32, ClientError> {
    let ReceiptOp::Verify { file } = op;
    let (verdict, receipt, detail) = match (at.host_receipt(), at.loc().client()) {
        (Some(r), _) => {
            let v = at.loc().verify(r.clone())?;
            (v.verdict, v.receipt, v.detail)
        }
        (None, Some(client)) => client.verify_receipt(&file),
        (None, None) => return Err(usage("receipt verify through a host needs a host receipt")),
    };
    if json {
        shapes::print(&verdict_json(verdict, receipt.as_ref(), detail))?;
    } else {
        println!("{}: {}", verdict.name(), output::escape(&detail));
    }
    Ok(verdict.exit_code())
}

/// `receipt verify --json`'s shape.
pub(crate) fn verdict_json(
    verdict: latch_client::Verdict,
    receipt: Option<&latch_client::Receipt>,
    detail: String,
) -> VerdictJson {
    VerdictJson {
        verdict: verdict.name(),
        detail,
        id: receipt.map(|r| r.id.to_string()),
        incarnation: receipt.map(|r| r.incarnation.to_string()),
        owner: receipt.and_then(|r| r.owner.clone()),
    }
}

/// `latch legacy-dir DIR` (SPEC.md §7).
pub(crate) fn legacy_dir(
    root: Option<&PathBuf>,
    dir: &std::path::Path,
    json: bool,
) -> Result<i32, ClientError> {
    let (dir, ids) = crate::legacy_dir::refresh(&open(root)?, dir)?;
    if json {
        shapes::print(&LegacyDirJson {
            dir: dir.clone(),
            sessions: ids,
        })?;
    } else {
        println!(
            "{}: {} session(s) {}",
            dir.display(),
            ids.len(),
            ids.join(" ")
        );
        println!("use it with: PTY_ROOT={} pty list", dir.display());
    }
    Ok(exit::OK)
}
