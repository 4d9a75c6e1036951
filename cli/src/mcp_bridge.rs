//! `heddle mcp`: the stdio MCP server an agent's host starts, as a stateless bridge to the front.
//!
//! It connects to the control socket as the user who started it (so the server's per-uid rules apply
//! unchanged) and sends one `mcp.attach` naming the session (or none: a fresh one) and the cwd. The
//! MCP server itself lives in the front (`front::transport::mcp`); nothing here parses the agent's
//! messages. Then, one of two ways:
//! - **Hand-over** (when stdin and stdout are pipes or sockets, as an agent's host makes them): the
//!   attach asks `hand_over_stdio`, and the bridge sends its stdin and stdout to the front over the
//!   socket (`SCM_RIGHTS`; a pipe is first reopened through `/proc/self/fd` so the front's non-blocking
//!   mode is its own open file, never the host's). The front then reads the agent's requests and writes
//!   its answers itself: no process between them, no extra hop per call. The bridge only waits on the
//!   socket: it exits when the front ends the connection because the agent closed stdin, and the
//!   connection ends when the bridge is killed. When the connection ends with the agent still there (the
//!   front crashed and its supervisor started another, or the server was restarted), the bridge connects
//!   again ([`Attach::reconnect_to`], for up to [`RECONNECT_FOR`]), attaches to the same session by name
//!   and hands its stdio over again, so the agent's host keeps its MCP server; a request the old front
//!   had read and not answered gets no answer (its job, if it started one, is announced on a later call).
//! - **Relay** (`--relay`, or stdin/stdout a terminal or a file): it copies bytes both ways, stdin →
//!   socket and socket → stdout, one newline-delimited JSON-RPC message per line as MCP's stdio
//!   transport frames them. When stdin ends, it half-closes the socket, lets the front answer what it
//!   already read, and exits when the front has closed its side.
//!
//! ```no_run
//! let args = cli::mcp_bridge::Attach { session: Some("agent".into()), cwd: "/srv".into(), close_on_exit: false, network: None, relay: false, reconnect_to: None };
//! let client = cli::client::Client::connect(&cli::paths::default_socket()).unwrap();
//! std::process::exit(cli::mcp_bridge::bridge(client, &args).unwrap());
//! ```

use crate::client::{CallError, Client};
use anyhow::{Context, Result};
use serde_json::json;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What the bridge asks the front for.
#[derive(Clone, Debug)]
pub struct Attach {
    /// Attach to (or open) this session; `None` opens a fresh one.
    pub session: Option<String>,
    pub cwd: PathBuf,
    /// Close the session when this connection ends (default: it stays, so a restarted host finds its jobs).
    pub close_on_exit: bool,
    /// Network for a session this opens (`None`: the policy's default).
    pub network: Option<bool>,
    /// Copy through this process even when stdin and stdout could be handed over.
    pub relay: bool,
    /// After a hand-over, the socket to connect to again when the server goes away with the agent still
    /// there (`None`: the bridge exits with the connection).
    pub reconnect_to: Option<PathBuf>,
}

/// How long a bridge whose server went away tries to reach one again before it gives up.
pub const RECONNECT_FOR: Duration = Duration::from_secs(60);

/// Connections that end this soon after their hand-over count as failing at once; after
/// [`QUICK_ENDS`] of them in a row the bridge stops reconnecting.
const QUICK_END: Duration = Duration::from_secs(2);
const QUICK_ENDS: u32 = 10;
/// The pause before attaching again after the n-th quick end in a row: n × this, at most 5 s (a front
/// crashing at start is restarted by its supervisor with a growing pause too).
const QUICK_PAUSE: Duration = Duration::from_millis(500);

