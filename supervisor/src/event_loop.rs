//! The supervisor's single-threaded main loop (mio): the front's control requests, a pidfd per worker
//! and one for the front, and SIGINT/SIGTERM; then the orderly shutdown.
//!
//! Invariants: each request gets exactly one answer, with `WorkerDied` notices in between as deaths are
//! seen; answers go out in request order, except a `CloseSession`'s, which waits for its teardown (see
//! below) while later requests are answered. Messages the socket cannot take yet wait in an outbox
//! (flushed when the socket turns writable), so a slow front never blocks the loop. A front that dies is
//! reaped and logged; its sessions stay alive (with their fds in the table) and the loop goes on.
//!
//! Requests are handled one at a time, and only a close waits on anything: it kills the session at once
//! (`Sessions::start_close`), then the loop goes on while the kernel kills, and finishes the teardown
//! when the worker's pidfd or the subtree's `cgroup.events` (`populated 0`, POLLPRI) says so, or at the
//! latest on a [`CLOSE_SWEEP`] tick that checks every close under way (the teardown bound, 5 s, holds).
//! The answer of a close begun under a front that has since gone is dropped, not sent to the next one
//! (whose request numbers start again).
//!
//! ```no_run
//! # fn parts() -> supervisor::event_loop::Parts<supervisor::cgroup::RealCgroups, supervisor::spawn::RealProcesses> { unimplemented!() }
//! let event_loop = supervisor::event_loop::EventLoop::new(parts()).unwrap();
//! event_loop.run().unwrap();
//! ```

use crate::cgroup::CgroupTreeOps;
use crate::session_table::{Outgoing, Sessions};
use crate::signals::SignalPipe;
use crate::spawn::{reap_within, ProcessOps, Spawned};
use crate::sys;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use shm_proto::control::{self, ControlError, FromSupervisor, ToSupervisor};
use shm_proto::error_chain;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const CONTROL: Token = Token(0);
const SIGNALS: Token = Token(1);
const FRONT: Token = Token(2);
const FIRST_WORKER: usize = 16;

/// How often every close under way is checked, whatever its fds said.
pub const CLOSE_SWEEP: Duration = Duration::from_millis(50);

/// The first delay before starting a new front after one died; it doubles per death up to
/// [`MAX_BACKOFF`] and goes back to this after a front lived [`BACKOFF_RESET`].
pub const FIRST_BACKOFF: Duration = Duration::from_millis(100);
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);
pub const BACKOFF_RESET: Duration = Duration::from_secs(60);

/// How long the front gets to exit after `Shutdown` before it is killed.
pub const FRONT_GRACE: Duration = Duration::from_secs(5);

