//! `run {session, cmd, yield_ms?, env?}`: start `bash --noprofile --norc -c CMD` as a new job and wait up
//! to `yield_ms` (default 10 s, at most 600 s — larger values are clamped and `note` says so).
//!
//! Waiting never kills: when the time is up the result is `running` and the job goes on. The job is
//! registered (and its output file created) before `Command::Run` is pushed, so no event can precede
//! its record. A command that cannot be pushed (the worker does not drain its ring within 5 s) makes
//! the job `failed`; one too large for the ring is refused as `invalid_params` and never becomes a job.
//!
//! ```text
//! → {"jsonrpc":"2.0","id":2,"method":"run","params":{"session":"demo","cmd":"echo hi; exit 3","yield_ms":5000}}
//! ← {"jsonrpc":"2.0","id":2,"result":{"session":"demo","job":1,"cmd":"echo hi; exit 3","state":"exited",
//!    "exit_code":3,"signal":null,"duration_ms":2.4,"view":"hi\n","stdout_bytes":3,"stderr_bytes":0,
//!    "omitted":null,"liveness":null,"survivors":[],"settled":true,"note":null,"announcements":[]}}
//! ```

use crate::kernel::job_wait::{answer, view_budget};
use crate::kernel::session_open::validate_env;
use crate::kernel::{clamp_wait, deadline, Client, Kernel, DEFAULT_YIELD_MS, SEND_TIMEOUT};
use crate::output::view;
use crate::rpc::results::{JobPhase, JobResult};
use crate::rpc::{self, RpcError};
pub(crate) use crate::sessions::sandbox::merge_env;
use crate::sessions::session::{SendError, Session};
use serde::Deserialize;
use serde_json::Value;
use shm_proto::msg::{Command, JobId, RunSpec};
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Params {
    session: String,
    cmd: String,
    #[serde(default)]
    yield_ms: Option<u64>,
    #[serde(default)]
    env: Option<BTreeMap<String, String>>,
    /// Keep the job (see `keep`) as soon as it started.
    #[serde(default)]
    keep: bool,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    files: Vec<crate::sessions::sandbox::FileParam>,
    #[serde(default)]
    max_output_tokens: Option<u64>,
    #[serde(default)]
    max_output_bytes: Option<u64>,
    /// A terminal job: `{rows, cols}` (see `terminal`).
    #[serde(default)]
    tty: Option<crate::kernel::terminal_io::TtySize>,
    /// `"null"` (default) or `"pipe"` (fed by `write`).
    #[serde(default)]
    stdin: Option<String>,
    /// Let this call pass one guard's deny rule, with a stated reason (audited).
    #[serde(default, rename = "override")]
    overrides: Option<Override>,
    /// The effects ledger: `"paths"` (default), `"diff"` or `"none"`.
    #[serde(default)]
    effects: Option<String>,
}

/// `run {override: {rule, reason}}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Override {
    rule: String,
    reason: String,
}

pub(crate) fn call(k: &Kernel, client: &Client, params: Value) -> Result<JobResult, RpcError> {
    call_admitting(k, client, params, &|_, _| {})
}

