//! One function per command.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use latch_client::{
    exit, AttachEvent, AttachMode, Client, ClientError, Entry, KillOutcome, MetaPatch, NewSession,
    PeekFormat, PeekOptions, PeekScope, RemoveMode, SessionStatus, Target, UnreachableCause,
};
use latch_registry::root::resolve_root;
use latch_wire::{Incarnation, LegacyPolicy, Owner, SessionId};
use serde_json::json;

use crate::cli::{Cli, Command, Expect, MetaOp, NewArgs, ReceiptOp};
use crate::{attach, events, keys, output};

fn usage(msg: impl Into<String>) -> ClientError {
    ClientError::Usage(msg.into())
}

fn open(root: Option<&PathBuf>) -> Result<Client, ClientError> {
    let root = resolve_root(root.map(PathBuf::as_path))?;
    let exe =
        std::env::current_exe().map_err(|e| ClientError::Other(format!("current_exe: {e}")))?;
    Client::open(&root, exe)
}

fn parse_owner(s: Option<&str>) -> Result<Option<Owner>, ClientError> {
    s.map(|s| Owner::new(s).map_err(|e| usage(format!("--owner {s:?}: {e}"))))
        .transpose()
}

/// Opens the registry with the command's owner precondition (SPEC.md §9.11).
fn open_for(root: Option<&PathBuf>, e: &Expect) -> Result<Client, ClientError> {
    let owner = parse_owner(e.owner.as_deref())?;
    Ok(open(root)?.with_owner(owner))
}

fn parse_expect(e: &Expect) -> Result<Option<Incarnation>, ClientError> {
    e.expect
        .as_deref()
        .map(|s| Incarnation::parse(s).map_err(|err| usage(format!("--expect {s:?}: {err}"))))
        .transpose()
}

fn resolve(client: &Client, reference: &str, expect: &Expect) -> Result<Target, ClientError> {
    let mut want = parse_expect(expect)?;
    if let Some(path) = &expect.receipt {
        let receipt = client.load_receipt(path)?;
        if want.is_some_and(|w| !w.ct_eq(&receipt.incarnation)) {
            return Err(usage("--expect and --receipt name different incarnations"));
        }
        want = Some(receipt.incarnation);
        // The receipt pins the creation; the REF must name the same id.
        let target = client.resolve(reference, want.as_ref())?;
        if target.session.id != receipt.id {
            return Err(usage(format!(
                "receipt is for session {}, not {}",
                receipt.id, target.session.id
            )));
        }
        return Ok(target);
    }
    client.resolve(reference, want.as_ref())
}

fn parse_kv(items: &[String], what: &str) -> Result<Vec<(String, String)>, ClientError> {
    items
        .iter()
        .map(|kv| {
            kv.split_once('=')
                .filter(|(k, _)| !k.is_empty())
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .ok_or_else(|| usage(format!("{what} {kv:?} is not K=V")))
        })
        .collect()
}

fn parse_signal(s: &str) -> Result<i32, ClientError> {
    if let Ok(n) = s.parse::<i32>() {
        return Ok(n);
    }
    let upper = s.to_ascii_uppercase();
    let name = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    name.parse::<nix::sys::signal::Signal>()
        .map(|sig| sig as i32)
        .map_err(|_| usage(format!("unknown signal {s:?}")))
}

fn secs(s: f64) -> Result<Duration, ClientError> {
    Duration::try_from_secs_f64(s).map_err(|_| usage(format!("invalid duration {s}")))
}

