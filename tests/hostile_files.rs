//! End to end: hostile files in the root (same uid, or a mistake). Every file latch
//! opens there is opened no-follow and non-blocking, must be a regular file, and is
//! read with a cap (SPEC §9.1, §9.14); records and receipts verify under the key
//! with no downgrade (SPEC §2.4, §9.3, §9.10); `rm` removes nothing halfway
//! (SPEC §9.15). Commands that would hang when the bug is present run with a bound.

mod support;

use std::fs;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Reg, Run};

const LIMIT: Duration = Duration::from_secs(20);

/// Runs `cmd` to its end, failing the test (and killing it) if it takes longer than
/// `limit`, with its address space capped at 2 GiB so a read without end fails
/// instead of taking the machine's memory.
fn output_within(mut cmd: Command, limit: Duration) -> Run {
    // SAFETY: setrlimit is async-signal-safe; the closure allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            let cap = libc::rlimit {
                rlim_cur: 2 << 30,
                rlim_max: 2 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &cap) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
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
        Ok(out) => Run::from(out.unwrap()),
        Err(_) => {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap()),
                nix::sys::signal::SIGKILL,
            );
            panic!("the command did not finish within {limit:?}");
        }
    }
}

fn run(reg: &Reg, args: &[&str]) -> Run {
    let mut cmd = reg.cmd();
    cmd.args(args);
    output_within(cmd, LIMIT)
}

fn mkfifo(path: &Path) {
    let _ = fs::remove_file(path);
    nix::unistd::mkfifo(
        path,
        nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
    )
    .unwrap();
}

/// Removes planted files on drop, before the [`Reg`] declared ahead of it cleans up
/// (its cleanup reads every `.json` file, and a FIFO or /dev/zero would hang it).
struct Planted(Vec<std::path::PathBuf>);

impl Drop for Planted {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = fs::remove_file(p);
        }
    }
}

