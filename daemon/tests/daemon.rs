//! End-to-end tests of `latch_daemon::run` against a real PTY and socket.
//!
//! Each test forks a child that calls `run` with stdout on a pipe (the readiness
//! pipe) and stderr on a log file, as the client would spawn it; the parent reads the
//! readiness line, then speaks the strict protocol over a plain `UnixStream`. Tests
//! wait for frames (with a read timeout), never sleep, and kill their daemon on
//! `Drop`. They take a process-wide lock so that no other test thread is inside std
//! or libc when one of them forks.

use latch_wire::{AttachRequest, PeekRequest, Size};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use bytes::BytesMut;
use latch_registry::{CreateSpec, ReadyMessage, Registry};
use latch_wire::client::ClientHandshake;
use latch_wire::framing::MAGIC;
use latch_wire::legacy::{decode_packet, LegacyClientFrame, LegacyServerFrame};
use latch_wire::{
    ClientCodec, ClientFrame, ErrorCode, ExitStatus, Incarnation, LegacyPolicy, ServerFrame,
    SessionId,
};
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult, Pid};

const READ_TIMEOUT: Duration = Duration::from_secs(10);

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn spec(id: &str, command: &[&str]) -> CreateSpec {
    let mut env = BTreeMap::new();
    env.insert(
        "PATH".to_owned(),
        std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into()),
    );
    env.insert("TERM".to_owned(), "xterm".to_owned());
    env.insert("HOME".to_owned(), "/".to_owned());
    CreateSpec {
        id: SessionId::new(id).unwrap(),
        display_name: None,
        command: command.iter().map(|s| (*s).to_owned()).collect(),
        cwd: "/".into(),
        env,
        rows: 24,
        cols: 80,
        tags: BTreeMap::new(),
        legacy_policy: LegacyPolicy::Observe,
        scrollback: 1000,
        owner: None,
        shell_integration: Default::default(),
        supervision: Default::default(),
        cast: None,
    }
}

/// A forked daemon; killed and reaped on drop.
struct Daemon {
    pid: Pid,
    root: PathBuf,
    id: SessionId,
    ready: ReadyMessage,
    exit_code: Option<i32>,
    _tmp: tempfile::TempDir,
    _serial: MutexGuard<'static, ()>,
}

/// Forks a daemon for `spec` in a fresh root and waits for its readiness line.
fn start(spec: CreateSpec) -> Daemon {
    let serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    start_in(serial, tmp, root, spec)
}

fn start_in(
    serial: MutexGuard<'static, ()>,
    tmp: tempfile::TempDir,
    root: PathBuf,
    spec: CreateSpec,
) -> Daemon {
    let id = spec.id.clone();
    let pid = spawn_daemon(tmp.path(), &root, spec);
    let ready = read_ready(pid.1);
    Daemon {
        pid: pid.0,
        root,
        id,
        ready,
        exit_code: None,
        _tmp: tmp,
        _serial: serial,
    }
}

fn spawn_daemon(tmp: &Path, root: &Path, spec: CreateSpec) -> (Pid, File) {
    let (r, w) = nix::unistd::pipe().unwrap();
    let log = File::options()
        .create(true)
        .append(true)
        .open(tmp.join("daemon.log"))
        .unwrap();
    let null = File::open("/dev/null").unwrap();
    let root = root.to_path_buf();
    // SAFETY: the other test threads are parked on SERIAL, so no lock in std or libc
    // is held by a thread that will not exist in the child. The child never returns
    // into the test harness: it ends with _exit.
    match unsafe { fork() }.unwrap() {
        ForkResult::Child => {
            let _ = nix::unistd::dup2_stdin(&null);
            let _ = nix::unistd::dup2_stdout(&w);
            let _ = nix::unistd::dup2_stderr(&log);
            drop((r, w, log, null));
            let _ = nix::unistd::setsid();
            let code =
                std::panic::catch_unwind(move || latch_daemon::run(root, spec)).unwrap_or(101);
            // SAFETY: ends the forked child without running the harness's exit path.
            unsafe { libc::_exit(code) }
        }
        ForkResult::Parent { child } => (child, File::from(r)),
    }
}

fn read_ready(pipe: File) -> ReadyMessage {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(pipe).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(READ_TIMEOUT).expect("no readiness line");
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("bad readiness line {line:?}: {e}"))
}

