//! The fuzz targets' seed corpus (`fuzz/corpus/<target>/seed-*`), built with the
//! real encoders and pinned here so that it cannot drift from the wire format.
//!
//! The seeds are committed binary files. After a deliberate wire change, rewrite
//! them with
//!
//! ```text
//! LATCH_WRITE_FUZZ_SEEDS=1 cargo test -p latch-wire --test fuzz_seeds
//! ```
//!
//! Input layouts (see `fuzz/fuzz_targets/`):
//!
//! ```text
//! decode:         stream
//! deframe:        n: u8 | n % 16 cut sizes: u8 each | stream
//! state_machine:  policy: u8 (% 3: off, observe, full) | drain mask: u8 | stream
//! ```

use latch_wire::{AttachRequest, PeekRequest, Size};
use std::path::{Path, PathBuf};

use bytes::{Bytes, BytesMut};
use tokio_util::codec::Encoder;

use latch_wire::framing::MAGIC;
use latch_wire::fuzzing::own_ref;
use latch_wire::legacy::LegacyClientFrame;
use latch_wire::{
    ClientCodec, ClientFrame, ErrorCode, ExitStatus, Limits, Outbound, ServerCodec, ServerFrame,
    SUPPORTED,
};

fn client_stream(frames: Vec<ClientFrame>) -> Vec<u8> {
    let mut codec = ClientCodec::default();
    let mut dst = BytesMut::new();
    for f in frames {
        codec.encode(f, &mut dst).expect("encode");
    }
    dst.to_vec()
}

/// HELLO + BIND (the fuzzing identity) + ATTACH: the shortest stream that reaches
/// an effect.
fn strict_handshake() -> Vec<ClientFrame> {
    let own = own_ref();
    vec![
        ClientFrame::Hello {
            versions: SUPPORTED,
            client: "latch".into(),
        },
        ClientFrame::Bind {
            id: own.id,
            incarnation: own.incarnation,
        },
        ClientFrame::Attach(AttachRequest {
            rows: 24,
            cols: 80,
            read_only: false,
        }),
    ]
}

/// The handshake followed by one of every other client frame.
fn strict_session() -> Vec<ClientFrame> {
    let mut frames = strict_handshake();
    frames.extend([
        ClientFrame::Input(Bytes::from_static(b"echo hi\r")),
        ClientFrame::Resize(Size {
            rows: 30,
            cols: 100,
        }),
        ClientFrame::Peek(PeekRequest {
            plain: true,
            full: false,
        }),
        ClientFrame::Status,
        ClientFrame::Ping(1),
        ClientFrame::Signal { signal: 2 },
        ClientFrame::Detach,
    ]);
    frames
}

fn legacy_attach_data() -> Vec<u8> {
    let mut dst = BytesMut::new();
    for f in [
        LegacyClientFrame::Attach(Some((24, 80))),
        LegacyClientFrame::Data(Bytes::from_static(b"echo hi\r")),
    ] {
        f.encode(&mut dst).expect("encode");
    }
    dst.to_vec()
}

/// A daemon's answer, for the client codec inside `decode_any`.
fn server_answer() -> Vec<u8> {
    let own = own_ref();
    let mut codec = ServerCodec::default();
    let mut dst = BytesMut::new();
    for f in [
        ServerFrame::Welcome {
            version: 2,
            limits: Limits {
                max_client_frame: 65_536,
                max_server_frame: 16 << 20,
                client_queue_bytes: 8 << 20,
            },
            server: "latchd".into(),
        },
        ServerFrame::Bound {
            id: own.id,
            incarnation: own.incarnation,
        },
        ServerFrame::Geometry { rows: 24, cols: 80 },
        ServerFrame::Screen(Bytes::from_static(b"\x1b[H\x1b[2J$ ")),
        ServerFrame::Output(Bytes::from_static(b"hi\r\n")),
        ServerFrame::Exit(ExitStatus {
            code: Some(0),
            signal: None,
        }),
        ServerFrame::error(ErrorCode::Draining, "session is shutting down"),
    ] {
        codec.encode(Outbound::Strict(f), &mut dst).expect("encode");
    }
    dst.to_vec()
}

fn cat(prefix: &[u8], stream: &[u8]) -> Vec<u8> {
    let mut v = prefix.to_vec();
    v.extend_from_slice(stream);
    v
}

/// Every seed: (target, file name, bytes).
fn seeds() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let handshake = client_stream(strict_handshake());
    let session = client_stream(strict_session());
    let legacy = legacy_attach_data();
    vec![
        ("decode", "seed-strict-handshake", handshake.clone()),
        ("decode", "seed-strict-session", session.clone()),
        ("decode", "seed-legacy-attach-data", legacy.clone()),
        ("decode", "seed-magic", MAGIC.to_vec()),
        ("decode", "seed-server-answer", server_answer()),
        ("deframe", "seed-strict-whole", cat(&[0], &handshake)),
        ("deframe", "seed-strict-cuts", cat(&[3, 5, 1, 12], &session)),
        ("deframe", "seed-legacy-cuts", cat(&[2, 3, 6], &legacy)),
        ("deframe", "seed-magic", cat(&[1, 4], &MAGIC)),
        ("state_machine", "seed-off-strict", cat(&[0, 0], &session)),
        (
            "state_machine",
            "seed-observe-strict",
            cat(&[1, 0], &session),
        ),
        ("state_machine", "seed-full-strict", cat(&[2, 0], &session)),
        (
            "state_machine",
            "seed-full-strict-draining",
            cat(&[2, 0b1010_1000], &session),
        ),
        ("state_machine", "seed-off-legacy", cat(&[0, 0], &legacy)),
        (
            "state_machine",
            "seed-observe-legacy",
            cat(&[1, 0], &legacy),
        ),
        ("state_machine", "seed-full-legacy", cat(&[2, 0], &legacy)),
        ("state_machine", "seed-magic", cat(&[1, 0], &MAGIC)),
    ]
}

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus")
}

#[test]
fn seed_corpus_matches_the_encoder() {
    let write = std::env::var_os("LATCH_WRITE_FUZZ_SEEDS").is_some();
    let mut stale = Vec::new();
    for (target, name, bytes) in seeds() {
        let path = corpus_dir().join(target).join(name);
        if write {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &bytes).unwrap();
        } else if std::fs::read(&path).ok().as_deref() != Some(&bytes[..]) {
            stale.push(path.display().to_string());
        }
    }
    assert!(
        stale.is_empty(),
        "fuzz seeds missing or stale (rewrite with LATCH_WRITE_FUZZ_SEEDS=1): {stale:?}"
    );
}

#[test]
fn seeds_run_cleanly_through_the_fuzz_entry_points() {
    use latch_wire::fuzzing::{decode_any, deframe_split, drive_state_machine};
    use latch_wire::LegacyPolicy;
    for (target, name, bytes) in seeds() {
        match target {
            "decode" => decode_any(&bytes),
            "deframe" => {
                let (&n, rest) = bytes.split_first().unwrap();
                let (cuts, stream) = rest.split_at(usize::from(n % 16).min(rest.len()));
                deframe_split(stream, cuts);
            }
            "state_machine" => {
                let policy = match bytes[0] % 3 {
                    0 => LegacyPolicy::Off,
                    1 => LegacyPolicy::Observe,
                    _ => LegacyPolicy::Full,
                };
                drive_state_machine(&bytes[2..], policy, bytes[1], std::time::Instant::now());
            }
            other => panic!("{name}: unknown target {other}"),
        }
    }
}
