//! The write side of one connection: answers and notifications, in the order they are sent.
//!
//! The sender writes straight to the socket when nothing is waiting for it (one non-blocking `send`,
//! `MSG_DONTWAIT`), so a notification leaves on the pump's own thread with no hand-off: a thread
//! wake-up costs tens of µs on a busy 2-core host, the capture-latency budget is 100 µs. What the
//! socket does not take at once (a full socket buffer: a slow reader) is queued, in order, for a
//! writer thread started for it, which writes it (waiting for the socket to take more) and ends once
//! the queue is empty: an idle connection costs no thread. While anything is queued or being written,
//! every later line is queued behind it, so lines never reorder. [`Outbox::over`] tells the pump a
//! reader fell more than [`MAX_QUEUED`] bytes behind.
//!
//! An answer sent with [`Outbox::send_answer`] says whether it is already whole on the socket or
//! queued; a [`Watch`] set on the outbox hears when queued answers are written and when a line is cut
//! (part of it written, the rest waiting): a handed-over MCP connection keeps its pending page by them,
//! so a front that dies with answers queued leaves their ids for the bridge to answer.
//!
//! ```no_run
//! # fn demo(stream: std::os::unix::net::UnixStream) {
//! let out = front::rpc::outbox::Outbox::owning(1, stream);
//! out.send(b"{\"jsonrpc\":\"2.0\",\"method\":\"hello\"}\n".to_vec());
//! out.close();
//! # }
//! ```

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{send, MsgFlags};
use std::collections::VecDeque;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Bytes that may wait for one connection's writer before its subscriptions are cut off.
pub const MAX_QUEUED: usize = 64 * 1024 * 1024;

/// Most bytes the writer joins into one `write`.
const BATCH: usize = 256 * 1024;

/// What became of a line sent with [`Outbox::send_answer`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sent {
    /// Whole on the socket.
    Written,
    /// Queued (perhaps partly written) for the writer thread; a [`Watch`] hears when it is written.
    Queued,
    /// The connection is gone.
    Gone,
}

/// What a [`Watch`] hears, in order (each told under the queue's lock or by the one writer thread).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    /// An answer was queued (told before any writer can write it).
    Queued,
    /// A write may leave a line cut: part of it on the socket, the rest waiting.
    Cutting,
    /// Everything written so far is whole lines, the last `answers` queued answers among them.
    Whole { answers: usize },
}

/// Told what queued lines became (see [`Written`]).
pub type Watch = Arc<dyn Fn(Written) + Send + Sync>;

/// A line waiting for the writer, and whether it is an answer ([`Outbox::send_answer`]).
#[derive(Debug)]
struct Line {
    bytes: Vec<u8>,
    answer: bool,
}

/// The lines waiting for one connection's writer, and whether it writes or is closed.
#[derive(Debug, Default)]
struct Pending {
    queue: VecDeque<Line>,
    queued: usize,
    /// A writer thread is running: it took lines out and is writing them, or is about to.
    busy: bool,
    /// No more lines will be sent (the connection ended or a write failed).
    closed: bool,
    /// Called once a closed outbox has written its last line (or given up on it).
    on_drained: Option<Drained>,
}

/// What [`Outbox::close_then`] runs once the last line is out.
struct Drained(Box<dyn FnOnce() + Send>);

impl std::fmt::Debug for Drained {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Drained")
    }
}

struct Shared {
    pending: Mutex<Pending>,
    /// Told when queued answers are written ([`Outbox::watch`]).
    watch: std::sync::OnceLock<Watch>,
    ready: Condvar,
    /// The connection's socket; `None` for an outbox read by an [`OutboxReader`] (every line queues).
    sock: Option<OwnedFd>,
    /// `sock` is not a socket but a pipe the outbox holds in non-blocking mode (an MCP agent's stdout,
    /// handed over by `heddle mcp`): written with `write`, not `send`.
    pipe: bool,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("sock", &self.sock).field("pipe", &self.pipe).finish_non_exhaustive()
    }
}

impl Shared {
    fn new(sock: Option<OwnedFd>, pipe: bool) -> Shared {
        Shared { pending: Mutex::default(), watch: std::sync::OnceLock::new(), ready: Condvar::new(), sock, pipe }
    }