impl Daemon {
    fn incarnation(&self) -> Incarnation {
        match &self.ready {
            ReadyMessage::Ready { incarnation, .. } => *incarnation,
            other => panic!("daemon not ready: {other:?}"),
        }
    }

    fn socket(&self) -> PathBuf {
        self.root.join(format!("{}.sock", self.id))
    }

    fn connect(&self) -> Conn {
        Conn::connect(&self.socket())
    }

    /// A negotiated and bound connection.
    fn bound(&self) -> Conn {
        let mut c = self.connect();
        c.hello();
        match c.bind(self.id.clone(), self.incarnation()) {
            ServerFrame::Bound { incarnation, .. } => assert_eq!(incarnation, self.incarnation()),
            other => panic!("bind refused: {other:?}"),
        }
        c
    }

    /// Waits for the daemon process to end; returns its exit code.
    fn wait(&mut self) -> i32 {
        if let Some(code) = self.exit_code {
            return code;
        }
        let code = match waitpid(self.pid, None).unwrap() {
            WaitStatus::Exited(_, code) => code,
            other => panic!("daemon ended oddly: {other:?}"),
        };
        self.exit_code = Some(code);
        code
    }

    fn record(&self) -> latch_registry::Record {
        Registry::open(&self.root)
            .unwrap()
            .read_record(&self.id)
            .unwrap()
            .expect("record exists")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.exit_code.is_some() {
            return;
        }
        // SIGTERM: the daemon hangs its program up and exits with it.
        let _ = kill(self.pid, Signal::SIGTERM);
        // Wait for the exit through a pidfd (readable once the process has exited).
        let exited = u32::try_from(self.pid.as_raw())
            .ok()
            .and_then(|p| latch_registry::PidFd::open(p).ok())
            .is_none_or(|fd| fd.wait_exit(Duration::from_secs(3)));
        if !exited {
            let _ = kill(self.pid, Signal::SIGKILL);
        }
        let _ = waitpid(self.pid, None);
    }
}

/// A strict client over a blocking socket.
struct Conn {
    stream: UnixStream,
    codec: ClientCodec,
    buf: BytesMut,
}

impl Conn {
    fn connect(path: &Path) -> Self {
        let stream = UnixStream::connect(path).unwrap();
        stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
        Self {
            stream,
            codec: ClientCodec::default(),
            buf: BytesMut::new(),
        }
    }

    fn send(&mut self, frame: ClientFrame) {
        let mut out = BytesMut::new();
        self.codec.encode_client(&frame, &mut out).unwrap();
        self.stream.write_all(&out).unwrap();
    }

    /// The next frame; `None` at EOF.
    fn try_recv(&mut self) -> Option<ServerFrame> {
        loop {
            if let Some(f) = self.codec.decode_server(&mut self.buf).unwrap() {
                return Some(f);
            }
            let mut chunk = [0u8; 64 * 1024];
            match self.stream.read(&mut chunk) {
                Ok(0) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return None,
                Err(e) => panic!("no frame in time: {e}"),
            }
        }
    }

    fn recv(&mut self) -> ServerFrame {
        self.try_recv().expect("connection closed")
    }

    /// Negotiates version 2: these tests speak the frames of version 2, which a
    /// daemon serves unchanged to a version-2 client (SPEC.md §4.2); version 3's
    /// frames are tested in tests/turns.rs.
    fn hello(&mut self) {
        let hs = ClientHandshake::new(latch_wire::VersionRange { min: 2, max: 2 }, "daemon-test");
        self.send(hs.hello());
        let welcome = self.recv();
        hs.on_welcome(welcome).unwrap();
    }

    fn bind(&mut self, id: SessionId, incarnation: Incarnation) -> ServerFrame {
        self.send(ClientFrame::Bind { id, incarnation });
        self.recv()
    }

    fn status(&mut self) -> latch_wire::StatusReply {
        self.send(ClientFrame::Status);
        loop {
            if let ServerFrame::Status(s) = self.recv() {
                return *s;
            }
        }
    }

    fn peek_plain(&mut self) -> String {
        self.send(ClientFrame::Peek(PeekRequest {
            plain: true,
            full: false,
        }));
        loop {
            if let ServerFrame::Screen(b) = self.recv() {
                return String::from_utf8_lossy(&b).into_owned();
            }
        }
    }

