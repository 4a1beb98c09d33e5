//! The seed corpus of the registry's fuzz targets (`fuzz/corpus/<target>/seed-*`):
//! files the real `latch` wrote (a root whose `registry.key` holds
//! `fuzzing::FUZZ_KEY`), which must stay accepted by the parsers they seed, so the
//! fuzzer starts from the accepting paths; and each runs cleanly through its entry
//! point. Seeds that no longer parse after a format change are stale: make new ones
//! by running the real binary in such a root (see
//! `fuzz/Cargo.toml`).

use std::path::PathBuf;

use latch_registry::events::{self, ReadEvent};
use latch_registry::fuzzing::{self, FUZZ_KEY};
use latch_registry::{Defaults, FinalScreen, Key, Record};

fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut out: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().starts_with("seed-"))
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            (name, std::fs::read(e.path()).unwrap())
        })
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no seeds in {}", dir.display());
    out
}

#[test]
fn record_seeds_parse_and_verify_under_the_fuzz_key() {
    let key = Key::from_bytes(&FUZZ_KEY);
    for (name, bytes) in seeds("record") {
        let rec: Record = serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(key.verify(&rec.id, &rec.incarnation), "{name}: incarnation");
        let mac = latch_registry::record::from_hex(rec.owner_mac.as_deref().unwrap()).unwrap();
        assert!(
            key.verify_owner(&rec.id, &rec.incarnation, rec.owner.as_ref(), &mac),
            "{name}: ownerMac"
        );
        fuzzing::record(&bytes);
    }
}

#[test]
fn defaults_seeds_parse() {
    for (name, bytes) in seeds("defaults") {
        serde_json::from_slice::<Defaults>(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        fuzzing::defaults(&bytes);
    }
}

#[test]
fn events_line_seeds_are_typed_events() {
    for (name, bytes) in seeds("events_line") {
        let ev = events::parse_line(&fuzzing::fuzz_id(), &bytes);
        assert!(matches!(ev, ReadEvent::Known(_)), "{name}: {ev:?}");
        fuzzing::events_line(&bytes);
    }
}

#[test]
fn final_screen_seeds_parse() {
    for (name, bytes) in seeds("final_screen") {
        serde_json::from_slice::<FinalScreen>(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        fuzzing::final_screen(&bytes);
    }
}
