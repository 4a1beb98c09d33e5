//! Waiting for text on a session's screen, driven by its output (no polling).

use std::time::{Duration, Instant};

use bytes::Bytes;
use latch_wire::SessionRef;

use crate::client::Client;
use crate::conn::{AttachReader, Bound};
use crate::error::{ClientError, UnreachableCause};
use crate::options::{AttachMode, PeekFormat, PeekOptions};
use crate::proto;

impl Client {
    /// Waits until `session`'s screen (plain text, over `opts.scope`) shows `text`,
    /// at most `timeout`, and returns that screen in `opts.format`.
    ///
    /// Event-driven: a read-only attachment wakes the wait on every output, and each
    /// wake peeks again through a connection bound to `session`, so the text is
    /// only ever read from that creation. Fails with [`ClientError::TimedOut`]
    /// (exit 10) at the deadline and with [`UnreachableCause::Exited`] if the
    /// session ends first.
    pub fn wait_for_text(
        &self,
        session: &SessionRef,
        text: &str,
        opts: PeekOptions,
        timeout: Duration,
    ) -> Result<Bytes, ClientError> {
        let mut bound = self.connect(session)?;
        let wake = self
            .connect(session)?
            .attach(0, 0, AttachMode::ReadOnly)?
            .reader;
        bound.wait_for_text(wake, text, opts, timeout)
    }
}

impl Bound {
    /// Waits until the screen of the creation this connection is bound to (plain
    /// text, over `opts.scope`) shows `text`, at most `timeout`, and returns that
    /// screen in `opts.format`. `wake` is a read-only attachment to the same
    /// creation: every output it reports wakes the wait, and each wake peeks again
    /// through `self`, so the text is only ever read from that creation
    /// ([`Client::wait_for_text`] opens both; a caller with connections of its own,
    /// such as a relay to another host, passes them here).
    pub fn wait_for_text(
        &mut self,
        mut wake: AttachReader,
        text: &str,
        opts: PeekOptions,
        timeout: Duration,
    ) -> Result<Bytes, ClientError> {
        let deadline = Instant::now() + timeout;
        let plain = opts.with_format(PeekFormat::Plain);
        loop {
            let screen = self.peek(plain)?;
            if proto::shows(&screen, text) {
                return match opts.format {
                    PeekFormat::Plain => Ok(screen),
                    PeekFormat::Ansi => self.peek(opts),
                };
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(proto::wait_timed_out(text, timeout));
            }
            wake.set_timeout(Some(left))?;
            match wake.next_event() {
                Ok(event) => proto::wait_wake(event, text)?,
                Err(ClientError::Unreachable {
                    cause: UnreachableCause::TimedOut,
                    ..
                }) => {}
                Err(e) => return Err(e),
            }
        }
    }
}
