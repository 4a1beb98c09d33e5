//! One connection: accept checks, the reader that feeds `ServerConn`, and the writer
//! that drains the connection's queue.
//!
//! ```text
//! accept ── peer uid != ours ──────────────> close (logged), nothing read
//!   │    ── MAX_CONNECTIONS reached ───────> MAGIC + ERROR too-many-connections, close
//!   v
//! reader: first frame within HANDSHAKE_TIMEOUT_MS, then (negotiated, unbound) each
//!         frame within IDLE_UNBOUND_MS, else close (strict: ERROR handshake-timeout
//!         first); every frame -> ServerConn::handle -> Outs, in order
//!         decode error: strict -> ERROR <code> + close; legacy/undecided -> close
//!         stops reading while its replies are unread (REPLY_QUEUE_BYTES), and, for
//!         an attached writer that sent INPUT, while the program's input is full
//! writer: queue -> encode -> socket; resynchronises a client that fell behind
//!         once it has read what was queued; cuts off a client that read nothing for
//!         CLIENT_STALL_MS (see `outbound` for the bounds)
//! ```
//!
//! Peer input never panics the daemon: every failure ends this connection only.

use latch_wire::{AttachRequest, PeekRequest, Size};
use std::rc::Rc;
use std::time::Duration;

use bytes::BytesMut;
use futures_util::StreamExt;
use latch_wire::codec::{Framing, Inbound, Outbound, ServerCodec};
use latch_wire::framing::MAGIC;
use latch_wire::legacy::LegacyClientFrame;
use latch_wire::limits::MAX_CONNECTIONS;
use latch_wire::server::{ConnState, Effect, Env, Out, StatusForm};
use latch_wire::{CodecError, ErrorCode, LegacyPolicy, ServerFrame};
use tokio::io::AsyncWriteExt;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{UnixListener, UnixStream};
use tokio::time::{timeout, timeout_at, Instant};
use tokio_util::codec::Decoder;
use tokio_util::codec::FramedRead;

use crate::fanout::Screen;
use crate::logging::{legacy_seen, LegacySeen};
use crate::outbound::{
    stall_timeout, Peer, Phase, ScreenAsk, CLOSE_FLUSH_TIMEOUT, CUT_WRITE_TIMEOUT, WRITE_BATCH,
};
use crate::session::Session;

/// Accepts connections until the task is aborted.
pub(crate) async fn accept_loop(session: Rc<Session>, listener: UnixListener) {
    let euid = nix::unistd::geteuid().as_raw();
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                log!("accept failed: {e}");
                // Out of fds or similar: back off instead of spinning.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // SPEC.md §11 I9: the peer's uid, before a single byte is read.
        match stream.peer_cred() {
            Ok(cred) if cred.uid() == euid => {}
            Ok(cred) => {
                log!(
                    "refused a connection from uid {} (pid {:?}): not uid {euid}",
                    cred.uid(),
                    cred.pid()
                );
                continue;
            }
            Err(e) => {
                log!("refused a connection: cannot read its credentials: {e}");
                continue;
            }
        }
        if session.connections() >= MAX_CONNECTIONS {
            refuse_too_many(&stream);
            continue;
        }
        let client = session.register();
        tokio::task::spawn_local(serve(session.clone(), client, stream));
    }
}

/// Writes `MAGIC` + ERROR too-many-connections without reading, best effort (a fresh
/// socket's buffer always has room for it), then closes.
fn refuse_too_many(stream: &UnixStream) {
    log!("refused a connection: {MAX_CONNECTIONS} connections already");
    let mut buf = BytesMut::new();
    let frame = ServerFrame::error(
        ErrorCode::TooManyConnections,
        format!("the daemon already serves {MAX_CONNECTIONS} connections"),
    );
    if ServerCodec::default()
        .encode_outbound(&Outbound::Strict(frame), &mut buf)
        .is_ok()
    {
        debug_assert!(buf.starts_with(&MAGIC));
        let _ = stream.try_write(&buf);
    }
}

