//! Frames, framing and codecs from the outside (SPEC.md §3, §4, §6, §7).
//!
//! - proptest round trips of every `ClientFrame` / `ServerFrame` variant through
//!   `framing` and through the codec pair;
//! - tables pinning every variant's postcard index, every `ErrorCode` number and
//!   name, and the `LegacyPolicy` indices to SPEC.md;
//! - every codec fed its input split at every byte position, strict and legacy;
//! - rejections: trailing bytes, oversized lengths (before any allocation), unknown
//!   variants, truncation, zero length, bad preambles, legacy and garbage answers.

use bytes::{Bytes, BytesMut};
use latch_wire::{AttachRequest, PeekRequest, Size};
use latch_wire::{CutFacts, OutputFacts, OutputRange, ShellFacts, ShellPhase, Status3};
use proptest::collection::vec;
use proptest::prelude::*;
use tokio_util::codec::{Decoder, Encoder};

use latch_wire::framing::{decode_frame, encode_frame, HEADER_LEN, MAGIC};
use latch_wire::legacy::{
    self, decode_packet, LegacyClientFrame, LegacyServerFrame, LEGACY_DEFAULT_CAP,
    LEGACY_HEADER_LEN,
};
use latch_wire::limits::{MAX_CLIENT_FRAME, MAX_SERVER_FRAME};
use latch_wire::{
    ClientCodec, ClientFrame, CodecError, ErrorCode, ExitStatus, FrameError, Framing, Inbound,
    Incarnation, LegacyPolicy, Limits, Outbound, Owner, ServerCodec, ServerFrame, SessionId,
    StatusReply, VersionRange,
};

// ---------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------

fn session_id() -> impl Strategy<Value = SessionId> {
    "[A-Za-z0-9][A-Za-z0-9._-]{0,63}".prop_map(|s| SessionId::new(s).expect("valid by regex"))
}

fn incarnation() -> impl Strategy<Value = Incarnation> {
    (any::<[u8; 16]>(), any::<[u8; 16]>()).prop_map(|(n, t)| Incarnation::from_parts(n, t))
}

fn version_range() -> impl Strategy<Value = VersionRange> {
    (any::<u16>(), any::<u16>()).prop_map(|(min, max)| VersionRange { min, max })
}

/// Free text, any Unicode, bounded.
fn text() -> impl Strategy<Value = String> {
    ".{0,80}"
}

fn payload() -> impl Strategy<Value = Bytes> {
    vec(any::<u8>(), 0..2048).prop_map(Bytes::from)
}

/// Every code as a wire number: known codes decode to their variant, the rest to
/// `Other(n)`, so the value is canonical and round-trips.
fn error_code() -> impl Strategy<Value = ErrorCode> {
    prop_oneof![
        (1u16..=19).prop_map(ErrorCode::from_u16),
        any::<u16>().prop_map(ErrorCode::from_u16),
    ]
}

fn exit_status() -> impl Strategy<Value = ExitStatus> {
    (any::<Option<i32>>(), any::<Option<i32>>())
        .prop_map(|(code, signal)| ExitStatus { code, signal })
}

fn legacy_policy() -> impl Strategy<Value = LegacyPolicy> {
    prop_oneof![
        Just(LegacyPolicy::Off),
        Just(LegacyPolicy::Observe),
        Just(LegacyPolicy::Full)
    ]
}

fn limits() -> impl Strategy<Value = Limits> {
    (any::<u32>(), any::<u32>(), any::<u32>()).prop_map(|(a, b, c)| Limits {
        max_client_frame: a,
        max_server_frame: b,
        client_queue_bytes: c,
    })
}

fn status_reply() -> impl Strategy<Value = StatusReply> {
    (
        (session_id(), incarnation(), any::<u32>(), any::<u32>()),
        (any::<u16>(), any::<u16>(), any::<u16>(), any::<u16>()),
        (any::<u32>(), any::<u32>(), any::<u64>()),
        (
            proptest::option::of(exit_status()),
            any::<bool>(),
            legacy_policy(),
            proptest::option::of(owner()),
        ),
    )
        .prop_map(
            |(
                (id, incarnation, daemon_pid, child_pid),
                (rows, cols, cursor_row, cursor_col),
                (writers, readers, created_at_ms),
                (exit, draining, legacy_policy, owner),
            )| StatusReply {
                id,
                incarnation,
                daemon_pid,
                child_pid,
                rows,
                cols,
                cursor_row,
                cursor_col,
                writers,
                readers,
                created_at_ms,
                exit,
                draining,
                legacy_policy,
                owner,
            },
        )
}

fn owner() -> impl Strategy<Value = Owner> {
    "[^\\p{Cc}\u{2028}\u{2029}]{1,128}".prop_map(|s| Owner::new(s).unwrap())
}

fn client_frame() -> impl Strategy<Value = ClientFrame> {
    prop_oneof![
        (version_range(), text())
            .prop_map(|(versions, client)| ClientFrame::Hello { versions, client }),
        Just(ClientFrame::Status),
        (session_id(), incarnation())
            .prop_map(|(id, incarnation)| ClientFrame::Bind { id, incarnation }),
        (any::<u16>(), any::<u16>(), any::<bool>()).prop_map(|(rows, cols, read_only)| {
            ClientFrame::Attach(AttachRequest {
                rows,
                cols,
                read_only,
            })
        }),
        (any::<bool>(), any::<bool>())
            .prop_map(|(plain, full)| ClientFrame::Peek(PeekRequest { plain, full })),
        payload().prop_map(ClientFrame::Input),
        (any::<u16>(), any::<u16>())
            .prop_map(|(rows, cols)| ClientFrame::Resize(Size { rows, cols })),
        any::<i32>().prop_map(|signal| ClientFrame::Signal { signal }),
        Just(ClientFrame::Detach),
        any::<u64>().prop_map(ClientFrame::Ping),
        any::<i32>().prop_map(|signal| ClientFrame::Stop { signal }),
    ]
}

fn server_frame() -> impl Strategy<Value = ServerFrame> {
    prop_oneof![
        (any::<u16>(), limits(), text()).prop_map(|(version, limits, server)| {
            ServerFrame::Welcome {
                version,
                limits,
                server,
            }
        }),
        status_reply().prop_map(|s| ServerFrame::Status(Box::new(s))),
        (session_id(), incarnation())
            .prop_map(|(id, incarnation)| ServerFrame::Bound { id, incarnation }),
        (any::<u16>(), any::<u16>()).prop_map(|(rows, cols)| ServerFrame::Geometry { rows, cols }),
        payload().prop_map(ServerFrame::Screen),
        payload().prop_map(ServerFrame::Output),
        exit_status().prop_map(ServerFrame::Exit),
        (error_code(), text()).prop_map(|(code, detail)| ServerFrame::Error { code, detail }),
        any::<u64>().prop_map(ServerFrame::Pong),
        Just(ServerFrame::Detached),
    ]
}

