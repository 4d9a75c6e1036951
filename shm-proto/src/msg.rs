//! Messages carried in a session's rings: [`Command`] front→worker, [`Event`] worker→front.
//!
//! Both are postcard-encoded inside ring frames. A decoder meets untrusted bytes: decoding returns an
//! error for garbage, never panics (property-tested in `frame`).

use serde::{Deserialize, Serialize};

/// A job's id, unique inside its session, assigned by the front (`1`, `2`, …).
pub type JobId = u64;

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
}

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
    /// Run in the session's persistent shell (one long-lived bash, one command at a time) instead of a
    /// fresh bash; `state` then restores only a shell that (re)starts for this command.
    pub persistent: bool,
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
}

/// Worker → front.
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
    /// The job's main process is running.
    Started { job: JobId, pid: u32, at_unix_ns: u64 },
    /// The job could not be launched; it never ran.
    SpawnFailed { job: JobId, error: String },
    /// Bytes the job wrote, in order per stream; chunks of both streams in arrival order.
    Output {
        job: JobId,
        stream: Stream,
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
}
