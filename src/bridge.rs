//! `latch bridge`: the remote end of `--host` (SPEC.md §12). It reads one request
//! line on stdin, answers a header, and then either runs a latch command in this
//! process, or resolves a REF and relays bytes between its stdio and the session's
//! socket. It never speaks the session protocol itself: HELLO and BIND come from
//! the caller, so a relay cannot act on any session by itself (§12.5).

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use latch_client::remote::proto::{
    Answered, CommandRequest, GcRequest, KillByProof, LsRequest, PatchRequest, PatchedAnswer,
    Pinned, Removal, Removed, Resolve, RestartedAnswer, Restarting, Verified, VerifyRequest,
};

use crate::commands::{registry_ops, sessions};
use latch_client::{exit, Client, ClientError, KillOutcome, Location, Receipt};
use latch_wire::SessionRef;

use crate::remote::{self, ConnectRequest, Op, Request, TargetLine};
use crate::shapes::ErrorBodyOwned;

/// Writes one JSON line on stdout, unbuffered.
fn line<T: serde::Serialize>(value: &T) {
    let mut out = std::io::stdout().lock();
    let _ = serde_json::to_writer(&mut out, value);
    let _ = out.write_all(b"\n");
    let _ = out.flush();
}

/// Set once this process is a bridge: from then on it never routes (SPEC.md §12.2).
static ACTIVE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether this process is a bridge. A bridge never goes further: everything it
/// receives is for its own registry, a `HOST:ID` there is an id (which fails
/// validation), and `--host` and `$LATCH_HOST` never route (SPEC.md §12.2).
pub fn active() -> bool {
    ACTIVE.load(std::sync::atomic::Ordering::Relaxed)
}

/// Runs the bridge; returns the exit code.
pub fn run() -> i32 {
    ACTIVE.store(true, std::sync::atomic::Ordering::Relaxed);
    // Nor does anything it runs: no LATCH_HOST (SPEC.md §12.2).
    // SAFETY (edition 2021: safe fn): no other thread runs yet.
    std::env::remove_var("LATCH_HOST");
    let mut stdin = std::io::stdin().lock();
    let request = match read_request(&mut stdin) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("latch bridge: {e}");
            return e.exit_code();
        }
    };
    let header = remote::answer(request.remote, &request.latch);
    let refused = header.error.as_ref().map(|e| e.exit_code);
    line(&header);
    if let Some(code) = refused {
        return code;
    }
    drop(stdin);
    match request.op {
        Op::Command(req) => command(req),
        Op::KillByProof(req) => answer_line(kill_by_proof(req)),
        Op::Status(req) => answer_line(status(req)),
        Op::Ls(req) => answer_line(ls(req)),
        Op::Patch(req) => answer_line(patch(req)),
        Op::Gc(req) => answer_line(gc(req)),
        Op::Remove(req) => answer_line(remove(req)),
        Op::Restart(req) => answer_line(restart(req)),
        Op::Verify(req) => answer_line(verify(req)),
        // Version 1's exec (argument re-runs) is a caller's only, for a version-1
        // host's `ls`: no version-2 bridge serves it.
        Op::Exec { .. } => {
            line(&Answered::<()>::Unsupported("exec".into()));
            exit::PROTOCOL
        }
        Op::Unknown(name) => {
            line(&Answered::<()>::Unsupported(name));
            exit::PROTOCOL
        }
        Op::Connect(req) => match connect(req) {
            Ok(code) => code,
            Err(e) => {
                line(&TargetLine {
                    error: Some(ErrorBodyOwned::of(&e)),
                    record: None,
                    status: None,
                    exit_code: None,
                    exit_signal: None,
                    status_reason: None,
                    connected: false,
                    final_screen: None,
                    created: None,
                    receipt: None,
                    attach_defaults: None,
                });
                e.exit_code()
            }
        },
    }
}

