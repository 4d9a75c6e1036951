//! A job's model-facing output, built incrementally as chunks arrive: per stream a [`Screen`]
//! (terminal rendering) or a binary summary, then secret redaction, then numbering, collapsing of
//! identical consecutive lines into runs, the [`LineLog`] on disk, and in memory what the model view
//! needs — the first runs (head), the last runs (tail window), exact counts, and the error-shaped lines.
//! Nothing here re-reads the output while it grows: a 200 MiB job costs its head, its tail window and
//! its error list. Once the output is finished and its line log whole on disk, [`RenderedOutput::park`]
//! lets the head and the tail window go (a session keeps every job it ran): views read those runs back
//! from the log, knowing only where the head ends and where the window starts, and answer exactly as
//! before.
//!
//! Invariants: line numbers are assigned once, in commit order, starting at 1, and never change; every
//! committed line is in the log or in the pending run; `rendered_bytes` counts every committed line's
//! text plus its newline, repetitions included; every string that leaves this module passed the
//! redactor.
//!
//! ```
//! use front::output::rendered::RenderedOutput;
//! let dir = tempfile::tempdir().unwrap();
//! let mut r = RenderedOutput::new(dir.path().join("1.lines"));
//! r.push(0, b"same\nsame\nsame\n");
//! r.finish();
//! assert_eq!(r.display_lines(), ["same (×3)"]);
//! ```

use crate::output::linelog::{LineLog, LinePlan, Run};
use crate::output::screen::Screen;
use crate::output::sniff::{human_bytes, Piece, Splitter};
use crate::output::store::StoreError;
use policies::redaction::{BlockCursor, Redactor};
use regex::Regex;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::OnceLock;

/// Display bytes of runs kept from the start and from the end (the largest view budget is below both).
pub const HEAD_KEEP: usize = 256 * 1024;
pub const TAIL_KEEP: usize = 256 * 1024;
/// Error-shaped lines kept from the start and from the end of the output.
const ERRORS_KEEP: usize = 1000;
/// Longest error line text kept.
const ERROR_TEXT: usize = 300;

/// Lines that look like errors: the words (any case), an exception's CamelCase name (`KeyError`,
/// `AssertionError`, `NullPointerException`, `ComparisonFailure`), pytest's `E   ` detail lines and npm's `ERR!`.
pub fn error_shaped() -> &'static Regex {
    static R: OnceLock<Regex> = OnceLock::new();
    R.get_or_init(|| {
        Regex::new(
            r"(?i)\b(?:error|errors|fatal|panic|panicked|exception|traceback|failed|failure|segmentation fault|core dumped|aborted|abort)\b|(?-i:\b[A-Z][A-Za-z0-9]*(?:Error|Exception|Failure)\b)|(?-i:^E {3}|\bERR!)",
        )
        .expect("static regex")
    })
}

/// A numbered line, as subscribers receive it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FreshLine {
    pub line: u64,
    pub stream: u8,
    pub text: String,
}

/// A run with its rendered-byte offset (bytes of all lines before it).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Placed {
    pub run: Run,
    pub bytes_before: u64,
}

impl Placed {
    /// The run as one display line (without newline).
    pub fn display(&self) -> String {
        display(&self.run)
    }

    /// `display().len()`, without building the line (it is asked for every run on the output path).
    pub fn display_len(&self) -> usize {
        let digits = |n: u32| n.checked_ilog10().unwrap_or(0) as usize + 1;
        match self.run.count {
            0 | 1 => self.run.text.len(),
            // "<" and " blank lines>" around the digits.
            n if blank(&self.run.text) => 1 + digits(n) + 13,
            // " (×" is 4 bytes, then the digits and ")".
            n => self.run.text.len() + 4 + digits(n) + 1,
        }
    }
}

/// What [`RenderedOutput::view_runs`] gives the model view.
#[derive(Debug)]
pub struct ViewRuns<'a> {
    /// Borrowed from memory, or read back from the line log once the output is parked.
    pub head: Cow<'a, [Placed]>,
    /// Runs were dropped between the head and the tail.
    pub gap: bool,
    /// The tail window's committed runs (borrowed, or read back), followed by `end`.
    window: Cow<'a, VecDeque<Placed>>,
    /// The pending run and the open lines folded into runs (few, owned).
    end: Vec<Placed>,
}

