//! The HTTP door (`heddle up --http`) through the real stack: JSON-RPC on `/rpc`, event streams that
//! resume without losing a chunk, the uid every request acts as (the socket's owner on loopback, a
//! bearer token otherwise), MCP's streamable HTTP on `/mcp` (raw and through the official Python SDK),
//! and bad input refused while the door keeps serving.

use heddle_tests::http::{door_address, HttpConn, Response};
use heddle_tests::{eventually, Heddle};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

fn door() -> (Heddle, SocketAddr) {
    let h = Heddle::start_with(&["--http", "127.0.0.1:0"]);
    let addr = door_address(&h.state_dir);
    (h, addr)
}

fn rpc(c: &mut HttpConn, method: &str, params: Value) -> Value {
    let r = c.post("/rpc", &[], &json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})).unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

#[test]
fn json_rpc_over_post_rpc_and_bad_input_refused() {
    let (h, addr) = door();
    let mut c = HttpConn::connect(addr).unwrap();
    let opened = rpc(&mut c, "session.open", json!({"cwd": h.project}));
    let s = opened["result"]["session"].clone();
    assert!(s.is_string(), "{opened}");
    let r = rpc(&mut c, "run", json!({"session": s, "cmd": "echo hello over http; pwd"}));
    assert_eq!(r["result"]["exit_code"], 0, "{r}");
    let text = r["result"]["view"].to_string();
    assert!(text.contains("hello over http") && text.contains(h.project.to_str().unwrap()), "{r}");

    // Malformed JSON: the JSON-RPC parse error, as on the socket.
    let r = c.request("POST", "/rpc", &[("Content-Type", "application/json")], b"{not json").unwrap();
    assert_eq!((r.status, r.json()["error"]["code"].clone()), (200, json!(-32700)), "{}", r.text());
    // A notification has no answer.
    let r = c.post("/rpc", &[], &json!({"jsonrpc": "2.0", "method": "describe", "params": {}})).unwrap();
    assert_eq!(r.status, 202, "{}", r.text());
    // Over the limit: 413 with a sentence, read from the declared length before the body is taken.
    let mut big = HttpConn::connect(addr).unwrap();
    let r = big.request_declared("/rpc", 17 << 20, b"{").unwrap();
    assert_eq!(r.status, 413, "{}", r.text());
    assert!(r.text().contains("send smaller requests"), "{}", r.text());
    let r = c.request("GET", "/nowhere", &[], b"").unwrap();
    assert_eq!(r.status, 404);
    assert!(r.text().contains("POST /rpc"), "{}", r.text());
    // A page of another origin cannot drive a loopback door (DNS rebinding).
    let padded = json!({"jsonrpc": "2.0", "id": 2, "method": "describe", "params": {"pad": "x".repeat(200 << 10)}});
    let r = c.post("/rpc", &[("Origin", "http://evil.example")], &padded).unwrap();
    assert_eq!(r.status, 403, "{}", r.text());
    // And the door keeps serving, on the same connection too (a refused body is read and dropped).
    let r = rpc(&mut c, "jobs", json!({"session": s}));
    assert!(r["result"]["jobs"].as_array().is_some_and(|j| !j.is_empty()), "{r}");
}

/// Read events until `stop` says so (or the stream ends); returns them.
fn read_events(
    ev: &mut heddle_tests::http::Events,
    mut stop: impl FnMut(&[heddle_tests::http::Event]) -> bool,
) -> Vec<heddle_tests::http::Event> {
    let mut got = Vec::new();
    while let Some(e) = ev.next_event().unwrap() {
        got.push(e);
        if stop(&got) {
            break;
        }
    }
    got
}

