//! Live streaming: `subscribe {session, job?, raw?}` turns the calling connection into a receiver of
//! JSON-RPC notifications — `output` for every chunk a job writes (its stream offset and length, the
//! rendered lines it completed, and with `raw: true` the unredacted bytes), `job.end` when a job ends
//! and `job.settled` when its output is complete — until `unsubscribe {subscription}` or the
//! connection closes.
//!
//! The pump builds each notification while it applies the event (under the session's lock, no file
//! read) and sends the bytes through the connection's [`Outbox`]: straight into the socket when
//! nothing waits for it (non-blocking), else queued for the connection's writer thread — the pump
//! never blocks on a socket. Each subscription numbers its notifications (`seq` from 1, no gaps).
//! The subscribe answer is queued under the session's lock before the subscriber is visible, so it
//! precedes every notification. A subscriber whose connection stops reading is cut off once more than
//! [`MAX_QUEUED`] bytes wait for it, with a last `subscription.overflow` notification that says so —
//! never a silent gap.
//!
//! ```text
//! → {"jsonrpc":"2.0","id":4,"method":"subscribe","params":{"session":"demo"}}
//! ← {"jsonrpc":"2.0","id":4,"result":{"subscription":1,"session":"demo","job":null,"raw":false}}
//! ← {"jsonrpc":"2.0","method":"output","params":{"subscription":1,"seq":1,"session":"demo","job":2,
//!    "stream":"stdout","offset":0,"len":3,"at_unix_ns":…,"lines":[],"data":null,"encoding":null}}
//! ```

use crate::kernel::{Client, Kernel};
use crate::rendered::FreshLine;
use crate::results::JobState;
use crate::rpc::{self, RpcError};
use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::{value::RawValue, Value};
use shm_proto::msg::JobId;
use std::sync::atomic::{AtomicU64, Ordering};

pub use crate::outbox::{Outbox, MAX_QUEUED};

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
    state: JobState,
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
pub struct Chunk<'a> {
    pub job: JobId,
    pub stream: u8,
    pub offset: u64,
    pub data: &'a [u8],
    pub at_unix_ns: u64,
    pub fresh: &'a [FreshLine],
}

/// A job's end (or settling) as the pump saw it.
#[derive(Clone, Copy)]
pub struct End<'a> {
    pub job: JobId,
    pub settled: bool,
    pub state: JobState,
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SubParams {
    session: String,
    #[serde(default)]
    job: Option<JobId>,
    #[serde(default)]
    raw: bool,
    /// Resume a job's stream: replay its stored chunks from these offsets first.
    #[serde(default)]
    from: Option<From>,
}

/// Stream offsets to replay from.
#[derive(Deserialize, Clone, Copy)]
#[serde(deny_unknown_fields)]
struct From {
    #[serde(default)]
    stdout: u64,
    #[serde(default)]
    stderr: u64,
}

/// Most stored bytes one `subscribe {from}` replays (more: read with `output`, subscribe from the end).
pub const MAX_REPLAY: u64 = 16 * 1024 * 1024;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UnsubParams {
    subscription: u64,
}

/// `subscribe`: queues its own answer (before any notification) and returns nothing to send.
pub(crate) fn subscribe(
    k: &Kernel,
    client: &Client,
    params: Value,
    id: &RawValue,
    out: &Outbox,
) -> Result<(), RpcError> {
    crate::peer_check::admit(k, client, "subscribe", &params)?;
    let p: SubParams = rpc::params("subscribe", params)?;
    let s = k.session(client, &p.session)?;
    let mut st = s.lock();
    if let Some(job) = p.job {
        if !st.jobs.contains_key(&job) {
            return Err(crate::kernel::unknown_job(&p.session, job));
        }
    }
    // Under the session's lock the pump neither stores nor publishes: the replay ends exactly where
    // the live notifications begin.
    let replay = match (p.from, p.job.and_then(|j| st.jobs.get_mut(&j))) {
        (None, _) => None,
        (Some(_), None) => {
            let msg = "subscribe {from} resumes one job's stream: give `job` too";
            return Err(RpcError::new(rpc::ErrorKind::InvalidParams, msg));
        }
        (Some(f), Some(j)) => {
            let chunks = j.chunks_from([f.stdout, f.stderr], MAX_REPLAY).map_err(|e| {
                RpcError::new(rpc::ErrorKind::InvalidParams, format!("cannot resume job {}: {e}", j.id()))
            })?;
            let r = j.summary(std::time::Instant::now());
            let end = End {
                job: j.id(),
                settled: j.settled(),
                state: r.state,
                exit_code: r.exit_code,
                signal: r.signal,
                fresh: &[],
            };
            Some((chunks, j.state().ended().then_some(end)))
        }
    };
    let sub = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let result = serde_json::json!({"subscription": sub, "session": p.session, "job": p.job, "raw": p.raw});
    out.send(rpc::encode_result(Some(id), &result));
    let mut one = vec![Subscriber { id: sub, job: p.job, raw: p.raw, seq: 0, outbox: out.clone() }];
    if let Some((chunks, end)) = replay {
        for c in &chunks {
            let chunk = Chunk {
                job: p.job.unwrap_or_default(),
                stream: c.stream,
                offset: c.offset,
                data: &c.data,
                at_unix_ns: c.unix_ns,
                fresh: &[],
            };
            publish_chunk(&mut one, &p.session, &chunk);
        }
        if let Some(end) = end {
            // A job that ended before this subscription: its end, and its settling if output is complete.
            let settled = end.settled;
            publish_end(&mut one, &p.session, &End { settled: false, ..end });
            if settled {
                publish_end(&mut one, &p.session, &End { settled: true, ..end });
            }
        }
    }
    st.subscribers.append(&mut one);
    Ok(())
}

/// `unsubscribe {subscription}` → `{subscription, removed}`.
pub(crate) fn unsubscribe(k: &Kernel, params: Value, out: &Outbox) -> Result<Value, RpcError> {
    let p: UnsubParams = rpc::params("unsubscribe", params)?;
    let removed = k.drop_subscriptions(out.conn, Some(p.subscription));
    Ok(serde_json::json!({"subscription": p.subscription, "removed": removed > 0}))
}

/// Remove subscriptions of connection `conn` (all, or the one `only`) from `subs`; how many went.
pub fn remove(subs: &mut Vec<Subscriber>, conn: u64, only: Option<u64>) -> usize {
    let before = subs.len();
    subs.retain(|s| !(s.outbox.conn == conn && only.is_none_or(|id| id == s.id)));
    before - subs.len()
}
