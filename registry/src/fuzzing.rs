//! Entry points for the cargo-fuzz targets in `fuzz/` (not a public API; built
//! only with the `fuzzing` feature). Each feeds arbitrary bytes to the parser latch
//! itself uses for a file in the root that someone else could shape (SPEC §9.1),
//! asserts it does not panic, and checks a cheap invariant on what it accepts.

use latch_wire::SessionId;

use crate::events::{self, ReadEvent};
use crate::key::{Key, KEY_LEN};
use crate::record::{self, Record};
use crate::screen::FinalScreen;
use crate::Defaults;

/// The key the fuzz targets verify under. The seed corpus is made in a root whose
/// `registry.key` holds these bytes, so its records verify and the fuzzer starts
/// from the accepting path.
pub const FUZZ_KEY: [u8; KEY_LEN] = [0x5a; KEY_LEN];

/// The id the events target reads its line for.
pub fn fuzz_id() -> SessionId {
    SessionId::new("fuzz").expect("valid id")
}

/// `<id>.json` as `record::read_record_file` parses it and `Registry::read_record`
/// verifies it (incarnation and `ownerMac` under the key). A parsed record encodes
/// as `Registry::write_record` encodes it and parses back equal.
pub fn record(data: &[u8]) {
    let Ok(rec) = serde_json::from_slice::<Record>(data) else {
        return;
    };
    let key = Key::from_bytes(&FUZZ_KEY);
    let _ = key.verify(&rec.id, &rec.incarnation);
    if let Some(mac) = rec.owner_mac.as_deref().and_then(record::from_hex) {
        let _ = key.verify_owner(&rec.id, &rec.incarnation, rec.owner.as_ref(), &mac);
    }
    let bytes = serde_json::to_vec_pretty(&rec).expect("a parsed record encodes");
    let again: Record = serde_json::from_slice(&bytes).expect("an encoded record parses");
    assert_eq!(again, rec, "a record changed through a rewrite");
}

/// `defaults.json` as `Registry::defaults` parses it, including its fallback that
/// tells a session record named `defaults` apart.
pub fn defaults(data: &[u8]) {
    if serde_json::from_slice::<Defaults>(data).is_err() {
        let _ = serde_json::from_slice::<Record>(data);
    }
}

/// One line of an events file as `events::parse_line` reads it, and every view
/// `latch events` takes of it. A typed event encodes (as it is appended) and parses
/// back to the same event.
pub fn events_line(data: &[u8]) {
    let id = fuzz_id();
    let ev = events::parse_line(&id, data);
    let _ = (ev.type_name(), ev.ts(), ev.incarnation());
    let value = ev.to_value();
    let line = serde_json::to_vec(&value).expect("a JSON value encodes");
    if let ReadEvent::Known(e) = &ev {
        let again = events::parse_line(&id, &line);
        assert_eq!(
            again,
            ReadEvent::Known(e.clone()),
            "an event changed through a rewrite"
        );
    }
}

/// `<id>.screen` as `Registry::read_final_screen` parses it. A parsed screen
/// encodes (as the daemon writes it) and parses back equal.
pub fn final_screen(data: &[u8]) {
    let Ok(screen) = serde_json::from_slice::<FinalScreen>(data) else {
        return;
    };
    let bytes = serde_json::to_vec(&screen).expect("a parsed screen encodes");
    let again: FinalScreen = serde_json::from_slice(&bytes).expect("an encoded screen parses");
    assert_eq!(again, screen, "a final screen changed through a rewrite");
}
