//! Worker startup: adopt fds 3–7, attach the session region, and build the `Hello` event.
//!
//! `Hello` carries the bash the worker launches and its exact `BASH_VERSION`, learned at startup by
//! running that bash through the launcher (`printf %s "$BASH_VERSION"`), so the version reported is the
//! one jobs really get. If the probe fails, `Hello` carries an empty version and a `Warning` follows.
//!
//! The probe is a sandboxed bash of its own, which cost about a fifth of a session's start in a burst
//! of opens (docs/performance.md). So `Hello` also carries the identity of bash's file ([`bash_id`]:
//! device, inode, size, modification and change times), the front passes the latest one it saw to the
//! next worker (`--bash-seen`, `--bash-version`, through the supervisor), and a worker whose bash is
//! still that very file takes the version instead of probing. A bash replaced (a package upgrade makes
//! a new inode) or rewritten in place (new times) has another identity and is probed.

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

/// The identity of [`launcher::BASH`]'s file (the file a path leads to, as `exec` would):
/// `DEV:INO:SIZE:MTIME_NS:CTIME_NS`, or `None` when it cannot be read.
pub fn bash_id() -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(launcher::BASH).ok()?;
    let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
    Some(format!(
        "{}:{}:{}:{}:{}",
        m.dev(),
        m.ino(),
        m.size(),
        ns(m.mtime(), m.mtime_nsec()),
        ns(m.ctime(), m.ctime_nsec())
    ))
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
    /// `Hello` with bash's version: `seen` (an earlier worker's `(bash_id, version)`) when this worker's
    /// bash is still that file, else probed.
    pub fn for_session(cgroup: &Path, seen: Option<(&str, &str)>) -> Settings {
        let base_env = launcher::process_env();
        let mut startup_warnings = Vec::new();
        let bash_id = bash_id();
        let known = match (seen, bash_id.as_deref()) {
            (Some((id, version)), Some(own)) if id == own && !version.is_empty() => Some(version.to_owned()),
            _ => None,
        };
        let bash_probed = known.is_none();
        let bash_version = match known {
            Some(v) => v,
            None => probe_bash_version(&base_env).unwrap_or_else(|e| {
                startup_warnings.push(format!(
                    "cannot learn the version of {}: {}",
                    launcher::BASH,
                    crate::emit::error_chain(&e)
                ));
                String::new()
            }),
        };
        let hello = Event::Hello {
            pid: std::process::id(),
            uid: nix::unistd::geteuid().as_raw(),
            bash: launcher::BASH.to_owned(),
            bash_version,
            cgroup: cgroup.to_string_lossy().into_owned(),
        };
        let bash_file = Some(Event::BashFile { id: bash_id.unwrap_or_default(), probed: bash_probed });
        Settings { base_env, hello, bash_file, startup_warnings, sandbox: None }
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
        let s = Settings::for_session(Path::new("/sys/fs/cgroup/x/session-a"), None);
        let Event::Hello { pid, bash, cgroup, bash_version, .. } = s.hello else { panic!("not a Hello") };
        let Some(Event::BashFile { probed: bash_probed, .. }) = s.bash_file else { panic!("no BashFile") };
        assert_eq!(
            (pid, bash.as_str(), cgroup.as_str()),
            (std::process::id(), "/bin/bash", "/sys/fs/cgroup/x/session-a")
        );
        assert!(!bash_version.is_empty());
        assert!(bash_probed, "nothing seen before: probed");
        assert!(s.startup_warnings.is_empty());
    }

    #[test]
    fn a_version_seen_is_taken_only_for_the_same_file() {
        let hello = |seen: Option<(&str, &str)>| {
            let s = Settings::for_session(Path::new("/x"), seen);
            match (s.hello, s.bash_file) {
                (Event::Hello { bash_version, .. }, Some(Event::BashFile { id, probed })) => (bash_version, probed, id),
                other => panic!("not a Hello and a BashFile: {other:?}"),
            }
        };
        let id = bash_id().expect("/bin/bash can be read");
        assert_eq!(hello(None).2, id, "Hello names the file");
        // A made-up version proves the worker took it rather than ran bash.
        assert_eq!(hello(Some((&id, "9.9.9(1)-seen"))), ("9.9.9(1)-seen".to_owned(), false, id.clone()));
        let real = probe_bash_version(&launcher::process_env()).unwrap();
        // Another file (a bash replaced since: another inode, or the same one rewritten: other times).
        let (dev, rest) = id.split_once(':').unwrap();
        let (ino, times) = rest.split_once(':').unwrap();
        let other_inode = format!("{dev}:{}:{times}", ino.parse::<u64>().unwrap() + 1);
        let (head, ctime) = id.rsplit_once(':').unwrap();
        let other_ctime = format!("{head}:{}", ctime.parse::<i128>().unwrap() + 1);
        for other in [other_inode, other_ctime, String::new()] {
            assert_eq!(hello(Some((&other, "9.9.9(1)-seen"))), (real.clone(), true, id.clone()), "seen {other:?}");
        }
        assert_eq!(hello(Some((&id, ""))), (real, true, id), "an empty version is probed");
    }
}
