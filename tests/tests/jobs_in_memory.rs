//! A session's ended jobs let go from the front's memory (`HEDDLE_JOBS_IN_MEMORY`, here 2) answer every
//! call exactly as they did while held: results, every output view, raw reads, the listing and the
//! session's totals; retention still reaches them, and a kill of one says it already ended.

use heddle_tests::{Client, Heddle};
use serde_json::{json, Value};

fn call(c: &mut Client, method: &str, params: Value) -> Value {
    let mut r = c.call(method, params.clone()).unwrap_or_else(|e| panic!("{method} {params}: {e}"));
    // What the session announces depends on when a call is made, not on the job asked about.
    if let Some(o) = r.as_object_mut() {
        o.remove("announcements");
    }
    r
}

/// Every answer a client can get about ended job `job`: its result (two budgets) and every output view.
fn answers(c: &mut Client, s: &Value, job: u64) -> Vec<Value> {
    let mut out = vec![
        call(c, "wait", json!({"session": s, "job": job, "yield_ms": 0})),
        call(c, "wait", json!({"session": s, "job": job, "yield_ms": 0, "max_output_bytes": 1000})),
    ];
    let views = [
        json!({"tail": 5}),
        json!({"lines": [2, 4], "format": "lines"}),
        json!({"grep": {"pattern": "7$|err", "context": 1}}),
        json!({"errors": true}),
        json!({"raw": {"offset": 3, "len": 40, "unredacted": true}}),
        json!({"raw": {"len": 40, "unredacted": true}, "stream": "stderr"}),
    ];
    for v in views {
        let mut p = json!({"session": s, "job": job});
        p.as_object_mut().unwrap().extend(v.as_object().unwrap().clone());
        out.push(call(c, "output", p));
    }
    out
}

fn describe(c: &mut Client, s: &Value) -> Value {
    call(c, "describe", json!({"session": s}))["sessions"][0].clone()
}

#[test]
fn jobs_let_go_from_memory_answer_as_they_did_and_the_session_holds_only_its_window() {
    let h = Heddle::start_with_env(&[], &[("HEDDLE_JOBS_IN_MEMORY", "2")]);
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let cmds = [
        "seq 1 3000",
        "echo out; echo 'error: it broke' >&2; exit 3",
        "cd /tmp && export FOO=1 && f() { :; } && echo moved",
        "for i in 1 2 3; do echo same; done; printf 'a\\n\\n\\n\\nb\\n'",
    ];
    let mut held = Vec::new();
    for cmd in cmds {
        let r = call(&mut c, "run", json!({"session": s, "cmd": cmd, "yield_ms": 60_000}));
        assert_eq!(r["state"], "exited", "{r}");
        let job = r["job"].as_u64().unwrap();
        held.push((job, answers(&mut c, &s, job)));
    }
    let killed = call(&mut c, "run", json!({"session": s, "cmd": "echo started; sleep 60", "yield_ms": 300}));
    let killed = killed["job"].as_u64().unwrap();
    call(&mut c, "kill", json!({"session": s, "job": killed}));
    call(&mut c, "wait", json!({"session": s, "job": killed, "yield_ms": 10_000}));
    held.push((killed, answers(&mut c, &s, killed)));
    let listing = call(&mut c, "jobs", json!({"session": s}));
    let before = describe(&mut c, &s);

    // Eight more jobs push the first ones out of the window: each call lets go of what is done with.
    for _ in 0..8 {
        call(&mut c, "run", json!({"session": s, "cmd": "true", "yield_ms": 60_000}));
    }
    let d = describe(&mut c, &s);
    let in_memory = d["jobs_in_memory"].as_u64().unwrap();
    assert!(in_memory <= 3, "the window is 2 (and the job that just ended): {in_memory} held, {d}");
    assert_eq!(d["jobs_total"], 13, "{d}");
    assert!(
        d["output_held_bytes"].as_u64() < before["output_held_bytes"].as_u64(),
        "held {} then {}",
        before["output_held_bytes"],
        d["output_held_bytes"]
    );

    for (job, was) in &held {
        assert_eq!(&answers(&mut c, &s, *job), was, "job {job} answers as it did while held");
    }
    let now = call(&mut c, "jobs", json!({"session": s}));
    let rows = now["jobs"].as_array().unwrap();
    assert_eq!(rows.len(), 13);
    assert_eq!(&rows[..5], &listing["jobs"].as_array().unwrap()[..], "the listing reads them back in order");
    let changes = &d["changes"];
    assert_eq!(changes["jobs_by_state"], json!({"exited": 12, "killed": 1}), "{changes}");
    assert_eq!(changes["state_changes"], before["changes"]["state_changes"], "{changes}");
    assert_eq!(changes["last_state_changes"], before["changes"]["last_state_changes"], "{changes}");
    let cpu: f64 = (1..=13)
        .map(|job| {
            call(&mut c, "wait", json!({"session": s, "job": job, "yield_ms": 0}))["usage"]["cpu_ms"].as_f64().unwrap()
        })
        .sum();
    let summed = d["jobs_cpu_ms"].as_f64().unwrap();
    assert!((summed - cpu).abs() < 0.01, "the CPU of jobs on disk is still summed: {summed} against {cpu} job by job");

    // A kill of a job on disk says there was nothing to kill.
    let k = call(&mut c, "kill", json!({"session": s, "job": 1}));
    assert!(k["note"].as_str().unwrap_or_default().contains("already ended"), "{k}");
    assert_eq!(answers(&mut c, &s, 1), held[0].1, "job 1 still answers the same after the kill");
}

