//! What a launched process inherits — and does not: fds, signal state, environment, cgroup.
//!
//! The cgroup tests need root and a cgroup v2 mount (CI runs as root); without root they fail with a
//! message saying so instead of skipping silently. They only touch cgroups they create, under
//! `/sys/fs/cgroup/unified/heddle-ltest-*` (hybrid hosts) or `/sys/fs/cgroup/heddle-ltest-*` (pure v2).

use launcher::{spawn, CloneStyle, Exit, LaunchError, Prepared, SpawnPath, Stdio};
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

/// Run `argv` with stdout captured; returns (status, stdout).
fn run(prepare: impl FnOnce(Stdio) -> Prepared) -> (Exit, String) {
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
    assert_eq!(st, Exit::Code(0));
    // ls itself holds one directory fd (3) while listing.
    assert_eq!(out.split_whitespace().collect::<Vec<_>>(), ["0", "1", "2", "3"], "{out}");
}

#[test]
fn signal_dispositions_and_mask_are_reset() {
    // The Rust runtime ignores SIGPIPE in this process; the job must see the default.
    let (st, out) = run(|s| Prepared::new(Path::new("/bin/cat"), &["cat", "/proc/self/status"], &[], None, s).unwrap());
    assert_eq!(st, Exit::Code(0));
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
    let (out, child) = cgroup_of_child_styled(cg, force_procs_write, false);
    (out, child.path)
}