    /// Attaches and returns the GEOMETRY and the SCREEN.
    fn attach(&mut self, rows: u16, cols: u16, read_only: bool) -> ((u16, u16), String) {
        self.send(ClientFrame::Attach(AttachRequest {
            rows,
            cols,
            read_only,
        }));
        let geometry = match self.recv() {
            ServerFrame::Geometry { rows, cols } => (rows, cols),
            other => panic!("expected GEOMETRY, got {other:?}"),
        };
        match self.recv() {
            ServerFrame::Screen(b) => (geometry, String::from_utf8_lossy(&b).into_owned()),
            other => panic!("expected SCREEN, got {other:?}"),
        }
    }

    /// Reads OUTPUT until the text seen (starting with `seen`) contains `needle`.
    fn output_until(&mut self, mut seen: String, needle: &str) -> String {
        while !seen.contains(needle) {
            match self.recv() {
                ServerFrame::Output(b) => seen.push_str(&String::from_utf8_lossy(&b)),
                ServerFrame::Geometry { .. } => {}
                other => panic!("waiting for {needle:?}, got {other:?} after {seen:?}"),
            }
        }
        seen
    }

    /// Reads until EXIT.
    fn exit_status(&mut self) -> ExitStatus {
        loop {
            match self.recv() {
                ServerFrame::Exit(s) => return s,
                ServerFrame::Output(_) | ServerFrame::Geometry { .. } => {}
                other => panic!("waiting for EXIT, got {other:?}"),
            }
        }
    }

    fn expect_error(&mut self, code: ErrorCode) {
        match self.recv() {
            ServerFrame::Error { code: got, .. } if got == code => {}
            other => panic!("expected {code}, got {other:?}"),
        }
    }

    fn expect_eof(&mut self) {
        if let Some(f) = self.try_recv() {
            panic!("expected the daemon to close, got {f:?}");
        }
    }
}

#[test]
fn peek_attach_and_input() {
    let d = start(spec("s1", &["sh", "-c", "echo hello; exec cat"]));
    let mut a = d.bound();
    let ((rows, cols), screen) = a.attach(24, 80, false);
    assert_eq!((rows, cols), (24, 80));
    a.output_until(screen, "hello");

    let mut p = d.bound();
    assert!(p.peek_plain().starts_with("hello"));

    a.send(ClientFrame::Input(bytes::Bytes::from_static(b"abc\n")));
    // The terminal echoes the line, then cat prints it.
    a.output_until(String::new(), "abc\r\nabc\r\n");
    assert!(p.peek_plain().contains("hello\nabc\nabc"));
}

#[test]
fn status_is_the_daemons_own_identity() {
    let d = start(spec("s1", &["cat"]));
    let mut c = d.connect();
    c.hello();
    // STATUS is legal before BIND.
    let s = c.status();
    let ReadyMessage::Ready {
        incarnation,
        daemon_pid,
        child_pid,
        created_at_ms,
    } = d.ready.clone()
    else {
        panic!("not ready")
    };
    assert_eq!(s.id, d.id);
    assert_eq!(s.incarnation, incarnation);
    assert_eq!(s.daemon_pid, daemon_pid);
    assert_eq!(i32::try_from(daemon_pid).unwrap(), d.pid.as_raw());
    assert_eq!(s.child_pid, child_pid);
    assert_eq!(s.created_at_ms, created_at_ms);
    assert_eq!((s.rows, s.cols), (24, 80));
    assert_eq!(s.exit, None);
    assert!(!s.draining);
    // The record agrees.
    let rec = d.record();
    assert_eq!(rec.incarnation, incarnation);
    assert_eq!(rec.child.pid, child_pid);
    assert_eq!(rec.daemon.pid, daemon_pid);
    // The socket is private.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(d.socket()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert_eq!(s.owner, None);
}

