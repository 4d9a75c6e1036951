//! Upgrades (issue 28): a state directory an earlier build wrote (tests/fixtures/state-format-0, made by
//! tests/fixtures/make-state.sh with the binaries before the format marker; its README says what is in
//! it) is read by the current binaries: the marker is written, the database and the session's journal
//! and logs are read, so the reopened session lists the earlier jobs with their output. A state
//! directory marked by a newer heddle is refused with a sentence, and left as it was.

use heddle_tests::{read_stream, up_expecting_refusal, Heddle};
use serde_json::{json, Value};
use std::path::Path;

/// The front's uid in these tests (named, so the copied fixture can be given to it).
const FRONT_UID: u32 = 65533;

/// Copy the fixture into `to` (made), owned by the front's uid as a server's state directory is.
fn copy_fixture(to: &Path) {
    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        std::os::unix::fs::chown(to, Some(FRONT_UID), Some(FRONT_UID)).unwrap();
        for e in std::fs::read_dir(from).unwrap().flatten() {
            let dest = to.join(e.file_name());
            if e.file_type().unwrap().is_dir() {
                copy(&e.path(), &dest);
            } else {
                std::fs::copy(e.path(), &dest).unwrap();
                std::os::unix::fs::chown(&dest, Some(FRONT_UID), Some(FRONT_UID)).unwrap();
            }
        }
    }
    copy(&Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/state-format-0"), to);
}

fn jobs(c: &mut heddle_tests::Client, session: &str) -> Vec<(u64, String, Value)> {
    let r = c.call("jobs", json!({"session": session})).unwrap();
    r["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| (j["job"].as_u64().unwrap(), j["state"].as_str().unwrap().to_owned(), j["exit_code"].clone()))
        .collect()
}

#[test]
fn a_state_directory_of_an_earlier_build_is_marked_and_read() {
    let h = Heddle::start_prepared(&["--front-user", "65533"], &[], copy_fixture);
    let marker = std::fs::read_to_string(h.state_dir.join("state-format")).expect("the marker is written");
    assert_eq!(marker, "heddle state format 3\n");
    let mut c = h.client();
    let opened = c.call("session.open", json!({"name": "old", "cwd": h.project})).unwrap();
    assert_eq!(opened["attached"], false, "{opened}");
    let listed = jobs(&mut c, "old");
    let state = |n: u64| listed.iter().find(|j| j.0 == n).map(|j| (j.1.as_str(), j.2.clone()));
    assert_eq!(state(1), Some(("exited", json!(0))), "{listed:?}");
    assert_eq!(state(2), Some(("exited", json!(3))), "{listed:?}");
    assert_eq!(state(4).map(|s| s.0), Some("lost"), "running when the earlier server stopped: {listed:?}");
    assert_eq!(read_stream(&mut c, &json!("old"), &json!(1), "stdout"), b"from the earlier build\n");
    assert_eq!(read_stream(&mut c, &json!("old"), &json!(2), "stderr"), b"to stderr\n");
    let last = listed.iter().map(|j| j.0).max().unwrap();
    let next = c.call("run", json!({"session": "old", "cmd": "echo new", "yield_ms": 10000})).unwrap();
    assert_eq!((next["job"].as_u64(), next["view"].as_str()), (Some(last + 1), Some("new\n")), "{next}");
}

#[test]
fn a_state_directory_of_a_newer_build_is_refused_with_a_sentence() {
    let dir = tempfile::Builder::new().prefix("heddle-e2e-newer-").tempdir_in("/tmp").unwrap();
    let state = dir.path().join("state");
    copy_fixture(&state);
    std::fs::write(state.join("state-format"), "heddle state format 99\n").unwrap();
    let db_before = std::fs::read(state.join("heddle.db")).unwrap();
    let cgroup = heddle_tests::cgroup2_mount().join(format!("heddle-e2e-newer-{}", std::process::id()));
    let r = up_expecting_refusal(&dir.path().join("run/heddle.sock"), &state, &cgroup);
    heddle_tests::remove_cgroup_tree(&cgroup);
    assert_eq!(r.status.code(), Some(3), "a start that cannot succeed: {}", r.stderr);
    assert!(
        r.stderr.contains("written by a newer heddle (state format 99; this heddle reads formats up to 3)"),
        "{}",
        r.stderr
    );
    assert_eq!(std::fs::read_to_string(state.join("state-format")).unwrap(), "heddle state format 99\n");
    assert_eq!(std::fs::read(state.join("heddle.db")).unwrap(), db_before, "the database was not opened");
}