/// Legacy client packets whose decoding gives back the same value (an `Unknown`
/// code must not be one the old protocol defines).
fn legacy_client_frame() -> impl Strategy<Value = LegacyClientFrame> {
    let size = proptest::option::of((any::<u16>(), any::<u16>()));
    prop_oneof![
        payload().prop_map(LegacyClientFrame::Data),
        size.clone().prop_map(LegacyClientFrame::Attach),
        Just(LegacyClientFrame::Detach),
        size.prop_map(LegacyClientFrame::Resize),
        (any::<bool>(), any::<bool>())
            .prop_map(|(plain, full)| LegacyClientFrame::Peek { plain, full }),
        Just(LegacyClientFrame::Status),
        prop_oneof![Just(8u8), Just(9u8), 11u8..=255].prop_map(LegacyClientFrame::Unknown),
    ]
}

fn legacy_server_frame() -> impl Strategy<Value = LegacyServerFrame> {
    prop_oneof![
        payload().prop_map(LegacyServerFrame::Data),
        any::<i32>().prop_map(LegacyServerFrame::Exit),
        payload().prop_map(LegacyServerFrame::Screen),
        payload().prop_map(LegacyServerFrame::Status),
        (any::<u16>(), any::<u16>())
            .prop_map(|(rows, cols)| LegacyServerFrame::Geometry { rows, cols }),
    ]
}

// ---------------------------------------------------------------------------
// Fixed samples: one of every variant
// ---------------------------------------------------------------------------

fn sample_ref() -> (SessionId, Incarnation) {
    (
        SessionId::new("build").unwrap(),
        Incarnation::from_parts([0xab; 16], [0x01; 16]),
    )
}

/// One of every client variant, in index order.
fn all_client_frames() -> Vec<ClientFrame> {
    let (id, incarnation) = sample_ref();
    vec![
        ClientFrame::Hello {
            versions: VersionRange { min: 2, max: 2 },
            client: "latch 0.1".into(),
        },
        ClientFrame::Status,
        ClientFrame::Bind { id, incarnation },
        ClientFrame::Attach(AttachRequest {
            rows: 24,
            cols: 80,
            read_only: true,
        }),
        ClientFrame::Peek(PeekRequest {
            plain: true,
            full: false,
        }),
        ClientFrame::Input(Bytes::from_static(b"ls -l\r")),
        ClientFrame::Resize(Size {
            rows: 50,
            cols: 132,
        }),
        ClientFrame::Signal { signal: 15 },
        ClientFrame::Detach,
        ClientFrame::Ping(u64::MAX),
        ClientFrame::Stop { signal: 9 },
        ClientFrame::OutputSince {
            since: 1 << 40,
            max: 65_536,
        },
        ClientFrame::Lease,
        ClientFrame::Release,
        ClientFrame::Commands { last: 1000 },
        ClientFrame::CastStart(latch_wire::CastRequest {
            file: "/tmp/a.cast".into(),
            max_bytes: None,
        }),
        ClientFrame::Casts { stop: false },
        ClientFrame::AttachTerminal(latch_wire::TerminalRequest {
            rows: 24,
            cols: 80,
            read_only: false,
            detach_key: Some(0x1c),
            history: bytes::Bytes::from_static(b"h"),
        }),
        ClientFrame::Reserved18,
        ClientFrame::Reserved19,
        ClientFrame::Capture { full: true },
    ]
}

/// One of every server variant, in index order.
fn all_server_frames() -> Vec<ServerFrame> {
    let (id, incarnation) = sample_ref();
    vec![
        ServerFrame::Welcome {
            version: 2,
            limits: Limits {
                max_client_frame: 65_536,
                max_server_frame: 16 << 20,
                client_queue_bytes: 8 << 20,
            },
            server: "latchd".into(),
        },
        ServerFrame::Status(Box::new(StatusReply {
            exit: Some(ExitStatus {
                code: None,
                signal: Some(9),
            }),
            legacy_policy: LegacyPolicy::Observe,
            owner: Some(Owner::new("project-a").unwrap()),
            ..sample_status()
        })),
        ServerFrame::Bound { id, incarnation },
        ServerFrame::Geometry { rows: 24, cols: 80 },
        ServerFrame::Screen(Bytes::from_static(b"\x1b[H\x1b[2Jhello")),
        ServerFrame::Output(Bytes::from_static(b"output\r\n")),
        ServerFrame::Exit(ExitStatus {
            code: Some(-1),
            signal: None,
        }),
        ServerFrame::error(ErrorCode::IncarnationMismatch, "another creation"),
        ServerFrame::Pong(7),
        ServerFrame::Detached,
        ServerFrame::Status3(Box::new(Status3 {
            base: sample_status(),
            output: OutputFacts {
                output_cursor: 12_345,
                last_output_ms: Some(1_700_000_000_500),
                shell: ShellFacts {
                    state: ShellPhase::Running,
                    command: Some("make -j2".into()),
                    cwd: Some("/tmp".into()),
                    last_exit: Some(130),
                },
            },
        })),
        ServerFrame::OutputRange(OutputRange {
            start: 10,
            dropped: 3,
            end: 12,
            bytes: Bytes::from_static(b"ok"),
        }),
        ServerFrame::Cut(CutFacts {
            cursor: 99,
            shell: ShellFacts {
                state: ShellPhase::Prompt,
                command: None,
                cwd: None,
                last_exit: None,
            },
        }),
        ServerFrame::Leased(Box::new(latch_wire::LeaseFacts {
            granted: true,
            integration: true,
            marked: false,
            bracketed_paste: true,
            reading: false,
            output: OutputFacts {
                output_cursor: 7,
                last_output_ms: None,
                shell: ShellFacts {
                    state: ShellPhase::Prompt,
                    command: None,
                    cwd: Some("/".into()),
                    last_exit: None,
                },
            },
        })),
        ServerFrame::Commands(vec![latch_wire::CommandBlock {
            command: Some("ls".into()),
            cwd: None,
            start_ms: 1,
            end_ms: Some(2),
            exit: Some(0),
            output_start: 10,
            output_end: Some(20),
        }]),
        ServerFrame::Casts(vec![latch_wire::CastInfo {
            file: "/tmp/a.cast".into(),
            bytes: 1,
            start_cursor: 2,
            dropped_bytes: 3,
            started_at_ms: 4,
            max_bytes: Some(5000),
        }]),
        ServerFrame::Reserved16,
        ServerFrame::Reserved17,
        ServerFrame::Reserved18,
        ServerFrame::Capture(Bytes::from_static(b"cells")),
    ]
}

fn sample_status() -> StatusReply {
    let (id, incarnation) = sample_ref();
    StatusReply {
        id,
        incarnation,
        daemon_pid: 100,
        child_pid: 101,
        rows: 24,
        cols: 80,
        cursor_row: 3,
        cursor_col: 4,
        writers: 1,
        readers: 2,
        created_at_ms: 1_700_000_000_000,
        exit: None,
        draining: false,
        legacy_policy: LegacyPolicy::Full,
        owner: None,
    }
}

