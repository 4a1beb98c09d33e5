//! Pins SPEC.md §2.2, §2.4 and §9's constants to the registry's code.

use latch_registry::events::{EVENTS_MAX_BYTES, EVENTS_READ_MAX_BYTES};
use latch_registry::key::{INCARNATION_DOMAIN, KEY_LEN, OWNER_DOMAIN, OWNER_MAC_LEN};
use latch_registry::{
    DEFAULTS_FILE, DEFAULT_LOCK_WAIT, KEY_FILE, LOG_MAX_BYTES, RECORD_VERSION, RESERVED_IDS,
    SUN_PATH_MAX,
};

const SPEC: &str = include_str!("../../SPEC.md");

#[test]
fn registry_constants_match_spec() {
    assert!(SPEC.contains("`len(\"<root>/<id>.sock\") <= 107` bytes"));
    assert_eq!(SUN_PATH_MAX, 107);
    assert!(SPEC.contains("| `registry.key` | 32 random bytes"));
    assert_eq!((KEY_FILE, KEY_LEN), ("registry.key", 32));
    assert!(SPEC.contains("| `defaults.json` |"));
    assert_eq!(DEFAULTS_FILE, "defaults.json");
    assert!(SPEC.contains("waits at most 2 s (`DEFAULT_LOCK_WAIT`)"));
    assert_eq!(DEFAULT_LOCK_WAIT.as_secs(), 2);
    assert!(SPEC.contains("bounded at 256 KiB\n(`EVENTS_MAX_BYTES`)"));
    assert_eq!(EVENTS_MAX_BYTES, 256 * 1024);
    assert!(SPEC.contains("| EVENTS_MAX_BYTES | 262144 |"));
    assert!(SPEC.contains("| EVENTS_READ_MAX_BYTES | 327680 |"));
    assert_eq!(EVENTS_READ_MAX_BYTES, 327_680);
    assert!(SPEC.contains("| LOG_MAX_BYTES | 1048576 |"));
    assert_eq!(LOG_MAX_BYTES, 1_048_576);
    assert!(SPEC.contains("the id `defaults` is reserved\n(`RESERVED_IDS`)"));
    assert_eq!(RESERVED_IDS, ["defaults"]);
    assert!(SPEC.contains("| version | 1 or 2 | record format;"));
    assert_eq!(RECORD_VERSION, 2);
    {
        use latch_registry::supervision as sv;
        assert!(SPEC.contains("`--restart-delay` (default 250 ms)"));
        assert_eq!(sv::DEFAULT_RESTART_DELAY.as_millis(), 250);
        assert!(SPEC.contains("at most 30 s (`MAX_RESTART_DELAY`)"));
        assert_eq!(sv::MAX_RESTART_DELAY.as_secs(), 30);
        assert!(SPEC.contains("`--max-restarts` (default 5)"));
        assert_eq!(sv::DEFAULT_MAX_RESTARTS, 5);
        assert!(SPEC.contains("`--restart-window`\n  (default 60 s)"));
        assert_eq!(sv::DEFAULT_RESTART_WINDOW.as_secs(), 60);
    }
    assert!(SPEC.contains("HMAC-SHA256(key, \"latch/incarnation/v1\" || 0x00"));
    assert_eq!(INCARNATION_DOMAIN, b"latch/incarnation/v1");
    assert!(SPEC.contains("HMAC-SHA256(key, \"latch/owner/v1\" || 0x00"));
    assert_eq!(OWNER_DOMAIN, b"latch/owner/v1");
    assert!(SPEC.contains("lowercase hex (64 characters)"));
    assert_eq!(OWNER_MAC_LEN * 2, 64);
}

/// §9.14's caps of the one reader (§9.1) and of events lines.
#[test]
fn file_caps_match_spec() {
    use latch_registry::events::{EVENT_LINE_MAX_BYTES, EVENT_STRING_MAX_BYTES};
    use latch_registry::file::{FileKind, DEFAULTS_MAX_BYTES, RECEIPT_MAX_BYTES, RECORD_MAX_BYTES};
    for (row, value) in [
        ("RECORD_MAX_BYTES", RECORD_MAX_BYTES),
        ("DEFAULTS_MAX_BYTES", DEFAULTS_MAX_BYTES),
        ("RECEIPT_MAX_BYTES", RECEIPT_MAX_BYTES),
        ("KEY_LEN", KEY_LEN as u64),
        ("EVENT_LINE_MAX_BYTES", EVENT_LINE_MAX_BYTES as u64),
        ("EVENT_STRING_MAX_BYTES", EVENT_STRING_MAX_BYTES as u64),
    ] {
        assert!(SPEC.contains(&format!("| {row} | {value} |")), "{row}");
    }
    assert_eq!(FileKind::Record.max_bytes(), RECORD_MAX_BYTES);
    assert_eq!(FileKind::Defaults.max_bytes(), DEFAULTS_MAX_BYTES);
    assert_eq!(FileKind::Receipt.max_bytes(), RECEIPT_MAX_BYTES);
    assert_eq!(FileKind::Key.max_bytes(), KEY_LEN as u64);
    assert_eq!(FileKind::Events.max_bytes(), EVENTS_READ_MAX_BYTES);
    assert_eq!(
        FileKind::FinalScreen.max_bytes(),
        latch_registry::screen::FINAL_SCREEN_MAX_BYTES
    );
    assert_eq!(EVENT_LINE_MAX_BYTES as u64, EVENTS_MAX_BYTES / 4);
}

