//! Path templates: `/abs/path` or `{placeholder}/rest`, checked once and expanded per session.
//!
//! A template is absolute by construction: it starts with `/` or with one placeholder standing for
//! an absolute directory of the session ([`Placeholder`]). The rest is a list of normal components:
//! no `..`, no `.`, no empty components, no braces, no NUL. Two templates can therefore be compared
//! for nesting without touching the file system ([`PathTemplate::contains`]).
//!
//! ```
//! use policies::{PathTemplate, Placeholder};
//! let t = PathTemplate::parse("{home}//.cargo/registry/").unwrap();
//! assert_eq!(t.to_string(), "{home}/.cargo/registry");
//! assert_eq!(t.placeholder(), Some(Placeholder::Home));
//! let outer = PathTemplate::parse("{home}/.cargo").unwrap();
//! assert!(outer.contains(&t));
//! ```

use std::fmt;
use std::path::{Path, PathBuf};

use crate::error::Problem;

/// A directory of the session that a template may start with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Placeholder {
    /// `{project}`: the directory the session was opened on.
    Project,
    /// `{session_tmp}`: the session's private temp directory (TMPDIR points there).
    SessionTmp,
    /// `{home}`: the home directory of the uid jobs run as.
    Home,
    /// `{gitdir}`: the project's real git directory, when the project is a git worktree.
    Gitdir,
    /// `{git_common_dir}`: the common git directory shared by the worktrees of a repository.
    GitCommonDir,
}

impl Placeholder {
    /// Every placeholder, in documentation order.
    pub const ALL: [Placeholder; 5] = [
        Placeholder::Project,
        Placeholder::SessionTmp,
        Placeholder::Home,
        Placeholder::Gitdir,
        Placeholder::GitCommonDir,
    ];

    /// The name written between braces.
    pub fn name(self) -> &'static str {
        match self {
            Placeholder::Project => "project",
            Placeholder::SessionTmp => "session_tmp",
            Placeholder::Home => "home",
            Placeholder::Gitdir => "gitdir",
            Placeholder::GitCommonDir => "git_common_dir",
        }
    }

    fn from_name(name: &str) -> Option<Placeholder> {
        Placeholder::ALL.into_iter().find(|p| p.name() == name)
    }
}

impl fmt::Display for Placeholder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{{{}}}", self.name())
    }
}

/// A validated writable-path template.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PathTemplate {
    /// `None` for a template starting at `/`.
    base: Option<Placeholder>,
    /// Normal components after the base.
    rest: Vec<String>,
}

impl PathTemplate {
    /// Parse and normalise `text` (repeated and trailing slashes and `.` components are dropped).
    pub fn parse(text: &str) -> Result<PathTemplate, Problem> {
        if text.contains('\0') {
            return Err(Problem::NulInPath(text.to_owned()));
        }
        let (base, tail) = if let Some(after) = text.strip_prefix('{') {
            let Some((name, tail)) = after.split_once('}') else {
                return Err(Problem::UnbalancedBrace(text.to_owned()));
            };
            let placeholder =
                Placeholder::from_name(name).ok_or_else(|| Problem::UnknownPlaceholder(name.to_owned()))?;
            if !tail.is_empty() && !tail.starts_with('/') {
                return Err(Problem::UnbalancedBrace(text.to_owned()));
            }
            (Some(placeholder), tail)
        } else if text.starts_with('/') {
            (None, text)
        } else if text.is_empty() {
            return Err(Problem::Empty);
        } else {
            return Err(Problem::RelativePath(text.to_owned()));
        };
        let mut rest = Vec::new();
        for component in tail.split('/').filter(|c| !c.is_empty() && *c != ".") {
            rest.push(check_component(text, component)?);
        }
        Ok(PathTemplate { base, rest })
    }

    /// The placeholder the template starts with, if any.
    pub fn placeholder(&self) -> Option<Placeholder> {
        self.base
    }

    /// Is `/` alone (every file on the machine)?
    pub fn is_filesystem_root(&self) -> bool {
        self.base.is_none() && self.rest.is_empty()
    }

