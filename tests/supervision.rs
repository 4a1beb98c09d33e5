//! Sessions that look after themselves (SPEC.md §9.16): restart policies, lifetimes
//! bound to a parent, `--rm`. Every wait is on an event (`events --wait`, a pidfd),
//! never a sleep.

mod support;

use std::time::Duration;

use latch_client::AttachEvent;
use serde_json::Value;
use support::{client, sref, wait_process_exit, Reg, Run};

/// Waits for an event of `ty` in `id`'s history; returns it.
#[track_caller]
fn wait_event(reg: &Reg, id: &str, ty: &str) -> Value {
    let r = reg.run(&["events", id, "--wait", ty, "--json", "--timeout", "30"]);
    assert_eq!(r.code, 0, "waiting for {ty} of {id}: {r:?}");
    r.json()
}

/// Every event of `id`, oldest first.
fn events(reg: &Reg, id: &str) -> Vec<Value> {
    let r = reg.run(&["events", id, "--json"]);
    r.ok()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn of_type<'a>(evs: &'a [Value], ty: &str) -> Vec<&'a Value> {
    evs.iter().filter(|e| e["type"] == ty).collect()
}

/// `ls --json`'s entry for `id`.
fn entry(reg: &Reg, id: &str) -> Value {
    let ls = reg.run(&["ls", "--json"]).json();
    ls.as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("{id} not listed: {ls}"))
}

/// The daemon pid of an `ls --json` entry.
fn pid_of(e: &Value) -> u32 {
    u32::try_from(e["daemonPid"].as_u64().unwrap()).unwrap()
}

