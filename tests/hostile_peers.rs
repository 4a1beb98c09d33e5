//! End to end: hostile peers and hosts cost a bounded amount and go nowhere
//! (SPEC.md §8, §9.11, §12.2). The bridge is spoken to directly over its stdio, as
//! ssh would; `$LATCH_SSH` stands in for ssh where a caller is under test.

mod support;

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};
use support::{latch_bin, Reg};

/// Writes an executable shell script.
fn script(path: &Path, body: &str) -> PathBuf {
    std::fs::write(path, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.to_owned()
}

/// An "ssh" that only notes it was run (one line per run) and fails as ssh does.
fn ssh_marker(reg: &Reg) -> (PathBuf, PathBuf) {
    let mark = reg.root.with_file_name("ssh-was-run");
    let ssh = script(
        &reg.root.with_file_name("marker-ssh"),
        &format!("echo \"$@\" >> '{}'\nexit 255\n", mark.display()),
    );
    (ssh, mark)
}

/// An "ssh" that runs this host's own bridge (whatever host it is given), noting
/// each run.
fn ssh_loopback(reg: &Reg) -> (PathBuf, PathBuf) {
    let mark = reg.root.with_file_name("loopback-runs");
    let ssh = script(
        &reg.root.with_file_name("loopback-ssh"),
        &format!(
            "echo run >> '{}'\nexec '{}' bridge\n",
            mark.display(),
            latch_bin()
        ),
    );
    (ssh, mark)
}

fn request(op: Value) -> Value {
    let mut r = json!({"remote": {"min": 2, "max": 2}, "latch": "test"});
    r.as_object_mut()
        .unwrap()
        .extend(op.as_object().unwrap().clone());
    r
}

/// Runs `latch bridge` with `line` then `rest` on its stdin, as ssh would.
fn bridge(reg: &Reg, env: &[(&str, &Path)], line: &Value, rest: &[u8]) -> Output {
    let mut cmd = Command::new(latch_bin());
    cmd.arg("bridge")
        .env("LATCH_ROOT", &reg.root)
        .env("LATCH_HOST", "evil")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{line}").unwrap();
    // The bridge may refuse before it has read it all.
    let _ = stdin.write_all(rest);
    drop(stdin);
    child.wait_with_output().unwrap()
}

/// A valid patch followed by blanks: `size` bytes of JSON in all.
fn padded_patch(size: usize) -> Vec<u8> {
    let mut p = br#"{"tags": {"big": "1"}}"#.to_vec();
    p.resize(size, b' ');
    p
}

#[test]
fn meta_patch_reads_a_bounded_patch_locally() {
    let reg = Reg::new();
    reg.new_session("mp", &["sleep", "600"]);
    let over = padded_patch(64 * 1024 + 1);
    let r = reg.run_stdin(
        &["meta", "patch", "--id", "mp"],
        std::str::from_utf8(&over).unwrap(),
    );
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stdout.contains("bound"), "{r:?}");
    assert!(reg.record("mp")["tags"].get("big").is_none());

    // At the bound, it is a patch like any other.
    let at = padded_patch(64 * 1024);
    let r = reg.run_stdin(
        &["meta", "patch", "--id", "mp"],
        std::str::from_utf8(&at).unwrap(),
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(reg.record("mp")["tags"]["big"], "1");
}

#[test]
fn meta_patch_reads_a_bounded_patch_through_the_bridge() {
    let reg = Reg::new();
    reg.new_session("mb", &["sleep", "600"]);
    // The host bounds a patch it is sent as the caller does (SPEC.md §12.2).
    let tags: serde_json::Map<String, serde_json::Value> = (0..4000)
        .map(|i| (format!("k{i:05}"), json!("v".repeat(16))))
        .collect();
    let big = json!({"tags": tags});
    assert!(big.to_string().len() > 64 * 1024);
    let line = request(json!({"patch": {"reference": "mb", "patch": big}}));
    let out = bridge(&reg, &[], &line, b"");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(reg.record("mb")["tags"].get("k00000").is_none());
    let fits: serde_json::Value = serde_json::from_slice(&padded_patch(64 * 1024)).unwrap();
    reg.new_session("mf", &["sleep", "600"]);
    let line = request(json!({"patch": {"reference": "mf", "patch": fits}}));
    let out = bridge(&reg, &[], &line, b"");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(reg.record("mf")["tags"]["big"], "1");

    // The caller reads (and bounds) the patch before ssh starts.
    let (ssh, runs) = ssh_loopback(&reg);
    let mut child = reg
        .cmd()
        .args(["--host", "here", "meta", "patch", "--id", "mb"])
        .env("LATCH_SSH", &ssh)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let _ = stdin.write_all(&padded_patch(1 << 20));
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(!runs.exists(), "ssh was started");
    assert!(reg.record("mb")["tags"].get("big").is_none());

    // A patch within the bound goes through.
    let r = reg
        .cmd()
        .args(["--host", "here", "meta", "patch", "--id", "mb"])
        .env("LATCH_SSH", &ssh)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            c.stdin.take().unwrap().write_all(&padded_patch(100))?;
            c.wait_with_output()
        })
        .unwrap();
    assert_eq!(r.status.code(), Some(0), "{r:?}");
    assert_eq!(reg.record("mb")["tags"]["big"], "1");
}

