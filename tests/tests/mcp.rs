//! The MCP door and the CLI as their users drive them: an agent's host starting `heddle mcp` (the
//! official Python SDK, and raw JSON lines), and a person typing `heddle run` twice.

use heddle_tests::{alive, bin_dir, eventually, Heddle};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

/// The Python with the official MCP SDK: `$HEDDLE_MCP_PYTHON`, else the venv `.ci/test` makes.
fn mcp_python() -> PathBuf {
    let p = std::env::var_os("HEDDLE_MCP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/mcp-venv/bin/python"));
    assert!(
        p.exists(),
        "{} is missing: make it with `python3 -m venv target/mcp-venv && target/mcp-venv/bin/pip install mcp` \
         (.ci/test does), or point HEDDLE_MCP_PYTHON at a Python that has the `mcp` package",
        p.display()
    );
    p
}

#[test]
fn an_agent_session_through_the_python_mcp_sdk() {
    let h = Heddle::start();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("mcp/agent_session.py");
    let out = Command::new(mcp_python())
        .arg(&script)
        .arg(bin_dir().join("heddle"))
        .arg(&h.project)
        .env("HEDDLE_SOCKET", &h.socket)
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the SDK session failed:\n{stdout}\n{stderr}");
    let summary: Value = serde_json::from_str(stdout.lines().last().unwrap_or("")).expect("a JSON summary");
    assert_eq!(summary["server"], "heddle", "{summary}");
    assert_eq!(summary["carried"], true, "{summary}");
    let pid = summary["killed_survivor"].as_u64().expect("the setsid survivor's pid");
    assert!(!alive(pid), "the setsid survivor {pid} is gone");
    // The bridge held no state and closed nothing: the session and its jobs outlive it.
    let session = summary["session"].as_str().unwrap();
    let jobs = h.client().call("jobs", json!({"session": session})).expect("the session outlives the bridge");
    assert!(jobs["jobs"].as_array().unwrap().len() >= 6, "{jobs}");
}

/// `heddle mcp` driven with raw JSON lines, as a host that is not an SDK would.
struct Bridge {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Bridge {
    fn start(h: &Heddle, args: &[&str]) -> Bridge {
        let mut child = Command::new(bin_dir().join("heddle"))
            .arg("mcp")
            .args(["--cwd", h.project.to_str().unwrap()])
            .args(args)
            .env("HEDDLE_SOCKET", &h.socket)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (stdin, stdout) = (child.stdin.take(), BufReader::new(child.stdout.take().unwrap()));
        Bridge { child, stdin, stdout }
    }

    /// A bridge with the session's MCP handshake done (request id 1).
    fn initialized(h: &Heddle) -> Bridge {
        Bridge::initialized_with(h, &[])
    }

    /// [`Bridge::initialized`] with `args` for `heddle mcp`.
    fn initialized_with(h: &Heddle, args: &[&str]) -> Bridge {
        let mut b = Bridge::start(h, args);
        let init =
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}});
        b.call(1, "initialize", init);
        b.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        b
    }

    fn send(&mut self, line: &str) {
        let w = self.stdin.as_mut().unwrap();
        let gone = "the bridge is gone: its stdin (the agent's pipe) has no reader";
        w.write_all(line.as_bytes()).expect(gone);
        w.write_all(b"\n").expect(gone);
        w.flush().expect(gone);
    }

    fn reply(&mut self) -> Value {
        let mut line = String::new();
        assert!(self.stdout.read_line(&mut line).unwrap() > 0, "the bridge closed its stdout");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    /// The next reply, if one comes within `t`.
    fn reply_within(&mut self, t: Duration) -> Option<Value> {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        use std::os::fd::AsFd;
        if self.stdout.buffer().is_empty() {
            let mut fds = [PollFd::new(self.stdout.get_ref().as_fd(), PollFlags::POLLIN)];
            if poll(&mut fds, PollTimeout::try_from(t).unwrap()).unwrap() == 0 {
                return None;
            }
        }
        Some(self.reply())
    }

    fn call(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string());
        let r = self.reply();
        assert_eq!(r["id"], id, "replies come in order: {r}");
        r
    }

    fn tool(&mut self, id: u64, name: &str, args: Value) -> Value {
        self.call(id, "tools/call", json!({"name": name, "arguments": args}))["result"].clone()
    }

    /// [`Bridge::finish`], keeping the bridge for its stderr.
    fn finish_keeping_stderr(&mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut self.stdout, &mut rest);
        assert!(rest.is_empty(), "nothing unasked for: {rest}");
        self.child.wait().unwrap()
    }

    /// Close stdin as a host does at exit; the bridge's exit status.
    fn finish(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut self.stdout, &mut rest);
        assert!(rest.is_empty(), "nothing unasked for: {rest}");
        self.child.wait().unwrap()
    }
}

#[test]
fn the_mcp_bridge_serves_raw_json_lines_and_survives_bad_input() {
    raw_json_lines(&[]);
}

/// The same through `heddle mcp --relay`, which copies every message instead of handing stdio over.
#[test]
fn the_relaying_mcp_bridge_serves_raw_json_lines_and_survives_bad_input() {
    raw_json_lines(&["--relay"]);
}

