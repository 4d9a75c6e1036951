//! Disk through the real stack: the line log costs a fraction of the output it indexes, and the
//! server's disk budget (`heddle up --disk-budget`, or `HEDDLE_RETAIN_DISK_BYTES`) holds: ended
//! jobs' output goes first, the job that ended first first, and running jobs over it keep their newest
//! output and are told.

use heddle_tests::{Client, Heddle};
use serde_json::{json, Value};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn run(c: &mut Client, s: &Value, cmd: &str) -> Value {
    let r = c.call("run", json!({"session": s, "cmd": cmd, "yield_ms": 300_000})).expect("run");
    assert_eq!(r["state"], "exited", "{r}");
    r
}

/// Every file named `name` below `dir`.
fn find(dir: &Path, name: &str, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            find(&p, name, out);
        } else if p.file_name().is_some_and(|n| n == name) {
            out.push(p);
        }
    }
}

/// The sizes of job `job`'s raw log and line log (the test's only session).
fn log_sizes(h: &Heddle, job: &Value) -> (u64, u64) {
    let size = |ext: &str| {
        let mut found = Vec::new();
        find(&h.state_dir, &format!("{job}.{ext}"), &mut found);
        assert_eq!(found.len(), 1, "one {job}.{ext} in the state directory: {found:?}");
        std::fs::metadata(&found[0]).unwrap().len()
    };
    (size("log"), size("lines"))
}

/// A make/gcc-shaped build log (55,697 lines, 7.6 MB): progress lines, long compiler command lines,
/// now and then a warning with its source excerpt.
const BUILD_LOG: &str = r#"awk 'BEGIN {
  srand(7); n = 0
  for (m = 1; m <= 60; m++) {
    printf "make[1]: Entering directory \047/src/proj/mod_%d\047\n", m
    for (f = 1; f <= 400; f++) {
      n++
      printf "[%3d%%] Building C object mod_%d/CMakeFiles/mod_%d.dir/src/file_%d.c.o\n", int(n * 100 / 24000), m, m, f
      printf "gcc -DNDEBUG -DHAVE_CONFIG_H -I/src/proj/include -I/src/proj/mod_%d -O2 -g -Wall -Wextra -fPIC -MD -MT mod_%d/CMakeFiles/mod_%d.dir/src/file_%d.c.o -c /src/proj/mod_%d/src/file_%d.c -o mod_%d/CMakeFiles/mod_%d.dir/src/file_%d.c.o\n", m, m, m, f, m, f, m, m, f
      if (rand() < 0.08) {
        l = int(rand() * 900) + 10; c = int(rand() * 30) + 3
        printf "/src/proj/mod_%d/src/file_%d.c: In function \047handle_%d\047:\n", m, f, int(rand() * 100)
        printf "/src/proj/mod_%d/src/file_%d.c:%d:%d: warning: unused variable \047tmp%d\047 [-Wunused-variable]\n", m, f, l, c, int(rand() * 50)
        printf "  %d |     int tmp%d = compute(%d);\n", l, int(rand() * 50), int(rand() * 1000)
        printf "      |         ^~~~\n"
      }
    }
    printf "[%3d%%] Linking C shared library libmod_%d.so\n", int(n * 100 / 24000), m
    printf "make[1]: Leaving directory \047/src/proj/mod_%d\047\n", m
  }
  printf "[100%%] Built target all\n"
}'"#;

#[test]
fn the_line_log_costs_a_fraction_of_the_output_it_indexes() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    for (name, cmd, max) in [("seq 1 5000000", "seq 1 5000000", 0.10), ("build log", BUILD_LOG, 0.25)] {
        let r = run(&mut c, &s, cmd);
        let out = r["stdout_bytes"].as_u64().unwrap();
        assert!(out > 5_000_000, "{name}: {r}");
        let (raw, lines) = log_sizes(&h, &r["job"]);
        let ratio = lines as f64 / out as f64;
        println!(
            "{name}: {out} output bytes, raw log {raw} bytes, line log {lines} bytes: {ratio:.3}× the output, {:.3}× the raw log",
            lines as f64 / raw as f64
        );
        assert!(ratio < max, "{name}: the line log is {ratio:.3}× the output it indexes");
        // The line views still read it: the last lines, exactly.
        let t = c.call("output", json!({"session": s, "job": r["job"], "tail": 1})).unwrap();
        let last = if name == "build log" { "[100%] Built target all" } else { "5000000" };
        assert!(t["text"].as_str().unwrap().ends_with(&format!(": {last}\n")), "{t}");
    }
}

