//! Kept jobs: `keep {session, job, name}` moves a job's processes out of its session into the
//! supervisor's `kept/NAME` cgroup, so they outlive the session; `kept {}` lists kept jobs with their
//! processes; `kept.kill {name}` ends one (`cgroup.kill`, verified empty, removed).
//!
//! A kept job belongs to the uid that kept it (the owner of its `kept/NAME` directory): `kept` lists, and
//! `kept.kill` ends, only a client's own kept jobs (root sees all). After the move the worker is told to
//! `Forget` the job's cgroup; it still reaps the main process and reads the pipes while the session
//! lives. When the session's worker goes, the supervisor hands those pipes to a drainer in the kept
//! cgroup that appends to `<state-dir>/kept/NAME.log` (bounded, cuts said so in the log): `kept` shows
//! the log's path and size, and `kept.log {name, tail_bytes?}` its end, screened for secrets.
//!
//! ```text
//! → {"jsonrpc":"2.0","id":7,"method":"keep","params":{"session":"demo","job":3,"name":"devserver"}}
//! ← {"jsonrpc":"2.0","id":7,"result":{"session":"demo","job":3,"name":"devserver",
//!    "cgroup":"/sys/fs/cgroup/unified/heddle/kept/devserver","procs":[{"pid":4800,"cmdline":"python3 -m http.server",…}],
//!    "note":null,"announcements":[]}}
//! ```

use crate::kernel::{unknown_job, Client, Kernel, SEND_TIMEOUT};
use crate::rpc::results::{join_notes, Announcement, Survivor};
use crate::rpc::{self, ErrorKind, RpcError};
use crate::sessions::session::Session;
use crate::sessions::supervisor::error_chain;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use shm_proto::control::KeptInfo;
use shm_proto::msg::{Command, JobId};
use std::time::Instant;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeepParams {
    session: String,
    job: JobId,
    name: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct KeepResult {
    pub session: String,
    pub job: u64,
    pub name: String,
    pub cgroup: String,
    pub procs: Vec<Survivor>,
    /// Its processes beyond `procs` (a listing carries at most 64), counted only.
    pub procs_more: u32,
    pub note: Option<String>,
    pub announcements: Vec<Announcement>,
}

/// A kept job as `kept` lists it.
#[derive(Clone, Debug, Serialize)]
pub struct KeptJob {
    pub name: String,
    pub owner_uid: u32,
    pub cgroup: String,
    pub procs: Vec<Survivor>,
    /// Its processes beyond `procs` (a listing carries at most 64), counted only.
    pub procs_more: u32,
    /// True when it was found at startup, kept by an earlier run of heddle.
    pub adopted: bool,
    /// The log of what it wrote after its session ended (`None` until then).
    pub log: Option<String>,
    pub log_bytes: Option<u64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct KeptResult {
    pub kept: Vec<KeptJob>,
    /// Kept jobs (of any owner) that did not fit in the supervisor's answer, counted only.
    pub more: u32,
}

#[derive(Clone, Debug, Serialize)]
pub struct KeptKillResult {
    pub name: String,
    pub killed: Vec<Survivor>,
    /// Processes killed beyond `killed`, counted only.
    pub killed_more: u32,
    pub verified_empty: bool,
}

impl From<KeptInfo> for KeptJob {
    fn from(k: KeptInfo) -> Self {
        KeptJob {
            procs: k.procs.iter().map(crate::rpc::results::survivor).collect(),
            procs_more: k.procs.more(),
            name: k.name,
            owner_uid: k.owner_uid,
            cgroup: k.cgroup,
            adopted: k.adopted,
            log: None,
            log_bytes: None,
        }
    }
}

/// `<state-dir>/kept/NAME.log`.
fn log_path(k: &Kernel, name: &str) -> std::path::PathBuf {
    k.cfg.state_dir.join("kept").join(format!("{name}.log"))
}

fn with_log(k: &Kernel, mut job: KeptJob) -> KeptJob {
    let path = log_path(k, &job.name);
    if let Ok(meta) = std::fs::metadata(&path) {
        job.log = Some(path.display().to_string());
        job.log_bytes = Some(meta.len());
    }
    job
}

/// `[A-Za-z0-9_.-]{1,64}`, not starting with `.`.
pub(crate) fn validate_name(method: &str, name: &str) -> Result<(), RpcError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(RpcError::invalid_params(
            method,
            format!("name {name:?} must match [A-Za-z0-9_.-]{{1,64}} and not start with '.'"),
        ))
    }
}

