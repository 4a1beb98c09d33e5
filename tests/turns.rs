//! Output cursors end to end (SPEC §4.7): `status --json`'s `outputCursor` and
//! `shell`, `peek --since` (plain, raw, JSON), the ring's loss said, never silent,
//! and a cursor refused in a creation it does not belong to.

mod support;

use support::Reg;

/// Waits (event-driven) for `text` on the screen, then returns the cursor.
fn cursor_after(reg: &Reg, id: &str, text: &str) -> u64 {
    reg.wait_for(id, text);
    let v = reg.run(&["status", id, "--json"]).json();
    v["outputCursor"]
        .as_u64()
        .expect("a version-3 daemon reports it")
}

#[test]
fn peek_since_prints_exactly_the_output_after_a_cursor() {
    let reg = Reg::new();
    reg.new_session(
        "c",
        &[
            "sh",
            "-c",
            "printf 'one\\n'; read x; printf \"\\033[31mtwo\\033[m $x\\n\"; read y",
        ],
    );
    let first = cursor_after(&reg, "c", "one");
    assert_eq!(first, 5, "one\\n is five bytes on the terminal: one\\r\\n");
    // Everything so far, then nothing after the end.
    assert_eq!(reg.run(&["peek", "c", "--since", "0"]).ok(), "one\n");
    assert_eq!(
        reg.run(&["peek", "c", "--since", &first.to_string()]).ok(),
        ""
    );
    reg.run(&["send", "c", "abc", "--keys", "Enter"]).ok();
    let second = cursor_after(&reg, "c", "two abc");
    // Only what came after `first`: the echo of the typed line, then the command's
    // output with its escapes removed.
    let after = reg.run(&["peek", "c", "--since", &first.to_string()]);
    assert_eq!(after.ok(), "abc\ntwo abc\n");
    assert_eq!(after.stderr, "", "nothing was lost");
    let raw = reg.run(&["peek", "c", "--since", &first.to_string(), "--raw"]);
    assert_eq!(raw.ok(), "abc\r\n\x1b[31mtwo\x1b[m abc\r\n");
    let json = reg
        .run(&["--json", "peek", "c", "--since", &first.to_string()])
        .json();
    assert_eq!(json["outputRange"]["start"], first);
    assert_eq!(json["outputRange"]["end"], second);
    assert_eq!(json["droppedBytes"], 0);
    assert_eq!(json["output"], "abc\ntwo abc\n");
    assert_eq!(json["id"], "c");
    assert!(json["incarnation"].as_str().unwrap().starts_with("v1."));
    // --raw and --json together is a usage error.
    assert_eq!(
        reg.run(&["--json", "peek", "c", "--since", "0", "--raw"])
            .code,
        2
    );
}

#[test]
fn output_the_ring_no_longer_holds_is_said_never_skipped() {
    let reg = Reg::new();
    // 3 MiB of output, more than the 1 MiB ring, then a marker.
    reg.new_session(
        "big",
        &[
            "sh",
            "-c",
            "head -c 3145728 /dev/zero | tr '\\0' x; echo; echo END; sleep 600",
        ],
    );
    let end = cursor_after(&reg, "big", "END");
    let ring = 1 << 20;
    let r = reg.run(&["peek", "big", "--since", "0"]);
    assert_eq!(r.code, 0, "{:?}", r.stderr);
    assert_eq!(r.stderr.trim_end(), format!("lagged: {} bytes", end - ring));
    assert!(r.stdout.ends_with("x\nEND\n"));
    let v = reg.run(&["--json", "peek", "big", "--since", "10"]).json();
    assert_eq!(v["droppedBytes"], end - ring - 10);
    assert_eq!(v["outputRange"]["start"], end - ring);
    assert_eq!(v["outputRange"]["end"], end);
    // Every byte the ring holds but the two \r of "x\r\nEND\r\n".
    assert_eq!(v["output"].as_str().unwrap().len() as u64 + 2, ring);
}

#[test]
fn a_cursor_of_a_replaced_creation_is_refused() {
    let reg = Reg::new();
    let old = reg.new_session("r", &["sh", "-c", "echo first; sleep 600"]);
    reg.wait_for("r", "first");
    reg.run(&["kill", "r", "--wait"]).ok();
    reg.run(&["rm", "r"]).ok();
    reg.new_session("r", &["sh", "-c", "echo second; sleep 600"]);
    reg.wait_for("r", "second");
    let stale = format!("r@{old}");
    let r = reg.run(&["peek", &stale, "--since", "0"]);
    assert_eq!(r.code, 4, "{r:?}");
    assert_eq!(r.stdout, "");
    // The bare id reads the current creation: the caller did not ask for a check.
    assert_eq!(reg.run(&["peek", "r", "--since", "0"]).ok(), "second\n");
}

