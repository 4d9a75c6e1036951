//! A uid of its own for every root-opened session, like systemd's dynamic users: taken from a configured
//! range (`--session-uids FIRST-LAST`), skipping every uid or gid the user and group databases name and
//! every range in `/etc/subuid` and `/etc/subgid`; its gid is the same number. A session holds its uid
//! from open to close, across its worker's death and revival (opened again under the same id); a job kept out of it (`keep`) holds it on until `kept.kill`. A uid no one holds
//! is free, and the caller removes what heddle made for it (its home).
//!
//! The holders are recorded in `<state-dir>/session-uids` (root's, 0600, replaced by rename), so a
//! restarted supervisor knows which uids its adopted kept jobs still hold and frees the rest. The state
//! directory belongs to the front's uid, so the record is read only when it is a regular file owned by
//! root, and never written through a link; a record the front removed or replaced costs at most a uid
//! handed out again while an adopted kept job still runs as it (logged when seen).
//!
//! Invariants: a uid is never held by two sessions; a uid in use by a kept job is not handed out.
//!
//! ```
//! use supervisor::session_uids::{Holder, UidPool};
//! let mut pool = UidPool::new(1_879_048_192..=1_879_048_200, None);
//! let a = pool.allocate("a", |_| false).unwrap();
//! let b = pool.allocate("b", |_| false).unwrap();
//! assert_ne!(a, b);
//! pool.hold(a, Holder::Kept("web".into()));
//! assert_eq!(pool.release(&Holder::Session("a".into())), None, "the kept job still holds it");
//! assert_eq!(pool.release(&Holder::Kept("web".into())), Some(a));
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Write};
use std::ops::RangeInclusive;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The suggested range (`--session-uids` has no default: the pool is off unless given one): the 65,536 uids right after systemd's container range (which ends at
/// 0x6FFFFFFF), below the upper half (`>= 2^31`) that some tools mishandle, clear of systemd's dynamic
/// users (61184–65519) and of its foreign and transient ranges.
pub const DEFAULT_RANGE: RangeInclusive<u32> = 0x7000_0000..=0x7000_FFFF;

/// The record's file name in the state directory.
pub const RECORD: &str = "session-uids";

/// What holds a uid.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Holder {
    /// An open session, by id.
    Session(String),
    /// A kept job, by name.
    Kept(String),
}

impl Holder {
    fn text(&self) -> String {
        match self {
            Holder::Session(id) => format!("session {id}"),
            Holder::Kept(name) => format!("kept {name}"),
        }
    }
}

/// Why no uid could be given.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UidError {
    #[error("every uid of the session range {0}-{1} is in use or named by the user database; end sessions or kept jobs, or start heddle with a larger --session-uids")]
    Exhausted(u32, u32),
    #[error("--session-uids {0:?} is not FIRST-LAST with 0 < FIRST <= LAST < 4294967295")]
    BadRange(String),
}

/// Parse `--session-uids FIRST-LAST`.
pub fn parse_range(text: &str) -> Result<RangeInclusive<u32>, UidError> {
    let bad = || UidError::BadRange(text.to_owned());
    let (a, b) = text.split_once('-').ok_or_else(bad)?;
    let (a, b): (u32, u32) = (a.trim().parse().map_err(|_| bad())?, b.trim().parse().map_err(|_| bad())?);
    if a == 0 || a > b || b == u32::MAX {
        return Err(bad());
    }
    Ok(a..=b)
}

/// The uids of `range` and who holds them.
#[derive(Debug)]
pub struct UidPool {
    range: RangeInclusive<u32>,
    held: BTreeMap<u32, BTreeSet<Holder>>,
    /// Where the record goes (`None`: not recorded, as in unit tests).
    record: Option<PathBuf>,
}

impl UidPool {
    pub fn new(range: RangeInclusive<u32>, record: Option<PathBuf>) -> UidPool {
        UidPool { range, held: BTreeMap::new(), record }
    }

    /// The range uids are taken from.
    pub fn range(&self) -> &RangeInclusive<u32> {
        &self.range
    }

