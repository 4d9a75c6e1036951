//! Output retention through the real stack (the front's limits set through `HEDDLE_RETAIN_*`, which
//! `heddle up` and the supervisor pass to the front): what retention removed is said exactly in the
//! model view, in raw reads of removed offsets and in line views; the tail stays readable exactly.

use heddle_tests::{Client, Heddle};
use serde_json::{json, Value};

fn run(c: &mut Client, s: &Value, cmd: &str) -> Value {
    let r = c.call("run", json!({"session": s, "cmd": cmd, "yield_ms": 300_000})).expect("run");
    assert_eq!(r["state"], "exited", "{r}");
    r
}

fn output(c: &mut Client, s: &Value, job: &Value, params: Value) -> Result<Value, String> {
    let mut p = json!({"session": s, "job": job});
    p.as_object_mut().unwrap().extend(params.as_object().unwrap().clone());
    c.call("output", p).map_err(|e| e.to_string())
}

/// The `N` of `(N bytes) of stdout` in the view's retention line.
fn removed_stdout(view: &str) -> u64 {
    let first = view.lines().next().unwrap();
    let at = first.find(" bytes) of stdout").unwrap_or_else(|| panic!("no removed stdout bytes in {first:?}"));
    let open = first[..at].rfind('(').unwrap();
    first[open + 1..at].parse().unwrap()
}

#[test]
fn a_job_over_its_cap_loses_its_oldest_bytes_and_every_view_says_so() {
    let h = Heddle::start_with_env(&[], &[("HEDDLE_RETAIN_JOB_BYTES", "262144")]);
    let mut c = h.client();
    let s = h.open_session(&mut c);
    // About a million lines: the line log (compressed, about 0.08× the output) exceeds the cap too.
    let expect: String = (1..=999_999).map(|i| format!("line {i:07}\n")).collect();
    let r = run(&mut c, &s, "seq -f 'line %07g' 1 999999");
    let job = r["job"].clone();
    assert_eq!(r["stdout_bytes"].as_u64(), Some(expect.len() as u64), "the byte count keeps counting everything");
    let view = r["view"].as_str().unwrap();
    let first = view.lines().next().unwrap();
    assert!(first.starts_with("[… heddle: first "), "{first}");
    assert!(first.ends_with("removed by retention (max 256.0 KiB per job) …]"), "{first}");
    let removed = removed_stdout(view);
    assert!(removed >= expect.len() as u64 - 262_144 && removed < expect.len() as u64, "{first}");
    assert!(view.ends_with("line 0999999\n"), "the view's tail is the output's last line: {view}");

    // A raw read of a removed offset is an error naming what was removed and why.
    let e =
        output(&mut c, &s, &job, json!({"raw": {"offset": removed - 1, "len": 10, "unredacted": true}})).unwrap_err();
    assert!(e.contains(&format!("bytes 0–{} of job {job}'s stdout", removed - 1)), "{e}");
    assert!(e.contains("removed by retention (max 256.0 KiB per job)"), "{e}");
    assert!(e.contains(&format!("offsets from {removed} on are still stored")), "{e}");

    // Everything from the first kept byte on is exact.
    let mut offset = removed;
    while offset < expect.len() as u64 {
        let r = output(&mut c, &s, &job, json!({"raw": {"offset": offset, "unredacted": true}})).unwrap();
        let data = r["data"].as_str().unwrap();
        assert!(!data.is_empty());
        assert_eq!(data, &expect[offset as usize..offset as usize + data.len()], "bytes at {offset}");
        offset += data.len() as u64;
    }

    // Line views: removed lines are said, kept lines are exact.
    let r = output(&mut c, &s, &job, json!({"lines": [1, 3], "format": "lines"})).unwrap();
    let note = r["note"].as_str().unwrap_or_default();
    assert!(note.contains("were removed by retention (max 256.0 KiB per job)"), "{r}");
    assert_eq!(r["lines"].as_array().unwrap().len(), 0, "{r}");
    let r = output(&mut c, &s, &job, json!({"tail": 2})).unwrap();
    assert_eq!(r["text"], "999998: line 0999998\n999999: line 0999999\n", "{r}");
}

