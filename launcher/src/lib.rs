//! The launcher: the one place that turns a job spec into a running process.
//!
//! A job is [`Prepared`] before any fork (program, `argv`, `envp`, working directory, stdio fds, optional
//! cgroup directory), then [`spawn`]ed: a vfork-style `clone3(CLONE_VM | CLONE_VFORK | CLONE_PIDFD |
//! CLONE_INTO_CGROUP)` on a dedicated stack (fork-style where that is refused; see [`CloneStyle`]) whose
//! child runs a fixed list of async-signal-safe steps — `dup2` of stdin/stdout/stderr onto 0/1/2, close
//! every other fd (`close_range`), `chdir`, reset signal dispositions and mask, no_new_privs,
//! `landlock_restrict_self` on a prebuilt ruleset ([`landlock_rules`]), `execve`. The seccomp filter
//! ([`seccomp`]) is installed once in the launching process and inherited. [`sandbox`] builds both from
//! a resolved policy; [`files`] writes the files channel under a job's ruleset. A failed step comes back to the
//! parent as a precise [`LaunchError`] through a close-on-exec status pipe; success returns a [`Child`]
//! with its pid and pidfd. [`job_env`] builds the allowlisted job environment.
//!
//! Invariants:
//! - nothing between fork and exec allocates, locks or formats (everything is built in [`Prepared`]);
//! - a job process never inherits an fd beyond 0, 1, 2;
//! - a job given a cgroup never runs an instruction outside it (kernel placement at clone, or the child's
//!   first step on kernels without `CLONE_INTO_CGROUP`; see [`cgroup_spawn_path`]);
//! - all `unsafe` code lives in the private `sys` module.
//!
//! The same code ships as the `heddle-launch` binary ([`run_command`]).
//!
//! ```no_run
//! use launcher::{job_env, process_env, spawn, Prepared, Stdio};
//! let out = std::io::stdout();
//! let stdio = Stdio::null_stdin(
//!     std::os::fd::AsFd::as_fd(&out).try_clone_to_owned().unwrap(),
//!     std::os::fd::AsFd::as_fd(&std::io::stderr()).try_clone_to_owned().unwrap(),
//! ).unwrap();
//! let job = Prepared::bash("echo hello", &job_env(&process_env(), &[]), None, stdio).unwrap();
//! let child = spawn(&job).unwrap();
//! drop(job);
//! assert_eq!(child.wait().unwrap().code(), Some(0));
//! ```
#![deny(unsafe_code)]

pub mod env;
pub mod files;
pub mod landlock_rules;
pub mod prepare;
pub mod run_command;
pub mod sandbox;
pub mod seccomp;
pub mod spawn;
mod sys;

pub use env::{job_env, policy_env, process_env};
pub use prepare::{resolve_program, PrepareError, Prepared, Stdio, BASH};
pub use spawn::{
    cgroup_spawn_path, clone_style, describe_spawn, spawn, Child, CloneStyle, Exit, LaunchError, SpawnPath,
};
