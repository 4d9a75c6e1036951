//! The launcher's spawn path end to end (issues 4 and 5): `describe` says how the worker creates and
//! places jobs (clone3 vfork-style, fork-style, or the `cgroup.procs` fallback), the jobs really start in
//! their cgroup and sandbox, and a failure between clone and exec still reaches the result precisely —
//! through the real binaries and socket, as root (CI).

use heddle_tests::{Client, Heddle};
use serde_json::{json, Value};

fn run(c: &mut Client, s: &Value, cmd: &str) -> Value {
    c.call("run", json!({"session": s, "cmd": cmd, "yield_ms": 60_000})).expect("run")
}

const VFORK_PATH: &str = "clone3 vfork-style (CLONE_VM|CLONE_VFORK), placed by CLONE_INTO_CGROUP";

fn spawn_path(c: &mut Client, s: &Value) -> Value {
    c.call("describe", json!({"session": s})).unwrap()["sessions"][0]["spawn_path"].clone()
}

#[test]
fn describe_names_the_vfork_style_clone3_and_failures_still_come_back() {
    let h = Heddle::start();
    let mut c = h.client();
    let cwd = h.project.join("work");
    std::fs::create_dir(&cwd).unwrap();
    let s = c.call("session.open", json!({"cwd": cwd})).unwrap()["session"].clone();
    // Before any job, only the session's pre-started shell (started right after the open, racing this
    // call) can have said how it was spawned.
    let before = spawn_path(&mut c, &s);
    assert!(before.is_null() || before == VFORK_PATH, "no job has started yet: {before}");

    let r = run(&mut c, &s, "grep ^0:: /proc/self/cgroup; grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status");
    assert_eq!(r["exit_code"], 0, "{r}");
    let view = r["view"].as_str().unwrap();
    // The job ran in the cgroup the front names for it (`jobs`: the session's `slot-<N>`).
    let dir = heddle_tests::job_cgroup(&mut c, &s, &r["job"]);
    let cgroup_line = view.lines().next().unwrap();
    assert!(cgroup_line.ends_with(&format!("/{}", dir.file_name().unwrap().to_string_lossy())), "{view}");
    assert!(dir.to_string_lossy().ends_with(cgroup_line.trim_start_matches("0::")), "{view} vs {dir:?}");
    assert!(view.contains("NoNewPrivs:\t1") && view.contains("Seccomp:\t2"), "{view}");
    assert_eq!(
        spawn_path(&mut c, &s),
        VFORK_PATH,
        "this x86_64 kernel (≥ 5.7) takes the vfork-style clone3 into the job's cgroup"
    );

    // The working directory vanishes: the vfork child's chdir fails and says so through the status pipe.
    std::fs::remove_dir(&cwd).unwrap();
    let r = run(&mut c, &s, "echo never");
    assert_eq!(r["state"], "failed", "{r}");
    let note = r["note"].as_str().unwrap_or_default();
    assert!(note.contains("cannot enter working directory") && note.contains("work"), "{r}");
    assert!(!r["view"].as_str().unwrap_or_default().contains("never"), "{r}");

    // The worker is unharmed (its memory was shared with the failed child) and keeps spawning.
    std::fs::create_dir(&cwd).unwrap();
    for i in 0..20 {
        let r = run(&mut c, &s, &format!("echo ok-{i}"));
        assert_eq!((r["exit_code"].as_i64(), r["view"].as_str()), (Some(0), Some(format!("ok-{i}\n").as_str())), "{r}");
    }
    assert_eq!(spawn_path(&mut c, &s), VFORK_PATH);
}
