//! Registry operations: ls, status, tag, rename, meta patch, receipt verify.

use std::path::PathBuf;

use latch_client::{exit, Client, ClientError, Entry, MetaPatch, SessionStatus, Target};
use latch_wire::{Owner, SessionId};

use super::{open, open_for, open_target, parse_expect, parse_kv, parse_owner, usage};
use crate::cli::{MetaOp, ReceiptOp, TargetArgs};
use crate::output;
use crate::shapes::{
    self, DaemonJson, EntryJson, LegacyDirJson, PatchedJson, SessionJson, StatusJson, VerdictJson,
};

pub(crate) fn ls(
    root: Option<&PathBuf>,
    json: bool,
    tags: &[String],
    status: Option<&str>,
    owner: Option<&str>,
) -> Result<i32, ClientError> {
    let owner = parse_owner(owner)?;
    if let Some(s) = status {
        if !["running", "exited", "vanished", "unknown", "degraded"].contains(&s) {
            return Err(usage(format!(
                "--status {s:?}: expected running, exited, vanished, unknown or degraded"
            )));
        }
    }
    let want_tags = parse_kv(tags, "--tag")?;
    let client = open(root)?;
    let listed = match &owner {
        Some(o) => client.list_owned(o)?,
        None => client.list()?,
    };
    let entries: Vec<Entry> = listed
        .into_iter()
        .filter(|e| match e {
            Entry::Session { record, status: st } => {
                status.is_none_or(|s| s == st.name())
                    && want_tags.iter().all(|(k, v)| record.tags.get(k) == Some(v))
            }
            // A degraded record cannot prove it lacks a tag: it is shown unless the
            // caller asked for another status.
            Entry::Degraded { .. } => status.is_none_or(|s| s == "degraded"),
        })
        .collect();
    if json {
        let arr: Vec<EntryJson> = entries.iter().map(EntryJson::from).collect();
        shapes::print(&arr)?;
    } else {
        for e in &entries {
            println!("{}", output::entry_line(e));
        }
    }
    Ok(exit::OK)
}

pub(crate) fn status(
    root: Option<&PathBuf>,
    target: &TargetArgs,
    json: bool,
) -> Result<i32, ClientError> {
    let (client, target) = open_target(root, target)?;
    let derived = latch_client::derive_status(&target.record);
    if let SessionStatus::Exited { .. } = derived {
        if json {
            shapes::print(&SessionJson::new(&target.record, &derived))?;
        } else {
            println!(
                "{}@{}: {}",
                target.session.id,
                target.session.incarnation,
                output::entry_line(&Entry::Session {
                    record: Box::new(target.record.clone()),
                    status: derived.clone()
                })
            );
        }
        return Ok(exit::OK);
    }
    // STATUS is a query, legal before BIND (and while the session drains): ask it
    // unbound and check that the daemon is the creation we resolved.
    let s = client.status_of(&target.session)?;
    if json {
        shapes::print(&StatusJson {
            session: SessionJson::new(&target.record, &derived),
            daemon: Some(DaemonJson::from(&s)),
        })?;
    } else {
        println!("id:          {}", s.id);
        println!("incarnation: {}", s.incarnation);
        println!(
            "name:        {}",
            target.record.display_name.as_deref().unwrap_or("-")
        );
        println!(
            "status:      {}",
            if s.exit.is_some() {
                "exited"
            } else {
                "running"
            }
        );
        println!("command:     {}", target.record.command.join(" "));
        println!("size:        {}x{}", s.rows, s.cols);
        println!("clients:     {} writers, {} readers", s.writers, s.readers);
        println!(
            "pids:        daemon {}, program {}",
            s.daemon_pid, s.child_pid
        );
        println!("legacy:      {}", s.legacy_policy.as_str());
        println!(
            "owner:       {}",
            s.owner.as_ref().map_or("-", Owner::as_str)
        );
    }
    Ok(exit::OK)
}

pub(crate) fn tag(
    root: Option<&PathBuf>,
    target: &TargetArgs,
    tags: &[String],
    json: bool,
) -> Result<i32, ClientError> {
    let (client, target) = open_target(root, target)?;
    let mut patch = MetaPatch::default();
    for (k, v) in parse_kv(tags, "tag")? {
        latch_client::meta::validate_tag(&k, Some(&v))?;
        patch.tags.insert(k, (!v.is_empty()).then_some(v));
    }
    patched(&client, &target, &patch, json)
}

pub(crate) fn rename(
    root: Option<&PathBuf>,
    target: &TargetArgs,
    name: String,
    json: bool,
) -> Result<i32, ClientError> {
    latch_client::validate_display_name(&name).map_err(|e| usage(e.to_string()))?;
    let (client, target) = open_target(root, target)?;
    let patch = MetaPatch {
        display_name: Some(Some(name)),
        ..MetaPatch::default()
    };
    patched(&client, &target, &patch, json)
}

fn patched(
    client: &Client,
    target: &Target,
    patch: &MetaPatch,
    json: bool,
) -> Result<i32, ClientError> {
    // The resolved incarnation is always the precondition: a replacement that slips
    // in after resolution is refused under the lock (exit 4).
    let done = client.patch(&target.session.id, Some(&target.session.incarnation), patch)?;
    if json {
        print_patched(&done)?;
    } else if done.changed.is_empty() {
        println!("{}: unchanged", target.session.id);
    } else {
        println!("{}: changed {}", target.session.id, done.changed.join(", "));
    }
    Ok(exit::OK)
}

fn print_patched(done: &latch_client::Patched) -> Result<(), ClientError> {
    let status = latch_client::derive_status(&done.record);
    shapes::print(&PatchedJson {
        changed: done.changed.clone(),
        metadata: SessionJson::new(&done.record, &status),
    })
}

pub(crate) fn meta(root: Option<&PathBuf>, op: MetaOp) -> Result<i32, ClientError> {
    let MetaOp::Patch { id, pre } = op;
    let id = SessionId::new(id.as_str()).map_err(|e| {
        usage(format!(
            "--id {id:?}: {e} (meta patch takes exact ids only)"
        ))
    })?;
    let mut text = String::new();
    std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
        .map_err(|e| usage(format!("reading the patch from stdin: {e}")))?;
    let patch = MetaPatch::from_json(&text)?;
    let client = open_for(root, &pre)?;
    let mut want = parse_expect(&pre)?;
    if let Some(path) = &pre.receipt {
        let r = client.load_receipt(path)?;
        if r.id != id || want.is_some_and(|w| !w.ct_eq(&r.incarnation)) {
            return Err(usage("the receipt names another session or incarnation"));
        }
        want = Some(r.incarnation);
    }
    let done = client.patch(&id, want.as_ref(), &patch)?;
    print_patched(&done)?;
    Ok(exit::OK)
}

pub(crate) fn receipt(
    root: Option<&PathBuf>,
    op: ReceiptOp,
    json: bool,
) -> Result<i32, ClientError> {
    let ReceiptOp::Verify { file } = op;
    let client = open(root)?;
    let (verdict, receipt, detail) = client.verify_receipt(&file);
    if json {
        shapes::print(&VerdictJson {
            verdict: verdict.name(),
            detail,
            id: receipt.as_ref().map(|r| r.id.to_string()),
            incarnation: receipt.as_ref().map(|r| r.incarnation.to_string()),
            owner: receipt.as_ref().and_then(|r| r.owner.clone()),
        })?;
    } else {
        println!("{}: {detail}", verdict.name());
    }
    Ok(verdict.exit_code())
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
