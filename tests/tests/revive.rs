//! A worker's death (issue 7): its unfinished jobs are `lost` and their processes gone, and the next
//! `run` in the same session starts a new worker that carries on with the session's shell state, its
//! old output and its job numbering; a worker that keeps dying is not restarted forever.

use heddle_tests::{alive, eventually, read_stream, run_ok, Heddle};
use serde_json::{json, Value};
use std::time::Duration;

fn worker_pid(c: &mut heddle_tests::Client, s: &Value) -> i32 {
    let d = c.call("describe", json!({"session": s})).unwrap();
    d["sessions"][0]["worker"]["pid"].as_u64().expect("worker pid") as i32
}

fn sigkill(pid: i32) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL).unwrap();
}

/// The details of the audit rows of `op`.
fn audit_rows(h: &Heddle, op: &str) -> Vec<String> {
    let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let db = rusqlite::Connection::open_with_flags(h.state_dir.join("heddle.db"), flags).expect("open heddle.db");
    let mut q = db.prepare("SELECT detail FROM audit WHERE op = ?1").unwrap();
    q.query_map([op], |r| r.get(0)).unwrap().map(Result::unwrap).collect()
}

/// Start a job that prints a line and records its background process's pid, then SIGKILL the worker
/// and wait for the job to be reported `lost`; returns (job, pid of its process).
fn kill_worker_mid_job(h: &Heddle, c: &mut heddle_tests::Client, s: &Value, tag: &str) -> (Value, u64) {
    let pidfile = h.project.join(format!("pid-{tag}"));
    let cmd = format!("echo before-{tag}; sleep 1000 & echo $! > {}; wait", pidfile.display());
    let r = c.call("run", json!({"session": s, "cmd": cmd, "yield_ms": 300})).unwrap();
    assert_eq!(r["state"], "running", "{r}");
    assert!(eventually(Duration::from_secs(5), || std::fs::read_to_string(&pidfile).is_ok_and(|p| p.ends_with('\n'))));
    let pid: u64 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    assert!(alive(pid));
    sigkill(worker_pid(c, s));
    let w = c.call("wait", json!({"session": s, "job": r["job"], "yield_ms": 10_000})).unwrap();
    assert_eq!(w["state"], "lost", "{w}");
    (r["job"].clone(), pid)
}

#[test]
fn the_next_run_after_a_worker_sigkill_gets_a_new_worker_with_the_session_intact() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    std::fs::create_dir(h.project.join("sub")).unwrap();
    run_ok(&mut c, &s, "cd sub && export KEPT=yes");
    let old_worker = worker_pid(&mut c, &s);
    let counter = h.project.join("runs");
    let cmd = format!("echo x >> {}; echo partial; sleep 1000", counter.display());
    let r = c.call("run", json!({"session": s, "cmd": cmd, "yield_ms": 300})).unwrap();
    assert_eq!(r["state"], "running", "{r}");
    // The job's cgroup, pinned by its inode: a new worker may make a cgroup of the same name later.
    let inode = |p: &std::path::Path| std::fs::metadata(p).ok().map(|m| std::os::unix::fs::MetadataExt::ino(&m));
    let first_dir = heddle_tests::job_cgroup(&mut c, &s, &r["job"]);
    let first_ino = inode(&first_dir).expect("the running job's cgroup exists");
    let (lost, pid) = kill_worker_mid_job(&h, &mut c, &s, "a");
    assert!(r["job"].as_u64() < lost.as_u64());
    // Both unfinished jobs are lost, and their processes and job cgroups are gone.
    let w = c.call("wait", json!({"session": s, "job": r["job"], "yield_ms": 0})).unwrap();
    assert_eq!(w["state"], "lost", "{w}");
    assert!(eventually(Duration::from_secs(5), || !alive(pid)), "the lost job's process {pid} is gone");
    // The old worker's session subtree went with it (a new worker may already have made cgroups of the
    // same names: other inodes).
    assert!(
        eventually(Duration::from_secs(5), || inode(&first_dir) != Some(first_ino)),
        "job {}'s cgroup {first_dir:?} was removed",
        r["job"]
    );
    let lost_dir = heddle_tests::job_cgroup(&mut c, &s, &lost);
    assert!(!heddle_tests::pids_of(&lost_dir).contains(&(pid as u32)), "job {lost}'s process left its cgroup");
    // The next run in the same session works, in a new worker, with the shell state made before.
    let out = run_ok(&mut c, &s, "pwd; echo $KEPT");
    assert_eq!(out, format!("{}/sub\nyes\n", h.project.display()));
    let new_worker = worker_pid(&mut c, &s);
    assert_ne!(new_worker, old_worker);
    assert!(!alive(old_worker as u64));
    // Nothing was re-run, the lost jobs' output so far is still readable, and job ids keep increasing.
    assert_eq!(std::fs::read_to_string(&counter).unwrap(), "x\n", "the lost job was not re-run");
    assert_eq!(read_stream(&mut c, &s, &r["job"], "stdout"), b"partial\n");
    assert_eq!(read_stream(&mut c, &s, &lost, "stdout"), b"before-a\n");
    let next = c.call("run", json!({"session": s, "cmd": "true", "yield_ms": 10_000})).unwrap();
    assert!(next["job"].as_u64().unwrap() > lost.as_u64().unwrap() + 1, "{next}");
    let jobs = c.call("jobs", json!({"session": s})).unwrap().to_string();
    assert!(jobs.contains("\"lost\""), "{jobs}");
    // The revival is in the audit log; describe shows the session live again.
    let audited = eventually(Duration::from_secs(10), || audit_rows(&h, "worker revived").len() == 1);
    assert!(audited, "{:?}", audit_rows(&h, "worker revived"));
    assert!(audit_rows(&h, "worker revived")[0].contains("worker died"));
    let d = c.call("describe", json!({"session": s})).unwrap();
    assert_eq!(d["sessions"][0]["state"], "live", "{d}");
    // Reattaching by name works too.
    let again = c.call("session.open", json!({"name": s})).unwrap();
    assert_eq!(again["attached"], true, "{again}");
}

