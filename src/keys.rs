//! Key names for `latch send --keys` (tmux's names where they exist).

/// The bytes for a key name, or `None` if `name` is not one.
pub fn key_bytes(name: &str) -> Option<Vec<u8>> {
    let fixed: &[u8] = match name {
        "Enter" | "Return" => b"\r",
        "Tab" => b"\t",
        "Escape" | "Esc" => b"\x1b",
        "Space" => b" ",
        "BSpace" | "Backspace" => b"\x7f",
        "Up" => b"\x1b[A",
        "Down" => b"\x1b[B",
        "Right" => b"\x1b[C",
        "Left" => b"\x1b[D",
        "Home" => b"\x1b[H",
        "End" => b"\x1b[F",
        "PageUp" | "PPage" => b"\x1b[5~",
        "PageDown" | "NPage" => b"\x1b[6~",
        "Delete" | "DC" => b"\x1b[3~",
        _ => {
            let rest = name.strip_prefix("C-").or_else(|| name.strip_prefix("^"))?;
            let mut chars = rest.chars();
            let c = chars.next()?;
            if chars.next().is_some() {
                return None;
            }
            return ctrl(c).map(|b| vec![b]);
        }
    };
    Some(fixed.to_vec())
}

/// The control byte for `c` (`a` -> 0x01, `\\` -> 0x1c, `?` -> 0x7f).
pub fn ctrl(c: char) -> Option<u8> {
    match c {
        '?' => Some(0x7f),
        'a'..='z' => Some(c as u8 - b'a' + 1),
        '@' | 'A'..='Z' | '[' | '\\' | ']' | '^' | '_' => Some((c as u8) & 0x1f),
        _ => None,
    }
}

/// The detach key without `--detach-key` or `detachKey`: Ctrl-\.
pub const DEFAULT_DETACH_KEY: u8 = 0x1c;

/// Parses a detach key: `^X` notation, `C-x`, or `none`.
pub fn parse_detach_key(s: &str) -> Result<Option<u8>, String> {
    if s == "none" {
        return Ok(None);
    }
    match key_bytes(s) {
        Some(b) if b.len() == 1 => Ok(Some(b[0])),
        _ => Err(format!("detach key {s:?} is not ^X, C-x or none")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        assert_eq!(key_bytes("Enter"), Some(b"\r".to_vec()));
        assert_eq!(key_bytes("C-c"), Some(vec![3]));
        assert_eq!(key_bytes("^\\"), Some(vec![0x1c]));
        assert_eq!(key_bytes("Up"), Some(b"\x1b[A".to_vec()));
        assert_eq!(key_bytes("hello"), None);
        assert_eq!(key_bytes("C-"), None);
        assert_eq!(parse_detach_key("^\\"), Ok(Some(0x1c)));
        assert_eq!(parse_detach_key("C-a"), Ok(Some(1)));
        assert_eq!(parse_detach_key("none"), Ok(None));
        assert!(parse_detach_key("x").is_err());
    }
}
