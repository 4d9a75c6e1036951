//! A running job's state, and its end: reaping, the exit barrier, end of streams, cgroup removal.
//!
//! The exit barrier: when the pidfd says the main process ended, the worker reaps it at once (no zombie)
//! and notes, per open pipe, how many bytes were already waiting (`FIONREAD`; a PTY master is read until
//! `EAGAIN`/`EIO` instead, its `FIONREAD` missing what waits in the flip buffers). `Exited` goes out only
//! after those bytes have been read and published (or the pipe hit `EAGAIN`/EOF), so every byte the
//! process wrote before exiting precedes `Exited` — even when a survivor keeps writing to the same pipe.
//! Pipes are then read until EOF (survivors may still write); `StreamsClosed` follows. The job's cgroup is
//! watched and removed once empty by [`crate::job_settle`] (a cgroup with survivors stays, and the job with
//! it, so `Kill` still works).

use crate::cgroup::CgroupOps;
use crate::event_loop::{job_warning, WorkerError};
use crate::Worker;
use launcher::{Child, Exit};
use mio::unix::SourceFd;
use shm_proto::msg::{Event, JobId, Stream};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

/// The poll sources of one job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    Stdout = 0,
    Stderr = 1,
    Pidfd = 2,
    /// The control socket of the persistent shell (the command's status line).
    Done = 3,
    /// The job's stdin, fed by `Command::Input` (watched for writability while input is queued).
    Stdin = 4,
}

/// Poll sources per job (the token stride).
pub(crate) const SOURCES: usize = 5;

impl Source {
    pub(crate) fn from_index(i: usize) -> Source {
        match i {
            0 => Source::Stdout,
            1 => Source::Stderr,
            2 => Source::Pidfd,
            3 => Source::Done,
            _ => Source::Stdin,
        }
    }

    pub(crate) fn of(stream: Stream) -> Source {
        match stream {
            Stream::Stdout => Source::Stdout,
            Stream::Stderr => Source::Stderr,
        }
    }
}

/// The read end of one of a job's output pipes (non-blocking, close-on-exec).
pub(crate) struct Pipe {
    pub fd: OwnedFd,
    /// In the ready queue already.
    pub queued: bool,
    /// After the main process was reaped: bytes still to read before `Exited` may go out.
    pub until_exit: usize,
}

impl Pipe {
    pub(crate) fn new(fd: OwnedFd) -> Pipe {
        Pipe { fd, queued: false, until_exit: 0 }
    }
}

/// One job of the session.
pub(crate) struct Job {
    /// Base of the job's poll tokens.
    pub serial: usize,
    pub pid: u32,
    /// The main process until it is reaped.
    pub child: Option<Child>,
    /// stdout and stderr read ends, `None` once at end of file.
    pub pipes: [Option<Pipe>; 2],
    /// How the main process ended (`None` inside: it could not be reaped) and when.
    pub exit: Option<(Option<Exit>, u64)>,
    pub exited_sent: bool,
    pub closed_sent: bool,
    /// A `Kill` for this job arrived before `Exited` went out.
    pub kill_requested: bool,
    /// The state pipe's read end, until the main process is reaped.
    pub state: Option<crate::state::StateFile>,
    /// `Emptied` went out: the cgroup was seen empty and removed.
    pub emptied_sent: bool,
    /// The job was kept (`Forget`): its processes left the session.
    pub kept: bool,
    /// The most processes seen in the job's cgroup at once.
    pub procs_seen: u32,
    /// The session's OOM-kill and pids-limit counters when the job started (hybrid hosts with limits).
    pub oom_base: Option<u64>,
    pub pids_base: Option<u64>,
    /// A command of the persistent shell: its hold on the live shell (`None` once the shell died).
    pub shell: Option<crate::persistent::ShellLink>,
    /// A command of the persistent shell (its cgroup is the shell's).
    pub in_shell: bool,
    /// When the job started (a pre-started shell waits for young jobs: see [`crate::spare`]).
    pub started: std::time::Instant,
    /// Its stdin when the front feeds it (a terminal job, or `StdinMode::Pipe`).
    pub input: Option<crate::input::Input>,
    /// Its socket calls the network-off filter refused ([`crate::network`]).
    pub net_refused: Option<crate::network::Refused>,
    /// The effects ledger's "before" (`None`: no ledger for this job).
    pub effects: Option<crate::effects::JobEffects>,
}

impl Job {
    pub(crate) fn pipe(&mut self, stream: Stream) -> &mut Option<Pipe> {
        &mut self.pipes[Source::of(stream) as usize]
    }
}

pub(crate) use shm_proto::sys::unix_ns;

