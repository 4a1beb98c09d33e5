//! End to end: the immutable, MAC-bound owner (seed 004; SPEC.md §2.4,
//! §9.11). A tool proves a session is its own from the registry alone, with no file
//! of its own; a forged owner is degraded, never unowned or someone else's.

// Pids read back from JSON records always fit; the casts are checked by the kernel.
#![allow(clippy::cast_possible_truncation)]

mod support;

use serde_json::Value;
use support::{alive, Reg};

fn pid(v: &Value, key: &str) -> u32 {
    v[key].as_u64().unwrap() as u32
}

fn ids(v: &Value) -> Vec<String> {
    let mut ids: Vec<String> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

/// `latch new -d --json --id ID [--name N] --owner O --cwd DIR -- CMD...`.
fn new_owned(
    reg: &Reg,
    id: &str,
    name: &str,
    owner: Option<&str>,
    cwd: &str,
    cmd: &[&str],
) -> Value {
    let mut args = vec![
        "new", "-d", "--json", "--id", id, "--name", name, "--cwd", cwd,
    ];
    if let Some(o) = owner {
        args.extend_from_slice(&["--owner", o]);
    }
    args.push("--");
    args.extend_from_slice(cmd);
    let r = reg.run(&args);
    assert_eq!(r.code, 0, "{r:?}");
    r.json()
}

/// Seed 004: projects A and B share one registry, with colliding ids and names. A has
/// lost every file of its own (run directory, receipts), yet finds its sessions with
/// `ls --owner A` and cleans them up with `gc --owner A`; B's sessions, live or
/// exited, and an unowned one, are never touched.
#[test]
fn a_project_that_lost_its_files_finds_and_cleans_only_its_own_sessions() {
    let reg = Reg::new();
    let base = reg.root.parent().unwrap().to_path_buf();
    let run_a = base.join("project-a-runs");
    let run_b = base.join("project-b-runs");
    std::fs::create_dir_all(&run_a).unwrap();
    std::fs::create_dir_all(&run_b).unwrap();
    let (ca, cb) = (run_a.to_str().unwrap(), run_b.to_str().unwrap());
    let receipt_a = run_a.join("run-7.receipt");

    // A's run 7, then B reuses the id "run-7" once A's is gone (a run-id collision).
    let r = reg.run(&[
        "new",
        "-d",
        "--json",
        "--id",
        "run-7",
        "--name",
        "agent",
        "--owner",
        "A",
        "--cwd",
        ca,
        "--receipt",
        receipt_a.to_str().unwrap(),
        "--",
        "cat",
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    let receipt: Value = serde_json::from_slice(&std::fs::read(&receipt_a).unwrap()).unwrap();
    assert_eq!(receipt["owner"], "A", "{receipt}");
    reg.run(&["kill", "run-7", "--owner", "A", "--wait"]).ok();
    reg.run(&["rm", "run-7", "--owner", "A"]).ok();
    let b7 = new_owned(&reg, "run-7", "agent", Some("B"), cb, &["cat"]);
    // A's orphans: one whose program exited, one still running, both untagged.
    new_owned(
        &reg,
        "run-8",
        "agent",
        Some("A"),
        ca,
        &["sh", "-c", "exit 3"],
    );
    reg.wait_exit("run-8");
    let a9 = new_owned(&reg, "run-9", "worker", Some("A"), ca, &["cat"]);
    // B's exited session (a plain gc would remove it) and an unowned exited session.
    new_owned(&reg, "run-10", "agent", Some("B"), cb, &["true"]);
    reg.wait_exit("run-10");
    new_owned(&reg, "loose", "agent", None, cb, &["true"]);
    reg.wait_exit("loose");

    // A loses every file of its own: its run directory, receipts included.
    std::fs::remove_dir_all(&run_a).unwrap();
    assert!(!receipt_a.exists());

    // Found from the registry alone.
    let mine = reg.run(&["ls", "--owner", "A", "--json"]);
    assert_eq!(ids(&mine.json()), ["run-8", "run-9"], "{mine:?}");
    assert!(mine
        .json()
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e["owner"] == "A"));
    let theirs = reg.run(&["ls", "--owner", "B", "--json"]).json();
    assert_eq!(ids(&theirs), ["run-10", "run-7"]);

    // Acting on a colliding id or name with the owner precondition never reaches B.
    for args in [
        &["kill", "run-7", "--owner", "A"][..],
        &["kill", "agent", "--owner", "A"][..],
        &["send", "run-7", "x", "--owner", "A"][..],
        &["tag", "run-7", "mine=1", "--owner", "A"][..],
        &["rename", "run-7", "stolen", "--owner", "A"][..],
        &["rm", "run-7", "--force", "--owner", "A"][..],
        &["restart", "run-7", "--owner", "A"][..],
        &["rm", "loose", "--owner", "A"][..],
    ] {
        let r = reg.run(args);
        assert_eq!(r.code, 12, "{args:?}: {r:?}");
    }
    let r = reg.run_stdin(
        &["meta", "patch", "--id", "run-7", "--owner", "A"],
        r#"{"tags": {"mine": "1"}}"#,
    );
    assert_eq!(r.code, 12, "{r:?}");
    let r = reg.run(&["kill", "run-7", "--owner", "A", "--json"]);
    assert_eq!(r.json()["error"]["kind"], "not-owner", "{r:?}");

    // gc --owner A cleans up exactly A's: the exited one, and the running one whose
    // working directory is gone.
    let r = reg.run(&[
        "gc",
        "--owner",
        "A",
        "--abandoned",
        "--grace",
        "1",
        "--json",
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    let reports = r.json();
    assert_eq!(ids(&reports), ["run-8", "run-9"], "{reports}");
    for rep in reports.as_array().unwrap() {
        let want = if rep["id"] == "run-8" {
            "removed"
        } else {
            "stopped-and-removed"
        };
        assert_eq!(rep["action"], want, "{rep}");
    }
    assert!(support::wait_process_exit(
        pid(&a9, "childPid"),
        std::time::Duration::from_secs(5)
    ));
    assert_eq!(
        reg.run(&["ls", "--owner", "A", "--json"]).json(),
        serde_json::json!([])
    );

    // B is untouched: its live session, its record, its exited session; so is the
    // unowned one.
    let rec = reg.record("run-7");
    assert_eq!(rec["incarnation"], b7["incarnation"]);
    assert_eq!(rec["displayName"], "agent");
    assert_eq!(rec["tags"], serde_json::json!({}));
    assert!(rec.get("exit").is_none(), "{rec}");
    assert!(alive(pid(&b7, "childPid")));
    let st = reg.run(&["status", "run-7", "--json", "--owner", "B"]);
    assert_eq!(st.json()["daemon"]["owner"], "B", "{st:?}");
    assert!(reg.path("run-10.json").exists());
    assert!(reg.path("loose.json").exists());
    let evs = reg.run(&["events", "run-7", "--json"]).stdout;
    let b_inc = b7["incarnation"].as_str().unwrap();
    let b_events: Vec<Value> = evs
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["incarnation"] == b_inc)
        .collect();
    assert_eq!(b_events.len(), 1, "only B's session_start: {b_events:?}");
    assert_eq!(b_events[0]["type"], "session_start");
    assert_eq!(b_events[0]["owner"], "B");
}

#[test]
fn the_owner_is_set_at_creation_only() {
    let reg = Reg::new();
    let cwd = reg.root.parent().unwrap().to_str().unwrap().to_owned();
    let v = new_owned(&reg, "o", "n", Some("A"), &cwd, &["cat"]);
    assert_eq!(v["owner"], "A");
    let inc = v["incarnation"].as_str().unwrap().to_owned();
    let path = reg.path("o.json");
    let before = std::fs::read(&path).unwrap();
    // A patch that names the owner (or its MAC) exits 2 and changes nothing.
    for bad in [
        r#"{"owner": "B"}"#,
        r#"{"owner": null}"#,
        r#"{"ownerMac": "00"}"#,
        r#"{"displayName": "x", "owner": "A"}"#,
    ] {
        let r = reg.run_stdin(&["meta", "patch", "--id", "o", "--expect", &inc], bad);
        assert_eq!(r.code, 2, "{bad}: {r:?}");
        assert_eq!(
            std::fs::read(&path).unwrap(),
            before,
            "{bad} changed the record"
        );
    }
    // tag, rename and meta patch keep it; so does restart, bound to the new creation.
    reg.run(&["tag", "o", "k=v", "--owner", "A"]).ok();
    reg.run(&["rename", "o", "renamed", "--owner", "A"]).ok();
    reg.run_stdin(
        &["meta", "patch", "--id", "o", "--owner", "A"],
        r#"{"tags": {"j": "w"}}"#,
    )
    .ok();
    assert_eq!(reg.record("o")["owner"], "A");
    let r = reg.run(&["restart", "o", "--owner", "A", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let new_inc = r.json()["incarnation"].as_str().unwrap().to_owned();
    assert_ne!(new_inc, inc);
    assert_eq!(r.json()["owner"], "A");
    let rec = reg.record("o");
    assert_eq!(rec["owner"], "A");
    assert_eq!(rec["incarnation"], new_inc.as_str());
    let ls = reg.run(&["ls", "--owner", "A", "--json"]).json();
    assert_eq!(ids(&ls), ["o"], "the restarted record's owner verifies");
    // The daemon reports it from memory.
    let st = reg.run(&["status", "o", "--json"]).json();
    assert_eq!(st["daemon"]["owner"], "A");
    assert_eq!(st["owner"], "A");

    // Bad owners exit 2 and create nothing.
    let long = "x".repeat(129);
    for bad in ["", long.as_str(), "a\tb", "a\nb", "\u{7f}"] {
        let r = reg.run(&["new", "-d", "--id", "bad", "--owner", bad, "--", "cat"]);
        assert_eq!(r.code, 2, "{bad:?}: {r:?}");
        assert!(!reg.path("bad.json").exists());
        let r = reg.run(&["ls", "--owner", bad]);
        assert_eq!(r.code, 2, "{bad:?}: {r:?}");
        let r = reg.run(&["kill", "o", "--owner", bad]);
        assert_eq!(r.code, 2, "{bad:?}: {r:?}");
    }
    let ok128 = "é".repeat(128);
    let v = new_owned(&reg, "long", "n", Some(&ok128), &cwd, &["cat"]);
    assert_eq!(v["owner"], ok128.as_str());

    // An owner precondition on a session created without one never matches.
    reg.new_session("plain", &["cat"]);
    let r = reg.run(&["kill", "plain", "--owner", "A"]);
    assert_eq!(r.code, 12, "{r:?}");
    assert_eq!(
        reg.run(&["ls", "--owner", "A", "--json"])
            .json()
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn a_hand_edited_owner_is_degraded_never_unowned_nor_anyones() {
    let reg = Reg::new();
    let cwd = reg.root.parent().unwrap().to_str().unwrap().to_owned();
    let a = new_owned(&reg, "e", "n", Some("A"), &cwd, &["cat"]);
    let plain = new_owned(&reg, "p", "n", None, &cwd, &["cat"]);
    let path_e = reg.path("e.json");
    let original = std::fs::read_to_string(&path_e).unwrap();
    let edits: [(&str, String); 3] = [
        (
            "changed",
            original.replace("\"owner\": \"A\"", "\"owner\": \"B\""),
        ),
        (
            "removed",
            original
                .replace("\"owner\": \"A\",", "")
                .replace(",\n  \"owner\": \"A\"", ""),
        ),
        ("mac removed", {
            let mut v: Value = serde_json::from_str(&original).unwrap();
            v.as_object_mut().unwrap().remove("ownerMac");
            v.to_string()
        }),
    ];
    for (what, text) in &edits {
        assert_ne!(text, &original, "{what}: the edit applied");
        std::fs::write(&path_e, text).unwrap();
        for args in [
            &["status", "e"][..],
            &["kill", "e"][..],
            &["kill", "e", "--owner", "A"][..],
            &["kill", "e", "--owner", "B"][..],
            &["tag", "e", "k=v", "--owner", "B"][..],
        ] {
            let r = reg.run(args);
            assert_eq!(r.code, 7, "{what}: {args:?}: {r:?}");
        }
        // Listed as degraded, with or without --owner; never as a session.
        for owner in [None, Some("A"), Some("B")] {
            let mut args = vec!["ls", "--json"];
            if let Some(o) = owner {
                args.extend_from_slice(&["--owner", o]);
            }
            let ls = reg.run(&args).json();
            let e: Vec<&Value> = ls
                .as_array()
                .unwrap()
                .iter()
                .filter(|x| x["id"] == "e")
                .collect();
            assert_eq!(e.len(), 1, "{what} {owner:?}: {ls}");
            assert_eq!(e[0]["status"], "degraded", "{what} {owner:?}: {ls}");
            assert!(e[0].get("owner").is_none(), "{what}: {ls}");
        }
        let gc = reg.run(&["gc", "--owner", "B", "--json"]).json();
        assert_eq!(gc[0]["observed"], "degraded", "{what}: {gc}");
        assert_eq!(gc[0]["action"], "skipped", "{what}: {gc}");
        assert!(alive(pid(&a, "childPid")), "{what}");
    }
    // An owner added by hand to an unowned record is a forgery too.
    let path_p = reg.path("p.json");
    let mut v: Value = serde_json::from_slice(&std::fs::read(&path_p).unwrap()).unwrap();
    v["owner"] = "A".into();
    std::fs::write(&path_p, v.to_string()).unwrap();
    let r = reg.run(&["kill", "p", "--owner", "A"]);
    assert_eq!(r.code, 7, "{r:?}");
    let ls = reg.run(&["ls", "--owner", "A", "--json"]).json();
    assert!(
        ls.as_array()
            .unwrap()
            .iter()
            .all(|x| x["status"] == "degraded"),
        "{ls}"
    );
    assert!(alive(pid(&plain, "childPid")));
    // Restoring the original bytes restores the proof.
    std::fs::write(&path_e, &original).unwrap();
    let r = reg.run(&["kill", "e", "--owner", "A", "--wait"]);
    assert_eq!(r.code, 0, "{r:?}");
}

#[test]
fn receipts_carry_the_owner_and_verify_it() {
    let reg = Reg::new();
    let receipt = reg.root.parent().unwrap().join("r.json");
    let rs = receipt.to_str().unwrap();
    let r = reg.run(&[
        "new",
        "-d",
        "--id",
        "rc",
        "--owner",
        "A",
        "--receipt",
        rs,
        "--",
        "cat",
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    let v = reg.run(&["receipt", "verify", rs, "--json"]);
    assert_eq!(v.code, 0, "{v:?}");
    assert_eq!(v.json()["owner"], "A");
    assert_eq!(v.json()["verdict"], "current");
    // Acting by receipt works; with another owner precondition it refuses.
    assert_eq!(reg.run(&["tag", "rc", "k=v", "--receipt", rs]).code, 0);
    assert_eq!(
        reg.run(&["tag", "rc", "k=w", "--receipt", rs, "--owner", "B"])
            .code,
        12
    );
    // A receipt whose owner was edited is foreign, and cannot pin anything.
    let text = std::fs::read_to_string(&receipt).unwrap();
    std::fs::write(
        &receipt,
        text.replace("\"owner\": \"A\"", "\"owner\": \"B\""),
    )
    .unwrap();
    let v = reg.run(&["receipt", "verify", rs, "--json"]);
    assert_eq!(v.code, 9, "{v:?}");
    assert_eq!(v.json()["verdict"], "foreign");
    assert_eq!(reg.run(&["kill", "rc", "--receipt", rs]).code, 9);
    assert_eq!(reg.record("rc")["tags"], serde_json::json!({"k": "v"}));
}
