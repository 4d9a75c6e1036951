//! A full disk through the real stack (issue 6): the job store's file system fills up while a job
//! writes; the job's result names the error, nothing crashes, and once space is freed the next call
//! works. The session's `jobs` directory is put on a small tmpfs mounted by this test (as root) and
//! unmounted after.

use heddle_tests::{require_root, Heddle};
use serde_json::json;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs mounted over a directory for the test's duration.
struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mount a `size` tmpfs over `dir`, owned like `dir` (the front runs unprivileged).
    fn over(dir: &Path, size: &str) -> Tmpfs {
        let meta = std::fs::metadata(dir).unwrap();
        let opts = format!("size={size},mode=0700,uid={},gid={}", meta.uid(), meta.gid());
        let ok = Command::new("mount").args(["-t", "tmpfs", "-o", &opts, "heddle-test-tmpfs"]).arg(dir).status();
        assert!(ok.unwrap().success(), "mounting a tmpfs over {} failed", dir.display());
        Tmpfs(dir.to_owned())
    }

    fn resize(&self, size: &str) {
        let ok = Command::new("mount").args(["-o", &format!("remount,size={size}")]).arg(&self.0).status();
        assert!(ok.unwrap().success(), "resizing the tmpfs failed");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn a_full_disk_is_an_error_in_the_result_and_the_next_call_works_after_space_frees() {
    require_root();
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let front = c.call("describe", json!({})).unwrap()["front"]["pid"].clone();
    let jobs: Vec<PathBuf> = std::fs::read_dir(h.state_dir.join("sessions"))
        .unwrap()
        .map(|e| e.unwrap().path().join("jobs"))
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(jobs.len(), 1, "one session's jobs directory: {jobs:?}");
    let fs = Tmpfs::over(&jobs[0], "256k");

    // 4 MiB into a 256 KiB file system.
    let r = c.call("run", json!({"session": s, "cmd": "seq 1 600000", "yield_ms": 60_000})).unwrap();
    assert_eq!(r["state"], "exited", "the job itself ran to its end: {r}");
    assert_eq!(r["stdout_bytes"], 4_088_895, "every byte is counted: {r}");
    let text = r.to_string();
    assert!(text.contains("No space left on device"), "the result names the error: {r}");
    assert!(text.contains("were not stored"), "the result says what was not stored: {r}");
    assert_eq!(c.call("describe", json!({})).unwrap()["front"]["pid"], front, "the front did not crash");

    // Space frees: the next call works and its output is whole.
    fs.resize("16m");
    let r = c.call("run", json!({"session": s, "cmd": "seq 1 1000", "yield_ms": 60_000})).unwrap();
    assert_eq!(r["state"], "exited", "{r}");
    assert!(r["view"].as_str().unwrap().ends_with("999\n1000\n"), "{r}");
    assert!(!r.to_string().contains("No space left"), "{r}");
    let raw =
        c.call("output", json!({"session": s, "job": r["job"], "raw": {"offset": 0, "unredacted": true}})).unwrap();
    let want: String = (1..=1000).map(|i| format!("{i}\n")).collect();
    assert_eq!(raw["data"].as_str().unwrap(), want, "the next job's output is stored whole");
    drop(fs);
}
