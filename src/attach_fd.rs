//! Interactive attach with the terminal handed to the daemon (SPEC §5.7): the
//! daemon reads the keys and writes the stream itself; this process keeps raw mode
//! and its final restore, passes window size changes on, turns SIGTERM, SIGHUP,
//! SIGINT and SIGTSTP into a detach, and exits with the program's code. Messages
//! and exit codes are the relayed attach's (`attach::finish`).

use std::os::fd::AsFd;

use latch_client::{exit, AttachEvent, ClientError};
use latch_wire::{SessionRef, TerminalRequest};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

use crate::attach::{self, RawGuard};

/// The environment variable that keeps the terminal in this process (the
/// relayed attach, SPEC §5.7), as `attach --relay` would.
pub const ENV_RELAY: &str = "LATCH_ATTACH_RELAY";

/// Whether this attach may pass its terminal (SPEC §5.7): the daemon speaks
/// version 4, stdin and stdout are one terminal, and this process's group is that
/// terminal's foreground group, or the terminal is not its controlling terminal
/// at all (a background `latch attach &` keeps the relayed path, which the
/// terminal stops when it reads).
pub fn eligible(bound: &latch_client::Bound) -> bool {
    if std::env::var_os(ENV_RELAY).is_some_and(|v| !v.is_empty() && v != "0") {
        return false;
    }
    if !bound.takes_terminal() {
        return false;
    }
    let (stdin, stdout) = (rustix::stdio::stdin(), rustix::stdio::stdout());
    if !rustix::termios::isatty(stdin) || !rustix::termios::isatty(stdout) {
        return false;
    }
    let same = match (rustix::fs::fstat(stdin), rustix::fs::fstat(stdout)) {
        (Ok(a), Ok(b)) => a.st_rdev == b.st_rdev && a.st_ino == b.st_ino,
        _ => false,
    };
    // ENOTTY: it is not this process's controlling terminal, so no job control
    // can make this attach a background one.
    let foreground = match rustix::termios::tcgetpgrp(stdin) {
        Ok(pg) => pg == rustix::process::getpgrp(),
        Err(e) => e == rustix::io::Errno::NOTTY,
    };
    same && foreground
}

/// The most `--history` bytes ATTACH_TERMINAL carries (the frame stays within
/// MAX_CLIENT_FRAME); a longer history attaches relayed.
pub const HISTORY_MAX: usize = latch_wire::limits::MAX_CLIENT_FRAME - 256;

/// What became of an attempt to pass the terminal.
pub enum Passed {
    /// The attachment ran: its result.
    Done(Result<i32, ClientError>),
    /// The daemon refused the terminal before writing to it: attach relayed.
    Refused,
}

/// Attaches through `bound` with the terminal passed to the daemon. `handled`
/// comes from `attach::block_signals`; SIGTSTP is blocked here as well.
pub fn attach(
    handled: SigSet,
    bound: latch_client::Bound,
    read_only: bool,
    detach_key: Option<u8>,
    history: Vec<u8>,
) -> Passed {
    let session = bound.target().clone();
    let (rows, cols) = attach::size();
    let mut signals = handled;
    signals.add(Signal::SIGTSTP);
    if signals.thread_block().is_err() {
        return Passed::Refused;
    }
    let Ok(sfd) = SignalFd::with_flags(&signals, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
    else {
        return Passed::Refused;
    };
    // Raw before the daemon writes the repaint or reads a key.
    let guard = RawGuard::enter();
    let req = TerminalRequest {
        rows,
        cols,
        read_only,
        detach_key,
        history: history.into(),
    };
    let (reader, writer) = match bound.attach_terminal(req, rustix::stdio::stdin()) {
        Ok(halves) => halves,
        Err(ClientError::Daemon { .. }) => return Passed::Refused,
        Err(e) => return Passed::Done(Err(e)),
    };
    let mut serve = Serve {
        session: &session,
        reader,
        writer,
        read_only,
        outcome: None,
        detached: false,
        signal: None,
    };
    let result = serve.run(&sfd);
    drop(guard);
    Passed::Done(result.and_then(|()| serve.finish()))
}

/// The attachment's state.
struct Serve<'a> {
    session: &'a SessionRef,
    reader: latch_client::AttachReader,
    writer: latch_client::AttachWriter,
    read_only: bool,
    outcome: Option<latch_wire::ExitStatus>,
    detached: bool,
    /// A signal that ended the attachment (after the daemon let the terminal go).
    signal: Option<Signal>,
}

impl Serve<'_> {
    /// Waits for the connection's end and the signals, until DETACHED, EXIT, an
    /// error, or the daemon's close.
    fn run(&mut self, signals: &SignalFd) -> Result<(), ClientError> {
        loop {
            while let Some(event) = self.reader.try_next_event()? {
                match event {
                    AttachEvent::Exit(s) => self.outcome = Some(s),
                    AttachEvent::Detached => {
                        self.detached = true;
                        return Ok(());
                    }
                    // The daemon is gone: the guard restores the terminal.
                    AttachEvent::Closed => return Ok(()),
                    AttachEvent::Error { code, detail } => {
                        attach::restore(None);
                        return Err(attach::daemon_error(&self.session.id, code, detail));
                    }
                    _ => {}
                }
            }
            let mut fds = [
                PollFd::new(self.reader.as_fd(), PollFlags::POLLIN),
                PollFd::new(signals.as_fd(), PollFlags::POLLIN),
            ];
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(ClientError::failed("poll", e)),
            }
            self.signals(signals);
        }
    }

    /// A window size change is passed on; a signal that ends attach asks the
    /// daemon to detach (it releases the terminal before DETACHED).
    fn signals(&mut self, signals: &SignalFd) {
        while let Ok(Some(info)) = signals.read_signal() {
            match Signal::try_from(i32::try_from(info.ssi_signo).unwrap_or(0)) {
                Ok(Signal::SIGWINCH) => {
                    let (r, c) = attach::size();
                    if r > 0 && !self.read_only {
                        let _ = self.writer.resize(r, c);
                    }
                }
                Ok(sig) => {
                    if self.signal.is_none() {
                        self.signal = Some(sig);
                        let _ = self.writer.detach();
                    }
                }
                Err(_) => {}
            }
        }
    }

    /// The relayed attach's messages and codes. The daemon's epilogue ended on a
    /// fresh line.
    fn finish(&self) -> Result<i32, ClientError> {
        if let Some(sig) = self.signal.filter(|_| self.outcome.is_none()) {
            eprintln!("\r[latch: {sig} received, detached]");
            return Ok(exit::OTHER);
        }
        attach::finish(self.session, Some(b'\n'), self.outcome, self.detached, None)
    }
}
