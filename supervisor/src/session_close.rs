//! Ending a session, whether the front asked (`CloseSession`), its worker died, or the supervisor is
//! shutting down: freeze the subtree, list what is in the job cgroups, `cgroup.kill` it, reap the
//! worker, wait for `populated 0`, and remove every directory of the subtree.
//!
//! Invariants: nothing is killed by pid; the subtree is only reported empty (`verified_empty`) once
//! `cgroup.events` said `populated 0` and every directory was removed. Each step is bounded: the whole
//! teardown waits at most [`TEARDOWN_TIMEOUT`] (a killed cgroup normally empties within milliseconds).
//! A teardown is two halves: [`Sessions::begin_teardown`] (freeze, list, kill; never waits) and
//! [`Sessions::finish_teardown`] (reap, `populated 0`, remove). The front's `CloseSession` runs them apart
//! ([`Sessions::start_close`], [`Sessions::poll_close`]), so the main loop goes on serving while the kernel
//! kills; a worker's death and shutdown run them back to back.
//!
//! ```no_run
//! # use supervisor::{cgroup::RealCgroups, session_table::Sessions, spawn::RealProcesses};
//! # fn table() -> Sessions<RealCgroups, RealProcesses> { unimplemented!() }
//! let mut t = table();
//! if let Some(done) = t.close("demo") {
//!     println!("killed {} processes, empty: {}", done.killed.total(), done.verified_empty);
//! }
//! ```

use crate::cgroup::CgroupTreeOps;
use crate::session::Session;
use crate::session_table::{Outgoing, Sessions};
use crate::spawn::ProcessOps;
use crate::sys::Exit;
use shm_proto::control::{FromSupervisor, ProcInfo};
use shm_proto::error_chain;
use shm_proto::procs::ProcList;
use std::os::fd::AsFd;
use std::path::Path;
use std::time::{Duration, Instant};

/// The longest a teardown waits for the worker to be reaped and the subtree to empty.
pub const TEARDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// What a teardown found and did.
#[derive(Debug, PartialEq, Eq)]
pub struct Teardown {
    /// Processes that were in the subtree (outside the worker's leaf) when it was killed (the first
    /// [`shm_proto::procs::MAX_LISTED`], the rest counted).
    pub killed: ProcList<ProcInfo>,
    /// True once `populated 0` was seen and the subtree removed.
    pub verified_empty: bool,
    /// How the worker ended, when it was reaped.
    pub exit: Option<Exit>,
}

impl<C: CgroupTreeOps, P: ProcessOps> Sessions<C, P> {
    /// Close a live session on the front's request; `None` if there is no such session.
    pub fn close(&mut self, id: &str) -> Option<Teardown> {
        let s = self.live.remove(id)?;
        Some(self.end(s))
    }

    /// Tear a session down for good: its uid is freed once nothing of it can still run as it. (A worker's
    /// death tears down without this: the front may open the session again, under the same uid.)
    pub(crate) fn end(&mut self, s: Session) -> Teardown {
        let (id, uid) = (s.id.clone(), s.worker.uid);
        let t = self.teardown(s);
        self.ended(id, uid, &t);
        t
    }

    fn ended(&mut self, id: String, uid: u32, t: &Teardown) {
        let died_unverified = self.unverified_deaths.remove(&id);
        if t.verified_empty && !died_unverified {
            self.free_uid(&crate::session_uids::Holder::Session(id));
        } else if self.uids.as_ref().is_some_and(|p| p.contains(uid)) {
            tracing::info!("session {id:?}: its uid {uid} stays held until a restart");
        }
    }

    /// `CloseSession` without waiting: the session is killed now, and its answer is returned at once
    /// when the teardown needs no wait, else by [`Sessions::poll_close`] once the worker is reaped and
    /// the subtree empty (or [`TEARDOWN_TIMEOUT`] passed). Meanwhile the session is [`Sessions::closing`].
    pub fn start_close(&mut self, req: u64, id: &str) -> Option<Outgoing> {
        let Some(s) = self.live.remove(id) else { return Some(self.handle_close(req, id.to_owned())) };
        let mut c = self.begin_teardown(s);
        if self.teardown_ready(&mut c) {
            return Some(self.closed(req, c));
        }
        self.closing.insert(id.to_owned(), (req, c));
        None
    }

