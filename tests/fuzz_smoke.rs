//! scripts/fuzz-smoke.sh, the fuzz smoke `.ci/run` runs: its budget is the total
//! across every target, and it never skips silently. The script runs for real; only
//! `cargo` is a stand-in on PATH, playing a machine with or without nightly and
//! cargo-fuzz, and recording the runs it is asked for.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/fuzz-smoke.sh");

/// A `cargo` that knows nightly and cargo-fuzz when `fuzz` is true, lists three
/// targets, and logs each `fuzz run`'s target and -max_total_time to `runs.log`.
fn fake_cargo(dir: &Path, nightly: bool, fuzz: bool) {
    let script = format!(
        r##"#!/bin/sh
nightly={nightly}
fuzz={fuzz}
[ "$1" = +nightly ] || exit 1
[ "$nightly" = true ] || exit 1
shift
case "$1" in
--version) echo "cargo 1.0.0-nightly"; exit 0 ;;
install) exit 1 ;;
fuzz) [ "$fuzz" = true ] || exit 1 ;;
*) exit 1 ;;
esac
case "$2" in
--version) echo "cargo-fuzz 0.0.0" ;;
build) ;;
list) printf 'alpha\nbeta\ngamma\n' ;;
run)
    target="$5"
    for a in "$@"; do
        case "$a" in -max_total_time=*) t="${{a#-max_total_time=}}" ;; esac
    done
    echo "$target $t" >> "{log}"
    echo "#100 DONE cov: 1 ft: 1 exec/s: 50 rss: 1Mb"
    ;;
esac
"##,
        log = dir.join("runs.log").display()
    );
    let path = dir.join("cargo");
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn smoke(dir: &Path, args: &[&str], skip: bool) -> Output {
    let path = format!("{}:{}", dir.display(), std::env::var("PATH").unwrap());
    let mut c = Command::new("bash");
    c.arg(SCRIPT)
        .args(args)
        .env("PATH", path)
        .env_remove("FUZZ_BUDGET");
    if skip {
        c.env("LATCH_FUZZ", "skip");
    } else {
        c.env_remove("LATCH_FUZZ");
    }
    c.output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn the_budget_is_split_across_every_target() {
    let dir = tempfile::tempdir().unwrap();
    fake_cargo(dir.path(), true, true);
    let out = smoke(dir.path(), &["10"], false);
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let log = std::fs::read_to_string(dir.path().join("runs.log")).unwrap();
    let runs: Vec<(&str, u32)> = log
        .lines()
        .map(|l| {
            let (t, s) = l.split_once(' ').unwrap();
            (t, s.parse().unwrap())
        })
        .collect();
    let names: Vec<&str> = runs.iter().map(|r| r.0).collect();
    assert_eq!(names, ["alpha", "beta", "gamma"]);
    let total: u32 = runs.iter().map(|r| r.1).sum();
    assert_eq!(total, 10, "{runs:?}");
    assert!(runs.iter().all(|r| r.1 >= 3), "{runs:?}");
}

#[test]
fn without_nightly_it_fails_loudly() {
    let dir = tempfile::tempdir().unwrap();
    fake_cargo(dir.path(), false, false);
    let out = smoke(dir.path(), &["10"], false);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("fuzz-smoke: FAILED"),
        "{}",
        text(&out.stderr)
    );
    assert!(!dir.path().join("runs.log").exists());
}

#[test]
fn without_cargo_fuzz_that_cannot_be_installed_it_fails_loudly() {
    let dir = tempfile::tempdir().unwrap();
    fake_cargo(dir.path(), true, false);
    let out = smoke(dir.path(), &["10"], false);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("fuzz-smoke: FAILED"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn only_an_explicit_opt_out_skips_and_it_says_so() {
    let dir = tempfile::tempdir().unwrap();
    fake_cargo(dir.path(), false, false);
    let out = smoke(dir.path(), &["10"], true);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("fuzz-smoke: SKIPPED"),
        "{}",
        text(&out.stdout)
    );
    assert!(!dir.path().join("runs.log").exists());
}
