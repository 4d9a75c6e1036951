//! A job's part in the session's shell state: the snapshot it started from, and what its capture did.
//!
//! ```
//! use front::jobs::shell_part::JobShellState;
//! let mut s = JobShellState { base: Some((0, Default::default())), ..Default::default() };
//! s.unknown("the command did not return to the shell");
//! assert!(s.note.unwrap().starts_with("state unknown after this call; carrying the previous state"));
//! ```

use crate::rpc::results::StateVersions;
use crate::shell::record::StateRecord;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use shm_proto::capture::{parse_capture, Capture, Items};
use std::sync::Arc;

/// `#[serde(with)]` for [`JobShellState::base`]: its version only.
mod base_version {
    use super::*;
    pub fn serialize<S: Serializer>(b: &Option<(u64, Arc<Items>)>, s: S) -> Result<S::Ok, S::Error> {
        b.as_ref().map(|(v, _)| *v).serialize(s)
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<(u64, Arc<Items>)>, D::Error> {
        Option::<u64>::deserialize(d).map(|o| o.map(|v| (v, Arc::default())))
    }
}

/// The shell-state facts of one job.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct JobShellState {
    /// The version and items the job started from (`None`: the job carried no state). A job's record
    /// read back from disk keeps the version only: the items served its capture, which came before.
    #[serde(with = "base_version")]
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
    /// The variables the job's capture was scoped to (`RunSpec::capture_only`), `None` for the full one.
    pub scope: Option<Vec<String>>,
    /// The commands the capture said failed while the job ran, with their status.
    pub failures: Vec<(i32, String)>,
}

impl JobShellState {
    /// An estimate of the heap bytes held (the shared base snapshot is not counted).
    pub fn held_bytes(&self) -> usize {
        use std::mem::size_of;
        let strings =
            |v: &Vec<String>| v.capacity() * size_of::<String>() + v.iter().map(String::capacity).sum::<usize>();
        self.note.as_ref().map_or(0, String::capacity)
            + strings(&self.changes)
            + strings(&self.conflicts)
            + self.scope.as_ref().map_or(0, strings)
            + self.failures.capacity() * size_of::<(i32, String)>()
            + self.failures.iter().map(|f| f.1.capacity()).sum::<usize>()
    }

    /// Apply the capture of `job`; a capture that does not parse leaves the state unknown. Returns the
    /// earlier jobs whose changes this one overrode, with the items.
    pub fn captured(&mut self, data: &[u8], record: &mut StateRecord, job: u64) -> Vec<(u64, String)> {
        let Some((mut from, mut base)) = self.base.take() else {
            // A job a restarted front rebuilt: what it started from died with the old front, so there is
            // nothing to diff its capture against. Said, not dropped silently.
            if self.note.is_none() {
                self.note = Some(
                    "state unknown after this call; carrying the previous state (heddle's front restarted while \
                     the job ran, so what it changed in the shell state could not be applied)"
                        .to_owned(),
                );
            }
            return Vec::new();
        };
        if self.persistent {
            (from, base) = record.snapshot();
        }
        let mut overridden = Vec::new();
        let parsed = parse_capture(data).map(|mut c| {
            self.failures = std::mem::take(&mut c.failures);
            c
        });
        match parsed.map_err(|e| e.to_string()).and_then(|c| self.whole(c, &base)) {
            Ok(mut items) => {
                crate::shell::record::expand_carried_aliases(&mut items);
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
            Err(e) => {
                self.base = Some((from, base));
                self.unknown(&format!("the capture could not be read: {e}"));
                return overridden;
            }
        }
        self.base = Some((from, base));
        overridden
    }

    /// The whole state after the job: a full capture as it is; a scoped one (which must be of the variables
    /// asked for) on top of the items it does not cover, which the command could not change.
    fn whole(&self, c: Capture, base: &Items) -> Result<Items, String> {
        let Some(names) = c.scope else { return Ok(c.items) };
        let asked = crate::shell::scope::listed(self.scope.as_deref().unwrap_or_default());
        if self.scope.is_none() || names != asked {
            return Err(format!("it lists the variables {names:?}, not the {asked:?} this call asked for"));
        }
        let covered = |k: &str| {
            matches!(k, "cwd" | "dirstack" | "umask")
                || k.starts_with("set:")
                || k.starts_with("shopt:")
                || k.strip_prefix("var:").is_some_and(|n| names.iter().any(|m| m == n))
        };
        let mut items: Items = base.iter().filter(|(k, _)| !covered(k)).map(|(k, v)| (k.clone(), v.clone())).collect();
        items.extend(c.items);
        Ok(items)
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
            // With `set -e` carried, any failing command ends the call before its capture: say that the
            // session has it on, and how to turn it off, or every later failure drops its `cd`s silently.
            let errexit = self.base.as_ref().is_some_and(|(_, b)| b.get("set:errexit").is_some_and(|v| v == b"-"));
            let errexit = match errexit {
                true => {
                    "; `set -e` is on in this session, so a failing command ends a call before its state is \
                         kept: what it changed (cd, export…) is dropped; `set +e` turns it off"
                }
                false => "",
            };
            self.note = Some(format!("state unknown after this call; carrying the previous state ({reason}){errexit}"));
        }
    }

    pub fn versions(&self) -> Option<StateVersions> {
        self.base.as_ref().map(|(from, _)| StateVersions { from: *from, to: self.to })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REST: &[u8] = b"\0D\0\0S\0\0\0\0U\x000022\n\0P\0/w\n\0E\0";

    fn recorded() -> StateRecord {
        let mut record = StateRecord::default();
        let (v, base) = record.snapshot();
        let mut first = (*base).clone();
        for (k, v) in
            [("var:A", "declare -- A=\"1\""), ("var:X", "declare -- X=\"1\""), ("func:f", "f () \n{ \n    :\n}")]
        {
            first.insert(k.into(), v.as_bytes().to_vec());
        }
        record.apply(v, &base, first, 1);
        record
    }

    #[test]
    fn a_scoped_capture_changes_its_variables_and_keeps_every_other_item() {
        let mut record = recorded();
        let mut s =
            JobShellState { base: Some(record.snapshot()), scope: Some(vec!["X".into()]), ..Default::default() };
        let cap = [&b"\0O\0\0\0N\0OLDPWD\0X\0\0W\0declare -- X=\"2\"\n"[..], REST].concat();
        s.captured(&cap, &mut record, 2);
        assert!(s.note.is_none(), "{:?}", s.note);
        assert_eq!(record.items()["var:X"], b"declare -- X=\"2\"");
        assert!(record.items().contains_key("var:A") && record.items().contains_key("func:f"));
        assert_eq!(record.items()["cwd"], b"/w");
    }

    #[test]
    fn a_capture_of_other_variables_or_one_that_does_not_parse_gives_the_note_and_keeps_the_record() {
        let cap = [&b"\0O\0\0\0N\0OLDPWD\0A\0\0W\0declare -- A=\"2\"\n"[..], REST].concat();
        for (scope, data) in [(Some(vec!["X".to_owned()]), &cap[..]), (None, &cap[..]), (None, b"\0O\0garbage")] {
            let mut record = recorded();
            let mut s = JobShellState { base: Some(record.snapshot()), scope, ..Default::default() };
            s.captured(data, &mut record, 2);
            assert!(s.note.as_deref().is_some_and(|n| n.contains("the capture could not be read")), "{:?}", s.note);
            assert_eq!((record.version(), &record.items()["var:A"][..]), (1, &b"declare -- A=\"1\""[..]));
        }
    }
}
