//! The worker's event loop end to end over heap rings, with fake cgroups: needs no root.
//! (The same flows with real cgroups and the real binary are in `worker_cgroup.rs`.)

mod common;

use common::{kill_own_job, seq, Collector, LocalWorker};
use shm_proto::msg::{Command, Event};
use std::time::{Duration, Instant};
use worker::cgroup::Call;

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn a_job_reports_started_output_exited_then_streams_closed() {
    let mut w = LocalWorker::start(1 << 20, env(&[("PATH", "/usr/bin:/bin")]));
    w.front.run(1, "echo hi; echo err >&2; exit 3");
    let mut c = Collector::default();
    let t = c.until_done(&mut w.front, 1);
    assert_eq!(t.stdout, b"hi\n");
    assert_eq!(t.stderr, b"err\n");
    assert_eq!(t.exited, Some((Some(3), None, false)));
    assert_eq!(t.kinds.first(), Some(&"started"));
    assert_eq!(&t.kinds[t.kinds.len() - 2..], ["exited", "closed"]);
    assert_eq!(w.cgroups.calls(), [Call::Create(1), Call::Remove(1)], "rmdir tells an empty cgroup");
    assert!(
        c.other.iter().any(|e| matches!(e, Event::Emptied { job: 1, .. })),
        "an empty cgroup after the exit settles the job at once: {:?}",
        c.other
    );
    w.shutdown().unwrap();
}

#[test]
fn jobs_get_the_allowlisted_environment_and_their_cwd() {
    let base = env(&[("PATH", "/usr/bin:/bin"), ("SECRET_TOKEN", "s3cr3t"), ("LANG", "C.UTF-8")]);
    let mut w = LocalWorker::start(1 << 20, base);
    let cmd = r#"pwd; echo "$TERM $NO_COLOR $PAGER $LANG $FOO ${SECRET_TOKEN:-unset}""#;
    w.front.run_in(1, cmd, "/tmp", &[("FOO", "bar")]);
    let mut c = Collector::default();
    let t = c.until_done(&mut w.front, 1);
    assert_eq!(t.stdout_str(), "/tmp\ndumb 1 cat C.UTF-8 bar unset\n");
    w.shutdown().unwrap();
}

#[test]
fn a_bad_cwd_is_a_spawn_failure_that_removes_the_cgroup() {
    let mut w = LocalWorker::start(1 << 20, vec![]);
    w.front.run_in(1, "true", "/nonexistent-heddle", &[]);
    let mut c = Collector::default();
    let err = c.until_done(&mut w.front, 1).spawn_failed.clone().unwrap();
    assert_eq!(err, "cannot enter working directory /nonexistent-heddle: No such file or directory (os error 2)");
    assert_eq!(w.cgroups.calls(), [Call::Create(1), Call::Remove(1)]);
    w.shutdown().unwrap();
}

#[test]
fn a_cgroup_that_cannot_be_created_is_a_spawn_failure() {
    let mut w = LocalWorker::start(1 << 20, vec![]);
    w.cgroups.0.lock().unwrap().fail_create = Some(libc::EACCES);
    w.front.run(4, "true");
    let mut c = Collector::default();
    let err = c.until_done(&mut w.front, 4).spawn_failed.clone().unwrap();
    assert_eq!(err, "cannot create the job's cgroup /fake/job-4: Permission denied (os error 13)");
    w.shutdown().unwrap();
}

#[test]
fn a_duplicate_job_id_is_refused_without_touching_the_running_job() {
    let mut w = LocalWorker::start(1 << 20, vec![]);
    w.front.run(1, "read -t 0.3 x; echo first");
    w.front.run(1, "echo second");
    let mut c = Collector::default();
    c.until(&mut w.front, "both answers", |c| c.jobs.get(&1).is_some_and(|t| t.closed && t.spawn_failed.is_some()));
    let t = &c.jobs[&1];
    assert_eq!(t.spawn_failed.as_deref(), Some("job 1 already exists in this session"));
    assert_eq!(t.stdout_str(), "first\n");
    let calls = [Call::Create(1), Call::Remove(1)];
    assert_eq!(w.cgroups.calls(), calls, "the duplicate never touched the cgroup");
    w.shutdown().unwrap();
}

