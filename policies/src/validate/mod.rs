//! Raw profile to typed [`Policy`]: the checks that give a profile its meaning.
//!
//! Each section has its own module (`writable`, `env`, `seccomp`, `limits`, `guards`); this one
//! holds the shared helpers ([`Src`]: positions and reasons) and the top-level fields. Validation
//! stops at the first problem and reports it with its file, line, column and key path.
//!
//! Invariants enforced here for every section: each entry has a non-empty `reason`; names are
//! well-formed; nothing is listed twice or made redundant by another entry.
//!
//! ```
//! use policies::{Policy, PolicyError, Problem};
//! let text = Policy::builtin_text("workspace").unwrap();
//! let doubled = text.replace("path = \"{home}/.cargo/git\"", "path = \"{home}/.cache/uv\"");
//! let err = Policy::from_toml("w.toml", &doubled).unwrap_err();
//! assert!(matches!(err.problem(), Some(Problem::NestedRoot { .. })), "{err}");
//! ```

mod env;
mod guards;
mod limits;
mod seccomp;
mod writable;

use std::ops::Range;

use toml::Spanned;

use crate::error::{Location, PolicyError, Problem};
use crate::policy::{LandlockRequirement, Policy};
use crate::raw::{RawLandlock, RawLandlockRequire, RawProfile, Reason};

/// The profile text being validated, for turning spans into [`Location`]s.
pub(crate) struct Src<'a> {
    pub file: &'a str,
    pub text: &'a str,
}

impl Src<'_> {
    /// A location at `span` under `key`.
    pub fn at(&self, span: Range<usize>, key: impl Into<String>) -> Location {
        Location::new(self.file, self.text, span.start, key)
    }

    /// The 1-based line of `span`, for "first defined on line N" messages.
    pub fn line(&self, span: Range<usize>) -> usize {
        crate::error::line_column(self.text, span.start).0
    }

    /// An [`PolicyError::Invalid`] at `span` under `key`.
    pub fn invalid(&self, span: Range<usize>, key: impl Into<String>, problem: Problem) -> PolicyError {
        PolicyError::Invalid { at: Box::new(self.at(span, key)), problem }
    }

    /// The reason of the entry at `owner` (named `key`): present and not blank, trimmed.
    pub fn reason(&self, owner: Range<usize>, key: &str, reason: &Reason) -> Result<String, PolicyError> {
        match reason {
            None => Err(self.invalid(owner, key, Problem::MissingReason)),
            Some(r) if r.get_ref().trim().is_empty() => {
                Err(self.invalid(r.span(), format!("{key}.reason"), Problem::EmptyReason))
            }
            Some(r) => Ok(r.get_ref().trim().to_owned()),
        }
    }

    /// A string value that must not be blank, trimmed.
    pub fn non_empty(&self, value: &Spanned<String>, key: impl Into<String>) -> Result<String, PolicyError> {
        let trimmed = value.get_ref().trim();
        if trimmed.is_empty() {
            return Err(self.invalid(value.span(), key, Problem::Empty));
        }
        Ok(trimmed.to_owned())
    }

    /// A rule name: lowercase letters, digits, `-` and `_`, starting with a letter.
    pub fn name(&self, value: &Spanned<String>, key: impl Into<String>) -> Result<String, PolicyError> {
        let name = value.get_ref();
        let well_formed = name.starts_with(|c: char| c.is_ascii_lowercase())
            && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
        if !well_formed {
            return Err(self.invalid(value.span(), key, Problem::BadName(name.clone())));
        }
        Ok(name.clone())
    }
}

/// Validate `raw` (parsed from `text`, named `file`) into a [`Policy`].
pub(crate) fn validate(file: &str, text: &str, raw: &RawProfile) -> Result<Policy, PolicyError> {
    let src = Src { file, text };
    let name = src.name(&raw.name, "name")?;
    let description = src.non_empty(&raw.description, "description")?;
    let writable = writable::writable(&src, &raw.writable)?;
    let env = env::env(&src, &raw.env)?;
    let seccomp = seccomp::seccomp(&src, &raw.seccomp)?;
    let network_reason = src.reason(raw.network.span(), "network", &raw.network.get_ref().reason)?;
    let (nested, nested_reason) = match &raw.nested {
        Some(n) => (n.get_ref().allow, src.reason(n.span(), "nested", &n.get_ref().reason)?),
        None => (false, String::new()),
    };
    let limits = limits::limits(&src, &raw.limits)?;
    let (landlock, landlock_reason) = landlock(&src, &raw.landlock)?;
    let guards = guards::guards(&src, &raw.guards)?;
    Ok(Policy {
        name,
        description,
        source: file.to_owned(),
        writable,
        env,
        seccomp,
        network: raw.network.get_ref().allow,
        network_reason,
        nested,
        nested_reason,
        limits,
        landlock,
        landlock_reason,
        guards,
    })
}

