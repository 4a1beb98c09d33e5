//! The legacy (version 1) `pty` framing, byte-exact with SPEC.md §7.
//!
//! ```text
//! +-----------+------------------+---------------------+
//! | type: u8  | length: u32 BE   | payload: length     |
//! +-----------+------------------+---------------------+
//! ```
//!
//! | code | name     | payload                                            |
//! |------|----------|----------------------------------------------------|
//! | 0    | DATA     | raw bytes, both directions                         |
//! | 1    | ATTACH   | rows u16 BE, cols u16 BE (absent if shorter than 4)|
//! | 2    | DETACH   | empty                                              |
//! | 3    | RESIZE   | rows u16 BE, cols u16 BE                           |
//! | 4    | EXIT     | exit code i32 BE                                   |
//! | 5    | SCREEN   | the screen as ANSI (or plain) text                 |
//! | 6    | PEEK     | flags u8: bit0 plain, bit1 full scrollback         |
//! | 7    | STATUS   | request empty; reply a JSON object                 |
//! | 10   | GEOMETRY | rows u16 BE, cols u16 BE                           |
//!
//! A length over the cap is a fatal error (the old daemon closed the socket).
//! Unknown types decode to `Unknown` and are ignored by the daemon, as before.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::error::FrameError;
use crate::frame::{ExitStatus, ServerFrame};

/// The largest cap a daemon may configure: the old framing's 32 MiB.
pub const LEGACY_MAX_CAP: usize = 32 * 1024 * 1024;
/// The cap latch applies to inbound legacy packets by default.
pub const LEGACY_DEFAULT_CAP: usize = 1024 * 1024;
/// Bytes in a legacy packet header.
pub const LEGACY_HEADER_LEN: usize = 5;

/// Legacy packet type codes.
pub mod code {
    /// DATA.
    pub const DATA: u8 = 0;
    /// ATTACH.
    pub const ATTACH: u8 = 1;
    /// DETACH.
    pub const DETACH: u8 = 2;
    /// RESIZE.
    pub const RESIZE: u8 = 3;
    /// EXIT.
    pub const EXIT: u8 = 4;
    /// SCREEN.
    pub const SCREEN: u8 = 5;
    /// PEEK.
    pub const PEEK: u8 = 6;
    /// STATUS.
    pub const STATUS: u8 = 7;
    /// GEOMETRY.
    pub const GEOMETRY: u8 = 10;
}

/// One raw legacy packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacyPacket {
    /// The type code.
    pub kind: u8,
    /// The payload.
    pub payload: Bytes,
}

/// Decodes one raw packet; `cap` is clamped to [`LEGACY_MAX_CAP`].
pub fn decode_packet(src: &mut BytesMut, cap: usize) -> Result<Option<LegacyPacket>, FrameError> {
    let cap = cap.min(LEGACY_MAX_CAP);
    let Some(header) = src.get(..LEGACY_HEADER_LEN) else {
        return Ok(None);
    };
    let kind = header[0];
    let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]);
    let len_usize = usize::try_from(len).map_err(|_| FrameError::TooLarge { len, max: cap })?;
    if len_usize > cap {
        return Err(FrameError::TooLarge { len, max: cap });
    }
    let total = LEGACY_HEADER_LEN + len_usize;
    if src.len() < total {
        src.reserve(total - src.len());
        return Ok(None);
    }
    src.advance(LEGACY_HEADER_LEN);
    let payload = src.split_to(len_usize).freeze();
    Ok(Some(LegacyPacket { kind, payload }))
}

/// Appends one raw packet.
pub fn encode_packet(kind: u8, payload: &[u8], dst: &mut BytesMut) -> Result<(), FrameError> {
    let len = u32::try_from(payload.len())
        .ok()
        .filter(|&l| (l as usize) <= LEGACY_MAX_CAP)
        .ok_or(FrameError::TooLarge {
            len: u32::try_from(payload.len()).unwrap_or(u32::MAX),
            max: LEGACY_MAX_CAP,
        })?;
    dst.reserve(LEGACY_HEADER_LEN + payload.len());
    dst.put_u8(kind);
    dst.put_u32(len);
    dst.extend_from_slice(payload);
    Ok(())
}

