//! `--delegated`: the supervisor runs in a cgroup delegated to it, as a systemd unit with `Delegate=yes`
//! gets (`deploy/systemd/heddle.service`). cgroup v2 lets a cgroup enable controllers for its children
//! only while it holds no process itself (the no-internal-process rule), and a unit's processes (`heddle
//! up`, the supervisor, the front) start in the unit's own cgroup. So the supervisor first moves every
//! process of that cgroup into its `supervisor` leaf, then enables the memory/pids controllers the
//! cgroup offers in its `cgroup.subtree_control`, and the cgroup root defaults to `<unit>/heddle`:
//!
//! ```text
//! <unit cgroup>/                 e.g. /sys/fs/cgroup/system.slice/heddle.service (no process)
//! ├── supervisor/                heddle up, the supervisor, the front
//! └── heddle/                    the cgroup root: session-<ID>/, kept/ (docs/cgroups.md)
//! ```
//!
//! A supervisor that `heddle up` restarts, or that systemd's `DelegateSubgroup=supervisor` (systemd 254+)
//! already started in the leaf, finds itself in `…/supervisor`: the delegated cgroup is the leaf's parent
//! and nothing needs moving.
//!
//! In a container with a cgroup namespace of its own (the default on cgroup v2 runtimes), `/proc/self/
//! cgroup` says `/`: the namespace's root is the container's cgroup, and that is the delegated one.
//!
//! Invariant: only the delegated cgroup (this process's own, or the leaf's parent) and its `supervisor`
//! child are written; a process in the host's root cgroup refuses, since the whole machine is not
//! delegated.
//!
//! ```
//! use supervisor::delegated::delegated_cgroup;
//! assert_eq!(delegated_cgroup("/system.slice/heddle.service").as_deref(), Some("system.slice/heddle.service"));
//! assert_eq!(delegated_cgroup("/system.slice/heddle.service/supervisor").as_deref(), Some("system.slice/heddle.service"));
//! assert_eq!(delegated_cgroup("/"), None);
//! ```

use crate::cgroup::CgroupError;
use crate::limits::CONTROLLERS;
use std::io;
use std::path::{Path, PathBuf};

/// The leaf the unit's processes move into.
pub const LEAF: &str = "supervisor";
/// The cgroup root's name under the delegated cgroup, when `--cgroup-root` is not given.
pub const ROOT_NAME: &str = "heddle";
/// How many passes of moving may find new processes (a process forking while it is moved) before the
/// move gives up.
const MOVE_PASSES: usize = 100;

/// The delegated cgroup, relative to the v2 mount, from this process's own v2 path (`/proc/self/cgroup`'s
/// `0::` line): that path, or its parent when it is the [`LEAF`]; `None` for the root cgroup.
pub fn delegated_cgroup(own: &str) -> Option<String> {
    let own = own.trim_matches('/');
    let unit = match own.rsplit_once('/') {
        Some((parent, LEAF)) => parent,
        _ if own == LEAF => return None,
        _ => own,
    };
    (!unit.is_empty()).then(|| unit.to_owned())
}

/// The delegated cgroup's directory under the v2 mount `mount`, or an error saying why there is none.
/// `private_ns`: this process has a cgroup namespace of its own (a container's), whose root — `/` seen
/// from inside — is the container's cgroup, which the runtime gave it whole (deploy/kubernetes).
pub fn unit_dir(mount: &Path, own: &str, private_ns: bool) -> Result<PathBuf, CgroupError> {
    match delegated_cgroup(own) {
        Some(rel) => Ok(mount.join(rel)),
        None if private_ns && matches!(own.trim_matches('/'), "" | LEAF) => Ok(mount.to_owned()),
        None => Err(CgroupError::NotDelegated(own.to_owned())),
    }
}

/// The inode of the initial cgroup namespace (the kernel's `CGROUP_NS_INIT_INO`).
const INIT_CGROUP_NS: &str = "cgroup:[4026531835]";

/// True when this process is in a cgroup namespace other than the host's (`/proc/self/ns/cgroup`).
pub fn in_private_cgroup_ns() -> bool {
    std::fs::read_link("/proc/self/ns/cgroup").is_ok_and(|l| l.as_os_str() != INIT_CGROUP_NS)
}

