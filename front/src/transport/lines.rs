//! A connection's input split into newline-delimited lines, fed in whatever pieces the socket gives.
//!
//! A line is never held past `max` bytes: a longer one is dropped as it arrives and comes out as
//! [`Line::TooLong`] once its newline (or the end of input) is seen, so one client cannot pin more than
//! `max` bytes of the front's memory. Every newline ends exactly one line; a last line without its
//! newline is still a line once the input ends ([`Lines::finish`]).
//!
//! ```text
//! let mut l = Lines::new(5);
//! l.feed(b"ab\nthis is too long\ncd");
//! l.finish();
//! assert_eq!(l.ready.len(), 3); // "ab", TooLong, "cd"
//! ```
//!
//! (The type is the crate's own, so this runs as the unit test `lines_are_split_capped_and_skipped`.)

use std::collections::VecDeque;

/// One item of a connection's input.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Line {
    /// A complete line, newline stripped.
    Data(Vec<u8>),
    /// A line longer than the limit, skipped.
    TooLong,
}

/// A connection's input split into lines, never holding more than `max` bytes of a partial line.
#[derive(Debug)]
pub(crate) struct Lines {
    max: usize,
    partial: Vec<u8>,
    /// The current line went past `max`: drop the rest of it.
    skipping: bool,
    pub(crate) ready: VecDeque<Line>,
}

impl Lines {
    pub(crate) fn new(max: usize) -> Lines {
        Lines { max, partial: Vec::new(), skipping: false, ready: VecDeque::new() }
    }

    pub(crate) fn feed(&mut self, mut chunk: &[u8]) {
        while let Some(i) = chunk.iter().position(|&b| b == b'\n') {
            self.take(&chunk[..i]);
            let line = if std::mem::take(&mut self.skipping) {
                Line::TooLong
            } else {
                // One huge request must not pin megabytes to the connection for its lifetime.
                Line::Data(std::mem::take(&mut self.partial))
            };
            self.ready.push_back(line);
            chunk = &chunk[i + 1..];
        }
        self.take(chunk);
    }

    fn take(&mut self, part: &[u8]) {
        if self.skipping {
            return;
        }
        if self.partial.len() + part.len() > self.max {
            self.skipping = true;
            self.partial = Vec::new();
        } else {
            self.partial.extend_from_slice(part);
        }
    }

    /// The input ended: a last line without its newline is still a line.
    pub(crate) fn finish(&mut self) {
        if std::mem::take(&mut self.skipping) {
            self.ready.push_back(Line::TooLong);
        } else if !self.partial.is_empty() {
            self.ready.push_back(Line::Data(std::mem::take(&mut self.partial)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines_of(chunks: &[&[u8]], max: usize) -> Vec<Line> {
        let mut l = Lines::new(max);
        for c in chunks {
            l.feed(c);
        }
        l.finish();
        l.ready.into_iter().collect()
    }

    fn data(b: &[u8]) -> Line {
        Line::Data(b.to_vec())
    }

    #[test]
    fn lines_are_split_capped_and_skipped() {
        let got = lines_of(&[b"ab\nthis is ", b"too long\ncd\nla", b"st"], 5);
        assert_eq!(got, [data(b"ab"), Line::TooLong, data(b"cd"), data(b"last")]);
        assert_eq!(lines_of(&[b"12345\n"], 5), [data(b"12345")]);
        assert_eq!(lines_of(&[b"123", b"456"], 5), [Line::TooLong]);
        assert_eq!(lines_of(&[b"\n\n"], 5), [data(b""), data(b"")]);
        assert_eq!(lines_of(&[], 5), []);
    }

    proptest::proptest! {
        /// However the bytes are cut into reads, the same lines come out, each within the limit, and
        /// every newline ends exactly one line.
        #[test]
        fn garbage_in_any_cut_gives_the_same_lines(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600), cuts in proptest::collection::vec(0usize..600, 0..8), max in 0usize..40) {
            let whole = lines_of(&[&bytes], max);
            let mut at: Vec<usize> = cuts.into_iter().map(|c| c.min(bytes.len())).collect();
            at.sort_unstable();
            let mut pieces = Vec::new();
            let mut from = 0;
            for c in at {
                pieces.push(&bytes[from..c]);
                from = c;
            }
            pieces.push(&bytes[from..]);
            proptest::prop_assert_eq!(&lines_of(&pieces, max), &whole);
            let newlines = bytes.iter().filter(|&&b| b == b'\n').count();
            let last = usize::from(bytes.last().is_some_and(|&b| b != b'\n'));
            proptest::prop_assert_eq!(whole.len(), newlines + last);
            for l in &whole {
                if let Line::Data(d) = l {
                    proptest::prop_assert!(d.len() <= max && !d.contains(&b'\n'));
                }
            }
        }
    }
}
