//! The supervisor's own raw system calls, behind a safe API: `close_range(CLOEXEC)` for inherited fds
//! and the privilege-dropping child setup that runs between `fork` and `exec`. The pidfd calls it
//! shares with the worker and the launcher are [`shm_proto::sys`]'s, re-exported here.
//!
//! Invariants: the code that runs in a forked child ([`spawn_child`]) only makes async-signal-safe
//! system calls on integers prepared before the fork: it never allocates, locks or formats. Every fd it
//! touches is kept open by the parent until `spawn` returns.
//!
//! ```no_run
//! use supervisor::sys;
//! let child = std::process::Command::new("/bin/true").spawn().unwrap();
//! let pidfd = sys::pidfd_open(child.id()).unwrap();
//! let exit = sys::wait_pidfd(std::os::fd::AsFd::as_fd(&pidfd), false).unwrap();
//! assert_eq!(exit, Some(sys::Exit::Code(0)));
//! ```
#![allow(unsafe_code)]

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

pub use shm_proto::sys::{pidfd_open, pidfd_send_signal, wait_pidfd, Exit};
use shm_proto::sys::{BlockAll, CloneArgs, CLONE_INTO_CGROUP};

/// The lowest fd number used for the copies of the fds a child inherits, so that no copy can be one
/// of the target numbers (3…7) when it is `dup2`ed into place.
const HIGH_FD: RawFd = 100;

/// Mark every fd from 3 up close-on-exec, so that nothing the supervisor inherited from whoever
/// started it (a shell's saved fds, a service manager's sockets) reaches an unprivileged child.
pub fn cloexec_inherited_fds() -> io::Result<()> {
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only sets a flag on the fds in the range; it closes
    // nothing and takes no pointers.
    let ret = unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, libc::CLOSE_RANGE_CLOEXEC) };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// What a child is and becomes between `fork` and `exec`.
#[derive(Debug)]
pub struct ChildSetup<'a> {
    /// The binary, opened by the supervisor; the child execs it as `/proc/self/fd/N`, so the target
    /// uid never needs to traverse the path to it.
    pub exe: BorrowedFd<'a>,
    pub arg0: &'a str,
    pub args: Vec<OsString>,
    /// The whole environment (nothing else of ours is inherited).
    pub env: Vec<(OsString, OsString)>,
    /// The uid and gid to drop to; the supplementary groups become exactly `[gid]`.
    pub uid: u32,
    /// A real uid other than `uid` (the worker's: the cgroup owner), kept across exec; the effective and
    /// saved uid are `uid`.
    pub real_uid: Option<u32>,
    pub gid: u32,
    /// The target cgroup v2 directory, opened (`O_DIRECTORY`): the child is created in it
    /// (`CLONE_INTO_CGROUP`).
    pub cgroup: Option<BorrowedFd<'a>>,
    /// `(source, target)`: the child gets `source` as fd number `target` (3…99), without close-on-exec.
    pub fds: Vec<(BorrowedFd<'a>, RawFd)>,
    /// `tasks` files of v1 cgroups the child joins too (hybrid hosts' memory/pids limits), open for
    /// writing: the child writes `0` to each while still root and single-threaded.
    pub v1_tasks: Vec<BorrowedFd<'a>>,
    /// A detached idmapped tree the child moves onto its target in a mount namespace of its own, while
    /// still root (`crate::owned_project`).
    pub project_mount: Option<&'a crate::owned_project::ProjectMount>,
    /// Give the child a devpts instance of its own (a worker: its jobs' pseudo-terminals are then
    /// invisible to every other session's jobs). Best effort: a host that refuses it keeps the shared
    /// one for this child.
    pub private_devpts: bool,
}

