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
