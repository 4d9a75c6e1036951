//! Closed escapes (the security issue "Close the escapes"), end to end through the real stack: a session's
//! shell state never shows in a process's command line or environment; secret-shaped output never
//! reaches a model-facing answer; small answers that told one uid about another's.

use heddle_tests::{eventually, job_cgroup, pids_of, run_ok, Heddle};
use serde_json::json;
use std::collections::BTreeSet;
use std::os::unix::process::CommandExt;
use std::time::Duration;

/// Every process heddle made: the descendants of `heddle up` (supervisor, front, workers, jobs) and every
/// member of every cgroup under the stack's cgroup root (jobs, spares, kept jobs).
fn heddle_processes(h: &Heddle) -> BTreeSet<u32> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![h.up_pid()];
    while let Some(p) = todo.pop() {
        if seen.insert(p) {
            todo.extend(Heddle::children(p));
        }
    }
    let mut dirs = vec![h.cgroup_root.clone()];
    while let Some(d) = dirs.pop() {
        seen.extend(pids_of(&d));
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push(e.path());
            }
        }
    }
    seen
}

/// `/proc/PID/cmdline` and `/proc/PID/environ` (empty once the process is gone).
fn args_and_env(pid: u32) -> (String, String) {
    let read =
        |f: &str| String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/{f}")).unwrap_or_default()).into_owned();
    (read("cmdline").replace('\0', " "), read("environ").replace('\0', " "))
}

#[test]
fn session_state_never_shows_in_a_command_line_or_environment() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let set = "SECRET_X=canary123; canary_fn() { echo 'canary-fn-body'; }; alias tok='echo Authorization: Bearer canary-alias'";
    run_ok(&mut c, &s, set);
    assert_eq!(
        run_ok(&mut c, &s, "echo $SECRET_X; canary_fn; shopt -s expand_aliases; alias tok"),
        "canary123\ncanary-fn-body\nalias tok='echo Authorization: Bearer canary-alias'\n"
    );
    let r = c.call("run", json!({"session": s, "cmd": "sleep 30", "yield_ms": 300})).unwrap();
    assert_eq!(r["state"], "running", "{r}");
    let cgroup = job_cgroup(&mut c, &s, &r["job"]);
    // The job's bash and its `sleep`, and (once the worker is idle) the spare for the next job, which
    // restored the same state: all of them must be among the processes looked at.
    let mut looked = std::collections::BTreeMap::new();
    let found_all = eventually(Duration::from_secs(30), || {
        for pid in heddle_processes(&h) {
            let (args, env) = args_and_env(pid);
            assert!(!args.contains("canary") && !env.contains("canary"), "pid {pid} shows the state:\n{args}\n{env}");
            if !args.is_empty() {
                looked.insert(pid, args);
            }
        }
        let job = pids_of(&cgroup);
        let sleeping = job.iter().any(|p| args_and_env(*p).0 == "sleep 30 ");
        let shells = looked.values().filter(|a| a.starts_with("bash ") && a.contains("__heddle")).count();
        sleeping && shells >= 2
    });
    assert!(found_all, "the job's bash, its sleep and a spare shell were seen: {looked:#?}");
    c.call("kill", json!({"session": s, "job": r["job"]})).unwrap();
    assert_eq!(run_ok(&mut c, &s, "echo $SECRET_X; canary_fn"), "canary123\ncanary-fn-body\n", "still carried");
}

