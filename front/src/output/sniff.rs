//! Naming binary output: a small magic-number table plus a control-byte heuristic, applied to the first
//! bytes of a stream, so a gzip stream becomes `<binary: 4.2 MiB, gzip data>` instead of noise.
//!
//! ```
//! use front::output::sniff::{sniff, Sniff};
//! assert_eq!(sniff(b"\x1f\x8b\x08\x00\x00\x00\x00\x00", false), Sniff::Binary("gzip data"));
//! assert_eq!(sniff(b"hello world\n", false), Sniff::Text);
//! assert_eq!(sniff(b"\x1f", false), Sniff::Undecided);
//! ```

/// Bytes looked at before deciding.
pub const SNIFF_LEN: usize = 512;

const MAGIC: &[(&[u8], &str)] = &[
    (b"\x1f\x8b", "gzip data"),
    (b"PK\x03\x04", "zip archive"),
    (b"\x7fELF", "ELF executable"),
    (b"\x89PNG\r\n\x1a\n", "PNG image"),
    (b"\xff\xd8\xff", "JPEG image"),
    (b"GIF8", "GIF image"),
    (b"BZh", "bzip2 data"),
    (b"\xfd7zXZ\x00", "xz data"),
    (b"\x28\xb5\x2f\xfd", "zstd data"),
    (b"7z\xbc\xaf\x27\x1c", "7-zip archive"),
    (b"%PDF-", "PDF document"),
    (b"\x00asm", "WebAssembly module"),
    (b"SQLite format 3\x00", "SQLite database"),
    (b"\xca\xfe\xba\xbe", "Java class or Mach-O fat binary"),
];

/// What the first bytes of a stream say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sniff {
    /// Too few bytes yet (and the stream goes on).
    Undecided,
    Text,
    Binary(&'static str),
}

/// Classify `head` (the first bytes of a stream); `ended` says no more bytes will come.
pub fn sniff(head: &[u8], ended: bool) -> Sniff {
    for (magic, name) in MAGIC {
        if head.len() >= magic.len() && head.starts_with(magic) {
            return Sniff::Binary(name);
        }
        if head.len() < magic.len() && magic.starts_with(head) && !ended && !head.is_empty() {
            return Sniff::Undecided;
        }
    }
    let window = &head[..head.len().min(SNIFF_LEN)];
    let odd = window.iter().filter(|&&b| b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r' | 0x08 | 0x0c | 0x1b)).count();
    if window.contains(&0) || odd * 10 > window.len() {
        return Sniff::Binary("data");
    }
    Sniff::Text
}

/// `4.2 MiB`-style size (`protocol::text::bytes`, with "bytes" spelled out below 1 KiB).
pub fn human_bytes(n: u64) -> String {
    if n < 1024 {
        format!("{n} bytes")
    } else {
        protocol::text::bytes(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn sizes_read_naturally() {
        assert_eq!(human_bytes(10), "10 bytes");
        assert_eq!(human_bytes(4_404_019), "4.2 MiB");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
    }

    #[test]
    fn nul_bytes_and_controls_are_binary_text_is_not() {
        assert_eq!(sniff(&[0u8; 100], false), Sniff::Binary("data"));
        assert_eq!(sniff(b"\x1b[31mred\x1b[0m\r\n", true), Sniff::Text);
        assert_eq!(sniff("€ and ü".as_bytes(), true), Sniff::Text);
        assert_eq!(sniff(b"PK", true), Sniff::Text);
        assert_eq!(sniff(b"P", false), Sniff::Undecided, "it may still become a zip");
        assert_eq!(sniff(b"x", false), Sniff::Text, "no magic starts so: decided at once");
    }

    proptest! {
        #[test]
        fn garbage_never_panics(head in proptest::collection::vec(any::<u8>(), 0..1000), ended: bool) {
            let _ = sniff(&head, ended);
        }
    }
}
