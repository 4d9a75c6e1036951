//! A server holds its cgroup root and its state directory alone. A second `heddle up` on either (the
//! default cgroup root, for anyone who runs it twice) refuses before touching anything, naming the
//! holder; it used to start, take the first server's sessions for leftovers of a crash, kill their jobs
//! and workers, delete their temp dirs and remove the root, after which the first could open no session.

use heddle_tests::{alive, eventually, run_ok, up_expecting_refusal, Heddle};
use serde_json::json;
use std::time::Duration;

/// Start A, keep a `sleep 300` running in a session, and return A, the session, the job and its pid.
fn first_with_a_running_job() -> (Heddle, heddle_tests::Client, serde_json::Value, serde_json::Value, u64) {
    let a = Heddle::start();
    let mut c = a.client();
    let s = a.open_session(&mut c);
    let pidfile = a.project.join("sleep.pid");
    let cmd = format!("sleep 300 & echo $! > {}; wait", pidfile.display());
    let r = c.call("run", json!({"session": s, "cmd": cmd, "yield_ms": 200})).unwrap();
    assert_eq!(r["state"], "running", "{r}");
    assert!(eventually(Duration::from_secs(5), || std::fs::read_to_string(&pidfile).is_ok_and(|p| p.ends_with('\n'))));
    let pid: u64 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    assert!(alive(pid));
    (a, c, s, r["job"].clone(), pid)
}

/// A is untouched: the job still runs, and A still opens sessions and runs jobs.
fn first_still_serves(
    a: &Heddle,
    c: &mut heddle_tests::Client,
    s: &serde_json::Value,
    job: &serde_json::Value,
    pid: u64,
) {
    assert!(alive(pid), "the first server's job process was killed");
    let w = c.call("wait", json!({"session": s, "job": job, "yield_ms": 0})).unwrap();
    assert_eq!(w["state"], "running", "{w}");
    assert_eq!(run_ok(c, s, "echo still"), "still\n");
    let mut c2 = a.client();
    let s2 = a.open_session(&mut c2);
    assert_eq!(run_ok(&mut c2, &s2, "echo new"), "new\n");
}

#[test]
fn a_second_server_on_the_same_cgroup_root_refuses_and_leaves_the_first_alone() {
    let (a, mut c, s, job, pid) = first_with_a_running_job();
    let other = tempfile::Builder::new().prefix("heddle-e2e-b-").tempdir_in("/tmp").unwrap();
    let b_socket = other.path().join("run/b.sock");
    let b = up_expecting_refusal(&b_socket, &other.path().join("state"), &a.cgroup_root);
    assert!(!b.status.success(), "{b:?}");
    assert_eq!(b.status.code(), Some(3), "a start that cannot succeed exits 3: {b:?}");
    let sup_pid = c.call("describe", json!({})).unwrap()["supervisor"]["pid"].clone();
    assert!(b.stderr.contains(&a.cgroup_root.display().to_string()), "{}", b.stderr);
    assert!(b.stderr.contains(&a.socket.display().to_string()), "names the holder's socket: {}", b.stderr);
    assert!(b.stderr.contains(&format!("pid {sup_pid}")), "names the holder's pid ({sup_pid}): {}", b.stderr);
    assert!(!b_socket.exists(), "the refused server bound no socket");
    first_still_serves(&a, &mut c, &s, &job, pid);
}

#[test]
fn a_second_server_on_the_same_state_dir_refuses_and_leaves_the_first_alone() {
    let (a, mut c, s, job, pid) = first_with_a_running_job();
    let other = tempfile::Builder::new().prefix("heddle-e2e-b-").tempdir_in("/tmp").unwrap();
    let b_root = heddle_tests::cgroup2_mount().join(format!("heddle-e2e-b-{}", std::process::id()));
    let b_socket = other.path().join("b.sock");
    let b = up_expecting_refusal(&b_socket, &a.state_dir, &b_root);
    let left = b_root.exists();
    heddle_tests::remove_cgroup_tree(&b_root);
    assert_eq!(b.status.code(), Some(3), "{b:?}");
    assert!(b.stderr.contains(&a.state_dir.display().to_string()), "{}", b.stderr);
    assert!(b.stderr.contains(&a.socket.display().to_string()), "names the holder's socket: {}", b.stderr);
    assert!(!left, "the refused server left its cgroup root behind");
    assert!(!b_socket.exists(), "the refused server bound no socket");
    first_still_serves(&a, &mut c, &s, &job, pid);
}

#[test]
fn a_cgroup_root_removed_under_a_running_server_is_made_again_at_the_next_open() {
    let a = Heddle::start();
    let mut c = a.client();
    let s = a.open_session(&mut c);
    c.call("session.close", json!({"session": s})).unwrap();
    // Empty now (no session, no kept job): an operator's `rmdir` succeeds.
    heddle_tests::remove_cgroup_tree(&a.cgroup_root);
    assert!(!a.cgroup_root.exists());
    let s = a.open_session(&mut c);
    assert_eq!(run_ok(&mut c, &s, "echo back"), "back\n");
}
