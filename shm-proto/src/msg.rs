//! Messages carried in a session's rings: [`Command`] front→worker, [`Event`] worker→front.
//!
//! Both are postcard-encoded inside ring frames. A decoder meets untrusted bytes: decoding returns an
//! error for garbage, never panics (property-tested in `frame`).

use serde::{Deserialize, Serialize};

/// A job's id, unique inside its session, assigned by the front (`1`, `2`, …).
pub type JobId = u64;

/// Job cgroups in a session's directory are `<JOB_CGROUP_PREFIX><K>` (`slot-3`): one job at a time,
/// reused by later jobs once empty, so the name says nothing of the job (`Event::Started` names it).
pub const JOB_CGROUP_PREFIX: &str = "slot-";

/// The extended attribute of a job cgroup naming the job that has it now (decimal id): the worker sets it
/// before the job is placed, the supervisor checks it before keeping the job.
pub const JOB_CGROUP_XATTR: &std::ffi::CStr = c"user.heddle.job";

/// The largest output payload the worker puts in one [`Event::Output`] frame.
pub const MAX_OUTPUT_CHUNK: usize = 64 * 1024;

/// Which output stream a chunk came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// What the job's stdin is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum StdinMode {
    /// `/dev/null`: a prompt fails at once instead of hanging.
    #[default]
    Null,
    /// A pipe the front feeds with [`Command::Input`]; closed by an `Input` with `eof`.
    Pipe,
    /// A pseudo-terminal of `rows` × `cols` the worker opens: the job is a session leader with it as its
    /// controlling terminal on stdin, stdout and stderr (one merged stream, reported as `Stdout`), and
    /// [`Command::Input`] types into it.
    Tty { rows: u16, cols: u16 },
}

/// The largest `data` of one [`Command::Input`] (larger writes are split by the front, in order).
pub const MAX_INPUT_CHUNK: usize = 32 * 1024;

/// Everything the worker needs to launch one job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSpec {
    pub job: JobId,
    /// The command, given to `bash --noprofile --norc -c`.
    pub cmd: String,
    /// Working directory (raw path bytes: paths need not be UTF-8).
    #[serde(with = "serde_bytes")]
    pub cwd: Vec<u8>,
    /// Extra environment entries set by the session, on top of the worker's allowlist.
    pub env: Vec<(String, String)>,
    pub stdin: StdinMode,
    /// Shell state: `Some(restore script)` runs the job inside the state wrapper (the script re-applies
    /// the session's state, then the command runs, then bash's builtins write the state to a private fd
    /// and the worker reports it with [`Event::StateCaptured`] or [`Event::StateUnknown`]); `None` runs
    /// `bash -c CMD` bare. An empty script restores nothing (the session's first call).
    pub state: Option<Vec<u8>>,
    /// Files to write before the command starts (the files channel), under the job's policy.
    pub files: Vec<FileSpec>,
    /// Run in the session's persistent shell (one long-lived bash, one command at a time) instead of a
    /// fresh bash; `state` then restores only a shell that (re)starts for this command.
    pub persistent: bool,
    /// The part of the state restore that travels in the environment (exported variables and
    /// `BASH_FUNC_NAME%%` functions, see `front::state_env`): set on top of the job environment, after
    /// the profile's rules, for a fresh bash with `state`. Empty otherwise.
    pub state_env: Vec<(String, String)>,
    /// What the capture after a fresh bash's command lists (with `state`; ignored otherwise). `None`:
    /// everything. `Some(names)`: the front's reading of the command (`front::state_scope`) found it can
    /// change no function, no alias and no variable outside `names`: the capture lists those variables
    /// (and `OLDPWD`), the working directory, the directory stack, the options and the umask, and skips
    /// `declare -p`, `declare -f` and `alias -p`, most of bash's capture work. Each name is a shell
    /// identifier.
    pub capture_only: Option<Vec<String>>,
    /// The effects ledger of the job (docs/architecture.md, "Effects"): what the worker compares
    /// around it and reports in [`Event::Effects`] before `Exited`.
    pub effects: EffectsMode,
    /// The directory the command starts in once `state` is restored: the session's carried cwd (raw
    /// bytes), where `cwd` is where bash is started. `None`: none is carried (the command starts in
    /// `cwd`). The effects ledger looks there, as a person who ran `cd repo` would.
    pub state_cwd: Option<Vec<u8>>,
}

