//! The worker: one per session, unprivileged. It launches the session's jobs, each in its own cgroup, and
//! streams their output and ends into the session's event ring.
//!
//! `heddle-worker --session ID --cgroup DIR` starts with fds 3–7 from the supervisor (region, cmd_data,
//! cmd_space, evt_data, evt_space; see docs/architecture.md, "Command lines"), publishes `Hello`, then
//! serves commands in a single-threaded `mio` loop ([`event_loop`]) until `Shutdown`:
//!
//! - `Run` → [`job_run`]: `mkdir job-<N>`, `clone3(CLONE_INTO_CGROUP)` through the launcher, `Started`
//!   or `SpawnFailed`;
//! - `Prestart` → [`spare`]: a bash started ahead for the next job, state restored, handed its command
//!   by the `Run` it was started for;
//! - shell state → [`state`]: the wrapper around the command and the private state pipe;
//! - output → [`output`]: pipe chunks as `Output`, with backpressure when the ring is full;
//! - the main process ends → [`job`]: reap, `Exited` after every byte written before the exit, then
//!   `StreamsClosed` at EOF, then `rmdir` of the job cgroup;
//! - after `Exited` → [`job_settle`]: survivors listed, the cgroup watched (inotify) until empty, then
//!   `Emptied` with its accounting and `rmdir`; `Probe` (liveness) and `Forget` (kept jobs);
//! - `Kill` / `Shutdown` → [`job_kill`]: `cgroup.kill`, or SIGTERM with a grace period first.
//!
//! Invariants: an idle worker blocks in `epoll_wait` with no timeout (no CPU); output is never dropped or
//! reordered within a stream; nothing outside a job's cgroup is ever signalled; all `unsafe` code lives in
//! [`sys`]. The cgroup operations sit behind [`cgroup::CgroupOps`], so the whole loop runs in tests without
//! root over heap rings ([`cgroup::RecordingCgroups`]).
//!
//! ```no_run
//! use worker::{cgroup::SessionCgroup, Channels, Settings};
//! let dir = std::path::Path::new("/sys/fs/cgroup/unified/heddle/session-a");
//! let channels = Channels::inherited().unwrap();
//! worker::serve(channels, SessionCgroup::open(dir).unwrap(), Settings::for_session(dir, None)).unwrap();
//! ```
#![deny(unsafe_code)]

pub mod cgroup;
pub mod effects;
pub(crate) mod effects_monitor;
pub mod effects_watch;
pub mod emit;
pub mod event_loop;
pub mod input;
pub mod job;
pub mod job_effects;
pub mod job_kill;
pub mod job_run;
pub mod job_settle;
pub mod limits;
pub mod network;
pub mod output;
pub mod persistent;
pub mod procinfo;
pub mod sandbox;
pub mod shell_run;
pub mod spare;
pub mod startup;
pub mod state;
pub mod sys;

pub use event_loop::{serve, Channels, Settings, Worker, WorkerError};
pub use startup::{probe_bash_version, StartupError};
