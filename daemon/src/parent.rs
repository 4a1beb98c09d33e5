//! `new --with-parent`: the session's life is bound to a parent process, or to the
//! program of a parent session creation (SPEC.md §9.16).
//!
//! The parent is proven once, when the daemon starts: a pidfd opened first, then
//! its start time and boot id checked against the identity the creator recorded
//! (for a parent session, that identity is its record's `child`, and the record
//! must still hold the parent's incarnation and no exit). From then on the pidfd
//! alone is watched: it becomes readable when that process ends, and it never
//! names a recycled pid. A parent that cannot be proven (gone, recycled, replaced)
//! has ended.

use std::cell::Cell;

use latch_registry::proc::prove;
use latch_registry::supervision::Parent;
use latch_registry::{PidFd, Registry};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// A parent being watched.
#[derive(Debug)]
pub(crate) struct Watch {
    /// The parent's proven pidfd; `None`: it had ended when the daemon started.
    fd: Option<AsyncFd<PidFd>>,
    /// The end was reported.
    fired: Cell<bool>,
}

impl Watch {
    /// Proves `parent` and starts watching it (inside the runtime).
    pub fn start(registry: &Registry, parent: &Parent) -> Self {
        let fd = match proven(registry, parent) {
            Ok(pidfd) => match crate::watch::watch(pidfd, Interest::READABLE) {
                Ok(fd) => Some(fd),
                Err(e) => {
                    log!("cannot watch the parent ({e}); it counts as ended");
                    None
                }
            },
            Err(why) => {
                log!("the parent {} counts as ended: {why}", parent.process.pid);
                None
            }
        };
        Self {
            fd,
            fired: Cell::new(false),
        }
    }

    /// Resolves once, when the parent has ended; pending ever after.
    pub async fn ended(&self) {
        if self.fired.get() {
            return std::future::pending().await;
        }
        if let Some(fd) = &self.fd {
            // Readable once the process has exited; an error means it cannot be
            // watched, which counts as ended.
            let _ = fd.readable().await;
        }
        self.fired.set(true);
    }

    /// Whether the parent's end was reported.
    pub fn has_ended(&self) -> bool {
        self.fired.get()
    }
}

/// The parent's pidfd, proven against its recorded identity (and, for a session,
/// against that session's record).
fn proven(registry: &Registry, parent: &Parent) -> Result<PidFd, String> {
    if let Some(s) = &parent.session {
        match registry.read_record(&s.id) {
            Ok(Some(r))
                if r.incarnation == s.incarnation
                    && r.exit.is_none()
                    && r.child == parent.process => {}
            Ok(Some(_)) | Ok(None) => {
                return Err(format!("session {} was replaced or has ended", s.id));
            }
            Err(e) => return Err(format!("session {}'s record: {e}", s.id)),
        }
    }
    prove(&parent.process).map_err(|e| e.to_string())
}
