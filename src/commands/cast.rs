//! Recordings (SPEC §4.8): `latch cast REF FILE [--max-bytes N]`, `latch cast REF
//! --stop`, and `new --cast FILE`. The daemon writes the file; the CLI only names
//! it, made absolute against the caller's working directory.

use crate::commands::At;
use std::path::{Path, PathBuf};

use clap::Args;
use latch_client::{Bound, ClientError};
use latch_wire::{CastInfo, CastRequest, ClientFrame};
use serde::Serialize;

use crate::cli::TargetArgs;
use crate::commands::usage;

/// `latch cast`: start or stop recording a running session as asciicast v2.
#[derive(Debug, Args)]
pub struct CastArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// The file to record into (relative to this directory; with --host, an
    /// absolute path on the host). It must not exist (a FIFO with a reader is
    /// taken as a live stream).
    #[arg(required_unless_present = "stop", conflicts_with = "stop")]
    pub file: Option<PathBuf>,
    /// End the recording cleanly, with a final marker, before the file passes N
    /// bytes.
    #[arg(long, value_name = "N", conflicts_with = "stop")]
    pub max_bytes: Option<u64>,
    /// Stop the session's recordings.
    #[arg(long)]
    pub stop: bool,
}

/// `--json`: the recordings started, stopped or active (SPEC §10 `casts`).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CastsJson {
    pub id: String,
    pub incarnation: String,
    pub casts: Vec<CastJson>,
}

/// One recording in JSON (SPEC §10).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CastJson {
    pub file: String,
    pub bytes: u64,
    pub start_cursor: u64,
    pub dropped_bytes: u64,
    pub started_at: u64,
    pub max_bytes: Option<u64>,
}

impl From<CastInfo> for CastJson {
    fn from(c: CastInfo) -> Self {
        Self {
            file: c.file,
            bytes: c.bytes,
            start_cursor: c.start_cursor,
            dropped_bytes: c.dropped_bytes,
            started_at: c.started_at_ms,
            max_bytes: c.max_bytes,
        }
    }
}

/// `latch cast`. Behind `--host` the file is the host's, so it must be absolute
/// there (SPEC §4.8).
pub(crate) fn run(at: &At, args: &CastArgs, json: bool) -> Result<i32, ClientError> {
    let frame = frame(args, at.host_name().is_some())?;
    let target = at.resolve(&args.target)?;
    let mut bound = at.loc().connect(&target)?;
    answer(&mut bound, frame, args.stop, json)
}

fn frame(args: &CastArgs, remote: bool) -> Result<ClientFrame, ClientError> {
    if args.stop {
        return Ok(ClientFrame::Casts { stop: true });
    }
    let file = args
        .file
        .as_deref()
        .ok_or_else(|| usage("cast needs FILE or --stop"))?;
    Ok(ClientFrame::CastStart(CastRequest {
        file: absolute(file, remote)?,
        max_bytes: args.max_bytes,
    }))
}

fn answer(
    bound: &mut Bound,
    frame: ClientFrame,
    stop: bool,
    json: bool,
) -> Result<i32, ClientError> {
    let session = bound.target().clone();
    let casts = bound.casts(frame)?;
    if json {
        crate::shapes::print(&CastsJson {
            id: session.id.to_string(),
            incarnation: session.incarnation.to_string(),
            casts: casts.into_iter().map(CastJson::from).collect(),
        })?;
    } else if stop && casts.is_empty() {
        eprintln!("latch: {} has no recording to stop", session.id);
    } else {
        let verb = if stop {
            "stopped recording"
        } else {
            "recording"
        };
        for c in casts {
            println!("{verb} {} into {} ({} bytes)", session.id, c.file, c.bytes);
        }
    }
    Ok(latch_client::exit::OK)
}

/// FILE against the caller's working directory (SPEC §4.8); lexically, since it
/// need not exist. With `--host`, the caller's directory means nothing there.
pub(crate) fn absolute(file: &Path, remote: bool) -> Result<String, ClientError> {
    if remote && !file.is_absolute() {
        return Err(usage(format!(
            "with --host the cast file is on the host: give an absolute path, not {}",
            file.display()
        )));
    }
    let abs = std::path::absolute(file)
        .map_err(|e| usage(format!("cannot resolve {}: {e}", file.display())))?;
    abs.into_os_string()
        .into_string()
        .map_err(|_| usage("the cast file's path is not UTF-8"))
}

/// `new --cast FILE`: the creation's recording, from its first byte (`remote`:
/// through `--host`, where FILE must be absolute).
pub(crate) fn new_spec(
    file: Option<&Path>,
    remote: bool,
) -> Result<Option<latch_registry::CastSpec>, ClientError> {
    file.map(|f| {
        Ok(latch_registry::CastSpec {
            file: absolute(f, remote)?,
            max_bytes: None,
        })
    })
    .transpose()
}

/// `status --json`'s `casts`, from a daemon that records (version 3); `None`
/// from an older one, or when it cannot be asked.
pub(crate) fn casts_of(bound: &mut Bound) -> Option<Vec<CastJson>> {
    let casts = bound.casts(ClientFrame::Casts { stop: false }).ok()?;
    Some(casts.into_iter().map(CastJson::from).collect())
}
