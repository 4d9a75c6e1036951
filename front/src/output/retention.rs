//! Output retention: how much of a job's stored output the front keeps, and what it says when it
//! removed some.
//!
//! Four limits, set by `heddle-front` flags (or `HEDDLE_RETAIN_*` variables, which the supervisor
//! passes through to the front, so `heddle up` and the e2e fixture can set them):
//!
//! - `--retain-job-bytes` (default 4 GiB): a job's raw log (`<job>.log`) and its line log
//!   (`<job>.lines`) each keep at most this many bytes; past it the OLDEST whole records are punched
//!   out of the file (`FALLOC_FL_PUNCH_HOLE`, so file offsets and the sparse indexes stay valid).
//! - `--retain-session-bytes` (default 16 GiB): when a session's jobs keep more than this, the output
//!   of its ended jobs is removed, oldest job first, until it fits (running jobs keep theirs).
//! - `--retain-age-secs` (default 7 days): ended jobs' output older than this is removed.
//! - `--retain-disk-bytes` (`heddle up --disk-budget`; default 32 GiB, or half the state directory's
//!   file system when that is smaller): the server's disk budget, all open sessions' raw logs and line
//!   logs together. Over it, the output of ended jobs goes first, the job that ended first first
//!   (whole, or its oldest records when that is enough; its views say `removed by retention (server
//!   disk budget …)`). When the running jobs alone still keep more, each running job over its equal
//!   share of what is left loses its OLDEST output like a job over `--retain-job-bytes` (the tail
//!   stays exact), and is told: the view's first line says what was removed and why, and the result
//!   carries a note. Output is never dropped unsaid. Checked by the timer thread, woken whenever a
//!   32nd of the budget was written since its last check and when a job's output ends (so the disk
//!   can exceed the budget by about a 32nd of it, plus what is written during one check).
//!
//! The session limit and the age are checked when the session is touched (a job is added or ends),
//! and the age also by a timer thread ([`start_timer`]) every quarter of the age (between 100 ms and a
//! minute), so an idle session's old output goes too — never by a busy loop. Nothing is removed silently: the stream byte counts and the line count
//! removed are kept in the job record; the model view starts with [`marker`]'s line, raw reads of a
//! removed offset are an error naming what was removed and why, and line views of removed lines say so.
//! `stdout_bytes`/`stderr_bytes` keep counting everything the job wrote.
//!
//! ```
//! use front::output::retention::marker;
//! let m = marker([1 << 20, 0], 12, "max 1.0 MiB per job").unwrap();
//! assert_eq!(m, "[… heddle: first 1.0 MiB (1048576 bytes) of stdout (lines 1–12) removed by retention (max 1.0 MiB per job) …]\n");
//! ```

use crate::output::sniff::human_bytes;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::OnceLock;
use std::time::Duration;

/// The front's retention limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    pub job_bytes: u64,
    pub session_bytes: u64,
    pub max_age: Duration,
    /// The server's disk budget (all open sessions' output together).
    pub disk_bytes: u64,
}

/// The default disk budget: 32 GiB, or half the file system of `dir` when that is smaller.
pub fn default_disk_bytes(dir: &Path) -> u64 {
    let fs =
        nix::sys::statvfs::statvfs(dir).map(|v| v.blocks().saturating_mul(v.fragment_size()) / 2).unwrap_or(u64::MAX);
    fs.clamp(64 << 20, 32 << 30)
}

impl Default for Retention {
    fn default() -> Retention {
        Retention {
            job_bytes: 4 << 30,
            session_bytes: 16 << 30,
            max_age: Duration::from_secs(7 * 24 * 3600),
            disk_bytes: 32 << 30,
        }
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

static WRITTEN: AtomicU64 = AtomicU64::new(0);
static WAKE: OnceLock<SyncSender<()>> = OnceLock::new();

/// The disk check's wake-up: [`wrote`] sends on it (never blocking) once a 32nd of the disk budget was
/// written since the last [`take_written`]; the timer thread receives.
pub fn wake_channel() -> Option<Receiver<()>> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    WAKE.set(tx).ok().map(|()| rx)
}

/// `n` bytes of output arrived (called on the output path: an atomic add, at most a `try_send`).
pub fn wrote(n: u64) {
    let total = WRITTEN.fetch_add(n, Ordering::Relaxed) + n;
    if total >= (config().disk_bytes / 32).max(1) {
        if let Some(tx) = WAKE.get() {
            let _ = tx.try_send(());
        }
    }
}

/// Ask for a disk check now (a job's output ended): never blocks.
pub fn wake() {
    if WRITTEN.load(Ordering::Relaxed) > 0 {
        if let Some(tx) = WAKE.get() {
            let _ = tx.try_send(());
        }
    }
}

/// Wake the timer thread now, whatever was written (a session's memory is to be given back).
pub fn wake_now() {
    if let Some(tx) = WAKE.get() {
        let _ = tx.try_send(());
    }
}

/// Bytes written since the last call (the disk check starts with it).
pub fn take_written() -> u64 {
    WRITTEN.swap(0, Ordering::Relaxed)
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
    (removed_lines > 0 && from <= removed_lines).then(|| {
        format!(
            "lines 1–{removed_lines} were removed by retention ({why}); the first line kept is {}",
            removed_lines + 1
        )
    })
}

/// What retention removed from a job, kept next to its log (`<job>.removed`, JSON) so a front
/// restarted over the punched log says it exactly: `file` bytes of the log punched out, stream bytes
/// `[stdout, stderr]` and why. (Lines are not carried: the restarted front renders the kept records
/// again, so its line numbers start at the first kept byte, and the job says so in a note.)
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Removed {
    pub file: u64,
    pub bytes: [u64; 2],
    pub why: String,
}

/// `<job>.removed` for the log at `log`.
pub fn removed_path(log: &Path) -> PathBuf {
    log.with_extension("removed")
}

/// Write `<job>.removed` (a failure is logged: a restarted front then says counts restart).
pub fn save_removed(log: &Path, r: &Removed) {
    let path = removed_path(log);
    let written = serde_json::to_vec(r).map_err(std::io::Error::other).and_then(|b| std::fs::write(&path, b));
    if let Err(e) = written {
        tracing::warn!("writing {} failed: {e}", path.display());
    }
}

/// Read `<job>.removed`, if it exists and is whole.
pub fn load_removed(log: &Path) -> Option<Removed> {
    serde_json::from_slice(&std::fs::read(removed_path(log)).ok()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_name_both_streams_and_exact_bytes() {
        assert_eq!(marker([0, 0], 0, "x"), None);
        assert_eq!(
            marker([10, 2048], 3, "x").unwrap(),
            "[… heddle: first 10 bytes of stdout and 2.0 KiB (2048 bytes) of stderr (lines 1–3) removed by retention (x) …]\n"
        );
    }
}
