//! A job's record in the front: its lifecycle (phase, exit, times, pid: a private `Lifecycle`), its
//! output ([`crate::jobs::output_part`]), its shell-state part ([`crate::jobs::shell_part`]), notes, and
//! the bookkeeping that decides whether its end still has to be announced. `result`, `announce` and
//! `summary` take what they say alike from one place (`Facts`).
//!
//! Phases move only forward: `running` → `exited` | `killed` | `failed` | `lost`, once. Events that
//! arrive for an ended job change nothing but its output (processes the job left behind may still
//! write until its pipes close) and `settled`. `reported` turns true when a response carried the job's
//! final result or its announcement; it never turns false.
//!
//! ```
//! use front::jobs::job::Job;
//! use front::rpc::results::JobPhase;
//! use std::time::Instant;
//! let dir = tempfile::tempdir().unwrap();
//! let mut j = Job::new(1, "true".into(), dir.path().join("1.log"));
//! j.on_exited(Some(0), None, 0, false, Instant::now());
//! assert_eq!(j.state(), JobPhase::Exited);
//! ```

use crate::jobs::output_part::JobOutput;
use crate::output::rendered::RenderedOutput;
use crate::output::store::{ReadPlan, StoreError, StoredChunk};
use crate::output::view::{self, Omission};
use crate::rpc::results::{
    join_notes, millis, Announcement, JobPhase, JobResult, JobSummary, Liveness, Omitted, Survivor, Usage,
};
use serde::{Deserialize, Serialize};
use shm_proto::msg::{JobId, Stream};
use shm_proto::msg::{JobLiveness, JobUsage, ProcStat};
use shm_proto::procs::ProcList;
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub use shm_proto::sys::unix_ns;

/// One job.
#[derive(Debug, Serialize, Deserialize)]
pub struct Job {
    id: JobId,
    cmd: String,
    life: Lifecycle,
    output: JobOutput,
    kill_requested: bool,
    reported: bool,
    /// Processes of the job still ran when it was reported (survivors, or a kept job's processes
    /// holding its pipes): their end is announced too, once.
    rest_watched: bool,
    /// What the job left running ended after it was reported, and no response has said so yet.
    rest_unannounced: bool,
    notes: Vec<String>,
    /// What the kernel refused the job, in sentences (network off: its refused sockets).
    kernel_refusals: Vec<String>,
    /// The network-off refusal in full and briefly ([`Job::on_network_refused`]).
    network_refusal: Option<Box<(String, String)>>,
    shell: crate::jobs::shell_part::JobShellState,
    /// Processes left in the job's cgroup after its main process exited (until it empties).
    survivors: Option<ProcList<ProcStat>>,
    /// When the job's cgroup emptied, and what it accounted.
    emptied: Option<(u64, JobUsage)>,
    kept: Option<String>,
    /// `session.close` ended the job and whatever it left running (the session's cgroups were killed).
    closed: bool,
    oom_killed: bool,
    /// The job ran on a shell pre-started for it (`Started { prestarted }`).
    prestarted: bool,
    /// The job's cgroup, relative to the session's (`Started { cgroup }`; `None` before it started or
    /// when it has none of its own).
    cgroup: Option<String>,
    files: Vec<crate::rpc::results::FileResult>,
    /// Preflight warnings given at launch.
    pub warnings: Vec<String>,
    /// Set when a guard refused the command and only its files are being written: the job ends
    /// `refused` with these notes instead of `exited` (`job_run`).
    refusal: Option<Vec<String>>,
    /// The per-job output cap in bytes (see [`crate::output::retention`]).
    pub cap: u64,
    /// Why output was removed last (said in every view).
    pub removed_why: Option<String>,
    /// A check's job (`kernel::check_run`): its routing, and what the parser read once it ended.
    pub check: Option<Box<protocol::checks::CheckReport>>,
    /// The effects ledger's project part, as the worker reported it (`Event::Effects`).
    pub effects: Option<Box<shm_proto::msg::ProjectEffects>>,
    /// This record was read back from disk: the job was let go from memory once
    /// ([`crate::jobs::frozen`]), and its session counts it there.
    #[serde(skip)]
    on_disk: bool,
}

/// The job's phase and its times: submitted, started (with its pid), ended (with how).
#[derive(Debug, Serialize, Deserialize)]
struct Lifecycle {
    phase: JobPhase,
    exit_code: Option<i32>,
    signal: Option<i32>,
    #[serde(with = "crate::jobs::frozen::instant")]
    submitted: Instant,
    submitted_unix_ns: u64,
    /// When the worker said it started: our clock, and the worker's `at_unix_ns`.
    #[serde(with = "crate::jobs::frozen::opt_instant_and")]
    started: Option<(Instant, u64)>,
    /// When it ended: our clock, and the worker's `at_unix_ns` when it told one.
    #[serde(with = "crate::jobs::frozen::opt_instant_and")]
    ended: Option<(Instant, Option<u64>)>,
    pid: Option<u32>,
}

impl Lifecycle {
    fn new() -> Lifecycle {
        Lifecycle {
            phase: JobPhase::Running,
            exit_code: None,
            signal: None,
            submitted: Instant::now(),
            submitted_unix_ns: unix_ns(),
            started: None,
            ended: None,
            pid: None,
        }
    }

    /// Move to an end phase; false (nothing changes) if the job already ended.
    fn end(&mut self, phase: JobPhase, now: Instant, at_unix_ns: Option<u64>) -> bool {
        if self.phase.ended() {
            return false;
        }
        self.phase = phase;
        self.ended = Some((now, at_unix_ns));
        true
    }

