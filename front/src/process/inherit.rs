//! Taking ownership of the fds the supervisor leaves open for the front (3: control socket, 4:
//! listening socket), and checking that each is the kind of socket it should be.
//!
//! The unsafe claim of a raw number lives in `shm_proto::sys::take_inherited_fd`, which hands out each
//! number once per process.
//!
//! ```no_run
//! let control = front::process::inherit::adopt(3).unwrap();
//! # let _ = control;
//! ```

use nix::sys::socket::{getsockopt, sockopt, SockType};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// Errors adopting an inherited fd.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InheritError {
    #[error("cannot take inherited fd {fd}")]
    Take {
        fd: RawFd,
        #[source]
        source: std::io::Error,
    },
    #[error("fd {fd} is not a {want} socket")]
    WrongKind { fd: RawFd, want: &'static str },
}

/// Take ownership of inherited fd `raw`.
pub fn adopt(raw: RawFd) -> Result<OwnedFd, InheritError> {
    shm_proto::sys::take_inherited_fd(raw).map_err(|source| InheritError::Take { fd: raw, source })
}

/// Check that `fd` is a socket of type `ty` (and listening, if `listening`).
pub fn check_socket(fd: &OwnedFd, ty: SockType, listening: bool, want: &'static str) -> Result<(), InheritError> {
    let wrong = || InheritError::WrongKind { fd: fd.as_raw_fd(), want };
    if getsockopt(fd, sockopt::SockType).map_err(|_| wrong())? != ty {
        return Err(wrong());
    }
    if listening && !getsockopt(fd, sockopt::AcceptConn).map_err(|_| wrong())? {
        return Err(wrong());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag};
    use std::os::fd::IntoRawFd;
    use std::os::unix::net::{UnixListener, UnixStream};

    #[test]
    fn an_inherited_listener_is_adopted_and_works() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let raw = UnixListener::bind(&path).unwrap().into_raw_fd();
        let fd = adopt(raw).unwrap();
        check_socket(&fd, SockType::Stream, true, "listening stream").unwrap();
        assert!(matches!(adopt(raw), Err(InheritError::Take { .. })), "each number is taken once");
        let listener = UnixListener::from(fd);
        let _c = UnixStream::connect(&path).unwrap();
        listener.accept().unwrap();
    }

    #[test]
    fn closed_and_standard_fds_are_refused() {
        assert!(matches!(adopt(1), Err(InheritError::Take { fd: 1, .. })));
        assert!(matches!(adopt(100_000), Err(InheritError::Take { fd: 100_000, .. })));
    }

    #[test]
    fn a_wrong_socket_kind_is_named() {
        let (a, _b) = socketpair(AddressFamily::Unix, SockType::Datagram, None, SockFlag::SOCK_CLOEXEC).unwrap();
        let e = check_socket(&a, SockType::SeqPacket, false, "seqpacket").unwrap_err();
        assert_eq!(e.to_string(), format!("fd {} is not a seqpacket socket", a.as_raw_fd()));
    }
}
