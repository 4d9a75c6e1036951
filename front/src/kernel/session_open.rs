//! `session.open {name?, cwd?, env?}`: open a session through the supervisor, or reattach to a live one
//! of that name.
//!
//! Steps for a new session: claim the name (an `Opening` slot), ask the supervisor
//! (`OpenSession{client_uid}` from the connection's peer credentials), prepare
//! `<state-dir>/sessions/<name>/jobs` (a stale directory of an earlier session of that name is removed,
//! unless that session was left by a restart: then its jobs are carried on, `recovery::restore_earlier`),
//! attach the region, register the session and hand its event end to the pump, then wait (5 s) for the
//! worker's `Hello` to learn the shell and the worker. Any failure undoes what was done (the supervisor
//! is asked to close the session) and answers `session_open_failed`.
//!
//! Reattaching: a live session of that name owned by the same uid (or any, for root) is returned with
//! `attached: true`; its cwd and env stay as they were. A session whose worker died gets a new worker
//! first (`kernel/revive.rs`); a session lost otherwise keeps its name until it is closed. Reattaching takes no
//! announcements (its `announcements` is always empty): the next call in the session carries them.
//!
//! ```text
//! → {"jsonrpc":"2.0","id":1,"method":"session.open","params":{"name":"demo","cwd":"/tmp"}}
//! ← {"jsonrpc":"2.0","id":1,"result":{"session":"demo","attached":false,"state_version":0,"shell":{"path":
//!    "/usr/bin/bash","version":"5.2.15(1)-release"},"worker":{"pid":901,"uid":1000},"cwd":"/tmp","note":null,
//!    "announcements":[]}}
//! ```

use crate::kernel::{deadline, session_lost, Client, Kernel, Slot};
use crate::rpc::results::{join_notes, SessionOpenResult, ShellInfo, WorkerInfo};
use crate::rpc::{self, ErrorKind, RpcError};
use crate::sessions::sandbox::SandboxRequest;
use crate::sessions::session::{Session, SessionSpec};
use serde::Deserialize;
use serde_json::Value;
use shm_proto::control::SessionLimits;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a new session's worker has to say hello.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a `session.open` waits for a concurrent open (or close) of the same name.
const CLAIM_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Params {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    env: Option<BTreeMap<String, String>>,
    /// Memory and process limits for the whole session (supervisor defaults when absent).
    #[serde(default)]
    limits: Option<LimitParams>,
    #[serde(default)]
    policy: Option<String>,
    #[serde(default)]
    network: Option<bool>,
    /// `false`: jobs may not open pseudo-terminals of their own (`[seccomp.ptys]`); `true`: they may.
    #[serde(default)]
    ptys: Option<bool>,
    /// Let the session's jobs drive heddle, their own session only (`peer_check`).
    #[serde(default)]
    nested: Option<bool>,
    #[serde(default)]
    persistent: bool,
    /// Extra writable roots, within the server's `--allow-writable` directories.
    #[serde(default)]
    writable: Option<Vec<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct LimitParams {
    #[serde(default)]
    memory_max: Option<u64>,
    #[serde(default)]
    pids_max: Option<u64>,
}

pub(crate) fn call(k: &Kernel, client: &Client, params: Value) -> Result<SessionOpenResult, RpcError> {
    let p: Params = rpc::params("session.open", params)?;
    k.admit()?;
    if let Some(name) = &p.name {
        validate_name(name)?;
    }
    if let Some(cwd) = &p.cwd {
        validate_cwd(cwd)?;
    }
    let env = validate_env("session.open", p.env.as_ref())?;
    let cwd = p.cwd.clone().unwrap_or_else(|| "/".to_owned());
    let writable = p.writable.as_deref().unwrap_or(&[]);
    let mut sandbox = SandboxRequest::new(p.policy.as_deref(), p.network, &cwd, writable, p.nested)?;
    sandbox.ptys = p.ptys;
    let gave = p.cwd.is_some()
        || p.env.is_some()
        || p.policy.is_some()
        || p.network.is_some()
        || p.ptys.is_some()
        || p.writable.is_some()
        || p.nested.is_some();
    match claim(k, client, p.name.as_deref())? {
        Claim::Existing(s) => attach_existing(k, &s, gave || p.limits.is_some()),
        Claim::New(name) => {
            if p.cwd.is_some() {
                if let Err(e) = cwd_exists(&cwd) {
                    k.release(&name, None);
                    return Err(e);
                }
            }
            let l = p.limits.unwrap_or_default();
            let limits = SessionLimits { memory_max: l.memory_max, pids_max: l.pids_max, ..Default::default() };
            open_new(k, client, name, NewSession { cwd, env, persistent: p.persistent }, &sandbox, &limits)
        }
    }
}

/// Session names: `[A-Za-z0-9_.-]{1,64}`, not starting with `.`.
pub(crate) fn validate_name(name: &str) -> Result<(), RpcError> {
    let ok = (1..=64).contains(&name.len())
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(RpcError::invalid_params(
            "session.open",
            format!("session name {name:?} is not 1-64 of [A-Za-z0-9_.-] not starting with '.'"),
        ))
    }
}

