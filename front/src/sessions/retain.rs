//! A session's output budget, enforced: the session limit and the age limit of
//! [`crate::output::retention`] applied to a session's ended jobs, oldest first, with a [`Ledger`] so a
//! check costs the session's unfinished jobs, not every job it ever ran.

use crate::jobs::job::Job;
use crate::output::retention::Retention;
use crate::output::sniff::human_bytes;
use crate::sessions::session::SessionState;
use shm_proto::msg::JobId;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// A session's retention bookkeeping, so that a touch costs the session's unfinished jobs (and the
/// output that is due), not every job it ever ran: a job's kept bytes change only while it can still
/// write, and then only by retention.
#[derive(Debug, Default)]
pub struct Ledger {
    /// Jobs not yet ended, settled and flushed: their kept bytes are summed afresh at every check.
    active: BTreeSet<JobId>,
    /// The kept bytes of every other job of the session.
    settled: u64,
    /// Those other jobs that still keep output, by when they ended (the age limit's queue).
    by_end: BTreeSet<(Instant, JobId)>,
}

impl Ledger {
    /// A job was added to the session (new, or rebuilt by a restarted front).
    pub fn add(&mut self, job: JobId) {
        self.active.insert(job);
    }
}

/// Apply the session limit and the age limit to a session's ended jobs (oldest first).
pub fn enforce(st: &mut SessionState, r: Retention, now: Instant) {
    let SessionState { jobs, retention: ledger, .. } = st;
    let age_why = || format!("output of ended jobs is kept {}", human_secs(r.max_age));
    let aged = |job: &Job| job.ended_at().is_some_and(|at| now.duration_since(at) >= r.max_age);
    let mut active_bytes = 0;
    for id in ledger.active.clone() {
        let Some(job) = jobs.get_mut(&id) else {
            ledger.active.remove(&id);
            continue;
        };
        if aged(job) {
            job.remove_output(0, &age_why());
        }
        // Counted once it can write no more and nothing of it waits in a buffer (a failed flush
        // drops what was buffered, which would leave the count too high).
        match (job.settled() && !job.dirty(), job.ended_at()) {
            (true, Some(at)) => {
                ledger.active.remove(&id);
                ledger.settled += job.kept_bytes();
                if job.kept_bytes() > 0 {
                    ledger.by_end.insert((at, id));
                }
            }
            _ => active_bytes += job.kept_bytes(),
        }
    }
    while let Some(&(at, id)) = ledger.by_end.first() {
        if now.duration_since(at) < r.max_age {
            break;
        }
        ledger.by_end.pop_first();
        if let Some(job) = jobs.get_mut(&id) {
            let before = job.kept_bytes();
            job.remove_output(0, &age_why());
            ledger.settled -= before.saturating_sub(job.kept_bytes()).min(ledger.settled);
        }
    }
    let mut total = ledger.settled + active_bytes;
    if total <= r.session_bytes {
        return;
    }
    let why = format!("max {} per session; oldest ended jobs first", human_bytes(r.session_bytes));
    let mut ended: Vec<_> = jobs.values_mut().filter(|j| j.ended_at().is_some()).collect();
    ended.sort_by_key(|j| j.id());
    for job in ended {
        if total <= r.session_bytes {
            break;
        }
        let before = job.kept_bytes();
        job.remove_output(0, &why);
        total -= before - job.kept_bytes();
    }
    // Removal touched settled jobs: count them again.
    ledger.settled = 0;
    ledger.by_end.clear();
    for (id, job) in jobs.iter().filter(|(id, _)| !ledger.active.contains(id)) {
        ledger.settled += job.kept_bytes();
        if let (true, Some(at)) = (job.kept_bytes() > 0, job.ended_at()) {
            ledger.by_end.insert((at, *id));
        }
    }
}

fn human_secs(d: Duration) -> String {
    let s = d.as_secs();
    let (n, unit) = match s {
        s if s >= 86_400 && s % 86_400 == 0 => (s / 86_400, "day"),
        s if s >= 3600 && s % 3600 == 0 => (s / 3600, "hour"),
        s => (s, "second"),
    };
    format!("{n} {unit}{}", if n == 1 { "" } else { "s" })
}

#[cfg(test)]
mod tests {
    use super::*;
    use shm_proto::msg::Stream;

    fn session_with(outputs: &[usize], dir: &std::path::Path, now: Instant) -> SessionState {
        let mut st = SessionState::default();
        for (i, n) in outputs.iter().enumerate() {
            let id = st.add_job(format!("job {i}"), dir);
            let job = st.jobs.get_mut(&id).unwrap();
            let text: String = (0..*n).map(|l| format!("{i} line {l}\n")).collect();
            job.on_output(Stream::Stdout, text.as_bytes(), now, 0);
            job.on_exited(Some(0), None, 0, false, now);
            job.on_streams_closed();
        }
        st
    }

