//! End to end over OpenSSH (SPEC.md §12): a real sshd on 127.0.0.1 with keys and
//! configuration of its own in a temp directory; latch finds it through
//! LATCH_SSH_CONFIG and runs the same binary on the "remote" side
//! (LATCH_REMOTE_BIN), whose registry root each host alias sets (SetEnv
//! LATCH_ROOT). The machine's own ssh configuration is never read.

mod support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use support::tmux::Tmux;
use support::{latch_bin, Reg, Run};

/// An sshd of the test's own, and the ssh_config naming its host aliases: `alpha`
/// and `beta` (two registries on this machine), `down` (nothing listens).
struct Sshd {
    dir: tempfile::TempDir,
    child: Child,
    alpha: Reg,
    beta: Reg,
}

fn run_ok(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?}: {out:?}");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Sshd {
    /// Starts sshd and waits until it listens; fails (never skips) without one.
    fn start() -> Self {
        let sshd = ["/usr/sbin/sshd", "/usr/bin/sshd", "/usr/local/sbin/sshd"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect("sshd is required for these tests (.ci/run installs openssh-server)");
        let dir = tempfile::Builder::new()
            .prefix("lssh")
            .tempdir_in("/tmp")
            .unwrap();
        let d = dir.path();
        for key in ["host_key", "user_key"] {
            run_ok(
                Command::new("ssh-keygen")
                    .args(["-q", "-t", "ed25519", "-N", ""])
                    .arg("-f")
                    .arg(d.join(key)),
            );
        }
        std::fs::copy(d.join("user_key.pub"), d.join("authorized_keys")).unwrap();
        // sshd run as root needs its privilege separation directory (the
        // package's runtime directory; systemd would create it).
        if nix::unistd::geteuid().is_root() {
            std::fs::create_dir_all("/run/sshd").unwrap();
        }
        let user = nix::unistd::User::from_uid(nix::unistd::geteuid())
            .unwrap()
            .unwrap()
            .name;
        let (alpha, beta) = (Reg::new(), Reg::new());
        for attempt in 0..5 {
            let port = free_port();
            let down = free_port();
            let cfg = format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\n\
                 AuthorizedKeysFile {d}/authorized_keys\nPidFile {d}/sshd.pid\n\
                 StrictModes no\nUsePAM no\nPasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\nPubkeyAuthentication yes\n\
                 PermitRootLogin prohibit-password\nAcceptEnv LATCH_ROOT\n",
                d = d.display()
            );
            std::fs::write(d.join("sshd_config"), cfg).unwrap();
            let known = format!(
                "[127.0.0.1]:{port} {}",
                std::fs::read_to_string(d.join("host_key.pub")).unwrap()
            );
            std::fs::write(d.join("known_hosts"), known).unwrap();
            let host = |name: &str, port: u16, root: &Path| {
                format!(
                    "Host {name}\n  HostName 127.0.0.1\n  Port {port}\n  User {user}\n  \
                     IdentityFile {d}/user_key\n  IdentitiesOnly yes\n  IdentityAgent none\n  \
                     UserKnownHostsFile {d}/known_hosts\n  StrictHostKeyChecking yes\n  \
                     BatchMode yes\n  ConnectTimeout 10\n  SetEnv LATCH_ROOT={root}\n",
                    d = d.display(),
                    root = root.display()
                )
            };
            let ssh_config = format!(
                "{}{}{}",
                host("alpha", port, &alpha.root),
                host("beta", port, &beta.root),
                host("down", down, &beta.root)
            );
            std::fs::write(d.join("ssh_config"), ssh_config).unwrap();
            let mut child = Command::new(sshd)
                .args(["-D", "-e", "-f"])
                .arg(d.join("sshd_config"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
            let mut log = String::new();
            let listening = loop {
                match lines.next() {
                    Some(Ok(l)) => {
                        log.push_str(&l);
                        log.push('\n');
                        if l.contains("Server listening") {
                            break true;
                        }
                    }
                    _ => break false,
                }
            };
            if listening {
                // Keep draining its log so sshd never blocks on stderr.
                std::thread::spawn(move || for _ in lines.by_ref() {});
                return Self {
                    dir,
                    child,
                    alpha,
                    beta,
                };
            }
            let _ = child.kill();
            let _ = child.wait();
            assert!(attempt < 4, "sshd did not start: {log}");
        }
        unreachable!()
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("ssh_config")
    }

    /// `latch ARGS` against the test's ssh, with a local root of its own.
    fn cmd(&self) -> Command {
        let mut c = Command::new(latch_bin());
        c.env("LATCH_SSH_CONFIG", self.config())
            .env("LATCH_REMOTE_BIN", latch_bin())
            .env("LATCH_ROOT", self.dir.path().join("local"))
            .env_remove("LATCH_HOST")
            .env("SHELL", "/bin/sh")
            .stdin(Stdio::null());
        c
    }

    fn run(&self, args: &[&str]) -> Run {
        self.run_with(args, &[])
    }

    fn run_with(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut c = self.cmd();
        for (k, v) in env {
            c.env(k, v);
        }
        Run::from(c.args(args).output().unwrap())
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn new_ls_peek_send_kill_on_a_remote_host() {
    let s = Sshd::start();
    let r = s.run(&[
        "--host",
        "alpha",
        "new",
        "-d",
        "--id",
        "r1",
        "--json",
        "--",
        "sh",
        "-c",
        "echo ready; exec cat",
    ]);
    let created = r.json();
    assert_eq!(r.code, 0, "{r:?}");
    let inc = created["incarnation"].as_str().unwrap().to_owned();
    // It lives in alpha's registry, not in beta's nor the local one.
    assert_eq!(
        s.alpha.run(&["status", "--json", "r1"]).json()["incarnation"],
        inc
    );
    assert_eq!(s.beta.run(&["status", "r1"]).code, 3);

    let ls = s.run(&["--host", "alpha", "ls", "--json"]);
    assert_eq!(ls.code, 0, "{ls:?}");
    let rows = ls.json();
    let row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == "r1")
        .unwrap();
    assert_eq!(row["host"], "alpha");
    assert_eq!(row["incarnation"], inc.as_str());
    assert_eq!(row["status"], "running");
    let human = s.run(&["--host", "alpha", "ls"]);
    assert!(human.stdout.starts_with("HOST"), "{human:?}");
    assert!(
        human.stdout.contains("alpha") && human.stdout.contains("r1"),
        "{human:?}"
    );

    let peek = s.run(&["peek", "alpha:r1", "--wait", "ready"]);
    assert_eq!(peek.code, 0, "{peek:?}");
    assert!(peek.stdout.contains("ready"), "{peek:?}");

    let sent = s.run(&[
        "--host",
        "alpha",
        "send",
        "r1",
        "hello-remote",
        "Enter",
        "--keys",
    ]);
    assert_eq!(sent.code, 0, "{sent:?}");
    // The bytes arrived: the program echoes them (cat), read through alpha's own
    // registry.
    let shown = s.alpha.run(&["peek", "r1", "--wait", "hello-remote"]);
    assert_eq!(shown.code, 0, "{shown:?}");

    let status = s.run(&["status", "--json", &format!("alpha:r1@{inc}")]);
    assert_eq!(status.code, 0, "{status:?}");
    assert_eq!(status.json()["daemon"]["incarnation"], inc.as_str());

    let killed = s.run(&["kill", "alpha:r1", "--wait", "--json"]);
    assert_eq!(killed.code, 0, "{killed:?}");
    assert_eq!(killed.json()["outcome"], "killed");
    let exit = s.alpha.wait_exit("r1");
    assert_eq!(exit["incarnation"], inc.as_str());
    assert_eq!(exit["signal"], 1, "{exit}");
    let events = s.alpha.run(&["events", "r1", "--json"]);
    assert!(events.stdout.contains("kill_requested"), "{events:?}");
}

#[test]
fn a_stale_expect_is_refused_across_ssh_and_the_replacement_is_untouched() {
    let s = Sshd::start();
    let old = s.alpha.new_session("st", &["sh", "-c", "exec cat"]);
    s.alpha.run(&["kill", "st", "--wait"]).ok();
    s.alpha.run(&["rm", "st"]).ok();
    let new = s
        .alpha
        .new_session("st", &["sh", "-c", "echo replacement; exec cat"]);
    assert_ne!(old, new);
    s.alpha.wait_for("st", "replacement");
    let pid = u32::try_from(s.alpha.record("st")["child"]["pid"].as_u64().unwrap()).unwrap();

    let sent = s.run(&[
        "--host", "alpha", "send", "st", "--expect", &old, "INJECTED",
    ]);
    assert_eq!(sent.code, 4, "{sent:?}");
    let sent = s.run(&["send", &format!("alpha:st@{old}"), "INJECTED"]);
    assert_eq!(sent.code, 4, "{sent:?}");
    let killed = s.run(&["kill", &format!("alpha:st@{old}")]);
    assert_eq!(killed.code, 4, "{killed:?}");
    let resized = s.run(&[
        "--host", "alpha", "resize", "st", "7", "33", "--expect", &old,
    ]);
    assert_eq!(resized.code, 4, "{resized:?}");

    // The replacement runs on, untouched: no input, no size change, no kill.
    assert!(support::alive(pid));
    let st = s.alpha.run(&["status", "--json", "st"]).json();
    assert_eq!(st["status"], "running");
    assert_eq!(st["incarnation"], new.as_str());
    assert_ne!(
        (st["daemon"]["rows"].as_u64(), st["daemon"]["cols"].as_u64()),
        (Some(7), Some(33))
    );
    let screen = s.alpha.run(&["peek", "st"]).ok().to_owned();
    assert!(!screen.contains("INJECTED"), "{screen}");
    let events = s.alpha.run(&["events", "st", "--json"]).stdout;
    assert!(!events.contains(&format!(
        "\"kill_requested\",\"id\":\"st\",\"incarnation\":\"{new}\""
    )));
    assert!(
        !events
            .lines()
            .any(|l| l.contains("kill_requested") && l.contains(&new)),
        "{events}"
    );
}

#[test]
fn merged_ls_over_hosts_reports_a_host_that_is_down() {
    let s = Sshd::start();
    s.alpha.new_session("on-a", &["sh", "-c", "exec cat"]);
    s.beta.new_session("on-b", &["sh", "-c", "exec cat"]);
    let r = s.run(&["ls", "--host", "alpha,beta", "--host", "down", "--json"]);
    assert_eq!(r.code, 7, "{r:?}");
    let rows = r.json();
    let rows = rows.as_array().unwrap();
    let find = |host: &str| {
        rows.iter()
            .filter(|e| e["host"] == host)
            .collect::<Vec<_>>()
    };
    assert_eq!(find("alpha").len(), 1, "{rows:?}");
    assert_eq!(find("alpha")[0]["id"], "on-a");
    assert_eq!(find("beta")[0]["id"], "on-b");
    assert_eq!(find("down")[0]["status"], "unreachable");
    assert!(
        find("down")[0]["error"].as_str().unwrap().contains("down"),
        "{rows:?}"
    );

    let human = s.run(&["ls", "--host", "alpha,beta,down"]);
    assert_eq!(human.code, 7, "{human:?}");
    let line = |needle: &str| {
        human
            .stdout
            .lines()
            .find(|l| l.contains(needle))
            .map(str::to_owned)
    };
    assert!(line("on-a").unwrap().starts_with("alpha"), "{human:?}");
    assert!(line("on-b").unwrap().starts_with("beta"), "{human:?}");
    assert!(
        line("unreachable").unwrap().starts_with("down"),
        "{human:?}"
    );
}

#[test]
fn hostile_strings_reach_the_remote_latch_as_data() {
    let s = Sshd::start();
    let marker = s.dir.path().join("pwned");
    let m = marker.display();
    let hostile = format!("it's \"x\" ; touch {m}; $(touch {m}) `touch {m}` $HOME");
    let r = s.run(&[
        "--host",
        "alpha",
        "new",
        "-d",
        "--id",
        "h1",
        "--name",
        &hostile,
        "--tag",
        &format!("k={hostile}"),
        "--",
        "sh",
        "-c",
        "exec cat",
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    let rec = s.alpha.record("h1");
    assert_eq!(rec["displayName"], hostile.as_str());
    assert_eq!(rec["tags"]["k"], hostile.as_str());
    let renamed = format!("{hostile} 2");
    assert_eq!(
        s.run(&["--host", "alpha", "rename", "h1", &renamed]).code,
        0
    );
    assert_eq!(s.alpha.record("h1")["displayName"], renamed.as_str());
    // The hostile name is a REF too: it resolves on the remote host, as data.
    let sent = s.run(&["--host", "alpha", "send", &renamed, &hostile]);
    assert_eq!(sent.code, 0, "{sent:?}");
    let shown = s.alpha.run(&["peek", "h1", "--wait", &hostile]);
    assert_eq!(shown.code, 0, "{shown:?}");
    let missing = s.run(&["--host", "alpha", "peek", &format!("no'pe; touch {m}")]);
    assert_eq!(missing.code, 3, "{missing:?}");
    assert!(!marker.exists(), "a remote shell ran the user's text");

    // Malformed hosts and remote references are usage errors; nothing runs.
    for host in ["-oProxyCommand=touch x", "a;b", "a b", "", "$(x)", "a'b"] {
        let r = s.run(&["--host", host, "ls"]);
        if host.is_empty() {
            continue; // an empty --host is no host
        }
        assert_eq!(r.code, 2, "{host:?}: {r:?}");
    }
    for reference in ["a;b:h1", "-x:h1", "a b:h1@v1.zz"] {
        let r = s.run(&["peek", reference]);
        assert_eq!(r.code, 2, "{reference:?}: {r:?}");
    }
    let both = s.run(&["--host", "beta", "peek", "alpha:h1"]);
    assert_eq!(both.code, 2, "{both:?}");
    assert!(!marker.exists());
}

#[test]
fn ssh_failures_missing_and_incompatible_remote_latches() {
    let s = Sshd::start();
    // ssh cannot connect: exit 7, ssh's own message, the host named.
    let r = s.run(&["--host", "down", "ls"]);
    assert_eq!(r.code, 7, "{r:?}");
    assert!(
        r.stderr.contains("down") && r.stderr.contains("refused"),
        "{r:?}"
    );
    let r = s.run(&["--json", "peek", "down:x"]);
    assert_eq!(r.code, 7, "{r:?}");
    assert_eq!(r.json()["error"]["kind"], "unreachable");

    // No latch there: exit 8, saying so and how to install it.
    let r = s.run_with(
        &["--host", "alpha", "ls"],
        &[("LATCH_REMOTE_BIN", "/nonexistent/latch")],
    );
    assert_eq!(r.code, 8, "{r:?}");
    assert!(
        r.stderr.contains("no latch on host alpha") && r.stderr.contains("install"),
        "{r:?}"
    );
    let r = s.run_with(
        &["peek", "alpha:x"],
        &[("LATCH_REMOTE_BIN", "/nonexistent/latch")],
    );
    assert_eq!(r.code, 8, "{r:?}");

    // A latch from before remote operation: exit 8.
    let old = s.dir.path().join("old-latch");
    std::fs::write(
        &old,
        "#!/bin/sh\necho \"error: unrecognized subcommand 'bridge'\" >&2\nexit 2\n",
    )
    .unwrap();
    // A version-1 latch (it cannot read a version-2 request, as a usage error)
    // still lists: ls falls back to its `latch --json ls` (SPEC.md §12.2).
    let v1 = s.dir.path().join("v1-latch");
    std::fs::write(
        &v1,
        "#!/bin/sh
read req
case \"$req\" in *'\"exec\"'*) ;; *) echo 'unreadable request' >&2; exit 2;; esac
\
         echo '{\"remote\":1,\"latch\":\"0.0.9\",\"supported\":{\"min\":1,\"max\":1},\"wire\":{\"min\":2,\"max\":2}}'
\
         echo '[{\"id\":\"old1\",\"status\":\"running\",\"command\":[\"sh\"]}]'
",
    )
    .unwrap();
    let future = s.dir.path().join("future-latch");
    std::fs::write(
        &future,
        "#!/bin/sh\nread req\necho '{\"remote\":9,\"latch\":\"9.0.0\",\"supported\":{\"min\":9,\"max\":9},\"wire\":{\"min\":9,\"max\":9}}'\n",
    )
    .unwrap();
    for f in [&old, &future, &v1] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let r = s.run_with(
        &["--host", "alpha", "ls"],
        &[("LATCH_REMOTE_BIN", old.to_str().unwrap())],
    );
    assert_eq!(r.code, 8, "{r:?}");
    assert!(r.stderr.contains("predates"), "{r:?}");
    let r = s.run_with(
        &["--host", "alpha", "ls", "--json"],
        &[("LATCH_REMOTE_BIN", v1.to_str().unwrap())],
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.json()[0]["id"], "old1", "{r:?}");
    assert_eq!(r.json()[0]["host"], "alpha", "{r:?}");
    // A newer, incompatible one: exit 8 naming both versions, never a downgrade.
    let r = s.run_with(
        &["peek", "alpha:x"],
        &[("LATCH_REMOTE_BIN", future.to_str().unwrap())],
    );
    assert_eq!(r.code, 8, "{r:?}");
    assert!(
        r.stderr.contains("9.0.0") && r.stderr.contains(env!("CARGO_PKG_VERSION")),
        "{r:?}"
    );
}

/// The `latch bridge` processes serving alpha's registry.
fn bridges(root: &Path) -> Vec<u32> {
    let want = format!("LATCH_ROOT={}", root.display());
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            cmd.split(|&b| b == 0).any(|a| a == b"bridge")
                && env.split(|&b| b == 0).any(|a| a == want.as_bytes())
        })
        .collect()
}

#[test]
fn attach_through_ssh_typing_resize_detach_and_a_dropped_connection() {
    let s = Sshd::start();
    s.alpha.new_session("ta", &["sh"]);
    let tmux = Tmux::new("remote");
    let attach = format!(
        "LATCH_SSH_CONFIG={cfg} LATCH_REMOTE_BIN={bin} {bin} --host alpha attach ta",
        cfg = s.config().display(),
        bin = latch_bin(),
    );
    let stty_file = s.dir.path().join("stty");
    tmux.start(&attach, 100, 30, Some(&stty_file));
    // Typing reaches the remote program and echoes back.
    tmux.run(&["send-keys", "-t", "t", "echo typed-$((6*7))", "Enter"]);
    let r = s
        .alpha
        .run(&["peek", "ta", "--wait", "typed-42", "--timeout", "20"]);
    assert_eq!(r.code, 0, "{r:?} {}", tmux.capture());
    // The size follows the terminal, through SIGWINCH and RESIZE over ssh.
    tmux.run(&["resize-window", "-t", "t", "-x", "90", "-y", "20"]);
    tmux.run(&["send-keys", "-t", "t", "stty size", "Enter"]);
    let r = s
        .alpha
        .run(&["peek", "ta", "--wait", "20 90", "--timeout", "20"]);
    assert_eq!(r.code, 0, "{r:?} {}", tmux.capture());
    // Ctrl-\ detaches: exit 0, the terminal restored, the session running.
    tmux.run(&["send-keys", "-t", "t", "C-\\"]);
    assert!(tmux.wait_for("ended"), "no detach: {}", tmux.capture());
    let pane = tmux.capture();
    assert!(pane.contains("LATCH-EXIT:0"), "{pane}");
    let stty = std::fs::read_to_string(&stty_file).unwrap();
    assert!(stty.contains(" icanon") && stty.contains(" echo"), "{stty}");
    assert_eq!(
        s.alpha.run(&["status", "--json", "ta"]).json()["status"],
        "running"
    );
    drop(tmux);

    // The connection drops mid-attach: terminal restored, exit 7, session alive.
    let tmux = Tmux::new("drop");
    tmux.start(&attach, 100, 30, Some(&stty_file));
    tmux.run(&["send-keys", "-t", "t", "echo second-$((6*7))", "Enter"]);
    let r = s
        .alpha
        .run(&["peek", "ta", "--wait", "second-42", "--timeout", "20"]);
    assert_eq!(r.code, 0, "{r:?}");
    let pids = bridges(&s.alpha.root);
    assert!(!pids.is_empty(), "no bridge found");
    for pid in pids {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap()),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(
        tmux.wait_for("ended"),
        "attach did not end: {}",
        tmux.capture()
    );
    let pane = tmux.capture();
    assert!(pane.contains("LATCH-EXIT:7"), "{pane}");
    let stty = std::fs::read_to_string(&stty_file).unwrap();
    assert!(stty.contains(" icanon") && stty.contains(" echo"), "{stty}");
    assert_eq!(
        s.alpha.run(&["status", "--json", "ta"]).json()["status"],
        "running"
    );
}

/// `latch --host alpha new -d --id ID --receipt FILE --json -- CMD…`; the incarnation.
#[track_caller]
fn new_with_receipt(s: &Sshd, id: &str, receipt: &str, cmd: &[&str]) -> String {
    let mut args = vec![
        "--host",
        "alpha",
        "new",
        "-d",
        "--id",
        id,
        "--receipt",
        receipt,
        "--json",
        "--",
    ];
    args.extend_from_slice(cmd);
    let r = s.run(&args);
    assert_eq!(r.code, 0, "{r:?}");
    r.json()["incarnation"].as_str().unwrap().to_owned()
}

/// Ends and removes session `id` on alpha, then creates it again there: a
/// replacement the receipt's creation must never reach.
#[track_caller]
fn replace_on_alpha(s: &Sshd, id: &str) -> String {
    s.alpha.run(&["kill", id, "--wait"]).ok();
    s.alpha.run(&["rm", id]).ok();
    let new = s
        .alpha
        .new_session(id, &["sh", "-c", "echo replacement; exec cat"]);
    s.alpha.wait_for(id, "replacement");
    new
}

#[test]
fn a_host_receipt_is_written_here_and_verified_on_its_host() {
    use std::os::unix::fs::PermissionsExt;
    let s = Sshd::start();
    let receipt = s.dir.path().join("rr.receipt");
    let receipt_s = receipt.to_str().unwrap();
    let inc = new_with_receipt(&s, "rr", receipt_s, &["sh", "-c", "echo up; exec cat"]);

    // Written here, 0600, naming the host and the remote creation.
    let meta = std::fs::metadata(&receipt).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&receipt).unwrap()).unwrap();
    assert_eq!(r["host"], "alpha", "{r}");
    assert_eq!(r["id"], "rr");
    assert_eq!(r["incarnation"], inc.as_str());
    assert_eq!(
        std::path::Path::new(r["root"].as_str().unwrap()),
        s.alpha.root.canonicalize().unwrap()
    );
    // Attaching `new` writes one too, before it attaches (here without a
    // terminal, so the attach itself fails; the session runs on).
    let attached = s.dir.path().join("attached.receipt");
    let r = s.run(&[
        "--host",
        "alpha",
        "new",
        "--id",
        "ra",
        "--receipt",
        attached.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "exec cat",
    ]);
    let a: serde_json::Value = serde_json::from_slice(&std::fs::read(&attached).unwrap())
        .unwrap_or_else(|e| panic!("{e}: {r:?}"));
    assert_eq!(a["host"], "alpha", "{a}");
    assert_eq!(a["incarnation"], s.alpha.record("ra")["incarnation"]);

    // Verified on alpha, by its key and its state, from here.
    let v = s.run(&["receipt", "verify", receipt_s]);
    assert_eq!(v.code, 0, "{v:?}");
    assert!(v.stdout.starts_with("current"), "{v:?}");
    let v = s.run(&["receipt", "verify", receipt_s, "--json"]).json();
    assert_eq!(v["verdict"], "current", "{v}");
    assert_eq!(v["incarnation"], inc.as_str());
    // With its own --host too.
    assert_eq!(
        s.run(&["--host", "alpha", "receipt", "verify", receipt_s])
            .code,
        0
    );

    let new = replace_on_alpha(&s, "rr");
    let v = s.run(&["receipt", "verify", receipt_s]);
    assert_eq!(v.code, 4, "{v:?}");
    assert!(v.stdout.starts_with("replaced"), "{v:?}");
    assert!(v.stdout.contains(&new), "{v:?}");

    s.alpha.run(&["kill", "rr", "--wait"]).ok();
    s.alpha.run(&["rm", "rr"]).ok();
    let v = s.run(&["receipt", "verify", receipt_s, "--json"]);
    assert_eq!(v.code, 3, "{v:?}");
    assert_eq!(v.json()["verdict"], "removed");
}

