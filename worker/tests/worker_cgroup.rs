//! The real `heddle-worker` binary in real cgroups, driven through a real shared-memory region.
//!
//! Needs root (CI runs as root): without it every test fails with a message saying so, never skips.

mod common;

use common::{seq, Collector, ProcessWorker};
use shm_proto::msg::{Command, Event};
use shm_proto::sync::Ordering;
use std::time::{Duration, Instant};

#[test]
fn a_job_runs_in_its_own_cgroup_which_serves_the_next_job_once_empty() {
    let mut w = ProcessWorker::start("own");
    // A busy loop first (tens of ms of CPU), so that a CPU time of the next job that counted from the
    // cgroup's creation would show it.
    w.front.run(
        1,
        "x=0; while ((x < 40000)); do ((x++)); done; cat /proc/self/cgroup; echo ${SECRET_TOKEN:-unset} $TERM; exit 5",
    );
    let mut c = Collector::default();
    let t = c.until_done(&mut w.front, 1);
    let out = t.stdout_str();
    assert!(out.lines().any(|l| l == format!("0::{}", w.cgroup_name("slot-1"))), "{out}");
    assert!(out.ends_with("unset dumb\n"), "{out}");
    assert_eq!(t.exited, Some((Some(5), None, false)));
    assert_eq!(w.populated("slot-1"), Some(false), "the job's cgroup is empty, kept for the next job");
    // The next job gets the emptied cgroup; its CPU time counts from zero there.
    w.front.run(2, "cat /proc/self/cgroup");
    let t = c.until_done(&mut w.front, 2);
    assert!(t.stdout_str().lines().any(|l| l == format!("0::{}", w.cgroup_name("slot-1"))), "{}", t.stdout_str());
    c.until(&mut w.front, "Emptied", |c| [1, 2].iter().all(|j| c.jobs.get(j).is_some_and(|t| t.cpu_usec.is_some())));
    let (busy, next) = (c.jobs[&1].cpu_usec.unwrap(), c.jobs[&2].cpu_usec.unwrap());
    assert!(busy > 10_000 && next < busy / 2, "job 1 used {busy} µs, job 2 {next} µs of CPU");
    // A killed job's cgroup is never reused: the kernel would kill every process later cloned into it.
    w.front.run(3, "sleep 30");
    c.until(&mut w.front, "Started", |c| c.jobs.get(&3).is_some_and(|t| t.pid.is_some()));
    w.front.send(&Command::Kill { job: 3, grace_ms: 0 });
    c.until_done(&mut w.front, 3);
    assert!(w.wait_unpopulated("slot-1", Duration::from_secs(5)));
    assert!(eventually_gone(&w.dir.join("slot-1")), "the killed job's cgroup was removed");
    w.front.run(4, "cat /proc/self/cgroup; echo ran");
    let t = c.until_done(&mut w.front, 4);
    assert!(t.stdout_str().ends_with("/slot-2\nran\n"), "{}", t.stdout_str());
}

#[test]
fn a_cgroup_killed_from_outside_the_worker_is_not_reused() {
    let mut w = ProcessWorker::start("outkill");
    w.front.run(1, "sleep 30");
    let mut c = Collector::default();
    c.until(&mut w.front, "Started", |c| c.jobs.get(&1).is_some_and(|t| t.pid.is_some()));
    // Someone else (an operator) ends the job through its cgroup: the test created this subtree.
    std::fs::write(w.dir.join("slot-1/cgroup.kill"), "1").unwrap();
    let t = c.until_done(&mut w.front, 1);
    assert_eq!(t.exited, Some((None, Some(libc::SIGKILL), false)));
    assert!(eventually_gone(&w.dir.join("slot-1")), "a killed cgroup is removed, not kept");
    w.front.run(2, "cat /proc/self/cgroup; echo ran");
    let t = c.until_done(&mut w.front, 2);
    assert_eq!(t.exited, Some((Some(0), None, false)), "{}", t.stdout_str());
    assert!(t.stdout_str().ends_with("/slot-2\nran\n"), "{}", t.stdout_str());
}

