//! `--host` and `HOST:ID`: every command on another host (SPEC.md §12). Registry
//! operations run there (`latch bridge` exec) and print what they print; effects
//! through a daemon (attach, peek, send, resize, status, kill) speak HELLO and BIND
//! from here, through the bridge's relay; `ls` merges several hosts.

use std::time::Duration;

use clap::Parser;
use latch_client::{
    exit, AttachMode, Bound, ClientError, KillOutcome, Receipt, SessionStatus, UnreachableCause,
};
use latch_wire::{Incarnation, Owner};
use serde::Deserialize;

use super::{lifecycle, parse_expect, parse_owner, registry_ops, sessions, turns, usage};
use crate::cli::{Cli, Command, MetaOp, Preconditions, ReceiptOp, TargetArgs};
use crate::remote::{self, ConnectRequest, Host, Relay};
use crate::{attach, output, shapes};

/// Where a command goes.
#[derive(Debug)]
pub(crate) struct Route {
    hosts: Vec<Host>,
    /// The REF as given, and without its `HOST:`.
    reference: Option<(String, String)>,
    /// The receipt a host receipt names (SPEC.md §9.10), its host taken out: it
    /// travels in the request, never as a file name.
    receipt: Option<Receipt>,
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
    &route.hosts[0]
}

/// The REF to send, without its `HOST:`.
fn reference(route: &Route, given: &str) -> String {
    match &route.reference {
        Some((g, rest)) if g == given => rest.clone(),
        _ => given.to_owned(),
    }
}

