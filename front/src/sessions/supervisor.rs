//! The front's link to the supervisor: requests (open and close a session, describe) and unsolicited
//! notices (a worker died, shut down), over the `SOCK_SEQPACKET` control socket (fd 3).
//!
//! The kernel sees the supervisor only through the [`SupervisorLink`] trait, so tests drive it with a
//! fake that builds regions in-process. The real [`ControlLink`] runs one reader thread doing
//! `control::recv`; each request registers a one-shot channel under its `req` number before it is
//! sent, and the reader routes the answer there. `WorkerDied` and `Shutdown` go to the [`Notice`]
//! channel, as does the socket closing ([`Notice::SupervisorGone`]). A packet that cannot be read
//! ends the link the same way (a skipped `WorkerDied` would leave a dead worker's session open): the
//! front exits and the supervisor starts one that takes the live sessions over. An answer that arrives after its
//! request timed out is dropped — except a late `SessionOpened`, whose session is closed at once so no
//! worker is left without a front.
//!
//! ```no_run
//! # fn demo(sock: std::os::fd::OwnedFd) {
//! use front::sessions::supervisor::{ControlLink, SupervisorLink};
//! let (tx, notices) = crossbeam_channel::unbounded();
//! let link = ControlLink::start(sock, tx).unwrap();
//! let facts = link.describe().unwrap();
//! # let _ = (facts, notices); }
//! ```

use crate::rpc::results::SupervisorFacts;
use crossbeam_channel::{bounded, Sender};
use shm_proto::control::{self, ControlError, FromSupervisor, KeptInfo, ProcInfo, SessionLimits, ToSupervisor};
use shm_proto::procs::ProcList;
use shm_proto::sys::EventFd;
use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use shm_proto::error_chain;

/// How long the supervisor may take to open a session (cgroup setup and a worker spawn).
pub const OPEN_TIMEOUT: Duration = Duration::from_secs(30);
/// How long it may take to close one (kill, wait for the subtree to empty, remove it).
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long it may take to describe itself (its loop may be busy with a teardown, bounded at 5 s).
pub const DESCRIBE_TIMEOUT: Duration = Duration::from_secs(10);

/// The five fds of an opened session, in [`control::SESSION_FDS`] order.
#[derive(Debug)]
pub struct SessionFds {
    pub memfd: OwnedFd,
    pub cmd_data: EventFd,
    pub cmd_space: EventFd,
    pub evt_data: EventFd,
    pub evt_space: EventFd,
}

impl SessionFds {
    /// Take exactly five fds in protocol order.
    pub fn from_vec(fds: Vec<OwnedFd>) -> Result<SessionFds, LinkError> {
        let n = fds.len();
        let Ok([memfd, a, b, c, d]) = <[OwnedFd; 5]>::try_from(fds) else {
            return Err(LinkError::Protocol(format!("SessionOpened came with {n} fds instead of 5")));
        };
        let e = EventFd::from_owned;
        Ok(SessionFds { memfd, cmd_data: e(a), cmd_space: e(b), evt_data: e(c), evt_space: e(d) })
    }
}

/// A session the supervisor opened.
#[derive(Debug)]
pub struct OpenedSession {
    pub fds: SessionFds,
    pub worker_pid: u32,
    pub worker_uid: u32,
    pub cgroup: String,
    /// The session's temp dir.
    pub tmp: String,
}

/// A session the supervisor closed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClosedSession {
    /// What it killed: the first [`shm_proto::procs::MAX_LISTED`], the rest counted.
    pub killed: ProcList<ProcInfo>,
    pub verified_empty: bool,
}

/// Errors of a supervisor request.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LinkError {
    #[error("the supervisor refused: {0}")]
    Refused(String),
    #[error("the supervisor did not answer within {0:?}")]
    Timeout(Duration),
    #[error("the supervisor is gone (control socket closed)")]
    Gone,
    #[error("sending to the supervisor failed")]
    Send(#[source] ControlError),
    #[error("the supervisor answered out of protocol: {0}")]
    Protocol(String),
}