fn stdout_of(events: &[heddle_tests::http::Event]) -> String {
    events
        .iter()
        .filter(|e| e.event == "output")
        .map(|e| serde_json::from_str::<Value>(&e.data).unwrap())
        .filter(|d| d["stream"] == "stdout")
        .map(|d| d["data"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn an_event_stream_resumed_with_last_event_id_loses_and_repeats_no_chunk() {
    let (h, addr) = door();
    let mut c = HttpConn::connect(addr).unwrap();
    let s = rpc(&mut c, "session.open", json!({"cwd": h.project}))["result"]["session"].clone();
    let r = rpc(
        &mut c,
        "run",
        json!({"session": s, "cmd": "for i in $(seq 1 60); do echo line$i; sleep 0.03; done", "yield_ms": 0}),
    );
    let job = r["result"]["job"].as_u64().unwrap();
    let path = format!("/events?session={}&job={job}", s.as_str().unwrap());

    let mut first = HttpConn::connect(addr).unwrap().events(&path, &[]).unwrap();
    assert_eq!(first.status, 200, "{}", String::from_utf8_lossy(&first.body));
    let a = read_events(&mut first, |got| stdout_of(got).lines().count() >= 10);
    let last_id = a.iter().rev().find_map(|e| e.id.clone()).expect("events carry ids");
    drop(first);
    // Output goes on while nobody listens: wait until the job wrote well past what the first reader saw.
    let seen = stdout_of(&a).len() as u64;
    let went_on = heddle_tests::eventually(Duration::from_secs(10), || {
        let w = rpc(&mut c, "wait", json!({"session": s, "job": job, "yield_ms": 0}));
        w["result"]["stdout_bytes"].as_u64().is_some_and(|n| n >= seen + 50)
    });
    assert!(went_on, "the job wrote more while nobody listened");
    let mut second = HttpConn::connect(addr).unwrap().events(&path, &[("Last-Event-ID", &last_id)]).unwrap();
    assert_eq!(second.status, 200);
    let b = read_events(&mut second, |got| got.last().is_some_and(|e| e.event == "job.settled"));
    assert!(b.iter().any(|e| e.event == "job.end"), "the end is told: {b:?}");
    assert_eq!(b.last().map(|e| e.event.as_str()), Some("job.settled"));
    assert!(second.next_event().unwrap().is_none(), "the stream ends once the job settled");
    let all = stdout_of(&a) + &stdout_of(&b);
    let want: String = (1..=60).map(|i| format!("line{i}\n")).collect();
    assert_eq!(all, want, "every line exactly once across the reconnect");
    // Each chunk carries the time it was written.
    let d: Value = serde_json::from_str(&b.iter().find(|e| e.event == "output").unwrap().data).unwrap();
    assert!(d["at_unix_ns"].as_u64().unwrap() > 1_600_000_000_000_000_000, "{d}");
    // The chunks written while nobody listened are replayed from the store, which does not keep their
    // read time: `null`. The live ones after them carry the worker's read time.
    let reads: Vec<Option<u64>> = b
        .iter()
        .filter(|e| e.event == "output")
        .map(|e| serde_json::from_str::<Value>(&e.data).unwrap()["read_mono_ns"].as_u64())
        .collect();
    let live_from = reads.iter().position(Option::is_some).expect("live chunks carry read_mono_ns");
    assert!(live_from > 0 && reads[live_from..].iter().all(Option::is_some), "{reads:?}");

    // Another stream of an unknown job is refused with a sentence.
    let bad = HttpConn::connect(addr)
        .unwrap()
        .events(&format!("/events?session={}&job=99", s.as_str().unwrap()), &[])
        .unwrap();
    assert_eq!(bad.status, 404, "{}", String::from_utf8_lossy(&bad.body));
}

/// Run `curl` as uid 65534 (nobody) posting `body` to `url`; returns its stdout.
fn curl_as_nobody(url: &str, headers: &[&str], body: &Value) -> String {
    let mut cmd = Command::new("curl");
    cmd.args(["-s", "-X", "POST", url, "-H", "Content-Type: application/json", "--data-binary"]).arg(body.to_string());
    for h in headers {
        cmd.args(["-H", h]);
    }
    let out = cmd.uid(65534).gid(65534).current_dir("/").output().expect("curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn another_local_uid_acts_as_itself_and_cannot_see_roots_sessions() {
    let (h, addr) = door();
    let mut c = HttpConn::connect(addr).unwrap();
    let s = rpc(&mut c, "session.open", json!({"cwd": h.project, "name": "roots"}))["result"]["session"].clone();
    assert_eq!(s, "roots");
    let url = format!("http://{addr}/rpc");
    let theirs = curl_as_nobody(
        &url,
        &[],
        &json!({"jsonrpc": "2.0", "id": 1, "method": "jobs", "params": {"session": "roots"}}),
    );
    let v: Value = serde_json::from_str(&theirs).unwrap_or_else(|e| panic!("{e}: {theirs}"));
    assert!(v["error"].is_object(), "nobody must not read root's session: {v}");
    let theirs = curl_as_nobody(
        &url,
        &[],
        &json!({"jsonrpc": "2.0", "id": 1, "method": "run", "params": {"session": "roots", "cmd": "id -u"}}),
    );
    assert!(serde_json::from_str::<Value>(&theirs).unwrap()["error"].is_object(), "{theirs}");
    // Its own session runs as itself.
    let opened = curl_as_nobody(
        &url,
        &[],
        &json!({"jsonrpc": "2.0", "id": 1, "method": "session.open", "params": {"cwd": h.project}}),
    );
    let own = serde_json::from_str::<Value>(&opened).unwrap()["result"]["session"].clone();
    assert!(own.is_string(), "{opened}");
    let ran = curl_as_nobody(
        &url,
        &[],
        &json!({"jsonrpc": "2.0", "id": 2, "method": "run", "params": {"session": own, "cmd": "id -u"}}),
    );
    assert!(ran.contains("65534"), "{ran}");
    // Root does not see nobody's session in its own listing either: sessions are per uid.
    let d = rpc(&mut c, "describe", json!({}));
    let names: Vec<&Value> = d["result"]["sessions"].as_array().unwrap().iter().map(|s| &s["session"]).collect();
    assert!(names.contains(&&json!("roots")), "{d}");
}

fn token_dir(h: &Heddle) -> PathBuf {
    let dir = h.dir.path().join("tokens");
    std::fs::create_dir(&dir).unwrap();
    for (name, token, uid) in
        [("root", "root-token-0123456789abcdef", 0), ("nobody", "nobody-token-0123456789abcdef", 65534)]
    {
        let p = dir.join(name);
        std::fs::write(&p, format!("{token}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::chown(&p, Some(uid), Some(uid)).unwrap();
    }
    // Readable by others: not a token.
    let loose = dir.join("loose");
    std::fs::write(&loose, "loose-token-0123456789abcdef\n").unwrap();
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o644)).unwrap();
    dir
}

#[test]
fn with_a_token_dir_every_request_needs_a_valid_token() {
    let mut h = Heddle::start();
    let dir = token_dir(&h);
    h.restart(&["--http", "127.0.0.1:0", "--http-token-dir", dir.to_str().unwrap()]);
    let addr = door_address(&h.state_dir);
    let mut c = HttpConn::connect(addr).unwrap();
    let call =
        json!({"jsonrpc": "2.0", "id": 1, "method": "session.open", "params": {"cwd": h.project, "name": "tok"}});
    let r = c.post("/rpc", &[], &call).unwrap();
    assert_eq!(r.status, 401, "{}", r.text());
    assert!(r.text().contains("Authorization: Bearer"), "{}", r.text());
    for bad in ["Bearer wrong-token-0123456789abcdef", "Bearer loose-token-0123456789abcdef", "Basic cm9vdDpyb290"] {
        let r = c.post("/rpc", &[("Authorization", bad)], &call).unwrap();
        assert_eq!(r.status, 401, "{bad}: {}", r.text());
    }
    let root = ("Authorization", "Bearer root-token-0123456789abcdef");
    let r = c.post("/rpc", &[root], &call).unwrap();
    assert_eq!(r.json()["result"]["session"], "tok", "{}", r.text());
    // nobody's token acts as nobody, whoever holds the socket: root's session is not its.
    let nobody = ("Authorization", "Bearer nobody-token-0123456789abcdef");
    let r = c
        .post("/rpc", &[nobody], &json!({"jsonrpc": "2.0", "id": 2, "method": "jobs", "params": {"session": "tok"}}))
        .unwrap();
    assert!(r.json()["error"].is_object(), "{}", r.text());
    let r = c
        .post(
            "/rpc",
            &[nobody],
            &json!({"jsonrpc": "2.0", "id": 3, "method": "session.open", "params": {"cwd": h.project}}),
        )
        .unwrap();
    let s = r.json()["result"]["session"].clone();
    let r = c
        .post(
            "/rpc",
            &[nobody],
            &json!({"jsonrpc": "2.0", "id": 4, "method": "run", "params": {"session": s, "cmd": "id -u"}}),
        )
        .unwrap();
    assert!(r.text().contains("65534"), "{}", r.text());

    // The cockpit's reads are requests like any: nothing without a token, the uid's own with one.
    let r = c
        .post(
            "/rpc",
            &[root],
            &json!({"jsonrpc": "2.0", "id": 5, "method": "run", "params": {"session": "tok", "cmd": "echo cockpit-line", "yield_ms": 20_000}}),
        )
        .unwrap();
    let job = r.json()["result"]["job"].as_u64().unwrap_or_else(|| panic!("{}", r.text()));
    for path in ["job", "model", "screen"] {
        let path = format!("/cockpit/{path}?session=tok&job={job}");
        let r = c.request("GET", &path, &[], b"").unwrap();
        assert_eq!(r.status, 401, "{path} without a token: {}", r.text());
        assert!(!r.text().contains("cockpit-line"), "{path}: {}", r.text());
        let r = c.request("GET", &path, &[nobody], b"").unwrap();
        assert_eq!(r.status, 404, "{path} with nobody's token: {}", r.text());
    }
    let r = c.request("GET", "/cockpit/sessions", &[], b"").unwrap();
    assert_eq!(r.status, 401, "{}", r.text());
    let r = c.request("GET", &format!("/cockpit/job?session=tok&job={job}"), &[root], b"").unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("cockpit-line"), "{}", r.text());
}

fn mcp(c: &mut HttpConn, session: Option<&str>, v: Value) -> Response {
    let mut h = vec![("Accept", "application/json, text/event-stream")];
    if let Some(s) = session {
        h.push(("Mcp-Session-Id", s));
    }
    c.post("/mcp", &h, &v).unwrap()
}

#[test]
fn mcp_streamable_http_sessions_by_header() {
    let (h, addr) = door();
    let mut c = HttpConn::connect(addr).unwrap();
    let path = format!("/mcp?cwd={}", h.project.display());
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    let r = c.post(&path, &[], &init).unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    let id = r.header("mcp-session-id").expect("a session id at initialize").to_owned();
    // An attach that fails (a policy that does not exist) is the initialize's error, and no session.
    let bad = c.post("/mcp?policy=no-such-policy", &[], &init).unwrap();
    assert!(bad.header("mcp-session-id").is_none(), "{}", bad.text());
    assert_eq!(
        (bad.json()["id"].clone(), bad.json()["error"]["message"].is_string()),
        (json!(1), true),
        "{}",
        bad.text()
    );
    assert_eq!(r.json()["result"]["serverInfo"]["name"], "heddle");
    let r = mcp(&mut c, Some(&id), json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    assert_eq!(r.status, 202);
    let r = mcp(
        &mut c,
        Some(&id),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "run", "arguments": {"cmd": "cd /tmp; pwd"}}}),
    );
    assert_eq!(r.json()["result"]["isError"], false, "{}", r.text());
    let r = mcp(
        &mut c,
        Some(&id),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "run", "arguments": {"cmd": "pwd"}}}),
    );
    assert!(
        r.json()["result"]["content"][0]["text"].as_str().unwrap().contains("/tmp"),
        "the session carries cd: {}",
        r.text()
    );
    // Another uid presenting the id finds nothing.
    let theirs = curl_as_nobody(
        &format!("http://{addr}/mcp"),
        &[&format!("Mcp-Session-Id: {id}")],
        &json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"}),
    );
    assert!(theirs.contains("initialize again"), "{theirs}");
    // Without an id, only initialize; GET offers no stream.
    let r = mcp(&mut c, None, json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list"}));
    assert_eq!(r.status, 400, "{}", r.text());
    let r = c.request("GET", "/mcp", &[], b"").unwrap();
    assert_eq!(r.status, 405);
    let r = c.request("DELETE", "/mcp", &[("Mcp-Session-Id", &id)], b"").unwrap();
    assert_eq!(r.status, 204, "{}", r.text());
    let r = mcp(&mut c, Some(&id), json!({"jsonrpc": "2.0", "id": 6, "method": "tools/list"}));
    assert_eq!(r.status, 404, "{}", r.text());
    // The heddle session outlives the MCP session (it was not attached with close_on_exit).
    let d = rpc(&mut c, "describe", json!({}));
    assert_eq!(d["result"]["sessions"].as_array().map(Vec::len), Some(1), "{d}");
}

