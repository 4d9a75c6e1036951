//! Live streaming: `subscribe {session, job?, raw?}` turns the calling connection into a receiver of
//! JSON-RPC notifications — `output` for every chunk a job writes (its stream offset and length, the
//! rendered lines it completed, and with `raw: true` the unredacted bytes), `job.end` when a job ends
//! and `job.settled` when its output is complete — until `unsubscribe {subscription}` or the
//! connection closes.
//!
//! The notifications are built and sent by [`crate::sessions::subscribers`]. The subscribe answer is
//! queued under the session's lock before the subscriber is visible, so it precedes every
//! notification.
//!
//! ```text
//! → {"jsonrpc":"2.0","id":4,"method":"subscribe","params":{"session":"demo"}}
//! ← {"jsonrpc":"2.0","id":4,"result":{"subscription":1,"session":"demo","job":null,"raw":false}}
//! ← {"jsonrpc":"2.0","method":"output","params":{"subscription":1,"seq":1,"session":"demo","job":2,
//!    "stream":"stdout","offset":0,"len":3,"at_unix_ns":…,"read_mono_ns":…,"read_unix_ns":…,"lines":[],
//!    "data":null,"encoding":null}}
//! ```

use crate::kernel::{Client, Kernel};
use crate::rpc::outbox::Outbox;
use crate::rpc::{self, RpcError};
use crate::sessions::subscribers::{publish_chunk, publish_end, Chunk, End, Subscriber};
use serde::Deserialize;
use serde_json::{value::RawValue, Value};
use shm_proto::msg::JobId;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SubParams {
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
pub(crate) struct UnsubParams {
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
    crate::kernel::peer_check::admit(k, client, "subscribe", &params)?;
    let p: SubParams = rpc::params("subscribe", params)?;
    let s = k.session(client, &p.session)?;
    let mut st = s.lock();
    if let Some(job) = p.job {
        if !st.has_job(job) {
            return Err(crate::kernel::unknown_job(&p.session, job));
        }
    }
    // Under the session's lock the pump neither stores nor publishes: the replay ends exactly where
    // the live notifications begin.
    let replay = match (p.from, p.job.and_then(|j| st.job_to_read(j))) {
        (None, _) => None,
        (Some(_), None) => {
            let msg = "subscribe {from} resumes one job's stream: give `job` too";
            return Err(RpcError::new(rpc::ErrorKind::InvalidParams, msg));
        }
        (Some(f), Some(mut j)) => {
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
    let sub = Subscriber::next_id();
    let result = serde_json::json!({"subscription": sub, "session": p.session, "job": p.job, "raw": p.raw});
    out.send(rpc::encode_result(Some(id), &result));
    let mut one = vec![Subscriber::new(sub, p.job, p.raw, out.clone())];
    if let Some((chunks, end)) = replay {
        for c in &chunks {
            let chunk = Chunk {
                job: p.job.unwrap_or_default(),
                stream: c.stream,
                offset: c.offset,
                data: &c.data,
                at_unix_ns: c.unix_ns,
                read: None,
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
    st.subscribe(&mut one);
    Ok(())
}

/// `unsubscribe {subscription}` → `{subscription, removed}`.
pub(crate) fn unsubscribe(k: &Kernel, params: Value, out: &Outbox) -> Result<Value, RpcError> {
    let p: UnsubParams = rpc::params("unsubscribe", params)?;
    let removed = k.drop_subscriptions(out.conn, Some(p.subscription));
    Ok(serde_json::json!({"subscription": p.subscription, "removed": removed > 0}))
}
