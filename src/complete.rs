//! Shell completions and the manual page, both generated from the clap
//! definitions of `cli`.
//!
//! Completions are clap_complete's dynamic ones: the script that `latch
//! completions SHELL` prints asks `latch` itself (with `LATCH_COMPLETE` set) for
//! candidates, so subcommands, options, enumerated values, and session ids and
//! names (read from the registry) all complete.

use std::ffi::OsStr;

use clap::CommandFactory;
use clap_complete::engine::{ArgValueCompleter, CompletionCandidate};
use clap_complete::env::{CompleteEnv, Shells};
use latch_client::{exit, ClientError, Entry, SessionStatus};

use crate::cli::{Cli, Shell};

/// The variable that turns `latch` into its own completer.
pub const COMPLETE_VAR: &str = "LATCH_COMPLETE";

/// Answers a completion request, if this is one (then exits).
pub fn answer_requests() {
    CompleteEnv::with_factory(Cli::command)
        .var(COMPLETE_VAR)
        .complete();
}

/// `latch completions SHELL`.
pub fn script(shell: Shell) -> Result<i32, ClientError> {
    let name = match shell {
        Shell::Bash => "bash",
        Shell::Zsh => "zsh",
        Shell::Fish => "fish",
    };
    let shells = Shells::builtins();
    let completer = shells
        .completer(name)
        .ok_or_else(|| ClientError::Other(format!("no completer for {name}")))?;
    let mut buf = Vec::new();
    completer
        .write_registration(COMPLETE_VAR, "latch", "latch", "latch", &mut buf)
        .map_err(|e| ClientError::failed("", e))?;
    write_stdout(&buf)
}

/// `latch man`.
pub fn man() -> Result<i32, ClientError> {
    let mut buf = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut buf)
        .map_err(|e| ClientError::failed("", e))?;
    write_stdout(&buf)
}

fn write_stdout(buf: &[u8]) -> Result<i32, ClientError> {
    // A failed stdout is `output`'s (SPEC §10).
    crate::output::out_bytes(buf);
    Ok(exit::OK)
}

/// The completer of a session REF: ids (with their status and name as help) and
/// the names of running sessions, from the registry of `$LATCH_ROOT` (else the
/// default root). Completion only offers what exists; resolving a REF never
/// matches a prefix.
pub fn refs() -> ArgValueCompleter {
    ArgValueCompleter::new(complete_refs)
}

fn complete_refs(current: &OsStr) -> Vec<CompletionCandidate> {
    let Some(current) = current.to_str() else {
        return Vec::new();
    };
    let Ok(client) = crate::commands::open(None) else {
        return Vec::new();
    };
    let Ok(entries) = client.list() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries {
        let Entry::Session { record, status } = e else {
            continue;
        };
        let name = record.display_name.clone();
        if record.id.as_str().starts_with(current) {
            let help = match &name {
                Some(n) => format!("{} ({n})", status.name()),
                None => status.name().to_owned(),
            };
            out.push(CompletionCandidate::new(record.id.as_str()).help(Some(help.into())));
        }
        if let Some(n) = name {
            if status == SessionStatus::Running && n.starts_with(current) {
                out.push(
                    CompletionCandidate::new(n).help(Some(format!("name of {}", record.id).into())),
                );
            }
        }
    }
    out
}