impl<C: CgroupOps> Worker<C> {
    /// Queue a pipe for reading (edge-triggered readiness: it stays queued until it reads `EAGAIN`).
    pub(crate) fn mark_ready(&mut self, job: JobId, stream: Stream) {
        if let Some(p) = self.jobs.get_mut(&job).and_then(|j| j.pipe(stream).as_mut()) {
            if !p.queued {
                p.queued = true;
                self.ready.push_back((job, stream));
            }
        }
    }

    /// The largest capture that fits one event frame.
    pub(crate) fn state_limit(&self) -> usize {
        self.out.max_frame().saturating_sub(64)
    }

    /// The pidfd is readable: reap the main process and arm the exit barrier.
    pub(crate) fn reap(&mut self, job: JobId) -> Result<(), WorkerError> {
        let Some(j) = self.jobs.get_mut(&job) else { return Ok(()) };
        let Some(child) = &j.child else { return Ok(()) };
        let status = match child.try_wait() {
            Ok(None) => return Ok(()),
            Ok(Some(st)) => Some(st),
            Err(e) => {
                self.out.emit(&job_warning(job, "cannot reap the job's main process", &e))?;
                None
            }
        };
        let at = crate::job::unix_ns();
        let Some(j) = self.jobs.get_mut(&job) else { return Ok(()) };
        if let Some(child) = j.child.take() {
            let _ = self.poll.registry().deregister(&mut SourceFd(&child.pidfd.as_raw_fd()));
        }
        j.exit = Some((status, at));
        let in_shell = j.in_shell;
        if let Some(mut pipe) = j.state.take() {
            let limit = self.state_limit();
            pipe.read_capture(limit);
            let mut verdict = pipe.verdict(job, limit);
            if let (Event::StateUnknown { reason, .. }, true) = (&mut verdict, in_shell) {
                let how = status.map_or_else(|| "unknown status".to_owned(), |s| format!("{s:?}"));
                *reason = format!(
                    "the persistent shell ended ({how}); the next call starts a new shell from the last known state"
                );
            }
            self.out.emit(&verdict)?;
        }
        if in_shell {
            self.shell_died(job);
        }
        let Some(j) = self.jobs.get_mut(&job) else { return Ok(()) };
        for pipe in j.pipes.iter_mut().flatten() {
            // A PTY master's `FIONREAD` counts the line discipline's buffer (4 KiB) only: what a flood
            // left in the terminal's flip buffers is not in it. The master is read until it answers
            // EAGAIN (a read pushes those buffers first) or EIO (every slave closed, all read), so the
            // terminal `Exited` answers with has everything the job wrote before it ended.
            pipe.until_exit = match nix::unistd::isatty(pipe.fd.as_fd()) {
                Ok(true) => usize::MAX,
                _ => crate::sys::pipe_pending(pipe.fd.as_fd()).unwrap_or(usize::MAX),
            };
        }
        self.mark_ready(job, Stream::Stdout);
        self.mark_ready(job, Stream::Stderr);
        self.settle(job)
    }

    /// Send `Exited` and `StreamsClosed` when their conditions hold; clean up after both.
    pub(crate) fn settle(&mut self, job: JobId) -> Result<(), WorkerError> {
        let Some(j) = self.jobs.get_mut(&job) else { return Ok(()) };
        if let (Some((status, at_unix_ns)), false) = (j.exit, j.exited_sent) {
            if j.pipes.iter().flatten().all(|p| p.until_exit == 0) {
                j.exited_sent = true;
                let (code, signal) = (status.and_then(Exit::code), status.and_then(Exit::signal));
                let killed = j.kill_requested;
                self.report_limits(job, signal)?;
                if signal == Some(libc::SIGKILL) {
                    // Maybe a `cgroup.kill` from outside the worker: such a cgroup must not be reused.
                    self.cgroups.retire(job);
                }
                self.effects_after(job)?;
                self.out.emit(&Event::Exited { job, code, signal, at_unix_ns, killed })?;
                self.after_exit(job)?;
            }
        }
        let Some(j) = self.jobs.get_mut(&job) else { return Ok(()) };
        if j.exited_sent && j.shell.is_some() {
            return self.release_shell(job);
        }
        if j.exited_sent && !j.closed_sent && j.pipes.iter().all(Option::is_none) {
            j.closed_sent = true;
            let (serial, in_shell) = (j.serial, j.in_shell);
            self.out.emit(&Event::StreamsClosed { job })?;
            self.close_input(job);
            self.serials.remove(&serial);
            if in_shell {
                // The persistent shell died (its pipes closed): its cgroup was killed and is removed here.
                let _ = self.cgroups.remove(crate::persistent::SHELL_CGROUP);
                self.jobs.remove(&job);
                self.next_in_shell(job)?;
            } else {
                self.finish_if_done(job)?;
            }
        }
        Ok(())
    }
}
