//! The integration scripts (SPEC §4.6) driven in real bash, zsh and fish on a real
//! terminal (`script` gives each its own PTY), their output read by latch's own
//! tracker. Each test fails if its script's hook is removed. A shell that is not
//! installed fails the test, naming it: `.ci/run` installs zsh and fish.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use latch_registry::shell::{install, launch};
use latch_screen::{Mark, MarkKind, ShellState, ShellTracker};

const DEADLINE: Duration = Duration::from_secs(20);

struct Shell {
    child: Child,
    stdin: ChildStdin,
    out: Receiver<Vec<u8>>,
    tracker: ShellTracker,
    marks: Vec<Mark>,
    raw: Vec<u8>,
}

impl Shell {
    /// Starts `program` (a lone shell, as latch would) with integration, in `home`.
    fn start(root: &Path, home: &Path, program: &str, env: &[(&str, Option<&str>)]) -> Shell {
        assert!(
            Command::new("sh")
                .arg("-c")
                .arg(format!("command -v {program}"))
                .stdout(Stdio::null())
                .status()
                .unwrap()
                .success(),
            "{program} is not installed (.ci/run installs it)"
        );
        install(root).unwrap();
        let lookup = |k: &str| {
            env.iter()
                .find(|(n, _)| *n == k)
                .and_then(|(_, v)| v.map(OsString::from))
        };
        let l = launch(root, &[program.to_owned()], lookup).expect("a shell latch integrates");
        let argv: Vec<String> = l.command.iter().map(|a| sh_quote(a)).collect();
        let mut cmd = Command::new("script");
        cmd.args(["-qfec", &argv.join(" "), "/dev/null"])
            .env_clear()
            .env("HOME", home)
            .env("PATH", std::env::var_os("PATH").unwrap())
            .env("TERM", "xterm-256color")
            .env("HOSTNAME", "testhost")
            .current_dir(home)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        for (k, v) in env {
            if let Some(v) = v {
                cmd.env(k, v);
            }
        }
        for (k, v) in &l.set {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let (tx, out) = channel();
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        Shell {
            child,
            stdin,
            out,
            tracker: ShellTracker::new(),
            marks: Vec::new(),
            raw: Vec::new(),
        }
    }

    /// Reads output until `done` holds for the marks seen so far.
    fn until(&mut self, what: &str, done: impl Fn(&[Mark], &ShellTracker) -> bool) {
        let end = Instant::now() + DEADLINE;
        while !done(&self.marks, &self.tracker) {
            let left = end.saturating_duration_since(Instant::now());
            match self.out.recv_timeout(left) {
                Ok(bytes) => {
                    self.tracker.feed(&bytes, &mut self.marks);
                    self.raw.extend_from_slice(&bytes);
                }
                Err(_) => panic!(
                    "no {what} within {DEADLINE:?}; output: {:?}",
                    String::from_utf8_lossy(&self.raw)
                ),
            }
        }
    }

    fn at_prompt(&mut self) {
        self.until("prompt", |_, t| t.state() == &ShellState::Prompt);
    }

    /// Types `line` at the prompt and waits for its command's end: its exit code
    /// and its output (C's end to D's start), as `run` will read them.
    fn run(&mut self, line: &str) -> (Option<i32>, String, Option<String>) {
        self.at_prompt();
        let from = self.marks.len();
        self.stdin
            .write_all(format!("{line}\r").as_bytes())
            .unwrap();
        self.until("command end", |m, _| {
            m[from..]
                .iter()
                .any(|m| matches!(m.kind, MarkKind::CommandEnd { .. }))
        });
        let ours = &self.marks[from..];
        let c = ours
            .iter()
            .find(|m| matches!(m.kind, MarkKind::CommandStart { .. }))
            .expect("C before D");
        let d = ours
            .iter()
            .find(|m| matches!(m.kind, MarkKind::CommandEnd { .. }))
            .unwrap();
        let MarkKind::CommandEnd { exit } = d.kind else {
            unreachable!()
        };
        let MarkKind::CommandStart { command } = c.kind.clone() else {
            unreachable!()
        };
        // Marks carry output cursors; this shell's output began at cursor 0.
        let at = |cursor: u64| usize::try_from(cursor).unwrap();
        let output = latch_screen::PlainStream::default().strip(&self.raw[at(c.end)..at(d.start)]);
        // As `run` prints it (SPEC §4.6): escape sequences removed. fish switches
        // bracketed paste off and sets the title after its preexec event.
        (exit, output, command)
    }
}

impl Drop for Shell {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Exit codes 0, 1, 7 and 130, a command's own output only (no prompt, no echo),
/// the cwd after `cd`, the user's rc file still read, and typed commands with a
/// leading space kept out of the history.
fn check_shell(program: &str, rc: (&str, &str), history: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(home.join("sub dir")).unwrap();
    let rc_path = home.join(rc.0);
    std::fs::create_dir_all(rc_path.parent().unwrap()).unwrap();
    std::fs::write(&rc_path, rc.1).unwrap();
    let mut sh = Shell::start(&root, &home, program, &[]);
    let (code, out, _) = sh.run("echo users_rc=$LATCH_TEST_RC");
    assert_eq!(
        (code, out.trim_end()),
        (Some(0), "users_rc=yes"),
        "{program}"
    );
    assert_eq!(sh.run("false").0, Some(1), "{program}");
    assert_eq!(sh.run("sh -c 'exit 7'").0, Some(7), "{program}");
    assert_eq!(sh.run("sh -c 'kill -INT $$'").0, Some(130), "{program}");
    let (code, out, _) = sh.run("printf 'no newline'");
    assert_eq!((code, out.as_str()), (Some(0), "no newline"), "{program}");
    sh.run("cd 'sub dir'");
    sh.at_prompt();
    let cwd = home.join("sub dir");
    assert_eq!(sh.tracker.cwd(), Some(cwd.to_str().unwrap()), "{program}");
    // A command typed with a leading space stays out of the history.
    sh.run(" echo latch_secret_typed");
    let (_, out, _) = sh.run(history);
    assert!(!out.contains("latch_secret_typed"), "{program}: {out}");
}

#[test]
fn bash_marks_prompts_commands_exit_codes_and_its_cwd() {
    check_shell(
        "bash",
        (".bashrc", "export LATCH_TEST_RC=yes\nHISTFILE=/dev/null\n"),
        "history",
    );
}

#[test]
fn zsh_marks_prompts_commands_exit_codes_and_its_cwd() {
    check_shell(
        "zsh",
        (".zshrc", "export LATCH_TEST_RC=yes\nHISTSIZE=100\n"),
        "fc -ln 1",
    );
}

#[test]
fn fish_marks_prompts_commands_exit_codes_and_its_cwd() {
    check_shell(
        "fish",
        (".config/fish/config.fish", "set -gx LATCH_TEST_RC yes\n"),
        "history",
    );
}

/// bash with PROMPT_COMMAND as an array (bash 5.1+), set by the user's rc: the
/// user's hook still runs, and latch's runs first (it sees the command's status).
#[test]
fn bash_keeps_a_users_prompt_command_array() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        home.join(".bashrc"),
        "mine() { LATCH_MINE=$((LATCH_MINE+1)); return 3; }\nPROMPT_COMMAND=(mine)\n",
    )
    .unwrap();
    let mut sh = Shell::start(&root, &home, "bash", &[]);
    assert_eq!(sh.run("sh -c 'exit 5'").0, Some(5));
    let (code, out, _) = sh.run("echo mine=$LATCH_MINE");
    assert_eq!(code, Some(0));
    assert!(out.trim_end().starts_with("mine="), "{out}");
    assert_ne!(out.trim_end(), "mine=", "the user's hook ran");
}