/// Serves one accepted connection to its end.
async fn serve(session: Rc<Session>, client: Rc<Peer>, stream: UnixStream) {
    let (rd, wr) = stream.into_split();
    tokio::join!(
        read_loop(&session, &client, rd),
        write_loop(&session, &client, wr)
    );
    session.unregister(client.id);
}

/// Decodes with the connection's own codec, the one its writer encodes with
/// (held by its [`ServerConn`](latch_wire::server::ServerConn)).
struct PeerDecoder(Rc<Peer>);

impl Decoder for PeerDecoder {
    type Item = Inbound;
    type Error = CodecError;
    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Inbound>, CodecError> {
        Ok(self.0.with_conn(|conn| conn.decode(src))?)
    }
}

/// What ended the wait for the next frame.
enum Next {
    Frame(Option<Result<Inbound, CodecError>>),
    Stopped,
    TimedOut,
}

async fn next_frame(
    framed: &mut FramedRead<crate::terminal::FdReader, PeerDecoder>,
    client: &Peer,
    deadline: Option<Instant>,
) -> Next {
    let read = async {
        match deadline {
            Some(d) => match timeout_at(d, framed.next()).await {
                Ok(f) => Next::Frame(f),
                Err(_) => Next::TimedOut,
            },
            None => Next::Frame(framed.next().await),
        }
    };
    tokio::select! {
        next = read => next,
        keys = crate::terminal::next_keys(client) => Next::Frame(Some(Ok(keys))),
        () = client.stop_reader.notified() => Next::Stopped,
    }
}

async fn read_loop(session: &Rc<Session>, client: &Rc<Peer>, rd: OwnedReadHalf) {
    let rd = crate::terminal::FdReader::new(rd, client.clone());
    let mut framed = FramedRead::new(rd, PeerDecoder(client.clone()));
    let mut warned_dropped = false;
    loop {
        if client.phase() != Phase::Open {
            break;
        }
        // The state machine owns the deadlines (SPEC.md §8); this only sleeps.
        let deadline = client
            .with_conn(|conn| conn.poll_timeout())
            .map(Instant::from_std);
        let frame = match next_frame(&mut framed, client, deadline).await {
            Next::Stopped => break,
            Next::TimedOut => {
                let (first, outs) = client.with_conn(|conn| {
                    let first = conn.state() == ConnState::Accepted;
                    (first, conn.handle_timeout(std::time::Instant::now()))
                });
                if outs.is_empty() {
                    continue;
                }
                log!(
                    "connection {}: {} in time",
                    client.id,
                    if first {
                        "no complete first frame"
                    } else {
                        "negotiated but not bound"
                    }
                );
                for out in outs {
                    carry_out(session, client, out);
                }
                break;
            }
            // EOF: the peer is done sending; what is queued is still written.
            Next::Frame(None) => break,
            Next::Frame(Some(Err(CodecError::Frame(e)))) => {
                log!("connection {} closed: {e}", client.id);
                for out in client.with_conn(|conn| conn.handle_decode_error(&e)) {
                    carry_out(session, client, out);
                }
                break;
            }
            Next::Frame(Some(Err(e))) => {
                log!("connection {} closed: {e}", client.id);
                break;
            }
            Next::Frame(Some(Ok(frame))) => frame,
        };
        let legacy_typed = matches!(
            frame,
            Inbound::Legacy(LegacyClientFrame::Data(_) | LegacyClientFrame::Resize(_))
        );
        let env = Env {
            draining: session.draining(),
            exited: session.exited().is_some(),
        };
        // The frame's outputs carry every fact the rest needs (`Out`, `Effect`).
        let (opened_legacy, outs) = client.with_conn(|conn| {
            let first = conn.state() == ConnState::Accepted;
            let legacy = first && conn.framing() == Framing::Legacy;
            (legacy, conn.handle(std::time::Instant::now(), frame, env))
        });
        // Legacy connections are counted and summarised, never logged one by one.
        let policy = session.legacy_policy();
        if opened_legacy {
            let seen = match policy {
                LegacyPolicy::Off => LegacySeen::Refused,
                _ => LegacySeen::Served,
            };
            legacy_seen(seen, policy.as_str());
        }
        if legacy_typed && policy == LegacyPolicy::Observe && !warned_dropped {
            warned_dropped = true;
            legacy_seen(LegacySeen::Dropped, policy.as_str());
        }
        // Only the attached read-write client that typed waits for input room.
        let typist = outs.iter().any(|o| {
            matches!(
                o,
                Out::Effect(Effect::Input {
                    attached_writer: true,
                    ..
                })
            )
        });
        for out in outs {
            // The one effect that waits (for its writer's open, SPEC §4.8).
            if let Out::Effect(Effect::CastStart(req)) = out {
                session.cast_start(client, req).await;
                continue;
            }
            carry_out(session, client, out);
        }
        // A PEEK the reply budget could not take yet waits here (SPEC.md §8).
        client
            .serve_parked(|ask| match ask {
                ScreenAsk::Peek(p) => session.peek(client, p.plain, p.full),
                ScreenAsk::Capture { full } => session.capture(client, full),
            })
            .await;
        // Replies: a client that does not read its answers stops being read.
        while client.replies_full() && client.phase() == Phase::Open {
            tokio::select! {
                () = client.replies_drained.notified() => {}
                () = client.stop_reader.notified() => break,
            }
        }
        // Input: only the attached read-write client that is typing into a program
        // that does not read waits (others were refused with input-full).
        if typist {
            wait_for_input_room(session, client).await;
        }
    }
    session.detach(client.id);
    client.close();
}