pub(crate) fn call_keep(k: &Kernel, client: &Client, params: Value) -> Result<KeepResult, RpcError> {
    let p: KeepParams = rpc::params("keep", params)?;
    k.admit()?;
    validate_name("keep", &p.name)?;
    let s = k.live_session(client, &p.session)?;
    let kept = keep(k, client, &s, p.job, &p.name)?;
    let now = Instant::now();
    let announcements = s.lock().take_announcements(now);
    Ok(KeepResult {
        session: p.session,
        job: p.job,
        name: kept.name,
        cgroup: kept.cgroup,
        procs: kept.procs.iter().map(crate::rpc::results::survivor).collect(),
        procs_more: kept.procs.more(),
        note: None,
        announcements,
    })
}

/// Move the job's processes to `kept/NAME` and tell the worker to forget its cgroup.
pub(crate) fn keep(k: &Kernel, client: &Client, s: &Session, job: JobId, name: &str) -> Result<KeptInfo, RpcError> {
    let cgroup = {
        let st = s.lock();
        let j = st.job(job).ok_or_else(|| unknown_job(s.name(), job))?;
        if let Some(already) = j.kept() {
            return Err(RpcError::new(ErrorKind::InvalidParams, format!("job {job} is already kept as '{already}'")));
        }
        if j.cgroup_settled() {
            return Err(RpcError::new(
                ErrorKind::InvalidParams,
                format!("job {job} has nothing left to keep: its cgroup is empty"),
            ));
        }
        j.cgroup().map(str::to_owned).ok_or_else(|| {
            RpcError::new(ErrorKind::InvalidParams, format!("job {job} has no cgroup of its own to keep (not started yet, or a command of the persistent shell)"))
        })?
    };
    let kept = k.link.keep_job(s.name(), job, &cgroup, name, client.uid).map_err(|e| {
        RpcError::new(
            ErrorKind::Internal,
            format!("job {job} could not be kept: {}; it stays in the session", error_chain(&e)),
        )
    })?;
    let forget = s.send(&Command::Forget { job }, SEND_TIMEOUT);
    if let Some(j) = s.lock().job_mut(job) {
        j.set_kept(name.to_owned());
        j.note(kept_note(name, &kept.cgroup));
        if let Err(e) = forget {
            j.note(format!("the worker could not be told to forget the job's cgroup ({})", error_chain(&e)));
        }
    }
    s.notify();
    Ok(kept)
}

