//! Closed escapes (the security issue "Close the escapes"), end to end through the real stack: a session's
//! shell state never shows in a process's command line or environment; secret-shaped output never
//! reaches a model-facing answer; small answers that told one uid about another's.

use heddle_tests::{eventually, job_cgroup, pids_of, run_ok, Heddle};
use serde_json::json;
use std::collections::BTreeSet;
use std::time::Duration;

/// Every process heddle made: the descendants of `heddle up` (supervisor, front, workers, jobs) and every
/// member of every cgroup under the stack's cgroup root (jobs, spares, kept jobs).
fn heddle_processes(h: &Heddle) -> BTreeSet<u32> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![h.up_pid()];
    while let Some(p) = todo.pop() {
        if seen.insert(p) {
            todo.extend(Heddle::children(p));
        }
    }
    let mut dirs = vec![h.cgroup_root.clone()];
    while let Some(d) = dirs.pop() {
        seen.extend(pids_of(&d));
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push(e.path());
            }
        }
    }
    seen
}

/// `/proc/PID/cmdline` and `/proc/PID/environ` (empty once the process is gone).
fn args_and_env(pid: u32) -> (String, String) {
    let read =
        |f: &str| String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/{f}")).unwrap_or_default()).into_owned();
    (read("cmdline").replace('\0', " "), read("environ").replace('\0', " "))
}

#[test]
fn session_state_never_shows_in_a_command_line_or_environment() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let set = "SECRET_X=canary123; canary_fn() { echo 'canary-fn-body'; }; alias tok='echo Authorization: Bearer canary-alias'";
    run_ok(&mut c, &s, set);
    assert_eq!(
        run_ok(&mut c, &s, "echo $SECRET_X; canary_fn; shopt -s expand_aliases; alias tok"),
        "canary123\ncanary-fn-body\nalias tok='echo Authorization: Bearer canary-alias'\n"
    );
    let r = c.call("run", json!({"session": s, "cmd": "sleep 30", "yield_ms": 300})).unwrap();
    assert_eq!(r["state"], "running", "{r}");
    let cgroup = job_cgroup(&mut c, &s, &r["job"]);
    // The job's bash and its `sleep`, and (once the worker is idle) the spare for the next job, which
    // restored the same state: all of them must be among the processes looked at.
    let mut looked = std::collections::BTreeMap::new();
    let found_all = eventually(Duration::from_secs(30), || {
        for pid in heddle_processes(&h) {
            let (args, env) = args_and_env(pid);
            assert!(!args.contains("canary") && !env.contains("canary"), "pid {pid} shows the state:\n{args}\n{env}");
            if !args.is_empty() {
                looked.insert(pid, args);
            }
        }
        let job = pids_of(&cgroup);
        let sleeping = job.iter().any(|p| args_and_env(*p).0 == "sleep 30 ");
        let shells = looked.values().filter(|a| a.starts_with("bash ") && a.contains("__heddle")).count();
        sleeping && shells >= 2
    });
    assert!(found_all, "the job's bash, its sleep and a spare shell were seen: {looked:#?}");
    c.call("kill", json!({"session": s, "job": r["job"]})).unwrap();
    assert_eq!(run_ok(&mut c, &s, "echo $SECRET_X; canary_fn"), "canary123\ncanary-fn-body\n", "still carried");
}
