//! Arbitrary bytes as a receipt (SPEC §9.10) through `Receipt::from_bytes`, which
//! `Receipt::load` runs: no panic; what parses re-encodes and parses back equal.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| latch_client::fuzzing::receipt(data));
