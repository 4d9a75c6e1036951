//! `doors`: `run("true")` at an agent's pace (a pause before every call) through each way in — the raw
//! control socket (the baseline), MCP through `heddle mcp` (stdio ↔ socket), and the HTTP door's `/rpc`
//! and `/mcp` — interleaved in one run, each in a session of its own; every door as a ratio of the
//! raw socket's figures.

use anyhow::{Context, Result};
use heddle_bench::{report, time_us, Summary};
use heddle_tests::http::{door_address, HttpConn};
use heddle_tests::{bin_dir, Client, Heddle};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

trait Door {
    fn name(&self) -> &'static str;
    /// One `run("true")`, checked.
    fn call(&mut self);
    /// One `jobs` call (no job started: what the door itself costs), checked.
    fn list(&mut self);
}

struct Socket {
    c: Client,
    s: Value,
    name: &'static str,
}

impl Door for Socket {
    fn name(&self) -> &'static str {
        self.name
    }
    fn call(&mut self) {
        let r = self.c.call("run", json!({"session": self.s, "cmd": "true"})).expect("run");
        assert_eq!(r["exit_code"], 0, "{r}");
    }
    fn list(&mut self) {
        let r = self.c.call("jobs", json!({"session": self.s})).expect("jobs");
        assert!(r["jobs"].is_array(), "{r}");
    }
}

struct StdioMcp {
    /// `heddle mcp --relay`: every message copied through the bridge process.
    relay: bool,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    id: u64,
}

impl StdioMcp {
    fn start(h: &Heddle, relay: bool) -> Result<StdioMcp> {
        let mut child = Command::new(bin_dir().join("heddle"))
            .args(["mcp", "--cwd", h.project.to_str().unwrap_or("/")])
            .args(relay.then_some("--relay"))
            .env("HEDDLE_SOCKET", &h.socket)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("starting heddle mcp")?;
        let stdin = child.stdin.take().context("stdin")?;
        let stdout = BufReader::new(child.stdout.take().context("stdout")?);
        let mut m = StdioMcp { relay, child, stdin, stdout, id: 0 };
        m.ask("initialize", json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}));
        writeln!(m.stdin, "{}", json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
        Ok(m)
    }

    fn ask(&mut self, method: &str, params: Value) -> Value {
        self.id += 1;
        // One write per message, as an agent's host sends it (`writeln!` on an unbuffered pipe is a write
        // per piece the formatter emits: a dozen for a small request).
        let line = format!("{}\n", json!({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params}));
        self.stdin.write_all(line.as_bytes()).expect("write to heddle mcp");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("read from heddle mcp");
        serde_json::from_str(&line).expect("a JSON line")
    }
}

impl Door for StdioMcp {
    fn name(&self) -> &'static str {
        if self.relay {
            "MCP via heddle mcp --relay (stdio, copied)"
        } else {
            "MCP via heddle mcp (stdio, handed over)"
        }
    }
    fn call(&mut self) {
        let r = self.ask("tools/call", json!({"name": "run", "arguments": {"cmd": "true"}}));
        assert_eq!(r["result"]["isError"], false, "{r}");
    }
    fn list(&mut self) {
        let r = self.ask("tools/call", json!({"name": "jobs", "arguments": {}}));
        assert_eq!(r["result"]["isError"], false, "{r}");
    }
}

impl Drop for StdioMcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct HttpRpc {
    c: HttpConn,
    s: Value,
}

impl Door for HttpRpc {
    fn name(&self) -> &'static str {
        "HTTP POST /rpc"
    }
    fn call(&mut self) {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "run", "params": {"session": self.s, "cmd": "true"}});
        let r = self.c.post("/rpc", &[], &body).expect("POST /rpc").json();
        assert_eq!(r["result"]["exit_code"], 0, "{r}");
    }
    fn list(&mut self) {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "jobs", "params": {"session": self.s}});
        let r = self.c.post("/rpc", &[], &body).expect("POST /rpc").json();
        assert!(r["result"]["jobs"].is_array(), "{r}");
    }
}

