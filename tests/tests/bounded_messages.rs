//! Every message between heddle's processes is bounded. A job that leaves many processes with long
//! command lines behind used to make its survivors listing (megabytes) too large for one event frame:
//! the worker exited, the supervisor's death notice listing the same processes was dropped as over the
//! control packet limit, the front kept the session with a dead worker, every later `run` stayed
//! `running`, and `session.close` waited 30 s to report `killed: 0, verified_empty: false`.

use heddle_tests::{eventually, run_ok, run_to_end, Heddle};
use serde_json::json;
use std::time::{Duration, Instant};

/// Background processes the job leaves (each a `bash` waiting on its `sleep`: two processes apiece).
const BACKGROUND: usize = 40;
/// Bytes of each background bash's command line argument (under the kernel's 128 KiB per argument).
const ARG: usize = 100_000;

/// Wait until the job's cgroup holds the job's shell and every background bash with its `sleep`
/// (read with builtins, so nothing transient is counted): the survivors are listed when the job ends.
const ALL_STARTED: &str = "cg=/sys/fs/cgroup/unified$(sed -n 's/^0:://p' /proc/self/cgroup); \
    [ -e \"$cg/cgroup.procs\" ] || cg=/sys/fs/cgroup$(sed -n 's/^0:://p' /proc/self/cgroup); \
    for t in $(seq 600); do mapfile -t P < \"$cg/cgroup.procs\"; [ ${#P[@]} -ge $((2 * BG + 1)) ] && break; sleep 0.05; done";

#[test]
fn survivors_with_huge_command_lines_are_listed_capped_and_the_session_carries_on() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    // `sleep 300; :` keeps each bash alive (not exec'd into its sleep), with the long argument in its argv.
    let cmd = format!(
        "L=$(head -c {ARG} /dev/zero | tr '\\0' x); for i in $(seq {BACKGROUND}); do bash -c 'sleep 300; :' \"$L\" & done; BG={BACKGROUND}; {ALL_STARTED}"
    );
    let r = run_to_end(&mut c, &s, &cmd);
    assert_eq!(r["exit_code"], 0, "{r}");
    let job = r["job"].clone();
    let mut last = json!(null);
    let listed = eventually(Duration::from_secs(15), || {
        last = c.call("wait", json!({"session": s, "job": job, "yield_ms": 0})).unwrap();
        last["survivors"].as_array().is_some_and(|v| !v.is_empty())
    });
    assert!(listed, "the job's survivors were never listed: {last}");
    let survivors = last["survivors"].as_array().unwrap();
    let total = 2 * BACKGROUND;
    assert_eq!(survivors.len(), 64, "the listing is capped: {} listed", survivors.len());
    assert_eq!(last["survivors_more"], total - 64, "the rest are counted: {}", last["survivors_more"]);
    let note = last["note"].as_str().unwrap_or_default();
    assert!(note.contains(&format!("and {} more", total - 64)), "{note}");
    for p in survivors {
        let cmdline = p["cmdline"].as_str().unwrap();
        assert!(cmdline.len() <= 512, "a command line is cut to 512 bytes: {} bytes", cmdline.len());
    }
    assert!(survivors.iter().any(|p| p["cmdline"].as_str().unwrap().ends_with("[cut]")), "a cut command line says so");

    // The session still works: its worker is alive and runs the next job.
    assert_eq!(run_ok(&mut c, &s, "echo ok"), "ok\n");

    let started = Instant::now();
    let closed = c.call("session.close", json!({"session": s})).unwrap();
    assert!(started.elapsed() < Duration::from_secs(10), "close took {:?}", started.elapsed());
    assert_eq!(closed["verified_empty"], true, "{closed}");
    let killed = closed["killed"].as_u64().unwrap_or(0) as usize;
    assert!(killed >= total, "close reports every process it killed ({total}): {closed}");
}

/// The supervisor's notice of a worker's death lists what it killed; with 80 processes of 100 KB command
/// lines it was 4 MB, over the control packet limit, and dropped: the front never learnt of the death,
/// the job stayed `running` and `session.close` reported nothing killed. Now the notice carries 64 and
/// counts the rest.
#[test]
fn a_worker_death_with_huge_survivors_reaches_the_front() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let cmd = format!(
        "L=$(head -c {ARG} /dev/zero | tr '\\0' x); for i in $(seq {BACKGROUND}); do bash -c 'sleep 300; :' \"$L\" & done; sleep 300"
    );
    let r = c.call("run", json!({"session": s, "cmd": cmd, "yield_ms": 300})).unwrap();
    assert_eq!(r["state"], "running", "{r}");
    let total = 2 * BACKGROUND;
    let cgroup = heddle_tests::job_cgroup(&mut c, &s, &r["job"]);
    assert!(eventually(Duration::from_secs(10), || heddle_tests::pids_of(&cgroup).len() > total));
    let d = c.call("describe", json!({"session": s})).unwrap();
    let worker = d["sessions"][0]["worker"]["pid"].as_u64().expect("worker pid") as i32;
    // The worker is the session's, started by the stack this test started.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(worker), nix::sys::signal::SIGKILL).unwrap();
    let w = c.call("wait", json!({"session": s, "job": r["job"], "yield_ms": 10_000})).unwrap();
    assert_eq!(w["state"], "lost", "the front learnt of the worker's death: {w}");
    let started = Instant::now();
    let closed = c.call("session.close", json!({"session": s})).unwrap();
    assert!(started.elapsed() < Duration::from_secs(10), "close took {:?}", started.elapsed());
    let killed = closed["killed"].as_u64().unwrap_or(0) as usize;
    assert!(killed > total, "close reports what the worker's death killed (more than {total}): {closed}");
    assert_eq!(closed["survivors"].as_array().map(Vec::len), Some(64), "{closed}");
}
