//! A job is a cgroup (issue 4), end to end through the real binaries: survivors are listed and killed
//! without touching anything outside the job, `keep` moves a job out of its session, limits hold
//! (pids, memory), nothing leaks after many jobs, and a restarted supervisor cleans up and adopts.

use heddle_tests::{alive, bin_dir, eventually, job_cgroup, pids_of, Heddle};
use serde_json::{json, Value};
use std::process::Command;
use std::time::Duration;

fn run(c: &mut heddle_tests::Client, s: &Value, cmd: &str, yield_ms: u64) -> Value {
    c.call("run", json!({"session": s, "cmd": cmd, "yield_ms": yield_ms})).expect("run")
}

fn survivor_pids(r: &Value) -> Vec<u64> {
    r["survivors"].as_array().unwrap().iter().map(|p| p["pid"].as_u64().unwrap()).collect()
}

/// A `sleep 1000` of the test's own, outside heddle: killed by the test by its pid at the end.
struct OutsideSleep(std::process::Child);

impl OutsideSleep {
    fn start() -> OutsideSleep {
        OutsideSleep(Command::new("sleep").arg("1000").spawn().expect("spawn sleep"))
    }
    fn pid(&self) -> u64 {
        u64::from(self.0.id())
    }
}

impl Drop for OutsideSleep {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn setsid_survivors_are_listed_and_kill_empties_only_the_jobs_cgroup() {
    let h = Heddle::start();
    let outside = OutsideSleep::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let r = run(&mut c, &s, "setsid sh -c 'sleep 1000 & sleep 1000' &", 10_000);
    assert_eq!((r["state"].as_str(), r["exit_code"].as_i64()), (Some("exited"), Some(0)), "{r}");
    assert_eq!(r["settled"], false, "survivors keep the job unsettled: {r}");
    assert!(!survivor_pids(&r).is_empty(), "what was alive at the exit is listed: {r}");
    assert!(r["survivors"][0]["age_ms"].is_u64() && r["survivors"][0]["cpu_ms"].is_u64(), "{r}");
    // The listing is a snapshot at the exit (the daemon may still be forking); `jobs` lists them afresh.
    let mut jobs = Value::Null;
    let two_sleeps = eventually(Duration::from_secs(5), || {
        jobs = c.call("jobs", json!({"session": s})).unwrap();
        let procs = jobs["jobs"][0]["survivors"].as_array().cloned().unwrap_or_default();
        procs.iter().filter(|p| p["cmdline"] == "sleep 1000").count() == 2
    });
    assert!(two_sleeps, "jobs lists both sleeps: {jobs}");
    assert_eq!(jobs["jobs"][0]["settled"], false);
    let survivors = survivor_pids(&jobs["jobs"][0]);
    let job_dir = job_cgroup(&mut c, &s, &r["job"]);
    let mut in_cgroup: Vec<u64> = pids_of(&job_dir).into_iter().map(u64::from).collect();
    in_cgroup.sort();
    let mut listed = survivors.clone();
    listed.sort();
    assert_eq!(in_cgroup, listed, "the survivors are exactly the cgroup's members");

    let k = c.call("kill", json!({"session": s, "job": r["job"]})).unwrap();
    assert_eq!(k["settled"], true, "{k}");
    assert!(k["usage"]["emptied_at_ms"].as_u64().unwrap() > 0, "{k}");
    assert!(k["survivors"].as_array().unwrap().is_empty(), "{k}");
    let text = heddle_tests::text_form(&k);
    let line = text.lines().find(|l| l.starts_with("killed what the job left running (")).unwrap_or_default();
    assert!(line.contains("processes when last listed: ") && line.contains("sleep (pid "), "{text}");
    let again = heddle_tests::text_form(&c.call("kill", json!({"session": s, "job": r["job"]})).unwrap());
    assert!(again.contains("there was nothing to kill"), "{again}");
    assert!(!job_dir.exists() || pids_of(&job_dir).is_empty(), "the job's cgroup is empty");
    assert!(eventually(Duration::from_secs(5), || !job_dir.exists()), "and removed");
    for pid in survivors {
        assert!(eventually(Duration::from_secs(5), || !alive(pid)), "survivor {pid} is gone");
    }
    assert!(alive(outside.pid()), "the test's own `sleep 1000` (same command line) was not touched");
}

#[test]
fn session_close_kills_and_reports_a_double_forked_daemon() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let r = run(&mut c, &s, "(sleep 1000 &) ; echo started", 10_000);
    assert_eq!(r["view"], "started\n");
    let daemon = survivor_pids(&r);
    assert_eq!(daemon.len(), 1, "{r}");
    let closed = c.call("session.close", json!({"session": s})).unwrap();
    let killed: Vec<u64> = closed["survivors"].as_array().unwrap().iter().map(|p| p["pid"].as_u64().unwrap()).collect();
    assert!(killed.contains(&daemon[0]), "session.close reports the daemon: {closed}");
    assert_eq!(closed["verified_empty"], true, "{closed}");
    assert!(eventually(Duration::from_secs(5), || !alive(daemon[0])));
}

