//! End to end: the everyday command line. Receipts and failed creations tell the
//! truth; create-or-attach yields one session; no-argument attach; nesting is
//! refused; the human shapes of ls, status, events and gc; completions and man.

mod support;

use std::process::Stdio;
use std::time::{Duration, SystemTime};

use serde_json::Value;
use support::{Reg, Run};

fn run_in(reg: &Reg, dir: &std::path::Path, args: &[&str]) -> Run {
    Run::from(reg.cmd().current_dir(dir).args(args).output().unwrap())
}

/// Names of the files in the root other than the key.
fn root_files(reg: &Reg) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(&reg.root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "registry.key")
        .collect();
    names.sort();
    names
}

#[test]
fn a_relative_receipt_path_is_the_callers() {
    let reg = Reg::new();
    let dir = reg.root.parent().unwrap().join("work");
    std::fs::create_dir(&dir).unwrap();
    let r = run_in(
        &reg,
        &dir,
        &[
            "new",
            "-d",
            "--id",
            "build",
            "--receipt",
            "build.receipt",
            "--",
            "sleep",
            "60",
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.starts_with("build@v1."), "{r:?}");
    assert!(dir.join("build.receipt").is_file());
    let v = run_in(
        &reg,
        &dir,
        &["receipt", "verify", "build.receipt", "--json"],
    );
    assert_eq!(v.code, 0, "{v:?}");
    assert_eq!(v.json()["verdict"], "current");
    // The receipt pins acting commands by the same relative path.
    let k = run_in(
        &reg,
        &dir,
        &["kill", "build", "--receipt", "build.receipt", "--wait"],
    );
    assert_eq!(k.code, 0, "{k:?}");
}

#[test]
fn a_receipt_that_cannot_be_written_is_refused_before_anything_is_created() {
    let reg = Reg::new();
    reg.run(&["ls"]).ok();
    let missing = reg.root.parent().unwrap().join("no-such-dir/r.receipt");
    let r = reg.run(&[
        "new",
        "-d",
        "--id",
        "b",
        "--receipt",
        missing.to_str().unwrap(),
        "--",
        "sleep",
        "60",
    ]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("nothing was created"), "{r:?}");
    assert_eq!(reg.run(&["ls", "--json"]).json(), serde_json::json!([]));
    assert!(root_files(&reg).is_empty(), "{:?}", root_files(&reg));
    // A directory is no receipt either.
    let dir = reg.root.parent().unwrap();
    let r = reg.run(&["new", "-d", "--id", "b", "--receipt", dir.to_str().unwrap()]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(root_files(&reg).is_empty(), "{:?}", root_files(&reg));
}

/// A receipt that cannot be written after the session was created (here its path
/// is a mount point, so the atomic rename onto it fails with EBUSY although the
/// check before creating passed): exit 11, the created session named with its
/// incarnation, the session running, nothing written at the path.
#[test]
fn a_receipt_write_that_fails_after_creation_exits_11_naming_the_session() {
    // A private mount namespace of its own (a user namespace too when not root),
    // so the bind mount covers the path for this command and its daemon only.
    let unshare = || {
        let mut cmd = std::process::Command::new("unshare");
        if !nix::unistd::geteuid().is_root() {
            cmd.args(["--user", "--map-root-user"]);
        }
        cmd.args(["--mount", "--propagation", "private", "--"]);
        cmd
    };
    // Where no mount namespace can be made (a container without the capability),
    // the case cannot be staged: say so rather than fail on the environment.
    if !unshare().arg("true").status().is_ok_and(|s| s.success()) {
        eprintln!("skipped: no private mount namespace here (unshare --mount failed)");
        return;
    }
    let reg = Reg::new();
    reg.run(&["ls"]).ok();
    let receipt = reg.root.parent().unwrap().join("mounted.receipt");
    std::fs::write(&receipt, b"").unwrap();
    let mut cmd = unshare();
    cmd.args(["sh", "-c"])
        .arg(r#"mount --bind /dev/null "$1" && shift && exec "$@""#)
        .arg("sh")
        .arg(&receipt)
        .arg(support::latch_bin())
        .arg("--root")
        .arg(&reg.root)
        .args(["new", "-d", "--id", "r11", "--receipt"])
        .arg(&receipt)
        .args(["--", "sleep", "300"])
        .env_remove("LATCH_ROOT")
        .stdin(Stdio::null());
    let r = Run::from(cmd.output().expect("unshare (util-linux) is required"));
    assert_eq!(r.code, 11, "{r:?}");
    let named = r.stdout.trim();
    assert!(named.starts_with("r11@v1."), "{r:?}");
    assert!(r.stderr.contains("was created and runs"), "{r:?}");
    let st = reg.run(&["status", "--json", named]);
    assert_eq!(st.code, 0, "{st:?}");
    assert_eq!(st.json()["status"], "running", "{st:?}");
    assert_eq!(
        std::fs::read(&receipt).unwrap(),
        b"",
        "nothing written at the path"
    );
    assert_eq!(reg.run(&["kill", named]).code, 0);
}

#[test]
fn a_failed_create_leaves_no_files_and_gc_removes_proven_orphans() {
    let reg = Reg::new();
    let r = reg.run(&["new", "-d", "--id", "bad", "--", "/nonexistent/program"]);
    assert_ne!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains("/nonexistent/program"), "{r:?}");
    assert!(root_files(&reg).is_empty(), "{:?}", root_files(&reg));

    // Files of an id without a record: old ones are orphans, young ones may be a
    // creation under way.
    for name in ["old.lock", "old.log", "young.lock"] {
        std::fs::write(reg.path(name), b"").unwrap();
    }
    let then = SystemTime::now() - Duration::from_secs(3600);
    for name in ["old.lock", "old.log"] {
        std::fs::File::options()
            .write(true)
            .open(reg.path(name))
            .unwrap()
            .set_modified(then)
            .unwrap();
    }
    let dry = reg.run(&["gc", "--dry-run", "--json"]);
    let reports = dry.json();
    let reports = reports.as_array().unwrap();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(reports[0]["id"], "old");
    assert_eq!(reports[0]["observed"], "orphan");
    assert_eq!(reports[0]["action"], "would-remove-orphan-files");
    assert!(reg.path("old.log").exists(), "dry run removed it");
    let done = reg.run(&["gc", "--json"]).json();
    assert_eq!(done[0]["action"], "orphan-files-removed", "{done}");
    assert_eq!(root_files(&reg), ["young.lock"]);
}

#[test]
fn a_wait_that_times_out_has_its_own_exit_code() {
    let reg = Reg::new();
    reg.new_session("w", &["sleep", "60"]);
    let r = reg.run(&["peek", "w", "--wait", "never-printed", "--timeout", "0.3"]);
    assert_eq!(r.code, 10, "{r:?}");
    assert!(r.stderr.contains("timed out"), "{r:?}");
    let r = reg.run(&[
        "--json",
        "events",
        "w",
        "--wait",
        "session_exit",
        "--timeout",
        "0.3",
    ]);
    assert_eq!(r.code, 10, "{r:?}");
    assert_eq!(r.json()["error"]["kind"], "timed-out");
}

#[test]
fn concurrent_create_or_attach_yields_one_session() {
    let reg = Reg::new();
    reg.run(&["ls"]).ok();
    let spawn = || {
        reg.cmd()
            .args([
                "new", "-A", "-d", "--id", "one", "--json", "--", "sleep", "60",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn(), spawn());
    let outs: Vec<Value> = [a, b]
        .into_iter()
        .map(|c| {
            let o = c.wait_with_output().unwrap();
            assert!(o.status.success(), "{o:?}");
            serde_json::from_slice(&o.stdout).unwrap()
        })
        .collect();
    assert_eq!(outs[0]["incarnation"], outs[1]["incarnation"], "{outs:?}");
    let listed = reg.run(&["ls", "--json"]).json();
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed[0]["incarnation"], outs[0]["incarnation"]);
    // Again, later: it joins the running one.
    let r = reg.run(&["new", "-A", "-d", "--id", "one", "--", "sleep", "60"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains(outs[0]["incarnation"].as_str().unwrap()));
    assert!(r.stderr.contains("already running"), "{r:?}");
    // -A needs an id.
    assert_eq!(reg.run(&["new", "-A", "-d"]).code, 2);
    // An ended session is never silently replaced.
    reg.new_session("done", &["true"]);
    reg.wait_exit("done");
    let r = reg.run(&["new", "-A", "-d", "--id", "done", "--", "sleep", "60"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("latch rm done"), "{r:?}");
}

#[test]
fn attach_without_a_reference_takes_the_most_recently_used() {
    let reg = Reg::new();
    let r = reg.run(&["attach"]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(r.stderr.contains("latch new"), "{r:?}");
    reg.new_session("first", &["sleep", "60"]);
    reg.new_session("second", &["sleep", "60"]);
    // Standard input is /dev/null: the attachment ends at once, detached.
    for cmd in ["attach", "a"] {
        let r = reg.run(&[cmd]);
        assert_eq!(r.code, 0, "{r:?}");
        assert!(
            r.stderr
                .contains("attaching to second, the most recently used of 2"),
            "{r:?}"
        );
        assert!(r.stderr.contains("detached from second"), "{r:?}");
    }
}

#[test]
fn attaching_a_session_to_itself_is_refused() {
    let reg = Reg::new();
    reg.new_session("self", &["sh"]);
    let line = format!("{} attach self; echo RC=$?\r", support::latch_bin());
    reg.run(&["send", "self", &line]).ok();
    // (The echoed command line shows `RC=$?`; the answer shows the code.)
    let screen = reg.wait_for("self", "RC=9");
    assert!(screen.contains("to itself"), "{screen}");
    // The session is unharmed and still answers.
    reg.run(&["send", "self", "echo STILL-$((40+2))\r"]).ok();
    reg.wait_for("self", "STILL-42");
}

#[test]
fn a_shared_display_name_is_noted_on_creation() {
    let reg = Reg::new();
    reg.new_session("one", &["sleep", "60"]);
    reg.run(&["rename", "one", "web"]).ok();
    let r = reg.run(&[
        "new", "-d", "--id", "two", "--name", "web", "--", "sleep", "60",
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stderr.contains("one") && r.stderr.contains("\"web\""),
        "{r:?}"
    );
    let r = reg.run(&[
        "new", "-d", "--id", "three", "--name", "api", "--", "sleep", "60",
    ]);
    assert!(r.stderr.is_empty(), "{r:?}");
}

/// The column at which `word` starts on each line that has it.
fn column(lines: &[&str], word: &str) -> Vec<usize> {
    lines.iter().filter_map(|l| l.find(word)).collect()
}

#[test]
fn ls_prints_a_table_with_fixed_columns() {
    let reg = Reg::new();
    let r = reg.run(&["ls"]);
    assert_eq!(r.stdout.trim(), "no sessions (start one with: latch new)");
    reg.new_session("run", &["sh", "-c", "echo 'it''s'; sleep 60"]);
    reg.new_session("ex", &["sh", "-c", "exit 5"]);
    reg.wait_exit("ex");
    std::fs::write(reg.path("bad.json"), b"{not json").unwrap();
    let r = reg.cmd().env("COLUMNS", "70").arg("ls").output().unwrap();
    let out = String::from_utf8_lossy(&r.stdout).into_owned();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert!(lines[0].starts_with("ID "), "{out}");
    // A degraded row lines up with the others.
    let at = lines[0].find("STATUS").unwrap();
    for w in ["running", "exited(5)", "degraded"] {
        assert_eq!(column(&lines, w), vec![at], "{w} in {out}");
    }
    let age = lines[0].find("AGE").unwrap();
    assert!(
        lines[2]
            .get(age..)
            .unwrap()
            .starts_with(|c: char| c.is_ascii_digit()),
        "{out}"
    );
    // Quoted as a shell would, cut to the width.
    assert!(lines.iter().any(|l| l.contains("sh -c 'exit 5'")), "{out}");
    assert!(lines.iter().all(|l| l.chars().count() <= 70), "{out}");
    assert!(lines.iter().any(|l| l.ends_with('…')), "{out}");
    // Filters that match nothing say so.
    let r = reg.run(&["ls", "--status", "vanished"]);
    assert_eq!(r.stdout.trim(), "no sessions match", "{r:?}");
    // Typos get suggestions (the choices are an enum).
    let r = reg.run(&["ls", "--status", "runing"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("'running'"), "{r:?}");
}

#[test]
fn status_reads_plainly_for_running_exited_and_vanished_sessions() {
    let reg = Reg::new();
    reg.new_session("run", &["sleep", "60"]);
    let r = reg.run(&["status", "run"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("status:      running"), "{r:?}");
    assert!(r.stdout.contains(" cols × "), "{r:?}");
    assert!(!r.stdout.contains("Some("), "{r:?}");

    reg.new_session("ex", &["sh", "-c", "exit 5"]);
    reg.wait_exit("ex");
    let r = reg.run(&["status", "ex"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("exited with code 5"), "{r:?}");
    assert!(r.stdout.contains("latch rm ex"), "{r:?}");
    let v = reg.run(&["receipt", "verify", "/nonexistent"]);
    assert!(!v.stdout.contains("Some("), "{v:?}");

    let inc = reg.new_session("van", &["sleep", "60"]);
    let daemon: u32 = reg.record("van")["daemon"]["pid"]
        .as_u64()
        .unwrap()
        .try_into()
        .unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.try_into().unwrap()),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    assert!(support::wait_process_exit(daemon, Duration::from_secs(10)));
    let r = reg.run(&["status", "van"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("vanished") && r.stdout.contains("latch rm van"),
        "{r:?}"
    );
    let j = reg.run(&["status", "van", "--json"]);
    assert_eq!(j.code, 0, "{j:?}");
    let j = j.json();
    assert_eq!(j["status"], "vanished");
    assert_eq!(j["incarnation"], inc.as_str());
    assert_eq!(j["hint"], "latch rm van");
    assert!(j.get("daemon").is_none(), "{j}");
}

/// `YYYY-MM-DDTHH:MM:SS.mmm+HH:MM`.
fn is_rfc3339(s: &str) -> bool {
    let b = s.as_bytes();
    s.len() == 29
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[19] == b'.'
        && (b[23] == b'+' || b[23] == b'-')
        && b[26] == b':'
}

#[test]
fn events_show_local_times_and_all_sessions_in_time_order() {
    let reg = Reg::new();
    reg.new_session("b", &["sleep", "60"]);
    reg.new_session("a", &["sleep", "60"]);
    reg.run(&["tag", "b", "k=v"]).ok();
    let r = reg.run(&["events", "--all"]);
    assert_eq!(r.code, 0, "{r:?}");
    let lines: Vec<&str> = r.stdout.lines().collect();
    let order: Vec<(&str, &str)> = lines
        .iter()
        .map(|l| {
            let mut w = l.split_whitespace();
            let ts = w.next().unwrap();
            assert!(is_rfc3339(ts), "{l}");
            (
                w.next().unwrap(),
                w.next().unwrap().split('@').next().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        order,
        [
            ("session_start", "b"),
            ("session_start", "a"),
            ("metadata_change", "b")
        ],
        "{r:?}"
    );
    // JSON keeps epoch milliseconds.
    let j = reg.run(&["events", "a", "--json"]);
    let v: Value = serde_json::from_str(j.stdout.lines().next().unwrap()).unwrap();
    assert!(v["ts"].is_u64(), "{v}");
}

#[test]
fn gc_prints_the_same_kind_of_table() {
    let reg = Reg::new();
    let r = reg.run(&["gc", "--dry-run"]);
    assert_eq!(r.stdout.trim(), "nothing to clean up", "{r:?}");
    reg.new_session("ex", &["true"]);
    reg.wait_exit("ex");
    reg.new_session("run", &["sleep", "60"]);
    let r = reg.run(&["gc", "--dry-run"]);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert!(
        lines[0].starts_with("ID ") && lines[0].contains("ACTION"),
        "{r:?}"
    );
    let at = lines[0].find("ACTION").unwrap();
    assert_eq!(column(&lines, "would-remove"), vec![at], "{r:?}");
    assert_eq!(lines.len(), 3, "{r:?}");
}

#[test]
fn bare_latch_summarises_instead_of_failing() {
    let reg = Reg::new();
    let r = reg.run(&[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("no running sessions"), "{r:?}");
    assert!(
        r.stdout.contains("latch new") && r.stdout.contains("latch attach"),
        "{r:?}"
    );
    reg.new_session("s1", &["sleep", "60"]);
    let r = reg.run(&[]);
    assert!(r.stdout.lines().any(|l| l.starts_with("s1 ")), "{r:?}");
}

#[test]
fn completions_for_three_shells_and_a_man_page() {
    let reg = Reg::new();
    for shell in ["bash", "zsh", "fish"] {
        let r = reg.run(&["completions", shell]);
        assert_eq!(r.code, 0, "{r:?}");
        assert!(r.stdout.contains("LATCH_COMPLETE"), "{shell}: {r:?}");
    }
    assert_eq!(reg.run(&["completions", "tcsh"]).code, 2);
    let man = reg.run(&["man"]);
    assert_eq!(man.code, 0, "{man:?}");
    assert!(man.stdout.contains(".TH latch"), "{man:?}");
    assert!(man.stdout.contains("attach"), "{man:?}");
    // Session ids and names complete, through the script's callback.
    reg.new_session("build-1", &["sleep", "60"]);
    reg.run(&["rename", "build-1", "builder"]).ok();
    let o = std::process::Command::new(support::latch_bin())
        .env("LATCH_COMPLETE", "fish")
        .env("LATCH_ROOT", &reg.root)
        .args(["--", "latch", "attach", "buil"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let words: Vec<&str> = out.lines().map(|l| l.split('\t').next().unwrap()).collect();
    assert_eq!(words, ["build-1", "builder"], "{out}");
    // Signals complete and typos get suggestions too.
    let r = reg.run(&["kill", "build-1", "--signal", "TREM"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("'TERM'"), "{r:?}");
}

/// A command that refuses before it reads its stdin is an outcome, not a broken
/// test: the harness's `run_stdin` must not fail on the broken pipe. (A loaded
/// machine once failed a `meta patch` test this way.) 256 KiB is more than a pipe
/// holds, so the write is still under way when `ls` exits without reading.
#[test]
fn a_command_that_exits_without_reading_stdin_is_reported_not_a_harness_failure() {
    let reg = Reg::new();
    let r = reg.run_stdin(&["ls", "--json"], &"x".repeat(256 * 1024));
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.json(), serde_json::json!([]));
}

/// One duration grammar (SPEC §10): `500ms` waits half a second, then times out
/// (exit 10); a duration latch cannot read is a usage error (exit 2).
#[test]
fn durations_take_a_unit() {
    let reg = Reg::new();
    reg.new_session("d", &["sh", "-c", "echo up; sleep 600"]);
    reg.wait_for("d", "up");
    let r = reg.run(&["peek", "d", "--wait", "never-shown", "--timeout", "300ms"]);
    assert_eq!(r.code, 10, "{r:?}");
    assert!(r.stderr.contains("0.3 s"), "{r:?}");
    let r = reg.run(&["peek", "d", "--wait", "x", "--timeout", "1h"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("a bare number is seconds"), "{r:?}");
}
