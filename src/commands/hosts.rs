//! `--host` and `HOST:ID`: routing to another host (SPEC.md §12). The commands
//! that act on one session are written once against a location (`At`); here are
//! only the route, the create there, the registry commands the host runs
//! (`exec`), and the `ls` merge of several hosts.

use crate::cli::{Lazy, LsArgs};
use latch_client::{exit, ClientError, Receipt};
use serde::Deserialize;

use super::usage;
use crate::cli::{Cli, Command};
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

    /// Every host named (`ls` merges them).
    pub(crate) fn hosts(&self) -> &[Host] {
        &self.hosts
    }
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
        .and_then(Command::reference)
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
    if let Some(path) = cli.command.as_ref().and_then(Command::receipt_file) {
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
    if hosts.len() > 1 && !matches!(cli.command, Some(Command::Ls(Lazy(LsArgs { .. })))) {
        return Err(usage("several hosts: only `ls` merges hosts; name one"));
    }
    Ok(Some(Route {
        hosts,
        reference,
        receipt,
    }))
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
pub(crate) fn ls(
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
                    scope.spawn(move || (h.clone(), super::there::ls_one(h, req, args)))
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
                    if let Some(row) = session_row(&host, &e) {
                        table.row(row);
                    }
                    if let Some(obj) = e.as_object_mut() {
                        obj.insert("host".into(), host.as_str().into());
                    }
                    rows.push(e);
                }
            }
            Err(e) => {
                eprintln!("latch: {}", output::escape(&e.to_string()));
                code = fail_code;
                let (row, value) = host_down(&host, &e)?;
                table.row(row);
                rows.push(value);
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

/// The table row of one `ls --json` entry of `host`.
fn session_row(host: &Host, entry: &serde_json::Value) -> Option<Vec<String>> {
    let l: Listed = serde_json::from_value(entry.clone()).ok()?;
    Some(vec![
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
    ])
}

/// The row and the `host down` element of a host that could not be listed.
fn host_down(
    host: &Host,
    e: &ClientError,
) -> Result<(Vec<String>, serde_json::Value), ClientError> {
    let status = if e.exit_code() == exit::UNREACHABLE {
        "unreachable"
    } else {
        e.kind()
    };
    let row = vec![
        host.to_string(),
        "-".into(),
        status.into(),
        "-".into(),
        "-".into(),
        e.to_string(),
    ];
    let value = serde_json::to_value(shapes::HostDownJson {
        host: host.to_string(),
        status,
        error: e.to_string(),
    })
    .map_err(|e| ClientError::failed("", e))?;
    Ok((row, value))
}
