//! A `POST /mcp` tool call answered as a Server-Sent Events stream, so the progress notifications of a
//! call that waits on a job reach an HTTP client as they reach a stdio one.
//!
//! Streamable HTTP lets a server answer a POST either with one JSON body or with `text/event-stream`
//! carrying JSON-RPC messages, the response last. heddle streams only when both hold: the client
//! accepts `text/event-stream`, and the request is a `tools/call` carrying `params._meta.progressToken`
//! (without a token there is nothing to stream, and one JSON body is cheaper). The stream then
//! carries `notifications/progress` messages while the call waits and ends with the call's response.
//!
//! ```text
//! → POST /mcp  Accept: application/json, text/event-stream
//!   {"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"run","arguments":{…},"_meta":{"progressToken":4}}}
//! ← 200 Content-Type: text/event-stream
//!   event: message
//!   data: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":4,"progress":1,"message":"job 3 · 0.5 s · step 1"}}
//!
//!   event: message
//!   data: {"jsonrpc":"2.0","id":4,"result":{…}}
//! ```
//!
//! A client that drops the stream cancels nothing: the call runs to its answer (observation never
//! steers a job), its progress is no longer sent, and its job goes on.

use super::{after_answer_in_background, Body, Door, EventBody, McpEntry};
use crate::kernel::Client;
use crate::rpc::outbox::Outbox;
use bytes::Bytes;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Response, StatusCode};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Whether the client accepts an event stream (`Accept` names `text/event-stream`).
pub(super) fn accepts_stream(headers: &hyper::HeaderMap) -> bool {
    headers
        .get_all(hyper::header::ACCEPT)
        .iter()
        .any(|v| v.to_str().is_ok_and(|v| v.split(',').any(|t| t.trim().starts_with("text/event-stream"))))
}

/// Whether `body` is a `tools/call` request carrying a progress token.
pub(super) fn wants_progress(body: &[u8]) -> bool {
    // A byte search first: most bodies carry no token and are not parsed twice.
    if memchr::memmem::find(body, b"progressToken").is_none() {
        return false;
    }
    serde_json::from_slice::<serde_json::Value>(body).is_ok_and(|v| {
        v["method"] == "tools/call"
            && v.get("id").is_some()
            && v["params"]["_meta"].get("progressToken").is_some_and(|t| t.is_string() || t.is_number())
    })
}

/// Answer `body` on `entry`'s MCP session as an event stream: progress while the call waits, then the
/// response.
pub(super) fn answer(door: &Door, entry: Arc<McpEntry>, client: Client, body: Bytes) -> Response<Body> {
    let conn = door.next_conn.fetch_add(1, Ordering::Relaxed);
    let (outbox, reader) = Outbox::queued(conn);
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(8);
    let kernel = door.kernel.clone();
    let ob = outbox.clone();
    tokio::task::spawn_blocking(move || {
        std::thread::scope(|scope| {
            // Every line the outbox takes (progress, then the response) becomes one SSE message.
            scope.spawn(|| {
                while let Some(batch) = reader.next() {
                    let mut out = Vec::with_capacity(batch.len() + 32);
                    for line in batch.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                        out.extend_from_slice(b"event: message\ndata: ");
                        out.extend_from_slice(line);
                        out.extend_from_slice(b"\n\n");
                    }
                    if tx.blocking_send(Bytes::from(out)).is_err() {
                        // The client went away: later sends are refused, the call still answers.
                        reader.close();
                        return;
                    }
                }
            });
            let (reply, named) = {
                let mut conn = entry.conn.lock().unwrap_or_else(|e| e.into_inner());
                conn.answer(&kernel, &client, &body, Some(&ob))
            };
            if let Some(mut reply) = reply {
                if reply.last() != Some(&b'\n') {
                    reply.push(b'\n');
                }
                ob.send(reply);
            }
            ob.close();
            if let Some(s) = named {
                after_answer_in_background(&kernel, s);
            }
        });
    });
    let mut r = Response::new(http_body_util::Either::Right(EventBody { rx, outbox }));
    *r.status_mut() = StatusCode::OK;
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    r.headers_mut().insert(hyper::header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn only_a_tool_call_with_a_token_streams() {
        let call = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run","arguments":{},"_meta":{"progressToken":"t"}}}"#;
        assert!(wants_progress(call));
        let no_token = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run","arguments":{"cmd":"progressToken"}}}"#;
        assert!(!wants_progress(no_token));
        let list = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"progressToken":1}}}"#;
        assert!(!wants_progress(list));
        let notification = br#"{"jsonrpc":"2.0","method":"tools/call","params":{"_meta":{"progressToken":1}}}"#;
        assert!(!wants_progress(notification));
        let mut h = hyper::HeaderMap::new();
        assert!(!accepts_stream(&h));
        h.insert(hyper::header::ACCEPT, HeaderValue::from_static("application/json, text/event-stream"));
        assert!(accepts_stream(&h));
    }

    proptest! {
        #[test]
        fn garbage_bodies_never_panic(b in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = wants_progress(&b);
            let mut with = b.clone();
            with.extend_from_slice(b"progressToken");
            let _ = wants_progress(&with);
        }
    }
}
