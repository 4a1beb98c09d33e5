//! `latch run` and `latch commands` end to end (SPEC §4.7): real bash, zsh, fish
//! and dash on a PTY, their exit codes, exactly the command's output (no prompt,
//! no echo), refusals that type nothing, the run lease, and a creation replaced
//! while a command runs.

mod support;

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use support::{Reg, Run};

/// Starts `shell` alone (as `latch new -- SHELL` does with $SHELL) in an empty
/// home, and does not wait for it: `run` waits for the prompt itself.
fn start(reg: &Reg, home: &std::path::Path, id: &str, cmd: &[&str], env: &[&str]) {
    let mut args = vec!["new", "-d", "--id", id];
    for e in env {
        args.extend(["--env", e]);
    }
    args.push("--");
    args.extend_from_slice(cmd);
    let r = Run::from(reg.cmd().env("HOME", home).args(&args).output().unwrap());
    assert_eq!(r.code, 0, "{r:?}");
}

fn run(reg: &Reg, id: &str, cmd: &str) -> Run {
    reg.run(&["run", id, "--timeout", "60", cmd])
}

fn run_json(reg: &Reg, id: &str, cmd: &str) -> serde_json::Value {
    let r = reg.run(&["--json", "run", id, "--timeout", "60", cmd]);
    assert_eq!(r.code, 0, "{r:?}");
    r.json()
}