/// `run`, calling `on_admit(session, job)` once the job is registered and before the worker is told
/// (the receipt's moment of admission, see `receipts`).
pub(crate) fn call_admitting(
    k: &Kernel,
    client: &Client,
    params: Value,
    on_admit: &dyn Fn(&Session, JobId),
) -> Result<JobResult, RpcError> {
    let p: Params = rpc::params("run", params)?;
    k.admit()?;
    let extra_env = validate_env("run", p.env.as_ref())?;
    let keep_name = match (p.keep, &p.name) {
        (false, _) => None,
        (true, Some(n)) => {
            crate::kernel::job_keep::validate_name("run", n)?;
            Some(n.clone())
        }
        (true, None) => return Err(RpcError::invalid_params("run", "keep: true needs a name")),
    };
    let (d, clamp_note) = clamp_wait("yield_ms", p.yield_ms, DEFAULT_YIELD_MS);
    let until = deadline(d);
    let s = k.session(client, &p.session)?;
    crate::kernel::revive::revive_if_worker_died(k, &s)?;
    let s = k.live_session(client, &p.session)?;
    // Relative paths are taken from where the command starts: the carried cwd (after `cd repo`), else
    // the directory the session was opened in.
    let carried = match p.files.is_empty() {
        true => None,
        false => s.lock().record().items().get("cwd").cloned(),
    };
    let cwd = carried.as_deref().map_or(Path::new(&s.spec().cwd), |c| Path::new(OsStr::from_bytes(c)));
    let files = crate::sessions::sandbox::file_specs(&p.files, cwd)?;
    let stdin = crate::kernel::terminal_io::stdin_mode(p.tty, p.stdin.as_deref(), s.spec().persistent)?;
    if let Some(o) = &p.overrides {
        if o.reason.trim().is_empty() || o.rule.trim().is_empty() {
            return Err(RpcError::invalid_params("run", "override needs the guard's `rule` and a `reason`"));
        }
    }
    let effects = match p.effects.as_deref() {
        None | Some("paths") => shm_proto::msg::EffectsMode::Paths,
        Some("diff") => shm_proto::msg::EffectsMode::Diff,
        Some("none") => shm_proto::msg::EffectsMode::None,
        Some(other) => {
            return Err(RpcError::invalid_params(
                "run",
                format!("effects must be \"paths\", \"diff\" or \"none\", not {other:?}"),
            ))
        }
    };
    let (job, restore, mut capture_only, state_cwd) = admit_job(&s, &p.cmd)?;
    // A terminal or a stdin pipe gives the job input: the guards about a closed stdin do not apply.
    let has_input = stdin != shm_proto::msg::StdinMode::Null;
    crate::kernel::terminal_io::register(&s, job, stdin);
    on_admit(&s, job);
    preflight(&s, job, &p.cmd);
    let refusal = crate::kernel::guard_apply::apply(
        k,
        client,
        &s,
        job,
        &p.cmd,
        p.overrides.as_ref().map(|o| (&*o.rule, &*o.reason)),
        has_input,
    );
    let mut cmd = p.cmd;
    if let Some(why) = refusal {
        let mut st = s.lock();
        match (files.is_empty(), st.job_mut(job)) {
            (true, Some(j)) => {
                j.on_refused(why, Instant::now());
                drop(st);
                return answer(k, &s, job, until, clamp_note.into_iter().collect(), view::DEFAULT_BUDGET);
            }
            // The call's files are still written, under the job's sandbox, by a job that runs nothing.
            (false, Some(j)) => j.refuse_on_exit(why),
            (_, None) => {}
        }
        cmd = ":".to_owned();
        capture_only = Some(Vec::new());
    }
    let spec = RunSpec {
        job,
        cmd,
        cwd: s.spec().cwd.as_bytes().to_vec(),
        env: merge_env(&s.spec().env, extra_env),
        stdin,
        state: Some(restore.script),
        files,
        persistent: s.spec().persistent,
        state_env: restore.env,
        capture_only,
        effects,
        state_cwd,
    };
    let mut notes: Vec<String> = clamp_note.into_iter().collect();
    match s.send(&Command::Run(spec), SEND_TIMEOUT) {
        Ok(()) => crate::sessions::prestart::hint(&s),
        Err(SendError::TooLarge { len, max }) => {
            s.lock().remove_job(job);
            return Err(RpcError::invalid_params(
                "run",
                format!("cmd encodes to {len} bytes; the most a job takes is {max}"),
            ));
        }
        Err(SendError::Notify(e)) => {
            notes.push(format!("ringing the worker's doorbell failed ({e}); the job may start late"))
        }
        Err(SendError::Lost) => {}
        Err(e) => {
            let why = format!(
                "the command could not be handed to the worker ({})",
                crate::sessions::supervisor::error_chain(&e)
            );
            if let Some(j) = s.lock().job_mut(job) {
                j.on_spawn_failed(&why, Instant::now());
            }
            s.notify();
        }
    }
    let budget = view_budget(p.max_output_tokens, p.max_output_bytes, &mut notes);
    if let Some(name) = keep_name {
        let started = |st: &crate::sessions::session::SessionData| {
            st.job(job).is_none_or(|j| j.pid().is_some() || j.state().ended())
        };
        drop(s.wait_until(s.lock(), deadline(SEND_TIMEOUT), k.shutdown_flag(), started));
        if let Err(e) = crate::kernel::job_keep::keep(k, client, &s, job, &name) {
            notes.extend(crate::kernel::job_keep::keep_failed_note(&e));
        }
    }
    answer(k, &s, job, until, notes, budget)
}

