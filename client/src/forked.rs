//! Starting a daemon by forking the creating process, without exec (SPEC §9.6).
//!
//! Only for a caller that is one thread (a fork copies only the calling thread, so a
//! lock another thread held would stay held forever in the child) and that gave
//! its daemon entry ([`crate::Client::with_daemon_entry`]); everyone else spawns
//! and execs `latch daemon`.

use std::fs::File;
use std::os::fd::{IntoRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use latch_registry::CreateSpec;
use nix::unistd::{fork, ForkResult, Pid};

use crate::error::ClientError;

/// The daemon's work, run in the forked child with the spec already in memory: the
/// same function the `latch daemon` entry calls once it has read the spec. It sets
/// stdin to `/dev/null`, forks once more (so the daemon is not a session leader)
/// and returns the process's exit code, which the child exits with.
pub type DaemonEntry = fn(PathBuf, CreateSpec) -> i32;

/// Whether this process has exactly one thread (`/proc/self/task` lists one).
pub(crate) fn single_threaded() -> bool {
    match std::fs::read_dir("/proc/self/task") {
        Ok(dir) => dir.take(2).count() == 1,
        Err(_) => false,
    }
}

/// The command line a forked daemon shows in `/proc/PID/cmdline`: the exec path's
/// arguments, as one string (SPEC §9.6).
fn title(root: &Path) -> Vec<u8> {
    let mut t = b"latch daemon --root ".to_vec();
    t.extend_from_slice(root.as_os_str().as_encoded_bytes());
    t
}

/// Forks the daemon: returns the readiness pipe's read end and the child's pid,
/// which the caller reaps once it has read the line (the child forks the daemon
/// and exits at once). `log` becomes the daemon's stderr.
pub(crate) fn start(
    entry: DaemonEntry,
    root: &Path,
    spec: &CreateSpec,
    log: File,
) -> Result<(File, Pid), ClientError> {
    let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| ClientError::failed("readiness pipe", e))?;
    let title = title(root);
    let root = root.to_path_buf();
    let spec = spec.clone();
    // Nothing the caller buffered may reach the readiness pipe from the child.
    let _ = std::io::Write::flush(&mut std::io::stdout());
    if !single_threaded() {
        return Err(ClientError::Other(
            "a thread started before the fork".into(),
        ));
    }
    // SAFETY: this process has one thread (checked just above), so the child gets
    // every lock in the state this thread left it in: it may allocate.
    match unsafe { fork() } {
        Ok(ForkResult::Parent { child }) => Ok((File::from(read), child)),
        Ok(ForkResult::Child) => {
            drop(read);
            child(entry, root, spec, write, log, &title)
        }
        Err(e) => Err(ClientError::failed("fork", e)),
    }
}

/// The forked child: a new session, default signals, fds 0 to 2 only, the daemon's
/// title, then the daemon's entry. Never returns into the caller's code.
fn child(
    entry: DaemonEntry,
    root: PathBuf,
    spec: CreateSpec,
    ready: OwnedFd,
    log: File,
    title: &[u8],
) -> ! {
    // Raw from here: the descriptors are closed below, and nothing may close them again.
    let (ready, log) = (ready.into_raw_fd(), log.into_raw_fd());
    if let Err(e) = prepare(ready, log) {
        fail(&format!("cannot set up the forked daemon: {e}"));
    }
    // The creator's argv holds its `--env` values: never kept (SPEC §9.6).
    if !crate::proctitle::set(title) {
        fail("cannot overwrite the creator's command line");
    }
    // On the heap: what the daemon needs must not lie in the frames released next.
    run(entry, Box::new((root, spec)))
}

