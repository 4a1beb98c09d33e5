//! latch-wire: the latch wire protocol, with no IO.
//!
//! What it does: identity types ([`SessionId`], [`Incarnation`], [`SessionRef`],
//! [`Owner`]);
//! the strict protocol's frames ([`ClientFrame`], [`ServerFrame`]) and framing;
//! the legacy `pty` framing ([`legacy`]); the rule that tells them apart from a
//! connection's first bytes ([`detect`]); version negotiation ([`version`]); the
//! daemon's connection state machine ([`server::ServerConn`]) and the client's
//! handshake ([`client::ClientHandshake`]); tokio-util codecs over `BytesMut`.
//!
//! What it deliberately does not do: open sockets, read files or clocks, spawn
//! tasks, or mint incarnations (that needs the registry key: `latch-registry`).
//! SPEC.md is normative; section numbers are cited throughout.

pub mod client;
pub mod codec;
pub mod detect;
pub mod error;
pub mod frame;
pub mod framing;
pub mod ids;
pub mod legacy;
pub mod limits;
pub mod owner;
pub mod server;
pub mod version;

#[doc(hidden)]
pub mod fuzzing;

pub use codec::{ClientCodec, Framing, Inbound, Outbound, ServerCodec};
pub use error::{CodecError, FrameError};
pub use frame::{
    ClientFrame, ErrorCode, ExitStatus, LegacyPolicy, Limits, ServerFrame, StatusReply,
};
pub use ids::{
    Incarnation, IncarnationError, SessionId, SessionIdError, SessionRef, SessionRefError,
};
pub use owner::{validate_owner, Owner, OwnerError, OWNER_MAX_CHARS};
pub use version::{VersionRange, SUPPORTED};
