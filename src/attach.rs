//! Interactive attach: raw mode, detach key, size following, terminal restored on
//! every exit path (modes too: `latch_screen::RESTORE_MODES`, SPEC §5.4), and the
//! program's exit code as ours.

use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::time::Instant;

use latch_client::{exit, AttachEvent, AttachMode, Client, ClientError, PeekOptions, PeekScope};
use latch_wire::SessionRef;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::termios::{self, SetArg, Termios};

/// Restores the terminal when dropped (normal return, error, or unwinding panic).
struct RawGuard {
    saved: Option<Termios>,
}

fn stdin_fd() -> BorrowedFd<'static> {
    rustix::stdio::stdin()
}

impl RawGuard {
    fn enter() -> Self {
        let fd = stdin_fd();
        let Ok(saved) = termios::tcgetattr(fd) else {
            return Self { saved: None }; // not a terminal: nothing to change
        };
        let mut raw = saved.clone();
        termios::cfmakeraw(&mut raw);
        let _ = termios::tcsetattr(fd, SetArg::TCSADRAIN, &raw);
        Self { saved: Some(saved) }
    }
}

impl Drop for RawGuard {
    fn drop(&mut self) {
        restore(self.saved.as_ref());
    }
}

/// Undoes every mode the session may have set in this terminal (without clearing
/// it), then restores the terminal settings saved at attach.
fn restore(saved: Option<&Termios>) {
    if nix::unistd::isatty(std::io::stdout()).unwrap_or(false) {
        let mut out = std::io::stdout();
        let _ = out.write_all(latch_screen::RESTORE_MODES);
        let _ = out.flush();
    }
    if let Some(saved) = saved {
        let _ = termios::tcsetattr(stdin_fd(), SetArg::TCSADRAIN, saved);
    }
}

/// Our exit code for the program's end, as a shell and `docker run` give it: its
/// exit code, or 128 + N for signal N, so a program that exits 130 and one killed
/// by SIGINT look alike here (JSON tells them apart: `exitCode`, `exitSignal`).
/// A code outside 0 to 255 or a signal outside 1 to 127, which no `waitpid` gives
/// and only a broken daemon could send, is exit 1 (SPEC §10).
pub fn program_code(code: Option<i32>, signal: Option<i32>) -> i32 {
    match (code, signal) {
        (_, Some(sig @ 1..=127)) => 128 + sig,
        (_, Some(_)) => exit::OTHER,
        (Some(c @ 0..=255), _) => c,
        _ => exit::OTHER,
    }
}

/// What attach prints when the program has ended.
fn exit_message(id: &latch_wire::SessionId, code: Option<i32>, signal: Option<i32>) -> String {
    match (code, signal) {
        (_, Some(sig)) => format!("[latch: session {id} killed by signal {sig}]"),
        (Some(c), _) => format!("[latch: session {id} exited with code {c}]"),
        _ => format!("[latch: session {id} exited]"),
    }
}

/// How a program's end is told: `[ID exited with code N]`.
pub fn ended_line(id: &latch_wire::SessionId, code: Option<i32>, signal: Option<i32>) -> String {
    match (code, signal) {
        (_, Some(sig)) => format!("[{id} killed by signal {sig}]"),
        (Some(c), _) => format!("[{id} exited with code {c}]"),
        _ => format!("[{id} exited]"),
    }
}

/// The session could not be attached: if its program has exited, shows the
/// screen it left (line-based ANSI on a terminal, else plain text; SPEC §9.15)
/// and returns its exit code; otherwise returns the error.
fn show_final(client: &Client, session: &SessionRef, e: ClientError) -> Result<i32, ClientError> {
    let screen = match &e {
        ClientError::Unreachable { .. } => client.final_screen(session)?,
        _ => None,
    };
    let Some(screen) = screen else { return Err(e) };
    // Colours for a terminal, plain text for a file or a pipe.
    let tty = nix::unistd::isatty(std::io::stdout()).unwrap_or(false);
    let text = if tty { &screen.ansi } else { &screen.plain };
    // A failed stdout is `output`'s (SPEC §10).
    if crate::output::out_bytes(text.as_bytes()) && !text.is_empty() {
        crate::output::out_bytes(b"\n");
    }
    let (code, signal) = (screen.exit.code, screen.exit.signal);
    eprintln!("{}", exit_message(&session.id, code, signal));
    Ok(program_code(code, signal))
}