/// What the kernel needs from the supervisor.
pub trait SupervisorLink: Send + Sync {
    /// Open a session for a client of uid `client_uid`.
    fn open_session(
        &self,
        session: &str,
        client_uid: u32,
        sandbox: &crate::sessions::sandbox::SandboxRequest,
        limits: &SessionLimits,
    ) -> Result<OpenedSession, LinkError>;
    /// A new worker's `Hello` and `BashFile` named its bash (version, file identity): later opens pass it
    /// on, so their workers need not run bash to learn the version (worker/src/startup.rs).
    fn saw_bash(&self, _seen: shm_proto::control::BashSeen) {}
    /// Kill and remove a session's cgroup subtree.
    fn close_session(&self, session: &str) -> Result<ClosedSession, LinkError>;
    /// The supervisor's own facts.
    fn describe(&self) -> Result<SupervisorFacts, LinkError>;
    /// True once the supervisor is known to be gone (the control socket closed or failed): the front
    /// is about to exit, and the sessions' processes are ended by the supervisor that comes next.
    fn is_gone(&self) -> bool {
        false
    }
    /// Move the processes of the job's cgroup (`cgroup`, relative to the session's) to `kept/NAME`.
    fn keep_job(
        &self,
        _session: &str,
        _job: u64,
        _cgroup: &str,
        _name: &str,
        _owner_uid: u32,
    ) -> Result<KeptInfo, LinkError> {
        Err(LinkError::Refused("this supervisor cannot keep jobs".into()))
    }
    /// Every kept job, and how many did not fit in the supervisor's answer.
    fn list_kept(&self) -> Result<(Vec<KeptInfo>, u32), LinkError> {
        Ok((Vec::new(), 0))
    }
    /// End a kept job: `(killed, verified_empty)`.
    fn kill_kept(&self, name: &str) -> Result<(ProcList<ProcInfo>, bool), LinkError> {
        Err(LinkError::Refused(format!("there is no kept job named {name:?}")))
    }
    /// A session's limits and accounting.
    fn session_usage(&self, _session: &str) -> Result<SessionLimits, LinkError> {
        Err(LinkError::Refused("this supervisor keeps no session accounting".into()))
    }
}

/// Things the supervisor (or the process) says without being asked.
#[derive(Debug)]
pub enum Notice {
    WorkerDied {
        session: String,
        code: Option<i32>,
        signal: Option<i32>,
        killed: ProcList<ProcInfo>,
        /// The supervisor's teardown at the death verified the session's subtree empty and removed it.
        verified_empty: bool,
    },
    /// The supervisor asked the front to exit.
    Shutdown,
    /// The control socket closed or failed: the supervisor is gone.
    SupervisorGone(String),
    /// A termination signal arrived.
    Signal(i32),
    /// A root client asked for `shutdown` with this grace.
    Asked(std::time::Duration),
    /// A live session handed over to this (restarted) front.
    Adopt(Box<Adopted>),
    /// Every live session was handed over.
    AdoptDone(u32),
}

type Reply = (FromSupervisor, Vec<OwnedFd>);

impl std::fmt::Debug for ControlLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlLink").finish_non_exhaustive()
    }
}

/// The real link over the control socket.
pub struct ControlLink {
    sock: OwnedFd,
    pending: Mutex<HashMap<u64, Sender<Reply>>>,
    next_req: AtomicU64,
    gone: AtomicBool,
    /// The bash the latest worker reported ([`SupervisorLink::saw_bash`]), passed on with each open.
    bash_seen: Mutex<Option<shm_proto::control::BashSeen>>,
}

impl ControlLink {
    /// Start the reader thread; notices go to `notices`.
    pub fn start(sock: OwnedFd, notices: Sender<Notice>) -> std::io::Result<Arc<ControlLink>> {
        let link = Arc::new(ControlLink {
            sock,
            pending: Mutex::new(HashMap::new()),
            next_req: AtomicU64::new(1),
            gone: AtomicBool::new(false),
            bash_seen: Mutex::new(None),
        });
        let reader = link.clone();
        std::thread::Builder::new().name("supervisor-link".into()).spawn(move || reader.read_loop(notices))?;
        Ok(link)
    }

