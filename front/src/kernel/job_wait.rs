//! `wait {session, job, yield_ms?}`: wait up to `yield_ms` more for a job to end. A wait that times out
//! changes nothing; it answers the job's current result (`running`, with liveness).
//!
//! [`answer`] is the one place a job result is built after waiting, shared by `run`, `wait` and
//! `kill`: it sleeps on the session's condvar (woken when a job ends, the session is lost, or shutdown
//! begins — never by polling), then builds the result, marks the job reported if it ended, and adds
//! the announcements of every other ended, unreported job of the session.
//!
//! ```text
//! → {"jsonrpc":"2.0","id":3,"method":"wait","params":{"session":"demo","job":1,"yield_ms":1000}}
//! ← {"jsonrpc":"2.0","id":3,"result":{"session":"demo","job":1,"state":"running","liveness":
//!    {"running_ms":11012,"last_output_ms_ago":950,"pid":4711},…,"announcements":[]}}
//! ```

use crate::jobs::job::Job;
use crate::kernel::{clamp_wait, deadline, unknown_job, Client, Kernel, DEFAULT_YIELD_MS};
use crate::output::view;
use crate::rpc::results::JobResult;
use crate::rpc::{self, RpcError};
use crate::sessions::session::Session;
use serde::Deserialize;
use serde_json::Value;
use shm_proto::msg::JobId;
use std::time::{Duration, Instant};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Params {
    session: String,
    job: JobId,
    #[serde(default)]
    yield_ms: Option<u64>,
    #[serde(default)]
    max_output_tokens: Option<u64>,
    #[serde(default)]
    max_output_bytes: Option<u64>,
}

pub(crate) fn call(k: &Kernel, client: &Client, params: Value) -> Result<JobResult, RpcError> {
    let p: Params = rpc::params("wait", params)?;
    let s = k.session(client, &p.session)?;
    if !s.lock().has_job(p.job) {
        return Err(unknown_job(&p.session, p.job));
    }
    let (d, note) = clamp_wait("yield_ms", p.yield_ms, DEFAULT_YIELD_MS);
    let mut notes: Vec<String> = note.into_iter().collect();
    let budget = view_budget(p.max_output_tokens, p.max_output_bytes, &mut notes);
    answer(k, &s, p.job, deadline(d), notes, budget)
}

/// The view budget in bytes from `max_output_tokens` (≈ 4 bytes each) or `max_output_bytes` (the
/// smaller when both are given), clamped to what a view can hold, with a note when clamped.
pub(crate) fn view_budget(tokens: Option<u64>, bytes: Option<u64>, notes: &mut Vec<String>) -> usize {
    let asked = match (tokens.map(|t| t.saturating_mul(4)), bytes) {
        (Some(a), Some(b)) => a.min(b),
        (a, b) => a.or(b).unwrap_or(view::DEFAULT_BUDGET as u64),
    };
    let (min, max) = (view::MIN_BUDGET as u64, view::MAX_BUDGET as u64);
    if !(min..=max).contains(&asked) {
        let clamped = asked.clamp(min, max);
        // Said in the unit the caller used: a model asks in tokens (about 4 bytes each).
        let by_tokens = tokens.is_some_and(|t| bytes.is_none_or(|b| t.saturating_mul(4) <= b));
        notes.push(match by_tokens {
            true => format!(
                "max_output_tokens {} is outside {}..={} tokens; the view uses {} tokens",
                tokens.unwrap_or_default(),
                min / 4,
                max / 4,
                clamped / 4
            ),
            false => {
                format!("the output budget of {asked} bytes is outside {min}..={max}; the view uses {clamped} bytes")
            }
        });
        return clamped as usize;
    }
    asked as usize
}

/// Wait until `job` ends (and the worker said what it left behind) or `until` passes, then answer its
/// result with the session's announcements.
pub(crate) fn answer(
    k: &Kernel,
    s: &Session,
    job: JobId,
    until: Instant,
    notes: Vec<String>,
    budget: usize,
) -> Result<JobResult, RpcError> {
    let until = until_input_wanted(k, s, job, until);
    answer_when(k, s, job, until, notes, Job::end_known, budget)
}

/// How long a terminal's screen stays unchanged before the job is probed for whether it waits for input.
pub const INPUT_QUIET: Duration = Duration::from_millis(200);
/// The longest pause between two such probes of a job that keeps not reading its terminal.
const INPUT_PROBE_MAX: Duration = Duration::from_secs(5);