fn validate_cwd(cwd: &str) -> Result<(), RpcError> {
    if !cwd.starts_with('/') || cwd.contains('\0') {
        return Err(RpcError::invalid_params("session.open", format!("cwd {cwd:?} must be an absolute path")));
    }
    Ok(())
}

/// A new session's cwd must be a directory that exists: every job starts there, and a job that cannot
/// would fail with an unrelated hint. Only what the front can see is refused (a directory the front's
/// uid may not look into is left for the job's uid to find).
fn cwd_exists(cwd: &str) -> Result<(), RpcError> {
    let why = match std::fs::metadata(cwd) {
        Ok(m) if m.is_dir() => return Ok(()),
        Ok(_) => format!("cwd {cwd} is not a directory; open the session in a directory (its parent, say)"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            format!("cwd {cwd} does not exist; create it first (mkdir -p {cwd}) or open the session in a directory that exists")
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
            format!("cwd {cwd} does not exist (a part of it is not a directory); open the session in a directory that exists")
        }
        Err(_) => return Ok(()),
    };
    Err(RpcError::invalid_params("session.open", why))
}

/// Environment entries: names non-empty without `=` or NUL, values without NUL, and never a `BASH_FUNC_`
/// name (bash would define a function from it: only heddle's own restore puts functions in a job's
/// environment).
pub(crate) fn validate_env(
    method: &str,
    env: Option<&BTreeMap<String, String>>,
) -> Result<Vec<(String, String)>, RpcError> {
    let Some(env) = env else { return Ok(Vec::new()) };
    for (k, v) in env {
        if k.is_empty() || k.contains(['=', '\0']) || v.contains('\0') {
            return Err(RpcError::invalid_params(method, format!("env entry {k:?} is not a valid variable")));
        }
        if k.starts_with("BASH_FUNC_") {
            let msg = format!(
                "env entry {k:?} is refused: bash would import it as a function; define functions in a command instead"
            );
            return Err(RpcError::invalid_params(method, msg));
        }
    }
    Ok(env.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
}

enum Claim {
    Existing(Arc<Session>),
    New(String),
}

/// Whether `uid` can carry on in session `name` as it was (`mcp.attach {resume: true}`): it is open now
/// and `uid`'s own (a front that took over after a crash has it), or a restart left it in the state
/// directory for `uid` to re-open. A name that would open afresh — closed, shut down with its sessions,
/// never opened, or another uid's (root included) — is not.
/// `None` while another call is opening the name (ask again in a moment).
pub(crate) fn resumable(k: &Kernel, uid: u32, name: &str) -> Option<bool> {
    match k.registry().slots.get(name) {
        Some(Slot::Open(s)) => Some(s.spec().owner_uid == uid && !s.lock().is_closing()),
        Some(Slot::Opening) => None,
        None => Some(crate::kernel::recovery::earlier(&k.cfg.state_dir.join("sessions").join(name), uid).is_some()),
    }
}

fn claim(k: &Kernel, client: &Client, name: Option<&str>) -> Result<Claim, RpcError> {
    let sessions = k.cfg.state_dir.join("sessions");
    let mut reg = k.registry();
    let Some(name) = name else {
        loop {
            reg.next_name += 1;
            let name = format!("s{}", reg.next_name);
            // A name an earlier incarnation left behind is skipped: a session opened without a name is
            // new, and must not carry that incarnation's jobs (they stay for a re-open by that name).
            if !reg.slots.contains_key(&name) && !crate::kernel::recovery::left(&sessions.join(&name)) {
                reg.slots.insert(name.clone(), Slot::Opening);
                return Ok(Claim::New(name));
            }
        }
    };
    let until = deadline(CLAIM_TIMEOUT);
    loop {
        let busy = match reg.slots.get(name) {
            None if crate::kernel::recovery::left_by_other(&sessions.join(name), client.uid) => {
                return Err(name_unavailable(name))
            }
            None => {
                reg.slots.insert(name.to_owned(), Slot::Opening);
                return Ok(Claim::New(name.to_owned()));
            }
            Some(Slot::Open(s)) if !s.visible_to(client.uid) && !crate::kernel::peer_check::own_session(client, s) => {
                return Err(name_unavailable(name))
            }
            Some(Slot::Open(s)) => {
                let st = s.lock();
                if let Some(lost) = st.lost().filter(|l| !l.worker_died) {
                    return Err(session_lost(name, &lost.note));
                }
                if !st.is_closing() {
                    drop(st);
                    return Ok(Claim::Existing(s.clone()));
                }
                "closed"
            }
            Some(Slot::Opening) => "opened",
        };
        let now = Instant::now();
        if now >= until || k.is_shutting_down() {
            let msg = format!("session '{name}' is still being {busy} by another call; retry in a moment");
            return Err(RpcError::new(ErrorKind::SessionOpenFailed, msg));
        }
        reg = k.registry_changed.wait_timeout(reg, until - now).unwrap_or_else(|e| e.into_inner()).0;
    }
}

/// The answer for a name held by a session this client may not see: the same sentence whatever holds
/// it, naming no owner and nothing of the session (every other method answers `unknown_session` for it).
/// Session names are one namespace for all uids, so only that the name cannot be opened is said.
fn name_unavailable(name: &str) -> RpcError {
    let msg = format!("the session name '{name}' is not available to you; choose another name (or omit it)");
    RpcError::new(ErrorKind::SessionOpenFailed, msg)
}

/// What a new session is opened with.
struct NewSession {
    cwd: String,
    env: Vec<(String, String)>,
    persistent: bool,
}

fn open_failed(name: &str, why: impl std::fmt::Display) -> RpcError {
    RpcError::new(ErrorKind::SessionOpenFailed, format!("session '{name}' could not be opened: {why}"))
}

fn open_new(
    k: &Kernel,
    client: &Client,
    name: String,
    new: NewSession,
    sandbox: &SandboxRequest,
    limits: &SessionLimits,
) -> Result<SessionOpenResult, RpcError> {
    let NewSession { cwd, env, persistent } = new;
    let opened = match k.link.open_session(&name, client.uid, sandbox, limits) {
        Ok(o) => o,
        Err(e) => {
            k.release(&name, None);
            return Err(open_failed(&name, crate::sessions::supervisor::error_chain(&e)));
        }
    };
    let dir = k.cfg.state_dir.join("sessions").join(&name);
    let earlier = crate::kernel::recovery::earlier(&dir, client.uid);
    let dir_note = prepare_dir(&dir, earlier.is_some()).err().map(|e| {
        format!("the output directory {} could not be prepared ({e}); job output is kept in memory only", dir.display())
    });
    let spec = SessionSpec {
        name: name.clone(),
        serial: k.next_serial(),
        owner_uid: client.uid,
        cgroup: opened.cgroup,
        cwd,
        env,
        dir,
        persistent,
    };
    let (s, end) = match Session::attach(spec, opened.fds) {
        Ok(x) => x,
        Err(e) => {
            let _ = k.link.close_session(&name);
            k.release(&name, None);
            return Err(open_failed(&name, format!("its shared memory could not be attached ({e})")));
        }
    };
    {
        let mut st = s.lock();
        st.set_worker(WorkerInfo { pid: opened.worker_pid, uid: opened.worker_uid });
        st.set_reopen(Some(crate::kernel::revive::Reopen { sandbox: sandbox.clone(), limits: limits.clone() }));
    }
    crate::kernel::recovery::start_journal(k, &s);
    let mut dir_note = dir_note;
    if let Some(meta) = earlier {
        crate::kernel::recovery::restore_earlier(k, &s, meta);
        // The carried shell state starts jobs where the earlier calls left them, not in this open's cwd.
        let carried = s.lock().record().items().get("cwd").map(|c| String::from_utf8_lossy(c).into_owned());
        let asked = s.spec().cwd.trim_end_matches('/');
        if let Some(c) = carried.filter(|c| c != asked && !(asked.is_empty() && c == "/")) {
            let note = format!(
                "session '{name}' carries on from before a restart of heddle with its shell state: jobs start in \
                 {c}, where its earlier calls left them, not in the cwd given here ({}); close it or open another \
                 name to start there",
                s.spec().cwd
            );
            dir_note = Some(dir_note.map_or(note.clone(), |d| format!("{d}; {note}")));
        }
    }
    k.registry().slots.insert(name.clone(), Slot::Open(s.clone()));
    k.registry_changed.notify_all();
    k.pump.add(s.clone(), end);
    match wait_ready(k, &s, true) {
        Ok((shell, worker)) => {
            crate::sessions::prestart::hint(&s);
            k.files.ahead(&s);
            // Apart: a lock taken inside the struct expression is held to its end.
            let starts_in = starts_in(&s);
            Ok(SessionOpenResult {
                session: name,
                attached: false,
                state_version: s.lock().record().version(),
                shell,
                worker,
                cwd: s.spec().cwd.clone(),
                starts_in,
                note: dir_note,
                announcements: Vec::new(),
                persistent: s.spec().persistent,
            })
        }
        Err(e) => {
            k.pump.remove(s.spec().serial);
            let _ = k.link.close_session(&name);
            k.release(&name, Some(s.spec().serial));
            Err(e)
        }
    }
}

/// A fresh `<dir>/jobs`, private to the front's uid; `keep`: the directory holds an earlier incarnation
/// of the session whose jobs are carried over (`recovery::restore_earlier`).
fn prepare_dir(dir: &Path, keep: bool) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if dir.exists() && !keep {
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir.join("jobs"))
}

