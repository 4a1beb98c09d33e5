//! Bound connections kept between requests (SPEC §13.4): one per creation,
//! keyed by ID@INCARNATION, so a connection is never reused for another
//! creation. A request takes its creation's connection (or connects), and gives
//! it back only when it answered; a connection that failed is dropped, and so is
//! every connection of an id once a request names another incarnation of it.

use std::collections::HashMap;
use std::sync::Mutex;

use latch_client::{Bound, ClientError, Found};
use latch_wire::SessionRef;

use super::{Place, CONNECTIONS_KEPT};

#[derive(Debug, Default)]
pub(crate) struct Pool {
    idle: Mutex<HashMap<SessionRef, Bound>>,
}

impl Pool {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionRef, Bound>> {
        self.idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The kept connection to `s`, dropping those to other creations of its id.
    fn take(&self, s: &SessionRef) -> Option<Bound> {
        let mut idle = self.lock();
        idle.retain(|k, _| k.id != s.id || k.incarnation == s.incarnation);
        idle.remove(s)
    }

    fn give_back(&self, bound: Bound) {
        let mut idle = self.lock();
        let s = bound.target().clone();
        if idle.len() >= CONNECTIONS_KEPT && !idle.contains_key(&s) {
            // Full: keep the ones there (each serves its creation as well).
            return;
        }
        idle.retain(|k, _| k.id != s.id || k.incarnation == s.incarnation);
        idle.insert(s, bound);
    }

    /// Runs `f` on a connection bound to `s`: the kept one, else a new one from
    /// `client`. A kept connection that fails is dropped and `f` runs once more
    /// on a new one (it may have been closed while it was kept), so `f` must be
    /// safe to repeat: it only reads.
    ///
    /// Only connections of the server's own client are kept: a client with an
    /// owner precondition proves it to each new connection's daemon, so its
    /// requests connect anew.
    pub(crate) fn with<T>(
        &self,
        place: &Place<'_>,
        found: &Found,
        mut f: impl FnMut(&mut Bound) -> Result<T, ClientError>,
    ) -> Result<T, ClientError> {
        let s = &found.session;
        if !place.shared() {
            return f(&mut place.loc().connect(found)?);
        }
        if let Some(mut kept) = self.take(s) {
            if let Ok(v) = f(&mut kept) {
                self.give_back(kept);
                return Ok(v);
            }
        }
        let mut bound = place.loc().connect(found)?;
        let v = f(&mut bound)?;
        self.give_back(bound);
        Ok(v)
    }
}
