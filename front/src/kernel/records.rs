//! Keeping the database's session, job and state rows in step with the kernel's memory.
//!
//! The recorder runs on request threads, after each call that names a session (on a connection, once its
//! reply is written, so no client waits on it), and at shutdown: it
//! looks at that session's jobs whose rows can still change (new jobs, and those not yet ended,
//! settled and reported: a row that is all three is final) and queues a row for each whose state,
//! byte counts or settling changed since the last row, a row for a new state-record version, one for each job announced or
//! reported for the first time, and the session's own open/end rows. It never runs on the pump, so
//! the hot loop does no database work; the rows are queued and written by the database's writer thread.
//! A job that ends while nobody asks about its session is recorded at the next call naming the session
//! or at shutdown; a front killed in between leaves its row `running`, and the next front marks it
//! `lost` (docs/architecture.md, "Storage").
//!
//! ```no_run
//! # fn demo(k: &front::kernel::Kernel, s: &front::sessions::session::Session) {
//! k.record_session(s);
//! # }
//! ```

use crate::jobs::job::Job;
use crate::kernel::Kernel;
use crate::sessions::session::Session;
use crate::storage::db::{JobRow, Write};
use base64::Engine;
use shm_proto::msg::JobId;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Instant;

/// What was last written for a job: (state, bytes, settled, reported).
type Seen = (crate::rpc::results::JobPhase, u64, bool, bool);

/// What a job's row says now (the fields [`Seen`] compares), without building its summary.
fn seen(job: &Job) -> Seen {
    let [out, err] = job.counts();
    (job.state(), out + err, job.settled() && job.cgroup_settled(), job.reported())
}

/// A row that can change no more: the job ended, nothing of it runs or writes, and it was reported.
fn is_final(seen: &Seen) -> bool {
    seen.0.ended() && seen.2 && seen.3
}

/// What was written for one session incarnation.
#[derive(Default)]
struct SessionKnown {
    /// The state version last written.
    version: u64,
    /// The session's end was written.
    ended: bool,
    /// The highest job id written so far (jobs are added in id order).
    last_job: JobId,
    /// Written jobs whose rows may still change, with what was written last. Final rows leave it,
    /// so a call costs the session's unfinished jobs, not all its jobs.
    open: BTreeMap<JobId, Seen>,
}

#[derive(Default)]
struct Known {
    /// Per session serial.
    sessions: HashMap<u64, SessionKnown>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").finish_non_exhaustive()
    }
}

/// The last rows written, to write only changes.
#[derive(Default)]
pub struct Recorder {
    known: Mutex<Known>,
}

impl Recorder {
    /// Queue rows for what changed in `s` since the last call.
    pub fn record(&self, k: &Kernel, s: &Session) {
        let serial = s.spec().serial;
        let name = s.name().to_owned();
        let mut all = self.known.lock().unwrap_or_else(|e| e.into_inner());
        let mut st = s.lock();
        let now = Instant::now();
        let known = all.sessions.entry(serial).or_insert_with(|| {
            k.db.write(Write::SessionOpened {
                serial,
                name: name.clone(),
                owner_uid: s.spec().owner_uid,
                cwd: s.spec().cwd.clone(),
                cgroup: s.spec().cgroup.clone(),
            });
            SessionKnown::default()
        });
        let (v, items) = st.record().snapshot();
        if v != known.version {
            let items: serde_json::Map<String, serde_json::Value> = items
                .iter()
                .map(|(k, v)| (k.clone(), base64::engine::general_purpose::STANDARD.encode(v).into()))
                .collect();
            k.db.write(Write::StateRecord { serial, version: v, items: serde_json::Value::Object(items).to_string() });
        }
        let new = st.jobs_from(known.last_job + 1).map(|j| j.id());
        let look: Vec<JobId> = known.open.keys().copied().chain(new).collect();
        let mut reported = Vec::new();
        for id in look {
            let Some(job) = st.job(id) else {
                known.open.remove(&id);
                continue;
            };
            known.last_job = known.last_job.max(id);
            let seen = seen(&job);
            let before = known.open.get(&id).copied();
            if before == Some(seen) {
                continue;
            }
            match is_final(&seen) {
                true => known.open.remove(&id),
                false => known.open.insert(id, seen),
            };
            let sum = job.summary(now);
            if seen.3 && before.is_none_or(|b| !b.3) {
                k.db.write(Write::Announced { session: name.clone(), job: sum.job });
                reported.push(sum.job);
            }
            let row = JobRow {
                cmd: sum.cmd.clone(),
                state: serde_json::to_value(sum.state)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default(),
                exit_code: sum.exit_code,
                signal: sum.signal,
                stdout_bytes: sum.stdout_bytes,
                stderr_bytes: sum.stderr_bytes,
                started_at_ms: sum.started_at_ms,
                duration_ms: sum.duration_ms,
                log_path: s.jobs_dir().join(format!("{}.log", sum.job)).display().to_string(),
                record: serde_json::to_string(&sum).unwrap_or_default(),
            };
            k.db.write(Write::Job { serial, session: name.clone(), job: sum.job, row });
        }
        if !reported.is_empty() {
            st.append_journal(&crate::sessions::journal::Entry::Reported { jobs: reported });
        }
        // Jobs past the session's window that are done with, and whose rows are final, leave memory.
        let (last, open) = (known.last_job, &known.open);
        st.retire(&s.jobs_dir(), crate::sessions::retired::window(), |id| id <= last && !open.contains_key(&id));
        let end = st
            .lost()
            .filter(|l| !l.worker_died)
            .map(|l| l.note.clone())
            .or_else(|| st.is_closing().then(|| "closed".to_owned()));
        if let (Some(note), false) = (&end, known.ended) {
            k.db.write(Write::SessionEnded { serial, note: note.clone() });
        }
        known.version = v;
        known.ended |= end.is_some();
    }
}

