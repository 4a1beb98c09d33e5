//! Shared harness for end-to-end tests: a temporary registry root, the real `latch`
//! binary, and cleanup of every daemon started in the root on drop.

#![allow(dead_code)]

pub mod tmux;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

/// The binary under test.
pub fn latch_bin() -> &'static str {
    env!("CARGO_BIN_EXE_latch")
}

/// A temporary registry. Dropping it SIGKILLs every daemon and program recorded in it
/// (after proving their identity) and deletes the directory.
pub struct Reg {
    _tmp: tempfile::TempDir,
    pub root: PathBuf,
}

/// A finished `latch` invocation.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Run {
    fn from(o: Output) -> Self {
        Self {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

impl Run {
    /// Asserts success and returns stdout.
    #[track_caller]
    pub fn ok(&self) -> &str {
        assert_eq!(self.code, 0, "latch failed: {self:?}");
        &self.stdout
    }

    /// Parses stdout as JSON.
    #[track_caller]
    pub fn json(&self) -> Value {
        serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:?}"))
    }
}

impl Reg {
    pub fn new() -> Self {
        let tmp = tempfile::Builder::new()
            .prefix("lt")
            .tempdir_in("/tmp")
            .unwrap();
        let root = tmp.path().join("r");
        Self { _tmp: tmp, root }
    }

    pub fn cmd(&self) -> Command {
        let mut c = Command::new(latch_bin());
        c.arg("--root").arg(&self.root);
        c.env_remove("LATCH_ROOT");
        c.env("SHELL", "/bin/sh");
        c.stdin(Stdio::null());
        c
    }

    /// Runs `latch --root ROOT ARGS...`.
    pub fn run(&self, args: &[&str]) -> Run {
        Run::from(self.cmd().args(args).output().unwrap())
    }

    /// Runs with `stdin` as standard input.
    pub fn run_stdin(&self, args: &[&str], stdin: &str) -> Run {
        use std::io::Write;
        let mut child = self
            .cmd()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Written from a thread, so a child that answers before reading everything
        // cannot deadlock against us; and a child that exits (or refuses) before
        // reading is an outcome to assert on, not a test failure: its broken pipe
        // is ignored.
        let mut input = child.stdin.take().unwrap();
        let bytes = stdin.as_bytes().to_vec();
        let writer = std::thread::spawn(move || match input.write_all(&bytes) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
            other => other.unwrap(),
        });
        let out = child.wait_with_output().unwrap();
        writer.join().unwrap();
        Run::from(out)
    }

    /// `latch new -d --id ID --json -- CMD...`; returns the incarnation.
    #[track_caller]
    pub fn new_session(&self, id: &str, cmd: &[&str]) -> String {
        let mut args = vec!["new", "-d", "--json", "--id", id, "--"];
        args.extend_from_slice(cmd);
        let r = self.run(&args);
        let v = r.json();
        assert_eq!(r.code, 0, "{r:?}");
        v["incarnation"].as_str().unwrap().to_owned()
    }

    /// Waits (event-driven, via `peek --wait`) until the screen shows `text`.
    #[track_caller]
    pub fn wait_for(&self, reference: &str, text: &str) -> String {
        self.wait_for_within(reference, text, 10)
    }

    /// [`Reg::wait_for`] with a longer bound, for waits behind a flood of output
    /// (a loaded machine may take long; the wait ends at the event, not the bound).
    #[track_caller]
    pub fn wait_for_within(&self, reference: &str, text: &str, secs: u32) -> String {
        let secs = secs.to_string();
        let r = self.run(&["peek", reference, "--wait", text, "--timeout", &secs]);
        assert_eq!(r.code, 0, "waiting for {text:?}: {r:?}");
        r.stdout
    }

    /// The record file as JSON.
    pub fn record(&self, id: &str) -> Value {
        let bytes = std::fs::read(self.root.join(format!("{id}.json"))).unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    /// Waits for the daemon of `id` to record an exit, by following events.
    #[track_caller]
    pub fn wait_exit(&self, id: &str) -> Value {
        let r = self.run(&[
            "events",
            id,
            "--wait",
            "session_exit",
            "--json",
            "--timeout",
            "10",
        ]);
        assert_eq!(r.code, 0, "waiting for exit of {id}: {r:?}");
        r.json()
    }
}

impl Drop for Reg {
    fn drop(&mut self) {
        kill_all(&self.root);
    }
}

/// Kills every proven daemon and program recorded under `root`.
pub fn kill_all(root: &Path) {
    let Ok(dir) = std::fs::read_dir(root) else {
        return;
    };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".json") {
            continue;
        }
        let Ok(bytes) = std::fs::read(e.path()) else {
            continue;
        };
        let Ok(rec) = serde_json::from_slice::<latch_registry::Record>(&bytes) else {
            continue;
        };
        for who in [&rec.child, &rec.daemon] {
            let _ = latch_registry::proc::signal_proven(who, libc::SIGKILL);
        }
    }
}

/// Waits until process `pid` has exited (a pidfd becomes readable when it does),
/// at most `limit`. Returns false on timeout. A process already gone counts as exited.
pub fn wait_process_exit(pid: u32, limit: Duration) -> bool {
    match latch_registry::PidFd::open(pid) {
        Ok(fd) => fd.wait_exit(limit),
        Err(_) => true,
    }
}

/// Whether `pid` is alive (not gone, not a zombie).
pub fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists() && !latch_registry::proc::is_zombie(pid)
}

/// Small deterministic PRNG (xorshift64) for the race tests' start offsets; each
/// test seeds it from the clock and prints the seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn micros(&mut self, max: u64) -> Duration {
        Duration::from_micros(self.next() % max)
    }
}

/// A library client on `reg`'s root, starting daemons with the binary under test.
pub fn client(reg: &Reg) -> latch_client::Client {
    latch_client::Client::open(&reg.root, latch_bin().into()).unwrap()
}

/// `ID@INCARNATION` from its parts.
pub fn sref(id: &str, inc: &str) -> latch_wire::SessionRef {
    latch_wire::SessionRef::new(
        latch_wire::SessionId::new(id).unwrap(),
        latch_wire::Incarnation::parse(inc).unwrap(),
    )
}

/// The test interpreter for the real Python clients (the MCP SDK, asciinema,
/// html5lib): LATCH_TEST_PYTHON (scripts/test.sh sets it), else the venv
/// scripts/test-env.sh makes. Missing is a failure naming the script, never a skip.
pub fn python() -> std::path::PathBuf {
    let p = std::env::var_os("LATCH_TEST_PYTHON").map_or_else(
        || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-venv/bin/python"),
        std::path::PathBuf::from,
    );
    assert!(
        p.exists(),
        "no test Python at {}: run `bash scripts/test-env.sh` first (scripts/test.sh does; \
         it makes the venv with mcp, asciinema and html5lib)",
        p.display()
    );
    p
}
