//! Interactive attach: raw mode, detach key, size following, terminal restored on
//! every exit path.

use std::io::{Read, Write};
use std::os::fd::BorrowedFd;
use std::sync::{Arc, Mutex};

use latch_client::{exit, AttachEvent, Client, ClientError};
use latch_wire::SessionRef;
use nix::sys::signal::{SigSet, Signal};
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
        if let Some(saved) = &self.saved {
            let _ = termios::tcsetattr(stdin_fd(), SetArg::TCSADRAIN, saved);
        }
    }
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

/// Attaches this terminal to `session` until detach, exit, or the daemon closes.
pub fn interactive(
    client: &Client,
    session: &SessionRef,
    read_only: bool,
    detach_key: Option<u8>,
) -> Result<i32, ClientError> {
    // Block the signals we handle before any thread starts, so that only the
    // signal thread receives them (sigwait).
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

    let (rows, cols) = size();
    let attached = client.connect(session)?.attach(rows, cols, read_only)?;
    let guard = RawGuard::enter();
    let saved = guard.saved.clone();
    let mut stdout = std::io::stdout();
    let _ = stdout.write_all(&attached.screen);
    let _ = stdout.flush();

    let writer = Arc::new(Mutex::new(attached.writer));
    let mut reader = attached.reader;

    // Signal thread: follow window size; restore the terminal and leave on
    // SIGTERM/SIGHUP/SIGINT.
    {
        let writer = Arc::clone(&writer);
        std::thread::spawn(move || loop {
            let Ok(sig) = handled.wait() else { return };
            if sig == Signal::SIGWINCH {
                let (r, c) = size();
                if r > 0 && !read_only {
                    if let Ok(mut w) = writer.lock() {
                        let _ = w.resize(r, c);
                    }
                }
            } else {
                if let Some(saved) = &saved {
                    let _ = termios::tcsetattr(stdin_fd(), SetArg::TCSADRAIN, saved);
                }
                eprintln!("\r\n[latch: {sig} received, detached]");
                std::process::exit(exit::OTHER);
            }
        });
    }

    // Input thread: forward stdin, watching for the detach key.
    {
        let writer = Arc::clone(&writer);
        std::thread::spawn(move || {
            let mut stdin = std::io::stdin();
            let mut buf = [0u8; 4096];
            loop {
                let n = match stdin.read(&mut buf) {
                    Ok(0) | Err(_) => {
                        if let Ok(mut w) = writer.lock() {
                            let _ = w.detach();
                        }
                        return;
                    }
                    Ok(n) => n,
                };
                let chunk = &buf[..n];
                let cut = detach_key.and_then(|k| chunk.iter().position(|&b| b == k));
                let Ok(mut w) = writer.lock() else { return };
                let send = &chunk[..cut.unwrap_or(n)];
                if !send.is_empty() && !read_only && w.input(send).is_err() {
                    return;
                }
                if cut.is_some() {
                    let _ = w.detach();
                    return;
                }
            }
        });
    }

    let mut outcome = None;
    loop {
        match reader.next_event() {
            Ok(AttachEvent::Output(b) | AttachEvent::Screen(b)) => {
                if stdout.write_all(&b).and_then(|()| stdout.flush()).is_err() {
                    break;
                }
            }
            Ok(AttachEvent::Geometry { .. }) => {}
            Ok(AttachEvent::Exit(s)) => outcome = Some(s),
            Ok(AttachEvent::Detached | AttachEvent::Closed) => break,
            Ok(AttachEvent::Error { code, detail }) => {
                drop(guard);
                if code == latch_wire::ErrorCode::TooSlow {
                    eprintln!(
                        "[latch: cut off by {}: this terminal read nothing for a minute; attach again for a fresh screen]",
                        session.id
                    );
                }
                return Err(ClientError::Daemon { code, detail });
            }
            Err(e) => {
                drop(guard);
                return Err(e);
            }
        }
    }
    drop(guard);
    match outcome {
        Some(s) => match (s.code, s.signal) {
            (_, Some(sig)) => eprintln!("[latch: session {} killed by signal {sig}]", session.id),
            (Some(c), _) => eprintln!("[latch: session {} exited with code {c}]", session.id),
            _ => eprintln!("[latch: session {} exited]", session.id),
        },
        None => eprintln!("[latch: detached from {}]", session.id),
    }
    Ok(exit::OK)
}
