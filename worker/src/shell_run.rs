//! Commands of the persistent shell (see [`crate::persistent`]): queueing, (re)starting the shell,
//! feeding a command, its status line, and handing the shell back when the command is over.
//!
//! One command runs at a time; a `Run` that arrives while one runs waits in the worker's queue, in order.
//! A `Kill` of a queued command removes it from the queue and reports it `SpawnFailed` (it never ran).

use crate::cgroup::CgroupOps;
use crate::emit::{error_chain, truncate};
use crate::event_loop::WorkerError;
use crate::job::{unix_ns, Job, Source};
use crate::job_run::StartError;
use crate::persistent::{Shell, LOOP, SHELL_CGROUP, SHELL_SOURCES};
use crate::state::STATE_FD;
use crate::Worker;
use launcher::{Exit, Prepared, Stdio};
use mio::unix::SourceFd;
use mio::Interest;
use shm_proto::msg::{Event, JobId, RunSpec};
use std::ffi::OsStr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

impl<C: CgroupOps> Worker<C> {
    /// `Run` of a persistent session: run now, or queue behind the running command.
    pub(crate) fn run_in_shell(&mut self, spec: RunSpec) -> Result<(), WorkerError> {
        if self.persistent.active.is_some() || self.jobs.contains_key(&spec.job) {
            self.persistent.queue.push_back(spec);
            return Ok(());
        }
        let job = spec.job;
        match self.start_in_shell(&spec) {
            Ok(pid) => {
                self.persistent.active = Some(job);
                self.out.emit_quiet(&Event::Started {
                    job,
                    pid,
                    at_unix_ns: unix_ns(),
                    prestarted: false,
                    cgroup: String::new(),
                })?;
            }
            Err(err) => self.out.emit(&Event::SpawnFailed { job, error: truncate(error_chain(&err)) })?,
        }
        Ok(())
    }

    /// The cgroup a job's processes live in.
    pub(crate) fn cgroup_of(&self, job: JobId) -> JobId {
        if self.jobs.get(&job).is_some_and(|j| j.in_shell) {
            SHELL_CGROUP
        } else {
            job
        }
    }

    /// A `Kill` of a command still waiting its turn: it leaves the queue and never runs.
    pub(crate) fn drop_queued(&mut self, job: JobId) -> Result<bool, WorkerError> {
        let Some(i) = self.persistent.queue.iter().position(|s| s.job == job) else { return Ok(false) };
        self.persistent.queue.remove(i);
        let error = "killed while waiting for its turn in the persistent shell; it never ran".to_owned();
        self.out.emit(&Event::SpawnFailed { job, error })?;
        Ok(true)
    }

    /// Feed the command to the live shell (starting one if needed) and register the job's sources.
    fn start_in_shell(&mut self, spec: &RunSpec) -> Result<u32, StartError> {
        let mut idle = self.persistent.idle.take();
        if let Some(sh) = &idle {
            if !matches!(sh.child.try_wait(), Ok(None)) {
                let _ = self.cgroups.kill(SHELL_CGROUP);
                idle = None; // died between commands (e.g. a background `kill $$`): start afresh
            }
        }
        let (shell, restore) = match idle {
            Some(sh) => (sh, &[][..]),
            None => {
                self.persistent.scoped_ok = false;
                (self.spawn_shell(spec)?, spec.state.as_deref().unwrap_or_default())
            }
        };
        let scope = match self.persistent.scoped_ok {
            true => crate::state::scope_line(spec.capture_only.as_deref()),
            false => String::new(),
        };
        let block = [restore, b"\0", spec.cmd.as_bytes(), b"\0", scope.as_bytes(), b"\0"].concat();
        if spec.cmd.contains('\0') {
            return Err(StartError::Prepare(launcher::PrepareError::Nul { what: "the command" }));
        }
        // The memfd is empty and its shared offset at 0 (a fresh shell's, or `StateFile::rewind` after the
        // last command): the blocks go at its start, the loop's capture right behind them.
        let capture_at = crate::state::write_restore(&shell.state, &block).map_err(StartError::Pipes)?;
        write_doorbell(&shell.ctl).map_err(StartError::Pipes)?;
        let serial = self.next_serial;
        self.next_serial += 1;
        let job = Job::in_shell(serial, shell, capture_at);
        let pid = job.pid;
        for source in SHELL_SOURCES {
            let fd = shell_fd(&job, source).expect("a fresh shell job has every source");
            let token = Self::token(serial, source);
            self.poll
                .registry()
                .register(&mut SourceFd(&fd), token, Interest::READABLE)
                .map_err(StartError::Register)?;
        }
        self.serials.insert(serial, spec.job);
        self.jobs.insert(spec.job, job);
        Ok(pid)
    }

