//! The system calls heddle's processes share, behind a safe API: memfd creation and sealing, eventfds,
//! fd passing, inherited fds, and pidfds (`pidfd_open`, `pidfd_send_signal`, `waitid(P_PIDFD)`). The
//! supervisor, the worker and the launcher use these rather than copies of their own; what only one
//! process does (the supervisor's privilege drop, the launcher's sandbox) stays in that crate's `sys`.
//!
//! ```
//! use shm_proto::sys;
//! let child = std::process::Command::new("/bin/true").spawn().unwrap();
//! let pidfd = sys::pidfd_open(child.id()).unwrap();
//! let exit = sys::wait_pidfd(std::os::fd::AsFd::as_fd(&pidfd), false).unwrap();
//! assert_eq!(exit, Some(sys::Exit::Code(0)));
//! ```
#![allow(unsafe_code)]

use nix::fcntl::{fcntl, FcntlArg, SealFlag};
use nix::sys::eventfd::{EfdFlags, EventFd as NixEventFd};
use nix::sys::memfd::{memfd_create, MFdFlags};
use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};
use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// A close-on-exec memfd that allows sealing, sized to `size` bytes.
pub fn memfd_sized(name: &str, size: u64) -> std::io::Result<OwnedFd> {
    let fd = memfd_create(name, MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING)?;
    nix::unistd::ftruncate(&fd, i64::try_from(size).map_err(|_| nix::errno::Errno::EFBIG)?)?;
    Ok(fd)
}

/// Seal the memfd's size for good.
pub fn seal(fd: BorrowedFd<'_>) -> std::io::Result<()> {
    let seals = SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_SEAL;
    fcntl(fd, FcntlArg::F_ADD_SEALS(seals))?;
    Ok(())
}

/// True when the fd's size can no longer shrink.
pub fn is_sealed(fd: BorrowedFd<'_>) -> std::io::Result<bool> {
    let seals = fcntl(fd, FcntlArg::F_GET_SEALS)?;
    Ok(SealFlag::from_bits_truncate(seals).contains(SealFlag::F_SEAL_SHRINK))
}

/// The size of the file behind `fd`.
pub fn fd_size(fd: BorrowedFd<'_>) -> std::io::Result<u64> {
    Ok(nix::sys::stat::fstat(fd)?.st_size as u64)
}

/// An eventfd used as a doorbell: `notify` adds one, `drain` reads and resets the counter.
#[derive(Debug)]
pub struct EventFd(OwnedFd);