#[test]
fn a_crash_loop_is_restarted_three_times_then_flapping_until_restart() {
    let reg = Reg::new();
    let ok = reg.path("../ok");
    let script = format!("test -e {} && exec cat; echo boom; exit 3", ok.display());
    let r = reg.run(&[
        "new",
        "-d",
        "--json",
        "--id",
        "crash",
        "--restart",
        "on-failure",
        "--max-restarts",
        "3",
        "--restart-delay",
        "10ms",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    let first = r.json()["incarnation"].as_str().unwrap().to_owned();
    wait_event(&reg, "crash", "session_flapping");
    let evs = events(&reg, "crash");
    let respawns = of_type(&evs, "session_respawn");
    assert_eq!(respawns.len(), 3, "{evs:?}");
    // Each respawn names its predecessor: a chain from the first creation.
    let mut previous = first.clone();
    for ev in &respawns {
        assert_eq!(ev["previousIncarnation"], previous.as_str());
        previous = ev["incarnation"].as_str().unwrap().to_owned();
    }
    assert_eq!(of_type(&evs, "session_exit").len(), 4);
    let e = entry(&reg, "crash");
    assert_eq!(e["status"], "exited");
    assert_eq!(e["statusReason"], "flapping");
    assert_eq!(e["incarnation"], previous.as_str());
    let rec = reg.record("crash");
    assert_eq!(rec["version"], 2);
    assert_eq!(rec["previousIncarnation"], respawns[1]["incarnation"]);
    assert_eq!(rec["restart"]["mode"], "on-failure");
    assert!(reg.run(&["status", "crash"]).ok().contains("flapping"));

    // `latch restart` clears it, and carries the policy.
    std::fs::write(&ok, b"").unwrap();
    let r = reg.run(&["restart", "crash", "--json"]);
    let restarted = r.json();
    assert_eq!(restarted["previousIncarnation"], previous.as_str());
    let e = entry(&reg, "crash");
    assert_eq!(e["status"], "running");
    assert!(e.get("statusReason").is_none(), "{e}");
    let rec = reg.record("crash");
    assert_eq!(rec["restart"]["maxRestarts"], 3);
    assert_eq!(rec["previousIncarnation"], previous.as_str());
}

#[test]
fn a_stale_send_after_a_respawn_is_refused_as_replaced() {
    let reg = Reg::new();
    let r = reg.run(&[
        "new",
        "-d",
        "--json",
        "--id",
        "loop",
        "--restart",
        "always",
        "--restart-delay",
        "10ms",
        "--",
        "sh",
        "-c",
        "read line; exit 0",
    ]);
    let first = r.json()["incarnation"].as_str().unwrap().to_owned();
    reg.run(&["send", "--expect", &first, "loop", "bye\n"]).ok();
    let respawn = wait_event(&reg, "loop", "session_respawn");
    assert_eq!(respawn["previousIncarnation"], first.as_str());
    // The id now holds another creation: the old incarnation reaches nothing.
    let stale = reg.run(&["send", "--expect", &first, "loop", "hello\n"]);
    assert_eq!(stale.code, 4, "{stale:?}");
    // A connection bound to the old creation is refused by the new daemon too.
    let c = client(&reg);
    let err = c.connect(&sref("loop", &first)).expect_err("refused");
    assert_eq!(err.exit_code(), 4, "{err:?}");
    let now = respawn["incarnation"].as_str().unwrap();
    assert_ne!(now, first);
    assert_eq!(entry(&reg, "loop")["incarnation"], now);
}

#[test]
fn a_kill_during_the_restart_delay_stops_it_for_good() {
    let reg = Reg::new();
    reg.run(&[
        "new",
        "-d",
        "--id",
        "slow",
        "--restart",
        "always",
        "--restart-delay",
        "60s",
        "--",
        "sh",
        "-c",
        "exit 1",
    ])
    .ok();
    wait_event(&reg, "slow", "session_exit");
    let e = entry(&reg, "slow");
    assert_eq!(e["status"], "running");
    assert_eq!(e["statusReason"], "restarting");
    let daemon = pid_of(&e);
    let inc = e["incarnation"].as_str().unwrap().to_owned();
    reg.run(&["kill", "slow"]).ok();
    // The daemon sees the kill recorded under the lock and ends, long before the
    // delay would have run out; no replacement ever runs.
    assert!(wait_process_exit(daemon, Duration::from_secs(30)));
    let evs = events(&reg, "slow");
    assert!(of_type(&evs, "session_respawn").is_empty(), "{evs:?}");
    let e = entry(&reg, "slow");
    assert_eq!(e["status"], "exited");
    assert_eq!(e["incarnation"], inc.as_str());
    assert!(e.get("statusReason").is_none(), "{e}");
    assert!(reg.record("slow")["killRequestedAtMs"].is_u64());
}

#[test]
fn rm_during_the_restart_delay_stops_it_for_good() {
    let reg = Reg::new();
    reg.run(&[
        "new",
        "-d",
        "--id",
        "gone",
        "--restart",
        "always",
        "--restart-delay",
        "60s",
        "--",
        "sh",
        "-c",
        "exit 1",
    ])
    .ok();
    wait_event(&reg, "gone", "session_exit");
    let daemon = pid_of(&entry(&reg, "gone"));
    reg.run(&["rm", "gone"]).ok();
    assert!(wait_process_exit(daemon, Duration::from_secs(30)));
    assert!(!reg.path("gone.json").exists());
    assert!(of_type(&events(&reg, "gone"), "session_respawn").is_empty());
}

#[test]
fn a_session_ends_with_its_parent_process_and_session() {
    let reg = Reg::new();
    let mut parent = std::process::Command::new("sleep")
        .arg("1000")
        .spawn()
        .unwrap();
    let pid = parent.id().to_string();
    reg.run(&[
        "new",
        "-d",
        "--id",
        "child",
        "--with-parent",
        &pid,
        "--restart",
        "always",
        "--",
        "sleep",
        "1000",
    ])
    .ok();
    reg.new_session("p", &["cat"]);
    reg.run(&["new", "-d", "--id", "c2", "--with-parent", "p", "--", "cat"])
        .ok();
    assert_eq!(entry(&reg, "child")["status"], "running");
    parent.kill().unwrap();
    parent.wait().unwrap();
    wait_event(&reg, "child", "session_exit");
    let e = entry(&reg, "child");
    assert_eq!(e["status"], "exited");
    assert_eq!(e["statusReason"], "parent-ended");
    // A parent's end stops restarts.
    assert!(of_type(&events(&reg, "child"), "session_respawn").is_empty());

    assert_eq!(entry(&reg, "c2")["status"], "running");
    reg.run(&["kill", "p"]).ok();
    wait_event(&reg, "c2", "session_exit");
    assert_eq!(entry(&reg, "c2")["statusReason"], "parent-ended");
    // A pid over --host is refused before anything is asked of the host.
    let r = reg.run(&[
        "new",
        "-d",
        "--host",
        "nowhere",
        "--with-parent",
        &pid,
        "--",
        "true",
    ]);
    assert_eq!(r.code, 2, "{r:?}");
}

#[test]
fn a_recycled_parent_pid_is_no_parent() {
    let reg = Reg::new();
    // A live process whose start time is not the one recorded: its pid was
    // recycled, so the parent the session was bound to has ended.
    let mut other = std::process::Command::new("sleep")
        .arg("1000")
        .spawn()
        .unwrap();
    let c = client(&reg);
    let mut process = latch_registry::ProcIdentity::of(other.id()).unwrap();
    process.start_time += 1;
    let mut new = latch_client::NewSession::default();
    new.id = Some(latch_wire::SessionId::new("orphan").unwrap());
    new.command = vec!["sleep".into(), "1000".into()];
    new.parent = Some(latch_registry::supervision::Parent {
        process,
        session: None,
    });
    c.create(new).unwrap();
    wait_event(&reg, "orphan", "session_exit");
    assert_eq!(entry(&reg, "orphan")["statusReason"], "parent-ended");
    assert!(support::alive(other.id()));
    other.kill().unwrap();
    other.wait().unwrap();
}

#[test]
fn rm_sessions_remove_their_files_after_the_exit_is_delivered() {
    let reg = Reg::new();
    let r = reg.run(&[
        "new",
        "-d",
        "--json",
        "--id",
        "eph",
        "--rm",
        "--",
        "sh",
        "-c",
        "read x; echo final-words; exit 7",
    ]);
    let inc = r.json()["incarnation"].as_str().unwrap().to_owned();
    assert_eq!(
        reg.record("eph")["version"],
        1,
        "a plain session stays version 1"
    );
    let c = client(&reg);
    let mut a = c
        .connect(&sref("eph", &inc))
        .unwrap()
        .attach(24, 80, latch_client::AttachMode::ReadWrite)
        .unwrap();
    a.reader.set_timeout(Some(Duration::from_secs(30))).unwrap();
    a.writer.input(b"go\r").unwrap();
    let mut seen = String::new();
    let code = loop {
        match a.reader.next_event().unwrap() {
            AttachEvent::Output(b) => seen.push_str(&String::from_utf8_lossy(&b)),
            AttachEvent::Exit(st) => break st.code,
            AttachEvent::Closed => panic!("closed before EXIT: {seen:?}"),
            _ => {}
        }
    };
    assert_eq!(code, Some(7));
    assert!(seen.contains("final-words"), "{seen:?}");
    let removed = wait_event(&reg, "eph", "removed");
    assert_eq!(removed["incarnation"], inc.as_str());
    let evs = events(&reg, "eph");
    let exit = of_type(&evs, "session_exit");
    assert_eq!(exit[0]["code"], 7);
    for f in ["eph.json", "eph.screen", "eph.log", "eph.sock"] {
        assert!(!reg.path(f).exists(), "{f} left behind");
    }
    // --rm with a restart policy is refused, and creates nothing.
    let r = reg.run(&[
        "new",
        "-d",
        "--id",
        "x",
        "--rm",
        "--restart",
        "always",
        "--",
        "true",
    ]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(!reg.path("x.json").exists());
}

/// Writes `text` as `dir/latch.toml`; returns its path as text.
fn toml_file(dir: &std::path::Path, text: &str) -> String {
    let path = dir.join("latch.toml");
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

#[test]
fn up_is_idempotent_leaves_foreign_sessions_alone_and_down_removes_its_own() {
    let reg = Reg::new();
    let dir = tempfile::tempdir().unwrap();
    let file = toml_file(
        dir.path(),
        r#"
[sessions.web]
command = ["sh", "-c", "echo serving; exec cat"]
env = { PORT = "3000" }
tags = { role = "web" }
restart = "on-failure"

[sessions.shared]
command = ["cat"]
"#,
    );
    // A same-named session someone else made.
    let foreign = reg.new_session("shared", &["cat"]);
    let first = reg.run(&["up", "-f", &file, "--json"]).json();
    assert_eq!(first[0]["id"], "shared");
    assert_eq!(first[0]["action"], "foreign");
    assert_eq!(first[1]["id"], "web");
    assert_eq!(first[1]["action"], "created");
    let web = first[1]["incarnation"].as_str().unwrap().to_owned();
    reg.wait_for("web", "serving");
    let rec = reg.record("web");
    assert!(rec["owner"].as_str().unwrap().starts_with("up:"), "{rec}");
    assert_eq!(rec["tags"]["role"], "web");
    assert_eq!(rec["env"]["PORT"], "3000");
    // Twice: nothing changes.
    let second = reg.run(&["up", "-f", &file, "--json"]).json();
    assert_eq!(second[1]["action"], "unchanged");
    assert_eq!(second[1]["incarnation"], web.as_str());
    assert_eq!(entry(&reg, "shared")["incarnation"], foreign.as_str());
    // Its own session, ended, is started again.
    reg.run(&["kill", "web", "--wait"]).ok();
    let third = reg.run(&["up", "-f", &file, "--json"]).json();
    assert_eq!(third[1]["action"], "restarted");
    assert_eq!(entry(&reg, "web")["status"], "running");
    // down: exactly the file's own sessions.
    let down = reg.run(&["down", "-f", &file, "--json"]).json();
    assert_eq!(down[0]["action"], "foreign");
    assert_eq!(down[1]["action"], "removed");
    assert!(!reg.path("web.json").exists());
    let e = entry(&reg, "shared");
    assert_eq!(e["status"], "running");
    assert_eq!(e["incarnation"], foreign.as_str());
}

#[test]
fn hostile_up_files_are_refused_with_their_position_and_create_nothing() {
    let reg = Reg::new();
    let dir = tempfile::tempdir().unwrap();
    let refused = |text: &str, want: &str| {
        let file = toml_file(dir.path(), text);
        let r = reg.run(&["up", "-f", &file]);
        assert_eq!(r.code, 2, "{r:?}");
        assert!(r.stderr.contains(want), "{want:?} not in {r:?}");
        let ls = reg.run(&["ls", "--json"]).json();
        assert_eq!(
            ls.as_array().unwrap().len(),
            0,
            "something was created: {ls}"
        );
    };
    // A valid session, then an unknown key: nothing at all is created.
    refused(
        "[sessions.a]\ncommand = [\"cat\"]\n\n[sessions.b]\ncommand = [\"cat\"]\ncomand = 1\n",
        "latch.toml:6:1:",
    );
    // Wrong types.
    refused("[sessions.a]\ncommand = \"cat\"\n", "latch.toml:2:11:");
    refused(
        "[sessions.a]\ncommand = [\"cat\"]\nenv = { A = 1 }\n",
        "latch.toml:3:",
    );
    refused("owner = 7\n", "latch.toml:1:9:");
    refused(
        "[sessions.a]\ncommand = [\"cat\"]\nrestart = \"sometimes\"\n",
        "sometimes",
    );
    refused("[sessions.\"bad/id\"]\ncommand = [\"cat\"]\n", "bad/id");
    // Deeply nested: refused by the parser's depth bound, never a stack overflow.
    let deep = format!("x = {}{}\n", "[".repeat(100_000), "]".repeat(100_000));
    refused(&deep, "latch.toml:1:");
    // Huge: over the bound, refused before parsing.
    let huge = format!("# {}\n", "x".repeat(2 * 1024 * 1024));
    refused(&huge, "over");
}

#[test]
fn a_respawn_runs_the_command_exec_stored() {
    let reg = Reg::new();
    // The first program replaces itself through `latch exec`, which stores the new
    // command in the record; once that one ends, the respawn runs it.
    let script = format!(
        "exec {} exec -- sh -c 'echo second-program; read x; exit 1'",
        support::latch_bin()
    );
    reg.run(&[
        "new",
        "-d",
        "--id",
        "ex",
        "--restart",
        "on-failure",
        "--restart-delay",
        "10ms",
        "--",
        "sh",
        "-c",
        &script,
    ])
    .ok();
    wait_event(&reg, "ex", "metadata_change");
    reg.wait_for("ex", "second-program");
    reg.run(&["send", "ex", "go\n"]).ok();
    let respawn = wait_event(&reg, "ex", "session_respawn");
    assert_eq!(respawn["command"][0], "sh");
    assert_eq!(respawn["command"][2], "echo second-program; read x; exit 1");
    let now = respawn["incarnation"].as_str().unwrap();
    reg.wait_for(&format!("ex@{now}"), "second-program");
    // A fresh screen: the new incarnation's shows its own output only.
    let screen = reg.run(&["peek", "ex"]).ok().to_owned();
    assert_eq!(screen.matches("second-program").count(), 1, "{screen:?}");
}

#[test]
fn restart_runs_with_the_kept_environment_never_the_callers() {
    let reg = Reg::new();
    reg.run(&[
        "new",
        "-d",
        "--id",
        "envy",
        "--restart",
        "on-failure",
        "--env",
        "KEPT=from-new",
        "--",
        "sh",
        "-c",
        "echo kept=$KEPT caller=${CALLER:-none}; exec cat",
    ])
    .ok();
    reg.wait_for("envy", "kept=from-new caller=none");
    let rec = reg.record("envy");
    assert_eq!(rec["env"]["KEPT"], "from-new");
    assert!(rec["env"]["PATH"].is_string(), "{rec}");
    let r = Run::from(
        reg.cmd()
            .args(["restart", "envy", "--json"])
            .env("CALLER", "leaked")
            .output()
            .unwrap(),
    );
    let now = r.json()["incarnation"].as_str().unwrap().to_owned();
    reg.wait_for(&format!("envy@{now}"), "kept=from-new caller=none");
    // A plain session keeps no environment in its record.
    reg.new_session("plain", &["cat"]);
    assert!(reg.record("plain").get("env").is_none());
}
