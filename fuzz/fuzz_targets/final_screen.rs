//! Arbitrary bytes as a final screen (`<id>.screen`, SPEC §9.15) through the parser
//! `Registry::read_final_screen` runs: no panic; what parses re-encodes and parses
//! back equal.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| latch_registry::fuzzing::final_screen(data));
