//! Jobs get a real, writable HOME: a uid without a home of its own (root-opened sessions run jobs as a
//! uid of their own, with no passwd entry) gets one heddle makes, kept across the session's jobs, so
//! `git config --global`, npm's and pip's caches and cargo's registry work; it goes with the session's uid.

use heddle_tests::Heddle;
use serde_json::{json, Value};

fn run(c: &mut heddle_tests::Client, s: &Value, cmd: &str) -> Value {
    c.call("run", json!({"session": s, "cmd": cmd, "yield_ms": 20_000})).unwrap()
}

#[test]
fn jobs_without_a_home_get_a_writable_one_that_persists() {
    let h = Heddle::start_with(&["--session-uids", "1879048192-1879113727"]);
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let r = run(
        &mut c,
        &s,
        "echo \"home=$HOME\"; git config --global user.name heddle-test && git config --global user.name; \
         mkdir -p ~/.npm/_cacache ~/.cache/pip ~/.cargo/registry && echo kept > ~/.probe && echo caches-ok",
    );
    let view = r["view"].as_str().unwrap();
    assert_eq!(r["exit_code"], 0, "{r}");
    assert!(view.contains("heddle-test\n") && view.contains("caches-ok\n"), "{view}");
    let home = view.lines().find_map(|l| l.strip_prefix("home=")).unwrap().to_owned();
    let name = h.cgroup_root.file_name().unwrap().to_string_lossy().into_owned();
    assert!(home.contains(&format!("heddle-homes-{name}/")), "a home heddle made: {home}");
    let d = c.call("describe", json!({"session": s})).unwrap();
    let sb = &d["sessions"][0]["sandbox"];
    assert_eq!((sb["home"].as_str(), sb["home_made"].as_bool()), (Some(&*home), Some(true)), "{sb}");
    assert!(sb["writable"].as_array().unwrap().iter().any(|w| w["path"] == home), "HOME is a writable root: {sb}");
    // The session's next job finds what the first left (tool caches persist across its jobs).
    let r = run(&mut c, &s, "cat ~/.probe; git config --global user.name");
    assert_eq!(r["view"], "kept\nheddle-test\n", "{r}");
    // Another session has a uid and a home of its own: nothing of the first's.
    let s2 = h.open_session(&mut c);
    let r = run(&mut c, &s2, "echo \"$HOME\"; cat ~/.probe 2>&1 || echo none");
    let view = r["view"].as_str().unwrap();
    assert!(!view.starts_with(&format!("{home}\n")) && view.ends_with("none\n"), "{view}");
    // Only the uid itself can enter it.
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let meta = std::fs::metadata(&home).unwrap();
    assert_eq!(
        (meta.permissions().mode() & 0o777, meta.uid()),
        (0o700, d["sessions"][0]["worker"]["uid"].as_u64().unwrap() as u32)
    );
}
