//! `describe {session}` end to end: the version, the shell, the job environment (allowlist, PATH), live
//! jobs with liveness, and what changed in the session since it began.

use heddle_tests::Heddle;
use serde_json::json;

#[test]
fn describe_tells_env_live_jobs_and_changes() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    c.call("run", json!({"session": s, "cmd": "true", "yield_ms": 10000})).unwrap();
    let r = c.call("run", json!({"session": s, "cmd": "export DESCRIBED=1", "yield_ms": 10000})).unwrap();
    assert_eq!(r["exit_code"], 0, "{r}");
    let sleeping = c.call("run", json!({"session": s, "cmd": "sleep 30", "yield_ms": 100})).unwrap();
    let d = c.call("describe", json!({"session": s})).unwrap();
    assert_eq!(d["version"], env!("CARGO_PKG_VERSION"), "{d}");
    let f = &d["sessions"][0];
    assert!(f["shell"]["path"].as_str().is_some_and(|p| p.ends_with("bash")), "{f}");
    let env = &f["env"];
    let path = env["path"].as_str().unwrap_or_default();
    assert!(path.split(':').any(|p| p == "/usr/bin"), "{env}");
    assert!(env["allow"].as_array().unwrap().iter().any(|n| n == "PATH"), "{env}");
    assert!(env["set"]["TERM"].is_string(), "{env}");
    let live = f["live_jobs"].as_array().unwrap();
    assert_eq!(live.len(), 1, "{f}");
    assert_eq!((&live[0]["job"], live[0]["cmd"].as_str()), (&sleeping["job"], Some("sleep 30")), "{f}");
    assert!(live[0]["liveness"]["running_ms"].as_f64().is_some_and(|ms| ms > 0.0), "{f}");
    assert!(live[0]["liveness"]["pid"].as_u64().is_some(), "probed liveness: {f}");
    let changes = &f["changes"];
    assert_eq!(changes["jobs_run"], 3, "{changes}");
    assert_eq!(
        (changes["jobs_by_state"]["exited"].as_u64(), changes["jobs_by_state"]["running"].as_u64()),
        (Some(2), Some(1)),
        "{changes}"
    );
    assert!(changes["state_changes"].as_u64() >= Some(1), "{changes}");
    let last = changes["last_state_changes"].as_array().unwrap();
    assert!(
        last.iter().any(|c| c["job"] == r["job"] && c["change"].as_str().unwrap_or_default().contains("DESCRIBED")),
        "{changes}"
    );
    c.call("kill", json!({"session": s, "job": sleeping["job"]})).unwrap();
}

#[test]
fn heddles_processes_are_named_in_ps() {
    // The supervisor execs the front and the workers from fds it opened (`/proc/self/fd/N`), which
    // would leave the kernel naming them `N`: ps and top must say what they are.
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let d = c.call("describe", json!({"session": s})).unwrap();
    let comm = |pid: &serde_json::Value| {
        std::fs::read_to_string(format!("/proc/{}/comm", pid.as_u64().unwrap())).unwrap().trim_end().to_owned()
    };
    assert_eq!(comm(&d["front"]["pid"]), "heddle-front", "{d}");
    assert_eq!(comm(&d["sessions"][0]["worker"]["pid"]), "heddle-worker", "{d}");
}

/// A session's worker learns bash's version from the worker before it when bash is the same file, instead
/// of running a bash of its own (a fifth of a session's start in a burst of opens): the version it reports
/// is still the one its jobs get.
#[test]
fn a_later_worker_takes_the_bash_version_an_earlier_one_reported_for_the_same_file() {
    let h = Heddle::start();
    let mut c = h.client();
    let real = std::process::Command::new("/bin/bash")
        .args(["--noprofile", "--norc", "-c", "printf %s \"$BASH_VERSION\""])
        .output()
        .expect("run /bin/bash");
    let real = String::from_utf8(real.stdout).unwrap();
    assert!(!real.is_empty());
    let mut shells = Vec::new();
    for _ in 0..3 {
        let r = c.call("session.open", json!({"cwd": h.project})).expect("session.open");
        let job = c.call("run", json!({"session": r["session"], "cmd": "printf %s \"$BASH_VERSION\""})).unwrap();
        assert_eq!(job["view"], format!("{real}\n"), "the jobs' bash: {job}");
        let d = c.call("describe", json!({"session": r["session"]})).unwrap();
        assert_eq!(d["sessions"][0]["shell"], r["shell"], "describe says what session.open said: {d}");
        shells.push(r["shell"].clone());
    }
    let seen: Vec<(Option<&str>, Option<bool>)> =
        shells.iter().map(|s| (s["version"].as_str(), s["probed"].as_bool())).collect();
    assert_eq!(
        seen,
        [(Some(&*real), Some(true)), (Some(&*real), Some(false)), (Some(&*real), Some(false))],
        "the first worker runs bash; the next ones take its version: {shells:?}"
    );
}
