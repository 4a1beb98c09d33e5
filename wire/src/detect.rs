//! Telling the strict protocol from the legacy framing by a connection's first
//! bytes (SPEC.md §6). Both rules are pure functions of a byte prefix.

use crate::framing::MAGIC;
use crate::legacy::code;

/// What a daemon has learnt from a client's first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientOpening {
    /// Not enough bytes to decide.
    NeedMore,
    /// The full 8-byte strict preamble.
    Strict,
    /// A legacy packet header (first byte 0..=10).
    Legacy,
    /// Neither: close without a reply.
    Unknown,
}

/// How a prefix compares with [`MAGIC`].
enum Magic {
    /// A byte differs.
    Differs,
    /// A proper prefix of MAGIC so far.
    Partial,
    /// All eight bytes.
    Whole,
}

fn magic(prefix: &[u8]) -> Magic {
    let n = prefix.len().min(MAGIC.len());
    if prefix.get(..n) != MAGIC.get(..n) {
        Magic::Differs
    } else if n < MAGIC.len() {
        Magic::Partial
    } else {
        Magic::Whole
    }
}

/// The daemon-side rule:
///
/// 1. no bytes yet: need more;
/// 2. first byte `0x89`: strict if the first 8 bytes are [`MAGIC`], need more while
///    they are a prefix of it, unknown as soon as one differs;
/// 3. first byte `0x00..=0x0A`: legacy (every type the old protocol defines is
///    in that range, and the old clients open with DATA, ATTACH, PEEK or STATUS);
/// 4. anything else: unknown.
pub fn classify_client_opening(prefix: &[u8]) -> ClientOpening {
    match prefix.first() {
        None => ClientOpening::NeedMore,
        Some(&0x89) => match magic(prefix) {
            Magic::Differs => ClientOpening::Unknown,
            Magic::Partial => ClientOpening::NeedMore,
            Magic::Whole => ClientOpening::Strict,
        },
        Some(&b) if b <= code::GEOMETRY => ClientOpening::Legacy,
        Some(_) => ClientOpening::Unknown,
    }
}

/// What a strict client has learnt from its peer's first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerAnswer {
    /// Not enough bytes to decide.
    NeedMore,
    /// The strict preamble: frames follow.
    Strict,
    /// A legacy server packet type (DATA, EXIT, SCREEN, STATUS, GEOMETRY): the daemon
    /// is an older `pty`-framing daemon.
    Legacy(u8),
    /// Anything else.
    Garbage,
}

/// The client-side rule: the peer must open with [`MAGIC`]; a first byte that is a
/// legacy server packet type identifies an older daemon; anything else is garbage.
/// A strict client never proceeds on a legacy or garbage answer.
pub fn classify_server_answer(prefix: &[u8]) -> ServerAnswer {
    match prefix.first() {
        None => ServerAnswer::NeedMore,
        Some(&0x89) => match magic(prefix) {
            Magic::Differs => ServerAnswer::Garbage,
            Magic::Partial => ServerAnswer::NeedMore,
            Magic::Whole => ServerAnswer::Strict,
        },
        Some(&b)
            if matches!(
                b,
                code::DATA | code::EXIT | code::SCREEN | code::STATUS | code::GEOMETRY
            ) =>
        {
            ServerAnswer::Legacy(b)
        }
        Some(_) => ServerAnswer::Garbage,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_opening_table() {
        assert_eq!(classify_client_opening(b""), ClientOpening::NeedMore);
        for n in 1..MAGIC.len() {
            assert_eq!(
                classify_client_opening(&MAGIC[..n]),
                ClientOpening::NeedMore,
                "{n}"
            );
        }
        assert_eq!(classify_client_opening(&MAGIC), ClientOpening::Strict);
        assert_eq!(
            classify_client_opening(b"\x89LATCX"),
            ClientOpening::Unknown
        );
        for t in 0u8..=10 {
            assert_eq!(classify_client_opening(&[t]), ClientOpening::Legacy, "{t}");
        }
        for t in [11u8, 0x41, 0x88, 0x8a, 0xff] {
            assert_eq!(classify_client_opening(&[t]), ClientOpening::Unknown, "{t}");
        }
    }

    #[test]
    fn server_answer_table() {
        assert_eq!(classify_server_answer(&MAGIC), ServerAnswer::Strict);
        assert_eq!(classify_server_answer(&MAGIC[..3]), ServerAnswer::NeedMore);
        assert_eq!(
            classify_server_answer(&[10, 0, 0, 0, 4]),
            ServerAnswer::Legacy(10)
        );
        assert_eq!(classify_server_answer(&[7]), ServerAnswer::Legacy(7));
        assert_eq!(classify_server_answer(&[1]), ServerAnswer::Garbage);
        assert_eq!(classify_server_answer(b"HTTP/1.1"), ServerAnswer::Garbage);
    }
}
