//! `describe {session?}`: what this heddle is — version, the front's pid and uid, the supervisor's facts
//! (asked over the control socket, 10 s bound; `null` with a note when it does not answer), the socket
//! and state directory, and the sessions this client may see (with `session`: only that one, and the
//! result carries that session's announcements, and its live jobs' liveness is probed). Per session it
//! adds the job environment, live jobs and a summary of changes ([`crate::kernel::describe_session`]).
//!
//! ```text
//! → {"jsonrpc":"2.0","id":7,"method":"describe"}
//! ← {"jsonrpc":"2.0","id":7,"result":{"version":"0.1.0","front":{"pid":812,"uid":998},"supervisor":{"pid":801,
//!    "cgroup_root":"/sys/fs/cgroup/unified/heddle","cgroup_mode":"hybrid"},"socket":"/run/heddle/heddle.sock",
//!    "state_dir":"/var/lib/heddle","sessions":[…],"note":null}}
//! ```

use crate::kernel::describe_session as ds;
use crate::kernel::{Client, Kernel};
use crate::rpc::results::{join_notes, DescribeResult, EffectsBounds, FrontInfo, SessionFacts, SessionLimitsInfo};
use crate::rpc::{self, RpcError};
use crate::sessions::session::Session;
use crate::sessions::supervisor::error_chain;
use serde::Deserialize;
use serde_json::Value;
use std::time::Instant;

/// At most this many live jobs are probed for one `describe {session}`.
const MAX_PROBED: usize = 16;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Params {
    #[serde(default)]
    session: Option<String>,
    /// False for an onlooker (a person's `heddle describe`): the call takes no announcements.
    #[serde(default = "crate::rpc::yes")]
    announce: bool,
}

pub(crate) fn call(k: &Kernel, client: &Client, params: Value) -> Result<DescribeResult, RpcError> {
    let p: Params = rpc::params("describe", params)?;
    let sessions = match &p.session {
        Some(name) => vec![k.session(client, name)?],
        None => k.open_sessions().into_iter().filter(|s| s.visible_to(client.uid)).collect(),
    };
    let (supervisor, note) = match k.link.describe() {
        Ok(facts) => (Some(facts), None),
        Err(e) => (None, Some(format!("the supervisor did not describe itself: {}", error_chain(&e)))),
    };
    // Probing asks the worker (up to 500 ms per job): only for the one session named.
    let probes: Vec<_> = match &p.session {
        Some(_) => ds::live_job_ids(&sessions[0])
            .into_iter()
            .take(MAX_PROBED)
            .map(|id| (id, crate::kernel::job_probe::probe(k, &sessions[0], id)))
            .collect(),
        None => Vec::new(),
    };
    let announcements = p.session.as_ref().map(|_| match p.announce {
        true => sessions[0].lock().take_announcements(Instant::now()),
        false => Vec::new(),
    });
    Ok(DescribeResult {
        version: env!("CARGO_PKG_VERSION"),
        front: FrontInfo { pid: std::process::id(), uid: nix::unistd::getuid().as_raw() },
        supervisor,
        socket: k.cfg.socket.clone(),
        state_dir: k.cfg.state_dir.display().to_string(),
        sessions: sessions
            .iter()
            .map(|s| {
                let mut f = facts(s);
                f.live_jobs = ds::live_jobs(s, &probes);
                f.limits = k.link.session_usage(s.name()).ok().map(SessionLimitsInfo::from);
                f
            })
            .collect(),
        effects: EffectsBounds {
            watched_entries_max: shm_proto::msg::WATCH_LIMIT,
            monitor_dirs_max: shm_proto::msg::MONITOR_DIRS_MAX as u32,
            monitor_paths_max: shm_proto::msg::MONITOR_PATHS_MAX as u32,
        },
        note,
        announcements,
    })
}

fn facts(s: &Session) -> SessionFacts {
    let st = s.lock();
    let state = if st.lost().is_some() { "lost" } else { "live" };
    let lost = st.lost().map(|l| l.note.clone());
    let closing = st.is_closing().then(|| "the session is being closed".to_owned());
    SessionFacts {
        session: s.name().to_owned(),
        worker: st.worker().cloned(),
        cgroup: s.spec().cgroup.clone(),
        shell: st.shell().cloned(),
        cwd: s.spec().cwd.clone(),
        jobs_running: st.running_jobs(),
        jobs_total: st.job_count(),
        state,
        warnings: st.warnings().cloned().collect(),
        note: join_notes(lost.into_iter().chain(closing)),
        shell_state: st.record().summary(),
        limits: None,
        jobs_cpu_ms: st.retired().cpu_ms() + st.jobs().filter(|j| !j.on_disk()).map(|j| j.cpu_ms()).sum::<f64>(),
        output_held_bytes: st.jobs().map(|j| j.held_bytes() as u64).sum(),
        jobs_in_memory: st.jobs().count(),
        sandbox: st.sandbox().cloned(),
        spawn_path: st.spawn_path().map(str::to_owned),
        guard_overrides: st.guard_overrides(),
        persistent: s.spec().persistent,
        env: {
            drop(st);
            ds::env_facts(s)
        },
        live_jobs: Vec::new(),
        changes: ds::changes(s),
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::Harness;
    use serde_json::json;

    #[test]
    fn describe_tells_front_supervisor_and_sessions() {
        let h = Harness::new();
        h.open("a");
        h.run("a", "hang", 0);
        let r = h.ok("describe", json!({}));
        assert_eq!(r["front"]["pid"].as_u64(), Some(u64::from(std::process::id())));
        assert_eq!(r["supervisor"], json!({"pid": 1, "cgroup_root": "/fake", "cgroup_mode": "v2"}));
        assert_eq!(r["socket"], "/tmp/heddle-test.sock");
        assert!(r.get("announcements").is_none(), "no session, no announcements");
        let s = &r["sessions"][0];
        assert_eq!(
            (s["session"].as_str(), s["state"].as_str(), s["jobs_running"].as_u64(), s["jobs_total"].as_u64()),
            (Some("a"), Some("live"), Some(1), Some(1))
        );
        assert_eq!((s["cgroup"].as_str(), s["shell"]["path"].as_str()), (Some("/fake/session-a"), Some("/bin/bash")));
        let one = h.ok("describe", json!({"session": "a"}));
        assert_eq!(one["announcements"], json!([]));
    }
}
