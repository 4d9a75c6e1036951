//! The MCP tools: their names, JSON schemas and descriptions (written for a model), how a call's
//! arguments become a kernel method's params, and how the kernel's result becomes the tool result's
//! text. The text of a job result is [`protocol::text::job_result`], the same `heddle run` prints; the
//! full JSON result rides beside it as `structuredContent`.
//!
//! ```
//! let tools = front::transport::mcp_tools::list();
//! assert!(tools["tools"].as_array().unwrap().iter().any(|t| t["name"] == "run"));
//! ```

use crate::kernel::terminal_io::{DEFAULT_QUIET_MS, DEFAULT_WRITE_YIELD_MS};
use crate::kernel::DEFAULT_YIELD_MS;
use crate::rpc::{ErrorKind, RpcError};
use protocol::results::{JobResult, JobsResult};
use serde_json::{json, Map, Value};

/// What a model must know to use heddle's shell well: the server's `instructions`, the `heddle` prompt,
/// and the gist of the `run` tool's description.
pub const INSTRUCTIONS: &str = "\
heddle runs each command as a job: a fresh `bash --noprofile --norc` (bash 5.2, no startup files, no \
aliases or wrappers on PATH) in its own cgroup and sandbox, with this session's shell state carried \
from call to call: cwd, variables (exported or not), functions, aliases, shell options and umask. Traps, \
open file descriptors, positional parameters and the shell's own background jobs are not carried. stdin \
is closed, so a command that prompts fails at once instead of hanging: pass flags such as `-y`, or \
write the answers into a file with `files`. Writes outside the session's writable roots are refused by \
the kernel; the result says which path and why. Several calls may run at once.\n\
\n\
Waiting never kills: `run` returns after `yield_ms` (default 10 s) with the job still running and its \
id; call `wait` with that id to wait more, `output` to read its output, `kill` to end it (cancelling \
a call never stops its job). A job that \
ended without you seeing its result is announced once, with its last lines, at the end of your next \
call's result. Output is never silently cut: when a view leaves lines out, a marker says how many and \
names the `output` call that shows them. Secrets in output are redacted in every view.";

