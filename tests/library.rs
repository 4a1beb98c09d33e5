//! latch-client as a library: the async API driving many real sessions from one
//! runtime, the examples run as programs, and bad input from a library caller.

mod support;

use std::cell::Cell;
use std::time::{Duration, Instant};

use latch_client::{exit, Client, ClientError, NewSession, PeekOptions, UnreachableCause};
use latch_wire::{SessionId, SessionRef};
use support::{client, Reg};

/// A session whose program first prints the creation it belongs to, as the daemon
/// put it in its environment, then echoes its input.
fn announcing(id: &str) -> NewSession {
    let mut new = NewSession::default();
    new.id = Some(SessionId::new(id).unwrap());
    new.command = vec![
        "sh".into(),
        "-c".into(),
        r#"echo "I am $LATCH_SESSION_ID@$LATCH_INCARNATION"; exec cat"#.into(),
    ];
    new
}

/// Every `I am ID@INC` and `echo-ID` token on a screen names `me`; returns how
/// many tokens name some other session.
fn foreign_tokens(screen: &[u8], me: &SessionRef) -> usize {
    let text = String::from_utf8_lossy(screen);
    let mine_intro = format!("I am {me}");
    let mine_echo = format!("echo-{}", me.id);
    text.split_whitespace()
        .zip(text.split_whitespace().skip(1))
        .filter(|(a, b)| {
            (*a == "am" && b.contains('@') && format!("I am {b}") != mine_intro)
                || (b.starts_with("echo-") && *b != mine_echo)
        })
        .count()
}

/// 100 sessions driven concurrently from one current-thread runtime: each is
/// bound, asked STATUS, waited on, peeked and sent input; every answer is checked
/// against the creation its connection was bound to.
#[test]
fn async_hundred_sessions_on_one_current_thread_runtime() {
    const N: usize = 100;
    let reg = Reg::new();
    let c = client(&reg);
    let sessions: Vec<SessionRef> = (0..N)
        .map(|i| c.create(announcing(&format!("a{i:03}"))).unwrap().session())
        .collect();
    // The checker itself tells another creation's tokens apart.
    let other = format!("I am {}\necho-{}", sessions[1], sessions[1].id);
    assert_eq!(foreign_tokens(other.as_bytes(), &sessions[0]), 2);
    assert_eq!(foreign_tokens(other.as_bytes(), &sessions[1]), 0);
    let checked = Cell::new(0usize);
    let misdirected = Cell::new(0usize);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    let results = rt.block_on(futures_util::future::join_all(sessions.iter().map(|s| {
        let (c, checked, misdirected) = (&c, &checked, &misdirected);
        async move {
            let count = |foreign: bool| {
                checked.set(checked.get() + 1);
                if foreign {
                    misdirected.set(misdirected.get() + 1);
                }
            };
            let limit = Duration::from_secs(60);
            let mut bound = c.connect_async(s).await?;
            let st = bound.status().await?;
            count(st.id != s.id || st.incarnation != s.incarnation);
            let intro = format!("I am {s}");
            let screen = c
                .wait_for_text_async(s, "I am ", PeekOptions::plain(), limit)
                .await?;
            count(
                !String::from_utf8_lossy(&screen).contains(&intro)
                    || foreign_tokens(&screen, s) > 0,
            );
            bound.send(format!("echo-{}\n", s.id).as_bytes()).await?;
            count(false);
            let echo = format!("echo-{}", s.id);
            let screen = c
                .wait_for_text_async(s, &echo, PeekOptions::plain(), limit)
                .await?;
            count(foreign_tokens(&screen, s) > 0);
            let screen = bound.peek(PeekOptions::plain()).await?;
            let text = String::from_utf8_lossy(&screen).into_owned();
            count(
                !text.contains(&intro) || !text.contains(&echo) || foreign_tokens(&screen, s) > 0,
            );
            Ok::<_, ClientError>(())
        }
    })));
    let wall = started.elapsed();
    for (s, r) in sessions.iter().zip(&results) {
        assert!(r.is_ok(), "session {s}: {r:?}");
    }
    println!(
        "async-100: sessions={N} responses_checked={} misdirected={} wall={:.3}s",
        checked.get(),
        misdirected.get(),
        wall.as_secs_f64()
    );
    assert_eq!(checked.get(), 5 * N);
    assert_eq!(misdirected.get(), 0);
}

