//! `--host` and `HOST:ID`: routing to another host (SPEC.md §12). The commands
//! that act on one session are written once against a location (`At`); here are
//! only the route, the create there, the registry commands the host runs
//! (`exec`), and the `ls` merge of several hosts.

use std::path::PathBuf;

use clap::Parser;
use latch_client::{exit, ClientError, Found, Receipt};
use serde::Deserialize;

use super::{sessions, usage, At};
use crate::cli::{Cli, Command, MetaOp, Preconditions, ReceiptOp};
use crate::remote::{self, Host};
use crate::{output, shapes};

/// Where a command goes.
#[derive(Debug)]
pub(crate) struct Route {
    hosts: Vec<Host>,
    /// The REF as given, and without its `HOST:`.
    pub(crate) reference: Option<(String, String)>,
    /// The receipt a host receipt names (SPEC.md §9.10), its host taken out: it
    /// travels in the request, never as a file name.
    pub(crate) receipt: Option<Receipt>,
}

impl Route {
    /// The one host a command other than `ls` goes to.
    pub(crate) fn host(&self) -> &Host {
        &self.hosts[0]
    }
}

/// The REF of a command, if it takes one.
fn reference_of(command: &Command) -> Option<&str> {
    match command {
        Command::Peek { target, .. }
        | Command::Send { target, .. }
        | Command::Wait { target, .. }
        | Command::Resize { target, .. }
        | Command::Status { target }
        | Command::Kill { target, .. }
        | Command::Rm { target, .. }
        | Command::Tag { target, .. }
        | Command::Rename { target, .. }
        | Command::Restart { target, .. } => Some(&target.reference),
        Command::Cast(args) => Some(&args.target.reference),
        Command::Run(a) => Some(&a.target.reference),
        Command::Commands(a) => Some(&a.target.reference),
        Command::Attach { reference, .. } | Command::Events { reference, .. } => {
            reference.as_deref()
        }
        _ => None,
    }
}

/// The receipt file a command acts by (`--receipt`, `receipt verify FILE`).
fn receipt_of(command: &Command) -> Option<&std::path::Path> {
    let pre = match command {
        Command::Peek { target, .. }
        | Command::Send { target, .. }
        | Command::Wait { target, .. }
        | Command::Resize { target, .. }
        | Command::Status { target }
        | Command::Kill { target, .. }
        | Command::Rm { target, .. }
        | Command::Tag { target, .. }
        | Command::Rename { target, .. }
        | Command::Restart { target, .. } => &target.pre,
        Command::Cast(args) => &args.target.pre,
        Command::Run(a) => &a.target.pre,
        Command::Commands(a) => &a.target.pre,
        Command::Attach { pre, .. } => pre,
        Command::Meta {
            op: MetaOp::Patch { pre, .. },
        } => pre,
        Command::Receipt {
            op: ReceiptOp::Verify { file },
        } => return Some(file),
        _ => return None,
    };
    pre.receipt.as_deref()
}

/// `--local`: the command runs here, whatever `$LATCH_HOST` or a REF's colon say;
/// beside a `--host` of its own (not `$LATCH_HOST`'s) it is a usage error.
fn local_only(cli: &Cli) -> Result<Option<Route>, ClientError> {
    let from_env: Vec<String> = std::env::var("LATCH_HOST")
        .map(|v| v.split(',').map(str::to_owned).collect())
        .unwrap_or_default();
    if !cli.host.is_empty() && cli.host != from_env {
        return Err(usage("--local and --host cannot both be given"));
    }
    Ok(None)
}