    /// From start (or submission) to the end, or to `now`; by the worker's clock when it told both ends.
    fn duration(&self, now: Instant) -> Duration {
        let start = self.started.map_or(self.submitted, |s| s.0);
        match (self.started, self.ended) {
            (Some((_, a)), Some((_, Some(b)))) if b >= a => Duration::from_nanos(b - a),
            (_, Some((end, _))) => end.saturating_duration_since(start),
            (_, None) => now.saturating_duration_since(start),
        }
    }
}

/// What every answer about a job says the same way (`result`, `announce`, `summary`), built once.
struct Facts {
    cmd: String,
    state: JobPhase,
    exit_code: Option<i32>,
    signal: Option<i32>,
    duration_ms: f64,
    survivors: Vec<Survivor>,
    survivors_more: u32,
    settled: bool,
    liveness: Option<Liveness>,
    usage: Option<Usage>,
    kept: Option<String>,
    oom_killed: bool,
    state_conflicts: Vec<String>,
}

impl Job {
    /// A job just submitted; its output goes to `log_path` (and its line log beside it).
    pub fn new(id: JobId, cmd: String, log_path: PathBuf) -> Job {
        Job::with_files(id, cmd, log_path, None)
    }

    /// [`Job::new`], with its two files already made (empty, open at `log_path` and beside it: see
    /// [`crate::jobs::files`]) or, with `None`, made now.
    pub fn with_files(id: JobId, cmd: String, log_path: PathBuf, files: Option<crate::jobs::files::JobFiles>) -> Job {
        Job {
            id,
            cmd,
            life: Lifecycle::new(),
            output: JobOutput::new(log_path, files),
            kill_requested: false,
            reported: false,
            rest_watched: false,
            rest_unannounced: false,
            notes: Vec::new(),
            kernel_refusals: Vec::new(),
            network_refusal: None,
            shell: Default::default(),
            survivors: None,
            emptied: None,
            kept: None,
            closed: false,
            oom_killed: false,
            prestarted: false,
            cgroup: None,
            files: Vec::new(),
            warnings: Vec::new(),
            refusal: None,
            cap: crate::output::retention::config().job_bytes,
            removed_why: None,
            check: None,
            effects: None,
            on_disk: false,
        }
    }

    pub fn id(&self) -> JobId {
        self.id
    }

    /// `(exit_code, signal)` once known.
    pub fn exit(&self) -> (Option<i32>, Option<i32>) {
        (self.life.exit_code, self.life.signal)
    }

    pub fn state(&self) -> JobPhase {
        self.life.phase
    }

    pub fn reported(&self) -> bool {
        self.reported
    }

    /// True once no more output can arrive.
    pub fn settled(&self) -> bool {
        self.output.streams_closed() || matches!(self.life.phase, JobPhase::Lost | JobPhase::Failed | JobPhase::Refused)
    }

    /// True once nothing of the job runs in the session any more: its cgroup emptied, it was kept, or it
    /// was lost or never started.
    pub fn cgroup_settled(&self) -> bool {
        self.emptied.is_some()
            || self.kept.is_some()
            || self.closed
            || matches!(self.life.phase, JobPhase::Lost | JobPhase::Failed | JobPhase::Refused)
    }

    /// True once the worker said what remains after the main process's exit (survivors or empty).
    /// A kept job still running when its session closed has nothing more to tell here either.
    pub fn end_known(&self) -> bool {
        (self.life.phase.ended() || self.closed) && (self.cgroup_settled() || self.survivors.is_some())
    }

    /// True when a probe tells more: the job runs, or it ended and survivors may still run.
    pub fn worth_probing(&self) -> bool {
        (!self.life.phase.ended() && !self.closed) || (self.survivors.is_some() && !self.cgroup_settled())
    }

    /// The job's processes still alive after its main process exited.
    pub fn survivors(&self) -> Vec<Survivor> {
        match (&self.survivors, self.cgroup_settled()) {
            (Some(v), false) => v.iter().map(crate::rpc::results::survivor).collect(),
            _ => Vec::new(),
        }
    }

    /// Survivors beyond [`Job::survivors`], counted only.
    pub fn survivors_more(&self) -> u32 {
        match (&self.survivors, self.cgroup_settled()) {
            (Some(v), false) => v.more(),
            _ => 0,
        }
    }

    pub fn on_survivors(&mut self, procs: ProcList<ProcStat>) {
        self.notes.retain(|n| !n.contains("outlived its main process"));
        if procs.total() > 0 {
            let n = procs.total();
            let more = match procs.more() {
                0 => String::new(),
                m => format!(" ({} listed, and {m} more)", procs.len()),
            };
            self.note(format!(
                "{n} process(es) of the job outlived its main process and still run in its cgroup{more}; \
                 kill the job to end them, or keep it to let them outlive the session"
            ));
        }
        self.survivors = Some(procs);
    }

    pub fn on_emptied(&mut self, at_unix_ns: u64, usage: JobUsage) {
        self.emptied.get_or_insert((at_unix_ns, usage));
        self.notes.retain(|n| !n.contains("outlived its main process"));
        self.check_rest();
    }

    /// Something of the job still runs after it ended: survivors in its cgroup, or a kept job's
    /// processes that still hold its pipes.
    fn rest_running(&self) -> bool {
        match self.kept {
            Some(_) => !self.output.streams_closed(),
            None => self.survivors.as_ref().is_some_and(|p| p.total() > 0) && self.emptied.is_none(),
        }
    }

    /// Called as the job is reported: watch what it left running, so its end is announced.
    fn watch_rest(&mut self) {
        self.rest_unannounced = false;
        self.rest_watched = self.life.phase.ended() && self.rest_running();
    }

    /// What the job left running ended (its cgroup emptied and its pipes closed; for a kept job, whose
    /// cgroup left the session, its pipes closed): announce it, unless a kill asked for that end.
    fn check_rest(&mut self) {
        let done = self.output.streams_closed() && (self.emptied.is_some() || self.kept.is_some());
        if self.rest_watched && done {
            self.rest_watched = false;
            self.rest_unannounced = !self.kill_requested;
        }
    }