    /// Start `bash --noprofile --norc -c LOOP bash` in the shell's cgroup.
    fn spawn_shell(&mut self, spec: &RunSpec) -> Result<Shell, StartError> {
        let cgroup = match self.cgroups.create(SHELL_CGROUP) {
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                // The last shell's cgroup: killed a moment ago (`kill` of its command), its processes
                // may not be reaped yet, and a populated cgroup cannot be removed. Kill it again and wait,
                // bounded, for the kernel to empty it.
                let _ = self.cgroups.kill(SHELL_CGROUP);
                let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
                while self.cgroups.populated(SHELL_CGROUP).unwrap_or(false) && std::time::Instant::now() < until {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                let _ = self.cgroups.remove(SHELL_CGROUP);
                self.cgroups.create(SHELL_CGROUP)
            }
            other => other,
        };
        let cgroup =
            cgroup.map_err(|source| StartError::Cgroup { path: self.cgroups.job_path(SHELL_CGROUP), source })?;
        let (ctl, theirs) = nix::sys::socket::socketpair(
            nix::sys::socket::AddressFamily::Unix,
            nix::sys::socket::SockType::Stream,
            None,
            nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        )
        .map_err(|e| StartError::Pipes(e.into()))?;
        let (out_r, out_w) = crate::state::nonblocking_pipe().map_err(StartError::Pipes)?;
        let (err_r, err_w) = crate::state::nonblocking_pipe().map_err(StartError::Pipes)?;
        let state = crate::state::state_memfd().map_err(StartError::Pipes)?;
        let state_w = state.try_clone().map_err(StartError::Pipes)?;
        let stdio = Stdio { stdin: theirs, stdout: out_w, stderr: err_w };
        let env = launcher::job_env(&self.base_env, &spec.env);
        let cwd = Path::new(OsStr::from_bytes(&spec.cwd));
        let argv = [&b"bash"[..], b"--noprofile", b"--norc", b"-c", LOOP.as_bytes(), b"bash"].map(OsStr::from_bytes);
        let mut prepared = Prepared::new(Path::new(launcher::BASH), &argv, &env, Some(cwd), stdio)?
            .with_extra_fd(state_w, STATE_FD)?;
        if let Some(dir) = cgroup {
            prepared = prepared.with_cgroup(dir);
        }
        if let Some(prog) = self.sandbox.as_ref().and_then(|s| s.job_seccomp()) {
            prepared = prepared.with_seccomp(prog);
        }
        let child = launcher::spawn(&prepared)?;
        drop(prepared);
        Ok(Shell { child, ctl, out: out_r, err: err_r, state })
    }