/// Runs the parsed command; returns the exit code.
pub fn run(cli: Cli) -> Result<i32, ClientError> {
    let root = cli.root.as_ref();
    match cli.command {
        Command::Daemon { root, spec } => {
            let spec = match spec {
                Some(s) => s,
                None => {
                    let mut s = String::new();
                    std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
                        .map_err(|e| usage(format!("daemon spec on stdin: {e}")))?;
                    s
                }
            };
            // From here on stdin is /dev/null, as the daemon expects.
            let null =
                std::fs::File::open("/dev/null").map_err(|e| ClientError::Other(e.to_string()))?;
            nix::unistd::dup2_stdin(&null).map_err(|e| ClientError::Other(format!("dup2: {e}")))?;
            run_daemon(root, &spec)
        }
        Command::New(args) => new(root, args),
        Command::Attach {
            reference,
            read_only,
            detach_key,
            history,
            expect,
        } => {
            let client = open_for(root, &expect)?;
            let target = resolve(&client, &reference, &expect)?;
            let key = keys::parse_detach_key(&detach_key).map_err(usage)?;
            let history = match history {
                Some(n) => n,
                None => client
                    .registry()
                    .defaults()?
                    .attach_history
                    .map_or(0, |n| n as usize),
            };
            let history = history.min(latch_wire::limits::MAX_SCROLLBACK);
            attach::interactive(&client, &target.session, read_only, key, history)
        }
        Command::Peek {
            reference,
            plain: _,
            ansi,
            full,
            wait,
            timeout,
            follow,
            expect,
        } => {
            let client = open_for(root, &expect)?;
            let target = resolve(&client, &reference, &expect)?;
            if follow {
                return peek_follow(&client, &target, !ansi);
            }
            peek(
                &client,
                &target,
                !ansi,
                full,
                wait.as_deref(),
                secs(timeout)?,
            )
        }
        Command::Send {
            reference,
            text,
            keys: as_keys,
            expect,
        } => {
            let client = open_for(root, &expect)?;
            let target = resolve(&client, &reference, &expect)?;
            let mut bytes = Vec::new();
            for arg in &text {
                match keys::key_bytes(arg).filter(|_| as_keys) {
                    Some(b) => bytes.extend_from_slice(&b),
                    None => bytes.extend_from_slice(arg.as_bytes()),
                }
            }
            if !client.send(&target.session, &bytes)? {
                eprintln!(
                    "latch: session {} ended while the input was being confirmed",
                    target.session.id
                );
            }
            Ok(exit::OK)
        }
        Command::Resize {
            reference,
            rows,
            cols,
            expect,
        } => {
            latch_wire::limits::check_size(rows, cols).map_err(|e| usage(e.to_string()))?;
            let client = open_for(root, &expect)?;
            let target = resolve(&client, &reference, &expect)?;
            client.connect(&target.session)?.resize(rows, cols)?;
            Ok(exit::OK)
        }
        Command::Ls {
            json,
            tags,
            status,
            owner,
        } => ls(root, json, &tags, status.as_deref(), owner.as_deref()),
        Command::Status {
            reference,
            json,
            expect,
        } => status(root, &reference, json, &expect),
        Command::Kill {
            reference,
            signal,
            wait,
            timeout,
            json,
            expect,
        } => {
            let sig = parse_signal(&signal)?;
            let client = open_for(root, &expect)?;
            let target = resolve(&client, &reference, &expect)?;
            let outcome = client.kill(&target.session, sig, wait.then_some(secs(timeout)?))?;
            let name = match outcome {
                KillOutcome::Signaled => "signaled",
                KillOutcome::Killed => "killed",
                KillOutcome::AlreadyExited => "already-exited",
                KillOutcome::TimedOut => "timed-out",
            };
            if json {
                println!(
                    "{}",
                    json!({"id": target.session.id.as_str(), "incarnation": target.session.incarnation.to_string(), "owner": target.record.owner, "outcome": name})
                );
            } else {
                println!("{}: {name}", target.session.id);
            }
            Ok(if outcome == KillOutcome::TimedOut {
                exit::BUSY
            } else {
                exit::OK
            })
        }
        Command::Tag {
            reference,
            tags,
            json,
            expect,
        } => {
            let client = open_for(root, &expect)?;
            let target = resolve(&client, &reference, &expect)?;
            let mut patch = MetaPatch::default();
            for (k, v) in parse_kv(&tags, "tag")? {
                latch_client::meta::validate_tag(&k, Some(&v))?;
                patch.tags.insert(k, (!v.is_empty()).then_some(v));
            }
            patched(&client, &target, &patch, json)
        }
        Command::Rename {
            reference,
            name,
            json,
            expect,
        } => {
            latch_client::validate_display_name(&name).map_err(|e| usage(e.to_string()))?;
            let client = open_for(root, &expect)?;
            let target = resolve(&client, &reference, &expect)?;
            let patch = MetaPatch {
                display_name: Some(Some(name)),
                ..MetaPatch::default()
            };
            patched(&client, &target, &patch, json)
        }
        Command::Meta {
            op:
                MetaOp::Patch {
                    id,
                    expect,
                    receipt,
                    owner,
                },
        } => {
            let id = SessionId::new(id.as_str()).map_err(|e| {
                usage(format!(
                    "--id {id:?}: {e} (meta patch takes exact ids only)"
                ))
            })?;
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                .map_err(|e| usage(format!("reading the patch from stdin: {e}")))?;
            let patch = MetaPatch::from_json(&text)?;
            let exp = Expect {
                expect,
                receipt,
                owner,
            };
            let client = open_for(root, &exp)?;
            let mut want = parse_expect(&exp)?;
            if let Some(path) = &exp.receipt {
                let r = client.load_receipt(path)?;
                if r.id != id || want.is_some_and(|w| !w.ct_eq(&r.incarnation)) {
                    return Err(usage("the receipt names another session or incarnation"));
                }
                want = Some(r.incarnation);
            }
            let done = client.patch(&id, want.as_ref(), &patch)?;
            let status = latch_client::derive_status(&done.record);
            println!(
                "{}",
                json!({"changed": done.changed, "metadata": output::record_json(&done.record, &status)})
            );
            Ok(exit::OK)
        }
        Command::Events {
            reference,
            all,
            follow,
            json,
            wait,
            timeout,
        } => {
            let client = open(root)?;
            events::run(
                &client,
                reference.as_deref(),
                all,
                follow,
                json,
                wait.as_deref(),
                secs(timeout)?,
            )
        }
        Command::Receipt {
            op: ReceiptOp::Verify { file, json },
        } => {
            let client = open(root)?;
            let (verdict, receipt, detail) = client.verify_receipt(&file);
            if json {
                println!(
                    "{}",
                    json!({
                        "verdict": verdict.name(),
                        "detail": detail,
                        "id": receipt.as_ref().map(|r| r.id.to_string()),
                        "incarnation": receipt.as_ref().map(|r| r.incarnation.to_string()),
                        "owner": receipt.as_ref().and_then(|r| r.owner.as_ref()),
                    })
                );
            } else {
                println!("{}: {detail}", verdict.name());
            }
            Ok(verdict.exit_code())
        }
        Command::LegacyDir { dir, json } => {
            let (dir, ids) = crate::legacy_dir::refresh(&open(root)?, &dir)?;
            if json {
                println!("{}", json!({ "dir": dir, "sessions": ids }));
            } else {
                println!(
                    "{}: {} session(s) {}",
                    dir.display(),
                    ids.len(),
                    ids.join(" ")
                );
                println!("use it with: PTY_ROOT={} pty list", dir.display());
            }
            Ok(0)
        }
        Command::Gc {
            dry_run,
            abandoned,
            idle_days,
            grace,
            owner,
            json,
        } => {
            let client = open(root)?.with_owner(parse_owner(owner.as_deref())?);
            let mut opts = latch_client::GcOptions::default();
            opts.dry_run = dry_run;
            opts.abandoned_cwd = abandoned;
            opts.grace = secs(grace)?;
            opts.idle = idle_days.map(|d| secs(d * 86_400.0)).transpose()?;
            let reports = client.gc(&opts)?;
            if json {
                println!(
                    "{}",
                    serde_json::to_value(&reports)
                        .map_err(|e| ClientError::Other(e.to_string()))?
                );
            } else {
                for r in &reports {
                    println!(
                        "{:<20} {:<9} {:<28} {}",
                        r.id,
                        r.observed,
                        r.action,
                        r.reason.as_deref().unwrap_or("")
                    );
                }
            }
            Ok(exit::OK)
        }
        Command::Exec { command } => {
            let env: BTreeMap<String, String> = std::env::vars().collect();
            Client::exec_update(&env, &command)?;
            use std::os::unix::process::CommandExt;
            let err = std::process::Command::new(&command[0])
                .args(&command[1..])
                .exec();
            Err(ClientError::Other(format!("exec {}: {err}", command[0])))
        }
        Command::Restart {
            reference,
            grace,
            json,
            expect,
        } => {
            let client = open_for(root, &expect)?;
            let target = resolve(&client, &reference, &expect)?;
            let created = client.restart(&target.session, secs(grace)?)?;
            if json {
                println!(
                    "{}",
                    json!({
                        "id": created.id.as_str(),
                        "previousIncarnation": target.session.incarnation.to_string(),
                        "incarnation": created.incarnation.to_string(),
                        "daemonPid": created.daemon_pid,
                        "childPid": created.child_pid,
                        "createdAt": created.created_at_ms,
                        "owner": created.owner,
                    })
                );
            } else {
                println!("{}@{}", created.id, created.incarnation);
            }
            Ok(exit::OK)
        }
        Command::Rm {
            reference,
            force,
            json,
            expect,
        } => {
            let client = open_for(root, &expect)?;
            let target = resolve(&client, &reference, &expect)?;
            client.remove(
                &target.session,
                if force {
                    RemoveMode::Force
                } else {
                    RemoveMode::ExitedOnly
                },
            )?;
            if json {
                println!(
                    "{}",
                    json!({"id": target.session.id.as_str(), "incarnation": target.session.incarnation.to_string(), "owner": target.record.owner, "outcome": "removed"})
                );
            } else {
                println!("{}: removed", target.session.id);
            }
            Ok(exit::OK)
        }
    }
}