fn landlock(src: &Src<'_>, raw: &Spanned<RawLandlock>) -> Result<(LandlockRequirement, String), PolicyError> {
    let require = match raw.get_ref().require {
        RawLandlockRequire::Full => LandlockRequirement::Full,
        RawLandlockRequire::BestEffort => LandlockRequirement::BestEffort,
        RawLandlockRequire::Off => LandlockRequirement::Off,
    };
    let reason = src.reason(raw.span(), "landlock", &raw.get_ref().reason).map_err(|e| match e {
        PolicyError::Invalid { at, problem: Problem::MissingReason } if require == LandlockRequirement::Off => {
            PolicyError::Invalid { at, problem: Problem::LandlockOffWithoutReason }
        }
        other => other,
    })?;
    Ok((require, reason))
}

#[cfg(test)]
pub(crate) mod test_support {
    //! A minimal valid profile and helpers to break it, shared by the section tests.
    use crate::error::{PolicyError, Problem};
    use crate::Policy;

    /// The smallest valid profile; tests append sections or replace lines.
    pub const MINIMAL: &str = r#"name = "t"
description = "test profile"

[seccomp.ptrace]
deny = true
reason = "r"

[seccomp.tiocsti]
deny = true
reason = "r"

[seccomp.x32]
deny = true
reason = "r"

[network]
allow = false
reason = "r"

[landlock]
require = "best_effort"
reason = "r"
"#;

    /// Validate `MINIMAL` followed by `extra`.
    pub fn with(extra: &str) -> Result<Policy, PolicyError> {
        Policy::from_toml("t.toml", &format!("{MINIMAL}{extra}"))
    }

    /// The problem, line and key of the error `MINIMAL + extra` produces; panics if it is valid.
    pub fn fails(extra: &str) -> (Problem, usize, String) {
        match with(extra) {
            Ok(p) => panic!("expected an error, got {p:?}"),
            Err(PolicyError::Invalid { at, problem }) => {
                assert_eq!(at.file, "t.toml");
                (problem, at.line, at.key)
            }
            Err(other) => panic!("expected a validation error, got {other}"),
        }
    }

    /// The line number (1-based) of the first line of `extra` once appended to `MINIMAL`.
    pub fn first_extra_line() -> usize {
        MINIMAL.lines().count() + 1
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::*;
    use crate::error::Problem;
    use crate::policy::LandlockRequirement;

    #[test]
    fn minimal_profile_is_valid() {
        let p = with("").unwrap();
        assert_eq!((p.name.as_str(), p.network, p.landlock), ("t", false, LandlockRequirement::BestEffort));
        assert!(p.writable.is_empty() && p.guards.is_empty());
    }

    #[test]
    fn landlock_off_needs_a_reason() {
        let text = MINIMAL.replace("require = \"best_effort\"\nreason = \"r\"", "require = \"off\"");
        let err = crate::Policy::from_toml("t.toml", &text).unwrap_err();
        assert_eq!(err.problem(), Some(&Problem::LandlockOffWithoutReason));
        let at = err.location().unwrap();
        assert_eq!(
            (at.line, at.key.as_str()),
            (MINIMAL.lines().position(|l| l == "[landlock]").unwrap() + 1, "landlock")
        );
        assert!(err.to_string().contains("add a reason"), "{err}");
    }

    #[test]
    fn network_grant_needs_a_reason() {
        let text = MINIMAL.replace("allow = false\nreason = \"r\"", "allow = true\nreason = \"  \"");
        let err = crate::Policy::from_toml("t.toml", &text).unwrap_err();
        assert_eq!(err.problem(), Some(&Problem::EmptyReason));
        assert_eq!(err.location().unwrap().key, "network.reason");
    }

    #[test]
    fn nested_defaults_to_refused_and_a_grant_needs_a_reason() {
        assert!(!with("").unwrap().nested);
        let p = with("\n[nested]\nallow = true\nreason = \"an orchestrator job runs sub-jobs\"\n").unwrap();
        assert_eq!((p.nested, p.nested_reason.as_str()), (true, "an orchestrator job runs sub-jobs"));
        let (problem, _, key) = fails("\n[nested]\nallow = true\n");
        assert_eq!((problem, key.as_str()), (Problem::MissingReason, "nested"));
    }

    #[test]
    fn profile_name_must_be_a_name() {
        let err =
            crate::Policy::from_toml("t.toml", &MINIMAL.replace("name = \"t\"", "name = \"Bad Name\"")).unwrap_err();
        assert_eq!(err.problem(), Some(&Problem::BadName("Bad Name".into())));
        assert_eq!(err.location().unwrap().line, 1);
    }
}
