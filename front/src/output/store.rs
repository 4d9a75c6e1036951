//! The output store: every byte a job writes, kept on disk in full, in arrival order.
//!
//! One append-only file per job (`<state-dir>/sessions/<session>/jobs/<job>.log`) of records
//!
//! ```text
//! [stream u8: 1 stdout, 2 stderr][3 zero bytes][len u32 LE][unix_ns u64 LE][len bytes]
//! ```
//!
//! written as chunks arrive through a buffer (flushed at [`FLUSH_AT`] bytes, when asked — the pump
//! flushes before it sleeps, the kernel when a job ends and before an `output` read). A sparse in-memory
//! index per stream (one entry per 64 KiB of that stream or per 256 records) turns "stream offset"
//! into "file offset to start scanning", so an `output {stream, offset, len}` read costs one seek and a
//! bounded scan.
//!
//! Invariants: bytes are never reordered or dropped while the disk accepts them; a write error (disk
//! full) ends storing for that job — the bytes already flushed stay readable, the error is kept and
//! reported in results — and is never a panic. Only flushed bytes (below `durable`) are ever read.
//!
//! ```
//! use front::output::store::OutputStore;
//! use shm_proto::msg::Stream;
//! let dir = tempfile::tempdir().unwrap();
//! let mut s = OutputStore::create(dir.path().join("1.log"));
//! s.append(Stream::Stdout, b"hello", 0);
//! s.flush();
//! assert_eq!(s.plan(Stream::Stdout, 1).read(3).unwrap(), b"ell");
//! ```

use crate::output::view::stream_index;
use serde::{Deserialize, Serialize};
use shm_proto::msg::Stream;
use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Bytes of a record header.
pub const RECORD_HEADER: usize = 16;
/// Buffered bytes that trigger a write.
pub const FLUSH_AT: usize = 256 * 1024;
const INDEX_EVERY_BYTES: u64 = 64 * 1024;
const INDEX_EVERY_RECORDS: u64 = 256;

/// Errors reading stored output back.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    #[error("reading the output file failed")]
    Io(#[source] std::io::Error),
    #[error("the output file is corrupt at byte {0}")]
    Corrupt(u64),
    #[error("bytes 0–{removed} of this stream were removed by retention ({why}); the oldest byte still stored is at offset {removed}")]
    Removed { removed: u64, why: String },
    #[error("{left} bytes are stored past the asked offsets, more than the {max} one replay sends; read them with `output` and subscribe from the end")]
    TooMuch { left: u64, max: u64 },
}

/// A sparse index entry: the record at `file_off` starts at `stream_off` of its stream.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
struct IndexEntry {
    stream_off: u64,
    file_off: u64,
}

/// One job's output file. A job's record read back from disk ([`crate::jobs::frozen`]) has no file
/// or buffer: it was flushed and closed.
#[derive(Debug, Serialize, Deserialize)]
pub struct OutputStore {
    path: PathBuf,
    /// `None` once storing has failed (or never started).
    #[serde(skip)]
    file: Option<File>,
    /// The file was let go once the job's output was complete ([`OutputStore::close`]); retention
    /// (and a late write, which should not come) reopen it by path.
    closed: bool,
    #[serde(skip)]
    buf: Vec<u8>,
    /// Bytes on disk and verified written.
    durable: u64,
    /// Per-stream bytes recorded (durable or buffered), and as of the last successful flush.
    counts: [u64; 2],
    durable_counts: [u64; 2],
    index: [Vec<IndexEntry>; 2],
    /// Per stream: bytes and records (of any stream) since its last index entry.
    since: [(u64, u64); 2],
    error: Option<String>,
    /// Retention: file bytes punched out (a record boundary) and stream bytes removed per stream.
    removed_file: u64,
    removed: [u64; 2],
    removed_why: String,
}

impl OutputStore {
    /// Create (truncate) the job's file. A failure is kept and reported; the store then records nothing.
    pub fn create(path: PathBuf) -> OutputStore {
        let made = create_private(&path, "output file");
        OutputStore::with(path, made)
    }