    fn tell(&self, w: Written) {
        if let Some(watch) = self.watch.get() {
            watch(w);
        }
    }
}

/// The write side of one connection (cheap to clone: subscriptions keep one each).
#[derive(Clone, Debug)]
pub struct Outbox {
    pub conn: u64,
    shared: Arc<Shared>,
}

impl Outbox {
    /// An outbox for connection `conn` writing to a duplicate of `stream`.
    pub fn new(conn: u64, stream: &UnixStream) -> std::io::Result<Outbox> {
        Ok(Outbox::owning(conn, stream.try_clone()?))
    }

    /// An outbox for connection `conn` that holds the connection's socket itself (its only fd: the
    /// socket server reads through [`Outbox::socket`]). The socket closes when the last clone is gone.
    pub fn owning(conn: u64, stream: UnixStream) -> Outbox {
        let sock = Some(OwnedFd::from(stream));
        Outbox { conn, shared: Arc::new(Shared::new(sock, false)) }
    }

    /// An outbox writing to `fd`, a socket or a pipe (a pipe must be in non-blocking mode, and no one
    /// else may write it meanwhile: lines would interleave). The fd closes when the last clone is gone.
    pub fn owning_fd(conn: u64, fd: OwnedFd) -> std::io::Result<Outbox> {
        let st = nix::sys::stat::fstat(fd.as_fd())?;
        let pipe = match nix::sys::stat::SFlag::from_bits_truncate(st.st_mode) & nix::sys::stat::SFlag::S_IFMT {
            nix::sys::stat::SFlag::S_IFSOCK => false,
            nix::sys::stat::SFlag::S_IFIFO => true,
            _ => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "an outbox writes to a socket or a pipe only",
                ))
            }
        };
        Ok(Outbox { conn, shared: Arc::new(Shared::new(Some(fd), pipe)) })
    }

    /// The socket this outbox writes to (none for a socketless one).
    pub fn socket(&self) -> Option<BorrowedFd<'_>> {
        self.shared.sock.as_ref().map(|s| s.as_fd())
    }

    /// An outbox for connection `conn` with no socket: its lines are taken by the [`OutboxReader`]
    /// (an HTTP door's event stream). Lines wait in the same queue, bounded the same way.
    pub fn queued(conn: u64) -> (Outbox, OutboxReader) {
        let shared = Arc::new(Shared::new(None, false));
        (Outbox { conn, shared: shared.clone() }, OutboxReader { shared })
    }

    fn lock(&self) -> MutexGuard<'_, Pending> {
        self.shared.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Set the [`Watch`] told what becomes of queued answers (once; a second is ignored).
    pub fn watch(&self, watch: Watch) {
        let _ = self.shared.watch.set(watch);
    }

    /// Send one line (newline included): now if the socket takes it, else after what waits. False
    /// when the connection is gone.
    pub fn send(&self, line: Vec<u8>) -> bool {
        self.put_line(line, false).is_ok()
    }

    /// [`Outbox::send`] for an answer: whether it is whole on the socket now or queued (a [`Watch`]
    /// hears when it is written).
    pub fn send_answer(&self, line: Vec<u8>) -> Sent {
        self.put_line(line, true).unwrap_or(Sent::Gone)
    }

    /// [`Outbox::send_answer`], giving the answer back when the connection is gone (none of it was
    /// written whole, so the client never read it).
    pub fn send_answer_or_back(&self, line: Vec<u8>) -> Result<Sent, Vec<u8>> {
        self.put_line(line, true)
    }

    /// How the line went; the line back when the connection is gone.
    fn put_line(&self, line: Vec<u8>, answer: bool) -> Result<Sent, Vec<u8>> {
        let mut st = self.lock();
        if st.closed {
            return Err(line);
        }
        let mut at = 0;
        if let (true, false, Some(sock)) = (st.queue.is_empty(), st.busy, &self.shared.sock) {
            while at < line.len() {
                match put(sock.as_fd(), &line[at..], self.shared.pipe) {
                    Ok(n) => at += n,
                    Err(Errno::EINTR) => {}
                    Err(Errno::EAGAIN) => break,
                    Err(_) => {
                        st.closed = true;
                        self.shared.ready.notify_one();
                        return Err(line);
                    }
                }
            }
            if at == line.len() {
                return Ok(Sent::Written);
            }
        }
        if at > 0 {
            // Under the queue's lock, so no writer thread tells `Whole` before this.
            self.shared.tell(Written::Cutting);
        }
        let rest = if at == 0 { line } else { line[at..].to_vec() };
        st.queued += rest.len();
        st.queue.push_back(Line { bytes: rest, answer });
        if answer {
            self.shared.tell(Written::Queued);
        }
        if self.shared.sock.is_none() {
            self.shared.ready.notify_one();
        } else if !st.busy {
            // The socket is full: a writer thread waits on it until the queue is empty, then ends.
            let shared = self.shared.clone();
            let started =
                std::thread::Builder::new().name(format!("conn-{}-w", self.conn)).spawn(move || write_queued(&shared));
            if let Err(e) = started {
                tracing::warn!("could not start a writer for connection {}: {e}; dropping it", self.conn);
                st.closed = true;
                st.queue.clear();
                st.queued = 0;
                return Ok(Sent::Gone);
            }
            st.busy = true;
        }
        Ok(Sent::Queued)
    }

    /// Whether more than [`MAX_QUEUED`] bytes wait for this connection's reader.
    pub fn over(&self) -> bool {
        self.lock().queued > MAX_QUEUED
    }

    /// No more lines: a running writer writes what waits, then ends.
    pub fn close(&self) {
        self.lock().closed = true;
        self.shared.ready.notify_one();
    }

    /// [`Outbox::close`], then `done` once every queued line is written (or the peer is gone): now
    /// when no writer thread is running, else on that thread as it ends. A connection's place under
    /// the connection caps is given back this way, so a peer that stops reading keeps counting.
    pub fn close_then(&self, done: impl FnOnce() + Send + 'static) {
        let mut st = self.lock();
        st.closed = true;
        if st.busy {
            st.on_drained = Some(Drained(Box::new(done)));
            return;
        }
        drop(st);
        self.shared.ready.notify_one();
        done();
    }
}

