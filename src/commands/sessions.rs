//! Sessions and their terminals: new, attach, peek, send, resize.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use latch_client::{exit, AttachEvent, Client, ClientError, NewSession, Target, UnreachableCause};
use latch_wire::{LegacyPolicy, SessionId};

use super::{open, open_target, parse_kv, parse_owner, usage};
use crate::cli::{NewArgs, TargetArgs};
use crate::shapes::{self, CreatedJson};
use crate::{attach, keys};

fn terminal_size() -> (u16, u16) {
    match attach::size() {
        (0, 0) => (24, 80),
        rc => rc,
    }
}

pub(crate) fn new(root: Option<&PathBuf>, args: NewArgs, json: bool) -> Result<i32, ClientError> {
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
    if json {
        shapes::print(&CreatedJson::from(&created))?;
    } else if args.detached {
        println!("{}@{}", created.id, created.incarnation);
    }
    if args.detached {
        return Ok(exit::OK);
    }
    let session = latch_wire::SessionRef::new(created.id, created.incarnation);
    attach::interactive(&client, &session, false, Some(0x1c), 0)
}

pub(crate) fn attach(
    root: Option<&PathBuf>,
    target: &TargetArgs,
    read_only: bool,
    detach_key: &str,
    history: Option<usize>,
) -> Result<i32, ClientError> {
    let (client, target) = open_target(root, target)?;
    let key = keys::parse_detach_key(detach_key).map_err(usage)?;
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

pub(crate) fn send(
    root: Option<&PathBuf>,
    target: &TargetArgs,
    text: &[String],
    as_keys: bool,
) -> Result<i32, ClientError> {
    let (client, target) = open_target(root, target)?;
    let mut bytes = Vec::new();
    for arg in text {
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

pub(crate) fn resize(
    root: Option<&PathBuf>,
    target: &TargetArgs,
    rows: u16,
    cols: u16,
) -> Result<i32, ClientError> {
    latch_wire::limits::check_size(rows, cols).map_err(|e| usage(e.to_string()))?;
    let (client, target) = open_target(root, target)?;
    client.connect(&target.session)?.resize(rows, cols)?;
    Ok(exit::OK)
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

pub(crate) fn peek(
    root: Option<&PathBuf>,
    target: &TargetArgs,
    plain: bool,
    full: bool,
    wait: Option<&str>,
    timeout: Duration,
) -> Result<i32, ClientError> {
    let (client, target) = open_target(root, target)?;
    peek_target(&client, &target, plain, full, wait, timeout)
}

fn peek_target(
    client: &Client,
    target: &Target,
    plain: bool,
    full: bool,
    wait: Option<&str>,
    timeout: Duration,
) -> Result<i32, ClientError> {
    let mut bound = match client.connect(&target.session) {
        Ok(b) => b,
        Err(e) => return peek_exited(client, target, plain, full, wait, e),
    };
    let Some(text) = wait else {
        print_screen(&bound.peek(plain, full)?)?;
        return Ok(exit::OK);
    };
    // Event-driven wait: a read-only attachment wakes us on every output; each
    // wake re-reads the screen through the bound connection.
    let watcher = client.connect(&target.session)?.attach(0, 0, true)?;
    let mut reader = watcher.reader;
    let deadline = Instant::now() + timeout;
    loop {
        let screen = bound.peek(true, full)?;
        if String::from_utf8_lossy(&screen).contains(text) {
            let out = if plain {
                screen
            } else {
                bound.peek(false, full)?
            };
            print_screen(&out)?;
            return Ok(exit::OK);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ClientError::unreachable(
                UnreachableCause::TimedOut,
                format!(
                    "timed out after {:.1} s waiting for {text:?}",
                    timeout.as_secs_f64()
                ),
            ));
        }
        reader.set_timeout(Some(left))?;
        match reader.next_event() {
            Ok(AttachEvent::Output(_) | AttachEvent::Screen(_) | AttachEvent::Geometry { .. }) => {}
            Ok(AttachEvent::Exit(_) | AttachEvent::Closed | AttachEvent::Detached) => {
                return Err(ClientError::unreachable(
                    UnreachableCause::Exited,
                    format!("session ended before {text:?} appeared"),
                ))
            }
            Ok(AttachEvent::Error { code, detail }) => {
                return Err(ClientError::Daemon { code, detail })
            }
            Err(ClientError::Unreachable {
                cause: UnreachableCause::TimedOut,
                ..
            }) => {}
            Err(e) => return Err(e),
        }
    }
}

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
pub(crate) fn peek_follow(
    root: Option<&PathBuf>,
    target: &TargetArgs,
    plain: bool,
) -> Result<i32, ClientError> {
    let (client, target) = open_target(root, target)?;
    let (client, target) = (&client, &target);
    let id = &target.session.id;
    let attached = match client
        .connect(&target.session)
        .and_then(|b| b.attach(0, 0, true))
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
        }
    }
}
