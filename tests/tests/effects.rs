//! The effects ledger through the real stack: a job's result names what it changed in the project's git
//! work tree (the repository is made by a job, so it is owned by the jobs' uid as a user's would be).

use heddle_tests::{project_changes as changed, text_form, Client, Heddle};
use serde_json::{json, Value};

fn run(c: &mut Client, s: &Value, cmd: &str, effects: Option<&str>) -> Value {
    let mut p = json!({"session": s, "cmd": cmd, "yield_ms": 20_000});
    if let Some(m) = effects {
        p["effects"] = json!(m);
    }
    c.call("run", p).unwrap()
}

fn reason(r: &Value) -> String {
    r["effects"]["project"]["reason"].as_str().unwrap_or_default().to_owned()
}

/// A session whose cwd is `name` under the project dir, owned by the jobs' uid, a repo made by `init`.
fn repo_session(h: &Heddle, c: &mut Client, name: &str, init: &str) -> (Value, std::path::PathBuf) {
    let first = h.open_session(c);
    let uid: u32 = run(c, &first, "id -u", Some("none"))["view"].as_str().unwrap().trim().parse().unwrap();
    let repo = h.project.join(name);
    std::fs::create_dir(&repo).unwrap();
    std::os::unix::fs::chown(&repo, Some(uid), None).unwrap();
    let opened = c.call("session.open", json!({"name": name, "cwd": repo})).unwrap();
    let s = opened["session"].clone();
    if !init.is_empty() {
        let r = run(c, &s, init, Some("none"));
        assert_eq!(r["exit_code"], 0, "{r}");
        assert!(r["effects"].is_null(), "effects: none gives no ledger: {r}");
    }
    (s, repo)
}

/// The repository every ledger test starts from. `maintenance.auto=false`: git 2.47's `commit` leaves
/// `git maintenance run --auto --detach` running in the job's cgroup, and the next job's ledger then
/// rightly names job 1 as a job that may have written meanwhile.
const INIT: &str =
    "git init -q . && printf 'a\\n' > f1 && printf 'b\\n' > f2 && printf 'c\\n' > f3 && printf 'd\\n' > dirty \
     && git add . && git -c user.email=t@t -c user.name=t -c maintenance.auto=false commit -qm init && printf 'e\\n' >> dirty";

#[test]
fn sed_over_three_files_lists_them_and_diffs_them() {
    let h = Heddle::start();
    let mut c = h.client();
    let (s, _) = repo_session(&h, &mut c, "repo", INIT);
    let r = run(&mut c, &s, "sed -i s/a/A/ f1 && sed -i s/b/B/ f2 && sed -i s/c/C/ f3", Some("diff"));
    let got = changed(&r);
    assert_eq!(
        got,
        [("f1".into(), "modified".into()), ("f2".into(), "modified".into()), ("f3".into(), "modified".into())],
        "{r}"
    );
    let diff = r["effects"]["project"]["diff"].as_str().unwrap();
    assert!(diff.contains("-a\n+A\n") && diff.contains("+++ b/f3") && diff.contains("-c\n+C\n"), "{diff}");
    assert_eq!(r["effects"]["project"]["confidence"], "complete", "{r}");
    assert_eq!(r["effects"]["processes"]["confidence"], "complete", "{r}");
    assert_eq!(r["effects"]["processes"]["survivors"], json!([]), "{r}");
    // The default is the path list, without a diff.
    let r = run(&mut c, &s, "sed -i s/A/a/ f1", None);
    assert_eq!(changed(&r), [("f1".into(), "reverted".into())], "{r}");
    assert!(r["effects"]["project"]["diff"].is_null(), "{r}");
    let r = run(&mut c, &s, "sed -i s/B/b/ f2", Some("none"));
    assert!(r["effects"].is_null(), "effects: none gives no ledger: {r}");
}

#[test]
fn a_dirty_file_edited_again_an_untracked_file_and_git_mv() {
    let h = Heddle::start();
    let mut c = h.client();
    let (s, _) = repo_session(&h, &mut c, "repo", INIT);
    let r = run(&mut c, &s, "printf 'again\\n' >> dirty; echo new > untracked", None);
    assert_eq!(
        changed(&r),
        [("dirty".into(), "modified-again".into()), ("untracked".into(), "untracked-new".into())],
        "{r}"
    );
    let r = run(&mut c, &s, "git mv f1 g1", None);
    assert_eq!(changed(&r), [("g1".into(), "renamed".into())], "{r}");
    assert_eq!(r["effects"]["project"]["changed"][0]["from"], "f1", "{r}");
}

