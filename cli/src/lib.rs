//! The `heddle` command's library: the control-socket client, socket and state-dir defaults, and the
//! `up` launcher that starts the supervisor (which starts the front).
//!
//! The client is the same one the end-to-end tests and the benchmarks use, so what they measure is what a
//! user's client does: one JSON object per line over a Unix stream socket.
//!
//! ```no_run
//! let mut c = cli::client::Client::connect(&cli::paths::default_socket()).unwrap();
//! let s = c.call("session.open", serde_json::json!({"cwd": "/tmp"})).unwrap();
//! let r = c.call("run", serde_json::json!({"session": s["session"], "cmd": "echo hi"})).unwrap();
//! assert_eq!(r["view"], "hi\n");
//! ```
#![forbid(unsafe_code)]

pub mod calls;
pub mod client;
pub mod mcp_bridge;
pub mod paths;
pub mod up;
