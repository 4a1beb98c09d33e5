//! End to end: clients of the older `pty` framing under each legacy policy, and
//! downgrade protection against daemons that do not answer latch protocol 2
//! (SPEC.md §11 I10; SPEC.md §5.1, §6, §7).
//!
//! The legacy client here is written from SPEC.md §7 alone: it does not
//! use `latch_wire::legacy`. Packets are `[type u8][length u32 BE][payload]`, encoded and
//! parsed by hand over a blocking `UnixStream` with read timeouts. Nothing sleeps: every
//! wait is a socket read (with a timeout) or `latch peek --wait`.
//!
//! The fake daemons (downgrade tests) play a strict daemon, so they may use
//! `latch_wire`'s strict frame encoder and decoder.

mod support;

use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::Value;
use support::Reg;

/// Longest any single wait may take before the test fails.
const TIMEOUT: Duration = Duration::from_secs(10);

/// A program that answers each input line with the line and the terminal size it sees.
const LOOP: &[&str] = &[
    "sh",
    "-c",
    "echo READY; while read x; do echo \"GOT:$x SIZE:$(stty size)\"; done",
];

// ---------------------------------------------------------------------------------
// A legacy client, from SPEC.md §7 only.
// ---------------------------------------------------------------------------------

/// Legacy packet types (SPEC.md §7), written out rather than imported on purpose.
const DATA: u8 = 0;
const ATTACH: u8 = 1;
const DETACH: u8 = 2;
const RESIZE: u8 = 3;
const EXIT: u8 = 4;
const SCREEN: u8 = 5;
const PEEK: u8 = 6;
const STATUS: u8 = 7;
const GEOMETRY: u8 = 10;

/// The daemon's default legacy packet cap (SPEC.md §8, LEGACY_DEFAULT_CAP).
const LEGACY_CAP: u32 = 1024 * 1024;

const ESC: u8 = 0x1b;

/// One legacy packet as received.
#[derive(Debug)]
struct Packet {
    /// The five header bytes exactly as they arrived.
    header: [u8; 5],
    payload: Vec<u8>,
}

impl Packet {
    fn kind(&self) -> u8 {
        self.header[0]
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.payload).into_owned()
    }
}

/// What the next read brought.
#[derive(Debug)]
enum Got {
    Packet(Packet),
    /// EOF before any byte of a packet.
    Closed,
    /// ECONNRESET before any byte of a packet (the daemon closed with our bytes unread).
    Reset,
}

/// `[rows u16 BE][cols u16 BE]`.
fn size_payload(rows: u16, cols: u16) -> [u8; 4] {
    let r = rows.to_be_bytes();
    let c = cols.to_be_bytes();
    [r[0], r[1], c[0], c[1]]
}

/// A legacy client connection.
struct Legacy {
    stream: UnixStream,
}

impl Legacy {
    fn connect(reg: &Reg, id: &str) -> Self {
        let stream = UnixStream::connect(sock(reg, id))
            .unwrap_or_else(|e| panic!("connect to {id}'s socket: {e}"));
        stream.set_read_timeout(Some(TIMEOUT)).unwrap();
        stream.set_write_timeout(Some(TIMEOUT)).unwrap();
        Self { stream }
    }

    /// Writes raw bytes; the error is returned, not unwrapped (a daemon that closed the
    /// connection makes a later write fail).
    fn write_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// `[kind][len u32 BE][payload]`.
    fn encode(kind: u8, payload: &[u8]) -> Vec<u8> {
        let len = u32::try_from(payload.len()).expect("payload fits u32");
        let mut out = Vec::with_capacity(5 + payload.len());
        out.push(kind);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(payload);
        out
    }

    /// Sends one packet; panics if the daemon is gone.
    #[track_caller]
    fn send(&mut self, kind: u8, payload: &[u8]) {
        self.write_raw(&Self::encode(kind, payload))
            .unwrap_or_else(|e| panic!("sending packet type {kind}: {e}"));
    }

    /// Sends one packet, tolerating a daemon that already closed the connection.
    fn try_send(&mut self, kind: u8, payload: &[u8]) {
        let _ = self.write_raw(&Self::encode(kind, payload));
    }

    /// Fills `buf`. `Ok(Some(..))` when full; `Ok(None)` on EOF/reset before the first
    /// byte (as `Got`); panics on a timeout or on EOF part-way.
    fn fill(&mut self, buf: &mut [u8]) -> Option<Got> {
        let mut at = 0;
        while at < buf.len() {
            match self.stream.read(&mut buf[at..]) {
                Ok(0) if at == 0 => return Some(Got::Closed),
                Ok(0) => panic!(
                    "connection closed {at} bytes into a {}-byte read",
                    buf.len()
                ),
                Ok(n) => at += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::ConnectionReset && at == 0 => {
                    return Some(Got::Reset)
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    panic!("no answer within {TIMEOUT:?} ({at} of {} bytes)", buf.len())
                }
                Err(e) => panic!("read failed: {e}"),
            }
        }
        None
    }

    /// The next packet, or how the connection ended.
    fn next(&mut self) -> Got {
        let mut header = [0u8; 5];
        if let Some(end) = self.fill(&mut header) {
            return end;
        }
        let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]);
        // A sane daemon never sends more than 16 MiB (SPEC.md §8); a larger length
        // means the header is not big-endian or the stream is out of step.
        assert!(
            len <= 16 * 1024 * 1024,
            "implausible length in header {header:?}"
        );
        let mut payload = vec![0u8; len as usize];
        if let Some(end) = self.fill(&mut payload) {
            panic!("connection ended ({end:?}) inside a packet with header {header:?}");
        }
        Got::Packet(Packet { header, payload })
    }

    /// The next packet; panics if the connection ended.
    #[track_caller]
    fn packet(&mut self, what: &str) -> Packet {
        match self.next() {
            Got::Packet(p) => p,
            end => panic!("expected {what}, but the connection ended: {end:?}"),
        }
    }

    /// Asserts that the daemon closed the connection without sending a single byte.
    #[track_caller]
    fn assert_closed_without_reply(&mut self, context: &str) {
        let mut byte = [0u8; 1];
        match self.stream.read(&mut byte) {
            Ok(0) => {}
            Ok(_) => panic!(
                "{context}: the daemon replied (first byte {:#04x})",
                byte[0]
            ),
            Err(e) => panic!("{context}: expected EOF with zero bytes, got {e}"),
        }
    }

    /// STATUS: one STATUS packet holding a JSON object.
    #[track_caller]
    fn status(&mut self) -> Value {
        self.send(STATUS, &[]);
        let p = self.packet("STATUS");
        assert_eq!(p.kind(), STATUS, "expected STATUS, got {p:?}");
        let v: Value = serde_json::from_slice(&p.payload)
            .unwrap_or_else(|e| panic!("STATUS payload is not JSON ({e}): {:?}", p.text()));
        assert!(v.is_object(), "STATUS is not an object: {v}");
        v
    }

    /// PEEK with `flags` on this connection (SPEC.md §7, a read-only subscription):
    /// GEOMETRY, then one SCREEN, which is returned; DATA and EXIT follow later.
    #[track_caller]
    fn peek(&mut self, flags: u8) -> Vec<u8> {
        self.send(PEEK, &[flags]);
        let g = self.packet("GEOMETRY");
        assert_eq!(
            g.kind(),
            GEOMETRY,
            "PEEK {flags:#04b}: expected GEOMETRY, got {g:?}"
        );
        let p = self.packet("SCREEN");
        assert_eq!(
            p.header[0], SCREEN,
            "PEEK {flags:#04b}: expected SCREEN, got {p:?}"
        );
        let len = u32::try_from(p.payload.len()).unwrap();
        assert_eq!(p.header[1..], len.to_be_bytes(), "length is big-endian");
        p.payload
    }

    /// ATTACH with a size: checks that GEOMETRY (byte-exact, `want` rows and cols) and
    /// then one SCREEN arrive; returns the SCREEN.
    #[track_caller]
    fn attach(&mut self, rows: u16, cols: u16, want: (u16, u16)) -> String {
        self.send(ATTACH, &size_payload(rows, cols));
        self.expect_geometry(want);
        let screen = self.packet("SCREEN after GEOMETRY");
        assert_eq!(screen.kind(), SCREEN, "expected SCREEN, got {screen:?}");
        screen.text()
    }

    #[track_caller]
    fn expect_geometry(&mut self, (rows, cols): (u16, u16)) {
        let g = self.packet("GEOMETRY");
        let mut want = vec![GEOMETRY, 0, 0, 0, 4];
        want.extend_from_slice(&size_payload(rows, cols));
        let mut got = g.header.to_vec();
        got.extend_from_slice(&g.payload);
        assert_eq!(got, want, "GEOMETRY {rows}x{cols}, byte-exact");
    }

    /// Reads DATA packets until their concatenation contains `text`; any other packet
    /// type fails the test.
    #[track_caller]
    fn data_until(&mut self, text: &str) -> String {
        let mut seen = Vec::new();
        loop {
            let p = self.packet(&format!("DATA containing {text:?}"));
            assert_eq!(
                p.kind(),
                DATA,
                "only DATA may follow the SCREEN here; got {p:?} after {:?}",
                String::from_utf8_lossy(&seen)
            );
            seen.extend_from_slice(&p.payload);
            let s = String::from_utf8_lossy(&seen);
            if s.contains(text) {
                return s.into_owned();
            }
        }
    }
}