/// zsh: the user's ZDOTDIR comes back as it was, set or unset, and the user's
/// .zshrc is read from it; zsh says the command line it runs.
#[test]
fn zsh_restores_the_users_zdotdir() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let home = tmp.path().join("home");
    let zdot = tmp.path().join("zdot");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&zdot).unwrap();
    std::fs::write(zdot.join(".zshrc"), "export LATCH_TEST_RC=from_zdotdir\n").unwrap();
    std::fs::write(home.join(".zshrc"), "export LATCH_TEST_RC=from_home\n").unwrap();
    let z = zdot.to_str().unwrap();
    let mut sh = Shell::start(&root, &home, "zsh", &[("ZDOTDIR", Some(z))]);
    let (_, out, command) = sh.run("echo ${ZDOTDIR-unset} $LATCH_TEST_RC");
    assert_eq!(out.trim_end(), format!("{z} from_zdotdir"));
    assert_eq!(
        command.as_deref(),
        Some("echo ${ZDOTDIR-unset} $LATCH_TEST_RC")
    );
    drop(sh);
    let mut sh = Shell::start(&root, &home, "zsh", &[]);
    let (_, out, _) = sh.run("echo ${ZDOTDIR-unset} $LATCH_TEST_RC");
    assert_eq!(out.trim_end(), "unset from_home");
}
