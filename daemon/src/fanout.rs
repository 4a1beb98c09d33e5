//! The fan-out: the attached connections, what each is sent, and the PTY size rule
//! (SPEC §5.4, §8).
//!
//! Pure bookkeeping over the connections' queues ([`Peer`]): nothing here touches
//! the PTY or the emulator. The session applies the size this computes and cuts the
//! screens; a connection that is closing is reported back so that the session
//! takes it out of the fan-out (and recomputes the size) in the same step.

use std::rc::Rc;

use bytes::Bytes;
use latch_wire::codec::Outbound;
use latch_wire::limits::MAX_OUTPUT_CHUNK;
use latch_wire::ServerFrame;

use crate::outbound::{Peer, Phase};
use latch_screen as screen;

/// Which SCREEN an attached connection is cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Screen {
    /// The full repaint (ATTACH, strict or legacy).
    Repaint,
    /// pty's PEEK screen: a legacy PEEK subscription (SPEC.md §7).
    LegacyPeek { plain: bool, full: bool },
}

impl Screen {
    /// Cuts this SCREEN from the emulator.
    pub(crate) fn cut(self, term: &mut screen::Emulator) -> Bytes {
        match self {
            Self::Repaint => screen::attach_snapshot(term),
            Self::LegacyPeek { plain, full } => {
                screen::legacy_peek_snapshot(term, screen::View::new(plain, full))
            }
        }
    }
}

/// One attached connection.
#[derive(Debug)]
pub(crate) struct Attached {
    pub(crate) client: Rc<Peer>,
    /// Read-write (its size counts) or read-only.
    pub(crate) writer: bool,
    /// Its terminal size, if it announced one.
    pub(crate) size: Option<(u16, u16)>,
    /// The SCREEN it gets, on joining and on each resynchronisation.
    pub(crate) screen: Screen,
}

/// The attached connections, in the order they joined.
#[derive(Debug, Default)]
pub(crate) struct Fanout {
    members: Vec<Attached>,
}

impl Fanout {
    /// The attached connections.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Attached> {
        self.members.iter()
    }

    /// Adds a connection (after its SCREEN was queued).
    pub(crate) fn join(&mut self, member: Attached) {
        self.members.push(member);
    }

    /// The PTY size if a connection with this role and size joined now.
    pub(crate) fn size_with(&self, writer: bool, size: Option<(u16, u16)>) -> Option<(u16, u16)> {
        pty_size(self.sizes().chain([(writer, size)]))
    }

    /// Records an attached connection's new size; returns the PTY size after it.
    pub(crate) fn set_size(&mut self, id: u64, rows: u16, cols: u16) -> Option<(u16, u16)> {
        if let Some(a) = self.members.iter_mut().find(|a| a.client.id == id) {
            a.size = Some((rows, cols));
        }
        pty_size(self.sizes())
    }

    /// Takes a connection out; returns it and the PTY size without it (`None` if it
    /// was not attached).
    pub(crate) fn leave(&mut self, id: u64) -> Option<(Attached, Option<(u16, u16)>)> {
        let pos = self.members.iter().position(|a| a.client.id == id)?;
        let gone = self.members.remove(pos);
        Some((gone, pty_size(self.sizes())))
    }

    /// Takes every connection out (at the program's exit).
    pub(crate) fn take_all(&mut self) -> Vec<Attached> {
        std::mem::take(&mut self.members)
    }

    /// The SCREEN an attached connection gets, if it is attached.
    pub(crate) fn screen_of(&self, id: u64) -> Option<Screen> {
        self.members
            .iter()
            .find(|a| a.client.id == id)
            .map(|a| a.screen)
    }

    /// Whether a read-write connection is attached (its terminal answers the
    /// program's queries, SPEC §4.4).
    pub(crate) fn has_writer(&self) -> bool {
        self.members.iter().any(|a| a.writer)
    }

    /// Attached read-write and read-only connections.
    pub(crate) fn counts(&self) -> (usize, usize) {
        let writers = self.members.iter().filter(|a| a.writer).count();
        (writers, self.members.len() - writers)
    }

    /// Streams program output to every attached connection as OUTPUT frames of at
    /// most `MAX_OUTPUT_CHUNK`, all sharing one buffer. A connection that is behind
    /// takes nothing (it is resynchronised once it reads again); the ids of those
    /// that are closing are returned, for the session to take out.
    pub(crate) fn output(&self, data: &[u8]) -> Vec<u64> {
        let mut cut = Vec::new();
        if self.members.is_empty() {
            return cut;
        }
        let bytes = Bytes::copy_from_slice(data);
        for a in &self.members {
            let mut rest = bytes.clone();
            while !rest.is_empty() {
                let chunk = rest.split_to(rest.len().min(MAX_OUTPUT_CHUNK));
                if !a
                    .client
                    .stream(Outbound::Strict(ServerFrame::Output(chunk)))
                {
                    if a.client.phase() != Phase::Open {
                        cut.push(a.client.id);
                    }
                    break;
                }
            }
        }
        cut
    }

    /// Streams one frame to every attached connection (a connection that is behind
    /// gets the current state when resynchronised); returns the ids of those that
    /// are closing.
    pub(crate) fn broadcast(&self, frame: impl Fn() -> Outbound) -> Vec<u64> {
        self.members
            .iter()
            .filter(|a| !a.client.stream(frame()) && a.client.phase() != Phase::Open)
            .map(|a| a.client.id)
            .collect()
    }

    fn sizes(&self) -> impl Iterator<Item = (bool, Option<(u16, u16)>)> + '_ {
        self.members.iter().map(|a| (a.writer, a.size))
    }
}

