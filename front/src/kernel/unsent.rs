//! Jobs a killed front journaled but never handed to the worker (docs/architecture.md, "Front crash
//! recovery"). A `run` journals its job (and a keyed job's receipt, see `receipts`) before it pushes the
//! job's `Run` command, so a front killed between the two leaves a job no worker will ever start: a
//! retry of its key would wait on it forever. After a takeover the new front sends the worker a
//! `Probe` for the newest job without a start: the worker handles commands in order and reports a job's
//! `Started` (or `SpawnFailed`) while it handles the job's `Run`, so once the probe's `Status` is
//! applied, a job still without a start never reached the worker. It is `failed` with a note saying
//! nothing ran, and the key of a keyed one is freed, so its retry runs it. A persistent shell's worker
//! queues `Run`s behind the running one, so its sessions are left as they are.

use crate::kernel::Kernel;
use crate::sessions::session::Session;
use shm_proto::msg::{Command, JobId};
use std::time::{Duration, Instant};

/// How long a takeover waits for the worker's answer (no answer: the jobs are left as they are).
const SETTLE_WAIT: Duration = Duration::from_secs(5);

const NOTE: &str = "the front was killed before it handed the command to the session's worker, so nothing \
                    of it ran; a retry with the same idempotency_key runs it";

/// Settle the jobs of the taken-over `s` that never reached its worker; returns how many.
pub(crate) fn settle(k: &Kernel, s: &Session) -> usize {
    if s.spec().persistent {
        return 0;
    }
    let waiting: Vec<JobId> = {
        let st = s.lock();
        st.jobs().filter(|j| j.pid().is_none() && !j.state().ended()).map(|j| j.id()).collect()
    };
    let Some(&last) = waiting.last() else { return 0 };
    // Not from `new_probe`: a dead front's probe answers may still be in the ring (fronts before the
    // wall-clock seed counted from 1, and one matched this probe and settled jobs the worker had started).
    let n = (1 << 63) | crate::jobs::job::unix_ns();
    if s.send(&Command::Probe { job: last, probe: n }, SETTLE_WAIT).is_err() {
        return 0;
    }
    let until = Instant::now() + SETTLE_WAIT;
    let mut st = s.wait_until(s.lock(), until, k.shutdown_flag(), |st| st.probe_answered(n) || st.lost().is_some());
    if st.take_probe_answer(n).is_none() {
        return 0;
    }
    let now = Instant::now();
    let mut unsent = Vec::new();
    for id in waiting {
        if let Some(j) = st.job_mut(id).filter(|j| j.pid().is_none() && !j.state().ended()) {
            j.on_spawn_failed(NOTE, now);
            unsent.push(id);
        }
    }
    drop(st);
    s.notify();
    for &id in &unsent {
        k.receipts.free_job(k.db.boot(), s.spec().serial, id);
    }
    if !unsent.is_empty() {
        tracing::info!("session '{}': jobs {unsent:?} never reached the worker before the front died", s.name());
    }
    unsent.len()
}
