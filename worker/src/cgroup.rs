//! Job cgroups inside the session's delegated subtree, behind the [`CgroupOps`] trait.
//!
//! [`SessionCgroup`] is the real thing: every path is resolved relative to an fd of the session directory
//! (`<session>/job-<N>/…`), so nothing outside the subtree is ever named. [`RecordingCgroups`] is the fake
//! for tests without root: it records each call and places no process anywhere.
//!
//! Invariant: no operation here signals a process that is not, at that moment, a member of the job's
//! cgroup. [`SessionCgroup::term_members`] pins each listed pid with a pidfd, re-reads the member list, and
//! signals only pidfds whose pid is still listed, so a pid reused by an unrelated process is never hit.
//!
//! ```no_run
//! use worker::cgroup::{CgroupOps, SessionCgroup};
//! let mut cg = SessionCgroup::open("/sys/fs/cgroup/unified/heddle/session-a".as_ref()).unwrap();
//! let dir = cg.create(7).unwrap(); // mkdir job-7, open it for CLONE_INTO_CGROUP
//! cg.kill(7).unwrap();             // write 1 to job-7/cgroup.kill
//! # drop(dir);
//! ```

use crate::sys;
use nix::fcntl::{openat, OFlag};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use nix::sys::stat::Mode;
use shm_proto::msg::{JobId, ProcStat};
use std::collections::{HashMap, HashSet};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The cgroup operations the worker performs on its jobs.
pub trait CgroupOps {
    /// Create the job's cgroup; returns the directory fd to start the job in (`None`: start it in the
    /// worker's own cgroup, as fakes do).
    fn create(&mut self, job: JobId) -> io::Result<Option<OwnedFd>>;
    /// Remove the job's cgroup (`EBUSY` while processes remain in it).
    fn remove(&mut self, job: JobId) -> io::Result<()>;
    /// SIGKILL every process of the job's cgroup (`cgroup.kill`).
    fn kill(&mut self, job: JobId) -> io::Result<()>;
    /// Freeze (`true`) or thaw the job's cgroup (`cgroup.freeze`).
    fn set_frozen(&mut self, job: JobId, frozen: bool) -> io::Result<()>;
    /// SIGTERM every process of the job's cgroup; returns how many were signalled.
    fn term_members(&mut self, job: JobId) -> io::Result<usize>;
    /// True while any process remains in the job's cgroup (`cgroup.events`: `populated 1`).
    fn populated(&mut self, job: JobId) -> io::Result<bool>;
    /// The job's cgroup as a path, for messages.
    fn job_path(&self, job: JobId) -> String;
    /// The fd that turns readable when a watched job's `cgroup.events` changes (`None`: nothing to
    /// watch, as with fakes).
    fn watch_fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }
    /// Watch the job's `cgroup.events` (inotify `IN_MODIFY`); the watch ends with the cgroup.
    fn watch(&mut self, _job: JobId) -> io::Result<()> {
        Ok(())
    }
    /// Drain the change notifications: the jobs whose `cgroup.events` changed.
    fn changed(&mut self) -> Vec<JobId> {
        Vec::new()
    }
    /// The pids in the job's cgroup now.
    fn pids(&mut self, _job: JobId) -> io::Result<Vec<u32>> {
        Ok(Vec::new())
    }
    /// `usage_usec` of the job's `cpu.stat`: CPU time of everything the job ran.
    fn cpu_usec(&mut self, _job: JobId) -> io::Result<u64> {
        Ok(0)
    }
    /// The job cgroup's `memory.peak`, where job cgroups have the memory controller (pure v2).
    fn memory_peak(&mut self, _job: JobId) -> Option<u64> {
        None
    }
    /// OOM kills inside the job's cgroup (`memory.events` `oom_kill`), where job cgroups have the memory
    /// controller (pure v2): the exact per-job answer, where hybrid hosts only have the session's counter.
    fn oom_kills(&mut self, _job: JobId) -> Option<u64> {
        None
    }
    /// The processes in the job's cgroup, with age and CPU time.
    fn members_stat(&mut self, job: JobId) -> io::Result<Vec<ProcStat>> {
        Ok(crate::procinfo::proc_stats(&self.pids(job)?))
    }
}

