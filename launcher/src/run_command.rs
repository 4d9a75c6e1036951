//! `heddle-launch`: run one command through the same spawn path jobs take, the way `bwrap` or `env` would.
//!
//! stdin is `/dev/null`, stdout and stderr are the launcher's own, the environment is [`crate::job_env`]
//! of the launcher's environment, the program is resolved in the job environment's `PATH` before the fork,
//! and the command runs in `--cgroup DIR` (an existing cgroup v2 directory) when given. The launcher waits
//! through the pidfd and reports the command's status the way a shell does (128 + signal).
//!
//! ```no_run
//! let cmd = launcher::run_command::Command { argv: vec!["true".into()], ..Default::default() };
//! assert_eq!(launcher::run_command::run(&cmd).unwrap().shell_code(), 0);
//! ```

use crate::prepare::{resolve_program, PrepareError, Prepared, Stdio};
use crate::spawn::{spawn, Exit, LaunchError};
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::AsFd;
use std::path::PathBuf;

/// One `heddle-launch` invocation.
#[derive(Clone, Debug, Default)]
pub struct Command {
    /// Cgroup v2 directory to start the command in.
    pub cgroup: Option<PathBuf>,
    /// Working directory (default: the launcher's).
    pub cwd: Option<PathBuf>,
    /// The command and its arguments.
    pub argv: Vec<OsString>,
    /// A policy profile (a TOML file, or a builtin's name) to sandbox the command with.
    pub policy: Option<PathBuf>,
}