    /// True when `uid` is one of this pool's.
    pub fn contains(&self, uid: u32) -> bool {
        self.range.contains(&uid)
    }

    /// The lowest free uid of the range that `taken` (the user and group databases, subordinate ranges)
    /// does not name, now held by session `id`; or the uid `id` still holds (its worker died and the
    /// front opens it again: its files stay its own).
    pub fn allocate(&mut self, id: &str, taken: impl Fn(u32) -> bool) -> Result<u32, UidError> {
        if let Some(uid) = self.uid_of(&Holder::Session(id.to_owned())) {
            return Ok(uid);
        }
        let uid = self
            .range
            .clone()
            .find(|u| !self.held.contains_key(u) && !taken(*u))
            .ok_or(UidError::Exhausted(*self.range.start(), *self.range.end()))?;
        self.hold(uid, Holder::Session(id.to_owned()));
        Ok(uid)
    }

    /// Record `holder` as holding `uid` too (a kept job of the session that holds it).
    pub fn hold(&mut self, uid: u32, holder: Holder) {
        self.held.entry(uid).or_default().insert(holder);
        self.save();
    }

    /// The uid `holder` holds, if any.
    pub fn uid_of(&self, holder: &Holder) -> Option<u32> {
        self.held.iter().find(|(_, hs)| hs.contains(holder)).map(|(u, _)| *u)
    }

    /// `holder` lets go of its uid; returns the uid when no one holds it any more (it is free: the
    /// caller removes what heddle made for it).
    pub fn release(&mut self, holder: &Holder) -> Option<u32> {
        let uid = self.uid_of(holder)?;
        let hs = self.held.get_mut(&uid)?;
        hs.remove(holder);
        let freed = hs.is_empty();
        if freed {
            self.held.remove(&uid);
        }
        self.save();
        freed.then_some(uid)
    }

    /// Every uid held, with its holders.
    pub fn held(&self) -> impl Iterator<Item = (u32, &BTreeSet<Holder>)> {
        self.held.iter().map(|(u, h)| (*u, h))
    }

    /// After a restart: read the record, keep the kept jobs that were adopted (`kept`) and the uids they
    /// hold, and drop every other holder (their sessions ended with the earlier run). Also holds the uid
    /// of any adopted kept job whose processes run as a uid of the range but which the record missed.
    pub fn restore(&mut self, kept: &BTreeMap<String, Option<u32>>) {
        let recorded = self.record.as_deref().map(read_record).unwrap_or_default();
        self.held.clear();
        for (uid, holder) in recorded {
            if let Holder::Kept(name) = &holder {
                if self.range.contains(&uid) && kept.contains_key(name) {
                    self.held.entry(uid).or_default().insert(holder);
                }
            }
        }
        for (name, uid) in kept {
            let Some(uid) = *uid else { continue };
            let holder = Holder::Kept(name.clone());
            if self.range.contains(&uid) && self.uid_of(&holder).is_none() {
                tracing::info!("kept job {name:?} runs as uid {uid}, which the record missed; held");
                self.held.entry(uid).or_default().insert(holder);
            }
        }
        self.save();
    }

    /// Write the record: one `UID session|kept NAME` line per holder.
    fn save(&self) {
        let Some(path) = &self.record else { return };
        let text: String =
            self.held.iter().flat_map(|(u, hs)| hs.iter().map(move |h| format!("{u} {}\n", h.text()))).collect();
        if let Err(e) = write_record(path, &text) {
            tracing::warn!("could not record the session uids in {}: {e}", path.display());
        }
    }
}

