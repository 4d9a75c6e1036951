//! heddle's front: the unprivileged process that holds the kernel (sessions, jobs, output store,
//! views, announcements) and serves clients over the control socket (JSON-RPC 2.0, newline-delimited;
//! see docs/protocol.md).
//!
//! Layout, by operation: [`rpc`] (framing and errors), [`server`] (connections), [`supervisor_link`]
//! (the supervisor, behind a trait), [`pump`] (the one thread reading every session's event ring),
//! [`session`] and [`job`] (records and state machines), [`store`] and [`view`] (output on disk and
//! in memory), [`state_capture`] and [`state_record`] (the shell state carried between jobs), one module per
//! method (`session_open`, `session_close`, `job_run`, `job_wait`, `job_kill`, `job_keep`, `job_probe`,
//! `jobs_list`, `output_read`, `describe`), [`kernel`] (the registry and method table),
//! [`inherit`] and [`service`] (the process). Threads and locks are in docs/architecture.md ("The
//! front's threads and locks"); choices the JSON-RPC framing leaves open in docs/protocol.md.
//!
//! Invariants: the front never needs more privilege than its own uid and contains no `unsafe`; no
//! connection owns anything (a client that disconnects cancels nothing); a job's state moves forward
//! once and is never re-run; every output byte is counted exactly and kept on disk while the disk
//! takes it; waiting is condvar-based, never polling; bytes read from shared memory are untrusted.
//!
//! ```no_run
//! # fn demo(control: std::os::fd::OwnedFd, listener: std::os::unix::net::UnixListener) {
//! let cfg = front::kernel::KernelConfig { state_dir: "/var/lib/heddle".into(), socket: "/run/heddle/heddle.sock".into(), cgroup_root: None };
//! std::process::exit(front::service::serve(cfg, control, listener).unwrap());
//! # }
//! ```
#![forbid(unsafe_code)]

pub mod bash_parse;
pub mod binary;
pub mod checks;
pub mod db;
pub mod describe;
pub mod describe_session;
pub mod guard;
pub mod inherit;
pub mod job;
pub mod job_files;
pub mod job_keep;
pub mod job_kill;
pub mod job_probe;
pub mod job_run;
pub mod job_state;
pub mod job_wait;
pub mod jobs_list;
pub mod journal;
pub mod kernel;
pub mod linelog;
pub mod outbox;
pub mod output_read;
pub mod output_views;
pub mod peer_check;
pub mod prestart;
pub mod pump;
pub mod receipts;
pub mod records;
pub mod recovery;
pub mod rendered;
pub mod results;
pub mod retention;
pub mod revive;
pub mod rpc;
pub mod sandbox;
pub mod screen;
pub mod server;
pub mod service;
pub mod session;
pub mod session_close;
pub mod session_open;
pub mod shutdown;
pub mod state_capture;
pub mod state_env;
pub mod state_record;
pub mod state_scope;
pub mod store;
pub mod subscribe;
pub mod supervisor_link;
pub mod transport;
pub mod view;

#[cfg(test)]
mod testing;