/// Errors running a command.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    #[error("no command given; usage: heddle-launch [--cgroup DIR] [--cwd DIR] -- CMD [ARGS...]")]
    NoCommand,
    #[error("{0}: command not found in PATH")]
    NotFound(String),
    #[error("cannot open cgroup directory {}", .path.display())]
    Cgroup {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot open /dev/null or duplicate stdout and stderr")]
    Stdio(#[source] io::Error),
    #[error(transparent)]
    Prepare(#[from] PrepareError),
    #[error(transparent)]
    Launch(#[from] LaunchError),
    #[error("waiting for the command failed")]
    Wait(#[source] io::Error),
    #[error("cannot read policy file {}", .0.display())]
    PolicyRead(PathBuf, #[source] io::Error),
    #[error(transparent)]
    Policy(#[from] policies::PolicyError),
    #[error("the policy's writable roots cannot be resolved")]
    Resolve(#[from] policies::ResolveError),
    #[error(transparent)]
    Sandbox(#[from] crate::sandbox::SandboxError),
    #[error("{0}")]
    Refused(String),
}

impl RunError {
    /// The launcher's own exit code for this failure, after `env(1)`: 127 the command was not found,
    /// 126 it could not be executed, 125 anything else went wrong.
    pub fn exit_code(&self) -> i32 {
        match self {
            RunError::NotFound(_) => 127,
            RunError::Launch(LaunchError::Exec { source, .. }) if source.raw_os_error() == Some(libc::ENOENT) => 127,
            RunError::Launch(LaunchError::Exec { .. }) => 126,
            _ => 125,
        }
    }
}

/// Run `cmd` to completion and return how it ended.
pub fn run(cmd: &Command) -> Result<Exit, RunError> {
    let Some(name) = cmd.argv.first() else { return Err(RunError::NoCommand) };
    let env = crate::env::job_env(&crate::env::process_env(), &[]);
    let path = env.iter().find(|(k, _)| k == "PATH").map(|(_, v)| OsStr::new(v)).unwrap_or(OsStr::new(""));
    let program = resolve_program(name, path).ok_or_else(|| RunError::NotFound(name.to_string_lossy().into_owned()))?;
    let stdout = io::stdout().as_fd().try_clone_to_owned().map_err(RunError::Stdio)?;
    let stderr = io::stderr().as_fd().try_clone_to_owned().map_err(RunError::Stdio)?;
    let stdio = Stdio::null_stdin(stdout, stderr).map_err(RunError::Stdio)?;
    let mut prepared = Prepared::new(&program, &cmd.argv, &env, cmd.cwd.as_deref(), stdio)?;
    let sandbox = match &cmd.policy {
        Some(p) => Some(sandbox_for(p, cmd.cwd.as_deref(), &env)?),
        None => None,
    };
    if let Some(sb) = &sandbox {
        if let Some(why) = sb.refusal() {
            return Err(RunError::Refused(why));
        }
        // heddle-launch is a one-shot process: the filter it installs on itself is inherited by the
        // command, exactly as the worker's is by its jobs.
        crate::seccomp::install(&sb.seccomp).map_err(crate::sandbox::SandboxError::from)?;
        if let Some(fd) = &sb.job.fd {
            prepared = prepared.with_landlock(fd.as_fd())?;
        }
        if let Some(prog) = &sb.job_seccomp {
            prepared = prepared.with_seccomp(prog);
        }
    }
    if let Some(dir) = &cmd.cgroup {
        let fd = open_dir(dir).map_err(|source| RunError::Cgroup { path: dir.clone(), source })?;
        prepared = prepared.with_cgroup(fd);
    }
    let child = spawn(&prepared)?;
    drop(prepared);
    child.wait().map_err(RunError::Wait)
}

/// Load `policy` (a file, or a builtin's name) and resolve it with the working directory as the project,
/// `TMPDIR` (or `/tmp`) as the session temp dir and `HOME` as home.
fn sandbox_for(
    policy: &std::path::Path,
    cwd: Option<&std::path::Path>,
    env: &[(String, String)],
) -> Result<crate::sandbox::Sandbox, RunError> {
    let p = if policy.exists() {
        let text = std::fs::read_to_string(policy).map_err(|e| RunError::PolicyRead(policy.to_path_buf(), e))?;
        policies::Policy::from_toml(&policy.display().to_string(), &text)?
    } else {
        policies::Policy::builtin(&policy.to_string_lossy())?
    };
    let var = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| PathBuf::from(v));
    let project = match cwd {
        Some(c) => c.to_path_buf(),
        None => std::env::current_dir().map_err(|e| RunError::PolicyRead(".".into(), e))?,
    };
    let tmp = var("TMPDIR").unwrap_or_else(|| "/tmp".into());
    let home = var("HOME").unwrap_or_else(|| "/".into());
    let ctx = policies::ResolveCtx::new(project, tmp, home).with_git_dirs();
    Ok(crate::sandbox::Sandbox::build(&p.resolve(&ctx)?)?)
}

fn open_dir(dir: &std::path::Path) -> io::Result<std::os::fd::OwnedFd> {
    use nix::fcntl::{open, OFlag};
    Ok(open(dir, OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC, nix::sys::stat::Mode::empty())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn exit_code_and_signal_come_back() {
        let cmd = Command { argv: argv(&["sh", "-c", "exit 7"]), ..Command::default() };
        assert_eq!(run(&cmd).unwrap(), Exit::Code(7));
        let cmd = Command { argv: argv(&["sh", "-c", "kill -KILL $$"]), ..Command::default() };
        assert_eq!(run(&cmd).unwrap().shell_code(), 137);
    }

    #[test]
    fn failures_map_to_env_style_exit_codes() {
        let cmd = Command { argv: argv(&["no-such-command-heddle"]), ..Command::default() };
        assert_eq!(run(&cmd).unwrap_err().exit_code(), 127);
        let cmd = Command { argv: argv(&["/etc/passwd"]), ..Command::default() };
        assert_eq!(run(&cmd).unwrap_err().exit_code(), 126);
        let cmd = Command { argv: argv(&["true"]), cwd: Some("/nonexistent-heddle".into()), ..Command::default() };
        let err = run(&cmd).unwrap_err();
        assert_eq!(
            (err.exit_code(), err.to_string()),
            (125, "cannot enter working directory /nonexistent-heddle".into())
        );
        assert!(matches!(run(&Command::default()), Err(RunError::NoCommand)));
    }
}
