//! JSON-RPC 2.0 framing: parsing one request line, encoding one response line, and the error table.
//!
//! A line from a client is untrusted. [`parse_request`] turns it into a [`Request`] or an [`RpcError`]
//! (with whatever `id` could be recovered), and never panics, whatever the bytes (property-tested
//! below). The request `id` is kept as the raw JSON text the client sent, so it is echoed byte for byte
//! (a number stays the same number, however large). Requests without an `id` member are notifications:
//! they run, but get no response.
//!
//! ```
//! use front::rpc::{parse_request, ErrorKind};
//! let req = parse_request(br#"{"jsonrpc":"2.0","id":7,"method":"jobs","params":{"session":"s1"}}"#).unwrap();
//! assert_eq!((req.method.as_str(), req.id.as_ref().map(|i| i.get())), ("jobs", Some("7")));
//! let err = parse_request(b"{nope").unwrap_err();
//! assert_eq!(err.error.kind, ErrorKind::ParseError);
//! ```

pub mod outbox;
pub mod results;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

/// The longest request line accepted, newline excluded.
pub const MAX_LINE: usize = 16 * 1024 * 1024;

/// The stable error kinds of the protocol (docs/protocol.md, "Errors").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    ParseError,
    InvalidRequest,
    MethodNotFound,
    InvalidParams,
    UnknownSession,
    UnknownJob,
    SessionLost,
    ShuttingDown,
    SessionOpenFailed,
    Internal,
    IdempotencyConflict,
    UnknownReceipt,
    NotPermitted,
    /// The connection comes from one of heddle's own jobs (`peer_check`).
    JobPeerRefused,
    /// The connection was over the server's connection limits (per uid or in total) and was closed.
    TooManyConnections,
}

impl ErrorKind {
    /// The JSON-RPC error code.
    pub fn code(self) -> i64 {
        match self {
            ErrorKind::ParseError => -32700,
            ErrorKind::InvalidRequest => -32600,
            ErrorKind::MethodNotFound => -32601,
            ErrorKind::InvalidParams => -32602,
            ErrorKind::UnknownSession => -32001,
            ErrorKind::UnknownJob => -32002,
            ErrorKind::SessionLost => -32003,
            ErrorKind::ShuttingDown => -32004,
            ErrorKind::SessionOpenFailed => -32005,
            ErrorKind::Internal => -32000,
            ErrorKind::IdempotencyConflict => -32010,
            ErrorKind::UnknownReceipt => -32011,
            ErrorKind::NotPermitted => -32012,
            ErrorKind::JobPeerRefused => -32013,
            ErrorKind::TooManyConnections => -32014,
        }
    }

    /// The `data.kind` string.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::ParseError => "parse_error",
            ErrorKind::InvalidRequest => "invalid_request",
            ErrorKind::MethodNotFound => "method_not_found",
            ErrorKind::InvalidParams => "invalid_params",
            ErrorKind::UnknownSession => "unknown_session",
            ErrorKind::UnknownJob => "unknown_job",
            ErrorKind::SessionLost => "session_lost",
            ErrorKind::ShuttingDown => "shutting_down",
            ErrorKind::SessionOpenFailed => "session_open_failed",
            ErrorKind::Internal => "internal",
            ErrorKind::IdempotencyConflict => "idempotency_conflict",
            ErrorKind::UnknownReceipt => "unknown_receipt",
            ErrorKind::NotPermitted => "not_permitted",
            ErrorKind::JobPeerRefused => "job_peer_refused",
            ErrorKind::TooManyConnections => "too_many_connections",
        }
    }
}

/// An error answered to a client: a stable kind and a sentence saying what happened and what to do.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct RpcError {
    pub kind: ErrorKind,
    pub message: String,
}

impl RpcError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> RpcError {
        RpcError { kind, message: message.into() }
    }

    pub fn invalid_params(method: &str, why: impl std::fmt::Display) -> RpcError {
        RpcError::new(ErrorKind::InvalidParams, format!("invalid params for {method}: {why}; see docs/protocol.md"))
    }

    pub fn internal(message: impl Into<String>) -> RpcError {
        RpcError::new(ErrorKind::Internal, message)
    }

    pub fn shutting_down() -> RpcError {
        RpcError::new(
            ErrorKind::ShuttingDown,
            "the server is shutting down and takes no new work; retry once heddle is running again",
        )
    }
}

/// A parsed request.
#[derive(Debug)]
pub struct Request {
    /// The raw `id` (number, string or null); `None` for a notification.
    pub id: Option<Box<RawValue>>,
    pub method: String,
    /// The `params` object (`{}` when absent).
    pub params: Value,
}

/// A request that could not be parsed, and the id to answer it with (`None`: answer with `null`, or
/// not at all when the request was a well-formed notification).
#[derive(Debug)]
pub struct BadRequest {
    pub id: Option<Box<RawValue>>,
    /// True when the line was a notification (had no `id`): no response is sent.
    pub notification: bool,
    pub error: RpcError,
}

