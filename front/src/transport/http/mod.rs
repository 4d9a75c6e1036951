//! The HTTP door (`heddle up --http ADDR`): the same kernel over HTTP/1.1, on a TCP socket the
//! supervisor bound and handed over (fd 5), so the front needs no privilege and a restarted front
//! takes it over.
//!
//! - `POST /rpc`: one JSON-RPC request in the body, answered as the control socket answers it (the same
//!   [`answer_line_on`] path); a notification is `202` with no body.
//! - `POST /mcp`, `DELETE /mcp` (`GET /mcp` is `405`): MCP's streamable HTTP transport, each answer a
//!   single `application/json` response, except a `tools/call` with a progress token from a client
//!   that accepts `text/event-stream`, answered as a stream of its progress and then its response
//!   ([`mcp_stream`]). `initialize` issues an `Mcp-Session-Id`; each MCP session is one
//!   [`McpConnection`] (one heddle session), kept here until `DELETE`.
//! - `GET /`: the cockpit page and its streams ([`cockpit`]).
//! - `GET /events?session=S&job=J`: the job's `subscribe` notifications (raw) as Server-Sent Events,
//!   each with `id: <stdout bytes>-<stderr bytes>` delivered so far; a client reconnecting with
//!   `Last-Event-ID` resumes from there (the stored chunks are replayed first), so no chunk is lost or
//!   repeated. The stream ends after `job.settled`. A slow reader is cut off past
//!   [`crate::rpc::outbox::MAX_QUEUED`] as a slow socket subscriber is.
//!
//! Every request acts as a uid: on a loopback bind, the owner of the client's TCP socket
//! ([`peer::socket_owner`]); with tokens (a non-loopback bind, or `--http-require-token`), the uid of
//! the `Authorization: Bearer` token ([`tokens::Tokens`]); otherwise `401`. On loopback an `Origin`
//! that is not a loopback host is refused `403` (DNS rebinding). Bodies over [`MAX_BODY`] are `413`.
//!
//! tokio lives here only: a multi-thread runtime with one worker; kernel calls (which block up to
//! `yield_ms`) run on the thread that read the request, inside `block_in_place`; what follows an answer
//! runs after its write on the same thread ([`after_write`]); event streams each on a thread of their own.

mod after_write;
mod cockpit;
mod mcp_stream;
pub mod peer;
pub mod tokens;

use crate::kernel::{Client, Kernel};
use crate::rpc::outbox::{Outbox, OutboxReader};
use crate::rpc::{self, ErrorKind, RpcError};
use crate::transport::mcp::{McpConnection, PROTOCOL_VERSIONS};
use crate::transport::socket::answer_line_on;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderValue, ALLOW, AUTHORIZATION, CONTENT_TYPE, ORIGIN, WWW_AUTHENTICATE};
use hyper::{Method, Request, Response, StatusCode};
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokens::Tokens;

/// The largest request body accepted.
pub const MAX_BODY: usize = 16 * 1024 * 1024;
/// MCP HTTP sessions one uid may hold at once.
pub const MAX_MCP_SESSIONS_PER_UID: usize = 256;
/// How long an event stream may be quiet before a keepalive comment is sent.
pub const KEEPALIVE: Duration = Duration::from_secs(15);
/// Event-stream connections get ids from here up, apart from the socket server's.
const EVENTS_CONN_BASE: u64 = 1 << 62;

/// How requests are mapped to uids.
#[derive(Clone, Debug)]
pub enum Auth {
    /// The owner of the client's socket (loopback binds).
    SocketOwner,
    /// A bearer token from this list.
    Tokens(Tokens),
}

struct McpEntry {
    uid: u32,
    conn: Mutex<McpConnection>,
}

struct Door {
    kernel: Arc<Kernel>,
    auth: Auth,
    loopback: bool,
    mcp: Mutex<HashMap<String, Arc<McpEntry>>>,
    next_conn: AtomicU64,
    in_flight: AtomicUsize,
    /// Connections open now, in all and by uid (the socket door's caps, `transport::socket::limits`).
    conns: Mutex<ConnCount>,
}

#[derive(Default)]
struct ConnCount {
    total: usize,
    by_uid: HashMap<u32, usize>,
}

/// A connection's place under the door's caps, given back when the connection ends.
struct ConnPlace {
    door: Arc<Door>,
    uid: Option<u32>,
}

