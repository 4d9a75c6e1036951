//! MCP on a control-socket connection: the same newline-delimited JSON-RPC 2.0 framing, another
//! method set. One MCP connection works in one heddle session.
//!
//! A connection becomes an MCP connection with its first MCP-shaped request:
//! - `mcp.attach {session?, cwd?, close_on_exit?, network?, policy?}` (what `heddle mcp` sends before it
//!   relays the agent's host): attaches to the named session, or opens it (a fresh one when no name is
//!   given) with `cwd`; answered like any JSON-RPC request with `{session, attached, cwd}`.
//! - a bare `initialize`: the session is opened at the first tool call, fresh, with cwd `/`.
//!
//! Then it answers `initialize`, `ping`, `tools/list`, `tools/call`, `prompts/list`, `prompts/get`, and
//! takes the client's notifications (`notifications/initialized`, `notifications/cancelled`: a
//! cancelled call still completes; cancelling observation never cancels a job). A tool call becomes
//! one kernel method ([`super::mcp_tools::params`]) through [`Kernel::answer`], so receipts, idempotency
//! keys and the per-uid rules apply unchanged; its result is `{content: [{type: text, text}],
//! structuredContent: <the method's JSON result>, isError}`. A kernel error is a tool result with
//! `isError: true` and the kernel's sentence; an unknown tool or malformed call is a JSON-RPC error.
//! When the connection ends, the session is closed only if `close_on_exit` was asked. A session closed
//! from outside while the connection lives is opened again (as it was first opened) at the next tool
//! call, whose text begins with a note saying so (`McpConnection::reopening`).
//!
//! ```
//! assert!(front::transport::mcp::speaks_mcp(br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#));
//! assert!(!front::transport::mcp::speaks_mcp(br#"{"jsonrpc":"2.0","id":1,"method":"run","params":{}}"#));
//! ```

use super::mcp_progress::Progress;
use super::mcp_tasks::Tasks;
use super::mcp_tools;
use crate::kernel::{Client, Kernel};
use crate::rpc::outbox::Outbox;
use crate::rpc::{self, ErrorKind, Request, RpcError};
use crate::sessions::session::Session;
use serde::Deserialize;
use serde_json::value::{to_raw_value, RawValue};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::Arc;

/// The protocol versions this server speaks, newest first.
pub const PROTOCOL_VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// True when a plain connection's line starts MCP (`mcp.attach` or `initialize`). A byte search first,
/// so plain JSON-RPC lines are not parsed twice.
pub fn speaks_mcp(line: &[u8]) -> bool {
    let maybe = memchr::memmem::find(line, b"\"mcp.attach\"").is_some()
        || memchr::memmem::find(line, b"\"initialize\"").is_some();
    maybe && rpc::parse_request(line).is_ok_and(|r| matches!(r.method.as_str(), "mcp.attach" | "initialize"))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct AttachParams {
    #[serde(default)]
    session: Option<String>,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    close_on_exit: bool,
    #[serde(default)]
    network: Option<bool>,
    #[serde(default)]
    policy: Option<String>,
    /// The bridge offers its stdin and stdout: after the answer it sends them (`SCM_RIGHTS`), and the
    /// server reads and writes the agent's pipes itself (the socket server's `hand_over`).
    #[serde(default)]
    hand_over_stdio: bool,
    /// Carry on in `session` as it was, or not at all: what a bridge whose server went away sends. The
    /// attach is refused when the name would open afresh (closed, shut down, another uid's).
    #[serde(default)]
    resume: bool,
    /// With `hand_over_stdio`: the bridge sends a third descriptor, a memfd where the server keeps the
    /// ids of the requests it read and has not answered (`transport::socket::Pending`).
    #[serde(default)]
    pending_page: bool,
}

impl std::fmt::Debug for McpConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpConnection").finish_non_exhaustive()
    }
}

