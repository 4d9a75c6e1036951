//! The client transport: accept connections on the listening Unix socket and serve each on its own
//! thread, one newline-delimited JSON-RPC request at a time, answered in order.
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
use crate::rpc::outbox::Outbox;
use crate::rpc::{self, RpcError, MAX_LINE};
use crate::sessions::session::Session;
use crate::transport::mcp::{self, McpConnection};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
use shm_proto::sys::EventFd;
use std::io::{BufRead, BufReader};
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The accept loop's handle.
pub struct Server {
    stop: Arc<EventFd>,
    in_flight: Arc<AtomicUsize>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Server {
    /// Serve `listener` on a new accept thread.
    pub fn start(listener: UnixListener, kernel: Arc<Kernel>) -> std::io::Result<Server> {
        listener.set_nonblocking(true)?;
        let stop = Arc::new(EventFd::new()?);
        let in_flight = Arc::new(AtomicUsize::new(0));
        let (s, f) = (stop.clone(), in_flight.clone());
        let thread =
            std::thread::Builder::new().name("accept".into()).spawn(move || accept_loop(listener, kernel, s, f))?;
        Ok(Server { stop, in_flight, thread: Mutex::new(Some(thread)) })
    }

    /// Stop accepting (the listening socket is closed); open connections go on being served.
    pub fn stop_accepting(&self) {
        let _ = self.stop.notify();
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = t.join();
        }
    }

    /// Wait until no request is being answered, at most `timeout`; true if idle.
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        let until = Instant::now() + timeout;
        while self.in_flight.load(Ordering::SeqCst) > 0 {
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    }
}

fn accept_loop(listener: UnixListener, kernel: Arc<Kernel>, stop: Arc<EventFd>, in_flight: Arc<AtomicUsize>) {
    let mut n = 0u64;
    loop {
        let mut fds = [PollFd::new(listener.as_fd(), PollFlags::POLLIN), PollFd::new(stop.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => {
                eprintln!("heddle-front: polling the listening socket failed: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        if fds[1].revents().is_some_and(|r| !r.is_empty()) {
            return;
        }
        loop {
            match listener.accept() {
                Ok((stream, _)) => {
                    n += 1;
                    let (k, f) = (kernel.clone(), in_flight.clone());
                    let spawned = std::thread::Builder::new()
                        .name(format!("conn-{n}"))
                        .spawn(move || serve_connection(stream, &k, &f, n));
                    if let Err(e) = spawned {
                        eprintln!("heddle-front: could not start a connection thread: {e}");
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    eprintln!("heddle-front: accept failed: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                    break;
                }
            }
        }
    }
}

/// One line read from a connection.
#[derive(Debug, PartialEq, Eq)]
enum Line {
    /// A complete line (newline stripped) in the buffer.
    Data,
    /// A line longer than the limit was skipped.
    TooLong,
    Eof,
}

/// Read one line into `buf`, never holding more than `max` bytes of it.
fn read_line(r: &mut impl BufRead, buf: &mut Vec<u8>, max: usize) -> std::io::Result<Line> {
    buf.clear();
    let mut too_long = false;
    loop {
        let chunk = match r.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok(match (too_long, buf.is_empty()) {
                (true, _) => Line::TooLong,
                (false, true) => Line::Eof,
                (false, false) => Line::Data,
            });
        }
        let (take, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i, true),
            None => (chunk.len(), false),
        };
        if !too_long && buf.len() + take <= max {
            buf.extend_from_slice(&chunk[..take]);
        } else {
            too_long = true;
            buf.clear();
        }
        r.consume(take + usize::from(done));
        if done {
            return Ok(if too_long { Line::TooLong } else { Line::Data });
        }
    }
}

fn serve_connection(stream: UnixStream, kernel: &Kernel, in_flight: &AtomicUsize, conn: u64) {
    let client = match getsockopt(&stream, PeerCredentials) {
        Ok(c) => kernel.client_of(&stream, c),
        Err(e) => {
            eprintln!("heddle-front: dropping a connection without peer credentials: {e}");
            return;
        }
    };
    let Ok(read_half) = stream.try_clone() else { return };
    let mut reader = BufReader::with_capacity(64 * 1024, read_half);
    let Ok((outbox, out_writer)) = Outbox::new(conn, &stream) else { return };
    let writer = match std::thread::Builder::new().name(format!("conn-{conn}-w")).spawn(move || out_writer.run(stream))
    {
        Ok(w) => w,
        Err(e) => {
            eprintln!("heddle-front: could not start a connection writer: {e}");
            return;
        }
    };
    let mut line = Vec::new();
    // The connection's dialect: plain JSON-RPC until an MCP-shaped first request makes it MCP.
    let mut mcp: Option<McpConnection> = None;
    loop {
        let reply = match read_line(&mut reader, &mut line, MAX_LINE) {
            Ok(Line::Eof) | Err(_) => break,
            Ok(Line::TooLong) => Some(rpc::encode_error(None, &too_long())),
            Ok(Line::Data) => {
                in_flight.fetch_add(1, Ordering::SeqCst);
                let (reply, named) = answer_in_dialect(kernel, &client, &line, &outbox, &mut mcp);
                // The reply goes out first: no client waits on the database rows.
                let sent = reply.is_none_or(|r| outbox.send(r));
                if let Some(s) = named {
                    after_answer(kernel, &s);
                }
                in_flight.fetch_sub(1, Ordering::SeqCst);
                if !sent {
                    break;
                }
                None
            }
        };
        if let Some(reply) = reply {
            if !outbox.send(reply) {
                break;
            }
        }
        // One huge request must not pin megabytes to the connection for its lifetime.
        line.shrink_to(64 * 1024);
    }
    // The connection is gone: its subscriptions go with it (and its MCP session, when it asked to be
    // closed with the connection), then the writer drains and ends.
    kernel.drop_subscriptions(conn, None);
    if let Some(m) = &mcp {
        if catch_unwind(AssertUnwindSafe(|| m.finish(kernel, &client))).is_err() {
            eprintln!("heddle-front: closing an MCP connection's session failed unexpectedly");
        }
    }
    outbox.close();
    let _ = writer.join();
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
        eprintln!("heddle-front: recording session '{}' after a call failed unexpectedly", s.name());
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
    use std::io::Write;

    fn lines(input: &[u8], max: usize) -> Vec<(Line, Vec<u8>)> {
        let mut r = BufReader::with_capacity(4, input);
        let mut out = Vec::new();
        let mut buf = Vec::new();
        loop {
            let l = read_line(&mut r, &mut buf, max).unwrap();
            if l == Line::Eof {
                return out;
            }
            out.push((l, buf.clone()));
        }
    }

    #[test]
    fn lines_are_split_capped_and_skipped() {
        let got = lines(b"ab\nthis is too long\ncd\nlast", 5);
        assert_eq!(
            got,
            [
                (Line::Data, b"ab".to_vec()),
                (Line::TooLong, vec![]),
                (Line::Data, b"cd".to_vec()),
                (Line::Data, b"last".to_vec()),
            ]
        );
        assert_eq!(lines(b"12345\n", 5), [(Line::Data, b"12345".to_vec())]);
        assert_eq!(lines(b"123456", 5), [(Line::TooLong, vec![])]);
    }

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