/// How much of the effects ledger a job gets (`run {effects}`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum EffectsMode {
    /// No ledger: nothing is compared, no `Event::Effects`.
    None,
    /// The paths whose git status or content changed across the job.
    #[default]
    Paths,
    /// The paths and a bounded unified diff of them.
    Diff,
}

/// One path of the project ledger (paths relative to the work tree's top, lossy UTF-8).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathChange {
    pub path: String,
    /// `modified`, `added`, `deleted`, `renamed`, `untracked-new`, `modified-again` (already dirty
    /// before, changed again), `reverted` (dirty before, clean after, its bytes put back as git has them),
    /// `committed` (dirty or untracked before, clean after with the same bytes: git holds them now),
    /// `ignored` (untracked before, still there, matched by an ignore rule now), `staged` / `unstaged`
    /// (the same bytes, into or out of the index), `type-changed`, `conflicted`.
    pub change: String,
    /// A rename's old path.
    pub from: Option<String>,
    /// For a directory added or deleted as a whole: how many paths below it were added or deleted
    /// with it (folded into this one, not listed). 0 otherwise.
    pub under: u32,
}

/// The project part of a job's effects, as the worker saw it (git status and content identities before
/// and after the job).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectEffects {
    /// The git work tree's top ("" when the cwd is in none).
    pub root: String,
    /// What was looked at, in words.
    pub scope: String,
    /// `complete`, `partial` or `none`.
    pub confidence: String,
    /// Why the confidence is not `complete` (sentences).
    pub reasons: Vec<String>,
    pub changed: Vec<PathChange>,
    /// Changed paths beyond those listed, counted only.
    pub changed_more: u32,
    /// With `EffectsMode::Diff`: the unified diff, bounded.
    pub diff: Option<String>,
    /// What the diff left out, and the call that shows it.
    pub diff_note: Option<String>,
    /// Where the "before" came from: `after of job N`, `taken while idle`, `taken before launch`.
    pub before: String,
    /// Time the worker spent on the "after" (and on the "before" when taken at launch), µs.
    pub cost_us: u64,
    /// The paths no git status covers (the cwd outside any work tree, writable roots outside it).
    pub watched: Option<WatchedEffects>,
    /// How the "after" was read: `watch` (the change monitor saw no change: no git run), `pathspec`
    /// (a git status of the paths the monitor saw change), `full` (a git status of the whole tree).
    pub method: String,
    /// Why the "after" needed a full status when the monitor was asked (a sentence).
    pub method_note: Option<String>,
    /// git processes run for this ledger (its "before" and "after" and the diff).
    pub git_runs: u32,
    /// `HEAD` moved during the job (a commit, a checkout, a reset): the commits before and after.
    pub head_moved: Option<Box<HeadMove>>,
    /// A git operation the job left under way: `rebase`, `merge`, `cherry-pick`, `revert`, `bisect`.
    pub in_progress: Option<String>,
}

/// `HEAD` before and after a job that moved it: its commit (`None`: no commit yet) and the branch
/// checked out (`None`: detached).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeadMove {
    pub from: Option<String>,
    pub to: Option<String>,
    pub from_branch: Option<String>,
    pub to_branch: Option<String>,
}

/// Directories the effects change monitor watches in one work tree, at most (`describe` states it;
/// lower when the jobs' uid has fewer than four times as many inotify watches); beyond, a full status.
pub const MONITOR_DIRS_MAX: usize = 20_000;
/// Changed paths one status of named paths asks about, at most; beyond, a full status.
pub const MONITOR_PATHS_MAX: usize = 256;

/// Entries one walk of the watched paths looks at, at most (`describe` states it).
pub const WATCH_LIMIT: u32 = 5_000;