/// A `latch run` left running in the background.
fn spawn_run(reg: &Reg, args: &[&str]) -> Child {
    reg.cmd()
        .arg("run")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Polls `status --json` until `want` holds (a bounded wait for a condition only
/// the daemon can tell).
fn until(reg: &Reg, id: &str, what: &str, want: impl Fn(&serde_json::Value) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let v = reg.run(&["status", id, "--json"]).json();
        if want(&v) {
            return;
        }
        assert!(Instant::now() < deadline, "{id}: no {what}: {v}");
        std::thread::yield_now();
    }
}

fn running(reg: &Reg, id: &str, fg: &str) {
    until(reg, id, &format!("{fg} running"), |v| {
        v["shell"]["state"] == "running" && v["foreground"]["name"] == fg
    });
}

/// bash, zsh and fish started by latch: exit codes 0, 1 and 7 as run's own, the
/// output exactly (with and without a trailing newline), never the echo of the
/// typed line, even when the command prints its own command line; right after
/// `new`, before the shell has drawn a prompt.
#[test]
fn run_prints_exactly_the_output_and_exits_with_the_commands_code() {
    let reg = Reg::new();
    let home = tempfile::tempdir().unwrap();
    for shell in ["bash", "zsh", "fish"] {
        start(&reg, home.path(), shell, &[shell], &[]);
        let r = run(&reg, shell, "echo one; echo two");
        assert_eq!(
            (r.code, r.stdout.as_str()),
            (0, "one\ntwo\n"),
            "{shell}: {r:?}"
        );
        let r = run(&reg, shell, "printf abc");
        assert_eq!((r.code, r.stdout.as_str()), (0, "abc"), "{shell}: {r:?}");
        let r = run(&reg, shell, "false");
        assert_eq!((r.code, r.stdout.as_str()), (1, ""), "{shell}: {r:?}");
        let r = run(&reg, shell, "sh -c 'echo out; exit 7'");
        assert_eq!((r.code, r.stdout.as_str()), (7, "out\n"), "{shell}: {r:?}");
        // Its own command line, once: the echo of the typed line is not output.
        let r = run(&reg, shell, "echo 'echo SELF'");
        assert_eq!(r.stdout, "echo SELF\n", "{shell}: {r:?}");
        // With --json: latch's exit 0, the command's code in the shape.
        let v = run_json(&reg, shell, "sh -c 'printf x; exit 7'");
        assert_eq!(v["exitCode"], 7, "{shell}: {v}");
        assert_eq!(v["output"], "x", "{shell}: {v}");
        assert_eq!(v["droppedBytes"], 0);
        let (start, end) = (
            v["outputRange"]["start"].as_u64().unwrap(),
            v["outputRange"]["end"].as_u64().unwrap(),
        );
        assert_eq!(v["id"], shell);
        assert!(v["cwd"].is_string(), "{shell}: {v}");
        // The range names the command's bytes in the creation's output (fish
        // writes mode changes around a command: escape sequences, no text).
        let raw = reg.run(&["peek", shell, "--since", &start.to_string(), "--raw"]);
        let len = usize::try_from(end - start).unwrap();
        let range = &raw.ok().as_bytes()[..len];
        assert!(
            range.ends_with(b"x"),
            "{shell}: {:?}",
            String::from_utf8_lossy(range)
        );
    }
}

/// `clear`, 10,000 lines, a `!` (no history expansion), and an empty line.
#[test]
fn run_output_in_plain_text_whatever_its_size() {
    let reg = Reg::new();
    let home = tempfile::tempdir().unwrap();
    start(&reg, home.path(), "b", &["bash"], &[]);
    let r = run(&reg, "b", "clear; echo after");
    assert_eq!(r.ok(), "after\n");
    let r = run(&reg, "b", "seq 10000");
    let out = r.ok();
    assert_eq!(out.lines().count(), 10_000);
    assert!(out.starts_with("1\n2\n") && out.ends_with("\n9999\n10000\n"));
    let v = run_json(&reg, "b", "seq 10000");
    assert_eq!(v["output"].as_str().unwrap(), out);
    assert_eq!(run(&reg, "b", "echo hi!").ok(), "hi!\n");
    let r = run(&reg, "b", "# nothing");
    assert_eq!((r.code, r.stdout.as_str()), (0, ""), "{r:?}");
}

/// A command that reads its standard input gets it from the terminal; Ctrl-C on
/// `latch run` reaches the command (exit 130).
#[test]
fn run_of_a_command_that_reads_stdin_and_ctrl_c() {
    let reg = Reg::new();
    let home = tempfile::tempdir().unwrap();
    start(&reg, home.path(), "b", &["bash"], &[]);
    let child = spawn_run(&reg, &["b", "--timeout", "60", "head -n1 | tr a-z A-Z"]);
    running(&reg, "b", "head");
    reg.run(&["send", "b", "hello", "--keys", "Enter"]).ok();
    let r = Run::from(child.wait_with_output().unwrap());
    // The terminal echoes what was typed, then the command's answer.
    assert_eq!((r.code, r.stdout.as_str()), (0, "hello\nHELLO\n"), "{r:?}");
    let child = spawn_run(&reg, &["b", "--timeout", "60", "sleep 300"]);
    running(&reg, "b", "sleep");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let r = Run::from(child.wait_with_output().unwrap());
    assert_eq!(r.code, 130, "C-c reached sleep: {r:?}");
}

/// dash has no integration: run refuses (9 with --json, 255 without) and types
/// nothing; `--marker` runs there, codes 0 and 7, even when the prompt itself
/// prints the marker's C.
#[test]
fn dash_is_refused_without_marker_and_runs_with_it() {
    let reg = Reg::new();
    let home = tempfile::tempdir().unwrap();
    start(&reg, home.path(), "d", &["dash"], &[]);
    reg.run(&["send", "d", "echo RE''ADY", "--keys", "Enter"])
        .ok();
    reg.wait_for("d", "READY");
    let r = reg.run(&["--json", "run", "d", "echo TYPED"]);
    assert_eq!(r.code, 9, "{r:?}");
    assert_eq!(r.json()["error"]["kind"], "refused");
    let r = reg.run(&["run", "d", "echo TYPED"]);
    assert_eq!(r.code, 255, "{r:?}");
    assert!(r.stderr.contains("refused"), "{r:?}");
    let screen = reg.run(&["peek", "d"]).ok().to_owned();
    assert!(!screen.contains("TYPED"), "nothing was typed: {screen}");
    let m = |cmd: &str| reg.run(&["run", "d", "--marker", "--timeout", "60", cmd]);
    let r = m("echo 'it''s' # a comment");
    assert_eq!((r.code, r.stdout.as_str()), (0, "its\n"), "{r:?}");
    let r = m("printf 'x\\n'; sh -c 'exit 7'");
    assert_eq!((r.code, r.stdout.as_str()), (7, "x\n"), "{r:?}");
    // A syntax error still reaches D.
    let r = m("if then");
    assert_eq!(r.code, 2, "{r:?}");
    // A prompt that prints the marker's own C does not start the output early.
    start(
        &reg,
        home.path(),
        "p",
        &["dash"],
        &["PS1=\u{1b}]133;C\u{7}p$ "],
    );
    reg.run(&["send", "p", "echo RE''ADY", "--keys", "Enter"])
        .ok();
    reg.wait_for("p", "READY");
    let r = reg.run(&["run", "p", "--marker", "--timeout", "60", "echo one"]);
    assert_eq!((r.code, r.stdout.as_str()), (0, "one\n"), "{r:?}");
}

/// Two runs at once: the second is refused busy (6 with --json), and once the
/// first is gone its lease is free again.
#[test]
fn a_second_run_is_refused_busy_while_one_holds_the_lease() {
    let reg = Reg::new();
    let home = tempfile::tempdir().unwrap();
    start(&reg, home.path(), "b", &["bash"], &[]);
    let mut first = spawn_run(&reg, &["b", "sleep 300"]);
    running(&reg, "b", "sleep");
    let r = reg.run(&["--json", "run", "b", "--timeout", "5", "echo second"]);
    assert_eq!(r.code, 6, "{r:?}");
    assert_eq!(r.json()["error"]["kind"], "busy");
    let r = reg.run(&["run", "b", "--timeout", "5", "echo second"]);
    assert_eq!(r.code, 255, "{r:?}");
    // kill, tag and every other command stay available meanwhile.
    reg.run(&["tag", "b", "k=v"]).ok();
    first.kill().unwrap();
    first.wait().unwrap();
    reg.run(&["send", "b", "C-c", "--keys"]).ok();
    assert_eq!(run(&reg, "b", "echo free").ok(), "free\n");
}

/// An unclosed quote is a continuation prompt: refused (9), and the line is
/// cancelled so the shell takes the next command. fish has no PS2: latch's Enter
/// marks its incomplete line (SPEC §4.6), so it is refused as promptly, not at
/// the deadline (10).
#[test]
fn an_incomplete_command_is_refused_not_waited_on() {
    let reg = Reg::new();
    let home = tempfile::tempdir().unwrap();
    for shell in ["bash", "zsh", "fish"] {
        start(&reg, home.path(), shell, &[shell], &[]);
        let r = reg.run(&["--json", "run", shell, "--timeout", "60", "echo 'open"]);
        assert_eq!(r.code, 9, "{shell}: {r:?}");
        assert_eq!(r.json()["error"]["kind"], "refused", "{shell}: {r:?}");
        let r = run(&reg, shell, "echo next; sh -c 'exit 7'");
        assert_eq!((r.code, r.stdout.as_str()), (7, "next\n"), "{shell}: {r:?}");
        // Again, once the shell is back at its prompt.
        let r = reg.run(&["--json", "run", shell, "--timeout", "60", "echo \"open"]);
        assert_eq!(r.code, 9, "{shell}: {r:?}");
        assert_eq!(run(&reg, shell, "echo again").ok(), "again\n", "{shell}");
    }
}

/// A person's Enter on fish's incomplete line still adds a line, as fish does
/// without latch (SPEC §4.6): completing the quote then runs the whole command.
#[test]
fn fish_enter_on_an_incomplete_line_keeps_editing_it() {
    let reg = Reg::new();
    let home = tempfile::tempdir().unwrap();
    start(&reg, home.path(), "f", &["fish"], &[]);
    assert_eq!(run(&reg, "f", "echo ready").ok(), "ready\n");
    reg.run(&["send", "f", "echo 'x"]).ok();
    reg.run(&["send", "f", "--keys", "Enter"]).ok();
    reg.run(&["send", "f", "y'(math 6 '*' 7)"]).ok();
    reg.run(&["send", "f", "--keys", "Enter"]).ok();
    let screen = reg.wait_for_within("f", "y42", 30);
    assert!(screen.contains("x\ny42"), "{screen}");
}

/// A creation replaced while its command runs: the run ends with exit 4 (--json)
/// and nothing of the new creation; a run aimed at the old one types nothing.
#[test]
fn a_run_across_a_replacement_is_refused() {
    let reg = Reg::new();
    let home = tempfile::tempdir().unwrap();
    start(&reg, home.path(), "b", &["bash"], &[]);
    let old = reg.run(&["status", "b", "--json"]).json()["incarnation"]
        .as_str()
        .unwrap()
        .to_owned();
    let child = reg
        .cmd()
        .args(["--json", "run", "b", "sleep 300"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    running(&reg, "b", "sleep");
    reg.run(&["restart", "b"]).ok();
    // Its creation ended under it: gone (3), or replaced (4) once the new one is
    // in the record; never an answer from the new creation.
    let r = Run::from(child.wait_with_output().unwrap());
    assert!(r.code == 3 || r.code == 4, "{r:?}");
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("before the command ended"));
    let r = reg.run(&["run", &format!("b@{old}"), "echo TYPED"]);
    assert_eq!(r.code, 255, "{r:?}");
    let r = reg.run(&["--json", "run", &format!("b@{old}"), "echo TYPED"]);
    assert_eq!(r.code, 4, "{r:?}");
    assert!(!reg.run(&["peek", "b"]).ok().contains("TYPED"));
}

/// `commands` lists the blocks the daemon saw, and their ranges read back.
#[test]
fn commands_lists_the_blocks_with_codes_and_ranges() {
    let reg = Reg::new();
    let home = tempfile::tempdir().unwrap();
    start(&reg, home.path(), "z", &["zsh"], &[]);
    run(&reg, "z", "echo first");
    run(&reg, "z", "sh -c 'exit 3'");
    let v = reg.run(&["--json", "commands", "z"]).json();
    let blocks = v.as_array().unwrap();
    assert_eq!(blocks.len(), 2, "{v}");
    assert_eq!(blocks[0]["exitCode"], 0);
    assert_eq!(blocks[1]["exitCode"], 3);
    assert_eq!(blocks[0]["command"], " echo first");
    assert!(blocks[0]["cwd"].is_string(), "{v}");
    let start = blocks[0]["outputRange"]["start"].as_u64().unwrap();
    let end = blocks[0]["outputRange"]["end"].as_u64().unwrap();
    let r = reg.run(&["--json", "peek", "z", "--since", &start.to_string()]);
    assert!(r.json()["output"].as_str().unwrap().starts_with("first\n"));
    assert_eq!(end - start, "first\r\n".len() as u64);
    let v = reg.run(&["--json", "commands", "z", "--last", "1"]).json();
    assert_eq!(v.as_array().unwrap().len(), 1);
    assert_eq!(v[0]["exitCode"], 3);
}

/// `send --paste --file -`: 64 KiB of lines reach a command whole and in order;
/// `--wait-text` with integration starts at the command's C, so the echo of the
/// typed line (which contains the text) does not end the wait.
#[test]
fn send_delivers_64_kib_whole_and_waits_past_the_echo() {
    let reg = Reg::new();
    let home = tempfile::tempdir().unwrap();
    start(&reg, home.path(), "b", &["bash"], &[]);
    let out = home.path().join("got.txt");
    let cmd = format!("stty -echo; cat > {}; stty echo", out.display());
    let child = spawn_run(&reg, &["b", "--timeout", "60", &cmd]);
    running(&reg, "b", "cat");
    let text: String = (0..1024)
        .map(|i| format!("line {i:05} {}\n", "x".repeat(52)))
        .collect();
    assert_eq!(text.len(), 64 * 1024);
    let r = reg.run_stdin(&["--json", "send", "b", "--paste", "--file", "-"], &text);
    let v = r.json();
    assert_eq!(v["bytes"], 65_536, "{r:?}");
    assert_eq!(v["pasted"], false, "cat did not enable bracketed paste");
    reg.run(&["send", "b", "C-d", "--keys"]).ok();
    let r = Run::from(child.wait_with_output().unwrap());
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), text);
    // The echo " sleep 1; echo FIN''ISHED" never matches FINISHED; the output does.
    let v = reg
        .run(&[
            "--json",
            "send",
            "b",
            "--when-ready",
            "--submit",
            "--wait-text",
            "sleep",
            "--timeout",
            "2",
            "sleep 0.2; echo FIN''ISHED",
        ])
        .code;
    assert_eq!(v, 10, "the echo holds 'sleep'; the output does not");
    let r = reg.run(&[
        "--json",
        "send",
        "b",
        "--when-ready",
        "--submit",
        "--wait-text",
        "FINISHED",
        "--timeout",
        "30",
        "echo FIN''ISHED",
    ]);
    let v = r.json();
    let (s, e) = (
        v["outputRange"]["start"].as_u64().unwrap(),
        v["outputRange"]["end"].as_u64().unwrap(),
    );
    let seen = reg
        .run(&["--json", "peek", "b", "--since", &s.to_string()])
        .json();
    let text = seen["output"].as_str().unwrap();
    assert!(e > s && text.contains("FINISHED"), "{v} {seen}");
}

