//! End to end: interactive attach driven through a real terminal (tmux): typing
//! echoes, the terminal size follows, Ctrl-\ detaches, and the terminal comes back
//! sane.

mod support;

use std::path::PathBuf;

use support::tmux::Tmux;
use support::Reg;

#[test]
fn interactive_attach_through_a_real_terminal() {
    let tmux = Tmux::new("ia");
    let reg = Reg::new();
    reg.new_session("ia", &["sh"]);
    let stty_file: PathBuf = reg.root.parent().unwrap().join("stty.txt");
    let attach = format!(
        "{bin} --root {root} attach ia",
        bin = support::latch_bin(),
        root = reg.root.display(),
    );
    tmux.start(&attach, 100, 30, Some(&stty_file));
    // Typing echoes: keys go through tmux -> latch attach -> daemon -> sh.
    tmux.run(&["send-keys", "-t", "t", "echo typed-$((6*7))", "Enter"]);
    reg.wait_for("ia", "typed-42");
    // The attach made the session's PTY take the pane's size.
    let st = reg.run(&["status", "ia", "--json"]).json();
    assert_eq!(
        (st["daemon"]["rows"].as_u64(), st["daemon"]["cols"].as_u64()),
        (Some(30), Some(100)),
        "{st}"
    );
    assert_eq!(st["daemon"]["writers"], 1);

    // The window size follows the terminal.
    tmux.run(&["resize-window", "-t", "t", "-x", "90", "-y", "20"]);
    let mut followed = false;
    for _ in 0..20 {
        tmux.run(&["send-keys", "-t", "t", "stty size", "Enter"]);
        if reg
            .run(&["peek", "ia", "--wait", "20 90", "--timeout", "0.5"])
            .code
            == 0
        {
            followed = true;
            break;
        }
    }
    assert!(
        followed,
        "the PTY size did not follow the terminal: {}",
        tmux.capture()
    );

    // Ctrl-\ detaches; latch exits 0 and the terminal is restored.
    tmux.run(&["send-keys", "-t", "t", "C-\\"]);
    assert!(tmux.wait_for("ended"), "no detach: {}", tmux.capture());
    let pane = tmux.capture();
    assert!(pane.contains("LATCH-EXIT:0"), "{pane}");
    assert!(pane.contains("detached from ia"), "{pane}");
    let stty = std::fs::read_to_string(&stty_file).unwrap();
    for flag in ["icanon", "echo", "isig", "opost"] {
        assert!(
            stty.split_whitespace().any(|w| w == flag),
            "terminal not restored ({flag} off): {stty}"
        );
    }
    // The session outlives the detach.
    let st = reg.run(&["status", "ia", "--json"]).json();
    assert_eq!(st["status"], "running");
    assert_eq!(st["daemon"]["writers"], 0);
}

/// The detach key is settable on `new`; pressed twice it reaches the program; the
/// detach message starts on a fresh line wherever the program left the cursor.
#[test]
fn detach_key_on_new_double_press_and_a_fresh_line() {
    let tmux = Tmux::new("dk");
    let reg = Reg::new();
    reg.run(&["ls"]).ok(); // the root, for events to watch
    let new = format!(
        "{bin} --root {root} new --id dk --detach-key C-a -- cat -v",
        bin = support::latch_bin(),
        root = reg.root.display(),
    );
    tmux.start(&new, 80, 20, None);
    let started = reg.run(&[
        "events",
        "--all",
        "--wait",
        "session_start",
        "--timeout",
        "10",
    ]);
    assert_eq!(started.code, 0, "{started:?}");
    tmux.run(&["send-keys", "-t", "t", "hello", "Enter"]);
    reg.wait_for("dk", "hello");
    // Twice: one C-a goes through (cat -v shows it as ^A).
    tmux.run(&["send-keys", "-t", "t", "C-a", "C-a"]);
    tmux.run(&["send-keys", "-t", "t", "z", "Enter"]);
    reg.wait_for("dk", "^Az");
    // Once, with the cursor mid-line: detached, and the message on a line of its own.
    tmux.run(&["send-keys", "-t", "t", "partial"]);
    reg.wait_for("dk", "partial");
    tmux.run(&["send-keys", "-t", "t", "C-a"]);
    assert!(tmux.wait_for("ended"), "no detach: {}", tmux.capture());
    let pane = tmux.capture();
    assert!(pane.contains("LATCH-EXIT:0"), "{pane}");
    assert!(
        pane.lines()
            .any(|l| l.starts_with("[latch: detached from dk]")),
        "{pane}"
    );
    assert_eq!(
        reg.run(&["status", "dk", "--json"]).json()["status"],
        "running"
    );
}

/// A signal that ends the attach client (SIGTERM, SIGHUP, SIGINT) restores the
/// terminal, reports itself, and leaves the session running; the single-threaded
/// client reads these through its signalfd.
#[test]
fn a_signal_to_the_attach_client_restores_the_terminal() {
    let tmux = Tmux::new("sg");
    let reg = Reg::new();
    reg.new_session("sg", &["sh"]);
    let stty_file: PathBuf = reg.root.parent().unwrap().join("stty-sg.txt");
    let pid_file: PathBuf = reg.root.parent().unwrap().join("attach.pid");
    let attach = format!(
        "sh -c 'echo $$ > {pid}; exec {bin} --root {root} attach sg'",
        pid = pid_file.display(),
        bin = support::latch_bin(),
        root = reg.root.display(),
    );
    tmux.start(&attach, 80, 24, Some(&stty_file));
    tmux.run(&["send-keys", "-t", "t", "echo attached-$((2*21))", "Enter"]);
    reg.wait_for("sg", "attached-42");
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(tmux.wait_for("ended"), "no end: {}", tmux.capture());
    let pane = tmux.capture();
    assert!(pane.contains("SIGTERM received, detached"), "{pane}");
    let stty = std::fs::read_to_string(&stty_file).unwrap();
    for flag in ["icanon", "echo", "isig", "opost"] {
        assert!(
            stty.split_whitespace().any(|w| w == flag),
            "terminal not restored ({flag} off): {stty}"
        );
    }
    assert_eq!(
        reg.run(&["status", "sg", "--json"]).json()["status"],
        "running"
    );
}

/// A program's scroll region is set again in a terminal that attaches later: its
/// output scrolls inside the region, and what it drew outside stays put.
#[test]
fn an_attach_keeps_the_programs_scroll_region() {
    let tmux = Tmux::new("rg");
    let reg = Reg::new();
    // A line above the region, rows 5–20 as the region, and after a line of input,
    // 40 lines printed at the region's bottom.
    reg.new_session(
        "rg",
        &[
            "sh",
            "-c",
            r"printf 'top-line\033[5;20r\033[20;1H'; read x; seq 101 140; sleep 600",
        ],
    );
    reg.wait_for("rg", "top-line");
    let attach = format!(
        "{bin} --root {root} attach rg",
        bin = support::latch_bin(),
        root = reg.root.display(),
    );
    // The session's own size (24×80): no resize, which would reset the region.
    tmux.start(&attach, 80, 24, None);
    tmux.run(&["send-keys", "-t", "t", "go", "Enter"]);
    reg.wait_for("rg", "140");
    // Detaching flushes everything before it to the terminal.
    tmux.run(&["send-keys", "-t", "t", "C-\\"]);
    assert!(tmux.wait_for("ended"), "no detach: {}", tmux.capture());
    let pane = tmux.capture();
    assert!(
        pane.contains("LATCH-EXIT:0") && pane.contains("140"),
        "{pane}"
    );
    assert_eq!(pane.lines().next(), Some("top-line"), "{pane}");
}
