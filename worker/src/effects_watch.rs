//! The effects ledger's watched part: what a job changed under the paths no git status covers — its
//! cwd when that is in no git work tree, and the session's writable roots that lie outside the job's
//! work tree (a root that contains the work tree is left to the project part).
//!
//! A [`Watch`] is an lstat of every entry under the roots, walked depth-first in sorted order (so the
//! walk's order is [`PathBuf`]'s), at most [`WATCH_LIMIT`] entries. A file whose ctime or mtime lies
//! within [`RACY`] of the walk is also hashed (its first [`HASH_BYTES`]): a write in the same clock
//! tick as the "before" can leave size and times equal, and the hash still tells. Directories count
//! for their existence only (their times move with every child).
//!
//! When a walk stops at the limit, only paths up to where both walks got are compared, and the part
//! says so (`confidence: "partial"`, with the limit and the last path compared).
//!
//! ```
//! let dir = tempfile::tempdir().unwrap();
//! std::fs::write(dir.path().join("a"), "1").unwrap();
//! let before = worker::effects_watch::Watch::take(&[dir.path().to_path_buf()], 100);
//! std::fs::write(dir.path().join("b"), "2").unwrap();
//! let after = worker::effects_watch::Watch::take(&[dir.path().to_path_buf()], 100);
//! let part = worker::effects_watch::compare(&before, &after);
//! assert_eq!(part.changed[0].change, "added");
//! ```

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use std::collections::BTreeMap;
use std::hash::Hasher;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use shm_proto::msg::{PathChange, WatchedEffects};

pub use shm_proto::msg::WATCH_LIMIT;

/// A file changed this close to a walk is hashed too.
pub const RACY: Duration = Duration::from_secs(2);
/// Bytes of one file hashed (beyond: stat only).
pub const HASH_BYTES: u64 = 1 << 20;
/// Paths listed in one part (the rest counted).
const MAX_LISTED: usize = 200;

/// One entry's identity: kind (`f`ile, `d`irectory, `l`ink, `o`ther), size, mtime, ctime (ns), inode,
/// mode; and a hash of its bytes when it was changed close to the walk.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Stat {
    kind: u8,
    size: u64,
    mtime: i128,
    ctime: i128,
    ino: u64,
    mode: u32,
}

/// Names shown per reason for directories that could not be listed; the rest are counted.
const UNLISTED_NAMED: usize = 3;

/// One reason per error kind for the directories the walks before and after the job could not list
/// (each directory once, though both walks usually meet it): `9 directories could not be listed
/// (permission denied): /tmp/a, /tmp/b, /tmp/c and 6 more`.
fn unlisted_reasons(before: &[(PathBuf, String)], after: &[(PathBuf, String)]) -> Vec<String> {
    let mut by_kind: BTreeMap<&str, std::collections::BTreeSet<&Path>> = BTreeMap::new();
    for (path, kind) in before.iter().chain(after) {
        by_kind.entry(kind.as_str()).or_default().insert(path.as_path());
    }
    by_kind
        .into_iter()
        .map(|(kind, paths)| {
            let n = paths.len();
            let named: Vec<String> = paths.iter().take(UNLISTED_NAMED).map(|p| p.display().to_string()).collect();
            let more = match n.saturating_sub(UNLISTED_NAMED) {
                0 => String::new(),
                m => format!(" and {m} more"),
            };
            let what = if n == 1 { "directory" } else { "directories" };
            format!("{n} {what} could not be listed ({kind}): {}{more}", named.join(", "))
        })
        .collect()
}

/// One entry of a walk: its path, its identity, and its content's hash when it changed near the walk.
type Entry = (PathBuf, Stat, Option<u64>);

/// The entries under the watched roots at one moment.
#[derive(Debug, Default)]
pub struct Watch {
    pub roots: Vec<PathBuf>,
    /// In walk order, which is [`path_cmp`]'s order (a depth-first walk of sorted siblings).
    entries: Vec<Entry>,
    /// The walk stopped at the limit after this path.
    stopped_after: Option<PathBuf>,
    /// Directories that could not be listed, with why (the error's kind, e.g. "permission denied").
    unlisted: Vec<(PathBuf, String)>,
    pub limit: usize,
    pub cost_us: u64,
}

