//! The attached stream (SPEC §5.4, §8): ATTACH and the legacy PEEK subscription,
//! the resynchronisation of a client that fell behind, DETACH, and RESIZE with the
//! PTY size rule (`fanout::pty_size`). Each method runs in one synchronous step, so
//! a client's SCREEN is cut exactly where its OUTPUT continues (`session`).

use std::num::NonZeroU16;
use std::os::fd::AsFd;
use std::rc::Rc;

use latch_wire::codec::Outbound;
use latch_wire::ServerFrame;

use crate::fanout::{Attached, Screen};
use crate::outbound::{Peer, Phase};
use crate::pty;
use crate::session::Session;

impl Session {
    /// ATTACH: GEOMETRY, then one SCREEN cut, then (by joining the fan-out in the same
    /// step) every OUTPUT and EXIT after the cut. If the program has already exited,
    /// EXIT follows the SCREEN at once.
    pub fn attach(&self, client: &Rc<Peer>, rows: u16, cols: u16, read_only: bool) {
        self.join(client, rows, cols, read_only, Screen::Repaint);
    }

    /// ATTACH, or a legacy PEEK (read-only, with pty's screen): see [`attach`].
    pub fn join(&self, client: &Rc<Peer>, rows: u16, cols: u16, read_only: bool, kind: Screen) {
        let writer = !read_only;
        let size = (rows > 0 && cols > 0).then_some((rows, cols));
        if writer && self.exit.get().is_none() {
            // Resize first, so the snapshot is cut at the size the client will see.
            let new = self.attached.borrow().size_with(writer, size);
            if let Some((r, c)) = new {
                self.apply_size(r, c);
            }
        }
        let (r, c) = self.size.get();
        let snapshot = kind.cut(&mut self.term.borrow_mut());
        self.settle();
        // Stream frames: a client that falls behind already here is resynchronised
        // like any other.
        client.stream(Outbound::Strict(ServerFrame::Geometry { rows: r, cols: c }));
        client.stream(Outbound::Strict(ServerFrame::Screen(snapshot)));
        self.stream_cut(client, false);
        if client.phase() != Phase::Open {
            return;
        }
        if let Some(status) = self.exit.get() {
            self.resync_now(client, kind);
            client.stream_final(Outbound::Strict(ServerFrame::Exit(status)));
            return;
        }
        self.attached.borrow_mut().join(Attached {
            client: client.clone(),
            writer,
            size,
            screen: kind,
        });
        self.update_answering();
    }

    /// Resynchronises a client that fell behind and has since read everything
    /// queued for it: GEOMETRY and a fresh SCREEN, cut exactly as on ATTACH (the
    /// emulator's queue is applied first), then live output again. Called by the
    /// connection's writer; does nothing for a client that is not behind.
    pub fn resync(&self, client: &Rc<Peer>) {
        if !client.wants_resync() {
            return;
        }
        let attached = self.attached.borrow().screen_of(client.id);
        let Some(kind) = attached else {
            client.resynced();
            return;
        };
        self.resync_now(client, kind);
        log!(
            "connection {} resynchronised with a fresh screen ({} so far)",
            client.id,
            client.resyncs()
        );
    }

    /// Queues GEOMETRY and a fresh SCREEN for a client that is behind, whatever
    /// is still queued for it (at the program's exit, before EXIT).
    pub(crate) fn resync_now(&self, client: &Peer, kind: Screen) {
        if !client.is_behind() {
            return;
        }
        client.resynced();
        let (r, c) = self.size.get();
        let snapshot = kind.cut(&mut self.term.borrow_mut());
        self.settle();
        client.stream_final(Outbound::Strict(ServerFrame::Geometry { rows: r, cols: c }));
        client.stream_final(Outbound::Strict(ServerFrame::Screen(snapshot)));
        self.stream_cut(client, true);
    }

    /// After a stream's SCREEN, on a version-3 connection: CUT, the output cursor
    /// and shell at that cut (SPEC §4.2), which the OUTPUT after it continues from.
    fn stream_cut(&self, client: &Peer, last: bool) {
        if client.with_conn(|c| c.version()) < Some(latch_wire::CURSORS_VERSION) {
            return;
        }
        let frame = Outbound::Strict(ServerFrame::Cut(self.log.borrow().cut()));
        if last {
            client.stream_final(frame);
        } else {
            client.stream(frame);
        }
    }

    /// RESIZE: for an attached read-write connection, its size, then the PTY size is
    /// recomputed over all attached read-write clients; for any other bound
    /// connection, the PTY size directly.
    pub fn resize(
        &self,
        client_id: u64,
        attached_writer: bool,
        rows: u16,
        cols: u16,
    ) -> Result<(), ServerFrame> {
        if !attached_writer {
            self.apply_size(rows, cols);
            return Ok(());
        }
        let new = self.attached.borrow_mut().set_size(client_id, rows, cols);
        if let Some((r, c)) = new {
            self.apply_size(r, c);
        }
        Ok(())
    }

    /// DETACH (or a connection ending): leaves the fan-out; the PTY size is
    /// recomputed if it was a read-write client.
    pub fn detach(&self, client_id: u64) {
        let left = self.attached.borrow_mut().leave(client_id);
        let Some((gone, new)) = left else {
            return;
        };
        if gone.writer {
            self.update_answering();
        }
        if gone.writer && self.exit.get().is_none() {
            if let Some((r, c)) = new {
                self.apply_size(r, c);
            }
        }
    }

    /// Sets the PTY and emulator size and tells every attached client.
    fn apply_size(&self, rows: u16, cols: u16) {
        if self.size.get() == (rows, cols) {
            return;
        }
        let (Some(r), Some(c)) = (NonZeroU16::new(rows), NonZeroU16::new(cols)) else {
            return;
        };
        if let Err(e) = pty::set_size(self.master.get_ref().as_fd(), rows, cols) {
            log!("cannot resize the terminal to {rows}x{cols}: {e}");
            return;
        }
        self.term.borrow_mut().resize(r.get(), c.get());
        if cols != self.size.get().1 {
            // A reflow of the scrollback rebuilt its rows in full cells for a moment.
            crate::memory::trim_memory(false);
        }
        self.settle();
        self.size.set((rows, cols));
        let cursor = self.log.borrow().cursor();
        self.casts.borrow_mut().resize(rows, cols, cursor);
        self.broadcast(|| Outbound::Strict(ServerFrame::Geometry { rows, cols }));
    }

    /// Streams `frame` to every attached client (one that is behind gets the
    /// current state when resynchronised); those closing leave the fan-out.
    fn broadcast(&self, frame: impl Fn() -> Outbound) {
        let cut = self.attached.borrow().broadcast(frame);
        for id in cut {
            self.detach(id);
        }
    }
}
