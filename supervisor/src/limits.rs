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
//! On pure cgroup v2 ([`enable_v2`], [`apply_v2`], [`usage_v2`]) the same limits go on the session
//! cgroup itself: the supervisor enables `memory` and `pids` in the root's `cgroup.subtree_control` at
//! start, writes `memory.max` (with `memory.swap.max` 0, as v1's `memsw` limit equal to the memory
//! limit allows no swap beyond it) and `pids.max` on `session-<ID>` before its worker starts, and
//! enables the controllers in the session's own `cgroup.subtree_control` so every job cgroup gets its
//! own `memory.peak`/`memory.events`. Those files of `session-<ID>` stay root's (delegation hands the
//! worker only `cgroup.procs`, `cgroup.threads` and `cgroup.subtree_control`), so a worker cannot raise
//! its own limit. Accounting: `memory.peak`, `memory.events` (`oom_kill`), `pids.events` (`max`). This
//! host is hybrid, so the v2 path is tested on a directory of plain files standing in for cgroupfs.
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

/// Pure v2: enable `memory` and `pids` (those the root offers) in `root`'s `cgroup.subtree_control`;
/// returns the ones now on.
pub fn enable_v2(root: &Path) -> Result<Vec<&'static str>, CgroupError> {
    let path = root.join("cgroup.controllers");
    let offered = std::fs::read_to_string(&path).map_err(io("read", &path))?;
    let mut on = Vec::new();
    for c in CONTROLLERS.into_iter().filter(|c| offered.split_whitespace().any(|o| o == *c)) {
        let ctl = root.join("cgroup.subtree_control");
        std::fs::write(&ctl, format!("+{c}")).map_err(io("write", &ctl))?;
        on.push(c);
    }
    Ok(on)
}

/// Pure v2: write `limits` on the session cgroup `dir` and enable the controllers for its children
/// (per-job accounting). A controller the session does not offer is skipped.
pub fn apply_v2(dir: &Path, limits: &SessionLimits) -> Result<(), CgroupError> {
    let w = |file: &str, v: u64| {
        let p = dir.join(file);
        std::fs::write(&p, v.to_string()).map_err(io("write", &p))
    };
    if let (true, Some(m)) = (dir.join("memory.max").exists(), limits.memory_max) {
        w("memory.max", m)?;
        if dir.join("memory.swap.max").exists() {
            w("memory.swap.max", 0)?;
        }
    }
    if let (true, Some(p)) = (dir.join("pids.max").exists(), limits.pids_max) {
        w("pids.max", p)?;
    }
    let offered = std::fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
    for c in CONTROLLERS.into_iter().filter(|c| offered.split_whitespace().any(|o| o == *c)) {
        let ctl = dir.join("cgroup.subtree_control");
        std::fs::write(&ctl, format!("+{c}")).map_err(io("write", &ctl))?;
    }
    Ok(())
}

/// Pure v2: the session's limits and accounting from its cgroup `dir`.
pub fn usage_v2(dir: &Path, limits: &SessionLimits) -> SessionLimits {
    SessionLimits {
        memory_max: limits.memory_max,
        pids_max: limits.pids_max,
        memory_peak: read_num(dir, "memory.peak"),
        oom_kills: read_key(dir, "memory.events", "oom_kill"),
        pids_limited: read_key(dir, "pids.events", "max"),
        dirs: vec![dir.display().to_string()],
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

    /// A directory of plain files standing in for a pure-v2 cgroup.
    fn fake_v2(files: &[(&str, &str)]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for (name, text) in files {
            std::fs::write(d.path().join(name), text).unwrap();
        }
        d
    }

    #[test]
    fn v2_root_enables_only_offered_controllers() {
        let d = fake_v2(&[("cgroup.controllers", "cpu pids\n"), ("cgroup.subtree_control", "")]);
        assert_eq!(enable_v2(d.path()).unwrap(), vec!["pids"]);
        assert_eq!(std::fs::read_to_string(d.path().join("cgroup.subtree_control")).unwrap(), "+pids");
        let none = fake_v2(&[]);
        assert!(enable_v2(none.path()).is_err(), "no cgroup.controllers: not a v2 cgroup");
    }

    #[test]
    fn v2_session_gets_its_limits_no_swap_and_per_job_controllers() {
        let files = [
            ("cgroup.controllers", "memory pids"),
            ("cgroup.subtree_control", ""),
            ("memory.max", "max"),
            ("memory.swap.max", "max"),
            ("pids.max", "max"),
        ];
        let d = fake_v2(&files);
        let limits = SessionLimits { memory_max: Some(64 << 20), pids_max: Some(64), ..Default::default() };
        apply_v2(d.path(), &limits).unwrap();
        let read = |f: &str| std::fs::read_to_string(d.path().join(f)).unwrap();
        assert_eq!(
            (read("memory.max"), read("memory.swap.max"), read("pids.max")),
            ("67108864".into(), "0".into(), "64".into())
        );
        assert_eq!(
            read("cgroup.subtree_control"),
            "+pids",
            "each controller enabled in turn (a plain file keeps the last)"
        );
        std::fs::write(d.path().join("memory.peak"), "5000\n").unwrap();
        std::fs::write(d.path().join("memory.events"), "low 0\nhigh 0\nmax 4\noom 2\noom_kill 2\n").unwrap();
        std::fs::write(d.path().join("pids.events"), "max 9\n").unwrap();
        let u = usage_v2(d.path(), &limits);
        assert_eq!((u.memory_peak, u.oom_kills, u.pids_limited), (Some(5000), Some(2), Some(9)));
        assert_eq!(u.memory_max, Some(64 << 20));
    }

    #[test]
    fn v2_session_without_limits_writes_nothing_but_enables_children() {
        let d = fake_v2(&[("cgroup.controllers", "memory"), ("cgroup.subtree_control", ""), ("memory.max", "max")]);
        apply_v2(d.path(), &SessionLimits::default()).unwrap();
        assert_eq!(std::fs::read_to_string(d.path().join("memory.max")).unwrap(), "max");
        assert_eq!(std::fs::read_to_string(d.path().join("cgroup.subtree_control")).unwrap(), "+memory");
    }

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