    /// True when nothing about the job can change or is owed any more, so its session may let it go
    /// from memory: it ended and was reported, nothing of it is left to announce or to run, it is not
    /// kept, its output is complete, on disk and parked, and a check's parse is done.
    pub fn done_with(&self) -> bool {
        self.quiet()
            && !self.needs_announcement()
            && !self.rest_watched
            && self.kept.is_none()
            && self.settled()
            && self.cgroup_settled()
            && self.output.streams_closed()
            && self.output.parked()
            && !self.output.files_open()
            && !self.dirty()
            && self.check.as_ref().is_none_or(|c| c.parsed.is_some() || c.note.is_some())
    }

    /// This record was read back from disk (see [`Job::done_with`]).
    pub fn on_disk(&self) -> bool {
        self.on_disk
    }

    pub fn set_on_disk(&mut self) {
        self.on_disk = true;
    }

    /// True when nothing about the job remains to be announced now. What it left running may still end
    /// later: the session lowers its mark to the job then (`SessionData::quiet_below`), so a server
    /// that runs for days does not make every call walk the jobs after it.
    pub fn quiet(&self) -> bool {
        self.life.phase.ended() && self.reported && !self.rest_unannounced
    }

    /// The kernel refused the job something (a sentence from [`crate::sessions::sandbox`]).
    /// The network-off refusal, said in full (`full`) when the job failed and briefly (`brief`) when it
    /// exited 0: the symptoms it lists are for a failure to explain.
    pub fn on_network_refused(&mut self, full: String, brief: String) {
        self.network_refusal = Some(Box::new((full, brief)));
    }

    /// What the kernel refused the job, in sentences.
    fn refusals(&self) -> Vec<String> {
        let mut r = self.kernel_refusals.clone();
        if let Some(n) = &self.network_refusal {
            r.push(if self.life.exit_code == Some(0) { n.1.clone() } else { n.0.clone() });
        }
        r
    }

    pub fn on_kernel_refusal(&mut self, sentence: String) {
        if !self.kernel_refusals.contains(&sentence) {
            self.kernel_refusals.push(sentence);
        }
    }

    pub fn on_oom_killed(&mut self) {
        self.oom_killed = true;
        self.note("the kernel's OOM killer killed a process of the job: the session's memory limit was reached".into());
    }

    pub fn set_kept(&mut self, name: String) {
        self.kept = Some(name);
        // Its processes left the session: only its pipes can still tell their end.
        if self.output.streams_closed() {
            self.rest_watched = false;
        }
    }

    /// `kept.kill` ends what the kept job left running: an end asked for, not announced.
    pub fn on_kept_kill(&mut self) {
        self.rest_watched = false;
    }

    pub fn kept(&self) -> Option<&str> {
        self.kept.as_deref()
    }

    pub fn pid(&self) -> Option<u32> {
        self.life.pid
    }

    /// The job's cgroup, relative to the session's (a job cgroup is reused by later jobs once empty).
    pub fn cgroup(&self) -> Option<&str> {
        self.cgroup.as_deref()
    }

    fn usage(&self) -> Option<Usage> {
        self.emptied.map(|(at, u)| Usage {
            cpu_ms: u.cpu_usec as f64 / 1000.0,
            procs_seen: u.procs_seen,
            emptied_at_ms: at / 1_000_000,
            memory_peak: u.memory_peak,
        })
    }

    /// CPU time accounted once the cgroup emptied (0 before).
    pub fn cpu_ms(&self) -> f64 {
        self.emptied.map_or(0.0, |(_, u)| u.cpu_usec as f64 / 1000.0)
    }

    /// Liveness of a running job, with the worker's probe when it answered.
    pub fn liveness(&self, now: Instant, probe: Option<&JobLiveness>) -> Option<Liveness> {
        (self.life.phase == JobPhase::Running).then(|| Liveness {
            running_ms: self.duration(now).as_millis() as u64,
            last_output_ms_ago: self.output.last_output().map(|t| now.saturating_duration_since(t).as_millis() as u64),
            pid: self.life.pid,
            cpu_ms: probe.map(|p| p.cpu_usec as f64 / 1000.0),
            procs: probe.map(|p| p.procs),
            busy_pid: probe.map(|p| p.pid),
            busy_cmdline: probe.map(|p| crate::rpc::results::redacted(&p.cmdline)),
            proc_state: probe.map(|p| p.state.clone()),
            wchan: probe.map(|p| p.wchan.clone()),
            activity: probe.map(|p| p.activity.clone()),
        })
    }

    /// Add a sentence to the job's notes (shown in every later result).
    pub fn note(&mut self, note: String) {
        if !self.notes.contains(&note) {
            self.notes.push(note);
        }
    }

    pub fn set_kill_requested(&mut self) {
        self.kill_requested = true;
    }

    pub fn on_started(&mut self, pid: u32, at_unix_ns: u64, prestarted: bool, cgroup: String, now: Instant) {
        if self.life.started.is_none() {
            // A `Started` replayed by a rebuilt front is older than `now`: the job has run since the
            // worker's stamp (a running job's time began again at every takeover). A live one is µs old.
            let behind = Duration::from_nanos(unix_ns().saturating_sub(at_unix_ns));
            let since = if behind > Duration::from_secs(1) && behind < Duration::from_secs(30 * 86_400) {
                now.checked_sub(behind).unwrap_or(now)
            } else {
                now
            };
            self.life.started = Some((since, at_unix_ns));
            self.life.pid = Some(pid);
            self.prestarted = prestarted;
            self.cgroup = Some(cgroup).filter(|c| !c.is_empty());
        }
    }

