//! The rendered-line log: every line of a job's model-facing output (after terminal rendering and
//! redaction), numbered from 1 in commit order, runs of identical lines stored once with their count.
//! It is what makes `lines`, `tail`, `grep` and `errors` views cheap without re-rendering the raw log.
//!
//! File `<job>.lines` next to the raw `<job>.log`: a sequence of zstd-compressed blocks of runs, each
//!
//! ```text
//! [0xB1][3 zero bytes][compressed len u32 LE][plain len u32 LE][runs u32 LE]
//! [first line u64 LE][last line u64 LE][rendered bytes u64 LE][compressed len bytes: one zstd frame]
//! ```
//!
//! whose plain bytes are the block's runs, each `[tag u8][count varint if tag&2][gap varint if tag&4]
//! [text len varint][text]` (tag bit 0: stderr; a run's first line is the previous run's last + 1 plus
//! the gap, the block's first run starting at the header's first line). A block is sealed (compressed)
//! once its plain bytes reach [`BLOCK`], and whatever is open when a view plans a read or the job ends;
//! until then its runs wait in memory. So the log costs a fraction of the bytes it indexes (`seq 1
//! 5000000`: 4.0× its output with the former fixed 24-byte record per run, 0.081× now; a make/gcc
//! build log: 1.17×, now 0.039×; `tests/tests/disk.rs` measures), and a block is the unit of retention.
//!
//! A sparse in-memory index (one entry per block) maps a line number to the file offset of a block at
//! or before it, so a line range or a tail costs one seek, one block's decompression and a bounded scan.
//! Buffered like the raw store; a write error stops the log (kept and reported), never a panic; a
//! damaged block is an error naming its offset, never a panic.
//!
//! ```
//! use front::output::linelog::{LineLog, Run};
//! let dir = tempfile::tempdir().unwrap();
//! let mut log = LineLog::create(dir.path().join("1.lines"));
//! log.append(&Run { stream: 0, first: 1, count: 3, text: "same".into() });
//! log.sync();
//! let mut got = Vec::new();
//! log.plan(2).scan(|r| { got.push((r.first, r.count)); true }).unwrap();
//! assert_eq!(got, [(1, 3)]);
//! ```

use crate::output::store::StoreError;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

const HEADER: usize = 40;
const MAGIC: u8 = 0xB1;
const FLUSH_AT: usize = 256 * 1024;
/// Plain bytes of runs at which a block is sealed.
pub const BLOCK: usize = 64 * 1024;
/// The largest plain block a reader accepts (a block is [`BLOCK`] plus at most one run's text, and a
/// rendered line is at most a few tens of KiB): a damaged length never makes a reader allocate more.
const MAX_PLAIN: u32 = 4 << 20;
/// zstd's fastest regular level: the log is written on the output path.
const LEVEL: i32 = 1;

/// A run of identical lines (`count` ≥ 1) starting at line `first`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    /// 0 stdout, 1 stderr.
    pub stream: u8,
    pub first: u64,
    pub count: u32,
    pub text: String,
}

impl Run {
    /// The last line number of the run.
    pub fn last(&self) -> u64 {
        self.first + u64::from(self.count) - 1
    }
}

/// The block being filled: its plain bytes and what its header will say.
#[derive(Debug, Default)]
struct OpenBlock {
    plain: Vec<u8>,
    runs: u32,
    first: u64,
    last: u64,
    bytes: u64,
}

/// One job's line log. A job's record read back from disk ([`crate::jobs::frozen`]) has no file,
/// buffer or open block: it was whole on disk.
#[derive(Debug, Serialize, Deserialize)]
pub struct LineLog {
    path: PathBuf,
    #[serde(skip)]
    file: Option<File>,
    /// Let go by [`LineLog::close`]; reopened by path when needed.
    closed: bool,
    /// Sealed blocks not yet written.
    #[serde(skip)]
    buf: Vec<u8>,
    #[serde(skip)]
    open: OpenBlock,
    durable: u64,
    /// `(first line, file offset)` of every block.
    index: Vec<(u64, u64)>,
    error: Option<String>,
    /// Retention: file bytes punched out, the last line removed and the rendered bytes removed.
    removed_file: u64,
    removed_lines: u64,
    removed_bytes: u64,
}

