//! Resolving the users the supervisor drops to: `--front-user`, `--worker-user` (a name or a numeric
//! uid) and a client's uid, into the uid, gid, name and home a child gets.
//!
//! Invariant: a resolved user is never root; the supervisor refuses to run a front or a worker as uid 0.
//!
//! ```no_run
//! use supervisor::users::UserInfo;
//! let nobody = UserInfo::resolve("nobody").unwrap();
//! assert_ne!(nobody.uid, 0);
//! ```

use nix::unistd::{Uid, User};
use std::path::PathBuf;

/// The gid given to a uid that has no passwd entry (`nogroup`).
pub const NOGROUP: u32 = 65534;
/// `nobody`: the uid of processes that need no identity (kept jobs' drainers).
pub const NOBODY: u32 = 65534;

/// A user a child process runs as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserInfo {
    pub uid: u32,
    /// The passwd entry's primary group, or [`NOGROUP`] when there is no entry.
    pub gid: u32,
    /// The login name, or the numeric uid when there is no entry.
    pub name: String,
    /// The home directory, or `/` when there is no entry.
    pub home: PathBuf,
}

/// Errors resolving a user.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UserError {
    #[error("no user named {0:?} exists")]
    Unknown(String),
    #[error("looking up user {0:?} failed")]
    Lookup(String, #[source] nix::Error),
    #[error("user {0:?} is root; heddle runs its front and workers unprivileged")]
    Root(String),
    #[error("uid {0} (the front's default when no `heddle` user exists) belongs to user {1:?}; create a `heddle` user or pass --front-user")]
    Taken(String, String),
    #[error("no group named {0:?} exists; pass a group name or a numeric gid")]
    UnknownGroup(String),
}

/// The front's uid (and gid) when no `heddle` user exists: one no passwd entry names, used by nothing else.
pub const FRONT_FALLBACK_UID: u32 = 65533;

/// The cgroup owner's uid (and gid) when no `heddle-cgroups` user exists: one no passwd entry names.
pub const CGROUP_OWNER_FALLBACK_UID: u32 = 65532;

/// Resolve `--socket-group`: a group name, or a numeric gid (which need not have a group entry).
pub fn resolve_group(spec: &str) -> Result<u32, UserError> {
    if let Ok(gid) = spec.parse::<u32>() {
        return Ok(gid);
    }
    match nix::unistd::Group::from_name(spec) {
        Ok(Some(g)) => Ok(g.gid.as_raw()),
        Ok(None) => Err(UserError::UnknownGroup(spec.to_owned())),
        Err(e) => Err(UserError::Lookup(spec.to_owned(), e)),
    }
}

impl UserInfo {
    /// Resolve a name, or a numeric uid (which need not have a passwd entry).
    pub fn resolve(spec: &str) -> Result<UserInfo, UserError> {
        let info = match spec.parse::<u32>() {
            Ok(uid) => UserInfo::from_uid(uid).map_err(|e| UserError::Lookup(spec.to_owned(), e))?,
            Err(_) => match User::from_name(spec) {
                Ok(Some(u)) => from_entry(&u),
                Ok(None) => return Err(UserError::Unknown(spec.to_owned())),
                Err(e) => return Err(UserError::Lookup(spec.to_owned(), e)),
            },
        };
        if info.uid == 0 {
            return Err(UserError::Root(spec.to_owned()));
        }
        Ok(info)
    }

    /// The user for `uid`, with the fallbacks documented on the fields when it has no passwd entry.
    pub fn from_uid(uid: u32) -> Result<UserInfo, nix::Error> {
        Ok(match User::from_uid(Uid::from_raw(uid))? {
            Some(u) => from_entry(&u),
            None => UserInfo { uid, gid: NOGROUP, name: uid.to_string(), home: PathBuf::from("/") },
        })
    }