/// An example program of latch-client, built by `cargo test --workspace` (and
/// `cargo build --examples`) beside the `latch` binary.
fn example(name: &str) -> std::path::PathBuf {
    let path = std::path::Path::new(support::latch_bin())
        .parent()
        .unwrap()
        .join("examples")
        .join(name);
    assert!(
        path.is_file(),
        "{} is missing: run `cargo test --workspace` (it builds latch-client's examples)",
        path.display()
    );
    path
}

/// The supervisor example starts three jobs, waits for each one's output, and
/// stops them by receipt while a rival replaces the first: the replacement is
/// reported and left running, the other two are stopped.
#[test]
fn supervisor_example_stops_by_receipt_and_leaves_a_replacement_alone() {
    let reg = Reg::new();
    let c = client(&reg);
    let state = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(example("supervisor"))
        .args(["--root".as_ref(), reg.root.as_os_str()])
        .args(["--state".as_ref(), state.path().as_os_str()])
        .args(["--latch", support::latch_bin(), "-n", "3", "--race"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    for i in 0..3 {
        assert!(stdout.contains(&format!("job-{i} ready")), "{stdout}");
    }
    assert!(
        stdout.contains("job-0 replaced: left alone (now v"),
        "{stdout}"
    );
    assert!(stdout.contains("job-1 stopped (Killed)"), "{stdout}");
    assert!(stdout.contains("job-2 stopped (Killed)"), "{stdout}");
    // The successor runs: the receipt's creation is gone, the rival's is not.
    let receipt = c.load_receipt(&state.path().join("job-0.receipt")).unwrap();
    let now = c.resolve("job-0", None).unwrap();
    assert_ne!(now.session.incarnation, receipt.incarnation);
    assert_eq!(
        latch_client::derive_status(&now.record),
        latch_client::SessionStatus::Running
    );
    assert!(support::alive(now.record.child.pid));
    for i in 1..3 {
        let t = c.resolve(&format!("job-{i}"), None).unwrap();
        assert_eq!(latch_client::derive_status(&t.record).name(), "exited");
    }
}

/// The watcher example mirrors a session's output to a file until the program
/// exits, and exits with the program's code.
#[test]
fn watcher_example_mirrors_output_until_exit() {
    use std::io::BufRead;
    let reg = Reg::new();
    let c = client(&reg);
    let mut new = NewSession::default();
    new.id = Some(SessionId::new("w").unwrap());
    new.command = vec![
        "sh".into(),
        "-c".into(),
        r#"read x; echo "got $x"; exit 3"#.into(),
    ];
    let s = c.create(new).unwrap().session();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("w.log");
    let mut watcher = std::process::Command::new(example("watcher"))
        .args(["--root".as_ref(), reg.root.as_os_str()])
        .args(["--latch", support::latch_bin(), "w"])
        .arg(&file)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(watcher.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with(&format!("watching {s}")), "{line:?}");
    // Delivered either way: `false` means the program read it, answered and
    // exited before the daemon confirmed (SPEC §5.3); the mirror shows it below.
    c.send(&s, b"hello\n").unwrap();
    let status = watcher.wait().unwrap();
    assert_eq!(status.code(), Some(3));
    let mirrored = String::from_utf8_lossy(&std::fs::read(&file).unwrap()).into_owned();
    assert!(mirrored.contains("got hello"), "{mirrored:?}");
}

/// Bad input from a library caller gets the CLI's typed errors, never a panic:
/// blocking and async alike.
#[test]
fn bad_input_gets_typed_errors() {
    let reg = Reg::new();
    let c = client(&reg);
    // References: empty, a malformed incarnation, an id that cannot exist.
    for (reference, code) in [
        ("", exit::USAGE),
        ("a@v1.not-hex", exit::USAGE),
        ("a@", exit::USAGE),
        ("@v1.00", exit::USAGE),
        ("nobody", exit::NOT_FOUND),
    ] {
        let e = c.resolve(reference, None).unwrap_err();
        assert_eq!(e.exit_code(), code, "{reference:?}: {e}");
    }
    // The command line says the same (SPEC.md §2.3).
    let run = reg.run(&["peek", ""]);
    assert_eq!(run.code, exit::USAGE, "{run:?}");
    // A size no terminal has, a display name with a newline.
    let mut new = NewSession::default();
    new.rows = u16::MAX;
    assert_eq!(c.create(new).unwrap_err().exit_code(), exit::USAGE);
    let mut new = NewSession::default();
    new.name = Some("two\nlines".into());
    assert_eq!(c.create(new).unwrap_err().exit_code(), exit::USAGE);
    // A root that is a file.
    let file = reg.root.join("not-a-dir");
    std::fs::write(&file, b"").unwrap();
    assert!(Client::open(&file, support::latch_bin().into()).is_err());

    // A closed connection, async: the daemon went away under a bound connection.
    let s = c.create(announcing("gone")).unwrap().session();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut held = c.connect_async(&s).await.unwrap();
        c.kill(&s, libc::SIGKILL, Some(Duration::from_secs(5)))
            .unwrap();
        let e = held.peek(PeekOptions::plain()).await.unwrap_err();
        assert_eq!(e.exit_code(), exit::UNREACHABLE, "{e}");
        assert!(matches!(
            e.unreachable_cause(),
            Some(UnreachableCause::Closed | UnreachableCause::Io)
        ));
        // Connecting again says why: the session has exited.
        let e = c.connect_async(&s).await.unwrap_err();
        assert_eq!(e.unreachable_cause(), Some(UnreachableCause::Exited), "{e}");
    });
}

