//! The results a client reads (docs/protocol.md), as serde types both sides use: the front serializes
//! them, the CLI, the MCP door, the tests and the benchmarks deserialize them.
//!
//! Optional fields serialize as `null`, never disappear, so clients can rely on every key being present;
//! a reader accepts a missing key as its default (`#[serde(default)]` on each struct), so an older
//! client reads a newer server's results.
//!
//! ```
//! let json = serde_json::to_string(&protocol::results::JobPhase::Killed).unwrap();
//! assert_eq!(json, r#""killed""#);
//! ```

use serde::{Deserialize, Serialize};

/// A job's lifecycle phase. Results carry it in their `state` field, as `"running"`, `"exited"`,
/// `"killed"`, `"lost"`, `"failed"` or `"refused"`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobPhase {
    #[default]
    Running,
    Exited,
    Killed,
    Lost,
    Failed,
    /// A guard refused the command before launch (nothing of it ran).
    Refused,
}

impl JobPhase {
    pub fn ended(self) -> bool {
        self != JobPhase::Running
    }
}

/// Liveness of a running job.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
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
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
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
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
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
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Survivor {
    pub pid: u32,
    pub cmdline: String,
    /// Time since it started, when known.
    pub age_ms: Option<u64>,
    /// CPU time it used, when known.
    pub cpu_ms: Option<u64>,
}

/// A job that ended and had not been reported, told once; or, told once too, the end of what a reported
/// job left running (`survivors_ended`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Announcement {
    pub job: u64,
    pub cmd: String,
    pub state: JobPhase,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub duration_ms: f64,
    pub last_lines: Vec<String>,
    /// Later jobs that overrode shell state this job changed (see `JobResult::state_conflicts`).
    pub state_conflicts: Vec<String>,
    /// The job had been reported with processes still running (survivors, or a kept job's processes);
    /// they have ended since, and `last_lines` are the job's last lines now.
    pub survivors_ended: bool,
    /// What the job changed in the session's shell state (as `JobResult::state_changes`): a job that
    /// ended unseen changed the state the next calls run in, so its announcement says so.
    pub state_changes: Vec<String>,
    /// Why what the job changed in the shell state was not applied (as `JobResult::state_note`), when it
    /// was not: a job that ended unseen must not look as if its `cd` or `export` took effect.
    pub state_note: Option<String>,
}

/// The result of `run`, `wait` and `kill`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct JobResult {
    pub session: String,
    pub job: u64,
    pub cmd: String,
    pub state: JobPhase,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub duration_ms: f64,
    pub view: String,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    pub omitted: Option<Omitted>,
    pub liveness: Option<Liveness>,
    pub survivors: Vec<Survivor>,
    /// Survivors beyond the listed ones (a listing carries at most 64), counted only.
    pub survivors_more: u32,
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
    pub files: Vec<FileResult>,
    /// Writes the sandbox refused, each explained: which path, which rule, how to widen it.
    pub refusals: Vec<String>,
    /// Warnings given before launch (preflight: plain writes or deletions outside the writable roots).
    pub warnings: Vec<String>,
    /// Later jobs that overrode shell state this job changed, after its result may already have been
    /// returned (`conflict: cwd changed again by job 7 …`); also announced once in the session's next
    /// response.
    pub state_conflicts: Vec<String>,
    /// A terminal job's (`run {tty}`) screen and what scrolled off it since the caller last looked;
    /// `null` for a pipe job.
    pub terminal: Option<TerminalScreen>,
    /// For a check's job (`check`): its routing and what the parser read; `null` for other jobs.
    pub check: Option<crate::checks::CheckReport>,
    /// What the call changed (`run {effects}`): the project's git work tree, with scope and confidence;
    /// `null` with `effects: "none"`, for checks, and until the job ended.
    pub effects: Option<Effects>,
}

/// The effects ledger of a job (docs/protocol.md, "Effects").
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Effects {
    pub project: ProjectLedger,
    /// The processes the job left running in its cgroup (the same as `survivors`, as a ledger part).
    pub processes: ProcessLedger,
    /// The paths no git status covers: the cwd outside any work tree, the session's writable roots
    /// outside it. Absent when there are none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub watched: Option<WatchedLedger>,
}

/// The watched part: entries under the watched roots compared by lstat (and content near the walk).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct WatchedLedger {
    pub roots: Vec<String>,
    pub scope: String,
    /// `complete` or `partial`.
    pub confidence: String,
    pub reason: Option<String>,
    /// Absolute paths; `change` is `added`, `deleted`, `modified` or `type-changed`.
    pub changed: Vec<ChangedPath>,
    pub changed_more: u32,
    /// Entries the walk saw, and the most one walk looks at (`describe`'s `effects.watched_entries_max`).
    pub entries: u32,
    pub limit: u32,
    pub cost_us: u64,
}

/// The processes part: what still runs in the job's cgroup once its main process ended.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProcessLedger {
    pub scope: String,
    /// `complete` once the worker counted the cgroup, `partial` before.
    pub confidence: String,
    pub reason: Option<String>,
    /// The survivors' pids (details in the result's `survivors`).
    pub survivors: Vec<u32>,
    pub survivors_more: u32,
}