fn raw_json_lines(mode: &[&str]) {
    let h = Heddle::start();
    let mut b = Bridge::start(&h, &[&["--session", "raw-agent"], mode].concat());
    let init = b.call(
        1,
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}),
    );
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18", "{init}");
    assert!(init["result"]["capabilities"]["tools"].is_object(), "{init}");
    b.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let tools = b.call(2, "tools/list", json!({}));
    assert_eq!(tools["result"]["tools"].as_array().unwrap().len(), 11, "{tools}");

    // Garbage, an unknown tool, a wrong argument type: each answered, the door keeps serving.
    b.send("this is not json");
    let bad = b.reply();
    assert_eq!(bad["error"]["code"], -32700, "{bad}");
    let r = b.call(3, "tools/call", json!({"name": "format_disk", "arguments": {}}));
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(r["error"]["message"].as_str().unwrap().contains("there is no tool 'format_disk'"), "{r}");
    let r = b.tool(4, "run", json!({"cmd": ["not", "a", "string"]}));
    assert_eq!(r["isError"], true, "{r}");
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("error (invalid_params): ") && text.ends_with('\n'), "one line, as the text form: {r}");
    let huge = "x".repeat(17 * 1024 * 1024);
    b.send(&json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "run", "arguments": {"cmd": huge}}}).to_string());
    let r = b.reply();
    assert_eq!(r["error"]["code"], -32600, "a line over the limit is refused, not run: {r}");

    let r = b.tool(6, "run", json!({"cmd": "echo one; echo two >&2; exit 3"}));
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("exit 3 · ") && text.contains(" · job 1\n"), "{text}");
    assert!(text.contains("one\n") && text.contains("two\n"), "{text}");
    assert_eq!(r["structuredContent"]["exit_code"], 3, "{r}");
    assert_eq!(r["isError"], false, "a failing command is a result, not a tool error: {r}");

    // An idempotency key: a retry returns the same receipt and never runs twice.
    let args = json!({"cmd": "echo ran >> ledger", "idempotency_key": "k-1"});
    let first = b.tool(7, "run", args.clone());
    let again = b.tool(8, "run", args);
    assert_eq!(first["structuredContent"]["receipt"]["id"], again["structuredContent"]["receipt"]["id"], "{again}");
    let ledger = std::fs::read_to_string(h.project.join("ledger")).unwrap();
    assert_eq!(ledger, "ran\n", "ran once");
    // A line view carries its text once: in the content, not again in `structuredContent`.
    let v = b.tool(20, "output", json!({"job": 1, "lines": [1, 2]}));
    let text = v["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("1: one\n") && text.contains("2: two\n"), "{v}");
    let structured = &v["structuredContent"];
    assert!(structured.get("text").is_none() && structured.get("lines").is_none(), "{v}");
    assert_eq!((structured["view"].as_str(), structured["total_lines"].as_u64()), (Some("lines"), Some(2)), "{v}");
    // stdin closed in the middle of a call: the bridge still delivers its answer, then exits.
    b.send(&json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "run", "arguments": {"cmd": "sleep 0.5; echo late"}}}).to_string());
    drop(b.stdin.take());
    let late = b.reply();
    assert_eq!(late["id"], 9, "{late}");
    assert!(late["result"]["content"][0]["text"].as_str().unwrap().contains("late\n"), "{late}");
    assert!(b.finish().success());

    // The session stayed (no --close-on-exit); a new bridge on the same name finds its jobs.
    let mut b = Bridge::start(&h, &[&["--session", "raw-agent", "--close-on-exit"], mode].concat());
    b.call(1, "initialize", json!({"protocolVersion": "2025-06-18"}));
    let jobs = b.tool(2, "jobs", json!({}));
    assert!(jobs["content"][0]["text"].as_str().unwrap().contains("echo one; echo two"), "{jobs}");
    assert!(b.finish().success());
    let mut c = h.client();
    assert!(
        eventually(Duration::from_secs(10), || c.call("jobs", json!({"session": "raw-agent"})).is_err()),
        "--close-on-exit closed the session with the bridge"
    );
}

/// The bridge hands the agent's pipes to the server: a stopped bridge process is not in the way of a
/// call, and a killed one ends the connection (the agent's stdout closes, `--close-on-exit` closes
/// the session) even while the host keeps its ends of the pipes open.
#[test]
fn the_bridge_hands_the_agents_stdio_to_the_server() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let h = Heddle::start();
    let mut b = Bridge::start(&h, &["--session", "handed", "--close-on-exit"]);
    b.call(1, "initialize", json!({"protocolVersion": "2025-06-18"}));
    let r = b.tool(2, "run", json!({"cmd": "cd /tmp; echo first"}));
    assert!(r["content"][0]["text"].as_str().unwrap().contains("first\n"), "{r}");
    let pid = Pid::from_raw(i32::try_from(b.child.id()).unwrap());
    kill(pid, Signal::SIGSTOP).unwrap();
    // The bridge cannot copy anything now: the answer comes from the server itself.
    b.send(&json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "run", "arguments": {"cmd": "pwd"}}}).to_string());
    let (tx, rx) = std::sync::mpsc::channel();
    let mut stdout = b.stdout;
    let reader = std::thread::spawn(move || {
        let mut line = String::new();
        let _ = stdout.read_line(&mut line);
        let _ = tx.send(line);
        // Then wait for the end of the agent's stdout.
        let mut rest = String::new();
        let n = std::io::Read::read_to_string(&mut stdout, &mut rest);
        (n.ok(), rest)
    });
    let line = rx.recv_timeout(Duration::from_secs(20)).expect("answered while the bridge is stopped");
    let r: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(r["id"], 3, "{r}");
    assert!(r["result"]["content"][0]["text"].as_str().unwrap().contains("\n/tmp\n"), "{r}");
    // Killed, with the agent's stdin still open: the server ends the connection.
    kill(pid, Signal::SIGKILL).unwrap();
    b.child.wait().unwrap();
    let started = std::time::Instant::now();
    while !reader.is_finished() {
        assert!(started.elapsed() < Duration::from_secs(20), "the agent's stdout never closed after the bridge died");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (n, rest) = reader.join().unwrap();
    assert_eq!((n, rest.as_str()), (Some(0), ""), "nothing more after the last answer");
    drop(b.stdin.take());
    let mut c = h.client();
    assert!(
        eventually(Duration::from_secs(10), || c.call("jobs", json!({"session": "handed"})).is_err()),
        "--close-on-exit closed the session when the bridge was killed"
    );
}

/// The front's pid, as `describe` names it (none while no front answers).
fn front_pid(h: &Heddle) -> Option<u64> {
    let mut c = heddle_tests::Client::connect(&h.socket).ok()?;
    c.call("describe", json!({})).ok()?["front"]["pid"].as_u64()
}

/// SIGKILL the front and wait until a new one answers.
fn kill_the_front(h: &Heddle) {
    let old = front_pid(h).expect("describe names the front");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(i32::try_from(old).unwrap()), nix::sys::signal::SIGKILL).unwrap();
    assert!(eventually(Duration::from_secs(30), || front_pid(h).is_some_and(|p| p != old)), "a new front answers");
}

/// What the bridge said on stderr, once it has exited.
fn stderr_of(b: &mut Bridge) -> String {
    let mut e = String::new();
    let _ = std::io::Read::read_to_string(b.child.stderr.as_mut().unwrap(), &mut e);
    e
}

/// The text of a tool result, and its session.
fn said(r: &Value) -> (&str, &str) {
    (r["content"][0]["text"].as_str().unwrap_or(""), r["structuredContent"]["session"].as_str().unwrap_or(""))
}

