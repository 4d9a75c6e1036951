//! `Command::Kill` and `Command::Shutdown`: ending jobs through their cgroups, never by pid or name.
//!
//! - grace 0: write `1` to `job-<N>/cgroup.kill`.
//! - grace > 0: freeze the cgroup, SIGTERM each member (pidfd-pinned, see [`crate::cgroup`]), thaw, and
//!   register a deadline `grace_ms` later; at the deadline, if `cgroup.events` still says `populated 1`,
//!   `cgroup.kill`. Deadlines are the event loop's only timeout (no timer fd, no thread).
//! - Shutdown: `cgroup.kill` on every job's cgroup, then the worker exits.
//!
//! A `Kill` marks the job so its `Exited` says `killed: true` (when `Exited` has not gone out yet). A `Kill`
//! for a job the worker does not know (never started, or ended and cleaned up) does nothing: such races are
//! normal, and the front already knows the job's end.

use crate::cgroup::CgroupOps;
use crate::event_loop::{job_warning, WorkerError};
use crate::Worker;
use shm_proto::msg::JobId;
use std::cmp::Reverse;
use std::time::{Duration, Instant};

impl<C: CgroupOps> Worker<C> {
    /// Handle `Kill { job, grace_ms }`.
    pub(crate) fn kill_job(&mut self, job: JobId, grace_ms: u32) -> Result<(), WorkerError> {
        if self.drop_queued(job)? {
            return Ok(());
        }
        let Some(j) = self.jobs.get_mut(&job) else { return Ok(()) };
        if !j.exited_sent {
            j.kill_requested = true;
        }
        let cg = self.cgroup_of(job);
        if grace_ms == 0 {
            if let Err(e) = self.cgroups.kill(cg) {
                self.out.emit(&job_warning(job, "cgroup.kill failed", &e))?;
            }
            return Ok(());
        }
        if let Err(e) = self.terminate(cg) {
            // Could not deliver SIGTERM properly: do not leave the job frozen or half-signalled.
            self.out.emit(&job_warning(job, "SIGTERM to the job's processes failed; killing it instead", &e))?;
            let _ = self.cgroups.set_frozen(cg, false);
            if let Err(e) = self.cgroups.kill(cg) {
                self.out.emit(&job_warning(job, "cgroup.kill failed", &e))?;
            }
            return Ok(());
        }
        let at = Instant::now() + Duration::from_millis(u64::from(grace_ms));
        self.deadlines.push(Reverse((at, job)));
        Ok(())
    }

    /// Freeze, SIGTERM every member, thaw.
    fn terminate(&mut self, job: JobId) -> std::io::Result<()> {
        self.cgroups.set_frozen(job, true)?;
        let signalled = self.cgroups.term_members(job);
        let thawed = self.cgroups.set_frozen(job, false);
        signalled?;
        thawed
    }

    /// `cgroup.kill` the jobs whose grace period is over and that still have processes.
    pub(crate) fn fire_deadlines(&mut self) -> Result<(), WorkerError> {
        let now = Instant::now();
        while let Some(&Reverse((at, job))) = self.deadlines.peek() {
            if at > now {
                break;
            }
            self.deadlines.pop();
            if !self.jobs.contains_key(&job) {
                continue;
            }
            let cg = self.cgroup_of(job);
            match self.cgroups.populated(cg) {
                Ok(false) => {}
                Ok(true) => {
                    if let Err(e) = self.cgroups.kill(cg) {
                        self.out.emit(&job_warning(job, "cgroup.kill after the grace period failed", &e))?;
                    }
                }
                Err(e) => self.out.emit(&job_warning(job, "cannot read cgroup.events after the grace period", &e))?,
            }
        }
        Ok(())
    }

    /// `cgroup.kill` every job (Shutdown, or the worker is stopping on an error).
    pub(crate) fn kill_all(&mut self) {
        let jobs: Vec<JobId> = self.jobs.keys().copied().collect();
        for job in jobs {
            let cg = self.cgroup_of(job);
            let _ = self.cgroups.kill(cg);
        }
    }
}
