//! Naming binary output: a small magic-number table plus a control-byte heuristic, so a gzip stream
//! becomes `<binary: 4.2 MiB, gzip data>` instead of noise. [`Splitter`] applies it along the whole
//! stream, line by line: each binary stretch becomes one marker with its size, and the text before,
//! between and after stays text (visible, numbered and searchable).
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

/// Longest piece classified at once: a line longer than this (or a stretch without newlines) is cut.
const LINE_CAP: usize = 4096;
/// A clean line this long (bytes, trimmed) ends a binary stretch on its own; a shorter one (of at least
/// [`SHORT_LINE`] bytes) does when a second clean line follows it, or the stream ends. Random bytes make
/// such lines rarely: 12 clean bytes in a row are ~1e-5 likely at a line start.
const CLEAN_LINE: usize = 12;
const SHORT_LINE: usize = 3;

/// A piece of a stream, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    Text(Vec<u8>),
    /// A binary stretch that ended, with its size and what it is.
    Binary {
        bytes: u64,
        name: &'static str,
    },
}

/// Splits a stream into text and binary stretches as bytes arrive. Text passes through at once; a binary
/// stretch is counted (never kept) until a clean line ends it. Memory is bounded by [`LINE_CAP`].
#[derive(Debug, Default)]
pub struct Splitter {
    /// Bytes seen, and the first of them (for the magic table).
    offset: u64,
    head: Vec<u8>,
    /// The open binary stretch: its bytes so far and whether it began the stream.
    binary: Option<(u64, bool)>,
    /// In a binary stretch: the line being read, and a short clean line held back.
    line: Vec<u8>,
    held: Vec<u8>,
}

/// Counts of what makes bytes look binary: NULs, controls no text uses, invalid UTF-8 (not counting an
/// incomplete character at the end, which the next chunk may complete).
fn oddities(seg: &[u8]) -> (usize, usize, usize) {
    let nul = memchr::memchr_iter(0, seg).count();
    let ctl = seg
        .iter()
        .filter(|&&b| b < 0x20 && !matches!(b, 0 | b'\t' | b'\n' | b'\r' | 0x07 | 0x08 | 0x0c | 0x1b))
        .count();
    let mut invalid = 0;
    let mut rest = seg;
    while !rest.is_empty() {
        match std::str::from_utf8(rest) {
            Ok(_) => break,
            Err(e) => match e.error_len() {
                Some(n) => {
                    invalid += n;
                    rest = &rest[e.valid_up_to() + n..];
                }
                None => break,
            },
        }
    }
    (nul, ctl, invalid)
}

/// A piece of text-mode output that is binary: a NUL, or many controls, or mostly invalid UTF-8.
fn looks_binary(seg: &[u8]) -> bool {
    let (nul, ctl, invalid) = oddities(seg);
    nul > 0 || (ctl >= 2 && ctl * 10 > seg.len()) || (invalid >= 4 && invalid * 10 > seg.len() * 3)
}

/// A line with nothing binary in it at all (how a binary stretch ends).
fn clean(seg: &[u8]) -> bool {
    oddities(seg) == (0, 0, 0) && !seg.contains(&0x07)
}

fn trimmed_len(seg: &[u8]) -> usize {
    seg.trim_ascii().len()
}

impl Splitter {
    /// Feed bytes; returns the pieces they complete.
    /// The heap bytes the splitter holds.
    pub fn held_bytes(&self) -> usize {
        self.head.capacity() + self.line.capacity() + self.held.capacity()
    }

    pub fn feed(&mut self, data: &[u8]) -> Vec<Piece> {
        if self.head.len() < 16 {
            let n = (16 - self.head.len()).min(data.len());
            self.head.extend_from_slice(&data[..n]);
        }
        let mut out = Vec::new();
        let mut rest = data;
        while !rest.is_empty() {
            let taken = match self.binary {
                None => self.text_step(rest, &mut out),
                Some(_) => self.binary_step(rest, &mut out),
            };
            self.offset += taken as u64;
            rest = &rest[taken..];
        }
        out
    }

    /// Text mode: pass a segment (up to a line end) through, or open a binary stretch with it.
    fn text_step(&mut self, data: &[u8], out: &mut Vec<Piece>) -> usize {
        let cap = data.len().min(LINE_CAP);
        let end = memchr::memchr2(b'\n', b'\r', &data[..cap]).map_or(cap, |p| p + 1);
        let seg = &data[..end];
        let at_start = self.offset == 0 && magic(seg).is_some();
        if at_start || looks_binary(seg) {
            self.binary = Some((seg.len() as u64, self.offset == 0));
        } else {
            out.push(Piece::Text(seg.to_vec()));
        }
        end
    }

    /// Binary mode: gather a line and decide whether it ends the stretch.
    fn binary_step(&mut self, data: &[u8], out: &mut Vec<Piece>) -> usize {
        let room = LINE_CAP - self.line.len();
        let cap = data.len().min(room);
        let (end, complete) = match memchr::memchr(b'\n', &data[..cap]) {
            Some(p) => (p + 1, true),
            None => (cap, cap == room),
        };
        self.line.extend_from_slice(&data[..end]);
        if complete {
            let line = std::mem::take(&mut self.line);
            self.decide(line, false, out);
        }
        end
    }

