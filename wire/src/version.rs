//! Protocol versions and negotiation (SPEC.md §4.2).
//!
//! Version 1 is the legacy `pty` framing, which has no HELLO and is never
//! negotiated. The strict protocol starts at version 2. A future version 3
//! extends [`SUPPORTED`]; negotiation picks the highest common version.

use serde::{Deserialize, Serialize};

/// The legacy framing's version number (never negotiated; SPEC.md §7).
pub const LEGACY_VERSION: u16 = 1;
/// The first strict protocol version.
pub const STRICT_MIN_VERSION: u16 = 2;
/// The versions this build speaks, as client and as daemon.
pub const SUPPORTED: VersionRange = VersionRange { min: 2, max: 4 };

/// The first version with output cursors (SPEC.md §5.1): STATUS3, OUTPUT_SINCE, CUT.
pub const CURSORS_VERSION: u16 = 3;

/// The first version with ATTACH_TERMINAL, the terminal passed to the daemon
/// (SPEC.md §5.7). Version 4 is version 3 plus that frame.
pub const TERMINAL_VERSION: u16 = 4;

/// An inclusive range of protocol versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct VersionRange {
    /// Lowest version spoken.
    pub min: u16,
    /// Highest version spoken.
    pub max: u16,
}

impl VersionRange {
    /// A range; `None` if `min > max`.
    pub fn new(min: u16, max: u16) -> Option<Self> {
        (min <= max).then_some(Self { min, max })
    }

    /// Whether `v` is in the range.
    pub fn contains(&self, v: u16) -> bool {
        self.min <= v && v <= self.max
    }

    /// Whether the range is well formed and entirely strict (`min >= 2`).
    pub fn is_valid_strict(&self) -> bool {
        self.min <= self.max && self.min >= STRICT_MIN_VERSION
    }
}

impl std::fmt::Display for VersionRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}..={}", self.min, self.max)
    }
}

/// Server side: the highest version both ranges contain, or `None`
/// (the daemon then answers `version-unsupported` with its own range).
pub fn negotiate(client: VersionRange, server: VersionRange) -> Option<u16> {
    if !client.is_valid_strict() || !server.is_valid_strict() {
        return None;
    }
    let hi = client.max.min(server.max);
    let lo = client.min.max(server.min);
    (lo <= hi).then_some(hi)
}

/// Client side: whether a WELCOME's chosen version is acceptable. A strict client
/// never accepts a version outside the range it asked for, and in particular never
/// one below its minimum (no silent downgrade; SPEC.md §11 I10).
pub fn client_accepts(asked: VersionRange, chosen: u16) -> bool {
    asked.contains(chosen) && chosen >= STRICT_MIN_VERSION
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(min: u16, max: u16) -> VersionRange {
        VersionRange { min, max }
    }

    #[test]
    fn negotiation_table() {
        let cases = [
            (r(2, 2), r(2, 2), Some(2)),
            (r(2, 3), r(2, 2), Some(2)),
            // A v2 client and a hypothetical v3-capable daemon agree on v2.
            (r(2, 2), r(2, 3), Some(2)),
            (r(2, 3), r(2, 3), Some(3)),
            (r(3, 4), r(2, 2), None),
            (r(2, 2), r(3, 3), None),
            (r(1, 2), r(2, 2), None), // 1 is legacy: never negotiated
            (r(3, 2), r(2, 3), None), // malformed client range
            (r(0, 0), r(2, 2), None),
        ];
        for (client, server, want) in cases {
            assert_eq!(negotiate(client, server), want, "{client} vs {server}");
        }
    }

    #[test]
    fn client_refuses_below_its_minimum() {
        assert!(client_accepts(r(2, 2), 2));
        assert!(!client_accepts(r(3, 3), 2));
        assert!(!client_accepts(r(2, 2), 1));
        assert!(!client_accepts(r(2, 2), 3));
        assert!(!client_accepts(r(1, 2), 1));
    }

    #[test]
    fn supported_is_strict() {
        assert!(SUPPORTED.is_valid_strict());
    }
}
