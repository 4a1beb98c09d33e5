//! peek, in its forms: the screen, a wait for text, `--follow`, and an ended
//! session's final screen (SPEC.md §9.15).

use std::time::Duration;

use latch_client::{
    exit, AttachEvent, AttachMode, ClientError, Found, Location, PeekFormat, PeekOptions,
    PeekScope, SessionStatus, UnreachableCause,
};
use latch_wire::SessionId;

use super::at::At;
use crate::attach;
use crate::cli::TargetArgs;

/// Prints a screen, ending it with a newline if it lacks one. A failed stdout is
/// `output`'s (SPEC §10): never an error here.
pub(crate) fn print_screen(screen: &[u8]) -> Result<(), ClientError> {
    if crate::output::out_bytes(screen) && screen.last().is_some_and(|&b| b != b'\n') {
        crate::output::out_bytes(b"\n");
    }
    Ok(())
}

pub(crate) fn peek(
    at: &At,
    target: &TargetArgs,
    plain: bool,
    full: bool,
    wait: Option<&str>,
    timeout: Duration,
    json: bool,
) -> Result<i32, ClientError> {
    let found = at.resolve(target)?;
    let loc = at.loc();
    let opts = peek_options(plain, full);
    if json && wait.is_none() {
        if let Ok(mut bound) = loc.connect(&found) {
            return super::turns::print_peek_json(&mut bound, opts);
        }
    }
    let Some(text) = wait else {
        let mut bound = match loc.connect(&found) {
            Ok(b) => b,
            Err(e) => return peek_exited(loc, &found, plain, full, wait, e),
        };
        print_screen(&bound.peek(opts)?)?;
        return Ok(exit::OK);
    };
    // Event-driven (Location::wait_for_text): a read-only attachment wakes the
    // wait on every output. A session that ends first may still have shown the text.
    match loc.wait_for_text(&found, text, opts, timeout) {
        Ok(screen) => {
            print_screen(&screen)?;
            Ok(exit::OK)
        }
        Err(e @ ClientError::Unreachable { .. }) => peek_exited(loc, &found, plain, full, wait, e),
        Err(e) => Err(e),
    }
}

/// The library's options for `--plain` and `--full`.
pub(crate) fn peek_options(plain: bool, full: bool) -> PeekOptions {
    PeekOptions::plain()
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

fn peek_exited(
    loc: Location<'_>,
    target: &Found,
    plain: bool,
    full: bool,
    wait: Option<&str>,
    e: ClientError,
) -> Result<i32, ClientError> {
    let screen = ended_screen(loc, target, e)?;
    let text = final_text(&screen, plain, full);
    let id = &target.session.id;
    let (code, signal) = (screen.exit.code, screen.exit.signal);
    if let Some(want) = wait {
        let shown = if plain { &screen.full_plain } else { text };
        if !shown.contains(want) && !screen.plain.contains(want) {
            return Err(ClientError::unreachable(
                UnreachableCause::Exited,
                format!(
                    "session {id} has ended ({}) and its screen does not show {want:?}",
                    SessionStatus::Exited { code, signal }
                ),
            ));
        }
    }
    print_screen(text.as_bytes())?;
    eprintln!("{}", attach::ended_line(id, code, signal));
    Ok(exit::OK)
}

/// The kept final screen as `peek --plain/--ansi [--full]` shows it.
pub(crate) fn final_text(screen: &latch_registry::FinalScreen, plain: bool, full: bool) -> &String {
    match (plain, full) {
        (true, false) => &screen.plain,
        (false, false) => &screen.ansi,
        (true, true) => &screen.full_plain,
        (false, true) => &screen.full_ansi,
    }
}

/// The kept final screen when `e` is because the program exited; else `e`.
pub(crate) fn ended_screen(
    loc: Location<'_>,
    target: &Found,
    e: ClientError,
) -> Result<latch_registry::FinalScreen, ClientError> {
    if !matches!(e, ClientError::Unreachable { .. }) {
        return Err(e);
    }
    loc.final_screen(target)?.ok_or(e)
}

/// `peek --follow`: the screen, then new output as it comes (escapes stripped with
/// `plain`), until the program exits; then `[ID exited with code N]` on stderr and
/// its exit code (128 + N for signal N).
pub(crate) fn peek_follow(at: &At, target: &TargetArgs, plain: bool) -> Result<i32, ClientError> {
    let found = at.resolve(target)?;
    let loc = at.loc();
    let id = &found.session.id;
    let attached = match loc
        .connect(&found)
        .and_then(|b| b.attach(0, 0, AttachMode::ReadOnly))
    {
        Ok(a) => a,
        Err(e) => {
            let screen = ended_screen(loc, &found, e)?;
            print_screen(if plain { &screen.plain } else { &screen.ansi }.as_bytes())?;
            let (code, signal) = (screen.exit.code, screen.exit.signal);
            eprintln!("{}", attach::ended_line(id, code, signal));
            return Ok(attach::program_code(code, signal));
        }
    };
    follow_attached(attached, id, plain)
}

/// `peek --follow` once attached read-only: the screen, then the stream.
pub(crate) fn follow_attached(
    attached: latch_client::Attached,
    id: &SessionId,
    plain: bool,
) -> Result<i32, ClientError> {
    // The attach SCREEN is the consistent cut (SPEC §5.4): render it here, so the
    // stream continues exactly where the printed screen ends.
    let render = |rows: u16, cols: u16, repaint: &[u8]| {
        let mut emu = latch_screen::Emulator::new(rows, cols, 0);
        emu.process(repaint);
        latch_screen::capture(&mut emu, latch_screen::View::new(plain, false), usize::MAX)
    };
    let (mut rows, mut cols) = (attached.rows, attached.cols);
    print_screen(render(rows, cols, &attached.screen).as_bytes())?;
    let mut reader = attached.reader;
    let mut strip = latch_screen::PlainStream::default();
    // Following ends when stdout does (SPEC §10: exit 141 or 13).
    while crate::output::stdout_ok() {
        match reader.next_event()? {
            AttachEvent::Output(b) => {
                if plain {
                    crate::output::out_bytes(strip.strip(&b).as_bytes());
                } else {
                    crate::output::out_bytes(&b);
                }
            }
            AttachEvent::Geometry { rows: r, cols: c } => (rows, cols) = (r, c),
            // Fell behind: what was missed is not sent; a fresh screen is.
            AttachEvent::Screen(b) => {
                crate::output::out_bytes(b"\n");
                print_screen(render(rows, cols, &b).as_bytes())?;
            }
            AttachEvent::Exit(s) => {
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
            _ => {}
        }
    }
    Ok(exit::OK)
}