/// Bytes the job files (`jobs/<N>.log` and `jobs/<N>.lines`) under `dir` take on disk (punched
/// holes excluded).
fn stored(dir: &Path) -> u64 {
    let mut n = 0;
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            n += stored(&p);
        } else if p.extension().is_some_and(|x| x == "log" || x == "lines")
            && p.parent().is_some_and(|d| d.ends_with("jobs"))
        {
            n += std::fs::metadata(&p).unwrap().blocks() * 512;
        }
    }
    n
}

/// What the file system may hold past the budget: a 4 KiB block at each punched range's edge and each
/// file's end, for the few job files these tests write (measured up to 20 KiB over).
const SLACK: u64 = 64 << 10;

fn raw(c: &mut Client, s: &Value, job: &Value, offset: u64) -> Result<Value, String> {
    c.call("output", json!({"session": s, "job": job, "raw": {"offset": offset, "len": 13, "unredacted": true}}))
        .map_err(|e| e.to_string())
}

#[test]
fn at_the_disk_budget_the_job_that_ended_first_loses_its_oldest_output_whatever_its_session() {
    let budget: u64 = 4 << 20;
    // Through `heddle up`'s flag (the other test sets the variable the flag sets).
    let h = Heddle::start_with(&["--disk-budget", "4M"]);
    let mut c = h.client();
    let (s1, s2) = (h.open_session(&mut c), h.open_session(&mut c));
    // Each job writes 1.56 MB (120,000 lines) and keeps about that (raw log and line log): the third
    // puts the server over 4 MiB.
    let seq = "seq -f 'line %07g' 1 120000";
    // The oldest is in the other session than the one that writes last.
    let a = run(&mut c, &s2, seq)["job"].clone();
    let b = run(&mut c, &s1, seq)["job"].clone();
    assert!(raw(&mut c, &s2, &a, 0).is_ok(), "under the budget everything is kept");
    let third = run(&mut c, &s1, seq)["job"].clone();
    let why = "removed by retention (server disk budget 4.0 MiB; oldest ended output first)";
    let evicted =
        heddle_tests::eventually(Duration::from_secs(10), || raw(&mut c, &s2, &a, 0).is_err_and(|e| e.contains(why)));
    assert!(evicted, "the job that ended first loses its output: {:?}", raw(&mut c, &s2, &a, 0));
    // Its view says so (its oldest records went, as many as needed); the later jobs, of the session
    // that wrote last, keep theirs whole.
    let w = c.call("wait", json!({"session": s2, "job": a})).unwrap();
    let first = w["view"].as_str().unwrap().lines().next().unwrap().to_owned();
    assert!(first.starts_with("[… heddle: first ") && first.contains(why), "{first}");
    assert_eq!(w["stdout_bytes"], 1_560_000, "the counts keep counting everything");
    for (s, job) in [(&s1, &b), (&s1, &third)] {
        assert_eq!(raw(&mut c, s, job, 0).unwrap()["data"], "line 0000001\n", "job {job} keeps its output");
    }
    // Give or take the file system's blocks at the punched ranges' edges. The retention thread trims
    // beside the output path, never in it: the budget holds once its pass is done (its evicting `a` is
    // seen above before the pass ends).
    let settled = heddle_tests::eventually(Duration::from_secs(10), || stored(&h.state_dir) <= budget + SLACK);
    let on_disk = stored(&h.state_dir);
    println!("job files on disk: {on_disk} bytes, budget {budget}");
    assert!(settled, "the job files take {on_disk} bytes on disk, over the {budget}-byte budget");
}