pub(crate) fn run(route: Route, cli: Cli) -> Result<i32, ClientError> {
    let json = cli.json;
    let root = cli
        .root
        .as_ref()
        .map(|p| {
            p.to_str()
                .map(str::to_owned)
                .ok_or_else(|| usage("--root is not UTF-8"))
        })
        .transpose()?;
    let host = one(&route).clone();
    let Some(command) = cli.command else {
        return relay_exec(&route, false);
    };
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
        } => ls(&route.hosts, root, json, &tags, status, owner),
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
            let handled = attach::block_signals()?;
            let new_args = new_args(&route)?;
            let mut relay = remote::connect(
                &host,
                ConnectRequest {
                    root,
                    create: Some(new_args),
                    ..ConnectRequest::default()
                },
            )?;
            if let Some(path) = &receipt {
                if let Some(code) = write_receipt(&relay, &host, path, json)? {
                    return Ok(code);
                }
            }
            if json || args.detached {
                match &relay.target.created {
                    Some(c) if json => println!("{c}"),
                    _ => println!("{}", relay.target.session),
                }
            }
            if args.detached {
                return Ok(exit::OK);
            }
            let key = host_detach_key(&host, args.detach_key.as_deref(), &relay)?;
            let bound = bind(&mut relay, None)?;
            attach::attach_bound(handled, bound, false, key, 0, Some(host.as_str()))
        }
        Command::Attach {
            reference: r,
            pre,
            read_only,
            detach_key,
            force,
            history,
        } => {
            let Some(r) = r.or_else(|| route.receipt.as_ref().map(|r| r.id.to_string())) else {
                return Err(usage("attach with --host needs a REF"));
            };
            let handled = attach::block_signals()?;
            let mut relay = open_relay(&route, root, &reference(&route, &r), &pre, None)?;
            // As locally (SPEC.md §12.3): never this terminal's own session, and the
            // host's defaults for what the flags leave open.
            sessions::refuse_inside(&relay.target.session, force)?;
            let key = host_detach_key(&host, detach_key.as_deref(), &relay)?;
            let history = sessions::choose_history(history, relay.target.defaults.attach_history);
            if !relay.target.status.eq(&SessionStatus::Running) || relay_final(&relay) {
                return show_remote_final(&relay);
            }
            let bound = bind(&mut relay, owner_of(&pre)?)?;
            attach::attach_bound(handled, bound, read_only, key, history, Some(host.as_str()))
        }
        Command::Peek {
            target,
            plain: _,
            ansi,
            full,
            wait,
            timeout,
            follow,
            since,
            raw,
            picture,
        } => {
            if since.is_some() {
                turns::check_flags(raw, json)?;
            }
            // Pictures are drawn here from the CAPTURE the relay brings (SPEC.md §12.3).
            if let Some(format) = picture.format {
                let sink = crate::pictures::Sink::open(format, &picture)?;
                let mut relay = open_target(&route, root, &target, None)?;
                if let Some(screen) = &relay.target.final_screen {
                    return crate::pictures::draw_final(screen, full, &sink);
                }
                let bound = bind(&mut relay, owner_of(&target.pre)?)?;
                return crate::pictures::draw_bound(bound, full, &sink);
            }
            let mut relay = open_target(&route, root.clone(), &target, None)?;
            if relay_final(&relay) {
                return show_remote_final(&relay);
            }
            let plain = !ansi;
            let owner = owner_of(&target.pre)?;
            let mut bound = bind(&mut relay, owner.clone())?;
            if let Some(since) = since {
                return turns::print_since(&mut bound, since, raw, json);
            }
            if follow {
                let attached = bound.attach(0, 0, AttachMode::ReadOnly)?;
                return sessions::follow_attached(attached, &relay.target.session.id, plain);
            }
            let opts = sessions::peek_options(plain, full);
            match wait {
                None => {
                    sessions::print_screen(&bound.peek(opts)?)?;
                    Ok(exit::OK)
                }
                // Scrollback is read only by PEEK: peek through this connection,
                // woken by a read-only attachment through a second relay pinned to
                // the same creation, as a local wait does (SPEC.md §12.3).
                Some(text) if full => {
                    let pinned = relay.target.session.to_string();
                    let mut second = open_relay(&route, root, &pinned, &target.pre, None)?;
                    let wake = bind(&mut second, owner)?
                        .attach(0, 0, AttachMode::ReadOnly)?
                        .reader;
                    let screen = bound.wait_for_text(wake, &text, opts, timeout.0)?;
                    sessions::print_screen(&screen)?;
                    Ok(exit::OK)
                }
                Some(text) => wait_for_text(bound, &text, plain, timeout.0),
            }
        }
        Command::Send {
            target,
            text,
            keys,
            deliver,
        } if deliver.any() => {
            let mut relay = open_target(&route, root.clone(), &target, None)?;
            let owner = owner_of(&target.pre)?;
            let bound = bind(&mut relay, owner.clone())?;
            // The stream through a second relay pinned to the same creation.
            let pinned = relay.target.session.to_string();
            let mut second = open_relay(&route, root, &pinned, &target.pre, None)?;
            let watch = bind(&mut second, owner)?;
            let bytes = sessions::input_bytes(&text, keys);
            super::send::send_over(bound, watch, bytes, &deliver, json)
        }
        Command::Send {
            target, text, keys, ..
        } => {
            let mut relay = open_target(&route, root, &target, None)?;
            let mut bound = bind(&mut relay, owner_of(&target.pre)?)?;
            bound.send(&sessions::input_bytes(&text, keys))?;
            Ok(exit::OK)
        }
        Command::Wait {
            target,
            text,
            idle,
            prompt,
            exit: on_exit,
            after,
            timeout,
        } => {
            let condition = turns::condition(text, idle, prompt, on_exit);
            let mut relay = open_target(&route, root.clone(), &target, None)?;
            if relay_final(&relay) {
                return show_remote_final(&relay);
            }
            let owner = owner_of(&target.pre)?;
            let bound = bind(&mut relay, owner.clone())?;
            // The output before the cut comes through a second relay pinned to the
            // same creation, as a local wait's second connection (SPEC §12.3).
            let pinned = relay.target.session.to_string();
            let second = || {
                let mut r = open_relay(&route, root, &pinned, &target.pre, None)?;
                bind(&mut r, owner)
            };
            let waited = latch_client::wait_bound(bound, second, &condition, after, timeout.0);
            turns::print_waited(&relay.target.session, &condition, waited?, json)
        }
        Command::Cast(args) => {
            let mut relay = open_target(&route, root, &args.target, None)?;
            let mut bound = bind(&mut relay, owner_of(&args.target.pre)?)?;
            crate::commands::cast::run_bound(&mut bound, &args, json)
        }
        // run and commands over the relay, as locally (SPEC §4.7, §12.3).
        Command::Run(args) => {
            let command = super::run::command_line(&args.command);
            let mut relay = open_target(&route, root, &args.target, None)?;
            let bound = bind(&mut relay, owner_of(&args.target.pre)?)?;
            let result = super::run::run_over(bound, &args, &command, json);
            super::run::finish(result, &command, json)
        }
        Command::Commands(args) => {
            let mut relay = open_target(&route, root, &args.target, None)?;
            let mut bound = bind(&mut relay, owner_of(&args.target.pre)?)?;
            super::run::print_commands(&mut bound, args.last, json)
        }
        Command::Resize { target, rows, cols } => {
            latch_wire::limits::check_size(rows, cols).map_err(|e| usage(e.to_string()))?;
            let mut relay = open_target(&route, root, &target, None)?;
            bind(&mut relay, owner_of(&target.pre)?)?.resize(rows, cols)?;
            Ok(exit::OK)
        }
        Command::Status { target } => {
            let mut relay = open_target(&route, root, &target, None)?;
            let t = &relay.target;
            let (record, status) = (t.record.clone(), t.status.clone());
            let daemon = match status {
                SessionStatus::Exited { .. } | SessionStatus::Vanished => None,
                _ => {
                    let mut conn = relay.negotiate()?;
                    let (st, output) = conn.status_full()?;
                    check_daemon(&relay, &st, owner_of(&target.pre)?.as_ref())?;
                    Some((st, output))
                }
            };
            let (reply, output) = match daemon {
                Some((reply, output)) => (Some(reply), output),
                None => (None, None),
            };
            let casts = None;
            registry_ops::print_status(
                &record,
                &status,
                (reply.as_ref(), output.as_ref(), casts),
                json,
            )
        }
        Command::Kill {
            target,
            signal,
            wait,
            timeout,
        } => {
            let wait_for = wait.then_some(timeout.0);
            let root_arg = root.clone();
            let mut relay = match open_target(&route, root, &target, Some(signal)) {
                Ok(relay) => relay,
                // The host answers but its daemon cannot be asked: the host's own
                // latch kills through the program's proven identity (SPEC.md §9.11).
                Err(e) if daemon_unreachable(&e) => {
                    let r = reference(&route, &target.reference);
                    return kill_on_host(
                        &route,
                        root_arg.as_deref(),
                        &r,
                        &target.pre,
                        signal,
                        wait,
                        timeout.0,
                        json,
                    );
                }
                Err(e) => return Err(e),
            };
            let session = relay.target.session.clone();
            let owner = relay.target.record.owner.clone();
            if !relay.target.status.eq(&SessionStatus::Running) && relay_final(&relay) {
                return lifecycle::print_kill(&session, owner, KillOutcome::AlreadyExited, json);
            }
            let outcome = match kill(&mut relay, &target.pre, signal, wait_for) {
                // The daemon could not be asked, or closed before confirming the
                // STOP (the program ended under us, or the daemon died): the host's
                // record tells; if the program still runs, the host's own latch
                // ends it through its proven identity, pinned to this creation.
                Err(e) if daemon_unreachable(&e) => {
                    if exited_on_host(&route, root_arg.as_deref(), &session) {
                        KillOutcome::Killed
                    } else {
                        let pinned = session.to_string();
                        return kill_on_host(
                            &route,
                            root_arg.as_deref(),
                            &pinned,
                            &target.pre,
                            signal,
                            wait,
                            timeout.0,
                            json,
                        );
                    }
                }
                other => other?,
            };
            lifecycle::print_kill(&session, owner, outcome, json)
        }
        Command::Receipt {
            op: ReceiptOp::Verify { .. },
        } if route.receipt.is_some() => {
            // The receipt's contents travel; the file's name stays here.
            let mut args = Vec::new();
            if let Some(r) = root {
                args.extend(["--root".to_owned(), r]);
            }
            if json {
                args.push("--json".into());
            }
            args.extend(["receipt", "verify", "-"].map(str::to_owned));
            let (code, _) = remote::exec(&host, args, route.receipt.clone(), None, None)?;
            Ok(code)
        }
        _ => relay_exec(&route, matches!(command, Command::Meta { .. })),
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
    relay: &Relay,
    host: &Host,
    path: &std::path::Path,
    json: bool,
) -> Result<Option<i32>, ClientError> {
    let session = &relay.target.session;
    let written = match relay.target.receipt.clone() {
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
    match &relay.target.created {
        Some(c) if json => println!("{c}"),
        _ => println!("{session}"),
    }
    eprintln!(
        "latch: session {session} was created on host {host} and runs, but its receipt could          not be written: {e}; `latch kill {host}:{session}` ends it"
    );
    Ok(Some(exit::RECEIPT_NOT_WRITTEN))
}

/// Runs this command's own arguments on the host (SPEC.md §12.2 exec).
/// With `patch`, stdin is a `meta patch`: read (bounded) and checked here, before
/// ssh starts, and sent after the request line.
fn relay_exec(route: &Route, patch: bool) -> Result<i32, ClientError> {
    let args = forwarded_args(route)?;
    let input = if patch {
        Some(registry_ops::read_patch(std::io::stdin())?.into_bytes())
    } else {
        None
    };
    let (code, _) = remote::exec(one(route), args, route.receipt.clone(), input, None)?;
    Ok(code)
}

/// The detach key of an attach on `host`: the flag, else the host's `detachKey`,
/// else `^\`.
fn host_detach_key(
    host: &Host,
    flag: Option<&str>,
    relay: &Relay,
) -> Result<Option<u8>, ClientError> {
    let file = format!("the defaults.json of host {host}");
    sessions::choose_detach_key(flag, relay.target.defaults.detach_key.as_deref(), &file)
}

fn owner_of(pre: &Preconditions) -> Result<Option<Owner>, ClientError> {
    parse_owner(pre.owner.as_deref())
}

fn open_target(
    route: &Route,
    root: Option<String>,
    target: &TargetArgs,
    kill: Option<i32>,
) -> Result<Relay, ClientError> {
    open_relay(
        route,
        root,
        &reference(route, &target.reference),
        &target.pre,
        kill,
    )
}

/// Asks the host's bridge for the REF under the preconditions; `--expect` is sent
/// along and checked here again (BIND checks it a third time, at the daemon).
fn open_relay(
    route: &Route,
    root: Option<String>,
    reference: &str,
    pre: &Preconditions,
    kill: Option<i32>,
) -> Result<Relay, ClientError> {
    let mut expect = parse_expect(pre)?;
    owner_of(pre)?;
    // A host receipt pins the creation (SPEC.md §9.10): its incarnation is the
    // precondition here, at the bridge (with the receipt) and in BIND.
    if let Some(r) = &route.receipt {
        if expect.is_some_and(|w| !w.ct_eq(&r.incarnation)) {
            return Err(usage("--expect and --receipt name different incarnations"));
        }
        expect = Some(r.incarnation);
    }
    let relay = remote::connect(
        one(route),
        ConnectRequest {
            root,
            reference: Some(reference.to_owned()),
            kill,
            expect: expect.map(|e| e.to_string()),
            receipt: route.receipt.clone(),
            ..ConnectRequest::default()
        },
    )?;
    check_expect(&relay, expect.as_ref())?;
    Ok(relay)
}

fn check_expect(relay: &Relay, expect: Option<&Incarnation>) -> Result<(), ClientError> {
    let s = &relay.target.session;
    match expect {
        Some(want) if !want.ct_eq(&s.incarnation) => {
            Err(ClientError::replaced(&s.id, *want, Some(s.incarnation)))
        }
        _ => Ok(()),
    }
}

/// The daemon's STATUS must name the creation resolved, and the owner required.
fn check_daemon(
    relay: &Relay,
    st: &latch_wire::StatusReply,
    owner: Option<&Owner>,
) -> Result<(), ClientError> {
    let s = &relay.target.session;
    if !s.matches(&latch_wire::SessionRef::new(st.id.clone(), st.incarnation)) {
        return Err(ClientError::replaced(
            &s.id,
            s.incarnation,
            Some(st.incarnation),
        ));
    }
    if let Some(want) = owner {
        if st.owner.as_ref() != Some(want) {
            return Err(ClientError::NotOwner {
                id: s.id.clone(),
                expected: want.clone(),
                actual: st.owner.clone(),
            });
        }
    }
    Ok(())
}

/// HELLO, STATUS (with an owner precondition) and BIND through the relay, end to
/// end with the remote daemon (SPEC.md §12.5).
fn bind(relay: &mut Relay, owner: Option<Owner>) -> Result<Bound, ClientError> {
    let mut conn = relay.negotiate()?;
    if owner.is_some() {
        let st = conn.status()?;
        check_daemon(relay, &st, owner.as_ref())?;
    }
    conn.bind(&relay.target.session)
}

/// Whether the bridge found the daemon gone and sent the final screen instead.
fn relay_final(relay: &Relay) -> bool {
    relay.target.final_screen.is_some()
}

/// An ended remote session: its final screen and the program's code (as locally,
/// SPEC.md §9.15), else why it cannot be reached.
fn show_remote_final(relay: &Relay) -> Result<i32, ClientError> {
    let id = &relay.target.session.id;
    let Some(screen) = &relay.target.final_screen else {
        return Err(ClientError::unreachable(
            UnreachableCause::Exited,
            format!("session {id} is {}", relay.target.status),
        ));
    };
    let tty = nix::unistd::isatty(std::io::stdout()).unwrap_or(false);
    sessions::print_screen(if tty { &screen.ansi } else { &screen.plain }.as_bytes())?;
    let (code, signal) = (screen.exit.code, screen.exit.signal);
    eprintln!("{}", attach::ended_line(id, code, signal));
    Ok(attach::program_code(code, signal))
}

/// `peek --wait` through one relay: a read-only attachment, its screen applied to
/// an emulator here, checked after every output (no polling).
fn wait_for_text(
    bound: Bound,
    text: &str,
    plain: bool,
    timeout: Duration,
) -> Result<i32, ClientError> {
    let deadline = std::time::Instant::now() + timeout;
    let attached = bound.attach(0, 0, AttachMode::ReadOnly)?;
    let mut emu = latch_screen::Emulator::new(attached.rows, attached.cols, 0);
    emu.process(&attached.screen);
    let mut reader = attached.reader;
    loop {
        if latch_screen::capture(&mut emu, true, false, usize::MAX).contains(text) {
            let screen = latch_screen::capture(&mut emu, plain, false, usize::MAX);
            sessions::print_screen(screen.as_bytes())?;
            return Ok(exit::OK);
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(ClientError::TimedOut(format!(
                "{text:?} did not appear within {timeout:?}"
            )));
        }
        reader.set_timeout(Some(left))?;
        match reader.next_event() {
            Ok(latch_client::AttachEvent::Output(b)) => emu.process(&b),
            Ok(latch_client::AttachEvent::Geometry { rows, cols }) => {
                emu = latch_screen::Emulator::new(rows, cols, 0);
            }
            Ok(latch_client::AttachEvent::Screen(b)) => emu.process(&b),
            Ok(latch_client::AttachEvent::Cut(_)) => {}
            Ok(latch_client::AttachEvent::Exit(s)) => {
                return Err(ClientError::unreachable(
                    UnreachableCause::Exited,
                    format!("the session ended ({s:?}) before showing {text:?}"),
                ))
            }
            Ok(latch_client::AttachEvent::Error { code, detail }) => {
                return Err(ClientError::Daemon { code, detail })
            }
            Ok(_) => {
                return Err(ClientError::unreachable(
                    UnreachableCause::Closed,
                    "the daemon closed the connection",
                ))
            }
            Err(ClientError::Unreachable {
                cause: UnreachableCause::TimedOut,
                ..
            }) => {}
            Err(e) => return Err(e),
        }
    }
}

/// Whether `e` says the host answered but its session's daemon could not be asked
/// (its socket gone, no answer, every connection slot taken): a case for the
/// host's own kill fallback, not a failure of the host.
fn daemon_unreachable(e: &ClientError) -> bool {
    match e {
        ClientError::Unreachable { cause, .. } => matches!(
            cause,
            UnreachableCause::NotListening | UnreachableCause::TimedOut | UnreachableCause::Closed
        ),
        ClientError::Daemon { code, .. } => matches!(
            code,
            latch_wire::ErrorCode::TooManyConnections | latch_wire::ErrorCode::HandshakeTimeout
        ),
        _ => false,
    }
}

/// Runs `kill` on the host itself for `reference` (pinned to a creation when it is
/// known), with the same preconditions: the host's latch signals the program's
/// proven identity under the session lock when its daemon cannot be asked.
#[allow(clippy::too_many_arguments)]
fn kill_on_host(
    route: &Route,
    root: Option<&str>,
    reference: &str,
    pre: &Preconditions,
    signal: i32,
    wait: bool,
    timeout: Duration,
    json: bool,
) -> Result<i32, ClientError> {
    let mut args = Vec::new();
    if let Some(root) = root {
        args.extend(["--root".to_owned(), root.to_owned()]);
    }
    if json {
        args.push("--json".to_owned());
    }
    args.extend([
        "kill".to_owned(),
        reference.to_owned(),
        "--signal".to_owned(),
        signal.to_string(),
    ]);
    if wait {
        args.extend([
            "--wait".to_owned(),
            "--timeout".to_owned(),
            // Bare seconds: what every latch's --timeout reads.
            timeout.as_secs_f64().to_string(),
        ]);
    }
    if let Some(e) = &pre.expect {
        args.extend(["--expect".to_owned(), e.clone()]);
    }
    if let Some(o) = &pre.owner {
        args.extend(["--owner".to_owned(), o.clone()]);
    }
    let receipt = route.receipt.clone();
    if receipt.is_some() {
        args.extend(["--receipt".to_owned(), "-".to_owned()]);
    }
    let (code, _) = remote::exec(one(route), args, receipt, None, None)?;
    Ok(code)
}

/// Whether the host's record says that exact creation has exited (a relayed
/// `status --json ID@INCARNATION`).
fn exited_on_host(route: &Route, root: Option<&str>, session: &latch_wire::SessionRef) -> bool {
    let mut args = Vec::new();
    if let Some(root) = root {
        args.extend(["--root".to_owned(), root.to_owned()]);
    }
    args.extend([
        "status".to_owned(),
        "--json".to_owned(),
        session.to_string(),
    ]);
    match remote::exec(one(route), args, None, None, Some(remote::Answer::Status)) {
        Ok((code, out)) if code == exit::OK => {
            serde_json::from_slice::<serde_json::Value>(&out).is_ok_and(|v| v["status"] == "exited")
        }
        _ => false,
    }
}

/// kill's STOP, end to end (SPEC.md §5.6, §12.5).
fn kill(
    relay: &mut Relay,
    pre: &Preconditions,
    signal: i32,
    wait: Option<Duration>,
) -> Result<KillOutcome, ClientError> {
    let mut bound = bind(relay, owner_of(pre)?)?;
    match bound.stop(signal) {
        Ok(()) => {}
        Err(ClientError::Daemon {
            code: latch_wire::ErrorCode::Exited,
            ..
        }) => return Ok(KillOutcome::AlreadyExited),
        Err(e) => return Err(e),
    }
    match wait {
        None => Ok(KillOutcome::Signaled),
        Some(t) => Ok(if bound.wait_closed(t)? {
            KillOutcome::Killed
        } else {
            KillOutcome::TimedOut
        }),
    }
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
    if let Some(r) = root {
        args.extend(["--root".to_owned(), r]);
    }
    args.extend(["--json".to_owned(), "ls".to_owned()]);
    for t in tags {
        args.extend(["--tag".to_owned(), t.clone()]);
    }
    if let Some(s) = status {
        args.extend(["--status".to_owned(), s.name().to_owned()]);
    }
    if let Some(o) = owner {
        args.extend(["--owner".to_owned(), o]);
    }
    let answers: Vec<(Host, Result<Vec<serde_json::Value>, ClientError>)> =
        std::thread::scope(|scope| {
            let handles: Vec<_> = hosts
                .iter()
                .map(|h| {
                    let args = args.clone();
                    scope.spawn(move || (h.clone(), ls_one(h, args)))
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

fn ls_one(host: &Host, args: Vec<String>) -> Result<Vec<serde_json::Value>, ClientError> {
    let (code, out) = remote::exec(host, args, None, None, Some(remote::Answer::Ls))?;
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
