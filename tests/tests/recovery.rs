//! Front crash recovery end to end: the front is SIGKILLed while jobs run; the supervisor starts a new
//! one, hands it the live sessions, and the new front answers `wait` and `output` for jobs started
//! before the crash, with every byte, and honours idempotency keys given before it. A SIGKILLed supervisor
//! is started again by `heddle up`; its session is gone, and a retry reports the job `lost` without
//! running it again.

use heddle_tests::{eventually, read_stream, Heddle};
use serde_json::{json, Value};
use std::time::Duration;

fn front_pid(h: &Heddle) -> Option<u64> {
    let mut c = heddle_tests::Client::connect(&h.socket).ok()?;
    c.call("describe", json!({})).ok()?["front"]["pid"].as_u64()
}

/// SIGKILL the front and wait until a new one answers.
fn kill_front(h: &Heddle) {
    let old = front_pid(h).expect("the front answers describe");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(old as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    assert!(
        eventually(Duration::from_secs(30), || front_pid(h).is_some_and(|p| p != old)),
        "a new front answers after the old one was killed"
    );
}

fn expected_pattern(len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 16);
    let mut i = 1u64;
    while out.len() < len {
        out.extend_from_slice(format!("{i}\n").as_bytes());
        i += 1;
    }
    out.truncate(len);
    out
}

#[test]
fn a_killed_front_loses_no_byte_of_a_50_mib_job_and_answers_wait() {
    let mut h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let file = h.project.join("keyed.txt");
    let keyed = format!("echo line >> {}", file.display());
    let first = c.call("run", json!({"session": s, "cmd": keyed, "idempotency_key": "k", "yield_ms": 10000})).unwrap();
    assert_eq!(first["exit_code"], 0, "{first}");
    // The big job writes its first 25 MiB, then waits (for a file the test makes after the crash) before
    // the rest: so the front is certainly killed mid-stream, with bytes behind it and bytes still to come.
    // `dd iflag=fullblock` reads exactly what it writes, so the stream stays one unbroken pattern.
    let go = h.project.join("go");
    let big_cmd = format!(
        "seq 1 20000000 | head -c 52428800 | {{ dd bs=1048576 count=25 iflag=fullblock status=none; \
         while [ ! -e {} ]; do sleep 0.02; done; cat; }}",
        go.display()
    );
    let big = c.call("run", json!({"session": s, "cmd": big_cmd, "yield_ms": 0})).unwrap();
    let slow = c.call("run", json!({"session": s, "cmd": "sleep 1; echo done", "yield_ms": 0})).unwrap();
    let mid_stream = eventually(Duration::from_secs(60), || {
        let r = c.call("wait", json!({"session": s, "job": big["job"], "yield_ms": 0})).unwrap();
        r["state"] == "running" && r["stdout_bytes"].as_u64() == Some(25 << 20)
    });
    assert!(mid_stream, "the big job wrote its first half and waits, running");
    kill_front(&h);
    std::fs::write(&go, "").unwrap();
    let mut c = h.client();
    let r = c.call("wait", json!({"session": s, "job": big["job"], "yield_ms": 120000})).unwrap();
    assert_eq!((r["state"].as_str(), r["exit_code"].as_i64()), (Some("exited"), Some(0)), "{r}");
    let out = read_stream(&mut c, &s, &big["job"], "stdout");
    assert_eq!(out.len(), 52_428_800, "every byte is stored once");
    assert!(out == expected_pattern(52_428_800), "the bytes are the job's, in order");
    let r = c.call("wait", json!({"session": s, "job": slow["job"], "yield_ms": 30000})).unwrap();
    assert_eq!((r["state"].as_str(), r["exit_code"].as_i64()), (Some("exited"), Some(0)), "{r}");
    assert_eq!(read_stream(&mut c, &s, &slow["job"], "stdout"), b"done\n");
    let again = c.call("run", json!({"session": s, "cmd": keyed, "idempotency_key": "k", "yield_ms": 10000})).unwrap();
    assert_eq!(again["receipt"]["id"], first["receipt"]["id"], "{again}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "line\n", "never run twice");
    let next = c.call("run", json!({"session": s, "cmd": "echo after", "yield_ms": 10000})).unwrap();
    let ids: Vec<&Value> = vec![&first["job"], &big["job"], &slow["job"]];
    assert!(ids.iter().all(|id| id.as_u64() < next["job"].as_u64()), "job ids are not reused: {next}");
    assert_eq!(next["exit_code"], 0, "{next}");
    h.stop();
}

fn supervisor_pid(h: &Heddle) -> Option<u64> {
    let mut c = heddle_tests::Client::connect(&h.socket).ok()?;
    c.call("describe", json!({})).ok()?["supervisor"]["pid"].as_u64()
}

/// Every pid in the cgroup tree under `dir`.
fn cgroup_pids(dir: &std::path::Path) -> Vec<u64> {
    let mut pids: Vec<u64> = std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            pids.extend(cgroup_pids(&e.path()));
        }
    }
    pids
}