impl ViewRuns<'_> {
    /// The tail, in order: the window's runs, then the pending and open ones.
    pub fn tail(&self) -> Vec<&Placed> {
        self.window.iter().chain(&self.end).collect()
    }
}

/// Where the head and the tail window are once a finished output is parked
/// ([`RenderedOutput::park`]): the runs themselves are in the line log. Both are taken after any
/// retention cut (a cut of a parked output brings the runs back, cuts, and parks again), so they lie
/// past the removed lines.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
struct Parked {
    /// The last line of the head's last run (`None`: the head was empty).
    head_last: Option<u64>,
    /// The tail window's first run: its first line and the rendered bytes before it.
    tail_first: Option<(u64, u64)>,
}

/// One run as the model sees it: `text (×3)` for repeated lines, `<3 blank lines>` for a run of blank
/// (empty or whitespace-only) lines, whose text would leave only ` (×3)`.
pub fn display(run: &Run) -> String {
    match run.count {
        0 | 1 => run.text.clone(),
        n if blank(&run.text) => format!("<{n} blank lines>"),
        n => format!("{} (×{n})", run.text),
    }
}

/// True for a line with nothing but whitespace.
pub fn blank(text: &str) -> bool {
    text.trim().is_empty()
}

/// What renders one stream each: its screen and the splitter in front of it.
#[derive(Debug, Default)]
struct Machines {
    screens: [Screen; 2],
    splitters: [Splitter; 2],
}

/// A job's rendered output.
#[derive(Debug, Serialize, Deserialize)]
pub struct RenderedOutput {
    /// The per-stream machines that turn bytes into lines: made at the first byte, let go when the
    /// output is parked (over 1 KiB inline, which every ended job would otherwise keep).
    #[serde(skip)]
    live: Option<Box<Machines>>,
    /// The redactor's state per stream (inside a private-key block or not): kept for the output's
    /// life, so a chunk arriving after the output was parked is still redacted as the block it is in.
    blocks: [BlockCursor; 2],
    pending: Option<Placed>,
    next_line: u64,
    log: LineLog,
    head: Vec<Placed>,
    head_bytes: usize,
    tail: VecDeque<Placed>,
    tail_bytes: usize,
    /// Runs left the tail window's front: the log holds lines the memory does not.
    evicted: bool,
    rendered_bytes: u64,
    errors_first: Vec<(u64, String)>,
    errors_last: VecDeque<(u64, String)>,
    errors_total: u64,
    #[serde(skip)]
    fresh: Option<Vec<FreshLine>>,
    finished: bool,
    /// The stream of the previous chunk (a switch commits the other stream's complete lines).
    last_stream: Option<usize>,
    /// Set once the finished output let its head and tail window go (they are read back from the log).
    parked: Option<Parked>,
}

impl RenderedOutput {
    /// A job's rendered output; its line log goes to `path`.
    pub fn new(path: PathBuf) -> RenderedOutput {
        RenderedOutput::with_log(LineLog::create(path))
    }

    /// A job's rendered output into `log`.
    pub fn with_log(log: LineLog) -> RenderedOutput {
        RenderedOutput {
            live: None,
            blocks: [BlockCursor::default(); 2],
            pending: None,
            next_line: 1,
            log,
            head: Vec::new(),
            head_bytes: 0,
            tail: VecDeque::new(),
            tail_bytes: 0,
            evicted: false,
            rendered_bytes: 0,
            errors_first: Vec::new(),
            errors_last: VecDeque::new(),
            errors_total: 0,
            fresh: None,
            finished: false,
            last_stream: None,
            parked: None,
        }
    }

    /// Collect committed lines for subscribers (until [`RenderedOutput::take_fresh`] is no longer called).
    pub fn collect_fresh(&mut self, on: bool) {
        if on && self.fresh.is_none() {
            self.fresh = Some(Vec::new());
        } else if !on {
            self.fresh = None;
        }
    }

    /// Lines committed since the last call (when collecting).
    pub fn take_fresh(&mut self) -> Vec<FreshLine> {
        self.fresh.as_mut().map(std::mem::take).unwrap_or_default()
    }

    fn live(&mut self) -> &mut Machines {
        self.live.get_or_insert_with(Default::default)
    }

