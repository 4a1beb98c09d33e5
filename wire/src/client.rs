//! The strict client's side of the handshake (SPEC.md §5.1): HELLO, then BIND.
//!
//! Call order: send [`ClientHandshake::hello`]; feed the first server frame to
//! [`ClientHandshake::on_welcome`]; send [`ClientHandshake::bind`]; feed the
//! next frame to [`ClientHandshake::on_bound`]. A legacy or garbage answer is
//! caught earlier, by [`crate::codec::ClientCodec`].

use std::fmt;

use crate::frame::{ClientFrame, ErrorCode, Limits, ServerFrame};
use crate::ids::SessionRef;
use crate::version::{client_accepts, VersionRange, SUPPORTED};

/// Why a strict client's handshake failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HandshakeError {
    /// The daemon chose a version outside the client's range (a downgrade).
    Downgrade {
        /// What the client asked for.
        asked: VersionRange,
        /// What the daemon chose.
        offered: u16,
    },
    /// The daemon refused with a typed error.
    Refused {
        /// The code.
        code: ErrorCode,
        /// The daemon's detail.
        detail: String,
    },
    /// The daemon answered with a frame that does not belong at this step.
    Unexpected(&'static str),
    /// The daemon bound the connection to a creation other than the one asked for.
    WrongBinding,
}

impl fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Downgrade { asked, offered } => write!(
                f,
                "daemon chose protocol version {offered}, outside the client's range {asked}"
            ),
            Self::Refused { code, detail } => write!(f, "daemon refused ({code}): {detail}"),
            Self::Unexpected(what) => write!(f, "unexpected {what} frame during the handshake"),
            Self::WrongBinding => f.write_str("daemon bound a different session than requested"),
        }
    }
}

impl std::error::Error for HandshakeError {}

/// The negotiated parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiated {
    /// The chosen version.
    pub version: u16,
    /// The daemon's limits.
    pub limits: Limits,
}

/// The client's handshake state machine.
#[derive(Debug, Clone)]
pub struct ClientHandshake {
    asked: VersionRange,
    client: String,
}

impl Default for ClientHandshake {
    fn default() -> Self {
        Self::new(SUPPORTED, "latch")
    }
}

fn frame_name(f: &ServerFrame) -> &'static str {
    match f {
        ServerFrame::Welcome { .. } => "WELCOME",
        ServerFrame::Status(_) => "STATUS",
        ServerFrame::Bound { .. } => "BOUND",
        ServerFrame::Geometry { .. } => "GEOMETRY",
        ServerFrame::Screen(_) => "SCREEN",
        ServerFrame::Output(_) => "OUTPUT",
        ServerFrame::Exit(_) => "EXIT",
        ServerFrame::Error { .. } => "ERROR",
        ServerFrame::Pong(_) => "PONG",
        ServerFrame::Detached => "DETACHED",
        ServerFrame::Status3(_) => "STATUS3",
        ServerFrame::OutputRange(_) => "OUTPUT_RANGE",
        ServerFrame::Cut(_) => "CUT",
        ServerFrame::Casts(_) => "CASTS",
        ServerFrame::Leased(_) => "LEASED",
        ServerFrame::Commands(_) => "COMMANDS",
        ServerFrame::Capture(_) => "CAPTURE",
        ServerFrame::Reserved16 | ServerFrame::Reserved17 | ServerFrame::Reserved18 => "RESERVED",
    }
}

impl ClientHandshake {
    /// A handshake asking for `asked`.
    pub fn new(asked: VersionRange, client: impl Into<String>) -> Self {
        Self {
            asked,
            client: client.into(),
        }
    }

    /// The HELLO frame to send first.
    pub fn hello(&self) -> ClientFrame {
        ClientFrame::Hello {
            versions: self.asked,
            client: self.client.clone(),
        }
    }

    /// Checks the answer to HELLO. Never accepts a version outside the asked range.
    pub fn on_welcome(&self, frame: ServerFrame) -> Result<Negotiated, HandshakeError> {
        match frame {
            ServerFrame::Welcome {
                version, limits, ..
            } => {
                if client_accepts(self.asked, version) {
                    Ok(Negotiated { version, limits })
                } else {
                    Err(HandshakeError::Downgrade {
                        asked: self.asked,
                        offered: version,
                    })
                }
            }
            ServerFrame::Error { code, detail } => Err(HandshakeError::Refused { code, detail }),
            other => Err(HandshakeError::Unexpected(frame_name(&other))),
        }
    }

    /// The BIND frame for `target`.
    pub fn bind(&self, target: &SessionRef) -> ClientFrame {
        ClientFrame::Bind {
            id: target.id.clone(),
            incarnation: target.incarnation,
        }
    }

    /// Checks the answer to BIND: it must name exactly `target`.
    pub fn on_bound(&self, target: &SessionRef, frame: ServerFrame) -> Result<(), HandshakeError> {
        match frame {
            ServerFrame::Bound { id, incarnation } => {
                if target.matches(&SessionRef::new(id, incarnation)) {
                    Ok(())
                } else {
                    Err(HandshakeError::WrongBinding)
                }
            }
            ServerFrame::Error { code, detail } => Err(HandshakeError::Refused { code, detail }),
            other => Err(HandshakeError::Unexpected(frame_name(&other))),
        }
    }
}
