//! The client transport: accept connections on the listening Unix socket and serve them all from one
//! event loop (`sockets`, mio), one newline-delimited JSON-RPC request at a time per connection,
//! answered in order.
//!
//! An idle connection costs no thread and one fd (its socket, held by its [`Outbox`]): the loop reads
//! what arrives without blocking (`MSG_DONTWAIT`) and, once a connection has a complete line, hands
//! the connection to a worker of a small pool that grows while requests are in flight and shrinks
//! when idle ([`WORKER_IDLE`]). The worker answers every complete line, reads on while more is
//! there, then gives the connection back to the loop, waking it only when bytes already wait
//! ([`give_back`]: the connection's next request wakes the loop anyway). A long `wait` or `run` holds its worker only,
//! never the loop or another connection. Answers and notifications leave through the connection's
//! [`Outbox`] (which starts a writer thread only while a slow reader leaves lines queued).
//!
//! Connections are capped per uid and in total ([`Limits`], `heddle up --max-connections-per-uid`
//! and `--max-connections`): one over a cap is answered with a `too_many_connections` error (id
//! `null`) saying which limit and what to do, and closed. Accept errors (EMFILE when the fd limit is
//! reached after all) are logged and retried after a pause; they never end the server.
//!
//! A line longer than [`MAX_LINE`] is answered with `invalid_request` and skipped up to its newline;
//! a line that is not JSON is answered with `parse_error`; neither closes the connection. Blank lines
//! are ignored; a final line without a newline is still served. The client's uid comes from the
//! connection's peer credentials (`SO_PEERCRED`), read once at accept. A panic while answering is caught
//! and answered as `internal`. A client that disconnects cancels nothing: requests act on the kernel,
//! which outlives connections.
//!
//! ```no_run
//! # fn demo(listener: std::os::unix::net::UnixListener, kernel: std::sync::Arc<front::kernel::Kernel>) {
//! let server = front::transport::socket::Server::start(listener, kernel).unwrap();
//! server.stop_accepting();
//! # }
//! ```

use crate::kernel::subscribe;
use crate::kernel::{Client, Kernel};
use crate::rpc::outbox::{Outbox, Sent};
use crate::rpc::{self, ErrorKind, RpcError, MAX_LINE};
use crate::sessions::session::Session;
use crate::transport::lines::{Line, Lines};
use crate::transport::mcp::{self, McpConnection};
use crossbeam_channel::{Receiver, Sender};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Registry, Token, Waker};
use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{getsockopt, recv, send, sockopt::PeerCredentials, MsgFlags};
use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Connections open at once, from every uid, unless `heddle up --max-connections` says otherwise.
pub const DEFAULT_MAX_CONNECTIONS: usize = 8192;
/// Connections open at once from one uid, unless `heddle up --max-connections-per-uid` says otherwise.
pub const DEFAULT_MAX_CONNECTIONS_PER_UID: usize = 1024;
/// How long a pool worker with nothing to do waits for more before it ends.
pub const WORKER_IDLE: Duration = Duration::from_secs(10);
/// How long the loop waits before accepting again after an accept error (EMFILE, ENFILE, ENOMEM).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// Most bytes read from one connection at a time.
const CHUNK: usize = 64 * 1024;
/// At most one log line about refused connections per this long.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);
/// Most reads from one connection before the loop turns to the others.
/// (Two in unit tests, so a test's long line surely takes the path that reads it again later.)
const FILL_CHUNKS: usize = if cfg!(test) { 2 } else { 16 };

/// The connection caps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once, in total.
    pub total: usize,
    /// Connections open at once from one uid.
    pub per_uid: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { total: DEFAULT_MAX_CONNECTIONS, per_uid: DEFAULT_MAX_CONNECTIONS_PER_UID }
    }
}

static LIMITS: Mutex<Option<Limits>> = Mutex::new(None);

/// Set the caps of servers started after this (the front's flags).
pub fn set_limits(l: Limits) {
    *LIMITS.lock().unwrap_or_else(|e| e.into_inner()) = Some(l);
}

/// The caps a server starting now uses.
pub fn limits() -> Limits {
    LIMITS.lock().unwrap_or_else(|e| e.into_inner()).unwrap_or_default()
}

const LISTENER: Token = Token(usize::MAX);
const WAKER: Token = Token(usize::MAX - 1);

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").finish_non_exhaustive()
    }
}

/// The server's handle.
pub struct Server {
    shared: Arc<Shared>,
    /// Told once the listening socket is closed.
    closed: Mutex<Option<Receiver<()>>>,
}

/// What the loop and the workers share.
struct Shared {
    kernel: Arc<Kernel>,
    in_flight: AtomicUsize,
    registry: Registry,
    waker: Waker,
    /// Connections coming back to the loop (idle again, or ended).
    back: Sender<Back>,
    stop: AtomicBool,
    /// Connections with requests to answer, for idle workers.
    work: (Sender<Box<Conn>>, Receiver<Box<Conn>>),
    /// Workers waiting on `work` and not yet promised a connection.
    idle: AtomicUsize,
    /// Workers running (busy or idle), for `describe`-style reports and tests.
    workers: AtomicUsize,
}

enum Back {
    Idle(Box<Conn>),
    Ended { token: usize, uid: u32 },
}

impl Server {
    /// Serve `listener` on a new event-loop thread, with the caps [`limits`] gives.
    pub fn start(listener: UnixListener, kernel: Arc<Kernel>) -> std::io::Result<Server> {
        Server::start_with(listener, kernel, limits())
    }

    /// [`Server::start`] with these caps.
    pub fn start_with(listener: UnixListener, kernel: Arc<Kernel>, limits: Limits) -> std::io::Result<Server> {
        listener.set_nonblocking(true)?;
        let poll = Poll::new()?;
        let registry = poll.registry().try_clone()?;
        registry.register(&mut SourceFd(&listener.as_raw_fd()), LISTENER, Interest::READABLE)?;
        let waker = Waker::new(poll.registry(), WAKER)?;
        let (back, back_rx) = crossbeam_channel::unbounded();
        let shared = Arc::new(Shared {
            kernel,
            in_flight: AtomicUsize::new(0),
            registry,
            waker,
            back,
            stop: AtomicBool::new(false),
            work: crossbeam_channel::unbounded(),
            idle: AtomicUsize::new(0),
            workers: AtomicUsize::new(0),
        });
        let (closed_tx, closed) = crossbeam_channel::bounded(1);
        let mut lp = Loop {
            shared: shared.clone(),
            poll,
            listener: Some(listener),
            back: back_rx,
            closed: Some(closed_tx),
            limits,
            conns: HashMap::new(),
            per_uid: HashMap::new(),
            ready: VecDeque::new(),
            again: Vec::new(),
            next: 0,
            accept_after: None,
            refused: 0,
            refusal_logged: None,
        };
        std::thread::Builder::new().name("sockets".into()).spawn(move || lp.run())?;
        Ok(Server { shared, closed: Mutex::new(Some(closed)) })
    }