    #[test]
    fn the_session_cap_removes_the_oldest_ended_jobs_first_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let now = Instant::now();
        let mut st = session_with(&[1000, 1000, 1000], dir.path(), now);
        let per_job = st.jobs[&1].kept_bytes();
        let r = Retention { session_bytes: 2 * per_job + 10, ..Retention::default() };
        enforce(&mut st, r, now);
        assert_eq!(st.jobs[&1].kept_bytes(), 0, "the oldest ended job goes");
        assert_eq!((st.jobs[&2].kept_bytes(), st.jobs[&3].kept_bytes()), (per_job, per_job));
        let (raw, lines) = st.jobs[&1].removed();
        assert_eq!((raw, lines), ([st.jobs[&1].counts()[0], 0], 1000), "every byte and line is counted");
        let line = st.jobs[&1].retention_line().unwrap();
        assert!(line.contains("of stdout (lines 1–1000) removed by retention (max"), "{line}");
        assert!(line.contains("per session; oldest ended jobs first"), "{line}");
        assert!(st.jobs[&2].retention_line().is_none());
    }

    #[test]
    fn ended_jobs_output_older_than_the_age_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let then = Instant::now();
        let mut st = session_with(&[10], dir.path(), then);
        let r = Retention { max_age: Duration::from_secs(3600), ..Retention::default() };
        enforce(&mut st, r, then + Duration::from_secs(60));
        assert!(st.jobs[&1].retention_line().is_none(), "young output stays");
        enforce(&mut st, r, then + Duration::from_secs(3600));
        let line = st.jobs[&1].retention_line().unwrap();
        assert!(line.ends_with("removed by retention (output of ended jobs is kept 1 hour) …]\n"), "{line}");
        let view = st.jobs.get_mut(&1).unwrap().result("s", then, Vec::new(), false, 40_000).view;
        assert!(view.starts_with(&line), "the view starts with the retention line: {view}");
    }

    #[test]
    fn limits_stay_exact_for_jobs_counted_at_earlier_checks() {
        let dir = tempfile::tempdir().unwrap();
        let then = Instant::now();
        let r = Retention { max_age: Duration::from_secs(3600), ..Retention::default() };
        // Jobs 1–3 end and settle at `then`, and are counted by this check.
        let mut st = session_with(&[100, 100, 100], dir.path(), then);
        let per_job = st.jobs[&1].kept_bytes();
        enforce(&mut st, r, then);
        // Job 4 ends later, after writing more; job 5 still runs.
        let (four, five) = (st.add_job("four".into(), dir.path()), st.add_job("five".into(), dir.path()));
        let job = st.jobs.get_mut(&four).unwrap();
        job.on_output(Stream::Stdout, b"late\n", then, 0);
        job.on_exited(Some(0), None, 0, false, then + Duration::from_secs(600));
        job.on_streams_closed();
        st.jobs.get_mut(&five).unwrap().on_output(Stream::Stdout, b"running\n", then, 0);
        enforce(&mut st, r, then + Duration::from_secs(3599));
        assert!(st.jobs.values().all(|j| j.retention_line().is_none()), "nothing is due yet");
        enforce(&mut st, r, then + Duration::from_secs(3600));
        let aged: Vec<_> = st.jobs.values().filter(|j| j.retention_line().is_some()).map(|j| j.id()).collect();
        assert_eq!(aged, [1, 2, 3], "the counted jobs age out on time, the later one not yet");
        enforce(&mut st, r, then + Duration::from_secs(4200));
        assert!(st.jobs[&four].retention_line().is_some(), "the later job ages out on its own time");
        assert!(st.jobs[&five].retention_line().is_none(), "a running job keeps its output");
        // The session cap counts the running job's bytes and removes the oldest ended output first.
        let mut st = session_with(&[100, 100, 100], dir.path(), then);
        enforce(&mut st, Retention::default(), then);
        let six = st.add_job("six".into(), dir.path());
        let text: String = (0..100).map(|l| format!("6 line {l}\n")).collect();
        st.jobs.get_mut(&six).unwrap().on_output(Stream::Stdout, text.as_bytes(), then, 0);
        let cap = Retention { session_bytes: 3 * per_job + 10, ..Retention::default() };
        enforce(&mut st, cap, then);
        let kept: Vec<_> = st.jobs.values().map(|j| j.kept_bytes() > 0).collect();
        assert_eq!(kept, [false, true, true, true], "four jobs' worth over a three-job cap: job 1 goes");
    }
}