/// A program that discards what was typed before it is ready (as a shell that is
/// still starting may), without integration: it reads nothing and writes nothing
/// until GO exists or input is pending, then flushes its input, writes a prompt
/// and reads a line.
const DISCARDS_EARLY_INPUT: &str = "
import fcntl, os, struct, sys, termios, time
go = sys.argv[1]
def pending():
    return struct.unpack('i', fcntl.ioctl(0, termios.FIONREAD, b'0000'))[0]
while not os.path.exists(go) and pending() == 0:
    time.sleep(0.02)
termios.tcflush(0, termios.TCIFLUSH)
sys.stdout.write('ready> ')
sys.stdout.flush()
print('got:' + sys.stdin.readline().strip(), flush=True)
time.sleep(600)
";

/// `send --when-ready` without shell integration waits for the program's first
/// output and then quiet (SPEC §4.7), not for an empty input queue, which holds
/// while the program still starts: the text reaches the program's read. Typed at
/// once, it would be discarded with the early input.
#[test]
fn send_when_ready_without_integration_waits_for_output_then_quiet() {
    let reg = Reg::new();
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("GO");
    let py = support::python();
    let (py, go_s) = (py.to_str().unwrap(), go.to_str().unwrap());
    let args = [
        "new",
        "-d",
        "--no-shell-integration",
        "--id",
        "p",
        "--",
        py,
        "-c",
    ];
    let mut args = args.to_vec();
    args.extend([DISCARDS_EARLY_INPUT, go_s]);
    assert_eq!(reg.run(&args).code, 0);
    let args = [
        "--json",
        "send",
        "p",
        "--when-ready",
        "--submit",
        "--wait-text",
        "got:hello",
        "--timeout",
        "60",
        "hello",
    ];
    let mut send = reg
        .cmd()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // GO once the send watches the stream (or, typing at once, has already
    // typed and gone): the program is then ready only through GO.
    let deadline = Instant::now() + Duration::from_secs(30);
    while send.try_wait().unwrap().is_none() {
        let v = reg.run(&["status", "p", "--json"]).json();
        if v["daemon"]["readers"].as_u64() >= Some(1) {
            break;
        }
        assert!(Instant::now() < deadline, "the send never watched: {v}");
        std::thread::yield_now();
    }
    std::fs::write(&go, "").unwrap();
    let r = Run::from(send.wait_with_output().unwrap());
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.json()["bytes"], 5, "{r:?}");
    assert!(reg.wait_for("p", "got:hello").contains("ready> hello"));
}

