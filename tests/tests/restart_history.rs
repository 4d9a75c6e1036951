//! What a restart leaves of a session's history (issue 7): after a front restart the database's job rows
//! follow the jobs the new front rebuilt (not the `lost` an interim sweep wrote), and after a supervisor
//! restart a session re-opened under its name lists its earlier jobs — those that were running as `lost`,
//! never re-run — with their output, and numbers new jobs after them.

use heddle_tests::{eventually, read_stream, run_ok, Heddle};
use serde_json::json;
use std::time::Duration;

fn describe_pid(h: &Heddle, who: &str) -> Option<u64> {
    let mut c = heddle_tests::Client::connect(&h.socket).ok()?;
    c.call("describe", json!({})).ok()?[who]["pid"].as_u64()
}

/// SIGKILL the front or the supervisor (`who`, as `describe` names it) and wait until a new one answers.
fn kill_and_wait_for_new(h: &Heddle, who: &str) {
    let old = describe_pid(h, who).expect("describe names it");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(old as i32), nix::sys::signal::SIGKILL).unwrap();
    assert!(
        eventually(Duration::from_secs(30), || describe_pid(h, who).is_some_and(|p| p != old)),
        "a new {who} answers after the old one was killed"
    );
}

#[test]
fn a_restarted_fronts_database_rows_follow_the_jobs_it_rebuilt() {
    let h = Heddle::start();
    let mut c = h.client();
    c.call("session.open", json!({"name": "rows", "cwd": h.project})).unwrap();
    let slow = c.call("run", json!({"session": "rows", "cmd": "sleep 1; echo done", "yield_ms": 0})).unwrap();
    assert_eq!(slow["state"], "running", "{slow}");
    kill_and_wait_for_new(&h, "front");
    let mut c = h.client();
    let r = c.call("wait", json!({"session": "rows", "job": slow["job"], "yield_ms": 30000})).unwrap();
    assert_eq!((r["state"].as_str(), r["exit_code"].as_i64()), (Some("exited"), Some(0)), "{r}");
    let job = slow["job"].as_u64().unwrap();
    let settled = eventually(Duration::from_secs(10), || h.job_rows("rows", job) == ["exited"]);
    assert!(settled, "one row, saying exited: {:?}", h.job_rows("rows", job));
}