/// Attach, then relay until both directions are done (or hand the stdio over and wait, attaching again
/// when the server goes away with the agent still there); the exit status.
pub fn bridge(mut client: Client, a: &Attach) -> Result<i32> {
    let mut session = a.session.clone();
    let mut stdio = if a.relay { None } else { handable_stdio() };
    // Where the server keeps the requests it read and has not answered (see `answer_the_pending`).
    let page = stdio.as_ref().and_then(|_| pending_page());
    let mut attached = match attach(&mut client, a, session.as_deref(), stdio.is_some(), page.is_some(), false) {
        Ok(v) => v,
        Err(Fail::Refused(e) | Fail::Unreachable(e)) => return Err(e),
    };
    let mut quick_ends = 0;
    loop {
        // A fresh session has a name now: a reconnect resumes it, never another fresh one.
        session = attached["session"].as_str().map(str::to_owned).or(session);
        let (mut from_front, to_front) = client.into_parts();
        let Some(fds) = stdio.take().filter(|_| attached["hand_over_stdio"] == true) else {
            return relay(from_front, to_front);
        };
        let handed_at = Instant::now();
        let page = page.as_ref().filter(|_| attached["pending_page"] == true);
        let end = match hand_over(&to_front, fds, page) {
            Ok(()) => wait_for_the_end(&mut from_front),
            // The server went away between its answer and the descriptors: as if it went away after.
            Err(_) if a.reconnect_to.is_some() && session.is_some() => End::Broken,
            Err(e) => return Err(e).context("handing stdin and stdout to the server failed"),
        };
        drop((from_front, to_front));
        let status = i32::from(end != End::Closed);
        let (Some(socket), Some(name)) = (a.reconnect_to.as_deref(), session.as_deref()) else { return Ok(status) };
        // The server said why it ended the connection, or the agent is gone: done.
        if end == End::Said || agent_gone() {
            return Ok(status);
        }
        if let Some(page) = page {
            answer_the_pending(page);
        }
        quick_ends = if handed_at.elapsed() < QUICK_END { quick_ends + 1 } else { 0 };
        if quick_ends >= QUICK_ENDS {
            eprintln!("heddle mcp: the server ended the connection {QUICK_ENDS} times in a row at once; giving up");
            return Ok(1);
        }
        eprintln!("heddle mcp: the server went away with the agent still connected; resuming session '{name}'");
        std::thread::sleep((QUICK_PAUSE * quick_ends).min(Duration::from_secs(5)));
        let resumed = match reconnect(socket, a, name, page.is_some()) {
            Ok(r) => r,
            Err(why) => {
                eprintln!("heddle mcp: {why}; exiting");
                return Ok(1);
            }
        };
        (client, attached, stdio) = resumed;
    }
}

/// Why an attach did not happen: the server answered no, or no server answered.
enum Fail {
    Refused(anyhow::Error),
    Unreachable(anyhow::Error),
}

/// How a handed-over connection ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum End {
    /// The server closed it without a word: the agent closed stdin, or the server went away.
    Closed,
    /// The server said why (an error about the hand-over, the agent's stdout failing): it meant to.
    Said,
    /// Reading from the server failed (a reset: it died with bytes unread).
    Broken,
}

/// Send `mcp.attach` and say on stderr what was attached; the answer. `resume`: carry on in `session`
/// as it was, or be refused.
fn attach(
    client: &mut Client,
    a: &Attach,
    session: Option<&str>,
    hand_over: bool,
    page: bool,
    resume: bool,
) -> Result<Value, Fail> {
    let mut params = json!({"cwd": a.cwd, "close_on_exit": a.close_on_exit});
    if let Some(s) = session {
        params["session"] = json!(s);
    }
    if let Some(n) = a.network {
        params["network"] = json!(n);
    }
    if hand_over {
        params["hand_over_stdio"] = json!(true);
        if page {
            params["pending_page"] = json!(true);
        }
    }
    if resume {
        params["resume"] = json!(true);
    }
    let attached = match client.call("mcp.attach", params) {
        Ok(r) => r,
        // The server is going away, or full for a moment: as if none answered.
        Err(e @ CallError::Rpc { code: SHUTTING_DOWN | TOO_MANY_CONNECTIONS | SESSION_OPEN_FAILED, .. }) if resume => {
            return Err(Fail::Unreachable(anyhow::Error::new(e)))
        }
        Err(e @ CallError::Rpc { code: SHUTTING_DOWN | TOO_MANY_CONNECTIONS, .. }) => {
            return Err(Fail::Unreachable(anyhow::Error::new(e)))
        }
        Err(CallError::Rpc { message, .. }) => {
            return Err(Fail::Refused(anyhow::anyhow!("the server refused the MCP session: {message}")))
        }
        Err(e) => return Err(Fail::Unreachable(anyhow::Error::new(e).context("attaching the MCP session failed"))),
    };
    eprintln!(
        "heddle mcp: serving session '{}' ({}){}",
        attached["session"].as_str().unwrap_or("?"),
        match (resume, attached["attached"] == true) {
            (true, true) => "resumed",
            (true, false) => "resumed after a restart of heddle",
            (false, true) => "reattached",
            (false, false) => "opened",
        },
        if a.close_on_exit { "; it closes when this bridge exits" } else { "" }
    );
    Ok(attached)
}

