//! `kill {session, job, grace_ms?}`: end a job through its worker (`Command::Kill`: `grace_ms` 0 →
//! `cgroup.kill` at once; more → SIGTERM to the job's cgroup first, `cgroup.kill` after the grace) and
//! wait, bounded (grace + 5 s), for the end. Killing a job that already ended and left nothing running
//! returns its result with a note saying there was nothing to kill. If the job has not ended when the
//! bound passes, the result is `running` and says so.
//!
//! A job whose main process ended but whose cgroup still holds survivors is killed the same way: the
//! kill reaches every process of its cgroup, and the result comes once the cgroup emptied
//! (`populated 0`), with `settled: true`, `usage.emptied_at_ms` and a note naming what it ended.
//!
//! ```text
//! → {"jsonrpc":"2.0","id":4,"method":"kill","params":{"session":"demo","job":1,"grace_ms":2000}}
//! ← {"jsonrpc":"2.0","id":4,"result":{"session":"demo","job":1,"state":"killed","exit_code":null,"signal":9,…}}
//! ```

use crate::kernel::job_wait::{answer, answer_when, view_budget};
use crate::kernel::{clamp_wait, deadline, unknown_job, Client, Kernel, SEND_TIMEOUT};
use crate::rpc::results::{join_notes, JobPhase, JobResult};
use crate::rpc::{self, RpcError};
use serde::Deserialize;
use serde_json::Value;
use shm_proto::msg::{Command, JobId};
use std::time::{Duration, Instant};

/// How long after the grace period `kill` waits for the job to end.
pub const KILL_WAIT: Duration = Duration::from_secs(5);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Params {
    session: String,
    job: JobId,
    #[serde(default)]
    grace_ms: Option<u64>,
    #[serde(default)]
    max_output_tokens: Option<u64>,
    #[serde(default)]
    max_output_bytes: Option<u64>,
}

pub(crate) fn call(k: &Kernel, client: &Client, params: Value) -> Result<JobResult, RpcError> {
    let p: Params = rpc::params("kill", params)?;
    k.admit()?;
    let s = k.session(client, &p.session)?;
    let mut budget_notes = Vec::new();
    let budget = view_budget(p.max_output_tokens, p.max_output_bytes, &mut budget_notes);
    // What an ended job left running, named before the kill so the result can say what it ended.
    let left = {
        let mut st = s.lock();
        let job = st.job_mut(p.job).ok_or_else(|| unknown_job(&p.session, p.job))?;
        // A kept job's processes left the session (its cgroup moved under `kept/`): `kill` ends none of
        // them, running or not, and says what does.
        if job.kept().is_some() || (job.state().ended() && job.cgroup_settled()) {
            drop(st);
            let mut r = answer(k, &s, p.job, Instant::now(), budget_notes, budget)?;
            let note = match &r.kept {
                None => "the job had already ended and nothing of it still runs: there was nothing to kill".to_owned(),
                Some(name) => format!(
                    "the job is kept as {name}: kill does not end a kept job's processes (they outlive the session \
                     by design); the operator ends them with `heddle kept kill {name}`"
                ),
            };
            r.note = join_notes(r.note.take().into_iter().chain([note]));
            return Ok(r);
        }
        match job.state().ended() {
            true => Some((job.survivors(), job.survivors_more())),
            false => {
                job.set_kill_requested();
                None
            }
        }
    };
    let (grace, clamp_note) = clamp_wait("grace_ms", p.grace_ms, 0);
    let mut notes: Vec<String> = clamp_note.into_iter().chain(budget_notes).collect();
    let kill = Command::Kill { job: p.job, grace_ms: grace.as_millis() as u32 };
    let until = match s.send(&kill, SEND_TIMEOUT) {
        Ok(()) => deadline(grace + KILL_WAIT),
        Err(e) => {
            notes.push(format!(
                "the kill could not be handed to the worker ({})",
                crate::sessions::supervisor::error_chain(&e)
            ));
            Instant::now()
        }
    };
    // Settled means both ends: the cgroup seen empty and the job's pipes closed. The worker reports them
    // in either order, and answering at the first would say `settled: false` for a job that is done.
    let done =
        |j: &crate::jobs::job::Job| j.state().ended() && j.cgroup_settled() && (j.settled() || j.kept().is_some());
    let mut result = answer_when(k, &s, p.job, until, notes, done, budget)?;
    if let Some((procs, more)) = left.filter(|_| result.settled && result.kept.is_none()) {
        let count = procs.len() + more as usize;
        let mut named = protocol::text::survivors(&procs);
        if more > 0 {
            named.push_str(&format!(" (and {more} more not listed)"));
        }
        let note = match count {
            0 => "the job's cgroup is empty now".to_owned(),
            1 => format!(
                "killed what the job left running (1 process when last listed: {named}); its cgroup is empty now"
            ),
            n => format!(
                "killed what the job left running ({n} processes when last listed: {named}); its cgroup is empty now"
            ),
        };
        result.note = join_notes(result.note.take().into_iter().chain([note]));
    }
    if !result.settled && result.state.ended() && result.kept.is_none() {
        let note = "the job ended but its cgroup was not seen empty in time; kill it again".to_owned();
        result.note = join_notes(result.note.take().into_iter().chain([note]));
    }
    if result.state == JobPhase::Running {
        let waited = grace + KILL_WAIT;
        let note = format!(
            "the kill was sent but the job had not ended after {} ms; wait on it or kill it again",
            waited.as_millis()
        );
        result.note = join_notes(result.note.take().into_iter().chain([note]));
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use crate::testing::{announced, Harness};
    use serde_json::json;

    #[test]
    fn kill_ends_a_running_job() {
        let h = Harness::new();
        h.open("demo");
        h.run("demo", "hang", 0);
        let r = h.ok("kill", json!({"session": "demo", "job": 1}));
        assert_eq!(
            (r["state"].as_str(), r["signal"].as_i64(), r["exit_code"].is_null()),
            (Some("killed"), Some(9), true)
        );
        assert!(announced(&h.ok("jobs", json!({"session": "demo"}))).is_empty(), "kill's result reported it");
    }

    #[test]
    fn killing_an_ended_job_returns_it_unchanged() {
        let h = Harness::new();
        h.open("demo");
        h.run("demo", "exit 4", 5000);
        let r = h.ok("kill", json!({"session": "demo", "job": 1, "grace_ms": 100}));
        assert_eq!((r["state"].as_str(), r["exit_code"].as_i64()), (Some("exited"), Some(4)));
        assert!(r["note"].as_str().unwrap_or_default().contains("there was nothing to kill"), "{r}");
    }
}