/// The server goes away under a connected agent — its front killed (the supervisor starts another),
/// then the whole stack restarted — and the agent's `heddle mcp` stays: it resumes the session and
/// hands its stdio over again, so the agent's next calls are answered in the same session, its shell
/// state carried on. A session opened without a name is resumed by the name it was given. Closing
/// stdin still ends the bridge.
#[test]
fn the_bridge_resumes_its_session_when_the_server_goes_away() {
    let mut h = Heddle::start();
    let mut named = Bridge::initialized_with(&h, &["--session", "stays"]);
    let mut fresh = Bridge::initialized(&h);
    let r = named.tool(2, "run", json!({"cmd": "export KEPT=yes; echo first"}));
    assert!(said(&r).0.contains("first\n"), "{r}");
    let r = fresh.tool(2, "run", json!({"cmd": "export KEPT=fresh"}));
    let unnamed = said(&r).1.to_owned();
    kill_the_front(&h);
    // Written while the bridges may still be reconnecting: they wait in the pipes for the new front.
    let r = named.tool(3, "run", json!({"cmd": "echo \"after a crash: $KEPT\""}));
    assert!(said(&r).0.contains("after a crash: yes\n") && said(&r).1 == "stays", "{r}");
    let r = fresh.tool(3, "run", json!({"cmd": "echo \"after a crash: $KEPT\""}));
    assert!(said(&r).0.contains("after a crash: fresh\n") && said(&r).1 == unnamed, "{r}");
    h.restart(&[]);
    let r = named.tool(4, "run", json!({"cmd": "echo \"after a restart: $KEPT\""}));
    assert!(said(&r).0.contains("after a restart: yes\n") && said(&r).1 == "stays", "{r}");
    assert!(named.child.try_wait().unwrap().is_none(), "the agent's MCP server is the same process");
    let status = named.finish_keeping_stderr();
    assert!(status.success(), "closing stdin ends the bridge: {status}");
    let err = stderr_of(&mut named);
    assert!(err.contains("(resumed)") && err.contains("(resumed after a restart of heddle)"), "{err}");
}

/// A task outlives the front that admitted it: after the bridge resumed on a new front, `tasks/get` and
/// `tasks/result` with the id the agent was given still answer (the id names the session and the job),
/// instead of "there is no task".
#[test]
fn a_task_is_known_again_after_the_bridge_resumed() {
    let h = Heddle::start();
    let mut b = Bridge::initialized_with(&h, &["--session", "tasked"]);
    let call = json!({"name": "run", "arguments": {"cmd": "sleep 1; echo tasked"}, "task": {"ttl": 60000}});
    let r = b.call(2, "tools/call", call);
    let id = r["result"]["task"]["taskId"].as_str().unwrap_or_else(|| panic!("a task: {r}")).to_owned();
    assert_eq!(id, "tasked/1", "{r}");
    kill_the_front(&h);
    let r = b.call(3, "tasks/get", json!({"taskId": id}));
    let status = r["result"]["status"].as_str().unwrap_or_else(|| panic!("known again: {r}"));
    assert!(matches!(status, "working" | "completed"), "{r}");
    let r = b.call(4, "tasks/result", json!({"taskId": id}));
    assert!(said(&r["result"]).0.contains("tasked\n"), "the job's result: {r}");
    assert_eq!(r["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], id, "{r}");
    // Another session of the same user, with a job 1 of its own: not this connection's to take up.
    let mut c = h.client();
    c.call("session.open", json!({"name": "other", "cwd": h.project})).unwrap();
    c.call("run", json!({"session": "other", "cmd": "true"})).unwrap();
    let r = b.call(5, "tasks/get", json!({"taskId": "other/1"}));
    assert!(r["error"]["message"].as_str().is_some_and(|m| m.contains("no task 'other/1'")), "{r}");
    let r = b.call(6, "tasks/get", json!({"taskId": "tasked/01"}));
    assert!(r["error"]["message"].as_str().is_some_and(|m| m.contains("no task 'tasked/01'")), "one spelling: {r}");
    assert!(b.finish().success());
}

/// A request the front had read and not answered when it died is answered by the bridge with an error
/// saying so (from the page of pending requests the front kept for it), instead of never: the agent's
/// call returns, and the job it started is announced on a later call.
#[test]
fn a_request_in_flight_when_the_front_dies_is_answered_with_an_error() {
    let h = Heddle::start();
    let mut b = Bridge::initialized_with(&h, &["--session", "inflight"]);
    let call = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "run", "arguments": {"cmd": "sleep 2; echo done", "yield_ms": 30000}}});
    b.send(&call.to_string());
    std::thread::sleep(Duration::from_millis(700));
    kill_the_front(&h);
    let r = b.reply_within(Duration::from_secs(20)).expect("the call in flight is answered, not left waiting");
    assert_eq!(r["id"], 5, "{r}");
    let why = r["error"]["message"].as_str().unwrap_or_default();
    assert!(why.contains("went away while this request waited"), "{r}");
    std::thread::sleep(Duration::from_millis(2000));
    let r = b.tool(6, "run", json!({"cmd": "echo after"}));
    assert!(said(&r).0.contains("after\n"), "{r}");
    assert!(said(&r).0.contains("sleep 2; echo done"), "the job it started is announced: {r}");
    assert!(b.finish().success());
}

