//! The worker's end of the event ring: [`EventOut`].
//!
//! Two kinds of frames go out:
//! - control events ([`EventOut::emit`]: `Hello`, `Started`, `Exited`, …), encoded with postcard. When the
//!   ring lacks space they wait, in order, in a small in-memory queue (bounded by the number of jobs and
//!   commands, never by output volume);
//! - output chunks ([`EventOut::push_output`]), read straight from a pipe into the frame buffer after a
//!   hand-written `Event::Output` prefix, so a chunk is copied once (pipe → buffer) before the ring's copy.
//!   The prefix carries the chunk's read time ([`ReadTime`], taken right after the `read`). The prefix
//!   encoder is tested against postcard below.
//!
//! Invariants: nothing is dropped or reordered. The caller reads a pipe only when
//! [`EventOut::output_ready`] says the queue is empty and a whole chunk fits, so output never overtakes a
//! queued control event. [`EventOut::wake_needed`] is asked once per batch, not per frame.
//!
//! A `Started` goes out without ringing the front's doorbell ([`EventOut::emit_quiet`]): most jobs an
//! agent runs end within milliseconds, and their end rings anyway, so the front wakes once for both
//! instead of twice (and its waiting caller once instead of twice). A quiet frame rings at the latest
//! [`QUIET_WAKE`] after it was published (the worker's poll wakes for it, [`EventOut::quiet_due_in`]);
//! frames are never reordered, so whatever rings first delivers it.

use shm_proto::frame;
use shm_proto::msg::{Event, JobId, Stream, MAX_OUTPUT_CHUNK};
use shm_proto::ring::{Producer, PushError};
use std::collections::VecDeque;

pub use shm_proto::error_chain;

/// Room before the data for the `Event::Output` prefix: variant (1) + job (≤ 10) + stream (1) + the two
/// read times (≤ 10 each) + length (≤ 3 bytes for lengths below 2 MiB).
pub const OUTPUT_PREFIX_MAX: usize = 40;

/// When the worker read a chunk: `CLOCK_MONOTONIC` and the wall clock, in ns, taken right after the
/// `read` that returned it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadTime {
    pub mono_ns: u64,
    pub unix_ns: u64,
}

impl ReadTime {
    /// Both clocks now.
    pub fn now() -> ReadTime {
        ReadTime { mono_ns: shm_proto::sys::monotonic_ns(), unix_ns: shm_proto::sys::unix_ns() }
    }
}

/// The longest a frame published by [`EventOut::emit_quiet`] waits for a ring of the front's doorbell.
pub const QUIET_WAKE: std::time::Duration = std::time::Duration::from_millis(5);

/// Longest text carried in a `Warning` or `SpawnFailed` message.
pub const MAX_MESSAGE: usize = 1024;

/// Errors publishing an event. Any of them ends the worker: the front can no longer be told anything.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmitError {
    #[error("the event ring is corrupt")]
    Corrupt(#[source] PushError),
    #[error("an event does not fit in the event ring's largest frame ({0} bytes)")]
    TooLarge(usize),
    #[error("an event could not be encoded")]
    Encode(#[source] shm_proto::frame::FrameError),
}

impl std::fmt::Debug for EventOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventOut").finish_non_exhaustive()
    }
}

/// The event ring's producer, its in-order overflow queue and the output frame buffer.
pub struct EventOut {
    ring: Producer,
    scratch: Vec<u8>,
    pending: VecDeque<Vec<u8>>,
    pushed: bool,
    /// When the oldest frame published quietly since the last ring went out.
    quiet_since: Option<std::time::Instant>,
    chunk: usize,
    frame: Vec<u8>,
}

impl EventOut {
    pub fn new(ring: Producer) -> EventOut {
        let chunk = MAX_OUTPUT_CHUNK.min(ring.max_frame().saturating_sub(OUTPUT_PREFIX_MAX)).max(1);
        EventOut {
            ring,
            scratch: Vec::with_capacity(1024),
            pending: VecDeque::new(),
            pushed: false,
            quiet_since: None,
            chunk,
            frame: vec![0; OUTPUT_PREFIX_MAX + chunk],
        }
    }

    /// The largest frame the event ring takes.
    pub fn max_frame(&self) -> usize {
        self.ring.max_frame()
    }

