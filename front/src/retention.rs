//! Output retention: how much of a job's stored output the front keeps, and what it says when it
//! removed some.
//!
//! Three limits, set by `heddle-front` flags (or `HEDDLE_RETAIN_*` variables, which the supervisor
//! passes through to the front, so `heddle up` and the e2e fixture can set them):
//!
//! - `--retain-job-bytes` (default 4 GiB): a job's raw log (`<job>.log`) and its line log
//!   (`<job>.lines`) each keep at most this many bytes; past it the OLDEST whole records are punched
//!   out of the file (`FALLOC_FL_PUNCH_HOLE`, so file offsets and the sparse indexes stay valid).
//! - `--retain-session-bytes` (default 16 GiB): when a session's jobs keep more than this, the output
//!   of its ended jobs is removed, oldest job first, until it fits (running jobs keep theirs).
//! - `--retain-age-secs` (default 7 days): ended jobs' output older than this is removed.
//!
//! The session limit and the age are checked when the session is touched (a job is added or ends),
//! never by a busy loop. Nothing is removed silently: the stream byte counts and the line count
//! removed are kept in the job record; the model view starts with [`marker`]'s line, raw reads of a
//! removed offset are an error naming what was removed and why, and line views of removed lines say so.
//! `stdout_bytes`/`stderr_bytes` keep counting everything the job wrote.
//!
//! ```
//! use front::retention::marker;
//! let m = marker([1 << 20, 0], 12, "max 1.0 MiB per job").unwrap();
//! assert_eq!(m, "[… heddle: first 1.0 MiB (1048576 bytes) of stdout (lines 1–12) removed by retention (max 1.0 MiB per job) …]\n");
//! ```

use crate::binary::human_bytes;
use crate::session::SessionState;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The front's retention limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    pub job_bytes: u64,
    pub session_bytes: u64,
    pub max_age: Duration,
}

impl Default for Retention {
    fn default() -> Retention {
        Retention { job_bytes: 4 << 30, session_bytes: 16 << 30, max_age: Duration::from_secs(7 * 24 * 3600) }
    }
}

static CONFIG: OnceLock<Retention> = OnceLock::new();

/// Set the process's limits (once, at start; later calls are ignored).
pub fn set(r: Retention) {
    let _ = CONFIG.set(r);
}

/// The process's limits (the defaults unless [`set`]).
pub fn config() -> Retention {
    CONFIG.get().copied().unwrap_or_default()
}

/// The model view's first line when retention removed output: what, how many lines, and why.
pub fn marker(removed: [u64; 2], lines: u64, why: &str) -> Option<String> {
    if removed == [0, 0] && lines == 0 {
        return None;
    }
    let parts: Vec<String> = [(removed[0], "stdout"), (removed[1], "stderr")]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, s)| format!("{} of {s}", exact_bytes(*n)))
        .collect();
    let what = if parts.is_empty() { "output".to_owned() } else { parts.join(" and ") };
    let lines = if lines > 0 { format!(" (lines 1–{lines})") } else { String::new() };
    Some(format!("[… heddle: first {what}{lines} removed by retention ({why}) …]\n"))
}

/// `1.2 GiB (1288490189 bytes)`, or `12 bytes`.
pub fn exact_bytes(n: u64) -> String {
    if n < 1024 {
        return human_bytes(n);
    }
    format!("{} ({n} bytes)", human_bytes(n))
}

/// The note of a line view that asks for lines retention removed.
pub fn lines_note(removed_lines: u64, from: u64, why: &str) -> Option<String> {
    (removed_lines > 0 && from <= removed_lines)
        .then(|| format!("lines 1–{removed_lines} were removed by retention ({why}); the first line kept is {}", removed_lines + 1))
}

/// Apply the session limit and the age limit to a session's ended jobs (oldest first).
pub fn enforce(st: &mut SessionState, r: Retention, now: Instant) {
    let age_why = format!("output of ended jobs is kept {}", human_secs(r.max_age));
    for job in st.jobs.values_mut() {
        if job.ended_at().is_some_and(|at| now.duration_since(at) >= r.max_age) {
            job.remove_output(0, &age_why);
        }
    }
    let mut total: u64 = st.jobs.values().map(|j| j.kept_bytes()).sum();
    if total <= r.session_bytes {
        return;
    }
    let why = format!("max {} per session; oldest ended jobs first", human_bytes(r.session_bytes));
    let mut ended: Vec<_> = st.jobs.values_mut().filter(|j| j.ended_at().is_some()).collect();
    ended.sort_by_key(|j| j.id());
    for job in ended {
        if total <= r.session_bytes {
            break;
        }
        let before = job.kept_bytes();
        job.remove_output(0, &why);
        total -= before - job.kept_bytes();
    }
}

fn human_secs(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        s if s >= 86_400 && s % 86_400 == 0 => format!("{} days", s / 86_400),
        s if s >= 3600 && s % 3600 == 0 => format!("{} hours", s / 3600),
        s => format!("{s} seconds"),
    }
}