    /// The answer to the close of `id` if its teardown can finish now (see [`Sessions::start_close`]).
    pub fn poll_close(&mut self, id: &str) -> Option<Outgoing> {
        let (req, mut c) = self.closing.remove(id)?;
        if !self.teardown_ready(&mut c) {
            self.closing.insert(id.to_owned(), (req, c));
            return None;
        }
        Some(self.closed(req, c))
    }

    /// A session whose close was started and has not been answered yet.
    pub fn closing(&self, id: &str) -> Option<&Session> {
        self.closing.get(id).map(|(_, c)| &c.session)
    }

    /// The ids of the sessions being closed.
    pub fn closing_ids(&self) -> Vec<String> {
        self.closing.keys().cloned().collect()
    }

    fn closed(&mut self, req: u64, c: Closing) -> Outgoing {
        let (id, uid) = (c.session.id.clone(), c.session.worker.uid);
        let t = self.finish_teardown(c);
        self.ended(id.clone(), uid, &t);
        Outgoing::plain(FromSupervisor::SessionClosed {
            req,
            session: id,
            killed: t.killed,
            verified_empty: t.verified_empty,
        })
    }

    /// The worker of `id` died (its pidfd turned readable): reap it, end its subtree, and tell the
    /// front. `None` if the session is no longer in the table.
    pub fn worker_died(&mut self, id: &str) -> Option<Outgoing> {
        let s = self.live.remove(id)?;
        let t = self.teardown(s);
        let (code, signal) = t.exit.map(Exit::split).unwrap_or((None, None));
        let how = t.exit.map_or_else(|| "an unknown status".to_owned(), |e| e.to_string());
        let empty = if t.verified_empty { "verified empty" } else { "NOT verified empty" };
        if !t.verified_empty {
            self.unverified_deaths.insert(id.to_owned());
        }
        tracing::warn!(
            "worker of session {id:?} died with {how}; {} job process(es) killed; subtree {empty}",
            t.killed.total()
        );
        Some(Outgoing::plain(FromSupervisor::WorkerDied {
            session: id.to_owned(),
            code,
            signal,
            killed: t.killed,
            verified_empty: t.verified_empty,
        }))
    }

    /// Close every live session (at shutdown).
    pub fn close_all(&mut self) -> Vec<(String, Teardown)> {
        let mut done = Vec::new();
        for (id, (_, c)) in std::mem::take(&mut self.closing) {
            let uid = c.session.worker.uid;
            let t = self.finish_teardown(c);
            self.ended(id.clone(), uid, &t);
            done.push((id, t));
        }
        let all = std::mem::take(&mut self.live);
        done.extend(all.into_iter().map(|(id, s)| (id, self.end(s))));
        done
    }

    /// Kill, verify and remove one session's subtree; reap its worker (blocking, up to [`TEARDOWN_TIMEOUT`]).
    pub(crate) fn teardown(&self, s: Session) -> Teardown {
        let c = self.begin_teardown(s);
        self.finish_teardown(c)
    }

    /// The first half of a teardown, which never waits: freeze the subtree, rescue kept jobs' output,
    /// list what is in it, `cgroup.kill` it.
    pub(crate) fn begin_teardown(&self, mut s: Session) -> Closing {
        let deadline = Instant::now() + TEARDOWN_TIMEOUT;
        let dir = &s.cgroup;
        let warn = |what: &str, e: &dyn std::error::Error| {
            tracing::warn!("session {:?}: {what} failed: {}", s.id, error_chain(e));
        };
        // Frozen first, so no fork slips between the listing and the kill.
        if let Err(e) = self.cg.freeze(dir) {
            warn("freezing the cgroup", &e);
        }
        let held = std::mem::take(&mut s.held_pipes);
        for line in self.procs.rescue_kept_output(&self.root, s.worker.pid, s.worker.pidfd.as_fd(), held) {
            tracing::info!("session {:?}: {line}", s.id);
        }
        // Everything but the worker itself, wherever it is in the subtree (its own leaf included: nothing
        // else of heddle's lives there, so anything found there is listed and killed like a job's).
        let mut found = self.cg.procs(dir, Path::new("")).unwrap_or_else(|e| {
            warn("listing the cgroup", &e);
            Vec::new()
        });
        found.retain(|p| p.pid != s.worker.pid);
        let killed = ProcList::new(found);
        if let Err(e) = self.cg.kill(dir) {
            warn("cgroup.kill", &e);
        }
        Closing { session: s, killed, deadline, exit: None, empty: false }
    }

