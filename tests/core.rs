//! End to end: the core loop with the real binary, real PTYs, real daemons
//! (SPEC.md §11 I1, 2, 3, 5, 9).

// Pids read back from JSON records always fit; the casts are checked by the kernel.
#![allow(clippy::cast_possible_truncation)]

mod support;

use latch_wire::{AttachRequest, PeekRequest, Size};
use std::time::Duration;

use latch_client::AttachEvent;
use latch_wire::{ErrorCode, Incarnation, SessionId};
use support::{alive, client, sref, wait_process_exit, Reg};

/// Reads attach events until `pred` holds for the accumulated output.
fn read_until(reader: &mut latch_client::AttachReader, pred: impl Fn(&str) -> bool) -> String {
    reader.set_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut seen = Vec::new();
    loop {
        match reader.next_event().unwrap() {
            AttachEvent::Output(b) => {
                seen.extend_from_slice(&b);
                if pred(&String::from_utf8_lossy(&seen)) {
                    return String::from_utf8_lossy(&seen).into_owned();
                }
            }
            AttachEvent::Geometry { .. } => {}
            other => panic!(
                "unexpected {other:?}; output so far {:?}",
                String::from_utf8_lossy(&seen)
            ),
        }
    }
}

#[test]
fn new_peek_send_and_exit_status() {
    let reg = Reg::new();
    let inc = reg.new_session(
        "s1",
        &[
            "sh",
            "-c",
            "echo hello-from-s1; read x; echo got:$x; exit 3",
        ],
    );
    assert!(Incarnation::parse(&inc).is_ok());
    let screen = reg.wait_for("s1", "hello-from-s1");
    assert!(screen.contains("hello-from-s1"));

    let r = reg.run(&["send", "s1", "abc\n"]);
    r.ok();
    reg.wait_exit("s1");
    let rec = reg.record("s1");
    assert_eq!(rec["exit"]["code"], 3, "{rec}");
    assert_eq!(rec["incarnation"], inc.as_str());
    // The daemon removed its own socket when the session ended.
    assert!(!reg.path("s1.sock").exists());
    let ls = reg.run(&["ls", "--json"]).json();
    assert_eq!(ls[0]["status"], "exited");
    assert_eq!(ls[0]["exitCode"], 3);
}

#[test]
fn input_reaches_the_program_and_output_reaches_two_clients() {
    let reg = Reg::new();
    let inc = reg.new_session("cat", &["cat"]);
    let c = client(&reg);
    let s = sref("cat", &inc);
    let mut a = c
        .connect(&s)
        .unwrap()
        .attach(24, 80, latch_client::AttachMode::ReadWrite)
        .unwrap();
    let mut b = c
        .connect(&s)
        .unwrap()
        .attach(24, 80, latch_client::AttachMode::ReadOnly)
        .unwrap();
    a.writer.input(b"ping-123\r").unwrap();
    let seen_a = read_until(&mut a.reader, |o| o.contains("ping-123"));
    let seen_b = read_until(&mut b.reader, |o| o.contains("ping-123"));
    assert!(seen_a.contains("ping-123") && seen_b.contains("ping-123"));
}

#[test]
fn reattach_replays_the_screen_before_live_output() {
    let reg = Reg::new();
    let inc = reg.new_session("re", &["sh", "-c", "echo before-detach; cat"]);
    reg.wait_for("re", "before-detach");
    let c = client(&reg);
    let s = sref("re", &inc);
    let first = c
        .connect(&s)
        .unwrap()
        .attach(24, 80, latch_client::AttachMode::ReadWrite)
        .unwrap();
    assert!(String::from_utf8_lossy(&first.screen).contains("before-detach"));
    let mut w = first.writer;
    w.detach().unwrap();
    let mut r = first.reader;
    r.set_timeout(Some(Duration::from_secs(10))).unwrap();
    loop {
        match r.next_event().unwrap() {
            AttachEvent::Detached | AttachEvent::Closed => break,
            _ => {}
        }
    }
    // Re-attach: the earlier screen comes first, then live output.
    let mut again = c
        .connect(&s)
        .unwrap()
        .attach(24, 80, latch_client::AttachMode::ReadWrite)
        .unwrap();
    assert!(String::from_utf8_lossy(&again.screen).contains("before-detach"));
    again.writer.input(b"after-reattach\r").unwrap();
    read_until(&mut again.reader, |o| o.contains("after-reattach"));
}