/// The client and the async API's futures can move between a multi-thread
/// runtime's workers (`tokio::spawn` with an `Arc<Client>`).
#[test]
fn async_api_is_send() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>(_: &T) {}
    send_sync::<Client>();
    send_sync::<latch_client::nonblocking::Bound>();
    let reg = Reg::new();
    let c = client(&reg);
    let s = c.create(announcing("send")).unwrap().session();
    let fut = c.connect_async(&s);
    send(&fut);
    let wait = c.wait_for_text_async(&s, "x", PeekOptions::plain(), Duration::from_secs(1));
    send(&wait);
}

/// The waits and runs of SPEC §4.7, async: `nonblocking::run` types a command into
/// real bash and returns its exit code and output, and `nonblocking::wait` sees a
/// text written after a cursor, while the current-thread runtime goes on serving
/// another task (a ticker that must keep ticking during the run).
#[test]
fn async_run_and_wait_leave_the_runtime_free() {
    use latch_client::{nonblocking, Condition, RunOptions, Waited};
    use std::sync::{Arc, Mutex};
    let reg = Reg::new();
    let c = Arc::new(client(&reg));
    let mut new = NewSession::default();
    new.id = Some(SessionId::new("ab").unwrap());
    new.command = vec!["bash".into()];
    let s = c.create(new).unwrap().session();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let ticks = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let ticker = {
            let ticks = ticks.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    ticks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            })
        };
        let out = Arc::new(Mutex::new(Vec::new()));
        let sink = out.clone();
        let opts = RunOptions {
            timeout: Duration::from_secs(60),
            ..RunOptions::default()
        };
        let ran = nonblocking::run(
            c.clone(),
            s.clone(),
            "sleep 0.3; echo async-$((6*7)); (exit 3)".into(),
            opts,
            move |b| sink.lock().unwrap().extend_from_slice(b),
        )
        .await
        .unwrap();
        assert_eq!(ran.exit_code, Some(3));
        let text = String::from_utf8_lossy(&out.lock().unwrap()).into_owned();
        assert!(text.contains("async-42"), "{text:?}");
        // The runtime's one thread served the ticker during the 0.3 s sleep.
        assert!(
            ticks.load(std::sync::atomic::Ordering::Relaxed) > 0,
            "the run blocked the runtime"
        );
        let (_, status) = c.status_full_of(&s).unwrap();
        let cursor = status.unwrap().output_cursor;
        let waiter = tokio::spawn(nonblocking::wait(
            c.clone(),
            s.clone(),
            Condition::Text("late-marker".into()),
            Some(cursor),
            Duration::from_secs(60),
        ));
        nonblocking::run(
            c.clone(),
            s.clone(),
            "echo late-mark''er".into(),
            RunOptions {
                timeout: Duration::from_secs(60),
                ..RunOptions::default()
            },
            |_| {},
        )
        .await
        .unwrap();
        let waited = waiter.await.unwrap().unwrap();
        assert!(
            matches!(waited, Waited::At { cursor: at } if at > cursor),
            "{waited:?}"
        );
        ticker.abort();
    });
    c.kill(&s, libc::SIGKILL, Some(Duration::from_secs(5)))
        .unwrap();
}
