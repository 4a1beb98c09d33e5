//! End to end: identity-safe registry operations (SPEC.md §11 I4, 6,
//! 7 and 8).

// Pids read back from JSON records always fit; the casts are checked by the kernel.
#![allow(clippy::cast_possible_truncation)]

mod support;

use std::collections::BTreeSet;
use std::process::Stdio;

use support::{alive, Reg};

#[test]
fn meta_patch_merges_preserves_unknown_fields_and_skips_no_ops() {
    let reg = Reg::new();
    let inc = reg.new_session("m", &["cat"]);
    // An unknown field written by a future build survives the patch.
    let path = reg.path("m.json");
    let mut v = reg.record("m");
    v["futureField"] = serde_json::json!([1, 2, 3]);
    std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();

    let r = reg.run_stdin(
        &["meta", "patch", "--id", "m", "--expect", &inc],
        r#"{"displayName": "build box", "tags": {"a": "1", "b": "2"}}"#,
    );
    let out = r.json();
    assert_eq!(r.code, 0, "{r:?}");
    let changed: BTreeSet<&str> = out["changed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(changed, BTreeSet::from(["displayName", "tags.a", "tags.b"]));
    assert_eq!(out["metadata"]["name"], "build box");
    assert_eq!(reg.record("m")["futureField"], serde_json::json!([1, 2, 3]));

    // Delete one tag with null.
    let out = reg
        .run_stdin(&["meta", "patch", "--id", "m"], r#"{"tags": {"a": null}}"#)
        .json();
    assert_eq!(out["changed"], serde_json::json!(["tags.a"]));
    assert_eq!(reg.record("m")["tags"], serde_json::json!({"b": "2"}));

    // A no-op writes nothing and emits no event.
    let before = std::fs::read(&path).unwrap();
    let events_before = reg.run(&["events", "m", "--json"]).stdout.lines().count();
    let out = reg
        .run_stdin(
            &["meta", "patch", "--id", "m"],
            r#"{"tags": {"b": "2"}, "displayName": "build box"}"#,
        )
        .json();
    assert_eq!(out["changed"], serde_json::json!([]));
    assert_eq!(std::fs::read(&path).unwrap(), before);
    assert_eq!(
        reg.run(&["events", "m", "--json"]).stdout.lines().count(),
        events_before
    );

    // Anything else, or malformed JSON, is a usage error that changes nothing.
    for bad in [
        r#"{"incarnation": "v1.x"}"#,
        r#"{"id": "other"}"#,
        r#"{"exit": null}"#,
        r#"{"tags": {"k": 5}}"#,
        r#"{"displayName": " padded"}"#,
        r#"[1]"#,
        r#"{not json"#,
    ] {
        let r = reg.run_stdin(&["meta", "patch", "--id", "m"], bad);
        assert_eq!(r.code, 2, "{bad}: {r:?}");
        assert_eq!(
            std::fs::read(&path).unwrap(),
            before,
            "{bad} changed the record"
        );
    }
    // Exact ids only: a display name is refused.
    let r = reg.run_stdin(&["meta", "patch", "--id", "build box"], "{}");
    assert_eq!(r.code, 2, "{r:?}");
    // metadata_change events carry old and new values.
    let evs = reg.run(&["events", "m", "--json"]).stdout;
    let first: serde_json::Value =
        serde_json::from_str(evs.lines().find(|l| l.contains("metadata_change")).unwrap()).unwrap();
    assert_eq!(
        first["changes"]["tags.a"],
        serde_json::json!({"old": null, "new": "1"})
    );
}

#[test]
fn concurrent_tag_patches_lose_nothing() {
    const PROCS: usize = 16;
    const EACH: usize = 50;
    let reg = Reg::new();
    reg.new_session("c", &["cat"]);
    let bin = support::latch_bin();
    let mut workers = Vec::new();
    for p in 0..PROCS {
        let root = reg.root.clone();
        workers.push(std::thread::spawn(move || {
            let mut failures = Vec::new();
            for i in 0..EACH {
                let st = std::process::Command::new(bin)
                    .arg("--root")
                    .arg(&root)
                    .args(["tag", "c", &format!("p{p}-{i}=v{i}")])
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .output()
                    .unwrap();
                if !st.status.success() {
                    failures.push(String::from_utf8_lossy(&st.stderr).into_owned());
                }
            }
            failures
        }));
    }
    let failures: Vec<String> = workers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    // A busy lock past the bounded wait is a typed, reported failure, never a lost
    // write: count both.
    let rec = reg.record("c");
    let tags = rec["tags"].as_object().unwrap();
    assert_eq!(
        tags.len() + failures.len(),
        PROCS * EACH,
        "lost updates: {failures:?}"
    );
    assert!(failures.iter().all(|f| f.contains("busy")), "{failures:?}");
    // Exactly one event per effective patch.
    let evs = reg.run(&["events", "c", "--json"]).stdout;
    let changes = evs
        .lines()
        .filter(|l| l.contains("metadata_change"))
        .count();
    assert_eq!(changes, tags.len());
    println!(
        "concurrency: {} patches, {} applied, {} busy, 0 lost",
        PROCS * EACH,
        tags.len(),
        failures.len()
    );
}

#[test]
fn ambiguous_names_list_candidates_and_exact_ids_win() {
    let reg = Reg::new();
    reg.run(&["new", "-d", "--id", "one", "--name", "twin", "--", "cat"])
        .ok();
    reg.run(&["new", "-d", "--id", "two", "--name", "twin", "--", "cat"])
        .ok();
    let r = reg.run(&["status", "twin", "--json"]);
    assert_eq!(r.code, 5, "{r:?}");
    let cands = r.json()["error"]["candidates"].clone();
    assert_eq!(cands, serde_json::json!(["one", "two"]));
    assert!(r.stderr.contains("one") && r.stderr.contains("two"));
    // A session whose *name* is another session's id: the exact id wins.
    reg.run(&["new", "-d", "--id", "three", "--name", "one", "--", "cat"])
        .ok();
    let st = reg.run(&["status", "one", "--json"]).json();
    assert_eq!(st["id"], "one");
    // Renaming makes the name unique again.
    reg.run(&["rename", "two", "solo"]).ok();
    assert_eq!(reg.run(&["status", "twin", "--json"]).json()["id"], "one");
    assert_eq!(reg.run(&["status", "solo", "--json"]).json()["id"], "two");
    // Tags filter ls.
    reg.run(&["tag", "two", "role=web", "tier=1"]).ok();
    let ls = reg.run(&["ls", "--json", "--tag", "role=web"]).json();
    assert_eq!(ls.as_array().unwrap().len(), 1);
    assert_eq!(ls[0]["id"], "two");
    reg.run(&["tag", "two", "role="]).ok();
    assert_eq!(
        reg.run(&["ls", "--json", "--tag", "role=web"]).json(),
        serde_json::json!([])
    );
}

#[test]
fn display_name_rules_at_the_boundary() {
    let reg = Reg::new();
    reg.new_session("n", &["cat"]);
    let ok160 = "é".repeat(160);
    let bad161 = "é".repeat(161);
    for (name, want) in [
        (ok160.as_str(), 0),
        ("a/b\\c", 0),
        (bad161.as_str(), 2),
        ("", 2),
        (" lead", 2),
        ("trail ", 2),
        ("tab\there", 2),
        ("sep\u{2028}x", 2),
        ("sep\u{2029}x", 2),
    ] {
        let r = reg.run(&["rename", "n", name]);
        assert_eq!(r.code, want, "{name:?}: {r:?}");
        if want == 0 {
            assert_eq!(reg.record("n")["displayName"], name);
        } else {
            assert!(
                r.stderr.contains("display name"),
                "the error names the rule: {r:?}"
            );
        }
    }
    // The same rules at creation.
    let r = reg.run(&["new", "-d", "--id", "n2", "--name", &bad161, "--", "cat"]);
    assert_eq!(r.code, 2, "{r:?}");
}

#[test]
fn receipts_pin_the_creation() {
    let reg = Reg::new();
    let receipt = reg.root.parent().unwrap().join("job.receipt");
    let receipt_s = receipt.to_str().unwrap();
    reg.run(&[
        "new",
        "-d",
        "--id",
        "job",
        "--receipt",
        receipt_s,
        "--",
        "cat",
    ])
    .ok();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&receipt).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let v = reg.run(&["receipt", "verify", receipt_s, "--json"]);
    assert_eq!(
        (v.code, v.json()["verdict"].clone()),
        (0, "current".into()),
        "{v:?}"
    );

    // Acting by receipt works on that creation.
    reg.run(&["tag", "job", "x=1", "--receipt", receipt_s]).ok();
    reg.run(&["kill", "job", "--wait", "--receipt", receipt_s])
        .ok();
    let v = reg.run(&["receipt", "verify", receipt_s, "--json"]);
    assert_eq!(
        (v.code, v.json()["verdict"].clone()),
        (1, "exited".into()),
        "{v:?}"
    );

    // Removed, then re-created under the same id: replaced; kill by receipt refuses
    // with exit 4 and the new session stays alive.
    reg.run(&["rm", "job"]).ok();
    let v = reg.run(&["receipt", "verify", receipt_s, "--json"]);
    assert_eq!(
        (v.code, v.json()["verdict"].clone()),
        (3, "removed".into()),
        "{v:?}"
    );
    reg.new_session("job", &["cat"]);
    let v = reg.run(&["receipt", "verify", receipt_s, "--json"]);
    assert_eq!(
        (v.code, v.json()["verdict"].clone()),
        (4, "replaced".into()),
        "{v:?}"
    );
    let r = reg.run(&["kill", "job", "--signal", "KILL", "--receipt", receipt_s]);
    assert_eq!(r.code, 4, "{r:?}");
    let child = reg.record("job")["child"]["pid"].as_u64().unwrap() as u32;
    assert!(
        alive(child),
        "kill by a stale receipt reached the replacement"
    );

    // A receipt edited by hand is foreign.
    let mut edited: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&receipt).unwrap()).unwrap();
    let inc = edited["incarnation"].as_str().unwrap().to_owned();
    let flipped = format!(
        "{}{}",
        &inc[..inc.len() - 1],
        if inc.ends_with('0') { '1' } else { '0' }
    );
    edited["incarnation"] = flipped.into();
    std::fs::write(&receipt, serde_json::to_vec(&edited).unwrap()).unwrap();
    let v = reg.run(&["receipt", "verify", receipt_s, "--json"]);
    assert_eq!(
        (v.code, v.json()["verdict"].clone()),
        (9, "foreign".into()),
        "{v:?}"
    );
    std::fs::write(&receipt, b"garbage").unwrap();
    let v = reg.run(&["receipt", "verify", receipt_s, "--json"]);
    assert_eq!(
        (v.code, v.json()["verdict"].clone()),
        (7, "unreadable".into()),
        "{v:?}"
    );
}

