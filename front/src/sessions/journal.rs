//! A session's journal: what a restarted front needs to take a live session over
//! (docs/architecture.md, "Front crash recovery").
//!
//! `<session dir>/session.json` holds the session's settings (owner, cwd, env, persistent), written
//! at open. `<session dir>/journal` is append-only: a [`Entry::Job`] per job as it is submitted, and a
//! [`Entry::Batch`] per drained batch of the event ring, written *before* the batch's output reaches the
//! job logs and before the ring's head is released. Each entry is `[len u32 LE][postcard bytes]`; a torn
//! last entry (the front died mid-write) is ignored.
//!
//! The exactness argument: a batch is the frames between ring positions `from` and `to`. The order per
//! batch is journal entry → job log writes → head release. After a crash the new front reads the
//! published head: if the last batch's `to` is past it, the batch was not released, so its events are
//! not applied and each job log is cut back to the length it had before the batch (`before`); the
//! frames are then popped again. Otherwise the batch is complete. So no byte is lost or doubled.
//! That comparison is only meaningful for batches of the ring being taken over: each batch belongs to
//! the ring named by the last [`Entry::Ring`] before it, and a batch of any other (dead) ring is
//! complete as far as it can ever be — it is kept, never cut.
//!
//! ```
//! use front::sessions::journal::{Entry, Journal};
//! let dir = tempfile::tempdir().unwrap();
//! let mut j = Journal::open(dir.path());
//! j.append(&Entry::Job { id: 1, cmd: "true".into() });
//! assert_eq!(front::sessions::journal::read(dir.path()).len(), 1);
//! ```

use crate::sessions::sandbox::SandboxRequest;
use serde::{Deserialize, Serialize};
use shm_proto::control::SessionLimits;
use shm_proto::msg::Event;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// A session's settings, as a restarted front needs them.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Meta {
    pub owner_uid: u32,
    pub cwd: String,
    pub env: Vec<(String, String)>,
    pub persistent: bool,
    /// What a new worker for the session is started with (absent in older files: not revivable).
    #[serde(default)]
    pub reopen: Option<crate::sessions::journal::Reopen>,
    /// The front (boot id) and serial the session's database rows are kept under (absent in older files).
    #[serde(default)]
    pub db_key: Option<(String, u64)>,
}

/// One journal entry.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub enum Entry {
    /// A job was submitted.
    Job { id: u64, cmd: String },
    /// The frames between ring positions `from` and `to`: every event but output, and each job log's
    /// length before the batch's output was written.
    Batch { from: u64, to: u64, before: Vec<(u64, u64)>, events: Vec<Event> },
    /// The session's worker died and a new one took over (with a new region): jobs up to `last_job`
    /// that had not ended are lost with `note`, and the batches before this entry were of the old ring.
    Revived { note: String, last_job: u64 },
    /// The entries after this one were written while the session read the event ring `id` (the kernel's
    /// inode number of the region's memfd: unique among live regions and out of the worker's reach).
    /// Written when a front attaches a ring (open, revival, takeover) before any batch of it, so a
    /// front that died between the supervisor starting a new worker and the journal hearing of it
    /// leaves batches that a restarted front can tell apart from the new ring's.
    Ring { id: u64 },
    /// Job `job` was admitted under an idempotency key: its receipt (JSON, opaque to the journal; see
    /// `kernel::receipts`). Appended before the worker hears of the job, so a front killed at any point
    /// after that leaves the key bound to the job, and the restarted front rebuilds the receipt from
    /// here even when the database never got its row (the database writer commits after the answer).
    Keyed { job: u64, receipt: String },
    /// These jobs' ends were shown to the client (a final result or an announcement), so a restarted
    /// front does not announce them again. Appended by the recorder after the answer, so a front killed
    /// between an answer and its record announces that one job once more.
    Reported { jobs: Vec<u64> },
    /// A job's capture changed the session's shell-state record: its new version, the items set (new or
    /// changed) and those removed, against the record as the journal's earlier `State` entries leave it
    /// (empty before the first). Appended when the capture is applied (the pump, after the batch that
    /// carried it), so a restarted front carries the state on instead of starting it afresh (a rebuilt
    /// job has no base to diff a replayed capture against). A `cd` appends its two items, not the record.
    State { version: u64, set: Vec<(String, Vec<u8>)>, removed: Vec<String> },
    /// [`Entry::Revived`] with the wall-clock time the jobs were lost (state format 3): a rebuild marks
    /// them lost then, not at its own time (a lost job's duration grew at every restart).
    RevivedAt { note: String, last_job: u64, at_unix_ns: u64 },
}

