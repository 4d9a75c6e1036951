//! A job's output part: its raw store and rendered lines (see [`crate::output`]), the byte counts per
//! stream, when it last wrote, and whether its streams closed (nothing more can arrive).
//!
//! Invariants: `counts` are every byte that arrived per stream (retention removes from the files, never
//! from the counts); once the streams closed, the two files are flushed and let go (views open them by
//! path) and the write buffers are given back; [`JobOutput::park`] lets the rendered lines go only then.
//!
//! ```
//! use front::jobs::output_part::JobOutput;
//! use shm_proto::msg::Stream;
//! use std::time::Instant;
//! let dir = tempfile::tempdir().unwrap();
//! let mut out = JobOutput::new(dir.path().join("1.log"), None);
//! out.push(Stream::Stdout, b"hello\n", Instant::now(), 0);
//! out.close_streams();
//! assert_eq!((out.counts(), out.park()), ([6, 0], true));
//! assert_eq!(out.view(40_000, "s", 1).text, "hello\n");
//! ```

use crate::jobs::files::JobFiles;
use crate::output::linelog::LineLog;
use crate::output::rendered::RenderedOutput;
use crate::output::retention::Removed;
use crate::output::store::{OutputStore, ReadPlan, StoreError, StoredChunk};
use crate::output::view::{self, stream_index, View};
use serde::{Deserialize, Serialize};
use shm_proto::msg::{JobId, Stream};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// One job's output.
#[derive(Debug, Serialize, Deserialize)]
pub struct JobOutput {
    rendered: RenderedOutput,
    store: OutputStore,
    counts: [u64; 2],
    #[serde(with = "crate::jobs::frozen::opt_instant")]
    last_output: Option<Instant>,
    streams_closed: bool,
}

impl JobOutput {
    /// The output of a job writing to `log_path` (and its line log beside it), into `files` already
    /// made (empty, open at those paths: see [`crate::jobs::files`]) or, with `None`, files made now.
    pub fn new(log_path: PathBuf, files: Option<JobFiles>) -> JobOutput {
        let lines_path = log_path.with_extension("lines");
        let (store, rendered) = match files {
            Some(f) => (
                OutputStore::with_file(log_path, f.log),
                RenderedOutput::with_log(LineLog::with_file(lines_path, f.lines)),
            ),
            None => (OutputStore::create(log_path), RenderedOutput::new(lines_path)),
        };
        JobOutput { rendered, store, counts: [0, 0], last_output: None, streams_closed: false }
    }

    /// A chunk arrived: count it, render it, store it. Returns the larger of the bytes the raw log and
    /// the line log keep, which the job holds to its per-job cap.
    pub fn push(&mut self, stream: Stream, data: &[u8], now: Instant, unix_ns: u64) -> u64 {
        let s = stream_index(stream);
        self.counts[s] += data.len() as u64;
        crate::output::retention::wrote(data.len() as u64);
        self.rendered.push(s, data);
        self.store.append(stream, data, unix_ns);
        self.last_output = Some(now);
        self.store.kept_len().max(self.rendered.kept_len())
    }

    /// The job's pipes closed: commit the open lines, write everything and let the files go.
    pub fn close_streams(&mut self) {
        self.streams_closed = true;
        self.rendered.finish();
        self.store.flush();
        self.release_buffers();
    }

    /// No more output will be read (the worker is gone or the session closed): as
    /// [`JobOutput::close_streams`], whatever the pipes still held.
    pub fn settle(&mut self) {
        self.streams_closed = true;
        self.rendered.finish();
        self.flush();
    }

    pub fn streams_closed(&self) -> bool {
        self.streams_closed
    }

    pub fn last_output(&self) -> Option<Instant> {
        self.last_output
    }

    /// Let the rendered lines go once nothing more can arrive: views read them back from the line log
    /// (see [`RenderedOutput::park`]). Returns whether they are parked.
    pub fn park(&mut self) -> bool {
        self.streams_closed && self.rendered.park()
    }

    /// A job that can write no more gives its write buffers back once they are flushed (they grow to
    /// the flush size, 256 KiB each, while it streams) and lets its two files go: a session keeps every
    /// job it ran, and views open the files by path.
    fn release_buffers(&mut self) {
        if self.streams_closed {
            self.store.close();
            self.rendered.close();
        }
    }

    /// Whether the rendered lines were let go (see [`JobOutput::park`]).
    pub fn parked(&self) -> bool {
        self.rendered.parked()
    }

