//! Every raw system call of the launcher, behind a safe API.
//!
//! The heart of this module is [`clone_exec`]: a fork-style `clone3` (or, where a seccomp profile or an
//! old kernel refuses `clone3`, a fork-style legacy `clone`) that returns a pidfd to the parent and runs
//! [`ChildPlan`]'s steps in the child. Everything the child touches was built before the fork (C strings,
//! pointer arrays, fds), and the child only makes async-signal-safe calls: no allocation, no locks, no
//! formatting, no panics. A failing step writes `[stage: u32 LE][errno: i32 LE]` to the status pipe
//! (close-on-exec) and `_exit(127)`s; a successful `execve` closes that pipe, so the parent reads 0 bytes.
//!
//! Invariants the caller ([`crate::spawn`]) upholds: the stdio fds and the status pipe's write end are
//! all ≥ 3 (so `dup2` onto 0–2 never clobbers a source); every fd in the plan stays open until
//! [`clone_exec`] returns.
#![allow(unsafe_code)]

mod vfork;
pub(crate) use vfork::VFORK_BUILT;

use std::ffi::{c_char, c_int, CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

pub use shm_proto::sys::{wait_pidfd, Exit};

/// A NULL-terminated array of C strings (`argv`, `envp`) owned together with the strings it points into.
pub(crate) struct CStrArray {
    strings: Vec<CString>,
    ptrs: Vec<*const c_char>,
}

// SAFETY: `ptrs` point into the heap buffers of `strings`, which this value owns and never mutates; moving
// the value to another thread moves the owner of those buffers with it.
unsafe impl Send for CStrArray {}
// SAFETY: shared access only reads the strings and the pointer array; nothing is mutated after `new`.
unsafe impl Sync for CStrArray {}

impl CStrArray {
    pub(crate) fn new(strings: Vec<CString>) -> CStrArray {
        let mut ptrs: Vec<*const c_char> = strings.iter().map(|s| s.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        CStrArray { strings, ptrs }
    }

    fn as_ptr(&self) -> *const *const c_char {
        self.ptrs.as_ptr()
    }

    pub(crate) fn strings(&self) -> &[CString] {
        &self.strings
    }
}

/// Where a step in the child failed; sent to the parent through the status pipe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum Stage {
    /// Writing `0` to the cgroup's `cgroup.procs` (fallback placement).
    Cgroup = 1,
    /// `dup2` of stdin, stdout or stderr, or moving the status pipe.
    Stdio = 2,
    /// `chdir` to the working directory.
    Chdir = 3,
    /// `execve`.
    Exec = 4,
    /// `prctl(PR_SET_NO_NEW_PRIVS)`.
    NoNewPrivs = 5,
    /// `landlock_restrict_self` on the prebuilt ruleset.
    Landlock = 6,
    /// `seccomp(SECCOMP_SET_MODE_FILTER)` of the job's own filter.
    Seccomp = 7,
    /// `setresuid` to the effective uid (dropping the real uid that holds the cgroups).
    Uid = 8,
    /// `setsid` and `ioctl(0, TIOCSCTTY)`: making stdin (a terminal) the controlling terminal.
    Tty = 9,
}

impl Stage {
    pub(crate) fn from_u32(v: u32) -> Option<Stage> {
        [
            Stage::Cgroup,
            Stage::Stdio,
            Stage::Chdir,
            Stage::Exec,
            Stage::NoNewPrivs,
            Stage::Landlock,
            Stage::Seccomp,
            Stage::Uid,
            Stage::Tty,
        ]
        .into_iter()
        .find(|s| *s as u32 == v)
    }
}

/// The length of one status report on the status pipe.
pub(crate) const STATUS_LEN: usize = 8;

/// Everything the child needs, borrowed from the prepared job for the duration of one spawn.
pub(crate) struct ChildPlan<'a> {
    pub program: &'a CStr,
    pub argv: &'a CStrArray,
    pub envp: &'a CStrArray,
    pub cwd: Option<&'a CStr>,
    pub stdin: BorrowedFd<'a>,
    pub stdout: BorrowedFd<'a>,
    pub stderr: BorrowedFd<'a>,
    /// Write end of the status pipe (close-on-exec, ≥ 3).
    pub status: BorrowedFd<'a>,
    /// `cgroup.procs` of the target cgroup, open for writing, when placement falls back to a write.
    pub procs: Option<BorrowedFd<'a>>,
    /// Highest fd number to close when `close_range` is unavailable.
    pub max_fd: c_int,
    /// An fd to hand to the job at a fixed number (source > 4 and ≠ target, target ≥ 4).
    pub extra: Option<(BorrowedFd<'a>, c_int)>,
    /// Set no_new_privs before exec (always set with a Landlock ruleset).
    pub no_new_privs: bool,
    /// A Landlock ruleset fd (≥ 4, close-on-exec) to restrict the child with just before exec.
    pub landlock: Option<BorrowedFd<'a>>,
    /// A seccomp program to stack just before exec (no_new_privs is set first).
    pub seccomp: Option<SeccompProg<'a>>,
    /// Become a session leader and make stdin (a terminal) the controlling terminal.
    pub controlling_tty: bool,
}

/// A seccomp program as `seccomp(SECCOMP_SET_MODE_FILTER)` takes it, borrowing its instructions.
#[derive(Clone, Copy)]
pub(crate) struct SeccompProg<'a> {
    fprog: libc::sock_fprog,
    _prog: std::marker::PhantomData<&'a [seccompiler::sock_filter]>,
}

