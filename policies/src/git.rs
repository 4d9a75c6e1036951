//! Finding a project's git directories without running git, for `{gitdir}` and `{git_common_dir}`.
//!
//! Walks up from the project to the first `.git`. A directory is the git dir of an ordinary
//! checkout; a file (`gitdir: PATH`) marks a linked worktree or a submodule, whose git dir lives
//! elsewhere and whose `commondir` file names the repository's shared directory. Commits in a
//! worktree write to both, which is why the workspace profile makes them writable.
//!
//! Invariants: returned paths are canonical and exist; anything unreadable or malformed gives
//! `None` (no git dirs), never an error: a profile marks these roots optional.
//!
//! ```
//! # let dir = tempfile::tempdir().unwrap();
//! std::fs::create_dir(dir.path().join(".git")).unwrap();
//! let dirs = policies::git::git_dirs(dir.path()).unwrap();
//! assert_eq!(dirs.gitdir, dirs.common_dir);
//! ```

use std::path::{Path, PathBuf};

/// A checkout's git directory and its repository's common directory (equal outside worktrees).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitDirs {
    pub gitdir: PathBuf,
    pub common_dir: PathBuf,
}

/// The git directories of the checkout containing `project`, if any.
pub fn git_dirs(project: &Path) -> Option<GitDirs> {
    let dot_git = project.ancestors().map(|d| d.join(".git")).find(|p| p.symlink_metadata().is_ok())?;
    let gitdir = if dot_git.is_dir() {
        dot_git.canonicalize().ok()?
    } else {
        let text = std::fs::read_to_string(&dot_git).ok()?;
        let target = text.lines().next()?.strip_prefix("gitdir:")?.trim();
        dot_git.parent()?.join(target).canonicalize().ok()?
    };
    let common_dir = match std::fs::read_to_string(gitdir.join("commondir")) {
        Ok(text) => gitdir.join(text.lines().next()?.trim()).canonicalize().ok()?,
        Err(_) => gitdir.clone(),
    };
    Some(GitDirs { gitdir, common_dir })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn linked_worktree_points_at_its_gitdir_and_the_common_dir() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let main_git = root.join("main/.git");
        let wt_git = main_git.join("worktrees/wt");
        fs::create_dir_all(&wt_git).unwrap();
        fs::write(wt_git.join("commondir"), "../..\n").unwrap();
        fs::create_dir_all(root.join("wt/src")).unwrap();
        fs::write(root.join("wt/.git"), format!("gitdir: {}\n", wt_git.display())).unwrap();
        let dirs = git_dirs(&root.join("wt/src")).unwrap();
        assert_eq!(dirs, GitDirs { gitdir: wt_git, common_dir: main_git });
    }

    #[test]
    fn no_repository_or_a_malformed_file_is_none() {
        let tmp = tempfile::tempdir().unwrap();
        let project = tmp.path().join("p");
        fs::create_dir(&project).unwrap();
        fs::write(project.join(".git"), "not a gitdir line\n").unwrap();
        assert_eq!(git_dirs(&project), None);
    }
}
