//! Reading and following session events (SPEC.md §9.9).
//!
//! Following is event-driven: an inotify watch on the registry root wakes the wait
//! whenever an events file is appended to, created, or replaced by rotation.

use std::collections::VecDeque;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use latch_registry::events::ReadEvent;
use latch_wire::{Incarnation, SessionId, SessionRef};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use serde_json::Value;

use crate::client::Client;
use crate::error::{ClientError, UnreachableCause};

/// Which events to read.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventScope {
    /// Every session's, sessions created later included.
    All,
    /// One id's whole history, across its incarnations, even once removed.
    Id(SessionId),
    /// One creation's only.
    Creation(SessionRef),
}

/// One event: typed when this build knows its type, else the JSON object as read
/// (SPEC.md §9.9). A line that cannot be parsed is an event of type `unreadable`,
/// never skipped.
#[derive(Debug, Clone, PartialEq)]
pub struct Event(ReadEvent);

impl Event {
    /// Its type: `session_start`, `metadata_change`, `kill_requested`,
    /// `session_exit`, `removed`, `bell`, … (SPEC.md §9.9).
    pub fn kind(&self) -> &str {
        self.0.type_name()
    }

    /// When it was recorded, in milliseconds since the epoch, if the line says.
    pub fn ts(&self) -> Option<u64> {
        self.0.ts()
    }

    /// The incarnation it is about, in its text form.
    pub fn incarnation(&self) -> Option<String> {
        self.0.incarnation()
    }

    /// The event as read: typed, or the JSON object of an unknown type.
    pub fn read(&self) -> &ReadEvent {
        &self.0
    }

    /// The whole event as its JSON object (SPEC.md §9.9).
    pub fn json(&self) -> Value {
        self.0.to_value()
    }
}

#[derive(Debug)]
struct Stream {
    id: SessionId,
    only: Option<Incarnation>,
    /// The last line read, to find our place again after rotation.
    last: Option<Vec<u8>>,
}

/// Reads a scope's events in order, and waits for more. Made by
/// [`Client::follow_events`].
#[derive(Debug)]
pub struct EventFollower<'c> {
    client: &'c Client,
    all: bool,
    streams: Vec<Stream>,
    inotify: Inotify,
    ready: VecDeque<Event>,
}

fn ids_with_events(client: &Client) -> Result<Vec<SessionId>, ClientError> {
    Ok(client.registry().event_ids()?)
}

impl Client {
    /// Starts reading `scope`'s events from the beginning of their files; the
    /// watch is in place before the first read, so nothing appended in between is
    /// missed.
    pub fn follow_events(&self, scope: EventScope) -> Result<EventFollower<'_>, ClientError> {
        let inotify = Inotify::init(InitFlags::IN_CLOEXEC)
            .map_err(|e| ClientError::Other(format!("inotify: {e}")))?;
        inotify
            .add_watch(
                self.registry().root(),
                AddWatchFlags::IN_MODIFY | AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO,
            )
            .map_err(|e| ClientError::Other(format!("inotify watch: {e}")))?;
        let stream = |id, only| Stream {
            id,
            only,
            last: None,
        };
        let (all, streams) = match scope {
            EventScope::All => (true, Vec::new()),
            EventScope::Id(id) => (false, vec![stream(id, None)]),
            EventScope::Creation(s) => (false, vec![stream(s.id, Some(s.incarnation))]),
        };
        Ok(EventFollower {
            client: self,
            all,
            streams,
            inotify,
            ready: VecDeque::new(),
        })
    }
}

impl EventFollower<'_> {
    /// The events recorded since the last read, without waiting, several ids'
    /// merged in time order (a line without a time keeps the time of the one before
    /// it). Reads are bounded (SPEC.md §9.9); an unreadable events file is a
    /// degraded read.
    pub fn read_new(&mut self) -> Result<Vec<Event>, ClientError> {
        if self.all {
            for id in ids_with_events(self.client)? {
                if !self.streams.iter().any(|s| s.id == id) {
                    self.streams.push(Stream {
                        id,
                        only: None,
                        last: None,
                    });
                }
            }
        }
        let mut batch = Vec::new();
        for s in &mut self.streams {
            let mut at = 0;
            for ev in fresh(self.client, s)? {
                at = ev.ts().unwrap_or(at);
                batch.push((at, ev));
            }
        }
        batch.sort_by_key(|(at, _)| *at);
        let mut out: Vec<Event> = self.ready.drain(..).collect();
        out.extend(batch.into_iter().map(|(_, ev)| ev));
        Ok(out)
    }

    /// Blocks until the registry changes (an events file may have grown), at most
    /// `timeout` (`None`: no limit). `Ok(false)`: nothing changed in time.
    pub fn wait(&mut self, timeout: Option<Duration>) -> Result<bool, ClientError> {
        let ms = match timeout {
            Some(t) => PollTimeout::from(u16::try_from(t.as_millis()).unwrap_or(u16::MAX)),
            None => PollTimeout::NONE,
        };
        let mut fds = [PollFd::new(self.inotify.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, ms) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => Ok(false),
            Ok(_) => {
                let _ = self.inotify.read_events();
                Ok(true)
            }
            Err(e) => Err(ClientError::Other(format!("poll: {e}"))),
        }
    }

    /// The next event, waiting for it at most `timeout` (`None`: no limit).
    /// `Ok(None)`: none arrived in time.
    pub fn next_event(&mut self, timeout: Option<Duration>) -> Result<Option<Event>, ClientError> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            if self.ready.is_empty() {
                let new = self.read_new()?;
                self.ready.extend(new);
            }
            if let Some(ev) = self.ready.pop_front() {
                return Ok(Some(ev));
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left.is_some_and(|l| l.is_zero()) {
                return Ok(None);
            }
            self.wait(left)?;
        }
    }
}

/// New lines of one stream since the last call. A line that cannot be parsed is
/// an `unreadable` event.
fn fresh(client: &Client, s: &mut Stream) -> Result<Vec<Event>, ClientError> {
    let lines = client
        .registry()
        .read_event_lines(&s.id)
        .map_err(|e| ClientError::unreachable(UnreachableCause::Io, e.to_string()))?;
    let start = match &s.last {
        None => 0,
        Some(last) => lines.iter().rposition(|l| l == last).map_or(0, |p| p + 1),
    };
    let mut out = Vec::new();
    for l in &lines[start..] {
        let ev = latch_registry::events::parse_line(&s.id, l);
        let wanted = s
            .only
            .as_ref()
            .is_none_or(|inc| ev.incarnation() == Some(inc.to_string()));
        if wanted {
            out.push(Event(ev));
        }
    }
    if let Some(l) = lines.into_iter().last() {
        s.last = Some(l);
    }
    Ok(out)
}
