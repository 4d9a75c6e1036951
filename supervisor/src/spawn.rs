//! Spawning the unprivileged processes: the front (once, at start) and one worker per session, each
//! with dropped privileges, its fds at fixed numbers and a minimal environment, exactly as
//! docs/architecture.md ("Command lines, inherited fds, environments") fixes them. Worker spawning and
//! reaping sit behind [`ProcessOps`] so the session logic can be tested with a fake.
//!
//! Invariants: a child never runs as root past exec (groups `[gid]`, gid, uid, no_new_privs); it
//! inherits only the fds named here; a worker is in its session's `worker` cgroup before it execs.
//!
//! ```no_run
//! use supervisor::spawn::worker_env;
//! use supervisor::users::UserInfo;
//! let env = worker_env(&UserInfo::resolve("nobody").unwrap(), std::env::vars_os());
//! assert!(env.iter().any(|(k, _)| k == "PATH"));
//! ```

use crate::sys::{self, ChildSetup, Exit};
use crate::users::UserInfo;
use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The worker's `PATH`, fixed by the contract.
pub const WORKER_PATH: &str = shm_proto::control::WORKER_PATH;

/// Errors spawning a child.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpawnError {
    /// The cgroup directory the worker is cloned into, or a v1 `tasks` file it joins.
    #[error("cannot open {0}")]
    CgroupProcs(PathBuf, #[source] io::Error),
    #[error("cannot start {0}")]
    Spawn(&'static str, #[source] io::Error),
    #[error(
        "cannot map the project {0} for the session's uid (an idmapped mount; the file system must support one: ext4, xfs, btrfs, tmpfs)"
    )]
    ProjectMount(PathBuf, #[source] io::Error),
}

/// A child we started and have not reaped.
#[derive(Debug)]
pub struct Spawned {
    pub pid: u32,
    pub pidfd: OwnedFd,
}

/// What a worker is started with.
#[derive(Debug)]
pub struct WorkerSpec<'a> {
    pub session: &'a str,
    /// The session cgroup (`--cgroup`); the worker itself goes into its `worker` child.
    pub cgroup: &'a Path,
    /// The jobs' user: the worker's effective uid (and gid, groups).
    pub user: &'a UserInfo,
    /// The cgroup owner: the worker's real uid, which it places its jobs as and they never hold.
    pub cgroup_owner: u32,
    /// Region memfd and the four eventfds, in `SESSION_FDS` order: the worker's fds 3…7.
    pub fds: [BorrowedFd<'a>; 5],
    /// The session's v1 cgroup directories (hybrid hosts): the worker joins them before exec.
    pub v1: &'a [PathBuf],
    /// The sandbox settings (`--policy`, `--network`, `--project`).
    pub policy: &'a crate::session::WorkerPolicy,
    /// The session's temp dir (`--tmp`).
    pub tmp: &'a Path,
    /// `user.home` is a home heddle made for the uid (`--own-home`): the worker makes it writable.
    pub own_home: bool,
}

