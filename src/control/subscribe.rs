//! `subscribe` (SPEC §13.5): a read-only attachment to one creation, pushed as
//! notifications. Its thread always reads the daemon, so the daemon never waits
//! on this process; what the subscriber cannot take is dropped here, counted,
//! and reported exactly with `lagged`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use latch_client::{AttachEvent, AttachMode, AttachReader, AttachWriter, Bound, Class, Client};
use latch_wire::SessionRef;
use serde::Serialize;
use serde_json::Value;

use super::methods::{parse, resolve};
use super::params::SubscribeParams;
use super::rpc::{self, RpcError};
use super::schema::*;
use super::{At, Failure, Place, Server, SUBSCRIPTIONS_MAX, SUBSCRIPTION_QUEUE_BYTES};
use crate::shapes::RangeJson;

/// An open subscription: cancelling detaches its attachment.
#[derive(Debug)]
pub(crate) struct Handle {
    cancelled: Arc<AtomicBool>,
    writer: Arc<Mutex<AttachWriter>>,
}

impl Handle {
    /// Ends the subscription (its thread sends `closed`); false if it had ended.
    pub(crate) fn cancel(self) -> bool {
        let first = !self.cancelled.swap(true, Ordering::SeqCst);
        if let Ok(mut w) = self.writer.lock() {
            let _ = w.detach();
        }
        first
    }
}

/// Decodes a byte stream as UTF-8 across chunks: a split sequence waits for the
/// next chunk, invalid bytes become U+FFFD (SPEC §13.5).
#[derive(Debug, Default)]
pub(crate) struct Utf8Stream {
    held: Vec<u8>,
}

impl Utf8Stream {
    /// The text of `held + bytes` up to an incomplete sequence at its end, and
    /// how many bytes that text stands for.
    pub(crate) fn push(&mut self, bytes: &[u8]) -> (String, usize) {
        let mut all = std::mem::take(&mut self.held);
        all.extend_from_slice(bytes);
        let mut out = String::new();
        let mut rest = &all[..];
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (ok, bad) = rest.split_at(e.valid_up_to());
                    out.push_str(std::str::from_utf8(ok).unwrap_or_default());
                    match e.error_len() {
                        Some(n) => {
                            out.push('\u{FFFD}');
                            rest = &bad[n..];
                        }
                        None => {
                            rest = bad;
                            break;
                        }
                    }
                }
            }
        }
        let used = all.len() - rest.len();
        self.held = rest.to_vec();
        (out, used)
    }

    /// Everything held, lossily (at the end of the stream).
    pub(crate) fn finish(&mut self) -> String {
        String::from_utf8_lossy(&std::mem::take(&mut self.held)).into_owned()
    }

    pub(crate) fn held(&self) -> usize {
        self.held.len()
    }

    pub(crate) fn clear(&mut self) {
        self.held.clear();
    }
}

/// One subscription's stream state.
struct Stream {
    server: Arc<Server>,
    sub: u64,
    session: SessionRef,
    output: bool,
    text: Option<Utf8Stream>,
    /// The output cursor after the last byte delivered, held or dropped.
    next: u64,
    /// Where the held text bytes start.
    held_from: u64,
    dropped: u64,
}

impl Stream {
    fn line<T: Serialize>(&self, method: &str, v: &T) -> String {
        let params = serde_json::to_value(v).unwrap_or(Value::Null);
        rpc::notification_line(method, &params)
    }

    fn id(&self) -> (String, String) {
        (
            self.session.id.to_string(),
            self.session.incarnation.to_string(),
        )
    }

    fn lagged(&self, at: u64) -> String {
        let (id, incarnation) = self.id();
        self.line(
            "lagged",
            &LaggedNote {
                subscription: self.sub,
                id,
                incarnation,
                dropped_bytes: self.dropped,
                output_cursor: at,
                dropped_events: 0,
            },
        )
    }

    /// Output the daemon skipped (a resynchronisation, or the ring's loss): the
    /// next output starts at `at`.
    fn skip_to(&mut self, at: u64) {
        if at > self.next {
            self.dropped += at - self.next;
            self.next = at;
        }
        if let Some(t) = &mut self.text {
            self.dropped += t.held() as u64;
            t.clear();
        }
        self.held_from = self.next;
    }

