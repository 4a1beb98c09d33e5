//! Strict framing: the opening preamble and length-delimited frames (SPEC.md §3).
//!
//! ```text
//! opening (each side, once):  89 4C 41 54 43 48 0D 0A      "\x89LATCH\r\n"
//! frame:                      +----------------+---------------------------+
//!                             | length: u32 BE | payload: postcard, length |
//!                             +----------------+---------------------------+
//! ```
//!
//! The declared length is checked against the maximum **before** any buffer is
//! reserved for the payload. A zero length, trailing bytes after the postcard
//! value and any undecodable payload are errors; the decoder never tries to
//! resynchronise.

use bytes::{Buf, BufMut, BytesMut};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::FrameError;

/// The strict protocol's opening bytes, sent once by each side before its first
/// frame. The first byte, 0x89, is not a legacy packet type (those are 0..=10),
/// and read as a legacy header it announces a length of 0x4C415443 bytes, over
/// the legacy 32 MiB cap, so a legacy daemon closes instead of misreading it.
pub const MAGIC: [u8; 8] = *b"\x89LATCH\r\n";

/// Bytes in a frame header.
pub const HEADER_LEN: usize = 4;

/// Decodes one frame of type `T` from the front of `src`.
///
/// `Ok(None)`: more bytes are needed (and at most the announced frame's size has
/// been reserved). `Err`: the stream is corrupt; close it.
pub fn decode_frame<T: DeserializeOwned>(
    src: &mut BytesMut,
    max: usize,
) -> Result<Option<T>, FrameError> {
    let Some(header) = src.get(..HEADER_LEN) else {
        return Ok(None);
    };
    let mut len_bytes = [0u8; HEADER_LEN];
    len_bytes.copy_from_slice(header);
    let len = u32::from_be_bytes(len_bytes);
    let len_usize = usize::try_from(len).map_err(|_| FrameError::TooLarge { len, max })?;
    if len_usize > max {
        return Err(FrameError::TooLarge { len, max });
    }
    if len_usize == 0 {
        return Err(FrameError::Empty);
    }
    let total = HEADER_LEN + len_usize; // cannot overflow: len <= max <= u32::MAX
    if src.len() < total {
        src.reserve(total - src.len());
        return Ok(None);
    }
    src.advance(HEADER_LEN);
    let payload = src.split_to(len_usize);
    decode_payload(&payload).map(Some)
}

/// Decodes exactly one postcard value filling `payload`; trailing bytes are an
/// error (postcard's `from_bytes` would silently ignore them).
pub fn decode_payload<T: DeserializeOwned>(payload: &[u8]) -> Result<T, FrameError> {
    let (value, rest) = postcard::take_from_bytes::<T>(payload).map_err(FrameError::from)?;
    if !rest.is_empty() {
        return Err(FrameError::TrailingBytes(rest.len()));
    }
    Ok(value)
}

/// Appends one frame carrying `value` to `dst`. Fails (writing nothing) if the
/// encoded payload would exceed `max`.
pub fn encode_frame<T: Serialize>(
    value: &T,
    dst: &mut BytesMut,
    max: usize,
) -> Result<(), FrameError> {
    let start = dst.len();
    dst.put_u32(0);
    if let Err(e) = postcard::to_io(value, (&mut *dst).writer()) {
        dst.truncate(start);
        return Err(FrameError::Encode(e.to_string()));
    }
    let len = dst.len() - start - HEADER_LEN;
    if len > max {
        dst.truncate(start);
        return Err(FrameError::TooLarge {
            len: u32::try_from(len).unwrap_or(u32::MAX),
            max,
        });
    }
    let len32 = u32::try_from(len).map_err(|_| FrameError::TooLarge { len: u32::MAX, max })?;
    dst[start..start + HEADER_LEN].copy_from_slice(&len32.to_be_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::ClientFrame;

    #[test]
    fn magic_is_pinned() {
        assert_eq!(MAGIC, [0x89, 0x4C, 0x41, 0x54, 0x43, 0x48, 0x0D, 0x0A]);
        // Read as a legacy header: type 0x89, length "LATC" = 0x4C415443 > 32 MiB.
        let legacy_len = u32::from_be_bytes([MAGIC[1], MAGIC[2], MAGIC[3], MAGIC[4]]);
        assert!(legacy_len as usize > crate::legacy::LEGACY_MAX_CAP);
    }

    #[test]
    fn oversized_header_is_refused_before_reserving() {
        let mut src = BytesMut::new();
        src.put_u32(1 << 30);
        let cap_before = src.capacity();
        let r = decode_frame::<ClientFrame>(&mut src, 1024);
        assert_eq!(
            r,
            Err(FrameError::TooLarge {
                len: 1 << 30,
                max: 1024
            })
        );
        assert_eq!(
            src.capacity(),
            cap_before,
            "no allocation for a refused frame"
        );
    }

    #[test]
    fn zero_length_is_refused() {
        let mut src = BytesMut::from(&[0u8, 0, 0, 0][..]);
        assert_eq!(
            decode_frame::<ClientFrame>(&mut src, 1024),
            Err(FrameError::Empty)
        );
    }

    #[test]
    fn trailing_bytes_are_refused() {
        let mut src = BytesMut::new();
        encode_frame(&ClientFrame::Status, &mut src, 1024).unwrap();
        // Grow the payload by one byte and fix up the header.
        src.put_u8(0);
        let len = u32::try_from(src.len() - HEADER_LEN).unwrap();
        src[..4].copy_from_slice(&len.to_be_bytes());
        assert_eq!(
            decode_frame::<ClientFrame>(&mut src, 1024),
            Err(FrameError::TrailingBytes(1))
        );
    }

    #[test]
    fn unknown_variant_is_refused() {
        let mut src = BytesMut::from(&[0u8, 0, 0, 1, 0x7f][..]);
        assert!(matches!(
            decode_frame::<ClientFrame>(&mut src, 1024),
            Err(FrameError::Malformed(_))
        ));
    }

    #[test]
    fn truncated_payload_is_refused() {
        // Hello announces a string longer than the payload.
        let mut src = BytesMut::from(&[0u8, 0, 0, 4, 0, 2, 2, 9][..]);
        assert!(matches!(
            decode_frame::<ClientFrame>(&mut src, 1024),
            Err(FrameError::Malformed(_))
        ));
    }

    #[test]
    fn encode_refuses_oversized_and_writes_nothing() {
        let mut dst = BytesMut::new();
        let big = ClientFrame::Input(bytes::Bytes::from(vec![0u8; 2000]));
        assert!(matches!(
            encode_frame(&big, &mut dst, 1024),
            Err(FrameError::TooLarge { .. })
        ));
        assert!(dst.is_empty());
    }
}
