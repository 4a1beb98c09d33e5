//! Creating a session: start the daemon (forked, or `latch daemon` spawned), wait for
//! its readiness line.

use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use latch_registry::{CreateSpec, ReadyMessage, Registry};
use latch_wire::{Incarnation, Owner, SessionId, SessionRef};
use serde::Serialize;

use crate::error::{ClientError, UnreachableCause};
use crate::forked::DaemonEntry;
use latch_registry::spec::FailureKind;

/// How long `create` waits for the daemon's readiness line.
pub const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// A created session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Created {
    /// The id.
    pub id: SessionId,
    /// The minted incarnation.
    pub incarnation: Incarnation,
    /// The daemon's pid.
    pub daemon_pid: u32,
    /// The program's pid.
    pub child_pid: u32,
    /// Creation time, ms since the epoch.
    pub created_at_ms: u64,
    /// The owner it was created with (SPEC.md §2.4).
    pub owner: Option<Owner>,
}

impl Created {
    /// The creation a record describes (its id, incarnation, pids, time and owner),
    /// for a receipt written for a session found rather than created.
    pub fn of_record(record: &latch_registry::Record) -> Self {
        Self {
            id: record.id.clone(),
            incarnation: record.incarnation,
            daemon_pid: record.daemon.pid,
            child_pid: record.child.pid,
            created_at_ms: record.created_at_ms,
            owner: record.owner.clone(),
        }
    }

    /// The creation as a reference to connect, bind and act on.
    pub fn session(&self) -> SessionRef {
        SessionRef::new(self.id.clone(), self.incarnation)
    }
}

pub(crate) fn spawn_daemon(
    registry: &Registry,
    program: &PathBuf,
    entry: Option<DaemonEntry>,
    spec: &CreateSpec,
) -> Result<Created, ClientError> {
    registry.check_new_id(&spec.id)?;
    // No-follow, non-blocking, regular files only (SPEC §9.1): a FIFO planted at
    // the log never blocks the creator.
    let log = latch_registry::file::open_append(&registry.log_path(&spec.id), 0o600)
        .map_err(|e| ClientError::failed("open daemon log", e))?;
    // One thread: fork into the daemon, without a second start (SPEC §9.6).
    let (mut out, started) = match entry.filter(|_| crate::forked::single_threaded()) {
        Some(entry) => {
            let (out, pid) = crate::forked::start(entry, registry.root(), spec, log)?;
            (out, Started::Forked(pid))
        }
        None => {
            let (out, child) = exec_daemon(registry, program, spec, log)?;
            (out, Started::Exec(child))
        }
    };
    let line = read_line_with_deadline(&mut out, Instant::now() + READY_TIMEOUT);
    // The process we started forks the real daemon and exits at once; reap it.
    started.reap();
    let line = match line {
        Ok(l) => l,
        // No answer in time: the daemon may still come up; its files are its own.
        Err(
            e @ ClientError::Unreachable {
                cause: UnreachableCause::TimedOut,
                ..
            },
        ) => return Err(e),
        Err(e) => return Err(with_log(e, discard_failed(registry, &spec.id))),
    };
    let msg: ReadyMessage = match serde_json::from_str(line.trim()) {
        Ok(m) => m,
        Err(e) => {
            let err = ClientError::Other(format!(
                "daemon answered an unreadable readiness line ({e}): {line:?}"
            ));
            return Err(with_log(err, discard_failed(registry, &spec.id)));
        }
    };
    if let ReadyMessage::Failed { kind, .. } = &msg {
        // Another creation's files (exists) or a creation under way (busy) are not
        // ours to touch; any other failure created nothing but its files.
        if !matches!(kind, FailureKind::Exists | FailureKind::Busy) {
            discard_failed(registry, &spec.id);
        }
    }
    match msg {
        ReadyMessage::Ready {
            incarnation,
            daemon_pid,
            child_pid,
            created_at_ms,
        } => Ok(Created {
            id: spec.id.clone(),
            incarnation,
            daemon_pid,
            child_pid,
            created_at_ms,
            owner: spec.owner.clone(),
        }),
        ReadyMessage::Failed { kind, message } => Err(match kind {
            FailureKind::Exists => ClientError::Exists(spec.id.clone()),
            kind => ClientError::Create { kind, message },
        }),
    }
}

