//! Identity types shared by every crate: [`SessionId`], [`Incarnation`] and
//! [`SessionRef`] (SPEC.md §2).
//!
//! These are validated newtypes: once you hold one, its contents are well formed.
//! Minting and verifying incarnations needs the registry key and lives in
//! `latch-registry`; this module only knows the text form.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Longest session id, in bytes (SPEC.md §2.1). The registry also checks that the
/// socket path built from an id fits `sun_path`.
pub const SESSION_ID_MAX_LEN: usize = 64;

/// Why a string is not a valid [`SessionId`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionIdError {
    /// The id is the empty string.
    Empty,
    /// The id is longer than [`SESSION_ID_MAX_LEN`] bytes.
    TooLong,
    /// The first character is not an ASCII letter or digit.
    BadFirst,
    /// A character outside `[A-Za-z0-9._-]`.
    BadChar,
}

impl fmt::Display for SessionIdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("session id is empty"),
            Self::TooLong => write!(f, "session id is longer than {SESSION_ID_MAX_LEN} bytes"),
            Self::BadFirst => f.write_str("session id must start with an ASCII letter or digit"),
            Self::BadChar => {
                f.write_str("session id may only contain ASCII letters, digits, '.', '_' and '-'")
            }
        }
    }
}

impl std::error::Error for SessionIdError {}

/// A session's id: the registry's lookup key (SPEC.md §2.1).
///
/// 1 to 64 bytes of `[A-Za-z0-9._-]`, starting with a letter or digit, so an id is
/// always a safe single path component and never looks like a flag.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(String);

impl SessionId {
    /// Validates `s` as a session id.
    pub fn new(s: impl Into<String>) -> Result<Self, SessionIdError> {
        let s = s.into();
        Self::validate(&s)?;
        Ok(Self(s))
    }

    fn validate(s: &str) -> Result<(), SessionIdError> {
        let bytes = s.as_bytes();
        let first = *bytes.first().ok_or(SessionIdError::Empty)?;
        if bytes.len() > SESSION_ID_MAX_LEN {
            return Err(SessionIdError::TooLong);
        }
        if !first.is_ascii_alphanumeric() {
            return Err(SessionIdError::BadFirst);
        }
        if !bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        {
            return Err(SessionIdError::BadChar);
        }
        Ok(())
    }

    /// The id as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

crate::text_newtype!(SessionId, SessionIdError);

/// Length of an incarnation's random nonce, in bytes.
pub const INCARNATION_NONCE_LEN: usize = 16;
/// Length of an incarnation's truncated HMAC-SHA256 tag, in bytes.
pub const INCARNATION_TAG_LEN: usize = 16;
/// The text prefix of a version-1 incarnation.
pub const INCARNATION_V1_PREFIX: &str = "v1.";
/// Length of a version-1 incarnation's text form: `v1.` + 32 hex + `.` + 32 hex.
pub const INCARNATION_TEXT_LEN: usize = 3 + 2 * INCARNATION_NONCE_LEN + 1 + 2 * INCARNATION_TAG_LEN;

/// Why a string is not a valid [`Incarnation`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum IncarnationError {
    /// The text does not start with a known version prefix.
    UnknownVersion,
    /// The text has the wrong length for its version.
    BadLength,
    /// The text is not `v1.<32 lowercase hex>.<32 lowercase hex>`.
    BadFormat,
}

impl fmt::Display for IncarnationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::UnknownVersion => "incarnation has an unknown version prefix (expected \"v1.\")",
            Self::BadLength => "incarnation has the wrong length",
            Self::BadFormat => "incarnation is not v1.<32 hex digits>.<32 hex digits>",
        })
    }
}

impl std::error::Error for IncarnationError {}

/// The immutable identity of one session creation (SPEC.md §2.2).
///
/// Opaque to everyone but the registry that minted it: a nonce and a truncated
/// HMAC-SHA256 tag over `(domain, id, nonce)` under the registry key. Text form:
///
/// ```text
/// v1.<nonce: 32 lowercase hex digits>.<tag: 32 lowercase hex digits>
/// ```
///
/// Equality is constant-time ([`Incarnation::ct_eq`]); `==` uses it too.
#[derive(Clone, Copy)]
pub struct Incarnation {
    nonce: [u8; INCARNATION_NONCE_LEN],
    tag: [u8; INCARNATION_TAG_LEN],
}

impl Incarnation {
    /// Builds an incarnation from its parts. Only the registry, which computed
    /// `tag` from the key, should call this with fresh values.
    pub fn from_parts(nonce: [u8; INCARNATION_NONCE_LEN], tag: [u8; INCARNATION_TAG_LEN]) -> Self {
        Self { nonce, tag }
    }

