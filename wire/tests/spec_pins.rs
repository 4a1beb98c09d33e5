//! Pins SPEC.md's tables to the code by reading SPEC.md itself: if either side
//! changes alone, this fails.

use latch_wire::frame::{ErrorCode, CLIENT_NAME_MAX_LEN};
use latch_wire::framing::MAGIC;
use latch_wire::legacy::{code, LEGACY_DEFAULT_CAP, LEGACY_MAX_CAP};
use latch_wire::limits::*;
use latch_wire::{ids, version};

const SPEC: &str = include_str!("../../SPEC.md");

/// The rows (cells, trimmed) of the first table at or after `heading` (a heading,
/// or a table's header row).
fn table(heading: &str) -> Vec<Vec<String>> {
    let start = SPEC
        .find(heading)
        .unwrap_or_else(|| panic!("SPEC.md has no {heading:?}"));
    SPEC[start..]
        .lines()
        .skip_while(|l| !l.starts_with("| "))
        .take_while(|l| l.starts_with('|'))
        .skip(2) // header and separator
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_owned())
                .collect()
        })
        .collect()
}

#[test]
fn limits_table_matches_the_code() {
    let rows = table("## 8. Limits and timeouts");
    let want: &[(&str, u64)] = &[
        ("MAX_CLIENT_FRAME", MAX_CLIENT_FRAME as u64),
        ("MAX_SERVER_FRAME", MAX_SERVER_FRAME as u64),
        ("MAX_OUTPUT_CHUNK", MAX_OUTPUT_CHUNK as u64),
        ("HANDSHAKE_TIMEOUT_MS", HANDSHAKE_TIMEOUT_MS),
        ("MAX_CONNECTIONS", MAX_CONNECTIONS as u64),
        ("CLIENT_QUEUE_BYTES", CLIENT_QUEUE_BYTES as u64),
        ("CLIENT_QUEUE_ITEMS", CLIENT_QUEUE_ITEMS as u64),
        ("REPLY_QUEUE_BYTES", REPLY_QUEUE_BYTES as u64),
        ("REPLY_BUDGET_BYTES", REPLY_BUDGET_BYTES as u64),
        ("CLIENT_STALL_MS", CLIENT_STALL_MS),
        ("IDLE_UNBOUND_MS", IDLE_UNBOUND_MS),
        ("INPUT_QUEUE_BYTES", INPUT_QUEUE_BYTES as u64),
        ("PNG_MAX_PIXELS", PNG_MAX_PIXELS),
        ("OUTPUT_RING_BYTES", OUTPUT_RING_BYTES as u64),
        ("HIBERNATE_QUIET_MS", HIBERNATE_QUIET_MS),
        ("CASTS_MAX", CASTS_MAX as u64),
        ("CAST_QUEUE_BYTES", CAST_QUEUE_BYTES as u64),
        ("CAST_MAX_BYTES_MIN", CAST_MAX_BYTES_MIN),
        ("ANSWERS_QUEUED_MAX", ANSWERS_QUEUED_MAX as u64),
        ("COMMANDS_KEPT", COMMANDS_KEPT as u64),
        ("MAX_ROWS", u64::from(MAX_ROWS)),
        ("MAX_COLS", u64::from(MAX_COLS)),
        ("MAX_CELLS", u64::from(MAX_CELLS)),
        ("MAX_SCROLLBACK", MAX_SCROLLBACK as u64),
        ("CLIENT_NAME_MAX_LEN", CLIENT_NAME_MAX_LEN as u64),
        ("LEGACY_MAX_CAP", LEGACY_MAX_CAP as u64),
        ("LEGACY_DEFAULT_CAP", LEGACY_DEFAULT_CAP as u64),
    ];
    assert_eq!(rows.len(), want.len(), "{rows:?}");
    for (name, value) in want {
        let row = rows
            .iter()
            .find(|r| r[0] == *name)
            .unwrap_or_else(|| panic!("SPEC §8 lacks {name}"));
        assert_eq!(row[1].parse::<u64>().unwrap(), *value, "{name}");
    }
}

#[test]
fn error_code_table_matches_the_code() {
    let rows = table("### 4.3 Error codes");
    assert_eq!(rows.len(), 20);
    for row in rows {
        let n: u16 = row[0].parse().unwrap();
        let code = ErrorCode::from_u16(n);
        assert_eq!(code.name(), row[1], "code {n}");
        assert_eq!(code.is_fatal(), row[2] == "yes", "fatality of {}", row[1]);
    }
}

