//! Pre-started shells in the worker's event loop, over heap rings with fake cgroups (no root): a `Run`
//! that matches the `Prestart` takes the spare; anything that differs, including the file system under
//! the spare's working directory, starts cold and behaves exactly as a cold job.

mod common;

use common::{Collector, Front, LocalWorker};
use shm_proto::msg::Command;
use std::time::Duration;
use worker::cgroup::Call;

/// Send `Prestart(spec)` and give the idle worker time to start the spare.
fn prestart(w: &mut LocalWorker, spec: shm_proto::msg::RunSpec) {
    w.front.send(&Command::Prestart { spec, cpu_wait_ms: 0 });
    std::thread::sleep(Duration::from_millis(300));
}

fn pwd_of(state: &[u8]) -> String {
    let at = state.windows(3).position(|w| w == b"\0P\0").expect("capture has a cwd") + 3;
    let end = state[at..].iter().position(|&b| b == b'\n' || b == 0).unwrap() + at;
    String::from_utf8_lossy(&state[at..end]).into_owned()
}

#[test]
fn a_matching_run_takes_the_spare_and_its_capture_is_clean() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap().to_owned();
    let restore = format!("builtin cd -- '{d}'\nexport SP_VAR=1\n");
    let mut w = LocalWorker::start(1 << 20, vec![("PATH".into(), "/usr/bin:/bin".into())]);
    prestart(&mut w, Front::stateful(1, "", "/", &restore));
    w.front.send(&Command::Run(Front::stateful(1, "echo \"$SP_VAR $PWD\"; read x; echo read=$?", "/", &restore)));
    let mut c = Collector::default();
    let t = c.until_done(&mut w.front, 1);
    assert!(t.prestarted, "{t:?}");
    assert_eq!(t.stdout_str(), format!("1 {d}\nread=1\n"));
    let state = t.state.clone().expect("captured");
    assert!(state.starts_with(b"\0O\0"), "the capture starts at offset 0: {:?}", String::from_utf8_lossy(&state));
    assert_eq!(pwd_of(&state), d);
    w.shutdown().unwrap();
}

#[test]
fn a_run_with_other_inputs_discards_the_spare_and_starts_cold() {
    let mut w = LocalWorker::start(1 << 20, vec![("PATH".into(), "/usr/bin:/bin".into())]);
    prestart(&mut w, Front::stateful(1, "", "/", "export A=1\n"));
    w.front.send(&Command::Run(Front::stateful(1, "echo ${A-unset}", "/", "export A=2\n")));
    let mut c = Collector::default();
    let t = c.until_done(&mut w.front, 1);
    assert!(!t.prestarted, "{t:?}");
    assert_eq!(t.stdout_str(), "2\n");
    let calls = w.cgroups.calls();
    assert_eq!(
        calls[..4],
        [Call::Create(1), Call::Kill(1), Call::Remove(1), Call::Create(1)],
        "spare made, ended, then cold"
    );
    w.shutdown().unwrap();
}

#[test]
fn a_working_directory_that_moved_under_the_spare_means_a_cold_start() {
    let base = tempfile::tempdir().unwrap();
    let d = base.path().join("work");
    std::fs::create_dir(&d).unwrap();
    let ds = d.to_str().unwrap().to_owned();
    let restore = format!("builtin cd -- '{ds}'\n");
    let mut w = LocalWorker::start(1 << 20, vec![("PATH".into(), "/usr/bin:/bin".into())]);
    // Removed and made again: a cold start's `cd` reaches the new directory; the spare sits in the old one.
    prestart(&mut w, Front::stateful(1, "", "/", &restore));
    std::fs::remove_dir(&d).unwrap();
    std::fs::create_dir(&d).unwrap();
    std::fs::write(d.join("new-file"), "").unwrap();
    w.front.send(&Command::Run(Front::stateful(1, "ls", "/", &restore)));
    let mut c = Collector::default();
    let t = c.until_done(&mut w.front, 1);
    assert!(!t.prestarted, "{t:?}");
    assert_eq!(t.stdout_str(), "new-file\n");
    // Renamed: a cold start's `cd` fails (and says so); the spare would run in the renamed directory.
    prestart(&mut w, Front::stateful(2, "", "/", &restore));
    std::fs::rename(&d, base.path().join("moved")).unwrap();
    w.front.send(&Command::Run(Front::stateful(2, "pwd", "/", &restore)));
    let t = c.until_done(&mut w.front, 2);
    assert!(!t.prestarted, "{t:?}");
    assert_eq!(t.stdout_str(), "/\n");
    assert!(String::from_utf8_lossy(&t.stderr).contains("No such file or directory"), "{t:?}");
    // The session's own directory removed: the cold start's spawn fails, as without spares.
    let gone = base.path().join("gone");
    std::fs::create_dir(&gone).unwrap();
    let g = gone.to_str().unwrap().to_owned();
    prestart(&mut w, Front::stateful(3, "", &g, ""));
    std::fs::remove_dir(&gone).unwrap();
    w.front.send(&Command::Run(Front::stateful(3, "echo never", &g, "")));
    let t = c.until_done(&mut w.front, 3);
    assert!(t.spawn_failed.as_deref().is_some_and(|e| e.contains("cannot enter working directory")), "{t:?}");
    w.shutdown().unwrap();
}

#[test]
fn each_start_moves_the_spare_to_the_next_job_without_a_new_prestart() {
    let mut w = LocalWorker::start(1 << 20, vec![("PATH".into(), "/usr/bin:/bin".into())]);
    prestart(&mut w, Front::stateful(1, "", "/", "export A=1\n"));
    let mut c = Collector::default();
    // Job 1 takes the spare; job 2 (other inputs) starts cold; jobs 3 and 4 take spares the worker made
    // by itself for the next id after each start — one `Prestart` in all.
    for (job, restore, hot) in
        [(1, "export A=1\n", true), (2, "export A=2\n", false), (3, "export A=1\n", true), (4, "export A=1\n", true)]
    {
        w.front.send(&Command::Run(Front::stateful(job, "echo $A", "/", restore)));
        let t = c.until_done(&mut w.front, job);
        assert_eq!((t.prestarted, t.stdout_str()), (hot, format!("{}\n", &restore[9..10])), "job {job}: {t:?}");
        std::thread::sleep(Duration::from_millis(300));
    }
    w.shutdown().unwrap();
}
