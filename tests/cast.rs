//! Recordings end to end (SPEC §4.8): asciicast v2 files written by the daemon,
//! played by the real asciinema, bounded under a stalled reader, created
//! exclusively, and ended with a final marker.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{python, Reg};

/// A path beside the registry root, in the test's own directory.
fn scratch(reg: &Reg, name: &str) -> PathBuf {
    reg.root.parent().unwrap().join(name)
}

/// The cast's lines: the header, then the events.
fn read_cast(path: &Path) -> (Value, Vec<Value>) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let header = serde_json::from_str(lines.next().expect("a header")).unwrap();
    let events = lines
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect();
    (header, events)
}

fn markers(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e[1] == "m")
        .map(|e| e[2].as_str().unwrap().to_owned())
        .collect()
}

fn output(events: &[Value]) -> String {
    events
        .iter()
        .filter(|e| e[1] == "o")
        .map(|e| e[2].as_str().unwrap())
        .collect()
}

/// Waits for a recording's writer to end (its final marker is the last line).
fn wait_final(path: &Path) -> (Value, Vec<Value>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let last = text.lines().last().unwrap_or_default();
        if text.ends_with('\n') && last.contains("\"m\", \"latch: ") {
            return read_cast(path);
        }
        assert!(Instant::now() < deadline, "no final marker in {text:.2000}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until `id`'s events hold every one of `want` (bounded poll).
fn wait_events(reg: &Reg, id: &str, want: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let ev = reg.run(&["events", id, "--json"]).ok().to_owned();
        if want.iter().all(|w| ev.contains(w)) {
            return;
        }
        assert!(Instant::now() < deadline, "{want:?} not in {ev}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

const MIX: &str = r#"printf 'before\n'; read go
printf '\033[0m'; clear
printf '\033[1;31mred bold\033[0m \033[42mgreen bg\033[0m 界面 wide\n'
yes 'flood 0123456789 abcdefghij' | head -c 5000000
printf '\n\033[38;5;202mcolour 202\033[0m \033[38;2;10;200;30mtruecolor\033[0m\n'
printf '漢字かな end\nEND''MARK\n'
read stay"#;

#[test]
fn asciinema_plays_a_recording_back_to_the_same_screen() {
    let reg = Reg::new();
    let cast = scratch(&reg, "mix.cast");
    let cast_s = cast.to_str().unwrap();
    let r = reg.run(&[
        "new", "-d", "--id", "a", "--cast", cast_s, "--", "sh", "-c", MIX,
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    reg.wait_for("a", "before");
    // A resize, then a clear: asciinema cat drops "r" events, and the clear makes
    // what was drawn at the old size invisible.
    reg.run(&["resize", "a", "30", "100"]).ok();
    reg.run(&["send", "a", "--keys", "Enter"]).ok();
    reg.wait_for_within("a", "ENDMARK", 120);
    let plain = reg.run(&["peek", "a"]).ok().to_owned();
    let ansi = reg.run(&["peek", "a", "--ansi"]).ok().to_owned();
    reg.run(&["cast", "a", "--stop"]).ok();
    let (header, events) = wait_final(&cast);
    assert!(events.iter().any(|e| e[1] == "r" && e[2] == "100x30"));
    assert_eq!(header["width"], 80);

    let played = scratch(&reg, "played");
    let out = Command::new(python())
        .args(["-m", "asciinema", "cat", cast_s])
        .stdout(std::fs::File::create(&played).unwrap())
        .output()
        .unwrap();
    assert!(out.status.success(), "asciinema cat: {out:?}");
    let played_len = std::fs::metadata(&played).unwrap().len();
    // All of it, unless the writer fell behind, which it then said.
    let lost = markers(&events).iter().any(|m| m.contains("bytes lost"));
    assert!(played_len > 5_000_000 || lost, "played {played_len} bytes");

    let script = format!("read go; cat '{}'; read stay", played.display());
    reg.new_session("b", &["sh", "-c", &script]);
    reg.run(&["resize", "b", "30", "100"]).ok();
    reg.run(&["send", "b", "--keys", "Enter"]).ok();
    reg.wait_for_within("b", "ENDMARK", 120);
    assert_eq!(reg.run(&["peek", "b"]).ok(), plain);
    assert_eq!(reg.run(&["peek", "b", "--ansi"]).ok(), ansi);
}

#[test]
fn a_stalled_reader_never_slows_the_program_and_the_loss_is_said() {
    let reg = Reg::new();
    let fifo = scratch(&reg, "stream.fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let sink = scratch(&reg, "stream.cast");
    let mut reader = Command::new("cat")
        .arg(&fifo)
        .stdout(std::fs::File::create(&sink).unwrap())
        .spawn()
        .unwrap();
    let flood = "read go; yes 0123456789abcdef | head -c 20000000; echo FLOOD''DONE; read stay; \
                 echo AFTER''LOSS; read z";
    reg.new_session("f", &["sh", "-c", flood]);
    // The FIFO is taken once its reader has it open (bounded poll).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = reg.run(&["cast", "f", fifo.to_str().unwrap()]);
        if r.code == 0 {
            break;
        }
        assert!(r.stderr.contains("nobody reads"), "{r:?}");
        assert!(Instant::now() < deadline, "{r:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = reader.id().to_string();
    assert!(Command::new("kill")
        .args(["-STOP", &pid])
        .status()
        .unwrap()
        .success());
    reg.run(&["send", "f", "--keys", "Enter"]).ok();
    // The ordering proof: the program finishes while the reader is stopped.
    reg.wait_for_within("f", "FLOODDONE", 300);
    let v = reg.run(&["status", "f", "--json"]).json();
    assert_eq!(v["casts"].as_array().unwrap().len(), 1, "{v}");
    assert!(Command::new("kill")
        .args(["-CONT", &pid])
        .status()
        .unwrap()
        .success());
    // Once the writer has drained, the daemon finds its ring moved on: the loss
    // is counted, and the recording goes on live (bounded poll).
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let v = reg.run(&["status", "f", "--json"]).json();
        if v["casts"][0]["droppedBytes"].as_u64().unwrap_or(0) > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{v}");
        std::thread::sleep(Duration::from_millis(50));
    }
    reg.run(&["send", "f", "--keys", "Enter"]).ok();
    reg.wait_for("f", "AFTERLOSS");
    reg.run(&["cast", "f", "--stop"]).ok();
    assert!(reader.wait().unwrap().success());
    let (_, events) = read_cast(&sink);
    let marks = markers(&events);
    assert!(
        marks.iter().any(|m| m.contains("bytes lost")),
        "no loss marker: {marks:?}"
    );
    assert_eq!(marks.last().unwrap(), "latch: recording stopped");
    // After the loss, a fresh screen that shows the end of the flood, then live
    // output again.
    let lost = events
        .iter()
        .position(|e| e[1] == "m" && e[2].as_str().unwrap().contains("bytes lost"))
        .unwrap();
    let after = output(&events[lost..]);
    assert!(after.contains("FLOODDONE"), "{after:.300}");
    assert!(after.contains("AFTERLOSS"), "{marks:?}");
}

#[test]
fn the_file_is_created_exclusively_0600_and_never_through_a_symlink() {
    let reg = Reg::new();
    reg.new_session("x", &["sh", "-c", "echo hi; read x"]);
    reg.wait_for("x", "hi");
    let existing = scratch(&reg, "exists.cast");
    std::fs::write(&existing, "mine").unwrap();
    let r = reg.run(&["cast", "x", existing.to_str().unwrap()]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("already exists"), "{r:?}");
    assert_eq!(std::fs::read_to_string(&existing).unwrap(), "mine");

    let target = scratch(&reg, "target.cast");
    let link = scratch(&reg, "link.cast");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let r = reg.run(&["cast", "x", link.to_str().unwrap()]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("symbolic link"), "{r:?}");
    assert!(!target.exists());

    // A relative FILE is the caller's cwd's.
    let dir = scratch(&reg, "");
    let r = reg
        .cmd()
        .current_dir(&dir)
        .args(["cast", "x", "rel.cast"])
        .output()
        .unwrap();
    assert!(r.status.success(), "{r:?}");
    let made = dir.join("rel.cast");
    let mode = std::fs::metadata(&made).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    // new --cast refuses an existing file too, and creates nothing.
    let r = reg.run(&[
        "new",
        "-d",
        "--id",
        "y",
        "--cast",
        existing.to_str().unwrap(),
        "--",
        "true",
    ]);
    assert_ne!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains("already exists"), "{r:?}");
    assert!(!reg.path("y.json").exists());
}

#[test]
fn a_mid_session_recording_starts_with_the_screen_and_says_who_it_is() {
    let reg = Reg::new();
    let inc = reg.new_session(
        "m",
        &[
            "sh",
            "-c",
            "printf '\\033[32mALREADY\\033[0m here\\n'; read x; echo LATER; read y",
        ],
    );
    reg.wait_for("m", "ALREADY");
    let cast = scratch(&reg, "mid.cast");
    let r = reg.run(&["cast", "m", cast.to_str().unwrap(), "--json"]);
    let v = r.json();
    assert_eq!(v["casts"][0]["file"], cast.to_str().unwrap());
    reg.run(&["send", "m", "--keys", "Enter"]).ok();
    reg.wait_for("m", "LATER");
    reg.run(&["cast", "m", "--stop"]).ok();
    let (header, events) = wait_final(&cast);
    assert_eq!(header["version"], 2);
    assert_eq!(
        (header["width"].as_u64(), header["height"].as_u64()),
        (Some(80), Some(24))
    );
    assert!(header["timestamp"].as_u64().unwrap() > 1_600_000_000);
    assert_eq!(header["env"]["SHELL"], "/bin/sh");
    assert!(header["env"]["TERM"].is_string());
    assert_eq!(header["title"], "m");
    assert_eq!(header["latch"]["id"], "m");
    assert_eq!(header["latch"]["incarnation"], inc.as_str());
    // The first event is the current screen, at time 0.
    assert_eq!(events[0][0].as_f64(), Some(0.0));
    assert!(events[0][2].as_str().unwrap().contains("ALREADY"));
    assert!(output(&events).contains("LATER"));
    let times: Vec<f64> = events.iter().map(|e| e[0].as_f64().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    // Start and stop are events, recorded by the event writer (bounded poll).
    wait_events(
        &reg,
        "m",
        &["\"cast_start\"", "\"cast_stop\"", "\"stopped\""],
    );
    // Nothing is left to stop.
    let v = reg.run(&["status", "m", "--json"]).json();
    assert_eq!(v["casts"], serde_json::json!([]));
}

#[test]
fn max_bytes_ends_the_recording_with_a_final_marker() {
    let reg = Reg::new();
    reg.new_session(
        "b",
        &[
            "sh",
            "-c",
            "read x; yes bounded | head -c 100000; echo OVER; read y",
        ],
    );
    let cast = scratch(&reg, "max.cast");
    reg.run(&["cast", "b", cast.to_str().unwrap(), "--max-bytes", "8192"])
        .ok();
    reg.run(&["send", "b", "--keys", "Enter"]).ok();
    reg.wait_for("b", "OVER");
    let (_, events) = wait_final(&cast);
    let len = std::fs::metadata(&cast).unwrap().len();
    assert!(len <= 8192, "{len}");
    assert!(markers(&events)
        .last()
        .unwrap()
        .contains("--max-bytes 8192 reached"));
    // It is no longer active, and its stop says why.
    wait_events(&reg, "b", &["\"max-bytes\""]);
    let v = reg.run(&["status", "b", "--json"]).json();
    assert_eq!(v["casts"], serde_json::json!([]));
}

#[test]
fn a_recording_ends_with_its_creation_and_never_continues_into_a_replacement() {
    let reg = Reg::new();
    let cast = scratch(&reg, "first.cast");
    let r = reg.run(&[
        "new",
        "-d",
        "--json",
        "--id",
        "r",
        "--cast",
        cast.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "echo ONE; read x",
    ]);
    let first = r.json()["incarnation"].as_str().unwrap().to_owned();
    reg.wait_for("r", "ONE");
    reg.run(&["restart", "r"]).ok();
    reg.wait_for("r", "ONE");
    let (header, events) = wait_final(&cast);
    assert_eq!(header["latch"]["incarnation"], first.as_str());
    assert_eq!(output(&events).matches("ONE").count(), 1);
    let last = markers(&events).last().unwrap().clone();
    assert!(last.starts_with("latch: the program"), "{last}");
    // The replacement records nothing.
    let v = reg.run(&["status", "r", "--json"]).json();
    assert_ne!(v["incarnation"], first.as_str());
    assert_eq!(v["casts"], serde_json::json!([]));
}

/// Under a restart policy the daemon stays across incarnations, and `new --cast
/// FILE` records each into its own file, FILE then FILE.1, each naming its own
/// creation and holding only its output (SPEC §4.8, §9.16).
#[test]
fn a_restart_policy_records_each_incarnation_into_its_own_file() {
    let reg = Reg::new();
    let cast = scratch(&reg, "loop.cast");
    let r = reg.run(&[
        "new",
        "-d",
        "--json",
        "--id",
        "crash",
        "--restart",
        "on-failure",
        "--max-restarts",
        "1",
        "--restart-delay",
        "50ms",
        "--cast",
        cast.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "echo RUN-$LATCH_INCARNATION; exit 3",
    ]);
    let first = r.json()["incarnation"].as_str().unwrap().to_owned();
    let flapped = reg.run(&[
        "events",
        "crash",
        "--wait",
        "session_flapping",
        "--timeout",
        "60",
    ]);
    assert_eq!(flapped.code, 0, "{flapped:?}");
    let (h0, e0) = wait_final(&cast);
    let (h1, e1) = wait_final(&cast.with_file_name("loop.cast.1"));
    assert_eq!(h0["latch"]["incarnation"], first.as_str());
    let second = h1["latch"]["incarnation"].as_str().unwrap().to_owned();
    assert_ne!(second, first);
    assert!(output(&e0).contains(&format!("RUN-{first}")), "{e0:?}");
    assert!(output(&e1).contains(&format!("RUN-{second}")), "{e1:?}");
    assert!(!output(&e1).contains(&first), "{e1:?}");
    assert!(!cast.with_file_name("loop.cast.2").exists());
}