    /// Stop accepting (the listening socket is closed); open connections go on being served.
    pub fn stop_accepting(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let _ = self.shared.waker.wake();
        if let Some(rx) = self.closed.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = rx.recv_timeout(Duration::from_secs(5));
        }
    }

    /// Wait until no request is being answered, at most `timeout`; true if idle.
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        let until = Instant::now() + timeout;
        while self.shared.in_flight.load(Ordering::SeqCst) > 0 {
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    }

    /// Pool workers running now (answering a request or waiting for one).
    pub fn workers(&self) -> usize {
        self.shared.workers.load(Ordering::SeqCst)
    }
}

/// The event loop's own state.
struct Loop {
    shared: Arc<Shared>,
    poll: Poll,
    listener: Option<UnixListener>,
    back: Receiver<Back>,
    closed: Option<Sender<()>>,
    limits: Limits,
    /// Every open connection by token: `Some` while the loop holds it, `None` while a worker does.
    conns: HashMap<usize, Option<Box<Conn>>>,
    per_uid: HashMap<u32, usize>,
    /// Connections to read from now.
    ready: VecDeque<usize>,
    /// Connections left with more to read, to read again after the next poll.
    again: Vec<usize>,
    next: u64,
    /// Accepting paused after an accept error, until then.
    accept_after: Option<Instant>,
    /// Connections refused since the last log line saying so, and when that was.
    refused: u64,
    refusal_logged: Option<Instant>,
}

impl Loop {
    fn run(&mut self) {
        let mut events = Events::with_capacity(1024);
        loop {
            let timeout = match (self.again.is_empty(), self.accept_after) {
                (false, _) => Some(Duration::ZERO),
                (true, after) => after.map(|t| t.saturating_duration_since(Instant::now())),
            };
            match self.poll.poll(&mut events, timeout) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::warn!("polling the client sockets failed: {e}");
                    std::thread::sleep(ACCEPT_BACKOFF);
                    continue;
                }
            }
            let mut accept = false;
            self.ready.extend(self.again.drain(..));
            for ev in events.iter() {
                match ev.token() {
                    LISTENER => accept = true,
                    WAKER => {}
                    Token(t) => {
                        if matches!(self.conns.get(&t), Some(Some(_))) {
                            self.ready.push_back(t);
                        }
                    }
                }
            }
            if self.shared.stop.load(Ordering::SeqCst) {
                if let Some(l) = self.listener.take() {
                    let _ = self.shared.registry.deregister(&mut SourceFd(&l.as_raw_fd()));
                    drop(l);
                    if let Some(tx) = self.closed.take() {
                        let _ = tx.send(());
                    }
                }
            }
            if self.accept_after.is_some_and(|t| Instant::now() >= t) {
                self.accept_after = None;
                accept = true;
            }
            if accept && self.accept_after.is_none() {
                self.accept();
            }
            self.settle();
        }
    }

    /// Take back what the workers returned and read every ready connection, until neither is left.
    fn settle(&mut self) {
        loop {
            while let Ok(b) = self.back.try_recv() {
                match b {
                    Back::Idle(c) => {
                        let t = c.token;
                        self.conns.insert(t, Some(c));
                        // What arrived while a worker held it raised no event the loop kept.
                        self.ready.push_back(t);
                    }
                    Back::Ended { token, uid } => {
                        self.conns.remove(&token);
                        if let Some(n) = self.per_uid.get_mut(&uid) {
                            *n -= 1;
                            if *n == 0 {
                                self.per_uid.remove(&uid);
                            }
                        }
                    }
                }
            }
            let Some(t) = self.ready.pop_front() else { return };
            let Some(slot) = self.conns.get_mut(&t) else { continue };
            let Some(mut c) = slot.take() else { continue };
            let more = c.fill();
            if c.lines.ready.is_empty() && !c.eof {
                *slot = Some(c);
                if more {
                    // Edge-triggered: no new event comes for what is already there; read it again
                    // after the next poll.
                    self.again.push(t);
                }
            } else if c.lines.ready.is_empty() && c.mcp.is_none() {
                // Nothing to answer and nothing slow to close: end it here.
                end(&self.shared, &c);
            } else {
                dispatch(&self.shared, c);
            }
        }
    }

    fn accept(&mut self) {
        loop {
            let Some(listener) = self.listener.as_ref() else { return };
            match listener.accept() {
                Ok((stream, _)) => self.admit(stream),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // EMFILE and friends: the connection stays in the backlog; try again shortly.
                    tracing::warn!(
                        "accepting a client connection failed: {e}; {} connections are open; retrying in {ACCEPT_BACKOFF:?}",
                        self.conns.len()
                    );
                    self.accept_after = Some(Instant::now() + ACCEPT_BACKOFF);
                    return;
                }
            }
        }
    }

    fn admit(&mut self, stream: UnixStream) {
        let cred = match getsockopt(&stream, PeerCredentials) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("dropping a connection without peer credentials: {e}");
                return;
            }
        };
        let uid = cred.uid();
        let mine = self.per_uid.get(&uid).copied().unwrap_or(0);
        if mine >= self.limits.per_uid {
            let why = format!(
                "uid {uid} already has {mine} connections open to this server, its limit per user \
                 (`heddle up --max-connections-per-uid`); this connection was closed. Close connections \
                 you no longer use and connect again, or ask the operator to raise the limit"
            );
            return self.refuse(&stream, why);
        }
        if self.conns.len() >= self.limits.total {
            let why = format!(
                "the server already has {} connections open, its limit for all users \
                 (`heddle up --max-connections`); this connection was closed. Connect again later, or ask \
                 the operator to raise the limit",
                self.conns.len()
            );
            return self.refuse(&stream, why);
        }
        let client = match catch_unwind(AssertUnwindSafe(|| self.shared.kernel.client_of(&stream, cred))) {
            Ok(c) => c,
            Err(_) => {
                tracing::warn!("placing a connecting client failed unexpectedly; dropping the connection");
                return;
            }
        };
        self.next += 1;
        let token = usize::try_from(self.next).unwrap_or(usize::MAX - 2);
        let fd = stream.as_raw_fd();
        if let Err(e) = self.shared.registry.register(&mut SourceFd(&fd), Token(token), Interest::READABLE) {
            tracing::warn!("could not watch a client connection: {e}; dropping it");
            return;
        }
        let conn = Conn {
            token,
            uid,
            client,
            outbox: Outbox::owning(self.next, stream),
            lines: Lines::new(MAX_LINE),
            eof: false,
            mcp: None,
            stdio: None,
            ending: None,
        };
        self.conns.insert(token, Some(Box::new(conn)));
        *self.per_uid.entry(uid).or_insert(0) += 1;
        self.ready.push_back(token);
    }

    /// Answer a connection over a cap with `why` (id `null`), then close it. The log says so at most
    /// once per [`REFUSAL_LOG_EVERY`], with a count: a flood must not flood the log too.
    fn refuse(&mut self, stream: &UnixStream, why: String) {
        self.refused += 1;
        if self.refusal_logged.is_none_or(|t| t.elapsed() >= REFUSAL_LOG_EVERY) {
            tracing::warn!("refused {} connection(s) since the last report; the last: {why}", self.refused);
            self.refused = 0;
            self.refusal_logged = Some(Instant::now());
        }
        refuse(stream, why);
    }
}