#[test]
fn a_codemod_over_a_hundred_files_lists_them_all() {
    let h = Heddle::start();
    let mut c = h.client();
    let init = "git init -q . && for i in $(seq 1 100); do echo \"old $i\" > m$i.txt; done && git add . \
                && git -c user.email=t@t -c user.name=t -c maintenance.auto=false commit -qm init";
    let (s, _) = repo_session(&h, &mut c, "codemod", init);
    let r = run(&mut c, &s, "sed -i s/old/new/ m*.txt", Some("diff"));
    let p = &r["effects"]["project"];
    let n = p["changed"].as_array().unwrap().len() as u64 + p["changed_more"].as_u64().unwrap();
    assert_eq!(n, 100, "{r}");
    assert!(changed(&r).iter().all(|(_, ch)| ch == "modified"), "{r}");
    assert!(p["diff"].as_str().unwrap().contains("-old 1\n+new 1\n"), "{r}");
}

#[test]
fn a_write_through_a_symlink_out_of_the_repo_lowers_confidence() {
    let h = Heddle::start();
    let mut c = h.client();
    let (s, _) = repo_session(&h, &mut c, "repo", INIT);
    // A link to where the sandbox refuses writes (as a venv's bin/python → /usr/bin) carries none out.
    assert_eq!(run(&mut c, &s, "ln -s /usr/bin/env tool", Some("none"))["exit_code"], 0);
    let r = run(&mut c, &s, "true", None);
    assert_eq!(r["effects"]["project"]["confidence"], "complete", "{r}");
    // A directory the job may write, outside the repository (its temp dir).
    let r = run(&mut c, &s, "d=$(mktemp -d) && ln -s \"$d\" out && echo \"$d\"", Some("none"));
    let outside = std::path::PathBuf::from(r["view"].as_str().unwrap().trim());
    let r = run(&mut c, &s, "echo secret > out/escaped", None);
    assert_eq!(r["exit_code"], 0, "{r}");
    assert!(outside.join("escaped").exists(), "the write went out of the repo");
    assert_eq!(r["effects"]["project"]["confidence"], "partial", "{r}");
    assert!(reason(&r).contains("symlink(s) leading out of it to where jobs may write (out)"), "{r}");
}

#[test]
fn a_job_outside_any_repo_says_so() {
    let h = Heddle::start();
    let mut c = h.client();
    let (s, _) = repo_session(&h, &mut c, "plain", "");
    let r = run(&mut c, &s, "echo hi > f", None);
    assert_eq!(r["effects"]["project"]["confidence"], "none", "{r}");
    assert!(reason(&r).contains("in no git work tree"), "{r}");
    assert_eq!(r["effects"]["project"]["changed"], json!([]), "{r}");
}

#[test]
fn a_kept_job_writing_meanwhile_is_named() {
    let h = Heddle::start();
    let mut c = h.client();
    let (s, _) = repo_session(&h, &mut c, "repo", INIT);
    let writer = c
        .call("run", json!({"session": s, "cmd": "while :; do date >> kept.log; sleep 0.02; done", "yield_ms": 0}))
        .unwrap();
    c.call("keep", json!({"session": s, "job": writer["job"], "name": "scribbler"})).unwrap();
    let r = run(&mut c, &s, "sleep 0.2; echo mine > mine", None);
    let got = changed(&r);
    assert!(got.contains(&("mine".into(), "untracked-new".into())), "{r}");
    assert_eq!(r["effects"]["project"]["confidence"], "partial", "{r}");
    let job = writer["job"].as_u64().unwrap();
    assert!(reason(&r).contains(&format!("job {job} ")), "the writer is named: {r}");
    c.call("kill", json!({"session": s, "job": writer["job"]})).unwrap();
}

