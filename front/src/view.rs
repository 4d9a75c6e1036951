//! The model view of a job's output: a bounded in-memory copy (first 32 KiB and last 32 KiB of the
//! interleaved stream) rendered as text with an explicit marker for what lies between.
//!
//! Invariants: memory per job is bounded (two 32 KiB buffers plus one small record per stream switch
//! inside them); byte counts are exact; when the output exceeds [`VIEW_BUDGET`] the rendered view holds
//! the head, one marker line `[… heddle: N bytes omitted; see the output call …]`, and the tail, where N
//! is exact and the omitted bytes are also given as per-stream ranges for the `output` call. The head is
//! cut at the last newline of its final KiB (else at a UTF-8 boundary) and the tail starts after the
//! first newline of its first KiB (else at a UTF-8 boundary); those cut bytes count as omitted.
//!
//! ```
//! use front::view::ViewBuf;
//! use shm_proto::msg::Stream;
//! let mut v = ViewBuf::default();
//! v.push(Stream::Stdout, b"hello\n");
//! assert_eq!(v.render().text, "hello\n");
//! ```

use shm_proto::msg::Stream;
use std::collections::VecDeque;

/// Bytes of output shown whole; beyond this the view is head + marker + tail.
pub const VIEW_BUDGET: usize = 64 * 1024;
const HEAD: usize = VIEW_BUDGET / 2;
const TAIL: usize = VIEW_BUDGET / 2;
/// How far from a cut the renderer looks for a newline to cut at instead.
const LINE_SLACK: usize = 1024;
/// Lines in an announcement's `last_lines`, and the longest line kept there.
const LAST_LINES: usize = 5;
const LAST_LINE_MAX: usize = 512;

/// Index of a stream in per-stream arrays.
pub fn stream_index(s: Stream) -> usize {
    match s {
        Stream::Stdout => 0,
        Stream::Stderr => 1,
    }
}

/// Where a run of same-stream bytes starts: its position in the interleaved output and the byte counts
/// of both streams before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Seg {
    pos: u64,
    stream: usize,
    before: [u64; 2],
}

impl Seg {
    /// Per-stream counts at interleaved position `pos` (which lies in this run).
    fn counts_at(&self, pos: u64) -> [u64; 2] {
        let mut c = self.before;
        c[self.stream] += pos - self.pos;
        c
    }
}

fn counts_at(segs: impl DoubleEndedIterator<Item = Seg>, pos: u64) -> [u64; 2] {
    segs.rev().find(|s| s.pos <= pos).map_or([0, 0], |s| s.counts_at(pos))
}

/// A ring keeping the last [`TAIL`] bytes written.
#[derive(Debug)]
struct TailRing {
    buf: Vec<u8>,
    /// Bytes ever written.
    written: u64,
}

impl TailRing {
    fn write(&mut self, mut data: &[u8]) {
        if self.buf.is_empty() {
            self.buf = vec![0; TAIL];
        }
        self.written += data.len() as u64;
        if data.len() > TAIL {
            data = &data[data.len() - TAIL..];
        }
        let end = (self.written % TAIL as u64) as usize;
        let start = (end + TAIL - data.len()) % TAIL;
        let first = data.len().min(TAIL - start);
        self.buf[start..start + first].copy_from_slice(&data[..first]);
        self.buf[..data.len() - first].copy_from_slice(&data[first..]);
    }

    fn len(&self) -> usize {
        self.written.min(TAIL as u64) as usize
    }

    fn contents(&self) -> Vec<u8> {
        let n = self.len();
        let end = (self.written % TAIL as u64) as usize;
        let start = (end + TAIL - n) % TAIL;
        let mut out = Vec::with_capacity(n);
        let first = n.min(TAIL - start);
        out.extend_from_slice(&self.buf[start..start + first]);
        out.extend_from_slice(&self.buf[..n - first]);
        out
    }
}

/// The bounded copy of one job's interleaved output.
#[derive(Debug)]
pub struct ViewBuf {
    head: Vec<u8>,
    head_segs: Vec<Seg>,
    tail: TailRing,
    tail_segs: VecDeque<Seg>,
    counts: [u64; 2],
    last_stream: Option<usize>,
}

impl Default for ViewBuf {
    fn default() -> Self {
        ViewBuf {
            head: Vec::new(),
            head_segs: Vec::new(),
            tail: TailRing { buf: Vec::new(), written: 0 },
            tail_segs: VecDeque::new(),
            counts: [0, 0],
            last_stream: None,
        }
    }
}

/// The omitted middle of a view, per stream: `[start, end)` byte offsets of each stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Omission {
    pub bytes: u64,
    pub stdout: (u64, u64),
    pub stderr: (u64, u64),
}

/// A rendered view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rendered {
    pub text: String,
    pub omitted: Option<Omission>,
}

/// The marker line standing for `n` omitted bytes (newline excluded).
pub fn marker(n: u64) -> String {
    format!("[… heddle: {n} bytes omitted; see the output call …]")
}

