//! `heddle-bench cgroup`: what a per-job cgroup costs. Interleaved in one run:
//!
//! - baseline: the launcher's spawn of `/bin/true` (clone3, exec, wait) in the bench's own cgroup;
//! - subject: the same spawn placed by `CLONE_INTO_CGROUP` into the job's cgroup as the worker gets it
//!   (`SessionCgroup::create`: an emptied cgroup from the session's pool, in the steady state), and, once
//!   the child is reaped, `SessionCgroup::settle`: the `cgroup.events` read (empty?), the `cpu.stat` read
//!   (the job's CPU time) and the cgroup back to the pool — the worker's whole per-job cgroup path;
//! - the same with the pool off (`with_pool(0)`): a fresh cgroup per job (`mkdir`, and `rmdir` after), the
//!   worker's path before the pool;
//! - the cgroup part alone (`mkdir` + open + `rmdir`, no process);
//! - both spawns again fork-style (`Prepared::force_fork`), the launcher's path before the vfork-style
//!   clone, so the two are compared in the same run;
//! - the spawn placed into one long-lived cgroup (no mkdir/rmdir): what placement costs when the
//!   cgroup already exists, against the fresh cgroup's spawn + wait (the kernel's per-new-cgroup work).
//!
//! The subject runs through the worker's own cgroup code (`worker::cgroup::SessionCgroup`) and is timed
//! step by step (mkdir + open, spawn until exec, wait, `cpu.stat` read, rmdir), and the spawn and wait steps are set against the baseline's, which shows where the
//! cgroup's cost lies. The figure of interest is subject − baseline at p50 (the design's target: ≤ 50 µs).

use heddle_bench::{report, time_us, Summary};
use launcher::{Prepared, Stdio};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::Instant;
use worker::cgroup::{CgroupOps, SessionCgroup};

fn null_stdio() -> Stdio {
    let out = || -> OwnedFd { std::fs::OpenOptions::new().write(true).open("/dev/null").expect("/dev/null").into() };
    Stdio::null_stdin(out(), out()).expect("stdin")
}

/// Spawn `/bin/true` and reap it; returns the (spawn, wait) times in µs.
fn spawn_true(cgroup: Option<OwnedFd>, fork: bool) -> [f64; 2] {
    let mut p =
        Prepared::new(Path::new("/bin/true"), &["true"], &[], Some(Path::new("/")), null_stdio()).expect("prepare");
    if let Some(dir) = cgroup {
        p = p.with_cgroup(dir);
    }
    if fork {
        p = p.force_fork();
    }
    let t = Instant::now();
    let child = launcher::spawn(&p).expect("spawn");
    let spawned = t.elapsed().as_secs_f64() * 1e6;
    assert_eq!(child.wait().expect("wait").code(), Some(0));
    [spawned, t.elapsed().as_secs_f64() * 1e6 - spawned]
}

fn open_dir(dir: &Path) -> OwnedFd {
    std::fs::File::open(dir).expect("open cgroup dir").into()
}

/// The steps of the subject, in order.
const STEPS: [&str; 4] = ["SessionCgroup::create", "spawn (until exec)", "wait", "SessionCgroup::settle"];

/// The worker's per-job path, through the worker's own cgroup code ([`SessionCgroup`]); returns each
/// step's time in µs.
fn in_cgroup(session: &mut SessionCgroup, n: usize, fork: bool) -> [f64; 4] {
    let job = n as u64;
    let mut t = Instant::now();
    let mut lap = || {
        let e = t.elapsed().as_secs_f64() * 1e6;
        t = Instant::now();
        e
    };
    let fd = session.create(job).expect("job cgroup").expect("a directory fd");
    let create = lap();
    let [spawn, wait] = spawn_true(Some(fd), fork);
    lap();
    session.settle(job).expect("settle the job cgroup (EBUSY: a process remained)");
    [create, spawn, wait, lap()]
}

fn dir_only(root: &Path, n: usize) {
    let dir = root.join(format!("bare-{n}"));
    std::fs::create_dir(&dir).expect("mkdir");
    drop(open_dir(&dir));
    std::fs::remove_dir(&dir).expect("rmdir");
}

/// Samples of one run.
#[derive(Default)]
struct Samples {
    bare: Vec<f64>,
    placed: Vec<f64>,
    dirs: Vec<f64>,
    bare_fork: Vec<f64>,
    placed_fork: Vec<f64>,
    bare_steps: [Vec<f64>; 2],
    steps: [Vec<f64>; 4],
    fresh: Vec<f64>,
    fresh_steps: [Vec<f64>; 4],
    reused: Vec<f64>,
}

