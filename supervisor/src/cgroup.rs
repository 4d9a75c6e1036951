//! The supervisor's cgroup work: finding the cgroup v2 mount and the mode (pure v2 or hybrid), and
//! the privileged operations on the delegated tree behind the [`CgroupTreeOps`] trait: mkdir, chown,
//! listing, freeze, `cgroup.kill`, waiting for `populated 0`, and removal.
//!
//! Invariants: nothing here kills by pid or by name; a subtree ends by `cgroup.kill`, and it is only
//! reported empty after `cgroup.events` said `populated 0`. Only directories under the cgroup root the
//! supervisor was given are ever touched.
//!
//! ```
//! use supervisor::cgroup::{detect_mode, CgroupMode};
//! let (mode, root) = detect_mode(|p| p.ends_with("unified/cgroup.procs"), "/").unwrap();
//! assert_eq!((mode, root.to_str().unwrap()), (CgroupMode::Hybrid, "/sys/fs/cgroup/unified/heddle"));
//! ```

use shm_proto::control::ProcInfo;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use shm_proto::procs::cmdline;

/// How the host mounts cgroups.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CgroupMode {
    /// Only cgroup v2, mounted at `/sys/fs/cgroup`.
    V2,
    /// v1 controllers with a v2 hierarchy at `/sys/fs/cgroup/unified`.
    Hybrid,
}

impl CgroupMode {
    /// `"v2"` or `"hybrid"`, as the control protocol names it.
    pub fn as_str(self) -> &'static str {
        match self {
            CgroupMode::V2 => "v2",
            CgroupMode::Hybrid => "hybrid",
        }
    }
}

