//! Surviving a reboot (SPEC.md §9.7, §9.18): the boot id in the record, `vanished`
//! with `statusReason: reboot`, the checkpointed screen, `resurrect` with the
//! resume command. A reboot is faked with `LATCH_TEST_BOOT_ID`, which only debug
//! builds read (SPEC §9.5); the machine's death by SIGKILL of daemon and program.

mod support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Reg, Run};

const FAKE_BOOT: &str = "00000000-0000-4000-8000-00000000b007";

/// `latch ARGS` on the machine as it is after the (fake) reboot.
fn after(reg: &Reg, args: &[&str]) -> Run {
    Run::from(
        reg.cmd()
            .env("LATCH_TEST_BOOT_ID", FAKE_BOOT)
            .args(args)
            .output()
            .unwrap(),
    )
}

/// Waits (bounded poll) until `<id>.checkpoint` shows `text`.
fn wait_checkpoint(reg: &Reg, id: &str, text: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(bytes) = std::fs::read(reg.path(&format!("{id}.checkpoint"))) {
            let v: Value = serde_json::from_slice(&bytes).unwrap();
            if v["plain"].as_str().unwrap_or("").contains(text) {
                return v;
            }
        }
        assert!(Instant::now() < deadline, "no checkpoint showing {text:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The machine dies: the daemon first (so no exit is recorded), then the program.
fn machine_dies(reg: &Reg, id: &str) {
    let rec: latch_registry::Record = serde_json::from_value(reg.record(id)).unwrap();
    let daemon = latch_registry::proc::prove(&rec.daemon).unwrap();
    daemon.send_signal(libc::SIGKILL).unwrap();
    assert!(daemon.wait_exit(Duration::from_secs(10)));
    if let Ok(program) = latch_registry::proc::prove(&rec.child) {
        let _ = program.send_signal(libc::SIGKILL);
        assert!(program.wait_exit(Duration::from_secs(10)));
    }
}

fn root_files(reg: &Reg) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&reg.root)
        .unwrap()
        .flatten()
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let bytes = std::fs::read(e.path()).unwrap_or_default();
            (name, bytes)
        })
        .collect();
    out.sort();
    out
}

#[test]
fn a_faked_reboot_is_vanished_reboot_and_resurrect_runs_the_resume_command() {
    let reg = Reg::new();
    let r = reg.run(&[
        "new",
        "-d",
        "--json",
        "--id",
        "w",
        "--name",
        "work",
        "--tag",
        "k=v",
        "--owner",
        "proj",
        "--env",
        "SECRET=s3",
        "--resume-cmd",
        "echo RESUMED \"$SECRET\" \"[$CALLER_ONLY]\"; exec cat",
        "--",
        "sh",
        "-c",
        "echo BEFORE-REBOOT; exec cat",
    ]);
    let old = r.json()["incarnation"].as_str().unwrap().to_owned();
    let cp = wait_checkpoint(&reg, "w", "BEFORE-REBOOT");
    assert_eq!(cp["incarnation"], old.as_str());
    machine_dies(&reg, "w");

    // Under this boot it is a crash: vanished, no reason.
    let ls = reg.run(&["ls", "--json"]).json();
    assert_eq!(ls[0]["status"], "vanished");
    assert!(ls[0].get("statusReason").is_none(), "{ls}");
    // After the reboot: vanished (reboot), in ls and status.
    let ls = after(&reg, &["ls", "--json"]).json();
    assert_eq!(ls[0]["status"], "vanished");
    assert_eq!(ls[0]["statusReason"], "reboot", "{ls}");
    let st = after(&reg, &["status", "w", "--json"]).json();
    assert_eq!(st["statusReason"], "reboot", "{st}");
    assert!(after(&reg, &["ls"]).ok().contains("vanished(reboot)"));

    // --dry-run lists what would run and changes nothing.
    let before = root_files(&reg);
    let dry = after(&reg, &["resurrect", "--all", "--dry-run", "--json"]);
    let plan = dry.json();
    assert_eq!(dry.code, 0, "{dry:?}");
    assert_eq!(plan[0]["outcome"], "would-resurrect");
    assert_eq!(plan[0]["previousIncarnation"], old.as_str());
    assert_eq!(
        plan[0]["command"][2],
        "echo RESUMED \"$SECRET\" \"[$CALLER_ONLY]\"; exec cat"
    );
    assert_eq!(plan[0]["screen"], true);
    assert!(plan[0]["incarnation"].is_null());
    assert_eq!(root_files(&reg), before, "a dry run changed the root");

    // Resurrect, with a variable in the caller's environment that must not leak.
    let r = Run::from(
        reg.cmd()
            .env("LATCH_TEST_BOOT_ID", FAKE_BOOT)
            .env("CALLER_ONLY", "leaked")
            .args(["resurrect", "w", "--json"])
            .output()
            .unwrap(),
    );
    let done = r.json();
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(done[0]["outcome"], "resurrected");
    let new = done[0]["incarnation"].as_str().unwrap().to_owned();
    assert_ne!(new, old);
    let rec = reg.record("w");
    assert_eq!(rec["incarnation"], new.as_str());
    assert_eq!(rec["previousIncarnation"], old.as_str());
    assert_eq!(rec["owner"], "proj");
    assert_eq!(rec["displayName"], "work");
    assert_eq!(rec["tags"]["k"], "v");
    assert!(rec["resumeCommand"].is_array());
    assert_eq!(rec["daemon"]["bootId"], FAKE_BOOT);
    // The checkpointed screen first, then the resume command's output, in the
    // stored environment only.
    let r = after(&reg, &["peek", "w", "--wait", "RESUMED", "--timeout", "20"]);
    let screen = r.ok().to_owned();
    let first = screen
        .find("BEFORE-REBOOT")
        .expect("the old screen is shown");
    let then = screen
        .find("RESUMED s3 []")
        .unwrap_or_else(|| panic!("{screen}"));
    assert!(first < then, "{screen}");
    assert!(!screen.contains("leaked"), "{screen}");
    // The owner is the new creation's, proven; the old incarnation is refused.
    let owned = after(&reg, &["ls", "--owner", "proj", "--json"]).json();
    assert_eq!(owned[0]["incarnation"], new.as_str());
    let r = after(&reg, &["send", &format!("w@{old}"), "x"]);
    assert_eq!(r.code, 4, "{r:?}");
    // Nothing left to resurrect.
    let again = after(&reg, &["resurrect", "--all", "--json"]).json();
    assert_eq!(again, serde_json::json!([]));
    after(&reg, &["kill", "w", "--wait"]).ok();
}

