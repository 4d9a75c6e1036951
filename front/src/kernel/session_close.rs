//! `session.close {session}`: kill everything in the session (worker included) through the supervisor,
//! then forget it.
//!
//! The session is marked `closing` first (new `run`s are refused, a `WorkerDied` for it no longer
//! turns its jobs `lost`), the supervisor's `CloseSession` kills and removes the subtree, and jobs still
//! running become `killed` with the note "ended by session.close" (a kept one stays `running`: it was
//! not killed, and its note says where its output goes now). The session leaves the registry
//! whatever the supervisor answered: if it could not confirm, `verified_empty` is false and `note`
//! says why. A lost session closes the same way; the processes the supervisor killed when its worker
//! died are reported as its survivors. The supervisor forgot a session whose worker died (it ended and
//! verified the subtree then, and refuses the close): unless a new worker was started since, the close
//! reports that teardown's `verified_empty` (`Lost::death_verified_empty`), and `note` says so.
//!
//! ```text
//! → {"jsonrpc":"2.0","id":9,"method":"session.close","params":{"session":"demo"}}
//! ← {"jsonrpc":"2.0","id":9,"result":{"session":"demo","survivors":[{"pid":4800,"cmdline":"sleep 1000"}],
//!    "killed":1,"kept":[],"verified_empty":true,"note":null,"announcements":[]}}
//! ```

use crate::kernel::{Client, Kernel};
use crate::rpc::results::{join_notes, SessionCloseResult, Survivor};
use crate::rpc::{self, ErrorKind, RpcError};
use crate::sessions::session::Lost;
use crate::sessions::supervisor::{error_chain, LinkError};
use serde::Deserialize;
use serde_json::Value;
use std::time::Instant;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Params {
    session: String,
}

pub(crate) fn call(k: &Kernel, client: &Client, params: Value) -> Result<SessionCloseResult, RpcError> {
    let p: Params = rpc::params("session.close", params)?;
    k.admit()?;
    close(k, client, &p.session)
}

/// Close `name` (also during shutdown, which refuses clients' mutations but closes every session).
pub(crate) fn close(k: &Kernel, client: &Client, name: &str) -> Result<SessionCloseResult, RpcError> {
    let p = Params { session: name.to_owned() };
    let s = k.session(client, &p.session)?;
    // Not while a new worker is being started for it (`kernel/revive.rs`): that one would be left unclosed.
    let _no_revival = s.reviving.lock().unwrap_or_else(|e| e.into_inner());
    let was_lost = {
        let mut st = s.lock();
        if st.is_closing() {
            let msg = format!("session '{}' is already being closed by another call", p.session);
            return Err(RpcError::new(ErrorKind::UnknownSession, msg));
        }
        st.set_closing();
        st.lost().cloned()
    };
    let answer = k.link.close_session(&p.session);
    k.pump.remove(s.spec().serial);
    let death = was_lost.as_ref().and_then(death_verdict);
    let (mut survivors, mut more): (Vec<Survivor>, u32) =
        was_lost.map(|l| (l.killed, l.killed_more)).unwrap_or_default();
    let (verified_empty, note) = match (answer, death) {
        (Ok(closed), _) => {
            survivors.extend(crate::sessions::prestart::without_spares(&s.lock(), &closed.killed));
            more = more.saturating_add(closed.killed.more());
            (closed.verified_empty, None)
        }
        // The supervisor ended the session at its worker's death and forgot it: that teardown's verdict
        // is the answer (no worker was started since: the session is still lost, and revival waits).
        (Err(LinkError::Refused(_)), Some((verified, note))) => (verified, Some(note)),
        (Err(e), Some((verified, note))) => {
            (verified, Some(format!("{note}; the supervisor did not answer the close: {}", error_chain(&e))))
        }
        (Err(e), None) => (false, Some(format!("the supervisor did not confirm the close: {}", error_chain(&e)))),
    };
    let (announcements, kept) = {
        let mut st = s.lock();
        let now = Instant::now();
        let kept: Vec<String> = st.jobs().filter_map(|j| j.kept().map(str::to_owned)).collect();
        st.close_jobs(now);
        let next = st.last_job() + 1;
        if let Some(files) = st.take_files_ahead(next) {
            files.remove();
        }
        (st.take_announcements(now), kept)
    };
    s.notify();
    crate::kernel::recovery::forget(&s.spec().dir);
    k.release(&p.session, Some(s.spec().serial));
    Ok(SessionCloseResult {
        session: p.session,
        killed: survivors.len() + more as usize,
        survivors,
        survivors_more: more,
        kept,
        verified_empty,
        note: join_notes(note),
        announcements,
    })
}

/// For a session lost because its worker died: what the supervisor's teardown then found, and a note
/// saying so. `None` when no teardown was reported.
fn death_verdict(l: &Lost) -> Option<(bool, String)> {
    let verified = l.death_verified_empty.filter(|_| l.worker_died)?;
    let found = if verified {
        "and verified them empty"
    } else {
        "but could not verify them empty (what is left stays on disk)"
    };
    Some((verified, format!("{}; the supervisor ended the session's cgroups then {found}", l.note)))
}

