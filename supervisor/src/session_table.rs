//! The session table and the dispatch of the front's requests: each [`ToSupervisor`] gets exactly one
//! [`FromSupervisor`] answer (with fds for `SessionOpened`). Opening lives in `session_open.rs`,
//! closing and worker death in `session_close.rs`.
//!
//! Invariants: a session is in the table exactly while its worker is unreaped and its cgroup subtree
//! exists; the table owns every session's region memfd and eventfds, so a restarted front can be given
//! them again. All privileged work goes through [`CgroupTreeOps`] and [`ProcessOps`], which tests replace
//! with recording fakes.
//!
//! ```no_run
//! use supervisor::cgroup::{CgroupMode, RealCgroups};
//! use supervisor::session_table::Sessions;
//! use supervisor::spawn::RealProcesses;
//! use supervisor::users::UserInfo;
//! # fn procs() -> RealProcesses { unimplemented!() }
//! let mut table = Sessions::new(RealCgroups, procs(), "/sys/fs/cgroup/unified/heddle".into(),
//!     CgroupMode::Hybrid, UserInfo::resolve("nobody").unwrap());
//! let reply = table.handle(shm_proto::control::ToSupervisor::Describe { req: 1 });
//! ```

use crate::cgroup::{CgroupMode, CgroupTreeOps};
use crate::session::Session;
use crate::session_open::OpenError;
use crate::spawn::ProcessOps;
use crate::users::UserInfo;
use shm_proto::control::{FromSupervisor, SessionLimits, ToSupervisor};
use shm_proto::procs::ProcList;
use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

/// A message for the front and the fds that go with it.
#[derive(Debug)]
pub struct Outgoing {
    pub msg: FromSupervisor,
    pub fds: Vec<OwnedFd>,
}

impl Outgoing {
    /// A message without fds.
    pub fn plain(msg: FromSupervisor) -> Outgoing {
        Outgoing { msg, fds: Vec::new() }
    }
}

/// The live sessions and what is needed to open and close them.
#[derive(Debug)]
pub struct Sessions<C: CgroupTreeOps, P: ProcessOps> {
    pub(crate) cg: C,
    pub(crate) procs: P,
    pub(crate) root: PathBuf,
    pub(crate) mode: CgroupMode,
    /// `--worker-user`: the worker's user when the client is root.
    pub(crate) default_worker: UserInfo,
    /// The owner of the session subtrees and the workers' real uid; never a job's uid.
    pub(crate) cgroup_owner: UserInfo,
    pub(crate) live: BTreeMap<String, Session>,
    /// Sessions killed on the front's request and not yet reaped and removed, with the request's number.
    pub(crate) closing: BTreeMap<String, (u64, crate::session_close::Closing)>,
    /// Sessions whose worker died and whose teardown then could not verify the subtree empty: their uid
    /// stays held when they close (something may still run as it) until a restart.
    pub(crate) unverified_deaths: BTreeSet<String>,
    /// The v1 memory/pids parents on hybrid hosts (`None`: no v1 limits, as in tests).
    pub(crate) v1: Option<crate::limits::V1Root>,
    /// Limits for sessions that ask for none.
    pub(crate) defaults: SessionLimits,
    /// Kept jobs found at startup (left by an earlier run).
    pub(crate) adopted: BTreeSet<String>,
    /// `--allow-writable`: the directories beneath which sessions may add writable roots.
    pub(crate) allow_writable: Vec<PathBuf>,
    /// `--allow-owned-projects`: the directories beneath which a project another uid owns is mapped.
    pub(crate) allow_owned: Vec<PathBuf>,
    /// Pure v2 with `memory`/`pids` enabled under the root: limits go on the session cgroups.
    pub(crate) v2_limits: bool,
    /// The hold of the cgroup root and state directory (`None` in tests over fake cgroups).
    pub(crate) claims: Option<crate::exclusive::Claims>,
    /// Root-opened sessions' own uids (`None`: they all run as `default_worker`).
    pub(crate) uids: Option<crate::session_uids::UidPool>,
    /// `/etc/subuid` and `/etc/subgid` ranges, never handed to a session.
    pub(crate) subordinate: Vec<std::ops::RangeInclusive<u32>>,
}

