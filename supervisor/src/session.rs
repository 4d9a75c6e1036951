//! A live session as the supervisor holds it: its id, cgroup directory, worker (pid, uid, pidfd) and
//! the five fds of its shared region, kept so that a restarted front can be handed them again. The table
//! of them, and the dispatch of the front's requests, is [`crate::session_table`].
//!
//! Invariant: a session id is `[A-Za-z0-9_.-]{1,64}` and does not start with `.`, so
//! `session-<ID>` is always one plain directory name under the cgroup root.
//!
//! ```
//! use supervisor::session::validate_id;
//! assert!(validate_id("demo-1").is_ok());
//! assert!(validate_id("../x").is_err());
//! ```

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

/// The longest session id.
pub const MAX_ID_LEN: usize = 64;

/// Why a session id was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "session id {0:?} is not valid: use 1 to 64 characters from A-Z, a-z, 0-9, '_', '.', '-', not starting with '.'"
)]
pub struct InvalidId(pub String);

/// Check a session id against `[A-Za-z0-9_.-]{1,64}`, not starting with `.`.
pub fn validate_id(id: &str) -> Result<(), InvalidId> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
    if id.is_empty() || id.len() > MAX_ID_LEN || id.starts_with('.') || !id.chars().all(ok_char) {
        return Err(InvalidId(id.to_owned()));
    }
    Ok(())
}

/// The session's cgroup directory under `root`.
pub fn session_dir(root: &Path, id: &str) -> PathBuf {
    root.join(format!("session-{id}"))
}

/// The worker's leaf cgroup inside a session directory.
pub fn worker_dir(session_dir: &Path) -> PathBuf {
    session_dir.join("worker")
}

/// The session's region memfd and its four doorbells, in [`shm_proto::control::SESSION_FDS`] order.
#[derive(Debug)]
pub struct SessionFds {
    pub memfd: OwnedFd,
    pub cmd_data: OwnedFd,
    pub cmd_space: OwnedFd,
    pub evt_data: OwnedFd,
    pub evt_space: OwnedFd,
}

impl SessionFds {
    /// The five fds in `SESSION_FDS` order (also the worker's fds 3…7).
    pub fn ordered(&self) -> [BorrowedFd<'_>; 5] {
        [
            self.memfd.as_fd(),
            self.cmd_data.as_fd(),
            self.cmd_space.as_fd(),
            self.evt_data.as_fd(),
            self.evt_space.as_fd(),
        ]
    }

    /// Duplicates of the five fds, in `SESSION_FDS` order (to queue them for sending).
    pub fn duplicate(&self) -> std::io::Result<Vec<OwnedFd>> {
        self.ordered().iter().map(|fd| fd.try_clone_to_owned()).collect()
    }
}

/// A running session's worker.
#[derive(Debug)]
pub struct Worker {
    pub pid: u32,
    pub uid: u32,
    /// Our child's pidfd: polled for its death, used to reap it.
    pub pidfd: OwnedFd,
}

/// A live session.
#[derive(Debug)]
pub struct Session {
    pub id: String,
    /// `<root>/session-<ID>`.
    pub cgroup: PathBuf,
    pub worker: Worker,
    pub fds: SessionFds,
    /// The session's v1 `memory`/`pids` directories (hybrid hosts), removed with the session.
    pub v1: Vec<PathBuf>,
    /// The limits it was opened with.
    pub limits: shm_proto::control::SessionLimits,
    /// The session's private temp dir (created by the supervisor, owned by the worker's uid).
    pub tmp: PathBuf,
    /// Read ends of kept jobs' output pipes, held (unread) from `keep` until the worker goes.
    pub held_pipes: Vec<crate::kept_output::Rescue>,
}

/// The sandbox settings a session's worker is started with (`session.open {policy, network, cwd}`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerPolicy {
    /// The profile's name; only `[a-z0-9_-]` is passed on.
    pub policy: String,
    /// `Some` when the session switched the profile's network setting.
    pub network: Option<bool>,
    /// `Some` when the session switched the profile's `[seccomp.ptys]` (`--ptys`).
    pub ptys: Option<bool>,
    /// The project directory (`{project}`).
    pub project: String,
    /// Extra writable roots the session asked for, checked and canonical (`--writable`).
    pub writable: Vec<PathBuf>,
    /// The server's `--allow-writable` directories, for the worker's own re-check.
    pub allow_writable: Vec<PathBuf>,
    /// The project, when it is mapped for the jobs' uid (`--allow-owned-projects`).
    pub owned_project: Option<crate::owned_project::OwnedProject>,
    /// The bash an earlier worker reported, as the front passed it on (`--bash-seen`, `--bash-version`):
    /// only a [`BashSeen::is_plain`](shm_proto::control::BashSeen::is_plain) one is passed.
    pub bash: Option<shm_proto::control::BashSeen>,
}

impl Default for WorkerPolicy {
    fn default() -> Self {
        WorkerPolicy {
            policy: "workspace".into(),
            network: None,
            ptys: None,
            project: "/".into(),
            writable: Vec::new(),
            allow_writable: Vec::new(),
            owned_project: None,
            bash: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_of_the_allowed_alphabet_pass() {
        for id in ["a", "s1", "A.b_c-9", &"x".repeat(64), "a..b"] {
            assert_eq!(validate_id(id), Ok(()), "{id}");
        }
    }

    #[test]
    fn ids_that_could_escape_or_hide_are_refused() {
        for id in ["", ".", "..", ".hidden", "a/b", "../x", "a b", "é", &"x".repeat(65), "a\0b", "a\n"] {
            assert!(validate_id(id).is_err(), "{id:?}");
        }
    }

    #[test]
    fn session_paths_are_one_level_below_root() {
        let dir = session_dir(Path::new("/cg/heddle"), "demo");
        assert_eq!(dir, Path::new("/cg/heddle/session-demo"));
        assert_eq!(worker_dir(&dir), Path::new("/cg/heddle/session-demo/worker"));
    }
}