/// The envelope, with every member optional so each defect gets its own message.
#[derive(Deserialize)]
struct Envelope {
    #[serde(default)]
    jsonrpc: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    id: Option<Box<RawValue>>,
    #[serde(default)]
    method: Option<Value>,
    #[serde(default)]
    params: Option<Value>,
}

/// `Some(raw)` whenever the member is present, `null` included (serde's `Option` maps null to `None`).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Box<RawValue>>, D::Error> {
    Box::<RawValue>::deserialize(d).map(Some)
}

fn invalid(id: Option<Box<RawValue>>, why: &str) -> BadRequest {
    let message = format!("the request is not a JSON-RPC 2.0 request object: {why}; send one object per line");
    BadRequest { id, notification: false, error: RpcError::new(ErrorKind::InvalidRequest, message) }
}

/// Parse one line (without its newline).
pub fn parse_request(line: &[u8]) -> Result<Request, BadRequest> {
    if let Err(e) = serde_json::from_slice::<&RawValue>(line) {
        let message = format!("the line is not valid JSON ({e}); send one JSON-RPC 2.0 request object per line");
        return Err(BadRequest { id: None, notification: false, error: RpcError::new(ErrorKind::ParseError, message) });
    }
    let trimmed = line.trim_ascii_start();
    if trimmed.first() == Some(&b'[') {
        return Err(invalid(None, "batches are not supported"));
    }
    let env: Envelope = match serde_json::from_slice(line) {
        Ok(env) => env,
        Err(e) => return Err(invalid(None, &e.to_string())),
    };
    let id = match env.id {
        Some(raw) if !matches!(raw.get().as_bytes().first(), Some(b'"' | b'-' | b'0'..=b'9' | b'n')) => {
            return Err(invalid(None, "`id` must be a number, a string or null"));
        }
        id => id,
    };
    let notification = id.is_none();
    let fail = |id, why: &str| BadRequest { notification, ..invalid(id, why) };
    if env.jsonrpc.as_ref().and_then(Value::as_str) != Some("2.0") {
        return Err(fail(id, "`jsonrpc` must be \"2.0\""));
    }
    let method = match env.method {
        Some(Value::String(m)) => m,
        _ => return Err(fail(id, "`method` must be a string")),
    };
    let params = match env.params {
        None | Some(Value::Null) => Value::Object(Default::default()),
        Some(p @ Value::Object(_)) => p,
        Some(_) => {
            let error = RpcError::invalid_params(&method, "`params` must be an object");
            return Err(BadRequest { id, notification, error });
        }
    };
    Ok(Request { id, method, params })
}

/// `true`, for `#[serde(default = "crate::rpc::yes")]`.
pub fn yes() -> bool {
    true
}

/// Parse a method's params into its typed struct; a wrong or missing member is `invalid_params` with
/// serde's explanation.
pub fn params<T: DeserializeOwned>(method: &str, params: Value) -> Result<T, RpcError> {
    serde_json::from_value(params).map_err(|e| RpcError::invalid_params(method, e))
}

#[derive(Serialize)]
struct ErrorData {
    kind: &'static str,
}

#[derive(Serialize)]
struct ErrorObject<'a> {
    code: i64,
    message: &'a str,
    data: ErrorData,
}

#[derive(Serialize)]
struct Response<'a, T: Serialize> {
    jsonrpc: &'static str,
    id: &'a RawValue,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a T>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<ErrorObject<'a>>,
}

fn null_id() -> &'static RawValue {
    // `null` is valid JSON, so this never fails.
    static NULL: std::sync::OnceLock<Box<RawValue>> = std::sync::OnceLock::new();
    NULL.get_or_init(|| RawValue::from_string("null".to_owned()).expect("null is JSON"))
}

/// Encode a success response line (newline included).
pub fn encode_result<T: Serialize>(id: Option<&RawValue>, result: &T) -> Vec<u8> {
    let resp = Response { jsonrpc: "2.0", id: id.unwrap_or(null_id()), result: Some(result), error: None };
    finish(serde_json::to_vec(&resp))
}

/// Encode an error response line (newline included).
pub fn encode_error(id: Option<&RawValue>, err: &RpcError) -> Vec<u8> {
    let error = ErrorObject { code: err.kind.code(), message: &err.message, data: ErrorData { kind: err.kind.name() } };
    let resp = Response::<()> { jsonrpc: "2.0", id: id.unwrap_or(null_id()), result: None, error: Some(error) };
    finish(serde_json::to_vec(&resp))
}

