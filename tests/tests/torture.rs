//! The torture run: a mixed workload (streams of known bytes, keyed runs with a side effect, kills) in
//! several sessions while the front, a worker or the supervisor is SIGKILLed at random moments. At the end
//! it prints its counts and holds the stack to what it promises:
//!
//! - **bytes lost: 0** — every job that exited 0 stored exactly the bytes it wrote, in order;
//! - **replayed: 0** — no idempotency key ran its command twice, whatever was killed meanwhile, and a key
//!   whose job is known to have exited ran exactly once;
//! - **a job is lost only with its worker or supervisor**: a lost job met a kill of its session's worker or
//!   of the supervisor after it was submitted (a kill reaches until the front has heard of the death);
//! - **nothing left over** — after the sessions close, no process is left in the cgroup tree, and the
//!   front's fds did not grow with the work done.
//!
//! `HEDDLE_TORTURE_SECS` sets the length (default 40 s, so `.ci/run` stays bounded; give it 600 for a
//! long run) and `HEDDLE_TORTURE_SEED` the random seed (printed, so a failure can be replayed).

use heddle_tests::{alive, eventually, read_stream, Client, Heddle};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A small deterministic generator (xorshift64*), so a seed replays a run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// `seq 1 N` as bytes.
fn seq_bytes(n: u64) -> Vec<u8> {
    (1..=n).flat_map(|i| format!("{i}\n").into_bytes()).collect()
}

/// A call that survives the stack being killed under it: reconnect and retry until answered (a retry of
/// a keyed mutation is exactly what idempotency keys are for; the others are reads or new work).
fn call(h: &Heddle, c: &mut Option<Client>, method: &str, params: &Value) -> Result<Value, heddle_tests::CallError> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if c.is_none() {
            *c = Client::connect(&h.socket).ok();
        }
        if let Some(conn) = c.as_mut() {
            match conn.call(method, params.clone()) {
                Ok(v) => return Ok(v),
                // An answer that is an error is the stack's answer; a broken connection is not.
                Err(e) if e.code().is_some() => return Err(e),
                Err(_) => *c = None,
            }
        }
        assert!(Instant::now() < deadline, "{method} got no answer for 60 s: the stack did not come back");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn describe(h: &Heddle) -> Value {
    let mut c = None;
    call(h, &mut c, "describe", &json!({})).unwrap()
}

fn fd_count(pid: u64) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

#[derive(Default)]
struct Counts {
    streams: usize,
    streams_checked: usize,
    bytes_lost: usize,
    keyed: usize,
    keyed_ran_once: usize,
    replayed: usize,
    jobs_lost: usize,
    killed_by_us: usize,
}