/// Answer a connection over a cap with `why` (id `null`), then close it.
fn refuse(stream: &UnixStream, why: String) {
    let line = rpc::encode_error(None, &RpcError::new(ErrorKind::TooManyConnections, why));
    // A new socket's buffer takes one short line; a client that cannot take it loses only the reason.
    let _ = send(stream.as_raw_fd(), &line, MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL);
    let _ = nix::sys::socket::shutdown(stream.as_raw_fd(), nix::sys::socket::Shutdown::Write);
}

/// One client connection, held by the loop while idle and by a worker while it has lines to answer.
struct Conn {
    token: usize,
    uid: u32,
    client: Client,
    /// The write side, and the only holder of the socket.
    outbox: Outbox,
    lines: Lines,
    /// The peer closed (or the socket failed): answer what is complete, then end.
    eof: bool,
    /// The connection's dialect: plain JSON-RPC until an MCP-shaped first request makes it MCP.
    mcp: Option<McpConnection>,
    /// An MCP agent's stdio, handed over by `heddle mcp` ([`hand_over`]): requests are read from the
    /// agent's stdin and answers go to its stdout (the outbox); the bridge's socket is only watched.
    stdio: Option<Stdio>,
    /// Why the server ends a handed-over connection itself, told to the bridge at the end (a bridge
    /// that hears nothing takes the end for the server going away, and attaches again).
    ending: Option<&'static str>,
}

/// The descriptors of a connection whose bridge handed the agent's stdio over.
struct Stdio {
    /// The agent's requests: a pipe (non-blocking) or a socket.
    input: OwnedFd,
    input_is_pipe: bool,
    /// The bridge's socket: when the bridge ends, so does the connection.
    bridge: OwnedFd,
    /// The bridge's page of the requests read and not yet answered ([`Pending`]), shared with the
    /// outbox's writer thread, which takes an answer off once it is written.
    pending: Option<Arc<std::sync::Mutex<Pending>>>,
}

/// The ids of the requests a handed-over connection has read and not yet answered, kept where the
/// bridge can read them if this front dies: a memfd the bridge sent with the stdio. After each change
/// the page holds `[u32 LE length][JSON]`: the array of the ids (notifications have none; a line too
/// long to read has none either), or `{"ids": [...], "mid_line": true}` while a line on the agent's
/// stdout may be cut (part of it written, the rest queued). An answer queued for a slow reader stays on
/// the page until the outbox's writer wrote it whole ([`crate::rpc::outbox::Watch`]). A bridge whose
/// server went away ends the cut line, answers each id with an error before it hands the stdio to the
/// next front, so no request of the agent's waits for an answer forever.
struct Pending {
    page: std::fs::File,
    /// One entry per line read and not yet answered, in order: its id, if it had one. The first
    /// `queued` are answered and their answers queued, not yet written.
    ids: VecDeque<Option<Box<serde_json::value::RawValue>>>,
    queued: usize,
    /// A line on the agent's stdout may be cut.
    mid_line: bool,
}

impl Pending {
    /// The page must be a writable memfd (a regular file the bridge made); it is emptied.
    fn new(page: OwnedFd) -> Result<Pending, String> {
        // A memfd (tmpfs) only: a file on a slow or hung file system would stall the loop's writes.
        let on_tmpfs =
            nix::sys::statfs::fstatfs(&page).is_ok_and(|f| f.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC);
        let file = std::fs::File::from(page);
        let regular = file.metadata().is_ok_and(|m| m.file_type().is_file());
        if !(on_tmpfs && regular) {
            return Err("the pending page must be a memfd".to_owned());
        }
        let p = Pending { page: file, ids: VecDeque::new(), queued: 0, mid_line: false };
        p.write();
        Ok(p)
    }

    /// Lines `lines[from..]` were read: note their ids.
    fn read(&mut self, lines: &VecDeque<Line>, from: usize) {
        #[derive(serde::Deserialize)]
        struct IdOnly {
            id: Option<Box<serde_json::value::RawValue>>,
        }
        if from >= lines.len() {
            return;
        }
        for l in lines.iter().skip(from) {
            let id = match l {
                Line::Data(d) => serde_json::from_slice::<IdOnly>(d).ok().and_then(|x| x.id),
                Line::TooLong => None,
            };
            self.ids.push_back(id);
        }
        self.write();
    }

    /// The oldest line read and not yet answered was answered whole (or needed no answer, or was
    /// dropped).
    fn answered(&mut self) {
        if self.queued < self.ids.len() && self.ids.remove(self.queued).is_some_and(|id| id.is_some()) {
            self.write();
        }
    }

    /// What the outbox's writer did with the agent's stdout.
    fn written(&mut self, w: crate::rpc::outbox::Written) {
        use crate::rpc::outbox::Written;
        match w {
            Written::Queued => self.queued = (self.queued + 1).min(self.ids.len()),
            Written::Cutting if !self.mid_line => {
                self.mid_line = true;
                self.write();
            }
            Written::Cutting => {}
            Written::Whole { answers } => {
                let n = answers.min(self.queued);
                let dropped: Vec<_> = self.ids.drain(..n).collect();
                self.queued -= n;
                if std::mem::take(&mut self.mid_line) || dropped.iter().any(Option::is_some) {
                    self.write();
                }
            }
        }
    }

    /// Nothing read is waiting any more (answers already queued stay until they are written).
    fn clear(&mut self) {
        if self.ids.len() > self.queued {
            self.ids.truncate(self.queued);
            self.write();
        }
    }

    fn write(&self) {
        use std::os::unix::fs::FileExt;
        let ids: Vec<&serde_json::value::RawValue> = self.ids.iter().flatten().map(|b| &**b).collect();
        let json = match self.mid_line {
            false => serde_json::to_vec(&ids),
            true => serde_json::to_vec(&serde_json::json!({"ids": ids, "mid_line": true})),
        };
        let json = json.unwrap_or_else(|_| b"[]".to_vec());
        let mut buf = Vec::with_capacity(4 + json.len());
        buf.extend_from_slice(&u32::try_from(json.len()).unwrap_or(u32::MAX).to_le_bytes());
        buf.extend_from_slice(&json);
        // Best effort: a page that cannot be written only loses the errors a crash would have sent.
        let _ = self.page.write_all_at(&buf, 0);
    }
}

