//! `shutdown {grace_ms?}`: an orderly stop asked by a root client, and the trigger that hands it to the
//! service loop.
//!
//! From the moment it is asked, every mutation is refused with `shutting_down` (-32004) while queries
//! (`jobs`, `wait`, `output`, `describe`) and `receipt` go on answering; after `grace_ms` (default 0, at
//! most 60 000) the front closes every session itself — survivors listed in the log and the audit log,
//! kept jobs left running in their kept cgroups — records everything, and exits with `FRONT_EXIT_SHUTDOWN`, which
//! tells the supervisor to shut down too. SIGTERM to `heddle up` takes the supervisor's path instead:
//! the supervisor tells the front (`Shutdown`), which refuses mutations at once and exits after the
//! in-flight answers, and the supervisor closes the sessions.
//!
//! ```text
//! → {"jsonrpc":"2.0","id":9,"method":"shutdown","params":{"grace_ms":2000}}
//! ← {"jsonrpc":"2.0","id":9,"result":{"shutting_down":true,"grace_ms":2000,"sessions":["demo"]}}
//! ```

use crate::kernel::{Client, Kernel};
use crate::rpc::{self, ErrorKind, RpcError};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Mutex;
use std::time::Duration;

/// Longest grace a client may ask for.
pub const MAX_GRACE_MS: u64 = 60_000;

type Hook = Box<dyn Fn(Duration) + Send + Sync>;

impl std::fmt::Debug for Trigger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trigger").finish_non_exhaustive()
    }
}

/// Where `shutdown` reaches the service loop (set by `service::serve`).
#[derive(Default)]
pub struct Trigger {
    hook: Mutex<Option<Hook>>,
}

impl Trigger {
    pub fn set(&self, hook: Hook) {
        *self.hook.lock().unwrap_or_else(|e| e.into_inner()) = Some(hook);
    }

    fn fire(&self, grace: Duration) -> bool {
        match &*self.hook.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(h) => {
                h(grace);
                true
            }
            None => false,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Params {
    #[serde(default)]
    grace_ms: Option<u64>,
}

#[derive(Serialize, Debug)]
pub struct ShutdownResult {
    pub shutting_down: bool,
    pub grace_ms: u64,
    pub sessions: Vec<String>,
}

pub(crate) fn call(k: &Kernel, client: &Client, params: Value) -> Result<ShutdownResult, RpcError> {
    let p: Params = rpc::params("shutdown", params)?;
    if client.uid != 0 {
        return Err(RpcError::new(
            ErrorKind::NotPermitted,
            "only root may shut heddle down; ask the administrator or send SIGTERM to `heddle up`",
        ));
    }
    let grace_ms = p.grace_ms.unwrap_or(0).min(MAX_GRACE_MS);
    k.begin_shutdown();
    let sessions = k.open_sessions().iter().map(|s| s.name().to_owned()).collect();
    k.db.write(crate::storage::db::Write::Audit {
        uid: client.uid,
        op: "shutdown".into(),
        session: None,
        job: None,
        detail: format!("grace_ms {grace_ms}"),
    });
    if !k.shutdown.fire(Duration::from_millis(grace_ms)) {
        tracing::warn!("shutdown asked, but no service loop is listening");
    }
    Ok(ShutdownResult { shutting_down: true, grace_ms, sessions })
}

/// Close every open session (the front's part of `shutdown`), logging and auditing the survivors.
pub fn close_all(k: &Kernel) {
    let root = Client { uid: 0, pid: None };
    for s in k.open_sessions() {
        k.record_session(&s);
        match crate::kernel::session_close::close(k, &root, s.name()) {
            Ok(r) => {
                let v = serde_json::to_value(&r).unwrap_or_default();
                tracing::info!("shutdown closed session '{}': {}", s.name(), v);
                k.db.write(crate::storage::db::Write::Audit {
                    uid: 0,
                    op: "shutdown session.close".into(),
                    session: Some(s.name().into()),
                    job: None,
                    detail: v.to_string(),
                });
            }
            Err(e) => tracing::warn!("shutdown could not close session '{}': {e}", s.name()),
        }
        k.record_session(&s);
    }
    k.db.sync();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Harness;
    use serde_json::json;

    #[test]
    fn shutdown_refuses_mutations_but_answers_receipts_and_queries() {
        let h = Harness::new();
        let open = h.ok("session.open", json!({"name": "demo"}));
        let e = h.call_as(&Client { uid: 1000, pid: None }, "shutdown", json!({})).unwrap_err();
        assert_eq!(e.kind, ErrorKind::NotPermitted);
        let r = h.call_as(&Client { uid: 0, pid: None }, "shutdown", json!({"grace_ms": 10})).unwrap();
        assert_eq!(r["sessions"], json!(["demo"]));
        let e = h.call("run", json!({"session": "demo", "cmd": "echo x"})).unwrap_err();
        assert_eq!((e.kind, e.kind.code()), (ErrorKind::ShuttingDown, -32004));
        let found = h.ok("receipt", json!({"id": open["receipt"]["id"]}));
        assert_eq!(found["receipt"]["op"], "session.open");
        assert!(h.ok("jobs", json!({"session": "demo"}))["jobs"].as_array().unwrap().is_empty());
    }

    /// A front takes no job once its supervisor is gone, before its control loop starts the shutdown:
    /// the restarted supervisor ends the old sessions' processes, so such a job would only be lost
    /// (found by the torture run: a job submitted just after the supervisor's SIGKILL).
    #[test]
    fn a_front_whose_supervisor_is_gone_takes_no_new_work() {
        let h = Harness::new();
        h.open("demo");
        h.sup.gone.store(true, std::sync::atomic::Ordering::SeqCst);
        let e = h.call("run", json!({"session": "demo", "cmd": "echo x"})).unwrap_err();
        assert_eq!(e.kind, ErrorKind::ShuttingDown);
        assert!(h.ok("jobs", json!({"session": "demo"}))["jobs"].as_array().unwrap().is_empty());
    }
}