/// The session's delegated cgroup directory.
#[derive(Debug)]
pub struct SessionCgroup {
    dir: OwnedFd,
    path: PathBuf,
    /// Watches on jobs' `cgroup.events`, created on first use.
    inotify: Option<Inotify>,
    watches: HashMap<WatchDescriptor, JobId>,
    /// Job cgroups have `memory.peak` (the session enables `memory` for its children: pure v2).
    per_job_memory: bool,
}

fn job_name(job: JobId) -> String {
    if job == crate::persistent::SHELL_CGROUP {
        return "shell".to_owned();
    }
    format!("job-{job}")
}

impl SessionCgroup {
    /// Open the session cgroup directory `path`.
    pub fn open(path: &Path) -> io::Result<SessionCgroup> {
        let dir = nix::fcntl::open(path, OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC, Mode::empty())?;
        let control = std::fs::read_to_string(path.join("cgroup.subtree_control")).unwrap_or_default();
        let per_job_memory = control.split_whitespace().any(|c| c == "memory");
        Ok(SessionCgroup { dir, path: path.to_path_buf(), inotify: None, watches: HashMap::new(), per_job_memory })
    }

    /// The session directory's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn open_file(&self, job: JobId, file: &str, flags: OFlag) -> io::Result<std::fs::File> {
        let rel = format!("{}/{file}", job_name(job));
        Ok(openat(self.dir.as_fd(), rel.as_str(), flags | OFlag::O_CLOEXEC, Mode::empty())?.into())
    }

    fn write_file(&self, job: JobId, file: &str, value: &[u8]) -> io::Result<()> {
        self.open_file(job, file, OFlag::O_WRONLY)?.write_all(value)
    }

    /// Read a whole (small) cgroup file: open, `read` until end of file, close. Unlike
    /// `File::read_to_string`, no `statx` and `lseek` for a size hint (cgroup files report size 0 anyway):
    /// the `cpu.stat` read sits on every job's settle path.
    fn read_file(&self, job: JobId, file: &str) -> io::Result<String> {
        let mut f = self.open_file(job, file, OFlag::O_RDONLY)?;
        let mut buf = Vec::with_capacity(512);
        let mut chunk = [0u8; 4096];
        loop {
            match f.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        String::from_utf8(buf).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }

    fn members(&self, job: JobId) -> io::Result<Vec<u32>> {
        Ok(self.read_file(job, "cgroup.procs")?.lines().filter_map(|l| l.trim().parse().ok()).collect())
    }
}

impl CgroupOps for SessionCgroup {
    fn create(&mut self, job: JobId) -> io::Result<Option<OwnedFd>> {
        let name = job_name(job);
        nix::sys::stat::mkdirat(self.dir.as_fd(), name.as_str(), Mode::from_bits_truncate(0o755))?;
        let flags = OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC;
        match openat(self.dir.as_fd(), name.as_str(), flags, Mode::empty()) {
            Ok(fd) => Ok(Some(fd)),
            Err(e) => {
                let _ = self.remove(job);
                Err(e.into())
            }
        }
    }

    fn remove(&mut self, job: JobId) -> io::Result<()> {
        let name = job_name(job);
        nix::unistd::unlinkat(self.dir.as_fd(), name.as_str(), nix::unistd::UnlinkatFlags::RemoveDir)?;
        Ok(())
    }

    fn kill(&mut self, job: JobId) -> io::Result<()> {
        self.write_file(job, "cgroup.kill", b"1")
    }

    fn set_frozen(&mut self, job: JobId, frozen: bool) -> io::Result<()> {
        self.write_file(job, "cgroup.freeze", if frozen { b"1" } else { b"0" })
    }

    fn term_members(&mut self, job: JobId) -> io::Result<usize> {
        let pinned: Vec<(u32, OwnedFd)> =
            self.members(job)?.into_iter().filter_map(|pid| Some((pid, sys::pidfd_open(pid).ok()?))).collect();
        let still: HashSet<u32> = self.members(job)?.into_iter().collect();
        Ok(pinned
            .iter()
            .filter(|(pid, fd)| still.contains(pid) && sys::pidfd_signal(fd.as_fd(), libc::SIGTERM).is_ok())
            .count())
    }

    fn populated(&mut self, job: JobId) -> io::Result<bool> {
        Ok(parse_populated(&self.read_file(job, "cgroup.events")?))
    }

