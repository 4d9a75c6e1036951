//! `heddle-bench memory`: what an ended job costs the front. One session runs N jobs, each printing
//! 3,000 lines of 35 bytes and waited for; the front's VmRSS (`/proc/<front pid>/status`, the pid from
//! `describe`) is read before and after, and the growth per ended job is set against the job's rendered
//! output (what the front would hold if it kept an ended job's lines in memory). `describe`'s
//! `output_held_bytes` (the front's own estimate of the heap its jobs hold) is reported beside it. Then
//! the session is closed and the front's VmRSS read again for 3 s: what it kept of the growth.
//! The stack is started from the binaries beside `heddle-bench`: a copy of it next to an older build's
//! binaries measures that build (whose `describe` may not report `output_held_bytes`).

use anyhow::{Context, Result};
use heddle_bench::record;
use serde_json::{json, Value};

/// The length of each line a job prints, with its newline.
const LINE_BYTES: usize = 35;
/// Jobs run before the first reading, so the allocator's and the session's one-off costs are paid.
const WARMUP: usize = 20;

fn vm_rss_kib(pid: u64) -> Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).context("reading the front's status")?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).context("no VmRSS line")?;
    let kib = line.split_whitespace().nth(1).context("no VmRSS value")?;
    Ok(kib.parse::<f64>()?)
}

