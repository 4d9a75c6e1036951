//! Another uid reaches nothing of a session: every method, sent raw over the socket by a client running
//! as `nobody` (a member of the socket's group, so it connects), naming root's session, jobs, kept job,
//! receipt and subscription. Each request is first shown to be well formed — root sends the same line and
//! it succeeds — so a refusal here is the uid's, never a typo's; and after nobody's attempts root checks
//! that everything nobody tried to touch is as it was.

use heddle_tests::{as_nobody, eventually, require_root, Client, Heddle};
use serde_json::{json, Value};
use std::time::Duration;

/// The same line root sends on its own connection: the raw answer (result or error).
fn as_root(c: &mut Client, method: &str, params: &Value) -> Value {
    c.send_line(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string())
        .unwrap_or_else(|e| panic!("root's {method} answered: {e:?}"))
}

fn error_kind(answer: &Value) -> &str {
    answer["error"]["data"]["kind"].as_str().unwrap_or("")
}

#[test]
fn another_uid_reaches_nothing_of_a_session_by_any_method() {
    require_root();
    let h = Heddle::start_with(&["--socket-group", "65534"]);
    let project = tempfile::Builder::new().prefix("heddle-xuser-").tempdir_in("/tmp").unwrap();
    std::fs::create_dir(project.path().join(".heddle")).unwrap();
    std::fs::write(project.path().join(".heddle/checks.toml"), "[check.hello]\ncommand = \"echo checked\"\n").unwrap();
    let mut c = h.client();
    let opened = c.call("session.open", json!({"name": "roots", "cwd": project.path()})).unwrap();
    let s = opened["session"].as_str().unwrap().to_owned();
    let keyed = c.call("run", json!({"session": s, "cmd": "echo keyed", "idempotency_key": "k-root"})).unwrap();
    let receipt = keyed["receipt"]["id"].as_str().unwrap().to_owned();
    let long = c.call("run", json!({"session": s, "cmd": "sleep 600", "yield_ms": 0})).unwrap();
    let job = long["job"].as_u64().unwrap();
    let tty =
        c.call("run", json!({"session": s, "cmd": "cat", "tty": {"rows": 24, "cols": 80}, "yield_ms": 0})).unwrap();
    let term = tty["job"].as_u64().unwrap();
    let kept =
        c.call("run", json!({"session": s, "cmd": "sleep 600", "keep": true, "name": "roots-kept", "yield_ms": 0}));
    kept.unwrap();
    let mut sub = h.client();
    let subscribed = sub.call("subscribe", json!({"session": s})).unwrap();
    let sub_id = subscribed["subscription"].clone();

    // Session-scoped methods: each names root's session and a job of it that exists.
    let scoped: Vec<(&str, Value)> = vec![
        ("describe", json!({"session": s})),
        ("jobs", json!({"session": s})),
        ("wait", json!({"session": s, "job": job, "yield_ms": 0})),
        ("output", json!({"session": s, "job": 1, "tail": 5})),
        ("output", json!({"session": s, "job": term, "screen": true})),
        ("output", json!({"session": s, "job": term, "scrollback": {}})),
        ("checks", json!({"session": s})),
        ("check", json!({"session": s, "name": "hello"})),
        ("write", json!({"session": s, "job": term, "text": "typed by nobody\n", "quiet_ms": 0, "yield_ms": 200})),
        ("resize", json!({"session": s, "job": term, "rows": 30, "cols": 100, "quiet_ms": 0, "yield_ms": 200})),
        ("run", json!({"session": s, "cmd": "touch ran-by-nobody"})),
        ("keep", json!({"session": s, "job": job, "name": "stolen"})),
        ("kill", json!({"session": s, "job": job})),
        ("subscribe", json!({"session": s})),
        ("session.close", json!({"session": s})),
    ];
    // Each line is well formed: root's identical line succeeds (the read-only and harmless ones now; the
    // destructive ones at the end, after nobody's attempts).
    let harmless = ["describe", "jobs", "wait", "output", "checks", "check"];
    let mut root = h.client();
    for (method, params) in scoped.iter().filter(|(m, _)| harmless.contains(m)) {
        let answer = as_root(&mut root, method, params);
        assert!(answer.get("error").is_none(), "root's own {method} {params} succeeds: {answer}");
    }

    let mut tries = scoped.clone();
    tries.extend([
        ("session.open", json!({"name": s})),
        ("receipt", json!({"id": receipt})),
        ("receipt", json!({"idempotency_key": "k-root", "session": s})),
        ("kept.log", json!({"name": "roots-kept"})),
        ("kept.kill", json!({"name": "roots-kept"})),
        ("unsubscribe", json!({"subscription": sub_id})),
        ("kept", json!({})),
        ("describe", json!({})),
    ]);
    let answers = as_nobody(&h, &tries);
    for ((method, params), answer) in tries.iter().zip(&answers) {
        let expected = match (*method, params.get("session")) {
            ("session.open", _) => "session_open_failed",
            ("receipt", _) => "unknown_receipt",
            ("kept.log" | "kept.kill", _) => "invalid_params",
            ("unsubscribe" | "kept", _) | ("describe", None) => continue,
            _ => "unknown_session",
        };
        assert_eq!(error_kind(answer), expected, "nobody's {method} {params} is refused as {expected}: {answer}");
        let text = answer.to_string();
        assert!(!text.contains("sleep 600") && !text.contains("keyed"), "the refusal tells nothing of root's: {text}");
    }
    let answer_to =
        |m: &str, p: &Value| tries.iter().zip(&answers).find(|((mm, pp), _)| *mm == m && pp == p).unwrap().1;
    let unsub = answer_to("unsubscribe", &json!({"subscription": sub_id}));
    assert_eq!(unsub["result"]["removed"], false, "a subscription is its connection's: {unsub}");
    let listed = answer_to("kept", &json!({})).to_string();
    assert!(!listed.contains("roots-kept"), "nobody's kept list hides root's: {listed}");
    let facts = answer_to("describe", &json!({}));
    assert!(!facts.to_string().contains(&s), "nobody's describe hides root's session: {facts}");

    // Nothing nobody tried happened.
    let now = c.call("wait", json!({"session": s, "job": job, "yield_ms": 0})).unwrap();
    assert_eq!(now["state"], "running", "the long job still runs: {now}");
    let jobs = c.call("jobs", json!({"session": s})).unwrap();
    let cmds: Vec<&str> = jobs["jobs"].as_array().unwrap().iter().filter_map(|j| j["cmd"].as_str()).collect();
    assert!(!cmds.iter().any(|c| c.contains("nobody")), "no job of nobody's ran: {cmds:?}");
    assert!(!project.path().join("ran-by-nobody").exists());
    let screen = c.call("output", json!({"session": s, "job": term, "screen": true})).unwrap();
    assert!(!screen.to_string().contains("typed by nobody"), "nobody typed nothing: {screen}");
    assert_eq!((screen["terminal"]["rows"].as_u64(), screen["terminal"]["cols"].as_u64()), (Some(24), Some(80)));
    let kept_now = c.call("kept", json!({})).unwrap();
    assert!(kept_now.to_string().contains("roots-kept"), "the kept job is still there: {kept_now}");
    assert!(!kept_now.to_string().contains("stolen"), "nothing was kept by nobody: {kept_now}");
    let found = c.call("receipt", json!({"id": receipt})).unwrap();
    assert_eq!(found["receipt"]["id"], receipt.as_str());
    c.call("run", json!({"session": s, "cmd": "echo still-subscribed"})).unwrap();
    sub.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut heard = false;
    for _ in 0..200 {
        let n = sub.next_notification().expect("root's subscription still delivers");
        if n.to_string().contains("still-subscribed") {
            heard = true;
            break;
        }
    }
    assert!(heard, "root's subscription heard the next job");

    // The destructive lines nobody sent are well formed too: root's identical ones succeed.
    for method in ["write", "resize", "keep", "kill", "session.close"] {
        let params = &scoped.iter().find(|(m, _)| *m == method).unwrap().1;
        let answer = as_root(&mut root, method, params);
        assert!(answer.get("error").is_none(), "root's own {method} {params} succeeds: {answer}");
    }
    for (method, params) in [("kept.kill", json!({"name": "roots-kept"})), ("kept.kill", json!({"name": "stolen"}))] {
        let answer = as_root(&mut root, method, &params);
        assert!(answer.get("error").is_none(), "root's own {method} {params} succeeds: {answer}");
    }
    assert!(eventually(Duration::from_secs(5), || c.call("kept", json!({})).is_ok_and(|k| k["kept"] == json!([]))));
}