thread_local! {
    /// One compression context per thread, reused for every block.
    static ZSTD: RefCell<Option<zstd::bulk::Compressor<'static>>> = const { RefCell::new(None) };
}

fn compress(plain: &[u8]) -> std::io::Result<Vec<u8>> {
    ZSTD.with(|c| {
        let mut c = c.borrow_mut();
        if c.is_none() {
            *c = Some(zstd::bulk::Compressor::new(LEVEL)?);
        }
        c.as_mut().map_or_else(|| Err(std::io::Error::other("no compressor")), |c| c.compress(plain))
    })
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A varint at `*at` of `b` (advancing `*at`), `None` when cut short or longer than 10 bytes.
fn get_varint(b: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..70).step_by(7) {
        let byte = *b.get(*at)?;
        *at += 1;
        v |= u64::from(byte & 0x7f).checked_shl(shift)?;
        if byte < 0x80 {
            return Some(v);
        }
    }
    None
}

/// A block header, as read.
struct Header {
    zlen: u64,
    plain: u32,
    runs: u32,
    first: u64,
    last: u64,
    bytes: u64,
}

impl Header {
    fn encode(&self) -> [u8; HEADER] {
        let mut h = [0u8; HEADER];
        h[0] = MAGIC;
        h[4..8].copy_from_slice(&(self.zlen as u32).to_le_bytes());
        h[8..12].copy_from_slice(&self.plain.to_le_bytes());
        h[12..16].copy_from_slice(&self.runs.to_le_bytes());
        h[16..24].copy_from_slice(&self.first.to_le_bytes());
        h[24..32].copy_from_slice(&self.last.to_le_bytes());
        h[32..40].copy_from_slice(&self.bytes.to_le_bytes());
        h
    }

    /// The header at file offset `off` of a log whose readable bytes end at `end`, if it is one.
    fn decode(h: &[u8; HEADER], off: u64, end: u64) -> Option<Header> {
        let u32_at = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let u64_at = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().unwrap_or([0; 8]));
        let hd = Header {
            zlen: u64::from(u32_at(4)),
            plain: u32_at(8),
            runs: u32_at(12),
            first: u64_at(16),
            last: u64_at(24),
            bytes: u64_at(32),
        };
        let fits = off.checked_add(HEADER as u64 + hd.zlen).is_some_and(|e| e <= end);
        let sane = h[0] == MAGIC && h[1..4] == [0; 3] && hd.plain <= MAX_PLAIN && hd.runs > 0;
        (fits && sane && hd.first >= 1 && hd.first <= hd.last).then_some(hd)
    }
}

impl LineLog {
    /// Create (truncate) the file; a failure is kept and reported.
    pub fn create(path: PathBuf) -> LineLog {
        let made = crate::output::store::create_private(&path, "line log");
        LineLog::with(path, made)
    }

    /// Write into `file`, an empty file already open at `path` (made ahead, see `jobs::files`).
    pub fn with_file(path: PathBuf, file: std::fs::File) -> LineLog {
        LineLog::with(path, (Some(file), None))
    }

    fn with(path: PathBuf, (file, error): (Option<std::fs::File>, Option<String>)) -> LineLog {
        LineLog {
            path,
            file,
            closed: false,
            buf: Vec::new(),
            open: OpenBlock::default(),
            durable: 0,
            index: Vec::new(),
            error,
            removed_file: 0,
            removed_lines: 0,
            removed_bytes: 0,
        }
    }

