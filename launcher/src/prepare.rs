//! A job turned into exec-ready data before any fork: [`Prepared`].
//!
//! Everything the child needs is built here, in the parent, where allocation and errors are cheap: the
//! program path, `argv` and `envp` as C strings with their NULL-terminated pointer arrays, the working
//! directory, and the fds (stdin, stdout, stderr, optional cgroup directory). The child then only copies
//! fds and makes system calls (see `sys`).
//!
//! Invariant: the stdio fds held here are ≥ 3 (lower ones are duplicated upwards in [`Prepared::new`]), so
//! the child's `dup2` onto 0, 1 and 2 never overwrites a source it still needs.
//!
//! ```no_run
//! use launcher::{Prepared, Stdio};
//! let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
//! let stdio = Stdio::null_stdin(w.try_clone().unwrap(), w).unwrap();
//! let env = launcher::job_env(&launcher::process_env(), &[]);
//! let job = Prepared::bash("echo hi", &env, Some("/tmp".as_ref()), stdio).unwrap();
//! let child = launcher::spawn(&job).unwrap();
//! drop(job); // close the parent's copies of the pipe's write end
//! # drop((r, child));
//! ```

use crate::sys::CStrArray;
use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// The bash every job runs.
pub const BASH: &str = "/bin/bash";