fn all_legacy_client_frames() -> Vec<LegacyClientFrame> {
    vec![
        LegacyClientFrame::Attach(Some((24, 80))),
        LegacyClientFrame::Data(Bytes::from_static(b"echo hi\r")),
        LegacyClientFrame::Resize(Some((30, 100))),
        LegacyClientFrame::Peek {
            plain: true,
            full: true,
        },
        LegacyClientFrame::Status,
        LegacyClientFrame::Unknown(9),
        LegacyClientFrame::Attach(None),
        LegacyClientFrame::Resize(None),
        LegacyClientFrame::Data(Bytes::new()),
        LegacyClientFrame::Detach,
    ]
}

fn all_legacy_server_frames() -> Vec<LegacyServerFrame> {
    vec![
        LegacyServerFrame::Geometry { rows: 24, cols: 80 },
        LegacyServerFrame::Screen(Bytes::from_static(b"screen")),
        LegacyServerFrame::Data(Bytes::from_static(b"out")),
        LegacyServerFrame::Status(Bytes::from_static(b"{\"pid\":1}")),
        LegacyServerFrame::Data(Bytes::new()),
        LegacyServerFrame::Exit(-2),
    ]
}

// ---------------------------------------------------------------------------
// Stream helpers
// ---------------------------------------------------------------------------

fn client_stream(frames: &[ClientFrame]) -> Vec<u8> {
    let mut codec = ClientCodec::default();
    let mut dst = BytesMut::new();
    for f in frames {
        Encoder::<&ClientFrame>::encode(&mut codec, f, &mut dst).expect("encode");
    }
    dst.to_vec()
}

fn server_stream(frames: &[ServerFrame]) -> Vec<u8> {
    let mut codec = ServerCodec::default();
    let mut dst = BytesMut::new();
    for f in frames {
        codec
            .encode(Outbound::Strict(f.clone()), &mut dst)
            .expect("encode");
    }
    dst.to_vec()
}

fn legacy_client_stream(frames: &[LegacyClientFrame]) -> Vec<u8> {
    let mut dst = BytesMut::new();
    for f in frames {
        f.encode(&mut dst).expect("encode");
    }
    dst.to_vec()
}

fn legacy_server_stream(frames: &[LegacyServerFrame]) -> Vec<u8> {
    let mut codec = ServerCodec::default();
    let mut dst = BytesMut::new();
    for f in frames {
        codec
            .encode(Outbound::Legacy(f.clone()), &mut dst)
            .expect("encode");
    }
    dst.to_vec()
}

/// Decodes everything `src` holds now; `Err` is returned as is.
fn drain<D: Decoder>(
    codec: &mut D,
    src: &mut BytesMut,
    out: &mut Vec<D::Item>,
) -> Result<(), D::Error> {
    while let Some(item) = codec.decode(src)? {
        out.push(item);
    }
    Ok(())
}

/// Feeds `data` in the pieces given by `cuts` (ascending byte offsets), decoding
/// after each piece, and checks that nothing is left over.
fn decode_in_pieces<D: Decoder>(mut codec: D, data: &[u8], cuts: &[usize]) -> Vec<D::Item>
where
    D::Error: std::fmt::Debug,
{
    let mut src = BytesMut::new();
    let mut out = Vec::new();
    let mut start = 0;
    for &cut in cuts.iter().chain(std::iter::once(&data.len())) {
        src.extend_from_slice(&data[start..cut]);
        start = cut;
        drain(&mut codec, &mut src, &mut out).expect("a valid stream decodes at every split");
    }
    assert!(
        src.is_empty(),
        "{} bytes left after a complete stream",
        src.len()
    );
    assert!(
        codec.decode_eof(&mut src).expect("clean eof").is_none(),
        "nothing more at eof"
    );
    out
}

/// The raw legacy server packets a legacy client would read (there is no legacy
/// client codec in this crate: the strict client refuses legacy answers).
#[derive(Debug, Default)]
struct LegacyServerReader;

impl Decoder for LegacyServerReader {
    type Item = LegacyServerFrame;
    type Error = CodecError;
    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<LegacyServerFrame>, CodecError> {
        Ok(decode_packet(src, legacy::LEGACY_MAX_CAP)?
            .map(|p| LegacyServerFrame::from_packet(p).expect("server packet type")))
    }
}

fn strict_inbound(frames: &[ClientFrame]) -> Vec<Inbound> {
    frames.iter().cloned().map(Inbound::Strict).collect()
}

fn legacy_inbound(frames: &[LegacyClientFrame]) -> Vec<Inbound> {
    frames.iter().cloned().map(Inbound::Legacy).collect()
}

// ---------------------------------------------------------------------------
// Round trips
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn client_frame_round_trips_through_framing(f in client_frame()) {
        let mut buf = BytesMut::new();
        encode_frame(&f, &mut buf, MAX_CLIENT_FRAME).unwrap();
        let len = u32::from_be_bytes(buf[..HEADER_LEN].try_into().unwrap());
        prop_assert_eq!(len as usize, buf.len() - HEADER_LEN);
        prop_assert_eq!(decode_frame::<ClientFrame>(&mut buf, MAX_CLIENT_FRAME), Ok(Some(f)));
        prop_assert!(buf.is_empty());
    }

    #[test]
    fn server_frame_round_trips_through_framing(f in server_frame()) {
        let mut buf = BytesMut::new();
        encode_frame(&f, &mut buf, MAX_SERVER_FRAME).unwrap();
        prop_assert_eq!(decode_frame::<ServerFrame>(&mut buf, MAX_SERVER_FRAME), Ok(Some(f)));
        prop_assert!(buf.is_empty());
    }

    #[test]
    fn client_frames_round_trip_through_the_codecs(frames in vec(client_frame(), 0..8)) {
        let bytes = client_stream(&frames);
        if !frames.is_empty() {
            prop_assert_eq!(&bytes[..MAGIC.len()], &MAGIC[..]);
        }
        let mut server = ServerCodec::default();
        let mut src = BytesMut::from(&bytes[..]);
        let mut got = Vec::new();
        drain(&mut server, &mut src, &mut got).unwrap();
        prop_assert_eq!(got, strict_inbound(&frames));
        prop_assert!(src.is_empty());
        let want_framing = if frames.is_empty() { Framing::Undecided } else { Framing::Strict };
        prop_assert_eq!(server.framing(), want_framing);
    }

    #[test]
    fn server_frames_round_trip_through_the_codecs(frames in vec(server_frame(), 0..8)) {
        let bytes = server_stream(&frames);
        let mut client = ClientCodec::default();
        let mut src = BytesMut::from(&bytes[..]);
        let mut got = Vec::new();
        drain(&mut client, &mut src, &mut got).unwrap();
        prop_assert_eq!(got, frames.clone());
        prop_assert!(src.is_empty());
        prop_assert_eq!(client.answered(), !frames.is_empty());
    }

    #[test]
    fn legacy_client_frames_round_trip_through_the_server_codec(
        frames in vec(legacy_client_frame(), 0..8),
    ) {
        // A legacy connection is recognised by its first packet type (0..=10).
        let mut all = vec![LegacyClientFrame::Status];
        all.extend(frames);
        let bytes = legacy_client_stream(&all);
        let mut server = ServerCodec::default();
        let mut src = BytesMut::from(&bytes[..]);
        let mut got = Vec::new();
        drain(&mut server, &mut src, &mut got).unwrap();
        prop_assert_eq!(got, legacy_inbound(&all));
        prop_assert_eq!(server.framing(), Framing::Legacy);
    }

    #[test]
    fn legacy_server_frames_round_trip(frames in vec(legacy_server_frame(), 0..8)) {
        let bytes = legacy_server_stream(&frames);
        prop_assert_eq!(decode_in_pieces(LegacyServerReader, &bytes, &[]), frames);
    }

    /// Random frames, random cut points: same frames as decoding all at once.
    #[test]
    fn strict_streams_decode_identically_at_random_cuts(
        cframes in vec(client_frame(), 1..6),
        sframes in vec(server_frame(), 1..6),
        cut_seeds in vec(any::<prop::sample::Index>(), 0..6),
    ) {
        let cbytes = client_stream(&cframes);
        let mut cuts: Vec<usize> = cut_seeds.iter().map(|i| i.index(cbytes.len() + 1)).collect();
        cuts.sort_unstable();
        prop_assert_eq!(decode_in_pieces(ServerCodec::default(), &cbytes, &cuts), strict_inbound(&cframes));

        let sbytes = server_stream(&sframes);
        let mut cuts: Vec<usize> = cut_seeds.iter().map(|i| i.index(sbytes.len() + 1)).collect();
        cuts.sort_unstable();
        prop_assert_eq!(decode_in_pieces(ClientCodec::default(), &sbytes, &cuts), sframes);
    }

    /// Arbitrary bytes, with and without a valid preamble, never panic a decoder.
    #[test]
    fn arbitrary_bytes_never_panic(data in vec(any::<u8>(), 0..512), strict in any::<bool>()) {
        let mut bytes = if strict { MAGIC.to_vec() } else { Vec::new() };
        bytes.extend_from_slice(&data);
        latch_wire::fuzzing::decode_any(&bytes);
        latch_wire::fuzzing::decode_any(&data);
    }
}

