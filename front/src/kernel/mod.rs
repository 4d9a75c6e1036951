//! The kernel: the registry of sessions, the method table, and the process-wide events (a worker died,
//! shutdown). Transports call [`Kernel::call`]; everything a method does lives in its own module
//! (`session_open`, `job_run`, …), beside admission ([`peer_check`], [`receipts`]), the database
//! rows kept in step with memory ([`records`]), a restarted front's [`recovery`], a dead worker's
//! [`revive`], the [`retain_timer`] and [`shutdown`].
//!
//! May use: `guard`, `sessions`, `jobs`, `output`, `shell`, `storage`, `rpc` (never a transport).
//!
//! Locks: `registry` (names → sessions) is taken before a session's data, never after; no method
//! holds it while it waits on the supervisor or on a job. A session being opened holds its name with an
//! `Opening` slot, so a concurrent `session.open` of the same name waits for it and then attaches.
//!
//! ```
//! # fn demo(kernel: &front::kernel::Kernel) {
//! use front::kernel::Client;
//! let result = kernel.call(&Client { uid: 1000, pid: None }, "describe", serde_json::json!({}));
//! # let _ = result; }
//! ```

pub mod check_run;
pub mod checks_list;
pub mod describe;
pub mod describe_session;
pub mod guard_apply;
pub mod job_keep;
pub mod job_kill;
pub mod job_probe;
pub mod job_run;
pub mod job_wait;
pub mod jobs_list;
pub mod output_read;
#[cfg(test)]
mod params_schema;
pub mod peer_check;
pub mod receipts;
pub mod records;
pub mod recovery;
pub mod retain_timer;
pub mod revive;
pub mod session_close;
pub mod session_open;
pub mod shutdown;
pub mod subscribe;
pub mod terminal_io;
pub mod unsent;

use crate::rpc::{ErrorKind, RpcError};
use crate::sessions::pump::Pump;
use crate::sessions::session::Session;
use crate::sessions::supervisor::SupervisorLink;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;
use shm_proto::control::ProcInfo;
use shm_proto::procs::ProcList;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Default `yield_ms` of `run` and `wait`.
pub const DEFAULT_YIELD_MS: u64 = 10_000;
/// Largest `yield_ms` (and `grace_ms`) honoured; larger values are clamped with a note.
pub const MAX_YIELD_MS: u64 = 600_000;
/// How long a command may wait for room in a full command ring.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(5);
/// Every method, for the "unknown method" message.
pub const METHODS: [&str; 20] = [
    "session.open",
    "session.close",
    "run",
    "wait",
    "kill",
    "jobs",
    "output",
    "describe",
    "keep",
    "kept",
    "kept.kill",
    "kept.log",
    "receipt",
    "shutdown",
    "subscribe",
    "unsubscribe",
    "write",
    "resize",
    "check",
    "checks",
];

/// Where the kernel keeps things and what it tells `describe`.
#[derive(Clone, Debug)]
pub struct KernelConfig {
    pub state_dir: PathBuf,
    /// The client socket's path (informational).
    pub socket: String,
    /// heddle's cgroup root, from the supervisor: connections from job cgroups below it are refused
    /// (`peer_check`). `None`: no connection is taken for a job's.
    pub cgroup_root: Option<PathBuf>,
}

/// Who is calling: the peer credentials of the connection.
#[derive(Clone, Copy, Debug)]
pub struct Client {
    pub uid: u32,
    /// The connecting process, placed against heddle's cgroup tree at accept ([`Kernel::client_of`]);
    /// `None` for a caller inside the front. A connection from one of heddle's jobs is refused
    /// (`peer_check`).
    pub pid: Option<crate::kernel::peer_check::Peer>,
}

/// A name in the registry.
pub(crate) enum Slot {
    /// `session.open` is bringing this session up.
    Opening,
    Open(Arc<Session>),
}

#[derive(Default)]
pub(crate) struct Registry {
    pub(crate) slots: BTreeMap<String, Slot>,
    pub(crate) next_name: u64,
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernel").finish_non_exhaustive()
    }
}

