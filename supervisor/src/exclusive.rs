//! A server holds its cgroup root and its state directory alone.
//!
//! Two supervisors on one cgroup root would each take the other's sessions for leftovers of a crash
//! (`recovery.rs` kills them and removes their temp dirs), and two on one state directory would write
//! one database and one journal. So before it changes anything, a supervisor takes an exclusive `flock`
//! on the cgroup root directory itself (cgroupfs supports it) and on `<state-dir>/supervisor.lock`; the
//! kernel drops both when the process dies, however it dies, so a supervisor that `heddle up` restarts
//! after a crash takes them again at once. A second supervisor that finds either held refuses to start
//! with a sentence naming the holder, read from where the holder wrote it: the root's `user.heddle.holder`
//! attribute, the lock file's text.
//!
//! The lock on the root is on its inode: a root removed under a running server (an operator's `rmdir`
//! of the empty directory) is no longer held. [`RootClaim::ensure`], called before each session is made,
//! sees that and makes the root again and holds it, or reports that another server holds the new one.
//!
//! Invariants: the lock fds are close-on-exec (no child inherits a claim); nothing is created under
//! the root before it is held.
//!
//! ```no_run
//! use supervisor::exclusive::{claim_state_dir, RootClaim};
//! let holder = "supervisor pid 7, socket /run/heddle.sock";
//! let mut root = RootClaim::take("/sys/fs/cgroup/unified/heddle".as_ref(), holder)?;
//! let _state = claim_state_dir("/var/lib/heddle".as_ref(), holder)?;
//! root.ensure()?;
//! # Ok::<(), supervisor::exclusive::ClaimError>(())
//! ```

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use std::fs::{DirBuilder, File, OpenOptions};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The cgroup root's attribute naming the supervisor that holds it.
pub const HOLDER_XATTR: &std::ffi::CStr = c"user.heddle.holder";
/// The lock file in the state directory; its text names the supervisor that holds it.
pub const STATE_LOCK: &str = "supervisor.lock";

/// Why a claim could not be taken or kept.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClaimError {
    #[error(
        "another heddle ({holder}) holds the cgroup root {root}; stop it first, or start this one with its \
         own --cgroup-root, --socket and --state-dir"
    )]
    RootHeld { root: PathBuf, holder: String },
    #[error(
        "another heddle ({holder}) uses the state directory {dir}; stop it first, or start this one with its \
         own --state-dir"
    )]
    StateHeld { dir: PathBuf, holder: String },
    #[error(
        "the cgroup root {root} was removed while this heddle ran, and another heddle ({holder}) holds the one \
         made in its place; stop one of them"
    )]
    RootTaken { root: PathBuf, holder: String },
    #[error("cannot {op} {path}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

fn io_err(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> ClaimError {
    let path = path.to_owned();
    move |source| ClaimError::Io { op, path, source }
}

/// What a refusal says of a holder that wrote nothing readable.
const UNNAMED: &str = "a process that did not say its pid";

/// The text a supervisor leaves where it holds something: its pid, socket, cgroup root and state dir.
pub fn holder_text(socket: &Path, root: &Path, state_dir: &Path) -> String {
    format!(
        "supervisor pid {}, socket {}, cgroup root {}, state directory {}",
        std::process::id(),
        socket.display(),
        root.display(),
        state_dir.display()
    )
}

/// Bytes a holder wrote, as text for a refusal (cut at 1 KiB, control characters dropped).
fn holder_from(bytes: &[u8]) -> String {
    let text: String =
        String::from_utf8_lossy(&bytes[..bytes.len().min(1024)]).chars().filter(|c| !c.is_control()).collect();
    if text.trim().is_empty() {
        UNNAMED.to_owned()
    } else {
        text.trim().to_owned()
    }
}

/// The exclusive hold of a cgroup root directory.
#[derive(Debug)]
pub struct RootClaim {
    path: PathBuf,
    holder: String,
    lock: Flock<File>,
    /// `(dev, ino)` of the directory held.
    ident: (u64, u64),
}

/// A locked directory and its `(dev, ino)`.
type Held = (Flock<File>, (u64, u64));

/// Lock the directory `path` without waiting; `Err(Ok(holder))` when another process holds it.
fn lock_root(path: &Path, holder: &str) -> Result<Held, Result<String, ClaimError>> {
    let dir = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| Err(io_err("open", path)(e)))?;
    let lock = match Flock::lock(dir, FlockArg::LockExclusiveNonblock) {
        Ok(l) => l,
        Err((dir, Errno::EWOULDBLOCK)) => {
            let named = crate::sys::fgetxattr(dir.as_fd(), HOLDER_XATTR).ok().flatten().unwrap_or_default();
            return Err(Ok(holder_from(&named)));
        }
        Err((_, e)) => return Err(Err(io_err("lock", path)(e.into()))),
    };
    crate::sys::fsetxattr(lock.as_fd(), HOLDER_XATTR, holder.as_bytes())
        .map_err(|e| Err(io_err("label (user.heddle.holder)", path)(e)))?;
    let meta = lock.metadata().map_err(|e| Err(io_err("stat", path)(e)))?;
    Ok((lock, (meta.dev(), meta.ino())))
}