// ---------------------------------------------------------------------------
// Pinned tables (SPEC.md §4, §5, §7)
// ---------------------------------------------------------------------------

/// The first payload byte: postcard's variant index.
fn variant_index<T: serde::Serialize>(value: &T) -> u8 {
    let mut buf = BytesMut::new();
    encode_frame(value, &mut buf, MAX_SERVER_FRAME).unwrap();
    buf[HEADER_LEN]
}

#[test]
fn client_frame_indices_are_pinned() {
    // An exhaustive match: a new variant cannot be added without extending the table.
    fn spec_index(f: &ClientFrame) -> (u8, &'static str) {
        match f {
            ClientFrame::Hello { .. } => (0, "HELLO"),
            ClientFrame::Status => (1, "STATUS"),
            ClientFrame::Bind { .. } => (2, "BIND"),
            ClientFrame::Attach(AttachRequest { .. }) => (3, "ATTACH"),
            ClientFrame::Peek(PeekRequest { .. }) => (4, "PEEK"),
            ClientFrame::Input(_) => (5, "INPUT"),
            ClientFrame::Resize(Size { .. }) => (6, "RESIZE"),
            ClientFrame::Signal { .. } => (7, "SIGNAL"),
            ClientFrame::Detach => (8, "DETACH"),
            ClientFrame::Ping(_) => (9, "PING"),
            ClientFrame::Stop { .. } => (10, "STOP"),
            ClientFrame::OutputSince { .. } => (11, "OUTPUT_SINCE"),
            ClientFrame::Lease => (12, "LEASE"),
            ClientFrame::Release => (13, "RELEASE"),
            ClientFrame::Commands { .. } => (14, "COMMANDS"),
            ClientFrame::CastStart(_) => (15, "CAST_START"),
            ClientFrame::Casts { .. } => (16, "CASTS"),
            ClientFrame::AttachTerminal(_) => (17, "ATTACH_TERMINAL"),
            ClientFrame::Reserved18 => (18, "reserved"),
            ClientFrame::Reserved19 => (19, "reserved"),
            ClientFrame::Capture { .. } => (20, "CAPTURE"),
        }
    }
    let frames = all_client_frames();
    assert_eq!(frames.len(), 21);
    let mut last = None;
    for f in &frames {
        let (want, name) = spec_index(f);
        assert!(last < Some(want), "sample order for {name}");
        last = Some(want);
        assert_eq!(variant_index(f), want, "{name}");
    }
}

#[test]
fn server_frame_indices_are_pinned() {
    fn spec_index(f: &ServerFrame) -> (u8, &'static str) {
        match f {
            ServerFrame::Welcome { .. } => (0, "WELCOME"),
            ServerFrame::Status(_) => (1, "STATUS"),
            ServerFrame::Bound { .. } => (2, "BOUND"),
            ServerFrame::Geometry { .. } => (3, "GEOMETRY"),
            ServerFrame::Screen(_) => (4, "SCREEN"),
            ServerFrame::Output(_) => (5, "OUTPUT"),
            ServerFrame::Exit(_) => (6, "EXIT"),
            ServerFrame::Error { .. } => (7, "ERROR"),
            ServerFrame::Pong(_) => (8, "PONG"),
            ServerFrame::Detached => (9, "DETACHED"),
            ServerFrame::Status3(_) => (10, "STATUS3"),
            ServerFrame::OutputRange(_) => (11, "OUTPUT_RANGE"),
            ServerFrame::Cut(_) => (12, "CUT"),
            ServerFrame::Leased(_) => (13, "LEASED"),
            ServerFrame::Commands(_) => (14, "COMMANDS"),
            ServerFrame::Casts(_) => (15, "CASTS"),
            ServerFrame::Reserved16 => (16, "reserved"),
            ServerFrame::Reserved17 => (17, "reserved"),
            ServerFrame::Reserved18 => (18, "reserved"),
            ServerFrame::Capture(_) => (19, "CAPTURE"),
        }
    }
    let frames = all_server_frames();
    assert_eq!(frames.len(), 20);
    let mut last = None;
    for f in &frames {
        let (want, name) = spec_index(f);
        assert!(last < Some(want), "sample order for {name}");
        last = Some(want);
        assert_eq!(variant_index(f), want, "{name}");
    }
}

#[test]
fn small_frames_are_byte_exact() {
    // A few complete encodings, so a change of serializer cannot go unnoticed.
    let cases: Vec<(ClientFrame, Vec<u8>)> = vec![
        (ClientFrame::Status, vec![0, 0, 0, 1, 1]),
        (ClientFrame::Detach, vec![0, 0, 0, 1, 8]),
        (ClientFrame::Ping(300), vec![0, 0, 0, 3, 9, 0xac, 0x02]),
        (
            ClientFrame::Hello {
                versions: VersionRange { min: 2, max: 2 },
                client: "ab".into(),
            },
            vec![0, 0, 0, 6, 0, 2, 2, 2, b'a', b'b'],
        ),
        (
            ClientFrame::Attach(AttachRequest {
                rows: 24,
                cols: 80,
                read_only: true,
            }),
            vec![0, 0, 0, 4, 3, 24, 80, 1],
        ),
        (ClientFrame::Signal { signal: -1 }, vec![0, 0, 0, 2, 7, 1]),
    ];
    for (frame, bytes) in cases {
        let mut buf = BytesMut::new();
        encode_frame(&frame, &mut buf, MAX_CLIENT_FRAME).unwrap();
        assert_eq!(&buf[..], &bytes[..], "{frame:?}");
    }
    let mut buf = BytesMut::new();
    encode_frame(&ServerFrame::Detached, &mut buf, MAX_SERVER_FRAME).unwrap();
    assert_eq!(&buf[..], &[0, 0, 0, 1, 9]);
}

