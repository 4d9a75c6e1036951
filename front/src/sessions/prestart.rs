//! Pre-started shells, the front's side: the `Command::Prestart` hints that let a worker start the
//! session's next bash before its command arrives (the worker's side is `worker::spare`).
//!
//! A hint is the `RunSpec` the session's next job would be launched from if it came now: id
//! `last_job + 1`, the session's cwd and environment, the restore of the current state record, no
//! command, no files. The front sends one when a session opens and when a job's capture changed the
//! state record (from the pump), never waiting: a hint that finds the ring busy or full is skipped, and
//! sent after the next `run` instead. Between hints the worker moves its wanted spare on to the next job
//! id by itself each time a job starts, so a call that changes nothing costs no hint. The front keeps
//! only which worker and record version its last delivered hint was for; the worker hands a spare a
//! `Run` only when the `Run`'s inputs equal the hint's, so a stale hint costs one discarded shell, never
//! a wrong job. Persistent sessions get no hints.
//!
//! `heddle-front --spares false` (or `HEDDLE_SPARES=0`, which the supervisor passes through) turns
//! hints off: every job then starts cold. Each hint carries how long a spare may wait for a free CPU
//! once the session ran a job (`--spare-cpu-wait-ms`, `HEDDLE_SPARE_CPU_WAIT_MS`; see `worker::spare`).
//!
//! ```
//! front::sessions::prestart::set(false, 0);
//! assert!(!front::sessions::prestart::enabled());
//! ```

use crate::rpc::results::Survivor;
use crate::sessions::session::{Session, SessionData};
use shm_proto::control::ProcInfo;
use shm_proto::msg::{Command, RunSpec, StdinMode};
use std::sync::OnceLock;

static ENABLED: OnceLock<bool> = OnceLock::new();
static CPU_WAIT_MS: OnceLock<u32> = OnceLock::new();

/// How long a spare waits for a free CPU by default, after the session's first job (ms).
pub const DEFAULT_CPU_WAIT_MS: u32 = 5000;

/// Set once at start (later calls change nothing): whether to send hints, and how long a spare may wait
/// for a free CPU.
pub fn set(enabled: bool, cpu_wait_ms: u32) {
    let _ = ENABLED.set(enabled);
    let _ = CPU_WAIT_MS.set(cpu_wait_ms);
}

/// Whether the front sends hints (default: yes).
pub fn enabled() -> bool {
    *ENABLED.get_or_init(|| true)
}

fn cpu_wait_ms() -> u32 {
    *CPU_WAIT_MS.get_or_init(|| DEFAULT_CPU_WAIT_MS)
}

/// A hint to send: the spec, and the (worker pid, record version) it was made for.
pub(crate) struct Hint {
    spec: RunSpec,
    key: (u32, u64),
}

/// The hint for the session's next job, if one applies and the worker has not had one for this record
/// version yet (it moves its spare on to the next job id by itself; see `worker::spare`).
pub(crate) fn next_hint(s: &Session, st: &SessionData) -> Option<Hint> {
    if !enabled() || s.spec().persistent || st.is_closing() || st.lost().is_some() {
        return None;
    }
    let key = (st.worker().map_or(0, |w| w.pid), st.record().version());
    if st.hinted() == Some(key) {
        return None;
    }
    let (_, base, restore) = st.record().fresh_restore();
    let restore = crate::shell::record::Restore::clone(&restore);
    let spec = RunSpec {
        job: st.last_job() + 1,
        cmd: String::new(),
        cwd: s.spec().cwd.as_bytes().to_vec(),
        env: crate::sessions::sandbox::merge_env(&s.spec().env, Vec::new()),
        stdin: StdinMode::Null,
        state: Some(restore.script),
        files: Vec::new(),
        persistent: false,
        state_env: restore.env,
        capture_only: None,
        effects: Default::default(),
        state_cwd: base.get("cwd").cloned(),
    };
    Some(Hint { spec, key })
}

/// Send `hint` without waiting (skipped when the command ring is busy or full: the next call tries again).
pub(crate) fn send(s: &Session, hint: Hint) {
    if s.try_send(&Command::Prestart { spec: hint.spec, cpu_wait_ms: cpu_wait_ms() }) {
        s.lock().set_hinted(hint.key);
    }
}

/// What the supervisor killed in a session, as the session's survivors: without the pre-started shell, a
/// process in a job cgroup (`slot-<N>`) that no unsettled job of the session has (its `Started` named
/// the cgroup; a settled job's cgroup is empty, so what is in it now is a spare waiting for a command).
/// Two narrow windows are misread, both at a worker's death or a close racing a job's start or end: a
/// job whose `Started` the front had not seen yet has its processes counted as the spare (still killed,
/// not listed), and a spare in the cgroup of a job whose `Emptied` was still on its way is listed.
pub(crate) fn without_spares(st: &SessionData, killed: &[ProcInfo]) -> Vec<Survivor> {
    let held: std::collections::HashSet<&str> =
        st.jobs().filter(|j| !j.cgroup_settled()).filter_map(|j| j.cgroup()).collect();
    let spare = |p: &&ProcInfo| {
        let top = p.cgroup.split('/').next().unwrap_or_default();
        top.starts_with(shm_proto::msg::JOB_CGROUP_PREFIX) && !held.contains(top)
    };
    killed.iter().filter(|p| !spare(p)).map(crate::rpc::results::survivor).collect()
}

/// Send the session's hint now, unless its worker already has one for the current record.
pub(crate) fn hint(s: &Session) {
    let hint = next_hint(s, &s.lock());
    if let Some(hint) = hint {
        send(s, hint);
    }
}
