//! `run` and `commands` (SPEC §4.7): a command typed into a shell and exactly
//! what it did, and the command blocks the daemon saw.

use crate::commands::At;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use latch_client::{exit, ClientError, RunOptions, RunResult};
use latch_screen::PlainStream;
use serde::Serialize;

use crate::cli::{Dur, TargetArgs};
use crate::shapes::{self, RangeJson};

/// The most output `run --json` carries, in bytes of raw output (the newest are
/// kept; the rest is `droppedBytes`, SPEC §4.7).
pub(crate) const RUN_JSON_OUTPUT_MAX: usize = 1 << 20;

/// `latch run REF [--timeout DUR] [--marker] -- CMD…` or `latch run REF 'CMD'`.
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// How long the whole run may take: the prompt, the command (default: no
    /// limit). At the deadline the command is left running (exit 255; 10 with --json).
    #[arg(long, value_name = "DUR")]
    pub timeout: Option<Dur>,
    /// Type a marker line instead of relying on shell integration (a POSIX
    /// shell without it, such as dash): ` printf C; eval 'CMD'; printf D;$?`.
    #[arg(long)]
    pub marker: bool,
    /// The command: one argument is a command line as is; several are quoted
    /// for a POSIX shell and joined with spaces.
    #[arg(required = true, num_args = 1.., allow_hyphen_values = true)]
    pub command: Vec<String>,
}

/// `latch commands REF [--last N]`.
#[derive(Debug, Args)]
pub struct CommandsArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Only the newest N (the daemon keeps 1,000).
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub last: u32,
}

/// `run --json` (SPEC §10).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunJson {
    pub id: String,
    pub incarnation: String,
    pub command: String,
    pub exit_code: Option<i32>,
    pub output: String,
    pub output_range: RangeJson,
    pub dropped_bytes: u64,
    pub started_at: u64,
    pub ended_at: u64,
    pub cwd: Option<String>,
}

/// Each element of `commands --json` (SPEC §10).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CommandJson {
    pub id: String,
    pub incarnation: String,
    pub command: Option<String>,
    pub cwd: Option<String>,
    pub started_at: u64,
    pub ended_at: Option<u64>,
    pub exit_code: Option<i32>,
    pub output_range: CommandRangeJson,
}

/// A command block's `outputRange`: `end` is null while it runs.
#[derive(Debug, Clone, Serialize)]
pub struct CommandRangeJson {
    pub start: u64,
    pub end: Option<u64>,
}

