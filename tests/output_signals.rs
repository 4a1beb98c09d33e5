//! End to end: output and signals. A closed or full stdout ends latch without a
//! panic after the effect is done (141 quietly, 13 with the output on stderr);
//! control characters print escaped for people and raw in JSON; `ls` columns fit
//! their content; a session whose daemon is gone is killed whole (SPEC §5.6, §10).

mod support;

use std::os::fd::OwnedFd;
use std::process::Stdio;

use support::{Reg, Run};

/// A pipe whose read end is already closed: a write to it fails with EPIPE.
fn closed_pipe() -> OwnedFd {
    let (r, w) = nix::unistd::pipe().unwrap();
    drop(r);
    w
}

/// Runs latch with stdout a pipe nobody reads.
fn run_closed(reg: &Reg, args: &[&str]) -> Run {
    let out = reg
        .cmd()
        .args(args)
        .stdout(Stdio::from(closed_pipe()))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    Run::from(out)
}

/// Runs latch with stdout `/dev/full`: every write fails with ENOSPC.
fn run_full(reg: &Reg, args: &[&str]) -> Run {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = reg
        .cmd()
        .args(args)
        .stdout(Stdio::from(full))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    Run::from(out)
}

/// The `ls --json` element of `id`.
fn listed(reg: &Reg, id: &str) -> Option<serde_json::Value> {
    let ls = reg.run(&["ls", "--json"]).json();
    ls.as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == id)
        .cloned()
}

#[test]
fn a_closed_stdout_is_a_quiet_exit_141_after_the_effect() {
    let reg = Reg::new();
    reg.new_session("s", &["sleep", "600"]);

    let r = run_closed(&reg, &["tag", "s", "k=v"]);
    assert_eq!(r.code, 141, "{r:?}");
    assert_eq!(r.stderr, "", "quiet: {r:?}");
    assert_eq!(reg.record("s")["tags"]["k"], "v", "the tag was applied");

    let r = run_closed(&reg, &["new", "-d", "--id", "made", "--", "sleep", "600"]);
    assert_eq!(r.code, 141, "{r:?}");
    assert_eq!(r.stderr, "", "quiet: {r:?}");
    assert_eq!(listed(&reg, "made").unwrap()["status"], "running");

    let r = run_closed(&reg, &["ls", "--json"]);
    assert_eq!(r.code, 141, "{r:?}");
    assert_eq!(r.stderr, "", "quiet: {r:?}");
    let r = run_closed(&reg, &["ls"]);
    assert_eq!(r.code, 141, "{r:?}");
    // A failed command keeps its own code.
    let r = run_closed(&reg, &["status", "nosuch", "--json"]);
    assert_eq!(r.code, 3, "{r:?}");
}

#[test]
fn a_full_stdout_is_exit_13_with_the_output_on_stderr() {
    let reg = Reg::new();
    reg.new_session("s", &["sleep", "600"]);

    let r = run_full(&reg, &["tag", "s", "k=v"]);
    assert_eq!(r.code, 13, "{r:?}");
    assert!(r.stderr.contains("cannot write to stdout"), "{r:?}");
    assert!(r.stderr.contains("s: changed"), "the effect is told: {r:?}");
    assert_eq!(reg.record("s")["tags"]["k"], "v");

    let r = run_full(&reg, &["new", "-d", "--id", "made", "--", "sleep", "600"]);
    assert_eq!(r.code, 13, "{r:?}");
    let inc = listed(&reg, "made").unwrap()["incarnation"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(r.stderr.contains(&format!("made@{inc}")), "{r:?}");

    let r = run_full(&reg, &["ls", "--json"]);
    assert_eq!(r.code, 13, "{r:?}");
    assert!(r.stderr.contains("\"id\":\"made\""), "{r:?}");
}

/// OSC 52 (set the clipboard) and CSI 2J (clear the screen).
const HOSTILE: &str = "\x1b]52;c;aGk=\x07\x1b[2J";
const ESCAPED: &str = r"\e]52;c;aGk=\x07\e[2J";

#[test]
fn control_characters_print_escaped_for_people_and_raw_in_json() {
    let reg = Reg::new();
    let script = format!("exec sleep 600 # {HOSTILE}");
    reg.new_session("esc", &["sh", "-c", &script]);
    let tag = format!("clip={HOSTILE}");
    reg.run(&["tag", "esc", &tag]).ok();

    for args in [&["ls"][..], &["status", "esc"], &[]] {
        let r = reg.run(args);
        assert_eq!(r.code, 0, "{r:?}");
        assert!(
            !r.stdout.contains('\x1b') && !r.stdout.contains('\x07'),
            "{args:?}: {r:?}"
        );
        assert!(r.stdout.contains(ESCAPED), "{args:?}: {r:?}");
    }
    // status shows the tag's value, escaped too.
    let st = reg.run(&["status", "esc"]).stdout;
    assert!(st.contains(&format!("clip={ESCAPED}")), "{st}");
    // JSON carries the bytes as they are.
    let e = listed(&reg, "esc").unwrap();
    assert_eq!(e["command"][2], script.as_str());
    assert_eq!(e["tags"]["clip"], HOSTILE);
}

#[test]
fn ls_columns_fit_the_longest_id() {
    let reg = Reg::new();
    let long = "a".repeat(40);
    reg.new_session(&long, &["sleep", "600"]);
    reg.new_session("short", &["sh", "-c", "exec sleep 601"]);
    let out = reg.run(&["ls"]).ok().to_owned();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    let at = |l: &str, w: &str| l.find(w).unwrap_or_else(|| panic!("{w} in {out}"));
    let status = at(lines[0], "STATUS");
    let command = at(lines[0], "COMMAND");
    assert!(status > long.len(), "{out}");
    for l in &lines[1..] {
        assert_eq!(at(l, "running"), status, "{out}");
        let cmd = l.get(command..).unwrap_or("");
        assert!(
            cmd.starts_with("sleep 600") || cmd.starts_with("sh -c 'exec sleep 601'"),
            "{out}"
        );
    }
}

/// A program that ignores SIGHUP (so it outlives its daemon's hangup) with a
/// background job that ignores it too; returns the job's pid, read off the screen.
fn orphan_with_a_job(reg: &Reg, id: &str) -> u32 {
    reg.new_session(
        id,
        &[
            "sh",
            "-c",
            "trap '' HUP; sleep 1000 & echo \"bg=$! \"; exec sleep 600",
        ],
    );
    let screen = reg.wait_for(id, "bg=");
    let pid = screen
        .split("bg=")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {screen:?}"));
    let rec = reg.record(id);
    let daemon = u32::try_from(rec["daemon"]["pid"].as_u64().unwrap()).unwrap();
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(daemon).unwrap()),
        nix::sys::signal::SIGKILL,
    );
    assert!(support::wait_process_exit(
        daemon,
        std::time::Duration::from_secs(10)
    ));
    assert!(support::alive(pid), "the job runs after its daemon died");
    pid
}