#[test]
fn status_carries_the_owner_from_memory_even_after_the_record_is_edited() {
    let mut sp = spec("s1", &["cat"]);
    sp.owner = Some(latch_wire::Owner::new("project-A").unwrap());
    let d = start(sp);
    // The record binds the owner: it verifies under the key.
    let rec = d.record();
    assert_eq!(rec.owner.as_ref().map(|o| o.as_str()), Some("project-A"));
    // Forge the file: the daemon never re-reads it, and the forgery is detected.
    let path = d.root.join("s1.json");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("project-A", "project-B")).unwrap();
    assert!(Registry::open(&d.root).unwrap().read_record(&d.id).is_err());
    let mut c = d.connect();
    c.hello();
    assert_eq!(
        c.status().owner.as_ref().map(|o| o.as_str()),
        Some("project-A")
    );
}

#[test]
fn effects_before_bind_are_refused_and_change_nothing() {
    let d = start(spec("s1", &["sh", "-c", "echo ready; exec cat"]));
    let mut watcher = d.bound();
    let (_, screen) = watcher.attach(24, 80, true);
    watcher.output_until(screen, "ready");
    let before = d.bound().peek_plain();

    let mut c = d.connect();
    c.hello();
    c.send(ClientFrame::Peek(PeekRequest {
        plain: true,
        full: false,
    }));
    c.expect_error(ErrorCode::NotBound);
    c.send(ClientFrame::Input(bytes::Bytes::from_static(b"evil\n")));
    c.expect_error(ErrorCode::NotBound);
    c.send(ClientFrame::Signal { signal: 9 });
    c.expect_error(ErrorCode::NotBound);
    // Refusals of single requests keep the connection usable.
    assert_eq!(c.status().incarnation, d.incarnation());

    // A BIND naming another creation of this id is refused, and the connection closed.
    let mut wrong = d.connect();
    wrong.hello();
    let other = Incarnation::from_parts([7; 16], [9; 16]);
    match wrong.bind(d.id.clone(), other) {
        ServerFrame::Error { code, .. } => assert_eq!(code, ErrorCode::IncarnationMismatch),
        f => panic!("expected incarnation-mismatch, got {f:?}"),
    }
    wrong.expect_eof();

    let mut wrong_id = d.connect();
    wrong_id.hello();
    match wrong_id.bind(SessionId::new("s2").unwrap(), d.incarnation()) {
        ServerFrame::Error { code, .. } => assert_eq!(code, ErrorCode::IdMismatch),
        f => panic!("expected id-mismatch, got {f:?}"),
    }
    wrong_id.expect_eof();

    // A marker through a bound connection proves the program is still reading; nothing
    // from the refused connections reached it.
    let mut b = d.bound();
    b.send(ClientFrame::Input(bytes::Bytes::from_static(b"marker\n")));
    let seen = watcher.output_until(String::new(), "marker\r\nmarker\r\n");
    assert!(!seen.contains("evil"), "{seen:?}");
    let after = b.peek_plain();
    assert_eq!(after, format!("{before}\nmarker\nmarker"));
    assert_eq!(
        b.status().exit,
        None,
        "the SIGNAL did not reach the program"
    );
}

#[test]
fn exit_code_is_recorded_and_socket_removed() {
    let mut d = start(spec("s1", &["sh", "-c", "read x; echo bye; exit 3"]));
    let mut a = d.bound();
    a.attach(24, 80, false);
    a.send(ClientFrame::Input(bytes::Bytes::from_static(b"go\n")));
    a.output_until(String::new(), "bye");
    assert_eq!(
        a.exit_status(),
        ExitStatus {
            code: Some(3),
            signal: None
        }
    );
    a.expect_eof();
    assert_eq!(d.wait(), 0);
    let rec = d.record();
    assert_eq!(rec.incarnation, d.incarnation());
    let exit = rec.exit.expect("exit recorded");
    assert_eq!((exit.code, exit.signal), (Some(3), None));
    assert!(!d.socket().exists(), "socket unlinked");
}

#[test]
fn signal_reaches_the_program_through_the_daemon() {
    let mut d = start(spec("s1", &["cat"]));
    let mut a = d.bound();
    a.attach(24, 80, false);
    let mut r = d.bound();
    r.attach(24, 80, true);
    // A read-only client may not signal.
    r.send(ClientFrame::Signal { signal: 15 });
    r.expect_error(ErrorCode::ForbiddenByPolicy);
    a.send(ClientFrame::Signal { signal: 15 });
    let want = ExitStatus {
        code: None,
        signal: Some(15),
    };
    assert_eq!(a.exit_status(), want);
    assert_eq!(r.exit_status(), want);
    assert_eq!(d.wait(), 0);
    let exit = d.record().exit.expect("exit recorded");
    assert_eq!((exit.code, exit.signal), (None, Some(15)));
}