    /// A guard refused the command before launch: the job ends `refused`, and nothing of it ran.
    /// A guard refused the command before any process ran: no output will come, so the output is
    /// settled (its files let go) as a lost job's is.
    pub fn on_refused(&mut self, why: Vec<String>, now: Instant) {
        if self.end(JobPhase::Refused, now, None) {
            for w in why {
                self.note(w);
            }
        }
        self.output.settle();
        self.park_output();
    }

    /// The job could not be launched: no process, no output.
    pub fn on_spawn_failed(&mut self, error: &str, now: Instant) {
        if self.end(JobPhase::Failed, now, None) {
            self.note(format!("the job could not be launched: {error}"));
        }
        self.output.settle();
        self.park_output();
    }

    pub fn on_output(&mut self, stream: Stream, data: &[u8], now: Instant, unix_ns: u64) {
        if self.output.push(stream, data, now, unix_ns) > self.cap {
            let why = format!("max {} per job", crate::output::sniff::human_bytes(self.cap));
            self.remove_output(self.cap, &why);
        }
    }

    /// A guard refused the command; the job only writes the call's files, then ends `refused`.
    pub fn refuse_on_exit(&mut self, why: Vec<String>) {
        self.refusal = Some(why);
    }

    pub fn on_exited(&mut self, code: Option<i32>, signal: Option<i32>, at_unix_ns: u64, killed: bool, now: Instant) {
        if let Some(why) = self.refusal.take() {
            if self.end(JobPhase::Refused, now, Some(at_unix_ns)) {
                why.into_iter().for_each(|w| self.note(w));
            }
            return;
        }
        let state = if killed { JobPhase::Killed } else { JobPhase::Exited };
        if self.end(state, now, Some(at_unix_ns)) {
            // Exactly one of the two is set once the job ended: a signal wins.
            self.life.signal = signal;
            self.life.exit_code = if signal.is_some() { None } else { code };
            if code.is_none() && signal.is_none() {
                self.note("the worker reported neither an exit code nor a signal".to_owned());
            }
            if self.kill_requested && !killed {
                self.note("the job ended on its own before the kill took effect".to_owned());
            }
        }
    }

    /// The job starts from this state snapshot.
    pub fn set_state_base(&mut self, version: u64, base: std::sync::Arc<shm_proto::capture::Items>) {
        self.shell.base = Some((version, base));
    }

    /// The job's capture is scoped to these variables (`RunSpec::capture_only`; see `shell::scope`).
    pub fn set_capture_scope(&mut self, names: Option<Vec<String>>) {
        self.shell.scope = names;
    }

    /// The job runs in the session's persistent shell (its capture diffs against the record as it is then).
    pub fn set_in_persistent_shell(&mut self) {
        self.shell.persistent = true;
    }

    pub fn in_persistent_shell(&self) -> bool {
        self.shell.persistent
    }

    /// The worker sent the job's capture: apply it to the session's record.
    /// Returns the earlier jobs whose changes this one overrode, with the items.
    pub fn on_state_captured(
        &mut self,
        data: &[u8],
        record: &mut crate::shell::record::StateRecord,
    ) -> Vec<(u64, String)> {
        let overridden = self.shell.captured(data, record, self.id);
        self.warnings.extend(crate::shell::failures::warnings(&self.cmd, &self.shell.failures));
        overridden
    }

    /// A later job overrode `items` this one changed.
    pub fn on_state_overridden(&mut self, by: u64, items: &[String]) {
        self.shell.overridden(by, items);
    }

    pub fn on_state_unknown(&mut self, reason: &str) {
        self.shell.unknown(reason);
    }

    pub fn on_streams_closed(&mut self) {
        self.output.close_streams();
        self.check_rest();
        self.park_output();
    }

    /// An ended job that can write no more and was reported lets its rendered lines go: every view
    /// reads them back from the line log (see [`JobOutput::park`]). A session keeps every job
    /// it ran, so what an ended job holds is what a long session costs.
    fn park_output(&mut self) {
        if self.life.phase.ended() && self.reported {
            self.output.park();
        }
    }

    /// An estimate of the heap bytes the job holds (its record, output bookkeeping, notes and shell
    /// facts); shared data (the shell-state snapshot it started from) is not counted.
    pub fn held_bytes(&self) -> usize {
        use std::mem::size_of;
        let strings =
            |v: &Vec<String>| v.capacity() * size_of::<String>() + v.iter().map(String::capacity).sum::<usize>();
        let survivors = self
            .survivors
            .as_ref()
            .map_or(0, |p| p.iter().map(|s| size_of::<ProcStat>() + s.cmdline.capacity()).sum::<usize>());
        let files = self.files.capacity() * size_of::<crate::rpc::results::FileResult>()
            + self
                .files
                .iter()
                .map(|f| f.path.capacity() + f.error.as_ref().map_or(0, String::capacity))
                .sum::<usize>();
        size_of::<Job>()
            + self.cmd.capacity()
            + self.output.held_bytes()
            + strings(&self.notes)
            + strings(&self.kernel_refusals)
            + self.network_refusal.as_ref().map_or(0, |n| n.0.capacity() + n.1.capacity())
            + strings(&self.warnings)
            + self.shell.held_bytes()
            + survivors
            + files
            + self.kept.as_ref().map_or(0, String::capacity)
            + self.cgroup.as_ref().map_or(0, String::capacity)
            + self.removed_why.as_ref().map_or(0, String::capacity)
            + self.check.as_ref().map_or(0, |_| size_of::<protocol::checks::CheckReport>())
            + self.effects.as_ref().map_or(0, |_| size_of::<shm_proto::msg::ProjectEffects>())
    }

    /// Whether the job still holds its output files open (only while it can write).
    pub fn files_open(&self) -> bool {
        self.output.files_open()
    }