/// Polls (bounded) until `path` contains `text`.
fn wait_file_contains(path: &Path, text: &str, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if fs::read_to_string(path).is_ok_and(|s| s.contains(text)) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn a_fifo_at_the_events_file_never_freezes_the_daemon_and_kill_and_rm_still_work() {
    let reg = Reg::new();
    reg.new_session("f", &["sh", "-c", "echo ready-$((1+1)); exec sh"]);
    reg.wait_for("f", "ready-2");
    let events = reg.path("f.events.jsonl");
    mkfifo(&events);
    // The bell is a terminal event the daemon appends under the session lock.
    let r = run(&reg, &["send", "f", "printf '\\a'; echo rang-$((6*7))\n"]);
    assert_eq!(r.code, 0, "{r:?}");
    let r = run(&reg, &["peek", "f", "--wait", "rang-42", "--timeout", "10"]);
    assert_eq!(r.code, 0, "{r:?}");
    // The daemon refused the FIFO and said so in its log, instead of waiting in open().
    assert!(
        wait_file_contains(&reg.path("f.log"), "f.events.jsonl", LIMIT),
        "the daemon did not report the refused events file: {:?}",
        fs::read_to_string(reg.path("f.log"))
    );
    // Nothing hangs on the FIFO: the events file itself is a degraded read.
    let r = run(&reg, &["events", "f"]);
    assert_eq!(r.code, 7, "{r:?}");
    assert!(r.stderr.contains("f.events.jsonl"), "{r:?}");
    // A change is made, its event lost.
    let r = run(&reg, &["tag", "f", "k=v"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(reg.record("f")["tags"]["k"], "v");
    // A creation whose events file is a FIFO is refused, naming it, and leaves nothing.
    mkfifo(&reg.path("g.events.jsonl"));
    let r = run(&reg, &["new", "-d", "--id", "g", "--", "sleep", "100"]);
    assert_ne!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains("g.events.jsonl"), "{r:?}");
    assert!(!reg.path("g.json").exists() && !reg.path("g.sock").exists());
    for args in [&["ls"][..], &["status", "f"], &["gc", "--dry-run"]] {
        let r = run(&reg, args);
        assert_eq!(r.code, 0, "{args:?}: {r:?}");
    }
    let r = run(&reg, &["kill", "f", "--wait"]);
    assert_eq!(r.code, 0, "{r:?}");
    // The event is lost to the FIFO, never the act: rm --force removes the session,
    // and the FIFO, not latch's, stays.
    let r = run(&reg, &["rm", "--force", "f"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!reg.path("f.json").exists());
    assert!(fs::symlink_metadata(&events).unwrap().file_type().is_fifo());
}

#[test]
fn a_fifo_or_dev_zero_as_a_record_is_degraded_and_named() {
    let reg = Reg::new();
    reg.run(&["ls"]).ok();
    let _planted = Planted(vec![reg.path("fifo.json"), reg.path("zero.json")]);
    mkfifo(&reg.path("fifo.json"));
    std::os::unix::fs::symlink("/dev/zero", reg.path("zero.json")).unwrap();
    let r = run(&reg, &["ls", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let rows: Value = r.json();
    let text = rows.to_string();
    for id in ["fifo", "zero"] {
        let row = rows
            .as_array()
            .unwrap()
            .iter()
            .find(|row| row["id"] == id)
            .unwrap_or_else(|| panic!("{id} not listed: {text}"));
        assert_eq!(row["status"], "degraded", "{row}");
    }
    assert!(text.contains("symbolic link"), "{text}");
    assert!(text.contains("FIFO"), "{text}");
    for id in ["fifo", "zero"] {
        let r = run(&reg, &["status", id]);
        assert_eq!(r.code, 7, "{r:?}");
        assert!(r.stderr.contains(&format!("{id}.json")), "{r:?}");
    }
    let r = run(&reg, &["gc", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("degraded"), "{r:?}");
    assert!(reg.path("fifo.json").exists() && reg.path("zero.json").exists());
}

#[test]
fn a_fifo_at_defaults_json_or_a_receipt_is_an_error_not_a_hang() {
    let reg = Reg::new();
    reg.run(&["ls"]).ok();
    let receipt = reg.root.parent().unwrap().join("r.json");
    let r = run(
        &reg,
        &[
            "new",
            "-d",
            "--id",
            "a",
            "--receipt",
            receipt.to_str().unwrap(),
            "--",
            "true",
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
    mkfifo(&receipt);
    let r = run(&reg, &["receipt", "verify", receipt.to_str().unwrap()]);
    assert_eq!(r.code, 7, "{r:?}");
    assert!(
        r.stderr.contains("FIFO") || r.stdout.contains("FIFO"),
        "{r:?}"
    );

    let _planted = Planted(vec![reg.path("defaults.json")]);
    mkfifo(&reg.path("defaults.json"));
    let r = run(&reg, &["new", "-d", "--id", "b", "--", "true"]);
    assert_eq!(r.code, 7, "{r:?}");
    assert!(r.stderr.contains("defaults.json"), "{r:?}");
    assert!(!reg.path("b.json").exists());
}

fn forge(record: &mut Value) {
    // Well formed, never minted under this root's key.
    record["incarnation"] = Value::from(format!("v1.{}.{}", "ab".repeat(16), "cd".repeat(16)));
    let o = record.as_object_mut().unwrap();
    o.remove("owner");
    o.remove("ownerMac");
}

#[test]
fn a_record_without_owner_fields_or_with_a_never_minted_incarnation_is_degraded() {
    let reg = Reg::new();
    reg.new_session("x", &["true"]);
    reg.wait_exit("x");
    let path = reg.path("x.json");
    let good = reg.record("x");

    // No owner fields at all, incarnation genuine: no downgrade to "before owners".
    let mut stripped = good.clone();
    stripped.as_object_mut().unwrap().remove("ownerMac");
    fs::write(&path, serde_json::to_vec(&stripped).unwrap()).unwrap();
    let r = run(&reg, &["tag", "x", "k=v"]);
    assert_eq!(r.code, 7, "{r:?}");
    assert!(r.stderr.contains("ownerMac"), "{r:?}");

    // The audit's case: a never-minted incarnation and no owner fields.
    let mut forged = good.clone();
    forge(&mut forged);
    fs::write(&path, serde_json::to_vec(&forged).unwrap()).unwrap();
    let r = run(&reg, &["tag", "x", "k=v"]);
    assert_eq!(r.code, 7, "{r:?}");
    assert!(r.stderr.contains("x.json"), "{r:?}");
    let r = run(&reg, &["rm", "x"]);
    assert_eq!(r.code, 7, "{r:?}");
    let r = run(&reg, &["rm", "--force", "x"]);
    assert_eq!(r.code, 7, "{r:?}");
    let r = run(&reg, &["gc", "--json"]);
    assert!(r.stdout.contains("degraded"), "{r:?}");
    let on_disk: Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    assert_eq!(on_disk, forged, "nothing acted on the forged record");
    let r = run(&reg, &["ls", "--json"]);
    assert_eq!(r.json()[0]["status"], "degraded", "{r:?}");
}

/// A record of a version this build does not know is degraded, never read as its
/// own (SPEC §9.3): `tag` and `rm` refuse it and leave it as it was.
#[test]
fn a_record_of_another_version_is_degraded() {
    let reg = Reg::new();
    reg.new_session("v", &["true"]);
    reg.wait_exit("v");
    let path = reg.path("v.json");
    let mut other = reg.record("v");
    other["version"] = Value::from(7);
    fs::write(&path, serde_json::to_vec(&other).unwrap()).unwrap();
    for args in [&["tag", "v", "k=v"][..], &["rm", "v"]] {
        let r = run(&reg, args);
        assert_eq!(r.code, 7, "{args:?}: {r:?}");
        assert!(r.stderr.contains("version 7"), "{r:?}");
    }
    let on_disk: Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    assert_eq!(on_disk, other);
    assert_eq!(run(&reg, &["ls", "--json"]).json()[0]["status"], "degraded");
}

#[test]
fn a_receipt_without_owner_fields_does_not_verify() {
    let reg = Reg::new();
    let receipt = reg.root.parent().unwrap().join("r.json");
    let r = run(
        &reg,
        &[
            "new",
            "-d",
            "--id",
            "a",
            "--receipt",
            receipt.to_str().unwrap(),
            "--",
            "sleep",
            "100",
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let mut v: Value = serde_json::from_slice(&fs::read(&receipt).unwrap()).unwrap();
    v.as_object_mut().unwrap().remove("ownerMac");
    v.as_object_mut().unwrap().remove("owner");
    fs::write(&receipt, serde_json::to_vec(&v).unwrap()).unwrap();
    let r = run(&reg, &["receipt", "verify", receipt.to_str().unwrap()]);
    assert_eq!(r.code, 9, "{r:?}");
    let r = run(&reg, &["kill", "a", "--receipt", receipt.to_str().unwrap()]);
    assert_eq!(r.code, 9, "{r:?}");
}

#[test]
fn rm_and_gc_refuse_up_front_when_the_final_screen_is_a_directory() {
    let reg = Reg::new();
    reg.new_session("d", &["true"]);
    reg.wait_exit("d");
    let screen = reg.path("d.screen");
    let _ = fs::remove_file(&screen);
    fs::create_dir(&screen).unwrap();
    let r = run(&reg, &["rm", "d"]);
    assert_eq!(r.code, 7, "{r:?}");
    assert!(r.stderr.contains("d.screen"), "{r:?}");
    assert!(reg.path("d.json").exists(), "the record stays");
    assert!(reg.path("d.lock").exists() || !reg.path("d.lock").exists());
    let r = run(&reg, &["gc", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("d.screen"), "{r:?}");
    assert!(reg.path("d.json").exists(), "the record stays");
    // No `removed` event was logged for a removal that did not happen.
    let r = run(&reg, &["events", "d", "--json"]);
    assert!(!r.ok().contains("\"removed\""), "{r:?}");
    fs::remove_dir(&screen).unwrap();
    run(&reg, &["rm", "d"]).ok();
    assert!(!reg.path("d.json").exists());
}

/// Runs `latch ARGS` with at most `nofile` descriptors, stdout to a file; returns
/// its outcome and its peak resident set in KiB.
// The child is reaped by wait4, which std's `Child` does not know about.
#[allow(clippy::zombie_processes)]
fn run_measured(reg: &Reg, args: &[&str], nofile: u64) -> (Run, i64) {
    let out = reg.root.parent().unwrap().join("measured.out");
    let mut cmd = reg.cmd();
    cmd.args(args)
        .stdout(fs::File::create(&out).unwrap())
        .stderr(Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe; the closure allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            let cap = libc::rlimit {
                rlim_cur: nofile,
                rlim_max: nofile,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &cap) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().unwrap();
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

fn line(id: &str, ts: u64, n: u64, pad: &str) -> String {
    format!(r#"{{"ts":{ts},"type":"x","id":"{id}","incarnation":"v1.old","n":{n},"pad":"{pad}"}}"#)
}

#[test]
fn events_all_streams_many_files_in_time_order_with_bounded_memory_and_few_fds() {
    const FILES: u64 = 150;
    const PER_FILE: u64 = 300;
    const BOUND_KIB: i64 = 32 << 10;
    let reg = Reg::new();
    reg.run(&["ls"]).ok();
    let pad = "p".repeat(900);
    // 150 files of about 280 KB (42 MB in all), every file's events interleaved in
    // time with the others'.
    for f in 0..FILES {
        let mut text = String::new();
        for n in 0..PER_FILE {
            text.push_str(&line(&format!("e{f:03}"), n * FILES + f, n, &pad));
            text.push('\n');
        }
        fs::write(reg.path(&format!("e{f:03}.events.jsonl")), text).unwrap();
    }
    let (r, peak) = run_measured(&reg, &["events", "--all", "--json"], 32);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let ts: Vec<u64> = r
        .stdout
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["ts"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(ts.len() as u64, FILES * PER_FILE);
    assert!(ts.windows(2).all(|w| w[0] < w[1]), "merged in time order");
    eprintln!("latch events --all over {FILES} files: peak {peak} KiB");
    assert!(peak < BOUND_KIB, "latch events --all peaked at {peak} KiB");
}

#[test]
fn events_all_keeps_each_files_order_when_its_time_steps_back() {
    let reg = Reg::new();
    reg.run(&["ls"]).ok();
    // a's clock steps back from 30 to 5: its later lines keep their place after 30.
    let a = [
        line("a", 10, 1, ""),
        line("a", 30, 2, ""),
        line("a", 5, 3, ""),
    ];
    let b = [line("b", 20, 1, ""), line("b", 31, 2, "")];
    fs::write(reg.path("a.events.jsonl"), a.join("\n") + "\n").unwrap();
    fs::write(reg.path("b.events.jsonl"), b.join("\n") + "\n").unwrap();
    let r = run(&reg, &["events", "--all", "--json"]);
    let order: Vec<String> = r
        .ok()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            format!("{}{}", v["id"].as_str().unwrap(), v["n"])
        })
        .collect();
    // Merge times: a1 10, b1 20, a2 30, a3 30 (its ts 5 < 30), b2 31.
    assert_eq!(order, ["a1", "b1", "a2", "a3", "b2"]);
}

#[test]
fn a_huge_title_never_erases_the_sessions_event_history() {
    let reg = Reg::new();
    let script = "printf '\\033]0;%s\\007' \"$(head -c 300000 /dev/zero | tr '\\0' x)\"; \
                  echo titled-$((2*3)); exec sleep 100";
    reg.new_session("t", &["sh", "-c", script]);
    reg.wait_for("t", "titled-6");
    let path = reg.path("t.events.jsonl");
    assert!(
        wait_file_contains(&path, "title_change", LIMIT),
        "no title_change event"
    );
    let size = fs::metadata(&path).unwrap().len();
    assert!(size <= latch_registry::events::EVENTS_MAX_BYTES, "{size}");
    let r = run(&reg, &["events", "t", "--json"]);
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
    assert_eq!(
        types.first().map(String::as_str),
        Some("session_start"),
        "{types:?}"
    );
    assert!(types.iter().any(|t| t == "title_change"), "{types:?}");
}

#[test]
fn a_fifo_or_an_oversized_file_as_the_key_is_refused_not_waited_on() {
    use std::os::unix::fs::PermissionsExt;
    let reg = Reg::new();
    fs::create_dir(&reg.root).unwrap();
    fs::set_permissions(&reg.root, fs::Permissions::from_mode(0o700)).unwrap();
    let key = reg.path("registry.key");
    mkfifo(&key);
    let r = run(&reg, &["ls"]);
    assert_eq!(r.code, 9, "{r:?}");
    assert!(
        r.stderr.contains("registry.key") && r.stderr.contains("FIFO"),
        "{r:?}"
    );
    fs::remove_file(&key).unwrap();
    fs::write(&key, vec![0u8; 1 << 20]).unwrap();
    fs::set_permissions(&key, fs::Permissions::from_mode(0o600)).unwrap();
    let r = run(&reg, &["ls"]);
    assert_eq!(r.code, 9, "{r:?}");
    assert!(r.stderr.contains("registry.key"), "{r:?}");
}
