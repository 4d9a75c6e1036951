//! Recording fakes of [`CgroupTreeOps`] and [`ProcessOps`] for unit tests: they record every call in
//! order, touch nothing privileged, and fail on request.
//!
//! ```ignore
//! let (mut table, calls) = crate::fake::table();
//! calls.fail_spawn();
//! ```

use crate::cgroup::{CgroupError, CgroupMode, CgroupTreeOps};
use crate::session_table::Sessions;
use crate::spawn::{ProcessOps, SpawnError, Spawned, WorkerSpec};
use crate::sys::Exit;
use crate::users::{UserInfo, NOGROUP};
use shm_proto::control::ProcInfo;
use shm_proto::sys::EventFd;
use std::cell::RefCell;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

/// One privileged operation, as the fakes saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    Create(PathBuf),
    Chown(PathBuf, u32, u32),
    Procs(PathBuf, PathBuf),
    Freeze(PathBuf),
    Kill(PathBuf),
    WaitEmpty(PathBuf),
    RemoveTree(PathBuf),
    /// Session id, cgroup, uid.
    SpawnWorker(String, PathBuf, u32),
    Reap,
}

/// What the fakes recorded, and the switches a test set on them.
#[derive(Debug, Default)]
struct Recorded {
    calls: Vec<Call>,
    exists: Vec<PathBuf>,
    fail_chown: bool,
    fail_spawn: bool,
    never_empty: bool,
    /// `wait_empty` answers "not yet" this many more times.
    not_empty_yet: u32,
    procs: Vec<ProcInfo>,
    /// Doorbells standing in for the spawned workers' pidfds (an eventfd polls readable when rung).
    pidfds: Vec<EventFd>,
}

/// The shared handle to the fakes' record and switches.
#[derive(Clone, Debug, Default)]
pub struct Recorder(Rc<RefCell<Recorded>>);

impl Recorder {
    fn push(&self, c: Call) {
        self.0.borrow_mut().calls.push(c);
    }
    /// The calls so far; clears the record.
    pub fn take(&self) -> Vec<Call> {
        std::mem::take(&mut self.0.borrow_mut().calls)
    }
    /// `create` of `path` fails with [`CgroupError::Exists`].
    pub fn fail_create(&self, path: &str) {
        self.0.borrow_mut().exists.push(path.into());
    }
    pub fn fail_chown(&self) {
        self.0.borrow_mut().fail_chown = true;
    }
    pub fn fail_spawn(&self) {
        self.0.borrow_mut().fail_spawn = true;
    }
    /// `wait_empty` times out.
    pub fn never_empty(&self) {
        self.0.borrow_mut().never_empty = true;
    }
    /// `wait_empty` answers "not yet" the next `n` times (a subtree that takes a while to empty).
    pub fn slow_empty(&self, n: u32) {
        self.0.borrow_mut().not_empty_yet = n;
    }
    /// Play the death of the last spawned worker: its stand-in pidfd turns readable.
    pub fn ring_last_pidfd(&self) {
        self.0.borrow().pidfds.last().expect("no worker spawned").notify().unwrap();
    }
    /// What `procs` returns.
    pub fn set_procs(&self, procs: Vec<ProcInfo>) {
        self.0.borrow_mut().procs = procs;
    }
}

#[derive(Debug)]
pub struct FakeCgroups(Recorder);