#[test]
fn jobs_of_a_session_run_concurrently() {
    let mut w = LocalWorker::start(1 << 20, vec![]);
    let t0 = Instant::now();
    // Long enough that the fast job ends first even on a loaded host (0.5 s was not, beside a compile).
    w.front.run(1, "sleep 3; echo slow");
    w.front.run(2, "echo fast");
    let mut c = Collector::default();
    c.until_done(&mut w.front, 2);
    assert!(c.jobs.get(&1).is_none_or(|t| t.exited.is_none()), "job 2 ended first");
    c.until_done(&mut w.front, 1);
    assert!(t0.elapsed() < Duration::from_millis(6000), "the jobs overlapped");
    w.shutdown().unwrap();
}

#[test]
fn output_of_a_survivor_comes_after_exited_and_before_streams_closed() {
    let mut w = LocalWorker::start(1 << 20, vec![]);
    w.front.run(1, "(sleep 0.3; echo late) & echo early");
    let mut c = Collector::default();
    let t = c.until_done(&mut w.front, 1);
    assert_eq!(t.stdout_str(), "early\nlate\n");
    assert_eq!(t.bytes_before_exit, "early\n".len());
    assert_eq!(t.kinds, ["started", "out", "exited", "out", "closed"]);
    w.shutdown().unwrap();
}

#[test]
fn a_survivor_flooding_the_pipe_does_not_hold_back_exited() {
    let mut w = LocalWorker::start(1 << 16, vec![]);
    let total = 20_000_000;
    w.front.run(1, &format!("echo main-done; head -c {total} /dev/zero &"));
    let mut c = Collector::default();
    let t = c.until_done(&mut w.front, 1);
    assert_eq!(t.exited, Some((Some(0), None, false)));
    assert!(t.stdout.starts_with(b"main-done\n"));
    assert_eq!(t.stdout.len(), total + "main-done\n".len(), "every byte arrived");
    assert!(t.bytes_before_exit < total / 4, "Exited waited only for bytes queued at exit ({})", t.bytes_before_exit);
    w.shutdown().unwrap();
}

#[test]
fn fifty_mib_arrive_exactly_through_a_small_ring_read_slowly() {
    let mut w = LocalWorker::start(1 << 16, vec![]);
    w.front.run(1, "seq 1 6700000 & seq 1 200000 >&2; wait");
    std::thread::sleep(Duration::from_millis(300)); // let the ring fill: the worker must park, not drop
    let mut c = Collector::default();
    let t = c.until_done(&mut w.front, 1);
    let expect = seq(6_700_000);
    assert!(expect.len() > 50 << 20);
    assert_eq!(t.stdout.len(), expect.len());
    assert!(t.stdout == expect, "stdout differs");
    assert!(t.stderr == seq(200_000), "stderr differs");
    assert_eq!(t.exited, Some((Some(0), None, false)));
    w.shutdown().unwrap();
}

#[test]
fn kill_without_grace_uses_cgroup_kill_and_marks_the_job_killed() {
    let mut w = LocalWorker::start(1 << 20, vec![]);
    w.front.run(1, "sleep 30");
    let mut c = Collector::default();
    c.until(&mut w.front, "Started", |c| c.jobs.get(&1).is_some_and(|t| t.pid.is_some()));
    w.front.send(&Command::Kill { job: 1, grace_ms: 0 });
    let deadline = Instant::now() + Duration::from_secs(5);
    while !w.cgroups.calls().contains(&Call::Kill(1)) {
        assert!(Instant::now() < deadline, "no cgroup.kill");
        std::thread::sleep(Duration::from_millis(5));
    }
    kill_own_job(c.jobs[&1].pid.unwrap()); // what cgroup.kill does for real
    let t = c.until_done(&mut w.front, 1);
    assert_eq!(t.exited, Some((None, Some(libc::SIGKILL), true)));
    w.shutdown().unwrap();
}

