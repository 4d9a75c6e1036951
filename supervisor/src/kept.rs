//! Kept jobs: a job's processes moved out of its session into `<root>/kept/NAME`, a cgroup the
//! supervisor owns, so they outlive the session; listing them; ending one; and adopting those an earlier
//! run left behind.
//!
//! Keeping: cgroup v2 cannot move a directory to another parent, so the supervisor creates `kept/NAME`
//! (owned by the keeping uid, so ownership survives a restart; its files stay root's), freezes the job's
//! cgroup (nothing forks while it is emptied), writes each pid into `kept/NAME/cgroup.procs` until the
//! job's `cgroup.procs` reads empty, and thaws the (now empty) job cgroup. A migrated process takes the
//! freezer state of its new cgroup, so it runs on at once. On hybrid hosts the kept processes also leave
//! the session's v1 memory/pids cgroups (for the session's parent v1 cgroup), so the session can be
//! removed at close.
//!
//! On a systemd host with a reachable bus, a kept job should instead become a named transient unit
//! (`StartTransientUnit` with `PIDs=`); that path is future work (docs/cgroups.md), as no systemd runs
//! where this is tested.
//!
//! Invariants: nothing is killed by pid; `kill` is `cgroup.kill` on `kept/NAME`, verified empty, then
//! `rmdir`. Names are `[A-Za-z0-9_.-]{1,64}`, not starting with `.` (one plain directory name).
//!
//! ```no_run
//! use supervisor::kept;
//! let root = std::path::Path::new("/sys/fs/cgroup/unified/heddle");
//! for k in kept::list(root, &Default::default()).unwrap() {
//!     println!("{} ({} processes)", k.name, k.procs.len());
//! }
//! ```

