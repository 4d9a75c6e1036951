//! Output-path benchmarks (issue 6): throughput into the store vs a raw pipe, capture latency to a
//! subscriber vs a Unix-socket hop and a direct pipe, and model-view rendering cost vs a copy + line
//! split. Each figure is printed next to its baseline measured in the same run.

use anyhow::{ensure, Context, Result};
use heddle_bench::{report, Summary};
use serde_json::json;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

fn now_us() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64() * 1e6)
}

/// `head -c <bytes> /dev/zero | tr '\0' a` through heddle into the store vs read from a pipe by us.
pub fn throughput(mib: u64, rounds: usize) -> Result<()> {
    let bytes = mib << 20;
    let cmd = format!("head -c {bytes} /dev/zero | tr '\\0' a");
    let h = heddle_tests::Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let (mut pipe, mut heddle) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let t = Instant::now();
        let mut child =
            Command::new("bash").args(["--noprofile", "--norc", "-c", &cmd]).stdout(Stdio::piped()).spawn()?;
        let mut out = child.stdout.take().context("stdout")?;
        let mut buf = vec![0u8; 1 << 20];
        let mut got = 0u64;
        loop {
            let n = out.read(&mut buf)?;
            if n == 0 {
                break;
            }
            got += n as u64;
        }
        child.wait()?;
        ensure!(got == bytes, "pipe read {got} of {bytes}");
        pipe.push(bytes as f64 / t.elapsed().as_secs_f64() / 1e9);
        let t = Instant::now();
        let r = c.call("run", json!({"session": s, "cmd": cmd, "yield_ms": 600_000}))?;
        let r = if r["settled"] == true { r } else { c.call("wait", json!({"session": s, "job": r["job"]}))? };
        ensure!(r["stdout_bytes"].as_u64() == Some(bytes), "heddle stored {} of {bytes}", r["stdout_bytes"]);
        heddle.push(bytes as f64 / t.elapsed().as_secs_f64() / 1e9);
    }
    let (p, hd) = (Summary::of(pipe), Summary::of(heddle));
    println!("== throughput, {mib} MiB of 'a' per round, {rounds} rounds (GB/s, p50)");
    println!("{:<52} {:>8.3}", "raw pipe: bash → pipe → this process", p.p50);
    println!("{:<52} {:>8.3}", "heddle: job → worker → ring → front → store (run)", hd.p50);
    println!("{:<52} {:>8.3}", "ratio heddle / pipe (target ≥ 0.5)", hd.p50 / p.p50);
    let figure = format!("throughput into the store, {mib} MiB of 'a' (run)");
    heddle_bench::record(&figure, "the same bytes from a pipe", p.p50, hd.p50, None, "GB/s");
    Ok(())
}

/// The stamping job: one line per ~2 ms. It waits with `read -t` on a pipe that never gets data rather
/// than with `sleep`: forking and starting `sleep` right after every line took a quarter of the 2 cores
/// (perf) at the very moment the line travels, which measured the job's own fork, not the capture.
const STAMPER: &str =
    r#"exec 9<> <(:); for ((i = 0; i < N; i++)); do printf '%s\n' "$EPOCHREALTIME"; read -t 0.002 -u 9; done"#;

fn stamp_latency(line: &str, at: f64) -> Option<f64> {
    let t: f64 = line.trim().parse().ok()?;
    Some(at - t * 1e6)
}

/// One `SCHED_IDLE` busy loop pinned to each CPU: a CPU running one never halts, yet any normal task
/// that wakes there preempts it at once. Killed (by pid) when dropped.
struct IdleSpinners(Vec<std::process::Child>);

impl IdleSpinners {
    fn start() -> Result<IdleSpinners> {
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        let mut children = Vec::new();
        for cpu in 0..cpus {
            let child = Command::new("chrt")
                .args(["-i", "0", "taskset", "-c", &cpu.to_string(), "bash", "-c", "while :; do :; done"])
                .spawn()
                .context("starting an idle-priority spinner (chrt, taskset)")?;
            children.push(child);
        }
        println!("(experiment: {cpus} idle-priority spinners keep every CPU from halting)");
        Ok(IdleSpinners(children))
    }
}

