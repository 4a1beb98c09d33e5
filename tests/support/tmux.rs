//! A private tmux server for the tests that drive `latch attach` through a real
//! terminal: one server per test (tests run in parallel), killed on drop.

use std::path::Path;
use std::process::Command;

pub struct Tmux {
    pub socket: String,
}

impl Tmux {
    /// A server of its own for the test `name`; tmux must be installed (.ci/run
    /// installs it), so its absence fails the test rather than skipping it.
    pub fn new(name: &str) -> Self {
        assert!(
            Command::new("tmux").arg("-V").output().is_ok(),
            "tmux is required for this test (.ci/run installs it)"
        );
        Self {
            socket: format!("latch-test-{}-{name}", std::process::id()),
        }
    }

    pub fn run(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .env_remove("TMUX")
            .output()
            .unwrap()
    }

    /// Starts session `t`, `cols`×`rows`, whose pane runs `command` (a shell
    /// command line), then, however it ended, prints `LATCH-EXIT:<its status>`,
    /// writes the terminal's `stty -a` to `stty` (if given) and signals `ended`
    /// ([`Tmux::wait_for`]); the pane then stays open for [`Tmux::capture`].
    pub fn start(&self, command: &str, cols: u16, rows: u16, stty: Option<&Path>) {
        let stty = stty
            .map(|p| format!("stty -a > {}; ", p.display()))
            .unwrap_or_default();
        let script = format!(
            "{command}; echo LATCH-EXIT:$?; {stty}tmux -L {sock} wait-for -S ended; sleep 600",
            sock = self.socket
        );
        let (cols, rows) = (cols.to_string(), rows.to_string());
        let out = self.run(&[
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            &cols,
            "-y",
            &rows,
            "sh",
            "-c",
            &script,
        ]);
        assert!(out.status.success(), "{out:?}");
    }

    /// Blocks until the pane signals `channel` (tmux wait-for), at most 20 s.
    pub fn wait_for(&self, channel: &str) -> bool {
        Command::new("timeout")
            .args(["20", "tmux", "-L", &self.socket, "wait-for", channel])
            .status()
            .unwrap()
            .success()
    }

    /// The visible text of the session's pane.
    pub fn capture(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", "t"]).stdout).into_owned()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}