impl std::fmt::Debug for OutboxReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutboxReader").finish_non_exhaustive()
    }
}

/// The taking side of a socketless outbox ([`Outbox::queued`]).
pub struct OutboxReader {
    shared: Arc<Shared>,
}

impl OutboxReader {
    /// The lines waiting (joined, at most about [`BATCH`] bytes), blocking until there are some; `None`
    /// once the outbox is closed and empty. A reader that stops calling this leaves the lines queued,
    /// and the pump cuts its subscriptions off past [`MAX_QUEUED`] as it does a socket's.
    pub fn next(&self) -> Option<Vec<u8>> {
        loop {
            if let Some(b) = self.next_within(std::time::Duration::from_secs(3600)) {
                return b;
            }
        }
    }

    /// [`OutboxReader::next`], waiting at most `wait`: `None` when nothing came meanwhile.
    pub fn next_within(&self, wait: std::time::Duration) -> Option<Option<Vec<u8>>> {
        let mut st = self.shared.pending.lock().unwrap_or_else(|e| e.into_inner());
        let until = std::time::Instant::now() + wait;
        while st.queue.is_empty() && !st.closed {
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return None;
            }
            st = self.shared.ready.wait_timeout(st, left).unwrap_or_else(|e| e.into_inner()).0;
        }
        if st.queue.is_empty() {
            return Some(None);
        }
        let mut batch = Vec::new();
        while batch.len() < BATCH {
            let Some(line) = st.queue.pop_front() else { break };
            st.queued -= line.bytes.len();
            batch.extend_from_slice(&line.bytes);
        }
        Some(Some(batch))
    }

    /// The reader is gone: later sends are refused (and the subscriptions dropped by the pump).
    pub fn close(&self) {
        let mut st = self.shared.pending.lock().unwrap_or_else(|e| e.into_inner());
        st.closed = true;
        st.queue.clear();
        st.queued = 0;
    }
}

