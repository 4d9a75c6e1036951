//! `heddle-bench cgroup`: what a per-job cgroup costs. Interleaved in one run:
//!
//! - baseline: the launcher's spawn of `/bin/true` (clone3, exec, wait) in the bench's own cgroup;
//! - subject: the same spawn placed by `CLONE_INTO_CGROUP` into a fresh `job-N` cgroup, with the
//!   `mkdir` before and, once the child is reaped and `cgroup.events` says `populated 0`, the `cpu.stat`
//!   read and the `rmdir` after — the worker's whole per-job cgroup path;
//! - and the cgroup part alone (`mkdir` + open + `rmdir`, no process).
//!
//! The figure of interest is subject − baseline at p50 (the design's target: ≤ 50 µs).

use heddle_bench::{report, time_us, Summary};
use launcher::{Prepared, Stdio};
use std::os::fd::OwnedFd;
use std::path::Path;

fn null_stdio() -> Stdio {
    let out = || -> OwnedFd { std::fs::OpenOptions::new().write(true).open("/dev/null").expect("/dev/null").into() };
    Stdio::null_stdin(out(), out()).expect("stdin")
}

fn spawn_true(cgroup: Option<OwnedFd>) {
    let mut p =
        Prepared::new(Path::new("/bin/true"), &["true"], &[], Some(Path::new("/")), null_stdio()).expect("prepare");
    if let Some(dir) = cgroup {
        p = p.with_cgroup(dir);
    }
    let child = launcher::spawn(&p).expect("spawn");
    assert_eq!(child.wait().expect("wait").code(), Some(0));
}

fn open_dir(dir: &Path) -> OwnedFd {
    std::fs::File::open(dir).expect("open cgroup dir").into()
}

fn in_cgroup(root: &Path, n: usize) {
    let dir = root.join(format!("job-{n}"));
    std::fs::create_dir(&dir).expect("mkdir job cgroup");
    spawn_true(Some(open_dir(&dir)));
    let events = std::fs::read_to_string(dir.join("cgroup.events")).expect("cgroup.events");
    assert!(events.contains("populated 0"), "{events}");
    let _ = std::fs::read_to_string(dir.join("cpu.stat"));
    std::fs::remove_dir(&dir).expect("rmdir job cgroup");
}

fn dir_only(root: &Path, n: usize) {
    let dir = root.join(format!("bare-{n}"));
    std::fs::create_dir(&dir).expect("mkdir");
    drop(open_dir(&dir));
    std::fs::remove_dir(&dir).expect("rmdir");
}

/// Run the benchmark with `iterations` samples of each.
pub fn run(iterations: usize) -> anyhow::Result<()> {
    heddle_tests::require_root();
    let root = heddle_tests::cgroup2_mount().join(format!("heddle-bench-{}", std::process::id()));
    std::fs::create_dir(&root)?;
    let (mut bare, mut placed, mut dirs) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..iterations + 50 {
        let (b, p, d) = (time_us(|| spawn_true(None)), time_us(|| in_cgroup(&root, i)), time_us(|| dir_only(&root, i)));
        if i >= 50 {
            bare.push(b);
            placed.push(p);
            dirs.push(d);
        }
    }
    std::fs::remove_dir(&root)?;
    let (bare, placed, dirs) = (Summary::of(bare), Summary::of(placed), Summary::of(dirs));
    report(
        "per-job cgroup: create + place (CLONE_INTO_CGROUP) + remove vs a bare spawn",
        "bare launcher spawn of /bin/true + wait",
        bare,
        "same, in a fresh job cgroup (mkdir, rmdir)",
        placed,
    );
    println!("{:<44} {:>10.1}", "cgroup cost at p50 (subject - baseline) µs", placed.p50 - bare.p50);
    println!("{:<44} {:>10.1} {:>10.1} {:>10.1}", "mkdir + open + rmdir alone", dirs.p50, dirs.p90, dirs.p99);
    Ok(())
}