/// The last `n` lines of the session's scrollback (above its visible screen), as
/// line-based ANSI, each ending in CR LF (`attach --history`).
fn history(bound: &mut latch_client::Bound, n: usize) -> Result<Vec<u8>, ClientError> {
    let full = bound.peek(PeekOptions::ansi().with_scope(PeekScope::Scrollback))?;
    let visible = bound.peek(PeekOptions::ansi())?;
    let full = String::from_utf8_lossy(&full);
    let shown = String::from_utf8_lossy(&visible).lines().count();
    let lines: Vec<&str> = full.lines().collect();
    let above = lines.len().saturating_sub(shown);
    let kept = lines
        .get(above.saturating_sub(n)..above)
        .unwrap_or_default();
    let mut out = Vec::new();
    if kept.is_empty() {
        return Ok(out);
    }
    for line in kept {
        out.extend_from_slice(line.as_bytes());
        out.extend_from_slice(b"\x1b[m\r\n");
    }
    Ok(out)
}

/// What this terminal gets before the attach repaint, so that nothing it showed is
/// lost (SPEC §5.4): unless the repaint switches to the alternate screen (which
/// keeps this one) and there is no history, from the bottom row, the history lines
/// and then a screenful of line feeds scroll everything into the terminal's own
/// scrollback, out of reach of the repaint's clear. Nothing when `rows` is 0 (not
/// a terminal).
fn preface(history: &[u8], repaint: &[u8], rows: u16) -> Vec<u8> {
    let alternate = repaint.starts_with(b"\x1b[?1049h");
    if rows == 0 || (alternate && history.is_empty()) {
        return Vec::new();
    }
    let mut out = format!("\x1b[{rows};1H").into_bytes();
    out.extend_from_slice(history);
    for _ in 0..rows {
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// The terminal size of stdout, clamped into the daemon's limits (SPEC.md §8: a
/// larger terminal shows the session in its top-left corner), or (0, 0) when it is
/// not a terminal.
pub fn size() -> (u16, u16) {
    let (rows, cols) = raw_size();
    latch_wire::limits::clamp_size(rows, cols)
}

fn raw_size() -> (u16, u16) {
    match rustix::termios::tcgetwinsize(std::io::stdout()) {
        Ok(ws) if ws.ws_row > 0 && ws.ws_col > 0 => (ws.ws_row, ws.ws_col),
        _ => (0, 0),
    }
}

/// How long after a detach key a second one sends it to the program instead.
const DOUBLE_PRESS: std::time::Duration = std::time::Duration::from_millis(500);

/// What the keys just read ask for, given whether a detach key was pressed
/// before them: the bytes for the program, whether a detach key is now pending,
/// and whether to detach. A detach key detaches unless the next key, within
/// DOUBLE_PRESS, is the detach key again: then one detach key goes to the program.
fn keys(bytes: &[u8], detach_key: Option<u8>, mut pending: bool) -> (Vec<u8>, bool, bool) {
    let mut send = Vec::with_capacity(bytes.len());
    for &b in bytes {
        if pending {
            pending = false;
            if Some(b) == detach_key {
                send.push(b);
                continue;
            }
            return (send, false, true);
        }
        if Some(b) == detach_key {
            pending = true;
        } else {
            send.push(b);
        }
    }
    (send, pending, false)
}

/// Blocks the signals attach handles, before any thread starts (and before ssh
/// is spawned for `--host`), so that they reach attach only through its signalfd.
pub fn block_signals() -> Result<SigSet, ClientError> {
    let mut handled = SigSet::empty();
    for s in [
        Signal::SIGWINCH,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGINT,
    ] {
        handled.add(s);
    }
    handled
        .thread_block()
        .map_err(|e| ClientError::Other(format!("sigmask: {e}")))?;
    Ok(handled)
}

/// Attaches this terminal to `session` until detach, exit, or the daemon closes.
/// Returns 0 after a detach, the program's exit code (`program_code`) after its
/// end. `history` scrollback lines are written first.
pub fn interactive(
    client: &Client,
    session: &SessionRef,
    read_only: bool,
    detach_key: Option<u8>,
    history_lines: usize,
) -> Result<i32, ClientError> {
    let handled = block_signals()?;
    let bound = match client.connect(session) {
        Ok(b) => b,
        Err(e) => return show_final(client, session, e),
    };
    attach_bound(handled, bound, read_only, detach_key, history_lines, None)
}

/// Attaches this terminal through `bound` (signals blocked by [`block_signals`]).
/// `remote`: the host of a `--host` attach, whose lost connection is exit 7
/// (SPEC.md §12.4) rather than a detach.
///
/// One thread, one poll loop over the terminal, the connection and a signalfd
/// (window size, and the signals that end the attachment): a keystroke and its
/// echo pass through no thread hand-off.
pub fn attach_bound(
    handled: SigSet,
    mut bound: latch_client::Bound,
    read_only: bool,
    detach_key: Option<u8>,
    history_lines: usize,
    remote: Option<&str>,
) -> Result<i32, ClientError> {
    let session = &bound.target().clone();
    let (rows, cols) = size();
    let scrollback = if history_lines > 0 {
        history(&mut bound, history_lines)?
    } else {
        Vec::new()
    };
    let mode = if read_only {
        AttachMode::ReadOnly
    } else {
        AttachMode::ReadWrite
    };
    let attached = bound.attach(rows, cols, mode)?;
    let guard = RawGuard::enter();
    let mut stdout = std::io::stdout();
    let _ = stdout.write_all(&preface(&scrollback, &attached.screen, rows));
    let _ = stdout.write_all(&attached.screen);
    let _ = stdout.flush();

    let signals = SignalFd::with_flags(&handled, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        .map_err(|e| ClientError::Other(format!("signalfd: {e}")))?;
    let mut last_byte = attached.screen.last().copied();
    let mut reader = attached.reader;
    let mut writer = attached.writer;
    let mut stdin = std::io::stdin();
    let mut keys_buf = [0u8; 4096];
    let mut reading_keys = true;
    // When a detach key was pressed, waiting for a second one.
    let mut pending: Option<Instant> = None;
    let mut outcome = None;
    let mut detached = false;
    'serve: loop {
        // Everything that has arrived, before waiting again.
        while let Some(event) = reader
            .try_next_event()
            .inspect_err(|_| restore(guard.saved.as_ref()))?
        {
            match event {
                AttachEvent::Output(b) | AttachEvent::Screen(b) => {
                    if stdout.write_all(&b).and_then(|()| stdout.flush()).is_err() {
                        break 'serve;
                    }
                    last_byte = b.last().copied().or(last_byte);
                }
                AttachEvent::Exit(s) => outcome = Some(s),
                AttachEvent::Detached => {
                    detached = true;
                    break 'serve;
                }
                AttachEvent::Closed => break 'serve,
                AttachEvent::Error { code, detail } => {
                    drop(guard);
                    if code == latch_wire::ErrorCode::TooSlow {
                        eprintln!(
                            "[latch: cut off by {}: this terminal read nothing for a minute; attach again for a fresh screen]",
                            session.id
                        );
                    }
                    return Err(ClientError::Daemon { code, detail });
                }
                // GEOMETRY, and events a newer library may add.
                _ => {}
            }
        }
        let wait = match pending {
            Some(at) => {
                let left = DOUBLE_PRESS.saturating_sub(at.elapsed());
                PollTimeout::try_from(left).unwrap_or(PollTimeout::ZERO)
            }
            None => PollTimeout::NONE,
        };
        let stdin_fd = stdin_fd();
        let mut fds = vec![
            PollFd::new(reader.as_fd(), PollFlags::POLLIN),
            PollFd::new(signals.as_fd(), PollFlags::POLLIN),
        ];
        if reading_keys {
            fds.push(PollFd::new(stdin_fd, PollFlags::POLLIN));
        }
        match poll(&mut fds, wait) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => {
                drop(guard);
                return Err(ClientError::Other(format!("poll: {e}")));
            }
        }
        let ready = |fd: &PollFd<'_>| {
            fd.revents().is_some_and(|r| {
                r.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR)
            })
        };
        let (signal_ready, keys_ready) = (ready(&fds[1]), fds.get(2).is_some_and(ready));
        drop(fds);
        if signal_ready {
            while let Ok(Some(info)) = signals.read_signal() {
                let sig = Signal::try_from(i32::try_from(info.ssi_signo).unwrap_or(0));
                match sig {
                    Ok(Signal::SIGWINCH) => {
                        let (r, c) = size();
                        if r > 0 && !read_only {
                            let _ = writer.resize(r, c);
                        }
                    }
                    Ok(sig) => {
                        restore(guard.saved.as_ref());
                        eprintln!("\r\n[latch: {sig} received, detached]");
                        std::process::exit(exit::OTHER);
                    }
                    Err(_) => {}
                }
            }
        }
        if pending.is_some_and(|at| at.elapsed() >= DOUBLE_PRESS) {
            // A single detach key: detach; the daemon's DETACHED ends the loop.
            pending = None;
            reading_keys = false;
            let _ = writer.detach();
            continue;
        }
        if keys_ready {
            let n = match stdin.read(&mut keys_buf) {
                Ok(0) | Err(_) => 0,
                Ok(n) => n,
            };
            if n == 0 {
                // The terminal is gone: detach, as a closed terminal would.
                reading_keys = false;
                let _ = writer.detach();
                continue;
            }
            let (send, now_pending, detach) = keys(
                keys_buf.get(..n).unwrap_or_default(),
                detach_key,
                pending.is_some(),
            );
            if !send.is_empty() && !read_only && writer.input(&send).is_err() {
                break 'serve;
            }
            pending = now_pending.then(Instant::now);
            if detach {
                reading_keys = false;
                let _ = writer.detach();
            }
        }
    }
    drop(guard);
    // The message starts on a fresh line, wherever the program left the cursor.
    eprint!(
        "{}",
        if last_byte == Some(b'\n') {
            "\r"
        } else {
            "\r\n"
        }
    );
    match outcome {
        Some(s) => {
            eprintln!("{}", exit_message(&session.id, s.code, s.signal));
            Ok(program_code(s.code, s.signal))
        }
        None => match remote.filter(|_| !detached) {
            Some(host) => Err(ClientError::unreachable(
                latch_client::UnreachableCause::Host,
                format!(
                    "the connection to host {host} was lost; session {} keeps running there",
                    session.id
                ),
            )),
            None => {
                eprintln!("[latch: detached from {}]", session.id);
                Ok(exit::OK)
            }
        },
    }
}