/// The hosts a command names (`--host`, `$LATCH_HOST`, a `HOST:ID` REF), if any.
/// Never in a bridge, nor for `bridge` itself: a bridge acts on its own host only
/// (SPEC.md §12.2), so it can never be made to open an ssh of its own.
pub(crate) fn route(cli: &Cli) -> Result<Option<Route>, ClientError> {
    if crate::bridge::active() || matches!(cli.command, Some(Command::Bridge)) {
        return Ok(None);
    }
    if cli.local {
        return local_only(cli);
    }
    let mut hosts = cli
        .host
        .iter()
        .filter(|h| !h.is_empty())
        .map(|h| Host::parse(h).map_err(|e| usage(format!("--host: {e}"))))
        .collect::<Result<Vec<_>, _>>()?;
    hosts.dedup();
    // No HOST starts with `.`: `./prod:db` is a local display name (SPEC.md §12.1).
    let given = cli
        .command
        .as_ref()
        .and_then(reference_of)
        .filter(|r| !r.starts_with('.'));
    let mut reference = None;
    if let Some(r) = given {
        if let Some((host, rest)) = remote::split_ref(r)? {
            if !hosts.is_empty() && hosts != [host.clone()] {
                return Err(usage(format!(
                    "reference {r:?} names host {host}, but --host names {}",
                    hosts.iter().map(Host::as_str).collect::<Vec<_>>().join(",")
                )));
            }
            hosts = vec![host];
            reference = Some((r.to_owned(), rest));
        }
    }
    // A receipt naming a host sends the command there; one naming none is local.
    let mut receipt = None;
    if let Some(path) = cli.command.as_ref().and_then(receipt_of) {
        match Receipt::load(path) {
            // Unreadable and local: the local command says so as it always has.
            Err(_) if hosts.is_empty() => {}
            Err(e) => return Err(e),
            Ok(r) => match r.host.as_deref().map(Host::parse).transpose() {
                Err(e) => return Err(usage(format!("receipt {}: {e}", path.display()))),
                Ok(None) if hosts.is_empty() => {}
                Ok(None) => {
                    return Err(usage(format!(
                        "receipt {} is for a session of this host, not of --host {}",
                        path.display(),
                        hosts.iter().map(Host::as_str).collect::<Vec<_>>().join(",")
                    )))
                }
                Ok(Some(h)) if hosts.is_empty() || hosts == [h.clone()] => {
                    hosts = vec![h];
                    let mut r = r;
                    r.host = None;
                    receipt = Some(r);
                }
                Ok(Some(h)) => {
                    return Err(usage(format!(
                        "receipt {} is for a session on host {h}, not on {}",
                        path.display(),
                        hosts.iter().map(Host::as_str).collect::<Vec<_>>().join(",")
                    )))
                }
            },
        }
    }
    if hosts.is_empty() {
        return Ok(None);
    }
    if hosts.len() > 1 && !matches!(cli.command, Some(Command::Ls { .. })) {
        return Err(usage("several hosts: only `ls` merges hosts; name one"));
    }
    Ok(Some(Route {
        hosts,
        reference,
        receipt,
    }))
}

/// This command's own arguments, to run on the host: `--host` taken out, the REF
/// without its `HOST:`, and a `--receipt FILE` or `receipt verify FILE` as `-` (the
/// receipt travels in the request, SPEC.md §12.2).
fn forwarded_args(route: &Route) -> Result<Vec<String>, ClientError> {
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
            .is_some_and(|cli| cli.command.as_ref().and_then(reference_of) == Some(rest))
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

fn one(route: &Route) -> &Host {
    route.host()
}

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
        crate::commands::cast::new_spec(args.cast.as_deref(), true)?;
    }
    match command {
        Command::Ls {
            tags,
            status,
            owner,
        } => ls(&route.hosts, root_arg, json, &tags, status, owner),
        Command::Exec { .. }
        | Command::Up(_)
        | Command::Down(_)
        | Command::Completions { .. }
        | Command::Man
        | Command::Daemon { .. }
        | Command::Bridge => Err(usage("this command runs only on this host (no --host)")),
        Command::New(args) if !args.detached || args.receipt.is_some() => {
            // The receipt is written here, so first checked here (SPEC.md §9.10).
            let receipt = args
                .receipt
                .as_deref()
                .map(sessions::prepare_receipt)
                .transpose()?;
            let handled = crate::attach::block_signals()?;
            let at = At::open(root, Some(&route), &Preconditions::default())?;
            let found = at.loc().create_there(new_args(&route)?)?;
            if let Some(path) = &receipt {
                if let Some(code) = write_receipt(&found, one(&route), path, json)? {
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
        _ => relay_exec(&route),
    }
}

/// `new`'s options as given, for the bridge's `latch --json new -d ARGS`: less the
/// subcommand and the global options before it, `--receipt` (written here) and
/// `-d` (the bridge adds it).
fn new_args(route: &Route) -> Result<Vec<String>, ClientError> {
    let mut args = forwarded_args(route)?;
    let at = args.iter().position(|a| a == "new").unwrap_or(0);
    args.drain(..=at);
    let mut out = Vec::new();
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        if a == "--" {
            out.push(a);
            out.extend(it.by_ref());
        } else if a == "--receipt" {
            it.next();
        } else if a.starts_with("--receipt=") || a == "--detached" {
        } else if a.starts_with('-') && !a.starts_with("--") && a.contains('d') {
            // A cluster of short flags (`-dA`): -d and -A take no value.
            let rest: String = a.chars().filter(|&c| c != 'd').collect();
            if rest != "-" {
                out.push(rest);
            }
        } else {
            out.push(a);
        }
    }
    Ok(out)
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
    let there = remote::remote(one(route));
    let (_, code, _) = remote::request(&there, op, remote::ANY, input, remote::Sink::Stdout)?;
    Ok(code)
}

/// One `ls --json` element as another host's latch printed it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Listed {
    id: String,
    status: String,
    #[serde(default)]
    exit_code: Option<i32>,
    #[serde(default)]
    exit_signal: Option<i32>,
    #[serde(default)]
    created_at: Option<u64>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    command: Vec<String>,
    #[serde(default)]
    error: Option<String>,
}

