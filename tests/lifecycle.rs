//! End to end: lifecycle safety (SPEC.md §11 I5 and I6): process
//! identity proofs, gc, crash recovery, exec, the draining fence, restart.

// Pids read back from JSON records always fit; the casts are checked by the kernel.
#![allow(clippy::cast_possible_truncation)]

mod support;

use std::os::fd::AsRawFd;
use std::time::Duration;

use latch_client::Client;
use latch_wire::{Incarnation, SessionId, SessionRef};
use serde_json::Value;
use support::{alive, wait_process_exit, Reg};

fn pid(v: &Value) -> u32 {
    u32::try_from(v.as_u64().expect("pid")).expect("pid fits")
}

fn sigkill(p: u32) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(p).unwrap()),
        nix::sys::signal::SIGKILL,
    );
}

fn gc_json(reg: &Reg, extra: &[&str]) -> Vec<Value> {
    let mut args = vec!["gc", "--json"];
    args.extend_from_slice(extra);
    let r = reg.run(&args);
    assert_eq!(r.code, 0, "{r:?}");
    r.json().as_array().unwrap().clone()
}

fn report<'a>(reports: &'a [Value], id: &str) -> &'a Value {
    reports
        .iter()
        .find(|r| r["id"] == id)
        .unwrap_or_else(|| panic!("no report for {id}: {reports:?}"))
}

/// Kills a session's daemon (and optionally its program) with SIGKILL.
fn crash(reg: &Reg, id: &str, also_child: bool) -> (u32, u32) {
    let rec = reg.record(id);
    let (d, c) = (pid(&rec["daemon"]["pid"]), pid(&rec["child"]["pid"]));
    sigkill(d);
    assert!(wait_process_exit(d, Duration::from_secs(5)));
    if also_child {
        sigkill(c);
        assert!(wait_process_exit(c, Duration::from_secs(5)));
    }
    (d, c)
}

#[test]
fn sigkilled_daemon_is_vanished_then_collected_and_the_id_reusable() {
    let reg = Reg::new();
    let healthy = reg.new_session("healthy", &["cat"]);
    // The program ignores SIGHUP, so it outlives its daemon as an orphan.
    let inc = reg.new_session("crashy", &["sh", "-c", "trap '' HUP; exec sleep 600"]);
    let c = Client::open(&reg.root, support::latch_bin().into()).unwrap();
    let mut held = c
        .connect(&SessionRef::new(
            SessionId::new("crashy").unwrap(),
            Incarnation::parse(&inc).unwrap(),
        ))
        .unwrap();
    let (_, child) = crash(&reg, "crashy", false);

    // A bound connection's client gets a clear error.
    let err = held.peek(latch_client::PeekOptions::plain()).unwrap_err();
    assert!(
        matches!(
            err.unreachable_cause(),
            Some(latch_client::UnreachableCause::Closed | latch_client::UnreachableCause::Io)
        ),
        "{err:?}"
    );

    let ls = reg.run(&["ls", "--json"]).json();
    let e = ls
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == "crashy")
        .unwrap();
    assert_eq!(e["status"], "vanished");
    // status reports a vanished session from its record, with how to remove it.
    let r = reg.run(&["status", "crashy"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("vanished") && r.stdout.contains("latch rm crashy"),
        "{r:?}"
    );

    // Dry run changes nothing.
    let dry = gc_json(&reg, &["--dry-run"]);
    assert_eq!(report(&dry, "crashy")["action"], "would-signal-orphan");
    assert!(reg.path("crashy.json").exists() && alive(child));

    // The orphaned program is proven and signalled; the files go.
    let done = gc_json(&reg, &[]);
    assert_eq!(
        report(&done, "crashy")["action"],
        "orphan-signaled-and-removed",
        "{done:?}"
    );
    assert!(wait_process_exit(child, Duration::from_secs(5)));
    for f in ["crashy.json", "crashy.sock", "crashy.lock"] {
        assert!(!reg.path(f).exists(), "{f} left behind");
    }
    // The healthy session is untouched: same incarnation, still answering.
    assert_eq!(report(&done, "healthy")["action"], "none");
    let st = reg
        .run(&["status", "healthy", "--json", "--expect", &healthy])
        .json();
    assert_eq!(st["daemon"]["incarnation"], healthy.as_str());
    // A new session with the same id works.
    let again = reg.new_session("crashy", &["sh", "-c", "echo reborn; cat"]);
    assert_ne!(again, inc);
    reg.wait_for("crashy", "reborn");
}

