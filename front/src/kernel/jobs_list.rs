//! `jobs {session, limit?, before?, announce?}`: the session's jobs, oldest first, with state and byte
//! counts: every job not yet ended, and the newest `limit` ended ones (default 50, at most 10,000),
//! those before job `before` when it is given. `older` counts the ended jobs older than those listed,
//! and `older_before` is the `before` that lists them, so a long session's listing stays the size of a
//! page (a model reads it whole, and its cost no longer grows with the session: jobs let go from memory
//! are read back from disk only when listed). Carries the session's announcements like every method in
//! a session.
//!
//! ```text
//! → {"jsonrpc":"2.0","id":5,"method":"jobs","params":{"session":"demo"}}
//! ← {"jsonrpc":"2.0","id":5,"result":{"session":"demo","jobs":[{"job":1,"cmd":"make","state":"exited",
//!    "exit_code":0,"signal":null,"started_at_ms":1764681600000,"duration_ms":812.5,"stdout_bytes":40213,
//!    "stderr_bytes":0}],"announcements":[],"older":0,"older_before":null}}
//! ```

use crate::kernel::{Client, Kernel};
use crate::rpc::results::JobsResult;
use crate::rpc::{self, RpcError};
use serde::Deserialize;
use serde_json::Value;
use std::time::Instant;

/// Ended jobs a listing shows unless asked for another number.
pub const DEFAULT_LIMIT: u64 = 50;
/// The most ended jobs one listing shows.
pub const MAX_LIMIT: u64 = 10_000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Params {
    session: String,
    /// How many ended jobs to list (the newest first chosen): [`DEFAULT_LIMIT`], at most [`MAX_LIMIT`].
    #[serde(default)]
    limit: Option<u64>,
    /// List only ended jobs older than this job id (the next page: a listing's `older_before`).
    #[serde(default)]
    before: Option<u64>,
    /// False for an onlooker (a person's `heddle jobs`): the listing takes no announcements.
    #[serde(default = "crate::rpc::yes")]
    announce: bool,
}

pub(crate) fn call(k: &Kernel, client: &Client, params: Value) -> Result<JobsResult, RpcError> {
    let p: Params = rpc::params("jobs", params)?;
    let limit = match p.limit {
        None => DEFAULT_LIMIT,
        Some(n @ 1..=MAX_LIMIT) => n,
        Some(n) => {
            return Err(RpcError::invalid_params(
                "jobs",
                format!(
                    "limit must be between 1 and {MAX_LIMIT}, not {n}; page with before (a listing's older_before)"
                ),
            ))
        }
    };
    listing(k, client, p.session, p.announce, Page { limit, before: p.before })
}

/// Which ended jobs a listing shows (every job not yet ended is listed).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Page {
    /// At most this many ended jobs, the newest first chosen.
    pub limit: u64,
    /// Only ended jobs with a smaller id.
    pub before: Option<u64>,
}

impl Page {
    /// The first page of the default size.
    pub(crate) fn first() -> Page {
        Page { limit: DEFAULT_LIMIT, before: None }
    }
}

/// The listing; with `announce` false (an onlooker such as the cockpit page) it takes no announcements,
/// so the session's next call still carries them.
pub(crate) fn listing(
    k: &Kernel,
    client: &Client,
    session: String,
    announce: bool,
    page: Page,
) -> Result<JobsResult, RpcError> {
    let s = k.session(client, &session)?;
    let running: Vec<u64> = s.lock().jobs().filter(|j| j.worth_probing()).map(|j| j.id()).collect();
    let probes: Vec<_> = running.iter().map(|&id| (id, crate::kernel::job_probe::probe(k, &s, id))).collect();
    let mut st = s.lock();
    let now = Instant::now();
    // Newest first: jobs not ended always, ended ones while the page has room. A job let go from memory
    // is ended (only jobs done with are let go) and is read back only when listed.
    let (mut ids, mut ended, mut older, mut oldest) = (Vec::new(), 0, 0, None);
    for id in (1..=st.last_id()).rev() {
        match st.held_job(id) {
            Some(j) if !j.state().ended() => ids.push(id),
            None if !st.retired().contains(id) => {}
            _ if page.before.is_some_and(|b| id >= b) => {}
            _ if ended < page.limit => {
                ids.push(id);
                ended += 1;
                oldest = Some(id);
            }
            _ => older += 1,
        }
    }
    let jobs = ids
        .iter()
        .rev()
        .filter_map(|&id| st.job(id))
        .map(|j| {
            let mut row = j.summary(now);
            if let Some((_, Some(live))) = probes.iter().find(|(id, _)| *id == j.id()) {
                row.liveness = j.liveness(now, Some(live));
            }
            row
        })
        .collect();
    let announcements = if announce { st.take_announcements(now) } else { Vec::new() };
    Ok(JobsResult { session, jobs, announcements, older, older_before: oldest.filter(|_| older > 0) })
}