    /// The random nonce.
    pub fn nonce(&self) -> &[u8; INCARNATION_NONCE_LEN] {
        &self.nonce
    }

    /// The truncated HMAC tag.
    pub fn tag(&self) -> &[u8; INCARNATION_TAG_LEN] {
        &self.tag
    }

    /// Parses the text form. Uppercase hex is refused so that the text form is
    /// canonical: two equal incarnations always print identically.
    pub fn parse(s: &str) -> Result<Self, IncarnationError> {
        let rest = s
            .strip_prefix(INCARNATION_V1_PREFIX)
            .ok_or(IncarnationError::UnknownVersion)?;
        if s.len() != INCARNATION_TEXT_LEN {
            return Err(IncarnationError::BadLength);
        }
        let (nonce_hex, rest) = rest
            .split_at_checked(2 * INCARNATION_NONCE_LEN)
            .ok_or(IncarnationError::BadLength)?;
        let tag_hex = rest.strip_prefix('.').ok_or(IncarnationError::BadFormat)?;
        let mut nonce = [0u8; INCARNATION_NONCE_LEN];
        let mut tag = [0u8; INCARNATION_TAG_LEN];
        decode_hex(nonce_hex, &mut nonce)?;
        decode_hex(tag_hex, &mut tag)?;
        Ok(Self { nonce, tag })
    }

    /// Compares two incarnations in time independent of where they differ
    /// (SPEC.md §11 I3).
    ///
    /// Both operands are fixed-size arrays, so the loop always visits all 32 bytes
    /// and accumulates differences with OR; `black_box` keeps the optimiser from
    /// turning the fold into an early-exit comparison.
    pub fn ct_eq(&self, other: &Self) -> bool {
        use subtle::ConstantTimeEq;
        (self.nonce.ct_eq(&other.nonce) & self.tag.ct_eq(&other.tag)).into()
    }
}

fn decode_hex(hex: &str, out: &mut [u8]) -> Result<(), IncarnationError> {
    let bytes = hex.as_bytes();
    if bytes.len() != out.len() * 2 {
        return Err(IncarnationError::BadLength);
    }
    for (slot, pair) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        let hi = hex_val(pair[0]).ok_or(IncarnationError::BadFormat)?;
        let lo = hex_val(pair[1]).ok_or(IncarnationError::BadFormat)?;
        *slot = (hi << 4) | lo;
    }
    Ok(())
}

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn push_hex(out: &mut String, bytes: &[u8]) {
    for b in bytes {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0x0f)]));
    }
}

impl PartialEq for Incarnation {
    fn eq(&self, other: &Self) -> bool {
        self.ct_eq(other)
    }
}

impl Eq for Incarnation {}

impl std::hash::Hash for Incarnation {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.nonce.hash(state);
        self.tag.hash(state);
    }
}

impl fmt::Display for Incarnation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = String::with_capacity(INCARNATION_TEXT_LEN);
        s.push_str(INCARNATION_V1_PREFIX);
        push_hex(&mut s, &self.nonce);
        s.push('.');
        push_hex(&mut s, &self.tag);
        f.write_str(&s)
    }
}

impl fmt::Debug for Incarnation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Incarnation({self})")
    }
}

impl FromStr for Incarnation {
    type Err = IncarnationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl Serialize for Incarnation {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Incarnation {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// Exactly one session creation: an id and the incarnation minted for it.
///
/// Text form `ID@INCARNATION` (SPEC.md §2.3).
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SessionRef {
    /// The registry key.
    pub id: SessionId,
    /// The creation.
    pub incarnation: Incarnation,
}

/// Why a string is not a valid `ID@INCARNATION`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionRefError {
    /// No `@` separator.
    MissingAt,
    /// The id part is invalid.
    Id(SessionIdError),
    /// The incarnation part is invalid.
    Incarnation(IncarnationError),
}

impl fmt::Display for SessionRefError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MissingAt => f.write_str("expected ID@INCARNATION"),
            Self::Id(e) => e.fmt(f),
            Self::Incarnation(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for SessionRefError {}

impl SessionRef {
    /// Pairs an id with an incarnation.
    pub fn new(id: SessionId, incarnation: Incarnation) -> Self {
        Self { id, incarnation }
    }

    /// Whether `self` names the same creation as `other`; the incarnation is
    /// compared in constant time.
    pub fn matches(&self, other: &SessionRef) -> bool {
        // Evaluate both comparisons unconditionally so timing does not reveal
        // which part differed.
        let inc = self.incarnation.ct_eq(&other.incarnation);
        let id = self.id == other.id;
        inc & id
    }
}

impl fmt::Display for SessionRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.id, self.incarnation)
    }
}

