//! A session as the front holds it: its region and doorbells, the command path to its worker, and its
//! jobs and facts (its [`SessionData`], behind one mutex, with a condvar that wakes waiters when a job
//! ends, the worker says hello, or the session is lost).
//!
//! Locks: `data` (jobs and session facts) and `cmd` (the command ring's producer) are never held
//! together, so a sender parked on a full command ring never blocks the pump, which takes only `data`.
//! The event ring's consumer is not here: it belongs to the pump ([`EventEnd`]).
//!
//! Command path: encode once, `try_push`; on `Full`, `park_prepare` and sleep on the `cmd_space`
//! eventfd (bounded) until the worker frees space; after a push, ring `cmd_data` only when the worker
//! advertised that it is parked ([`shm_proto::ring::Producer::wake_needed`]).
//!
//! ```
//! use front::sessions::session::{Session, SessionSpec};
//! use front::sessions::supervisor::SessionFds;
//! use shm_proto::{region::{Region, RegionConfig}, sys::EventFd};
//! let (_region, memfd) = Region::create(RegionConfig::default()).unwrap();
//! let e = || EventFd::new().unwrap();
//! let fds = SessionFds { memfd, cmd_data: e(), cmd_space: e(), evt_data: e(), evt_space: e() };
//! let dir = tempfile::tempdir().unwrap();
//! let spec = SessionSpec { name: "s1".into(), serial: 1, owner_uid: 1000, cgroup: "/cg".into(),
//!     cwd: "/".into(), env: vec![], dir: dir.path().into(), persistent: false };
//! let (session, _events) = Session::attach(spec, fds).unwrap();
//! assert_eq!(session.name(), "s1");
//! ```

use crate::jobs::job::{unix_ns, Job};
use crate::rpc::results::{Announcement, ShellInfo, Survivor, WorkerInfo};
use crate::sessions::subscribers as subscribe;
use crate::sessions::supervisor::SessionFds;
use shm_proto::msg::{Command, Event, JobId};
use shm_proto::region::{AttachError, Region};
use shm_proto::ring::{Consumer, PopError, Producer, PushError};
use shm_proto::sys::EventFd;
use std::collections::{BTreeMap, VecDeque};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Frames the pump takes from one session before looking at the others.
const DRAIN_BUDGET: usize = 256;
/// Session-level warnings kept for `describe`.
const MAX_WARNINGS: usize = 16;

/// What a session is opened with.
#[derive(Clone, Debug)]
pub struct SessionSpec {
    pub name: String,
    /// Unique per session incarnation in this front (names are reused after close).
    pub serial: u64,
    pub owner_uid: u32,
    pub cgroup: String,
    pub cwd: String,
    pub env: Vec<(String, String)>,
    /// `<state-dir>/sessions/<name>`; job logs go under `jobs/`.
    pub dir: PathBuf,
    /// A named persistent session: its jobs run one at a time in one long-lived bash.
    pub persistent: bool,
}

/// Errors sending a command to the worker.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SendError {
    #[error("the command is {len} bytes; the longest this session's ring takes is {max}")]
    TooLarge { len: usize, max: usize },
    #[error("the worker did not make room in its command ring within {0:?}")]
    Timeout(Duration),
    #[error("the session was lost")]
    Lost,
    #[error("the command ring is broken")]
    Ring(#[source] PushError),
    #[error("the command could not be encoded")]
    Encode(#[source] shm_proto::frame::FrameError),
    #[error("ringing the worker's doorbell failed")]
    Notify(#[source] std::io::Error),
}

/// Why a session was lost, and what the supervisor killed then.
#[derive(Clone, Debug)]
pub struct Lost {
    pub note: String,
    pub killed: Vec<Survivor>,
    /// Processes the supervisor killed beyond `killed` (its listing carries at most 64), counted only.
    pub killed_more: u32,
    /// The worker died (as opposed to a corrupt ring): the next `run` may start a new worker for the
    /// session (`kernel/revive.rs`).
    pub worker_died: bool,
    /// Whether the supervisor's teardowns since the session was lost (the one at the worker's death, and
    /// that of a new worker that never took over) verified the session's cgroup subtree empty and
    /// removed it: `session.close` reports it, since the supervisor has forgotten the session by then.
    /// `None` when no teardown was reported (a corrupt ring: the worker may still be alive).
    pub death_verified_empty: Option<bool>,
    /// When the session was lost (wall clock): its jobs ended then, whenever a new worker takes over.
    pub at_unix_ns: u64,
}

/// A job of a session: held in memory, or read back from disk ([`crate::sessions::retired`]).
#[derive(Debug)]
pub enum JobRef<'a> {
    Held(&'a Job),
    Read(Box<Job>),
}

impl std::ops::Deref for JobRef<'_> {
    type Target = Job;

    fn deref(&self) -> &Job {
        match self {
            JobRef::Held(j) => j,
            JobRef::Read(j) => j,
        }
    }
}

/// A job of a session for a call that reads it ([`SessionData::job_to_read`]): held in memory, or a copy
/// read back from disk.
#[derive(Debug)]
pub enum JobMut<'a> {
    Held(&'a mut Job),
    Read(Box<Job>),
}

impl std::ops::Deref for JobMut<'_> {
    type Target = Job;

    fn deref(&self) -> &Job {
        match self {
            JobMut::Held(j) => j,
            JobMut::Read(j) => j,
        }
    }
}

impl std::ops::DerefMut for JobMut<'_> {
    fn deref_mut(&mut self) -> &mut Job {
        match self {
            JobMut::Held(j) => j,
            JobMut::Read(j) => j,
        }
    }
}

/// A session's jobs for retention to change: those let go from memory are brought back when asked for.
pub(super) struct HeldJobs<'a> {
    jobs: &'a mut BTreeMap<JobId, Box<Job>>,
    retired: &'a crate::sessions::retired::Retired,
}

impl HeldJobs<'_> {
    /// Job `id`, brought back into memory if it was let go.
    pub fn get_mut(&mut self, id: JobId) -> Option<&mut Job> {
        if !self.jobs.contains_key(&id) {
            match self.retired.get(id) {
                Some(Ok(mut j)) => {
                    j.set_on_disk();
                    self.jobs.insert(id, Box::new(j));
                }
                Some(Err(e)) => tracing::error!("job {id}'s record could not be read back from disk: {e}"),
                None => {}
            }
        }
        self.jobs.get_mut(&id).map(|j| &mut **j)
    }

    /// The jobs held in memory.
    pub fn held(&self) -> impl Iterator<Item = (&JobId, &Job)> {
        self.jobs.iter().map(|(id, j)| (id, &**j))
    }
}

