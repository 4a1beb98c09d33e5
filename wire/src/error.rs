//! Errors: what was wrong with the peer's bytes ([`FrameError`]) kept apart from
//! what happened to the connection ([`CodecError`]).

use std::fmt;

use crate::frame::ErrorCode;

/// The peer sent bytes that are not a valid frame. The stream is corrupt; close it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FrameError {
    /// The declared length exceeds the maximum.
    TooLarge {
        /// The declared length.
        len: u32,
        /// The maximum in force.
        max: usize,
    },
    /// A strict frame declared length zero.
    Empty,
    /// The payload did not decode (unknown variant, truncated field, bad value).
    Malformed(String),
    /// The payload decoded with this many bytes left over.
    TrailingBytes(usize),
    /// The connection's opening bytes are neither the strict preamble nor legacy.
    BadOpening,
    /// A strict client's peer answered in the legacy framing (packet type given).
    LegacyPeer(u8),
    /// Our own outgoing value could not be encoded.
    Encode(String),
}

impl FrameError {
    /// The typed error a daemon sends before closing because of this error.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            Self::TooLarge { .. } => ErrorCode::FrameTooLarge,
            Self::Encode(_) => ErrorCode::Internal,
            _ => ErrorCode::Malformed,
        }
    }
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLarge { len, max } => {
                write!(f, "frame of {len} bytes exceeds the maximum of {max}")
            }
            Self::Empty => f.write_str("zero-length frame"),
            Self::Malformed(e) => write!(f, "malformed frame: {e}"),
            Self::TrailingBytes(n) => write!(f, "{n} trailing bytes after the frame"),
            Self::BadOpening => {
                f.write_str("connection opening is neither latch nor legacy framing")
            }
            Self::LegacyPeer(t) => write!(
                f,
                "peer answered in the legacy pty framing (packet type {t}), not latch protocol 2"
            ),
            Self::Encode(e) => write!(f, "cannot encode frame: {e}"),
        }
    }
}

impl std::error::Error for FrameError {}

impl From<postcard::Error> for FrameError {
    fn from(e: postcard::Error) -> Self {
        Self::Malformed(e.to_string())
    }
}

/// A codec failure: bad bytes from the peer, or an IO error underneath.
#[derive(Debug)]
#[non_exhaustive]
pub enum CodecError {
    /// The peer's bytes are invalid.
    Frame(FrameError),
    /// The transport failed.
    Io(std::io::Error),
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Frame(e) => e.fmt(f),
            Self::Io(e) => write!(f, "io: {e}"),
        }
    }
}

impl std::error::Error for CodecError {}

impl From<std::io::Error> for CodecError {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e)
    }
}

impl From<FrameError> for CodecError {
    fn from(e: FrameError) -> Self {
        Self::Frame(e)
    }
}