/// The project part: paths whose git status or content changed across the job.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProjectLedger {
    pub root: Option<String>,
    pub scope: String,
    /// `complete`, `partial` or `none`.
    pub confidence: String,
    /// Why it is not `complete`.
    pub reason: Option<String>,
    pub changed: Vec<ChangedPath>,
    pub changed_more: u32,
    pub diff: Option<String>,
    pub diff_note: Option<String>,
    /// Where the "before" came from.
    pub before: String,
    pub cost_us: u64,
    /// How the "after" was read: `watch` (the change monitor saw no change; no git run), `pathspec` (a
    /// git status of the changed paths only), `full` (a git status of the whole work tree).
    pub method: String,
    /// Why a full status was needed, when it was.
    pub method_note: Option<String>,
    /// git processes run for this ledger (before, after, diff).
    pub git_runs: u32,
    /// `HEAD` moved during the job (a commit, a checkout, a reset): the commits before and after. The
    /// paths that differ between them and were clean before and after are listed in `changed` too.
    pub head_moved: Option<HeadMove>,
    /// A git operation the job left under way: `rebase`, `merge`, `cherry-pick`, `revert`, `bisect`.
    pub in_progress: Option<String>,
}

/// `HEAD` before and after a job that moved it: its commit (`null`: no commit yet) and the branch
/// checked out (`null`: detached).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HeadMove {
    pub from: Option<String>,
    pub to: Option<String>,
    pub from_branch: Option<String>,
    pub to_branch: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ChangedPath {
    pub path: String,
    pub change: String,
    pub from: Option<String>,
    /// For a directory added or deleted as a whole (the watched part): how many paths below it were
    /// added or deleted with it, folded into this entry rather than listed. 0 otherwise.
    pub under: u32,
}

/// The headless terminal of a PTY job, as a model reads it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TerminalScreen {
    pub rows: u16,
    pub cols: u16,
    /// The screen, one line per row, trailing blanks trimmed (secrets redacted).
    pub text: String,
    /// The cursor: `[row, col]`, from 0.
    pub cursor: [u16; 2],
    /// True while a full-screen program (vi, less, top) shows the alternate screen.
    pub alternate_screen: bool,
    /// The line the cursor is on (a prompt waiting for an answer), trailing blanks trimmed.
    pub cursor_line: String,
    /// Lines that scrolled off the top since the caller last looked (oldest first, redacted).
    pub scrolled: Vec<String>,
    /// Lines that scrolled by but are not in `scrolled` (the budget, or beyond the kept scrollback).
    pub scrolled_more: u64,
    /// The window title a program set (`OSC 0/2`), if any.
    pub title: Option<String>,
}

/// `write {session, job, text?, keys?, eof?}` and `resize`: what was typed and the screen after it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct WriteResult {
    pub session: String,
    pub job: u64,
    /// The job's state when the call returned.
    pub state: JobPhase,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// Bytes handed to the job's stdin by this call (queued in order; none are dropped).
    pub bytes: u64,
    /// Control characters and escape sequences found in `text` (passed through as typed), named.
    pub control_in_text: Vec<String>,
    /// How long the call waited for the screen to settle.
    pub waited_ms: u64,
    /// True when output stopped for the quiet time (false: `yield_ms` ran out first, or the job ended).
    pub settled: bool,
    /// The screen after the write (terminal jobs; `null` for a pipe job).
    pub terminal: Option<TerminalScreen>,
    /// For a pipe job: its output lines that arrived since the write (rendered, redacted, bounded; a
    /// marker line first names what did not fit). `null` for a terminal job.
    pub new_output: Option<String>,
    pub liveness: Option<Liveness>,
    pub note: Option<String>,
    pub announcements: Vec<Announcement>,
}

/// A job's place in the session's state history.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct StateVersions {
    pub from: u64,
    pub to: Option<u64>,
}

/// One row of `jobs`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct JobSummary {
    pub job: u64,
    pub cmd: String,
    pub state: JobPhase,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub started_at_ms: u64,
    pub duration_ms: f64,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    pub survivors: Vec<Survivor>,
    /// Survivors beyond the listed ones, counted only.
    pub survivors_more: u32,
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

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct JobsResult {
    pub session: String,
    pub jobs: Vec<JobSummary>,
    pub announcements: Vec<Announcement>,
    /// Ended jobs older than those listed that this page leaves out (0: none).
    pub older: u64,
    /// The `before` that lists them (the oldest ended job listed), when `older` is not 0.
    pub older_before: Option<u64>,
}

/// One entry of a result's `files`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FileResult {
    pub path: String,
    pub written: bool,
    pub error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_job_phase_goes_on_the_wire_as_state() {
        let s = JobSummary { state: JobPhase::Refused, ..JobSummary::default() };
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["state"], "refused", "{v}");
        let back: JobSummary = serde_json::from_value(serde_json::json!({"state": "lost"})).unwrap();
        assert_eq!(back.state, JobPhase::Lost);
    }
}