/// `ls` over hosts, asked in parallel (one ssh each), merged with a `host` column
/// and field; an unreachable host is a row of its own and exit 7 (SPEC.md §12.6).
fn ls(
    hosts: &[Host],
    root: Option<String>,
    json: bool,
    tags: &[String],
    status: Option<crate::cli::StatusFilter>,
    owner: Option<String>,
) -> Result<i32, ClientError> {
    let mut args = Vec::new();
    if let Some(r) = &root {
        args.extend(["--root".to_owned(), r.clone()]);
    }
    args.extend(["--json".to_owned(), "ls".to_owned()]);
    for t in tags {
        args.extend(["--tag".to_owned(), t.clone()]);
    }
    if let Some(s) = status {
        args.extend(["--status".to_owned(), s.name().to_owned()]);
    }
    let req = remote::proto::LsRequest {
        root: root.clone(),
        tags: tags.to_vec(),
        status: status.map(|s| s.name().to_owned()),
        owner: owner.clone(),
    };
    if let Some(o) = owner {
        args.extend(["--owner".to_owned(), o]);
    }
    let answers: Vec<(Host, Result<Vec<serde_json::Value>, ClientError>)> =
        std::thread::scope(|scope| {
            let handles: Vec<_> = hosts
                .iter()
                .map(|h| {
                    let (args, req) = (args.clone(), req.clone());
                    scope.spawn(move || (h.clone(), ls_one(h, req, args)))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("ls thread"))
                .collect()
        });
    // A usage error is the same on every host: report it as such.
    if let Some((_, Err(e))) = answers
        .iter()
        .find(|(_, r)| matches!(r, Err(e) if e.exit_code() == exit::USAGE))
    {
        return Err(ClientError::Usage(e.to_string()));
    }
    // One code for the hosts that failed: theirs if they agree and none answered
    // (a single host's failure is its own), else 7, a degraded merge.
    let failed: Vec<i32> = answers
        .iter()
        .filter_map(|(_, r)| r.as_ref().err().map(ClientError::exit_code))
        .collect();
    let fail_code = match failed.first() {
        Some(&c) if failed.len() == answers.len() && failed.iter().all(|&x| x == c) => c,
        _ => exit::UNREACHABLE,
    };
    let mut code = exit::OK;
    let mut rows = Vec::new();
    let mut table = output::Table::new(&["HOST", "ID", "STATUS", "AGE", "NAME", "COMMAND"]);
    for (host, answer) in answers {
        match answer {
            Ok(entries) => {
                for mut e in entries {
                    let listed: Option<Listed> = serde_json::from_value(e.clone()).ok();
                    if let Some(obj) = e.as_object_mut() {
                        obj.insert("host".into(), host.as_str().into());
                    }
                    if let Some(l) = listed {
                        table.row(vec![
                            host.to_string(),
                            l.id,
                            match (l.status.as_str(), l.exit_code, l.exit_signal) {
                                ("exited", Some(c), _) => format!("exited({c})"),
                                ("exited", None, Some(s)) => format!("killed({s})"),
                                (s, _, _) => s.to_owned(),
                            },
                            l.created_at.map_or("-".into(), output::age),
                            l.name.unwrap_or_else(|| "-".into()),
                            l.error.unwrap_or_else(|| output::shell_join(&l.command)),
                        ]);
                    }
                    rows.push(e);
                }
            }
            Err(e) => {
                eprintln!("latch: {}", output::escape(&e.to_string()));
                code = fail_code;
                let status = if e.exit_code() == exit::UNREACHABLE {
                    "unreachable"
                } else {
                    e.kind()
                };
                table.row(vec![
                    host.to_string(),
                    "-".into(),
                    status.into(),
                    "-".into(),
                    "-".into(),
                    e.to_string(),
                ]);
                rows.push(
                    serde_json::to_value(shapes::HostDownJson {
                        host: host.to_string(),
                        status,
                        error: e.to_string(),
                    })
                    .map_err(|e| ClientError::Other(e.to_string()))?,
                );
            }
        }
    }
    if json {
        shapes::print(&rows)?;
    } else if rows.is_empty() {
        println!("no sessions");
    } else {
        for line in table.render(output::width()) {
            println!("{line}");
        }
    }
    Ok(code)
}

/// One host's `ls --json` entries: the typed request of remote protocol 2, and
/// for an older host (version 1) its `latch --json ls` (SPEC.md §12.2).
fn ls_one(
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
        let body: shapes::ErrorBodyOwned = serde_json::from_value(err.clone())
            .map_err(|e| ClientError::Other(format!("host {host}: {e}")))?;
        return Err(body.relayed(host));
    }
    match value {
        serde_json::Value::Array(a) if code == exit::OK => Ok(a),
        _ => Err(ClientError::Other(format!("host {host}: ls exited {code}"))),
    }
}