#[cfg(test)]
mod key_tests {
    use super::{keys, program_code};

    #[test]
    fn exit_codes_are_a_shells_and_never_overflow() {
        assert_eq!(program_code(Some(0), None), 0);
        assert_eq!(program_code(Some(130), None), 130);
        assert_eq!(program_code(None, Some(2)), 130);
        assert_eq!(program_code(Some(0), Some(9)), 137);
        // What no waitpid gives (a broken daemon's EXIT): exit 1, not an overflow.
        assert_eq!(program_code(None, Some(i32::MAX)), 1);
        assert_eq!(program_code(None, Some(0)), 1);
        assert_eq!(program_code(Some(-1), None), 1);
        assert_eq!(program_code(Some(256), None), 1);
        assert_eq!(program_code(None, None), 1);
    }

    #[test]
    fn the_detach_key_detaches_and_twice_sends_it() {
        let k = Some(0x1c);
        // Plain typing passes through.
        assert_eq!(keys(b"ls\r", k, false), (b"ls\r".to_vec(), false, false));
        // The key alone: pending, nothing sent yet.
        assert_eq!(keys(b"ab\x1c", k, false), (b"ab".to_vec(), true, false));
        // Pressed again: one key goes to the program.
        assert_eq!(keys(b"\x1c", k, true), (vec![0x1c], false, false));
        assert_eq!(
            keys(b"\x1c\x1cx", k, false),
            (vec![0x1c, b'x'], false, false)
        );
        // Anything else after it: detach, and the rest is not sent.
        assert_eq!(keys(b"xyz", k, true), (Vec::new(), false, true));
        assert_eq!(keys(b"a\x1cb", k, false), (b"a".to_vec(), false, true));
        // No detach key: everything passes.
        assert_eq!(keys(b"\x1c", None, false), (vec![0x1c], false, false));
    }
}
