//! The daemon's connection state machine and the client's handshake, in memory
//! (SPEC.md §5, §7; SPEC.md §11 I3).
//!
//! - tables: every frame in every state, with the exact `Out` list and the state
//!   after (error details are checked for style, then blanked for comparison);
//! - draining: the same tables with the documented differences only;
//! - proptest: random mixed strict/legacy sequences under each legacy policy, each
//!   step checked by `fuzzing::check_step` (the central property);
//! - `ClientHandshake`: downgrade, refusals, wrong binding, and a v2 client meeting
//!   a daemon that speaks 2..=3.

use latch_wire::{AttachRequest, PeekRequest, Size};
use std::collections::HashSet;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use proptest::collection::vec;
use proptest::prelude::*;
use tokio_util::codec::{Decoder, Encoder};

use latch_wire::client::{ClientHandshake, HandshakeError, Negotiated};
use latch_wire::fuzzing::{check_step, own_ref, server_conn_at};
use latch_wire::legacy::LegacyClientFrame;
use latch_wire::server::{
    Access, ConnState, Effect, Env, Out, ServerConfig, ServerConn, StatusForm,
};
use latch_wire::{
    ClientCodec, ClientFrame, ErrorCode, Inbound, Incarnation, LegacyPolicy, Limits, Outbound,
    ServerCodec, ServerFrame, SessionId, SessionRef, VersionRange, SUPPORTED,
};

/// A state machine configured as the daemon configures it, accepted now.
fn server_conn(policy: LegacyPolicy) -> ServerConn {
    server_conn_at(policy, Instant::now())
}

const POLICIES: [LegacyPolicy; 3] = [LegacyPolicy::Off, LegacyPolicy::Observe, LegacyPolicy::Full];

const FUZZ_LIMITS: Limits = Limits {
    max_client_frame: 65_536,
    max_server_frame: 16 << 20,
    client_queue_bytes: 8 << 20,
};

// ---------------------------------------------------------------------------
// Frames, by name
// ---------------------------------------------------------------------------

/// Every frame the tables feed, strict then legacy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum F {
    Hello,
    HelloLongName,
    HelloFuture,
    Status,
    BindOwn,
    BindOtherId,
    BindOtherInc,
    AttachRw,
    AttachRo,
    Peek,
    Input,
    Resize,
    ResizeZero,
    Signal,
    SignalZero,
    SignalHigh,
    Stop,
    Detach,
    Ping,
    LData,
    LAttach,
    LAttachNone,
    LDetach,
    LResize,
    LResizeZero,
    LResizeNone,
    LPeek,
    LStatus,
    LUnknown,
}

const STRICT: [F; 19] = [
    F::Hello,
    F::HelloLongName,
    F::HelloFuture,
    F::Status,
    F::BindOwn,
    F::BindOtherId,
    F::BindOtherInc,
    F::AttachRw,
    F::AttachRo,
    F::Peek,
    F::Input,
    F::Resize,
    F::ResizeZero,
    F::Signal,
    F::SignalZero,
    F::SignalHigh,
    F::Stop,
    F::Detach,
    F::Ping,
];

const LEGACY: [F; 10] = [
    F::LData,
    F::LAttach,
    F::LAttachNone,
    F::LDetach,
    F::LResize,
    F::LResizeZero,
    F::LResizeNone,
    F::LPeek,
    F::LStatus,
    F::LUnknown,
];

fn other_incarnation() -> Incarnation {
    Incarnation::from_parts([0x11; 16], [0x23; 16])
}

/// The tables describe version-2 connections (version 3 adds OUTPUT_SINCE and
/// changes nothing else: tests/version3.rs).
fn hello_frame() -> ClientFrame {
    ClientFrame::Hello {
        versions: VersionRange { min: 2, max: 2 },
        client: "test".into(),
    }
}

fn bind_own_frame() -> ClientFrame {
    let own = own_ref();
    ClientFrame::Bind {
        id: own.id,
        incarnation: own.incarnation,
    }
}

impl F {
    fn inbound(self) -> Inbound {
        let own = own_ref();
        let strict = Inbound::Strict;
        let legacy = Inbound::Legacy;
        match self {
            F::Hello => strict(hello_frame()),
            F::HelloLongName => strict(ClientFrame::Hello {
                versions: SUPPORTED,
                client: "x".repeat(65),
            }),
            F::HelloFuture => strict(ClientFrame::Hello {
                versions: VersionRange { min: 5, max: 5 },
                client: "future".into(),
            }),
            F::Status => strict(ClientFrame::Status),
            F::BindOwn => strict(bind_own_frame()),
            F::BindOtherId => strict(ClientFrame::Bind {
                id: SessionId::new("other").unwrap(),
                incarnation: own.incarnation,
            }),
            F::BindOtherInc => strict(ClientFrame::Bind {
                id: own.id,
                incarnation: other_incarnation(),
            }),
            F::AttachRw => strict(ClientFrame::Attach(AttachRequest {
                rows: 24,
                cols: 80,
                read_only: false,
            })),
            F::AttachRo => strict(ClientFrame::Attach(AttachRequest {
                rows: 24,
                cols: 80,
                read_only: true,
            })),
            F::Peek => strict(ClientFrame::Peek(PeekRequest {
                plain: true,
                full: false,
            })),
            F::Input => strict(ClientFrame::Input(Bytes::from_static(b"x"))),
            F::Resize => strict(ClientFrame::Resize(Size {
                rows: 30,
                cols: 100,
            })),
            F::ResizeZero => strict(ClientFrame::Resize(Size { rows: 0, cols: 100 })),
            F::Signal => strict(ClientFrame::Signal { signal: 15 }),
            F::SignalZero => strict(ClientFrame::Signal { signal: 0 }),
            F::SignalHigh => strict(ClientFrame::Signal { signal: 65 }),
            F::Stop => strict(ClientFrame::Stop { signal: 15 }),
            F::Detach => strict(ClientFrame::Detach),
            F::Ping => strict(ClientFrame::Ping(42)),
            F::LData => legacy(LegacyClientFrame::Data(Bytes::from_static(b"y"))),
            F::LAttach => legacy(LegacyClientFrame::Attach(Some((24, 80)))),
            F::LAttachNone => legacy(LegacyClientFrame::Attach(None)),
            F::LDetach => legacy(LegacyClientFrame::Detach),
            F::LResize => legacy(LegacyClientFrame::Resize(Some((30, 100)))),
            F::LResizeZero => legacy(LegacyClientFrame::Resize(Some((0, 0)))),
            F::LResizeNone => legacy(LegacyClientFrame::Resize(None)),
            F::LPeek => legacy(LegacyClientFrame::Peek {
                plain: false,
                full: true,
            }),
            F::LStatus => legacy(LegacyClientFrame::Status),
            F::LUnknown => legacy(LegacyClientFrame::Unknown(9)),
        }
    }
}

// ---------------------------------------------------------------------------
// Expected outputs
// ---------------------------------------------------------------------------