fn finish(encoded: Result<Vec<u8>, serde_json::Error>) -> Vec<u8> {
    let mut out = encoded.unwrap_or_else(|e| {
        // Serializing our own result types cannot fail in practice; answer something valid regardless.
        let msg = serde_json::to_string(&format!("the response could not be encoded: {e}")).unwrap_or_default();
        format!(
            r#"{{"jsonrpc":"2.0","id":null,"error":{{"code":-32000,"message":{msg},"data":{{"kind":"internal"}}}}}}"#
        )
        .into_bytes()
    });
    out.push(b'\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn err_kind(line: &str) -> ErrorKind {
        parse_request(line.as_bytes()).unwrap_err().error.kind
    }

    #[test]
    fn a_good_request_parses() {
        let r = parse_request(br#" {"jsonrpc":"2.0","id":"a-1","method":"run","params":{"cmd":"x"}}"#).unwrap();
        assert_eq!(r.method, "run");
        assert_eq!(r.id.unwrap().get(), r#""a-1""#);
        assert_eq!(r.params["cmd"], "x");
    }

    #[test]
    fn huge_numeric_ids_are_echoed_exactly() {
        let r = parse_request(br#"{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"jobs"}"#).unwrap();
        let line = encode_result(r.id.as_deref(), &serde_json::json!({}));
        assert!(String::from_utf8(line).unwrap().contains(r#""id":123456789012345678901234567890"#));
    }

    #[test]
    fn missing_params_become_an_empty_object() {
        let r = parse_request(br#"{"jsonrpc":"2.0","id":1,"method":"describe"}"#).unwrap();
        assert_eq!(r.params, serde_json::json!({}));
    }

    #[test]
    fn each_defect_has_its_kind() {
        assert_eq!(err_kind("{"), ErrorKind::ParseError);
        assert_eq!(err_kind(""), ErrorKind::ParseError);
        assert_eq!(err_kind("[1]"), ErrorKind::InvalidRequest);
        assert_eq!(err_kind("42"), ErrorKind::InvalidRequest);
        assert_eq!(err_kind(r#"{"id":1,"method":"run"}"#), ErrorKind::InvalidRequest);
        assert_eq!(err_kind(r#"{"jsonrpc":"1.0","id":1,"method":"run"}"#), ErrorKind::InvalidRequest);
        assert_eq!(err_kind(r#"{"jsonrpc":"2.0","id":{},"method":"run"}"#), ErrorKind::InvalidRequest);
        assert_eq!(err_kind(r#"{"jsonrpc":"2.0","id":1,"method":5}"#), ErrorKind::InvalidRequest);
        assert_eq!(err_kind(r#"{"jsonrpc":"2.0","id":1,"method":"run","params":[1]}"#), ErrorKind::InvalidParams);
    }

    #[test]
    fn null_id_is_kept_and_absent_id_is_a_notification() {
        let r = parse_request(br#"{"jsonrpc":"2.0","id":null,"method":"jobs"}"#).unwrap();
        assert_eq!(r.id.unwrap().get(), "null");
        let r = parse_request(br#"{"jsonrpc":"2.0","method":"jobs"}"#).unwrap();
        assert!(r.id.is_none());
        let bad = parse_request(br#"{"jsonrpc":"2.0","method":7}"#).unwrap_err();
        assert!(bad.notification);
    }

    #[test]
    fn invalid_request_keeps_a_valid_id() {
        let bad = parse_request(br#"{"jsonrpc":"2.1","id":"x","method":"jobs"}"#).unwrap_err();
        assert_eq!(bad.id.unwrap().get(), r#""x""#);
        assert!(!bad.notification);
    }

    #[test]
    fn typed_params_report_serde_messages() {
        #[derive(Deserialize, Debug)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct P {
            session: String,
        }
        let e = params::<P>("jobs", serde_json::json!({"session": 3})).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidParams);
        assert!(e.message.contains("invalid type"), "{}", e.message);
        let e = params::<P>("jobs", serde_json::json!({})).unwrap_err();
        assert!(e.message.contains("missing field `session`"), "{}", e.message);
    }

    #[test]
    fn error_lines_carry_code_and_kind() {
        let line = encode_error(None, &RpcError::new(ErrorKind::UnknownJob, "no job"));
        let v: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(v["id"], Value::Null);
        assert_eq!(v["error"]["code"], -32002);
        assert_eq!(v["error"]["data"]["kind"], "unknown_job");
        assert_eq!(*line.last().unwrap(), b'\n');
    }

    proptest! {
        #[test]
        fn garbage_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = parse_request(&bytes);
        }

        #[test]
        fn garbage_text_is_an_error(s in "[ -~]{0,80}") {
            // A printable line that is not a request object with a string method is never accepted.
            if let Ok(r) = parse_request(s.as_bytes()) {
                prop_assert!(s.contains("\"2.0\"") && s.contains("method"), "accepted {s:?} as {r:?}");
            }
        }

        #[test]
        fn json_shaped_garbage_never_panics(
            id in prop_oneof![Just("1".to_owned()), Just("null".to_owned()), Just("[]".to_owned()), "\"[a-z]{0,5}\""],
            method in prop_oneof![Just("\"run\"".to_owned()), Just("3".to_owned()), Just("null".to_owned())],
            params in prop_oneof![Just("{}".to_owned()), Just("[]".to_owned()), Just("\"x\"".to_owned()), Just("{\"a\":{\"b\":[1,2,{}]}}".to_owned())],
            cut in 0usize..120,
        ) {
            let line = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":{method},"params":{params}}}"#);
            let cut = cut.min(line.len());
            let _ = parse_request(&line.as_bytes()[..cut]);
            let _ = parse_request(line.as_bytes());
        }

        #[test]
        fn deep_nesting_is_an_error_not_a_crash(depth in 100usize..5000) {
            let line = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            prop_assert!(parse_request(line.as_bytes()).is_err());
        }
    }
}
