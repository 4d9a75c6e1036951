//! Exactly-once across a front SIGKILL: a burst of keyed `run`s is cut by SIGKILLing the front (its pid
//! from `describe`); once the supervisor has started a new front, every key is retried with the same
//! parameters. Each job appends its key to one file, so the file counts executions: every key must
//! appear exactly once — an answered key is never run again, an unanswered one runs on its retry.

use heddle_tests::{eventually, Client, Heddle};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

const KEYS: usize = 600;
const CLIENTS: usize = 6;
/// Answers seen before the front is killed (the burst goes on meanwhile).
const KILL_AFTER: usize = 150;

fn front_pid(socket: &std::path::Path) -> Option<u64> {
    let mut c = Client::connect(socket).ok()?;
    c.call("describe", json!({})).ok()?["front"]["pid"].as_u64()
}

fn params(session: &Value, file: &std::path::Path, key: usize, yield_ms: u64) -> Value {
    json!({
        "session": session,
        "cmd": format!("echo k{key} >> {}", file.display()),
        "idempotency_key": format!("k{key}"),
        "yield_ms": yield_ms,
    })
}

#[test]
fn keyed_runs_cut_by_a_front_sigkill_run_exactly_once_after_retries() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let file = h.project.join("executions.txt");
    let old = front_pid(&h.socket).expect("the front answers describe");
    let answered = Arc::new(AtomicUsize::new(0));
    let killer = {
        let answered = answered.clone();
        std::thread::spawn(move || {
            assert!(
                eventually(Duration::from_secs(60), || answered.load(Ordering::Relaxed) >= KILL_AFTER),
                "the burst reached {KILL_AFTER} answers"
            );
            let pid = nix::unistd::Pid::from_raw(old as i32);
            nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
        })
    };
    let burst: Vec<_> = (0..CLIENTS)
        .map(|t| {
            let (socket, s, file, answered) = (h.socket.clone(), s.clone(), file.clone(), answered.clone());
            std::thread::spawn(move || {
                let mut c = Client::connect(&socket).expect("connect");
                let mut mine = Vec::new();
                for key in (t..KEYS).step_by(CLIENTS) {
                    match c.call("run", params(&s, &file, key, 0)) {
                        Ok(r) => {
                            mine.push((key, r["job"].as_u64().expect("a job id")));
                            answered.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(_) => break, // the front died under this call
                    }
                }
                mine
            })
        })
        .collect();
    let first: BTreeMap<usize, u64> = burst.into_iter().flat_map(|b| b.join().unwrap()).collect();
    killer.join().unwrap();
    assert!(first.len() >= KILL_AFTER && first.len() < KEYS, "the kill cut the burst: {} answered", first.len());
    assert!(
        eventually(Duration::from_secs(30), || front_pid(&h.socket).is_some_and(|p| p != old)),
        "the supervisor started a new front"
    );
    let mut c = h.client();
    for key in 0..KEYS {
        let r = c.call("run", params(&s, &file, key, 30_000)).unwrap_or_else(|e| panic!("retry of k{key}: {e}"));
        assert_eq!(r["state"], "exited", "the retry of k{key} ends: {r}");
        if let Some(job) = first.get(&key) {
            assert_eq!(r["job"].as_u64(), Some(*job), "an answered key answers its first job: {r}");
            assert_eq!(r["receipt"]["replayed"], true, "{r}");
        }
    }
    let text = std::fs::read_to_string(&file).unwrap();
    let mut runs: BTreeMap<&str, usize> = BTreeMap::new();
    for line in text.lines() {
        *runs.entry(line).or_default() += 1;
    }
    let twice: Vec<_> = runs.iter().filter(|(_, n)| **n > 1).collect();
    let never: Vec<_> = (0..KEYS).map(|k| format!("k{k}")).filter(|k| !runs.contains_key(k.as_str())).collect();
    assert!(twice.is_empty() && never.is_empty(), "ran more than once: {twice:?}; never ran: {never:?}");
}