#[test]
fn running_jobs_over_the_disk_budget_keep_their_newest_output_and_are_told() {
    let budget: u64 = 2 << 20;
    let h = Heddle::start_with_env(&[], &[("HEDDLE_RETAIN_DISK_BYTES", &budget.to_string())]);
    let mut c = h.client();
    let s = h.open_session(&mut c);
    // 13 MB, alone: nothing ended to remove, so the running job keeps its newest output. The job
    // cannot end before the test lets it (it waits for `go`), so the budget is reached while it runs
    // whatever the host's load: a 13 MB `seq` alone can end before the retention thread is scheduled,
    // and then its output goes as the oldest ended output, rightly without the running job's note.
    let expect: String = (1..=999_999).map(|i| format!("line {i:07}\n")).collect();
    let go = h.project.join("go");
    let cmd = "seq -f 'line %07g' 1 999999; until [ -e go ]; do sleep 0.02; done";
    let started = c.call("run", json!({"session": s, "cmd": cmd, "yield_ms": 200})).unwrap();
    let job = started["job"].clone();
    // Every byte arrived and the job files are back near the budget while the job still runs: only
    // a pass over the running job can have done that (unclamped, they would take 13 MB and more).
    // The output after the last pass (under a 32nd of the budget) may still be there.
    let mut last = json!(null);
    let clamped = heddle_tests::eventually(Duration::from_secs(30), || {
        last = c.call("wait", json!({"session": s, "job": job, "yield_ms": 0})).unwrap();
        last["stdout_bytes"].as_u64() == Some(expect.len() as u64) && stored(&h.state_dir) <= budget + (256 << 10)
    });
    assert!(
        clamped,
        "the running job's output was never trimmed to the budget: {} bytes on disk, {last}",
        stored(&h.state_dir)
    );
    assert_eq!(last["state"], "running", "the job waits for the test: {last}");
    std::fs::write(&go, "").unwrap();
    let r = c.call("wait", json!({"session": s, "job": job, "yield_ms": 300_000})).unwrap();
    assert_eq!(r["state"], "exited", "{r}");
    assert_eq!(r["stdout_bytes"].as_u64(), Some(expect.len() as u64), "{r}");
    let view = r["view"].as_str().unwrap();
    let first = view.lines().next().unwrap();
    assert!(first.starts_with("[… heddle: first "), "{first}");
    assert!(first.contains("removed by retention (server disk budget 2.0 MiB"), "{first}");
    assert!(view.ends_with("line 0999999\n"), "the newest output stays: {view}");
    let note = r["note"].as_str().unwrap_or_default();
    assert!(note.contains("the server's disk budget was reached while this job ran"), "the job is told: {r}");
    let e = raw(&mut c, &s, &r["job"], 0).unwrap_err();
    assert!(e.contains("removed by retention (server disk budget 2.0 MiB"), "{e}");
    let t = c.call("output", json!({"session": s, "job": r["job"], "tail": 1})).unwrap();
    assert_eq!(t["text"], "999999: line 0999999\n", "{t}");
    // The end of the job's output wakes the check: the budget holds, give or take the file system
    // block at the punched range's edge (4 KiB for each of the two files).
    let slack = 16 << 10;
    let within = heddle_tests::eventually(Duration::from_secs(10), || stored(&h.state_dir) <= budget + slack);
    let on_disk = stored(&h.state_dir);
    println!("job files on disk after a 13 MB job: {on_disk} bytes, budget {budget}");
    assert!(within, "{on_disk} bytes on disk, budget {budget}");
    assert!(on_disk > budget / 2, "what fits is kept: {on_disk} bytes on disk, budget {budget}");
}

#[test]
fn a_closed_sessions_output_is_the_oldest_ended_output_at_the_disk_budget() {
    let budget: u64 = 4 << 20;
    let h = Heddle::start_with(&["--disk-budget", "4M"]);
    let mut c = h.client();
    let seq = "seq -f 'line %07g' 1 120000";
    // A session writes two jobs' output (about 3 MiB with their line logs) and is closed: no call can
    // read its output any more, but it is still on disk, within the budget.
    let gone = c.call("session.open", json!({"name": "gone", "cwd": h.project})).unwrap()["session"].clone();
    run(&mut c, &gone, seq);
    run(&mut c, &gone, seq);
    c.call("session.close", json!({"session": gone})).unwrap();
    let closed_dir = h.state_dir.join("sessions/gone");
    assert!(stored(&closed_dir) > 0, "a closed session's output stays while there is room");
    // An open session's new output takes the server over the budget: the closed session's goes first,
    // and the open session's jobs keep theirs whole.
    let s = h.open_session(&mut c);
    let a = run(&mut c, &s, seq)["job"].clone();
    let b = run(&mut c, &s, seq)["job"].clone();
    let removed = heddle_tests::eventually(Duration::from_secs(10), || !closed_dir.exists());
    assert!(removed, "the closed session's output was not removed: {} bytes", stored(&closed_dir));
    for job in [&a, &b] {
        assert_eq!(raw(&mut c, &s, job, 0).unwrap()["data"], "line 0000001\n", "job {job} keeps its output");
    }
    let settled = heddle_tests::eventually(Duration::from_secs(10), || stored(&h.state_dir) <= budget + SLACK);
    assert!(settled, "the job files take {} bytes, over the {budget}-byte budget", stored(&h.state_dir));
}