/// Runs a command the caller parsed, in this process, printing as it does
/// locally (SPEC.md §12.2 `command`); its exit code.
fn command(req: CommandRequest) -> i32 {
    let json = req.json;
    let run = || -> Result<i32, ClientError> {
        let command: crate::commands::HostCommand = serde_json::from_value(req.command)
            .map_err(|e| ClientError::Usage(format!("unreadable command: {e}")))?;
        let root = req.root.map(PathBuf::from);
        let receipt = match req.receipt {
            Some(r) => Some(take_receipt_value(
                &open(root.as_ref().and_then(|p| p.to_str()))?,
                r,
            )?),
            None => None,
        };
        command.run(root.as_ref(), receipt, json)
    };
    match run() {
        Ok(code) => code,
        Err(e) => crate::output::report_error(&e, json),
    }
}

/// A version-2 answer line: `ok`, or the error; its exit code.
fn answer_line<T: serde::Serialize>(result: Result<T, ClientError>) -> i32 {
    match result {
        Ok(v) => {
            line(&Answered::Ok(v));
            exit::OK
        }
        Err(e) => {
            line(&Answered::<()>::Error(ErrorBodyOwned::of(&e)));
            e.exit_code()
        }
    }
}

/// This registry, with the request's owner precondition.
fn open_pinned(p: &Pinned) -> Result<(Client, SessionRef), ClientError> {
    let owner = crate::commands::parse_owner(p.owner.as_deref())?;
    let client = open(p.root.as_deref())?.with_owner(owner);
    let session: SessionRef = p
        .session
        .parse()
        .map_err(|e| ClientError::Usage(format!("session {:?}: {e}", p.session)))?;
    Ok((client, session))
}

/// kill's fallback on this host (SPEC.md §9.11): the library's, pinned to the
/// creation the caller resolved.
fn kill_by_proof(req: KillByProof) -> Result<KillOutcome, ClientError> {
    let (client, session) = open_pinned(&req.target)?;
    let here = Location::Here(&client);
    let found = here.resolve(&session.to_string(), Some(session.incarnation), None)?;
    let wait = req.wait_ms.map(std::time::Duration::from_millis);
    here.kill_by_proof(&found, req.signal, wait, req.draining, String::new())
}

/// This registry with the owner precondition, and the request's REF,
/// incarnation and receipt, checked as a local command checks them.
fn open_resolve(
    r: &Resolve,
) -> Result<(Client, Option<latch_wire::Incarnation>, Option<Receipt>), ClientError> {
    let owner = crate::commands::parse_owner(r.owner.as_deref())?;
    let client = open(r.root.as_deref())?.with_owner(owner);
    let expect = expect_of(r.expect.as_deref())?;
    let receipt = r
        .receipt
        .clone()
        .map(|rc| take_receipt_value(&client, rc))
        .transpose()?;
    Ok((client, expect, receipt))
}

/// A request's `expect`, an incarnation.
fn expect_of(s: Option<&str>) -> Result<Option<latch_wire::Incarnation>, ClientError> {
    s.map(|s| {
        latch_wire::Incarnation::parse(s)
            .map_err(|e| ClientError::Usage(format!("expect {s:?}: {e}")))
    })
    .transpose()
}

/// A receipt sent with a request, as its own registry's: it names no host, and
/// this registry minted it.
fn take_receipt_value(client: &Client, r: Receipt) -> Result<Receipt, ClientError> {
    if r.host.is_some() {
        return Err(ClientError::Usage(
            "the receipt sent names a host; a bridge acts on its own host only".into(),
        ));
    }
    client.check_receipt(r, "sent with the request")
}

/// `ls --json`'s entries under the filters (SPEC.md §12.6).
fn ls(req: LsRequest) -> Result<Vec<serde_json::Value>, ClientError> {
    let client = open(req.root.as_deref())?;
    let owner = crate::commands::parse_owner(req.owner.as_deref())?;
    let want = crate::commands::parse_kv(&req.tags, "--tag")?;
    let entries =
        registry_ops::list_entries(&client, &want, req.status.as_deref(), owner.as_ref())?;
    registry_ops::ls_entries(&entries)
        .into_iter()
        .map(serde_json::to_value)
        .collect::<Result<_, _>>()
        .map_err(|e| ClientError::failed("", e))
}

