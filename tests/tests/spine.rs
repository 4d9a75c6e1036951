//! The running system end to end (issue 2): the three kinds of process, jobs through the shared region,
//! yield-never-kills, kill, announcements, crash behaviour and protocol errors — all through the real
//! binaries and the real socket.

use heddle_tests::{alive, eventually, proc_uid, read_stream, Heddle};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn run(c: &mut heddle_tests::Client, s: &Value, cmd: &str, yield_ms: u64) -> Value {
    c.call("run", json!({"session": s, "cmd": cmd, "yield_ms": yield_ms})).expect("run")
}

#[test]
fn three_processes_with_their_uids_and_no_socket_between_front_and_worker() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let d = c.call("describe", json!({"session": s})).unwrap();
    let sup = d["supervisor"]["pid"].as_u64().unwrap();
    let front = d["front"]["pid"].as_u64().unwrap();
    let worker = d["sessions"][0]["worker"]["pid"].as_u64().unwrap();
    assert_eq!(proc_uid(sup), Some(0), "supervisor runs as root");
    assert_ne!(proc_uid(front), Some(0), "front is unprivileged");
    assert_ne!(proc_uid(worker), Some(0), "worker is unprivileged");
    assert_eq!(d["front"]["uid"].as_u64().map(|u| u as u32), proc_uid(front));
    assert!(front != sup && worker != sup && worker != front);
    assert_ne!(proc_uid(front), proc_uid(worker), "jobs run as the worker's uid and must not share the front's");

    // The worker holds no socket at all: its only channel to the front is the shared region.
    let fds: Vec<String> = std::fs::read_dir(format!("/proc/{worker}/fd"))
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    assert!(!fds.iter().any(|f| f.starts_with("socket:")), "worker fds: {fds:?}");
    for pid in [front, worker] {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
        assert!(maps.contains("memfd:heddle-session"), "pid {pid} maps the session region");
    }
    // And the job traffic really flows: a command through the region gives its output back.
    assert_eq!(run(&mut c, &s, "echo through-the-ring", 10_000)["view"], "through-the-ring\n");
}

#[test]
fn exit_code_and_both_streams() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let r = run(&mut c, &s, "echo out; echo err >&2; exit 3", 10_000);
    assert_eq!(r["state"], "exited");
    assert_eq!(r["exit_code"], 3);
    assert_eq!(r["signal"], Value::Null);
    assert_eq!(r["stdout_bytes"], 4);
    assert_eq!(r["stderr_bytes"], 4);
    assert_eq!(r["view"], "out\nerr\n");
    let job = r["job"].clone();
    assert_eq!(read_stream(&mut c, &s, &job, "stdout"), b"out\n");
    assert_eq!(read_stream(&mut c, &s, &job, "stderr"), b"err\n");
}

#[test]
fn fifty_mib_arrives_with_every_byte_in_order() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    const N: usize = 50 * 1024 * 1024;
    // A counter pattern, so that a lost, doubled or reordered chunk cannot go unnoticed.
    let r = run(&mut c, &s, &format!("seq 1 20000000 | head -c {N}"), 120_000);
    assert_eq!(r["state"], "exited", "{r}");
    assert_eq!(r["stdout_bytes"].as_u64(), Some(N as u64));
    assert!(r["omitted"]["bytes"].as_u64().unwrap() > 0, "a 50 MiB view says what it omitted");
    assert!(r["view"].as_str().unwrap().contains("bytes omitted"), "the view marks the cut");
    let got = read_stream(&mut c, &s, &r["job"], "stdout");
    let mut want = Vec::with_capacity(N + 16);
    let mut i = 1u64;
    while want.len() < N {
        want.extend_from_slice(format!("{i}\n").as_bytes());
        i += 1;
    }
    want.truncate(N);
    assert_eq!(got.len(), N);
    assert!(got == want, "stored output differs from what the job wrote");
}

#[test]
fn two_jobs_of_one_session_run_concurrently() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let start = Instant::now();
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let mut c = h.client();
            let s = s.clone();
            std::thread::spawn(move || run(&mut c, &s, "sleep 1", 10_000))
        })
        .collect();
    for t in threads {
        let r = t.join().unwrap();
        assert_eq!(r["exit_code"], 0, "{r}");
    }
    let took = start.elapsed();
    assert!(took < Duration::from_millis(1800), "two sleep 1 jobs took {took:?}");
}

