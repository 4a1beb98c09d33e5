//! Another host's registry, through the user's own OpenSSH (SPEC.md §12): one ssh
//! per request runs `latch bridge` there; everything of the user's (references,
//! names, tags, receipts) travels as JSON on its stdin, never through the remote
//! shell. [`Remote`] is the host with the ssh options that reach it; the
//! [`Location`](crate::Location) built on it is how a command reaches a session
//! wherever it lives.

pub mod proto;

/// The daemon's peer check (SPEC.md §5.5), which a bridge runs before relaying.
pub use crate::proto::check_peer_uid;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::{ClientError, Connection, Mismatch, Receipt, SessionStatus, UnreachableCause};
use latch_registry::Record;
use latch_wire::{Incarnation, SessionId, SessionRef};
use serde::{Deserialize, Serialize};

/// The remote protocol versions this latch speaks (SPEC.md §12.2). Version 1's
/// argument re-runs are gone: a bridge serves version 2 only, and a caller still
/// reaches a version-1 host for what that version can do (its `connect`, and `ls`).
pub const REMOTE_MIN: u16 = 2;
/// The highest.
pub const REMOTE_MAX: u16 = 2;
/// The oldest version a caller still speaks to a host, for `connect` and `ls`.
pub const CALLER_MIN: u16 = 1;

/// The most read for a request or target line (SPEC.md §12.2).
pub const LINE_MAX: usize = 8 << 20;

/// The most read for a header line (SPEC.md §12.2).
pub const HEADER_MAX: usize = 64 << 10;

/// An answer the caller keeps whole (SPEC.md §12.2): each kind has its bound, and
/// a host that sends more is a protocol error naming it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// `latch --json ls` (`ls` over hosts, §12.6).
    Ls,
    /// `latch status --json ID@INCARNATION` (kill's fallback, §12.3).
    Status,
}

impl Answer {
    /// Its bound, in bytes.
    pub const fn max(self) -> usize {
        match self {
            Self::Ls => 16 << 20,
            // As the target line, which holds the same record.
            Self::Status => LINE_MAX,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Ls => "ls",
            Self::Status => "status",
        }
    }
}

/// How long the first line from the other host may take (ssh's connection and
/// authentication included; ssh's own ConnectTimeout applies too).
const HEADER_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a failed ssh gets to exit once its stdin is closed.
const SSH_EXIT_WAIT: Duration = Duration::from_secs(5);

/// The last bytes of ssh's stderr kept to explain a failure.
const STDERR_TAIL: usize = 8 * 1024;

/// A host as `ssh` takes it: an alias, `host`, `user@host`, or an alias holding a
/// port (`host:port`, through the ssh config).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Host(String);