impl Watch {
    /// Walk `roots` (nested ones are walked once), at most `limit` entries.
    pub fn take(roots: &[PathBuf], limit: usize) -> Watch {
        let started = std::time::Instant::now();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i128::try_from(d.as_nanos()).unwrap_or(i128::MAX));
        let outer = outer_roots(roots);
        let mut w = Watch { roots: outer.clone(), limit, ..Default::default() };
        'roots: for root in &outer {
            // Each path with the device of the directory that listed it (none for the root).
            let mut stack = vec![(root.clone(), None)];
            while let Some((p, parent_dev)) = stack.pop() {
                let Ok(m) = std::fs::symlink_metadata(&p) else { continue };
                if w.entries.len() >= limit {
                    w.stopped_after = w.entries.last().map(|e| e.0.clone());
                    break 'roots;
                }
                let stat = stat_of(&m);
                let racy = stat.kind == b'f'
                    && (now - stat.ctime.max(stat.mtime)) < i128::try_from(RACY.as_nanos()).unwrap_or(i128::MAX);
                let hash = racy.then(|| hash_of(&p)).flatten();
                // A kernel filesystem mounted below a root (`/proc` under `/`) is listed as a directory but
                // not walked: its files' times move by themselves, and no job's work is kept there.
                let is_dir = stat.kind == b'd' && !(parent_dev.is_some_and(|d| d != m.dev()) && kernel_fs(&p));
                if is_dir {
                    match std::fs::read_dir(&p) {
                        Ok(rd) => {
                            let mut kids: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
                            kids.sort_unstable_by(|a, b| path_cmp(a, b));
                            stack.extend(kids.into_iter().rev().map(|k| (k, Some(m.dev()))));
                        }
                        Err(e) => w.unlisted.push((p.clone(), e.kind().to_string())),
                    }
                }
                w.entries.push((p, stat, hash));
            }
        }
        w.cost_us = started.elapsed().as_micros() as u64;
        w
    }
}

/// How long roots whose walk stopped at the limit are not walked again ([`OverLimit`]).
pub const OVER_LIMIT_PAUSE: Duration = Duration::from_secs(300);

/// The watched roots whose last walk stopped at the limit (a session opened in `/` or a busy `/tmp`):
/// for [`OVER_LIMIT_PAUSE`] after that walk, jobs with the same roots are not walked before or after
/// (each pair of walks cost 50–250 ms there, for a comparison of an arbitrary first part in path
/// order), and their part says so with confidence `none`. A walk that fits under the limit, other
/// roots or the pause's end bring walking back.
#[derive(Debug, Default)]
pub struct OverLimit {
    /// The roots (as a walk names them), when their walk stopped, and the job it was for.
    last: Option<(Vec<PathBuf>, std::time::Instant, u64)>,
}

impl OverLimit {
    /// Remember what the walk `w` of job `job` found.
    pub fn note(&mut self, w: &Watch, job: u64) {
        if w.stopped_after.is_some() {
            self.last = Some((w.roots.clone(), std::time::Instant::now(), job));
        } else if self.last.as_ref().is_some_and(|(r, ..)| *r == w.roots) {
            self.last = None;
        }
    }

    /// The part for a job whose watched roots are `roots`, when they are not to be walked now.
    pub fn skipped(&self, roots: &[PathBuf], limit: usize) -> Option<WatchedEffects> {
        let (last, at, job) = self.last.as_ref()?;
        let roots = outer_roots(roots);
        if *last != roots || at.elapsed() >= OVER_LIMIT_PAUSE {
            return None;
        }
        let names = roots.iter().map(|r| r.display().to_string()).collect::<Vec<_>>().join(", ");
        Some(WatchedEffects {
            roots: roots.iter().map(|r| r.to_string_lossy().into_owned()).collect(),
            scope: format!("{names}: not walked for this job"),
            confidence: "none".into(),
            reasons: vec![format!(
                "more than {limit} entries are here (the walk for job {job} stopped at that limit), so for {} min \
                 after it no job walks them; a job whose cwd is a smaller directory (a project's) gets its changes listed",
                OVER_LIMIT_PAUSE.as_secs() / 60
            )],
            limit: limit as u32,
            ..Default::default()
        })
    }
}

