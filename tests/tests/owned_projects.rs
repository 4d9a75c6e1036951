//! Projects another uid owns (issue 20, item 3): with `heddle up --allow-owned-projects DIR`, a
//! root-opened session works in a root-owned project beneath DIR — no `chmod 777`, no job as root. Its
//! jobs see the project as their own uid's through an idmapped mount in the worker's mount namespace,
//! and what they write is stored as root's: nothing on disk carries the session's uid. Outside DIR, or
//! for a client that does not own the project, nothing is mapped. Through the real stack, as root.

use heddle_tests::{as_nobody, run_ok, run_to_end, Heddle};
use serde_json::json;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const RANGE: &str = "1879048192-1879113727";

/// A world-traversable directory of root's under /tmp (the jobs' uid must reach the project).
fn holder() -> tempfile::TempDir {
    let d = tempfile::Builder::new().prefix("heddle-owned-").tempdir_in("/tmp").unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

/// A root-owned git project (0755, files 0644) named `name` in `base`.
fn project(base: &Path, name: &str) -> PathBuf {
    let p = base.join(name);
    std::fs::create_dir(&p).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(p.join("a.txt"), "one\n").unwrap();
    let git = |args: &[&str]| {
        let st = Command::new("git").args(args).current_dir(&p).stdout(Stdio::null()).status().unwrap();
        assert!(st.success(), "git {args:?}");
    };
    git(&["init", "-q", "."]);
    git(&["add", "."]);
    git(&["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init"]);
    p
}

fn mounted(path: &Path) -> bool {
    let mi = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    mi.lines().any(|l| l.split(' ').nth(4) == Some(path.to_str().unwrap()))
}

#[test]
fn a_root_opened_session_writes_a_root_owned_project_as_its_own_uid_and_leaves_roots_files() {
    let base = holder();
    let proj = project(base.path(), "app");
    let h = Heddle::start_with(&["--session-uids", RANGE, "--allow-owned-projects", base.path().to_str().unwrap()]);
    let mut c = h.client();
    let r = c.call("session.open", json!({"name": "app", "cwd": proj})).unwrap();
    let uid = r["worker"]["uid"].as_u64().unwrap();
    assert_ne!(uid, 0, "{r}");
    let s = json!("app");

    // Inside: the project is the job uid's; it writes, creates and runs git there without complaint.
    let cmd = "id -u; stat -c %u a.txt; echo two >> a.txt && echo new > b.txt && mkdir -p d/e && echo x > d/e/f; \
               stat -c %u b.txt; git status --porcelain";
    let out = run_ok(&mut c, &s, cmd);
    let lines: Vec<&str> = out.lines().collect();
    let me = uid.to_string();
    assert_eq!(lines[..3], [me.as_str(), me.as_str(), me.as_str()], "{out}");
    assert_eq!(lines[3..], [" M a.txt", "?? b.txt", "?? d/"], "git reads the project as its own: {out}");

    // On disk: root's, every file; nothing carries the session's uid.
    assert_eq!(std::fs::read_to_string(proj.join("a.txt")).unwrap(), "one\ntwo\n");
    for f in ["a.txt", "b.txt", "d", "d/e", "d/e/f"] {
        let m = std::fs::metadata(proj.join(f)).unwrap();
        assert_eq!((m.uid(), m.gid()), (0, 0), "{f} is stored as the project owner's");
    }
    // No setuid file comes out of the mount (nosuid, and the jobs' seccomp refuses setid bits).
    let r = run_to_end(&mut c, &s, "cp /bin/true t && chmod u+s t");
    assert_ne!(r["exit_code"], 0, "{r}");
    assert_eq!(std::fs::metadata(proj.join("t")).unwrap().mode() & 0o6000, 0);
    // The mount lives in the worker's namespace only: the host's table is as it was.
    assert!(!mounted(&proj), "the mapped project is not mounted on the host");
}

#[test]
fn outside_the_allowed_dir_or_for_a_client_that_does_not_own_it_nothing_is_mapped() {
    let base = holder();
    let inside = project(base.path(), "app");
    let other = holder();
    let outside = project(other.path(), "app");
    let h = Heddle::start_with(&[
        "--session-uids",
        RANGE,
        "--socket-group",
        "65534",
        "--allow-owned-projects",
        base.path().to_str().unwrap(),
    ]);
    let mut c = h.client();
    // Root, outside the allowed dir: the project's own permissions hold.
    c.call("session.open", json!({"name": "out", "cwd": outside})).unwrap();
    let r = run_to_end(&mut c, &json!("out"), "echo x > b.txt");
    assert_ne!(r["exit_code"], 0, "{r}");
    assert!(!outside.join("b.txt").exists());
    // The same write in the allowed dir works (so the refusal above is the rule's, not the command's).
    c.call("session.open", json!({"name": "in", "cwd": inside})).unwrap();
    run_ok(&mut c, &json!("in"), "echo x > b.txt");
    assert!(inside.join("b.txt").exists());

    // A client that does not own the project (nobody, root's project beneath the allowed dir) gets
    // nothing mapped: its jobs run as nobody and cannot write root's files.
    let answers = as_nobody(
        &h,
        &[
            ("session.open", json!({"name": "theirs", "cwd": inside})),
            ("run", json!({"session": "theirs", "cmd": "id -u; echo y > c.txt", "yield_ms": 20_000})),
        ],
    );
    assert!(answers[0]["result"].is_object(), "nobody opens a session of its own: {answers:?}");
    let ran = &answers[1]["result"];
    assert_eq!(ran["state"], "exited", "{answers:?}");
    assert_ne!(ran["exit_code"], 0, "nobody's job must not write root's project: {answers:?}");
    assert!(!inside.join("c.txt").exists());
}