fn cgroup_of_child_styled(cg: &TestCgroup, force_procs_write: bool, force_fork: bool) -> (String, launcher::Child) {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
    let stdio = Stdio::null_stdin(w.try_clone().unwrap(), w).unwrap();
    let mut p = Prepared::new(Path::new("/bin/cat"), &["cat", "/proc/self/cgroup"], &[], None, stdio)
        .unwrap()
        .with_cgroup(cg.fd());
    if force_procs_write {
        p = p.force_procs_write();
    }
    if force_fork {
        p = p.force_fork();
    }
    let child = spawn(&p).unwrap();
    drop(p);
    let mut out = String::new();
    std::fs::File::from(r).read_to_string(&mut out).unwrap();
    assert_eq!(child.wait().unwrap(), Exit::Code(0));
    (out, child)
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

#[test]
fn every_placement_works_vfork_style_and_fork_style() {
    let cg = TestCgroup::new("styles");
    for (procs, fork, path, style) in [
        (false, false, SpawnPath::Clone3IntoCgroup, CloneStyle::Vfork),
        (false, true, SpawnPath::Clone3IntoCgroup, CloneStyle::Fork),
        (true, false, SpawnPath::Clone3, CloneStyle::Vfork),
        (true, true, SpawnPath::Clone3, CloneStyle::Fork),
    ] {
        let (out, child) = cgroup_of_child_styled(&cg, procs, fork);
        assert_eq!(out.lines().find_map(|l| l.strip_prefix("0::")), Some(cg.relative().as_str()), "{procs} {fork}");
        assert_eq!((child.path, child.style), (path, style), "procs write {procs}, forced fork {fork}");
    }
    assert_eq!(launcher::clone_style(), CloneStyle::Vfork, "this x86_64 kernel takes CLONE_VM|CLONE_VFORK");
    let words = launcher::describe_spawn(SpawnPath::Clone3IntoCgroup, CloneStyle::Vfork, true);
    assert_eq!(words, "clone3 vfork-style (CLONE_VM|CLONE_VFORK), placed by CLONE_INTO_CGROUP");
    let words = launcher::describe_spawn(SpawnPath::Clone3, CloneStyle::Fork, true);
    assert_eq!(words, "clone3 fork-style, cgroup.procs fallback (the child writes cgroup.procs before exec)");
}

/// Spawn `true` with a null stdio, `adjust`ing the prepared job first.
fn spawn_true(adjust: impl FnOnce(Prepared) -> Prepared) -> Result<launcher::Child, LaunchError> {
    let null = std::fs::OpenOptions::new().write(true).open("/dev/null").unwrap();
    let stdio = Stdio::null_stdin(null.as_fd().try_clone_to_owned().unwrap(), null.into()).unwrap();
    spawn(&adjust(Prepared::new(Path::new("/bin/true"), &["true"], &[], None, stdio).unwrap()))
}

#[test]
fn vfork_style_child_failures_come_back_through_the_status_pipe() {
    let cg = TestCgroup::new("vfail");
    for fork in [false, true] {
        let style = |p: Prepared| if fork { p.force_fork() } else { p };
        let missing = spawn_true(|_| {
            let stdio = Stdio::null_stdin(p_null(), p_null()).unwrap();
            style(Prepared::new(Path::new("/nonexistent/heddle-prog"), &["x"], &[], None, stdio).unwrap())
        })
        .unwrap_err();
        assert!(
            matches!(&missing, LaunchError::Exec { source, .. } if source.raw_os_error() == Some(libc::ENOENT)),
            "{missing:?}"
        );
        let nodir = spawn_true(|_| {
            let stdio = Stdio::null_stdin(p_null(), p_null()).unwrap();
            style(
                Prepared::new(Path::new("/bin/true"), &["true"], &[], Some(Path::new("/nonexistent-h")), stdio)
                    .unwrap(),
            )
        })
        .unwrap_err();
        assert_eq!(nodir.to_string(), "cannot enter working directory /nonexistent-h");
        // Not a cgroup at all: the kernel refuses CLONE_INTO_CGROUP (EBADF), reported as a cgroup error.
        let tmp: OwnedFd = std::fs::File::open("/tmp").unwrap().into();
        let bad = spawn_true(|p| style(p.with_cgroup(tmp))).unwrap_err();
        assert_eq!(bad.to_string(), "cannot place the job process in its cgroup", "{bad:?}");
        // The child's own cgroup.procs write fails (the cgroup is gone): the stage comes back on the pipe.
        let gone = TestCgroup::new(if fork { "gone-f" } else { "gone-v" });
        let fd = gone.fd();
        std::fs::remove_dir(&gone.0).unwrap();
        let err = spawn_true(|p| style(p.with_cgroup(fd).force_procs_write())).unwrap_err();
        assert!(matches!(err, LaunchError::Cgroup(_)), "{err:?}");
    }
    // None of these failures turned the vfork-style path off, and the next spawn still uses it.
    assert_eq!(launcher::clone_style(), CloneStyle::Vfork);
    let child = spawn_true(|p| p.with_cgroup(cg.fd())).unwrap();
    assert_eq!((child.path, child.style), (SpawnPath::Clone3IntoCgroup, CloneStyle::Vfork));
    assert_eq!(child.wait().unwrap(), Exit::Code(0));
}

fn p_null() -> OwnedFd {
    std::fs::OpenOptions::new().write(true).open("/dev/null").unwrap().into()
}

#[test]
fn a_vfork_child_confines_only_itself() {
    // The child sets no_new_privs and restricts itself with Landlock; this test process must stay free.
    let dir = tempfile::tempdir().unwrap();
    let ruleset = launcher::landlock_rules::Ruleset::build(&[dir.path().to_path_buf()], true).unwrap();
    let rs = ruleset.fd.as_ref().expect("this kernel has Landlock");
    let (st, out) = run(|s| {
        let p = Prepared::new(
            Path::new("/bin/sh"),
            &["sh", "-c", "grep NoNewPrivs /proc/self/status; echo x > /var/tmp/heddle-ll-$$ || echo refused"],
            &[],
            None,
            s,
        )
        .unwrap();
        p.with_landlock(rs.as_fd()).unwrap()
    });
    assert_eq!(st, Exit::Code(0));
    assert!(out.starts_with("NoNewPrivs:\t1\n") && out.ends_with("refused\n"), "{out}");
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    assert!(status.contains("NoNewPrivs:\t0"), "the test process itself got no_new_privs");
    let probe = std::path::Path::new("/var/tmp").join(format!("heddle-ll-parent-{}", std::process::id()));
    std::fs::write(&probe, "x").expect("the test process itself was restricted by Landlock");
    std::fs::remove_file(&probe).unwrap();
}

#[test]
fn concurrent_vfork_spawns_from_many_threads_stay_correct() {
    // Each thread has its own child stack; allocating threads run while children share the memory.
    let threads: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                for i in 0..40 {
                    let junk: Vec<String> = (0..200).map(|k| format!("{t}-{i}-{k}")).collect();
                    let cmd = format!("echo {t}-{i}");
                    let (st, out) =
                        run(|s| Prepared::new(Path::new("/bin/sh"), &["sh", "-c", &cmd], &[], None, s).unwrap());
                    assert_eq!((st, out), (Exit::Code(0), format!("{t}-{i}\n")));
                    assert_eq!(junk[199], format!("{t}-{i}-199"));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}
