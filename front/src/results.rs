//! The shapes the front answers with (docs/protocol.md), as `Serialize` structs.
//!
//! Field names and meanings are the protocol's; fields added beyond it (`settled` on a job result,
//! `ranges` in `omitted`, `note` where the protocol has none) are documented in docs/front-notes.md.
//! Optional fields serialize as `null`, never disappear, so clients can rely on every key being present.
//!
//! ```
//! let json = serde_json::to_string(&front::results::JobState::Killed).unwrap();
//! assert_eq!(json, r#""killed""#);
//! ```

use serde::Serialize;

/// A job's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    Running,
    Exited,
    Killed,
    Lost,
    Failed,
}

impl JobState {
    pub fn ended(self) -> bool {
        self != JobState::Running
    }
}

/// Liveness of a running job.
#[derive(Clone, Debug, Serialize)]
pub struct Liveness {
    pub running_ms: u64,
    /// `null` when the job has written nothing yet.
    pub last_output_ms_ago: Option<u64>,
    /// `null` until the worker reports the job started.
    pub pid: Option<u32>,
    /// CPU time of the job's cgroup so far (`null`: the worker did not answer the probe).
    pub cpu_ms: Option<f64>,
    /// Processes in the job's cgroup now.
    pub procs: Option<u32>,
    /// The process the state describes, its `/proc` state letter and kernel wait function.
    pub busy_pid: Option<u32>,
    pub busy_cmdline: Option<String>,
    pub proc_state: Option<String>,
    pub wchan: Option<String>,
    /// The state in words: "busy (running on a CPU)", "sleeping on a timer", "blocked reading stdin/tty", ….
    pub activity: Option<String>,
}

/// What a job's cgroup accounted.
#[derive(Clone, Debug, Serialize)]
pub struct Usage {
    /// CPU time of every process the job had (`cpu.stat` `usage_usec` of its cgroup).
    pub cpu_ms: f64,
    /// The most processes seen in the job's cgroup at once.
    pub procs_seen: u32,
    /// When the job's cgroup was seen empty (`populated 0`), ms since the epoch.
    pub emptied_at_ms: u64,
    /// Peak memory of the job's cgroup in bytes, where the host accounts it per job (pure cgroup v2);
    /// `null` on hybrid hosts (the session's peak is in `describe`).
    pub memory_peak: Option<u64>,
}

/// What the view left out: rendered lines `lines[0]..=lines[1]`.
#[derive(Clone, Debug, Serialize)]
pub struct Omitted {
    pub lines: [u64; 2],
    pub line_count: u64,
    /// Rendered bytes of those lines (newlines included).
    pub bytes: u64,
    /// Error-shaped lines among them (listed under the marker).
    pub errors: u64,
    pub hint: String,
    /// The `output` call that shows them, as its params object.
    pub call: serde_json::Value,
}

/// A process found alive in a cgroup.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Survivor {
    pub pid: u32,
    pub cmdline: String,
    /// Time since it started, when known.
    pub age_ms: Option<u64>,
    /// CPU time it used, when known.
    pub cpu_ms: Option<u64>,
}

impl From<&shm_proto::control::ProcInfo> for Survivor {
    fn from(p: &shm_proto::control::ProcInfo) -> Self {
        Survivor { pid: p.pid, cmdline: redacted(&p.cmdline), age_ms: None, cpu_ms: None }
    }
}

impl From<&shm_proto::msg::ProcStat> for Survivor {
    fn from(p: &shm_proto::msg::ProcStat) -> Self {
        Survivor { pid: p.pid, cmdline: redacted(&p.cmdline), age_ms: Some(p.age_ms), cpu_ms: Some(p.cpu_ms) }
    }
}

/// Model-facing text that did not come through the output renderer (a process's command line, a
/// note, a command): secret-shaped strings redacted, line by line, as in the view.
pub fn redacted(text: &str) -> String {
    let r = policies::redaction::Redactor::builtin();
    let mut st = policies::redaction::BlockState::default();
    let mut out = String::with_capacity(text.len());
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&r.redact_line(&mut st, line));
    }
    out
}

/// A job that ended and had not been reported, told once.
#[derive(Clone, Debug, Serialize)]
pub struct Announcement {
    pub job: u64,
    pub cmd: String,
    pub state: JobState,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub duration_ms: f64,
    pub last_lines: Vec<String>,
    /// Later jobs that overrode shell state this job changed (see `JobResult::state_conflicts`).
    pub state_conflicts: Vec<String>,
}

