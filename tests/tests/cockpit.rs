//! The cockpit page (`GET /` of the HTTP door) in a real browser: Debian's chromium, headless, driven by
//! playwright-core (`tests/cockpit-js`, both installed by `.ci/test`) against the real stack. It asserts
//! what a person sees: a job's colored output live, hostile output as text, the phase changing when the
//! job ends, and a kill from the page (confirmed) ending a job with a receipt. The screenshot is kept at
//! `target/cockpit.png`.

use heddle_tests::http::{door_address, HttpConn};
use heddle_tests::Heddle;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Run a page driver (`node DRIVER ARGS…`) and return what it saw: one JSON object, without `error`.
fn drive(driver: &std::path::Path, args: &[&str]) -> Value {
    let out = Command::new("node").arg(driver).args(args).output().expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let seen: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!("the driver printed no JSON ({e}): {stdout}\n{}", String::from_utf8_lossy(&out.stderr))
    });
    assert!(seen.get("error").is_none(), "the page did not show what it should: {seen}");
    seen
}

#[test]
fn a_person_watches_a_job_stream_and_kills_another_from_the_page() {
    let driver = repo().join("tests/cockpit-js/drive.cjs");
    let modules = repo().join("tests/cockpit-js/node_modules/playwright-core");
    assert!(modules.exists(), "playwright-core is installed by .ci/test into {}", modules.display());
    assert!(std::path::Path::new("/usr/bin/chromium").exists(), "Debian's chromium is installed by .ci/test");
    let h = Heddle::start_with(&["--http", "127.0.0.1:0"]);
    let addr = door_address(&h.state_dir);
    let mut c = h.client();
    let s = h.open_session(&mut c);
    // Colored output and hostile markup, then a pause the page must show as running, then the end.
    let cmd = r#"printf '\033[31mred alert\033[0m plain\n<script>window.pwned=1</script><img src=x onerror="window.pwned=1">\n'; sleep 4; echo finished"#;
    let watched = c.call("run", json!({"session": s, "cmd": cmd, "yield_ms": 0})).unwrap()["job"].as_u64().unwrap();
    let victim =
        c.call("run", json!({"session": s, "cmd": "sleep 300", "yield_ms": 0})).unwrap()["job"].as_u64().unwrap();

    let shot = repo().join("target/cockpit.png");
    let seen = drive(
        &driver,
        &[
            &format!("http://{addr}"),
            s.as_str().unwrap(),
            &watched.to_string(),
            &victim.to_string(),
            shot.to_str().unwrap(),
        ],
    );

    // The output as drawn: its text, its color, the markup as text and nothing run.
    let raw = seen["raw_text"].as_str().unwrap();
    assert!(raw.contains("red alert plain"), "{seen}");
    assert!(raw.contains("<script>window.pwned=1</script><img src=x"), "hostile output shows as text: {seen}");
    assert_eq!(seen["red_color"], "rgb(205, 0, 0)", "{seen}");
    assert_eq!(seen["pwned"], false, "{seen}");
    assert_eq!(seen["script_elements"], 1, "only the page's own script: {seen}");
    // Running while it streamed, exited once it ended, without a reload.
    assert_eq!(seen["phase_while_streaming"], "running", "{seen}");
    assert_eq!(seen["phase_after_end"], "exited with code 0", "{seen}");
    assert!(seen["raw_text_after_end"].as_str().unwrap().contains("finished"), "{seen}");
    assert!(seen["model_text"].as_str().unwrap().contains("red alert plain"), "{seen}");
    assert!(std::fs::metadata(&shot).is_ok_and(|m| m.len() > 1000), "screenshot at {}", shot.display());

    // The kill: confirmed in a dialog, answered with a receipt, and the job is killed.
    let dialogs = seen["dialogs"].as_array().unwrap();
    assert_eq!(dialogs.len(), 1, "{seen}");
    assert!(dialogs[0].as_str().unwrap().starts_with(&format!("Kill job {victim} (sleep 300)")), "{seen}");
    let receipt_text = seen["receipt_text"].as_str().unwrap();
    let id = receipt_text.rsplit("receipt ").next().unwrap();
    assert!(receipt_text.starts_with(&format!("kill job {victim} of ")) && id.starts_with('r'), "{seen}");
    assert_eq!(seen["victim_phase"].as_str().unwrap().split(' ').next(), Some("killed"), "{seen}");
    let r = c.call("receipt", json!({"id": id})).unwrap();
    assert_eq!((&r["receipt"]["op"], &r["receipt"]["session"]), (&json!("kill"), &s), "{r}");
    let jobs = c.call("jobs", json!({"session": s})).unwrap();
    let v = jobs["jobs"].as_array().unwrap().iter().find(|j| j["job"] == victim).unwrap().clone();
    assert_eq!(v["state"], "killed", "{jobs}");
}