/// Errors of cgroup operations. Each names the path it failed on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CgroupError {
    #[error("no cgroup v2 hierarchy: neither /sys/fs/cgroup/cgroup.controllers nor /sys/fs/cgroup/unified/cgroup.procs exists, and heddle has no degraded mode yet")]
    NoV2,
    #[error("cannot read this process's own cgroup from /proc/self/cgroup")]
    OwnCgroup(#[source] io::Error),
    #[error("{0} is not on a cgroup v2 file system")]
    NotCgroup2(PathBuf),
    #[error("--delegated needs a cgroup of its own, as a systemd unit with Delegate=yes gets, but this process is in {0:?}, which is not delegated to heddle; start it from such a unit (deploy/systemd/heddle.service) or drop --delegated")]
    NotDelegated(String),
    #[error("cgroup {0} already exists")]
    Exists(PathBuf),
    #[error("cannot {op} {path}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl CgroupError {
    fn io(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> CgroupError {
        let path = path.to_owned();
        move |source| CgroupError::Io { op, path, source }
    }
}

/// Pick the mode and the default cgroup root. `exists` probes a path; `own_v2` is this process's
/// path in the v2 hierarchy (the `0::` line of `/proc/self/cgroup`).
pub fn detect_mode(exists: impl Fn(&Path) -> bool, own_v2: &str) -> Result<(CgroupMode, PathBuf), CgroupError> {
    if exists(Path::new("/sys/fs/cgroup/cgroup.controllers")) {
        let own = own_v2.trim_start_matches('/');
        let root = Path::new("/sys/fs/cgroup").join(own).join("heddle");
        Ok((CgroupMode::V2, root))
    } else if exists(Path::new("/sys/fs/cgroup/unified/cgroup.procs")) {
        Ok((CgroupMode::Hybrid, PathBuf::from("/sys/fs/cgroup/unified/heddle")))
    } else {
        Err(CgroupError::NoV2)
    }
}

/// This process's path in the v2 hierarchy, from the `0::` line of `/proc/self/cgroup` (`/` when
/// there is no such line).
pub fn own_v2_path() -> Result<String, CgroupError> {
    let text = std::fs::read_to_string("/proc/self/cgroup").map_err(CgroupError::OwnCgroup)?;
    Ok(parse_own_v2(&text).unwrap_or("/").to_owned())
}

fn parse_own_v2(text: &str) -> Option<&str> {
    text.lines().find_map(|l| l.strip_prefix("0::"))
}

/// Check that `dir` (which must exist) lies on a cgroup v2 file system.
pub fn check_cgroup2(dir: &Path) -> Result<(), CgroupError> {
    use nix::sys::statfs::{statfs, CGROUP2_SUPER_MAGIC};
    let fs = statfs(dir).map_err(|e| CgroupError::io("statfs", dir)(e.into()))?;
    if fs.filesystem_type() != CGROUP2_SUPER_MAGIC {
        return Err(CgroupError::NotCgroup2(dir.to_owned()));
    }
    Ok(())
}

/// The privileged cgroup operations the session logic needs on the delegated tree (sessions, kept jobs).
/// [`RealCgroups`] does them; the tests use a recording fake. (A worker's own job cgroups have theirs:
/// `worker::cgroup::CgroupOps`.)
pub trait CgroupTreeOps {
    /// Create one cgroup directory; [`CgroupError::Exists`] if it is already there.
    fn create(&self, dir: &Path) -> Result<(), CgroupError>;
    /// Give `path` (a cgroup directory or one of its files) to `uid:gid`.
    fn chown(&self, path: &Path, uid: u32, gid: u32) -> Result<(), CgroupError>;
    /// Every process in `dir` and its descendants, except those directly in `skip`.
    fn procs(&self, dir: &Path, skip: &Path) -> Result<Vec<ProcInfo>, CgroupError>;
    /// Freeze the subtree (so listing it is not racing forks).
    fn freeze(&self, dir: &Path) -> Result<(), CgroupError>;
    /// `cgroup.kill` the subtree.
    fn kill(&self, dir: &Path) -> Result<(), CgroupError>;
    /// Wait until `cgroup.events` says `populated 0`; false if `timeout` passed first.
    fn wait_empty(&self, dir: &Path, timeout: Duration) -> Result<bool, CgroupError>;
    /// Remove `dir` and every cgroup below it, deepest first.
    fn remove_tree(&self, dir: &Path) -> Result<(), CgroupError>;
}

/// The real [`CgroupTreeOps`], on the cgroup file system.
#[derive(Debug, Default)]
pub struct RealCgroups;

impl CgroupTreeOps for RealCgroups {
    fn create(&self, dir: &Path) -> Result<(), CgroupError> {
        match std::fs::create_dir(dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(CgroupError::Exists(dir.to_owned())),
            Err(e) => Err(CgroupError::io("create cgroup", dir)(e)),
        }
    }

    fn chown(&self, path: &Path, uid: u32, gid: u32) -> Result<(), CgroupError> {
        std::os::unix::fs::lchown(path, Some(uid), Some(gid)).map_err(CgroupError::io("chown", path))
    }

    fn procs(&self, dir: &Path, skip: &Path) -> Result<Vec<ProcInfo>, CgroupError> {
        let mut out = Vec::new();
        collect_procs(dir, dir, skip, &mut out)?;
        // Only the processes a listing carries have their command line read (a fork bomb's are not).
        for p in out.iter_mut().take(shm_proto::procs::MAX_LISTED) {
            p.cmdline = cmdline(p.pid);
        }
        Ok(out)
    }

    fn freeze(&self, dir: &Path) -> Result<(), CgroupError> {
        let path = dir.join("cgroup.freeze");
        std::fs::write(&path, b"1").map_err(CgroupError::io("write", &path))
    }

    fn kill(&self, dir: &Path) -> Result<(), CgroupError> {
        let path = dir.join("cgroup.kill");
        std::fs::write(&path, b"1").map_err(CgroupError::io("write", &path))
    }

    fn wait_empty(&self, dir: &Path, timeout: Duration) -> Result<bool, CgroupError> {
        wait_unpopulated(&dir.join("cgroup.events"), timeout)
    }

    fn remove_tree(&self, dir: &Path) -> Result<(), CgroupError> {
        for sub in subdirs(dir)? {
            self.remove_tree(&sub)?;
        }
        rmdir_retrying(dir)
    }
}

/// The child cgroup directories of `dir`.
fn subdirs(dir: &Path) -> Result<Vec<PathBuf>, CgroupError> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(CgroupError::io("list", dir))? {
        let entry = entry.map_err(CgroupError::io("list", dir))?;
        if entry.file_type().map_err(CgroupError::io("stat", &entry.path()))?.is_dir() {
            out.push(entry.path());
        }
    }
    out.sort();
    Ok(out)
}