fn patched(
    client: &Client,
    target: &Target,
    patch: &MetaPatch,
    json: bool,
) -> Result<i32, ClientError> {
    // The resolved incarnation is always the precondition: a replacement that slips
    // in after resolution is refused under the lock (exit 4).
    let done = client.patch(&target.session.id, Some(&target.session.incarnation), patch)?;
    if json {
        let status = latch_client::derive_status(&done.record);
        println!(
            "{}",
            json!({"changed": done.changed, "metadata": output::record_json(&done.record, &status)})
        );
    } else if done.changed.is_empty() {
        println!("{}: unchanged", target.session.id);
    } else {
        println!("{}: changed {}", target.session.id, done.changed.join(", "));
    }
    Ok(exit::OK)
}

fn run_daemon(root: PathBuf, spec: &str) -> Result<i32, ClientError> {
    let spec: latch_registry::CreateSpec =
        serde_json::from_str(spec).map_err(|e| usage(format!("daemon spec: {e}")))?;
    // The client started us in a new session with setsid. Fork once more so the
    // daemon is not a session leader (it can never acquire a controlling terminal)
    // and the client can reap its direct child at once.
    // SAFETY: no other threads exist yet in this process.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Parent { .. }) => Ok(0),
        Ok(nix::unistd::ForkResult::Child) => Ok(latch_daemon::run(root, spec)),
        Err(e) => Err(ClientError::Other(format!("fork: {e}"))),
    }
}