/// Replace `path` with `text`: a new 0600 file beside it (never through a link), renamed over it.
fn write_record(path: &Path, text: &str) -> io::Result<()> {
    let tmp = path.with_file_name(format!(".{RECORD}.tmp"));
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// The record's holders; a missing file, a link, a file root does not own or unreadable lines give
/// nothing (logged).
fn read_record(path: &Path) -> Vec<(u32, Holder)> {
    let f = match std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            tracing::warn!("cannot read the session uid record {}: {e}", path.display());
            return Vec::new();
        }
    };
    match f.metadata() {
        Ok(m) if m.is_file() && m.uid() == 0 => {}
        _ => {
            tracing::warn!("ignoring {}: not a regular file owned by root", path.display());
            return Vec::new();
        }
    }
    let mut text = String::new();
    if io::Read::read_to_string(&mut io::Read::take(f, 1 << 20), &mut text).is_err() {
        return Vec::new();
    }
    parse_record(&text)
}

/// Parse the record's lines; a line that is not `UID session|kept NAME` with a valid name is skipped.
pub fn parse_record(text: &str) -> Vec<(u32, Holder)> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split(' ');
            let uid: u32 = words.next()?.parse().ok()?;
            let kind = words.next()?;
            let name = words.next()?;
            if words.next().is_some() || crate::session::validate_id(name).is_err() {
                return None;
            }
            match kind {
                "session" => Some((uid, Holder::Session(name.to_owned()))),
                "kept" => Some((uid, Holder::Kept(name.to_owned()))),
                _ => None,
            }
        })
        .collect()
}

/// The user a session's uid runs as: gid the same number, no passwd entry (so no home of its own:
/// heddle makes one, removed when the uid is freed).
pub fn session_user(uid: u32) -> crate::users::UserInfo {
    crate::users::UserInfo { uid, gid: uid, name: format!("heddle-{uid}"), home: PathBuf::from("/") }
}

/// True when the user or group database names `id`, or a subordinate id range (`/etc/subuid`,
/// `/etc/subgid`) covers it: such a uid is someone's, and never handed to a session.
pub fn named_elsewhere(id: u32, subordinate: &[RangeInclusive<u32>]) -> bool {
    use nix::unistd::{Gid, Group, Uid, User};
    !matches!(User::from_uid(Uid::from_raw(id)), Ok(None))
        || !matches!(Group::from_gid(Gid::from_raw(id)), Ok(None))
        || subordinate.iter().any(|r| r.contains(&id))
}

/// The ranges of `/etc/subuid` and `/etc/subgid` (`name:first:count` lines; others skipped).
pub fn subordinate_ranges() -> Vec<RangeInclusive<u32>> {
    ["/etc/subuid", "/etc/subgid"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .flat_map(|t| parse_subordinate(&t))
        .collect()
}

/// The ranges of a `/etc/subuid`-style text.
pub fn parse_subordinate(text: &str) -> Vec<RangeInclusive<u32>> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.trim().split(':');
            let (_, first, count) = (f.next()?, f.next()?.parse::<u32>().ok()?, f.next()?.parse::<u32>().ok()?);
            (count > 0).then(|| first..=first.saturating_add(count - 1))
        })
        .collect()
}

/// Remove the homes heddle made (`<homes>/<uid>`) for uids of `pool`'s range that no one holds: their
/// sessions ended with an earlier run. Homes of uids outside the range (`--worker-user`, clients' own
/// uids) are left alone.
pub fn remove_free_homes(homes: &Path, pool: &UidPool) {
    let held: BTreeSet<u32> = pool.held().map(|(u, _)| u).collect();
    for entry in std::fs::read_dir(homes).into_iter().flatten().flatten() {
        let Some(uid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        if !pool.contains(uid) || held.contains(&uid) {
            continue;
        }
        let path = entry.path();
        let gone = match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(&path),
            _ => std::fs::remove_file(&path),
        };
        if let Err(e) = gone {
            tracing::warn!("could not remove the home {} of a freed uid: {e}", path.display());
        }
    }
}

