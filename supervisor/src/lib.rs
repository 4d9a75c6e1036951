//! heddle's supervisor: the only privileged process, and as small as it can be.
//!
//! It owns the delegated cgroup tree, spawns the front (once) and one worker per session with dropped
//! privileges, creates each session's shared-memory region and doorbells, hands their fds to the worker
//! (inherited) and the front (`SCM_RIGHTS`), and ends sessions with `cgroup.kill`, verified empty. It
//! speaks only the binary control messages of [`shm_proto::control`] and parses nothing else.
//!
//! Layout, by operation: [`startup`] (checks, cgroup root, socket, front), [`exclusive`] (the
//! server's hold of its cgroup root and state directory), [`event_loop`] (mio loop
//! and shutdown), [`session_table`] (table and dispatch), [`session_open`], [`session_close`], [`spawn`]
//! (privilege-dropping spawns), [`cgroup`] (mode detection and the [`cgroup::CgroupTreeOps`] trait),
//! [`users`], [`signals`], and [`sys`], the one module with `unsafe` code.
//!
//! Invariants: nothing is ever killed by pid or by name (sessions end by `cgroup.kill`; the only
//! signal sent is SIGKILL to our own front through its pidfd); no child keeps root past exec.
//!
//! ```no_run
//! use clap::Parser;
//! supervisor::run(supervisor::cli::Args::parse())?;
//! # Ok::<(), supervisor::Error>(())
//! ```
#![deny(unsafe_code)]

pub mod cgroup;
pub mod cli;
pub mod delegated;
pub mod event_loop;
pub mod exclusive;
#[cfg(test)]
mod fake;
pub mod http_door;
pub mod kept;
pub mod kept_output;
pub mod limits;
pub mod owned_project;
pub mod recovery;
pub mod session;
pub mod session_close;
pub mod session_open;
pub mod session_table;
pub mod session_uids;
pub mod signals;
pub mod spawn;
pub mod startup;
pub mod state_format;
pub mod sys;
pub mod users;

/// Why the supervisor stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("the supervisor could not start")]
    Start(#[from] startup::StartError),
    #[error("the supervisor's main loop failed")]
    Loop(#[from] event_loop::LoopError),
}

/// The exit status of a supervisor that could not start (bad flags exit 2, from clap): `heddle up` does
/// not retry a first start that fails so; it reports it and exits.
pub const EXIT_START_FAILED: i32 = 3;

/// Start and serve until SIGINT or SIGTERM, then shut down in order.
pub fn run(args: cli::Args) -> Result<(), Error> {
    startup::start(&args)?.run()?;
    Ok(())
}