fn terminal_size() -> (u16, u16) {
    match attach::size() {
        (0, 0) => (24, 80),
        rc => rc,
    }
}

fn new(root: Option<&PathBuf>, args: NewArgs) -> Result<i32, ClientError> {
    let owner = parse_owner(args.owner.as_deref())?;
    let client = open(root)?;
    let id = args
        .id
        .as_deref()
        .map(|s| SessionId::new(s).map_err(|e| usage(format!("--id {s:?}: {e}"))))
        .transpose()?;
    let legacy_policy = match &args.legacy {
        Some(p) => LegacyPolicy::parse(p)
            .ok_or_else(|| usage(format!("--legacy {p:?}: expected off, observe or full")))?,
        None => client.registry().default_legacy_policy()?,
    };
    let (rows, cols) = terminal_size();
    let mut new = NewSession::default();
    new.id = id;
    new.name = args.name;
    new.command = args.command;
    new.cwd = args.cwd;
    new.env = parse_kv(&args.env, "--env")?;
    new.tags = parse_kv(&args.tags, "--tag")?
        .into_iter()
        .collect::<BTreeMap<_, _>>();
    new.rows = rows;
    new.cols = cols;
    new.legacy_policy = legacy_policy;
    new.owner = owner;
    let created = client.create(new)?;
    if let Some(path) = &args.receipt {
        client.write_receipt(path, &created)?;
    }
    if args.json {
        println!(
            "{}",
            json!({
                "id": created.id.as_str(),
                "incarnation": created.incarnation.to_string(),
                "daemonPid": created.daemon_pid,
                "childPid": created.child_pid,
                "createdAt": created.created_at_ms,
                "owner": created.owner,
            })
        );
    } else if args.detached {
        println!("{}@{}", created.id, created.incarnation);
    }
    if args.detached {
        return Ok(exit::OK);
    }
    let session = latch_wire::SessionRef::new(created.id, created.incarnation);
    attach::interactive(&client, &session, false, Some(0x1c), 0)
}

