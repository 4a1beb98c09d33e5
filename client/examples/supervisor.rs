//! A supervisor: starts N sessions, keeps a receipt for each, waits for each one's
//! output, then stops them by receipt. A session that someone else replaced in the
//! meantime (same id, new creation) is left alone: stopping by receipt can only
//! ever reach the creation the receipt names.
//!
//! ```sh
//! cargo run -p latch-client --example supervisor -- \
//!     --root /tmp/reg --state /tmp/sup --latch target/x86_64-unknown-linux-gnu/debug/latch -n 3 --race
//! ```
//!
//! `--race` makes a rival restart the first job between its start and its stop,
//! to show the replaced outcome handled. Prints one line per job:
//! `job-0 replaced: left alone (now v1.…)`, `job-1 stopped (killed)`.
//! Exit status: 0 when every job was accounted for, else the first error's code.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use latch_client::{Client, ClientError, KillOutcome, NewSession, PeekOptions, SessionId};

struct Args {
    root: PathBuf,
    state: PathBuf,
    latch: PathBuf,
    jobs: usize,
    race: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        root: PathBuf::new(),
        state: PathBuf::new(),
        latch: std::env::var_os("LATCH_BIN").map_or_else(|| "latch".into(), PathBuf::from),
        jobs: 3,
        race: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--root" => args.root = value()?.into(),
            "--state" => args.state = value()?.into(),
            "--latch" => args.latch = value()?.into(),
            "-n" => args.jobs = value()?.parse().map_err(|e| format!("-n: {e}"))?,
            "--race" => args.race = true,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if args.root.as_os_str().is_empty() || args.state.as_os_str().is_empty() {
        return Err(
            "usage: supervisor --root DIR --state DIR [--latch PATH] [-n N] [--race]".into(),
        );
    }
    Ok(args)
}

fn run(args: &Args) -> Result<(), ClientError> {
    let client = Client::open(&args.root, args.latch.clone())?;
    std::fs::create_dir_all(&args.state).map_err(|e| ClientError::failed("", e))?;

    // Start every job and keep its receipt: the receipt, not the id, is what the
    // supervisor acts on later.
    let mut receipts = Vec::new();
    for i in 0..args.jobs {
        let mut new = NewSession::default();
        new.id = Some(
            SessionId::new(format!("job-{i}")).map_err(|e| ClientError::Usage(e.to_string()))?,
        );
        new.command = vec![
            "sh".into(),
            "-c".into(),
            format!("echo job {i} ready; exec cat"),
        ];
        let created = client.create(new)?;
        let path = args.state.join(format!("job-{i}.receipt"));
        client.write_receipt(&path, &created)?;
        receipts.push(path);
    }

    // Wait for each one's output, on a connection bound to that creation.
    for (i, path) in receipts.iter().enumerate() {
        let session = client.load_receipt(path)?.session();
        client.wait_for_text(
            &session,
            &format!("job {i} ready"),
            PeekOptions::plain(),
            Duration::from_secs(30),
        )?;
        println!("{} ready", session.id);
    }

    if args.race {
        // A rival restarts job-0: same id, a new creation the supervisor never made.
        let first = client.load_receipt(&receipts[0])?.session();
        let successor = client.restart(&first, Duration::from_secs(5))?;
        println!("rival restarted {} as {}", first.id, successor.incarnation);
    }

    // Stop by receipt. A replaced job is someone else's now: leave it alone.
    for path in &receipts {
        let session = client.load_receipt(path)?.session();
        match client.kill(&session, libc::SIGTERM, Some(Duration::from_secs(10))) {
            Ok(KillOutcome::TimedOut) => {
                client.kill(&session, libc::SIGKILL, Some(Duration::from_secs(5)))?;
                println!("{} stopped (killed after the grace period)", session.id);
            }
            Ok(outcome) => println!("{} stopped ({outcome:?})", session.id),
            Err(ClientError::Replaced { id, actual, .. }) => match actual {
                Some(now) => println!("{id} replaced: left alone (now {now})"),
                None => println!("{id} replaced: left alone (removed)"),
            },
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("supervisor: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("supervisor: {e}");
            ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(1))
        }
    }
}