    /// Does `self` contain `other` (same base, and `self`'s components are a prefix of `other`'s)?
    /// A template contains itself. Templates with different bases are never compared here.
    pub fn contains(&self, other: &PathTemplate) -> bool {
        self.base == other.base && other.rest.starts_with(&self.rest)
    }

    /// Expand with `base_dir` standing for the placeholder (ignored for a `/` template).
    pub fn expand(&self, base_dir: &Path) -> PathBuf {
        let mut path = match self.base {
            Some(_) => base_dir.to_path_buf(),
            None => PathBuf::from("/"),
        };
        path.extend(&self.rest);
        path
    }
}

/// Check one component of `text` after the base: braces mean a misplaced or unknown placeholder.
fn check_component(text: &str, component: &str) -> Result<String, Problem> {
    if component == ".." {
        return Err(Problem::ParentComponent(text.to_owned()));
    }
    if component.contains(['{', '}']) {
        let inner = component.strip_prefix('{').and_then(|c| c.strip_suffix('}'));
        return Err(match inner {
            Some(name) if Placeholder::from_name(name).is_some() => Problem::PlaceholderNotFirst(name.to_owned()),
            Some(name) if !name.contains(['{', '}']) => Problem::UnknownPlaceholder(name.to_owned()),
            _ => Problem::UnbalancedBrace(text.to_owned()),
        });
    }
    Ok(component.to_owned())
}

impl fmt::Display for PathTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.base {
            Some(p) => write!(f, "{p}")?,
            None if self.rest.is_empty() => return f.write_str("/"),
            None => {}
        }
        for component in &self.rest {
            write!(f, "/{component}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_normalises() {
        assert_eq!(PathTemplate::parse("{project}").unwrap().to_string(), "{project}");
        assert_eq!(PathTemplate::parse("/var//cache/./x/").unwrap().to_string(), "/var/cache/x");
        assert_eq!(PathTemplate::parse("/").unwrap().to_string(), "/");
        assert!(PathTemplate::parse("/").unwrap().is_filesystem_root());
    }

    #[test]
    fn rejects_what_cannot_be_a_root() {
        let bad = |t: &str| PathTemplate::parse(t).unwrap_err();
        assert_eq!(bad("tmp/x"), Problem::RelativePath("tmp/x".into()));
        assert_eq!(bad(""), Problem::Empty);
        assert_eq!(bad("{nope}/x"), Problem::UnknownPlaceholder("nope".into()));
        assert_eq!(bad("/srv/{project}"), Problem::PlaceholderNotFirst("project".into()));
        assert_eq!(bad("/srv/{other}"), Problem::UnknownPlaceholder("other".into()));
        assert_eq!(bad("{home"), Problem::UnbalancedBrace("{home".into()));
        assert_eq!(bad("{home}x"), Problem::UnbalancedBrace("{home}x".into()));
        assert_eq!(bad("{home}/a}b"), Problem::UnbalancedBrace("{home}/a}b".into()));
        assert_eq!(bad("{home}/../etc"), Problem::ParentComponent("{home}/../etc".into()));
        assert_eq!(bad("/a\0b"), Problem::NulInPath("/a\0b".into()));
    }

    #[test]
    fn containment_is_componentwise_and_per_base() {
        let t = |s: &str| PathTemplate::parse(s).unwrap();
        assert!(t("{home}/.cache").contains(&t("{home}/.cache/uv")));
        assert!(t("{home}/.cache").contains(&t("{home}/.cache")));
        assert!(!t("{home}/.cache").contains(&t("{home}/.cache-other")));
        assert!(!t("{home}/.cache/uv").contains(&t("{home}/.cache")));
        assert!(!t("{project}").contains(&t("{home}/x")));
        assert!(t("/").contains(&t("/etc")));
    }

    #[test]
    fn expands_against_a_base() {
        let t = PathTemplate::parse("{home}/.cargo/git").unwrap();
        assert_eq!(t.expand(Path::new("/home/a")), PathBuf::from("/home/a/.cargo/git"));
        let abs = PathTemplate::parse("/var/tmp").unwrap();
        assert_eq!(abs.expand(Path::new("/ignored")), PathBuf::from("/var/tmp"));
    }
}