    /// Whether `c` can finish now without waiting: its worker was reaped and its subtree is empty, or
    /// its time is up. Never blocks.
    pub(crate) fn teardown_ready(&self, c: &mut Closing) -> bool {
        if c.exit.is_none() {
            c.exit = self.procs.reap(c.session.worker.pidfd.as_fd(), Duration::ZERO).unwrap_or(None);
        }
        if c.exit.is_some() && !c.empty {
            c.empty = self.cg.wait_empty(&c.session.cgroup, Duration::ZERO).unwrap_or(false);
        }
        (c.exit.is_some() && c.empty) || Instant::now() >= c.deadline
    }

    /// The second half: reap the worker and wait for `populated 0` (what is not done yet, until the
    /// deadline), then remove every directory of the subtree and the temp dir.
    pub(crate) fn finish_teardown(&self, c: Closing) -> Teardown {
        let Closing { session: s, killed, deadline, mut exit, mut empty } = c;
        let dir = &s.cgroup;
        let warn = |what: &str, e: &dyn std::error::Error| {
            tracing::warn!("session {:?}: {what} failed: {}", s.id, error_chain(e));
        };
        if exit.is_none() {
            exit = match self.procs.reap(s.worker.pidfd.as_fd(), left(deadline)) {
                Ok(exit) => exit,
                Err(e) => {
                    warn("reaping the worker", &e);
                    None
                }
            };
        }
        if !empty {
            empty = self.cg.wait_empty(dir, left(deadline)).unwrap_or_else(|e| {
                warn("waiting for the cgroup to empty", &e);
                false
            });
        }
        let removed = empty && self.cg.remove_tree(dir).map_err(|e| warn("removing the cgroup", &e)).is_ok();
        if removed {
            crate::limits::remove_dirs(&s.v1);
        }
        if !removed {
            tracing::warn!("session {:?}: {} is left behind, not verified empty", s.id, dir.display());
        }
        if let Err(e) = self.procs.remove_tmp(&s.tmp) {
            warn(&format!("removing the temp dir {}", s.tmp.display()), &e);
        }
        Teardown { killed, verified_empty: removed, exit }
    }
}

/// A session being closed: killed, waiting for its worker to be reaped and its subtree to empty.
#[derive(Debug)]
pub struct Closing {
    pub(crate) session: Session,
    killed: ProcList<ProcInfo>,
    deadline: Instant,
    /// How the worker ended, once reaped.
    exit: Option<Exit>,
    /// `populated 0` was seen.
    empty: bool,
}