    fn job_path(&self, job: JobId) -> String {
        self.path.join(job_name(job)).to_string_lossy().into_owned()
    }

    fn watch_fd(&self) -> Option<BorrowedFd<'_>> {
        self.inotify.as_ref().map(AsFd::as_fd)
    }

    fn watch(&mut self, job: JobId) -> io::Result<()> {
        if self.inotify.is_none() {
            self.inotify = Some(Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?);
        }
        let path = self.path.join(job_name(job)).join("cgroup.events");
        let ino = self.inotify.as_ref().ok_or_else(|| io::Error::from_raw_os_error(libc::EBADF))?;
        let wd = ino.add_watch(&path, AddWatchFlags::IN_MODIFY)?;
        self.watches.insert(wd, job);
        Ok(())
    }

    fn changed(&mut self) -> Vec<JobId> {
        let Some(ino) = &self.inotify else { return Vec::new() };
        let mut jobs = Vec::new();
        while let Ok(events) = ino.read_events() {
            for ev in events {
                let job = if ev.mask.contains(AddWatchFlags::IN_IGNORED) {
                    self.watches.remove(&ev.wd)
                } else {
                    self.watches.get(&ev.wd).copied()
                };
                if let Some(job) = job.filter(|j| !jobs.contains(j)) {
                    jobs.push(job);
                }
            }
        }
        jobs
    }

    fn pids(&mut self, job: JobId) -> io::Result<Vec<u32>> {
        self.members(job)
    }

    fn cpu_usec(&mut self, job: JobId) -> io::Result<u64> {
        Ok(parse_usage_usec(&self.read_file(job, "cpu.stat")?).unwrap_or(0))
    }

    fn memory_peak(&mut self, job: JobId) -> Option<u64> {
        if !self.per_job_memory {
            return None;
        }
        self.read_file(job, "memory.peak").ok()?.trim().parse().ok()
    }

    fn oom_kills(&mut self, job: JobId) -> Option<u64> {
        if !self.per_job_memory {
            return None;
        }
        let text = self.read_file(job, "memory.events").ok()?;
        text.lines().find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok())
    }
}

/// `usage_usec` from the text of a `cpu.stat` file.
pub fn parse_usage_usec(text: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix("usage_usec ")?.trim().parse().ok())
}

/// `populated` from the text of a `cgroup.events` file (absent: not populated).
pub fn parse_populated(events: &str) -> bool {
    events.lines().any(|l| l.split_whitespace().eq(["populated", "1"]))
}

/// One call recorded by [`RecordingCgroups`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    Create(JobId),
    Remove(JobId),
    Kill(JobId),
    Freeze(JobId, bool),
    Term(JobId),
    Populated(JobId),
}

/// What a [`RecordingCgroups`] has seen and how it answers.
#[derive(Debug, Default)]
pub struct Recorded {
    pub calls: Vec<Call>,
    /// Answer of `populated` (default false).
    pub populated: bool,
    /// When set, `create` fails with this errno.
    pub fail_create: Option<i32>,
}

/// A fake [`CgroupOps`] that records calls; clones share one record.
#[derive(Clone, Debug, Default)]
pub struct RecordingCgroups(pub Arc<Mutex<Recorded>>);

impl RecordingCgroups {
    /// The calls seen so far.
    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Recorded> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn record(&self, c: Call) {
        self.lock().calls.push(c);
    }
}

impl CgroupOps for RecordingCgroups {
    fn create(&mut self, job: JobId) -> io::Result<Option<OwnedFd>> {
        self.record(Call::Create(job));
        match self.lock().fail_create {
            Some(errno) => Err(io::Error::from_raw_os_error(errno)),
            None => Ok(None),
        }
    }

    fn remove(&mut self, job: JobId) -> io::Result<()> {
        self.record(Call::Remove(job));
        // As the kernel does: a cgroup with processes in it cannot be removed.
        match self.lock().populated {
            true => Err(io::Error::from_raw_os_error(libc::EBUSY)),
            false => Ok(()),
        }
    }

    fn kill(&mut self, job: JobId) -> io::Result<()> {
        self.record(Call::Kill(job));
        Ok(())
    }

    fn set_frozen(&mut self, job: JobId, frozen: bool) -> io::Result<()> {
        self.record(Call::Freeze(job, frozen));
        Ok(())
    }

