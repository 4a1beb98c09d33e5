//! latch-client: everything the `latch` command line does, as a library.
//!
//! What it does: opens a registry; creates sessions (spawning their daemons and
//! waiting for an explicit readiness line); lists them with a truthful, derived
//! status (unreadable records are reported as degraded, never dropped);
//! resolves a reference (id, unique display name, `ID@INCARNATION`); connects
//! to a daemon, checks its uid, negotiates and binds to exactly one creation;
//! typed errors that map onto the CLI's exit codes.
//!
//! What it does not do: parse command lines, print, or touch a terminal.

pub mod conn;
pub mod create;
pub mod error;
pub mod events;
pub mod lifecycle;
pub mod meta;
pub mod names;
#[cfg(feature = "tokio")]
pub mod nonblocking;
pub mod options;
mod proto;
pub mod receipt;
pub mod session;
mod wait;

pub use conn::{AttachEvent, AttachReader, AttachWriter, Attached, Bound, Connection};
pub use create::Created;
pub use error::{exit, ClientError, Mismatch, UnreachableCause};
pub use events::{Event, EventFollower, EventScope};
pub use lifecycle::{GcOptions, GcReport};
pub use meta::{MetaPatch, Patched};
pub use names::{validate_display_name, NameError};
pub use options::{AttachMode, PeekFormat, PeekOptions, PeekScope, RemoveMode};
pub use receipt::{Receipt, Verdict};
pub use session::{derive_status, Client, Entry, KillOutcome, NewSession, SessionStatus, Target};
