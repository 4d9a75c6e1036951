//! A kept job that keeps writing to its stdout and stderr after its session closed (issue 4): it is
//! not killed by SIGPIPE, what it writes lands in its kept log (`kept` lists it, `kept.log` shows its
//! end, screened), and `kept.kill` ends the job and its drainer — through the real binaries, as root.

use heddle_tests::{alive, eventually, Heddle};
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

fn pids_in(dir: &Path) -> Vec<u32> {
    let text = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    text.lines().filter_map(|l| l.parse().ok()).collect()
}

/// The job's main process: the one member whose parent is not a member (its `sleep` children, and
/// their not-yet-exec'd forks, come and go).
fn main_process(dir: &Path) -> u32 {
    let members = pids_in(dir);
    let ppid = |p: u32| {
        let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
        stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok())
    };
    let roots: Vec<u32> =
        members.iter().copied().filter(|p| ppid(*p).is_some_and(|pp| !members.contains(&pp))).collect();
    assert_eq!(roots.len(), 1, "one main process among {members:?}");
    roots[0]
}

fn kept_entry(c: &mut heddle_tests::Client, name: &str) -> Value {
    let all = c.call("kept", json!({})).unwrap();
    all["kept"].as_array().unwrap().iter().find(|k| k["name"] == name).cloned().unwrap_or(Value::Null)
}