/// Run the benchmark with `iterations` samples of each.
pub fn run(iterations: usize) -> anyhow::Result<()> {
    heddle_tests::require_root();
    let root = heddle_tests::cgroup2_mount().join(format!("heddle-bench-{}", std::process::id()));
    std::fs::create_dir(&root)?;
    let mut session = SessionCgroup::open(&root)?;
    let fresh_root = root.join("fresh");
    std::fs::create_dir(&fresh_root)?;
    let mut fresh_session = SessionCgroup::open(&fresh_root)?.with_pool(0);
    let reuse = root.join("reused");
    std::fs::create_dir(&reuse)?;
    let reuse_fd = open_dir(&reuse);
    let mut s = Samples::default();
    for i in 0..iterations + 50 {
        let mut bare_steps = [0.0; 2];
        let b = time_us(|| bare_steps = spawn_true(None, false));
        let mut steps = [0.0; 4];
        let p = time_us(|| steps = in_cgroup(&mut session, i, false));
        let mut fresh_steps = [0.0; 4];
        let f = time_us(|| fresh_steps = in_cgroup(&mut fresh_session, i, false));
        let d = time_us(|| dir_only(&root, i));
        let bf = time_us(|| {
            spawn_true(None, true);
        });
        let pf = time_us(|| {
            in_cgroup(&mut session, i, true);
        });
        let r = time_us(|| {
            spawn_true(Some(reuse_fd.try_clone().expect("dup")), false);
        });
        if i >= 50 {
            s.bare.push(b);
            s.placed.push(p);
            s.dirs.push(d);
            s.bare_fork.push(bf);
            s.placed_fork.push(pf);
            s.reused.push(r);
            s.fresh.push(f);
            for (v, x) in s.fresh_steps.iter_mut().zip(fresh_steps) {
                v.push(x);
            }
            for (v, x) in s.bare_steps.iter_mut().zip(bare_steps) {
                v.push(x);
            }
            for (v, x) in s.steps.iter_mut().zip(steps) {
                v.push(x);
            }
        }
    }
    drop(fresh_session);
    std::fs::remove_dir(&fresh_root)?;
    session.drain_pool();
    drop(session);
    std::fs::remove_dir(&reuse)?;
    std::fs::remove_dir(&root)?;
    print(s);
    Ok(())
}

fn print(s: Samples) {
    let (bare, placed, dirs) = (Summary::of(s.bare), Summary::of(s.placed), Summary::of(s.dirs));
    report(
        "per-job cgroup: create + place (CLONE_INTO_CGROUP) + remove vs a bare spawn",
        "bare launcher spawn of /bin/true + wait",
        bare,
        "same, in the job's cgroup from the pool",
        placed,
    );
    println!("{:<44} {:>10.1}", "cgroup cost at p50 (subject - baseline) µs", placed.p50 - bare.p50);
    let fresh = Summary::of(s.fresh);
    let base = "bare launcher spawn of /bin/true + wait";
    heddle_bench::record(
        "per-job cgroup, a fresh one (pool off)",
        base,
        bare.p50,
        fresh.p50,
        Some(fresh.p99 / bare.p99),
        "µs",
    );
    println!(
        "{:<44} {:>10.1}   (cgroup cost: {:+.1})",
        "same, a fresh cgroup per job (pool off)",
        fresh.p50,
        fresh.p50 - bare.p50
    );
    println!("{:<44} {:>10.1} {:>10.1} {:>10.1}", "mkdir + open + rmdir alone", dirs.p50, dirs.p90, dirs.p99);
    println!("-- the subject step by step (p50 µs), the spawn and wait steps against the baseline's");
    let bare_steps = s.bare_steps.map(|v| Summary::of(v).p50);
    for (i, ((name, v), fresh)) in STEPS.iter().zip(s.steps).zip(s.fresh_steps).enumerate() {
        let (p50, fresh) = (Summary::of(v).p50, Summary::of(fresh).p50);
        match i {
            1 | 2 => println!(
                "{name:<44} {p50:>10.1}   (baseline {:.1}, {:+.1}; fresh cgroup {fresh:.1})",
                bare_steps[i - 1],
                p50 - bare_steps[i - 1]
            ),
            _ => println!("{name:<44} {p50:>10.1}   (fresh cgroup: {fresh:.1})"),
        }
    }
    let reused = Summary::of(s.reused);
    println!(
        "{:<44} {:>10.1}   (placement alone, into a cgroup that already exists: {:+.1})",
        "spawn into one long-lived cgroup + wait",
        reused.p50,
        reused.p50 - bare.p50
    );
    let (bare_fork, placed_fork) = (Summary::of(s.bare_fork), Summary::of(s.placed_fork));
    println!("-- the same two spawns fork-style (the launcher's clone before the vfork-style path)");
    println!(
        "{:<44} {:>10.1}   (vfork-style / fork-style: {:.3})",
        "bare spawn + wait, fork-style",
        bare_fork.p50,
        bare.p50 / bare_fork.p50
    );
    println!(
        "{:<44} {:>10.1}   (cgroup cost fork-style: {:.1})",
        "in a fresh job cgroup, fork-style",
        placed_fork.p50,
        placed_fork.p50 - bare_fork.p50
    );
}
