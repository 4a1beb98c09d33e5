//! Reading and following session events (SPEC.md §9.9).
//!
//! Following is event-driven: an inotify watch on the registry root wakes the wait
//! whenever an events file is appended to, created, or replaced by rotation.

use std::collections::{BinaryHeap, VecDeque};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use latch_registry::events::ReadEvent;
use latch_registry::tail::{LineSource, Place};
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
    /// Where the last read stopped, to go on from there (after rotation too).
    place: Place,
}

/// One stream's next line in a merge: its merge time (the largest `ts` of it and
/// the lines before it in its file, SPEC §9.9), the stream, and the event.
struct Head {
    at: u64,
    stream: usize,
    event: Event,
    place: Place,
}

impl PartialEq for Head {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.stream) == (other.at, other.stream)
    }
}
impl Eq for Head {}
impl PartialOrd for Head {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Head {
    /// Reversed, so that `BinaryHeap` pops the earliest (ties: the first stream).
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (other.at, other.stream).cmp(&(self.at, self.stream))
    }
}

/// One stream's source of new lines during a merge, and its merge time so far.
struct Source {
    lines: LineSource,
    at: u64,
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
        let inotify =
            Inotify::init(InitFlags::IN_CLOEXEC).map_err(|e| ClientError::failed("inotify", e))?;
        inotify
            .add_watch(
                self.registry().root(),
                AddWatchFlags::IN_MODIFY | AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO,
            )
            .map_err(|e| ClientError::failed("inotify watch", e))?;
        let stream = |id, only| Stream {
            id,
            only,
            place: Place::default(),
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
    /// merged in time order ([`EventFollower::for_each_new`]). Holds them all: to
    /// read many files with bounded memory, use `for_each_new`.
    pub fn read_new(&mut self) -> Result<Vec<Event>, ClientError> {
        let mut out = Vec::new();
        self.for_each_new(|ev| {
            out.push(ev);
            true
        })?;
        Ok(out)
    }

    /// Hands `f` the events recorded since the last read, without waiting, until
    /// it returns `false`. Several ids' are merged in time order as they are read
    /// (a k-way merge, SPEC §9.9): each file's lines keep their order, and the next
    /// event is the one whose merge time (the largest `ts` of its line and the
    /// lines before it in its file) is least, ties going to the id first in order.
    /// Memory is bounded by the number of files, not their lines, and at most one
    /// file is open at a time. An events file that cannot be read (not a regular
    /// file, say) is a degraded read naming it.
    pub fn for_each_new(&mut self, mut f: impl FnMut(Event) -> bool) -> Result<(), ClientError> {
        while let Some(ev) = self.ready.pop_front() {
            if !f(ev) {
                return Ok(());
            }
        }
        if self.all {
            let known: std::collections::BTreeSet<SessionId> =
                self.streams.iter().map(|s| s.id.clone()).collect();
            for id in ids_with_events(self.client)? {
                if !known.contains(&id) {
                    self.streams.push(Stream {
                        id,
                        only: None,
                        place: Place::default(),
                    });
                }
            }
        }
        let mut sources = Vec::with_capacity(self.streams.len());
        let mut heap = BinaryHeap::with_capacity(self.streams.len());
        for (i, s) in self.streams.iter_mut().enumerate() {
            let path = self.client.registry().events_path(&s.id);
            let lines = LineSource::open(&path, &s.place).map_err(degraded)?;
            let mut src = lines.map(|lines| Source { lines, at: 0 });
            if let Some(head) = next_head(s, i, src.as_mut())? {
                heap.push(head);
            }
            sources.push(src);
        }
        while let Some(head) = heap.pop() {
            let i = head.stream;
            let s = &mut self.streams[i];
            s.place = head.place;
            if !f(head.event) {
                return Ok(());
            }
            if let Some(next) = next_head(s, i, sources[i].as_mut())? {
                heap.push(next);
            }
        }
        Ok(())
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
            Err(e) => Err(ClientError::failed("poll", e)),
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

fn degraded(e: latch_registry::file::FileError) -> ClientError {
    ClientError::unreachable(UnreachableCause::Degraded, e.to_string())
}

/// The next wanted event of stream `i` from its source, with its merge time; lines
/// of other creations (`only`) are passed over, their place taken.
fn next_head(
    s: &mut Stream,
    i: usize,
    src: Option<&mut Source>,
) -> Result<Option<Head>, ClientError> {
    let Some(src) = src else {
        return Ok(None);
    };
    while let Some(line) = src.lines.next_line().map_err(degraded)? {
        let ev = latch_registry::events::parse_line(&s.id, &line);
        src.at = src.at.max(ev.ts().unwrap_or(0));
        let place = src.lines.place_after(line);
        let wanted = s
            .only
            .as_ref()
            .is_none_or(|inc| ev.incarnation() == Some(inc.to_string()));
        if wanted {
            return Ok(Some(Head {
                at: src.at,
                stream: i,
                event: Event(ev),
                place,
            }));
        }
        s.place = place;
    }
    Ok(None)
}