#[test]
fn exited_sessions_are_removed_unless_kept() {
    let reg = Reg::new();
    reg.new_session("done", &["true"]);
    reg.new_session("keepme", &["true"]);
    reg.run(&["tag", "keepme", "keep=yes"]).ok();
    reg.wait_exit("done");
    reg.wait_exit("keepme");
    let reports = gc_json(&reg, &[]);
    assert_eq!(report(&reports, "done")["action"], "removed");
    assert_eq!(report(&reports, "keepme")["reason"], "kept-by-tag");
    assert!(!reg.path("done.json").exists());
    assert!(reg.path("keepme.json").exists());
    // The removal is in the id's history.
    let evs = reg.run(&["events", "done", "--json"]).stdout;
    assert!(evs.lines().last().unwrap().contains("\"removed\""), "{evs}");
}

#[test]
fn a_recycled_pid_is_never_signalled_and_gc_says_unverifiable() {
    let reg = Reg::new();
    reg.new_session("reuse", &["cat"]);
    crash(&reg, "reuse", true);
    // An unrelated process now "has" the recorded pids: same pid fields, but its
    // start time differs from the record's.
    let mut bystander = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .unwrap();
    let mut rec = reg.record("reuse");
    let real_start = latch_registry::proc::start_time(bystander.id()).unwrap();
    for who in ["child", "daemon"] {
        rec[who]["pid"] = bystander.id().into();
        // Different start time from the bystander's: the recorded process is not it.
        rec[who]["startTime"] = (real_start + 12_345).into();
    }
    std::fs::write(reg.path("reuse.json"), serde_json::to_vec(&rec).unwrap()).unwrap();

    let reports = gc_json(&reg, &[]);
    let r = report(&reports, "reuse");
    assert_eq!(r["action"], "skipped", "{r}");
    assert!(
        r["reason"].as_str().unwrap().starts_with("unverifiable"),
        "{r}"
    );
    assert!(
        alive(bystander.id()),
        "gc signalled a process it could not prove"
    );
    // kill and rm --force refuse to signal it too.
    let k = reg.run(&["kill", "reuse", "--signal", "KILL"]);
    assert_ne!(k.code, 0, "{k:?}");
    assert!(alive(bystander.id()), "kill signalled a recycled pid");
    bystander.kill().unwrap();
    bystander.wait().unwrap();
}

#[test]
fn gc_reports_busy_while_the_lock_is_held_and_touches_nothing() {
    let reg = Reg::new();
    reg.new_session("gone", &["true"]);
    reg.wait_exit("gone");
    // A running session whose working directory is gone is "abandoned".
    let dir = reg.root.parent().unwrap().join("wd");
    std::fs::create_dir(&dir).unwrap();
    let r = reg.run(&[
        "new",
        "-d",
        "--id",
        "aband",
        "--cwd",
        dir.to_str().unwrap(),
        "--",
        "cat",
    ]);
    r.ok();
    std::fs::remove_dir(&dir).unwrap();
    let daemon = pid(&reg.record("aband")["daemon"]["pid"]);

    let hold = |id: &str| {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .open(reg.path(&format!("{id}.lock")))
            .unwrap();
        // SAFETY: flock on a valid fd.
        assert_eq!(
            unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) },
            0
        );
        f
    };
    let l1 = hold("gone");
    let l2 = hold("aband");
    let reports = gc_json(&reg, &["--abandoned"]);
    assert_eq!(report(&reports, "gone")["reason"], "busy", "{reports:?}");
    assert_eq!(report(&reports, "aband")["reason"], "busy", "{reports:?}");
    assert!(reg.path("gone.json").exists());
    assert!(
        alive(daemon),
        "gc stopped a session whose lock it did not hold"
    );
    drop((l1, l2));

    // Without --abandoned a running session is left alone; with it (and the lock
    // free) it is stopped and removed.
    assert_eq!(report(&gc_json(&reg, &[]), "aband")["reason"], "running");
    let reports = gc_json(&reg, &["--abandoned"]);
    assert_eq!(
        report(&reports, "aband")["action"],
        "stopped-and-removed",
        "{reports:?}"
    );
    assert!(wait_process_exit(daemon, Duration::from_secs(5)));
}

