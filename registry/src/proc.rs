//! Process identity: start times, boot id, pidfds (SPEC.md §9.5).
//!
//! A pid alone names nothing durable. A [`ProcIdentity`] adds the process's start
//! time (field 22 of `/proc/PID/stat`, in clock ticks since boot) and the boot id,
//! so a recycled pid is detected. To signal a process named in a file: open a
//! pidfd first, then confirm the identity, then signal through the pidfd
//! ([`signal_proven`]); the pidfd pins the process, so nothing can be recycled
//! between the check and the signal.

use std::fs;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

use serde::{Deserialize, Serialize};

/// A process, durably named.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcIdentity {
    /// The pid.
    pub pid: u32,
    /// Field 22 of `/proc/PID/stat`.
    pub start_time: u64,
    /// `/proc/sys/kernel/random/boot_id`.
    pub boot_id: String,
}

impl ProcIdentity {
    /// Reads the identity of a live process.
    pub fn of(pid: u32) -> io::Result<Self> {
        Ok(Self {
            pid,
            start_time: start_time(pid)?,
            boot_id: boot_id()?,
        })
    }
}

/// Reads a `/proc` file whole: the small ones (`stat`, `comm`, `status`, `wchan`,
/// `boot_id`, `smaps_rollup`) in one read, longer ones (`maps`, `smaps`) in
/// doubling steps. procfs reports a size of 0, so the size probe of
/// `fs::read_to_string` (an `fstat` and an `lseek`) buys nothing, and its buffer,
/// grown from 32 bytes, costs five reads for a 300-byte `stat`; a buffer that
/// holds every such file costs one read and the read of its end. `ls` does this
/// twice per session.
pub fn read_proc(path: &str) -> io::Result<String> {
    use std::io::Read as _;
    let mut file = fs::File::open(path)?;
    let mut bytes = vec![0u8; 4096];
    let mut len = 0;
    loop {
        if len == bytes.len() {
            bytes.resize(len * 2, 0);
        }
        match file.read(&mut bytes[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    bytes.truncate(len);
    String::from_utf8(bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Field 22 (starttime) of `/proc/PID/stat`. The command name (field 2) may hold
/// spaces and parentheses, so fields are counted after the last `)`.
pub fn start_time(pid: u32) -> io::Result<u64> {
    let stat = read_proc(&format!("/proc/{pid}/stat"))?;
    parse_start_time(&stat)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "malformed /proc/PID/stat"))
}

/// Parses field 22 out of a `/proc/PID/stat` line.
pub fn parse_start_time(stat: &str) -> Option<u64> {
    let after = stat.get(stat.rfind(')')? + 1..)?;
    // After ")" come fields 3.. ; starttime is field 22, i.e. the 20th here.
    after.split_whitespace().nth(19)?.parse().ok()
}

/// Parses field 3 (the state letter) out of a `/proc/PID/stat` line.
pub fn parse_state(stat: &str) -> Option<char> {
    let after = stat.get(stat.rfind(')')? + 1..)?;
    after.split_whitespace().next()?.chars().next()
}

/// Parses field 6 (the session id) out of a `/proc/PID/stat` line.
pub fn parse_session(stat: &str) -> Option<u32> {
    let after = stat.get(stat.rfind(')')? + 1..)?;
    // After ")" come fields 3 (state), 4 (ppid), 5 (pgrp), 6 (session).
    after.split_whitespace().nth(3)?.parse().ok()
}

/// Parses field 8 (tpgid: the foreground process group of the process's
/// controlling terminal; -1 without one) out of a `/proc/PID/stat` line.
pub fn parse_tpgid(stat: &str) -> Option<i64> {
    let after = stat.get(stat.rfind(')')? + 1..)?;
    // After ")" come fields 3 (state), 4, 5, 6, 7 (tty_nr), 8 (tpgid).
    after.split_whitespace().nth(5)?.parse().ok()
}

/// The foreground process group of `pid`'s terminal and that group leader's name
/// (`/proc/PGID/comm`, when it still exists): what a terminal shows as "running".
/// Read from `/proc` only; nothing is signalled, so no proof is needed.
pub fn foreground(pid: u32) -> Option<(u32, Option<String>)> {
    let stat = read_proc(&format!("/proc/{pid}/stat")).ok()?;
    let pgid = u32::try_from(parse_tpgid(&stat)?).ok().filter(|&p| p > 0)?;
    let name = read_proc(&format!("/proc/{pgid}/comm"))
        .ok()
        .map(|n| n.trim_end().to_owned());
    Some((pgid, name))
}

/// The session id of a live process.
fn session_of(pid: u32) -> Option<u32> {
    let stat = read_proc(&format!("/proc/{pid}/stat")).ok()?;
    parse_session(&stat)
}

/// Every process in terminal session `sid` other than its leader (pid `sid`),
/// each as a pidfd whose membership was proven after it was opened: the pidfd
/// first, then the session id read and compared (SPEC.md §9.5).
///
/// The caller must hold the leader's pid for the whole call, so that no other
/// session can take the number `sid`: the leader alive and proven, or exited but
/// not yet reaped by the caller (its parent). A pid in use as a session id is never
/// given to a new process, so while that holds, "session id == sid" names this
/// session's processes only.
pub fn session_members(sid: u32) -> Vec<PidFd> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == sid || session_of(pid) != Some(sid) {
            continue;
        }
        let Ok(fd) = PidFd::open(pid) else { continue };
        // Proven: the pidfd was opened first, so if the process it names is still
        // alive, it is the one whose session id is read now.
        if session_of(pid) == Some(sid) && !is_zombie(pid) {
            out.push(fd);
        }
    }
    out
}

/// Signals every member of session `sid` but its leader ([`session_members`]'s
/// proof and precondition); returns the handles signalled.
pub fn signal_session_members(sid: u32, signals: &[i32]) -> Vec<PidFd> {
    let members = session_members(sid);
    for fd in &members {
        for &sig in signals {
            let _ = fd.send_signal(sig);
        }
    }
    members
}

/// How long the rest of a killed terminal session gets after its hangup before
/// SIGKILL (SPEC.md §5.6).
pub const KILL_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// What holds the program's pid while its terminal session is scanned
/// ([`session_members`]' precondition).
#[derive(Debug, Clone, Copy)]
pub enum Leader<'a> {
    /// The caller's own child, not reaped yet (the daemon's program): running or a
    /// zombie, its pid is held until the caller reaps it.
    Unreaped(u32),
    /// A proven pidfd on a program that is not the caller's child (its daemon is
    /// gone or cannot be asked): its pid is held only while it runs, so it is
    /// checked alive again after the scan.
    Running(&'a PidFd),
}

/// Hangs up the program's terminal session (SPEC.md §5.6): SIGHUP, then SIGCONT, to
/// every proven member but the program itself. Returns the members signalled, or
/// `None` when a [`Leader::Running`] program ended during the scan: its pid may
/// then name another session, so nothing is signalled.
pub fn hang_up_session(leader: Leader<'_>) -> Option<Vec<PidFd>> {
    let sid = match leader {
        Leader::Unreaped(pid) => pid,
        Leader::Running(fd) => fd.pid(),
    };
    let members = session_members(sid);
    if let Leader::Running(fd) = leader {
        if !fd.is_alive() {
            return None;
        }
    }
    for fd in &members {
        let _ = fd.send_signal(libc::SIGHUP);
        let _ = fd.send_signal(libc::SIGCONT);
    }
    Some(members)
}

/// Waits for `members` (hung up by [`hang_up_session`]) at most `grace` in all,
/// then SIGKILLs each still there; returns how many were killed. The pidfds pin
/// each member, so no lock or pid is needed meanwhile.
pub fn kill_remaining(members: Vec<PidFd>, grace: std::time::Duration) -> usize {
    let deadline = std::time::Instant::now() + grace;
    let mut killed = 0;
    for member in members {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if !member.wait_exit(left) && member.send_signal(libc::SIGKILL).is_ok() {
            killed += 1;
        }
    }
    killed
}

/// A terminal session hung up by a caller that is not its daemon
/// ([`hang_up_orphan`]): the program, signalled, and the rest of its session.
#[derive(Debug)]
pub struct OrphanHangup {
    /// The members hung up, killed by [`OrphanHangup::finish`] if they outlive
    /// the program by [`KILL_GRACE`].
    pub members: Vec<PidFd>,
}

/// Why [`hang_up_orphan`] signalled nothing.
#[derive(Debug)]
#[non_exhaustive]
pub enum OrphanError {
    /// The program ended before it was signalled.
    Gone,
    /// The signal could not be sent.
    Signal(io::Error),
}

impl std::fmt::Display for OrphanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Gone => f.write_str("the program has ended"),
            Self::Signal(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for OrphanError {}

/// The whole-session kill of SPEC.md §5.6 for a program whose daemon cannot do it
/// (gc's orphans, `latch kill` when the daemon cannot be asked): the rest of its
/// terminal session is hung up ([`hang_up_session`], the program checked alive
/// after the scan), then `sig` and (unless `sig` stops it) SIGCONT go to the
/// program. `program` must be
/// proven ([`prove`]).
pub fn hang_up_orphan(program: &PidFd, sig: i32) -> Result<OrphanHangup, OrphanError> {
    let members = hang_up_session(Leader::Running(program)).ok_or(OrphanError::Gone)?;
    match program.send_signal(sig) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {
            // It ended after the scan: the members found were its own.
            kill_remaining(members, KILL_GRACE);
            return Err(OrphanError::Gone);
        }
        Err(e) => return Err(OrphanError::Signal(e)),
    }
    // As a hangup does, and so that a stopped program sees the signal; never
    // undoing a stop that was asked for.
    if ![libc::SIGSTOP, libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU].contains(&sig) {
        let _ = program.send_signal(libc::SIGCONT);
    }
    Ok(OrphanHangup { members })
}

impl OrphanHangup {
    /// Waits for the program at most `grace`; with `kill_program`, SIGKILLs it if
    /// it is still running then (and waits 2 s more). Once the program has ended,
    /// whatever is left of its session after [`KILL_GRACE`] is killed, as the daemon
    /// does after a kill. Returns whether the program ended.
    pub fn finish(self, program: &PidFd, grace: std::time::Duration, kill_program: bool) -> bool {
        let mut ended = program.wait_exit(grace);
        if !ended && kill_program {
            let _ = program.send_signal(libc::SIGKILL);
            ended = program.wait_exit(std::time::Duration::from_secs(2));
        }
        if ended {
            kill_remaining(self.members, KILL_GRACE);
        }
        ended
    }
}

/// Whether `pid` is a zombie or dead (exited, not yet reaped). Such a process still
/// answers signal 0, but it is gone: an orphaned daemon whose init does not reap
/// stays a zombie forever.
pub fn is_zombie(pid: u32) -> bool {
    read_proc(&format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| parse_state(&s))
        .is_some_and(|c| matches!(c, 'Z' | 'X' | 'x'))
}

/// The current boot id (read once per process: it cannot change while we run).
pub fn boot_id() -> io::Result<String> {
    static BOOT_ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    if let Some(id) = BOOT_ID.get() {
        return Ok(id.clone());
    }
    // Tests fake a reboot through this hook, compiled into debug builds only: a
    // release build never reads it (SPEC §9.5).
    #[cfg(debug_assertions)]
    if let Some(id) = std::env::var("LATCH_TEST_BOOT_ID")
        .ok()
        .filter(|v| !v.is_empty())
    {
        return Ok(BOOT_ID.get_or_init(|| id).clone());
    }
    let id = read_proc("/proc/sys/kernel/random/boot_id")?
        .trim()
        .to_owned();
    Ok(BOOT_ID.get_or_init(|| id).clone())
}

/// A pidfd: a handle on one process that never refers to a recycled pid.
#[derive(Debug)]
pub struct PidFd {
    fd: OwnedFd,
    pid: u32,
}

impl PidFd {
    /// `pidfd_open(pid, 0)`.
    pub fn open(pid: u32) -> io::Result<Self> {
        let raw = i32::try_from(pid)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "pid out of range"))?;
        let fd = rustix::process::pidfd_open(raw, rustix::process::PidfdFlags::empty())?;
        Ok(Self { fd, pid })
    }

    /// The pid this handle was opened for.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// `pidfd_send_signal(fd, sig, NULL, 0)`. Fails with ESRCH once the process is
    /// gone, never reaching another process. Only the named signals (those with a
    /// `SIG*` name on Linux: 1-31) can be sent; others are InvalidInput.
    pub fn send_signal(&self, sig: i32) -> io::Result<()> {
        let sig = rustix::process::Signal::from_named_raw(sig).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("no signal named {sig}"),
            )
        })?;
        Ok(rustix::process::pidfd_send_signal(&self.fd, sig)?)
    }

    /// Waits until the process has exited (the pidfd becomes readable), at most
    /// `limit`. `true`: it exited (a zombie counts); `false`: still running.
    pub fn wait_exit(&self, limit: std::time::Duration) -> bool {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let timeout = PollTimeout::try_from(limit).unwrap_or(PollTimeout::MAX);
        let mut fds = [PollFd::new(self.fd.as_fd(), PollFlags::POLLIN)];
        matches!(poll(&mut fds, timeout), Ok(n) if n > 0)
    }

    /// Whether the process is still running: its pidfd is not readable yet (a
    /// zombie has exited).
    pub fn is_alive(&self) -> bool {
        !self.wait_exit(std::time::Duration::ZERO)
    }

    /// The raw fd (readable once the process has exited).
    pub fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsRawFd for PidFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Why a process named in a file could not be proven to be the one recorded.