/// Answers queued for an agent that stopped reading (its stdout pipe full) when the front dies are not
/// lost: the page keeps their ids until they are written whole, and the bridge answers each one left with
/// an error, after ending a line the dead front left cut. Every request gets exactly one answer.
#[test]
fn answers_queued_for_a_slow_reader_when_the_front_dies_are_answered() {
    let h = Heddle::start();
    let mut b = Bridge::initialized_with(&h, &["--session", "slow-reader"]);
    // Each tools/list answer is ~14 KB: 40 of them are more than the agent's stdout pipe holds.
    let ids: Vec<u64> = (10..50).collect();
    for id in &ids {
        b.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}).to_string());
    }
    std::thread::sleep(Duration::from_millis(1500));
    kill_the_front(&h);
    let mut seen: Vec<u64> = Vec::new();
    let mut torn = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while seen.len() < ids.len() {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        use std::os::fd::AsFd;
        if b.stdout.buffer().is_empty() {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let mut fds = [PollFd::new(b.stdout.get_ref().as_fd(), PollFlags::POLLIN)];
            let ready = poll(&mut fds, PollTimeout::try_from(left).unwrap_or(PollTimeout::ZERO)).unwrap();
            seen.sort_unstable();
            assert!(
                ready > 0,
                "no answer for {} of the requests within 30 s; answered: {seen:?}",
                ids.len() - seen.len()
            );
        }
        let mut line = String::new();
        let got = b.stdout.read_line(&mut line).unwrap();
        assert!(got > 0, "the bridge closed its stdout after {} answers: {seen:?}", seen.len());
        match serde_json::from_str::<Value>(&line) {
            Ok(v) => seen.push(v["id"].as_u64().unwrap_or_else(|| panic!("an answer without an id: {v}"))),
            Err(_) => torn += 1,
        }
    }
    seen.sort_unstable();
    assert_eq!(seen, ids, "each request answered once (a result, or the bridge's error)");
    assert!(torn <= 1, "at most the one line the dead front was writing is cut: {torn}");
    let r = b.tool(60, "run", json!({"cmd": "echo after"}));
    assert!(said(&r).0.contains("after\n"), "{r}");
    assert!(b.finish().success());
}

/// A bridge whose session did not survive (the server was shut down with `shutdown`, which closes every
/// session) is refused on resuming, and exits saying so: it never carries on in a fresh session of the
/// same name, whose empty state would look like the agent's own.
#[test]
fn the_bridge_exits_when_its_session_did_not_survive() {
    let mut h = Heddle::start();
    let mut b = Bridge::initialized_with(&h, &["--session", "gone"]);
    let r = b.tool(2, "run", json!({"cmd": "export KEPT=yes"}));
    assert_eq!(r["isError"], false, "{r}");
    let mut c = h.client();
    c.call("shutdown", json!({"grace_ms": 1000})).unwrap();
    assert!(eventually(Duration::from_secs(20), || heddle_tests::Client::connect(&h.socket).is_err()), "it went away");
    h.restart(&[]);
    let st = (0..300).find_map(|_| {
        std::thread::sleep(Duration::from_millis(100));
        b.child.try_wait().unwrap()
    });
    if st.is_none() {
        // Still there after 30 s: it carried on somewhere (its stderr says where once it is gone).
        let _ = b.child.kill();
        let _ = b.child.wait();
    }
    let err = stderr_of(&mut b);
    assert_eq!(st.and_then(|s| s.code()), Some(1), "the bridge gives up: {err}");
    assert!(err.contains("session 'gone' cannot be carried on"), "{err}");
    let mut c = h.client();
    assert!(c.call("jobs", json!({"session": "gone"})).is_err(), "no fresh session was opened under its name");
}

/// A session closed from outside the agent's connection (a person's `heddle close`) is opened again at
/// the agent's next call, which runs there and says so first: the agent is not left with a connection
/// whose every call answers `unknown_session`, and it is told that its shell state starts afresh.
#[test]
fn a_session_closed_from_outside_is_opened_again_and_the_agent_told() {
    let h = Heddle::start();
    let mut b = Bridge::initialized_with(&h, &["--session", "closed-under"]);
    let r = b.tool(2, "run", json!({"cmd": "export KEPT=yes; echo first"}));
    assert!(said(&r).0.contains("first\n"), "{r}");
    let closed = Command::new(bin_dir().join("heddle"))
        .args(["--session", "closed-under", "close"])
        .env("HEDDLE_SOCKET", &h.socket)
        .output()
        .unwrap();
    assert!(closed.status.success(), "{}", String::from_utf8_lossy(&closed.stderr));
    let r = b.tool(3, "run", json!({"cmd": "echo \"kept: ${KEPT:-unset}\""}));
    let (text, session) = said(&r);
    assert_eq!((r["isError"].as_bool(), session), (Some(false), "closed-under"), "{r}");
    assert!(text.starts_with("note: session 'closed-under' was closed from outside"), "{text}");
    assert!(text.contains("start afresh") && text.contains("kept: unset\n"), "{text}");
    assert_eq!(r["structuredContent"]["job"], 1, "a new session numbers its jobs afresh: {r}");
    let r = b.tool(4, "run", json!({"cmd": "echo again"}));
    assert!(said(&r).0.starts_with("exit 0"), "said once: {r}");
    // A task's id names its session and job: after another close and reopen, job 1 is a new job, and
    // the old task is not mistaken for it.
    let task = json!({"name": "run", "arguments": {"cmd": "echo old; exit 7"}, "task": {}});
    let r = b.call(5, "tools/call", task);
    let old = r["result"]["task"]["taskId"].as_str().unwrap_or_else(|| panic!("{r}")).to_owned();
    std::thread::sleep(Duration::from_millis(300));
    let closed = Command::new(bin_dir().join("heddle"))
        .args(["close", "closed-under"])
        .env("HEDDLE_SOCKET", &h.socket)
        .output()
        .unwrap();
    assert!(closed.status.success(), "{}", String::from_utf8_lossy(&closed.stderr));
    let task = json!({"name": "run", "arguments": {"cmd": "echo new"}, "task": {}});
    let r = b.call(6, "tools/call", task);
    let new = r["result"]["task"]["taskId"].as_str().unwrap_or_else(|| panic!("{r}")).to_owned();
    let status = r["result"]["task"]["statusMessage"].as_str().unwrap_or_default();
    assert!(status.starts_with("note: session 'closed-under' was closed from outside"), "{r}");
    assert_eq!((old.as_str(), new.as_str()), ("closed-under/3", "closed-under/1"), "{r}");
    let r = b.call(7, "tasks/result", json!({"taskId": new}));
    let text = said(&r["result"]).0;
    assert!(text.starts_with("note: session 'closed-under'") && text.contains("\nnew\n"), "{r}");
    let r = b.call(8, "tasks/get", json!({"taskId": old}));
    assert!(r["error"]["message"].as_str().is_some_and(|m| m.contains("no task")), "{r}");
    assert!(b.finish().success());
}

