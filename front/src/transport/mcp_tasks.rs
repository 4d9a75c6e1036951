//! MCP tasks (protocol 2025-11-25): a task-augmented `tools/call` of `run` or `check` becomes a task whose
//! result is the job's final result.
//!
//! A heddle job already is a task: it runs on after the call that started it, and its end can be asked
//! for later. So a `tools/call` carrying `task` admits the job without waiting (`yield_ms: 0`) and answers
//! `{task}` at once; `tasks/get` reads the job's phase from the session (no announcement is consumed, so
//! the job's end is still announced on the next ordinary call if nobody fetched the result);
//! `tasks/result` waits for the job's end and answers the same tool result an ordinary `run` would have
//! (with the ends of other jobs that the admitting call took, which its `{task}` answer cannot carry);
//! `tasks/list` lists this connection's tasks; `tasks/cancel` is an explicit request to stop the work, so
//! it kills the job (the `kill` method: receipted, survivors listed) and the task ends `cancelled` with
//! what was killed in its status message. Cancelling a *request* (`notifications/cancelled`) still never
//! kills anything: only `tasks/cancel` does.
//!
//! A task id is `SESSION/JOB`: one the connection does not remember (a bridge resumed after the server
//! went away talks to a new front) is taken up again from the session's job (`recall`).
//!
//! Phases map as: running → `working`; exited, killed, refused → `completed` (the tool call completed; its
//! result says how the job ended); lost, failed → `failed` (the job's own result was not obtained).
//!
//! ```text
//! → {"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"run","arguments":{"cmd":"make"},"task":{"ttl":600000}}}
//! ← {"jsonrpc":"2.0","id":5,"result":{"task":{"taskId":"s1/4","status":"working","statusMessage":"job 4 · make",…}}}
//! → {"jsonrpc":"2.0","id":6,"method":"tasks/result","params":{"taskId":"s1/4"}}
//! ← {"jsonrpc":"2.0","id":6,"result":{"content":[…],"structuredContent":{…},"isError":false,"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"s1/4"}}}}
//! ```

use crate::kernel::{Client, Kernel};
use crate::rpc::{ErrorKind, RpcError};
use protocol::results::JobPhase;
use serde_json::{json, Value};
use std::time::{Duration, Instant, SystemTime};

/// Tasks one connection remembers; the oldest ended ones are forgotten first past this.
pub const MAX_TASKS: usize = 1000;
/// The polling interval suggested to clients.
pub const POLL_MS: u64 = 500;
/// The tools that may run as tasks (they start a job).
pub const TASK_TOOLS: [&str; 2] = ["run", "check"];
const RELATED: &str = "io.modelcontextprotocol/related-task";

struct Task {
    id: String,
    session: String,
    job: u64,
    method: &'static str,
    created: SystemTime,
    ttl: Option<u64>,
    /// Set by `tasks/cancel`: the message saying what was killed.
    cancelled: Option<String>,
    /// Other jobs' ends the admitting call took (its `{task}` answer has no room for them): told with
    /// the task's result, so none is lost.
    announced: Vec<Value>,
    /// What the admitting call had to say first (its session was opened again): told with the result.
    note: Option<String>,
}

impl std::fmt::Debug for Tasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tasks").finish_non_exhaustive()
    }
}

/// One connection's tasks.
#[derive(Default)]
pub struct Tasks {
    list: Vec<Task>,
    /// The connection's session was closed and opened again: its job numbers were used again, so an id
    /// from before names another job, and unknown ids are not taken up ([`Tasks::recall`]).
    reopened: bool,
}

