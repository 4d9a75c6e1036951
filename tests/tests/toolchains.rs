//! Real toolchains through heddle, and every failure saying why (issue 23): a job that the sandbox
//! refuses the network is told so, from what the kernel refused (the seccomp filter's refused `socket`
//! calls, counted per job by the worker), whatever the tool printed instead.

use heddle_tests::{run_to_end, text_form, Heddle};
use serde_json::{json, Value};

fn refusals(r: &Value) -> String {
    r["refusals"]
        .as_array()
        .map(|a| a.iter().map(|x| x.as_str().unwrap_or("")).collect::<Vec<_>>().join("\n"))
        .unwrap_or_default()
}

#[test]
fn network_off_a_refused_socket_says_the_network_is_off_and_how_to_turn_it_on() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    // curl looks the host up (AF_INET/AF_INET6 sockets of the resolver): it prints only "Could not
    // resolve host".
    let r = run_to_end(&mut c, &s, "curl -sS --max-time 5 https://pypi.org/simple/ 2>&1; echo rc=$?");
    let why = refusals(&r);
    assert!(why.contains("the network is off for this session"), "{r}");
    assert!(why.contains("--network"), "names the switch: {r}");
    assert!(text_form(&r).contains("the network is off"), "the text form carries it: {}", text_form(&r));
    // A direct socket in Python: the same sentence.
    let r = run_to_end(
        &mut c,
        &s,
        "python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 443), 3)' 2>&1 | tail -1",
    );
    assert!(refusals(&r).contains("the network is off"), "{r}");
    assert!(refusals(&r).contains("AF_INET"), "names the family: {r}");
    // A job that opens no socket has no such refusal; nor does a unix socket.
    let r = run_to_end(&mut c, &s, "python3 -c 'import socket; socket.socket(socket.AF_UNIX)'; echo ok");
    assert_eq!(refusals(&r), "", "{r}");
    // Network on: no refusal (the connection itself may fail on this machine; no claim is made about it).
    let on = c.call("session.open", json!({"cwd": h.project, "network": true})).unwrap()["session"].clone();
    let r = run_to_end(&mut c, &on, "python3 -c 'import socket; socket.socket()'; echo ok");
    assert_eq!(refusals(&r), "", "{r}");
}

#[test]
fn the_cli_opens_a_session_with_the_network_on_and_says_when_it_could_not() {
    let h = Heddle::start();
    let heddle = |args: &[&str]| {
        let out = std::process::Command::new(heddle_tests::bin_dir().join("heddle"))
            .arg("--socket")
            .arg(&h.socket)
            .args(args)
            .current_dir(&h.project)
            .output()
            .expect("heddle");
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let sock = "python3 -c 'import socket; socket.socket(); print(\"socket-ok\")' 2>&1 | tail -1";
    let (out, _) = heddle(&["--session", "off", "run", sock]);
    assert!(out.contains("the network is off") && out.contains("Operation not permitted"), "{out}");
    let (out, err) = heddle(&["--session", "on", "--network", "run", sock]);
    assert!(out.contains("socket-ok") && !out.contains("network is off"), "{out} {err}");
    assert_eq!(err, "", "a session this call opened needs no warning");
    let (_, err) = heddle(&["--session", "off", "--network", "run", "true"]);
    assert!(err.contains("already open with the network off"), "{err}");
}
