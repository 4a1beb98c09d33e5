//! A terminal passed to the daemon (ATTACH_TERMINAL, SPEC §5.7): the connection's
//! reader takes SCM_RIGHTS descriptors with its bytes, the daemon reopens the
//! terminal for a description of its own, reads the user's keys from it (the
//! detach key with its double press, read-only filtering: `latch_screen::attach`)
//! and writes the stream to it with non-blocking writes.
//!
//! ```text
//! recvmsg (MSG_CMSG_CLOEXEC) -- not bound / more than one / MSG_CTRUNC --> closed
//!   v
//! ATTACH_TERMINAL: the passed fd isatty -> open /proc/self/fd/N O_RDWR|O_NOCTTY|
//!   O_NONBLOCK|O_CLOEXEC, close N -> join the fan-out (session.attach)
//! keys:   terminal -> KeyFilter -> INPUT / DETACH frames into the connection's reader
//! writer: SCREEN, OUTPUT -> terminal (non-blocking; a backlog over the queue's bound
//!         is dropped and redrawn, `outbound`); every other frame -> socket, in order;
//!         before DETACHED, EXIT or ERROR the terminal is released: the epilogue
//!         (RESTORE_MODES, a fresh line), then its descriptor is closed
//! ```

use std::cell::{Cell, RefCell};
use std::io::{self, IoSliceMut};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{ready, Context, Poll};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use latch_screen::attach::KeyFilter;
use latch_wire::codec::{Inbound, Outbound};
use latch_wire::server::{ConnState, Env};
use latch_wire::{ClientFrame, ErrorCode, ServerFrame, TerminalRequest};
use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWriteExt, Interest, ReadBuf};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::time::{sleep_until, timeout, Instant as TokioInstant};

use crate::outbound::{stall_timeout, Peer, Phase, CLOSE_FLUSH_TIMEOUT, WRITE_BATCH};
use crate::session::Session;

/// Descriptors one `recvmsg` takes (SPEC §5.7: a client passes one; room for two,
/// so that a second is received and closed rather than truncated).
const MAX_PASSED: usize = 2;

/// A connection's passed terminal: descriptors received and not yet used, and the
/// terminal once ATTACH_TERMINAL took it.
#[derive(Debug, Default)]
pub(crate) struct Slot {
    passed: RefCell<Option<OwnedFd>>,
    term: RefCell<Option<Rc<Terminal>>>,
    /// Wakes the key reader when the terminal is released, so it lets go too.
    released: tokio::sync::Notify,
}

impl Slot {
    /// The terminal, while one is held.
    fn get(&self) -> Option<Rc<Terminal>> {
        self.term.borrow().clone()
    }

    /// Whether a terminal was taken (the writer routes the stream to it).
    pub fn is_set(&self) -> bool {
        self.term.borrow().is_some()
    }
}

/// The user's terminal, reopened by the daemon.
#[derive(Debug)]
pub(crate) struct Terminal {
    fd: AsyncFd<OwnedFd>,
    keys: RefCell<KeyFilter>,
    /// Frames the keys made that the reader has not taken yet.
    pending: RefCell<Vec<ClientFrame>>,
    /// `--history` lines for the first SCREEN's preface; `None` once written.
    history: RefCell<Option<Bytes>>,
    rows: u16,
    /// The last byte written (does the epilogue need a fresh line?).
    last_byte: Cell<Option<u8>>,
    /// The terminal hung up (EOF, EIO, EPIPE): nothing more is read or written.
    gone: Cell<bool>,
}

/// The connection's reading half, through `recvmsg`, so that descriptors passed
/// with its bytes are received (and closed unless wanted) instead of dropped.
pub(crate) struct FdReader {
    rd: OwnedReadHalf,
    peer: Rc<Peer>,
}

impl FdReader {
    pub fn new(rd: OwnedReadHalf, peer: Rc<Peer>) -> Self {
        Self { rd, peer }
    }
}