/// One MCP connection's state: which session it works in and whether it ends with the connection.
pub struct McpConnection {
    session: Option<String>,
    close_on_exit: bool,
    /// `mcp.attach` asked to hand its stdio over and was answered yes: the socket server takes the
    /// descriptors next ([`McpConnection::take_hand_over`]).
    hand_over: bool,
    /// The tasks of task-augmented calls made on this connection.
    tasks: Tasks,
    /// The hand-over brings a pending page (`mcp.attach {pending_page: true}`).
    pending_page: bool,
    /// The `session.open` that opened the session, under the name it got: what opens it again when it
    /// was closed from outside ([`McpConnection::reopening`]). Null when the connection attached to a
    /// session another client had opened (its settings are not the connection's to repeat).
    reopen: Value,
    /// The latest tool calls answered, with the jobs each reported (its job's end, its announcements):
    /// a call the client cancels after its answer was written had its answer ignored, so those jobs are
    /// announced again ([`McpConnection::cancelled`]).
    answered: VecDeque<(String, Vec<u64>)>,
    /// The jobs the tool call being answered reported (set by [`McpConnection::call_tool`]).
    reported: Vec<u64>,
}

/// Tool calls remembered for a cancellation that comes after their answer.
const ANSWERED_KEPT: usize = 16;

/// A request id as one spelling (`1`, `"a"`), whatever the whitespace and escapes it came with.
fn canonical_id(raw: &str) -> String {
    serde_json::from_str::<Value>(raw).map_or_else(|_| raw.to_owned(), |v| v.to_string())
}

/// A kernel method's encoded result, and the session it worked in.
type Answered = (Result<Box<RawValue>, RpcError>, Option<Arc<Session>>);

/// What one line produced: the reply to write (none for a notification) and the session the call
/// worked in (its database rows are brought up to date after the reply, [`Kernel::after_answer`]).
pub type Answer = (Option<Vec<u8>>, Option<Arc<Session>>);

impl McpConnection {
    /// Serve the line that may make this connection MCP: `None` if it was not MCP-shaped after all, else
    /// the answer and the MCP connection (none when `mcp.attach` failed: the connection stays plain).
    pub fn start(kernel: &Kernel, client: &Client, line: &[u8]) -> Option<(Option<McpConnection>, Answer)> {
        let req = rpc::parse_request(line).ok()?;
        match req.method.as_str() {
            "mcp.attach" => {
                let id = req.id.as_deref();
                match attach(kernel, client, req.params.clone()) {
                    Ok((conn, result)) => {
                        Some((Some(conn), (id.map(|id| rpc::encode_result(Some(id), &result)), None)))
                    }
                    // Not attached: the connection stays plain, and the client hears why.
                    Err(e) => Some((None, (id.map(|id| rpc::encode_error(Some(id), &e)), None))),
                }
            }
            "initialize" => {
                let mut conn = McpConnection {
                    session: None,
                    close_on_exit: false,
                    hand_over: false,
                    tasks: Tasks::default(),
                    pending_page: false,
                    reopen: Value::Null,
                    answered: VecDeque::new(),
                    reported: Vec::new(),
                };
                let answer = conn.serve(kernel, client, req, None);
                Some((Some(conn), answer))
            }
            _ => None,
        }
    }

    /// Answer one line of an MCP connection; `out` carries progress notifications while a call waits
    /// (none: no progress is sent).
    pub fn answer(&mut self, kernel: &Kernel, client: &Client, line: &[u8], out: Option<&Outbox>) -> Answer {
        if line.trim_ascii().is_empty() {
            return (None, None);
        }
        match rpc::parse_request(line) {
            Ok(req) => self.serve(kernel, client, req, out),
            Err(bad) if bad.notification => (None, None),
            Err(bad) => (Some(rpc::encode_error(bad.id.as_deref(), &bad.error)), None),
        }
    }

    /// Whether the hand-over brings a pending page (a third descriptor).
    pub fn offers_pending_page(&self) -> bool {
        self.pending_page
    }