/// A packet a legacy client sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LegacyClientFrame {
    /// Input bytes.
    Data(Bytes),
    /// Attach as a writer, with the client's size if the payload carried one.
    Attach(Option<(u16, u16)>),
    /// Detach; the server closes.
    Detach,
    /// Resize, if the payload carried a size.
    Resize(Option<(u16, u16)>),
    /// Peek.
    Peek {
        /// bit0.
        plain: bool,
        /// bit1.
        full: bool,
    },
    /// Status request.
    Status,
    /// A type code the old protocol ignores.
    Unknown(u8),
}

fn size_of(payload: &[u8]) -> Option<(u16, u16)> {
    let b = payload.get(..4)?;
    Some((
        u16::from_be_bytes([b[0], b[1]]),
        u16::from_be_bytes([b[2], b[3]]),
    ))
}

fn size_bytes(rows: u16, cols: u16) -> [u8; 4] {
    let r = rows.to_be_bytes();
    let c = cols.to_be_bytes();
    [r[0], r[1], c[0], c[1]]
}

impl LegacyClientFrame {
    /// Interprets a raw packet sent by a client.
    pub fn from_packet(p: LegacyPacket) -> Self {
        match p.kind {
            code::DATA => Self::Data(p.payload),
            code::ATTACH => Self::Attach(size_of(&p.payload)),
            code::DETACH => Self::Detach,
            code::RESIZE => Self::Resize(size_of(&p.payload)),
            code::PEEK => {
                let flags = p.payload.first().copied().unwrap_or(0);
                Self::Peek {
                    plain: flags & 1 != 0,
                    full: flags & 2 != 0,
                }
            }
            code::STATUS => Self::Status,
            other => Self::Unknown(other),
        }
    }

    /// Encodes the frame as a client would.
    pub fn encode(&self, dst: &mut BytesMut) -> Result<(), FrameError> {
        match self {
            Self::Data(b) => encode_packet(code::DATA, b, dst),
            Self::Attach(Some((r, c))) => encode_packet(code::ATTACH, &size_bytes(*r, *c), dst),
            Self::Attach(None) => encode_packet(code::ATTACH, &[], dst),
            Self::Detach => encode_packet(code::DETACH, &[], dst),
            Self::Resize(Some((r, c))) => encode_packet(code::RESIZE, &size_bytes(*r, *c), dst),
            Self::Resize(None) => encode_packet(code::RESIZE, &[], dst),
            Self::Peek { plain, full } => {
                let flags = u8::from(*plain) | (u8::from(*full) << 1);
                encode_packet(code::PEEK, &[flags], dst)
            }
            Self::Status => encode_packet(code::STATUS, &[], dst),
            Self::Unknown(k) => encode_packet(*k, &[], dst),
        }
    }
}

/// A packet a legacy server sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LegacyServerFrame {
    /// Output bytes.
    Data(Bytes),
    /// The program exited with this code.
    Exit(i32),
    /// A screen snapshot.
    Screen(Bytes),
    /// The STATUS reply, a JSON object.
    Status(Bytes),
    /// The PTY size.
    Geometry {
        /// Rows.
        rows: u16,
        /// Columns.
        cols: u16,
    },
}

impl LegacyServerFrame {
    /// Encodes the frame as the old daemon did.
    pub fn encode(&self, dst: &mut BytesMut) -> Result<(), FrameError> {
        match self {
            Self::Data(b) => encode_packet(code::DATA, b, dst),
            Self::Exit(c) => encode_packet(code::EXIT, &c.to_be_bytes(), dst),
            Self::Screen(b) => encode_packet(code::SCREEN, b, dst),
            Self::Status(b) => encode_packet(code::STATUS, b, dst),
            Self::Geometry { rows, cols } => {
                encode_packet(code::GEOMETRY, &size_bytes(*rows, *cols), dst)
            }
        }
    }

