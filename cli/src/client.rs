//! A blocking JSON-RPC 2.0 client for the control socket: one request line out, one response line in.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

/// Errors of one call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    #[error("control socket i/o failed")]
    Io(#[from] std::io::Error),
    #[error("server sent something that is not a JSON-RPC response: {0}")]
    BadResponse(String),
    #[error("server closed the connection")]
    Closed,
    /// The server answered with a JSON-RPC error.
    #[error("{message} (code {code})")]
    Rpc { code: i64, message: String, data: Value },
}

impl CallError {
    /// The JSON-RPC error code, when the server answered with one.
    pub fn code(&self) -> Option<i64> {
        match self {
            CallError::Rpc { code, .. } => Some(*code),
            _ => None,
        }
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").finish_non_exhaustive()
    }
}

/// One connection to the front. Notifications (lines without `id`, from `subscribe`) that arrive
/// while a call waits for its answer are kept, in order, for [`Client::next_notification`].
pub struct Client {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    next_id: u64,
    notifications: std::collections::VecDeque<Value>,
}

impl Client {
    /// Connect to the socket at `path`.
    pub fn connect(path: &Path) -> std::io::Result<Client> {
        let writer = UnixStream::connect(path)?;
        let reader = BufReader::new(writer.try_clone()?);
        Ok(Client { reader, writer, next_id: 1, notifications: Default::default() })
    }

    /// Give up on an answer after `t` (`None`: wait as long as it takes).
    pub fn set_timeout(&self, t: Option<std::time::Duration>) -> std::io::Result<()> {
        self.writer.set_read_timeout(t)
    }

    /// The connection's two halves, for a client that stops making calls and relays bytes (`heddle
    /// mcp`): whatever the reader already buffered stays in it.
    pub fn into_parts(self) -> (BufReader<UnixStream>, UnixStream) {
        (self.reader, self.writer)
    }

    /// Call `method` with `params`; the result on success.
    pub fn call(&mut self, method: &str, params: Value) -> Result<Value, CallError> {
        let id = self.next_id;
        self.next_id += 1;
        let req = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let resp = self.send_line(&req.to_string())?;
        if resp.get("id") == Some(&Value::Null) && resp.get("error").is_some() {
            // The server refused the connection itself (too many connections), before any request.
            return into_result(resp);
        }
        if resp.get("id") != Some(&json!(id)) {
            return Err(CallError::BadResponse(format!("response id does not match request {id}: {resp}")));
        }
        into_result(resp)
    }

    /// Send one raw line (no newline needed) and read one response object, whatever it is.
    pub fn send_line(&mut self, line: &str) -> Result<Value, CallError> {
        let mut buf = Vec::with_capacity(line.len() + 1);
        buf.extend_from_slice(line.as_bytes());
        buf.push(b'\n');
        if let Err(e) = self.writer.write_all(&buf) {
            // A server that refused the connection closed it after saying why: read the why.
            return self.read_response().map_err(|_| CallError::from(e));
        }
        self.read_response()
    }

    /// Read the next response line (notifications before it are queued).
    pub fn read_response(&mut self) -> Result<Value, CallError> {
        loop {
            let v = self.read_line()?;
            if v.get("id").is_none() && v.get("method").is_some() {
                self.notifications.push_back(v);
                continue;
            }
            return Ok(v);
        }
    }

    /// The next notification: a queued one, else the next line read (which must be one).
    pub fn next_notification(&mut self) -> Result<Value, CallError> {
        if let Some(n) = self.notifications.pop_front() {
            return Ok(n);
        }
        let v = self.read_line()?;
        if v.get("id").is_some() {
            return Err(CallError::BadResponse(format!("expected a notification, got a response: {v}")));
        }
        Ok(v)
    }

    /// Receive timeout of the socket (`None`: block).
    pub fn set_read_timeout(&self, t: Option<std::time::Duration>) -> std::io::Result<()> {
        self.writer.set_read_timeout(t)
    }

    fn read_line(&mut self) -> Result<Value, CallError> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(CallError::Closed);
        }
        serde_json::from_str(&line).map_err(|e| CallError::BadResponse(format!("{e}: {}", line.trim_end())))
    }
}

/// Split a response object into its result or its error.
pub fn into_result(mut resp: Value) -> Result<Value, CallError> {
    if let Some(err) = resp.get_mut("error") {
        let code = err.get("code").and_then(Value::as_i64).unwrap_or(0);
        let message = err.get("message").and_then(Value::as_str).unwrap_or("").to_string();
        let data = err.get("data").cloned().unwrap_or(Value::Null);
        return Err(CallError::Rpc { code, message, data });
    }
    resp.get_mut("result").map(Value::take).ok_or_else(|| CallError::BadResponse(resp.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_objects_become_rpc_errors() {
        let e = into_result(json!({"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no such method"}}));
        assert_eq!(e.unwrap_err().code(), Some(-32601));
    }

    #[test]
    fn results_are_returned() {
        assert_eq!(into_result(json!({"id":1,"result":{"a":1}})).unwrap(), json!({"a":1}));
        assert!(into_result(json!({"id":1})).is_err());
    }
}