impl Conn {
    /// The descriptors the loop watches for this connection.
    fn watched(&self) -> Vec<BorrowedFd<'_>> {
        match &self.stdio {
            Some(s) => vec![s.input.as_fd(), s.bridge.as_fd()],
            None => self.outbox.socket().into_iter().collect(),
        }
    }

    /// Read what the socket holds, without waiting, until a complete line is there or it would block;
    /// true if it stopped after [`FILL_CHUNKS`] reads with more perhaps waiting (one client sending
    /// an endless line must not hold the loop: read it again after the others).
    fn fill(&mut self) -> bool {
        let before = self.lines.ready.len();
        let more = self.fill_lines();
        if let Some(mut p) = self.page() {
            p.read(&self.lines.ready, before);
        }
        more
    }

    fn page(&self) -> Option<std::sync::MutexGuard<'_, Pending>> {
        let p = self.stdio.as_ref()?.pending.as_ref()?;
        Some(p.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Send the answer to the oldest line not yet answered; false when the connection is gone. Off the
    /// pending page once written whole (by the outbox's writer, for one it queued). An answer the
    /// connection was gone for never reached the client: the jobs it reported (their ends, its
    /// announcements) are announced again by the session's next call ([`Kernel::unreport`]).
    fn answer(&mut self, kernel: &Kernel, reply: Option<Vec<u8>>) -> bool {
        let sent = match reply {
            Some(r) => match self.outbox.send_answer_or_back(r) {
                Ok(sent) => sent,
                Err(lost) => {
                    self.unreport(kernel, &lost);
                    Sent::Gone
                }
            },
            None => Sent::Written,
        };
        if sent != Sent::Queued {
            if let Some(mut p) = self.page() {
                p.answered();
            }
        }
        sent != Sent::Gone
    }

    /// The jobs an answer that was not delivered had reported: announced again.
    fn unreport(&mut self, kernel: &Kernel, lost: &[u8]) {
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(lost) else { return };
        let reported = match self.mcp.as_mut() {
            Some(m) => m.take_reported(&v["id"].to_string()),
            None => {
                let r = &v["result"];
                r["session"].as_str().map(|s| (s.to_owned(), crate::transport::mcp_tools::reported(r)))
            }
        };
        if let Some((session, jobs)) = reported {
            kernel.unreport(&self.client, &session, &jobs);
        }
    }

    /// Lines read and not answered are dropped (the connection ends): off the pending page.
    fn drop_lines(&mut self) {
        self.lines.ready.clear();
        if let Some(mut p) = self.page() {
            p.clear();
        }
    }

    fn fill_lines(&mut self) -> bool {
        if self.stdio.as_ref().is_some_and(|s| bridge_gone(s.bridge.as_fd())) {
            self.end_of_input();
            return false;
        }
        if self.stdio.is_none() && self.outbox.socket().is_none() {
            self.eof = true;
            return false;
        }
        let mut buf = vec![0u8; CHUNK];
        let mut reads = 0;
        while self.lines.ready.is_empty() && !self.eof {
            if reads == FILL_CHUNKS {
                return true;
            }
            reads += 1;
            match self.read_some(&mut buf) {
                Ok(0) => self.end_of_input(),
                Ok(n) => self.lines.feed(&buf[..n]),
                Err(Errno::EINTR) => {}
                Err(Errno::EAGAIN) => return false,
                Err(_) => self.end_of_input(),
            }
        }
        false
    }

    /// One read that never waits, from the agent's stdin when it was handed over, else the socket.
    fn read_some(&self, buf: &mut [u8]) -> nix::Result<usize> {
        match (&self.stdio, self.outbox.socket()) {
            (Some(s), _) if s.input_is_pipe => nix::unistd::read(s.input.as_fd(), buf),
            (Some(s), _) => recv(s.input.as_raw_fd(), buf, MsgFlags::MSG_DONTWAIT),
            (None, Some(sock)) => recv(sock.as_raw_fd(), buf, MsgFlags::MSG_DONTWAIT),
            (None, None) => Ok(0),
        }
    }

    fn end_of_input(&mut self) {
        self.eof = true;
        self.lines.finish();
    }
}

/// Hand `c` to an idle worker, or to a new one.
fn dispatch(shared: &Arc<Shared>, c: Box<Conn>) {
    let claimed = shared.idle.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok();
    if claimed {
        let _ = shared.work.0.send(c);
        return;
    }
    let (s, (tx, rx)) = (shared.clone(), crossbeam_channel::bounded(1));
    let _ = tx.send(c);
    let theirs = rx.clone();
    shared.workers.fetch_add(1, Ordering::SeqCst);
    let spawned = std::thread::Builder::new().name("conn".into()).spawn(move || {
        if let Ok(c) = theirs.recv() {
            worker(&s, c);
        }
        s.workers.fetch_sub(1, Ordering::SeqCst);
    });
    if let Err(e) = spawned {
        shared.workers.fetch_sub(1, Ordering::SeqCst);
        tracing::warn!("could not start a connection worker: {e}; closing a connection");
        // The connection is still in the channel: end it, so its place under the caps is given back.
        if let Ok(c) = rx.try_recv() {
            end(shared, &c);
        }
    }
}

/// A pool worker: serve `first`, then whatever the loop hands over, until idle for [`WORKER_IDLE`].
fn worker(shared: &Arc<Shared>, first: Box<Conn>) {
    let mut next = Some(first);
    loop {
        if let Some(c) = next.take() {
            serve(shared, c);
            shared.idle.fetch_add(1, Ordering::SeqCst);
        }
        match shared.work.1.recv_timeout(WORKER_IDLE) {
            Ok(c) => next = Some(c),
            Err(_) => {
                // Leave only if no connection was promised to an idle worker meanwhile.
                if shared.idle.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
                    return;
                }
            }
        }
    }
}