/// The note a job gets when it is kept: where its processes went, and how they end, in words both a
/// model (whose MCP tools cannot end a kept job: `kill` ends none of it) and a person at the CLI can act
/// on. A kept name needs no shell quoting (`[A-Za-z0-9_.-]`); one that starts with `-` follows `--`.
fn kept_note(name: &str, cgroup: &str) -> String {
    let arg = if name.starts_with('-') { format!("-- {name}") } else { name.to_owned() };
    format!(
        "kept as '{name}': its processes live in {cgroup} and outlive the session (kill does not end them); the \
         operator ends them with `heddle kept kill {arg}`"
    )
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeptParams {}

pub(crate) fn call_kept(k: &Kernel, client: &Client, params: Value) -> Result<KeptResult, RpcError> {
    let _: KeptParams = rpc::params("kept", params)?;
    let all = k
        .link
        .list_kept()
        .map_err(|e| RpcError::internal(format!("the kept jobs could not be listed: {}", error_chain(&e))))?;
    let (all, more) = all;
    let kept = all
        .into_iter()
        .filter(|j| client.uid == 0 || j.owner_uid == client.uid)
        .map(|j| with_log(k, KeptJob::from(j)))
        .collect();
    Ok(KeptResult { kept, more })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LogParams {
    name: String,
    #[serde(default)]
    tail_bytes: Option<u64>,
}

/// `kept.log`'s answer.
#[derive(Clone, Debug, Serialize)]
pub struct KeptLogResult {
    pub name: String,
    pub log: String,
    /// The log's size now.
    pub bytes: u64,
    /// Where `text` starts in the log.
    pub offset: u64,
    /// The end of the log (lossy UTF-8, secrets redacted).
    pub text: String,
}

/// `name` is valid and names a kept job of the caller (root: of anyone).
fn check_own(method: &str, k: &Kernel, client: &Client, name: &str) -> Result<(), RpcError> {
    validate_name(method, name)?;
    let all = k
        .link
        .list_kept()
        .map_err(|e| RpcError::internal(format!("the kept jobs could not be listed: {}", error_chain(&e))))?;
    if all.0.iter().any(|j| j.name == name && (client.uid == 0 || j.owner_uid == client.uid)) {
        return Ok(());
    }
    let why = format!("there is no kept job named '{name}' of yours; list them with kept {{}}");
    Err(RpcError::new(ErrorKind::InvalidParams, why))
}

/// The default and largest `tail_bytes` of `kept.log`.
const LOG_TAIL_DEFAULT: u64 = 16 << 10;
const LOG_TAIL_MAX: u64 = 1 << 20;

pub(crate) fn call_log(k: &Kernel, client: &Client, params: Value) -> Result<KeptLogResult, RpcError> {
    use std::io::{Read, Seek, SeekFrom};
    let p: LogParams = rpc::params("kept.log", params)?;
    check_own("kept.log", k, client, &p.name)?;
    let path = log_path(k, &p.name);
    let no_log = |e: std::io::Error| {
        let why =
            format!("kept job '{}' has no log yet ({e}): its output goes to its session while that lives", p.name);
        RpcError::new(ErrorKind::InvalidParams, why)
    };
    let mut file = std::fs::File::open(&path).map_err(no_log)?;
    let bytes = file.metadata().map_err(no_log)?.len();
    let want = p.tail_bytes.unwrap_or(LOG_TAIL_DEFAULT).min(LOG_TAIL_MAX);
    let offset = bytes.saturating_sub(want);
    let mut raw = Vec::new();
    file.seek(SeekFrom::Start(offset)).and_then(|_| file.take(want).read_to_end(&mut raw)).map_err(no_log)?;
    let redactor = policies::redaction::Redactor::builtin();
    let mut blocks = policies::redaction::BlockCursor::default();
    let text: Vec<String> = String::from_utf8_lossy(&raw)
        .split('\n')
        .map(|line| redactor.redact_line(&mut blocks, line).into_owned())
        .collect();
    Ok(KeptLogResult { name: p.name, log: path.display().to_string(), bytes, offset, text: text.join("\n") })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KillParams {
    name: String,
}

pub(crate) fn call_kill(k: &Kernel, client: &Client, params: Value) -> Result<KeptKillResult, RpcError> {
    let p: KillParams = rpc::params("kept.kill", params)?;
    check_own("kept.kill", k, client, &p.name)?;
    // The end of its processes is asked for here: the job's session does not announce it.
    for s in k.open_sessions() {
        for j in s.lock().jobs_mut().filter(|j| j.kept() == Some(p.name.as_str())) {
            j.on_kept_kill();
        }
    }
    let (killed, verified_empty) = k
        .link
        .kill_kept(&p.name)
        .map_err(|e| RpcError::internal(format!("kept job '{}' could not be killed: {}", p.name, error_chain(&e))))?;
    Ok(KeptKillResult {
        name: p.name,
        killed: killed.iter().map(crate::rpc::results::survivor).collect(),
        killed_more: killed.more(),
        verified_empty,
    })
}

/// `note` for a `run {keep: true}` whose keep failed.
pub(crate) fn keep_failed_note(e: &RpcError) -> Option<String> {
    join_notes([format!("keep failed: {}", e.message)])
}

#[cfg(test)]
mod tests {
    use super::kept_note;
    use serde_json::json;

    #[test]
    fn a_kept_jobs_note_says_once_how_it_ends_in_words_a_model_can_act_on() {
        let note = kept_note("ticker", "/sys/fs/cgroup/heddle/kept/ticker");
        assert!(note.contains("`heddle kept kill ticker`"), "{note}");
        // The method is not an MCP tool: a model told to call it could not.
        assert!(!note.contains("kept.kill"), "{note}");
        let tools = crate::transport::mcp_tools::list();
        assert!(!tools["tools"].as_array().unwrap().iter().any(|t| t["name"] == "kept.kill"));
        // The run tool's text: one sentence about the keep, not the generic line beside it.
        let r =
            json!({"session": "s", "job": 1, "state": "running", "kept": "ticker", "note": note, "announcements": []});
        let text = crate::transport::mcp_tools::text("run", &r);
        assert_eq!(text.matches("kept as").count(), 1, "{text}");
        assert!(text.contains("`heddle kept kill ticker`"), "{text}");
        assert!(kept_note("-x", "c").contains("`heddle kept kill -- -x`"));
    }
}
