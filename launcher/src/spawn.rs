//! Spawning a [`Prepared`] job: clone (into its cgroup), the child's ordered steps, exec, and an exact
//! report of what failed.
//!
//! Paths, tried in this order and remembered per process once one is found unsupported:
//!
//! 1. `clone3(CLONE_PIDFD | CLONE_INTO_CGROUP)` when a cgroup is given: the kernel places the child, so no
//!    instruction of the job ever runs outside its cgroup.
//! 2. `clone3(CLONE_PIDFD)` when the kernel refuses `CLONE_INTO_CGROUP` (`EINVAL`/`ENOSYS`, Linux < 5.7):
//!    the child writes `0` to the cgroup's `cgroup.procs` as its very first step.
//! 3. Legacy `clone(CLONE_PIDFD)` when `clone3` itself is `ENOSYS` (Linux < 5.3, or a container runtime's
//!    seccomp profile that hides `clone3`), again with the `cgroup.procs` write.
//!
//! [`cgroup_spawn_path`] tells which path this process uses for jobs with a cgroup; each [`Child`] also
//! carries the path it was created by.
//!
//! A failure in the child (cgroup placement, stdio, `chdir`, `execve`) comes back through a close-on-exec
//! status pipe: the parent reads 0 bytes when `execve` succeeded, else the stage and errno, reaps the child
//! and returns a [`LaunchError`] naming the stage and the path, e.g. "cannot enter working directory /x"
//! caused by "Permission denied (os error 13)".

use crate::prepare::Prepared;
pub use crate::sys::Exit;
use crate::sys::{self, ChildPlan, CloneMode, SeccompProg, Stage};
use nix::errno::Errno;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, Ordering};

