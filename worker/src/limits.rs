//! The session's v1 cgroups on hybrid hosts (`memory`, `pids`), found from `/proc/self/cgroup`: the
//! supervisor attached the worker there before exec, and jobs inherit the membership. The worker only
//! reads them: `memory.oom_control` (`oom_kill N`), `pids.events` (`max N`), `pids.max`. On pure v2
//! hosts the same counters are the session cgroup's own (`memory.events`, `pids.events`, `pids.max`:
//! the parent of the worker's `0::` cgroup), when the supervisor turned the controllers on.
//!
//! Only a v1 cgroup named `session-*` counts: a worker started without limits sits in whatever v1
//! cgroup the supervisor had, whose counters belong to other processes.
//!
//! ```
//! use worker::limits::V1Session;
//! let v1 = V1Session::parse("4:memory:/heddle/session-a\n8:pids:/heddle/session-a\n0::/x\n", "/sys/fs/cgroup");
//! assert_eq!(v1.memory.unwrap().to_str(), Some("/sys/fs/cgroup/memory/heddle/session-a"));
//! ```

use std::fs::File;
use std::path::{Path, PathBuf};

/// The session's v1 `memory` and `pids` cgroup directories, when the worker is in them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct V1Session {
    pub memory: Option<PathBuf>,
    pub pids: Option<PathBuf>,
}

impl V1Session {
    /// The worker's own v1 session cgroups.
    pub fn detect() -> V1Session {
        let text = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let mut found = V1Session::parse(&text, "/sys/fs/cgroup");
        if found == V1Session::default() {
            found = V1Session::parse_v2(&text, "/sys/fs/cgroup");
        }
        found
    }

    /// Pure v2: the session cgroup (parent of the worker's `0::` cgroup, named `session-*`), for each
    /// counter file it has.
    pub fn parse_v2(text: &str, mount: &str) -> V1Session {
        let session = text.lines().find_map(|l| {
            let path = Path::new(l.strip_prefix("0::")?).parent()?;
            let rel = path.strip_prefix("/").ok()?;
            path.file_name()?.to_str()?.starts_with("session-").then(|| Path::new(mount).join(rel))
        });
        let with = |file: &str| session.clone().filter(|d| d.join(file).exists());
        V1Session { memory: with("memory.events"), pids: with("pids.events") }
    }

    /// From the text of `/proc/self/cgroup`, with the v1 hierarchies mounted under `mount`.
    pub fn parse(text: &str, mount: &str) -> V1Session {
        let find = |controller: &str| {
            text.lines().find_map(|l| {
                let mut parts = l.splitn(3, ':');
                let (_, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
                let is_session = Path::new(path).file_name()?.to_str()?.starts_with("session-");
                (ctrls.split(',').any(|c| c == controller) && is_session)
                    .then(|| Path::new(mount).join(controller).join(path.trim_start_matches('/')))
            })
        };
        V1Session { memory: find("memory"), pids: find("pids") }
    }

    /// The session's `pids.max` (`None`: unlimited or unknown).
    pub fn pids_max(&self) -> Option<u64> {
        std::fs::read_to_string(self.pids.as_deref()?.join("pids.max")).ok()?.trim().parse().ok()
    }
}

/// The session's two counter files, opened once: each job reads them at its start and at its end, and
/// a `pread` of a file kept open costs a fraction of an open, read and close.
#[derive(Debug, Default)]
pub struct Counters {
    /// `memory.oom_control` (v1) or `memory.events` (v2); both say `oom_kill N`.
    oom: Option<File>,
    /// `pids.events` (`max N`).
    pids: Option<File>,
}

impl Counters {
    /// Open the counter files of `v1`'s cgroups (a missing one is never read).
    pub fn open(v1: &V1Session) -> Counters {
        let open = |dir: &Path, file: &str| File::open(dir.join(file)).ok();
        let memory = v1.memory.as_deref();
        Counters {
            oom: memory.and_then(|d| open(d, "memory.oom_control").or_else(|| open(d, "memory.events"))),
            pids: v1.pids.as_deref().and_then(|d| open(d, "pids.events")),
        }
    }

    /// How many times the OOM killer killed a process of the session.
    pub fn oom_kills(&self) -> Option<u64> {
        read_key(self.oom.as_ref()?, "oom_kill")
    }

    /// How many forks failed on the session's `pids.max`.
    pub fn pids_failures(&self) -> Option<u64> {
        read_key(self.pids.as_ref()?, "max")
    }
}

fn read_key(file: &File, key: &str) -> Option<u64> {
    let text = crate::cgroup::pread_all(file).ok()?;
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok())?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_session_cgroups_count() {
        let v1 = V1Session::parse("4:memory:/process_api/abc\n8:pids:/\n", "/sys/fs/cgroup");
        assert_eq!(v1, V1Session::default());
    }

    #[test]
    fn counters_are_read_by_key() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        std::fs::write(dir.join("memory.oom_control"), "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n").unwrap();
        std::fs::write(dir.join("pids.events"), "max 7\n").unwrap();
        std::fs::write(dir.join("pids.max"), "64\n").unwrap();
        let v1 = V1Session { memory: Some(dir.clone()), pids: Some(dir.clone()) };
        let kept = Counters::open(&v1);
        assert_eq!((kept.oom_kills(), kept.pids_failures(), v1.pids_max()), (Some(3), Some(7), Some(64)));
        // The worker keeps the files open and reads them again at every job's start and end.
        std::fs::write(dir.join("memory.oom_control"), "oom_kill_disable 0\nunder_oom 0\noom_kill 4\n").unwrap();
        std::fs::write(dir.join("pids.events"), "max 12\n").unwrap();
        assert_eq!((kept.oom_kills(), kept.pids_failures()), (Some(4), Some(12)));
        let none = Counters::open(&V1Session::default());
        assert_eq!((none.oom_kills(), none.pids_failures()), (None, None));
    }

    #[test]
    fn pure_v2_uses_the_session_cgroup_when_it_has_the_counters() {
        let tmp = tempfile::tempdir().unwrap();
        let mount = tmp.path().join("v2");
        let session = mount.join("heddle/session-a");
        std::fs::create_dir_all(session.join("worker")).unwrap();
        let text = "0::/heddle/session-a/worker\n";
        assert_eq!(V1Session::parse_v2(text, mount.to_str().unwrap()), V1Session::default(), "no controllers on");
        std::fs::write(session.join("memory.events"), "oom 1\noom_kill 1\n").unwrap();
        std::fs::write(session.join("pids.events"), "max 0\n").unwrap();
        let v2 = V1Session::parse_v2(text, mount.to_str().unwrap());
        assert_eq!(v2.memory.as_deref(), Some(session.as_path()));
        let v2 = Counters::open(&v2);
        assert_eq!((v2.oom_kills(), v2.pids_failures()), (Some(1), Some(0)));
        assert_eq!(V1Session::parse_v2("0::/other/worker\n", mount.to_str().unwrap()), V1Session::default());
    }
}
