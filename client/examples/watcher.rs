//! A watcher: mirrors a session's output to a file, from a read-only attachment
//! bound to exactly one creation, until the program exits.
//!
//! ```sh
//! cargo run -p latch-client --example watcher -- \
//!     --root /tmp/reg --latch target/x86_64-unknown-linux-gnu/debug/latch build build.log
//! ```
//!
//! The file starts with the screen as it was at the attach cut (ANSI that repaints
//! a terminal), then every byte of output in order; `cat build.log` replays it.
//! When the watcher falls behind, the daemon sends a fresh screen instead of what
//! was missed, and the watcher writes that. Exit status: the program's exit code
//! (128 + N for signal N), or the error's code.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use latch_client::{AttachEvent, AttachMode, Client, ClientError};

fn run(root: PathBuf, latch: PathBuf, reference: &str, out: PathBuf) -> Result<i32, ClientError> {
    let client = Client::open(&root, latch)?;
    let target = client.resolve(reference, None)?;
    let attached = client
        .connect(&target.session)?
        .attach(0, 0, AttachMode::ReadOnly)?;
    // Attached: from here on, nothing the program prints is missed.
    eprintln!("watching {} into {}", target.session, out.display());
    let io = |e: std::io::Error| ClientError::failed(out.display().to_string(), e);
    let mut file = std::fs::File::create(&out).map_err(io)?;
    file.write_all(&attached.screen).map_err(io)?;
    let mut reader = attached.reader;
    loop {
        match reader.next_event()? {
            AttachEvent::Output(bytes) | AttachEvent::Screen(bytes) => {
                file.write_all(&bytes).map_err(io)?;
                file.flush().map_err(io)?;
            }
            AttachEvent::Exit(status) => {
                file.sync_all().map_err(io)?;
                return Ok(match (status.code, status.signal) {
                    (Some(code), _) => code,
                    (None, Some(signal)) => 128 + signal,
                    (None, None) => 1,
                });
            }
            AttachEvent::Error { code, detail } => {
                return Err(ClientError::Daemon { code, detail })
            }
            AttachEvent::Closed | AttachEvent::Detached => {
                return Err(ClientError::unreachable(
                    latch_client::UnreachableCause::Closed,
                    "the daemon closed the connection",
                ))
            }
            // A size change carries no output.
            _ => {}
        }
    }
}

fn main() -> ExitCode {
    let mut root = None;
    let mut latch = std::env::var_os("LATCH_BIN").map_or_else(|| "latch".into(), PathBuf::from);
    let mut rest = Vec::new();
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--root" => root = it.next().map(PathBuf::from),
            "--latch" => latch = it.next().map(PathBuf::from).unwrap_or(latch),
            _ => rest.push(a),
        }
    }
    let (Some(root), [reference, out]) = (root, rest.as_slice()) else {
        eprintln!("usage: watcher --root DIR [--latch PATH] REF FILE");
        return ExitCode::from(2);
    };
    match run(root, latch, reference, out.into()) {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => {
            eprintln!("watcher: {e}");
            ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(1))
        }
    }
}
