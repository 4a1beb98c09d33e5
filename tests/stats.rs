//! `latch stats`: every process of the session's terminal session, by proven
//! identity, and nothing that left it; `ls --json`'s cheap subset (SPEC.md §10).

mod support;

use std::time::Duration;

use support::Reg;

/// The pid a line `LEFT <pid>` on the screen names.
fn left_pid(screen: &str) -> u32 {
    screen
        .lines()
        .find_map(|l| l.trim().strip_prefix("LEFT "))
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("no LEFT line: {screen:?}"))
}

#[test]
fn stats_counts_fifty_background_processes_and_not_one_that_left() {
    let reg = Reg::new();
    // 50 background sleeps in the session; one more that leaves it with setsid and
    // says so once it has (its own session then), then the shell says READY.
    let script = "for i in $(seq 50); do sleep 1000 & done; \
                  setsid sh -c 'echo LEFT $$; exec sleep 1000' & \
                  echo READY; wait";
    let inc = reg.new_session("s", &["sh", "-c", script]);
    reg.wait_for("s", "READY");
    let screen = reg.wait_for("s", "LEFT");
    let left = left_pid(&screen);
    let left_fd = latch_registry::PidFd::open(left).unwrap();
    // Poll (bounded) until the 50 forks have exec'd and the leaver has left: the
    // count is exact once stable; it never includes the leaver.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let v = loop {
        let r = reg.run(&["stats", "s", "--json"]);
        let v = r.json();
        assert_eq!(r.code, 0, "{r:?}");
        if v["processes"] == 51 || std::time::Instant::now() > deadline {
            break v;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(v["processes"], 51, "the shell and its 50 sleeps: {v}");
    assert!(left_fd.is_alive(), "the leaver still runs, uncounted");
    assert_eq!(v["id"], "s");
    assert_eq!(v["incarnation"], inc.as_str());
    assert_eq!(v["status"], "running");
    assert!(v["rssBytes"].as_u64().unwrap() > 0, "{v}");
    assert!(v["pssBytes"].as_u64().unwrap() > 0, "{v}");
    assert!(v["cpuMs"].is_u64(), "{v}");
    let daemon = &v["daemon"];
    assert_eq!(daemon["pid"], reg.record("s")["daemon"]["pid"]);
    assert!(daemon["rssBytes"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(v["writers"], 0);
    assert_eq!(v["readers"], 0);
    assert!(v["outputCursor"].as_u64().unwrap() > 0, "{v}");
    assert!(v["lastOutputAt"].as_u64().is_some(), "{v}");

    // `ls --json` and `status --json` stay cheap: no process count (SPEC §10).
    let ls = reg.run(&["ls", "--json"]).json();
    assert!(ls[0].get("processes").is_none(), "{ls}");
    let st = reg.run(&["status", "s", "--json"]).json();
    assert!(st.get("processes").is_none(), "{st}");

    // --all lists the running sessions; the human table too.
    let all = reg.run(&["stats", "--all", "--json"]).json();
    assert_eq!(all.as_array().unwrap().len(), 1);
    assert_eq!(all[0]["processes"], 51);
    let table = reg.run(&["stats", "s"]);
    assert!(table.ok().contains("PROCS"), "{table:?}");

    // No signal was ever sent: every sleep still runs; now end them all.
    assert_eq!(reg.run(&["stats", "s", "--json"]).json()["processes"], 51);
    reg.run(&["kill", "s", "--wait"]).ok();
    let _ = left_fd.send_signal(libc::SIGKILL);
    assert!(left_fd.wait_exit(Duration::from_secs(10)));
    let ended = reg.run(&["stats", "s", "--json"]).json();
    assert_eq!(ended["status"], "exited", "{ended}");
    assert_eq!(ended["processes"], 0);
    assert!(ended["daemon"].is_null());
}

#[test]
fn stats_needs_a_ref_or_all_and_honours_owner() {
    let reg = Reg::new();
    let r = reg.run(&["stats"]);
    assert_eq!(r.code, 2, "{r:?}");
    let r = reg.run(&["stats", "nope"]);
    assert_eq!(r.code, 3, "{r:?}");
    reg.run(&["new", "-d", "--id", "o", "--owner", "me", "--", "cat"])
        .ok();
    reg.new_session("p", &["cat"]);
    let r = reg.run(&["stats", "o", "--owner", "you"]);
    assert_eq!(r.code, 12, "{r:?}");
    let all = reg
        .run(&["stats", "--all", "--owner", "me", "--json"])
        .json();
    let ids: Vec<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["o"]);
    let one = reg.run(&["stats", "p", "--json"]).json();
    assert_eq!(one["processes"], 1, "{one}");
}
