//! `jobs {session, announce?}`: every job of the session, oldest first, with state and byte counts; carries the
//! session's announcements like every method in a session.
//!
//! ```text
//! → {"jsonrpc":"2.0","id":5,"method":"jobs","params":{"session":"demo"}}
//! ← {"jsonrpc":"2.0","id":5,"result":{"session":"demo","jobs":[{"job":1,"cmd":"make","state":"exited",
//!    "exit_code":0,"signal":null,"started_at_ms":1764681600000,"duration_ms":812.5,"stdout_bytes":40213,
//!    "stderr_bytes":0}],"announcements":[]}}
//! ```

use crate::kernel::{Client, Kernel};
use crate::rpc::results::JobsResult;
use crate::rpc::{self, RpcError};
use serde::Deserialize;
use serde_json::Value;
use std::time::Instant;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Params {
    session: String,
    /// False for an onlooker (a person's `heddle jobs`): the listing takes no announcements.
    #[serde(default = "crate::rpc::yes")]
    announce: bool,
}

pub(crate) fn call(k: &Kernel, client: &Client, params: Value) -> Result<JobsResult, RpcError> {
    let p: Params = rpc::params("jobs", params)?;
    listing(k, client, p.session, p.announce)
}

/// The listing; with `announce` false (an onlooker such as the cockpit page) it takes no announcements,
/// so the session's next call still carries them.
pub(crate) fn listing(k: &Kernel, client: &Client, session: String, announce: bool) -> Result<JobsResult, RpcError> {
    let s = k.session(client, &session)?;
    let running: Vec<u64> = s.lock().jobs().filter(|j| j.worth_probing()).map(|j| j.id()).collect();
    let probes: Vec<_> = running.iter().map(|&id| (id, crate::kernel::job_probe::probe(k, &s, id))).collect();
    let mut st = s.lock();
    let now = Instant::now();
    let jobs = st
        .all_jobs()
        .map(|j| {
            let mut row = j.summary(now);
            if let Some((_, Some(live))) = probes.iter().find(|(id, _)| *id == j.id()) {
                row.liveness = j.liveness(now, Some(live));
            }
            row
        })
        .collect();
    let announcements = if announce { st.take_announcements(now) } else { Vec::new() };
    Ok(JobsResult { session, jobs, announcements })
}