    /// A whole line read in a binary stretch: count it, hold it, or end the stretch with it.
    fn decide(&mut self, line: Vec<u8>, ended: bool, out: &mut Vec<Piece>) {
        let Some((bytes, _)) = &mut self.binary else { return };
        let len = trimmed_len(&line);
        let is_clean = clean(&line);
        let ends = is_clean && (len >= CLEAN_LINE || (len >= SHORT_LINE && (!self.held.is_empty() || ended)));
        if ends {
            self.close(out);
            let held = std::mem::take(&mut self.held);
            if !held.is_empty() {
                out.push(Piece::Text(held));
            }
            out.push(Piece::Text(line));
        } else if is_clean && len >= SHORT_LINE && self.held.is_empty() {
            self.held = line;
        } else {
            *bytes += (self.held.len() + line.len()) as u64;
            self.held.clear();
        }
    }

    fn close(&mut self, out: &mut Vec<Piece>) {
        if let Some((bytes, at_start)) = self.binary.take() {
            let name = if at_start { magic(&self.head).unwrap_or("data") } else { "data" };
            out.push(Piece::Binary { bytes, name });
        }
    }

    /// The stream ended: the pieces still open.
    pub fn finish(&mut self) -> Vec<Piece> {
        let mut out = Vec::new();
        if self.binary.is_some() {
            let line = std::mem::take(&mut self.line);
            if !line.is_empty() {
                self.decide(line, true, &mut out);
            }
            let held = std::mem::take(&mut self.held);
            if !held.is_empty() {
                self.close(&mut out);
                out.push(Piece::Text(held));
            }
            self.close(&mut out);
        }
        out
    }

    /// The binary stretch being read, as `(bytes so far, name)`.
    pub fn open_binary(&self) -> Option<(u64, &'static str)> {
        self.binary.map(|(bytes, at_start)| {
            let pending = (self.line.len() + self.held.len()) as u64;
            (bytes + pending, if at_start { magic(&self.head).unwrap_or("data") } else { "data" })
        })
    }
}

/// The name of a known format `head` starts with.
fn magic(head: &[u8]) -> Option<&'static str> {
    MAGIC.iter().find(|(m, _)| head.starts_with(m)).map(|(_, name)| *name)
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

    fn split(chunks: &[&[u8]]) -> Vec<Piece> {
        let mut s = Splitter::default();
        let mut out: Vec<Piece> = chunks.iter().flat_map(|c| s.feed(c)).collect();
        out.extend(s.finish());
        out
    }

    fn text(s: &str) -> Piece {
        Piece::Text(s.as_bytes().to_vec())
    }

    #[test]
    fn binary_stretches_are_counted_and_the_text_around_them_stays() {
        let mut blob = b"\x1f\x8b\x08\x00".to_vec();
        blob.extend((0..3000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8));
        blob.push(b'\n');
        let mut stream = blob.clone();
        stream.extend_from_slice(b"after the blob, text\nok\n");
        let out = split(&[&stream]);
        assert_eq!(
            out,
            [
                Piece::Binary { bytes: blob.len() as u64, name: "gzip data" },
                text("after the blob, text\n"),
                text("ok\n")
            ]
        );
        let out = split(&[b"before\n", b"\x00\x01\x02\x03\x00\n", b"done\n"]);
        assert_eq!(out, [text("before\n"), Piece::Binary { bytes: 6, name: "data" }, text("done\n")]);
        assert_eq!(split(&[b"ok \xff\xfe end\n"]), [Piece::Text(b"ok \xff\xfe end\n".to_vec())]);
    }

    proptest! {
        #[test]
        fn garbage_never_panics(head in proptest::collection::vec(any::<u8>(), 0..1000), ended: bool) {
            let _ = sniff(&head, ended);
        }

        /// Every byte of garbage is in exactly one piece, in order; text pieces are the bytes themselves.
        #[test]
        fn the_splitter_accounts_for_every_byte(
            data in proptest::collection::vec(prop_oneof![any::<u8>(), Just(b'\n'), Just(b'a')], 0..12_000),
            cut in 0usize..12_000,
        ) {
            let cut = cut.min(data.len());
            let mut s = Splitter::default();
            let mut out = s.feed(&data[..cut]);
            out.extend(s.feed(&data[cut..]));
            prop_assert!(s.open_binary().map_or(0, |b| b.0) <= data.len() as u64);
            out.extend(s.finish());
            prop_assert!(s.open_binary().is_none());
            let mut total = 0u64;
            let mut texts = Vec::new();
            for p in &out {
                match p {
                    Piece::Text(t) => { total += t.len() as u64; texts.extend_from_slice(t); }
                    Piece::Binary { bytes, .. } => { prop_assert!(*bytes > 0); total += bytes; }
                }
            }
            prop_assert_eq!(total, data.len() as u64);
            for w in out.windows(2) {
                let two_markers = matches!(w, [Piece::Binary { .. }, Piece::Binary { .. }]);
                prop_assert!(!two_markers, "adjacent stretches are one");
            }
        }
    }
}
