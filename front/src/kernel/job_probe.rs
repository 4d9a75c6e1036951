//! Liveness probes: ask the worker what a running job is doing (`Command::Probe` → `Event::Status`) and
//! wait, briefly, for the answer. The worker reads `cpu.stat` of the job's cgroup and `/proc` of its
//! processes (same uid as the job, so `wchan` and `syscall` are readable to it, not to the front).
//!
//! A probe never blocks a call for long: no answer within [`PROBE_WAIT`] leaves the liveness fields
//! that need it `null`.
//!
//! ```text
//! "liveness": {"running_ms": 5012, "last_output_ms_ago": 4990, "pid": 4711, "cpu_ms": 3.1, "procs": 2,
//!              "busy_pid": 4712, "busy_cmdline": "sleep 100", "proc_state": "S",
//!              "wchan": "hrtimer_nanosleep", "activity": "sleeping on a timer"}
//! ```

use crate::kernel::Kernel;
use crate::sessions::session::Session;
use shm_proto::msg::{Command, JobId, JobLiveness};
use std::time::{Duration, Instant};

/// How long a call waits for the worker's answer to a probe.
pub const PROBE_WAIT: Duration = Duration::from_millis(500);

/// The worker's view of a running job, or `None` (not running, no answer in time, session lost).
pub(crate) fn probe(k: &Kernel, s: &Session, job: JobId) -> Option<JobLiveness> {
    let n = s.lock().new_probe();
    s.send(&Command::Probe { job, probe: n }, PROBE_WAIT).ok()?;
    let until = Instant::now() + PROBE_WAIT;
    let mut st = s.wait_until(s.lock(), until, k.shutdown_flag(), |st| st.probe_answered(n) || st.lost().is_some());
    st.take_probe_answer(n).flatten()
}