/// Answer every complete line of `c`, reading on while more is there; then give it back to the loop,
/// or end it.
fn serve(shared: &Arc<Shared>, mut c: Box<Conn>) {
    let kernel = &*shared.kernel;
    loop {
        while let Some(line) = c.lines.ready.pop_front() {
            let reply = match line {
                Line::TooLong => Some(rpc::encode_error(None, &too_long())),
                Line::Data(line) => {
                    shared.in_flight.fetch_add(1, Ordering::SeqCst);
                    let (reply, named) = answer_in_dialect(kernel, &c.client, &line, &c.outbox, &mut c.mcp);
                    // The reply goes out first: no client waits on the database rows. Off the pending
                    // page once whole on the agent's stdout: a front that dies after this leaves no id
                    // the bridge would answer a second time, nor one it would not answer.
                    let sent = c.answer(kernel, reply);
                    if let Some(s) = named {
                        after_answer(kernel, &s);
                    }
                    shared.in_flight.fetch_sub(1, Ordering::SeqCst);
                    if !sent {
                        c.eof = true;
                        c.drop_lines();
                        c.ending = Some(STDOUT_FAILED);
                    } else if c.mcp.as_mut().is_some_and(McpConnection::take_hand_over) {
                        if let Err(why) = hand_over(shared, &mut c) {
                            tracing::warn!("an MCP bridge's stdio hand-over failed: {why}; closing its connection");
                            let e = RpcError::new(ErrorKind::InvalidRequest, why);
                            let _ = c.outbox.send(rpc::encode_error(None, &e));
                            c.eof = true;
                            c.drop_lines();
                        }
                    }
                    None
                }
            };
            if let Some(reply) = reply {
                let sent = c.answer(kernel, Some(reply));
                if !sent {
                    c.eof = true;
                    c.drop_lines();
                    c.ending = Some(STDOUT_FAILED);
                }
            }
        }
        if c.eof {
            return end(shared, &c);
        }
        let _ = c.fill();
        if c.lines.ready.is_empty() && !c.eof {
            give_back(shared, c);
            return;
        }
    }
}

/// Give an idle connection back to the loop without waking it, unless something is waiting to be read
/// on it already. The loop takes back what the workers returned whenever it wakes, before it reads, so
/// the connection's next request (an edge-triggered event, raised after the send below) finds it there;
/// only bytes (or a hang-up) that arrived before the send raised their event while the worker still
/// held the connection, and the check after the send sees those and wakes the loop. This saves a
/// wake-up of the loop per call (`docs/performance.md`). The check polls duplicates of the
/// connection's descriptors, taken before it left this thread (the loop may end it meanwhile); when
/// they cannot be taken, the loop is woken as before.
fn give_back(shared: &Arc<Shared>, c: Box<Conn>) {
    #[cfg(test)]
    std::thread::sleep(Duration::from_millis(tests::GIVE_BACK_DELAY_MS.load(Ordering::SeqCst)));
    let dups: Option<Vec<OwnedFd>> = c.watched().iter().map(|fd| fd.try_clone_to_owned().ok()).collect();
    let _ = shared.back.send(Back::Idle(c));
    if dups.is_none_or(|fds| fds.is_empty() || readable_now(&fds)) {
        let _ = shared.waker.wake();
    }
}

/// True when any of `fds` has something to read, a hang-up or an error now (or cannot be polled).
fn readable_now(fds: &[OwnedFd]) -> bool {
    let mut polled: Vec<PollFd<'_>> = fds.iter().map(|fd| PollFd::new(fd.as_fd(), PollFlags::POLLIN)).collect();
    !matches!(poll(&mut polled, PollTimeout::ZERO), Ok(0))
}

/// Why a handed-over connection ends when an answer cannot be written.
const STDOUT_FAILED: &str =
    "writing to the agent's stdout failed (the agent's host stopped reading); the connection is closed";

/// The buffer asked for an agent's stdout pipe after a hand-over (a Unix socket's default send buffer
/// is about this size).
const STDOUT_PIPE_SIZE: i32 = 256 * 1024;

/// How long a bridge has to send its stdio after the attach that promised to take it was answered.
const HAND_OVER_WAIT: Duration = Duration::from_secs(10);

/// Take an MCP bridge's stdio (`heddle mcp` sends the agent's stdin and stdout with `SCM_RIGHTS` once
/// its `mcp.attach {hand_over_stdio: true}` is answered): from now on the loop reads the agent's
/// requests from its stdin and the outbox writes the answers to its stdout, with no process between.
/// The bridge's socket stays open and watched, so the connection ends when the bridge does (or when
/// the agent closes stdin). Only a socket or a pipe is taken; a pipe is read and written non-blocking.
/// The caller still holds the connection (the loop has no event for it meanwhile).
fn hand_over(shared: &Arc<Shared>, c: &mut Conn) -> Result<(), String> {
    let sock =
        c.outbox.socket().ok_or("the connection has no socket")?.try_clone_to_owned().map_err(|e| e.to_string())?;
    let with_page = c.mcp.as_ref().is_some_and(McpConnection::offers_pending_page);
    let mut fds = receive_stdio(sock.as_fd(), with_page)?.into_iter();
    let (Some(input), Some(output)) = (fds.next(), fds.next()) else { unreachable!("counted above") };
    let pending = match fds.next() {
        Some(page) => Some(Arc::new(std::sync::Mutex::new(Pending::new(page)?))),
        None => None,
    };
    let input_is_pipe = stdio_kind(input.as_fd())?;
    let output_is_pipe = stdio_kind(output.as_fd())?;
    for (fd, pipe) in [(&input, input_is_pipe), (&output, output_is_pipe)] {
        if pipe {
            set_nonblocking(fd.as_fd()).map_err(|e| format!("the agent's pipe cannot be made non-blocking: {e}"))?;
        }
    }
    if output_is_pipe {
        // Room for a large answer in one write, as a socket's buffer has (a pipe's 64 KiB would send
        // the rest through a writer thread). Best effort: the per-user pipe limits may refuse it.
        let _ = nix::fcntl::fcntl(output.as_fd(), nix::fcntl::FcntlArg::F_SETPIPE_SZ(STDOUT_PIPE_SIZE));
    }
    let outbox = Outbox::owning_fd(c.outbox.conn, output).map_err(|e| e.to_string())?;
    if let Some(p) = &pending {
        let p = p.clone();
        outbox.watch(Arc::new(move |w| p.lock().unwrap_or_else(|e| e.into_inner()).written(w)));
    }
    let old = std::mem::replace(&mut c.outbox, outbox);
    // The registration is the original descriptor's (epoll keeps it while any duplicate is open).
    if let Some(fd) = old.socket() {
        let _ = shared.registry.deregister(&mut SourceFd(&fd.as_raw_fd()));
    }
    drop(old);
    let stdio = Stdio { input, input_is_pipe, bridge: sock, pending };
    for fd in [stdio.input.as_raw_fd(), stdio.bridge.as_raw_fd()] {
        shared
            .registry
            .register(&mut SourceFd(&fd), Token(c.token), Interest::READABLE)
            .map_err(|e| format!("watching the agent's stdin failed: {e}"))?;
    }
    c.stdio = Some(stdio);
    Ok(())
}