/// Set the extended attribute `name` of `path` (tests label directories with it, as the worker does).
#[cfg(test)]
pub fn setxattr(path: &std::ffi::CStr, name: &std::ffi::CStr, value: &[u8]) -> io::Result<()> {
    // SAFETY: NUL-terminated path and name, and a value of the length given.
    let r = unsafe { libc::setxattr(path.as_ptr(), name.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The value of the extended attribute `name` of `path` (`getxattr`; at most 64 bytes), `None` when it
/// has none.
pub fn getxattr(path: &std::path::Path, name: &std::ffi::CStr) -> io::Result<Option<Vec<u8>>> {
    use std::os::unix::ffi::OsStrExt;
    let path =
        std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let mut buf = [0u8; 64];
    // SAFETY: NUL-terminated path and name, and a buffer of the length given.
    let n = unsafe { libc::getxattr(path.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return if e.raw_os_error() == Some(libc::ENODATA) { Ok(None) } else { Err(e) };
    }
    Ok(Some(buf[..n as usize].to_vec()))
}

/// Set the extended attribute `name` of the open file `fd` (`fsetxattr`).
pub fn fsetxattr(fd: BorrowedFd<'_>, name: &std::ffi::CStr, value: &[u8]) -> io::Result<()> {
    // SAFETY: `fd` is open for this call, `name` is NUL-terminated, and the value has the length given.
    let r = unsafe { libc::fsetxattr(fd.as_raw_fd(), name.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The value of the extended attribute `name` of the open file `fd` (`fgetxattr`; at most 1 KiB), `None`
/// when it has none.
pub fn fgetxattr(fd: BorrowedFd<'_>, name: &std::ffi::CStr) -> io::Result<Option<Vec<u8>>> {
    let mut buf = [0u8; 1024];
    // SAFETY: `fd` is open for this call, `name` is NUL-terminated, and the buffer has the length given.
    let n = unsafe { libc::fgetxattr(fd.as_raw_fd(), name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return if e.raw_os_error() == Some(libc::ENODATA) { Ok(None) } else { Err(e) };
    }
    Ok(Some(buf[..n as usize].to_vec()))
}

/// A duplicate of fd `target` of the process behind `pidfd` (`pidfd_getfd(2)`; the caller needs
/// ptrace access to it, which root has). The new fd is close-on-exec.
pub fn pidfd_getfd(pidfd: BorrowedFd<'_>, target: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_getfd takes a pidfd, an fd number and a flags word, and returns a new fd or -1; no
    // memory is passed.
    let ret = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), target, 0u32) };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = RawFd::try_from(ret).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: the kernel just installed `fd` in our table (close-on-exec); nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Remove the first `len` bytes of the file behind `fd` (`FALLOC_FL_COLLAPSE_RANGE`; `len` must be a
/// multiple of the filesystem's block size). Filesystems without it answer `EOPNOTSUPP`.
pub fn collapse_head(fd: BorrowedFd<'_>, len: u64) -> io::Result<()> {
    let len = libc::off_t::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: fallocate on an fd we hold open for writing, with integer arguments only.
    let ret = unsafe { libc::fallocate(fd.as_raw_fd(), libc::FALLOC_FL_COLLAPSE_RANGE, 0, len) };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Fork: the parent gets `Ok(false)` (and should exit at once), the child `Ok(true)`, in a session of its
/// own. Only for a process that is still single-threaded (the drainer's `main`).
pub fn fork_detached() -> io::Result<bool> {
    // SAFETY: called first thing in a single-threaded process, so the child inherits no lock another
    // thread holds; it goes on running ordinary Rust code, as any fork child of a single thread may.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => {
            let _ = nix::unistd::setsid();
            Ok(true)
        }
        _ => Ok(false),
    }
}

// <linux/mount.h>
const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// A detached copy of the mount at `path` (`open_tree(OPEN_TREE_CLONE)`, not recursive), close-on-exec.
pub fn open_tree_clone(path: &std::ffi::CStr) -> io::Result<OwnedFd> {
    // SAFETY: open_tree takes a dirfd, a NUL-terminated path that outlives the call and a flags word, and
    // returns a new fd or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            path.as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = RawFd::try_from(fd).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: the kernel just installed `fd` (close-on-exec); nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Give the detached `tree` the idmapping of the user namespace `userns`, `nosuid` and `nodev`
/// (`mount_setattr`).
pub fn idmap_tree(tree: BorrowedFd<'_>, userns: BorrowedFd<'_>) -> io::Result<()> {
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        attr_clr: 0,
        propagation: 0,
        userns_fd: u64::try_from(userns.as_raw_fd()).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?,
    };
    // SAFETY: mount_setattr on an fd open for this call, a static empty path, and a pointer to a live
    // struct of the size given.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A user namespace with exactly `uid_map` and `gid_map` (lines of `/proc/PID/uid_map`), held by an fd:
/// a forked child unshares it and waits while we map it from here; then it exits and is reaped.
pub fn mapping_namespace(uid_map: &str, gid_map: &str) -> io::Result<OwnedFd> {
    let (ready_r, ready_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let (go_r, go_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    // SAFETY: the child calls only async-signal-safe functions (unshare, write, read, _exit) on fds and
    // integers made before the fork and never returns into Rust code, so a lock held by another of our
    // threads cannot bite it.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: as above.
        unsafe {
            // Its copy of the go pipe's write end must go, or its read would never see the end.
            libc::close(go_w.as_raw_fd());
            let b = [u8::from(libc::unshare(libc::CLONE_NEWUSER) == 0)];
            libc::write(ready_w.as_raw_fd(), b.as_ptr().cast(), 1);
            let mut x = [0u8; 1];
            libc::read(go_r.as_raw_fd(), x.as_mut_ptr().cast(), 1);
            libc::_exit(0);
        }
    }
    drop((ready_w, go_r));
    let made = (|| {
        let mut b = [0u8; 1];
        if nix::unistd::read(&ready_r, &mut b)? != 1 || b[0] != 1 {
            return Err(io::Error::other("the helper child could not make a user namespace"));
        }
        std::fs::write(format!("/proc/{pid}/uid_map"), uid_map)?;
        std::fs::write(format!("/proc/{pid}/gid_map"), gid_map)?;
        Ok(OwnedFd::from(std::fs::File::open(format!("/proc/{pid}/ns/user"))?))
    })();
    drop(go_w);
    let mut status = 0;
    // SAFETY: waiting for our own child by its pid; `status` is a live int.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    made
}

/// Spawn a child as described by `setup`: cwd `/`, stdin `/dev/null`, stdout and stderr inherited.
/// `clone3(CLONE_PIDFD | CLONE_INTO_CGROUP)` places it in its cgroup v2 at birth; between clone and exec it
/// starts a new session (so terminal signals to our process group miss it), joins its v1 cgroups, sets
/// groups, gid, uid and no_new_privs, and places its fds, in that order. Every other fd of ours is
/// close-on-exec and does not reach it. Returns its pid and pidfd once it has `exec`ed (an exec that fails
/// is an error, the child reaped).
///
/// Why `clone3` and `tasks`, not a write to `cgroup.procs`: moving a whole process between cgroups takes
/// the kernel's global threadgroup lock for writing, and the first such write after a quiet spell waits
/// for an RCU grace period: 5–15 ms on the development VMs, the largest part of a `session.open`
/// (docs/performance.md). `CLONE_INTO_CGROUP` takes it only for reading, and a single-threaded child that
/// writes `0` (itself) to a v1 `tasks` file moves one thread, which the kernel does without that lock.
pub fn spawn_child(setup: &ChildSetup<'_>) -> io::Result<(u32, OwnedFd)> {
    use std::os::unix::ffi::OsStrExt;
    reserve_low_fds();
    let exe = high_copy(setup.exe)?;
    // Copies at high numbers, so that dup2 never meets a source equal to its target (which would
    // leave close-on-exec set) nor overwrites the exe or another source. They stay open until the
    // child has exec'ed.
    let mut copies = Vec::with_capacity(setup.fds.len());
    for (src, target) in &setup.fds {
        if !(3..HIGH_FD).contains(target) {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        }
        copies.push((high_copy(*src)?, *target));
    }
    let null = high_copy(std::fs::File::open("/dev/null")?.as_fd())?;
    let cstr = |b: &[u8]| {
        CString::new(b).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in an argument"))
    };
    let path = cstr(format!("/proc/self/fd/{}", exe.as_raw_fd()).as_bytes())?;
    let mut argv_owned = vec![cstr(setup.arg0.as_bytes())?];
    for a in &setup.args {
        argv_owned.push(cstr(a.as_bytes())?);
    }
    let mut envp_owned = Vec::with_capacity(setup.env.len());
    for (k, v) in &setup.env {
        let mut kv = k.as_bytes().to_vec();
        kv.push(b'=');
        kv.extend_from_slice(v.as_bytes());
        envp_owned.push(cstr(&kv)?);
    }
    let argv: Vec<*const libc::c_char> =
        argv_owned.iter().map(|c| c.as_ptr()).chain(std::iter::once(std::ptr::null())).collect();
    let envp: Vec<*const libc::c_char> =
        envp_owned.iter().map(|c| c.as_ptr()).chain(std::iter::once(std::ptr::null())).collect();
    let (status_r, low_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(io::Error::from)?;
    // At a high number, like the sources: a dup2 onto a low target must not close it. The low one goes
    // now: the parent's read ends when the child's copy closes at its exec.
    let status_w = high_copy(low_w.as_fd())?;
    drop(low_w);
    let plan = ChildPlan {
        uid: setup.uid,
        real_uid: setup.real_uid,
        gid: setup.gid,
        fds: copies.iter().map(|(fd, t)| (fd.as_raw_fd(), *t)).collect(),
        v1_tasks: setup.v1_tasks.iter().map(|fd| fd.as_raw_fd()).collect(),
        mount: setup.project_mount.map(|m| (m.tree.as_raw_fd(), m.target.clone())),
        private_devpts: setup.private_devpts,
    };
    let exec = ExecPlan { path: &path, argv: &argv, envp: &envp, null: null.as_raw_fd(), status: status_w.as_raw_fd() };
    let mut pidfd: libc::c_int = -1;
    let mut args = CloneArgs {
        flags: libc::CLONE_PIDFD as u64,
        pidfd: &mut pidfd as *mut libc::c_int as u64,
        exit_signal: libc::SIGCHLD as u64,
        ..CloneArgs::default()
    };
    if let Some(cg) = setup.cgroup {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = u64::try_from(cg.as_raw_fd()).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    }
    let blocked = BlockAll::new();
    // SAFETY: `args` is a valid clone_args of the size we pass, and `pidfd` outlives the call. Without
    // CLONE_VM and with no stack given, the child runs on a private copy of our memory, like fork(); it is
    // diverted at once into `child_main`, which never returns.
    let ret = unsafe { libc::syscall(libc::SYS_clone3, &mut args as *mut CloneArgs, std::mem::size_of::<CloneArgs>()) };
    if ret == 0 {
        // SAFETY: we are the fork-style child: one thread, a private copy of memory in which `plan` and
        // `exec` (and everything they point to) are still valid.
        unsafe { child_main(&plan, &exec) }
    }
    let clone_err = io::Error::last_os_error();
    drop(blocked);
    drop(status_w);
    if ret < 0 {
        return Err(clone_err);
    }
    let pid = u32::try_from(ret).map_err(|_| io::Error::other("clone3 returned a pid out of range"))?;
    // SAFETY: the kernel stored a fresh pidfd (close-on-exec) for the child it created; nothing else owns it.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    // The child writes its errno here when a step or the exec fails; an exec that succeeds closes the pipe.
    // Up to end of file (`read_to_end` retries an interrupted read).
    let mut got = Vec::with_capacity(4);
    std::io::Read::read_to_end(&mut std::io::Read::take(std::fs::File::from(status_r), 4), &mut got)?;
    drop((exe, copies, null));
    if got.is_empty() {
        return Ok((pid, pidfd));
    }
    // Our own child, failed before exec: reap it (its pid cannot have been reused while unreaped).
    let _ = wait_pidfd(pidfd.as_fd(), false);
    let errno = <[u8; 4]>::try_from(got.as_slice()).map_or(libc::EIO, i32::from_ne_bytes);
    Err(io::Error::from_raw_os_error(errno))
}

/// What the child execs, prepared before the clone.
struct ExecPlan<'a> {
    path: &'a CString,
    argv: &'a [*const libc::c_char],
    envp: &'a [*const libc::c_char],
    /// `/dev/null`, the child's stdin.
    null: RawFd,
    /// The status pipe's write end (close-on-exec).
    status: RawFd,
}

/// The child's side of [`spawn_child`]: stdin, cwd, SIGPIPE back to its default, the [`ChildPlan`], every
/// signal unblocked, `execve`. On a failure it writes the errno to the status pipe and `_exit`s.
///
/// # Safety
/// Only in the fork-style child of a clone (one thread, a private copy of memory), with `plan` and `exec`
/// valid there. Async-signal-safe calls only; never returns.
unsafe fn child_main(plan: &ChildPlan, exec: &ExecPlan<'_>) -> ! {
    fn os_errno() -> i32 {
        io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
    }
    // SAFETY: raw system calls on fds and pointers prepared before the clone, valid in this copy.
    let errno = unsafe {
        if libc::dup2(exec.null, 0) < 0 || libc::chdir(c"/".as_ptr()) < 0 {
            os_errno()
        } else {
            // The supervisor ignores SIGPIPE (Rust's runtime does); an ignored signal stays ignored across
            // exec, and a child must not start with it so.
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            match plan.apply() {
                Err(e) => e.raw_os_error().unwrap_or(libc::EIO),
                Ok(()) => {
                    let mut none: libc::sigset_t = std::mem::zeroed();
                    libc::sigemptyset(&mut none);
                    libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
                    libc::execve(exec.path.as_ptr(), exec.argv.as_ptr(), exec.envp.as_ptr());
                    os_errno()
                }
            }
        }
    };
    let bytes = errno.to_ne_bytes();
    // SAFETY: writing four bytes of our stack to the status pipe, then ending this child without running
    // any of the parent's atexit handlers or destructors.
    unsafe {
        libc::write(exec.status, bytes.as_ptr().cast(), bytes.len());
        libc::_exit(127)
    }
}

/// A close-on-exec duplicate of `fd` at a number >= [`HIGH_FD`].
fn high_copy(fd: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    let copy = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(HIGH_FD))?;
    // SAFETY: F_DUPFD_CLOEXEC just returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(copy) })
}

/// Occupy fds 3…7 (when free) with `/dev/null` for the life of the process, so that no fd that
/// `std` creates around a spawn (its exec-error pipe) can be one a child's fd is `dup2`ed onto.
fn reserve_low_fds() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        while let Ok(f) = std::fs::File::open("/dev/null") {
            if f.as_raw_fd() > 7 {
                break;
            }
            // Kept open on purpose: it is a placeholder.
            let _ = std::os::fd::IntoRawFd::into_raw_fd(f);
        }
    });
}

/// In the forked child, in its own mount namespace: a new devpts instance on `/dev/pts` (its `ptmx`
/// usable by every uid, terminals made mode 0620 for their opener) with `/dev/ptmx` bound to it, so the
/// child and its descendants allocate terminals only there and see no other instance's. Best effort:
/// when either mount fails, whatever was mounted is taken off again and the host's instance stays.
/// Async-signal-safe calls only.
fn private_devpts() {
    // SAFETY: static NUL-terminated strings and integer flags.
    let mounted = unsafe {
        libc::mount(
            c"devpts".as_ptr(),
            c"/dev/pts".as_ptr(),
            c"devpts".as_ptr(),
            libc::MS_NOSUID | libc::MS_NOEXEC,
            c"newinstance,ptmxmode=0666,mode=0620".as_ptr().cast(),
        )
    } == 0;
    if !mounted {
        return;
    }
    // SAFETY: as above.
    let bound = unsafe {
        libc::mount(c"/dev/pts/ptmx".as_ptr(), c"/dev/ptmx".as_ptr(), std::ptr::null(), libc::MS_BIND, std::ptr::null())
    } == 0;
    if !bound {
        // A new /dev/pts with the host's /dev/ptmx would hand out terminals whose paths do not exist.
        // SAFETY: static NUL-terminated string, integer flags.
        unsafe { libc::umount2(c"/dev/pts".as_ptr(), libc::MNT_DETACH) };
    }
}

/// The raw numbers [`spawn_child`] hands to the forked child.
struct ChildPlan {
    uid: u32,
    real_uid: Option<u32>,
    gid: u32,
    fds: Vec<(RawFd, RawFd)>,
    v1_tasks: Vec<RawFd>,
    /// The tree fd (held open by the parent's `ChildSetup` across the fork) and its target.
    mount: Option<(RawFd, std::ffi::CString)>,
    private_devpts: bool,
}

impl ChildPlan {
    /// Runs in the forked child: async-signal-safe calls only, no allocation.
    fn apply(&self) -> io::Result<()> {
        fn check(ret: libc::c_int) -> io::Result<()> {
            if ret < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(())
            }
        }
        // SAFETY: setsid takes no arguments. A new session keeps terminal signals sent to the
        // supervisor's process group (Ctrl-C) from reaching the child: shutdown is the supervisor's.
        check(unsafe { libc::setsid() })?;
        // The v1 cgroups (the v2 one placed us at the clone): `0` in `tasks` moves this thread, which is
        // the whole process, as nothing else runs in it yet.
        for &fd in &self.v1_tasks {
            // SAFETY: `fd` is held open by the parent's `ChildSetup` across the clone, and the buffer is a
            // static one-byte string.
            let n = unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) };
            check(if n == 1 { 0 } else { -1 })?;
        }
        // A mount namespace of the child's own, which receives the host's later mounts but sends none
        // back: required for a project mount, best effort for a private devpts alone.
        let own_ns = if self.mount.is_some() || self.private_devpts {
            // SAFETY: integer flags.
            let r = check(unsafe { libc::unshare(libc::CLONE_NEWNS) }).and_then(|()| {
                // SAFETY: static NUL-terminated strings and integer flags.
                check(unsafe {
                    libc::mount(
                        std::ptr::null(),
                        c"/".as_ptr(),
                        std::ptr::null(),
                        libc::MS_SLAVE | libc::MS_REC,
                        std::ptr::null(),
                    )
                })
            });
            match r {
                Err(e) if self.mount.is_some() => return Err(e),
                r => r.is_ok(),
            }
        } else {
            false
        };
        if own_ns && self.private_devpts {
            private_devpts();
        }
        if let Some((tree, target)) = &self.mount {
            // SAFETY: move_mount of the tree fd (open across the fork) onto `target`, a NUL-terminated
            // string made before the fork; the empty path is static.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_move_mount,
                    *tree,
                    c"".as_ptr(),
                    libc::AT_FDCWD,
                    target.as_ptr(),
                    MOVE_MOUNT_F_EMPTY_PATH,
                )
            };
            check(if r < 0 { -1 } else { 0 })?;
        }
        let groups = [self.gid as libc::gid_t];
        // SAFETY: `groups` is a live one-element array for the duration of the call.
        check(unsafe { libc::setgroups(1, groups.as_ptr()) })?;
        // SAFETY: plain integer arguments.
        check(unsafe { libc::setgid(self.gid) })?;
        match self.real_uid {
            // SAFETY: plain integer arguments; as root, setresuid sets exactly these three uids (and
            // clears every capability, since none of them is 0).
            Some(real) => check(unsafe { libc::setresuid(real, self.uid, self.uid) })?,
            // SAFETY: plain integer arguments; as root, setuid sets the real, effective and saved uid.
            None => check(unsafe { libc::setuid(self.uid) })?,
        }
        // SAFETY: PR_SET_NO_NEW_PRIVS takes integer arguments only.
        check(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) })?;
        for &(src, target) in &self.fds {
            // SAFETY: `src` is an open copy at a number >= HIGH_FD held by the parent across the fork;
            // `target` is below HIGH_FD, so dup2 always creates a fresh, inheritable fd.
            check(unsafe { libc::dup2(src, target) })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn getxattr_reads_a_label_and_says_none_without_one() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("slot-1");
        std::fs::create_dir(&dir).unwrap();
        let name = c"user.heddle.job";
        assert_eq!(getxattr(&dir, name).unwrap(), None);
        let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
        setxattr(&path, name, b"42").unwrap();
        assert_eq!(getxattr(&dir, name).unwrap(), Some(b"42".to_vec()));
        assert!(getxattr(&tmp.path().join("gone"), name).is_err());
    }
    use std::os::fd::AsFd;

    #[test]
    #[expect(clippy::zombie_processes, reason = "reaped through its pidfd")]
    fn pidfd_reaps_its_own_child_with_exit_code() {
        let child = Command::new("/bin/sh").args(["-c", "exit 7"]).spawn().unwrap();
        let pidfd = pidfd_open(child.id()).unwrap();
        assert_eq!(wait_pidfd(pidfd.as_fd(), false).unwrap(), Some(Exit::Code(7)));
    }

    #[test]
    #[expect(clippy::zombie_processes, reason = "reaped through its pidfd")]
    fn pidfd_signal_kills_and_wait_reports_it() {
        let child = Command::new("/bin/sleep").arg("30").spawn().unwrap();
        let pidfd = pidfd_open(child.id()).unwrap();
        assert_eq!(wait_pidfd(pidfd.as_fd(), true).unwrap(), None);
        pidfd_send_signal(pidfd.as_fd(), libc::SIGKILL).unwrap();
        assert_eq!(wait_pidfd(pidfd.as_fd(), false).unwrap(), Some(Exit::Signal(libc::SIGKILL)));
    }

    #[test]
    fn inherited_fds_become_close_on_exec() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let plain = nix::unistd::dup(&a).unwrap();
        let flags = || nix::fcntl::fcntl(&plain, nix::fcntl::FcntlArg::F_GETFD).unwrap();
        assert_eq!(flags() & libc::FD_CLOEXEC, 0);
        cloexec_inherited_fds().unwrap();
        assert_eq!(flags() & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
    }

    /// The status pipe: a child whose exec fails is an error carrying the exec's errno (not a pid that
    /// seems to run), and it is reaped; one that execs returns its pid and pidfd.
    #[test]
    fn a_child_that_cannot_exec_is_its_errno_and_one_that_can_is_its_pid() {
        use std::io::Write;
        let tmp = tempfile::tempdir().unwrap();
        let not_a_program = tmp.path().join("text");
        std::fs::File::create(&not_a_program).unwrap().write_all(b"no shebang, no ELF\n").unwrap();
        let exe = std::fs::File::open(&not_a_program).unwrap();
        let uid = nix::unistd::geteuid().as_raw();
        let gid = nix::unistd::getegid().as_raw();
        let setup = |exe| ChildSetup {
            exe,
            arg0: "child",
            args: vec!["-c".into(), "exit 3".into()],
            env: Vec::new(),
            uid,
            real_uid: None,
            gid,
            cgroup: None,
            fds: Vec::new(),
            v1_tasks: Vec::new(),
            project_mount: None,
            private_devpts: false,
        };
        let err = spawn_child(&setup(exe.as_fd())).expect_err("a text file does not exec");
        assert_eq!(err.raw_os_error(), Some(libc::EACCES), "not executable: {err}");
        let mut perms = std::fs::metadata(&not_a_program).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&not_a_program, perms).unwrap();
        let exe = std::fs::File::open(&not_a_program).unwrap();
        let err = spawn_child(&setup(exe.as_fd())).expect_err("a text file without a shebang does not exec");
        assert_eq!(err.raw_os_error(), Some(libc::ENOEXEC), "{err}");
        let sh = std::fs::File::open("/bin/sh").unwrap();
        let (pid, pidfd) = spawn_child(&setup(sh.as_fd())).expect("/bin/sh execs");
        assert!(pid > 0);
        assert_eq!(wait_pidfd(pidfd.as_fd(), false).unwrap(), Some(Exit::Code(3)), "it ran its arguments");
    }

    #[test]
    fn exit_splits_into_code_or_signal() {
        assert_eq!(Exit::Code(3).split(), (Some(3), None));
        assert_eq!(Exit::Signal(9).split(), (None, Some(9)));
    }
}