impl Drop for ConnPlace {
    fn drop(&mut self) {
        let mut c = self.door.conns.lock().unwrap_or_else(|e| e.into_inner());
        c.total = c.total.saturating_sub(1);
        if let Some(u) = self.uid {
            if let Some(n) = c.by_uid.get_mut(&u) {
                *n -= 1;
                if *n == 0 {
                    c.by_uid.remove(&u);
                }
            }
        }
    }
}

/// A place for a new connection of `uid` (`None`: known only per request, behind tokens), or the
/// sentence refusing it: the same caps as the socket door's (`heddle up --max-connections`,
/// `--max-connections-per-uid`), counted for this door.
fn take_place(door: &Arc<Door>, uid: Option<u32>) -> Result<ConnPlace, String> {
    let limits = crate::transport::socket::limits();
    let mut c = door.conns.lock().unwrap_or_else(|e| e.into_inner());
    if c.total >= limits.total {
        return Err(format!(
            "heddle's HTTP door has {} connections open, its limit (heddle up --max-connections); close some and try again",
            c.total
        ));
    }
    if let Some(u) = uid {
        let n = c.by_uid.get(&u).copied().unwrap_or(0);
        if n >= limits.per_uid {
            return Err(format!(
                "uid {u} has {n} connections open to heddle's HTTP door, its limit (heddle up --max-connections-per-uid); close some and try again"
            ));
        }
        *c.by_uid.entry(u).or_default() += 1;
    }
    c.total += 1;
    Ok(ConnPlace { door: door.clone(), uid })
}

impl std::fmt::Debug for HttpDoor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpDoor").finish_non_exhaustive()
    }
}

/// The door's handle: stops accepting when told (or dropped with the process).
pub struct HttpDoor {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    door: Arc<Door>,
}

impl HttpDoor {
    /// Serve `listener` (bound and listening) on a thread of its own.
    pub fn start(listener: std::net::TcpListener, kernel: Arc<Kernel>, auth: Auth) -> std::io::Result<HttpDoor> {
        listener.set_nonblocking(true)?;
        let loopback = listener.local_addr()?.ip().is_loopback();
        let door = Arc::new(Door {
            kernel,
            auth,
            loopback,
            mcp: Mutex::default(),
            next_conn: AtomicU64::new(EVENTS_CONN_BASE),
            in_flight: AtomicUsize::new(0),
            conns: Mutex::default(),
        });
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .thread_name("http-blocking")
            .max_blocking_threads(1024)
            .build()?;
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let d = door.clone();
        let thread = std::thread::Builder::new().name("http".into()).spawn(move || {
            rt.block_on(async move {
                let listener = match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::warn!("the HTTP door cannot use its socket: {e}");
                        return;
                    }
                };
                tokio::select! {
                    () = accept_loop(listener, d) => {}
                    _ = stopped => {}
                }
            });
            // Kernel calls still blocking end at once: shutdown wakes every waiting call.
            rt.shutdown_timeout(Duration::from_secs(1));
        })?;
        Ok(HttpDoor { stop: Some(stop), thread: Some(thread), door })
    }

    /// Stop accepting and serving (the listening socket is closed).
    pub fn stop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    /// Requests being answered now.
    pub fn in_flight(&self) -> usize {
        self.door.in_flight.load(Ordering::SeqCst)
    }
}

async fn accept_loop(listener: tokio::net::TcpListener, door: Arc<Door>) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!("the HTTP door's accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // Request and answer are small writes: never hold one back waiting for an ACK.
        let _ = stream.set_nodelay(true);
        let door = door.clone();
        tokio::spawn(async move {
            let ours = stream.local_addr().ok();
            let uid = match (&door.auth, ours) {
                (Auth::SocketOwner, Some(ours)) => {
                    tokio::task::spawn_blocking(move || peer::socket_owner(peer, ours)).await.ok().flatten()
                }
                _ => None,
            };
            let _place = match take_place(&door, uid) {
                Ok(p) => p,
                Err(sentence) => {
                    let body = format!("{sentence}\n");
                    let head = format!(
                        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
                        body.len()
                    );
                    // A small answer, then the connection is dropped (closed).
                    let bytes = format!("{head}{body}").into_bytes();
                    let mut off = 0;
                    while off < bytes.len() && stream.writable().await.is_ok() {
                        match stream.try_write(&bytes[off..]) {
                            Ok(n) => off += n,
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                            Err(_) => break,
                        }
                    }
                    return;
                }
            };
            let slot = after_write::Slot::default();
            let io = hyper_util::rt::TokioIo::new(after_write::AfterWrite { io: stream, slot: slot.clone() });
            let svc = hyper::service::service_fn(move |req| {
                let door = door.clone();
                async move { Ok::<_, std::convert::Infallible>(handle(&door, uid, req).await) }
            });
            let served = after_write::scope(
                slot,
                hyper::server::conn::http1::Builder::new()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(Duration::from_secs(30))
                    .serve_connection(io, svc),
            )
            .await;
            if let Err(e) = served {
                if !e.is_incomplete_message() && !e.is_canceled() {
                    tracing::warn!("an HTTP connection from {peer} ended: {e}");
                }
            }
        });
    }
}