/// Errors spawning a job. Each names the step that failed; the OS error is the source.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchError {
    #[error("cannot create the exec status pipe")]
    StatusPipe(#[source] io::Error),
    #[error("cannot create the job process")]
    Clone(#[source] io::Error),
    #[error("cannot place the job process in its cgroup")]
    Cgroup(#[source] io::Error),
    #[error("cannot set up the job's stdin, stdout and stderr")]
    Stdio(#[source] io::Error),
    #[error("cannot enter working directory {}", .path.display())]
    Chdir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot execute {}", .program.display())]
    Exec {
        program: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("the job process sent a malformed exec status ({0} bytes)")]
    BadStatus(usize),
    #[error("cannot set no_new_privs for the job")]
    NoNewPrivs(#[source] io::Error),
    #[error("cannot restrict the job with its Landlock ruleset")]
    Landlock(#[source] io::Error),
    #[error("cannot install the job's own seccomp filter")]
    Seccomp(#[source] io::Error),
    #[error("the job's seccomp filter has {0} instructions, more than the kernel takes")]
    SeccompTooLong(usize),
}

/// How a child was created and placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SpawnPath {
    /// `clone3(CLONE_PIDFD | CLONE_INTO_CGROUP)`: placed by the kernel at creation.
    Clone3IntoCgroup,
    /// `clone3(CLONE_PIDFD)`; with a cgroup, the child wrote `0` to its `cgroup.procs` first.
    Clone3,
    /// Legacy `clone(CLONE_PIDFD)`; with a cgroup, the child wrote `0` to its `cgroup.procs` first.
    LegacyClone,
}

/// How the child's memory was set up between the clone and its `execve`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CloneStyle {
    /// `CLONE_VM | CLONE_VFORK` on a dedicated stack: nothing of the parent is copied, the parent's
    /// thread sleeps until the child exec'd (as `posix_spawn` does).
    Vfork,
    /// A private copy of the parent's memory (page tables copied, pages copy-on-write), like `fork()`.
    Fork,
}

/// A running (or exited, not yet reaped) job process.
#[derive(Debug)]
pub struct Child {
    pub pid: u32,
    /// Close-on-exec pidfd: readable once the process has exited; reap with [`Child::try_wait`].
    pub pidfd: OwnedFd,
    pub path: SpawnPath,
    pub style: CloneStyle,
}

/// The spawn path in words, as `describe` shows it: the clone used, its style, and how the child reached
/// its cgroup (`None` for a child started without one).
pub fn describe_spawn(path: SpawnPath, style: CloneStyle, cgroup: bool) -> String {
    let clone = match (path, style) {
        (SpawnPath::LegacyClone, _) => "legacy clone, fork-style",
        (_, CloneStyle::Vfork) => "clone3 vfork-style (CLONE_VM|CLONE_VFORK)",
        (_, CloneStyle::Fork) => "clone3 fork-style",
    };
    let placement = match (path, cgroup) {
        (_, false) => "no job cgroup",
        (SpawnPath::Clone3IntoCgroup, true) => "placed by CLONE_INTO_CGROUP",
        (_, true) => "cgroup.procs fallback (the child writes cgroup.procs before exec)",
    };
    format!("{clone}, {placement}")
}

impl Child {
    /// [`describe_spawn`] for this child, which was started with a cgroup when `cgroup` is true.
    pub fn describe_spawn(&self, cgroup: bool) -> String {
        describe_spawn(self.path, self.style, cgroup)
    }
}

impl Child {
    /// Reap the process if it has exited (`waitid(P_PIDFD, …, WEXITED | WNOHANG)`); `None` while it runs.
    pub fn try_wait(&self) -> io::Result<Option<Exit>> {
        sys::wait_pidfd(self.pidfd.as_fd(), true)
    }

    /// Block until the process exits and reap it.
    pub fn wait(&self) -> io::Result<Exit> {
        sys::wait_pidfd(self.pidfd.as_fd(), false)?.ok_or_else(|| io::Error::other("waitid returned no child"))
    }
}

const UNKNOWN: u8 = 0;
const SUPPORTED: u8 = 1;
const UNSUPPORTED: u8 = 2;
/// Whether `CLONE_INTO_CGROUP` works on this kernel.
static INTO_CGROUP: AtomicU8 = AtomicU8::new(UNKNOWN);
/// Whether `clone3` works at all here.
static CLONE3: AtomicU8 = AtomicU8::new(UNKNOWN);
/// Whether the vfork-style `clone3` works here.
static VFORK: AtomicU8 = AtomicU8::new(UNKNOWN);

/// The clone style this process uses for `clone3` spawns: vfork-style unless this build has no trampoline
/// for the architecture or the kernel refused it once.
pub fn clone_style() -> CloneStyle {
    if sys::VFORK_BUILT && VFORK.load(Ordering::Relaxed) != UNSUPPORTED {
        CloneStyle::Vfork
    } else {
        CloneStyle::Fork
    }
}

/// The path this process uses for jobs that have a cgroup; `None` until one such job was spawned.
pub fn cgroup_spawn_path() -> Option<SpawnPath> {
    if CLONE3.load(Ordering::Relaxed) == UNSUPPORTED {
        return Some(SpawnPath::LegacyClone);
    }
    match INTO_CGROUP.load(Ordering::Relaxed) {
        SUPPORTED => Some(SpawnPath::Clone3IntoCgroup),
        UNSUPPORTED => Some(SpawnPath::Clone3),
        _ => None,
    }
}

fn first_path(p: &Prepared) -> SpawnPath {
    if CLONE3.load(Ordering::Relaxed) == UNSUPPORTED {
        SpawnPath::LegacyClone
    } else if p.cgroup.is_some() && !p.force_procs_write && INTO_CGROUP.load(Ordering::Relaxed) != UNSUPPORTED {
        SpawnPath::Clone3IntoCgroup
    } else {
        SpawnPath::Clone3
    }
}

/// Spawn the prepared job. Returns once the child has `execve`d (or failed to).
pub fn spawn(p: &Prepared) -> Result<Child, LaunchError> {
    let (status_r, status_w) = status_pipe().map_err(LaunchError::StatusPipe)?;
    let max_fd = sys::max_fd();
    let seccomp = match &p.seccomp {
        Some(prog) => Some(SeccompProg::new(prog).ok_or(LaunchError::SeccompTooLong(prog.len()))?),
        None => None,
    };
    let mut path = first_path(p);
    let mut vfork = clone_style() == CloneStyle::Vfork && path != SpawnPath::LegacyClone && !p.force_fork;
    let mut vfork_refused_on = None;
    let mut procs: Option<OwnedFd> = None;
    let (pid, pidfd) = loop {
        if path != SpawnPath::Clone3IntoCgroup && procs.is_none() {
            if let Some(dir) = &p.cgroup {
                procs = Some(open_procs(dir.as_fd()).map_err(LaunchError::Cgroup)?);
            }
        }
        let plan = plan(p, status_w.as_fd(), procs.as_ref().map(|f| f.as_fd()), max_fd, seccomp);
        let mode = match (path, &p.cgroup) {
            (SpawnPath::Clone3IntoCgroup, Some(dir)) => CloneMode::IntoCgroup(dir.as_fd()),
            (SpawnPath::LegacyClone, _) => CloneMode::LegacyClone,
            _ => CloneMode::Clone3,
        };
        match sys::clone_exec(&plan, mode, vfork) {
            Ok(child) => break child,
            Err(Errno::EINVAL | Errno::ENOSYS) if vfork => {
                // Retry fork-style on the same path; only a success there proves vfork was the problem.
                vfork_refused_on = Some(path);
                vfork = false;
            }
            Err(Errno::EINVAL | Errno::ENOSYS) if path == SpawnPath::Clone3IntoCgroup => {
                INTO_CGROUP.store(UNSUPPORTED, Ordering::Relaxed);
                path = SpawnPath::Clone3;
            }
            Err(Errno::ENOSYS) if path == SpawnPath::Clone3 => {
                CLONE3.store(UNSUPPORTED, Ordering::Relaxed);
                path = SpawnPath::LegacyClone;
            }
            Err(e @ (Errno::EAGAIN | Errno::ENOMEM | Errno::EINTR)) => return Err(LaunchError::Clone(e.into())),
            Err(e) if path == SpawnPath::Clone3IntoCgroup => return Err(LaunchError::Cgroup(e.into())),
            Err(e) => return Err(LaunchError::Clone(e.into())),
        }
    };
    remember(path, vfork, vfork_refused_on);
    drop(status_w);
    let style = if vfork { CloneStyle::Vfork } else { CloneStyle::Fork };
    let child = Child { pid, pidfd, path, style };
    match read_status(status_r.as_fd()) {
        Ok(None) => Ok(child),
        Ok(Some(err)) => {
            let _ = child.wait();
            Err(describe_failure(p, err))
        }
        Err(e) => {
            let _ = child.wait();
            Err(e)
        }
    }
}

/// Remember what this spawn proved about the kernel: `path` and the clone style worked, and a vfork-style
/// clone refused on the very path that then worked fork-style is not supported.
fn remember(path: SpawnPath, vfork: bool, vfork_refused_on: Option<SpawnPath>) {
    if path == SpawnPath::Clone3IntoCgroup {
        INTO_CGROUP.store(SUPPORTED, Ordering::Relaxed);
    }
    if vfork {
        VFORK.store(SUPPORTED, Ordering::Relaxed);
    } else if vfork_refused_on == Some(path) {
        VFORK.store(UNSUPPORTED, Ordering::Relaxed);
    }
}

fn plan<'a>(
    p: &'a Prepared,
    status: BorrowedFd<'a>,
    procs: Option<BorrowedFd<'a>>,
    max_fd: i32,
    seccomp: Option<SeccompProg<'a>>,
) -> ChildPlan<'a> {
    ChildPlan {
        program: &p.program,
        argv: &p.argv,
        envp: &p.envp,
        cwd: p.cwd.as_ref().map(|(c, _)| c.as_c_str()),
        stdin: p.stdio.stdin.as_fd(),
        stdout: p.stdio.stdout.as_fd(),
        stderr: p.stdio.stderr.as_fd(),
        status,
        procs,
        max_fd,
        extra: p.extra.as_ref().map(|(fd, target)| (fd.as_fd(), *target)),
        no_new_privs: p.no_new_privs,
        landlock: p.landlock.as_ref().map(|f| f.as_fd()),
        seccomp,
    }
}

/// A close-on-exec pipe whose write end is numbered ≥ 3 (the child moves it to 3).
fn status_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let w = if std::os::fd::AsRawFd::as_raw_fd(&w) < 3 { sys::dup_at_least(w.as_fd(), 3)? } else { w };
    Ok((r, w))
}

fn open_procs(dir: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    use nix::fcntl::{openat, OFlag};
    Ok(openat(dir, "cgroup.procs", OFlag::O_WRONLY | OFlag::O_CLOEXEC, nix::sys::stat::Mode::empty())?)
}

/// A stage and errno reported by the child.
struct ChildFailure {
    stage: Option<Stage>,
    errno: i32,
}

/// Read the status pipe to end of file: `None` when the child exec'd (or died) without reporting.
fn read_status(r: BorrowedFd<'_>) -> Result<Option<ChildFailure>, LaunchError> {
    let mut buf = [0u8; sys::STATUS_LEN];
    let mut got = 0;
    while got < buf.len() {
        match nix::unistd::read(r, &mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(LaunchError::StatusPipe(e.into())),
        }
    }
    match got {
        0 => Ok(None),
        sys::STATUS_LEN => {
            let (stage, errno) = buf.split_at(4);
            let stage = Stage::from_u32(u32::from_le_bytes(stage.try_into().unwrap_or_default()));
            let errno = i32::from_le_bytes(errno.try_into().unwrap_or_default());
            Ok(Some(ChildFailure { stage, errno }))
        }
        n => Err(LaunchError::BadStatus(n)),
    }
}

fn describe_failure(p: &Prepared, f: ChildFailure) -> LaunchError {
    let source = io::Error::from_raw_os_error(f.errno);
    match f.stage {
        Some(Stage::Cgroup) => LaunchError::Cgroup(source),
        Some(Stage::Stdio) => LaunchError::Stdio(source),
        Some(Stage::Chdir) => {
            LaunchError::Chdir { path: p.cwd.as_ref().map(|(_, path)| path.clone()).unwrap_or_default(), source }
        }
        Some(Stage::Exec) => LaunchError::Exec { program: p.program_path.clone(), source },
        Some(Stage::NoNewPrivs) => LaunchError::NoNewPrivs(source),
        Some(Stage::Landlock) => LaunchError::Landlock(source),
        Some(Stage::Seccomp) => LaunchError::Seccomp(source),
        None => LaunchError::BadStatus(sys::STATUS_LEN),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prepare::Stdio;
    use std::io::Read;
    use std::path::Path;

    fn capture(cmd: &str, env: &[(String, String)], cwd: Option<&Path>) -> (Result<Child, LaunchError>, String) {
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let stdio = Stdio::null_stdin(w.try_clone().unwrap(), w).unwrap();
        let p = Prepared::bash(cmd, env, cwd, stdio).unwrap();
        let child = spawn(&p);
        drop(p);
        let mut out = String::new();
        std::fs::File::from(r).read_to_string(&mut out).unwrap();
        (child, out)
    }

    #[test]
    fn runs_bash_with_the_given_env_cwd_and_exit_code() {
        let env = vec![("FOO".to_string(), "bar".to_string())];
        let (child, out) = capture("echo $FOO; pwd; echo err >&2; exit 3", &env, Some(Path::new("/tmp")));
        let child = child.unwrap();
        assert_eq!(out, "bar\n/tmp\nerr\n");
        assert_eq!(child.wait().unwrap(), Exit::Code(3));
        assert_eq!(child.path, SpawnPath::Clone3);
    }

    #[test]
    fn missing_cwd_is_a_precise_error() {
        let (child, out) = capture("true", &[], Some(Path::new("/nonexistent-heddle-dir")));
        let err = child.unwrap_err();
        assert_eq!(err.to_string(), "cannot enter working directory /nonexistent-heddle-dir");
        let src = std::error::Error::source(&err).unwrap().to_string();
        assert!(src.starts_with("No such file or directory"), "{src}");
        assert_eq!(out, "");
    }

    #[test]
    fn missing_program_is_a_precise_error() {
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let stdio = Stdio::null_stdin(w.try_clone().unwrap(), w).unwrap();
        let p = Prepared::new(Path::new("/nonexistent/prog"), &["prog"], &[], None, stdio).unwrap();
        let err = spawn(&p).unwrap_err();
        assert!(matches!(&err, LaunchError::Exec { source, .. } if source.raw_os_error() == Some(libc::ENOENT)));
        assert_eq!(err.to_string(), "cannot execute /nonexistent/prog");
        drop((p, r));
    }

    #[test]
    fn signal_ends_are_reported_as_signals() {
        let (child, _) = capture("kill -TERM $$", &[], None);
        let st = child.unwrap().wait().unwrap();
        assert_eq!(st, Exit::Signal(libc::SIGTERM));
        assert_eq!(st.shell_code(), 128 + libc::SIGTERM);
    }

    #[test]
    fn try_wait_is_none_while_running_and_reaps_after() {
        let (stdin_r, stdin_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let null = std::fs::OpenOptions::new().write(true).open("/dev/null").unwrap();
        let stdio = Stdio { stdin: stdin_r, stdout: null.try_clone().unwrap().into(), stderr: null.into() };
        let p = Prepared::bash("read x; exit 4", &[], None, stdio).unwrap();
        let child = spawn(&p).unwrap();
        drop(p);
        assert_eq!(child.try_wait().unwrap(), None, "bash waits for a line on stdin");
        drop(stdin_w);
        assert_eq!(child.wait().unwrap(), Exit::Code(4));
    }

    #[test]
    fn an_extra_fd_arrives_at_its_number_and_nothing_else_leaks() {
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let (sr, sw) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let stdio = Stdio::null_stdin(w.try_clone().unwrap(), w).unwrap();
        let cmd = "echo state >&7; ls /proc/self/fd | sort -n | tr '\\n' ' '";
        let p = Prepared::bash(cmd, &[], None, stdio).unwrap().with_extra_fd(sw, 7).unwrap();
        let child = spawn(&p).unwrap();
        drop(p);
        let (mut out, mut state) = (String::new(), String::new());
        std::fs::File::from(r).read_to_string(&mut out).unwrap();
        std::fs::File::from(sr).read_to_string(&mut state).unwrap();
        assert_eq!(child.wait().unwrap(), Exit::Code(0));
        assert_eq!(state, "state\n");
        assert_eq!(out, "0 1 2 3 7 ", "ls's own directory fd is 3; only 7 is inherited");
    }

    #[test]
    fn stdin_is_dev_null_so_reads_fail_at_once() {
        let (child, out) = capture("read x; echo rc=$?", &[], None);
        assert_eq!(out, "rc=1\n");
        assert_eq!(child.unwrap().wait().unwrap(), Exit::Code(0));
    }
}