#[test]
fn resize_follows_the_smallest_writer() {
    let d = start(spec(
        "s1",
        &["sh", "-c", "while read x; do stty size; done"],
    ));
    let mut a = d.bound();
    assert_eq!(a.attach(30, 100, false).0, (30, 100));
    // A read-only client never shrinks the terminal.
    let mut r = d.bound();
    assert_eq!(r.attach(10, 10, true).0, (30, 100));
    // A second writer does.
    let mut b = d.bound();
    assert_eq!(b.attach(40, 90, false).0, (30, 90));
    match a.recv() {
        ServerFrame::Geometry { rows, cols } => assert_eq!((rows, cols), (30, 90)),
        f => panic!("expected GEOMETRY, got {f:?}"),
    }
    b.send(ClientFrame::Resize(Size { rows: 20, cols: 70 }));
    match a.recv() {
        ServerFrame::Geometry { rows, cols } => assert_eq!((rows, cols), (20, 70)),
        f => panic!("expected GEOMETRY, got {f:?}"),
    }
    a.send(ClientFrame::Input(bytes::Bytes::from_static(b"\n")));
    a.output_until(String::new(), "20 70");
    // The smaller writer leaves: back to the remaining writer's size.
    b.send(ClientFrame::Detach);
    loop {
        match b.recv() {
            ServerFrame::Detached => break,
            ServerFrame::Geometry { .. } | ServerFrame::Output(_) => {}
            f => panic!("expected DETACHED, got {f:?}"),
        }
    }
    b.expect_eof();
    loop {
        match a.recv() {
            ServerFrame::Geometry { rows, cols } => {
                assert_eq!((rows, cols), (30, 100));
                break;
            }
            ServerFrame::Output(_) => {}
            f => panic!("expected GEOMETRY, got {f:?}"),
        }
    }
    // An unattached bound connection sets the size directly.
    let mut c = d.bound();
    c.send(ClientFrame::Resize(Size { rows: 5, cols: 50 }));
    let s = c.status();
    assert_eq!((s.rows, s.cols, s.writers, s.readers), (5, 50, 1, 1));
}

#[test]
fn bad_bytes_close_only_that_connection() {
    let d = start(spec("s1", &["cat"]));
    let mut good = d.bound();
    good.attach(24, 80, false);

    // An unknown variant: a typed error, then close.
    let mut s = UnixStream::connect(d.socket()).unwrap();
    s.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
    s.write_all(&MAGIC).unwrap();
    s.write_all(&[0, 0, 0, 1, 0x7f]).unwrap();
    let mut c = Conn {
        stream: s,
        codec: ClientCodec::default(),
        buf: BytesMut::new(),
    };
    c.expect_error(ErrorCode::Malformed);
    c.expect_eof();

    // A declared length over the maximum: frame-too-large, before any allocation.
    let mut s = UnixStream::connect(d.socket()).unwrap();
    s.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
    s.write_all(&MAGIC).unwrap();
    s.write_all(&(1u32 << 30).to_be_bytes()).unwrap();
    let mut c = Conn {
        stream: s,
        codec: ClientCodec::default(),
        buf: BytesMut::new(),
    };
    c.expect_error(ErrorCode::FrameTooLarge);
    c.expect_eof();

    // Neither latch nor legacy: closed without a reply.
    let mut s = UnixStream::connect(d.socket()).unwrap();
    s.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert!(rest.is_empty(), "{rest:?}");

    // A frame before HELLO.
    let mut c = d.connect();
    c.send(ClientFrame::Status);
    c.expect_error(ErrorCode::NotNegotiated);
    c.expect_eof();

    // Everyone else carries on.
    good.send(ClientFrame::Input(bytes::Bytes::from_static(b"still\n")));
    good.output_until(String::new(), "still\r\nstill");
}