    /// Store into `file`, an empty file already open at `path` (made ahead, see `jobs::files`).
    pub fn with_file(path: PathBuf, file: File) -> OutputStore {
        OutputStore::with(path, (Some(file), None))
    }

    fn with(path: PathBuf, (file, error): (Option<File>, Option<String>)) -> OutputStore {
        OutputStore {
            path,
            file,
            closed: false,
            buf: Vec::new(),
            durable: 0,
            counts: [0, 0],
            durable_counts: [0, 0],
            index: [Vec::new(), Vec::new()],
            since: [(u64::MAX / 2, u64::MAX / 2); 2],
            error,
            removed_file: 0,
            removed: [0, 0],
            removed_why: String::new(),
        }
    }

    /// Record one chunk.
    pub fn append(&mut self, stream: Stream, data: &[u8], unix_ns: u64) {
        if !self.reopen() || data.is_empty() {
            return;
        }
        let s = stream_index(stream);
        let file_off = self.durable + self.buf.len() as u64;
        let (bytes, records) = self.since[s];
        if bytes >= INDEX_EVERY_BYTES || records >= INDEX_EVERY_RECORDS {
            self.index[s].push(IndexEntry { stream_off: self.counts[s], file_off });
            self.since[s] = (0, 0);
        }
        for (i, since) in self.since.iter_mut().enumerate() {
            since.1 += 1;
            if i == s {
                since.0 += data.len() as u64;
            }
        }
        self.buf.push(s as u8 + 1);
        self.buf.extend_from_slice(&[0; 3]);
        self.buf.extend_from_slice(&(data.len() as u32).to_le_bytes());
        self.buf.extend_from_slice(&unix_ns.to_le_bytes());
        self.buf.extend_from_slice(data);
        self.counts[s] += data.len() as u64;
        if self.buf.len() >= FLUSH_AT {
            self.flush();
        }
    }

    /// The job's output is complete: write what is buffered and let the file go. A session keeps every
    /// job it ran, and two open files per ended job ran the front out of descriptors after ~10,000 jobs;
    /// reads open the file by path anyway, and retention reopens it when it punches.
    pub fn close(&mut self) {
        self.flush();
        if self.file.take().is_some() {
            self.closed = true;
        }
        self.release_buffer();
    }

    /// Whether the file is open, reopening one [`OutputStore::close`] let go.
    fn reopen(&mut self) -> bool {
        if self.file.is_none() && self.closed {
            match OpenOptions::new().read(true).write(true).open(&self.path) {
                Ok(f) => (self.file, self.closed) = (Some(f), false),
                Err(e) => {
                    self.closed = false;
                    self.fail(e);
                }
            }
        }
        self.file.is_some()
    }

    /// True while the file is held open (tests and the descriptor accounting).
    pub fn is_open(&self) -> bool {
        self.file.is_some()
    }

    /// True when buffered bytes wait for a flush.
    pub fn dirty(&self) -> bool {
        !self.buf.is_empty()
    }

    /// Write the buffered records. On failure storing ends: the partial write is cut off and the error
    /// kept; everything flushed before stays readable.
    pub fn flush(&mut self) {
        let Some(file) = &self.file else { return };
        if self.buf.is_empty() {
            return;
        }
        match append_buffered(file, &mut self.buf, &mut self.durable) {
            Ok(()) => self.durable_counts = self.counts,
            Err(e) => self.fail(e),
        }
    }

    /// Free the write buffer's memory if it holds nothing (the job can write no more).
    pub fn release_buffer(&mut self) {
        release(&mut self.buf);
    }

    /// The write buffer's allocated size.
    #[cfg(test)]
    pub(crate) fn buffer_capacity(&self) -> usize {
        self.buf.capacity()
    }

    fn fail(&mut self, e: std::io::Error) {
        self.file = None;
        let durable = self.durable;
        for index in &mut self.index {
            index.retain(|e| e.file_off < durable);
        }
        self.counts = self.durable_counts;
        self.error = Some(format!(
            "writing the output file {} failed ({e}); stdout bytes past {} and stderr bytes past {} were not stored",
            self.path.display(),
            self.durable_counts[0],
            self.durable_counts[1],
        ));
    }