#[test]
fn corrupt_metadata_is_degraded_never_absent() {
    let reg = Reg::new();
    reg.new_session("ok", &["cat"]);
    reg.new_session("bad", &["cat"]);
    let good = std::fs::read(reg.path("bad.json")).unwrap();
    std::fs::write(reg.path("bad.json"), b"{\"id\": \"bad\", torn").unwrap();
    let ls = reg.run(&["ls", "--json"]).json();
    let bad = ls
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == "bad")
        .expect("degraded entry listed");
    assert_eq!(bad["status"], "degraded");
    assert!(bad["error"].as_str().unwrap().len() > 3);
    // A tag filter never treats it as untagged-and-absent: it is still shown.
    let ls = reg.run(&["ls", "--json", "--tag", "k=v"]).json();
    assert!(ls.as_array().unwrap().iter().any(|e| e["id"] == "bad"));
    for args in [["status", "bad"], ["peek", "bad"], ["kill", "bad"]] {
        let r = reg.run(&args);
        assert_eq!(r.code, 7, "{args:?}: {r:?}");
    }
    let r = reg.run_stdin(&["meta", "patch", "--id", "bad"], r#"{"tags": {"a": "b"}}"#);
    assert_eq!(r.code, 7, "{r:?}");
    // A new session under that id is refused: the slot is not free.
    let r = reg.run(&["new", "-d", "--id", "bad", "--", "cat"]);
    assert_ne!(r.code, 0, "{r:?}");
    // Restore the record so cleanup can prove and stop the daemon.
    std::fs::write(reg.path("bad.json"), good).unwrap();
}

