//! The connection queues' tests (`outbound`).

use super::*;
use latch_wire::limits::REPLY_BUDGET_BYTES;
use latch_wire::PeekRequest;

fn conn() -> ServerConn {
    latch_wire::fuzzing::server_conn_at(latch_wire::LegacyPolicy::Full, std::time::Instant::now())
}

fn budget() -> Rc<ReplyBudget> {
    Rc::new(ReplyBudget::new(REPLY_BUDGET_BYTES))
}

fn screen(n: usize) -> Outbound {
    Outbound::Strict(ServerFrame::Screen(bytes::Bytes::from(vec![b's'; n])))
}

const FULL: PeekRequest = PeekRequest {
    plain: true,
    full: true,
};

fn drain(c: &Peer, codec: &mut latch_wire::ClientCodec) -> Vec<ServerFrame> {
    let mut buf = BytesMut::new();
    c.fill(&mut buf, usize::MAX);
    c.written(buf.len());
    let mut frames = Vec::new();
    while let Some(f) = codec.decode_server(&mut buf).unwrap() {
        frames.push(f);
    }
    frames
}

#[test]
fn replies_are_counted_across_connections_and_a_large_peek_waits_for_room() {
    let shared = Rc::new(ReplyBudget::new(1 << 20));
    let a = Peer::new(1, conn(), shared.clone());
    let b = Peer::new(2, conn(), shared.clone());
    let (mut ca, mut cb) = (
        latch_wire::ClientCodec::default(),
        latch_wire::ClientCodec::default(),
    );
    // Every reply counts, on every connection.
    a.send_screen(screen(700 << 10), FULL);
    assert_eq!(shared.queued(), cost(&screen(700 << 10)));
    assert!(b.send(Outbound::Strict(ServerFrame::Pong(1))));
    let both = cost(&screen(700 << 10)) + cost(&Outbound::Strict(ServerFrame::Pong(1)));
    assert_eq!(shared.queued(), both);
    // A second large screen does not fit: nothing is queued, the PEEK waits.
    b.send_screen(screen(700 << 10), FULL);
    assert_eq!(shared.queued(), both, "not queued");
    assert!(b.parked.get().is_some());
    // A small one still goes.
    b.send_screen(screen(1000), FULL);
    assert_eq!(drain(&b, &mut cb).len(), 2, "PONG and the small screen");
    // The parked PEEK is served once A's screen has been written.
    let served = Cell::new(0);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let wait = b.serve_parked(|p| {
            served.set(served.get() + 1);
            b.send_screen(screen(700 << 10), p);
        });
        tokio::pin!(wait);
        assert!(
            futures_util::FutureExt::now_or_never(wait.as_mut()).is_none(),
            "waits while A's reply is unread"
        );
        // Taken by A's writer but not yet by its socket: it still counts.
        let mut buf = BytesMut::new();
        a.fill(&mut buf, usize::MAX);
        assert_eq!(shared.queued(), buf.len());
        assert!(futures_util::FutureExt::now_or_never(wait.as_mut()).is_none());
        a.written(buf.len() / 2);
        assert!(futures_util::FutureExt::now_or_never(wait.as_mut()).is_none());
        a.written(buf.len() - buf.len() / 2);
        assert_eq!(shared.queued(), 0);
        let frames = ca.decode_server(&mut buf).unwrap();
        assert!(matches!(frames, Some(ServerFrame::Screen(_))));
        wait.await;
    });
    assert_eq!(served.get(), 1);
    assert_eq!(shared.queued(), cost(&screen(700 << 10)));
    let frames = drain(&b, &mut cb);
    assert!(matches!(&frames[..], [ServerFrame::Screen(s)] if s.len() == 700 << 10));
    assert_eq!(shared.queued(), 0);
}

#[test]
fn a_peek_expected_not_to_fit_waits_before_its_screen_is_cut() {
    let shared = Rc::new(ReplyBudget::new(1 << 20));
    let a = Peer::new(1, conn(), shared.clone());
    let b = Peer::new(2, conn(), shared.clone());
    assert!(a.may_cut(FULL), "nothing is known, nothing is queued");
    a.send_screen(screen(700 << 10), FULL);
    assert_eq!(shared.last_screen(FULL), cost(&screen(700 << 10)));
    assert!(!b.may_cut(FULL), "a screen like the last one would not fit");
    assert!(b.parked.get().is_some());
    let visible = PeekRequest {
        plain: true,
        full: false,
    };
    let c = Peer::new(3, conn(), shared.clone());
    assert!(c.may_cut(visible), "another kind has its own estimate");
}