/// A job beside which another ran changed nothing: its ledger says so plainly (nothing listed can be
/// the other's); once it lists a path, the other job is named.
#[test]
fn a_job_running_beside_lowers_confidence_only_when_something_is_listed() {
    let h = Heddle::start();
    let mut c = h.client();
    let (s, _) = repo_session(&h, &mut c, "repo", INIT);
    let sleeper = c.call("run", json!({"session": s, "cmd": "sleep 30", "yield_ms": 0})).unwrap();
    let job = sleeper["job"].as_u64().unwrap();
    let r = run(&mut c, &s, "true", None);
    assert_eq!(r["effects"]["project"]["confidence"], "complete", "{r}");
    assert_eq!(r["effects"]["project"]["changed"], json!([]), "{r}");
    let r = run(&mut c, &s, "echo mine > mine", None);
    assert_eq!(r["effects"]["project"]["confidence"], "partial", "{r}");
    assert!(reason(&r).contains(&format!("job {job} ")), "the job beside it is named: {r}");
    c.call("kill", json!({"session": s, "job": job})).unwrap();
}

#[test]
fn a_broken_index_gets_a_sentence() {
    let h = Heddle::start();
    let mut c = h.client();
    let (s, _) = repo_session(&h, &mut c, "repo", INIT);
    let r = run(&mut c, &s, "printf garbage > .git/index; echo x > f1", None);
    let p = &r["effects"]["project"];
    assert_eq!(p["confidence"], "none", "{r}");
    assert!(reason(&r).contains("could not be read") && reason(&r).contains("index"), "{r}");
    assert_eq!(p["changed"], json!([]), "{r}");
    // git's failure (exit 128) in words, never a Rust value; and the next job, whose "before" git cannot
    // read either, says so too and never that nothing changed.
    assert!(reason(&r).contains("exit status 128") && !reason(&r).contains("Code("), "{r}");
    let r = run(&mut c, &s, "echo y > f2", None);
    assert_eq!(r["effects"]["project"]["confidence"], "none", "{r}");
    assert!(reason(&r).contains("before the job could not be read") && !reason(&r).contains("Code("), "{r}");
    assert!(reason(&r).contains("exit status 128"), "{r}");
}

/// A second `sed -i` on a file the previous job made dirty: its "before" is that job's "after", which
/// must have kept the file's bytes, so the path is listed and the diff is of this job's change alone.
#[test]
fn a_second_sed_on_an_already_dirty_file_lists_it_and_keeps_its_diff() {
    let h = Heddle::start();
    let mut c = h.client();
    let (s, _) = repo_session(&h, &mut c, "repo", INIT);
    let r = run(&mut c, &s, "sed -i s/a/A/ f1", Some("diff"));
    assert_eq!(changed(&r), [("f1".into(), "modified".into())], "{r}");
    let r = run(&mut c, &s, "sed -i s/A/Z/ f1", Some("diff"));
    assert_eq!(changed(&r), [("f1".into(), "modified-again".into())], "{r}");
    let p = &r["effects"]["project"];
    assert_eq!(p["diff"], "--- a/f1\n+++ b/f1\n@@ -1 +1 @@\n-A\n+Z\n", "{r}");
    assert_eq!(p["confidence"], "complete", "{r}");
    assert!(p["before"].as_str().unwrap().contains("after of job"), "the last after was reused: {r}");
}

#[test]
fn a_failed_command_followed_by_others_is_warned() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let r = run(&mut c, &s, "cd /nowhere-at-all; echo went on\ntrue", None);
    let w = r["warnings"].as_array().unwrap_or_else(|| panic!("{r}"));
    assert_eq!(w.len(), 1, "{r}");
    let w = w[0].as_str().unwrap();
    assert!(
        w.starts_with("`cd /nowhere-at-all` failed with status 1")
            && w.contains("`echo went on`, `true` ran after it anyway"),
        "{r}"
    );
    assert_eq!(r["exit_code"], 0, "the status flow is the command's: {r}");
    // `&&` stops at the failure: nothing to warn of.
    let r = run(&mut c, &s, "cd /nowhere-at-all && echo never", None);
    assert_eq!(r["warnings"], json!([]), "{r}");
    // The text form shows the warning.
    let out = std::process::Command::new(heddle_tests::bin_dir().join("heddle"))
        .arg("--socket")
        .arg(&h.socket)
        .args(["run", "false; echo x"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("warning: `false` failed with status 1"), "{text}");
}