/// The tools, as `tools/list` answers.
pub fn list() -> Value {
    let job =
        json!({"type": "integer", "minimum": 1, "description": "The job's id (from the run result's first line)."});
    let yield_ms = json!({"type": "integer", "minimum": 0, "maximum": 600000,
        "description": format!("How long to wait for the job to end before returning with it still running (ms; default {DEFAULT_YIELD_MS}). The job is never killed by this.")});
    let budget = json!({"type": "integer", "minimum": 1,
        "description": "Room for the output view, in tokens (about 4 bytes each); the rest is named by a marker, never silently dropped."});
    let session = json!({"type": "string", "description": "Optional: this connection's session (calls that a marker names carry it)."});
    let tools = json!([
        {
            "name": "run",
            "title": "Run a shell command",
            "execution": {"taskSupport": "optional"},
            "description": format!("Run a bash command as a job and return its result: the first line is the outcome (`exit 2 · 1.4 s · job 7`, `still running after 10 s · job 7`, or for a tty job at a prompt `waiting for input after 300 ms · job 7`), then the output view, then notes (shell-state changes, processes left running, refusals, warnings), then other jobs that ended meanwhile.\n\n{INSTRUCTIONS}"),
            "inputSchema": {
                "type": "object",
                "properties": {
                    "cmd": {"type": "string", "description": "The command line, as typed into bash (pipes, &&, heredocs, functions all work)."},
                    "yield_ms": yield_ms,
                    "env": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Extra environment variables for this job only."},
                    "files": {"type": "array", "description": "Files written before the command runs (also when the command itself is refused): no heredocs or quoting needed.",
                        "items": {"type": "object", "properties": {
                            "path": {"type": "string", "description": "Absolute, or relative to the session's cwd."},
                            "content": {"type": "string"},
                            "content_base64": {"type": "string"},
                            "mode": {"type": "integer", "description": "Permission bits, e.g. 493 (0755)."}},
                            "required": ["path"], "additionalProperties": false}},
                    "keep": {"type": "string", "description": "Keep the job under this name: its processes outlive the session (a dev server, a watcher)."},
                    "tty": {"type": "object", "description": "Run on a terminal of this size (an interactive program: a REPL, a passphrase prompt, vi, less); drive it with the write tool and read its screen.",
                        "properties": {"rows": {"type": "integer", "minimum": 1, "maximum": 500}, "cols": {"type": "integer", "minimum": 2, "maximum": 1000}},
                        "required": ["rows", "cols"], "additionalProperties": false},
                    "stdin": {"type": "string", "enum": ["null", "pipe"], "description": "\"pipe\": give the job a stdin the write tool feeds (default: /dev/null)."},
                    "idempotency_key": {"type": "string", "description": "A retry with the same key returns the first call's receipt and never runs the command twice."},
                    "max_output_tokens": budget,
                    "effects": {"type": "string", "enum": ["paths", "diff", "none"], "description": "What the call changed in the project's git work tree: \"paths\" (default) lists them, \"diff\" adds a bounded unified diff, \"none\" turns the ledger off."},
                    "override": {"type": "object", "description": "Pass one guard that refused this command, with your reason (audited): use only when the refusal's note shows the command is what you mean.",
                        "properties": {"rule": {"type": "string"}, "reason": {"type": "string"}}, "required": ["rule", "reason"], "additionalProperties": false},
                    "session": session
                },
                "required": ["cmd"],
                "additionalProperties": false
            },
            "annotations": {"title": "Run a shell command", "destructiveHint": true, "openWorldHint": true}
        },
        {
            "name": "wait",
            "title": "Wait for a job",
            "description": "Wait up to yield_ms for a running job to end and return its result (same form as run). A wait that times out changes nothing: the job keeps running.",
            "inputSchema": {"type": "object", "properties": {"job": job, "yield_ms": yield_ms, "max_output_tokens": budget, "session": session},
                "required": ["job"], "additionalProperties": false},
            "annotations": {"readOnlyHint": true}
        },
        {
            "name": "kill",
            "title": "Kill a job",
            "description": "End a job and everything it started (its whole cgroup; never by pid or name), then check nothing is left; the result says what was killed and anything still alive.",
            "inputSchema": {"type": "object", "properties": {"job": job,
                "grace_ms": {"type": "integer", "minimum": 0, "maximum": 600000, "description": "Send SIGTERM first and wait this long before killing (ms)."},
                "session": session},
                "required": ["job"], "additionalProperties": false},
            "annotations": {"destructiveHint": true}
        },
        {
            "name": "output",
            "title": "Read a job's output",
            "description": "Read a job's stored output (kept in full) through a view. Give one of: lines [first, last] (1-based, inclusive; what an omission marker names), tail N, grep {pattern, context?, max?}, errors true (error-shaped lines with context). With none, the last 200 lines. Redacted like every view.",
            "inputSchema": {"type": "object", "properties": {"job": job,
                "lines": {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 2, "maxItems": 2},
                "tail": {"type": "integer", "minimum": 1},
                "grep": {"type": "object", "properties": {"pattern": {"type": "string", "description": "A regular expression (Rust regex syntax)."},
                    "context": {"type": "integer", "minimum": 0}, "max": {"type": "integer", "minimum": 1}}, "required": ["pattern"], "additionalProperties": false},
                "errors": {"type": "boolean"},
                "stream": {"type": "string", "enum": ["stdout", "stderr", "both"]},
                "max_output_bytes": {"type": "integer", "minimum": 1},
                "session": session},
                "required": ["job"], "additionalProperties": false},
            "annotations": {"readOnlyHint": true}
        },
        {
            "name": "jobs",
            "title": "List jobs",
            "description": "List this session's jobs: id, state, duration, output size, command; running ones with liveness. Every job not yet ended is listed, and the newest `limit` ended ones (default 50); a last line says how many older ones were left out and the `before` that lists them.",
            "inputSchema": {"type": "object", "properties": {
                "limit": {"type": "integer", "minimum": 1, "maximum": 10000, "description": "How many ended jobs to list (default 50)."},
                "before": {"type": "integer", "minimum": 1, "description": "List only ended jobs older than this job id (a listing's last line names it)."},
                "session": session}, "additionalProperties": false},
            "annotations": {"readOnlyHint": true}
        },
        {
            "name": "keep",
            "title": "Keep a job",
            "description": "Keep a running job under a name: its processes move out of the session and outlive it (the operator lists and ends kept jobs).",
            "inputSchema": {"type": "object", "properties": {"job": job, "name": {"type": "string"}, "session": session},
                "required": ["job", "name"], "additionalProperties": false}
        },
        {
            "name": "write",
            "title": "Type into a job",
            "description": "Type into a job started with tty (or stdin \"pipe\"): text as typed, then named keys (Enter: a newline on a pipe, Tab, Escape, Backspace, Up/Down/Left/Right, Home/End, PageUp/PageDown, F1-F12, C-a..C-z, M-x); eof true sends Ctrl-D (or closes the pipe). Returns once the screen settles, with the screen and the cursor.",
            "inputSchema": {"type": "object", "properties": {"job": job,
                "text": {"type": "string"},
                "keys": {"type": "array", "items": {"type": "string"}},
                "eof": {"type": "boolean"},
                "yield_ms": {"type": "integer", "minimum": 0, "maximum": 600000,
                    "description": format!("How long to wait for the screen to settle before returning (ms; default {DEFAULT_WRITE_YIELD_MS}); returns sooner when the job ends. The job is never killed by this.")},
                "quiet_ms": {"type": "integer", "minimum": 0, "description": format!("Output-free time after which the screen counts as settled (ms; default {DEFAULT_QUIET_MS}; 0: the first output after the write).")},
                "idempotency_key": {"type": "string", "description": "A retry with the same key is answered from the first call and types nothing twice."},
                "session": session},
                "required": ["job"], "additionalProperties": false},
            "annotations": {"destructiveHint": true}
        },
        {
            "name": "resize",
            "title": "Resize a job's terminal",
            "description": "Change a tty job's terminal size (the program gets SIGWINCH and redraws); returns the new screen.",
            "inputSchema": {"type": "object", "properties": {"job": job,
                "rows": {"type": "integer", "minimum": 1, "maximum": 500}, "cols": {"type": "integer", "minimum": 2, "maximum": 1000},
                "session": session},
                "required": ["job", "rows", "cols"], "additionalProperties": false}
        },
        {
            "name": "check",
            "title": "Run a check",
            "execution": {"taskSupport": "optional"},
            "description": "Run one of the project's checks (its test suite or gate: from .heddle/checks.toml, else detected: cargo nextest/cargo test, pytest, go test, npm test) as a job. The result's first line names the check, the exact command and the parser; the view leads with the runner's own counts (passed, failed, skipped, errors) and each failing test with the first lines of its failure, then the usual output view. Yields like run (default 60 s or the check's timeout_ms hint); never kills. `args` are added as words, each quoted. A check runs in its own cwd without the session's shell state (no cd, export or activated venv is carried): a PATH it needs goes in .heddle/checks.toml (`env = {PATH = \"…\"}`).",
            "inputSchema": {"type": "object", "properties": {
                "name": {"type": "string", "description": "the check's name (see the checks tool); default: the first"},
                "args": {"type": "array", "items": {"type": "string"}},
                "yield_ms": {"type": "integer", "minimum": 0},
                "max_output_tokens": {"type": "integer", "minimum": 1},
                "session": session},
                "additionalProperties": false}
        },
        {
            "name": "checks",
            "title": "List checks",
            "description": "The project's checks: name, command, parser and where each came from (the checks file or what was detected), the checks file's problems with file, line and key, and each check's last runs (state, exit, duration, counts).",
            "inputSchema": {"type": "object", "properties": {"session": session}, "additionalProperties": false},
            "annotations": {"readOnlyHint": true}
        },
        {
            "name": "describe",
            "title": "Describe the shell",
            "description": "What this shell is: heddle's version, bash and its version, PATH, the sandbox (writable roots, network, Landlock and seccomp), cgroup limits, live jobs with liveness, and what changed in the session since it began.",
            "inputSchema": {"type": "object", "properties": {"session": session}, "additionalProperties": false},
            "annotations": {"readOnlyHint": true}
        }
    ]);
    json!({ "tools": tools })
}