impl<'a> SeccompProg<'a> {
    /// `None` for a program too long for the kernel's 16-bit length (it would refuse it anyway).
    pub(crate) fn new(prog: &'a [seccompiler::sock_filter]) -> Option<SeccompProg<'a>> {
        let len = u16::try_from(prog.len()).ok()?;
        // seccompiler's `sock_filter` is the kernel's `struct sock_filter` (`#[repr(C)]`, same fields in the
        // same order as libc's), so the pointer casts between the two; the kernel only reads through it.
        let filter = prog.as_ptr() as *mut libc::sock_filter;
        Some(SeccompProg { fprog: libc::sock_fprog { len, filter }, _prog: std::marker::PhantomData })
    }
}

/// How to create the child.
#[derive(Clone, Copy, Debug)]
pub(crate) enum CloneMode<'a> {
    /// `clone3(CLONE_PIDFD | CLONE_INTO_CGROUP)`.
    IntoCgroup(BorrowedFd<'a>),
    /// `clone3(CLONE_PIDFD)`.
    Clone3,
    /// Legacy `clone(CLONE_PIDFD)` (Linux ≥ 5.2), for hosts whose seccomp profile refuses `clone3`.
    LegacyClone,
}

pub(crate) use shm_proto::sys::{BlockAll, CloneArgs, CLONE_INTO_CGROUP};

/// Create a child that runs `plan` and `execve`s; returns its pid and pidfd in the parent.
///
/// With `vfork` (and a `clone3` mode), the child shares our memory and runs on its own stack until it
/// `execve`s or `_exit`s, while this thread sleeps (see [`vfork`]); otherwise the clone is
/// fork-style. All signals are blocked across the clone so no handler of ours ever runs in the child;
/// the child resets every disposition to the default and unblocks everything just before `execve`.
pub(crate) fn clone_exec(
    plan: &ChildPlan<'_>,
    mode: CloneMode<'_>,
    vfork: bool,
) -> Result<(u32, OwnedFd), nix::errno::Errno> {
    if vfork {
        let cgroup = match mode {
            CloneMode::IntoCgroup(cg) => Some(cg),
            CloneMode::Clone3 => None,
            CloneMode::LegacyClone => return Err(nix::errno::Errno::ENOSYS),
        };
        return vfork::clone3_vfork(plan, cgroup);
    }
    let mut pidfd: c_int = -1;
    let guard = BlockAll::new();
    let ret = match mode {
        CloneMode::IntoCgroup(cg) => raw_clone3(&mut pidfd, Some(cg)),
        CloneMode::Clone3 => raw_clone3(&mut pidfd, None),
        CloneMode::LegacyClone => raw_legacy_clone(&mut pidfd),
    };
    if ret == 0 {
        // SAFETY: we are the child of a fork-style clone: a single thread with a private copy of the
        // parent's memory, in which `plan` and everything it borrows are still valid.
        unsafe { child_exec(plan) }
    }
    let errno = nix::errno::Errno::last();
    drop(guard);
    if ret < 0 {
        return Err(errno);
    }
    // SAFETY: the kernel stored a fresh pidfd in `pidfd` for the child it created (CLONE_PIDFD, always
    // close-on-exec); nothing else owns it.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    Ok((ret as u32, pidfd))
}

fn raw_clone3(pidfd: &mut c_int, cgroup: Option<BorrowedFd<'_>>) -> libc::c_long {
    let mut args = CloneArgs {
        flags: libc::CLONE_PIDFD as u64,
        pidfd: pidfd as *mut c_int as u64,
        exit_signal: libc::SIGCHLD as u64,
        ..CloneArgs::default()
    };
    if let Some(cg) = cgroup {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = cg.as_raw_fd() as u64;
    }
    // SAFETY: `args` is a valid clone_args of the size we pass; `pidfd` outlives the call. Without CLONE_VM
    // and with no stack given, the child runs on a private copy of our stack, like fork(); the caller
    // immediately diverts the child into `child_exec`, which never returns.
    unsafe { libc::syscall(libc::SYS_clone3, &mut args as *mut CloneArgs, std::mem::size_of::<CloneArgs>()) }
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64", target_arch = "riscv64"))]
fn raw_legacy_clone(pidfd: &mut c_int) -> libc::c_long {
    let flags = (libc::CLONE_PIDFD | libc::SIGCHLD) as libc::c_ulong;
    // SAFETY: fork-style clone (no CLONE_VM, no new stack); with CLONE_PIDFD the kernel writes the pidfd
    // through the parent_tid argument, which points to a live c_int. The argument order
    // (flags, stack, parent_tid, child_tid, tls) holds on these architectures; the last two are unused.
    unsafe { libc::syscall(libc::SYS_clone, flags, 0usize, pidfd as *mut c_int, 0usize, 0usize) }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64", target_arch = "riscv64")))]
fn raw_legacy_clone(_pidfd: &mut c_int) -> libc::c_long {
    nix::errno::Errno::set(nix::errno::Errno::ENOSYS);
    -1
}

/// The child's side: the ordered, async-signal-safe steps between clone and exec.
///
/// # Safety
/// Must only be called in the child of a clone: fork-style (a private copy of memory) or vfork-style
/// (memory shared with the parent, whose thread sleeps until this child `execve`s or `_exit`s; the child
/// runs on its own stack). `plan` must be valid in the child's view of memory. The steps write nothing but
/// their own stack frame and the thread's `errno`, so the vfork-style parent finds its memory as it left
/// it. Never returns: it either `execve`s or `_exit`s.
pub(crate) unsafe fn child_exec(plan: &ChildPlan<'_>) -> ! {
    let status = plan.status.as_raw_fd();
    // 0. Identity: a launching process whose real uid differs from its effective uid holds its cgroups
    //    by the real uid (heddle's worker); the child keeps only the effective one, before anything else.
    // SAFETY: raw setresuid/getuid/geteuid system calls of this child only.
    if !unsafe { drop_real_uid() } {
        // SAFETY: `status` is the open status pipe; see `fail`.
        unsafe { fail(status, Stage::Uid) }
    }
    // 1. Cgroup placement, fallback path only (CLONE_INTO_CGROUP placed us already otherwise).
    if let Some(procs) = plan.procs {
        // SAFETY: `procs` is an open fd for `cgroup.procs`; the buffer is a static byte.
        if unsafe { libc::write(procs.as_raw_fd(), b"0".as_ptr().cast(), 1) } != 1 {
            // SAFETY: `status` is the open status pipe; see `fail`.
            unsafe { fail(status, Stage::Cgroup) }
        }
    }
    // 2. stdin/stdout/stderr. The sources are ≥ 3, so no dup2 clobbers a later source.
    for (src, dst) in [(plan.stdin, 0), (plan.stdout, 1), (plan.stderr, 2)] {
        // SAFETY: `src` is open for the duration of the spawn; `dst` is 0, 1 or 2.
        if unsafe { libc::dup2(src.as_raw_fd(), dst) } < 0 {
            // SAFETY: as above.
            unsafe { fail(status, Stage::Stdio) }
        }
    }
    // 2b. A terminal job: a new session whose controlling terminal is its stdin.
    if plan.controlling_tty {
        // SAFETY: setsid and an integer ioctl on fd 0, which step 2 just filled.
        if unsafe { libc::setsid() } < 0 || unsafe { libc::ioctl(0, libc::TIOCSCTTY, 0 as c_int) } < 0 {
            // SAFETY: as above.
            unsafe { fail(status, Stage::Tty) }
        }
    }
    // 3. Move the status pipe to fd 3 (still close-on-exec), then close everything above it.
    let status = if status == 3 {
        3
    } else {
        // SAFETY: `status` is open; fd 3 may hold any inherited fd, which dup3 replaces.
        if unsafe { libc::dup3(status, 3, libc::O_CLOEXEC) } < 0 {
            // SAFETY: as above.
            unsafe { fail(status, Stage::Stdio) }
        }
        3
    };
    // 3b. Park the Landlock ruleset above every slot we fill (F_DUPFD_CLOEXEC never replaces an open
    //     fd), place the extra fd at its target (not close-on-exec), then the ruleset right above the
    //     highest kept fd (close-on-exec), and close everything else above 3.
    let parked_ll = match plan.landlock {
        // SAFETY: `ll` is open for the duration of the spawn; F_DUPFD_CLOEXEC picks a free number ≥ 64.
        Some(ll) => match unsafe { libc::fcntl(ll.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 64 as c_int) } {
            // SAFETY: as above.
            n if n < 0 => unsafe { fail(status, Stage::Stdio) },
            n => Some(n),
        },
        None => None,
    };
    let extra_target = match plan.extra {
        Some((src, target)) => {
            // SAFETY: `src` is open (> 4, so neither step above replaced it); `target` ≥ 4.
            if unsafe { libc::dup2(src.as_raw_fd(), target) } < 0 {
                // SAFETY: as above.
                unsafe { fail(status, Stage::Stdio) }
            }
            Some(target)
        }
        None => None,
    };
    let ll_slot = extra_target.map_or(4, |t| t + 1);
    if let Some(ll) = parked_ll {
        // SAFETY: `ll` is the parked copy (≥ 64); `ll_slot` holds nothing we keep, which dup3 replaces.
        if unsafe { libc::dup3(ll, ll_slot, libc::O_CLOEXEC) } < 0 {
            // SAFETY: as above.
            unsafe { fail(status, Stage::Stdio) }
        }
    }
    let highest_kept = match (extra_target, parked_ll) {
        (_, Some(_)) => ll_slot,
        (Some(t), None) => t,
        (None, None) => 3,
    };
    // SAFETY: closing fds of this single-threaded child only affects the child; the kept fds (3, the extra
    // target, the ruleset slot) stay open, and the parked ruleset copy (≥ 64) is closed here.
    unsafe {
        if let Some(t) = extra_target {
            close_between(4, t - 1);
        }
        close_from(highest_kept + 1, plan.max_fd)
    };
    // 4. Working directory.
    if let Some(cwd) = plan.cwd {
        // SAFETY: `cwd` is a NUL-terminated string valid in the child's copy of memory.
        if unsafe { libc::chdir(cwd.as_ptr()) } < 0 {
            // SAFETY: as above.
            unsafe { fail(status, Stage::Chdir) }
        }
    }
    // 5. Signals: every disposition back to the default, nothing blocked.
    // SAFETY: only raw rt_sigaction / rt_sigprocmask calls on this single-threaded child.
    unsafe { reset_signals() };
    // 6. Sandbox: no_new_privs, then Landlock on the ruleset built before the fork, then the job's own
    //    small seccomp filter (`clone3` → ENOSYS), stacked on the session's: that one the launching
    //    process installed once (`crate::seccomp`), and the child inherited it with the clone.
    if plan.no_new_privs || plan.landlock.is_some() || plan.seccomp.is_some() {
        // SAFETY: prctl with integer arguments only.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } < 0 {
            // SAFETY: as above.
            unsafe { fail(status, Stage::NoNewPrivs) }
        }
    }
    if plan.landlock.is_some() {
        // SAFETY: `ll_slot` holds the ruleset fd moved there above; flags 0.
        if unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ll_slot, 0_u32) } < 0 {
            // SAFETY: as above.
            unsafe { fail(status, Stage::Landlock) }
        }
    }
    if let Some(prog) = &plan.seccomp {
        const SECCOMP_SET_MODE_FILTER: libc::c_uint = 1;
        // SAFETY: `prog.fprog` points at instructions borrowed for the spawn (valid in the child's view of
        // memory, shared or copied); the kernel copies them; no_new_privs was set just above.
        let r = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                SECCOMP_SET_MODE_FILTER,
                0 as libc::c_uint,
                &prog.fprog as *const libc::sock_fprog,
            )
        };
        if r < 0 {
            // SAFETY: as above.
            unsafe { fail(status, Stage::Seccomp) }
        }
    }
    // 7. Exec.
    // SAFETY: program, argv and envp are NUL-terminated strings / NULL-terminated arrays built before the
    // fork and valid in the child's copy of memory.
    unsafe { libc::execve(plan.program.as_ptr(), plan.argv.as_ptr(), plan.envp.as_ptr()) };
    // SAFETY: as above.
    unsafe { fail(status, Stage::Exec) }
}