/// Errors turning a job spec into a [`Prepared`] job.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PrepareError {
    #[error("{what} contains a NUL byte, which cannot be passed to a program")]
    Nul { what: &'static str },
    #[error("environment variable name {0:?} is empty or contains '='")]
    EnvName(String),
    #[error("cannot duplicate a standard fd above 2")]
    Fd(#[source] io::Error),
    #[error("an extra fd cannot be numbered {0}: fds 0 to 3 are taken")]
    ExtraFd(i32),
}

/// The three standard fds a job starts with.
#[derive(Debug)]
pub struct Stdio {
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

impl Stdio {
    /// stdin from `/dev/null` (opened read-only, close-on-exec), stdout and stderr as given.
    pub fn null_stdin(stdout: OwnedFd, stderr: OwnedFd) -> io::Result<Stdio> {
        let stdin = std::fs::File::open("/dev/null")?.into();
        Ok(Stdio { stdin, stdout, stderr })
    }
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared").finish_non_exhaustive()
    }
}

/// A job ready to be spawned any number of times with [`crate::spawn`].
///
/// Drop it after spawning: it holds the parent's copies of the job's stdio fds (a pipe's write end kept
/// here would keep the reader from ever seeing end of file).
pub struct Prepared {
    pub(crate) program: CString,
    pub(crate) program_path: PathBuf,
    pub(crate) argv: CStrArray,
    pub(crate) envp: CStrArray,
    pub(crate) cwd: Option<(CString, PathBuf)>,
    pub(crate) stdio: Stdio,
    pub(crate) cgroup: Option<OwnedFd>,
    pub(crate) force_procs_write: bool,
    /// An fd the job inherits at a fixed number ([`Prepared::with_extra_fd`]); the source is ≥ 5.
    pub(crate) extra: Option<(OwnedFd, i32)>,
    pub(crate) no_new_privs: bool,
    pub(crate) landlock: Option<OwnedFd>,
    /// A seccomp program the child stacks on the filters it inherited, just before exec.
    pub(crate) seccomp: Option<Vec<seccompiler::sock_filter>>,
    /// Clone fork-style even where the vfork-style clone works ([`Prepared::force_fork`]).
    pub(crate) force_fork: bool,
    /// Start a new session with stdin as its controlling terminal ([`Prepared::with_controlling_tty`]).
    pub(crate) controlling_tty: bool,
}

impl Prepared {
    /// Prepare `program` (an absolute or relative path, never looked up in `PATH`: see
    /// [`resolve_program`]) with `argv` (its `argv[0]` included), `env`, and working directory `cwd`
    /// (`None`: inherit the parent's).
    pub fn new<S: AsRef<OsStr>>(
        program: &Path,
        argv: &[S],
        env: &[(String, String)],
        cwd: Option<&Path>,
        stdio: Stdio,
    ) -> Result<Prepared, PrepareError> {
        let cstr = |bytes: &[u8], what| CString::new(bytes).map_err(|_| PrepareError::Nul { what });
        let program_c = cstr(program.as_os_str().as_bytes(), "the program path")?;
        let argv = argv.iter().map(|a| cstr(a.as_ref().as_bytes(), "an argument")).collect::<Result<Vec<_>, _>>()?;
        let mut envp = Vec::with_capacity(env.len());
        for (k, v) in env {
            if k.is_empty() || k.contains('=') {
                return Err(PrepareError::EnvName(k.clone()));
            }
            envp.push(cstr(format!("{k}={v}").as_bytes(), "an environment entry")?);
        }
        let cwd = match cwd {
            Some(p) => Some((cstr(p.as_os_str().as_bytes(), "the working directory")?, p.to_path_buf())),
            None => None,
        };
        let stdio = Stdio {
            stdin: above_stdio(stdio.stdin)?,
            stdout: above_stdio(stdio.stdout)?,
            stderr: above_stdio(stdio.stderr)?,
        };
        Ok(Prepared {
            program: program_c,
            program_path: program.to_path_buf(),
            argv: CStrArray::new(argv),
            envp: CStrArray::new(envp),
            cwd,
            stdio,
            cgroup: None,
            force_procs_write: false,
            extra: None,
            no_new_privs: false,
            landlock: None,
            seccomp: None,
            force_fork: false,
            controlling_tty: false,
        })
    }

    /// Prepare `bash --noprofile --norc -c CMD` ([`BASH`]).
    pub fn bash(
        cmd: &str,
        env: &[(String, String)],
        cwd: Option<&Path>,
        stdio: Stdio,
    ) -> Result<Prepared, PrepareError> {
        Prepared::new(Path::new(BASH), &["bash", "--noprofile", "--norc", "-c", cmd], env, cwd, stdio)
    }

    /// Start the job inside the cgroup v2 directory `dir` (an `O_DIRECTORY` fd).
    pub fn with_cgroup(mut self, dir: OwnedFd) -> Prepared {
        self.cgroup = Some(dir);
        self
    }

    /// Give the job `fd` as fd `target` (≥ 4; fd 3 carries the exec status until `execve`), not
    /// close-on-exec. Every other fd above 2 is still closed. The state pipe of a shell-state job uses
    /// this (see the worker).
    pub fn with_extra_fd(mut self, fd: OwnedFd, target: i32) -> Result<Prepared, PrepareError> {
        if target < 4 {
            return Err(PrepareError::ExtraFd(target));
        }
        // A source above 4 is never clobbered by the status pipe's move to 3 or by the dup onto `target`
        // (a source equal to `target` is duplicated upwards too).
        let fd = if fd.as_raw_fd() > 4 && fd.as_raw_fd() != target {
            fd
        } else {
            crate::sys::dup_at_least(fd.as_fd(), target.max(4) + 1).map_err(PrepareError::Fd)?
        };
        self.extra = Some((fd, target));
        Ok(self)
    }

    /// Place the job by writing `0` to `cgroup.procs` from the child instead of `CLONE_INTO_CGROUP`
    /// (what older kernels get automatically; exposed so the fallback can be exercised anywhere).
    pub fn force_procs_write(mut self) -> Prepared {
        self.force_procs_write = true;
        self
    }

    /// Clone fork-style (a private copy of this process's memory) instead of vfork-style: what hosts
    /// without the vfork trampoline get automatically; exposed so that path can be exercised and measured
    /// anywhere.
    pub fn force_fork(mut self) -> Prepared {
        self.force_fork = true;
        self
    }

    /// Make the child a session leader whose controlling terminal is its stdin (which must then be the
    /// slave side of a pseudo-terminal): `setsid` and `ioctl(0, TIOCSCTTY)` right after the stdio step.
    pub fn with_controlling_tty(mut self) -> Prepared {
        self.controlling_tty = true;
        self
    }

    /// Set no_new_privs in the child before exec.
    pub fn with_no_new_privs(mut self) -> Prepared {
        self.no_new_privs = true;
        self
    }

    /// Restrict the child with the Landlock ruleset `ruleset` (built before the fork, see
    /// [`crate::landlock_rules`]) just before exec; implies no_new_privs. The fd is duplicated.
    pub fn with_landlock(mut self, ruleset: std::os::fd::BorrowedFd<'_>) -> Result<Prepared, PrepareError> {
        self.landlock = Some(crate::sys::dup_at_least(ruleset, 4).map_err(PrepareError::Fd)?);
        self.no_new_privs = true;
        Ok(self)
    }

    /// Stack the seccomp program `prog` on the filters the child inherits, after Landlock and just before
    /// exec (built before the fork: [`crate::seccomp::build_job_filter`]); implies no_new_privs. A
    /// program of a few instructions costs little per spawn; the session's large filter belongs in the
    /// launching process instead ([`crate::seccomp::install`]), where every child inherits it for free.
    pub fn with_seccomp(mut self, prog: &[seccompiler::sock_filter]) -> Prepared {
        self.seccomp = Some(prog.to_vec());
        self.no_new_privs = true;
        self
    }

    /// The program that will be executed.
    pub fn program(&self) -> &Path {
        &self.program_path
    }

    /// The arguments, `argv[0]` included.
    pub fn argv(&self) -> Vec<OsString> {
        self.argv.strings().iter().map(|s| OsString::from_vec(s.as_bytes().to_vec())).collect()
    }
}

/// Return `fd` if it is ≥ 3, else a close-on-exec duplicate of it that is.
fn above_stdio(fd: OwnedFd) -> Result<OwnedFd, PrepareError> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    crate::sys::dup_at_least(fd.as_fd(), 3).map_err(PrepareError::Fd)
}