/// The journal file of one session (appends only; a failure is reported once and journaling stops).
#[derive(Debug, Default)]
pub struct Journal {
    file: Option<File>,
    buf: Vec<u8>,
}

impl Journal {
    /// Open (append to) `<dir>/journal`.
    pub fn open(dir: &Path) -> Journal {
        let path = dir.join("journal");
        match OpenOptions::new().create(true).append(true).mode(0o600).open(&path) {
            Ok(f) => Journal { file: Some(f), buf: Vec::new() },
            Err(e) => {
                tracing::warn!("cannot open {}: {e}; this session cannot be recovered", path.display());
                Journal::default()
            }
        }
    }

    /// Append one entry (one `write`).
    pub fn append(&mut self, entry: &Entry) {
        let Some(file) = self.file.as_mut() else { return };
        self.buf.clear();
        self.buf.extend_from_slice(&[0; 4]);
        let body = match postcard::to_extend(entry, std::mem::take(&mut self.buf)) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!("a journal entry could not be encoded: {e}");
                return;
            }
        };
        self.buf = body;
        let len = (self.buf.len() - 4) as u32;
        self.buf[..4].copy_from_slice(&len.to_le_bytes());
        if let Err(e) = file.write_all(&self.buf) {
            tracing::warn!("writing the session journal failed: {e}; this session cannot be recovered");
            self.file = None;
        }
    }
}

/// Write `<dir>/session.json`, whole or not at all: into `session.json.new`, then renamed over it, so a
/// front killed mid-write (the crash recovery reads this file) leaves the previous settings, never a
/// truncated file.
pub fn write_meta(dir: &Path, meta: &Meta) -> std::io::Result<()> {
    let json = serde_json::to_vec(meta).map_err(std::io::Error::other)?;
    let new = dir.join("session.json.new");
    std::fs::write(&new, json)?;
    std::fs::rename(&new, dir.join("session.json"))
}

/// Read `<dir>/session.json`.
pub fn read_meta(dir: &Path) -> std::io::Result<Meta> {
    let bytes = std::fs::read(dir.join("session.json"))?;
    serde_json::from_slice(&bytes).map_err(std::io::Error::other)
}

/// Every whole entry of `<dir>/journal`, in order (a torn or undecodable tail ends the list).
pub fn read(dir: &Path) -> Vec<Entry> {
    let mut bytes = Vec::new();
    if File::open(dir.join("journal")).and_then(|mut f| f.read_to_end(&mut bytes)).is_err() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut at = 0;
    while at + 4 <= bytes.len() {
        let len = u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]) as usize;
        let Some(body) = bytes.get(at + 4..at + 4 + len) else { break };
        match postcard::from_bytes(body) {
            Ok(e) => out.push(e),
            Err(_) => break,
        }
        at += 4 + len;
    }
    out
}

/// What a session's worker is started with, kept so a new one can be started alike.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reopen {
    pub sandbox: SandboxRequest,
    pub limits: SessionLimits,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn settings_are_replaced_whole_and_a_torn_earlier_write_does_not_matter() {
        let dir = tempfile::tempdir().unwrap();
        let meta = |cwd: &str| Meta {
            owner_uid: 1000,
            cwd: cwd.into(),
            env: Vec::new(),
            persistent: false,
            reopen: None,
            db_key: None,
        };
        write_meta(dir.path(), &meta("/first")).unwrap();
        // What a front killed in the middle of a write leaves: a torn temporary file, the old settings whole.
        std::fs::write(dir.path().join("session.json.new"), b"{\"owner_uid\": 10").unwrap();
        assert_eq!(read_meta(dir.path()).unwrap().cwd, "/first");
        write_meta(dir.path(), &meta("/second")).unwrap();
        assert_eq!(read_meta(dir.path()).unwrap().cwd, "/second");
        assert!(!dir.path().join("session.json.new").exists(), "the temporary file is renamed, not left");
    }

    #[test]
    fn entries_round_trip_and_a_torn_tail_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path());
        j.append(&Entry::Job { id: 1, cmd: "echo".into() });
        let ev = Event::StreamsClosed { job: 1 };
        j.append(&Entry::Batch { from: 0, to: 64, before: vec![(1, 0)], events: vec![ev] });
        let mut f = OpenOptions::new().append(true).open(dir.path().join("journal")).unwrap();
        f.write_all(&[200, 0, 0, 0, 1, 2]).unwrap();
        let got = read(dir.path());
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], Entry::Job { id: 1, cmd: "echo".into() });
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("journal"), &bytes).unwrap();
            let _ = read(dir.path());
        }
    }
}
