//! MCP progress for a tool call that waits on a job: while `run` or `wait` waits for its yield, a
//! scoped thread sends `notifications/progress` with the job's newest line (redacted, as every view),
//! at most every [`INTERVAL`], and at least every [`HEARTBEAT`] while the job runs silently, so a host
//! can show that the job lives. It stops when the call answers or the job ends; it never steers the
//! job.
//!
//! ```text
//! ← {"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t1","progress":2,
//!    "message":"job 4 · 1.5 s · compiling serde v1.0.219"}}
//! ```

use crate::kernel::{Client, Kernel};
use crate::rpc::outbox::Outbox;
use protocol::results::JobPhase;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// The shortest gap between two progress notifications.
pub const INTERVAL: Duration = Duration::from_millis(500);
/// The longest silence while the job runs.
pub const HEARTBEAT: Duration = Duration::from_secs(2);

impl<'a> std::fmt::Debug for Progress<'a> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Progress").finish_non_exhaustive()
    }
}

/// One call's progress reporter: the client's token, the job once known, and the stop signal.
pub struct Progress<'a> {
    token: Value,
    outbox: &'a Outbox,
    /// The job followed; 0 until `run` admitted it.
    job: AtomicU64,
    stopped: Mutex<bool>,
    wake: Condvar,
}

impl<'a> Progress<'a> {
    pub fn new(token: Value, outbox: &'a Outbox, job: Option<u64>) -> Progress<'a> {
        Progress {
            token,
            outbox,
            job: AtomicU64::new(job.unwrap_or(0)),
            stopped: Mutex::new(false),
            wake: Condvar::new(),
        }
    }

    /// The job the call admitted (`run`'s hook).
    pub fn set_job(&self, job: u64) {
        self.job.store(job, Ordering::Release);
    }

    /// The call answered: the reporter ends without sending more.
    pub fn stop(&self) {
        *self.stopped.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.wake.notify_all();
    }

    /// Sleep up to `d`; true once stopped.
    fn pause(&self, d: Duration) -> bool {
        let g = self.stopped.lock().unwrap_or_else(|e| e.into_inner());
        let (g, _) = self.wake.wait_timeout_while(g, d, |stopped| !*stopped).unwrap_or_else(|e| e.into_inner());
        *g
    }

    /// Report on the job in `session` until stopped or the job ends.
    pub fn follow(&self, kernel: &Kernel, client: &Client, session: &str) {
        let Ok(s) = kernel.session(client, session) else { return };
        let (mut sent, mut last, mut said) = (0u64, Instant::now(), None::<String>);
        while !self.pause(INTERVAL) {
            let job = self.job.load(Ordering::Acquire);
            if job == 0 {
                continue;
            }
            let (line, running_ms) = {
                let st = s.lock();
                let Some(j) = st.job(job) else { return };
                if j.state() != JobPhase::Running {
                    return;
                }
                let line = crate::output::view::last_lines(j.rendered()).pop();
                (line, crate::rpc::results::millis(j.duration(Instant::now())))
            };
            if line == said && last.elapsed() < HEARTBEAT {
                continue;
            }
            sent += 1;
            let took = protocol::text::duration(running_ms);
            let message = match &line {
                Some(l) => format!("job {job} · {took} · {}", protocol::text::one_line(l, 200)),
                None => format!("job {job} · {took} · no output yet"),
            };
            let note = json!({"jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progressToken": self.token, "progress": sent, "message": message}});
            let mut bytes = serde_json::to_vec(&note).unwrap_or_default();
            bytes.push(b'\n');
            // A slow reader is not waited for: progress is dropped, never queued without bound.
            if self.outbox.over() || !self.outbox.send(bytes) {
                continue;
            }
            (said, last) = (line, Instant::now());
        }
    }
}