/// Register the job, re-checking under the session's lock that the session still takes work; the job
/// starts from the current state version, whose restore script is returned, with the scope of the job's
/// capture (`shell::scope`; the persistent shell's is always full).
type Admitted = (JobId, crate::shell::record::Restore, Option<Vec<String>>, Option<Vec<u8>>);
fn admit_job(s: &Session, cmd: &str) -> Result<Admitted, RpcError> {
    let mut st = crate::kernel::lock_for_new_job(s)?;
    let id = st.add_job(cmd.to_owned(), &s.jobs_dir());
    let persistent = s.spec().persistent;
    let (version, base, restore) = match persistent {
        // The persistent shell is started once and restored in place: everything goes by script.
        true => {
            let (version, base) = st.record().snapshot();
            let script = crate::shell::record::restore_script(&base);
            (version, base, crate::shell::record::Restore { script, env: Vec::new() })
        }
        false => {
            let (version, base, restore) = st.record().fresh_restore();
            (version, base, crate::shell::record::Restore::clone(&restore))
        }
    };
    // A command of the persistent shell is read against the record only while no earlier command of the
    // shell is unfinished: one still running or queued may define a function or an alias this command
    // calls, which the record does not hold yet. (The worker also falls back to the full capture while
    // the shell has a trap or its last capture was not read.)
    let behind = persistent && shell_busy(&st, id);
    if let Some(j) = st.job_mut(id) {
        j.set_state_base(version, Arc::clone(&base));
        if persistent {
            j.set_in_persistent_shell();
        }
    }
    drop(st);
    // Read outside the session's lock (10–40 µs); the job's capture cannot arrive before its spec is
    // sent. The session's first capture records everything the shell has (its environment too).
    let scope = match version == 0 || behind {
        true => None,
        false => crate::shell::scope::scope(cmd, &base),
    };
    if let (Some(names), Some(j)) = (&scope, s.lock().job_mut(id)) {
        j.set_capture_scope(Some(names.clone()));
    }
    Ok((id, restore, scope, base.get("cwd").cloned()))
}

/// An earlier command of the persistent shell is unfinished (running, or queued behind one). The shell
/// runs its commands one at a time in admission order, so the newest earlier command that exited after
/// running proves every one before it over: the scan stops there (usually at the previous job), not at
/// the session's first job.
fn shell_busy(st: &crate::sessions::session::SessionData, id: JobId) -> bool {
    for j in st.jobs().rev().filter(|j| j.id() != id && j.in_persistent_shell()) {
        match j.state() {
            JobPhase::Running => return true,
            JobPhase::Exited => return false,
            // Killed, refused, failed to start (a kill while queued), lost: it may not have run; look on.
            _ => {}
        }
    }
    false
}