#[cfg(test)]
mod tests {
    use crate::rpc::ErrorKind;
    use crate::testing::{announced, Harness};
    use serde_json::json;

    #[test]
    fn close_kills_running_jobs_and_forgets_the_session() {
        let h = Harness::new();
        h.open("demo");
        h.run("demo", "echo done", 5000);
        h.run("demo", "hang", 0);
        let r = h.ok("session.close", json!({"session": "demo"}));
        assert_eq!(
            (r["session"].as_str(), r["killed"].as_u64(), r["verified_empty"].as_bool()),
            (Some("demo"), Some(0), Some(true))
        );
        assert_eq!(r["kept"], json!([]));
        assert_eq!(announced(&r), [2], "the job the close ended is announced");
        assert_eq!(r["announcements"][0]["state"], "killed");
        let e = h.call("jobs", json!({"session": "demo"})).unwrap_err();
        assert_eq!(e.kind, ErrorKind::UnknownSession);
        h.open("demo");
        assert_eq!(h.run("demo", "echo again", 5000)["job"], 1, "a new session starts its job ids afresh");
    }

    #[test]
    fn a_call_waiting_on_a_job_answers_when_the_close_kills_it() {
        let h = std::sync::Arc::new(Harness::new());
        h.open("demo");
        let waiting = {
            let h = h.clone();
            std::thread::spawn(move || {
                let t = std::time::Instant::now();
                (h.ok("run", json!({"session": "demo", "cmd": "hang", "yield_ms": 30_000})), t.elapsed())
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(300));
        h.ok("session.close", json!({"session": "demo"}));
        let (r, took) = waiting.join().unwrap();
        assert!(
            took < std::time::Duration::from_secs(10),
            "answered when the close ended the job, not at the yield: {took:?}"
        );
        assert_eq!(
            (r["state"].as_str(), r["signal"].as_i64(), r["exit_code"].as_i64()),
            (Some("killed"), Some(9), None),
            "{r}"
        );
    }

    #[test]
    fn a_closed_session_and_its_jobs_are_let_go() {
        let h = Harness::new();
        h.open("demo");
        for _ in 0..3 {
            h.run("demo", "echo done", 5000);
        }
        let s = std::sync::Arc::downgrade(&h.kernel.session(&h.client, "demo").unwrap());
        h.ok("session.close", json!({"session": "demo"}));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while s.upgrade().is_some() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(s.strong_count(), 0, "something still holds the closed session (and every job it ran)");
    }

    #[test]
    fn a_lost_session_can_be_closed() {
        let h = Harness::new();
        h.open("demo");
        h.run("demo", "hang", 0);
        h.sup.kill_worker("demo");
        // Job 1 runs in `slot-1` (the fake worker's `Started`); the bash in `slot-2`, a cgroup no job of the
        // session has, is the pre-started shell: ended, but no survivor.
        let proc = |pid, cmdline: &str, cgroup: &str| shm_proto::control::ProcInfo {
            pid,
            cmdline: cmdline.into(),
            cgroup: cgroup.into(),
        };
        let killed = vec![proc(77, "sleep 100", "slot-1"), proc(78, "bash --noprofile --norc", "slot-2")];
        h.kernel.worker_died("demo", None, Some(9), &shm_proto::procs::ProcList::new(killed), true);
        // The supervisor forgot the session at the death (the fake refuses the close, as the real one
        // does): the teardown then verified the subtree empty, and that is the answer.
        let r = h.ok("session.close", json!({"session": "demo"}));
        assert_eq!(r["survivors"], json!([{"pid": 77, "cmdline": "sleep 100", "age_ms": null, "cpu_ms": null}]));
        assert_eq!((r["killed"].as_u64(), r["verified_empty"].as_bool()), (Some(1), Some(true)));
        assert_eq!(
            r["note"],
            "the session's worker died (killed by signal 9); the supervisor ended the session's cgroups then and verified them empty"
        );
        assert_eq!(r["announcements"][0]["state"], "lost");
    }

    #[test]
    fn a_dead_workers_session_whose_teardown_did_not_verify_closes_unverified() {
        let h = Harness::new();
        h.open("demo");
        h.sup.kill_worker("demo");
        h.kernel.worker_died("demo", Some(3), None, &Default::default(), false);
        let r = h.ok("session.close", json!({"session": "demo"}));
        assert_eq!(r["verified_empty"], false, "{r}");
        let note = r["note"].as_str().unwrap();
        assert!(note.contains("worker died (exit code 3)") && note.contains("could not verify them empty"), "{note}");
    }

    #[test]
    fn a_dead_worker_unknown_to_the_front_is_no_verdict() {
        // A worker gone without any `WorkerDied` (the fake supervisor forgot it): nothing confirms.
        let h = Harness::new();
        h.open("demo");
        h.sup.kill_worker("demo");
        let r = h.ok("session.close", json!({"session": "demo"}));
        assert_eq!(r["verified_empty"], false, "{r}");
        assert!(r["note"].as_str().unwrap().contains("did not confirm"), "{r}");
    }
}