#[test]
fn only_sessions_vanished_by_a_reboot_are_resurrected() {
    let reg = Reg::new();
    reg.new_session("run", &["cat"]);
    reg.new_session("crash", &["cat"]);
    machine_dies(&reg, "crash");
    // Running under this boot, or crashed under it: refused, nothing changed.
    for id in ["run", "crash"] {
        let before = reg.record(id);
        let r = reg.run(&["resurrect", id]);
        assert_eq!(r.code, 9, "{id}: {r:?}");
        assert_eq!(reg.record(id), before);
    }
    let r = reg.run(&["resurrect", "--all", "--json"]);
    assert_eq!(r.json(), serde_json::json!([]));
    // Without a resume command the start command runs again.
    let r = after(&reg, &["resurrect", "crash", "--dry-run", "--json"]);
    assert_eq!(r.json()[0]["command"], serde_json::json!(["cat"]));
    reg.run(&["kill", "run", "--wait"]).ok();
}

#[test]
fn a_resume_command_is_set_only_by_meta_patch_with_the_exact_id() {
    let reg = Reg::new();
    let r = reg.run(&[
        "new",
        "-d",
        "--id",
        "m",
        "--name",
        "nm",
        "--",
        "sh",
        "-c",
        "echo START; exec cat",
    ]);
    r.ok();
    // Tags, by any path, are tags.
    reg.run(&["tag", "m", "resumeCommand=echo EVIL"]).ok();
    reg.run_stdin(
        &["meta", "patch", "--id", "m"],
        r#"{"tags": {"resume-cmd": "echo EVIL"}}"#,
    )
    .ok();
    assert!(reg.record("m").get("resumeCommand").is_none());
    // defaults.json carries none: it is not a key there.
    std::fs::write(
        reg.path("defaults.json"),
        br#"{"resumeCommand": ["sh", "-c", "echo EVIL"]}"#,
    )
    .unwrap();
    let r = reg.run(&["new", "-d", "--id", "d", "--", "cat"]);
    if r.code == 0 {
        assert!(reg.record("d").get("resumeCommand").is_none());
        reg.run(&["kill", "d", "--wait"]).ok();
    }
    std::fs::remove_file(reg.path("defaults.json")).unwrap();
    // A name is not an exact id; a malformed command is refused.
    let patch = r#"{"resumeCommand": ["sh", "-c", "echo PATCHED; exec cat"]}"#;
    let r = reg.run_stdin(&["meta", "patch", "--id", "nm"], patch);
    assert_eq!(r.code, 3, "{r:?}");
    for bad in [
        r#"{"resumeCommand": []}"#,
        r#"{"resumeCommand": "sh"}"#,
        r#"{"resumeCommand": [1]}"#,
    ] {
        let r = reg.run_stdin(&["meta", "patch", "--id", "m"], bad);
        assert_eq!(r.code, 2, "{bad}: {r:?}");
    }
    assert!(reg.record("m").get("resumeCommand").is_none());
    // The exact id sets it, with its event.
    let r = reg.run_stdin(&["meta", "patch", "--id", "m"], patch);
    assert_eq!(r.json()["changed"], serde_json::json!(["resumeCommand"]));
    assert_eq!(
        reg.record("m")["resumeCommand"][2],
        "echo PATCHED; exec cat"
    );
    let ev = reg.run(&["events", "m", "--json"]);
    assert!(ev.ok().contains("\"resumeCommand\""), "{ev:?}");
    // And resurrect runs it, nothing else.
    wait_checkpoint(&reg, "m", "START");
    machine_dies(&reg, "m");
    let r = after(&reg, &["resurrect", "--all"]);
    assert!(r.ok().contains("resurrected"), "{r:?}");
    let screen = after(&reg, &["peek", "m", "--wait", "PATCHED", "--timeout", "20"]);
    assert!(!screen.ok().contains("EVIL"), "{screen:?}");
    after(&reg, &["kill", "m", "--wait"]).ok();
}