impl fmt::Debug for SessionRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SessionRef({self})")
    }
}

impl FromStr for SessionRef {
    type Err = SessionRefError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (id, inc) = s.split_once('@').ok_or(SessionRefError::MissingAt)?;
        Ok(Self {
            id: SessionId::new(id).map_err(SessionRefError::Id)?,
            incarnation: Incarnation::parse(inc).map_err(SessionRefError::Incarnation)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn session_id_table() {
        let long = "a".repeat(SESSION_ID_MAX_LEN);
        let too_long = "a".repeat(SESSION_ID_MAX_LEN + 1);
        let cases: &[(&str, Result<(), SessionIdError>)] = &[
            ("build", Ok(())),
            ("a", Ok(())),
            ("0.x_y-z", Ok(())),
            (&long, Ok(())),
            ("", Err(SessionIdError::Empty)),
            (&too_long, Err(SessionIdError::TooLong)),
            (".hidden", Err(SessionIdError::BadFirst)),
            ("-flag", Err(SessionIdError::BadFirst)),
            ("_x", Err(SessionIdError::BadFirst)),
            ("a/b", Err(SessionIdError::BadChar)),
            ("a b", Err(SessionIdError::BadChar)),
            ("a@b", Err(SessionIdError::BadChar)),
            ("é", Err(SessionIdError::BadFirst)),
            ("aé", Err(SessionIdError::BadChar)),
        ];
        for (input, want) in cases {
            assert_eq!(SessionId::new(*input).map(|_| ()), *want, "input {input:?}");
        }
    }

    #[test]
    fn incarnation_text_round_trip_and_rejections() {
        let inc = Incarnation::from_parts([0xab; 16], [0x01; 16]);
        let text = inc.to_string();
        assert_eq!(text.len(), INCARNATION_TEXT_LEN);
        assert_eq!(
            text,
            "v1.abababababababababababababababab.01010101010101010101010101010101"
        );
        assert_eq!(Incarnation::parse(&text), Ok(inc));
        assert_eq!(
            Incarnation::parse(&text.to_uppercase()),
            Err(IncarnationError::UnknownVersion)
        );
        let upper_hex = text.replacen("ab", "AB", 1);
        assert_eq!(
            Incarnation::parse(&upper_hex),
            Err(IncarnationError::BadFormat)
        );
        assert_eq!(
            Incarnation::parse(&text[..text.len() - 1]),
            Err(IncarnationError::BadLength)
        );
        assert_eq!(
            Incarnation::parse("v2.00"),
            Err(IncarnationError::UnknownVersion)
        );
        let no_dot = text.replacen('.', "x", 2).replacen('x', ".", 1);
        assert_eq!(
            Incarnation::parse(&no_dot),
            Err(IncarnationError::BadFormat)
        );
        assert_eq!(
            Incarnation::parse(""),
            Err(IncarnationError::UnknownVersion)
        );
    }

    #[test]
    fn ct_eq_detects_any_single_byte_difference() {
        let base = Incarnation::from_parts([7; 16], [9; 16]);
        for i in 0..16 {
            let mut n = [7; 16];
            n[i] ^= 1;
            assert!(!base.ct_eq(&Incarnation::from_parts(n, [9; 16])));
            let mut t = [9; 16];
            t[i] ^= 0x80;
            assert!(!base.ct_eq(&Incarnation::from_parts([7; 16], t)));
        }
        assert!(base.ct_eq(&Incarnation::from_parts([7; 16], [9; 16])));
    }

    #[test]
    fn session_ref_text() {
        let r: SessionRef =
            "build@v1.abababababababababababababababab.01010101010101010101010101010101"
                .parse()
                .unwrap();
        assert_eq!(r.id.as_str(), "build");
        assert_eq!(
            "build".parse::<SessionRef>(),
            Err(SessionRefError::MissingAt)
        );
        assert!(matches!(
            "build@v1.zz".parse::<SessionRef>(),
            Err(SessionRefError::Incarnation(_))
        ));
    }

    proptest! {
        #[test]
        fn incarnation_round_trips(nonce in any::<[u8; 16]>(), tag in any::<[u8; 16]>()) {
            let inc = Incarnation::from_parts(nonce, tag);
            prop_assert_eq!(Incarnation::parse(&inc.to_string()), Ok(inc));
        }

        #[test]
        fn incarnation_parse_never_panics(s in ".{0,120}") {
            let _ = Incarnation::parse(&s);
        }

        #[test]
        fn valid_ids_round_trip(s in "[A-Za-z0-9][A-Za-z0-9._-]{0,63}") {
            let id = SessionId::new(s.clone()).unwrap();
            prop_assert_eq!(id.as_str(), s.as_str());
        }
    }
}