/// The watched part of a job's effects: an lstat (and, near the walk, content) comparison of every
/// entry under the watched roots, before and after the job.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchedEffects {
    pub roots: Vec<String>,
    pub scope: String,
    /// `complete` or `partial`.
    pub confidence: String,
    pub reasons: Vec<String>,
    /// Absolute paths: `added`, `deleted`, `modified`, `type-changed`.
    pub changed: Vec<PathChange>,
    pub changed_more: u32,
    /// Entries the larger of the two walks saw.
    pub entries: u32,
    /// The walk's limit ([`WATCH_LIMIT`]).
    pub limit: u32,
    /// Both walks, µs.
    pub cost_us: u64,
}

/// The variables a scoped capture lists, in order: `OLDPWD` (which `cd` sets), then `only` without it
/// (what the worker puts in `__heddle_n`, and what the front expects back).
pub fn capture_names(only: &[String]) -> Vec<String> {
    let rest = only.iter().filter(|n| *n != "OLDPWD").cloned();
    std::iter::once("OLDPWD".to_owned()).chain(rest).collect()
}

/// One file of the files channel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileSpec {
    /// Absolute path (raw bytes).
    #[serde(with = "serde_bytes")]
    pub path: Vec<u8>,
    #[serde(with = "serde_bytes")]
    pub content: Vec<u8>,
    pub mode: Option<u32>,
}

/// What became of one file of the files channel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileOutcome {
    #[serde(with = "serde_bytes")]
    pub path: Vec<u8>,
    /// `None`: written. Otherwise why not, as a sentence.
    pub error: Option<String>,
}

/// A writable root of the session's resolved policy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootInfo {
    pub path: String,
    /// The profile's template (`{project}`).
    pub template: String,
    pub reason: String,
}

/// How [`SandboxInfo::seccomp_denied`] names the refusal of jobs' own pseudo-terminals (the policy's
/// `[seccomp.ptys] deny = true`); the front looks for it to explain a job's failed `openpty`.
pub const PTYS_DENIED: &str = "ioctl(TIOCSPTLCK): pseudo-terminals in jobs ([seccomp.ptys])";

/// The session's sandbox, as the worker built and enforces it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxInfo {
    /// The profile's name.
    pub policy: String,
    pub network: bool,
    /// The running kernel's Landlock ABI (0: none).
    pub landlock_abi: i32,
    /// `fully_enforced`, `partially_enforced` or `not_enforced`.
    pub landlock_status: String,
    /// Handled filesystem rights.
    pub landlock_rights: Vec<String>,
    /// Scopes in force (`signal`, `abstract_unix_socket`).
    pub landlock_scopes: Vec<String>,
    /// The profile's `landlock.require`.
    pub landlock_require: String,
    pub writable: Vec<RootInfo>,
    /// Profile roots not enforced as their own rule, with why (`template: why`).
    pub skipped: Vec<String>,
    /// Names of the syscalls the seccomp filter denies, plus `ioctl(TIOCSTI)`, `x32`, `socket(!AF_UNIX)`,
    /// [`PTYS_DENIED`].
    pub seccomp_denied: Vec<String>,
    /// True once the worker installed the filter on itself (jobs inherit it).
    pub seccomp_installed: bool,
    /// True once the worker restricted itself with its own Landlock domain.
    pub worker_confined: bool,
    /// The session's temp dir (TMPDIR of jobs).
    pub tmp: String,
    /// HOME of jobs, and whether heddle made it for the uid (then the whole of it is a writable root;
    /// otherwise only the profile's `{home}/…` caches are).
    pub home: String,
    pub home_made: bool,
    /// Why jobs are refused, when they are (Landlock requirement not met, sandbox could not be built).
    pub refusal: Option<String>,
}