/// Starting and reaping workers.
pub trait ProcessOps {
    /// Start a session's worker in `<cgroup>/worker`.
    fn spawn_worker(&self, spec: &WorkerSpec<'_>) -> Result<Spawned, SpawnError>;
    /// Wait up to `timeout` for the child behind `pidfd` to exit, and reap it; `None` if it is still
    /// running.
    fn reap(&self, pidfd: BorrowedFd<'_>, timeout: Duration) -> io::Result<Option<Exit>>;
    /// Create session `id`'s private temp dir, mode 0700, owned by `user`.
    fn make_tmp(&self, id: &str, user: &UserInfo) -> io::Result<PathBuf>;
    /// Remove a session's temp dir and everything in it.
    fn remove_tmp(&self, dir: &Path) -> io::Result<()>;
    /// The home directory `user`'s jobs get: their passwd home when it is a directory they own, else a
    /// home heddle makes for the uid (true: made by heddle, so the whole of it is a writable root).
    fn home_for(&self, user: &UserInfo) -> io::Result<(UserInfo, bool)> {
        Ok((user.clone(), false))
    }
    /// Remove the home heddle made for `uid` (a session uid being freed or handed out again), if any.
    fn remove_home(&self, _uid: u32) -> io::Result<()> {
        Ok(())
    }
    /// Right after a job was kept: hold duplicates of the read ends of its output pipes (see
    /// `kept_output`), so they outlive the worker.
    fn hold_kept_pipes(
        &self,
        _root: &Path,
        _name: &str,
        _worker_pid: u32,
        _worker_pidfd: BorrowedFd<'_>,
    ) -> Option<crate::kept_output::Rescue> {
        None
    }
    /// When a session's worker goes (its subtree frozen, or it died): start a drainer for each kept job
    /// whose pipes are `held`, or that the (frozen) worker still reads. Returns what was done, for the log.
    fn rescue_kept_output(
        &self,
        _root: &Path,
        _worker_pid: u32,
        _worker_pidfd: BorrowedFd<'_>,
        _held: Vec<crate::kept_output::Rescue>,
    ) -> Vec<String> {
        Vec::new()
    }
}

/// Where session temp dirs live: `$TMPDIR` (or `/tmp`) `/heddle-sessions-<cgroup root name>`, mode 0711.
///
/// Named after the cgroup root rather than the process, so a supervisor restarted on the same root finds
/// the temp dirs of the sessions its recovery ended and removes them ([`remove_stale_tmp`]).
pub fn tmp_root(cgroup_root: &Path) -> PathBuf {
    let base = std::env::var_os("TMPDIR").filter(|v| !v.is_empty()).unwrap_or_else(|| "/tmp".into());
    let name = cgroup_root.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "root".into());
    PathBuf::from(base).join(format!("heddle-sessions-{name}"))
}

/// Where the homes heddle makes live, beside the session temp dirs: `…/heddle-homes-<cgroup root name>`
/// (root-owned, 0711), one `<uid>` directory (0700, owned by the uid) per job uid. They outlive sessions
/// (tool caches persist across a uid's sessions) and supervisor restarts.
pub fn homes_root(tmp_root: &Path) -> PathBuf {
    let name = tmp_root.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let name =
        name.strip_prefix("heddle-sessions-").map_or_else(|| format!("{name}-homes"), |r| format!("heddle-homes-{r}"));
    tmp_root.with_file_name(name)
}

/// Remove the session temp dirs an earlier supervisor on the same root left (it died without closing
/// its sessions; recovery has ended them). Only a real directory is removed, never through a symlink.
pub fn remove_stale_tmp(tmp_root: &Path) -> io::Result<bool> {
    match std::fs::symlink_metadata(tmp_root) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(tmp_root).map(|()| true),
        Ok(_) => Err(io::Error::other(format!("{} is not a directory", tmp_root.display()))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// The real [`ProcessOps`].
#[derive(Debug)]
pub struct RealProcesses {
    /// `heddle-worker`, opened once at start.
    pub worker_exe: OwnedFd,
    /// Where session temp dirs go ([`tmp_root`]).
    pub tmp_root: PathBuf,
    /// This executable, opened at start: kept jobs' drainers run it (`--drain-kept`).
    pub self_exe: Option<OwnedFd>,
    /// `<state-dir>/kept`: kept jobs' logs, owned by `log_owner` (the front's user) so it can read them.
    pub kept_logs: PathBuf,
    pub log_owner: (u32, u32),
}

impl ProcessOps for RealProcesses {
    fn spawn_worker(&self, spec: &WorkerSpec<'_>) -> Result<Spawned, SpawnError> {
        let worker_dir = crate::session::worker_dir(spec.cgroup);
        let cgroup = open_cgroup_dir(&worker_dir).map_err(|e| SpawnError::CgroupProcs(worker_dir.clone(), e))?;
        let mut v1 = Vec::with_capacity(spec.v1.len());
        for dir in spec.v1 {
            let p = dir.join("tasks");
            v1.push(std::fs::OpenOptions::new().write(true).open(&p).map_err(|e| SpawnError::CgroupProcs(p, e))?);
        }
        // A project another uid owns, mapped for the jobs' uid (crate::owned_project); none when the
        // jobs' uid owns it already.
        let mount = match spec.policy.owned_project.as_ref().filter(|p| p.owner_uid != spec.user.uid) {
            Some(p) => Some(
                crate::owned_project::prepare(p, spec.user.uid, spec.user.gid)
                    .map_err(|e| SpawnError::ProjectMount(p.path.clone(), e))?,
            ),
            None => None,
        };
        let setup = ChildSetup {
            exe: self.worker_exe.as_fd(),
            arg0: "heddle-worker",
            args: worker_args(spec),
            env: worker_env(spec.user, std::env::vars_os()),
            uid: spec.user.uid,
            real_uid: Some(spec.cgroup_owner),
            gid: spec.user.gid,
            cgroup: Some(cgroup.as_fd()),
            fds: spec.fds.iter().zip(3..).map(|(fd, n)| (*fd, n)).collect(),
            v1_tasks: v1.iter().map(AsFd::as_fd).collect(),
            project_mount: mount.as_ref(),
            private_devpts: true,
        };
        start(&setup, "heddle-worker")
    }

    fn reap(&self, pidfd: BorrowedFd<'_>, timeout: Duration) -> io::Result<Option<Exit>> {
        reap_within(pidfd, timeout)
    }

    fn make_tmp(&self, id: &str, user: &UserInfo) -> io::Result<PathBuf> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        let root = &self.tmp_root;
        match std::fs::DirBuilder::new().mode(0o711).create(root) {
            Ok(()) => std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o711))?,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && !root.is_symlink() => {}
            Err(e) => return Err(e),
        }
        let dir = root.join(id);
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        std::os::unix::fs::chown(&dir, Some(user.uid), Some(user.gid))?;
        Ok(dir)
    }

