//! Display-name validation (SPEC.md §11 I7), shared by the library and the CLI.

use std::fmt;

/// Longest display name, in Unicode scalar values.
pub const DISPLAY_NAME_MAX_CHARS: usize = 160;

/// The rule a display name broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NameError {
    /// The name is empty.
    Empty,
    /// Leading or trailing whitespace.
    NotTrimmed,
    /// More than [`DISPLAY_NAME_MAX_CHARS`] Unicode scalar values.
    TooLong,
    /// A control character (C0, DEL, C1).
    Control,
    /// U+2028 LINE SEPARATOR or U+2029 PARAGRAPH SEPARATOR.
    LineSeparator,
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("display name is empty"),
            Self::NotTrimmed => f.write_str("display name has leading or trailing whitespace"),
            Self::TooLong => write!(
                f,
                "display name is longer than {DISPLAY_NAME_MAX_CHARS} characters"
            ),
            Self::Control => f.write_str("display name contains a control character"),
            Self::LineSeparator => f.write_str("display name contains U+2028 or U+2029"),
        }
    }
}

impl std::error::Error for NameError {}

/// Checks a display name: non-empty, already trimmed, at most 160 scalar values, no
/// control characters, no U+2028/U+2029. Slash and backslash are fine.
pub fn validate_display_name(name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.trim() != name {
        return Err(NameError::NotTrimmed);
    }
    if name.chars().count() > DISPLAY_NAME_MAX_CHARS {
        return Err(NameError::TooLong);
    }
    if name.chars().any(char::is_control) {
        return Err(NameError::Control);
    }
    if name.chars().any(|c| c == '\u{2028}' || c == '\u{2029}') {
        return Err(NameError::LineSeparator);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        let ok160 = "é".repeat(160);
        let bad161 = "é".repeat(161);
        let cases: &[(&str, Result<(), NameError>)] = &[
            ("build", Ok(())),
            ("a/b\\c", Ok(())),
            ("two words", Ok(())),
            (&ok160, Ok(())),
            (&bad161, Err(NameError::TooLong)),
            ("", Err(NameError::Empty)),
            (" lead", Err(NameError::NotTrimmed)),
            ("trail ", Err(NameError::NotTrimmed)),
            ("tab\there", Err(NameError::Control)),
            ("nl\nx", Err(NameError::Control)),
            ("del\u{7f}", Err(NameError::Control)),
            ("c1\u{85}x", Err(NameError::Control)),
            ("ls\u{2028}x", Err(NameError::LineSeparator)),
            ("ps\u{2029}x", Err(NameError::LineSeparator)),
        ];
        for (name, want) in cases {
            assert_eq!(validate_display_name(name), *want, "{name:?}");
        }
    }
}