#[test]
fn read_only_client_cannot_write_or_resize() {
    let reg = Reg::new();
    let inc = reg.new_session("ro", &["cat"]);
    let c = client(&reg);
    let s = sref("ro", &inc);
    let mut ro = c
        .connect(&s)
        .unwrap()
        .attach(30, 100, latch_client::AttachMode::ReadOnly)
        .unwrap();
    ro.writer
        .send_frame(&latch_wire::ClientFrame::Input(bytes::Bytes::from_static(
            b"nope\r",
        )))
        .unwrap();
    ro.reader
        .set_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    match ro.reader.next_event().unwrap() {
        AttachEvent::Error { code, .. } => assert_eq!(code, ErrorCode::ForbiddenByPolicy),
        other => panic!("expected a refusal, got {other:?}"),
    }
    ro.writer.resize(10, 10).unwrap();
    match ro.reader.next_event().unwrap() {
        AttachEvent::Error { code, .. } => assert_eq!(code, ErrorCode::ForbiddenByPolicy),
        other => panic!("expected a refusal, got {other:?}"),
    }
    // Nothing reached the program or the size.
    let mut b = c.connect(&s).unwrap();
    let st = b.status().unwrap();
    assert_eq!(
        (st.rows, st.cols),
        (24, 80),
        "read-only client changed the size"
    );
    let screen =
        String::from_utf8_lossy(&b.peek(latch_client::PeekOptions::plain()).unwrap()).into_owned();
    assert!(
        !screen.contains("nope"),
        "read-only input reached the program: {screen:?}"
    );
}

#[test]
fn resize_sets_the_pty_size_the_program_sees() {
    let reg = Reg::new();
    reg.new_session("sz", &["sh", "-c", "read x; stty size; cat"]);
    reg.run(&["resize", "sz", "33", "101"]).ok();
    reg.run(&["send", "sz", "go\n"]).ok();
    reg.wait_for("sz", "33 101");
    let st = reg.run(&["status", "sz", "--json"]).json();
    assert_eq!(st["daemon"]["rows"], 33);
    assert_eq!(st["daemon"]["cols"], 101);
}

/// The replacement race from the seeds: a connection held to daemon A keeps
/// reporting A after the id is reused by B, and a BIND expecting A never reaches B.
#[test]
fn replacement_race_never_reaches_the_successor() {
    let reg = Reg::new();
    let c = client(&reg);
    let inc_a = reg.new_session("job", &["sh", "-c", "echo I-am-A; read x"]);
    reg.wait_for("job", "I-am-A");
    let a = sref("job", &inc_a);
    // Hold a bound connection to A.
    let mut held = c.connect(&a).unwrap();
    assert_eq!(held.status().unwrap().incarnation.to_string(), inc_a);

    // End A and remove it; create B under the same id.
    reg.run(&["kill", "job", "--signal", "KILL", "--wait"]).ok();
    reg.run(&["rm", "job"]).ok();
    let inc_b = reg.new_session("job", &["cat"]);
    assert_ne!(inc_a, inc_b, "a new creation got the old incarnation");
    let b = sref("job", &inc_b);
    let mut probe = c.connect(&b).unwrap();
    let before = probe.status().unwrap();
    let screen_before = probe
        .peek(latch_client::PeekOptions::ansi().with_scope(latch_client::PeekScope::Scrollback))
        .unwrap();

    // A's held connection: its daemon is gone, so it can only fail; it can never
    // report B's identity.
    if let Ok(s) = held.status() {
        assert_eq!(
            s.incarnation.to_string(),
            inc_a,
            "A's connection reported B"
        );
    }

    // A new connection expecting A is refused by B's daemon before any effect.
    match c.connect(&a) {
        Err(latch_client::ClientError::Replaced { .. }) => {}
        other => panic!("BIND expecting A reached B: {other:?}"),
    }
    // Raw protocol: BIND A then ATTACH/PEEK/INPUT/RESIZE on B's socket.
    {
        use std::io::Write;
        let mut sock = std::os::unix::net::UnixStream::connect(reg.path("job.sock")).unwrap();
        let mut codec = latch_wire::ClientCodec::default();
        let mut out = bytes::BytesMut::new();
        let frames = [
            latch_wire::client::ClientHandshake::default().hello(),
            latch_wire::ClientFrame::Bind {
                id: a.id.clone(),
                incarnation: a.incarnation,
            },
            latch_wire::ClientFrame::Attach(AttachRequest {
                rows: 5,
                cols: 5,
                read_only: false,
            }),
            latch_wire::ClientFrame::Input(bytes::Bytes::from_static(b"INJECTED\r")),
            latch_wire::ClientFrame::Resize(Size { rows: 7, cols: 7 }),
            latch_wire::ClientFrame::Peek(PeekRequest {
                plain: true,
                full: false,
            }),
        ];
        for f in &frames {
            codec.encode_client(f, &mut out).unwrap();
        }
        let _ = sock.write_all(&out); // the daemon may close before reading it all
    }
    // A connection expecting B succeeds and sees B unchanged.
    let mut check = c.connect(&b).unwrap();
    let after = check.status().unwrap();
    assert_eq!(after.incarnation.to_string(), inc_b);
    assert_eq!(
        (after.rows, after.cols),
        (before.rows, before.cols),
        "B was resized"
    );
    let screen_after = check
        .peek(latch_client::PeekOptions::ansi().with_scope(latch_client::PeekScope::Scrollback))
        .unwrap();
    assert_eq!(screen_before, screen_after, "B's screen changed");
    assert!(!String::from_utf8_lossy(&screen_after).contains("INJECTED"));
    assert_eq!(after.writers, 0, "an attach expecting A reached B");
}