/// The part of a session behind its mutex: its jobs and what it knows of its worker, shell state,
/// subscribers and journal ("state" in this crate means shell state only).
#[derive(Debug, Default)]
pub struct SessionData {
    worker: Worker,
    closing: bool,
    /// Boxed: a `Job` is large and a B-tree node holds eleven of them inline, half empty on average
    /// after splits (that was ~5 KiB of the front's memory per ended job).
    jobs: BTreeMap<JobId, Box<Job>>,
    next_job: JobId,
    warnings: VecDeque<String>,
    /// Jobs that may hold buffered output (so a flush need not visit every job).
    dirty: Vec<JobId>,
    /// The shell state carried between the session's jobs.
    record: crate::shell::record::StateRecord,
    /// Guard deny rules overridden in this session (`run {override}`; each also in the audit log).
    guard_overrides: u64,
    probes: Probes,
    /// Live-streaming subscriptions (see [`crate::kernel::subscribe`]).
    subscribers: Vec<crate::sessions::subscribers::Subscriber>,
    /// The session's name, for notifications (set when the session is attached).
    name: String,
    /// What a restarted front needs to take the session over (`sessions/journal.rs`).
    journal: crate::sessions::journal::Journal,
    /// The identity of the event ring being read ([`crate::sessions::journal::Entry::Ring`]).
    ring: u64,
    /// The worker (pid) and record version of the last pre-start hint delivered (see `sessions::prestart`).
    hinted: Option<(u32, u64)>,
    /// What retention has counted of the session's output (see [`crate::sessions::retain::Ledger`]).
    retention: crate::sessions::retain::Ledger,
    /// The next job's output files, made ahead (see [`crate::jobs::files`]).
    files_ahead: crate::jobs::files::Ahead,
    /// Every job below this id has ended and been reported on, and has no conflict left to announce:
    /// announcements need not look at it again (a conflict noted on it, or the end of what it left
    /// running, lowers the mark).
    quiet_below: JobId,
    /// The ended jobs let go from memory (see [`crate::sessions::retired`]).
    retired: crate::sessions::retired::Retired,
    /// Jobs whose stdin the front feeds: terminals (with their screens) and stdin pipes.
    terminals: crate::terminal::Terminals,
}

/// What a session knows of its worker: its hello, sandbox and spawn path, why the session was lost,
/// what a new worker is started with, and when the worker was replaced.
#[derive(Debug, Default)]
struct Worker {
    shell: Option<ShellInfo>,
    info: Option<WorkerInfo>,
    lost: Option<Lost>,
    /// The session's sandbox as its worker reported it (after `Hello`).
    sandbox: Option<shm_proto::msg::SandboxInfo>,
    /// How the worker spawns jobs into their cgroups, in words (`None` until its first such job).
    spawn_path: Option<String>,
    /// What the session was opened with, so a new worker can be started for it (`kernel/revive.rs`);
    /// `None` when not known (the session cannot be revived).
    reopen: Option<crate::sessions::journal::Reopen>,
    /// When the session's worker was replaced, oldest first (bounded; see `kernel/revive.rs`).
    revivals: VecDeque<Instant>,
}

/// Liveness probes sent to the worker: the last number handed out, and the answers not yet taken
/// (`None`: the job was not running).
#[derive(Debug, Default)]
struct Probes {
    last: u64,
    answers: std::collections::HashMap<u64, Option<shm_proto::msg::JobLiveness>>,
}

impl SessionData {
    /// The shell state carried between the session's jobs.
    pub fn record(&self) -> &crate::shell::record::StateRecord {
        &self.record
    }

    /// Carry on the shell state a restarted front read back from the journal (`Entry::State`), or,
    /// with none, start it afresh.
    pub fn restore_record(&mut self, state: Option<(u64, shm_proto::capture::Items)>) {
        self.record = match state {
            Some((version, items)) => self.record.restored(version, items),
            None => self.record.restarted(),
        };
    }

    /// Open the session's journal in `dir` (a fresh one) and note the event ring being read.
    pub fn open_journal(&mut self, dir: &std::path::Path) {
        self.journal = crate::sessions::journal::Journal::open(dir);
        self.journal.append(&crate::sessions::journal::Entry::Ring { id: self.ring });
    }

    /// Write one entry to the session's journal.
    pub fn append_journal(&mut self, entry: &crate::sessions::journal::Entry) {
        self.journal.append(entry);
    }

    /// The identity of the event ring being read ([`crate::sessions::journal::Entry::Ring`]).
    pub fn ring(&self) -> u64 {
        self.ring
    }

    /// The next job's output files, made ahead (or being made, or none).
    pub fn files_ahead(&self) -> &crate::jobs::files::Ahead {
        &self.files_ahead
    }

    pub fn set_files_ahead(&mut self, ahead: crate::jobs::files::Ahead) {
        self.files_ahead = ahead;
    }

    /// The files made ahead for job `id`, if they are (whatever else was made ahead is given up).
    pub fn take_files_ahead(&mut self, id: JobId) -> Option<crate::jobs::files::JobFiles> {
        self.files_ahead.take_for(id)
    }

    /// Jobs whose stdin the front feeds: terminals (with their screens) and stdin pipes.
    pub fn terminals(&self) -> &crate::terminal::Terminals {
        &self.terminals
    }

    pub fn terminals_mut(&mut self) -> &mut crate::terminal::Terminals {
        &mut self.terminals
    }

    /// Add live-streaming subscriptions (see [`crate::kernel::subscribe`]).
    pub fn subscribe(&mut self, subs: &mut Vec<crate::sessions::subscribers::Subscriber>) {
        self.subscribers.append(subs);
    }

    /// Remove connection `conn`'s subscriptions (all, or only subscription `only`); how many went.
    pub fn unsubscribe(&mut self, conn: u64, only: Option<u64>) -> usize {
        subscribe::remove(&mut self.subscribers, conn, only)
    }