/// Errors of the main loop.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoopError {
    #[error("creating the event poller failed")]
    Poll(#[source] io::Error),
    #[error("registering an fd with the event poller failed")]
    Register(#[source] io::Error),
    #[error("making the control socket non-blocking failed")]
    NonBlocking(#[source] nix::Error),
    #[error("waiting for events failed")]
    Wait(#[source] io::Error),
}

/// The client socket file, identified so that shutdown removes it only if it is still ours.
#[derive(Debug)]
pub struct SocketFile {
    pub path: PathBuf,
    /// `(dev, ino, ctime, ctime_nsec)`: inode numbers alone are reused after an unlink.
    pub identity: (u64, u64, i64, i64),
}

impl SocketFile {
    /// Remove the socket file if it is still the one we bound.
    pub fn remove(&self) {
        match std::fs::symlink_metadata(&self.path) {
            Ok(m) if file_identity(&m) == self.identity => {
                if let Err(e) = std::fs::remove_file(&self.path) {
                    tracing::warn!("could not remove {}: {e}", self.path.display());
                }
            }
            _ => {}
        }
    }
}

/// What identifies one file at one path.
pub fn file_identity(m: &std::fs::Metadata) -> (u64, u64, i64, i64) {
    (m.dev(), m.ino(), m.ctime(), m.ctime_nsec())
}

/// Everything the loop runs with, set up by `startup`.
#[derive(Debug)]
pub struct Parts<C: CgroupTreeOps, P: ProcessOps> {
    pub sessions: Sessions<C, P>,
    pub front: Spawned,
    /// Our end of the SOCK_SEQPACKET control pair.
    pub control: OwnedFd,
    /// The bound client socket, kept open for a front that a later version respawns.
    pub listener: UnixListener,
    pub signals: SignalPipe,
    pub socket: SocketFile,
    /// True if the supervisor created the cgroup root (and so removes it at exit, when empty).
    pub root_created: bool,
    /// Starts a new front when one dies (`None` in tests: a dead front stays dead).
    pub launcher: Option<crate::startup::FrontLauncher>,
}

/// The running supervisor.
#[derive(Debug)]
pub struct EventLoop<C: CgroupTreeOps, P: ProcessOps> {
    poll: Poll,
    sessions: Sessions<C, P>,
    front: Option<Spawned>,
    control: Option<OwnedFd>,
    listener: UnixListener,
    launcher: Option<crate::startup::FrontLauncher>,
    /// When to start a new front, after one died.
    respawn_at: Option<Instant>,
    /// The next respawn delay (0.1 s doubling to 5 s; back to 0.1 s after a front lived 60 s).
    backoff: Duration,
    front_since: Instant,
    signals: SignalPipe,
    socket: SocketFile,
    root_created: bool,
    outbox: VecDeque<Outgoing>,
    workers: HashMap<Token, String>,
    next_token: usize,
    /// The tokens of closes under way (the worker's pidfd, the subtree's `cgroup.events`) → session.
    closing: HashMap<Token, String>,
    close_watch: HashMap<String, CloseWatch>,
    last_sweep: Instant,
    /// Counts control sockets dropped: a close's answer goes only to the front that asked.
    generation: u64,
}

/// What the loop holds for one close under way.
#[derive(Debug)]
struct CloseWatch {
    /// `cgroup.events` of the session's subtree, registered for POLLPRI.
    _events: Option<std::fs::File>,
    tokens: Vec<Token>,
    generation: u64,
}

fn register(poll: &Poll, fd: BorrowedFd<'_>, token: Token, interest: Interest) -> Result<(), LoopError> {
    poll.registry().register(&mut SourceFd(&fd.as_raw_fd()), token, interest).map_err(LoopError::Register)
}

impl<C: CgroupTreeOps, P: ProcessOps> EventLoop<C, P> {
    /// Register the control socket (made non-blocking), the signal pipe and the front's pidfd.
    pub fn new(parts: Parts<C, P>) -> Result<Self, LoopError> {
        let poll = Poll::new().map_err(LoopError::Poll)?;
        set_nonblocking(parts.control.as_fd())?;
        register(&poll, parts.control.as_fd(), CONTROL, Interest::READABLE | Interest::WRITABLE)?;
        register(&poll, parts.signals.as_fd(), SIGNALS, Interest::READABLE)?;
        register(&poll, parts.front.pidfd.as_fd(), FRONT, Interest::READABLE)?;
        let mut lp = EventLoop {
            poll,
            sessions: parts.sessions,
            front: Some(parts.front),
            control: Some(parts.control),
            listener: parts.listener,
            launcher: parts.launcher,
            respawn_at: None,
            backoff: FIRST_BACKOFF,
            front_since: Instant::now(),
            signals: parts.signals,
            socket: parts.socket,
            root_created: parts.root_created,
            outbox: VecDeque::new(),
            workers: HashMap::new(),
            next_token: FIRST_WORKER,
            closing: HashMap::new(),
            close_watch: HashMap::new(),
            last_sweep: Instant::now(),
            generation: 0,
        };
        lp.hand_over();
        Ok(lp)
    }

    /// Queue every live session (with duplicates of its fds) for the front, then `AdoptDone`.
    fn hand_over(&mut self) {
        let mut n = 0;
        for id in self.sessions.ids() {
            let Some(s) = self.sessions.get(&id) else { continue };
            let fds = match s.fds.duplicate() {
                Ok(fds) => fds,
                Err(e) => {
                    tracing::warn!("cannot hand session {id:?} to the front (duplicating its fds failed: {e})");
                    continue;
                }
            };
            let msg = FromSupervisor::SessionAdopt {
                session: id.clone(),
                worker_pid: s.worker.pid,
                worker_uid: s.worker.uid,
                cgroup: s.cgroup.display().to_string(),
                tmp: s.tmp.display().to_string(),
            };
            self.outbox.push_back(Outgoing { msg, fds });
            n += 1;
        }
        self.outbox.push_back(Outgoing::plain(FromSupervisor::AdoptDone { sessions: n }));
    }

    /// Start a new front on the same listener, with a new control socket, and hand it the sessions.
    fn respawn(&mut self) {
        self.respawn_at = None;
        let Some(launcher) = self.launcher.as_ref() else { return };
        let started = launcher.spawn(&self.listener).map_err(|e| error_chain(&e)).and_then(|(front, control)| {
            set_nonblocking(control.as_fd()).map_err(|e| error_chain(&e))?;
            register(&self.poll, control.as_fd(), CONTROL, Interest::READABLE | Interest::WRITABLE)
                .map_err(|e| error_chain(&e))?;
            register(&self.poll, front.pidfd.as_fd(), FRONT, Interest::READABLE).map_err(|e| error_chain(&e))?;
            Ok((front, control))
        });
        match started {
            Ok((front, control)) => {
                tracing::info!(
                    "started a new front (pid {}); handing it {} sessions",
                    front.pid,
                    self.sessions.ids().len()
                );
                self.front = Some(front);
                self.control = Some(control);
                self.front_since = Instant::now();
                self.hand_over();
            }
            Err(e) => {
                tracing::warn!("starting a new front failed: {e}");
                self.schedule_respawn();
            }
        }
    }

    fn schedule_respawn(&mut self) {
        if self.launcher.is_none() {
            return;
        }
        if self.front_since.elapsed() >= BACKOFF_RESET {
            self.backoff = FIRST_BACKOFF;
        }
        tracing::info!("starting a new front in {:?}", self.backoff);
        self.respawn_at = Some(Instant::now() + self.backoff);
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
    }

    /// Serve until SIGINT or SIGTERM, then shut down in order and return.
    pub fn run(mut self) -> Result<(), LoopError> {
        let mut events = Events::with_capacity(64);
        loop {
            let respawn = self.respawn_at.map(|t| t.saturating_duration_since(Instant::now()));
            let sweep = (!self.close_watch.is_empty()).then_some(CLOSE_SWEEP);
            let timeout = match (respawn, sweep) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            if self.turn(&mut events, timeout)? {
                break;
            }
            if self.respawn_at.is_some_and(|t| Instant::now() >= t) {
                self.respawn();
                self.flush();
            }
        }
        self.shutdown();
        Ok(())
    }

    /// Wait for events (at most `timeout`) and handle them; true when a signal asks to stop.
    fn turn(&mut self, events: &mut Events, timeout: Option<Duration>) -> Result<bool, LoopError> {
        match self.poll.poll(events, timeout) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(false),
            Err(e) => return Err(LoopError::Wait(e)),
        }
        for ev in events.iter() {
            match ev.token() {
                SIGNALS => {
                    if self.signals.drain() {
                        return Ok(true);
                    }
                }
                CONTROL => {
                    if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                        self.read_control();
                    }
                }
                FRONT => {
                    if self.front_died() {
                        return Ok(true);
                    }
                }
                token => match self.closing.get(&token).cloned() {
                    Some(id) => self.poll_close(&id),
                    None => self.worker_event(token),
                },
            }
        }
        if !self.close_watch.is_empty() && self.last_sweep.elapsed() >= CLOSE_SWEEP {
            self.last_sweep = Instant::now();
            for id in self.sessions.closing_ids() {
                self.poll_close(&id);
            }
        }
        self.flush();
        Ok(false)
    }

    /// Take every pending request off the control socket and answer it.
    fn read_control(&mut self) {
        while let Some(fd) = self.control.as_ref() {
            match control::recv::<ToSupervisor>(fd.as_fd()) {
                Ok((msg, _fds)) => self.dispatch(msg),
                Err(ControlError::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(ControlError::Closed) => {
                    tracing::info!("the front closed its control socket");
                    self.drop_control();
                }
                Err(ControlError::Io(e)) => {
                    tracing::warn!("reading the control socket failed: {e}; closing it");
                    self.drop_control();
                }
                Err(e) => tracing::warn!("ignored a malformed control packet: {}", error_chain(&e)),
            }
        }
    }

    fn dispatch(&mut self, msg: ToSupervisor) {
        if let ToSupervisor::CloseSession { req, session } = msg {
            self.start_close(req, session);
            return;
        }
        let out = self.sessions.handle(msg);
        if let FromSupervisor::SessionOpened { session, .. } = &out.msg {
            self.watch_worker(session.clone());
        }
        self.outbox.push_back(out);
    }

    /// Kill the session now; answer when its teardown is done, without holding up other requests.
    fn start_close(&mut self, req: u64, id: String) {
        let worker = self.workers.iter().find(|(_, s)| **s == id).map(|(t, _)| *t);
        if let Some(t) = worker {
            self.workers.remove(&t);
        }
        if let Some(out) = self.sessions.start_close(req, &id) {
            self.outbox.push_back(out);
            return;
        }
        // The worker's pidfd stays registered under its token, which now means "this close may go on".
        let mut tokens: Vec<Token> = worker.into_iter().collect();
        let events = self.sessions.closing(&id).and_then(|s| std::fs::File::open(s.cgroup.join("cgroup.events")).ok());
        if let Some(f) = &events {
            let token = Token(self.next_token);
            self.next_token += 1;
            match register(&self.poll, f.as_fd(), token, Interest::PRIORITY) {
                Ok(()) => tokens.push(token),
                Err(e) => tracing::debug!("cannot watch the cgroup.events of session {id:?}: {}", error_chain(&e)),
            }
        }
        for t in &tokens {
            self.closing.insert(*t, id.clone());
        }
        self.close_watch.insert(id, CloseWatch { _events: events, tokens, generation: self.generation });
    }

    /// Finish the close of `id` if its teardown can finish now, and answer it.
    fn poll_close(&mut self, id: &str) {
        let Some(out) = self.sessions.poll_close(id) else { return };
        let watch = self.close_watch.remove(id);
        for t in watch.iter().flat_map(|w| &w.tokens) {
            self.closing.remove(t);
        }
        if watch.is_none_or(|w| w.generation == self.generation) {
            self.outbox.push_back(out);
        } else {
            tracing::info!("closed session {id:?}; the front that asked is gone, so no one is told");
        }
    }

    /// Poll the new session's worker pidfd for its death.
    fn watch_worker(&mut self, id: String) {
        let Some(s) = self.sessions.get(&id) else { return };
        let token = Token(self.next_token);
        self.next_token += 1;
        match register(&self.poll, s.worker.pidfd.as_fd(), token, Interest::READABLE) {
            Ok(()) => {
                self.workers.insert(token, id);
            }
            Err(e) => tracing::warn!(
                "cannot watch the worker of session {id:?}; its death will be noticed at close only: {}",
                error_chain(&e)
            ),
        }
    }

    fn worker_event(&mut self, token: Token) {
        // A token of a session closed meanwhile is gone from the map: its event is stale.
        let Some(id) = self.workers.remove(&token) else { return };
        if let Some(s) = self.sessions.get(&id) {
            let _ = self.poll.registry().deregister(&mut SourceFd(&s.worker.pidfd.as_raw_fd()));
        }
        if let Some(out) = self.sessions.worker_died(&id) {
            self.outbox.push_back(out);
        }
    }

    /// The front exited; true when it exited with [`shm_proto::control::FRONT_EXIT_SHUTDOWN`], which it does only after a root
    /// client's `shutdown {}`: then the supervisor shuts down too.
    fn front_died(&mut self) -> bool {
        let Some(front) = self.front.take() else { return false };
        let _ = self.poll.registry().deregister(&mut SourceFd(&front.pidfd.as_raw_fd()));
        let status = sys::wait_pidfd(front.pidfd.as_fd(), true);
        if let Ok(Some(sys::Exit::Code(shm_proto::control::FRONT_EXIT_SHUTDOWN))) = status {
            tracing::info!("the front (pid {}) exited after a client's shutdown request; shutting down", front.pid);
            self.drop_control();
            return true;
        }
        let how = match status {
            Ok(Some(exit)) => exit.to_string(),
            Ok(None) => "an unknown status (still running?)".to_owned(),
            Err(e) => format!("a status that could not be read ({e})"),
        };
        let n = self.sessions.ids().len();
        tracing::warn!("the front (pid {}) exited with {how}; {n} sessions stay alive", front.pid);
        self.drop_control();
        self.schedule_respawn();
        false
    }

    fn drop_control(&mut self) {
        self.generation += 1;
        if let Some(fd) = self.control.take() {
            let _ = self.poll.registry().deregister(&mut SourceFd(&fd.as_raw_fd()));
        }
        if !self.outbox.is_empty() {
            tracing::warn!("dropped {} messages for the front", self.outbox.len());
            self.outbox.clear();
        }
    }

    /// Send what the socket takes now; the rest waits for the next writable event.
    fn flush(&mut self) {
        while let (Some(out), Some(fd)) = (self.outbox.front_mut(), self.control.as_ref()) {
            // Never dropped for its size: a lost answer leaves a call waiting, a lost `WorkerDied` leaves the
            // front believing a dead worker alive.
            out.msg.fit();
            let fds: Vec<BorrowedFd<'_>> = out.fds.iter().map(AsFd::as_fd).collect();
            match control::send(fd.as_fd(), &out.msg, &fds) {
                Ok(()) => {}
                Err(ControlError::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(ControlError::Io(e)) => {
                    tracing::warn!("sending to the front failed: {e}; closing the control socket");
                    self.drop_control();
                    return;
                }
                Err(e) => tracing::warn!("dropped a message the front could not be sent: {}", error_chain(&e)),
            }
            self.outbox.pop_front();
        }
    }

    /// Flush, waiting up to `timeout` for the socket to take everything.
    fn flush_within(&mut self, timeout: Duration) {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let deadline = Instant::now() + timeout;
        loop {
            self.flush();
            let Some(fd) = self.control.as_ref() else { return };
            let left = deadline.saturating_duration_since(Instant::now());
            if self.outbox.is_empty() || left.is_zero() {
                return;
            }
            let ms = PollTimeout::try_from(left.as_millis().max(1)).unwrap_or(PollTimeout::MAX);
            let _ = poll(&mut [PollFd::new(fd.as_fd(), PollFlags::POLLOUT)], ms);
        }
    }

    /// SIGINT/SIGTERM: tell the front, give it [`FRONT_GRACE`] to exit (then SIGKILL it through its
    /// pidfd), close every session, remove the cgroup root if we created it, remove the socket.
    fn shutdown(&mut self) {
        tracing::info!("shutting down");
        self.outbox.push_back(Outgoing::plain(FromSupervisor::Shutdown));
        self.flush_within(Duration::from_secs(1));
        if let Some(front) = self.front.take() {
            stop_front(&front);
        }
        self.drop_control();
        self.close_watch.clear();
        self.closing.clear();
        for (id, t) in self.sessions.close_all() {
            tracing::info!(
                "closed session {id:?}: {} process(es) killed, verified empty: {}",
                t.killed.total(),
                t.verified_empty
            );
        }
        if let Some(v1) = self.sessions.v1_root() {
            v1.remove_created();
        }
        let _ = std::fs::remove_dir(crate::kept::kept_root(self.sessions.root()));
        // Every session's temp dir is gone; the (empty) root of them goes too.
        let _ = std::fs::remove_dir(crate::spawn::tmp_root(self.sessions.root()));
        if self.root_created {
            let root = self.sessions.root();
            if let Err(e) = std::fs::remove_dir(root) {
                tracing::warn!("could not remove the cgroup root {}: {e}", root.display());
            }
        }
        self.socket.remove();
    }
}

/// Wait for the front to exit; kill it through its pidfd if it does not within [`FRONT_GRACE`].
fn stop_front(front: &Spawned) {
    let pidfd = front.pidfd.as_fd();
    match reap_within(pidfd, FRONT_GRACE) {
        Ok(Some(exit)) => tracing::info!("the front exited with {exit}"),
        Ok(None) => {
            tracing::warn!("the front did not exit in time; killing it");
            if let Err(e) = sys::pidfd_send_signal(pidfd, libc::SIGKILL) {
                tracing::warn!("killing the front failed: {e}");
            }
            if let Err(e) = reap_within(pidfd, FRONT_GRACE) {
                tracing::warn!("reaping the front failed: {e}");
            }
        }
        Err(e) => tracing::warn!("waiting for the front failed: {e}"),
    }
}

fn set_nonblocking(fd: BorrowedFd<'_>) -> Result<(), LoopError> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let flags = fcntl(fd, FcntlArg::F_GETFL).map_err(LoopError::NonBlocking)?;
    let flags = OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK;
    fcntl(fd, FcntlArg::F_SETFL(flags)).map_err(LoopError::NonBlocking)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::{table, FakeCgroups, FakeProcesses, Recorder};
    use nix::sys::socket::{AddressFamily, SockFlag, SockType};
    use shm_proto::control::ProcInfo;
    use shm_proto::procs::ProcList;
    use shm_proto::sys::EventFd;

    struct Rig {
        lp: EventLoop<FakeCgroups, FakeProcesses>,
        calls: Recorder,
        front_end: OwnedFd,
        /// Rung to play the front's death (the fake front "pidfd" is an eventfd).
        front_bell: EventFd,
        events: Events,
        _tmp: tempfile::TempDir,
    }

    fn rig() -> Rig {
        let (sessions, calls) = table();
        let tmp = tempfile::tempdir().unwrap();
        let (ours, theirs) =
            nix::sys::socket::socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC)
                .unwrap();
        set_nonblocking(theirs.as_fd()).unwrap();
        let bell = EventFd::new().unwrap();
        let front = Spawned { pid: 1, pidfd: bell.as_fd().try_clone_to_owned().unwrap() };
        let path = tmp.path().join("s.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let socket = SocketFile { path, identity: (0, 0, 0, 0) };
        let signals = SignalPipe::unregistered().unwrap();
        let parts =
            Parts { sessions, front, control: ours, listener, signals, socket, root_created: false, launcher: None };
        let mut lp = EventLoop::new(parts).unwrap();
        lp.flush();
        let (first, _) = control::recv::<FromSupervisor>(theirs.as_fd()).unwrap();
        assert_eq!(first, FromSupervisor::AdoptDone { sessions: 0 }, "every front is first told what to take over");
        Rig { lp, calls, front_end: theirs, front_bell: bell, events: Events::with_capacity(16), _tmp: tmp }
    }

    impl Rig {
        fn send(&self, msg: ToSupervisor) {
            control::send(self.front_end.as_fd(), &msg, &[]).unwrap();
        }

        /// Turn the loop until the front's end has a message.
        fn recv(&mut self) -> (FromSupervisor, Vec<OwnedFd>) {
            for _ in 0..100 {
                match control::recv(self.front_end.as_fd()) {
                    Ok(m) => return m,
                    Err(ControlError::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => panic!("{e}"),
                }
                self.lp.turn(&mut self.events, Some(Duration::from_millis(10))).unwrap();
            }
            panic!("no message for the front");
        }
    }

    #[test]
    fn answers_come_in_request_order_with_the_session_fds() {
        let mut r = rig();
        r.send(ToSupervisor::Describe { req: 1 });
        r.send(crate::fake::open_msg(2, "a", 0));
        r.send(ToSupervisor::CloseSession { req: 3, session: "a".into() });
        let (first, fds) = r.recv();
        assert!(matches!(first, FromSupervisor::Info { req: 1, .. }) && fds.is_empty(), "{first:?}");
        let (second, fds) = r.recv();
        assert!(matches!(second, FromSupervisor::SessionOpened { req: 2, .. }), "{second:?}");
        assert_eq!(fds.len(), 5);
        shm_proto::region::Region::attach(fds[0].as_fd()).expect("the first fd is the session region");
        let (third, _) = r.recv();
        assert!(matches!(third, FromSupervisor::SessionClosed { req: 3, verified_empty: true, .. }), "{third:?}");
    }

    #[test]
    fn a_close_waiting_for_its_subtree_does_not_hold_up_later_requests() {
        let mut r = rig();
        r.send(crate::fake::open_msg(1, "slow", 0));
        r.recv();
        r.calls.slow_empty(3);
        r.send(ToSupervisor::CloseSession { req: 2, session: "slow".into() });
        r.send(ToSupervisor::Describe { req: 3 });
        r.send(crate::fake::open_msg(4, "slow", 0));
        let (first, _) = r.recv();
        assert!(matches!(first, FromSupervisor::Info { req: 3, .. }), "{first:?}");
        let (second, _) = r.recv();
        assert!(
            matches!(&second, FromSupervisor::SessionFailed { req: 4, error, .. } if error.contains("still being closed")),
            "{second:?}"
        );
        let (third, _) = r.recv();
        assert!(matches!(third, FromSupervisor::SessionClosed { req: 2, verified_empty: true, .. }), "{third:?}");
        assert!(r.lp.sessions.closing("slow").is_none() && r.lp.close_watch.is_empty() && r.lp.closing.is_empty());
    }

    #[test]
    fn a_close_begun_under_a_front_that_died_is_not_answered_to_the_next() {
        let mut r = rig();
        r.send(crate::fake::open_msg(1, "old", 0));
        r.recv();
        r.calls.slow_empty(2);
        r.send(ToSupervisor::CloseSession { req: 2, session: "old".into() });
        r.lp.turn(&mut r.events, Some(Duration::from_millis(10))).unwrap();
        assert!(r.lp.sessions.closing("old").is_some(), "the close waits for the subtree");
        r.lp.drop_control();
        for _ in 0..30 {
            r.lp.turn(&mut r.events, Some(Duration::from_millis(10))).unwrap();
        }
        assert!(r.lp.sessions.closing("old").is_none(), "the close finished all the same");
        assert!(r.lp.outbox.is_empty(), "{:?}", r.lp.outbox);
    }

    #[test]
    fn worker_death_is_noticed_through_its_pidfd_and_reported() {
        let mut r = rig();
        r.send(crate::fake::open_msg(1, "w", 0));
        r.recv();
        r.calls.set_procs(vec![ProcInfo { pid: 5, cmdline: "make".into(), cgroup: "slot-1".into() }]);
        r.calls.ring_last_pidfd();
        let (msg, _) = r.recv();
        let want = FromSupervisor::WorkerDied {
            session: "w".into(),
            code: None,
            signal: Some(libc::SIGKILL),
            killed: ProcList::new(vec![ProcInfo { pid: 5, cmdline: "make".into(), cgroup: "slot-1".into() }]),
            verified_empty: true,
        };
        assert_eq!(msg, want);
        assert!(r.lp.sessions.get("w").is_none());
    }

    #[test]
    fn front_death_closes_the_control_socket_and_keeps_sessions() {
        let mut r = rig();
        r.send(crate::fake::open_msg(1, "k", 0));
        r.recv();
        r.front_bell.notify().unwrap();
        for _ in 0..10 {
            r.lp.turn(&mut r.events, Some(Duration::from_millis(10))).unwrap();
        }
        assert!(r.lp.front.is_none() && r.lp.control.is_none());
        assert!(r.lp.sessions.get("k").is_some(), "sessions outlive the front");
        assert!(matches!(control::recv::<FromSupervisor>(r.front_end.as_fd()), Err(ControlError::Closed)));
    }
}