#[test]
fn effects_before_hello_or_bind_are_refused_and_change_nothing() {
    use latch_wire::{ClientCodec, ClientFrame, ServerFrame};
    use std::io::{Read, Write};
    let reg = Reg::new();
    let inc = reg.new_session("gate", &["cat"]);
    let c = client(&reg);
    let s = sref("gate", &inc);

    let roundtrip = |frames: &[ClientFrame]| -> Vec<ServerFrame> {
        let mut sock = std::os::unix::net::UnixStream::connect(reg.path("gate.sock")).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut codec = ClientCodec::default();
        let mut out = bytes::BytesMut::new();
        for f in frames {
            codec.encode_client(f, &mut out).unwrap();
        }
        sock.write_all(&out).unwrap();
        sock.shutdown(std::net::Shutdown::Write).unwrap();
        let mut all = Vec::new();
        let _ = sock.read_to_end(&mut all);
        let mut buf = bytes::BytesMut::from(&all[..]);
        let mut got = Vec::new();
        while let Ok(Some(f)) = codec.decode_server(&mut buf) {
            got.push(f);
        }
        got
    };
    let hello = latch_wire::client::ClientHandshake::default().hello();
    // Before HELLO: not-negotiated, closed.
    let got = roundtrip(&[ClientFrame::Input(bytes::Bytes::from_static(b"X1\r"))]);
    assert!(
        matches!(
            &got[..],
            [ServerFrame::Error {
                code: ErrorCode::NotNegotiated,
                ..
            }]
        ),
        "{got:?}"
    );
    // After HELLO, before BIND: every effect refused with not-bound.
    let got = roundtrip(&[
        hello.clone(),
        ClientFrame::Input(bytes::Bytes::from_static(b"X2\r")),
        ClientFrame::Resize(Size { rows: 9, cols: 9 }),
        ClientFrame::Peek(PeekRequest {
            plain: true,
            full: false,
        }),
        ClientFrame::Attach(AttachRequest {
            rows: 9,
            cols: 9,
            read_only: false,
        }),
        ClientFrame::Signal { signal: 9 },
        ClientFrame::Status,
    ]);
    let codes: Vec<_> = got
        .iter()
        .filter_map(|f| match f {
            ServerFrame::Error { code, .. } => Some(*code),
            _ => None,
        })
        .collect();
    assert_eq!(codes, vec![ErrorCode::NotBound; 5], "{got:?}");
    // This client speaks version 3: STATUS is answered with STATUS3 (SPEC §4.2).
    assert!(
        matches!(got.last(), Some(ServerFrame::Status3(st)) if st.base.incarnation.to_string() == inc),
        "{got:?}"
    );
    // Wrong, truncated-then-refused, foreign incarnations.
    let wrong = Incarnation::from_parts([9; 16], [9; 16]);
    let got = roundtrip(&[
        hello.clone(),
        ClientFrame::Bind {
            id: s.id.clone(),
            incarnation: wrong,
        },
    ]);
    assert!(
        matches!(
            &got[1..],
            [ServerFrame::Error {
                code: ErrorCode::IncarnationMismatch,
                ..
            }]
        ),
        "{got:?}"
    );
    let got = roundtrip(&[
        hello.clone(),
        ClientFrame::Bind {
            id: SessionId::new("other").unwrap(),
            incarnation: s.incarnation,
        },
    ]);
    assert!(
        matches!(
            &got[1..],
            [ServerFrame::Error {
                code: ErrorCode::IdMismatch,
                ..
            }]
        ),
        "{got:?}"
    );
    // A second BIND is refused.
    let bind = ClientFrame::Bind {
        id: s.id.clone(),
        incarnation: s.incarnation,
    };
    let got = roundtrip(&[hello, bind.clone(), bind]);
    assert!(
        matches!(
            &got[2..],
            [ServerFrame::Error {
                code: ErrorCode::AlreadyBound,
                ..
            }]
        ),
        "{got:?}"
    );
    // Nothing reached the program, and the size is unchanged.
    let mut b = c.connect(&s).unwrap();
    let st = b.status().unwrap();
    assert_eq!((st.rows, st.cols), (24, 80));
    let screen = String::from_utf8_lossy(
        &b.peek(latch_client::PeekOptions::plain().with_scope(latch_client::PeekScope::Scrollback))
            .unwrap(),
    )
    .into_owned();
    assert!(
        !screen.contains("X1") && !screen.contains("X2"),
        "{screen:?}"
    );
    assert!(alive(st.child_pid), "the program was signalled");
}