/// The PTY size rule: the minimum rows and the minimum columns over the attached
/// read-write clients that announced a size. Read-only clients never count. `None`
/// when no client counts (the size then stays as it is).
pub(crate) fn pty_size(
    members: impl IntoIterator<Item = (bool, Option<(u16, u16)>)>,
) -> Option<(u16, u16)> {
    members
        .into_iter()
        .filter_map(|(writer, size)| if writer { size } else { None })
        .filter(|&(r, c)| r > 0 && c > 0)
        .reduce(|(r1, c1), (r2, c2)| (r1.min(r2), c1.min(c2)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbound::ReplyBudget;
    use bytes::BytesMut;

    fn peer(id: u64) -> Rc<Peer> {
        let conn = latch_wire::fuzzing::server_conn_at(
            latch_wire::LegacyPolicy::Full,
            std::time::Instant::now(),
        );
        Rc::new(Peer::new(id, conn, Rc::new(ReplyBudget::new(1 << 20))))
    }

    fn member(client: &Rc<Peer>, writer: bool, size: Option<(u16, u16)>) -> Attached {
        Attached {
            client: client.clone(),
            writer,
            size,
            screen: Screen::Repaint,
        }
    }

    /// What the connection's writer would send, decoded by the client's `codec`.
    fn sent_to(c: &Peer, codec: &mut latch_wire::ClientCodec) -> Vec<ServerFrame> {
        let mut buf = BytesMut::new();
        c.fill(&mut buf, usize::MAX);
        c.written(buf.len());
        let mut frames = Vec::new();
        while let Some(f) = codec.decode_server(&mut buf).unwrap() {
            frames.push(f);
        }
        frames
    }

    /// What the connection's writer would send first, decoded.
    fn sent(c: &Peer) -> Vec<ServerFrame> {
        sent_to(c, &mut latch_wire::ClientCodec::default())
    }

    #[test]
    fn size_rule_table() {
        let w = |r, c| (true, Some((r, c)));
        let ro = |r, c| (false, Some((r, c)));
        type Member = (bool, Option<(u16, u16)>);
        type Case = (Vec<Member>, Option<(u16, u16)>);
        let cases: Vec<Case> = vec![
            (vec![], None),
            (vec![w(24, 80)], Some((24, 80))),
            (vec![w(24, 80), w(50, 70)], Some((24, 70))),
            // Read-only clients never count, however small.
            (vec![w(24, 80), ro(5, 5)], Some((24, 80))),
            (vec![ro(5, 5)], None),
            // A writer without a size does not count.
            (vec![(true, None), w(30, 100)], Some((30, 100))),
            (vec![(true, None)], None),
            (vec![w(0, 80), w(30, 90)], Some((30, 90))),
        ];
        for (members, want) in cases {
            assert_eq!(pty_size(members.clone()), want, "{members:?}");
        }
    }

    #[test]
    fn the_size_follows_joins_resizes_and_leaves() {
        let (a, b, r) = (peer(1), peer(2), peer(3));
        let mut f = Fanout::default();
        assert_eq!(f.size_with(true, Some((24, 80))), Some((24, 80)));
        f.join(member(&a, true, Some((24, 80))));
        assert_eq!(f.size_with(true, Some((50, 60))), Some((24, 60)));
        assert_eq!(f.size_with(false, Some((5, 5))), Some((24, 80)));
        f.join(member(&b, true, Some((50, 60))));
        f.join(member(&r, false, Some((5, 5))));
        assert_eq!(f.counts(), (2, 1));
        assert!(f.has_writer());
        assert_eq!(f.set_size(1, 40, 100), Some((40, 60)));
        let (gone, size) = f.leave(2).unwrap();
        assert_eq!(gone.client.id, 2);
        assert_eq!(size, Some((40, 100)), "the size without the one that left");
        assert!(f.leave(2).is_none(), "already gone");
        let (_, size) = f.leave(1).unwrap();
        assert_eq!(size, None, "only a reader is left: nothing counts");
        assert!(!f.has_writer());
        assert_eq!(f.screen_of(3), Some(Screen::Repaint));
        assert_eq!(f.screen_of(1), None);
        assert_eq!(f.take_all().len(), 1);
        assert!(f.iter().next().is_none());
    }

    #[test]
    fn output_is_chunked_and_reaches_every_member_in_order() {
        let (a, b) = (peer(1), peer(2));
        let mut f = Fanout::default();
        f.join(member(&a, true, None));
        f.join(member(&b, false, None));
        let data: Vec<u8> = (0..MAX_OUTPUT_CHUNK * 2 + 10)
            .map(|i| u8::try_from(i % 251).unwrap())
            .collect();
        assert!(f.output(&data).is_empty());
        for c in [&a, &b] {
            let frames = sent(c);
            let lens: Vec<usize> = frames
                .iter()
                .map(|fr| match fr {
                    ServerFrame::Output(b) => b.len(),
                    other => panic!("{other:?}"),
                })
                .collect();
            assert_eq!(lens, [MAX_OUTPUT_CHUNK, MAX_OUTPUT_CHUNK, 10]);
            let joined: Vec<u8> = frames
                .iter()
                .flat_map(|fr| match fr {
                    ServerFrame::Output(b) => b.to_vec(),
                    _ => Vec::new(),
                })
                .collect();
            assert_eq!(joined, data);
        }
    }

    #[test]
    fn a_member_behind_takes_nothing_and_a_closing_one_is_reported() {
        let budget = Rc::new(ReplyBudget::new(1 << 20));
        let conn = || {
            latch_wire::fuzzing::server_conn_at(
                latch_wire::LegacyPolicy::Full,
                std::time::Instant::now(),
            )
        };
        let slow = Rc::new(Peer::with_bounds(1, conn(), budget.clone(), 100, 10));
        let (ok, closing) = (peer(2), peer(3));
        let mut f = Fanout::default();
        for c in [&slow, &ok, &closing] {
            f.join(member(c, false, None));
        }
        closing.close();
        // The first frame fits the slow one's empty queue alone; the second does not.
        assert_eq!(f.output(&[b'x'; 4096]), [3], "only the closing one leaves");
        assert!(!slow.is_behind());
        assert_eq!(f.output(&[b'y'; 4096]), [3]);
        assert!(slow.is_behind(), "over its bound: behind, not cut");
        assert_eq!(slow.phase(), Phase::Open);
        let mut ok_codec = latch_wire::ClientCodec::default();
        assert_eq!(
            sent_to(&ok, &mut ok_codec).len(),
            2,
            "the others are not held up"
        );
        let geometry = || Outbound::Strict(ServerFrame::Geometry { rows: 1, cols: 2 });
        assert_eq!(f.broadcast(geometry), [3]);
        assert_eq!(
            sent_to(&ok, &mut ok_codec),
            [ServerFrame::Geometry { rows: 1, cols: 2 }],
            "broadcast reaches who can take it"
        );
        assert!(sent(&slow).is_empty(), "its stream frames were dropped");
    }
}
