//! The front process as a whole: wires the supervisor link, the kernel (with its pump), the client
//! server and signal handling together, then runs the control loop until shutdown.
//!
//! Threads: `supervisor-link` (reads fd 3), `pump` (all event rings), `sockets` (fd 4: accepts and
//! reads every client connection) and a `conn` worker per request in flight (a pool), `http` (the HTTP door on fd 5, with its blocking pool and `sse-N` streams), `signals` (SIGTERM/SIGINT), and the caller's thread running the control loop,
//! which applies notices in order: `WorkerDied` marks the session lost; `Shutdown` or a signal stops
//! accepting, refuses new work, wakes every waiting call so it answers at once, waits (≤ 3 s) for
//! in-flight answers, flushes all output and returns exit status 0. The control socket closing (the
//! supervisor died) does the same but returns 1: without a supervisor no session can be opened or
//! closed, and the restarted supervisor will start a new front.
//!
//! ```no_run
//! # fn demo(control: std::os::fd::OwnedFd, listener: std::os::unix::net::UnixListener) {
//! let cfg = front::kernel::KernelConfig { state_dir: "/var/lib/heddle".into(), socket: "/run/heddle/heddle.sock".into(), cgroup_root: None };
//! let status = front::process::serve(cfg, control, listener).unwrap();
//! std::process::exit(status);
//! # }
//! ```

pub mod inherit;

use crate::kernel::{Kernel, KernelConfig};
use crate::sessions::supervisor::{ControlLink, Notice};
use crate::transport::http::{Auth, HttpDoor};
use crate::transport::socket::Server;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixListener;
use std::time::Duration;

/// How long shutdown waits for in-flight requests to be answered.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(3);

/// Errors starting the front.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    #[error("starting the supervisor link failed")]
    Link(#[source] std::io::Error),
    #[error("starting the kernel failed (state directory or pump thread)")]
    Kernel(#[source] std::io::Error),
    #[error("starting the client server failed")]
    Server(#[source] std::io::Error),
    #[error("installing the signal handlers failed")]
    Signals(#[source] std::io::Error),
}

/// Serve until shutdown; returns the process exit status.
pub fn serve(cfg: KernelConfig, control: OwnedFd, listener: UnixListener) -> Result<i32, ServeError> {
    serve_with(cfg, control, listener, None)
}

/// [`serve`], with the HTTP door on `http` (its listening socket and how it maps requests to uids).
pub fn serve_with(
    cfg: KernelConfig,
    control: OwnedFd,
    listener: UnixListener,
    http: Option<(std::net::TcpListener, Auth)>,
) -> Result<i32, ServeError> {
    let (tx, notices) = crossbeam_channel::unbounded();
    let mut signals = signal_hook::iterator::Signals::new([signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT])
        .map_err(ServeError::Signals)?;
    let signal_tx = tx.clone();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                let _ = signal_tx.send(Notice::Signal(sig));
            }
        })
        .map_err(ServeError::Signals)?;
    fit_connection_limits(raise_fd_limit());
    let link = ControlLink::start(control, tx.clone()).map_err(ServeError::Link)?;
    let kernel = Kernel::new(cfg, link).map_err(ServeError::Kernel)?;
    let mut early = take_over(&kernel, &notices);
    let server = Server::start(listener, kernel.clone()).map_err(ServeError::Server)?;
    let mut door = match http {
        Some((l, auth)) => Some(HttpDoor::start(l, kernel.clone(), auth).map_err(ServeError::Server)?),
        None => None,
    };
    let asked = tx.clone();
    kernel.shutdown.set(Box::new(move |grace| {
        let _ = asked.send(Notice::Asked(grace));
    }));
    let status = loop {
        let next = match early.pop_front() {
            Some(n) => Ok(n),
            None => notices.recv(),
        };
        match next {
            Ok(Notice::Adopt(a)) => adopt_logged(&kernel, *a),
            Ok(Notice::AdoptDone(_)) => {}
            Ok(Notice::Asked(grace)) => {
                // `shutdown {}`: mutations are refused already; queries answer through the grace.
                std::thread::sleep(grace);
                crate::kernel::shutdown::close_all(&kernel);
                break shm_proto::control::FRONT_EXIT_SHUTDOWN;
            }
            Ok(Notice::WorkerDied { session, code, signal, killed, verified_empty }) => {
                kernel.worker_died(&session, code, signal, &killed, verified_empty)
            }
            Ok(Notice::Shutdown) => break 0,
            Ok(Notice::Signal(sig)) => {
                tracing::info!("signal {sig}: shutting down");
                break 0;
            }
            Ok(Notice::SupervisorGone(why)) => {
                tracing::info!("{why}; exiting");
                break 1;
            }
            Err(_) => break 1,
        }
    };
    server.stop_accepting();
    if let Some(d) = door.as_mut() {
        d.stop();
    }
    kernel.begin_shutdown();
    if !server.wait_idle(DRAIN_TIMEOUT) {
        tracing::warn!("some requests were still being answered after {DRAIN_TIMEOUT:?}");
    }
    kernel.finish();
    for s in kernel.open_sessions() {
        kernel.record_session(&s);
    }
    kernel.db.sync();
    Ok(status)
}

