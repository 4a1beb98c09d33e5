//! Arbitrary frame sequences through the daemon's state machine, asserting the
//! central property after every step: no effect unless bound (strict) or allowed
//! by the legacy policy, nothing but DETACH while draining.
//!
//! Input: `policy: u8 (% 3: off, observe, full) | drain mask: u8 | stream`.
#![no_main]

use latch_wire::LegacyPolicy;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [policy, drain_mask, stream @ ..] = data else {
        return;
    };
    let policy = match policy % 3 {
        0 => LegacyPolicy::Off,
        1 => LegacyPolicy::Observe,
        _ => LegacyPolicy::Full,
    };
    latch_wire::fuzzing::drive_state_machine(stream, policy, *drain_mask);
});