impl EventFd {
    /// A new non-blocking, close-on-exec eventfd.
    pub fn new() -> std::io::Result<EventFd> {
        let efd = NixEventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)?;
        Ok(EventFd(efd.into()))
    }

    /// Wrap an fd received from another process (must be an eventfd; a wrong fd makes `notify`/`drain`
    /// fail with an error, nothing worse).
    pub fn from_owned(fd: OwnedFd) -> EventFd {
        EventFd(fd)
    }

    /// Ring the doorbell.
    pub fn notify(&self) -> std::io::Result<()> {
        match nix::unistd::write(&self.0, &1u64.to_ne_bytes()) {
            Ok(_) | Err(nix::errno::Errno::EAGAIN) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Reset the counter; returns how many rings were pending (0 if none).
    pub fn drain(&self) -> std::io::Result<u64> {
        let mut buf = [0u8; 8];
        match nix::unistd::read(&self.0, &mut buf) {
            Ok(8) => Ok(u64::from_ne_bytes(buf)),
            Ok(_) => Ok(0),
            Err(nix::errno::Errno::EAGAIN) => Ok(0),
            Err(e) => Err(e.into()),
        }
    }

    /// Block until the doorbell rings or `timeout_ms` passes (`-1`: no limit); returns true if it rang.
    pub fn wait(&self, timeout_ms: i32) -> std::io::Result<bool> {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let mut fds = [PollFd::new(self.0.as_fd(), PollFlags::POLLIN)];
        let t = if timeout_ms < 0 {
            PollTimeout::NONE
        } else {
            PollTimeout::try_from(timeout_ms).unwrap_or(PollTimeout::MAX)
        };
        loop {
            match poll(&mut fds, t) {
                Ok(n) => return Ok(n > 0),
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    pub fn into_owned(self) -> OwnedFd {
        self.0
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// Take ownership of fd `raw`, inherited at exec from the process that spawned us (the supervisor places
/// session fds at fixed numbers). Marks it close-on-exec so it does not leak into our own children.
///
/// Each number can be taken once per process: a second call for the same number is an error, since by
/// then the number may have been reused by something else that owns it.
pub fn take_inherited_fd(raw: i32) -> std::io::Result<OwnedFd> {
    use std::sync::Mutex;
    static TAKEN: Mutex<Vec<i32>> = Mutex::new(Vec::new());
    if raw <= 2 {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("fd {raw} is a standard stream")));
    }
    let mut taken = TAKEN.lock().unwrap_or_else(|e| e.into_inner());
    if taken.contains(&raw) {
        return Err(std::io::Error::new(std::io::ErrorKind::AlreadyExists, format!("fd {raw} was already taken")));
    }
    // SAFETY: F_GETFD only reads the descriptor's flags; an unopened number gives EBADF, no other effect.
    let flags = unsafe { libc::fcntl(raw, libc::F_GETFD) };
    if flags < 0 {
        return Err(std::io::Error::last_os_error());
    }
    taken.push(raw);
    // SAFETY: `raw` is open (checked above), was inherited across exec, and nothing else in this process
    // claims it: every claim goes through this function, which hands each number out once.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    fcntl(fd.as_fd(), FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC))?;
    Ok(fd)
}

/// Send `data` as one packet with `fds` attached (SCM_RIGHTS).
pub fn send_with_fds(sock: BorrowedFd<'_>, data: &[u8], fds: &[BorrowedFd<'_>]) -> std::io::Result<()> {
    let raw: Vec<i32> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let cmsg = [ControlMessage::ScmRights(&raw)];
    let cmsgs: &[ControlMessage<'_>] = if raw.is_empty() { &[] } else { &cmsg };
    loop {
        match sendmsg::<()>(sock.as_raw_fd(), &[IoSlice::new(data)], cmsgs, MsgFlags::MSG_NOSIGNAL, None) {
            Ok(_) => return Ok(()),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Receive one packet into `buf`; returns its length, the fds that came with it (close-on-exec), and
/// whether the packet or its fds were truncated.
pub fn recv_with_fds(sock: BorrowedFd<'_>, buf: &mut [u8]) -> std::io::Result<(usize, Vec<OwnedFd>, bool)> {
    let mut space = nix::cmsg_space!([i32; 16]);
    let mut iov = [IoSliceMut::new(buf)];
    let msg = loop {
        match recvmsg::<()>(sock.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC) {
            Ok(m) => break m,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    };
    let truncated = msg.flags.intersects(MsgFlags::MSG_TRUNC | MsgFlags::MSG_CTRUNC);
    let mut fds = Vec::new();
    for c in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(raw) = c {
            for fd in raw {
                // SAFETY: the kernel just installed `fd` in our table for this message; nobody else owns
                // it, so taking ownership here is the only owner.
                fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
            }
        }
    }
    Ok((msg.bytes, fds, truncated))
}

/// Now as nanoseconds since the Unix epoch (0 before it); the one clock every heddle process stamps
/// records and chunks with.
pub fn unix_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// `CLOCK_MONOTONIC` now, in ns: one clock for every process of the host, so a time one process took can
/// be compared with another's `clock_gettime(CLOCK_MONOTONIC)` (the worker stamps each output read with it).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call; CLOCK_MONOTONIC always
    // exists on Linux, so the call cannot fail and leaves `ts` written.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    u64::try_from(ts.tv_sec)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(ts.tv_nsec).unwrap_or(0))
}

/// Mark the calling thread as background work (`SCHED_BATCH`): the scheduler gives it the same share
/// of a CPU as before, but its wake-ups never preempt a running thread. The front's writers (database
/// rows, output files made ahead, retention) are woken during a call; without this, each wake-up
/// preempted the thread answering the call on its own CPU (measured in `docs/performance.md`).
pub fn background_thread() -> std::io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param for the duration of the call,
    // and SCHED_BATCH takes priority 0. The call changes only this thread's policy.
    let ret = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
    if ret == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Give the allocator's free memory back to the system (`malloc_trim(0)`: every arena's free pages).
/// A no-op where the C library is not glibc.
pub fn give_back_free_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim takes no pointers; it only walks the allocator's own arenas under their locks.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// How a reaped child ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Exit {
    /// It called `exit` with this code.
    Code(i32),
    /// A signal with this number ended it.
    Signal(i32),
}

impl Exit {
    /// The exit code, when the process exited by itself.
    pub fn code(self) -> Option<i32> {
        match self {
            Exit::Code(c) => Some(c),
            Exit::Signal(_) => None,
        }
    }

    /// The signal that ended the process, if one did.
    pub fn signal(self) -> Option<i32> {
        match self {
            Exit::Code(_) => None,
            Exit::Signal(s) => Some(s),
        }
    }

    /// The status a shell would report: the code, or 128 + the signal number.
    pub fn shell_code(self) -> i32 {
        match self {
            Exit::Code(c) => c,
            Exit::Signal(s) => 128 + s,
        }
    }

    /// `(code, signal)`, exactly one of them set.
    pub fn split(self) -> (Option<i32>, Option<i32>) {
        match self {
            Exit::Code(c) => (Some(c), None),
            Exit::Signal(s) => (None, Some(s)),
        }
    }
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exit::Code(c) => write!(f, "exit code {c}"),
            Exit::Signal(s) => write!(f, "signal {s}"),
        }
    }
}

/// `struct clone_args` as of Linux 5.7 (`CLONE_ARGS_SIZE_VER2`, 88 bytes), for `clone3` (the launcher's
/// job spawns, the supervisor's children).
#[repr(C, align(8))]
#[derive(Debug, Default)]
pub struct CloneArgs {
    pub flags: u64,
    pub pidfd: u64,
    pub child_tid: u64,
    pub parent_tid: u64,
    pub exit_signal: u64,
    pub stack: u64,
    pub stack_size: u64,
    pub tls: u64,
    pub set_tid: u64,
    pub set_tid_size: u64,
    pub cgroup: u64,
}

/// `CLONE_INTO_CGROUP` (Linux 5.7); spelled out because `libc` defines it for glibc targets only.
pub const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// Signals blocked for the lifetime of this guard (the previous mask is restored on drop), so no handler
/// of ours runs in a child between clone and exec.
pub struct BlockAll(libc::sigset_t);

impl std::fmt::Debug for BlockAll {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockAll").finish_non_exhaustive()
    }
}

impl BlockAll {
    pub fn new() -> BlockAll {
        // SAFETY: `sigset_t` is plain data; both sets are initialised by sigfillset / pthread_sigmask before
        // being read.
        let (mut all, mut old): (libc::sigset_t, libc::sigset_t) = unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
        // SAFETY: `all` and `old` are valid, writable sigsets on our stack; pthread_sigmask with a full set
        // cannot fail (SIG_SETMASK is a valid `how`).
        unsafe {
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        }
        BlockAll(old)
    }
}

impl Default for BlockAll {
    fn default() -> Self {
        BlockAll::new()
    }
}

impl Drop for BlockAll {
    fn drop(&mut self) {
        // SAFETY: `self.0` is the mask pthread_sigmask returned in `new`, a valid sigset.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.0, std::ptr::null_mut());
        }
    }
}