impl ViewBuf {
    /// Append a chunk.
    pub fn push(&mut self, stream: Stream, data: &[u8]) {
        let s = stream_index(stream);
        let mut pos = self.total();
        let take = data.len().min(HEAD - self.head.len());
        let new_run = self.last_stream != Some(s);
        if take > 0 {
            if new_run {
                self.head_segs.push(Seg { pos, stream: s, before: self.counts });
            }
            self.head.extend_from_slice(&data[..take]);
            self.counts[s] += take as u64;
            pos += take as u64;
        }
        let rest = &data[take..];
        if !rest.is_empty() {
            if new_run || take > 0 || self.tail_segs.is_empty() {
                self.tail_segs.push_back(Seg { pos, stream: s, before: self.counts });
            }
            self.tail.write(rest);
            self.counts[s] += rest.len() as u64;
            self.trim_tail_segs();
        }
        if !data.is_empty() {
            self.last_stream = Some(s);
        }
    }

    /// Drop runs that lie wholly before the tail window (keeping the one the window starts in).
    fn trim_tail_segs(&mut self) {
        let window_start = self.total() - self.tail.len() as u64;
        while self.tail_segs.len() > 1 && self.tail_segs[1].pos <= window_start {
            self.tail_segs.pop_front();
        }
    }

    /// Bytes of both streams so far.
    pub fn total(&self) -> u64 {
        self.counts[0] + self.counts[1]
    }

    /// Exact byte counts `[stdout, stderr]`.
    pub fn counts(&self) -> [u64; 2] {
        self.counts
    }

    /// Render the view (lossy UTF-8).
    pub fn render(&self) -> Rendered {
        let tail = self.tail.contents();
        if self.total() <= VIEW_BUDGET as u64 {
            let mut all = self.head.clone();
            all.extend_from_slice(&tail);
            return Rendered { text: String::from_utf8_lossy(&all).into_owned(), omitted: None };
        }
        let head_keep = cut_head(&self.head);
        let tail_skip = cut_tail(&tail);
        let tail_start = self.total() - tail.len() as u64 + tail_skip as u64;
        let a = counts_at(self.head_segs.iter().copied(), head_keep as u64);
        let b = counts_at(self.tail_segs.iter().copied(), tail_start);
        let omission = Omission { bytes: tail_start - head_keep as u64, stdout: (a[0], b[0]), stderr: (a[1], b[1]) };
        let mut text = String::from_utf8_lossy(&self.head[..head_keep]).into_owned();
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&marker(omission.bytes));
        text.push('\n');
        text.push_str(&String::from_utf8_lossy(&tail[tail_skip..]));
        Rendered { text, omitted: Some(omission) }
    }

    /// Up to the last five lines of the output (each at most 512 bytes, longer ones cut with `…`).
    pub fn last_lines(&self) -> Vec<String> {
        let tail = self.tail.contents();
        let bytes = if tail.is_empty() { self.head.clone() } else { tail };
        let text = String::from_utf8_lossy(&bytes);
        let mut lines: Vec<String> = text
            .trim_end_matches(['\n', '\r'])
            .rsplit('\n')
            .take(LAST_LINES)
            .map(|l| shorten(l.trim_end_matches('\r')))
            .collect();
        if lines.len() == 1 && lines[0].is_empty() {
            lines.clear();
        }
        lines.reverse();
        lines
    }
}

fn shorten(line: &str) -> String {
    if line.len() <= LAST_LINE_MAX {
        return line.to_owned();
    }
    let mut end = LAST_LINE_MAX;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &line[..end])
}

/// How many head bytes to keep: through the last newline of the final KiB, else to a UTF-8 boundary.
fn cut_head(head: &[u8]) -> usize {
    let from = head.len().saturating_sub(LINE_SLACK);
    match head[from..].iter().rposition(|&b| b == b'\n') {
        Some(i) => from + i + 1,
        None => utf8_end(head),
    }
}

/// How many tail bytes to skip: through the first newline of the first KiB (unless that leaves
/// nothing), else up to the first UTF-8 character start.
fn cut_tail(tail: &[u8]) -> usize {
    let window = &tail[..tail.len().min(LINE_SLACK)];
    match window.iter().position(|&b| b == b'\n') {
        Some(i) if i + 1 < tail.len() => i + 1,
        _ => tail.iter().take(3).take_while(|&&b| b & 0xC0 == 0x80).count(),
    }
}

