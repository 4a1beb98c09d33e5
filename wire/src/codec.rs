//! The codecs for each end of a connection. They only transform bytes in a
//! `BytesMut`; they never touch a socket (SPEC.md §3, §6). With the `tokio-codec`
//! feature they also implement tokio-util's `Decoder` and `Encoder`, so a caller
//! that does IO on tokio can frame a socket with them.
//!
//! [`ServerCodec`] classifies the connection from its first bytes and then
//! decodes strict or legacy frames; [`ClientCodec`] sends the preamble before its
//! first frame and refuses any answer that does not open with it.

use bytes::BytesMut;
#[cfg(feature = "tokio-codec")]
use tokio_util::codec::{Decoder, Encoder};

use crate::detect::{classify_client_opening, classify_server_answer, ClientOpening, ServerAnswer};
#[cfg(feature = "tokio-codec")]
use crate::error::CodecError;
use crate::error::FrameError;
use crate::frame::{ClientFrame, ServerFrame};
use crate::framing::{decode_frame, encode_frame, MAGIC};
use crate::legacy::{decode_packet, LegacyClientFrame, LegacyServerFrame, LEGACY_DEFAULT_CAP};
use crate::limits;

/// Which framing a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// Not yet known.
    Undecided,
    /// The strict protocol (version 2 and up).
    Strict,
    /// The legacy `pty` framing.
    Legacy,
}

/// A decoded inbound frame on the daemon side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inbound {
    /// A strict frame.
    Strict(ClientFrame),
    /// A legacy packet.
    Legacy(LegacyClientFrame),
}

/// An outbound frame on the daemon side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outbound {
    /// A frame of the strict protocol; the preamble is written before the first
    /// one. On a legacy connection the codec writes its legacy packet instead
    /// ([`LegacyServerFrame::from_strict`]), or nothing if the old framing has none,
    /// so the output stream is queued the same way for every connection.
    Strict(ServerFrame),
    /// A packet only the legacy framing has (its STATUS JSON).
    Legacy(LegacyServerFrame),
}

/// The daemon's codec.
#[derive(Debug)]
pub struct ServerCodec {
    framing: Framing,
    max_client_frame: usize,
    max_server_frame: usize,
    legacy_cap: usize,
    preamble_sent: bool,
}

impl Default for ServerCodec {
    fn default() -> Self {
        Self::new(
            limits::MAX_CLIENT_FRAME,
            limits::MAX_SERVER_FRAME,
            LEGACY_DEFAULT_CAP,
        )
    }
}

impl ServerCodec {
    /// A codec with explicit limits.
    pub fn new(max_client_frame: usize, max_server_frame: usize, legacy_cap: usize) -> Self {
        Self {
            framing: Framing::Undecided,
            max_client_frame,
            max_server_frame,
            legacy_cap,
            preamble_sent: false,
        }
    }

    /// The framing decided so far.
    pub fn framing(&self) -> Framing {
        self.framing
    }

    /// Settles the framing of a connection whose frames reached its state machine
    /// without passing through this codec's decoder (a no-op once decided).
    pub(crate) fn settle(&mut self, framing: Framing) {
        if self.framing == Framing::Undecided {
            self.framing = framing;
        }
    }

    /// Decodes one inbound frame, classifying the connection first.
    pub fn decode_inbound(&mut self, src: &mut BytesMut) -> Result<Option<Inbound>, FrameError> {
        if self.framing == Framing::Undecided {
            match classify_client_opening(src) {
                ClientOpening::NeedMore => return Ok(None),
                ClientOpening::Unknown => return Err(FrameError::BadOpening),
                ClientOpening::Strict => {
                    let _ = src.split_to(MAGIC.len());
                    self.framing = Framing::Strict;
                }
                ClientOpening::Legacy => self.framing = Framing::Legacy,
            }
        }
        match self.framing {
            Framing::Strict => Ok(decode_frame(src, self.max_client_frame)?.map(Inbound::Strict)),
            Framing::Legacy => Ok(decode_packet(src, self.legacy_cap)?
                .map(|p| Inbound::Legacy(LegacyClientFrame::from_packet(p)))),
            Framing::Undecided => Ok(None),
        }
    }

