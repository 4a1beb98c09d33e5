//! The one place the daemon hands a descriptor to tokio's reactor.
//!
//! `AsyncFd::register` is unsafe (tokio deprecated the safe constructors as
//! unsound): the descriptor must stay open, naming the same file description, for
//! as long as it is registered. Every type watched here owns its descriptor, so the
//! `AsyncFd` that owns the value keeps that descriptor for its whole life.

use std::os::fd::{AsRawFd, OwnedFd};

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// A value that owns the descriptor it reports, and always reports the same one.
pub(crate) trait OwnsFd: AsRawFd {}

impl OwnsFd for OwnedFd {}
impl OwnsFd for latch_registry::PidFd {}
impl OwnsFd for crate::pty::ChildProc {}
impl OwnsFd for nix::sys::signalfd::SignalFd {}

/// Registers `inner` with the runtime for `interest`; the `AsyncFd` owns it.
pub(crate) fn watch<T: OwnsFd>(inner: T, interest: Interest) -> std::io::Result<AsyncFd<T>> {
    // SAFETY: `T: OwnsFd` owns its descriptor and reports the same one while it
    // lives; the AsyncFd owns `inner`, so the descriptor stays open and names the
    // same file description for the registration's whole life.
    unsafe { AsyncFd::register_with_interest(inner, interest) }.map_err(std::io::Error::from)
}