/// Prints a screen, ending it with a newline if it lacks one.
fn print_screen(screen: &[u8]) -> Result<(), ClientError> {
    let mut out = std::io::stdout().lock();
    let r = out.write_all(screen).and_then(|()| {
        if screen.last().is_some_and(|&b| b != b'\n') {
            out.write_all(b"\n")
        } else {
            Ok(())
        }
    });
    r.and_then(|()| out.flush())
        .map_err(|e| ClientError::Other(e.to_string()))
}

/// `--plain`/`--ansi` and `--full` as peek options.
fn peek_options(plain: bool, full: bool) -> PeekOptions {
    PeekOptions::default()
        .with_format(if plain {
            PeekFormat::Plain
        } else {
            PeekFormat::Ansi
        })
        .with_scope(if full {
            PeekScope::Scrollback
        } else {
            PeekScope::Screen
        })
}

fn peek(
    client: &Client,
    target: &Target,
    plain: bool,
    full: bool,
    wait: Option<&str>,
    timeout: Duration,
) -> Result<i32, ClientError> {
    let Some(text) = wait else {
        let mut bound = match client.connect(&target.session) {
            Ok(b) => b,
            Err(e) => return peek_exited(client, target, plain, full, wait, e),
        };
        print_screen(&bound.peek(peek_options(plain, full))?)?;
        return Ok(exit::OK);
    };
    match client.wait_for_text(&target.session, text, peek_options(plain, full), timeout) {
        Ok(screen) => {
            print_screen(&screen)?;
            Ok(exit::OK)
        }
        // An exited session's kept screen may show the text (SPEC §9.15).
        Err(e) => peek_exited(client, target, plain, full, wait, e),
    }
}