/// True when `dir` (a mount point) holds one of the kernel's own filesystems: proc, sysfs, cgroups,
/// devpts, the debug, trace, security and BPF filesystems, nsfs. tmpfs is not among them: jobs work there.
fn kernel_fs(dir: &Path) -> bool {
    use nix::sys::statfs as fs;
    let Ok(st) = fs::statfs(dir) else { return false };
    [
        fs::PROC_SUPER_MAGIC,
        fs::SYSFS_MAGIC,
        fs::CGROUP_SUPER_MAGIC,
        fs::CGROUP2_SUPER_MAGIC,
        fs::DEVPTS_SUPER_MAGIC,
        fs::DEBUGFS_MAGIC,
        fs::TRACEFS_MAGIC,
        fs::SECURITYFS_MAGIC,
        fs::BPF_FS_MAGIC,
        fs::NSFS_MAGIC,
    ]
    .contains(&st.filesystem_type())
}

/// What a [`Quiet`] watches each listed directory for.
fn quiet_mask() -> AddWatchFlags {
    AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_MODIFY
        | AddWatchFlags::IN_CLOSE_WRITE
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_ATTRIB
        | AddWatchFlags::IN_DELETE_SELF
        | AddWatchFlags::IN_MOVE_SELF
        | AddWatchFlags::IN_DONT_FOLLOW
        | AddWatchFlags::IN_ONLYDIR
}

/// Keeps the last walk of the watched roots valid while nothing changes under them: an inotify
/// instance watches every directory that walk listed, and while no event arrives (no entry created,
/// deleted, moved, written or re-moded; no queue overflow) the last walk *is* the state now, so a job
/// that wrote nothing there costs no walk, before or after. Any event, other roots, a directory that
/// could not be listed or a watch the kernel refuses (the per-uid `max_user_watches`) means a new walk,
/// as without it. A walk that stopped at the limit is kept: only paths up to where it stopped are
/// compared, every directory it listed is watched, and a path created in a directory it did not list
/// sorts past the point where it stopped.
///
/// Blind spots, said in the part's scope when a walk was skipped: writes through a shared `mmap` (no
/// inotify event), and a directory created in the instant between the walk listing its parent and the
/// watch being placed on it (the parent's own event is in the queue for the next look).
#[derive(Debug)]
pub struct Quiet {
    inotify: Inotify,
    /// The roots asked for and the walk the watches were placed after.
    last: Option<(Vec<PathBuf>, Arc<Watch>)>,
}

impl Quiet {
    /// `None` when the kernel refuses an instance (the per-uid `max_user_instances`).
    pub fn new() -> Option<Quiet> {
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).ok()?;
        Some(Quiet { inotify, last: None })
    }

    /// The roots' entries now, and whether that took a walk.
    pub fn look(&mut self, roots: &[PathBuf], limit: usize) -> (Arc<Watch>, bool) {
        let roots = &outer_roots(roots);
        let changed = self.drain();
        match &self.last {
            Some((r, w)) if !changed && r.as_slice() == roots && w.limit == limit => return (Arc::clone(w), false),
            Some((r, _)) if r.as_slice() != roots => {
                // Other roots: a fresh instance, so the old directories' watches go with the old one.
                if let Ok(i) = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC) {
                    self.inotify = i;
                }
            }
            _ => {}
        }
        self.last = None;
        let w = Arc::new(Watch::take(roots, limit));
        let mut sound = w.unlisted.is_empty();
        for (p, st, _) in &w.entries {
            if !sound {
                break;
            }
            if st.kind == b'd' {
                sound = self.inotify.add_watch(p.as_path(), quiet_mask()).is_ok();
            }
        }
        if sound {
            self.last = Some((roots.to_vec(), Arc::clone(&w)));
        }
        (w, true)
    }

    /// Whether any event arrived since the last look (read and dropped).
    fn drain(&self) -> bool {
        let mut any = false;
        while let Ok(events) = self.inotify.read_events() {
            if events.is_empty() {
                break;
            }
            any = true;
        }
        any
    }
}

/// `Path`'s order (component by component) for the paths a walk makes, without parsing components:
/// bytes compared as they are, except that `/` sorts before every other byte (`a/b` < `a.txt`, as
/// their components say). It holds for paths without `.` components, doubled or trailing slashes:
/// the walk's paths are its normalized roots joined with names read from directories.
fn path_cmp(a: &Path, b: &Path) -> std::cmp::Ordering {
    use std::os::unix::ffi::OsStrExt;
    let (a, b) = (a.as_os_str().as_bytes(), b.as_os_str().as_bytes());
    let same = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let rank = |c: u8| if c == b'/' { 0 } else { u16::from(c) + 1 };
    match (a.get(same), b.get(same)) {
        (Some(&x), Some(&y)) => rank(x).cmp(&rank(y)),
        (x, y) => x.is_some().cmp(&y.is_some()),
    }
}