/// The process a create started, reaped once the readiness line is read.
enum Started {
    Exec(std::process::Child),
    Forked(nix::unistd::Pid),
}

impl Started {
    fn reap(self) {
        match self {
            Self::Exec(mut child) => {
                let _ = child.wait();
            }
            Self::Forked(pid) => {
                let _ = nix::sys::wait::waitpid(pid, None);
            }
        }
    }
}

/// Starts `program daemon --root ROOT` in a new session, the spec on its stdin;
/// returns its stdout, the readiness pipe.
fn exec_daemon(
    registry: &Registry,
    program: &PathBuf,
    spec: &CreateSpec,
    log: std::fs::File,
) -> Result<(std::fs::File, std::process::Child), ClientError> {
    let json = serde_json::to_string(spec).map_err(|e| ClientError::failed("", e))?;
    let mut cmd = Command::new(program);
    // The spec travels over stdin, never argv: /proc/PID/cmdline is world-readable
    // and the spec carries the program's environment.
    cmd.arg("daemon")
        .arg("--root")
        .arg(registry.root())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log));
    // SAFETY: setsid is async-signal-safe; the closure allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid().map_err(std::io::Error::from)?;
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| ClientError::Other(format!("cannot start {}: {e}", program.display())))?;
    {
        use std::io::Write;
        let mut stdin = child
            .stdin
            .take()
            .ok_or_else(|| ClientError::Other("daemon stdin missing".into()))?;
        // A daemon that dies before reading gives EPIPE; its log and the readiness
        // pipe's EOF explain why, below.
        let _ = stdin.write_all(json.as_bytes());
    }
    let out = child
        .stdout
        .take()
        .ok_or_else(|| ClientError::Other("daemon stdout missing".into()))?;
    Ok((std::fs::File::from(std::os::fd::OwnedFd::from(out)), child))
}

/// Adds the failed daemon's last log lines (if any) to `e`.
fn with_log(e: ClientError, log: Option<String>) -> ClientError {
    match (e, log) {
        (e @ (ClientError::Other(_) | ClientError::Failed { .. }), Some(log))
            if !log.trim().is_empty() =>
        {
            ClientError::Other(format!("{e}; its log ended with: {}", log.trim()))
        }
        (e, _) => e,
    }
}

/// The most of a failed daemon's log kept in the error that reports it.
const FAILED_LOG_TAIL: u64 = 1024;

/// Removes what a failed creation of `id` left (its log and lock file; a socket
/// nobody answers on), under the id's lock and only while no record exists: a
/// failed creation leaves no files (SPEC.md §9.6). Returns the log's last bytes.
pub(crate) fn discard_failed(registry: &Registry, id: &latch_wire::SessionId) -> Option<String> {
    let lock = registry.lock(id, latch_registry::DEFAULT_LOCK_WAIT).ok()?;
    if std::fs::symlink_metadata(registry.record_path(id)).is_ok() {
        return None; // another creation won the id meanwhile: its files
    }
    let tail = latch_registry::events::read_tail_lines(&registry.log_path(id), FAILED_LOG_TAIL)
        .ok()
        .flatten()
        .map(|lines| {
            lines
                .iter()
                .map(|l| String::from_utf8_lossy(l).into_owned())
                .collect::<Vec<_>>()
                .join(" / ")
        });
    let _ = registry.remove_stale_socket(&lock);
    for path in [registry.log_path(id), registry.rotated_log_path(id)] {
        let _ = std::fs::remove_file(path);
    }
    let _ = lock.unlink();
    tail
}

fn read_line_with_deadline(
    pipe: &mut std::fs::File,
    deadline: Instant,
) -> Result<String, ClientError> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if buf.contains(&b'\n') {
            break;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ClientError::unreachable(
                UnreachableCause::TimedOut,
                "the new daemon did not report ready in time",
            ));
        }
        let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
        let mut fds = [PollFd::new(pipe.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(ms)) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(ClientError::failed("poll", e)),
        }
        let n = pipe
            .read(&mut chunk)
            .map_err(|e| ClientError::failed("read readiness pipe", e))?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    if buf.is_empty() {
        return Err(ClientError::Other(
            "the daemon exited without reporting ready".into(),
        ));
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}