/// For a terminal job, the moment the call may answer before `until`: once the screen was quiet for
/// [`INPUT_QUIET`] and the job's foreground process sleeps reading the terminal (a prompt, a REPL,
/// a pager: waiting longer cannot change anything until something is typed). Probed again after each
/// quiet period, the pause doubling while the answer is no (a quiet build is not probed 5 times a
/// second). `until` itself for any other job, or when the job ends first.
fn until_input_wanted(k: &Kernel, s: &Session, job: JobId, until: Instant) -> Instant {
    let look = |st: &crate::sessions::session::SessionData| {
        let feed = st.terminals().by_job.get(&job).filter(|f| f.term.is_some() && !f.closed);
        (st.job(job).is_none_or(|j| j.state().ended()), feed.map(|f| (f.seq, f.last_output)))
    };
    let (mut pause, mut since) = (INPUT_QUIET, Instant::now());
    let mut st = s.lock();
    loop {
        let (ended, feed) = look(&st);
        let Some((seq, last_output)) = feed else { return until };
        if ended || Instant::now() >= until || k.is_shutting_down() {
            return until;
        }
        let probe_at = last_output.map_or(since, |t| t.max(since)) + pause;
        if Instant::now() < probe_at {
            st = s.wait_until(st, probe_at.min(until), k.shutdown_flag(), |st| {
                let (e, f) = look(st);
                e || f.is_none_or(|(q, _)| q != seq)
            });
            continue;
        }
        drop(st);
        let live = crate::kernel::job_probe::probe(k, s, job);
        if live.as_ref().is_some_and(|l| l.activity.starts_with("blocked reading stdin/tty")) {
            return Instant::now();
        }
        (pause, since) = ((pause * 2).min(INPUT_PROBE_MAX), Instant::now());
        st = s.lock();
    }
}

/// [`answer`], waiting until `done` holds for the job.
pub(crate) fn answer_when(
    k: &Kernel,
    s: &Session,
    job: JobId,
    until: Instant,
    mut notes: Vec<String>,
    done: fn(&Job) -> bool,
    budget: usize,
) -> Result<JobResult, RpcError> {
    let ended = |st: &crate::sessions::session::SessionData| st.job(job).is_none_or(|j| done(&j));
    let st = s.wait_until(s.lock(), until, k.shutdown_flag(), ended);
    if k.is_shutting_down() && !ended(&st) {
        notes.push("the server is shutting down, so this call returns early; the job was not stopped by it".to_owned());
    }
    let running = st.job(job).is_some_and(|j| j.worth_probing());
    drop(st);
    let live = if running { crate::kernel::job_probe::probe(k, s, job) } else { None };
    let mut st = s.lock();
    let now = Instant::now();
    let Some(mut j) = st.job_to_read(job) else {
        return Err(unknown_job(s.name(), job));
    };
    let mut result = j.result(s.name(), now, notes, true, budget);
    if live.is_some() {
        result.liveness = j.liveness(now, live.as_ref());
    }
    result.terminal = st.terminals_mut().view(job, true);
    crate::kernel::terminal_io::waiting_for_input(&mut result.liveness, result.terminal.as_ref());
    if !st.terminals().by_job.contains_key(&job) {
        crate::kernel::terminal_io::point_to_tty(&mut result);
    }
    explain_refusals(s, &st, &mut result);
    result.announcements = st.take_announcements(now);
    drop(st);
    crate::kernel::check_run::complete(k, s, job, &mut result);
    Ok(result)
}

/// For a job that ended non-zero in a sandboxed session, the sentences saying which rule refused which
/// path its output names, and whether the policy refused it a pseudo-terminal.
fn explain_refusals(s: &Session, st: &crate::sessions::session::SessionData, result: &mut JobResult) {
    if let (Some(info), Some(code)) = (st.sandbox(), result.exit_code) {
        if code != 0 {
            let user = st.worker().map(|w| crate::sessions::refusal::JobUser::of_worker(w.pid, w.uid));
            // Relative paths in the output are the shell's: from its carried cwd (after the job, so a
            // `cd sub && touch x` names `sub/x`), else where the session was opened.
            let carried = st.record().items().get("cwd").map(|c| String::from_utf8_lossy(c).into_owned());
            let cwd = carried.as_deref().unwrap_or(&s.spec().cwd);
            let more = crate::sessions::sandbox::explain_refusals(&result.view, cwd, info, user.as_ref());
            result.refusals.extend(more);
            result.refusals.extend(crate::sessions::sandbox::explain_ptys(&result.cmd, &result.view, info));
            // A command not found is no refusal: where the uid may explain it, it is a warning.
            if let Some(user) = &user {
                let path = std::env::var("PATH").unwrap_or_default();
                result.warnings.extend(crate::sessions::refusal::not_found(&result.view, user, &path));
            }
            // A preflight warning foretold what a refusal now says: the refusal stays.
            let refused = |w: &str| {
                w.strip_prefix("preflight: this command writes or deletes ")
                    .and_then(|rest| rest.split_once(", which "))
                    .is_some_and(|(t, _)| result.refusals.iter().any(|r| r.starts_with(&format!("{t}: "))))
            };
            let warnings = std::mem::take(&mut result.warnings);
            result.warnings = warnings.into_iter().filter(|w| !refused(w)).collect();
        }
    }
}

