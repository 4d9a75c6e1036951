//! The write side of one connection: answers and notifications, in the order they are sent.
//!
//! The sender writes straight to the socket when nothing is waiting for it (one non-blocking `send`,
//! `MSG_DONTWAIT`), so a notification leaves on the pump's own thread with no hand-off: a thread
//! wake-up costs tens of µs on a busy 2-core host, the capture-latency budget is 100 µs. What the
//! socket does not take at once (a full socket buffer: a slow reader) is queued, in order, for the
//! connection's writer thread, which writes it blocking. While anything is queued or being written,
//! every later line is queued behind it, so lines never reorder. [`Outbox::over`] tells the pump a
//! reader fell more than [`MAX_QUEUED`] bytes behind.
//!
//! ```no_run
//! # fn demo(stream: std::os::unix::net::UnixStream) {
//! let (out, writer) = front::rpc::outbox::Outbox::new(1, &stream).unwrap();
//! let t = std::thread::spawn(move || writer.run(stream));
//! out.send(b"{\"jsonrpc\":\"2.0\",\"method\":\"hello\"}\n".to_vec());
//! out.close();
//! t.join().unwrap();
//! # }
//! ```

use nix::errno::Errno;
use nix::sys::socket::{send, MsgFlags};
use std::collections::VecDeque;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Bytes that may wait for one connection's writer before its subscriptions are cut off.
pub const MAX_QUEUED: usize = 64 * 1024 * 1024;

/// Most bytes the writer joins into one `write`.
const BATCH: usize = 256 * 1024;

#[derive(Debug, Default)]
struct State {
    queue: VecDeque<Vec<u8>>,
    queued: usize,
    /// The writer took lines out and is writing them.
    busy: bool,
    /// No more lines will be sent (the connection ended or a write failed).
    closed: bool,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    ready: Condvar,
    /// A duplicate of the connection's socket, for the direct non-blocking sends; `None` for an outbox
    /// read by an [`OutboxReader`] (every line queues).
    sock: Option<OwnedFd>,
}

/// The write side of one connection (cheap to clone: subscriptions keep one each).
#[derive(Clone, Debug)]
pub struct Outbox {
    pub conn: u64,
    shared: Arc<Shared>,
}

/// The connection's writer thread body: writes what the socket did not take at once.
pub struct OutboxWriter {
    shared: Arc<Shared>,
}

impl Outbox {
    /// An outbox for connection `conn` writing to `stream`, and the writer to run on its own thread.
    pub fn new(conn: u64, stream: &UnixStream) -> std::io::Result<(Outbox, OutboxWriter)> {
        let sock = Some(OwnedFd::from(stream.try_clone()?));
        let shared = Arc::new(Shared { state: Mutex::default(), ready: Condvar::new(), sock });
        Ok((Outbox { conn, shared: shared.clone() }, OutboxWriter { shared }))
    }

    /// An outbox for connection `conn` with no socket: its lines are taken by the [`OutboxReader`]
    /// (an HTTP door's event stream). Lines wait in the same queue, bounded the same way.
    pub fn queued(conn: u64) -> (Outbox, OutboxReader) {
        let shared = Arc::new(Shared { state: Mutex::default(), ready: Condvar::new(), sock: None });
        (Outbox { conn, shared: shared.clone() }, OutboxReader { shared })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Send one line (newline included): now if the socket takes it, else after what waits. False
    /// when the connection is gone.
    pub fn send(&self, line: Vec<u8>) -> bool {
        let mut st = self.lock();
        if st.closed {
            return false;
        }
        let mut at = 0;
        if let (true, false, Some(sock)) = (st.queue.is_empty(), st.busy, &self.shared.sock) {
            let flags = MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL;
            while at < line.len() {
                match send(sock.as_raw_fd(), &line[at..], flags) {
                    Ok(n) => at += n,
                    Err(Errno::EINTR) => {}
                    Err(Errno::EAGAIN) => break,
                    Err(_) => {
                        st.closed = true;
                        self.shared.ready.notify_one();
                        return false;
                    }
                }
            }
            if at == line.len() {
                return true;
            }
        }
        let rest = if at == 0 { line } else { line[at..].to_vec() };
        st.queued += rest.len();
        st.queue.push_back(rest);
        self.shared.ready.notify_one();
        true
    }

    /// Whether more than [`MAX_QUEUED`] bytes wait for this connection's reader.
    pub fn over(&self) -> bool {
        self.lock().queued > MAX_QUEUED
    }

    /// No more lines: the writer writes what waits, then ends.
    pub fn close(&self) {
        self.lock().closed = true;
        self.shared.ready.notify_one();
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
        let mut st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
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
            st.queued -= line.len();
            batch.extend_from_slice(&line);
        }
        Some(Some(batch))
    }

    /// The reader is gone: later sends are refused (and the subscriptions dropped by the pump).
    pub fn close(&self) {
        let mut st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        st.closed = true;
        st.queue.clear();
        st.queued = 0;
    }
}

impl OutboxWriter {
    /// Write queued lines until the outbox is closed and empty (or a write fails).
    pub fn run(self, mut stream: UnixStream) {
        let mut batch = Vec::new();
        loop {
            let mut st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
            st.busy = false;
            while st.queue.is_empty() && !st.closed {
                st = self.shared.ready.wait(st).unwrap_or_else(|e| e.into_inner());
            }
            if st.queue.is_empty() {
                return;
            }
            batch.clear();
            while batch.len() < BATCH {
                let Some(line) = st.queue.pop_front() else { break };
                st.queued -= line.len();
                batch.extend_from_slice(&line);
            }
            st.busy = true;
            drop(st);
            if stream.write_all(&batch).is_err() {
                // Reading goes on until the peer's EOF; later sends see `closed` and are dropped.
                let mut st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
                st.closed = true;
                st.queue.clear();
                st.queued = 0;
                st.busy = false;
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};

    #[test]
    fn lines_arrive_in_order_through_direct_sends_and_the_queue() {
        let (a, b) = UnixStream::pair().unwrap();
        let (out, writer) = Outbox::new(1, &a).unwrap();
        let t = std::thread::spawn(move || writer.run(a));
        // Far more than a socket buffer holds while nobody reads: most of it queues.
        let n = 20_000;
        for i in 0..n {
            assert!(out.send(format!("line {i} {}\n", "x".repeat(100)).into_bytes()));
        }
        assert!(out.lock().queued > 0, "the socket filled and lines queued");
        out.close();
        let mut r = BufReader::new(b);
        for i in 0..n {
            let mut l = String::new();
            r.read_line(&mut l).unwrap();
            assert!(l.starts_with(&format!("line {i} ")), "line {i}: {l}");
        }
        t.join().unwrap();
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
        let (out, writer) = Outbox::new(1, &a).unwrap();
        let t = std::thread::spawn(move || writer.run(a));
        drop(b);
        let mut refused = false;
        for _ in 0..10 {
            refused |= !out.send(b"x\n".to_vec());
        }
        assert!(refused, "sends to a closed peer fail");
        out.close();
        t.join().unwrap();
    }
}
