//! A minimal HTTP/1.1 client for the HTTP door's tests and bench: requests on one kept-alive
//! connection (bodies by Content-Length or chunked), and a Server-Sent Events reader.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

/// The door's bound address, from `<state_dir>/http-address` (waits for it up to 10 s).
pub fn door_address(state_dir: &Path) -> SocketAddr {
    let path = state_dir.join("http-address");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(a) = std::fs::read_to_string(&path).ok().and_then(|s| s.trim().parse().ok()) {
            return a;
        }
        assert!(Instant::now() < deadline, "{} was not written", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
}

impl std::fmt::Debug for HttpConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpConn").finish_non_exhaustive()
    }
}

/// One kept-alive connection.
pub struct HttpConn {
    r: BufReader<TcpStream>,
    w: TcpStream,
    addr: SocketAddr,
}

impl HttpConn {
    pub fn connect(addr: SocketAddr) -> std::io::Result<HttpConn> {
        let s = TcpStream::connect(addr)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(Duration::from_secs(60)))?;
        Ok(HttpConn { r: BufReader::new(s.try_clone()?), w: s, addr })
    }

    /// Send a request and read its whole response.
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<Response> {
        // Head and body in one write, as curl and fetch send a small request.
        let mut request = self.head(method, path, headers, body.len()).into_bytes();
        request.extend_from_slice(body);
        self.w.write_all(&request)?;
        let (status, headers) = read_head(&mut self.r)?;
        let body = read_body(&mut self.r, &headers)?;
        Ok(Response { status, headers, body })
    }

    /// Send a request declaring a `declared`-byte body but sending only `prefix` of it, and read the
    /// response (a server refusing the length answers before the body).
    pub fn request_declared(&mut self, path: &str, declared: usize, prefix: &[u8]) -> std::io::Result<Response> {
        self.send_head("POST", path, &[], declared)?;
        self.w.write_all(prefix)?;
        let (status, headers) = read_head(&mut self.r)?;
        let body = read_body(&mut self.r, &headers)?;
        Ok(Response { status, headers, body })
    }

    /// POST a JSON value.
    pub fn post(&mut self, path: &str, headers: &[(&str, &str)], v: &serde_json::Value) -> std::io::Result<Response> {
        let mut h = vec![("Content-Type", "application/json")];
        h.extend_from_slice(headers);
        self.request("POST", path, &h, &serde_json::to_vec(v).unwrap_or_default())
    }

    fn head(&self, method: &str, path: &str, headers: &[(&str, &str)], len: usize) -> String {
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: {len}\r\n", self.addr);
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        head
    }

    fn send_head(&mut self, method: &str, path: &str, headers: &[(&str, &str)], len: usize) -> std::io::Result<()> {
        let head = self.head(method, path, headers, len);
        self.w.write_all(head.as_bytes())
    }

    /// Start an event stream: the response head, then [`Events::next_event`] per event.
    pub fn events(self, path: &str, headers: &[(&str, &str)]) -> std::io::Result<Events> {
        self.stream("GET", path, headers, b"")
    }

    /// POST a JSON value whose answer may be an event stream (MCP's streamable HTTP).
    pub fn post_stream(self, path: &str, headers: &[(&str, &str)], v: &serde_json::Value) -> std::io::Result<Events> {
        let mut h = vec![("Content-Type", "application/json")];
        h.extend_from_slice(headers);
        self.stream("POST", path, &h, &serde_json::to_vec(v).unwrap_or_default())
    }

    fn stream(mut self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> std::io::Result<Events> {
        self.send_head(method, path, headers, body.len())?;
        self.w.write_all(body)?;
        let (status, headers) = read_head(&mut self.r)?;
        let chunked = headers.iter().any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
        let body = if chunked { Vec::new() } else { read_body(&mut self.r, &headers)? };
        Ok(Events { conn: self, status, body, chunked, buf: Vec::new() })
    }
}

fn read_head(r: &mut impl BufRead) -> std::io::Result<(u16, Vec<(String, String)>)> {
    let mut line = String::new();
    r.read_line(&mut line)?;
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP status line: {line:?}")))?;
    let mut headers = Vec::new();
    loop {
        line.clear();
        r.read_line(&mut line)?;
        let l = line.trim_end();
        if l.is_empty() {
            return Ok((status, headers));
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.push((k.trim().to_owned(), v.trim().to_owned()));
        }
    }
}

fn read_body(r: &mut impl BufRead, headers: &[(String, String)]) -> std::io::Result<Vec<u8>> {
    let get = |n: &str| headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(n)).map(|(_, v)| v.as_str());
    if get("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        let mut out = Vec::new();
        while let Some(c) = read_chunk(r)? {
            out.extend_from_slice(&c);
        }
        return Ok(out);
    }
    let len: usize = get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    let mut body = vec![0; len];
    r.read_exact(&mut body)?;
    Ok(body)
}

/// One chunk of a chunked body; `None` at the last.
fn read_chunk(r: &mut impl BufRead) -> std::io::Result<Option<Vec<u8>>> {
    let mut line = String::new();
    r.read_line(&mut line)?;
    if line.is_empty() {
        return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
    }
    let n = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
        .map_err(|_| std::io::Error::other(format!("bad chunk size {line:?}")))?;
    let mut c = vec![0; n];
    r.read_exact(&mut c)?;
    let mut crlf = [0; 2];
    r.read_exact(&mut crlf)?;
    Ok((n > 0).then_some(c))
}

/// One Server-Sent Event.
#[derive(Debug, Clone)]
pub struct Event {
    pub id: Option<String>,
    pub event: String,
    pub data: String,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events").finish_non_exhaustive()
    }
}

/// An open event stream.
pub struct Events {
    conn: HttpConn,
    pub status: u16,
    /// The body of a response that is not a stream (a refusal).
    pub body: Vec<u8>,
    chunked: bool,
    buf: Vec<u8>,
}

impl Events {
    /// The next event; `None` when the stream ended.
    pub fn next_event(&mut self) -> std::io::Result<Option<Event>> {
        loop {
            if let Some(at) = self.buf.windows(2).position(|w| w == b"\n\n") {
                let raw: Vec<u8> = self.buf.drain(..at + 2).collect();
                let text = String::from_utf8_lossy(&raw);
                let mut e = Event { id: None, event: "message".into(), data: String::new() };
                for l in text.lines() {
                    if let Some(v) = l.strip_prefix("id: ") {
                        e.id = Some(v.to_owned());
                    } else if let Some(v) = l.strip_prefix("event: ") {
                        e.event = v.to_owned();
                    } else if let Some(v) = l.strip_prefix("data: ") {
                        e.data.push_str(v);
                    }
                }
                return Ok(Some(e));
            }
            if !self.chunked {
                return Ok(None);
            }
            match read_chunk(&mut self.conn.r)? {
                Some(c) => self.buf.extend_from_slice(&c),
                None => return Ok(None),
            }
        }
    }
}