/// The front's kernel.
pub struct Kernel {
    pub(crate) cfg: KernelConfig,
    pub(crate) link: Arc<dyn SupervisorLink>,
    pub(crate) pump: Pump,
    pub(crate) registry: Mutex<Registry>,
    pub(crate) registry_changed: Condvar,
    serials: AtomicU64,
    shutting_down: AtomicBool,
    pub(crate) db: crate::storage::db::Db,
    pub(crate) receipts: crate::kernel::receipts::Receipts,
    pub(crate) recorder: crate::kernel::records::Recorder,
    pub(crate) shutdown: crate::kernel::shutdown::Trigger,
    /// Makes each session's next job's output files ahead of its call (`sessions::files_ahead`).
    pub(crate) files: crate::sessions::files_ahead::Maker,
    /// heddle's cgroup root, to tell connections from its own jobs (`peer_check`).
    pub(crate) peers: crate::kernel::peer_check::Roots,
}

impl Kernel {
    /// A kernel talking to the supervisor through `link`; starts the pump thread.
    pub fn new(cfg: KernelConfig, link: Arc<dyn SupervisorLink>) -> std::io::Result<Arc<Kernel>> {
        std::fs::create_dir_all(cfg.state_dir.join("sessions"))?;
        let db = crate::storage::db::Db::open(&cfg.state_dir.join("heddle.db")).map_err(std::io::Error::other)?;
        let receipts = crate::kernel::receipts::Receipts::load(&db).map_err(std::io::Error::other)?;
        match db.lose_orphans() {
            Ok(0) => {}
            // Before any takeover: the rows of a session taken over next are written again as its
            // rebuilt jobs are (`recovery::adopt`), so only the others stay lost.
            Ok(n) => tracing::info!(
                "the database had {n} jobs of an earlier front as running: marked lost, except those of \
                 the sessions taken over now, which are recorded again as they are"
            ),
            Err(e) => tracing::warn!("marking an earlier front's jobs lost failed: {e}"),
        }
        let pump = Pump::start(link.clone())?;
        let kernel = Arc::new(Kernel {
            cfg,
            link,
            pump,
            registry: Mutex::new(Registry::default()),
            registry_changed: Condvar::new(),
            serials: AtomicU64::new(1),
            shutting_down: AtomicBool::new(false),
            db,
            receipts,
            recorder: crate::kernel::records::Recorder::default(),
            shutdown: crate::kernel::shutdown::Trigger::default(),
            files: crate::sessions::files_ahead::Maker::start()?,
            peers: crate::kernel::peer_check::Roots::default(),
        });
        crate::kernel::retain_timer::start_timer(Arc::downgrade(&kernel))?;
        Ok(kernel)
    }

    /// Answer one request: mutations get receipts (see `receipts`), and the job records of the session
    /// a call named are brought up to date in the database afterwards.
    pub fn call(&self, client: &Client, method: &str, params: Value) -> Result<Box<RawValue>, RpcError> {
        let (r, named) = self.answer(client, method, params);
        if let Some(s) = named {
            self.after_answer(&s);
        }
        r
    }

    /// The work a call leaves for after its answer is written: the session's database rows
    /// ([`Kernel::record_session`]) and its next job's output files, made ahead (`sessions::files_ahead`). Neither
    /// competes for a CPU with the call's own job while the client waits.
    pub fn after_answer(&self, s: &Arc<Session>) {
        self.record_session(s);
        // A run's receipt, held back from the answer's path (`Db::write_later`), with the rows above.
        self.db.flush();
        self.files.ahead(s);
    }

    /// [`Kernel::call`] without what follows the answer: the answer, and the session the caller hands
    /// to [`Kernel::after_answer`] once the answer is on its way (the connection does so after writing
    /// it, so no client waits on it).
    pub fn answer(
        &self,
        client: &Client,
        method: &str,
        params: Value,
    ) -> (Result<Box<RawValue>, RpcError>, Option<Arc<Session>>) {
        self.answer_observed(client, method, params, &|_| {})
    }

    /// [`Kernel::answer`], telling `on_job` the id of the job a `run` admitted as soon as it is
    /// registered, while the call still waits for its yield (a door reports progress from it).
    pub fn answer_observed(
        &self,
        client: &Client,
        method: &str,
        params: Value,
        on_job: &dyn Fn(u64),
    ) -> (Result<Box<RawValue>, RpcError>, Option<Arc<Session>>) {
        self.answer_typed(client, method, params, on_job, None)
    }

