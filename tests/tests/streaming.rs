//! Live streaming through the real stack. Its ends (issue 6): a subscriber hears `job.end` (with the
//! state) and `job.settled` for every job, also for jobs that become `lost` when their worker dies and
//! for jobs ended by `session.close`. Its chunks' read times (issue 27): every live `output` carries
//! the worker's read time on the host's `CLOCK_MONOTONIC`, which this test reads on its own.

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

/// This process's `CLOCK_MONOTONIC`, ns (read here, not through heddle's code).
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the call; CLOCK_MONOTONIC always exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn unix_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
}

/// One `output` notification as a test sees it.
struct Seen {
    stream: String,
    text: String,
    read_mono: Option<u64>,
    read_unix: Option<u64>,
    at_unix: u64,
    received_mono: u64,
}

/// `output` notifications of `job` until its `job.settled`, each with its receipt time (our clock).
fn chunks_of(sub: &mut Client, job: &Value) -> Vec<Seen> {
    let mut seen = Vec::new();
    loop {
        let n = sub.next_notification().expect("a notification before the timeout");
        let received_mono = monotonic_ns();
        let p = &n["params"];
        if p["job"] != *job {
            continue;
        }
        match n["method"].as_str() {
            Some("output") => seen.push(Seen {
                stream: p["stream"].as_str().unwrap().to_owned(),
                text: p["data"].as_str().unwrap_or_default().to_owned(),
                read_mono: p["read_mono_ns"].as_u64(),
                read_unix: p["read_unix_ns"].as_u64(),
                at_unix: p["at_unix_ns"].as_u64().unwrap(),
                received_mono,
            }),
            Some("job.settled") => return seen,
            _ => {}
        }
    }
}

/// The chunk holding the line that starts with `tag`, and that line's stamp (the job's
/// `$EPOCHREALTIME` when it wrote it, µs).
fn line_of<'a>(seen: &'a [Seen], tag: &str) -> (&'a Seen, u64) {
    for c in seen {
        for l in c.text.lines() {
            if let Some(stamp) = l.strip_prefix(tag).and_then(|r| r.trim().parse::<f64>().ok()) {
                return (c, (stamp * 1e6) as u64);
            }
        }
    }
    panic!("no chunk holds the line {tag:?}")
}

#[test]
fn live_chunks_carry_the_workers_read_time_and_replayed_ones_say_it_is_unknown() {
    const PAUSE_NS: u64 = 300_000_000;
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let mut sub = h.client();
    sub.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    sub.call("subscribe", json!({"session": s, "raw": true})).unwrap();
    let cmd = r#"s() { echo "$1 $EPOCHREALTIME"; }; s a; s b; sleep 0.3; s c; s x >&2; sleep 0.3; s y >&2; s d"#;
    let (before_mono, before_unix) = (monotonic_ns(), unix_ns());
    let job = c.call("run", json!({"session": s, "cmd": cmd, "yield_ms": 0})).unwrap()["job"].clone();
    let seen = chunks_of(&mut sub, &job);
    let tags = |seen: &[Seen], stream: &str| -> String {
        let text: String = seen.iter().filter(|c| c.stream == stream).map(|c| c.text.as_str()).collect();
        text.lines().map(|l| l.split(' ').next().unwrap_or_default()).collect()
    };
    assert_eq!((tags(&seen, "stdout"), tags(&seen, "stderr")), ("abcd".to_owned(), "xy".to_owned()));
    for (i, c) in seen.iter().enumerate() {
        let (mono, unix) =
            (c.read_mono.expect("a live chunk has read_mono_ns"), c.read_unix.expect("and read_unix_ns"));
        assert!(
            before_mono <= mono && mono <= c.received_mono,
            "chunk {i}: read at {mono}, outside [run sent {before_mono}, notification received {}]",
            c.received_mono
        );
        // Read by the worker before the front had it (strictly: another process, later).
        assert!(
            before_unix <= unix && unix < c.at_unix,
            "chunk {i}: read at {unix} (wall), run sent {before_unix}, front got it {}",
            c.at_unix
        );
        for l in c.text.lines() {
            let stamp: f64 = l.split(' ').nth(1).unwrap().parse().unwrap();
            assert!(unix / 1000 >= (stamp * 1e6) as u64, "chunk {i} read at {unix} before its line {l:?} was written");
        }
    }
    for stream in ["stdout", "stderr"] {
        let times: Vec<u64> = seen.iter().filter(|c| c.stream == stream).map(|c| c.read_mono.unwrap()).collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "{stream} read times go back: {times:?}");
    }
    // The job's pauses show between the chunks' read times: the later line was written at least the
    // pause after the earlier one, so its read follows the earlier read by at least the pause less the
    // earlier chunk's own wait in its pipe (its read time − its line's stamp).
    for (first, then) in [("b", "c"), ("x", "y")] {
        let ((a, a_stamp), (b, _)) = (line_of(&seen, first), line_of(&seen, then));
        let lag = (a.read_unix.unwrap() / 1000).saturating_sub(a_stamp) * 1000;
        let gap = b.read_mono.unwrap().saturating_sub(a.read_mono.unwrap());
        assert!(gap + lag >= PAUSE_NS, "a 300 ms pause after {first:?} read as {gap} ns (its chunk waited {lag} ns)");
    }
    // Replayed from the store: the read time is not kept, and is said to be unknown.
    let mut again = h.client();
    again.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let from = json!({"stdout": 0, "stderr": 0});
    again.call("subscribe", json!({"session": s, "job": job, "raw": true, "from": from})).unwrap();
    let replayed = chunks_of(&mut again, &job);
    assert_eq!(tags(&replayed, "stdout"), "abcd");
    assert!(replayed.iter().all(|c| c.read_mono.is_none() && c.read_unix.is_none()), "replayed read times are null");
}