/// Front → worker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Launch a job.
    Run(RunSpec),
    /// End a job: SIGTERM to its cgroup's processes, then `cgroup.kill` after `grace_ms`
    /// (`0`: `cgroup.kill` at once).
    Kill { job: JobId, grace_ms: u32 },
    /// Stop accepting commands, end every job, exit.
    Shutdown,
    /// Report the job's liveness now (answered by [`Event::Status`]); `probe` is echoed.
    Probe { job: JobId, probe: u64 },
    /// Forget the job: its processes were moved out of the session (kept) by the supervisor. The
    /// worker stops watching its cgroup and stops reporting it (answered by [`Event::Forgotten`]).
    Forget { job: JobId },
    /// A hint: the session's next job would be launched from this spec (its `cmd` and `files` are
    /// empty). The worker may start that bash now, in `job-<spec.job>`, with the state restored, and
    /// hand it the command if a `Run` for that id arrives with the same cwd, environment and restore;
    /// a `Run` that differs starts cold and the pre-started shell is discarded unseen. A later
    /// `Prestart` replaces an earlier one. Once a job of the session has started, a spare waits for a free
    /// CPU (fewer other runnable tasks on the host than CPUs) for at most `cpu_wait_ms` (0: it never
    /// waits); the spare made as the session opens never waits.
    Prestart { spec: RunSpec, cpu_wait_ms: u32 },
    /// Bytes for the job's stdin (a `Tty` or `Pipe` job), queued in order and written as the job reads
    /// them (never dropped); `eof`: after them, close a pipe's write end or type the terminal's EOF
    /// character (Ctrl-D). A job without such a stdin, or one that ended, gets a `Warning`.
    Input {
        job: JobId,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
        eof: bool,
    },
    /// The terminal's window changed (`TIOCSWINSZ`; the kernel sends `SIGWINCH` to its foreground).
    Resize { job: JobId, rows: u16, cols: u16 },
}

/// A process found alive in a job's cgroup.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcStat {
    pub pid: u32,
    /// `/proc/PID/cmdline`, NULs as spaces (`[comm]` when empty).
    pub cmdline: String,
    /// Time since the process started.
    pub age_ms: u64,
    /// CPU time it used (user + system).
    pub cpu_ms: u64,
}

/// What a job's cgroup accounted, read before the cgroup was removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobUsage {
    /// `usage_usec` of the job cgroup's `cpu.stat`: CPU time of every process the job ever had.
    pub cpu_usec: u64,
    /// The most processes the worker saw in the job's cgroup at once (at exit, survivors, probes).
    pub procs_seen: u32,
    /// Peak memory of the job's cgroup (`memory.peak`, pure cgroup v2 with the memory controller on for
    /// job cgroups); `None` where the host cannot tell per job (hybrid hosts account per session).
    pub memory_peak: Option<u64>,
}

/// A running job's liveness, as the worker sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobLiveness {
    /// `cpu.stat` `usage_usec` of the job's cgroup so far.
    pub cpu_usec: u64,
    /// Processes in the job's cgroup now.
    pub procs: u32,
    /// The process the state describes (the deepest one that is not just waiting for a child).
    pub pid: u32,
    /// Its command line, cut to [`crate::procs::MAX_CMDLINE`] bytes.
    pub cmdline: String,
    /// `/proc/PID/stat` state letter (`R`, `S`, `D`, `T`, `Z`).
    pub state: String,
    /// `/proc/PID/wchan`: the kernel function it sleeps in (empty when running or unknown).
    pub wchan: String,
    /// The state in words: "busy", "sleeping on a timer", "blocked reading stdin/tty", ….
    pub activity: String,
}

