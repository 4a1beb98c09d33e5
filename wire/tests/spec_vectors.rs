//! SPEC.md §4.5's hex test vectors, checked both ways: every value encodes to the
//! bytes SPEC shows, and those bytes decode back to the value. A client written in
//! another language from SPEC alone can test itself against the same table.
//!
//! `SPEC_VECTORS_PRINT=1 cargo test -p latch-wire --test spec_vectors -- --nocapture`
//! prints the table rows from the code (to regenerate SPEC after a deliberate change).

use bytes::{Bytes, BytesMut};
use latch_wire::framing::{decode_frame, encode_frame};
use latch_wire::legacy::{decode_packet, LegacyClientFrame, LegacyServerFrame};
use latch_wire::limits::{MAX_CLIENT_FRAME, MAX_SERVER_FRAME};
use latch_wire::{AttachRequest, PeekRequest, Size};
use latch_wire::{
    CastInfo, CastRequest, CutFacts, OutputFacts, OutputRange, ShellFacts, ShellPhase, Status3,
};
use latch_wire::{
    ClientFrame, ErrorCode, ExitStatus, Incarnation, LegacyPolicy, Limits, Owner, ServerFrame,
    SessionId, StatusReply, VersionRange,
};

const SPEC: &str = include_str!("../../SPEC.md");

fn inc() -> Incarnation {
    Incarnation::from_parts([0x11; 16], [0x22; 16])
}

fn id() -> SessionId {
    SessionId::new("s1").unwrap()
}

fn client_vectors() -> Vec<(&'static str, ClientFrame)> {
    vec![
        (
            "HELLO {versions 2..=2, client \"py\"}",
            ClientFrame::Hello {
                versions: VersionRange::new(2, 2).unwrap(),
                client: "py".into(),
            },
        ),
        ("STATUS", ClientFrame::Status),
        (
            "BIND {id \"s1\", incarnation v1.11…11.22…22}",
            ClientFrame::Bind {
                id: id(),
                incarnation: inc(),
            },
        ),
        (
            "ATTACH {rows 24, cols 80, read_only false}",
            ClientFrame::Attach(AttachRequest {
                rows: 24,
                cols: 80,
                read_only: false,
            }),
        ),
        (
            "PEEK {plain true, full false}",
            ClientFrame::Peek(PeekRequest {
                plain: true,
                full: false,
            }),
        ),
        (
            "INPUT \"ls\\r\"",
            ClientFrame::Input(Bytes::from_static(b"ls\r")),
        ),
        (
            "RESIZE {rows 300, cols 1000}",
            ClientFrame::Resize(Size {
                rows: 300,
                cols: 1000,
            }),
        ),
        ("SIGNAL {signal 2}", ClientFrame::Signal { signal: 2 }),
        ("DETACH", ClientFrame::Detach),
        ("PING 7", ClientFrame::Ping(7)),
        ("STOP {signal 1}", ClientFrame::Stop { signal: 1 }),
        (
            "OUTPUT_SINCE {since 300, max 65536}",
            ClientFrame::OutputSince {
                since: 300,
                max: 65_536,
            },
        ),
        ("LEASE", ClientFrame::Lease),
        ("RELEASE", ClientFrame::Release),
        ("COMMANDS {last 1000}", ClientFrame::Commands { last: 1000 }),
        (
            "CAST_START {file \"/c\", max_bytes 1000}",
            ClientFrame::CastStart(CastRequest {
                file: "/c".into(),
                max_bytes: Some(1000),
            }),
        ),
        ("CASTS {stop true}", ClientFrame::Casts { stop: true }),
        (
            "ATTACH_TERMINAL {rows 24, cols 80, read_only false, detach_key 0x1c, history \"h\"}",
            ClientFrame::AttachTerminal(latch_wire::TerminalRequest {
                rows: 24,
                cols: 80,
                read_only: false,
                detach_key: Some(0x1c),
                history: Bytes::from_static(b"h"),
            }),
        ),
        (
            "ATTACH_TERMINAL {rows 0, cols 0, read_only true, detach_key none, history \"\"}",
            ClientFrame::AttachTerminal(latch_wire::TerminalRequest {
                rows: 0,
                cols: 0,
                read_only: true,
                detach_key: None,
                history: Bytes::new(),
            }),
        ),
    ]
}

