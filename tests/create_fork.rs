//! End to end: `latch new` forks its daemon without exec (SPEC §9.6): the daemon's
//! command line reads `latch daemon --root ROOT` and never the creator's argv, its
//! signal mask and dispositions are a fresh process's, and the library still spawns
//! `latch daemon`.

// Pids read back from JSON always fit.
#![allow(clippy::cast_possible_truncation)]

mod support;

use std::os::unix::process::CommandExt;

use support::{client, Reg};

fn cmdline(pid: u64) -> Vec<u8> {
    std::fs::read(format!("/proc/{pid}/cmdline")).unwrap()
}

/// The title a forked daemon shows: one string and its NUL.
fn title(root: &std::path::Path) -> Vec<u8> {
    let mut t = format!("latch daemon --root {}", root.display()).into_bytes();
    t.push(0);
    t
}

/// A signal set of /proc/PID/status (`SigBlk`, `SigIgn`), as a bit mask.
fn sig_field(pid: u64, name: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:\t")))
        .unwrap();
    u64::from_str_radix(line.trim(), 16).unwrap()
}

fn bit(sig: i32) -> u64 {
    1 << (sig - 1)
}

/// The program's environment reaches the daemon over a pipe and the title replaces
/// the creator's argv: /proc/PID/cmdline, which every user can read, shows neither.
#[test]
fn the_forked_daemon_shows_latch_daemon_and_never_the_creators_argv() {
    let reg = Reg::new();
    let r = reg.run(&[
        "new",
        "-d",
        "--json",
        "--id",
        "env",
        "--env",
        "SECRET_TOKEN=hunter2-xyzzy",
        "--",
        "sh",
        "-c",
        "echo has:$SECRET_TOKEN; cat",
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    let daemon = r.json()["daemonPid"].as_u64().unwrap();
    reg.wait_for("env", "has:hunter2-xyzzy");
    let shown = cmdline(daemon);
    assert!(
        !String::from_utf8_lossy(&shown).contains("hunter2"),
        "secret visible in argv: {:?}",
        String::from_utf8_lossy(&shown)
    );
    assert_eq!(
        String::from_utf8_lossy(&shown),
        String::from_utf8_lossy(&title(&reg.root))
    );
}

/// A title longer than the creator's argv runs on into the environment's area,
/// which the environment leaves first: the program still gets its variables.
#[test]
fn a_title_longer_than_the_argv_runs_into_the_environment_area() {
    let reg = Reg::new();
    // The root comes from the environment and the program from $SHELL: the argv is
    // short, and the title longer by 10 bytes (the socket path's limit allowing).
    let args = ["new", "-d", "--json", "--id", "l"];
    let argv_len = support::latch_bin().len() + args.iter().map(|a| a.len() + 1).sum::<usize>() + 1;
    let base = reg.root.as_os_str().len() + "latch daemon --root /".len();
    let root = reg
        .root
        .join("d".repeat((argv_len + 10).saturating_sub(base).clamp(1, 80)));
    let title = title(&root);
    assert!(
        title.len() > argv_len,
        "the test's title must not fit its argv"
    );
    let _stop = Stop(root.clone());
    let out = std::process::Command::new(support::latch_bin())
        .env("LATCH_ROOT", &root)
        .env("MARK_VAR", "marked")
        .env("SHELL", "/bin/cat")
        .stdin(std::process::Stdio::null())
        .args(args)
        .output()
        .unwrap();
    let r = support::Run::from(out);
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    let shown = cmdline(v["daemonPid"].as_u64().unwrap());
    assert_eq!(
        String::from_utf8_lossy(&shown),
        String::from_utf8_lossy(&title)
    );
    let child = v["childPid"].as_u64().unwrap();
    let environ = std::fs::read(format!("/proc/{child}/environ")).unwrap();
    assert!(
        environ.split(|&b| b == 0).any(|e| e == b"MARK_VAR=marked"),
        "{:?}",
        String::from_utf8_lossy(&environ)
    );
    // The daemon still answers.
    let peek = std::process::Command::new(support::latch_bin())
        .env("LATCH_ROOT", &root)
        .args(["status", "l"])
        .output()
        .unwrap();
    assert!(peek.status.success(), "{peek:?}");
}

/// Stops every daemon of a root that is not a `Reg`'s own.
struct Stop(std::path::PathBuf);

impl Drop for Stop {
    fn drop(&mut self) {
        support::kill_all(&self.0);
    }
}

/// A creator's blocked and ignored signals do not reach the daemon; SIGPIPE is
/// ignored, as in every Rust program.
#[test]
fn the_forked_daemon_starts_with_default_signals() {
    let reg = Reg::new();
    let mut cmd = reg.cmd();
    cmd.args(["new", "-d", "--json", "--id", "sig", "--", "sleep", "600"]);
    // SAFETY: sigprocmask and signal are async-signal-safe; nothing is allocated.
    unsafe {
        cmd.pre_exec(|| {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGUSR2);
            libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            libc::signal(libc::SIGUSR1, libc::SIG_IGN);
            Ok(())
        });
    }
    let r = support::Run::from(cmd.output().unwrap());
    assert_eq!(r.code, 0, "{r:?}");
    let daemon = r.json()["daemonPid"].as_u64().unwrap();
    assert_eq!(sig_field(daemon, "SigBlk") & bit(libc::SIGUSR2), 0);
    let ignored = sig_field(daemon, "SigIgn");
    assert_eq!(ignored & bit(libc::SIGUSR1), 0, "SigIgn {ignored:x}");
    assert_ne!(ignored & bit(libc::SIGPIPE), 0, "SigIgn {ignored:x}");
}

/// The library (which may run threads) keeps spawning `latch daemon --root ROOT`.
#[test]
fn the_library_spawns_latch_daemon() {
    let reg = Reg::new();
    let mut new = latch_client::NewSession::default();
    new.command = vec!["sleep".into(), "600".into()];
    let created = client(&reg).create(new).unwrap();
    let shown = cmdline(u64::from(created.daemon_pid));
    let args: Vec<&[u8]> = shown.split(|&b| b == 0).collect();
    assert_eq!(
        args[1..4],
        [
            &b"daemon"[..],
            b"--root",
            reg.root.as_os_str().as_encoded_bytes()
        ]
    );
}

/// The program starts with no signal blocked, though its daemon blocks SIGTERM and
/// SIGHUP (it reads them from a signalfd) and still handles them: SIGTERM to the
/// daemon reaches the program as SIGHUP (SPEC §5.6).
#[test]
fn the_program_starts_with_no_signal_blocked_and_the_daemon_still_handles_sigterm() {
    let reg = Reg::new();
    let r = reg.run(&[
        "new",
        "-d",
        "--json",
        "--id",
        "mask",
        "--",
        "sh",
        "-c",
        "grep SigBlk /proc/self/status; trap 'exit 7' HUP; echo armed; while :; do sleep 0.05; done",
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    let daemon = r.json()["daemonPid"].as_u64().unwrap();
    let child = r.json()["childPid"].as_u64().unwrap();
    let screen = reg.wait_for("mask", "armed");
    // The tab is drawn as blanks on the screen.
    let mask = screen.lines().find_map(|l| l.strip_prefix("SigBlk:"));
    assert_eq!(mask.map(str::trim), Some("0000000000000000"), "{screen}");
    let blocked = sig_field(daemon, "SigBlk");
    assert_eq!(
        blocked,
        bit(libc::SIGTERM) | bit(libc::SIGHUP),
        "daemon SigBlk {blocked:x}"
    );
    assert_eq!(sig_field(child, "SigBlk"), 0);
    // SAFETY: kill takes no pointers; the pid is the daemon's, alive (just read).
    assert_eq!(unsafe { libc::kill(daemon as i32, libc::SIGTERM) }, 0);
    reg.wait_exit("mask");
    let rec = reg.record("mask");
    assert_eq!(rec["exit"]["code"], 7, "{rec}");
}

/// Whether the page holding `addr` is resident in `pid` (/proc/PID/pagemap's
/// present bit, which an unprivileged reader of its own processes sees too).
fn resident(pid: u64, addr: u64) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(format!("/proc/{pid}/pagemap")).unwrap();
    f.seek(SeekFrom::Start(addr / 4096 * 8)).unwrap();
    let mut entry = [0u8; 8];
    f.read_exact(&mut entry).unwrap();
    u64::from_le_bytes(entry) >> 63 == 1
}

/// A forked daemon hands back the creator's frames, which it never returns into:
/// the page just below where the process's stack began (`_start`, `main` and the
/// CLI's outermost frames, touched by every `latch new`) is not resident in the
/// daemon, while the argv and environment above it still are (SPEC §9.6).
#[test]
fn the_forked_daemon_keeps_none_of_the_creators_stack_frames() {
    let reg = Reg::new();
    let r = reg.run(&["new", "-d", "--json", "--id", "stack", "--", "sleep", "600"]);
    assert_eq!(r.code, 0, "{r:?}");
    let daemon = r.json()["daemonPid"].as_u64().unwrap();
    let stat = std::fs::read_to_string(format!("/proc/{daemon}/stat")).unwrap();
    // Field 28, startstack: counted after the command's closing parenthesis.
    let after = stat.rsplit_once(')').unwrap().1;
    let start: u64 = after.split_whitespace().nth(25).unwrap().parse().unwrap();
    assert!(start > 0, "{stat}");
    let start_page = start & !4095;
    // The strings of argv and the environment, read by the daemon (its title).
    assert!(resident(daemon, start_page), "startstack {start:x}");
    // Below the argument and environment pointers: the creator's first frames.
    let below = start_page - 2 * 4096;
    assert!(
        !resident(daemon, below),
        "the creator's frames at {below:x} are still resident (startstack {start:x})"
    );
    // The daemon still serves.
    reg.wait_for("stack", "");
    assert_eq!(reg.run(&["peek", "stack"]).code, 0);
}