    /// Job `id`, if the session has it: from memory, or read back from disk when it was let go.
    pub fn job(&self, id: JobId) -> Option<JobRef<'_>> {
        match self.jobs.get(&id) {
            Some(j) => Some(JobRef::Held(j)),
            None => self.read_back(id).map(JobRef::Read),
        }
    }

    /// Job `id` read back from disk (marked as such), if it was let go. A record that cannot be read
    /// is logged and the job is missing from answers.
    fn read_back(&self, id: JobId) -> Option<Box<Job>> {
        match self.retired.get(id)? {
            Ok(mut j) => {
                j.set_on_disk();
                Some(Box::new(j))
            }
            Err(e) => {
                tracing::error!("session {}: job {id}'s record could not be read back from disk: {e}", self.name);
                None
            }
        }
    }

    /// Bring job `id` back into memory if it was let go (to change it); false if the session lacks it.
    fn hold(&mut self, id: JobId) -> bool {
        if self.jobs.contains_key(&id) {
            return true;
        }
        let Some(j) = self.read_back(id) else { return false };
        self.jobs.insert(id, j);
        true
    }

    /// Job `id` for a call that reads it (a result, a view, a replay): a job let go from memory is read
    /// back into a copy, and what the reading changes in it is dropped with the copy. Such a job ended,
    /// was reported and is parked, so a read changes nothing that outlives the answer.
    pub fn job_to_read(&mut self, id: JobId) -> Option<JobMut<'_>> {
        match self.jobs.contains_key(&id) {
            true => self.jobs.get_mut(&id).map(|j| JobMut::Held(j)),
            false => self.read_back(id).map(JobMut::Read),
        }
    }

    /// Job `id` to change: one that was let go is brought back into memory (and let go again later).
    pub fn job_mut(&mut self, id: JobId) -> Option<&mut Job> {
        self.hold(id);
        self.jobs.get_mut(&id).map(|j| &mut **j)
    }

    pub fn has_job(&self, id: JobId) -> bool {
        self.jobs.contains_key(&id) || self.retired.contains(id)
    }

    /// The jobs held in memory, oldest first: every job that runs, was not yet reported or is not done
    /// with, and the newest ones. Jobs let go from memory are ended, reported and settled, with
    /// nothing left to announce; [`SessionData::all_jobs`] reads them back too.
    pub fn jobs(&self) -> impl DoubleEndedIterator<Item = &Job> {
        self.jobs.values().map(|j| &**j)
    }

    /// The jobs held in memory, oldest first (see [`SessionData::jobs`]).
    pub fn jobs_mut(&mut self) -> impl DoubleEndedIterator<Item = &mut Job> {
        self.jobs.values_mut().map(|j| &mut **j)
    }

    /// The jobs held in memory from id `first` on, oldest first (see [`SessionData::jobs`]).
    pub fn jobs_from(&self, first: JobId) -> impl DoubleEndedIterator<Item = &Job> {
        self.jobs.range(first..).map(|(_, j)| &**j)
    }

    /// Every job of the session, oldest first, those let go from memory read back from disk (the tests'
    /// view: a listing reads a page, `kernel::jobs_list`).
    #[cfg(test)]
    pub fn all_jobs(&self) -> impl Iterator<Item = JobRef<'_>> {
        (1..=self.last_id()).filter_map(move |id| self.job(id))
    }

    /// The newest job id the session gave (in memory or let go; 0 before its first job).
    pub fn last_id(&self) -> JobId {
        self.jobs.last_key_value().map_or(0, |(id, _)| *id).max(self.retired.max_id())
    }

    /// Job `id` if it is held in memory (never read back from disk).
    pub fn held_job(&self, id: JobId) -> Option<&Job> {
        self.jobs.get(&id).map(|j| &**j)
    }

    /// How many jobs the session has (in memory and let go).
    pub fn job_count(&self) -> usize {
        self.jobs.values().filter(|j| !j.on_disk()).count() + self.retired.count()
    }

    /// The totals of the jobs let go from memory (see [`crate::sessions::retired::Retired`]).
    pub fn retired(&self) -> &crate::sessions::retired::Retired {
        &self.retired
    }

    /// Let go from memory the jobs older than the session's newest `window` that are done with
    /// ([`Job::done_with`]), that retention counts as settled and whose database rows are final
    /// (`rows_final`): their records go to disk in `jobs_dir` ([`crate::sessions::retired`]). Returns
    /// how many went.
    pub fn retire(&mut self, jobs_dir: &Path, window: usize, rows_final: impl Fn(JobId) -> bool) -> usize {
        let over = self.jobs.len().saturating_sub(window);
        let ids: Vec<JobId> = self
            .jobs
            .iter()
            .take(over)
            .filter(|(id, j)| j.done_with() && self.retention.counted(**id) && rows_final(**id))
            .map(|(id, _)| *id)
            .collect();
        let mut gone = 0;
        for id in ids {
            let Some(job) = self.jobs.get(&id) else { continue };
            if let Err(e) = self.retired.put(jobs_dir, job) {
                tracing::warn!("session {}: job {id} stays in memory: {e}", self.name);
                break;
            }
            self.jobs.remove(&id);
            gone += 1;
        }
        gone
    }

    /// Forget job `id` (one that never reached the worker); later jobs keep their ids.
    pub fn remove_job(&mut self, id: JobId) -> Option<Job> {
        self.jobs.remove(&id).map(|j| *j)
    }

    /// The jobs and the retention ledger together, for [`crate::sessions::retain`], which keeps one in
    /// step with the other.
    pub(super) fn jobs_and_ledger(&mut self) -> (HeldJobs<'_>, &mut crate::sessions::retain::Ledger) {
        (HeldJobs { jobs: &mut self.jobs, retired: &self.retired }, &mut self.retention)
    }

    pub(super) fn ledger(&self) -> &crate::sessions::retain::Ledger {
        &self.retention
    }

    /// The shell the worker reported in its hello (`None` until then).
    pub fn shell(&self) -> Option<&ShellInfo> {
        self.worker.shell.as_ref()
    }

    /// The worker, once started (its pid and uid).
    pub fn worker(&self) -> Option<&WorkerInfo> {
        self.worker.info.as_ref()
    }

    /// The worker the supervisor started for the session (before its hello).
    pub fn set_worker(&mut self, worker: WorkerInfo) {
        self.worker.info = Some(worker);
    }

    /// Why the session was lost, if it was.
    pub fn lost(&self) -> Option<&Lost> {
        self.worker.lost.as_ref()
    }

    /// True once `session.close` began.
    pub fn is_closing(&self) -> bool {
        self.closing
    }

    /// `session.close` began: the close decides the jobs' fate (see [`SessionData::mark_lost`]).
    pub fn set_closing(&mut self) {
        self.closing = true;
    }

    /// The session's sandbox as its worker reported it (after its hello).
    pub fn sandbox(&self) -> Option<&shm_proto::msg::SandboxInfo> {
        self.worker.sandbox.as_ref()
    }

    /// How the worker spawns jobs into their cgroups, in words (`None` until its first such job).
    pub fn spawn_path(&self) -> Option<&str> {
        self.worker.spawn_path.as_deref()
    }

    /// What the session was opened with, so a new worker can be started for it (`None`: not known).
    pub fn reopen(&self) -> Option<&crate::sessions::journal::Reopen> {
        self.worker.reopen.as_ref()
    }

    pub fn set_reopen(&mut self, reopen: Option<crate::sessions::journal::Reopen>) {
        self.worker.reopen = reopen;
    }

    /// How many times the worker was replaced within `window` before `now` (older replacements are
    /// forgotten).
    pub fn recent_revivals(&mut self, now: Instant, window: Duration) -> usize {
        let revivals = &mut self.worker.revivals;
        while revivals.front().is_some_and(|t| now.duration_since(*t) > window) {
            revivals.pop_front();
        }
        revivals.len()
    }

    /// A new probe number (see [`crate::kernel::job_probe`]).
    pub fn new_probe(&mut self) -> u64 {
        // Numbered from the wall clock at the session's first probe in this front, so a restarted
        // front's probes never take a number an answer in the ring or journal gave the one before.
        if self.probes.last == 0 {
            self.probes.last = unix_ns();
        }
        self.probes.last += 1;
        self.probes.last
    }

    /// True once the worker answered probe `n`.
    pub fn probe_answered(&self, n: u64) -> bool {
        self.probes.answers.contains_key(&n)
    }

    /// Take the worker's answer to probe `n`: `None` if it has not come, `Some(None)` if the job was
    /// not running.
    pub fn take_probe_answer(&mut self, n: u64) -> Option<Option<shm_proto::msg::JobLiveness>> {
        self.probes.answers.remove(&n)
    }

    /// Session-level warnings from the worker (the last 16), oldest first.
    pub fn warnings(&self) -> impl Iterator<Item = &String> {
        self.warnings.iter()
    }

    /// A guard deny rule was overridden in this session (`run {override}`).
    pub fn count_guard_override(&mut self) {
        self.guard_overrides += 1;
    }

    /// How many guard deny rules were overridden in this session.
    pub fn guard_overrides(&self) -> u64 {
        self.guard_overrides
    }

    /// The worker (pid) and record version of the last pre-start hint delivered.
    pub fn hinted(&self) -> Option<(u32, u64)> {
        self.hinted
    }

    pub fn set_hinted(&mut self, key: (u32, u64)) {
        self.hinted = Some(key);
    }

    /// Register a new job; its output goes to `jobs_dir/<id>.log`.
    pub fn add_job(&mut self, cmd: String, jobs_dir: &std::path::Path) -> JobId {
        self.next_job += 1;
        let id = self.next_job;
        self.journal.append(&crate::sessions::journal::Entry::Job { id, cmd: cmd.clone() });
        let files = self.files_ahead.take_for(id);
        self.jobs.insert(id, Box::new(Job::with_files(id, cmd, jobs_dir.join(format!("{id}.log")), files)));
        self.retention.add(id);
        crate::sessions::retain::enforce(self, crate::output::retention::config(), std::time::Instant::now());
        id
    }

    /// Put back a job rebuilt by a restarted front; later jobs get higher ids.
    pub fn restore_job(&mut self, job: Job) {
        self.next_job = self.next_job.max(job.id());
        self.retention.add(job.id());
        self.jobs.insert(job.id(), Box::new(job));
    }

    /// Apply one event from the worker; true when waiters should wake.
    pub fn apply(&mut self, ev: Event, now: Instant, ns: u64) -> bool {
        if let Event::Status { probe, liveness, .. } = ev {
            self.probes.answers.insert(probe, liveness);
            return true;
        }
        let job_id = match &ev {
            Event::Started { job, .. }
            | Event::SpawnFailed { job, .. }
            | Event::Output { job, .. }
            | Event::Exited { job, .. }
            | Event::StreamsClosed { job }
            | Event::StateCaptured { job, .. }
            | Event::StateUnknown { job, .. }
            | Event::Survivors { job, .. }
            | Event::Emptied { job, .. }
            | Event::OomKilled { job }
            | Event::PidsLimited { job, .. }
            | Event::NetworkRefused { job, .. }
            | Event::Forgotten { job }
            | Event::FilesWritten { job, .. }
            | Event::Effects { job, .. } => Some(*job),
            Event::Hello { .. }
            | Event::Warning { .. }
            | Event::Status { .. }
            | Event::Sandbox(_)
            | Event::BashFile { .. }
            | Event::SpawnPath { .. } => None,
        };
        let job = match job_id {
            // An event for a job let go from memory brings it back (its effects may come after its end).
            Some(id) => match self.hold(id).then(|| self.jobs.get_mut(&id)).flatten() {
                Some(j) => Some(j),
                None => {
                    tracing::warn!("ignoring an event for unknown job {id}");
                    return false;
                }
            },
            None => None,
        };
        match (ev, job) {
            (Event::Output { stream, data, read_mono_ns, read_unix_ns, .. }, Some(j)) => {
                let was_dirty = j.dirty();
                let live = !self.subscribers.is_empty() && subscribe::wanted(&self.subscribers, j.id());
                let s = crate::output::view::stream_index(stream);
                let offset = j.counts()[s];
                j.rendered_mut().collect_fresh(live);
                j.on_output(stream, &data, now, ns);
                if !was_dirty && j.dirty() {
                    self.dirty.push(j.id());
                }
                if live {
                    let fresh = j.rendered_mut().take_fresh();
                    let c = subscribe::Chunk {
                        job: j.id(),
                        stream: s as u8,
                        offset,
                        data: &data,
                        at_unix_ns: ns,
                        read: Some((read_mono_ns, read_unix_ns)),
                        fresh: &fresh,
                    };
                    subscribe::publish_chunk(&mut self.subscribers, &self.name, &c);
                }
                return self.terminals.output(j.id(), &data, now);
            }
            (Event::Started { pid, at_unix_ns, prestarted, cgroup, .. }, Some(j)) => {
                j.on_started(pid, at_unix_ns, prestarted, cgroup, now)
            }
            (Event::SpawnFailed { error, .. }, Some(j)) => {
                j.on_spawn_failed(&error, now);
                publish_end(&mut self.subscribers, &self.name, j, true);
            }
            (Event::Exited { code, signal, at_unix_ns, killed, .. }, Some(j)) => {
                j.on_exited(code, signal, at_unix_ns, killed, now);
                publish_end(&mut self.subscribers, &self.name, j, false);
                crate::sessions::retain::enforce(self, crate::output::retention::config(), now);
            }
            (Event::StreamsClosed { .. }, Some(j)) => {
                let live = subscribe::wanted(&self.subscribers, j.id());
                j.rendered_mut().collect_fresh(live);
                let was_dirty = j.dirty();
                j.on_streams_closed();
                self.terminals.settle(j.id());
                if !was_dirty && j.dirty() {
                    // The last lines went to the line log's buffer: the next flush writes them (and
                    // then lets the job's write buffers go).
                    self.dirty.push(j.id());
                }
                publish_end(&mut self.subscribers, &self.name, j, true);
                if j.needs_announcement() {
                    // What a reported job left running ended: announce it (see `quiet_below`).
                    self.quiet_below = self.quiet_below.min(j.id());
                }
                // What it wrote since the disk budget's last check is checked now, not at the next write.
                crate::output::retention::wake();
            }
            (Event::StateCaptured { data, .. }, Some(j)) => {
                let by = j.id();
                let (before, old) = self.record.snapshot();
                let overridden = j.on_state_captured(&data, &mut self.record);
                self.note_overridden(by, overridden);
                let (version, new) = self.record.snapshot();
                if version != before {
                    let set = new.iter().filter(|(k, v)| old.get(*k) != Some(*v));
                    let set: Vec<(String, Vec<u8>)> = set.map(|(k, v)| (k.clone(), v.clone())).collect();
                    let removed: Vec<String> = old.keys().filter(|k| !new.contains_key(*k)).cloned().collect();
                    self.journal.append(&crate::sessions::journal::Entry::State { version, set, removed });
                }
            }
            (Event::StateUnknown { reason, .. }, Some(j)) => j.on_state_unknown(&reason),
            (Event::Survivors { procs, .. }, Some(j)) => j.on_survivors(procs),
            (Event::Emptied { at_unix_ns, usage, .. }, Some(j)) => {
                j.on_emptied(at_unix_ns, usage);
                if j.needs_announcement() {
                    self.quiet_below = self.quiet_below.min(j.id());
                }
            }
            (Event::OomKilled { .. }, Some(j)) => j.on_oom_killed(),
            (Event::PidsLimited { limit, failures, .. }, Some(j)) => j.note(format!(
                "{failures} fork(s) of the session failed on its process limit (pids.max {limit}) while the job ran"
            )),
            (Event::NetworkRefused { count, families, .. }, Some(j)) => j.on_network_refused(
                crate::sessions::sandbox::explain_network(count, &families, self.worker.sandbox.as_ref()),
                crate::sessions::sandbox::explain_network_briefly(count, &families),
            ),
            (Event::Hello { pid, uid, bash, bash_version, .. }, _) => {
                self.worker.shell =
                    Some(ShellInfo { path: bash, version: bash_version, probed: None, id: String::new() });
                self.worker.info = Some(WorkerInfo { pid, uid });
            }
            (Event::Warning { job, message }, _) => self.warn(job, message),
            (Event::Sandbox(info), _) => {
                self.record.set_policy(Some(&info.policy));
                self.worker.sandbox = Some(info);
            }
            (Event::SpawnPath { path }, _) => self.worker.spawn_path = Some(path),
            (Event::BashFile { id, probed }, _) => {
                if let Some(shell) = self.worker.shell.as_mut() {
                    (shell.id, shell.probed) = (id, Some(probed));
                }
            }
            (Event::FilesWritten { files, .. }, Some(j)) => j.on_files(files),
            (Event::Effects { project, .. }, Some(j)) => j.effects = Some(Box::new(project)),
            _ => {}
        }
        true
    }

    /// Tell the earlier jobs whose state changes job `by` overrode (their results name the conflict).
    fn note_overridden(&mut self, by: JobId, overridden: Vec<(u64, String)>) {
        let mut per_job: BTreeMap<u64, Vec<String>> = BTreeMap::new();
        for (job, item) in overridden {
            per_job.entry(job).or_default().push(item);
        }
        for (job, items) in per_job {
            if let Some(j) = self.job_mut(job) {
                j.on_state_overridden(by, &items);
                self.quiet_below = self.quiet_below.min(job);
            }
        }
    }

    fn warn(&mut self, job: Option<JobId>, message: String) {
        match job.and_then(|id| self.job_mut(id)) {
            Some(j) => j.note(format!("worker warning: {message}")),
            None => {
                if self.warnings.len() == MAX_WARNINGS {
                    self.warnings.pop_front();
                }
                self.warnings.push_back(message);
            }
        }
    }

    /// Mark the session lost: unfinished jobs become `lost`. No effect while the session is closing
    /// (the close decides its jobs' fate) or when it was already lost.
    pub fn mark_lost(&mut self, note: String, killed: Vec<Survivor>, now: Instant) {
        if self.closing || self.worker.lost.is_some() {
            return;
        }
        let at_unix_ns = crate::jobs::job::unix_ns();
        for job in self.jobs.values_mut() {
            let unsettled = !job.settled();
            if job.mark_lost(&note, now, Some(at_unix_ns)) {
                publish_end(&mut self.subscribers, &self.name, job, false);
            }
            if unsettled {
                publish_end(&mut self.subscribers, &self.name, job, true);
            }
        }
        self.worker.lost =
            Some(Lost { note, killed, killed_more: 0, worker_died: false, death_verified_empty: None, at_unix_ns });
    }

    /// The highest job id handed out so far.
    pub fn last_job(&self) -> JobId {
        self.next_job
    }

    /// End every running job as `killed` by `session.close`, telling subscribers (`job.end`, then
    /// `job.settled`: nothing more will come).
    pub fn close_jobs(&mut self, now: Instant) {
        for job in self.jobs.values_mut() {
            let unsettled = !job.settled();
            if job.mark_closed(now) {
                publish_end(&mut self.subscribers, &self.name, job, false);
            }
            if unsettled {
                publish_end(&mut self.subscribers, &self.name, job, true);
            }
        }
    }

    /// Jobs an answer reported that never reached its client: announced again by the next call.
    pub fn unreport(&mut self, jobs: &[JobId]) {
        for &id in jobs {
            if self.job_mut(id).is_some_and(|j| j.unreport()) {
                self.quiet_below = self.quiet_below.min(id);
            }
        }
    }

    /// Announcements of every ended, unreported job (each marked reported), oldest first. Looks at the
    /// jobs from the first that is not both ended and reported on (see `quiet_below`).
    pub fn take_announcements(&mut self, now: Instant) -> Vec<Announcement> {
        let (mut out, mut floor, mut quiet) = (Vec::new(), self.quiet_below, true);
        for (id, j) in self.jobs.range_mut(self.quiet_below..) {
            if j.needs_announcement() {
                out.push(j.announce(now));
            }
            quiet &= j.quiet();
            if quiet {
                floor = id + 1;
            }
        }
        self.quiet_below = floor;
        out
    }

    /// Flush every job's buffered output.
    pub fn flush(&mut self) {
        for id in std::mem::take(&mut self.dirty) {
            if let Some(job) = self.jobs.get_mut(&id) {
                job.flush();
            }
        }
    }

    /// Journal a popped batch: its non-output events and the log length of each job it writes to.
    fn journal_batch(&mut self, from: u64, to: u64, events: &[Event]) {
        let mut before: Vec<(u64, u64)> = Vec::new();
        let mut kept = Vec::new();
        for ev in events {
            match ev {
                Event::Output { job, .. } => {
                    if !before.iter().any(|(j, _)| j == job) {
                        if let Some(j) = self.jobs.get(job) {
                            before.push((*job, j.log_len()));
                        }
                    }
                }
                // A probe's answer is for the call that asked, in this front: a restarted one numbers
                // its probes afresh, and an old answer replayed would answer a new probe.
                Event::Status { .. } => {}
                other => kept.push(other.clone()),
            }
        }
        self.journal.append(&crate::sessions::journal::Entry::Batch { from, to, before, events: kept });
    }

    pub fn running_jobs(&self) -> usize {
        self.jobs.values().filter(|j| !j.state().ended()).count()
    }
}

