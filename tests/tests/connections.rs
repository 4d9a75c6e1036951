//! A connection flood (issue 22, item 3), through the real stack and the real socket: connections are
//! capped per uid and in total, one over a cap reads a `too_many_connections` sentence and is closed,
//! the connections already open go on being served and the front stays up; and an idle connection
//! costs the front one fd and no thread.

use heddle_tests::{eventually, CallError, Client, Heddle};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read};
use std::os::unix::net::UnixStream;
use std::time::Duration;

fn front_pid(c: &mut Client) -> u64 {
    c.call("describe", json!({})).expect("describe")["front"]["pid"].as_u64().expect("front pid")
}

fn threads(pid: u64) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).expect("the front's tasks").count()
}

fn fds(pid: u64) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).expect("the front's fds").count()
}

/// Open `n` connections, each served one call (so each was accepted, read and answered), then idle.
fn open_idle(h: &Heddle, n: usize) -> Vec<Client> {
    (0..n)
        .map(|i| {
            let mut c = h.client();
            c.call("describe", json!({})).unwrap_or_else(|e| panic!("connection {i} of {n} was not served: {e}"));
            c
        })
        .collect()
}

/// What a connection over a cap reads on a raw socket: one error line (id `null`), then the end.
fn refusal(h: &Heddle) -> Value {
    let s = UnixStream::connect(&h.socket).expect("the socket still accepts");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).expect("the refusal line");
    let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
    let mut rest = Vec::new();
    assert_eq!(r.read_to_end(&mut rest).expect("then the end"), 0, "the server closes a refused connection");
    assert!(v["id"].is_null(), "{v}");
    assert_eq!(
        (v["error"]["code"].as_i64(), v["error"]["data"]["kind"].as_str()),
        (Some(-32014), Some("too_many_connections"))
    );
    v
}

#[test]
fn a_flood_from_one_uid_is_refused_at_its_cap_and_idle_connections_cost_no_thread() {
    let cap = 600;
    let h = Heddle::start_with(&["--max-connections-per-uid", &cap.to_string()]);
    let mut probe = h.client();
    let front = front_pid(&mut probe);
    let (threads_before, fds_before) = (threads(front), fds(front));

    let mut idle = open_idle(&h, cap - 1);
    let (threads_after, fds_after) = (threads(front), fds(front));
    println!(
        "{cap} connections open: front threads {threads_before} -> {threads_after}, fds {fds_before} -> {fds_after}"
    );
    assert!(
        threads_after <= threads_before + 8,
        "{} idle connections cost threads: {threads_before} -> {threads_after}",
        cap - 1
    );
    assert!(
        fds_after <= fds_before + cap + 16,
        "{} idle connections cost more than an fd each: {fds_before} -> {fds_after}",
        cap - 1
    );

    let v = refusal(&h);
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains(&format!("{cap} connections")) && msg.contains("--max-connections-per-uid"), "{msg}");
    // The CLI's client reads the sentence too, whether its request went out before the close or not.
    match Client::connect(&h.socket).expect("connect").call("describe", json!({})) {
        Err(CallError::Rpc { code: -32014, message, .. }) => assert!(message.contains("per user"), "{message}"),
        other => panic!("expected the refusal, got {other:?}"),
    }

    // The connections already open are still served, by the same front.
    assert_eq!(front_pid(&mut probe), front, "the front stayed up");
    let last = idle.last_mut().unwrap();
    assert_eq!(front_pid(last), front);

    // Closing some makes room again.
    idle.truncate(idle.len() - 10);
    assert!(
        eventually(Duration::from_secs(10), || Client::connect(&h.socket)
            .is_ok_and(|mut c| c.call("describe", json!({})).is_ok())),
        "a closed connection gives its place back"
    );
    drop(idle);
}

#[test]
fn a_flood_over_the_total_cap_is_refused_and_the_server_goes_on() {
    let h = Heddle::start_with(&["--max-connections", "20", "--max-connections-per-uid", "1000"]);
    let mut probe = h.client();
    let front = front_pid(&mut probe);
    let idle = open_idle(&h, 19);
    let v = refusal(&h);
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("20 connections") && msg.contains("--max-connections") && msg.contains("all users"), "{msg}");
    // A refused flood of many more leaves the server serving.
    for _ in 0..200 {
        refusal(&h);
    }
    let s = h.open_session(&mut probe);
    let r = probe.call("run", json!({"session": s, "cmd": "echo still here", "yield_ms": 10000})).expect("run");
    assert_eq!(r["view"], "still here\n", "{r}");
    assert_eq!(front_pid(&mut probe), front, "the front stayed up");
    drop(idle);
}
