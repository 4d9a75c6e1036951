//! Network off, seen from the kernel: the session's seccomp filter sends every `socket`/`socketpair` of
//! a family other than `AF_UNIX` to the worker's listener ([`launcher::seccomp::network_notify`]), which
//! answers `EPERM` at once and counts the call against the job whose cgroup holds the caller (read from
//! `/proc/<pid>/cgroup`). Just before the job's `Exited` the count goes out as
//! [`Event::NetworkRefused`], and the front's result says the network is off for this session and how
//! to open one with it on — whatever the job printed (curl's "Could not resolve host", pip's retries).
//!
//! Cost: nothing for calls the filter allows (the stanza is five BPF instructions ahead of the
//! session's filter); a refused call waits for one pass of the worker's loop.

use crate::cgroup::CgroupOps;
use crate::event_loop::{Worker, WorkerError};
use mio::Token;
use shm_proto::msg::{Event, JobId};

/// The poll token of the listener (job tokens count up from 2 and never reach it).
pub(crate) const NET_TOKEN: Token = Token(usize::MAX - 2);

/// The refused socket calls of one job.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Refused {
    pub count: u32,
    /// The families asked for, in the order first seen (`AF_INET`, `AF_INET6`).
    pub families: Vec<String>,
}

impl<C: CgroupOps> Worker<C> {
    /// The listener is readable: answer every waiting call and count it against its job.
    pub(crate) fn network_refused(&mut self) {
        let Some(sb) = self.sandbox.clone() else { return };
        let Some(listener) = &sb.listener else { return };
        for call in listener.answer_pending() {
            let Some(job) = self.job_of_pid(call.pid) else { continue };
            if let Some(j) = self.jobs.get_mut(&job) {
                let r = j.net_refused.get_or_insert_with(Refused::default);
                r.count = r.count.saturating_add(1);
                let name = launcher::seccomp::family_name(call.family);
                if !r.families.contains(&name) && r.families.len() < 8 {
                    r.families.push(name);
                }
            }
        }
    }

    /// Just before `Exited`: the job's refused socket calls, if any.
    pub(crate) fn report_network(&mut self, job: JobId) -> Result<(), WorkerError> {
        if self.sandbox.as_ref().is_some_and(|s| s.listener.is_some()) {
            self.network_refused();
        }
        let Some(r) = self.jobs.get_mut(&job).and_then(|j| j.net_refused.take()) else { return Ok(()) };
        self.out.emit(&Event::NetworkRefused { job, count: r.count, families: r.families })?;
        Ok(())
    }

    /// The job whose cgroup holds `pid` (its cgroup or one beneath it).
    fn job_of_pid(&self, pid: u32) -> Option<JobId> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        let path = text.lines().find_map(|l| l.strip_prefix("0::"))?;
        let parts: Vec<&str> = path.split('/').collect();
        let live = self.jobs.iter().filter(|(_, j)| j.exit.is_none());
        let mut found = None;
        for (id, _) in live {
            let name = self.cgroups.cgroup_name(*id);
            if !name.is_empty() && parts.iter().any(|p| *p == name) {
                found = Some(*id);
            }
        }
        found
    }
}
