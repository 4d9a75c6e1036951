//! `check {session, name?, args?, yield_ms?, max_output_tokens?}`: run one of the project's checks
//! (`checks::config`) as a job of the session, and answer a job result whose `check` names the routing
//! and, once the job ended, what the parser read; its `view` then leads with that summary.
//!
//! The job is a job like `run`'s (its own cgroup, sandbox, output store, yield/wait/kill, announced when
//! it ends unseen) with two differences: it carries no shell state (no restore, no capture: a check does
//! not change the shell; it starts in the check's cwd with the session's environment plus the check's),
//! and the guards do not read it (its command is the project's; `args` are quoted, one word each).
//!
//! The output is parsed once, the first time a result of the ended job is built (`check`, `wait`,
//! `kill`, or `checks`), and the run is recorded in the database (`checks` shows the last runs).
//!
//! ```text
//! → {"jsonrpc":"2.0","id":4,"method":"check","params":{"session":"demo","name":"unit"}}
//! ← {…,"result":{"job":3,"state":"exited","exit_code":100,"view":"50 passed · 2 failed · … (nextest text)\n…",
//!    "check":{"name":"unit","command":"cargo nextest run --workspace","parser":"nextest","origin":"…",
//!    "parsed":{"counts":{"passed":50,"failed":2,"skipped":1,"errors":0},"failures":[…],…},"note":null},…}}
//! ```

use crate::checks::config::{find, Check, Found};
use crate::checks::parse::{parse, Parser};
use crate::jobs::job::Job;
use crate::kernel::job_wait::{answer, view_budget};
use crate::kernel::{clamp_wait, deadline, Client, Kernel, SEND_TIMEOUT};
use crate::rpc::results::JobResult;
use crate::rpc::{self, RpcError};
use crate::sessions::session::{SendError, Session};
use protocol::checks::CheckReport;
use serde::Deserialize;
use serde_json::Value;
use shm_proto::msg::{Command, JobId, RunSpec, StdinMode};
use std::time::Instant;

/// The most output bytes per stream a parser reads (the end of a longer stream).
const PARSE_MAX: u64 = 32 * 1024 * 1024;
/// `check`'s default yield when the check names no `timeout_ms` hint.
pub(crate) const DEFAULT_CHECK_YIELD_MS: u64 = 60_000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Params {
    session: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    yield_ms: Option<u64>,
    #[serde(default)]
    max_output_tokens: Option<u64>,
    #[serde(default)]
    max_output_bytes: Option<u64>,
}

/// The PATH a session's jobs get when the session set one.
pub(crate) fn session_path(s: &Session) -> Option<String> {
    s.spec().env.iter().find(|(k, _)| k == "PATH").map(|(_, v)| v.clone())
}

/// The project a session's `check` and `checks` use, and its checks: the nearest directory from where
/// the session's commands start (its carried cwd, so `cd other-project` moves it) up to `/` that has
/// `.heddle/checks.toml` or a project file detection knows (`cd src` inside a crate keeps the crate);
/// else the directory the session was opened in.
pub(crate) fn project(s: &Session) -> (std::path::PathBuf, Found) {
    use std::os::unix::ffi::OsStrExt;
    let path = session_path(s);
    let carried = s.lock().record().items().get("cwd").cloned();
    if let Some(c) = carried {
        let here = std::path::PathBuf::from(std::ffi::OsStr::from_bytes(&c));
        for dir in here.ancestors() {
            let found = find(dir, path.as_deref());
            if found.file || !found.checks.is_empty() {
                return (dir.to_path_buf(), found);
            }
        }
    }
    let dir = std::path::PathBuf::from(&s.spec().cwd);
    let found = find(&dir, path.as_deref());
    (dir, found)
}

/// The check `name` (or the first) of the session's project, and that project.
fn pick(s: &Session, name: Option<&str>) -> Result<(Check, String), RpcError> {
    let (dir, found) = project(s);
    let problems = match found.errors.is_empty() {
        true => String::new(),
        false => format!(" (problems of the checks file: {})", found.errors.join("; ")),
    };
    let names: Vec<&str> = found.checks.iter().map(|c| c.name.as_str()).collect();
    let hit = match name {
        Some(n) => found.checks.iter().find(|c| c.name == n),
        None => found.checks.first(),
    };
    match (hit, name) {
        (Some(c), _) => Ok((c.clone(), dir.to_string_lossy().into_owned())),
        (None, Some(n)) if !names.is_empty() => Err(RpcError::invalid_params(
            "check",
            format!("no check named '{n}'; the project's checks are {}{problems}", names.join(", ")),
        )),
        _ => Err(RpcError::invalid_params(
            "check",
            found.note.clone().unwrap_or_else(|| "no check found".to_owned()) + &problems,
        )),
    }
}

/// `'word'`, quoted for bash.
fn quote(w: &str) -> String {
    format!("'{}'", w.replace('\'', r"'\''"))
}