#[test]
fn legacy_client_observes_under_the_default_policy() {
    let d = start(spec("s1", &["sh", "-c", "echo legacy-ok; exec cat"]));
    let mut w = d.bound();
    let (_, screen) = w.attach(24, 80, false);
    w.output_until(screen, "legacy-ok");

    let s = UnixStream::connect(d.socket()).unwrap();
    s.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
    let mut legacy = LegacyConn {
        stream: s,
        buf: BytesMut::new(),
    };
    legacy.send(LegacyClientFrame::Status);
    let LegacyServerFrame::Status(json) = legacy.recv() else {
        panic!("expected STATUS")
    };
    let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
    assert_eq!(v["name"], "s1");
    assert_eq!(v["incarnation"], d.incarnation().to_string());
    assert_eq!(v["terminal"]["rows"], 24);
    assert_eq!(v["terminal"]["cols"], 80);
    assert_eq!(v["process"]["alive"], true);
    assert_eq!(v["clients"]["attached"], 1);
    assert_eq!(v["legacyPolicy"], "observe");
    assert!(v["createdAt"].as_str().unwrap().ends_with('Z'));

    // Input from a legacy client is dropped under `observe`.
    legacy.send(LegacyClientFrame::Data(bytes::Bytes::from_static(
        b"legacy-evil\n",
    )));
    // PEEK subscribes read-only (SPEC.md §7): GEOMETRY, SCREEN, then output, and
    // it does not count as a writer.
    legacy.send(LegacyClientFrame::Peek {
        plain: true,
        full: false,
    });
    assert!(matches!(
        legacy.recv(),
        LegacyServerFrame::Geometry { rows: 24, cols: 80 }
    ));
    let LegacyServerFrame::Screen(screen) = legacy.recv() else {
        panic!("expected SCREEN")
    };
    assert!(String::from_utf8_lossy(&screen).contains("legacy-ok"));
    w.send(ClientFrame::Input(bytes::Bytes::from_static(b"seen\n")));
    let mut text = String::new();
    while !text.contains("seen\r\nseen") {
        match legacy.recv() {
            LegacyServerFrame::Data(b) => text.push_str(&String::from_utf8_lossy(&b)),
            f => panic!("expected DATA, got {f:?}"),
        }
    }
    assert!(!text.contains("legacy-evil"));
    let s = d.bound().status();
    assert_eq!((s.writers, s.readers), (1, 1));
}

struct LegacyConn {
    stream: UnixStream,
    buf: BytesMut,
}

impl LegacyConn {
    fn send(&mut self, f: LegacyClientFrame) {
        let mut out = BytesMut::new();
        f.encode(&mut out).unwrap();
        self.stream.write_all(&out).unwrap();
    }

