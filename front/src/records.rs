//! Keeping the database's session, job and state rows in step with the kernel's memory.
//!
//! The recorder runs on request threads, after each call that names a session, and at shutdown: it
//! looks at that session's jobs and queues a row for each job whose state, byte counts or settling
//! changed since the last row, a row for a new state-record version, one for each job announced or
//! reported for the first time, and the session's own open/end rows. It never runs on the pump, so
//! the hot loop does no database work; the rows are queued and written by the database's writer thread.
//! A job that ends while nobody asks about its session is recorded at the next call naming the session
//! or at shutdown; a front killed in between leaves its row `running`, and the next front marks it
//! `lost` (docs/architecture.md, "Storage").
//!
//! ```no_run
//! # fn demo(k: &front::kernel::Kernel, s: &front::session::Session) {
//! k.record_session(s);
//! # }
//! ```

use crate::db::{JobRow, Write};
use crate::kernel::Kernel;
use crate::session::Session;
use base64::Engine;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

/// What was last written for a job: (state, bytes, settled, reported).
type Seen = (crate::results::JobState, u64, bool, bool);

#[derive(Default)]
struct Known {
    jobs: HashMap<(u64, u64), Seen>,
    /// Per session serial: the state version last written and whether the end was written.
    sessions: HashMap<u64, (u64, bool)>,
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
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        let st = s.lock();
        let now = Instant::now();
        let (version, ended) = known.sessions.get(&serial).copied().unwrap_or_else(|| {
            k.db.write(Write::SessionOpened {
                serial,
                name: name.clone(),
                owner_uid: s.spec().owner_uid,
                cwd: s.spec().cwd.clone(),
                cgroup: s.spec().cgroup.clone(),
            });
            (0, false)
        });
        let (v, items) = st.record.snapshot();
        if v != version {
            let items: serde_json::Map<String, serde_json::Value> = items
                .iter()
                .map(|(k, v)| (k.clone(), base64::engine::general_purpose::STANDARD.encode(v).into()))
                .collect();
            k.db.write(Write::StateRecord { serial, version: v, items: serde_json::Value::Object(items).to_string() });
        }
        for job in st.jobs.values() {
            let sum = job.summary(now);
            let seen: Seen = (sum.state, sum.stdout_bytes + sum.stderr_bytes, sum.settled, job.reported());
            let before = known.jobs.insert((serial, sum.job), seen);
            if before == Some(seen) {
                continue;
            }
            if seen.3 && before.is_none_or(|b| !b.3) {
                k.db.write(Write::Announced { session: name.clone(), job: sum.job });
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
        let end = st
            .lost
            .as_ref()
            .filter(|l| !l.worker_died)
            .map(|l| l.note.clone())
            .or_else(|| st.closing.then(|| "closed".to_owned()));
        if let (Some(note), false) = (&end, ended) {
            k.db.write(Write::SessionEnded { serial, note: note.clone() });
        }
        known.sessions.insert(serial, (v, ended || end.is_some()));
    }
}

impl Kernel {
    /// Bring the database's rows for `s` up to date (see [`Recorder`]).
    pub fn record_session(&self, s: &Session) {
        self.recorder.record(self, s);
    }
}