    /// Append one run (to the open block; a full block is sealed).
    pub fn append(&mut self, run: &Run) {
        if !self.reopen() {
            return;
        }
        let b = &mut self.open;
        let expected = if b.runs == 0 {
            b.first = run.first;
            run.first
        } else {
            b.last + 1
        };
        let gap = run.first.wrapping_sub(expected);
        let tag = (run.stream & 1) | (u8::from(run.count != 1) << 1) | (u8::from(gap != 0) << 2);
        b.plain.push(tag);
        if run.count != 1 {
            put_varint(&mut b.plain, u64::from(run.count));
        }
        if gap != 0 {
            put_varint(&mut b.plain, gap);
        }
        put_varint(&mut b.plain, run.text.len() as u64);
        b.plain.extend_from_slice(run.text.as_bytes());
        b.runs += 1;
        b.last = run.last();
        b.bytes += (run.text.len() as u64 + 1) * u64::from(run.count);
        if b.plain.len() >= BLOCK {
            self.seal();
            if self.buf.len() >= FLUSH_AT {
                self.flush();
            }
        }
    }

    /// Compress the open block into the write buffer (nothing when it is empty).
    fn seal(&mut self) {
        if self.open.runs == 0 {
            return;
        }
        let b = std::mem::take(&mut self.open);
        match compress(&b.plain) {
            Ok(z) => {
                self.index.push((b.first, self.durable + self.buf.len() as u64));
                let h = Header {
                    zlen: z.len() as u64,
                    plain: b.plain.len() as u32,
                    runs: b.runs,
                    first: b.first,
                    last: b.last,
                    bytes: b.bytes,
                };
                self.buf.extend_from_slice(&h.encode());
                self.buf.extend_from_slice(&z);
            }
            Err(e) => {
                self.file = None;
                self.error = Some(format!(
                    "compressing the line log {} failed ({e}); line views end at what was written before",
                    self.path.display()
                ));
            }
        }
        // Keep the plain buffer's allocation for the next block.
        self.open.plain = b.plain;
        self.open.plain.clear();
    }

    /// Free the write buffers' memory if they hold nothing (the job can write no more).
    pub fn release_buffer(&mut self) {
        crate::output::store::release(&mut self.buf);
        crate::output::store::release(&mut self.open.plain);
    }

    /// The write buffer's allocated size.
    #[cfg(test)]
    pub(crate) fn buffer_capacity(&self) -> usize {
        self.buf.capacity() + self.open.plain.capacity()
    }

    /// The job can write no more: write what is buffered and let the file go (reads open it by path;
    /// retention reopens it). See [`crate::output::store::OutputStore::close`].
    pub fn close(&mut self) {
        self.sync();
        if self.file.take().is_some() {
            self.closed = true;
        }
        self.release_buffer();
    }

    /// Whether the file is open, reopening one [`LineLog::close`] let go.
    fn reopen(&mut self) -> bool {
        if self.file.is_none() && self.closed {
            self.closed = false;
            match std::fs::OpenOptions::new().read(true).write(true).open(&self.path) {
                Ok(f) => self.file = Some(f),
                Err(e) => {
                    self.error = Some(format!(
                        "the line log {} could not be opened again ({e}); line views end at what was written before",
                        self.path.display()
                    ))
                }
            }
        }
        self.file.is_some()
    }

    /// True while the file is held open.
    pub fn is_open(&self) -> bool {
        self.file.is_some()
    }

    /// Write sealed blocks; on failure the log stops (what was written stays readable). The open
    /// block stays in memory (see [`LineLog::sync`]).
    pub fn flush(&mut self) {
        let Some(file) = &self.file else { return };
        if self.buf.is_empty() {
            return;
        }
        if let Err(e) = crate::output::store::append_buffered(file, &mut self.buf, &mut self.durable) {
            self.file = None;
            let durable = self.durable;
            self.index.retain(|(_, off)| *off < durable);
            self.error = Some(format!(
                "writing the line log {} failed ({e}); line views end at what was written before",
                self.path.display()
            ));
        }
    }

    /// Seal the open block and write everything: every appended run is readable after this.
    pub fn sync(&mut self) {
        if self.file.is_some() {
            self.seal();
        }
        self.flush();
    }

    /// Sealed blocks wait to be written.
    pub fn dirty(&self) -> bool {
        !self.buf.is_empty()
    }

    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// A read starting at a block that holds or precedes line `from` (sync first).
    pub fn plan(&self, from: u64) -> LinePlan {
        let at = self.index.partition_point(|(first, _)| *first <= from);
        let start = if at == 0 { 0 } else { self.index[at - 1].1 }.max(self.removed_file);
        LinePlan { path: self.path.clone(), start, durable: self.durable }
    }