type Body = http_body_util::Either<Full<Bytes>, EventBody>;

fn reply(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(http_body_util::Either::Left(Full::new(body.into())));
    *r.status_mut() = status;
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

/// A refusal: the status and a sentence saying what to do.
fn refuse(status: StatusCode, sentence: &str) -> Response<Body> {
    reply(status, "text/plain; charset=utf-8", format!("{sentence}\n"))
}

fn json(status: StatusCode, body: Vec<u8>) -> Response<Body> {
    reply(status, "application/json", body)
}

async fn handle(door: &Door, socket_uid: Option<u32>, req: Request<Incoming>) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let client = match admit(door, socket_uid, &parts.headers) {
        Ok(c) => c,
        Err(r) => return unread(body, *r).await,
    };
    let (method, path) = (parts.method.clone(), parts.uri.path().to_owned());
    door.in_flight.fetch_add(1, Ordering::SeqCst);
    let r = match (method, path.as_str()) {
        (Method::POST, "/rpc") => post_rpc(door, client, Request::from_parts(parts, body)).await,
        (Method::POST, "/mcp") => post_mcp(door, client, Request::from_parts(parts, body)).await,
        (method, path) => {
            let r = match (method, path) {
                (Method::DELETE, "/mcp") => delete_mcp(door, client, &parts).await,
                (Method::GET, "/mcp") => {
                    let mut r = refuse(
                        StatusCode::METHOD_NOT_ALLOWED,
                        "heddle offers no server-to-client stream on /mcp; POST requests (each answered with JSON) and DELETE to end the session",
                    );
                    r.headers_mut().insert(ALLOW, HeaderValue::from_static("POST, DELETE"));
                    r
                }
                (Method::GET, "/events") => events(door, client, &parts).await,
                (Method::GET, "/cockpit/sessions") => cockpit::sessions(door, client),
                (Method::GET, "/cockpit/model") => cockpit::model(door, client, parts.uri.query().unwrap_or("")).await,
                (Method::GET, "/cockpit/job") => cockpit::job(door, client, parts.uri.query().unwrap_or("")).await,
                (Method::GET, "/cockpit/screen") => cockpit::screen(door, client, parts.uri.query().unwrap_or("")).await,
                (Method::GET, p) if cockpit::asset(p).is_some() => cockpit::asset(p).expect("checked"),
                (_, "/rpc" | "/mcp" | "/events") => refuse(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "wrong method: POST /rpc, POST or DELETE /mcp, GET /events",
                ),
                _ => refuse(
                    StatusCode::NOT_FOUND,
                    "heddle's HTTP door serves POST /rpc (JSON-RPC), /mcp (MCP streamable HTTP), GET /events?session=S&job=J (Server-Sent Events) and the cockpit page at GET /",
                ),
            };
            unread(body, r).await
        }
    };
    door.in_flight.fetch_sub(1, Ordering::SeqCst);
    r
}

/// Answer `r` to a request whose body was not needed: the body is read and dropped first (at most
/// 1 MiB), so the connection stays usable for the client's next request; a larger one closes it.
async fn unread(body: Incoming, mut r: Response<Body>) -> Response<Body> {
    if Limited::new(body, 1 << 20).collect().await.is_err() {
        r.headers_mut().insert(hyper::header::CONNECTION, HeaderValue::from_static("close"));
    }
    r
}