/// Worker → front.
///
/// **New variants go at the end, and no journaled variant's fields change** (every one but `Output`):
/// sessions' journals on disk hold these events in postcard, by variant index, and a newer heddle
/// replays an earlier one's journals
/// (tests/tests/upgrade.rs reads a fixture written by an earlier build). A variant put in the middle
/// shifts every later one, and the replay stops at the first event it can no longer read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    /// First event of every worker.
    Hello {
        pid: u32,
        uid: u32,
        /// Path of the bash the worker launches.
        bash: String,
        /// `BASH_VERSION` of that bash.
        bash_version: String,
        /// The worker's session cgroup (path on the cgroup v2 mount).
        cgroup: String,
    },
    /// The job's main process is running. `prestarted`: the job runs on a shell pre-started for it
    /// ([`Command::Prestart`]), handed its command now; `false`: a bash spawned for this command.
    /// `cgroup`: the job's cgroup, relative to the session's (`slot-3`; a job cgroup is reused by later
    /// jobs once empty, so the name says nothing about the job's id), empty when the job has none of
    /// its own (a command of the persistent shell).
    Started { job: JobId, pid: u32, at_unix_ns: u64, prestarted: bool, cgroup: String },
    /// The job could not be launched; it never ran.
    SpawnFailed { job: JobId, error: String },
    /// Bytes the job wrote, in order per stream; chunks of both streams in arrival order.
    /// `read_mono_ns` (`CLOCK_MONOTONIC`) and `read_unix_ns` (wall clock) are the worker's clocks right
    /// after the `read` that got `data`: the job wrote it at or before that time. (Output never reaches a
    /// session's journal, which keeps only the other events, so its fields may change.)
    Output {
        job: JobId,
        stream: Stream,
        read_mono_ns: u64,
        read_unix_ns: u64,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    /// The job's main process ended. Every byte it wrote before exiting precedes this event; processes it
    /// left behind may still write (more `Output`), until `StreamsClosed`.
    Exited {
        job: JobId,
        code: Option<i32>,
        signal: Option<i32>,
        at_unix_ns: u64,
        /// True when the end came from a `Kill` command.
        killed: bool,
    },
    /// Both output pipes of the job reached end of file: no more `Output` for it.
    StreamsClosed { job: JobId },
    /// Something the front should tell a human about (not fatal for the worker).
    Warning { job: Option<JobId>, message: String },
    /// The state the job's bash wrote to its private state fd after the command (a job run with
    /// `RunSpec::state`): untrusted bytes in the capture format (docs/architecture.md, "Shell state").
    /// Sent before `Exited`.
    StateCaptured {
        job: JobId,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    /// The capture did not complete (`exec`, `exit`, a signal, the fd closed, too large): the state after
    /// this job is unknown. Sent before `Exited`.
    StateUnknown { job: JobId, reason: String },
    /// Processes still alive in the job's cgroup after its main process exited (follows `Exited`): at
    /// most [`crate::procs::MAX_LISTED`], the rest counted.
    Survivors { job: JobId, procs: crate::procs::ProcList<ProcStat> },
    /// The job's cgroup is empty (`populated 0`): nothing of the job runs any more, and it was removed.
    Emptied { job: JobId, at_unix_ns: u64, usage: JobUsage },
    /// The kernel's OOM killer killed a process of the job (precedes its `Exited`).
    OomKilled { job: JobId },
    /// Forks in the session failed because of its process limit (`pids.max`) while the job ran.
    PidsLimited { job: JobId, limit: u64, failures: u64 },
    /// Answer to `Command::Probe` (`None`: the job is not running or is unknown).
    Status { job: JobId, probe: u64, liveness: Option<JobLiveness> },
    /// Answer to `Command::Forget`: no more events for the job.
    Forgotten { job: JobId },
    /// The session's sandbox; sent once, right after `Hello`.
    Sandbox(SandboxInfo),
    /// The job's files channel, written before its command started; precedes `Started`/`SpawnFailed`.
    FilesWritten { job: JobId, files: Vec<FileOutcome> },
    /// How the worker's launcher created and placed its last job with a cgroup, in words (e.g. "clone3
    /// vfork-style (CLONE_VM|CLONE_VFORK), placed by CLONE_INTO_CGROUP"); sent before the `Started` of
    /// the first such job, and again only when it changes.
    SpawnPath { path: String },
    /// The job's effects ledger (its project part), for a job run with an `EffectsMode` other than
    /// `None`; sent before `Exited`.
    Effects { job: JobId, project: ProjectEffects },
    /// The session's network is off and the job's processes asked for sockets of these families
    /// (`AF_INET`, …), `count` calls in all, each refused `EPERM` by the seccomp filter (precedes its
    /// `Exited`).
    NetworkRefused { job: JobId, count: u32, families: Vec<String> },
    /// Right after `Hello`: the identity of its bash's file (device, inode, size, modification and change
    /// times; empty when it could not be read), which the front passes to later workers
    /// ([`crate::control::BashSeen`]), and whether the worker ran that bash to learn its version
    /// (`false`: it took the version an earlier worker reported for the same file). An event of its own,
    /// not fields of `Hello`: journals keep events (postcard, by position), and an earlier build's
    /// journal must still read; a new variant goes last.
    BashFile { id: String, probed: bool },
}
