//! What a launched process inherits — and does not: fds, signal state, environment, cgroup.
//!
//! The cgroup tests need root and a cgroup v2 mount (CI runs as root); without root they fail with a
//! message saying so instead of skipping silently. They only touch cgroups they create, under
//! `/sys/fs/cgroup/unified/heddle-ltest-*` (hybrid hosts) or `/sys/fs/cgroup/heddle-ltest-*` (pure v2).

use launcher::{spawn, ExitStatus, Prepared, SpawnPath, Stdio};
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

/// Run `argv` with stdout captured; returns (status, stdout).
fn run(prepare: impl FnOnce(Stdio) -> Prepared) -> (ExitStatus, String) {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
    let stdio = Stdio::null_stdin(w.try_clone().unwrap(), w).unwrap();
    let p = prepare(stdio);
    let child = spawn(&p).unwrap();
    drop(p);
    let mut out = String::new();
    std::fs::File::from(r).read_to_string(&mut out).unwrap();
    (child.wait().unwrap(), out)
}

#[test]
fn no_fd_beyond_stdio_is_inherited() {
    // An fd opened without O_CLOEXEC would leak into a plain fork+exec.
    let leaky: OwnedFd =
        nix::fcntl::open("/dev/null", nix::fcntl::OFlag::O_RDONLY, nix::sys::stat::Mode::empty()).unwrap();
    let (st, out) = run(|s| Prepared::new(Path::new("/bin/ls"), &["ls", "/proc/self/fd"], &[], None, s).unwrap());
    drop(leaky);
    assert_eq!(st, ExitStatus::Exited(0));
    // ls itself holds one directory fd (3) while listing.
    assert_eq!(out.split_whitespace().collect::<Vec<_>>(), ["0", "1", "2", "3"], "{out}");
}

#[test]
fn signal_dispositions_and_mask_are_reset() {
    // The Rust runtime ignores SIGPIPE in this process; the job must see the default.
    let (st, out) = run(|s| Prepared::new(Path::new("/bin/cat"), &["cat", "/proc/self/status"], &[], None, s).unwrap());
    assert_eq!(st, ExitStatus::Exited(0));
    let field = |name: &str| out.lines().find_map(|l| l.strip_prefix(name)).map(str::trim).unwrap().to_string();
    assert_eq!(field("SigIgn:"), "0000000000000000");
    assert_eq!(field("SigBlk:"), "0000000000000000");
}

#[test]
fn environment_is_exactly_what_was_prepared() {
    let env = vec![("A".to_string(), "1".to_string()), ("B".to_string(), "two words".to_string())];
    let (_, out) = run(|s| Prepared::new(Path::new("/usr/bin/env"), &["env"], &env, None, s).unwrap());
    assert_eq!(out, "A=1\nB=two words\n");
}

#[test]
fn heddle_launch_runs_the_command_with_the_job_environment() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_heddle-launch"))
        .args(["--cwd", "/tmp", "--", "sh", "-c", "pwd; echo $TERM $PAGER ${SECRET_TOKEN:-unset}; cat; exit 3"])
        .env("SECRET_TOKEN", "s3cr3t")
        .stdin(std::process::Stdio::piped()) // never read: the command's stdin is /dev/null
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "/tmp\ndumb cat unset\n");
    assert_eq!(out.status.code(), Some(3));
}

#[test]
fn heddle_launch_reports_signals_and_failures_like_a_shell() {
    let bin = env!("CARGO_BIN_EXE_heddle-launch");
    let st = std::process::Command::new(bin).args(["--", "sh", "-c", "kill -TERM $$"]).status().unwrap();
    assert_eq!(st.code(), Some(128 + 15));
    let out = std::process::Command::new(bin).args(["--", "no-such-command-heddle"]).output().unwrap();
    assert_eq!(out.status.code(), Some(127));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no-such-command-heddle: command not found"));
}

/// A cgroup v2 directory created for one test, killed and removed on drop.
struct TestCgroup(PathBuf);