/// Find `name` the way a shell would: a name containing `/` is taken as is; otherwise the first
/// executable regular file called `name` in the `:`-separated `path` (empty entries mean `.`).
pub fn resolve_program(name: &OsStr, path: &OsStr) -> Option<PathBuf> {
    if name.as_bytes().contains(&b'/') {
        return Some(PathBuf::from(name));
    }
    if name.is_empty() {
        return None;
    }
    path.as_bytes().split(|b| *b == b':').find_map(|dir| {
        let dir = if dir.is_empty() { Path::new(".") } else { Path::new(OsStr::from_bytes(dir)) };
        let candidate = dir.join(name);
        is_executable_file(&candidate).then_some(candidate)
    })
}

fn is_executable_file(p: &Path) -> bool {
    use nix::unistd::{access, AccessFlags};
    p.metadata().is_ok_and(|m| m.is_file()) && access(p, AccessFlags::X_OK).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn null_stdio() -> Stdio {
        let out = std::fs::OpenOptions::new().write(true).open("/dev/null").unwrap();
        Stdio::null_stdin(out.try_clone().unwrap().into(), out.into()).unwrap()
    }

    #[test]
    fn nul_bytes_are_refused_with_what_holds_them() {
        let err = Prepared::bash("echo \0", &[], None, null_stdio()).err().unwrap();
        assert_eq!(err.to_string(), "an argument contains a NUL byte, which cannot be passed to a program");
        let err = Prepared::bash("x", &[], Some(Path::new("/tm\0p")), null_stdio()).err().unwrap();
        assert!(matches!(err, PrepareError::Nul { what: "the working directory" }));
    }

    #[test]
    fn bad_env_names_are_refused() {
        let env = vec![("A=B".to_string(), "c".to_string())];
        assert!(matches!(Prepared::bash("x", &env, None, null_stdio()), Err(PrepareError::EnvName(_))));
        let env = vec![(String::new(), "c".to_string())];
        assert!(matches!(Prepared::bash("x", &env, None, null_stdio()), Err(PrepareError::EnvName(_))));
    }

    #[test]
    fn bash_argv_is_noprofile_norc() {
        let p = Prepared::bash("true", &[], None, null_stdio()).unwrap();
        assert_eq!(p.program(), Path::new("/bin/bash"));
        assert_eq!(p.argv(), ["bash", "--noprofile", "--norc", "-c", "true"].map(OsString::from));
    }

    #[test]
    fn resolve_program_searches_path_in_order() {
        let path = OsStr::new("/nonexistent:/usr/bin:/bin");
        assert_eq!(resolve_program(OsStr::new("env"), path), Some(PathBuf::from("/usr/bin/env")));
        assert_eq!(resolve_program(OsStr::new("./x"), path), Some(PathBuf::from("./x")));
        assert_eq!(resolve_program(OsStr::new("no-such-program-heddle"), path), None);
        assert_eq!(resolve_program(OsStr::new(""), path), None);
    }
}
