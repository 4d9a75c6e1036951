//! Pre-started shells (docs/architecture.md, "Pre-started shells"): between calls the worker starts the session's next
//! bash and restores the state record in it, so the next `run` only hands the command over. These tests
//! drive the real stack and check that a pre-started job is indistinguishable from a cold one except for
//! the `prestarted` flag: same state, same stdin, same fds, same environment, and nothing left behind.

use heddle_tests::{eventually, run_ok as ok, run_to_end as run, Client, Heddle};
use serde_json::{json, Value};
use std::time::Duration;

/// A stack whose spares never wait for a free CPU: these tests check what a spare does, on a CI host whose
/// CPUs other tests keep busy (the wait has a test of its own, below).
fn stack() -> Heddle {
    Heddle::start_with_env(&[], &[("HEDDLE_SPARE_CPU_WAIT_MS", "0")])
}

/// Run `cmd` after giving the worker time to start the next spare (an agent's think time is far longer).
fn paced(c: &mut Client, s: &Value, cmd: &str) -> Value {
    std::thread::sleep(Duration::from_millis(150));
    run(c, s, cmd)
}

fn stdout(c: &mut Client, s: &Value, r: &Value) -> String {
    heddle_tests::stream_text(c, s, &r["job"], "stdout")
}

#[test]
fn a_paced_call_runs_on_a_prestarted_shell_carrying_the_state_of_the_call_before() {
    let h = stack();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    ok(&mut c, &s, "mkdir -p 'sub dir' && cd 'sub dir' && export HP_VAR='a b' && f() { echo fn-$1; }; shopt -s expand_aliases; alias al='echo alias'");
    let r = paced(&mut c, &s, "printf '%s|%s|' \"${PWD##*/}\" \"$HP_VAR\"; f x; al");
    assert_eq!(r["exit_code"], 0, "{r}");
    assert_eq!(r["prestarted"], true, "{r}");
    assert!(r["state_note"].is_null(), "{r}");
    assert_eq!(stdout(&mut c, &s, &r), "sub dir|a b|fn-x\nalias\n");
    // The state this job changes is carried to the next one, which is pre-started from the new record.
    let r = paced(&mut c, &s, "cd .. && export HP_TWO=2");
    assert_eq!(r["prestarted"], true, "{r}");
    let r = paced(&mut c, &s, "printf '%s|%s' \"${PWD##*/}\" \"$HP_TWO\"");
    assert_eq!(r["prestarted"], true, "{r}");
    assert_eq!(stdout(&mut c, &s, &r), format!("{}|2", h.project.file_name().unwrap().to_string_lossy()));
}

#[test]
fn a_prestarted_shell_hands_a_scoped_capture_over_and_the_next_call_sees_its_changes() {
    // The command travels to the spare after the line that scopes its capture (worker::state::spare_input).
    let h = stack();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    ok(&mut c, &s, "export P1=1; g() { echo g; }; mkdir -p d");
    let r = paced(&mut c, &s, "cd d; P2=\"$P1$P1\"; unset P1; echo \"$BASH_EXECUTION_STRING\" | wc -l");
    assert_eq!((r["prestarted"].as_bool(), r["state_note"].is_null()), (Some(true), true), "{r}");
    assert_eq!(stdout(&mut c, &s, &r), "1\n", "the scope line is not part of the command");
    let r = paced(&mut c, &s, "echo ${PWD##*/} ${P1-unset} $P2; g");
    assert_eq!(r["prestarted"], true, "{r}");
    assert_eq!(stdout(&mut c, &s, &r), "d unset 11\ng\n");
}