/// Map a worker's region: the command path, and the event end (its head held until a batch is journaled
/// and its output written, see [`Session::drain_events`]). Writes our pid into the header.
/// The identity of a session's event ring: the inode number the kernel gave the region's memfd (0 if
/// it cannot be read, which only makes a restarted front treat the journal as it did before rings
/// were named).
fn ring_id(fds: &SessionFds) -> u64 {
    nix::sys::stat::fstat(&fds.memfd).map_or(0, |st| st.st_ino)
}

fn map_rings(fds: SessionFds) -> Result<(CmdRing, EventEnd), AttachError> {
    let region = Region::attach(fds.memfd.as_fd())?;
    region.header().front_pid.store(std::process::id(), Ordering::Relaxed);
    let mut consumer = region.evt_consumer();
    consumer.hold();
    let end = EventEnd { consumer, evt_data: fds.evt_data, evt_space: fds.evt_space };
    let cmd = CmdRing {
        producer: region.cmd_producer(),
        _region: region,
        scratch: Vec::new(),
        cmd_data: fds.cmd_data,
        cmd_space: fds.cmd_space,
    };
    Ok((cmd, end))
}

/// Tell subscribers that `j` ended (`settled`: its output is complete, with its last lines).
fn publish_end(subs: &mut Vec<subscribe::Subscriber>, session: &str, j: &mut Job, settled: bool) {
    if !subscribe::wanted(subs, j.id()) {
        return;
    }
    let fresh = j.rendered_mut().take_fresh();
    let r = j.summary(Instant::now());
    let e = subscribe::End {
        job: j.id(),
        settled,
        state: r.state,
        exit_code: r.exit_code,
        signal: r.signal,
        fresh: &fresh,
    };
    subscribe::publish_end(subs, session, &e);
}