#[test]
fn a_dirty_file_edited_again_keeps_its_diff_among_many_untracked_files() {
    let h = Heddle::start();
    let mut c = h.client();
    let (s, _) = repo_session(&h, &mut c, "repo", INIT);
    // 70 untracked text files of 250,000 bytes (17.5 MB) that sort before the dirty file: more than the
    // bytes a snapshot keeps for diffs in all.
    let noise = "mkdir build && for i in $(seq 10 79); do head -c 250000 /dev/zero | tr '\\0' a > build/o$i; done";
    assert_eq!(run(&mut c, &s, noise, Some("none"))["exit_code"], 0);
    let r = run(&mut c, &s, "sed -i s/d/D/ dirty", Some("diff"));
    assert_eq!(changed(&r), [("dirty".into(), "modified-again".into())], "{r}");
    let diff = r["effects"]["project"]["diff"].as_str().unwrap_or_default();
    assert!(diff.contains("-d\n+D\n"), "the diff of the dirty file is shown: {r}");
    // An untracked file over the budget: its diff is not invented, and the reason is the real one.
    let r = run(&mut c, &s, "echo more >> build/o79", Some("diff"));
    assert_eq!(changed(&r), [("build/o79".into(), "modified-again".into())], "{r}");
    let diff = r["effects"]["project"]["diff"].as_str().unwrap_or_default();
    assert!(diff.contains("build/o79") && diff.contains("MiB"), "the budget is named: {r}");
}

#[test]
fn a_ledger_that_could_not_be_read_never_says_nothing_changed() {
    let h = Heddle::start();
    let mut c = h.client();
    let (_, repo) = repo_session(&h, &mut c, "repo", INIT);
    // The repository now belongs to another user than the jobs' uid: git refuses to read it.
    std::os::unix::fs::chown(&repo, Some(0), None).unwrap();
    let out = std::process::Command::new(heddle_tests::bin_dir().join("heddle"))
        .arg("--socket")
        .arg(&h.socket)
        .args(["--session", "text", "run", "echo more >> f1"])
        .current_dir(&repo)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("nothing changed"), "confidence none must not claim nothing changed: {text}");
    assert!(text.contains("effects: unknown"), "{text}");
    assert!(text.contains("dubious ownership"), "git's own line is the reason: {text}");
    assert!(!text.contains("Code("), "no Rust value in a sentence: {text}");
    assert!(text.contains("exit status 128"), "{text}");
}

/// Outside any repository the cwd is watched: what a job creates, modifies and deletes there is listed
/// (absolute paths), with the walk's bound; over the bound the part is partial and says where it stopped.
#[test]
fn a_job_outside_any_repo_lists_what_it_changed_in_its_cwd() {
    let h = Heddle::start();
    let mut c = h.client();
    let (s, dir) = repo_session(&h, &mut c, "plain", "");
    let r = run(&mut c, &s, "echo a > old && echo b > gone && mkdir sub", Some("none"));
    assert_eq!(r["exit_code"], 0, "{r}");
    let r = run(&mut c, &s, "echo more >> old && rm gone && echo new > sub/new && ln -s old link", None);
    let w = &r["effects"]["watched"];
    let dir = dir.display().to_string();
    let got: Vec<(String, String)> = w["changed"]
        .as_array()
        .unwrap_or_else(|| panic!("no watched part: {r}"))
        .iter()
        .map(|c| (c["path"].as_str().unwrap().replace(&dir, "."), c["change"].as_str().unwrap().to_owned()))
        .collect();
    let want = [("./gone", "deleted"), ("./link", "added"), ("./old", "modified"), ("./sub/new", "added")];
    assert_eq!(got, want.map(|(p, c)| (p.to_owned(), c.to_owned())), "{r}");
    assert_eq!(w["confidence"], "complete", "{r}");
    assert!(w["roots"].as_array().unwrap().contains(&json!(dir)), "{r}");
    let limit = c.call("describe", json!({})).unwrap()["effects"]["watched_entries_max"].as_u64().unwrap();
    assert_eq!(w["limit"].as_u64(), Some(limit), "the bound is the one describe states: {r}");
    // Nothing done: nothing listed, and said so.
    let r = run(&mut c, &s, "true", None);
    assert_eq!(r["effects"]["watched"]["changed"], json!([]), "{r}");
    // Past the bound: partial, with the reason, and nothing invented beyond it.
    let many = format!("mkdir many && (cd many && seq -w 1 {} | xargs touch)", limit + 10);
    assert_eq!(run(&mut c, &s, &many, Some("none"))["exit_code"], 0);
    let r = run(&mut c, &s, "echo x > aaa-first; echo y > many/zzz-past-the-bound", None);
    let w = &r["effects"]["watched"];
    assert_eq!(w["confidence"], "partial", "{r}");
    assert!(w["reason"].as_str().unwrap().contains(&format!("more than {limit} entries")), "{r}");
    let listed = w["changed"].to_string();
    assert!(listed.contains("aaa-first") && !listed.contains("zzz-past-the-bound"), "{r}");
    // Found over the bound, the paths are not walked again for a while: the part says so, costs
    // nothing, and lists nothing (not even a change it would have seen).
    let job = r["job"].as_u64().unwrap();
    let r = run(&mut c, &s, "echo again > aaa-first; mkdir small", None);
    let w = &r["effects"]["watched"];
    assert_eq!((w["confidence"].as_str(), w["cost_us"].as_u64()), (Some("none"), Some(0)), "{r}");
    let why = w["reason"].as_str().unwrap();
    assert!(why.contains(&format!("more than {limit} entries")) && why.contains(&format!("job {job}")), "{r}");
    assert_eq!(w["changed"], json!([]), "{r}");
    assert!(text_form(&r).contains("effects confidence none in "), "the text form says it: {}", text_form(&r));
    // A job in a smaller directory is walked and compared as before.
    let r = run(&mut c, &s, "cd small", Some("none"));
    assert_eq!(r["exit_code"], 0, "{r}");
    let r = run(&mut c, &s, "echo x > in-small", None);
    let w = &r["effects"]["watched"];
    assert_eq!(w["confidence"], "complete", "{r}");
    assert!(w["changed"].to_string().contains("small/in-small"), "{r}");
}

