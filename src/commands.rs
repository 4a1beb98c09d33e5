//! Dispatch, and the helpers every command shares; one module per group of
//! commands.

mod at;
pub(crate) mod cast;
pub(crate) mod emit;
pub(crate) mod hosts;
pub(crate) mod lifecycle;
mod peek;
pub(crate) mod registry_ops;
pub(crate) mod resurrect;
pub(crate) mod run;
pub(crate) mod send;
pub(crate) mod sessions;
pub(crate) mod stats;
pub(crate) mod supervise;
pub(crate) mod there;
pub(crate) mod turns;
pub(crate) mod up;

use crate::cli::{
    AttachArgs, CompletionsArgs, DaemonArgs, EventsArgs, ExecArgs, GcArgs, KillArgs, Lazy,
    LegacyDirArgs, LsArgs, MetaArgs, PeekArgs, ReceiptArgs, RenameArgs, ResizeArgs, RestartArgs,
    RmArgs, SendArgs, StatusArgs, TagArgs, WaitArgs,
};
use std::path::{Path, PathBuf};
use std::time::Duration;

use latch_client::{Client, ClientError, Receipt};
use latch_registry::root::resolve_root;
use latch_wire::{Incarnation, Owner};

pub(crate) use at::At;
pub(crate) use there::HostCommand;

use crate::cli::{Cli, Command, MetaOp, Preconditions};

pub(crate) fn usage(msg: impl Into<String>) -> ClientError {
    ClientError::Usage(msg.into())
}

/// Opens the registry (`--root`, else the defaults of SPEC.md §9.1).
pub(crate) fn open(root: Option<&PathBuf>) -> Result<Client, ClientError> {
    let root = resolve_root(root.map(PathBuf::as_path))?;
    let exe = std::env::current_exe().map_err(|e| ClientError::failed("current_exe", e))?;
    Client::open(&root, exe)
}

pub(crate) fn parse_owner(s: Option<&str>) -> Result<Option<Owner>, ClientError> {
    s.map(|s| Owner::new(s).map_err(|e| usage(format!("--owner {s:?}: {e}"))))
        .transpose()
}

/// Opens the registry with the command's owner precondition (SPEC.md §9.11).
pub(crate) fn open_for(root: Option<&PathBuf>, pre: &Preconditions) -> Result<Client, ClientError> {
    let owner = parse_owner(pre.owner.as_deref())?;
    Ok(open(root)?.with_owner(owner))
}

pub(crate) fn parse_expect(pre: &Preconditions) -> Result<Option<Incarnation>, ClientError> {
    pre.expect
        .as_deref()
        .map(|s| Incarnation::parse(s).map_err(|err| usage(format!("--expect {s:?}: {err}"))))
        .transpose()
}

/// The receipt `--receipt FILE` names, checked against this registry. A bridge
/// never reads one: the receipt travels in its request (SPEC.md §12.2).
pub(crate) fn load_receipt(client: &Client, path: &Path) -> Result<Receipt, ClientError> {
    if crate::bridge::active() {
        return Err(usage(
            "a bridge reads no receipt file: the receipt travels in the request",
        ));
    }
    client.load_receipt(path)
}

pub(crate) fn parse_kv(items: &[String], what: &str) -> Result<Vec<(String, String)>, ClientError> {
    items
        .iter()
        .map(|kv| {
            kv.split_once('=')
                .filter(|(k, _)| !k.is_empty())
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .ok_or_else(|| usage(format!("{what} {kv:?} is not K=V")))
        })
        .collect()
}

pub(crate) fn secs(s: f64) -> Result<Duration, ClientError> {
    Duration::try_from_secs_f64(s).map_err(|_| usage(format!("invalid duration {s}")))
}

