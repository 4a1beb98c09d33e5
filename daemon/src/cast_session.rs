//! The session's side of recordings (SPEC §4.8): CAST_START and CASTS, `new
//! --cast`, the writers' wake-ups, and the ends.

use latch_registry::events::EventKind;
use latch_registry::CastSpec;
use latch_wire::codec::Outbound;
use latch_wire::limits::CAST_MAX_BYTES_MIN as MAX_BYTES_MIN;
use latch_wire::{CastInfo, CastRequest, ExitStatus, ServerFrame};

use crate::cast_writer::{self, OpenError};
use crate::outbound::Peer;
use crate::session::Session;

impl Session {
    /// CAST_START (SPEC §4.8): the writer opens the file on its own thread while
    /// this connection's reader waits (no other connection does); then, in one
    /// step with the output, the header and the current screen are queued and the
    /// recording joins the output at the current cursor.
    pub(crate) async fn cast_start(&self, client: &Peer, req: CastRequest) {
        if let Err(refusal) = self.casts.borrow().check(&req) {
            client.send(Outbound::Strict(refusal));
            return;
        }
        let started = self.casts.borrow().spawn(req, None);
        let mut starting = match started {
            Ok(s) => s,
            Err(refusal) => {
                client.send(Outbound::Strict(refusal));
                return;
            }
        };
        if let Err(refusal) = starting.opened().await {
            client.send(Outbound::Strict(refusal));
            return;
        }
        let screen = latch_screen::attach_snapshot(&mut self.term.borrow_mut());
        self.settle();
        let cursor = self.log.borrow().cut().cursor;
        let (info, event) =
            self.casts
                .borrow_mut()
                .add(starting, self.size.get(), cursor, Some(screen));
        log!("recording into {} from output cursor {cursor}", info.file);
        self.record_cast_event(event);
        if let Some(status) = self.exited() {
            // The program ended while the file was opened.
            self.end_casts(&exit_label(status), "exit");
        }
        client.send(Outbound::Strict(ServerFrame::Casts(vec![info])));
    }

    /// `new --cast`: recording from the first byte, on a file opened before the
    /// program could write (SPEC §4.8).
    pub(crate) fn start_first_cast(&self, file: std::fs::File, spec: &CastSpec) {
        let req = CastRequest {
            file: spec.file.clone(),
            max_bytes: spec.max_bytes,
        };
        let started = self.casts.borrow().spawn(req, Some(file));
        match started {
            Ok(starting) => {
                let (_, event) = self
                    .casts
                    .borrow_mut()
                    .add(starting, self.size.get(), 0, None);
                self.record_cast_event(event);
            }
            Err(e) => log!("cannot record into {}: {e:?}", spec.file),
        }
    }

    /// CASTS (SPEC §4.8): the active recordings; with `stop`, each ends first.
    pub(crate) fn casts_reply(&self, client: &Peer, stop: bool) {
        let infos = if stop {
            self.end_casts("latch: recording stopped", "stopped")
        } else {
            self.casts.borrow().infos()
        };
        client.send(Outbound::Strict(ServerFrame::Casts(infos)));
    }

    /// Ends every recording with a final marker. At the program's exit, and the
    /// hook a replacement of the creation in the same daemon calls first, so that
    /// no recording continues into another creation (SPEC §4.8).
    pub(crate) fn end_casts(&self, label: &str, reason: &str) -> Vec<CastInfo> {
        let (infos, events) = {
            let mut casts = self.casts.borrow_mut();
            if casts.is_empty() {
                return Vec::new();
            }
            let log = self.log.borrow();
            let mut screen = || {
                let s = latch_screen::attach_snapshot(&mut self.term.borrow_mut());
                (s, self.size.get())
            };
            casts.stop_all((label, reason), &log, &mut screen)
        };
        self.settle();
        for e in events {
            self.record_cast_event(e);
        }
        infos
    }

    /// After a writer's wake: see [`Casts::settle`].
    pub(crate) fn settle_casts(&self) {
        let events = {
            let mut casts = self.casts.borrow_mut();
            if casts.is_empty() {
                return;
            }
            let log = self.log.borrow();
            let mut screen = || {
                let s = latch_screen::attach_snapshot(&mut self.term.borrow_mut());
                (s, self.size.get())
            };
            casts.settle(&log, &mut screen)
        };
        self.settle();
        for e in events {
            self.record_cast_event(e);
        }
    }

    fn record_cast_event(&self, event: EventKind) {
        if self.claim.record_event(event).is_err() {
            log!("a recording event was not recorded: the event writer is behind");
        }
    }

    /// Waits for the writers of ended recordings, at most until `deadline` (at
    /// exit, after every connection is served: nothing else waits then).
    pub(crate) async fn finish_casts(&self, deadline: tokio::time::Instant) {
        let finishing = self.casts.borrow_mut().take_finishing();
        for done in finishing {
            if tokio::time::timeout_at(deadline, done).await.is_err() {
                log!("a recording's writer is still writing at exit; its end is lost");
                return;
            }
        }
    }
}

/// Opens `new --cast`'s file, before the creation (SPEC §4.8).
pub(crate) fn open_first(
    spec: &CastSpec,
) -> Result<std::fs::File, (latch_registry::spec::FailureKind, String)> {
    use latch_registry::spec::FailureKind;
    if !spec.file.starts_with('/') || spec.max_bytes.is_some_and(|m| m < MAX_BYTES_MIN) {
        return Err((
            FailureKind::Invalid,
            format!(
                "cannot record into {:?}: an absolute path and --max-bytes of at least \
                 {MAX_BYTES_MIN} are needed",
                spec.file
            ),
        ));
    }
    cast_writer::open(&spec.file).map_err(|e| {
        let kind = match e {
            OpenError::Io(_) => FailureKind::Io,
            _ => FailureKind::Invalid,
        };
        (kind, format!("cannot record into {}: {e}", spec.file))
    })
}

/// Removes the file `open_first` created, if the path still names it (the
/// creation failed after it).
pub(crate) fn discard(path: &str, file: &std::fs::File) {
    use std::os::unix::fs::MetadataExt;
    let ours = file
        .metadata()
        .ok()
        .map(|m| (m.dev(), m.ino(), m.is_file()));
    let there = std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino(), m.is_file()));
    if ours.is_some_and(|o| o.2) && ours == there {
        let _ = std::fs::remove_file(path);
    }
}

/// Wakes the daemon's side of the recordings whenever a writer asks (SPEC §4.8).
pub(crate) async fn pump(session: std::rc::Rc<Session>) {
    let wake = session.casts.borrow().wake.clone();
    loop {
        wake.notified().await;
        session.settle_casts();
    }
}

/// The final marker at the program's exit.
pub(crate) fn exit_label(status: ExitStatus) -> String {
    match (status.code, status.signal) {
        (Some(c), _) => format!("latch: the program exited with code {c}"),
        (None, Some(s)) => format!("latch: the program was killed by signal {s}"),
        _ => "latch: the program ended".to_owned(),
    }
}
