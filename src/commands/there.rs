//! What runs on another host without a location (SPEC.md §12.2): a create there
//! (`connect` with `create`), and `exec` of the commands remote protocol 2 has no
//! typed request for.

use crate::cli::{CompletionsArgs, DaemonArgs, EventsArgs, ExecArgs, Lazy, LegacyDirArgs, LsArgs};
use std::path::PathBuf;

use latch_client::{exit, ClientError, Found};

use super::hosts::Route;
use super::{sessions, usage, At};
use crate::cli::{Command, NewArgs, Preconditions};
use crate::remote::{self, Host};

/// The commands the location does not carry: `ls` over hosts, a create there,
/// and the registry commands the host runs itself.
pub(crate) fn run(
    route: Route,
    root: Option<&PathBuf>,
    json: bool,
    command: Command,
) -> Result<i32, ClientError> {
    let root_arg = root
        .map(|p| {
            p.to_str()
                .map(str::to_owned)
                .ok_or_else(|| usage("--root is not UTF-8"))
        })
        .transpose()?;
    if let Command::New(Lazy(args)) = &command {
        super::supervise::check_remote(&args.supervise)?;
        // The cast file is the host's: this directory means nothing there (SPEC §4.8).
        super::cast::new_spec(args.cast.as_deref(), true)?;
    }
    match command {
        Command::Ls(Lazy(LsArgs {
            tags,
            status,
            owner,
        })) => super::hosts::ls(route.hosts(), root_arg, json, &tags, status, owner),
        Command::Exec(Lazy(ExecArgs { .. }))
        | Command::Up(Lazy(_))
        | Command::Down(Lazy(_))
        | Command::Completions(Lazy(CompletionsArgs { .. }))
        | Command::Man
        | Command::Daemon(DaemonArgs { .. })
        | Command::Bridge => Err(usage("this command runs only on this host (no --host)")),
        Command::New(Lazy(args)) => new_there(&route, root, &args, json),
        other => run_there(&route, root_arg, json, Some(other)),
    }
}

/// `new` on the route's host: created there from the arguments as parsed here
/// (SPEC.md §12.2); its receipt is written here, and its attach is from here.
pub(crate) fn new_there(
    route: &Route,
    root: Option<&PathBuf>,
    args: &NewArgs,
    json: bool,
) -> Result<i32, ClientError> {
    // The receipt is written here, so first checked here (SPEC.md §9.10).
    let receipt = args
        .receipt
        .as_deref()
        .map(sessions::prepare_receipt)
        .transpose()?;
    let handled = crate::attach::block_signals()?;
    let at = At::open(root, Some(route), &Preconditions::default())?;
    let found = at.loc().create_there(create_spec(args)?)?;
    if let Some(path) = &receipt {
        if let Some(code) = write_receipt(&found, route.host(), path, json)? {
            return Ok(code);
        }
    }
    if json || args.detached {
        match &found.created {
            Some(c) if json => println!("{c}"),
            _ => println!("{}", found.session),
        }
    }
    if args.detached {
        return Ok(exit::OK);
    }
    let key = sessions::choose_detach_key(
        args.detach_key.as_deref(),
        found.defaults.detach_key.as_deref(),
        &at.defaults_file(),
    )?;
    crate::attach::interactive(handled, at.loc(), &found, false, key, 0)
}

/// `new`'s arguments for the host's create: as parsed here, detached, less the
/// receipt (written here) and the detach key (used here).
pub(crate) fn create_spec(args: &NewArgs) -> Result<serde_json::Value, ClientError> {
    let mut spec = serde_json::to_value(args).map_err(|e| ClientError::failed("", e))?;
    if let Some(o) = spec.as_object_mut() {
        o.insert("detached".into(), true.into());
        o.insert("receipt".into(), serde_json::Value::Null);
        o.insert("detachKey".into(), serde_json::Value::Null);
    }
    Ok(spec)
}

/// Writes the receipt of the remote creation here, naming its host. If that fails,
/// the session exists: printed as on success, and exit 11 (SPEC.md §9.10).
fn write_receipt(
    found: &Found,
    host: &Host,
    path: &std::path::Path,
    json: bool,
) -> Result<Option<i32>, ClientError> {
    let session = &found.session;
    let written = match found.receipt.clone() {
        Some(mut r) if r.session() == *session => {
            r.host = Some(host.to_string());
            r.write(path)
        }
        _ => Err(ClientError::protocol(
            latch_client::Mismatch::Remote,
            format!("the latch on host {host} sent no receipt for {session}"),
        )),
    };
    let Err(e) = written else {
        return Ok(None);
    };
    match &found.created {
        Some(c) if json => println!("{c}"),
        _ => println!("{session}"),
    }
    eprintln!(
        "latch: session {session} was created on host {host} and runs, but its receipt could          not be written: {e}; `latch kill {host}:{session}` ends it"
    );
    Ok(Some(exit::RECEIPT_NOT_WRITTEN))
}

/// A command the host runs and prints itself (SPEC.md §12.2 `command`), as this
/// CLI parsed it: those without a typed answer of their own.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) enum HostCommand {
    /// Bare `latch`.
    Summary,
    Events {
        reference: Option<String>,
        all: bool,
        follow: bool,
        wait: Option<String>,
        timeout: crate::cli::Dur,
    },
    Stats(super::stats::StatsArgs),
    Emit(super::emit::EmitArgs),
    LegacyDir {
        dir: PathBuf,
    },
    Resurrect(super::resurrect::ResurrectArgs),
}