/// A client that promises its stdio and then sends the wrong thing gets a sentence and a closed
/// connection; the server goes on.
#[test]
fn a_bad_stdio_hand_over_is_refused_with_a_sentence() {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;
    let h = Heddle::start();
    let file = std::fs::File::create(h.project.join("not-a-pipe")).unwrap();
    let (pipe_r, _pipe_w) = nix::unistd::pipe().unwrap();
    let attach = json!({"jsonrpc": "2.0", "id": 1, "method": "mcp.attach", "params": {"cwd": h.project, "hand_over_stdio": true}});
    let cases: [(&str, Vec<i32>); 3] = [
        ("a file", vec![pipe_r.as_raw_fd(), file.as_raw_fd()]),
        ("one descriptor", vec![pipe_r.as_raw_fd()]),
        ("none", vec![]),
    ];
    for (what, fds) in cases {
        let s = UnixStream::connect(&h.socket).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        (&s).write_all(format!("{attach}\n").as_bytes()).unwrap();
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        let answer: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(answer["result"]["hand_over_stdio"], true, "{what}: {answer}");
        let cmsg = [ControlMessage::ScmRights(&fds)];
        let cmsgs: &[ControlMessage<'_>] = if fds.is_empty() { &[] } else { &cmsg };
        sendmsg::<()>(s.as_raw_fd(), &[std::io::IoSlice::new(b"\0")], cmsgs, MsgFlags::empty(), None).unwrap();
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut r, &mut rest).unwrap();
        let refusal: Value = serde_json::from_str(rest.trim_end()).unwrap_or_else(|e| panic!("{what}: {e}: {rest}"));
        let message = refusal["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("pipe or a socket") || message.contains("exactly two descriptors"),
            "{what}: {refusal}"
        );
    }
    // The server still serves.
    let mut c = h.client();
    let s = h.open_session(&mut c);
    assert_eq!(c.call("run", json!({"session": s, "cmd": "true"})).unwrap()["exit_code"], 0);
}