    /// Publish a control event now, or queue it behind earlier ones when the ring is full.
    ///
    /// Every event is bounded by its type (listings by `shm_proto::procs`, texts by [`truncate`], state
    /// captures by the capture limit); one that still does not fit one frame is replaced by a `Warning`
    /// saying so, so that no event a job can shape ends the worker.
    pub fn emit(&mut self, ev: &Event) -> Result<(), EmitError> {
        frame::encode(ev, &mut self.scratch).map_err(EmitError::Encode)?;
        if self.scratch.len() > self.ring.max_frame() {
            let why = format!(
                "the worker dropped an event of {} bytes, over the event frame's {} bytes",
                self.scratch.len(),
                self.ring.max_frame()
            );
            frame::encode(&warning(None, why), &mut self.scratch).map_err(EmitError::Encode)?;
        }
        if self.scratch.len() > self.ring.max_frame() {
            return Err(EmitError::TooLarge(self.scratch.len()));
        }
        if self.pending.is_empty() {
            match self.ring.try_push(&self.scratch) {
                Ok(()) => {
                    self.pushed = true;
                    return Ok(());
                }
                Err(PushError::Full) => {}
                Err(e) => return Err(EmitError::Corrupt(e)),
            }
        }
        self.pending.push_back(self.scratch.clone());
        Ok(())
    }

    /// [`EventOut::emit`], without asking for the doorbell: the event reaches the front with whatever
    /// rings next, or [`QUIET_WAKE`] later (see the module docs).
    pub fn emit_quiet(&mut self, ev: &Event) -> Result<(), EmitError> {
        let pushed = std::mem::replace(&mut self.pushed, false);
        let r = self.emit(ev);
        self.pushed = pushed;
        if self.quiet_since.is_none() {
            self.quiet_since = Some(std::time::Instant::now());
        }
        r
    }

    /// How long until a quietly published frame must ring the doorbell (`None`: none waits).
    pub fn quiet_due_in(&self) -> Option<std::time::Duration> {
        self.quiet_since.map(|t| QUIET_WAKE.saturating_sub(t.elapsed()))
    }

    /// Publish queued control events while they fit; true when none remain.
    pub fn flush_pending(&mut self) -> Result<bool, EmitError> {
        while let Some(body) = self.pending.front() {
            match self.ring.try_push(body) {
                Ok(()) => {
                    self.pushed = true;
                    self.pending.pop_front();
                }
                Err(PushError::Full) => return Ok(false),
                Err(e) => return Err(EmitError::Corrupt(e)),
            }
        }
        Ok(true)
    }

    /// True while control events wait for ring space.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// The largest output payload per frame.
    pub fn chunk(&self) -> usize {
        self.chunk
    }

    /// The frame body length to wait for before anything more can go out.
    pub fn space_needed(&self) -> usize {
        self.pending.front().map_or(OUTPUT_PREFIX_MAX + self.chunk, Vec::len)
    }

    /// True when a pipe may be read now: no control event waits and a whole chunk fits.
    pub fn output_ready(&self) -> bool {
        self.pending.is_empty() && self.ring.fits(OUTPUT_PREFIX_MAX + self.chunk)
    }

    /// Where to read output into: [`EventOut::chunk`] bytes.
    pub fn output_buf(&mut self) -> &mut [u8] {
        &mut self.frame[OUTPUT_PREFIX_MAX..]
    }

    /// Publish the first `n` bytes of [`EventOut::output_buf`], read at `at`, as `Event::Output`. Call
    /// only after [`EventOut::output_ready`] returned true (space only grows meanwhile).
    pub fn push_output(&mut self, job: JobId, stream: Stream, at: ReadTime, n: usize) -> Result<(), EmitError> {
        let (prefix, len) = output_prefix(job, stream, at, n);
        let start = OUTPUT_PREFIX_MAX - len;
        self.frame[start..OUTPUT_PREFIX_MAX].copy_from_slice(&prefix[..len]);
        self.ring.try_push(&self.frame[start..OUTPUT_PREFIX_MAX + n]).map_err(EmitError::Corrupt)?;
        self.pushed = true;
        Ok(())
    }

    /// True once per batch when the front is parked and its doorbell must ring: something was published
    /// since the last ask, or a quiet frame has waited [`QUIET_WAKE`].
    pub fn wake_needed(&mut self) -> bool {
        let due = self.pushed || self.quiet_due_in().is_some_and(|d| d.is_zero());
        if !due {
            return false;
        }
        self.pushed = false;
        self.quiet_since = None;
        self.ring.wake_needed()
    }

