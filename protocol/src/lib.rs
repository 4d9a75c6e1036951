//! heddle's client protocol, shared by every side of the control socket: the results a method answers
//! with as serde types ([`results`]), and the one deterministic text a model reads of a job result
//! ([`text`]), used by the MCP door and by `heddle run` alike.
//!
//! The front serializes these types; clients (the CLI, the MCP door, tests, benchmarks) deserialize
//! them. Field names are the protocol's (docs/protocol.md); `tests/schema.rs` fails when one is renamed
//! without the docs (and the front's `kernel::params_schema` when a param is), reading the docs with
//! [`doc_schema`].
//!
//! ```
//! let r: protocol::results::JobResult =
//!     serde_json::from_str(r#"{"job":3,"state":"exited","exit_code":0,"duration_ms":1.5,"view":"hi\n"}"#).unwrap();
//! assert_eq!(protocol::text::job_result(&r).lines().next(), Some("exit 0 · 1.5 ms · job 3"));
//! ```
#![forbid(unsafe_code)]

pub mod checks;
pub mod doc_schema;
pub mod results;
pub mod text;
