//! Session limits, leaks and recovery (issue 4), end to end: a fork bomb under `pids_max` 64, a memory
//! hog past `memory_max` 64 MiB, 500 jobs without a leftover cgroup, fd or zombie, and a supervisor
//! killed with SIGKILL and started again.

use heddle_tests::{alive, bin_dir, eventually, Heddle};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn run(c: &mut heddle_tests::Client, s: &Value, cmd: &str, yield_ms: u64) -> Value {
    c.call("run", json!({"session": s, "cmd": cmd, "yield_ms": yield_ms})).expect("run")
}

fn open_limited(h: &Heddle, c: &mut heddle_tests::Client, limits: Value) -> Value {
    c.call("session.open", json!({"cwd": h.project, "limits": limits})).expect("session.open")["session"].clone()
}

fn describe(c: &mut heddle_tests::Client, s: &Value) -> Value {
    c.call("describe", json!({"session": s})).unwrap()
}

#[test]
fn a_fork_bomb_under_pids_64_ends_clearly_and_the_session_goes_on() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = open_limited(&h, &mut c, json!({"pids_max": 64}));
    // dash does not retry a failed fork: it stops with "Cannot fork" once the limit is hit.
    let r = run(&mut c, &s, "sh -c 'i=0; while [ $i -lt 500 ]; do sleep 100 & i=$((i+1)); done; wait'", 30_000);
    assert_eq!(r["state"], "exited", "{r}");
    assert_ne!(r["exit_code"], 0, "{r}");
    let note = r["note"].as_str().unwrap_or("");
    assert!(note.contains("process limit (pids.max 64)"), "the result says why: {r}");
    assert!(r["view"].as_str().unwrap().contains("fork"), "the shell's own error is shown: {r}");
    let k = c.call("kill", json!({"session": s, "job": r["job"]})).unwrap();
    assert_eq!(k["settled"], true, "{k}");
    let next = run(&mut c, &s, "echo still here", 10_000);
    assert_eq!((next["view"].as_str(), next["exit_code"].as_i64()), (Some("still here\n"), Some(0)), "{next}");
    let d = describe(&mut c, &s);
    assert_eq!(d["sessions"][0]["limits"]["pids_max"], 64, "{d}");
    assert!(d["sessions"][0]["limits"]["pids_limited"].as_u64().unwrap() > 0, "{d}");
}

#[test]
fn a_job_past_the_memory_limit_is_reported_oom_killed() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = open_limited(&h, &mut c, json!({"memory_max": 64u64 << 20}));
    // dd allocates and fills its 200 MiB block at once.
    let r = run(&mut c, &s, "dd if=/dev/zero of=/dev/null bs=200M count=1", 60_000);
    assert_eq!(r["state"], "exited", "{r}");
    assert_eq!(r["oom_killed"], true, "{r}");
    assert!(r["note"].as_str().unwrap().contains("OOM killer"), "{r}");
    let d = describe(&mut c, &s);
    let limits = &d["sessions"][0]["limits"];
    assert_eq!(limits["memory_max"], 64u64 << 20, "{d}");
    assert!(limits["oom_kills"].as_u64().unwrap() >= 1, "{d}");
    let peak = limits["memory_peak"].as_u64().unwrap();
    assert!(peak > 32 << 20 && peak <= 64 << 20, "peak memory is accounted and bounded: {peak}");
    assert_eq!(run(&mut c, &s, "echo ok", 10_000)["view"], "ok\n");
}

/// The fds of `pid` other than those into its session's cgroup directory `dir` (the emptied job cgroups
/// kept for the next jobs hold a few each: bounded by the pool, counted by `cgroup_fd_count`).
fn fd_count(pid: u64, dir: &Path) -> usize {
    fd_targets(pid).iter().filter(|t| !t.starts_with(dir)).count()
}

fn cgroup_fd_count(pid: u64, dir: &Path) -> usize {
    fd_targets(pid).iter().filter(|t| t.starts_with(dir)).count()
}

