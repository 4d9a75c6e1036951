//! Worker startup: adopt fds 3–7, attach the session region, and build the `Hello` event.
//!
//! `Hello` carries the bash the worker launches and its exact `BASH_VERSION`, learned once at startup by
//! running that bash through the launcher (`printf %s "$BASH_VERSION"`, ~1–2 ms), so the version reported
//! is the one jobs really get. If the probe fails, `Hello` carries an empty version and a `Warning` follows.

use crate::event_loop::{Channels, Settings};
use crate::sys::{InheritError, InheritedFds};
use launcher::{LaunchError, PrepareError, Prepared, Stdio};
use shm_proto::msg::Event;
use shm_proto::region::{AttachError, Region};
use shm_proto::sys::EventFd;
use std::io::Read;
use std::os::fd::AsFd;
use std::path::Path;

/// Errors starting the worker.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartupError {
    #[error(transparent)]
    Inherit(#[from] InheritError),
    #[error("cannot attach the session region at fd 3")]
    Attach(#[from] AttachError),
    #[error("cannot reset SIGCHLD to its default action")]
    Sigchld(#[source] std::io::Error),
}

impl Channels {
    /// The worker's channels from the fds the supervisor passed (3: region, 4–7: eventfds).
    pub fn from_inherited(fds: InheritedFds) -> Result<Channels, StartupError> {
        let region = Region::attach(fds.region.as_fd())?;
        Ok(Channels {
            cmd: region.cmd_consumer(),
            evt: region.evt_producer(),
            cmd_data: EventFd::from_owned(fds.cmd_data),
            cmd_space: EventFd::from_owned(fds.cmd_space),
            evt_data: EventFd::from_owned(fds.evt_data),
            evt_space: EventFd::from_owned(fds.evt_space),
            region: Some(region),
        })
    }

    /// What `heddle-worker` does first: reset `SIGCHLD` to its default (see
    /// [`crate::sys::default_sigchld`]), adopt fds 3–7 and attach the region.
    pub fn inherited() -> Result<Channels, StartupError> {
        crate::sys::default_sigchld().map_err(StartupError::Sigchld)?;
        Channels::from_inherited(InheritedFds::take()?)
    }
}

/// Errors learning bash's version.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProbeError {
    #[error("cannot create a pipe")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Prepare(#[from] PrepareError),
    #[error(transparent)]
    Launch(#[from] LaunchError),
    #[error("bash printed no version (exit status {0:?})")]
    Empty(launcher::Exit),
}

/// `BASH_VERSION` of [`launcher::BASH`], run the way jobs are (allowlisted `env`, stdin `/dev/null`).
pub fn probe_bash_version(env: &[(String, String)]) -> Result<String, ProbeError> {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(std::io::Error::from)?;
    let stdio = Stdio::null_stdin(w.try_clone()?, w)?;
    let job_env = launcher::job_env(env, &[]);
    let prepared = Prepared::bash(r#"printf %s "$BASH_VERSION""#, &job_env, Some(Path::new("/")), stdio)?;
    let child = launcher::spawn(&prepared)?;
    drop(prepared);
    let mut out = String::new();
    let read = std::fs::File::from(r).take(256).read_to_string(&mut out);
    let status = child.wait()?;
    read?;
    if out.is_empty() {
        return Err(ProbeError::Empty(status));
    }
    Ok(out)
}

impl Settings {
    /// Settings for a worker serving the session cgroup `cgroup`: this process's environment and a
    /// `Hello` with the probed bash version.
    pub fn for_session(cgroup: &Path) -> Settings {
        let base_env = launcher::process_env();
        let mut startup_warnings = Vec::new();
        let bash_version = probe_bash_version(&base_env).unwrap_or_else(|e| {
            startup_warnings.push(format!(
                "cannot learn the version of {}: {}",
                launcher::BASH,
                crate::emit::error_chain(&e)
            ));
            String::new()
        });
        let hello = Event::Hello {
            pid: std::process::id(),
            uid: nix::unistd::getuid().as_raw(),
            bash: launcher::BASH.to_owned(),
            bash_version,
            cgroup: cgroup.to_string_lossy().into_owned(),
        };
        Settings { base_env, hello, startup_warnings, sandbox: None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bash_version_is_the_real_one() {
        let v = probe_bash_version(&launcher::process_env()).unwrap();
        let out = std::process::Command::new("/bin/bash").args(["-c", "printf %s \"$BASH_VERSION\""]).output().unwrap();
        assert_eq!(v, String::from_utf8(out.stdout).unwrap());
        assert!(v.starts_with(|c: char| c.is_ascii_digit()), "{v}");
    }

    #[test]
    fn hello_names_the_session_cgroup() {
        let s = Settings::for_session(Path::new("/sys/fs/cgroup/x/session-a"));
        let Event::Hello { pid, bash, cgroup, bash_version, .. } = s.hello else { panic!("not a Hello") };
        assert_eq!(
            (pid, bash.as_str(), cgroup.as_str()),
            (std::process::id(), "/bin/bash", "/sys/fs/cgroup/x/session-a")
        );
        assert!(!bash_version.is_empty());
        assert!(s.startup_warnings.is_empty());
    }
}