/// Make the real, saved (and file-system) uid equal to the effective uid when the real one differs;
/// true on success or when there was nothing to do. A raw system call, not the C library's `setresuid`,
/// which would try to signal the parent's other threads (the vfork-style child shares their memory).
///
/// # Safety
/// Child-only (see [`child_exec`]): it changes the calling thread's credentials.
unsafe fn drop_real_uid() -> bool {
    // SAFETY: integer-only system calls on this thread's credentials.
    unsafe {
        let (real, effective) = (libc::syscall(libc::SYS_getuid), libc::syscall(libc::SYS_geteuid));
        real == effective || libc::syscall(libc::SYS_setresuid, effective, effective, effective) == 0
    }
}

/// The real and the effective uid of this process.
pub(crate) fn uids() -> (u32, u32) {
    // SAFETY: getuid and geteuid cannot fail and take no arguments.
    unsafe { (libc::getuid(), libc::geteuid()) }
}

/// Set this thread's file-system uid (the one the kernel checks for file access, cgroup placement
/// included). The change is per thread. The kernel takes only the thread's real, effective or saved uid
/// and reports no error otherwise: a refused change shows as the `EACCES` of the operation after it.
pub(crate) fn set_fsuid(uid: u32) {
    // SAFETY: an integer argument; setfsuid changes only the calling thread's fsuid.
    unsafe { libc::setfsuid(uid) };
}

