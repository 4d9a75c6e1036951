//! heddle's front: the unprivileged process that holds the kernel (sessions, jobs, output store,
//! views, announcements) and serves clients over the control socket (JSON-RPC 2.0, newline-delimited;
//! see docs/protocol.md).
//!
//! Rooms, from the top down; a room uses only the rooms below it (the import graph between folders
//! runs one way, checked by `rooms_import_one_way` below):
//!
//! | room | owns |
//! |---|---|
//! | [`process`] | the front process: inherited fds, wiring, the serve loop's life |
//! | [`transport`] | the doors: the Unix socket server, MCP, HTTP/SSE |
//! | [`kernel`] | the registry of sessions, the method table and one module per method, admission (peer checks, receipts), records, recovery, shutdown |
//! | [`guard`] | the pre-launch linter's rules and matching |
//! | [`checks`] | test runners' output parsers, a project's checks (`.heddle/checks.toml`, detection) |
//! | [`sessions`] | a live session: its worker link, event pump, journal, subscribers, sandbox request, pre-start hints |
//! | [`jobs`] | one job's record: lifecycle, output bookkeeping, its part of the shell state, its files |
//! | [`output`] | output on disk and in memory: store, line log, terminal rendering, the model view, line views, retention |
//! | [`terminal`] | a terminal job's headless screen (vt100), scrollback and key names |
//! | [`shell`] | the shell state bash carries: capture parsing, records, restore, what a command can change |
//! | [`storage`] | the embedded database |
//! | [`rpc`] | the vocabulary every room speaks: JSON-RPC framing and errors, result shapes, a connection's outbox |
//!
//! Threads and locks are in docs/architecture.md ("The front's threads and locks"); choices the
//! JSON-RPC framing leaves open in docs/protocol.md.
//!
//! Invariants: the front never needs more privilege than its own uid and contains no `unsafe`; no
//! connection owns anything (a client that disconnects cancels nothing); a job's state moves forward
//! once and is never re-run; every output byte is counted exactly and kept on disk while the disk
//! takes it; waiting is condvar-based, never polling; bytes read from shared memory are untrusted.
//!
//! ```no_run
//! # fn demo(control: std::os::fd::OwnedFd, listener: std::os::unix::net::UnixListener) {
//! let cfg = front::kernel::KernelConfig { state_dir: "/var/lib/heddle".into(), socket: "/run/heddle/heddle.sock".into(), cgroup_root: None };
//! std::process::exit(front::process::serve(cfg, control, listener).unwrap());
//! # }
//! ```
#![forbid(unsafe_code)]

pub mod checks;
pub mod guard;
pub mod jobs;
pub mod kernel;
pub mod output;
pub mod process;
pub mod rpc;
pub mod sessions;
pub mod shell;
pub mod storage;
pub mod terminal;
pub mod transport;

#[cfg(test)]
mod testing;