/// `roots` normalized and sorted, without duplicates and without those inside another (walked once,
/// as the outer).
fn outer_roots(roots: &[PathBuf]) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = roots.iter().map(|r| r.components().collect()).collect();
    roots.sort();
    roots.dedup();
    roots.iter().filter(|r| !roots.iter().any(|o| o != *r && r.starts_with(o))).cloned().collect()
}

fn stat_of(m: &std::fs::Metadata) -> Stat {
    let ft = m.file_type();
    let kind = match () {
        _ if ft.is_file() => b'f',
        _ if ft.is_dir() => b'd',
        _ if ft.is_symlink() => b'l',
        _ => b'o',
    };
    let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
    Stat {
        kind,
        size: if kind == b'd' { 0 } else { m.size() },
        mtime: if kind == b'd' { 0 } else { ns(m.mtime(), m.mtime_nsec()) },
        ctime: if kind == b'd' { 0 } else { ns(m.ctime(), m.ctime_nsec()) },
        ino: m.ino(),
        mode: m.mode(),
    }
}

fn hash_of(p: &Path) -> Option<u64> {
    let f = std::fs::File::open(p).ok()?;
    let mut buf = Vec::new();
    f.take(HASH_BYTES).read_to_end(&mut buf).ok()?;
    let mut h = std::hash::DefaultHasher::new();
    h.write(&buf);
    Some(h.finish())
}

