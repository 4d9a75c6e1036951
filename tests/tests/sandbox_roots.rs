//! A session's own writable roots within what the server allows, the files channel creating parent
//! directories, and session limits taken from the policy profile (issues 4 and 5), end to end through
//! the real binaries and socket, as root (CI).

use heddle_tests::{Client, Heddle};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

fn run(c: &mut Client, s: &Value, cmd: &str) -> Value {
    c.call("run", json!({"session": s, "cmd": cmd, "yield_ms": 60_000})).expect("run")
}

/// A world-writable directory under the fixture's dir (so only Landlock can refuse a write there).
fn world_dir(base: &Path, rel: &str) -> PathBuf {
    let d = base.join(rel);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
    d
}

fn open_err(c: &mut Client, params: Value) -> String {
    let e = c.call("session.open", params).expect_err("session.open must refuse");
    format!("{e:?}")
}

#[test]
fn a_session_adds_a_writable_root_beneath_an_allowed_dir_and_nothing_else() {
    let base = tempfile::Builder::new().prefix("heddle-roots-").tempdir_in("/tmp").unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let allowed = world_dir(base.path(), "data");
    let extra = world_dir(base.path(), "data/cache");
    let sibling = world_dir(base.path(), "data/other");
    let outside = world_dir(base.path(), "elsewhere");
    let h = Heddle::start_with(&["--allow-writable", allowed.to_str().unwrap()]);
    let mut c = h.client();

    let opened = c.call("session.open", json!({"cwd": h.project, "writable": [extra]})).unwrap();
    let s = opened["session"].clone();
    let r = run(&mut c, &s, &format!("echo in > {0}/f && cat {0}/f", extra.display()));
    assert_eq!((r["exit_code"].as_i64(), r["view"].as_str()), (Some(0), Some("in\n")), "{r}");
    assert_eq!(std::fs::read_to_string(extra.join("f")).unwrap(), "in\n");
    // A sibling beneath the same allowed dir was not asked for: still refused, and explained.
    let r = run(&mut c, &s, &format!("echo no > {}/f", sibling.display()));
    assert_ne!(r["exit_code"], 0, "{r}");
    assert!(!sibling.join("f").exists());
    assert!(r["refusals"][0].as_str().unwrap().contains("(session.open)"), "the extra root is listed: {r}");
    let sb = &c.call("describe", json!({"session": s})).unwrap()["sessions"][0]["sandbox"];
    let roots = sb["writable"].as_array().unwrap();
    let listed = roots.iter().find(|w| w["template"] == "session.open").expect("extra root in describe");
    assert_eq!(listed["path"], json!(extra.canonicalize().unwrap()), "{sb}");

    // Outside the allowance, relative, or through a symlink that leads out: refused at session.open.
    let e = open_err(&mut c, json!({"cwd": h.project, "writable": [outside]}));
    assert!(e.contains("outside what this server allows") && e.contains("--allow-writable"), "{e}");
    let e = open_err(&mut c, json!({"cwd": h.project, "writable": ["data/cache"]}));
    assert!(e.contains("must be an absolute path"), "{e}");
    std::os::unix::fs::symlink(&outside, allowed.join("link")).unwrap();
    let e = open_err(&mut c, json!({"cwd": h.project, "writable": [allowed.join("link")]}));
    assert!(e.contains(&format!("really {}", outside.canonicalize().unwrap().display())), "{e}");
    let r = run(&mut c, &s, "echo still works");
    assert_eq!(r["view"], "still works\n", "a refused open leaves other sessions alone: {r}");
}

#[test]
fn without_an_allowance_a_session_cannot_add_roots() {
    let h = Heddle::start();
    let mut c = h.client();
    let e = open_err(&mut c, json!({"cwd": h.project, "writable": [h.dir.path()]}));
    assert!(e.contains("this server allows none") && e.contains("heddle up --allow-writable"), "{e}");
}

#[test]
fn the_files_channel_creates_missing_parent_directories_inside_the_roots_only() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let files = json!([
        {"path": "new/deeper/f.txt", "content": "nested\n"},
        {"path": "/etc/heddle-files-parents/x", "content": "no"},
    ]);
    let r = c
        .call("run", json!({"session": s, "cmd": "cat new/deeper/f.txt", "files": files, "yield_ms": 30_000}))
        .unwrap();
    assert_eq!(r["files"][0]["written"], true, "{r}");
    assert_eq!(r["view"], "nested\n", "{r}");
    assert_eq!(r["files"][1]["written"], false, "{r}");
    assert!(!Path::new("/etc/heddle-files-parents").exists(), "no directory is created outside the roots");
}

#[test]
fn session_limits_come_from_the_policy_profile_unless_the_session_or_server_sets_them() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let d = c.call("describe", json!({"session": s})).unwrap();
    let limits = &d["sessions"][0]["limits"];
    // The workspace profile's [limits]: memory 4G, pids 4096.
    assert_eq!((limits["memory_max"].as_u64(), limits["pids_max"].as_u64()), (Some(4 << 30), Some(4096)), "{d}");
    let v1 = Path::new("/sys/fs/cgroup/pids")
        .join(h.cgroup_root.file_name().unwrap())
        .join(format!("session-{}", s.as_str().unwrap()))
        .join("pids.max");
    assert_eq!(std::fs::read_to_string(&v1).unwrap().trim(), "4096", "the kernel holds the limit: {}", v1.display());
    drop(c);
    drop(h);

    let h = Heddle::start_with(&["--pids-max", "300"]);
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let d = c.call("describe", json!({"session": s})).unwrap();
    assert_eq!(d["sessions"][0]["limits"]["pids_max"], 300, "the server's flag beats the profile: {d}");
    let own = c.call("session.open", json!({"cwd": h.project, "limits": {"pids_max": 128}})).unwrap();
    let d = c.call("describe", json!({"session": own["session"]})).unwrap();
    assert_eq!(d["sessions"][0]["limits"]["pids_max"], 128, "the session's own value beats both: {d}");
}