impl Kernel {
    /// Bring the database's rows for `s` up to date (see [`Recorder`]).
    pub fn record_session(&self, s: &Session) {
        self.recorder.record(self, s);
    }
}

#[cfg(test)]
impl Recorder {
    /// How many jobs of session `serial` the recorder still follows.
    fn open_jobs(&self, serial: u64) -> usize {
        self.known.lock().unwrap().sessions.get(&serial).map_or(0, |s| s.open.len())
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::Harness;
    use serde_json::json;

    #[test]
    fn finished_rows_are_left_alone_and_unfinished_ones_followed_to_their_end() {
        let h = Harness::new();
        h.open("demo");
        let serial = h.kernel.session(&h.client, "demo").unwrap().spec().serial;
        for _ in 0..20 {
            assert_eq!(h.run("demo", "echo hi", 5000)["state"], "exited");
        }
        let hanging = h.run("demo", "hang", 20)["job"].as_u64().unwrap();
        h.ok("jobs", json!({"session": "demo"}));
        let open = h.kernel.recorder.open_jobs(serial);
        assert!((1..=2).contains(&open), "only the running job (and maybe the last one settling) is followed: {open}");
        let row = |job: u64| {
            h.kernel.db.sync();
            let r = h.kernel.db.job_record(h.kernel.db.boot(), serial, job).unwrap().unwrap();
            serde_json::from_str::<serde_json::Value>(&r).unwrap()
        };
        assert!((1..=20).all(|j| row(j)["state"] == "exited"), "every finished job has its row");
        assert_eq!(row(hanging)["state"], "running");
        h.ok("kill", json!({"session": "demo", "job": hanging}));
        assert_eq!(h.ok("wait", json!({"session": "demo", "job": hanging}))["state"], "killed");
        assert_eq!(row(hanging)["state"], "killed", "a followed job's row is written again when it ends");
        assert_eq!(h.kernel.recorder.open_jobs(serial), 0, "{}", row(hanging));
    }

    #[test]
    fn a_closed_sessions_rows_are_written_before_the_close_is_answered() {
        // A keyed retry on another connection reads a closed session's job rows back from the database
        // as soon as the close is answered, before this connection's after-answer work.
        let h = Harness::new();
        h.open("demo");
        let serial = h.kernel.session(&h.client, "demo").unwrap().spec().serial;
        let hanging = h.run("demo", "hang", 20)["job"].as_u64().unwrap();
        let (closed, _) = h.kernel.answer(&h.client, "session.close", json!({"session": "demo"}));
        assert!(closed.is_ok());
        h.kernel.db.sync();
        let row = h.kernel.db.job_record(h.kernel.db.boot(), serial, hanging).unwrap().unwrap();
        assert_eq!(serde_json::from_str::<serde_json::Value>(&row).unwrap()["state"], "killed", "{row}");
    }
}