#[derive(Debug)]
#[non_exhaustive]
pub enum ProofError {
    /// No such process (it exited).
    Gone,
    /// The pid is alive but its start time or the boot id differ: recycled.
    Mismatch,
    /// The proof could not be completed (permission, /proc unreadable).
    Unverifiable(io::Error),
}

impl std::fmt::Display for ProofError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Gone => f.write_str("process is gone"),
            Self::Mismatch => f.write_str("pid now belongs to another process"),
            Self::Unverifiable(e) => write!(f, "cannot verify process identity: {e}"),
        }
    }
}

impl std::error::Error for ProofError {}

/// Opens a pidfd for `who` and proves it is the recorded process: pidfd first, then
/// start time and boot id. Only a proven handle is returned.
pub fn prove(who: &ProcIdentity) -> Result<PidFd, ProofError> {
    let fd = match PidFd::open(who.pid) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Err(ProofError::Gone),
        Err(e) => return Err(ProofError::Unverifiable(e)),
    };
    // The pidfd was opened before the start time is read, so if the start time
    // matches, the pidfd refers to the recorded process (or to nothing, if it has
    // since exited: signals then fail with ESRCH). A zombie has exited too.
    observe(who)?;
    if !fd.is_alive() {
        return Err(ProofError::Gone);
    }
    Ok(fd)
}