#[test]
fn the_page_and_its_streams_refuse_a_foreign_origin() {
    let h = Heddle::start_with(&["--http", "127.0.0.1:0"]);
    let addr = door_address(&h.state_dir);
    let mut c = HttpConn::connect(addr).unwrap();
    let page = c.request("GET", "/", &[], b"").unwrap();
    assert_eq!(page.status, 200);
    assert!(page.text().contains("<script src=\"/cockpit.js\""), "{}", page.text());
    assert!(page.header("content-security-policy").is_some_and(|v| v.contains("script-src 'self'")));
    for path in ["/", "/cockpit/sessions", "/cockpit.js"] {
        let r = c.request("GET", path, &[("Origin", "http://evil.example")], b"").unwrap();
        assert_eq!(r.status, 403, "{path}: {}", r.text());
    }
    let r = c
        .post(
            "/rpc",
            &[("Origin", "http://evil.example")],
            &json!({"jsonrpc": "2.0", "id": 1, "method": "describe", "params": {}}),
        )
        .unwrap();
    assert_eq!(r.status, 403, "{}", r.text());
}

#[test]
fn the_page_shows_what_a_call_changed_what_was_refused_and_the_override_audit() {
    let driver = repo().join("tests/cockpit-js/facts.cjs");
    let h = Heddle::start_with(&["--http", "127.0.0.1:0"]);
    let addr = door_address(&h.state_dir);
    let mut c = h.client();
    let first = h.open_session(&mut c);
    let run = |c: &mut heddle_tests::Client, s: &Value, p: Value| {
        let mut p = p;
        p["session"] = s.clone();
        c.call("run", p).unwrap()
    };
    // An override, before the repository exists: its `chmod -R 777 .` of the project would otherwise
    // change f1's mode, and the ledger would rightly call the later edit a second change.
    let over = json!({"rule": "chmod-777-root", "reason": "scratch space for the cockpit test"});
    let r =
        run(&mut c, &first, json!({"cmd": "chmod -R 777 . 2>/dev/null; true", "yield_ms": 20_000, "override": over}));
    assert_eq!(r["state"], "exited", "{r}");
    // A git work tree owned by the jobs' uid, as a user's project would be.
    let uid =
        run(&mut c, &first, json!({"cmd": "id -u", "yield_ms": 20_000}))["view"].as_str().unwrap().trim().to_owned();
    let repo = h.project.join("repo");
    std::fs::create_dir(&repo).unwrap();
    std::os::unix::fs::chown(&repo, Some(uid.parse().unwrap()), None).unwrap();
    let s = c.call("session.open", json!({"name": "repo", "cwd": repo})).unwrap()["session"].clone();
    let init =
        "git init -q . && printf 'a\\n' > f1 && git add . && git -c user.email=t@t -c user.name=t commit -qm init";
    let r = run(&mut c, &s, json!({"cmd": init, "yield_ms": 20_000, "effects": "none"}));
    assert_eq!(r["exit_code"], 0, "{r}");

    // A write the sandbox refuses, and a call that changes f1 once the page is watching it.
    let r = run(&mut c, &s, json!({"cmd": "echo x > /etc/heddle-cockpit-probe", "yield_ms": 20_000}));
    assert!(!r["refusals"].as_array().unwrap().is_empty(), "the refused write is explained in the result: {r}");
    let refused = r["job"].as_u64().unwrap();
    let changing =
        run(&mut c, &s, json!({"cmd": "sleep 3; printf 'X\\n' > f1", "yield_ms": 0}))["job"].as_u64().unwrap();

    let seen = drive(&driver, &[&format!("http://{addr}"), "repo", &changing.to_string(), &refused.to_string()]);
    assert!(seen["changing_facts"].as_str().unwrap().contains("effects: f1 (modified)"), "{seen}");
    let refusal = seen["refused_facts"].as_str().unwrap();
    assert!(refusal.contains("refused:") && refusal.contains("/etc/heddle-cockpit-probe"), "{seen}");
    let rows = seen["overrides"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{seen}");
    let row: Vec<&str> = rows[0].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(
        row[3..],
        ["chmod-777-root", "scratch space for the cockpit test", "chmod -R 777 . 2>/dev/null; true", "overridden"],
        "{seen}"
    );

    // Looking from the page reported nothing: the agent's next call still hears of the changing job.
    let jobs = c.call("jobs", json!({"session": s})).unwrap();
    let announced: Vec<u64> =
        jobs["announcements"].as_array().unwrap().iter().filter_map(|a| a["job"].as_u64()).collect();
    assert!(announced.contains(&changing), "the page's look took the announcement: {jobs}");
}

/// `curl` as uid 65534 (nobody) against the door: `(HTTP status, body)`. `--max-time` ends a stream
/// after its first events.
fn curl_as_nobody(url: &str) -> (u16, String) {
    use std::os::unix::process::CommandExt;
    let out = Command::new("curl")
        .args(["-s", "-N", "--max-time", "3", "-w", "\n%{http_code}", url])
        .uid(65534)
        .gid(65534)
        .current_dir("/")
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').unwrap_or(("", &text));
    (status.trim().parse().unwrap_or(0), body.to_owned())
}

#[test]
fn another_uid_sees_none_of_roots_sessions_on_the_page() {
    let h = Heddle::start_with(&["--http", "127.0.0.1:0"]);
    let addr = door_address(&h.state_dir);
    let mut c = h.client();
    let s = c.call("session.open", json!({"cwd": h.project, "name": "roots-cockpit"})).unwrap()["session"].clone();
    let job = c.call("run", json!({"session": s, "cmd": "echo root-secret-line", "yield_ms": 20_000})).unwrap()["job"]
        .as_u64()
        .unwrap();
    // Root's own page reads them: the paths and names below are right, so a refusal is the uid's.
    let own = HttpConn::connect(addr)
        .unwrap()
        .request("GET", &format!("/cockpit/job?session=roots-cockpit&job={job}"), &[], b"")
        .unwrap();
    assert_eq!(own.status, 200, "{}", own.text());
    assert!(own.text().contains("root-secret-line"), "{}", own.text());

    // Another local uid gets the page itself, but none of root's sessions, jobs, output or screen.
    let base = format!("http://{addr}");
    let (status, page) = curl_as_nobody(&format!("{base}/"));
    assert_eq!(status, 200, "{page}");
    let (status, snapshot) = curl_as_nobody(&format!("{base}/cockpit/sessions"));
    assert_eq!(status, 200, "{snapshot}");
    let data =
        snapshot.lines().find_map(|l| l.strip_prefix("data: ")).unwrap_or_else(|| panic!("no event: {snapshot}"));
    let v: Value = serde_json::from_str(data).unwrap();
    assert_eq!(v["uid"], 65534, "{v}");
    assert!(!snapshot.contains("roots-cockpit"), "nobody's snapshot lists root's session: {snapshot}");
    for path in ["job", "model", "screen"] {
        let (status, body) = curl_as_nobody(&format!("{base}/cockpit/{path}?session=roots-cockpit&job={job}"));
        assert_eq!(status, 404, "/cockpit/{path} as nobody: {body}");
        assert!(!body.contains("root-secret-line"), "/cockpit/{path} as nobody: {body}");
    }
}

/// The front's threads whose name starts with `prefix`.
fn threads_named(pid: u64, prefix: &str) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.starts_with(prefix)))
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn a_page_closed_mid_stream_leaves_nothing_running_in_the_front() {
    use std::io::{Read, Write};
    let h = Heddle::start_with(&["--http", "127.0.0.1:0"]);
    let addr = door_address(&h.state_dir);
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let front = c.call("describe", json!({})).unwrap()["front"]["pid"].as_u64().unwrap();
    let job = c
        .call("run", json!({"session": s, "cmd": "while :; do echo tick; sleep 0.2; done", "yield_ms": 0}))
        .unwrap()["job"]
        .as_u64()
        .unwrap();
    let s = s.as_str().unwrap();
    assert_eq!(threads_named(front, "cockpit-"), 0, "no page is open yet");
    // A browser tab: the sessions stream and a job's screen, read until their first event, then gone.
    let mut tabs = Vec::new();
    for path in ["/cockpit/sessions".to_owned(), format!("/cockpit/screen?session={s}&job={job}")] {
        let mut t = std::net::TcpStream::connect(addr).unwrap();
        write!(t, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&seen).contains("data: ") {
            let n = t.read(&mut buf).unwrap();
            assert!(n > 0, "{path} ended before its first event: {}", String::from_utf8_lossy(&seen));
            seen.extend_from_slice(&buf[..n]);
        }
        tabs.push(t);
    }
    assert_eq!(threads_named(front, "cockpit-"), 2, "one thread per open stream");
    drop(tabs);
    // Each ends at its next write: the screen at the job's next line, the sessions stream at its next
    // change or keepalive (15 s).
    assert!(
        heddle_tests::eventually(std::time::Duration::from_secs(30), || threads_named(front, "cockpit-") == 0),
        "a closed page left {} cockpit threads in the front",
        threads_named(front, "cockpit-")
    );
    c.call("kill", json!({"session": s, "job": job})).unwrap();
}