impl AsyncRead for FdReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            ready!(this.rd.as_ref().poll_read_ready(cx))?;
            let sock = this.rd.as_ref();
            let fd = sock.as_raw_fd();
            let got = sock.try_io(Interest::READABLE, || {
                recv_with_fds(fd, buf.initialize_unfilled())
            });
            match got {
                Ok((n, fds)) => {
                    keep_passed(&this.peer, fds);
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

/// One `recvmsg` with MSG_CMSG_CLOEXEC: the bytes read and the descriptors that
/// came with them (every one owned at once, so none can leak).
fn recv_with_fds(fd: RawFd, into: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut space = nix::cmsg_space!([RawFd; MAX_PASSED]);
    let mut iov = [IoSliceMut::new(into)];
    let flags = MsgFlags::MSG_CMSG_CLOEXEC | MsgFlags::MSG_DONTWAIT;
    let msg = recvmsg::<()>(fd, &mut iov, Some(&mut space), flags).map_err(io::Error::from)?;
    let mut fds = Vec::new();
    if let Ok(cmsgs) = msg.cmsgs() {
        for c in cmsgs {
            if let ControlMessageOwned::ScmRights(raw) = c {
                // SAFETY: SCM_RIGHTS installed these descriptors in this process
                // just now; nothing else owns them.
                fds.extend(raw.into_iter().map(|r| unsafe { OwnedFd::from_raw_fd(r) }));
            }
        }
    }
    if msg.flags.contains(MsgFlags::MSG_CTRUNC) {
        log!("a connection passed more descriptors than one message may carry: all closed");
        fds.clear();
    }
    Ok((msg.bytes, fds))
}

/// Keeps one passed descriptor on a bound connection that has none pending and is
/// not attached; closes every other (SPEC §5.7).
fn keep_passed(peer: &Peer, fds: Vec<OwnedFd>) {
    if fds.is_empty() {
        return;
    }
    let bound = peer.with_conn(|c| matches!(c.state(), ConnState::Bound { .. }));
    let mut slot = peer.tty.passed.borrow_mut();
    let mut fds = fds.into_iter();
    if bound && slot.is_none() && !peer.tty.is_set() {
        *slot = fds.next();
    }
    let extra = fds.count();
    if extra > 0 {
        log!(
            "connection {}: {extra} passed descriptor(s) not wanted: closed",
            peer.id
        );
    }
}

/// ATTACH_TERMINAL (SPEC §5.7): takes the descriptor passed with it, reopens the
/// terminal, and attaches. A missing descriptor, one that is not a terminal, or
/// one the daemon cannot reopen (EMFILE) is refused and the connection closed; the
/// client then attaches relayed.
pub(crate) fn attach(session: &Session, client: &Rc<Peer>, req: TerminalRequest) {
    let passed = client.tty.passed.borrow_mut().take();
    let opened = match passed {
        None => Err((
            ErrorCode::InvalidArgument,
            "no terminal was passed".to_owned(),
        )),
        Some(fd) => reopen(&fd),
    };
    let fd = match opened {
        Ok(fd) => fd,
        Err((code, detail)) => {
            log!(
                "connection {}: ATTACH_TERMINAL refused: {detail}",
                client.id
            );
            client.send(Outbound::Strict(ServerFrame::error(code, detail)));
            client.close();
            return;
        }
    };
    let term = Terminal {
        fd,
        keys: RefCell::new(KeyFilter::new(req.detach_key, req.read_only)),
        pending: RefCell::new(Vec::new()),
        history: RefCell::new(Some(req.history)),
        rows: req.rows,
        last_byte: Cell::new(None),
        gone: Cell::new(false),
    };
    *client.tty.term.borrow_mut() = Some(Rc::new(term));
    session.attach(client, req.rows, req.cols, req.read_only);
}

/// A description of the daemon's own for the passed terminal (O_NONBLOCK set on
/// it never reaches the user's shell's), the passed descriptor closed.
fn reopen(passed: &OwnedFd) -> Result<AsyncFd<OwnedFd>, (ErrorCode, String)> {
    use rustix::fs::{Mode, OFlags};
    if !rustix::termios::isatty(passed) {
        return Err((
            ErrorCode::InvalidArgument,
            "the passed descriptor is not a terminal".into(),
        ));
    }
    let path = format!("/proc/self/fd/{}", passed.as_raw_fd());
    let flags = OFlags::RDWR | OFlags::NOCTTY | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let own = rustix::fs::open(path.as_str(), flags, Mode::empty()).map_err(|e| {
        (
            ErrorCode::Internal,
            format!("cannot reopen the passed terminal: {e}"),
        )
    })?;
    if !rustix::termios::isatty(&own) {
        return Err((
            ErrorCode::InvalidArgument,
            "the passed descriptor is not a terminal".into(),
        ));
    }
    crate::watch::watch(own, Interest::READABLE | Interest::WRITABLE).map_err(|e| {
        (
            ErrorCode::Internal,
            format!("cannot poll the terminal: {e}"),
        )
    })
}

/// The next frame the user's keys make: INPUT, or DETACH (the detach key, its
/// double press's end, or the terminal's hangup). Pending forever without a
/// terminal. Cancel-safe: keys are read and filtered in one poll.
pub(crate) async fn next_keys(client: &Peer) -> Inbound {
    if let Some(term) = client.tty.get() {
        let released = client.tty.released.notified();
        tokio::select! {
            f = keys_of(&term) => return f,
            () = released => {}
        }
    }
    // No terminal, or it was just released (and `term` dropped with the future).
    std::future::pending().await
}

async fn keys_of(term: &Terminal) -> Inbound {
    loop {
        if let Some(f) = term.pending.borrow_mut().pop() {
            return Inbound::Strict(f);
        }
        if term.gone.get() {
            return std::future::pending().await;
        }
        let deadline = term.keys.borrow().deadline();
        let expiry = async {
            match deadline {
                Some(at) => sleep_until(TokioInstant::from_std(at)).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = term.fd.readable() => {
                let Ok(mut guard) = r else {
                    return hangup(term);
                };
                let mut buf = [0u8; 4096];
                match guard.try_io(|fd| Ok(rustix::io::read(fd.get_ref(), &mut buf)?)) {
                    Ok(Ok(0)) | Ok(Err(_)) => return hangup(term),
                    Ok(Ok(n)) => {
                        // A short read took all the terminal held; the next key wakes
                        // the reactor again (no read only to learn EAGAIN).
                        if n < buf.len() {
                            guard.clear_ready();
                        }
                        term.keys_read(buf.get(..n).unwrap_or_default());
                    }
                    Err(_would_block) => {}
                }
            }
            () = expiry => {
                if term.keys.borrow_mut().expired(Instant::now()) {
                    return Inbound::Strict(ClientFrame::Detach);
                }
            }
        }
    }
}

/// The terminal hung up: nothing more is read; the connection detaches.
fn hangup(term: &Terminal) -> Inbound {
    term.gone.set(true);
    Inbound::Strict(ClientFrame::Detach)
}

impl Terminal {
    /// Filters keys just read into pending frames (taken in reverse: a stack).
    fn keys_read(&self, bytes: &[u8]) {
        let keys = self.keys.borrow_mut().feed(bytes, Instant::now());
        let mut pending = self.pending.borrow_mut();
        if keys.detach {
            pending.push(ClientFrame::Detach);
        }
        if !keys.send.is_empty() {
            pending.push(ClientFrame::Input(Bytes::from(keys.send)));
        }
    }

    /// Writes what it can of `out` without blocking. Err: the terminal is gone.
    fn try_write(&self, out: &mut BytesMut) -> io::Result<()> {
        while !out.is_empty() {
            match rustix::io::write(self.fd.get_ref(), out) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    let _ = out.split_to(n);
                }
                Err(rustix::io::Errno::AGAIN) => return Ok(()),
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

/// Where the writer sends one queued frame.
enum Route {
    /// Bytes for the terminal.
    Terminal(Bytes),
    /// Nothing (GEOMETRY and CUT go to the socket too, but never end the terminal).
    Socket,
    /// The attachment's end: release the terminal, then the socket.
    Last,
}

fn route(item: &Outbound) -> Route {
    match item {
        Outbound::Strict(ServerFrame::Output(b) | ServerFrame::Screen(b)) => {
            Route::Terminal(b.clone())
        }
        Outbound::Strict(
            ServerFrame::Exit(_) | ServerFrame::Detached | ServerFrame::Error { .. },
        ) => Route::Last,
        _ => Route::Socket,
    }
}

/// The writer of a connection that passed its terminal, from the moment the
/// terminal was taken to the connection's end: `sock` holds bytes encoded
/// before, which go out first.
pub(crate) async fn write_loop(
    session: &Session,
    client: &Rc<Peer>,
    wr: &mut OwnedWriteHalf,
    mut sock: BytesMut,
) {
    let mut out = BytesMut::new();
    let mut held = client.tty.get();
    if !sock.is_empty() && !write_socket(client, wr, &mut sock).await {
        return release(client, &mut held, &mut out);
    }
    loop {
        let Some((_, item)) = client.pop_item() else {
            if !out.is_empty() {
                flush(session, client, &mut held, &mut out).await;
                continue;
            }
            if client.phase() != Phase::Open {
                break;
            }
            if client.wants_resync() {
                session.resync(client);
                continue;
            }
            client.wake_writer.notified().await;
            continue;
        };
        match route(&item) {
            Route::Terminal(bytes) => {
                if let Some(term) = &held {
                    term.stage(
                        &mut out,
                        &bytes,
                        matches!(item, Outbound::Strict(ServerFrame::Screen(_))),
                    );
                }
                if out.len() >= WRITE_BATCH {
                    flush(session, client, &mut held, &mut out).await;
                }
                continue;
            }
            Route::Last => {
                flush(session, client, &mut held, &mut out).await;
                release(client, &mut held, &mut out);
            }
            Route::Socket => {}
        }
        client.with_conn(|c| {
            if let Err(e) = c.encode(&item, &mut sock) {
                log!("connection {}: cannot encode a frame: {e}", client.id);
            }
        });
        if !write_socket(client, wr, &mut sock).await {
            break;
        }
    }
    release(client, &mut held, &mut out);
}

impl Terminal {
    /// Adds a frame's bytes to `out`; the first SCREEN gets the preface (the
    /// `--history` lines and a screenful of line feeds, SPEC §5.4).
    fn stage(&self, out: &mut BytesMut, bytes: &[u8], screen: bool) {
        if screen {
            if let Some(history) = self.history.borrow_mut().take() {
                out.extend_from_slice(&latch_screen::attach::preface(&history, bytes, self.rows));
            }
        }
        out.extend_from_slice(bytes);
        if let Some(&b) = bytes.last() {
            self.last_byte.set(Some(b));
        }
    }
}

/// Writes `sock` to the socket in full (as the relayed writer, within the stall
/// timeout). False: the socket failed; the connection is done.
async fn write_socket(client: &Peer, wr: &mut OwnedWriteHalf, sock: &mut BytesMut) -> bool {
    let limit = if client.phase() == Phase::Open {
        stall_timeout()
    } else {
        CLOSE_FLUSH_TIMEOUT
    };
    let ok = matches!(timeout(limit, wr.write_all_buf(sock)).await, Ok(Ok(())));
    if !ok {
        sock.clear();
        client.fail();
    }
    ok
}

/// Writes `out` to the terminal, waiting for it to take the bytes: at most the
/// stall timeout while serving (then the client is cut off, as a relayed client
/// that reads nothing), CLOSE_FLUSH_TIMEOUT while closing (then the rest is
/// dropped). A terminal that is gone detaches the connection.
async fn flush(
    session: &Session,
    client: &Rc<Peer>,
    held: &mut Option<Rc<Terminal>>,
    out: &mut BytesMut,
) {
    let Some(term) = held.clone() else {
        out.clear();
        return;
    };
    let limit = if client.phase() == Phase::Open {
        stall_timeout()
    } else {
        CLOSE_FLUSH_TIMEOUT
    };
    let deadline = TokioInstant::now() + limit;
    loop {
        if term.gone.get() || term.try_write(out).is_err() {
            term.gone.set(true);
            out.clear();
            detach_gone(session, client);
            return;
        }
        if out.is_empty() {
            return;
        }
        tokio::select! {
            r = term.fd.writable() => {
                if let Ok(mut g) = r {
                    g.clear_ready();
                }
            }
            () = sleep_until(deadline) => {
                out.clear();
                if client.phase() == Phase::Open {
                    client.cut_off(limit);
                }
                return;
            }
        }
    }
}

/// The terminal failed under a write (hung up): the connection detaches, as a
/// DETACH from the client would.
fn detach_gone(session: &Session, client: &Rc<Peer>) {
    if client.phase() != Phase::Open {
        return;
    }
    log!("connection {}: its terminal hung up: detached", client.id);
    let env = Env {
        draining: session.draining(),
        exited: session.exited().is_some(),
    };
    let outs = client.with_conn(|c| {
        c.handle(
            std::time::Instant::now(),
            Inbound::Strict(ClientFrame::Detach),
            env,
        )
    });
    for o in outs {
        crate::conn::carry_out(session, client, o);
    }
}

/// Gives the terminal up: the epilogue, best effort and without blocking (every
/// mode the session may have set undone, `latch_screen::RESTORE_MODES`, then a
/// fresh line), then its descriptor is closed. The client restores its termios.
fn release(client: &Peer, held: &mut Option<Rc<Terminal>>, out: &mut BytesMut) {
    out.clear();
    let taken = client.tty.term.borrow_mut().take();
    held.take();
    client.tty.released.notify_waiters();
    let Some(term) = taken else { return };
    if !term.gone.get() {
        let mut tail = BytesMut::from(latch_screen::RESTORE_MODES);
        if term.last_byte.get() != Some(b'\n') {
            tail.extend_from_slice(b"\r\n");
        }
        let _ = term.try_write(&mut tail);
    }
    // The last reference: the key reader's went with `released` (SPEC §5.7: no
    // descriptor of the user's terminal outlives the attachment).
    drop(term);
}