/// Report `stage` and the current errno on the status pipe, then `_exit(127)`.
///
/// # Safety
/// Child-only (see [`child_exec`]); `status` must be the status pipe's write end.
unsafe fn fail(status: c_int, stage: Stage) -> ! {
    let errno = nix::errno::Errno::last_raw();
    let mut msg = [0u8; STATUS_LEN];
    let (a, b) = msg.split_at_mut(4);
    a.copy_from_slice(&(stage as u32).to_le_bytes());
    b.copy_from_slice(&errno.to_le_bytes());
    // SAFETY: `msg` is a local buffer of STATUS_LEN bytes (≤ PIPE_BUF, so the write is atomic); `_exit`
    // ends the child without running atexit handlers or flushing the parent's stdio buffers.
    unsafe {
        libc::write(status, msg.as_ptr().cast(), STATUS_LEN);
        libc::_exit(127)
    }
}

/// Close the fds `first..=last` (nothing when `last < first`).
///
/// # Safety
/// Child-only, as [`close_from`].
unsafe fn close_between(first: c_int, last: c_int) {
    if last < first {
        return;
    }
    // SAFETY: close_range takes plain integers; on failure nothing was closed.
    let r =
        unsafe { libc::syscall(libc::SYS_close_range, first as libc::c_uint, last as libc::c_uint, 0 as libc::c_uint) };
    if r == 0 {
        return;
    }
    for fd in first..=last {
        // SAFETY: closing a number that is not open fails with EBADF, which is harmless.
        unsafe { libc::close(fd) };
    }
}

