//! Arbitrary bytes fed to the daemon's codec in arbitrary pieces decode to the
//! same frames as the whole input at once.
//!
//! Input: `n: u8 | n % 16 cut sizes: u8 each | stream`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let (cuts, stream) = rest.split_at(usize::from(n % 16).min(rest.len()));
    latch_wire::fuzzing::deframe_split(stream, cuts);
});