    /// The worker died (or its ring broke): an unfinished job is lost, never re-run.
    /// Whether this ended the job (it was still running).
    pub fn mark_lost(&mut self, why: &str, now: Instant, at_unix_ns: Option<u64>) -> bool {
        // By the wall clock: a job rebuilt after a restart started (by its replayed `Started`) long before
        // this front's `now` (it said `lost · 879 µs` for a job of minutes). When it was lost is the
        // journal's time when a rebuild replays it (it grew at every restart), else now.
        let ended = self.end(JobPhase::Lost, now, Some(at_unix_ns.unwrap_or_else(unix_ns)));
        if ended {
            self.shell.unknown("the job was lost");
            self.note(format!("{why}; the job's outcome is unknown and it is not re-run"));
        }
        self.output.settle();
        self.park_output();
        ended
    }

    /// The session was closed under the job; whether this ended it (it was still running).
    pub fn mark_closed(&mut self, now: Instant) -> bool {
        if let (Some(name), false) = (&self.kept, self.state().ended()) {
            // A kept job was not killed: its processes run on in `kept/NAME`, and what they write goes to
            // the kept log from now on. Its record here stays `running`, with nothing more to come.
            let note = format!(
                "kept as {name}: it runs on outside the session, which was closed; what it writes from now on \
                 goes to its kept log (`heddle kept log {name}`)"
            );
            self.closed = true;
            self.note(note);
            self.output.settle();
            self.park_output();
            return false;
        }
        let ended = self.end(JobPhase::Killed, now, None);
        // The close killed the session's cgroups (SIGKILL, `cgroup.kill`): nothing of the job is left to
        // wait for, and a waiting call answers now.
        self.closed = true;
        if ended && self.kept.is_none() {
            self.life.signal = Some(9);
        }
        if ended {
            self.shell.unknown("the session was closed");
            self.note("ended by session.close".to_owned());
        }
        self.output.settle();
        self.park_output();
        ended
    }

    /// Move to an end phase; false (nothing changes) if the job already ended.
    fn end(&mut self, phase: JobPhase, now: Instant, at_unix_ns: Option<u64>) -> bool {
        let ended = self.life.end(phase, now, at_unix_ns);
        if ended {
            self.output.flush_store();
        }
        ended
    }

    /// Write buffered output to disk.
    pub fn flush(&mut self) {
        self.output.flush();
    }

    /// Bytes of the job's log file written so far.
    pub fn log_len(&self) -> u64 {
        self.output.log_len()
    }

    pub fn dirty(&self) -> bool {
        self.output.dirty()
    }

    pub fn duration(&self, now: Instant) -> Duration {
        self.life.duration(now)
    }

    /// Per-stream byte counts `[stdout, stderr]`.
    pub fn counts(&self) -> [u64; 2] {
        self.output.counts()
    }

    /// The job's output: its store, rendered lines and counts.
    pub fn output(&self) -> &JobOutput {
        &self.output
    }

    pub fn output_mut(&mut self) -> &mut JobOutput {
        &mut self.output
    }

    /// The rendered (model-facing, redacted) output.
    pub fn rendered(&self) -> &RenderedOutput {
        self.output.rendered()
    }

    pub fn rendered_mut(&mut self) -> &mut RenderedOutput {
        self.output.rendered_mut()
    }

    /// Plan a read of stored bytes (flushes first so the newest bytes are readable).
    pub fn plan_read(&mut self, stream: Stream, offset: u64) -> (ReadPlan, u64) {
        self.output.plan_read(stream, offset)
    }

    /// The stored chunks from stream offsets `from` on (flushes first); see [`JobOutput::chunks_from`].
    pub fn chunks_from(&mut self, from: [u64; 2], max: u64) -> Result<Vec<StoredChunk>, StoreError> {
        self.output.chunks_from(from, max)
    }

    /// The worker wrote (or refused) the job's files.
    pub fn on_files(&mut self, files: Vec<shm_proto::msg::FileOutcome>) {
        self.files = files
            .into_iter()
            .map(|f| crate::rpc::results::FileResult {
                path: String::from_utf8_lossy(&f.path).into_owned(),
                written: f.error.is_none(),
                error: f.error,
            })
            .collect();
    }

    /// Retention: remove the oldest output until at most `keep` bytes of the raw log and of the line
    /// log remain; `why` is said in every view. Returns true when something was removed.
    pub fn remove_output(&mut self, keep: u64, why: &str) -> bool {
        let removed = self.output.remove_oldest(keep, why);
        if removed {
            self.removed_why = Some(why.to_owned());
            crate::output::retention::save_removed(self.output.log_path(), &self.removed_record());
        }
        removed
    }

    /// What retention removed from the raw log, as `<job>.removed` keeps it for a restarted front.
    pub fn removed_record(&self) -> crate::output::retention::Removed {
        self.output.removed_record(self.removed_why.as_deref().unwrap_or_default())
    }

    /// A fresh job continuing a log retention had cut (a restarted front, before the kept records are
    /// replayed): byte counts and stream offsets go on from what was removed (line numbers start again
    /// at the first kept byte, said in a note), and the record is saved again for the new log (which
    /// starts with the first kept record).
    pub fn carry_removed(&mut self, r: &crate::output::retention::Removed) {
        self.output.carry_removed(r);
        self.removed_why = Some(r.why.clone());
        self.note("the front restarted after retention removed this job's oldest output: byte counts and raw offsets are exact, line numbers start again at the first kept byte".to_owned());
        crate::output::retention::save_removed(self.output.log_path(), &self.removed_record());
    }

    /// Bytes of output kept on disk (raw log and line log).
    pub fn kept_bytes(&self) -> u64 {
        self.output.kept_bytes()
    }

