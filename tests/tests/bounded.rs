//! What a long-lived session costs the front stays bounded: an ended job holds no open file (its output is
//! read back by path), so thousands of jobs never run the front out of descriptors.

use heddle_tests::{read_stream, Heddle};
use serde_json::json;

fn fds(pid: u64) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count()
}

#[test]
fn ended_jobs_hold_no_open_files_and_their_output_stays_readable() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let front = c.call("describe", json!({})).unwrap()["front"]["pid"].as_u64().unwrap();
    c.call("run", json!({"session": s, "cmd": "echo warm"})).unwrap();
    let before = fds(front);
    for i in 0..300 {
        let r = c.call("run", json!({"session": s, "cmd": format!("echo job-{i}; echo err-{i} >&2")})).unwrap();
        assert_eq!(r["exit_code"], 0, "{r}");
    }
    let after = fds(front);
    assert!(
        after <= before + 8,
        "300 ended jobs left the front holding {} more fds ({before} → {after})",
        after - before
    );
    // Their output is still there, raw and as lines, read back by path.
    let job = json!(150);
    assert_eq!(read_stream(&mut c, &s, &job, "stdout"), b"job-148\n");
    assert_eq!(read_stream(&mut c, &s, &job, "stderr"), b"err-148\n");
    let lines = c.call("output", json!({"session": s, "job": job, "lines": [1, 2]})).unwrap();
    assert!(lines.to_string().contains("job-148") && lines.to_string().contains("err-148"), "{lines}");
}