/// While inotify sees nothing change under the watched paths, a job walks them neither before nor
/// after (the part says so and costs nothing); a change by another process between jobs is not the
/// next job's, and the next write is listed again.
#[test]
fn watched_paths_that_nothing_touched_are_not_walked_again() {
    let h = Heddle::start();
    let mut c = h.client();
    let (s, dir) = repo_session(&h, &mut c, "quiet", "");
    assert_eq!(run(&mut c, &s, "echo a > kept", None)["exit_code"], 0);
    let r = run(&mut c, &s, "true", None);
    let w = &r["effects"]["watched"];
    assert_eq!(w["changed"], json!([]), "{r}");
    assert_eq!(w["cost_us"], 0, "no walk on either side: {r}");
    assert!(w["scope"].as_str().unwrap().contains("inotify"), "{r}");
    // Written between jobs by someone else: seen by the next "before", not blamed on the job.
    std::fs::write(dir.join("from-outside"), "x").unwrap();
    let r = run(&mut c, &s, "true", None);
    assert_eq!(r["effects"]["watched"]["changed"], json!([]), "{r}");
    // The job's own write is listed.
    let r = run(&mut c, &s, "echo b >> kept; mkdir d; echo n > d/new", None);
    let listed = r["effects"]["watched"]["changed"].to_string();
    let new_dir = json!({"path": dir.join("d").display().to_string(), "change": "added", "from": null, "under": 1});
    assert!(listed.contains("/kept") && r["effects"]["watched"]["changed"][0] == new_dir, "d/new folded into d: {r}");
    // A write into the directory made by the last job: its watch was placed.
    let r = run(&mut c, &s, "echo m >> d/new", None);
    let listed = r["effects"]["watched"]["changed"].to_string();
    assert!(listed.contains("/d/new") && listed.contains("modified"), "{r}");
}

/// The ledger looks where the command starts: after `cd repo` in a session opened above it, the next
/// job's project part is that repository's, and the directory the session was opened in is not walked.
#[test]
fn after_cd_into_a_repository_the_ledger_is_that_repositorys() {
    let h = Heddle::start();
    let mut c = h.client();
    let (s, outer) = repo_session(&h, &mut c, "outer", "mkdir repo");
    let r = run(&mut c, &s, &format!("cd repo && {INIT}"), Some("none"));
    assert_eq!(r["exit_code"], 0, "{r}");
    let r = run(&mut c, &s, "sed -i s/a/A/ f1", None);
    let repo = outer.join("repo").display().to_string();
    assert_eq!(r["effects"]["project"]["root"].as_str(), Some(repo.as_str()), "{r}");
    assert_eq!(changed(&r), [("f1".to_owned(), "modified".to_owned())], "{r}");
    let roots = r["effects"]["watched"]["roots"].to_string();
    assert!(!roots.contains(&format!("\"{}\"", outer.display())), "the opening cwd is not watched: {r}");
}