#[test]
fn a_worker_that_keeps_dying_is_not_restarted_forever() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    for round in 0..3 {
        kill_worker_mid_job(&h, &mut c, &s, &format!("r{round}"));
        assert_eq!(run_ok(&mut c, &s, "echo back"), "back\n", "revival {round}");
    }
    kill_worker_mid_job(&h, &mut c, &s, "last");
    let e = c.call("run", json!({"session": s, "cmd": "true"})).unwrap_err();
    assert_eq!(e.code(), Some(-32003), "{e}");
    assert!(e.to_string().contains("already been restarted 3 times"), "{e}");
    // The session can still be closed, and a new one works.
    c.call("session.close", json!({"session": s})).unwrap();
    let s2 = h.open_session(&mut c);
    assert_eq!(run_ok(&mut c, &s2, "echo fresh"), "fresh\n");
}

#[test]
fn a_persistent_session_gets_a_new_shell_with_its_state_after_its_worker_dies() {
    let h = Heddle::start();
    let mut c = h.client();
    let r = c.call("session.open", json!({"name": "keep", "cwd": h.project, "persistent": true})).unwrap();
    assert_eq!(r["persistent"], true, "{r}");
    let s = json!("keep");
    std::fs::create_dir(h.project.join("deep")).unwrap();
    run_ok(&mut c, &s, "cd deep; export MARK=still");
    let (lost, _) = kill_worker_mid_job(&h, &mut c, &s, "p");
    let out = run_ok(&mut c, &s, "pwd; echo $MARK");
    assert_eq!(out, format!("{}/deep\nstill\n", h.project.display()));
    let d = c.call("describe", json!({"session": s})).unwrap();
    assert_eq!(d["sessions"][0]["persistent"], true, "{d}");
    assert_eq!(read_stream(&mut c, &s, &lost, "stdout"), b"before-p\n");
}

#[test]
fn closing_a_session_whose_worker_died_reports_the_teardown_then_verified_empty() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    // The front learned of the death (the job is `lost`); no `run` followed, so no new worker started.
    let (_, pid) = kill_worker_mid_job(&h, &mut c, &s, "closed");
    let d = c.call("describe", json!({"session": s})).unwrap();
    assert_eq!(d["sessions"][0]["state"], "lost", "{d}");
    assert!(eventually(Duration::from_secs(5), || !alive(pid)), "the job's process {pid} went with the worker");
    // The supervisor ended the session's cgroups at the death (and forgot it): the close says what that
    // teardown found, not that nobody confirmed.
    let closed = c.call("session.close", json!({"session": s})).unwrap();
    assert_eq!(closed["verified_empty"], true, "{closed}");
    let note = closed["note"].as_str().unwrap_or_default();
    assert!(note.contains("the session's worker died (killed by signal 9)"), "{closed}");
    assert!(note.contains("ended the session's cgroups then and verified them empty"), "{closed}");
    let survivors = closed["survivors"].as_array().unwrap();
    assert!(survivors.iter().any(|p| p["pid"] == pid), "the job's process is reported killed: {closed}");
    let e = c.call("describe", json!({"session": s})).unwrap_err();
    assert_eq!(e.code(), Some(-32001), "the session is forgotten (unknown_session): {e}");
}

/// A job lost with its worker keeps the duration it had when it was lost, even when the new worker
/// came much later and a front takeover rebuilt the session since (the journal said when the worker
/// was replaced, not when the jobs were lost).
#[test]
fn a_job_lost_with_its_worker_keeps_its_duration_across_a_takeover() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = json!("died");
    c.call("session.open", json!({"name": "died", "cwd": h.project})).unwrap();
    let r = c.call("run", json!({"session": s, "cmd": "sleep 1000", "yield_ms": 300})).unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(worker_pid(&mut c, &s)), nix::sys::signal::SIGKILL).unwrap();
    let lost =
        |c: &mut heddle_tests::Client| c.call("wait", json!({"session": s, "job": r["job"], "yield_ms": 0})).unwrap();
    assert!(eventually(Duration::from_secs(10), || lost(&mut c)["state"] == "lost"), "the job is lost with its worker");
    let then = lost(&mut c)["duration_ms"].as_f64().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    run_ok(&mut c, &s, "true"); // a new worker, 1.5 s after the loss
    let front = c.call("describe", json!({})).unwrap()["front"]["pid"].as_u64().unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(i32::try_from(front).unwrap()), nix::sys::signal::SIGKILL)
        .unwrap();
    let new_front = || {
        let mut c = heddle_tests::Client::connect(&h.socket).ok()?;
        c.call("describe", json!({})).ok()?["front"]["pid"].as_u64().filter(|p| *p != front)
    };
    assert!(eventually(Duration::from_secs(30), || new_front().is_some()), "a new front answers");
    let mut c = h.client();
    let w = lost(&mut c);
    let now = w["duration_ms"].as_f64().unwrap();
    assert!((now - then).abs() < 200.0, "lost after {then} ms, not when the worker was replaced: {w}");
}
