//! `heddle-bench persistent`: a named persistent session's `run("true")` round trip through the whole
//! stack (socket → front → ring → worker → the session's one bash → status line → worker → ring → front →
//! socket) against a raw persistent bash over pipes (write `true; echo $?`, read the line back), the
//! floor any persistent shell pays.
//!
//! Variants, interleaved with the baseline in one loop, each after the same pause:
//! - empty state, `true` (the front reads it as changing nothing: a scoped capture);
//! - typical state (20 exported variables, 5 functions, 10 aliases), `true`;
//! - typical state, `eval true` (the front cannot read it: the full capture);
//! - typical state, `true` with `effects: "none"` (no effects ledger: what the ledger adds);
//! - typical state, a 4 KiB command (`true # xxx…`: what the shell pays to read a long script).

use anyhow::{Context, Result};
use heddle_bench::{report, time_us, Summary};
use heddle_tests::{Client, Heddle};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

/// A raw `bash --noprofile --norc` reading commands from a pipe.
struct RawBash {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    line: String,
}

impl RawBash {
    fn start() -> Result<RawBash> {
        let mut child = Command::new("bash")
            .args(["--noprofile", "--norc"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("spawn bash")?;
        let stdin = child.stdin.take().context("bash stdin")?;
        let stdout = BufReader::new(child.stdout.take().context("bash stdout")?);
        Ok(RawBash { child, stdin, stdout, line: String::new() })
    }

    fn call(&mut self) {
        self.stdin.write_all(b"true; echo $?\n").expect("write to bash");
        self.line.clear();
        self.stdout.read_line(&mut self.line).expect("read from bash");
        assert_eq!(self.line, "0\n");
    }
}

impl Drop for RawBash {
    fn drop(&mut self) {
        // Closing its stdin ends the shell; wait for the process this bench started.
        let _ = self.stdin.write_all(b"exit 0\n");
        let _ = self.child.wait();
    }
}

struct Variant {
    name: &'static str,
    params: Value,
    client: Client,
    times: Vec<f64>,
}

impl Variant {
    fn new(h: &Heddle, name: &'static str, setup: &str, cmd: &str, extra: Value) -> Variant {
        let mut client = h.client();
        let r = client.call("session.open", json!({"cwd": h.project, "persistent": true})).expect("session.open");
        assert_eq!(r["persistent"], true, "{r}");
        let session = r["session"].clone();
        let r = heddle_tests::run_to_end(&mut client, &session, setup);
        assert_eq!(r["exit_code"], 0, "{r}");
        let mut params = json!({"session": session, "cmd": cmd});
        if let (Some(p), Some(e)) = (params.as_object_mut(), extra.as_object()) {
            p.extend(e.clone());
        }
        Variant { name, params, client, times: Vec::new() }
    }

    fn call(&mut self) {
        let r = self.client.call("run", self.params.clone()).expect("run");
        assert_eq!(r["exit_code"], 0, "{r}");
        assert!(r["state_note"].is_null(), "{r}");
    }
}

pub fn run(iterations: usize, pause_ms: u64) -> Result<()> {
    let h = Heddle::start();
    let typical = crate::spare::typical_state();
    // A script as agents send them (a heredoc, a loop): the shell reads every byte of it.
    let long = format!("true # {}", "x".repeat(4089));
    let mut variants = [
        Variant::new(&h, "empty state", "true", "true", json!({})),
        Variant::new(&h, "typical state", &typical, "true", json!({})),
        Variant::new(&h, "typical state, full capture", &typical, "eval true", json!({})),
        Variant::new(&h, "typical state, effects none", &typical, "true", json!({"effects": "none"})),
        Variant::new(&h, "typical state, a 4 KiB command", &typical, &long, json!({})),
    ];
    let mut raw = RawBash::start()?;
    let pause = Duration::from_millis(pause_ms);
    let mut bare = Vec::new();
    for i in 0..iterations + 10 {
        std::thread::sleep(pause);
        let t = time_us(|| raw.call());
        if i >= 10 {
            bare.push(t);
        }
        for v in variants.iter_mut() {
            std::thread::sleep(pause);
            let t = time_us(|| v.call());
            if i >= 10 {
                v.times.push(t);
            }
        }
    }
    let base = Summary::of(bare);
    println!("pause before every call: {pause_ms} ms; raw persistent bash p50 {:.1} µs", base.p50);
    for v in &variants {
        report(
            &format!("persistent session run({}), {} vs a raw persistent bash", shown(&v.params["cmd"]), v.name),
            "raw persistent bash over pipes: write `true; echo $?`, read the line",
            base,
            v.name,
            Summary::of(v.times.clone()),
        );
    }
    Ok(())
}

/// A command as the report names it: a long one by its start and length.
fn shown(cmd: &Value) -> String {
    let cmd = cmd.as_str().unwrap_or_default();
    match cmd.len() > 40 {
        true => format!("{:?}… ({} bytes)", &cmd[..12], cmd.len()),
        false => format!("{cmd:?}"),
    }
}