/// The watched part of a job's ledger: `before` against `after`.
pub fn compare(before: &Watch, after: &Watch) -> WatchedEffects {
    // Compare only up to where both walks got.
    let bound = match (&before.stopped_after, &after.stopped_after) {
        (Some(a), Some(b)) => Some(a.min(b).clone()),
        (a, b) => a.clone().or_else(|| b.clone()),
    };
    let within = |p: &PathBuf| bound.as_ref().is_none_or(|b| path_cmp(p, b).is_le());
    let mut changed: Vec<PathChange> = Vec::new();
    let mut listed = |path: &Path, change: &str, under: u32| {
        changed.push(PathChange { path: path.to_string_lossy().into_owned(), change: change.into(), from: None, under })
    };
    let mut a = before.entries.iter().filter(|(p, ..)| within(p)).peekable();
    let mut b = after.entries.iter().filter(|(p, ..)| within(p)).peekable();
    // A directory added (or deleted) is listed once, with the count of the paths below it, all added
    // (deleted) with it: they follow it in path order. A new `.venv` is one line, not 1,800.
    fn below<'e, I: Iterator<Item = &'e Entry>>(it: &mut std::iter::Peekable<I>, dir: &Path, st: &Stat) -> u32 {
        let mut n = 0;
        while st.kind == b'd' && it.next_if(|(p, ..)| p.starts_with(dir)).is_some() {
            n += 1;
        }
        n
    }
    loop {
        match (a.peek().copied(), b.peek().copied()) {
            (None, None) => break,
            (Some((p, st, _)), None) => {
                a.next();
                listed(p, "deleted", below(&mut a, p, st));
            }
            (None, Some((p, st, _))) => {
                b.next();
                listed(p, "added", below(&mut b, p, st));
            }
            (Some((pa, sa, ha)), Some((pb, sb, hb))) => match path_cmp(pa, pb) {
                std::cmp::Ordering::Less => {
                    a.next();
                    listed(pa, "deleted", below(&mut a, pa, sa));
                }
                std::cmp::Ordering::Greater => {
                    b.next();
                    listed(pb, "added", below(&mut b, pb, sb));
                }
                std::cmp::Ordering::Equal => {
                    // Equal stat but another hash: written within the clock tick of the "before".
                    let rehashed = || if hb.is_some() { *hb } else { hash_of(pb) };
                    if sa.kind != sb.kind {
                        listed(pa, "type-changed", 0);
                    } else if sa != sb || (ha.is_some() && rehashed() != *ha) {
                        listed(pa, "modified", 0);
                    }
                    a.next();
                    b.next();
                }
            },
        }
    }
    let mut reasons = Vec::new();
    if let Some(b) = &bound {
        reasons.push(format!(
            "the watched paths hold more than {} entries, the most one walk looks at: paths after {} were not compared",
            after.limit,
            b.display()
        ));
    }
    reasons.extend(unlisted_reasons(&before.unlisted, &after.unlisted));
    let unlisted = !before.unlisted.is_empty() || !after.unlisted.is_empty();
    let changed_more = changed.len().saturating_sub(MAX_LISTED) as u32;
    changed.truncate(MAX_LISTED);
    let complete = bound.is_none() && !unlisted;
    WatchedEffects {
        roots: after.roots.iter().map(|r| r.to_string_lossy().into_owned()).collect(),
        scope: format!(
            "{}: every entry's lstat (size, times, inode, mode; files changed within 2 s of a walk also by \
             content), before vs after the job, at most {} entries per walk",
            after.roots.iter().map(|r| r.display().to_string()).collect::<Vec<_>>().join(", "),
            after.limit
        ),
        confidence: if complete { "complete" } else { "partial" }.into(),
        reasons,
        changed,
        changed_more,
        entries: after.entries.len().max(before.entries.len()) as u32,
        limit: after.limit as u32,
        cost_us: before.cost_us + after.cost_us,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(p: &WatchedEffects, root: &Path) -> Vec<(String, String)> {
        p.changed
            .iter()
            .map(|c| (Path::new(&c.path).strip_prefix(root).unwrap().display().to_string(), c.change.clone()))
            .collect()
    }

    #[test]
    fn unlisted_directories_are_named_once_by_reason_and_the_rest_counted() {
        let kind = |n: &str, k: &str| (PathBuf::from(n), k.to_owned());
        let before: Vec<_> = ["/t/a", "/t/b", "/t/c", "/t/d"].map(|n| kind(n, "permission denied")).into();
        let mut after = before.clone();
        after.push(kind("/t/gone", "not found"));
        assert_eq!(
            unlisted_reasons(&before, &after),
            [
                "1 directory could not be listed (not found): /t/gone",
                "4 directories could not be listed (permission denied): /t/a, /t/b, /t/c and 1 more",
            ]
        );
        assert!(unlisted_reasons(&[], &[]).is_empty());
    }

    #[test]
    fn added_modified_deleted_and_a_same_size_rewrite_are_seen() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path().to_path_buf();
        std::fs::write(r.join("keep"), "k").unwrap();
        std::fs::write(r.join("edit"), "aaaa").unwrap();
        std::fs::write(r.join("gone"), "g").unwrap();
        let before = Watch::take(std::slice::from_ref(&r), 100);
        std::fs::write(r.join("edit"), "bbbb").unwrap();
        std::fs::remove_file(r.join("gone")).unwrap();
        std::fs::create_dir(r.join("new")).unwrap();
        std::fs::write(r.join("new/f"), "n").unwrap();
        let p = compare(&before, &Watch::take(std::slice::from_ref(&r), 100));
        assert_eq!(
            names(&p, &r),
            [("edit".into(), "modified".into()), ("gone".into(), "deleted".into()), ("new".into(), "added".into())],
            "new/f is folded into its new directory"
        );
        assert_eq!(p.changed[2].under, 1, "{p:?}");
        assert_eq!(p.confidence, "complete", "{p:?}");
    }

    #[test]
    fn a_kernel_filesystem_mounted_below_a_root_is_listed_but_not_walked() {
        assert!(super::kernel_fs(Path::new("/proc")) && super::kernel_fs(Path::new("/sys")));
        let d = tempfile::tempdir().unwrap();
        assert!(!super::kernel_fs(d.path()), "a temp dir is no kernel filesystem");
        // `/dev/pts` (devpts, always holding `ptmx`) is mounted below `/dev`.
        let w = Watch::take(&[PathBuf::from("/dev")], 5000);
        let paths = |w: &Watch| w.entries.iter().map(|e| e.0.clone()).collect::<Vec<PathBuf>>();
        assert!(paths(&w).contains(&PathBuf::from("/dev/pts")), "the mount point itself is listed");
        let inside: Vec<PathBuf> =
            paths(&w).into_iter().filter(|k| k.starts_with("/dev/pts") && k != Path::new("/dev/pts")).collect();
        assert!(inside.is_empty(), "nothing under devpts is walked: {inside:?}");
        assert!(w.entries.len() > 2, "the rest of /dev is walked: {:?}", paths(&w));
        // A root that is itself a kernel filesystem is walked: someone asked for it.
        let pts = Watch::take(&[PathBuf::from("/dev/pts")], 5000);
        assert!(paths(&pts).contains(&PathBuf::from("/dev/pts/ptmx")), "{:?}", paths(&pts));
    }

    proptest::proptest! {
        /// The byte comparison the walk sorts by is `Path`'s component order, for any names.
        #[test]
        fn path_cmp_is_the_order_of_components(
            a in proptest::collection::vec("[a-c./ _-]{1,3}", 1..4),
            b in proptest::collection::vec("[a-c./ _-]{1,3}", 1..4),
        ) {
            let path = |names: &[String]| -> PathBuf {
                let mut p = PathBuf::from("/");
                for n in names.iter().flat_map(|n| n.split('/')).filter(|n| !n.is_empty() && *n != "." && *n != "..") {
                    p.push(n);
                }
                p
            };
            let (a, b) = (path(&a), path(&b));
            proptest::prop_assert_eq!(path_cmp(&a, &b), a.cmp(&b), "{:?} vs {:?}", a, b);
        }
    }

    #[test]
    fn a_directory_added_or_deleted_whole_is_one_entry_with_the_count_below_it() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path().to_path_buf();
        std::fs::create_dir_all(r.join("old/sub")).unwrap();
        std::fs::write(r.join("old/sub/f"), "x").unwrap();
        std::fs::create_dir(r.join("kept")).unwrap();
        let before = Watch::take(std::slice::from_ref(&r), 100);
        std::fs::remove_dir_all(r.join("old")).unwrap();
        std::fs::create_dir_all(r.join("new/a/b")).unwrap();
        for f in ["new/1", "new/a/2", "new/a/b/3", "new.txt", "kept/in"] {
            std::fs::write(r.join(f), "y").unwrap();
        }
        let p = compare(&before, &Watch::take(std::slice::from_ref(&r), 100));
        let got: Vec<(String, String, u32)> = p
            .changed
            .iter()
            .map(|c| (Path::new(&c.path).strip_prefix(&r).unwrap().display().to_string(), c.change.clone(), c.under))
            .collect();
        let want = [("kept/in", "added", 0), ("new", "added", 5), ("new.txt", "added", 0), ("old", "deleted", 2)];
        assert_eq!(got, want.map(|(p, c, n)| (p.to_owned(), c.to_owned(), n)));
    }

    #[test]
    fn a_walk_lists_its_entries_in_path_order() {
        let d = tempfile::tempdir().unwrap();
        for p in ["a/b", "a.txt", "a-b/c", "a/b.d/e", "ab"] {
            let p = d.path().join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "x").unwrap();
        }
        let w = Watch::take(&[d.path().join(".").join("")], 100);
        let walked: Vec<PathBuf> = w.entries.iter().map(|e| e.0.clone()).collect();
        let mut sorted = walked.clone();
        sorted.sort();
        assert_eq!(walked, sorted, "the walk's order is Path's order");
        assert_eq!(walked.len(), 9, "the root, 3 directories and 5 files: {walked:?}");
    }

    #[test]
    fn a_walk_at_the_limit_compares_only_what_both_walks_saw() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path().to_path_buf();
        for i in 0..10 {
            std::fs::write(r.join(format!("f{i}")), "x").unwrap();
        }
        // The "before" walk stops after f3; a new `e` sorts first, so the "after" walk stops after f2.
        let before = Watch::take(std::slice::from_ref(&r), 5);
        std::fs::write(r.join("e"), "new").unwrap();
        std::fs::write(r.join("f0"), "changed").unwrap();
        std::fs::write(r.join("f9"), "changed").unwrap();
        let p = compare(&before, &Watch::take(std::slice::from_ref(&r), 5));
        assert_eq!(
            names(&p, &r),
            [("e".into(), "added".into()), ("f0".into(), "modified".into())],
            "f3 (walked before, not after) is not called deleted; f9 lies past the limit"
        );
        assert_eq!(p.confidence, "partial");
        assert!(
            p.reasons[0].contains("more than 5 entries") && p.reasons[0].ends_with("f2 were not compared"),
            "{p:?}"
        );
    }
}
