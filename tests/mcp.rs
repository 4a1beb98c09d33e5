//! `latch mcp` driven by the official MCP Python SDK's stdio client
//! (tests/py/mcp_test.py): the tools listed, a session created, written to and
//! read back, killed by its reference, then replaced: the stale reference is
//! refused with nothing done. And `--read-only` offers only the observing tools.

mod support;

use std::path::PathBuf;
use std::process::Command;

use support::{latch_bin, python, Reg};

fn scenario(name: &str) {
    let reg = Reg::new();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/py/mcp_test.py");
    let mut cmd = Command::new(python());
    cmd.arg(script).arg(name).arg(latch_bin()).arg(&reg.root);
    if let Some(t) = std::env::var_os("LATCH_MCP_TRANSCRIPT") {
        cmd.arg(t);
    }
    let out = cmd
        .env_remove("LATCH_ROOT")
        .env_remove("LATCH_HOST")
        .env("SHELL", "/bin/sh")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success() && stdout.contains(&format!("ok {name}")),
        "scenario {name} failed"
    );
}

#[test]
fn an_agent_creates_sends_reads_kills_and_a_stale_reference_is_refused() {
    scenario("session");
}

#[test]
fn read_only_offers_only_the_observing_tools() {
    scenario("read_only");
}