/// Where `s`'s next job starts: the cwd its record carries, else the directory it was opened in.
fn starts_in(s: &Session) -> String {
    let carried = s.lock().record().items().get("cwd").map(|c| String::from_utf8_lossy(c).into_owned());
    carried.unwrap_or_else(|| s.spec().cwd.clone())
}

/// Wait for the worker's hello; the shell and worker facts it brought. `fresh`: a worker this front just
/// started, whose `BashFile` (right behind its `Hello`) is awaited too.
fn wait_ready(k: &Kernel, s: &Session, fresh: bool) -> Result<(ShellInfo, WorkerInfo), RpcError> {
    let st = s.wait_until(s.lock(), deadline(HELLO_TIMEOUT), k.shutdown_flag(), |st| {
        st.shell().is_some_and(|sh| !fresh || sh.probed.is_some()) || st.lost().is_some()
    });
    if let Some(lost) = st.lost() {
        return Err(open_failed(s.name(), &lost.note));
    }
    match (st.shell(), st.worker()) {
        (Some(shell), Some(worker)) => {
            k.link.saw_bash(shm_proto::control::BashSeen { id: shell.id.clone(), version: shell.version.clone() });
            Ok((shell.clone(), worker.clone()))
        }
        _ if k.is_shutting_down() => Err(RpcError::shutting_down()),
        _ => Err(open_failed(s.name(), format!("its worker did not report ready within {HELLO_TIMEOUT:?}"))),
    }
}