/// The result of `run`, `wait` and `kill`.
#[derive(Clone, Debug, Serialize)]
pub struct JobResult {
    pub session: String,
    pub job: u64,
    pub cmd: String,
    pub state: JobState,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub duration_ms: f64,
    pub view: String,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    pub omitted: Option<Omitted>,
    pub liveness: Option<Liveness>,
    pub survivors: Vec<Survivor>,
    /// True once no more output can arrive for the job (its pipes closed, or it was lost or failed).
    pub settled: bool,
    pub note: Option<String>,
    pub announcements: Vec<Announcement>,
    /// Set when the job's shell state after the call is unknown (`state unknown after this call; …`).
    pub state_note: Option<String>,
    /// What the call changed in the session's shell state, briefly (`cwd → /x`, `+export FOO`).
    pub state_changes: Vec<String>,
    /// The state version the job started from, and the version after its changes applied (`null`
    /// while it runs or when it carried no state).
    pub state_version: Option<StateVersions>,
    /// Accounting, once the job's cgroup emptied.
    pub usage: Option<Usage>,
    /// The kept job's name, when it was kept (its processes live in `kept/NAME`).
    pub kept: Option<String>,
    /// True when the kernel's OOM killer killed a process of the job.
    pub oom_killed: bool,
    /// True when the job ran on a bash pre-started for it (state restored before the command came);
    /// false when a bash was spawned for the command. Either way the shell served only this command.
    pub prestarted: bool,
    /// The files channel: each file given to `run`, written or not (with why).
    pub files: Vec<crate::sandbox::FileResult>,
    /// Writes the sandbox refused, each explained: which path, which rule, how to widen it.
    pub refusals: Vec<String>,
    /// Warnings given before launch (preflight: plain writes or deletions outside the writable roots).
    pub warnings: Vec<String>,
    /// Later jobs that overrode shell state this job changed, after its result may already have been
    /// returned (`conflict: cwd changed again by job 7 …`); also announced once in the session's next
    /// response.
    pub state_conflicts: Vec<String>,
}

/// A job's place in the session's state history.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct StateVersions {
    pub from: u64,
    pub to: Option<u64>,
}

/// One row of `jobs`.
#[derive(Clone, Debug, Serialize)]
pub struct JobSummary {
    pub job: u64,
    pub cmd: String,
    pub state: JobState,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub started_at_ms: u64,
    pub duration_ms: f64,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    pub survivors: Vec<Survivor>,
    pub settled: bool,
    pub liveness: Option<Liveness>,
    pub usage: Option<Usage>,
    pub kept: Option<String>,
    /// The job's cgroup, relative to the session's (`describe`'s `cgroup`): `slot-3`. Job cgroups are
    /// reused by later jobs once empty, so this names where the job runs (or ran) only while it is not
    /// settled; `null` for a job without one of its own (the persistent shell's commands).
    pub cgroup: Option<String>,
    pub oom_killed: bool,
    /// Later jobs that overrode shell state this job changed (see `JobResult::state_conflicts`).
    pub state_conflicts: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct JobsResult {
    pub session: String,
    pub jobs: Vec<JobSummary>,
    pub announcements: Vec<Announcement>,
}

/// The shell a session's jobs run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ShellInfo {
    pub path: String,
    pub version: String,
}

/// A session's worker process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WorkerInfo {
    pub pid: u32,
    pub uid: u32,
}