fn fd_targets(pid: u64) -> Vec<PathBuf> {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap();
    fds.flatten().filter_map(|e| std::fs::read_link(e.path()).ok()).collect()
}

fn zombie_children(parent: u64) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else { continue };
        let Some((_, rest)) = stat.rsplit_once(')') else { continue };
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.first() == Some(&"Z") && f.get(1).and_then(|p| p.parse::<u64>().ok()) == Some(parent) {
            n += 1;
        }
    }
    n
}

fn job_dirs(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("slot-"))
        .map(|e| e.path())
        .collect()
}

/// The job cgroup directories with processes in them.
fn occupied_dirs(dir: &Path) -> Vec<PathBuf> {
    job_dirs(dir).into_iter().filter(|d| !heddle_tests::pids_of(d).is_empty()).collect()
}

/// At most this many emptied job cgroups wait for a session's next jobs (`worker::cgroup::POOL`).
const POOL: usize = 4;

#[test]
fn five_hundred_jobs_leave_no_cgroup_fd_or_zombie() {
    // Spares start without waiting for a free CPU: the loop counts its paced calls that ran on one.
    let h = Heddle::start_with_env(&[], &[("HEDDLE_SPARE_CPU_WAIT_MS", "0")]);
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let d = describe(&mut c, &s);
    let worker = d["sessions"][0]["worker"]["pid"].as_u64().unwrap();
    let dir = PathBuf::from(d["sessions"][0]["cgroup"].as_str().unwrap());
    assert_eq!(run(&mut c, &s, "true", 10_000)["settled"], true);
    // Count the worker's fds once the idle session's spare (for job 2) is up: it holds the same set then.
    assert!(eventually(Duration::from_secs(5), || job_dirs(&dir).len() == 1), "{:?}", job_dirs(&dir));
    // Settled: the first job's ledger may still hold git's memfds for a moment (under load, 7 more).
    let mut fds_before = fd_count(worker, &dir);
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(100));
        let now = fd_count(worker, &dir);
        if now == fds_before {
            break;
        }
        fds_before = now;
    }
    let mut prestarted = 0;
    for i in 0..500 {
        // Mostly back to back (cold starts, spares discarded or never made), every 25th after a pause
        // long enough for a spare to be taken: both paths, and their hand-offs, run many times.
        if i % 25 == 0 {
            std::thread::sleep(Duration::from_millis(60));
        }
        let cmd = if i % 2 == 0 { "true" } else { "echo x; echo y >&2; exit 3" };
        let r = run(&mut c, &s, cmd, 10_000);
        assert_eq!(r["state"], "exited", "{r}");
        prestarted += usize::from(r["prestarted"] == true);
    }
    assert!(prestarted >= 10, "paced calls ran on pre-started shells: {prestarted}");
    // A result can come back between the cgroup emptying and the pipes' EOF: give the last one a moment.
    let mut unsettled = Vec::new();
    let all_settled = eventually(Duration::from_secs(5), || {
        let jobs = c.call("jobs", json!({"session": s})).unwrap();
        unsettled = jobs["jobs"].as_array().unwrap().iter().filter(|j| j["settled"] != true).cloned().collect();
        unsettled.is_empty()
    });
    assert!(all_settled, "every job settled: {unsettled:?}");
    // Left: the cgroup of the next job's spare (one bash), and at most `POOL` emptied cgroups kept for the
    // next jobs — no cgroup of any of the 500 jobs holds anything, and none leaked.
    let spare_up = eventually(Duration::from_secs(5), || {
        let occupied = occupied_dirs(&dir);
        occupied.len() == 1 && heddle_tests::pids_of(&occupied[0]).len() == 1 && job_dirs(&dir).len() <= 1 + POOL
    });
    assert!(spare_up, "only the next job's spare is left: {:?} (occupied {:?})", job_dirs(&dir), occupied_dirs(&dir));
    let fds_settle = eventually(Duration::from_secs(5), || fd_count(worker, &dir) <= fds_before);
    assert!(
        fds_settle,
        "the worker holds no pipe or pidfd of an ended job: {} fds, {fds_before} before",
        fd_count(worker, &dir)
    );
    // Each emptied job cgroup kept for the next jobs holds its directory and at most three of its files.
    let cgroup_fds = cgroup_fd_count(worker, &dir);
    assert!(cgroup_fds <= 4 * (POOL + 1), "{cgroup_fds} fds into the session's job cgroups");
    assert_eq!(zombie_children(worker), 0, "no zombie under the worker");
    c.call("session.close", json!({"session": s})).unwrap();
    assert!(eventually(Duration::from_secs(10), || !dir.exists()), "session cgroup left: {:?}", job_dirs(&dir));
}

