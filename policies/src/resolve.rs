//! Policy + session context → absolute writable paths ([`ResolvedPolicy`]).
//!
//! Placeholders take the session's values ([`ResolveCtx`]); each path is canonicalised (so the
//! Landlock rule and the report name the real directory); optional roots that do not exist, or whose
//! placeholder the session lacks (`{gitdir}` outside a worktree), are skipped and listed with why;
//! roots that land inside another resolved root (a `.git` inside the project) are folded into it
//! and listed too. A required root that cannot be opened refuses the session: a rule that cannot be
//! enforced is an error, never silently dropped.
//!
//! Invariants of a [`ResolvedPolicy`]: every `writable` path is absolute, canonical, existed at
//! resolution, and none lies inside another.
//!
//! ```
//! # let dir = tempfile::tempdir().unwrap();
//! # let (project, tmp, home) = (dir.path().join("p"), dir.path().join("t"), dir.path().join("h"));
//! # for d in [&project, &tmp, &home] { std::fs::create_dir(d).unwrap(); }
//! use policies::{Policy, ResolveCtx};
//! let ctx = ResolveCtx::new(&project, &tmp, &home);
//! let resolved = Policy::builtin("workspace").unwrap().resolve(&ctx).unwrap();
//! assert!(resolved.writable.iter().any(|r| r.path == project.canonicalize().unwrap()));
//! // The caches do not exist in this fresh home: skipped, and said so.
//! assert!(resolved.skipped.iter().any(|s| s.template == "{home}/.cargo/registry"));
//! ```

use std::path::{Path, PathBuf};

use crate::policy::{Policy, WritableRoot};
use crate::template::Placeholder;

/// The session's values for the placeholders. Every path must be absolute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolveCtx {
    pub project: PathBuf,
    pub session_tmp: PathBuf,
    pub home: PathBuf,
    /// The project's git directory, when it has one ([`crate::git::git_dirs`] finds it).
    pub gitdir: Option<PathBuf>,
    /// The common git directory of the project's repository, when it has one.
    pub git_common_dir: Option<PathBuf>,
    /// Roots the session added at `session.open`, already checked by [`crate::extra::check_extra`].
    pub extra: Vec<PathBuf>,
}

impl ResolveCtx {
    /// A context without git directories.
    pub fn new(project: impl Into<PathBuf>, session_tmp: impl Into<PathBuf>, home: impl Into<PathBuf>) -> Self {
        ResolveCtx {
            project: project.into(),
            session_tmp: session_tmp.into(),
            home: home.into(),
            gitdir: None,
            git_common_dir: None,
            extra: Vec::new(),
        }
    }

    /// Add the session's own writable roots (checked against the server's allowance first).
    pub fn with_extra(mut self, extra: Vec<PathBuf>) -> Self {
        self.extra = extra;
        self
    }

    /// Fill `gitdir` and `git_common_dir` from the repository containing `project`, if any.
    pub fn with_git_dirs(mut self) -> Self {
        if let Some(dirs) = crate::git::git_dirs(&self.project) {
            self.gitdir = Some(dirs.gitdir);
            self.git_common_dir = Some(dirs.common_dir);
        }
        self
    }

    /// The value of `placeholder` in this session.
    pub fn value(&self, placeholder: Placeholder) -> Option<&Path> {
        match placeholder {
            Placeholder::Project => Some(&self.project),
            Placeholder::SessionTmp => Some(&self.session_tmp),
            Placeholder::Home => Some(&self.home),
            Placeholder::Gitdir => self.gitdir.as_deref(),
            Placeholder::GitCommonDir => self.git_common_dir.as_deref(),
        }
    }
}

/// A policy with its writable roots made absolute for one session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedPolicy {
    /// The policy it came from (env, seccomp, network, limits, landlock, guards).
    pub policy: Policy,
    /// The directories jobs may write beneath, canonical, none inside another.
    pub writable: Vec<ResolvedRoot>,
    /// Roots of the policy that are not in `writable`, and why.
    pub skipped: Vec<SkippedRoot>,
}

/// One writable directory of a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedRoot {
    pub path: PathBuf,
    /// The profile's template it came from.
    pub template: String,
    pub reason: String,
}

/// A root of the profile that is not enforced as its own rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedRoot {
    pub template: String,
    /// The expanded path, when the placeholder had a value.
    pub path: Option<PathBuf>,
    /// Why: "does not exist", "{gitdir} is not set…", "inside writable root …".
    pub why: String,
}

impl ResolvedPolicy {
    /// The writable root that `path` (absolute) lies beneath, if any: the answer to "why may this
    /// job write here", or, when `None`, the start of explaining a refused write.
    pub fn root_for(&self, path: &Path) -> Option<&ResolvedRoot> {
        self.writable.iter().find(|r| path.starts_with(&r.path))
    }
}