fn server_vectors() -> Vec<(&'static str, ServerFrame)> {
    vec![
        (
            "WELCOME {version 2, limits {65536, 16777216, 8388608}, server \"d\"}",
            ServerFrame::Welcome {
                version: 2,
                limits: Limits {
                    max_client_frame: 65_536,
                    max_server_frame: 16_777_216,
                    client_queue_bytes: 8_388_608,
                },
                server: "d".into(),
            },
        ),
        (
            "STATUS {s1, v1.11…11.22…22, pids 100 101, 24x80, cursor 0 5, writers 1, readers 0, created 1700000000000, exit none, draining false, observe, owner \"A\"}",
            ServerFrame::Status(Box::new(status_base())),
        ),
        (
            "BOUND {id \"s1\", incarnation v1.11…11.22…22}",
            ServerFrame::Bound {
                id: id(),
                incarnation: inc(),
            },
        ),
        (
            "GEOMETRY {rows 24, cols 80}",
            ServerFrame::Geometry { rows: 24, cols: 80 },
        ),
        ("SCREEN \"hi\"", ServerFrame::Screen(Bytes::from_static(b"hi"))),
        ("OUTPUT \"ok\\n\"", ServerFrame::Output(Bytes::from_static(b"ok\n"))),
        (
            "EXIT {code 3, signal none}",
            ServerFrame::Exit(ExitStatus {
                code: Some(3),
                signal: None,
            }),
        ),
        (
            "EXIT {code none, signal 9}",
            ServerFrame::Exit(ExitStatus {
                code: None,
                signal: Some(9),
            }),
        ),
        (
            "ERROR {code 5, detail \"x\"}",
            ServerFrame::error(ErrorCode::IncarnationMismatch, "x"),
        ),
        ("PONG 7", ServerFrame::Pong(7)),
        ("DETACHED", ServerFrame::Detached),
        (
            "STATUS3 {STATUS as above but owner none, output 300, last output 1700000000500, running \"ls\", cwd none, last exit 1}",
            ServerFrame::Status3(Box::new(Status3 {
                base: StatusReply {
                    owner: None,
                    ..status_base()
                },
                output: OutputFacts {
                    output_cursor: 300,
                    last_output_ms: Some(1_700_000_000_500),
                    shell: ShellFacts {
                        state: ShellPhase::Running,
                        command: Some("ls".into()),
                        cwd: None,
                        last_exit: Some(1),
                    },
                },
            })),
        ),
        (
            "OUTPUT_RANGE {start 298, dropped 2, end 300, \"ok\"}",
            ServerFrame::OutputRange(OutputRange {
                start: 298,
                dropped: 2,
                end: 300,
                bytes: Bytes::from_static(b"ok"),
            }),
        ),
        (
            "CUT {cursor 300, prompt, command none, cwd \"/\", last exit 0}",
            ServerFrame::Cut(CutFacts {
                cursor: 300,
                shell: ShellFacts {
                    state: ShellPhase::Prompt,
                    command: None,
                    cwd: Some("/".into()),
                    last_exit: Some(0),
                },
            }),
        ),
        (
            "LEASED {granted, integration, not marked, paste, not reading, output 300, last output none, prompt, command none, cwd none, last exit none}",
            ServerFrame::Leased(Box::new(latch_wire::LeaseFacts {
                granted: true,
                integration: true,
                marked: false,
                bracketed_paste: true,
                reading: false,
                output: latch_wire::OutputFacts {
                    output_cursor: 300,
                    last_output_ms: None,
                    shell: ShellFacts {
                        state: ShellPhase::Prompt,
                        command: None,
                        cwd: None,
                        last_exit: None,
                    },
                },
            })),
        ),
        (
            "COMMANDS [{command \"ls\", cwd none, start 1, end 2, exit 0, output 10 to 20}]",
            ServerFrame::Commands(vec![latch_wire::CommandBlock {
                command: Some("ls".into()),
                cwd: None,
                start_ms: 1,
                end_ms: Some(2),
                exit: Some(0),
                output_start: 10,
                output_end: Some(20),
            }]),
        ),
        (
            "CASTS [{file \"/c\", bytes 300, start cursor 5, dropped 0, started 1700000000000, max none}]",
            ServerFrame::Casts(vec![CastInfo {
                file: "/c".into(),
                bytes: 300,
                start_cursor: 5,
                dropped_bytes: 0,
                started_at_ms: 1_700_000_000_000,
                max_bytes: None,
            }]),
        ),
    ]
}

