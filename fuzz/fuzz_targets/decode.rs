//! Arbitrary bytes through the daemon's codec, the client's codec and the legacy
//! deframer: no panic, no unbounded allocation.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| latch_wire::fuzzing::decode_any(data));