/// Errors from [`Policy::resolve`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    #[error("session path `{field}` is relative ({path}); pass an absolute path")]
    RelativeContext { field: &'static str, path: PathBuf },
    #[error(
        "writable root `{template}` needs {placeholder}, which this session does not have; \
         mark the rule `optional = true` or open the session in a git checkout"
    )]
    PlaceholderUnset { template: String, placeholder: Placeholder },
    #[error(
        "writable root `{template}` is {path}, which cannot be opened; create it or mark the rule `optional = true`"
    )]
    RootMissing {
        template: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl Policy {
    /// Make this policy's writable roots absolute for the session described by `ctx`.
    pub fn resolve(&self, ctx: &ResolveCtx) -> Result<ResolvedPolicy, ResolveError> {
        check_absolute(ctx)?;
        let mut found: Vec<ResolvedRoot> = Vec::new();
        let mut skipped = Vec::new();
        for root in &self.writable {
            match resolve_root(root, ctx)? {
                // A placeholder whose value is `/` (a session opened on `/`) would make everything
                // writable; writing everywhere is `landlock.require = "off"`, never a root.
                Ok(resolved) if resolved.path == Path::new("/") => skipped.push(SkippedRoot {
                    template: resolved.template,
                    path: Some(resolved.path),
                    why: "resolves to /, which is never a writable root (open the session in a project directory)"
                        .into(),
                }),
                Ok(resolved) => found.push(resolved),
                Err(skip) => skipped.push(skip),
            }
        }
        for path in &ctx.extra {
            let path = std::fs::canonicalize(path).map_err(|source| ResolveError::RootMissing {
                template: crate::extra::EXTRA_TEMPLATE.into(),
                path: path.clone(),
                source,
            })?;
            let reason = "added by the session at session.open, within the directories the server allows".into();
            found.push(ResolvedRoot { path, template: crate::extra::EXTRA_TEMPLATE.into(), reason });
        }
        let mut writable: Vec<ResolvedRoot> = Vec::with_capacity(found.len());
        for (i, root) in found.iter().enumerate() {
            // Inside another root, or equal to an earlier one: folded into that one.
            let outer = found.iter().enumerate().find(|(j, other)| {
                *j != i && root.path.starts_with(&other.path) && (root.path != other.path || *j < i)
            });
            match outer {
                Some((_, outer)) => skipped.push(SkippedRoot {
                    template: root.template.clone(),
                    path: Some(root.path.clone()),
                    why: format!("inside writable root {} (`{}`)", outer.path.display(), outer.template),
                }),
                None => writable.push(root.clone()),
            }
        }
        Ok(ResolvedPolicy { policy: self.clone(), writable, skipped })
    }
}

fn check_absolute(ctx: &ResolveCtx) -> Result<(), ResolveError> {
    for placeholder in Placeholder::ALL {
        if let Some(path) = ctx.value(placeholder).filter(|p| !p.is_absolute()) {
            return Err(ResolveError::RelativeContext { field: placeholder.name(), path: path.to_path_buf() });
        }
    }
    Ok(())
}

/// One root: `Ok(Ok(root))` when it exists, `Ok(Err(skip))` when optional and unavailable.
fn resolve_root(root: &WritableRoot, ctx: &ResolveCtx) -> Result<Result<ResolvedRoot, SkippedRoot>, ResolveError> {
    let template = root.template.to_string();
    let base = match root.template.placeholder() {
        None => Path::new("/"),
        Some(p) => match ctx.value(p) {
            Some(value) => value,
            None if root.optional => {
                let why = format!("{p} is not set for this session");
                return Ok(Err(SkippedRoot { template, path: None, why }));
            }
            None => return Err(ResolveError::PlaceholderUnset { template, placeholder: p }),
        },
    };
    let path = root.template.expand(base);
    match std::fs::canonicalize(&path) {
        Ok(real) => Ok(Ok(ResolvedRoot { path: real, template, reason: root.reason.clone() })),
        Err(err) if root.optional => Ok(Err(SkippedRoot { template, path: Some(path), why: err.to_string() })),
        Err(source) => Err(ResolveError::RootMissing { template, path, source }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    struct Dirs {
        _tmp: tempfile::TempDir,
        root: PathBuf,
    }

    #[test]
    fn a_project_of_slash_is_skipped_not_made_writable() {
        let d = dirs();
        let ctx = ResolveCtx::new("/", d.root.join("tmp"), d.root.join("home"));
        let r = Policy::builtin("workspace").unwrap().resolve(&ctx).unwrap();
        assert!(r.writable.iter().all(|w| w.path != Path::new("/")), "{:?}", r.writable);
        assert!(r.writable.iter().any(|w| w.template == "{session_tmp}"));
        assert!(r.skipped.iter().any(|s| s.template == "{project}" && s.why.starts_with("resolves to /")));
    }

    fn dirs() -> Dirs {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        for d in ["project", "tmp", "home", "home/.cache", "home/.npm"] {
            fs::create_dir(root.join(d)).unwrap();
        }
        Dirs { _tmp: tmp, root }
    }

    fn ctx(d: &Dirs) -> ResolveCtx {
        ResolveCtx::new(d.root.join("project"), d.root.join("tmp"), d.root.join("home"))
    }

    #[test]
    fn workspace_resolves_present_roots_and_lists_the_rest() {
        let d = dirs();
        let r = Policy::builtin("workspace").unwrap().resolve(&ctx(&d)).unwrap();
        let paths: Vec<_> = r.writable.iter().map(|w| w.path.strip_prefix(&d.root).unwrap().to_path_buf()).collect();
        let expect: Vec<PathBuf> = ["project", "tmp", "home/.cache", "home/.npm"].iter().map(PathBuf::from).collect();
        assert_eq!(paths, expect);
        let skipped: Vec<_> = r.skipped.iter().map(|s| s.template.as_str()).collect();
        assert!(skipped.contains(&"{gitdir}") && skipped.contains(&"{home}/.cargo/registry"), "{skipped:?}");
        assert!(r.root_for(&d.root.join("project/src/main.rs")).is_some());
        assert!(r.root_for(&d.root.join("home/.bashrc")).is_none());
    }

    #[test]
    fn gitdir_inside_the_project_is_folded_into_it() {
        let d = dirs();
        fs::create_dir(d.root.join("project/.git")).unwrap();
        let r = Policy::builtin("workspace").unwrap().resolve(&ctx(&d).with_git_dirs()).unwrap();
        let folded = r.skipped.iter().find(|s| s.template == "{gitdir}").unwrap();
        assert!(folded.why.starts_with("inside writable root"), "{}", folded.why);
        assert_eq!(r.writable.iter().filter(|w| w.path.starts_with(d.root.join("project"))).count(), 1);
    }

    #[test]
    fn missing_required_root_refuses() {
        let d = dirs();
        let mut c = ctx(&d);
        c.project = d.root.join("absent");
        let err = Policy::builtin("workspace").unwrap().resolve(&c).unwrap_err();
        assert!(matches!(err, ResolveError::RootMissing { ref template, .. } if template == "{project}"), "{err}");
        assert!(err.to_string().contains("optional = true"));
    }

    #[test]
    fn relative_context_and_unset_placeholder() {
        let d = dirs();
        let mut c = ctx(&d);
        c.home = PathBuf::from("home");
        let err = Policy::builtin("readonly").unwrap().resolve(&c).unwrap_err();
        assert!(matches!(err, ResolveError::RelativeContext { field: "home", .. }), "{err}");
        let text =
            crate::validate::test_support::MINIMAL.to_owned() + "\n[[writable]]\npath = \"{gitdir}\"\nreason = \"r\"\n";
        let p = Policy::from_toml("t.toml", &text).unwrap();
        let err = p.resolve(&ctx(&d)).unwrap_err();
        assert!(matches!(err, ResolveError::PlaceholderUnset { placeholder: Placeholder::Gitdir, .. }), "{err}");
    }

    #[test]
    fn extra_roots_join_and_fold_like_profile_roots() {
        let d = dirs();
        fs::create_dir_all(d.root.join("data/x")).unwrap();
        let c = ctx(&d).with_extra(vec![d.root.join("data/x"), d.root.join("project/../project")]);
        let r = Policy::builtin("readonly").unwrap().resolve(&c).unwrap();
        let extra: Vec<_> = r.writable.iter().filter(|w| w.template == "session.open").collect();
        assert_eq!(extra.len(), 2, "{:?}", r.writable);
        assert!(r.root_for(&d.root.join("data/x/f")).is_some());
        let w = Policy::builtin("workspace").unwrap().resolve(&c).unwrap();
        assert!(w.skipped.iter().any(|s| s.template == "session.open" && s.why.starts_with("inside")), "{w:?}");
    }

    #[test]
    fn readonly_writes_only_the_session_tmp() {
        let d = dirs();
        let r = Policy::builtin("readonly").unwrap().resolve(&ctx(&d)).unwrap();
        assert_eq!(r.writable.len(), 1);
        assert_eq!(r.writable[0].path, d.root.join("tmp"));
    }
}
