//! End to end: files in the registry root, and the receipts latch writes, are made
//! safely and stay bounded (SPEC.md §2.1, §9.1, §9.2, §9.9, §9.10, §9.12).

// Pids read back from JSON records always fit.
#![allow(clippy::cast_possible_truncation)]

mod support;

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use latch_registry::events::EVENTS_MAX_BYTES;
use latch_registry::LOG_MAX_BYTES;
use serde_json::Value;
use support::{alive, latch_bin, Reg, Run};

fn mode(path: &std::path::Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

fn size(path: &std::path::Path) -> u64 {
    fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// Runs `cmd` to its end, failing the test (and killing it) if it takes longer than
/// `limit`: for commands that hang when the bug is present.
fn output_within(mut cmd: Command, limit: Duration) -> Run {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => {
            let out = out.unwrap();
            Run {
                code: out.status.code().unwrap_or(-1),
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            }
        }
        Err(_) => {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap()),
                nix::sys::signal::SIGKILL,
            );
            panic!("the command did not finish within {limit:?}");
        }
    }
}

#[test]
fn a_receipt_is_written_under_an_unpredictable_name_whatever_is_planted() {
    let reg = Reg::new();
    reg.run(&["ls"]).ok();
    let dir = reg.root.parent().unwrap().join("receipts");
    fs::create_dir(&dir).unwrap();
    let receipt = dir.join("s.receipt");
    // Plant a FIFO at the temp name older builds used, `<receipt>.tmp.<pid>`: `exec`
    // keeps the shell's pid for latch. Opening it for writing would block forever.
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(r#"mkfifo "$2.tmp.$$" && exec "$0" --root "$1" new -d --id rc --receipt "$2" -- sleep 100"#)
        .arg(latch_bin())
        .arg(&reg.root)
        .arg(&receipt)
        .env_remove("LATCH_ROOT");
    let r = output_within(cmd, Duration::from_secs(20));
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(mode(&receipt), 0o600);
    let planted: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().unwrap().is_fifo())
        .collect();
    assert_eq!(planted.len(), 1, "the planted FIFO is left as it was");
    assert_eq!(
        fs::read_dir(&dir).unwrap().count(),
        2,
        "no temp file left behind"
    );
    let v = reg.run(&["receipt", "verify", receipt.to_str().unwrap()]);
    assert_eq!(v.code, 0, "{v:?}");
}

