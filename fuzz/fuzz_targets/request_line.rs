//! Arbitrary bytes as the bridge's request line (SPEC §12.2) through the decoder `latch bridge`
//! runs: no panic; what decodes re-encodes and decodes back equal.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| latch_client::fuzzing::request_line(data));
