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

    fn signal_cmd(&self, channel: &str) -> String {
        format!("tmux -S {} wait-for -S {channel}", self.sock.display())
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

/// Asks DSR 6, DA1, DA2, XTVERSION and OSC 11, one after the other, and prints
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
fi
stty icanon
echo "$label-asked"
IFS= read -r line
printf '%s-line:%q\n' "$label" "$line"
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
