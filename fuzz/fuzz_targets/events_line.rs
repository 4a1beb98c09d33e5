//! Arbitrary bytes as one line of an events file (SPEC §9.9) through `events::parse_line` and
//! every view `latch events` takes of it: no panic; a typed event re-encodes and
//! parses back equal.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| latch_registry::fuzzing::events_line(data));
