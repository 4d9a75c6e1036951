//! The effects ledger's change monitor: a home-made fsmonitor for Linux, so a job that touched nothing
//! in the project costs no git run, and a job that touched a few paths costs a `git status` of those
//! paths only ([`crate::effects::refresh`]).
//!
//! One inotify instance per worker at most, for one work tree at a time: a watch on every directory of
//! the work tree (symlinks not followed; `.git` watched apart, with `refs/` and `info/`, not `objects/`
//! or `logs/`). A directory created or moved in gets a watch at once and is scanned for its own
//! subdirectories; its path goes to git as a whole (a pathspec names everything under it), which closes
//! the race between its creation and the watch. The repository's ignore rules stay git's job: the
//! monitor hands git a path list, and git says what of it is status.
//!
//! [`Monitor::drain`] reads every event queued since the last look and says what a snapshot needs:
//! nothing ([`Changes::None`]), a status of some paths ([`Changes::Paths`], at most [`PATHS_MAX`]), or a
//! full status ([`Changes::Full`], with the reason: the queue overflowed, too many paths, the git dir
//! changed (index, `HEAD`, refs, config), a `.gitignore`/`.gitattributes`/`.gitmodules` changed, a
//! directory moved out or away, a watch could not be placed). When the monitor itself can no longer be
//! trusted (overflow, a directory moved, a watch refused) it is [`Monitor::broken`]: the caller drops
//! it and starts another before the next full status.
//!
//! Not seen, as by any inotify user: writes through a shared memory mapping, writes through a hard link
//! from outside the tree, writes by another host on a network file system.

use std::collections::{BTreeSet, HashMap};
use std::ffi::OsStr;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags as F, InitFlags, Inotify, WatchDescriptor};

pub use shm_proto::msg::{MONITOR_DIRS_MAX, MONITOR_PATHS_MAX as PATHS_MAX};

/// What a snapshot needs after a look at the queue.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Changes {
    None,
    /// Paths (relative to the work tree, directories standing for everything under them).
    Paths(BTreeSet<Vec<u8>>),
    /// A full status, and why (a sentence).
    Full(String),
}

/// Where a watched directory lies.
#[derive(Clone, Debug)]
enum Area {
    /// In the work tree, relative to its top ("" for the top).
    Tree(PathBuf),
    /// The git dir or one of its watched subdirectories (relative to the git dir).
    Git(PathBuf),
}

pub(crate) struct Monitor {
    ino: Inotify,
    pub root: PathBuf,
    git_dir: PathBuf,
    wds: HashMap<WatchDescriptor, Area>,
    /// Set when the monitor can no longer be trusted: the caller starts another.
    pub broken: Option<String>,
    /// The directory cap in force (the lower of [`MONITOR_DIRS_MAX`] and a quarter of the uid's
    /// `max_user_watches`, so hundreds of sessions of one uid do not exhaust it).
    cap: usize,
}

const TREE: F = F::IN_CREATE
    .union(F::IN_DELETE)
    .union(F::IN_MODIFY)
    .union(F::IN_CLOSE_WRITE)
    .union(F::IN_MOVED_FROM)
    .union(F::IN_MOVED_TO)
    .union(F::IN_ATTRIB)
    .union(F::IN_DELETE_SELF)
    .union(F::IN_MOVE_SELF)
    .union(F::IN_ONLYDIR)
    .union(F::IN_DONT_FOLLOW)
    .union(F::from_bits_retain(libc::IN_EXCL_UNLINK));

fn max_user_watches() -> usize {
    std::fs::read_to_string("/proc/sys/fs/inotify/max_user_watches")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(8192)
}