#[test]
fn a_session_reopened_after_a_supervisor_restart_lists_its_earlier_jobs() {
    let h = Heddle::start();
    let mut c = h.client();
    c.call("session.open", json!({"name": "hist", "cwd": h.project})).unwrap();
    assert_eq!(run_ok(&mut c, &json!("hist"), "echo early"), "early\n");
    let file = h.project.join("once.txt");
    let cmd = format!("echo x >> {}; echo partial; sleep 1000", file.display());
    let running = c.call("run", json!({"session": "hist", "cmd": cmd, "yield_ms": 300})).unwrap();
    assert_eq!(running["state"], "running", "{running}");
    kill_and_wait_for_new(&h, "supervisor");
    let mut c = h.client();
    let opened = c.call("session.open", json!({"name": "hist", "cwd": h.project})).unwrap();
    assert_eq!(opened["attached"], false, "{opened}");
    let jobs = c.call("jobs", json!({"session": "hist"})).unwrap();
    let states: Vec<(u64, String)> = jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| (j["job"].as_u64().unwrap(), j["state"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(states, [(1, "exited".to_owned()), (2, "lost".to_owned())], "{jobs}");
    let w = c.call("wait", json!({"session": "hist", "job": 2, "yield_ms": 0})).unwrap();
    assert_eq!(w["state"], "lost", "{w}");
    assert!(w["note"].as_str().unwrap().contains("heddle restarted"), "{w}");
    assert_eq!(read_stream(&mut c, &json!("hist"), &json!(2), "stdout"), b"partial\n");
    assert_eq!(read_stream(&mut c, &json!("hist"), &json!(1), "stdout"), b"early\n");
    let next = c.call("run", json!({"session": "hist", "cmd": "echo next", "yield_ms": 10000})).unwrap();
    assert_eq!((next["job"].as_u64(), next["view"].as_str()), (Some(3), Some("next\n")), "{next}");
    // Every job of the session has ended, so a run made again would have written by now.
    let settled = |c: &mut heddle_tests::Client, s: &str| {
        c.call("jobs", json!({"session": s}))
            .is_ok_and(|j| j["jobs"].as_array().is_some_and(|a| a.iter().all(|j| j["state"] != "running")))
    };
    assert!(eventually(Duration::from_secs(10), || settled(&mut c, "hist")), "the session's jobs ended");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x\n", "nothing was run again");
    assert!(eventually(Duration::from_secs(10), || h.job_rows("hist", 2) == ["lost"]), "{:?}", h.job_rows("hist", 2));
    assert_eq!(h.job_rows("hist", 1), ["exited"]);
    // A closed session's history is not carried into a new session of its name.
    c.call("session.close", json!({"session": "hist"})).unwrap();
    c.call("session.open", json!({"name": "hist", "cwd": h.project})).unwrap();
    assert_eq!(c.call("jobs", json!({"session": "hist"})).unwrap()["jobs"].as_array().unwrap().len(), 0);
}

/// A job run in a session re-opened after a supervisor restart belongs to the new worker: a front
/// restart afterwards takes it over running and it ends as it would have (it is not judged a job of the
/// old worker, whose processes the restart killed). The torture run's scenario, made deterministic.
#[test]
fn a_job_of_a_session_reopened_after_a_supervisor_restart_survives_a_front_restart() {
    let h = Heddle::start();
    let mut c = h.client();
    c.call("session.open", json!({"name": "again", "cwd": h.project})).unwrap();
    assert_eq!(run_ok(&mut c, &json!("again"), "echo early"), "early\n");
    kill_and_wait_for_new(&h, "supervisor");
    let mut c = h.client();
    let opened = c.call("session.open", json!({"name": "again", "cwd": h.project})).unwrap();
    assert_eq!(opened["attached"], false, "{opened}");
    let r = c.call("run", json!({"session": "again", "cmd": "sleep 1; echo after", "yield_ms": 0})).unwrap();
    assert_eq!((r["job"].as_u64(), r["state"].as_str()), (Some(2), Some("running")), "{r}");
    kill_and_wait_for_new(&h, "front");
    let mut c = h.client();
    let w = c.call("wait", json!({"session": "again", "job": 2, "yield_ms": 30000})).unwrap();
    assert_eq!((w["state"].as_str(), w["exit_code"].as_i64()), (Some("exited"), Some(0)), "{w}");
    assert_eq!(read_stream(&mut c, &json!("again"), &json!(2), "stdout"), b"after\n");
    assert_eq!(read_stream(&mut c, &json!("again"), &json!(1), "stdout"), b"early\n");
}

/// The job numbers and states `jobs` lists for `session`.
fn job_states(c: &mut heddle_tests::Client, session: &str) -> Vec<(u64, String)> {
    let jobs = c.call("jobs", json!({"session": session})).unwrap();
    let list = jobs["jobs"].as_array().unwrap_or_else(|| panic!("a job list: {jobs}"));
    list.iter().map(|j| (j["job"].as_u64().unwrap(), j["state"].as_str().unwrap().to_owned())).collect()
}

#[test]
fn a_session_opened_without_a_name_after_a_restart_never_takes_an_earlier_sessions_jobs() {
    let mut h = Heddle::start_with(&["--socket-group", "65534"]);
    let mut c = h.client();
    let first = h.open_session(&mut c);
    assert_eq!(first, "s1", "the first generated name");
    assert_eq!(run_ok(&mut c, &first, "echo from-the-first"), "from-the-first\n");
    let r = c.call("run", json!({"session": first, "cmd": "sleep 1000", "yield_ms": 0})).unwrap();
    assert_eq!(r["state"], "running", "{r}");
    c.call("session.open", json!({"name": "roots", "cwd": h.project})).unwrap();
    assert_eq!(run_ok(&mut c, &json!("roots"), "echo kept"), "kept\n");
    drop(c);
    h.restart(&["--socket-group", "65534"]);

    // A fresh session is new: another name, no jobs, nothing announced.
    let mut c = h.client();
    let fresh = h.open_session(&mut c);
    assert_ne!(fresh, first, "a generated name skips the one the restart left");
    assert_eq!(job_states(&mut c, fresh.as_str().unwrap()), [], "a fresh session lists no jobs");
    let r = c.call("run", json!({"session": fresh, "cmd": "true", "yield_ms": 10000})).unwrap();
    assert_eq!(r["job"], 1, "{r}");
    assert_eq!(r["announcements"], json!([]), "nothing of the earlier session is announced: {r}");

    // The left name still carries its history for a re-open by name.
    let opened = c.call("session.open", json!({"name": first, "cwd": h.project})).unwrap();
    assert_eq!(opened["attached"], false, "{opened}");
    let earlier = [(1, "exited".to_owned()), (2, "lost".to_owned())];
    assert_eq!(job_states(&mut c, "s1"), earlier, "the re-opened s1 lists its earlier jobs");

    // Another uid cannot open root's left name, and trying clears nothing.
    let tried = heddle_tests::as_nobody(&h, &[("session.open", json!({"name": "roots"}))]);
    let msg = tried[0]["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("not available to you"), "nobody is refused root's left name: {}", tried[0]);
    c.call("session.open", json!({"name": "roots", "cwd": h.project})).unwrap();
    assert_eq!(read_stream(&mut c, &json!("roots"), &json!(1), "stdout"), b"kept\n");
}

/// The job numbers a result announces.
fn announced(r: &serde_json::Value) -> Vec<u64> {
    r["announcements"]
        .as_array()
        .unwrap_or_else(|| panic!("announcements: {r}"))
        .iter()
        .map(|a| a["job"].as_u64().unwrap())
        .collect()
}

/// A restart announces only what the client was not shown: a job whose end a result or an
/// announcement showed before a front restart (a takeover) or a restart of the whole stack (the session
/// re-opened by name) is not announced again; one that ended unseen, or that the restart lost, is
/// announced once.
#[test]
fn a_restart_announces_only_the_jobs_the_client_was_not_shown() {
    let mut h = Heddle::start();
    let mut c = h.client();
    c.call("session.open", json!({"name": "told", "cwd": h.project})).unwrap();
    assert_eq!(run_ok(&mut c, &json!("told"), "echo one"), "one\n");
    let r = c.call("run", json!({"session": "told", "cmd": "sleep 0.3; echo two", "yield_ms": 0})).unwrap();
    assert_eq!((r["job"].as_u64(), r["state"].as_str()), (Some(2), Some("running")), "{r}");
    std::thread::sleep(Duration::from_millis(1500)); // job 2 ends with nobody asking about the session
    kill_and_wait_for_new(&h, "front");
    let mut c = h.client();
    let r = c.call("run", json!({"session": "told", "cmd": "echo three", "yield_ms": 10000})).unwrap();
    assert_eq!(r["job"], 3, "{r}");
    assert_eq!(announced(&r), [2], "after a takeover, job 2 (ended unseen) only: {r}");
    let r = c.call("run", json!({"session": "told", "cmd": "sleep 1000", "yield_ms": 0})).unwrap();
    assert_eq!(r["job"], 4, "{r}");
    std::thread::sleep(Duration::from_millis(1000));
    drop(c);
    h.restart(&[]);
    let mut c = h.client();
    let opened = c.call("session.open", json!({"name": "told", "cwd": h.project})).unwrap();
    assert_eq!(opened["attached"], false, "{opened}");
    let r = c.call("run", json!({"session": "told", "cmd": "echo five", "yield_ms": 10000})).unwrap();
    assert_eq!(r["job"], 5, "{r}");
    assert_eq!(announced(&r), [4], "after a restart, the job it lost only: {r}");
    let lost = &r["announcements"][0];
    assert_eq!(lost["state"], "lost", "{r}");
    let ran = lost["duration_ms"].as_f64().unwrap();
    assert!(ran >= 1000.0, "it ran at least until the restart: {r}");
    let r = c.call("run", json!({"session": "told", "cmd": "true", "yield_ms": 10000})).unwrap();
    assert_eq!(announced(&r), Vec::<u64>::new(), "once: {r}");
    // Rebuilt again later (a takeover replays the journal), it was still lost when it was, not now.
    std::thread::sleep(Duration::from_millis(1500));
    drop(c);
    kill_and_wait_for_new(&h, "front");
    let mut c = h.client();
    let r = c.call("wait", json!({"session": "told", "job": 4})).unwrap();
    let again = r["duration_ms"].as_f64().unwrap();
    assert!((again - ran).abs() < 100.0, "the same duration after another rebuild, {ran} ms then: {r}");
}

/// The shell state survives a restart: after a front restart (a takeover) and after a restart of the
/// whole stack (the session re-opened by name), the next call runs in the cwd, with the variables,
/// functions and aliases the earlier calls set, and says nothing changed.
#[test]
fn a_restart_carries_the_shell_state_on() {
    let mut h = Heddle::start();
    let mut c = h.client();
    c.call("session.open", json!({"name": "kept-state", "cwd": h.project})).unwrap();
    let setup = "mkdir -p sub && cd sub && export GREETING=hello && tmpf() { :; } && greet() { echo \"$GREETING from $(basename \"$PWD\")\"; }";
    run_ok(&mut c, &json!("kept-state"), setup);
    kill_and_wait_for_new(&h, "front");
    let mut c = h.client();
    let cmd = "greet; export STEP=two; unset -f tmpf";
    let r = c.call("run", json!({"session": "kept-state", "cmd": cmd, "yield_ms": 10000})).unwrap();
    assert_eq!(r["view"], "hello from sub\n", "after a takeover: {r}");
    assert_eq!(r["state_changes"], json!(["+export STEP", "-function tmpf"]), "only what this call changed: {r}");
    drop(c);
    h.restart(&[]);
    let mut c = h.client();
    let opened = c.call("session.open", json!({"name": "kept-state", "cwd": h.project})).unwrap();
    assert_eq!(opened["attached"], false, "{opened}");
    let note = opened["note"].as_str().unwrap_or_default();
    let sub = format!("jobs start in {}/sub, where its earlier calls left them", h.project.display());
    assert!(note.contains("carries on from before a restart of heddle") && note.contains(&sub), "{opened}");
    let cmd = "greet; echo $STEP; type -t tmpf || echo no-tmpf";
    let r = c.call("run", json!({"session": "kept-state", "cmd": cmd, "yield_ms": 10000})).unwrap();
    assert_eq!(r["view"], "hello from sub\ntwo\nno-tmpf\n", "after a restart of the stack: {r}");
    assert_eq!(r["state_changes"], json!([]), "{r}");
}

/// A restarted front's probes are answered by the new worker, never by an answer the old one gave (the
/// journal held the old front's probe answers, numbered from 1 as the new front's are).
#[test]
fn liveness_after_a_restart_is_the_running_jobs_own() {
    let mut h = Heddle::start();
    let mut c = h.client();
    c.call("session.open", json!({"name": "probed", "cwd": h.project})).unwrap();
    for _ in 0..3 {
        let r = c.call("run", json!({"session": "probed", "cmd": "sleep 30", "yield_ms": 200})).unwrap();
        assert!(r["liveness"]["busy_cmdline"].as_str().unwrap_or_default().starts_with("sleep"), "{r}");
        c.call("kill", json!({"session": "probed", "job": r["job"]})).unwrap();
    }
    drop(c);
    h.restart(&[]);
    let mut c = h.client();
    c.call("session.open", json!({"name": "probed", "cwd": h.project})).unwrap();
    let cmd = "python3 -c 'import time; time.sleep(3)'";
    let r = c.call("run", json!({"session": "probed", "cmd": cmd, "yield_ms": 500})).unwrap();
    assert_eq!(r["state"], "running", "{r}");
    let busy = r["liveness"]["busy_cmdline"].as_str().unwrap_or_default();
    assert!(busy.starts_with("python3"), "the new job's process, not an old probe's answer: {r}");
    c.call("kill", json!({"session": "probed", "job": r["job"]})).unwrap();
}

/// A job still running when the front was taken over cannot have its shell-state changes applied (what
/// it started from died with the old front): its result says so instead of dropping them silently.
#[test]
fn a_job_running_across_a_takeover_says_its_state_changes_were_not_kept() {
    let h = Heddle::start();
    let mut c = h.client();
    c.call("session.open", json!({"name": "across", "cwd": h.project})).unwrap();
    run_ok(&mut c, &json!("across"), "true");
    let cmd = "sleep 1; mkdir -p moved && cd moved && export MOVED=1";
    let r = c.call("run", json!({"session": "across", "cmd": cmd, "yield_ms": 0})).unwrap();
    assert_eq!(r["state"], "running", "{r}");
    kill_and_wait_for_new(&h, "front");
    let mut c = h.client();
    let w = c.call("wait", json!({"session": "across", "job": r["job"], "yield_ms": 30000})).unwrap();
    assert_eq!(w["exit_code"], 0, "{w}");
    let note = w["state_note"].as_str().unwrap_or_default();
    assert!(note.contains("heddle's front restarted while the job ran"), "{w}");
    assert_eq!(run_ok(&mut c, &json!("across"), "pwd"), format!("{}\n", h.project.display()), "as the note says");
    // Ended unseen, it is announced with the same note: its `cd` must not look as if it took effect.
    let r = c.call("run", json!({"session": "across", "cmd": cmd, "yield_ms": 0})).unwrap();
    kill_and_wait_for_new(&h, "front");
    let mut c = h.client();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let next = c.call("run", json!({"session": "across", "cmd": "pwd", "yield_ms": 10000})).unwrap();
    let a = &next["announcements"][0];
    assert_eq!(a["job"], r["job"], "{next}");
    assert!(a["state_note"].as_str().is_some_and(|n| n.contains("could not be applied")), "{next}");
    let text = heddle_tests::text_form(&next);
    assert!(text.contains("  shell state unknown after this call"), "{text}");
}

/// A job still running across a takeover keeps the time it has run: its duration is from its start,
/// not from when the new front rebuilt it (`jobs` said 6.0 s, then 5.6 ms).
#[test]
fn a_running_jobs_time_goes_on_across_a_takeover() {
    let h = Heddle::start();
    let mut c = h.client();
    c.call("session.open", json!({"name": "timed", "cwd": h.project})).unwrap();
    let r = c.call("run", json!({"session": "timed", "cmd": "sleep 30", "yield_ms": 0})).unwrap();
    std::thread::sleep(Duration::from_millis(2000));
    kill_and_wait_for_new(&h, "front");
    let mut c = h.client();
    let jobs = c.call("jobs", json!({"session": "timed"})).unwrap();
    let job = jobs["jobs"].as_array().unwrap().iter().find(|j| j["job"] == r["job"]).cloned().unwrap();
    assert_eq!(job["state"], "running", "{jobs}");
    assert!(job["duration_ms"].as_f64().unwrap() >= 1900.0, "it has run since before the takeover: {job}");
    c.call("kill", json!({"session": "timed", "job": r["job"]})).unwrap();
}
