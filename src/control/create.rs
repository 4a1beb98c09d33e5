//! `create` (SPEC §13.4): the creation `latch new` builds, from params by name.

use std::collections::BTreeMap;

use super::methods::{duration, to_value, usage, Reply};
use super::params::*;
use super::rpc::RpcError;
use super::{Failure, Server};
use crate::cli::Dur;
use crate::commands::sessions;
use crate::commands::supervise::{RestartArg, SuperviseArgs};
use crate::shapes::CreatedJson;

fn legacy(name: Option<&str>) -> Result<Option<crate::cli::Legacy>, Failure> {
    use clap::ValueEnum;
    name.map(|n| crate::cli::Legacy::from_str(n, false).map_err(|_| usage(format!("legacy {n:?}"))))
        .transpose()
}

/// `new`'s supervision options (SPEC §9.16), from `restart`, `maxRestarts`,
/// `restartWindow`, `restartDelay`, `withParent` and `rm`, refused where `new`'s
/// parser refuses them.
fn supervise(p: &CreateParams) -> Result<SuperviseArgs, Failure> {
    use clap::ValueEnum;
    let restart = p
        .restart
        .as_deref()
        .map(|r| {
            RestartArg::from_str(r, false)
                .map_err(|_| usage(format!("restart {r:?}: no, on-failure or always")))
        })
        .transpose()?;
    let tuned = p.max_restarts.is_some() || p.restart_window.is_some() || p.restart_delay.is_some();
    if tuned && restart.is_none() {
        return Err(usage(
            "maxRestarts, restartWindow and restartDelay need restart",
        ));
    }
    if p.rm && restart.is_some() {
        return Err(usage("rm cannot be used with restart"));
    }
    let dur = |d: Option<&DurParam>| -> Result<Option<Dur>, Failure> {
        d.map(|d| duration(Some(d), std::time::Duration::ZERO).map(Dur))
            .transpose()
    };
    Ok(SuperviseArgs {
        restart,
        max_restarts: p.max_restarts,
        restart_window: dur(p.restart_window.as_ref())?,
        restart_delay: dur(p.restart_delay.as_ref())?,
        with_parent: p.with_parent.as_ref().map(|w| match w {
            ParentParam::Pid(pid) => pid.to_string(),
            ParentParam::Ref(r) => r.clone(),
        }),
        rm: p.rm,
    })
}

pub(super) fn create(server: &Server, p: Result<CreateParams, Failure>) -> Reply {
    let p = p?;
    let owner = crate::commands::parse_owner(p.owner.as_deref())?;
    let id =
        p.id.as_deref()
            .map(|s| latch_wire::SessionId::new(s).map_err(|e| usage(format!("id {s:?}: {e}"))))
            .transpose()?;
    let kv = |m: &BTreeMap<String, String>| m.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let args = crate::cli::NewArgs {
        detached: true,
        no_shell_integration: p.shell_integration == Some(false),
        attach_or_create: false,
        detach_key: None,
        id: None,
        name: p.name.clone(),
        tags: kv(&p.tags),
        cwd: p.cwd.clone(),
        env: kv(&p.env),
        legacy: legacy(p.legacy.as_deref())?,
        receipt: None,
        owner: None,
        supervise: supervise(&p)?,
        resume_cmd: p.resume_command.clone(),
        cast: p.cast.clone(),
        command: p.command.clone(),
    };
    let size = (p.rows.unwrap_or(24), p.cols.unwrap_or(80));
    latch_wire::limits::check_size(size.0, size.1).map_err(|e| usage(e.to_string()))?;
    let path = p
        .receipt
        .as_deref()
        .map(sessions::prepare_receipt)
        .transpose()?;
    if server.host().is_some() {
        return create_there(server, args, p.id.clone(), p.owner.clone(), path);
    }
    let new = sessions::new_session(&server.base, &args, id, owner, size)?;
    let created = server.base.create(new)?;
    let shape = CreatedJson::from(&created);
    if let Some(path) = path {
        if let Err(e) = server.base.write_receipt(&path, &created) {
            let mut err = RpcError::new(
                i64::from(latch_client::exit::RECEIPT_NOT_WRITTEN),
                format!(
                    "session {} was created and runs, but its receipt could not be written: {e}",
                    created.session()
                ),
            );
            err.data = Some(serde_json::json!({
                "kind": "receipt-not-written",
                "class": "receipt-not-written",
                "exitCode": latch_client::exit::RECEIPT_NOT_WRITTEN,
                "id": shape.id,
                "incarnation": shape.incarnation,
                "created": shape,
            }));
            return Err(err.into());
        }
    }
    to_value(&shape)
}

/// `create` through `--host` (SPEC §13.8): the same arguments, created there by
/// the host's own creation step (SPEC §12.2); the receipt, naming the host, is
/// written here. The terminal is the host's default size.
fn create_there(
    server: &Server,
    mut args: crate::cli::NewArgs,
    id: Option<String>,
    owner: Option<String>,
    receipt: Option<std::path::PathBuf>,
) -> Reply {
    args.id = id;
    args.owner = owner;
    let place = server.place(None)?;
    let spec = crate::commands::there::create_spec(&args)?;
    let found = place.loc().create_there(spec)?;
    if let (Some(path), Some(host)) = (receipt, server.host()) {
        let mut r = found.receipt.clone().ok_or_else(|| {
            latch_client::ClientError::protocol(
                latch_client::Mismatch::Remote,
                format!("host {host} sent no receipt for {}", found.session),
            )
        })?;
        r.host = Some(host.to_string());
        r.write(&path)?;
    }
    match found.created {
        Some(v) => Ok(v),
        None => to_value(&sessions::created_json(&found.record)),
    }
}
