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
