//! A job's output files, made ahead of the job.
//!
//! Creating `<id>.log` and `<id>.lines` allocates two inodes: 30–100 µs each on the development
//! machines' ext4 after a pause, several hundred µs while a fresh file system is still initialising
//! its inode tables. `run` paid that between the request and the worker, under the session's lock
//! (which the pump also takes). Instead the `job-files` thread makes the next job's pair while the
//! session waits for its next call ([`crate::sessions::files_ahead::Maker::ahead`], asked at `session.open` and after the answer to
//! each call naming the session is written, so the making never competes with a job for a CPU while
//! its client waits), and `SessionData::add_job` takes the pair when it was made for the id it hands out;
//! otherwise (calls back to back, or a front that just took the session over) the job makes its files
//! itself, as before.
//!
//! Invariants: a pair is taken only while its paths still lead to it (the views read output by path; a
//! pair removed, or hidden by a file system mounted over the directory, since it was made is given up
//! and the job makes its files); the thread opens without truncating (a request may race a job that made the same files
//! itself, and must never cut its output); it hands a pair over only while the session's next id is
//! still the one it was made for, checked under the session's lock, and empties a pair that holds bytes
//! (a leftover of an earlier front) then, before any job can have it. The pair a closing session holds
//! is removed by `session.close`, under the session's lock, before the name can be opened again; one
//! still being made when the session closes is left, empty, as is the pair of a front that stops, and
//! the next job of that id (of a session reopened under the name, or of the next front) takes it over.
//!
//! ```
//! use front::jobs::files::{Ahead, JobFiles};
//! let dir = tempfile::tempdir().unwrap();
//! let files = JobFiles::open(&dir.path().join("7.log"), 7).unwrap();
//! let mut ahead = Ahead::Ready(files);
//! assert!(ahead.take_for(8).is_none(), "made for another id");
//! assert!(matches!(ahead, Ahead::None));
//! ```

use shm_proto::msg::JobId;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// One job's two output files, empty and open.
#[derive(Debug)]
pub struct JobFiles {
    pub id: JobId,
    /// `<id>.log`; the line log is beside it (`<id>.lines`).
    pub log_path: PathBuf,
    pub log: File,
    pub lines: File,
}

impl JobFiles {
    /// Open (creating, never truncating) the pair for job `id` at `log_path` and beside it.
    pub fn open(log_path: &Path, id: JobId) -> std::io::Result<JobFiles> {
        let open =
            |p: &Path| OpenOptions::new().create(true).truncate(false).read(true).write(true).mode(0o600).open(p);
        let log = open(log_path)?;
        let lines = open(&log_path.with_extension("lines"))?;
        Ok(JobFiles { id, log_path: log_path.to_owned(), log, lines })
    }

    /// True when both files are still the ones their paths name: the views read a job's output by path,
    /// so a pair that was removed, or hidden by a file system mounted over the directory, since it was
    /// made must not be written.
    fn in_place(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        let same = |f: &File, p: &Path| match (f.metadata(), std::fs::metadata(p)) {
            (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
            _ => false,
        };
        same(&self.log, &self.log_path) && same(&self.lines, &self.log_path.with_extension("lines"))
    }

    /// True when either file holds bytes.
    pub(crate) fn dirty(&self) -> bool {
        [&self.log, &self.lines].iter().any(|f| f.metadata().is_ok_and(|m| m.len() > 0))
    }

    /// Remove both files (the pair was made for an id no job will take).
    pub fn remove(self) {
        let _ = std::fs::remove_file(self.log_path.with_extension("lines"));
        let _ = std::fs::remove_file(&self.log_path);
    }
}

/// What a session has of its next job's files.
#[derive(Debug, Default)]
pub enum Ahead {
    #[default]
    None,
    /// The `job-files` thread is making the pair for this id.
    Asked(JobId),
    Ready(JobFiles),
}

impl Ahead {
    /// The pair made for job `id`, if there is one and its paths still lead to it; whatever else was
    /// here is given up (a pair being made for `id` is dropped by the thread when it finds the id taken).
    pub fn take_for(&mut self, id: JobId) -> Option<JobFiles> {
        match std::mem::take(self) {
            Ahead::Ready(f) if f.id == id && f.in_place() => Some(f),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_pair_is_taken_only_for_its_own_id() {
        let dir = tempfile::tempdir().unwrap();
        let mut ahead = Ahead::Ready(JobFiles::open(&dir.path().join("3.log"), 3).unwrap());
        let f = ahead.take_for(3).expect("made for 3");
        assert_eq!((f.id, matches!(ahead, Ahead::None)), (3, true));
        assert!(dir.path().join("3.lines").exists());
        let mut asked = Ahead::Asked(4);
        assert!(asked.take_for(4).is_none(), "not made yet: the job makes its own");
    }

    #[test]
    fn a_pair_whose_paths_lead_elsewhere_is_given_up() {
        let dir = tempfile::tempdir().unwrap();
        let removed = JobFiles::open(&dir.path().join("1.log"), 1).unwrap();
        std::fs::remove_file(dir.path().join("1.lines")).unwrap();
        assert!(Ahead::Ready(removed).take_for(1).is_none(), "a removed file");
        let replaced = JobFiles::open(&dir.path().join("2.log"), 2).unwrap();
        std::fs::remove_file(dir.path().join("2.log")).unwrap();
        std::fs::write(dir.path().join("2.log"), b"").unwrap();
        assert!(Ahead::Ready(replaced).take_for(2).is_none(), "another file at the path");
        let kept = JobFiles::open(&dir.path().join("3.log"), 3).unwrap();
        assert!(Ahead::Ready(kept).take_for(3).is_some());
    }

    #[test]
    fn opening_never_truncates_and_removing_takes_both() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("5.log");
        std::fs::File::create(&log).unwrap().write_all(b"a job's bytes").unwrap();
        let f = JobFiles::open(&log, 5).unwrap();
        assert_eq!(std::fs::read(&log).unwrap(), b"a job's bytes", "a racing job's output is never cut");
        assert!(f.dirty());
        f.remove();
        assert!(!log.exists() && !dir.path().join("5.lines").exists());
    }
}