    /// The connection ended: close the session if the client asked for that when attaching.
    pub fn finish(&self, kernel: &Kernel, client: &Client) {
        if let (true, Some(s)) = (self.close_on_exit, &self.session) {
            if let Err(e) = kernel.call(client, "session.close", json!({"session": s})) {
                tracing::warn!("closing MCP session '{s}' at disconnect failed: {e}");
            }
        }
    }

    fn serve(&mut self, kernel: &Kernel, client: &Client, req: Request, out: Option<&Outbox>) -> Answer {
        let Some(id) = req.id else {
            // Notifications (`notifications/initialized`, `notifications/cancelled`, …) need no answer;
            // a cancelled call runs to its end (observation never steers execution).
            if req.method == "notifications/cancelled" {
                self.cancelled(kernel, client, &req.params);
            }
            return (None, None);
        };
        let (result, named) = match req.method.as_str() {
            "initialize" => (Ok(initialize(&req.params)), None),
            "ping" => (Ok(json!({})), None),
            "tools/list" => (Ok(mcp_tools::list()), None),
            "tools/call" => {
                // The tool result is already encoded (the kernel's JSON embedded verbatim).
                let (result, named) = self.call_tool(kernel, client, req.params, out);
                let reported = std::mem::take(&mut self.reported);
                if self.answered.len() == ANSWERED_KEPT {
                    self.answered.pop_front();
                }
                self.answered.push_back((canonical_id(id.get()), reported));
                let reply = match result {
                    Ok(raw) => rpc::encode_result(Some(&id), &raw),
                    Err(e) => rpc::encode_error(Some(&id), &e),
                };
                return (Some(reply), named);
            }
            "prompts/list" => (Ok(prompts_list()), None),
            "tasks/get" => (self.tasks.get(kernel, client, self.session.as_deref(), &req.params), None),
            "tasks/list" => (Ok(self.tasks.list(kernel, client)), None),
            "tasks/result" => {
                (self.tasks.result(kernel, client, self.session.as_deref(), &req.params, tool_result), None)
            }
            "tasks/cancel" => (self.tasks.cancel(kernel, client, self.session.as_deref(), &req.params), None),
            "prompts/get" => (prompts_get(&req.params), None),
            "mcp.attach" => (
                Err(RpcError::new(
                    ErrorKind::InvalidRequest,
                    "this connection is already an MCP connection; mcp.attach comes first, once",
                )),
                None,
            ),
            m => (
                Err(RpcError::new(
                    ErrorKind::MethodNotFound,
                    format!("heddle's MCP server has no method '{m}'; it serves initialize, ping, tools/list, tools/call, prompts/list, prompts/get and tasks/get, tasks/list, tasks/result, tasks/cancel"),
                )),
                None,
            ),
        };
        let reply = match result {
            Ok(v) => rpc::encode_result(Some(&id), &v),
            Err(e) => rpc::encode_error(Some(&id), &e),
        };
        (Some(reply), named)
    }

    /// The client cancelled a call (`notifications/cancelled {requestId}`). Its job runs on; a call
    /// answered already had its answer ignored by the client (MCP: a response after a cancellation is
    /// dropped), so the jobs that answer reported are announced again by the next call. (Calls on one
    /// connection are answered in order, so a cancellation read here comes after the call's answer.)
    pub fn cancelled(&mut self, kernel: &Kernel, client: &Client, params: &Value) {
        let Some(id) = params.get("requestId").map(|v| canonical_id(&v.to_string())) else { return };
        let Some(at) = self.answered.iter().position(|(i, _)| *i == id) else { return };
        let (_, jobs) = self.answered.remove(at).unwrap_or_default();
        if let Some(s) = &self.session {
            kernel.unreport(client, s, &jobs);
        }
    }

    /// The jobs the tool call with request id `id` (its JSON text) reported, taken (for an answer that
    /// could not be written: they are announced again).
    pub fn take_reported(&mut self, id: &str) -> Option<(String, Vec<u64>)> {
        let id = canonical_id(id);
        let at = self.answered.iter().rposition(|(i, _)| *i == id)?;
        let (_, jobs) = self.answered.remove(at)?;
        Some((self.session.clone()?, jobs))
    }