/// A writer thread's body: write queued lines, waiting for the socket to take them, until the queue
/// is empty (or a write fails: the outbox is closed, later sends are refused).
fn write_queued(shared: &Shared) {
    let Some(sock) = shared.sock.as_ref() else { return };
    let mut batch = Vec::new();
    loop {
        let mut st = shared.pending.lock().unwrap_or_else(|e| e.into_inner());
        if st.queue.is_empty() {
            st.busy = false;
            let done = st.on_drained.take();
            drop(st);
            if let Some(Drained(f)) = done {
                f();
            }
            return;
        }
        batch.clear();
        // A batch ends with an answer, so a watch hears of each answer once it is whole (a front
        // killed in a later write must not leave it counted as unanswered).
        let mut answers = 0;
        while batch.len() < BATCH && answers == 0 {
            let Some(line) = st.queue.pop_front() else { break };
            st.queued -= line.bytes.len();
            batch.extend_from_slice(&line.bytes);
            answers += usize::from(line.answer);
        }
        drop(st);
        shared.tell(Written::Cutting);
        let wrote = write_all(sock.as_fd(), &batch, shared.pipe);
        if wrote.is_ok() {
            shared.tell(Written::Whole { answers });
        }
        if wrote.is_err() {
            let mut st = shared.pending.lock().unwrap_or_else(|e| e.into_inner());
            st.closed = true;
            st.queue.clear();
            st.queued = 0;
            st.busy = false;
            let done = st.on_drained.take();
            drop(st);
            if let Some(Drained(f)) = done {
                f();
            }
            return;
        }
    }
}

/// One write that never waits: `send` with `MSG_DONTWAIT` on a socket (whatever its mode: it is shared
/// with the server's event loop), `write` on a pipe (held in non-blocking mode).
fn put(fd: BorrowedFd<'_>, buf: &[u8], pipe: bool) -> Result<usize, Errno> {
    if pipe {
        nix::unistd::write(fd, buf)
    } else {
        send(fd.as_raw_fd(), buf, MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL)
    }
}

/// Write all of `buf` to `sock`, waiting (poll) whenever it is full.
fn write_all(sock: BorrowedFd<'_>, mut buf: &[u8], pipe: bool) -> Result<(), Errno> {
    while !buf.is_empty() {
        match put(sock, buf, pipe) {
            Ok(n) => buf = &buf[n..],
            Err(Errno::EINTR) => {}
            Err(Errno::EAGAIN) => {
                let mut fds = [PollFd::new(sock, PollFlags::POLLOUT)];
                match poll(&mut fds, PollTimeout::NONE) {
                    Ok(_) | Err(Errno::EINTR) => {}
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};

    #[test]
    fn lines_arrive_in_order_through_direct_sends_and_the_queue() {
        let (a, b) = UnixStream::pair().unwrap();
        let out = Outbox::owning(1, a);
        // Far more than a socket buffer holds while nobody reads: most of it queues.
        let n = 20_000;
        for i in 0..n {
            assert!(out.send(format!("line {i} {}\n", "x".repeat(100)).into_bytes()));
        }
        assert!(out.lock().queued > 0, "the socket filled and lines queued");
        assert!(out.lock().busy, "a writer was started for them");
        out.close();
        let mut r = BufReader::new(b);
        for i in 0..n {
            let mut l = String::new();
            r.read_line(&mut l).unwrap();
            assert!(l.starts_with(&format!("line {i} ")), "line {i}: {l}");
        }
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while out.lock().busy && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!out.lock().busy, "the writer ends once the queue is empty");
        assert!(!out.send(b"late\n".to_vec()), "a closed outbox refuses lines");
    }

    #[test]
    fn a_socketless_outbox_is_bounded_like_a_sockets() {
        let (out, reader) = Outbox::queued(7);
        let line = vec![b'x'; 1 << 20];
        for _ in 0..=MAX_QUEUED >> 20 {
            assert!(!out.over());
            assert!(out.send(line.clone()));
        }
        assert!(out.over(), "a reader that takes nothing falls behind past MAX_QUEUED");
        let got = reader.next().unwrap();
        assert!(got.len() >= BATCH && !out.over());
        reader.close();
        assert!(!out.send(b"late\n".to_vec()), "a closed reader refuses lines");
    }

    #[test]
    fn a_gone_peer_closes_the_outbox() {
        let (a, b) = UnixStream::pair().unwrap();
        let out = Outbox::owning(1, a);
        drop(b);
        let mut refused = false;
        for _ in 0..10 {
            refused |= !out.send(b"x\n".to_vec());
        }
        assert!(refused, "sends to a closed peer fail");
        out.close();
    }
}
