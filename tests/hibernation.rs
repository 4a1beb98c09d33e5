//! Hibernation end to end (SPEC §4.4 "Hibernation", §8 `HIBERNATE_QUIET`): a quiet,
//! detached session frees its output ring and its grids, and every capture after
//! it is the one before it.

mod support;

use std::time::{Duration, Instant};

use support::Reg;

/// What `peek --since 0` says: (bytes it lost, the output cursor).
fn ring(reg: &Reg, id: &str) -> (u64, u64) {
    let v = reg.run(&["--json", "peek", id, "--since", "0"]).json();
    (
        v["droppedBytes"].as_u64().unwrap(),
        v["outputRange"]["end"].as_u64().unwrap(),
    )
}

/// Waits (a bounded poll of `peek --since`, which does not wake it) until the
/// session has hibernated: its ring lost every byte.
fn wait_hibernated(reg: &Reg, id: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (dropped, end) = ring(reg, id);
        if end > 0 && dropped == end {
            return;
        }
        assert!(Instant::now() < deadline, "{id} never hibernated");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Every capture a client can ask for.
fn captures(reg: &Reg, id: &str) -> Vec<String> {
    let mut out = Vec::new();
    for args in [
        &["peek", id, "--plain"][..],
        &["peek", id, "--ansi"],
        &["peek", id, "--plain", "--full"],
        &["peek", id, "--ansi", "--full"],
    ] {
        out.push(reg.run(args).ok().to_owned());
    }
    let status = reg.run(&["status", id, "--json"]).json();
    out.push(format!("{} {}", status["cursor"], status["outputCursor"]));
    out
}

#[test]
fn a_quiet_detached_session_hibernates_and_wakes_with_the_same_screen() {
    let reg = Reg::new();
    // Colours, a wide character, scrollback, a scroll region, a title, the saved
    // cursor, then a program waiting for input.
    let script = "i=0; while [ $i -lt 60 ]; do printf 'line %s \\033[3%sm\\xe4\\xb8\\xad\\033[m\\n' $i $((i % 8)); i=$((i+1)); done; \
                  printf '\\033]0;a title\\007\\033[2;10r\\0337\\033[5;3Hplaced\\0338ready\\n'; exec cat";
    reg.new_session("h", &["sh", "-c", script]);
    reg.wait_for("h", "ready");
    let before = captures(&reg, "h");
    wait_hibernated(&reg, "h");
    // Reading the screen wakes it: the same captures, byte for byte.
    assert_eq!(captures(&reg, "h"), before);
    // Input and output after the wake: the program still runs and echoes, and the
    // ring holds output again.
    reg.run(&["send", "h", "typed", "--keys", "Enter"]).ok();
    reg.wait_for("h", "typed");
    let (dropped, end) = ring(&reg, "h");
    assert!(end > dropped, "output after the wake is in the ring again");
}

/// Resident KiB of the daemon's mappings of its executable's code (`r-xp`).
fn code_rss_kib(pid: u64) -> u64 {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
    let mut total = 0;
    let mut in_code = false;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if first.contains('-') && !first.ends_with(':') {
            let perms = line.split_whitespace().nth(1).unwrap_or("");
            in_code = perms == "r-xp" && line.contains('/');
        } else if in_code && first == "Rss:" {
            total += line
                .split_whitespace()
                .nth(1)
                .unwrap()
                .parse::<u64>()
                .unwrap();
        }
    }
    total
}

#[test]
fn a_hibernating_daemon_lets_go_of_the_code_it_does_not_run() {
    let reg = Reg::new();
    reg.new_session("c", &["sh", "-c", "echo ready; exec cat"]);
    reg.wait_for("c", "ready");
    let pid = reg.run(&["status", "c", "--json"]).json()["daemonPid"]
        .as_u64()
        .unwrap();
    let awake = code_rss_kib(pid);
    // Waits for the daemon's own word (its log), which runs none of its code.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(reg.path("c.log"))
        .unwrap_or_default()
        .contains("hibernated")
    {
        assert!(Instant::now() < deadline, "c never hibernated");
        std::thread::sleep(Duration::from_millis(50));
    }
    // It lets go right after that line: poll (reading /proc runs none of its code).
    let released = Instant::now() + Duration::from_secs(10);
    let mut asleep = code_rss_kib(pid);
    while asleep * 2 >= awake && Instant::now() < released {
        std::thread::sleep(Duration::from_millis(20));
        asleep = code_rss_kib(pid);
    }
    assert!(
        asleep * 2 < awake,
        "code resident: {awake} KiB awake, {asleep} KiB hibernated"
    );
    // And the code it needs comes back: the session still answers and echoes.
    reg.run(&["send", "c", "again", "--keys", "Enter"]).ok();
    reg.wait_for("c", "again");
}