fn left(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

#[cfg(test)]
mod tests {
    use crate::fake::{table, Call};
    use shm_proto::control::{FromSupervisor, ProcInfo, ToSupervisor};
    use shm_proto::procs::ProcList;
    use std::path::PathBuf;

    fn open(t: &mut crate::fake::Table, id: &str) {
        let out = t.handle(crate::fake::open_msg(1, id, 0));
        assert!(matches!(out.msg, FromSupervisor::SessionOpened { .. }), "{:?}", out.msg);
    }

    fn proc1() -> ProcInfo {
        ProcInfo { pid: 77, cmdline: "sleep 100".into(), cgroup: "slot-1".into() }
    }

    #[test]
    fn close_freezes_lists_kills_reaps_waits_removes() {
        let (mut t, calls) = table();
        open(&mut t, "demo");
        calls.take();
        calls.set_procs(vec![proc1()]);
        let out = t.handle(ToSupervisor::CloseSession { req: 2, session: "demo".into() });
        let dir = PathBuf::from("/cg/heddle/session-demo");
        assert_eq!(
            calls.take(),
            vec![
                Call::Freeze(dir.clone()),
                Call::Procs(dir.clone(), PathBuf::new()),
                Call::Kill(dir.clone()),
                Call::Reap,
                Call::WaitEmpty(dir.clone()),
                Call::RemoveTree(dir),
            ]
        );
        let want = FromSupervisor::SessionClosed {
            req: 2,
            session: "demo".into(),
            killed: ProcList::new(vec![proc1()]),
            verified_empty: true,
        };
        assert_eq!(out.msg, want);
        assert!(t.get("demo").is_none());
    }

    #[test]
    fn subtree_that_never_empties_is_not_removed_nor_called_empty() {
        let (mut t, calls) = table();
        open(&mut t, "stuck");
        calls.take();
        calls.never_empty();
        let out = t.handle(ToSupervisor::CloseSession { req: 3, session: "stuck".into() });
        assert!(matches!(out.msg, FromSupervisor::SessionClosed { verified_empty: false, .. }));
        assert!(!calls.take().iter().any(|c| matches!(c, Call::RemoveTree(_))));
        assert!(t.get("stuck").is_none());
    }

    #[test]
    fn worker_death_reports_exit_and_killed_jobs() {
        let (mut t, calls) = table();
        open(&mut t, "w");
        calls.set_procs(vec![proc1()]);
        let out = t.worker_died("w").unwrap();
        let want = FromSupervisor::WorkerDied {
            session: "w".into(),
            code: None,
            signal: Some(9),
            killed: ProcList::new(vec![proc1()]),
            verified_empty: true,
        };
        assert_eq!(out.msg, want);
        assert!(t.worker_died("w").is_none(), "a second notice for the same worker is ignored");
    }

    #[test]
    fn worker_death_whose_subtree_never_empties_says_so() {
        let (mut t, calls) = table();
        open(&mut t, "w");
        calls.take();
        calls.never_empty();
        let out = t.worker_died("w").unwrap();
        assert!(matches!(out.msg, FromSupervisor::WorkerDied { verified_empty: false, .. }), "{:?}", out.msg);
        assert!(!calls.take().iter().any(|c| matches!(c, Call::RemoveTree(_))));
    }

    #[test]
    fn a_death_that_left_the_subtree_unverified_keeps_the_uid_held_past_the_close() {
        use crate::session_uids::{Holder, UidPool};
        let holder = |id: &str| Holder::Session(id.to_owned());
        let (t, calls) = table();
        let mut t = t.with_session_uids(UidPool::new(1_879_048_192..=1_879_048_200, None));
        open(&mut t, "stuck");
        open(&mut t, "clean");
        let uid = |t: &crate::fake::Table, id| t.uids.as_ref().unwrap().uid_of(&holder(id));
        assert!(uid(&t, "stuck").is_some() && uid(&t, "clean").is_some());
        calls.never_empty();
        t.worker_died("stuck").unwrap();
        let out = t.handle(ToSupervisor::CloseSession { req: 5, session: "stuck".into() });
        assert!(matches!(out.msg, FromSupervisor::Error { .. }), "{:?}", out.msg);
        assert!(uid(&t, "stuck").is_some(), "something may still run as the uid: it stays held");
        // A death whose teardown verified the subtree empty frees the uid at the close.
        let (t2, calls2) = table();
        let mut t2 = t2.with_session_uids(UidPool::new(1_879_048_192..=1_879_048_200, None));
        open(&mut t2, "clean");
        calls2.take();
        t2.worker_died("clean").unwrap();
        t2.handle(ToSupervisor::CloseSession { req: 6, session: "clean".into() });
        assert!(uid(&t2, "clean").is_none(), "a verified death frees the uid at the close");
    }

    #[test]
    fn close_all_ends_every_session() {
        let (mut t, _) = table();
        open(&mut t, "a");
        open(&mut t, "b");
        let done = t.close_all();
        assert_eq!(done.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert!(done.iter().all(|(_, td)| td.verified_empty));
        assert!(t.ids().is_empty());
    }
}