/// Close every fd from `first` up: `close_range` (Linux 5.9), else one `close` per number up to `max_fd`.
///
/// # Safety
/// Child-only: closes fds that other code in a multi-threaded process may still be using.
unsafe fn close_from(first: c_int, max_fd: c_int) {
    // SAFETY: close_range takes plain integers; on failure nothing was closed.
    let r =
        unsafe { libc::syscall(libc::SYS_close_range, first as libc::c_uint, libc::c_uint::MAX, 0 as libc::c_uint) };
    if r == 0 {
        return;
    }
    for fd in first..=max_fd {
        // SAFETY: closing a number that is not open fails with EBADF, which is harmless.
        unsafe { libc::close(fd) };
    }
}

/// Reset every signal's disposition to `SIG_DFL` and unblock all signals.
///
/// Uses the raw `rt_sigaction`, because the C library refuses to touch the signals it reserves (32 and 33
/// with glibc), which a parent may still have left ignored. An all-zero kernel `struct sigaction` means
/// `SIG_DFL`, no flags, empty mask on every architecture (only the field order differs), so one zeroed
/// buffer as large as the largest layout serves everywhere.
///
/// # Safety
/// Child-only: changes process-wide signal state.
unsafe fn reset_signals() {
    const KERNEL_SIGSET_BYTES: usize = 8;
    let dfl = [0u64; 4];
    for sig in 1..=64 {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: `dfl` is a zeroed buffer at least as large as the kernel's struct sigaction; the old
        // action is not requested. Failures (none expected) leave that signal as it was.
        unsafe {
            libc::syscall(libc::SYS_rt_sigaction, sig, dfl.as_ptr(), std::ptr::null_mut::<u64>(), KERNEL_SIGSET_BYTES)
        };
    }
    let empty = 0u64;
    // SAFETY: `empty` is a kernel sigset with no signal; SIG_SETMASK with it unblocks everything.
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &empty as *const u64,
            std::ptr::null_mut::<u64>(),
            KERNEL_SIGSET_BYTES,
        )
    };
}