/// Attach the preflight warnings (writes outside the writable roots) to the new job.
fn preflight(s: &Session, job: JobId, cmd: &str) {
    let mut st = s.lock();
    let Some(info) = st.sandbox() else { return };
    let warnings = crate::sessions::sandbox::preflight(cmd, info);
    if let Some(j) = st.job_mut(job) {
        j.warnings = warnings;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpc::ErrorKind;
    use crate::testing::{announced, Harness};
    use serde_json::json;

    #[test]
    fn call_env_overrides_session_env() {
        let s = vec![("A".to_owned(), "1".to_owned()), ("B".to_owned(), "2".to_owned())];
        let merged = merge_env(&s, vec![("B".to_owned(), "3".to_owned())]);
        assert_eq!(merged, [("A".to_owned(), "1".to_owned()), ("B".to_owned(), "3".to_owned())]);
    }

    #[test]
    fn a_quick_job_returns_its_final_result() {
        let h = Harness::new();
        h.open("demo");
        let r = h.run("demo", "echo hi", 5000);
        assert_eq!(
            (r["state"].as_str(), r["exit_code"].as_i64(), r["signal"].is_null()),
            (Some("exited"), Some(0), true)
        );
        assert_eq!(
            (r["view"].as_str(), r["stdout_bytes"].as_u64(), r["job"].as_u64()),
            (Some("hi\n"), Some(3), Some(1))
        );
        assert_eq!(
            (r["session"].as_str(), r["cmd"].as_str(), r["settled"].as_bool()),
            (Some("demo"), Some("echo hi"), Some(true))
        );
        for key in ["duration_ms", "omitted", "liveness", "survivors", "note", "announcements", "stderr_bytes"] {
            assert!(r.get(key).is_some(), "{key} is always present");
        }
        let r = h.run("demo", "exit 3", 5000);
        assert_eq!((r["exit_code"].as_i64(), r["job"].as_u64()), (Some(3), Some(2)));
    }

    #[test]
    fn yield_runs_out_with_the_job_still_running() {
        let h = Harness::new();
        h.open("demo");
        let t = Instant::now();
        let r = h.run("demo", "hang", 50);
        assert!(t.elapsed() >= std::time::Duration::from_millis(50));
        assert_eq!(r["state"], "running");
        assert_eq!(r["liveness"]["pid"], 10_001);
        assert!(r["liveness"]["running_ms"].as_u64().is_some());
        assert!(r["liveness"]["last_output_ms_ago"].is_null());
        assert_eq!((r["exit_code"].is_null(), r["settled"].as_bool()), (true, Some(false)));
    }

    #[test]
    fn yield_is_clamped_with_a_note() {
        let h = Harness::new();
        h.open("demo");
        let r = h.run("demo", "echo x", 10_000_000);
        assert_eq!(r["state"], "exited");
        assert!(r["note"].as_str().unwrap().contains("yield_ms 10000000 exceeds the maximum 600000"), "{r}");
    }

    #[test]
    fn a_job_that_cannot_launch_is_failed_with_a_note() {
        let h = Harness::new();
        h.open("demo");
        let r = h.run("demo", "fail", 5000);
        assert_eq!(
            (r["state"].as_str(), r["exit_code"].is_null(), r["signal"].is_null()),
            (Some("failed"), true, true)
        );
        assert!(r["note"].as_str().unwrap().contains("no such file or directory"));
    }

    #[test]
    fn session_and_call_env_reach_the_worker() {
        let h = Harness::new();
        h.ok("session.open", json!({"name": "e", "cwd": "/srv", "env": {"A": "1", "B": "2"}}));
        let r = h.ok("run", json!({"session": "e", "cmd": "env", "env": {"B": "3"}}));
        assert_eq!(r["view"], "cwd=/srv\nA=1\nB=3\n");
    }

    #[test]
    fn wrong_params_are_invalid_params() {
        let h = Harness::new();
        h.open("demo");
        let e = h.call("run", json!({"session": "demo"})).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidParams);
        assert!(e.message.contains("missing field `cmd`"), "{}", e.message);
        let e = h.call("run", json!({"session": "demo", "cmd": "x", "yield_ms": "soon"})).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidParams);
        let e = h.call("run", json!({"session": "demo", "cmd": "x", "idempotency_key": 7})).unwrap_err();
        assert!(e.message.contains("idempotency_key must be a non-empty string"), "{}", e.message);
        let e = h.call("run", json!({"session": "nope", "cmd": "x"})).unwrap_err();
        assert_eq!(e.kind, ErrorKind::UnknownSession);
        assert_eq!(e.message, "no session named 'nope'; open one with session.open");
    }

    #[test]
    fn a_command_too_large_for_the_ring_is_refused_and_is_no_job() {
        let h = Harness::with_ring(shm_proto::region::RegionConfig { cmd_capacity: 4096, evt_capacity: 1 << 20 });
        h.open("demo");
        let e = h.call("run", json!({"session": "demo", "cmd": "x".repeat(5000)})).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidParams);
        assert!(h.ok("jobs", json!({"session": "demo"}))["jobs"].as_array().unwrap().is_empty());
    }

    #[test]
    fn ended_jobs_are_announced_once_in_the_next_response() {
        let h = Harness::new();
        h.open("demo");
        let slow = h.run("demo", "sleep 30", 0);
        assert_eq!(slow["state"], "running");
        std::thread::sleep(std::time::Duration::from_millis(150));
        let r = h.run("demo", "echo next", 5000);
        assert_eq!(announced(&r), [1], "the ended job is announced, not the one whose result this is");
        let a = &r["announcements"][0];
        assert_eq!(
            (a["state"].as_str(), a["exit_code"].as_i64(), a["cmd"].as_str()),
            (Some("exited"), Some(0), Some("sleep 30"))
        );
        assert!(a["last_lines"].as_array().unwrap().is_empty());
        let again = h.ok("jobs", json!({"session": "demo"}));
        assert!(announced(&again).is_empty(), "never twice");
    }

    #[test]
    fn concurrent_runs_in_one_session_all_finish() {
        let h = Harness::new();
        h.open("demo");
        std::thread::scope(|scope| {
            for i in 0..8 {
                let h = &h;
                scope.spawn(move || {
                    let r = h.run("demo", &format!("echo {i}"), 5000);
                    assert_eq!(r["view"], format!("{i}\n"));
                });
            }
        });
        assert_eq!(h.ok("jobs", json!({"session": "demo"}))["jobs"].as_array().unwrap().len(), 8);
    }
}