fn eventually_gone(dir: &std::path::Path) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while dir.exists() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

#[test]
fn a_worker_started_with_sigchld_ignored_still_reaps_and_reports_exit_codes() {
    let mut w = ProcessWorker::start_with("sigign", true);
    w.front.run(1, "exit 9");
    let mut c = Collector::default();
    assert_eq!(c.until_done(&mut w.front, 1).exited, Some((Some(9), None, false)));
}

#[test]
fn a_spawn_failure_leaves_nothing_in_its_cgroup() {
    let mut w = ProcessWorker::start("fail");
    w.front.run_in(1, "true", "/nonexistent-heddle", &[]);
    let mut c = Collector::default();
    let err = c.until_done(&mut w.front, 1).spawn_failed.clone().unwrap();
    assert!(err.starts_with("cannot enter working directory /nonexistent-heddle"), "{err}");
    assert_ne!(w.populated("slot-1"), Some(true), "nothing of the failed spawn remains in its cgroup");
    // The emptied cgroup serves the next job.
    w.front.run(2, "cat /proc/self/cgroup");
    let t = c.until_done(&mut w.front, 2);
    assert_eq!(t.exited, Some((Some(0), None, false)));
    assert!(t.stdout_str().ends_with("/slot-1\n"), "{}", t.stdout_str());
}

#[test]
fn kill_without_grace_ends_the_whole_job_cgroup() {
    let mut w = ProcessWorker::start("kill0");
    w.front.run(1, "sleep 30 & sleep 30");
    let mut c = Collector::default();
    c.until(&mut w.front, "Started", |c| c.jobs.get(&1).is_some_and(|t| t.pid.is_some()));
    w.front.send(&Command::Kill { job: 1, grace_ms: 0 });
    let t = c.until_done(&mut w.front, 1);
    assert_eq!(t.exited, Some((None, Some(libc::SIGKILL), true)));
    assert!(w.wait_unpopulated("slot-1", Duration::from_secs(5)));
}

#[test]
fn kill_with_grace_lets_the_job_handle_sigterm() {
    let mut w = ProcessWorker::start("term");
    // `sleep` is forked before "ready" is printed, so the SIGTERM round finds it in the cgroup.
    w.front.run(1, "trap 'echo got-term; exit 7' TERM; sleep 30 & echo ready; wait");
    let mut c = Collector::default();
    c.until(&mut w.front, "ready", |c| c.jobs.get(&1).is_some_and(|t| t.stdout == b"ready\n"));
    w.front.send(&Command::Kill { job: 1, grace_ms: 5000 });
    let t0 = Instant::now();
    let t = c.until_done(&mut w.front, 1);
    assert_eq!(t.stdout_str(), "ready\ngot-term\n");
    assert_eq!(t.exited, Some((Some(7), None, true)));
    assert!(t0.elapsed() < Duration::from_secs(4), "SIGTERM ended it, not the deadline");
}

#[test]
fn kill_with_grace_kills_a_job_that_ignores_sigterm_at_the_deadline() {
    let mut w = ProcessWorker::start("graceful");
    w.front.run(1, "trap '' TERM; echo ready; sleep 30");
    let mut c = Collector::default();
    c.until(&mut w.front, "ready", |c| c.jobs.get(&1).is_some_and(|t| t.stdout == b"ready\n"));
    let t0 = Instant::now();
    w.front.send(&Command::Kill { job: 1, grace_ms: 300 });
    let t = c.until_done(&mut w.front, 1);
    assert!(t0.elapsed() >= Duration::from_millis(300), "killed before the grace period ended");
    assert_eq!(t.exited, Some((None, Some(libc::SIGKILL), true)));
}