pub(crate) fn call(k: &Kernel, client: &Client, params: Value) -> Result<JobResult, RpcError> {
    let p: Params = rpc::params("check", params)?;
    k.admit()?;
    let s = k.session(client, &p.session)?;
    crate::kernel::revive::revive_if_worker_died(k, &s)?;
    let s = k.live_session(client, &p.session)?;
    let (check, project) = pick(&s, p.name.as_deref())?;
    let mut command = check.command.clone();
    for a in &p.args {
        command.push(' ');
        command.push_str(&quote(a));
    }
    let (d, clamp_note) = clamp_wait("yield_ms", p.yield_ms.or(check.timeout_ms), DEFAULT_CHECK_YIELD_MS);
    let until = deadline(d);
    let report = CheckReport {
        name: check.name.clone(),
        command: command.clone(),
        parser: check.parser.name().to_owned(),
        origin: check.origin.clone(),
        project,
        parsed: None,
        note: None,
    };
    let job = {
        let mut st = crate::kernel::lock_for_new_job(&s)?;
        let id = st.add_job(command.clone(), &s.jobs_dir());
        if let Some(j) = st.job_mut(id) {
            j.check = Some(Box::new(report));
        }
        id
    };
    let spec = RunSpec {
        job,
        cmd: command,
        cwd: check.cwd.as_os_str().as_encoded_bytes().to_vec(),
        env: crate::kernel::job_run::merge_env(&s.spec().env, check.env.clone()),
        stdin: StdinMode::Null,
        state: None,
        files: Vec::new(),
        persistent: false,
        state_env: Vec::new(),
        capture_only: None,
        state_cwd: None,
        effects: shm_proto::msg::EffectsMode::None,
    };
    let mut notes: Vec<String> = clamp_note.into_iter().collect();
    match s.send(&Command::Run(spec), SEND_TIMEOUT) {
        Ok(()) | Err(SendError::Lost) => {}
        Err(SendError::TooLarge { len, max }) => {
            s.lock().remove_job(job);
            return Err(RpcError::invalid_params(
                "check",
                format!("the command encodes to {len} bytes; the most a job takes is {max}"),
            ));
        }
        Err(SendError::Notify(e)) => {
            notes.push(format!("ringing the worker's doorbell failed ({e}); the check may start late"))
        }
        Err(e) => {
            let why = format!("the check could not be handed to the worker ({e})");
            if let Some(j) = s.lock().job_mut(job) {
                j.on_spawn_failed(&why, Instant::now());
            }
            s.notify();
        }
    }
    let budget = view_budget(p.max_output_tokens, p.max_output_bytes, &mut notes);
    answer(k, &s, job, until, notes, budget)
}

/// Complete `result` of a check's job: parse its output once it ended (once per job), record the run,
/// and lead the view with the summary. Called by every result builder (`job_wait::answer_when`).
pub(crate) fn complete(k: &Kernel, s: &Session, job: JobId, result: &mut JobResult) {
    if result.check.is_none() || !result.state.ended() {
        return;
    }
    if result.check.as_ref().is_some_and(|c| c.parsed.is_none() && c.note.is_none()) {
        let Some(report) = parse_job(k, s, job) else { return };
        result.check = Some(report);
    }
    if let Some(c) = &result.check {
        let block = protocol::checks::summary_block(c.parsed.as_ref(), c.note.as_deref());
        result.view.insert_str(0, &block);
    }
}

/// Parse the ended job's output, keep the report on the job and record the run; the report.
pub(crate) fn parse_job(k: &Kernel, s: &Session, job: JobId) -> Option<CheckReport> {
    let (mut report, chunks, cut) = {
        let mut st = s.lock();
        let j: &mut Job = st.job_mut(job)?;
        let report = j.check.as_deref()?.clone();
        if report.parsed.is_some() || report.note.is_some() {
            return Some(report);
        }
        let [o, e] = j.counts();
        let from = [o.saturating_sub(PARSE_MAX), e.saturating_sub(PARSE_MAX)];
        let chunks = j.chunks_from(from, 2 * PARSE_MAX);
        (report, chunks, from != [0, 0])
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    match chunks {
        Ok(chunks) => {
            for c in chunks {
                if c.stream == 0 {
                    out.extend_from_slice(&c.data)
                } else {
                    err.extend_from_slice(&c.data)
                }
            }
        }
        Err(e) => {
            report.note = Some(format!("the parser could not read the output ({e}); the view below is the job's"))
        }
    }
    let parser = Parser::from_name(&report.parser).unwrap_or(Parser::None);
    if report.note.is_none() {
        report.parsed = parse(parser, &out, &err);
        report.note = match (&report.parsed, parser) {
            (Some(_), _) if cut => Some("the parser read the last 32 MiB of each stream only".to_owned()),
            (Some(_), _) => None,
            (None, Parser::None) => {
                Some("no parser for this check (parser: none); the view below is the job's".to_owned())
            }
            (None, p) => Some(format!(
                "the {} parser found nothing it recognised in the output: no counts; the view below is the job's",
                p.name()
            )),
        };
    }
    let mut st = s.lock();
    let j = st.job_mut(job)?;
    j.check = Some(Box::new(report.clone()));
    let summary = j.summary(Instant::now());
    drop(st);
    k.db.write(crate::storage::db::Write::CheckRun(crate::storage::db::CheckRunRow {
        owner_uid: s.spec().owner_uid,
        project: report.project.clone(),
        name: report.name.clone(),
        session: s.name().to_owned(),
        job,
        at_ms: summary.started_at_ms,
        state: serde_json::to_value(summary.state).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default(),
        exit_code: summary.exit_code,
        duration_ms: summary.duration_ms,
        counts: report.parsed.as_ref().and_then(|p| p.counts).and_then(|c| serde_json::to_string(&c).ok()),
    }));
    Some(report)
}

#[cfg(test)]
mod tests {
    use super::quote;

    #[test]
    fn args_are_one_word_each() {
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's; rm -rf /"), r"'it'\''s; rm -rf /'");
    }
}
