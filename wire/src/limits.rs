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
/// Output bytes a daemon queues for one client before cutting it off with
/// `too-slow` (8 MiB).
pub const CLIENT_QUEUE_BYTES: usize = 8 * 1024 * 1024;