struct HttpMcp {
    c: HttpConn,
    id: String,
}

impl Door for HttpMcp {
    fn name(&self) -> &'static str {
        "HTTP POST /mcp"
    }
    fn call(&mut self) {
        let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "run", "arguments": {"cmd": "true"}}});
        let r = self.c.post("/mcp", &[("Mcp-Session-Id", &self.id)], &body).expect("POST /mcp").json();
        assert_eq!(r["result"]["isError"], false, "{r}");
    }
    fn list(&mut self) {
        let body =
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "jobs", "arguments": {}}});
        let r = self.c.post("/mcp", &[("Mcp-Session-Id", &self.id)], &body).expect("POST /mcp").json();
        assert_eq!(r["result"]["isError"], false, "{r}");
    }
}

pub fn run(iterations: usize, pause_ms: u64) -> Result<()> {
    let h = Heddle::start_with(&["--http", "127.0.0.1:0"]);
    let addr = door_address(&h.state_dir);
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let mut again = h.client();
    let again_s = h.open_session(&mut again);
    let mut rpc = HttpConn::connect(addr)?;
    let opened = rpc
        .post("/rpc", &[], &json!({"jsonrpc": "2.0", "id": 1, "method": "session.open", "params": {"cwd": h.project}}))?
        .json();
    let mut mcp = HttpConn::connect(addr)?;
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}});
    let r = mcp.post(&format!("/mcp?cwd={}", h.project.display()), &[], &init)?;
    let id = r.header("mcp-session-id").context("no Mcp-Session-Id")?.to_owned();
    let mut doors: Vec<Box<dyn Door>> = vec![
        Box::new(Socket { c, s, name: "raw socket JSON-RPC" }),
        Box::new(StdioMcp::start(&h, false)?),
        Box::new(StdioMcp::start(&h, true)?),
        Box::new(HttpRpc { c: rpc, s: opened["result"]["session"].clone() }),
        Box::new(HttpMcp { c: mcp, id }),
        // The baseline again, last in each round: what a door's place in the round and a session of its
        // own make of the ratio (an A/A control; a door's figure means something only beyond it).
        Box::new(Socket { c: again, s: again_s, name: "raw socket again (A/A control)" }),
    ];
    let pause = Duration::from_millis(pause_ms);
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); doors.len()];
    for i in 0..iterations + 10 {
        for (d, t) in doors.iter_mut().zip(times.iter_mut()) {
            std::thread::sleep(pause);
            let us = time_us(|| d.call());
            if i >= 10 {
                t.push(us);
            }
        }
    }
    // What each door itself costs: a `jobs` call, which starts nothing, ten times as many samples.
    let mut lists: Vec<Vec<f64>> = vec![Vec::new(); doors.len()];
    for i in 0..iterations * 10 + 10 {
        for (d, t) in doors.iter_mut().zip(lists.iter_mut()) {
            std::thread::sleep(pause / 10);
            let us = time_us(|| d.list());
            if i >= 10 {
                t.push(us);
            }
        }
    }
    println!("pause before every call: {pause_ms} ms; each door in a session of its own, calls interleaved");
    let base = Summary::of(times[0].clone());
    for (d, t) in doors.iter().zip(times).skip(1) {
        report(
            &format!("run(\"true\") via {} vs the raw socket", d.name()),
            doors[0].name(),
            base,
            d.name(),
            Summary::of(t),
        );
    }
    println!("`jobs` (starts nothing), pause {} ms, interleaved:", pause_ms / 10);
    let base = Summary::of(lists[0].clone());
    for (d, t) in doors.iter().zip(lists).skip(1) {
        report(&format!("jobs via {} vs the raw socket", d.name()), doors[0].name(), base, d.name(), Summary::of(t));
    }
    Ok(())
}