impl CgroupTreeOps for FakeCgroups {
    fn create(&self, dir: &Path) -> Result<(), CgroupError> {
        if self.0 .0.borrow().exists.iter().any(|p| p == dir) {
            return Err(CgroupError::Exists(dir.to_owned()));
        }
        self.0.push(Call::Create(dir.to_owned()));
        Ok(())
    }
    fn chown(&self, path: &Path, uid: u32, gid: u32) -> Result<(), CgroupError> {
        if self.0 .0.borrow().fail_chown {
            let source = std::io::Error::from_raw_os_error(libc::EPERM);
            return Err(CgroupError::Io { op: "chown", path: path.to_owned(), source });
        }
        self.0.push(Call::Chown(path.to_owned(), uid, gid));
        Ok(())
    }
    fn procs(&self, dir: &Path, skip: &Path) -> Result<Vec<ProcInfo>, CgroupError> {
        self.0.push(Call::Procs(dir.to_owned(), skip.to_owned()));
        Ok(self.0 .0.borrow().procs.clone())
    }
    fn freeze(&self, dir: &Path) -> Result<(), CgroupError> {
        self.0.push(Call::Freeze(dir.to_owned()));
        Ok(())
    }
    fn kill(&self, dir: &Path) -> Result<(), CgroupError> {
        self.0.push(Call::Kill(dir.to_owned()));
        Ok(())
    }
    fn wait_empty(&self, dir: &Path, _timeout: Duration) -> Result<bool, CgroupError> {
        self.0.push(Call::WaitEmpty(dir.to_owned()));
        let mut r = self.0 .0.borrow_mut();
        if r.not_empty_yet > 0 {
            r.not_empty_yet -= 1;
            return Ok(false);
        }
        Ok(!r.never_empty)
    }
    fn remove_tree(&self, dir: &Path) -> Result<(), CgroupError> {
        self.0.push(Call::RemoveTree(dir.to_owned()));
        Ok(())
    }
}

#[derive(Debug)]
pub struct FakeProcesses(Recorder);

impl ProcessOps for FakeProcesses {
    fn spawn_worker(&self, spec: &WorkerSpec<'_>) -> Result<Spawned, SpawnError> {
        if self.0 .0.borrow().fail_spawn {
            let e = std::io::Error::from_raw_os_error(libc::ENOEXEC);
            return Err(SpawnError::Spawn("heddle-worker", e));
        }
        self.0.push(Call::SpawnWorker(spec.session.to_owned(), spec.cgroup.to_owned(), spec.user.uid));
        let bell = EventFd::new().unwrap();
        let pidfd: OwnedFd = bell.as_fd().try_clone_to_owned().unwrap();
        self.0 .0.borrow_mut().pidfds.push(bell);
        Ok(Spawned { pid: 4242, pidfd })
    }
    fn reap(&self, _pidfd: BorrowedFd<'_>, _timeout: Duration) -> std::io::Result<Option<Exit>> {
        self.0.push(Call::Reap);
        Ok(Some(Exit::Signal(libc::SIGKILL)))
    }
    fn make_tmp(&self, id: &str, _user: &UserInfo) -> std::io::Result<std::path::PathBuf> {
        Ok(std::path::PathBuf::from(format!("/fake-tmp/{id}")))
    }
    fn remove_tmp(&self, _dir: &Path) -> std::io::Result<()> {
        Ok(())
    }
}

pub type Table = Sessions<FakeCgroups, FakeProcesses>;

/// A session table on the fakes, rooted at `/cg/heddle` (hybrid), default worker `nobody`.
pub fn table() -> (Table, Recorder) {
    let rec = Recorder::default();
    let nobody = UserInfo { uid: 65534, gid: NOGROUP, name: "nobody".into(), home: "/nonexistent".into() };
    let t = Sessions::new(
        FakeCgroups(rec.clone()),
        FakeProcesses(rec.clone()),
        "/cg/heddle".into(),
        CgroupMode::Hybrid,
        nobody,
    );
    (t, rec)
}

/// `OpenSession` with the default sandbox (workspace, no network switch, project `/`), no limits and
/// no extra roots.
pub fn open_msg(req: u64, session: &str, client_uid: u32) -> shm_proto::control::ToSupervisor {
    shm_proto::control::ToSupervisor::OpenSession {
        req,
        session: session.into(),
        client_uid,
        policy: "workspace".into(),
        network: None,
        ptys: None,
        project: "/".into(),
        memory_max: None,
        pids_max: None,
        writable: Vec::new(),
        bash: None,
    }
}