/// The length of `bytes` without a trailing incomplete UTF-8 character.
fn utf8_end(bytes: &[u8]) -> usize {
    let n = bytes.len();
    for back in 1..=n.min(4) {
        let b = bytes[n - back];
        if b & 0xC0 == 0x80 {
            continue;
        }
        let need = match b {
            0x00..=0x7F => 1,
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            _ => 4,
        };
        return if need > back { n - back } else { n };
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn small_output_is_shown_whole() {
        let mut v = ViewBuf::default();
        v.push(Stream::Stdout, b"out\n");
        v.push(Stream::Stderr, b"err\n");
        let r = v.render();
        assert_eq!(r.text, "out\nerr\n");
        assert_eq!(r.omitted, None);
        assert_eq!(v.counts(), [4, 4]);
    }

    #[test]
    fn exactly_the_budget_is_not_cut() {
        let mut v = ViewBuf::default();
        v.push(Stream::Stdout, &vec![b'a'; VIEW_BUDGET]);
        let r = v.render();
        assert_eq!((r.text.len(), r.omitted), (VIEW_BUDGET, None));
    }

    #[test]
    fn large_output_has_head_marker_tail_and_exact_omission() {
        let mut v = ViewBuf::default();
        let lines: String = (0..20000).map(|i| format!("line {i:05}\n")).collect();
        for chunk in lines.as_bytes().chunks(4000) {
            v.push(Stream::Stdout, chunk);
        }
        let r = v.render();
        let om = r.omitted.clone().unwrap();
        assert!(r.text.starts_with("line 00000\n"));
        assert!(r.text.ends_with("line 19999\n"));
        let marker_line = format!("\n{}\n", marker(om.bytes));
        let (head, tail) = r.text.split_once(&marker_line).unwrap();
        assert_eq!(head.rsplit('\n').next().unwrap().len(), "line 00000".len(), "the head ends with a whole line");
        assert_eq!(
            head.len() as u64 + 1 + om.bytes + tail.len() as u64,
            lines.len() as u64,
            "head + omitted + tail = all"
        );
        assert_eq!(om.stdout, (head.len() as u64 + 1, lines.len() as u64 - tail.len() as u64));
        assert_eq!(om.stderr, (0, 0));
        assert!(tail.starts_with("line "), "tail starts at a line: {:?}", &tail[..20]);
    }

    #[test]
    fn omitted_ranges_are_per_stream() {
        let mut v = ViewBuf::default();
        // 40 KiB stdout, 30 KiB stderr, 40 KiB stdout: no newlines, so cuts are byte-exact.
        v.push(Stream::Stdout, &vec![b'o'; 40 * 1024]);
        v.push(Stream::Stderr, &vec![b'e'; 30 * 1024]);
        v.push(Stream::Stdout, &vec![b'O'; 40 * 1024]);
        let om = v.render().omitted.unwrap();
        assert_eq!(om.bytes, 110 * 1024 - 64 * 1024);
        assert_eq!(om.stdout, (32 * 1024, 48 * 1024));
        assert_eq!(om.stderr, (0, 30 * 1024));
    }

    #[test]
    fn cuts_respect_utf8() {
        let mut v = ViewBuf::default();
        v.push(Stream::Stdout, "€".repeat(40_000).as_bytes());
        let r = v.render();
        assert!(!r.text.contains('\u{FFFD}'), "no replacement characters at the cuts");
        let om = r.omitted.unwrap();
        let shown = r.text.len() - marker(om.bytes).len() - 1 - 1;
        assert_eq!(shown as u64 + om.bytes, 120_000);
    }

    #[test]
    fn last_lines_are_the_last_five() {
        let mut v = ViewBuf::default();
        v.push(Stream::Stdout, b"1\n2\n3\n4\n5\n6\r\n");
        assert_eq!(v.last_lines(), ["2", "3", "4", "5", "6"]);
        assert!(ViewBuf::default().last_lines().is_empty());
        let mut long = ViewBuf::default();
        long.push(Stream::Stderr, &vec![b'x'; 2000]);
        assert_eq!(long.last_lines()[0].len(), 512 + "…".len());
    }

    #[test]
    fn tail_ring_keeps_the_last_bytes() {
        let mut t = TailRing { buf: Vec::new(), written: 0 };
        let all: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        for c in all.chunks(7919) {
            t.write(c);
        }
        assert_eq!(t.contents(), &all[all.len() - TAIL..]);
    }

    proptest! {
        /// Whatever the chunking and stream mix: counts are exact, and head + omitted + tail covers all.
        #[test]
        fn accounting_is_exact(chunks in proptest::collection::vec((any::<bool>(), 0usize..20_000), 0..40)) {
            let mut v = ViewBuf::default();
            let mut counts = [0u64; 2];
            let mut all = Vec::new();
            for (i, (err, len)) in chunks.into_iter().enumerate() {
                let s = if err { Stream::Stderr } else { Stream::Stdout };
                let data: Vec<u8> = (0..len).map(|j| if j % 61 == 60 { b'\n' } else { b'a' + (i % 26) as u8 }).collect();
                counts[stream_index(s)] += len as u64;
                all.push((s, data.clone()));
                v.push(s, &data);
            }
            prop_assert_eq!(v.counts(), counts);
            let r = v.render();
            let total = counts[0] + counts[1];
            match r.omitted {
                None => prop_assert_eq!(r.text.len() as u64, total),
                Some(om) => {
                    let m = format!("{}\n", marker(om.bytes));
                    let (head, tail) = r.text.split_once(&m).unwrap();
                    let head_keep = om.stdout.0 + om.stderr.0;
                    prop_assert!(head.len() as u64 == head_keep || head.len() as u64 == head_keep + 1);
                    prop_assert_eq!(head_keep + om.bytes + tail.len() as u64, total);
                    prop_assert_eq!((om.stdout.1 - om.stdout.0) + (om.stderr.1 - om.stderr.0), om.bytes);
                }
            }
        }
    }
}