#[test]
fn a_survivor_keeps_its_cgroup_until_killed() {
    let mut w = ProcessWorker::start("survivor");
    w.front.run(1, "sleep 30 >/dev/null 2>&1 & echo started");
    let mut c = Collector::default();
    let t = c.until_done(&mut w.front, 1);
    assert_eq!(t.exited, Some((Some(0), None, false)));
    assert_eq!(w.populated("slot-1"), Some(true), "the survivor is still in slot-1");
    w.front.send(&Command::Kill { job: 1, grace_ms: 0 });
    assert!(w.wait_unpopulated("slot-1", Duration::from_secs(5)), "Kill reached the survivor");
}

#[test]
fn fifty_mib_arrive_exactly_through_the_region() {
    let mut w = ProcessWorker::start("bulk");
    w.front.run(1, "seq 1 6700000; seq 1 100000 >&2");
    std::thread::sleep(Duration::from_millis(200)); // a slow front: the 4 MiB ring fills, the worker parks
    let mut c = Collector::default();
    let t = c.until_done(&mut w.front, 1);
    let expect = seq(6_700_000);
    assert!(expect.len() > 50 << 20);
    assert_eq!(t.stdout.len(), expect.len());
    assert!(t.stdout == expect, "stdout differs");
    assert!(t.stderr == seq(100_000), "stderr differs");
}

#[test]
fn shutdown_kills_the_jobs_and_exits_zero() {
    let mut w = ProcessWorker::start("shutdown");
    w.front.run(1, "sleep 30");
    let mut c = Collector::default();
    c.until(&mut w.front, "Started", |c| c.jobs.get(&1).is_some_and(|t| t.pid.is_some()));
    w.front.send(&Command::Shutdown);
    assert_eq!(w.wait_exit(Duration::from_secs(5)).code(), Some(0));
    assert!(w.wait_unpopulated("slot-1", Duration::from_secs(5)));
}

#[test]
fn a_corrupt_command_ring_is_reported_and_ends_the_worker() {
    let mut w = ProcessWorker::start("corrupt");
    // A tail that is not frame-aligned: the consumer must call the ring corrupt, not read it.
    let h = w.region.header();
    let tail_at = h.cmd_offset.load(Ordering::Relaxed) + std::mem::offset_of!(shm_proto::ring::RingCtl, tail) as u64;
    write_region_u64(&w.region, tail_at, 7);
    w.front.cmd_data.notify().unwrap();
    let ev = w.front.expect("Warning");
    let Event::Warning { job: None, message } = ev else { panic!("expected a Warning, got {ev:?}") };
    assert!(message.starts_with("the command ring is corrupt"), "{message}");
    assert_ne!(w.wait_exit(Duration::from_secs(5)).code(), Some(0));
}

#[test]
fn an_idle_worker_uses_no_cpu_and_no_heartbeat() {
    let mut w = ProcessWorker::start("idle");
    w.front.run(1, "true");
    let mut c = Collector::default();
    c.until_done(&mut w.front, 1);
    std::thread::sleep(Duration::from_millis(50));
    let (cpu, beat) = (w.cpu_ticks(), w.region.header().heartbeat.load(Ordering::Relaxed));
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(w.cpu_ticks(), cpu, "an idle worker used CPU");
    assert_eq!(w.region.header().heartbeat.load(Ordering::Relaxed), beat, "an idle worker looped");
    assert_eq!(w.region.header().worker_pid.load(Ordering::Relaxed), w.child.as_ref().unwrap().id());
    w.front.run(2, "true");
    c.until_done(&mut w.front, 2);
    assert!(w.region.header().heartbeat.load(Ordering::Relaxed) > beat, "the heartbeat moves with work");
}

/// Store `value` into the `AtomicU64` at byte `offset` of the region (a hostile front, in effect).
fn write_region_u64(region: &shm_proto::region::Region, offset: u64, value: u64) {
    let base = region.header() as *const shm_proto::region::Header as usize;
    let ptr = (base + offset as usize) as *const std::sync::atomic::AtomicU64;
    // SAFETY: `offset` is the command ring's `tail` field (cmd_offset + its offset in `RingCtl`), an
    // 8-aligned AtomicU64 inside the live mapping that `region` keeps alive.
    unsafe { (*ptr).store(value, std::sync::atomic::Ordering::Release) };
}