/// The client a request acts as, or its refusal (a foreign `Origin`, no owner, no valid token).
fn admit(door: &Door, socket_uid: Option<u32>, headers: &hyper::HeaderMap) -> Result<Client, Box<Response<Body>>> {
    if door.loopback {
        if let Some(origin) = headers.get(ORIGIN) {
            if !loopback_origin(origin.as_bytes()) {
                return Err(Box::new(refuse(
                    StatusCode::FORBIDDEN,
                    "this heddle listens on loopback and refuses requests from web pages of other origins (Origin must be a localhost address)",
                )));
            }
        }
    }
    let uid = match &door.auth {
        Auth::SocketOwner => match socket_uid {
            Some(u) => u,
            None => {
                return Err(Box::new(refuse(
                    StatusCode::UNAUTHORIZED,
                    "heddle could not find which local user owns this connection's socket (it must be on this host, in this network namespace); connect from a local process",
                )))
            }
        },
        Auth::Tokens(tokens) => {
            let token = headers
                .get(AUTHORIZATION)
                .and_then(|h| h.to_str().ok())
                .and_then(|h| h.strip_prefix("Bearer "))
                .map(str::trim);
            match token.and_then(|t| tokens.uid_of(t)) {
                Some(u) => u,
                None => {
                    let mut r = refuse(
                        StatusCode::UNAUTHORIZED,
                        if token.is_some() {
                            "this bearer token is not one of heddle's; use the token from your file in the server's --http-token-dir"
                        } else {
                            "this heddle needs a bearer token: send `Authorization: Bearer <token>` with the token from your file in the server's --http-token-dir"
                        },
                    );
                    r.headers_mut().insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"heddle\""));
                    return Err(Box::new(r));
                }
            }
        }
    };
    Ok(Client { uid, pid: None })
}

/// True for an `Origin` naming a loopback host (`http://localhost:3000`, `http://127.0.0.1`,
/// `http://[::1]:8080`); `null` and other hosts are not.
pub fn loopback_origin(origin: &[u8]) -> bool {
    let Ok(o) = std::str::from_utf8(origin) else { return false };
    let Some((_, rest)) = o.split_once("://") else { return false };
    let host = rest.split('/').next().unwrap_or("");
    let host = if let Some(v6) = host.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map_or(host, |(h, _)| h)
    };
    host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The body, whole, or the response refusing it.
async fn body(req: Request<Incoming>) -> Result<Bytes, Response<Body>> {
    let too_big = || {
        refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!("the request body is over {MAX_BODY} bytes; send smaller requests (large data belongs in files the job reads)"),
        )
    };
    let declared = req.headers().get(hyper::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        return Err(too_big());
    }
    match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => Ok(b.to_bytes()),
        Err(e) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => Err(too_big()),
        Err(e) => Err(refuse(StatusCode::BAD_REQUEST, &format!("the request body could not be read: {e}"))),
    }
}

/// Run `f`, a kernel call that may block up to `yield_ms`, on this thread: the runtime hands its other
/// work to another thread meanwhile (`block_in_place`), so the answer needs no hand-off to a pool
/// thread and back. A panic is answered `500`.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, Response<Body>> {
    tokio::task::block_in_place(|| std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))).map_err(|_| {
        refuse(
            StatusCode::INTERNAL_SERVER_ERROR,
            "answering this request failed unexpectedly; the server keeps running",
        )
    })
}

async fn post_rpc(door: &Door, client: Client, req: Request<Incoming>) -> Response<Body> {
    let body = match body(req).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let kernel = door.kernel.clone();
    let answered = blocking(move || {
        let (reply, named) = answer_line_on(&kernel, &client, &body, None);
        (reply, named.map(|s| (kernel, s)))
    })
    .await;
    match answered {
        Ok((reply, named)) => {
            if let Some((kernel, s)) = named {
                // The database rows after the reply, as on the socket.
                after_answer_in_background(&kernel, s);
            }
            match reply {
                Some(mut r) => {
                    if r.last() == Some(&b'\n') {
                        r.pop();
                    }
                    json(StatusCode::OK, r)
                }
                None => reply_empty(StatusCode::ACCEPTED),
            }
        }
        Err(r) => r,
    }
}

/// The database rows of the session a call named, after its reply, as on the socket: no client waits
/// on them ([`after_write`]).
fn after_answer_in_background(kernel: &Arc<Kernel>, s: Arc<crate::sessions::session::Session>) {
    after_write::leave(kernel, s);
}

fn reply_empty(status: StatusCode) -> Response<Body> {
    let mut r = Response::new(http_body_util::Either::Left(Full::new(Bytes::new())));
    *r.status_mut() = status;
    r
}

