//! Startup, in the order docs/architecture.md ("Start-up") gives: refuse unless root, route SIGINT/SIGTERM,
//! resolve the users, open the two binaries, find the cgroup mode and create the root, hold the root and
//! the state directory alone (`exclusive.rs`: a second server refuses here), prepare the
//! state directory and the socket's directory, bind the client socket, and spawn the front.
//!
//! Invariants: every check that changes nothing comes before the first change; a failed start undoes
//! what it created (the cgroup root if it made it, the socket file). Paths given relative are made
//! absolute against the supervisor's working directory, since the front runs in `/`.
//!
//! ```no_run
//! use clap::Parser;
//! let args = supervisor::cli::Args::parse();
//! supervisor::startup::start(&args)?.run()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::cgroup::{self, CgroupError, CgroupMode, RealCgroups};
use crate::cli::Args;
use crate::event_loop::{file_identity, EventLoop, LoopError, Parts, SocketFile};
use crate::session_table::Sessions;
use crate::signals::SignalPipe;
use crate::spawn::{self, FrontSpec, RealProcesses, SpawnError};
use crate::users::{UserError, UserInfo};
use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
use std::fs::{DirBuilder, File, OpenOptions, Permissions};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

/// Why the supervisor could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    #[error("heddle-supervisor must run as root (it owns the cgroup tree and drops privileges for its children); run it with sudo or as a root service")]
    NotRoot,
    #[error("cannot mark inherited fds close-on-exec")]
    Fds(#[source] io::Error),
    #[error("cannot route SIGINT/SIGTERM")]
    Signals(#[source] io::Error),
    #[error("cannot resolve the {0} user")]
    User(&'static str, #[source] UserError),
    #[error("cannot find this executable's directory; pass --bin-dir")]
    BinDir(#[source] io::Error),
    #[error("cannot open {0}")]
    Binary(PathBuf, #[source] io::Error),
    #[error("cannot set up the cgroup root")]
    Cgroup(#[from] CgroupError),
    #[error("cannot make {0} absolute")]
    Path(PathBuf, #[source] io::Error),
    #[error("cannot prepare the state directory {0}")]
    StateDir(PathBuf, #[source] io::Error),
    #[error("cannot prepare the socket {0}")]
    Socket(PathBuf, #[source] io::Error),
    #[error("another heddle is already listening on {0}; stop it first or choose another --socket")]
    SocketInUse(PathBuf),
    #[error("cannot serve the HTTP door on {0}")]
    Http(String, #[source] io::Error),
    #[error("cannot create the control socket pair")]
    ControlPair(#[source] nix::Error),
    #[error("cannot start the front")]
    Front(#[source] SpawnError),
    #[error("cannot set up the main loop")]
    Loop(#[from] LoopError),
    #[error(transparent)]
    StateFormat(#[from] crate::state_format::FormatError),
    #[error(transparent)]
    Claim(#[from] crate::exclusive::ClaimError),
    #[error(transparent)]
    SessionUids(#[from] crate::session_uids::UidError),
    #[error("{0}")]
    AllowOwned(String),
}

/// The resolved, checked configuration (nothing changed yet).
struct Plan {
    mode: CgroupMode,
    root: PathBuf,
    front_user: UserInfo,
    worker_user: UserInfo,
    cgroup_owner: UserInfo,
    /// Root-opened sessions' uid range (`None`: they all run as `worker_user`).
    session_uids: Option<std::ops::RangeInclusive<u32>>,
    front_exe: OwnedFd,
    worker_exe: OwnedFd,
    state_dir: PathBuf,
    socket: PathBuf,
    defaults: shm_proto::control::SessionLimits,
    allow_writable: Vec<PathBuf>,
    allow_owned: Vec<PathBuf>,
    socket_gid: u32,
    http: Option<(String, Option<PathBuf>)>,
    /// `--delegated`: the delegated cgroup whose processes move into its `supervisor` leaf.
    delegated: Option<PathBuf>,
}

/// Do everything up to a running front; the returned loop serves until SIGINT/SIGTERM.
pub fn start(args: &Args) -> Result<EventLoop<RealCgroups, RealProcesses>, StartError> {
    if !nix::unistd::geteuid().is_root() {
        return Err(StartError::NotRoot);
    }
    crate::sys::cloexec_inherited_fds().map_err(StartError::Fds)?;
    let signals = SignalPipe::register().map_err(StartError::Signals)?;
    let plan = plan(args)?;
    if let Some(unit) = &plan.delegated {
        take_leaf(unit)?;
    }
    let root_created = create_root(&plan.root)?;
    let started = claim(&plan).and_then(|claims| start_created(plan, signals, root_created, claims));
    if let Err((root, _)) = &started {
        if root_created {
            let _ = std::fs::remove_dir(root);
        }
    }
    started.map_err(|(_, e)| e)
}

/// Hold the cgroup root and the state directory alone (`exclusive.rs`), before anything under either
/// changes (a second server refuses here); on error returns the root for the caller to remove if this
/// start created it.
fn claim(plan: &Plan) -> Result<crate::exclusive::Claims, (PathBuf, StartError)> {
    let fail = |e: crate::exclusive::ClaimError| (plan.root.clone(), StartError::from(e));
    let holder = crate::exclusive::holder_text(&plan.socket, &plan.root, &plan.state_dir);
    let root = crate::exclusive::RootClaim::take(&plan.root, &holder).map_err(fail)?;
    let state = crate::exclusive::claim_state_dir(&plan.state_dir, &holder).map_err(fail)?;
    Ok(crate::exclusive::Claims { root, state })
}

/// Pure v2: turn on `memory`/`pids` under the root for session limits; false (logged) when the root
/// does not offer them (its parent did not delegate them).
fn enable_v2_limits(root: &Path) -> bool {
    match crate::limits::enable_v2(root) {
        Ok(on) if on.is_empty() => {
            tracing::info!("session limits are off: {} offers neither memory nor pids", root.display());
            false
        }
        Ok(on) => {
            tracing::info!("session limits use cgroup v2 controllers {on:?} under {}", root.display());
            true
        }
        Err(e) => {
            tracing::info!("session limits are off: {}", shm_proto::error_chain(&e));
            false
        }
    }
}

/// Resolve and check everything; no side effect.
fn plan(args: &Args) -> Result<Plan, StartError> {
    let front_user = match &args.front_user {
        Some(u) => UserInfo::resolve(u),
        None => UserInfo::default_front(),
    }
    .map_err(|e| StartError::User("front", e))?;
    let worker_user = UserInfo::resolve(args.worker_user.as_deref().unwrap_or("nobody"))
        .map_err(|e| StartError::User("worker", e))?;
    let session_uids = match (&args.worker_user, &args.session_uids) {
        (Some(_), _) => None,
        (None, Some(r)) => Some(crate::session_uids::parse_range(r)?),
        // Off unless asked: a uid with no passwd entry breaks tools that look their user up
        // (ssh-keygen, whoami); see docs/threat-model.md, "Session uids".
        (None, None) => None,
    };
    let cgroup_owner = UserInfo::cgroup_owner().map_err(|e| StartError::User("cgroup owner", e))?;
    if [front_user.uid, worker_user.uid].contains(&cgroup_owner.uid)
        || session_uids.as_ref().is_some_and(|r| r.contains(&cgroup_owner.uid))
    {
        let taken =
            UserError::Taken(cgroup_owner.uid.to_string(), "--front-user, --worker-user or --session-uids".to_owned());
        return Err(StartError::User("cgroup owner", taken));
    }
    let bin_dir = match &args.bin_dir {
        Some(d) => d.clone(),
        None => exe_dir().map_err(StartError::BinDir)?,
    };
    let front_exe = open_binary(&bin_dir.join("heddle-front"))?;
    let worker_exe = open_binary(&bin_dir.join("heddle-worker"))?;
    let own = cgroup::own_v2_path()?;
    let (mode, default_root) = cgroup::detect_mode(Path::exists, &own)?;
    let delegated = match args.delegated {
        true => {
            let mount = match mode {
                CgroupMode::V2 => "/sys/fs/cgroup",
                CgroupMode::Hybrid => "/sys/fs/cgroup/unified",
            };
            Some(crate::delegated::unit_dir(Path::new(mount), &own, crate::delegated::in_private_cgroup_ns())?)
        }
        false => None,
    };
    let default_root = match &delegated {
        Some(unit) => unit.join(crate::delegated::ROOT_NAME),
        None => default_root,
    };
    let root = absolute(args.cgroup_root.as_deref().unwrap_or(&default_root))?;
    let parent = root.parent().ok_or_else(|| CgroupError::NotCgroup2(root.clone()))?;
    cgroup::check_cgroup2(parent)?;
    let state_dir = absolute(&args.state_dir)?;
    let socket = absolute(&args.socket)?;
    let defaults = shm_proto::control::SessionLimits {
        memory_max: args.memory_max,
        pids_max: args.pids_max,
        ..Default::default()
    };
    let socket_gid = match &args.socket_group {
        Some(g) => crate::users::resolve_group(g).map_err(|e| StartError::User("socket group", e))?,
        None => 0,
    };
    let allow_writable = args.allow_writable.clone();
    let allow_owned = crate::owned_project::allowed_dirs(&args.allow_owned_projects).map_err(StartError::AllowOwned)?;
    let http = match (&args.http, &args.http_token_dir) {
        (Some(a), dir) => Some((a.clone(), dir.as_deref().map(absolute).transpose()?)),
        (None, _) => None,
    };
    Ok(Plan {
        http,
        mode,
        root,
        front_user,
        worker_user,
        cgroup_owner,
        session_uids,
        front_exe,
        worker_exe,
        state_dir,
        socket,
        defaults,
        socket_gid,
        allow_writable,
        allow_owned,
        delegated,
    })
}

/// `--delegated`: move this cgroup's processes into its leaf and hand memory/pids down (logged).
fn take_leaf(unit: &Path) -> Result<(), StartError> {
    let (leaf, on) = crate::delegated::take_leaf(unit)?;
    tracing::info!(
        "delegated cgroup {}: its processes are in {}; controllers enabled for its children: {}",
        unit.display(),
        leaf.display(),
        if on.is_empty() { "none offered".to_owned() } else { on.join(" ") }
    );
    Ok(())
}

/// The part of startup after the cgroup root exists; on error returns the root for the caller to undo.
fn start_created(
    plan: Plan,
    signals: SignalPipe,
    root_created: bool,
    claims: crate::exclusive::Claims,
) -> Result<EventLoop<RealCgroups, RealProcesses>, (PathBuf, StartError)> {
    let root = plan.root.clone();
    let fail = |e: StartError| (root.clone(), e);
    prepare_state_dir(&plan.state_dir, &plan.front_user).map_err(fail)?;
    // Before the front opens anything in it: migrate an older format, refuse a newer one.
    match crate::state_format::prepare(&plan.state_dir) {
        Ok(Some(from)) => tracing::info!(
            "migrated the state directory {} from format {from} to {}",
            plan.state_dir.display(),
            crate::state_format::CURRENT
        ),
        Ok(None) => {}
        Err(e) => return Err(fail(e.into())),
    }
    let http = match &plan.http {
        Some((addr, dir)) => {
            let door =
                crate::http_door::bind(addr, dir.as_deref()).map_err(|e| fail(StartError::Http(addr.clone(), e)))?;
            record_http_address(&plan.state_dir, door.addr);
            tracing::info!(
                "serving the HTTP door on {} ({})",
                door.addr,
                if door.token_dir.is_some() {
                    "bearer tokens"
                } else {
                    "requests act as the uid owning the client socket"
                }
            );
            Some(door)
        }
        None => None,
    };
    let (listener, socket) = bind_socket(&plan.socket, plan.socket_gid).map_err(fail)?;
    let launcher = FrontLauncher {
        exe: plan.front_exe,
        user: plan.front_user.clone(),
        state_dir: plan.state_dir.clone(),
        socket: plan.socket.clone(),
        cgroup_root: root.clone(),
        http,
    };
    let front = launcher.spawn(&listener);
    let (front, control) = match front {
        Ok(f) => f,
        Err(e) => {
            socket.remove();
            return Err(fail(e));
        }
    };
    tracing::info!(
        "serving {} (cgroup root {}, mode {}, front pid {})",
        plan.socket.display(),
        plan.root.display(),
        plan.mode.as_str(),
        front.pid
    );
    let mut v1 = match plan.mode {
        CgroupMode::Hybrid => crate::limits::V1Root::for_root(&plan.root),
        CgroupMode::V2 => None,
    };
    if let Some(Err(e)) = v1.as_mut().map(crate::limits::V1Root::ensure) {
        tracing::info!("session limits are off: {}", shm_proto::error_chain(&e));
        v1 = None;
    }
    let v2_limits = plan.mode == CgroupMode::V2 && enable_v2_limits(&plan.root);
    let adopted = crate::recovery::recover(&plan.root, v1.as_ref());
    // After recovery ended the leftover sessions, nothing writes to their temp dirs any more.
    let tmp_root = crate::spawn::tmp_root(&plan.root);
    match crate::spawn::remove_stale_tmp(&tmp_root) {
        Ok(true) => tracing::info!("removed the session temp dirs of an earlier run under {}", tmp_root.display()),
        Ok(false) => {}
        Err(e) => tracing::warn!("could not remove the stale session temp dirs {}: {e}", tmp_root.display()),
    }
    let self_exe = std::env::current_exe().and_then(std::fs::File::open).map(OwnedFd::from);
    if let Err(e) = &self_exe {
        tracing::warn!("cannot open this executable; kept jobs' output will end with their session: {e}");
    }
    let procs = RealProcesses {
        worker_exe: plan.worker_exe,
        tmp_root,
        self_exe: self_exe.ok(),
        kept_logs: plan.state_dir.join("kept"),
        log_owner: (plan.front_user.uid, plan.front_user.gid),
    };
    let homes = crate::spawn::homes_root(&procs.tmp_root);
    let pool = plan.session_uids.map(|range| {
        let kept_root = crate::kept::kept_root(&plan.root);
        let kept = adopted.iter().map(|n| (n.clone(), crate::session_uids::kept_uid(&kept_root.join(n)))).collect();
        let mut pool = crate::session_uids::UidPool::new(range, Some(plan.state_dir.join(crate::session_uids::RECORD)));
        pool.restore(&kept);
        crate::session_uids::remove_free_homes(&homes, &pool);
        pool
    });
    let mut sessions = Sessions::new(RealCgroups, procs, plan.root, plan.mode, plan.worker_user)
        .with_cgroup_owner(plan.cgroup_owner)
        .with_limits(v1, plan.defaults)
        .with_adopted(adopted)
        .with_allow_writable(plan.allow_writable)
        .with_allow_owned_projects(plan.allow_owned)
        .with_v2_limits(v2_limits)
        .with_claims(claims);
    if let Some(pool) = pool {
        sessions = sessions.with_session_uids(pool);
    }
    let parts = Parts { sessions, front, control, listener, signals, socket, root_created, launcher: Some(launcher) };
    // A front is running by now; if the loop cannot start, the front gets EOF on its control
    // socket when this process exits.
    EventLoop::new(parts).map_err(|e| fail(e.into()))
}

/// What starting a front takes; kept by the main loop to start a new front when one dies.
#[derive(Debug)]
pub struct FrontLauncher {
    pub exe: OwnedFd,
    pub user: UserInfo,
    pub state_dir: PathBuf,
    pub socket: PathBuf,
    /// heddle's cgroup root, which the front is told so it can refuse its own jobs as clients.
    pub cgroup_root: PathBuf,
    /// The HTTP door's socket (kept here: every front started takes it over) and token directory.
    pub http: Option<crate::http_door::HttpDoor>,
}

impl FrontLauncher {
    /// Start a front on `listener` with a new control socket pair; returns it and our end of the pair.
    pub fn spawn(&self, listener: &UnixListener) -> Result<(spawn::Spawned, OwnedFd), StartError> {
        let (ours, theirs) = socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC)
            .map_err(StartError::ControlPair)?;
        // Tokens are read afresh at each start: a restarted front sees the files as they are now.
        let tokens = match self.http.as_ref().and_then(|h| h.token_dir.as_deref().map(|d| (h.addr, d))) {
            Some((addr, dir)) => {
                let http_err = |e| StartError::Http(addr.to_string(), e);
                let (text, skipped) = crate::http_door::read_tokens(dir).map_err(http_err)?;
                for why in skipped {
                    tracing::warn!("{why}");
                }
                Some(crate::http_door::tokens_memfd(&text).map_err(http_err)?)
            }
            None => None,
        };
        let spec = FrontSpec {
            exe: self.exe.as_fd(),
            user: &self.user,
            control: theirs.as_fd(),
            listener: listener.as_fd(),
            state_dir: &self.state_dir,
            socket: &self.socket,
            cgroup_root: &self.cgroup_root,
            http: self.http.as_ref().map(|h| h.listener.as_fd()),
            http_tokens: tokens.as_ref().map(AsFd::as_fd),
        };
        let front = spawn::spawn_front(&spec).map_err(StartError::Front)?;
        Ok((front, ours))
    }
}

/// Write the door's bound address to `<state_dir>/http-address` (root's, 0644) for clients and tests
/// (a port 0 bind picks one). A failure is logged: the door serves anyway.
fn record_http_address(state_dir: &Path, addr: std::net::SocketAddr) {
    let path = state_dir.join("http-address");
    let wrote = (|| {
        let tmp = state_dir.join(".http-address.tmp");
        let _ = std::fs::remove_file(&tmp);
        let mut f =
            OpenOptions::new().write(true).create_new(true).mode(0o644).custom_flags(libc::O_NOFOLLOW).open(&tmp)?;
        std::io::Write::write_all(&mut f, format!("{addr}\n").as_bytes())?;
        std::fs::rename(&tmp, &path)
    })();
    if let Err(e) = wrote {
        tracing::warn!("cannot record the HTTP door's address in {}: {e}", path.display());
    }
}

fn exe_dir() -> io::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    exe.parent().map(Path::to_owned).ok_or_else(|| io::Error::other("the executable has no parent directory"))
}

fn open_binary(path: &Path) -> Result<OwnedFd, StartError> {
    let file = File::open(path).map_err(|e| StartError::Binary(path.to_owned(), e))?;
    Ok(file.into())
}

fn absolute(path: &Path) -> Result<PathBuf, StartError> {
    std::path::absolute(path).map_err(|e| StartError::Path(path.to_owned(), e))
}

/// mkdir the cgroup root; true if this call created it.
fn create_root(root: &Path) -> Result<bool, StartError> {
    match std::fs::create_dir(root) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            cgroup::check_cgroup2(root)?;
            Ok(false)
        }
        Err(source) => Err(CgroupError::Io { op: "create the cgroup root", path: root.to_owned(), source }.into()),
    }
}

/// Create the state directory if missing (parents 0755, itself 0700), then make it the front user's
/// and 0700. A symlink in its place is refused.
fn prepare_state_dir(dir: &Path, owner: &UserInfo) -> Result<(), StartError> {
    let err = |e| StartError::StateDir(dir.to_owned(), e);
    if let Some(parent) = dir.parent() {
        DirBuilder::new().recursive(true).mode(0o755).create(parent).map_err(err)?;
    }
    match DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(err(e)),
    }
    let fd = OpenOptions::new().read(true).custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW).open(dir).map_err(err)?;
    std::os::unix::fs::fchown(&fd, Some(owner.uid), Some(owner.gid)).map_err(err)?;
    fd.set_permissions(Permissions::from_mode(0o700)).map_err(err)
}

/// Create the socket's directory if missing (root:`gid` 0750; its parents 0755), remove a stale socket
/// (refusing a live one or a non-socket), bind and listen, and give the socket to root:`gid` 0660: only
/// root and members of that group can connect (the front still checks each peer's uid).
fn bind_socket(path: &Path, gid: u32) -> Result<(UnixListener, SocketFile), StartError> {
    let err = |e| StartError::Socket(path.to_owned(), e);
    if let Some(parent) = path.parent() {
        private_dir(parent, gid).map_err(err)?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            if UnixStream::connect(path).is_ok() {
                return Err(StartError::SocketInUse(path.to_owned()));
            }
            std::fs::remove_file(path).map_err(err)?;
        }
        Ok(_) => return Err(err(io::Error::other("it exists and is not a socket"))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(err(e)),
    }
    let listener = UnixListener::bind(path).map_err(err)?;
    let opened = std::os::unix::fs::lchown(path, Some(0), Some(gid))
        .and_then(|()| std::fs::set_permissions(path, Permissions::from_mode(0o660)))
        .and_then(|()| std::fs::symlink_metadata(path));
    let meta = match opened {
        Ok(m) => m,
        Err(e) => {
            let _ = std::fs::remove_file(path);
            return Err(err(e));
        }
    };
    // Identified after the chmod, which changes the ctime.
    let file = SocketFile { path: path.to_owned(), identity: file_identity(&meta) };
    Ok((listener, file))
}

/// Create `dir` root:`gid` 0750 (its missing parents 0755). A directory that already exists is left
/// as it is: it is the operator's (e.g. `/run`), or ours from an earlier start.
fn private_dir(dir: &Path, gid: u32) -> io::Result<()> {
    if let Some(parent) = dir.parent() {
        DirBuilder::new().recursive(true).mode(0o755).create(parent)?;
    }
    match DirBuilder::new().mode(0o750).create(dir) {
        Ok(()) => {
            let fd = OpenOptions::new().read(true).custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW).open(dir)?;
            std::os::unix::fs::fchown(&fd, Some(0), Some(gid))?;
            fd.set_permissions(Permissions::from_mode(0o750))
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_socket_is_replaced_and_live_one_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("run/heddle.sock");
        let (live, file) = bind_socket(&path, 0).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o660);
        let dir_mode = std::fs::metadata(path.parent().unwrap()).unwrap().permissions().mode() & 0o777;
        assert_eq!(dir_mode, 0o750);
        assert!(matches!(bind_socket(&path, 0), Err(StartError::SocketInUse(_))));
        drop(live);
        let (_again, again) = bind_socket(&path, 0).unwrap();
        assert_ne!(file.identity, again.identity);
        file.remove();
        assert!(path.exists(), "a socket that is no longer ours is left alone");
        again.remove();
        assert!(!path.exists());
    }

    #[test]
    fn a_file_in_the_sockets_place_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("heddle.sock");
        std::fs::write(&path, b"data").unwrap();
        assert!(matches!(bind_socket(&path, 0), Err(StartError::Socket(..))));
        assert_eq!(std::fs::read(&path).unwrap(), b"data");
    }

    #[test]
    fn state_dir_is_created_private_and_a_symlink_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let me = UserInfo::from_uid(nix::unistd::geteuid().as_raw()).unwrap();
        let me = UserInfo { gid: nix::unistd::getegid().as_raw(), ..me };
        let dir = tmp.path().join("a/state");
        prepare_state_dir(&dir, &me).unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        assert!(prepare_state_dir(&link, &me).is_err());
    }
}