#[test]
fn a_prestarted_job_has_closed_stdin_fresh_seconds_and_the_same_fds_as_a_cold_one() {
    let probe =
        "read -r -t 5 line; echo read=$?; echo secs=$SECONDS; ls /proc/self/fd | sort -n | tr '\\n' ' '; echo; \
                 readlink /proc/$$/fd/0";
    let h = stack();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let warm = paced(&mut c, &s, "true");
    assert_eq!(warm["prestarted"], true, "{warm}");
    std::thread::sleep(Duration::from_millis(1200));
    let r = run(&mut c, &s, probe);
    assert_eq!(r["prestarted"], true, "{r}");
    // Stdin is /dev/null (read fails at once, no 5 s wait); SECONDS counts from the handover, not from
    // when the spare started 1.2 s earlier.
    assert!(r["duration_ms"].as_f64().unwrap() < 4000.0, "{r}");
    let hot = stdout(&mut c, &s, &r);
    let cold_h = Heddle::start_with_env(&[], &[("HEDDLE_SPARES", "0")]);
    let mut cc = cold_h.client();
    let cs = cold_h.open_session(&mut cc);
    let cr = run(&mut cc, &cs, probe);
    assert_eq!(cr["prestarted"], false, "{cr}");
    let cold = stdout(&mut cc, &cs, &cr);
    assert_eq!(hot, cold, "a pre-started job must see what a cold one sees");
    assert!(hot.starts_with("read=1\nsecs=0\n"), "{hot:?}");
    assert!(hot.ends_with("/dev/null\n"), "{hot:?}");
}

#[test]
fn a_call_with_its_own_env_starts_cold_and_sees_that_env() {
    let h = stack();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    ok(&mut c, &s, "true");
    std::thread::sleep(Duration::from_millis(150));
    let r = c.call(
        "run",
        json!({"session": s, "cmd": "echo \"$CALL_ONLY\"", "env": {"CALL_ONLY": "x1"}, "yield_ms": 20_000}),
    );
    let r = r.expect("run");
    assert_eq!(r["exit_code"], 0, "{r}");
    assert_eq!(r["prestarted"], false, "{r}");
    assert_eq!(stdout(&mut c, &s, &r), "x1\n");
    // The next call, without an env of its own, runs on a spare again.
    let r = paced(&mut c, &s, "true");
    assert_eq!(r["prestarted"], true, "{r}");
}

#[test]
fn concurrent_calls_take_one_spare_and_the_rest_start_cold_with_the_same_state() {
    let h = stack();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    ok(&mut c, &s, "export CC=7");
    std::thread::sleep(Duration::from_millis(150));
    let ids: Vec<Value> = (0..4)
        .map(|i| {
            let r =
                c.call("run", json!({"session": s, "cmd": format!("sleep 0.3; echo $CC-{i}"), "yield_ms": 0})).unwrap();
            r["job"].clone()
        })
        .collect();
    let mut hot = 0;
    for (i, id) in ids.iter().enumerate() {
        let r = c.call("wait", json!({"session": s, "job": id, "yield_ms": 20_000})).expect("wait");
        assert_eq!(r["exit_code"], 0, "{r}");
        hot += usize::from(r["prestarted"] == true);
        assert_eq!(stdout(&mut c, &s, &r), format!("7-{i}\n"));
    }
    assert_eq!(hot, 1, "exactly the first call finds the spare");
}

#[test]
fn spares_off_means_every_job_starts_cold() {
    let h = Heddle::start_with_env(&[], &[("HEDDLE_SPARES", "0")]);
    let mut c = h.client();
    let s = h.open_session(&mut c);
    for _ in 0..3 {
        let r = paced(&mut c, &s, "true");
        assert_eq!(r["prestarted"], false, "{r}");
    }
}

#[test]
fn a_persistent_session_never_gets_a_spare() {
    let h = stack();
    let mut c = h.client();
    let r = c.call("session.open", json!({"cwd": h.project, "persistent": true})).expect("session.open");
    let s = r["session"].clone();
    for _ in 0..2 {
        let r = paced(&mut c, &s, "true");
        assert_eq!(r["prestarted"], false, "{r}");
    }
}

fn session_dir(c: &mut Client, s: &Value) -> std::path::PathBuf {
    let d = c.call("describe", json!({"session": s})).unwrap();
    std::path::PathBuf::from(d["sessions"][0]["cgroup"].as_str().unwrap())
}

fn job_dirs(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("slot-"))
                .collect()
        })
        .unwrap_or_default()
}

/// The job cgroups with processes in them (emptied ones wait, empty, for the next jobs).
fn occupied(dir: &std::path::Path) -> Vec<String> {
    job_dirs(dir).into_iter().filter(|n| !heddle_tests::pids_of(&dir.join(n)).is_empty()).collect()
}