#[test]
fn yield_returns_running_and_wait_returns_the_end() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let t0 = Instant::now();
    let r = run(&mut c, &s, "sleep 5; echo slept", 200);
    assert!(t0.elapsed() < Duration::from_secs(2), "run yielded after ~200 ms");
    assert_eq!(r["state"], "running");
    assert!(r["liveness"]["running_ms"].as_f64().is_some(), "{r}");
    let job = r["job"].clone();
    // A wait that times out changes nothing.
    let w = c.call("wait", json!({"session": s, "job": job, "yield_ms": 100})).unwrap();
    assert_eq!(w["state"], "running");
    let w = c.call("wait", json!({"session": s, "job": job, "yield_ms": 20_000})).unwrap();
    assert_eq!(w["state"], "exited");
    assert_eq!(w["exit_code"], 0);
    assert_eq!(w["view"], "slept\n");
}

#[test]
fn kill_ends_a_running_job_and_says_so() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let r = run(&mut c, &s, "sleep 1000", 100);
    assert_eq!(r["state"], "running");
    let k = c.call("kill", json!({"session": s, "job": r["job"]})).unwrap();
    assert_eq!(k["state"], "killed", "{k}");
    assert_eq!(k["signal"], 9);
    let jobs = c.call("jobs", json!({"session": s})).unwrap();
    assert_eq!(jobs["jobs"][0]["state"], "killed");
}

#[test]
fn an_unseen_end_is_announced_once() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let r = run(&mut c, &s, "sleep 0.3; echo bye", 0);
    assert_eq!(r["state"], "running");
    let job = r["job"].clone();
    std::thread::sleep(Duration::from_millis(800));
    let next = run(&mut c, &s, "true", 10_000);
    let ann = next["announcements"].as_array().unwrap();
    assert_eq!(ann.len(), 1, "{next}");
    assert_eq!(ann[0]["job"], job);
    assert_eq!(ann[0]["exit_code"], 0);
    assert!(ann[0]["last_lines"].to_string().contains("bye"));
    let again = c.call("jobs", json!({"session": s})).unwrap();
    assert_eq!(again["announcements"], json!([]), "announced once only");
    // A job whose end its own run reported is never announced.
    let later = run(&mut c, &s, "true", 10_000);
    assert_eq!(later["announcements"], json!([]));
}

#[test]
fn a_client_that_disconnects_mid_run_does_not_stop_the_job() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let marker = h.project.join("finished");
    {
        let req = json!({"jsonrpc": "2.0", "id": 1, "method": "run",
                         "params": {"session": s, "cmd": format!("sleep 1; echo done > {}", marker.display()), "yield_ms": 30_000}});
        use std::io::Write;
        let mut sock = std::os::unix::net::UnixStream::connect(&h.socket).unwrap();
        sock.write_all(format!("{req}\n").as_bytes()).unwrap();
        // Leave once the job runs, its call still waiting for it.
        let running = eventually(Duration::from_secs(10), || {
            c.call("jobs", json!({"session": s})).is_ok_and(|j| j["jobs"][0]["state"] == "running")
        });
        assert!(running, "the job was admitted and runs while its client waits");
        drop(sock);
    }
    assert!(eventually(Duration::from_secs(10), || marker.exists()), "the job finished after its client left");
    let jobs = c.call("jobs", json!({"session": s})).unwrap();
    let job = jobs["jobs"][0]["job"].clone();
    let w = c.call("wait", json!({"session": s, "job": job, "yield_ms": 10_000})).unwrap();
    assert_eq!(w["exit_code"], 0, "{w}");
}

#[test]
fn killing_the_front_spares_the_supervisor_and_running_jobs() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let d = c.call("describe", json!({"session": s})).unwrap();
    let (sup, front) = (d["supervisor"]["pid"].as_u64().unwrap(), d["front"]["pid"].as_u64().unwrap());
    let marker = h.project.join("survived");
    let r = run(&mut c, &s, &format!("sleep 1.5; echo yes > {}", marker.display()), 0);
    assert_eq!(r["state"], "running");
    // The front is a process this test started (through heddle up and the supervisor), named by its pid.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(front as i32), nix::sys::signal::SIGKILL).unwrap();
    assert!(eventually(Duration::from_secs(5), || !alive(front)));
    assert!(eventually(Duration::from_secs(10), || marker.exists()), "the job ran to its end without the front");
    assert!(alive(sup), "the supervisor lives on");
}