/// The uid of the processes in a kept job's cgroup (the first one's; they all ran as the session's).
pub fn kept_uid(dir: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(dir.join("cgroup.procs")).ok()?;
    text.lines()
        .filter_map(|l| l.trim().parse::<u32>().ok())
        .find_map(|pid| std::fs::metadata(format!("/proc/{pid}")).ok().map(|m| m.uid()).filter(|u| *u != 0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn allocation_skips_held_and_named_uids_and_runs_out_with_a_sentence() {
        let mut p = UidPool::new(100..=103, None);
        assert_eq!(p.allocate("a", |u| u == 100).unwrap(), 101);
        assert_eq!(p.allocate("b", |_| false).unwrap(), 100);
        assert_eq!(p.allocate("c", |_| false).unwrap(), 102);
        assert_eq!(p.allocate("d", |_| false).unwrap(), 103);
        let e = p.allocate("e", |_| false).unwrap_err().to_string();
        assert!(e.contains("100-103") && e.contains("--session-uids"), "{e}");
        assert_eq!(p.release(&Holder::Session("b".into())), Some(100));
        assert_eq!(p.allocate("e", |_| false).unwrap(), 100, "a freed uid is given again");
        assert_eq!(p.allocate("a", |_| false).unwrap(), 101, "a session opened again keeps its uid");
    }

    #[test]
    fn a_kept_job_holds_its_uid_past_its_session_and_across_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let record = dir.path().join(RECORD);
        let mut p = UidPool::new(100..=199, Some(record.clone()));
        let a = p.allocate("a", |_| false).unwrap();
        let b = p.allocate("b", |_| false).unwrap();
        p.hold(a, Holder::Kept("web".into()));
        p.hold(a, Holder::Kept("gone".into()));
        assert_eq!(
            std::fs::read_to_string(&record).unwrap(),
            "100 session a\n100 kept gone\n100 kept web\n101 session b\n"
        );
        // A new supervisor: sessions a and b ended with the old one; only "web" was adopted.
        let mut q = UidPool::new(100..=199, Some(record.clone()));
        q.restore(&[("web".to_owned(), None)].into());
        assert_eq!(q.held().map(|(u, _)| u).collect::<Vec<_>>(), vec![a]);
        assert_eq!(q.allocate("c", |_| false).unwrap(), b, "b's uid was freed by the restart");
        assert_eq!(q.release(&Holder::Kept("web".into())), Some(a));
    }

    #[test]
    fn a_kept_job_the_record_missed_is_found_by_its_processes_uid() {
        let mut p = UidPool::new(100..=199, None);
        p.restore(&[("k".to_owned(), Some(150)), ("outside".to_owned(), Some(5))].into());
        assert_eq!(p.held().map(|(u, _)| u).collect::<Vec<_>>(), vec![150]);
    }

    #[test]
    fn a_record_that_is_a_link_or_not_roots_is_not_read_nor_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, "100 kept web\n").unwrap();
        let record = dir.path().join(RECORD);
        std::os::unix::fs::symlink(&target, &record).unwrap();
        assert!(read_record(&record).is_empty());
        std::os::unix::fs::symlink(&target, dir.path().join(format!(".{RECORD}.tmp"))).unwrap();
        let mut p = UidPool::new(100..=199, Some(record.clone()));
        p.allocate("a", |_| false).unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "100 kept web\n", "the link's target is untouched");
        assert!(!record.is_symlink(), "the link was replaced by the record");
    }

    #[test]
    fn ranges_parse_and_bad_ones_say_what_is_wrong() {
        assert_eq!(parse_range("10-20").unwrap(), 10..=20);
        for bad in ["", "10", "0-5", "20-10", "a-b", "1-4294967295", "-5"] {
            assert!(parse_range(bad).unwrap_err().to_string().contains("FIRST-LAST"), "{bad}");
        }
        assert_eq!(parse_subordinate("u:100000:65536\nbad\nv:5:0\n"), vec![100000..=165535]);
    }

    proptest! {
        #[test]
        fn garbage_records_parse_without_panicking(text in ".{0,400}") {
            for (_, h) in parse_record(&text) {
                let (Holder::Session(n) | Holder::Kept(n)) = h;
                prop_assert!(crate::session::validate_id(&n).is_ok());
            }
            let _ = parse_subordinate(&text);
        }
    }
}
