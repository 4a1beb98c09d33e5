//! Hostile programs inside a session: a program that floods terminal queries and never
//! reads its input, one that writes an endless OSC, and terminal events while another
//! process holds the session lock. Each must leave the daemon bounded and responsive
//! (SPEC §4.4, §8, §9.9).

mod support;

use support::Reg;

/// A perl program in raw mode that writes `$ARGV[1]` MB of DA1 queries without
/// reading, says FLOODED, waits for the file `$ARGV[0]`, then asks XTVERSION and
/// reads until its answer, reporting how many bytes of older answers came first.
const QUERY_FLOOD: &str = r#"
system("stty raw -echo");
$| = 1;
my $q = "\e[c" x 1000;
for (1 .. $ARGV[1] * 350) { print $q; }
print "FLOODED\r\n";
until (-e $ARGV[0]) { select(undef, undef, undef, 0.02); }
print "\e[>q";
my $buf = '';
my $at = -1;
while ($at < 0) {
    my $n = sysread(STDIN, my $c, 65536);
    last if !$n;
    $buf .= $c;
    $at = index($buf, "\eP>|latch");
}
print "STALE=$at DONE\r\n";
sleep 600;
"#;

/// Answers to a program that does not read are bounded: after a flood of queries,
/// the program gets at most the kernel's terminal buffer plus the daemon's small cap
/// of older answers (SPEC §8), and a query it makes once it reads again is answered.
#[test]
fn query_answers_of_a_program_that_does_not_read_are_bounded() {
    let reg = Reg::new();
    let go = reg.root.with_file_name("go");
    let go_arg = go.to_str().unwrap();
    reg.new_session("flood", &["perl", "-e", QUERY_FLOOD, go_arg, "8"]);
    reg.wait_for_within("flood", "FLOODED", 60);
    std::fs::write(&go, b"").unwrap();
    let screen = reg.wait_for_within("flood", "DONE", 60);
    let stale: usize = screen
        .split("STALE=")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count: {screen:?}"));
    eprintln!("{stale} bytes of older answers");
    // The pty holds up to about 68 KiB of unread input itself; before the bound the
    // daemon kept every answer (about 64 KiB per MiB of queries applied).
    assert!(stale <= 160 * 1024, "{stale} bytes of older answers");
}

/// The daemon's resident memory, from /proc.
fn vm_rss_kib(pid: u64) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

fn daemon_pid(reg: &Reg, id: &str) -> u64 {
    let r = reg.run(&["status", id, "--json"]);
    r.json()["daemonPid"]
        .as_u64()
        .unwrap_or_else(|| panic!("{r:?}"))
}

/// An endless OSC leaves the daemon's memory bounded (the emulator's parser is given
/// at most OSC_MAX bytes of it); once finished it is a title capped at TITLE_MAX, and
/// the session goes on (SPEC §4.4).
#[test]
fn a_huge_unterminated_osc_leaves_the_daemon_bounded() {
    let reg = Reg::new();
    let written = reg.root.with_file_name("written");
    let script = format!(
        "printf 'START\\n\\033]2;'; head -c 120000000 /dev/zero | tr '\\0' x; : > {w}; \
         read line; printf '\\007AFTER-%s\\n' \"$line\"; exec sleep 600",
        w = written.display()
    );
    reg.new_session("osc", &["sh", "-c", &script]);
    reg.wait_for("osc", "START");
    // Every byte was taken by the daemon (the terminal holds only a few KiB) once
    // the writer is done; a PEEK then applies all of it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !written.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the program never finished"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    reg.run(&["peek", "osc"]).ok();
    let pid = daemon_pid(&reg, "osc");
    let rss = vm_rss_kib(pid);
    eprintln!("daemon VmRSS after 120 MB of an unterminated OSC: {rss} KiB");
    assert!(rss < 64 * 1024, "{rss} KiB");
    reg.run(&["send", "osc", "go\r"]).ok();
    reg.wait_for("osc", "AFTER-go");
    // The event writer records off the output path (SPEC §9.9): the title event may
    // land after AFTER-go is on the screen, so the test waits for it.
    let r = reg.run(&[
        "events",
        "osc",
        "--json",
        "--wait",
        "title_change",
        "--timeout",
        "60",
    ]);
    let title = r
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|e| e["type"] == "title_change")
        .unwrap_or_else(|| panic!("no title event: {r:?}"));
    let title = title["title"].as_str().unwrap();
    assert!(
        title.len() <= 4096 && title.bytes().all(|b| b == b'x'),
        "{}",
        title.len()
    );
    assert!(vm_rss_kib(pid) < 64 * 1024);
}

