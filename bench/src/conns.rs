//! Idle connections: the front's threads and fds with `idle` idle connections open, and a `run("true")`
//! round trip on a raw socket with none and with them open. With `--baseline-bins DIR` (another build's
//! binaries, say the main branch's) both stacks run side by side and the round trips are interleaved, so
//! the ratios compare the two builds in the same run; without it, the ratio is with vs without the idle
//! connections. With `--http`, the stacks serve the HTTP door too and the idle connections are HTTP
//! ones (each served one `POST /rpc` `describe`), and the front's resident memory is reported as well.

use anyhow::{Context, Result};
use heddle_bench::{report, time_us, Summary};
use heddle_tests::http::{door_address, HttpConn};
use heddle_tests::Heddle;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

/// A raw connection: one request line out, one response line in.
struct Raw {
    r: BufReader<UnixStream>,
    w: UnixStream,
    id: u64,
}

impl Raw {
    fn connect(h: &Heddle) -> Result<Raw> {
        let w = UnixStream::connect(&h.socket)?;
        Ok(Raw { r: BufReader::new(w.try_clone()?), w, id: 0 })
    }

    fn call(&mut self, method: &str, params: Value) -> Result<Value> {
        let v = self.answer(method, params)?;
        v.get("result").cloned().with_context(|| format!("{method} failed: {v}"))
    }

    /// The whole response line, result or error.
    fn answer(&mut self, method: &str, params: Value) -> Result<Value> {
        self.id += 1;
        let mut line = json!({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params}).to_string();
        line.push('\n');
        self.w.write_all(line.as_bytes())?;
        let mut back = String::new();
        self.r.read_line(&mut back)?;
        serde_json::from_str(&back).with_context(|| format!("not JSON: {back:?}"))
    }
}

/// One stack under measurement.
struct Stack {
    name: String,
    h: Heddle,
    c: Raw,
    session: Value,
    front: u64,
    idle: Vec<Raw>,
    idle_http: Vec<HttpConn>,
}

impl Stack {
    fn start(name: &str, bins: Option<&Path>, http: bool) -> Result<Stack> {
        let extra: &[&str] = if http { &["--http", "127.0.0.1:0"] } else { &[] };
        let h = match bins {
            Some(b) => Heddle::start_from(b, extra, &[], |_| {}),
            None => Heddle::start_with(extra),
        };
        let mut c = Raw::connect(&h)?;
        let session = c.call("session.open", json!({"cwd": h.project}))?["session"].clone();
        let front = c.call("describe", json!({}))?["front"]["pid"].as_u64().context("front pid")?;
        Ok(Stack { name: name.to_owned(), h, c, session, front, idle: Vec::new(), idle_http: Vec::new() })
    }

    fn run_true(&mut self) -> f64 {
        let (c, s) = (&mut self.c, &self.session);
        time_us(|| {
            let r = c.call("run", json!({"session": s, "cmd": "true"})).expect("run");
            assert_eq!(r["exit_code"], 0, "{r}");
        })
    }

    /// A call the transport answers without the kernel doing work: the socket's own cost.
    fn unknown_method(&mut self) -> f64 {
        let c = &mut self.c;
        time_us(|| {
            let r = c.answer("no.such.method", json!({})).expect("an answer");
            assert_eq!(r["error"]["code"], -32601, "{r}");
        })
    }

    /// (threads, fds, resident KiB) of the front now.
    fn cost(&self) -> (usize, usize, u64) {
        let count = |d: &str| std::fs::read_dir(format!("/proc/{}/{d}", self.front)).map_or(0, |e| e.count());
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.front)).unwrap_or_default();
        let rss = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0);
        (count("task"), count("fd"), rss)
    }

    fn open_idle(&mut self, n: usize, http: bool) -> Result<()> {
        if http {
            let addr = door_address(&self.h.state_dir);
            for _ in 0..n {
                let mut c = HttpConn::connect(addr)?;
                let r = c.post("/rpc", &[], &json!({"jsonrpc": "2.0", "id": 1, "method": "describe", "params": {}}))?;
                anyhow::ensure!(r.status == 200, "POST /rpc answered {}: {}", r.status, r.text());
                self.idle_http.push(c);
            }
            return Ok(());
        }
        for _ in 0..n {
            let mut c = Raw::connect(&self.h)?;
            c.call("describe", json!({}))?;
            self.idle.push(c);
        }
        Ok(())
    }
}

/// Round trips of `call` on every stack, interleaved, `iterations` each.
fn round_trips(stacks: &mut [Stack], iterations: usize, call: fn(&mut Stack) -> f64) -> Vec<Summary> {
    for s in stacks.iter_mut() {
        for _ in 0..20 {
            call(s);
        }
    }
    let mut t: Vec<Vec<f64>> = stacks.iter().map(|_| Vec::new()).collect();
    for _ in 0..iterations {
        for (s, t) in stacks.iter_mut().zip(&mut t) {
            t.push(call(s));
        }
    }
    t.into_iter().map(Summary::of).collect()
}

/// The round trips of `run("true")` and of an unknown method, as (what, summaries per stack).
fn both(stacks: &mut [Stack], iterations: usize) -> [(&'static str, Vec<Summary>); 2] {
    [
        ("run(\"true\")", round_trips(stacks, iterations, Stack::run_true)),
        ("an unknown method (transport only)", round_trips(stacks, iterations, Stack::unknown_method)),
    ]
}

pub fn run(iterations: usize, idle: usize, baseline_bins: Option<&Path>, http: bool) -> Result<()> {
    let mut stacks = Vec::new();
    if let Some(b) = baseline_bins {
        stacks.push(Stack::start(&format!("baseline ({})", b.display()), Some(b), http)?);
    }
    stacks.push(Stack::start("this build", None, http)?);
    let before: Vec<_> = stacks.iter().map(Stack::cost).collect();
    let quiet = both(&mut stacks, iterations);
    for s in &mut stacks {
        s.open_idle(idle, http)?;
    }
    let after: Vec<_> = stacks.iter().map(Stack::cost).collect();
    let loaded = both(&mut stacks, iterations);
    let kind = if http { "HTTP (`POST /rpc`)" } else { "socket" };
    println!("== the front with {idle} idle {kind} connections (each served one `describe`)");
    for (s, ((t0, f0, r0), (t1, f1, r1))) in stacks.iter().zip(before.iter().zip(&after)) {
        println!(
            "{:<44} threads {t0:>5} -> {t1:>5}   fds {f0:>5} -> {f1:>5}   resident {r0:>7} -> {r1:>7} KiB",
            s.name
        );
    }
    let last = stacks.len() - 1;
    for ((what, quiet), (_, loaded)) in quiet.iter().zip(&loaded) {
        if last > 0 {
            let base = &stacks[0].name;
            report(&format!("{what}, raw socket, no idle connections"), base, quiet[0], "this build", quiet[last]);
            let title = format!("{what}, raw socket, {idle} idle connections");
            report(&title, base, loaded[0], "this build", loaded[last]);
        }
        for (i, s) in stacks.iter().enumerate() {
            let title = format!("{}: {what} with {idle} idle connections vs none", s.name);
            report(&title, "no idle connections", quiet[i], &format!("{idle} idle connections"), loaded[i]);
        }
    }
    Ok(())
}
