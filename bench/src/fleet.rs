//! `heddle-bench fleet --sessions N`: a fleet of agents arriving at once. `--parallel` client threads,
//! each on a connection of its own, open N sessions between them, then run one `true` in each (the
//! sessions all open at the same time), then close them all. Reported: each phase's wall time and its
//! calls' p50/p99; the burst's jobs per second against the same N commands started by
//! `xargs -P <parallel> bash --noprofile --norc -c true` (the baseline, timed before and after the
//! burst, their mean used); the CPU the front, the supervisor and the cgroup tree spend in each phase;
//! and the CPU they spend during idle stretches: with the N sessions open right after their jobs (each
//! worker then starts its next spare shell), the next stretch, and after the sessions closed.

use anyhow::{ensure, Context, Result};
use heddle_bench::{record, Summary};
use heddle_tests::{Client, Heddle};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// `seq N | xargs -P P -n 1 bash --noprofile --norc -c true`: wall seconds.
fn xargs_burst(n: usize, parallel: usize) -> Result<f64> {
    let script = format!("seq {n} | xargs -P {parallel} -n 1 bash --noprofile --norc -c true");
    let t = Instant::now();
    let st = std::process::Command::new("bash").args(["--noprofile", "--norc", "-c", &script]).status()?;
    ensure!(st.success(), "the xargs baseline failed: {st}");
    Ok(t.elapsed().as_secs_f64())
}

/// One phase: `parallel` threads, each with a connection, take indices 0..n in turn and time `f` on
/// each. Returns (wall seconds, per-call µs).
fn phase(
    socket: &Path,
    n: usize,
    parallel: usize,
    f: impl Fn(&mut Client, usize) -> Result<()> + Sync,
) -> Result<(f64, Vec<f64>)> {
    let next = AtomicUsize::new(0);
    let times = Mutex::new(Vec::with_capacity(n));
    let t = Instant::now();
    std::thread::scope(|scope| -> Result<()> {
        let handles: Vec<_> = (0..parallel.min(n).max(1))
            .map(|_| {
                scope.spawn(|| -> Result<()> {
                    let mut c = Client::connect(socket).context("connecting to heddle")?;
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= n {
                            break;
                        }
                        let t = Instant::now();
                        f(&mut c, i)?;
                        mine.push(t.elapsed().as_secs_f64() * 1e6);
                    }
                    times.lock().unwrap_or_else(std::sync::PoisonError::into_inner).extend(mine);
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join().map_err(|_| anyhow::anyhow!("a client thread panicked"))??;
        }
        Ok(())
    })?;
    Ok((t.elapsed().as_secs_f64(), times.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner)))
}

/// User + system CPU of a process so far, in ms (`/proc/<pid>/stat`, clock ticks of 10 ms).
fn process_cpu_ms(pid: u64) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name's closing parenthesis: utime is the 12th, stime the 13th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    // Indexed before parsing: the first field (the state letter) is not a number.
    let f: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| f.get(i).and_then(|w| w.parse::<f64>().ok()).unwrap_or(0.0);
    let tick = 1000.0 / nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok().flatten().unwrap_or(100) as f64;
    (field(11) + field(12)) * tick
}

/// CPU used by everything in a cgroup tree so far, in ms (`cpu.stat` `usage_usec`).
fn cgroup_cpu_ms(root: &Path) -> f64 {
    let stat = std::fs::read_to_string(root.join("cpu.stat")).unwrap_or_default();
    stat.lines().find_map(|l| l.strip_prefix("usage_usec ")).and_then(|v| v.trim().parse::<f64>().ok()).unwrap_or(0.0)
        / 1e3
}

/// CPU of the front, the supervisor and the cgroup tree over `secs` of idleness; printed and noted.
fn idle(what: &str, secs: u64, front: u64, supervisor: u64, tree: &Path) {
    let before = (process_cpu_ms(front), process_cpu_ms(supervisor), cgroup_cpu_ms(tree));
    std::thread::sleep(Duration::from_secs(secs));
    let after = (process_cpu_ms(front), process_cpu_ms(supervisor), cgroup_cpu_ms(tree));
    heddle_bench::note(format!(
        "idle {secs} s {what}: front {:.0} ms CPU, supervisor {:.0} ms, the whole cgroup tree {:.1} ms ({:.3}% of one CPU)",
        after.0 - before.0,
        after.1 - before.1,
        after.2 - before.2,
        100.0 * (after.2 - before.2) / (secs as f64 * 1e3)
    ));
}

