//! End to end: the terminal handed to the daemon (SPEC §5.7), driven through real
//! terminals (tmux panes): the daemon holds the pane's terminal while attached and
//! not a descriptor after; typing, resizing, the detach key, a read-only attach, a
//! signal to the client, the daemon's death, a stopped terminal during a flood, a
//! background attach, and the descriptors a hostile peer passes.

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use support::tmux::Tmux;
use support::Reg;

/// The pane's terminal device (`/dev/pts/N`).
fn pane_tty(tmux: &Tmux) -> String {
    let out = tmux.run(&["display-message", "-p", "-t", "t", "#{pane_tty}"]);
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The pid of the pane's first process (the `sh -c` the test started).
fn pane_pid(tmux: &Tmux) -> i32 {
    let out = tmux.run(&["display-message", "-p", "-t", "t", "#{pane_pid}"]);
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

fn daemon_pid(reg: &Reg, id: &str) -> i32 {
    let st = reg.run(&["status", id, "--json"]).json();
    i32::try_from(st["daemonPid"].as_i64().unwrap()).unwrap()
}

/// The daemon's descriptors that name `path`.
fn fds_to(pid: i32, path: &str) -> usize {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return 0;
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter(|l| l == Path::new(path))
        .count()
}

/// Polls (bounded) until the daemon holds `want` descriptors of `path`.
fn wait_fds(pid: i32, path: &str, want: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let n = fds_to(pid, path);
        if n == want || Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The `flags:` of `/proc/PID/fdinfo/FD`, octal.
fn fd_flags(pid: i32, fd: u32) -> u32 {
    let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).unwrap();
    let flags = info
        .lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .unwrap()
        .trim();
    u32::from_str_radix(flags, 8).unwrap()
}

const O_NONBLOCK: u32 = 0o4000;

fn attach_cmd(reg: &Reg, args: &str) -> String {
    format!(
        "{bin} --root {root} attach {args}",
        bin = support::latch_bin(),
        root = reg.root.display(),
    )
}

fn assert_restored(stty_file: &Path) {
    let stty = std::fs::read_to_string(stty_file).unwrap();
    for flag in ["icanon", "echo", "isig", "opost"] {
        assert!(
            stty.split_whitespace().any(|w| w == flag),
            "terminal not restored ({flag} off): {stty}"
        );
    }
}

/// Typing, resizing and the detach key through the daemon's own reading of the
/// pane: while attached the daemon holds the pane's terminal (the client passed
/// it); after the detach it holds none, and the pane's shell's description was
/// never made non-blocking.
#[test]
fn the_daemon_serves_the_passed_terminal_and_lets_it_go() {
    let tmux = Tmux::new("fd");
    let reg = Reg::new();
    reg.new_session("fd", &["sh"]);
    let stty_file: PathBuf = reg.root.parent().unwrap().join("stty.txt");
    tmux.start(&attach_cmd(&reg, "fd"), 100, 30, Some(&stty_file));
    tmux.run(&["send-keys", "-t", "t", "echo typed-$((6*7))", "Enter"]);
    reg.wait_for("fd", "typed-42");
    let (daemon, tty) = (daemon_pid(&reg, "fd"), pane_tty(&tmux));
    assert_eq!(fds_to(daemon, &tty), 1, "the daemon does not hold {tty}");
    let shell = pane_pid(&tmux);
    assert_eq!(
        fd_flags(shell, 0) & O_NONBLOCK,
        0,
        "non-blocking while attached"
    );
    // The PTY took the pane's size, and follows it.
    tmux.run(&["resize-window", "-t", "t", "-x", "90", "-y", "20"]);
    let mut followed = false;
    for _ in 0..20 {
        tmux.run(&["send-keys", "-t", "t", "stty size", "Enter"]);
        let r = reg.run(&["peek", "fd", "--wait", "20 90", "--timeout", "0.5"]);
        if r.code == 0 {
            followed = true;
            break;
        }
    }
    assert!(followed, "the size did not follow: {}", tmux.capture());
    tmux.run(&["send-keys", "-t", "t", "C-\\"]);
    assert!(tmux.wait_for("ended"), "no detach: {}", tmux.capture());
    let pane = tmux.capture();
    assert!(pane.contains("LATCH-EXIT:0"), "{pane}");
    assert!(
        pane.lines()
            .any(|l| l.starts_with("[latch: detached from fd]")),
        "{pane}"
    );
    assert_restored(&stty_file);
    // No descriptor of the user's terminal after the detach (the client has exited
    // after DETACHED, which the daemon sends once it has closed its own).
    assert_eq!(fds_to(daemon, &tty), 0, "the daemon still holds {tty}");
    assert_eq!(
        fd_flags(pane_pid(&tmux), 0) & O_NONBLOCK,
        0,
        "stdin left non-blocking"
    );
    let st = reg.run(&["status", "fd", "--json"]).json();
    assert_eq!(st["status"], "running");
    assert_eq!(st["daemon"]["writers"], 0);
}

/// A read-only attach through the passed terminal: keys are dropped, the detach
/// key detaches; a double press of the detach key reaches a read-write program.
#[test]
fn read_only_keys_are_dropped_and_a_double_press_goes_through() {
    let tmux = Tmux::new("ro");
    let reg = Reg::new();
    reg.new_session("ro", &["cat", "-v"]);
    let cmd = format!(
        "{}; {}",
        attach_cmd(&reg, "ro --read-only"),
        attach_cmd(&reg, "ro --detach-key C-a")
    );
    tmux.start(&cmd, 80, 20, None);
    let daemon = daemon_pid(&reg, "ro");
    let tty = pane_tty(&tmux);
    assert_eq!(
        wait_fds(daemon, &tty, 1),
        1,
        "the read-only attach passed no terminal"
    );
    tmux.run(&["send-keys", "-t", "t", "dropped", "Enter"]);
    tmux.run(&["send-keys", "-t", "t", "C-\\"]);
    // The second attach (read-write, detach key C-a) holds the terminal next.
    let deadline = Instant::now() + Duration::from_secs(20);
    while reg.run(&["status", "ro", "--json"]).json()["daemon"]["writers"] != 1 {
        assert!(
            Instant::now() < deadline,
            "no second attach: {}",
            tmux.capture()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    tmux.run(&["send-keys", "-t", "t", "C-a", "C-a"]);
    tmux.run(&["send-keys", "-t", "t", "kept", "Enter"]);
    let screen = reg.wait_for("ro", "^Akept");
    assert!(
        !screen.contains("dropped"),
        "a read-only key arrived: {screen}"
    );
    tmux.run(&["send-keys", "-t", "t", "C-a"]);
    assert!(tmux.wait_for("ended"), "no detach: {}", tmux.capture());
    assert_eq!(fds_to(daemon, &tty), 0);
}

/// SIGTERM to the client: it asks the daemon to detach, which lets the terminal
/// go first; then the relayed attach's message and exit code, the terminal sane.
#[test]
fn sigterm_to_the_client_detaches_through_the_daemon() {
    let tmux = Tmux::new("tm");
    let reg = Reg::new();
    reg.new_session("tm", &["sh"]);
    let dir = reg.root.parent().unwrap().to_owned();
    let (stty_file, pid_file) = (dir.join("stty-tm.txt"), dir.join("tm.pid"));
    let cmd = format!(
        "sh -c 'echo $$ > {pid}; exec {attach}'",
        pid = pid_file.display(),
        attach = attach_cmd(&reg, "tm")
    );
    tmux.start(&cmd, 80, 24, Some(&stty_file));
    tmux.run(&["send-keys", "-t", "t", "echo attached-$((2*21))", "Enter"]);
    reg.wait_for("tm", "attached-42");
    let (daemon, tty) = (daemon_pid(&reg, "tm"), pane_tty(&tmux));
    assert_eq!(fds_to(daemon, &tty), 1);
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
    assert!(pane.contains("LATCH-EXIT:1"), "{pane}");
    assert_restored(&stty_file);
    assert_eq!(fds_to(daemon, &tty), 0);
    assert_eq!(
        reg.run(&["status", "tm", "--json"]).json()["status"],
        "running"
    );
}

/// SIGKILL to the daemon mid-attach: the client sees the connection close,
/// restores the terminal and ends; the pane's shell reads its terminal blocking
/// (the daemon's O_NONBLOCK was on a description of its own).
#[test]
fn sigkill_to_the_daemon_leaves_a_sane_blocking_terminal() {
    let tmux = Tmux::new("kd");
    let reg = Reg::new();
    reg.new_session("kd", &["sh"]);
    let stty_file: PathBuf = reg.root.parent().unwrap().join("stty-kd.txt");
    tmux.start(&attach_cmd(&reg, "kd"), 80, 24, Some(&stty_file));
    tmux.run(&["send-keys", "-t", "t", "echo attached-$((2*21))", "Enter"]);
    reg.wait_for("kd", "attached-42");
    let (daemon, tty) = (daemon_pid(&reg, "kd"), pane_tty(&tmux));
    assert_eq!(fds_to(daemon, &tty), 1);
    // The pane's shell shares the terminal's description with the client.
    let shell = pane_pid(&tmux);
    assert_eq!(
        fd_flags(shell, 0) & O_NONBLOCK,
        0,
        "non-blocking while attached"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    assert!(tmux.wait_for("ended"), "no end: {}", tmux.capture());
    let pane = tmux.capture();
    assert!(pane.contains("LATCH-EXIT:"), "{pane}");
    assert_restored(&stty_file);
    assert_eq!(
        fd_flags(shell, 0) & O_NONBLOCK,
        0,
        "stdin left non-blocking"
    );
}

/// The terminal's reader (the tmux server) SIGSTOPped during a flood: the daemon
/// never blocks on the terminal. While tmux is still stopped the program finishes
/// its 20 MB and another client's `peek` sees it; once tmux runs again the
/// attached terminal is redrawn from the screen and detaches normally.
#[test]
fn a_stopped_terminal_during_a_flood_blocks_nothing() {
    let tmux = Tmux::new("st");
    let reg = Reg::new();
    reg.new_session(
        "st",
        &[
            "sh",
            "-c",
            "read x; head -c 20000000 /dev/zero | tr '\\0' x; echo; echo FLOOD-DONE; sleep 600",
        ],
    );
    tmux.start(&attach_cmd(&reg, "st"), 80, 24, None);
    let (daemon, tty) = (daemon_pid(&reg, "st"), pane_tty(&tmux));
    assert_eq!(wait_fds(daemon, &tty, 1), 1, "no terminal passed");
    let server = {
        let out = tmux.run(&["display-message", "-p", "#{pid}"]);
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse::<i32>()
            .unwrap()
    };
    let server = nix::unistd::Pid::from_raw(server);
    nix::sys::signal::kill(server, nix::sys::signal::Signal::SIGSTOP).unwrap();
    // From here no tmux command until SIGCONT: the server would not answer.
    let sent = reg.run(&["send", "st", "go\n"]);
    let done = reg.run(&["peek", "st", "--wait", "FLOOD-DONE", "--timeout", "120"]);
    // The state follows the command name, which may hold spaces ("tmux: server").
    let stat = std::fs::read_to_string(format!("/proc/{server}/stat")).unwrap();
    let still_stopped = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        == Some("T");
    nix::sys::signal::kill(server, nix::sys::signal::Signal::SIGCONT).unwrap();
    assert_eq!(sent.code, 0, "{sent:?}");
    assert_eq!(done.code, 0, "the flood did not finish: {done:?}");
    assert!(still_stopped, "tmux ran again before the flood finished");
    // The terminal catches up (a redraw of the screen) and detaches.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !tmux.capture().contains("FLOOD-DONE") {
        assert!(Instant::now() < deadline, "no redraw: {}", tmux.capture());
        std::thread::sleep(Duration::from_millis(50));
    }
    tmux.run(&["send-keys", "-t", "t", "C-\\"]);
    assert!(tmux.wait_for("ended"), "no detach: {}", tmux.capture());
    assert!(
        tmux.capture().contains("LATCH-EXIT:0"),
        "{}",
        tmux.capture()
    );
    assert_eq!(fds_to(daemon, &tty), 0);
}

/// `latch attach &` from an interactive shell is not in its terminal's foreground
/// group: it passes nothing, and the keys typed next reach the shell, not the
/// session.
#[test]
fn a_background_attach_does_not_take_the_terminal() {
    let tmux = Tmux::new("bg");
    let reg = Reg::new();
    reg.new_session("bg", &["cat"]);
    let pid_file: PathBuf = reg.root.parent().unwrap().join("bg.pid");
    tmux.start("sh -i", 80, 24, None);
    let line = format!(
        "{} & echo $! > {}",
        attach_cmd(&reg, "bg"),
        pid_file.display()
    );
    tmux.run(&["send-keys", "-t", "t", &line, "Enter"]);
    let deadline = Instant::now() + Duration::from_secs(20);
    let pid: i32 = loop {
        if let Some(p) = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            break p;
        }
        assert!(
            Instant::now() < deadline,
            "no background job: {}",
            tmux.capture()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    tmux.run(&["send-keys", "-t", "t", "echo fg-$((6*7))", "Enter"]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !tmux.capture().lines().any(|l| l == "fg-42") {
        assert!(
            Instant::now() < deadline,
            "the shell got no keys: {}",
            tmux.capture()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (daemon, tty) = (daemon_pid(&reg, "bg"), pane_tty(&tmux));
    assert_eq!(
        fds_to(daemon, &tty),
        0,
        "a background attach passed its terminal"
    );
    let screen = reg.run(&["peek", "bg"]).stdout;
    assert!(
        !screen.contains("fg-"),
        "the session got the shell's keys: {screen}"
    );
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
}

/// Descriptors a peer passes that the daemon did not ask for are closed: before
/// BIND, a second one with ATTACH_TERMINAL, and one that is not a terminal
/// (refused with `invalid-argument`, the connection closed, nothing kept).
#[test]
fn passed_descriptors_are_checked_and_extras_closed() {
    use latch_wire::{ClientCodec, ClientFrame, ErrorCode, Incarnation, ServerFrame, SessionId};
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    use std::io::{IoSlice, Read};
    use std::os::fd::AsRawFd;

    let reg = Reg::new();
    let inc = reg.new_session("hp", &["sh"]);
    let daemon = daemon_pid(&reg, "hp");
    let pty = nix::pty::openpty(None, None).unwrap();
    let slave = std::fs::read_link(format!("/proc/self/fd/{}", pty.slave.as_raw_fd())).unwrap();
    let slave = slave.to_string_lossy().into_owned();
    let (pipe_r, _pipe_w) = nix::unistd::pipe().unwrap();
    let pipe = std::fs::read_link(format!("/proc/self/fd/{}", pipe_r.as_raw_fd())).unwrap();
    let pipe = pipe.to_string_lossy().into_owned();

    let connect = || {
        let s = std::os::unix::net::UnixStream::connect(reg.path("hp.sock")).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s
    };
    let mut codec = ClientCodec::default();
    let frame = |codec: &mut ClientCodec, f: ClientFrame| {
        let mut buf = bytes::BytesMut::new();
        codec.encode_client(&f, &mut buf).unwrap();
        buf
    };
    let send = |s: &std::os::unix::net::UnixStream, bytes: &[u8], fds: &[i32]| {
        let cmsg = [ControlMessage::ScmRights(fds)];
        let cmsgs: &[ControlMessage<'_>] = if fds.is_empty() { &[] } else { &cmsg };
        let n = sendmsg::<()>(
            s.as_raw_fd(),
            &[IoSlice::new(bytes)],
            cmsgs,
            MsgFlags::empty(),
            None,
        )
        .unwrap();
        assert_eq!(n, bytes.len());
    };
    // Frames up to the first that `until` accepts; what follows stays in `buf`.
    let read_until = |s: &mut std::os::unix::net::UnixStream,
                      codec: &mut ClientCodec,
                      buf: &mut bytes::BytesMut,
                      until: &dyn Fn(&ServerFrame) -> bool| {
        let mut got = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            while let Some(f) = codec.decode_server(buf).unwrap() {
                let done = until(&f);
                got.push(f);
                if done {
                    return got;
                }
            }
            let n = s.read(&mut chunk).unwrap();
            if n == 0 {
                return got;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    };
    let welcome = |f: &ServerFrame| matches!(f, ServerFrame::Welcome { .. });
    let bound = |f: &ServerFrame| matches!(f, ServerFrame::Bound { .. });
    let hello = ClientFrame::Hello {
        versions: latch_wire::SUPPORTED,
        client: "fd-test".into(),
    };
    let bind = ClientFrame::Bind {
        id: SessionId::new("hp").unwrap(),
        incarnation: Incarnation::parse(&inc).unwrap(),
    };
    let req = |read_only| {
        ClientFrame::AttachTerminal(latch_wire::TerminalRequest {
            rows: 24,
            cols: 80,
            read_only,
            detach_key: Some(0x1c),
            history: bytes::Bytes::new(),
        })
    };

    // Before BIND: closed at once; the daemon keeps nothing.
    let mut s = connect();
    send(
        &s,
        &frame(&mut codec, hello.clone()),
        &[pty.slave.as_raw_fd()],
    );
    let mut buf = bytes::BytesMut::new();
    let got = read_until(&mut s, &mut codec, &mut buf, &welcome);
    assert!(matches!(got[..], [ServerFrame::Welcome { .. }]), "{got:?}");
    assert_eq!(
        fds_to(daemon, &slave),
        0,
        "a descriptor passed before BIND was kept"
    );
    drop(s);

    // A pipe is not a terminal: refused, and closed.
    let mut codec = ClientCodec::default();
    let mut s = connect();
    send(&s, &frame(&mut codec, hello.clone()), &[]);
    send(&s, &frame(&mut codec, bind.clone()), &[]);
    let mut buf = bytes::BytesMut::new();
    let _ = read_until(&mut s, &mut codec, &mut buf, &bound);
    send(&s, &frame(&mut codec, req(true)), &[pipe_r.as_raw_fd()]);
    let got = read_until(&mut s, &mut codec, &mut buf, &|_| true);
    assert!(
        matches!(
            &got[..],
            [ServerFrame::Error {
                code: ErrorCode::InvalidArgument,
                ..
            }]
        ),
        "{got:?}"
    );
    assert_eq!(
        wait_fds(daemon, &pipe, 0),
        0,
        "the daemon kept a passed pipe"
    );
    drop(s);

    // Two descriptors with the frame: the first is used, the second closed; the
    // terminal itself goes once the connection detaches.
    let mut codec = ClientCodec::default();
    let mut s = connect();
    send(&s, &frame(&mut codec, hello), &[]);
    send(&s, &frame(&mut codec, bind), &[]);
    let mut buf = bytes::BytesMut::new();
    let _ = read_until(&mut s, &mut codec, &mut buf, &bound);
    send(
        &s,
        &frame(&mut codec, req(true)),
        &[pty.slave.as_raw_fd(), pipe_r.as_raw_fd()],
    );
    let got = read_until(&mut s, &mut codec, &mut buf, &|_| true);
    assert!(matches!(got[..], [ServerFrame::Geometry { .. }]), "{got:?}");
    assert_eq!(fds_to(daemon, &slave), 1, "the terminal is not held once");
    assert_eq!(fds_to(daemon, &pipe), 0, "the extra descriptor was kept");
    send(&s, &frame(&mut codec, ClientFrame::Detach), &[]);
    let got = read_until(&mut s, &mut codec, &mut buf, &|f| {
        matches!(f, ServerFrame::Detached)
    });
    assert!(
        got.iter().any(|f| matches!(f, ServerFrame::Detached)),
        "{got:?}"
    );
    assert_eq!(fds_to(daemon, &slave), 0, "the terminal outlived DETACHED");
}