/// A job's result as it stands, for an onlooker (the cockpit): it neither waits nor probes, and it
/// marks nothing reported, so the session's next call still announces the job.
pub(crate) fn look(k: &Kernel, client: &Client, session: &str, job: JobId) -> Result<JobResult, RpcError> {
    let s = k.session(client, session)?;
    let mut st = s.lock();
    let Some(mut j) = st.job_to_read(job) else {
        return Err(unknown_job(session, job));
    };
    let mut result = j.result(s.name(), Instant::now(), Vec::new(), false, view::MIN_BUDGET);
    explain_refusals(&s, &st, &mut result);
    Ok(result)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_clamped_budget_is_said_in_the_unit_asked_for() {
        let mut notes = Vec::new();
        assert_eq!(super::view_budget(Some(200), None, &mut notes), crate::output::view::MIN_BUDGET);
        assert!(notes[0].starts_with("max_output_tokens 200 is outside 250..="), "{notes:?}");
        let mut notes = Vec::new();
        super::view_budget(None, Some(10), &mut notes);
        assert!(notes[0].starts_with("the output budget of 10 bytes is outside 1000..="), "{notes:?}");
    }

    use crate::rpc::ErrorKind;
    use crate::testing::{announced, Harness};
    use serde_json::json;

    #[test]
    fn wait_returns_the_end_and_marks_it_reported() {
        let h = Harness::new();
        h.open("demo");
        assert_eq!(h.run("demo", "sleep 100", 0)["state"], "running");
        let r = h.ok("wait", json!({"session": "demo", "job": 1, "yield_ms": 5000}));
        assert_eq!((r["state"].as_str(), r["exit_code"].as_i64()), (Some("exited"), Some(0)));
        assert!(announced(&r).is_empty());
        assert!(
            announced(&h.ok("jobs", json!({"session": "demo"}))).is_empty(),
            "reported by wait, not announced later"
        );
        let again = h.ok("wait", json!({"session": "demo", "job": 1}));
        assert_eq!(again["state"], "exited", "waiting on an ended job answers at once");
    }

    #[test]
    fn a_wait_that_times_out_changes_nothing() {
        let h = Harness::new();
        h.open("demo");
        h.run("demo", "hang", 0);
        let r = h.ok("wait", json!({"session": "demo", "job": 1, "yield_ms": 30}));
        assert_eq!(r["state"], "running");
        let r = h.ok("wait", json!({"session": "demo", "job": 1, "yield_ms": 0}));
        assert_eq!(r["state"], "running");
    }

    #[test]
    fn an_unknown_job_says_how_to_list_jobs() {
        let h = Harness::new();
        h.open("demo");
        let e = h.call("wait", json!({"session": "demo", "job": 9})).unwrap_err();
        assert_eq!(e.kind, ErrorKind::UnknownJob);
        assert!(e.message.contains("has no job 9; list its jobs with jobs"), "{}", e.message);
    }

    #[test]
    fn shutdown_wakes_a_waiting_call_early() {
        let h = Harness::new();
        h.open("demo");
        h.run("demo", "hang", 0);
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| h.ok("wait", json!({"session": "demo", "job": 1, "yield_ms": 60000})));
            std::thread::sleep(std::time::Duration::from_millis(100));
            h.kernel.begin_shutdown();
            let r = waiter.join().unwrap();
            assert_eq!(r["state"], "running");
            assert!(r["note"].as_str().unwrap().contains("shutting down"), "{r}");
        });
        let e = h.call("run", json!({"session": "demo", "cmd": "echo x"})).unwrap_err();
        assert_eq!(e.kind, ErrorKind::ShuttingDown);
        assert_eq!(h.ok("jobs", json!({"session": "demo"}))["jobs"][0]["state"], "running", "reads still work");
    }
}