fn patch(req: PatchRequest) -> Result<PatchedAnswer, ClientError> {
    let (client, expect, receipt) = open_resolve(&req.target)?;
    // Bounded as `meta patch` bounds its stdin (SPEC.md §10).
    let text = req.patch.to_string();
    if text.len() > registry_ops::PATCH_MAX_BYTES {
        return Err(ClientError::Usage(format!(
            "the patch is over its bound of {} bytes; nothing was changed",
            registry_ops::PATCH_MAX_BYTES
        )));
    }
    let patch = latch_client::MetaPatch::from_json(&text)?;
    let done = Location::Here(&client).patch(
        &req.target.reference,
        expect,
        receipt,
        &patch,
        req.exact_id,
    )?;
    Ok(PatchedAnswer {
        changed: done.changed,
        record: done.record,
    })
}

fn gc(req: GcRequest) -> Result<Vec<latch_client::GcReport>, ClientError> {
    let owner = crate::commands::parse_owner(req.owner.as_deref())?;
    let client = open(req.root.as_deref())?.with_owner(owner);
    let mut opts = latch_client::GcOptions::default();
    opts.dry_run = req.dry_run;
    opts.abandoned_cwd = req.abandoned_cwd;
    opts.grace = std::time::Duration::from_millis(req.grace_ms);
    opts.idle = req.idle_ms.map(std::time::Duration::from_millis);
    Location::Here(&client).gc(&opts)
}

fn remove(req: Removal) -> Result<Removed, ClientError> {
    let (client, expect, receipt) = open_resolve(&req.target)?;
    let (session, owner) =
        Location::Here(&client).remove(&req.target.reference, expect, receipt, req.force)?;
    Ok(Removed {
        session: session.to_string(),
        owner: owner.map(|o| o.as_str().to_owned()),
    })
}

fn restart(req: Restarting) -> Result<RestartedAnswer, ClientError> {
    let (client, expect, receipt) = open_resolve(&req.target)?;
    let grace = std::time::Duration::from_millis(req.grace_ms);
    let (previous, created) =
        Location::Here(&client).restart(&req.target.reference, expect, receipt, grace)?;
    let record = client
        .read_checked(&created.id)?
        .ok_or_else(|| ClientError::NotFound(created.id.to_string()))?;
    Ok(RestartedAnswer {
        previous: previous.to_string(),
        record,
    })
}

fn verify(req: VerifyRequest) -> Result<Verified, ClientError> {
    let client = open(req.root.as_deref())?;
    Location::Here(&client).verify(req.receipt)
}

/// The derived status of exactly this creation.
fn status(req: Pinned) -> Result<latch_client::SessionStatus, ClientError> {
    let (client, session) = open_pinned(&req)?;
    let here = Location::Here(&client);
    let found = here.resolve(&session.to_string(), Some(session.incarnation), None)?;
    here.status_now(&found)
}

