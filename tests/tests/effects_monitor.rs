//! The effects ledger's change monitor through the real stack: a job that wrote nothing costs no git
//! run, a few changed paths cost a status of those paths, and whatever the monitor cannot vouch for
//! (the git dir changed, its queue overflowed) falls back to a full status that is still right.

use heddle_tests::{project_changes as changed, Client, Heddle};
use serde_json::{json, Value};

fn run(c: &mut Client, s: &Value, cmd: &str, effects: Option<&str>) -> Value {
    let mut p = json!({"session": s, "cmd": cmd, "yield_ms": 60_000});
    if let Some(m) = effects {
        p["effects"] = json!(m);
    }
    let r = c.call("run", p).unwrap();
    assert_eq!(r["exit_code"], 0, "{r}");
    r
}

fn method(r: &Value) -> &str {
    r["effects"]["project"]["method"].as_str().unwrap_or_else(|| panic!("no method: {r}"))
}

fn git_runs(r: &Value) -> u64 {
    r["effects"]["project"]["git_runs"].as_u64().unwrap_or_else(|| panic!("no git_runs: {r}"))
}

/// A session in a repository of `files` committed files (in 20 directories) plus one dirty file, made
/// by a job so the jobs' uid owns it; then one ledger so the monitor watches the tree.
fn repo(h: &Heddle, c: &mut Client, files: usize) -> (Value, std::path::PathBuf) {
    let first = h.open_session(c);
    let uid: u32 = run(c, &first, "id -u", Some("none"))["view"].as_str().unwrap().trim().parse().unwrap();
    let dir = h.project.join("big");
    std::fs::create_dir(&dir).unwrap();
    std::os::unix::fs::chown(&dir, Some(uid), None).unwrap();
    let s = c.call("session.open", json!({"name": "big", "cwd": dir})).unwrap()["session"].clone();
    let init = format!(
        "git init -q . && for d in $(seq 0 19); do mkdir d$d; done && for i in $(seq 1 {files}); do echo $i > d$((i % 20))/f$i; done \
         && printf 'a\\n' > f1 && printf 'b\\n' > f2 && printf 'c\\n' > f3 && printf 'd\\n' > dirty && git add . \
         && git -c user.email=t@t -c user.name=t -c maintenance.auto=false commit -qm init && printf 'e\\n' >> dirty"
    );
    run(c, &s, &init, Some("none"));
    let r = run(c, &s, "true", None);
    assert_eq!(changed(&r), [], "{r}");
    (s, dir)
}

#[test]
fn a_job_that_writes_nothing_runs_no_git_and_a_sed_of_three_files_asks_git_about_those_only() {
    let h = Heddle::start();
    let mut c = h.client();
    let (s, _) = repo(&h, &mut c, 2000);
    for _ in 0..3 {
        let r = run(&mut c, &s, "true", None);
        let p = &r["effects"]["project"];
        assert_eq!(changed(&r), [], "{r}");
        assert_eq!(p["confidence"], "complete", "{r}");
        assert_eq!(method(&r), "watch", "{r}");
        assert_eq!(git_runs(&r), 0, "no git ran for a job that wrote nothing: {r}");
        assert!(p["before"].as_str().unwrap().contains("no git run"), "{r}");
    }
    let r = run(&mut c, &s, "sed -i s/a/A/ f1 && sed -i s/b/B/ f2 && sed -i s/e/E/ dirty", Some("diff"));
    assert!(r["effects"]["project"]["scope"].as_str().unwrap().contains("shared memory mapping"), "{r}");
    assert_eq!(
        changed(&r),
        [("dirty".into(), "modified-again".into()), ("f1".into(), "modified".into()), ("f2".into(), "modified".into())],
        "{r}"
    );
    assert_eq!(method(&r), "pathspec", "{r}");
    assert_eq!(git_runs(&r), 2, "one status of the changed paths, one `git cat-file --batch` for the diff: {r}");
    let diff = r["effects"]["project"]["diff"].as_str().unwrap();
    assert!(diff.contains("-a\n+A\n") && diff.contains("-b\n+B\n") && diff.contains("-e\n+E\n"), "{diff}");
    // A new directory with files in it, and a deleted tracked file in another.
    let r = run(&mut c, &s, "mkdir -p new/deep && echo x > new/deep/x && rm d3/f3", None);
    assert_eq!(changed(&r), [("d3/f3".into(), "deleted".into()), ("new/deep/x".into(), "untracked-new".into())], "{r}");
    assert_eq!(method(&r), "pathspec", "{r}");
    // The new directory is watched: a file written in it later is seen.
    let r = run(&mut c, &s, "echo y > new/deep/y", None);
    assert_eq!(changed(&r), [("new/deep/y".into(), "untracked-new".into())], "{r}");
    assert_eq!(method(&r), "pathspec", "{r}");
    let r = run(&mut c, &s, "true", None);
    assert_eq!((changed(&r), method(&r)), (vec![], "watch"), "{r}");
}

