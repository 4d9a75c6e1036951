//! A session's ended jobs, let go from memory: their records on disk, read back when looked at.
//!
//! A session keeps its newest jobs in memory (the window, [`window`]: `HEDDLE_JOBS_IN_MEMORY`, 64 by
//! default) and every job that is not done with yet. A job older than the window that has ended, was
//! reported, has nothing left to announce, holds no open file and is settled everywhere (its cgroup,
//! the retention ledger, the database's rows) is written here ([`crate::jobs::frozen`]) and dropped from
//! memory. Looking it up reads it back ([`Retired::get`]); changing it (retention cutting its output,
//! an answer un-reported) brings it back into memory until it is let go again.
//!
//! One file, made at the first job let go in the session's jobs directory without a name (`O_TMPFILE`:
//! it holds this front's records only, goes when the session or the front does, and no other front,
//! restarted or taking over, ever sees it; a restarted front rebuilds its jobs from their journals and
//! logs): one 16-byte slot per job id from offset 0 (slot `id - 1`: the record's offset, its length and
//! a tag), and the records one after the other from 1 TiB on (the file is sparse). A lookup is two
//! reads, and nothing per job stays in memory. What the session's answers sum over every job (how many, by state; their CPU
//! time; their shell-state changes and the last few of them) is kept here as totals.
//!
//! ```
//! use front::jobs::job::Job;
//! use front::sessions::retired::Retired;
//! let dir = tempfile::tempdir().unwrap();
//! let mut r = Retired::default();
//! let mut j = Job::new(3, "make".into(), dir.path().join("3.log"));
//! j.on_exited(Some(0), None, 0, false, std::time::Instant::now());
//! r.put(dir.path(), &j).unwrap();
//! assert_eq!(r.get(3).unwrap().unwrap().cmd(), "make");
//! assert!(r.get(2).is_none() && r.get(4).is_none());
//! assert_eq!(r.count(), 1);
//! ```

use crate::jobs::job::Job;
use crate::rpc::results::StateChange;
use shm_proto::msg::JobId;
use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The jobs a session keeps in memory whatever their state (its newest), by default.
pub const DEFAULT_WINDOW: usize = 64;

static WINDOW: AtomicUsize = AtomicUsize::new(DEFAULT_WINDOW);

/// How many of its newest jobs a session keeps in memory.
pub fn window() -> usize {
    WINDOW.load(Ordering::Relaxed)
}

/// Set [`window`] (the front's `HEDDLE_JOBS_IN_MEMORY`).
pub fn set_window(n: usize) {
    WINDOW.store(n, Ordering::Relaxed);
}

const SLOT: u64 = 16;
/// Where the records begin (the slots before it).
const RECORDS: u64 = 1 << 40;
/// The tag of a written slot ("RJ1\0").
const TAG: u32 = u32::from_le_bytes(*b"RJ1\0");
/// How many of the latest shell-state changes `describe` lists (and the totals keep).
pub const LAST_CHANGES: usize = 8;
const LAST: usize = LAST_CHANGES;

/// A session's jobs on disk, and the totals of them its answers need.
#[derive(Debug, Default)]
pub struct Retired {
    /// The file, once a job was let go.
    file: Option<File>,
    /// Where the next record goes.
    end: u64,
    count: usize,
    max_id: JobId,
    by_state: BTreeMap<String, usize>,
    cpu_ms: f64,
    state_changes: usize,
    /// The last [`LAST`] state changes of the jobs on disk, by job id.
    last_changes: Vec<StateChange>,
}

impl Retired {
    /// Write `job`'s record into `jobs_dir` (again, when it was read back and changed: its totals are
    /// then what it says now).
    pub fn put(&mut self, jobs_dir: &Path, job: &Job) -> Result<(), String> {
        let bytes = crate::jobs::frozen::freeze(job).map_err(|e| e.to_string())?;
        if self.file.is_none() {
            self.file = Some(unnamed(jobs_dir)?);
            self.end = RECORDS;
        }
        let Some(file) = &self.file else { unreachable!("opened above") };
        let id = job.id();
        // Written again (it was brought back and changed): its totals become what it says now.
        let before = self.get(id).and_then(Result::ok);
        let len = u32::try_from(bytes.len()).map_err(|_| "a job's record over 4 GiB".to_owned())?;
        file.write_all_at(&bytes, self.end).map_err(|e| format!("cannot write a job's record: {e}"))?;
        let mut slot = [0u8; SLOT as usize];
        slot[..8].copy_from_slice(&self.end.to_le_bytes());
        slot[8..12].copy_from_slice(&len.to_le_bytes());
        slot[12..].copy_from_slice(&TAG.to_le_bytes());
        let at = id.checked_sub(1).and_then(|i| i.checked_mul(SLOT)).filter(|at| *at < RECORDS);
        let at = at.ok_or_else(|| format!("job id {id} is out of the slots' range"))?;
        file.write_all_at(&slot, at).map_err(|e| format!("cannot write a job's slot: {e}"))?;
        self.end += u64::from(len);
        if let Some(before) = before {
            self.count_out(&before);
        }
        self.count_in(job);
        Ok(())
    }

