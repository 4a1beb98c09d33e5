//! Terminal fidelity, end to end: query answers while detached, terminal modes on
//! attach and detach (read from tmux's own flags), the final screen of an exited
//! program, scrollback into the attached terminal, terminal events, `peek
//! --follow`, line-based `--ansi`, and plain text compared with tmux's.
//!
//! Every wait is on an event: `peek --wait`, `events --wait`, a child's output or
//! exit, or a tmux `wait-for` channel (signalled by the pane's command, or by an
//! `alert-bell` hook when a BEL reaches the pane).

mod support;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use support::{latch_bin, Reg};

/// A private tmux server with one pane running `cmd`; killed on drop.
struct Tmux {
    _dir: tempfile::TempDir,
    sock: PathBuf,
}

impl Tmux {
    fn start(rows: u16, cols: u16, cmd: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("lt")
            .tempdir_in("/tmp")
            .unwrap();
        let sock = dir.path().join("t.sock");
        let t = Self { _dir: dir, sock };
        let hook = format!("run-shell 'tmux -S {} wait-for -S bell'", t.sock.display());
        t.ok(&[
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-x",
            &cols.to_string(),
            "-y",
            &rows.to_string(),
            cmd,
            ";",
            "set",
            "-g",
            "bell-action",
            "any",
            ";",
            "set-hook",
            "-g",
            "alert-bell",
            &hook,
        ]);
        t
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-S")
            .arg(&self.sock)
            .args(args)
            .env_remove("TMUX")
            .output()
            .unwrap();
        assert!(out.status.success(), "tmux {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Blocks until `channel` is signalled (a signal sent earlier counts).
    fn wait(&self, channel: &str) {
        let out = Command::new("timeout")
            .arg("20")
            .arg("tmux")
            .arg("-S")
            .arg(&self.sock)
            .args(["wait-for", channel])
            .output()
            .unwrap();
        assert!(out.status.success(), "tmux wait-for {channel}: {out:?}");
    }

    fn signal(&self, channel: &str) {
        self.ok(&["wait-for", "-S", channel]);
    }

    /// `alternate_on mouse_standard_flag mouse_any_flag cursor_flag keypad_flag`.
    fn flags(&self) -> String {
        self.ok(&[
            "display",
            "-p",
            "-t",
            "0",
            "#{alternate_on} #{mouse_standard_flag} #{mouse_any_flag} #{cursor_flag} #{keypad_flag}",
        ])
        .trim()
        .to_owned()
    }

    fn capture(&self, extra: &[&str]) -> String {
        let mut args = vec!["capture-pane", "-p", "-t", "0"];
        args.extend_from_slice(extra);
        self.ok(&args)
    }

    /// A shell command line that runs latch on `reg` from inside the pane.
    fn latch(reg: &Reg, args: &str) -> String {
        format!("{} --root {} {args}", latch_bin(), reg.root.display())
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .arg("-S")
            .arg(&self.sock)
            .arg("kill-server")
            .output();
    }
}

fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

// ----- 1. queries -----

/// Asks DSR 6, DA1, DA2, XTVERSION, OSC 11 and DECRQM, one after the other, and prints
/// each answer (escaped) after `LABEL:`; then echoes one typed line, which shows
/// whether any answer came twice.
const ASK: &str = r#"
ask() { printf "$2"; IFS= read -rs -d "$3" a; printf '%s:%q\n' "$1" "$a"; }
stty -echo -icanon
label=$1
ask "$label-cpr" '\e[6n' R
ask "$label-da1" '\e[c' c
if [ "$label" = detached ]; then
  ask "$label-da2" '\e[>c' c
  ask "$label-xtversion" '\e[>q' '\'
  ask "$label-osc11" '\e]11;?\a' $'\a'
  ask "$label-decrqm" '\e[?2004h\e[?2004$p' y
fi
stty icanon
echo "$label-asked"
IFS= read -r line
printf '%s-line:%q\n' "$label" "$line"
[ "$label" = attached ] && exec sleep 1000
"#;

#[test]
fn queries_are_answered_while_detached_and_once_while_attached() {
    let reg = Reg::new();
    // Then, once a client's attach resizes the terminal (SIGWINCH), asks again.
    let script = format!(
        "{ASK}\ntrap 'w=1' WINCH\nuntil [ -n \"$w\" ]; do sleep 1000 & wait $!; kill $! 2>/dev/null; done\n\
         exec bash -c {} ask attached",
        sh_quote(ASK)
    );
    reg.new_session("q", &["bash", "-c", &script, "ask", "detached"]);
    let screen = reg.wait_for("q", "detached-asked");
    for want in [
        r"detached-cpr:$'\E[1;1'",
        r"detached-da1:$'\E[?6'",
        r"detached-da2:$'\E[>0;0;0'",
        r"detached-xtversion:$'\EP>|latch ",
        r"detached-osc11:$'\E]11;rgb:0000/0000/0000'",
        r"detached-decrqm:$'\E[?2004;1$'",
    ] {
        assert!(screen.contains(want), "{want:?} in {screen}");
    }
    reg.run(&["send", "q", "one", "--keys", "Enter"]).ok();
    reg.wait_for("q", "detached-line:one");

    // A read-write client in tmux: now tmux answers, and the daemon must not.
    let tmux = Tmux::start(30, 100, &Tmux::latch(&reg, "attach q"));
    let screen = reg.wait_for("q", "attached-asked");
    assert!(
        screen.contains(r"attached-da1:$'\E[?1;2'"),
        "tmux's own DA1 answer: {screen}"
    );
    reg.run(&["send", "q", "two", "--keys", "Enter"]).ok();
    let screen = reg.wait_for("q", "attached-line:");
    assert!(
        screen.contains("attached-line:two"),
        "exactly one answer per query (a second would precede the line): {screen}"
    );
    drop(tmux);
}

// ----- 2. modes -----

#[test]
fn attach_replays_the_programs_modes_and_detach_undoes_them() {
    let reg = Reg::new();
    // Sets the alternate screen, mouse, application cursor and keypad, hides the
    // cursor and sets a colour; rings the bell on every SIGWINCH (an attach that
    // resizes the terminal), so the test knows when the attach has been drawn.
    let prog = r#"trap 'printf "\a"' WINCH
printf '\e[?1049h\e[?1000h\e[?1003h\e[?1h\e=\e[?25l\e[44;97mVIM'
while :; do sleep 1000 & wait $!; kill $! 2>/dev/null; done"#;
    reg.new_session("v", &["bash", "-c", prog]);
    reg.wait_for("v", "VIM");
    // The pane waits for `go`, attaches, and rings the bell once latch has exited
    // (in the same output stream, so tmux has drawn everything latch wrote).
    let tmux = Tmux::start(
        30,
        100,
        &format!(
            "tmux wait-for go; {}; printf '\\a'; exec sleep 1000",
            Tmux::latch(&reg, "attach v")
        ),
    );
    assert_eq!(tmux.flags(), "0 0 0 1 0", "before attaching");
    tmux.signal("go");
    tmux.wait("bell");
    assert_eq!(
        tmux.flags(),
        "1 0 1 0 1",
        "attached: alternate screen, mouse, hidden cursor, keypad"
    );
    assert!(tmux.capture(&[]).contains("VIM"));

    tmux.ok(&["send-keys", "-t", "0", "C-\\"]);
    tmux.wait("bell");
    assert_eq!(tmux.flags(), "0 0 0 1 0", "after detaching");
    let shown = tmux.capture(&["-e"]);
    assert!(
        !shown.contains("VIM"),
        "the program's screen is gone: {shown}"
    );
    let line = shown
        .lines()
        .find(|l| l.contains("[latch: detached from v]"))
        .unwrap_or_else(|| panic!("detach message on the user's screen: {shown}"));
    assert!(
        !line.contains("44"),
        "SGR reset before the message: {line:?}"
    );
    // The program kept its modes: attaching again replays them.
    drop(tmux);
    let tmux = Tmux::start(
        30,
        100,
        &format!("{}; exec sleep 1000", Tmux::latch(&reg, "attach v")),
    );
    let screen = reg.wait_for("v", "VIM");
    assert!(screen.contains("VIM"));
    tmux.ok(&["resize-window", "-t", "0", "-x", "90", "-y", "28"]);
    tmux.wait("bell");
    assert_eq!(tmux.flags(), "1 0 1 0 1", "attached again");
}

// ----- 3. the final screen -----

#[test]
fn an_exited_program_leaves_its_screen_and_its_code() {
    let reg = Reg::new();
    reg.new_session(
        "x",
        &[
            "sh",
            "-c",
            "printf '\\033[31mred\\033[m\\n'; echo hi; exit 5",
        ],
    );
    let r = reg.run(&["events", "x", "--wait", "session_exit", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(reg.root.join("x.screen").exists());

    let r = reg.run(&["peek", "x"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.stdout, "red\nhi\n");
    assert!(r.stderr.contains("[x exited with code 5]"), "{r:?}");
    let r = reg.run(&["peek", "x", "--ansi", "--full"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("\x1b[0;31mred\x1b[m\nhi"), "{r:?}");
    let r = reg.run(&["peek", "x", "--wait", "hi"]);
    assert_eq!(r.code, 0, "{r:?}");
    let r = reg.run(&["peek", "x", "--wait", "never"]);
    assert_eq!(r.code, 7, "{r:?}");

    // attach (and peek --follow) show it and exit with the program's code.
    let r = reg.run(&["attach", "x"]);
    assert_eq!(r.code, 5, "{r:?}");
    assert!(r.stdout.contains("hi"), "{r:?}");
    let r = reg.run(&["peek", "-f", "x", "--plain"]);
    assert_eq!(r.code, 5, "{r:?}");
    assert_eq!(r.stdout, "red\nhi\n");

    // status is unchanged: the exit comes from the record.
    let st = reg.run(&["status", "x", "--json"]).json();
    assert_eq!(st["exitCode"], 5);

    // Removed with the record; a new creation of the id never shows it.
    reg.run(&["rm", "x"]).ok();
    assert!(!reg.root.join("x.screen").exists());
}

#[test]
fn new_attached_shows_the_output_and_exits_with_the_code() {
    let reg = Reg::new();
    let tmux = Tmux::start(
        24,
        80,
        &format!(
            "{}; echo \"rc=$?\"; printf '\\a'; exec sleep 1000",
            Tmux::latch(&reg, "new -- sh -c 'echo hi; exit 5'")
        ),
    );
    tmux.wait("bell");
    let shown = tmux.capture(&[]);
    assert!(shown.contains("hi"), "{shown}");
    assert!(shown.contains("rc=5"), "{shown}");
    let killed = Tmux::start(
        24,
        80,
        &format!(
            "{}; echo \"rc=$?\"; printf '\\a'; exec sleep 1000",
            Tmux::latch(&reg, "new -- sh -c 'echo bye; kill -TERM $$'")
        ),
    );
    killed.wait("bell");
    let shown = killed.capture(&[]);
    assert!(shown.contains("bye") && shown.contains("rc=143"), "{shown}");
}

// ----- 4. scrollback into the attached terminal -----

#[test]
fn attach_history_writes_the_scrollback_first() {
    let reg = Reg::new();
    let prog = r#"trap 'printf "\a"' WINCH
for i in $(seq 1 100); do echo "line $i"; done
while :; do sleep 1000 & wait $!; kill $! 2>/dev/null; done"#;
    reg.new_session("h", &["bash", "-c", prog]);
    reg.wait_for("h", "line 100");
    let tmux = Tmux::start(
        30,
        100,
        &format!(
            "{}; exec sleep 1000",
            Tmux::latch(&reg, "attach h --history 50")
        ),
    );
    tmux.wait("bell");
    // tmux's own scrollback now holds the session's, up to the 50 lines asked for.
    let all = tmux.capture(&["-S", "-200"]);
    let lines: Vec<&str> = all.lines().filter(|l| l.starts_with("line ")).collect();
    assert!(lines.contains(&"line 30"), "{all}");
    assert!(!lines.contains(&"line 20"), "bounded by --history: {all}");
    assert!(lines.contains(&"line 100"));

    // defaults.json sets it for every attach.
    std::fs::write(reg.root.join("defaults.json"), r#"{"attachHistory": 10}"#).unwrap();
    let tmux = Tmux::start(
        28,
        90,
        &format!("{}; exec sleep 1000", Tmux::latch(&reg, "attach h")),
    );
    tmux.wait("bell");
    let all = tmux.capture(&["-S", "-200"]);
    assert!(all.contains("line 70"), "{all}");
    assert!(!all.contains("line 60\n"), "{all}");
}

// ----- 5. terminal events -----

#[test]
fn bells_titles_notifications_and_cursor_are_events() {
    let reg = Reg::new();
    let prog = r#"printf '\a\e]2;building\a\e]9;done\a\e]777;notify;CI;green\e\\\e[?25l'
for i in $(seq 1 500); do printf '\a'; done
echo rang; exec sleep 1000"#;
    reg.new_session("e", &["bash", "-c", prog]);
    let r = reg.run(&["events", "e", "--wait", "bell", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let bell = r.json();
    assert_eq!(bell["type"], "bell");
    assert_eq!(bell["id"], "e");
    assert!(bell["incarnation"].as_str().unwrap().starts_with("v1."));
    for t in ["title_change", "notification", "cursor_visible"] {
        let r = reg.run(&["events", "e", "--wait", t, "--json"]);
        assert_eq!(r.code, 0, "{t}: {r:?}");
    }
    reg.wait_for("e", "rang");
    let all = reg.run(&["events", "e", "--json"]).ok().to_owned();
    let events: Vec<serde_json::Value> = all
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let of = |t: &str| {
        events
            .iter()
            .filter(|e| e["type"] == t)
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(of("title_change")[0]["title"], "building");
    let notes = of("notification");
    assert_eq!(notes[0]["source"], "osc9");
    assert_eq!(notes[0]["body"], "done");
    assert_eq!(notes[1]["source"], "osc777");
    assert_eq!(notes[1]["title"], "CI");
    assert_eq!(notes[1]["body"], "green");
    assert_eq!(of("cursor_visible")[0]["visible"], false);
    // 501 bells: rate-limited (a burst of 10), never one line each.
    assert!(of("bell").len() <= 10, "{all}");
}

// ----- 6. follow and line-based ANSI -----

#[test]
fn peek_follow_streams_until_the_exit_code() {
    let reg = Reg::new();
    reg.new_session(
        "f",
        &[
            "bash",
            "-c",
            "printf '\\e[1mstart\\e[m\\n'; read x; printf '\\e[32mgot %s\\e[m\\n' \"$x\"; exit 3",
        ],
    );
    reg.wait_for("f", "start");
    for plain in [true, false] {
        let mut args = vec!["peek", "--follow", "f"];
        if !plain {
            args.push("--ansi");
        }
        let mut child = reg
            .cmd()
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut first = String::new();
        out.read_line(&mut first).unwrap();
        if plain {
            assert_eq!(first, "start\n");
        } else {
            assert_eq!(first, "\x1b[m\x1b[0;1mstart\x1b[m\n");
            break;
        }
        reg.run(&["send", "f", "ok", "--keys", "Enter"]).ok();
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
        let st = child.wait_with_output().unwrap();
        assert_eq!(st.status.code(), Some(3));
        assert!(rest.contains("got ok\n"), "{rest:?}");
        assert!(!rest.contains('\x1b'), "escapes stripped: {rest:?}");
        assert!(String::from_utf8_lossy(&st.stderr).contains("[f exited with code 3]"));
    }
}

#[test]
fn peek_ansi_is_line_based() {
    let reg = Reg::new();
    reg.new_session(
        "a",
        &[
            "sh",
            "-c",
            "printf '\\033[2J\\033[5;3H\\033[31mred\\033[m\\033[1;1Htop\\n'; exec sleep 1000",
        ],
    );
    reg.wait_for("a", "red");
    let out = reg.run(&["peek", "a", "--ansi"]).ok().to_owned();
    assert_eq!(out, "\x1b[mtop\n\n\n\n  \x1b[0;31mred\x1b[m\x1b[m\n");
    for bad in ["\x1b[H", "\x1b[J", "\x1b[?25"] {
        assert!(!out.contains(bad), "{bad:?} in {out:?}");
    }
}

// ----- 7. plain text against tmux -----

/// Byte streams that exercise wrapping, CR, tabs, wide and combining characters,
/// cursor moves, erases, scroll regions, insert/delete line, the alternate screen
/// and save/restore.
const STREAMS: &[&str] = &[
    "a\\tb\\n\\tx\\ty\\n12345678\\tz\\n",
    "hello world\\rHELLO\\n",
    "wide: \\344\\275\\240\\345\\245\\275 e\\314\\201 end\\n",
    "\\033[3;5Hmoved\\033[1;1Hhome\\033[10;70Hright\\n",
    "0123456789\\033[1;5H\\033[K\\n\\033[2Jcleared\\n",
    "top\\n\\033[2;5r\\033[5;1Hl1\\nl2\\nl3\\nl4\\nl5\\n\\033[r\\033[20;1Hbottom",
    "one\\ntwo\\nthree\\n\\033[2;1H\\033[Linserted\\n\\033[M",
    "main\\n\\033[?1049halt screen\\033[?1049lback\\n",
    "\\0337\\033[10;10Hsaved\\0338restored\\n",
];

#[test]
fn plain_text_matches_tmux() {
    let reg = Reg::new();
    let dir = tempfile::tempdir().unwrap();
    let long: String = "x".repeat(100) + "\\tafter wrap\\n";
    let streams: Vec<String> = STREAMS
        .iter()
        .map(|s| (*s).to_owned())
        .chain([long])
        .collect();
    for (i, stream) in streams.iter().enumerate() {
        let file = dir.path().join(format!("s{i}"));
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!("printf '{}' > {}", stream, file.display()))
            .output()
            .unwrap();
        assert!(out.status.success());
        // Both get the bytes then a BEL, which draws nothing and tells us they
        // are done: latch records it as an event, tmux runs its alert-bell hook.
        let play = format!("cat {}; printf '\\a'; exec sleep 1000", file.display());
        let id = format!("d{i}");
        reg.new_session(&id, &["sh", "-c", &play]);
        let tmux = Tmux::start(24, 80, &play);
        let r = reg.run(&["events", &id, "--wait", "bell"]);
        assert_eq!(r.code, 0, "{r:?}");
        tmux.wait("bell");
        let ours = reg.run(&["peek", &id, "--plain"]).ok().to_owned();
        let theirs = tmux.capture(&["-J"]);
        let norm = |s: &str| {
            let lines: Vec<&str> = s.lines().map(str::trim_end).collect();
            lines.join("\n").trim_end_matches('\n').to_owned()
        };
        assert_eq!(norm(&ours), norm(&theirs), "stream {stream:?}");
        assert!(!ours.contains('\t'), "{ours:?}");
    }
}

#[test]
fn attach_keeps_what_the_terminal_showed_in_its_scrollback() {
    let reg = Reg::new();
    let prog = r#"trap 'printf "\a"' WINCH
echo session-text
while :; do sleep 1000 & wait $!; kill $! 2>/dev/null; done"#;
    reg.new_session("k", &["bash", "-c", prog]);
    reg.wait_for("k", "session-text");
    let tmux = Tmux::start(
        30,
        100,
        &format!(
            "echo users-own-text; tmux wait-for go; {}; exec sleep 1000",
            Tmux::latch(&reg, "attach k")
        ),
    );
    // As most terminals: clearing the screen does not save it (tmux's default does).
    tmux.ok(&["set", "-wg", "scroll-on-clear", "off"]);
    tmux.signal("go");
    tmux.wait("bell");
    let screen = tmux.capture(&[]);
    assert!(screen.contains("session-text") && !screen.contains("users-own-text"));
    let all = tmux.capture(&["-S", "-100"]);
    assert!(
        all.contains("users-own-text"),
        "kept in tmux's scrollback: {all}"
    );
}