impl Host {
    /// 1 to 255 bytes of `[A-Za-z0-9._@%+:[]-]`, not starting with `-` (ssh would
    /// read an option) nor `.`; no `,` (it separates hosts) and no space, quote or
    /// shell character.
    pub fn parse(s: &str) -> Result<Self, ClientError> {
        let ok = |c: char| c.is_ascii_alphanumeric() || "._@%+:[]-".contains(c);
        let bad = if s.is_empty() {
            Some("is empty")
        } else if s.len() > 255 {
            Some("is longer than 255 bytes")
        } else if s.starts_with('-') || s.starts_with('.') {
            Some("starts with '-' or '.'")
        } else if !s.chars().all(ok) {
            Some("holds a character other than letters, digits and ._@%+:[]-")
        } else {
            None
        };
        match bad {
            Some(why) => Err(ClientError::Usage(format!("host {s:?} {why}"))),
            None => Ok(Self(s.to_owned())),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Splits a remote REF, `HOST:ID` or `HOST:ID@INCARNATION` (SPEC.md §12.1): the text
/// after the last `:` must be an id or `ID@INCARNATION`, else the REF is local (a
/// display name may hold a colon). A remote REF whose HOST is malformed is a usage
/// error.
pub fn split_ref(reference: &str) -> Result<Option<(Host, String)>, ClientError> {
    let Some((host, rest)) = reference.rsplit_once(':') else {
        return Ok(None);
    };
    let (id, inc) = match rest.split_once('@') {
        Some((id, inc)) => (id, Some(inc)),
        None => (rest, None),
    };
    if SessionId::new(id).is_err() {
        return Ok(None);
    }
    if let Some(inc) = inc {
        Incarnation::parse(inc)
            .map_err(|e| ClientError::Usage(format!("reference {reference:?}: {e}")))?;
    }
    let host = Host::parse(host)
        .map_err(|e| ClientError::Usage(format!("reference {reference:?}: {e}")))?;
    Ok(Some((host, rest.to_owned())))
}

/// Quotes `s` for a POSIX shell (the remote command line; SPEC.md §12.3).
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// How to reach other hosts: the ssh program and config, and the latch to run
/// there (SPEC.md §12.2). The CLI fills it from `LATCH_SSH`, `LATCH_SSH_CONFIG` and
/// `LATCH_REMOTE_BIN`; the library reads no environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshOptions {
    /// The ssh program (`ssh`).
    pub program: String,
    /// `-F FILE`, if any.
    pub config: Option<std::path::PathBuf>,
    /// The latch to run on the host (`latch`); a leading `~/` is left to the
    /// remote shell.
    pub remote_bin: String,
}

impl Default for SshOptions {
    fn default() -> Self {
        Self {
            program: "ssh".into(),
            config: None,
            remote_bin: "latch".into(),
        }
    }
}

impl SshOptions {
    /// The command ssh runs on the other host: the remote latch, then `bridge`.
    /// Nothing else.
    fn remote_command(&self) -> String {
        let bin = match self.remote_bin.strip_prefix("~/") {
            Some(rest) => format!("~/{}", shell_quote(rest)),
            None => shell_quote(&self.remote_bin),
        };
        format!("{bin} bridge")
    }

    /// `ssh [-F CONFIG] -T -- HOST 'latch' bridge`.
    fn command(&self, host: &Host) -> Command {
        let mut c = Command::new(&self.program);
        if let Some(cfg) = &self.config {
            c.arg("-F").arg(cfg);
        }
        c.args(["-T", "--", host.as_str()])
            .arg(self.remote_command());
        c
    }
}

/// A host and how to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remote {
    /// The host.
    pub host: Host,
    /// The ssh that reaches it.
    pub ssh: SshOptions,
}

// The request line's types live in latch-client, beside the decoder the bridge and
// its fuzz target run (SPEC.md §12.2).
pub use proto::{ConnectRequest, Op, Range, Request};

/// An error as another host's latch reported it (SPEC.md §10's error body).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorBody {
    pub kind: String,
    pub message: String,
    pub exit_code: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidates: Option<Vec<String>>,
}

impl ErrorBody {
    /// The body of `e`, as `--json` prints it.
    pub fn of(e: &ClientError) -> Self {
        Self {
            kind: e.kind().into(),
            message: e.to_string(),
            exit_code: e.exit_code(),
            candidates: match e {
                ClientError::Ambiguous { ids, .. } => {
                    Some(ids.iter().map(ToString::to_string).collect())
                }
                _ => None,
            },
        }
    }

    /// The error, with its kind and exit code (1..=12, else 1), named by host.
    pub fn relayed(self, host: &Host) -> ClientError {
        ClientError::Relayed {
            host: host.to_string(),
            kind: self.kind,
            exit_code: if (1..=12).contains(&self.exit_code) {
                self.exit_code
            } else {
                crate::exit::OTHER
            },
            message: self.message,
        }
    }
}

/// The bridge's first line on stdout.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Header {
    /// The remote protocol version chosen; absent when refused.
    pub remote: Option<u16>,
    /// The bridge's latch version.
    pub latch: String,
    /// The remote protocol versions the bridge speaks.
    pub supported: Range,
    /// The wire protocol versions (SPEC.md §5.1) its daemons speak.
    pub wire: Range,
    /// Why the request was refused, if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
}

/// The bridge's second line for a connect request.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TargetLine {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record: Option<Box<Record>>,
    /// The derived status's name, code, signal and reason (SPEC.md §9.7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_signal: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_reason: Option<String>,
    /// Whether the bridge is connected to the daemon (bytes follow).
    pub connected: bool,
    /// The final screen, when the program has exited and the daemon is gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_screen: Option<Box<latch_registry::FinalScreen>>,
    /// The `new --json` output, for a create request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<serde_json::Value>,
    /// The creation's receipt (without a host), for a create request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt: Option<Box<Receipt>>,
    /// The host's `defaults.json` values that shape an attach (absent from an older
    /// bridge, or when that file cannot be read there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attach_defaults: Option<AttachDefaults>,
}

/// What the host's `defaults.json` says about attaching there (SPEC.md §12.2): an
/// attach through `--host` uses the host's defaults, as one run on the host would.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AttachDefaults {
    /// `attachHistory`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attach_history: Option<u32>,
    /// `detachKey`, in its notation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detach_key: Option<String>,
}

