//! The `force_push` guard target: whether a `git push` force-updates a protected branch of the remote.
//!
//! The guards read a command before it runs, so they cannot know the current branch, which is what
//! `git push -f` (no refspec), `git push -f origin` and `git push -f origin HEAD` update: such a push
//! counts as one of a protected branch, and the model is asked to name the branch. A push is forced by
//! `--force`/`-f` (also inside `-uf`), `--force-with-lease`, `--force-if-includes`, or, for one
//! refspec, a leading `+`; `--mirror` forces every ref. A refspec an expansion decides (`"$B"`) never
//! matches, as for every guard.
//!
//! ```
//! use front::guard::git_push::force_pushes;
//! let words = |s: &str| s.split(' ').map(|w| Some(w.to_owned())).collect::<Vec<_>>();
//! let protected = ["main".to_owned()];
//! assert!(force_pushes(&words("push origin +HEAD:refs/heads/main"), &protected));
//! assert!(force_pushes(&words("push -f"), &protected));
//! assert!(!force_pushes(&words("push -f origin feature/x"), &protected));
//! ```

/// git's own options, before the subcommand, that take a value in the next word.
const GIT_VALUED: &[&str] = &["-C", "-c", "--git-dir", "--work-tree", "--namespace", "--config-env"];
/// `git push` options that take a value in the next word.
const PUSH_VALUED: &[&str] = &["-o", "--push-option", "--repo", "--receive-pack", "--exec"];
/// Long options that force the push (also as `--force-with-lease=REF:SHA`).
const FORCE: &[&str] = &["--force", "--force-with-lease", "--force-if-includes"];

/// Whether `args`, a git command's words after `git` (`None` where an expansion decides), push with
/// force to one of `protected`, to every branch, or to a branch they do not name.
pub fn force_pushes(args: &[Option<String>], protected: &[String]) -> bool {
    let mut rest = args.iter();
    loop {
        match rest.next().map(Option::as_deref) {
            Some(Some("push")) => break,
            Some(Some(w)) if GIT_VALUED.contains(&w) => {
                rest.next();
            }
            Some(Some(w)) if w.starts_with('-') => {}
            _ => return false,
        }
    }
    let (mut force, mut every, mut tags, mut options) = (false, false, false, true);
    let mut operands: Vec<Option<&str>> = Vec::new();
    while let Some(w) = rest.next() {
        let w = match w.as_deref() {
            Some(w) if options && w.starts_with('-') && w != "-" => w,
            other => {
                operands.push(other);
                continue;
            }
        };
        match w {
            "--" => options = false,
            "--mirror" => return true,
            "--all" | "--branches" => every = true,
            "--tags" => tags = true,
            _ if PUSH_VALUED.contains(&w) => {
                rest.next();
            }
            _ if w.starts_with("--") => {
                force |= FORCE.iter().any(|f| w.strip_prefix(f).is_some_and(|v| v.is_empty() || v.starts_with('=')));
            }
            _ => force |= w.contains('f'),
        }
    }
    // The first operand is the remote; the refspecs follow it.
    let refspecs = operands.get(1..).unwrap_or_default();
    if force && (every || (refspecs.is_empty() && !tags)) {
        return true;
    }
    refspecs.iter().flatten().any(|spec| {
        let (plus, spec) = spec.strip_prefix('+').map_or((false, *spec), |s| (true, s));
        let dst = spec.split_once(':').map_or(spec, |(_, dst)| dst);
        let dst = dst.strip_prefix("refs/heads/").unwrap_or(dst);
        (force || plus) && (matches!(dst, "HEAD" | "@") || protected.iter().any(|p| p == dst))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pushes(cmd: &str) -> bool {
        let words: Vec<Option<String>> =
            cmd.split(' ').map(|w| if w == "$B" { None } else { Some(w.to_owned()) }).collect();
        force_pushes(&words, &["main".to_owned(), "master".to_owned()])
    }

    #[test]
    fn forced_pushes_of_protected_unnamed_or_every_branch() {
        for cmd in [
            "push --force origin main",
            "push -f origin HEAD:master",
            "push --force-with-lease origin master",
            "push --force-with-lease=main:abc123 origin main",
            "push -f",
            "push --force",
            "push --force origin",
            "push -f origin HEAD",
            "push -f origin @",
            "push -uf origin",
            "push -fu origin main",
            "push origin +master",
            "push origin +main",
            "push origin +HEAD:main",
            "push origin +refs/heads/main",
            "push origin +feature:master",
            "push -f origin feature:refs/heads/main",
            "push --mirror",
            "push --mirror origin",
            "push --force --all origin",
            "push --force-if-includes origin main",
            "-C repo push -f origin main",
            "-c push.default=current push -f",
            "push -o ci.skip -f origin main",
            "push -f $B",
            "push -f origin feature/x main",
        ] {
            assert!(pushes(cmd), "{cmd}");
        }
    }

    #[test]
    fn other_pushes_and_other_commands_pass() {
        for cmd in [
            "push",
            "push origin main",
            "push origin HEAD",
            "push -u origin main",
            "push --all origin",
            "push --force origin feature/x",
            "push origin +feature/x",
            "push origin +main:feature/x",
            "push -f origin $B",
            "push -f --tags origin",
            "push -f origin -- feature/x",
            "log -f push",
            "commit -m push",
            "status",
        ] {
            assert!(!pushes(cmd), "{cmd}");
        }
    }
}
