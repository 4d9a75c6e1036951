//! Opening a session: validate its id, create `<root>/session-<ID>` and its `worker` leaf, delegate
//! both to the worker's uid, create the region and its four eventfds, and spawn the worker into the
//! leaf with fds 3…7.
//!
//! Invariant: an open either yields a live [`Session`] in the table, or leaves nothing behind (every
//! directory it created is removed; a directory it did not create is never removed).
//!
//! ```no_run
//! # use supervisor::{cgroup::RealCgroups, session_table::Sessions, spawn::RealProcesses};
//! # fn table() -> Sessions<RealCgroups, RealProcesses> { unimplemented!() }
//! let mut t = table();
//! let session = t.open("demo", 1000).unwrap();
//! println!("worker {} in {}", session.worker.pid, session.cgroup.display());
//! ```

use crate::cgroup::{CgroupError, CgroupTreeOps};
use crate::session::{self, InvalidId, Session, SessionFds, Worker, WorkerPolicy};
use crate::session_table::Sessions;
use crate::session_uids::Holder;
use crate::spawn::{ProcessOps, SpawnError, WorkerSpec};
use crate::users::UserInfo;
use shm_proto::control::SessionLimits;
use shm_proto::region::{CreateError, Region, RegionConfig};
use shm_proto::sys::EventFd;
use std::io;
use std::path::Path;