    fn term_members(&mut self, job: JobId) -> io::Result<usize> {
        self.record(Call::Term(job));
        Ok(0)
    }

    fn populated(&mut self, job: JobId) -> io::Result<bool> {
        self.record(Call::Populated(job));
        Ok(self.lock().populated)
    }

    fn job_path(&self, job: JobId) -> String {
        format!("/fake/{}", job_name(job))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_is_read_from_cpu_stat() {
        assert_eq!(parse_usage_usec("usage_usec 1234\nuser_usec 1000\n"), Some(1234));
        assert_eq!(parse_usage_usec("user_usec 1000\n"), None);
    }

    #[test]
    fn populated_is_read_from_cgroup_events() {
        assert!(parse_populated("populated 1\nfrozen 0\n"));
        assert!(!parse_populated("populated 0\nfrozen 0\n"));
        assert!(!parse_populated("frozen 1\n"));
        assert!(!parse_populated("populated 10\n"));
    }

    #[test]
    fn session_cgroup_paths_stay_inside_the_session_dir() {
        // A plain directory stands in for the cgroup: mkdir, open and rmdir work the same way.
        let tmp = std::env::temp_dir().join(format!("heddle-cgtest-{}", std::process::id()));
        std::fs::create_dir(&tmp).unwrap();
        let mut cg = SessionCgroup::open(&tmp).unwrap();
        assert!(cg.create(3).unwrap().is_some());
        assert!(tmp.join("job-3").is_dir());
        assert_eq!(cg.job_path(3), tmp.join("job-3").to_string_lossy());
        assert_eq!(cg.create(3).unwrap_err().raw_os_error(), Some(libc::EEXIST));
        std::fs::write(tmp.join("job-3/cgroup.events"), "populated 1\n").unwrap();
        assert!(cg.populated(3).unwrap());
        std::fs::write(tmp.join("job-3/cgroup.kill"), "").unwrap();
        cg.kill(3).unwrap();
        assert_eq!(std::fs::read_to_string(tmp.join("job-3/cgroup.kill")).unwrap(), "1");
        assert!(cg.kill(4).is_err(), "no such job cgroup");
        std::fs::remove_file(tmp.join("job-3/cgroup.events")).unwrap();
        std::fs::remove_file(tmp.join("job-3/cgroup.kill")).unwrap();
        cg.remove(3).unwrap();
        assert!(!tmp.join("job-3").exists());
        std::fs::remove_dir(&tmp).unwrap();
    }

    #[test]
    fn per_job_memory_counters_are_read_only_where_job_cgroups_have_the_memory_controller() {
        // Plain directories stand in for a pure-v2 session whose children have `memory` enabled.
        let tmp = tempfile::tempdir().unwrap();
        let (v2, hybrid) = (tmp.path().join("v2"), tmp.path().join("hybrid"));
        for d in [&v2, &hybrid] {
            std::fs::create_dir_all(d.join("job-1")).unwrap();
            std::fs::write(d.join("job-1/memory.peak"), "5242880\n").unwrap();
        }
        std::fs::write(v2.join("cgroup.subtree_control"), "memory pids\n").unwrap();
        std::fs::write(hybrid.join("cgroup.subtree_control"), "\n").unwrap();
        assert_eq!(SessionCgroup::open(&v2).unwrap().memory_peak(1), Some(5 << 20));
        assert_eq!(SessionCgroup::open(&hybrid).unwrap().memory_peak(1), None, "no file is read on hybrid hosts");
        assert_eq!(SessionCgroup::open(&v2).unwrap().memory_peak(2), None, "no such job");
        std::fs::write(v2.join("job-1/memory.events"), "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n").unwrap();
        std::fs::write(hybrid.join("job-1/memory.events"), "oom_kill 1\n").unwrap();
        assert_eq!(SessionCgroup::open(&v2).unwrap().oom_kills(1), Some(1));
        assert_eq!(SessionCgroup::open(&hybrid).unwrap().oom_kills(1), None);
    }

    #[test]
    fn recording_cgroups_share_their_record() {
        let fake = RecordingCgroups::default();
        let mut other = fake.clone();
        other.create(1).unwrap();
        other.kill(1).unwrap();
        assert_eq!(fake.calls(), [Call::Create(1), Call::Kill(1)]);
    }
}