#[test]
fn a_capture_waits_for_the_budget_as_a_peek_of_its_own_kind() {
    let shared = Rc::new(ReplyBudget::new(1 << 20));
    let a = Peer::new(1, conn(), shared.clone());
    let b = Peer::new(2, conn(), shared.clone());
    let full = ScreenAsk::Capture { full: true };
    let cells = || Outbound::Strict(ServerFrame::Capture(vec![0; 700 << 10].into()));
    assert!(a.may_cut(full));
    a.send_screen(cells(), full);
    assert_eq!(shared.last_screen(full), cost(&cells()));
    for (plain, full) in [(false, false), (false, true), (true, false), (true, true)] {
        let peek = PeekRequest { plain, full };
        assert_eq!(
            shared.last_screen(peek),
            0,
            "PEEK's estimates are their own"
        );
    }
    assert!(!b.may_cut(full));
    assert_eq!(b.parked.get().map(|(ask, _)| ask), Some(full));
    let visible = ScreenAsk::Capture { full: false };
    assert!(Peer::new(3, conn(), shared.clone()).may_cut(visible));
}

#[test]
fn a_connection_that_ends_or_fails_gives_its_replies_back() {
    let shared = Rc::new(ReplyBudget::new(1 << 20));
    let a = Peer::new(1, conn(), shared.clone());
    a.send_screen(screen(500 << 10), FULL);
    a.fail();
    assert_eq!(shared.queued(), 0, "fail");
    let b = Peer::new(2, conn(), shared.clone());
    b.send_screen(screen(500 << 10), FULL);
    b.close();
    assert!(shared.queued() > 0, "a closing connection still flushes");
    drop(b);
    assert_eq!(shared.queued(), 0, "dropped");
    let c = Peer::new(3, conn(), shared.clone());
    c.send_screen(screen(500 << 10), FULL);
    c.cut_off(Duration::from_secs(60));
    assert!(shared.queued() < 1024, "only the too-slow error is left");
    drop(c);
    assert_eq!(shared.queued(), 0);
}

fn out(n: usize) -> Outbound {
    Outbound::Strict(ServerFrame::Output(bytes::Bytes::from(vec![b'x'; n])))
}

#[test]
fn falling_behind_drops_stream_keeps_replies_and_resyncs_once_drained() {
    let c = Peer::with_bounds(1, conn(), budget(), 10 * 1024, 1000);
    assert!(c.send(Outbound::Strict(ServerFrame::Pong(7))));
    let mut streamed = 0;
    while c.stream(out(1024)) {
        streamed += 1;
        assert!(streamed < 100, "bound not enforced");
    }
    assert!(c.is_behind());
    assert_eq!(c.phase(), Phase::Open, "never cut off for falling behind");
    assert!(!c.stream(out(1)), "nothing streams while behind");
    assert!(!c.wants_resync(), "the reply is still queued");
    // The writer drains: only the reply was left.
    let mut buf = BytesMut::new();
    c.fill(&mut buf, usize::MAX);
    let mut codec = latch_wire::ClientCodec::default();
    assert_eq!(
        codec.decode_server(&mut buf).unwrap().unwrap(),
        ServerFrame::Pong(7)
    );
    assert!(buf.is_empty(), "stream frames were dropped");
    assert!(c.wants_resync());
    c.resynced();
    assert!(!c.is_behind());
    assert!(c.stream(out(1)));
    assert_eq!(c.resyncs(), 1);
}

#[test]
fn a_stalled_client_is_cut_off_with_too_slow() {
    let c = Peer::new(1, conn(), budget());
    assert!(c.stream(out(10)));
    c.cut_off(Duration::from_secs(60));
    assert_eq!(c.phase(), Phase::Cut);
    assert!(!c.stream(out(1)), "a cut client takes nothing more");
    let mut buf = BytesMut::new();
    c.fill(&mut buf, usize::MAX);
    let mut client = latch_wire::ClientCodec::default();
    let frame = client.decode_server(&mut buf).unwrap().unwrap();
    assert!(matches!(
        frame,
        ServerFrame::Error {
            code: ErrorCode::TooSlow,
            ..
        }
    ));
    assert!(buf.is_empty());
}

#[test]
fn a_legacy_connection_gets_legacy_packets_and_no_too_slow() {
    let c = Peer::new(2, conn(), budget());
    // Its first bytes (a legacy STATUS request) decide the framing, once.
    let mut opening = BytesMut::from(&[7u8, 0, 0, 0, 0][..]);
    assert!(c
        .with_conn(|conn| conn.decode(&mut opening))
        .unwrap()
        .is_some());
    assert!(c.with_conn(|conn| conn.is_legacy()));
    assert!(c.stream(Outbound::Strict(ServerFrame::Exit(
        latch_wire::ExitStatus {
            code: None,
            signal: Some(9)
        }
    ))));
    let mut buf = BytesMut::new();
    c.fill(&mut buf, usize::MAX);
    assert_eq!(&buf[..], &[4, 0, 0, 0, 4, 0, 0, 0, 137][..], "EXIT 128+9");
    assert!(c.stream(out(10)));
    c.cut_off(Duration::from_secs(60));
    buf.clear();
    c.fill(&mut buf, usize::MAX);
    assert!(buf.is_empty(), "the old framing has no error packet");
}
