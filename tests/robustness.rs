//! End to end: a session keeps a terminal's ordinary promises under heavy and
//! hostile use (SPEC.md §5.6, §8): slow clients are resynchronised, never cut off;
//! memory stays bounded whatever a client does; unread input never blocks control;
//! sizes are capped; idle connections cannot exhaust the daemon; kill ends the whole
//! terminal session; no dead end when the socket is gone.

// Pids read back from JSON records always fit; the casts are checked by the kernel.
#![allow(clippy::cast_possible_truncation)]

mod support;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use latch_client::{AttachEvent, ClientError};
use latch_wire::{ClientCodec, ClientFrame, ErrorCode, SessionId, VersionRange};
use support::{alive, client, sref, wait_process_exit, Reg};

fn pid(v: &serde_json::Value) -> u32 {
    v.as_u64().unwrap() as u32
}

/// Proportional set size of `pid`, in bytes (smaps_rollup).
fn pss(pid: u32) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap();
    text.lines()
        .find(|l| l.starts_with("Pss:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<u64>().ok())
        .unwrap()
        * 1024
}

/// A raw strict connection: MAGIC + HELLO sent, WELCOME not read.
fn raw_hello(reg: &Reg, id: &str) -> UnixStream {
    let mut s = UnixStream::connect(reg.path(&format!("{id}.sock"))).unwrap();
    let mut codec = ClientCodec::default();
    let mut buf = BytesMut::new();
    codec
        .encode_client(
            &ClientFrame::Hello {
                // A version-2 client: its stream has no CUT (SPEC §4.2).
                versions: VersionRange { min: 2, max: 2 },
                client: "robustness-test".into(),
            },
            &mut buf,
        )
        .unwrap();
    s.write_all(&buf).unwrap();
    s
}

/// One encoded frame, without the preamble.
fn frame(f: &ClientFrame) -> Vec<u8> {
    let mut codec = ClientCodec::default();
    let mut buf = BytesMut::new();
    codec
        .encode_client(
            &ClientFrame::Hello {
                versions: VersionRange::new(2, 2).unwrap(),
                client: String::new(),
            },
            &mut buf,
        )
        .unwrap();
    buf.clear();
    codec.encode_client(f, &mut buf).unwrap();
    buf.to_vec()
}

/// Writes `unit` repeatedly without blocking until the peer has stopped reading
/// (the socket stays unwritable for 2 s) or `budget` bytes went out; returns the
/// bytes written.
fn write_until_refused(s: &UnixStream, unit: &[u8], budget: usize) -> usize {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    s.set_nonblocking(true).unwrap();
    let mut block = Vec::new();
    while block.len() < 64 * 1024 {
        block.extend_from_slice(unit);
    }
    let mut sent = 0;
    let mut w = s;
    while sent < budget {
        match w.write(&block) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let mut fds = [PollFd::new(s.as_fd(), PollFlags::POLLOUT)];
                if poll(&mut fds, PollTimeout::from(2000u16)).unwrap() == 0 {
                    break;
                }
            }
            Err(e) => panic!("write: {e}"),
        }
    }
    s.set_nonblocking(false).unwrap();
    sent
}

// ---------------------------------------------------------------------------
// 1. A client that keeps reading is never cut off
// ---------------------------------------------------------------------------

