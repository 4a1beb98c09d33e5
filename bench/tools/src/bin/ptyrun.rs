//! Runs a command on a fresh pseudo-terminal and discards what it prints, the way a
//! terminal emulator that draws nothing would: the "raw PTY" baseline
//! (`ptyrun -- cat FILE`) and the terminal of every attached client in bench/run.sh
//! (`ptyrun -- latch attach ...`, `ptyrun -- tmux attach ...`).
//!
//! ```text
//! ptyrun [--rows N] [--cols N] -- CMD [ARGS...]
//! ```
//!
//! Exits with the command's status once the command has exited and every byte it
//! wrote has been read. Prints `bytes N` on stderr.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn main() -> io::Result<()> {
    let mut args = std::env::args().skip(1);
    let (mut rows, mut cols) = (24u16, 80u16);
    let mut cmd = Vec::new();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--rows" => rows = args.next().and_then(|v| v.parse().ok()).expect("--rows N"),
            "--cols" => cols = args.next().and_then(|v| v.parse().ok()).expect("--cols N"),
            "--" => {
                cmd.extend(args.by_ref());
                break;
            }
            _ => {
                cmd.push(a);
                cmd.extend(args.by_ref());
                break;
            }
        }
    }
    assert!(
        !cmd.is_empty(),
        "usage: ptyrun [--rows N] [--cols N] -- CMD [ARGS...]"
    );

    // SAFETY: plain libc calls on fds this function owns.
    let (master, slave) = unsafe {
        let m = check(libc::posix_openpt(
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        ))?;
        check(libc::grantpt(m))?;
        check(libc::unlockpt(m))?;
        let mut name = [0 as libc::c_char; 128];
        check(libc::ptsname_r(m, name.as_mut_ptr(), name.len()))?;
        let s = check(libc::open(
            name.as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        ))?;
        let ws = libc::winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        check(libc::ioctl(m, libc::TIOCSWINSZ, &ws))?;
        (OwnedFd::from_raw_fd(m), OwnedFd::from_raw_fd(s))
    };
    let mut c = Command::new(&cmd[0]);
    c.args(&cmd[1..])
        .stdin(Stdio::from(slave.try_clone()?))
        .stdout(Stdio::from(slave.try_clone()?))
        .stderr(Stdio::from(slave));
    // SAFETY: async-signal-safe calls only, between fork and exec.
    unsafe {
        c.pre_exec(|| {
            check(libc::setsid())?;
            check(libc::ioctl(0, libc::TIOCSCTTY, 0))?;
            Ok(())
        });
    }
    let mut child = c.spawn()?;
    // The Command kept no copy of the slave: only the child holds it now.
    drop(c);
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    loop {
        // SAFETY: reads into a live buffer of the given length.
        let n = unsafe { libc::read(master.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n > 0 {
            total += n as u64;
            continue;
        }
        if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        break; // EIO: every slave fd is closed.
    }
    let status = child.wait()?;
    eprintln!("bytes {total}");
    std::process::exit(status.code().unwrap_or(128 + status.signal().unwrap_or(0)));
}
