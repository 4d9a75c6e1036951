//! `heddle up --delegated` (issue 28, the service unit): started, as systemd starts a unit with
//! `Delegate=yes`, inside a cgroup of its own, the supervisor moves every process of that cgroup (itself
//! and `heddle up`) into its `supervisor` leaf, so the delegated cgroup holds no process and can hand the
//! memory/pids controllers down (cgroup v2's no-internal-process rule). A test cgroup of ours stands in for
//! the unit's.

use heddle_tests::{bin_dir, cgroup2_mount, eventually, pids_of, remove_cgroup_tree, require_root, Client};
use serde_json::json;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

/// A `heddle up --delegated` started inside `unit` (a cgroup this test made); stopped and removed on drop.
struct Unit {
    up: Child,
    unit: PathBuf,
    root: PathBuf,
    socket: PathBuf,
    _dir: tempfile::TempDir,
    project: PathBuf,
}

impl Unit {
    fn start() -> Unit {
        require_root();
        let dir = tempfile::Builder::new().prefix("heddle-e2e-unit-").tempdir_in("/tmp").unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let project = dir.path().join("project");
        std::fs::create_dir(&project).unwrap();
        std::fs::set_permissions(&project, std::fs::Permissions::from_mode(0o777)).unwrap();
        let unit = cgroup2_mount().join(format!("heddle-e2e-unit-{}", std::process::id()));
        std::fs::create_dir(&unit).expect("create the stand-in unit cgroup");
        // A root named for this test (not the default `<unit>/heddle`), so its v1 directories and temp
        // dirs (named after the root) cannot meet a real server's on this host.
        let root = unit.join(format!("heddle-e2e-unit-root-{}", std::process::id()));
        let socket = dir.path().join("run/heddle.sock");
        // The shell joins the unit's cgroup and execs `heddle up`: the test runner itself stays where it is.
        let up = Command::new("sh")
            .arg("-c")
            .arg(r#"echo $$ > "$1/cgroup.procs" && shift && exec "$@""#)
            .arg("sh")
            .arg(&unit)
            .arg(bin_dir().join("heddle"))
            .args(["up", "--delegated", "--socket"])
            .arg(&socket)
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .arg("--cgroup-root")
            .arg(&root)
            .env_remove("HEDDLE_SOCKET")
            .spawn()
            .expect("spawn heddle up");
        let mut u = Unit { up, unit, root, socket, _dir: dir, project };
        let answered = eventually(Duration::from_secs(20), || {
            if let Ok(Some(st)) = u.up.try_wait() {
                panic!("heddle up --delegated exited early with {st}");
            }
            Client::connect(&u.socket).is_ok_and(|mut c| c.call("describe", json!({})).is_ok())
        });
        assert!(answered, "heddle up --delegated did not answer at {} within 20 s", u.socket.display());
        u
    }
}

impl Drop for Unit {
    fn drop(&mut self) {
        // Our own child, by the pid we spawned.
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(self.up.id()).expect("a pid fits in i32")),
            nix::sys::signal::SIGTERM,
        );
        let _ = eventually(Duration::from_secs(20), || self.up.try_wait().ok().flatten().is_some());
        let _ = self.up.kill();
        let _ = self.up.wait();
        remove_cgroup_tree(&self.unit);
        if let Some(name) = self.root.file_name() {
            let _ =
                std::fs::remove_dir_all(std::env::temp_dir().join(format!("heddle-homes-{}", name.to_string_lossy())));
            for c in ["memory", "pids"] {
                let _ = std::fs::remove_dir(Path::new("/sys/fs/cgroup").join(c).join(name));
            }
        }
    }
}

#[test]
fn a_delegated_start_leaves_no_process_in_the_units_cgroup() {
    let u = Unit::start();
    let leaf = u.unit.join("supervisor");
    assert_eq!(pids_of(&u.unit), Vec::<u32>::new(), "the unit's own cgroup must hold no process once started");
    let in_leaf = pids_of(&leaf);
    assert!(in_leaf.contains(&u.up.id()), "heddle up ({}) is in the leaf: {in_leaf:?}", u.up.id());
    // heddle up, the supervisor and the front.
    assert!(in_leaf.len() >= 3, "the supervisor and the front are in the leaf too: {in_leaf:?}");
    // Sessions still go under the cgroup root, beside the leaf, not in it.
    let mut c = Client::connect(&u.socket).unwrap();
    let s = c.call("session.open", json!({"cwd": u.project})).unwrap()["session"].clone();
    let r = c.call("run", json!({"session": s, "cmd": "cat /proc/self/cgroup"})).unwrap();
    assert_eq!(r["exit_code"], 0, "{r}");
    let out = heddle_tests::stream_text(&mut c, &s, &r["job"], "stdout");
    let root_name = u.root.file_name().unwrap().to_string_lossy().into_owned();
    assert!(out.contains(&format!("/{root_name}/session-")), "the job runs under the cgroup root: {out}");
    // Where the host hands the unit memory/pids (pure v2), they are enabled for its children; a hybrid
    // host's v2 hierarchy has no controllers to hand down.
    let offered = std::fs::read_to_string(u.unit.join("cgroup.controllers")).unwrap();
    let enabled = std::fs::read_to_string(u.unit.join("cgroup.subtree_control")).unwrap();
    for ctl in ["memory", "pids"].into_iter().filter(|c| offered.split_whitespace().any(|o| o == *c)) {
        assert!(enabled.split_whitespace().any(|e| e == ctl), "{ctl} is offered but not enabled: {enabled:?}");
    }
    assert!(eventually(Duration::from_secs(5), || pids_of(&u.unit).is_empty()));
}
