//! Sessions whose daemon died with its machine (SPEC.md §9.7): `vanished` with
//! `statusReason: reboot`, which `latch resurrect` brings back.

use crate::proc::boot_id;
use crate::Record;

/// The `statusReason` of a session whose machine restarted under it.
pub const REBOOT: &str = "reboot";

/// Whether `record`'s daemon ran under another boot than this one and no exit was
/// recorded: its machine restarted, so daemon and program died with it (a pid,
/// let alone a start time, means nothing across boots). A crash (the daemon killed
/// under this boot) is not a reboot. `false` when the boot id cannot be read.
pub fn died_with_machine(record: &Record) -> bool {
    record.exit.is_none() && boot_id().is_ok_and(|now| now != record.daemon.boot_id)
}