#[test]
fn the_spare_waits_in_its_own_job_cgroup_and_session_close_removes_it_and_its_shell() {
    let h = stack();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let r = paced(&mut c, &s, "true");
    assert_eq!(r["prestarted"], true, "{r}");
    let dir = session_dir(&mut c, &s);
    // The spare for the next job waits, unseen, in the next job's cgroup: one bash, nothing else.
    assert!(eventually(Duration::from_secs(5), || occupied(&dir).len() == 1), "{:?}", job_dirs(&dir));
    let spare_cgroup = occupied(&dir)[0].clone();
    let spare = dir.join(&spare_cgroup);
    let procs = std::fs::read_to_string(spare.join("cgroup.procs")).unwrap();
    let pids: Vec<u64> = procs.split_whitespace().map(|p| p.parse().unwrap()).collect();
    assert_eq!(pids.len(), 1, "{procs}");
    let comm = std::fs::read_to_string(format!("/proc/{}/comm", pids[0])).unwrap();
    assert_eq!(comm.trim(), "bash");
    // The spare is not a job: no unsettled job of `jobs` has its cgroup.
    let jobs = c.call("jobs", json!({"session": s})).expect("jobs");
    let listed = jobs["jobs"].as_array().unwrap();
    assert!(!listed.is_empty(), "{jobs}");
    assert!(!listed.iter().any(|j| j["settled"] != true && j["cgroup"] == spare_cgroup.as_str()), "{jobs}");
    let closed = c.call("session.close", json!({"session": s})).expect("close");
    assert_eq!(closed["survivors"], json!([]), "the spare is no survivor: {closed}");
    assert_eq!(closed["killed"], 0, "{closed}");
    assert!(eventually(Duration::from_secs(10), || !dir.exists()), "session cgroup left: {:?}", job_dirs(&dir));
    assert!(!heddle_tests::alive(pids[0]), "the spare bash outlived its session");
}

#[test]
fn functions_named_like_the_spares_tools_do_not_run_before_the_command() {
    let h = stack();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    ok(&mut c, &s, "command() { echo shadow-command; }; exec() { echo shadow-exec; }; :() { echo shadow-colon; }");
    let r = paced(&mut c, &s, "readlink /proc/$$/fd/0; declare -F | wc -l");
    assert_eq!((r["prestarted"].as_bool(), r["state_note"].is_null()), (Some(true), true), "{r}");
    assert_eq!(stdout(&mut c, &s, &r), "/dev/null\n3\n", "{r}");
}

/// Busy loops, one more than the host has CPUs, ended (by their pids) when dropped.
struct Hogs(Vec<std::process::Child>);

impl Hogs {
    fn start() -> Hogs {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get()) + 2;
        Hogs(
            (0..n)
                .map(|_| {
                    std::process::Command::new("bash")
                        .args(["--noprofile", "--norc", "-c", "while :; do :; done"])
                        .spawn()
                        .expect("a busy loop")
                })
                .collect(),
        )
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        for h in &mut self.0 {
            let _ = h.kill();
            let _ = h.wait();
        }
    }
}

#[test]
fn after_a_job_the_next_spare_waits_for_a_free_cpu_but_no_longer_than_its_bound() {
    // Once a session ran a job, its next spare waits for a free CPU, here up to 1 s (by default 5 s).
    let h = Heddle::start_with_env(&[], &[("HEDDLE_SPARE_CPU_WAIT_MS", "1000")]);
    let mut c = h.client();
    let s = h.open_session(&mut c);
    std::thread::sleep(Duration::from_millis(150));
    let hogs = Hogs::start();
    run(&mut c, &s, "true");
    // Every CPU stays busy: the spare for the next job waits, and that job starts cold.
    let r = paced(&mut c, &s, "true");
    assert_eq!(r["prestarted"], false, "a spare was started while every CPU was busy: {r}");
    // Not past its bound: 1 s after that job, the spare starts though the host is still busy.
    std::thread::sleep(Duration::from_millis(2500));
    let r = run(&mut c, &s, "true");
    assert_eq!(r["prestarted"], true, "the spare waited past its bound: {r}");
    drop(hogs);
}