#[test]
fn a_kept_job_writing_after_its_session_closed_lives_on_and_its_output_is_kept() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let cmd = "i=0; while :; do echo \"tick $i\"; echo \"tock $i\" >&2; i=$((i+1)); sleep 0.02; done";
    let r = c.call("run", json!({"session": s, "cmd": cmd, "keep": true, "name": "ticker", "yield_ms": 200})).unwrap();
    assert_eq!(r["state"], "running", "{r}");
    let kept_dir = h.cgroup_root.join("kept/ticker");
    assert!(eventually(Duration::from_secs(5), || !pids_in(&kept_dir).is_empty()), "the job moved to kept/ticker");
    let job_pids = [main_process(&kept_dir)];

    // A call waiting on the kept job when the session closes answers at once, and neither it nor the
    // close says the job was killed: it runs on in kept/ticker.
    let waiter = {
        let mut w = h.client();
        let (s, job) = (s.clone(), r["job"].clone());
        std::thread::spawn(move || {
            let t = std::time::Instant::now();
            let r = w.call("wait", json!({"session": s, "job": job, "yield_ms": 30_000})).unwrap();
            (r, t.elapsed())
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let closed = c.call("session.close", json!({"session": s})).unwrap();
    assert_eq!(closed["kept"], json!(["ticker"]), "{closed}");
    let ended: Vec<&Value> =
        closed["announcements"].as_array().unwrap().iter().filter(|a| a["job"] == r["job"]).collect();
    assert!(ended.is_empty(), "the close does not announce the kept job as ended: {closed}");
    let (waited, took) = waiter.join().unwrap();
    assert!(took < Duration::from_secs(20), "the wait answered when the session closed, not at its yield: {took:?}");
    assert_eq!(waited["state"], "running", "the kept job was not killed by the close: {waited}");
    assert!(waited["signal"].is_null(), "{waited}");
    let notes = waited["note"].to_string();
    assert!(notes.contains("kept as ticker: it runs on outside the session"), "{waited}");
    let log = h.state_dir.join("kept/ticker.log");
    let grew = |at_least: u64| std::fs::metadata(&log).map(|m| m.len() > at_least).unwrap_or(false);
    assert!(eventually(Duration::from_secs(5), || grew(0)), "the kept log appears at {}", log.display());
    std::thread::sleep(Duration::from_millis(500));
    let size = std::fs::metadata(&log).unwrap().len();
    let drain = pids_in(&kept_dir.join("drain"));
    assert!(
        eventually(Duration::from_secs(5), || grew(size)),
        "it keeps growing: the writer was not killed (job {job_pids:?} alive: {}, drainer {drain:?} alive: {})",
        job_pids.iter().all(|p| alive(u64::from(*p))),
        drain.iter().all(|p| alive(u64::from(*p)))
    );
    assert!(job_pids.iter().all(|p| alive(u64::from(*p))), "no SIGPIPE: {job_pids:?} still run");

    let entry = kept_entry(&mut c, "ticker");
    assert_eq!(entry["log"].as_str(), log.to_str(), "{entry}");
    assert!(entry["log_bytes"].as_u64().unwrap() > 0, "{entry}");
    let listed: Vec<u64> = entry["procs"].as_array().unwrap().iter().map(|p| p["pid"].as_u64().unwrap()).collect();
    let drainers = pids_in(&kept_dir.join("drain"));
    assert_eq!(drainers.len(), 1, "one drainer, in kept/ticker/drain");
    assert!(!listed.contains(&u64::from(drainers[0])), "the job's listing leaves the drainer out: {entry}");
    let status = std::fs::read_to_string(format!("/proc/{}/status", drainers[0])).unwrap();
    assert!(status.contains("Uid:\t65534\t") && status.contains("NoNewPrivs:\t1"), "{status}");

    let tail = c.call("kept.log", json!({"name": "ticker", "tail_bytes": 4096})).unwrap();
    let text = tail["text"].as_str().unwrap();
    assert!(text.contains("tick ") && text.contains("tock "), "both streams are kept: {tail}");
    assert!(tail["offset"].as_u64().unwrap() > 0 || tail["bytes"].as_u64().unwrap() <= 4096, "{tail}");
    let e = c.call("kept.log", json!({"name": "nope"})).unwrap_err();
    assert!(format!("{e:?}").contains("no kept job named 'nope'"), "{e:?}");

    let killed = c.call("kept.kill", json!({"name": "ticker"})).unwrap();
    assert_eq!(killed["verified_empty"], true, "{killed}");
    assert!(eventually(Duration::from_secs(5), || !alive(u64::from(drainers[0]))), "the drainer ends with the job");
    assert!(job_pids.iter().all(|p| !alive(u64::from(*p))));
    assert!(!kept_dir.exists());
}

#[test]
fn a_kept_job_outlives_a_sigkilled_worker_without_sigpipe() {
    let h = Heddle::start();
    let mut c = h.client();
    let opened = c.call("session.open", json!({"cwd": h.project})).unwrap();
    let s = opened["session"].clone();
    let worker = opened["worker"]["pid"].as_u64().unwrap();
    let cmd = "i=0; while :; do echo \"beat $i\"; i=$((i+1)); sleep 0.02; done";
    let r = c.call("run", json!({"session": s, "cmd": cmd, "keep": true, "name": "beater", "yield_ms": 200})).unwrap();
    assert_eq!(r["state"], "running", "{r}");
    let kept_dir = h.cgroup_root.join("kept/beater");
    let bash = [main_process(&kept_dir)];

    // The worker is our stack's own process, named by the pid the server reported for this session.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(worker as i32), nix::sys::signal::SIGKILL).unwrap();
    let log = h.state_dir.join("kept/beater.log");
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    assert!(eventually(Duration::from_secs(5), || size(&log) > 0), "the kept log appears at {}", log.display());
    let first = size(&log);
    assert!(eventually(Duration::from_secs(5), || size(&log) > first), "it keeps growing after the worker died");
    assert!(alive(u64::from(bash[0])), "the kept job was not killed by SIGPIPE");
    let killed = c.call("kept.kill", json!({"name": "beater"})).unwrap();
    assert_eq!(killed["verified_empty"], true, "{killed}");
}

/// A job kept at its start that then fails (a server that cannot bind) is not left saying only that
/// its processes outlive the session: its result says it ended and that nothing of it holds its output.
#[test]
fn a_kept_job_that_ended_at_once_says_it_is_likely_not_running() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let r = c
        .call("run", json!({"session": s, "cmd": "sleep 0.3; echo cannot bind >&2; exit 3", "keep": true, "name": "failed", "yield_ms": 10_000}))
        .unwrap();
    assert_eq!((r["exit_code"].as_i64(), r["kept"].as_str()), (Some(3), Some("failed")), "{r}");
    let text = heddle_tests::text_form(&r);
    assert!(text.contains("kept job failed has ended, and no process of it holds its output any more"), "{text}");
    let _ = c.call("kept.kill", json!({"name": "failed"}));
    // A kept job still running says nothing of the kind.
    let r = c
        .call("run", json!({"session": s, "cmd": "sleep 30", "keep": true, "name": "alive", "yield_ms": 200}))
        .unwrap();
    assert!(!heddle_tests::text_form(&r).contains("has ended"), "{r}");
    assert_eq!(c.call("kept.kill", json!({"name": "alive"})).unwrap()["verified_empty"], true);
}