#[test]
fn acting_by_a_host_receipt_reaches_that_creation_only() {
    let s = Sshd::start();
    let receipt = s.dir.path().join("job.receipt");
    let receipt_s = receipt.to_str().unwrap();
    let old = new_with_receipt(&s, "job", receipt_s, &["sh", "-c", "echo up; exec cat"]);
    s.alpha.wait_for("job", "up");

    // The receipt names the host: no --host needed.
    let tagged = s.run(&["tag", "job", "by=receipt", "--receipt", receipt_s]);
    assert_eq!(tagged.code, 0, "{tagged:?}");
    assert_eq!(s.alpha.record("job")["tags"]["by"], "receipt");
    let sent = s.run(&["send", "job", "--receipt", receipt_s, "hello\n"]);
    assert_eq!(sent.code, 0, "{sent:?}");
    s.alpha.wait_for("job", "hello");

    let new = replace_on_alpha(&s, "job");
    assert_ne!(old, new);
    let pid = u32::try_from(s.alpha.record("job")["child"]["pid"].as_u64().unwrap()).unwrap();

    // Every act by the old receipt fails closed: registry operations (relayed) and
    // daemon effects (BIND) alike.
    let tagged = s.run(&["tag", "job", "by=stale", "--receipt", receipt_s]);
    assert_eq!(tagged.code, 4, "{tagged:?}");
    let renamed = s.run(&["rename", "job", "stale", "--receipt", receipt_s]);
    assert_eq!(renamed.code, 4, "{renamed:?}");
    let killed = s.run(&["kill", "job", "--receipt", receipt_s]);
    assert_eq!(killed.code, 4, "{killed:?}");
    let killed = s.run(&["--host", "alpha", "kill", "job", "--receipt", receipt_s]);
    assert_eq!(killed.code, 4, "{killed:?}");
    let sent = s.run(&["send", "alpha:job", "--receipt", receipt_s, "INJECTED"]);
    assert_eq!(sent.code, 4, "{sent:?}");
    let removed = s.run(&["rm", "job", "--force", "--receipt", receipt_s]);
    assert_eq!(removed.code, 4, "{removed:?}");

    // The replacement is untouched.
    assert!(support::alive(pid));
    let rec = s.alpha.record("job");
    assert_eq!(rec["incarnation"], new.as_str());
    assert!(rec["tags"].get("by").is_none(), "{rec}");
    assert!(rec["name"].is_null(), "{rec}");
    assert!(!s.alpha.run(&["peek", "job"]).ok().contains("INJECTED"));
    let events = s.alpha.run(&["events", "job", "--json"]).stdout;
    assert!(
        !events
            .lines()
            .any(|l| l.contains("kill_requested") && l.contains(&new)),
        "{events}"
    );

    // A receipt for the current creation kills exactly it.
    s.alpha.run(&["kill", "job", "--wait"]).ok();
    s.alpha.run(&["rm", "job"]).ok();
    let second = s.dir.path().join("second.receipt");
    let second_s = second.to_str().unwrap();
    new_with_receipt(&s, "job", second_s, &["sh", "-c", "exec cat"]);
    let pid = u32::try_from(s.alpha.record("job")["child"]["pid"].as_u64().unwrap()).unwrap();
    let killed = s.run(&["kill", "job", "--wait", "--receipt", second_s, "--json"]);
    assert_eq!(killed.code, 0, "{killed:?}");
    assert_eq!(killed.json()["outcome"], "killed");
    assert!(support::wait_process_exit(
        pid,
        std::time::Duration::from_secs(10)
    ));
}