fn iso(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

fn unknown(id: &str) -> RpcError {
    RpcError::new(
        ErrorKind::InvalidParams,
        format!("there is no task '{id}' on this connection; tasks/list shows the ones it has"),
    )
}

fn task_id(params: &Value) -> Result<String, RpcError> {
    params.get("taskId").and_then(Value::as_str).map(str::to_owned).ok_or_else(|| {
        RpcError::new(
            ErrorKind::InvalidParams,
            "this method needs `taskId`, as the task-augmented tools/call answered it",
        )
    })
}

impl Tasks {
    /// The tasks of a connection whose session was just opened again: none, and none taken up by id.
    pub fn after_reopen() -> Tasks {
        Tasks { list: Vec::new(), reopened: true }
    }

    /// Record the job a task-augmented call admitted; its `{task}` answer. `note`: what the call had to
    /// say first (its session was opened again), told in the answer and with the result.
    pub fn admit(
        &mut self,
        kernel: &Kernel,
        client: &Client,
        method: &'static str,
        result: &Value,
        meta: &Value,
        note: Option<String>,
    ) -> Value {
        let session = result["session"].as_str().unwrap_or_default().to_owned();
        let job = result["job"].as_u64().unwrap_or(0);
        self.make_room(kernel, client);
        let ttl = meta.get("ttl").and_then(Value::as_u64);
        let announced = result["announcements"].as_array().cloned().unwrap_or_default();
        let id = format!("{session}/{job}");
        let task = Task { id, session, job, method, created: SystemTime::now(), ttl, cancelled: None, announced, note };
        let mut answer = json!({"task": self.describe(kernel, client, &task)});
        if let Some(n) = &task.note {
            let said = answer["task"]["statusMessage"].as_str().unwrap_or_default().to_owned();
            answer["task"]["statusMessage"] = json!(format!("{n}\n{said}"));
        }
        self.list.push(task);
        answer
    }

    /// At most [`MAX_TASKS`]: the oldest ended one goes first.
    fn make_room(&mut self, kernel: &Kernel, client: &Client) {
        if self.list.len() >= MAX_TASKS {
            let ended = self.list.iter().position(|t| self.phase(kernel, client, t).0 != "working");
            self.list.remove(ended.unwrap_or(0));
        }
    }

    fn find(&self, id: &str) -> Result<&Task, RpcError> {
        self.list.iter().find(|t| t.id == id).ok_or_else(|| unknown(id))
    }

    /// A task id this connection does not know, of a job in `session` (the connection's), is taken up
    /// again: a task's id is `SESSION/JOB`, so the task outlives the connection's memory of it (a bridge
    /// resumed after the server went away asks a new front, which never heard of it). What is not
    /// recovered: its `ttl` and the other jobs' ends its admitting call took (they were announced on a
    /// later call instead, as any unreported end is).
    fn recall(&mut self, kernel: &Kernel, client: &Client, session: Option<&str>, id: &str) {
        if self.reopened || self.list.iter().any(|t| t.id == id) {
            return;
        }
        let Some((name, job)) = id.rsplit_once('/').and_then(|(s, j)| Some((s, j.parse::<u64>().ok()?))) else {
            return;
        };
        // One spelling per job (`s/01` is not `s/1`), and only in the connection's own session.
        if session != Some(name) || id != format!("{name}/{job}") {
            return;
        }
        let Ok(s) = kernel.session(client, name) else { return };
        let method = match s.lock().job(job) {
            Some(j) if j.check.is_some() => "check",
            Some(_) => "run",
            None => return,
        };
        let task = Task {
            id: id.to_owned(),
            session: name.to_owned(),
            job,
            method,
            created: SystemTime::now(),
            ttl: None,
            cancelled: None,
            announced: Vec::new(),
            note: None,
        };
        self.make_room(kernel, client);
        self.list.push(task);
    }

    /// The task's MCP status and a sentence on it, read from the session without consuming anything.
    fn phase(&self, kernel: &Kernel, client: &Client, t: &Task) -> (&'static str, String) {
        if let Some(why) = &t.cancelled {
            return ("cancelled", why.clone());
        }
        let Ok(s) = kernel.session(client, &t.session) else {
            return ("failed", format!("session '{}' is gone, and job {} with it", t.session, t.job));
        };
        let st = s.lock();
        let Some(j) = st.job(t.job) else {
            return ("failed", format!("job {} is no longer in session '{}'", t.job, t.session));
        };
        let took = protocol::text::duration(crate::rpc::results::millis(j.duration(Instant::now())));
        let cmd = protocol::text::one_line(j.cmd(), 80);
        match j.state() {
            JobPhase::Running => {
                let line = crate::output::view::last_lines(j.rendered()).pop();
                let last = line.map(|l| format!(" · {}", protocol::text::one_line(&l, 120))).unwrap_or_default();
                ("working", format!("job {} · running {took} · {cmd}{last}", t.job))
            }
            JobPhase::Lost | JobPhase::Failed => (
                "failed",
                format!("job {} · {} after {took}: fetch tasks/result for its record", t.job, phase_word(j.state())),
            ),
            other => ("completed", format!("job {} · {} after {took} · {cmd}", t.job, phase_word(other))),
        }
    }

    fn describe(&self, kernel: &Kernel, client: &Client, t: &Task) -> Value {
        let (status, message) = self.phase(kernel, client, t);
        json!({
            "taskId": t.id,
            "status": status,
            "statusMessage": message,
            "createdAt": iso(t.created),
            "lastUpdatedAt": iso(SystemTime::now()),
            "ttl": t.ttl,
            "pollInterval": POLL_MS,
        })
    }

    /// `tasks/get {taskId}` (of a task in `session`, the connection's).
    pub fn get(
        &mut self,
        kernel: &Kernel,
        client: &Client,
        session: Option<&str>,
        params: &Value,
    ) -> Result<Value, RpcError> {
        let id = task_id(params)?;
        self.recall(kernel, client, session, &id);
        let t = self.find(&id)?;
        Ok(self.describe(kernel, client, t))
    }

    /// `tasks/list {cursor?}`: every task of this connection (one page).
    pub fn list(&self, kernel: &Kernel, client: &Client) -> Value {
        json!({"tasks": self.list.iter().map(|t| self.describe(kernel, client, t)).collect::<Vec<_>>()})
    }

    /// `tasks/result {taskId}`: wait for the job's end; the tool result (`render` makes it from the
    /// method's result), tagged with the task.
    pub fn result(
        &mut self,
        kernel: &Kernel,
        client: &Client,
        session: Option<&str>,
        params: &Value,
        render: impl Fn(&'static str, Result<Value, RpcError>) -> Value,
    ) -> Result<Value, RpcError> {
        let id = task_id(params)?;
        self.recall(kernel, client, session, &id);
        let t = self.find(&id)?;
        let wait = || {
            let raw = kernel.call(client, "wait", json!({"session": t.session, "job": t.job, "yield_ms": 600_000}))?;
            serde_json::from_str::<Value>(raw.get())
                .map_err(|e| RpcError::internal(format!("the wait result could not be read back: {e}")))
        };
        let mut r = wait();
        // A job that outlives ten minutes is waited for again: tasks/result blocks until the task ends.
        while r.as_ref().is_ok_and(|v| v["state"] == "running") {
            std::thread::sleep(Duration::from_millis(10));
            r = wait();
        }
        if let Ok(v) = &mut r {
            let later = v["announcements"].as_array().cloned().unwrap_or_default();
            v["announcements"] = Value::Array(t.announced.iter().cloned().chain(later).collect());
        }
        let mut out = render(t.method, r);
        if let (Some(n), Some(text)) = (&t.note, out["content"][0]["text"].as_str().map(str::to_owned)) {
            out["content"][0]["text"] = json!(format!("{n}\n{text}"));
        }
        out["_meta"] = json!({RELATED: {"taskId": t.id}});
        Ok(out)
    }

    /// `tasks/cancel {taskId}`: kill the job; the task ends `cancelled`.
    pub fn cancel(
        &mut self,
        kernel: &Kernel,
        client: &Client,
        session: Option<&str>,
        params: &Value,
    ) -> Result<Value, RpcError> {
        let id = task_id(params)?;
        self.recall(kernel, client, session, &id);
        let (status, _) = self.phase(kernel, client, self.find(&id)?);
        if status != "working" {
            return Err(RpcError::new(
                ErrorKind::InvalidParams,
                format!("task '{id}' has already ended ({status}); there is nothing to cancel"),
            ));
        }
        let t = self.find(&id)?;
        let raw = kernel.call(client, "kill", json!({"session": t.session, "job": t.job}))?;
        let killed: Value = serde_json::from_str(raw.get()).unwrap_or(Value::Null);
        let survivors = killed["survivors"].as_array().map_or(0, Vec::len);
        let message = format!(
            "cancelled: job {} was killed ({}{}); its output stays readable with the output tool",
            t.job,
            killed["state"].as_str().unwrap_or("killed"),
            if survivors > 0 {
                format!(", {survivors} processes of it listed in the kill result")
            } else {
                String::new()
            }
        );
        let idx = self.list.iter().position(|t| t.id == id).unwrap_or(0);
        self.list[idx].cancelled = Some(message);
        Ok(self.describe(kernel, client, &self.list[idx]))
    }
}

fn phase_word(s: JobPhase) -> &'static str {
    match s {
        JobPhase::Running => "running",
        JobPhase::Exited => "exited",
        JobPhase::Killed => "killed",
        JobPhase::Lost => "lost",
        JobPhase::Failed => "failed",
        JobPhase::Refused => "refused",
    }
}

/// The error for a task-augmented call of a tool that does not run as a task.
pub fn not_a_task_tool(tool: &str) -> RpcError {
    RpcError::new(
        ErrorKind::MethodNotFound,
        format!(
            "tool '{tool}' does not run as a task (only {} do: they start a job); call it without `task`",
            TASK_TOOLS.join(" and ")
        ),
    )
}