/// The control socket's error codes a reconnecting bridge waits out.
const SHUTTING_DOWN: i64 = -32004;
const TOO_MANY_CONNECTIONS: i64 = -32014;
/// A session still being opened or closed by another call ("retry in a moment"): waited out on a resume.
const SESSION_OPEN_FAILED: i64 = -32005;

/// Send the agent's stdin and stdout to the server, and the pending page when it takes one (one byte
/// carrying the descriptors).
fn hand_over(to_front: &UnixStream, fds: [OwnedFd; 2], page: Option<&OwnedFd>) -> nix::Result<()> {
    let mut raw = vec![fds[0].as_raw_fd(), fds[1].as_raw_fd()];
    raw.extend(page.map(AsRawFd::as_raw_fd));
    nix::sys::socket::sendmsg::<()>(
        to_front.as_raw_fd(),
        &[std::io::IoSlice::new(b"\0")],
        &[nix::sys::socket::ControlMessage::ScmRights(&raw)],
        nix::sys::socket::MsgFlags::MSG_NOSIGNAL,
        None,
    )
    .map(drop)
}

/// The pending page: a memfd the server writes the ids of the requests it read and has not answered
/// into (`[u32 LE length][JSON array]`); `None` when none can be made (the hand-over goes on without).
fn pending_page() -> Option<OwnedFd> {
    let fd = nix::sys::memfd::memfd_create(c"heddle-mcp-pending", nix::sys::memfd::MFdFlags::MFD_CLOEXEC).ok()?;
    Some(fd)
}

/// The ids on the page, as the server that went away left it, and whether it left a line on the
/// agent's stdout cut (`{"ids": [...], "mid_line": true}`; a bare array otherwise).
fn pending_ids(page: &OwnedFd) -> (Vec<Value>, bool) {
    use std::os::unix::fs::FileExt;
    let Ok(dup) = page.try_clone() else { return (Vec::new(), false) };
    let file = std::fs::File::from(dup);
    let mut len = [0u8; 4];
    if file.read_exact_at(&mut len, 0).is_err() {
        return (Vec::new(), false);
    }
    let n = u32::from_le_bytes(len) as usize;
    let mut json = vec![0u8; n.min(16 << 20)];
    if file.read_exact_at(&mut json, 4).is_err() {
        return (Vec::new(), false);
    }
    match serde_json::from_slice::<Value>(&json).unwrap_or_default() {
        Value::Array(ids) => (ids, false),
        Value::Object(mut m) => {
            let ids = match m.remove("ids") {
                Some(Value::Array(ids)) => ids,
                _ => Vec::new(),
            };
            (ids, m.get("mid_line") == Some(&Value::Bool(true)))
        }
        _ => (Vec::new(), false),
    }
}

