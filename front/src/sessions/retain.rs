//! A session's output budget, enforced: the session limit and the age limit of
//! [`crate::output::retention`] applied to a session's ended jobs, oldest first, with a [`Ledger`] so a
//! check costs the session's unfinished jobs, not every job it ever ran.

use crate::jobs::job::Job;
use crate::output::retention::Retention;
use crate::output::sniff::human_bytes;
use crate::sessions::session::SessionData;
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

    /// Whether `job`'s kept bytes are counted as settled (it is no longer summed afresh).
    pub fn counted(&self, job: JobId) -> bool {
        !self.active.contains(&job)
    }
}

/// Apply the session limit and the age limit to a session's ended jobs (oldest first). Returns the
/// bytes the session's jobs keep afterwards.
pub fn enforce(st: &mut SessionData, r: Retention, now: Instant) -> u64 {
    let (mut jobs, ledger) = st.jobs_and_ledger();
    let age_why = || format!("output of ended jobs is kept {}", human_secs(r.max_age));
    let aged = |job: &Job| job.ended_at().is_some_and(|at| now.duration_since(at) >= r.max_age);
    let mut active_bytes = 0;
    for id in ledger.active.clone() {
        let Some(job) = jobs.get_mut(id) else {
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
        if let Some(job) = jobs.get_mut(id) {
            let before = job.kept_bytes();
            job.remove_output(0, &age_why());
            ledger.settled -= before.saturating_sub(job.kept_bytes()).min(ledger.settled);
        }
    }
    let mut total = ledger.settled + active_bytes;
    if total <= r.session_bytes {
        return total;
    }
    let why = format!("max {} per session; oldest ended jobs first", human_bytes(r.session_bytes));
    // The ended jobs that keep output: the counted ones are all in `by_end` (those let go from memory
    // too), the others are held in memory.
    let mut ended: BTreeSet<JobId> = ledger.by_end.iter().map(|(_, id)| *id).collect();
    ended.extend(jobs.held().filter(|(id, j)| ledger.active.contains(id) && j.ended_at().is_some()).map(|(id, _)| *id));
    for id in ended {
        if total <= r.session_bytes {
            break;
        }
        let Some(job) = jobs.get_mut(id) else { continue };
        let before = job.kept_bytes();
        job.remove_output(0, &why);
        let freed = before.saturating_sub(job.kept_bytes());
        total -= freed.min(total);
        match ledger.active.contains(&id) {
            true => active_bytes -= freed.min(active_bytes),
            false => {
                ledger.settled -= freed.min(ledger.settled);
                if let (0, Some(at)) = (job.kept_bytes(), job.ended_at()) {
                    ledger.by_end.remove(&(at, id));
                }
            }
        }
    }
    ledger.settled + active_bytes
}

/// The ended, counted jobs that still keep output, by when they ended (the disk budget's candidates).
pub fn ended_keeping(st: &SessionData) -> Vec<(Instant, JobId)> {
    st.ledger().by_end.iter().copied().collect()
}

/// The disk budget removes ended job `id`'s oldest output, `excess` bytes of it or all it keeps if
/// that is less (whole records); returns the bytes freed.
pub fn evict(st: &mut SessionData, id: JobId, excess: u64, why: &str) -> u64 {
    let (mut jobs, ledger) = st.jobs_and_ledger();
    let Some(job) = jobs.get_mut(id) else { return 0 };
    if ledger.active.contains(&id) {
        return 0;
    }
    let before = job.kept_bytes();
    let freed = trim(job, before.saturating_sub(excess), why);
    ledger.settled -= freed.min(ledger.settled);
    if job.kept_bytes() == 0 {
        ledger.by_end.retain(|(_, j)| *j != id);
    }
    freed
}

/// Remove `job`'s oldest output until it keeps at most `target` bytes (raw log and line log
/// together); returns the bytes freed.
fn trim(job: &mut Job, target: u64, why: &str) -> u64 {
    let before = job.kept_bytes();
    if before <= target {
        return 0;
    }
    // `remove_output(keep)` keeps up to `keep` bytes of the raw log and of the line log each.
    let lines = job.kept_lines_bytes().min(target / 2);
    job.remove_output(target - lines, why);
    before.saturating_sub(job.kept_bytes())
}

/// Jobs of the session still counted afresh (running, or not yet settled): `(id, kept bytes)`.
pub fn unsettled(st: &SessionData) -> Vec<(JobId, u64)> {
    st.ledger().active.iter().filter_map(|id| Some((*id, st.job(*id)?.kept_bytes()))).collect()
}

/// The disk budget, reached by running jobs alone: job `id` keeps at most `share` bytes, its oldest
/// output removed (the tail stays) and the job told in a note. Returns the bytes freed.
pub fn clamp_running(st: &mut SessionData, id: JobId, share: u64, why: &str) -> u64 {
    let Some(job) = st.job_mut(id) else { return 0 };
    let freed = trim(job, share, why);
    if freed > 0 {
        job.note(format!(
            "the server's disk budget was reached while this job ran ({why}): its oldest output was removed, the rest is kept; the view's first line says how much"
        ));
    }
    freed
}

/// The server's disk budget over every open session: `lock(i)` locks session `i` of `n` (one at a
/// time, never two at once) and `totals[i]` is what [`enforce`] returned for it. Ended jobs' output
/// goes first, oldest first: the job that ended first first, whole, or its oldest records when less
/// is enough; then running jobs over an equal share of the budget lose their oldest output. Returns
/// the bytes kept afterwards.
pub fn enforce_disk<G: std::ops::DerefMut<Target = SessionData>>(
    totals: &[u64],
    mut lock: impl FnMut(usize) -> Option<G>,
    budget: u64,
) -> u64 {
    let mut total: u64 = totals.iter().sum();
    if total <= budget {
        return total;
    }
    let why = format!("server disk budget {}; oldest ended output first", human_bytes(budget));
    let mut ended: Vec<(Instant, usize, JobId)> = Vec::new();
    for i in 0..totals.len() {
        if let Some(st) = lock(i) {
            ended.extend(ended_keeping(&st).into_iter().map(|(at, id)| (at, i, id)));
        }
    }
    ended.sort();
    for (_, i, id) in ended {
        if total <= budget {
            return total;
        }
        if let Some(mut st) = lock(i) {
            total -= evict(&mut st, id, total - budget, &why).min(total);
        }
    }
    if total <= budget {
        return total;
    }
    // What is left is the unsettled jobs' (mostly running) and what eviction could not free.
    let mut running: Vec<(usize, JobId, u64)> = Vec::new();
    for i in 0..totals.len() {
        if let Some(st) = lock(i) {
            running.extend(unsettled(&st).into_iter().map(|(id, n)| (i, id, n)));
        }
    }
    let others = total.saturating_sub(running.iter().map(|r| r.2).sum());
    let share = budget.saturating_sub(others) / (running.len().max(1) as u64);
    let why =
        format!("server disk budget {} reached by running jobs; each keeps its newest output", human_bytes(budget));
    for (i, id, n) in running {
        if n > share {
            if let Some(mut st) = lock(i) {
                total -= clamp_running(&mut st, id, share, &why).min(total);
            }
        }
    }
    total
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

    fn session_with(outputs: &[usize], dir: &std::path::Path, now: Instant) -> SessionData {
        let mut st = SessionData::default();
        for (i, n) in outputs.iter().enumerate() {
            let id = st.add_job(format!("job {i}"), dir);
            let job = st.job_mut(id).unwrap();
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
        let per_job = st.job(1).unwrap().kept_bytes();
        let r = Retention { session_bytes: 2 * per_job + 10, ..Retention::default() };
        enforce(&mut st, r, now);
        assert_eq!(st.job(1).unwrap().kept_bytes(), 0, "the oldest ended job goes");
        assert_eq!((st.job(2).unwrap().kept_bytes(), st.job(3).unwrap().kept_bytes()), (per_job, per_job));
        let (raw, lines) = st.job(1).unwrap().removed();
        assert_eq!((raw, lines), ([st.job(1).unwrap().counts()[0], 0], 1000), "every byte and line is counted");
        let line = st.job(1).unwrap().retention_line().unwrap();
        assert!(line.contains("of stdout (lines 1–1000) removed by retention (max"), "{line}");
        assert!(line.contains("per session; oldest ended jobs first"), "{line}");
        assert!(st.job(2).unwrap().retention_line().is_none());
    }

    #[test]
    fn ended_jobs_output_older_than_the_age_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let then = Instant::now();
        let mut st = session_with(&[10], dir.path(), then);
        let r = Retention { max_age: Duration::from_secs(3600), ..Retention::default() };
        enforce(&mut st, r, then + Duration::from_secs(60));
        assert!(st.job(1).unwrap().retention_line().is_none(), "young output stays");
        enforce(&mut st, r, then + Duration::from_secs(3600));
        let line = st.job(1).unwrap().retention_line().unwrap();
        assert!(line.ends_with("removed by retention (output of ended jobs is kept 1 hour) …]\n"), "{line}");
        let view = st.job_mut(1).unwrap().result("s", then, Vec::new(), false, 40_000).view;
        assert!(view.starts_with(&line), "the view starts with the retention line: {view}");
    }

    #[test]
    fn limits_stay_exact_for_jobs_counted_at_earlier_checks() {
        let dir = tempfile::tempdir().unwrap();
        let then = Instant::now();
        let r = Retention { max_age: Duration::from_secs(3600), ..Retention::default() };
        // Jobs 1–3 end and settle at `then`, and are counted by this check.
        let mut st = session_with(&[100, 100, 100], dir.path(), then);
        let per_job = st.job(1).unwrap().kept_bytes();
        enforce(&mut st, r, then);
        // Job 4 ends later, after writing more; job 5 still runs.
        let (four, five) = (st.add_job("four".into(), dir.path()), st.add_job("five".into(), dir.path()));
        let job = st.job_mut(four).unwrap();
        job.on_output(Stream::Stdout, b"late\n", then, 0);
        job.on_exited(Some(0), None, 0, false, then + Duration::from_secs(600));
        job.on_streams_closed();
        st.job_mut(five).unwrap().on_output(Stream::Stdout, b"running\n", then, 0);
        enforce(&mut st, r, then + Duration::from_secs(3599));
        assert!(st.jobs().all(|j| j.retention_line().is_none()), "nothing is due yet");
        enforce(&mut st, r, then + Duration::from_secs(3600));
        let aged: Vec<_> = st.jobs().filter(|j| j.retention_line().is_some()).map(|j| j.id()).collect();
        assert_eq!(aged, [1, 2, 3], "the counted jobs age out on time, the later one not yet");
        enforce(&mut st, r, then + Duration::from_secs(4200));
        assert!(st.job(four).unwrap().retention_line().is_some(), "the later job ages out on its own time");
        assert!(st.job(five).unwrap().retention_line().is_none(), "a running job keeps its output");
        // The session cap counts the running job's bytes and removes the oldest ended output first.
        let mut st = session_with(&[100, 100, 100], dir.path(), then);
        enforce(&mut st, Retention::default(), then);
        let six = st.add_job("six".into(), dir.path());
        let text: String = (0..100).map(|l| format!("6 line {l}\n")).collect();
        st.job_mut(six).unwrap().on_output(Stream::Stdout, text.as_bytes(), then, 0);
        let cap = Retention { session_bytes: 3 * per_job + 10, ..Retention::default() };
        enforce(&mut st, cap, then);
        let kept: Vec<_> = st.jobs().map(|j| j.kept_bytes() > 0).collect();
        assert_eq!(kept, [false, true, true, true], "four jobs' worth over a three-job cap: job 1 goes");
    }

    #[test]
    fn jobs_let_go_from_memory_read_back_the_same_and_retention_still_reaches_them() {
        let dir = tempfile::tempdir().unwrap();
        let now = Instant::now();
        let mut st = session_with(&[100; 6], dir.path(), now);
        assert_eq!(st.retire(dir.path(), 2, |_| true), 0, "none is done with while its cgroup may hold processes");
        for id in 1..=6 {
            st.job_mut(id).unwrap().on_emptied(0, shm_proto::msg::JobUsage::default());
            st.job_mut(id).unwrap().result("s", now, vec![], true, 40_000);
        }
        assert_eq!(st.retire(dir.path(), 0, |id| id == 6), 0, "nor before retention counted it");
        enforce(&mut st, Retention::default(), now);
        assert_eq!(st.retire(dir.path(), 2, |id| id > 4), 0, "nor while its database rows may change");
        let summary = |st: &SessionData, id| serde_json::to_value(st.job(id).unwrap().summary(now)).unwrap();
        let before: Vec<_> = (1..=6).map(|id| summary(&st, id)).collect();
        assert_eq!(st.retire(dir.path(), 2, |_| true), 4);
        assert_eq!((st.jobs().count(), st.job_count(), st.retired().count()), (2, 6, 4));
        assert_eq!((1..=6).map(|id| summary(&st, id)).collect::<Vec<_>>(), before);
        assert_eq!(st.all_jobs().map(|j| j.id()).collect::<Vec<_>>(), [1, 2, 3, 4, 5, 6]);
        assert!(st.has_job(1) && !st.has_job(7) && st.job(7).is_none());
        // The session cap removes the oldest ended output first: jobs on disk come back to be cut.
        let per_job = st.job(1).unwrap().kept_bytes();
        enforce(&mut st, Retention { session_bytes: 4 * per_job + 10, ..Retention::default() }, now);
        let kept: Vec<_> = st.all_jobs().map(|j| j.kept_bytes() > 0).collect();
        assert_eq!(kept, [false, false, true, true, true, true]);
        assert!(st.job(1).unwrap().retention_line().is_some());
        assert_eq!((st.jobs().count(), st.job_count()), (4, 6), "back in memory, counted once");
        assert_eq!(st.retire(dir.path(), 2, |_| true), 2, "let go again");
        assert_eq!((st.jobs().count(), st.job_count(), st.retired().count()), (2, 6, 4));
        assert!(st.job(2).unwrap().retention_line().is_some(), "the cut record was written again");
        assert_eq!(enforce(&mut st, Retention::default(), now), 4 * per_job, "and counted once");
    }

    #[test]
    fn a_job_changed_after_it_was_let_go_is_counted_as_it_is_now() {
        let dir = tempfile::tempdir().unwrap();
        let now = Instant::now();
        let mut st = SessionData::default();
        for _ in 0..3 {
            let id = st.add_job(":".into(), dir.path());
            // A refused call with files to write: refused at its exit, its cgroup not yet seen empty.
            let j = st.job_mut(id).unwrap();
            j.refuse_on_exit(vec!["refused".into()]);
            j.on_exited(Some(0), None, 0, false, now);
            j.on_streams_closed();
            j.result("s", now, vec![], true, 40_000);
        }
        enforce(&mut st, Retention::default(), now);
        assert_eq!(st.retire(dir.path(), 0, |_| true), 3);
        assert_eq!(st.retired().cpu_ms(), 0.0);
        let usage = shm_proto::msg::JobUsage { cpu_usec: 5_000_000, ..Default::default() };
        st.job_mut(1).unwrap().on_emptied(0, usage);
        assert_eq!(st.retire(dir.path(), 0, |_| true), 1);
        assert_eq!((st.retired().cpu_ms(), st.retired().count(), st.job_count()), (5000.0, 3, 3));
        assert_eq!(st.retired().by_state().get("refused"), Some(&3));
    }

    /// Session `st` gets an ended job of `lines` lines, ended at `at`.
    fn ended_job(st: &mut SessionData, dir: &std::path::Path, lines: usize, at: Instant) -> JobId {
        let id = st.add_job(format!("job {lines}"), dir);
        let job = st.job_mut(id).unwrap();
        let text: String = (0..lines).map(|l| format!("{id} line {l} {}\n", l * 7919 % 104729)).collect();
        job.on_output(Stream::Stdout, text.as_bytes(), at, 0);
        job.on_exited(Some(0), None, 0, false, at);
        job.on_streams_closed();
        id
    }

    fn disk(sessions: &[std::sync::Mutex<SessionData>], budget: u64, now: Instant) -> u64 {
        let totals: Vec<u64> =
            sessions.iter().map(|s| enforce(&mut s.lock().unwrap(), Retention::default(), now)).collect();
        enforce_disk(&totals, |i| sessions.get(i).map(|s| s.lock().unwrap()), budget)
    }

    #[test]
    fn the_disk_budget_removes_the_job_that_ended_first_whatever_its_session() {
        let dir = tempfile::tempdir().unwrap();
        let t0 = Instant::now();
        let (mut a, mut b) = (SessionData::default(), SessionData::default());
        let (da, db) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::create_dir_all(&da).unwrap();
        std::fs::create_dir_all(&db).unwrap();
        // Ended in this order: b1, a1, b2, a2.
        let b1 = ended_job(&mut b, &db, 3000, t0);
        let a1 = ended_job(&mut a, &da, 3000, t0 + Duration::from_secs(1));
        let b2 = ended_job(&mut b, &db, 3000, t0 + Duration::from_secs(2));
        let a2 = ended_job(&mut a, &da, 3000, t0 + Duration::from_secs(3));
        let per_job = a.job(a1).unwrap().kept_bytes();
        assert!(per_job > 10_000);
        let sessions = [std::sync::Mutex::new(a), std::sync::Mutex::new(b)];
        let now = t0 + Duration::from_secs(4);
        let all = disk(&sessions, 4 * per_job + 1000, now);
        assert!(all > 4 * per_job - 1000, "{all}");
        let untouched =
            |s: &std::sync::Mutex<SessionData>| s.lock().unwrap().jobs().all(|j| j.retention_line().is_none());
        assert!(sessions.iter().all(untouched), "under the budget nothing goes");
        let kept = disk(&sessions, 2 * per_job + 100, now);
        assert!(kept <= 2 * per_job + 100, "{kept}");
        let (a, b) = (sessions[0].lock().unwrap(), sessions[1].lock().unwrap());
        assert_eq!(
            (b.job(b1).unwrap().kept_bytes(), a.job(a1).unwrap().kept_bytes()),
            (0, 0),
            "the two that ended first go"
        );
        assert!(a.job(a2).unwrap().kept_bytes() > 0 && b.job(b2).unwrap().kept_bytes() > 0, "the newer two stay");
        let line = b.job(b1).unwrap().retention_line().unwrap();
        assert!(line.contains("(lines 1–3000) removed by retention (server disk budget "), "{line}");
        assert!(line.ends_with("; oldest ended output first) …]\n"), "{line}");
        assert_eq!(b.ledger().settled, b.job(b2).unwrap().kept_bytes(), "the ledger follows");
    }

    #[test]
    fn running_jobs_over_the_disk_budget_keep_their_newest_output_and_are_told() {
        let dir = tempfile::tempdir().unwrap();
        let now = Instant::now();
        let mut st = SessionData::default();
        let old = ended_job(&mut st, dir.path(), 2000, now);
        let run = st.add_job("running".into(), dir.path());
        let text: String = (0..200_000).map(|l| format!("running line {l} {}\n", l * 7919 % 104729)).collect();
        // In chunks, as the pump delivers them (retention removes whole records).
        for chunk in text.as_bytes().chunks(16 << 10) {
            st.job_mut(run).unwrap().on_output(Stream::Stdout, chunk, now, 0);
        }
        let budget = 1 << 20;
        let sessions = [std::sync::Mutex::new(st)];
        let kept = disk(&sessions, budget, now);
        assert!(kept <= budget, "{kept}");
        let mut st = sessions[0].lock().unwrap();
        assert_eq!(st.job(old).unwrap().kept_bytes(), 0, "the ended job's output goes first");
        let job = st.job_mut(run).unwrap();
        assert!(job.kept_bytes() > budget / 2 && job.kept_bytes() <= budget, "{}", job.kept_bytes());
        let line = job.retention_line().unwrap();
        assert!(line.contains("removed by retention (server disk budget 1.0 MiB reached by running jobs"), "{line}");
        let r = job.result("s", now, Vec::new(), false, 40_000);
        assert!(r.view.starts_with(&line), "{}", r.view);
        assert!(r.view.ends_with("running line 199999 80143\n"), "the tail stays: {}", r.view);
        let note = r.note.unwrap_or_default();
        assert!(note.contains("the server's disk budget was reached while this job ran"), "{note}");
    }
}