/// The daemon's entry, on a frame below every frame of the creator's, which are
/// dead: this process never returns into them (it exits here), and nothing the
/// daemon uses lives in them (its arguments are on the heap, the creator's argv and
/// environment above them, where the process began). Their pages, as deep as the
/// creator's call chain was at the fork (some 30 KiB for `latch new`), are handed
/// back first, so that an idle daemon does not keep them for its whole life
/// (SPEC §9.6).
#[inline(never)]
fn run(entry: DaemonEntry, args: Box<(PathBuf, CreateSpec)>) -> ! {
    let here = 0u8;
    release_frames_above(std::ptr::addr_of!(here) as usize);
    let (root, spec) = *args;
    // A panic must not unwind into the caller's frames, which would go on as the CLI.
    let code =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| entry(root, spec))).unwrap_or(101);
    std::process::exit(code)
}

/// Room left above `here` for the frames of `run` and `child` themselves.
const OWN_FRAMES: usize = 8 * 1024;

extern "C" {
    /// Where the process's stack began: its argument count, above which the kernel
    /// put argv, the environment and the auxiliary vector (glibc sets it before any
    /// code of ours runs: its start code in a static image, its dynamic loader in
    /// a dynamic one).
    static __libc_stack_end: *const libc::c_void;
}

/// `madvise(MADV_DONTNEED)` over the whole pages strictly between `here` (plus
/// `OWN_FRAMES`) and the page holding the start of the process's stack. A stack
/// that does not read as expected (no room between them) is left alone.
fn release_frames_above(here: usize) {
    // SAFETY: a plain read of a pointer-sized static the loader wrote before main.
    let start = unsafe { __libc_stack_end } as usize;
    // SAFETY: sysconf takes no pointers.
    let page = match usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }) {
        Ok(p) if p.is_power_of_two() => p,
        _ => return,
    };
    let low = (here + OWN_FRAMES).next_multiple_of(page);
    let high = start & !(page - 1);
    if high <= low {
        return;
    }
    // SAFETY: [low, high) lies inside the main thread's stack, above every live frame
    // of this process (`run` never returns, and `OWN_FRAMES` covers its frame and
    // `child`'s) and below the page where the process's stack began, so no live
    // object is in it; MADV_DONTNEED makes those pages read as zero if ever touched
    // again, and nothing will touch them.
    unsafe {
        libc::madvise(low as *mut libc::c_void, high - low, libc::MADV_DONTNEED);
    }
}

/// Ends the child before the daemon starts: the creator reads EOF on the readiness
/// pipe and quotes the log, which this line ends.
fn fail(message: &str) -> ! {
    // stderr is the log once `prepare` has set it; else the caller's.
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        format!("latch daemon: {message}\n").as_bytes(),
    );
    // SAFETY: _exit takes no pointers; nothing of the caller's runs in the child.
    unsafe { libc::_exit(1) }
}

/// setsid, the signal mask and dispositions reset, the readiness pipe on stdout and
/// the log on stderr, every other fd above 2 closed.
fn prepare(ready: RawFd, log: RawFd) -> std::io::Result<()> {
    nix::unistd::setsid()?;
    reset_signals();
    // SAFETY: dup2 and close_range take no pointers; `ready` and `log` are open, and
    // no object in this process owns them any more (made raw above), nor any fd above
    // 2, which nothing in the child uses again.
    unsafe {
        // Above 2 first: with a closed stdout, the pipe or the log may be fd 1 or 2.
        let ready = libc::fcntl(ready, libc::F_DUPFD_CLOEXEC, 3);
        let log = libc::fcntl(log, libc::F_DUPFD_CLOEXEC, 3);
        if ready < 0 || log < 0 || libc::dup2(ready, 1) < 0 || libc::dup2(log, 2) < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // Kernels before 5.9 lack close_range: the daemon closes what /proc lists.
        libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
    }
    Ok(())
}

/// An empty signal mask and every disposition default, as a freshly executed
/// `latch` has them, SIGPIPE ignored as the Rust runtime does before `main`.
fn reset_signals() {
    // SAFETY: sigemptyset/sigprocmask write only the local set; signal() installs no
    // handler of ours (SIG_DFL, SIG_IGN). Signals the kernel refuses (KILL, STOP,
    // the C library's own) fail harmlessly with EINVAL.
    unsafe {
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        for sig in 1..=libc::SIGRTMAX() {
            libc::signal(sig, libc::SIG_DFL);
        }
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}