#[test]
fn gc_ends_an_orphaned_session_whole() {
    let reg = Reg::new();
    let job = orphan_with_a_job(&reg, "orphan");
    let r = reg.run(&["gc", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let reports = r.json();
    let report = reports
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == "orphan")
        .cloned()
        .unwrap();
    assert_eq!(report["action"], "orphan-signaled-and-removed", "{r:?}");
    assert!(
        support::wait_process_exit(job, std::time::Duration::from_secs(10)),
        "the background job of the orphaned session was killed too"
    );
}

#[test]
fn kill_without_a_daemon_ends_the_session_whole() {
    let reg = Reg::new();
    let job = orphan_with_a_job(&reg, "orphan");
    let child = u32::try_from(reg.record("orphan")["child"]["pid"].as_u64().unwrap()).unwrap();
    // --wait: the program's end is followed, however loaded the machine.
    let r = reg.run(&["kill", "orphan", "--signal", "TERM", "--wait"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(support::wait_process_exit(
        child,
        std::time::Duration::from_secs(10)
    ));
    assert!(
        support::wait_process_exit(job, std::time::Duration::from_secs(10)),
        "the background job was killed once the program ended"
    );
}

#[test]
fn a_name_with_a_colon_is_remote_unless_local() {
    let reg = Reg::new();
    reg.new_session("s", &["sleep", "600"]);
    reg.run(&["rename", "s", "prod:db"]).ok();
    reg.new_session("t", &["sleep", "601"]);
    reg.run(&["rename", "t", "./prod:db"]).ok();
    // Any ssh fails here: nothing leaves this machine.
    let run = |env: &[(&str, &str)], args: &[&str]| {
        let mut c = reg.cmd();
        c.env("LATCH_SSH", "false").args(args);
        for (k, v) in env {
            c.env(k, v);
        }
        Run::from(c.output().unwrap())
    };
    // `prod:db` is HOST:ID: host prod, session db.
    let r = run(&[], &["status", "prod:db"]);
    assert_ne!(r.code, 0, "{r:?}");
    // --local reads it as this registry's display name.
    let r = run(&[], &["--local", "status", "prod:db"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("sleep 600"), "{r:?}");
    // ... and overrides $LATCH_HOST.
    let r = run(&[("LATCH_HOST", "prod")], &["status", "s"]);
    assert_ne!(r.code, 0, "{r:?}");
    let r = run(&[("LATCH_HOST", "prod")], &["--local", "status", "s"]);
    assert_eq!(r.code, 0, "{r:?}");
    let r = run(&[], &["--local", "--host", "prod", "status", "s"]);
    assert_eq!(r.code, 2, "{r:?}");
    // No HOST starts with `.`: `./prod:db` is a local name without --local.
    let r = run(&[], &["status", "./prod:db"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("sleep 601"), "{r:?}");
}

#[test]
fn ls_cuts_the_command_to_the_terminal_and_only_there() {
    use std::io::Read;
    let reg = Reg::new();
    let long = format!("exec sleep 600 # {}", "x".repeat(200));
    reg.new_session("wide", &["sh", "-c", &long]);
    let ws = nix::pty::Winsize {
        ws_row: 24,
        ws_col: 50,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let pty = nix::pty::openpty(Some(&ws), None).unwrap();
    let mut child = reg
        .cmd()
        .env_remove("COLUMNS")
        .arg("ls")
        .stdout(Stdio::from(pty.slave))
        .spawn()
        .unwrap();
    assert!(child.wait().unwrap().success());
    // Everything written is in the master's buffer; read it without blocking.
    let mut master = std::fs::File::from(pty.master);
    nix::fcntl::fcntl(
        &master,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    )
    .unwrap();
    let mut out = Vec::new();
    let _ = master.read_to_end(&mut out);
    let out = String::from_utf8_lossy(&out).into_owned();
    let lines: Vec<&str> = out.lines().map(|l| l.trim_end_matches('\r')).collect();
    assert_eq!(lines.len(), 2, "{out:?}");
    assert!(lines.iter().all(|l| l.chars().count() <= 50), "{out:?}");
    assert!(lines[1].ends_with('…'), "{out:?}");
    // A pipe gets the whole command.
    let piped = reg.cmd().env_remove("COLUMNS").arg("ls").output().unwrap();
    let piped = String::from_utf8_lossy(&piped.stdout).into_owned();
    assert!(piped.contains(&long), "{piped}");
}