    /// Bytes of the line log kept (part of [`Job::kept_bytes`]).
    pub fn kept_lines_bytes(&self) -> u64 {
        self.output.kept_lines_bytes()
    }

    /// When the job ended, by our clock.
    pub fn ended_at(&self) -> Option<Instant> {
        self.life.ended.map(|(at, _)| at)
    }

    /// Raw bytes removed by retention per stream `[stdout, stderr]`, and lines removed (`1..=n`).
    pub fn removed(&self) -> ([u64; 2], u64) {
        self.output.removed()
    }

    /// The view's first line when retention removed output.
    pub fn retention_line(&self) -> Option<String> {
        self.output.retention_line(self.removed_why.as_deref()?)
    }

    /// The store's error, when storing stopped.
    pub fn store_error(&self) -> Option<&str> {
        self.output.store_error()
    }

    /// What `result`, `announce` and `summary` say alike.
    fn facts(&self, now: Instant) -> Facts {
        Facts {
            cmd: crate::rpc::results::redacted(&self.cmd),
            state: self.life.phase,
            exit_code: self.life.exit_code,
            signal: self.life.signal,
            duration_ms: millis(self.duration(now)),
            survivors: self.survivors(),
            survivors_more: self.survivors_more(),
            settled: self.settled() && self.cgroup_settled(),
            liveness: self.liveness(now, None),
            usage: self.usage(),
            kept: self.kept.clone(),
            oom_killed: self.oom_killed,
            state_conflicts: self.shell.conflicts.clone(),
        }
    }

    /// The full result. `final_result` marks the job reported when it has ended.
    /// The full result, its view within `budget` bytes. `final_result` marks the job reported when it
    /// has ended.
    pub fn result(
        &mut self,
        session: &str,
        now: Instant,
        extra: Vec<String>,
        final_result: bool,
        budget: usize,
    ) -> JobResult {
        if final_result && self.life.phase.ended() {
            self.reported = true;
            self.shell.conflict_unannounced = false;
            self.watch_rest();
        }
        let mut rendered = self.output.view(budget, session, self.id);
        if let Some(line) = self.retention_line() {
            rendered.text.insert_str(0, &line);
        }
        self.park_output();
        let [stdout_bytes, stderr_bytes] = self.counts();
        let notes = self.output.errors().into_iter().flatten().map(str::to_owned);
        let notes = self.notes.iter().cloned().chain(notes).chain(extra);
        let f = self.facts(now);
        let effects = self
            .effects
            .as_deref()
            .map(|p| crate::rpc::results::effects(p, &f.survivors, f.survivors_more, self.settled()));
        JobResult {
            session: session.to_owned(),
            job: self.id,
            cmd: f.cmd,
            state: f.state,
            exit_code: f.exit_code,
            signal: f.signal,
            duration_ms: f.duration_ms,
            view: rendered.text,
            stdout_bytes,
            stderr_bytes,
            omitted: rendered.omitted.map(|o| omitted(session, self.id, o)),
            liveness: f.liveness,
            survivors: f.survivors,
            survivors_more: f.survivors_more,
            settled: f.settled,
            note: join_notes(notes).map(|n| crate::rpc::results::redacted(&n)),
            announcements: Vec::new(),
            state_note: self.shell.note.clone(),
            state_changes: self.shell.changes.clone(),
            state_version: self.shell.versions(),
            usage: f.usage,
            kept: f.kept,
            oom_killed: f.oom_killed,
            prestarted: self.prestarted,
            files: self.files.clone(),
            refusals: self.refusals(),
            warnings: self.warnings.clone(),
            state_conflicts: f.state_conflicts,
            terminal: None,
            check: self.check.as_deref().cloned(),
            effects,
        }
    }

    /// A restarted front's rebuilt job whose end the client was shown before the restart: it is not
    /// announced again (a job that had not ended is left as it is).
    pub fn restore_reported(&mut self) {
        if self.life.phase.ended() {
            self.reported = true;
            // Never announced again, so nothing else would let its rendered lines go.
            self.park_output();
        }
    }

    /// The answer that reported this ended job never reached its client (the connection was gone, or
    /// the client cancelled the call): announce it again. Whether it was reported.
    pub fn unreport(&mut self) -> bool {
        let was = self.life.phase.ended() && self.reported;
        self.reported = false;
        was
    }

    /// The announcement of this ended job; marks it reported.
    pub fn announce(&mut self, now: Instant) -> Announcement {
        let survivors_ended = self.reported && self.rest_unannounced;
        self.reported = true;
        self.shell.conflict_unannounced = false;
        self.watch_rest();
        let last_lines = self.output.last_lines();
        self.park_output();
        let f = self.facts(now);
        Announcement {
            survivors_ended,
            job: self.id,
            cmd: f.cmd,
            state: f.state,
            exit_code: f.exit_code,
            signal: f.signal,
            duration_ms: f.duration_ms,
            last_lines,
            state_conflicts: f.state_conflicts,
            // Told with the job's end, not again with the end of what it left running.
            state_changes: if survivors_ended { Vec::new() } else { self.shell.changes.clone() },
            state_note: if survivors_ended { None } else { self.shell.note.clone() },
        }
    }

    /// True when the job ended and no response has carried that yet.
    pub fn needs_announcement(&self) -> bool {
        self.life.phase.ended() && (!self.reported || self.shell.conflict_unannounced || self.rest_unannounced)
    }

    /// The command as submitted.
    pub fn cmd(&self) -> &str {
        &self.cmd
    }

    /// The shell-state changes this job made (`+export FOO`, `cd /x`, …).
    pub fn state_changes(&self) -> &[String] {
        &self.shell.changes
    }