const SESSION_HEADER: &str = "mcp-session-id";

fn new_session_id() -> std::io::Result<String> {
    use std::io::Read;
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

fn mcp_error(id: Option<&serde_json::value::RawValue>, kind: ErrorKind, msg: &str) -> Vec<u8> {
    let mut v = rpc::encode_error(id, &RpcError::new(kind, msg.to_owned()));
    if v.last() == Some(&b'\n') {
        v.pop();
    }
    v
}

async fn post_mcp(door: &Door, client: Client, req: Request<Incoming>) -> Response<Body> {
    if let Some(v) = req.headers().get("mcp-protocol-version") {
        if !PROTOCOL_VERSIONS.iter().any(|p| p.as_bytes() == v.as_bytes()) {
            return refuse(
                StatusCode::BAD_REQUEST,
                &format!(
                    "heddle speaks MCP protocol versions {}; this one is not among them",
                    PROTOCOL_VERSIONS.join(", ")
                ),
            );
        }
    }
    let session = req.headers().get(SESSION_HEADER).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let attach = match attach_params(req.uri().query().unwrap_or("")) {
        Ok(a) => a,
        Err(sentence) => return refuse(StatusCode::BAD_REQUEST, &sentence),
    };
    let accepts_stream = mcp_stream::accepts_stream(req.headers());
    let body = match body(req).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let kernel = door.kernel.clone();
    match session {
        Some(id) => {
            let entry = door.mcp.lock().unwrap_or_else(|e| e.into_inner()).get(&id).cloned();
            // Another uid's session is as unknown as a made-up one.
            let Some(entry) = entry.filter(|e| e.uid == client.uid) else {
                return refuse(
                    StatusCode::NOT_FOUND,
                    "there is no MCP session with this Mcp-Session-Id (it was deleted, or the server restarted); send initialize again",
                );
            };
            if accepts_stream && mcp_stream::wants_progress(&body) {
                return mcp_stream::answer(door, entry, client, body);
            }
            let k = kernel.clone();
            let answered = blocking(move || {
                let mut conn = entry.conn.lock().unwrap_or_else(|e| e.into_inner());
                let (reply, named) = conn.answer(&k, &client, &body, None);
                (reply, named)
            })
            .await
            .map(|(reply, named)| {
                if let Some(s) = named {
                    after_answer_in_background(&kernel, s);
                }
                reply
            });
            match answered {
                Ok(Some(mut r)) => {
                    if r.last() == Some(&b'\n') {
                        r.pop();
                    }
                    json(StatusCode::OK, r)
                }
                Ok(None) => reply_empty(StatusCode::ACCEPTED),
                Err(r) => r,
            }
        }
        None => {
            let held =
                door.mcp.lock().unwrap_or_else(|e| e.into_inner()).values().filter(|e| e.uid == client.uid).count();
            if held >= MAX_MCP_SESSIONS_PER_UID {
                return refuse(
                    StatusCode::TOO_MANY_REQUESTS,
                    &format!("this user holds {held} MCP sessions on the HTTP door already; DELETE /mcp the ones no longer used"),
                );
            }
            let started = blocking(move || match attach {
                // `?session=…&cwd=…`: attach first (as `heddle mcp` does), then answer the body.
                Some(params) => {
                    let line = serde_json::to_vec(
                        &serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "mcp.attach", "params": params}),
                    )
                    .unwrap_or_default();
                    match McpConnection::start(&kernel, &client, &line) {
                        Some((Some(mut conn), _)) if crate::transport::mcp::speaks_mcp(&body) => {
                            let answer = conn.answer(&kernel, &client, &body, None);
                            Some((Some(conn), answer))
                        }
                        Some((Some(_), _)) => None,
                        // Not attached: the attach error, answered to the body's request.
                        Some((None, (reply, _))) => {
                            let id = rpc::parse_request(&body)
                                .ok()
                                .and_then(|r| r.id)
                                .and_then(|i| serde_json::from_str::<serde_json::Value>(i.get()).ok());
                            let reply = reply
                                .and_then(|r| serde_json::from_slice::<serde_json::Value>(&r).ok())
                                .map(|v| serde_json::json!({"jsonrpc": "2.0", "id": id, "error": v["error"]}))
                                .and_then(|v| serde_json::to_vec(&v).ok());
                            Some((None, (reply, None)))
                        }
                        None => None,
                    }
                }
                None => McpConnection::start(&kernel, &client, &body),
            })
            .await;
            let started = match started {
                Ok(s) => s,
                Err(r) => return r,
            };
            let Some((conn, (reply, _))) = started else {
                let body = mcp_error(
                    None,
                    ErrorKind::InvalidRequest,
                    "an MCP request without an Mcp-Session-Id header must be initialize (or mcp.attach); initialize first, then send its Mcp-Session-Id with every request",
                );
                return json(StatusCode::BAD_REQUEST, body);
            };
            let mut reply = reply.unwrap_or_default();
            if reply.last() == Some(&b'\n') {
                reply.pop();
            }
            let Some(conn) = conn else {
                // mcp.attach failed: no session; the error says why.
                return json(StatusCode::OK, reply);
            };
            let id = match new_session_id() {
                Ok(id) => id,
                Err(e) => {
                    return refuse(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        &format!("cannot make a session id: {e}; try again"),
                    )
                }
            };
            let entry = Arc::new(McpEntry { uid: client.uid, conn: Mutex::new(conn) });
            door.mcp.lock().unwrap_or_else(|e| e.into_inner()).insert(id.clone(), entry);
            let mut r = json(StatusCode::OK, reply);
            if let Ok(v) = HeaderValue::from_str(&id) {
                r.headers_mut().insert(SESSION_HEADER, v);
            }
            r
        }
    }
}