    /// Why storing stopped, if it did.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// Bytes of `stream` readable now (flushed).
    /// Bytes of the file written so far (records up to the last flush).
    pub fn durable_len(&self) -> u64 {
        self.durable
    }

    pub fn stored(&self, stream: Stream) -> u64 {
        self.durable_counts[stream_index(stream)]
    }

    /// Where to start reading `stream` at `offset` (flush first to read the newest bytes). The plan
    /// reads the file without the store, so it can run after the caller's lock is released: flushed
    /// records never change.
    pub fn plan(&self, stream: Stream, offset: u64) -> ReadPlan {
        let s = stream_index(stream);
        let idx = &self.index[s];
        let at = idx.partition_point(|e| e.stream_off <= offset);
        let floor = IndexEntry { stream_off: self.removed[s], file_off: self.removed_file };
        let start = if at == 0 || idx[at - 1].file_off < floor.file_off { floor } else { idx[at - 1] };
        ReadPlan {
            removed: (self.removed[s] > 0).then(|| (self.removed[s], self.removed_why.clone())),
            path: self.path.clone(),
            stream: s as u8 + 1,
            offset,
            start,
            durable: self.durable,
            stored: self.durable_counts[s],
        }
    }
}

/// A read of stored bytes, prepared by [`OutputStore::plan`].
#[derive(Clone, Debug)]
pub struct ReadPlan {
    path: PathBuf,
    stream: u8,
    offset: u64,
    start: IndexEntry,
    durable: u64,
    stored: u64,
    removed: Option<(u64, String)>,
}

impl ReadPlan {
    /// Read up to `len` bytes of the stream from the planned offset; an offset retention removed is
    /// [`StoreError::Removed`].
    pub fn read(&self, len: usize) -> Result<Vec<u8>, StoreError> {
        if let Some((removed, why)) = self.removed.as_ref().filter(|(r, _)| self.offset < *r) {
            return Err(StoreError::Removed { removed: *removed, why: why.clone() });
        }
        let end = self.stored.min(self.offset.saturating_add(len as u64));
        if self.offset >= end {
            return Ok(Vec::new());
        }
        let mut out = Vec::with_capacity((end - self.offset) as usize);
        let file = open_for_read(&self.path)?;
        let mut r = BufReader::with_capacity(256 * 1024, file);
        r.seek(SeekFrom::Start(self.start.file_off)).map_err(StoreError::Io)?;
        let (mut file_off, mut stream_off) = (self.start.file_off, self.start.stream_off);
        while stream_off < end && file_off < self.durable {
            let mut h = [0u8; RECORD_HEADER];
            r.read_exact(&mut h).map_err(StoreError::Io)?;
            let len = u64::from(u32::from_le_bytes([h[4], h[5], h[6], h[7]]));
            if !(1..=2).contains(&h[0]) || file_off + RECORD_HEADER as u64 + len > self.durable {
                return Err(StoreError::Corrupt(file_off));
            }
            file_off += RECORD_HEADER as u64 + len;
            if h[0] != self.stream || stream_off + len <= self.offset {
                stream_off += if h[0] == self.stream { len } else { 0 };
                r.seek_relative(signed(len)).map_err(StoreError::Io)?;
                continue;
            }
            let skip = self.offset.saturating_sub(stream_off);
            let take = (len - skip).min(end - stream_off - skip);
            r.seek_relative(signed(skip)).map_err(StoreError::Io)?;
            let at = out.len();
            out.resize(at + take as usize, 0);
            r.read_exact(&mut out[at..]).map_err(StoreError::Io)?;
            r.seek_relative(signed(len - skip - take)).map_err(StoreError::Io)?;
            stream_off += len;
        }
        Ok(out)
    }
}

/// One stored record, as [`OutputStore::chunks_from`] reads it back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredChunk {
    /// 0 stdout, 1 stderr.
    pub stream: u8,
    /// The stream offset of `data`'s first byte.
    pub offset: u64,
    pub unix_ns: u64,
    pub data: Vec<u8>,
}