    /// `--front-user`'s default: `heddle` if that user exists, else uid and gid [`FRONT_FALLBACK_UID`] —
    /// never `nobody`, which root-opened sessions' workers and jobs run as: sharing it would let a job read
    /// every session's stored output in the front's state directory. A passwd entry of another name on that
    /// uid is refused rather than borrowed.
    pub fn default_front() -> Result<UserInfo, UserError> {
        match UserInfo::resolve("heddle") {
            Err(UserError::Unknown(_)) => {
                let spec = FRONT_FALLBACK_UID.to_string();
                match User::from_uid(Uid::from_raw(FRONT_FALLBACK_UID)) {
                    Ok(None) => Ok(UserInfo {
                        uid: FRONT_FALLBACK_UID,
                        gid: FRONT_FALLBACK_UID,
                        name: "heddle-front".to_owned(),
                        home: PathBuf::from("/"),
                    }),
                    Ok(Some(u)) => Err(UserError::Taken(spec, u.name)),
                    Err(e) => Err(UserError::Lookup(spec, e)),
                }
            }
            other => other,
        }
    }
}

impl UserInfo {
    /// The owner of every session's delegated cgroups: the workers' real uid, never a job's
    /// (docs/cgroups.md, "Who may place a process"). `heddle-cgroups` if that user exists, else uid and gid
    /// [`CGROUP_OWNER_FALLBACK_UID`]; a passwd entry of another name on that uid is refused.
    pub fn cgroup_owner() -> Result<UserInfo, UserError> {
        match UserInfo::resolve("heddle-cgroups") {
            Err(UserError::Unknown(_)) => {
                let spec = CGROUP_OWNER_FALLBACK_UID.to_string();
                match User::from_uid(Uid::from_raw(CGROUP_OWNER_FALLBACK_UID)) {
                    Ok(None) => Ok(UserInfo::fallback_cgroup_owner()),
                    Ok(Some(u)) => Err(UserError::Taken(spec, u.name)),
                    Err(e) => Err(UserError::Lookup(spec, e)),
                }
            }
            other => other,
        }
    }

    /// [`UserInfo::cgroup_owner`]'s fallback, without looking anything up.
    pub fn fallback_cgroup_owner() -> UserInfo {
        UserInfo {
            uid: CGROUP_OWNER_FALLBACK_UID,
            gid: CGROUP_OWNER_FALLBACK_UID,
            name: "heddle-cgroups".to_owned(),
            home: PathBuf::from("/"),
        }
    }
}

fn from_entry(u: &User) -> UserInfo {
    UserInfo { uid: u.uid.as_raw(), gid: u.gid.as_raw(), name: u.name.clone(), home: u.dir.clone() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_refused_by_name_and_number() {
        assert!(matches!(UserInfo::resolve("root"), Err(UserError::Root(_))));
        assert!(matches!(UserInfo::resolve("0"), Err(UserError::Root(_))));
    }

    #[test]
    fn unknown_name_is_an_error() {
        assert!(matches!(UserInfo::resolve("no-such-user-heddle-xyz"), Err(UserError::Unknown(_))));
    }

    #[test]
    fn uid_without_entry_falls_back() {
        let u = UserInfo::resolve("4000123").unwrap();
        assert_eq!((u.uid, u.gid, u.name.as_str(), u.home.to_str()), (4000123, NOGROUP, "4000123", Some("/")));
    }

    #[test]
    fn the_default_front_never_shares_nobody() {
        let nobody = UserInfo::resolve("nobody").unwrap();
        match UserInfo::default_front() {
            Ok(f) => assert_ne!(f.uid, nobody.uid),
            Err(e) => assert!(matches!(e, UserError::Taken(..)), "{e}"),
        }
    }

    #[test]
    fn the_cgroup_owner_is_no_job_or_front_uid() {
        let owner = UserInfo::cgroup_owner().unwrap();
        assert_ne!(owner.uid, 0);
        assert_ne!(owner.uid, NOBODY, "root-opened sessions' jobs run as nobody");
        assert_ne!(owner.uid, FRONT_FALLBACK_UID);
    }

    #[test]
    fn numeric_uid_with_entry_gets_its_name() {
        let u = UserInfo::resolve("65534").unwrap();
        assert_eq!(u.name, "nobody");
    }
}
