//! ATTACH_TERMINAL (SPEC.md §5.7): the user's terminal passed to the daemon by
//! SCM_RIGHTS, so that keys and output no longer pass through this process.

use std::io::{IoSlice, Write};
use std::os::fd::{AsRawFd, BorrowedFd};

use latch_wire::{ClientFrame, ServerFrame, TerminalRequest, TERMINAL_VERSION};
use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};

use super::{AttachReader, AttachWriter, Bound};
use crate::error::ClientError;
use crate::proto;

impl Bound {
    /// Whether the daemon takes a passed terminal (it negotiated version 4).
    pub fn takes_terminal(&self) -> bool {
        self.conn.negotiated.version >= TERMINAL_VERSION
    }

    /// Passes `tty` (the client's terminal, on its stdin and stdout) with
    /// ATTACH_TERMINAL and waits for the daemon's GEOMETRY: from then on the
    /// daemon writes the stream to the terminal and reads its keys itself; this
    /// connection carries RESIZE and DETACH, and brings DETACHED, EXIT or ERROR.
    /// A refusal is [`ClientError::Daemon`] (the daemon closes the connection;
    /// attach again relayed).
    pub fn attach_terminal(
        mut self,
        req: TerminalRequest,
        tty: BorrowedFd<'_>,
    ) -> Result<(AttachReader, AttachWriter), ClientError> {
        if !self.takes_terminal() {
            return Err(ClientError::protocol(
                crate::Mismatch::Version,
                format!("ATTACH_TERMINAL needs protocol version {TERMINAL_VERSION}"),
            ));
        }
        let frame = ClientFrame::AttachTerminal(req);
        let writer = &mut self.conn.writer;
        let bytes = writer.outbox.encode(&frame)?;
        let fds = [tty.as_raw_fd()];
        let cmsg = [ControlMessage::ScmRights(&fds)];
        let sent = loop {
            match sendmsg::<()>(
                writer.stream.as_raw_fd(),
                &[IoSlice::new(bytes)],
                &cmsg,
                MsgFlags::MSG_NOSIGNAL,
                None,
            ) {
                Ok(n) => break n,
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(proto::io_err("sendmsg", e.into())),
            }
        };
        // The descriptor went with the first byte; the rest is plain bytes.
        if let Some(rest) = bytes.get(sent..) {
            writer
                .stream
                .write_all(rest)
                .map_err(|e| proto::io_err("write", e))?;
        }
        loop {
            match self.conn.reader.read_frame()? {
                Some(ServerFrame::Geometry { .. }) => break,
                Some(ServerFrame::Error { code, detail }) => {
                    return Err(ClientError::Daemon { code, detail })
                }
                Some(ServerFrame::Pong(_)) => {}
                Some(_) => {
                    return Err(ClientError::protocol(
                        crate::Mismatch::BadFrame,
                        "a frame other than GEOMETRY in answer to ATTACH_TERMINAL",
                    ))
                }
                None => {
                    return Err(ClientError::protocol(
                        crate::Mismatch::BadFrame,
                        "the daemon closed the connection without answering ATTACH_TERMINAL",
                    ))
                }
            }
        }
        self.conn.reader.set_timeout(None)?;
        Ok((
            AttachReader {
                reader: self.conn.reader,
            },
            AttachWriter {
                writer: self.conn.writer,
            },
        ))
    }
}
