//! Named keys of `write {keys}` → the bytes a terminal sends for them (xterm conventions).
//!
//! Names: `Enter`, `Tab`, `Escape`, `Backspace`, `Space`, `Delete`, `Insert`, `Up`/`Down`/`Left`/`Right`,
//! `Home`/`End`, `PageUp`/`PageDown`, `F1`–`F12`, `C-a`…`C-z` (and `C-@`, `C-[`, `C-\`, `C-]`, `C-^`,
//! `C-_`), and `M-x` for any one character `x` (Escape, then `x`). Arrows and Home/End follow the
//! terminal's cursor-key mode: `ESC O A` while a program (vi, less) asked for application mode, `ESC [ A`
//! otherwise. An unknown name is an error naming it and the names there are; nothing of the call is sent.

/// The bytes of one named key.
pub fn key_bytes(name: &str, application_cursor: bool) -> Result<Vec<u8>, String> {
    let csi_or_ss3 = |c: u8| if application_cursor { vec![0x1b, b'O', c] } else { vec![0x1b, b'[', c] };
    let tilde = |n: &str| format!("\x1b[{n}~").into_bytes();
    let b = match name {
        "Enter" | "Return" => vec![b'\r'],
        "Tab" => vec![b'\t'],
        "Escape" | "Esc" => vec![0x1b],
        "Backspace" => vec![0x7f],
        "Space" => vec![b' '],
        "Delete" => tilde("3"),
        "Insert" => tilde("2"),
        "Up" => csi_or_ss3(b'A'),
        "Down" => csi_or_ss3(b'B'),
        "Right" => csi_or_ss3(b'C'),
        "Left" => csi_or_ss3(b'D'),
        "Home" => csi_or_ss3(b'H'),
        "End" => csi_or_ss3(b'F'),
        "PageUp" => tilde("5"),
        "PageDown" => tilde("6"),
        "F1" => b"\x1bOP".to_vec(),
        "F2" => b"\x1bOQ".to_vec(),
        "F3" => b"\x1bOR".to_vec(),
        "F4" => b"\x1bOS".to_vec(),
        "F5" => tilde("15"),
        "F6" => tilde("17"),
        "F7" => tilde("18"),
        "F8" => tilde("19"),
        "F9" => tilde("20"),
        "F10" => tilde("21"),
        "F11" => tilde("23"),
        "F12" => tilde("24"),
        _ => return modified(name),
    };
    Ok(b)
}

/// `C-x` and `M-x`.
fn modified(name: &str) -> Result<Vec<u8>, String> {
    let mut chars = name.chars();
    let (prefix, rest) = match (chars.next(), chars.next()) {
        (Some(p @ ('C' | 'M')), Some('-')) => (p, chars.as_str()),
        _ => return Err(unknown(name)),
    };
    let mut rc = rest.chars();
    let (Some(c), None) = (rc.next(), rc.next()) else { return Err(unknown(name)) };
    match prefix {
        'C' => {
            let u = c.to_ascii_uppercase();
            match u {
                '@'..='_' => Ok(vec![u as u8 - b'@']),
                '?' => Ok(vec![0x7f]),
                _ => Err(unknown(name)),
            }
        }
        _ => {
            let mut out = vec![0x1b];
            let mut buf = [0u8; 4];
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            Ok(out)
        }
    }
}

fn unknown(name: &str) -> String {
    let shown: String = name.chars().take(40).collect();
    format!(
        "unknown key name {shown:?}; the names are Enter, Tab, Escape, Backspace, Space, Delete, Insert, Up, Down, \
         Left, Right, Home, End, PageUp, PageDown, F1–F12, C-a…C-z (Ctrl), M-x (Alt/Meta + one character); \
         send plain characters with text"
    )
}

/// Control characters and escape sequences in typed `text`, named (they are sent as given; the receipt
/// says what they were, so an accidental `\x03` is visible).
pub fn control_in_text(text: &str) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    for c in text.chars() {
        let name = match c {
            '\n' | '\r' | '\t' => continue,
            '\x1b' => "ESC (an escape sequence)".to_owned(),
            '\x7f' => "DEL (Backspace)".to_owned(),
            c if (c as u32) < 0x20 => {
                format!("C-{} (0x{:02x})", ((c as u8) + b'@').to_ascii_lowercase() as char, c as u32)
            }
            c if ('\u{80}'..='\u{9f}').contains(&c) => format!("C1 control U+{:04X}", c as u32),
            _ => continue,
        };
        if !found.contains(&name) {
            found.push(name);
        }
        if found.len() >= 16 {
            break;
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn names_map_to_xterm_bytes() {
        assert_eq!(key_bytes("Enter", false).unwrap(), b"\r");
        assert_eq!(key_bytes("C-c", false).unwrap(), [3]);
        assert_eq!(key_bytes("C-d", false).unwrap(), [4]);
        assert_eq!(key_bytes("C-A", false).unwrap(), [1]);
        assert_eq!(key_bytes("C-z", false).unwrap(), [26]);
        assert_eq!(key_bytes("M-x", false).unwrap(), b"\x1bx");
        assert_eq!(key_bytes("Up", false).unwrap(), b"\x1b[A");
        assert_eq!(key_bytes("Up", true).unwrap(), b"\x1bOA");
        assert_eq!(key_bytes("F1", false).unwrap(), b"\x1bOP");
        assert_eq!(key_bytes("F12", false).unwrap(), b"\x1b[24~");
        assert_eq!(key_bytes("PageDown", false).unwrap(), b"\x1b[6~");
    }

    #[test]
    fn unknown_names_are_sentences() {
        for bad in ["Enterr", "C-", "C-ab", "M-", "F13", "", "C-1", "ctrl-c"] {
            let e = key_bytes(bad, false).unwrap_err();
            assert!(e.starts_with("unknown key name"), "{bad}: {e}");
        }
    }

    #[test]
    fn control_characters_in_text_are_named_once() {
        assert_eq!(control_in_text("ls -l\n"), Vec::<String>::new());
        assert_eq!(control_in_text("a\x03b\x03\x1b[A"), ["C-c (0x03)", "ESC (an escape sequence)"]);
    }

    proptest! {
        #[test]
        fn any_name_is_bytes_or_an_error(name in ".{0,12}", app in any::<bool>()) {
            match key_bytes(&name, app) {
                Ok(b) => prop_assert!(!b.is_empty() && b.len() <= 8),
                Err(e) => prop_assert!(e.starts_with("unknown key name")),
            }
        }

        #[test]
        fn control_scan_never_panics(text in any::<String>()) {
            prop_assert!(control_in_text(&text).len() <= 16);
        }
    }
}