#[test]
fn expect_mismatch_fails_with_exit_4_and_acts_on_nothing() {
    let reg = Reg::new();
    let inc = reg.new_session("ex", &["cat"]);
    let other = Incarnation::from_parts([1; 16], [2; 16]).to_string();
    for args in [
        vec!["send", "ex", "boom\n", "--expect", other.as_str()],
        vec!["resize", "ex", "5", "5", "--expect", other.as_str()],
        vec!["kill", "ex", "--expect", other.as_str()],
        vec!["peek", "ex", "--expect", other.as_str()],
        vec!["attach", "ex", "--expect", other.as_str()],
    ] {
        let r = reg.run(&args);
        assert_eq!(r.code, 4, "{args:?}: {r:?}");
    }
    let pinned = format!("ex@{other}");
    assert_eq!(reg.run(&["kill", &pinned]).code, 4);
    let st = reg
        .run(&["status", "ex", "--json", "--expect", &inc])
        .json();
    assert_eq!(st["status"], "running");
    assert_eq!(st["daemon"]["rows"], 24);
    assert!(alive(st["childPid"].as_u64().unwrap() as u32));
}

#[test]
fn kill_wait_ends_the_program_through_the_daemon() {
    let reg = Reg::new();
    let inc = reg.new_session("k", &["sleep", "600"]);
    let child = reg.record("k")["child"]["pid"].as_u64().unwrap() as u32;
    let r = reg.run(&["kill", "k", "--wait", "--json", "--expect", &inc]);
    assert_eq!(r.json()["outcome"], "killed", "{r:?}");
    assert!(wait_process_exit(child, Duration::from_secs(5)));
    assert_eq!(
        reg.record("k")["exit"]["signal"],
        1,
        "the default kill hangs the session up"
    );
    // A second kill finds it already exited.
    let r = reg.run(&["kill", "k", "--json"]);
    assert_eq!(r.json()["outcome"], "already-exited", "{r:?}");
    // rm refuses a running session without --force, removes an exited one.
    reg.new_session("k2", &["sleep", "600"]);
    assert_eq!(reg.run(&["rm", "k2"]).code, 9);
    reg.run(&["rm", "k2", "--force"]).ok();
    reg.run(&["rm", "k"]).ok();
    assert!(!reg.path("k.json").exists() && !reg.path("k2.json").exists());
}