/// A path that leaves the status is named for what happened to it: committed (its bytes unchanged),
/// ignored (still there, matched by a new ignore rule), reverted (put back as git has it), deleted.
/// Until 2026-12-06 every untracked file a `git commit` took in was called `deleted`.
#[test]
fn paths_that_leave_the_status_are_committed_ignored_reverted_or_deleted() {
    let h = Heddle::start();
    let mut c = h.client();
    let (s, _) = repo_session(&h, &mut c, "leave", INIT);
    let setup =
        "echo new > new.txt && echo log > junk.log && echo gone > gone.txt && sed -i s/a/A/ f1 && sed -i s/b/B/ f2";
    assert_eq!(run(&mut c, &s, setup, Some("none"))["exit_code"], 0);
    let commit = "git add new.txt f1 && git -c user.email=t@t -c user.name=t -c maintenance.auto=false commit -qm two \
                  && echo '*.log' > .gitignore && git checkout -- f2 && rm gone.txt";
    let r = run(&mut c, &s, commit, Some("diff"));
    assert_eq!(r["exit_code"], 0, "{r}");
    let want = [
        (".gitignore", "untracked-new"),
        ("f1", "committed"),
        ("f2", "reverted"),
        ("gone.txt", "deleted"),
        ("junk.log", "ignored"),
        ("new.txt", "committed"),
    ];
    assert_eq!(changed(&r), want.map(|(p, c)| (p.to_owned(), c.to_owned())), "{r}");
    let diff = r["effects"]["project"]["diff"].as_str().unwrap_or_default();
    assert!(!diff.contains("new.txt") && !diff.contains("junk.log"), "kept bytes have no diff: {diff}");
}

/// The index moving is not the bytes changing: `git add` of new and edited files is `staged`, the commit
/// of what was staged in an earlier call is `committed` (it was `reverted`), `git restore --staged` is
/// `unstaged`, `git reset --hard` of a staged edit is `reverted`, and files rewritten with the bytes they
/// had (`git stash -u && git stash pop`) are no change.
#[test]
fn staging_unstaging_and_committing_in_separate_calls_are_named_as_such() {
    let h = Heddle::start();
    let mut c = h.client();
    let (s, _) = repo_session(&h, &mut c, "stage", INIT);
    let git = "git -c user.email=t@t -c user.name=t -c maintenance.auto=false";
    let setup = "echo new > new.txt && sed -i s/a/A/ f1 && sed -i s/b/B/ f2";
    assert_eq!(run(&mut c, &s, setup, Some("none"))["exit_code"], 0);
    let r = run(&mut c, &s, "git add -A", None);
    let want = [("dirty", "staged"), ("f1", "staged"), ("f2", "staged"), ("new.txt", "staged")];
    assert_eq!(changed(&r), want.map(|(p, c)| (p.to_owned(), c.to_owned())), "{r}");
    let r = run(&mut c, &s, "git restore --staged f2", None);
    assert_eq!(changed(&r), [("f2".to_owned(), "unstaged".to_owned())], "{r}");
    let r = run(&mut c, &s, &format!("{git} commit -qm staged"), None);
    let want = [("dirty", "committed"), ("f1", "committed"), ("new.txt", "committed")];
    assert_eq!(changed(&r), want.map(|(p, c)| (p.to_owned(), c.to_owned())), "{r}");
    let r = run(&mut c, &s, "echo loose > loose.txt && git stash -u -q && git stash pop -q", None);
    assert_eq!(r["exit_code"], 0, "{r}");
    assert_eq!(changed(&r), [("loose.txt".to_owned(), "untracked-new".to_owned())], "f2 kept its bytes: {r}");
    let r = run(&mut c, &s, "git add f2 && git reset -q --hard", None);
    assert_eq!(changed(&r), [("f2".to_owned(), "reverted".to_owned())], "{r}");
}