#[test]
fn status_reports_the_shell_from_its_marks() {
    let reg = Reg::new();
    // A program that marks itself as a shell does (SPEC §4.6), then waits.
    reg.new_session(
        "sh",
        &[
            "sh",
            "-c",
            "printf '\\033]7;file://h/tmp/a%%20b\\007\\033]133;A\\007$ \\033]133;C;cmdline_url=make%%20-j2\\007building\\n'; sleep 600",
        ],
    );
    reg.wait_for("sh", "building");
    let v = reg.run(&["status", "sh", "--json"]).json();
    assert_eq!(v["shell"]["state"], "running");
    assert_eq!(v["shell"]["command"], "make -j2");
    assert_eq!(v["shell"]["cwd"], "/tmp/a b");
    assert!(v["lastOutputAt"].as_u64().is_some());
    // The foreground process group reading the terminal: the program itself.
    assert_eq!(v["foreground"]["pid"], v["childPid"]);
    assert_eq!(v["foreground"]["name"], "sh");
}

/// Polls `status --json` until `want` holds for its shell (a bounded wait for a
/// condition only the daemon can tell).
fn until_shell(
    reg: &Reg,
    id: &str,
    what: &str,
    want: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let v = reg.run(&["status", id, "--json"]).json();
        if want(&v) {
            return v;
        }
        assert!(std::time::Instant::now() < deadline, "{id}: no {what}: {v}");
        std::thread::yield_now();
    }
}

/// Starts `shell` alone, as `latch new -- SHELL` does with $SHELL, in an empty home.
fn start_shell(reg: &Reg, home: &std::path::Path, id: &str, shell: &str, extra: &[&str]) {
    let mut args = vec!["new", "-d", "--id", id];
    args.extend_from_slice(extra);
    args.extend(["--", shell]);
    let r = support::Run::from(reg.cmd().env("HOME", home).args(&args).output().unwrap());
    assert_eq!(r.code, 0, "{r:?}");
    // `RE''ADY` on the screen is the echo; `READY` only the command's output.
    reg.run(&["send", id, "echo RE''ADY", "--keys", "Enter"])
        .ok();
    reg.wait_for(id, "READY");
}

/// A lone bash, zsh or fish started by latch marks itself (SPEC §4.6): `status`
/// sees its prompt, the command it runs (and, for zsh and fish, its text), the
/// foreground process, and the exit code of a command interrupted with C-c.
#[test]
fn a_shell_started_by_latch_reports_its_prompt_commands_and_exit_codes() {
    let reg = Reg::new();
    let home = tempfile::tempdir().unwrap();
    for shell in ["bash", "zsh", "fish"] {
        start_shell(&reg, home.path(), shell, shell, &[]);
        let v = until_shell(&reg, shell, "prompt", |v| v["shell"]["state"] == "prompt");
        assert_eq!(v["shell"]["lastExit"], 0, "{shell}: {v}");
        reg.run(&["send", shell, "sleep 300", "--keys", "Enter"])
            .ok();
        let v = until_shell(&reg, shell, "running sleep", |v| {
            v["shell"]["state"] == "running" && v["foreground"]["name"] == "sleep"
        });
        if shell != "bash" {
            assert_eq!(v["shell"]["command"], "sleep 300", "{shell}: {v}");
        }
        reg.run(&["send", shell, "C-c", "--keys"]).ok();
        let v = until_shell(&reg, shell, "prompt after C-c", |v| {
            v["shell"]["state"] == "prompt" && v["shell"]["lastExit"] == 130
        });
        assert_eq!(v["foreground"]["name"], shell, "{v}");
        // A wait for a prompt that already holds returns at once.
        let r = reg.run(&["wait", shell, "--prompt", "--timeout", "5"]);
        assert_eq!(r.code, 0, "{shell}: {r:?}");
        // The record keeps the command as given.
        assert_eq!(v["command"], serde_json::json!([shell]));
    }
}

