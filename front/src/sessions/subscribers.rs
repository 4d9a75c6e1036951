//! The live subscribers of a session and the notifications the pump sends them (`output`,
//! `job.end`, `job.settled`); the `subscribe` method itself is [`crate::kernel::subscribe`], whose
//! docs give the protocol.
//!
//! The pump builds each notification while it applies the event (under the session's lock, no file
//! read) and sends the bytes through the connection's [`Outbox`]: straight into the socket when
//! nothing waits for it (non-blocking), else queued for the connection's writer thread — the pump
//! never blocks on a socket. Each subscription numbers its notifications (`seq` from 1, no gaps). A
//! subscriber whose connection stops reading is cut off once more than [`MAX_QUEUED`] bytes wait for
//! it, with a last `subscription.overflow` notification that says so — never a silent gap.

use crate::output::rendered::FreshLine;
use crate::rpc::results::JobPhase;
use base64::Engine;
use serde::Serialize;
use shm_proto::msg::JobId;
use std::sync::atomic::{AtomicU64, Ordering};

pub use crate::rpc::outbox::{Outbox, MAX_QUEUED};

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// One subscription, kept in its session's state.
#[derive(Debug)]
pub struct Subscriber {
    pub id: u64,
    pub job: Option<JobId>,
    pub raw: bool,
    seq: u64,
    outbox: Outbox,
}

impl Subscriber {
    /// A new subscription `id` on `outbox` to one job's output (or every job's), numbered from 1.
    pub fn new(id: u64, job: Option<JobId>, raw: bool, outbox: Outbox) -> Subscriber {
        Subscriber { id, job, raw, seq: 0, outbox }
    }

    /// A fresh subscription id, unique in this process.
    pub fn next_id() -> u64 {
        NEXT_ID.fetch_add(1, Ordering::Relaxed)
    }
}

#[derive(Serialize)]
struct Note<'a, P: Serialize> {
    jsonrpc: &'static str,
    method: &'a str,
    params: P,
}

#[derive(Serialize)]
struct LineOut<'a> {
    line: u64,
    stream: &'static str,
    text: &'a str,
}

#[derive(Serialize)]
struct OutputParams<'a> {
    subscription: u64,
    seq: u64,
    session: &'a str,
    job: JobId,
    stream: &'static str,
    offset: u64,
    len: u64,
    at_unix_ns: u64,
    read_mono_ns: Option<u64>,
    read_unix_ns: Option<u64>,
    lines: &'a [LineOut<'a>],
    data: Option<String>,
    encoding: Option<&'static str>,
}

#[derive(Serialize)]
struct EndParams<'a> {
    subscription: u64,
    seq: u64,
    session: &'a str,
    job: JobId,
    state: JobPhase,
    exit_code: Option<i32>,
    signal: Option<i32>,
    lines: &'a [LineOut<'a>],
}

fn line_json<P: Serialize>(method: &str, params: P) -> Vec<u8> {
    let mut v = serde_json::to_vec(&Note { jsonrpc: "2.0", method, params }).unwrap_or_default();
    v.push(b'\n');
    v
}

fn stream_name(s: u8) -> &'static str {
    if s == 0 {
        "stdout"
    } else {
        "stderr"
    }
}

fn lines_out(fresh: &[FreshLine]) -> Vec<LineOut<'_>> {
    fresh.iter().map(|l| LineOut { line: l.line, stream: stream_name(l.stream), text: &l.text }).collect()
}

/// A chunk as the pump saw it.
#[derive(Debug)]
pub struct Chunk<'a> {
    pub job: JobId,
    pub stream: u8,
    pub offset: u64,
    pub data: &'a [u8],
    /// Its arrival at the front (wall clock, ns).
    pub at_unix_ns: u64,
    /// When the worker read it: `(CLOCK_MONOTONIC ns, wall clock ns)`; `None` for a chunk replayed
    /// from the store, which does not keep it.
    pub read: Option<(u64, u64)>,
    pub fresh: &'a [FreshLine],
}

/// A job's end (or settling) as the pump saw it.
#[derive(Clone, Copy, Debug)]
pub struct End<'a> {
    pub job: JobId,
    pub settled: bool,
    pub state: JobPhase,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub fresh: &'a [FreshLine],
}

/// Whether any subscriber of `subs` wants job `job`.
pub fn wanted(subs: &[Subscriber], job: JobId) -> bool {
    subs.iter().any(|s| s.job.is_none_or(|j| j == job))
}

