//! What runs on another host without a location (SPEC.md §12.2): a create there
//! (`connect` with `create`), and `exec` of the commands remote protocol 2 has no
//! typed request for.

use std::path::PathBuf;

use clap::Parser;
use latch_client::{exit, ClientError, Found};

use super::hosts::Route;
use super::{sessions, usage, At};
use crate::cli::{Cli, Command, NewArgs, Preconditions};
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
    if let Command::New(args) = &command {
        super::supervise::check_remote(&args.supervise)?;
        // The cast file is the host's: this directory means nothing there (SPEC §4.8).
        super::cast::new_spec(args.cast.as_deref(), true)?;
    }
    match command {
        Command::Ls {
            tags,
            status,
            owner,
        } => super::hosts::ls(route.hosts(), root_arg, json, &tags, status, owner),
        Command::Exec { .. }
        | Command::Up(_)
        | Command::Down(_)
        | Command::Completions { .. }
        | Command::Man
        | Command::Daemon { .. }
        | Command::Bridge => Err(usage("this command runs only on this host (no --host)")),
        Command::New(args) => new_there(&route, root, &args, json),
        _ => relay_exec(&route),
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

/// This command's own arguments, to run on the host: `--host` taken out, the REF
/// without its `HOST:`, and a `--receipt FILE` or `receipt verify FILE` as `-` (the
/// receipt travels in the request, SPEC.md §12.2).
pub(crate) fn forwarded_args(route: &Route) -> Result<Vec<String>, ClientError> {
    let mut out = Vec::new();
    let mut args = std::env::args_os().skip(1);
    let mut receipt_next = false;
    let mut after_dashes = false;
    while let Some(a) = args.next() {
        let a = a.into_string().map_err(|a| {
            usage(format!(
                "argument {a:?} is not UTF-8; it cannot go to another host"
            ))
        })?;
        if after_dashes {
            out.push(a);
            continue;
        }
        if a == "--" {
            after_dashes = true;
        } else if a == "--host" {
            args.next();
            continue;
        } else if a.starts_with("--host=") {
            continue;
        } else if route.receipt.is_some() {
            if std::mem::take(&mut receipt_next) {
                out.push("-".into());
                continue;
            } else if a == "--receipt" {
                receipt_next = true;
            } else if a.starts_with("--receipt=") {
                out.push("--receipt=-".into());
                continue;
            }
        }
        out.push(a);
    }
    if let Some((given, rest)) = &route.reference {
        strip_host_of_ref(&mut out, given, rest)?;
    }
    Ok(out)
}

/// Replaces the command's REF in `args` with `rest`: the one argument that clap
/// takes as the REF, never an option's value or a text that happens to be equal
/// (`peek --wait h:x h:x`), so no `HOST:` REF ever reaches the bridge.
fn strip_host_of_ref(args: &mut [String], given: &str, rest: &str) -> Result<(), ClientError> {
    let is_ref = |args: &[String]| {
        let argv = std::iter::once("latch".to_owned()).chain(args.iter().cloned());
        Cli::try_parse_from(argv)
            .ok()
            .is_some_and(|cli| cli.command.as_ref().and_then(Command::reference) == Some(rest))
    };
    for at in 0..args.len() {
        if args[at] != given {
            continue;
        }
        let mut tried = args.to_vec();
        tried[at] = rest.to_owned();
        if is_ref(&tried) {
            args[at] = rest.to_owned();
            return Ok(());
        }
    }
    Err(usage(format!(
        "cannot find the reference {given:?} among the arguments to send to its host"
    )))
}

/// `new`'s arguments for the host's create: as parsed here, detached, less the
/// receipt (written here) and the detach key (used here).
fn create_spec(args: &NewArgs) -> Result<serde_json::Value, ClientError> {
    let mut spec = serde_json::to_value(args).map_err(|e| ClientError::Other(e.to_string()))?;
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

/// Runs this command's own arguments on the host (SPEC.md §12.2 exec): the
/// commands version 2 has no typed request for.
pub(crate) fn relay_exec(route: &Route) -> Result<i32, ClientError> {
    let args = forwarded_args(route)?;
    exec_there(route, args, None)
}

/// `exec` of `args` on the route's host, its output copied to ours.
fn exec_there(
    route: &Route,
    args: Vec<String>,
    input: Option<Vec<u8>>,
) -> Result<i32, ClientError> {
    let op = remote::Op::Exec {
        args,
        receipt: route.receipt.clone(),
    };
    let there = remote::remote(route.host());
    let (_, code, _) = remote::request(&there, op, remote::ANY, input, remote::Sink::Stdout)?;
    Ok(code)
}