/// A close-on-exec duplicate of `fd` numbered `min` or above.
pub(crate) fn dup_at_least(fd: BorrowedFd<'_>, min: c_int) -> io::Result<OwnedFd> {
    use nix::fcntl::{fcntl, FcntlArg};
    let raw = fcntl(fd, FcntlArg::F_DUPFD_CLOEXEC(min))?;
    // SAFETY: F_DUPFD_CLOEXEC just created `raw` in our fd table; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// The soft `RLIMIT_NOFILE` minus one: the highest fd number the process can hold.
pub(crate) fn max_fd() -> c_int {
    match nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE) {
        Ok((soft, _)) if soft > 0 => c_int::try_from(soft - 1).unwrap_or(c_int::MAX),
        _ => 1 << 20,
    }
}

/// The running kernel's Landlock ABI version (`landlock_create_ruleset(NULL, 0, VERSION)`); ≤ 0 when the
/// kernel has no Landlock or it is disabled.
pub(crate) fn landlock_abi() -> i32 {
    const LANDLOCK_CREATE_RULESET_VERSION: u32 = 1;
    // SAFETY: with a NULL attribute pointer, size 0 and the VERSION flag, the syscall only returns a number.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    i32::try_from(v).unwrap_or(0)
}

/// `prctl(PR_SET_NO_NEW_PRIVS, 1)` for the calling thread.
pub(crate) fn set_no_new_privs() -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `landlock_restrict_self(fd, 0)` for the calling thread (no_new_privs must be set).
pub(crate) fn landlock_restrict_self(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: `fd` is an open Landlock ruleset fd for the duration of the call; flags 0.
    if unsafe { libc::syscall(libc::SYS_landlock_restrict_self, fd.as_raw_fd(), 0u32) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// One file the files channel writes: everything prepared before the fork.
pub(crate) struct FileWrite {
    pub target: CString,
    pub temp: CString,
    pub content: Vec<u8>,
    pub mode: libc::mode_t,
    /// The target's ancestor directories, outermost first (`/` excluded): created (mode 0777 less the
    /// umask) when the temp file cannot be opened because one is missing.
    pub parents: Vec<CString>,
}

/// Write `files` from a short-lived forked child restricted by `ruleset` (so the job's own Landlock
/// domain decides what may be written), each to its temp name then renamed over the target. Returns one
/// errno (0 for written) per file, in order.
pub(crate) fn write_files_confined(ruleset: Option<BorrowedFd<'_>>, files: &[FileWrite]) -> io::Result<Vec<i32>> {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let guard = BlockAll::new();
    // SAFETY: fork() in a process whose other threads (if any) hold no lock the child needs: the child
    // only makes raw system calls on data prepared before the fork, then `_exit`s.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: we are the fork child; `files`, `ruleset` and `w` are valid in our copy of memory.
        unsafe { files_child(ruleset, files, w.as_raw_fd()) }
    }
    drop(guard);
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    drop(w);
    let mut buf = vec![0u8; files.len() * 4];
    let mut got = 0;
    let mut reader = std::fs::File::from(r);
    while got < buf.len() {
        match std::io::Read::read(&mut reader, &mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let mut status = 0;
    // SAFETY: `pid` is our own unreaped child.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0
        && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
    {}
    if got < buf.len() {
        return Err(io::Error::other("the file-writing child ended before reporting every file"));
    }
    Ok(buf.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}

/// The files child: restrict, write each file atomically, report an errno per file, `_exit`.
///
/// # Safety
/// Fork-child only; never returns.
unsafe fn files_child(ruleset: Option<BorrowedFd<'_>>, files: &[FileWrite], report: c_int) -> ! {
    let errno = || nix::errno::Errno::last_raw();
    let mut restrict_errno = 0;
    // SAFETY: this fork child's own credentials; the files are the effective uid's, as the job's are.
    if !unsafe { drop_real_uid() } {
        restrict_errno = errno();
    }
    if let Some(rs) = ruleset.filter(|_| restrict_errno == 0) {
        // SAFETY: integer-only prctl and a syscall on an open ruleset fd.
        let ok = unsafe {
            libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
                && libc::syscall(libc::SYS_landlock_restrict_self, rs.as_raw_fd(), 0u32) == 0
        };
        if !ok {
            restrict_errno = errno();
        }
    }
    for f in files {
        // SAFETY: raw syscalls on NUL-terminated paths and a byte buffer prepared before the fork.
        let e = if restrict_errno != 0 { restrict_errno } else { unsafe { write_one(f) } };
        let bytes = e.to_le_bytes();
        // SAFETY: `report` is the pipe's write end; 4 bytes ≤ PIPE_BUF are written atomically.
        unsafe { libc::write(report, bytes.as_ptr().cast(), 4) };
    }
    // SAFETY: ends the child without running the parent's atexit handlers.
    unsafe { libc::_exit(0) }
}

/// Write one file to its temp name and rename it over the target; 0 or the errno of the failed step.
///
/// # Safety
/// Fork-child only (see [`files_child`]).
unsafe fn write_one(f: &FileWrite) -> i32 {
    let errno = || nix::errno::Errno::last_raw();
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC | libc::O_NOFOLLOW;
    // SAFETY: `temp` is NUL-terminated; mode is a plain integer.
    let mut fd = unsafe { libc::open(f.temp.as_ptr(), flags, 0o600 as libc::c_uint) };
    if fd < 0 && errno() == libc::ENOENT {
        for dir in &f.parents {
            // SAFETY: NUL-terminated path prepared before the fork; an existing directory is fine.
            if unsafe { libc::mkdir(dir.as_ptr(), 0o777) } < 0 && errno() != libc::EEXIST {
                return errno();
            }
        }
        // SAFETY: as above.
        fd = unsafe { libc::open(f.temp.as_ptr(), flags, 0o600 as libc::c_uint) };
    }
    if fd < 0 {
        return errno();
    }
    let mut off = 0;
    while off < f.content.len() {
        // SAFETY: the slice from `off` is valid for its length.
        let n = unsafe { libc::write(fd, f.content[off..].as_ptr().cast(), f.content.len() - off) };
        if n < 0 {
            let e = errno();
            if e == libc::EINTR {
                continue;
            }
            // SAFETY: closing our own fd and unlinking our own temp name.
            unsafe { (libc::close(fd), libc::unlink(f.temp.as_ptr())) };
            return e;
        }
        off += n as usize;
    }
    // SAFETY: `fd` is open; fchmod applies the exact mode (the umask only applied to open).
    let e = if unsafe { libc::fchmod(fd, f.mode) } < 0 { errno() } else { 0 };
    // SAFETY: our own fd.
    unsafe { libc::close(fd) };
    // SAFETY: NUL-terminated paths.
    if e != 0 || unsafe { libc::rename(f.temp.as_ptr(), f.target.as_ptr()) } < 0 {
        let e = if e != 0 { e } else { errno() };
        // SAFETY: as above.
        unsafe { libc::unlink(f.temp.as_ptr()) };
        return e;
    }
    0
}

/// `seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, prog)`: the filter on this thread
/// and the fd of its user-notification listener.
pub(crate) fn seccomp_with_listener(prog: &[seccompiler::sock_filter]) -> io::Result<OwnedFd> {
    let len = u16::try_from(prog.len()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // seccompiler's `sock_filter` is the kernel's struct (`repr(C)`, the same four fields).
    let fprog = libc::sock_fprog { len, filter: prog.as_ptr().cast_mut().cast::<libc::sock_filter>() };
    // SAFETY: `fprog` points at `prog`, alive for the call; the kernel copies the program.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
            &fprog as *const libc::sock_fprog,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this fd and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// One waiting notification of `listener`, answered `EPERM`: `None` when none waits (never blocks: the
/// fd is polled first, as a receive with nothing pending would block), `Some(None)` when the caller
/// went away meanwhile, else the caller's pid and the call's first argument (the socket family).
pub(crate) fn notif_answer_eperm(listener: BorrowedFd<'_>) -> Option<Option<(u32, u32)>> {
    let fd = listener.as_raw_fd();
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd, zero timeout.
    if unsafe { libc::poll(&mut pfd, 1, 0) } != 1 || pfd.revents & libc::POLLIN == 0 {
        return None;
    }
    // SAFETY: all-zero is a valid `seccomp_notif`, and the kernel requires it zeroed before RECV.
    let mut notif: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    // SAFETY: RECV fills `notif`, a struct of the size the ioctl number encodes.
    if unsafe { libc::ioctl(fd, libc::SECCOMP_IOCTL_NOTIF_RECV, &mut notif) } != 0 {
        return Some(None);
    }
    let mut resp = libc::seccomp_notif_resp { id: notif.id, val: 0, error: -libc::EPERM, flags: 0 };
    // SAFETY: SEND reads `resp`; ENOENT (the caller died meanwhile) needs nothing more.
    unsafe { libc::ioctl(fd, libc::SECCOMP_IOCTL_NOTIF_SEND, &mut resp) };
    Some(Some((notif.pid, notif.data.args[0] as u32)))
}
