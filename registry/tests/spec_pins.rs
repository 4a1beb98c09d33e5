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
    assert!(SPEC.contains("| version | 1 | record format |"));
    assert_eq!(RECORD_VERSION, 1);
    assert!(SPEC.contains("HMAC-SHA256(key, \"latch/incarnation/v1\" || 0x00"));
    assert_eq!(INCARNATION_DOMAIN, b"latch/incarnation/v1");
    assert!(SPEC.contains("HMAC-SHA256(key, \"latch/owner/v1\" || 0x00"));
    assert_eq!(OWNER_DOMAIN, b"latch/owner/v1");
    assert!(SPEC.contains("lowercase hex (64 characters)"));
    assert_eq!(OWNER_MAC_LEN * 2, 64);
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