    fn call_tool(
        &mut self,
        kernel: &Kernel,
        client: &Client,
        params: Value,
        out: Option<&Outbox>,
    ) -> (Result<Box<RawValue>, RpcError>, Option<Arc<Session>>) {
        let raw = |v: Value| to_raw_value(&v).map_err(|e| RpcError::internal(e.to_string()));
        let Some(tool) = params.get("name").and_then(Value::as_str) else {
            let e =
                RpcError::new(ErrorKind::InvalidParams, "tools/call needs `name`, the tool to call (see tools/list)");
            return (Err(e), None);
        };
        let session = match self.session() {
            Some(s) => s,
            None => match attach(kernel, client, json!({})) {
                Ok((conn, _)) => {
                    self.session = conn.session;
                    self.reopen = conn.reopen;
                    self.session.clone().unwrap_or_default()
                }
                Err(e) => return (raw(tool_error(&e)), None),
            },
        };
        let args = params.get("arguments").cloned().unwrap_or(Value::Null);
        let (method, call_params) = match mcp_tools::params(tool, args, &session) {
            Ok(p) => p,
            Err(e) if e.message.starts_with("there is no tool") => return (Err(e), None),
            Err(e) => return (raw(tool_error(&e)), None),
        };
        if let Some(meta) = params.get("task").filter(|t| t.is_object()) {
            // A task-augmented call: admit the job without waiting and answer `{task}` at once.
            if !crate::transport::mcp_tasks::TASK_TOOLS.contains(&method) {
                return (Err(crate::transport::mcp_tasks::not_a_task_tool(tool)), None);
            }
            let mut call_params = call_params;
            call_params["yield_ms"] = json!(0);
            let ((result, named), note) =
                self.reopening(kernel, client, &session, || kernel.answer(client, method, call_params.clone()));
            let admitted = result.and_then(|raw| {
                serde_json::from_str::<Value>(raw.get()).map_err(|e| RpcError::internal(e.to_string()))
            });
            let mut task = |v: Value| self.tasks.admit(kernel, client, method, &v, meta, note.clone());
            return (admitted.and_then(|v| raw(task(v))), named);
        }
        let token = params.get("_meta").and_then(|m| m.get("progressToken")).filter(|t| t.is_string() || t.is_number());
        // A run's result as the kernel had it, for the text form (reading the JSON back cost ~20 µs).
        let typed: std::cell::RefCell<Option<Box<protocol::results::JobResult>>> = Default::default();
        let answer = || match (token, out, method) {
            (Some(token), Some(out), "run" | "wait") => {
                let job = call_params.get("job").and_then(Value::as_u64);
                let progress = Progress::new(token.clone(), out, job);
                std::thread::scope(|scope| {
                    scope.spawn(|| progress.follow(kernel, client, &session));
                    let answered =
                        kernel.answer_observed(client, method, call_params.clone(), &|j| progress.set_job(j));
                    progress.stop();
                    answered
                })
            }
            _ => kernel.answer_typed(client, method, call_params.clone(), &|_| {}, Some(&mut typed.borrow_mut())),
        };
        let ((result, named), reopened) = self.reopening(kernel, client, &session, answer);
        let with_note = |text: String| match &reopened {
            Some(note) => format!("{note}\n{text}"),
            None => text,
        };
        if let Ok(r) = &result {
            // The common case, with no detour through a `Value`: the text form from the typed result,
            // the kernel's JSON as the structured content, byte for byte.
            let text = match typed.borrow_mut().take() {
                Some(job) => Some(mcp_tools::job_text(&job)),
                None => mcp_tools::text_raw(method, r.get()),
            };
            if let Some((text, reported)) = text {
                self.reported = reported;
                let text = with_note(text);
                let content = [TextContent { kind: "text", text: &text }];
                let done = ToolResult { content: &content, structured_content: r, is_error: false };
                return (to_raw_value(&done).map_err(|e| RpcError::internal(e.to_string())), named);
            }
        }
        let read = result.and_then(|raw| {
            serde_json::from_str::<Value>(raw.get())
                .map_err(|e| RpcError::internal(format!("the {method} result could not be read back: {e}")))
        });
        if let Ok(v) = &read {
            self.reported = mcp_tools::reported(v);
        }
        let mut value = tool_result(method, read);
        if let Some(t) = value["content"][0]["text"].as_str().map(str::to_owned) {
            value["content"][0]["text"] = Value::String(with_note(t));
        }
        (raw(value), named)
    }