    /// Feed a chunk of stream `s` (0 stdout, 1 stderr).
    pub fn push(&mut self, s: usize, data: &[u8]) {
        if self.last_stream != Some(s) {
            let other = 1 - s;
            if self.last_stream == Some(other) {
                self.live().screens[other].settle();
                self.drain(other);
            }
            self.last_stream = Some(s);
        }
        let pieces = self.live().splitters[s].feed(data);
        self.apply(s, pieces);
        self.drain(s);
    }

    /// Text goes to the stream's screen; a binary stretch ends the open line and becomes one line naming
    /// it with its size.
    fn apply(&mut self, s: usize, pieces: Vec<Piece>) {
        for p in pieces {
            match p {
                Piece::Text(t) => self.live().screens[s].feed(&t),
                Piece::Binary { bytes, name } => {
                    self.live().screens[s].finish();
                    self.drain(s);
                    self.commit(s as u8, &format!("<binary: {}, {name}>", human_bytes(bytes)));
                }
            }
        }
    }

    fn drain(&mut self, s: usize) {
        if self.live().screens[s].has_committed() {
            for line in self.live().screens[s].take_committed() {
                self.commit(s as u8, &line);
            }
        }
    }

    /// Both streams ended: commit what is still open (and name binary streams).
    pub fn finish(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        let streams = if self.live.is_some() { 0..2 } else { 0..0 };
        for s in streams {
            let pieces = self.live().splitters[s].finish();
            self.apply(s, pieces);
            self.live().screens[s].finish();
            self.drain(s);
        }
        if let Some(p) = self.pending.take() {
            self.place(p);
        }
        self.log.sync();
    }

    fn commit(&mut self, stream: u8, raw_line: &str) {
        let text = Redactor::builtin().redact_line(&mut self.blocks[usize::from(stream)], raw_line).into_owned();
        let line = self.next_line;
        self.next_line += 1;
        self.rendered_bytes += text.len() as u64 + 1;
        if error_shaped().is_match(&text) {
            self.note_error(line, &text);
        }
        if let Some(f) = &mut self.fresh {
            f.push(FreshLine { line, stream, text: text.clone() });
        }
        if let Some(p) = &mut self.pending {
            if p.run.stream == stream && p.run.text == text && p.run.count < u32::MAX {
                p.run.count += 1;
                return;
            }
        }
        let bytes_before = self.rendered_bytes - text.len() as u64 - 1;
        let next = Placed { run: Run { stream, first: line, count: 1, text }, bytes_before };
        if let Some(done) = self.pending.replace(next) {
            self.place(done);
        }
    }

    fn note_error(&mut self, line: u64, text: &str) {
        self.errors_total += 1;
        let mut end = text.len().min(ERROR_TEXT);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let entry = (line, text[..end].to_owned());
        if self.errors_first.len() < ERRORS_KEEP {
            self.errors_first.push(entry);
        } else {
            if self.errors_last.len() == ERRORS_KEEP {
                self.errors_last.pop_front();
            }
            self.errors_last.push_back(entry);
        }
    }

    /// A finished run goes to the log and to the head or the tail window.
    fn place(&mut self, p: Placed) {
        self.log.append(&p.run);
        let len = p.display_len() + 1;
        // Once retention removed lines, the head is what is left of the first runs: it only shrinks.
        if self.tail.is_empty() && self.head_bytes + len <= HEAD_KEEP && self.log.removed().0 == 0 {
            self.head_bytes += len;
            self.head.push(p);
            return;
        }
        self.tail_bytes += len;
        self.tail.push_back(p);
        while self.tail_bytes > TAIL_KEEP && self.tail.len() > 1 {
            let gone = self.tail.pop_front().map_or(0, |g| g.display_len() + 1);
            self.evicted = true;
            self.tail_bytes -= gone;
        }
    }

    pub fn flush(&mut self) {
        self.log.flush();
    }

    /// The job can write no more and its last lines are final: let the line log's file go.
    pub fn close(&mut self) {
        self.log.close();
    }

    /// Whether the line log's file is held open.
    pub fn is_open(&self) -> bool {
        self.log.is_open()
    }

    /// Free the line log's write buffer if it holds nothing (the job can write no more).
    pub fn release_buffer(&mut self) {
        self.log.release_buffer();
    }