/// Secrets a job prints in shapes the screen used to miss; each entry: (what, the text that must never
/// reach a model-facing answer).
fn printed_secrets() -> (String, Vec<(&'static str, String)>) {
    let gh = format!("ghp_{}", "aB3dE5fG7h".repeat(4));
    let cut = format!("ghp_{}", "Mn3Bv5Cx7Z".repeat(4));
    let aws = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
    let script = [
        "echo POSTGRES_PASSWORD=Xk9mQ2vL7pR4zTq".to_owned(),
        "echo GITHUB_TOKEN=Zq8Wm3Lp0Rt6Yu2Io9Pa".to_owned(),
        "echo '  DB_PASSWORD: Hn4Vb7Kc1Xs9Df'".to_owned(),
        format!("echo '    \"SecretAccessKey\": \"{aws}\",'"),
        format!("echo '{gh}_x'"),
        format!("printf '%s\\rXXXX\\n' '{gh}'"),
        format!("printf '%s {cut} after the cut\\n' \"$(printf '%8184s' '' | tr ' ' y)\""),
        "echo \"cp: cannot open '/etc/passwd': Operation not permitted\"".to_owned(),
    ]
    .join("; ");
    let secrets = vec![
        ("a prefixed password name", "Xk9mQ2vL7pR4zTq".to_owned()),
        ("a prefixed token name", "Zq8Wm3Lp0Rt6Yu2Io9Pa".to_owned()),
        ("a YAML password", "Hn4Vb7Kc1Xs9Df".to_owned()),
        ("AWS CLI JSON", aws.to_owned()),
        ("a ghp_ token, also after a \\r rewrote its prefix", "aB3dE5fG7haB3dE5".to_owned()),
        ("a token cut at 8,192 characters", "ghp_Mn3".to_owned()),
    ];
    (script, secrets)
}

fn assert_hidden(what: &str, answer: &serde_json::Value, secrets: &[(&str, String)]) {
    let text = answer.to_string();
    for (shape, s) in secrets {
        assert!(!text.contains(s.as_str()), "{what} shows {shape} ({s}): {text}");
    }
}

#[test]
fn secrets_never_reach_a_model_facing_answer() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let (script, secrets) = printed_secrets();
    // A survivor whose command line holds a token (it outlives the job's main process).
    let survivor = "(exec -a 'deploy --password=Pw7Rt2Yk9Lm4Qz GITHUB_TOKEN=Zq8Wm3Lp0Rt6Yu2Io9Pa' sleep 30) & ";
    let r = c.call("run", json!({"session": s, "cmd": format!("{survivor}{script}"), "yield_ms": 20_000})).unwrap();
    assert_eq!(r["exit_code"], 0, "{r}");
    let job = r["job"].clone();
    // The job printed every secret: the raw bytes (the one explicit way to them) hold them all.
    let raw = c.call("output", json!({"session": s, "job": job, "raw": {"offset": 0, "unredacted": true}})).unwrap();
    for (shape, secret) in &secrets {
        assert!(raw["data"].as_str().unwrap().contains(secret.as_str()), "the job printed {shape}: {raw}");
    }
    let survivors = r["survivors"].as_array().unwrap();
    assert!(survivors.iter().any(|p| p["cmdline"].as_str().unwrap().contains("deploy --password=")), "{r}");
    let mut all = secrets.clone();
    all.push(("a survivor's command line", "Pw7Rt2Yk9Lm4Qz".to_owned()));
    assert_hidden("run's result", &r, &all);
    let view = r["view"].as_str().unwrap();
    assert!(view.contains("cp: cannot open '/etc/passwd': Operation not permitted"), "no false positive: {view}");
    assert!(view.contains("XXXX[redacted:github-token]"), "the rewritten line: {view}");
    for params in [
        json!({"tail": 20}),
        json!({"lines": [1, 20]}),
        json!({"grep": {"pattern": "PASSWORD|Secret|ghp|XXXX|cut"}}),
        json!({"errors": true}),
    ] {
        let mut p = json!({"session": s, "job": job});
        p.as_object_mut().unwrap().extend(params.as_object().unwrap().clone());
        let v = c.call("output", p.clone()).unwrap();
        assert_hidden(&format!("output {params}"), &v, &all);
    }
    // No view: never the raw bytes by default.
    let e = c.call("output", json!({"session": s, "job": job})).unwrap_err();
    assert_eq!(e.code(), Some(-32602), "{e:?}");
    let legacy = c.call("output", json!({"session": s, "job": job, "unredacted": true})).unwrap();
    assert_eq!(legacy["unredacted"], true, "{legacy}");
    // An announcement's last lines and command, and a job's liveness while it runs.
    let bg = c.call("run", json!({"session": s, "cmd": format!("sleep 0.5; {script}"), "yield_ms": 0})).unwrap();
    assert_eq!(bg["state"], "running", "{bg}");
    assert_hidden("a running job's result", &bg, &all);
    let announced = eventually(Duration::from_secs(20), || {
        let j = c.call("jobs", json!({"session": s})).unwrap();
        assert_hidden("jobs", &j, &all);
        j["announcements"].as_array().is_some_and(|a| !a.is_empty())
    });
    assert!(announced, "the background job was announced");
    let closed = c.call("session.close", json!({"session": s})).unwrap();
    assert_hidden("session.close", &closed, &all);
}