    /// Answer with `call`; if the connection's session is gone (closed from outside: `heddle close`,
    /// another client's `session.close`), open it again as it was first opened, say so, and answer
    /// once more. Nothing ran the first time (the kernel refuses a call in an unknown session before
    /// admitting anything), so the call is not run twice. Returns the note to put before the result.
    fn reopening(
        &mut self,
        kernel: &Kernel,
        client: &Client,
        session: &str,
        call: impl Fn() -> Answered,
    ) -> (Answered, Option<String>) {
        let first = call();
        let gone = matches!(&first.0, Err(e) if e.kind == ErrorKind::UnknownSession);
        if !gone {
            return (first, None);
        }
        if !self.reopen.is_object() {
            let e = RpcError::new(
                ErrorKind::UnknownSession,
                format!(
                    "session '{session}' was closed from outside this connection (its jobs ended with it); another \
                     client had opened it with settings of its own, so heddle does not open it again: start the MCP \
                     server again, or attach it to a session of its own"
                ),
            );
            return ((Err(e), None), None);
        }
        let opened = kernel
            .call(client, "session.open", self.reopen.clone())
            .and_then(|raw| serde_json::from_str::<Value>(raw.get()).map_err(|e| RpcError::internal(e.to_string())));
        let opened = match opened {
            Ok(v) => v,
            Err(e) => {
                tracing::info!("MCP session '{session}' was closed and could not be opened again: {e}");
                return (first, None);
            }
        };
        let cwd = opened["cwd"].as_str().unwrap_or("/");
        let note = match opened["attached"].as_bool() {
            Some(true) => format!(
                "note: session '{session}' was closed from outside this connection (its jobs ended with it), and \
                 another call opened it again meanwhile: this is a new session, with its own jobs and shell state"
            ),
            _ => format!(
                "note: session '{session}' was closed from outside this connection (its jobs ended with it); heddle \
                 opened it again in {cwd}: job numbers and shell state (cwd, variables, functions) start afresh \
                 (kept jobs live on: kept lists them)"
            ),
        };
        // The tasks of the closed session name jobs that are gone, and its job numbers are used again.
        self.tasks = Tasks::after_reopen();
        (call(), Some(note))
    }

    fn session(&self) -> Option<String> {
        self.session.clone()
    }

    /// Whether the attach just answered promised to take the bridge's stdio (asked once: false after).
    pub fn take_hand_over(&mut self) -> bool {
        std::mem::take(&mut self.hand_over)
    }
}