#[test]
fn gc_racing_a_replacement_never_touches_it() {
    let rounds: usize = std::env::var("LATCH_RACE_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    let reg = Reg::new();
    let mut removed_a = 0;
    for round in 0..rounds {
        let inc_a = reg.new_session("gcr", &["cat"]);
        crash(&reg, "gcr", true);
        let root = reg.root.clone();
        // A varying start offset spreads gc across the replacement's steps; it
        // orders nothing (the assertions read the reports and the record).
        let jitter = Duration::from_micros((round as u64 * 7919) % 4000);
        let gc = std::thread::spawn(move || {
            std::thread::sleep(jitter);
            std::process::Command::new(support::latch_bin())
                .arg("--root")
                .arg(&root)
                .args(["gc", "--json"])
                .output()
                .unwrap()
        });
        // Replace: rm A (if gc has not already), create B under the same id.
        let rm = reg.run(&["rm", &format!("gcr@{inc_a}")]);
        assert!(matches!(rm.code, 0 | 4 | 6), "round {round}: {rm:?}");
        let inc_b = reg.new_session("gcr", &["cat"]);
        let out = gc.join().unwrap();
        let reports: Value = serde_json::from_slice(&out.stdout).unwrap();
        for r in reports.as_array().unwrap() {
            if r["incarnation"] == inc_a.as_str() && r["action"] == "removed" {
                removed_a += 1;
            }
            assert!(
                !(r["incarnation"] == inc_b.as_str() && r["action"] != "none"),
                "round {round}: gc acted on the replacement: {r}"
            );
        }
        let rec = reg.record("gcr");
        assert_eq!(rec["incarnation"], inc_b.as_str(), "round {round}");
        assert!(
            alive(pid(&rec["child"]["pid"])),
            "round {round}: B's program died"
        );
        reg.run(&["kill", "gcr", "--signal", "KILL", "--wait"]).ok();
        reg.run(&["rm", "gcr"]).ok();
    }
    println!("gc race: {rounds} rounds, gc removed A in {removed_a}, never touched B");
}

#[test]
fn exec_updates_the_command_and_fails_closed_when_replaced() {
    let reg = Reg::new();
    let bin = support::latch_bin();
    let script = format!("read x; exec {bin} exec -- sh -c 'echo EXECED:$LATCH_SESSION_ID; cat'");
    reg.new_session("ex", &["sh", "-c", &script]);
    reg.run(&["send", "ex", "go\n"]).ok();
    reg.wait_for("ex", "EXECED:ex");
    assert_eq!(
        reg.record("ex")["command"],
        serde_json::json!(["sh", "-c", "echo EXECED:$LATCH_SESSION_ID; cat"])
    );

    // Outside a session: refused (exit 9), nothing runs.
    let r = reg
        .cmd()
        .args(["exec", "--", "sh", "-c", "echo RAN"])
        .env_remove("LATCH_SESSION_ID")
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(9), "{r:?}");
    assert!(!String::from_utf8_lossy(&r.stdout).contains("RAN"));

    // From a replaced session: A keeps running, but its id now belongs to B.
    let script = format!("read x; {bin} exec -- echo SHOULD-NOT-RUN; echo EXIT:$?; cat");
    let inc_a = reg.new_session("rep", &["sh", "-c", &script]);
    std::fs::rename(reg.path("rep.sock"), reg.path("rep-a.sock")).unwrap();
    let rec_a = std::fs::read(reg.path("rep.json")).unwrap();
    std::fs::remove_file(reg.path("rep.json")).unwrap();
    reg.new_session("rep", &["cat"]);
    let rec_b = std::fs::read(reg.path("rep.json")).unwrap();
    let a = SessionRef::new(
        SessionId::new("rep").unwrap(),
        Incarnation::parse(&inc_a).unwrap(),
    );
    let mut conn = latch_client::Connection::open(&reg.path("rep-a.sock"), Duration::from_secs(5))
        .unwrap()
        .bind(&a)
        .unwrap();
    conn.send(b"go\n").unwrap();
    let mut watch = latch_client::Connection::open(&reg.path("rep-a.sock"), Duration::from_secs(5))
        .unwrap()
        .bind(&a)
        .unwrap()
        .attach(0, 0, latch_client::AttachMode::ReadOnly)
        .unwrap();
    let mut screen = String::from_utf8_lossy(&watch.screen).into_owned();
    watch
        .reader
        .set_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    while !screen.contains("EXIT:") {
        match watch.reader.next_event().unwrap() {
            latch_client::AttachEvent::Output(b) => screen.push_str(&String::from_utf8_lossy(&b)),
            other => panic!("{other:?}"),
        }
    }
    assert!(screen.contains("EXIT:4"), "{screen}");
    assert!(!screen.contains("SHOULD-NOT-RUN"), "{screen}");
    assert_eq!(
        std::fs::read(reg.path("rep.json")).unwrap(),
        rec_b,
        "B's record changed"
    );
    // Restore A's record under another name so cleanup stops it.
    let mut v: Value = serde_json::from_slice(&rec_a).unwrap();
    v["id"] = "rep-a".into();
    std::fs::write(reg.path("rep-a.json"), serde_json::to_vec(&v).unwrap()).unwrap();
}

