//! The transport room: the doors a client comes in by, each a translation onto the one kernel
//! ([`crate::kernel::Kernel::answer`]), holding no copy of its state.
//!
//! - [`socket`]: the control socket's server — accepts connections, reads JSON-RPC lines, answers
//!   through each connection's outbox, and hands a connection that speaks MCP to [`mcp`].
//! - `lines`: a connection's input split into bounded lines, for [`socket`].
//! - [`mcp`]: the Model Context Protocol (2025-11-25, with 2025-06-18, 2025-03-26 and 2024-11-05 accepted), served
//!   on the control socket after `mcp.attach` (what `heddle mcp` sends) or a bare `initialize`. One MCP
//!   connection is one heddle session.
//! - [`mcp_tools`]: the tools, their JSON schemas and the descriptions a model reads.
//! - [`mcp_progress`]: progress notifications while a tool call waits on a job.
//! - [`mcp_tasks`]: task-augmented `run`/`check` calls: the job is the task.
//! - [`http`]: the HTTP door (`heddle up --http`): `/rpc`, MCP's streamable HTTP on `/mcp`, and
//!   `/events` (Server-Sent Events); the only place tokio runs.
//!
//! May use: every room below it (`kernel`, `sessions` for subscriptions, `output`, `rpc`) and the
//! `protocol` crate (the results and their text form). Used by: `process`, which starts the socket
//! server and the HTTP door.

pub mod http;
mod lines;
pub mod mcp;
pub mod mcp_progress;
pub mod mcp_tasks;
pub mod mcp_tools;
pub mod socket;
