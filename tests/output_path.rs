//! The daemon's output path never waits for the registry (SPEC §9.9): terminal events
//! found in the output are queued for the daemon's event writer, which alone waits
//! for the session lock. Proven by ordering, not by time: the output, titles and
//! bells included, reaches an attached client while another holder keeps the lock,
//! and the events are recorded only once that holder lets go.

mod support;

use std::time::Duration;

use latch_client::{AttachEvent, AttachMode};
use support::Reg;

/// A program that, once told to go, sets three titles, rings three bells and writes
/// a line after each, then `DONE-` and what it was told.
const PROGRAM: &str = "echo READY; read x; \
    for i in 1 2 3; do printf '\\033]2;title-%s-%s\\007\\007' \"$x\" \"$i\"; \
    echo \"line-$x-$i\"; done; echo \"DONE-$x\"; exec sleep 600";

fn has(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn output_reaches_an_attached_client_while_the_session_lock_is_held() {
    let reg = Reg::new();
    let inc = reg.new_session("held", &["sh", "-c", PROGRAM]);
    reg.wait_for("held", "READY");
    let c = support::client(&reg);
    let mut a = c
        .connect(&support::sref("held", &inc))
        .unwrap()
        .attach(24, 80, AttachMode::ReadWrite)
        .unwrap();
    a.reader.set_timeout(Some(Duration::from_secs(60))).unwrap();

    // This process holds the session lock (flock, as latch takes it, SPEC §9.3).
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(reg.path("held.lock"))
        .unwrap();
    lock.lock().unwrap();

    a.writer.input(b"go\r").unwrap();
    let mut seen = Vec::new();
    while !has(&seen, b"DONE-go") {
        match a.reader.next_event().unwrap() {
            AttachEvent::Output(b) | AttachEvent::Screen(b) => seen.extend_from_slice(&b),
            AttachEvent::Geometry { .. } => {}
            other => panic!("{other:?}"),
        }
    }
    // Everything the program wrote arrived, in order, while the lock was held: the
    // titles and bells whole, and the lines after them.
    for i in 1..=3 {
        let title = format!("\x1b]2;title-go-{i}\x07\x07");
        assert!(has(&seen, title.as_bytes()), "title {i} missing");
        assert!(has(&seen, format!("line-go-{i}").as_bytes()), "line {i}");
    }
    // A peeking client is served too, and nothing was recorded meanwhile.
    assert!(reg.run(&["peek", "held"]).ok().contains("DONE-go"));
    let r = reg.run(&["events", "held", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!r.stdout.contains("title_change"), "{r:?}");
    assert!(!r.stdout.contains(r#""type":"bell""#), "{r:?}");

    // Let go: the events are recorded now, in order, none lost.
    lock.unlock().unwrap();
    drop(lock);
    let r = reg.run(&[
        "events",
        "held",
        "--wait",
        "title_change",
        "--json",
        "--timeout",
        "30",
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.json()["title"], "title-go-1", "{r:?}");
    let r = reg.run(&[
        "events",
        "held",
        "--wait",
        "bell",
        "--json",
        "--timeout",
        "30",
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    // The attached connection is still served.
    a.writer.detach().unwrap();
}
