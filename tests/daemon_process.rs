//! End to end: the daemon is a clean process (SPEC.md §9.6): it keeps no file
//! descriptor its creator's process inherited, holds no directory but `/`, and every
//! path it stores or hands on (root, working directory, `LATCH_ROOT`) is absolute.

// Pids read back from JSON records always fit.
#![allow(clippy::cast_possible_truncation)]

mod support;

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use support::{alive, latch_bin, Reg};

fn pid(v: &Value) -> u32 {
    u32::try_from(v.as_u64().expect("pid")).expect("pid fits")
}

/// The targets of `/proc/PID/fd/*`.
fn fd_targets(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .map(|p| p.to_string_lossy().into_owned())
        .collect()
}

fn proc_cwd(pid: u32) -> PathBuf {
    std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap()
}

#[test]
fn a_pipe_inherited_by_new_reaches_eof_while_the_session_runs() {
    let reg = Reg::new();
    // As `latch new -d ... 3>&1 | cat` does: fd 3 (and stdout) of `latch new` is the
    // write end of a pipe whose reader waits for EOF.
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(r#"exec "$0" --root "$1" new -d --json --id held -- sleep 100 3>&1"#)
        .arg(latch_bin())
        .arg(&reg.root)
        .env_remove("LATCH_ROOT")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut pipe = child.stdout.take().unwrap();
    let inode = pipe_inode(&pipe);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut out = String::new();
        let r = pipe.read_to_string(&mut out).map(|_| out);
        let _ = tx.send(r);
    });
    let out = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the pipe never reached EOF: something in the session still holds it")
        .unwrap();
    assert!(child.wait().unwrap().success(), "{out}");
    let created: Value = serde_json::from_str(out.trim()).unwrap();
    let (daemon, program) = (pid(&created["daemonPid"]), pid(&created["childPid"]));
    assert!(
        alive(daemon) && alive(program),
        "the session must still run"
    );
    let needle = format!("pipe:[{inode}]");
    for p in [daemon, program] {
        let fds = fd_targets(p);
        assert!(!fds.contains(&needle), "pid {p} holds the pipe: {fds:?}");
    }
    // The daemon keeps only what it needs: stdio, the socket, the PTY master, its
    // program's pidfd, the runtime's own descriptors; nothing of the creator's.
    let ls = reg.run(&["ls", "--json"]).json();
    assert_eq!(ls[0]["status"], "running", "{ls}");
}

fn pipe_inode(pipe: &std::process::ChildStdout) -> u64 {
    use std::os::fd::AsFd;
    let f = std::fs::File::from(pipe.as_fd().try_clone_to_owned().unwrap());
    f.metadata().unwrap().ino()
}

#[test]
fn relative_root_and_cwd_are_stored_absolute_and_the_daemon_holds_no_directory() {
    let reg = Reg::new();
    let base = reg.root.parent().unwrap().to_path_buf();
    std::fs::create_dir(base.join("wd")).unwrap();
    // Relative --root and --cwd, resolved against the creator's directory.
    let r = Command::new(latch_bin())
        .current_dir(&base)
        .env_remove("LATCH_ROOT")
        .stdin(Stdio::null())
        .args([
            "--root", "r", "new", "-d", "--json", "--id", "rel", "--cwd", "wd",
        ])
        .args([
            "--",
            "sh",
            "-c",
            r#"echo "root=$LATCH_ROOT!"; exec sleep 100"#,
        ])
        .output()
        .unwrap();
    assert!(r.status.success(), "{r:?}");
    let canonical_root = reg.root.canonicalize().unwrap();
    let canonical_wd = base.join("wd").canonicalize().unwrap();

    let rec = reg.record("rel");
    assert_eq!(
        Path::new(rec["cwd"].as_str().unwrap()),
        canonical_wd,
        "{rec}"
    );
    let (daemon, program) = (pid(&rec["daemon"]["pid"]), pid(&rec["child"]["pid"]));
    assert_eq!(
        proc_cwd(daemon),
        Path::new("/"),
        "the daemon holds a directory"
    );
    assert_eq!(
        proc_cwd(program),
        canonical_wd,
        "the program starts in --cwd"
    );

    // The program's LATCH_ROOT names the root from anywhere.
    let screen = reg.wait_for("rel", "!");
    assert!(
        screen.contains(&format!("root={}!", canonical_root.display())),
        "{screen}"
    );

    // gc run from another directory sees the working directory, so it leaves the
    // session running.
    let r = reg
        .cmd()
        .current_dir("/")
        .args(["gc", "--abandoned", "--json"])
        .output()
        .unwrap();
    assert!(r.status.success(), "{r:?}");
    let reports: Value = serde_json::from_slice(&r.stdout).unwrap();
    let rel = reports
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["id"] == "rel")
        .unwrap();
    assert_eq!(rel["action"], "none", "{reports}");
    assert_eq!(rel["reason"], "running", "{reports}");
    assert!(alive(daemon) && alive(program));
}