/// The command path to the current worker: its region, the command ring's producer, its doorbells
/// and the encode buffer. Replaced as a whole when a new worker is started for the session.
struct CmdRing {
    _region: Region,
    producer: Producer,
    scratch: Vec<u8>,
    cmd_data: EventFd,
    cmd_space: EventFd,
}

impl std::fmt::Debug for EventEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventEnd").finish_non_exhaustive()
    }
}

/// The event ring's consumer end, owned by the pump.
pub struct EventEnd {
    pub(crate) consumer: Consumer,
    pub(crate) evt_data: EventFd,
    pub(crate) evt_space: EventFd,
}

/// What draining a session's event ring found.
#[derive(Debug, PartialEq, Eq)]
pub enum Drained {
    /// Nothing was waiting.
    Empty,
    /// Frames were consumed.
    Some,
    /// The ring is corrupt; the session was marked lost and must be dropped from the pump.
    Corrupt,
    /// Frames were consumed and the session has subscribers (notifications may have been sent).
    Live,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").finish_non_exhaustive()
    }
}

/// One session.
pub struct Session {
    spec: SessionSpec,
    cmd: Mutex<CmdRing>,
    data: Mutex<SessionData>,
    changed: Condvar,
    lost: AtomicBool,
    /// Held while a new worker is being started for the session (one revival at a time).
    pub(crate) reviving: Mutex<()>,
}