impl OutputStore {
    /// The flushed records from stream offsets `from` (stdout, stderr) on, in arrival order, with their
    /// timestamps; a record straddling an offset is cut at it. At most `max` bytes of data (more is
    /// [`StoreError::TooMuch`]); an offset retention removed is [`StoreError::Removed`]. Flush first.
    pub fn chunks_from(&self, from: [u64; 2], max: u64) -> Result<Vec<StoredChunk>, StoreError> {
        for (f, removed) in from.iter().zip(self.removed) {
            if *f < removed {
                return Err(StoreError::Removed { removed, why: self.removed_why.clone() });
            }
        }
        let left: u64 = (0..2).map(|s| self.durable_counts[s].saturating_sub(from[s])).sum();
        if left > max {
            return Err(StoreError::TooMuch { left, max });
        }
        let mut out = Vec::new();
        if left == 0 {
            return Ok(out);
        }
        let file = open_for_read(&self.path)?;
        let mut r = BufReader::with_capacity(256 * 1024, file);
        r.seek(SeekFrom::Start(self.removed_file)).map_err(StoreError::Io)?;
        let (mut file_off, mut at) = (self.removed_file, self.removed);
        while file_off < self.durable {
            let mut h = [0u8; RECORD_HEADER];
            r.read_exact(&mut h).map_err(StoreError::Io)?;
            let len = u64::from(u32::from_le_bytes([h[4], h[5], h[6], h[7]]));
            if !(1..=2).contains(&h[0]) || file_off + RECORD_HEADER as u64 + len > self.durable {
                return Err(StoreError::Corrupt(file_off));
            }
            let s = usize::from(h[0] - 1);
            let unix_ns = u64::from_le_bytes([h[8], h[9], h[10], h[11], h[12], h[13], h[14], h[15]]);
            file_off += RECORD_HEADER as u64 + len;
            let skip = from[s].saturating_sub(at[s]).min(len);
            at[s] += len;
            if skip == len {
                r.seek_relative(signed(len)).map_err(StoreError::Io)?;
                continue;
            }
            r.seek_relative(signed(skip)).map_err(StoreError::Io)?;
            let mut data = vec![0u8; (len - skip) as usize];
            r.read_exact(&mut data).map_err(StoreError::Io)?;
            out.push(StoredChunk { stream: s as u8, offset: at[s] - len + skip, unix_ns, data });
        }
        Ok(out)
    }
}

impl OutputStore {
    /// The heap bytes the store holds: its path, write buffer, sparse index and strings.
    pub fn held_bytes(&self) -> usize {
        self.path.capacity()
            + self.buf.capacity()
            + self.index.iter().map(|i| i.capacity() * std::mem::size_of::<IndexEntry>()).sum::<usize>()
            + self.error.as_ref().map_or(0, String::capacity)
            + self.removed_why.capacity()
    }

    /// Bytes of the file not removed by retention (buffered ones included).
    pub fn kept_len(&self) -> u64 {
        (self.durable + self.buf.len() as u64).saturating_sub(self.removed_file)
    }

    /// Bytes removed from the start of each stream by retention.
    pub fn removed(&self) -> [u64; 2] {
        self.removed
    }

    /// The log file's path.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// File bytes retention punched out (the first kept record starts here).
    pub fn removed_file(&self) -> u64 {
        self.removed_file
    }

    /// A fresh store continuing a log whose first `bytes` per stream retention removed (a restarted
    /// front): stream offsets continue from there and reads below them say why they are gone.
    pub fn carry_removed(&mut self, bytes: [u64; 2], why: &str) {
        debug_assert!(self.durable == 0 && self.buf.is_empty(), "only a fresh store continues a log");
        (self.counts, self.durable_counts, self.removed) = (bytes, bytes, bytes);
        self.removed_why = why.to_owned();
    }

    /// Retention: remove the oldest whole records (flushing first) until at most `keep` bytes of the
    /// file remain, punching them out of the file (`FALLOC_FL_PUNCH_HOLE`: offsets stay valid, the
    /// disk space is freed). `why` is said to every read of a removed offset. Returns true when
    /// something was removed.
    pub fn remove_oldest(&mut self, keep: u64, why: &str) -> bool {
        if self.kept_len() <= keep {
            return false;
        }
        let was_closed = self.closed;
        if !self.reopen() {
            return false;
        }
        let removed = self.remove_oldest_open(keep, why);
        if was_closed {
            self.close();
        }
        removed
    }