fn attach(kernel: &Kernel, client: &Client, params: Value) -> Result<(McpConnection, Value), RpcError> {
    let p: AttachParams = rpc::params("mcp.attach", params)?;
    if p.resume {
        let Some(name) = p.session.as_deref() else {
            return Err(RpcError::new(ErrorKind::InvalidParams, "resume needs the session's name".to_owned()));
        };
        let resumable = crate::kernel::session_open::resumable(kernel, client.uid, name);
        if resumable.is_none() {
            let msg = format!("session '{name}' is being opened by another call; retry in a moment");
            return Err(RpcError::new(ErrorKind::SessionOpenFailed, msg));
        }
        if resumable == Some(false) {
            return Err(RpcError::new(
                ErrorKind::UnknownSession,
                format!(
                    "session '{name}' cannot be carried on: it was closed, or the server was shut down with its \
                     sessions, or it is not this user's; start `heddle mcp` again for a session of its own"
                ),
            ));
        }
    }
    let mut open = json!({"cwd": p.cwd.as_deref().unwrap_or("/")});
    if let Some(n) = &p.session {
        open["name"] = json!(n);
    }
    if let Some(n) = p.network {
        open["network"] = json!(n);
    }
    if let Some(pol) = &p.policy {
        open["policy"] = json!(pol);
    }
    let raw = kernel.call(client, "session.open", open.clone())?;
    let opened: Value = serde_json::from_str(raw.get()).map_err(|e| RpcError::internal(e.to_string()))?;
    let session = opened["session"].as_str().unwrap_or_default().to_owned();
    open["name"] = json!(session);
    let mut result = json!({
        "session": session,
        "attached": opened["attached"],
        "cwd": opened["cwd"],
        "close_on_exit": p.close_on_exit,
        "note": opened["note"],
    });
    if p.hand_over_stdio {
        result["hand_over_stdio"] = json!(true);
        if p.pending_page {
            result["pending_page"] = json!(true);
        }
    }
    let conn = McpConnection {
        session: Some(session),
        close_on_exit: p.close_on_exit,
        hand_over: p.hand_over_stdio,
        tasks: Tasks::default(),
        pending_page: p.hand_over_stdio && p.pending_page,
        reopen: if opened["attached"] == true { Value::Null } else { open },
        answered: VecDeque::new(),
        reported: Vec::new(),
    };
    Ok((conn, result))
}

/// A tool result whose structured content is the kernel's JSON as it is.
#[derive(serde::Serialize)]
struct ToolResult<'a> {
    content: &'a [TextContent<'a>],
    #[serde(rename = "structuredContent")]
    structured_content: &'a RawValue,
    #[serde(rename = "isError")]
    is_error: bool,
}

#[derive(serde::Serialize)]
struct TextContent<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
}

/// A method's result as an MCP tool result: the text form for the model, the JSON beside it.
fn tool_result(method: &'static str, result: Result<Value, RpcError>) -> Value {
    match result {
        Ok(mut v) => {
            let text = mcp_tools::text(method, &v);
            // A line view's text is the content already: carried once, not again beside it.
            if method == "output" {
                if let Some(m) = v.as_object_mut() {
                    m.remove("text");
                }
            }
            json!({"content": [{"type": "text", "text": text}], "structuredContent": v, "isError": false})
        }
        Err(e) => tool_error(&e),
    }
}

/// A tool result that failed: the kernel's sentence, for the model to read.
fn tool_error(e: &RpcError) -> Value {
    json!({
        "content": [{"type": "text", "text": format!("error ({}): {}\n", e.kind.name(), e.message)}],
        "structuredContent": {"error": {"kind": e.kind.name(), "code": e.kind.code(), "message": e.message}},
        "isError": true
    })
}

fn initialize(params: &Value) -> Value {
    let asked = params.get("protocolVersion").and_then(Value::as_str).unwrap_or("");
    let version = PROTOCOL_VERSIONS.iter().find(|v| **v == asked).copied().unwrap_or(PROTOCOL_VERSIONS[0]);
    json!({
        "protocolVersion": version,
        "capabilities": {
            "tools": {"listChanged": false},
            "prompts": {"listChanged": false},
            "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}},
        },
        "serverInfo": {"name": "heddle", "title": "heddle shell", "version": env!("CARGO_PKG_VERSION")},
        "instructions": mcp_tools::INSTRUCTIONS,
    })
}

fn prompts_list() -> Value {
    json!({"prompts": [{
        "name": "heddle",
        "title": "How heddle's shell works",
        "description": "The shell's dialect and rules: fresh bash per call with carried state, stdin closed, yield and announce, never silently cut."
    }]})
}