#[test]
fn kill_with_grace_freezes_terms_thaws_then_kills_a_populated_cgroup_at_the_deadline() {
    let mut w = LocalWorker::start(1 << 20, vec![]);
    w.cgroups.0.lock().unwrap().populated = true;
    w.front.run(1, "sleep 30");
    let mut c = Collector::default();
    c.until(&mut w.front, "Started", |c| c.jobs.get(&1).is_some_and(|t| t.pid.is_some()));
    let t0 = Instant::now();
    w.front.send(&Command::Kill { job: 1, grace_ms: 200 });
    let deadline = Instant::now() + Duration::from_secs(5);
    while !w.cgroups.calls().contains(&Call::Kill(1)) {
        assert!(Instant::now() < deadline, "no cgroup.kill after the grace period");
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(t0.elapsed() >= Duration::from_millis(200), "killed before the grace period ended");
    let calls = w.cgroups.calls();
    let expect = [Call::Freeze(1, true), Call::Term(1), Call::Freeze(1, false), Call::Populated(1), Call::Kill(1)];
    assert_eq!(calls[1..], expect);
    kill_own_job(c.jobs[&1].pid.unwrap());
    assert_eq!(c.until_done(&mut w.front, 1).exited, Some((None, Some(libc::SIGKILL), true)));
    w.shutdown().unwrap();
}

#[test]
fn shutdown_kills_every_job_and_ends_the_worker_cleanly() {
    let mut w = LocalWorker::start(1 << 20, vec![]);
    w.front.run(1, "sleep 30");
    w.front.run(2, "sleep 30");
    let mut c = Collector::default();
    c.until(&mut w.front, "two Started", |c| c.jobs.len() == 2 && c.jobs.values().all(|t| t.pid.is_some()));
    let cgroups = w.cgroups.clone();
    w.shutdown().unwrap();
    let calls = cgroups.calls();
    assert!(calls.contains(&Call::Kill(1)) && calls.contains(&Call::Kill(2)), "{calls:?}");
    for t in c.jobs.values() {
        kill_own_job(t.pid.unwrap());
    }
}

#[test]
fn a_garbage_command_frame_is_a_warning_and_the_worker_goes_on() {
    let mut w = LocalWorker::start(1 << 20, vec![]);
    w.front.send_raw(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
    let ev = w.front.expect("Warning");
    let Event::Warning { job: None, message } = ev else { panic!("expected a Warning, got {ev:?}") };
    assert!(message.starts_with("a command could not be decoded and was skipped"), "{message}");
    w.front.run(1, "echo still here");
    let mut c = Collector::default();
    assert_eq!(c.until_done(&mut w.front, 1).stdout_str(), "still here\n");
    w.shutdown().unwrap();
}

#[test]
fn an_idle_worker_sleeps_without_a_timeout() {
    // The loop's only timeout is a kill deadline: with none pending, the worker must block in epoll_wait.
    // Measured as the worker thread's CPU time over an idle half second.
    let mut w = LocalWorker::start(1 << 20, vec![]);
    w.front.run(1, "true");
    let mut c = Collector::default();
    c.until_done(&mut w.front, 1);
    std::thread::sleep(Duration::from_millis(50));
    let stat = format!("/proc/self/task/{}/stat", w.tid);
    let ticks = || {
        let s = std::fs::read_to_string(&stat).unwrap();
        let f: Vec<&str> = s.rsplit(')').next().unwrap().split_whitespace().collect();
        f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
    };
    let wchan = std::fs::read_to_string(format!("/proc/self/task/{}/wchan", w.tid)).unwrap();
    assert!(wchan.contains("ep_poll") || wchan.contains("epoll"), "the worker is not blocked in epoll: {wchan}");
    let before = ticks();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(ticks(), before, "the idle worker used CPU");
    w.shutdown().unwrap();
}