    fn read_loop(&self, notices: Sender<Notice>) {
        let why = loop {
            match control::recv::<FromSupervisor>(self.sock.as_fd()) {
                Ok((msg, fds)) => self.route(msg, fds, &notices),
                // Every message the supervisor sends fits one packet and decodes (`FromSupervisor::fit`); one
                // that does not may have been a `WorkerDied`, and a front that skipped it would keep a
                // session whose worker is dead. So the front exits instead: the supervisor starts a new
                // one and hands it the sessions that are alive (`kernel/recovery.rs`).
                Err(e @ (ControlError::Frame(_) | ControlError::Truncated)) => {
                    break format!("a control packet could not be read ({}), so a notice may be lost", error_chain(&e))
                }
                Err(ControlError::Closed) => break "the supervisor closed the control socket".to_owned(),
                Err(e) => break format!("reading the control socket failed: {}", error_chain(&e)),
            }
        };
        self.gone.store(true, Ordering::SeqCst);
        // Dropping the senders wakes every waiting request with `Gone`.
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).clear();
        let _ = notices.send(Notice::SupervisorGone(why));
    }

    fn route(&self, msg: FromSupervisor, fds: Vec<OwnedFd>, notices: &Sender<Notice>) {
        let msg = match msg {
            FromSupervisor::SessionAdopt { session, worker_pid, worker_uid, cgroup, .. } => {
                match SessionFds::from_vec(fds) {
                    Ok(fds) => {
                        let a = Adopted { session, worker_pid, worker_uid, cgroup, fds };
                        let _ = notices.send(Notice::Adopt(Box::new(a)));
                    }
                    Err(e) => tracing::warn!("cannot take over session '{session}': {e}"),
                }
                return;
            }
            FromSupervisor::AdoptDone { sessions } => {
                let _ = notices.send(Notice::AdoptDone(sessions));
                return;
            }
            other => other,
        };
        let req = match &msg {
            FromSupervisor::WorkerDied { session, code, signal, killed, verified_empty } => {
                let n = Notice::WorkerDied {
                    session: session.clone(),
                    code: *code,
                    signal: *signal,
                    killed: killed.clone(),
                    verified_empty: *verified_empty,
                };
                let _ = notices.send(n);
                return;
            }
            FromSupervisor::Shutdown => {
                let _ = notices.send(Notice::Shutdown);
                return;
            }
            FromSupervisor::SessionOpened { req, .. }
            | FromSupervisor::SessionFailed { req, .. }
            | FromSupervisor::SessionClosed { req, .. }
            | FromSupervisor::Info { req, .. }
            | FromSupervisor::Error { req, .. }
            | FromSupervisor::JobKept { req, .. }
            | FromSupervisor::KeptList { req, .. }
            | FromSupervisor::KeptKilled { req, .. }
            | FromSupervisor::Usage { req, .. } => *req,
            FromSupervisor::SessionAdopt { .. } | FromSupervisor::AdoptDone { .. } => return,
        };
        let waiter = self.pending.lock().unwrap_or_else(|e| e.into_inner()).remove(&req);
        match (waiter, msg) {
            (Some(tx), msg) => {
                let _ = tx.send((msg, fds));
            }
            (None, FromSupervisor::SessionOpened { session, .. }) => {
                tracing::warn!("session '{session}' opened after its request gave up; closing it");
                let req = self.next_req.fetch_add(1, Ordering::Relaxed);
                let _ = control::send(self.sock.as_fd(), &ToSupervisor::CloseSession { req, session }, &[]);
            }
            (None, msg) => tracing::warn!("dropping an answer nobody waits for: {msg:?}"),
        }
    }

    fn request(&self, make: impl FnOnce(u64) -> ToSupervisor, timeout: Duration) -> Result<Reply, LinkError> {
        if self.gone.load(Ordering::SeqCst) {
            return Err(LinkError::Gone);
        }
        let req = self.next_req.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = bounded(1);
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).insert(req, tx);
        let forget = || self.pending.lock().unwrap_or_else(|e| e.into_inner()).remove(&req);
        if let Err(e) = control::send(self.sock.as_fd(), &make(req), &[]) {
            forget();
            return Err(LinkError::Send(e));
        }
        match rx.recv_timeout(timeout) {
            Ok(reply) => Ok(reply),
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                forget();
                Err(LinkError::Timeout(timeout))
            }
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => Err(LinkError::Gone),
        }
    }
}

impl SupervisorLink for ControlLink {
    fn open_session(
        &self,
        session: &str,
        client_uid: u32,
        sandbox: &crate::sessions::sandbox::SandboxRequest,
        limits: &SessionLimits,
    ) -> Result<OpenedSession, LinkError> {
        let make = |req| ToSupervisor::OpenSession {
            req,
            session: session.to_owned(),
            client_uid,
            policy: sandbox.policy.clone(),
            network: sandbox.network,
            ptys: sandbox.ptys,
            project: sandbox.project.clone(),
            memory_max: limits.memory_max,
            pids_max: limits.pids_max,
            writable: sandbox.writable.clone(),
            bash: self.bash_seen.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        };
        self.opened(session, self.request(make, OPEN_TIMEOUT)?)
    }

    fn saw_bash(&self, seen: shm_proto::control::BashSeen) {
        if seen.is_plain() {
            *self.bash_seen.lock().unwrap_or_else(|e| e.into_inner()) = Some(seen);
        }
    }

