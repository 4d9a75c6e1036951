//! SIGINT and SIGTERM as readable bytes: signal-hook's self-pipe registration writes one byte into a
//! socket pair per signal, and the main loop polls the other end like any fd.
//!
//! Invariant: the handler only `send`s a byte (async-signal-safe); everything else happens in the main
//! loop.
//!
//! ```no_run
//! let pipe = supervisor::signals::SignalPipe::register().unwrap();
//! if pipe.drain() {
//!     println!("asked to stop");
//! }
//! ```

use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;

/// The read end of the signal pipe.
#[derive(Debug)]
pub struct SignalPipe {
    read: UnixStream,
}

impl SignalPipe {
    /// Route SIGINT and SIGTERM into a new pipe (their default action, ending the process, is replaced).
    pub fn register() -> io::Result<SignalPipe> {
        let (read, write) = UnixStream::pair()?;
        read.set_nonblocking(true)?;
        write.set_nonblocking(true)?;
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            signal_hook::low_level::pipe::register(sig, write.try_clone()?)?;
        }
        Ok(SignalPipe { read })
    }

    /// A pipe no signal writes to (for tests of the loop).
    #[cfg(test)]
    pub(crate) fn unregistered() -> io::Result<SignalPipe> {
        let (read, _write) = UnixStream::pair()?;
        read.set_nonblocking(true)?;
        Ok(SignalPipe { read })
    }

    /// Read every pending byte; true if any signal arrived since the last call.
    pub fn drain(&self) -> bool {
        let mut buf = [0u8; 64];
        let mut got = false;
        loop {
            match (&self.read).read(&mut buf) {
                Ok(0) => return got,
                Ok(_) => got = true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return got,
            }
        }
    }
}

impl AsFd for SignalPipe {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.read.as_fd()
    }
}