#[test]
fn unsafe_roots_and_keys_are_refused() {
    use std::os::unix::fs::PermissionsExt;
    let reg = Reg::new();
    reg.run(&["ls"]).ok(); // creates the root
    std::fs::set_permissions(&reg.root, std::fs::Permissions::from_mode(0o755)).unwrap();
    let r = reg.run(&["ls"]);
    assert_eq!(r.code, 9, "{r:?}");
    assert!(r.stderr.contains("0755"), "{r:?}");
    std::fs::set_permissions(&reg.root, std::fs::Permissions::from_mode(0o700)).unwrap();

    let key = reg.path("registry.key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let r = reg.run(&["ls"]);
    assert_eq!(r.code, 9, "{r:?}");
    assert!(
        r.stderr.contains("registry.key") && r.stderr.contains("0644"),
        "{r:?}"
    );
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();

    nix::unistd::chown(&reg.root, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
    let r = reg.run(&["ls"]);
    assert_eq!(r.code, 9, "{r:?}");
    assert!(r.stderr.contains("owned by uid 65534"), "{r:?}");
    nix::unistd::chown(&reg.root, Some(nix::unistd::Uid::from_raw(0)), None).unwrap();
}

/// A peer with another uid is refused before the daemon reads a byte; the daemon
/// carries on serving its owner.
#[test]
fn other_uid_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let reg = Reg::new();
    let inc = reg.new_session("uid", &["cat"]);
    // Open the path to everyone so the kernel lets the other uid connect at all: the
    // daemon's SO_PEERCRED check is then the only thing standing in the way.
    std::fs::set_permissions(&reg.root, std::fs::Permissions::from_mode(0o711)).unwrap();
    let sock = reg.path("uid.sock");
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    let parent = reg.root.parent().unwrap().to_path_buf();
    std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o711)).unwrap();

    // SAFETY: the child only calls async-signal-safe functions and exits.
    match unsafe { nix::unistd::fork() }.unwrap() {
        nix::unistd::ForkResult::Child => {
            let code = (|| {
                use std::io::{Read, Write};
                nix::unistd::setgid(nix::unistd::Gid::from_raw(65534)).ok()?;
                nix::unistd::setuid(nix::unistd::Uid::from_raw(65534)).ok()?;
                let mut s = std::os::unix::net::UnixStream::connect(&sock).ok()?;
                s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
                let mut out = bytes::BytesMut::new();
                latch_wire::ClientCodec::default()
                    .encode_client(
                        &latch_wire::client::ClientHandshake::default().hello(),
                        &mut out,
                    )
                    .ok()?;
                let _ = s.write_all(&out);
                let mut buf = [0u8; 64];
                // Refused: EOF (or reset) with no reply at all.
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => Some(0),
                    Ok(_) => Some(2),
                }
            })()
            .unwrap_or(3);
            // SAFETY: _exit is async-signal-safe.
            unsafe { libc::_exit(code) };
        }
        nix::unistd::ForkResult::Parent { child } => {
            let status = nix::sys::wait::waitpid(child, None).unwrap();
            assert_eq!(
                status,
                nix::sys::wait::WaitStatus::Exited(child, 0),
                "the other uid got a reply (2) or could not connect (3)"
            );
        }
    }
    std::fs::set_permissions(&reg.root, std::fs::Permissions::from_mode(0o700)).unwrap();
    // The owner is still served.
    let mut b = client(&reg).connect(&sref("uid", &inc)).unwrap();
    assert_eq!(b.status().unwrap().incarnation.to_string(), inc);
}

/// SPEC.md §11 I2: STATUS is authored by the daemon from memory. A's daemon
/// keeps running while its id is reused by B (its record and socket path taken away
/// behind its back); a connection held to A keeps reporting A, never B.
#[test]
fn status_stays_daemon_authored_after_the_id_is_reused() {
    let reg = Reg::new();
    let c = client(&reg);
    let inc_a = reg.new_session("dup", &["cat"]);
    let a = sref("dup", &inc_a);
    let mut held = c.connect(&a).unwrap();
    let created_a = held.status().unwrap().created_at_ms;
    let rec_a = std::fs::read(reg.path("dup.json")).unwrap();
    // Take A's registry entry away while A runs, then create B under the same id.
    std::fs::rename(reg.path("dup.sock"), reg.path("dup-a.sock")).unwrap();
    std::fs::remove_file(reg.path("dup.json")).unwrap();
    let inc_b = reg.new_session("dup", &["cat"]);
    assert_ne!(inc_a, inc_b);
    let s = held.status().unwrap();
    assert_eq!(
        s.incarnation.to_string(),
        inc_a,
        "A's daemon reported B's identity"
    );
    assert_eq!(s.created_at_ms, created_a);
    // Restore A's record under another name so cleanup can prove and stop it.
    let mut v: serde_json::Value = serde_json::from_slice(&rec_a).unwrap();
    v["id"] = "dup-a".into();
    std::fs::write(reg.path("dup-a.json"), serde_json::to_vec(&v).unwrap()).unwrap();
}