/// Waits until the program's input queue has room or the connection closes.
async fn wait_for_input_room(session: &Session, client: &Peer) {
    while !session.input_has_room() && client.phase() == Phase::Open {
        let room = session.input_room.notified();
        tokio::pin!(room);
        room.as_mut().enable();
        if session.input_has_room() {
            break;
        }
        tokio::select! {
            () = room => {}
            () = client.stop_reader.notified() => break,
        }
    }
}

/// Carries out one of the state machine's outputs.
pub(crate) fn carry_out(session: &Session, client: &Rc<Peer>, out: Out) {
    match out {
        Out::Send(frame) => {
            client.send(frame);
        }
        Out::Status(form) => {
            let frame = match form {
                StatusForm::Legacy => session.legacy_status(),
                StatusForm::WithOutput => {
                    Outbound::Strict(ServerFrame::Status3(Box::new(session.status3())))
                }
                StatusForm::Strict => {
                    Outbound::Strict(ServerFrame::Status(Box::new(session.status())))
                }
            };
            client.send(frame);
        }
        Out::Effect(effect) => {
            let result = match effect {
                Effect::Attach(AttachRequest {
                    rows,
                    cols,
                    read_only,
                }) => {
                    session.attach(client, rows, cols, read_only);
                    Ok(())
                }
                Effect::AttachTerminal(req) => {
                    crate::terminal::attach(session, client, req);
                    Ok(())
                }
                // A legacy PEEK subscribes read-only, as pty's daemon does (SPEC.md §7).
                Effect::Subscribe(PeekRequest { plain, full }) => {
                    session.join(client, 0, 0, true, Screen::LegacyPeek { plain, full });
                    Ok(())
                }
                Effect::Peek(peek) => {
                    // Else it waits for the reply budget (SPEC.md §8).
                    if client.may_cut(peek) {
                        session.peek(client, peek.plain, peek.full);
                    }
                    Ok(())
                }
                Effect::Input {
                    bytes,
                    attached_writer,
                } => session.input(bytes, attached_writer),
                Effect::Resize {
                    size: Size { rows, cols },
                    attached_writer,
                } => session.resize(client.id, attached_writer, rows, cols),
                Effect::Signal(sig) => session.signal(sig),
                Effect::Stop(sig) => {
                    // The fence goes up before the signal: from here on no new BIND
                    // or effect reaches this incarnation (SPEC.md §5.6).
                    if !session.draining() {
                        log!(
                            "connection {}: stop requested (signal {sig}): draining",
                            client.id
                        );
                    }
                    session.set_draining();
                    // Queued input will never be wanted now.
                    session.discard_input();
                    session.stop(sig)
                }
                Effect::Detach => {
                    session.detach(client.id);
                    Ok(())
                }
                Effect::OutputSince { since, max } => {
                    session.output_since(client, since, max);
                    Ok(())
                }
                // Carried out by the read loop, which waits for it.
                Effect::CastStart(_) => Ok(()),
                Effect::Casts { stop } => {
                    session.casts_reply(client, stop);
                    Ok(())
                }
                // The run lease and command blocks (SPEC §4.7, daemon/src/lease.rs).
                Effect::Lease => {
                    session.lease(client);
                    Ok(())
                }
                Effect::Release => {
                    session.release(client);
                    Ok(())
                }
                Effect::Commands { last } => {
                    session.commands(client, last);
                    Ok(())
                }
                // As a PEEK, it may wait for the reply budget (SPEC.md §8).
                Effect::Capture { full } => {
                    if client.may_cut(ScreenAsk::Capture { full }) {
                        session.capture(client, full);
                    }
                    Ok(())
                }
            };
            if let Err(refusal) = result {
                // On a legacy connection the codec writes nothing for it: the
                // old framing has no error packet.
                client.send(Outbound::Strict(refusal));
            }
        }
        Out::Close => client.close(),
    }
}