    /// The control socket is readable: the command's status line, once complete, ends the command.
    pub(crate) fn shell_status(&mut self, job: JobId) -> Result<(), WorkerError> {
        let Some(j) = self.jobs.get_mut(&job) else { return Ok(()) };
        let Some(link) = j.shell.as_mut() else { return Ok(()) };
        let mut buf = [0u8; 64];
        match nix::unistd::read(link.ctl.as_fd(), &mut buf) {
            Ok(n) if n > 0 => link.line.extend_from_slice(&buf[..n]),
            _ => return Ok(()), // EOF or error: the shell died; its pidfd reports it
        }
        let Some(end) = link.line.iter().position(|b| *b == b'\n') else { return Ok(()) };
        let code = std::str::from_utf8(&link.line[..end]).ok().and_then(|s| s.parse::<i32>().ok()).unwrap_or(-1);
        let Some(child) = &j.child else { return Ok(()) };
        let _ = self.poll.registry().deregister(&mut SourceFd(&child.pidfd.as_raw_fd()));
        j.exit = Some((Some(Exit::Code(code)), unix_ns()));
        if let Some(pipe) = j.state.as_mut() {
            let limit = self.out.max_frame().saturating_sub(64);
            pipe.read_capture(limit);
            let traps = crate::persistent::split_traps(&mut pipe.buf);
            let verdict = pipe.verdict(job, limit);
            self.persistent.scoped_ok = !traps && matches!(verdict, Event::StateCaptured { .. });
            if let Err(e) = pipe.rewind() {
                // The next capture would follow this one in the memfd and be read as garbage: end the shell
                // instead (the next command starts a new one from the record).
                let _ = self.cgroups.kill(SHELL_CGROUP);
                self.out.emit(&crate::event_loop::job_warning(
                    job,
                    "cannot reset the persistent shell's state memfd",
                    &e,
                ))?;
            }
            self.out.emit(&verdict)?;
        }
        let Some(j) = self.jobs.get_mut(&job) else { return Ok(()) };
        for pipe in j.pipes.iter_mut().flatten() {
            pipe.until_exit = crate::sys::pipe_pending(pipe.fd.as_fd()).unwrap_or(0);
        }
        self.mark_ready(job, shm_proto::msg::Stream::Stdout);
        self.mark_ready(job, shm_proto::msg::Stream::Stderr);
        self.settle(job)
    }

    /// The shell died during the command: end its cgroup (background jobs included) so the pipes close.
    pub(crate) fn shell_died(&mut self, job: JobId) {
        let Some(j) = self.jobs.get_mut(&job) else { return };
        if let Some(link) = j.shell.take() {
            let _ = self.poll.registry().deregister(&mut SourceFd(&link.ctl.as_raw_fd()));
        }
        let _ = self.cgroups.kill(SHELL_CGROUP);
    }

    /// After `Exited` of a command whose shell lives: take the shell back, `StreamsClosed`, next command.
    pub(crate) fn release_shell(&mut self, job: JobId) -> Result<(), WorkerError> {
        let Some(mut j) = self.jobs.remove(&job) else { return Ok(()) };
        let registry = self.poll.registry();
        for source in SHELL_SOURCES {
            if let Some(fd) = shell_fd(&j, source) {
                let _ = registry.deregister(&mut SourceFd(&fd));
            }
        }
        self.serials.remove(&j.serial);
        let parts = (j.child.take(), j.shell.take(), j.pipes[0].take(), j.pipes[1].take(), j.state.take());
        if let (Some(child), Some(link), Some(out), Some(err), Some(state)) = parts {
            self.persistent.idle = Some(Shell { child, ctl: link.ctl, out: out.fd, err: err.fd, state: state.fd });
        } else {
            let _ = self.cgroups.kill(SHELL_CGROUP);
        }
        self.out.emit(&Event::StreamsClosed { job })?;
        self.next_in_shell(job)
    }

    /// The command `job` is over: start the next queued one.
    pub(crate) fn next_in_shell(&mut self, job: JobId) -> Result<(), WorkerError> {
        if self.persistent.active == Some(job) {
            self.persistent.active = None;
        }
        if self.persistent.active.is_none() {
            if let Some(spec) = self.persistent.queue.pop_front() {
                return self.run_in_shell(spec);
            }
        }
        Ok(())
    }
}

/// Wake the idle shell: its command waits in the state memfd.
fn write_doorbell(ctl: &OwnedFd) -> std::io::Result<()> {
    loop {
        match nix::unistd::write(ctl, b"\n") {
            Ok(1) => return Ok(()),
            Ok(_) => return Err(std::io::Error::from(std::io::ErrorKind::WriteZero)),
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// The raw fd of one source of a shell command's job, while it has it.
fn shell_fd(j: &Job, source: Source) -> Option<i32> {
    let fd: Option<&OwnedFd> = match source {
        Source::Stdout => j.pipes[0].as_ref().map(|p| &p.fd),
        Source::Stderr => j.pipes[1].as_ref().map(|p| &p.fd),
        Source::Pidfd => j.child.as_ref().map(|c| &c.pidfd),
        Source::Done => j.shell.as_ref().map(|l| &l.ctl),
        Source::Stdin => j.input.as_ref().map(|i| &i.fd),
    };
    fd.map(|f| f.as_raw_fd())
}