/// A close-on-exec pidfd for the process that holds `pid` now (`pidfd_open`, Linux 5.3). Race-free
/// only for an unreaped child of the caller (its pid cannot have been reused).
pub fn pidfd_open(pid: u32) -> std::io::Result<OwnedFd> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| std::io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: pidfd_open takes a pid and a flags word and returns a new fd or -1; no memory is passed.
    let ret = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0u32) };
    if ret < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let fd = std::os::fd::RawFd::try_from(ret).map_err(|_| std::io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: the kernel just created `fd` for us (pidfds are always close-on-exec); nothing else owns
    // it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Send `signal` to exactly the process behind `pidfd` (`pidfd_send_signal`, Linux 5.1): unlike
/// `kill(pid)`, never to a process that reused the pid.
pub fn pidfd_send_signal(pidfd: BorrowedFd<'_>, signal: i32) -> std::io::Result<()> {
    // SAFETY: the fd is borrowed, so open for this call; a null siginfo and zero flags are the
    // documented "like kill(2)" form.
    let ret = unsafe {
        libc::syscall(libc::SYS_pidfd_send_signal, pidfd.as_raw_fd(), signal, std::ptr::null::<libc::siginfo_t>(), 0u32)
    };
    if ret < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `waitid(P_PIDFD, pidfd, WEXITED [| WNOHANG])`: reap the child behind `pidfd`. With `nohang`,
/// `None` while it still runs; otherwise blocks until it exits. `EINTR` is retried.
pub fn wait_pidfd(pidfd: BorrowedFd<'_>, nohang: bool) -> std::io::Result<Option<Exit>> {
    use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
    let mut flags = WaitPidFlag::WEXITED;
    if nohang {
        flags |= WaitPidFlag::WNOHANG;
    }
    loop {
        match waitid(Id::PIDFd(pidfd), flags) {
            Ok(WaitStatus::Exited(_, code)) => return Ok(Some(Exit::Code(code))),
            Ok(WaitStatus::Signaled(_, sig, _)) => return Ok(Some(Exit::Signal(sig as i32))),
            Ok(_) => return Ok(None),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};

    #[test]
    fn fds_cross_a_socket_pair() {
        let (a, b) = socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC).unwrap();
        let efd = EventFd::new().unwrap();
        send_with_fds(a.as_fd(), b"hi", &[efd.as_fd()]).unwrap();
        let mut buf = [0u8; 16];
        let (n, fds, trunc) = recv_with_fds(b.as_fd(), &mut buf).unwrap();
        assert_eq!((&buf[..n], fds.len(), trunc), (&b"hi"[..], 1, false));
        let got = EventFd::from_owned(fds.into_iter().next().unwrap());
        efd.notify().unwrap();
        assert_eq!(got.drain().unwrap(), 1);
    }

    #[test]
    fn the_monotonic_clock_is_the_one_std_instant_reads() {
        let t = std::time::Instant::now();
        let a = monotonic_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = monotonic_ns();
        let around = t.elapsed().as_nanos() as u64;
        assert!(b - a >= 2_000_000 && b - a <= around, "{a} {b}: {} ns inside {around} ns", b - a);
        assert!(unix_ns() > 1_600_000_000_000_000_000);
    }
}