    /// The line log's write buffer's allocated size.
    #[cfg(test)]
    pub(crate) fn buffer_capacity(&self) -> usize {
        self.log.buffer_capacity()
    }

    pub fn dirty(&self) -> bool {
        self.log.dirty()
    }

    pub fn error(&self) -> Option<&str> {
        self.log.error()
    }

    /// Retention: remove the oldest runs of the line log until at most `keep` bytes of it remain, and
    /// forget the removed runs held in memory. Returns true when something was removed.
    pub fn remove_oldest(&mut self, keep: u64) -> bool {
        // A parked output is brought back for the cut and parked again: the runs kept follow the same
        // rules either way.
        let parked = self.parked.is_some();
        if parked && self.log.kept_len() > keep && !self.unpark() {
            return false;
        }
        let removed = self.remove_oldest_held(keep);
        if parked {
            self.park();
        }
        removed
    }

    fn remove_oldest_held(&mut self, keep: u64) -> bool {
        if !self.log.remove_oldest(keep) {
            return false;
        }
        let (gone, _) = self.log.removed();
        let before = self.head.len();
        self.head.retain(|p| p.run.last() > gone);
        self.head_bytes = self.head.iter().map(|p| p.display_len() + 1).sum();
        while self.tail.front().is_some_and(|p| p.run.last() <= gone) {
            let len = self.tail.pop_front().map_or(0, |p| p.display_len() + 1);
            self.tail_bytes -= len;
        }
        self.evicted |= before != self.head.len();
        true
    }

    /// Bytes of the line log not removed by retention.
    pub fn kept_len(&self) -> u64 {
        self.log.kept_len()
    }

    /// Lines removed by retention (lines `1..=n`) and their rendered bytes.
    pub fn removed(&self) -> (u64, u64) {
        self.log.removed()
    }

    /// Lines committed so far.
    pub fn line_count(&self) -> u64 {
        self.next_line - 1
    }

    /// Rendered bytes of every committed line (newlines included).
    pub fn rendered_bytes(&self) -> u64 {
        self.rendered_bytes
    }

    /// Where "what the job printed since now" starts: the first line not complete yet (committed lines
    /// and open ones a newline ended are complete, in the order [`RenderedOutput::view_runs`] numbers
    /// them) and the rendered bytes before it. A line being written now (a prompt) is after the mark.
    pub fn mark(&self) -> (u64, u64) {
        let (mut line, mut bytes) = (self.next_line, self.rendered_bytes);
        let Some(m) = self.live.as_deref() else { return (line, bytes) };
        for s in 0..2 {
            let mut st = self.blocks[s];
            let r = Redactor::builtin();
            let complete = m.screens[s].complete_open_lines();
            for l in m.screens[s].open_lines().iter().take(complete) {
                line += 1;
                bytes += r.redact_line(&mut st, l).len() as u64 + 1;
            }
        }
        (line, bytes)
    }

    /// Lines drawn but still changeable (a progress bar mid-draw), redacted; empty once finished.
    pub fn open_lines(&self) -> Vec<String> {
        self.open_texts().into_iter().map(|(_, text)| text).collect()
    }

    /// [`RenderedOutput::open_lines`] with their streams.
    fn open_texts(&self) -> Vec<(u8, String)> {
        let mut out = Vec::new();
        let Some(m) = self.live.as_deref() else { return out };
        for s in 0..2 {
            let mut st = self.blocks[s];
            let r = Redactor::builtin();
            let lines = m.screens[s].open_lines();
            out.extend(lines.iter().map(|l| (s as u8, r.redact_line(&mut st, l).into_owned())));
            if let Some((bytes, name)) = m.splitters[s].open_binary().filter(|_| !self.finished) {
                out.push((s as u8, format!("<binary: {} so far, {name}>", human_bytes(bytes))));
            }
        }
        out
    }

