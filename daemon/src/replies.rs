//! The replies cut from the session's state, from memory (SPEC.md §11 I2): STATUS
//! (strict, version 3 and legacy), PEEK, CAPTURE, OUTPUT_SINCE, LEASE, RELEASE and
//! COMMANDS, and the final screen kept in the registry at the program's exit.

use bytes::Bytes;
use latch_registry::ExitRecord;
use latch_wire::codec::Outbound;
use latch_wire::legacy::LegacyServerFrame;
use latch_wire::{ServerFrame, StatusReply};

use crate::outbound::{Peer, ScreenAsk};
use crate::session::Session;
use crate::status;
use latch_screen as screen;

impl Session {
    /// The visible screen as `peek --ansi` and `--plain` show it, at most `max`
    /// bytes each, and the terminal's size (SPEC §9.18).
    pub fn visible_screen(&self, max: usize) -> (String, String, (u16, u16)) {
        let captured = {
            let mut term = self.term.borrow_mut();
            (
                screen::capture(&mut term, screen::View::new(false, false), max),
                screen::capture(&mut term, screen::View::new(true, false), max),
            )
        };
        self.settle();
        (captured.0, captured.1, self.size.get())
    }

    /// STATUS for a version-3 connection: STATUS's fields, then the output's.
    pub fn status3(&self) -> latch_wire::Status3 {
        latch_wire::Status3 {
            base: self.status(),
            output: self.log.borrow().facts(),
        }
    }

    /// OUTPUT_SINCE: the held output after `since`, at most REPLY_QUEUE_BYTES in
    /// one reply, so that one connection's unread answers stay within the bound
    /// after which it is no longer read (SPEC §4.7, §8); a reader asks again.
    pub fn output_since(&self, client: &Peer, since: u64, max: u32) {
        let max = usize::try_from(max)
            .unwrap_or(usize::MAX)
            .min(latch_wire::limits::REPLY_QUEUE_BYTES);
        let range = self.log.borrow().since(since, max);
        client.send(Outbound::Strict(ServerFrame::OutputRange(range)));
    }

    /// LEASE (SPEC §4.7): the run lease for `client` if nobody else holds it, and
    /// the facts a client that types needs, read now.
    pub fn lease(&self, client: &Peer) {
        let granted = self.lease.take(client.id);
        client.with_conn(|c| c.set_leased(granted));
        let facts = self.lease_facts(granted);
        client.send(Outbound::Strict(ServerFrame::Leased(Box::new(facts))));
    }

    pub(crate) fn lease_facts(&self, granted: bool) -> latch_wire::LeaseFacts {
        let paste = self.term.borrow_mut().bracketed_paste();
        self.settle();
        latch_wire::LeaseFacts {
            granted,
            integration: self.integration,
            marked: self.log.borrow().marked(),
            bracketed_paste: paste,
            reading: crate::lease::foreground_reading(self.child_pid),
            output: self.log.borrow().facts(),
        }
    }

    /// RELEASE, or the end of `client`'s connection: the lease is free again.
    pub fn release(&self, client: &Peer) {
        self.lease.give_back(client.id);
        client.with_conn(|c| c.set_leased(false));
    }

    /// COMMANDS: the newest `last` command blocks (SPEC §4.7).
    pub fn commands(&self, client: &Peer, last: u32) {
        let blocks = self.log.borrow().blocks.last(last);
        client.send(Outbound::Strict(ServerFrame::Commands(blocks)));
    }

    /// Strict PEEK: one SCREEN (a legacy PEEK is a subscription, [`join`]).
    pub fn peek(&self, client: &Peer, plain: bool, full: bool) {
        let snapshot =
            screen::peek_snapshot(&mut self.term.borrow_mut(), screen::View::new(plain, full));
        self.settle();
        let peek = latch_wire::PeekRequest { plain, full };
        client.send_screen(Outbound::Strict(ServerFrame::Screen(snapshot)), peek);
    }

    /// CAPTURE: the cell-grid capture, postcard-encoded (SPEC.md §4.4); only cut
    /// and encoded here, never drawn.
    pub fn capture(&self, client: &Peer, full: bool) {
        let capture = self
            .term
            .borrow_mut()
            .capture(full, screen::capture::CAPTURE_MAX);
        self.settle();
        let frame = ServerFrame::Capture(Bytes::from(capture.encode()));
        client.send_screen(Outbound::Strict(frame), ScreenAsk::Capture { full });
    }

    /// The screen as the program left it, for `<id>.screen` (SPEC §9.15).
    pub(crate) fn final_screen(&self, exit: ExitRecord) -> latch_registry::FinalScreen {
        use latch_registry::screen::FINAL_FULL_MAX_BYTES as MAX;
        let mut term = self.term.borrow_mut();
        let (rows, cols) = self.size.get();
        latch_registry::FinalScreen {
            version: latch_registry::FINAL_SCREEN_VERSION,
            id: self.own.id.clone(),
            incarnation: self.own.incarnation,
            rows,
            cols,
            exit,
            plain: screen::capture(&mut term, screen::View::new(true, false), MAX),
            ansi: screen::capture(&mut term, screen::View::new(false, false), MAX),
            full_plain: screen::capture(&mut term, screen::View::new(true, true), MAX),
            full_ansi: screen::capture(&mut term, screen::View::new(false, true), MAX),
        }
    }

    /// STATUS from memory (SPEC.md §11 I2).
    pub fn status(&self) -> StatusReply {
        let (rows, cols) = self.size.get();
        let (cursor_row, cursor_col) = self.term.borrow_mut().cursor();
        self.settle();
        let (writers, readers) = self.attached.borrow().counts();
        StatusReply {
            id: self.own.id.clone(),
            incarnation: self.own.incarnation,
            daemon_pid: self.daemon_pid,
            child_pid: self.child_pid,
            rows,
            cols,
            cursor_row,
            cursor_col,
            writers: u32::try_from(writers).unwrap_or(u32::MAX),
            readers: u32::try_from(readers).unwrap_or(u32::MAX),
            created_at_ms: self.created_at_ms,
            exit: self.exit.get(),
            draining: self.draining.get(),
            legacy_policy: self.legacy_policy(),
            owner: self.owner.clone(),
        }
    }

    /// The legacy STATUS packet (shape in `status`).
    pub fn legacy_status(&self) -> Outbound {
        let name = self
            .display_name
            .clone()
            .unwrap_or_else(|| self.own.id.to_string());
        let facts = {
            let mut term = self.term.borrow_mut();
            status::LegacyFacts {
                name,
                uptime_seconds: self.started.elapsed().as_secs(),
                lines: screen::legacy_lines(&mut term),
                modes: screen::legacy_modes(&mut term),
                connections: self
                    .attached
                    .borrow()
                    .iter()
                    .map(|a| status::LegacyConn {
                        writer: a.writer,
                        size: a.size,
                        seq: a.client.id,
                    })
                    .collect(),
            }
        };
        let json = status::legacy_json(&self.status(), &facts);
        Outbound::Legacy(LegacyServerFrame::Status(Bytes::from(json.to_string())))
    }
}