/// Send a chunk to every interested subscriber; drops the ones whose connection is gone or too slow.
pub fn publish_chunk(subs: &mut Vec<Subscriber>, session: &str, c: &Chunk<'_>) {
    let lines = lines_out(c.fresh);
    let mut text: Option<(String, &'static str)> = None;
    deliver(subs, c.job, |s| {
        let (data, encoding) = if s.raw {
            let (d, e) = text.get_or_insert_with(|| match std::str::from_utf8(c.data) {
                Ok(t) => (t.to_owned(), "utf8"),
                Err(_) => (base64::engine::general_purpose::STANDARD.encode(c.data), "base64"),
            });
            (Some(d.clone()), Some(*e))
        } else {
            (None, None)
        };
        let p = OutputParams {
            subscription: s.id,
            seq: s.seq,
            session,
            job: c.job,
            stream: stream_name(c.stream),
            offset: c.offset,
            len: c.data.len() as u64,
            at_unix_ns: c.at_unix_ns,
            read_mono_ns: c.read.map(|r| r.0),
            read_unix_ns: c.read.map(|r| r.1),
            lines: &lines,
            data,
            encoding,
        };
        line_json("output", p)
    });
}

/// Send a job's end (`job.end`) or its settling (`job.settled`).
pub fn publish_end(subs: &mut Vec<Subscriber>, session: &str, e: &End<'_>) {
    let lines = lines_out(e.fresh);
    let method = if e.settled { "job.settled" } else { "job.end" };
    deliver(subs, e.job, |s| {
        let p = EndParams {
            subscription: s.id,
            seq: s.seq,
            session,
            job: e.job,
            state: e.state,
            exit_code: e.exit_code,
            signal: e.signal,
            lines: &lines,
        };
        line_json(method, p)
    });
}

fn deliver(subs: &mut Vec<Subscriber>, job: JobId, mut build: impl FnMut(&Subscriber) -> Vec<u8>) {
    subs.retain_mut(|s| {
        if s.job.is_some_and(|j| j != job) {
            return true;
        }
        s.seq += 1;
        if s.outbox.over() {
            let msg = serde_json::json!({"subscription": s.id, "seq": s.seq, "message":
                "this connection did not read its notifications fast enough; the subscription ended here (read the rest with output views and subscribe again)"});
            s.outbox.send(line_json("subscription.overflow", msg));
            return false;
        }
        s.outbox.send(build(s))
    });
}

/// Remove subscriptions of connection `conn` (all, or the one `only`) from `subs`; how many went.
pub fn remove(subs: &mut Vec<Subscriber>, conn: u64, only: Option<u64>) -> usize {
    let before = subs.len();
    subs.retain(|s| !(s.outbox.conn == conn && only.is_none_or(|id| id == s.id)));
    before - subs.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::doc_schema::{object_after, PROTOCOL_MD};
    use std::collections::BTreeSet;

    /// The keys a notification's params serialize to, less `subscription` and `seq` (docs/protocol.md
    /// says once that every notification carries them).
    fn keys(params: impl Serialize) -> BTreeSet<String> {
        let serde_json::Value::Object(m) = serde_json::to_value(params).unwrap() else { panic!("not an object") };
        m.keys().filter(|k| *k != "subscription" && *k != "seq").cloned().collect()
    }

    fn documented(anchor: &str) -> BTreeSet<String> {
        object_after(PROTOCOL_MD, anchor)
            .unwrap_or_else(|| panic!("docs/protocol.md has no brace list after {anchor:?}"))
    }

    #[test]
    fn notification_params_match_the_docs() {
        let output = OutputParams {
            subscription: 1,
            seq: 1,
            session: "s",
            job: 1,
            stream: "stdout",
            offset: 0,
            len: 0,
            at_unix_ns: 0,
            read_mono_ns: None,
            read_unix_ns: None,
            lines: &[],
            data: None,
            encoding: None,
        };
        assert_eq!(keys(output), documented("- `output` "), "`output` notification vs docs/protocol.md");
        let end = EndParams {
            subscription: 1,
            seq: 1,
            session: "s",
            job: 1,
            state: JobPhase::Exited,
            exit_code: None,
            signal: None,
            lines: &[],
        };
        assert_eq!(keys(end), documented("- `job.end` "), "`job.end` notification vs docs/protocol.md");
    }
}