/// `peek --json`: the screen with the output cursor of its cut and its creation.
#[test]
fn peek_json_names_the_cursor_of_its_screen() {
    let reg = Reg::new();
    let inc = reg.new_session("p", &["sh", "-c", "echo one; sleep 600"]);
    reg.wait_for("p", "one");
    let v = reg.run(&["--json", "peek", "p"]).json();
    assert_eq!(v["outputCursor"], 5, "{v}");
    assert_eq!(v["incarnation"], inc.as_str());
    assert!(v["screen"].as_str().unwrap().starts_with("one"), "{v}");
}

/// `ls --json` of a running session: `foreground` from /proc and `lastOutputAt`
/// from its PTY's mtime (coarse: at most about 8 s behind, SPEC §10).
#[test]
fn ls_json_adds_foreground_and_last_output_from_proc_and_the_pty() {
    let reg = Reg::new();
    let before = latch_registry::now_ms();
    reg.new_session("l", &["sh", "-c", "echo hi; sleep 600"]);
    reg.wait_for("l", "hi");
    let v = reg.run(&["--json", "ls"]).json();
    let e = &v[0];
    assert_eq!(e["foreground"]["name"], "sh", "{e}");
    let at = e["lastOutputAt"]
        .as_u64()
        .expect("a running session's PTY mtime");
    assert!(at + 9_000 >= before, "{at} vs {before}");
}

/// A terminal event names the output cursor up to which output was applied when
/// it was found (SPEC §9.9).
#[test]
fn terminal_events_carry_the_output_cursor() {
    let reg = Reg::new();
    reg.new_session("e", &["sh", "-c", "printf 'ab\\007'; sleep 600"]);
    let r = reg.run(&["events", "e", "--wait", "bell", "--json", "--timeout", "20"]);
    let v = r.json();
    assert_eq!(v["outputCursor"], 3, "{r:?}");
    assert!(v["incarnation"].as_str().unwrap().starts_with("v1."));
}