/// The server went away with requests it had read and not answered: answer each with an error on the
/// agent's stdout (no server writes there now), so none waits forever, and empty the page.
fn answer_the_pending(page: &OwnedFd) {
    let (ids, mid_line) = pending_ids(page);
    if ids.is_empty() && !mid_line {
        return;
    }
    let mut out = std::io::stdout().lock();
    if mid_line {
        // The server died while writing a line: end it, so the errors below are lines of their own
        // (the cut line is not valid JSON; a client skips it as it would any torn line).
        let _ = writeln!(out);
    }
    for id in &ids {
        let e = json!({"jsonrpc": "2.0", "id": id, "error": {"code": SHUTTING_DOWN, "message": PENDING_LOST}});
        let _ = writeln!(out, "{e}");
    }
    let _ = out.flush();
    eprintln!("heddle mcp: answered {} request(s) the server read and did not answer with an error", ids.len());
    let _ = nix::unistd::ftruncate(page, 0);
}

/// The error a request gets when the server that read it went away before answering.
const PENDING_LOST: &str = "heddle's server went away while this request waited for its answer (its front restarted); \
    the session carries on: a job this call started is announced on the next call and listed by jobs, so look \
    before running it again";

/// Connect to `socket` again and resume `session`, trying every 100 ms for [`RECONNECT_FOR`] (a server
/// shutting down may still accept, then reset the connection or answer `shutting_down`; a supervisor
/// between fronts accepts and answers later: each try waits at most what is left); the client, the
/// answer and the stdio to hand over, or the sentence saying why not (no server answered, the server
/// refused, the agent left meanwhile).
fn reconnect(
    socket: &Path,
    a: &Attach,
    session: &str,
    page: bool,
) -> Result<(Client, Value, Option<[OwnedFd; 2]>), String> {
    let until = Instant::now() + RECONNECT_FOR;
    loop {
        if agent_gone() {
            return Err("the agent left while the server was away".to_owned());
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "no server answered at {} for {RECONNECT_FOR:?} (the agent's host can start heddle mcp again)",
                socket.display()
            ));
        }
        if let Ok(mut c) = Client::connect(socket) {
            let stdio = if a.relay { None } else { handable_stdio() };
            if c.set_timeout(Some(left)).is_ok() {
                match attach(&mut c, a, Some(session), stdio.is_some(), page, true) {
                    Ok(attached) => {
                        let _ = c.set_timeout(None);
                        return Ok((c, attached, stdio));
                    }
                    Err(Fail::Refused(e)) => return Err(format!("{e:#}")),
                    Err(Fail::Unreachable(_)) => {}
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100).min(until.saturating_duration_since(Instant::now())));
    }
}

/// True when the agent is gone: it closed its end of our stdin (a pipe with no writer and nothing left
/// to read, a socket at end of input) or of our stdout (a pipe with no reader), or they cannot be looked
/// at. Requests still waiting in a closed pipe are not "gone": a server reads and answers them first.
fn agent_gone() -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use nix::sys::socket::{recv, MsgFlags};
    use nix::sys::stat::{fstat, SFlag};
    let (stdin, stdout) = (std::io::stdin(), std::io::stdout());
    let (input, output) = (stdin.as_fd(), stdout.as_fd());
    let is_socket =
        |fd| fstat(fd).is_ok_and(|st| SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFSOCK);
    let input_gone = if is_socket(input) {
        let mut byte = [0u8; 1];
        match recv(input.as_raw_fd(), &mut byte, MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT) {
            Ok(0) => true,
            Ok(_) | Err(nix::errno::Errno::EAGAIN) => false,
            Err(_) => true,
        }
    } else {
        let mut fds = [PollFd::new(input, PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::ZERO) {
            Ok(_) => fds[0].revents().is_none_or(|r| {
                r.intersects(PollFlags::POLLERR | PollFlags::POLLNVAL)
                    || (r.contains(PollFlags::POLLHUP) && !r.contains(PollFlags::POLLIN))
            }),
            Err(_) => true,
        }
    };
    // A pipe whose reader is gone polls POLLERR; a socket whose peer is gone, POLLHUP.
    let mut out = [PollFd::new(output, PollFlags::empty())];
    let output_gone = match poll(&mut out, PollTimeout::ZERO) {
        Ok(_) => {
            out[0].revents().is_none_or(|r| r.intersects(PollFlags::POLLERR | PollFlags::POLLHUP | PollFlags::POLLNVAL))
        }
        Err(_) => true,
    };
    input_gone || output_gone
}

