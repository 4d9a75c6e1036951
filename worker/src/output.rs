//! Moving job output from pipes into the event ring, with backpressure.
//!
//! `mio` is edge-triggered: a readiness event is a promise that a pipe *may* have data until a read
//! returns `EAGAIN`. Such pipes wait in [`crate::Worker`]'s ready queue in arrival order; each turn reads
//! one chunk (up to [`crate::emit::EventOut::chunk`] bytes, `MAX_OUTPUT_CHUNK` on a default ring) from the
//! queue's front and, if the pipe was not drained, puts it at the back — so jobs and streams share the ring
//! fairly and chunks of both streams go out in the order they were read.
//!
//! Backpressure: a pipe is read only when a whole chunk fits in the ring and no control event is queued.
//! Otherwise the queue simply stays as it is — nothing is read, so nothing can be dropped or reordered —
//! and the loop parks on the event-space doorbell. The job then blocks in `write(2)` once its pipe buffer
//! is full, which is the end-to-end backpressure the contract asks for.

use crate::cgroup::CgroupOps;
use crate::emit::ReadTime;
use crate::event_loop::{job_warning, WorkerError, CHUNKS_PER_PASS};
use crate::Worker;
use mio::unix::SourceFd;
use nix::errno::Errno;
use shm_proto::msg::{JobId, Stream};
use std::os::fd::{AsFd, AsRawFd};

impl<C: CgroupOps> Worker<C> {
    /// Read up to [`CHUNKS_PER_PASS`] chunks into the ring. True when more could be moved right away.
    pub(crate) fn pump(&mut self) -> Result<bool, WorkerError> {
        for _ in 0..CHUNKS_PER_PASS {
            if !self.out.flush_pending()? || !self.out.output_ready() {
                return Ok(false);
            }
            let Some((job, stream)) = self.ready.pop_front() else { return Ok(false) };
            self.read_chunk(job, stream)?;
        }
        Ok(!self.ready.is_empty() && self.out.output_ready())
    }

    /// One read from one pipe, published as `Output`; EOF closes the pipe.
    fn read_chunk(&mut self, job: JobId, stream: Stream) -> Result<(), WorkerError> {
        let Some(pipe) = self.jobs.get_mut(&job).and_then(|j| j.pipe(stream).as_mut()) else { return Ok(()) };
        match nix::unistd::read(pipe.fd.as_fd(), self.out.output_buf()) {
            Ok(0) => self.close_pipe(job, stream),
            Ok(n) => {
                // First thing after the read: the chunk's read time, as close to the bytes' arrival as
                // the worker can see it (two vDSO clock reads, no system call).
                let at = ReadTime::now();
                pipe.until_exit = pipe.until_exit.saturating_sub(n);
                self.out.push_output(job, stream, at, n)?;
                // Ring a parked front now, not after the next read finds the pipe empty: waking it
                // (often an idle vCPU) is the slow part of the hop, so it starts as early as possible.
                self.flush_wake();
                self.ready.push_back((job, stream));
            }
            Err(Errno::EAGAIN) => {
                pipe.queued = false;
                pipe.until_exit = 0;
            }
            Err(Errno::EINTR) => self.ready.push_front((job, stream)),
            // A PTY master reads EIO once every slave fd is closed: the terminal's end of file.
            Err(Errno::EIO) => self.close_pipe(job, stream),
            Err(e) => {
                self.out.emit(&job_warning(job, "reading the job's output failed; the stream is closed", &e))?;
                self.close_pipe(job, stream);
            }
        }
        self.settle(job)
    }

    /// Stop watching a pipe and close it.
    pub(crate) fn close_pipe(&mut self, job: JobId, stream: Stream) {
        if let Some(pipe) = self.jobs.get_mut(&job).and_then(|j| j.pipe(stream).take()) {
            let _ = self.poll.registry().deregister(&mut SourceFd(&pipe.fd.as_raw_fd()));
        }
    }
}
