//! latch-client as a library: the async API driving many real sessions from one
//! runtime, the examples run as programs, and bad input from a library caller.

mod support;

use std::cell::Cell;
use std::time::{Duration, Instant};

use latch_client::{
    exit, AttachMode, Client, ClientError, NewSession, PeekOptions, UnreachableCause,
};
use latch_wire::{SessionId, SessionRef};
use support::Reg;

fn client(reg: &Reg) -> Client {
    Client::open(&reg.root, support::latch_bin().into()).unwrap()
}

/// A session whose program first prints the creation it belongs to, as the daemon
/// put it in its environment, then echoes its input.
fn announcing(id: &str) -> NewSession {
    let mut new = NewSession::default();
    new.id = Some(SessionId::new(id).unwrap());
    new.command = vec![
        "sh".into(),
        "-c".into(),
        r#"echo "I am $LATCH_SESSION_ID@$LATCH_INCARNATION"; exec cat"#.into(),
    ];
    new
}

/// Every `I am ID@INC` and `echo-ID` token on a screen names `me`; returns how
/// many tokens name some other session.
fn foreign_tokens(screen: &[u8], me: &SessionRef) -> usize {
    let text = String::from_utf8_lossy(screen);
    let mine_intro = format!("I am {me}");
    let mine_echo = format!("echo-{}", me.id);
    text.split_whitespace()
        .zip(text.split_whitespace().skip(1))
        .filter(|(a, b)| {
            (*a == "am" && b.contains('@') && format!("I am {b}") != mine_intro)
                || (b.starts_with("echo-") && *b != mine_echo)
        })
        .count()
}

/// 100 sessions driven concurrently from one current-thread runtime: each is
/// bound, asked STATUS, waited on, peeked and sent input; every answer is checked
/// against the creation its connection was bound to.
#[test]
fn async_hundred_sessions_on_one_current_thread_runtime() {
    const N: usize = 100;
    let reg = Reg::new();
    let c = client(&reg);
    let sessions: Vec<SessionRef> = (0..N)
        .map(|i| c.create(announcing(&format!("a{i:03}"))).unwrap().session())
        .collect();
    // The checker itself tells another creation's tokens apart.
    let other = format!("I am {}\necho-{}", sessions[1], sessions[1].id);
    assert_eq!(foreign_tokens(other.as_bytes(), &sessions[0]), 2);
    assert_eq!(foreign_tokens(other.as_bytes(), &sessions[1]), 0);
    let checked = Cell::new(0usize);
    let misdirected = Cell::new(0usize);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    let results = rt.block_on(futures_util::future::join_all(sessions.iter().map(|s| {
        let (c, checked, misdirected) = (&c, &checked, &misdirected);
        async move {
            let count = |foreign: bool| {
                checked.set(checked.get() + 1);
                if foreign {
                    misdirected.set(misdirected.get() + 1);
                }
            };
            let limit = Duration::from_secs(60);
            let mut bound = c.connect_async(s).await?;
            let st = bound.status().await?;
            count(st.id != s.id || st.incarnation != s.incarnation);
            let intro = format!("I am {s}");
            let screen = c
                .wait_for_text_async(s, "I am ", PeekOptions::plain(), limit)
                .await?;
            count(
                !String::from_utf8_lossy(&screen).contains(&intro)
                    || foreign_tokens(&screen, s) > 0,
            );
            bound.send(format!("echo-{}\n", s.id).as_bytes()).await?;
            count(false);
            let echo = format!("echo-{}", s.id);
            let screen = c
                .wait_for_text_async(s, &echo, PeekOptions::plain(), limit)
                .await?;
            count(foreign_tokens(&screen, s) > 0);
            let screen = bound.peek(PeekOptions::plain()).await?;
            let text = String::from_utf8_lossy(&screen).into_owned();
            count(
                !text.contains(&intro) || !text.contains(&echo) || foreign_tokens(&screen, s) > 0,
            );
            Ok::<_, ClientError>(())
        }
    })));
    let wall = started.elapsed();
    for (s, r) in sessions.iter().zip(&results) {
        assert!(r.is_ok(), "session {s}: {r:?}");
    }
    println!(
        "async-100: sessions={N} responses_checked={} misdirected={} wall={:.3}s",
        checked.get(),
        misdirected.get(),
        wall.as_secs_f64()
    );
    assert_eq!(checked.get(), 5 * N);
    assert_eq!(misdirected.get(), 0);
}