fn read_request(stdin: &mut impl Read) -> Result<Request, ClientError> {
    let mut buf = Vec::new();
    let mut b = [0u8; 1];
    loop {
        match stdin.read(&mut b) {
            Ok(0) => return Err(ClientError::Usage("no request on stdin".into())),
            Ok(_) if b[0] == b'\n' => break,
            Ok(_) if buf.len() >= remote::LINE_MAX => {
                return Err(ClientError::Usage("request line over its bound".into()))
            }
            Ok(_) => buf.push(b[0]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(ClientError::failed("stdin", e)),
        }
    }
    latch_client::remote::proto::decode_request(&buf).map_err(|e| {
        // An unreadable request may come from a newer latch: say which we are.
        ClientError::Usage(format!(
            "unreadable request ({e}); this is latch {} (remote protocol {}..={})",
            env!("CARGO_PKG_VERSION"),
            remote::REMOTE_MIN,
            remote::REMOTE_MAX
        ))
    })
}

fn open(root: Option<&str>) -> Result<Client, ClientError> {
    crate::commands::open(root.map(PathBuf::from).as_ref())
}

/// Resolves (or creates) the session, connects to its daemon, reports the target,
/// then relays until either side closes.
fn connect(req: ConnectRequest) -> Result<i32, ClientError> {
    let receipt = req.receipt.clone();
    if receipt.as_ref().is_some_and(|r| r.host.is_some()) {
        return Err(ClientError::Usage(
            "the receipt sent names a host; a bridge acts on its own host only".into(),
        ));
    }
    let client = open(req.root.as_deref())?;
    let mut created = None;
    let reference = match (&req.create, &req.reference) {
        (Some(spec), _) => {
            let (reference, value) = create(req.root.as_deref(), spec.clone())?;
            created = Some(value);
            reference
        }
        (None, Some(r)) => r.clone(),
        (None, None) => return Err(ClientError::Usage("no session named".into())),
    };
    // As a local command resolves it, under --expect and the receipt (SPEC.md §9.10).
    let expect = expect_of(req.expect.as_deref())?;
    let receipt = receipt
        .map(|r| client.check_receipt(r, "sent with the request"))
        .transpose()?;
    let here = Location::Here(&client);
    let target = match req.kill {
        Some(signal) => here.resolve_for_kill(&reference, expect, receipt, signal)?,
        None => here.resolve(&reference, expect, receipt)?,
    };
    let status = target.status.clone();
    let json = crate::shapes::SessionJson::new(&target.record, &status);
    let socket = UnixStream::connect(client.registry().socket_path(&target.session.id)).ok();
    if let Some(s) = &socket {
        remote::check_peer_uid(s)?;
    }
    let final_screen = if socket.is_none() {
        client
            .final_screen(&target.session)
            .ok()
            .flatten()
            .map(Box::new)
    } else {
        None
    };
    line(&TargetLine {
        error: None,
        record: Some(Box::new(target.record.clone())),
        status: Some(json.status.to_owned()),
        exit_code: json.exit_code,
        exit_signal: json.exit_signal,
        status_reason: json.status_reason,
        connected: socket.is_some(),
        final_screen,
        receipt: created.as_ref().map(|_| {
            Box::new(client.receipt_for(&latch_client::Created::of_record(&target.record)))
        }),
        created,
        attach_defaults: client
            .registry()
            .defaults()
            .ok()
            .map(|d| crate::remote::AttachDefaults {
                attach_history: d.attach_history,
                detach_key: d.detach_key,
            }),
    });
    match socket {
        Some(s) => relay(s),
        None => Ok(exit::OK),
    }
}

/// The create a `connect` asks for (SPEC.md §12.2): `new`'s arguments as its
/// caller parsed them, created here detached in this process by `new`'s own step;
/// what `new -d --json` prints. They cannot name a host: `--host` is no argument of
/// `new`.
fn create(
    root: Option<&str>,
    spec: serde_json::Value,
) -> Result<(String, serde_json::Value), ClientError> {
    let args: crate::cli::NewArgs = serde_json::from_value(spec)
        .map_err(|e| ClientError::Usage(format!("unreadable create arguments: {e}")))?;
    if !args.detached || args.receipt.is_some() {
        return Err(ClientError::Usage(
            "a bridge creates detached, and writes no receipt file".into(),
        ));
    }
    let client = sessions::new_client(root.map(PathBuf::from).as_ref(), &args)?;
    let (session, shape) = match sessions::create_or_join(&client, &args, (24, 80))? {
        sessions::Made::Created(created) => (
            SessionRef::new(created.id.clone(), created.incarnation),
            crate::shapes::CreatedJson::from(&created),
        ),
        sessions::Made::Joined(target) => {
            eprintln!("latch: session {} was already running", target.session.id);
            (target.session, sessions::created_json(&target.record))
        }
    };
    let value = serde_json::to_value(shape).map_err(|e| ClientError::failed("", e))?;
    Ok((session.to_string(), value))
}

/// Copies stdin to the socket and the socket to stdout, unbuffered, until the
/// daemon closes (or stdout does); stdin's end is passed on as a half close.
fn relay(socket: UnixStream) -> Result<i32, ClientError> {
    let io = |e: std::io::Error| ClientError::failed("", e);
    let mut to_daemon = socket.try_clone().map_err(io)?;
    std::thread::spawn(move || {
        let mut stdin = std::fs::File::from(
            std::io::stdin()
                .as_fd()
                .try_clone_to_owned()
                .expect("stdin"),
        );
        let _ = std::io::copy(&mut stdin, &mut to_daemon);
        let _ = to_daemon.shutdown(std::net::Shutdown::Write);
    });
    let mut stdout =
        std::fs::File::from(std::io::stdout().as_fd().try_clone_to_owned().map_err(io)?);
    let mut from_daemon = socket;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from_daemon.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        if stdout.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    Ok(exit::OK)
}