/// The session's `output_held_bytes` once every job's streams closed (it stops moving); `None` from a
/// front that does not report it (an older build, run as a baseline).
fn held_bytes(c: &mut heddle_tests::Client, s: &Value) -> Result<Option<u64>> {
    let mut last = None;
    for _ in 0..100 {
        let d = c.call("describe", json!({"session": s}))?;
        let Some(held) = d["sessions"][0]["output_held_bytes"].as_u64() else { return Ok(None) };
        if last == Some(held) {
            break;
        }
        last = Some(held);
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Ok(last)
}

pub fn run(jobs: usize, lines: usize, tty: bool) -> Result<()> {
    let h = heddle_tests::Heddle::start();
    let mut c = h.client();
    let front = c.call("describe", json!({}))?["front"]["pid"].as_u64().context("describe gave no front pid")?;
    let s = h.open_session(&mut c);
    let cmd = match lines {
        0 => "true".to_owned(),
        n => format!("seq -f 'line %08g of some build output' 1 {n}"),
    };
    let run = |c: &mut heddle_tests::Client| -> Result<()> {
        let mut p = json!({"session": s, "cmd": cmd, "yield_ms": 60_000});
        if tty {
            p["tty"] = json!({"rows": 24, "cols": 80});
        }
        let r = c.call("run", p)?;
        // A terminal ends each line with `\r\n`.
        let bytes = lines * (LINE_BYTES + usize::from(tty));
        anyhow::ensure!(r["exit_code"] == 0 && r["stdout_bytes"] == bytes, "{r}");
        Ok(())
    };
    for _ in 0..WARMUP {
        run(&mut c)?;
    }
    let held_before = held_bytes(&mut c, &s)?;
    let before = vm_rss_kib(front)?;
    for _ in 0..jobs {
        run(&mut c)?;
    }
    let held_after = held_bytes(&mut c, &s)?;
    let after = vm_rss_kib(front)?;
    let per_job = (after - before) / jobs as f64;
    let rendered = (lines * LINE_BYTES) as f64 / 1024.0;
    let on = if tty { " on a 24×80 terminal" } else { "" };
    println!("== memory: {jobs} ended jobs of {lines} lines × {LINE_BYTES} bytes{on} (after {WARMUP} warm-up jobs)");
    println!("front VmRSS: {before:.0} KiB before, {after:.0} KiB after: {per_job:.2} KiB per ended job");
    let held_per_job = match (held_before, held_after) {
        (Some(b), Some(a)) => {
            let per = a.saturating_sub(b) as f64 / jobs as f64 / 1024.0;
            println!("describe output_held_bytes: {b} before, {a} after: {per:.2} KiB per ended job");
            Some(per)
        }
        _ => {
            println!("describe output_held_bytes: not reported by this front");
            None
        }
    };
    println!("one job's rendered output: {rendered:.1} KiB");
    let base = "the job's rendered lines, KiB";
    let figure = |what: &str| format!("{what} per ended {lines}-line job{on}, KiB");
    if lines > 0 {
        record(&figure("front VmRSS growth"), base, rendered, per_job, None, "KiB");
        if let Some(held) = held_per_job {
            record(&figure("describe output_held_bytes"), base, rendered, held, None, "KiB");
        }
    }
    // What a job let go from memory costs to look at: `wait` on the session's first job (on disk once
    // the session ran more than its window) against its newest (held), interleaved.
    let (first, newest) = (WARMUP as u64 / 2, (WARMUP + jobs) as u64);
    let in_memory = c.call("describe", json!({"session": s}))?["sessions"][0]["jobs_in_memory"].as_u64();
    let mut samples = [Vec::new(), Vec::new()];
    for _ in 0..300 {
        for (i, job) in [first, newest].into_iter().enumerate() {
            let t = std::time::Instant::now();
            let r = c.call("wait", json!({"session": s, "job": job, "yield_ms": 0}))?;
            samples[i].push(t.elapsed().as_secs_f64() * 1e6);
            anyhow::ensure!(r["exit_code"] == 0, "{r}");
        }
    }
    let p50 = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (old, new) = (p50(&mut samples[0]), p50(&mut samples[1]));
    println!(
        "wait on job {first} (the session holds {} of its {} jobs in memory) {old:.0} µs p50, on job {newest} {new:.0} µs",
        in_memory.map_or("?".to_owned(), |n| n.to_string()),
        WARMUP + jobs
    );
    record(
        &format!("wait on an ended job of {lines} lines let go from memory (job {first} of {})", WARMUP + jobs),
        "wait on the newest job (held)",
        new,
        old,
        None,
        "µs",
    );
    // The listing reads every job back (those on disk decoded one by one, under the session's lock).
    let mut listing = Vec::new();
    for _ in 0..20 {
        let t = std::time::Instant::now();
        // Every job, not the first page (`limit`): the listing's cost over the whole session.
        let r = c.call("jobs", json!({"session": s, "announce": false, "limit": 10_000}))?;
        listing.push(t.elapsed().as_secs_f64() * 1e3);
        anyhow::ensure!(r["jobs"].as_array().map(Vec::len) == Some(WARMUP + jobs), "{r}");
    }
    let listed = p50(&mut listing);
    println!(
        "jobs listing of {} jobs: {listed:.1} ms p50 ({:.1} µs a job)",
        WARMUP + jobs,
        listed * 1e3 / (WARMUP + jobs) as f64
    );
    heddle_bench::note(format!("memory: the jobs listing of {} jobs took {listed:.1} ms p50", WARMUP + jobs));
    // What closing the session gives back (the front trims its heap once a session is let go: a
    // second or so later, on its retention thread).
    c.call("session.close", json!({"session": s}))?;
    let mut closed = vm_rss_kib(front)?;
    for _ in 0..30 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        closed = closed.min(vm_rss_kib(front)?);
    }
    let kept = (closed - before).max(0.0);
    println!(
        "after the session closed: {closed:.0} KiB, {:.0}% of the growth given back",
        if after > before { 100.0 * (after - closed) / (after - before) } else { 100.0 }
    );
    record(
        &format!("front VmRSS kept after closing a session of {jobs} ended jobs, KiB"),
        "the growth while it ran, KiB",
        after - before,
        kept,
        None,
        "KiB",
    );
    heddle_bench::note(format!(
        "memory: front VmRSS {before:.0} → {after:.0} KiB over {jobs} ended jobs of {lines} lines, {closed:.0} KiB \
         after the session closed (pid {front})"
    ));
    Ok(())
}
