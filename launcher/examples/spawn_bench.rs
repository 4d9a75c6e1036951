//! Spawn latency: `bash --noprofile --norc -c true` + wait through the launcher vs `std::process::Command`.
//!
//! `cargo run --release -p launcher --example spawn_bench [-- ITERATIONS [CGROUP_PARENT_DIR]]`
//!
//! With a cgroup v2 directory (root only, e.g. a fresh `/sys/fs/cgroup/unified/heddle-bench`), a third
//! series measures the job path: `mkdir job-N`, spawn into it with `CLONE_INTO_CGROUP`, wait, `rmdir`.

use launcher::{job_env, process_env, spawn, Prepared, Stdio};
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn null_stdio() -> Stdio {
    let out = std::fs::OpenOptions::new().write(true).open("/dev/null").unwrap();
    Stdio::null_stdin(out.try_clone().unwrap().into(), out.into()).unwrap()
}

fn report(name: &str, mut v: Vec<Duration>) {
    v.sort();
    let pct = |p: usize| v[(v.len() - 1) * p / 100].as_secs_f64() * 1e3;
    println!("{name:<28} n={:<4} p50 {:.3} ms  p90 {:.3} ms  min {:.3} ms", v.len(), pct(50), pct(90), pct(0));
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map(|a| a.parse().unwrap()).unwrap_or(50);
    let cgroup_parent = args.next().map(PathBuf::from);
    let env = job_env(&process_env(), &[]);
    let (mut ours, mut std_cmd, mut cg) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..n + 5 {
        let t = Instant::now();
        let p = Prepared::bash("true", &env, None, null_stdio()).unwrap();
        let child = spawn(&p).unwrap();
        drop(p);
        child.wait().unwrap();
        let d1 = t.elapsed();

        let t = Instant::now();
        std::process::Command::new("/bin/bash")
            .args(["--noprofile", "--norc", "-c", "true"])
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        let d2 = t.elapsed();

        let d3 = cgroup_parent.as_ref().map(|parent| {
            let t = Instant::now();
            let dir = parent.join(format!("job-{i}"));
            std::fs::create_dir(&dir).unwrap();
            let fd = std::fs::File::open(&dir).unwrap().into();
            let p = Prepared::bash("true", &env, None, null_stdio()).unwrap().with_cgroup(fd);
            let child = spawn(&p).unwrap();
            drop(p);
            child.wait().unwrap();
            std::fs::remove_dir(&dir).unwrap();
            t.elapsed()
        });
        if i >= 5 {
            ours.push(d1);
            std_cmd.push(d2);
            cg.extend(d3);
        }
    }
    report("launcher spawn+wait", ours);
    report("std::process::Command", std_cmd);
    if !cg.is_empty() {
        report("launcher mkdir+cgroup+rmdir", cg);
    }
}
