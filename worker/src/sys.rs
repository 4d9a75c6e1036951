//! The worker's raw system calls, behind a safe API: adopting the inherited fds 3–7, the bytes waiting in
//! a pipe (`FIONREAD`), and pidfd-pinned signalling (`pidfd_open`, `pidfd_send_signal`).
//!
//! Everything else the worker needs goes through `nix`, `mio` or the launcher.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

pub use shm_proto::sys::{pidfd_open, pidfd_send_signal};

/// The fds the supervisor hands every worker (see docs/architecture.md, "Command lines, inherited fds").
#[derive(Debug)]
pub struct InheritedFds {
    /// fd 3: the session's sealed memfd region.
    pub region: OwnedFd,
    /// fd 4: cmd_data eventfd (the front rings it after pushing commands).
    pub cmd_data: OwnedFd,
    /// fd 5: cmd_space eventfd (the worker rings it after freeing command space).
    pub cmd_space: OwnedFd,
    /// fd 6: evt_data eventfd (the worker rings it after pushing events).
    pub evt_data: OwnedFd,
    /// fd 7: evt_space eventfd (the front rings it after freeing event space).
    pub evt_space: OwnedFd,
}

/// Errors adopting the inherited fds.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InheritError {
    #[error("fd {0} is not open; heddle-worker expects the region at fd 3 and four eventfds at fds 4-7")]
    NotOpen(RawFd),
    #[error("the inherited fds were already taken")]
    AlreadyTaken,
    #[error("cannot take inherited fd {0}")]
    Cloexec(RawFd, #[source] io::Error),
}

static TAKEN: AtomicBool = AtomicBool::new(false);

impl InheritedFds {
    /// Take ownership of fds 3–7 (once per process) and mark them close-on-exec.
    pub fn take() -> Result<InheritedFds, InheritError> {
        if TAKEN.swap(true, Ordering::SeqCst) {
            return Err(InheritError::AlreadyTaken);
        }
        let mut fds = Vec::with_capacity(5);
        for n in 3..=7 {
            fds.push(adopt(n)?);
        }
        let mut it = fds.into_iter();
        let mut next = || it.next().ok_or(InheritError::NotOpen(-1));
        Ok(InheritedFds {
            region: next()?,
            cmd_data: next()?,
            cmd_space: next()?,
            evt_data: next()?,
            evt_space: next()?,
        })
    }
}

fn adopt(n: RawFd) -> Result<OwnedFd, InheritError> {
    shm_proto::sys::take_inherited_fd(n).map_err(|e| match e.raw_os_error() {
        Some(libc::EBADF) => InheritError::NotOpen(n),
        _ => InheritError::Cloexec(n, e),
    })
}

/// Make `SIGCHLD` take its default action, so exited jobs stay zombies until the worker reaps them
/// through their pidfds. (An ignored `SIGCHLD`, which a parent could leave behind across `exec`, would
/// make the kernel reap them itself and `waitid` fail with `ECHILD`.)
pub fn default_sigchld() -> io::Result<()> {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let dfl = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
    // SAFETY: installing SIG_DFL runs no handler code, so no signal-safety contract is involved; the
    // previous action is discarded.
    unsafe { sigaction(Signal::SIGCHLD, &dfl) }?;
    Ok(())
}

/// Bytes waiting to be read in the pipe behind `fd` (`FIONREAD`).
pub fn pipe_pending(fd: BorrowedFd<'_>) -> io::Result<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one c_int through the pointer, which refers to a live local.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONREAD, &mut n as *mut libc::c_int) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(usize::try_from(n).unwrap_or(0))
}

/// Set the extended attribute `name` of the file behind `fd` to `value` (`fsetxattr`).
pub fn fsetxattr(fd: BorrowedFd<'_>, name: &std::ffi::CStr, value: &[u8]) -> io::Result<()> {
    // SAFETY: a live fd, a NUL-terminated name, and a buffer of the length given.
    let r = unsafe { libc::fsetxattr(fd.as_raw_fd(), name.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn pipe_pending_counts_unread_bytes() {
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        assert_eq!(pipe_pending(r.as_fd()).unwrap(), 0);
        nix::unistd::write(&w, b"hello").unwrap();
        assert_eq!(pipe_pending(r.as_fd()).unwrap(), 5);
    }

    #[test]
    fn pidfd_signal_reaches_our_own_child() {
        let mut child = std::process::Command::new("sleep").arg("10").spawn().unwrap();
        let fd = pidfd_open(child.id()).unwrap();
        pidfd_send_signal(fd.as_fd(), libc::SIGTERM).unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGTERM));
        assert_eq!(pidfd_send_signal(fd.as_fd(), libc::SIGTERM).unwrap_err().raw_os_error(), Some(libc::ESRCH));
    }
}