/// Runs a command that acts on one session at its location (this registry, or
/// the route's host); gives back any other command.
fn located(
    command: Command,
    root: Option<&PathBuf>,
    route: Option<&hosts::Route>,
    json: bool,
) -> Result<Result<i32, ClientError>, Box<Command>> {
    let pre = match &command {
        Command::Peek(Lazy(PeekArgs { target, .. }))
        | Command::Send(Lazy(SendArgs { target, .. }))
        | Command::Wait(Lazy(WaitArgs { target, .. }))
        | Command::Resize(Lazy(ResizeArgs { target, .. }))
        | Command::Status(Lazy(StatusArgs { target }))
        | Command::Kill(Lazy(KillArgs { target, .. })) => target.pre.clone(),
        Command::Cast(Lazy(a)) => a.target.pre.clone(),
        Command::Run(Lazy(a)) => a.target.pre.clone(),
        Command::Commands(Lazy(a)) => a.target.pre.clone(),
        Command::Attach(Lazy(AttachArgs { pre, .. })) => pre.clone(),
        Command::Tag(Lazy(TagArgs { target, .. }))
        | Command::Rename(Lazy(RenameArgs { target, .. }))
        | Command::Rm(Lazy(RmArgs { target, .. }))
        | Command::Restart(Lazy(RestartArgs { target, .. })) => target.pre.clone(),
        Command::Meta(Lazy(MetaArgs {
            op: MetaOp::Patch { pre, .. },
        })) => pre.clone(),
        Command::Receipt(Lazy(ReceiptArgs { .. })) => Preconditions::default(),
        Command::Gc(Lazy(GcArgs { owner, .. })) => Preconditions {
            owner: owner.clone(),
            ..Preconditions::default()
        },
        _ => return Err(Box::new(command)),
    };
    Ok(At::open(root, route, &pre).and_then(|at| act(&at, command, json)))
}

fn act(at: &At, command: Command, json: bool) -> Result<i32, ClientError> {
    match command {
        Command::Cast(Lazy(args)) => cast::run(at, &args, json),
        Command::Attach(Lazy(AttachArgs {
            reference,
            pre,
            read_only,
            detach_key,
            force,
            history,
        })) => sessions::attach(
            at,
            reference.as_deref(),
            &pre,
            read_only,
            detach_key.as_deref(),
            force,
            history,
        ),
        Command::Peek(Lazy(PeekArgs {
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
        })) => {
            if let Some(format) = picture.format {
                return crate::pictures::peek(at, &target, full, format, &picture);
            }
            if follow {
                return sessions::peek_follow(at, &target, !ansi);
            }
            if let Some(since) = since {
                return turns::peek_since(at, &target, since, raw, json);
            }
            sessions::peek(at, &target, !ansi, full, wait.as_deref(), timeout.0, json)
        }
        Command::Send(Lazy(SendArgs {
            target,
            text,
            keys,
            deliver,
        })) if deliver.any() => {
            let bytes = sessions::input_bytes(&text, keys);
            send::send(at, &target, bytes, &deliver, json)
        }
        Command::Send(Lazy(SendArgs {
            target, text, keys, ..
        })) => sessions::send(at, &target, &text, keys),
        Command::Wait(Lazy(WaitArgs {
            target,
            text,
            idle,
            prompt,
            exit,
            after,
            timeout,
        })) => turns::wait(
            at,
            &target,
            &turns::condition(text, idle, prompt, exit),
            after,
            timeout.0,
            json,
        ),
        Command::Run(Lazy(args)) => run::run(at, &args, json),
        Command::Commands(Lazy(args)) => run::commands(at, &args, json),
        Command::Resize(Lazy(ResizeArgs { target, rows, cols })) => {
            sessions::resize(at, &target, rows, cols)
        }
        Command::Status(Lazy(StatusArgs { target })) => registry_ops::status(at, &target, json),
        Command::Kill(Lazy(KillArgs {
            target,
            signal,
            wait,
            timeout,
        })) => lifecycle::kill(at, &target, signal, wait.then_some(timeout.0), json),
        Command::Tag(Lazy(TagArgs { target, tags })) => registry_ops::tag(at, &target, &tags, json),
        Command::Rename(Lazy(RenameArgs { target, name })) => {
            registry_ops::rename(at, &target, name, json)
        }
        Command::Meta(Lazy(MetaArgs { op })) => registry_ops::meta(at, op),
        Command::Receipt(Lazy(ReceiptArgs { op })) => registry_ops::receipt(at, op, json),
        Command::Rm(Lazy(RmArgs { target, force })) => lifecycle::rm(at, &target, force, json),
        Command::Restart(Lazy(RestartArgs { target, grace })) => {
            lifecycle::restart(at, &target, grace.0, json)
        }
        Command::Gc(Lazy(GcArgs {
            dry_run,
            abandoned,
            idle_days,
            grace,
            owner: _,
        })) => {
            let mut opts = latch_client::GcOptions::default();
            opts.dry_run = dry_run;
            opts.abandoned_cwd = abandoned;
            opts.grace = grace.0;
            opts.idle = idle_days.map(|d| secs(d * 86_400.0)).transpose()?;
            lifecycle::gc(at, &opts, json)
        }
        _ => unreachable!("located() passes only the commands that act on one session"),
    }
}

