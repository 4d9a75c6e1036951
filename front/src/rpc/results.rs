//! The shapes the front answers with (docs/protocol.md), as `Serialize` structs.
//!
//! Field names and meanings are the protocol's, all documented in docs/protocol.md (`settled` on a job
//! result, `note`, `announcements` and the rest).
//! Optional fields serialize as `null`, never disappear, so clients can rely on every key being present.
//!
//! ```
//! let json = serde_json::to_string(&front::rpc::results::JobPhase::Killed).unwrap();
//! assert_eq!(json, r#""killed""#);
//! ```

use serde::Serialize;
use std::collections::BTreeMap;

pub use protocol::results::{
    Announcement, FileResult, JobPhase, JobResult, JobSummary, JobsResult, Liveness, Omitted, StateVersions, Survivor,
    Usage,
};

/// The shell a session's jobs run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ShellInfo {
    pub path: String,
    pub version: String,
    /// The worker ran bash to learn `version`; `false`: it took the version an earlier worker of this
    /// server reported for the very same file (see worker/src/startup.rs); `null` when the worker has
    /// not said (a session carried over from an earlier build).
    pub probed: Option<bool>,
    /// The identity of bash's file, as the worker read it (passed on to later workers, not shown).
    #[serde(skip)]
    pub id: String,
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
    /// Where the session's next job starts: the cwd its calls carried (after a `cd`), else `cwd`.
    pub starts_in: String,
    pub note: Option<String>,
    pub announcements: Vec<Announcement>,
    /// A named persistent session (one long-lived bash, one command at a time).
    pub persistent: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct SessionCloseResult {
    pub session: String,
    pub survivors: Vec<Survivor>,
    /// Processes killed beyond the listed survivors (a listing carries at most 64), counted only.
    pub survivors_more: u32,
    /// Every process the close killed (and, for a session whose worker had died, that the supervisor
    /// killed then): the listed survivors and the rest.
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
    /// The lines as `N: text`, redacted (`format: "text"`, the default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The lines one by one, redacted (`format: "lines"`); the text is carried once, here or in `text`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lines: Option<Vec<ViewLine>>,
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
    pub shell_state: StateSummary,
    /// Limits and accounting of the session (`null` when the supervisor did not answer).
    pub limits: Option<SessionLimitsInfo>,
    /// CPU time of the session's ended jobs whose cgroups emptied.
    pub jobs_cpu_ms: f64,
    /// An estimate of the front's heap bytes holding the session's jobs (records and output
    /// bookkeeping; an ended, reported job's lines are read back from disk, see `Job::held_bytes`).
    pub output_held_bytes: u64,
    /// The session's jobs held in the front's memory; the others (ended, reported, settled, older than
    /// the newest `HEDDLE_JOBS_IN_MEMORY`) are read back from disk when looked at.
    pub jobs_in_memory: usize,
    /// The session's sandbox as its worker enforces it: policy, writable roots, Landlock ABI and what
    /// is enforced, seccomp denials; `null` until the worker reported it.
    pub sandbox: Option<shm_proto::msg::SandboxInfo>,
    /// A named persistent session (one long-lived bash, one command at a time).
    pub persistent: bool,
    /// The environment its jobs start with (allowlist, forced values, PATH).
    pub env: EnvFacts,
    /// Its running jobs; with liveness probed when `describe` names the session.
    pub live_jobs: Vec<LiveJob>,
    /// What changed in it since it began.
    pub changes: SessionChanges,
    /// How its worker spawns jobs: clone3 vfork-style or fork-style, placed by `CLONE_INTO_CGROUP` or by
    /// the `cgroup.procs` fallback; `null` until its first job started.
    pub spawn_path: Option<String>,
    /// Guard deny rules overridden in the session (`run {override}`), each also in the audit log.
    pub guard_overrides: u64,
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

/// The effects ledger's bounds, as `describe` states them.
#[derive(Clone, Debug, Serialize)]
pub struct EffectsBounds {
    /// Entries one walk of the watched paths (outside the git work tree) looks at, at most; beyond,
    /// the watched part is `partial` and names the last path compared.
    pub watched_entries_max: u32,
    /// Directories of one work tree the change monitor watches, at most (lower when the jobs' uid
    /// has fewer than four times as many inotify watches); beyond, every ledger is a full status.
    pub monitor_dirs_max: u32,
    /// Changed paths one status of named paths asks about, at most; beyond, a full status.
    pub monitor_paths_max: u32,
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
    /// The effects ledger's bounds.
    pub effects: EffectsBounds,
    pub note: Option<String>,
    /// Present (possibly empty) only when `describe` named a session.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub announcements: Option<Vec<Announcement>>,
}

/// The result's effects ledger from what the worker reported.
pub fn effects(
    p: &shm_proto::msg::ProjectEffects,
    survivors: &[protocol::results::Survivor],
    survivors_more: u32,
    counted: bool,
) -> protocol::results::Effects {
    let reason = (!p.reasons.is_empty()).then(|| p.reasons.join("; "));
    protocol::results::Effects {
        project: protocol::results::ProjectLedger {
            root: (!p.root.is_empty()).then(|| p.root.clone()),
            scope: p.scope.clone(),
            confidence: p.confidence.clone(),
            reason,
            changed: p
                .changed
                .iter()
                .map(|c| protocol::results::ChangedPath {
                    path: c.path.clone(),
                    change: c.change.clone(),
                    from: c.from.clone(),
                    under: c.under,
                })
                .collect(),
            changed_more: p.changed_more,
            diff: p.diff.as_deref().map(redacted),
            diff_note: p.diff_note.clone(),
            before: p.before.clone(),
            cost_us: p.cost_us,
            method: p.method.clone(),
            method_note: p.method_note.clone(),
            git_runs: p.git_runs,
            head_moved: p.head_moved.as_ref().map(|h| protocol::results::HeadMove {
                from: h.from.clone(),
                to: h.to.clone(),
                from_branch: h.from_branch.clone(),
                to_branch: h.to_branch.clone(),
            }),
            in_progress: p.in_progress.clone(),
        },
        processes: protocol::results::ProcessLedger {
            scope: "the job's cgroup once its main process ended".into(),
            confidence: if counted { "complete" } else { "partial" }.into(),
            reason: (!counted).then(|| "the worker had not yet reported what is left in the job's cgroup".into()),
            survivors: survivors.iter().map(|s| s.pid).collect(),
            survivors_more,
        },
        watched: p.watched.as_ref().map(|w| protocol::results::WatchedLedger {
            roots: w.roots.clone(),
            scope: w.scope.clone(),
            confidence: w.confidence.clone(),
            reason: (!w.reasons.is_empty()).then(|| w.reasons.join("; ")),
            changed: w
                .changed
                .iter()
                .map(|c| protocol::results::ChangedPath {
                    path: c.path.clone(),
                    change: c.change.clone(),
                    from: None,
                    under: c.under,
                })
                .collect(),
            changed_more: w.changed_more,
            entries: w.entries,
            limit: w.limit,
            cost_us: w.cost_us,
        }),
    }
}

/// Model-facing text that did not come through the output renderer (a process's command line, a
/// note, a command): secret-shaped strings redacted, line by line, as in the view.
pub fn redacted(text: &str) -> String {
    let r = policies::redaction::Redactor::builtin();
    let mut st = policies::redaction::BlockCursor::default();
    let mut out = String::with_capacity(text.len());
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&r.redact_line(&mut st, line));
    }
    out
}

