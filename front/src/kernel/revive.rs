//! Starting a new worker for a session whose worker died (docs/architecture.md, "A worker's death").
//!
//! When a worker dies the supervisor kills and verifies empty the session's cgroup subtree and reports
//! `WorkerDied`; the front marks the unfinished jobs `lost` and the session lost *as revivable*. The
//! next `run` in the session (lazily, never on its own) asks the supervisor to open the session again
//! under the same name — same owner, sandbox request and limits, so the same cgroup path and policy —
//! and swaps the new worker's region and doorbells into the existing [`Session`]
//! ([`Session::replace_worker`]). Everything the front holds stays: the jobs and their output, the
//! job numbering, the shell state (cwd, exports, functions, carried by the front and restored into
//! each job) and the session's serial, so its journal, database rows and pump entry carry on.
//!
//! A worker that keeps dying is not restarted forever: after [`MAX_REVIVALS`] revivals within
//! [`REVIVAL_WINDOW`] the `run` answers `session_lost` with a sentence saying so. Each revival is an
//! audit row (`op` `worker revived`).
//!
//! ```no_run
//! # fn demo(k: &front::kernel::Kernel, s: &front::sessions::session::Session) {
//! // Called by `run` before it admits a job; a live session is returned untouched.
//! # }
//! ```

use crate::kernel::{deadline, session_lost, Kernel};
use crate::rpc::results::WorkerInfo;
use crate::rpc::{ErrorKind, RpcError};
pub use crate::sessions::journal::Reopen;
use crate::sessions::session::Session;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Revivals allowed within [`REVIVAL_WINDOW`]; the next death within it ends the session for good.
pub const MAX_REVIVALS: usize = 3;
/// The window [`MAX_REVIVALS`] counts in.
pub const REVIVAL_WINDOW: Duration = Duration::from_secs(60);

/// If `s` was lost because its worker died, start a new worker for it (see the module docs). A live
/// session, or one lost for another reason, is left as it is (the caller's own checks answer).
pub(crate) fn revive_if_worker_died(k: &Kernel, s: &Arc<Session>) -> Result<(), RpcError> {
    let _one = s.reviving.lock().unwrap_or_else(|e| e.into_inner());
    let (note, reopen, killed) = {
        let mut st = s.lock();
        if st.is_closing() {
            return Ok(()); // the close decides; the caller's own check refuses the call
        }
        let Some(lost) = st.lost().filter(|l| l.worker_died) else { return Ok(()) };
        let (note, killed) = (lost.note.clone(), lost.killed.len());
        let Some(reopen) = st.reopen().cloned() else {
            let why = format!("{note}; its settings are not known to this front, so no new worker can be started");
            return Err(session_lost(s.name(), &why));
        };
        let revivals = st.recent_revivals(Instant::now(), REVIVAL_WINDOW);
        if revivals >= MAX_REVIVALS {
            let why = format!(
                "{note}, and its worker had already been restarted {revivals} times within {}s, so heddle does not start another",
                REVIVAL_WINDOW.as_secs()
            );
            return Err(session_lost(s.name(), &why));
        }
        (note, reopen, killed)
    };
    start_worker(k, s, &reopen).map_err(|why| {
        let msg = format!("session '{}' lost its worker ({note}) and a new worker could not be started: {why}; retry, or close it with session.close and open a new session", s.name());
        RpcError::new(ErrorKind::SessionLost, msg)
    })?;
    k.db.write(crate::storage::db::Write::Audit {
        uid: s.spec().owner_uid,
        op: "worker revived".into(),
        session: Some(s.name().to_owned()),
        job: None,
        detail: format!(
            "{note}; {killed} process(es) of the session were killed with its cgroup subtree; a new worker (pid {}) took over",
            worker_pid(s)
        ),
    });
    tracing::info!("session '{}': {note}; a new worker took over", s.name());
    Ok(())
}

fn worker_pid(s: &Session) -> u32 {
    s.lock().worker().map_or(0, |w| w.pid)
}

/// Open the session again at the supervisor, swap the new rings in, and wait for the worker's hello.
fn start_worker(k: &Kernel, s: &Arc<Session>, reopen: &Reopen) -> Result<(), String> {
    let name = s.name();
    let opened = k
        .link
        .open_session(name, s.spec().owner_uid, &reopen.sandbox, &reopen.limits)
        .map_err(|e| crate::sessions::supervisor::error_chain(&e))?;
    let worker = WorkerInfo { pid: opened.worker_pid, uid: opened.worker_uid };
    let end = match s.replace_worker(opened.fds, worker) {
        Ok(end) => end,
        Err(e) => {
            // The session stays lost as it was; the close's verdict joins the death's.
            let closed = k.link.close_session(name);
            s.mark_worker_died(String::new(), Vec::new(), 0, teardown_verdict(&closed));
            return Err(format!("its shared memory could not be attached ({e})"));
        }
    };
    k.pump.add(s.clone(), end);
    let hello = crate::kernel::session_open::HELLO_TIMEOUT;
    let st =
        s.wait_until(s.lock(), deadline(hello), k.shutdown_flag(), |st| st.shell().is_some() || st.lost().is_some());
    if st.shell().is_some() && st.lost().is_none() {
        return Ok(());
    }
    let why = match st.lost() {
        Some(l) => l.note.clone(),
        None => format!("the new worker did not report ready within {hello:?}"),
    };
    drop(st);
    k.pump.remove(s.spec().serial);
    s.mark_worker_died(why.clone(), Vec::new(), 0, None);
    let closed = k.link.close_session(name);
    s.mark_worker_died(why.clone(), Vec::new(), 0, teardown_verdict(&closed));
    Err(why)
}

/// What closing a new worker's session again says of its subtree, for the session's lost record:
/// refused means the supervisor had already torn it down at the worker's death, and its `WorkerDied`
/// carries the verdict (`None` here); no answer at all means nothing was verified.
fn teardown_verdict(
    closed: &Result<crate::sessions::supervisor::ClosedSession, crate::sessions::supervisor::LinkError>,
) -> Option<bool> {
    match closed {
        Ok(c) => Some(c.verified_empty),
        Err(crate::sessions::supervisor::LinkError::Refused(_)) => None,
        Err(_) => Some(false),
    }
}