#[test]
fn a_killed_supervisor_is_restarted_and_nothing_is_run_again() {
    let h = Heddle::start();
    let mut c = h.client();
    c.call("session.open", json!({"name": "sup", "cwd": h.project})).unwrap();
    let file = h.project.join("once.txt");
    let cmd = format!("echo x >> {}; sleep 1000", file.display());
    let run = json!({"session": "sup", "cmd": cmd, "idempotency_key": "sk", "yield_ms": 0});
    let first = c.call("run", run.clone()).unwrap();
    assert!(eventually(Duration::from_secs(10), || std::fs::read_to_string(&file).is_ok_and(|s| s == "x\n")));
    let sleeping = eventually(Duration::from_secs(10), || {
        cgroup_pids(&h.cgroup_root).iter().any(|p| {
            std::fs::read_to_string(format!("/proc/{p}/cmdline")).is_ok_and(|c| c.starts_with("sleep\x001000"))
        })
    });
    assert!(sleeping, "the job's sleep runs in heddle's cgroup tree");
    let job_pids = cgroup_pids(&h.cgroup_root);
    let old = supervisor_pid(&h).expect("describe names the supervisor");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(old as i32), nix::sys::signal::SIGKILL).unwrap();
    assert!(
        eventually(Duration::from_secs(30), || supervisor_pid(&h).is_some_and(|p| p != old)),
        "a new supervisor answers after the old one was killed"
    );
    assert!(
        eventually(Duration::from_secs(10), || job_pids.iter().all(|p| !heddle_tests::alive(*p))),
        "the session's processes (the sleep among them) are gone: {job_pids:?}"
    );
    let mut c = h.client();
    c.call("session.open", json!({"name": "sup", "cwd": h.project})).unwrap();
    let again = c.call("run", run).unwrap();
    assert_eq!(again["receipt"]["id"], first["receipt"]["id"], "{again}");
    assert_eq!(again["receipt"]["replayed"], true, "{again}");
    assert_eq!(again["state"], "lost", "the job did not survive the supervisor: {again}");
    // Every job of the session has ended, so a run made again would have written by now.
    let settled = |c: &mut heddle_tests::Client, s: &str| {
        c.call("jobs", json!({"session": s}))
            .is_ok_and(|j| j["jobs"].as_array().is_some_and(|a| a.iter().all(|j| j["state"] != "running")))
    };
    assert!(eventually(Duration::from_secs(10), || settled(&mut c, "sup")), "the session's jobs ended");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x\n", "nothing was run again");
    let looked = c.call("receipt", json!({"idempotency_key": "sk", "session": "sup"})).unwrap();
    assert_eq!(looked["receipt"]["id"], first["receipt"]["id"], "{looked}");
}

#[test]
fn a_supervisor_that_cannot_start_is_reported_not_restarted() {
    heddle_tests::require_root();
    let dir = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    let out = std::process::Command::new(heddle_tests::bin_dir().join("heddle"))
        .args(["up", "--socket-group", "no-such-group-heddle-test", "--socket"])
        .arg(dir.path().join("run/heddle.sock"))
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .arg("--cgroup-root")
        .arg(heddle_tests::cgroup2_mount().join(format!("heddle-e2e-{}-nostart", std::process::id())))
        .env_remove("HEDDLE_SOCKET")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{said}");
    assert!(said.contains("no group named"), "{said}");
    assert!(!said.contains("starting it again"), "{said}");
    assert!(started.elapsed() < Duration::from_secs(10), "no restart loop");
}