fn request_of(op: Op, remote: Range) -> Request {
    Request {
        remote,
        latch: env!("CARGO_PKG_VERSION").into(),
        op,
    }
}

fn wire_range() -> Range {
    Range {
        min: latch_wire::SUPPORTED.min,
        max: latch_wire::SUPPORTED.max,
    }
}

/// The bridge's header for a request's range: the highest common version, or a
/// refusal naming both sides (exit 8, never a downgrade outside the range asked).
pub fn answer(asked: Range, their_latch: &str) -> Header {
    let hi = asked.max.min(REMOTE_MAX);
    let lo = asked.min.max(REMOTE_MIN);
    let ours = Range {
        min: REMOTE_MIN,
        max: REMOTE_MAX,
    };
    let error = (lo > hi).then(|| ErrorBody {
        kind: "protocol".into(),
        message: format!(
            "protocol mismatch: this latch {} speaks remote protocol {}..={}; the latch {} asked \
             for {}..={}; install the same latch on both hosts",
            env!("CARGO_PKG_VERSION"),
            REMOTE_MIN,
            REMOTE_MAX,
            their_latch,
            asked.min,
            asked.max
        ),
        exit_code: crate::exit::PROTOCOL,
        candidates: None,
    });
    Header {
        remote: (lo <= hi).then_some(hi),
        latch: env!("CARGO_PKG_VERSION").into(),
        supported: ours,
        wire: wire_range(),
        error,
    }
}

/// ssh's stderr, forwarded to ours as it comes, its tail kept.
#[derive(Debug, Clone, Default)]
struct Tail(
    Arc<Mutex<Vec<u8>>>,
    Arc<Mutex<bool>>,
    Arc<std::sync::Condvar>,
);

impl Tail {
    fn follow(
        &self,
        mut from: impl Read + Send + 'static,
        forward: bool,
    ) -> std::thread::JoinHandle<()> {
        let tail = self.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            loop {
                let n = match from.read(&mut buf) {
                    Ok(0) | Err(_) => {
                        if let Ok(mut done) = tail.1.lock() {
                            *done = true;
                        }
                        tail.2.notify_all();
                        return;
                    }
                    Ok(n) => n,
                };
                if forward {
                    let mut err = std::io::stderr();
                    let _ = err.write_all(&buf[..n]);
                    let _ = err.flush();
                }
                if let Ok(mut t) = tail.0.lock() {
                    t.extend_from_slice(&buf[..n]);
                    let over = t.len().saturating_sub(STDERR_TAIL);
                    t.drain(..over);
                }
            }
        })
    }

    /// Waits until the stream has ended (what ssh wrote last is in), at most
    /// `limit`: a ControlMaster ssh may keep the stream open after it exits.
    fn wait_end(&self, limit: Duration) {
        let Ok(done) = self.1.lock() else { return };
        let _ = self.2.wait_timeout_while(done, limit, |done| !*done);
    }

    fn text(&self) -> String {
        self.0
            .lock()
            .map(|t| String::from_utf8_lossy(&t).trim().to_owned())
            .unwrap_or_default()
    }
}

/// The exit code of an ssh that ended without the bridge's header, explained
/// (SPEC.md §12.4): 255 is ssh's own failure (exit 7); the remote shell's 127 or
/// 126 means no latch there (exit 8); an older latch without `bridge` is exit 8.
fn explain(remote: &Remote, code: Option<i32>, stderr: &str) -> ClientError {
    let host = &remote.host;
    let said = if stderr.is_empty() {
        String::new()
    } else {
        format!(": {stderr}")
    };
    let bin = &remote.ssh.remote_bin;
    match code {
        Some(255) | None => ClientError::unreachable(
            UnreachableCause::Host,
            format!("cannot reach host {host} through ssh{said}"),
        ),
        Some(126 | 127) => ClientError::protocol(
            Mismatch::Remote,
            format!(
                "no latch on host {host} (the remote shell could not run {bin:?}{said}); install \
                 latch {} there (cargo install --path . in its source, or copy the binary) on the \
                 PATH of non-interactive ssh sessions, or set LATCH_REMOTE_BIN to its path there",
                env!("CARGO_PKG_VERSION")
            ),
        ),
        // An older latch rejects the unknown `bridge` subcommand, or a newer
        // request it cannot read, as a usage error.
        Some(c @ 2) => ClientError::protocol(
            Mismatch::OlderRemote,
            format!(
                "the latch on host {host} predates this request (it exited {c} on `latch \
                 bridge`{said}); install latch {} there",
                env!("CARGO_PKG_VERSION")
            ),
        ),
        Some(c) => ClientError::protocol(
            Mismatch::Remote,
            format!("the latch on host {host} did not answer as a bridge (exit {c}){said}"),
        ),
    }
}