    /// [`Kernel::answer_observed`], also handing a `run`'s result as it was before it became JSON to
    /// `typed` (when given): the MCP doors render their text form from it instead of reading the JSON back.
    pub fn answer_typed(
        &self,
        client: &Client,
        method: &str,
        params: Value,
        on_job: &dyn Fn(u64),
        typed: Option<&mut Option<Box<protocol::results::JobResult>>>,
    ) -> (Result<Box<RawValue>, RpcError>, Option<Arc<Session>>) {
        if let Err(e) = crate::kernel::peer_check::admit(self, client, method, &params) {
            return (Err(e), None);
        }
        let session = params.get("session").or_else(|| params.get("name")).and_then(Value::as_str).map(str::to_owned);
        let before = session.as_deref().and_then(|n| self.session(client, n).ok());
        let r = match method {
            m if crate::kernel::receipts::MUTATIONS.contains(&m) => {
                crate::kernel::receipts::mutate(self, client, m, params, on_job, typed)
            }
            "receipt" => encode(crate::kernel::receipts::call(self, client, params)),
            "shutdown" => encode(crate::kernel::shutdown::call(self, client, params)),
            _ => self.call_method(client, method, params),
        };
        let named = before.or_else(|| session.and_then(|n| self.session(client, &n).ok()));
        // A session this call ended is recorded before the answer: a keyed retry on another connection,
        // once the answer is out, reads its jobs' rows back from the database (`receipts`).
        if let Some(s) = named.as_ref().filter(|s| s.lock().is_closing()) {
            self.record_session(s);
        }
        (r, named)
    }

    /// One method, without receipts.
    pub(crate) fn call_method(&self, client: &Client, method: &str, params: Value) -> Result<Box<RawValue>, RpcError> {
        match method {
            "session.open" => encode(crate::kernel::session_open::call(self, client, params)),
            "session.close" => encode(crate::kernel::session_close::call(self, client, params)),
            "run" => encode(crate::kernel::job_run::call(self, client, params)),
            "wait" => encode(crate::kernel::job_wait::call(self, client, params)),
            "check" => encode(crate::kernel::check_run::call(self, client, params)),
            "checks" => encode(crate::kernel::checks_list::call(self, client, params)),
            "kill" => encode(crate::kernel::job_kill::call(self, client, params)),
            "jobs" => encode(crate::kernel::jobs_list::call(self, client, params)),
            "output" if crate::kernel::terminal_io::is_terminal_view(&params) => {
                encode(crate::kernel::terminal_io::call_view(self, client, params))
            }
            "output" => encode(crate::kernel::output_read::call(self, client, params)),
            "write" => encode(crate::kernel::terminal_io::call_write(self, client, params)),
            "resize" => encode(crate::kernel::terminal_io::call_resize(self, client, params)),
            "describe" => encode(crate::kernel::describe::call(self, client, params)),
            "keep" => encode(crate::kernel::job_keep::call_keep(self, client, params)),
            "kept" => encode(crate::kernel::job_keep::call_kept(self, client, params)),
            "kept.kill" => encode(crate::kernel::job_keep::call_kill(self, client, params)),
            "kept.log" => encode(crate::kernel::job_keep::call_log(self, client, params)),
            "subscribe" | "unsubscribe" => Err(RpcError::new(
                ErrorKind::InvalidRequest,
                format!("{method} needs a socket connection to send notifications on; call it over the control socket"),
            )),
            _ => Err(RpcError::new(
                ErrorKind::MethodNotFound,
                format!("there is no method '{method}'; the methods are {}", METHODS.join(", ")),
            )),
        }
    }

    /// Remove the subscriptions of connection `conn` (all, or only subscription `only`) from every
    /// session; how many were removed.
    pub fn drop_subscriptions(&self, conn: u64, only: Option<u64>) -> usize {
        let sessions: Vec<Arc<Session>> = self
            .registry()
            .slots
            .values()
            .filter_map(|slot| match slot {
                Slot::Open(s) => Some(s.clone()),
                _ => None,
            })
            .collect();
        sessions.iter().map(|s| s.lock().unsubscribe(conn, only)).sum()
    }