    /// Every appended run is in the file: nothing waits in memory and no write failed.
    pub fn whole_on_disk(&self) -> bool {
        self.error.is_none() && self.open.runs == 0 && self.buf.is_empty()
    }

    /// Give back spare capacity (the log can grow no more).
    pub fn shrink(&mut self) {
        self.release_buffer();
        self.index.shrink_to_fit();
    }

    /// The heap bytes the log holds: its path, buffers and block index.
    pub fn held_bytes(&self) -> usize {
        self.path.capacity()
            + self.buf.capacity()
            + self.open.plain.capacity()
            + self.index.capacity() * std::mem::size_of::<(u64, u64)>()
            + self.error.as_ref().map_or(0, String::capacity)
    }

    /// Index entries (first line of each block), newest last: lets a tail start near the end.
    pub fn index_lines(&self) -> Vec<u64> {
        self.index.iter().map(|(l, _)| *l).collect()
    }
}

impl LineLog {
    /// Bytes of the file not removed by retention (sealed blocks not yet written included; the open
    /// block is memory, at most [`BLOCK`] plus one run, and costs the file a fraction of that once
    /// sealed).
    pub fn kept_len(&self) -> u64 {
        (self.durable + self.buf.len() as u64).saturating_sub(self.removed_file)
    }

    /// Bytes of the file on disk not removed by retention.
    pub fn file_len(&self) -> u64 {
        self.durable.saturating_sub(self.removed_file)
    }

    /// Lines removed from the start by retention (lines `1..=n`) and their rendered bytes.
    pub fn removed(&self) -> (u64, u64) {
        (self.removed_lines, self.removed_bytes)
    }

    /// Retention: remove the oldest whole blocks (sealing and flushing first) until at most `keep`
    /// bytes of the file remain. Returns true when something was removed.
    pub fn remove_oldest(&mut self, keep: u64) -> bool {
        if self.kept_len() <= keep {
            return false;
        }
        let was_closed = self.closed;
        if !self.reopen() {
            return false;
        }
        let removed = self.remove_oldest_open(keep);
        if was_closed {
            self.close();
        }
        removed
    }

    fn remove_oldest_open(&mut self, keep: u64) -> bool {
        self.sync();
        let Some(file) = &self.file else { return false };
        let (mut off, mut lines, mut bytes) = (self.removed_file, self.removed_lines, self.removed_bytes);
        let mut h = [0u8; HEADER];
        while self.durable - off > keep && file.read_exact_at(&mut h, off).is_ok() {
            let Some(hd) = Header::decode(&h, off, self.durable) else { break };
            lines = hd.last;
            bytes += hd.bytes;
            off += HEADER as u64 + hd.zlen;
        }
        if off == self.removed_file {
            return false;
        }
        crate::output::store::punch(file, self.removed_file, off);
        (self.removed_file, self.removed_lines, self.removed_bytes) = (off, lines, bytes);
        self.index.retain(|(_, o)| *o >= off);
        true
    }
}

/// A prepared scan of flushed blocks (runs without the job's lock: written blocks never change).
#[derive(Clone, Debug)]
pub struct LinePlan {
    path: PathBuf,
    start: u64,
    durable: u64,
}