/// `heddle close NAME` as a person types it: the session named is closed (not opened first to be
/// closed), and what was killed and what ended unseen are said in text; a name that is not open is an
/// error, and opens nothing. A mistyped `run` option is refused before anything runs (it used to run as
/// the command: `bash: --yield-ms: command not found`).
#[test]
fn the_cli_closes_a_named_session_and_refuses_a_mistyped_option() {
    let h = Heddle::start();
    let heddle = |args: &[&str]| {
        let o = Command::new(bin_dir().join("heddle")).args(args).env("HEDDLE_SOCKET", &h.socket).output().unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let cwd = h.project.to_str().unwrap();
    let (code, out, _) = heddle(&["--session", "work", "run", "--cwd", cwd, "--", "setsid sleep 60 & echo started"]);
    assert_eq!(code, Some(0), "{out}");
    let (code, out, _) = heddle(&["--session", "work", "run", "--yield", "0", "--", "sleep 0.2; echo late"]);
    assert_eq!(code, Some(75), "{out}");
    std::thread::sleep(Duration::from_millis(800));
    let (code, out, err) = heddle(&["close", "work"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.starts_with("session 'work' closed: killed 1 process: sleep (pid "), "{out}");
    assert!(out.contains("its cgroups verified empty") && out.contains("job 2 ended: exit 0"), "{out}");
    let mut c = h.client();
    assert!(c.call("jobs", json!({"session": "work"})).is_err(), "closed");
    let (code, out, err) = heddle(&["close", "never-opened"]);
    assert_ne!(code, Some(0), "{out}");
    assert!(err.contains("no session named 'never-opened'"), "{err}");
    assert!(c.call("jobs", json!({"session": "never-opened"})).is_err(), "nothing was opened to be closed");
    let (code, out, err) = heddle(&["--session", "typo", "run", "--yield-ms", "0", "true"]);
    assert_eq!(code, Some(2), "{out}");
    assert!(err.contains("has no option '--yield-ms'") && err.contains("nothing was run"), "{err}");
    assert!(c.call("jobs", json!({"session": "typo"})).is_err(), "no session was opened, no job run");
    // Commands about jobs already run do not open the session they name, and their errors name the
    // command a person types, not the protocol's call.
    for args in [
        &["--session", "ghost", "jobs"][..],
        &["--session", "ghost", "wait", "1"],
        &["--session", "ghost", "output", "1"],
    ] {
        let (code, out, err) = heddle(args);
        assert_eq!(code, Some(2), "{args:?}: {out}");
        assert!(err.contains("no session named 'ghost'; `heddle --session ghost run …` opens one"), "{args:?}: {err}");
    }
    assert!(c.call("jobs", json!({"session": "ghost"})).is_err(), "nothing was opened");
    heddle(&["--session", "here", "run", "--cwd", cwd, "--", "true"]);
    let (_, _, err) = heddle(&["--session", "here", "output", "99"]);
    assert!(err.contains("has no job 99; list its jobs with `heddle --session here jobs`"), "{err}");
}

#[test]
fn the_cli_shows_what_ended_since_the_last_command() {
    let h = Heddle::start();
    let heddle = |args: &[&str]| {
        Command::new(bin_dir().join("heddle"))
            .args(["--session", "person", "run", "--cwd", h.project.to_str().unwrap()])
            .args(args)
            .env("HEDDLE_SOCKET", &h.socket)
            .output()
            .unwrap()
    };
    let first = heddle(&["--yield", "100", "--", "sleep 1; echo woke up"]);
    assert_eq!(first.status.code(), Some(75), "still running: {}", String::from_utf8_lossy(&first.stdout));
    let mut c = h.client();
    assert!(
        eventually(Duration::from_secs(20), || {
            c.call("describe", json!({})).unwrap()["sessions"][0]["jobs_running"] == 0
        }),
        "the sleep ended"
    );
    let second = heddle(&["--", "echo now"]);
    let text = String::from_utf8_lossy(&second.stdout);
    assert_eq!(second.status.code(), Some(0), "{text}");
    assert!(text.contains("job 1 ended: exit 0 · ") && text.contains("\n  woke up\n"), "the end is announced: {text}");
    let third = heddle(&["--", "true"]);
    assert!(!String::from_utf8_lossy(&third.stdout).contains("job 1 ended"), "announced once");
    // `heddle describe` is a look: it takes no announcement, and the next command shows it.
    // Long enough that the call returns before it ends (`echo` alone can end within the call).
    heddle(&["--yield", "0", "--", "sleep 0.3; echo late"]);
    assert!(
        eventually(Duration::from_secs(20), || {
            c.call("describe", json!({})).unwrap()["sessions"][0]["jobs_running"] == 0
        }),
        "it ended"
    );
    let described = Command::new(bin_dir().join("heddle"))
        .args(["--session", "person", "describe"])
        .env("HEDDLE_SOCKET", &h.socket)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&described.stdout);
    assert!(text.contains("session person") || text.contains("person"), "{text}");
    assert!(!text.contains(" ended: "), "describe took nothing: {text}");
    let next = heddle(&["--", "true"]);
    let text = String::from_utf8_lossy(&next.stdout);
    assert!(text.contains("job 4 ended: exit 0 · ") && text.contains("\n  late\n"), "{text}");
}

/// A person looking at an agent's session with `heddle jobs` and `heddle output` takes nothing from the
/// agent: the end of a job the agent yielded is announced to the agent's next call, not printed to the
/// person (who sees the job's state in the table anyway).
#[test]
fn a_person_looking_at_an_agents_session_takes_no_announcement() {
    let h = Heddle::start();
    let mut agent = h.client();
    let s = h.open_session(&mut agent);
    let r = agent.call("run", json!({"session": s, "cmd": "sleep 0.3; echo agent-bg-done", "yield_ms": 0})).unwrap();
    assert_eq!(r["state"], "running", "{r}");
    let job = r["job"].as_u64().unwrap();
    let mut onlooker = h.client();
    assert!(
        eventually(Duration::from_secs(20), || {
            onlooker.call("describe", json!({})).unwrap()["sessions"][0]["jobs_running"] == 0
        }),
        "the job ended"
    );
    let person = |args: &[&str]| {
        let o = h.cli(&[&["--session", s.as_str().unwrap()], args].concat());
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let table = person(&["jobs"]);
    assert!(table.contains("exit 0") && !table.contains(" ended: "), "{table}");
    let view = person(&["output", &job.to_string()]);
    assert!(view.contains("agent-bg-done") && !view.contains(" ended: "), "{view}");
    let raw = person(&["output", &job.to_string(), "--raw"]);
    assert_eq!(raw, "agent-bg-done\n");
    let next = agent.call("run", json!({"session": s, "cmd": "true"})).unwrap();
    let announced: Vec<u64> =
        next["announcements"].as_array().unwrap().iter().filter_map(|a| a["job"].as_u64()).collect();
    assert_eq!(announced, [job], "the agent's next call announces the job the person looked at: {next}");
}

#[test]
fn the_typescript_sdk_example_runs_against_heddle_mcp() {
    let h = Heddle::start();
    let example = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/mcp-typescript");
    assert!(
        example.join("node_modules/@modelcontextprotocol/sdk").exists(),
        "the example's SDK is missing: run `npm ci --prefix examples/mcp-typescript` (.ci/test does)"
    );
    let out = Command::new("node")
        .arg(example.join("agent.mjs"))
        .arg(bin_dir().join("heddle"))
        .arg(&h.project)
        .env("HEDDLE_SOCKET", &h.socket)
        .output()
        .expect("node runs (apt-get install nodejs)");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the TypeScript example failed:\n{stdout}\n{stderr}");
    let summary: Value = serde_json::from_str(stdout.lines().last().unwrap_or("")).expect("a JSON summary");
    assert_eq!(summary["announced"], 3, "{summary}");
    assert!(summary["task"].as_str().is_some_and(|t| t.ends_with("/4")), "a run became task 4: {summary}");
    // It asked for --close-on-exit: its session is gone with it.
    let mut c = h.client();
    assert!(
        eventually(Duration::from_secs(10), || c.call("describe", json!({})).unwrap()["sessions"]
            .as_array()
            .unwrap()
            .is_empty()),
        "the example's session closed with its bridge"
    );
}

#[test]
fn the_cli_follows_the_views_a_marker_names() {
    let h = Heddle::start();
    let cli = |args: &[&str]| {
        let out = Command::new(bin_dir().join("heddle"))
            .args(["--session", "viewer"])
            .args(args)
            .env("HEDDLE_SOCKET", &h.socket)
            .output()
            .unwrap();
        assert!(
            out.status.success() || matches!(args[0], "run" | "kill"),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let ran = cli(&[
        "run",
        "--cwd",
        h.project.to_str().unwrap(),
        "--",
        "seq 1 50000; echo 'token=ghp_0123456789abcdefghijklmnopqrstuvwxyzAB' >&2; echo 'error: boom' >&2",
    ]);
    assert!(ran.contains("omitted (lines"), "a marker: {}", &ran[..ran.len().min(400)]);
    assert!(ran.ends_with('\n'), "the person's prompt is not glued to the last line");
    // The marker names the command a person types, and typed, it shows exactly the lines omitted.
    let marker = ran.lines().find(|l| l.starts_with("[… heddle:")).unwrap();
    let typed = marker.split('`').nth(1).unwrap_or_else(|| panic!("a command in backquotes: {marker}"));
    let span = marker.split("(lines ").nth(1).unwrap().split(')').next().unwrap();
    let (from, to) = span.split_once('–').unwrap();
    assert_eq!(typed, format!("heddle --session viewer output 1 --lines {from}:{to}"), "{marker}");
    // (`cli` gives `--session viewer` itself.)
    let words: Vec<&str> = typed.split(' ').skip(3).collect();
    let shown = cli(&words);
    assert!(shown.starts_with(&format!("{from}: {from}\n")), "{}", &shown[..200]);
    let waiting = cli(&["run", "--yield", "0", "--", "sleep 5"]);
    assert!(waiting.contains("wait with `heddle --session viewer wait 2`"), "{waiting}");
    // A job busy in its own shell: liveness names the job's shell, never heddle's wrapper.
    let busy = cli(&["run", "--yield", "300", "--", "while :; do :; done"]);
    assert!(busy.contains("busy (running on a CPU): bash (pid "), "{busy}");
    assert!(!busy.contains("__heddle"), "the wrapper's text reached the person: {busy}");
    cli(&["kill", "3"]);
    let lines = cli(&["output", "1", "--lines", "25000:25002"]);
    assert!(lines.contains("25000") && lines.contains("25002") && !lines.contains("24999"), "{lines}");
    let tail = cli(&["output", "1", "--tail", "1", "--stream", "stderr"]);
    assert!(tail.contains("error: boom") && !tail.contains("25000"), "{tail}");
    let grep = cli(&["output", "1", "--grep", "token", "--context", "0"]);
    assert!(grep.contains("[redacted") && !grep.contains("ghp_0123"), "views are redacted: {grep}");
    let errors = cli(&["output", "1", "--errors"]);
    assert!(errors.contains("error: boom"), "{errors}");
    let raw = cli(&["output", "1", "--raw", "--stream", "stderr"]);
    assert!(raw.contains("ghp_0123"), "--raw is the bytes as written: {raw}");
    // A person pipes it into head: the CLI ends quietly when the reader goes (no panic, no error line).
    let piped = Command::new("sh")
        .arg("-c")
        .arg(format!("'{}' --session viewer output 1 --raw | head -1 >/dev/null", bin_dir().join("heddle").display()))
        .env("HEDDLE_SOCKET", &h.socket)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&piped.stderr);
    assert!(stderr.is_empty(), "a closed pipe is not an error: {stderr}");
}

/// The `describe` tool answers a model in a dozen lines of text (the JSON, several KiB, stays in
/// `structuredContent`): the shell, the carried cwd, where it may write, its limits and live jobs.
#[test]
fn the_describe_tool_answers_in_text() {
    let h = Heddle::start();
    let mut b = Bridge::initialized(&h);
    b.tool(2, "run", json!({"cmd": "cd /tmp && f() { :; }"}));
    b.tool(3, "run", json!({"cmd": "sleep 30", "yield_ms": 0}));
    let r = b.tool(4, "describe", json!({}));
    let text = r["content"][0]["text"].as_str().unwrap();
    let json_bytes = r["structuredContent"].to_string().len();
    assert!(text.len() * 3 < json_bytes, "text {} bytes against JSON {json_bytes}: {text}", text.len());
    let first = text.lines().next().unwrap();
    assert!(first.starts_with("heddle ") && first.contains("· bash 5."), "{text}");
    assert!(text.contains(&format!("cwd: /tmp (the session was opened in {})", h.project.display())), "{text}");
    assert!(text.contains("functions f"), "{text}");
    assert!(text.contains(&format!("writable: {} ({{project}})", h.project.display())), "{text}");
    assert!(text.contains("· network off"), "{text}");
    assert!(text.contains("jobs: 2 run (1 exited, 1 running)"), "{text}");
    assert!(text.contains("  job 2: sleep 30 · running "), "{text}");
    assert!(!text.contains("PATH (") && !text.contains("changed PATH"), "no job changed PATH: {text}");
    assert!(!text.contains("structured result"), "no pointer to what a model does not see: {text}");
    b.tool(5, "kill", json!({"job": 2}));
    // A PATH an earlier job exported is the one shown: jobs run with it.
    b.tool(6, "run", json!({"cmd": "export PATH=/opt/tools/bin:$PATH"}));
    let r = b.tool(7, "describe", json!({}));
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("\nPATH: /opt/tools/bin:"), "{text}");
    assert!(text.contains("note: an earlier job changed PATH (it was "), "{text}");
}

/// The `checks` tool answers in text too: a line per check with where it came from, its last run, and
/// the checks file's problems.
#[test]
fn the_checks_tool_answers_in_text() {
    let h = Heddle::start();
    let toml =
        "[check.unit]\ncommand = \"echo ran\"\nparser = \"none\"\n\n[check.bad]\ncommand = \"x\"\nparser = \"nope\"\n";
    std::fs::create_dir_all(h.project.join(".heddle")).unwrap();
    std::fs::write(h.project.join(".heddle/checks.toml"), toml).unwrap();
    let mut b = Bridge::initialized(&h);
    b.tool(2, "check", json!({"name": "unit"}));
    let r = b.tool(3, "checks", json!({}));
    let text = r["content"][0]["text"].as_str().unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "unit → echo ran (parser: none; .heddle/checks.toml line 1)", "{text}");
    assert!(lines[1].starts_with("  last run: job 1 · exit 0 · "), "{text}");
    assert!(
        text.contains("problem: .heddle/checks.toml line 7, check bad, key parser: unknown parser 'nope'"),
        "{text}"
    );
    assert!(r["structuredContent"]["checks"].is_array(), "{r}");
}

/// The `write` tool's text: for a stdin pipe, what the job wrote since the write (the JSON's
/// `new_output`) under a first line about output, not a screen; a write that ends the job says so
/// instead of "still changing"; and a tty job the write ended is announced by its line alone, its
/// last lines being on the screen just above.
#[test]
fn the_write_tool_shows_a_pipes_new_output_and_an_end_once() {
    let h = Heddle::start();
    let mut b = Bridge::initialized(&h);
    let cmd = r#"while read -r l; do echo "got $l"; done; echo "bye""#;
    let r = b.tool(2, "run", json!({"cmd": cmd, "stdin": "pipe", "yield_ms": 0}));
    assert_eq!(r["structuredContent"]["job"], 1, "{r}");
    let r = b.tool(3, "write", json!({"job": 1, "text": "apple", "keys": ["Enter"], "quiet_ms": 300}));
    let text = r["content"][0]["text"].as_str().unwrap();
    let first = text.lines().next().unwrap();
    assert!(first.starts_with("job 1 running · 6 bytes typed · output quiet after "), "{text}");
    assert_eq!(text.lines().nth(1), Some("got apple"), "{text}");
    let r = b.tool(4, "write", json!({"job": 1, "eof": true}));
    let text = r["content"][0]["text"].as_str().unwrap();
    let first = text.lines().next().unwrap();
    assert!(first.starts_with("job 1 exit 0 · 0 bytes typed · ended within "), "{text}");
    assert!(text.contains("\nbye\n"), "{text}");

    let tty = json!({"cmd": "python3 -q", "tty": {"rows": 24, "cols": 80}, "yield_ms": 3000});
    let r = b.tool(5, "run", tty);
    assert_eq!(r["structuredContent"]["job"], 2, "{r}");
    b.tool(6, "write", json!({"job": 2, "text": "print(6*7)", "keys": ["Enter"], "quiet_ms": 300}));
    let r = b.tool(7, "write", json!({"job": 2, "eof": true, "quiet_ms": 300}));
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("job 2 exit 0 · "), "{text}");
    assert_eq!(
        text.matches("print(6*7)").count(),
        1,
        "the screen shows it, the announcement does not repeat it: {text}"
    );
    assert!(text.contains("job 2 ended: exit 0 · "), "{text}");
    let announced = &r["structuredContent"]["announcements"];
    assert_eq!(announced[0]["job"], 2, "the JSON keeps the whole announcement: {r}");
    assert!(announced[0]["last_lines"].to_string().contains("print(6*7)"), "{r}");
}

