//! The kernel's promises end to end: receipts and idempotency (concurrent retries, retries after a
//! restart), shutdown refusing mutations while receipts answer, a database left by a killed front,
//! and a socket only root and its group can connect to (what another uid in that group reaches: cross_user.rs).

use heddle_tests::{eventually, Heddle};
use serde_json::{json, Value};
use std::os::unix::process::CommandExt;
use std::time::Duration;

fn appended_run(h: &Heddle, session: &str, file: &std::path::Path, key: &str) -> Value {
    let cmd = format!("echo line >> {}", file.display());
    let mut c = h.client();
    c.call("run", json!({"session": session, "cmd": cmd, "idempotency_key": key, "yield_ms": 10000})).expect("run")
}

#[test]
fn the_same_keyed_run_runs_once_concurrently_and_after_a_restart() {
    let mut h = Heddle::start();
    let mut c = h.client();
    c.call("session.open", json!({"name": "idem", "cwd": h.project})).unwrap();
    let file = h.project.join("once.txt");
    let answers: Vec<Value> = std::thread::scope(|scope| {
        let calls: Vec<_> = (0..4).map(|_| scope.spawn(|| appended_run(&h, "idem", &file, "k-1"))).collect();
        calls.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let ids: Vec<&Value> = answers.iter().map(|a| &a["receipt"]["id"]).collect();
    assert!(ids.iter().all(|id| *id == ids[0] && id.is_string()), "{answers:?}");
    assert_eq!(answers.iter().filter(|a| a["receipt"]["replayed"] == false).count(), 1, "{answers:?}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "line\n");
    h.restart(&[]);
    let mut c = h.client();
    c.call("session.open", json!({"name": "idem", "cwd": h.project})).unwrap();
    let again = appended_run(&h, "idem", &file, "k-1");
    assert_eq!((&again["receipt"]["id"], again["receipt"]["replayed"].as_bool()), (ids[0], Some(true)), "{again}");
    assert_eq!((again["job"].as_u64(), again["exit_code"].as_i64()), (Some(1), Some(0)), "{again}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "line\n", "never run twice");
    let looked = c.call("receipt", json!({"idempotency_key": "k-1", "session": "idem"})).unwrap();
    assert_eq!(&looked["receipt"]["id"], ids[0]);
    let e = c.call("run", json!({"session": "idem", "cmd": "echo other", "idempotency_key": "k-1"})).unwrap_err();
    assert_eq!(e.code(), Some(-32010), "{e:?}");
}

#[test]
fn during_shutdown_a_run_is_refused_while_receipts_answer() {
    let mut h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let first = c.call("run", json!({"session": s, "cmd": "echo hi"})).unwrap();
    let r = c.call("shutdown", json!({"grace_ms": 3000})).unwrap();
    assert_eq!(r["shutting_down"], true);
    let e = c.call("run", json!({"session": s, "cmd": "echo no"})).unwrap_err();
    assert_eq!(e.code(), Some(-32004), "{e:?}");
    let mut other = h.client();
    let found = other.call("receipt", json!({"id": first["receipt"]["id"]})).unwrap();
    assert_eq!(found["receipt"]["job"], 1);
    assert!(
        eventually(Duration::from_secs(20), || heddle_tests::Client::connect(&h.socket).is_err()),
        "the server goes away after the grace"
    );
    let st = h.stop();
    assert!(st.is_some_and(|s| s.success()), "heddle up exits 0 after the shutdown: {st:?}");
}

#[test]
fn a_database_left_by_a_killed_front_opens_cleanly_and_keeps_receipts() {
    let mut h = Heddle::start();
    let sup = Heddle::children(h.up_pid())[0];
    let front = Heddle::children(sup);
    assert_eq!(front.len(), 1, "before any session the front is the supervisor's only child");
    let front = front[0];
    let mut c = h.client();
    c.call("session.open", json!({"name": "burst", "cwd": h.project})).unwrap();
    let kept = c.call("run", json!({"session": "burst", "cmd": "true", "idempotency_key": "before"})).unwrap();
    let admitted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let burst = std::thread::spawn({
        let socket = h.socket.clone();
        let admitted = admitted.clone();
        move || {
            let mut c = heddle_tests::Client::connect(&socket).unwrap();
            for i in 0..10_000 {
                admitted.store(i, std::sync::atomic::Ordering::Relaxed);
                if c.call(
                    "run",
                    json!({"session": "burst", "cmd": "true", "idempotency_key": format!("b{i}"), "yield_ms": 0}),
                )
                .is_err()
                {
                    return i;
                }
            }
            10_000
        }
    });
    // Kill the front once the burst is well under way (keyed runs answered, more in flight).
    let under_way = eventually(Duration::from_secs(30), || admitted.load(std::sync::atomic::Ordering::Relaxed) >= 20);
    assert!(under_way, "the burst got going");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(front).expect("a pid fits in i32")),
        nix::sys::signal::SIGKILL,
    )
    .unwrap();
    let done = burst.join().unwrap();
    assert!(done > 0 && done < 10_000, "the burst was cut by the kill ({done} runs)");
    h.restart(&[]);
    let mut c = h.client();
    c.call("session.open", json!({"name": "burst", "cwd": h.project})).unwrap();
    let again = c.call("run", json!({"session": "burst", "cmd": "true", "idempotency_key": "before"})).unwrap();
    assert_eq!(again["receipt"]["id"], kept["receipt"]["id"], "{again}");
    assert!(eventually(Duration::from_secs(5), || c.call("describe", json!({})).is_ok()));
}

/// Run `heddle --json ARGS` against `h` as uid/gid 65534 (nobody/nogroup), in `session` if given.
fn as_nobody(h: &Heddle, session: Option<&str>, args: &[&str]) -> std::process::Output {
    std::process::Command::new(heddle_tests::bin_dir().join("heddle"))
        .arg("--socket")
        .arg(&h.socket)
        .args(session.map(|s| ["--session", s]).into_iter().flatten())
        .arg("--json")
        .args(args)
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap()
}

fn said(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[test]
fn a_client_outside_the_socket_group_is_refused_at_connect() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let s = s.as_str().unwrap();
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let sock = std::fs::symlink_metadata(&h.socket).unwrap();
    assert_eq!((sock.permissions().mode() & 0o777, sock.uid(), sock.gid()), (0o660, 0, 0));
    let dir = std::fs::metadata(h.socket.parent().unwrap()).unwrap();
    assert_eq!((dir.permissions().mode() & 0o777, dir.uid(), dir.gid()), (0o750, 0, 0));
    let jobs = as_nobody(&h, Some(s), &["jobs"]);
    assert!(!jobs.status.success(), "{jobs:?}");
    assert!(said(&jobs).to_lowercase().contains("permission denied"), "a clear refusal: {}", said(&jobs));
}