impl Monitor {
    /// Watch the work tree at `root` (its `.git` must be a directory: a linked worktree or a
    /// submodule's gitdir file is left to the full status).
    pub(crate) fn start(root: &Path) -> Result<Monitor, String> {
        let git_dir = root.join(".git");
        if !std::fs::symlink_metadata(&git_dir).is_ok_and(|m| m.is_dir()) {
            return Err("the work tree's .git is not a directory (a linked worktree or a submodule)".into());
        }
        let ino = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).map_err(|e| match e {
            Errno::EMFILE => "no inotify instance is left for the jobs' uid (fs.inotify.max_user_instances)".into(),
            e => format!("inotify could not be started: {e}"),
        })?;
        let cap = MONITOR_DIRS_MAX.min(max_user_watches() / 4);
        let mut m = Monitor { ino, root: root.to_path_buf(), git_dir, wds: HashMap::new(), broken: None, cap };
        m.add_tree(Path::new(""))?;
        m.add_git(Path::new(""))?;
        Ok(m)
    }

    fn watch(&mut self, full: &Path, area: Area) -> Result<(), String> {
        if self.wds.len() >= self.cap {
            return Err(format!(
                "the work tree has more than {} directories, the most the change monitor watches",
                self.cap
            ));
        }
        match self.ino.add_watch(full, TREE) {
            Ok(wd) => {
                self.wds.insert(wd, area);
                Ok(())
            }
            // Gone meanwhile: its parent's event names it.
            Err(Errno::ENOENT | Errno::ENOTDIR) => Ok(()),
            Err(Errno::ENOSPC) => {
                Err("no inotify watch is left for the jobs' uid (fs.inotify.max_user_watches)".into())
            }
            Err(e) => Err(format!("{} could not be watched: {e}", full.display())),
        }
    }

    /// Watch `rel` (in the work tree) and every directory under it; a nested repository refuses.
    fn add_tree(&mut self, rel: &Path) -> Result<(), String> {
        let mut stack = vec![rel.to_path_buf()];
        while let Some(rel) = stack.pop() {
            let full = self.root.join(&rel);
            self.watch(&full, Area::Tree(rel.clone()))?;
            let Ok(rd) = std::fs::read_dir(&full) else { continue };
            for e in rd.flatten() {
                let name = e.file_name();
                if name == ".git" {
                    if rel.as_os_str().is_empty() {
                        continue;
                    }
                    return Err(format!(
                        "{} holds a repository of its own (a submodule or nested clone), which the change monitor does not follow",
                        rel.display()
                    ));
                }
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(rel.join(name));
                }
            }
        }
        Ok(())
    }

    /// Watch the git dir's `rel` and its subdirectories (not `objects/`, `logs/`).
    fn add_git(&mut self, rel: &Path) -> Result<(), String> {
        let mut stack = vec![rel.to_path_buf()];
        while let Some(rel) = stack.pop() {
            let full = self.git_dir.join(&rel);
            self.watch(&full, Area::Git(rel.clone()))?;
            let Ok(rd) = std::fs::read_dir(&full) else { continue };
            for e in rd.flatten() {
                let name = e.file_name();
                let top = rel.as_os_str().is_empty();
                if top && !(name == "refs" || name == "info") {
                    continue;
                }
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(rel.join(name));
                }
            }
        }
        Ok(())
    }

    /// Read every queued event: what a snapshot of the work tree now needs.
    pub(crate) fn drain(&mut self) -> Changes {
        let mut paths: BTreeSet<Vec<u8>> = BTreeSet::new();
        let mut full: Option<String> = self.broken.clone();
        loop {
            let events = match self.ino.read_events() {
                Ok(ev) if ev.is_empty() => break,
                Ok(ev) => ev,
                Err(Errno::EAGAIN) => break,
                Err(Errno::EINTR) => continue,
                Err(e) => {
                    self.broken = Some(format!("the change monitor could not be read: {e}"));
                    break;
                }
            };
            for ev in events {
                if ev.mask.contains(F::IN_Q_OVERFLOW) {
                    self.broken = Some(
                        "the change monitor's queue overflowed (more changes between two looks than fs.inotify.max_queued_events)"
                            .into(),
                    );
                    continue;
                }
                let Some(area) = self.wds.get(&ev.wd).cloned() else { continue };
                if ev.mask.contains(F::IN_IGNORED) {
                    self.wds.remove(&ev.wd);
                }
                let is_dir = ev.mask.contains(F::IN_ISDIR);
                let name = ev.name.as_deref().map(OsStr::as_bytes).unwrap_or_default();
                match area {
                    Area::Git(rel) => {
                        if ev.mask.intersects(F::IN_DELETE_SELF | F::IN_MOVE_SELF) && rel.as_os_str().is_empty() {
                            self.broken = Some("the repository's git dir was removed or moved".into());
                        }
                        if ev.name.is_none() || name.ends_with(b".lock") {
                            continue;
                        }
                        let top = rel.as_os_str().is_empty();
                        if top
                            && matches!(name, b"objects" | b"logs" | b"COMMIT_EDITMSG" | b"FETCH_HEAD" | b"ORIG_HEAD")
                        {
                            continue;
                        }
                        if is_dir && ev.mask.intersects(F::IN_CREATE | F::IN_MOVED_TO) && !top {
                            if let Err(e) = self.add_git(&rel.join(OsStr::from_bytes(name))) {
                                self.broken = Some(e);
                            }
                        }
                        full.get_or_insert_with(|| {
                            format!(
                                "the repository's git dir changed ({}): index, HEAD, refs or configuration",
                                rel.join(OsStr::from_bytes(name)).display()
                            )
                        });
                    }
                    Area::Tree(rel) => {
                        if ev.mask.contains(F::IN_MOVE_SELF)
                            || (ev.mask.contains(F::IN_DELETE_SELF) && rel.as_os_str().is_empty())
                        {
                            self.broken =
                                Some(format!("the directory {} was moved or removed", self.root.join(&rel).display()));
                            continue;
                        }
                        if ev.name.is_none() {
                            continue;
                        }
                        let path = rel.join(OsStr::from_bytes(name));
                        if name == b".git" {
                            self.broken = Some(match rel.as_os_str().is_empty() {
                                true => "the work tree's .git was replaced or removed".into(),
                                false => format!("{} became a repository of its own", rel.display()),
                            });
                            continue;
                        }
                        if name.starts_with(b".git") {
                            full.get_or_insert_with(|| {
                                format!("{} changed, which may change what git lists anywhere", path.display())
                            });
                        }
                        if is_dir && ev.mask.contains(F::IN_MOVED_FROM) {
                            self.broken = Some(format!(
                                "the directory {} was moved: its watches would name the wrong paths",
                                path.display()
                            ));
                            continue;
                        }
                        if is_dir && ev.mask.intersects(F::IN_CREATE | F::IN_MOVED_TO) {
                            if let Err(e) = self.add_tree(&path) {
                                self.broken = Some(e);
                            }
                        }
                        paths.insert(path.into_os_string().into_vec());
                    }
                }
            }
        }
        if let Some(why) = &self.broken {
            return Changes::Full(why.clone());
        }
        if let Some(why) = full {
            return Changes::Full(why);
        }
        if paths.len() > PATHS_MAX {
            return Changes::Full(format!(
                "{} paths changed, more than the {PATHS_MAX} a status of named paths asks about",
                paths.len()
            ));
        }
        // A path under a changed directory is covered by the directory.
        let dirs: Vec<Vec<u8>> = paths.iter().cloned().collect();
        paths.retain(|p| !dirs.iter().any(|d| p.len() > d.len() && p.starts_with(d) && p[d.len()] == b'/'));
        match paths.is_empty() {
            true => Changes::None,
            false => Changes::Paths(paths),
        }
    }

    /// Directories watched now.
    #[cfg(test)]
    fn watched(&self) -> usize {
        self.wds.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join(".git/refs/heads")).unwrap();
        std::fs::create_dir_all(d.path().join("src/a")).unwrap();
        std::fs::write(d.path().join("src/a/f"), "1").unwrap();
        d
    }

    fn set(paths: &[&str]) -> Changes {
        Changes::Paths(paths.iter().map(|p| p.as_bytes().to_vec()).collect())
    }

    #[test]
    fn nothing_then_named_paths_then_a_new_directory_as_one_path() {
        let d = repo();
        let mut m = Monitor::start(d.path()).unwrap();
        assert_eq!(m.watched(), 6, "top, src, src/a, .git, .git/refs, .git/refs/heads");
        assert_eq!(m.drain(), Changes::None);
        std::fs::write(d.path().join("src/a/f"), "2").unwrap();
        std::fs::write(d.path().join("top"), "t").unwrap();
        assert_eq!(m.drain(), set(&["src/a/f", "top"]));
        assert_eq!(m.drain(), Changes::None);
        std::fs::create_dir_all(d.path().join("new/deep")).unwrap();
        std::fs::write(d.path().join("new/deep/x"), "x").unwrap();
        assert_eq!(m.drain(), set(&["new"]));
        std::fs::write(d.path().join("new/deep/y"), "y").unwrap();
        assert_eq!(m.drain(), set(&["new/deep/y"]), "the new directory got its watches");
        // Objects and locks do not matter; the index does.
        std::fs::write(d.path().join(".git/index.lock"), "").unwrap();
        std::fs::remove_file(d.path().join(".git/index.lock")).unwrap();
        assert_eq!(m.drain(), Changes::None);
        std::fs::write(d.path().join(".git/index"), "").unwrap();
        assert!(matches!(m.drain(), Changes::Full(w) if w.contains("git dir changed")));
        std::fs::rename(d.path().join("src/a"), d.path().join("b")).unwrap();
        assert!(matches!(m.drain(), Changes::Full(w) if w.contains("was moved")));
        assert!(m.broken.is_some());
    }

    #[test]
    fn too_many_paths_and_a_nested_repository_fall_back() {
        let d = repo();
        let mut m = Monitor::start(d.path()).unwrap();
        for i in 0..=PATHS_MAX {
            std::fs::write(d.path().join(format!("f{i}")), "x").unwrap();
        }
        assert!(matches!(m.drain(), Changes::Full(w) if w.contains("257 paths changed")));
        assert!(m.broken.is_none(), "too many paths keeps the watches");
        std::fs::create_dir_all(d.path().join("vendor/.git")).unwrap();
        assert!(Monitor::start(d.path()).is_err_and(|e| e.contains("repository of its own")));
    }
}