    /// Output `bytes` at the cursor `self.next`.
    fn deliver(&mut self, bytes: &[u8]) {
        let start = self.next;
        self.next += bytes.len() as u64;
        if !self.output {
            return;
        }
        // Behind: dropped before anything is encoded, so this thread keeps up
        // with the daemon however slow stdout is.
        let estimate = bytes.len() / 3 * 4 + 512;
        if !self
            .server
            .out
            .has_room(self.sub, estimate, SUBSCRIPTION_QUEUE_BYTES)
        {
            self.drop_from(start);
            return;
        }
        let (id, incarnation) = self.id();
        let (from, data, text, end) = match &mut self.text {
            None => {
                let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
                (start, Some(b64), None, self.next)
            }
            Some(t) => {
                let (s, used) = t.push(bytes);
                let from = self.held_from;
                self.held_from = from + used as u64;
                (from, None, Some(s), from + used as u64)
            }
        };
        if from == end {
            return;
        }
        let note = OutputNote {
            subscription: self.sub,
            id,
            incarnation,
            output_range: RangeJson { start: from, end },
            data,
            text,
        };
        let mut lines = Vec::with_capacity(2);
        if self.dropped > 0 {
            lines.push(self.lagged(from));
        }
        lines.push(self.line("output", &note));
        let out = &self.server.out;
        if out.notify_if_room(self.sub, lines, SUBSCRIPTION_QUEUE_BYTES) {
            self.dropped = 0;
        } else {
            // The subscriber is behind: dropped here, never waited for.
            self.drop_from(from);
        }
    }

    /// Drops everything from `from` (a chunk's start, or the held text's) up to
    /// `self.next`.
    fn drop_from(&mut self, from: u64) {
        let from = match &mut self.text {
            Some(t) => {
                t.clear();
                self.held_from.min(from)
            }
            None => from,
        };
        self.dropped += self.next - from;
        self.held_from = self.next;
    }

    /// The last words: pending lag, held text, then `method`'s notification.
    fn end<T: Serialize>(&mut self, method: &str, v: &T) {
        if let Some(t) = &mut self.text {
            let s = t.finish();
            if !s.is_empty() && self.dropped == 0 {
                let (id, incarnation) = self.id();
                let note = OutputNote {
                    subscription: self.sub,
                    id,
                    incarnation,
                    output_range: RangeJson {
                        start: self.held_from,
                        end: self.next,
                    },
                    data: None,
                    text: Some(s),
                };
                let line = self.line("output", &note);
                if !self
                    .server
                    .out
                    .notify_if_room(self.sub, vec![line], SUBSCRIPTION_QUEUE_BYTES)
                {
                    self.dropped += self.next - self.held_from;
                }
            } else {
                self.dropped += self.next - self.held_from;
            }
        }
        if self.dropped > 0 {
            let lagged = self.lagged(self.next);
            self.server.out.notify(self.sub, lagged);
        }
        let line = self.line(method, v);
        self.server.out.notify(self.sub, line);
    }
}

/// `subscribe`: answers with the subscription before its first notification.
pub(crate) fn start(
    server: &Arc<Server>,
    params: Value,
    id: &Value,
) -> Option<Result<Value, Failure>> {
    match open(server, params, id) {
        Ok(()) => None,
        Err(f) => Some(Err(f)),
    }
}