    fn close_session(&self, session: &str) -> Result<ClosedSession, LinkError> {
        let make = |req| ToSupervisor::CloseSession { req, session: session.to_owned() };
        match self.request(make, CLOSE_TIMEOUT)? {
            (FromSupervisor::SessionClosed { killed, verified_empty, .. }, _) => {
                Ok(ClosedSession { killed, verified_empty })
            }
            (FromSupervisor::Error { error, .. } | FromSupervisor::SessionFailed { error, .. }, _) => {
                Err(LinkError::Refused(error))
            }
            (other, _) => Err(LinkError::Protocol(format!("unexpected answer to CloseSession: {other:?}"))),
        }
    }

    fn is_gone(&self) -> bool {
        self.gone.load(Ordering::SeqCst)
    }

    fn describe(&self) -> Result<SupervisorFacts, LinkError> {
        match self.request(|req| ToSupervisor::Describe { req }, DESCRIBE_TIMEOUT)? {
            (FromSupervisor::Info { supervisor_pid, cgroup_root, cgroup_mode, .. }, _) => {
                Ok(SupervisorFacts { pid: supervisor_pid, cgroup_root, cgroup_mode })
            }
            (FromSupervisor::Error { error, .. }, _) => Err(LinkError::Refused(error)),
            (other, _) => Err(LinkError::Protocol(format!("unexpected answer to Describe: {other:?}"))),
        }
    }

    fn keep_job(
        &self,
        session: &str,
        job: u64,
        cgroup: &str,
        name: &str,
        owner_uid: u32,
    ) -> Result<KeptInfo, LinkError> {
        let make = |req| ToSupervisor::KeepJob {
            req,
            session: session.to_owned(),
            job,
            cgroup: cgroup.to_owned(),
            name: name.to_owned(),
            owner_uid,
        };
        match self.request(make, CLOSE_TIMEOUT)? {
            (FromSupervisor::JobKept { kept, .. }, _) => Ok(kept),
            (FromSupervisor::Error { error, .. }, _) => Err(LinkError::Refused(error)),
            (other, _) => Err(LinkError::Protocol(format!("unexpected answer to KeepJob: {other:?}"))),
        }
    }

    fn list_kept(&self) -> Result<(Vec<KeptInfo>, u32), LinkError> {
        match self.request(|req| ToSupervisor::ListKept { req }, DESCRIBE_TIMEOUT)? {
            (FromSupervisor::KeptList { kept, more, .. }, _) => Ok((kept, more)),
            (FromSupervisor::Error { error, .. }, _) => Err(LinkError::Refused(error)),
            (other, _) => Err(LinkError::Protocol(format!("unexpected answer to ListKept: {other:?}"))),
        }
    }

    fn kill_kept(&self, name: &str) -> Result<(ProcList<ProcInfo>, bool), LinkError> {
        match self.request(|req| ToSupervisor::KillKept { req, name: name.to_owned() }, CLOSE_TIMEOUT)? {
            (FromSupervisor::KeptKilled { killed, verified_empty, .. }, _) => Ok((killed, verified_empty)),
            (FromSupervisor::Error { error, .. }, _) => Err(LinkError::Refused(error)),
            (other, _) => Err(LinkError::Protocol(format!("unexpected answer to KillKept: {other:?}"))),
        }
    }

    fn session_usage(&self, session: &str) -> Result<SessionLimits, LinkError> {
        match self.request(|req| ToSupervisor::SessionUsage { req, session: session.to_owned() }, DESCRIBE_TIMEOUT)? {
            (FromSupervisor::Usage { limits, .. }, _) => Ok(limits),
            (FromSupervisor::Error { error, .. }, _) => Err(LinkError::Refused(error)),
            (other, _) => Err(LinkError::Protocol(format!("unexpected answer to SessionUsage: {other:?}"))),
        }
    }
}

impl ControlLink {
    /// An answer to an open request, as an opened session.
    fn opened(&self, session: &str, reply: Reply) -> Result<OpenedSession, LinkError> {
        match reply {
            (FromSupervisor::SessionOpened { worker_pid, worker_uid, cgroup, tmp, .. }, fds) => {
                let fds = SessionFds::from_vec(fds).inspect_err(|_| {
                    let _ = self.close_session(session);
                })?;
                Ok(OpenedSession { fds, worker_pid, worker_uid, cgroup, tmp })
            }
            (FromSupervisor::SessionFailed { error, .. } | FromSupervisor::Error { error, .. }, _) => {
                Err(LinkError::Refused(error))
            }
            (other, _) => Err(LinkError::Protocol(format!("unexpected answer to OpenSession: {other:?}"))),
        }
    }
}