const NEG: ConnState = ConnState::Negotiated { version: 2 };
const BOUND: ConnState = ConnState::Bound {
    version: 2,
    access: Access::Unattached,
};
const RO: ConnState = ConnState::Bound {
    version: 2,
    access: Access::ReadOnly,
};
const RW: ConnState = ConnState::Bound {
    version: 2,
    access: Access::ReadWrite,
};
const L0: ConnState = ConnState::Legacy { attached: false };
const L1: ConnState = ConnState::Legacy { attached: true };
const CLOSED: ConnState = ConnState::Closed;

fn send(f: ServerFrame) -> Out {
    Out::Send(Outbound::Strict(f))
}

/// A refusal as the state machine sends it (detail blanked): fatal codes close.
fn err(code: ErrorCode) -> Vec<Out> {
    let mut v = vec![send(ServerFrame::error(code, ""))];
    if code.is_fatal() {
        v.push(Out::Close);
    }
    v
}

fn eff(e: Effect) -> Vec<Out> {
    vec![Out::Effect(e)]
}

fn none() -> Vec<Out> {
    Vec::new()
}

fn status() -> Vec<Out> {
    vec![Out::Status(StatusForm::Strict)]
}

fn legacy_status() -> Vec<Out> {
    vec![Out::Status(StatusForm::Legacy)]
}

fn pong() -> Vec<Out> {
    vec![send(ServerFrame::Pong(42))]
}

fn welcome() -> Vec<Out> {
    vec![send(ServerFrame::Welcome {
        version: 2,
        limits: FUZZ_LIMITS,
        server: "fuzz".into(),
    })]
}

fn bound_reply() -> Vec<Out> {
    let own = own_ref();
    vec![send(ServerFrame::Bound {
        id: own.id,
        incarnation: own.incarnation,
    })]
}

fn strict_detach() -> Vec<Out> {
    vec![
        Out::Effect(Effect::Detach),
        send(ServerFrame::Detached),
        Out::Close,
    ]
}

fn attach(rows: u16, cols: u16, read_only: bool) -> Vec<Out> {
    eff(Effect::Attach(AttachRequest {
        rows,
        cols,
        read_only,
    }))
}