/// Move every process of `unit` into `unit/supervisor` (made if missing), then enable in `unit`'s
/// `cgroup.subtree_control` each of memory and pids that `unit` offers. Returns the leaf and the
/// controllers enabled; an error names the file it failed on.
pub fn take_leaf(unit: &Path) -> Result<(PathBuf, Vec<&'static str>), CgroupError> {
    let leaf = unit.join(LEAF);
    match std::fs::create_dir(&leaf) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(source) => return Err(CgroupError::Io { op: "create", path: leaf, source }),
    }
    let procs = unit.join("cgroup.procs");
    let target = leaf.join("cgroup.procs");
    let mut emptied = false;
    for _ in 0..MOVE_PASSES {
        let text = std::fs::read_to_string(&procs).map_err(|source| CgroupError::Io {
            op: "read",
            path: procs.clone(),
            source,
        })?;
        let pids: Vec<&str> = text.split_whitespace().collect();
        if pids.is_empty() {
            emptied = true;
            break;
        }
        for pid in pids {
            match std::fs::write(&target, pid) {
                Ok(()) => {}
                // It exited meanwhile.
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                Err(source) => return Err(CgroupError::Io { op: "move a process into", path: target, source }),
            }
        }
    }
    if !emptied {
        return Err(CgroupError::Io {
            op: "empty",
            path: unit.to_owned(),
            source: io::Error::other(format!("processes kept appearing after {MOVE_PASSES} passes of moving")),
        });
    }
    let offered_path = unit.join("cgroup.controllers");
    let offered = std::fs::read_to_string(&offered_path).map_err(|source| CgroupError::Io {
        op: "read",
        path: offered_path,
        source,
    })?;
    let control = unit.join("cgroup.subtree_control");
    let mut on = Vec::new();
    for c in CONTROLLERS.into_iter().filter(|c| offered.split_whitespace().any(|o| o == *c)) {
        std::fs::write(&control, format!("+{c}")).map_err(|source| CgroupError::Io {
            op: "write",
            path: control.clone(),
            source,
        })?;
        on.push(c);
    }
    Ok((leaf, on))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unit_is_the_own_cgroup_or_the_leafs_parent() {
        assert_eq!(delegated_cgroup("/a/b.service").as_deref(), Some("a/b.service"));
        assert_eq!(delegated_cgroup("/a/b.service/supervisor").as_deref(), Some("a/b.service"));
        assert_eq!(delegated_cgroup("/b.service").as_deref(), Some("b.service"));
        assert_eq!(delegated_cgroup("/"), None);
        assert_eq!(delegated_cgroup(""), None);
        // A leaf directly under the root cgroup: its parent is the whole machine.
        assert_eq!(delegated_cgroup("/supervisor"), None);
    }

    #[test]
    fn the_root_cgroup_is_refused_with_a_sentence() {
        let e = unit_dir(Path::new("/sys/fs/cgroup"), "/", false).unwrap_err();
        assert!(e.to_string().contains("Delegate=yes"), "{e}");
        assert_eq!(unit_dir(Path::new("/m"), "/x/y", false).unwrap(), Path::new("/m/x/y"));
        assert_eq!(unit_dir(Path::new("/m"), "/x/y/supervisor", true).unwrap(), Path::new("/m/x/y"));
    }

    #[test]
    fn a_containers_own_cgroup_namespace_root_is_delegated() {
        // Inside a pod with a private cgroup namespace, /proc/self/cgroup says `0::/`.
        assert_eq!(unit_dir(Path::new("/sys/fs/cgroup"), "/", true).unwrap(), Path::new("/sys/fs/cgroup"));
        assert_eq!(unit_dir(Path::new("/sys/fs/cgroup"), "/supervisor", true).unwrap(), Path::new("/sys/fs/cgroup"));
        // This test runs in the host's namespace.
        assert!(!in_private_cgroup_ns());
    }

    #[test]
    fn processes_move_and_controllers_are_enabled_on_plain_files() {
        // cgroupfs stands in as plain files: a write to cgroup.procs appends here, so the move loop
        // cannot see the unit empty; what is checked is that it gives up with a sentence, not forever.
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("cgroup.procs"), "1\n").unwrap();
        std::fs::write(tmp.path().join("cgroup.controllers"), "cpu memory pids\n").unwrap();
        let e = take_leaf(tmp.path()).unwrap_err();
        assert!(e.to_string().contains("empty"), "{e}");
        std::fs::write(tmp.path().join("cgroup.procs"), "").unwrap();
        let (leaf, on) = take_leaf(tmp.path()).unwrap();
        assert_eq!(leaf, tmp.path().join(LEAF));
        assert_eq!(on, ["memory", "pids"]);
    }
}
