//! Version 3 (SPEC.md §4.2, §4.7): OUTPUT_SINCE is an effect on a bound version-3
//! connection only; on version 2 it is an unknown variant, `malformed` and fatal.
//! Negotiation picks 3 when both sides have it, and 2 with a version-2 peer.

use std::time::Instant;

use latch_wire::server::{ConnState, Effect, Out, ServerConfig, ServerConn, StatusForm};
use latch_wire::{
    ClientFrame, ErrorCode, Inbound, Incarnation, LegacyPolicy, Limits, Outbound, ServerFrame,
    SessionId, SessionRef, VersionRange, SUPPORTED,
};

fn conn() -> (ServerConn, SessionRef) {
    let own = SessionRef::new(
        SessionId::new("s").unwrap(),
        Incarnation::from_parts([1; 16], [2; 16]),
    );
    let config = ServerConfig {
        own: own.clone(),
        versions: SUPPORTED,
        limits: Limits {
            max_client_frame: 65_536,
            max_server_frame: 16 << 20,
            client_queue_bytes: 8 << 20,
        },
        server_name: "t".into(),
        legacy_policy: LegacyPolicy::Observe,
    };
    (ServerConn::new(config, Instant::now()), own)
}

fn bound(max: u16) -> ServerConn {
    let (mut c, own) = conn();
    let now = Instant::now();
    let env = Default::default();
    let hello = ClientFrame::Hello {
        versions: VersionRange { min: 2, max },
        client: "t".into(),
    };
    let out = c.handle(now, Inbound::Strict(hello), env);
    assert!(matches!(
        &out[..],
        [Out::Send(Outbound::Strict(ServerFrame::Welcome { version, .. }))] if *version == max
    ));
    let bind = ClientFrame::Bind {
        id: own.id,
        incarnation: own.incarnation,
    };
    c.handle(now, Inbound::Strict(bind), env);
    assert_eq!(c.version(), Some(max));
    c
}

#[test]
fn output_since_is_an_effect_on_version_3() {
    let mut c = bound(3);
    let out = c.handle(
        Instant::now(),
        Inbound::Strict(ClientFrame::OutputSince { since: 7, max: 10 }),
        Default::default(),
    );
    assert_eq!(
        out,
        vec![Out::Effect(Effect::OutputSince { since: 7, max: 10 })]
    );
}

/// STATUS says which form the connection gets: STATUS3 from version 3, STATUS on
/// version 2, bound or not (SPEC.md §4.2).
#[test]
fn status_names_its_form_by_version() {
    for (max, form) in [(3, StatusForm::WithOutput), (2, StatusForm::Strict)] {
        let mut c = bound(max);
        let out = c.handle(
            Instant::now(),
            Inbound::Strict(ClientFrame::Status),
            Default::default(),
        );
        assert_eq!(out, vec![Out::Status(form)], "version {max}");
    }
    let (mut c, _) = conn();
    let hello = ClientFrame::Hello {
        versions: VersionRange { min: 2, max: 3 },
        client: "t".into(),
    };
    let now = Instant::now();
    c.handle(now, Inbound::Strict(hello), Default::default());
    let out = c.handle(
        now,
        Inbound::Strict(ClientFrame::Status),
        Default::default(),
    );
    assert_eq!(out, vec![Out::Status(StatusForm::WithOutput)], "negotiated");
}

#[test]
fn output_since_on_version_2_is_malformed_and_closes() {
    let mut c = bound(2);
    let out = c.handle(
        Instant::now(),
        Inbound::Strict(ClientFrame::OutputSince { since: 7, max: 10 }),
        Default::default(),
    );
    assert!(matches!(
        &out[..],
        [
            Out::Send(Outbound::Strict(ServerFrame::Error {
                code: ErrorCode::Malformed,
                ..
            })),
            Out::Close
        ]
    ));
    assert_eq!(c.state(), ConnState::Closed);
}

