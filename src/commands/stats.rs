//! `latch stats [REF|--all]`: what a session's processes use (SPEC.md §10), and
//! the cheap subset `ls --json` carries. Read from `/proc` and the daemon's
//! STATUS; no signal is ever sent.

use clap::Args;
use latch_client::{derive_status, exit, Client, ClientError, Entry, SessionStatus};
use latch_registry::proc::prove;

use latch_registry::usage::{proc_usage, session_usage};
use latch_registry::Record;
use latch_wire::SessionRef;
use serde::Serialize;

use super::{usage, At};
use crate::cli::Preconditions;
use crate::output;
use crate::shapes;

/// `latch stats`.
#[derive(Debug, Args, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StatsArgs {
    /// ID, unique display name, or ID@INCARNATION.
    #[arg(add = crate::complete::refs(), required_unless_present = "all")]
    pub reference: Option<String>,
    #[command(flatten)]
    pub pre: Preconditions,
    /// Every running session.
    #[arg(long, conflicts_with = "reference")]
    pub all: bool,
}

/// The daemon's own memory in [`StatsJson`].
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DaemonUsageJson {
    pub pid: u32,
    pub rss_bytes: u64,
    pub pss_bytes: Option<u64>,
}

/// `stats --json` (one per session; an array with `--all`).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatsJson {
    pub id: String,
    pub incarnation: String,
    pub status: &'static str,
    pub processes: u32,
    pub cpu_ms: Option<u64>,
    pub rss_bytes: Option<u64>,
    pub pss_bytes: Option<u64>,
    pub daemon: Option<DaemonUsageJson>,
    pub writers: Option<u32>,
    pub readers: Option<u32>,
    pub output_cursor: Option<u64>,
    pub last_output_at: Option<u64>,
}

impl StatsJson {
    /// A session with no figures (ended, or its program ended during the scan).
    fn empty(record: &Record, status: &SessionStatus) -> Self {
        Self {
            id: record.id.to_string(),
            incarnation: record.incarnation.to_string(),
            status: status.name(),
            processes: 0,
            cpu_ms: None,
            rss_bytes: None,
            pss_bytes: None,
            daemon: None,
            writers: None,
            readers: None,
            output_cursor: None,
            last_output_at: None,
        }
    }
}

/// The figures of one session: its processes by proven identity (the program's
/// pidfd, then its terminal session's members, §9.5), the daemon's memory, and the
/// daemon's STATUS (clients, the output cursor).
fn stats_of(client: &Client, record: &Record) -> StatsJson {
    let status = derive_status(record);
    let mut out = StatsJson::empty(record, &status);
    if status != SessionStatus::Running {
        return out;
    }
    if let Some(u) = prove(&record.child).ok().and_then(|p| session_usage(&p)) {
        out.processes = u.processes;
        out.cpu_ms = Some(u.cpu_ms);
        out.rss_bytes = Some(u.rss_bytes);
        out.pss_bytes = u.pss_bytes;
    }
    out.daemon = prove(&record.daemon)
        .ok()
        .and_then(|d| proc_usage(&d, true))
        .map(|u| DaemonUsageJson {
            pid: record.daemon.pid,
            rss_bytes: u.rss_bytes,
            pss_bytes: u.pss_bytes,
        });
    let session = SessionRef::new(record.id.clone(), record.incarnation);
    if let Ok((st, facts)) = client.status_full_of(&session) {
        out.writers = Some(st.writers);
        out.readers = Some(st.readers);
        if let Some(f) = facts {
            out.output_cursor = Some(f.output_cursor);
            out.last_output_at = f.last_output_ms;
        }
    }
    out
}

fn mib(bytes: Option<u64>) -> String {
    #[allow(clippy::cast_precision_loss)]
    bytes.map_or_else(|| "-".into(), |b| format!("{:.1}M", b as f64 / 1048576.0))
}

fn print_table(rows: &[StatsJson]) {
    let mut t = output::Table::new(&[
        "ID", "STATUS", "PROCS", "CPU", "RSS", "PSS", "DAEMON", "CLIENTS", "OUTPUT",
    ]);
    let opt = |v: Option<u64>| v.map_or_else(|| "-".into(), |v| v.to_string());
    for s in rows {
        t.row(vec![
            s.id.clone(),
            s.status.to_owned(),
            s.processes.to_string(),
            s.cpu_ms
                .map_or_else(|| "-".into(), |ms| format!("{:.2}s", ms as f64 / 1000.0)),
            mib(s.rss_bytes),
            mib(s.pss_bytes),
            mib(s
                .daemon
                .as_ref()
                .and_then(|d| d.pss_bytes.or(Some(d.rss_bytes)))),
            match (s.writers, s.readers) {
                (Some(w), Some(r)) => format!("{w}w {r}r"),
                _ => "-".into(),
            },
            opt(s.output_cursor),
        ]);
    }
    for line in t.render(output::width()) {
        println!("{line}");
    }
}

/// Runs `latch stats`.
/// `stats` in this registry (through `--host`, the host's bridge runs it).
pub(crate) fn stats(at: &At, args: &StatsArgs, json: bool) -> Result<i32, ClientError> {
    let client = at.here()?;
    if args.all {
        let rows: Vec<StatsJson> = client
            .list()?
            .iter()
            .filter_map(|e| match e {
                Entry::Session { record, status } if *status == SessionStatus::Running => {
                    Some(record)
                }
                _ => None,
            })
            .filter(|r| {
                client
                    .required_owner()
                    .is_none_or(|o| r.owner.as_ref() == Some(o))
            })
            .map(|r| stats_of(client, r))
            .collect();
        if json {
            shapes::print(&rows)?;
        } else {
            print_table(&rows);
        }
        return Ok(exit::OK);
    }
    let reference = args
        .reference
        .clone()
        .ok_or_else(|| usage("give a session REF or --all"))?;
    let target = at.resolve_ref(&reference, &args.pre)?;
    let row = stats_of(client, &target.record);
    if json {
        shapes::print(&row)?;
    } else {
        print_table(std::slice::from_ref(&row));
    }
    Ok(exit::OK)
}