/// The kernel method and params for a tool call in `session`; `invalid_params` for arguments that do
/// not fit, `method_not_found` for an unknown tool.
pub fn params(tool: &str, args: Value, session: &str) -> Result<(&'static str, Value), RpcError> {
    let mut args = match args {
        Value::Object(m) => m,
        Value::Null => Map::new(),
        _ => return Err(bad(tool, "`arguments` must be an object")),
    };
    match args.remove("session") {
        None => {}
        Some(Value::String(s)) if s == session => {}
        Some(other) => {
            let why = format!("this connection works in session '{session}' only, not {other}; leave `session` out");
            return Err(bad(tool, &why));
        }
    }
    let method = match tool {
        "run" => {
            match args.remove("keep") {
                None | Some(Value::Null) => {}
                Some(Value::String(name)) => {
                    args.insert("keep".into(), Value::Bool(true));
                    args.insert("name".into(), Value::String(name));
                }
                Some(_) => return Err(bad(tool, "`keep` must be the name to keep the job under")),
            }
            "run"
        }
        "wait" => "wait",
        "kill" => "kill",
        "output" => {
            if !["lines", "tail", "grep", "errors"].iter().any(|k| args.contains_key(*k)) {
                args.insert("tail".into(), json!(200));
            }
            "output"
        }
        "jobs" => "jobs",
        "keep" => "keep",
        "write" => "write",
        "resize" => "resize",
        "describe" => "describe",
        "check" => "check",
        "checks" => "checks",
        _ => {
            let names: Vec<String> = list()["tools"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|t| t["name"].as_str().map(str::to_owned))
                .collect();
            return Err(RpcError::new(
                ErrorKind::InvalidParams,
                format!("there is no tool '{tool}'; the tools are {}", names.join(", ")),
            ));
        }
    };
    args.insert("session".into(), Value::String(session.to_owned()));
    Ok((method, Value::Object(args)))
}