impl RootClaim {
    /// Hold the existing cgroup root `path`, labelled with `holder` ([`holder_text`]).
    pub fn take(path: &Path, holder: &str) -> Result<RootClaim, ClaimError> {
        match lock_root(path, holder) {
            Ok((lock, ident)) => Ok(RootClaim { path: path.to_owned(), holder: holder.to_owned(), lock, ident }),
            Err(Ok(other)) => Err(ClaimError::RootHeld { root: path.to_owned(), holder: other }),
            Err(Err(e)) => Err(e),
        }
    }

    /// Before a session is made under the root: check that the directory at the root's path is still
    /// the one held. One removed meanwhile is made again (`mkdir`) and held; one made in its place by
    /// someone else is held if nobody holds it. Returns true when the root is a new directory (its
    /// `cgroup.subtree_control` starts empty: the caller turns on again what it had turned on).
    pub fn ensure(&mut self) -> Result<bool, ClaimError> {
        match std::fs::symlink_metadata(&self.path) {
            Ok(m) if (m.dev(), m.ino()) == self.ident => return Ok(false),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => match std::fs::create_dir(&self.path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io_err("create the cgroup root", &self.path)(e)),
            },
            Err(e) => return Err(io_err("stat", &self.path)(e)),
        }
        match lock_root(&self.path, &self.holder) {
            Ok((lock, ident)) => {
                self.lock = lock;
                self.ident = ident;
                Ok(true)
            }
            Err(Ok(other)) => Err(ClaimError::RootTaken { root: self.path.clone(), holder: other }),
            Err(Err(e)) => Err(e),
        }
    }
}

/// What a running supervisor holds alone: its cgroup root and its state directory.
#[derive(Debug)]
pub struct Claims {
    pub root: RootClaim,
    pub state: StateClaim,
}

/// The exclusive hold of a state directory (its lock file, open and locked).
#[derive(Debug)]
pub struct StateClaim {
    _lock: Flock<File>,
}

/// Create the state directory `dir` if it is missing (parents 0755, itself 0700) and hold it: lock
/// `dir/supervisor.lock` (created root-owned 0644, never followed through a symlink, refused unless a
/// plain file with one link) and write `holder` into it.
pub fn claim_state_dir(dir: &Path, holder: &str) -> Result<StateClaim, ClaimError> {
    if let Some(parent) = dir.parent() {
        DirBuilder::new().recursive(true).mode(0o755).create(parent).map_err(io_err("create", parent))?;
    }
    match DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io_err("create", dir)(e)),
    }
    let path = dir.join(STATE_LOCK);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&path)
        .map_err(io_err("open", &path))?;
    let meta = file.metadata().map_err(io_err("stat", &path))?;
    if !meta.is_file() || meta.nlink() != 1 {
        let e = io::Error::other("it is not a plain file with a single link; remove it");
        return Err(io_err("use", &path)(e));
    }
    let lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(l) => l,
        Err((file, Errno::EWOULDBLOCK)) => {
            let mut buf = [0u8; 1024];
            let n = file.read_at(&mut buf, 0).unwrap_or(0);
            return Err(ClaimError::StateHeld { dir: dir.to_owned(), holder: holder_from(&buf[..n]) });
        }
        Err((_, e)) => return Err(io_err("lock", &path)(e.into())),
    };
    lock.set_len(0).map_err(io_err("write", &path))?;
    lock.write_all_at(format!("{holder}\n").as_bytes(), 0).map_err(io_err("write", &path))?;
    Ok(StateClaim { _lock: lock })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_claim_on_a_state_dir_is_refused_naming_the_first() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/state");
        let first = claim_state_dir(&dir, "supervisor pid 1, socket /x.sock").unwrap();
        match claim_state_dir(&dir, "supervisor pid 2, socket /y.sock") {
            Err(ClaimError::StateHeld { holder, .. }) => assert_eq!(holder, "supervisor pid 1, socket /x.sock"),
            other => panic!("{other:?}"),
        }
        drop(first);
        let _again = claim_state_dir(&dir, "supervisor pid 2, socket /y.sock").unwrap();
        assert_eq!(std::fs::read_to_string(dir.join(STATE_LOCK)).unwrap(), "supervisor pid 2, socket /y.sock\n");
    }

    #[test]
    fn a_symlink_or_a_linked_lock_file_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("state");
        std::fs::create_dir(&dir).unwrap();
        let target = tmp.path().join("precious");
        std::fs::write(&target, b"keep").unwrap();
        std::os::unix::fs::symlink(&target, dir.join(STATE_LOCK)).unwrap();
        assert!(matches!(claim_state_dir(&dir, "h"), Err(ClaimError::Io { .. })));
        std::fs::remove_file(dir.join(STATE_LOCK)).unwrap();
        std::fs::hard_link(&target, dir.join(STATE_LOCK)).unwrap();
        assert!(matches!(claim_state_dir(&dir, "h"), Err(ClaimError::Io { .. })));
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
    }

    #[test]
    fn holder_text_is_cleaned() {
        assert_eq!(holder_from(b""), UNNAMED);
        assert_eq!(holder_from(b"pid 3\n\x1b[31m"), "pid 3[31m");
    }
}