/// Why a session could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    #[error(transparent)]
    InvalidId(#[from] InvalidId),
    #[error("a session named {0:?} is already open")]
    Duplicate(String),
    #[error("a session named {0:?} is still being closed; retry in a moment")]
    Closing(String),
    #[error("looking up the worker's user (uid {0}) failed")]
    User(u32, #[source] nix::Error),
    #[error("the client is uid {0}, and workers never run as root")]
    RootWorker(u32),
    #[error("uid {0} owns heddle's cgroups, and no session's jobs run as it; open the session as another user")]
    OwnerWorker(u32),
    #[error("setting up the session's cgroup failed")]
    Cgroup(#[from] CgroupError),
    #[error("creating the shared-memory region failed")]
    Region(#[from] CreateError),
    #[error("creating an eventfd failed")]
    EventFd(#[source] io::Error),
    #[error("starting the worker failed")]
    Spawn(#[from] SpawnError),
    #[error("duplicating the session's fds for the front failed")]
    Dup(#[source] io::Error),
    #[error("creating the session's temp dir failed")]
    Tmp(#[source] io::Error),
    #[error(transparent)]
    Root(#[from] crate::exclusive::ClaimError),
    #[error("policy name {0:?} is not [a-z0-9_-]{{1,64}}")]
    PolicyName(String),
    #[error(transparent)]
    Uid(#[from] crate::session_uids::UidError),
}

/// Only plain names reach the worker's command line (the worker validates the profile itself).
fn validate_policy(p: &WorkerPolicy) -> Result<(), OpenError> {
    let ok = (1..=64).contains(&p.policy.len())
        && p.policy.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(OpenError::PolicyName(p.policy.clone()))
    }
}

impl<C: CgroupTreeOps, P: ProcessOps> Sessions<C, P> {
    /// Open session `id` for a client of uid `client_uid` (root: the worker runs as `--worker-user`).
    pub fn open(&mut self, id: &str, client_uid: u32) -> Result<&Session, OpenError> {
        self.open_with(id, client_uid, &WorkerPolicy::default(), self.defaults.clone())
    }

    /// Open session `id` with the sandbox settings `policy` (passed to the worker) and `limits` (v1
    /// memory/pids on hybrid hosts).
    pub fn open_with(
        &mut self,
        id: &str,
        client_uid: u32,
        policy: &WorkerPolicy,
        limits: SessionLimits,
    ) -> Result<&Session, OpenError> {
        session::validate_id(id)?;
        validate_policy(policy)?;
        if self.live.contains_key(id) {
            return Err(OpenError::Duplicate(id.to_owned()));
        }
        if self.closing.contains_key(id) {
            return Err(OpenError::Closing(id.to_owned()));
        }
        let user = self.worker_user(id, client_uid)?;
        match self.open_as(id, &user, policy, limits) {
            Ok(s) => Ok(self.live.entry(id.to_owned()).or_insert(s)),
            Err(e) => {
                self.free_uid(&Holder::Session(id.to_owned()));
                Err(e)
            }
        }
    }

    /// Create the session directory and everything in it for `user`; on error, remove it again.
    fn open_as(
        &mut self,
        id: &str,
        user: &UserInfo,
        policy: &WorkerPolicy,
        limits: SessionLimits,
    ) -> Result<Session, OpenError> {
        self.ensure_root()?;
        let dir = session::session_dir(&self.root, id);
        self.cg.create(&dir)?;
        self.populate(id, &dir, user, policy, limits).inspect_err(|_| {
            if let Err(rm) = self.cg.remove_tree(&dir) {
                tracing::warn!(
                    "could not remove {} after a failed open: {}",
                    dir.display(),
                    shm_proto::error_chain(&rm)
                );
            }
        })
    }

    /// The cgroup root is still the one this server holds; one removed under it is made again (with
    /// the controllers it had turned on) and held, logged.
    fn ensure_root(&mut self) -> Result<(), OpenError> {
        let Some(claims) = self.claims.as_mut() else { return Ok(()) };
        if claims.root.ensure()? {
            tracing::info!("the cgroup root {} was removed while this server ran; made it again", self.root.display());
            if self.v2_limits {
                crate::limits::enable_v2(&self.root)?;
            }
        }
        Ok(())
    }

    /// The user session `id`'s worker and jobs run as: the client's own uid, or for a root client a uid
    /// of the session's own (`session_uids`), or `--worker-user` when the server was started with one.
    fn worker_user(&mut self, id: &str, client_uid: u32) -> Result<UserInfo, OpenError> {
        if client_uid == 0 {
            let Some(pool) = self.uids.as_mut() else { return Ok(self.default_worker.clone()) };
            let subordinate = &self.subordinate;
            let revived = pool.uid_of(&Holder::Session(id.to_owned())).is_some();
            let uid = pool.allocate(id, |u| crate::session_uids::named_elsewhere(u, subordinate))?;
            // Whatever an earlier holder of the uid left in its home is not this session's.
            if revived {
                return Ok(crate::session_uids::session_user(uid));
            }
            if let Err(e) = self.procs.remove_home(uid) {
                self.free_uid(&Holder::Session(id.to_owned()));
                return Err(OpenError::Tmp(e));
            }
            return Ok(crate::session_uids::session_user(uid));
        }
        UserInfo::from_uid(client_uid).map_err(|e| OpenError::User(client_uid, e))
    }

    /// Everything after the session directory exists; the caller removes the directory on error.
    fn populate(
        &self,
        id: &str,
        dir: &Path,
        user: &UserInfo,
        policy: &WorkerPolicy,
        limits: SessionLimits,
    ) -> Result<Session, OpenError> {
        if user.uid == 0 {
            return Err(OpenError::RootWorker(user.uid));
        }
        if user.uid == self.cgroup_owner.uid {
            return Err(OpenError::OwnerWorker(user.uid));
        }
        let wdir = session::worker_dir(dir);
        self.cg.create(&wdir)?;
        self.delegate(dir, &wdir, user)?;
        let fds = new_session_fds()?;
        if self.v2_limits {
            crate::limits::apply_v2(dir, &limits)?;
        }
        let v1 = match &self.v1 {
            Some(v1) => v1.create_session(id, &limits)?,
            None => Vec::new(),
        };
        let tmp = match self.procs.make_tmp(id, user) {
            Ok(t) => t,
            Err(e) => {
                crate::limits::remove_dirs(&v1);
                return Err(OpenError::Tmp(e));
            }
        };
        let (user, own_home) = match self.procs.home_for(user) {
            Ok(h) => h,
            Err(e) => {
                crate::limits::remove_dirs(&v1);
                let _ = self.procs.remove_tmp(&tmp);
                return Err(OpenError::Tmp(e));
            }
        };
        let user = &user;
        let spec = WorkerSpec {
            session: id,
            cgroup: dir,
            user,
            cgroup_owner: self.cgroup_owner.uid,
            fds: fds.ordered(),
            v1: &v1,
            policy,
            tmp: &tmp,
            own_home,
        };
        let spawned = match self.procs.spawn_worker(&spec) {
            Ok(s) => s,
            Err(e) => {
                crate::limits::remove_dirs(&v1);
                let _ = self.procs.remove_tmp(&tmp);
                return Err(e.into());
            }
        };
        let worker = Worker { pid: spawned.pid, uid: user.uid, pidfd: spawned.pidfd };
        Ok(Session { id: id.to_owned(), cgroup: dir.to_owned(), worker, fds, v1, limits, tmp, held_pipes: Vec::new() })
    }

    /// Delegate the session subtree to the cgroup owner, the worker's real uid — never to the uid its
    /// jobs run as (`user`): a job that could write a `cgroup.procs` of the subtree could start processes
    /// outside its own cgroup (docs/cgroups.md, "Who may place a process").
    fn delegate(&self, dir: &Path, wdir: &Path, user: &UserInfo) -> Result<(), CgroupError> {
        debug_assert_ne!(user.uid, self.cgroup_owner.uid);
        let owner = &self.cgroup_owner;
        let paths = [
            dir.to_owned(),
            dir.join("cgroup.procs"),
            dir.join("cgroup.threads"),
            dir.join("cgroup.subtree_control"),
            wdir.to_owned(),
            wdir.join("cgroup.procs"),
        ];
        paths.iter().try_for_each(|p| self.cg.chown(p, owner.uid, owner.gid))
    }
}

/// A new sealed region and four doorbells.
fn new_session_fds() -> Result<SessionFds, OpenError> {
    let (_region, memfd) = Region::create(RegionConfig::default())?;
    let efd = || EventFd::new().map(EventFd::into_owned).map_err(OpenError::EventFd);
    Ok(SessionFds { memfd, cmd_data: efd()?, cmd_space: efd()?, evt_data: efd()?, evt_space: efd()? })
}

#[cfg(test)]
mod tests {
    use crate::fake::{table, Call};
    use shm_proto::control::FromSupervisor;
    use std::path::PathBuf;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    #[test]
    fn open_creates_delegates_and_spawns_in_order() {
        let (mut t, calls) = table();
        let out = t.handle(crate::fake::open_msg(1, "demo", 0));
        let FromSupervisor::SessionOpened { req, session, worker_pid, worker_uid, cgroup, .. } = &out.msg else {
            panic!("{:?}", out.msg)
        };
        assert_eq!((*req, session.as_str(), *worker_pid, *worker_uid), (1, "demo", 4242, 65534));
        assert_eq!(cgroup, "/cg/heddle/session-demo");
        assert_eq!(out.fds.len(), 5);
        let s = "/cg/heddle/session-demo";
        let chown = |f: &str| Call::Chown(p(f), 65532, 65532);
        assert_eq!(
            calls.take(),
            vec![
                Call::Create(p(s)),
                Call::Create(p(&format!("{s}/worker"))),
                chown(s),
                chown(&format!("{s}/cgroup.procs")),
                chown(&format!("{s}/cgroup.threads")),
                chown(&format!("{s}/cgroup.subtree_control")),
                chown(&format!("{s}/worker")),
                chown(&format!("{s}/worker/cgroup.procs")),
                Call::SpawnWorker("demo".into(), p(s), 65534),
            ]
        );
        assert!(t.get("demo").is_some());
    }

    #[test]
    fn non_root_client_gets_a_worker_of_its_own_uid() {
        let (mut t, calls) = table();
        let out = t.handle(crate::fake::open_msg(2, "mine", 4000123));
        assert!(matches!(out.msg, FromSupervisor::SessionOpened { worker_uid: 4000123, .. }));
        assert!(calls.take().contains(&Call::SpawnWorker("mine".into(), p("/cg/heddle/session-mine"), 4000123)));
    }

    #[test]
    fn invalid_id_fails_without_touching_anything() {
        let (mut t, calls) = table();
        let out = t.handle(crate::fake::open_msg(3, "../etc", 0));
        assert!(
            matches!(out.msg, FromSupervisor::SessionFailed { req: 3, ref error, .. } if error.contains("not valid"))
        );
        assert!(out.fds.is_empty());
        assert_eq!(calls.take(), vec![]);
    }

    #[test]
    fn duplicate_id_is_refused_and_first_session_survives() {
        let (mut t, calls) = table();
        t.handle(crate::fake::open_msg(1, "a", 0));
        calls.take();
        let out = t.handle(crate::fake::open_msg(2, "a", 0));
        assert!(matches!(out.msg, FromSupervisor::SessionFailed { ref error, .. } if error.contains("already open")));
        assert_eq!(calls.take(), vec![]);
        assert!(t.get("a").is_some());
    }

    #[test]
    fn spawn_failure_removes_what_was_created() {
        let (mut t, calls) = table();
        calls.fail_spawn();
        let out = t.handle(crate::fake::open_msg(5, "x", 0));
        assert!(
            matches!(out.msg, FromSupervisor::SessionFailed { ref error, .. } if error.contains("starting the worker failed"))
        );
        let got = calls.take();
        assert_eq!(got.last(), Some(&Call::RemoveTree(p("/cg/heddle/session-x"))));
        assert!(t.get("x").is_none());
    }

    #[test]
    fn existing_cgroup_dir_fails_and_is_not_removed() {
        let (mut t, calls) = table();
        calls.fail_create("/cg/heddle/session-old");
        let out = t.handle(crate::fake::open_msg(6, "old", 0));
        assert!(matches!(out.msg, FromSupervisor::SessionFailed { ref error, .. } if error.contains("already exists")));
        assert_eq!(calls.take(), vec![]);
    }

    #[test]
    fn chown_failure_removes_the_session_dir() {
        let (mut t, calls) = table();
        calls.fail_chown();
        let out = t.handle(crate::fake::open_msg(7, "c", 0));
        assert!(matches!(out.msg, FromSupervisor::SessionFailed { ref error, .. } if error.contains("cgroup")));
        let got = calls.take();
        assert_eq!(got.last(), Some(&Call::RemoveTree(p("/cg/heddle/session-c"))));
        assert!(!got.iter().any(|c| matches!(c, Call::SpawnWorker(..))));
    }
}
