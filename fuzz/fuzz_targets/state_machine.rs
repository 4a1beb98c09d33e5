//! Arbitrary frame sequences through the daemon's state machine, as the daemon
//! drives it (time passing, deadlines, the program's exit, decode errors), asserting
//! the central property after every step: no effect unless bound (strict) or allowed
//! by the legacy policy, nothing but DETACH or STOP while draining, nothing that
//! reaches the program after it exited, only a close on a timeout or a decode error.
//!
//! Input: `policy: u8 (% 3: off, observe, full) | mask: u8 | stream`.
#![no_main]

use std::time::Instant;

use latch_wire::LegacyPolicy;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [policy, mask, stream @ ..] = data else {
        return;
    };
    let policy = match policy % 3 {
        0 => LegacyPolicy::Off,
        1 => LegacyPolicy::Observe,
        _ => LegacyPolicy::Full,
    };
    // The clock is read here, in the fuzz target; the wire crate reads none.
    latch_wire::fuzzing::drive_state_machine(stream, policy, *mask, Instant::now());
});