/// The header a real bridge answers with.
fn real_header(reg: &Reg) -> String {
    let line = request(json!({"exec": {"args": ["--version"]}}));
    let out = bridge(reg, &[], &line, b"");
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines().next().unwrap().to_owned()
}

#[test]
fn an_oversized_ls_answer_is_a_protocol_error_naming_the_host() {
    let reg = Reg::new();
    reg.new_session("ls1", &["sleep", "600"]);
    // A bridge that answers a valid header, then 17 MB of blanks and an empty list.
    let header = real_header(&reg);
    let ssh = script(
        &reg.root.with_file_name("flood-ssh"),
        &format!(
            "read -r _\nprintf '%s\\n' '{header}'\nhead -c 17000000 /dev/zero | tr '\\0' ' '\n\
             echo '[]'\n"
        ),
    );
    let r = Run::of(
        reg.cmd()
            .args(["ls", "--host", "flood", "--json"])
            .env("LATCH_SSH", &ssh),
    );
    assert_eq!(r.code, 8, "{r:?}");
    assert!(r.stderr.contains("host flood"), "{r:?}");
    assert!(r.stderr.contains("bound"), "{r:?}");

    // An answer within the bound is merged as before.
    let (ssh, _) = ssh_loopback(&reg);
    let r = Run::of(
        reg.cmd()
            .args(["ls", "--host", "here", "--json"])
            .env("LATCH_SSH", &ssh),
    );
    assert_eq!(r.code, 0, "{r:?}");
    let rows: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(rows[0]["id"], "ls1");
    assert_eq!(rows[0]["host"], "here");
}