impl LinePlan {
    /// Visit runs in order from the planned block until `f` returns false or the end.
    pub fn scan(&self, mut f: impl FnMut(Run) -> bool) -> Result<(), StoreError> {
        if self.start >= self.durable {
            return Ok(());
        }
        let file = File::open(&self.path).map_err(StoreError::Io)?;
        let mut r = BufReader::with_capacity(256 * 1024, file);
        r.seek(SeekFrom::Start(self.start)).map_err(StoreError::Io)?;
        let mut dec = zstd::bulk::Decompressor::new().map_err(StoreError::Io)?;
        let (mut off, mut z) = (self.start, Vec::new());
        while off < self.durable {
            let mut h = [0u8; HEADER];
            r.read_exact(&mut h).map_err(StoreError::Io)?;
            let hd = Header::decode(&h, off, self.durable).ok_or(StoreError::Corrupt(off))?;
            z.resize(hd.zlen as usize, 0);
            r.read_exact(&mut z).map_err(StoreError::Io)?;
            let plain = dec.decompress(&z, hd.plain as usize).map_err(|_| StoreError::Corrupt(off))?;
            if plain.len() != hd.plain as usize {
                return Err(StoreError::Corrupt(off));
            }
            if !visit_block(&plain, &hd, &mut f).ok_or(StoreError::Corrupt(off))? {
                break;
            }
            off += HEADER as u64 + hd.zlen;
        }
        Ok(())
    }
}

