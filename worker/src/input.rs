//! A job's stdin when the front feeds it: the PTY master of a terminal job (`StdinMode::Tty`) or the
//! write end of a pipe (`StdinMode::Pipe`).
//!
//! `Command::Input` bytes are queued in order and written without blocking the worker: what the job does
//! not take at once (a full terminal or pipe buffer) stays queued, and the fd is watched for writability
//! until the queue drains. Nothing is dropped or reordered; only a job that stopped reading for good (its
//! terminal or pipe has no reader any more) loses what is still queued, and a `Warning` says how much.

use crate::cgroup::CgroupOps;
use crate::event_loop::WorkerError;
use crate::job::Source;
use crate::Worker;
use mio::unix::SourceFd;
use mio::Interest;
use nix::errno::Errno;
use shm_proto::msg::{Event, JobId};
use std::collections::VecDeque;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

/// The terminal's end-of-file character (`VEOF`, Ctrl-D in the default line discipline).
const VEOF: u8 = 0x04;

/// The feeding end of one job's stdin.
pub(crate) struct Input {
    /// Non-blocking, close-on-exec: a dup of the PTY master, or the pipe's write end.
    pub fd: OwnedFd,
    pub tty: bool,
    pub pending: VecDeque<u8>,
    /// Close the pipe once `pending` drained (pipe mode).
    pub close_after: bool,
    /// The fd is registered for writability.
    pub watching: bool,
}

impl Input {
    pub(crate) fn new(fd: OwnedFd, tty: bool) -> Input {
        Input { fd, tty, pending: VecDeque::new(), close_after: false, watching: false }
    }
}

/// What became of one attempt to drain the queue.
enum Drain {
    Done,
    Blocked,
    Gone(Errno),
}

fn drain(input: &mut Input) -> Drain {
    while !input.pending.is_empty() {
        let (a, _) = input.pending.as_slices();
        match nix::unistd::write(input.fd.as_fd(), a) {
            Ok(n) => drop(input.pending.drain(..n)),
            Err(Errno::EINTR) => {}
            Err(Errno::EAGAIN) => return Drain::Blocked,
            Err(e) => return Drain::Gone(e),
        }
    }
    Drain::Done
}

impl<C: CgroupOps> Worker<C> {
    /// `Command::Input`: queue `data` (and the end of input) for the job's stdin and write what fits now.
    pub(crate) fn input(&mut self, job: JobId, data: Vec<u8>, eof: bool) -> Result<(), WorkerError> {
        let Some(input) = self.jobs.get_mut(&job).and_then(|j| j.input.as_mut()) else {
            let message = "input for a job whose stdin is not open (it was not started with a terminal or a \
                           stdin pipe, or its input was closed); the bytes were not delivered"
                .to_owned();
            return Ok(self.out.emit(&Event::Warning { job: Some(job), message })?);
        };
        input.pending.extend(data);
        if eof {
            if input.tty {
                input.pending.push_back(VEOF);
            } else {
                input.close_after = true;
            }
        }
        self.feed(job)
    }

    /// Write what the job's stdin takes now; watch for writability while something stays queued.
    pub(crate) fn feed(&mut self, job: JobId) -> Result<(), WorkerError> {
        let Some(j) = self.jobs.get_mut(&job) else { return Ok(()) };
        let serial = j.serial;
        let Some(input) = j.input.as_mut() else { return Ok(()) };
        let registry = self.poll.registry();
        match drain(input) {
            Drain::Done => {
                if input.watching {
                    input.watching = false;
                    let _ = registry.deregister(&mut SourceFd(&input.fd.as_raw_fd()));
                }
                if input.close_after {
                    self.close_input(job);
                }
                Ok(())
            }
            Drain::Blocked => {
                if !input.watching {
                    let token = Self::token(serial, Source::Stdin);
                    let fd = input.fd.as_raw_fd();
                    if registry.register(&mut SourceFd(&fd), token, Interest::WRITABLE).is_ok() {
                        input.watching = true;
                    }
                }
                Ok(())
            }
            Drain::Gone(e) => {
                let lost = input.pending.len();
                self.close_input(job);
                let message = format!(
                    "the job's stdin no longer has a reader ({e}); {lost} queued input bytes were not delivered"
                );
                Ok(self.out.emit(&Event::Warning { job: Some(job), message })?)
            }
        }
    }

    /// Stop feeding the job: deregister (a dup of the PTY master stays registered otherwise) and close.
    pub(crate) fn close_input(&mut self, job: JobId) {
        if let Some(input) = self.jobs.get_mut(&job).and_then(|j| j.input.take()) {
            if input.watching {
                let _ = self.poll.registry().deregister(&mut SourceFd(&input.fd.as_raw_fd()));
            }
        }
    }

    /// `Command::Resize`: the terminal job's new window size.
    pub(crate) fn resize(&mut self, job: JobId, rows: u16, cols: u16) -> Result<(), WorkerError> {
        let Some(input) = self.jobs.get(&job).and_then(|j| j.input.as_ref()).filter(|i| i.tty) else {
            let message = "resize of a job without a terminal (or one that ended); nothing changed".to_owned();
            return Ok(self.out.emit(&Event::Warning { job: Some(job), message })?);
        };
        if let Err(e) = crate::sys::set_winsize(input.fd.as_fd(), rows, cols) {
            let message = format!("resizing the job's terminal to {rows}x{cols} failed: {e}");
            self.out.emit(&Event::Warning { job: Some(job), message })?;
        }
        Ok(())
    }
}
