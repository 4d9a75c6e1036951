//! The rendered-line log: every line of a job's model-facing output (after terminal rendering and
//! redaction), numbered from 1 in commit order, runs of identical lines stored once with their count.
//! It is what makes `lines`, `tail`, `grep` and `errors` views cheap without re-rendering the raw log.
//!
//! File `<job>.lines` next to the raw `<job>.log`, records
//!
//! ```text
//! [stream u8: 1 stdout, 2 stderr][3 zero bytes][count u32 LE][first line u64 LE][len u32 LE][4 zero bytes][len bytes UTF-8]
//! ```
//!
//! A sparse in-memory index (one entry per [`INDEX_EVERY`] records) maps a line number to the file
//! offset of a record at or before it, so a line range or a tail costs one seek and a bounded scan.
//! Buffered like the raw store; a write error stops the log (kept and reported), never a panic.
//!
//! ```
//! use front::output::linelog::{LineLog, Run};
//! let dir = tempfile::tempdir().unwrap();
//! let mut log = LineLog::create(dir.path().join("1.lines"));
//! log.append(&Run { stream: 0, first: 1, count: 3, text: "same".into() });
//! log.flush();
//! let mut got = Vec::new();
//! log.plan(2).scan(|r| { got.push((r.first, r.count)); true }).unwrap();
//! assert_eq!(got, [(1, 3)]);
//! ```

use crate::output::store::StoreError;
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

const HEADER: usize = 24;
const FLUSH_AT: usize = 256 * 1024;
/// Records between two index entries.
pub const INDEX_EVERY: u64 = 64;

/// A run of identical lines (`count` ≥ 1) starting at line `first`.
#[derive(Clone, Debug, PartialEq, Eq)]
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

/// One job's line log.
#[derive(Debug)]
pub struct LineLog {
    path: PathBuf,
    file: Option<File>,
    /// Let go by [`LineLog::close`]; reopened by path when needed.
    closed: bool,
    buf: Vec<u8>,
    durable: u64,
    /// `(first line, file offset)` of every [`INDEX_EVERY`]th record.
    index: Vec<(u64, u64)>,
    records: u64,
    error: Option<String>,
    /// Retention: file bytes punched out, the last line removed and the rendered bytes removed.
    removed_file: u64,
    removed_lines: u64,
    removed_bytes: u64,
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
            durable: 0,
            index: Vec::new(),
            records: 0,
            error,
            removed_file: 0,
            removed_lines: 0,
            removed_bytes: 0,
        }
    }

    /// Append one run.
    pub fn append(&mut self, run: &Run) {
        if !self.reopen() {
            return;
        }
        if self.records % INDEX_EVERY == 0 {
            self.index.push((run.first, self.durable + self.buf.len() as u64));
        }
        self.records += 1;
        self.buf.push(run.stream + 1);
        self.buf.extend_from_slice(&[0; 3]);
        self.buf.extend_from_slice(&run.count.to_le_bytes());
        self.buf.extend_from_slice(&run.first.to_le_bytes());
        self.buf.extend_from_slice(&(run.text.len() as u32).to_le_bytes());
        self.buf.extend_from_slice(&[0; 4]);
        self.buf.extend_from_slice(run.text.as_bytes());
        if self.buf.len() >= FLUSH_AT {
            self.flush();
        }
    }

    /// Free the write buffer's memory if it holds nothing (the job can write no more).
    pub fn release_buffer(&mut self) {
        crate::output::store::release(&mut self.buf);
    }

    /// The write buffer's allocated size.
    #[cfg(test)]
    pub(crate) fn buffer_capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// The job can write no more: write what is buffered and let the file go (reads open it by path;
    /// retention reopens it). See [`crate::output::store::OutputStore::close`].
    pub fn close(&mut self) {
        self.flush();
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

    /// Write buffered records; on failure the log stops (what was written stays readable).
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

    pub fn dirty(&self) -> bool {
        !self.buf.is_empty()
    }

    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// A read starting at a record that holds or precedes line `from` (flush first).
    pub fn plan(&self, from: u64) -> LinePlan {
        let at = self.index.partition_point(|(first, _)| *first <= from);
        let start = if at == 0 { 0 } else { self.index[at - 1].1 }.max(self.removed_file);
        LinePlan { path: self.path.clone(), start, durable: self.durable }
    }

    /// Index entries (first line of each), newest last: lets a tail start near the end.
    pub fn index_lines(&self) -> Vec<u64> {
        self.index.iter().map(|(l, _)| *l).collect()
    }
}

impl LineLog {
    /// Bytes of the file not removed by retention (buffered ones included).
    pub fn kept_len(&self) -> u64 {
        (self.durable + self.buf.len() as u64).saturating_sub(self.removed_file)
    }