fn status_base() -> StatusReply {
    StatusReply {
        id: id(),
        incarnation: inc(),
        daemon_pid: 100,
        child_pid: 101,
        rows: 24,
        cols: 80,
        cursor_row: 0,
        cursor_col: 5,
        writers: 1,
        readers: 0,
        created_at_ms: 1_700_000_000_000,
        exit: None,
        draining: false,
        legacy_policy: LegacyPolicy::Observe,
        owner: Some(Owner::new("A").unwrap()),
    }
}

fn legacy_client_vectors() -> Vec<(&'static str, LegacyClientFrame)> {
    vec![
        (
            "DATA \"a\"",
            LegacyClientFrame::Data(Bytes::from_static(b"a")),
        ),
        ("ATTACH 24x80", LegacyClientFrame::Attach(Some((24, 80)))),
        ("DETACH", LegacyClientFrame::Detach),
        ("RESIZE 50x132", LegacyClientFrame::Resize(Some((50, 132)))),
        (
            "PEEK {plain, full}",
            LegacyClientFrame::Peek {
                plain: true,
                full: true,
            },
        ),
        ("STATUS", LegacyClientFrame::Status),
    ]
}

fn legacy_server_vectors() -> Vec<(&'static str, LegacyServerFrame)> {
    vec![
        (
            "DATA \"ok\"",
            LegacyServerFrame::Data(Bytes::from_static(b"ok")),
        ),
        ("EXIT 137", LegacyServerFrame::Exit(137)),
        (
            "SCREEN \"hi\"",
            LegacyServerFrame::Screen(Bytes::from_static(b"hi")),
        ),
        (
            "STATUS \"{}\"",
            LegacyServerFrame::Status(Bytes::from_static(b"{}")),
        ),
        (
            "GEOMETRY 24x80",
            LegacyServerFrame::Geometry { rows: 24, cols: 80 },
        ),
    ]
}

fn hex(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn unhex(s: &str) -> Vec<u8> {
    s.split_whitespace()
        .map(|x| u8::from_str_radix(x, 16).unwrap())
        .collect()
}

/// The cells (trimmed, backquotes removed) of each row of the first table after
/// `marker` in SPEC.md.
fn spec_table(marker: &str) -> Vec<Vec<String>> {
    let start = SPEC
        .find(marker)
        .unwrap_or_else(|| panic!("SPEC has no {marker:?}"));
    SPEC[start..]
        .lines()
        .skip_while(|l| !l.starts_with("| "))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().trim_matches('`').to_owned())
                .collect()
        })
        .collect()
}

/// SPEC §4.5's rows: (direction, value, hex).
fn spec_rows() -> Vec<(String, String, Vec<u8>)> {
    spec_table("### 4.5 Test vectors")
        .into_iter()
        .map(|c| (c[0].clone(), c[1].clone(), unhex(&c[2])))
        .collect()
}

fn encoded() -> Vec<(&'static str, String, Vec<u8>)> {
    let mut out = Vec::new();
    for (name, f) in client_vectors() {
        let mut b = BytesMut::new();
        encode_frame(&f, &mut b, MAX_CLIENT_FRAME).unwrap();
        out.push(("client", name.to_owned(), b.to_vec()));
    }
    for (name, f) in server_vectors() {
        let mut b = BytesMut::new();
        encode_frame(&f, &mut b, MAX_SERVER_FRAME).unwrap();
        out.push(("server", name.to_owned(), b.to_vec()));
    }
    for (name, f) in legacy_client_vectors() {
        let mut b = BytesMut::new();
        f.encode(&mut b).unwrap();
        out.push(("legacy client", name.to_owned(), b.to_vec()));
    }
    for (name, f) in legacy_server_vectors() {
        let mut b = BytesMut::new();
        f.encode(&mut b).unwrap();
        out.push(("legacy server", name.to_owned(), b.to_vec()));
    }
    out
}