/// Observes whether `who` is running now: the boot id, then one read of
/// `/proc/PID/stat` for its start time and state (not a zombie). For reporting a
/// status only: a pid is never signalled on this alone, since nothing pins it
/// after the read ([`prove`] opens a pidfd first). Same outcomes as [`prove`].
pub fn observe(who: &ProcIdentity) -> Result<(), ProofError> {
    let now_boot = boot_id().map_err(ProofError::Unverifiable)?;
    if now_boot != who.boot_id {
        return Err(ProofError::Mismatch);
    }
    // One read of /proc/PID/stat gives both the start time and the state.
    let stat = match read_proc(&format!("/proc/{}/stat", who.pid)) {
        Ok(s) => s,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(ProofError::Gone),
        Err(e) => return Err(ProofError::Unverifiable(e)),
    };
    let malformed = || {
        ProofError::Unverifiable(io::Error::new(
            io::ErrorKind::InvalidData,
            "malformed /proc/PID/stat",
        ))
    };
    if parse_start_time(&stat).ok_or_else(malformed)? != who.start_time {
        return Err(ProofError::Mismatch);
    }
    match parse_state(&stat).ok_or_else(malformed)? {
        'Z' | 'X' | 'x' => Err(ProofError::Gone),
        _ => Ok(()),
    }
}

