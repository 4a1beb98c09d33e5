//! The pseudo-terminal and the program on its slave side.
//!
//! The master is opened `O_RDWR | O_NOCTTY | O_CLOEXEC` (the daemon never gets a
//! controlling terminal, and the program never inherits the master) and later made
//! non-blocking for `AsyncFd`. The program is spawned with the slave as stdin,
//! stdout and stderr; in the forked child, before exec, it becomes a session leader
//! (`setsid`) and takes the slave as its controlling terminal (`TIOCSCTTY`).

use std::ffi::OsString;
use std::fs::OpenOptions;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

use latch_registry::PidFd;
use nix::fcntl::OFlag;
use nix::sys::termios;

/// Both ends of a fresh PTY.
#[derive(Debug)]
pub(crate) struct PtyPair {
    /// The daemon's end.
    pub master: OwnedFd,
    /// The program's end; dropped by the daemon once the program is spawned.
    pub slave: OwnedFd,
    /// The slave's path (`/dev/pts/N`), recorded so gc can read its idle time.
    pub name: String,
}

/// Opens a PTY of `rows` x `cols`.
pub(crate) fn open(rows: u16, cols: u16) -> io::Result<PtyPair> {
    let master = nix::pty::posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC)?;
    nix::pty::grantpt(&master)?;
    nix::pty::unlockpt(&master)?;
    let name = nix::pty::ptsname_r(&master)?;
    let slave: OwnedFd = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(&name)?
        .into();
    // UTF-8 aware line editing (erase removes a whole character) in cooked mode.
    let mut attrs = termios::tcgetattr(&slave)?;
    attrs.input_flags |= termios::InputFlags::IUTF8;
    termios::tcsetattr(&slave, termios::SetArg::TCSANOW, &attrs)?;
    let master: OwnedFd = master.into();
    set_size(master.as_fd(), rows, cols)?;
    Ok(PtyPair {
        master,
        slave,
        name,
    })
}

/// `TIOCSWINSZ`: sets the terminal size (the kernel sends SIGWINCH to the
/// foreground process group).
pub(crate) fn set_size(fd: BorrowedFd<'_>, rows: u16, cols: u16) -> io::Result<()> {
    let ws = rustix::termios::Winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    Ok(rustix::termios::tcsetwinsize(fd, ws)?)
}

/// Sets `O_NONBLOCK` on `fd`.
pub(crate) fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    let flags = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFL)?;
    let flags = OFlag::from_bits_retain(flags) | OFlag::O_NONBLOCK;
    nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETFL(flags))?;
    Ok(())
}

/// One `read(2)`; `WouldBlock` when nothing is buffered, EIO once every slave fd is
/// closed.
pub(crate) fn read(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    Ok(nix::unistd::read(fd, buf)?)
}

/// One `write(2)`.
pub(crate) fn write(fd: BorrowedFd<'_>, buf: &[u8]) -> io::Result<usize> {
    Ok(nix::unistd::write(fd, buf)?)
}

/// Why the program could not be started.
#[derive(Debug)]
pub(crate) struct SpawnError(pub String);

/// What to run: program, arguments, complete environment, working directory.
#[derive(Debug)]
pub(crate) struct Program<'a> {
    /// Program and arguments (non-empty).
    pub command: &'a [String],
    /// The complete environment.
    pub env: Vec<(OsString, OsString)>,
    /// Working directory.
    pub cwd: &'a str,
}