    /// Park for space for [`EventOut::space_needed`]; false if it is already there.
    pub fn park_prepare(&self) -> bool {
        self.ring.park_prepare(self.space_needed())
    }

    /// Clear the parked word after waking.
    pub fn park_done(&self) {
        self.ring.park_done();
    }
}

fn varint(mut v: u64, out: &mut [u8; OUTPUT_PREFIX_MAX], len: &mut usize) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        out[*len] = if v == 0 { byte } else { byte | 0x80 };
        *len += 1;
        if v == 0 {
            return;
        }
    }
}

/// postcard's encoding of `Event::Output { job, stream, read_mono_ns, read_unix_ns, data }` up to the data
/// bytes: the variant index, the job, the stream's variant index, the two times and the data length, all
/// as LEB128 varints.
fn output_prefix(job: JobId, stream: Stream, at: ReadTime, n: usize) -> ([u8; OUTPUT_PREFIX_MAX], usize) {
    const OUTPUT_VARIANT: u64 = 3;
    let mut out = [0u8; OUTPUT_PREFIX_MAX];
    let mut len = 0;
    varint(OUTPUT_VARIANT, &mut out, &mut len);
    varint(job, &mut out, &mut len);
    varint(if stream == Stream::Stdout { 0 } else { 1 }, &mut out, &mut len);
    varint(at.mono_ns, &mut out, &mut len);
    varint(at.unix_ns, &mut out, &mut len);
    varint(n as u64, &mut out, &mut len);
    (out, len)
}

/// A `Warning` event, its message cut to [`MAX_MESSAGE`] bytes.
pub fn warning(job: Option<JobId>, message: impl Into<String>) -> Event {
    Event::Warning { job, message: truncate(message.into()) }
}