#[derive(Clone, Debug, Serialize)]
pub struct SessionOpenResult {
    pub session: String,
    pub attached: bool,
    pub state_version: u64,
    pub shell: ShellInfo,
    pub worker: WorkerInfo,
    pub cwd: String,
    pub note: Option<String>,
    pub announcements: Vec<Announcement>,
    /// A named persistent session (one long-lived bash, one command at a time).
    pub persistent: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct SessionCloseResult {
    pub session: String,
    pub survivors: Vec<Survivor>,
    pub killed: usize,
    pub kept: Vec<String>,
    /// True when the supervisor verified the session's cgroup subtree empty and removed it.
    pub verified_empty: bool,
    pub note: Option<String>,
    pub announcements: Vec<Announcement>,
}

#[derive(Clone, Debug, Serialize)]
pub struct OutputResult {
    pub session: String,
    pub job: u64,
    pub stream: &'static str,
    pub offset: u64,
    pub len: u64,
    pub total: u64,
    pub encoding: &'static str,
    pub data: String,
    pub complete: bool,
    pub note: Option<String>,
    pub announcements: Vec<Announcement>,
    /// Raw bytes are never redacted: always true here, so a client cannot mistake them for a view.
    pub unredacted: bool,
}

/// The result of a line view of `output` (`lines`, `tail`, `grep`, `errors`).
#[derive(Clone, Debug, Serialize)]
pub struct OutputViewResult {
    pub session: String,
    pub job: u64,
    pub view: &'static str,
    pub stream: &'static str,
    /// The lines as `N: text`, redacted.
    pub text: String,
    pub lines: Vec<crate::output_views::ViewLine>,
    /// Lines numbered so far.
    pub total_lines: u64,
    /// grep/errors: matching lines in all (also past `max`).
    pub matches: Option<u64>,
    /// When the view stopped early: the call that continues it.
    pub next: Option<serde_json::Value>,
    pub complete: bool,
    pub note: Option<String>,
    pub announcements: Vec<Announcement>,
}

/// `{pid, uid}` of the front.
#[derive(Clone, Debug, Serialize)]
pub struct FrontInfo {
    pub pid: u32,
    pub uid: u32,
}

#[derive(Clone, Debug, Serialize)]
pub struct SupervisorFacts {
    pub pid: u32,
    pub cgroup_root: String,
    pub cgroup_mode: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct SessionFacts {
    pub session: String,
    /// `null` only in the instant between the supervisor's answer and the worker's hello.
    pub worker: Option<WorkerInfo>,
    pub cgroup: String,
    pub shell: Option<ShellInfo>,
    pub cwd: String,
    pub jobs_running: usize,
    pub jobs_total: usize,
    /// `"live"` or `"lost"`.
    pub state: &'static str,
    /// Warnings the worker sent that concern no particular job (the last 16).
    pub warnings: Vec<String>,
    pub note: Option<String>,
    /// The session's shell-state record, summarised.
    pub shell_state: crate::state_record::StateSummary,
    /// Limits and accounting of the session (`null` when the supervisor did not answer).
    pub limits: Option<SessionLimitsInfo>,
    /// CPU time of the session's ended jobs whose cgroups emptied.
    pub jobs_cpu_ms: f64,
    /// The session's sandbox as its worker enforces it: policy, writable roots, Landlock ABI and what
    /// is enforced, seccomp denials; `null` until the worker reported it.
    pub sandbox: Option<shm_proto::msg::SandboxInfo>,
    /// A named persistent session (one long-lived bash, one command at a time).
    pub persistent: bool,
    /// The environment its jobs start with (allowlist, forced values, PATH).
    pub env: crate::describe_session::EnvFacts,
    /// Its running jobs; with liveness probed when `describe` names the session.
    pub live_jobs: Vec<crate::describe_session::LiveJob>,
    /// What changed in it since it began.
    pub changes: crate::describe_session::SessionChanges,
    /// How its worker spawns jobs: clone3 vfork-style or fork-style, placed by `CLONE_INTO_CGROUP` or by
    /// the `cgroup.procs` fallback; `null` until its first job started.
    pub spawn_path: Option<String>,
}

/// A session's limits and accounting (on hybrid hosts, from the v1 memory and pids hierarchies).
#[derive(Clone, Debug, Serialize)]
pub struct SessionLimitsInfo {
    pub memory_max: Option<u64>,
    pub pids_max: Option<u64>,
    pub memory_peak: Option<u64>,
    pub oom_kills: Option<u64>,
    pub pids_limited: Option<u64>,
    pub dirs: Vec<String>,
}

impl From<shm_proto::control::SessionLimits> for SessionLimitsInfo {
    fn from(l: shm_proto::control::SessionLimits) -> Self {
        SessionLimitsInfo {
            memory_max: l.memory_max,
            pids_max: l.pids_max,
            memory_peak: l.memory_peak,
            oom_kills: l.oom_kills,
            pids_limited: l.pids_limited,
            dirs: l.dirs,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct DescribeResult {
    pub version: &'static str,
    pub front: FrontInfo,
    /// `null` when the supervisor did not answer (see `note`).
    pub supervisor: Option<SupervisorFacts>,
    pub socket: String,
    pub state_dir: String,
    pub sessions: Vec<SessionFacts>,
    pub note: Option<String>,
    /// Present (possibly empty) only when `describe` named a session.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub announcements: Option<Vec<Announcement>>,
}

/// Join notes into one sentence list, `None` when there are none.
pub fn join_notes<I: IntoIterator<Item = String>>(notes: I) -> Option<String> {
    let v: Vec<String> = notes.into_iter().filter(|n| !n.is_empty()).collect();
    (!v.is_empty()).then(|| v.join("; "))
}

/// Milliseconds as a float with microsecond precision.
pub fn millis(d: std::time::Duration) -> f64 {
    d.as_micros() as f64 / 1000.0
}