#[test]
fn git_add_and_commit_fall_back_to_a_full_status_that_is_right() {
    let h = Heddle::start();
    let mut c = h.client();
    let (s, _) = repo(&h, &mut c, 200);
    let r = run(&mut c, &s, "echo more >> f1 && git add f1", None);
    assert_eq!(changed(&r), [("f1".into(), "modified".into())], "{r}");
    assert_eq!(method(&r), "full", "{r}");
    let note = r["effects"]["project"]["method_note"].as_str().unwrap_or_default();
    assert!(note.contains("git dir changed"), "{r}");
    let r = run(&mut c, &s, "git -c user.email=t@t -c user.name=t -c maintenance.auto=false commit -qm two", None);
    assert_eq!(changed(&r), [("f1".into(), "committed".into())], "staged in the call before, committed now: {r}");
    assert_eq!(method(&r), "full", "{r}");
    let r = run(&mut c, &s, "true", None);
    assert_eq!((changed(&r), method(&r)), (vec![], "watch"), "the full status became the new base: {r}");
    let r = run(&mut c, &s, "git status --short > /dev/null; git log -1 --format=%s", None);
    assert_eq!(changed(&r), [], "a git that only reads changes nothing: {r}");
}

#[test]
fn a_file_changed_between_jobs_by_another_process_is_not_blamed_on_the_next_job() {
    let h = Heddle::start();
    let mut c = h.client();
    let (s, dir) = repo(&h, &mut c, 200);
    // Another process (this test) writes two files between jobs.
    std::fs::write(dir.join("f2"), "outside\n").unwrap();
    std::fs::write(dir.join("d5/f5"), "outside\n").unwrap();
    let r = run(&mut c, &s, "sed -i s/a/A/ f1", None);
    assert_eq!(changed(&r), [("f1".into(), "modified".into())], "only the job's own write: {r}");
    assert!(r["effects"]["project"]["before"].as_str().unwrap().contains("brought up to date"), "{r}");
    let r = run(&mut c, &s, "true", None);
    assert_eq!((changed(&r), method(&r)), (vec![], "watch"), "{r}");
}

#[test]
fn an_overflowing_queue_falls_back_to_a_full_status_and_the_monitor_starts_again() {
    let h = Heddle::start();
    let mut c = h.client();
    let (s, _) = repo(&h, &mut c, 200);
    let bounds = c.call("describe", json!({})).unwrap()["effects"].clone();
    assert_eq!(bounds["monitor_paths_max"], 256, "{bounds}");
    assert!(bounds["monitor_dirs_max"].as_u64().is_some_and(|n| n > 0 && n <= 20_000), "{bounds}");
    // Each new file queues at least two events (create, close-write): enough files to overflow, in a
    // directory watched already (a new directory's files would be one path, with no event queued).
    let queued: usize =
        std::fs::read_to_string("/proc/sys/fs/inotify/max_queued_events").unwrap().trim().parse().unwrap();
    let n = queued / 2 + 100;
    let r = run(&mut c, &s, &format!("(cd d1 && for i in $(seq 1 {n}); do echo $i > g$i; done)"), None);
    let p = &r["effects"]["project"];
    assert_eq!(method(&r), "full", "{r}");
    assert!(p["method_note"].as_str().unwrap_or_default().contains("overflowed"), "{r}");
    // A folded directory counts the paths below it (a ledger this long lists d1 once).
    let listed: u64 = p["changed"].as_array().unwrap().iter().map(|c| c["under"].as_u64().unwrap().max(1)).sum();
    let total = listed + p["changed_more"].as_u64().unwrap();
    assert_eq!(total, n as u64, "every new file counted: {p}");
    assert_eq!(p["confidence"], "complete", "{r}");
    let r = run(&mut c, &s, "echo z >> f3 && rm d1/g1", None);
    assert_eq!(changed(&r), [("d1/g1".into(), "deleted".into()), ("f3".into(), "modified".into())], "{r}");
    assert_eq!(method(&r), "pathspec", "a new monitor watches the tree again: {r}");
}