#[test]
fn an_mcp_initialize_with_a_bad_query_is_refused_at_once_and_opens_no_session() {
    let (h, addr) = door();
    let mut c = HttpConn::connect(addr).unwrap();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    // A typo in a query parameter: refused with a sentence naming it and the parameters there are.
    let r = c.post(&format!("/mcp?cwd={}&sesion=typo", h.project.display()), &[], &init).unwrap();
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.header("mcp-session-id").is_none(), "{}", r.text());
    assert!(
        r.text().contains("\"sesion\"") && r.text().contains("session, cwd, close_on_exit, network, policy"),
        "{}",
        r.text()
    );
    // A cwd that does not exist, or is not a directory: the initialize's error, session.open's sentence.
    let missing = h.project.join("no-such-dir");
    let file = h.project.join("a-file");
    std::fs::write(&file, "x").unwrap();
    for (cwd, says) in [(&missing, "does not exist"), (&file, "is not a directory")] {
        let r = c.post(&format!("/mcp?cwd={}", cwd.display()), &[], &init).unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(r.header("mcp-session-id").is_none(), "no session id for a failed attach: {}", r.text());
        let v = r.json();
        let msg = v["error"]["message"].as_str().unwrap_or_default();
        assert!(v["result"].is_null() && msg.contains(&format!("cwd {} {says}", cwd.display())), "{v}");
        assert_eq!(v["id"], 1, "{v}");
    }
    // Nothing was opened by any of them.
    let d = rpc(&mut c, "describe", json!({}));
    assert_eq!(d["result"]["sessions"].as_array().map(Vec::len), Some(0), "{d}");
}