    fn recv(&mut self) -> LegacyServerFrame {
        loop {
            if let Some(p) = decode_packet(&mut self.buf, 32 << 20).unwrap() {
                return LegacyServerFrame::from_packet(p).expect("a server packet");
            }
            let mut chunk = [0u8; 16 * 1024];
            let n = self.stream.read(&mut chunk).expect("no packet in time");
            assert!(n > 0, "legacy connection closed");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

#[test]
fn creation_failures_are_reported_and_leave_nothing() {
    // A program that does not exist.
    let serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let (pid, pipe) = spawn_daemon(tmp.path(), &root, spec("s1", &["/nonexistent/program"]));
    match read_ready(pipe) {
        ReadyMessage::Failed { kind, message } => {
            assert_eq!(kind, latch_registry::spec::FailureKind::Spawn);
            assert!(message.contains("/nonexistent/program"), "{message}");
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    assert!(matches!(waitpid(pid, None), Ok(WaitStatus::Exited(_, c)) if c != 0));
    assert!(!root.join("s1.sock").exists());
    assert!(!root.join("s1.json").exists());

    // A working directory that does not exist.
    let mut bad_cwd = spec("s1", &["cat"]);
    bad_cwd.cwd = "/nonexistent-dir".into();
    let (pid, pipe) = spawn_daemon(tmp.path(), &root, bad_cwd);
    match read_ready(pipe) {
        ReadyMessage::Failed { kind, message } => {
            assert_eq!(kind, latch_registry::spec::FailureKind::Spawn);
            assert!(message.contains("/nonexistent-dir"), "{message}");
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    let _ = waitpid(pid, None);

    // An id that exists is refused, and the existing session is untouched.
    let d = start_in(serial, tmp, root.clone(), spec("s1", &["cat"]));
    let (pid, pipe) = spawn_daemon(d._tmp.path(), &root, spec("s1", &["cat"]));
    match read_ready(pipe) {
        ReadyMessage::Failed { kind, message } => {
            assert_eq!(kind, latch_registry::spec::FailureKind::Exists);
            assert!(message.contains("latch rm"), "{message}");
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    let _ = waitpid(pid, None);
    assert_eq!(d.bound().status().incarnation, d.incarnation());
    assert_eq!(d.record().incarnation, d.incarnation());
}

#[test]
fn sigterm_hangs_the_program_up_and_records_it() {
    let mut d = start(spec("s1", &["cat"]));
    let mut a = d.bound();
    a.attach(24, 80, false);
    kill(d.pid, Signal::SIGTERM).unwrap();
    assert_eq!(
        a.exit_status(),
        ExitStatus {
            code: None,
            signal: Some(libc::SIGHUP)
        }
    );
    assert_eq!(d.wait(), 0);
    let exit = d.record().exit.expect("exit recorded");
    assert_eq!(exit.signal, Some(libc::SIGHUP));
    assert!(!d.socket().exists());
}

#[test]
fn a_stalled_client_is_resynchronised_and_others_carry_on() {
    // `read` waits for the go; then a flood of output.
    let mut s = spec("s1", &["sh", "-c", "read x; exec cat /dev/zero"]);
    s.scrollback = 0;
    let d = start(s);
    // The stalled client attaches and does not read for now.
    let mut stalled = d.bound();
    stalled.attach(24, 80, true);
    let mut reader = d.bound();
    reader.attach(24, 80, false);
    reader.send(ClientFrame::Input(bytes::Bytes::from_static(b"go\n")));
    let limit = latch_wire::limits::CLIENT_QUEUE_BYTES;
    // The reader keeps receiving well past the point where the stalled client fell
    // behind.
    let mut received = 0usize;
    while received < 2 * limit {
        match reader.recv() {
            ServerFrame::Output(b) => received += b.len(),
            ServerFrame::Geometry { .. } => {}
            f => panic!("unexpected {f:?}"),
        }
    }
    // The stalled client is still attached: falling behind never disconnects.
    let mut probe = d.bound();
    let status = probe.status();
    assert_eq!(
        (status.writers, status.readers),
        (1, 1),
        "stalled reader must stay attached"
    );
    // When it reads again it finds at most its bound of old output, then a fresh
    // GEOMETRY + SCREEN, then live output again.
    let mut seen = 0usize;
    loop {
        match stalled.recv() {
            ServerFrame::Output(b) => seen += b.len(),
            ServerFrame::Geometry { .. } => break,
            f => panic!("unexpected {f:?}"),
        }
    }
    assert!(
        matches!(stalled.recv(), ServerFrame::Screen(_)),
        "a fresh screen follows the geometry"
    );
    assert!(matches!(stalled.recv(), ServerFrame::Output(_)));
    assert!(
        seen < limit + 4 * latch_wire::limits::MAX_OUTPUT_CHUNK + (1 << 20),
        "{seen}"
    );
    probe.send(ClientFrame::Signal { signal: 9 });
}

#[test]
fn connections_are_bounded() {
    let d = start(spec("s1", &["cat"]));
    let max = latch_wire::limits::MAX_CONNECTIONS;
    // Each connection has been served a WELCOME, so the daemon counts all of them.
    let mut held: Vec<Conn> = (0..max)
        .map(|_| {
            let mut c = d.connect();
            c.hello();
            c
        })
        .collect();
    let mut over = d.connect();
    over.expect_error(ErrorCode::TooManyConnections);
    over.expect_eof();
    // One leaves; a newcomer is served again.
    drop(held.pop());
    let mut again = loop {
        let mut c = d.connect();
        c.send(
            ClientHandshake::new(latch_wire::VersionRange { min: 2, max: 2 }, "daemon-test")
                .hello(),
        );
        match c.recv() {
            ServerFrame::Welcome { .. } => break c,
            // The daemon may not have noticed the departure yet.
            ServerFrame::Error {
                code: ErrorCode::TooManyConnections,
                ..
            } => continue,
            f => panic!("unexpected {f:?}"),
        }
    };
    assert_eq!(again.status().incarnation, d.incarnation());
}

#[test]
fn another_uid_is_refused_before_a_byte_is_read() {
    use std::os::unix::fs::PermissionsExt;
    let d = start(spec("s1", &["cat"]));
    // Let uid 65534 reach the socket at all, so that only the daemon's check stands.
    std::fs::set_permissions(&d.root, std::fs::Permissions::from_mode(0o711)).unwrap();
    std::fs::set_permissions(d.socket(), std::fs::Permissions::from_mode(0o666)).unwrap();
    let socket = d.socket();
    // SAFETY: as in spawn_daemon; the child only makes syscalls and ends with _exit.
    match unsafe { fork() }.unwrap() {
        ForkResult::Child => {
            let outcome = (|| -> Result<(), String> {
                nix::unistd::setgid(nix::unistd::Gid::from_raw(65534))
                    .map_err(|e| e.to_string())?;
                nix::unistd::setuid(nix::unistd::Uid::from_raw(65534))
                    .map_err(|e| e.to_string())?;
                let mut s = UnixStream::connect(&socket).map_err(|e| e.to_string())?;
                s.set_read_timeout(Some(READ_TIMEOUT))
                    .map_err(|e| e.to_string())?;
                let mut hello = BytesMut::new();
                ClientCodec::default()
                    .encode_client(&ClientHandshake::default().hello(), &mut hello)
                    .map_err(|e| e.to_string())?;
                let _ = s.write_all(&hello);
                let mut got = Vec::new();
                match s.read_to_end(&mut got) {
                    Ok(_) if got.is_empty() => Ok(()),
                    Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => Ok(()),
                    other => Err(format!("daemon answered another uid: {other:?} {got:?}")),
                }
            })();
            let code = match outcome {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("{e}");
                    1
                }
            };
            // SAFETY: ends the forked child without running the harness's exit path.
            unsafe { libc::_exit(code) }
        }
        ForkResult::Parent { child } => {
            assert!(matches!(waitpid(child, None), Ok(WaitStatus::Exited(_, 0))));
        }
    }
    // The owner is still served.
    assert_eq!(d.bound().status().incarnation, d.incarnation());
}

#[test]
fn legacy_full_policy_may_type() {
    let mut s = spec("s1", &["cat"]);
    s.legacy_policy = LegacyPolicy::Full;
    let d = start(s);
    let mut watcher = d.bound();
    watcher.attach(24, 80, true);
    let stream = UnixStream::connect(d.socket()).unwrap();
    stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
    let mut legacy = LegacyConn {
        stream,
        buf: BytesMut::new(),
    };
    legacy.send(LegacyClientFrame::Data(bytes::Bytes::from_static(
        b"typed\n",
    )));
    watcher.output_until(String::new(), "typed\r\ntyped");
}

#[test]
fn a_daemon_told_to_stop_keeps_serving_a_program_that_ignores_hangup() {
    let mut d = start(spec(
        "s1",
        &["sh", "-c", "trap '' HUP; echo armed; exec cat"],
    ));
    let mut a = d.bound();
    let (_, screen) = a.attach(24, 80, false);
    a.output_until(screen, "armed");
    kill(d.pid, Signal::SIGTERM).unwrap();
    // Draining: new binds and effects are refused, STATUS still answers, and the
    // program keeps running.
    let mut probe = d.connect();
    probe.hello();
    loop {
        if probe.status().draining {
            break;
        }
    }
    match probe.bind(d.id.clone(), d.incarnation()) {
        ServerFrame::Error { code, .. } => assert_eq!(code, ErrorCode::Draining),
        f => panic!("expected draining, got {f:?}"),
    }
    a.send(ClientFrame::Input(bytes::Bytes::from_static(b"x\n")));
    a.expect_error(ErrorCode::Draining);
    assert_eq!(probe.status().exit, None);
    // The program ends by other means; the daemon records it and goes.
    let ReadyMessage::Ready { child_pid, .. } = d.ready else {
        panic!("not ready")
    };
    kill(
        Pid::from_raw(i32::try_from(child_pid).unwrap()),
        Signal::SIGKILL,
    )
    .unwrap();
    assert_eq!(a.exit_status().signal, Some(libc::SIGKILL));
    assert_eq!(d.wait(), 0);
    assert_eq!(
        d.record().exit.expect("exit recorded").signal,
        Some(libc::SIGKILL)
    );
}