/// Spawns `program` on the PTY's slave side. Consumes the slave: once this returns,
/// the daemon holds no slave fd, so the master reads EIO when the program's side
/// is closed.
pub(crate) fn spawn(program: &Program<'_>, slave: OwnedFd) -> Result<Child, SpawnError> {
    let Some((exe, args)) = program.command.split_first() else {
        return Err(SpawnError("no program to run".into()));
    };
    match std::fs::metadata(program.cwd) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(SpawnError(format!(
                "working directory {} is not a directory",
                program.cwd
            )))
        }
        Err(e) => {
            return Err(SpawnError(format!(
                "working directory {}: {e}",
                program.cwd
            )))
        }
    }
    let stdio = |fd: &OwnedFd| {
        fd.try_clone()
            .map(Stdio::from)
            .map_err(|e| SpawnError(format!("cannot duplicate the terminal fd: {e}")))
    };
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .env_clear()
        .envs(program.env.iter().map(|(k, v)| (k, v)))
        .current_dir(program.cwd)
        .stdin(stdio(&slave)?)
        .stdout(stdio(&slave)?)
        .stderr(Stdio::from(slave));
    // SAFETY: the closure runs in the forked child between fork and exec, after std
    // has dup2'd the slave onto fds 0, 1 and 2. It calls only async-signal-safe
    // functions (sigemptyset, pthread_sigmask, setsid, ioctl, close_range through
    // syscall) and allocates nothing (`last_os_error` only reads errno).
    unsafe {
        cmd.pre_exec(|| {
            // The daemon blocks the signals it reads from its signalfd
            // (serve::Signals); the program starts with none blocked (std clears
            // the mask too today, which it does not promise).
            let mut empty = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
            libc::sigemptyset(empty.as_mut_ptr());
            if libc::pthread_sigmask(libc::SIG_SETMASK, empty.as_ptr(), std::ptr::null_mut()) != 0 {
                return Err(io::Error::other("cannot clear the signal mask"));
            }
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            // Whatever the daemon inherited above stderr must not reach the program.
            // Marking (not closing) keeps std's exec-error pipe working. Kernels
            // without close_range (< 5.11) leave them as they are.
            let _ = libc::syscall(
                libc::SYS_close_range,
                3u32,
                u32::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            );
            Ok(())
        });
    }
    cmd.spawn()
        .map_err(|e| SpawnError(format!("cannot run {exe}: {e}")))
}

/// The program's process: its pid and the pidfd opened right after spawn. The pidfd
/// becomes readable when the program exits, and is the only way the daemon signals
/// it (never `kill(pid)`).
#[derive(Debug)]
pub(crate) struct ChildProc {
    /// The pidfd.
    pub pidfd: PidFd,
}

impl AsRawFd for ChildProc {
    fn as_raw_fd(&self) -> RawFd {
        self.pidfd.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pty_size_round_trips_and_reads_would_block() {
        let pair = open(7, 33).unwrap();
        let ws = rustix::termios::tcgetwinsize(&pair.slave).unwrap();
        assert_eq!((ws.ws_row, ws.ws_col), (7, 33));
        set_nonblocking(pair.master.as_fd()).unwrap();
        let mut buf = [0u8; 16];
        let err = read(pair.master.as_fd(), &mut buf).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        write(pair.slave.as_fd(), b"hi").unwrap();
        let mut got = Vec::new();
        while got.len() < 2 {
            match read(pair.master.as_fd(), &mut buf) {
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(got, b"hi");
    }

    #[test]
    fn spawn_reports_missing_program_and_cwd() {
        let program = |command: &'static [String], cwd: &'static str| Program {
            command,
            env: Vec::new(),
            cwd,
        };
        static MISSING: [String; 0] = [];
        let pair = open(24, 80).unwrap();
        let err = spawn(&program(&MISSING, "/"), pair.slave).unwrap_err();
        assert!(err.0.contains("no program"), "{}", err.0);

        let cmd: &'static [String] = Box::leak(Box::new(["/nonexistent/prog".to_owned()]));
        let pair = open(24, 80).unwrap();
        let err = spawn(&program(cmd, "/"), pair.slave).unwrap_err();
        assert!(err.0.contains("cannot run /nonexistent/prog"), "{}", err.0);

        let cmd: &'static [String] = Box::leak(Box::new(["true".to_owned()]));
        let pair = open(24, 80).unwrap();
        let err = spawn(&program(cmd, "/nonexistent-dir"), pair.slave).unwrap_err();
        assert!(
            err.0.contains("working directory /nonexistent-dir"),
            "{}",
            err.0
        );
    }
}