impl Drop for Session {
    /// The session's jobs go with it: ask for the freed memory to be given back to the system
    /// ([`crate::sessions::trim`]).
    fn drop(&mut self) {
        crate::sessions::trim::want();
    }
}

impl Session {
    /// Map the region, take the front's ring ends, and write our pid into the header.
    pub fn attach(spec: SessionSpec, fds: SessionFds) -> Result<(std::sync::Arc<Session>, EventEnd), AttachError> {
        let ring = ring_id(&fds);
        let (cmd, end) = map_rings(fds)?;
        let session = Session {
            cmd: Mutex::new(cmd),
            data: Mutex::new(SessionData {
                name: spec.name.clone(),
                ring,
                record: {
                    let mut r = crate::shell::record::StateRecord::opened_in(spec.cwd.as_bytes());
                    r.set_fresh_env(crate::shell::record::FreshEnv::of(None, &spec.env));
                    r
                },
                ..SessionData::default()
            }),
            changed: Condvar::new(),
            lost: AtomicBool::new(false),
            reviving: Mutex::new(()),
            spec,
        };
        Ok((std::sync::Arc::new(session), end))
    }

    /// Take a new worker's region and doorbells in place of the dead one's: the session is live again
    /// (its jobs, output and shell state stay) and waits for the new worker's hello. The journal notes
    /// the switch so a restarted front replays the old ring's batches correctly (`kernel/recovery.rs`).
    pub fn replace_worker(&self, fds: SessionFds, worker: WorkerInfo) -> Result<EventEnd, AttachError> {
        let ring = ring_id(&fds);
        let (cmd, end) = map_rings(fds)?;
        *self.cmd.lock().unwrap_or_else(|e| e.into_inner()) = cmd;
        let mut st = self.lock();
        let (note, at_unix_ns) = st
            .worker
            .lost
            .take()
            .map_or_else(|| (String::new(), crate::jobs::job::unix_ns()), |l| (l.note, l.at_unix_ns));
        let last_job = st.last_job();
        st.journal.append(&crate::sessions::journal::Entry::RevivedAt { note, last_job, at_unix_ns });
        st.ring = ring;
        st.journal.append(&crate::sessions::journal::Entry::Ring { id: ring });
        st.worker.shell = None;
        st.worker.sandbox = None;
        st.worker.info = Some(worker);
        st.worker.revivals.push_back(Instant::now());
        self.lost.store(false, Ordering::SeqCst);
        drop(st);
        self.changed.notify_all();
        Ok(end)
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }

    pub fn spec(&self) -> &SessionSpec {
        &self.spec
    }

    pub fn jobs_dir(&self) -> PathBuf {
        self.spec.dir.join("jobs")
    }

    /// True when a client of `uid` may use this session (its owner, or root).
    pub fn visible_to(&self, uid: u32) -> bool {
        uid == self.spec.owner_uid || uid == 0
    }

    /// Lock the session's data (a panic elsewhere does not make the session unusable).
    pub fn lock(&self) -> MutexGuard<'_, SessionData> {
        self.data.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wake everyone waiting on this session (take the lock first so no waiter misses it).
    pub fn notify(&self) {
        drop(self.lock());
        self.changed.notify_all();
    }