fn bad(tool: &str, why: &str) -> RpcError {
    RpcError::new(ErrorKind::InvalidParams, format!("invalid arguments for the {tool} tool: {why}"))
}

/// The text a model reads of a method's result.
/// [`text`] read straight from the kernel's JSON for the results with a typed text form (`run`,
/// `wait`, `kill`, `check`, `write`, `resize`, `jobs`); `None` for the others, or when the JSON is not
/// the expected shape (then [`text`] renders it).
pub fn text_raw(method: &str, raw: &str) -> Option<(String, Vec<u64>)> {
    match method {
        "run" | "wait" | "kill" | "check" => serde_json::from_str::<JobResult>(raw).ok().map(|r| job_text(&r)),
        "write" | "resize" => serde_json::from_str::<protocol::results::WriteResult>(raw)
            .ok()
            .map(|r| (protocol::text::write_result(&r), Vec::new())),
        "jobs" => serde_json::from_str::<JobsResult>(raw).ok().map(|r| {
            let text = protocol::text::jobs_table(&r.jobs)
                + &protocol::text::jobs_older(r.older, r.older_before)
                + &protocol::text::announcements(&r.announcements);
            (text, r.announcements.iter().map(|a| a.job).collect())
        }),
        _ => None,
    }
}

/// A job result's text form and the jobs it reported (its own end, when it ended, and its
/// announcements).
pub fn job_text(r: &JobResult) -> (String, Vec<u64>) {
    let mut jobs: Vec<u64> = r.announcements.iter().map(|a| a.job).collect();
    if r.state.ended() {
        jobs.push(r.job);
    }
    (protocol::text::job_result(r), jobs)
}

/// The jobs a result reported to its client: its job's end (a job result that is not `running`) and
/// its announcements. Announced again if the answer never reaches the client.
pub fn reported(result: &Value) -> Vec<u64> {
    let mut jobs: Vec<u64> =
        result["announcements"].as_array().into_iter().flatten().filter_map(|a| a["job"].as_u64()).collect();
    if let (Some(j), Some(state)) = (result["job"].as_u64(), result["state"].as_str()) {
        if state != "running" && result.get("exit_code").is_some() {
            jobs.push(j);
        }
    }
    jobs
}

