//! After a job's main process exits: survivors, the cgroup emptying, accounting and removal; and the
//! commands that look at a live job (`Probe`) or hand it away (`Forget`, after `keep`).
//!
//! Right after `Exited`, the job's `cgroup.events` is read: `populated 0` means empty, so its `cpu.stat`
//! is read (final: nothing can enter an empty job cgroup but through the worker) and the cgroup is given
//! up — kept, empty, for the session's next job, or removed beyond the pool's size — and `Emptied` goes
//! out at once. On `populated 1`: the worker adds an inotify watch on the file
//! (`IN_MODIFY`, the inotify fd sits in the worker's mio poll — nothing sleeps or polls), re-reads it
//! (a change between the read and the watch is not lost), and lists the survivors (`Survivors`: pid,
//! command line, age, CPU). When the file later says `populated 0` (the survivors ended, or a `Kill`
//! reached them), `Emptied` goes out and the cgroup is given up as above. The job entry is dropped once both
//! `StreamsClosed` and `Emptied` (or `Forgotten`) went out.
//!
//! Invariants: `Emptied` is sent once, only after `populated 0` was read, and only then is the job
//! called settled by the front. A kept job (`Forget`) is never reported emptied: its processes live on.

use crate::cgroup::CgroupOps;
use crate::event_loop::{job_warning, WorkerError};
use crate::job::unix_ns;
use crate::procinfo;
use crate::Worker;
use mio::unix::SourceFd;
use mio::{Interest, Token};
use shm_proto::msg::{Event, JobId, JobLiveness, JobUsage};
use std::os::fd::{AsFd, AsRawFd};

/// The poll token of the cgroup-events watch (job tokens count up from 2 and never reach it).
pub(crate) const WATCH_TOKEN: Token = Token(usize::MAX);

impl<C: CgroupOps> Worker<C> {
    /// Just before `Exited`: tell the front whether the OOM killer or the pids limit struck the job.
    pub(crate) fn report_limits(&mut self, job: JobId, signal: Option<i32>) -> Result<(), WorkerError> {
        let Some(j) = self.jobs.get(&job) else { return Ok(()) };
        let (oom_base, pids_base) = (j.oom_base, j.pids_base);
        // The killed process may be any of the job's (a pipeline's `tail`), so the main process's own
        // status says nothing. Pure v2: the job cgroup's own `oom_kill` counter answers exactly. Hybrid
        // hosts: the session's counter moving while the job ran (so concurrent jobs are all flagged).
        let _ = signal;
        let oom = match self.cgroups.oom_kills(job) {
            Some(kills) => kills > 0,
            None => self.counters.oom_kills().zip(oom_base).is_some_and(|(now, base)| now > base),
        };
        if oom {
            self.out.emit(&Event::OomKilled { job })?;
        }
        if let Some((now, base)) = self.counters.pids_failures().zip(pids_base) {
            if now > base {
                let limit = self.v1.pids_max().unwrap_or(0);
                self.out.emit(&Event::PidsLimited { job, limit, failures: now - base })?;
            }
        }
        self.report_network(job)
    }

    /// Right after `Exited`: settle at once, or watch the cgroup and list the survivors.
    pub(crate) fn after_exit(&mut self, job: JobId) -> Result<(), WorkerError> {
        let Some(j) = self.jobs.get_mut(&job) else { return Ok(()) };
        if j.kept {
            return self.finish_if_done(job);
        }
        if j.in_shell {
            // A command of the persistent shell has no cgroup of its own: it is settled once the shell reports
            // its end. What it left running in the background belongs to the shell, whose cgroup lives on.
            j.emptied_sent = true;
            let usage = JobUsage { cpu_usec: 0, procs_seen: j.procs_seen.max(1), memory_peak: None };
            self.out.emit(&Event::Emptied { job, at_unix_ns: unix_ns(), usage })?;
            return self.finish_if_done(job);
        }
        let killing = j.kill_requested;
        // The common case, an empty cgroup: one `cgroup.events` read says so, one `cpu.stat` read gives the
        // final accounting, and the cgroup goes back to the session's pool for the next job (both files
        // stay open in the pool, so each is one `pread`). Any other failure takes the careful path below.
        match self.cgroups.settle(job) {
            Ok(usage) => return self.emptied_with(job, usage, Ok(())),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {}
            Err(_) if !self.cgroups.populated(job).unwrap_or(false) => return self.emptied(job),
            Err(_) => {}
        }
        if let Err(e) = self.cgroups.watch(job) {
            self.out.emit(&job_warning(job, "cannot watch the job's cgroup.events; it settles on kill only", &e))?;
        }
        self.register_watch();
        if !self.cgroups.populated(job).unwrap_or(false) {
            return self.emptied(job);
        }
        if !killing {
            let procs = self.cgroups.members_stat(job).unwrap_or_default();
            if let Some(j) = self.jobs.get_mut(&job) {
                j.procs_seen = j.procs_seen.max(u32::try_from(procs.total()).unwrap_or(u32::MAX));
            }
            self.out.emit(&Event::Survivors { job, procs })?;
        }
        self.effects_invalidate();
        Ok(())
    }