/// Checks a header: a refusal becomes its error, and a version outside ours (or a
/// wire range without a common version) is exit 8 naming both.
/// Returns the version the bridge chose, which must lie in `asked`.
fn check_header(host: &Host, line: &[u8], asked: Range) -> Result<u16, ClientError> {
    let header: Header = serde_json::from_slice(line).map_err(|e| {
        ClientError::protocol(
            Mismatch::Remote,
            format!(
                "the latch on host {host} answered with an unreadable header ({e}): {:?}",
                String::from_utf8_lossy(&line[..line.len().min(200)])
            ),
        )
    })?;
    if let Some(e) = header.error {
        return Err(e.relayed(host));
    }
    let wire = wire_range();
    let chosen = header
        .remote
        .filter(|v| (asked.min..=asked.max).contains(v));
    let ok = chosen.is_some() && header.wire.min.max(wire.min) <= header.wire.max.min(wire.max);
    let Some(version) = chosen.filter(|_| ok) else {
        return Err(ClientError::protocol(
            Mismatch::Remote,
            format!(
                "the latch on host {host} is {} (remote protocol {}..={}, wire {}..={}); this \
                 latch {} speaks remote {}..={}, wire {}..={}; install the same latch on both hosts",
                header.latch,
                header.supported.min,
                header.supported.max,
                header.wire.min,
                header.wire.max,
                env!("CARGO_PKG_VERSION"),
                asked.min,
                asked.max,
                wire.min,
                wire.max
            ),
        ));
    };
    Ok(version)
}

