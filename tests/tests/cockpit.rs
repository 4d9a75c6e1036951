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
    let out = Command::new("node")
        .arg(&driver)
        .args([&format!("http://{addr}"), s.as_str().unwrap(), &watched.to_string(), &victim.to_string()])
        .arg(&shot)
        .output()
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let seen: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!("the driver printed no JSON ({e}): {stdout}\n{}", String::from_utf8_lossy(&out.stderr))
    });
    assert!(seen.get("error").is_none(), "the page did not show what it should: {seen}");

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