impl<C: CgroupTreeOps, P: ProcessOps> Sessions<C, P> {
    pub fn new(cg: C, procs: P, root: PathBuf, mode: CgroupMode, default_worker: UserInfo) -> Self {
        Sessions {
            cg,
            procs,
            root,
            mode,
            default_worker,
            cgroup_owner: UserInfo::fallback_cgroup_owner(),
            live: BTreeMap::new(),
            closing: BTreeMap::new(),
            unverified_deaths: BTreeSet::new(),
            v1: None,
            defaults: SessionLimits::default(),
            adopted: BTreeSet::new(),
            allow_writable: Vec::new(),
            allow_owned: Vec::new(),
            v2_limits: false,
            claims: None,
            uids: None,
            subordinate: Vec::new(),
        }
    }

    /// Give every root-opened session a uid of its own from `pool` (not `default_worker`).
    pub fn with_session_uids(mut self, pool: crate::session_uids::UidPool) -> Self {
        self.subordinate = crate::session_uids::subordinate_ranges();
        self.uids = Some(pool);
        self
    }

    /// `holder` lets go of its session uid; a uid no one holds any more has its home removed.
    pub(crate) fn free_uid(&mut self, holder: &crate::session_uids::Holder) {
        let Some(uid) = self.uids.as_mut().and_then(|p| p.release(holder)) else { return };
        if let Err(e) = self.procs.remove_home(uid) {
            tracing::warn!("could not remove the home of the freed uid {uid}: {e}");
        }
    }

    /// The user that owns the session subtrees and is the workers' real uid ([`UserInfo::cgroup_owner`]).
    pub fn with_cgroup_owner(mut self, owner: UserInfo) -> Self {
        self.cgroup_owner = owner;
        self
    }

    /// Put session limits on the v2 session cgroups (pure v2 hosts whose root has the controllers on).
    pub fn with_v2_limits(mut self, on: bool) -> Self {
        self.v2_limits = on;
        self
    }

    /// Keep the hold of the cgroup root and the state directory; the root is checked before each open.
    pub fn with_claims(mut self, claims: crate::exclusive::Claims) -> Self {
        self.claims = Some(claims);
        self
    }

    /// Map projects beneath `dirs` for the jobs' uid (`--allow-owned-projects`; resolved by the caller).
    pub fn with_allow_owned_projects(mut self, dirs: Vec<PathBuf>) -> Self {
        self.allow_owned = dirs;
        self
    }

    /// Let sessions add writable roots beneath `dirs` (`--allow-writable`).
    pub fn with_allow_writable(mut self, dirs: Vec<PathBuf>) -> Self {
        self.allow_writable = dirs;
        self
    }

    /// Use the v1 hierarchies for limits and accounting, with `defaults` for sessions that set none.
    pub fn with_limits(mut self, v1: Option<crate::limits::V1Root>, defaults: SessionLimits) -> Self {
        self.v1 = v1;
        self.defaults = defaults;
        self
    }

    /// Remember the kept jobs found at startup.
    pub fn with_adopted(mut self, adopted: BTreeSet<String>) -> Self {
        self.adopted = adopted;
        self
    }

    /// The v1 parents, for shutdown.
    pub fn v1_root(&self) -> Option<&crate::limits::V1Root> {
        self.v1.as_ref()
    }

    /// The cgroup root every session lives under.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A live session by id.
    pub fn get(&self, id: &str) -> Option<&Session> {
        self.live.get(id)
    }

    /// The ids of the live sessions, sorted.
    pub fn ids(&self) -> Vec<String> {
        self.live.keys().cloned().collect()
    }