/// A job that moves `HEAD` says so, and names the paths that changed in the work tree with it, though
/// git status lists none of them before or after: a commit of a file the job wrote (it said "nothing
/// changed" until 2026-12-07), an empty commit, a checkout that brings files back and takes them away.
#[test]
fn a_job_that_moves_head_names_it_and_the_paths_that_came_with_it() {
    let h = Heddle::start();
    let mut c = h.client();
    let (s, _) = repo_session(&h, &mut c, "head", INIT);
    let git = "git -c user.email=t@t -c user.name=t -c maintenance.auto=false";
    let head =
        |r: &Value, end: &str| r["effects"]["project"]["head_moved"][end].as_str().unwrap_or_default().to_owned();
    let r = run(&mut c, &s, &format!("echo n > made.txt && git add made.txt && {git} commit -qm made"), None);
    assert_eq!(r["exit_code"], 0, "{r}");
    assert_eq!(changed(&r), [("made.txt".to_owned(), "added".to_owned())], "{r}");
    let (from, to) = (head(&r, "from"), head(&r, "to"));
    assert!(from.len() == 40 && to.len() == 40 && from != to, "{r}");
    assert!(
        text_form(&r).contains(&format!("effects: HEAD moved {} → {}", &from[..10], &to[..10])),
        "{}",
        text_form(&r)
    );
    assert_eq!(r["effects"]["project"]["confidence"], "complete", "{r}");

    let r = run(&mut c, &s, &format!("{git} commit -q --allow-empty -m empty"), None);
    assert_eq!(changed(&r), Vec::<(String, String)>::new(), "{r}");
    assert_eq!(head(&r, "from"), to, "{r}");
    assert!(text_form(&r).contains("no path differs from before"), "{}", text_form(&r));

    let r = run(&mut c, &s, "git checkout -q HEAD~2", None);
    assert_eq!(r["exit_code"], 0, "{r}");
    assert_eq!(changed(&r), [("made.txt".to_owned(), "deleted".to_owned())], "{r}");
    assert_eq!(head(&r, "to"), from, "back at the first commit: {r}");
    let r = run(&mut c, &s, "git checkout -q -", None);
    assert_eq!(changed(&r), [("made.txt".to_owned(), "added".to_owned())], "{r}");

    // A job that leaves HEAD where it was has no `head_moved`.
    let r = run(&mut c, &s, "echo x >> f3", None);
    assert!(r["effects"]["project"]["head_moved"].is_null(), "{r}");
    assert_eq!(changed(&r), [("f3".to_owned(), "modified".to_owned())], "{r}");
}

/// A branch switch at the same commit, a merge that stops on a conflict and its resolution: the ledger
/// names the branches, says the merge is under way (and how to finish or undo it), and calls the
/// resolved file `committed` (it said `reverted`, and said nothing of the branch or the merge).
#[test]
fn branches_a_merge_under_way_and_its_resolution_are_named() {
    let h = Heddle::start();
    let mut c = h.client();
    let (s, _) = repo_session(&h, &mut c, "merge", INIT);
    let git = "git -c user.email=t@t -c user.name=t -c maintenance.auto=false";
    let project = |r: &Value| r["effects"]["project"].clone();
    let r = run(&mut c, &s, "git checkout -q -b feat", None);
    let moved = &project(&r)["head_moved"];
    assert!(moved["from_branch"].is_string() && moved["to_branch"] == "feat", "{r}");
    assert_eq!(moved["from"], moved["to"], "the same commit: {r}");
    let text = text_form(&r);
    assert!(text.contains(" → feat at "), "{text}");
    let setup = format!(
        "{git} commit -qam dirty && printf 'x\\n' > f1 && {git} commit -qam feat \
         && git checkout -q - && printf 'y\\n' > f1 && {git} commit -qam other"
    );
    assert_eq!(run(&mut c, &s, &setup, Some("none"))["exit_code"], 0);
    let r = run(&mut c, &s, &format!("{git} merge feat"), None);
    assert_ne!(r["exit_code"], 0, "{r}");
    assert_eq!(project(&r)["in_progress"], "merge", "{r}");
    assert!(changed(&r).contains(&("f1".to_owned(), "conflicted".to_owned())), "{r}");
    let text = text_form(&r);
    assert!(text.contains("a merge is in progress: finish it (`git merge --continue`)"), "{text}");
    let r = run(&mut c, &s, &format!("printf 'z\\n' > f1 && git add f1 && {git} commit -qm merged"), None);
    assert_eq!(r["exit_code"], 0, "{r}");
    assert!(project(&r)["in_progress"].is_null(), "{r}");
    assert!(changed(&r).contains(&("f1".to_owned(), "committed".to_owned())), "resolved and committed: {r}");
}