    /// Put the watch fd in the poll once it exists.
    fn register_watch(&mut self) {
        if self.watch_registered {
            return;
        }
        if let Some(fd) = self.cgroups.watch_fd() {
            let raw = fd.as_raw_fd();
            if self.poll.registry().register(&mut SourceFd(&raw), WATCH_TOKEN, Interest::READABLE).is_ok() {
                self.watch_registered = true;
            }
        }
    }

    /// A watched `cgroup.events` changed: settle the jobs whose cgroup emptied.
    pub(crate) fn cgroups_changed(&mut self) -> Result<(), WorkerError> {
        for job in self.cgroups.changed() {
            let Some(j) = self.jobs.get(&job) else { continue };
            if j.exited_sent && !j.emptied_sent && !j.kept && !self.cgroups.populated(job).unwrap_or(false) {
                self.emptied(job)?;
            }
        }
        Ok(())
    }

    /// The cgroup is empty: read its accounting, give it up, send `Emptied`.
    fn emptied(&mut self, job: JobId) -> Result<(), WorkerError> {
        match self.cgroups.settle(job) {
            Ok(usage) => self.emptied_with(job, usage, Ok(())),
            Err(e) => {
                let cpu_usec = self.cgroups.cpu_usec(job).unwrap_or(0);
                let peak = self.cgroups.memory_peak(job);
                self.emptied_with(job, (cpu_usec, peak), Err(e))
            }
        }
    }

    /// Send `Emptied` with the accounting (`cpu.stat`, `memory.peak`) read before the cgroup's removal
    /// (`removed`: its outcome).
    fn emptied_with(
        &mut self,
        job: JobId,
        (cpu_usec, memory_peak): (u64, Option<u64>),
        removed: std::io::Result<()>,
    ) -> Result<(), WorkerError> {
        let Some(j) = self.jobs.get_mut(&job) else { return Ok(()) };
        j.emptied_sent = true;
        let killed = j.kill_requested;
        let usage = JobUsage { cpu_usec, procs_seen: j.procs_seen.max(1), memory_peak };
        if let Err(e) = removed {
            self.out.emit(&job_warning(job, "the job's empty cgroup could not be removed", &e))?;
        }
        if killed {
            self.report_strays(job)?;
        }
        self.out.emit(&Event::Emptied { job, at_unix_ns: unix_ns(), usage })?;
        self.finish_if_done(job)
    }

    /// After a kill emptied the job's cgroup: if anything is left in the session's cgroups outside every
    /// job (the session's own cgroup, the worker's, an emptied pooled one), say exactly what, so the
    /// kill's clean end is never claimed over processes still running next to it.
    fn report_strays(&mut self, job: JobId) -> Result<(), WorkerError> {
        let strays = self.cgroups.strays();
        if strays.is_empty() {
            return Ok(());
        }
        const LISTED: usize = 16;
        let mut listed: Vec<String> = strays
            .iter()
            .take(LISTED)
            .map(|(pid, at)| {
                let at = if at.is_empty() { "the session's own cgroup".to_owned() } else { format!("cgroup {at}") };
                format!("pid {pid} ({}) in {at}", procinfo::cmdline_cut(*pid))
            })
            .collect();
        if strays.len() > LISTED {
            listed.push(format!("{} more", strays.len() - LISTED));
        }
        let text = format!(
            "the job's cgroup is empty, but {} process(es) are left in this session's cgroups outside every job, \
             which heddle never placed there: {}; session.close kills them",
            strays.len(),
            listed.join(", ")
        );
        self.out.emit(&crate::emit::warning(Some(job), text))?;
        Ok(())
    }

    /// Drop the job once nothing more will be said about it.
    pub(crate) fn finish_if_done(&mut self, job: JobId) -> Result<(), WorkerError> {
        if self.jobs.get(&job).is_some_and(|j| j.closed_sent && (j.emptied_sent || j.kept)) {
            self.jobs.remove(&job);
        }
        Ok(())
    }