#[test]
fn a_long_sessions_listing_is_a_page_that_says_what_it_leaves_out() {
    let h = Heddle::start_with_env(&[], &[("HEDDLE_JOBS_IN_MEMORY", "2")]);
    let mut c = h.client();
    let s = c.call("session.open", json!({"name": "long", "cwd": h.project})).unwrap()["session"].clone();
    // The oldest job still runs: a listing always has it, however many ended jobs come after it.
    let first = call(&mut c, "run", json!({"session": s, "cmd": "sleep 600", "yield_ms": 200}));
    assert_eq!((first["job"].as_u64(), first["state"].as_str()), (Some(1), Some("running")), "{first}");
    for _ in 0..60 {
        call(&mut c, "run", json!({"session": s, "cmd": "true", "yield_ms": 60_000}));
    }
    let ids = |r: &Value| r["jobs"].as_array().unwrap().iter().map(|j| j["job"].as_u64().unwrap()).collect::<Vec<_>>();
    // The first page: the running job and the newest 50 ended ones (12–61, most of them let go from
    // memory and read back), oldest first; ten older ended ones are counted, with the `before` that
    // lists them.
    let page = call(&mut c, "jobs", json!({"session": s}));
    let want: Vec<u64> = std::iter::once(1).chain(12..=61).collect();
    assert_eq!(ids(&page), want, "{page}");
    assert_eq!((page["older"].as_u64(), page["older_before"].as_u64()), (Some(10), Some(12)), "{page}");
    assert_eq!(page["jobs"][0]["state"], "running");
    let next = call(&mut c, "jobs", json!({"session": s, "before": 12}));
    assert_eq!(ids(&next), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], "{next}");
    assert_eq!((next["older"].as_u64(), next["older_before"].is_null()), (Some(0), true), "{next}");
    let small = call(&mut c, "jobs", json!({"session": s, "before": 12, "limit": 5}));
    assert_eq!(ids(&small), [1, 7, 8, 9, 10, 11], "{small}");
    assert_eq!((small["older"].as_u64(), small["older_before"].as_u64()), (Some(5), Some(7)), "{small}");
    let all = call(&mut c, "jobs", json!({"session": s, "limit": 10_000}));
    assert_eq!(ids(&all), (1..=61).collect::<Vec<_>>(), "{all}");
    for bad in [0, 10_001] {
        let e = c.call("jobs", json!({"session": s, "limit": bad})).unwrap_err().to_string();
        assert!(e.contains("limit must be between 1 and 10000"), "{e}");
    }

    // A person's `heddle jobs` prints the page and the line saying how to see the rest.
    let heddle = |args: &[&str]| {
        let out = h.cli(&[&["--session", "long", "jobs"], args].concat());
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let table = heddle(&[]);
    assert_eq!(table.lines().count(), 1 + 51 + 1, "a header, 51 jobs and the line: {table}");
    assert!(
        table.ends_with("… 10 older ended jobs not listed: heddle jobs --before 12 [--limit N, up to 10000]\n"),
        "{table}"
    );
    let rest = heddle(&["--before", "12"]);
    assert_eq!(rest.lines().count(), 1 + 11, "{rest}");
    assert!(rest.lines().nth(11).unwrap().trim_start().starts_with("11 "), "{rest}");
    call(&mut c, "kill", json!({"session": s, "job": 1}));
}