    /// Answer one request from the front.
    pub fn handle(&mut self, msg: ToSupervisor) -> Outgoing {
        match msg {
            ToSupervisor::OpenSession {
                req,
                session,
                client_uid,
                policy,
                network,
                ptys,
                project,
                memory_max,
                pids_max,
                writable,
                bash,
            } => {
                let profile = policies::Policy::builtin(&policy).map(|p| p.limits).unwrap_or_default();
                let limits = SessionLimits {
                    memory_max: memory_max.or(self.defaults.memory_max).or(profile.memory_max.map(|l| l.value)),
                    pids_max: pids_max.or(self.defaults.pids_max).or(profile.pids_max.map(|l| u64::from(l.value))),
                    ..Default::default()
                };
                let requested: Vec<PathBuf> = writable.iter().map(PathBuf::from).collect();
                let writable = match policies::extra::check_extra(&requested, &self.allow_writable) {
                    Ok(ok) => ok,
                    Err(e) => return Outgoing::plain(FromSupervisor::Error { req, error: e.to_string() }),
                };
                let allow_writable = self.allow_writable.clone();
                let owned_project =
                    crate::owned_project::decide(std::path::Path::new(&project), &self.allow_owned, client_uid);
                let policy = crate::session::WorkerPolicy {
                    policy,
                    network,
                    ptys,
                    project,
                    writable,
                    allow_writable,
                    owned_project,
                    bash: bash.filter(shm_proto::control::BashSeen::is_plain),
                };
                self.handle_open(req, session, client_uid, &policy, limits)
            }
            ToSupervisor::KeepJob { req, session, job, cgroup, name, owner_uid } => {
                self.handle_keep(req, &session, (job, &cgroup), &name, owner_uid)
            }
            ToSupervisor::ListKept { req } => match crate::kept::list(&self.root, &self.adopted) {
                Ok(kept) => Outgoing::plain(FromSupervisor::KeptList { req, kept, more: 0 }),
                Err(e) => Outgoing::plain(FromSupervisor::Error { req, error: error_chain(&e) }),
            },
            ToSupervisor::KillKept { req, name } => match crate::kept::kill(&self.root, &name) {
                Ok((killed, verified_empty)) => {
                    self.adopted.remove(&name);
                    if verified_empty {
                        self.free_uid(&crate::session_uids::Holder::Kept(name.clone()));
                    }
                    Outgoing::plain(FromSupervisor::KeptKilled {
                        req,
                        name,
                        killed: ProcList::new(killed),
                        verified_empty,
                    })
                }
                Err(e) => Outgoing::plain(FromSupervisor::Error { req, error: error_chain(&e) }),
            },
            ToSupervisor::SessionUsage { req, session } => match self.live.get(&session) {
                Some(s) => {
                    let limits = if self.v2_limits {
                        crate::limits::usage_v2(&s.cgroup, &s.limits)
                    } else {
                        crate::limits::usage(&s.v1, &s.limits)
                    };
                    Outgoing::plain(FromSupervisor::Usage { req, session, limits })
                }
                None => Outgoing::plain(FromSupervisor::Error {
                    req,
                    error: format!("there is no open session {session:?}"),
                }),
            },
            ToSupervisor::CloseSession { req, session } => self.handle_close(req, session),
            ToSupervisor::Describe { req } => Outgoing::plain(FromSupervisor::Info {
                req,
                supervisor_pid: std::process::id(),
                cgroup_root: self.root.display().to_string(),
                cgroup_mode: self.mode.as_str().to_owned(),
            }),
        }
    }

    /// `KeepJob`: `(job, cgroup)` is the job and its cgroup's name in the session, as the front has it.
    fn handle_keep(
        &mut self,
        req: u64,
        session: &str,
        (job, cgroup): (u64, &str),
        name: &str,
        owner_uid: u32,
    ) -> Outgoing {
        let Some(s) = self.live.get(session) else {
            let error = format!("there is no open session {session:?}; nothing was kept");
            return Outgoing::plain(FromSupervisor::Error { req, error });
        };
        if !crate::kept::is_job_cgroup_name(cgroup) {
            let error = format!("{cgroup:?} is not the name of a job cgroup (slot-<N>); nothing was kept");
            return Outgoing::plain(FromSupervisor::Error { req, error });
        }
        let job_dir = s.cgroup.join(cgroup);
        let parents: Vec<PathBuf> = self.v1.as_ref().map(|v| v.dirs.clone()).unwrap_or_default();
        match crate::kept::keep(&self.root, (job, &job_dir), name, owner_uid, &parents) {
            Ok(kept) => {
                tracing::info!("kept job {job} of session {session:?} as {name:?} ({} processes)", kept.procs.len());
                let held = self.procs.hold_kept_pipes(&self.root, name, s.worker.pid, s.worker.pidfd.as_fd());
                if let Some(pool) = self.uids.as_mut() {
                    use crate::session_uids::Holder;
                    if let Some(uid) = pool.uid_of(&Holder::Session(session.to_owned())) {
                        pool.hold(uid, Holder::Kept(name.to_owned()));
                    }
                }
                if let (Some(r), Some(s)) = (held, self.live.get_mut(session)) {
                    s.held_pipes.push(r);
                }
                Outgoing::plain(FromSupervisor::JobKept { req, kept })
            }
            Err(e) => Outgoing::plain(FromSupervisor::Error { req, error: error_chain(&e) }),
        }
    }