/// A finished command.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn of(cmd: &mut Command) -> Self {
        let o = cmd.output().unwrap();
        Self {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

#[test]
fn a_bridge_never_routes_a_host_ref_in_its_requests() {
    let reg = Reg::new();
    reg.new_session("abcd", &["sleep", "600"]);
    let (ssh, mark) = ssh_marker(&reg);
    let env = [("LATCH_SSH", ssh.as_path())];
    let tag = json!({"tags": {"k": "v"}});
    for (op, ok) in [
        (
            json!({"patch": {"reference": "evil:abcd", "patch": tag}}),
            false,
        ),
        (
            json!({"status": {"session": "evil:abcd@v1.00000000000000000000000000000000.00000000000000000000000000000000"}}),
            false,
        ),
        (
            json!({"remove": {"reference": "evil:abcd", "force": true}}),
            false,
        ),
        (json!({"connect": {"reference": "evil:abcd"}}), false),
        (
            json!({"command": {"command": {"stats": {"reference": "evil:abcd", "pre": {}, "all": false}}}}),
            false,
        ),
        // Version 1's argument re-runs are served by no version-2 bridge.
        (
            json!({"exec": {"args": ["--host", "evil", "tag", "abcd", "k=v"]}}),
            false,
        ),
        (json!({"patch": {"reference": "abcd", "patch": tag}}), true),
    ] {
        let line = request(op.clone());
        let out = bridge(&reg, &env, &line, b"");
        assert!(!mark.exists(), "{op}: the bridge ran ssh: {out:?}");
        let code = out.status.code();
        if ok {
            assert_eq!(code, Some(0), "{op}: {out:?}");
        } else {
            assert_ne!(code, Some(0), "{op}: {out:?}");
        }
    }
    // Only the local REF acted.
    assert_eq!(reg.record("abcd")["tags"]["k"], "v");
    assert!(reg.path("abcd.json").exists());
}

#[test]
fn a_bridge_never_routes_a_create() {
    let reg = Reg::new();
    let (ssh, mark) = ssh_marker(&reg);
    let env = [("LATCH_SSH", ssh.as_path())];
    // A create is `new`'s arguments as parsed (SPEC.md §12.2): a command line, or
    // a host among them, is no create, and nothing is created or routed.
    let line = request(json!({"connect": {
        "create": ["--host", "evil", "--id", "far", "--", "sleep", "600"]
    }}));
    let out = bridge(&reg, &env, &line, b"");
    assert!(!mark.exists(), "the bridge's create ran ssh: {out:?}");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(!reg.path("far.json").exists());
    let line = request(json!({"connect": {
        "create": {"detached": true, "id": "far", "host": "evil", "command": ["sleep", "600"]}
    }}));
    let out = bridge(&reg, &env, &line, b"");
    assert!(!mark.exists(), "the bridge's create ran ssh: {out:?}");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(!reg.path("far.json").exists());

    // `--host` in the program's arguments is the program's, created here.
    let line = request(json!({"connect": {
        "create": {"detached": true, "id": "near",
                   "command": ["sh", "-c", "exec sleep 600", "x", "--host", "evil"]}
    }}));
    let out = bridge(&reg, &env, &line, b"");
    assert!(!mark.exists(), "{out:?}");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let command = reg.record("near")["command"].clone();
    assert_eq!(
        command,
        json!(["sh", "-c", "exec sleep 600", "x", "--host", "evil"])
    );
}

#[test]
fn the_host_is_taken_off_the_ref_not_off_an_equal_option_value() {
    let reg = Reg::new();
    let made = reg.run(&[
        "new",
        "-d",
        "--id",
        "sess1",
        "--owner",
        "here:sess1",
        "--",
        "sleep",
        "600",
    ]);
    assert_eq!(made.code, 0, "{made:?}");
    let (ssh, runs) = ssh_loopback(&reg);
    let r = Run::of(
        reg.cmd()
            .args(["tag", "--owner", "here:sess1", "here:sess1", "k=v"])
            .env("LATCH_SSH", &ssh),
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(reg.record("sess1")["tags"]["k"], "v");
    let runs = std::fs::read_to_string(runs).unwrap();
    assert_eq!(runs.lines().count(), 1, "one ssh, none from the bridge");
}

/// Connects raw, and sends HELLO, BIND and PEEK (full scrollback) at once.
fn raw_full_peek(reg: &Reg, id: &str, inc: &str) -> std::os::unix::net::UnixStream {
    use latch_wire::{ClientCodec, ClientFrame, Incarnation, PeekRequest, SessionId, SUPPORTED};
    let mut s = std::os::unix::net::UnixStream::connect(reg.path(&format!("{id}.sock"))).unwrap();
    let mut codec = ClientCodec::default();
    let mut buf = bytes::BytesMut::new();
    for f in [
        ClientFrame::Hello {
            versions: SUPPORTED,
            client: "hostile-peers-test".into(),
        },
        ClientFrame::Bind {
            id: SessionId::new(id).unwrap(),
            incarnation: Incarnation::parse(inc).unwrap(),
        },
        ClientFrame::Peek(PeekRequest {
            plain: true,
            full: true,
        }),
    ] {
        codec.encode_client(&f, &mut buf).unwrap();
    }
    s.write_all(&buf).unwrap();
    s
}

/// Reads frames until the SCREEN; returns it.
fn read_screen(mut s: std::os::unix::net::UnixStream) -> Vec<u8> {
    use latch_wire::{ClientCodec, ServerFrame};
    use std::io::Read;
    s.set_read_timeout(Some(std::time::Duration::from_secs(120)))
        .unwrap();
    let mut codec = ClientCodec::default();
    let mut buf = bytes::BytesMut::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        while let Some(frame) = codec.decode_server(&mut buf).unwrap() {
            match frame {
                ServerFrame::Screen(b) => return b.to_vec(),
                ServerFrame::Welcome { .. } | ServerFrame::Bound { .. } => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        let n = s.read(&mut chunk).unwrap();
        assert!(n > 0, "closed before the SCREEN");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Waits (a bounded poll of the daemon's own log) until it holds `count` lines with
/// `text`; returns them, or what it has at the deadline.
fn wait_log(reg: &Reg, id: &str, text: &str, count: usize) -> Vec<String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let log = std::fs::read_to_string(reg.path(&format!("{id}.log"))).unwrap_or_default();
        let lines: Vec<String> = log
            .lines()
            .filter(|l| l.contains(text))
            .map(str::to_owned)
            .collect();
        if lines.len() >= count || std::time::Instant::now() > deadline {
            return lines;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Connections that each send PEEK full and never read: once the daemon's unread
/// replies would pass its reply budget (lowered to 1 MiB for the test; each screen
/// is about 800 KB, and a socket buffer takes far less than the 600 KB that would
/// let a second one in), a PEEK waits without being queued, by the daemon's own
/// account: the first is queued, the other two wait. STATUS and a small PEEK of
/// another client are still answered, and every PEEK gets its whole screen once
/// its client reads (SPEC.md §8).
#[test]
fn unread_full_peeks_wait_for_the_shared_reply_budget_and_all_are_answered() {
    let reg = Reg::new();
    let made = reg
        .cmd()
        .env("LATCH_TEST_REPLY_BUDGET", "1048576")
        .args([
            "new",
            "-d",
            "--json",
            "--id",
            "pb",
            "--",
            "sh",
            "-c",
            "yes 0123456789012345678901234567890123456789012345678901234567890123456789abcdefgh \
             | head -n 10000; echo READY; exec sleep 600",
        ])
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let inc = reg.record("pb")["incarnation"].as_str().unwrap().to_owned();
    reg.wait_for("pb", "READY");

    let raws: Vec<_> = (0..3).map(|_| raw_full_peek(&reg, "pb", &inc)).collect();
    let waits = wait_log(&reg, "pb", "PEEK waits for the reply budget", 2);
    assert_eq!(waits.len(), 2, "{waits:?}");
    for line in &waits {
        assert!(line.contains("of 1048576 bytes"), "{line}");
    }

    // Control and a small PEEK are served meanwhile.
    assert_eq!(reg.run(&["status", "pb"]).code, 0);
    let peek = reg.run(&["peek", "pb"]);
    assert!(peek.ok().contains("READY"), "{peek:?}");

    // Every PEEK gets its whole screen once read.
    let screens: Vec<Vec<u8>> = std::thread::scope(|scope| {
        let readers: Vec<_> = raws
            .into_iter()
            .map(|s| scope.spawn(move || read_screen(s)))
            .collect();
        readers.into_iter().map(|r| r.join().unwrap()).collect()
    });
    for screen in screens {
        let text = String::from_utf8_lossy(&screen);
        assert!(text.contains("READY"), "{} bytes", screen.len());
        assert!(screen.len() > 700_000, "{} bytes", screen.len());
    }
}