/// File descriptors kept free of client connections: sessions' rings, logs and pipes need them.
pub const FD_RESERVE: u64 = 1024;

/// Raise the soft limit on open files to the hard one (a connection costs one); the soft limit now.
pub fn raise_fd_limit() -> u64 {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else { return 1024 };
    if soft >= hard {
        return soft;
    }
    match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
        Ok(()) => hard,
        Err(e) => {
            tracing::warn!("could not raise the open-file limit from {soft} to {hard}: {e}");
            soft
        }
    }
}

/// Lower the total connection cap to what `nofile` open files allow beside [`FD_RESERVE`].
fn fit_connection_limits(nofile: u64) {
    use crate::transport::socket::{limits, set_limits};
    let mut l = limits();
    let room = usize::try_from(nofile.saturating_sub(FD_RESERVE)).unwrap_or(usize::MAX).max(16);
    if l.total > room {
        tracing::warn!(
            "the open-file limit ({nofile}) leaves room for {room} client connections, fewer than \
             --max-connections ({}); serving at most {room}",
            l.total
        );
        l.total = room;
        set_limits(l);
    }
}

/// How long a starting front waits for the supervisor to hand over the live sessions.
pub const ADOPT_TIMEOUT: Duration = Duration::from_secs(10);

/// Take over every live session the supervisor hands this front (before clients are served); other
/// notices that arrive meanwhile are returned, in order, for the control loop.
fn take_over(kernel: &Kernel, notices: &crossbeam_channel::Receiver<Notice>) -> std::collections::VecDeque<Notice> {
    let mut early = std::collections::VecDeque::new();
    let deadline = std::time::Instant::now() + ADOPT_TIMEOUT;
    loop {
        match notices.recv_deadline(deadline) {
            Ok(Notice::Adopt(a)) => adopt_logged(kernel, *a),
            Ok(Notice::AdoptDone(n)) => {
                if n > 0 {
                    tracing::info!("took over {n} live sessions");
                }
                return early;
            }
            Ok(other) => {
                let stop = matches!(other, Notice::SupervisorGone(_) | Notice::Shutdown | Notice::Signal(_));
                early.push_back(other);
                if stop {
                    return early;
                }
            }
            Err(_) => {
                tracing::info!("the supervisor handed over no sessions within {ADOPT_TIMEOUT:?}; serving anyway");
                return early;
            }
        }
    }
}

fn adopt_logged(kernel: &Kernel, a: crate::kernel::recovery::Adopted) {
    let name = a.session.clone();
    if let Err(e) = crate::kernel::recovery::adopt(kernel, a) {
        tracing::warn!("cannot take over session '{name}': {e}; closing it");
        let _ = kernel.link.close_session(&name);
    }
}