/// `terminal.rows` and `terminal.cols` of a legacy STATUS (SPEC.md §7).
#[track_caller]
fn rows_cols(v: &Value) -> (u64, u64) {
    (
        v["terminal"]["rows"]
            .as_u64()
            .unwrap_or_else(|| panic!("{v}")),
        v["terminal"]["cols"]
            .as_u64()
            .unwrap_or_else(|| panic!("{v}")),
    )
}

fn sock(reg: &Reg, id: &str) -> PathBuf {
    reg.path(&format!("{id}.sock"))
}

// ---------------------------------------------------------------------------------
// Helpers over the CLI.
// ---------------------------------------------------------------------------------

/// `latch new -d --json --id ID --legacy POLICY -- CMD...`; returns the incarnation.
#[track_caller]
fn new_session(reg: &Reg, id: &str, policy: &str, cmd: &[&str]) -> String {
    let mut args = vec!["new", "-d", "--json", "--id", id, "--legacy", policy, "--"];
    args.extend_from_slice(cmd);
    let r = reg.run(&args);
    assert_eq!(r.code, 0, "{r:?}");
    r.json()["incarnation"].as_str().unwrap().to_owned()
}

/// The daemon's view through the strict client: `latch status ID --json`.
#[track_caller]
fn strict_status(reg: &Reg, id: &str) -> Value {
    let r = reg.run(&["status", id, "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    r.json()["daemon"].clone()
}

#[track_caller]
fn pty_size(reg: &Reg, id: &str) -> (u64, u64) {
    let d = strict_status(reg, id);
    (d["rows"].as_u64().unwrap(), d["cols"].as_u64().unwrap())
}

/// Sends a line through the strict client and waits until the program has answered
/// it; returns the answer line (`GOT:<text> SIZE:<rows> <cols>`). Input reaches the
/// PTY in the order the daemon handled it, so anything a legacy connection managed
/// to queue before this call would have been answered first.
#[track_caller]
fn strict_round_trip(reg: &Reg, id: &str, text: &str) -> (String, String) {
    reg.run(&["send", id, &format!("{text}\n")]).ok();
    let screen = reg.wait_for(id, &format!("GOT:{text} SIZE:"));
    let line = screen
        .lines()
        .find(|l| l.starts_with(&format!("GOT:{text} ")))
        .unwrap_or_else(|| panic!("no answer line for {text:?} in {screen:?}"))
        .trim_end()
        .to_owned();
    (line, screen)
}

fn pid_of(v: &Value) -> u32 {
    u32::try_from(v.as_u64().expect("a pid")).expect("pid fits u32")
}

// ---------------------------------------------------------------------------------
// 2. What observe and full serve, byte-exact.
// ---------------------------------------------------------------------------------

/// ATTACH gets GEOMETRY, one SCREEN, DATA after the cut, and EXIT (i32 BE), then the
/// daemon closes.
fn attach_stream_is_byte_exact(policy: &str) {
    let reg = Reg::new();
    let id = format!("att-{policy}");
    new_session(
        &reg,
        &id,
        policy,
        &["sh", "-c", "echo READY; read x; echo BYE-$x; exit 7"],
    );
    reg.wait_for(&id, "READY");
    assert_eq!(pty_size(&reg, &id), (24, 80));
    let full = policy == "full";

    let mut c = Legacy::connect(&reg, &id);
    // A read-write legacy client's size sets the PTY (full); a read-only one does not.
    let want = if full { (30, 100) } else { (24, 80) };
    let screen = c.attach(30, 100, want);
    assert!(
        screen.contains("READY"),
        "SCREEN lacks earlier output: {screen:?}"
    );
    assert_eq!(pty_size(&reg, &id), (u64::from(want.0), u64::from(want.1)));

    if full {
        c.send(DATA, b"go\n");
    } else {
        reg.run(&["send", &id, "go\n"]).ok();
    }
    let out = c.data_until("BYE-go");
    assert!(
        !out.contains("READY"),
        "output before the cut was sent twice: {out:?}"
    );

    // Then EXIT carrying the code as i32 big-endian, and nothing else before it.
    let mut seen_after = Vec::new();
    let exit = loop {
        let p = c.packet("EXIT");
        match p.kind() {
            DATA => seen_after.extend_from_slice(&p.payload),
            _ => break p,
        }
    };
    assert_eq!(
        (exit.header, exit.payload.as_slice()),
        ([EXIT, 0, 0, 0, 4], &[0u8, 0, 0, 7][..]),
        "EXIT 7 byte-exact (after DATA {:?})",
        String::from_utf8_lossy(&seen_after)
    );
    // The session is over: the daemon closes the connection.
    match c.next() {
        Got::Closed => {}
        other => panic!("expected the daemon to close after EXIT, got {other:?}"),
    }
    reg.wait_exit(&id);
    let rec = reg.record(&id);
    assert_eq!(rec["exit"]["code"], 7, "{rec}");
}

#[test]
fn observe_attach_gets_geometry_screen_data_exit() {
    attach_stream_is_byte_exact("observe");
}

#[test]
fn full_attach_gets_geometry_screen_data_exit() {
    attach_stream_is_byte_exact("full");
}

/// A program killed by a signal: the legacy EXIT carries 128 + the signal.
#[test]
fn legacy_exit_code_for_a_signal_is_128_plus_signal() {
    let reg = Reg::new();
    new_session(
        &reg,
        "sig",
        "observe",
        &["sh", "-c", "echo READY; exec cat"],
    );
    reg.wait_for("sig", "READY");
    let mut c = Legacy::connect(&reg, "sig");
    c.attach(0, 0, (24, 80));
    reg.run(&["kill", "sig", "--signal", "KILL"]).ok();
    let exit = loop {
        let p = c.packet("EXIT");
        if p.kind() != DATA {
            break p;
        }
    };
    assert_eq!(exit.header, [EXIT, 0, 0, 0, 4]);
    assert_eq!(
        exit.payload,
        137i32.to_be_bytes(),
        "128 + SIGKILL, big-endian"
    );
}

#[test]
fn peek_flags_select_plain_and_full() {
    for policy in ["observe", "full"] {
        let reg = Reg::new();
        let id = format!("pk-{policy}");
        // 60 lines scroll the first ones off a 24-row screen; the last is bold.
        new_session(
            &reg,
            &id,
            policy,
            &[
                "sh",
                "-c",
                "seq -f LINE-%03g 1 60; printf '\\033[1mBOLD-END\\033[0m\\n'; exec cat",
            ],
        );
        reg.wait_for(&id, "BOLD-END");
        for flags in [0b00u8, 0b01, 0b10, 0b11] {
            let plain = flags & 1 != 0;
            let full = flags & 2 != 0;
            let screen = Legacy::connect(&reg, &id).peek(flags);
            let text = String::from_utf8_lossy(&screen);
            assert!(text.contains("BOLD-END"), "{policy} {flags:#04b}: {text:?}");
            assert!(text.contains("LINE-060"), "{policy} {flags:#04b}: {text:?}");
            assert_eq!(
                text.contains("LINE-001"),
                full,
                "{policy} {flags:#04b}: scrollback only with bit1: {text:?}"
            );
            assert_eq!(
                screen.contains(&ESC),
                !plain,
                "{policy} {flags:#04b}: ESC only without bit0 (the bold line has attributes)"
            );
        }
        // After STATUS, a connection may still PEEK.
        let mut c = Legacy::connect(&reg, &id);
        c.status();
        assert!(String::from_utf8_lossy(&c.peek(0b01)).contains("BOLD-END"));
    }
}

/// Types as pty 0.12.0 declares them (`StatsResult`): every field it reads.
#[track_caller]
fn assert_pty_status_types(v: &Value) {
    let num = |p: &str| v.pointer(p).is_some_and(Value::is_number);
    let num_or_null = |p: &str| v.pointer(p).is_some_and(|x| x.is_number() || x.is_null());
    let resources = |p: &str| {
        v.pointer(p)
            .is_some_and(|r| r.is_null() || (r["rssKb"].is_number() && r["cpuPercent"].is_number()))
    };
    assert!(v["name"].is_string(), "name: {v}");
    for f in [
        "cols",
        "rows",
        "cursorX",
        "cursorY",
        "scrollbackUsed",
        "scrollbackCapacity",
    ] {
        assert!(num(&format!("/terminal/{f}")), "terminal.{f}: {v}");
    }
    assert!(v["process"]["alive"].is_boolean(), "process.alive: {v}");
    assert!(num_or_null("/process/exitCode"), "process.exitCode: {v}");
    assert!(num_or_null("/process/pid"), "process.pid: {v}");
    assert!(resources("/process/resources"), "process.resources: {v}");
    assert!(num("/daemon/pid"), "daemon.pid: {v}");
    assert!(resources("/daemon/resources"), "daemon.resources: {v}");
    for f in ["total", "attached", "readOnly"] {
        assert!(num(&format!("/clients/{f}")), "clients.{f}: {v}");
    }
    for c in v["clients"]["connections"].as_array().expect("connections") {
        match c["role"].as_str() {
            Some("writable") => {
                for f in ["rows", "cols", "lastRequestSequence"] {
                    assert!(c[f].is_number(), "{f}: {c}");
                }
                assert!(
                    c["constrains"]["rows"].is_boolean() && c["constrains"]["cols"].is_boolean()
                );
            }
            Some("readonly") => {
                assert_eq!(
                    c["constrains"],
                    serde_json::json!({"rows": false, "cols": false})
                );
            }
            other => panic!("role {other:?}: {c}"),
        }
    }
    for f in ["sgrMouse", "cursorHidden", "kittyKeyboard"] {
        assert!(v["modes"][f].is_boolean(), "modes.{f}: {v}");
    }
    assert!(v["modes"]["kittyKeyboardFlags"].is_array(), "{v}");
    assert!(num_or_null("/uptimeSeconds"), "uptimeSeconds: {v}");
    assert!(
        v["createdAt"].is_string() || v["createdAt"].is_null(),
        "{v}"
    );
}

#[test]
fn status_json_has_ptys_shape_plus_latchs_fields() {
    for policy in ["observe", "full"] {
        let reg = Reg::new();
        let id = format!("st-{policy}");
        let args = [
            "new",
            "-d",
            "--json",
            "--id",
            &id,
            "--name",
            "legacy box",
            "--legacy",
            policy,
            "--",
            "sh",
            "-c",
            "printf '\\033[?1006h\\033[?25l'; echo READY; exec cat",
        ];
        let r = reg.run(&args);
        assert_eq!(r.code, 0, "{r:?}");
        let printed = r.json();
        let inc = printed["incarnation"].as_str().unwrap().to_owned();

        // A legacy attachment and a legacy peek (no strict attachment ever exists
        // here, so the client counts below are exact).
        let mut att = Legacy::connect(&reg, &id);
        let screen = att.attach(20, 70, if policy == "full" { (20, 70) } else { (24, 80) });
        if !screen.contains("READY") {
            att.data_until("READY");
        }
        let mut peeker = Legacy::connect(&reg, &id);
        peeker.peek(1);

        let rec = reg.record(&id);
        let mut c = Legacy::connect(&reg, &id);
        let v = c.status();
        assert_pty_status_types(&v);
        assert_eq!(v["name"], "legacy box", "{v}");
        let (rows, cols) = if policy == "full" { (20, 70) } else { (24, 80) };
        assert_eq!(rows_cols(&v), (rows, cols), "{v}");
        assert!(v["terminal"]["cursorY"].as_u64().unwrap() < rows, "{v}");
        assert_eq!(v["terminal"]["scrollbackCapacity"], rows + 10_000, "{v}");
        assert!(
            v["terminal"]["scrollbackUsed"].as_u64().unwrap() >= rows,
            "{v}"
        );
        assert_eq!(v["process"]["alive"], true, "{v}");
        assert!(v["process"]["exitCode"].is_null(), "{v}");
        assert_eq!(
            pid_of(&v["process"]["pid"]),
            pid_of(&rec["child"]["pid"]),
            "{v}"
        );
        assert_eq!(
            pid_of(&v["daemon"]["pid"]),
            pid_of(&rec["daemon"]["pid"]),
            "{v}"
        );
        assert!(
            v["daemon"]["resources"]["rssKb"].as_u64().unwrap() > 0,
            "{v}"
        );
        // The attached legacy client is a writer under full, read-only otherwise; the
        // peek is read-only under both.
        let (attached, read_only) = if policy == "full" { (1, 1) } else { (0, 2) };
        assert_eq!(v["clients"]["total"], 2, "{v}");
        assert_eq!(v["clients"]["attached"], attached, "{v}");
        assert_eq!(v["clients"]["readOnly"], read_only, "{v}");
        let roles: Vec<&str> = v["clients"]["connections"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["role"].as_str().unwrap())
            .collect();
        assert_eq!(
            roles.iter().filter(|r| **r == "writable").count(),
            attached,
            "{v}"
        );
        assert_eq!(v["modes"]["sgrMouse"], true, "{v}");
        assert_eq!(v["modes"]["cursorHidden"], true, "{v}");
        let created = v["createdAt"].as_str().expect("createdAt is a string");
        assert!(
            created.len() == 24 && created.ends_with('Z') && created.as_bytes()[10] == b'T',
            "createdAt is ISO-8601 UTC with milliseconds: {created:?}"
        );
        // latch's own fields beside pty's.
        assert_eq!(v["id"], id.as_str(), "{v}");
        assert_eq!(
            v["incarnation"],
            inc.as_str(),
            "the incarnation `new` printed: {v}"
        );
        assert_eq!(v["legacyPolicy"], policy, "{v}");
        assert_eq!(v["draining"], false, "{v}");
        assert_eq!(v["createdAtMs"], rec["createdAtMs"], "{v}");
    }
}

/// SPEC.md §7: PEEK is a read-only subscription. After GEOMETRY and one SCREEN come
/// the program's output as DATA and its end as EXIT; the peeking connection's own DATA
/// and RESIZE are dropped, under `full` too.
#[test]
fn peek_follows_output_and_exit_read_only() {
    for policy in ["observe", "full"] {
        let reg = Reg::new();
        let id = format!("pf-{policy}");
        new_session(&reg, &id, policy, LOOP);
        reg.wait_for(&id, "READY");
        for flags in [0u8, 1] {
            let mut c = Legacy::connect(&reg, &id);
            let screen = c.peek(flags);
            assert!(String::from_utf8_lossy(&screen).contains("READY"));
            // The peeker's input and resize reach nothing.
            c.send(DATA, b"evil-peek\n");
            c.send(RESIZE, &size_payload(11, 11));
            let marker = format!("follow-{flags}");
            let (line, screen) = strict_round_trip(&reg, &id, &marker);
            assert_eq!(line, format!("GOT:{marker} SIZE:24 80"), "{screen:?}");
            assert!(
                !screen.contains("evil"),
                "peek input reached the PTY: {screen:?}"
            );
            // The round trip's output arrives on the peeking connection as DATA.
            c.data_until(&format!("GOT:{marker}"));
            assert_eq!(pty_size(&reg, &id), (24, 80));
        }
        // Then EXIT: the program ends while a peek follows it.
        let mut c = Legacy::connect(&reg, &id);
        c.peek(0);
        reg.run(&["send", &id, "--keys", "C-d"]).ok();
        let exit = loop {
            let p = c.packet("EXIT");
            if p.kind() != DATA {
                break p;
            }
        };
        assert_eq!(exit.header, [EXIT, 0, 0, 0, 4], "{exit:?}");
        assert_eq!(exit.payload, 0i32.to_be_bytes(), "{exit:?}");
        match c.next() {
            Got::Closed => {}
            other => panic!("expected the daemon to close after EXIT, got {other:?}"),
        }
    }
}

/// SPEC.md §7 "Legacy screens": PEEK's SCREEN is the screen as pty's daemon serializes
/// it, line by line. The expected bytes were produced by pty 0.12.0's daemon (xterm.js
/// and its serialize addon) from the same output on the same 24x80 terminal: colours
/// (16, 256 and RGB), wide characters, and a cursor left mid-line.
#[test]
fn peek_screens_are_ptys_bytes() {
    let program = [
        "sh",
        "-c",
        "printf '\\033[32mgreen\\033[44m on blue\\033[0m\\n\\033[38;5;200mi200\\033[38;2;1;2;3mrgb\\033[m\\n日本語 wide\\n0123456789\\033[5DAB'; exec cat",
    ];
    let plain = "green on blue\ni200rgb\n日本語 wide\n01234AB789";
    let ansi = "\x1b[32mgreen\x1b[44m on blue\x1b[0m\r\n\x1b[38;5;200mi200\x1b[38;2;1;2;3mrgb\r\n\x1b[0m日本語 wide\r\n01234AB789\x1b[3D";
    for policy in ["observe", "full"] {
        let reg = Reg::new();
        let id = format!("pb-{policy}");
        new_session(&reg, &id, policy, &program);
        reg.wait_for(&id, "01234AB");
        let got = |flags: u8| String::from_utf8(Legacy::connect(&reg, &id).peek(flags)).unwrap();
        assert_eq!(got(1), plain, "plain PEEK under {policy}");
        assert_eq!(
            got(3),
            plain,
            "plain full PEEK under {policy} (nothing scrolled)"
        );
        let a = got(0);
        assert_eq!(a, ansi, "ANSI PEEK under {policy}");
        // Never a clear or an absolute move: it is printed where the caller's cursor is.
        assert!(!a.contains("\x1b[H") && !a.contains("\x1b[2J") && !a.contains("\x1b[J"));
        // Nothing has scrolled off: full scrollback is the same screen.
        assert_eq!(got(2), ansi, "ANSI full PEEK under {policy}");
    }
}

// ---------------------------------------------------------------------------------
// 3. Observe changes nothing; off closes at once; full reaches the program.
// ---------------------------------------------------------------------------------

#[test]
fn observe_drops_legacy_input_and_resize() {
    let reg = Reg::new();
    new_session(&reg, "obs", "observe", LOOP);
    reg.wait_for("obs", "READY");

    // An attached (read-only) legacy client, and a plain command connection.
    let mut att = Legacy::connect(&reg, "obs");
    att.attach(10, 10, (24, 80));
    let mut cmd = Legacy::connect(&reg, "obs");
    cmd.send(DATA, b"evil-cmd\n");
    cmd.send(RESIZE, &size_payload(11, 11));
    att.send(DATA, b"evil-att\n");
    att.send(RESIZE, &size_payload(12, 12));
    // Frames on one connection are handled in order: the STATUS replies prove both
    // connections' DATA and RESIZE were handled (and dropped) before them. On the
    // attached connection, no GEOMETRY may come before the STATUS (no resize).
    let v = cmd.status();
    assert_eq!(rows_cols(&v), (24, 80));
    let v = att.status();
    assert_eq!(rows_cols(&v), (24, 80));

    let (line, screen) = strict_round_trip(&reg, "obs", "strict-marker");
    assert_eq!(line, "GOT:strict-marker SIZE:24 80", "{screen:?}");
    assert!(
        !screen.contains("evil"),
        "legacy input reached the PTY: {screen:?}"
    );
    assert_eq!(pty_size(&reg, "obs"), (24, 80));
    // The attached observer saw the program's answer, as DATA only.
    att.data_until("GOT:strict-marker");
}

#[test]
fn off_closes_every_legacy_connection_before_any_reply() {
    let reg = Reg::new();
    new_session(&reg, "off", "off", LOOP);
    reg.wait_for("off", "READY");
    let packets: [(u8, &[u8]); 8] = [
        (STATUS, &[]),
        (PEEK, &[0]),
        (PEEK, &[3]),
        (ATTACH, &size_payload(10, 10)),
        (DATA, b"evil-off\n"),
        (RESIZE, &size_payload(11, 11)),
        (DETACH, &[]),
        (9, b"xyz"),
    ];
    for (kind, payload) in packets {
        let mut c = Legacy::connect(&reg, "off");
        c.send(kind, payload);
        c.assert_closed_without_reply(&format!("policy off, packet type {kind}"));
    }
    // The closes above happened after the daemon read each packet, so this strict
    // round trip is ordered after them.
    let (line, screen) = strict_round_trip(&reg, "off", "after-off");
    assert_eq!(line, "GOT:after-off SIZE:24 80", "{screen:?}");
    assert!(
        !screen.contains("evil"),
        "legacy input reached the PTY: {screen:?}"
    );
    let st = strict_status(&reg, "off");
    assert_eq!(
        (st["writers"].as_u64(), st["legacyPolicy"].as_str()),
        (Some(0), Some("off"))
    );
}

#[test]
fn full_delivers_legacy_input_and_resize() {
    let reg = Reg::new();
    new_session(&reg, "ful", "full", LOOP);
    reg.wait_for("ful", "READY");
    // A command connection: input reaches the program, RESIZE sets the PTY size.
    let mut cmd = Legacy::connect(&reg, "ful");
    cmd.send(DATA, b"first\n");
    reg.wait_for("ful", "GOT:first SIZE:24 80");
    cmd.send(RESIZE, &size_payload(33, 101));
    let v = cmd.status();
    assert_eq!(rows_cols(&v), (33, 101));
    cmd.send(DATA, b"second\n");
    reg.wait_for("ful", "GOT:second SIZE:33 101");
    assert_eq!(pty_size(&reg, "ful"), (33, 101));

    // An attached writer: its size counts, its RESIZE is announced by GEOMETRY, and
    // its input echoes back to it as DATA.
    let mut att = Legacy::connect(&reg, "ful");
    att.attach(20, 70, (20, 70));
    att.send(RESIZE, &size_payload(21, 71));
    att.expect_geometry((21, 71));
    att.send(DATA, b"third\n");
    att.data_until("GOT:third SIZE:21 71");
    assert_eq!(pty_size(&reg, "ful"), (21, 71));
    // Strict clients keep working alongside.
    let (line, _) = strict_round_trip(&reg, "ful", "strict-too");
    assert_eq!(line, "GOT:strict-too SIZE:21 71");
}

/// SPEC.md §7: legacy connections are counted and summarised in the daemon's log at
/// most once a minute, never a line each; a refused one is one count, not two.
#[test]
fn legacy_connections_are_summarised_not_logged_one_by_one() {
    let reg = Reg::new();
    new_session(&reg, "lg-off", "off", LOOP);
    new_session(&reg, "lg-obs", "observe", LOOP);
    reg.wait_for("lg-obs", "READY");
    let legacy_lines = |id: &str| {
        std::fs::read_to_string(reg.path(&format!("{id}.log")))
            .unwrap()
            .lines()
            .filter(|l| l.contains("legacy"))
            .map(String::from)
            .collect::<Vec<_>>()
    };
    for _ in 0..5 {
        let mut c = Legacy::connect(&reg, "lg-off");
        c.send(DATA, b"x\n");
        c.assert_closed_without_reply("policy off");
    }
    let off = legacy_lines("lg-off");
    assert_eq!(off.len(), 1, "{off:#?}");
    assert!(
        off[0].contains("0 served, 1 refused, 0 with input"),
        "{off:#?}"
    );
    for _ in 0..10 {
        let mut c = Legacy::connect(&reg, "lg-obs");
        c.send(DATA, b"x\n");
        c.status();
    }
    let obs = legacy_lines("lg-obs");
    assert_eq!(obs.len(), 1, "{obs:#?}");
}

/// SPEC.md §7 "A directory for older tools": `latch legacy-dir DIR` gives older tools
/// a 0700 directory of their own: a socket symlink and pty-shaped metadata per running
/// session whose policy is not off, no `.pid` (a pid only under full), and ended
/// sessions' entries removed. It
/// refuses latch's root, a directory inside it, and someone else's non-empty directory.
#[test]
fn legacy_dir_gives_older_tools_a_directory_of_their_own() {
    use std::os::unix::fs::PermissionsExt;
    let reg = Reg::new();
    for policy in ["off", "observe", "full"] {
        new_session(&reg, &format!("ld-{policy}"), policy, LOOP);
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pty");
    let dir_s = dir.to_str().unwrap();
    let root_before: Vec<(String, Vec<u8>)> = {
        let mut v: Vec<_> = std::fs::read_dir(reg.path(""))
            .unwrap()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
            .map(|e| {
                (
                    e.file_name().into_string().unwrap(),
                    std::fs::read(e.path()).unwrap(),
                )
            })
            .collect();
        v.sort();
        v
    };

    let r = reg.run(&["legacy-dir", dir_s, "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        r.json()["sessions"],
        serde_json::json!(["ld-full", "ld-observe"])
    );
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    for policy in ["observe", "full"] {
        let id = format!("ld-{policy}");
        let link = dir.join(format!("{id}.sock"));
        assert_eq!(std::fs::read_link(&link).unwrap(), sock(&reg, &id));
        assert!(!dir.join(format!("{id}.pid")).exists(), "no pid file");
        let meta: Value =
            serde_json::from_slice(&std::fs::read(dir.join(format!("{id}.json"))).unwrap())
                .unwrap();
        let rec = reg.record(&id);
        if policy == "full" {
            assert_eq!(meta["daemonPid"], rec["daemon"]["pid"], "{meta}");
            // The daemon's start time, field 22 of /proc/PID/stat, as pty reads it.
            let stat =
                std::fs::read_to_string(format!("/proc/{}/stat", pid_of(&rec["daemon"]["pid"])))
                    .unwrap();
            let start = stat[stat.rfind(')').unwrap() + 2..]
                .split(' ')
                .nth(19)
                .unwrap();
            assert_eq!(
                meta["recovery"]["processStartToken"],
                format!("linux:{start}")
            );
        } else {
            // Under observe no pid is published (SPEC.md §7).
            assert!(meta.get("daemonPid").is_none(), "{meta}");
            assert!(meta.get("recovery").is_none(), "{meta}");
        }
        assert_eq!(meta["command"], "sh", "{meta}");
        assert_eq!(meta["args"][0], "-c", "{meta}");
        assert!(meta["createdAt"].as_str().unwrap().ends_with('Z'), "{meta}");
        // A legacy client reaches the session through the link.
        let mut c = Legacy {
            stream: UnixStream::connect(&link).unwrap(),
        };
        c.stream.set_read_timeout(Some(TIMEOUT)).unwrap();
        assert_eq!(c.status()["id"], id.as_str());
    }
    assert!(!dir.join("ld-off.sock").exists() && !dir.join("ld-off.json").exists());

    // Refused: the root itself, a directory inside it, someone else's directory.
    let root = reg.path("");
    let inside = reg.path("sub");
    for bad in [root.to_str().unwrap(), inside.to_str().unwrap()] {
        let r = reg.run(&["legacy-dir", bad]);
        assert_eq!(r.code, 2, "{bad}: {r:?}");
    }
    assert!(!inside.exists(), "nothing is created inside the root");
    let foreign = tmp.path().join("foreign");
    std::fs::create_dir(&foreign).unwrap();
    std::fs::write(foreign.join("notes.json"), b"mine").unwrap();
    let r = reg.run(&["legacy-dir", foreign.to_str().unwrap()]);
    assert_eq!(r.code, 2, "{r:?}");
    assert_eq!(std::fs::read(foreign.join("notes.json")).unwrap(), b"mine");

    // A session ends: the refresh removes its entries and what a tool left for it.
    reg.run(&["kill", "ld-full", "--wait"]).ok();
    std::fs::write(dir.join("ld-full.pid"), b"1").unwrap();
    let r = reg.run(&["legacy-dir", dir_s, "--json"]);
    assert_eq!(r.json()["sessions"], serde_json::json!(["ld-observe"]));
    for f in ["ld-full.sock", "ld-full.json", "ld-full.pid"] {
        assert!(!dir.join(f).exists(), "{f} left behind");
    }
    assert!(dir.join("ld-observe.sock").exists());
    // Nothing in latch's root was written but the ended session's own record.
    let root_after: Vec<(String, Vec<u8>)> = {
        let mut v: Vec<_> = std::fs::read_dir(reg.path(""))
            .unwrap()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
            .map(|e| {
                (
                    e.file_name().into_string().unwrap(),
                    std::fs::read(e.path()).unwrap(),
                )
            })
            .collect();
        v.sort();
        v
    };
    for ((n1, b1), (n2, b2)) in root_before.iter().zip(&root_after) {
        assert_eq!(n1, n2);
        if n1 != "ld-full.json" {
            assert_eq!(b1, b2, "{n1} changed");
        }
    }
}

/// Every entry of a directory, for "nothing here was touched": name, then file type,
/// inode, and the bytes (a regular file's content or a symlink's target).
fn snapshot(dir: &std::path::Path) -> std::collections::BTreeMap<String, (String, u64, String)> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| {
            let m = std::fs::symlink_metadata(e.path()).unwrap();
            let bytes = if m.file_type().is_symlink() {
                std::fs::read_link(e.path())
                    .unwrap()
                    .as_os_str()
                    .as_bytes()
                    .to_vec()
            } else if m.is_file() {
                std::fs::read(e.path()).unwrap()
            } else {
                Vec::new()
            };
            let kind = format!("{:?}", m.file_type());
            let text = String::from_utf8_lossy(&bytes).into_owned();
            (e.file_name().into_string().unwrap(), (kind, m.ino(), text))
        })
        .collect()
}

/// Plants what an older tool's own session leaves (or a victim's root holds) for `id`
/// in `dir`: a listening socket, metadata without latch's mark, a pid file, events.
fn plant_foreign(dir: &std::path::Path, id: &str) -> UnixListener {
    let meta = serde_json::json!({
        "command": "sh", "args": [], "displayCommand": "sh", "cwd": "/",
        "createdAt": "2026-01-01T00:00:00.000Z",
    });
    std::fs::write(dir.join(format!("{id}.json")), meta.to_string()).unwrap();
    std::fs::write(dir.join(format!("{id}.pid")), b"12345").unwrap();
    std::fs::write(dir.join(format!("{id}.events.jsonl")), b"{}\n").unwrap();
    std::fs::write(dir.join(format!("{id}.lock")), b"").unwrap();
    UnixListener::bind(dir.join(format!("{id}.sock"))).unwrap()
}

/// Opens the write end of the debug pause FIFO once `latch` holds its read end (it
/// opens it after validating DIR, before acting in it): a bounded poll, ENXIO until
/// then. Fails the test if `latch` exits first.
fn pause_writer(fifo: &std::path::Path, child: &mut std::process::Child) -> std::fs::File {
    use std::os::unix::fs::OpenOptionsExt;
    // Only a bound: latch reaches the pause at once unless the machine is starved.
    let deadline = std::time::Instant::now() + 6 * TIMEOUT;
    loop {
        match std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(fifo)
        {
            Ok(f) => return f,
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {}
            Err(e) => panic!("open {}: {e}", fifo.display()),
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("latch ended before its pause: {status:?}");
        }
        assert!(std::time::Instant::now() < deadline, "latch never paused");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// SPEC.md §7 "A directory for older tools": the refresh works through the directory
/// it validated. Someone who can write DIR's parent swaps DIR for a symlink to a
/// victim's root between the check and the acts (a pause in debug builds holds latch
/// at that instant); nothing in the victim's root is touched, and the refresh lands in
/// the directory it validated.
#[test]
fn legacy_dir_swapped_for_a_symlink_after_validation_touches_nothing_through_it() {
    use std::os::unix::fs::symlink;
    let reg = Reg::new();
    new_session(&reg, "sw-obs", "observe", LOOP);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pty");
    let dir_s = dir.to_str().unwrap();
    assert_eq!(reg.run(&["legacy-dir", dir_s]).code, 0);
    // The victim's root: records, locks, events and a live socket, for ids the refresh
    // would remove, and one (sw-obs) it would write.
    let victim = tmp.path().join("victim");
    std::fs::create_dir(&victim).unwrap();
    let _live = plant_foreign(&victim, "v1");
    std::fs::write(victim.join("sw-obs.json"), b"{\"victim\":true}").unwrap();
    let before = snapshot(&victim);

    let fifo = tmp.path().join("pause");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let mut child = reg
        .cmd()
        .args(["legacy-dir", dir_s, "--json"])
        .env("LATCH_DEBUG_LEGACY_DIR_PAUSE", &fifo)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let go = pause_writer(&fifo, &mut child);
    let moved = tmp.path().join("pty.moved");
    std::fs::rename(&dir, &moved).unwrap();
    symlink(&victim, &dir).unwrap();
    drop(go);
    let out = support::Run::from(child.wait_with_output().unwrap());

    assert_eq!(
        snapshot(&victim),
        before,
        "the victim's root was touched: {out:?}"
    );
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(
        std::fs::read_link(moved.join("sw-obs.sock")).unwrap(),
        sock(&reg, "sw-obs")
    );
}

/// SPEC.md §7: a DIR given with a trailing slash is the symlink itself, never what it
/// points to: refused, and nothing is written where it points.
#[test]
fn legacy_dir_refuses_a_symlink_given_with_a_trailing_slash() {
    let reg = Reg::new();
    let tmp = tempfile::tempdir().unwrap();
    let real = tmp.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    for arg in [format!("{}/", link.display()), link.display().to_string()] {
        let r = reg.run(&["legacy-dir", &arg]);
        assert_eq!(r.code, 2, "{arg}: {r:?}");
        assert_eq!(std::fs::read_dir(&real).unwrap().count(), 0, "{arg}");
    }
}

/// SPEC.md §7: a refresh removes only what latch made there (symlinks to its own
/// sockets, metadata it marked); an older tool's own session in DIR (its socket,
/// metadata, pid and events) stays, and so does an entry in the way of a latch session.
#[test]
fn legacy_dir_refresh_leaves_what_it_did_not_make() {
    let reg = Reg::new();
    new_session(&reg, "fo-obs", "observe", LOOP);
    new_session(&reg, "fo-clash", "observe", LOOP);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pty");
    let dir_s = dir.to_str().unwrap();
    std::fs::create_dir(&dir).unwrap();
    // A latch session's slots taken by a native session of the same id.
    let _clash = plant_foreign(&dir, "fo-clash");
    std::fs::write(dir.join(".latch-legacy-dir"), b"").unwrap();
    let r = reg.run(&["legacy-dir", dir_s, "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.json()["sessions"], serde_json::json!(["fo-obs"]), "{r:?}");
    let ours: Value =
        serde_json::from_slice(&std::fs::read(dir.join("fo-obs.json")).unwrap()).unwrap();
    assert_eq!(ours["latchLegacyDir"], true, "{ours}");

    // The older tool's own session, and a link to a socket outside latch's root.
    let native = plant_foreign(&dir, "native1");
    std::os::unix::fs::symlink("/elsewhere/x.sock", dir.join("x.sock")).unwrap();
    let before = snapshot(&dir);
    let r = reg.run(&["legacy-dir", dir_s, "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(snapshot(&dir), before, "{r:?}");
    // The native daemon is still reachable through its socket.
    let _c = UnixStream::connect(dir.join("native1.sock")).unwrap();
    native.accept().unwrap();

    // A latch session that ends: its own entries go, the native ones stay.
    reg.run(&["kill", "fo-obs", "--wait"]).ok();
    std::fs::write(dir.join("fo-obs.pid"), b"1").unwrap();
    let r = reg.run(&["legacy-dir", dir_s, "--json"]);
    assert_eq!(r.json()["sessions"], serde_json::json!([]), "{r:?}");
    let mut want = before.clone();
    want.retain(|name, _| !name.starts_with("fo-obs."));
    assert_eq!(snapshot(&dir), want, "{r:?}");
}

/// SPEC.md §7: under `observe` the view publishes no daemon pid (pty's kill and
/// restart then find the session not running, so they cannot end it); under `full` it
/// publishes `daemonPid` with the start token pty checks. pty takes a pid from
/// `<id>.pid`, else `daemonPid` when `recovery.processStartToken` matches /proc.
#[test]
fn legacy_dir_publishes_a_pid_only_under_full() {
    let reg = Reg::new();
    new_session(&reg, "pp-obs", "observe", LOOP);
    new_session(&reg, "pp-full", "full", LOOP);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pty");
    assert_eq!(reg.run(&["legacy-dir", dir.to_str().unwrap()]).code, 0);
    // What pty's readPid finds for an id.
    let pty_pid = |id: &str| -> Option<u64> {
        if let Ok(s) = std::fs::read_to_string(dir.join(format!("{id}.pid"))) {
            return s.trim().parse().ok();
        }
        let meta: Value =
            serde_json::from_slice(&std::fs::read(dir.join(format!("{id}.json"))).unwrap())
                .unwrap();
        let pid = meta["daemonPid"].as_u64()?;
        let token = meta["recovery"]["processStartToken"].as_str()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let start = stat[stat.rfind(')')? + 2..].split(' ').nth(19)?;
        (token == format!("linux:{start}")).then_some(pid)
    };
    assert_eq!(pty_pid("pp-obs"), None);
    let full_pid = reg.record("pp-full")["daemon"]["pid"].as_u64();
    assert_eq!(pty_pid("pp-full"), full_pid);
    assert!(full_pid.is_some());
}

// ---------------------------------------------------------------------------------
// 4. The matrix {strict, legacy} x {off, observe, full}.
// ---------------------------------------------------------------------------------

/// How a fenced legacy request ended: the daemon answered STATUS after it (so it was
/// handled), or closed the connection.
fn fenced(c: &mut Legacy) -> Option<Value> {
    c.try_send(STATUS, &[]);
    match c.next() {
        Got::Packet(p) => {
            assert_eq!(p.kind(), STATUS, "unexpected {p:?}");
            Some(serde_json::from_slice(&p.payload).unwrap())
        }
        Got::Closed | Got::Reset => None,
    }
}

fn legacy_cells(reg: &Reg, id: &str, policy: &str) -> [String; 5] {
    // STATUS
    let mut c = Legacy::connect(reg, id);
    c.send(STATUS, &[]);
    let status = match c.next() {
        Got::Packet(p) => {
            assert_eq!(p.kind(), STATUS, "{p:?}");
            let v: Value = serde_json::from_slice(&p.payload).unwrap();
            assert_eq!(v["legacyPolicy"], policy, "{v}");
            "reply"
        }
        Got::Closed => "closed",
        Got::Reset => panic!("STATUS: connection reset"),
    };
    // PEEK (plain)
    let mut c = Legacy::connect(reg, id);
    c.send(PEEK, &[1]);
    let peek = match c.next() {
        Got::Packet(p) => {
            assert_eq!(p.kind(), GEOMETRY, "{p:?}");
            let p = c.packet("SCREEN");
            assert_eq!(p.kind(), SCREEN, "{p:?}");
            assert!(p.text().contains("READY"), "{p:?}");
            "screen"
        }
        Got::Closed => "closed",
        Got::Reset => panic!("PEEK: connection reset"),
    };
    // ATTACH (with the PTY's own size): read-only or read-write, per the daemon's
    // writer count (no strict client ever attaches read-write here).
    let mut c = Legacy::connect(reg, id);
    c.send(ATTACH, &size_payload(24, 80));
    let attach = match c.next() {
        Got::Packet(p) => {
            assert_eq!(p.kind(), GEOMETRY, "{p:?}");
            assert_eq!(c.packet("SCREEN").kind(), SCREEN);
            let writers = strict_status(reg, id)["writers"].as_u64().unwrap();
            c.send(DETACH, &[]);
            loop {
                match c.next() {
                    Got::Packet(p) if p.kind() == DATA => {}
                    Got::Closed => break,
                    other => panic!("after DETACH: {other:?}"),
                }
            }
            match writers {
                0 => "read-only",
                1 => "read-write",
                n => panic!("{n} writers"),
            }
        }
        Got::Closed => "closed",
        Got::Reset => panic!("ATTACH: connection reset"),
    };
    // DATA
    let mut c = Legacy::connect(reg, id);
    let marker = format!("legacy-{policy}");
    c.send(DATA, format!("{marker}\n").as_bytes());
    let data_open = fenced(&mut c).is_some();
    let (_, screen) = strict_round_trip(reg, id, &format!("strict-{policy}"));
    let data = match (data_open, screen.contains(&format!("GOT:{marker} "))) {
        (false, false) => "closed",
        (true, true) => "input",
        (true, false) => "dropped",
        (false, true) => panic!("closed, yet the input arrived: {screen:?}"),
    };
    // RESIZE
    let before = pty_size(reg, id);
    let mut c = Legacy::connect(reg, id);
    c.send(RESIZE, &size_payload(20, 70));
    let resize_open = fenced(&mut c).is_some();
    let after = pty_size(reg, id);
    let resize = match (resize_open, after == (20, 70)) {
        (false, false) => "closed",
        (true, true) => "applied",
        (true, false) => {
            assert_eq!(after, before);
            "dropped"
        }
        (false, true) => panic!("closed, yet the resize applied"),
    };
    [status, peek, attach, data, resize].map(String::from)
}

fn strict_cell(reg: &Reg, id: &str, policy: &str) -> String {
    let (line, _) = strict_round_trip(reg, id, &format!("cli-{policy}"));
    assert!(
        line.starts_with(&format!("GOT:cli-{policy} SIZE:")),
        "{line}"
    );
    let peek = reg.run(&["peek", id, "--plain"]);
    assert!(peek.ok().contains(&format!("GOT:cli-{policy}")), "{peek:?}");
    reg.run(&["resize", id, "31", "91"]).ok();
    assert_eq!(pty_size(reg, id), (31, 91));
    assert_eq!(strict_status(reg, id)["legacyPolicy"], policy);
    "ok".into()
}

#[test]
fn strict_and_legacy_clients_under_each_policy() {
    let expected: [(&str, [&str; 6]); 3] = [
        (
            "off",
            ["ok", "closed", "closed", "closed", "closed", "closed"],
        ),
        (
            "observe",
            ["ok", "reply", "screen", "read-only", "dropped", "dropped"],
        ),
        (
            "full",
            ["ok", "reply", "screen", "read-write", "input", "applied"],
        ),
    ];
    let reg = Reg::new();
    let mut table = Vec::new();
    for (policy, _) in &expected {
        let id = format!("m-{policy}");
        new_session(&reg, &id, policy, LOOP);
        reg.wait_for(&id, "READY");
        let legacy = legacy_cells(&reg, &id, policy);
        let strict = strict_cell(&reg, &id, policy);
        let mut row = vec![strict];
        row.extend(legacy);
        table.push((*policy, row));
    }
    println!(
        "\n{:<8} | {:<23} | {:<13} | {:<11} | {:<13} | {:<11} | {:<13}",
        "policy",
        "strict send/peek/resize",
        "legacy STATUS",
        "legacy PEEK",
        "legacy ATTACH",
        "legacy DATA",
        "legacy RESIZE"
    );
    println!("{}", "-".repeat(112));
    for (policy, row) in &table {
        println!(
            "{:<8} | {:<23} | {:<13} | {:<11} | {:<13} | {:<11} | {:<13}",
            policy, row[0], row[1], row[2], row[3], row[4], row[5]
        );
    }
    for ((policy, row), (_, want)) in table.iter().zip(&expected) {
        assert_eq!(row, want, "policy {policy}");
    }
}

// ---------------------------------------------------------------------------------
// 5. Downgrade protection: fake daemons behind a real session's socket path.
// ---------------------------------------------------------------------------------

const MAGIC: [u8; 8] = [0x89, b'L', b'A', b'T', b'C', b'H', b'\r', b'\n'];

/// How a fake daemon answers a strict client's HELLO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fake {
    /// A legacy GEOMETRY packet.
    LegacyGeometry,
    /// A legacy STATUS packet with a JSON object.
    LegacyStatus,
    /// A legacy DATA packet (a prompt).
    LegacyData,
    /// MAGIC + WELCOME choosing version 1 (below the client's minimum).
    WelcomeV1,
    /// MAGIC + WELCOME choosing version 5 (outside the client's range).
    WelcomeV4,
    /// MAGIC + ERROR version-unsupported.
    VersionUnsupported,
    /// Bytes of another protocol.
    Garbage,
    /// MAGIC, then a zero-length frame.
    MagicThenMalformed,
    /// Reads the whole HELLO, then closes without a byte.
    CloseAfterHello,
    /// Reads five bytes (an older daemon reading MAGIC as a legacy header: type 0x89,
    /// length 1.2 GiB, over its cap), then closes with the rest unread.
    CloseAfterLegacyHeader,
}

impl Fake {
    fn answer(self) -> Vec<u8> {
        use latch_wire::{framing::encode_frame, ErrorCode, Limits, ServerFrame};
        let strict = |f: ServerFrame| {
            let mut b = bytes::BytesMut::from(&MAGIC[..]);
            encode_frame(&f, &mut b, 1 << 20).unwrap();
            b.to_vec()
        };
        let welcome = |version| {
            strict(ServerFrame::Welcome {
                version,
                limits: Limits {
                    max_client_frame: 65536,
                    max_server_frame: 1 << 24,
                    client_queue_bytes: 1 << 23,
                },
                server: "fake".into(),
            })
        };
        match self {
            Self::LegacyGeometry => Legacy::encode(GEOMETRY, &size_payload(24, 80)),
            Self::LegacyStatus => Legacy::encode(STATUS, br#"{"name":"x","rows":24,"cols":80}"#),
            Self::LegacyData => Legacy::encode(DATA, b"$ "),
            Self::WelcomeV1 => welcome(1),
            Self::WelcomeV4 => welcome(5),
            Self::VersionUnsupported => strict(ServerFrame::Error {
                code: ErrorCode::VersionUnsupported,
                detail: "daemon speaks 3..=3 and client asked 2..=2".into(),
            }),
            Self::Garbage => b"HTTP/1.1 400 Bad Request\r\n\r\n".to_vec(),
            Self::MagicThenMalformed => [&MAGIC[..], &[0, 0, 0, 0]].concat(),
            Self::CloseAfterHello | Self::CloseAfterLegacyHeader => Vec::new(),
        }
    }

    /// What the client's message must name (besides "restart").
    fn names(self) -> &'static str {
        match self {
            Self::LegacyGeometry => "legacy pty framing (packet type 10)",
            Self::LegacyStatus => "legacy pty framing (packet type 7)",
            Self::LegacyData => "legacy pty framing (packet type 0)",
            Self::WelcomeV1 => "version 1",
            Self::WelcomeV4 => "version 5",
            Self::VersionUnsupported => "no common protocol version",
            Self::Garbage => "48 54 54 50",
            Self::MagicThenMalformed => "zero-length",
            Self::CloseAfterHello | Self::CloseAfterLegacyHeader => "without answering",
        }
    }
}

/// What a fake daemon received on one connection.
#[derive(Debug)]
struct Seen {
    /// The client's opening: MAGIC + HELLO (or the first five bytes).
    hello: Vec<u8>,
    /// Every byte after the fake's answer, until the client closed.
    after: Vec<u8>,
}

/// Serves `mode` to every connection until one opens with a byte other than 0x89
/// (the test's stop signal).
fn serve_fake(listener: UnixListener, mode: Fake) -> JoinHandle<Vec<Seen>> {
    std::thread::spawn(move || {
        let mut seen = Vec::new();
        loop {
            let (mut s, _) = listener.accept().unwrap();
            s.set_read_timeout(Some(TIMEOUT)).unwrap();
            let mut first = [0u8; 1];
            s.read_exact(&mut first).unwrap();
            if first[0] != MAGIC[0] {
                return seen;
            }
            if mode == Fake::CloseAfterLegacyHeader {
                let mut rest = [0u8; 4];
                s.read_exact(&mut rest).unwrap();
                drop(s);
                seen.push(Seen {
                    hello: [&first[..], &rest[..]].concat(),
                    after: Vec::new(),
                });
                continue;
            }
            let mut head = [0u8; 11];
            s.read_exact(&mut head).unwrap();
            let len = u32::from_be_bytes([head[7], head[8], head[9], head[10]]);
            let mut payload = vec![0u8; len as usize];
            s.read_exact(&mut payload).unwrap();
            let hello = [&first[..], &head[..], &payload[..]].concat();
            s.write_all(&mode.answer()).unwrap();
            let mut after = Vec::new();
            if mode != Fake::CloseAfterHello {
                match s.read_to_end(&mut after) {
                    Ok(_) => {}
                    Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
                    Err(e) => panic!("fake daemon: reading what follows the answer: {e}"),
                }
            }
            seen.push(Seen { hello, after });
        }
    })
}

#[test]
fn strict_client_never_proceeds_past_a_daemon_that_does_not_speak_v2() {
    use latch_wire::{framing::decode_frame, ClientFrame, SUPPORTED};
    let reg = Reg::new();
    let inc = new_session(&reg, "dg", "observe", LOOP);
    reg.wait_for("dg", "READY");
    let real = sock(&reg, "dg");
    let hidden = reg.path("dg.sock.real");
    // The real daemon keeps listening on the renamed socket; its record still says
    // running (the daemon is alive), so Reg's cleanup still finds and kills it.
    std::fs::rename(&real, &hidden).unwrap();

    let modes = [
        Fake::LegacyGeometry,
        Fake::LegacyStatus,
        Fake::LegacyData,
        Fake::WelcomeV1,
        Fake::WelcomeV4,
        Fake::VersionUnsupported,
        Fake::Garbage,
        Fake::MagicThenMalformed,
        Fake::CloseAfterHello,
        Fake::CloseAfterLegacyHeader,
    ];
    let commands: [&[&str]; 4] = [
        &["send", "dg", "FAKE-MARK\n"],
        &["peek", "dg"],
        &["kill", "dg"],
        &["status", "dg"],
    ];
    for mode in modes {
        let listener = UnixListener::bind(&real).unwrap();
        let server = serve_fake(listener, mode);
        for args in commands {
            let r = reg.run(args);
            assert_eq!(
                r.code,
                8,
                "{mode:?}: `latch {}` must exit 8: {r:?}",
                args.join(" ")
            );
            let msg = r.stderr.to_lowercase();
            assert!(
                msg.contains("protocol mismatch"),
                "{mode:?} {args:?}: {r:?}"
            );
            assert!(
                msg.contains(mode.names()),
                "{mode:?} {args:?} must name {:?}: {r:?}",
                mode.names()
            );
            assert!(
                msg.contains("restart"),
                "{mode:?} {args:?} must say what to do: {r:?}"
            );
        }
        // Stop the fake and collect what it saw.
        UnixStream::connect(&real)
            .unwrap()
            .write_all(b"stop")
            .unwrap();
        let seen = server.join().expect("fake daemon failed");
        std::fs::remove_file(&real).unwrap();
        assert_eq!(
            seen.len(),
            commands.len(),
            "{mode:?}: one connection per command"
        );
        for s in &seen {
            assert_eq!(s.hello[..5], MAGIC[..5], "{mode:?}");
            if mode != Fake::CloseAfterLegacyHeader {
                let mut b = bytes::BytesMut::from(&s.hello[8..]);
                let f: ClientFrame = decode_frame(&mut b, 65536).unwrap().unwrap();
                assert!(b.is_empty());
                assert!(
                    matches!(&f, ClientFrame::Hello { versions, .. } if *versions == SUPPORTED),
                    "{mode:?}: the client's first frame must be HELLO: {f:?}"
                );
            }
            assert!(
                s.after.is_empty(),
                "{mode:?}: the client sent {} bytes after the fake's answer: {:?}",
                s.after.len(),
                s.after
            );
        }
    }

    // The real daemon received nothing: its program never saw the input, was never
    // signalled, and still answers.
    std::fs::rename(&hidden, &real).unwrap();
    let (line, screen) = strict_round_trip(&reg, "dg", "real-again");
    assert_eq!(line, "GOT:real-again SIZE:24 80");
    assert!(!screen.contains("FAKE-MARK"), "{screen:?}");
    let st = strict_status(&reg, "dg");
    assert_eq!(st["incarnation"], inc.as_str());
    assert!(st["exit"].is_null() && st["draining"] == false, "{st}");
}

// ---------------------------------------------------------------------------------
// 6. Robustness: bad legacy packets end only their own connection.
// ---------------------------------------------------------------------------------

#[test]
fn bad_legacy_packets_end_only_their_connection() {
    let reg = Reg::new();
    new_session(&reg, "rb", "full", LOOP);
    reg.wait_for("rb", "READY");
    let mut att = Legacy::connect(&reg, "rb");
    att.attach(24, 80, (24, 80));

    // Over the cap (the header alone): closed without a reply, nothing allocated.
    for len in [0x0200_0000u32, LEGACY_CAP + 1, u32::MAX] {
        let mut c = Legacy::connect(&reg, "rb");
        let mut header = vec![DATA];
        header.extend_from_slice(&len.to_be_bytes());
        c.write_raw(&header).unwrap();
        c.assert_closed_without_reply(&format!("length {len:#x}"));
    }
    // Over the cap on an established connection too.
    let mut c = Legacy::connect(&reg, "rb");
    c.status();
    c.write_raw(&[STATUS, 0x02, 0, 0, 0]).unwrap();
    c.assert_closed_without_reply("over the cap after STATUS");

    // Exactly at the cap is accepted: a 1 MiB packet (of a type the daemon ignores, so
    // the program is not flooded) is read whole, and the STATUS after it is answered.
    let mut c = Legacy::connect(&reg, "rb");
    c.status();
    c.send(9, &vec![b'#'; LEGACY_CAP as usize]);
    c.status();

    // Truncated packets: a whole header and part of the payload, or part of a header,
    // then the client stops sending. The daemon closes without a reply.
    for bytes in [
        &[DATA, 0, 0, 0, 10, b'a', b'b', b'c'][..],
        &[STATUS, 0, 0][..],
    ] {
        let mut c = Legacy::connect(&reg, "rb");
        c.write_raw(bytes).unwrap();
        c.stream.shutdown(std::net::Shutdown::Write).unwrap();
        c.assert_closed_without_reply(&format!("truncated {bytes:?}"));
    }

    // Unknown types are ignored, as in the old framing: the connection keeps serving.
    let mut c = Legacy::connect(&reg, "rb");
    c.send(9, b"\x01\x02\x03");
    c.send(8, &[]);
    c.send(0xff, b"ignored");
    assert_eq!(c.status()["legacyPolicy"], "full");
    assert!(String::from_utf8_lossy(&c.peek(1)).contains("READY"));

    // A first byte that is neither MAGIC's nor a legacy type (SPEC.md §6 rule 4).
    for first in [0x0bu8, b'G', 0xff] {
        let mut c = Legacy::connect(&reg, "rb");
        c.write_raw(&[first, 0, 0, 0, 0]).unwrap();
        c.assert_closed_without_reply(&format!("first byte {first:#04x}"));
    }

    // Everyone else carries on: a strict peek, and the attached legacy writer, which
    // still sends input and receives output (DATA only).
    reg.run(&["peek", "rb"]).ok();
    att.send(DATA, b"still-here\n");
    att.data_until("GOT:still-here SIZE:24 80");
    let (line, _) = strict_round_trip(&reg, "rb", "strict-after");
    assert_eq!(line, "GOT:strict-after SIZE:24 80");
    att.data_until("GOT:strict-after");
}

/// While the session drains (a stop whose signal the program ignores), a legacy client
/// gets STATUS and is closed on requests it cannot be served: it never waits forever
/// for a SCREEN that will not come.
#[test]
fn legacy_requests_while_draining_are_closed_not_left_hanging() {
    let reg = Reg::new();
    new_session(
        &reg,
        "dr",
        "full",
        &["sh", "-c", "trap '' TERM; echo READY; exec cat"],
    );
    reg.wait_for("dr", "READY");
    reg.run(&["kill", "dr", "--signal", "TERM"]).ok();
    let mut c = Legacy::connect(&reg, "dr");
    let v = c.status();
    assert_eq!(v["draining"], true, "{v}");
    assert_eq!(v["process"]["alive"], true, "{v}");
    c.send(PEEK, &[1]);
    c.assert_closed_without_reply("PEEK while draining");
    let mut c = Legacy::connect(&reg, "dr");
    c.send(ATTACH, &size_payload(24, 80));
    c.assert_closed_without_reply("ATTACH while draining");
    // Input is still refused (dropped) while draining: the connection stays usable.
    let mut c = Legacy::connect(&reg, "dr");
    c.send(DATA, b"late\n");
    assert_eq!(c.status()["draining"], true);
}

/// Ends a fake daemon's accept loop (it returns on a first byte that is not MAGIC's)
/// and returns what it saw.
fn stop_fake(sock: &std::path::Path, fake: JoinHandle<Vec<Seen>>) -> Vec<Seen> {
    let mut s = UnixStream::connect(sock).unwrap();
    s.write_all(b"x").unwrap();
    fake.join().unwrap()
}

/// An older daemon may die of a second header it cannot read (SPEC.md §6): one
/// client probes a socket that closed on its HELLO at most once.
#[test]
fn an_older_daemon_is_probed_at_most_once_per_client() {
    let reg = Reg::new();
    reg.run(&["ls"]).ok();
    let sock = reg.path("old.sock");
    let fake = serve_fake(
        UnixListener::bind(&sock).unwrap(),
        Fake::CloseAfterLegacyHeader,
    );
    let client = latch_client::Client::open(&reg.root, support::latch_bin().into()).unwrap();
    let id = latch_wire::SessionId::new("old").unwrap();
    for attempt in 0..3 {
        match client.connect_unbound(&id) {
            Err(e) => assert_eq!(e.exit_code(), 8, "attempt {attempt}: {e}"),
            Ok(_) => panic!("attempt {attempt}: connected to an older daemon"),
        }
    }
    let seen = stop_fake(&sock, fake);
    assert_eq!(
        seen.len(),
        1,
        "the older daemon was probed {} times",
        seen.len()
    );
}

/// A record that is not latch's (an older tool's metadata under the same name) is a
/// degraded read: no command connects to its socket.
#[test]
fn a_record_that_is_not_latchs_is_never_connected_to() {
    let reg = Reg::new();
    reg.run(&["ls"]).ok();
    std::fs::write(
        reg.path("pty1.json"),
        br#"{"command":"bash","args":[],"cwd":"/tmp","createdAt":"2026-01-01T00:00:00.000Z","pid":1}"#,
    )
    .unwrap();
    let sock = reg.path("pty1.sock");
    let fake = serve_fake(
        UnixListener::bind(&sock).unwrap(),
        Fake::CloseAfterLegacyHeader,
    );
    for args in [
        vec!["status", "pty1"],
        vec!["peek", "pty1"],
        vec!["send", "pty1", "x"],
        vec!["kill", "pty1"],
        vec!["attach", "pty1"],
        vec!["rm", "pty1", "--force"],
    ] {
        let r = reg.run(&args);
        assert_eq!(r.code, 7, "{args:?}: {r:?}");
    }
    let r = reg.run(&["gc", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("degraded"), "{r:?}");
    let seen = stop_fake(&sock, fake);
    assert!(
        seen.is_empty(),
        "a command connected to the older daemon: {}",
        seen.len()
    );
    assert!(
        reg.path("pty1.json").exists(),
        "the older tool's record is untouched"
    );
}