    /// `Forget`: the supervisor moved the job's processes out (keep). Stop watching its cgroup (now
    /// empty, so removed), keep reading its pipes and reaping its main process, report nothing more
    /// about its cgroup.
    pub(crate) fn forget(&mut self, job: JobId) -> Result<(), WorkerError> {
        if let Some(j) = self.jobs.get_mut(&job) {
            j.kept = true;
            let _ = self.cgroups.remove(job);
        }
        self.out.emit(&Event::Forgotten { job })?;
        self.finish_if_done(job)
    }

    /// `Probe`: the liveness of a running job; for an ended one with survivors, a fresh `Survivors` first.
    pub(crate) fn probe(&mut self, job: JobId, probe: u64) -> Result<(), WorkerError> {
        if self.jobs.get(&job).is_some_and(|j| j.exited_sent && !j.emptied_sent && !j.kept) {
            let procs = self.cgroups.members_stat(job).unwrap_or_default();
            if let Some(j) = self.jobs.get_mut(&job) {
                j.procs_seen = j.procs_seen.max(u32::try_from(procs.total()).unwrap_or(u32::MAX));
            }
            self.out.emit(&Event::Survivors { job, procs })?;
        }
        let liveness = self.liveness(job);
        if let (Some(l), Some(j)) = (&liveness, self.jobs.get_mut(&job)) {
            j.procs_seen = j.procs_seen.max(l.procs);
        }
        Ok(self.out.emit(&Event::Status { job, probe, liveness })?)
    }

    fn liveness(&mut self, job: JobId) -> Option<JobLiveness> {
        let j = self.jobs.get(&job)?;
        let main = j.pid;
        if j.kept || j.exited_sent {
            return None;
        }
        let mut pids = self.cgroups.pids(job).unwrap_or_default();
        if pids.is_empty() && j.child.is_some() {
            pids.push(main);
        }
        // A terminal job: the terminal's foreground process group is what the user would be looking at.
        let fg = j.input.as_ref().filter(|i| i.tty).and_then(|i| nix::unistd::tcgetpgrp(i.fd.as_fd()).ok());
        let in_fg: Vec<u32> = match fg {
            Some(g) => {
                pids.iter().copied().filter(|&p| procinfo::stat(p).is_some_and(|s| s.pgrp == g.as_raw())).collect()
            }
            None => Vec::new(),
        };
        let pid = pick(if in_fg.is_empty() { &pids } else { &in_fg }, main)?;
        let st = procinfo::stat(pid)?;
        let (wchan, syscall) = (procinfo::wchan(pid), procinfo::syscall(pid));
        // Polling counts as reading the terminal only with the terminal in non-canonical mode: readline,
        // prompt_toolkit, pagers and full-screen programs switch it so; curl, pip or ssh waiting on the
        // network in poll/select leave it canonical (they were said to be waiting for input).
        let raw_tty = j
            .input
            .as_ref()
            .filter(|i| i.tty)
            .and_then(|i| nix::sys::termios::tcgetattr(i.fd.as_fd()).ok())
            .is_some_and(|t| !t.local_flags.contains(nix::sys::termios::LocalFlags::ICANON));
        let tty_poll =
            !in_fg.is_empty() && raw_tty && matches!(syscall, Some(7 | 23 | 270 | 271)) && procinfo::stdin_is_tty(pid);
        Some(JobLiveness {
            cpu_usec: self.cgroups.cpu_usec(job).unwrap_or(0),
            procs: pids.len() as u32,
            pid,
            cmdline: procinfo::shown_cmdline(pid),
            state: st.state.to_string(),
            activity: match tty_poll {
                true => "blocked reading stdin/tty (polling its terminal)".to_owned(),
                false => procinfo::activity(st.state, &wchan, syscall, procinfo::reading_tty(pid)),
            },
            wchan,
        })
    }
}

/// The process whose state says most about the job: one on a CPU, else the newest one that is not just
/// waiting for a child (the shell usually is), else the main process.
fn pick(pids: &[u32], main: u32) -> Option<u32> {
    let stats: Vec<(u32, procinfo::Stat)> = pids.iter().filter_map(|&p| Some((p, procinfo::stat(p)?))).collect();
    if let Some((p, _)) = stats.iter().find(|(_, s)| s.state == 'R') {
        return Some(*p);
    }
    // `wait_woken` (a tty or socket read) is no wait for a child.
    let waiting = |p: u32| {
        let w = procinfo::wchan(p);
        matches!(procinfo::syscall(p), Some(61 | 247)) || w.contains("do_wait") || w.contains("wait4")
    };
    stats
        .iter()
        .filter(|(p, _)| !waiting(*p))
        .max_by_key(|(_, s)| s.start_ticks)
        .map(|(p, _)| *p)
        .or_else(|| stats.iter().any(|(p, _)| *p == main).then_some(main))
        .or_else(|| stats.first().map(|(p, _)| *p))
}