    fn handle_open(
        &mut self,
        req: u64,
        session: String,
        client_uid: u32,
        policy: &crate::session::WorkerPolicy,
        limits: SessionLimits,
    ) -> Outgoing {
        let opened = match self.open_with(&session, client_uid, policy, limits) {
            Ok(s) => match s.fds.duplicate() {
                Ok(fds) => Ok((s.worker.pid, s.worker.uid, s.cgroup.display().to_string(), s.tmp.clone(), fds)),
                Err(e) => Err(OpenError::Dup(e)),
            },
            Err(e) => Err(e),
        };
        match opened {
            Ok((worker_pid, worker_uid, cgroup, tmp, fds)) => {
                let tmp = tmp.display().to_string();
                Outgoing {
                    msg: FromSupervisor::SessionOpened { req, session, worker_pid, worker_uid, cgroup, tmp },
                    fds,
                }
            }
            Err(e) => {
                if let OpenError::Dup(_) = e {
                    // Opened, but its fds could not be duplicated for the front: undo it whole.
                    if let Some(s) = self.live.remove(&session) {
                        self.end(s);
                    }
                }
                let error = format!("the supervisor could not open session {session:?}: {}", error_chain(&e));
                tracing::warn!("{error}");
                Outgoing::plain(FromSupervisor::SessionFailed { req, session, error })
            }
        }
    }

    pub(crate) fn handle_close(&mut self, req: u64, session: String) -> Outgoing {
        match self.close(&session) {
            Some(t) => Outgoing::plain(FromSupervisor::SessionClosed {
                req,
                session,
                killed: t.killed,
                verified_empty: t.verified_empty,
            }),
            None => {
                // A session whose worker died (torn down then) and that the front closes without
                // opening it again: its uid is no longer needed, unless that teardown left something.
                if self.unverified_deaths.remove(&session) {
                    tracing::info!("session {session:?}: its uid stays held until a restart (its worker's death left the subtree not verified empty)");
                } else {
                    self.free_uid(&crate::session_uids::Holder::Session(session.clone()));
                }
                Outgoing::plain(FromSupervisor::Error {
                    req,
                    error: format!("there is no open session {session:?}; nothing was closed"),
                })
            }
        }
    }
}

pub use shm_proto::error_chain;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::{table, Call};

    #[test]
    fn describe_reports_root_and_mode() {
        let (mut t, _) = table();
        let out = t.handle(ToSupervisor::Describe { req: 9 });
        let FromSupervisor::Info { req, supervisor_pid, cgroup_root, cgroup_mode } = out.msg else {
            panic!("{:?}", out.msg)
        };
        assert_eq!((req, supervisor_pid), (9, std::process::id()));
        assert_eq!((cgroup_root.as_str(), cgroup_mode.as_str()), ("/cg/heddle", "hybrid"));
    }

    #[test]
    fn close_of_unknown_session_is_an_error_and_touches_nothing() {
        let (mut t, calls) = table();
        let out = t.handle(ToSupervisor::CloseSession { req: 4, session: "nope".into() });
        assert!(matches!(out.msg, FromSupervisor::Error { req: 4, ref error } if error.contains("nope")));
        assert_eq!(calls.take(), Vec::<Call>::new());
    }

    #[test]
    fn chain_joins_causes() {
        let inner = std::io::Error::other("disk on fire");
        let e = crate::cgroup::CgroupError::Io { op: "write", path: "/x".into(), source: inner };
        assert_eq!(error_chain(&e), "cannot write /x: disk on fire");
    }
}