impl HostCommand {
    /// The command to send, its REF without the route's `HOST:`; `None` for a
    /// command the host does not run for another.
    fn of(command: Option<Command>, route: &Route) -> Option<Self> {
        let strip = |r: String| match &route.reference {
            Some((given, rest)) if *given == r => rest.clone(),
            _ => r,
        };
        Some(match command {
            None => Self::Summary,
            Some(Command::Events(Lazy(EventsArgs {
                reference,
                all,
                follow,
                wait,
                timeout,
            }))) => Self::Events {
                reference: reference.map(strip),
                all,
                follow,
                wait,
                timeout,
            },
            Some(Command::Stats(Lazy(mut a))) => {
                a.reference = a.reference.map(strip);
                a.pre.receipt = None;
                Self::Stats(a)
            }
            Some(Command::Emit(Lazy(mut a))) => {
                a.target.reference = strip(a.target.reference);
                a.target.pre.receipt = None;
                Self::Emit(a)
            }
            Some(Command::LegacyDir(Lazy(LegacyDirArgs { dir }))) => Self::LegacyDir { dir },
            Some(Command::Resurrect(Lazy(a))) => Self::Resurrect(a),
            Some(_) => return None,
        })
    }

    /// Runs it here, in a bridge, for the caller (SPEC.md §12.2).
    pub(crate) fn run(
        self,
        root: Option<&PathBuf>,
        receipt: Option<latch_client::Receipt>,
        json: bool,
    ) -> Result<i32, ClientError> {
        match self {
            Self::Summary => super::registry_ops::summary(root, json),
            Self::Events {
                reference,
                all,
                follow,
                wait,
                timeout,
            } => crate::events::run(
                &super::open(root)?,
                reference.as_deref(),
                all,
                follow,
                json,
                wait.as_deref(),
                timeout.0,
            ),
            Self::Stats(a) => {
                let at = At::served(super::open_for(root, &a.pre)?, receipt);
                super::stats::stats(&at, &a, json)
            }
            Self::Emit(a) => {
                let at = At::served(super::open_for(root, &a.target.pre)?, receipt);
                super::emit::emit(&at, &a, json)
            }
            Self::LegacyDir { dir } => super::registry_ops::legacy_dir(root, &dir, json),
            Self::Resurrect(a) => super::resurrect::resurrect(root, &a, json),
        }
    }
}

/// Runs a command on the route's host, which prints it (SPEC.md §12.2 `command`):
/// its output is copied to ours as it comes, and its exit code is ours.
pub(crate) fn run_there(
    route: &Route,
    root: Option<String>,
    json: bool,
    command: Option<Command>,
) -> Result<i32, ClientError> {
    let Some(command) = HostCommand::of(command, route) else {
        return Err(usage("this command does not run through --host"));
    };
    let op = remote::Op::Command(remote::proto::CommandRequest {
        root,
        json,
        receipt: route.receipt.clone(),
        command: serde_json::to_value(&command).map_err(|e| ClientError::failed("", e))?,
    });
    let there = remote::remote(route.host());
    let (_, code, _) = remote::request(&there, op, remote::V2, None, remote::Sink::Stdout)?;
    Ok(code)
}

/// One host's `ls --json` entries under a request's filters (control's `list`
/// through `--host`, SPEC §13.8), as `ls` asks them.
pub(crate) fn entries_of(
    host: &Host,
    req: remote::proto::LsRequest,
) -> Result<Vec<serde_json::Value>, ClientError> {
    let mut args = Vec::new();
    if let Some(r) = &req.root {
        args.extend(["--root".to_owned(), r.clone()]);
    }
    args.extend(["--json".to_owned(), "ls".to_owned()]);
    for t in &req.tags {
        args.extend(["--tag".to_owned(), t.clone()]);
    }
    if let Some(s) = &req.status {
        args.extend(["--status".to_owned(), s.clone()]);
    }
    if let Some(o) = &req.owner {
        args.extend(["--owner".to_owned(), o.clone()]);
    }
    ls_one(host, req, args)
}

/// One host's `ls --json` entries: the typed request of remote protocol 2, and
/// for an older host (version 1) its `latch --json ls` (SPEC.md §12.2).
pub(crate) fn ls_one(
    host: &Host,
    req: remote::proto::LsRequest,
    args: Vec<String>,
) -> Result<Vec<serde_json::Value>, ClientError> {
    let there = remote::remote(host);
    match remote::call(&there, remote::Op::Ls(req), remote::Answer::Ls, None) {
        Err(ClientError::Protocol {
            found: latch_client::Mismatch::OlderRemote,
            ..
        }) => ls_v1(host, args),
        other => other,
    }
}

fn ls_v1(host: &Host, args: Vec<String>) -> Result<Vec<serde_json::Value>, ClientError> {
    let op = remote::Op::Exec {
        args,
        receipt: None,
    };
    let sink = remote::Sink::Capture(remote::Answer::Ls);
    let (_, code, out) = remote::request(&remote::remote(host), op, remote::ANY, None, sink)?;
    let value: serde_json::Value = serde_json::from_slice(&out).map_err(|e| {
        ClientError::protocol(
            latch_client::Mismatch::Remote,
            format!("host {host}: unreadable ls output ({e})"),
        )
    })?;
    if let Some(err) = value.get("error") {
        let body: crate::shapes::ErrorBodyOwned = serde_json::from_value(err.clone())
            .map_err(|e| ClientError::failed(format!("host {host}"), e))?;
        return Err(body.relayed(host));
    }
    match value {
        serde_json::Value::Array(a) if code == exit::OK => Ok(a),
        _ => Err(ClientError::Other(format!("host {host}: ls exited {code}"))),
    }
}