    /// Lines removed from the start by retention (lines `1..=n`) and their rendered bytes.
    pub fn removed(&self) -> (u64, u64) {
        (self.removed_lines, self.removed_bytes)
    }

    /// Retention: remove the oldest whole runs (flushing first) until at most `keep` bytes of the file
    /// remain. Returns true when something was removed.
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
        self.flush();
        let Some(file) = &self.file else { return false };
        let (mut off, mut lines, mut bytes) = (self.removed_file, self.removed_lines, self.removed_bytes);
        let mut h = [0u8; HEADER];
        while self.durable - off > keep && file.read_exact_at(&mut h, off).is_ok() {
            let count = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
            let first = u64::from_le_bytes(h[8..16].try_into().unwrap_or([0; 8]));
            let len = u64::from(u32::from_le_bytes([h[16], h[17], h[18], h[19]]));
            if !(1..=2).contains(&h[0]) || count == 0 || off + HEADER as u64 + len > self.durable {
                break;
            }
            lines = first + u64::from(count) - 1;
            bytes += (len + 1) * u64::from(count);
            off += HEADER as u64 + len;
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

/// A prepared scan of flushed records (runs without the job's lock: written records never change).
#[derive(Clone, Debug)]
pub struct LinePlan {
    path: PathBuf,
    start: u64,
    durable: u64,
}

impl LinePlan {
    /// Visit runs in order from the planned record until `f` returns false or the end.
    pub fn scan(&self, mut f: impl FnMut(Run) -> bool) -> Result<(), StoreError> {
        if self.start >= self.durable {
            return Ok(());
        }
        let file = File::open(&self.path).map_err(StoreError::Io)?;
        let mut r = BufReader::with_capacity(256 * 1024, file);
        r.seek(SeekFrom::Start(self.start)).map_err(StoreError::Io)?;
        let mut off = self.start;
        let mut text = Vec::new();
        while off < self.durable {
            let mut h = [0u8; HEADER];
            r.read_exact(&mut h).map_err(StoreError::Io)?;
            let count = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
            let first = u64::from_le_bytes(h[8..16].try_into().unwrap_or([0; 8]));
            let len = u32::from_le_bytes([h[16], h[17], h[18], h[19]]) as u64;
            if !(1..=2).contains(&h[0]) || count == 0 || off + HEADER as u64 + len > self.durable {
                return Err(StoreError::Corrupt(off));
            }
            text.resize(len as usize, 0);
            r.read_exact(&mut text).map_err(StoreError::Io)?;
            off += HEADER as u64 + len;
            let text = String::from_utf8_lossy(&text).into_owned();
            if !f(Run { stream: h[0] - 1, first, count, text }) {
                break;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_late_line_is_found_through_the_index() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = LineLog::create(dir.path().join("l"));
        for i in 1..=10_000u64 {
            log.append(&Run { stream: (i % 2) as u8, first: i, count: 1, text: format!("line {i}") });
        }
        log.flush();
        let plan = log.plan(9_999);
        assert!(plan.start > 0, "the scan starts near the line, not at the file's start");
        let mut got = None;
        plan.scan(|r| {
            if r.first == 9_999 {
                got = Some(r.text);
                return false;
            }
            true
        })
        .unwrap();
        assert_eq!(got.as_deref(), Some("line 9999"));
    }

    #[test]
    fn a_write_error_stops_the_log_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = LineLog::create(dir.path().join("l"));
        log.append(&Run { stream: 0, first: 1, count: 1, text: "kept".into() });
        log.flush();
        log.file = Some(File::open(dir.path().join("l")).unwrap());
        log.append(&Run { stream: 0, first: 2, count: 1, text: "lost".into() });
        log.flush();
        assert!(log.error().unwrap().contains("failed"));
        let mut n = 0;
        log.plan(1)
            .scan(|_| {
                n += 1;
                true
            })
            .unwrap();
        assert_eq!(n, 1);
    }

    #[test]
    fn retention_removes_the_oldest_runs_and_counts_them() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = LineLog::create(dir.path().join("l"));
        for i in 1..=1000u64 {
            log.append(&Run { stream: 0, first: i, count: 1, text: format!("line {i:04}") });
        }
        let rec = HEADER as u64 + 9;
        assert!(log.remove_oldest(100 * rec));
        assert_eq!(log.removed(), (900, 900 * 10), "lines 1–900 and their rendered bytes");
        let mut got = Vec::new();
        log.plan(1)
            .scan(|r| {
                got.push(r.first);
                true
            })
            .unwrap();
        assert_eq!(got, (901..=1000).collect::<Vec<_>>(), "a scan from a removed line starts at the first kept");
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
    }
}
