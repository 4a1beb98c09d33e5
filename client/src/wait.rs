//! Waiting for text on a session's screen, driven by its output (no polling).

use std::time::{Duration, Instant};

use bytes::Bytes;
use latch_wire::SessionRef;

use crate::client::Client;
use crate::error::{ClientError, UnreachableCause};
use crate::options::{AttachMode, PeekFormat, PeekOptions};
use crate::proto;

impl Client {
    /// Waits until `session`'s screen (plain text, over `opts.scope`) shows `text`,
    /// at most `timeout`, and returns that screen in `opts.format`.
    ///
    /// Event-driven: a read-only attachment wakes the wait on every output, and each
    /// wake peeks again through a connection bound to `session`, so the text is
    /// only ever read from that creation. Fails with
    /// [`UnreachableCause::TimedOut`] at the deadline and
    /// [`UnreachableCause::Exited`] if the session ends first.
    pub fn wait_for_text(
        &self,
        session: &SessionRef,
        text: &str,
        opts: PeekOptions,
        timeout: Duration,
    ) -> Result<Bytes, ClientError> {
        let deadline = Instant::now() + timeout;
        let mut bound = self.connect(session)?;
        let mut reader = self
            .connect(session)?
            .attach(0, 0, AttachMode::ReadOnly)?
            .reader;
        let plain = opts.with_format(PeekFormat::Plain);
        loop {
            let screen = bound.peek(plain)?;
            if proto::shows(&screen, text) {
                return match opts.format {
                    PeekFormat::Plain => Ok(screen),
                    PeekFormat::Ansi => bound.peek(opts),
                };
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(proto::wait_timed_out(text, timeout));
            }
            reader.set_timeout(Some(left))?;
            match reader.next_event() {
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