#[test]
fn error_codes_are_pinned() {
    let table: [(u16, ErrorCode, &str, bool); 20] = [
        (1, ErrorCode::NotNegotiated, "not-negotiated", true),
        (2, ErrorCode::NotBound, "not-bound", false),
        (3, ErrorCode::AlreadyBound, "already-bound", true),
        (4, ErrorCode::IdMismatch, "id-mismatch", true),
        (
            5,
            ErrorCode::IncarnationMismatch,
            "incarnation-mismatch",
            true,
        ),
        (
            6,
            ErrorCode::VersionUnsupported,
            "version-unsupported",
            true,
        ),
        (
            7,
            ErrorCode::ForbiddenByPolicy,
            "forbidden-by-policy",
            false,
        ),
        (8, ErrorCode::Malformed, "malformed", true),
        (9, ErrorCode::FrameTooLarge, "frame-too-large", true),
        (10, ErrorCode::TooSlow, "too-slow", true),
        (11, ErrorCode::AlreadyNegotiated, "already-negotiated", true),
        (12, ErrorCode::Draining, "draining", false),
        (
            13,
            ErrorCode::TooManyConnections,
            "too-many-connections",
            true,
        ),
        (14, ErrorCode::HandshakeTimeout, "handshake-timeout", true),
        (15, ErrorCode::NotAttached, "not-attached", false),
        (16, ErrorCode::Exited, "exited", false),
        (17, ErrorCode::Internal, "internal", false),
        (18, ErrorCode::InvalidArgument, "invalid-argument", false),
        (19, ErrorCode::AlreadyAttached, "already-attached", false),
        (20, ErrorCode::InputFull, "input-full", false),
    ];
    for (n, code, name, fatal) in table {
        assert_eq!(code.to_u16(), n, "{name}");
        assert_eq!(ErrorCode::from_u16(n), code, "{name}");
        assert_eq!(code.name(), name);
        assert_eq!(code.to_string(), name);
        assert_eq!(code.is_fatal(), fatal, "{name}");
        // On the wire: a postcard varint u16, one byte for these.
        assert_eq!(
            postcard::to_allocvec(&code).unwrap(),
            vec![u8::try_from(n).unwrap()]
        );
        let frame = ServerFrame::error(code, "x");
        let mut buf = BytesMut::new();
        encode_frame(&frame, &mut buf, MAX_SERVER_FRAME).unwrap();
        assert_eq!(
            &buf[HEADER_LEN..],
            &[7, u8::try_from(n).unwrap(), 1, b'x'],
            "{name}"
        );
    }
    // Names are distinct.
    let mut names: Vec<&str> = table.iter().map(|t| t.2).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), table.len());
    // Unknown numbers survive decoding as `Other` instead of failing the frame.
    for n in [0u16, 21, 127, 128, 1000, u16::MAX] {
        let code = ErrorCode::from_u16(n);
        assert_eq!(code, ErrorCode::Other(n));
        assert_eq!(code.to_u16(), n);
        assert_eq!(code.name(), "other");
        assert!(!code.is_fatal());
        let bytes = postcard::to_allocvec(&code).unwrap();
        assert_eq!(postcard::from_bytes::<ErrorCode>(&bytes).unwrap(), code);
    }
}

#[test]
fn legacy_policy_indices_are_pinned() {
    let table = [
        (0u8, LegacyPolicy::Off, "off"),
        (1, LegacyPolicy::Observe, "observe"),
        (2, LegacyPolicy::Full, "full"),
    ];
    for (index, policy, name) in table {
        assert_eq!(
            postcard::to_allocvec(&policy).unwrap(),
            vec![index],
            "{name}"
        );
        assert_eq!(
            postcard::from_bytes::<LegacyPolicy>(&[index]).unwrap(),
            policy
        );
        assert_eq!(policy.as_str(), name);
        assert_eq!(LegacyPolicy::parse(name), Some(policy));
    }
    assert_eq!(LegacyPolicy::default(), LegacyPolicy::Observe);
    assert_eq!(LegacyPolicy::parse("Full"), None);
    assert!(postcard::from_bytes::<LegacyPolicy>(&[3]).is_err());
}

#[test]
fn limits_match_spec() {
    use latch_wire::limits::{
        CLIENT_QUEUE_BYTES, HANDSHAKE_TIMEOUT_MS, MAX_CONNECTIONS, MAX_OUTPUT_CHUNK,
    };
    // SPEC.md §8, row by row.
    assert_eq!(MAX_CLIENT_FRAME, 65_536);
    assert_eq!(MAX_SERVER_FRAME, 16_777_216);
    assert_eq!(MAX_OUTPUT_CHUNK, 32_768);
    assert_eq!(HANDSHAKE_TIMEOUT_MS, 5_000);
    assert_eq!(MAX_CONNECTIONS, 64);
    assert_eq!(CLIENT_QUEUE_BYTES, 8_388_608);
    assert_eq!(latch_wire::frame::CLIENT_NAME_MAX_LEN, 64);
    assert_eq!(legacy::LEGACY_MAX_CAP, 33_554_432);
    assert_eq!(LEGACY_DEFAULT_CAP, 1_048_576);
    // SPEC.md §3 and §7.
    assert_eq!(HEADER_LEN, 4);
    assert_eq!(LEGACY_HEADER_LEN, 5);
    assert_eq!(&MAGIC, b"\x89LATCH\r\n");
    assert_eq!(latch_wire::SUPPORTED, VersionRange { min: 2, max: 4 });
    assert_eq!(latch_wire::limits::OUTPUT_RING_BYTES, 1_048_576);
}

#[test]
fn framing_errors_map_to_spec_codes() {
    // SPEC.md §3: zero length, trailing bytes and undecodable payloads are
    // `malformed`; an over-long length is `frame-too-large`. All are fatal.
    let cases = [
        (FrameError::Empty, ErrorCode::Malformed),
        (FrameError::TrailingBytes(1), ErrorCode::Malformed),
        (FrameError::Malformed("x".into()), ErrorCode::Malformed),
        (FrameError::BadOpening, ErrorCode::Malformed),
        (FrameError::LegacyPeer(0), ErrorCode::Malformed),
        (
            FrameError::TooLarge {
                len: u32::MAX,
                max: MAX_CLIENT_FRAME,
            },
            ErrorCode::FrameTooLarge,
        ),
    ];
    for (e, code) in cases {
        assert_eq!(e.error_code(), code, "{e:?}");
        assert!(code.is_fatal(), "{e:?}");
    }
    assert_eq!(
        FrameError::Encode("x".into()).error_code(),
        ErrorCode::Internal
    );
}

