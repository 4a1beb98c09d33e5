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

/// Starts `cat` in session `id` once it has shown its first line; its daemon's pid.
fn ready_cat(reg: &Reg, id: &str) -> u64 {
    reg.new_session(id, &["sh", "-c", "echo ready; exec cat"]);
    reg.wait_for(id, "ready");
    reg.run(&["status", id, "--json"]).json()["daemonPid"]
        .as_u64()
        .unwrap()
}

/// Resident KiB of the daemon's private mappings of files with permissions
/// `perms` (`r-xp`: code; `r--p`: read-only data) that hold no page of their own
/// (`Anonymous: 0 kB`; a relocated RELRO part is not counted).
fn file_rss_kib(pid: u64, perms: &str) -> u64 {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
    let kb = |line: &str| -> u64 { line.split_whitespace().nth(1).unwrap().parse().unwrap() };
    let mut total = 0;
    let mut counted = false;
    let mut rss = 0;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if first.contains('-') && !first.ends_with(':') {
            counted = line.split_whitespace().nth(1) == Some(perms) && line.contains('/');
        } else if counted && first == "Rss:" {
            rss = kb(line);
        } else if counted && first == "Anonymous:" && kb(line) == 0 {
            total += rss;
        }
    }
    total
}

#[test]
fn a_hibernating_daemon_lets_go_of_the_file_pages_it_does_not_use() {
    let reg = Reg::new();
    let pid = ready_cat(&reg, "c");
    let awake = (file_rss_kib(pid, "r-xp"), file_rss_kib(pid, "r--p"));
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
    let halved = |asleep: (u64, u64)| asleep.0 * 2 < awake.0 && asleep.1 * 2 < awake.1;
    let mut asleep = (file_rss_kib(pid, "r-xp"), file_rss_kib(pid, "r--p"));
    while !halved(asleep) && Instant::now() < released {
        std::thread::sleep(Duration::from_millis(20));
        asleep = (file_rss_kib(pid, "r-xp"), file_rss_kib(pid, "r--p"));
    }
    assert!(
        halved(asleep),
        "code and read-only data resident (KiB): {awake:?} awake, {asleep:?} hibernated"
    );
    // And the code it needs comes back: the session still answers and echoes.
    reg.run(&["send", "c", "again", "--keys", "Enter"]).ok();
    reg.wait_for("c", "again");
}

/// Bytes the daemon has read through system calls (`rchar` of `/proc/PID/io`).
fn read_bytes(pid: u64) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap();
    io.lines()
        .find_map(|l| l.strip_prefix("rchar:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// An echo is not a burst: the quiet moment after a keystroke's echo hands no
/// memory back (SPEC §4.4), so it reads no `/proc/self/maps` (some 5 KB a time).
/// Before the fix every quiet moment after output did.
#[test]
fn a_quiet_moment_after_an_echo_trims_nothing() {
    let reg = Reg::new();
    let pid = ready_cat(&reg, "e");
    // Past the first quiet moment (the start-up's output and its trim).
    reg.run(&["send", "e", "warm", "--keys", "Enter"]).ok();
    reg.wait_for("e", "warm");
    let before = read_bytes(pid);
    const ECHOES: u64 = 10;
    for i in 0..ECHOES {
        let word = format!("echo{i}");
        reg.run(&["send", "e", &word, "--keys", "Enter"]).ok();
        // Each wait is a new process and connection: far longer than the
        // daemon's quiet period, so every echo is followed by one.
        reg.wait_for("e", &word);
    }
    let read = read_bytes(pid) - before;
    // The requests and the echoes themselves are some hundred bytes each.
    assert!(
        read < ECHOES * 1024,
        "the daemon read {read} bytes for {ECHOES} echoes"
    );
}