    fn remove_tmp(&self, dir: &Path) -> io::Result<()> {
        std::fs::remove_dir_all(dir)
    }

    fn home_for(&self, user: &UserInfo) -> io::Result<(UserInfo, bool)> {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
        let owned = std::fs::symlink_metadata(&user.home).is_ok_and(|m| m.is_dir() && m.uid() == user.uid);
        if owned && user.home != Path::new("/") {
            return Ok((user.clone(), false));
        }
        let root = homes_root(&self.tmp_root);
        match std::fs::DirBuilder::new().mode(0o711).create(&root) {
            Ok(()) => std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o711))?,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let root_meta = std::fs::symlink_metadata(&root)?;
        if !root_meta.is_dir() || root_meta.uid() != 0 {
            return Err(io::Error::other(format!("{} is not a directory owned by root", root.display())));
        }
        let home = root.join(user.uid.to_string());
        match std::fs::DirBuilder::new().mode(0o700).create(&home) {
            Ok(()) => std::os::unix::fs::chown(&home, Some(user.uid), Some(user.gid))?,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        // Made by us under a root-owned 0711 directory: a symlink or a directory another uid owns in its
        // place means something else wrote there, and is not handed to the jobs.
        let meta = std::fs::symlink_metadata(&home)?;
        if !meta.is_dir() || meta.uid() != user.uid {
            return Err(io::Error::other(format!("{} is not a directory owned by uid {}", home.display(), user.uid)));
        }
        Ok((UserInfo { home, ..user.clone() }, true))
    }