#[test]
fn unknown_ids_are_not_found_and_unreachable_daemons_are_unreachable() {
    let reg = Reg::new();
    reg.run(&["ls"]).ok();
    assert_eq!(reg.run(&["status", "ghost"]).code, 3);
    let inc = reg.new_session("hung", &["cat"]);
    // SIGSTOP the daemon: it cannot answer, which is unreachable (7), not not-found.
    let daemon = reg.record("hung")["daemon"]["pid"].as_u64().unwrap() as i32;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon),
        nix::sys::signal::SIGSTOP,
    )
    .unwrap();
    let r = reg.run(&["status", "hung", "--expect", &inc]);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon),
        nix::sys::signal::SIGCONT,
    )
    .unwrap();
    assert_eq!(r.code, 7, "{r:?}");
}

#[test]
fn events_follow_and_wait_are_event_driven() {
    use std::io::BufRead;
    let reg = Reg::new();
    let inc = reg.new_session("ev", &["cat"]);
    let mut follower = reg
        .cmd()
        .args(["events", "--all", "--follow", "--json"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = follower.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            if tx.send(line.unwrap()).is_err() {
                return;
            }
        }
    });
    // The existing history comes first.
    let first: serde_json::Value =
        serde_json::from_str(&rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap())
            .unwrap();
    assert_eq!(first["type"], "session_start");
    assert_eq!(first["incarnation"], inc.as_str());
    // A change made now is followed.
    reg.run(&["tag", "ev", "live=1"]).ok();
    let next: serde_json::Value =
        serde_json::from_str(&rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap())
            .unwrap();
    assert_eq!(next["type"], "metadata_change");
    assert_eq!(next["changes"]["tags.live"]["new"], "1");
    follower.kill().unwrap();
    follower.wait().unwrap();

    // --wait returns the matching event once it happens.
    let waiter = reg
        .cmd()
        .args([
            "events",
            &format!("ev@{inc}"),
            "--wait",
            "session_exit",
            "--json",
            "--timeout",
            "10",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    reg.run(&["kill", "ev"]).ok();
    let out = waiter.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let ev: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ev["signal"], 1, "kill hangs up by default");
    // A wait that is not satisfied in time exits 10 (timed out); a type that does
    // not exist is a usage error.
    let r = reg.run(&["events", "ev", "--wait", "removed", "--timeout", "0.2"]);
    assert_eq!(r.code, 10, "{r:?}");
    let r = reg.run(&["events", "ev", "--wait", "no_such_event"]);
    assert_eq!(r.code, 2, "{r:?}");
}
