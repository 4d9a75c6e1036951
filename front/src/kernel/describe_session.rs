//! The per-session parts of `describe` added for introspection: the job environment (the policy's
//! allowlist and forced values, the session's own entries, and the `PATH` jobs get), the live jobs with
//! their liveness, and what changed in the session since it began (jobs run by state, shell-state
//! changes with the last few).
//!
//! ```text
//! "env": {"policy": "workspace", "allow": ["PATH", "HOME", "LC_*"], "set": {"TERM": "dumb"},
//!         "session": ["FOO"], "path": "/usr/local/sbin:…:/bin", "path_from": "worker"},
//! "live_jobs": [{"job": 3, "cmd": "sleep 100", "liveness": {…}}],
//! "changes": {"jobs_run": 3, "jobs_by_state": {"exited": 2, "running": 1}, "state_changes": 1,
//!             "last_state_changes": [{"job": 1, "change": "+export FOO"}]}
//! ```

pub use crate::rpc::results::{EnvFacts, LiveJob, SessionChanges, StateChange};
use crate::sessions::session::Session;
use shm_proto::msg::{JobId, JobLiveness};
use std::collections::BTreeMap;
use std::time::Instant;

/// How many of the latest shell-state changes `describe` lists.
pub const LAST_CHANGES: usize = crate::sessions::retired::LAST_CHANGES;

/// The environment facts of `s`.
pub fn env_facts(s: &Session) -> EnvFacts {
    let st = s.lock();
    let policy_name = st.sandbox().map(|sb| sb.policy.clone());
    let fresh = crate::shell::record::FreshEnv::of(policy_name.as_deref(), &s.spec().env);
    let (allow, set, path, path_from) = (fresh.allow, fresh.set, fresh.path, fresh.path_from);
    // Every recorded state holds a PATH (the first capture records the whole environment): it is news
    // only when a job changed it, and then it is the PATH jobs run with.
    let carried = st.record().items().get("var:PATH").and_then(|d| crate::kernel::guard_apply::declared_value(d));
    let (path, path_from, note) = match carried.filter(|c| *c != path) {
        Some(c) => (
            c,
            "shell state",
            Some(format!("an earlier job changed PATH (it was {path}); jobs run with the carried one")),
        ),
        None => (path, path_from, None),
    };
    EnvFacts {
        policy: policy_name,
        allow,
        set,
        session: s.spec().env.iter().map(|(k, _)| k.clone()).collect(),
        path,
        path_from,
        note,
    }
}

/// The jobs of `s` worth probing (running, or ended with survivors), for the caller to probe.
pub fn live_job_ids(s: &Session) -> Vec<JobId> {
    s.lock().jobs().filter(|j| j.worth_probing()).map(|j| j.id()).collect()
}

/// The running jobs of `s`, with the liveness the probes in `probes` add.
pub fn live_jobs(s: &Session, probes: &[(JobId, Option<JobLiveness>)]) -> Vec<LiveJob> {
    let st = s.lock();
    let now = Instant::now();
    st.jobs()
        .filter(|j| !j.state().ended())
        .map(|j| {
            let probe = probes.iter().find(|(id, _)| *id == j.id()).and_then(|(_, p)| p.as_ref());
            LiveJob { job: j.id(), cmd: j.cmd().to_owned(), liveness: j.liveness(now, probe) }
        })
        .collect()
}

/// What changed in `s` since it began (the jobs let go from memory by their totals).
pub fn changes(s: &Session) -> SessionChanges {
    let st = s.lock();
    let (gone_changes, gone_last) = st.retired().state_changes();
    let mut jobs_by_state: BTreeMap<String, usize> = st.retired().by_state().clone();
    let mut all = gone_last.to_vec();
    let mut state_changes = gone_changes;
    for j in st.jobs().filter(|j| !j.on_disk()) {
        *jobs_by_state.entry(crate::sessions::retired::state_name(j)).or_insert(0) += 1;
        state_changes += j.state_changes().len();
        all.extend(j.state_changes().iter().map(|c| StateChange { job: j.id(), change: c.clone() }));
    }
    // Held jobs may be older than some let go (one that ran long): the last changes are by job id.
    all.sort_by_key(|c| c.job);
    let last_state_changes = all.split_off(all.len().saturating_sub(LAST_CHANGES));
    SessionChanges { jobs_run: st.job_count(), jobs_by_state, state_changes, last_state_changes }
}