#[test]
fn a_kept_job_says_once_how_it_ends_in_words_a_model_can_act_on() {
    let h = Heddle::start();
    let mut b = Bridge::initialized(&h);
    let r = b.tool(2, "run", json!({"cmd": "sleep 30", "keep": "ticker", "yield_ms": 0}));
    let text = r["content"][0]["text"].as_str().unwrap().to_owned();
    let ended = h.client().call("kept.kill", json!({"name": "ticker"}));
    assert_eq!(r["structuredContent"]["kept"], "ticker", "{r}");
    assert_eq!(text.matches("kept as").count(), 1, "one sentence about the keep: {text}");
    assert!(text.contains("the operator ends them with `heddle kept kill ticker`"), "{text}");
    // kept.kill is the socket's method, not a tool the model has.
    assert!(!text.contains("kept.kill"), "{text}");
    assert!(ended.is_ok(), "{ended:?}");
    b.finish();
}

#[test]
fn the_bridge_with_a_cwd_that_does_not_exist_exits_at_once_saying_so() {
    let h = Heddle::start();
    let missing = h.project.join("no-such-dir");
    let out = Command::new(bin_dir().join("heddle"))
        .args(["mcp", "--cwd", missing.to_str().unwrap()])
        .env("HEDDLE_SOCKET", &h.socket)
        .stdin(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(out.stdout.is_empty(), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(stderr.contains(&format!("cwd {} does not exist", missing.display())), "session.open's sentence: {stderr}");
    let d = h.client().call("describe", json!({})).unwrap();
    assert_eq!(d["sessions"].as_array().map(Vec::len), Some(0), "no session was opened: {d}");
}

/// An agent's SDK that times a call out sends `notifications/cancelled` and drops the answer when it
/// comes. The job runs on (observation never cancels), and what the dropped answer reported — the job's
/// end — is announced by the next call instead of being lost. A call that was not cancelled is not
/// announced again.
#[test]
fn a_cancelled_calls_job_is_announced_by_the_next_call() {
    let h = Heddle::start();
    let mut b = Bridge::initialized(&h);
    b.send(
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "run", "arguments": {"cmd": "sleep 0.5; echo slow-done", "yield_ms": 10_000}}})
        .to_string(),
    );
    std::thread::sleep(Duration::from_millis(100));
    // The SDK's timeout: it cancels, then ignores the answer when it comes.
    b.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"timed out"}}"#);
    let dropped = b.reply();
    assert_eq!(dropped["id"], 2, "{dropped}");
    assert!(dropped["result"]["content"][0]["text"].as_str().unwrap().starts_with("exit 0 · "), "{dropped}");
    let next = b.tool(3, "run", json!({"cmd": "echo after"}));
    let text = next["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("job 1 ended: exit 0 · ") && text.contains("  slow-done\n"), "announced: {text}");
    // Answered and not cancelled: not announced again.
    let again = b.tool(4, "run", json!({"cmd": "true"}));
    let text = again["content"][0]["text"].as_str().unwrap();
    assert!(!text.contains(" ended: "), "{text}");
    // A cancellation of a call the connection does not know changes nothing.
    b.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":99}}"#);
    let last = b.tool(5, "run", json!({"cmd": "true"}));
    assert!(!last["content"][0]["text"].as_str().unwrap().contains(" ended: "), "{last}");
    b.finish();
}