fn prompts_get(params: &Value) -> Result<Value, RpcError> {
    match params.get("name").and_then(Value::as_str) {
        Some("heddle") => Ok(json!({
            "description": "How heddle's shell works",
            "messages": [{"role": "user", "content": {"type": "text", "text": mcp_tools::INSTRUCTIONS}}]
        })),
        other => Err(RpcError::new(
            ErrorKind::InvalidParams,
            format!(
                "there is no prompt {}; the one prompt is 'heddle'",
                other.map(|o| format!("'{o}'")).unwrap_or_else(|| "without a name".into())
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Harness;

    fn line(v: Value) -> Vec<u8> {
        serde_json::to_vec(&v).unwrap()
    }

    fn reply(bytes: Option<Vec<u8>>) -> Value {
        serde_json::from_slice(&bytes.expect("a reply")).unwrap()
    }

    #[test]
    fn an_attached_connection_runs_tools_in_its_session() {
        let mut h = Harness::new();
        h.client.uid = nix::unistd::getuid().as_raw();
        let first = line(
            json!({"jsonrpc": "2.0", "id": 0, "method": "mcp.attach", "params": {"session": "agent", "cwd": "/srv"}}),
        );
        assert!(speaks_mcp(&first));
        let (conn, (r, _)) = McpConnection::start(&h.kernel, &h.client, &first).unwrap();
        let mut conn = conn.unwrap();
        assert_eq!(reply(r)["result"]["session"], "agent");
        let init = line(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-03-26"}}),
        );
        let r = reply(conn.answer(&h.kernel, &h.client, &init, None).0);
        assert_eq!(r["result"]["protocolVersion"], "2025-03-26");
        assert!(conn
            .answer(&h.kernel, &h.client, br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#, None)
            .0
            .is_none());
        let call = line(
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "run", "arguments": {"cmd": "echo hi"}}}),
        );
        let r = reply(conn.answer(&h.kernel, &h.client, &call, None).0);
        let text = r["result"]["content"][0]["text"].as_str().unwrap();
        assert!(text.starts_with("exit 0 · ") && text.ends_with(" · job 1\nhi\n"), "{text}");
        assert_eq!(r["result"]["structuredContent"]["session"], "agent");
        assert_eq!(r["result"]["isError"], false);
        // The fast path (the kernel's JSON embedded as it is) answers exactly what the general one does.
        let general = tool_result("run", Ok(r["result"]["structuredContent"].clone()));
        assert_eq!(r["result"], general);
        let list = line(
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "jobs", "arguments": {}}}),
        );
        let r = reply(conn.answer(&h.kernel, &h.client, &list, None).0);
        assert!(r["result"]["content"][0]["text"].as_str().unwrap().contains("echo hi"), "{r}");
        assert_eq!(r["result"], tool_result("jobs", Ok(r["result"]["structuredContent"].clone())));
    }

    #[test]
    fn errors_are_tool_results_or_protocol_errors_as_mcp_says() {
        let mut h = Harness::new();
        h.client.uid = nix::unistd::getuid().as_raw();
        let first = line(json!({"jsonrpc": "2.0", "id": 0, "method": "mcp.attach", "params": {"session": "e"}}));
        let mut conn = McpConnection::start(&h.kernel, &h.client, &first).unwrap().0.unwrap();
        let ask = |conn: &mut McpConnection, v: Value| reply(conn.answer(&h.kernel, &h.client, &line(v), None).0);
        let r = ask(
            &mut conn,
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "wait", "arguments": {"job": 99}}}),
        );
        assert_eq!(r["result"]["isError"], true, "{r}");
        assert!(r["result"]["content"][0]["text"].as_str().unwrap().contains("unknown_job"), "{r}");
        let r = ask(&mut conn, json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "rm"}}));
        assert_eq!(r["error"]["code"], -32602, "{r}");
        let r = ask(&mut conn, json!({"jsonrpc": "2.0", "id": 3, "method": "resources/list"}));
        assert_eq!(r["error"]["code"], -32601, "{r}");
        let r = reply(conn.answer(&h.kernel, &h.client, b"{not json", None).0);
        assert_eq!(r["error"]["code"], -32700, "{r}");
        let r = ask(
            &mut conn,
            json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "run", "arguments": {"cmd": 5}}}),
        );
        assert_eq!(r["result"]["isError"], true, "a wrong argument type is the model's to fix: {r}");
    }

    #[test]
    fn a_bare_initialize_opens_a_session_at_the_first_tool_call() {
        let mut h = Harness::new();
        h.client.uid = nix::unistd::getuid().as_raw();
        let init = line(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "1999-01-01"}}),
        );
        let (conn, (r, _)) = McpConnection::start(&h.kernel, &h.client, &init).unwrap();
        let mut conn = conn.unwrap();
        assert_eq!(reply(r)["result"]["protocolVersion"], PROTOCOL_VERSIONS[0], "an unknown version gets ours");
        let call = line(
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "run", "arguments": {"cmd": "pwd"}}}),
        );
        let r = reply(conn.answer(&h.kernel, &h.client, &call, None).0);
        assert_eq!(r["result"]["isError"], false, "{r}");
        assert!(conn.session().is_some());
    }

    #[test]
    fn a_task_carries_the_job_to_its_result_and_loses_no_announcement() {
        let mut h = Harness::new();
        h.client.uid = nix::unistd::getuid().as_raw();
        let first = line(json!({"jsonrpc": "2.0", "id": 0, "method": "mcp.attach", "params": {"session": "t"}}));
        let mut conn = McpConnection::start(&h.kernel, &h.client, &first).unwrap().0.unwrap();
        let ask = |conn: &mut McpConnection, v: Value| reply(conn.answer(&h.kernel, &h.client, &line(v), None).0);
        let call = |id: u64, name: &str, args: Value| {
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                   "params": {"name": name, "arguments": args, "task": {"ttl": 1000}}})
        };
        // A job that ends unseen, so the task's admitting call takes its announcement.
        let r = ask(
            &mut conn,
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "run", "arguments": {"cmd": "sleep 50", "yield_ms": 0}}}),
        );
        assert_eq!(r["result"]["structuredContent"]["state"], "running", "{r}");
        let ended =
            || h.kernel.session(&h.client, "t").is_ok_and(|s| s.lock().job(1).is_some_and(|j| j.state().ended()));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !ended() {
            assert!(std::time::Instant::now() < deadline, "job 1 ends");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let r = ask(&mut conn, call(2, "run", json!({"cmd": "echo tasked"})));
        assert!(r["result"]["task"]["status"].as_str().is_some(), "{r}");
        let task = &r["result"]["task"];
        assert_eq!((task["taskId"].as_str(), task["ttl"].as_u64()), (Some("t/2"), Some(1000)), "{r}");
        let r =
            ask(&mut conn, json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/result", "params": {"taskId": "t/2"}}));
        let text = r["result"]["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("tasked") && text.contains("job 1 ended"), "the result tells job 1's end too: {text}");
        assert_eq!(r["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], "t/2");
        let r = ask(&mut conn, json!({"jsonrpc": "2.0", "id": 4, "method": "tasks/get", "params": {"taskId": "t/2"}}));
        assert_eq!(r["result"]["status"], "completed", "{r}");
        let r =
            ask(&mut conn, json!({"jsonrpc": "2.0", "id": 5, "method": "tasks/cancel", "params": {"taskId": "t/2"}}));
        assert_eq!(r["error"]["code"], -32602, "an ended task cannot be cancelled: {r}");
        let r = ask(&mut conn, json!({"jsonrpc": "2.0", "id": 6, "method": "tasks/get", "params": {"taskId": "t/99"}}));
        assert!(r["error"]["message"].as_str().unwrap().contains("tasks/list"), "{r}");
        let r = ask(&mut conn, call(7, "jobs", json!({})));
        assert_eq!(r["error"]["code"], -32601, "only job-starting tools run as tasks: {r}");
        let r = ask(&mut conn, json!({"jsonrpc": "2.0", "id": 8, "method": "tasks/list"}));
        assert_eq!(r["result"]["tasks"].as_array().map(Vec::len), Some(1), "{r}");
    }
}
