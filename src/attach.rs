//! Interactive attach: raw mode, detach key, size following, terminal restored on
//! every exit path (modes too: `latch_screen::RESTORE_MODES`, SPEC §5.4), and the
//! program's exit code as ours.

use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::time::Instant;

use latch_client::{exit, AttachEvent, AttachMode, ClientError, PeekOptions, PeekScope};
use latch_screen::attach::KeyFilter;
use latch_wire::SessionRef;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::termios::{self, SetArg, Termios};

/// Restores the terminal when dropped (normal return, error, or unwinding panic).
pub(crate) struct RawGuard {
    saved: Option<Termios>,
}

fn stdin_fd() -> BorrowedFd<'static> {
    rustix::stdio::stdin()
}

impl RawGuard {
    pub(crate) fn enter() -> Self {
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
pub(crate) fn restore(saved: Option<&Termios>) {
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
fn show_final(
    loc: latch_client::Location<'_>,
    found: &latch_client::Found,
    e: ClientError,
) -> Result<i32, ClientError> {
    let session = &found.session;
    let screen = match &e {
        ClientError::Unreachable { .. } => loc.final_screen(found)?,
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
    Ok(latch_screen::attach::history(
        &String::from_utf8_lossy(&full),
        &String::from_utf8_lossy(&visible),
        n,
    ))
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
        .map_err(|e| ClientError::failed("sigmask", e))?;
    Ok(handled)
}

/// Attaches this terminal to `session` until detach, exit, or the daemon closes.
/// Returns 0 after a detach, the program's exit code (`program_code`) after its
/// end. `history` scrollback lines are written first.
///
/// `handled` comes from [`block_signals`], called before any thread starts (a
/// remote location's relay has threads of its own, which must not take the
/// signals the attach reads).
pub(crate) fn interactive(
    handled: SigSet,
    loc: latch_client::Location<'_>,
    found: &latch_client::Found,
    read_only: bool,
    detach_key: Option<u8>,
    history_lines: usize,
) -> Result<i32, ClientError> {
    let mut bound = match loc.connect(found) {
        Ok(b) => b,
        Err(e) => return show_final(loc, found, e),
    };
    // The terminal handed to the daemon where it can be (SPEC §5.7).
    if loc.host().is_none() && crate::attach_fd::eligible(&bound) {
        let scrollback = if history_lines > 0 {
            history(&mut bound, history_lines)?
        } else {
            Vec::new()
        };
        if scrollback.len() <= crate::attach_fd::HISTORY_MAX {
            match crate::attach_fd::attach(handled, bound, read_only, detach_key, scrollback) {
                crate::attach_fd::Passed::Done(r) => return r,
                // Refused before it wrote to the terminal: relayed, on a new connection.
                crate::attach_fd::Passed::Refused => {
                    bound = match loc.connect(found) {
                        Ok(b) => b,
                        Err(e) => return show_final(loc, found, e),
                    };
                }
            }
        }
    }
    attach_bound(
        handled,
        bound,
        read_only,
        detach_key,
        history_lines,
        loc.host().map(|h| h.as_str()),
    )
}

/// Attaches this terminal through `bound` (signals blocked by [`block_signals`]).
/// `remote`: the host of a `--host` attach, whose lost connection is exit 7
/// (SPEC.md §12.4) rather than a detach.
///
/// One thread, one poll loop over the terminal, the connection and a signalfd
/// (window size, and the signals that end the attachment): a keystroke and its
/// echo pass through no thread hand-off. The detach key and the repaint's preface
/// are `latch_screen::attach`'s.
pub fn attach_bound(
    handled: SigSet,
    mut bound: latch_client::Bound,
    read_only: bool,
    detach_key: Option<u8>,
    history_lines: usize,
    remote: Option<&str>,
) -> Result<i32, ClientError> {
    let session = bound.target().clone();
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
    let _ = stdout.write_all(&latch_screen::attach::preface(
        &scrollback,
        &attached.screen,
        rows,
    ));
    let _ = stdout.write_all(&attached.screen);
    let _ = stdout.flush();
    let signals = SignalFd::with_flags(&handled, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        .map_err(|e| ClientError::failed("signalfd", e))?;
    let mut serve = Serve {
        session: &session,
        guard,
        last_byte: attached.screen.last().copied(),
        reader: attached.reader,
        writer: attached.writer,
        keys: KeyFilter::new(detach_key, read_only),
        read_only,
        reading_keys: true,
        outcome: None,
        detached: false,
    };
    serve.run(&signals)?;
    let Serve {
        guard,
        last_byte,
        outcome,
        detached,
        ..
    } = serve;
    drop(guard);
    finish(&session, last_byte, outcome, detached, remote)
}

/// The attach loop's state.
struct Serve<'a> {
    session: &'a SessionRef,
    guard: RawGuard,
    /// The last byte written to the terminal (does the exit line need a new line?).
    last_byte: Option<u8>,
    reader: latch_client::AttachReader,
    writer: latch_client::AttachWriter,
    keys: KeyFilter,
    read_only: bool,
    /// Cleared once a detach was asked for.
    reading_keys: bool,
    outcome: Option<latch_wire::ExitStatus>,
    detached: bool,
}

/// How one pass of the loop ended.
enum Pass {
    Continue,
    Done,
}

impl Serve<'_> {
    fn run(&mut self, signals: &SignalFd) -> Result<(), ClientError> {
        loop {
            if let Pass::Done = self.drain()? {
                return Ok(());
            }
            let (signal_ready, keys_ready) = self.wait(signals)?;
            if signal_ready {
                self.signals(signals);
            }
            if self.keys.expired(Instant::now()) {
                // A single detach key: detach; the daemon's DETACHED ends the loop.
                self.detach();
                continue;
            }
            if keys_ready {
                if let Pass::Done = self.read_keys() {
                    return Ok(());
                }
            }
        }
    }

    /// Writes everything that has arrived to the terminal.
    fn drain(&mut self) -> Result<Pass, ClientError> {
        let mut stdout = std::io::stdout();
        while let Some(event) = self
            .reader
            .try_next_event()
            .inspect_err(|_| restore(self.guard.saved.as_ref()))?
        {
            match event {
                AttachEvent::Output(b) | AttachEvent::Screen(b) => {
                    if stdout.write_all(&b).and_then(|()| stdout.flush()).is_err() {
                        return Ok(Pass::Done);
                    }
                    self.last_byte = b.last().copied().or(self.last_byte);
                }
                AttachEvent::Exit(s) => self.outcome = Some(s),
                AttachEvent::Detached => {
                    self.detached = true;
                    return Ok(Pass::Done);
                }
                AttachEvent::Closed => return Ok(Pass::Done),
                AttachEvent::Error { code, detail } => {
                    restore(self.guard.saved.as_ref());
                    return Err(daemon_error(&self.session.id, code, detail));
                }
                // GEOMETRY, and events a newer library may add.
                _ => {}
            }
        }
        Ok(Pass::Continue)
    }

    /// Waits for the connection, a signal, a key, or a pending detach key's end:
    /// (a signal is ready, a key is ready).
    fn wait(&mut self, signals: &SignalFd) -> Result<(bool, bool), ClientError> {
        let wait = match self.keys.deadline() {
            Some(at) => {
                let left = at.saturating_duration_since(Instant::now());
                PollTimeout::try_from(left).unwrap_or(PollTimeout::ZERO)
            }
            None => PollTimeout::NONE,
        };
        let mut fds = vec![
            PollFd::new(self.reader.as_fd(), PollFlags::POLLIN),
            PollFd::new(signals.as_fd(), PollFlags::POLLIN),
        ];
        if self.reading_keys {
            fds.push(PollFd::new(stdin_fd(), PollFlags::POLLIN));
        }
        match poll(&mut fds, wait) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => {
                restore(self.guard.saved.as_ref());
                return Err(ClientError::failed("poll", e));
            }
        }
        let ready = |fd: &PollFd<'_>| {
            fd.revents().is_some_and(|r| {
                r.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR)
            })
        };
        Ok((ready(&fds[1]), fds.get(2).is_some_and(ready)))
    }