/// Visit a block's runs; `Some(false)` when `f` stopped, `None` when the block does not decode to
/// what its header says.
fn visit_block(b: &[u8], hd: &Header, f: &mut impl FnMut(Run) -> bool) -> Option<bool> {
    let (mut at, mut next, mut runs) = (0usize, hd.first, 0u32);
    while at < b.len() {
        let tag = b[at];
        at += 1;
        if tag > 7 {
            return None;
        }
        let count = if tag & 2 != 0 { u32::try_from(get_varint(b, &mut at)?).ok()? } else { 1 };
        let gap = if tag & 4 != 0 { get_varint(b, &mut at)? } else { 0 };
        let len = usize::try_from(get_varint(b, &mut at)?).ok()?;
        let text = b.get(at..at.checked_add(len)?)?;
        at += len;
        let first = next.wrapping_add(gap);
        let last = first.checked_add(u64::from(count))?.checked_sub(1)?;
        if count == 0 || first == 0 || last > hd.last {
            return None;
        }
        next = last + 1;
        runs += 1;
        let run = Run { stream: tag & 1, first, count, text: String::from_utf8_lossy(text).into_owned() };
        if !f(run) {
            return Some(false);
        }
    }
    (runs == hd.runs && next == hd.last + 1).then_some(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn all(log: &LineLog, from: u64) -> Vec<Run> {
        let mut got = Vec::new();
        log.plan(from)
            .scan(|r| {
                got.push(r);
                true
            })
            .unwrap();
        got
    }

    #[test]
    fn a_late_line_is_found_through_the_index() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = LineLog::create(dir.path().join("l"));
        for i in 1..=100_000u64 {
            log.append(&Run { stream: (i % 2) as u8, first: i, count: 1, text: format!("line {i}") });
        }
        log.sync();
        let plan = log.plan(99_999);
        assert!(plan.start > 0, "the scan starts near the line, not at the file's start");
        let mut got = None;
        plan.scan(|r| {
            if r.first == 99_999 {
                got = Some((r.stream, r.text));
                return false;
            }
            true
        })
        .unwrap();
        assert_eq!(got, Some((1, "line 99999".to_owned())));
    }

    #[test]
    fn the_log_costs_a_fraction_of_the_lines_it_keeps() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = LineLog::create(dir.path().join("l"));
        let mut text_bytes = 0u64;
        for i in 1..=1_000_000u64 {
            let text = i.to_string();
            text_bytes += text.len() as u64 + 1;
            log.append(&Run { stream: 0, first: i, count: 1, text });
        }
        log.sync();
        let size = std::fs::metadata(dir.path().join("l")).unwrap().len();
        assert!(size * 5 < text_bytes, "`seq 1 1000000`'s lines ({text_bytes} bytes) cost {size} bytes");
    }

    #[test]
    fn the_open_block_is_read_after_a_sync_and_not_before() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = LineLog::create(dir.path().join("l"));
        log.append(&Run { stream: 1, first: 1, count: 2, text: "a".into() });
        log.append(&Run { stream: 0, first: 5, count: 1, text: "after a gap".into() });
        log.flush();
        assert!(all(&log, 1).is_empty(), "a flush writes sealed blocks only");
        assert!(!log.dirty());
        log.sync();
        assert_eq!(
            all(&log, 1),
            [
                Run { stream: 1, first: 1, count: 2, text: "a".into() },
                Run { stream: 0, first: 5, count: 1, text: "after a gap".into() }
            ]
        );
    }

    #[test]
    fn a_write_error_stops_the_log_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = LineLog::create(dir.path().join("l"));
        log.append(&Run { stream: 0, first: 1, count: 1, text: "kept".into() });
        log.sync();
        log.file = Some(File::open(dir.path().join("l")).unwrap());
        log.append(&Run { stream: 0, first: 2, count: 1, text: "lost".into() });
        log.sync();
        assert!(log.error().unwrap().contains("failed"));
        assert_eq!(all(&log, 1).len(), 1);
    }

    #[test]
    fn retention_removes_the_oldest_blocks_and_counts_them() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = LineLog::create(dir.path().join("l"));
        for i in 1..=100_000u64 {
            log.append(&Run { stream: 0, first: i, count: 1, text: format!("line {i:07}") });
        }
        log.sync();
        let size = log.kept_len();
        assert!(log.remove_oldest(size / 2));
        assert!(log.kept_len() <= size / 2);
        let (lines, bytes) = log.removed();
        assert!(lines > 0 && lines < 100_000, "{lines}");
        assert_eq!(bytes, lines * 13, "every removed line's rendered bytes are counted");
        let got = all(&log, 1);
        assert_eq!(
            got.first().map(|r| r.first),
            Some(lines + 1),
            "a scan from a removed line starts at the first kept"
        );
        assert_eq!(got.len() as u64, 100_000 - lines);
        assert!(log.remove_oldest(0));
        assert_eq!(log.removed().0, 100_000);
        assert!(all(&log, 1).is_empty());
    }

    proptest! {
        #[test]
        fn garbage_files_are_errors_not_panics(bytes in proptest::collection::vec(any::<u8>(), 0..2000)) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("g");
            std::fs::write(&path, &bytes).unwrap();
            let plan = LinePlan { path, start: 0, durable: bytes.len() as u64 };
            let _ = plan.scan(|_| true);
        }

        #[test]
        fn damaged_blocks_are_errors_not_panics(
            runs in proptest::collection::vec((any::<bool>(), 1u32..4, "[a-z]{0,20}"), 1..300),
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("d");
            let mut log = LineLog::create(path.clone());
            let mut first = 1;
            for (err, count, text) in &runs {
                log.append(&Run { stream: u8::from(*err), first, count: *count, text: text.clone() });
                first += u64::from(*count);
            }
            log.sync();
            let mut bytes = std::fs::read(&path).unwrap();
            for (at, x) in flips {
                let n = bytes.len();
                bytes[at % n] ^= x | 1;
            }
            std::fs::write(&path, &bytes).unwrap();
            let _ = log.plan(1).scan(|_| true);
        }
    }

    proptest! {
        // Each case writes up to ~200 KiB through zstd: fewer cases keep the debug-build run short.
        #![proptest_config(ProptestConfig::with_cases(32))]

        #[test]
        fn runs_come_back_exactly_from_any_line(
            runs in proptest::collection::vec((any::<bool>(), 1u32..5, 0u64..3, "[ -~]{0,200}"), 1..2000),
            syncs in proptest::collection::vec(0usize..2000, 0..5),
            from in 0u64..10_000,
        ) {
            let dir = tempfile::tempdir().unwrap();
            let mut log = LineLog::create(dir.path().join("r"));
            let mut first = 1;
            let mut want = Vec::new();
            for (i, (err, count, gap, text)) in runs.into_iter().enumerate() {
                first += gap;
                let run = Run { stream: u8::from(err), first, count, text };
                first = run.last() + 1;
                log.append(&run);
                want.push(run);
                if syncs.contains(&i) {
                    log.sync();
                }
            }
            log.sync();
            let got: Vec<Run> = all(&log, from).into_iter().filter(|r| r.last() >= from).collect();
            let want: Vec<Run> = want.into_iter().filter(|r| r.last() >= from).collect();
            prop_assert_eq!(got, want);
        }
    }
}