/// `--root` as it travels to another host.
fn root_str(root: Option<&PathBuf>) -> Result<Option<String>, ClientError> {
    root.map(|p| {
        p.to_str()
            .map(str::to_owned)
            .ok_or_else(|| usage("--root is not UTF-8"))
    })
    .transpose()
}

/// Runs the parsed command; returns the exit code.
pub fn run(cli: Cli) -> Result<i32, ClientError> {
    // --host, or a HOST:ID reference: the same command on another host (SPEC.md §12).
    let route = hosts::route(&cli)?;
    let root = cli.root.as_ref();
    let json = cli.json;
    let Some(command) = cli.command else {
        return match route {
            Some(route) => there::run_there(&route, root_str(root)?, json, None),
            None => registry_ops::summary(root, json),
        };
    };
    // The long-lived surfaces act where the route says, through the same
    // location as every command (SPEC §13.8).
    let host = route.as_ref().map(|r| r.host().clone());
    let command = match command {
        Command::Control(Lazy(args)) => return crate::control::run(root, host.as_ref(), &args),
        Command::Mcp(Lazy(args)) => return crate::mcp::run(root, host.as_ref(), &args),
        other => other,
    };
    // The commands that act on one session: written once, wherever it lives.
    let command = match located(command, root, route.as_ref(), json) {
        Ok(code) => return code,
        Err(command) => *command,
    };
    if let Some(route) = route {
        return there::run(route, root, json, command);
    }
    match command {
        Command::Completions(Lazy(CompletionsArgs { shell })) => crate::complete::script(shell),
        Command::Man => crate::complete::man(),
        Command::Daemon(DaemonArgs { root, spec }) => lifecycle::daemon(root, spec),
        Command::Bridge => Ok(crate::bridge::run()),
        Command::New(Lazy(args)) => sessions::new(root, args, json),
        Command::Ls(Lazy(LsArgs {
            tags,
            status,
            owner,
        })) => registry_ops::ls(
            root,
            json,
            &tags,
            status.map(crate::cli::StatusFilter::name),
            owner.as_deref(),
        ),
        Command::Events(Lazy(EventsArgs {
            reference,
            all,
            follow,
            wait,
            timeout,
        })) => {
            let client = open(root)?;
            crate::events::run(
                &client,
                reference.as_deref(),
                all,
                follow,
                json,
                wait.as_deref(),
                timeout.0,
            )
        }
        Command::LegacyDir(Lazy(LegacyDirArgs { dir })) => {
            registry_ops::legacy_dir(root, &dir, json)
        }
        Command::Exec(Lazy(ExecArgs { command })) => lifecycle::exec(&command),
        Command::Resurrect(Lazy(args)) => resurrect::resurrect(root, &args, json),
        Command::Stats(Lazy(args)) => stats::stats(&At::open(root, None, &args.pre)?, &args, json),
        Command::Emit(Lazy(args)) => {
            emit::emit(&At::open(root, None, &args.target.pre)?, &args, json)
        }
        Command::Up(Lazy(args)) => up::up(root, &args, json),
        Command::Down(Lazy(args)) => up::down(root, &args, json),
        // Given back by located() only when they do not act on one session.
        other => unreachable!("{other:?} acts on one session"),
    }
}
