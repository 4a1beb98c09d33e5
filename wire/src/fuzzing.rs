//! Entry points for the cargo-fuzz targets in `fuzz/` (not a public API).
//!
//! Compiled only with the `fuzzing` feature. Like the rest of
//! the crate it reads no clock: every function here takes the time it runs at as
//! a value, as the state machine takes it.

use std::time::{Duration, Instant};

use bytes::BytesMut;

use crate::codec::{ClientCodec, Inbound, Outbound, ServerCodec};
use crate::frame::{ClientFrame, LegacyPolicy, Limits, ServerFrame};
use crate::ids::{Incarnation, SessionId, SessionRef};
use crate::server::{Access, ConnState, Effect, Env, Out, ServerConfig, ServerConn};
use crate::version::SUPPORTED;

/// The daemon identity used by the fuzz targets and property tests.
pub fn own_ref() -> SessionRef {
    SessionRef::new(
        SessionId::new("fuzz").expect("valid id"),
        Incarnation::from_parts([0x11; 16], [0x22; 16]),
    )
}

/// A state machine configured as the daemon configures it, accepted at `now`.
pub fn server_conn_at(policy: LegacyPolicy, now: Instant) -> ServerConn {
    ServerConn::new(
        ServerConfig {
            own: own_ref(),
            versions: SUPPORTED,
            limits: Limits {
                max_client_frame: 65_536,
                max_server_frame: 16 << 20,
                client_queue_bytes: 8 << 20,
            },
            server_name: "fuzz".into(),
            legacy_policy: policy,
        },
        now,
    )
}

/// Decodes arbitrary bytes with both codecs; must never panic.
pub fn decode_any(data: &[u8]) {
    let mut src = BytesMut::from(data);
    let mut server = ServerCodec::default();
    while let Ok(Some(_)) = server.decode_inbound(&mut src) {}
    let mut src = BytesMut::from(data);
    let mut client = ClientCodec::default();
    while let Ok(Some(_)) = client.decode_server(&mut src) {}
    let mut src = BytesMut::from(data);
    while let Ok(Some(_)) = crate::legacy::decode_packet(&mut src, 1 << 20) {}
}

/// Feeds `data` to a server codec in pieces cut at `cuts`, and asserts the frames
/// decoded equal those decoded from the whole input at once.
pub fn deframe_split(data: &[u8], cuts: &[u8]) {
    let whole = decode_all(data, &[]);
    let split = decode_all(data, cuts);
    assert_eq!(
        whole, split,
        "splitting the input changed the decoded frames"
    );
}

fn decode_all(data: &[u8], cuts: &[u8]) -> (Vec<Inbound>, bool) {
    let mut codec = ServerCodec::default();
    let mut src = BytesMut::new();
    let mut frames = Vec::new();
    let mut rest = data;
    let mut cut_iter = cuts.iter();
    loop {
        let take = match cut_iter.next() {
            Some(&c) => usize::from(c).min(rest.len()),
            None => rest.len(),
        };
        let (piece, tail) = rest.split_at(take);
        src.extend_from_slice(piece);
        rest = tail;
        loop {
            match codec.decode_inbound(&mut src) {
                Ok(Some(f)) => frames.push(f),
                Ok(None) => break,
                Err(_) => return (frames, true),
            }
        }
        if rest.is_empty() {
            return (frames, false);
        }
    }
}

/// Drives the state machine with the frames decoded from `data`, the way the
/// daemon does, and asserts the central property after every step. `mask` varies
/// the environment per step: bit 0 draining, bit 4 exited, bits 1-2 how much time
/// passes before the frame (0, 3, 6 or 12 s, so the handshake and idle deadlines
/// fire). A decoding failure ends the stream as it ends the daemon's connection.
/// The connection is accepted at `start`; the caller reads the clock, not this crate.
pub fn drive_state_machine(data: &[u8], policy: LegacyPolicy, mask: u8, start: Instant) {
    let mut src = BytesMut::from(data);
    let mut now = start;
    let mut conn = server_conn_at(policy, now);
    let mut i = 0u32;
    loop {
        match conn.decode(&mut src) {
            Ok(Some(frame)) => {
                let bits = mask.rotate_left(i % 8);
                i += 1;
                let secs = [0, 3, 6, 12][usize::from((bits >> 1) & 3)];
                now += Duration::from_secs(secs);
                check_timeout(&mut conn, now);
                let env = Env {
                    draining: bits & 1 != 0,
                    exited: bits & 0x10 != 0,
                };
                check_step(&mut conn, now, frame, env, policy);
            }
            Ok(None) => break,
            Err(e) => {
                let out = conn.handle_decode_error(&e);
                assert!(
                    !out.iter().any(|o| matches!(o, Out::Effect(_))),
                    "effect on a decode error: {out:?}"
                );
                assert_eq!(conn.state(), ConnState::Closed);
                break;
            }
        }
    }
}