#[test]
fn spec_vectors_match_the_encoder_and_the_decoder() {
    let ours = encoded();
    if std::env::var_os("SPEC_VECTORS_PRINT").is_some() {
        for (dir, name, bytes) in &ours {
            println!("| {dir} | `{name}` | `{}` |", hex(bytes));
        }
    }
    let spec = spec_rows();
    assert_eq!(spec.len(), ours.len(), "SPEC §4.5 has a row per vector");
    for ((dir, name, bytes), (sdir, sname, sbytes)) in ours.iter().zip(&spec) {
        assert_eq!((*dir, name.as_str()), (sdir.as_str(), sname.as_str()));
        assert_eq!(hex(bytes), hex(sbytes), "{dir} {name}: encoder vs SPEC");
    }
    // And the decoders read SPEC's bytes back to the same values.
    let mut rows = spec.into_iter();
    for (_, f) in client_vectors() {
        let mut b = BytesMut::from(&rows.next().unwrap().2[..]);
        let got: ClientFrame = decode_frame(&mut b, MAX_CLIENT_FRAME).unwrap().unwrap();
        assert_eq!(got, f);
        assert!(b.is_empty());
    }
    for (_, f) in server_vectors() {
        let mut b = BytesMut::from(&rows.next().unwrap().2[..]);
        let got: ServerFrame = decode_frame(&mut b, MAX_SERVER_FRAME).unwrap().unwrap();
        assert_eq!(got, f);
        assert!(b.is_empty());
    }
    for (_, f) in legacy_client_vectors() {
        let mut b = BytesMut::from(&rows.next().unwrap().2[..]);
        let p = decode_packet(&mut b, 1 << 20).unwrap().unwrap();
        assert_eq!(LegacyClientFrame::from_packet(p), f);
    }
    for (_, f) in legacy_server_vectors() {
        let mut b = BytesMut::from(&rows.next().unwrap().2[..]);
        let p = decode_packet(&mut b, 1 << 20).unwrap().unwrap();
        assert_eq!(LegacyServerFrame::from_packet(p), Some(f));
    }
}

/// SPEC §4.5's "Edge cases, decoded" rows: (direction, case, bytes, outcome).
fn spec_edge_rows() -> Vec<(String, String, Vec<u8>, String)> {
    spec_table("**Edge cases, decoded.**")
        .into_iter()
        .map(|c| (c[0].clone(), c[1].clone(), unhex(&c[2]), c[3].clone()))
        .collect()
}

/// The values SPEC's edge-case rows name, by their text there.
fn edge_value(text: &str) -> ClientFrame {
    match text {
        "PING 18446744073709551615" => ClientFrame::Ping(u64::MAX),
        "PING 7" => ClientFrame::Ping(7),
        "RESIZE {rows 65535, cols 1}" => ClientFrame::Resize(Size {
            rows: u16::MAX,
            cols: 1,
        }),
        "SIGNAL {signal -2147483648}" => ClientFrame::Signal { signal: i32::MIN },
        other => panic!("SPEC §4.5 names a value this test does not know: {other}"),
    }
}

#[test]
fn spec_edge_cases_decode_as_spec_says() {
    let rows = spec_edge_rows();
    assert!(rows.len() >= 15, "SPEC §4.5 lists the edge cases");
    for (dir, case, bytes, outcome) in rows {
        let mut b = BytesMut::from(&bytes[..]);
        let got = match dir.as_str() {
            "client" => decode_frame::<ClientFrame>(&mut b, MAX_CLIENT_FRAME)
                .map(|f| f.map(|f| format!("{f:?}"))),
            "server" => decode_frame::<ServerFrame>(&mut b, MAX_SERVER_FRAME)
                .map(|f| f.map(|f| format!("{f:?}"))),
            other => panic!("unknown direction {other}"),
        };
        if outcome == "malformed" {
            let err = got.expect_err(&case);
            assert_eq!(err.error_code(), ErrorCode::Malformed, "{case}: {err:?}");
        } else {
            let want = format!("{:?}", edge_value(&outcome));
            assert_eq!(got.expect(&case).as_deref(), Some(want.as_str()), "{case}");
        }
    }
}