pub fn run(sessions: usize, parallel: usize, idle_secs: u64) -> Result<()> {
    let n = sessions;
    let h = Heddle::start();
    let d = h.client().call("describe", json!({}))?;
    let front = d["front"]["pid"].as_u64().context("describe gave no front pid")?;
    let supervisor = d["supervisor"]["pid"].as_u64().context("describe gave no supervisor pid")?;
    let bare_before = xargs_burst(n, parallel)?;
    let ids: Vec<Mutex<Value>> = (0..n).map(|_| Mutex::new(Value::Null)).collect();
    let lock = |i: usize| ids[i].lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let project = h.project.clone();
    let cpu = || (process_cpu_ms(front), process_cpu_ms(supervisor), cgroup_cpu_ms(&h.cgroup_root));
    // CPU of the front, the supervisor and the cgroup tree in each phase.
    let mut cpus = Vec::new();
    let mut at = cpu();
    let spent = |cpus: &mut Vec<(f64, f64, f64)>, at: &mut (f64, f64, f64)| {
        let now = cpu();
        cpus.push((now.0 - at.0, now.1 - at.1, now.2 - at.2));
        *at = now;
    };
    let (open_s, open) = phase(&h.socket, n, parallel, |c, i| {
        let r = c.call("session.open", json!({"cwd": project}))?;
        *lock(i) = r["session"].clone();
        Ok(())
    })?;
    spent(&mut cpus, &mut at);
    let prestarted = AtomicUsize::new(0);
    let (run_s, run) = phase(&h.socket, n, parallel, |c, i| {
        let s = lock(i).clone();
        let r = c.call("run", json!({"session": s, "cmd": "true"}))?;
        ensure!(r["exit_code"] == 0, "run in session {s}: {r}");
        prestarted.fetch_add(usize::from(r["prestarted"] == true), Ordering::Relaxed);
        Ok(())
    })?;
    spent(&mut cpus, &mut at);
    if idle_secs > 0 {
        // The first stretch right after the jobs is when each worker starts its next spare shell; the
        // second is the fleet left alone.
        idle(
            &format!("with the {n} sessions open, right after their jobs"),
            idle_secs,
            front,
            supervisor,
            &h.cgroup_root,
        );
        idle(&format!("with the {n} sessions open, {idle_secs} s later"), idle_secs, front, supervisor, &h.cgroup_root);
    }
    at = cpu();
    let (close_s, close) = phase(&h.socket, n, parallel, |c, i| {
        let s = lock(i).clone();
        c.call("session.close", json!({"session": s}))?;
        Ok(())
    })?;
    spent(&mut cpus, &mut at);
    if idle_secs > 0 {
        idle(&format!("after the {n} sessions closed"), idle_secs, front, supervisor, &h.cgroup_root);
    }
    let bare_after = xargs_burst(n, parallel)?;
    let bare_s = (bare_before + bare_after) / 2.0;
    println!("== fleet: {n} sessions, {parallel} client connections, one `true` each");
    println!(
        "{:<16} {:>7} {:>8} {:>8} {:>10} {:>10} {:>10}",
        "", "wall s", "p50 ms", "p99 ms", "front ms", "superv ms", "tree ms"
    );
    for ((name, wall, times), (f, sv, tree)) in
        [("session.open", open_s, open), ("run(\"true\")", run_s, run), ("session.close", close_s, close)]
            .into_iter()
            .zip(cpus)
    {
        let s = Summary::of(times);
        println!("{name:<16} {wall:>7.2} {:>8.1} {:>8.1} {f:>10.0} {sv:>10.0} {tree:>10.0}", s.p50 / 1e3, s.p99 / 1e3);
        heddle_bench::note(format!(
            "fleet of {n}, {parallel} connections: {name} phase {wall:.2} s wall, p50 {:.1} ms, p99 {:.1} ms per call; CPU: front {f:.0} ms, supervisor {sv:.0} ms, cgroup tree {tree:.0} ms",
            s.p50 / 1e3,
            s.p99 / 1e3
        ));
    }
    println!(
        "xargs -P {parallel} bash -c true × {n}: {bare_before:.2} s before, {bare_after:.2} s after ({:.0} jobs/s)",
        n as f64 / bare_s
    );
    heddle_bench::note(format!("{} of {n} fleet calls ran on a pre-started shell", prestarted.load(Ordering::Relaxed)));
    let base = format!("xargs -P {parallel} bash -c true, jobs/s");
    let (run_rate, all_rate, bare_rate) = (n as f64 / run_s, n as f64 / (open_s + run_s + close_s), n as f64 / bare_s);
    record(&format!("fleet of {n}: run phase, jobs/s"), &base, bare_rate, run_rate, None, "jobs/s");
    record(&format!("fleet of {n}: open + run + close, jobs/s"), &base, bare_rate, all_rate, None, "jobs/s");
    println!("jobs/s ratio, run phase: {:.3}; open + run + close: {:.3}", run_rate / bare_rate, all_rate / bare_rate);
    Ok(())
}