    /// Wait until `done` holds, `deadline` passes, or `stop` is set; returns the guard.
    pub fn wait_until<'a>(
        &'a self,
        mut st: MutexGuard<'a, SessionData>,
        deadline: Instant,
        stop: &AtomicBool,
        mut done: impl FnMut(&SessionData) -> bool,
    ) -> MutexGuard<'a, SessionData> {
        loop {
            let now = Instant::now();
            if done(&st) || stop.load(Ordering::SeqCst) || now >= deadline {
                return st;
            }
            st = self.changed.wait_timeout(st, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// Mark the session lost (see [`SessionData::mark_lost`]) and wake waiters.
    pub fn mark_lost(&self, note: String, killed: Vec<Survivor>) {
        self.lock().mark_lost(note, killed, Instant::now());
        self.lost.store(true, Ordering::SeqCst);
        self.changed.notify_all();
    }

    /// The session's worker died: mark it lost (see [`SessionData::mark_lost`]) as one a new worker may
    /// be started for. `verified_empty` is what the supervisor's teardown found (`None`: not known); the
    /// record keeps `false` once any teardown said so. A death already recorded keeps its note and counts.
    pub fn mark_worker_died(
        &self,
        note: String,
        killed: Vec<Survivor>,
        killed_more: u32,
        verified_empty: Option<bool>,
    ) {
        let mut st = self.lock();
        let recorded = st.worker.lost.as_ref().is_some_and(|l| l.worker_died);
        st.mark_lost(note, killed, Instant::now());
        if let Some(l) = st.worker.lost.as_mut() {
            if !recorded {
                l.worker_died = true;
                l.killed_more = killed_more;
            }
            l.death_verified_empty = match (l.death_verified_empty, verified_empty) {
                (Some(a), Some(b)) => Some(a && b),
                (a, b) => a.or(b),
            };
        }
        drop(st);
        self.lost.store(true, Ordering::SeqCst);
        self.changed.notify_all();
    }

    /// Push one command to the worker, waiting up to `timeout` for room in a full ring.
    pub fn send(&self, cmd: &Command, timeout: Duration) -> Result<(), SendError> {
        let mut ring = self.cmd.lock().unwrap_or_else(|e| e.into_inner());
        let CmdRing { producer, scratch, cmd_data, cmd_space, .. } = &mut *ring;
        shm_proto::frame::encode(cmd, scratch).map_err(SendError::Encode)?;
        let deadline = Instant::now() + timeout;
        loop {
            match producer.try_push(scratch) {
                Ok(()) => break,
                Err(PushError::Full) => self.wait_for_space(producer, cmd_space, scratch.len(), (deadline, timeout))?,
                Err(PushError::TooLarge { len, max }) => return Err(SendError::TooLarge { len, max }),
                Err(e) => return Err(SendError::Ring(e)),
            }
        }
        if producer.wake_needed() {
            cmd_data.notify().map_err(SendError::Notify)?;
        }
        Ok(())
    }

    /// Push one command if the ring is free and has room now; never waits (for hints). True if pushed.
    pub fn try_send(&self, cmd: &Command) -> bool {
        let Ok(mut ring) = self.cmd.try_lock() else { return false };
        let CmdRing { producer, scratch, cmd_data, .. } = &mut *ring;
        if shm_proto::frame::encode(cmd, scratch).is_err() || producer.try_push(scratch).is_err() {
            return false;
        }
        if producer.wake_needed() {
            let _ = cmd_data.notify();
        }
        true
    }

    fn wait_for_space(
        &self,
        p: &Producer,
        cmd_space: &EventFd,
        len: usize,
        (deadline, timeout): (Instant, Duration),
    ) -> Result<(), SendError> {
        let now = Instant::now();
        if now >= deadline {
            return Err(SendError::Timeout(timeout));
        }
        if self.lost.load(Ordering::SeqCst) {
            return Err(SendError::Lost);
        }
        if p.park_prepare(len) {
            // Wake at least every 100 ms to notice a lost session.
            let ms = (deadline - now).as_millis().clamp(1, 100) as i32;
            let _ = cmd_space.wait(ms);
        }
        p.park_done();
        let _ = cmd_space.drain();
        Ok(())
    }

    /// Pop and apply waiting events (up to a budget); the pump calls this. The batch is journaled, its
    /// output written to the job logs, and only then is the ring's head released (`sessions/journal.rs`).
    pub fn drain_events(&self, end: &mut EventEnd, scratch: &mut Vec<u8>) -> Drained {
        if end.consumer.is_empty() {
            return Drained::Empty;
        }
        let from = end.consumer.positions().1;
        let (mut events, mut corrupt) = (Vec::new(), None);
        while events.len() < DRAIN_BUDGET {
            match end.consumer.pop_msg::<Event>(scratch) {
                Ok(Some(ev)) => events.push(ev),
                Ok(None) => break,
                Err(PopError::Frame(e)) => {
                    tracing::warn!("session '{}': skipping a bad event frame: {e}", self.name())
                }
                Err(PopError::Corrupt(why)) => {
                    corrupt = Some(why);
                    break;
                }
                Err(_) => {
                    corrupt = Some("an unknown ring error");
                    break;
                }
            }
        }
        let to = end.consumer.positions().1;
        // The batch's arrival: taken once the last of its frames is popped, so no frame is stamped before
        // the worker published it (one that arrived while the batch was popped had been, by a few µs).
        let (now, ns) = (Instant::now(), unix_ns());
        let mut st = self.lock();
        let live = !st.subscribers.is_empty();
        let mut wake = false;
        let mut hint = None;
        if to != from {
            st.journal_batch(from, to, &events);
            let version = st.record.version();
            for ev in events {
                wake |= st.apply(ev, now, ns);
            }
            if st.record.version() != version {
                hint = crate::sessions::prestart::next_hint(self, &st);
            }
            st.flush();
            end.consumer.release();
        }
        if let Some(why) = corrupt {
            let note = format!("the session's event ring is corrupt ({why}), so its worker can no longer be heard");
            tracing::info!("session '{}': {note}", self.name());
            st.mark_lost(note, Vec::new(), now);
            self.lost.store(true, Ordering::SeqCst);
            wake = true;
        }
        drop(st);
        if let Some(hint) = hint {
            crate::sessions::prestart::send(self, hint);
        }
        if end.consumer.producer_wake_needed() {
            let _ = end.evt_space.notify();
        }
        if wake {
            self.changed.notify_all();
        }
        if corrupt.is_some() {
            Drained::Corrupt
        } else if live {
            Drained::Live
        } else {
            Drained::Some
        }
    }

    /// Write every job's buffered output.
    pub fn flush(&self) {
        let mut st = self.lock();
        if !st.dirty.is_empty() {
            st.flush();
        }
    }

    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpc::results::JobPhase;
    use shm_proto::msg::Stream;
    use shm_proto::region::RegionConfig;

    struct Fixture {
        _dir: tempfile::TempDir,
        s: std::sync::Arc<Session>,
        end: EventEnd,
        region: Region,
        /// The region's memfd, for writing garbage into it.
        file: std::fs::File,
    }

    fn session(cfg: RegionConfig) -> Fixture {
        let (region, memfd) = Region::create(cfg).unwrap();
        let file = std::fs::File::from(memfd.try_clone().unwrap());
        let e = || EventFd::new().unwrap();
        let fds = SessionFds { memfd, cmd_data: e(), cmd_space: e(), evt_data: e(), evt_space: e() };
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("jobs")).unwrap();
        let spec = SessionSpec {
            name: "t".into(),
            serial: 1,
            owner_uid: 1000,
            cgroup: "/cg".into(),
            cwd: "/".into(),
            env: vec![],
            dir: dir.path().into(),
            persistent: false,
        };
        let (s, end) = Session::attach(spec, fds).unwrap();
        Fixture { _dir: dir, s, end, region, file }
    }

    #[test]
    fn attach_writes_the_front_pid() {
        let f = session(RegionConfig::default());
        assert_eq!(f.region.header().front_pid.load(Ordering::Relaxed), std::process::id());
    }

    #[test]
    fn announcements_are_taken_once() {
        let mut st = SessionData::default();
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (st.add_job("a".into(), dir.path()), st.add_job("b".into(), dir.path()));
        let now = Instant::now();
        st.apply(Event::Exited { job: a, code: Some(0), signal: None, at_unix_ns: 0, killed: false }, now, 0);
        let first = st.take_announcements(now);
        assert_eq!(first.iter().map(|x| x.job).collect::<Vec<_>>(), [a]);
        assert!(st.take_announcements(now).is_empty(), "never twice");
        st.apply(Event::SpawnFailed { job: b, error: "nope".into() }, now, 0);
        let second = st.take_announcements(now);
        assert_eq!((second.len(), second[0].state), (1, JobPhase::Failed));
    }

    #[test]
    fn announcements_look_past_a_running_job_and_come_back_for_a_conflict() {
        let mut st = SessionData::default();
        let dir = tempfile::tempdir().unwrap();
        let now = Instant::now();
        let exit = |st: &mut SessionData, job| {
            st.apply(Event::Exited { job, code: Some(0), signal: None, at_unix_ns: 0, killed: false }, now, 0)
        };
        let ids: Vec<JobId> = (0..4).map(|i| st.add_job(format!("j{i}"), dir.path())).collect();
        for &id in &ids[..3] {
            exit(&mut st, id);
        }
        let first: Vec<_> = st.take_announcements(now).iter().map(|a| a.job).collect();
        assert_eq!(first, ids[..3]);
        let later = st.add_job("later".into(), dir.path());
        exit(&mut st, later);
        let second: Vec<_> = st.take_announcements(now).iter().map(|a| a.job).collect();
        assert_eq!(second, [later], "a job after a running one is announced");
        exit(&mut st, ids[3]);
        let third: Vec<_> = st.take_announcements(now).iter().map(|a| a.job).collect();
        assert_eq!(third, [ids[3]]);
        assert!(st.take_announcements(now).is_empty());
        st.note_overridden(later, vec![(ids[0], "cwd".into())]);
        let again = st.take_announcements(now);
        assert_eq!(again.iter().map(|a| a.job).collect::<Vec<_>>(), [ids[0]], "a conflict on an old job");
        assert_eq!(again[0].state_conflicts.len(), 1);
        assert!(st.take_announcements(now).is_empty(), "once");
    }

    #[test]
    fn lost_marks_only_unfinished_jobs_and_not_while_closing() {
        let dir = tempfile::tempdir().unwrap();
        let now = Instant::now();
        let mut st = SessionData::default();
        let (a, b) = (st.add_job("a".into(), dir.path()), st.add_job("b".into(), dir.path()));
        st.apply(Event::Exited { job: a, code: Some(1), signal: None, at_unix_ns: 0, killed: false }, now, 0);
        st.mark_lost("worker died".into(), vec![], now);
        assert_eq!((st.jobs[&a].state(), st.jobs[&b].state()), (JobPhase::Exited, JobPhase::Lost));
        let mut closing = SessionData { closing: true, ..Default::default() };
        let c = closing.add_job("c".into(), dir.path());
        closing.mark_lost("worker died".into(), vec![], now);
        assert_eq!((closing.jobs[&c].state(), closing.lost().is_none()), (JobPhase::Running, true));
    }

    #[test]
    fn probe_numbers_are_fresh_and_each_answer_is_taken_once() {
        let mut st = SessionData::default();
        let (a, b) = (st.new_probe(), st.new_probe());
        assert_ne!(a, b);
        assert!(!st.probe_answered(a));
        assert!(st.apply(Event::Status { job: 1, probe: a, liveness: None }, Instant::now(), 0));
        assert!(st.probe_answered(a) && !st.probe_answered(b));
        assert_eq!(st.take_probe_answer(a), Some(None), "answered: the job was not running");
        assert_eq!(st.take_probe_answer(a), None, "once");
    }

    #[test]
    fn revivals_older_than_the_window_are_forgotten() {
        let mut st = SessionData::default();
        let now = Instant::now();
        let ago = |s| now.checked_sub(Duration::from_secs(s)).unwrap();
        st.worker.revivals.extend([ago(90), ago(61), ago(30), ago(1)]);
        assert_eq!(st.recent_revivals(now, Duration::from_secs(60)), 2);
        assert_eq!(st.worker.revivals.len(), 2, "the older ones are dropped");
        assert_eq!(st.recent_revivals(now, Duration::from_secs(120)), 2, "and stay dropped");
    }

    #[test]
    fn events_for_unknown_jobs_are_ignored() {
        let mut st = SessionData::default();
        let ev =
            Event::Output { job: 9, stream: Stream::Stdout, read_mono_ns: 1, read_unix_ns: 1, data: b"x".to_vec() };
        assert!(!st.apply(ev, Instant::now(), 0));
        assert!(st.jobs.is_empty());
    }

    #[test]
    fn a_full_command_ring_times_out_and_a_drained_one_takes_more() {
        let cfg = RegionConfig { cmd_capacity: 4096, evt_capacity: 4096 };
        let Fixture { s, region, .. } = session(cfg);
        let cmd = Command::Kill { job: 1, grace_ms: 0 };
        let mut sent = 0;
        while s.send(&cmd, Duration::from_millis(30)).is_ok() {
            sent += 1;
        }
        assert!(sent > 10, "ring took {sent} commands");
        let mut worker = region.cmd_consumer();
        let mut out = Vec::new();
        assert!(worker.try_pop(&mut out).unwrap());
        s.send(&cmd, Duration::from_millis(30)).unwrap();
    }

    #[test]
    fn a_bad_frame_is_skipped_and_a_corrupt_ring_loses_the_session() {
        use std::os::unix::fs::FileExt;
        let Fixture { s, mut end, region, file, .. } = session(RegionConfig::default());
        let job = s.lock().add_job("x".into(), &s.jobs_dir());
        let mut p = region.evt_producer();
        p.try_push(&[0xff; 8]).unwrap(); // a frame that does not decode: skipped
        let mut scratch = Vec::new();
        assert_eq!(s.drain_events(&mut end, &mut scratch), Drained::Some);
        assert_eq!(s.lock().jobs[&job].state(), JobPhase::Running);
        assert!(!s.is_lost());
        // Overwrite the next frame's length: the evt ring's data starts 512 bytes after its offset, and the
        // first frame (64-byte header slot + 8-byte body, padded to 64) took bytes 0..128.
        p.try_push(b"whatever").unwrap();
        let data = region.header().evt_offset.load(Ordering::Relaxed) + 512;
        file.write_at(&u32::MAX.to_le_bytes(), data + 128).unwrap();
        assert_eq!(s.drain_events(&mut end, &mut scratch), Drained::Corrupt);
        assert!(s.is_lost());
        let st = s.lock();
        assert_eq!(st.jobs[&job].state(), JobPhase::Lost);
        assert!(st.lost().unwrap().note.contains("corrupt"));
    }
}