    pub(crate) fn registry(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn next_serial(&self) -> u64 {
        self.serials.fetch_add(1, Ordering::Relaxed)
    }

    /// The session `name` as this client may see it.
    /// An answer that reported `jobs` of `session` never reached the client (its connection was gone
    /// when it was written, or it cancelled the call): the session's next call announces them again.
    /// Nothing else changes; a session that is gone, or of another uid, is left alone.
    pub fn unreport(&self, client: &Client, session: &str, jobs: &[u64]) {
        if jobs.is_empty() {
            return;
        }
        if let Ok(s) = self.session(client, session) {
            s.lock().unreport(jobs);
            tracing::info!("session '{session}': jobs {jobs:?} are announced again (the answer that reported them was not received)");
        }
    }

    pub(crate) fn session(&self, client: &Client, name: &str) -> Result<Arc<Session>, RpcError> {
        match self.registry().slots.get(name) {
            Some(Slot::Open(s)) if s.visible_to(client.uid) || crate::kernel::peer_check::own_session(client, s) => {
                Ok(s.clone())
            }
            Some(Slot::Opening) => Err(RpcError::new(
                ErrorKind::UnknownSession,
                format!("session '{name}' is still being opened; retry when session.open has answered"),
            )),
            _ => Err(unknown_session(name)),
        }
    }

    /// The session, refusing lost or closing ones (for calls that would start work in it).
    pub(crate) fn live_session(&self, client: &Client, name: &str) -> Result<Arc<Session>, RpcError> {
        let s = self.session(client, name)?;
        let st = s.lock();
        if let Some(lost) = st.lost() {
            return Err(session_lost(name, &lost.note));
        }
        if st.is_closing() {
            return Err(RpcError::new(
                ErrorKind::UnknownSession,
                format!("session '{name}' is being closed; open a new session with session.open"),
            ));
        }
        drop(st);
        Ok(s)
    }

    /// Refuse new work once shutdown began or the supervisor is gone.
    pub(crate) fn admit(&self) -> Result<(), RpcError> {
        // A front whose supervisor is gone exits as soon as its control loop hears of it; work taken
        // meanwhile would run in sessions the restarted supervisor ends as leftovers.
        if self.is_shutting_down() || self.link.is_gone() {
            return Err(RpcError::shutting_down());
        }
        Ok(())
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }

    pub(crate) fn shutdown_flag(&self) -> &AtomicBool {
        &self.shutting_down
    }

    /// The supervisor reports that a session's worker died: its unfinished jobs are lost. `verified_empty`
    /// is what the supervisor's teardown found then; a `session.close` of the session reports it.
    pub fn worker_died(
        &self,
        session: &str,
        code: Option<i32>,
        signal: Option<i32>,
        killed: &ProcList<ProcInfo>,
        verified_empty: bool,
    ) {
        let found = match self.registry().slots.get(session) {
            Some(Slot::Open(s)) => Some(s.clone()),
            _ => None,
        };
        let Some(s) = found else {
            tracing::warn!("worker of unknown session '{session}' died");
            return;
        };
        let how = match (code, signal) {
            (_, Some(sig)) => format!("killed by signal {sig}"),
            (Some(c), None) => format!("exit code {c}"),
            (None, None) => "no status".to_owned(),
        };
        let note = format!("the session's worker died ({how})");
        tracing::info!("session '{session}': {note}");
        let listed = crate::sessions::prestart::without_spares(&s.lock(), killed);
        s.mark_worker_died(note, listed, killed.more(), Some(verified_empty));
        self.pump.remove(s.spec().serial);
    }

    /// Refuse new work from now on and wake every waiter so in-flight calls answer promptly.
    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
        for s in self.open_sessions() {
            s.notify();
        }
        self.registry_changed.notify_all();
    }

    /// Write every buffered byte of output to disk and stop the pump.
    pub fn finish(&self) {
        self.pump.stop();
        for s in self.open_sessions() {
            s.flush();
        }
    }

    pub(crate) fn open_sessions(&self) -> Vec<Arc<Session>> {
        let reg = self.registry();
        reg.slots.values().filter_map(|s| if let Slot::Open(s) = s { Some(s.clone()) } else { None }).collect()
    }

    /// Remove `name` from the registry if it still holds this session (or is still `Opening`).
    pub(crate) fn release(&self, name: &str, serial: Option<u64>) {
        let mut reg = self.registry();
        let ours = match (reg.slots.get(name), serial) {
            (Some(Slot::Opening), None) => true,
            (Some(Slot::Open(s)), Some(serial)) => s.spec().serial == serial,
            _ => false,
        };
        if ours {
            reg.slots.remove(name);
        }
        drop(reg);
        self.registry_changed.notify_all();
    }
}

fn encode<T: Serialize>(r: Result<T, RpcError>) -> Result<Box<RawValue>, RpcError> {
    let v = r?;
    serde_json::value::to_raw_value(&v).map_err(|e| RpcError::internal(format!("the result could not be encoded: {e}")))
}

pub(crate) fn unknown_session(name: &str) -> RpcError {
    RpcError::new(ErrorKind::UnknownSession, format!("no session named '{name}'; open one with session.open"))
}