/// What a process listing from the worker or the supervisor becomes in a result: its command line
/// redacted ([`redacted`]). The only way such a listing reaches a client.
pub trait SurvivorSource {
    fn survivor(&self) -> Survivor;
}

impl SurvivorSource for shm_proto::control::ProcInfo {
    fn survivor(&self) -> Survivor {
        Survivor { pid: self.pid, cmdline: redacted(&self.cmdline), age_ms: None, cpu_ms: None }
    }
}

impl SurvivorSource for shm_proto::msg::ProcStat {
    fn survivor(&self) -> Survivor {
        Survivor {
            pid: self.pid,
            cmdline: redacted(&self.cmdline),
            age_ms: Some(self.age_ms),
            cpu_ms: Some(self.cpu_ms),
        }
    }
}

/// [`SurvivorSource::survivor`], for `map`.
pub fn survivor<T: SurvivorSource>(p: &T) -> Survivor {
    p.survivor()
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

/// One line (or run of identical lines) in a view.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
pub struct ViewLine {
    pub line: u64,
    /// Lines in this run of identical lines (1 for most).
    pub count: u32,
    pub stream: &'static str,
    pub text: String,
    /// For grep and errors: true for a matching line, false for context.
    #[serde(rename = "match")]
    pub is_match: Option<bool>,
}

/// `describe`'s view of a session's state record.
#[derive(Clone, Debug, Serialize)]
pub struct StateSummary {
    pub version: u64,
    pub cwd: Option<String>,
    pub umask: Option<String>,
    pub exported: Vec<String>,
    pub variables: usize,
    pub functions: Vec<String>,
    pub aliases: usize,
    pub set_options: Vec<String>,
    pub shopt_options: Vec<String>,
}

/// The environment a session's jobs start with.
#[derive(Clone, Debug, Serialize)]
pub struct EnvFacts {
    /// The policy deciding the allowlist (`null`: the built-in allowlist of a session without one).
    pub policy: Option<String>,
    /// Names (and `PREFIX*` patterns) passed through from the worker's environment when set.
    pub allow: Vec<String>,
    /// Variables forced to a value (before the session's own entries).
    pub set: BTreeMap<String, String>,
    /// Names the session itself sets (on top of everything; values not shown: they may be secrets).
    pub session: Vec<String>,
    /// The `PATH` jobs run with: the session's, the policy's or the worker's, or the one an earlier
    /// job set, which the shell state carries.
    pub path: String,
    /// Where `path` comes from: `session`, `policy`, `worker` or `shell state`.
    pub path_from: &'static str,
    /// Set when an earlier job changed `PATH`: the one it replaced.
    pub note: Option<String>,
}

/// A job of the session that still runs.
#[derive(Clone, Debug, Serialize)]
pub struct LiveJob {
    pub job: u64,
    pub cmd: String,
    pub liveness: Option<Liveness>,
}

/// What changed in the session since it began (this incarnation).
#[derive(Clone, Debug, Serialize)]
pub struct SessionChanges {
    pub jobs_run: usize,
    pub jobs_by_state: BTreeMap<String, usize>,
    pub state_changes: usize,
    pub last_state_changes: Vec<StateChange>,
}

/// One shell-state change and the job that made it.
#[derive(Clone, Debug, Serialize)]
pub struct StateChange {
    pub job: u64,
    pub change: String,
}