async fn delete_mcp(door: &Door, client: Client, req: &hyper::http::request::Parts) -> Response<Body> {
    let Some(id) = req.headers.get(SESSION_HEADER).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned()) else {
        return refuse(StatusCode::BAD_REQUEST, "DELETE /mcp needs the Mcp-Session-Id header of the session to end");
    };
    let entry = {
        let mut map = door.mcp.lock().unwrap_or_else(|e| e.into_inner());
        match map.get(&id) {
            Some(e) if e.uid == client.uid => map.remove(&id),
            _ => None,
        }
    };
    let Some(entry) = entry else {
        return refuse(StatusCode::NOT_FOUND, "there is no MCP session with this Mcp-Session-Id; nothing to end");
    };
    let kernel = door.kernel.clone();
    // The heddle session ends only if the client attached with close_on_exit.
    match blocking(move || entry.conn.lock().unwrap_or_else(|e| e.into_inner()).finish(&kernel, &client)).await {
        Ok(()) => reply_empty(StatusCode::NO_CONTENT),
        Err(r) => r,
    }
}

/// Subscribe a new stream of this door to job `job`'s raw output from byte offsets `from` (stdout,
/// stderr): the stream's connection number, and the outbox and reader its chunks arrive in; or the
/// refusal to answer (404 for a session or job the uid does not have).
async fn subscribe_raw(
    door: &Door,
    client: Client,
    session: String,
    job: u64,
    from: [u64; 2],
) -> Result<(u64, Outbox, OutboxReader), Response<Body>> {
    let conn = door.next_conn.fetch_add(1, Ordering::Relaxed);
    let (outbox, reader) = Outbox::queued(conn);
    let kernel = door.kernel.clone();
    let ob = outbox.clone();
    let params = serde_json::json!({"session": session, "job": job, "raw": true, "from": {"stdout": from[0], "stderr": from[1]}});
    let subscribed = blocking(move || {
        let id = serde_json::value::RawValue::from_string("0".into()).expect("a JSON number");
        crate::kernel::subscribe::subscribe(&kernel, &client, params, &id, &ob)
    })
    .await;
    match subscribed {
        Ok(Ok(())) => Ok((conn, outbox, reader)),
        Ok(Err(e)) => Err(refuse(not_found_or_bad(&e), &e.message)),
        Err(r) => Err(r),
    }
}

/// 404 for a session or job the uid does not have, else 400.
fn not_found_or_bad(e: &RpcError) -> StatusCode {
    match e.kind {
        ErrorKind::UnknownSession | ErrorKind::UnknownJob => StatusCode::NOT_FOUND,
        _ => StatusCode::BAD_REQUEST,
    }
}