/// A client gone before its answer is written (a person's Ctrl-C on `heddle run`, an agent's host that
/// exited mid-call): the answer reported the job's end to nobody, so the session's next call announces it.
#[test]
fn a_job_whose_answer_found_its_client_gone_is_announced_by_the_next_call() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let mut gone = std::os::unix::net::UnixStream::connect(&h.socket).unwrap();
    let req = json!({"jsonrpc": "2.0", "id": 1, "method": "run",
        "params": {"session": s, "cmd": "sleep 0.5; echo unseen-end", "yield_ms": 10_000}});
    std::io::Write::write_all(&mut gone, format!("{req}\n").as_bytes()).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    drop(gone);
    std::thread::sleep(Duration::from_millis(1_000));
    let next = c.call("run", json!({"session": s, "cmd": "true"})).unwrap();
    let announced: Vec<u64> =
        next["announcements"].as_array().unwrap().iter().filter_map(|a| a["job"].as_u64()).collect();
    assert_eq!(announced, [1], "the end its client never read is announced: {next}");
    assert_eq!(next["announcements"][0]["last_lines"], json!(["unseen-end"]), "{next}");
}

/// A session carries its cwd from call to call, so `heddle run` typed in another directory runs where the
/// session left off: the CLI says so on stderr (once it differs), and not when it runs right here.
#[test]
fn heddle_run_typed_in_another_directory_says_where_it_runs() {
    let h = Heddle::start();
    let (a, b) = (h.project.join("a"), h.project.join("b"));
    for d in [&a, &b] {
        std::fs::create_dir(d).unwrap();
        std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    }
    let heddle = |dir: &std::path::Path, cmd: &str| {
        let out = Command::new(bin_dir().join("heddle"))
            .args(["--session", "moved", "run", "--", cmd])
            .current_dir(dir)
            .env("HEDDLE_SOCKET", &h.socket)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{cmd}: {}", String::from_utf8_lossy(&out.stderr));
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (out, err) = heddle(&a, "pwd");
    assert!(out.contains(&format!("\n{}\n", a.display())) && !err.contains("runs in"), "opened here: {out}{err}");
    let (out, err) = heddle(&b, "pwd");
    assert!(out.contains(&format!("\n{}\n", a.display())), "the session's cwd, as before: {out}");
    let told = format!(
        "this runs in {}, where session 'moved' left off, not in this directory ({})",
        a.display(),
        b.display()
    );
    assert!(err.contains(&told) && err.contains(&format!("`cd {} &&`", b.display())), "{err}");
    let (_, err) = heddle(&b, &format!("cd {}", b.display()));
    assert!(err.contains("this runs in"), "still in a when this call starts: {err}");
    let (out, err) = heddle(&b, "pwd");
    assert!(out.contains(&format!("\n{}\n", b.display())) && !err.contains("runs in"), "now here: {out}{err}");
    let (_, err) = heddle(&a, "true");
    assert!(err.contains(&format!("this runs in {}, where", b.display())), "{err}");
}