/// The descriptors a bridge sends (its stdin, its stdout, and — when its attach offered one — its
/// pending page), waiting at most [`HAND_OVER_WAIT`].
fn receive_stdio(sock: BorrowedFd<'_>, with_page: bool) -> Result<Vec<OwnedFd>, String> {
    let mut fds = [PollFd::new(sock, PollFlags::POLLIN)];
    let wait = PollTimeout::try_from(HAND_OVER_WAIT).unwrap_or(PollTimeout::MAX);
    match poll(&mut fds, wait) {
        Ok(0) => return Err(format!("the bridge sent no stdio within {HAND_OVER_WAIT:?} of the attach")),
        Ok(_) => {}
        Err(e) => return Err(format!("waiting for the bridge's stdio failed: {e}")),
    }
    let mut byte = [0u8; 1];
    let (n, got, truncated) = shm_proto::sys::recv_with_fds(sock, &mut byte)
        .map_err(|e| format!("reading the bridge's stdio failed: {e}"))?;
    let want = if with_page { 3 } else { 2 };
    match got.len() == want && n == 1 && !truncated {
        true => Ok(got),
        false if with_page => Err(
            "the bridge must send exactly three descriptors, its stdin, its stdout and its pending page, with one byte"
                .to_owned(),
        ),
        false => {
            Err("the bridge must send exactly two descriptors, its stdin and its stdout, with one byte".to_owned())
        }
    }
}

/// True for a pipe, false for a socket; anything else is refused (a terminal or a file is served by
/// the bridge copying, as before).
fn stdio_kind(fd: BorrowedFd<'_>) -> Result<bool, String> {
    use nix::sys::stat::{fstat, SFlag};
    let st = fstat(fd).map_err(|e| e.to_string())?;
    match SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT {
        SFlag::S_IFIFO => Ok(true),
        SFlag::S_IFSOCK => Ok(false),
        _ => Err("only a pipe or a socket can be handed over as the agent's stdio".to_owned()),
    }
}

fn set_nonblocking(fd: BorrowedFd<'_>) -> nix::Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let fl = OFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFL)?);
    if !fl.contains(OFlag::O_NONBLOCK) {
        fcntl(fd, FcntlArg::F_SETFL(fl | OFlag::O_NONBLOCK))?;
    }
    Ok(())
}

/// Whether a bridge's socket is closed (or failed); anything it sends after the hand-over is dropped.
fn bridge_gone(sock: BorrowedFd<'_>) -> bool {
    let mut buf = [0u8; 256];
    loop {
        match recv(sock.as_raw_fd(), &mut buf, MsgFlags::MSG_DONTWAIT) {
            Ok(0) => return true,
            Ok(_) | Err(Errno::EINTR) => {}
            Err(Errno::EAGAIN) => return false,
            Err(_) => return true,
        }
    }
}

/// The connection is gone: its subscriptions go with it (and its MCP session, when it asked to be
/// closed with the connection); the socket closes, and the connection's place under the caps is
/// given back, once the outbox's last line is written (or its peer is gone).
fn end(shared: &Arc<Shared>, c: &Conn) {
    for fd in c.watched() {
        let _ = shared.registry.deregister(&mut SourceFd(&fd.as_raw_fd()));
    }
    if let (Some(stdio), Some(why)) = (&c.stdio, c.ending) {
        // One small line on a socket with room: it does not block, and a bridge gone already misses nothing.
        let line =
            format!("{}\n", serde_json::json!({"jsonrpc": "2.0", "method": "mcp.ended", "params": {"reason": why}}));
        let _ = nix::sys::socket::send(
            stdio.bridge.as_raw_fd(),
            line.as_bytes(),
            MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
        );
    }
    let kernel = &*shared.kernel;
    kernel.drop_subscriptions(c.outbox.conn, None);
    if let Some(m) = &c.mcp {
        if catch_unwind(AssertUnwindSafe(|| m.finish(kernel, &c.client))).is_err() {
            tracing::warn!("closing an MCP connection's session failed unexpectedly");
        }
    }
    let (s, token, uid) = (shared.clone(), c.token, c.uid);
    c.outbox.close_then(move || {
        let _ = s.back.send(Back::Ended { token, uid });
        let _ = s.waker.wake();
    });
}

/// One line in the connection's dialect: MCP once the connection spoke it (or this line starts it),
/// plain JSON-RPC otherwise. A panic in the MCP door is answered as `internal`, as the kernel's are.
fn answer_in_dialect(
    kernel: &Kernel,
    client: &Client,
    line: &[u8],
    outbox: &Outbox,
    mcp: &mut Option<McpConnection>,
) -> (Option<Vec<u8>>, Option<Arc<Session>>) {
    let served = catch_unwind(AssertUnwindSafe(|| match mcp {
        Some(m) => Some(m.answer(kernel, client, line, Some(outbox))),
        None if mcp::speaks_mcp(line) => McpConnection::start(kernel, client, line).map(|(m, answer)| {
            *mcp = m;
            answer
        }),
        None => None,
    }));
    match served {
        Ok(Some(answer)) => answer,
        Ok(None) => answer_line_on(kernel, client, line, Some(outbox)),
        Err(_) => {
            let id = rpc::parse_request(line).ok().and_then(|r| r.id);
            let e = RpcError::internal("answering an MCP request failed unexpectedly; the server keeps running");
            (Some(rpc::encode_error(id.as_deref(), &e)), None)
        }
    }
}

fn too_long() -> RpcError {
    let msg = format!("the request line is longer than {MAX_LINE} bytes and was skipped; send smaller requests");
    RpcError::new(rpc::ErrorKind::InvalidRequest, msg)
}

/// The response line for one request line, or `None` for a notification or a blank line.
pub fn answer_line(kernel: &Kernel, client: &Client, line: &[u8]) -> Option<Vec<u8>> {
    let (reply, named) = answer_line_on(kernel, client, line, None);
    if let Some(s) = named {
        after_answer(kernel, &s);
    }
    reply
}

/// [`Kernel::after_answer`], where a panic is caught as the answer's own is: it ends neither the
/// connection nor its count of requests in flight (which shutdown waits on).
pub(crate) fn after_answer(kernel: &Kernel, s: &Arc<Session>) {
    if catch_unwind(AssertUnwindSafe(|| kernel.after_answer(s))).is_err() {
        tracing::warn!("recording session '{}' after a call failed unexpectedly", s.name());
    }
}