/// When a fatal kill happened, and whose worker it took (`None`: the supervisor, so every session's).
type FatalKill = (Instant, Option<&'static str>);

#[test]
fn the_stack_keeps_its_promises_while_its_processes_are_killed_at_random() {
    let secs: u64 = std::env::var("HEDDLE_TORTURE_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(40);
    let seed: u64 = std::env::var("HEDDLE_TORTURE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1
    });
    println!("torture: {secs} s, seed {seed}");
    let h = Arc::new(Heddle::start());
    let sessions = ["t0", "t1", "t2"];
    {
        let mut c = None;
        for s in sessions {
            call(&h, &mut c, "session.open", &json!({"name": s, "cwd": h.project})).unwrap();
        }
    }
    let front_fds_before = fd_count(describe(&h)["front"]["pid"].as_u64().unwrap());
    let keys_file = h.project.join("keys.log");
    let stop = Arc::new(AtomicBool::new(false));
    let kills: Arc<Mutex<HashMap<&'static str, usize>>> = Arc::default();
    // When a worker (of a session) or the supervisor (`None`: every session) was killed: a job may be
    // lost only to such a kill after it was submitted.
    let fatal: Arc<Mutex<Vec<FatalKill>>> = Arc::default();

    // The chaos: every 2–5 s, SIGKILL the front, a session's worker, or (rarely) the supervisor.
    let chaos = std::thread::spawn({
        let (h, stop, kills, fatal) = (h.clone(), stop.clone(), kills.clone(), fatal.clone());
        move || {
            let mut rng = Rng(seed ^ 0x9E37_79B9_7F4A_7C15);
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(2000 + rng.below(3000)));
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let d = describe(&h);
                let (what, session, pid) = match rng.below(10) {
                    0..=5 => ("front", None, d["front"]["pid"].as_u64()),
                    6..=8 => {
                        let s = sessions[rng.below(3) as usize];
                        let mut c = None;
                        let facts = call(&h, &mut c, "describe", &json!({"session": s}));
                        ("worker", Some(s), facts.ok().and_then(|f| f["sessions"][0]["worker"]["pid"].as_u64()))
                    }
                    _ => ("supervisor", None, d["supervisor"]["pid"].as_u64()),
                };
                let Some(pid) = pid else { continue };
                let front = d["front"]["pid"].as_u64();
                if kill(Pid::from_raw(pid as i32), Signal::SIGKILL).is_ok() {
                    *kills.lock().unwrap().entry(what).or_default() += 1;
                    eventually(Duration::from_secs(30), || !alive(pid));
                    // A fatal kill is noted once the front can no longer hand the dying process a job: a
                    // job submitted up to here may have met it. `kill` returns before the process is torn
                    // down, and the front hears of the death only after that, so the kill reaches jobs
                    // submitted after the signal: a worker's, until the supervisor's `WorkerDied` reached
                    // the front (the session is lost, or has another worker); the supervisor's, until the
                    // front that served its sessions has exited (it runs jobs in them until it reads the
                    // control socket's end, and the restarted supervisor ends them as leftovers).
                    match (what, session) {
                        ("worker", Some(s)) => {
                            eventually(Duration::from_secs(30), || {
                                let mut c = None;
                                let facts = call(&h, &mut c, "describe", &json!({"session": s}));
                                facts.ok().is_some_and(|f| {
                                    let f = &f["sessions"][0];
                                    f["state"] == "lost" || f["worker"]["pid"].as_u64().is_some_and(|p| p != pid)
                                })
                            });
                        }
                        ("supervisor", _) => {
                            if let Some(front) = front {
                                eventually(Duration::from_secs(30), || !alive(front));
                            }
                        }
                        _ => {}
                    }
                    if what != "front" {
                        fatal.lock().unwrap().push((Instant::now(), session));
                    }
                    // Let the stack come back before the next blow.
                    let _ = describe(&h);
                }
            }
        }
    });

    // The workload: two clients, each picking sessions and operations at random.
    type Stream = (String, u64, u64, Instant);
    let streams: Arc<Mutex<Vec<Stream>>> = Arc::default();
    let keyed: Arc<Mutex<Vec<(String, String, Value)>>> = Arc::default();
    let deadline = Instant::now() + Duration::from_secs(secs);
    let workers: Vec<_> = (0..2u64)
        .map(|w| {
            let (h, streams, keyed) = (h.clone(), streams.clone(), keyed.clone());
            let keys_file = keys_file.clone();
            std::thread::spawn(move || {
                let mut rng = Rng(seed.wrapping_add(w * 7919) | 1);
                let mut c = None;
                let mut n = 0u64;
                while Instant::now() < deadline {
                    n += 1;
                    let s = sessions[rng.below(3) as usize].to_owned();
                    // A session lost with its worker or supervisor is opened again (same name).
                    let _ = call(&h, &mut c, "session.open", &json!({"name": s, "cwd": h.project}));
                    match rng.below(10) {
                        0..=4 => {
                            let lines = 1 + rng.below(300_000);
                            let submitted = Instant::now();
                            let params =
                                json!({"session": s, "cmd": format!("seq 1 {lines}"), "yield_ms": rng.below(2) * 3000});
                            if let Ok(r) = call(&h, &mut c, "run", &params) {
                                let job = r["job"].as_u64().unwrap();
                                streams.lock().unwrap().push((s, job, lines, submitted));
                            }
                        }
                        5..=8 => {
                            let key = format!("w{w}-k{n}");
                            let cmd = format!("echo {key} >> {}", keys_file.display());
                            let params = json!({"session": s, "cmd": cmd, "idempotency_key": key, "yield_ms": 5000});
                            if let Ok(r) = call(&h, &mut c, "run", &params) {
                                keyed.lock().unwrap().push((s, key, r));
                            }
                        }
                        _ => {
                            let r = call(&h, &mut c, "run", &json!({"session": s, "cmd": "sleep 30", "yield_ms": 0}));
                            if let Ok(r) = r {
                                let _ = call(&h, &mut c, "kill", &json!({"session": s, "job": r["job"]}));
                            }
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("a workload thread panicked");
    }
    stop.store(true, Ordering::Relaxed);
    chaos.join().expect("the chaos thread panicked");

    // Settle: every job ends; then check the promises.
    let mut counts = Counts::default();
    let mut c = None;
    let fatal = fatal.lock().unwrap().clone();
    for (s, job, lines, submitted) in streams.lock().unwrap().iter() {
        counts.streams += 1;
        let Ok(r) = call(&h, &mut c, "wait", &json!({"session": s, "job": job, "yield_ms": 120_000})) else {
            // The session is gone (lost with its supervisor and opened again under the same name).
            counts.jobs_lost += 1;
            continue;
        };
        match r["state"].as_str() {
            Some("exited") if r["exit_code"] == 0 => {
                counts.streams_checked += 1;
                let conn = c.get_or_insert_with(|| h.client());
                let got = read_stream(conn, &json!(s), &json!(job), "stdout");
                if got != seq_bytes(*lines) {
                    counts.bytes_lost += 1;
                    println!("bytes lost: {s} job {job}: {} of {} bytes", got.len(), seq_bytes(*lines).len());
                }
            }
            Some("lost") => {
                counts.jobs_lost += 1;
                let met_a_kill = fatal.iter().any(|(at, who)| at >= submitted && who.is_none_or(|w| w == s));
                assert!(
                    met_a_kill,
                    "job {job} of {s} was lost although only fronts were killed since it was submitted: {r}"
                );
            }
            Some("killed") => counts.killed_by_us += 1,
            other => panic!("a seq job ended {other:?}: {r}"),
        }
    }
    // Retry every key once more, as a client that lost its answer would; then count executions.
    for (s, key, _) in keyed.lock().unwrap().iter() {
        let cmd = format!("echo {key} >> {}", keys_file.display());
        let _ = call(&h, &mut c, "run", &json!({"session": s, "cmd": cmd, "idempotency_key": key, "yield_ms": 5000}));
    }
    let log = std::fs::read_to_string(&keys_file).unwrap_or_default();
    let mut ran: HashMap<&str, usize> = HashMap::new();
    for line in log.lines() {
        *ran.entry(line).or_default() += 1;
    }
    for (_, key, first) in keyed.lock().unwrap().iter() {
        counts.keyed += 1;
        let times = ran.get(key.as_str()).copied().unwrap_or(0);
        if times > 1 {
            counts.replayed += 1;
            println!("replayed: key {key} ran {times} times (first answer: {})", first["state"]);
        }
        if first["state"] == "exited" && first["exit_code"] == 0 && times == 1 {
            counts.keyed_ran_once += 1;
        }
    }

    let kills = kills.lock().unwrap().clone();
    println!(
        "torture counts: kills {kills:?}; streams {} (checked {}, killed by the workload {}), bytes lost {}, jobs lost {}; keyed runs {} (ran once {}), replayed {}",
        counts.streams,
        counts.streams_checked,
        counts.killed_by_us,
        counts.bytes_lost,
        counts.jobs_lost,
        counts.keyed,
        counts.keyed_ran_once,
        counts.replayed
    );
    assert!(kills.values().sum::<usize>() > 0, "the run killed something (it lasted {secs} s)");
    assert!(counts.streams_checked > 0 && counts.keyed_ran_once > 0, "the workload got work done");
    assert_eq!(counts.bytes_lost, 0, "no byte of an exited job is lost");
    assert_eq!(counts.replayed, 0, "no keyed run ran twice");

    // Nothing left over: the sessions close empty, and the front's fds did not grow with the work.
    let front_fds_after = fd_count(describe(&h)["front"]["pid"].as_u64().unwrap());
    println!("front fds: {front_fds_before} before, {front_fds_after} after (possibly another front)");
    assert!(front_fds_after <= front_fds_before + 16, "the front's fds grew: {front_fds_before} → {front_fds_after}");
    for s in sessions {
        let closed = call(&h, &mut c, "session.close", &json!({"session": s}));
        if let Ok(closed) = closed {
            assert_eq!(closed["verified_empty"], true, "{s} closed empty: {closed}");
        }
    }
    let left = heddle_tests::pids_of(&h.cgroup_root);
    assert!(
        eventually(Duration::from_secs(10), || {
            let mut all = Vec::new();
            collect_pids(&h.cgroup_root, &mut all);
            all.iter().all(|p| !alive(u64::from(*p)) || is_stack(*p))
        }),
        "no job process is left in the cgroup tree ({left:?})"
    );
}

fn collect_pids(dir: &std::path::Path, out: &mut Vec<u32>) {
    out.extend(heddle_tests::pids_of(dir));
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                collect_pids(&e.path(), out);
            }
        }
    }
}

/// heddle's own processes (the supervisor and front live in the root's `supervisor` group).
fn is_stack(pid: u32) -> bool {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    comm.starts_with("heddle-")
}