    /// The packet that carries `frame` on a legacy connection (SPEC.md §7): OUTPUT
    /// is DATA, SCREEN, GEOMETRY and EXIT keep their names (EXIT as
    /// [`legacy_exit_code`]). `None` for frames the old framing has no packet for
    /// (errors, the handshake's answers, PONG, DETACHED): on a legacy connection
    /// they are not written.
    pub fn from_strict(frame: &ServerFrame) -> Option<Self> {
        match frame {
            ServerFrame::Output(b) => Some(Self::Data(b.clone())),
            ServerFrame::Screen(b) => Some(Self::Screen(b.clone())),
            ServerFrame::Geometry { rows, cols } => Some(Self::Geometry {
                rows: *rows,
                cols: *cols,
            }),
            ServerFrame::Exit(status) => Some(Self::Exit(legacy_exit_code(*status))),
            ServerFrame::Welcome { .. }
            | ServerFrame::Bound { .. }
            | ServerFrame::Status(_)
            | ServerFrame::Pong(_)
            | ServerFrame::Error { .. }
            | ServerFrame::Detached
            | ServerFrame::Status3(_)
            | ServerFrame::OutputRange(_)
            | ServerFrame::Cut(_)
            | ServerFrame::Casts(_)
            | ServerFrame::Leased(_)
            | ServerFrame::Commands(_)
            | ServerFrame::Capture(_)
            | ServerFrame::Reserved16
            | ServerFrame::Reserved17
            | ServerFrame::Reserved18 => None,
        }
    }

    /// Interprets a raw packet sent by a server; `None` for types a server does not
    /// send or a payload too short for its type.
    pub fn from_packet(p: LegacyPacket) -> Option<Self> {
        match p.kind {
            code::DATA => Some(Self::Data(p.payload)),
            code::EXIT => {
                let b = p.payload.get(..4)?;
                Some(Self::Exit(i32::from_be_bytes([b[0], b[1], b[2], b[3]])))
            }
            code::SCREEN => Some(Self::Screen(p.payload)),
            code::STATUS => Some(Self::Status(p.payload)),
            code::GEOMETRY => size_of(&p.payload).map(|(rows, cols)| Self::Geometry { rows, cols }),
            _ => None,
        }
    }
}