#[test]
fn host_and_receipt_must_agree_and_a_bridge_reads_no_receipt_file() {
    let s = Sshd::start();
    let hosted = s.dir.path().join("hosted.receipt");
    let hosted_s = hosted.to_str().unwrap();
    new_with_receipt(&s, "hr", hosted_s, &["sh", "-c", "exec cat"]);
    let local = s.dir.path().join("local.receipt");
    let local_s = local.to_str().unwrap();
    let made = s.alpha.run(&[
        "new",
        "-d",
        "--id",
        "lr",
        "--receipt",
        local_s,
        "--",
        "sh",
        "-c",
        "exec cat",
    ]);
    assert_eq!(made.code, 0, "{made:?}");

    for args in [
        // A host receipt with another host.
        vec!["--host", "beta", "tag", "hr", "x=1", "--receipt", hosted_s],
        vec!["tag", "beta:hr", "x=1", "--receipt", hosted_s],
        vec!["--host", "beta", "kill", "hr", "--receipt", hosted_s],
        vec!["--host", "beta", "receipt", "verify", hosted_s],
        // A local receipt with a host.
        vec!["--host", "alpha", "tag", "lr", "x=1", "--receipt", local_s],
        vec!["kill", "alpha:lr", "--receipt", local_s],
        vec!["--host", "alpha", "receipt", "verify", local_s],
    ] {
        let r = s.run(&args);
        assert_eq!(r.code, 2, "{args:?}: {r:?}");
        assert!(r.stderr.contains("receipt"), "{args:?}: {r:?}");
    }
    assert!(s.alpha.record("hr")["tags"].get("x").is_none());
    assert!(s.alpha.record("lr")["tags"].get("x").is_none());

    // `new --receipt` into a directory: refused here, nothing created there.
    let r = s.run(&[
        "--host",
        "alpha",
        "new",
        "-d",
        "--id",
        "nothing",
        "--receipt",
        "/tmp",
        "--",
        "true",
    ]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(!s.alpha.path("nothing.json").exists());

    // A request whose arguments name a receipt file, without the receipt itself:
    // the bridge refuses rather than read a file of its host.
    let mut bridge = Command::new(latch_bin())
        .arg("bridge")
        .env("LATCH_ROOT", &s.alpha.root)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let request = serde_json::json!({
        "remote": {"min": 2, "max": 2},
        "latch": "test",
        "command": {"command": {"emit": {"target": {"reference": "lr", "pre": {"receipt": local_s}},
                                          "kind": "user.x", "data": null}}},
    });
    {
        use std::io::Write;
        let mut stdin = bridge.stdin.take().unwrap();
        writeln!(stdin, "{request}").unwrap();
    }
    let out = bridge.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let events = s.alpha.run(&["events", "lr", "--json"]).stdout;
    assert!(!events.contains("user.x"), "{events}");
}

/// kill over ssh when the host's daemon cannot be asked (its socket deleted): the
/// host's own latch ends the program through its proven identity, under the lock.
#[test]
fn remote_kill_falls_back_to_the_hosts_proven_identity() {
    let s = Sshd::start();
    let r = s.run(&[
        "--host", "alpha", "new", "-d", "--id", "nosock", "--json", "--", "sleep", "600",
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    let inc = r.json()["incarnation"].as_str().unwrap().to_owned();
    let child = s.alpha.record("nosock")["child"]["pid"]
        .as_u64()
        .map(|p| u32::try_from(p).unwrap())
        .unwrap();
    std::fs::remove_file(s.alpha.path("nosock.sock")).unwrap();
    let killed = s.run(&["kill", &format!("alpha:nosock@{inc}"), "--wait", "--json"]);
    assert_eq!(killed.code, 0, "{killed:?}");
    assert_eq!(killed.json()["outcome"], "killed", "{killed:?}");
    assert!(support::wait_process_exit(
        child,
        std::time::Duration::from_secs(10)
    ));
}

/// An attach through `--host` behaves as one run on the host: `--history` and the
/// host's `attachHistory` write scrollback first, the host's `detachKey` detaches,
/// and the terminal's own session is refused (exit 9) unless `--force`; and
/// `peek --wait --full` searches the scrollback there as here.
#[test]
fn remote_attach_and_wait_behave_as_on_the_host() {
    let s = Sshd::start();
    let inc = s
        .alpha
        .new_session("th", &["sh", "-c", "seq 5001 5300; exec sh"]);
    std::fs::write(
        s.alpha.path("defaults.json"),
        r#"{"attachHistory": 200, "detachKey": "^]"}"#,
    )
    .unwrap();
    s.alpha.wait_for("th", "5300");

    // `peek --wait --full` over ssh finds text that is only in the scrollback, as
    // locally; without --full only the screen counts.
    let r = s.run(&[
        "--host",
        "alpha",
        "peek",
        "th",
        "--wait",
        "5010",
        "--full",
        "--timeout",
        "20",
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.lines().any(|l| l == "5010"), "{r:?}");
    let r = s.run(&[
        "--host",
        "alpha",
        "peek",
        "th",
        "--wait",
        "5010",
        "--timeout",
        "1",
    ]);
    assert_eq!(
        r.code,
        s.alpha
            .run(&["peek", "th", "--wait", "5010", "--timeout", "1"])
            .code,
        "{r:?}"
    );
    assert_ne!(r.code, 0, "{r:?}");

    // Inside the session itself (its environment names it): refused, nothing done.
    let own = [
        ("LATCH_SESSION_ID", "th"),
        ("LATCH_INCARNATION", inc.as_str()),
    ];
    let r = s.run_with(&["--host", "alpha", "attach", "th"], &own);
    assert_eq!(r.code, 9, "{r:?}");
    assert!(r.stderr.contains("--force"), "{r:?}");
    // With --force it goes on to attach (here without a terminal, so it fails
    // otherwise, not with 9).
    let r = s.run_with(&["--host", "alpha", "attach", "--force", "th"], &own);
    assert_ne!(r.code, 9, "{r:?}");

    let tmux = Tmux::new("history");
    let attach = format!(
        "LATCH_SSH_CONFIG={cfg} LATCH_REMOTE_BIN={bin} {bin} --host alpha attach th",
        cfg = s.config().display(),
        bin = latch_bin(),
    );
    tmux.start(&attach, 100, 30, None);
    // Once typing reaches the program, the attach has written what it writes first.
    tmux.run(&["send-keys", "-t", "t", "echo typed-$((6*7))", "Enter"]);
    s.alpha.wait_for("th", "typed-42");
    let history = tmux.run(&["capture-pane", "-p", "-t", "t", "-S", "-400"]);
    let history = String::from_utf8_lossy(&history.stdout);
    assert!(
        history.lines().any(|l| l.trim() == "5150"),
        "the host's attachHistory wrote no scrollback: {history}"
    );
    // The host's detach key (^]) detaches: exit 0, the session running.
    tmux.run(&["send-keys", "-t", "t", "C-]"]);
    assert!(tmux.wait_for("ended"), "no detach: {}", tmux.capture());
    assert!(
        tmux.capture().contains("LATCH-EXIT:0"),
        "{}",
        tmux.capture()
    );
    assert_eq!(
        s.alpha.run(&["status", "--json", "th"]).json()["status"],
        "running"
    );
}

/// `cast --host` (SPEC §4.8): the frames go through the bridge, the file is the
/// host's, and a relative FILE (the caller's cwd means nothing there) is refused.
#[test]
fn a_recording_through_ssh_is_written_on_the_host() {
    let s = Sshd::start();
    s.alpha
        .new_session("c1", &["sh", "-c", "echo on-the-host; read x"]);
    s.alpha.wait_for("c1", "on-the-host");
    let rel = s.run(&["--host", "alpha", "cast", "c1", "here.cast"]);
    assert_eq!(rel.code, 2, "{rel:?}");
    let rel = s.run(&[
        "--host",
        "alpha",
        "new",
        "-d",
        "--cast",
        "here.cast",
        "--",
        "true",
    ]);
    assert_eq!(rel.code, 2, "{rel:?}");
    let file = s.dir.path().join("remote.cast");
    let file_s = file.to_str().unwrap();
    let started = s.run(&["--host", "alpha", "cast", "c1", file_s, "--json"]);
    assert_eq!(started.code, 0, "{started:?}");
    assert_eq!(started.json()["casts"][0]["file"], file_s);
    let stopped = s.run(&["cast", "alpha:c1", "--stop"]);
    assert_eq!(stopped.code, 0, "{stopped:?}");
    // Its writer ends on its own thread: a bounded poll for the final marker.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let text = loop {
        let text = std::fs::read_to_string(&file).unwrap();
        if text.contains("latch: recording stopped") {
            break text;
        }
        assert!(std::time::Instant::now() < deadline, "{text}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(text.contains("on-the-host"), "{text}");
}

/// `run` and `commands` through `--host`: the same frames over the bridge, the
/// command's code as run's own (SPEC §4.7, §12.3).
#[test]
fn run_and_commands_through_ssh() {
    let s = Sshd::start();
    s.alpha.new_session("rb", &["bash"]);
    let r = s.run(&[
        "--host",
        "alpha",
        "run",
        "rb",
        "--timeout",
        "60",
        "sh -c 'echo over; exit 7'",
    ]);
    assert_eq!((r.code, r.stdout.as_str()), (7, "over\n"), "{r:?}");
    let r = s.run(&["--host", "alpha", "--json", "commands", "rb"]);
    let v = r.json();
    assert_eq!(v[0]["exitCode"], 7, "{r:?}");
}

#[test]
fn pictures_of_a_remote_screen_are_drawn_here() {
    let s = Sshd::start();
    let script = r"printf '\033[41m \033[1;32mREADY\033[m'; sleep 100000";
    let r = s.run(&[
        "--host", "alpha", "new", "-d", "--id", "p1", "--", "sh", "-c", script,
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(s.run(&["peek", "alpha:p1", "--wait", "READY"]).code, 0);
    // The CAPTURE comes back through the relay (SPEC.md §12.3).
    let svg = s.run(&["peek", "alpha:p1", "--format", "svg"]);
    assert_eq!(svg.code, 0, "{svg:?}");
    assert!(svg.stdout.contains(r##"fill="#cd0000"/>"##), "{svg:?}");
    assert!(svg.stdout.contains(">READY</text>"), "{svg:?}");
    let png = s
        .cmd()
        .args(["peek", "alpha:p1", "--format", "png"])
        .output()
        .unwrap();
    assert!(png.status.success(), "{png:?}");
    assert!(png.stdout.starts_with(b"\x89PNG\r\n\x1a\n"));
    // An ended remote session: from the final screen the target line carries.
    let done = r"printf '\033[44m \033[mbye'; exit 4";
    let r = s.run(&[
        "--host", "alpha", "new", "-d", "--id", "p2", "--", "sh", "-c", done,
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    s.alpha.wait_exit("p2");
    let svg = s.run(&["peek", "alpha:p2", "--format", "svg"]);
    assert_eq!(svg.code, 0, "{svg:?}");
    assert!(svg.stdout.contains(r##"fill="#0000ee"/>"##), "{svg:?}");
    assert!(svg.stderr.contains("exited with code 4"), "{svg:?}");
}

/// Feeds one request line to `latch bridge` on `reg`'s registry; its stdout lines
/// and exit code.
fn bridge_answer(reg: &Reg, request: &serde_json::Value) -> (Vec<serde_json::Value>, Option<i32>) {
    use std::io::Write;
    let mut bridge = Command::new(latch_bin())
        .arg("bridge")
        .env("LATCH_ROOT", &reg.root)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(bridge.stdin.take().unwrap(), "{request}").unwrap();
    let out = bridge.wait_with_output().unwrap();
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect();
    (lines, out.status.code())
}

/// Remote protocol 2 (SPEC.md §12.2): an operation the bridge does not know is a
/// typed `unsupported` answer after the header, never an unreadable request; a
/// version-1 request is refused in the header, naming both ranges; the typed
/// `status` names exactly the creation asked, and refuses a replaced one.
#[test]
fn the_bridge_answers_unknown_operations_unsupported_and_status_typed() {
    let reg = Reg::new();
    let (lines, code) = bridge_answer(
        &reg,
        &serde_json::json!({"remote": {"min": 2, "max": 9}, "latch": "9.0.0", "frobnicate": {"x": 1}}),
    );
    assert_eq!(code, Some(8), "{lines:?}");
    assert_eq!(lines[0]["remote"], 2, "{lines:?}");
    assert_eq!(lines[1]["unsupported"], "frobnicate", "{lines:?}");

    let (lines, code) = bridge_answer(
        &reg,
        &serde_json::json!({"remote": {"min": 1, "max": 1}, "latch": "0.0.1",
                            "exec": {"args": ["ls"]}}),
    );
    assert_eq!(code, Some(8), "{lines:?}");
    assert!(lines[0]["remote"].is_null(), "{lines:?}");
    assert_eq!(lines[0]["error"]["kind"], "protocol", "{lines:?}");
    assert_eq!(lines.len(), 1, "nothing runs after a refusal: {lines:?}");

    let inc = reg.new_session("st", &["sh", "-c", "exit 3"]);
    reg.run(&["wait", "st", "--exit", "--timeout", "20"]);
    let (lines, code) = bridge_answer(
        &reg,
        &serde_json::json!({"remote": {"min": 2, "max": 2}, "latch": "t",
                            "status": {"session": format!("st@{inc}")}}),
    );
    assert_eq!(code, Some(0), "{lines:?}");
    assert_eq!(lines[1]["ok"]["status"], "exited", "{lines:?}");
    assert_eq!(lines[1]["ok"]["code"], 3, "{lines:?}");
    let other = reg.new_session("st2", &["sleep", "60"]);
    let (lines, code) = bridge_answer(
        &reg,
        &serde_json::json!({"remote": {"min": 2, "max": 2}, "latch": "t",
                            "status": {"session": format!("st@{other}")}}),
    );
    assert_eq!(code, Some(4), "{lines:?}");
    assert_eq!(lines[1]["error"]["kind"], "replaced", "{lines:?}");
    reg.run(&["kill", "st2"]);
}

/// The registry commands through ssh are typed requests of remote protocol 2
/// (SPEC.md §12.2), answered by the host's library and printed here as locally:
/// tag, restart (a new creation, the previous one named), gc, and rm.
#[test]
fn registry_commands_through_ssh_are_typed_and_print_as_locally() {
    let s = Sshd::start();
    let first = s.alpha.new_session("rg", &["sleep", "600"]);
    let tagged = s.run(&["--host", "alpha", "--json", "tag", "rg", "team=ops"]);
    assert_eq!(tagged.code, 0, "{tagged:?}");
    assert_eq!(tagged.json()["changed"][0], "tags.team", "{tagged:?}");
    assert_eq!(s.alpha.record("rg")["tags"]["team"], "ops");

    let restarted = s.run(&[
        "--host",
        "alpha",
        "--json",
        "restart",
        &format!("rg@{first}"),
    ]);
    assert_eq!(restarted.code, 0, "{restarted:?}");
    let v = restarted.json();
    assert_eq!(v["previousIncarnation"], first.as_str(), "{v}");
    let second = v["incarnation"].as_str().unwrap().to_owned();
    assert_ne!(second, first);
    assert_eq!(s.alpha.record("rg")["incarnation"], second.as_str());
    // The stale creation is refused, typed, with nothing done.
    let stale = s.run(&["--host", "alpha", "rm", &format!("rg@{first}"), "--force"]);
    assert_eq!(stale.code, 4, "{stale:?}");
    assert!(s.alpha.path("rg.json").exists());

    // The commands the host prints itself travel as parsed (`command`).
    let stats = s.run(&["--host", "alpha", "--json", "stats", "rg"]);
    assert_eq!(stats.code, 0, "{stats:?}");
    assert_eq!(stats.json()["incarnation"], second.as_str(), "{stats:?}");
    let emitted = s.run(&[
        "--json",
        "emit",
        "alpha:rg",
        "user.deployed",
        "--data",
        "{\"v\":1}",
    ]);
    assert_eq!(emitted.code, 0, "{emitted:?}");
    let events = s.run(&["--host", "alpha", "--json", "events", "rg"]);
    assert_eq!(events.code, 0, "{events:?}");
    assert!(events.stdout.contains("user.deployed"), "{events:?}");
    let gc = s.run(&["--host", "alpha", "--json", "gc", "--dry-run"]);
    assert_eq!(gc.code, 0, "{gc:?}");
    assert!(gc.json().is_array(), "{gc:?}");

    let removed = s.run(&["--host", "alpha", "--json", "rm", "alpha:rg", "--force"]);
    assert_eq!(removed.code, 0, "{removed:?}");
    assert_eq!(removed.json()["outcome"], "removed", "{removed:?}");
    assert_eq!(
        removed.json()["incarnation"],
        second.as_str(),
        "{removed:?}"
    );
    assert!(!s.alpha.path("rg.json").exists());
}

/// One JSON-RPC line to `latch control` and the answer with its id (the server
/// answers out of order; notifications are skipped).
fn control_call(
    input: &mut impl std::io::Write,
    output: &mut impl BufRead,
    id: u64,
    method: &str,
    params: serde_json::Value,
) -> serde_json::Value {
    let line = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    writeln!(input, "{line}").unwrap();
    input.flush().unwrap();
    loop {
        let mut l = String::new();
        assert!(
            output.read_line(&mut l).unwrap() > 0,
            "control closed before answering {method}"
        );
        let v: serde_json::Value = serde_json::from_str(&l).unwrap();
        if v["id"] == id {
            return v;
        }
    }
}

/// `latch control --host` (SPEC §13.8): the local server speaks HELLO and BIND to
/// the host's daemons through bridge relays, and the registry acts there; every
/// answer names the creation, and a replaced one is refused as locally.
#[test]
fn control_through_ssh_acts_on_the_hosts_sessions() {
    let s = Sshd::start();
    let mut child = s
        .cmd()
        .args(["--host", "alpha", "control"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let mut output = BufReader::new(child.stdout.take().unwrap());
    let mut call =
        |id, method: &str, params| control_call(&mut input, &mut output, id, method, params);
    let init = call(
        1,
        "initialize",
        serde_json::json!({"minVersion": 1, "maxVersion": 1}),
    );
    assert_eq!(init["result"]["protocolVersion"], 1, "{init}");
    let created = call(
        2,
        "create",
        serde_json::json!({"id": "ctl", "command": ["sh", "-c", "echo up; exec cat"]}),
    );
    let inc = created["result"]["incarnation"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        s.alpha.record("ctl")["incarnation"],
        inc.as_str(),
        "{created}"
    );
    let pinned = format!("ctl@{inc}");
    let waited = call(
        3,
        "wait",
        serde_json::json!({"session": pinned, "text": "up", "after": 0, "timeout": 20}),
    );
    assert_eq!(waited["result"]["incarnation"], inc.as_str(), "{waited}");
    let sent = call(
        4,
        "send",
        serde_json::json!({"session": pinned, "text": "over-ssh\n"}),
    );
    assert_eq!(sent["result"]["incarnation"], inc.as_str(), "{sent}");
    let seen = call(
        5,
        "wait",
        serde_json::json!({"session": pinned, "text": "over-ssh", "after": 0, "timeout": 20}),
    );
    assert!(seen["result"].is_object(), "{seen}");
    let peek = call(6, "peek", serde_json::json!({"session": pinned}));
    assert!(
        peek["result"]["screen"]
            .as_str()
            .unwrap()
            .contains("over-ssh"),
        "{peek}"
    );
    let tagged = call(
        7,
        "tag",
        serde_json::json!({"session": pinned, "tags": {"via": "control"}}),
    );
    assert!(tagged["result"].is_object(), "{tagged}");
    assert_eq!(s.alpha.record("ctl")["tags"]["via"], "control");
    let listed = call(8, "list", serde_json::json!({}));
    assert!(
        listed["result"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["id"] == "ctl"),
        "{listed}"
    );
    // Replaced on the host: the old creation is refused, typed, nothing done.
    let second = replace_on_alpha(&s, "ctl");
    let stale = call(
        9,
        "send",
        serde_json::json!({"session": pinned, "text": "INJECTED"}),
    );
    assert_eq!(stale["error"]["code"], 4, "{stale}");
    assert_eq!(stale["error"]["data"]["kind"], "replaced", "{stale}");
    let killed = call(
        10,
        "kill",
        serde_json::json!({"session": format!("ctl@{second}"), "wait": true}),
    );
    assert_eq!(killed["result"]["incarnation"], second.as_str(), "{killed}");
    drop(input);
    assert!(child.wait().unwrap().success());
}