    /// Take `job` out of the totals.
    fn count_out(&mut self, job: &Job) {
        self.count -= 1;
        if let Some(n) = self.by_state.get_mut(&state_name(job)) {
            *n -= 1;
            if *n == 0 {
                self.by_state.remove(&state_name(job));
            }
        }
        self.cpu_ms -= job.cpu_ms();
        self.state_changes -= job.state_changes().len();
        self.last_changes.retain(|c| c.job != job.id());
    }

    /// Add `job` to the totals.
    fn count_in(&mut self, job: &Job) {
        self.count += 1;
        self.max_id = self.max_id.max(job.id());
        *self.by_state.entry(state_name(job)).or_insert(0) += 1;
        self.cpu_ms += job.cpu_ms();
        self.state_changes += job.state_changes().len();
        let id = job.id();
        let at = self.last_changes.partition_point(|c| c.job <= id);
        let mine = job.state_changes().iter().map(|c| StateChange { job: id, change: c.clone() });
        self.last_changes.splice(at..at, mine);
        let over = self.last_changes.len().saturating_sub(LAST);
        self.last_changes.drain(..over);
    }

    /// Where job `id`'s record is, if it was let go.
    fn slot(&self, id: JobId) -> Option<(u64, usize)> {
        let file = self.file.as_ref()?;
        let mut slot = [0u8; SLOT as usize];
        let at = id.checked_sub(1)?.checked_mul(SLOT).filter(|at| *at < RECORDS)?;
        file.read_exact_at(&mut slot, at).ok()?;
        let off = u64::from_le_bytes(slot[..8].try_into().ok()?);
        let len = u32::from_le_bytes(slot[8..12].try_into().ok()?);
        let tag = u32::from_le_bytes(slot[12..].try_into().ok()?);
        (tag == TAG && len > 0).then_some((off, len as usize))
    }

    /// Whether job `id` was let go.
    pub fn contains(&self, id: JobId) -> bool {
        self.slot(id).is_some()
    }

    /// Job `id` read back; `None` if it was not let go, an error if its record cannot be read.
    pub fn get(&self, id: JobId) -> Option<Result<Job, String>> {
        let (off, len) = self.slot(id)?;
        let file = self.file.as_ref()?;
        let mut bytes = vec![0u8; len];
        Some(match file.read_exact_at(&mut bytes, off) {
            Ok(()) => crate::jobs::frozen::thaw(&bytes).map_err(|e| e.to_string()),
            Err(e) => Err(format!("cannot read the job's record: {e}")),
        })
    }

    /// How many jobs were let go.
    pub fn count(&self) -> usize {
        self.count
    }

    /// The highest id let go (0: none).
    pub fn max_id(&self) -> JobId {
        self.max_id
    }

    /// The jobs let go, by state (as the wire names states).
    pub fn by_state(&self) -> &BTreeMap<String, usize> {
        &self.by_state
    }

    /// The CPU time the jobs let go used, ms.
    pub fn cpu_ms(&self) -> f64 {
        self.cpu_ms
    }

    /// How many shell-state changes the jobs let go made, and the last few.
    pub fn state_changes(&self) -> (usize, &[StateChange]) {
        (self.state_changes, &self.last_changes)
    }
}

/// A file without a name in `dir` (`O_TMPFILE`), or, where the file system cannot make one, a file
/// made and unlinked at once.
fn unnamed(dir: &Path) -> Result<File, String> {
    let mut o = std::fs::OpenOptions::new();
    o.read(true).write(true).mode(0o600);
    match o.clone().custom_flags(nix::fcntl::OFlag::O_TMPFILE.bits()).open(dir) {
        Ok(f) => Ok(f),
        Err(_) => {
            let path = dir.join(format!(".retired-{}-{}", std::process::id(), unique()));
            let f = o.create_new(true).open(&path).map_err(|e| format!("cannot make {}: {e}", path.display()))?;
            let _ = std::fs::remove_file(&path);
            Ok(f)
        }
    }
}

/// A number no other call in this process gets.
fn unique() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A job's state as the wire names it.
pub fn state_name(job: &Job) -> String {
    serde_json::to_value(job.state())
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| "unknown".into())
}