#[test]
fn draining_fence_holds_until_the_program_is_gone() {
    let reg = Reg::new();
    let inc = reg.new_session(
        "stub",
        &[
            "sh",
            "-c",
            "trap '' TERM HUP; echo ready; while :; do read x; done",
        ],
    );
    reg.wait_for("stub", "ready");
    let child = pid(&reg.record("stub")["child"]["pid"]);
    // The hangup (the default) is ignored: the drain times out and says so.
    let r = reg.run(&["kill", "stub", "--wait", "--timeout", "0.5", "--json"]);
    assert_eq!(r.json()["outcome"], "timed-out", "{r:?}");
    assert_eq!(r.code, 6);
    assert!(alive(child));
    // The fence stays up: status reports draining; new effects are refused (busy).
    let st = reg.run(&["status", "stub", "--json"]).json();
    assert_eq!(st["daemon"]["draining"], true, "{st}");
    assert_eq!(reg.run(&["send", "stub", "x\n"]).code, 6);
    assert_eq!(reg.run(&["resize", "stub", "5", "5"]).code, 6);
    // The record keeps its authority: not exited, same incarnation.
    assert!(reg.record("stub")["exit"].is_null());
    assert_eq!(reg.record("stub")["incarnation"], inc.as_str());
    // Escalation reaches the proven program; the session ends.
    let r = reg.run(&["kill", "stub", "--signal", "KILL", "--wait", "--json"]);
    assert_eq!(r.json()["outcome"], "killed", "{r:?}");
    assert!(wait_process_exit(child, Duration::from_secs(5)));
    reg.wait_exit("stub");
}

#[test]
fn restart_mints_a_new_incarnation_and_old_receipts_say_replaced() {
    let reg = Reg::new();
    let receipt = reg.root.parent().unwrap().join("r.json");
    let rs = receipt.to_str().unwrap();
    let r = reg.run(&[
        "new",
        "-d",
        "--json",
        "--id",
        "svc",
        "--name",
        "web",
        "--receipt",
        rs,
        "--",
        "sh",
        "-c",
        "echo up:$LATCH_INCARNATION; cat",
    ]);
    let old = r.json()["incarnation"].as_str().unwrap().to_owned();
    reg.run(&["tag", "svc", "tier=1"]).ok();
    let r = reg.run(&["restart", "svc", "--expect", &old, "--json"]);
    let v = r.json();
    assert_eq!(r.code, 0, "{r:?}");
    let new = v["incarnation"].as_str().unwrap().to_owned();
    assert_ne!(new, old);
    assert_eq!(v["previousIncarnation"], old.as_str());
    reg.wait_for("svc", &format!("up:{new}"));
    let rec = reg.record("svc");
    assert_eq!(rec["displayName"], "web");
    assert_eq!(rec["tags"]["tier"], "1");
    let verdict = reg.run(&["receipt", "verify", rs, "--json"]);
    assert_eq!(verdict.json()["verdict"], "replaced", "{verdict:?}");
    // Restarting by the old incarnation now refuses: it was replaced.
    let r = reg.run(&["restart", "svc", "--expect", &old]);
    assert_eq!(r.code, 4, "{r:?}");
    assert_eq!(reg.record("svc")["incarnation"], new.as_str());
}

