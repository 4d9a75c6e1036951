//! Job cgroups inside the session's delegated subtree, behind the [`CgroupOps`] trait.
//!
//! [`SessionCgroup`] is the real thing: every path is resolved relative to an fd of the session directory
//! or of a job cgroup in it (`<session>/slot-<K>/…`), so nothing outside the subtree is ever named. A job
//! cgroup holds one job at a time and, once empty, waits in a small pool for a later job (no `mkdir` and
//! `rmdir` per job; docs/cgroups.md, "Reuse"). [`RecordingCgroups`] is the fake for tests without root: it
//! records each call and places no process anywhere.
//!
//! Invariant: a job cgroup is handed to another job only after `populated 0` was read following its job's
//! end, never after a `cgroup.kill` or a SIGKILLed job, never while frozen.
//!
//! Invariant: no operation here signals a process that is not, at that moment, a member of the job's
//! cgroup. [`SessionCgroup::term_members`] pins each listed pid with a pidfd, re-reads the member list, and
//! signals only pidfds whose pid is still listed, so a pid reused by an unrelated process is never hit.
//!
//! ```no_run
//! use worker::cgroup::{CgroupOps, SessionCgroup};
//! let mut cg = SessionCgroup::open("/sys/fs/cgroup/unified/heddle/session-a".as_ref()).unwrap();
//! let dir = cg.create(7).unwrap(); // a pooled cgroup, or mkdir slot-<K>; opened for CLONE_INTO_CGROUP
//! cg.kill(7).unwrap();             // write 1 to its cgroup.kill (it is never reused then)
//! # drop(dir);
//! ```

use crate::sys;
use nix::fcntl::{openat, OFlag};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use nix::sys::stat::Mode;
use shm_proto::msg::{JobId, ProcStat, JOB_CGROUP_PREFIX, JOB_CGROUP_XATTR as JOB_XATTR};
use shm_proto::procs::ProcList;
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
    /// Give up the job's cgroup (`EBUSY` while processes remain in it): removed, or kept empty for a
    /// later job.
    fn remove(&mut self, job: JobId) -> io::Result<()>;
    /// If the job's cgroup is empty: its final accounting (`cpu.stat` usage, `memory.peak`), and the
    /// cgroup given up as by [`CgroupOps::remove`]. `EBUSY` while processes remain in it.
    fn settle(&mut self, job: JobId) -> io::Result<(u64, Option<u64>)> {
        let cpu = self.cpu_usec(job).unwrap_or(0);
        let peak = self.memory_peak(job);
        self.remove(job).map(|()| (cpu, peak))
    }
    /// The job's cgroup, relative to the session's directory (for `Started`).
    fn cgroup_name(&self, job: JobId) -> String {
        job_name(job)
    }
    /// Never hand the job's cgroup to a later job: remove it once empty (its main process was SIGKILLed,
    /// perhaps by a `cgroup.kill` from outside the worker, which would kill every later job in it).
    fn retire(&mut self, _job: JobId) {}
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
    /// The processes in the job's cgroup, with age and CPU time: the first
    /// [`shm_proto::procs::MAX_LISTED`] read, the rest only counted (a fork bomb's thousands are not
    /// read one by one).
    fn members_stat(&mut self, job: JobId) -> io::Result<ProcList<ProcStat>> {
        let pids = self.pids(job)?;
        let read = pids.len().min(shm_proto::procs::MAX_LISTED);
        Ok(ProcList::with_unread(crate::procinfo::proc_stats(&pids[..read]), pids.len() - read))
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
    /// The cgroup of each job that has one now.
    slots: HashMap<JobId, Slot>,
    /// Empty job cgroups waiting for the next job (most recently emptied last).
    free: Vec<Slot>,
    /// The number in the next new cgroup's name (`slot-<N>`).
    next_slot: u64,
    /// At most this many empty cgroups wait in `free`; the rest are removed (0: every job gets a new one).
    pool: usize,
    /// Cgroups whose job id was needed again while processes remained in them (a killed spare still
    /// dying): removed once empty, never reused.
    dying: Vec<Slot>,
}

/// How many emptied job cgroups a session keeps for its next jobs. One serves a session whose jobs run
/// one after the other (or a job and the pre-started shell for the next); a few more cover short bursts of
/// concurrent jobs. Beyond it, an emptied cgroup is removed.
pub const POOL: usize = 4;