/// `s` cut to at most [`MAX_MESSAGE`] bytes on a character boundary, marked with `…` when cut.
pub fn truncate(mut s: String) -> String {
    if s.len() > MAX_MESSAGE {
        let mut end = MAX_MESSAGE - '…'.len_utf8();
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use shm_proto::ring::heap_ring;

    #[test]
    fn output_prefix_matches_postcard() {
        let times = [(0, 0), (1, 127), (128, 1_700_000_000_000_000_000), (u64::MAX, u64::MAX)];
        for (job, (mono_ns, unix_ns)) in
            [0, 1, 127, 128, 300, u64::from(u32::MAX), u64::MAX].into_iter().zip(times.iter().cycle())
        {
            for (stream, n) in [(Stream::Stdout, 0), (Stream::Stderr, 1), (Stream::Stdout, 127), (Stream::Stderr, 128)]
                .into_iter()
                .chain([(Stream::Stdout, 16383), (Stream::Stdout, 16384), (Stream::Stderr, MAX_OUTPUT_CHUNK)])
            {
                let data: Vec<u8> = (0..n).map(|i| i as u8).collect();
                let mut expect = Vec::new();
                let (read_mono_ns, read_unix_ns) = (*mono_ns, *unix_ns);
                let ev = Event::Output { job, stream, read_mono_ns, read_unix_ns, data: data.clone() };
                frame::encode(&ev, &mut expect).unwrap();
                let at = ReadTime { mono_ns: read_mono_ns, unix_ns: read_unix_ns };
                let (prefix, len) = output_prefix(job, stream, at, n);
                assert!(len <= OUTPUT_PREFIX_MAX);
                assert_eq!(&expect[..len], &prefix[..len], "job {job} n {n}");
                assert_eq!(&expect[len..], &data[..]);
            }
        }
    }

    #[test]
    fn output_frames_decode_as_output_events() {
        let (p, mut c) = heap_ring(1 << 16);
        let mut out = EventOut::new(p);
        out.output_buf()[..5].copy_from_slice(b"hello");
        assert!(out.output_ready());
        let at = ReadTime { mono_ns: 5_000_000_123, unix_ns: 1_700_000_000_000_000_456 };
        out.push_output(42, Stream::Stderr, at, 5).unwrap();
        let mut buf = Vec::new();
        let ev: Event = c.pop_msg(&mut buf).unwrap().unwrap();
        let expect = Event::Output {
            job: 42,
            stream: Stream::Stderr,
            read_mono_ns: at.mono_ns,
            read_unix_ns: at.unix_ns,
            data: b"hello".to_vec(),
        };
        assert_eq!(ev, expect);
    }

    #[test]
    fn control_events_queue_in_order_when_the_ring_is_full() {
        let (p, mut c) = heap_ring(4096);
        let mut out = EventOut::new(p);
        let evs: Vec<Event> = (0..100).map(|job| Event::StreamsClosed { job }).collect();
        for ev in &evs {
            out.emit(ev).unwrap();
        }
        assert!(!out.output_ready(), "queued events block output");
        let mut got = Vec::new();
        let mut buf = Vec::new();
        loop {
            while let Some(ev) = c.pop_msg::<Event>(&mut buf).unwrap() {
                got.push(ev);
            }
            if out.flush_pending().unwrap() {
                break;
            }
        }
        while let Some(ev) = c.pop_msg::<Event>(&mut buf).unwrap() {
            got.push(ev);
        }
        assert_eq!(got, evs);
        assert!(out.output_ready());
    }

    #[test]
    fn an_event_over_the_frame_becomes_a_warning_and_the_worker_carries_on() {
        let (p, mut c) = heap_ring(1 << 16);
        let mut out = EventOut::new(p);
        let big = Event::StateCaptured { job: 3, data: vec![b'x'; 1 << 16] };
        out.emit(&big).unwrap();
        out.emit(&Event::StreamsClosed { job: 3 }).unwrap();
        let mut buf = Vec::new();
        match c.pop_msg::<Event>(&mut buf).unwrap() {
            Some(Event::Warning { job: None, message }) => assert!(message.contains("dropped an event"), "{message}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(c.pop_msg::<Event>(&mut buf).unwrap(), Some(Event::StreamsClosed { job: 3 }));
    }

    #[test]
    fn chunk_shrinks_to_fit_small_rings() {
        let (p, _c) = heap_ring(4096);
        let out = EventOut::new(p);
        assert_eq!(out.chunk(), 4096 / 2 - 64 - OUTPUT_PREFIX_MAX);
        let (p, _c) = heap_ring(1 << 22);
        assert_eq!(EventOut::new(p).chunk(), MAX_OUTPUT_CHUNK);
    }

    #[test]
    fn wake_is_asked_once_per_batch() {
        let (p, c) = heap_ring(4096);
        let mut out = EventOut::new(p);
        assert!(c.park_prepare());
        out.emit(&Event::StreamsClosed { job: 1 }).unwrap();
        out.emit(&Event::StreamsClosed { job: 2 }).unwrap();
        assert!(out.wake_needed());
        assert!(!out.wake_needed(), "nothing pushed since");
    }

    #[test]
    fn a_quiet_frame_rings_with_the_next_one_or_after_its_wait() {
        let (p, mut c) = heap_ring(4096);
        let mut out = EventOut::new(p);
        assert!(c.park_prepare());
        let started = Event::Started { job: 1, pid: 7, at_unix_ns: 0, prestarted: true, cgroup: String::new() };
        out.emit_quiet(&started).unwrap();
        assert!(!out.wake_needed(), "a quiet frame alone does not ring at once");
        assert!(out.quiet_due_in().is_some_and(|d| d <= QUIET_WAKE));
        out.emit(&Event::StreamsClosed { job: 1 }).unwrap();
        assert!(out.wake_needed(), "the next frame rings for both");
        assert_eq!(out.quiet_due_in(), None);
        let mut buf = Vec::new();
        assert_eq!(c.pop_msg::<Event>(&mut buf).unwrap(), Some(started.clone()), "in order");
        assert_eq!(c.pop_msg::<Event>(&mut buf).unwrap(), Some(Event::StreamsClosed { job: 1 }));

        c.park_done();
        assert!(c.park_prepare());
        out.emit_quiet(&started).unwrap();
        assert!(!out.wake_needed());
        std::thread::sleep(QUIET_WAKE);
        assert_eq!(out.quiet_due_in(), Some(std::time::Duration::ZERO));
        assert!(out.wake_needed(), "rung once it waited QUIET_WAKE");
        assert!(!out.wake_needed(), "and only once");
    }

    #[test]
    fn messages_are_truncated_on_char_boundaries() {
        let long = "é".repeat(MAX_MESSAGE);
        let cut = truncate(long);
        assert!(cut.len() <= MAX_MESSAGE && cut.ends_with('…'));
        assert_eq!(truncate("short".into()), "short");
    }

    #[test]
    fn error_chain_joins_sources() {
        let err =
            launcher::LaunchError::Chdir { path: "/x".into(), source: std::io::Error::from_raw_os_error(libc::EACCES) };
        assert_eq!(error_chain(&err), "cannot enter working directory /x: Permission denied (os error 13)");
    }
}
