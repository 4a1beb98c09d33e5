//! Unit tests of `run`'s typed line, paste tracking and held-back output.

use super::*;

#[test]
fn the_marker_line_quotes_the_command() {
    assert_eq!(
        typed_line("echo 'a' #c &", true),
        r#" printf '\033]133;C\007'; command eval 'echo '\''a'\'' #c &'; printf '\033]133;D;%s\007' "$?""#
    );
    assert_eq!(typed_line("ls", false), " ls");
    assert_eq!(typed_line("echo hi!", false), " eval 'echo hi!'");
}

#[test]
fn bracketed_paste_follows_the_last_switch_even_split() {
    let mut p = Paste::from_screen(b"\x1b[?2004l\x1b[?2004h");
    assert!(p.on);
    p.feed(b"abc\x1b[?20");
    assert!(p.on);
    p.feed(b"04l");
    assert!(!p.on);
}

#[test]
fn pending_holds_back_a_split_mark() {
    let mut got = Vec::new();
    let mut p = Pending::default();
    p.push(0, b"out\x1b]133;D;", &mut |b| got.extend_from_slice(b));
    assert_eq!(got, b"out");
    p.push(0, b"x\x1b[1mbold\x1b[0m", &mut |b| got.extend_from_slice(b));
    assert_eq!(got, b"out\x1b]133;D;x\x1b[1mbold\x1b[0m");
}