    fn remove_home(&self, uid: u32) -> io::Result<()> {
        let home = homes_root(&self.tmp_root).join(uid.to_string());
        match std::fs::symlink_metadata(&home) {
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(&home),
            Ok(_) => std::fs::remove_file(&home),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn hold_kept_pipes(
        &self,
        root: &Path,
        name: &str,
        worker_pid: u32,
        worker_pidfd: BorrowedFd<'_>,
    ) -> Option<crate::kept_output::Rescue> {
        crate::kept_output::take_pipes(&crate::kept::kept_root(root), name, worker_pid, worker_pidfd)
    }

    fn rescue_kept_output(
        &self,
        root: &Path,
        worker_pid: u32,
        worker_pidfd: BorrowedFd<'_>,
        mut held: Vec<crate::kept_output::Rescue>,
    ) -> Vec<String> {
        let Some(exe) = &self.self_exe else { return Vec::new() };
        let skip: Vec<&str> = held.iter().map(|r| r.name.as_str()).collect();
        let found = crate::kept_output::take_kept_pipes(&crate::kept::kept_root(root), &skip, worker_pid, worker_pidfd);
        held.extend(found);
        held.into_iter()
            .map(|r| match self.start_drainer(exe.as_fd(), root, &r) {
                Ok(log) => format!("kept job {:?}: its output now goes to {}", r.name, log.display()),
                Err(e) => format!("kept job {:?}: its output cannot be kept ({e}); it may get SIGPIPE", r.name),
            })
            .collect()
    }
}

impl RealProcesses {
    /// Open (create) `<kept_logs>/NAME.log` and start a drainer in `kept/NAME` with the log on fd 3 and
    /// the pipes on fds 4…; the drainer detaches, so its short-lived parent is reaped here.
    fn start_drainer(&self, exe: BorrowedFd<'_>, root: &Path, r: &crate::kept_output::Rescue) -> io::Result<PathBuf> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let (uid, gid) = self.log_owner;
        match std::fs::DirBuilder::new().mode(0o700).create(&self.kept_logs) {
            Ok(()) => std::os::unix::fs::chown(&self.kept_logs, Some(uid), Some(gid))?,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let path = self.kept_logs.join(format!("{}.log", r.name));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)?;
        std::os::unix::fs::fchown(&log, Some(uid), Some(gid))?;
        let cgroup = crate::kept::kept_root(root).join(&r.name).join(crate::kept_output::DRAIN_CGROUP);
        match std::fs::create_dir(&cgroup) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let cgroup_dir = open_cgroup_dir(&cgroup)?;
        let mut fds: Vec<(BorrowedFd<'_>, i32)> = vec![(log.as_fd(), 3)];
        fds.extend(r.fds.iter().zip(4..).map(|(fd, n)| (fd.as_fd(), n)));
        let setup = ChildSetup {
            exe,
            arg0: "heddle-kept-drain",
            args: vec![crate::kept_output::DRAIN_ARG.into()],
            env: Vec::new(),
            uid: crate::users::NOBODY,
            real_uid: None,
            gid: crate::users::NOGROUP,
            cgroup: Some(cgroup_dir.as_fd()),
            fds,
            v1_tasks: Vec::new(),
            project_mount: None,
            private_devpts: false,
        };
        let (_, pidfd) = sys::spawn_child(&setup)?;
        sys::wait_pidfd(pidfd.as_fd(), false)?;
        Ok(path)
    }
}

/// The worker's arguments: `--session ID --cgroup DIR --policy=NAME --project=DIR --tmp=DIR
/// [--network=BOOL] [--ptys=BOOL] [--own-home] [--bash-seen=ID --bash-version=V] [--writable=DIR…]
/// [--allow-writable=DIR…]`.
fn worker_args(spec: &WorkerSpec<'_>) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec!["--session".into(), spec.session.into(), "--cgroup".into(), spec.cgroup.into()];
    args.push(format!("--policy={}", spec.policy.policy).into());
    let mut project: OsString = "--project=".into();
    project.push(&spec.policy.project);
    args.push(project);
    let mut tmp: OsString = "--tmp=".into();
    tmp.push(spec.tmp);
    args.push(tmp);
    if let Some(n) = spec.policy.network {
        args.push(format!("--network={n}").into());
    }
    if let Some(p) = spec.policy.ptys {
        args.push(format!("--ptys={p}").into());
    }
    if spec.own_home {
        args.push("--own-home".into());
    }
    if let Some(b) = spec.policy.bash.as_ref().filter(|b| b.is_plain()) {
        args.push(format!("--bash-seen={}", b.id).into());
        args.push(format!("--bash-version={}", b.version).into());
    }
    for (flag, dirs) in [("--writable=", &spec.policy.writable), ("--allow-writable=", &spec.policy.allow_writable)] {
        for dir in dirs {
            let mut arg: OsString = flag.into();
            arg.push(dir);
            args.push(arg);
        }
    }
    args
}

/// Spawn `setup`; its pidfd comes with it (`CLONE_PIDFD`).
fn start(setup: &ChildSetup<'_>, what: &'static str) -> Result<Spawned, SpawnError> {
    let (pid, pidfd) = sys::spawn_child(setup).map_err(|e| SpawnError::Spawn(what, e))?;
    Ok(Spawned { pid, pidfd })
}

/// A cgroup v2 directory opened for `CLONE_INTO_CGROUP`.
fn open_cgroup_dir(dir: &Path) -> io::Result<OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt;
    Ok(std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECTORY).open(dir)?.into())
}

/// Wait up to `timeout` for the child behind `pidfd` to exit (the pidfd turns readable), then reap it.
pub fn reap_within(pidfd: BorrowedFd<'_>, timeout: Duration) -> io::Result<Option<Exit>> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(exit) = sys::wait_pidfd(pidfd, true)? {
            return Ok(Some(exit));
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        let ms = PollTimeout::try_from(left.as_millis().max(1)).unwrap_or(PollTimeout::MAX);
        let mut fds = [PollFd::new(pidfd, PollFlags::POLLIN)];
        match poll(&mut fds, ms) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// The worker's whole environment: the fixed `PATH`; `HOME`, `USER`, `LOGNAME` from `user`; `LANG`
/// and `LC_*` copied from `inherited` (the supervisor's environment).
pub fn worker_env(
    user: &UserInfo,
    inherited: impl IntoIterator<Item = (OsString, OsString)>,
) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = vec![
        ("PATH".into(), WORKER_PATH.into()),
        ("HOME".into(), user.home.clone().into()),
        ("USER".into(), user.name.clone().into()),
        ("LOGNAME".into(), user.name.clone().into()),
    ];
    let locale = |k: &OsString| k.to_str().is_some_and(|k| k == "LANG" || k.starts_with("LC_"));
    env.extend(inherited.into_iter().filter(|(k, _)| locale(k)));
    env
}

/// The front's whole environment: `PATH`, `HEDDLE_LOG`, `RUST_LOG`, `RUST_BACKTRACE` and the front's
/// own settings (`HEDDLE_RETAIN_*`, `HEDDLE_SPARES`, `HEDDLE_SPARE_CPU_WAIT_MS`, `HEDDLE_MAX_CONNECTIONS*`,
/// `HEDDLE_JOBS_IN_MEMORY`) from
/// `inherited` when set.
pub fn front_env(inherited: impl IntoIterator<Item = (OsString, OsString)>) -> Vec<(OsString, OsString)> {
    let keep = |k: &OsString| {
        let k = k.to_str().unwrap_or("");
        matches!(k, "PATH" | "HEDDLE_LOG" | "RUST_LOG" | "RUST_BACKTRACE")
            || k.starts_with("HEDDLE_RETAIN_")
            || k.starts_with("HEDDLE_MAX_CONNECTIONS")
            || k == "HEDDLE_SPARES"
            || k == "HEDDLE_SPARE_CPU_WAIT_MS"
            || k == "HEDDLE_JOBS_IN_MEMORY"
    };
    inherited.into_iter().filter(|(k, _)| keep(k)).collect()
}

/// What the front is started with.
#[derive(Debug)]
pub struct FrontSpec<'a> {
    /// `heddle-front`, opened once at start.
    pub exe: BorrowedFd<'a>,
    pub user: &'a UserInfo,
    /// The front's end of the SOCK_SEQPACKET control pair (its fd 3).
    pub control: BorrowedFd<'a>,
    /// The bound, listening client socket (its fd 4).
    pub listener: BorrowedFd<'a>,
    pub state_dir: &'a Path,
    pub socket: &'a Path,
    /// heddle's cgroup root: the front refuses clients whose process runs in a job cgroup below it.
    pub cgroup_root: &'a Path,
    /// The HTTP door's listening TCP socket (its fd 5) and its tokens' memfd (fd 6), if any.
    pub http: Option<BorrowedFd<'a>>,
    pub http_tokens: Option<BorrowedFd<'a>>,
}