/// PEEK of a session whose program has exited: the screen it left (SPEC §9.15),
/// marked on stderr as exited with its code. Otherwise `e`.
fn peek_exited(
    client: &Client,
    target: &Target,
    plain: bool,
    full: bool,
    wait: Option<&str>,
    e: ClientError,
) -> Result<i32, ClientError> {
    let screen = final_screen(client, target, e)?;
    let text = match (plain, full) {
        (true, false) => &screen.plain,
        (false, false) => &screen.ansi,
        (true, true) => &screen.full_plain,
        (false, true) => &screen.full_ansi,
    };
    let id = &target.session.id;
    let (code, signal) = (screen.exit.code, screen.exit.signal);
    if let Some(want) = wait {
        let shown = if plain { &screen.full_plain } else { text };
        if !shown.contains(want) && !screen.plain.contains(want) {
            return Err(ClientError::unreachable(
                UnreachableCause::Exited,
                format!(
                    "session {id} has exited (code {code:?}, signal {signal:?}) and its screen does not show {want:?}"
                ),
            ));
        }
    }
    print_screen(text.as_bytes())?;
    eprintln!("{}", attach::ended_line(id, code, signal));
    Ok(exit::OK)
}

/// The kept final screen when `e` is because the program exited; else `e`.
fn final_screen(
    client: &Client,
    target: &Target,
    e: ClientError,
) -> Result<latch_registry::FinalScreen, ClientError> {
    if !matches!(e, ClientError::Unreachable { .. }) {
        return Err(e);
    }
    client.final_screen(&target.session)?.ok_or(e)
}

/// `peek --follow`: the screen, then new output as it comes (escapes stripped with
/// `plain`), until the program exits; then `[ID exited with code N]` on stderr and
/// its exit code (128 + N for signal N).
fn peek_follow(client: &Client, target: &Target, plain: bool) -> Result<i32, ClientError> {
    let id = &target.session.id;
    let attached = match client
        .connect(&target.session)
        .and_then(|b| b.attach(0, 0, AttachMode::ReadOnly))
    {
        Ok(a) => a,
        Err(e) => {
            let screen = final_screen(client, target, e)?;
            print_screen(if plain { &screen.plain } else { &screen.ansi }.as_bytes())?;
            let (code, signal) = (screen.exit.code, screen.exit.signal);
            eprintln!("{}", attach::ended_line(id, code, signal));
            return Ok(attach::program_code(code, signal));
        }
    };
    // The attach SCREEN is the consistent cut (SPEC §5.4): render it here, so the
    // stream continues exactly where the printed screen ends.
    let render = |rows: u16, cols: u16, repaint: &[u8]| {
        let mut emu = latch_screen::Emulator::new(rows, cols, 0);
        emu.process(repaint);
        latch_screen::capture(&mut emu, plain, false, usize::MAX)
    };
    let (mut rows, mut cols) = (attached.rows, attached.cols);
    print_screen(render(rows, cols, &attached.screen).as_bytes())?;
    let mut reader = attached.reader;
    let mut strip = latch_screen::PlainStream::default();
    let mut out = std::io::stdout();
    let io = |e: std::io::Error| ClientError::Other(e.to_string());
    loop {
        match reader.next_event()? {
            AttachEvent::Output(b) => {
                if plain {
                    out.write_all(strip.strip(&b).as_bytes()).map_err(io)?;
                } else {
                    out.write_all(&b).map_err(io)?;
                }
                out.flush().map_err(io)?;
            }
            AttachEvent::Geometry { rows: r, cols: c } => (rows, cols) = (r, c),
            // Fell behind: what was missed is not sent; a fresh screen is.
            AttachEvent::Screen(b) => {
                out.write_all(b"\n").map_err(io)?;
                print_screen(render(rows, cols, &b).as_bytes())?;
            }
            AttachEvent::Exit(s) => {
                out.flush().map_err(io)?;
                eprintln!("\n{}", attach::ended_line(id, s.code, s.signal));
                return Ok(attach::program_code(s.code, s.signal));
            }
            AttachEvent::Detached | AttachEvent::Closed => {
                return Err(ClientError::unreachable(
                    UnreachableCause::Closed,
                    format!("session {id}'s daemon closed the connection"),
                ))
            }
            AttachEvent::Error { code, detail } => {
                return Err(ClientError::Daemon { code, detail })
            }
            // An event a newer library knows carries no output.
            _ => {}
        }
    }
}