#[test]
fn concurrent_first_commands_on_fresh_roots_all_succeed() {
    for _ in 0..12 {
        let reg = Reg::new();
        let children: Vec<_> = (0..8)
            .map(|_| {
                reg.cmd()
                    .args(["ls", "--json"])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for c in children {
            let out = c.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert_eq!(size(&reg.path("registry.key")), 32);
        let names: Vec<String> = fs::read_dir(&reg.root)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["registry.key"], "temp files left behind");
    }
}

#[test]
fn an_empty_key_is_refused_clearly_and_a_stray_temp_key_is_harmless() {
    let reg = Reg::new();
    fs::DirBuilder::new().create(&reg.root).unwrap();
    fs::set_permissions(&reg.root, fs::Permissions::from_mode(0o700)).unwrap();
    // A crash of an older build between creating and writing the key.
    let key = reg.path("registry.key");
    fs::write(&key, b"").unwrap();
    fs::set_permissions(&key, fs::Permissions::from_mode(0o600)).unwrap();
    let r = reg.run(&["ls"]);
    assert_eq!(r.code, 9, "{r:?}");
    assert!(r.stderr.contains("it is empty"), "{r:?}");
    assert!(r.stderr.contains("rm "), "names the fix: {r:?}");
    assert_eq!(size(&key), 0, "an existing key is never replaced");

    // A crash of this build leaves at most a temp file: nothing reads it.
    fs::remove_file(&key).unwrap();
    let stray = reg.path("registry.key.tmp.00112233aabbccdd");
    fs::write(&stray, b"half").unwrap();
    reg.run(&["ls"]).ok();
    assert_eq!(size(&key), 32);
    reg.new_session("after", &["sleep", "100"]);
}

#[test]
fn the_id_defaults_is_reserved_and_defaults_json_is_never_a_session() {
    let reg = Reg::new();
    let r = reg.run(&["new", "-d", "--id", "defaults", "--", "sleep", "100"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("reserved"), "{r:?}");
    assert!(!reg.path("defaults.json").exists());
    assert!(!reg.path("defaults.sock").exists());

    fs::write(reg.path("defaults.json"), br#"{"legacyPolicy": "off"}"#).unwrap();
    let ls = reg.run(&["ls", "--json"]);
    assert_eq!(ls.json(), serde_json::json!([]), "{ls:?}");
    reg.new_session("x", &["sleep", "100"]);
    assert_eq!(reg.record("x")["legacyPolicy"], "off");
    let ls = reg.run(&["ls", "--json"]).json();
    assert_eq!(ls.as_array().unwrap().len(), 1, "{ls}");
    let gc = reg.run(&["gc", "--json"]).json();
    assert!(
        gc.as_array().unwrap().iter().all(|r| r["id"] != "defaults"),
        "{gc}"
    );
}

/// Runs `latch ARGS` and returns its outcome with its peak resident set in KiB.
// The child is reaped by wait4, which std's `Child` does not know about.
#[allow(clippy::zombie_processes)]
fn run_measured(reg: &Reg, args: &[&str]) -> (Run, i64) {
    let out = reg.root.parent().unwrap().join("measured.out");
    let child = reg
        .cmd()
        .args(args)
        .stdout(fs::File::create(&out).unwrap())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut status = 0;
    // SAFETY: zeroed rusage is a valid value; wait4 writes through valid pointers.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = i32::try_from(child.id()).unwrap();
    // SAFETY: as above; the child is ours and not yet reaped.
    let ret = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(ret, pid);
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    let run = Run {
        code,
        stdout: fs::read_to_string(&out).unwrap(),
        stderr: String::new(),
    };
    (run, usage.ru_maxrss)
}

fn vm_hwm_kib(pid: u32) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn event_line(id: &str, kind: &str, n: u32) -> String {
    format!(r#"{{"ts":{n},"type":"{kind}","id":"{id}","incarnation":"v1.old","n":{n}}}"#)
}

#[test]
fn a_huge_events_file_is_read_with_bounded_memory_and_trimmed_on_the_next_append() {
    const HUGE: u64 = 108 << 20;
    const BOUND_KIB: i64 = 40 << 10;
    let reg = Reg::new();
    reg.run(&["ls"]).ok();
    let path = reg.path("big.events.jsonl");
    let mut f = fs::File::create(&path).unwrap();
    writeln!(f, "{}", event_line("big", "session_start", 1)).unwrap();
    // 108 MB, most of it a hole (NUL bytes), then the newest events.
    f.set_len(HUGE).unwrap();
    f.seek(SeekFrom::End(0)).unwrap();
    writeln!(f).unwrap();
    for n in 2..5 {
        writeln!(f, "{}", event_line("big", "removed", n)).unwrap();
    }
    drop(f);

    let (r, peak) = run_measured(&reg, &["events", "big", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let evs: Vec<Value> = r
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ns: Vec<u64> = evs.iter().map(|e| e["n"].as_u64().unwrap()).collect();
    assert_eq!(ns, [2, 3, 4], "the newest events, from the file's end");
    assert!(
        peak < BOUND_KIB,
        "latch events peaked at {peak} KiB reading a {HUGE}-byte file"
    );

    // The next append (the creation's session_start) trims the file to its limit,
    // reading only its end.
    let inc = reg.new_session("big", &["sleep", "100"]);
    assert!(size(&path) <= EVENTS_MAX_BYTES, "{}", size(&path));
    let daemon = u32::try_from(reg.record("big")["daemon"]["pid"].as_u64().unwrap()).unwrap();
    let hwm = vm_hwm_kib(daemon);
    assert!(
        hwm < u64::try_from(BOUND_KIB).unwrap(),
        "the appending daemon peaked at {hwm} KiB"
    );
    let r = reg.run(&["events", "big", "--json"]);
    let types: Vec<String> = r
        .ok()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(types, ["removed", "removed", "removed", "session_start"]);
    assert!(r.stdout.contains(&inc));
}

#[test]
fn an_invalid_line_is_shown_as_unreadable_and_the_rest_still_read() {
    let reg = Reg::new();
    reg.run(&["ls"]).ok();
    let mut bytes = event_line("bad", "session_start", 1).into_bytes();
    bytes.extend_from_slice(b"\n{\"ts\":2,\"type\":\"\xff\xfe\"}\n");
    bytes.extend_from_slice(event_line("bad", "removed", 3).as_bytes());
    bytes.push(b'\n');
    fs::write(reg.path("bad.events.jsonl"), &bytes).unwrap();

    let r = reg.run(&["events", "bad", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let evs: Vec<Value> = r
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let types: Vec<&str> = evs.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["session_start", "unreadable", "removed"], "{evs:?}");
    assert_eq!(evs[1]["id"], "bad");

    let r = reg.run(&["events", "bad"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.stdout.lines().count(), 3, "{r:?}");
    assert!(
        r.stdout.lines().nth(1).unwrap().contains("unreadable"),
        "{r:?}"
    );
}

fn backdate(path: &std::path::Path, days: u64) {
    let then = SystemTime::now() - Duration::from_secs(days * 86_400);
    fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(then)
        .unwrap();
}

fn gc_json(reg: &Reg, extra: &[&str]) -> Vec<Value> {
    let mut args = vec!["gc", "--json"];
    args.extend_from_slice(extra);
    let r = reg.run(&args);
    assert_eq!(r.code, 0, "{r:?}");
    r.json().as_array().unwrap().clone()
}

#[test]
fn gc_removes_the_events_of_long_removed_sessions_only() {
    let reg = Reg::new();
    let mut incs = Vec::new();
    for id in ["old", "young"] {
        incs.push(reg.new_session(id, &["true"]));
        reg.wait_exit(id);
        reg.run(&["rm", id]).ok();
    }
    reg.new_session("live", &["sleep", "100"]);
    fs::write(
        reg.path("started.events.jsonl"),
        format!("{}\n", event_line("started", "session_start", 1)),
    )
    .unwrap();
    for id in ["old", "live", "started"] {
        backdate(&reg.path(&format!("{id}.events.jsonl")), 8);
    }

    let reports = gc_json(&reg, &["--dry-run"]);
    let events: Vec<&Value> = reports
        .iter()
        .filter(|r| r["observed"] == "removed")
        .collect();
    assert_eq!(events.len(), 1, "{reports:?}");
    assert_eq!(events[0]["id"], "old");
    assert_eq!(events[0]["action"], "would-remove-events");
    assert_eq!(events[0]["incarnation"], incs[0].as_str());
    assert!(reg.path("old.events.jsonl").exists(), "dry run removed it");

    let reports = gc_json(&reg, &[]);
    let old = reports.iter().find(|r| r["id"] == "old").unwrap();
    assert_eq!(old["action"], "events-removed", "{reports:?}");
    assert!(!reg.path("old.events.jsonl").exists());
    assert!(
        !reg.path("old.lock").exists(),
        "gc left the lock file it took"
    );
    for id in ["young", "live", "started"] {
        assert!(reg.path(&format!("{id}.events.jsonl")).exists(), "{id}");
    }
    assert_eq!(reg.run(&["ls", "--json"]).json()[0]["status"], "running");
}

/// One connection that logs a line: a first byte no framing starts with (SPEC.md §6
/// rule 4), closed without a reply. The close follows the log line. (Legacy
/// connections are only summarised, once a minute: SPEC.md §7.)
fn logged_round_trip(sock: &std::path::Path) {
    let mut s = UnixStream::connect(sock).unwrap();
    s.write_all(&[0xff]).unwrap();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert!(rest.is_empty(), "{rest:?}");
}

#[test]
fn the_daemon_log_is_rotated_and_stays_bounded() {
    let reg = Reg::new();
    reg.new_session("chatty", &["sleep", "100"]);
    let daemon = u32::try_from(reg.record("chatty")["daemon"]["pid"].as_u64().unwrap()).unwrap();
    let (sock, log, rotated) = (
        reg.path("chatty.sock"),
        reg.path("chatty.log"),
        reg.path("chatty.log.1"),
    );
    let before = size(&log);
    for _ in 0..200 {
        logged_round_trip(&sock);
    }
    let per_connection = (size(&log) - before) / 200;
    assert!(per_connection > 0, "refused connections are logged");
    // Enough for two and a half limits' worth of lines.
    let rounds = (LOG_MAX_BYTES * 5 / 2) / per_connection;
    for _ in 0..rounds {
        logged_round_trip(&sock);
    }
    let total = size(&log) + size(&rotated);
    assert!(
        total <= 2 * LOG_MAX_BYTES,
        "logs hold {total} bytes after {rounds} connections"
    );
    assert!(rotated.exists(), "rotated");
    assert_eq!(mode(&log), 0o600);
    // The daemon still serves and still logs to the fresh file.
    let before = size(&log);
    reg.run(&["peek", "chatty"]).ok();
    logged_round_trip(&sock);
    assert!(size(&log) > before);
    assert!(alive(daemon));

    // rm takes both logs.
    reg.run(&["kill", "chatty", "--wait"]).ok();
    reg.run(&["rm", "chatty"]).ok();
    assert!(!log.exists() && !rotated.exists());
}