#[test]
fn a_kept_daemon_outlives_its_session_until_kept_kill() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let r = run(&mut c, &s, "(sleep 1000 &) ; echo started", 10_000);
    let daemon = survivor_pids(&r)[0];
    let kept = c.call("keep", json!({"session": s, "job": r["job"], "name": "napper"})).unwrap();
    let kept_dir = h.cgroup_root.join("kept/napper");
    assert_eq!(kept["cgroup"].as_str(), kept_dir.to_str(), "{kept}");
    // `kill` of the kept job ends nothing and says what would.
    let k = c.call("kill", json!({"session": s, "job": r["job"]})).unwrap();
    assert!(k["note"].as_str().unwrap_or_default().contains("is kept as napper: kill does not end"), "{k}");
    assert!(alive(daemon), "kill left the kept daemon alone");
    // So does `kill` of a kept job whose main process still runs: at once, with no attempt on a cgroup
    // that moved (it waited 5 s and passed on the worker's `cgroup.kill failed: No such file`).
    let s2 = h.open_session(&mut c);
    let serving = c.call("run", json!({"session": s2, "cmd": "sleep 1000", "yield_ms": 0})).unwrap();
    c.call("keep", json!({"session": s2, "job": serving["job"], "name": "server"})).unwrap();
    let k = c.call("kill", json!({"session": s2, "job": serving["job"]})).unwrap();
    assert_eq!(k["state"], "running", "{k}");
    let note = k["note"].as_str().unwrap_or_default();
    assert!(note.contains("is kept as server: kill does not end") && note.contains("heddle kept kill server"), "{k}");
    assert!(!note.contains("cgroup.kill") && !note.contains("kill it again"), "{k}");
    let out = Command::new(bin_dir().join("heddle"))
        .arg("--socket")
        .arg(&h.socket)
        .args(["kept", "kill", "server"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let closed = c.call("session.close", json!({"session": s})).unwrap();
    assert_eq!(closed["kept"], json!(["napper"]), "{closed}");
    assert!(!closed["survivors"].as_array().unwrap().iter().any(|p| p["pid"] == daemon), "{closed}");
    assert!(alive(daemon), "the kept daemon outlived the session");
    assert_eq!(pids_of(&kept_dir), [daemon as u32], "it lives in kept/napper");

    let bin = heddle_tests::bin_dir().join("heddle");
    let table = Command::new(&bin).arg("--socket").arg(&h.socket).arg("kept").output().unwrap();
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.starts_with("NAME") && table.contains("napper") && table.contains(&format!("(pid {daemon})")),
        "{table}"
    );
    // The columns line up: the owner under OWNER, the processes (any length) last.
    let header = table.lines().next().unwrap();
    let row = table.lines().find(|l| l.starts_with("napper")).unwrap();
    let owner_end = header.find("OWNER").unwrap() + "OWNER".len();
    assert_eq!(&row[owner_end - 1..owner_end], "0", "{table}");
    assert!(row.ends_with(&format!("(pid {daemon})")), "{table}");
    let listed = Command::new(&bin).arg("--socket").arg(&h.socket).args(["--json", "kept"]).output().unwrap();
    let listed: Value = serde_json::from_slice(&listed.stdout).expect("heddle --json kept prints JSON");
    assert_eq!(listed["kept"][0]["name"], "napper", "{listed}");
    assert_eq!(listed["kept"][0]["procs"][0]["pid"], daemon, "{listed}");
    let out = Command::new(&bin).arg("--socket").arg(&h.socket).args(["kept", "kill", "napper"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.starts_with(&format!("kept job napper: killed sleep (pid {daemon})")), "{said}");
    assert!(said.contains("its cgroup is empty and removed"), "{said}");
    assert!(eventually(Duration::from_secs(5), || !alive(daemon)));
    assert!(!kept_dir.exists());
}

#[test]
fn liveness_tells_busy_from_sleeping_on_a_timer() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let sleeper = run(&mut c, &s, "sleep 30", 300);
    let live = &sleeper["liveness"];
    assert_eq!(live["activity"], "sleeping on a timer", "{sleeper}");
    assert_eq!(live["busy_cmdline"], "sleep 30", "{sleeper}");
    assert!(live["procs"].as_u64().unwrap() >= 1 && live["cpu_ms"].is_number(), "{sleeper}");
    let spinner = run(&mut c, &s, "while :; do :; done", 500);
    let w = c.call("wait", json!({"session": s, "job": spinner["job"], "yield_ms": 200})).unwrap();
    assert_eq!(w["liveness"]["activity"], "busy (running on a CPU)", "{w}");
    assert!(w["liveness"]["cpu_ms"].as_f64().unwrap() > 100.0, "CPU time is counted: {w}");
    let jobs = c.call("jobs", json!({"session": s})).unwrap();
    assert_eq!(jobs["jobs"][0]["liveness"]["activity"], "sleeping on a timer", "{jobs}");
    for job in [&sleeper["job"], &spinner["job"]] {
        assert_eq!(c.call("kill", json!({"session": s, "job": job})).unwrap()["settled"], true);
    }
}

/// `kill` with a grace period of a job that traps SIGTERM and exits with a status of its own: the
/// result keeps that status and the text's first line says it (it said only `killed`).
#[test]
fn a_graceful_kill_keeps_the_status_the_job_exited_with() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let cmd = "trap 'echo cleaning up; exit 7' TERM; while :; do sleep 0.05; done";
    let r = c.call("run", json!({"session": s, "cmd": cmd, "yield_ms": 300})).unwrap();
    assert_eq!(r["state"], "running", "{r}");
    let k = c.call("kill", json!({"session": s, "job": r["job"], "grace_ms": 3000})).unwrap();
    assert_eq!((k["state"].as_str(), k["exit_code"].as_i64()), (Some("killed"), Some(7)), "{k}");
    let text = protocol::text::job_result(&serde_json::from_value(k.clone()).unwrap());
    assert!(text.starts_with("killed (it exited 7) · "), "{text}");
    assert!(text.contains("cleaning up"), "{text}");
}