/// `GET /events?session=S&job=J`, resumed from `Last-Event-ID` (or `?last_event_id=`).
async fn events(door: &Door, client: Client, req: &hyper::http::request::Parts) -> Response<Body> {
    let mut session = None;
    let mut job = None;
    let mut last = req.headers.get("last-event-id").map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    for (k, v) in form_pairs(req.uri.query().unwrap_or("")) {
        match k.as_str() {
            "session" => session = Some(v),
            "job" => job = Some(v),
            "last_event_id" if last.is_none() => last = Some(v),
            _ => {}
        }
    }
    let (Some(session), Some(job)) = (session, job) else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "GET /events needs ?session=NAME&job=N: the job whose output to stream",
        );
    };
    let Ok(job) = job.parse::<u64>() else {
        return refuse(StatusCode::BAD_REQUEST, "job must be a job number, as `run` returned it");
    };
    let from = match last.as_deref().map(parse_event_id) {
        None => [0, 0],
        Some(Some(f)) => f,
        Some(None) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                "Last-Event-ID must be an id this stream sent (STDOUT-STDERR byte counts); reconnect without it to start over",
            )
        }
    };
    let (conn, outbox, reader) = match subscribe_raw(door, client, session, job, from).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let kernel = door.kernel.clone();
    let spawned = std::thread::Builder::new()
        .name(format!("sse-{}", conn - EVENTS_CONN_BASE))
        .spawn(move || pass_events(&reader, &tx, from, &kernel, conn));
    if spawned.is_err() {
        kernel_drop(&door.kernel, conn);
        return refuse(StatusCode::SERVICE_UNAVAILABLE, "cannot start an event stream now; try again");
    }
    let mut r = Response::new(http_body_util::Either::Right(EventBody { rx, outbox }));
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    r.headers_mut().insert(hyper::header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

fn kernel_drop(kernel: &Kernel, conn: u64) {
    kernel.drop_subscriptions(conn, None);
}

/// `k=v&k2=v2` with `%XX` and `+` decoded.
fn form_pairs(q: &str) -> Vec<(String, String)> {
    let decode = |s: &str| {
        let b = s.as_bytes();
        let mut out = Vec::with_capacity(b.len());
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < b.len() => {
                    match std::str::from_utf8(&b[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok()) {
                        Some(x) => {
                            out.push(x);
                            i += 2;
                        }
                        None => out.push(b'%'),
                    }
                }
                c => out.push(c),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    };
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

/// The query parameters of `/mcp`: each one a field of `mcp.attach`.
const MCP_QUERY: [&str; 5] = ["session", "cwd", "close_on_exit", "network", "policy"];

/// `mcp.attach` params from `/mcp?session=NAME&cwd=DIR&close_on_exit=true&network=false&policy=P`, or
/// `None` when the query names none of them; a parameter heddle does not know, or a flag that is not
/// `true`/`false` (`1`/`0`), is the sentence to refuse the request with (as `/rpc` refuses an unknown
/// field), so a typo never opens a session other than the one asked for.
fn attach_params(query: &str) -> Result<Option<serde_json::Value>, String> {
    let mut p = serde_json::Map::new();
    for (k, v) in form_pairs(query) {
        match k.as_str() {
            "session" | "cwd" | "policy" => {
                p.insert(k, v.into());
            }
            "close_on_exit" | "network" => {
                let flag = match v.as_str() {
                    "true" | "1" => true,
                    "false" | "0" => false,
                    _ => {
                        return Err(format!("/mcp query parameter {k}={v:?} is not a flag; give {k}=true or {k}=false"))
                    }
                };
                p.insert(k, flag.into());
            }
            _ => {
                return Err(format!(
                    "/mcp has no query parameter {k:?}; the query of an initialize POST takes {}",
                    MCP_QUERY.join(", ")
                ))
            }
        }
    }
    Ok((!p.is_empty()).then_some(serde_json::Value::Object(p)))
}

/// `STDOUT-STDERR` byte counts.
pub fn parse_event_id(s: &str) -> Option<[u64; 2]> {
    let (o, e) = s.trim().split_once('-')?;
    Some([o.parse().ok()?, e.parse().ok()?])
}

/// The next batch of a stream's subscription, or `None` when the stream is over (the subscription ended
/// or the client went away). While it is quiet, a comment line every [`KEEPALIVE`] keeps proxies from
/// timing the stream out and finds a client that went away (its write fails, the body is dropped, the
/// next send here fails).
fn next_batch(reader: &OutboxReader, tx: &tokio::sync::mpsc::Sender<Bytes>) -> Option<Vec<u8>> {
    loop {
        match reader.next_within(KEEPALIVE) {
            Some(Some(b)) => return Some(b),
            Some(None) => return None,
            None => tx.blocking_send(Bytes::from_static(b": keepalive\n\n")).ok()?,
        }
    }
}

/// The event stream's thread: notifications from the outbox to SSE events for the response body, until
/// the job settled, the subscription overflowed, or the client went away.
fn pass_events(
    reader: &OutboxReader,
    tx: &tokio::sync::mpsc::Sender<Bytes>,
    mut at: [u64; 2],
    kernel: &Kernel,
    conn: u64,
) {
    while let Some(batch) = next_batch(reader, tx) {
        let mut out = Vec::new();
        let mut end = false;
        for line in batch.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            let Ok(v) = serde_json::from_slice::<serde_json::Value>(line) else { continue };
            let method = v.get("method").and_then(|m| m.as_str());
            let p = &v["params"];
            let event = match method {
                None => "subscribed",
                Some("output") => {
                    let s = usize::from(p["stream"] == "stderr");
                    let till = p["offset"].as_u64().unwrap_or(0) + p["len"].as_u64().unwrap_or(0);
                    at[s] = at[s].max(till);
                    "output"
                }
                Some("job.settled") => {
                    end = true;
                    "job.settled"
                }
                Some("subscription.overflow") => {
                    end = true;
                    "subscription.overflow"
                }
                Some(m) => m,
            };
            let data = if method.is_none() { &v["result"] } else { p };
            if method.is_some() {
                out.extend_from_slice(format!("id: {}-{}\n", at[0], at[1]).as_bytes());
            }
            out.extend_from_slice(format!("event: {event}\ndata: {data}\n\n").as_bytes());
            if end {
                break;
            }
        }
        if !out.is_empty() && tx.blocking_send(Bytes::from(out)).is_err() {
            break;
        }
        if end {
            break;
        }
    }
    reader.close();
    kernel.drop_subscriptions(conn, None);
}

/// The response body of an event stream; dropping it (the client went away) closes the outbox, which
/// ends the stream's thread and its subscription.
#[derive(Debug)]
pub struct EventBody {
    rx: tokio::sync::mpsc::Receiver<Bytes>,
    outbox: Outbox,
}

impl hyper::body::Body for EventBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.rx.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
    }
}