#[test]
fn a_session_over_its_cap_loses_its_oldest_ended_jobs_output_first() {
    let h = Heddle::start_with_env(&[], &[("HEDDLE_RETAIN_SESSION_BYTES", "3145728")]);
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let a = run(&mut c, &s, "seq -f 'line %07g' 1 160000")["job"].clone();
    let b = run(&mut c, &s, "seq -f 'line %07g' 1 160000")["job"].clone();
    // Each job keeps about 2.2 MiB (raw log and line log); the next job touches the session.
    run(&mut c, &s, "true");
    let e = output(&mut c, &s, &a, json!({"raw": {"offset": 0, "len": 10, "unredacted": true}})).unwrap_err();
    assert!(e.contains("removed by retention (max 3.0 MiB per session; oldest ended jobs first)"), "{e}");
    let r = output(&mut c, &s, &b, json!({"raw": {"offset": 0, "len": 13, "unredacted": true}})).unwrap();
    assert_eq!(r["data"], "line 0000001\n", "the newer job keeps its output");
}

#[test]
fn an_idle_sessions_old_output_is_removed_by_the_timer() {
    let h = Heddle::start_with_env(&[], &[("HEDDLE_RETAIN_AGE_SECS", "1")]);
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let r = run(&mut c, &s, "echo kept for a second");
    assert_eq!(r["view"], "kept for a second\n");
    // Nothing touches the session from here on (no job is added or ends): only the timer can act.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let w = c.call("wait", json!({"session": s, "job": r["job"]})).unwrap();
    let view = w["view"].as_str().unwrap();
    assert!(
        view.starts_with("[… heddle: first 18 bytes of stdout (lines 1–1) removed by retention (output of ended jobs is kept 1 second) …]"),
        "{view}"
    );
    assert!(!view.contains("kept for a second\n"), "{view}");
    assert_eq!(w["stdout_bytes"], 18, "the byte count keeps counting everything");
}

#[test]
fn a_front_restarted_over_a_punched_log_keeps_the_exact_removed_counts() {
    let h = Heddle::start_with_env(&[], &[("HEDDLE_RETAIN_JOB_BYTES", "262144")]);
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let expect: String = (1..=999_999).map(|i| format!("line {i:07}\n")).collect();
    let r = run(&mut c, &s, "seq -f 'line %07g' 1 999999");
    let job = r["job"].clone();
    let before = r["view"].as_str().unwrap().lines().next().unwrap().to_owned();
    let removed = removed_stdout(r["view"].as_str().unwrap());
    assert!(before.contains("(lines 1–"), "{before}");

    let pid = |c: &mut Client| c.call("describe", json!({})).unwrap()["front"]["pid"].as_u64().unwrap();
    let old = pid(&mut c);
    // The front is a process this test started (through heddle up and the supervisor), named by pid.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(old as i32), nix::sys::signal::SIGKILL).unwrap();
    let mut c = (0..300)
        .find_map(|_| {
            std::thread::sleep(std::time::Duration::from_millis(100));
            let mut c = Client::connect(&h.socket).ok()?;
            (c.call("describe", json!({})).ok()?["front"]["pid"].as_u64()? != old).then_some(c)
        })
        .expect("a new front answers after the old one was killed");

    let w = c.call("wait", json!({"session": s, "job": job})).unwrap();
    let view = w["view"].as_str().unwrap();
    let bytes_part = |l: &str| l[..l.find(" of stdout").unwrap()].to_owned();
    let after = view.lines().next().unwrap();
    assert_eq!(bytes_part(after), bytes_part(&before), "the same exact removed bytes after the restart: {after}");
    assert!(after.ends_with("removed by retention (max 256.0 KiB per job) …]"), "{after}");
    assert!(view.ends_with("line 0999999\n"), "{view}");
    assert_eq!(w["stdout_bytes"].as_u64(), Some(expect.len() as u64), "counts still count everything");
    let text = w.to_string();
    assert!(text.contains("byte counts and raw offsets are exact, line numbers start again"), "{w}");
    assert!(!text.contains("now count only what was kept"), "no approximate note: {w}");
    // Raw offsets go on where they were: the removed offset is refused with its reason, the first kept
    // offset reads the same bytes as before the restart.
    let e =
        output(&mut c, &s, &job, json!({"raw": {"offset": removed - 1, "len": 10, "unredacted": true}})).unwrap_err();
    assert!(e.contains("removed by retention (max 256.0 KiB per job)"), "{e}");
    let r = output(&mut c, &s, &job, json!({"raw": {"offset": removed, "len": 64, "unredacted": true}})).unwrap();
    assert_eq!(r["data"].as_str().unwrap(), &expect[removed as usize..removed as usize + 64]);
}