impl TestCgroup {
    fn new(tag: &str) -> TestCgroup {
        assert!(
            nix::unistd::geteuid().is_root(),
            "this test needs root (it creates a cgroup); run it as root, as CI does"
        );
        let base = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
            .into_iter()
            .map(Path::new)
            .find(|p| p.join("cgroup.procs").exists() && p.join("cgroup.subtree_control").exists())
            .expect("no cgroup v2 mount found at /sys/fs/cgroup/unified or /sys/fs/cgroup");
        let dir = base.join(format!("heddle-ltest-{}-{tag}", std::process::id()));
        std::fs::create_dir(&dir).unwrap();
        TestCgroup(dir)
    }

    fn fd(&self) -> OwnedFd {
        std::fs::File::open(&self.0).unwrap().into()
    }

    fn relative(&self) -> String {
        format!("/{}", self.0.file_name().unwrap().to_string_lossy())
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let _ = std::fs::write(self.0.join("cgroup.kill"), "1");
        for _ in 0..200 {
            match std::fs::remove_dir(&self.0) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {}
                _ => return,
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

fn cgroup_of_child(cg: &TestCgroup, force_procs_write: bool) -> (String, SpawnPath) {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
    let stdio = Stdio::null_stdin(w.try_clone().unwrap(), w).unwrap();
    let mut p = Prepared::new(Path::new("/bin/cat"), &["cat", "/proc/self/cgroup"], &[], None, stdio)
        .unwrap()
        .with_cgroup(cg.fd());
    if force_procs_write {
        p = p.force_procs_write();
    }
    let child = spawn(&p).unwrap();
    drop(p);
    let mut out = String::new();
    std::fs::File::from(r).read_to_string(&mut out).unwrap();
    assert_eq!(child.wait().unwrap(), ExitStatus::Exited(0));
    (out, child.path)
}

#[test]
fn clone_into_cgroup_places_the_child_in_its_cgroup() {
    let cg = TestCgroup::new("into");
    let (out, path) = cgroup_of_child(&cg, false);
    let v2 = out.lines().find_map(|l| l.strip_prefix("0::")).unwrap();
    assert_eq!(v2, cg.relative());
    assert_eq!(path, SpawnPath::Clone3IntoCgroup, "this kernel supports CLONE_INTO_CGROUP");
    assert_eq!(launcher::cgroup_spawn_path(), Some(SpawnPath::Clone3IntoCgroup));
}

#[test]
fn procs_write_fallback_places_the_child_in_its_cgroup() {
    let cg = TestCgroup::new("procs");
    let (out, path) = cgroup_of_child(&cg, true);
    let v2 = out.lines().find_map(|l| l.strip_prefix("0::")).unwrap();
    assert_eq!(v2, cg.relative());
    assert_eq!(path, SpawnPath::Clone3);
}

#[test]
fn a_cgroup_that_refuses_the_process_is_a_cgroup_error() {
    // A removed cgroup directory (still open) cannot take processes: clone3 fails with ENODEV.
    let cg = TestCgroup::new("gone");
    let fd = cg.fd();
    std::fs::remove_dir(&cg.0).unwrap();
    let null = std::fs::OpenOptions::new().write(true).open("/dev/null").unwrap();
    let stdio = Stdio::null_stdin(null.as_fd().try_clone_to_owned().unwrap(), null.into()).unwrap();
    let p = Prepared::new(Path::new("/bin/true"), &["true"], &[], None, stdio).unwrap().with_cgroup(fd);
    let err = spawn(&p).unwrap_err();
    assert_eq!(err.to_string(), "cannot place the job process in its cgroup");
    let forced = spawn(&p.force_procs_write()).unwrap_err();
    assert_eq!(forced.to_string(), "cannot place the job process in its cgroup");
}

#[test]
fn heddle_launch_starts_the_command_in_the_given_cgroup() {
    let cg = TestCgroup::new("cli");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_heddle-launch"))
        .arg("--cgroup")
        .arg(&cg.0)
        .args(["--", "cat", "/proc/self/cgroup"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.lines().find_map(|l| l.strip_prefix("0::")), Some(cg.relative().as_str()));
}
