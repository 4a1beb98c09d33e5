//! `latch emit`: user events, bounded and validated, seen by `events --wait
//! user.NAME` (SPEC.md §9.9).

mod support;

use std::process::Stdio;

use support::Reg;

fn user_lines(reg: &Reg, id: &str) -> Vec<serde_json::Value> {
    let r = reg.run(&["events", id, "--json"]);
    r.stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["type"].as_str().is_some_and(|t| t.starts_with("user.")))
        .collect()
}

#[test]
fn emit_is_seen_by_events_wait_user_name() {
    let reg = Reg::new();
    let inc = reg.new_session("e", &["cat"]);
    // The waiter starts first and is woken by the append.
    let waiter = reg
        .cmd()
        .args([
            "events",
            "e",
            "--wait",
            "user.build-done",
            "--json",
            "--timeout",
            "20",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let r = reg.run(&[
        "emit",
        "e",
        "user.build-done",
        "--data",
        r#"{"ok": true, "n": [1, 2]}"#,
        "--expect",
        &inc,
        "--json",
    ]);
    let written = r.json();
    assert_eq!(r.code, 0, "{r:?}");
    let out = waiter.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let seen: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
    assert_eq!(seen["type"], "user.build-done");
    assert_eq!(seen["id"], "e");
    assert_eq!(seen["incarnation"], inc.as_str());
    assert_eq!(seen["data"], serde_json::json!({"ok": true, "n": [1, 2]}));
    assert_eq!(seen, written);
    // Without --data, no data field.
    reg.run(&["emit", "e", "user.ping"]).ok();
    let users = user_lines(&reg, "e");
    assert_eq!(users.len(), 2);
    assert!(users[1].get("data").is_none());
    // A wait for a user event that never comes times out (exit 10).
    let r = reg.run(&["events", "e", "--wait", "user.never", "--timeout", "0.2"]);
    assert_eq!(r.code, 10, "{r:?}");
}

#[test]
fn hostile_names_and_data_are_refused_and_write_nothing() {
    let reg = Reg::new();
    reg.new_session("h", &["cat"]);
    let deep = format!("{}{}", "[".repeat(17), "]".repeat(17));
    let huge = format!("\"{}\"", "x".repeat(9000));
    let long_name = format!("user.{}", "a".repeat(65));
    let cases: Vec<(&str, Option<&str>)> = vec![
        ("session_exit", None),
        ("removed", None),
        ("user.", None),
        ("user.a\nb", None),
        ("user.\u{1b}]0;owned\u{7}", None),
        ("user.a b", None),
        ("user.../x", None),
        (long_name.as_str(), None),
        ("user.ok", Some("{not json")),
        ("user.ok", Some(deep.as_str())),
        ("user.ok", Some(huge.as_str())),
    ];
    for (kind, data) in cases {
        let mut args = vec!["emit", "h", kind];
        if let Some(d) = data {
            args.extend(["--data", d]);
        }
        let r = reg.run(&args);
        assert_eq!(r.code, 2, "{kind:?} {data:?}: {r:?}");
    }
    assert!(user_lines(&reg, "h").is_empty());
    // `events --wait` refuses a malformed user type as a usage error too.
    let r = reg.run(&["events", "h", "--wait", "user.a b", "--timeout", "0.1"]);
    assert_eq!(r.code, 2, "{r:?}");
    // A string with control characters is data, escaped by JSON.
    reg.run(&["emit", "h", "user.text", "--data", r#""\u001b[2J\n""#])
        .ok();
    let users = user_lines(&reg, "h");
    assert_eq!(users[0]["data"], "\u{1b}[2J\n");
    // The human listing escapes it (SPEC §10).
    let r = reg.run(&["events", "h"]);
    assert!(!r.ok().contains('\u{1b}'), "{r:?}");
}

#[test]
fn emit_takes_expect_and_owner() {
    let reg = Reg::new();
    let r = reg.run(&[
        "new", "-d", "--json", "--id", "o", "--owner", "proj", "--", "cat",
    ]);
    let inc = r.json()["incarnation"].as_str().unwrap().to_owned();
    let r = reg.run(&["emit", "o", "user.x", "--owner", "someone-else"]);
    assert_eq!(r.code, 12, "{r:?}");
    reg.run(&["emit", "o", "user.x", "--owner", "proj"]).ok();
    // Restarted: the old incarnation is refused (exit 4), nothing written for it.
    reg.run(&["restart", "o"]).ok();
    let r = reg.run(&["emit", &format!("o@{inc}"), "user.y"]);
    assert_eq!(r.code, 4, "{r:?}");
    let r = reg.run(&["emit", "o", "user.y", "--expect", &inc]);
    assert_eq!(r.code, 4, "{r:?}");
    let users = user_lines(&reg, "o");
    assert_eq!(users.len(), 1, "{users:?}");
}