fn collect_procs(base: &Path, dir: &Path, skip: &Path, out: &mut Vec<ProcInfo>) -> Result<(), CgroupError> {
    if dir != skip {
        let path = dir.join("cgroup.procs");
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            // The cgroup was removed meanwhile (a job's cgroup the worker cleaned up): nothing in it.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(CgroupError::io("read", &path)(e)),
        };
        let cgroup = dir.strip_prefix(base).unwrap_or(dir).to_string_lossy().into_owned();
        for pid in text.lines().filter_map(|l| l.trim().parse::<u32>().ok()) {
            out.push(ProcInfo { pid, cmdline: String::new(), cgroup: cgroup.clone() });
        }
    }
    for sub in subdirs(dir)? {
        collect_procs(base, &sub, skip, out)?;
    }
    Ok(())
}

/// True when a `cgroup.events` text says `populated 0`.
fn unpopulated(events: &str) -> bool {
    events.lines().any(|l| l.trim() == "populated 0")
}

/// Wait for `populated 0` in `events`: re-read it after each change notification (kernfs signals one
/// with POLLPRI) and at least every 50 ms, until `timeout`.
fn wait_unpopulated(events: &Path, timeout: Duration) -> Result<bool, CgroupError> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let file = std::fs::File::open(events).map_err(CgroupError::io("open", events))?;
    let deadline = Instant::now() + timeout;
    let mut buf = [0u8; 256];
    loop {
        let n = file.read_at(&mut buf, 0).map_err(CgroupError::io("read", events))?;
        if unpopulated(&String::from_utf8_lossy(&buf[..n])) {
            return Ok(true);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(false);
        }
        let ms = left.min(Duration::from_millis(50)).as_millis().max(1) as u16;
        let mut fds = [PollFd::new(file.as_fd(), PollFlags::POLLPRI)];
        match poll(&mut fds, PollTimeout::from(ms)) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(CgroupError::io("poll", events)(e.into())),
        }
    }
}

/// rmdir a cgroup; an emptied cgroup can stay busy for a moment after `populated 0`, so EBUSY is
/// retried for up to a second.
fn rmdir_retrying(dir: &Path) -> Result<(), CgroupError> {
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(CgroupError::io("remove cgroup", dir)(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pure_v2_root_is_under_own_cgroup() {
        let (mode, root) = detect_mode(|p| p.ends_with("cgroup.controllers"), "/system.slice/heddle.service").unwrap();
        assert_eq!(mode, CgroupMode::V2);
        assert_eq!(root, Path::new("/sys/fs/cgroup/system.slice/heddle.service/heddle"));
    }

    #[test]
    fn pure_v2_at_the_root_cgroup() {
        let (_, root) = detect_mode(|p| p.ends_with("cgroup.controllers"), "/").unwrap();
        assert_eq!(root, Path::new("/sys/fs/cgroup/heddle"));
    }

    #[test]
    fn no_v2_mount_is_refused() {
        assert!(matches!(detect_mode(|_| false, "/"), Err(CgroupError::NoV2)));
    }

    #[test]
    fn own_v2_line_is_found_among_v1_lines() {
        let text = "9:name=systemd:/\n4:memory:/x\n0::/user.slice/a\n";
        assert_eq!(parse_own_v2(text), Some("/user.slice/a"));
        assert_eq!(parse_own_v2("4:memory:/x\n"), None);
    }

    #[test]
    fn populated_flag_is_read_from_events() {
        assert!(unpopulated("populated 0\nfrozen 0\n"));
        assert!(!unpopulated("populated 1\nfrozen 0\n"));
    }

    #[test]
    fn cmdline_of_this_process_has_spaces_not_nuls() {
        let text = cmdline(std::process::id());
        assert!(!text.is_empty() && !text.contains('\0'));
    }

    #[test]
    fn remove_tree_removes_nested_plain_dirs() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("session-a");
        std::fs::create_dir_all(root.join("slot-1/inner")).unwrap();
        std::fs::create_dir_all(root.join("worker")).unwrap();
        RealCgroups.remove_tree(&root).unwrap();
        assert!(!root.exists());
    }
}
