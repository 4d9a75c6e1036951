//! Projects another uid owns (`--allow-owned-projects DIR`): a session opened by root (or by the
//! project's owner) in a project beneath DIR that its jobs' uid does not own sees the project through an
//! idmapped mount in its worker's mount namespace. Through the mount the owner's files are the job
//! uid's, and what jobs create is stored as the owner's, so nothing on disk carries the session's uid and
//! nobody runs `chmod 777`. Owns the decision ([`decide`]), the detached idmapped tree ([`prepare`]) and
//! the plan the worker's child applies before it drops privileges (`sys::ChildPlan`). See
//! docs/architecture.md, "Projects another uid owns".

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A project to map for a session: its real path and its owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedProject {
    pub path: PathBuf,
    pub owner_uid: u32,
    pub owner_gid: u32,
}

/// The detached idmapped tree, ready to be moved onto `target` in the worker's new mount namespace.
#[derive(Debug)]
pub struct ProjectMount {
    pub tree: OwnedFd,
    pub target: CString,
}

/// Whether session's project `project` is mapped: it lies strictly beneath one of `allowed` (both
/// resolved), is a directory, and the client is root or the project's owner (a user never maps someone
/// else's files to itself). `None` when the rule does not apply: the session sees the project's own
/// permissions. Whether the jobs' uid already owns it is checked at spawn, when that uid is known.
pub fn decide(project: &Path, allowed: &[PathBuf], client_uid: u32) -> Option<OwnedProject> {
    if allowed.is_empty() {
        return None;
    }
    let path = std::fs::canonicalize(project).ok()?;
    let beneath = allowed.iter().any(|a| path.starts_with(a) && path != *a);
    if !beneath {
        return None;
    }
    let meta = std::fs::metadata(&path).ok()?;
    if !meta.is_dir() || (client_uid != 0 && client_uid != meta.uid()) {
        return None;
    }
    Some(OwnedProject { path, owner_uid: meta.uid(), owner_gid: meta.gid() })
}

/// Resolve `--allow-owned-projects` directories; `/` is refused (every directory would be a project).
pub fn allowed_dirs(dirs: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::with_capacity(dirs.len());
    for d in dirs {
        let real = std::fs::canonicalize(d).map_err(|e| format!("--allow-owned-projects {}: {e}", d.display()))?;
        if real == Path::new("/") {
            return Err(
                "--allow-owned-projects /: every directory would be a project; name the directory that holds projects"
                    .into(),
            );
        }
        out.push(real);
    }
    Ok(out)
}

/// Make the detached tree of `p` with the owner's ids shown as `uid`/`gid` (and the other way for
/// writes), `nosuid` and `nodev`.
pub fn prepare(p: &OwnedProject, uid: u32, gid: u32) -> io::Result<ProjectMount> {
    let target = CString::new(p.path.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let userns =
        crate::sys::mapping_namespace(&format!("{} {uid} 1\n", p.owner_uid), &format!("{} {gid} 1\n", p.owner_gid))?;
    let tree = crate::sys::open_tree_clone(&target)?;
    crate::sys::idmap_tree(tree.as_fd(), userns.as_fd())?;
    Ok(ProjectMount { tree, target })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn only_projects_strictly_beneath_an_allowed_dir_and_only_for_root_or_the_owner() {
        let tmp = tempfile::tempdir().unwrap();
        let allowed = allowed_dirs(&[tmp.path().to_owned()]).unwrap();
        let proj = tmp.path().join("p");
        std::fs::create_dir(&proj).unwrap();
        std::fs::set_permissions(&proj, std::fs::Permissions::from_mode(0o755)).unwrap();
        let owner = std::fs::metadata(&proj).unwrap().uid();
        let d = decide(&proj, &allowed, 0).expect("root maps a project beneath an allowed dir");
        assert_eq!((d.owner_uid, d.path.clone()), (owner, std::fs::canonicalize(&proj).unwrap()));
        assert_eq!(decide(&proj, &allowed, owner), Some(d), "its owner maps it too");
        assert_eq!(decide(&proj, &allowed, owner + 12345), None, "another user never maps it");
        assert_eq!(decide(tmp.path(), &allowed, 0), None, "the allowed dir itself is not a project");
        assert_eq!(decide(&proj, &[], 0), None, "nothing is mapped without --allow-owned-projects");
        assert_eq!(decide(Path::new("/etc"), &allowed, 0), None);
        assert!(allowed_dirs(&[PathBuf::from("/")]).is_err());
        // A link into the allowed dir from outside resolves to the real path; one out of it is refused.
        let out = tempfile::tempdir().unwrap();
        let link = out.path().join("l");
        std::os::unix::fs::symlink(&proj, &link).unwrap();
        assert!(decide(&link, &allowed, 0).is_some());
        let link_out = proj.join("etc");
        std::os::unix::fs::symlink("/etc", &link_out).unwrap();
        assert_eq!(decide(&link_out, &allowed, 0), None);
    }
}