    fn remove_oldest_open(&mut self, keep: u64, why: &str) -> bool {
        self.flush();
        let Some(file) = &self.file else { return false };
        let (mut off, mut removed) = (self.removed_file, self.removed);
        let mut h = [0u8; RECORD_HEADER];
        while self.durable - off > keep {
            if file.read_exact_at(&mut h, off).is_err() {
                break;
            }
            let len = u64::from(u32::from_le_bytes([h[4], h[5], h[6], h[7]]));
            if !(1..=2).contains(&h[0]) || off + RECORD_HEADER as u64 + len > self.durable {
                break;
            }
            removed[usize::from(h[0] - 1)] += len;
            off += RECORD_HEADER as u64 + len;
        }
        if off == self.removed_file {
            return false;
        }
        punch(file, self.removed_file, off);
        self.removed_file = off;
        self.removed = removed;
        self.removed_why = why.to_owned();
        for index in &mut self.index {
            index.retain(|e| e.file_off >= off);
        }
        true
    }
}

/// Free file bytes `from..to` (keeping the size); a file system without hole punching keeps them.
/// Create (truncate) a file only the front's uid can read: `(file, None)`, or `(None, the error as a
/// sentence naming `what`)`.
pub(crate) fn create_private(path: &std::path::Path, what: &str) -> (Option<File>, Option<String>) {
    match OpenOptions::new().create(true).read(true).write(true).truncate(true).mode(0o600).open(path) {
        Ok(f) => (Some(f), None),
        Err(e) => (None, Some(format!("the {what} {} could not be created ({e})", path.display()))),
    }
}

/// Free a write buffer's memory if it holds nothing: a buffer keeps what it grew to (up to
/// [`FLUSH_AT`]) after each flush, for the next writes, until its file can get no more.
pub(crate) fn release(buf: &mut Vec<u8>) {
    if buf.is_empty() {
        *buf = Vec::new();
    }
}

/// Write `buf` at `*durable`, then advance `*durable` and clear `buf`. On failure the partial write is cut
/// off (the file ends at `*durable` again) and `buf` is dropped: what was written before stays readable.
pub(crate) fn append_buffered(file: &File, buf: &mut Vec<u8>, durable: &mut u64) -> std::io::Result<()> {
    match file.write_all_at(buf, *durable) {
        Ok(()) => {
            *durable += buf.len() as u64;
            buf.clear();
            Ok(())
        }
        Err(e) => {
            let _ = file.set_len(*durable);
            *buf = Vec::new();
            Err(e)
        }
    }
}

/// Punch out `from..to`, every byte below `to` being removed: the range starts at the 64 KiB
/// boundary at or below `from`, so the file system block that held the previous punch's edge (only
/// partly punched then, so still allocated) is freed now, and repeated punches leave no block behind.
pub(crate) fn punch(file: &File, from: u64, to: u64) {
    use nix::fcntl::{fallocate, FallocateFlags};
    let from = from & !0xffff;
    let mode = FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE;
    let _ = fallocate(file, mode, signed(from), signed(to - from));
}