/// Proves `who` and sends `sig` through the pidfd.
pub fn signal_proven(who: &ProcIdentity, sig: i32) -> Result<(), ProofError> {
    let fd = prove(who)?;
    fd.send_signal(sig).map_err(|e| {
        if e.raw_os_error() == Some(libc::ESRCH) {
            ProofError::Gone
        } else {
            ProofError::Unverifiable(e)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_proc_reads_small_and_large_files_whole() {
        let stat = read_proc(&format!("/proc/{}/stat", std::process::id())).unwrap();
        assert!(
            stat.ends_with('\n') && parse_start_time(&stat).is_some(),
            "{stat}"
        );
        // Longer than the first buffer: grown, nothing lost.
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("long");
        let text: String = (0..3000).map(|i| format!("{i} ")).collect();
        fs::write(&path, &text).unwrap();
        assert_eq!(read_proc(path.to_str().unwrap()).unwrap(), text);
        assert_eq!(
            read_proc("/proc/no-such-file").unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
    }

    #[test]
    fn parses_start_time_with_hostile_comm() {
        let line =
            "1234 (a) b) (c) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(parse_start_time(line), Some(987_654));
        assert_eq!(parse_start_time("garbage"), None);
        assert_eq!(parse_start_time("1 (x) S 1"), None);
        assert_eq!(parse_state(line), Some('S'));
        assert_eq!(parse_state("1 (a) b) Z 0"), Some('Z'));
    }

    #[test]
    fn own_identity_proves_and_a_wrong_start_time_does_not() {
        let me = ProcIdentity::of(std::process::id()).unwrap();
        assert!(prove(&me).is_ok());
        let recycled = ProcIdentity {
            start_time: me.start_time + 1,
            ..me.clone()
        };
        assert!(matches!(prove(&recycled), Err(ProofError::Mismatch)));
        let other_boot = ProcIdentity {
            boot_id: "00000000-0000-0000-0000-000000000000".into(),
            ..me
        };
        assert!(matches!(prove(&other_boot), Err(ProofError::Mismatch)));
    }

    #[test]
    fn an_unreaped_zombie_is_gone() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let who = ProcIdentity::of(child.id()).unwrap();
        // Wait for the exit without reaping: waitid with WNOWAIT.
        let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
        nix::sys::wait::waitid(
            nix::sys::wait::Id::Pid(pid),
            nix::sys::wait::WaitPidFlag::WEXITED | nix::sys::wait::WaitPidFlag::WNOWAIT,
        )
        .unwrap();
        assert!(is_zombie(child.id()));
        assert!(matches!(prove(&who), Err(ProofError::Gone)));
        child.wait().unwrap();
    }

    #[test]
    fn session_members_are_found_by_session_id_and_signalled() {
        use std::os::unix::process::CommandExt;
        // A new session whose leader starts a background member and waits.
        let mut leader = std::process::Command::new("sh");
        leader.args(["-c", "sleep 1000 & wait"]);
        // SAFETY: setsid is async-signal-safe.
        unsafe {
            leader.pre_exec(|| nix::unistd::setsid().map(drop).map_err(io::Error::from));
        }
        let mut leader = leader.spawn().unwrap();
        let sid = leader.id();
        let members = loop {
            let m = session_members(sid);
            if !m.is_empty() {
                break m;
            }
            std::thread::yield_now();
        };
        assert_eq!(members.len(), 1, "only the background sleep");
        assert_ne!(members[0].pid(), sid);
        // Our own process is in another session and never a member.
        assert!(session_members(sid)
            .iter()
            .all(|m| m.pid() != std::process::id()));
        let signalled = signal_session_members(sid, &[libc::SIGKILL]);
        assert_eq!(signalled.len(), 1);
        assert!(signalled[0].wait_exit(std::time::Duration::from_secs(10)));
        leader.kill().unwrap();
        leader.wait().unwrap();
        // A leader proven by pidfd that has ended: its pid may name another session
        // now, so nothing is scanned into a hangup.
        let gone = std::process::Command::new("true").spawn().unwrap();
        let fd = PidFd::open(gone.id()).unwrap();
        let mut gone = gone;
        gone.wait().unwrap();
        assert!(hang_up_session(Leader::Running(&fd)).is_none());
        assert!(matches!(
            hang_up_orphan(&fd, libc::SIGTERM),
            Err(OrphanError::Gone)
        ));
        assert_eq!(parse_session("1 (a) b) S 1 2 3 4 5"), Some(3));
    }

    #[test]
    fn an_orphaned_session_is_ended_whole() {
        use std::os::unix::process::CommandExt;
        // The background member ignores SIGHUP: only the SIGKILL after the grace
        // ends it.
        let mut leader = std::process::Command::new("sh");
        leader.args(["-c", "trap '' HUP; sleep 1000 & wait"]);
        // SAFETY: setsid is async-signal-safe.
        unsafe {
            leader.pre_exec(|| nix::unistd::setsid().map(drop).map_err(io::Error::from));
        }
        let mut leader = leader.spawn().unwrap();
        while session_members(leader.id()).is_empty() {
            std::thread::yield_now();
        }
        let program = PidFd::open(leader.id()).unwrap();
        let hung = hang_up_orphan(&program, libc::SIGTERM).unwrap();
        assert_eq!(hung.members.len(), 1);
        let member = PidFd::open(hung.members[0].pid()).unwrap();
        assert!(hung.finish(&program, std::time::Duration::from_secs(10), true));
        assert!(member.wait_exit(std::time::Duration::from_secs(10)));
        leader.wait().unwrap();
    }

    #[test]
    fn a_reaped_child_is_gone_and_never_signaled() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let who = ProcIdentity::of(child.id()).unwrap();
        child.wait().unwrap();
        assert!(matches!(
            signal_proven(&who, libc::SIGTERM),
            Err(ProofError::Gone)
        ));
    }
}