/// What is known of a job cgroup being given up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Emptiness {
    /// `populated 0` was read.
    Empty,
    /// `populated 0` was read, then `cpu.stat` gave this usage.
    Read(u64),
    /// `cgroup.events` could not be read: only the kernel's `rmdir` may tell, so the cgroup is removed.
    Unknown,
}

/// A job cgroup directory: made once, then reused by later jobs while it is empty.
#[derive(Debug)]
struct Slot {
    /// `slot-<N>` (or `shell`), relative to the session directory.
    name: String,
    dir: OwnedFd,
    /// `cgroup.events`, `cpu.stat` and `cgroup.freeze`, opened on first use and kept: a reused cgroup's
    /// emptiness and accounting are one `pread` each.
    events: Option<std::fs::File>,
    cpu: Option<std::fs::File>,
    freeze: Option<std::fs::File>,
    /// `usage_usec` when the current job got the cgroup: a job's CPU time is the difference.
    cpu_base: u64,
    /// Frozen by the worker and not thawed since.
    frozen: bool,
    /// `cgroup.kill` was written to it. Never reused then: on this kernel (6.18) every process later
    /// placed into it by `CLONE_INTO_CGROUP` is killed at once (docs/cgroups.md, "Reuse"; the worker's
    /// tests show it).
    killed: bool,
    wd: Option<WatchDescriptor>,
}

fn job_name(job: JobId) -> String {
    if job == crate::persistent::SHELL_CGROUP {
        return "shell".to_owned();
    }
    format!("job-{job}")
}