/// A terminal event never stalls output: while another process holds the session
/// lock, the program rings the bell and prints a marker; the marker is on the screen
/// while the lock is still held, and the bell is recorded once it is released
/// (SPEC §9.9). Before, the daemon waited for the lock on its one thread and then
/// lost the event.
#[test]
fn a_terminal_event_waits_for_the_lock_off_the_output_path() {
    use std::io::BufRead;
    let reg = Reg::new();
    reg.new_session(
        "bell",
        &[
            "sh",
            "-c",
            "echo READY; read x; printf '\\007'; echo MARK-$x; exec sleep 600",
        ],
    );
    reg.wait_for("bell", "READY");
    // Holds the session lock (flock, as latch takes it) until its stdin closes.
    let mut holder = std::process::Command::new("perl")
        .args([
            "-e",
            "use Fcntl ':flock'; open(my $f, '>>', $ARGV[0]) or die; \
             flock($f, LOCK_EX) or die; $| = 1; print \"held\\n\"; <STDIN>;",
        ])
        .arg(reg.path("bell.lock"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(holder.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "held");
    reg.run(&["send", "bell", "go\r"]).ok();
    reg.wait_for("bell", "MARK-go");
    // The lock is still held: the marker did not wait for it.
    assert!(holder.try_wait().unwrap().is_none());
    let r = reg.run(&["events", "bell", "--json"]);
    assert!(!r.stdout.contains(r#""type":"bell""#), "{r:?}");
    drop(holder.stdin.take());
    holder.wait().unwrap();
    let r = reg.run(&[
        "events",
        "bell",
        "--wait",
        "bell",
        "--json",
        "--timeout",
        "10",
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.json()["type"], "bell", "{r:?}");
}

/// The OSC bound is the emulator's alone: an attached terminal gets a large OSC 52
/// (a clipboard payload, large by design) whole, as the program wrote it (SPEC §4.4).
#[test]
fn an_attached_terminal_gets_a_large_osc_whole() {
    use latch_client::AttachEvent;
    let reg = Reg::new();
    let inc = reg.new_session(
        "clip",
        &[
            "sh",
            "-c",
            "read x; printf '\\033]52;c;'; head -c 1000000 /dev/zero | tr '\\0' A; \
             printf '\\007'; echo END-52; exec sleep 600",
        ],
    );
    let c = support::client(&reg);
    let mut a = c
        .connect(&support::sref("clip", &inc))
        .unwrap()
        .attach(24, 80, latch_client::AttachMode::ReadWrite)
        .unwrap();
    a.reader
        .set_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    a.writer.input(b"go\r").unwrap();
    let mut seen = Vec::new();
    while !seen.windows(6).any(|w| w == b"END-52") {
        match a.reader.next_event().unwrap() {
            AttachEvent::Output(b) => seen.extend_from_slice(&b),
            other => panic!("{other:?}"),
        }
    }
    let mut want = b"\x1b]52;c;".to_vec();
    want.extend(std::iter::repeat_n(b'A', 1_000_000));
    want.push(0x07);
    assert!(
        seen.windows(want.len()).any(|w| w == want.as_slice()),
        "the OSC 52 did not arrive whole ({} bytes seen)",
        seen.len()
    );
}