/// Copy both ways until the front has closed its side; the exit status.
fn relay(mut from_front: std::io::BufReader<UnixStream>, to_front: UnixStream) -> Result<i32> {
    let mut up = to_front.try_clone().context("cloning the socket")?;
    let upstream = std::thread::Builder::new().name("stdin".into()).spawn(move || {
        let r = copy_flushing(&mut std::io::stdin().lock(), &mut up);
        // End of the client's input: the front answers what it read, then closes its side.
        let _ = up.shutdown(Shutdown::Write);
        r
    })?;
    let down = copy_flushing(&mut from_front, &mut std::io::stdout().lock());
    let _ = to_front.shutdown(Shutdown::Both);
    if let Err(e) = down {
        eprintln!("heddle mcp: writing to the MCP client failed: {e}");
        return Ok(1);
    }
    // The front closed the connection; the stdin thread may still sit in a read that no one will
    // answer: it is not joined, the process exits. (After the agent's end of input the thread is
    // finishing as the front closes: it is given a moment.)
    let until = Instant::now() + Duration::from_millis(500);
    while !upstream.is_finished() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    if upstream.is_finished() {
        if let Ok(Err(e)) = upstream.join() {
            eprintln!("heddle mcp: reading from the MCP client failed: {e}");
            return Ok(1);
        }
        return Ok(0);
    }
    // The agent still writes: the server went away (a relaying bridge does not attach again).
    eprintln!(
        "heddle mcp: the server closed the connection while the agent was still connected; exiting \
         (started without --relay on pipes, heddle mcp resumes the session instead)"
    );
    Ok(1)
}

/// Stdin and stdout ready to hand over (a pipe reopened as a new open file, non-blocking; a socket as
/// it is), or `None` when either is anything else (a terminal, a file) or cannot be reopened.
fn handable_stdio() -> Option<[OwnedFd; 2]> {
    use nix::fcntl::OFlag;
    use nix::sys::stat::{fstat, SFlag};
    let one = |fd: std::os::fd::BorrowedFd<'_>, mode: OFlag| -> Option<OwnedFd> {
        let kind = SFlag::from_bits_truncate(fstat(fd).ok()?.st_mode) & SFlag::S_IFMT;
        match kind {
            SFlag::S_IFSOCK => fd.try_clone_to_owned().ok(),
            SFlag::S_IFIFO => {
                let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
                let flags = mode | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
                nix::fcntl::open(path.as_str(), flags, nix::sys::stat::Mode::empty()).ok()
            }
            _ => None,
        }
    };
    let input = one(std::io::stdin().as_fd(), OFlag::O_RDONLY)?;
    let output = one(std::io::stdout().as_fd(), OFlag::O_WRONLY)?;
    Some([input, output])
}

/// After a hand-over: wait until the front closes the connection (the agent closed stdin, or the
/// server is going away). Anything it says meanwhile is why it ends the connection: told on stderr.
fn wait_for_the_end(from_front: &mut impl std::io::BufRead) -> End {
    let mut said = false;
    let mut line = String::new();
    loop {
        line.clear();
        match from_front.read_line(&mut line) {
            Ok(0) if said => return End::Said,
            Ok(0) => return End::Closed,
            Ok(_) => {
                eprintln!("heddle mcp: the server: {}", line.trim_end());
                said = true;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) if said => return End::Said,
            Err(e) => {
                eprintln!("heddle mcp: reading from the server failed: {e}");
                return End::Broken;
            }
        }
    }
}

/// Copy until end of input, flushing after every read so each message leaves at once.
fn copy_flushing(from: &mut impl Read, to: &mut impl Write) -> std::io::Result<u64> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut n = 0u64;
    loop {
        let got = match from.read(&mut buf) {
            Ok(0) => return Ok(n),
            Ok(got) => got,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        to.write_all(&buf[..got])?;
        to.flush()?;
        n += got as u64;
    }
}