/// Read a whole (small) cgroup file from its start, with `pread` (no seek, no size hint: cgroup files
/// report size 0). A read shorter than the buffer is the end: these files (`cgroup.events`, `cpu.stat`,
/// `cgroup.freeze`) are made whole by one kernel `show` call, so no second read is needed to see end of
/// file — one system call per read on the job's settle path.
pub(crate) fn pread_all(f: &std::fs::File) -> io::Result<String> {
    use std::os::unix::fs::FileExt;
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 4096];
    loop {
        match f.read_at(&mut chunk, buf.len() as u64) {
            Ok(0) => break,
            Ok(n) if n < chunk.len() => {
                buf.extend_from_slice(&chunk[..n]);
                break;
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    String::from_utf8(buf).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

impl Slot {
    fn file<'a>(dir: &OwnedFd, cached: &'a mut Option<std::fs::File>, name: &str) -> io::Result<&'a std::fs::File> {
        if cached.is_none() {
            let fd = openat(dir.as_fd(), name, OFlag::O_RDONLY | OFlag::O_CLOEXEC, Mode::empty())?;
            *cached = Some(fd.into());
        }
        cached.as_ref().ok_or_else(|| io::Error::from_raw_os_error(libc::EBADF))
    }

    fn populated(&mut self) -> io::Result<bool> {
        Ok(parse_populated(&pread_all(Self::file(&self.dir, &mut self.events, "cgroup.events")?)?))
    }

    /// `usage_usec` of the cgroup, since it was made.
    fn usage(&mut self) -> io::Result<u64> {
        Ok(parse_usage_usec(&pread_all(Self::file(&self.dir, &mut self.cpu, "cpu.stat")?)?).unwrap_or(0))
    }

    /// True when someone froze the cgroup (the supervisor, keeping the job that had it).
    fn freeze_requested(&mut self) -> bool {
        Self::file(&self.dir, &mut self.freeze, "cgroup.freeze").and_then(pread_all).map_or(true, |t| t.trim() != "0")
    }

    /// Name the cgroup's job in [`JOB_XATTR`] (what `keep` checks).
    fn label(&self, job: JobId) -> io::Result<()> {
        sys::fsetxattr(self.dir.as_fd(), JOB_XATTR, job.to_string().as_bytes())
    }
}

impl SessionCgroup {
    /// Open the session cgroup directory `path`.
    pub fn open(path: &Path) -> io::Result<SessionCgroup> {
        let dir = nix::fcntl::open(path, OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC, Mode::empty())?;
        let control = std::fs::read_to_string(path.join("cgroup.subtree_control")).unwrap_or_default();
        let per_job_memory = control.split_whitespace().any(|c| c == "memory");
        // With the memory controller on job cgroups, `memory.peak` and `memory.events` would carry a
        // previous job's figures: every job gets a new cgroup there.
        let pool = if per_job_memory { 0 } else { POOL };
        Ok(SessionCgroup {
            dir,
            path: path.to_path_buf(),
            inotify: None,
            watches: HashMap::new(),
            per_job_memory,
            slots: HashMap::new(),
            free: Vec::new(),
            next_slot: 1,
            pool,
            dying: Vec::new(),
        })
    }

    /// Keep at most `n` emptied job cgroups for later jobs (0: a new cgroup for every job).
    pub fn with_pool(mut self, n: usize) -> SessionCgroup {
        self.pool = n;
        self
    }

    /// The session directory's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The job's cgroup name, relative to the session directory.
    fn name_of(&self, job: JobId) -> String {
        self.slots.get(&job).map_or_else(|| job_name(job), |s| s.name.clone())
    }

    fn open_file(&self, job: JobId, file: &str, flags: OFlag) -> io::Result<std::fs::File> {
        let flags = flags | OFlag::O_CLOEXEC;
        let fd = match self.slots.get(&job) {
            Some(slot) => openat(slot.dir.as_fd(), file, flags, Mode::empty())?,
            None => openat(self.dir.as_fd(), format!("{}/{file}", job_name(job)).as_str(), flags, Mode::empty())?,
        };
        Ok(fd.into())
    }

    fn write_file(&self, job: JobId, file: &str, value: &[u8]) -> io::Result<()> {
        self.open_file(job, file, OFlag::O_WRONLY)?.write_all(value)
    }

    /// Read a whole (small) cgroup file: open, `read` until end of file, close. Unlike
    /// `File::read_to_string`, no `statx` and `lseek` for a size hint (cgroup files report size 0 anyway).
    fn read_file(&self, job: JobId, file: &str) -> io::Result<String> {
        // Until end of file: a multi-record file (`cgroup.procs`) may return a short read before its end.
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

    /// An emptied cgroup from the pool for `job`, unless the supervisor froze it meanwhile (a `keep` of
    /// its previous job in progress) or it cannot be labelled (a stale label would let a `keep` of the
    /// previous job move this one): such a one is removed instead.
    fn reuse(&mut self, job: JobId) -> Option<OwnedFd> {
        while let Some(mut slot) = self.free.pop() {
            // Label first, then look at the freezer: a `keep` that froze the cgroup after this read finds
            // the new label and refuses, one that froze it before is seen here.
            let usable = slot.label(job).is_ok() && !slot.freeze_requested();
            match slot.dir.try_clone() {
                Ok(dir) if usable => {
                    self.slots.insert(job, slot);
                    return Some(dir);
                }
                _ => {
                    let _ = self.unlink(&slot.name);
                }
            }
        }
        None
    }

    /// Remove the cgroups given up while processes were still in them (killed spares), once empty.
    fn bury(&mut self) {
        let dying = std::mem::take(&mut self.dying);
        for slot in dying {
            if self.unlink(&slot.name).is_err() {
                self.dying.push(slot);
            }
        }
    }

    fn unlink(&self, name: &str) -> io::Result<()> {
        nix::unistd::unlinkat(self.dir.as_fd(), name, nix::unistd::UnlinkatFlags::RemoveDir)?;
        Ok(())
    }

    /// The job no longer has its cgroup: keep it for a later job if it is known to be empty, or remove it.
    fn release(&mut self, job: JobId, mut slot: Slot, empty: Emptiness) -> io::Result<()> {
        if let (Some(wd), Some(ino)) = (slot.wd.take(), self.inotify.as_ref()) {
            let _ = ino.rm_watch(wd);
            self.watches.remove(&wd);
        }
        let reusable = job != crate::persistent::SHELL_CGROUP
            && !slot.frozen
            && !slot.killed
            && self.free.len() < self.pool
            && empty != Emptiness::Unknown;
        if reusable {
            let base = match empty {
                Emptiness::Read(usage) => Some(usage),
                _ => slot.usage().ok(),
            };
            if let Some(base) = base {
                slot.cpu_base = base;
                self.free.push(slot);
                return Ok(());
            }
        }
        match self.unlink(&slot.name) {
            Ok(()) => Ok(()),
            Err(e) => {
                self.slots.insert(job, slot);
                Err(e)
            }
        }
    }

    /// Remove the emptied cgroups kept for later jobs (the bench; a worker's pool goes with its session's
    /// subtree, which the supervisor removes).
    pub fn drain_pool(&mut self) {
        for slot in std::mem::take(&mut self.free) {
            let _ = self.unlink(&slot.name);
        }
    }
}

impl CgroupOps for SessionCgroup {
    fn create(&mut self, job: JobId) -> io::Result<Option<OwnedFd>> {
        if !self.dying.is_empty() {
            self.bury();
        }
        if let Some(mut old) = self.slots.remove(&job) {
            // The id's earlier cgroup (a spare for this id, killed and not yet empty): never reused.
            old.killed = true;
            if self.unlink(&old.name).is_err() {
                self.dying.push(old);
            }
        }
        let shell = job == crate::persistent::SHELL_CGROUP;
        if !shell {
            if let Some(dir) = self.reuse(job) {
                return Ok(Some(dir));
            }
        }
        let name = loop {
            let name = if shell { job_name(job) } else { format!("{JOB_CGROUP_PREFIX}{}", self.next_slot) };
            match nix::sys::stat::mkdirat(self.dir.as_fd(), name.as_str(), Mode::from_bits_truncate(0o755)) {
                Ok(()) if shell => break name,
                Ok(()) => {
                    self.next_slot += 1;
                    break name;
                }
                // Left by an earlier worker of the session: take the next number.
                Err(nix::errno::Errno::EEXIST) if !shell => self.next_slot += 1,
                Err(e) => return Err(e.into()),
            }
        };
        let flags = OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC;
        let opened = openat(self.dir.as_fd(), name.as_str(), flags, Mode::empty())
            .map_err(io::Error::from)
            .and_then(|dir| Ok((dir.try_clone()?, dir)));
        match opened {
            Ok((dir, spawn)) => {
                let slot = Slot {
                    name,
                    dir,
                    events: None,
                    cpu: None,
                    freeze: None,
                    cpu_base: 0,
                    frozen: false,
                    killed: false,
                    wd: None,
                };
                // Unlabelled (an error here), a `keep` of the job is refused; never another job's label.
                let _ = slot.label(job);
                self.slots.insert(job, slot);
                Ok(Some(spawn))
            }
            Err(e) => {
                let _ = self.unlink(&name);
                Err(e)
            }
        }
    }

    fn remove(&mut self, job: JobId) -> io::Result<()> {
        let Some(mut slot) = self.slots.remove(&job) else {
            return self.unlink(&job_name(job));
        };
        match slot.populated() {
            Ok(true) => {
                self.slots.insert(job, slot);
                Err(io::Error::from_raw_os_error(libc::EBUSY))
            }
            Ok(false) => self.release(job, slot, Emptiness::Empty),
            Err(_) => self.release(job, slot, Emptiness::Unknown),
        }
    }

    fn settle(&mut self, job: JobId) -> io::Result<(u64, Option<u64>)> {
        let Some(slot) = self.slots.get_mut(&job) else { return Err(io::Error::from_raw_os_error(libc::ENOENT)) };
        if slot.populated()? {
            return Err(io::Error::from_raw_os_error(libc::EBUSY));
        }
        // Empty, and nothing can enter it but through the worker: the figures are final.
        let usage = slot.usage().unwrap_or(slot.cpu_base);
        let cpu_usec = usage.saturating_sub(slot.cpu_base);
        let peak = self.memory_peak(job);
        let slot = self.slots.remove(&job).ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?;
        self.release(job, slot, Emptiness::Read(usage)).map(|()| (cpu_usec, peak))
    }

    fn kill(&mut self, job: JobId) -> io::Result<()> {
        self.retire(job);
        self.write_file(job, "cgroup.kill", b"1")
    }

    fn set_frozen(&mut self, job: JobId, frozen: bool) -> io::Result<()> {
        self.write_file(job, "cgroup.freeze", if frozen { b"1" } else { b"0" })?;
        if let Some(slot) = self.slots.get_mut(&job) {
            slot.frozen = frozen;
        }
        Ok(())
    }

    fn term_members(&mut self, job: JobId) -> io::Result<usize> {
        let pinned: Vec<(u32, OwnedFd)> =
            self.members(job)?.into_iter().filter_map(|pid| Some((pid, sys::pidfd_open(pid).ok()?))).collect();
        let still: HashSet<u32> = self.members(job)?.into_iter().collect();
        Ok(pinned
            .iter()
            .filter(|(pid, fd)| still.contains(pid) && sys::pidfd_send_signal(fd.as_fd(), libc::SIGTERM).is_ok())
            .count())
    }

    fn populated(&mut self, job: JobId) -> io::Result<bool> {
        match self.slots.get_mut(&job) {
            Some(slot) => slot.populated(),
            None => Ok(parse_populated(&self.read_file(job, "cgroup.events")?)),
        }
    }

    fn job_path(&self, job: JobId) -> String {
        let name = match self.slots.get(&job) {
            Some(s) => s.name.clone(),
            None if job == crate::persistent::SHELL_CGROUP => job_name(job),
            None => format!("{JOB_CGROUP_PREFIX}{}", self.next_slot),
        };
        self.path.join(name).to_string_lossy().into_owned()
    }

    fn cgroup_name(&self, job: JobId) -> String {
        self.name_of(job)
    }

    fn retire(&mut self, job: JobId) {
        if let Some(slot) = self.slots.get_mut(&job) {
            slot.killed = true;
        }
    }

    fn watch_fd(&self) -> Option<BorrowedFd<'_>> {
        self.inotify.as_ref().map(AsFd::as_fd)
    }

    fn watch(&mut self, job: JobId) -> io::Result<()> {
        if self.inotify.is_none() {
            self.inotify = Some(Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?);
        }
        let path = self.path.join(self.name_of(job)).join("cgroup.events");
        let ino = self.inotify.as_ref().ok_or_else(|| io::Error::from_raw_os_error(libc::EBADF))?;
        let wd = ino.add_watch(&path, AddWatchFlags::IN_MODIFY)?;
        self.watches.insert(wd, job);
        if let Some(slot) = self.slots.get_mut(&job) {
            slot.wd = Some(wd);
        }
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
        match self.slots.get_mut(&job) {
            Some(slot) => Ok(slot.usage()?.saturating_sub(slot.cpu_base)),
            None => Ok(parse_usage_usec(&self.read_file(job, "cpu.stat")?).unwrap_or(0)),
        }
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
        let tmp = tempfile::tempdir().unwrap();
        let tmp = tmp.path();
        let mut cg = SessionCgroup::open(tmp).unwrap();
        assert!(cg.create(3).unwrap().is_some());
        assert!(tmp.join("slot-1").is_dir());
        assert_eq!(cg.job_path(3), tmp.join("slot-1").to_string_lossy());
        assert_eq!(cg.cgroup_name(3), "slot-1");
        std::fs::write(tmp.join("slot-1/cgroup.events"), "populated 1\n").unwrap();
        assert!(cg.populated(3).unwrap());
        assert_eq!(cg.remove(3).unwrap_err().raw_os_error(), Some(libc::EBUSY), "not while populated");
        std::fs::write(tmp.join("slot-1/cgroup.kill"), "").unwrap();
        cg.kill(3).unwrap();
        assert_eq!(std::fs::read_to_string(tmp.join("slot-1/cgroup.kill")).unwrap(), "1");
        assert!(cg.kill(4).is_err(), "no such job cgroup");
        std::fs::remove_file(tmp.join("slot-1/cgroup.events")).unwrap();
        std::fs::remove_file(tmp.join("slot-1/cgroup.kill")).unwrap();
        // Unreadable `cgroup.events`: not known to be empty, so only the kernel's `rmdir` may decide.
        cg.slots.get_mut(&3).unwrap().events = None;
        assert!(cg.remove(3).is_ok());
        assert!(!tmp.join("slot-1").exists(), "removed, not kept for a later job");
        // No pool: an empty cgroup is removed. (The events file is read through the fd kept open, then
        // deleted, so that the plain directory can be removed like an empty cgroup.)
        let mut cg = cg.with_pool(0);
        cg.create(4).unwrap();
        std::fs::write(tmp.join("slot-2/cgroup.events"), "populated 0\n").unwrap();
        assert!(!cg.populated(4).unwrap());
        std::fs::remove_file(tmp.join("slot-2/cgroup.events")).unwrap();
        assert!(cg.remove(4).is_ok());
        assert!(!tmp.join("slot-2").exists());
    }

    #[test]
    fn a_cgroup_still_busy_under_a_needed_id_is_set_aside_and_removed_once_empty() {
        let tmp = tempfile::tempdir().unwrap();
        let tmp = tmp.path();
        let mut cg = SessionCgroup::open(tmp).unwrap();
        cg.create(5).unwrap();
        // A file stands in for a process: the directory cannot be removed yet.
        std::fs::write(tmp.join("slot-1/busy"), "").unwrap();
        cg.create(5).unwrap();
        assert_eq!(cg.cgroup_name(5), "slot-2", "the id gets a new cgroup");
        assert!(tmp.join("slot-1").exists());
        std::fs::remove_file(tmp.join("slot-1/busy")).unwrap();
        cg.create(6).unwrap();
        assert!(!tmp.join("slot-1").exists(), "removed once empty, never reused");
        assert_eq!(cg.cgroup_name(6), "slot-3");
    }

    #[test]
    fn an_emptied_job_cgroup_serves_the_next_job_with_its_cpu_time_counted_from_zero() {
        let tmp = tempfile::tempdir().unwrap();
        let tmp = tmp.path();
        let mut cg = SessionCgroup::open(tmp).unwrap();
        let slot = tmp.join("slot-1");
        cg.create(7).unwrap();
        std::fs::write(slot.join("cgroup.events"), "populated 1\nfrozen 0\n").unwrap();
        std::fs::write(slot.join("cpu.stat"), "usage_usec 100\nuser_usec 60\n").unwrap();
        std::fs::write(slot.join("cgroup.freeze"), "0\n").unwrap();
        assert_eq!(cg.settle(7).unwrap_err().raw_os_error(), Some(libc::EBUSY));
        std::fs::write(slot.join("cgroup.events"), "populated 0\nfrozen 0\n").unwrap();
        assert_eq!(cg.settle(7).unwrap(), (100, None));
        assert!(slot.is_dir(), "kept for the next job");
        assert!(cg.cpu_usec(7).is_err(), "job 7 has no cgroup any more");
        cg.create(8).unwrap();
        assert_eq!(cg.cgroup_name(8), "slot-1", "reused");
        std::fs::write(slot.join("cpu.stat"), "usage_usec 250\n").unwrap();
        assert_eq!(cg.cpu_usec(8).unwrap(), 150);
        assert_eq!(cg.settle(8).unwrap(), (150, None));
        // Frozen meanwhile (a keep of its previous job in progress): not reused.
        std::fs::write(slot.join("cgroup.freeze"), "1\n").unwrap();
        cg.create(9).unwrap();
        assert_eq!(cg.cgroup_name(9), "slot-2");
        // A name left by an earlier worker is skipped.
        std::fs::create_dir(tmp.join("slot-3")).unwrap();
        cg.create(10).unwrap();
        assert_eq!(cg.cgroup_name(10), "slot-4");
    }

    #[test]
    fn per_job_memory_counters_are_read_only_where_job_cgroups_have_the_memory_controller() {
        // Plain directories stand in for a pure-v2 session whose children have `memory` enabled.
        let tmp = tempfile::tempdir().unwrap();
        let (v2, hybrid) = (tmp.path().join("v2"), tmp.path().join("hybrid"));
        for d in [&v2, &hybrid] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(v2.join("cgroup.subtree_control"), "memory pids\n").unwrap();
        std::fs::write(hybrid.join("cgroup.subtree_control"), "\n").unwrap();
        let (mut v2cg, mut hycg) = (SessionCgroup::open(&v2).unwrap(), SessionCgroup::open(&hybrid).unwrap());
        assert_eq!(v2cg.pool, 0, "a new cgroup for every job where job cgroups count memory");
        assert_eq!(hycg.pool, POOL);
        for (d, cg) in [(&v2, &mut v2cg), (&hybrid, &mut hycg)] {
            cg.create(1).unwrap();
            std::fs::write(d.join("slot-1/memory.peak"), "5242880\n").unwrap();
        }
        assert_eq!(v2cg.memory_peak(1), Some(5 << 20));
        assert_eq!(hycg.memory_peak(1), None, "no file is read on hybrid hosts");
        assert_eq!(v2cg.memory_peak(2), None, "no such job");
        std::fs::write(v2.join("slot-1/memory.events"), "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n").unwrap();
        std::fs::write(hybrid.join("slot-1/memory.events"), "oom_kill 1\n").unwrap();
        assert_eq!(v2cg.oom_kills(1), Some(1));
        assert_eq!(hycg.oom_kills(1), None);
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