/// The command line `run` types: one argument as is, several quoted.
pub(crate) fn command_line(args: &[String]) -> String {
    if let [one] = args {
        return one.clone();
    }
    let safe = |a: &str| {
        !a.is_empty()
            && a.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
    };
    args.iter()
        .map(|a| {
            if safe(a) {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Counts SIGINT (Ctrl-C) from here on, in a thread that waits for it: the run
/// sends C-c at the first, and stops waiting at the second.
fn count_interrupts() -> Option<Arc<AtomicU32>> {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.thread_block().ok()?;
    let count = Arc::new(AtomicU32::new(0));
    let c = count.clone();
    std::thread::spawn(move || loop {
        if set.wait().is_ok() {
            c.fetch_add(1, Ordering::Relaxed);
        }
    });
    Some(count)
}

/// `run` (SPEC §4.7). Without `--json`: the command's output as plain text as it
/// comes, and its exit code; when latch fails, 255 with latch's class on stderr.
/// With `--json`: latch's exit codes, and the `run` shape.
pub(crate) fn run(at: &At, args: &RunArgs, json: bool) -> Result<i32, ClientError> {
    let command = command_line(&args.command);
    let result = run_at(at, args, &command, json);
    finish(result, &command, json)
}

fn run_at(
    at: &At,
    args: &RunArgs,
    command: &str,
    json: bool,
) -> Result<(latch_wire::SessionRef, RunResult, Collected), ClientError> {
    let target = at.resolve(&args.target)?;
    let interrupts = count_interrupts();
    let mut collected = Collected::new(json);
    let res = at.loc().run(
        &target,
        command,
        &options(args),
        interrupts.as_deref(),
        &mut |b| collected.push(b),
    )?;
    Ok((target.session, res, collected))
}

pub(crate) fn options(args: &RunArgs) -> RunOptions {
    RunOptions {
        timeout: args
            .timeout
            .map_or(Duration::from_secs(100 * 365 * 86_400), |d| d.0),
        marker: args.marker,
    }
}

/// The output as it comes: streamed as plain text, or kept (capped) for JSON.
pub(crate) struct Collected {
    json: bool,
    plain: PlainStream,
    raw: std::collections::VecDeque<u8>,
    dropped: u64,
}

impl Collected {
    pub(crate) fn new(json: bool) -> Self {
        Self {
            json,
            plain: PlainStream::default(),
            raw: std::collections::VecDeque::new(),
            dropped: 0,
        }
    }

    pub(crate) fn push(&mut self, bytes: &[u8]) {
        if !self.json {
            crate::output::out_bytes(self.plain.strip(bytes).as_bytes());
            return;
        }
        self.raw.extend(bytes);
        if self.raw.len() > RUN_JSON_OUTPUT_MAX {
            let over = self.raw.len() - RUN_JSON_OUTPUT_MAX;
            self.raw.drain(..over);
            self.dropped += over as u64;
        }
    }

    fn text(&mut self) -> String {
        let raw: Vec<u8> = self.raw.drain(..).collect();
        self.plain.strip(&raw)
    }
}

/// The exit code and what is printed, once the run is over (ROUND3's rule:
/// the command's own code without `--json`, 255 when latch failed).
pub(crate) fn finish(
    result: Result<(latch_wire::SessionRef, RunResult, Collected), ClientError>,
    command: &str,
    json: bool,
) -> Result<i32, ClientError> {
    let (session, res, collected) = match result {
        Ok(r) => r,
        Err(e) if json => return Err(e),
        Err(e) => {
            eprintln!(
                "latch: run failed ({}): {}",
                e.kind(),
                crate::output::escape(&e.to_string())
            );
            return Ok(255);
        }
    };
    if res.interrupted {
        eprintln!(
            "latch: interrupted: stopped waiting; the command may still be running in {session}"
        );
        return Ok(130);
    }
    if json {
        shapes::print(&run_json(&session, res, collected, command))?;
        return Ok(exit::OK);
    }
    if res.dropped_bytes > 0 {
        eprintln!("lagged: {} bytes", res.dropped_bytes);
    }
    match res.exit_code {
        Some(code) => Ok(code & 0xff),
        None => {
            eprintln!("latch: unknown: the shell did not report the command's exit code");
            Ok(255)
        }
    }
}

/// The `run` shape (SPEC §10) of a run that ended, for `run --json` and control's
/// `run` alike.
pub(crate) fn run_json(
    session: &latch_wire::SessionRef,
    res: RunResult,
    mut collected: Collected,
    command: &str,
) -> RunJson {
    RunJson {
        id: session.id.to_string(),
        incarnation: session.incarnation.to_string(),
        command: command.to_owned(),
        exit_code: res.exit_code,
        output: collected.text(),
        output_range: RangeJson {
            start: res.output_range.0,
            end: res.output_range.1,
        },
        dropped_bytes: res.dropped_bytes + collected.dropped,
        started_at: res.started_at_ms,
        ended_at: res.ended_at_ms,
        cwd: res.cwd,
    }
}

/// `commands REF [--last N]` (SPEC §4.7): the command blocks the daemon keeps.
pub(crate) fn commands(at: &At, args: &CommandsArgs, json: bool) -> Result<i32, ClientError> {
    let target = at.resolve(&args.target)?;
    let mut bound = at.loc().connect(&target)?;
    print_commands(&mut bound, args.last, json)
}

/// `commands` through a bound connection, wherever it lives.
pub(crate) fn print_commands(
    bound: &mut latch_client::Bound,
    last: u32,
    json: bool,
) -> Result<i32, ClientError> {
    let session = bound.target().clone();
    let blocks = bound.commands(last)?;
    let rows: Vec<CommandJson> = blocks
        .into_iter()
        .map(|b| CommandJson {
            id: session.id.to_string(),
            incarnation: session.incarnation.to_string(),
            command: b.command,
            cwd: b.cwd,
            started_at: b.start_ms,
            ended_at: b.end_ms,
            exit_code: b.exit,
            output_range: CommandRangeJson {
                start: b.output_start,
                end: b.output_end,
            },
        })
        .collect();
    if json {
        shapes::print(&rows)?;
        return Ok(exit::OK);
    }
    for r in &rows {
        let code = match (r.ended_at, r.exit_code) {
            (None, _) => "running".to_owned(),
            (Some(_), Some(c)) => c.to_string(),
            (Some(_), None) => "?".to_owned(),
        };
        let end = r.output_range.end.map_or("-".to_owned(), |e| e.to_string());
        println!(
            "{:>8} {:>10}..{:<10} {}",
            code,
            r.output_range.start,
            end,
            crate::output::escape(r.command.as_deref().unwrap_or("?"))
        );
    }
    Ok(exit::OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn several_arguments_are_quoted_one_is_as_is() {
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(command_line(&v(&["echo $HOME; ls"])), "echo $HOME; ls");
        assert_eq!(
            command_line(&v(&["sh", "-c", "echo 'x' $y"])),
            r#"sh -c 'echo '\''x'\'' $y'"#
        );
    }
}