#[test]
fn a_restarted_supervisor_adopts_kept_jobs_and_removes_other_leftovers() {
    let mut h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let kept = run(&mut c, &s, "(sleep 1000 &); true", 10_000);
    let kept_pid = kept["survivors"][0]["pid"].as_u64().unwrap();
    c.call("keep", json!({"session": s, "job": kept["job"], "name": "keeper"})).unwrap();
    let stray = run(&mut c, &s, "(sleep 1000 &); true", 10_000);
    let stray_pid = stray["survivors"][0]["pid"].as_u64().unwrap();
    let d = describe(&mut c, &s);
    let (sup, front) = (d["supervisor"]["pid"].as_u64().unwrap(), d["front"]["pid"].as_u64().unwrap());
    let session_dir = PathBuf::from(d["sessions"][0]["cgroup"].as_str().unwrap());
    drop(c);

    // SIGKILL of `heddle up` (our child) first, so it cannot restart the supervisor and clean up before the
    // assertions below (it restarts one that dies unasked after 100 ms), then of the supervisor (a process
    // of this test's stack, by its pid): the front exits after it.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(h.up_pid()).expect("a pid fits in i32")),
        nix::sys::signal::SIGKILL,
    )
    .unwrap();
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(sup as i32), nix::sys::signal::SIGKILL);
    assert!(eventually(Duration::from_secs(10), || !alive(front) && !alive(sup)), "the front follows its supervisor");
    h.stop();
    assert!(alive(kept_pid) && alive(stray_pid) && session_dir.exists(), "leftovers before the restart");

    let mut sup2 = Command::new(bin_dir().join("heddle-supervisor"))
        .arg("--socket")
        .arg(&h.socket)
        .arg("--state-dir")
        .arg(&h.state_dir)
        .arg("--cgroup-root")
        .arg(&h.cgroup_root)
        .spawn()
        .unwrap();
    let mut c = None;
    assert!(eventually(Duration::from_secs(20), || {
        c = heddle_tests::Client::connect(&h.socket).ok();
        c.as_mut().is_some_and(|c| c.call("describe", json!({})).is_ok())
    }));
    let mut c = c.unwrap();
    let listed = c.call("kept", json!({})).unwrap();
    assert_eq!(listed["kept"][0]["name"], "keeper", "{listed}");
    assert_eq!(listed["kept"][0]["adopted"], true, "{listed}");
    assert_eq!(listed["kept"][0]["procs"][0]["pid"], kept_pid, "{listed}");
    assert!(alive(kept_pid), "the kept job survived the restart");
    assert!(eventually(Duration::from_secs(5), || !alive(stray_pid)), "the stray daemon was killed");
    assert!(!session_dir.exists(), "the leftover session subtree was removed");
    c.call("kept.kill", json!({"name": "keeper"})).unwrap();
    assert!(eventually(Duration::from_secs(5), || !alive(kept_pid)));

    // Our own child, by its pid.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(sup2.id()).expect("a pid fits in i32")),
        nix::sys::signal::SIGTERM,
    )
    .unwrap();
    assert!(sup2.wait().unwrap().success());
}