/// dash has no integration, `--no-shell-integration` turns it off, and a shell
/// given arguments starts as given: their shell state stays unknown.
#[test]
fn shells_without_integration_stay_unknown() {
    let reg = Reg::new();
    let home = tempfile::tempdir().unwrap();
    start_shell(&reg, home.path(), "dash", "dash", &[]);
    start_shell(
        &reg,
        home.path(),
        "off",
        "bash",
        &["--no-shell-integration"],
    );
    for id in ["dash", "off"] {
        let v = reg.run(&["status", id, "--json"]).json();
        assert_eq!(v["shell"]["state"], "unknown", "{id}: {v}");
        assert_eq!(v["shell"]["lastExit"], serde_json::Value::Null, "{id}: {v}");
    }
    // The same off switch in defaults.json.
    std::fs::write(reg.path("defaults.json"), r#"{"shellIntegration": false}"#).unwrap();
    start_shell(&reg, home.path(), "by-defaults", "bash", &[]);
    let v = reg.run(&["status", "by-defaults", "--json"]).json();
    assert_eq!(v["shell"]["state"], "unknown", "{v}");
}

/// `wait --text` looks only at output written after its start (SPEC §4.7): text
/// already on the screen, which `peek --wait` takes at once, does not count.
#[test]
fn wait_text_is_not_fooled_by_what_is_already_on_the_screen() {
    let reg = Reg::new();
    reg.new_session(
        "t",
        &["sh", "-c", "echo READY; read x; echo READY $x; sleep 600"],
    );
    reg.wait_for("t", "READY");
    // The screen shows READY: peek --wait returns at once...
    assert_eq!(
        reg.run(&["peek", "t", "--wait", "READY", "--timeout", "2"])
            .code,
        0
    );
    // ...but no new output holds it: the stream wait times out (exit 10).
    let r = reg.run(&["wait", "t", "--text", "READY", "--timeout", "300ms"]);
    assert_eq!(r.code, 10, "{r:?}");
    let before = cursor_after(&reg, "t", "READY");
    reg.run(&["send", "t", "go", "--keys", "Enter"]).ok();
    // From the cursor before the send: the command's READY, written after it.
    let r = reg.run(&[
        "--json",
        "wait",
        "t",
        "--text",
        "READY go",
        "--after",
        &before.to_string(),
    ]);
    let v = r.json();
    assert_eq!(v["condition"], "text");
    let at = v["outputCursor"].as_u64().unwrap();
    assert!(at > before, "{v}");
    // Waiting again from a cursor past it finds nothing more.
    let r = reg.run(&[
        "wait",
        "t",
        "--text",
        "READY",
        "--after",
        &at.to_string(),
        "--timeout",
        "300ms",
    ]);
    assert_eq!(r.code, 10, "{r:?}");
}

/// `wait --idle` returns once the program has been quiet that long, with the
/// cursor; a program that never stops writing is never idle (exit 10).
#[test]
fn wait_idle_follows_the_programs_quiet() {
    let reg = Reg::new();
    reg.new_session("q", &["sh", "-c", "echo once; sleep 600"]);
    let at = cursor_after(&reg, "q", "once");
    let r = reg.run(&["wait", "q", "--idle", "200ms"]);
    assert_eq!(r.ok().trim(), at.to_string());
    // A line every 50 ms is never 3 s of quiet: the deadline comes first.
    reg.new_session(
        "busy",
        &["sh", "-c", "while :; do echo tick; sleep 0.05; done"],
    );
    reg.wait_for("busy", "tick");
    let r = reg.run(&["wait", "busy", "--idle", "3s", "--timeout", "4s"]);
    assert_eq!(r.code, 10, "{r:?}");
}

/// `wait --exit` prints the program's end, also when it has already ended; any
/// other wait on an ended program is exit 3, and on a replaced creation exit 4.
#[test]
fn wait_exit_and_a_session_that_is_gone_or_replaced() {
    let reg = Reg::new();
    let old = reg.new_session("e", &["sh", "-c", "read x; exit 7"]);
    reg.run(&["send", "e", "go", "--keys", "Enter"]).ok();
    let r = reg.run(&["--json", "wait", "e", "--exit"]);
    assert_eq!(r.json()["exitCode"], 7, "{r:?}");
    reg.wait_exit("e");
    assert_eq!(
        reg.run(&["wait", "e", "--exit"]).ok().trim(),
        "exited with code 7"
    );
    assert_eq!(reg.run(&["wait", "e", "--prompt"]).code, 3);
    reg.run(&["rm", "e"]).ok();
    reg.new_session("e", &["sh", "-c", "sleep 600"]);
    let r = reg.run(&["wait", &format!("e@{old}"), "--idle", "1s"]);
    assert_eq!(r.code, 4, "{r:?}");
}

/// `wait --exit` on a session that is being stopped (draining: a hangup its
/// program ignores) waits for the exit, rather than being refused busy (6): at
/// its deadline it is exit 10, and once the program ends it prints the code.
#[test]
fn wait_exit_waits_through_a_draining_daemon() {
    let reg = Reg::new();
    let go = reg.path("../GO");
    let script = format!(
        "trap '' HUP; echo up; while [ ! -e {} ]; do sleep 0.05; done; exit 5",
        go.display()
    );
    reg.new_session("d", &["sh", "-c", &script]);
    reg.wait_for("d", "up");
    reg.run(&["kill", "d"]).ok();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while reg.run(&["status", "d", "--json"]).json()["daemon"]["draining"] != true {
        assert!(std::time::Instant::now() < deadline, "never draining");
        std::thread::yield_now();
    }
    let r = reg.run(&["--json", "wait", "d", "--exit", "--timeout", "1"]);
    assert_eq!(r.code, 10, "{r:?}");
    std::fs::write(&go, "").unwrap();
    let r = reg.run(&["--json", "wait", "d", "--exit", "--timeout", "60"]);
    assert_eq!(
        (r.code, &r.json()["exitCode"]),
        (0, &serde_json::json!(5)),
        "{r:?}"
    );
}