fn attach_existing(k: &Kernel, s: &Arc<Session>, gave_settings: bool) -> Result<SessionOpenResult, RpcError> {
    crate::kernel::revive::revive_if_worker_died(k, s)?;
    let (shell, worker) = wait_ready(k, s, false)?;
    let note = gave_settings.then(|| {
        format!("session '{}' already existed, so its own cwd, env and policy are kept; the cwd, env and policy given here were not applied", s.name())
    });
    // Reattaching takes no announcements: they are for the next call that works in the session (the
    // CLI reattaches before every command, and would swallow what the command's result must show).
    let starts_in = starts_in(s);
    let st = s.lock();
    Ok(SessionOpenResult {
        session: s.name().to_owned(),
        attached: true,
        state_version: st.record().version(),
        shell,
        worker,
        cwd: s.spec().cwd.clone(),
        starts_in,
        note: join_notes(note),
        announcements: Vec::new(),
        persistent: s.spec().persistent,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Harness;
    use serde_json::json;

    #[test]
    fn names_follow_the_contract() {
        for good in ["a", "demo-1", "x.y_z", &"n".repeat(64)] {
            assert!(validate_name(good).is_ok(), "{good}");
        }
        for bad in ["", ".hidden", "a/b", "sp ace", &"n".repeat(65), "é"] {
            assert_eq!(validate_name(bad).unwrap_err().kind, ErrorKind::InvalidParams, "{bad}");
        }
    }

    #[test]
    fn env_entries_are_checked() {
        let mut env = BTreeMap::new();
        env.insert("A".to_owned(), "1".to_owned());
        assert_eq!(validate_env("run", Some(&env)).unwrap(), [("A".to_owned(), "1".to_owned())]);
        env.insert("B=C".to_owned(), "1".to_owned());
        assert!(validate_env("run", Some(&env)).is_err());
        let mut env = BTreeMap::new();
        env.insert("BASH_FUNC_ls%%".to_owned(), "() { echo owned; }".to_owned());
        let e = validate_env("session.open", Some(&env)).unwrap_err();
        assert!(e.message.contains("import it as a function"), "{}", e.message);
    }

    #[test]
    fn cwd_must_be_absolute() {
        assert!(validate_cwd("/tmp").is_ok());
        assert!(validate_cwd("tmp").is_err());
    }

    #[test]
    fn a_new_session_reports_shell_and_worker() {
        let h = Harness::new();
        let r = h.open("demo");
        assert_eq!(
            (r["session"].as_str(), r["attached"].as_bool(), r["state_version"].as_u64()),
            (Some("demo"), Some(false), Some(0))
        );
        assert_eq!(
            (r["shell"]["path"].as_str(), r["shell"]["version"].as_str()),
            (Some("/bin/bash"), Some("5.2.15(1)-release"))
        );
        assert_eq!(
            (r["worker"]["pid"].as_u64(), r["worker"]["uid"].as_u64(), r["cwd"].as_str()),
            (Some(4242), Some(1000), Some("/"))
        );
        assert!(h.dir.path().join("state/sessions/demo/jobs").is_dir());
    }

    #[test]
    fn names_are_generated_when_absent() {
        let h = Harness::new();
        assert_eq!(h.ok("session.open", json!({}))["session"], "s1");
        assert_eq!(h.ok("session.open", json!({"cwd": "/tmp"}))["session"], "s2");
    }

    #[test]
    fn opening_a_live_name_again_attaches() {
        let h = Harness::new();
        h.ok("session.open", json!({"name": "demo", "cwd": "/srv"}));
        // Long enough that the `run` answers first: a job reported as ended by its own call is never
        // announced again.
        assert_eq!(h.run("demo", "sleep 1000", 0)["state"], "running");
        // `describe {}` (no session named) delivers no announcements: poll it until the job has ended,
        // however loaded the host.
        let deadline = Instant::now() + Duration::from_secs(20);
        while h.ok("describe", json!({}))["sessions"][0]["jobs_running"] != 0 {
            assert!(Instant::now() < deadline, "the 1 ms job did not end within 20 s");
            std::thread::sleep(Duration::from_millis(5));
        }
        let r = h.ok("session.open", json!({"name": "demo", "cwd": "/elsewhere"}));
        assert_eq!((r["attached"].as_bool(), r["cwd"].as_str()), (Some(true), Some("/srv")));
        assert!(r["note"].as_str().unwrap().contains("were not applied"));
        assert!(crate::testing::announced(&r).is_empty(), "reattaching leaves announcements for the next call");
        let jobs = h.ok("jobs", json!({"session": "demo"}));
        assert_eq!(crate::testing::announced(&jobs), [1], "the next call in the session tells what ended meanwhile");
    }

    #[test]
    fn another_users_session_is_invisible_and_its_name_taken() {
        let h = Harness::new();
        h.open("mine");
        let other = Client { uid: 2000, pid: None };
        let e = h.call_as(&other, "session.open", json!({"name": "mine"})).unwrap_err();
        assert_eq!(e.kind, ErrorKind::SessionOpenFailed);
        assert_eq!(e.message, "the session name 'mine' is not available to you; choose another name (or omit it)");
        let e = h.call_as(&other, "run", json!({"session": "mine", "cmd": "echo x"})).unwrap_err();
        assert_eq!(e.kind, ErrorKind::UnknownSession);
        assert!(h.call_as(&other, "describe", json!({})).unwrap()["sessions"].as_array().unwrap().is_empty());
        let root = Client { uid: 0, pid: None };
        assert_eq!(h.call_as(&root, "run", json!({"session": "mine", "cmd": "echo x"})).unwrap()["state"], "exited");
    }

    #[test]
    fn a_refusal_is_session_open_failed_and_frees_the_name() {
        let h = Harness::new();
        *h.sup.refuse.lock().unwrap() = Some("cgroup tree missing".into());
        let e = h.call("session.open", json!({"name": "demo"})).unwrap_err();
        assert_eq!(e.kind, ErrorKind::SessionOpenFailed);
        assert_eq!(e.message, "session 'demo' could not be opened: the supervisor refused: cgroup tree missing");
        assert_eq!(h.open("demo")["attached"], false);
    }

    #[test]
    fn a_worker_that_never_says_hello_fails_the_open_and_is_closed() {
        let h = Harness::new();
        h.sup.silent.store(true, std::sync::atomic::Ordering::SeqCst);
        let e = h.call("session.open", json!({"name": "mute"})).unwrap_err();
        assert_eq!(e.kind, ErrorKind::SessionOpenFailed);
        assert!(e.message.contains("did not report ready"), "{}", e.message);
        use crate::sessions::supervisor::SupervisorLink;
        assert!(h.sup.close_session("mute").is_err(), "the front already closed it");
        h.sup.silent.store(false, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(h.open("mute")["attached"], false);
    }

    #[test]
    fn concurrent_opens_of_one_name_make_one_session() {
        let h = Harness::new();
        let attached: Vec<bool> = std::thread::scope(|scope| {
            let calls: Vec<_> = (0..4).map(|_| scope.spawn(|| h.open("same")["attached"].as_bool().unwrap())).collect();
            calls.into_iter().map(|c| c.join().unwrap()).collect()
        });
        assert_eq!(attached.iter().filter(|a| !**a).count(), 1, "one opened, the others attached: {attached:?}");
    }

    #[test]
    fn bad_params_are_invalid_params() {
        let h = Harness::new();
        for params in
            [json!({"name": ".x"}), json!({"cwd": "rel"}), json!({"env": {"A=B": "1"}}), json!({"policy": "x"})]
        {
            assert_eq!(h.call("session.open", params).unwrap_err().kind, ErrorKind::InvalidParams);
        }
    }
}
