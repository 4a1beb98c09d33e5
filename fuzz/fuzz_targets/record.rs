//! Arbitrary bytes as a session record (`<id>.json`, SPEC §9.3) through the parser and the key
//! checks `Registry::read_record` runs: no panic; what parses re-encodes and parses
//! back equal.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| latch_registry::fuzzing::record(data));
