//! Lifecycle: kill, rm, restart, gc, exec, and the hidden daemon entry point.

use crate::commands::At;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use latch_client::{exit, Client, ClientError, KillOutcome};

use super::usage;
use crate::cli::TargetArgs;
use crate::output;
use crate::shapes::{self, ActionJson, CreatedJson, RestartedJson};

/// `kill` (SPEC.md §9.11), wherever the session lives: `kill_requested` recorded
/// as it resolves, the STOP end to end, the fallback through the program's proven
/// identity where its registry is.
pub(crate) fn kill(
    at: &At,
    target: &TargetArgs,
    sig: i32,
    wait: Option<Duration>,
    json: bool,
) -> Result<i32, ClientError> {
    let found = at.resolve_for_kill(target, sig)?;
    let outcome = at.loc().kill(&found, sig, wait)?;
    print_kill(&found.session, found.record.owner.clone(), outcome, json)
}

/// Prints a kill's outcome; `timed-out` is exit 6 (SPEC.md §9.11).
pub(crate) fn print_kill(
    session: &latch_wire::SessionRef,
    owner: Option<latch_wire::Owner>,
    outcome: KillOutcome,
    json: bool,
) -> Result<i32, ClientError> {
    let name = kill_outcome(outcome);
    if json {
        shapes::print(&action_json(session, owner, name))?;
    } else {
        println!("{}: {name}", session.id);
    }
    Ok(if outcome == KillOutcome::TimedOut {
        exit::BUSY
    } else {
        exit::OK
    })
}

/// A kill's outcome, as SPEC §10 names it.
pub(crate) fn kill_outcome(outcome: KillOutcome) -> &'static str {
    match outcome {
        KillOutcome::Signaled => "signaled",
        KillOutcome::Killed => "killed",
        KillOutcome::AlreadyExited => "already-exited",
        KillOutcome::TimedOut => "timed-out",
    }
}

/// The action shape of SPEC §10.
pub(crate) fn action_json(
    session: &latch_wire::SessionRef,
    owner: Option<latch_wire::Owner>,
    outcome: &'static str,
) -> ActionJson {
    ActionJson {
        id: session.id.to_string(),
        incarnation: session.incarnation.to_string(),
        owner,
        outcome,
    }
}

pub(crate) fn rm(
    at: &At,
    target: &TargetArgs,
    force: bool,
    json: bool,
) -> Result<i32, ClientError> {
    let (session, owner) = at.remove(target, force)?;
    if json {
        shapes::print(&action_json(&session, owner, "removed"))?;
    } else {
        println!("{}: removed", session.id);
    }
    Ok(exit::OK)
}

pub(crate) fn restart(
    at: &At,
    target: &TargetArgs,
    grace: Duration,
    json: bool,
) -> Result<i32, ClientError> {
    let (previous, created) = at.restart(target, grace)?;
    if json {
        shapes::print(&RestartedJson {
            created: CreatedJson::from(&created),
            previous_incarnation: previous.incarnation.to_string(),
        })?;
    } else {
        println!("{}@{}", created.id, created.incarnation);
    }
    Ok(exit::OK)
}

/// gc (SPEC.md §9.12) in the location's registry.
pub(crate) fn gc(at: &At, opts: &latch_client::GcOptions, json: bool) -> Result<i32, ClientError> {
    let reports = at.loc().gc(opts)?;
    if json {
        shapes::print(&reports)?;
    } else if reports.is_empty() {
        println!("nothing to clean up");
    } else {
        let mut t = output::Table::new(&["ID", "OBSERVED", "ACTION", "REASON"]);
        for r in &reports {
            t.row(vec![
                r.id.clone(),
                r.observed.clone(),
                r.action.to_string(),
                r.reason
                    .as_ref()
                    .map_or_else(|| "-".into(), ToString::to_string),
            ]);
        }
        for line in t.render(output::width()) {
            println!("{line}");
        }
    }
    Ok(exit::OK)
}

pub(crate) fn exec(command: &[String]) -> Result<i32, ClientError> {
    let env: BTreeMap<String, String> = std::env::vars().collect();
    Client::exec_update(&env, command)?;
    use std::os::unix::process::CommandExt;
    let err = std::process::Command::new(&command[0])
        .args(&command[1..])
        .exec();
    Err(ClientError::Other(format!("exec {}: {err}", command[0])))
}

pub(crate) fn daemon(root: PathBuf, spec: Option<String>) -> Result<i32, ClientError> {
    let spec = match spec {
        Some(s) => s,
        None => {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
                .map_err(|e| usage(format!("daemon spec on stdin: {e}")))?;
            s
        }
    };
    let spec: latch_registry::CreateSpec =
        serde_json::from_str(&spec).map_err(|e| usage(format!("daemon spec: {e}")))?;
    Ok(run_daemon(root, spec))
}

/// The daemon's work once it has its spec: the `latch daemon` entry's, after reading
/// it from stdin, and a forked `new`'s, with the spec in memory (SPEC §9.6). In a
/// new session already; returns the exit code of this process, which the caller
/// exits with.
pub(crate) fn run_daemon(root: PathBuf, spec: latch_registry::CreateSpec) -> i32 {
    // From here on stdin is /dev/null, as the daemon expects.
    match std::fs::File::open("/dev/null") {
        Ok(null) => {
            if let Err(e) = nix::unistd::dup2_stdin(&null) {
                eprintln!("latch daemon: dup2: {e}");
                return 1;
            }
            // Closed now: the daemon closes every fd above 2 first (SPEC §9.6), and a
            // File still owning one would close it again at exit, after the runtime
            // reused it.
        }
        Err(e) => {
            eprintln!("latch daemon: /dev/null: {e}");
            return 1;
        }
    }
    // The client started us in a new session. Fork once more so the daemon is not
    // a session leader (it can never acquire a controlling terminal) and the client
    // can reap its direct child at once.
    // SAFETY: no other threads exist in this process (the exec'd entry starts none;
    // a forking creator checks it has one thread).
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Parent { .. }) => 0,
        Ok(nix::unistd::ForkResult::Child) => latch_daemon::run(root, spec),
        Err(e) => {
            eprintln!("latch daemon: fork: {e}");
            1
        }
    }
}