    /// Encodes one outbound frame in the connection's framing: a strict frame on a
    /// legacy connection becomes its legacy packet, or nothing (SPEC.md §7).
    pub fn encode_outbound(
        &mut self,
        item: &Outbound,
        dst: &mut BytesMut,
    ) -> Result<(), FrameError> {
        match item {
            Outbound::Strict(f) if self.framing == Framing::Legacy => {
                match LegacyServerFrame::from_strict(f) {
                    Some(packet) => packet.encode(dst),
                    None => Ok(()),
                }
            }
            Outbound::Strict(f) => {
                if !self.preamble_sent {
                    dst.extend_from_slice(&MAGIC);
                    self.preamble_sent = true;
                }
                encode_frame(f, dst, self.max_server_frame)
            }
            Outbound::Legacy(f) => f.encode(dst),
        }
    }
}

#[cfg(feature = "tokio-codec")]
impl Decoder for ServerCodec {
    type Item = Inbound;
    type Error = CodecError;
    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Inbound>, CodecError> {
        Ok(self.decode_inbound(src)?)
    }
}

#[cfg(feature = "tokio-codec")]
impl Encoder<Outbound> for ServerCodec {
    type Error = CodecError;
    fn encode(&mut self, item: Outbound, dst: &mut BytesMut) -> Result<(), CodecError> {
        Ok(self.encode_outbound(&item, dst)?)
    }
}

/// The strict client's codec. Clone it to give the read and write halves of a
/// connection their own codec after the handshake.
#[derive(Debug, Clone)]
pub struct ClientCodec {
    preamble_sent: bool,
    preamble_seen: bool,
    max_client_frame: usize,
    max_server_frame: usize,
}

impl Default for ClientCodec {
    fn default() -> Self {
        Self {
            preamble_sent: false,
            preamble_seen: false,
            max_client_frame: limits::MAX_CLIENT_FRAME,
            max_server_frame: limits::MAX_SERVER_FRAME,
        }
    }
}

impl ClientCodec {
    /// Whether the daemon's preamble has been seen.
    pub fn answered(&self) -> bool {
        self.preamble_seen
    }

    /// Decodes one server frame, checking the daemon's opening first.
    pub fn decode_server(&mut self, src: &mut BytesMut) -> Result<Option<ServerFrame>, FrameError> {
        if !self.preamble_seen {
            match classify_server_answer(src) {
                ServerAnswer::NeedMore => return Ok(None),
                ServerAnswer::Legacy(t) => return Err(FrameError::LegacyPeer(t)),
                ServerAnswer::Garbage => return Err(FrameError::BadOpening),
                ServerAnswer::Strict => {
                    let _ = src.split_to(MAGIC.len());
                    self.preamble_seen = true;
                }
            }
        }
        decode_frame(src, self.max_server_frame)
    }

    /// Encodes one client frame, preceded by the preamble the first time.
    pub fn encode_client(
        &mut self,
        item: &ClientFrame,
        dst: &mut BytesMut,
    ) -> Result<(), FrameError> {
        if !self.preamble_sent {
            dst.extend_from_slice(&MAGIC);
            self.preamble_sent = true;
        }
        encode_frame(item, dst, self.max_client_frame)
    }
}

#[cfg(feature = "tokio-codec")]
impl Decoder for ClientCodec {
    type Item = ServerFrame;
    type Error = CodecError;
    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<ServerFrame>, CodecError> {
        Ok(self.decode_server(src)?)
    }
}

#[cfg(feature = "tokio-codec")]
impl Encoder<ClientFrame> for ClientCodec {
    type Error = CodecError;
    fn encode(&mut self, item: ClientFrame, dst: &mut BytesMut) -> Result<(), CodecError> {
        Ok(self.encode_client(&item, dst)?)
    }
}

#[cfg(feature = "tokio-codec")]
impl<'a> Encoder<&'a ClientFrame> for ClientCodec {
    type Error = CodecError;
    fn encode(&mut self, item: &'a ClientFrame, dst: &mut BytesMut) -> Result<(), CodecError> {
        Ok(self.encode_client(item, dst)?)
    }
}