/// [`answer_line`] on a connection that can carry notifications (`subscribe` queues its own answer
/// into `out`, ahead of any notification, and this returns `None` for it). The session the request
/// named comes back too: its database rows are for the caller to bring up to date
/// ([`Kernel::after_answer`]) once the reply is written.
pub fn answer_line_on(
    kernel: &Kernel,
    client: &Client,
    line: &[u8],
    out: Option<&Outbox>,
) -> (Option<Vec<u8>>, Option<Arc<Session>>) {
    if line.trim_ascii().is_empty() {
        return (None, None);
    }
    let req = match rpc::parse_request(line) {
        Ok(r) => r,
        Err(bad) if bad.notification => return (None, None),
        Err(bad) => return (Some(rpc::encode_error(bad.id.as_deref(), &bad.error)), None),
    };
    if let (Some(out), Some(id), "subscribe" | "unsubscribe") = (out, req.id.as_deref(), req.method.as_str()) {
        let done = catch_unwind(AssertUnwindSafe(|| match req.method.as_str() {
            "subscribe" => subscribe::subscribe(kernel, client, req.params, id, out).map(|()| None),
            _ => subscribe::unsubscribe(kernel, req.params, out).map(|v| Some(rpc::encode_result(Some(id), &v))),
        }));
        let reply = match done {
            Ok(Ok(reply)) => reply,
            Ok(Err(e)) => Some(rpc::encode_error(Some(id), &e)),
            Err(_) => {
                Some(rpc::encode_error(Some(id), &RpcError::internal("subscribing failed unexpectedly".to_owned())))
            }
        };
        return (reply, None);
    }
    let (result, named) = catch_unwind(AssertUnwindSafe(|| kernel.answer(client, &req.method, req.params)))
        .unwrap_or_else(|_| {
            let why = format!("answering {} failed unexpectedly; the server keeps running", req.method);
            (Err(RpcError::internal(why)), None)
        });
    let reply = req.id.map(|id| match result {
        Ok(v) => rpc::encode_result(Some(&id), &v),
        Err(e) => rpc::encode_error(Some(&id), &e),
    });
    (reply, named)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Harness;
    use serde_json::Value;
    use std::io::{BufRead, BufReader, Write};

    /// A server on a real socket in a temporary directory, with a connected client.
    fn connected(h: &Harness) -> (Server, BufReader<UnixStream>, UnixStream) {
        let path = h.dir.path().join("sock");
        let server = Server::start(UnixListener::bind(&path).unwrap(), h.kernel.clone()).unwrap();
        let c = UnixStream::connect(&path).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        (server, BufReader::new(c.try_clone().unwrap()), c)
    }

    fn reply(r: &mut BufReader<UnixStream>) -> Value {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap()
    }

    /// The line a connection over a cap reads, and that it is closed after it.
    fn refused(path: &std::path::Path) -> Value {
        let c = UnixStream::connect(path).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut r = BufReader::new(c);
        let v = reply(&mut r);
        let mut rest = String::new();
        assert_eq!(std::io::Read::read_to_string(&mut r, &mut rest).unwrap(), 0, "closed after: {rest}");
        v
    }

    fn served(path: &std::path::Path) -> (BufReader<UnixStream>, UnixStream) {
        let mut w = UnixStream::connect(path).unwrap();
        w.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut r = BufReader::new(w.try_clone().unwrap());
        w.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"nope\"}\n").unwrap();
        assert_eq!(reply(&mut r)["id"], 1);
        (r, w)
    }

    #[test]
    fn connections_over_a_cap_are_refused_with_a_sentence_and_places_come_back() {
        let h = Harness::new();
        for (limits, says) in [
            (Limits { total: 10, per_uid: 2 }, "--max-connections-per-uid"),
            (Limits { total: 2, per_uid: 10 }, "all users (`heddle up --max-connections`)"),
        ] {
            let path = h.dir.path().join(format!("sock-{}", limits.total));
            let server = Server::start_with(UnixListener::bind(&path).unwrap(), h.kernel.clone(), limits).unwrap();
            let mut open = vec![served(&path), served(&path)];
            let v = refused(&path);
            assert!(v["id"].is_null(), "{v}");
            assert_eq!(v["error"]["code"], -32014, "{v}");
            assert_eq!(v["error"]["data"]["kind"], "too_many_connections");
            let msg = v["error"]["message"].as_str().unwrap();
            assert!(msg.contains("2 connections") && msg.contains(says), "{msg}");
            // The open ones are still served; closing one gives its place back.
            open[1].1.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"nope\"}\n").unwrap();
            assert_eq!(reply(&mut open[1].0)["id"], 2);
            drop(open.pop());
            let until = Instant::now() + Duration::from_secs(10);
            loop {
                let c = UnixStream::connect(&path).unwrap();
                c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                let mut w = c.try_clone().unwrap();
                let _ = w.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"nope\"}\n");
                if reply(&mut BufReader::new(c))["id"] == 3 {
                    break;
                }
                assert!(Instant::now() < until, "a closed connection never gave its place back");
                std::thread::sleep(Duration::from_millis(10));
            }
            server.stop_accepting();
        }
    }

    #[test]
    fn a_peer_that_stops_reading_keeps_its_place_until_its_answers_are_out_or_it_is_gone() {
        let h = Harness::new();
        let path = h.dir.path().join("sock");
        let limits = Limits { total: 10, per_uid: 1 };
        let server = Server::start_with(UnixListener::bind(&path).unwrap(), h.kernel.clone(), limits).unwrap();
        let mut a = UnixStream::connect(&path).unwrap();
        // Megabytes of answers it never reads, then the end of its requests: the connection ends with
        // its answers still queued for a writer thread.
        let id = "i".repeat(1000);
        let reqs: String =
            (0..2000).map(|n| format!("{{\"jsonrpc\":\"2.0\",\"id\":\"{id}{n}\",\"method\":\"nope\"}}\n")).collect();
        a.write_all(reqs.as_bytes()).unwrap();
        a.shutdown(std::net::Shutdown::Write).unwrap();
        let until = Instant::now() + Duration::from_secs(2);
        while Instant::now() < until {
            let v = refused(&path);
            assert_eq!(v["error"]["data"]["kind"], "too_many_connections", "{v}");
            std::thread::sleep(Duration::from_millis(50));
        }
        drop(a);
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let c = UnixStream::connect(&path).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let _ = c.try_clone().unwrap().write_all(b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"nope\"}\n");
            if reply(&mut BufReader::new(c))["id"] == 3 {
                break;
            }
            assert!(Instant::now() < until, "a gone peer never gave its place back");
            std::thread::sleep(Duration::from_millis(10));
        }
        server.stop_accepting();
    }

    #[test]
    fn a_long_line_is_read_in_turns_and_answered_while_others_are_served() {
        let h = Harness::new();
        let (server, mut r, w) = connected(&h);
        let pad = "x".repeat(4 * 1024 * 1024);
        let long = format!("{{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"nope\",\"params\":{{\"pad\":\"{pad}\"}}}}\n");
        let mut w2 = w.try_clone().unwrap();
        let writer = std::thread::spawn(move || w2.write_all(long.as_bytes()).unwrap());
        // Meanwhile another connection is served.
        let path = h.dir.path().join("sock");
        for _ in 0..20 {
            let _ = served(&path);
        }
        // The answer comes only once the whole line was read (so before the writer is joined: a server
        // that stopped reading would leave the writer blocked, and this read times out instead).
        let v = reply(&mut r);
        assert_eq!((v["id"].as_u64(), v["error"]["code"].as_i64()), (Some(7), Some(-32601)), "the long line's answer");
        writer.join().unwrap();
        server.stop_accepting();
    }

    /// Milliseconds a worker waits between its last read of a connection and giving it back (0 but in
    /// the test below, which widens that window to land a request in it).
    pub(super) static GIVE_BACK_DELAY_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

    #[test]
    fn a_request_that_arrives_while_a_connection_is_given_back_is_answered() {
        let h = Harness::new();
        let (server, mut r, mut w) = connected(&h);
        r.get_ref().set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        GIVE_BACK_DELAY_MS.store(300, Ordering::SeqCst);
        w.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"nope\"}\n").unwrap();
        assert_eq!(reply(&mut r)["id"], 1);
        // The worker has read the socket dry and waits before giving the connection back: this request
        // raises its event while no one holds the connection for the loop.
        std::thread::sleep(Duration::from_millis(50));
        w.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"nope\"}\n").unwrap();
        GIVE_BACK_DELAY_MS.store(0, Ordering::SeqCst);
        assert_eq!(reply(&mut r)["id"], 2, "answered, not left waiting for another event");
        server.stop_accepting();
    }

    #[test]
    fn a_socket_client_is_served_in_order_and_survives_garbage() {
        let h = Harness::new();
        let (server, mut r, mut w) = connected(&h);
        let lines = [
            r#"{"jsonrpc":"2.0","id":1,"method":"session.open","params":{"name":"demo"}}"#,
            "this is not json",
            r#"{"jsonrpc":"2.0","method":"run","params":{"session":"demo","cmd":"echo note"}}"#,
            "",
            r#"{"jsonrpc":"2.0","id":"two","method":"run","params":{"session":"demo","cmd":"echo hi"}}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"nope"}"#,
        ];
        for l in lines {
            w.write_all(format!("{l}\n").as_bytes()).unwrap();
        }
        let open = reply(&mut r);
        assert_eq!((open["id"].as_u64(), open["result"]["session"].as_str()), (Some(1), Some("demo")));
        let bad = reply(&mut r);
        assert_eq!((bad["id"].is_null(), bad["error"]["code"].as_i64()), (true, Some(-32700)));
        assert_eq!(bad["error"]["data"]["kind"], "parse_error");
        let run = reply(&mut r);
        assert_eq!(
            (run["id"].as_str(), run["result"]["view"].as_str(), run["result"]["job"].as_u64()),
            (Some("two"), Some("hi\n"), Some(2))
        );
        assert_eq!(run["jsonrpc"], "2.0");
        let nope = reply(&mut r);
        assert_eq!((nope["id"].as_u64(), nope["error"]["code"].as_i64()), (Some(3), Some(-32601)));
        let me = Client { uid: nix::unistd::getuid().as_raw(), pid: None };
        let jobs = h.call_as(&me, "jobs", serde_json::json!({"session": "demo"})).unwrap();
        assert_eq!(jobs["jobs"][0]["cmd"], "echo note", "the notification ran, unanswered");
        server.stop_accepting();
        assert!(server.wait_idle(Duration::from_secs(1)));
    }

    #[test]
    fn a_connections_calls_are_recorded_after_their_replies() {
        let h = Harness::new();
        let (server, mut r, mut w) = connected(&h);
        let open = r#"{"jsonrpc":"2.0","id":1,"method":"session.open","params":{"name":"demo"}}"#;
        let run = r#"{"jsonrpc":"2.0","id":2,"method":"run","params":{"session":"demo","cmd":"echo hi"}}"#;
        for l in [open, run] {
            w.write_all(format!("{l}\n").as_bytes()).unwrap();
        }
        let (_, ran) = (reply(&mut r), reply(&mut r));
        assert_eq!(ran["result"]["state"], "exited", "{ran}");
        server.stop_accepting();
        assert!(server.wait_idle(Duration::from_secs(5)), "the recording ends the request");
        h.kernel.db.sync();
        let me = Client { uid: nix::unistd::getuid().as_raw(), pid: None };
        let serial = h.kernel.session(&me, "demo").unwrap().spec().serial;
        let row = h.kernel.db.job_record(h.kernel.db.boot(), serial, 1).unwrap().expect("the job's row");
        assert_eq!(serde_json::from_str::<Value>(&row).unwrap()["state"], "exited", "{row}");
    }

    #[test]
    fn a_client_that_disconnects_mid_run_cancels_nothing() {
        let mut h = Harness::new();
        h.client.uid = nix::unistd::getuid().as_raw();
        h.open("demo");
        let (server, _r, mut w) = connected(&h);
        w.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"run\",\"params\":{\"session\":\"demo\",\"cmd\":\"sleep 300\"}}\n").unwrap();
        std::thread::sleep(Duration::from_millis(50));
        drop(w);
        drop(_r);
        let r = h.ok("wait", serde_json::json!({"session": "demo", "job": 1, "yield_ms": 10000}));
        assert_eq!((r["state"].as_str(), r["exit_code"].as_i64()), (Some("exited"), Some(0)));
        server.stop_accepting();
    }

    #[test]
    fn a_subscriber_gets_every_chunk_in_order_then_the_end() {
        let mut h = Harness::new();
        h.client.uid = nix::unistd::getuid().as_raw();
        h.open("demo");
        let (server, mut r, mut w) = connected(&h);
        w.write_all(
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"subscribe\",\"params\":{\"session\":\"demo\",\"raw\":true}}\n",
        )
        .unwrap();
        let sub = reply(&mut r);
        assert_eq!(sub["id"], 1, "the answer precedes every notification: {sub}");
        let id = sub["result"]["subscription"].as_u64().unwrap();
        h.run("demo", "lines 3000", 10_000);
        let (mut seq, mut bytes, mut data, mut numbered) = (0, 0u64, String::new(), Vec::new());
        loop {
            let n = reply(&mut r);
            let p = &n["params"];
            assert_eq!((p["subscription"].as_u64(), p["seq"].as_u64()), (Some(id), Some(seq + 1)), "no gaps: {n}");
            seq += 1;
            for l in p["lines"].as_array().unwrap() {
                numbered.push(l["line"].as_u64().unwrap());
            }
            match n["method"].as_str().unwrap() {
                "output" => {
                    assert_eq!(p["offset"].as_u64(), Some(bytes), "offsets continue: {n}");
                    bytes += p["len"].as_u64().unwrap();
                    data.push_str(p["data"].as_str().unwrap());
                }
                "job.end" => assert_eq!(p["state"], "exited"),
                "job.settled" => break,
                other => panic!("unexpected {other}"),
            }
        }
        let want: String = (0..3000).map(|i| format!("line {i}\n")).collect();
        assert_eq!(data, want);
        assert_eq!(numbered, (1..=3000).collect::<Vec<u64>>(), "every rendered line once, in order");
        w.write_all(
            format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"unsubscribe\",\"params\":{{\"subscription\":{id}}}}}\n"
            )
            .as_bytes(),
        )
        .unwrap();
        assert_eq!(reply(&mut r)["result"]["removed"], true);
        server.stop_accepting();
    }
}