impl Drop for EventBody {
    fn drop(&mut self) {
        self.outbox.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn origins_on_loopback_only() {
        for o in ["http://localhost:3000", "http://127.0.0.1", "http://[::1]:8080", "https://LOCALHOST/x"] {
            assert!(loopback_origin(o.as_bytes()), "{o}");
        }
        for o in ["http://evil.example", "null", "http://127.0.0.1.evil.example", "http://localhost.evil:1", ""] {
            assert!(!loopback_origin(o.as_bytes()), "{o}");
        }
    }

    #[test]
    fn event_ids_and_queries_parse() {
        assert_eq!(parse_event_id("12-0"), Some([12, 0]));
        assert_eq!(parse_event_id("12"), None);
        assert_eq!(parse_event_id("-1-2"), None);
        assert_eq!(
            form_pairs("session=my%20s&job=3&x"),
            [("session".into(), "my s".into()), ("job".into(), "3".into()), ("x".into(), String::new())]
        );
        assert_eq!(form_pairs("a=%"), [("a".into(), "%".into())]);
    }

    #[test]
    fn an_mcp_query_names_only_attach_fields() {
        assert_eq!(attach_params(""), Ok(None));
        assert_eq!(
            attach_params("session=a&cwd=%2Ftmp&close_on_exit=1&network=false&policy=p"),
            Ok(Some(
                serde_json::json!({"session": "a", "cwd": "/tmp", "close_on_exit": true, "network": false, "policy": "p"})
            ))
        );
        // A typo opens no anonymous session: the refusal names it and the parameters there are.
        let e = attach_params("cwd=/tmp/ws&sesion=typo").unwrap_err();
        assert!(e.contains("\"sesion\"") && e.contains("session, cwd, close_on_exit, network, policy"), "{e}");
        let e = attach_params("close_on_exit=yes").unwrap_err();
        assert!(e.contains("close_on_exit=true"), "{e}");
    }

    proptest! {
        #[test]
        fn garbage_never_panics(s in "(?s).{0,200}", b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = form_pairs(&s);
            let _ = attach_params(&s);
            let _ = parse_event_id(&s);
            let _ = loopback_origin(&b);
            let _ = loopback_origin(s.as_bytes());
        }
    }
}