/// Start the front: `heddle-front --control-fd 3 --listen-fd 4 --state-dir DIR --socket PATH
/// --cgroup-root ROOT`.
pub fn spawn_front(spec: &FrontSpec<'_>) -> Result<Spawned, SpawnError> {
    let mut args: Vec<OsString> = vec![
        "--control-fd".into(),
        "3".into(),
        "--listen-fd".into(),
        "4".into(),
        "--state-dir".into(),
        spec.state_dir.into(),
        "--socket".into(),
        spec.socket.into(),
        "--cgroup-root".into(),
        spec.cgroup_root.into(),
    ];
    let mut fds = vec![(spec.control, 3), (spec.listener, 4)];
    if let Some(h) = spec.http {
        args.extend(["--http-fd".into(), "5".into()]);
        fds.push((h, 5));
    }
    if let Some(t) = spec.http_tokens {
        args.extend(["--http-tokens-fd".into(), "6".into()]);
        fds.push((t, 6));
    }
    let setup = ChildSetup {
        exe: spec.exe,
        arg0: "heddle-front",
        args,
        env: front_env(std::env::vars_os()),
        uid: spec.user.uid,
        real_uid: None,
        gid: spec.user.gid,
        cgroup: None,
        fds,
        v1_tasks: Vec::new(),
        project_mount: None,
        private_devpts: false,
    };
    start(&setup, "heddle-front")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user() -> UserInfo {
        UserInfo { uid: 1234, gid: 99, name: "agent".into(), home: "/home/agent".into() }
    }

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs.iter().map(|(k, v)| (k.into(), v.into())).collect()
    }

    #[test]
    fn worker_env_is_exactly_the_contract() {
        let inherited =
            vars(&[("PATH", "/evil"), ("LANG", "C.UTF-8"), ("LC_ALL", "C"), ("SECRET", "x"), ("LCX", "no")]);
        let env = worker_env(&user(), inherited);
        let want = vars(&[
            ("PATH", WORKER_PATH),
            ("HOME", "/home/agent"),
            ("USER", "agent"),
            ("LOGNAME", "agent"),
            ("LANG", "C.UTF-8"),
            ("LC_ALL", "C"),
        ]);
        assert_eq!(env, want);
    }

    #[test]
    fn front_env_keeps_path_rust_diagnostics_and_the_fronts_settings_only() {
        let inherited = vars(&[
            ("PATH", "/bin"),
            ("RUST_LOG", "debug"),
            ("HOME", "/root"),
            ("AWS_SECRET", "k"),
            ("HEDDLE_SPARE_CPU_WAIT_MS", "0"),
            ("HEDDLE_SPARES_X", "1"),
        ]);
        let want = vars(&[("PATH", "/bin"), ("RUST_LOG", "debug"), ("HEDDLE_SPARE_CPU_WAIT_MS", "0")]);
        assert_eq!(front_env(inherited), want);
    }
}