/// A file offset or length as the signed type the system calls take (files never reach 2^63 bytes).
fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn open_for_read(path: &Path) -> Result<File, StoreError> {
    File::open(path).map_err(StoreError::Io)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn chunks_come_back_from_offsets_with_their_times() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = OutputStore::create(dir.path().join("1.log"));
        s.append(Stream::Stdout, b"hello ", 1);
        s.append(Stream::Stderr, b"oops", 2);
        s.append(Stream::Stdout, b"world", 3);
        s.flush();
        let got = s.chunks_from([3, 4], 1 << 20).unwrap();
        assert_eq!(
            got,
            [
                StoredChunk { stream: 0, offset: 3, unix_ns: 1, data: b"lo ".to_vec() },
                StoredChunk { stream: 0, offset: 6, unix_ns: 3, data: b"world".to_vec() },
            ]
        );
        assert_eq!(s.chunks_from([11, 4], 1 << 20).unwrap(), []);
        assert!(matches!(s.chunks_from([0, 0], 5), Err(StoreError::TooMuch { left: 15, max: 5 })));
    }

    fn reference(chunks: &[(Stream, Vec<u8>)], s: Stream) -> Vec<u8> {
        chunks.iter().filter(|(cs, _)| *cs == s).flat_map(|(_, d)| d.iter().copied()).collect()
    }

    #[test]
    fn records_have_the_documented_layout() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.log");
        let mut s = OutputStore::create(path.clone());
        s.append(Stream::Stderr, b"ab", 0x0102030405060708);
        s.flush();
        let raw = std::fs::read(path).unwrap();
        assert_eq!(raw, [&[2u8, 0, 0, 0, 2, 0, 0, 0][..], &0x0102030405060708u64.to_le_bytes(), b"ab"].concat());
    }

    #[test]
    fn unflushed_bytes_are_not_read_until_flushed() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = OutputStore::create(dir.path().join("1.log"));
        s.append(Stream::Stdout, b"abc", 1);
        assert!(s.dirty());
        assert_eq!(s.plan(Stream::Stdout, 0).read(10).unwrap(), b"");
        s.flush();
        assert_eq!(s.plan(Stream::Stdout, 0).read(10).unwrap(), b"abc");
        assert_eq!(s.stored(Stream::Stdout), 3);
    }

    #[test]
    fn fifty_mib_round_trips_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = OutputStore::create(dir.path().join("big.log"));
        let mut expect = Vec::new();
        let mut x = 12345u32;
        for i in 0..800 {
            let chunk: Vec<u8> = (0..65536)
                .map(|_| {
                    x = x.wrapping_mul(1664525).wrapping_add(1013904223);
                    (x >> 24) as u8
                })
                .collect();
            s.append(Stream::Stdout, &chunk, i);
            if i % 7 == 0 {
                s.append(Stream::Stderr, b"interleaved\n", i);
            }
            expect.extend_from_slice(&chunk);
        }
        s.flush();
        let mut got = Vec::new();
        while (got.len() as u64) < s.stored(Stream::Stdout) {
            got.extend(s.plan(Stream::Stdout, got.len() as u64).read(4 << 20).unwrap());
        }
        assert!(got == expect, "50 MiB differ");
        assert_eq!(s.plan(Stream::Stderr, 12).read(12).unwrap(), b"interleaved\n");
    }

    #[test]
    fn a_write_error_keeps_what_was_stored_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = OutputStore::create(dir.path().join("1.log"));
        s.append(Stream::Stdout, b"kept", 0);
        s.flush();
        // Swap the file for a read-only handle: the next write fails like a full disk would.
        s.file = Some(File::open(dir.path().join("1.log")).unwrap());
        s.append(Stream::Stdout, b"lost", 0);
        s.flush();
        assert!(s.error().unwrap().contains("stdout bytes past 4"), "{:?}", s.error());
        assert_eq!(s.plan(Stream::Stdout, 0).read(100).unwrap(), b"kept");
        s.append(Stream::Stdout, b"more", 0);
        assert!(!s.dirty(), "nothing is buffered after a failure");
    }

    #[test]
    fn an_uncreatable_file_is_an_error_not_a_panic() {
        let mut s = OutputStore::create(PathBuf::from("/nonexistent-dir/x/1.log"));
        s.append(Stream::Stdout, b"x", 0);
        s.flush();
        assert!(s.error().is_some());
        assert_eq!(s.plan(Stream::Stdout, 0).read(1).unwrap(), b"");
    }

    #[test]
    fn retention_removes_the_oldest_records_and_reads_say_so() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = OutputStore::create(dir.path().join("r.log"));
        for i in 0..100u8 {
            s.append(Stream::Stdout, &[i; 100], 0);
            s.append(Stream::Stderr, &[i; 10], 0);
        }
        assert!(s.remove_oldest(10 * (2 * RECORD_HEADER as u64 + 110), "max test"));
        assert_eq!(s.removed(), [9000, 900], "90 of 100 record pairs go, whole records only");
        assert!(s.kept_len() <= 10 * (2 * RECORD_HEADER as u64 + 110));
        match s.plan(Stream::Stdout, 8999).read(10) {
            Err(StoreError::Removed { removed: 9000, why }) => assert_eq!(why, "max test"),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            s.plan(Stream::Stdout, 9000).read(1000).unwrap(),
            (90..100u8).flat_map(|i| [i; 100]).collect::<Vec<_>>()
        );
        assert_eq!(s.plan(Stream::Stderr, 995).read(10).unwrap(), [[99u8; 5]].concat());
        assert!(!s.remove_oldest(1 << 20, "x"), "nothing to remove under the cap");
        s.append(Stream::Stdout, b"tail", 0);
        s.flush();
        assert_eq!(s.plan(Stream::Stdout, 10_000).read(4).unwrap(), b"tail");
    }

    #[test]
    fn punched_bytes_free_the_disk_and_keep_offsets() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.log");
        let mut s = OutputStore::create(path.clone());
        for _ in 0..64 {
            s.append(Stream::Stdout, &[7u8; 65536], 0);
        }
        s.remove_oldest(65536 + RECORD_HEADER as u64, "cap");
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.len(), 64 * (65536 + RECORD_HEADER as u64), "the file keeps its size");
        use std::os::unix::fs::MetadataExt;
        assert!(meta.blocks() * 512 < 4 << 20, "the removed bytes no longer take disk space");
        assert_eq!(s.plan(Stream::Stdout, 63 * 65536).read(65536).unwrap(), vec![7u8; 65536]);
    }

    proptest! {
        #[test]
        fn reads_after_retention_match_the_reference_or_say_removed(
            chunks in proptest::collection::vec((any::<bool>(), 1usize..3000), 1..200),
            keep in 0u64..200_000,
            reads in proptest::collection::vec((any::<bool>(), 0u64..400_000, 0usize..100_000), 1..20),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let mut s = OutputStore::create(dir.path().join("p.log"));
            let chunks: Vec<(Stream, Vec<u8>)> = chunks.into_iter().enumerate().map(|(i, (err, len))| {
                (if err { Stream::Stderr } else { Stream::Stdout }, (0..len).map(|j| (i * 7 + j) as u8).collect())
            }).collect();
            for (st, d) in &chunks {
                s.append(*st, d, 0);
            }
            s.remove_oldest(keep, "cap");
            s.flush();
            prop_assert!(s.kept_len() <= keep);
            for (err, off, len) in reads {
                let st = if err { Stream::Stderr } else { Stream::Stdout };
                let all = reference(&chunks, st);
                let removed = s.removed()[stream_index(st)];
                match s.plan(st, off).read(len) {
                    Err(StoreError::Removed { removed: r, .. }) => prop_assert!(off < r && r == removed),
                    Ok(got) => {
                        prop_assert!(off >= removed);
                        let want = &all[(off as usize).min(all.len())..((off as usize).saturating_add(len)).min(all.len())];
                        prop_assert_eq!(got, want);
                    }
                    Err(e) => prop_assert!(false, "{e}"),
                }
            }
        }

        #[test]
        fn random_reads_match_the_reference(
            chunks in proptest::collection::vec((any::<bool>(), 0usize..3000), 1..400),
            reads in proptest::collection::vec((any::<bool>(), 0u64..700_000, 0usize..200_000), 1..20),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let mut s = OutputStore::create(dir.path().join("p.log"));
            let chunks: Vec<(Stream, Vec<u8>)> = chunks.into_iter().enumerate().map(|(i, (err, len))| {
                (if err { Stream::Stderr } else { Stream::Stdout }, (0..len).map(|j| (i * 7 + j) as u8).collect())
            }).collect();
            for (st, d) in &chunks {
                s.append(*st, d, 0);
            }
            s.flush();
            for (err, off, len) in reads {
                let st = if err { Stream::Stderr } else { Stream::Stdout };
                let all = reference(&chunks, st);
                let off = off.min(all.len() as u64 + 10);
                let want = &all[(off as usize).min(all.len())..((off as usize).saturating_add(len)).min(all.len())];
                prop_assert_eq!(s.plan(st, off).read(len).unwrap(), want);
            }
        }
    }
}