    /// A window size change is passed on; any other handled signal ends attach.
    fn signals(&mut self, signals: &SignalFd) {
        while let Ok(Some(info)) = signals.read_signal() {
            match Signal::try_from(i32::try_from(info.ssi_signo).unwrap_or(0)) {
                Ok(Signal::SIGWINCH) => {
                    let (r, c) = size();
                    if r > 0 && !self.read_only {
                        let _ = self.writer.resize(r, c);
                    }
                }
                Ok(sig) => {
                    restore(self.guard.saved.as_ref());
                    eprintln!("\r\n[latch: {sig} received, detached]");
                    std::process::exit(exit::OTHER);
                }
                Err(_) => {}
            }
        }
    }

    /// Reads the keys typed and passes them on through the detach-key filter.
    fn read_keys(&mut self) -> Pass {
        let mut buf = [0u8; 4096];
        let n = match std::io::stdin().read(&mut buf) {
            Ok(0) | Err(_) => 0,
            Ok(n) => n,
        };
        if n == 0 {
            // The terminal is gone: detach, as a closed terminal would.
            self.detach();
            return Pass::Continue;
        }
        let keys = self
            .keys
            .feed(buf.get(..n).unwrap_or_default(), Instant::now());
        if !keys.send.is_empty() && self.writer.input(&keys.send).is_err() {
            return Pass::Done;
        }
        if keys.detach {
            self.detach();
        }
        Pass::Continue
    }

    fn detach(&mut self) {
        self.reading_keys = false;
        let _ = self.writer.detach();
    }
}

/// The daemon's ERROR ending an attach (the terminal already restored), with the
/// word a cut-off terminal gets; the relayed and the passed-terminal attach alike.
pub(crate) fn daemon_error(
    id: &latch_wire::SessionId,
    code: latch_wire::ErrorCode,
    detail: String,
) -> ClientError {
    if code == latch_wire::ErrorCode::TooSlow {
        eprintln!(
            "[latch: cut off by {id}: this terminal read nothing for a minute; attach again for a fresh screen]"
        );
    }
    ClientError::Daemon { code, detail }
}

/// What attach says and returns once the loop is over (the terminal restored).
pub(crate) fn finish(
    session: &SessionRef,
    last_byte: Option<u8>,
    outcome: Option<latch_wire::ExitStatus>,
    detached: bool,
    remote: Option<&str>,
) -> Result<i32, ClientError> {
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
mod tests {
    use super::program_code;

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
}