    /// The runs the model view can use: head, whether runs were dropped between head and tail, and the
    /// tail: the tail window's runs, then the pending run with the lines still open folded in as the runs
    /// they will become (identical consecutive lines collapsed, continuing the pending run when they
    /// repeat it, numbered as they will be committed). So a view taken before the streams closed reads
    /// like one taken after. Only the pending run and the open lines are copied.
    pub fn view_runs(&self) -> ViewRuns<'_> {
        let mut end: Vec<Placed> = Vec::new();
        let mut pending = self.pending.clone();
        let (mut line, mut bytes) = (self.next_line, self.rendered_bytes);
        for (stream, text) in self.open_texts() {
            let len = text.len() as u64 + 1;
            match &mut pending {
                Some(p) if p.run.stream == stream && p.run.text == text && p.run.count < u32::MAX => p.run.count += 1,
                _ => {
                    let run = Run { stream, first: line, count: 1, text };
                    end.extend(pending.replace(Placed { run, bytes_before: bytes }));
                }
            }
            line += 1;
            bytes += len;
        }
        end.extend(pending);
        if let Some(parked) = self.parked {
            // A read that fails shows no lines: the view's marker then covers them all and names the
            // `output` call (whose error says what failed).
            let (head, tail, gap) = match self.read_back(parked) {
                Ok((head, tail)) => (head, tail, self.evicted),
                Err(_) => Default::default(),
            };
            let gap = gap || (head.is_empty() && tail.is_empty() && self.line_count() > self.log.removed().0);
            return ViewRuns { head: Cow::Owned(head), gap, window: Cow::Owned(tail), end };
        }
        ViewRuns { head: Cow::Borrowed(&self.head), gap: self.evicted, window: Cow::Borrowed(&self.tail), end }
    }

    /// Let the head and the tail window go once the output is finished and the line log holds every
    /// run on disk (the job can write no more): views read them back from the log, and what stays in
    /// memory is the counts, the error-shaped lines and the log's block index. Views are the same
    /// either way. Returns whether the output is parked (false while it may grow or the log is not
    /// whole).
    pub fn park(&mut self) -> bool {
        if self.parked.is_some() {
            return true;
        }
        if !self.finished || self.pending.is_some() || !self.log.whole_on_disk() {
            return false;
        }
        let head_last = self.head.last().map(|p| p.run.last());
        let tail_first = self.tail.front().map(|p| (p.run.first, p.bytes_before));
        self.parked = Some(Parked { head_last, tail_first });
        self.head = Vec::new();
        self.tail = VecDeque::new();
        // Nothing is open once finished, and nothing more arrives.
        self.live = None;
        self.errors_first.shrink_to_fit();
        self.errors_last.shrink_to_fit();
        self.log.shrink();
        true
    }

    /// Whether the head and the tail window are in the line log only.
    pub fn parked(&self) -> bool {
        self.parked.is_some()
    }

    /// Bring a parked output's runs back into memory; false (still parked) when the log cannot be read.
    fn unpark(&mut self) -> bool {
        let Some(parked) = self.parked else { return true };
        match self.read_back(parked) {
            Ok((head, tail)) => {
                (self.head, self.tail, self.parked) = (head, tail, None);
                true
            }
            Err(_) => false,
        }
    }

    /// The head and the tail window of a parked output, read from the line log: the head is the log's
    /// first kept runs up to its last line, the window the runs from its first line on, each with the
    /// rendered bytes before it counted from a known point (what retention removed, the window's start).
    fn read_back(&self, parked: Parked) -> Result<(Vec<Placed>, VecDeque<Placed>), StoreError> {
        let (gone, gone_bytes) = self.log.removed();
        let mut head = Vec::new();
        if let Some(last) = parked.head_last {
            let mut bytes = gone_bytes;
            self.log.plan(gone + 1).scan(|run| {
                if run.first > last {
                    return false;
                }
                let len = (run.text.len() as u64 + 1) * u64::from(run.count);
                head.push(Placed { run, bytes_before: bytes });
                bytes += len;
                true
            })?;
        }
        let mut tail = VecDeque::new();
        if let Some((first, mut bytes)) = parked.tail_first {
            self.log.plan(first).scan(|run| {
                if run.first < first {
                    return true;
                }
                let len = (run.text.len() as u64 + 1) * u64::from(run.count);
                tail.push_back(Placed { run, bytes_before: bytes });
                bytes += len;
                true
            })?;
        }
        Ok((head, tail))
    }

    /// An estimate of the heap bytes this output holds: runs, error-shaped lines, screens, buffers and
    /// the line log's index.
    pub fn held_bytes(&self) -> usize {
        use std::mem::size_of;
        let placed = |p: &Placed| size_of::<Placed>() + p.run.text.capacity();
        let error = |e: &(u64, String)| e.1.capacity();
        let head =
            self.head.capacity() * size_of::<Placed>() + self.head.iter().map(|p| p.run.text.capacity()).sum::<usize>();
        let tail =
            self.tail.capacity() * size_of::<Placed>() + self.tail.iter().map(|p| p.run.text.capacity()).sum::<usize>();
        let errors = (self.errors_first.capacity() + self.errors_last.capacity()) * size_of::<(u64, String)>()
            + self.errors_first.iter().chain(&self.errors_last).map(error).sum::<usize>();
        let fresh = self
            .fresh
            .as_ref()
            .map_or(0, |f| f.capacity() * size_of::<FreshLine>() + f.iter().map(|l| l.text.capacity()).sum::<usize>());
        head + tail
            + self.pending.as_ref().map_or(0, placed)
            + errors
            + fresh
            + self.live.as_deref().map_or(0, |m| {
                std::mem::size_of::<Machines>()
                    + m.screens.iter().map(Screen::held_bytes).sum::<usize>()
                    + m.splitters.iter().map(Splitter::held_bytes).sum::<usize>()
            })
            + self.log.held_bytes()
    }

    /// Error-shaped lines kept, in order, and how many there were in all.
    pub fn errors(&self) -> (Vec<&(u64, String)>, u64) {
        (self.errors_first.iter().chain(self.errors_last.iter()).collect(), self.errors_total)
    }

    /// Flush and plan a scan of the log from line `from`; also returns the pending run (not in the log).
    pub fn plan(&mut self, from: u64) -> (LinePlan, Option<Run>) {
        self.log.sync();
        (self.log.plan(from), self.pending.as_ref().map(|p| p.run.clone()))
    }

    /// Index entries' first lines, for finding a tail.
    pub fn index_lines(&self) -> Vec<u64> {
        self.log.index_lines()
    }

    /// Every display line held in memory, in order (tests and small outputs).
    pub fn display_lines(&self) -> Vec<String> {
        let runs = self.view_runs();
        runs.head.iter().chain(runs.tail()).map(|p| p.display()).collect()
    }

    /// The last `n` display lines (announcements).
    pub fn last_lines(&self, n: usize) -> Vec<String> {
        let runs = self.view_runs();
        let mut v: Vec<String> = Vec::new();
        for p in runs.tail().into_iter().rev().chain(runs.head.iter().rev()) {
            if v.len() >= n {
                break;
            }
            v.push(p.display());
        }
        v.reverse();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::view;
    use crate::output::views::{self, Source, StreamSel};
    use proptest::prelude::*;

    fn out() -> (tempfile::TempDir, RenderedOutput) {
        let dir = tempfile::tempdir().unwrap();
        let r = RenderedOutput::new(dir.path().join("1.lines"));
        (dir, r)
    }

    #[test]
    fn display_len_is_the_display_lines_length() {
        for count in [0, 1, 2, 9, 10, 99, 100, 1_000_000, u32::MAX] {
            for text in ["", "  ", "x", "héllo wörld"] {
                let p = Placed { run: Run { stream: 0, first: 1, count, text: text.to_owned() }, bytes_before: 0 };
                assert_eq!(p.display_len(), p.display().len(), "{count} {text:?}");
            }
        }
    }

    #[test]
    fn identical_lines_collapse_and_keep_their_numbers() {
        let (_d, mut r) = out();
        r.push(0, b"start\n");
        for _ in 0..1000 {
            r.push(0, b"same\n");
        }
        r.push(0, b"end\n");
        r.finish();
        assert_eq!(r.display_lines(), ["start", "same (×1000)", "end"]);
        assert_eq!(r.line_count(), 1002);
        let (plan, pending) = r.plan(1);
        assert!(pending.is_none());
        let mut runs = Vec::new();
        plan.scan(|x| {
            runs.push((x.first, x.count));
            true
        })
        .unwrap();
        assert_eq!(runs, [(1, 1), (2, 1000), (1002, 1)]);
    }

    #[test]
    fn lines_of_both_streams_keep_their_arrival_order() {
        let (_d, mut r) = out();
        r.push(0, b"out 1\n");
        r.push(1, b"err 1\n");
        r.push(0, b"out 2\n");
        r.finish();
        assert_eq!(r.display_lines(), ["out 1", "err 1", "out 2"]);
    }

    #[test]
    fn gzip_is_named_not_printed() {
        let (_d, mut r) = out();
        let mut data = vec![0x1f, 0x8b, 8, 0];
        data.extend((0..5000u32).map(|i| (i * 7) as u8));
        r.push(0, &data[..2]);
        r.push(0, &data[2..]);
        r.finish();
        assert_eq!(r.display_lines(), ["<binary: 4.9 KiB, gzip data>"]);
    }

    #[test]
    fn decisive_lines_of_each_language_are_error_shaped() {
        let decisive = [
            "KeyError: 'user_id'",
            "AssertionError",
            "TypeError: unsupported operand type(s) for +: 'int' and 'str'",
            "java.lang.NullPointerException: Cannot invoke \"String.length()\"",
            "junit.framework.ComparisonFailure: expected:<1> but was:<2>",
            "E       assert 1 == 2",
            "error[E0425]: cannot find value `x` in this scope",
            "thread 'main' panicked at src/main.rs:2:5:",
            "panic: runtime error: index out of range [3] with length 3",
            "FAILED tests/test_x.py::test_y - assert 1 == 2",
            "npm ERR! code ERESOLVE",
            "make: *** [Makefile:3: all] Error 2",
            "Segmentation fault (core dumped)",
        ];
        for l in decisive {
            assert!(error_shaped().is_match(l), "{l}");
        }
        for l in [
            "Compiling serde v1.0",
            "test result: ok. 3 passed",
            "ErrorHandler registered",
            "Everything fine",
            "E = mc^2",
        ] {
            assert!(!error_shaped().is_match(l), "{l}");
        }
    }

    #[test]
    fn secrets_are_redacted_before_anything_keeps_them() {
        let (_d, mut r) = out();
        r.collect_fresh(true);
        r.push(1, b"key=AKIAIOSFODNN7EXAMPLE\n-----BEGIN PRIVATE KEY-----\nMIIB\nabc\n-----END PRIVATE KEY-----\n");
        r.finish();
        let lines = r.display_lines().join("\n");
        assert!(!lines.contains("AKIA") && !lines.contains("MIIB"), "{lines}");
        assert!(r.take_fresh().iter().all(|l| !l.text.contains("MIIB")));
    }

    #[test]
    fn open_lines_fold_into_runs_as_they_will_be_committed() {
        let (_d, mut r) = out();
        r.push(0, b"start\n");
        for _ in 0..20 {
            r.push(0, b"same\n");
        }
        r.push(1, b"err\nerr\n");
        r.push(1, b"last");
        let before = r.display_lines();
        assert_eq!(before, ["start", "same (×20)", "err (×2)", "last"], "some committed, some still open");
        r.finish();
        assert_eq!(r.display_lines(), before, "finishing changes nothing a view showed");
        assert_eq!(r.line_count(), 24, "the numbers given to open lines were the ones they got");
    }

    #[test]
    fn error_lines_are_listed_with_their_numbers() {
        let (_d, mut r) = out();
        r.push(0, b"ok\nthread 'main' panicked at x\nok\n");
        r.finish();
        let (errs, total) = r.errors();
        assert_eq!((errs[0].0, total), (2, 1));
    }

    #[test]
    fn the_tail_window_stays_bounded() {
        let (_d, mut r) = out();
        for i in 0..200_000 {
            r.push(0, format!("line {i}\n").as_bytes());
        }
        r.finish();
        let runs = r.view_runs();
        assert!(runs.gap);
        assert_eq!(runs.head[0].run.text, "line 0");
        assert_eq!(runs.tail().last().unwrap().run.text, "line 199999");
        assert!(r.tail_bytes <= TAIL_KEEP && r.head_bytes <= HEAD_KEEP);
    }

    /// Every view of `out`, as text: model views at several budgets, views since a mark, announcement
    /// lines, counts, errors, and the line views (ranges, tails, grep, errors) on each stream.
    fn every_view(out: &mut RenderedOutput) -> Vec<String> {
        let mut v = Vec::new();
        for budget in [1_000, 4_000, 40_000, 400_000] {
            v.push(format!("{:?}", view::render(out, budget, "s", 1)));
        }
        let total = out.line_count();
        for from in [1, 2, total / 3, total / 2, total.saturating_sub(5), total, total + 1] {
            v.push(view::since(out, from.max(1), from * 7, 4_000, "s", 1));
        }
        v.push(format!("{:?} {:?}", view::last_lines(out), out.display_lines()));
        v.push(format!("{:?} {} {} {:?} {:?}", out.mark(), total, out.rendered_bytes(), out.errors(), out.removed()));
        v.push(format!("{:?} {:?}", out.open_lines(), out.index_lines()));
        let re = views::compile("[0-9]7|error|%").unwrap();
        for sel in [StreamSel::Both, StreamSel::Stdout, StreamSel::Stderr] {
            for (a, b) in [(1, 10), (total / 2, total / 2 + 40), (total.saturating_sub(30), u64::MAX)] {
                let (plan, pending) = out.plan(a);
                let src = Source { plan, pending };
                v.push(format!("{:?}", views::lines(&src, a, b, sel, 4_000).unwrap()));
            }
            let (plan, pending) = out.plan(1);
            let src = Source { plan, pending };
            v.push(format!("{:?}", views::search(&src, sel, 2, 50, 8_000, |r| re.is_match(&r.text)).unwrap()));
            v.push(format!("{:?}", views::search(&src, sel, 1, 50, 8_000, views::is_error).unwrap()));
        }
        v
    }

    /// One piece of a job's output: plain lines, long lines, colours, `\r` rewrites, invalid UTF-8,
    /// repeats, error lines and bulk (enough to push runs out of the head and the tail window).
    fn piece() -> impl Strategy<Value = (bool, Vec<u8>)> {
        let kind = prop_oneof![
            (0usize..200).prop_map(|n| format!("plain {}\n", "p".repeat(n)).into_bytes()),
            (8_000usize..40_000).prop_map(|n| format!("long {}\n", "L".repeat(n)).into_bytes()),
            Just(b"\x1b[31mred\x1b[0m and \x1b[1mbold\x1b[0m\n".to_vec()),
            (1u32..30).prop_map(|n| {
                let mut b: Vec<u8> = (0..n).flat_map(|i| format!("progress {i}%\r").into_bytes()).collect();
                b.extend_from_slice(b"done\n");
                b
            }),
            Just(b"bad \xff\xfe utf8 \xc3\n".to_vec()),
            (1usize..500).prop_map(|n| "same\n".repeat(n).into_bytes()),
            Just(b"error: it broke\n\n\n".to_vec()),
            (1usize..15_000).prop_map(|n| (0..n).flat_map(|i| format!("bulk line {i:06} ok\n").into_bytes()).collect()),
            Just(b"no newline yet".to_vec()),
        ];
        (any::<bool>(), kind)
    }

    fn fed(dir: &std::path::Path, pieces: &[(bool, Vec<u8>)]) -> RenderedOutput {
        let mut r = RenderedOutput::new(dir.join("1.lines"));
        for (err, data) in pieces {
            r.push(usize::from(*err), data);
        }
        r.finish();
        r.close();
        r
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
        #[test]
        fn parking_changes_no_view(
            pieces in proptest::collection::vec(piece(), 0..40),
            keep in proptest::option::of(0.0f64..1.0),
        ) {
            let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
            let (mut held, mut parked) = (fed(d1.path(), &pieces), fed(d2.path(), &pieces));
            let before = every_view(&mut held);
            prop_assert!(parked.park());
            prop_assert!(parked.held_bytes() < 2_048 + held.errors().0.len() * 400, "{}", parked.held_bytes());
            let after = every_view(&mut parked);
            for (b, a) in before.iter().zip(&after) {
                prop_assert_eq!(b, a);
            }
            if let Some(keep) = keep {
                // A share of the line log: cuts land in the head, the gap and the tail window alike.
                let keep = (held.kept_len() as f64 * keep) as u64;
                prop_assert_eq!(held.remove_oldest(keep), parked.remove_oldest(keep));
                prop_assert!(parked.parked(), "parked again after retention");
                let (before, after) = (every_view(&mut held), every_view(&mut parked));
                for (b, a) in before.iter().zip(&after) {
                    prop_assert_eq!(b, a);
                }
            }
        }
    }
}
