//! Jobs driving heddle itself (issue "Close the escapes"): when the control socket's group is the
//! group of a session's uid, that session's jobs can connect to the socket. The front refuses a
//! connection made from inside heddle's job cgroups (`job_peer_refused`), unless the session allows
//! nested use, and then only for its own session; a process of the same uid outside heddle still
//! works. Through the real stack, as root (CI): root opens the sessions, their jobs run as nobody
//! (`--worker-user nobody`, not a uid of each session's own), and the socket's group is nobody's (65534).

use heddle_tests::{run_ok, Client, Heddle};
use serde_json::{json, Value};
use std::os::unix::process::CommandExt;

/// A minimal client: connect to argv[1], send each further argument (a `[method, params]` JSON pair) as a
/// request, and print one line per answer: `ok`, or the error's kind and message.
const CLIENT: &str = r#"import json, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
f = s.makefile("rw")
for i, arg in enumerate(sys.argv[2:]):
    method, params = json.loads(arg)
    f.write(json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}) + "\n")
    f.flush()
    r = json.loads(f.readline())
    if "error" in r:
        print(r["error"]["data"]["kind"], r["error"]["message"])
    else:
        print("ok")
"#;

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The command line running [`CLIENT`] (written to `client.py` in the project) with `calls`.
fn client_cmd(h: &Heddle, calls: &[Value]) -> String {
    let args: Vec<String> = calls.iter().map(|c| shell_quote(&c.to_string())).collect();
    format!("python3 {}/client.py {} {}", h.project.display(), h.socket.display(), args.join(" "))
}

/// Run [`CLIENT`] with `calls` as a job of `session`; its output lines.
fn from_a_job(c: &mut Client, h: &Heddle, session: &Value, calls: &[Value]) -> Vec<String> {
    let r = c
        .call(
            "run",
            json!({"session": session, "cmd": client_cmd(h, calls), "files": [{"path": "client.py", "content": CLIENT}],
                   "yield_ms": 60_000}),
        )
        .expect("run");
    assert_eq!(r["exit_code"], 0, "{r}");
    heddle_tests::stream_text(c, session, &r["job"], "stdout").lines().map(str::to_owned).collect()
}

/// Run [`CLIENT`] with `calls` as uid/gid 65534, outside heddle (a child of this test).
fn from_outside_as_nobody(h: &Heddle, calls: &[Value]) -> Vec<String> {
    let out =
        std::process::Command::new("sh").arg("-c").arg(client_cmd(h, calls)).uid(65534).gid(65534).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect()
}

fn start() -> (Heddle, Client) {
    // One uid (nobody) for every root-opened session, so their jobs are in the socket's group.
    let h = Heddle::start_with(&["--socket-group", "65534", "--worker-user", "nobody"]);
    let c = h.client();
    (h, c)
}

#[test]
fn a_job_is_refused_at_the_control_socket_and_the_same_uid_outside_heddle_is_not() {
    let (h, mut c) = start();
    let s = h.open_session(&mut c);
    assert_eq!(run_ok(&mut c, &s, "id -u"), "65534\n", "the session's jobs run as nobody");
    let open_root = json!(["session.open", {"cwd": "/"}]);
    let got =
        from_a_job(&mut c, &h, &s, &[open_root.clone(), json!(["describe", {}]), json!(["jobs", {"session": s}])]);
    assert_eq!(got.len(), 3, "{got:?}");
    for line in &got {
        assert!(line.starts_with("job_peer_refused "), "{got:?}");
    }
    assert!(got[0].contains("comes from a job of session") && got[0].contains("\"nested\": true"), "{got:?}");
    // No session was opened for the job.
    let all = c.call("describe", json!({})).unwrap();
    assert_eq!(all["sessions"].as_array().unwrap().len(), 1, "{all}");

    // The same uid from outside heddle's cgroups is served as before.
    let got = from_outside_as_nobody(&h, &[json!(["describe", {}]), open_root]);
    assert_eq!(got, ["ok", "ok"], "a member of the socket's group outside heddle");
}

#[test]
fn a_session_that_allows_nested_use_lets_its_jobs_act_on_it_alone() {
    let (h, mut c) = start();
    let other = h.open_session(&mut c);
    let open = c.call("session.open", json!({"cwd": h.project, "nested": true})).expect("session.open");
    let s = open["session"].clone();
    let name = s.as_str().unwrap();
    let got = from_a_job(
        &mut c,
        &h,
        &s,
        &[
            json!(["run", {"session": name, "cmd": "echo inner"}]),
            json!(["jobs", {"session": name}]),
            json!(["describe", {"session": name}]),
            json!(["jobs", {"session": other}]),
            json!(["describe", {}]),
            json!(["session.open", {"cwd": "/"}]),
        ],
    );
    assert_eq!(got[..3], ["ok", "ok", "ok"], "its own session: {got:?}");
    for line in &got[3..] {
        assert!(line.starts_with("job_peer_refused ") && line.contains("its own session alone"), "{got:?}");
    }
    // The inner run happened, as job 2 of the session, while job 1 (the client) ran.
    let jobs = c.call("jobs", json!({"session": s})).unwrap();
    assert_eq!(jobs["jobs"][1]["cmd"], "echo inner", "{jobs}");
    let all = c.call("describe", json!({})).unwrap();
    assert_eq!(all["sessions"].as_array().unwrap().len(), 2, "no session opened from the job: {all}");
}
