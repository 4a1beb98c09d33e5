//! The scrollback end to end: rows older than the emulator's window of full-cell
//! rows (kept compactly, SPEC §4.4) come back in every capture with their colours
//! and wide characters, in the legacy screens too, and `CSI 3 J` clears them.
//!
//! Every wait is on an event (`peek --wait`).

mod support;

use support::Reg;

#[test]
fn old_scrollback_rows_come_back_in_every_capture() {
    let reg = Reg::new();
    // 1500 lines: far past the window, well within the default scrollback.
    let prog = r#"i=1; while [ $i -le 1500 ]; do printf '\033[3%dmline %d \344\270\255\033[m\n' $((i % 8)) $i; i=$((i+1)); done
echo printed; read x; printf '\033[3J'; echo cleared; exec sleep 1000"#;
    reg.new_session("sb", &["sh", "-c", prog]);
    reg.wait_for("sb", "printed");

    let r = reg.run(&["peek", "sb", "--full", "--plain"]);
    assert_eq!(r.code, 0, "{r:?}");
    let lines: Vec<String> = r.stdout.lines().take(1500).map(str::to_owned).collect();
    let want: Vec<String> = (1..=1500).map(|i| format!("line {i} \u{4e2d}")).collect();
    assert_eq!(lines, want, "{}", r.stdout);

    let r = reg.run(&["peek", "sb", "--full", "--ansi"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout
            .contains("\x1b[0;31mline 1 \u{4e2d}\x1b[m\n\x1b[0;32mline 2 \u{4e2d}\x1b[m\n"),
        "{}",
        &r.stdout[..r.stdout.len().min(400)]
    );

    reg.run(&["send", "sb", "go\n"]).ok();
    reg.wait_for("sb", "cleared");
    let r = reg.run(&["peek", "sb", "--full", "--plain"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!r.stdout.contains("line 1 "), "{}", r.stdout);
    assert!(
        r.stdout.contains("line 1500"),
        "the screen stays: {}",
        r.stdout
    );
}