    pub fn summary(&self, now: Instant) -> JobSummary {
        let [stdout_bytes, stderr_bytes] = self.counts();
        let started_ns = self.life.started.map_or(self.life.submitted_unix_ns, |s| s.1);
        let f = self.facts(now);
        JobSummary {
            job: self.id,
            cmd: f.cmd,
            state: f.state,
            exit_code: f.exit_code,
            signal: f.signal,
            started_at_ms: started_ns / 1_000_000,
            duration_ms: f.duration_ms,
            stdout_bytes,
            stderr_bytes,
            survivors: f.survivors,
            survivors_more: f.survivors_more,
            settled: f.settled,
            liveness: f.liveness,
            usage: f.usage,
            kept: f.kept,
            cgroup: self.cgroup.clone(),
            oom_killed: f.oom_killed,
            state_conflicts: f.state_conflicts,
        }
    }
}

fn omitted(session: &str, job: JobId, o: Omission) -> Omitted {
    let call = serde_json::json!({"session": session, "job": job, "lines": [o.first, o.last]});
    let errors = if o.errors > 0 {
        let lines = if o.errors == 1 { "line among them is" } else { "lines among them are" };
        format!("; {} error-shaped {lines} listed under the marker", o.errors)
    } else {
        String::new()
    };
    Omitted {
        lines: [o.first, o.last],
        line_count: o.lines(),
        bytes: o.bytes,
        errors: o.errors,
        hint: format!(
            "lines {}–{} ({} lines, {} bytes) are not shown{errors}; read them with {} (grep, errors, tail and raw views also work)",
            o.first,
            o.last,
            o.lines(),
            o.bytes,
            view::lines_call(session, job, o.first, o.last)
        ),
        call,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> (tempfile::TempDir, Job) {
        let dir = tempfile::tempdir().unwrap();
        let j = Job::new(3, "cmd".into(), dir.path().join("3.log"));
        (dir, j)
    }

    #[test]
    fn a_job_that_can_write_no_more_gives_its_write_buffers_back() {
        let (_d, mut j) = job();
        let now = Instant::now();
        let text: String = (0..3000).map(|i| format!("line {i:08} of some build output\n")).collect();
        j.on_output(Stream::Stdout, text.as_bytes(), now, 0);
        j.flush();
        let (store, lines) = j.output.buffer_capacities();
        assert!(store > 0 && lines > 0, "kept while it may write");
        j.on_exited(Some(0), None, 0, false, now);
        j.on_streams_closed();
        j.flush();
        assert_eq!(j.output.buffer_capacities(), (0, 0));
        let (_d2, mut closed) = job();
        closed.on_output(Stream::Stdout, text.as_bytes(), now, 0);
        closed.mark_closed(now);
        assert_eq!(closed.output.buffer_capacities(), (0, 0), "closed too");
        assert!(!closed.dirty(), "its last lines are written");
        let r = j.result("s", now, Vec::new(), false, 40_000);
        assert!(r.view.ends_with("line 00002999 of some build output\n"), "{}", &r.view[r.view.len() - 300..]);
        assert_eq!(j.counts()[0], text.len() as u64);
    }

    #[test]
    fn an_ended_reported_job_holds_little_and_answers_the_same() {
        let (_d, mut j) = job();
        let now = Instant::now();
        let text: String = (0..3000).map(|i| format!("line {i:08} of some build output\n")).collect();
        j.on_output(Stream::Stdout, text.as_bytes(), now, 0);
        j.on_exited(Some(0), None, 0, false, now);
        j.on_streams_closed();
        let held = j.held_bytes();
        assert!(held > 100_000, "the rendered lines are held until the end is reported: {held}");
        let views: Vec<JobResult> = [1_000, 40_000, 400_000].map(|b| j.result("s", now, vec![], true, b)).into();
        assert!(j.rendered().parked(), "reported: its lines are read back from disk now");
        let held = j.held_bytes();
        assert!(held <= 8 * 1024, "an ended 3,000-line job holds {held} bytes");
        for (b, before) in [1_000, 40_000, 400_000].into_iter().zip(views) {
            assert_eq!(j.result("s", now, vec![], true, b).view, before.view);
        }
        assert_eq!(j.announce(now).last_lines.last().unwrap(), "line 00002999 of some build output");
    }

    #[test]
    fn a_job_done_with_is_read_back_from_disk_as_it_was() {
        let (_d, mut j) = job();
        let now = Instant::now();
        j.set_state_base(4, std::sync::Arc::new([("cwd".to_owned(), b"/w".to_vec())].into()));
        j.on_started(42, 1_000_000, true, "slot-1".into(), now);
        let text: String = (0..3000).map(|i| format!("line {i:08} of some build output\n")).collect();
        j.on_output(Stream::Stdout, text.as_bytes(), now, 5);
        j.on_output(Stream::Stderr, b"error: it broke\nwarning: \x1b[1mbold\x1b[0m\n", now, 6);
        j.note("a note".into());
        j.warnings.push("a warning".into());
        j.effects = Some(Box::new(shm_proto::msg::ProjectEffects { root: "/w".into(), ..Default::default() }));
        j.check = Some(Box::new(protocol::checks::CheckReport {
            name: "unit".into(),
            note: Some("read".into()),
            ..Default::default()
        }));
        j.on_exited(Some(2), None, 3_500_000, false, now);
        j.on_survivors(ProcList::new(vec![ProcStat { pid: 9, cmdline: "sleep 9".into(), age_ms: 1, cpu_ms: 0 }]));
        j.on_emptied(4_000_000, JobUsage { cpu_usec: 1500, ..Default::default() });
        j.on_streams_closed();
        assert!(!j.done_with(), "not yet reported");
        let before: Vec<JobResult> = [1_000, 40_000].map(|b| j.result("s", now, vec![], true, b)).into();
        assert!(j.done_with(), "reported, parked, settled: {j:?}");
        let mut back = crate::jobs::frozen::thaw(&crate::jobs::frozen::freeze(&j).unwrap()).unwrap();
        // The snapshot's items are not kept (its version is): everything else is the same record.
        let debug = |j: &Job| format!("{j:?}").replace(r#"{"cwd": [47, 119]}"#, "{}");
        assert_eq!(debug(&back), debug(&j));
        for (b, before) in [1_000, 40_000].into_iter().zip(before) {
            let r = back.result("s", now, vec![], true, b);
            assert_eq!(serde_json::to_value(&r).unwrap(), serde_json::to_value(&before).unwrap());
        }
        assert_eq!(back.ended_at(), j.ended_at(), "the very instant (retention keys on it)");
        assert_eq!(back.summary(now).duration_ms, 2.5);
    }

    #[test]
    fn a_refused_or_unlaunched_job_lets_its_files_go_and_is_done_with_once_reported() {
        for refused in [true, false] {
            let (_d, mut j) = job();
            let now = Instant::now();
            match refused {
                true => j.on_refused(vec!["a guard refused it".into()], now),
                false => j.on_spawn_failed("no such file", now),
            }
            assert!(!j.output.files_open(), "no process will write: its files are let go");
            j.result("s", now, vec![], true, 40_000);
            assert!(j.done_with(), "{j:?}");
        }
    }

    #[test]
    fn states_move_forward_once() {
        let (_d, mut j) = job();
        let now = Instant::now();
        j.on_exited(Some(2), None, 10, false, now);
        j.on_exited(None, Some(9), 20, true, now);
        j.mark_lost("worker died", now, None);
        assert_eq!((j.state(), j.life.exit_code, j.life.signal), (JobPhase::Exited, Some(2), None));
        assert!(j.settled(), "mark_lost settles the output even of an ended job");
    }

    #[test]
    fn a_signal_clears_the_exit_code() {
        let (_d, mut j) = job();
        j.on_exited(Some(137), Some(9), 1, true, Instant::now());
        assert_eq!((j.state(), j.life.exit_code, j.life.signal), (JobPhase::Killed, None, Some(9)));
    }

    #[test]
    fn duration_uses_the_workers_clock_when_it_has_both_ends() {
        let (_d, mut j) = job();
        let now = Instant::now();
        j.on_started(42, 1_000_000, false, "slot-1".into(), now);
        j.on_exited(Some(0), None, 3_500_000, false, now);
        assert_eq!(j.duration(now), Duration::from_micros(2500));
        assert_eq!(j.result("s", now, vec![], true, view::DEFAULT_BUDGET).duration_ms, 2.5);
    }

    #[test]
    fn final_results_mark_reported_and_running_ones_do_not() {
        let (_d, mut j) = job();
        let r = j.result("s", Instant::now(), vec![], true, view::DEFAULT_BUDGET);
        assert_eq!(r.state, JobPhase::Running);
        assert!(r.liveness.is_some());
        assert!(!j.reported());
        j.on_exited(Some(0), None, 0, false, Instant::now());
        assert!(j.needs_announcement());
        let r = j.result("s", Instant::now(), vec!["extra".into()], true, view::DEFAULT_BUDGET);
        assert_eq!((r.note.as_deref(), r.liveness.is_none()), (Some("extra"), true));
        assert!(j.reported() && !j.needs_announcement());
    }

    #[test]
    fn omitted_hint_names_the_lines_and_the_call() {
        let o = omitted("de\"mo", 7, Omission { first: 5, last: 14, bytes: 100, errors: 0 });
        assert_eq!((o.lines, o.line_count), ([5, 14], 10));
        assert!(o.hint.contains("lines 5–14 (10 lines, 100 bytes)"), "{}", o.hint);
        assert!(o.hint.contains(r#"output {"session": "de\"mo", "job": 7, "lines": [5, 14]}"#), "{}", o.hint);
    }

    #[test]
    fn survivors_keep_a_job_unsettled_until_its_cgroup_empties() {
        let (_d, mut j) = job();
        let now = Instant::now();
        j.on_exited(Some(0), None, 1, false, now);
        j.on_streams_closed();
        assert!(!j.end_known(), "the worker has not said what the exit left behind");
        let p = ProcStat { pid: 9, cmdline: "sleep 1000".into(), age_ms: 5, cpu_ms: 0 };
        j.on_survivors(shm_proto::procs::ProcList::new(vec![p]));
        let r = j.result("s", now, vec![], true, crate::output::view::DEFAULT_BUDGET);
        assert!(j.end_known() && !r.settled && j.worth_probing());
        assert_eq!((r.survivors.len(), r.survivors[0].age_ms), (1, Some(5)));
        assert!(r.note.unwrap().contains("outlived its main process"));
        j.on_emptied(2_000_000, JobUsage { cpu_usec: 2500, procs_seen: 3, memory_peak: Some(1 << 20) });
        let r = j.result("s", now, vec![], true, crate::output::view::DEFAULT_BUDGET);
        assert!(r.settled && r.survivors.is_empty() && r.note.is_none(), "{r:?}");
        let u = r.usage.unwrap();
        assert_eq!((u.cpu_ms, u.procs_seen, u.emptied_at_ms, u.memory_peak), (2.5, 3, 2, Some(1 << 20)));
    }

    #[test]
    fn spawn_failure_is_failed_with_a_note() {
        let (_d, mut j) = job();
        j.on_spawn_failed("no such directory", Instant::now());
        let r = j.result("s", Instant::now(), vec![], true, view::DEFAULT_BUDGET);
        assert_eq!((r.state, r.exit_code, r.signal, r.settled), (JobPhase::Failed, None, None, true));
        assert!(r.note.unwrap().contains("no such directory"));
    }
}
