//! latch-wire: the latch wire protocol, with no IO.
//!
//! What it does: identity types ([`SessionId`], [`Incarnation`], [`SessionRef`],
//! [`Owner`]);
//! the strict protocol's frames ([`ClientFrame`], [`ServerFrame`]) and framing;
//! the legacy `pty` framing ([`legacy`]); the rule that tells them apart from a
//! connection's first bytes ([`detect`]); version negotiation ([`version`]); the
//! daemon's connection state machine ([`server::ServerConn`]) and the client's
//! handshake ([`client::ClientHandshake`]); codecs over `BytesMut` (tokio-util's
//! traits with the `tokio-codec` feature; no tokio otherwise).
//!
//! What it deliberately does not do: open sockets, read files or clocks, spawn
//! tasks, or mint incarnations (that needs the registry key: `latch-registry`).
//! SPEC.md is normative; section numbers are cited throughout.

// No unsafe code at all in this crate (the protocol and the screen are pure data).
#![forbid(unsafe_code)]

/// The traits every validated text newtype has (an id, an owner): `Display` and
/// `Debug` of its text, `FromStr` and `Deserialize` through its validating `new`,
/// `Serialize` as its text.
macro_rules! text_newtype {
    ($ty:ident, $err:ty) => {
        impl ::std::fmt::Display for $ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl ::std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                write!(f, concat!(stringify!($ty), "({:?})"), self.0)
            }
        }

        impl ::std::str::FromStr for $ty {
            type Err = $err;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::new(s)
            }
        }

        impl ::serde::Serialize for $ty {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $ty {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <String as ::serde::Deserialize>::deserialize(d)?;
                Self::new(s).map_err(::serde::de::Error::custom)
            }
        }
    };
}
pub(crate) use text_newtype;

pub mod client;
pub mod codec;
pub mod detect;
pub mod error;
pub mod frame;
pub mod framing;
pub mod ids;
pub mod lease;
pub mod legacy;
pub mod limits;
pub mod owner;
pub mod server;
pub mod version;

// Entry points for the fuzz targets and the property tests: not a public API, and
// not compiled into the product. Built only with the `fuzzing` feature, which the
// fuzz crate and this crate's and the daemon's tests turn on.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;

pub use codec::{ClientCodec, Framing, Inbound, Outbound, ServerCodec};
pub use error::{CodecError, FrameError};
pub use frame::{
    AttachRequest, CastInfo, CastRequest, ClientFrame, CutFacts, ErrorCode, ExitStatus,
    LegacyPolicy, Limits, OutputFacts, OutputRange, PeekRequest, ServerFrame, ShellFacts,
    ShellPhase, Size, Status3, StatusReply, TerminalRequest,
};
pub use ids::{
    Incarnation, IncarnationError, SessionId, SessionIdError, SessionRef, SessionRefError,
};
pub use lease::{CommandBlock, LeaseFacts};
pub use owner::{validate_owner, Owner, OwnerError, OWNER_MAX_CHARS};
pub use version::{VersionRange, CURSORS_VERSION, SUPPORTED, TERMINAL_VERSION};