fn open(server: &Arc<Server>, params: Value, id: &Value) -> Result<(), Failure> {
    let p: SubscribeParams = parse(params)?;
    let text = match p.format.as_deref() {
        None | Some("base64") => None,
        Some("text") => Some(Utf8Stream::default()),
        Some(f) => return Err(RpcError::params(format!("format {f:?}: base64 or text")).into()),
    };
    let (place, target) = resolve(server, &p.target)?;
    let s = target.session.clone();
    // The events file is the registry's: through --host, output only (SPEC §13.8).
    let owner = match &place {
        Place::Here(c) => c.required_owner().cloned(),
        Place::There(_) if p.events => {
            let e = latch_client::ClientError::Usage(
                "events: true does not go through --host (output does): run latch control on \
                 that host for its events"
                    .into(),
            );
            return Err(Failure::Latch(Box::new(e), Some(s)));
        }
        Place::There(t) => t.owner.clone(),
    };
    let bound = place.loc().connect(&target).at(&s)?;
    let ring = p
        .since
        .map(|_| place.loc().connect(&target))
        .transpose()
        .at(&s)?;
    drop(place);
    let attached = bound.attach(0, 0, AttachMode::ReadOnly).at(&s)?;
    let cut = attached.cut.clone().ok_or_else(|| {
        Failure::Latch(
            Box::new(latch_client::ClientError::protocol(
                latch_client::Mismatch::Version,
                "subscriptions need a daemon of protocol version 3 (restart the session)",
            )),
            Some(s.clone()),
        )
    })?;
    let since = p.since.unwrap_or(cut.cursor);
    if since > cut.cursor {
        let e = latch_client::ClientError::Usage(format!(
            "since {since} is past the output cursor {}",
            cut.cursor
        ));
        return Err(Failure::Latch(Box::new(e), Some(s)));
    }
    let sub = server.next_sub.fetch_add(1, Ordering::SeqCst);
    let cancelled = Arc::new(AtomicBool::new(false));
    let writer = Arc::new(Mutex::new(attached.writer));
    {
        let mut st = server.lock();
        if st.subs.len() >= SUBSCRIPTIONS_MAX {
            let e = RpcError::new(
                rpc::OVERLOADED,
                format!("{SUBSCRIPTIONS_MAX} subscriptions are open on this connection"),
            );
            return Err(e.into());
        }
        let handle = Handle {
            cancelled: cancelled.clone(),
            writer,
        };
        st.subs.insert(sub, handle);
    }
    let (sid, incarnation) = (s.id.to_string(), s.incarnation.to_string());
    server.answer(
        id,
        serde_json::to_value(SubscribedJson {
            subscription: sub,
            id: sid,
            incarnation,
            output_cursor: since,
        })
        .map_err(|e| latch_client::ClientError::failed("", e).into()),
    );
    let stream = Stream {
        server: server.clone(),
        sub,
        session: s,
        output: p.output.unwrap_or(true),
        text,
        next: since,
        held_from: since,
        dropped: 0,
    };
    let events = p
        .events
        .then(|| server.own_client(owner))
        .transpose()
        .ok()
        .flatten();
    let reader = attached.reader;
    std::thread::Builder::new()
        .name("control-sub".into())
        .spawn(move || run(stream, reader, ring, cut.cursor, events, cancelled))
        .map(|_| ())
        .map_err(|e| latch_client::ClientError::failed("thread", e).into())
}

/// How long the events thread sleeps between checks for cancellation.
const EVENTS_POLL: Duration = Duration::from_millis(250);

fn run(
    mut st: Stream,
    mut reader: AttachReader,
    ring: Option<Bound>,
    cut: u64,
    events: Option<Client>,
    cancelled: Arc<AtomicBool>,
) {
    let events = events.map(|client| {
        let (server, sub, session) = (st.server.clone(), st.sub, st.session.clone());
        let flag = cancelled.clone();
        std::thread::spawn(move || follow_events(&server, sub, &session, &client, &flag))
    });
    if let Some(ring) = ring {
        catch_up(&mut st, ring, cut);
    }
    if st.next < cut {
        st.skip_to(cut);
    }
    let end = live(&mut st, &mut reader);
    cancelled.store(true, Ordering::SeqCst);
    if let Some(t) = events {
        let _ = t.join();
    }
    st.server.lock().subs.remove(&st.sub);
    let (id, incarnation) = st.id();
    let sub = st.sub;
    match end {
        End::Exit(code, signal) => {
            let next = st.next;
            st.end(
                "exit",
                &ExitNote {
                    subscription: sub,
                    id,
                    incarnation,
                    exit_code: code,
                    exit_signal: signal,
                    output_cursor: next,
                },
            );
        }
        End::Replaced(actual) => st.end(
            "replaced",
            &ReplacedNote {
                subscription: sub,
                id,
                incarnation,
                actual_incarnation: actual,
            },
        ),
        End::Closed(reason) => st.end(
            "closed",
            &ClosedNote {
                subscription: sub,
                id,
                incarnation,
                reason,
            },
        ),
    }
}

/// The ring's output from `st.next` up to the attach cut (OUTPUT_SINCE, SPEC §4.7).
fn catch_up(st: &mut Stream, mut ring: Bound, cut: u64) {
    while st.next < cut {
        let want = u32::try_from(cut - st.next)
            .unwrap_or(u32::MAX)
            .min(1 << 20);
        let Ok(range) = ring.output_since(st.next, want) else {
            return;
        };
        if range.start > st.next {
            st.skip_to(range.start);
        }
        let room = usize::try_from(cut.saturating_sub(range.start)).unwrap_or(usize::MAX);
        let bytes = &range.bytes[..range.bytes.len().min(room)];
        if bytes.is_empty() {
            return;
        }
        st.deliver(bytes);
    }
}