/// `latch restart` is the upgrade path for a session whose daemon speaks an older
/// protocol: plain effects refuse with exit 8, restart ends the program through its
/// proven identity and starts it again under a new incarnation.
#[test]
fn restart_upgrades_a_session_whose_daemon_answers_in_legacy_framing() {
    use std::io::{Read, Write};
    let reg = Reg::new();
    let old = reg.new_session("old", &["sh", "-c", "echo gen-1; exec sleep 600"]);
    reg.wait_for("old", "gen-1");
    let child = pid(&reg.record("old")["child"]["pid"]);
    // Stand an "older daemon" in front: it answers every connection in the legacy
    // framing (a GEOMETRY packet) and closes.
    std::fs::rename(reg.path("old.sock"), reg.path("old-real.sock")).unwrap();
    let listener = std::os::unix::net::UnixListener::bind(reg.path("old.sock")).unwrap();
    let fake = std::thread::spawn(move || {
        let mut served = 0;
        for stream in listener.incoming() {
            let mut s = stream.unwrap();
            let mut hello = [0u8; 8];
            let _ = s.read(&mut hello);
            let _ = s.write_all(&[10, 0, 0, 0, 4, 0, 24, 0, 80]);
            served += 1;
            if served == 2 {
                return served; // one refused `send`, one from restart's kill
            }
        }
        served
    });
    let r = reg.run(&["send", "old", "x"]);
    assert_eq!(r.code, 8, "{r:?}");
    assert!(r.stderr.contains("restart"), "{r:?}");
    let r = reg.run(&["restart", "old", "--expect", &old, "--grace", "2", "--json"]);
    assert_eq!(fake.join().unwrap(), 2);
    assert_eq!(r.code, 0, "{r:?}");
    let new = r.json()["incarnation"].as_str().unwrap().to_owned();
    assert_ne!(new, old);
    assert!(
        wait_process_exit(child, Duration::from_secs(5)),
        "the old program survived"
    );
    reg.wait_for("old", "gen-1");
    let st = reg.run(&["status", "old", "--json"]).json();
    assert_eq!(st["daemon"]["incarnation"], new.as_str());
}

/// `gc --idle-days N` stops only sessions whose PTY has seen no input or output for
/// N days (its access and modification times, as `w` reads them).
#[test]
fn gc_idle_days_stops_only_idle_sessions() {
    let reg = Reg::new();
    reg.new_session("sleepy", &["sleep", "600"]);
    reg.new_session("busy", &["sleep", "600"]);
    let tty = reg.record("sleepy")["tty"].as_str().unwrap().to_owned();
    assert!(tty.starts_with("/dev/pts/"), "{tty}");
    let ten_days_ago = nix::sys::time::TimeSpec::new(
        i64::try_from(latch_registry::now_ms() / 1000).unwrap() - 10 * 86_400,
        0,
    );
    nix::sys::stat::utimensat(
        nix::fcntl::AT_FDCWD,
        tty.as_str(),
        &ten_days_ago,
        &ten_days_ago,
        nix::sys::stat::UtimensatFlags::FollowSymlink,
    )
    .unwrap();
    let daemon = pid(&reg.record("sleepy")["daemon"]["pid"]);
    // Without the flag nothing running is touched.
    assert_eq!(report(&gc_json(&reg, &[]), "sleepy")["reason"], "running");
    let dry = gc_json(&reg, &["--idle-days", "3", "--dry-run"]);
    assert_eq!(report(&dry, "sleepy")["action"], "would-stop", "{dry:?}");
    assert!(report(&dry, "sleepy")["reason"]
        .as_str()
        .unwrap()
        .starts_with("idle for 10"));
    assert_eq!(report(&dry, "busy")["reason"], "running");
    let done = gc_json(&reg, &["--idle-days", "3"]);
    assert_eq!(
        report(&done, "sleepy")["action"],
        "stopped-and-removed",
        "{done:?}"
    );
    assert_eq!(report(&done, "busy")["action"], "none");
    assert!(wait_process_exit(daemon, Duration::from_secs(5)));
    assert!(!reg.path("sleepy.json").exists());
    assert!(alive(pid(&reg.record("busy")["child"]["pid"])));
}