/// The single exit code the legacy EXIT packet carries: the code, or 128 + the
/// signal for a program killed by one, or -1 if neither is known (SPEC.md §7).
pub fn legacy_exit_code(status: ExitStatus) -> i32 {
    match (status.code, status.signal) {
        (Some(code), _) => code,
        (None, Some(sig)) => sig.saturating_add(128),
        (None, None) => -1,
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    #[test]
    fn legacy_exit_codes() {
        let s = |code, signal| ExitStatus { code, signal };
        assert_eq!(legacy_exit_code(s(Some(3), None)), 3);
        assert_eq!(legacy_exit_code(s(None, Some(15))), 143);
        assert_eq!(legacy_exit_code(s(None, None)), -1);
    }

    #[test]
    fn codes_are_pinned_to_anchors() {
        assert_eq!(
            [
                code::DATA,
                code::ATTACH,
                code::DETACH,
                code::RESIZE,
                code::EXIT,
                code::SCREEN,
                code::PEEK,
                code::STATUS,
                code::GEOMETRY
            ],
            [0, 1, 2, 3, 4, 5, 6, 7, 10]
        );
        assert_eq!(LEGACY_MAX_CAP, 33_554_432);
    }

    #[test]
    fn byte_exact_layouts() {
        let cases: Vec<(LegacyServerFrame, Vec<u8>)> = vec![
            (
                LegacyServerFrame::Data(Bytes::from_static(b"hi")),
                vec![0, 0, 0, 0, 2, b'h', b'i'],
            ),
            (
                LegacyServerFrame::Exit(-2),
                vec![4, 0, 0, 0, 4, 0xff, 0xff, 0xff, 0xfe],
            ),
            (
                LegacyServerFrame::Geometry { rows: 24, cols: 80 },
                vec![10, 0, 0, 0, 4, 0, 24, 0, 80],
            ),
            (LegacyServerFrame::Screen(Bytes::new()), vec![5, 0, 0, 0, 0]),
            (
                LegacyServerFrame::Status(Bytes::from_static(b"{}")),
                vec![7, 0, 0, 0, 2, b'{', b'}'],
            ),
        ];
        for (frame, bytes) in cases {
            let mut dst = BytesMut::new();
            frame.encode(&mut dst).unwrap();
            assert_eq!(&dst[..], &bytes[..], "{frame:?}");
            let mut src = BytesMut::from(&bytes[..]);
            let p = decode_packet(&mut src, LEGACY_MAX_CAP).unwrap().unwrap();
            assert_eq!(LegacyServerFrame::from_packet(p), Some(frame));
        }
        let client: Vec<(LegacyClientFrame, Vec<u8>)> = vec![
            (
                LegacyClientFrame::Attach(Some((24, 80))),
                vec![1, 0, 0, 0, 4, 0, 24, 0, 80],
            ),
            (LegacyClientFrame::Attach(None), vec![1, 0, 0, 0, 0]),
            (LegacyClientFrame::Detach, vec![2, 0, 0, 0, 0]),
            (
                LegacyClientFrame::Resize(Some((1, 2))),
                vec![3, 0, 0, 0, 4, 0, 1, 0, 2],
            ),
            (
                LegacyClientFrame::Peek {
                    plain: true,
                    full: true,
                },
                vec![6, 0, 0, 0, 1, 3],
            ),
            (
                LegacyClientFrame::Peek {
                    plain: false,
                    full: true,
                },
                vec![6, 0, 0, 0, 1, 2],
            ),
            (LegacyClientFrame::Status, vec![7, 0, 0, 0, 0]),
            (
                LegacyClientFrame::Data(Bytes::from_static(b"x")),
                vec![0, 0, 0, 0, 1, b'x'],
            ),
        ];
        for (frame, bytes) in client {
            let mut dst = BytesMut::new();
            frame.encode(&mut dst).unwrap();
            assert_eq!(&dst[..], &bytes[..], "{frame:?}");
            let mut src = BytesMut::from(&bytes[..]);
            let p = decode_packet(&mut src, LEGACY_MAX_CAP).unwrap().unwrap();
            assert_eq!(LegacyClientFrame::from_packet(p), frame);
        }
    }

    #[test]
    fn short_attach_payload_means_no_size() {
        let mut src = BytesMut::from(&[1u8, 0, 0, 0, 2, 0, 24][..]);
        let p = decode_packet(&mut src, 100).unwrap().unwrap();
        assert_eq!(
            LegacyClientFrame::from_packet(p),
            LegacyClientFrame::Attach(None)
        );
    }

    #[test]
    fn over_cap_is_fatal_without_allocation() {
        let mut src = BytesMut::from(&[0u8, 0x02, 0, 0, 1][..]);
        let cap = src.capacity();
        assert_eq!(
            decode_packet(&mut src, LEGACY_MAX_CAP),
            Err(FrameError::TooLarge {
                len: 0x0200_0001,
                max: LEGACY_MAX_CAP
            })
        );
        assert_eq!(src.capacity(), cap);
        // A configured cap above 32 MiB is clamped.
        let mut src = BytesMut::from(&[0u8, 0x02, 0, 0, 1][..]);
        assert!(decode_packet(&mut src, usize::MAX).is_err());
    }

    #[test]
    fn unknown_types_decode_as_unknown() {
        let mut src = BytesMut::from(&[9u8, 0, 0, 0, 1, 7][..]);
        let p = decode_packet(&mut src, 100).unwrap().unwrap();
        assert_eq!(
            LegacyClientFrame::from_packet(p),
            LegacyClientFrame::Unknown(9)
        );
    }
}
