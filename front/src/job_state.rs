//! A job's part in the session's shell state: the snapshot it started from, and what its capture did.
//!
//! ```
//! use front::job_state::JobShellState;
//! let mut s = JobShellState::default();
//! s.unknown("the command did not return to the shell");
//! assert!(s.note.unwrap().starts_with("state unknown after this call; carrying the previous state"));
//! ```

use crate::results::StateVersions;
use crate::state_capture::{parse, Items};
use crate::state_record::StateRecord;
use std::sync::Arc;

/// The shell-state facts of one job.
#[derive(Debug, Default)]
pub struct JobShellState {
    /// The version and items the job started from (`None`: the job carried no state).
    pub base: Option<(u64, Arc<Items>)>,
    /// Set when the state after the job is unknown.
    pub note: Option<String>,
    pub changes: Vec<String>,
    /// The record's version once the job's changes applied.
    pub to: Option<u64>,
    /// The job ran in the persistent shell: commands run one at a time there and the shell carries the
    /// state itself, so the capture is diffed against the record as it is when the capture arrives.
    pub persistent: bool,
}

impl JobShellState {
    /// Apply a capture; a capture that does not parse leaves the state unknown.
    pub fn captured(&mut self, data: &[u8], record: &mut StateRecord) {
        let Some((mut from, mut base)) = self.base.take() else { return };
        if self.persistent {
            (from, base) = record.snapshot();
        }
        match parse(data) {
            Ok(items) => {
                let applied = record.apply(from, &base, items);
                self.changes = applied.changes;
                if !applied.conflicts.is_empty() {
                    self.changes.push(format!(
                        "conflict: {} also changed by a job that ended after this one started; this call's value wins",
                        applied.conflicts.join(", ")
                    ));
                }
                self.to = Some(applied.version);
            }
            Err(e) => self.unknown(&format!("the capture could not be read: {e}")),
        }
        self.base = Some((from, base));
    }

    /// The state after the job is unknown; the record is unchanged.
    pub fn unknown(&mut self, reason: &str) {
        if self.base.is_some() && self.to.is_none() && self.note.is_none() {
            self.note = Some(format!("state unknown after this call; carrying the previous state ({reason})"));
        }
    }

    pub fn versions(&self) -> Option<StateVersions> {
        self.base.as_ref().map(|(from, _)| StateVersions { from: *from, to: self.to })
    }
}