#[test]
fn an_agent_session_through_the_python_sdks_streamable_http_client() {
    let (h, addr) = door();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("mcp/agent_session.py");
    let python = std::env::var_os("HEDDLE_MCP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/mcp-venv/bin/python"));
    assert!(python.exists(), "{} is missing: see tests/tests/mcp.rs", python.display());
    let url = format!("http://{addr}/mcp?cwd={}", h.project.display());
    let out = Command::new(python).arg(&script).arg("-").arg(&h.project).args(["--http", &url]).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the SDK session failed:\n{stdout}\n{stderr}");
    let summary: Value = serde_json::from_str(stdout.lines().last().unwrap_or("")).expect("a JSON summary");
    assert_eq!(summary["server"], "heddle", "{summary}");
    assert_eq!(summary["carried"], true, "{summary}");
    let session = summary["session"].as_str().unwrap();
    // The SDK's DELETE at exit ended the MCP session, not the heddle session.
    assert!(eventually(Duration::from_secs(5), || h.client().call("jobs", json!({"session": session})).is_ok()));
}

#[test]
fn a_restarted_front_takes_the_door_over_and_a_stream_resumes_across_it() {
    let (h, addr) = door();
    let mut c = HttpConn::connect(addr).unwrap();
    let s = rpc(&mut c, "session.open", json!({"cwd": h.project}))["result"]["session"].clone();
    let cmd = "for i in $(seq 1 40); do echo line$i; sleep 0.05; done";
    let job = rpc(&mut c, "run", json!({"session": s, "cmd": cmd, "yield_ms": 0}))["result"]["job"].as_u64().unwrap();
    let path = format!("/events?session={}&job={job}", s.as_str().unwrap());
    let mut first = HttpConn::connect(addr).unwrap().events(&path, &[]).unwrap();
    let a = read_events(&mut first, |got| stdout_of(got).lines().count() >= 5);
    let last_id = a.iter().rev().find_map(|e| e.id.clone()).unwrap();
    let front = |c: &mut HttpConn| rpc(c, "describe", json!({}))["result"]["front"]["pid"].as_u64();
    let old = front(&mut c).expect("the front's pid");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(old as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    // The supervisor kept the socket: the new front answers on the same address.
    assert!(
        eventually(Duration::from_secs(30), || HttpConn::connect(addr)
            .ok()
            .and_then(|mut c| c.post("/rpc", &[], &json!({"jsonrpc": "2.0", "id": 1, "method": "describe"})).ok())
            .and_then(|r| r.json()["result"]["front"]["pid"].as_u64())
            .is_some_and(|p| p != old)),
        "a new front serves the door"
    );
    let mut second = HttpConn::connect(addr).unwrap().events(&path, &[("Last-Event-ID", &last_id)]).unwrap();
    assert_eq!(second.status, 200, "{}", String::from_utf8_lossy(&second.body));
    let b = read_events(&mut second, |got| got.last().is_some_and(|e| e.event == "job.settled"));
    let want: String = (1..=40).map(|i| format!("line{i}\n")).collect();
    assert_eq!(stdout_of(&a) + &stdout_of(&b), want, "every line once across the front's restart");
}

#[test]
fn a_tool_call_with_a_progress_token_streams_progress_and_a_dropped_stream_cancels_nothing() {
    let (h, addr) = door();
    let mut c = HttpConn::connect(addr).unwrap();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    let r = c.post(&format!("/mcp?cwd={}", h.project.display()), &[], &init).unwrap();
    let id = r.header("mcp-session-id").expect("a session id at initialize").to_owned();
    let headers = [("Mcp-Session-Id", id.as_str()), ("Accept", "application/json, text/event-stream")];
    let call = |n: u64, cmd: &str| {
        json!({"jsonrpc": "2.0", "id": n, "method": "tools/call",
               "params": {"name": "run", "arguments": {"cmd": cmd}, "_meta": {"progressToken": format!("p{n}")}}})
    };

    // Progress while the call waits, then the response, on one stream.
    let steps = "for i in 1 2 3 4; do echo step $i; sleep 0.6; done";
    let mut stream = HttpConn::connect(addr).unwrap().post_stream("/mcp", &headers, &call(7, steps)).unwrap();
    assert_eq!(stream.status, 200, "{}", String::from_utf8_lossy(&stream.body));
    let mut messages = Vec::new();
    while let Some(e) = stream.next_event().unwrap() {
        assert_eq!(e.event, "message", "{e:?}");
        let v: Value = serde_json::from_str(&e.data).unwrap();
        let last = v.get("id").is_some();
        messages.push(v);
        if last {
            break;
        }
    }
    let (answer, progress) = messages.split_last().unwrap();
    assert_eq!(answer["id"], 7, "the response ends the stream: {answer}");
    assert!(answer["result"]["content"][0]["text"].as_str().unwrap().starts_with("exit 0"), "{answer}");
    assert!(progress.len() >= 2, "progress came while the call waited: {progress:?}");
    for p in progress {
        assert_eq!((&p["method"], &p["params"]["progressToken"]), (&json!("notifications/progress"), &json!("p7")));
    }
    assert!(progress.iter().any(|p| p["params"]["message"].as_str().unwrap().contains("step")), "{progress:?}");

    // A client that drops the stream mid-call cancels nothing: the job runs to its end.
    let marker = h.project.join("went-on");
    let cmd = format!("echo started; sleep 1.5; touch {}", marker.display());
    let mut dropped = HttpConn::connect(addr).unwrap().post_stream("/mcp", &headers, &call(8, &cmd)).unwrap();
    let first = dropped.next_event().unwrap().expect("a progress message before the drop");
    assert!(first.data.contains("notifications/progress"), "{first:?}");
    drop(dropped);
    assert!(eventually(Duration::from_secs(10), || marker.exists()), "the job went on after its stream was dropped");

    // Without a token (or without accepting a stream) the answer is one JSON body, as before.
    let plain = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "run", "arguments": {"cmd": "echo plain"}}});
    let r = c.post("/mcp", &headers, &plain).unwrap();
    assert_eq!(r.header("content-type"), Some("application/json"), "{}", r.text());
    let r =
        c.post("/mcp", &[("Mcp-Session-Id", id.as_str()), ("Accept", "application/json")], &call(10, "true")).unwrap();
    assert_eq!(r.header("content-type"), Some("application/json"), "{}", r.text());
    assert_eq!(r.json()["id"], 10);
}