/// Recordings (SPEC §4.8): CAST_START and CASTS are effects of a bound version-3
/// connection; on version 2 they are `malformed`; a read-only attachment may not
/// start one, and nothing starts one once the program has exited.
#[test]
fn cast_frames_are_version_3_effects() {
    let req = latch_wire::CastRequest {
        file: "/tmp/c".into(),
        max_bytes: Some(4096),
    };
    let mut c = bound(3);
    let now = Instant::now();
    let out = c.handle(
        now,
        Inbound::Strict(ClientFrame::CastStart(req.clone())),
        Default::default(),
    );
    assert_eq!(out, vec![Out::Effect(Effect::CastStart(req.clone()))]);
    let out = c.handle(
        now,
        Inbound::Strict(ClientFrame::Casts { stop: true }),
        Default::default(),
    );
    assert_eq!(out, vec![Out::Effect(Effect::Casts { stop: true })]);
    let exited = latch_wire::server::Env {
        exited: true,
        ..Default::default()
    };
    let out = c.handle(
        now,
        Inbound::Strict(ClientFrame::CastStart(req.clone())),
        exited,
    );
    assert!(matches!(
        &out[..],
        [Out::Send(Outbound::Strict(ServerFrame::Error {
            code: ErrorCode::Exited,
            ..
        }))]
    ));

    let mut v2 = bound(2);
    let out = v2.handle(
        now,
        Inbound::Strict(ClientFrame::Casts { stop: false }),
        Default::default(),
    );
    assert!(matches!(
        &out[..],
        [
            Out::Send(Outbound::Strict(ServerFrame::Error {
                code: ErrorCode::Malformed,
                ..
            })),
            Out::Close
        ]
    ));

    let mut ro = bound(3);
    let attach = ClientFrame::Attach(latch_wire::AttachRequest {
        rows: 0,
        cols: 0,
        read_only: true,
    });
    ro.handle(now, Inbound::Strict(attach), Default::default());
    let out = ro.handle(
        now,
        Inbound::Strict(ClientFrame::CastStart(req)),
        Default::default(),
    );
    assert!(matches!(
        &out[..],
        [Out::Send(Outbound::Strict(ServerFrame::Error {
            code: ErrorCode::ForbiddenByPolicy,
            ..
        }))]
    ));
}

/// The run lease (SPEC.md §4.2): LEASE is an effect on version 3 only, and its
/// holder may type while attached read-only, but never STOP.
#[test]
fn a_lease_holder_types_read_only_and_version_2_has_no_lease() {
    let mut c = bound(2);
    let out = c.handle(
        Instant::now(),
        Inbound::Strict(ClientFrame::Lease),
        Default::default(),
    );
    assert!(matches!(out.last(), Some(Out::Close)), "{out:?}");
    let mut c = bound(3);
    let now = Instant::now();
    let env = Default::default();
    let out = c.handle(now, Inbound::Strict(ClientFrame::Lease), env);
    assert_eq!(out, vec![Out::Effect(Effect::Lease)]);
    let attach = ClientFrame::Attach(latch_wire::AttachRequest {
        rows: 0,
        cols: 0,
        read_only: true,
    });
    c.handle(now, Inbound::Strict(attach), env);
    let input = || Inbound::Strict(ClientFrame::Input(bytes::Bytes::from_static(b"x")));
    // Not leased: refused as any read-only client.
    assert!(matches!(
        &c.handle(now, input(), env)[..],
        [Out::Send(Outbound::Strict(ServerFrame::Error {
            code: ErrorCode::ForbiddenByPolicy,
            ..
        }))]
    ));
    c.set_leased(true);
    assert!(matches!(
        &c.handle(now, input(), env)[..],
        [Out::Effect(Effect::Input {
            attached_writer: false,
            ..
        })]
    ));
    let stop = Inbound::Strict(ClientFrame::Stop { signal: 15 });
    assert!(matches!(
        &c.handle(now, stop, env)[..],
        [Out::Send(Outbound::Strict(ServerFrame::Error {
            code: ErrorCode::ForbiddenByPolicy,
            ..
        }))]
    ));
}

#[test]
fn capture_is_an_effect_on_version_3_only() {
    let mut c = bound(3);
    let out = c.handle(
        Instant::now(),
        Inbound::Strict(ClientFrame::Capture { full: true }),
        Default::default(),
    );
    assert_eq!(out, vec![Out::Effect(Effect::Capture { full: true })]);
    assert!(!Effect::Capture { full: false }.is_mutating());
    let mut c = bound(2);
    let out = c.handle(
        Instant::now(),
        Inbound::Strict(ClientFrame::Capture { full: false }),
        Default::default(),
    );
    assert!(matches!(
        &out[..],
        [
            Out::Send(Outbound::Strict(ServerFrame::Error {
                code: ErrorCode::Malformed,
                ..
            })),
            Out::Close
        ]
    ));
    assert_eq!(c.state(), ConnState::Closed);
}

#[test]
fn reserved_frames_are_malformed_and_close() {
    let mut c = bound(3);
    let out = c.handle(
        Instant::now(),
        Inbound::Strict(ClientFrame::Reserved18),
        Default::default(),
    );
    assert!(matches!(
        &out[..],
        [
            Out::Send(Outbound::Strict(ServerFrame::Error {
                code: ErrorCode::Malformed,
                ..
            })),
            Out::Close
        ]
    ));
    assert_eq!(c.state(), ConnState::Closed);
}