/// The documented systemd user unit is valid, where systemd-analyze exists.
#[test]
fn the_systemd_unit_verifies() {
    let unit = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/contrib/latch-resurrect.service"
    );
    let text = std::fs::read_to_string(unit).unwrap();
    assert!(text.contains("ExecStart=/usr/bin/env latch resurrect --all"));
    let Ok(out) = std::process::Command::new("systemd-analyze")
        .args(["verify", unit])
        .output()
    else {
        eprintln!("systemd-analyze is not installed: the unit is not verified");
        return;
    };
    assert!(out.status.success(), "{out:?}");
}

/// `latch restart` carries the resume command and the stored environment, never
/// the caller's.
#[test]
fn restart_keeps_the_resume_command_and_the_stored_environment() {
    let reg = Reg::new();
    reg.run(&[
        "new",
        "-d",
        "--id",
        "r",
        "--env",
        "KEPT=k1",
        "--resume-cmd",
        "exec cat",
        "--",
        "sh",
        "-c",
        "echo \"KEPT=$KEPT CALLER=[$CALLER_ONLY]\"; exec cat",
    ])
    .ok();
    reg.wait_for("r", "KEPT=k1 CALLER=[]");
    let r = Run::from(
        reg.cmd()
            .env("CALLER_ONLY", "leaked")
            .args(["restart", "r"])
            .output()
            .unwrap(),
    );
    r.ok();
    let screen = reg.wait_for("r", "KEPT=k1");
    assert!(screen.contains("CALLER=[]"), "{screen}");
    let rec = reg.record("r");
    assert_eq!(
        rec["resumeCommand"],
        serde_json::json!(["sh", "-c", "exec cat"])
    );
    assert_eq!(rec["env"]["KEPT"], "k1");
    reg.run(&["kill", "r", "--wait"]).ok();
}

/// gc after a reboot keeps a session that has a resume command, for `resurrect`
/// (SPEC §9.12): before, it removed it once its pids were free, and the resume
/// command was lost with its record.
#[test]
fn gc_after_a_reboot_keeps_what_resurrect_would_bring_back() {
    let reg = Reg::new();
    reg.run(&[
        "new",
        "-d",
        "--id",
        "keep",
        "--resume-cmd",
        "exec cat",
        "--",
        "sh",
        "-c",
        "echo K; exec cat",
    ])
    .ok();
    reg.new_session("plain", &["sh", "-c", "echo P; exec cat"]);
    reg.wait_for("keep", "K");
    reg.wait_for("plain", "P");
    machine_dies(&reg, "keep");
    machine_dies(&reg, "plain");
    let gc = after(&reg, &["gc", "--json"]).json();
    let of = |id: &str| {
        gc.as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("no report for {id}: {gc}"))
    };
    assert_eq!(of("keep")["action"], "skipped", "{gc}");
    assert_eq!(of("keep")["reason"], "resurrectable", "{gc}");
    // Without a resume command gc goes on as before (here its dead daemon's pid
    // may still name a zombie, which a faked boot id cannot prove: unverifiable).
    assert_ne!(of("plain")["reason"], "resurrectable", "{gc}");
    assert!(reg.path("keep.json").exists());
    let dry = after(&reg, &["resurrect", "--all", "--dry-run", "--json"]).json();
    assert_eq!(dry[0]["id"], "keep", "{dry}");
}