// ---------------------------------------------------------------------------
// Split at every byte position
// ---------------------------------------------------------------------------

/// Checks `decode_in_pieces` against the whole-input result for: one byte at a
/// time, and every two-piece cut.
fn check_every_split<D, F>(make: F, data: &[u8], want: &[D::Item])
where
    D: Decoder,
    D::Item: PartialEq + std::fmt::Debug,
    D::Error: std::fmt::Debug,
    F: Fn() -> D,
{
    assert_eq!(decode_in_pieces(make(), data, &[]), want, "whole");
    let every: Vec<usize> = (1..data.len()).collect();
    assert_eq!(
        decode_in_pieces(make(), data, &every),
        want,
        "one byte at a time"
    );
    for i in 0..=data.len() {
        assert_eq!(decode_in_pieces(make(), data, &[i]), want, "cut at {i}");
    }
}

#[test]
fn strict_client_stream_splits_at_every_byte() {
    let frames = all_client_frames();
    let data = client_stream(&frames);
    check_every_split(ServerCodec::default, &data, &strict_inbound(&frames));
}

#[test]
fn strict_server_stream_splits_at_every_byte() {
    let frames = all_server_frames();
    let data = server_stream(&frames);
    check_every_split(ClientCodec::default, &data, &frames);
}

#[test]
fn legacy_client_stream_splits_at_every_byte() {
    let frames = all_legacy_client_frames();
    let data = legacy_client_stream(&frames);
    check_every_split(ServerCodec::default, &data, &legacy_inbound(&frames));
}

#[test]
fn legacy_server_stream_splits_at_every_byte() {
    let frames = all_legacy_server_frames();
    let data = legacy_server_stream(&frames);
    check_every_split(|| LegacyServerReader, &data, &frames);
}

#[test]
fn fuzzing_deframe_split_agrees_on_samples() {
    // The fuzz target's helper must accept what the tests above accept.
    let strict = client_stream(&all_client_frames());
    let legacy = legacy_client_stream(&all_legacy_client_frames());
    for data in [&strict[..], &legacy[..], &MAGIC[..], &[][..]] {
        for cuts in [&[][..], &[0][..], &[1, 2, 3][..], &[7, 0, 9, 255][..]] {
            latch_wire::fuzzing::deframe_split(data, cuts);
        }
    }
}

// ---------------------------------------------------------------------------
// Rejections
// ---------------------------------------------------------------------------

fn frame_err<T: std::fmt::Debug>(r: Result<T, CodecError>) -> FrameError {
    match r {
        Err(CodecError::Frame(e)) => e,
        other => panic!("expected a frame error, got {other:?}"),
    }
}

/// A server codec that has consumed the preamble.
fn strict_server() -> (ServerCodec, BytesMut) {
    let mut codec = ServerCodec::default();
    let mut src = BytesMut::from(&MAGIC[..]);
    assert!(codec.decode(&mut src).unwrap().is_none());
    assert_eq!(codec.framing(), Framing::Strict);
    assert!(src.is_empty());
    (codec, src)
}

/// A client codec that has seen the daemon's preamble.
fn strict_client() -> (ClientCodec, BytesMut) {
    let mut codec = ClientCodec::default();
    let mut src = BytesMut::from(&MAGIC[..]);
    assert!(codec.decode(&mut src).unwrap().is_none());
    assert!(codec.answered());
    (codec, src)
}

/// A frame with `payload` as is, header computed.
fn raw_frame(payload: &[u8]) -> Vec<u8> {
    let mut v = u32::try_from(payload.len()).unwrap().to_be_bytes().to_vec();
    v.extend_from_slice(payload);
    v
}

#[test]
fn trailing_bytes_are_refused_by_both_codecs() {
    // STATUS is [1]; one extra byte inside the declared length.
    let (mut server, mut src) = strict_server();
    src.extend_from_slice(&raw_frame(&[1, 0]));
    assert_eq!(
        frame_err(server.decode(&mut src)),
        FrameError::TrailingBytes(1)
    );

    // PONG(7) is [8, 7]; three extra bytes.
    let (mut client, mut src) = strict_client();
    src.extend_from_slice(&raw_frame(&[8, 7, 1, 2, 3]));
    assert_eq!(
        frame_err(client.decode(&mut src)),
        FrameError::TrailingBytes(3)
    );
}

#[test]
fn oversized_lengths_are_refused_before_any_allocation() {
    for len in [
        MAX_CLIENT_FRAME + 1,
        1 << 24,
        usize::try_from(u32::MAX).unwrap(),
    ] {
        let (mut server, mut src) = strict_server();
        src.extend_from_slice(&u32::try_from(len).unwrap().to_be_bytes());
        let cap = src.capacity();
        assert_eq!(
            frame_err(server.decode(&mut src)),
            FrameError::TooLarge {
                len: u32::try_from(len).unwrap(),
                max: MAX_CLIENT_FRAME
            }
        );
        assert!(
            src.capacity() <= cap,
            "server codec grew its buffer for {len}"
        );
        assert_eq!(
            FrameError::TooLarge { len: 0, max: 0 }.error_code(),
            ErrorCode::FrameTooLarge
        );
    }
    for len in [MAX_SERVER_FRAME + 1, usize::try_from(u32::MAX).unwrap()] {
        let (mut client, mut src) = strict_client();
        src.extend_from_slice(&u32::try_from(len).unwrap().to_be_bytes());
        let cap = src.capacity();
        assert!(matches!(
            frame_err(client.decode(&mut src)),
            FrameError::TooLarge {
                max: MAX_SERVER_FRAME,
                ..
            }
        ));
        assert!(
            src.capacity() <= cap,
            "client codec grew its buffer for {len}"
        );
    }
    // Legacy: over the daemon's 1 MiB cap.
    let mut server = ServerCodec::default();
    let mut src = BytesMut::new();
    src.extend_from_slice(&[0u8]);
    src.extend_from_slice(&u32::try_from(LEGACY_DEFAULT_CAP + 1).unwrap().to_be_bytes());
    let cap = src.capacity();
    assert!(matches!(
        frame_err(server.decode(&mut src)),
        FrameError::TooLarge {
            max: LEGACY_DEFAULT_CAP,
            ..
        }
    ));
    assert!(src.capacity() <= cap);
}

#[test]
fn a_length_at_the_maximum_reserves_no_more_than_the_frame() {
    let (mut server, mut src) = strict_server();
    src.extend_from_slice(&u32::try_from(MAX_CLIENT_FRAME).unwrap().to_be_bytes());
    src.extend_from_slice(&[5]); // INPUT ...
    assert!(server.decode(&mut src).unwrap().is_none());
    assert!(src.capacity() >= HEADER_LEN + MAX_CLIENT_FRAME);
    // BytesMut may round up, but never by more than doubling.
    assert!(src.capacity() <= 2 * (HEADER_LEN + MAX_CLIENT_FRAME));
}