/// Checks each error detail's style (SPEC.md §5: lowercase, no trailing period)
/// and blanks it so that tables compare codes, not prose.
fn normalise(out: Vec<Out>) -> Vec<Out> {
    out.into_iter()
        .map(|o| match o {
            Out::Send(Outbound::Strict(ServerFrame::Error { code, detail })) => {
                assert!(!detail.is_empty(), "{code}: empty detail");
                assert!(
                    !detail.ends_with('.'),
                    "{code}: trailing period in {detail:?}"
                );
                assert!(
                    !detail.starts_with(|c: char| c.is_uppercase()),
                    "{code}: detail {detail:?} starts uppercase"
                );
                send(ServerFrame::error(code, ""))
            }
            other => other,
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Reaching each state
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    Accepted,
    Negotiated,
    Bound,
    BoundRo,
    BoundRw,
    Legacy,
    LegacyAttached,
    Closed,
}

fn feed(conn: &mut ServerConn, f: F, policy: LegacyPolicy) -> Vec<Out> {
    check_step(conn, Instant::now(), f.inbound(), Env::default(), policy)
}

fn reach(start: Start, policy: LegacyPolicy) -> ServerConn {
    let mut conn = server_conn(policy);
    let path: &[F] = match start {
        Start::Accepted | Start::Closed => &[],
        Start::Negotiated => &[F::Hello],
        Start::Bound => &[F::Hello, F::BindOwn],
        Start::BoundRo => &[F::Hello, F::BindOwn, F::AttachRo],
        Start::BoundRw => &[F::Hello, F::BindOwn, F::AttachRw],
        Start::Legacy => &[F::LStatus],
        Start::LegacyAttached => &[F::LStatus, F::LAttach],
    };
    for &f in path {
        feed(&mut conn, f, policy);
    }
    if start == Start::Closed {
        conn.close();
    }
    let want = match start {
        Start::Accepted => ConnState::Accepted,
        Start::Negotiated => NEG,
        Start::Bound => BOUND,
        Start::BoundRo => RO,
        Start::BoundRw => RW,
        Start::Legacy => L0,
        Start::LegacyAttached => L1,
        Start::Closed => CLOSED,
    };
    assert_eq!(conn.state(), want, "reaching {start:?} under {policy:?}");
    conn
}

type Row = (F, Vec<Out>, ConnState);

/// Runs every row from a fresh connection in `start`; the rows must cover every
/// frame exactly once.
fn check_table(start: Start, policy: LegacyPolicy, draining: bool, rows: &[Row]) {
    let covered: HashSet<F> = rows.iter().map(|r| r.0).collect();
    let all: HashSet<F> = STRICT.iter().chain(LEGACY.iter()).copied().collect();
    assert_eq!(covered, all, "table for {start:?} must cover every frame");
    assert_eq!(
        rows.len(),
        all.len(),
        "table for {start:?} lists a frame twice"
    );
    for (f, want, after) in rows {
        let mut conn = reach(start, policy);
        let out = check_step(
            &mut conn,
            Instant::now(),
            f.inbound(),
            Env {
                draining,
                exited: false,
            },
            policy,
        );
        assert_eq!(
            &normalise(out),
            want,
            "{f:?} in {start:?} under {policy:?}, draining {draining}"
        );
        assert_eq!(
            conn.state(),
            *after,
            "state after {f:?} in {start:?} under {policy:?}, draining {draining}"
        );
    }
}

/// `base` with the rows for the frames in `changes` replaced.
fn with(base: &[Row], changes: Vec<Row>) -> Vec<Row> {
    let mut rows = base.to_vec();
    for change in changes {
        let slot = rows
            .iter_mut()
            .find(|r| r.0 == change.0)
            .expect("override of a listed frame");
        *slot = change;
    }
    rows
}

/// Every frame of `frames` gives `out` and `after`.
fn all_give(frames: &[F], out: &[Out], after: ConnState) -> Vec<Row> {
    frames.iter().map(|&f| (f, out.to_vec(), after)).collect()
}

fn strict_refused_on_legacy() -> Vec<Row> {
    all_give(&STRICT, &err(ErrorCode::Malformed), CLOSED)
}

fn legacy_refused_on_strict() -> Vec<Row> {
    all_give(&LEGACY, &err(ErrorCode::Malformed), CLOSED)
}

// ---------------------------------------------------------------------------
// Tables
// ---------------------------------------------------------------------------

fn accepted_strict_rows() -> Vec<Row> {
    let mut rows = vec![
        (F::Hello, welcome(), NEG),
        (
            F::HelloLongName,
            vec![
                send(ServerFrame::error(ErrorCode::InvalidArgument, "")),
                Out::Close,
            ],
            CLOSED,
        ),
        (F::HelloFuture, err(ErrorCode::VersionUnsupported), CLOSED),
    ];
    rows.extend(all_give(
        &STRICT[3..],
        &err(ErrorCode::NotNegotiated),
        CLOSED,
    ));
    rows
}

fn legacy_rows(policy: LegacyPolicy, attached: bool) -> Vec<Row> {
    let full = policy == LegacyPolicy::Full;
    let here = if attached { L1 } else { L0 };
    let mut rows = strict_refused_on_legacy();
    let attach_rows = if attached {
        vec![(F::LAttach, none(), L1), (F::LAttachNone, none(), L1)]
    } else {
        vec![
            (F::LAttach, attach(24, 80, !full), L1),
            (F::LAttachNone, attach(0, 0, !full), L1),
        ]
    };
    rows.extend(attach_rows);
    rows.extend([
        (
            F::LData,
            if full {
                eff(Effect::Input {
                    bytes: Bytes::from_static(b"y"),
                    attached_writer: attached,
                })
            } else {
                none()
            },
            here,
        ),
        (
            F::LDetach,
            vec![Out::Effect(Effect::Detach), Out::Close],
            CLOSED,
        ),
        (
            F::LResize,
            if full {
                eff(Effect::Resize {
                    size: Size {
                        rows: 30,
                        cols: 100,
                    },
                    attached_writer: attached,
                })
            } else {
                none()
            },
            here,
        ),
        (F::LResizeZero, none(), here),
        (F::LResizeNone, none(), here),
        // PEEK subscribes (SPEC.md §7): attached read-only; a second is ignored.
        if attached {
            (F::LPeek, none(), L1)
        } else {
            (
                F::LPeek,
                eff(Effect::Subscribe(PeekRequest {
                    plain: false,
                    full: true,
                })),
                L1,
            )
        },
        (F::LStatus, legacy_status(), here),
        (F::LUnknown, none(), here),
    ]);
    rows
}

fn negotiated_rows() -> Vec<Row> {
    let mut rows = all_give(
        &[F::Hello, F::HelloLongName, F::HelloFuture],
        &err(ErrorCode::AlreadyNegotiated),
        CLOSED,
    );
    rows.extend([
        (F::Status, status(), NEG),
        (F::BindOwn, bound_reply(), BOUND),
        (F::BindOtherId, err(ErrorCode::IdMismatch), CLOSED),
        (F::BindOtherInc, err(ErrorCode::IncarnationMismatch), CLOSED),
        (F::Ping, pong(), NEG),
    ]);
    rows.extend(all_give(
        &[
            F::AttachRw,
            F::AttachRo,
            F::Peek,
            F::Input,
            F::Resize,
            F::ResizeZero,
            F::Signal,
            F::SignalZero,
            F::SignalHigh,
            F::Stop,
            F::Detach,
        ],
        &err(ErrorCode::NotBound),
        NEG,
    ));
    rows.extend(legacy_refused_on_strict());
    rows
}

/// Rows shared by every bound state.
fn bound_common(here: ConnState) -> Vec<Row> {
    let mut rows = all_give(
        &[F::Hello, F::HelloLongName, F::HelloFuture],
        &err(ErrorCode::AlreadyNegotiated),
        CLOSED,
    );
    rows.extend(all_give(
        &[F::BindOwn, F::BindOtherId, F::BindOtherInc],
        &err(ErrorCode::AlreadyBound),
        CLOSED,
    ));
    rows.extend([
        (F::Status, status(), here),
        (F::Ping, pong(), here),
        (F::Detach, strict_detach(), CLOSED),
        (
            F::Peek,
            eff(Effect::Peek(PeekRequest {
                plain: true,
                full: false,
            })),
            here,
        ),
    ]);
    rows.extend(legacy_refused_on_strict());
    rows
}

/// Bound, not attached, or attached read-write (`attached`).
fn bound_writer_rows(attached: bool) -> Vec<Row> {
    let here = if attached { RW } else { BOUND };
    let mut rows = bound_common(here);
    if attached {
        rows.extend(all_give(
            &[F::AttachRw, F::AttachRo],
            &err(ErrorCode::AlreadyAttached),
            RW,
        ));
    } else {
        rows.extend([
            (F::AttachRw, attach(24, 80, false), RW),
            (F::AttachRo, attach(24, 80, true), RO),
        ]);
    }
    rows.extend([
        (
            F::Input,
            eff(Effect::Input {
                bytes: Bytes::from_static(b"x"),
                attached_writer: attached,
            }),
            here,
        ),
        (
            F::Resize,
            eff(Effect::Resize {
                size: Size {
                    rows: 30,
                    cols: 100,
                },
                attached_writer: attached,
            }),
            here,
        ),
        (F::ResizeZero, err(ErrorCode::InvalidArgument), here),
        (F::Signal, eff(Effect::Signal(15)), here),
        (F::SignalZero, err(ErrorCode::InvalidArgument), here),
        (F::SignalHigh, err(ErrorCode::InvalidArgument), here),
        // STOP passes the draining fence: it continues the drain.
        (F::Stop, eff(Effect::Stop(15)), here),
    ]);
    rows
}

fn bound_read_only_rows() -> Vec<Row> {
    let mut rows = bound_common(RO);
    rows.extend(all_give(
        &[F::AttachRw, F::AttachRo],
        &err(ErrorCode::AlreadyAttached),
        RO,
    ));
    rows.extend(all_give(
        &[
            F::Input,
            F::Resize,
            F::ResizeZero,
            F::Signal,
            F::SignalZero,
            F::SignalHigh,
            F::Stop,
        ],
        &err(ErrorCode::ForbiddenByPolicy),
        RO,
    ));
    rows
}

#[test]
fn accepted() {
    for policy in POLICIES {
        let mut rows = accepted_strict_rows();
        match policy {
            // Policy off: any legacy packet closes the connection without a reply.
            LegacyPolicy::Off => rows.extend(all_give(&LEGACY, &[Out::Close], CLOSED)),
            // Otherwise the first packet makes the connection legacy and is then
            // handled as on a legacy connection.
            _ => rows.extend(
                legacy_rows(policy, false)
                    .into_iter()
                    .filter(|r| LEGACY.contains(&r.0)),
            ),
        }
        check_table(Start::Accepted, policy, false, &rows);
        // Draining does not change negotiation.
        let draining = match policy {
            LegacyPolicy::Off => rows.clone(),
            _ => with(&rows, legacy_draining_changes(false)),
        };
        check_table(Start::Accepted, policy, true, &draining);
    }
}

#[test]
fn negotiated() {
    for policy in POLICIES {
        let rows = negotiated_rows();
        check_table(Start::Negotiated, policy, false, &rows);
        // Draining refuses every BIND (before looking at what it names), and
        // nothing else changes.
        let draining = with(
            &rows,
            all_give(
                &[F::BindOwn, F::BindOtherId, F::BindOtherInc],
                &err(ErrorCode::Draining),
                NEG,
            ),
        );
        check_table(Start::Negotiated, policy, true, &draining);
    }
}

#[test]
fn bound_not_attached() {
    for policy in POLICIES {
        let rows = bound_writer_rows(false);
        check_table(Start::Bound, policy, false, &rows);
        // Draining refuses every effect except DETACH; argument checks come first.
        let draining = with(
            &rows,
            all_give(
                &[
                    F::AttachRw,
                    F::AttachRo,
                    F::Peek,
                    F::Input,
                    F::Resize,
                    F::Signal,
                ],
                &err(ErrorCode::Draining),
                BOUND,
            ),
        );
        check_table(Start::Bound, policy, true, &draining);
    }
}

#[test]
fn bound_read_write() {
    for policy in POLICIES {
        let rows = bound_writer_rows(true);
        check_table(Start::BoundRw, policy, false, &rows);
        let draining = with(
            &rows,
            all_give(
                &[F::Peek, F::Input, F::Resize, F::Signal],
                &err(ErrorCode::Draining),
                RW,
            ),
        );
        check_table(Start::BoundRw, policy, true, &draining);
    }
}

#[test]
fn bound_read_only() {
    for policy in POLICIES {
        let rows = bound_read_only_rows();
        check_table(Start::BoundRo, policy, false, &rows);
        let draining = with(&rows, vec![(F::Peek, err(ErrorCode::Draining), RO)]);
        check_table(Start::BoundRo, policy, true, &draining);
    }
}

/// While draining a legacy connection gets STATUS and DETACH; PEEK and a first ATTACH
/// (requests that expect a reply the daemon will not send) close it; input and resize
/// are dropped.
fn legacy_draining_changes(attached: bool) -> Vec<Row> {
    let here = if attached { L1 } else { L0 };
    let mut rows = all_give(
        &[F::LData, F::LResize, F::LResizeZero, F::LResizeNone],
        &[],
        here,
    );
    let attach = [F::LAttach, F::LAttachNone, F::LPeek];
    rows.extend(if attached {
        all_give(&attach, &[], L1)
    } else {
        all_give(&attach, &[Out::Close], CLOSED)
    });
    rows
}

#[test]
fn legacy_under_observe_and_full() {
    for policy in [LegacyPolicy::Observe, LegacyPolicy::Full] {
        for attached in [false, true] {
            let start = if attached {
                Start::LegacyAttached
            } else {
                Start::Legacy
            };
            let rows = legacy_rows(policy, attached);
            check_table(start, policy, false, &rows);
            check_table(
                start,
                policy,
                true,
                &with(&rows, legacy_draining_changes(attached)),
            );
        }
    }
}

#[test]
fn legacy_peek_is_a_read_only_subscription_under_every_policy() {
    for policy in [LegacyPolicy::Observe, LegacyPolicy::Full] {
        let mut conn = server_conn(policy);
        assert_eq!(
            feed(&mut conn, F::LPeek, policy),
            eff(Effect::Subscribe(PeekRequest {
                plain: false,
                full: true
            }))
        );
        assert_eq!(conn.state(), L1);
        assert!(conn.is_attached() && !conn.is_writer());
        for f in [F::LData, F::LResize, F::LAttach, F::LPeek] {
            assert_eq!(feed(&mut conn, f, policy), none(), "{f:?} under {policy:?}");
        }
        assert_eq!(feed(&mut conn, F::LStatus, policy), legacy_status());
    }
}

#[test]
fn legacy_under_off_never_gets_past_the_first_packet() {
    for f in LEGACY {
        let mut conn = server_conn(LegacyPolicy::Off);
        assert_eq!(feed(&mut conn, f, LegacyPolicy::Off), vec![Out::Close]);
        // Its bytes were legacy, but it was never served.
        assert_eq!(conn.state(), CLOSED);
        assert!(conn.is_legacy());
    }
}

#[test]
fn closed_ignores_everything() {
    for policy in POLICIES {
        let rows = all_give(&[&STRICT[..], &LEGACY[..]].concat(), &[], CLOSED);
        check_table(Start::Closed, policy, false, &rows);
        check_table(Start::Closed, policy, true, &rows);
    }
    // Closed by a fatal refusal, not by `close()`: the same.
    let mut conn = reach(Start::Negotiated, LegacyPolicy::Full);
    assert_eq!(
        normalise(feed(&mut conn, F::BindOtherInc, LegacyPolicy::Full)),
        err(ErrorCode::IncarnationMismatch)
    );
    for f in STRICT.iter().chain(LEGACY.iter()) {
        assert!(feed(&mut conn, *f, LegacyPolicy::Full).is_empty(), "{f:?}");
    }
}

#[test]
fn predicates_follow_the_state() {
    // (start, policy, is_legacy, is_attached, is_writer)
    let cases = [
        (Start::Accepted, LegacyPolicy::Full, false, false, false),
        (Start::Negotiated, LegacyPolicy::Full, false, false, false),
        (Start::Bound, LegacyPolicy::Full, false, false, false),
        (Start::BoundRo, LegacyPolicy::Full, false, true, false),
        (Start::BoundRw, LegacyPolicy::Observe, false, true, true),
        (Start::Legacy, LegacyPolicy::Full, true, false, false),
        (
            Start::LegacyAttached,
            LegacyPolicy::Observe,
            true,
            true,
            false,
        ),
        (Start::LegacyAttached, LegacyPolicy::Full, true, true, true),
        (Start::Closed, LegacyPolicy::Full, false, false, false),
    ];
    for (start, policy, legacy, attached, writer) in cases {
        let conn = reach(start, policy);
        assert_eq!(conn.is_legacy(), legacy, "{start:?} {policy:?}");
        assert_eq!(conn.is_attached(), attached, "{start:?} {policy:?}");
        assert_eq!(conn.is_writer(), writer, "{start:?} {policy:?}");
    }
}

#[test]
fn second_hello_and_second_bind_are_typed_fatal_errors() {
    let mut conn = reach(Start::Negotiated, LegacyPolicy::Observe);
    assert_eq!(
        normalise(feed(&mut conn, F::Hello, LegacyPolicy::Observe)),
        vec![
            send(ServerFrame::error(ErrorCode::AlreadyNegotiated, "")),
            Out::Close
        ]
    );
    let mut conn = reach(Start::Bound, LegacyPolicy::Observe);
    assert_eq!(
        normalise(feed(&mut conn, F::BindOwn, LegacyPolicy::Observe)),
        vec![
            send(ServerFrame::error(ErrorCode::AlreadyBound, "")),
            Out::Close
        ]
    );
}

#[test]
fn mismatch_details_name_no_incarnation() {
    // The daemon may say which id it serves, but never leaks its incarnation.
    let own = own_ref().incarnation.to_string();
    for f in [F::BindOtherId, F::BindOtherInc] {
        let mut conn = reach(Start::Negotiated, LegacyPolicy::Observe);
        let out = feed(&mut conn, f, LegacyPolicy::Observe);
        let Some(Out::Send(Outbound::Strict(ServerFrame::Error { detail, .. }))) = out.first()
        else {
            panic!("{f:?}: {out:?}")
        };
        assert!(!detail.contains(&own), "{f:?}: {detail}");
    }
}

#[test]
#[should_panic(expected = "mutating effect")]
fn check_step_catches_a_mutating_legacy_effect() {
    // A daemon running policy full, checked as if the policy were observe: the
    // checker must object to the input it lets through.
    let mut conn = server_conn(LegacyPolicy::Full);
    check_step(
        &mut conn,
        Instant::now(),
        F::LData.inbound(),
        Env::default(),
        LegacyPolicy::Observe,
    );
}

// ---------------------------------------------------------------------------
// Random sequences: the central property
// ---------------------------------------------------------------------------

fn any_incarnation() -> impl Strategy<Value = Incarnation> {
    prop_oneof![
        Just(own_ref().incarnation),
        Just(other_incarnation()),
        (any::<[u8; 16]>(), any::<[u8; 16]>()).prop_map(|(n, t)| Incarnation::from_parts(n, t)),
    ]
}

fn any_id() -> impl Strategy<Value = SessionId> {
    prop_oneof![
        Just(own_ref().id),
        Just(SessionId::new("fuzz2").unwrap()),
        "[a-z][a-z0-9]{0,8}".prop_map(|s| SessionId::new(s).unwrap()),
    ]
}

fn strict_frame() -> impl Strategy<Value = ClientFrame> {
    let versions = prop_oneof![
        3 => Just(SUPPORTED),
        1 => (0u16..5, 0u16..5).prop_map(|(min, max)| VersionRange { min, max }),
    ];
    let small = prop_oneof![Just(0u16), any::<u16>()];
    prop_oneof![
        2 => (versions, "[a-z]{0,70}").prop_map(|(versions, client)| ClientFrame::Hello { versions, client }),
        1 => Just(ClientFrame::Status),
        3 => Just(bind_own_frame()),
        2 => (any_id(), any_incarnation()).prop_map(|(id, incarnation)| ClientFrame::Bind { id, incarnation }),
        2 => (small.clone(), small.clone(), any::<bool>())
            .prop_map(|(rows, cols, read_only)| ClientFrame::Attach(AttachRequest { rows, cols, read_only })),
        1 => (any::<bool>(), any::<bool>()).prop_map(|(plain, full)| ClientFrame::Peek(PeekRequest { plain, full })),
        2 => vec(any::<u8>(), 0..16).prop_map(|b| ClientFrame::Input(Bytes::from(b))),
        2 => (small.clone(), small).prop_map(|(rows, cols)| ClientFrame::Resize(Size { rows, cols })),
        2 => prop_oneof![-2i32..70, any::<i32>()].prop_map(|signal| ClientFrame::Signal { signal }),
        1 => prop_oneof![-2i32..70, any::<i32>()].prop_map(|signal| ClientFrame::Stop { signal }),
        1 => Just(ClientFrame::Detach),
        1 => any::<u64>().prop_map(ClientFrame::Ping),
    ]
}

fn legacy_frame() -> impl Strategy<Value = LegacyClientFrame> {
    let size = proptest::option::of((0u16..3, 0u16..3));
    prop_oneof![
        vec(any::<u8>(), 0..16).prop_map(|b| LegacyClientFrame::Data(Bytes::from(b))),
        size.clone().prop_map(LegacyClientFrame::Attach),
        Just(LegacyClientFrame::Detach),
        size.prop_map(LegacyClientFrame::Resize),
        (any::<bool>(), any::<bool>())
            .prop_map(|(plain, full)| LegacyClientFrame::Peek { plain, full }),
        Just(LegacyClientFrame::Status),
        any::<u8>().prop_map(LegacyClientFrame::Unknown),
    ]
}

fn inbound() -> impl Strategy<Value = Inbound> {
    prop_oneof![
        3 => strict_frame().prop_map(Inbound::Strict),
        1 => legacy_frame().prop_map(Inbound::Legacy),
    ]
}

/// How a random sequence starts, so that most runs get past the handshake.
#[derive(Debug, Clone)]
enum Prelude {
    Nothing,
    Handshake,
    Legacy,
}

fn prelude() -> impl Strategy<Value = Prelude> {
    prop_oneof![
        1 => Just(Prelude::Nothing),
        3 => Just(Prelude::Handshake),
        1 => Just(Prelude::Legacy),
    ]
}

fn policy() -> impl Strategy<Value = LegacyPolicy> {
    prop_oneof![
        Just(LegacyPolicy::Off),
        Just(LegacyPolicy::Observe),
        Just(LegacyPolicy::Full)
    ]
}

/// Whether the connection has shown a strict opening (it negotiated or bound).
/// Feeds `bytes` (less than one frame) to the connection's decoder; returns the
/// framing they decided.
fn opened(conn: &mut ServerConn, bytes: &[u8]) -> latch_wire::Framing {
    let mut src = bytes::BytesMut::from(bytes);
    assert_eq!(conn.decode(&mut src), Ok(None));
    conn.framing()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// The fuzz target's driver, on arbitrary bytes: decoding, time, draining,
    /// exit and decode errors, with every step checked.
    #[test]
    fn the_daemon_driver_keeps_the_property_on_arbitrary_bytes(
        policy in policy(),
        mask in any::<u8>(),
        handshake in prop::bool::ANY,
        tail in vec(any::<u8>(), 0..256),
    ) {
        let mut bytes = Vec::new();
        if handshake {
            let mut codec = ClientCodec::default();
            let mut buf = BytesMut::new();
            codec.encode_client(&hello_frame(), &mut buf).unwrap();
            codec.encode_client(&bind_own_frame(), &mut buf).unwrap();
            bytes.extend_from_slice(&buf);
        }
        bytes.extend_from_slice(&tail);
        latch_wire::fuzzing::drive_state_machine(&bytes, policy, mask, Instant::now());
    }


    #[test]
    fn no_effect_unless_bound_or_permitted(
        policy in policy(),
        prelude in prelude(),
        frames in vec(inbound(), 0..40),
        drains in vec(prop::bool::weighted(0.2), 40),
        exits in vec(prop::bool::weighted(0.2), 40),
        waits in vec(prop::sample::select(vec![0u64, 1, 4, 6, 11]), 40),
    ) {
        let mut now = Instant::now();
        let mut conn = server_conn(policy);
        let mut seq: Vec<Inbound> = match prelude {
            Prelude::Nothing => Vec::new(),
            Prelude::Handshake => vec![Inbound::Strict(hello_frame()), Inbound::Strict(bind_own_frame())],
            Prelude::Legacy => vec![Inbound::Legacy(LegacyClientFrame::Status)],
        };
        let skip = seq.len();
        seq.extend(frames);
        for (i, frame) in seq.into_iter().enumerate() {
            let draining = i >= skip && drains[(i - skip) % drains.len()];
            let exited = i >= skip && exits[(i - skip) % exits.len()];
            if i >= skip {
                // Time passes; the driver wakes the connection when it is due.
                now += std::time::Duration::from_secs(waits[(i - skip) % waits.len()]);
                latch_wire::fuzzing::check_timeout(&mut conn, now);
            }
            let before = conn.state();
            let strict = matches!(frame, Inbound::Strict(_));
            let out = normalise(check_step(
                &mut conn,
                now,
                frame,
                Env {
                    draining,
                    exited,
                },
                policy,
            ));
            // A connection never changes framing.
            match (before, conn.state()) {
                (ConnState::Legacy { .. }, after) => {
                    let still_legacy = matches!(after, ConnState::Legacy { .. } | ConnState::Closed);
                    prop_assert!(still_legacy, "legacy became {:?}", after);
                }
                (ConnState::Negotiated { .. } | ConnState::Bound { .. }, after) => {
                    let still_strict = !matches!(after, ConnState::Legacy { .. } | ConnState::Accepted);
                    prop_assert!(still_strict, "{:?} became {:?}", before, after);
                }
                _ => {}
            }
            // Strict refusals are strict frames; legacy connections get no strict
            // frames except the closing refusal of a strict frame.
            if matches!(conn.state(), ConnState::Legacy { .. })
                || (!strict && before == ConnState::Accepted)
            {
                prop_assert!(out.iter().all(|o| !matches!(o, Out::Send(_))), "{:?}", out);
            }
            // Close is always last.
            if let Some(pos) = out.iter().position(|o| matches!(o, Out::Close)) {
                prop_assert_eq!(pos, out.len() - 1);
                prop_assert_eq!(conn.state(), ConnState::Closed);
            }
        }
    }
}

#[test]
fn fuzzing_drive_state_machine_accepts_valid_streams() {
    // The fuzz target's entry point runs a complete, legal session cleanly.
    let mut codec = ClientCodec::default();
    let mut bytes = BytesMut::new();
    for f in [
        hello_frame(),
        bind_own_frame(),
        ClientFrame::Attach(AttachRequest {
            rows: 24,
            cols: 80,
            read_only: false,
        }),
        ClientFrame::Input(Bytes::from_static(b"ls\r")),
        ClientFrame::Detach,
    ] {
        codec.encode(f, &mut bytes).unwrap();
    }
    for policy in POLICIES {
        for mask in [0u8, 0xff, 0b1010_1010] {
            latch_wire::fuzzing::drive_state_machine(&bytes, policy, mask, Instant::now());
        }
    }
}

// ---------------------------------------------------------------------------
// The client's handshake
// ---------------------------------------------------------------------------

fn welcome_frame(version: u16) -> ServerFrame {
    ServerFrame::Welcome {
        version,
        limits: FUZZ_LIMITS,
        server: "latchd".into(),
    }
}

#[test]
fn handshake_accepts_a_version_in_range() {
    let hs = ClientHandshake::new(VersionRange { min: 2, max: 3 }, "t");
    assert_eq!(
        hs.hello(),
        ClientFrame::Hello {
            versions: VersionRange { min: 2, max: 3 },
            client: "t".into()
        }
    );
    for v in [2, 3] {
        assert_eq!(
            hs.on_welcome(welcome_frame(v)),
            Ok(Negotiated {
                version: v,
                limits: FUZZ_LIMITS
            })
        );
    }
}

#[test]
fn handshake_refuses_a_downgrade() {
    let asked = VersionRange { min: 3, max: 4 };
    let hs = ClientHandshake::new(asked, "t");
    for offered in [0, 1, 2, 5, u16::MAX] {
        assert_eq!(
            hs.on_welcome(welcome_frame(offered)),
            Err(HandshakeError::Downgrade { asked, offered }),
            "{offered}"
        );
    }
    // Even a client that lists 1 never accepts the legacy version.
    let asked = VersionRange { min: 1, max: 2 };
    assert_eq!(
        ClientHandshake::new(asked, "t").on_welcome(welcome_frame(1)),
        Err(HandshakeError::Downgrade { asked, offered: 1 })
    );
}

#[test]
fn handshake_maps_errors_to_refused() {
    let hs = ClientHandshake::default();
    let target = own_ref();
    for code in [
        ErrorCode::VersionUnsupported,
        ErrorCode::TooManyConnections,
        ErrorCode::IncarnationMismatch,
        ErrorCode::Other(999),
    ] {
        let frame = ServerFrame::error(code, "why");
        let want = HandshakeError::Refused {
            code,
            detail: "why".into(),
        };
        assert_eq!(hs.on_welcome(frame.clone()), Err(want.clone()));
        assert_eq!(hs.on_bound(&target, frame), Err(want));
    }
}

#[test]
fn handshake_refuses_frames_out_of_place() {
    let hs = ClientHandshake::default();
    let target = own_ref();
    assert_eq!(
        hs.on_welcome(ServerFrame::Pong(1)),
        Err(HandshakeError::Unexpected("PONG"))
    );
    assert_eq!(
        hs.on_welcome(ServerFrame::Bound {
            id: target.id.clone(),
            incarnation: target.incarnation
        }),
        Err(HandshakeError::Unexpected("BOUND"))
    );
    assert_eq!(
        hs.on_bound(&target, welcome_frame(2)),
        Err(HandshakeError::Unexpected("WELCOME"))
    );
    assert_eq!(
        hs.on_bound(&target, ServerFrame::Output(Bytes::new())),
        Err(HandshakeError::Unexpected("OUTPUT"))
    );
}

#[test]
fn handshake_refuses_a_binding_to_another_creation() {
    let hs = ClientHandshake::default();
    let target = own_ref();
    let bind = hs.bind(&target);
    assert_eq!(bind, bind_own_frame());
    assert_eq!(
        hs.on_bound(
            &target,
            ServerFrame::Bound {
                id: target.id.clone(),
                incarnation: target.incarnation
            }
        ),
        Ok(())
    );
    let wrong = [
        SessionRef::new(target.id.clone(), other_incarnation()),
        SessionRef::new(SessionId::new("other").unwrap(), target.incarnation),
    ];
    for other in wrong {
        assert_eq!(
            hs.on_bound(
                &target,
                ServerFrame::Bound {
                    id: other.id,
                    incarnation: other.incarnation
                }
            ),
            Err(HandshakeError::WrongBinding)
        );
    }
}

fn config(versions: VersionRange) -> ServerConfig {
    ServerConfig {
        own: own_ref(),
        versions,
        limits: FUZZ_LIMITS,
        server_name: "latchd-next".into(),
        legacy_policy: LegacyPolicy::Observe,
    }
}

/// Client and daemon over in-memory byte buffers: the client's codec and
/// handshake on one side, the daemon's codec and state machine on the other.
struct Pair {
    client: ClientCodec,
    daemon: ServerCodec,
    conn: ServerConn,
    to_daemon: BytesMut,
    to_client: BytesMut,
}

impl Pair {
    fn new(versions: VersionRange) -> Self {
        Self {
            client: ClientCodec::default(),
            daemon: ServerCodec::default(),
            conn: ServerConn::new(config(versions), Instant::now()),
            to_daemon: BytesMut::new(),
            to_client: BytesMut::new(),
        }
    }

    /// Sends one client frame and returns the daemon's strict replies and whether
    /// it closed.
    fn round_trip(&mut self, frame: ClientFrame) -> (Vec<ServerFrame>, bool) {
        self.client.encode(frame, &mut self.to_daemon).unwrap();
        let inbound = self.daemon.decode(&mut self.to_daemon).unwrap().unwrap();
        assert!(self.to_daemon.is_empty());
        let mut closed = false;
        for out in self.conn.handle(Instant::now(), inbound, Env::default()) {
            match out {
                Out::Send(o) => self.daemon.encode(o, &mut self.to_client).unwrap(),
                Out::Close => closed = true,
                other => panic!("unexpected {other:?} during the handshake"),
            }
        }
        let mut replies = Vec::new();
        while let Some(f) = self.client.decode(&mut self.to_client).unwrap() {
            replies.push(f);
        }
        assert!(self.to_client.is_empty());
        (replies, closed)
    }
}

#[test]
fn a_v2_client_and_a_2_to_3_daemon_agree_on_2() {
    let mut pair = Pair::new(VersionRange { min: 2, max: 3 });
    let hs = ClientHandshake::new(VersionRange { min: 2, max: 2 }, "older");
    assert_eq!(SUPPORTED, VersionRange { min: 2, max: 4 });
    let (replies, closed) = pair.round_trip(hs.hello());
    assert!(!closed);
    let [welcome] = &replies[..] else {
        panic!("{replies:?}")
    };
    let negotiated = hs.on_welcome(welcome.clone()).unwrap();
    assert_eq!(negotiated.version, 2);
    assert_eq!(negotiated.limits, FUZZ_LIMITS);
    assert_eq!(pair.conn.state(), NEG);

    let target = own_ref();
    let (replies, closed) = pair.round_trip(hs.bind(&target));
    assert!(!closed);
    let [bound] = &replies[..] else {
        panic!("{replies:?}")
    };
    assert_eq!(hs.on_bound(&target, bound.clone()), Ok(()));
    assert_eq!(pair.conn.state(), BOUND);
}

#[test]
fn a_2_to_3_client_and_a_2_to_3_daemon_agree_on_3() {
    let mut pair = Pair::new(VersionRange { min: 2, max: 3 });
    let hs = ClientHandshake::new(VersionRange { min: 2, max: 3 }, "next");
    let (replies, _) = pair.round_trip(hs.hello());
    assert_eq!(hs.on_welcome(replies[0].clone()).unwrap().version, 3);
    assert_eq!(pair.conn.state(), ConnState::Negotiated { version: 3 });
}

#[test]
fn a_v3_only_client_is_refused_by_a_v2_daemon() {
    let mut pair = Pair::new(VersionRange { min: 2, max: 2 });
    let hs = ClientHandshake::new(VersionRange { min: 3, max: 3 }, "future");
    let (replies, closed) = pair.round_trip(hs.hello());
    assert!(closed);
    let [reply] = &replies[..] else {
        panic!("{replies:?}")
    };
    assert!(matches!(
        hs.on_welcome(reply.clone()),
        Err(HandshakeError::Refused {
            code: ErrorCode::VersionUnsupported,
            ..
        })
    ));
}

#[test]
fn a_client_binding_a_stale_ref_is_refused_and_closed() {
    let mut pair = Pair::new(SUPPORTED);
    let hs = ClientHandshake::default();
    let (replies, _) = pair.round_trip(hs.hello());
    hs.on_welcome(replies[0].clone()).unwrap();
    let stale = SessionRef::new(own_ref().id, other_incarnation());
    let (replies, closed) = pair.round_trip(hs.bind(&stale));
    assert!(closed);
    let Err(HandshakeError::Refused {
        code: ErrorCode::IncarnationMismatch,
        detail,
    }) = hs.on_bound(&stale, replies[0].clone())
    else {
        panic!("{replies:?}")
    };
    // The stale incarnation may never have existed: the detail claims nothing about
    // it, only which id this daemon serves (SPEC §4.3).
    assert_eq!(
        detail,
        format!("this daemon serves another creation of id {}", own_ref().id)
    );
    assert_eq!(pair.conn.state(), CLOSED);
}

// ---------------------------------------------------------------------------
// Sizes over the SPEC §8 limits never become effects
// ---------------------------------------------------------------------------

#[test]
fn sizes_over_the_limits_are_refused_before_any_effect() {
    use latch_wire::limits::{MAX_CELLS, MAX_COLS, MAX_ROWS};
    let too_large: [(u16, u16); 5] = [
        (65_535, 65_535),
        (MAX_ROWS + 1, 10),
        (10, MAX_COLS + 1),
        (500, 8_000),
        (
            MAX_ROWS,
            u16::try_from(MAX_CELLS / u32::from(MAX_ROWS)).unwrap() + 1,
        ),
    ];
    for (rows, cols) in too_large {
        // Strict RESIZE, attached or not.
        for start in [Start::Bound, Start::BoundRw] {
            let mut conn = reach(start, LegacyPolicy::Off);
            let out = conn.handle(
                Instant::now(),
                Inbound::Strict(ClientFrame::Resize(Size { rows, cols })),
                Env::default(),
            );
            assert!(
                matches!(
                    out.as_slice(),
                    [Out::Send(Outbound::Strict(ServerFrame::Error {
                        code: ErrorCode::InvalidArgument,
                        ..
                    }))]
                ),
                "{rows}x{cols} from {start:?}: {out:?}"
            );
        }
        // Strict ATTACH: refused, and the connection stays unattached.
        let mut conn = reach(Start::Bound, LegacyPolicy::Off);
        let out = conn.handle(
            Instant::now(),
            Inbound::Strict(ClientFrame::Attach(AttachRequest {
                rows,
                cols,
                read_only: false,
            })),
            Env::default(),
        );
        assert!(!out.iter().any(|o| matches!(o, Out::Effect(_))), "{out:?}");
        assert_eq!(conn.state(), BOUND);
        // Legacy under full: RESIZE dropped, ATTACH with an unknown size.
        let mut conn = reach(Start::LegacyAttached, LegacyPolicy::Full);
        let out = conn.handle(
            Instant::now(),
            Inbound::Legacy(LegacyClientFrame::Resize(Some((rows, cols)))),
            Env::default(),
        );
        assert!(out.is_empty(), "{out:?}");
        let mut conn = server_conn(LegacyPolicy::Full);
        let out = conn.handle(
            Instant::now(),
            Inbound::Legacy(LegacyClientFrame::Attach(Some((rows, cols)))),
            Env::default(),
        );
        assert_eq!(
            out,
            vec![Out::Effect(Effect::Attach(AttachRequest {
                rows: 0,
                cols: 0,
                read_only: false
            }))]
        );
    }
    // The largest allowed size is an effect.
    let mut conn = reach(Start::Bound, LegacyPolicy::Off);
    let out = conn.handle(
        Instant::now(),
        Inbound::Strict(ClientFrame::Resize(Size {
            rows: MAX_ROWS,
            cols: 500,
        })),
        Env::default(),
    );
    assert_eq!(
        out,
        vec![Out::Effect(Effect::Resize {
            size: Size {
                rows: MAX_ROWS,
                cols: 500
            },
            attached_writer: false,
        })]
    );
}

// ---------------------------------------------------------------------------
// Deadlines, decode errors and the program's exit are rules of the machine
// ---------------------------------------------------------------------------

#[test]
fn the_handshake_and_idle_deadlines() {
    use latch_wire::limits::{HANDSHAKE_TIMEOUT_MS, IDLE_UNBOUND_MS};
    use latch_wire::Framing;
    use std::time::Duration;
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    // Accepted: the first frame is due HANDSHAKE_TIMEOUT_MS after accept.
    let mut conn = latch_wire::fuzzing::server_conn_at(LegacyPolicy::Off, t0);
    assert_eq!(conn.poll_timeout(), Some(t0 + ms(HANDSHAKE_TIMEOUT_MS)));
    assert_eq!(
        opened(&mut conn, &latch_wire::framing::MAGIC),
        Framing::Strict
    );
    assert!(conn
        .handle_timeout(t0 + ms(HANDSHAKE_TIMEOUT_MS - 1))
        .is_empty());
    let out = conn.handle_timeout(t0 + ms(HANDSHAKE_TIMEOUT_MS));
    assert_eq!(normalise(out), err(ErrorCode::HandshakeTimeout));
    assert_eq!(conn.state(), CLOSED);
    // Silence with no bytes at all, or part of a legacy header: closed, no word.
    for (opening, framing) in [
        (&[][..], Framing::Undecided),
        (&[7, 0][..], Framing::Legacy),
    ] {
        let mut conn = latch_wire::fuzzing::server_conn_at(LegacyPolicy::Full, t0);
        assert_eq!(opened(&mut conn, opening), framing);
        assert_eq!(
            conn.handle_timeout(t0 + ms(HANDSHAKE_TIMEOUT_MS)),
            vec![Out::Close]
        );
    }
    // Negotiated: each frame pushes the idle deadline; BIND removes it.
    let mut conn = latch_wire::fuzzing::server_conn_at(LegacyPolicy::Off, t0);
    let t1 = t0 + ms(100);
    conn.handle(t1, Inbound::Strict(hello_frame()), Env::default());
    assert_eq!(conn.poll_timeout(), Some(t1 + ms(IDLE_UNBOUND_MS)));
    let t2 = t1 + ms(IDLE_UNBOUND_MS - 1);
    conn.handle(t2, Inbound::Strict(ClientFrame::Status), Env::default());
    assert_eq!(conn.poll_timeout(), Some(t2 + ms(IDLE_UNBOUND_MS)));
    assert!(conn.handle_timeout(t1 + ms(IDLE_UNBOUND_MS)).is_empty());
    let mut idle = latch_wire::fuzzing::server_conn_at(LegacyPolicy::Off, t0);
    idle.handle(t1, Inbound::Strict(hello_frame()), Env::default());
    let out = idle.handle_timeout(t1 + ms(IDLE_UNBOUND_MS));
    assert!(
        matches!(
            out.as_slice(),
            [
                Out::Send(Outbound::Strict(ServerFrame::Error {
                    code: ErrorCode::HandshakeTimeout,
                    ..
                })),
                Out::Close
            ]
        ),
        "{out:?}"
    );
    conn.handle(t2, Inbound::Strict(bind_own_frame()), Env::default());
    assert_eq!(conn.state(), BOUND);
    assert_eq!(
        conn.poll_timeout(),
        None,
        "bound connections have no deadline"
    );
    assert!(conn
        .handle_timeout(t2 + Duration::from_secs(3600))
        .is_empty());
    // Legacy connections have none either.
    let mut legacy = latch_wire::fuzzing::server_conn_at(LegacyPolicy::Observe, t0);
    legacy.handle(t1, F::LStatus.inbound(), Env::default());
    assert_eq!(legacy.poll_timeout(), None);
}

#[test]
fn decode_errors_close_and_tell_only_a_strict_opening() {
    use latch_wire::{FrameError, Framing};
    let too_large = FrameError::TooLarge {
        len: 1 << 30,
        max: 65_536,
    };
    let mut conn = server_conn(LegacyPolicy::Off);
    assert_eq!(
        opened(&mut conn, &latch_wire::framing::MAGIC),
        Framing::Strict
    );
    let out = conn.handle_decode_error(&too_large);
    assert!(
        matches!(
            out.as_slice(),
            [
                Out::Send(Outbound::Strict(ServerFrame::Error {
                    code: ErrorCode::FrameTooLarge,
                    ..
                })),
                Out::Close
            ]
        ),
        "{out:?}"
    );
    assert_eq!(conn.state(), CLOSED);
    assert!(conn.handle_decode_error(&too_large).is_empty());
    for (opening, framing) in [
        (&[][..], Framing::Undecided),
        (&[7, 0][..], Framing::Legacy),
    ] {
        let mut conn = server_conn(LegacyPolicy::Full);
        assert_eq!(opened(&mut conn, opening), framing);
        assert_eq!(conn.handle_decode_error(&too_large), vec![Out::Close]);
    }
}

#[test]
fn after_the_program_exits_only_observation_reaches_the_session() {
    let exited = Env {
        draining: false,
        exited: true,
    };
    for f in [F::Input, F::Resize, F::Signal, F::Stop] {
        let mut conn = reach(Start::BoundRw, LegacyPolicy::Off);
        let out = conn.handle(Instant::now(), f.inbound(), exited);
        assert_eq!(normalise(out), err(ErrorCode::Exited), "{f:?}");
        assert_eq!(conn.state(), RW, "{f:?}: the refusal is not fatal");
    }
    let mut conn = reach(Start::Bound, LegacyPolicy::Off);
    let out = conn.handle(Instant::now(), F::Peek.inbound(), exited);
    assert!(matches!(
        out.as_slice(),
        [Out::Effect(Effect::Peek(PeekRequest { .. }))]
    ));
    let out = conn.handle(Instant::now(), F::AttachRw.inbound(), exited);
    assert!(matches!(
        out.as_slice(),
        [Out::Effect(Effect::Attach(AttachRequest { .. }))]
    ));
    // Legacy input is dropped (no error packet), never delivered.
    let mut conn = reach(Start::LegacyAttached, LegacyPolicy::Full);
    assert!(conn
        .handle(Instant::now(), F::LData.inbound(), exited)
        .is_empty());
}