async fn write_loop(session: &Session, client: &Rc<Peer>, mut wr: OwnedWriteHalf) {
    let mut buf = BytesMut::with_capacity(16 * 1024);
    let mut deadline: Option<Instant> = None;
    let stall = stall_timeout();
    loop {
        // A passed terminal takes the stream from here on (SPEC §5.7).
        if client.tty.is_set() {
            let sock = std::mem::take(&mut buf);
            crate::terminal::write_loop(session, client, &mut wr, sock).await;
            break;
        }
        if buf.len() < WRITE_BATCH {
            client.fill(&mut buf, WRITE_BATCH);
        }
        let phase = client.phase();
        if phase != Phase::Open && deadline.is_none() {
            let grace = if phase == Phase::Cut {
                CUT_WRITE_TIMEOUT
            } else {
                CLOSE_FLUSH_TIMEOUT
            };
            deadline = Some(Instant::now() + grace);
        }
        if buf.is_empty() {
            if phase != Phase::Open {
                break;
            }
            // Everything queued was read: a client that fell behind gets a fresh
            // screen now (outbound module docs).
            if client.wants_resync() {
                session.resync(client);
                continue;
            }
            client.wake_writer.notified().await;
            continue;
        }
        let unwritten = buf.len();
        let written = match deadline {
            None => tokio::select! {
                r = timeout(stall, wr.write_buf(&mut buf)) => match r {
                    Ok(Ok(n)) => n > 0,
                    Ok(Err(_)) => false,
                    // Nothing read for the stall timeout: cut off, then go round
                    // again with the cut's deadline.
                    Err(_) => {
                        client.cut_off(stall);
                        true
                    }
                },
                // Cut off while blocked: go round again with the deadline. Whatever
                // of `buf` was written stays written; the rest is still in `buf`.
                () = client.cut.notified() => true,
            },
            Some(d) => matches!(timeout_at(d, wr.write_all_buf(&mut buf)).await, Ok(Ok(()))),
        };
        // Replies count in the daemon's budget until the socket has them (SPEC.md §8).
        client.written(unwritten - buf.len());
        if !written {
            client.fail();
            break;
        }
    }
    let _ = timeout(Duration::from_millis(100), wr.shutdown()).await;
}