pub(crate) fn unknown_job(session: &str, job: u64) -> RpcError {
    RpcError::new(
        ErrorKind::UnknownJob,
        format!("session '{session}' has no job {job}; list its jobs with jobs {{\"session\": \"{session}\"}}"),
    )
}

/// `s`'s data, locked, when it may take a new job: not lost and not being closed (each refused with
/// the sentence a client acts on).
pub(crate) fn lock_for_new_job(
    s: &Session,
) -> Result<std::sync::MutexGuard<'_, crate::sessions::session::SessionData>, RpcError> {
    let st = s.lock();
    if let Some(lost) = st.lost() {
        return Err(session_lost(s.name(), &lost.note));
    }
    if st.is_closing() {
        let msg = format!("session '{}' is being closed; open a new session with session.open", s.name());
        return Err(RpcError::new(ErrorKind::UnknownSession, msg));
    }
    Ok(st)
}

pub(crate) fn session_lost(name: &str, note: &str) -> RpcError {
    RpcError::new(
        ErrorKind::SessionLost,
        format!(
            "session '{name}' was lost: {note}; close it with session.close and open a new session with session.open"
        ),
    )
}

/// `yield_ms` (default 10 s) clamped to the maximum, with a note when it was.
pub(crate) fn clamp_wait(name: &str, asked: Option<u64>, default: u64) -> (Duration, Option<String>) {
    let asked = asked.unwrap_or(default);
    if asked > MAX_YIELD_MS {
        let note = format!("{name} {asked} exceeds the maximum {MAX_YIELD_MS}; used {MAX_YIELD_MS}");
        (Duration::from_millis(MAX_YIELD_MS), Some(note))
    } else {
        (Duration::from_millis(asked), None)
    }
}

/// `now + d`, saturating far in the future.
pub(crate) fn deadline(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d).unwrap_or(now + Duration::from_secs(86_400))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yield_is_clamped_with_a_note() {
        assert_eq!(clamp_wait("yield_ms", None, DEFAULT_YIELD_MS), (Duration::from_secs(10), None));
        let (d, note) = clamp_wait("yield_ms", Some(900_000), DEFAULT_YIELD_MS);
        assert_eq!(d, Duration::from_millis(MAX_YIELD_MS));
        assert!(note.unwrap().contains("exceeds the maximum 600000"));
    }

    #[test]
    fn a_dead_worker_loses_its_unfinished_jobs_and_only_those() {
        use crate::testing::Harness;
        use serde_json::json;
        let h = Harness::new();
        h.open("demo");
        h.run("demo", "echo ok", 5000);
        h.run("demo", "hang", 0);
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| h.ok("wait", json!({"session": "demo", "job": 2, "yield_ms": 60000})));
            std::thread::sleep(Duration::from_millis(50));
            h.sup.kill_worker("demo");
            h.kernel.worker_died("demo", None, Some(9), &Default::default(), true);
            let r = waiter.join().unwrap();
            assert_eq!(
                (r["state"].as_str(), r["exit_code"].is_null(), r["settled"].as_bool()),
                (Some("lost"), true, Some(true))
            );
            assert!(r["note"].as_str().unwrap().contains("worker died (killed by signal 9)"), "{r}");
        });
        let jobs = h.ok("jobs", json!({"session": "demo"}));
        assert_eq!(jobs["jobs"][0]["state"], "exited");
        assert_eq!(h.ok("describe", json!({"session": "demo"}))["sessions"][0]["state"], "lost");
        // The next run starts a new worker for the session (`kernel/revive.rs`); numbering goes on.
        let r = h.run("demo", "echo x", 5000);
        assert_eq!((r["state"].as_str(), r["job"].as_u64()), (Some("exited"), Some(3)), "{r}");
        assert_eq!(h.ok("describe", json!({"session": "demo"}))["sessions"][0]["state"], "live");
        assert_eq!(h.ok("jobs", json!({"session": "demo"}))["jobs"][1]["state"], "lost");
    }

    #[test]
    fn unknown_methods_list_the_methods() {
        let h = crate::testing::Harness::new();
        let e = h.call("frobnicate", serde_json::json!({})).unwrap_err();
        assert_eq!(e.kind, ErrorKind::MethodNotFound);
        assert!(e.message.contains("session.open, session.close, run"));
    }

    #[test]
    fn error_sentences_say_what_to_do() {
        assert!(unknown_session("x").message.contains("open one with session.open"));
        assert_eq!(unknown_job("x", 3).kind, ErrorKind::UnknownJob);
        assert!(session_lost("x", "worker died").message.contains("open a new session"));
    }
}
