//! A job's part in the session's shell state: the snapshot it started from, and what its capture did.
//!
//! ```
//! use front::job_state::JobShellState;
//! let mut s = JobShellState { base: Some((0, Default::default())), ..Default::default() };
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
    /// Later completions that overrode what this job changed (`conflict: cwd changed by job 7 …`).
    pub conflicts: Vec<String>,
    /// A conflict was added after this job's end was reported: the session's next response says so.
    pub conflict_unannounced: bool,
}

impl JobShellState {
    /// Apply the capture of `job`; a capture that does not parse leaves the state unknown. Returns the
    /// earlier jobs whose changes this one overrode, with the items.
    pub fn captured(&mut self, data: &[u8], record: &mut StateRecord, job: u64) -> Vec<(u64, String)> {
        let Some((mut from, mut base)) = self.base.take() else { return Vec::new() };
        if self.persistent {
            (from, base) = record.snapshot();
        }
        let mut overridden = Vec::new();
        match parse(data) {
            Ok(items) => {
                let applied = record.apply(from, &base, items, job);
                overridden = applied.overridden;
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
        overridden
    }

    /// A later job (`by`) overrode `items` this job had changed: its result and the session's next
    /// response say so.
    pub fn overridden(&mut self, by: u64, items: &[String]) {
        self.conflicts.push(format!(
            "conflict: {} changed again by job {by}, which started before this call ended and ended after it; job {by}'s value is the session's now",
            items.join(", ")
        ));
        self.conflict_unannounced = true;
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
