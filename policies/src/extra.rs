//! Writable roots a session adds at `session.open`, within what the server allows.
//!
//! The server's operator names the directories beneath which sessions may ask for extra writable roots
//! (`heddle up --allow-writable DIR`, repeatable; none by default). A session asks for roots with
//! `session.open {writable: [...]}`; [`check_extra`] accepts each one only when it is absolute, exists,
//! is a directory, and its canonical path (symlinks followed) lies beneath the canonical path of an
//! allowed directory. The accepted, canonical paths join the profile's roots at resolution
//! ([`crate::ResolveCtx::with_extra`]), where the usual folding applies.
//!
//! The check runs twice: in the supervisor, so a refused request fails `session.open` with a clear
//! sentence, and again in the worker just before it builds its Landlock rules, so a directory swapped
//! for a symlink in between cannot widen the grant.
//!
//! ```
//! # let dir = tempfile::tempdir().unwrap();
//! # let data = dir.path().canonicalize().unwrap();
//! # std::fs::create_dir(data.join("cache")).unwrap();
//! use policies::extra::check_extra;
//! let ok = check_extra(&[data.join("cache")], &[data.clone()]).unwrap();
//! assert_eq!(ok, vec![data.join("cache")]);
//! assert!(check_extra(&["/etc".into()], &[data.clone()]).is_err());
//! assert!(check_extra(&[data.join("cache")], &[]).is_err());
//! ```

use std::path::{Path, PathBuf};

/// The most extra roots one session may add.
pub const MAX_EXTRA: usize = 32;

/// The template name under which an extra root is reported.
pub const EXTRA_TEMPLATE: &str = "session.open";

/// Why a requested root was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExtraRootError {
    #[error("{count} extra writable roots were asked for; at most {MAX_EXTRA}")]
    TooMany { count: usize },
    #[error(
        "extra writable root {path} was asked for, but this server allows none; the operator can allow \
         directories with `heddle up --allow-writable DIR`"
    )]
    NoneAllowed { path: PathBuf },
    #[error("extra writable root {path} is not an absolute path; give it from /")]
    Relative { path: PathBuf },
    #[error("extra writable root {path} cannot be used; create the directory first")]
    Missing {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("extra writable root {path} is not a directory")]
    NotDirectory { path: PathBuf },
    #[error(
        "extra writable root {path} (really {real}) is outside what this server allows ({allowed}); ask for a \
         directory beneath one of those, or have the operator allow it with `heddle up --allow-writable DIR`"
    )]
    NotAllowed { path: PathBuf, real: PathBuf, allowed: String },
}

/// Check `requested` against `allowed`; returns the canonical path of each requested root, in order.
pub fn check_extra(requested: &[PathBuf], allowed: &[PathBuf]) -> Result<Vec<PathBuf>, ExtraRootError> {
    if requested.len() > MAX_EXTRA {
        return Err(ExtraRootError::TooMany { count: requested.len() });
    }
    // An allowed directory that does not exist allows nothing (it cannot contain a real directory).
    let allowed: Vec<PathBuf> = allowed.iter().filter_map(|a| std::fs::canonicalize(a).ok()).collect();
    requested.iter().map(|path| check_one(path, &allowed)).collect()
}

fn check_one(path: &Path, allowed: &[PathBuf]) -> Result<PathBuf, ExtraRootError> {
    if allowed.is_empty() {
        return Err(ExtraRootError::NoneAllowed { path: path.to_path_buf() });
    }
    if !path.is_absolute() {
        return Err(ExtraRootError::Relative { path: path.to_path_buf() });
    }
    let real = std::fs::canonicalize(path).map_err(|source| ExtraRootError::Missing { path: path.into(), source })?;
    if !real.is_dir() {
        return Err(ExtraRootError::NotDirectory { path: path.to_path_buf() });
    }
    if allowed.iter().any(|a| real.starts_with(a)) && real != Path::new("/") {
        return Ok(real);
    }
    let allowed = allowed.iter().map(|a| a.display().to_string()).collect::<Vec<_>>().join(", ");
    Err(ExtraRootError::NotAllowed { path: path.to_path_buf(), real, allowed })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn base() -> (tempfile::TempDir, PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let b = t.path().canonicalize().unwrap();
        for d in ["allowed/a", "allowed/b", "other"] {
            std::fs::create_dir_all(b.join(d)).unwrap();
        }
        std::fs::write(b.join("allowed/file"), b"x").unwrap();
        (t, b)
    }

    #[test]
    fn roots_beneath_an_allowed_dir_pass_canonical() {
        let (_t, b) = base();
        let got = check_extra(&[b.join("allowed/a/../b"), b.join("allowed")], &[b.join("allowed")]).unwrap();
        assert_eq!(got, vec![b.join("allowed/b"), b.join("allowed")]);
    }

    #[test]
    fn a_symlink_out_of_the_allowed_dir_is_refused_by_its_real_path() {
        let (_t, b) = base();
        std::os::unix::fs::symlink(b.join("other"), b.join("allowed/link")).unwrap();
        let err = check_extra(&[b.join("allowed/link")], &[b.join("allowed")]).unwrap_err();
        assert!(matches!(&err, ExtraRootError::NotAllowed { real, .. } if *real == b.join("other")), "{err}");
        assert!(err.to_string().contains("--allow-writable"), "{err}");
    }

    #[test]
    fn relative_missing_file_and_unallowed_paths_are_refused() {
        let (_t, b) = base();
        let allowed = [b.join("allowed")];
        assert!(matches!(check_extra(&["rel".into()], &allowed), Err(ExtraRootError::Relative { .. })));
        assert!(matches!(check_extra(&[b.join("allowed/nope")], &allowed), Err(ExtraRootError::Missing { .. })));
        assert!(matches!(check_extra(&[b.join("allowed/file")], &allowed), Err(ExtraRootError::NotDirectory { .. })));
        assert!(matches!(check_extra(&[b.join("other")], &allowed), Err(ExtraRootError::NotAllowed { .. })));
        assert!(matches!(check_extra(&[b.join("other")], &[]), Err(ExtraRootError::NoneAllowed { .. })));
        assert!(matches!(check_extra(&["/".into()], &["/".into()]), Err(ExtraRootError::NotAllowed { .. })));
        let many = vec![b.join("allowed"); MAX_EXTRA + 1];
        assert!(matches!(check_extra(&many, &allowed), Err(ExtraRootError::TooMany { .. })));
    }

    proptest! {
        #[test]
        fn garbage_paths_never_panic_and_never_escape(path in "\\PC{0,40}") {
            let (_t, b) = base();
            if let Ok(ok) = check_extra(&[PathBuf::from(&path)], &[b.join("allowed")]) {
                prop_assert!(ok[0].starts_with(b.join("allowed")));
            }
        }
    }
}
