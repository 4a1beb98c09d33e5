//! Arbitrary bytes as `defaults.json` (SPEC §9.1) through the parser `Registry::defaults` runs:
//! no panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| latch_registry::fuzzing::defaults(data));
