//! Live streaming's ends (issue 6), through the real stack: a subscriber hears `job.end` (with the
//! state) and `job.settled` for every job, also for jobs that become `lost` when their worker dies and
//! for jobs ended by `session.close`.

use heddle_tests::{Client, Heddle};
use serde_json::{json, Value};
use std::time::Duration;

/// A subscriber on `s` (notifications time out after 30 s rather than hang the test).
fn subscriber(h: &Heddle, s: &Value) -> Client {
    let mut sub = h.client();
    sub.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    sub.call("subscribe", json!({"session": s})).unwrap();
    sub
}

/// Notifications for `job` up to its `job.settled`: (method, state) of each end notification, and
/// the output text seen.
fn ends_of(sub: &mut Client, job: &Value) -> (Vec<(String, String)>, String) {
    let (mut ends, mut text) = (Vec::new(), String::new());
    loop {
        let n = sub.next_notification().expect("a notification before the timeout");
        let p = &n["params"];
        if p["job"] != *job {
            continue;
        }
        let method = n["method"].as_str().unwrap().to_owned();
        for l in p["lines"].as_array().into_iter().flatten() {
            text.push_str(l["text"].as_str().unwrap_or(""));
            text.push('\n');
        }
        if method == "output" {
            continue;
        }
        ends.push((method.clone(), p["state"].as_str().unwrap_or("").to_owned()));
        if method == "job.settled" {
            return (ends, text);
        }
    }
}

fn start_hanging(c: &mut Client, s: &Value) -> Value {
    let r = c.call("run", json!({"session": s, "cmd": "echo started; sleep 1000", "yield_ms": 300})).unwrap();
    assert_eq!(r["state"], "running", "{r}");
    r["job"].clone()
}

#[test]
fn a_job_lost_with_its_worker_ends_for_its_subscribers() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let mut sub = subscriber(&h, &s);
    let job = start_hanging(&mut c, &s);
    let d = c.call("describe", json!({"session": s})).unwrap();
    let worker = d["sessions"][0]["worker"]["pid"].as_u64().unwrap();
    // The worker is a process this test started (through heddle up and the supervisor), named by pid.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(worker as i32), nix::sys::signal::SIGKILL).unwrap();
    let (ends, text) = ends_of(&mut sub, &job);
    let want = [("job.end".to_owned(), "lost".to_owned()), ("job.settled".to_owned(), "lost".to_owned())];
    assert_eq!(ends, want);
    assert!(text.contains("started"), "the output before the loss was streamed: {text:?}");
}

#[test]
fn a_job_ended_by_session_close_ends_for_its_subscribers() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let mut sub = subscriber(&h, &s);
    let done = c.call("run", json!({"session": s, "cmd": "echo done", "yield_ms": 10_000})).unwrap();
    assert_eq!(done["state"], "exited", "{done}");
    let (ends, _) = ends_of(&mut sub, &done["job"]);
    assert_eq!(ends.iter().map(|e| e.1.as_str()).collect::<Vec<_>>(), ["exited", "exited"]);
    let job = start_hanging(&mut c, &s);
    let r = c.call("session.close", json!({"session": s})).unwrap();
    assert_eq!(r["verified_empty"], true, "{r}");
    let (ends, _) = ends_of(&mut sub, &job);
    let want = [("job.end".to_owned(), "killed".to_owned()), ("job.settled".to_owned(), "killed".to_owned())];
    assert_eq!(ends, want);
    // The job that had ended before the close is not ended twice: nothing else follows.
    sub.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    assert!(sub.next_notification().is_err(), "no further notification after the close");
}
