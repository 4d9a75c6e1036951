//! Session limits and accounting on hybrid hosts: the v1 `memory` and `pids` hierarchies.
//!
//! The supervisor creates `/sys/fs/cgroup/{memory,pids}/<root name>/session-<ID>` (only directories of
//! its own, named after its cgroup root, so parallel test stacks stay apart), writes
//! `memory.limit_in_bytes` (and `memory.memsw.limit_in_bytes` where swap accounting exists) and
//! `pids.max`, and attaches the worker to them before it execs (jobs inherit v1 membership). They are
//! removed when the session's v2 subtree is, and the `<root name>` parents at shutdown when this run
//! created them. Accounting read from them: `memory.max_usage_in_bytes` (peak), `memory.oom_control`
//! (`oom_kill`), `pids.events` (`max`).
//!
//! On pure cgroup v2 the same limits belong on the session cgroup (`memory.max`, `pids.max`) with the
//! controllers enabled in the root's `cgroup.subtree_control`, and `memory.peak` per job; that path is
//! documented in docs/cgroups.md and not built yet (no pure-v2 host to test on).
//!
//! ```no_run
//! use supervisor::limits::V1Root;
//! let v1 = V1Root::for_root(std::path::Path::new("/sys/fs/cgroup/unified/heddle")).unwrap();
//! assert!(v1.session_dirs("demo")[0].ends_with("memory/heddle/session-demo"));
//! ```

use crate::cgroup::CgroupError;
use shm_proto::control::SessionLimits;
use std::path::{Path, PathBuf};

/// The v1 controllers heddle uses.
pub const CONTROLLERS: [&str; 2] = ["memory", "pids"];

/// `/sys/fs/cgroup/{memory,pids}/<root name>`.
#[derive(Clone, Debug)]
pub struct V1Root {
    pub dirs: Vec<PathBuf>,
    /// Which of `dirs` this run created.
    pub created: Vec<PathBuf>,
}

fn io(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> CgroupError {
    let path = path.to_owned();
    move |source| CgroupError::Io { op, path, source }
}

impl V1Root {
    /// The v1 parents for the v2 cgroup root `root`, when this host mounts the v1 controllers.
    pub fn for_root(root: &Path) -> Option<V1Root> {
        let name = root.file_name()?;
        let dirs: Vec<PathBuf> = CONTROLLERS
            .iter()
            .map(|c| Path::new("/sys/fs/cgroup").join(c))
            .filter(|m| m.join("cgroup.procs").exists())
            .map(|m| m.join(name))
            .collect();
        (!dirs.is_empty()).then_some(V1Root { dirs, created: Vec::new() })
    }

    /// Create the parents that are missing.
    pub fn ensure(&mut self) -> Result<(), CgroupError> {
        for d in &self.dirs {
            if !d.exists() {
                std::fs::create_dir(d).map_err(io("create cgroup", d))?;
                self.created.push(d.clone());
            }
        }
        Ok(())
    }

    /// The session's v1 directories.
    pub fn session_dirs(&self, id: &str) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.join(format!("session-{id}"))).collect()
    }

    /// Create the session's v1 directories and write its limits; on error, remove what was created.
    pub fn create_session(&self, id: &str, limits: &SessionLimits) -> Result<Vec<PathBuf>, CgroupError> {
        let mut made = Vec::new();
        let result = self.session_dirs(id).into_iter().try_for_each(|d| {
            std::fs::create_dir(&d).map_err(io("create cgroup", &d))?;
            made.push(d.clone());
            apply(&d, limits)
        });
        match result {
            Ok(()) => Ok(made),
            Err(e) => {
                remove_dirs(&made);
                Err(e)
            }
        }
    }

    /// Remove the parents at shutdown (named after our cgroup root, so ours even when an earlier run
    /// created them); a parent still holding kept processes is not empty and stays.
    pub fn remove_created(&self) {
        for d in &self.dirs {
            let _ = std::fs::remove_dir(d);
        }
    }

    /// Remove leftover `session-*` directories of an earlier run (their processes died with the v2
    /// subtree).
    pub fn remove_stale_sessions(&self) -> usize {
        let mut n = 0;
        for d in &self.dirs {
            for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
                if e.file_name().to_string_lossy().starts_with("session-") && std::fs::remove_dir(e.path()).is_ok() {
                    n += 1;
                }
            }
        }
        n
    }
}

fn apply(dir: &Path, limits: &SessionLimits) -> Result<(), CgroupError> {
    let w = |file: &str, v: u64| {
        let p = dir.join(file);
        std::fs::write(&p, v.to_string()).map_err(io("write", &p))
    };
    if dir.join("memory.limit_in_bytes").exists() {
        if let Some(m) = limits.memory_max {
            w("memory.limit_in_bytes", m)?;
            if dir.join("memory.memsw.limit_in_bytes").exists() {
                // Without it the limit could be dodged by swapping; absent when swap accounting is off.
                let _ = w("memory.memsw.limit_in_bytes", m);
            }
        }
    }
    if dir.join("pids.max").exists() {
        if let Some(p) = limits.pids_max {
            w("pids.max", p)?;
        }
    }
    Ok(())
}

/// rmdir each directory, retrying EBUSY for a moment (a v1 cgroup can stay busy just after its last
/// process exited).
pub fn remove_dirs(dirs: &[PathBuf]) {
    for d in dirs {
        for _ in 0..100 {
            match std::fs::remove_dir(d) {
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                    std::thread::sleep(std::time::Duration::from_millis(10))
                }
                _ => break,
            }
        }
    }
}

fn read_key(dir: &Path, file: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(dir.join(file)).ok()?;
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok())?
    })
}

fn read_num(dir: &Path, file: &str) -> Option<u64> {
    std::fs::read_to_string(dir.join(file)).ok()?.trim().parse().ok()
}

/// The session's limits and accounting from its v1 directories.
pub fn usage(dirs: &[PathBuf], limits: &SessionLimits) -> SessionLimits {
    let mem = dirs.iter().find(|d| d.join("memory.oom_control").exists());
    let pids = dirs.iter().find(|d| d.join("pids.events").exists());
    SessionLimits {
        memory_max: limits.memory_max,
        pids_max: limits.pids_max,
        memory_peak: mem.and_then(|d| read_num(d, "memory.max_usage_in_bytes")),
        oom_kills: mem.and_then(|d| read_key(d, "memory.oom_control", "oom_kill")),
        pids_limited: pids.and_then(|d| read_key(d, "pids.events", "max")),
        dirs: dirs.iter().map(|d| d.display().to_string()).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_written_to_the_files_that_exist() {
        let tmp = tempfile::tempdir().unwrap();
        for f in ["memory.limit_in_bytes", "pids.max", "memory.oom_control", "pids.events"] {
            std::fs::write(tmp.path().join(f), "").unwrap();
        }
        let limits = SessionLimits { memory_max: Some(64 << 20), pids_max: Some(64), ..Default::default() };
        apply(tmp.path(), &limits).unwrap();
        assert_eq!(std::fs::read_to_string(tmp.path().join("memory.limit_in_bytes")).unwrap(), "67108864");
        assert_eq!(std::fs::read_to_string(tmp.path().join("pids.max")).unwrap(), "64");
        std::fs::write(tmp.path().join("memory.oom_control"), "oom_kill_disable 0\noom_kill 2\n").unwrap();
        std::fs::write(tmp.path().join("pids.events"), "max 5\n").unwrap();
        let u = usage(&[tmp.path().to_owned()], &limits);
        assert_eq!((u.oom_kills, u.pids_limited, u.pids_max), (Some(2), Some(5), Some(64)));
    }
}