#[test]
fn frame_tables_match_the_code() {
    let client = table("### 4.1 Client frames");
    let names: Vec<(&str, &str)> = client
        .iter()
        .map(|r| (r[0].as_str(), r[1].as_str()))
        .collect();
    assert_eq!(
        names,
        [
            ("0", "HELLO"),
            ("1", "STATUS"),
            ("2", "BIND"),
            ("3", "ATTACH"),
            ("4", "PEEK"),
            ("5", "INPUT"),
            ("6", "RESIZE"),
            ("7", "SIGNAL"),
            ("8", "DETACH"),
            ("9", "PING"),
            ("10", "STOP"),
            ("11", "OUTPUT_SINCE (v3)"),
            ("12", "LEASE (v3)"),
            ("13", "RELEASE (v3)"),
            ("14", "COMMANDS (v3)"),
            ("15", "CAST_START (v3)"),
            ("16", "CASTS (v3)"),
            ("17", "ATTACH_TERMINAL (v4)"),
            ("18–19", "(reserved)"),
            ("20", "CAPTURE (v3)"),
        ]
    );
    let server = table("### 4.2 Server frames");
    let names: Vec<&str> = server.iter().map(|r| r[1].as_str()).collect();
    assert_eq!(
        names,
        [
            "WELCOME",
            "STATUS",
            "BOUND",
            "GEOMETRY",
            "SCREEN",
            "OUTPUT",
            "EXIT",
            "ERROR",
            "PONG",
            "DETACHED",
            "STATUS3 (v3)",
            "OUTPUT_RANGE (v3)",
            "CUT (v3)",
            "LEASED (v3)",
            "COMMANDS (v3)",
            "CASTS (v3)",
            "(reserved)",
            "CAPTURE (v3)",
        ]
    );
    // The indices themselves are pinned to the encoder in tests/frames.rs.
}

#[test]
fn legacy_table_matches_the_code() {
    let rows = table("| code | name | payload |");
    let got: Vec<(u8, &str)> = rows
        .iter()
        .map(|r| (r[0].parse().unwrap(), r[1].as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (code::DATA, "DATA"),
            (code::ATTACH, "ATTACH"),
            (code::DETACH, "DETACH"),
            (code::RESIZE, "RESIZE"),
            (code::EXIT, "EXIT"),
            (code::SCREEN, "SCREEN"),
            (code::PEEK, "PEEK"),
            (code::STATUS, "STATUS"),
            (code::GEOMETRY, "GEOMETRY"),
        ]
    );
}

#[test]
fn prose_constants_match_the_code() {
    assert!(SPEC.contains("MAGIC = 89 4C 41 54 43 48 0D 0A"));
    assert_eq!(MAGIC, [0x89, 0x4C, 0x41, 0x54, 0x43, 0x48, 0x0D, 0x0A]);
    assert!(SPEC.contains("`SESSION_ID_MAX_LEN = 64`"));
    assert_eq!(ids::SESSION_ID_MAX_LEN, 64);
    assert!(SPEC.contains("`SUPPORTED = {min: 2, max: 4}`"));
    assert_eq!((version::SUPPORTED.min, version::SUPPORTED.max), (2, 4));
    assert!(SPEC.contains("lowercase hex; 68 characters"));
    assert_eq!(ids::INCARNATION_TEXT_LEN, 68);
    assert!(SPEC.contains("\"latch/incarnation/v1\""));
    assert!(SPEC.contains("`OWNER_MAX_CHARS = 128`"));
    assert_eq!(latch_wire::OWNER_MAX_CHARS, 128);
    // The owner MAC's domain; registry/src/key.rs pins the construction itself.
    assert!(SPEC.contains("\"latch/owner/v1\""));
}

/// Every test SPEC §11 names as protecting an invariant exists in the workspace.
#[test]
fn every_invariant_names_tests_that_exist() {
    let rows = table("## 11. Invariants");
    assert_eq!(rows.len(), 10, "ten invariants");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut sources = String::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if path.is_dir() {
                if !name.starts_with('.') && name != "target" {
                    dirs.push(path);
                }
            } else if name.ends_with(".rs") {
                sources.push_str(&std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    let mut named = 0;
    for row in &rows {
        for cell in row[2].split('`').skip(1).step_by(2) {
            let test = cell.rsplit("::").next().unwrap();
            if test.contains('_') && !test.contains('/') && !test.contains('.') {
                named += 1;
                assert!(
                    sources.contains(&format!("fn {test}(")),
                    "SPEC §11 {} names {test}, which no source defines",
                    row[0]
                );
            }
        }
    }
    assert!(named >= 20, "{named}");
}
