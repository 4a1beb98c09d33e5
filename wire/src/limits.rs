//! Protocol limits and timeouts (SPEC.md §8). Tests pin each to SPEC.md.

/// Largest client frame payload a daemon accepts (64 KiB).
pub const MAX_CLIENT_FRAME: usize = 64 * 1024;
/// Largest server frame payload a client accepts (16 MiB; a full-scrollback SCREEN).
pub const MAX_SERVER_FRAME: usize = 16 * 1024 * 1024;
/// Largest OUTPUT payload a daemon sends in one frame (32 KiB).
pub const MAX_OUTPUT_CHUNK: usize = 32 * 1024;
/// Time a daemon waits for a connection's first complete frame (HELLO or a legacy
/// packet), in milliseconds.
pub const HANDSHAKE_TIMEOUT_MS: u64 = 5_000;
/// Connections a daemon serves at once; one more is refused with
/// `too-many-connections`.
pub const MAX_CONNECTIONS: usize = 64;
/// Output bytes a daemon queues for one client (8 MiB). Output that would take the
/// queue over it makes the client fall behind: its queued output is dropped, and once
/// it has read what is left it is resynchronised with a fresh screen; only a client
/// that reads nothing for [`CLIENT_STALL_MS`] is cut off (SPEC.md §8).
pub const CLIENT_QUEUE_BYTES: usize = 8 * 1024 * 1024;
/// Time a negotiated connection may stay unbound, with no frame at all, before the
/// daemon closes it with `handshake-timeout`, in milliseconds.
pub const IDLE_UNBOUND_MS: u64 = 10_000;
/// Time a daemon waits for a client that has read nothing while output is pending
/// for it before cutting it off with `too-slow`, in milliseconds. A client that
/// reads, however slowly, is resynchronised instead (SPEC.md §8).
pub const CLIENT_STALL_MS: u64 = 60_000;
/// Frames queued for one client, replies and output together; one more output frame
/// makes the client fall behind.
pub const CLIENT_QUEUE_ITEMS: usize = 65_536;
/// Reply bytes queued for one client beyond which the daemon stops reading its
/// requests until it has read some replies.
pub const REPLY_QUEUE_BYTES: usize = 256 * 1024;
/// Reply bytes queued over every connection of a daemon beyond which a PEEK whose
/// SCREEN is larger than [`REPLY_QUEUE_BYTES`] waits for room (32 MiB, two
/// full-scrollback screens); it is never refused (SPEC.md §8).
pub const REPLY_BUDGET_BYTES: usize = 32 * 1024 * 1024;
/// Input bytes queued for the program beyond which INPUT is held back (an attached
/// read-write client stops being read) or refused with `input-full` (any other
/// connection).
pub const INPUT_QUEUE_BYTES: usize = 1024 * 1024;
/// The newest output a daemon keeps per creation for reads by output cursor
/// (OUTPUT_SINCE), in bytes; allocated on the first output (SPEC.md §8).
pub const OUTPUT_RING_BYTES: usize = 1024 * 1024;

/// Time without output after which a quiet, detached session hibernates (SPEC §4.4
/// "Hibernation", §8).
pub const HIBERNATE_QUIET_MS: u64 = 2000;
/// Recordings of one creation at once at most (SPEC.md §4.8, §8).
pub const CASTS_MAX: usize = 4;
/// Output queued for one recording's writer before the daemon stops queueing and
/// later re-reads its ring (SPEC.md §4.8, §8).
pub const CAST_QUEUE_BYTES: usize = 1024 * 1024;
/// The least `--max-bytes` a recording takes: room for its header and final marker.
pub const CAST_MAX_BYTES_MIN: u64 = 4096;
/// The command blocks a daemon keeps per creation, the newest (SPEC.md §8).
pub const COMMANDS_KEPT: usize = 1000;
/// Most answer bytes queued for the program at once (SPEC §8).
pub const ANSWERS_QUEUED_MAX: usize = 4096;
/// The most pixels (width × height) of a `peek --format png` (SPEC §4.4, §8).
pub const PNG_MAX_PIXELS: u64 = 16_777_216;
/// Largest terminal height a daemon accepts, in rows.
pub const MAX_ROWS: u16 = 1_000;
/// Largest terminal width a daemon accepts, in columns.
pub const MAX_COLS: u16 = 1_000;
/// Largest rows × columns a daemon accepts.
pub const MAX_CELLS: u32 = 500_000;
/// Most scrollback lines a session may keep.
pub const MAX_SCROLLBACK: usize = 100_000;

/// Why a terminal size was refused (SPEC.md §8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeError {
    /// Rows or columns are zero.
    Zero,
    /// Over [`MAX_ROWS`], [`MAX_COLS`] or [`MAX_CELLS`].
    TooLarge,
}

impl std::fmt::Display for SizeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Zero => f.write_str("rows and columns must be at least 1"),
            Self::TooLarge => write!(
                f,
                "a terminal is at most {MAX_ROWS} rows, {MAX_COLS} columns and {MAX_CELLS} cells"
            ),
        }
    }
}

impl std::error::Error for SizeError {}

/// Checks a terminal size against the limits, before anything is allocated for it.
pub fn check_size(rows: u16, cols: u16) -> Result<(), SizeError> {
    if rows == 0 || cols == 0 {
        return Err(SizeError::Zero);
    }
    if rows > MAX_ROWS || cols > MAX_COLS || u32::from(rows) * u32::from(cols) > MAX_CELLS {
        return Err(SizeError::TooLarge);
    }
    Ok(())
}

/// `(rows, cols)` clamped into the limits (a client whose real terminal is larger
/// than the limits attaches at the largest size allowed). Zero stays zero.
pub fn clamp_size(rows: u16, cols: u16) -> (u16, u16) {
    let rows = rows.min(MAX_ROWS);
    let cols = cols.min(MAX_COLS);
    if rows == 0 || cols == 0 || u32::from(rows) * u32::from(cols) <= MAX_CELLS {
        return (rows, cols);
    }
    let fit = MAX_CELLS / u32::from(cols);
    (u16::try_from(fit).unwrap_or(MAX_ROWS).max(1), cols)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_table() {
        let cases: &[(u16, u16, Result<(), SizeError>)] = &[
            (24, 80, Ok(())),
            (1, 1, Ok(())),
            (0, 80, Err(SizeError::Zero)),
            (24, 0, Err(SizeError::Zero)),
            (MAX_ROWS, 500, Ok(())),
            (MAX_ROWS, 501, Err(SizeError::TooLarge)),
            (MAX_ROWS + 1, 1, Err(SizeError::TooLarge)),
            (1, MAX_COLS + 1, Err(SizeError::TooLarge)),
            (65_535, 65_535, Err(SizeError::TooLarge)),
            (500, 8_000, Err(SizeError::TooLarge)),
        ];
        for &(r, c, want) in cases {
            assert_eq!(check_size(r, c), want, "{r}x{c}");
        }
    }

    #[test]
    fn clamped_sizes_always_pass() {
        for (r, c) in [
            (65_535, 65_535),
            (2_000, 80),
            (24, 5_000),
            (1_000, 1_000),
            (24, 80),
        ] {
            let (cr, cc) = clamp_size(r, c);
            assert_eq!(check_size(cr, cc), Ok(()), "{r}x{c} -> {cr}x{cc}");
        }
        assert_eq!(clamp_size(24, 80), (24, 80));
        assert_eq!(clamp_size(0, 0), (0, 0));
    }
}