pub fn text(method: &str, result: &Value) -> String {
    match method {
        "run" | "wait" | "kill" | "check" => match serde_json::from_value::<JobResult>(result.clone()) {
            Ok(r) => protocol::text::job_result(&r),
            Err(_) => pretty(result),
        },
        "write" | "resize" => match serde_json::from_value::<protocol::results::WriteResult>(result.clone()) {
            Ok(r) => protocol::text::write_result(&r),
            Err(_) => pretty(result),
        },
        "jobs" => match serde_json::from_value::<JobsResult>(result.clone()) {
            Ok(r) => {
                protocol::text::jobs_table(&r.jobs)
                    + &protocol::text::jobs_older(r.older, r.older_before)
                    + &protocol::text::announcements(&r.announcements)
            }
            Err(_) => pretty(result),
        },
        "output" => {
            let mut t = result["text"].as_str().or_else(|| result["data"].as_str()).unwrap_or_default().to_owned();
            if !t.is_empty() && !t.ends_with('\n') {
                t.push('\n');
            }
            if t.is_empty() {
                t.push_str("(no output in this view)\n");
            }
            if let Some(next) = result.get("next").filter(|n| !n.is_null()) {
                t.push_str(&format!("[more: output {next} continues this view]\n"));
            }
            if let Some(n) = result["note"].as_str() {
                t.push_str(n);
                t.push('\n');
            }
            t + &protocol::text::announcements_of(result)
        }
        "keep" => {
            let mut t = format!(
                "job {} kept as {}\n",
                result["job"],
                result["name"].as_str().or_else(|| result["kept"].as_str()).unwrap_or("?")
            );
            if let Some(n) = result["note"].as_str() {
                t.push_str(n);
                t.push('\n');
            }
            t + &protocol::text::announcements_of(result)
        }
        "checks" if result["checks"].is_array() => {
            protocol::text::checks(result) + &protocol::text::announcements_of(result)
        }
        "describe" if result["sessions"].as_array().is_some_and(|v| v.len() == 1) => {
            protocol::text::describe(result) + &protocol::text::announcements_of(result)
        }
        _ => {
            let mut shown = result.clone();
            let announcements = protocol::text::announcements_of(result);
            if let Some(m) = shown.as_object_mut() {
                m.remove("announcements");
            }
            pretty(&shown) + "\n" + &announcements
        }
    }
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_has_an_object_schema_and_a_description() {
        for t in list()["tools"].as_array().unwrap() {
            assert_eq!(t["inputSchema"]["type"], "object", "{t}");
            assert!(t["description"].as_str().unwrap().len() > 40, "{t}");
            let name = t["name"].as_str().unwrap();
            let args = if name == "keep" { json!({"job": 1, "name": "x"}) } else { json!({"job": 1, "cmd": "true"}) };
            assert!(params(name, args, "s").is_ok(), "{name}");
        }
    }

    /// The `(ms; default N)` a property's description states.
    fn stated_default(tool: &str, prop: &str) -> u64 {
        let tools = list();
        let t = tools["tools"].as_array().unwrap().iter().find(|t| t["name"] == tool).unwrap();
        let d = t["inputSchema"]["properties"][prop]["description"].as_str().unwrap_or_default();
        let n =
            d.split_once("default ").map(|(_, n)| n).unwrap_or_else(|| panic!("{tool}.{prop} states no default: {d}"));
        n.split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap()
    }

    #[test]
    fn the_defaults_the_schemas_state_are_the_kernels() {
        use crate::kernel::terminal_io::{DEFAULT_QUIET_MS, DEFAULT_WRITE_YIELD_MS};
        assert_eq!(stated_default("run", "yield_ms"), crate::kernel::DEFAULT_YIELD_MS);
        assert_eq!(stated_default("wait", "yield_ms"), crate::kernel::DEFAULT_YIELD_MS);
        assert_eq!(stated_default("write", "yield_ms"), DEFAULT_WRITE_YIELD_MS, "write settles sooner than run waits");
        assert_eq!(stated_default("write", "quiet_ms"), DEFAULT_QUIET_MS);
        let secs = |ms: u64| format!("default {} s", ms / 1000);
        assert!(INSTRUCTIONS.contains(&format!("`yield_ms` ({})", secs(crate::kernel::DEFAULT_YIELD_MS))));
        let tools = list();
        let described = |name: &str| {
            let t = tools["tools"].as_array().unwrap().iter().find(|t| t["name"] == name).unwrap();
            t["description"].as_str().unwrap().to_owned()
        };
        assert!(described("check").contains(&secs(crate::kernel::check_run::DEFAULT_CHECK_YIELD_MS)));
        let (_, p) = params("output", json!({"job": 1}), "s").unwrap();
        assert!(described("output").contains(&format!("With none, the last {} lines", p["tail"])));
    }

    #[test]
    fn arguments_become_the_methods_params() {
        let (m, p) = params("run", json!({"cmd": "make", "keep": "dev"}), "s1").unwrap();
        assert_eq!((m, &p), ("run", &json!({"cmd": "make", "keep": true, "name": "dev", "session": "s1"})));
        let (_, p) = params("output", json!({"job": 3}), "s1").unwrap();
        assert_eq!(p, json!({"job": 3, "tail": 200, "session": "s1"}));
        let (_, p) = params("output", json!({"job": 3, "lines": [4, 9], "session": "s1"}), "s1").unwrap();
        assert_eq!(p, json!({"job": 3, "lines": [4, 9], "session": "s1"}), "a marker's call pastes as is");
    }

    #[test]
    fn bad_calls_say_what_was_wrong() {
        let e = params("nope", json!({}), "s").unwrap_err();
        assert!(e.message.contains("there is no tool 'nope'") && e.message.contains("run"), "{e}");
        let e = params("run", json!([1]), "s").unwrap_err();
        assert!(e.message.contains("must be an object"), "{e}");
        let e = params("jobs", json!({"session": "other"}), "s").unwrap_err();
        assert!(e.message.contains("session 's' only"), "{e}");
        assert!(params("run", json!({"cmd": "x", "keep": 3}), "s").is_err());
    }

    #[test]
    fn a_job_result_reads_as_the_text_form() {
        let r = json!({"job": 2, "state": "exited", "exit_code": 1, "duration_ms": 3.0, "view": "no\n", "announcements": []});
        assert_eq!(text("run", &r), "exit 1 · 3.0 ms · job 2\nno\n");
    }
}