impl Drop for IdleSpinners {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The pipe baseline: the stamping loop writing `n` lines into a pipe this process reads.
fn pipe_batch(n: usize, out: &mut Vec<f64>) -> Result<()> {
    let script = STAMPER.replace('N', &n.to_string());
    let mut child =
        Command::new("bash").args(["--noprofile", "--norc", "-c", &script]).stdout(Stdio::piped()).spawn()?;
    for line in BufReader::new(child.stdout.take().context("stdout")?).lines() {
        out.extend(stamp_latency(&line?, now_us()));
    }
    child.wait()?;
    Ok(())
}

/// The socket baseline: `n` stamps, one per ~2 ms, over one Unix-socket hop between two threads.
fn socket_batch(n: usize, out: &mut Vec<f64>) -> Result<()> {
    let (mut a, b) = std::os::unix::net::UnixStream::pair()?;
    let writer = std::thread::spawn(move || {
        for _ in 0..n {
            let _ = writeln!(a, "{}", now_us() / 1e6);
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    });
    for line in BufReader::new(b).lines().take(n) {
        out.extend(stamp_latency(&line?, now_us()));
    }
    let _ = writer.join();
    Ok(())
}

/// heddle's samples: one stamping job of `n` lines in `session`, every line timed as its notification
/// reaches the subscribed client `sub`. `to_read`: the job's stamp → the worker's read (wall clocks);
/// `read_to_client`: the worker's read → the client (`CLOCK_MONOTONIC` both sides, per chunk).
#[derive(Default)]
pub(crate) struct HeddleSamples {
    pub(crate) total: Vec<f64>,
    pub(crate) to_read: Vec<f64>,
    pub(crate) read_to_client: Vec<f64>,
    pub(crate) to_front: Vec<f64>,
    pub(crate) from_front: Vec<f64>,
}

pub(crate) fn heddle_batch(
    c: &mut heddle_tests::Client,
    sub: &mut heddle_tests::Client,
    s: &serde_json::Value,
    n: usize,
    out: &mut HeddleSamples,
) -> Result<()> {
    let script = STAMPER.replace('N', &n.to_string());
    let job = c.call("run", json!({"session": s, "cmd": script, "yield_ms": 0}))?["job"].clone();
    let mut partial = String::new();
    let mut got = 0;
    loop {
        let note = sub.next_notification()?;
        let at = now_us();
        let at_mono = shm_proto::sys::monotonic_ns();
        match note["method"].as_str() {
            Some("output") if note["params"]["job"] == job => {
                let p = &note["params"];
                partial.push_str(p["data"].as_str().unwrap_or(""));
                let pumped = p["at_unix_ns"].as_f64().unwrap_or(0.0) / 1e3;
                let (Some(read_mono), Some(read_unix)) = (p["read_mono_ns"].as_u64(), p["read_unix_ns"].as_u64())
                else {
                    anyhow::bail!("a live chunk without the worker's read time: {note}");
                };
                out.read_to_client.push(at_mono.saturating_sub(read_mono) as f64 / 1e3);
                while let Some(i) = partial.find('\n') {
                    out.total.extend(stamp_latency(&partial[..i], at));
                    out.to_read.extend(stamp_latency(&partial[..i], read_unix as f64 / 1e3));
                    out.to_front.extend(stamp_latency(&partial[..i], pumped));
                    out.from_front.push(at - pumped);
                    got += 1;
                    partial.drain(..=i);
                }
            }
            Some("job.settled") if note["params"]["job"] == job => break,
            _ => {}
        }
    }
    ensure!(got == n, "received {got} of {n} stamps");
    Ok(())
}

/// A job prints `$EPOCHREALTIME` every ~2 ms; a subscribed client measures receive time − that stamp.
/// The baselines (the same loop into a pipe; a socket hop between threads) run in the same rounds of
/// `batch` lines, interleaved with heddle's, so the host's drift hits all three alike.
/// With `idle_spinners`, every CPU runs an idle-priority busy loop meanwhile (see [`IdleSpinners`]).
pub fn latency(n: usize, batch: usize, idle_spinners: bool) -> Result<()> {
    let _spinners = if idle_spinners { Some(IdleSpinners::start()?) } else { None };
    let h = heddle_tests::Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let mut sub = h.client();
    sub.call("subscribe", json!({"session": s, "raw": true}))?;
    let (mut pipe, mut sock) = (Vec::new(), Vec::new());
    let mut hd = HeddleSamples::default();
    let batch = batch.max(1);
    let mut left = n;
    while left > 0 {
        let k = batch.min(left);
        pipe_batch(k, &mut pipe)?;
        socket_batch(k, &mut sock)?;
        heddle_batch(&mut c, &mut sub, &s, k, &mut hd)?;
        left -= k;
    }
    let show = |name: &str, s: Summary| println!("{name:<48} {:>9.1} {:>9.1} {:>9.1}", s.p50, s.p99, s.p999);
    println!("== capture latency: write → visible to the reader (µs), n = {n}, one line per ~2 ms, rounds of {batch}");
    println!("{:<48} {:>9} {:>9} {:>9}", "", "p50", "p99", "p99.9");
    let (p, so, total) = (Summary::of(pipe), Summary::of(sock), Summary::of(hd.total));
    show("baseline: Unix socket hop (thread → thread)", so);
    show("baseline: bash → pipe → this process", p);
    show("heddle: job → ring → front → subscriber socket", total);
    show("  of which job → worker read (pipe)", Summary::of(hd.to_read));
    show("  of which job → worker → ring → front pump", Summary::of(hd.to_front));
    show("  of which front pump → subscriber", Summary::of(hd.from_front));
    let read_to_client = Summary::of(hd.read_to_client);
    show("heddle alone: worker read → subscriber (per chunk)", read_to_client);
    let (r50, r99, r999) = (total.p50 / p.p50, total.p99 / p.p99, total.p999 / p.p999);
    println!("{:<48} {r50:>9.2} {r99:>9.2} {r999:>9.2}", "ratio heddle / pipe");
    let figure = "capture latency: a job's line → subscribed client";
    heddle_bench::record(figure, "bash → pipe → reader", p.p50, total.p50, Some(r99), "µs");
    heddle_bench::record(figure, "Unix-socket hop, thread → thread", so.p50, total.p50, Some(total.p99 / so.p99), "µs");
    let figure = "capture latency: worker's read → subscribed client";
    heddle_bench::record(
        figure,
        "Unix-socket hop, thread → thread",
        so.p50,
        read_to_client.p50,
        Some(read_to_client.p99 / so.p99),
        "µs",
    );
    Ok(())
}

/// Typical build output: compile lines with colours, warnings with source excerpts, `\r` progress.
fn build_output(target: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(target + 4096);
    let mut i = 0usize;
    while out.len() < target {
        i += 1;
        out.extend_from_slice(
            format!("\r\x1b[K\x1b[1m\x1b[32m   Compiling\x1b[0m crate-{i} v0.{}.{}\n", i % 9, i % 31).as_bytes(),
        );
        if i % 7 == 0 {
            out.extend_from_slice(format!("\x1b[1m\x1b[33mwarning\x1b[0m: unused variable: `x{i}`\n  --> src/lib.rs:{i}:9\n   |\n{i:>3} |     let x{i} = compute();\n   |         ^^ help: prefix it with an underscore\n\n").as_bytes());
        }
        for f in 0..3 {
            out.extend_from_slice(
                format!("\x1b[1m\x1b[36m    Building\x1b[0m [{:=>w$}>   ] {i}/{}: crate-{i}", "", 9999, w = f + 1)
                    .as_bytes(),
            );
            out.push(b'\r');
        }
    }
    out
}

/// Rendering cost per MiB of build output vs copying it and splitting it into lines.
pub fn view(mib: usize, rounds: usize) -> Result<()> {
    let data = build_output(mib << 20);
    let dir = tempfile::tempdir()?;
    let (mut base, mut render) = (Vec::new(), Vec::new());
    for r in 0..rounds {
        let t = Instant::now();
        let mut copy = Vec::with_capacity(data.len());
        let mut lines = 0usize;
        for chunk in data.chunks(64 * 1024) {
            copy.extend_from_slice(chunk);
            lines += chunk.iter().filter(|&&b| b == b'\n').count();
        }
        std::hint::black_box((&copy, lines));
        base.push(t.elapsed().as_secs_f64() * 1e6 / mib as f64);
        let t = Instant::now();
        let mut out = front::output::rendered::RenderedOutput::new(dir.path().join(format!("{r}.lines")));
        for chunk in data.chunks(64 * 1024) {
            out.push(0, chunk);
        }
        out.finish();
        let v = front::output::view::render(&out, front::output::view::DEFAULT_BUDGET, "bench", 1);
        std::hint::black_box(v);
        render.push(t.elapsed().as_secs_f64() * 1e6 / mib as f64);
    }
    report(
        &format!("model-view rendering of {mib} MiB of build output (µs per MiB)"),
        "baseline: copy + newline count",
        Summary::of(base),
        "vte screen + redaction + line log + view",
        Summary::of(render),
    );
    Ok(())
}