fn ls(
    root: Option<&PathBuf>,
    json: bool,
    tags: &[String],
    status: Option<&str>,
    owner: Option<&str>,
) -> Result<i32, ClientError> {
    let owner = parse_owner(owner)?;
    if let Some(s) = status {
        if !["running", "exited", "vanished", "unknown", "degraded"].contains(&s) {
            return Err(usage(format!(
                "--status {s:?}: expected running, exited, vanished, unknown or degraded"
            )));
        }
    }
    let want_tags = parse_kv(tags, "--tag")?;
    let client = open(root)?;
    let listed = match &owner {
        Some(o) => client.list_owned(o)?,
        None => client.list()?,
    };
    let entries: Vec<Entry> = listed
        .into_iter()
        .filter(|e| match e {
            Entry::Session { record, status: st } => {
                status.is_none_or(|s| s == st.name())
                    && want_tags.iter().all(|(k, v)| record.tags.get(k) == Some(v))
            }
            // A degraded record cannot prove it lacks a tag: it is shown unless the
            // caller asked for another status.
            Entry::Degraded { .. } => status.is_none_or(|s| s == "degraded"),
        })
        .collect();
    if json {
        let arr: Vec<_> = entries.iter().map(output::entry_json).collect();
        println!("{}", serde_json::Value::Array(arr));
    } else {
        for e in &entries {
            println!("{}", output::entry_line(e));
        }
    }
    Ok(exit::OK)
}

fn status(
    root: Option<&PathBuf>,
    reference: &str,
    json: bool,
    expect: &Expect,
) -> Result<i32, ClientError> {
    let client = open_for(root, expect)?;
    let target = resolve(&client, reference, expect)?;
    let derived = latch_client::derive_status(&target.record);
    if let SessionStatus::Exited { .. } = derived {
        if json {
            println!("{}", output::record_json(&target.record, &derived));
        } else {
            println!(
                "{}@{}: {}",
                target.session.id,
                target.session.incarnation,
                output::entry_line(&Entry::Session {
                    record: Box::new(target.record.clone()),
                    status: derived.clone()
                })
            );
        }
        return Ok(exit::OK);
    }
    // STATUS is a query, legal before BIND (and while the session drains): ask it
    // unbound and check that the daemon is the creation we resolved.
    let s = client.status_of(&target.session)?;
    if json {
        let mut v = output::record_json(&target.record, &derived);
        v["daemon"] = json!({
            "id": s.id.as_str(),
            "incarnation": s.incarnation.to_string(),
            "daemonPid": s.daemon_pid,
            "childPid": s.child_pid,
            "rows": s.rows,
            "cols": s.cols,
            "cursor": {"row": s.cursor_row, "col": s.cursor_col},
            "writers": s.writers,
            "readers": s.readers,
            "createdAt": s.created_at_ms,
            "exit": s.exit.map(|e| json!({"code": e.code, "signal": e.signal})),
            "draining": s.draining,
            "legacyPolicy": s.legacy_policy.as_str(),
            "owner": s.owner,
        });
        println!("{v}");
    } else {
        println!("id:          {}", s.id);
        println!("incarnation: {}", s.incarnation);
        println!(
            "name:        {}",
            target.record.display_name.as_deref().unwrap_or("-")
        );
        println!(
            "status:      {}",
            if s.exit.is_some() {
                "exited"
            } else {
                "running"
            }
        );
        println!("command:     {}", target.record.command.join(" "));
        println!("size:        {}x{}", s.rows, s.cols);
        println!("clients:     {} writers, {} readers", s.writers, s.readers);
        println!(
            "pids:        daemon {}, program {}",
            s.daemon_pid, s.child_pid
        );
        println!("legacy:      {}", s.legacy_policy.as_str());
        println!(
            "owner:       {}",
            s.owner.as_ref().map_or("-", Owner::as_str)
        );
    }
    Ok(exit::OK)
}