#[test]
fn unknown_variant_indices_are_refused() {
    for index in [10u8, 11, 0x7f] {
        let (mut server, mut src) = strict_server();
        src.extend_from_slice(&raw_frame(&[index]));
        assert!(
            matches!(frame_err(server.decode(&mut src)), FrameError::Malformed(_)),
            "client index {index}"
        );
        let (mut client, mut src) = strict_client();
        src.extend_from_slice(&raw_frame(&[index]));
        assert!(
            matches!(frame_err(client.decode(&mut src)), FrameError::Malformed(_)),
            "server index {index}"
        );
    }
    // A multi-byte varint index is no way around it.
    let (mut server, mut src) = strict_server();
    src.extend_from_slice(&raw_frame(&[0x80, 0x01]));
    assert!(matches!(
        frame_err(server.decode(&mut src)),
        FrameError::Malformed(_)
    ));
    assert_eq!(
        FrameError::Malformed(String::new()).error_code(),
        ErrorCode::Malformed
    );
}

#[test]
fn invalid_field_values_are_refused() {
    // BIND with an id that is not a valid session id.
    let (id, inc) = sample_ref();
    let good = ClientFrame::Bind {
        id,
        incarnation: inc,
    };
    let mut buf = BytesMut::new();
    encode_frame(&good, &mut buf, MAX_CLIENT_FRAME).unwrap();
    let mut payload = buf[HEADER_LEN..].to_vec();
    assert_eq!(&payload[1..7], &[5, b'b', b'u', b'i', b'l', b'd']);
    payload[2] = b'-'; // "-uild": bad first character
    let (mut server, mut src) = strict_server();
    src.extend_from_slice(&raw_frame(&payload));
    assert!(matches!(
        frame_err(server.decode(&mut src)),
        FrameError::Malformed(_)
    ));

    // An incarnation with uppercase hex.
    let mut payload = buf[HEADER_LEN..].to_vec();
    let at = payload.iter().position(|&b| b == b'a').unwrap();
    payload[at] = b'A';
    let (mut server, mut src) = strict_server();
    src.extend_from_slice(&raw_frame(&payload));
    assert!(matches!(
        frame_err(server.decode(&mut src)),
        FrameError::Malformed(_)
    ));

    // A bool that is neither 0 nor 1.
    let (mut server, mut src) = strict_server();
    src.extend_from_slice(&raw_frame(&[4, 2, 0]));
    assert!(matches!(
        frame_err(server.decode(&mut src)),
        FrameError::Malformed(_)
    ));

    // Invalid UTF-8 in HELLO's client name.
    let (mut server, mut src) = strict_server();
    src.extend_from_slice(&raw_frame(&[0, 2, 2, 1, 0xff]));
    assert!(matches!(
        frame_err(server.decode(&mut src)),
        FrameError::Malformed(_)
    ));
}

#[test]
fn truncated_streams_wait_and_never_fail() {
    let frames = all_client_frames();
    let data = client_stream(&frames);
    for i in 0..data.len() {
        let mut codec = ServerCodec::default();
        let mut src = BytesMut::from(&data[..i]);
        let mut got = Vec::new();
        drain(&mut codec, &mut src, &mut got).expect("a prefix is never an error");
        assert!(got.len() <= frames.len());
        assert_eq!(&strict_inbound(&frames)[..got.len()], &got[..]);
        if got.len() < frames.len() {
            // Mid-frame (or mid-preamble): bytes left; at EOF the codec reports
            // the leftover as an IO error rather than inventing a frame.
            let at_boundary = src.is_empty();
            let eof = codec.decode_eof(&mut src);
            if at_boundary {
                assert!(matches!(eof, Ok(None)), "prefix {i}");
            } else {
                assert!(matches!(eof, Err(CodecError::Io(_))), "prefix {i}: {eof:?}");
            }
        }
    }
    let sframes = all_server_frames();
    let data = server_stream(&sframes);
    for i in 0..data.len() {
        let mut codec = ClientCodec::default();
        let mut src = BytesMut::from(&data[..i]);
        let mut got = Vec::new();
        drain(&mut codec, &mut src, &mut got).expect("a prefix is never an error");
        assert_eq!(&sframes[..got.len()], &got[..]);
    }
    let lframes = all_legacy_client_frames();
    let data = legacy_client_stream(&lframes);
    for i in 0..data.len() {
        let mut codec = ServerCodec::default();
        let mut src = BytesMut::from(&data[..i]);
        let mut got = Vec::new();
        drain(&mut codec, &mut src, &mut got).expect("a prefix is never an error");
        assert_eq!(&legacy_inbound(&lframes)[..got.len()], &got[..]);
    }
}

#[test]
fn a_payload_shorter_than_its_fields_is_malformed() {
    // HELLO whose client string announces 9 bytes but the frame holds 1.
    let (mut server, mut src) = strict_server();
    src.extend_from_slice(&raw_frame(&[0, 2, 2, 9, b'a']));
    assert!(matches!(
        frame_err(server.decode(&mut src)),
        FrameError::Malformed(_)
    ));
    // BIND with nothing after the index.
    let (mut server, mut src) = strict_server();
    src.extend_from_slice(&raw_frame(&[2]));
    assert!(matches!(
        frame_err(server.decode(&mut src)),
        FrameError::Malformed(_)
    ));
}

#[test]
fn zero_length_frames_are_refused() {
    let (mut server, mut src) = strict_server();
    src.extend_from_slice(&[0, 0, 0, 0]);
    assert_eq!(frame_err(server.decode(&mut src)), FrameError::Empty);
    let (mut client, mut src) = strict_client();
    src.extend_from_slice(&[0, 0, 0, 0, 1]);
    assert_eq!(frame_err(client.decode(&mut src)), FrameError::Empty);
}

#[test]
fn bad_client_openings_are_refused() {
    let mut bad_magic = MAGIC.to_vec();
    bad_magic[5] = b'X';
    let cases: [&[u8]; 5] = [
        &bad_magic,
        b"\x89PNG\r\n\x1a\n",
        b"GET / HTTP/1.1\r\n",
        &[11, 0, 0, 0, 0],
        &[0xff],
    ];
    for opening in cases {
        let mut codec = ServerCodec::default();
        let mut src = BytesMut::from(opening);
        assert_eq!(
            frame_err(codec.decode(&mut src)),
            FrameError::BadOpening,
            "{opening:?}"
        );
    }
    // A preamble prefix is not yet a decision.
    for n in 0..MAGIC.len() {
        let mut codec = ServerCodec::default();
        let mut src = BytesMut::from(&MAGIC[..n]);
        assert!(codec.decode(&mut src).unwrap().is_none());
        assert_eq!(codec.framing(), Framing::Undecided);
        assert_eq!(src.len(), n, "nothing consumed before the decision");
    }
    // A wrong byte is refused as soon as it arrives, not after eight bytes.
    let mut codec = ServerCodec::default();
    let mut src = BytesMut::from(&b"\x89LX"[..]);
    assert_eq!(frame_err(codec.decode(&mut src)), FrameError::BadOpening);
}