/// A session the supervisor handed over.
#[derive(Debug)]
pub struct Adopted {
    pub session: String,
    pub worker_pid: u32,
    pub worker_uid: u32,
    pub cgroup: String,
    pub fds: SessionFds,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req() -> crate::sessions::sandbox::SandboxRequest {
        crate::sessions::sandbox::SandboxRequest {
            policy: "workspace".into(),
            network: None,
            ptys: None,
            project: "/".into(),
            writable: Vec::new(),
            nested: None,
        }
    }
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    use shm_proto::region::{Region, RegionConfig};

    fn pair() -> (OwnedFd, OwnedFd) {
        socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC).unwrap()
    }

    fn recv_to(sock: &OwnedFd) -> ToSupervisor {
        control::recv::<ToSupervisor>(sock.as_fd()).unwrap().0
    }

    #[test]
    fn open_session_receives_five_fds() {
        let (front, sup) = pair();
        let (tx, _rx) = crossbeam_channel::unbounded();
        let link = ControlLink::start(front, tx).unwrap();
        let t = std::thread::spawn(move || {
            let ToSupervisor::OpenSession { req, session, client_uid, .. } = recv_to(&sup) else { panic!() };
            assert_eq!((session.as_str(), client_uid), ("s1", 1000));
            let (_r, memfd) = Region::create(RegionConfig::default()).unwrap();
            let efds: Vec<EventFd> = (0..4).map(|_| EventFd::new().unwrap()).collect();
            let mut fds = vec![memfd.as_fd()];
            fds.extend(efds.iter().map(|e| e.as_fd()));
            let msg = FromSupervisor::SessionOpened {
                req,
                session,
                worker_pid: 7,
                worker_uid: 1000,
                cgroup: "/cg".into(),
                tmp: "/t".into(),
            };
            control::send(sup.as_fd(), &msg, &fds).unwrap();
            sup
        });
        let opened = link.open_session("s1", 1000, &req(), &SessionLimits::default()).unwrap();
        assert_eq!((opened.worker_pid, opened.cgroup.as_str()), (7, "/cg"));
        Region::attach(opened.fds.memfd.as_fd()).unwrap();
        t.join().unwrap();
    }

    #[test]
    fn refusals_and_notices_are_routed() {
        let (front, sup) = pair();
        let (tx, rx) = crossbeam_channel::unbounded();
        let link = ControlLink::start(front, tx).unwrap();
        let t = std::thread::spawn(move || {
            let ToSupervisor::OpenSession { req, session, .. } = recv_to(&sup) else { panic!() };
            let died = FromSupervisor::WorkerDied {
                session: "x".into(),
                code: None,
                signal: Some(9),
                killed: Default::default(),
                verified_empty: true,
            };
            control::send(sup.as_fd(), &died, &[]).unwrap();
            control::send(sup.as_fd(), &FromSupervisor::SessionFailed { req, session, error: "no cgroup".into() }, &[])
                .unwrap();
            drop(sup);
        });
        let err = link.open_session("s1", 0, &req(), &SessionLimits::default()).unwrap_err();
        assert!(matches!(&err, LinkError::Refused(e) if e == "no cgroup"), "{err}");
        t.join().unwrap();
        let n = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(matches!(n, Notice::WorkerDied { signal: Some(9), verified_empty: true, .. }), "{n:?}");
        let n = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(matches!(n, Notice::SupervisorGone(_)), "{n:?}");
        assert!(matches!(link.describe(), Err(LinkError::Gone)));
    }

    #[test]
    fn an_unreadable_packet_ends_the_link_rather_than_being_skipped() {
        let (front, sup) = pair();
        let (tx, rx) = crossbeam_channel::unbounded();
        let _link = ControlLink::start(front, tx).unwrap();
        nix::sys::socket::send(std::os::fd::AsRawFd::as_raw_fd(&sup), &[0xff; 9], nix::sys::socket::MsgFlags::empty())
            .unwrap();
        let n = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(matches!(&n, Notice::SupervisorGone(why) if why.contains("notice may be lost")), "{n:?}");
    }

    #[test]
    fn wrong_fd_count_is_a_protocol_error() {
        assert!(matches!(SessionFds::from_vec(vec![]), Err(LinkError::Protocol(_))));
    }
}