/// A flood the client does not read while it happens: the client falls far behind
/// (20 MB against an 8 MiB bound). When it reads again it gets a fresh screen (a
/// resynchronisation) instead of `too-slow`, then live output on the same
/// connection.
#[test]
fn a_client_that_falls_behind_is_resynchronised_not_cut_off() {
    let reg = Reg::new();
    let inc = reg.new_session(
        "flood",
        &[
            "sh",
            "-c",
            "read go; head -c 20000000 /dev/zero | tr '\\0' x | fold -w 70; \
             echo FLOOD-DONE; read again; echo AFTER-$again; sleep 600",
        ],
    );
    let c = client(&reg);
    let s = sref("flood", &inc);
    let mut attached = c
        .connect(&s)
        .unwrap()
        .attach(24, 80, latch_client::AttachMode::ReadWrite)
        .unwrap();
    attached.writer.input(b"go\n").unwrap();
    // Read nothing until the whole flood has been written by the program.
    reg.wait_for_within("flood", "FLOOD-DONE", 180);
    let mut reader = attached.reader;
    reader.set_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut screens = 0;
    let mut output_bytes = 0usize;
    let mut seen_done = false;
    loop {
        match reader.next_event().unwrap() {
            AttachEvent::Screen(b) => {
                screens += 1;
                seen_done |= String::from_utf8_lossy(&b).contains("FLOOD-DONE");
            }
            AttachEvent::Output(b) => {
                output_bytes += b.len();
                seen_done |= String::from_utf8_lossy(&b).contains("FLOOD-DONE");
            }
            AttachEvent::Geometry { .. } | AttachEvent::Cut(_) => {}
            other => panic!("unexpected {other:?}"),
        }
        if seen_done {
            break;
        }
    }
    assert!(screens >= 1, "no resynchronisation");
    assert!(
        output_bytes < 20_000_000,
        "everything was relayed ({output_bytes} bytes): the client never fell behind"
    );
    // The same connection is live: input reaches the program, output comes back.
    attached.writer.input(b"ok\n").unwrap();
    let mut live = String::new();
    while !live.contains("AFTER-ok") {
        match reader.next_event().unwrap() {
            AttachEvent::Output(b) | AttachEvent::Screen(b) => {
                live.push_str(&String::from_utf8_lossy(&b))
            }
            AttachEvent::Geometry { .. } | AttachEvent::Cut(_) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// The reproduction from the field: `latch attach` on a real terminal (`script`)
/// while the program prints 28 MB of 70-byte lines (bench/robustness.py runs the full 70 MB). The client must never be cut
/// off; it sees the program's end and exits 0.
#[test]
fn attach_on_a_real_terminal_survives_a_burst() {
    let reg = Reg::new();
    let r = reg.run(&[
        "new",
        "-d",
        "--json",
        "--id",
        "burst",
        "--",
        "sh",
        "-c",
        "read go; yes 0123456789012345678901234567890123456789012345678901234567890123456789 \
         | head -n 400000; echo BURST-DONE",
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    let typescript = reg.root.parent().unwrap().join("typescript");
    let attach = format!(
        "{} --root {} attach burst",
        support::latch_bin(),
        reg.root.display()
    );
    let mut script = Command::new("script")
        .args(["-qfec", &attach])
        .arg(&typescript)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script(1) is required");
    // Start the burst once the client is attached (it shows up in status).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let st = reg.run(&["status", "burst", "--json"]).json();
        if st["daemon"]["writers"].as_u64() == Some(1) {
            break;
        }
        assert!(Instant::now() < deadline, "attach never arrived: {st}");
        std::thread::yield_now();
    }
    reg.run(&["send", "burst", "go\n"]).ok();
    let status = script.wait().unwrap();
    let shown = String::from_utf8_lossy(&std::fs::read(&typescript).unwrap()).into_owned();
    assert!(!shown.contains("cut off"), "the client was cut off");
    assert!(
        shown.contains("exited with code 0"),
        "no exit report: {:?}",
        &shown[shown.len().saturating_sub(400)..]
    );
    assert_eq!(status.code(), Some(0), "script exit");
}

/// A client that sends PINGs and never reads the PONGs only fills its own socket:
/// the daemon stops reading it, its memory stays bounded, and other connections
/// are served.
#[test]
fn ping_floods_and_stopped_readers_cost_a_bounded_amount() {
    let reg = Reg::new();
    let inc = reg.new_session(
        "pf",
        &[
            "sh",
            "-c",
            "echo ready; read go; head -c 30000000 /dev/zero | tr '\\0' y | fold -w 70; \
             echo DONE; sleep 600",
        ],
    );
    reg.wait_for("pf", "ready");
    let st = reg.run(&["status", "pf", "--json"]).json();
    let daemon = pid(&st["daemonPid"]);
    let ping = frame(&ClientFrame::Ping(7));
    let mut floods = Vec::new();
    for _ in 0..8 {
        let s = raw_hello(&reg, "pf");
        let sent = write_until_refused(&s, &ping, 64 << 20);
        assert!(
            sent < 16 << 20,
            "the daemon kept reading PINGs it could not answer: {sent} bytes"
        );
        floods.push(s);
    }
    // A stopped attached reader: attached, output flowing, never read.
    let c = client(&reg);
    let stalled = c
        .connect(&sref("pf", &inc))
        .unwrap()
        .attach(24, 80, latch_client::AttachMode::ReadOnly)
        .unwrap();
    reg.run(&["send", "pf", "go\n"]).ok();
    reg.wait_for_within("pf", "DONE", 180);
    let peak = pss(daemon);
    eprintln!(
        "daemon PSS with 8 PING floods and one stalled reader after 30 MB: {:.1} MB",
        peak as f64 / 1e6
    );
    assert!(peak < 80 << 20, "daemon PSS {peak} bytes");
    // Control is served.
    assert_eq!(reg.run(&["status", "pf"]).code, 0);
    drop(stalled);
    drop(floods);
}

/// A client that reads nothing at all for the stall timeout (lowered for the
/// test) while output is pending is cut off; the session carries on.
#[test]
fn a_client_that_reads_nothing_is_cut_off_after_the_stall_timeout() {
    let reg = Reg::new();
    let r = reg
        .cmd()
        .env("LATCH_TEST_STALL_MS", "1500")
        .args([
            "new",
            "-d",
            "--json",
            "--id",
            "st",
            "--",
            "sh",
            "-c",
            "read go; head -c 20000000 /dev/zero | tr '\\0' z; echo; echo DONE; sleep 600",
        ])
        .output()
        .unwrap();
    assert!(r.status.success(), "{r:?}");
    let inc = reg.record("st")["incarnation"].as_str().unwrap().to_owned();
    let c = client(&reg);
    let mut attached = c
        .connect(&sref("st", &inc))
        .unwrap()
        .attach(24, 80, latch_client::AttachMode::ReadWrite)
        .unwrap();
    attached.writer.input(b"go\n").unwrap();
    // Polled with PEEK, which answers and closes: a waiting attachment of its own
    // would be as slow a reader as the one under test on a loaded machine, and be
    // cut off by the lowered stall timeout too.
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    while !reg.run(&["peek", "st", "--plain"]).stdout.contains("DONE") {
        assert!(std::time::Instant::now() < deadline, "DONE never appeared");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Now read: whatever was buffered, then the daemon's close.
    let mut reader = attached.reader;
    reader.set_timeout(Some(Duration::from_secs(30))).unwrap();
    loop {
        match reader.next_event() {
            Ok(AttachEvent::Closed) | Err(_) => break,
            Ok(AttachEvent::Error { code, .. }) => {
                assert_eq!(code, ErrorCode::TooSlow);
                break;
            }
            Ok(_) => {}
        }
    }
    assert_eq!(reg.run(&["status", "st"]).code, 0, "the session carries on");
}

// ---------------------------------------------------------------------------
// 2. Unread input never blocks control
// ---------------------------------------------------------------------------

#[test]
fn unread_input_never_blocks_control() {
    let reg = Reg::new();
    let inc = reg.new_session("deaf", &["sleep", "1000"]);
    let c = client(&reg);
    // An attached typist pastes 3 MB into a program that never reads: only its
    // own connection waits.
    let attached = c
        .connect(&sref("deaf", &inc))
        .unwrap()
        .attach(24, 80, latch_client::AttachMode::ReadWrite)
        .unwrap();
    let mut writer = attached.writer;
    let typist = std::thread::spawn(move || {
        let _ = writer.input(&vec![b'a'; 3 << 20]);
    });
    // Wait until the input queue is full: a one-shot send is refused, typed.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = reg.run(&["send", "deaf", "x"]);
        if r.code == 6 {
            assert!(r.stderr.contains("input"), "{r:?}");
            break;
        }
        assert_eq!(r.code, 0, "{r:?}");
        assert!(Instant::now() < deadline, "the input queue never filled");
    }
    // Control answers: status, peek, a new BIND, and kill --wait.
    assert_eq!(reg.run(&["status", "deaf"]).code, 0);
    assert_eq!(reg.run(&["peek", "deaf"]).code, 0);
    c.connect(&sref("deaf", &inc)).unwrap();
    let r = reg.run(&["kill", "deaf", "--wait", "--json"]);
    assert_eq!(r.json()["outcome"], "killed", "{r:?}");
    typist.join().unwrap();
}

// ---------------------------------------------------------------------------
// 3. Sizes are bounded
// ---------------------------------------------------------------------------

#[test]
fn sizes_over_the_limits_are_refused_on_every_path() {
    let reg = Reg::new();
    let inc = reg.new_session("sz", &["sleep", "600"]);
    let st = reg.run(&["status", "sz", "--json"]).json();
    let daemon = pid(&st["daemonPid"]);
    for (rows, cols) in [("65535", "65535"), ("500", "8000"), ("1001", "10")] {
        let r = reg.run(&["resize", "sz", rows, cols]);
        assert_eq!(r.code, 2, "{rows}x{cols}: {r:?}");
    }
    // The daemon refuses them itself, whatever the client checks.
    let c = client(&reg);
    let mut bound = c.connect(&sref("sz", &inc)).unwrap();
    match bound.resize(1000, 1000) {
        Err(ClientError::Daemon {
            code: ErrorCode::InvalidArgument,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    match c.connect(&sref("sz", &inc)).unwrap().attach(
        u16::MAX,
        u16::MAX,
        latch_client::AttachMode::ReadWrite,
    ) {
        Err(ClientError::Daemon {
            code: ErrorCode::InvalidArgument,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    let st = reg.run(&["status", "sz", "--json"]).json();
    assert_eq!(st["daemon"]["rows"], 24);
    assert_eq!(st["daemon"]["cols"], 80);
    assert!(pss(daemon) < 64 << 20);
    // The largest allowed size is applied.
    reg.run(&["resize", "sz", "1000", "500"]).ok();
    let st = reg.run(&["status", "sz", "--json"]).json();
    assert_eq!(st["daemon"]["rows"], 1000);
    // Creation: the library refuses before any daemon starts.
    let mut new = latch_client::NewSession::default();
    new.id = Some(SessionId::new("big").unwrap());
    new.command = vec!["true".into()];
    new.rows = 60_000;
    new.cols = 60_000;
    match c.create(new) {
        Err(e @ ClientError::Usage(_)) => assert_eq!(e.exit_code(), 2),
        other => panic!("{other:?}"),
    }
    assert!(!reg.path("big.json").exists());
}

// ---------------------------------------------------------------------------
// 4. Idle connections cannot exhaust the daemon
// ---------------------------------------------------------------------------

#[test]
fn idle_connections_cannot_lock_kill_out() {
    let reg = Reg::new();
    reg.new_session("idle", &["sleep", "1000"]);
    let child = pid(&reg.record("idle")["child"]["pid"]);
    // Every slot taken by connections that say HELLO and go silent.
    let mut held = Vec::new();
    for _ in 0..latch_wire::limits::MAX_CONNECTIONS {
        held.push(raw_hello(&reg, "idle"));
    }
    // One more is refused with a typed reason, even though our HELLO met a
    // closed socket.
    let r = reg.run(&["status", "idle"]);
    assert_eq!(r.code, 7, "{r:?}");
    assert!(r.stderr.contains("too-many-connections"), "{r:?}");
    // kill still works: through the program's proven identity.
    let r = reg.run(&["kill", "idle", "--wait", "--json"]);
    assert_eq!(r.json()["outcome"], "killed", "{r:?}");
    assert!(wait_process_exit(child, Duration::from_secs(5)));
    drop(held);
}

#[test]
fn a_negotiated_connection_that_never_binds_is_closed() {
    let reg = Reg::new();
    reg.new_session("nb", &["sleep", "1000"]);
    let mut s = raw_hello(&reg, "nb");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let started = Instant::now();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    // WELCOME, then ERROR handshake-timeout, then the close.
    let mut codec = ClientCodec::default();
    let mut buf = BytesMut::from(&all[..]);
    let mut frames = Vec::new();
    while let Some(f) = codec.decode_server(&mut buf).unwrap() {
        frames.push(f);
    }
    assert!(
        matches!(
            frames.last(),
            Some(latch_wire::ServerFrame::Error {
                code: ErrorCode::HandshakeTimeout,
                ..
            })
        ),
        "{frames:?}"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(latch_wire::limits::IDLE_UNBOUND_MS / 2),
        "closed too early"
    );
}

// ---------------------------------------------------------------------------
// 5. kill ends the whole session
// ---------------------------------------------------------------------------

/// Pids of processes whose session id is `sid`, other than `sid` itself.
fn session_members(sid: u32) -> Vec<u32> {
    latch_registry::proc::session_members(sid)
        .iter()
        .map(|m| m.pid())
        .collect()
}

fn interactive_shell_with_a_background_job(reg: &Reg, id: &str) -> (u32, u32) {
    reg.new_session(id, &["bash", "--norc", "--noprofile", "-i"]);
    let shell = pid(&reg.record(id)["child"]["pid"]);
    reg.run(&[
        "send",
        id,
        "sleep 1003 & echo JOB-STARTED",
        "--keys",
        "Enter",
    ])
    .ok();
    reg.wait_for(id, "JOB-STARTED");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(&job) = session_members(shell).first() {
            return (shell, job);
        }
        assert!(
            Instant::now() < deadline,
            "the background job never started"
        );
        std::thread::yield_now();
    }
}

#[test]
fn kill_with_a_signal_ends_background_jobs_too() {
    let reg = Reg::new();
    let (shell, job) = interactive_shell_with_a_background_job(&reg, "bg");
    let r = reg.run(&["kill", "bg", "--signal", "KILL", "--wait", "--json"]);
    assert_eq!(r.json()["outcome"], "killed", "{r:?}");
    assert!(wait_process_exit(shell, Duration::from_secs(5)));
    assert!(
        wait_process_exit(job, Duration::from_secs(5)),
        "the background job survived"
    );
    assert!(!alive(job));
}

#[test]
fn plain_kill_hangs_up_an_interactive_shell_and_its_jobs() {
    let reg = Reg::new();
    let (shell, job) = interactive_shell_with_a_background_job(&reg, "hup");
    // Interactive bash ignores SIGTERM; the hangup ends it.
    let r = reg.run(&["kill", "hup", "--wait", "--json"]);
    assert_eq!(r.json()["outcome"], "killed", "{r:?}");
    assert!(wait_process_exit(shell, Duration::from_secs(5)));
    assert!(wait_process_exit(job, Duration::from_secs(5)));
}

// ---------------------------------------------------------------------------
// 8. No dead ends
// ---------------------------------------------------------------------------

#[test]
fn kill_and_rm_force_work_when_the_socket_is_gone() {
    let reg = Reg::new();
    reg.new_session("ns", &["sleep", "1000"]);
    let child = pid(&reg.record("ns")["child"]["pid"]);
    std::fs::remove_file(reg.path("ns.sock")).unwrap();
    let r = reg.run(&["kill", "ns", "--wait", "--json"]);
    assert_eq!(r.json()["outcome"], "killed", "{r:?}");
    assert!(wait_process_exit(child, Duration::from_secs(5)));

    reg.new_session("ns2", &["sleep", "1000"]);
    let child = pid(&reg.record("ns2")["child"]["pid"]);
    std::fs::remove_file(reg.path("ns2.sock")).unwrap();
    let r = reg.run(&["rm", "ns2", "--force"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(wait_process_exit(child, Duration::from_secs(5)));
    assert!(!reg.path("ns2.json").exists());
}

#[test]
fn an_unreadable_record_says_how_to_move_it_aside() {
    let reg = Reg::new();
    reg.new_session("bad", &["sleep", "1000"]);
    let path = reg.path("bad.json");
    let good = std::fs::read(&path).unwrap();
    std::fs::write(&path, b"{ not json").unwrap();
    let r = reg.run(&["status", "bad"]);
    assert_eq!(r.code, 7, "{r:?}");
    assert!(r.stderr.contains("mv --"), "{r:?}");
    assert!(r.stderr.contains(path.to_str().unwrap()), "{r:?}");
    std::fs::write(&path, good).unwrap();
}

// ---------------------------------------------------------------------------
// Non-UTF-8 environments and working directories
// ---------------------------------------------------------------------------

#[test]
fn a_non_utf8_environment_is_no_panic_and_a_non_utf8_cwd_is_refused() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let reg = Reg::new();
    let out = reg
        .cmd()
        .env("LATCH_TEST_BAD", OsStr::from_bytes(b"caf\xe9"))
        .args([
            "new",
            "-d",
            "--json",
            "--id",
            "env8",
            "--",
            "sh",
            "-c",
            "echo ${LATCH_TEST_BAD:-unset}; sleep 600",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(reg.wait_for("env8", "unset").contains("unset"));
    let dir = reg.root.parent().unwrap().join(OsStr::from_bytes(b"d\xff"));
    std::fs::create_dir(&dir).unwrap();
    let out = reg
        .cmd()
        .current_dir(&dir)
        .args(["new", "-d", "--id", "cwd8", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("UTF-8"),
        "{out:?}"
    );
    assert!(!reg.path("cwd8.json").exists());
}
