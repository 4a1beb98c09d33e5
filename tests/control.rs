//! `latch control` driven from Python's standard library, from SPEC §13 alone
//! (tests/py/control_test.py): out-of-order answers and cancel, stale references,
//! 100 malformed lines, 20 MB through a subscriber that reads nothing meanwhile,
//! and a reconnect that resumes from a cursor.

mod support;

use std::path::PathBuf;
use std::process::Command;

use support::{latch_bin, python, Reg};

fn scenario(name: &str) {
    let reg = Reg::new();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/py/control_test.py");
    let out = Command::new(python())
        .arg(script)
        .arg(name)
        .arg(latch_bin())
        .arg(&reg.root)
        .env_remove("LATCH_ROOT")
        .env_remove("LATCH_HOST")
        .env("SHELL", "/bin/sh")
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    eprintln!("{stdout}{stderr}");
    assert!(
        out.status.success() && stdout.contains(&format!("ok {name}")),
        "scenario {name} failed"
    );
}

#[test]
fn answers_come_out_of_order_and_a_stale_reference_is_refused() {
    scenario("out_of_order");
}

#[test]
fn a_hundred_malformed_lines_each_get_an_error_and_the_connection_goes_on() {
    scenario("malformed");
}

#[test]
fn twenty_megabytes_reach_an_unread_subscriber_as_exact_lagged_notices() {
    scenario("flood");
}

#[test]
fn a_reconnect_resumes_from_its_cursor_with_nothing_lost_or_doubled() {
    scenario("resume");
}

/// `run` through control is `latch run --json`'s run (SPEC §13.4): the command's
/// output and exit code, named by its creation; a stale reference types nothing.
#[test]
fn run_answers_with_the_commands_output_and_exit_code() {
    scenario("run");
}

/// `create` takes `latch new`'s restart policy, parent, resume command and cast
/// (SPEC §13.4): the program is restarted, hung up with its parent, the resume
/// command kept, the cast written.
#[test]
fn create_takes_what_new_takes() {
    scenario("create_options");
}

/// `peek` on a kept connection never shows another creation (SPEC §13.4).
#[test]
fn a_kept_connection_serves_only_its_creation() {
    scenario("kept_connections");
}

#[test]
fn the_schema_names_every_method() {
    let reg = Reg::new();
    let v = reg.run(&["control", "--schema"]).json();
    for m in [
        "initialize",
        "peek",
        "subscribe",
        "wait",
        "kill",
        "verifyReceipt",
    ] {
        assert!(v["methods"][m]["params"].is_object(), "{m}");
    }
    assert!(v["notifications"]["lagged"]["params"].is_object());
}