/// Wakes the connection at `now` as the daemon's driver does when its deadline
/// passes, and asserts what a timeout may do: nothing before the deadline, and
/// after it only a close (with an error frame for a strict opening), never an
/// effect, and never for a bound connection.
pub fn check_timeout(conn: &mut ServerConn, now: Instant) -> Vec<Out> {
    let before = conn.state();
    let due = conn.poll_timeout().is_some_and(|d| now >= d);
    let out = conn.handle_timeout(now);
    assert!(
        !out.iter().any(|o| matches!(o, Out::Effect(_))),
        "effect on a timeout: {out:?}"
    );
    if due {
        assert!(
            matches!(before, ConnState::Accepted | ConnState::Negotiated { .. }),
            "a deadline in state {before:?}"
        );
        assert_eq!(conn.state(), ConnState::Closed);
        assert!(matches!(out.last(), Some(Out::Close)), "{out:?}");
    } else {
        assert!(
            out.is_empty(),
            "timeout output before the deadline: {out:?}"
        );
        assert_eq!(conn.state(), before);
    }
    out
}

/// One step of the central property: feed `frame`, assert that any effect was
/// legal in the state the connection was in, and that a connection becomes bound
/// only by a strict BIND naming the creation the daemon answers with.
pub fn check_step(
    conn: &mut ServerConn,
    now: Instant,
    frame: Inbound,
    env: Env,
    policy: LegacyPolicy,
) -> Vec<Out> {
    let before = conn.state();
    let legacy = matches!(frame, Inbound::Legacy(_));
    let asked = match &frame {
        Inbound::Strict(ClientFrame::Bind { id, incarnation }) => {
            Some(SessionRef::new(id.clone(), *incarnation))
        }
        _ => None,
    };
    let out = conn.handle(now, frame, env);
    if before == ConnState::Closed {
        assert!(out.is_empty(), "output {out:?} on a closed connection");
    }
    for o in &out {
        if let Out::Effect(e) = o {
            if legacy {
                assert!(
                    policy != LegacyPolicy::Off,
                    "effect {e:?} on a legacy connection under policy off"
                );
                assert!(
                    !e.is_mutating() || policy == LegacyPolicy::Full,
                    "mutating effect {e:?} on a legacy connection under {policy:?}"
                );
            } else {
                assert!(
                    matches!(before, ConnState::Bound { .. }),
                    "effect {e:?} emitted in state {before:?}"
                );
                assert!(
                    !(e.is_mutating()
                        && matches!(
                            before,
                            ConnState::Bound {
                                access: Access::ReadOnly,
                                ..
                            }
                        )),
                    "mutating effect {e:?} from a read-only client"
                );
            }
            if env.exited {
                assert!(!e.needs_program(), "effect {e:?} after the program exited");
            }
            if env.draining {
                // Only DETACH and a STOP (which continues the drain) pass the fence.
                assert!(
                    matches!(e, Effect::Detach | Effect::Stop(_)),
                    "effect {e:?} while draining"
                );
            }
        }
    }
    // Binding happens only through a strict BIND naming the daemon's own ref (the
    // one it answers BOUND with), never while draining.
    if !matches!(before, ConnState::Bound { .. }) && matches!(conn.state(), ConnState::Bound { .. })
    {
        assert!(!legacy, "a legacy packet bound the connection");
        assert!(!env.draining, "bound while draining");
        let asked = asked.expect("bound by a frame other than BIND");
        let answered = out
            .iter()
            .find_map(|o| match o {
                Out::Send(Outbound::Strict(ServerFrame::Bound { id, incarnation })) => {
                    Some(SessionRef::new(id.clone(), *incarnation))
                }
                _ => None,
            })
            .expect("bound without a BOUND reply");
        assert!(
            asked.matches(&answered),
            "BIND {asked} bound a connection answered with {answered}"
        );
    }
    out
}