enum End {
    Exit(Option<i32>, Option<i32>),
    Replaced(Option<String>),
    Closed(&'static str),
}

fn live(st: &mut Stream, reader: &mut AttachReader) -> End {
    loop {
        match reader.next_event() {
            Ok(AttachEvent::Output(b)) => st.deliver(&b),
            // Resynchronised (SPEC §8): the CUT's cursor says exactly what was
            // skipped.
            Ok(AttachEvent::Cut(c)) => st.skip_to(c.cursor),
            Ok(AttachEvent::Exit(e)) => return End::Exit(e.code, e.signal),
            Ok(AttachEvent::Detached) => return End::Closed("cancelled"),
            Ok(AttachEvent::Geometry { .. } | AttachEvent::Screen(_)) => {}
            Ok(AttachEvent::Error { code, .. }) if Class::of_daemon(code) == Class::Replaced => {
                return End::Replaced(now_holds(st));
            }
            other => {
                match &other {
                    Ok(AttachEvent::Error { code, detail }) => {
                        eprintln!("latch control: subscription {}: {code:?}: {detail}", st.sub);
                    }
                    Err(e) => eprintln!("latch control: subscription {}: {e}", st.sub),
                    _ => {}
                }
                let now = now_holds(st);
                if now.as_deref() != Some(&st.session.incarnation.to_string()) {
                    return End::Replaced(now);
                }
                return End::Closed("closed");
            }
        }
    }
}

/// The incarnation the id holds now, if any.
fn now_holds(st: &Stream) -> Option<String> {
    st.server
        .base
        .read_checked(&st.session.id)
        .ok()
        .flatten()
        .map(|r| r.incarnation.to_string())
}

/// `event` notifications: the creation's new events (SPEC §9.9).
fn follow_events(
    server: &Server,
    sub: u64,
    session: &SessionRef,
    client: &Client,
    cancelled: &AtomicBool,
) {
    let scope = latch_client::EventScope::Creation(session.clone());
    let Ok(mut follower) = client.follow_events(scope) else {
        return;
    };
    // Only events recorded from now on.
    if follower.for_each_new(|_| true).is_err() {
        return;
    }
    let mut dropped = 0u64;
    while !cancelled.load(Ordering::SeqCst) {
        let Ok(next) = follower.next_event(Some(EVENTS_POLL)) else {
            return;
        };
        let Some(ev) = next else { continue };
        let Value::Object(event) = ev.read().to_value() else {
            continue;
        };
        let (id, incarnation) = (session.id.to_string(), session.incarnation.to_string());
        let note = EventNote {
            subscription: sub,
            id: id.clone(),
            incarnation: incarnation.clone(),
            event,
        };
        let mut lines = Vec::new();
        if dropped > 0 {
            let lag = LaggedNote {
                subscription: sub,
                id,
                incarnation,
                dropped_bytes: 0,
                output_cursor: 0,
                dropped_events: dropped,
            };
            lines.push(rpc::notification_line(
                "lagged",
                &serde_json::to_value(lag).unwrap_or(Value::Null),
            ));
        }
        lines.push(rpc::notification_line(
            "event",
            &serde_json::to_value(note).unwrap_or(Value::Null),
        ));
        if server
            .out
            .notify_if_room(sub, lines, SUBSCRIPTION_QUEUE_BYTES)
        {
            dropped = 0;
        } else {
            dropped += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Utf8Stream;

    #[test]
    fn text_keeps_whole_sequences_and_replaces_invalid_bytes() {
        let mut t = Utf8Stream::default();
        let euro = "€".as_bytes();
        assert_eq!(t.push(&euro[..1]), (String::new(), 0));
        assert_eq!(t.push(&euro[1..]), ("€".to_owned(), 3));
        assert_eq!(t.push(b"a\xffb"), ("a\u{FFFD}b".to_owned(), 3));
        assert_eq!(t.push(&euro[..2]), (String::new(), 0));
        assert_eq!(t.finish(), "\u{FFFD}");
    }
}