#[test]
fn the_http_door_caps_connections_per_uid_with_a_sentence() {
    use std::io::{Read, Write};
    let h = Heddle::start_with(&["--http", "127.0.0.1:0", "--max-connections-per-uid", "20"]);
    let addr = door_address(&h.state_dir);
    // Twenty of root's connections, each answered and kept open.
    let mut held = Vec::new();
    for _ in 0..20 {
        let mut c = HttpConn::connect(addr).unwrap();
        assert_eq!(c.request("GET", "/", &[], b"").unwrap().status, 200);
        held.push(c);
    }
    // The next one is refused with a sentence naming the limit, and closed.
    let refused = || {
        let mut t = std::net::TcpStream::connect(addr).unwrap();
        t.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = write!(t, "GET / HTTP/1.1\r\nHost: {addr}\r\n\r\n");
        let mut answer = String::new();
        let _ = t.read_to_string(&mut answer);
        answer
    };
    let answer = refused();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("20 connections open") && answer.contains("--max-connections-per-uid"), "{answer}");
    // The held ones still work, and one closed gives its place back.
    assert_eq!(held[0].request("GET", "/", &[], b"").unwrap().status, 200);
    drop(held.pop());
    let back = eventually(Duration::from_secs(10), || {
        HttpConn::connect(addr)
            .ok()
            .and_then(|mut c| c.request("GET", "/", &[], b"").ok())
            .is_some_and(|r| r.status == 200)
    });
    assert!(back, "a closed connection's place came back: {}", refused());
}

#[test]
fn a_call_through_the_http_door_leaves_its_database_rows_while_the_connection_stays_open() {
    let (h, addr) = door();
    h.client().call("session.open", json!({"name": "rows", "cwd": h.project})).unwrap();
    // One request on this connection: nothing that follows it could bring the rows up to date instead.
    let mut c = HttpConn::connect(addr).unwrap();
    let ran = rpc(&mut c, "run", json!({"session": "rows", "cmd": "echo hi", "yield_ms": 10000}));
    assert_eq!(ran["result"]["state"], "exited", "{ran}");
    let job = ran["result"]["job"].as_u64().unwrap();
    // The connection stays open and idle: the rows follow the answer, not the connection's end or a later
    // request on it.
    let stored = eventually(Duration::from_secs(10), || h.job_rows("rows", job) == ["exited"]);
    assert!(stored, "one row, saying exited: {:?}", h.job_rows("rows", job));
    drop(c);
}