use crate::cgroup::{CgroupError, CgroupTreeOps, RealCgroups};
use shm_proto::control::{KeptInfo, ProcInfo};
use shm_proto::msg::JOB_CGROUP_XATTR as JOB_XATTR;
use shm_proto::procs::ProcList;
use std::collections::BTreeSet;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Errors keeping or ending a kept job.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeptError {
    #[error(transparent)]
    Name(#[from] crate::session::InvalidId),
    #[error("a kept job named {0:?} already exists; choose another name or end it with kept.kill")]
    Exists(String),
    #[error("there is no kept job named {0:?}")]
    Unknown(String),
    #[error("the job's cgroup {0} does not exist (the job ended and its cgroup was removed)")]
    NoJob(PathBuf),
    #[error("the cgroup {0} no longer holds job {1} (the job's processes ended and a later job has it)")]
    NotTheJob(PathBuf, u64),
    #[error("the job's cgroup {0} is empty: nothing of the job runs any more, so nothing was kept")]
    Empty(PathBuf),
    #[error("the job's processes could not all be moved out of {0} (it kept forking?)")]
    NotEmptied(PathBuf),
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
}

/// `<root>/kept`.
pub fn kept_root(root: &Path) -> PathBuf {
    root.join("kept")
}

fn write(path: &Path, value: &str) -> Result<(), CgroupError> {
    std::fs::write(path, value).map_err(|source| CgroupError::Io { op: "write", path: path.to_owned(), source })
}

fn pids(dir: &Path) -> Result<Vec<u32>, CgroupError> {
    let path = dir.join("cgroup.procs");
    let text = std::fs::read_to_string(&path).map_err(|source| CgroupError::Io { op: "read", path, source })?;
    Ok(text.lines().filter_map(|l| l.trim().parse().ok()).collect())
}

/// True for the name of a job cgroup in a session directory: `slot-<N>`.
pub fn is_job_cgroup_name(name: &str) -> bool {
    name.strip_prefix(shm_proto::msg::JOB_CGROUP_PREFIX)
        .is_some_and(|n| !n.is_empty() && n.len() <= 20 && n.bytes().all(|b| b.is_ascii_digit()))
}

/// True when `job_dir` is labelled as job `job`'s cgroup.
fn holds_job(job_dir: &Path, job: u64) -> bool {
    matches!(crate::sys::getxattr(job_dir, JOB_XATTR), Ok(Some(v)) if v == job.to_string().as_bytes())
}

/// Move every process of job `job`'s cgroup `job_dir` into `<root>/kept/<name>` (see the module docs).
/// `v1_parents` are the v1 cgroups the processes move to on hybrid hosts (out of the session's).
///
/// Job cgroups are reused once empty, so the cgroup is frozen first and then its label checked: a worker
/// reusing it labels it before looking at its freezer, and does not take a frozen one (the worker's
/// `cgroup::SessionCgroup`), so a label that still names `job` after the freeze means the processes
/// moved are the job's.
pub fn keep(
    root: &Path,
    (job, job_dir): (u64, &Path),
    name: &str,
    owner_uid: u32,
    v1_parents: &[PathBuf],
) -> Result<KeptInfo, KeptError> {
    crate::session::validate_id(name)?;
    if !job_dir.is_dir() {
        return Err(KeptError::NoJob(job_dir.to_owned()));
    }
    let base = kept_root(root);
    match RealCgroups.create(&base) {
        Ok(()) | Err(CgroupError::Exists(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let dir = base.join(name);
    match RealCgroups.create(&dir) {
        Ok(()) => {}
        Err(CgroupError::Exists(_)) => return Err(KeptError::Exists(name.to_owned())),
        Err(e) => return Err(e.into()),
    }
    RealCgroups.chown(&dir, owner_uid, u32::MAX)?;
    write(&job_dir.join("cgroup.freeze"), "1")?;
    let moved = if holds_job(job_dir, job) {
        migrate(job_dir, &dir, v1_parents)
    } else {
        Err(KeptError::NotTheJob(job_dir.to_owned(), job))
    };
    let _ = write(&job_dir.join("cgroup.freeze"), "0");
    if moved.is_err() {
        let _ = std::fs::remove_dir(&dir);
    }
    moved?;
    Ok(KeptInfo {
        name: name.to_owned(),
        owner_uid,
        cgroup: dir.display().to_string(),
        procs: ProcList::new(procs_of(&dir)),
        adopted: false,
    })
}

fn migrate(from: &Path, to: &Path, v1_parents: &[PathBuf]) -> Result<(), KeptError> {
    for pass in 0..64 {
        let left = match pids(from) {
            // Once processes have moved, the job's cgroup may empty, and the session's worker, watching it,
            // removes an empty job cgroup at once: gone after the first pass means emptied.
            Err(CgroupError::Io { ref source, .. }) if pass > 0 && source.kind() == io::ErrorKind::NotFound => {
                return Ok(());
            }
            other => other?,
        };
        if left.is_empty() {
            return if pass == 0 { Err(KeptError::Empty(from.to_owned())) } else { Ok(()) };
        }
        for pid in left {
            match std::fs::write(to.join("cgroup.procs"), pid.to_string()) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => continue,
                Err(source) => {
                    return Err(CgroupError::Io { op: "move a process into", path: to.to_owned(), source }.into())
                }
            }
            for parent in v1_parents {
                let _ = std::fs::write(parent.join("cgroup.procs"), pid.to_string());
            }
        }
    }
    Err(KeptError::NotEmptied(from.to_owned()))
}

/// The job's processes: everything in `dir` but its output drainer (`dir/drain`, see `kept_output`).
fn procs_of(dir: &Path) -> Vec<ProcInfo> {
    RealCgroups.procs(dir, &dir.join(crate::kept_output::DRAIN_CGROUP)).unwrap_or_default()
}

/// Every kept job under `root`, with its processes; `adopted` names those found at startup.
pub fn list(root: &Path, adopted: &BTreeSet<String>) -> Result<Vec<KeptInfo>, CgroupError> {
    let base = kept_root(root);
    let entries = match std::fs::read_dir(&base) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(CgroupError::Io { op: "list", path: base, source }),
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.is_dir() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        out.push(KeptInfo {
            adopted: adopted.contains(&name),
            owner_uid: meta.uid(),
            cgroup: entry.path().display().to_string(),
            procs: ProcList::new(procs_of(&entry.path())),
            name,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// End the kept job `name`: freeze, list, `cgroup.kill`, wait for `populated 0`, remove.
pub fn kill(root: &Path, name: &str) -> Result<(Vec<ProcInfo>, bool), KeptError> {
    crate::session::validate_id(name)?;
    let dir = kept_root(root).join(name);
    if !dir.is_dir() {
        return Err(KeptError::Unknown(name.to_owned()));
    }
    let cg = RealCgroups;
    cg.freeze(&dir)?;
    let killed = procs_of(&dir);
    cg.kill(&dir)?;
    let empty = cg.wait_empty(&dir, Duration::from_secs(5))?;
    let removed = empty && cg.remove_tree(&dir).is_ok();
    Ok((killed, removed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listing_reads_names_and_owners_from_directories() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("kept/web")).unwrap();
        let adopted: BTreeSet<String> = ["web".to_owned()].into();
        let got = list(tmp.path(), &adopted).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].name.as_str(), got[0].adopted), ("web", true));
        assert_eq!(got[0].owner_uid, nix::unistd::geteuid().as_raw());
        assert!(list(&tmp.path().join("none"), &adopted).unwrap().is_empty());
    }

    #[test]
    fn bad_names_and_missing_jobs_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        assert!(matches!(keep(tmp.path(), (9, tmp.path()), "../x", 0, &[]), Err(KeptError::Name(_))));
        let gone = tmp.path().join("slot-9");
        assert!(matches!(keep(tmp.path(), (9, &gone), "x", 0, &[]), Err(KeptError::NoJob(_))));
        assert!(is_job_cgroup_name("slot-12"));
        for bad in ["slot-", "slot-1/..", "../slot-1", "worker", "job-3", "slot-1a", "shell"] {
            assert!(!is_job_cgroup_name(bad), "{bad}");
        }
        assert!(matches!(kill(tmp.path(), "nope"), Err(KeptError::Unknown(_))));
    }

    #[test]
    fn a_job_cgroup_labelled_for_another_job_is_not_kept() {
        // Plain directories stand in for the cgroups: the label check and its refusal work the same way.
        let tmp = tempfile::tempdir().unwrap();
        let slot = tmp.path().join("session-a/slot-1");
        std::fs::create_dir_all(&slot).unwrap();
        std::fs::write(slot.join("cgroup.procs"), "").unwrap();
        let uid = nix::unistd::geteuid().as_raw();
        let refused = keep(tmp.path(), (9, &slot), "late", uid, &[]);
        assert!(matches!(refused, Err(KeptError::NotTheJob(_, 9))), "no label: {refused:?}");
        let label = |v: &str| {
            let path = std::ffi::CString::new(slot.as_os_str().as_encoded_bytes()).unwrap();
            crate::sys::setxattr(&path, JOB_XATTR, v.as_bytes()).unwrap();
        };
        label("12");
        let refused = keep(tmp.path(), (9, &slot), "late", uid, &[]);
        assert!(matches!(refused, Err(KeptError::NotTheJob(_, 9))), "job 12's now: {refused:?}");
        assert!(!kept_root(tmp.path()).join("late").exists(), "nothing is left of a refused keep");
        assert_eq!(std::fs::read_to_string(slot.join("cgroup.freeze")).unwrap(), "0", "thawed again");
        label("9");
        let empty = keep(tmp.path(), (9, &slot), "late", uid, &[]);
        assert!(matches!(empty, Err(KeptError::Empty(_))), "labelled for job 9, but nothing in it: {empty:?}");
        assert!(!kept_root(tmp.path()).join("late").exists());
    }
}