/// Reads one line (without its `\n`) of at most `max` bytes, byte by byte, so
/// nothing after it is consumed. `Ok(None)`: EOF first.
fn read_line_raw(r: &mut impl Read, max: usize) -> std::io::Result<Option<Vec<u8>>> {
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    loop {
        match r.read(&mut b) {
            Ok(0) => return Ok(None),
            Ok(_) if b[0] == b'\n' => return Ok(Some(line)),
            Ok(_) => {
                if line.len() >= max {
                    return Err(std::io::Error::other(format!(
                        "a line over its bound of {max} bytes"
                    )));
                }
                line.push(b[0]);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

fn spawn_err(ssh: &SshOptions, e: std::io::Error) -> ClientError {
    ClientError::unreachable(
        UnreachableCause::Host,
        format!("cannot run ssh ({}): {e}", ssh.program),
    )
}

/// The ssh process of a command, and its stderr's tail.
#[derive(Debug)]
pub struct Ssh {
    remote: Remote,
    child: Child,
    tail: Tail,
}

impl Ssh {
    /// Waits for ssh (at most a few seconds: it ends once its stdin is closed)
    /// and explains why no answer came.
    fn failure(mut self, read: Option<std::io::Error>) -> ClientError {
        // Our unreaped child: its pidfd names it until we wait for it.
        if let Ok(fd) = latch_registry::PidFd::open(self.child.id()) {
            fd.wait_exit(SSH_EXIT_WAIT);
        }
        let code = match self.child.try_wait() {
            Ok(Some(st)) => st.code(),
            _ => None,
        };
        if code.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
            if let Some(e) = read {
                return ClientError::unreachable(
                    UnreachableCause::Host,
                    format!("host {}: no answer through ssh: {e}", self.remote.host),
                );
            }
        }
        // What ssh wrote last, once its stderr has ended.
        self.tail.wait_end(Duration::from_millis(500));
        explain(&self.remote, code, &self.tail.text())
    }
}

/// Where the answer after the header goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sink {
    /// Kept whole, within its kind's bound.
    Capture(Answer),
    /// Copied to our stdout as it comes (an `exec`'s output).
    Stdout,
}

/// Sends one request to `remote`'s bridge and reads its answer (SPEC.md §12.2):
/// the header, then everything the bridge writes until it ends. With `stdin`, these
/// bytes follow the request, then its end (a `meta patch`, bounded by the caller).
/// Returns the version chosen, the bridge's exit code and what was captured.
pub fn request(
    remote: &Remote,
    op: Op,
    asked: Range,
    stdin: Option<Vec<u8>>,
    sink: Sink,
) -> Result<(u16, i32, Vec<u8>), ClientError> {
    let host = &remote.host;
    let mut cmd = remote.ssh.command(host);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| spawn_err(&remote.ssh, e))?;
    let tail = Tail::default();
    let err_thread = tail.follow(child.stderr.take().expect("piped"), true);
    let mut input = child.stdin.take().expect("piped");
    let mut out = BufReader::new(child.stdout.take().expect("piped"));
    let mut ssh = Ssh {
        remote: remote.clone(),
        child,
        tail,
    };
    let req =
        serde_json::to_string(&request_of(op, asked)).map_err(|e| ClientError::failed("", e))?;
    let _ = input.write_all(format!("{req}\n").as_bytes());
    match stdin {
        // A writer of its own: the bridge may answer before it has read it all.
        Some(bytes) => {
            std::thread::spawn(move || {
                let _ = input.write_all(&bytes);
            });
        }
        None => drop(input),
    }
    let mut line = Vec::new();
    let got = (&mut out)
        .take(HEADER_MAX as u64)
        .read_until(b'\n', &mut line);
    if !line.ends_with(b"\n") {
        drop(out);
        return Err(ssh.failure(got.err()));
    }
    line.pop();
    let version = check_header(host, &line, asked)?;
    let mut captured = Vec::new();
    let io = |e: std::io::Error| ClientError::failed(format!("host {host}"), e);
    match sink {
        Sink::Capture(kind) => {
            let max = kind.max();
            (&mut out)
                .take(max as u64 + 1)
                .read_to_end(&mut captured)
                .map_err(io)?;
            if captured.len() > max {
                // Nothing more is read: ssh (ours) ends, and the bridge with it.
                drop(out);
                let _ = ssh.child.kill();
                let _ = ssh.child.wait();
                return Err(ClientError::protocol(
                    Mismatch::Remote,
                    format!(
                        "host {host} sent a {} answer over its bound of {max} bytes",
                        kind.name()
                    ),
                ));
            }
        }
        Sink::Stdout => {
            let mut stdout = std::io::stdout();
            loop {
                let buf = out.fill_buf().map_err(io)?;
                if buf.is_empty() {
                    break;
                }
                let n = buf.len();
                stdout
                    .write_all(buf)
                    .and_then(|()| stdout.flush())
                    .map_err(io)?;
                out.consume(n);
            }
        }
    }
    let status = ssh.child.wait().map_err(io)?;
    let _ = err_thread.join();
    match status.code() {
        // ssh itself failed after the header: the connection dropped.
        Some(255) | None => Err(ClientError::unreachable(
            UnreachableCause::Host,
            format!("host {host}: the ssh connection ended: {}", ssh.tail.text()),
        )),
        Some(c) => Ok((version, c, captured)),
    }
}

/// A version-2 request with a typed answer (SPEC.md §12.2): `{"ok": VALUE}`, an
/// error, or `unsupported`.
pub fn call<T: serde::de::DeserializeOwned>(
    remote: &Remote,
    op: Op,
    answer: Answer,
    stdin: Option<Vec<u8>>,
) -> Result<T, ClientError> {
    let name = op.name().to_owned();
    let (_, _, out) = request(remote, op, V2, stdin, Sink::Capture(answer))?;
    let host = &remote.host;
    let line: proto::Answered<T> = serde_json::from_slice(&out).map_err(|e| {
        ClientError::protocol(
            Mismatch::Remote,
            format!("host {host} sent an unreadable {name} answer ({e})"),
        )
    })?;
    match line {
        proto::Answered::Ok(v) => Ok(v),
        proto::Answered::Error(e) => Err(e.relayed(host)),
        proto::Answered::Unsupported(what) => Err(ClientError::protocol(
            Mismatch::Remote,
            format!(
                "the latch on host {host} does not serve {what:?}; install latch {} there",
                env!("CARGO_PKG_VERSION")
            ),
        )),
    }
}

/// Version 2 only: what a typed request asks for.
pub const V2: Range = Range { min: 2, max: 2 };

/// Any version a caller speaks: `connect`, and a version-1 `ls`.
pub const ANY: Range = Range {
    min: CALLER_MIN,
    max: REMOTE_MAX,
};

/// The creation a bridge resolved, as it reported it.
#[derive(Debug)]
pub struct RemoteTarget {
    pub session: SessionRef,
    pub record: Record,
    pub status: SessionStatus,
    pub final_screen: Option<latch_registry::FinalScreen>,
    pub created: Option<serde_json::Value>,
    pub receipt: Option<Receipt>,
    /// The host's attach defaults (empty if it sent none).
    pub defaults: AttachDefaults,
}

/// A connection through a bridge to a remote daemon: not yet negotiated.
#[derive(Debug)]
pub struct Relay {
    pub target: RemoteTarget,
    /// The local end: HELLO and BIND go through it to the daemon.
    stream: Option<UnixStream>,
    pub ssh: Ssh,
}

impl Relay {
    /// Whether the bridge is connected to the daemon (HELLO may follow).
    pub fn has_stream(&self) -> bool {
        self.stream.is_some()
    }

    /// Negotiates with the remote daemon over the relay (SPEC.md §5.1), end to end.
    pub fn negotiate(&mut self) -> Result<Connection, ClientError> {
        let Some(stream) = self.stream.take() else {
            // The bridge found no daemon to connect to: one that is gone with its
            // program, or one whose socket cannot be reached while it runs.
            let cause = if self.target.status == SessionStatus::Running {
                UnreachableCause::NotListening
            } else {
                UnreachableCause::Exited
            };
            return Err(ClientError::unreachable(
                cause,
                format!(
                    "session {} on host {} is {}",
                    self.target.session.id, self.ssh.remote.host, self.target.status
                ),
            ));
        };
        Connection::over(stream, crate::DEFAULT_TIMEOUT)
    }
}

/// Asks `host`'s bridge to resolve (or create) a session and connect to its daemon
/// (SPEC.md §12.2 connect). The local end of a socket pair is ssh's stdin and
/// stdout, so the connection gets the same timeouts and peer checks as a local one.
pub fn connect(remote: &Remote, req: ConnectRequest) -> Result<Relay, ClientError> {
    let host = &remote.host;
    let (mine, theirs) = UnixStream::pair().map_err(|e| ClientError::failed("", e))?;
    let theirs_out: OwnedFd = theirs
        .try_clone()
        .map_err(|e| ClientError::failed("", e))?
        .into();
    let mut cmd = remote.ssh.command(host);
    cmd.stdin(Stdio::from(OwnedFd::from(theirs)))
        .stdout(Stdio::from(theirs_out))
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| spawn_err(&remote.ssh, e))?;
    drop(cmd); // our copies of ssh's ends: EOF must reach us when ssh ends
    let tail = Tail::default();
    tail.follow(child.stderr.take().expect("piped"), true);
    let ssh = Ssh {
        remote: remote.clone(),
        child,
        tail,
    };
    let mut mine = mine;
    let req = serde_json::to_string(&request_of(Op::Connect(req), ANY))
        .map_err(|e| ClientError::failed("", e))?;
    let _ = mine.write_all(format!("{req}\n").as_bytes());
    let _ = mine.set_read_timeout(Some(HEADER_TIMEOUT));
    let header = match read_line_raw(&mut mine, HEADER_MAX) {
        Ok(Some(l)) => l,
        Ok(None) => {
            drop(mine);
            return Err(ssh.failure(None));
        }
        Err(e) => {
            drop(mine);
            return Err(ssh.failure(Some(e)));
        }
    };
    check_header(host, &header, ANY)?;
    let line = match read_line_raw(&mut mine, LINE_MAX) {
        Ok(Some(l)) => l,
        Ok(None) => {
            drop(mine);
            return Err(ssh.failure(None));
        }
        Err(e) => {
            drop(mine);
            return Err(ssh.failure(Some(e)));
        }
    };
    let t: TargetLine = serde_json::from_slice(&line).map_err(|e| {
        ClientError::protocol(
            Mismatch::Remote,
            format!("the latch on host {host} sent an unreadable target ({e})"),
        )
    })?;
    if let Some(e) = t.error {
        return Err(e.relayed(host));
    }
    let Some(record) = t.record else {
        return Err(ClientError::protocol(
            Mismatch::Remote,
            format!("the latch on host {host} named no session"),
        ));
    };
    let status = SessionStatus::from_parts(
        t.status.as_deref(),
        t.exit_code,
        t.exit_signal,
        t.status_reason,
    );
    let session = SessionRef::new(record.id.clone(), record.incarnation);
    let _ = mine.set_read_timeout(None);
    Ok(Relay {
        target: RemoteTarget {
            session,
            record: *record,
            status,
            final_screen: t.final_screen.map(|b| *b),
            created: t.created,
            receipt: t.receipt.map(|b| *b),
            defaults: t.attach_defaults.unwrap_or_default(),
        },
        stream: t.connected.then_some(mine),
        ssh,
    })
}