#[test]
fn every_legacy_packet_type_opens_a_legacy_connection() {
    for kind in 0u8..=10 {
        let mut codec = ServerCodec::default();
        let mut src = BytesMut::from(&[kind, 0, 0, 0, 0][..]);
        let got = codec.decode(&mut src).unwrap();
        assert_eq!(codec.framing(), Framing::Legacy);
        assert!(matches!(got, Some(Inbound::Legacy(_))), "{kind}");
    }
    // And a legacy connection stays legacy: a later preamble is just a packet
    // (type 0x89, length "LATC" over the cap) and refused.
    let mut codec = ServerCodec::default();
    let mut src = BytesMut::from(&[7u8, 0, 0, 0, 0][..]);
    src.extend_from_slice(&MAGIC);
    assert_eq!(
        codec.decode(&mut src).unwrap(),
        Some(Inbound::Legacy(LegacyClientFrame::Status))
    );
    assert!(matches!(
        frame_err(codec.decode(&mut src)),
        FrameError::TooLarge { .. }
    ));
}

#[test]
fn a_strict_client_refuses_a_legacy_daemon() {
    for frame in all_legacy_server_frames() {
        let mut bytes = BytesMut::new();
        frame.encode(&mut bytes).unwrap();
        let kind = bytes[0];
        let mut codec = ClientCodec::default();
        assert_eq!(
            frame_err(codec.decode(&mut bytes)),
            FrameError::LegacyPeer(kind)
        );
        assert!(!codec.answered());
        assert_eq!(
            FrameError::LegacyPeer(kind).error_code(),
            ErrorCode::Malformed
        );
    }
    // The decision needs one byte only.
    let mut codec = ClientCodec::default();
    let mut src = BytesMut::from(&[10u8][..]);
    assert_eq!(
        frame_err(codec.decode(&mut src)),
        FrameError::LegacyPeer(10)
    );
}

#[test]
fn a_strict_client_refuses_a_garbage_answer() {
    let mut bad_magic = MAGIC.to_vec();
    bad_magic[7] = b'\n' + 1;
    let cases: [&[u8]; 6] = [
        b"HTTP/1.1 400 Bad Request\r\n",
        &bad_magic,
        // Client packet types are not answers.
        &[1, 0, 0, 0, 0],
        &[2, 0, 0, 0, 0],
        &[6, 0, 0, 0, 1, 0],
        &[0xff; 8],
    ];
    for answer in cases {
        let mut codec = ClientCodec::default();
        let mut src = BytesMut::from(answer);
        assert_eq!(
            frame_err(codec.decode(&mut src)),
            FrameError::BadOpening,
            "{answer:?}"
        );
        assert!(!codec.answered());
    }
}

#[test]
fn encoders_refuse_oversized_frames_and_write_no_frame() {
    let mut codec = ClientCodec::default();
    let mut dst = BytesMut::new();
    let big = ClientFrame::Input(Bytes::from(vec![0u8; MAX_CLIENT_FRAME]));
    let err = Encoder::<ClientFrame>::encode(&mut codec, big, &mut dst).unwrap_err();
    assert!(matches!(
        err,
        CodecError::Frame(FrameError::TooLarge { .. })
    ));
    // Only the preamble went out, so the next frame still follows it correctly.
    assert_eq!(&dst[..], &MAGIC[..]);
    Encoder::<ClientFrame>::encode(&mut codec, ClientFrame::Status, &mut dst).unwrap();
    let mut server = ServerCodec::default();
    assert_eq!(
        server.decode(&mut dst).unwrap(),
        Some(Inbound::Strict(ClientFrame::Status))
    );

    let mut codec = ServerCodec::new(MAX_CLIENT_FRAME, 64, LEGACY_DEFAULT_CAP);
    let mut dst = BytesMut::new();
    let err = codec
        .encode(
            Outbound::Strict(ServerFrame::Output(Bytes::from(vec![0u8; 64]))),
            &mut dst,
        )
        .unwrap_err();
    assert!(matches!(
        err,
        CodecError::Frame(FrameError::TooLarge { .. })
    ));
    assert_eq!(&dst[..], &MAGIC[..]);
}

#[test]
fn the_preamble_is_sent_once() {
    let data = client_stream(&all_client_frames());
    assert_eq!(&data[..MAGIC.len()], &MAGIC[..]);
    assert_eq!(data.windows(MAGIC.len()).filter(|w| *w == MAGIC).count(), 1);
    let data = server_stream(&all_server_frames());
    assert_eq!(&data[..MAGIC.len()], &MAGIC[..]);
    assert_eq!(data.windows(MAGIC.len()).filter(|w| *w == MAGIC).count(), 1);
    // Legacy packets carry no preamble.
    let data = legacy_server_stream(&all_legacy_server_frames());
    assert_ne!(&data[..1], &MAGIC[..1]);
}

#[test]
fn status_owner_is_the_last_field_on_the_wire() {
    // SPEC.md §4.2: `owner Option<string>` follows legacy_policy, so a STATUS
    // payload ends with the owner: 0 (none), or 1, a varint length and the bytes.
    let ServerFrame::Status(mut st) = all_server_frames().swap_remove(1) else {
        panic!("frame 1 is STATUS");
    };
    st.owner = None;
    let none = postcard::to_allocvec(&ServerFrame::Status(st.clone())).unwrap();
    assert_eq!(none.last(), Some(&0));
    st.owner = Some(Owner::new("A").unwrap());
    let some = postcard::to_allocvec(&ServerFrame::Status(st)).unwrap();
    assert_eq!(&some[some.len() - 3..], &[1, 1, b'A']);
    assert_eq!(&some[..some.len() - 3], &none[..none.len() - 1]);
}

/// A legacy connection's codec writes the strict output stream as legacy packets,
/// and nothing for a frame the old framing has no packet for (SPEC.md §7, "One
/// framing per connection").
#[test]
fn a_legacy_connection_writes_the_stream_in_legacy_packets() {
    use latch_wire::legacy::LegacyServerFrame as L;
    let mut codec = ServerCodec::default();
    let mut opening = BytesMut::from(&[7u8, 0, 0, 0, 0][..]);
    assert!(codec.decode_inbound(&mut opening).unwrap().is_some());
    assert_eq!(codec.framing(), Framing::Legacy);
    let killed = ExitStatus {
        code: None,
        signal: Some(15),
    };
    let cases = [
        (
            ServerFrame::Output(Bytes::from_static(b"hi")),
            Some(L::Data(Bytes::from_static(b"hi"))),
        ),
        (
            ServerFrame::Screen(Bytes::from_static(b"s")),
            Some(L::Screen(Bytes::from_static(b"s"))),
        ),
        (
            ServerFrame::Geometry { rows: 24, cols: 80 },
            Some(L::Geometry { rows: 24, cols: 80 }),
        ),
        (ServerFrame::Exit(killed), Some(L::Exit(143))),
        (ServerFrame::error(ErrorCode::TooSlow, "cut off"), None),
        (ServerFrame::Pong(3), None),
        (ServerFrame::Detached, None),
    ];
    for (frame, want) in cases {
        let mut got = BytesMut::new();
        codec
            .encode_outbound(&Outbound::Strict(frame.clone()), &mut got)
            .unwrap();
        let mut expected = BytesMut::new();
        if let Some(packet) = want {
            packet.encode(&mut expected).unwrap();
        }
        assert_eq!(got, expected, "{frame:?}");
    }
}
