//! [`Owner`]: the opaque owner a creation may carry (SPEC.md §2.4).
//!
//! Set once, at creation; bound to `{id, incarnation}` by a MAC under the registry
//! key (that needs the key and lives in `latch-registry`). This module only knows
//! which strings are owners, so the library, the command line, the daemon and the
//! STATUS decoder all apply one rule.

use std::fmt;

/// Longest owner, in Unicode scalar values (SPEC.md §2.4).
pub const OWNER_MAX_CHARS: usize = 128;

/// Why a string is not a valid [`Owner`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OwnerError {
    /// The owner is the empty string.
    Empty,
    /// More than [`OWNER_MAX_CHARS`] Unicode scalar values.
    TooLong,
    /// A control character (C0, DEL, C1) or U+2028/U+2029: not printable.
    NotPrintable,
}

impl fmt::Display for OwnerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("owner is empty"),
            Self::TooLong => write!(f, "owner is longer than {OWNER_MAX_CHARS} characters"),
            Self::NotPrintable => {
                f.write_str("owner contains a control character or a line/paragraph separator")
            }
        }
    }
}

impl std::error::Error for OwnerError {}

/// A creation's owner: 1 to 128 printable Unicode scalar values, opaque to latch
/// (a project digest, say). Compared byte for byte.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Owner(String);

impl Owner {
    /// Validates `s` as an owner.
    pub fn new(s: impl Into<String>) -> Result<Self, OwnerError> {
        let s = s.into();
        validate_owner(&s)?;
        Ok(Self(s))
    }

    /// The owner as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The one owner rule (SPEC.md §2.4): non-empty, at most 128 Unicode scalar values,
/// no control characters (C0, DEL, C1), no U+2028/U+2029.
pub fn validate_owner(s: &str) -> Result<(), OwnerError> {
    if s.is_empty() {
        return Err(OwnerError::Empty);
    }
    if s.chars().count() > OWNER_MAX_CHARS {
        return Err(OwnerError::TooLong);
    }
    if s.chars()
        .any(|c| c.is_control() || c == '\u{2028}' || c == '\u{2029}')
    {
        return Err(OwnerError::NotPrintable);
    }
    Ok(())
}

crate::text_newtype!(Owner, OwnerError);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_table() {
        let max = "é".repeat(OWNER_MAX_CHARS);
        let over = "é".repeat(OWNER_MAX_CHARS + 1);
        let cases: &[(&str, Result<(), OwnerError>)] = &[
            ("A", Ok(())),
            ("project 3f9a/run-7", Ok(())),
            ("sha256:0123abcd", Ok(())),
            (&max, Ok(())),
            ("", Err(OwnerError::Empty)),
            (&over, Err(OwnerError::TooLong)),
            ("tab\there", Err(OwnerError::NotPrintable)),
            ("nl\n", Err(OwnerError::NotPrintable)),
            ("nul\0", Err(OwnerError::NotPrintable)),
            ("del\u{7f}", Err(OwnerError::NotPrintable)),
            ("c1\u{85}", Err(OwnerError::NotPrintable)),
            ("ls\u{2028}", Err(OwnerError::NotPrintable)),
        ];
        for (s, want) in cases {
            assert_eq!(validate_owner(s), *want, "{s:?}");
            assert_eq!(Owner::new(*s).map(|_| ()), *want, "{s:?}");
        }
    }

    #[test]
    fn deserializing_applies_the_rule() {
        let enc = |s: &str| postcard::to_allocvec(s).unwrap();
        assert_eq!(
            postcard::from_bytes::<Owner>(&enc("ok")).unwrap().as_str(),
            "ok"
        );
        assert!(postcard::from_bytes::<Owner>(&enc("")).is_err());
        assert!(postcard::from_bytes::<Owner>(&enc("a\u{7}b")).is_err());
    }
}
