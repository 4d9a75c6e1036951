//! `output {session, job, stream?, offset?, len?}`: raw stored bytes of one stream, read from the job's
//! output file (`stdout` by default, from byte `offset`, at most `len` bytes — default and maximum
//! 4 MiB; a larger `len` is clamped with a note).
//!
//! The job's buffered output is flushed first, so every byte counted so far is readable; the file is
//! then read outside the session's lock (flushed records never change). `encoding` is `utf8` when the
//! bytes are valid UTF-8, else `base64` (standard alphabet, padded). `total` is the stream's exact byte
//! count; if storing failed (disk full), bytes past the stored ones cannot be read and `note` says so.
//!
//! ```text
//! → {"jsonrpc":"2.0","id":6,"method":"output","params":{"session":"demo","job":1,"offset":6,"len":5}}
//! ← {"jsonrpc":"2.0","id":6,"result":{"session":"demo","job":1,"stream":"stdout","offset":6,"len":5,
//!    "total":12,"encoding":"utf8","data":"world","complete":true,"note":null,"announcements":[]}}
//! ```

use crate::kernel::{unknown_job, Client, Kernel};
use crate::results::{join_notes, OutputResult};
use crate::rpc::{self, RpcError};
use crate::supervisor_link::error_chain;
use crate::view::stream_index;
use base64::Engine;
use serde::Deserialize;
use serde_json::Value;
use shm_proto::msg::{JobId, Stream};
use std::time::Instant;

/// Default and largest `len`.
pub const MAX_READ: u64 = 4 * 1024 * 1024;

#[derive(Deserialize, Clone, Copy, Default)]
#[serde(rename_all = "lowercase")]
enum StreamName {
    #[default]
    Stdout,
    Stderr,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Params {
    session: String,
    job: JobId,
    #[serde(default)]
    stream: StreamName,
    #[serde(default)]
    offset: u64,
    #[serde(default)]
    len: Option<u64>,
}

pub(crate) fn call(k: &Kernel, client: &Client, params: Value) -> Result<OutputResult, RpcError> {
    let p: Params = rpc::params("output", params)?;
    let (stream, name) = match p.stream {
        StreamName::Stdout => (Stream::Stdout, "stdout"),
        StreamName::Stderr => (Stream::Stderr, "stderr"),
    };
    let mut notes = Vec::new();
    let len = match p.len {
        Some(l) if l > MAX_READ => {
            notes.push(format!("len {l} exceeds the maximum {MAX_READ}; read {MAX_READ} bytes at most"));
            MAX_READ
        }
        l => l.unwrap_or(MAX_READ),
    };
    let s = k.session(client, &p.session)?;
    let (plan, total, complete) = {
        let mut st = s.lock();
        let job = st.jobs.get_mut(&p.job).ok_or_else(|| unknown_job(&p.session, p.job))?;
        let (plan, stored) = job.plan_read(stream, p.offset);
        if let (Some(err), true) = (job.store_error(), p.offset.saturating_add(len) > stored) {
            notes.push(err.to_owned());
        }
        (plan, job.counts()[stream_index(stream)], job.settled())
    };
    let data = plan.read(len as usize).map_err(|e| {
        RpcError::internal(format!("reading the stored output of job {} failed: {}", p.job, error_chain(&e)))
    })?;
    let n = data.len() as u64;
    let (encoding, data) = match String::from_utf8(data) {
        Ok(text) => ("utf8", text),
        Err(e) => ("base64", base64::engine::general_purpose::STANDARD.encode(e.into_bytes())),
    };
    let announcements = s.lock().take_announcements(Instant::now());
    Ok(OutputResult {
        session: p.session,
        job: p.job,
        stream: name,
        offset: p.offset,
        len: n,
        total,
        encoding,
        data,
        complete,
        note: join_notes(notes),
        announcements,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{big_byte, Harness};
    use serde_json::json;

    fn read(h: &Harness, params: Value) -> Value {
        h.ok("output", params)
    }

    #[test]
    fn streams_offsets_and_encodings() {
        let h = Harness::new();
        h.open("demo");
        h.run("demo", "echo hello world", 5000);
        h.run("demo", "err oops", 5000);
        let r = read(&h, json!({"session": "demo", "job": 1, "offset": 6, "len": 5}));
        assert_eq!(
            (r["data"].as_str(), r["encoding"].as_str(), r["len"].as_u64()),
            (Some("world"), Some("utf8"), Some(5))
        );
        assert_eq!(
            (r["total"].as_u64(), r["complete"].as_bool(), r["stream"].as_str()),
            (Some(12), Some(true), Some("stdout"))
        );
        let r = read(&h, json!({"session": "demo", "job": 2, "stream": "stderr"}));
        assert_eq!(r["data"], "oops\n");
        let r = read(&h, json!({"session": "demo", "job": 1, "offset": 100}));
        assert_eq!((r["data"].as_str(), r["len"].as_u64()), (Some(""), Some(0)));
        let e = h.call("output", json!({"session": "demo", "job": 1, "stream": "stdin"})).unwrap_err();
        assert_eq!(e.kind, crate::rpc::ErrorKind::InvalidParams);
    }

    #[test]
    fn non_utf8_bytes_come_back_as_base64() {
        let h = Harness::new();
        h.open("demo");
        h.run("demo", "big 300", 5000);
        let r = read(&h, json!({"session": "demo", "job": 1, "offset": 120, "len": 10}));
        assert_eq!(r["encoding"], "base64");
        let bytes = base64::engine::general_purpose::STANDARD.decode(r["data"].as_str().unwrap()).unwrap();
        assert_eq!(bytes, (120..130).map(big_byte).collect::<Vec<_>>());
    }

    #[test]
    fn len_is_clamped_with_a_note() {
        let h = Harness::new();
        h.open("demo");
        h.run("demo", "echo x", 5000);
        let r = read(&h, json!({"session": "demo", "job": 1, "len": 1u64 << 40}));
        assert!(r["note"].as_str().unwrap().contains("exceeds the maximum 4194304"));
    }

    #[test]
    fn fifty_mib_round_trip_exactly_through_the_view_and_output() {
        let h = Harness::new();
        h.open("demo");
        let total: u64 = 50 * 1024 * 1024;
        let r = h.run("demo", &format!("big {total}"), 120_000);
        assert_eq!((r["state"].as_str(), r["stdout_bytes"].as_u64()), (Some("exited"), Some(total)));
        assert_eq!(r["view"], "<binary: 50.0 MiB, data>\n", "binary output is named, not printed");
        assert!(r["omitted"].is_null());
        let mut offset = 0u64;
        while offset < total {
            let r = read(&h, json!({"session": "demo", "job": 1, "offset": offset}));
            let data = base64::engine::general_purpose::STANDARD.decode(r["data"].as_str().unwrap()).unwrap();
            assert_eq!(data.len() as u64, (total - offset).min(MAX_READ));
            assert!(
                data.iter().enumerate().all(|(i, b)| *b == big_byte(offset + i as u64)),
                "bytes at {offset} differ"
            );
            offset += data.len() as u64;
        }
    }
}