/// `heddle --json ARGS` against `h` as uid/gid 65534 (nobody/nogroup): (succeeded, stdout + stderr).
fn as_nobody(h: &Heddle, args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(heddle_tests::bin_dir().join("heddle"))
        .arg("--socket")
        .arg(&h.socket)
        .arg("--json")
        .args(args)
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr))
}

#[test]
fn another_uids_session_name_reveals_nothing_at_open() {
    let h = Heddle::start_with(&["--socket-group", "65534"]);
    let mut c = h.client();
    c.call("session.open", json!({"name": "mine", "cwd": h.project})).unwrap();
    let (ok, said) = as_nobody(&h, &["describe"]);
    assert!(ok, "nobody is in the socket's group and reaches the front: {said}");
    let (ok, said) = as_nobody(&h, &["call", "session.open", r#"{"name": "theirs", "cwd": "/tmp"}"#]);
    assert!(ok && said.contains("\"theirs\""), "nobody opens a session of its own: {said}");
    let (ok, said) = as_nobody(&h, &["call", "session.open", r#"{"name": "mine", "cwd": "/tmp"}"#]);
    assert!(!ok, "{said}");
    assert!(said.contains("-32005") && said.contains("not available"), "session_open_failed: {said}");
    for leak in ["another user", "taken", "owner", "uid"] {
        assert!(!said.to_lowercase().contains(leak), "the answer says nothing of who holds the name ({leak}): {said}");
    }
    let (ok, said) = as_nobody(&h, &["call", "jobs", r#"{"session": "mine"}"#]);
    assert!(!ok && said.contains("-32001"), "unknown_session: {said}");
    let mine = c.call("jobs", json!({"session": "mine"})).unwrap();
    assert!(mine["jobs"].as_array().unwrap().is_empty(), "root's session is untouched: {mine}");
}

#[test]
fn the_files_channel_refuses_setuid_setgid_and_sticky_modes() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    for mode in [0o6777, 0o4755, 0o2755, 0o1777, 0o10644] {
        let files = json!([{"path": "x.sh", "content": "id\n", "mode": mode}]);
        let e = c.call("run", json!({"session": s, "cmd": "true", "files": files})).unwrap_err();
        assert_eq!(e.code(), Some(-32602), "mode {mode:o}: {e:?}");
        let msg = e.to_string();
        assert!(msg.contains("setuid, setgid or sticky") && msg.contains("at most 0o777"), "{msg}");
        assert!(!h.project.join("x.sh").exists(), "nothing is written for a refused call");
    }
    let files = json!([{"path": "x.sh", "content": "id\n", "mode": 0o755}]);
    let r = c.call("run", json!({"session": s, "cmd": "stat -c %a x.sh", "files": files, "yield_ms": 20_000})).unwrap();
    assert_eq!(r["files"][0]["written"], true, "{r}");
    assert_eq!(heddle_tests::stream_text(&mut c, &s, &r["job"], "stdout"), "755\n");
}

#[test]
fn a_peer_outside_the_socket_group_learns_nothing_about_who_may_connect() {
    let h = Heddle::start_with(&["--socket-group", "0"]);
    let (ok, said) = as_nobody(&h, &["describe"]);
    assert!(!ok && said.to_lowercase().contains("permission denied"), "refused at connect: {said}");
    assert!(!said.contains("gid") && !said.contains(" 0 "), "the refusal names no group: {said}");
    // Neither the socket's group nor its owner can be read: its directory is closed to that peer.
    let stat =
        std::process::Command::new("stat").args(["-c", "%U %G"]).arg(&h.socket).uid(65534).gid(65534).output().unwrap();
    assert!(!stat.status.success(), "nobody could stat the socket: {stat:?}");
    assert!(String::from_utf8_lossy(&stat.stderr).contains("Permission denied"), "{stat:?}");
}