#[test]
fn bad_requests_get_clear_errors_and_the_server_keeps_serving() {
    let h = Heddle::start();
    let mut c = h.client();
    let r = c.send_line("{not json").unwrap();
    assert_eq!(r["error"]["code"], -32700, "{r}");
    let r = c.send_line(r#"{"jsonrpc":"2.0","id":5,"method":"no.such","params":{}}"#).unwrap();
    assert_eq!(r["error"]["code"], -32601);
    assert_eq!(r["id"], 5);
    let r = c.send_line(r#"{"jsonrpc":"2.0","id":6,"method":"run","params":{"session":1,"cmd":[]}}"#).unwrap();
    assert_eq!(r["error"]["code"], -32602);
    let r = c.send_line(r#"[1,2]"#).unwrap();
    assert_eq!(r["error"]["code"], -32600);
    let e = c.call("run", json!({"session": "nope", "cmd": "true"})).unwrap_err();
    assert_eq!(e.code(), Some(-32001));
    assert!(e.to_string().contains("nope"), "{e}");
    let s = h.open_session(&mut c);
    let e = c.call("wait", json!({"session": s, "job": 999})).unwrap_err();
    assert_eq!(e.code(), Some(-32002));
    // The same connection and a new one both still work.
    assert_eq!(run(&mut c, &s, "echo ok", 10_000)["view"], "ok\n");
    let mut other = h.client();
    assert_eq!(run(&mut other, &s, "echo ok", 10_000)["view"], "ok\n");
}

#[test]
fn closing_a_session_kills_what_runs_and_removes_its_cgroups() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let r = run(&mut c, &s, "sleep 1000 & sleep 1000", 200);
    assert_eq!(r["state"], "running");
    let closed = c.call("session.close", json!({"session": s})).unwrap();
    assert!(closed["killed"].as_u64().unwrap() >= 2, "{closed}");
    let cmdlines = closed["survivors"].to_string();
    assert!(cmdlines.contains("sleep 1000"), "{closed}");
    let left: Vec<_> = std::fs::read_dir(&h.cgroup_root).unwrap().flatten().filter(|e| e.path().is_dir()).collect();
    assert!(left.is_empty(), "session cgroups left behind: {left:?}");
    let e = c.call("run", json!({"session": s, "cmd": "true"})).unwrap_err();
    assert_eq!(e.code(), Some(-32001));
}

#[test]
fn sigterm_stops_the_whole_stack_cleanly() {
    let mut h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let d = c.call("describe", json!({"session": s})).unwrap();
    let pids: Vec<u64> = vec![
        d["supervisor"]["pid"].as_u64().unwrap(),
        d["front"]["pid"].as_u64().unwrap(),
        d["sessions"][0]["worker"]["pid"].as_u64().unwrap(),
    ];
    run(&mut c, &s, "sleep 1000", 100);
    let st = h.stop().expect("heddle up exits on SIGTERM");
    assert!(st.success(), "heddle up exit status {st}");
    for p in pids {
        assert!(!alive(p), "pid {p} outlived the stack");
    }
    assert!(!h.cgroup_root.exists(), "the cgroup root is removed");
}

#[test]
fn heddle_run_exits_with_the_jobs_status() {
    let h = Heddle::start();
    let bin = heddle_tests::bin_dir().join("heddle");
    let out = std::process::Command::new(&bin)
        .args(["run", "--cwd"])
        .arg(&h.project)
        .args(["--", "echo hi; exit 4"])
        .env("HEDDLE_SOCKET", &h.socket)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("exit 4 · ") && lines[0].ends_with(" · job 1"), "the text form's outcome: {text}");
    assert_eq!(lines[1], "hi", "then the view: {text}");
}

#[test]
fn heddle_run_starts_a_server_when_none_answers() {
    heddle_tests::require_root();
    let dir = tempfile::Builder::new().prefix("heddle-autostart-").tempdir_in("/tmp").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let socket = dir.path().join("run/heddle.sock");
    let root = heddle_tests::cgroup2_mount().join(format!("heddle-autostart-{}", std::process::id()));
    let out = std::process::Command::new(heddle_tests::bin_dir().join("heddle"))
        .args(["run", "--cwd", "/tmp", "--", "echo first"])
        .env("HEDDLE_SOCKET", &socket)
        .env("HEDDLE_STATE_DIR", dir.path().join("state"))
        .env("HEDDLE_CGROUP_ROOT", &root)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    // Stop the background server this test caused: its supervisor, named by the pid it reports.
    let sup = heddle_tests::Client::connect(&socket)
        .ok()
        .and_then(|mut c| c.call("describe", json!({})).ok())
        .and_then(|d| d["supervisor"]["pid"].as_u64());
    if let Some(pid) = sup {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::SIGTERM);
        assert!(eventually(Duration::from_secs(15), || !alive(pid)), "background supervisor stops on SIGTERM");
    }
    heddle_tests::remove_cgroup_tree(&root);
    // The home the server made for its job uid (homes outlive servers by design).
    let _ = std::fs::remove_dir_all(
        std::env::temp_dir().join(format!("heddle-homes-heddle-autostart-{}", std::process::id())),
    );
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().nth(1), Some("first"), "{stderr}");
    assert!(stderr.contains("starting one in the background"), "{stderr}");
    assert!(sup.is_some(), "the background server answered describe");
}