    /// Whether the output still holds its files open (only while it can write).
    pub fn files_open(&self) -> bool {
        self.store.is_open() || self.rendered.is_open()
    }

    /// Write buffered output to disk.
    pub fn flush(&mut self) {
        self.store.flush();
        self.rendered.flush();
        self.release_buffers();
    }

    /// Write the raw log's buffer (the job ended: its bytes so far are readable at once).
    pub fn flush_store(&mut self) {
        self.store.flush();
    }

    /// Bytes of the log file written so far.
    pub fn log_len(&self) -> u64 {
        self.store.durable_len()
    }

    pub fn dirty(&self) -> bool {
        self.store.dirty() || self.rendered.dirty()
    }

    /// Per-stream byte counts `[stdout, stderr]`.
    pub fn counts(&self) -> [u64; 2] {
        self.counts
    }

    /// The rendered (model-facing, redacted) output.
    pub fn rendered(&self) -> &RenderedOutput {
        &self.rendered
    }

    pub fn rendered_mut(&mut self) -> &mut RenderedOutput {
        &mut self.rendered
    }

    /// The model view within `budget` bytes.
    pub fn view(&self, budget: usize, session: &str, job: JobId) -> View {
        view::render(&self.rendered, budget, session, job)
    }

    /// The last lines, for an announcement.
    pub fn last_lines(&self) -> Vec<String> {
        view::last_lines(&self.rendered)
    }

    /// Plan a read of stored bytes (flushes first so the newest bytes are readable).
    pub fn plan_read(&mut self, stream: Stream, offset: u64) -> (ReadPlan, u64) {
        self.store.flush();
        (self.store.plan(stream, offset), self.store.stored(stream))
    }

    /// The stored chunks from stream offsets `from` on (flushes first); see [`OutputStore::chunks_from`].
    pub fn chunks_from(&mut self, from: [u64; 2], max: u64) -> Result<Vec<StoredChunk>, StoreError> {
        self.store.flush();
        self.store.chunks_from(from, max)
    }

    /// Retention: remove the oldest output until at most `keep` bytes of the raw log and of the line
    /// log remain; `why` is said to reads of removed raw bytes. Returns true when something was removed.
    pub fn remove_oldest(&mut self, keep: u64, why: &str) -> bool {
        let raw = self.store.remove_oldest(keep, why);
        let lines = self.rendered.remove_oldest(keep);
        raw || lines
    }

    /// The raw log's path.
    pub fn log_path(&self) -> &Path {
        self.store.path()
    }

    /// What retention removed from the raw log, as `<job>.removed` keeps it for a restarted front.
    pub fn removed_record(&self, why: &str) -> Removed {
        Removed { file: self.store.removed_file(), bytes: self.store.removed(), why: why.to_owned() }
    }

    /// Continue a log retention had cut (a restarted front): counts and stream offsets go on from
    /// what was removed.
    pub fn carry_removed(&mut self, r: &Removed) {
        self.counts = r.bytes;
        self.store.carry_removed(r.bytes, &r.why);
    }

    /// Bytes of output kept on disk (raw log and line log).
    pub fn kept_bytes(&self) -> u64 {
        self.store.kept_len() + self.rendered.kept_len()
    }

    /// Bytes of the line log kept (part of [`JobOutput::kept_bytes`]).
    pub fn kept_lines_bytes(&self) -> u64 {
        self.rendered.kept_len()
    }

    /// Raw bytes removed by retention per stream `[stdout, stderr]`, and lines removed (`1..=n`).
    pub fn removed(&self) -> ([u64; 2], u64) {
        (self.store.removed(), self.rendered.removed().0)
    }

    /// The view's first line when retention removed output for `why`.
    pub fn retention_line(&self, why: &str) -> Option<String> {
        crate::output::retention::marker(self.store.removed(), self.rendered.removed().0, why)
    }

    /// The raw store's error, when storing stopped.
    pub fn store_error(&self) -> Option<&str> {
        self.store.error()
    }

    /// The raw store's and the line log's errors, for a result's notes.
    pub fn errors(&self) -> [Option<&str>; 2] {
        [self.store.error(), self.rendered.error()]
    }

    /// An estimate of the heap bytes held (the struct itself is counted by its owner).
    pub fn held_bytes(&self) -> usize {
        self.rendered.held_bytes() + self.store.held_bytes()
    }

    /// The write buffers' allocated sizes `(raw store, line log)`.
    #[cfg(test)]
    pub(crate) fn buffer_capacities(&self) -> (usize, usize) {
        (self.store.buffer_capacity(), self.rendered.buffer_capacity())
    }
}