#[test]
fn final_screen_constants_match_spec() {
    use latch_registry::screen::{FINAL_FULL_MAX_BYTES, FINAL_SCREEN_MAX_BYTES};
    assert!(SPEC.contains("| FINAL_SCREEN_MAX_BYTES | 4194304 |"));
    assert_eq!(FINAL_SCREEN_MAX_BYTES, 4_194_304);
    assert!(SPEC.contains("| FINAL_FULL_MAX_BYTES | 1048576 |"));
    assert_eq!(FINAL_FULL_MAX_BYTES, 1_048_576);
    assert!(SPEC.contains("| `<id>.screen` |"));
    assert!(SPEC.contains("{\"version\": 1, \"id\", \"incarnation\", \"rows\", \"cols\","));
    assert_eq!(latch_registry::FINAL_SCREEN_VERSION, 1);
}

/// §9.9's table of event types and their extra fields, against [`Event`]'s serde
/// shape.
#[test]
fn event_types_match_spec() {
    use latch_registry::events::{kind, Change, Event, EventKind};
    use latch_wire::{Incarnation, SessionId};

    let start = SPEC.find("### 9.9 Events").unwrap();
    let rows: Vec<Vec<String>> = SPEC[start..]
        .lines()
        .skip_while(|l| !l.starts_with("| "))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_owned())
                .collect()
        })
        .collect();
    let id = SessionId::new("a").unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let reg = latch_registry::Registry::open(&tmp.path().join("r")).unwrap();
    let inc: Incarnation = reg.mint(&id).unwrap();
    let samples = [
        EventKind::SessionStart {
            command: vec![],
            daemon_pid: 1,
            child_pid: 2,
            owner: None,
        },
        EventKind::SessionExit {
            code: None,
            signal: None,
        },
        EventKind::MetadataChange {
            changes: [(
                "displayName".to_owned(),
                Change {
                    old: serde_json::Value::Null,
                    new: serde_json::Value::Null,
                },
            )]
            .into(),
        },
        EventKind::KillRequested { signal: 1 },
        EventKind::Removed,
        EventKind::Bell {
            dropped: Some(1),
            output_cursor: Some(1),
        },
        EventKind::TitleChange {
            title: String::new(),
            dropped: Some(1),
            output_cursor: Some(1),
        },
        EventKind::Notification {
            source: "osc9".into(),
            title: None,
            body: String::new(),
            dropped: Some(1),
            output_cursor: Some(1),
        },
        EventKind::CursorVisible {
            visible: true,
            dropped: Some(1),
            output_cursor: Some(1),
        },
        EventKind::SessionRespawn {
            previous_incarnation: inc,
            command: vec![],
            child_pid: 1,
            restarts: 1,
        },
        EventKind::SessionFlapping {
            restarts: 1,
            window_ms: 1,
        },
        EventKind::CastStart {
            file: "/c".into(),
            start_cursor: 0,
            max_bytes: None,
        },
        EventKind::CastStop {
            file: "/c".into(),
            reason: "exit".into(),
            bytes: 1,
            dropped_bytes: 0,
        },
    ];
    assert_eq!(rows.len(), samples.len(), "{rows:?}");
    for (row, sample) in rows.iter().zip(samples) {
        let ev = Event::new(&id, &inc, sample);
        assert_eq!(row[0], ev.type_name(), "§9.9's order is the code's");
        assert!(kind::ALL.contains(&ev.type_name()));
        let v = serde_json::to_value(&ev).unwrap();
        let mut got: Vec<String> = v
            .as_object()
            .unwrap()
            .keys()
            .filter(|k| !["ts", "type", "id", "incarnation"].contains(&k.as_str()))
            .cloned()
            .collect();
        got.sort();
        // The field names: the first word of each top-level item ("changes:
        // {key: {old, new}} with …" names `changes`).
        let mut want: Vec<String> = Vec::new();
        let (mut depth, mut item_start) = (0, true);
        for (i, c) in row[2].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => item_start = true,
                c if item_start && c.is_ascii_alphabetic() => {
                    let word: String = row[2][i..]
                        .chars()
                        .take_while(char::is_ascii_alphanumeric)
                        .collect();
                    want.push(word);
                    item_start = false;
                }
                c if item_start && c != ' ' => item_start = false,
                _ => {}
            }
        }
        want.sort();
        assert_eq!(got, want, "{}", row[0]);
        // And it reads back as the same typed event.
        let line = serde_json::to_vec(&ev).unwrap();
        assert_eq!(
            latch_registry::events::parse_line(&id, &line),
            latch_registry::events::ReadEvent::Known(ev)
        );
    }
}
