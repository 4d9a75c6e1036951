//! heddle's policy profiles: checked-in TOML data, parsed then validated into typed values.
//!
//! A profile says what a job may do: where it may write ([`WritableRoot`]), which environment it
//! sees ([`EnvPolicy`]), which syscalls it is denied ([`SeccompPolicy`]), whether it has network,
//! its cgroup [`Limits`], how much Landlock it needs ([`LandlockRequirement`]) and the command
//! [`Guard`]s the front's linter applies. Every rule carries a `reason`.
//!
//! The pipeline, one private module per step:
//! - `parse` (with `raw`): text → raw serde structs; syntax errors, unknown keys and type errors
//!   name the file, line and key.
//! - `validate`: raw → [`Policy`]; missing reasons, relative or unknown paths, nested roots,
//!   duplicated or covered rules, unknown syscalls are errors ([`Problem`]).
//! - `resolve`: [`Policy`] + session paths ([`ResolveCtx`]) → [`ResolvedPolicy`] with absolute roots.
//!
//! Builtin profiles live in `policies/profiles/*.toml` and are compiled in ([`Policy::builtin`]).
//! The format is documented in `docs/policies.md`.
//!
//! Invariants: every [`Policy`] this crate returns has passed validation (its fields are public
//! for reading; a caller who edits them owns the result); nothing here panics on any input text;
//! no `unsafe`.
//!
//! ```
//! use policies::Policy;
//! let policy = Policy::builtin("workspace").unwrap().with_network(true);
//! assert!(policy.network);
//! assert!(policy.writable.iter().all(|w| !w.reason.is_empty()));
//! assert!(policy.seccomp.deny.iter().any(|r| r.name == "unshare"));
//! assert!(Policy::builtin("nope").is_err());
//! ```

#![forbid(unsafe_code)]

mod builtin;
mod error;
pub mod extra;
pub mod git;
mod parse;
mod policy;
mod raw;
pub mod redaction;
mod resolve;
pub mod syscalls;
mod template;
mod validate;

pub use error::{Location, PolicyError, Problem};
pub use policy::{
    EnvMatch, EnvPolicy, EnvRule, EnvSet, Guard, GuardKind, GuardPattern, GuardTarget, LandlockRequirement, Limit,
    Limits, Policy, SeccompPolicy, SyscallRule, WritableRoot,
};
pub use resolve::{ResolveCtx, ResolveError, ResolvedPolicy, ResolvedRoot, SkippedRoot};
pub use template::{PathTemplate, Placeholder};

/// The profile a session gets when it names none.
pub const DEFAULT_PROFILE: &str = "workspace";

impl Policy {
    /// Parse and validate the profile `text`; `source_name` (a file name) is used in errors.
    pub fn from_toml(source_name: &str, text: &str) -> Result<Policy, PolicyError> {
        let raw = parse::parse_raw(source_name, text)?;
        validate::validate(source_name, text, &raw)
    }

    /// The builtin profile `name` (see [`Policy::names`]), parsed and validated once per process: the
    /// front and the supervisor look it up for every session they open, and the parse was a tenth of the
    /// front's work for an open.
    pub fn builtin(name: &str) -> Result<Policy, PolicyError> {
        static PARSED: [std::sync::OnceLock<Policy>; builtin::BUILTIN.len()] =
            [const { std::sync::OnceLock::new() }; builtin::BUILTIN.len()];
        let at = builtin::BUILTIN
            .iter()
            .position(|(n, _, _)| *n == name)
            .ok_or_else(|| PolicyError::UnknownProfile { name: name.to_owned(), known: Policy::names().join(", ") })?;
        if let Some(p) = PARSED[at].get() {
            return Ok(p.clone());
        }
        let (_, path, text) = builtin::BUILTIN[at];
        let policy = Policy::from_toml(path, text)?;
        Ok(PARSED[at].get_or_init(|| policy).clone())
    }

    /// The TOML text of the builtin profile `name`, e.g. to start a custom profile from.
    pub fn builtin_text(name: &str) -> Option<&'static str> {
        builtin::find(name).map(|(_, _, text)| *text)
    }

    /// The names of the builtin profiles, the default ([`DEFAULT_PROFILE`]) first.
    pub fn names() -> Vec<&'static str> {
        builtin::BUILTIN.iter().map(|(name, _, _)| *name).collect()
    }

    /// This policy with network switched on or off for one session (the `session.open` overlay).
    pub fn with_network(mut self, allow: bool) -> Policy {
        if self.network != allow {
            self.network = allow;
            self.network_reason = if allow {
                "network switched on for this session at session.open".to_owned()
            } else {
                "network switched off for this session at session.open".to_owned()
            };
        }
        self
    }

    /// This policy with jobs' own pseudo-terminals allowed or refused for one session (the
    /// `session.open {ptys}` overlay of `[seccomp.ptys]`).
    pub fn with_ptys(mut self, allow: bool) -> Policy {
        if self.seccomp.deny_ptys == allow {
            self.seccomp.deny_ptys = !allow;
            self.seccomp.ptys_reason = format!(
                "pseudo-terminals switched {} for this session at session.open",
                if allow { "on" } else { "off" }
            );
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn default_profile_is_first_and_builtin() {
        assert_eq!(Policy::names()[0], DEFAULT_PROFILE);
        let err = Policy::builtin("workspce").unwrap_err();
        assert_eq!(err.to_string(), "no builtin policy named `workspce`; use one of: workspace, readonly");
    }

    #[test]
    fn a_builtin_parsed_once_is_the_same_policy_every_time() {
        for (name, path, text) in builtin::BUILTIN {
            let fresh = Policy::from_toml(path, text).unwrap();
            assert_eq!(Policy::builtin(name).unwrap(), fresh);
            assert_eq!(Policy::builtin(name).unwrap(), fresh, "{name}, from the cache");
        }
        // An overlay changes the copy handed out, never the cached profile.
        let _ = Policy::builtin("workspace").unwrap().with_network(true);
        assert!(!Policy::builtin("workspace").unwrap().network);
    }

    #[test]
    fn network_overlay_changes_the_switch_and_its_reason() {
        let p = Policy::builtin("workspace").unwrap();
        assert!(!p.network);
        let on = p.clone().with_network(true);
        assert!(on.network && on.network_reason.contains("session.open"));
        assert_eq!(on.clone().with_network(true), on);
        assert_eq!(p.clone().with_network(false), p);
    }

    /// STYLE.md: a test flags unknown keys and redundant rules, in the builtin profiles' own shape.
    #[test]
    fn unknown_keys_and_redundant_rules_are_flagged() {
        let text = Policy::builtin_text("workspace").unwrap();
        let misspelled = text.replacen("\noptional = true", "\noptinal = true", 1);
        let err = Policy::from_toml("w.toml", &misspelled).unwrap_err();
        let PolicyError::UnknownKey { at, .. } = &err else { panic!("{err:?}") };
        assert!(at.key.starts_with("writable[") && at.key.ends_with("].optinal"), "{}", at.key);
        let line = text.lines().position(|l| l == "optional = true").unwrap() + 1;
        assert_eq!((at.file.as_str(), at.line), ("w.toml", line));

        let doubled = format!("{text}\n[[env.allow]]\nname = \"LC_ALL\"\nreason = \"locale\"\n");
        let err = Policy::from_toml("w.toml", &doubled).unwrap_err();
        assert!(matches!(err.problem(), Some(Problem::RedundantEnvRule { .. })), "{err}");
        assert_eq!(err.location().unwrap().line, text.lines().count() + 2);
    }

    #[derive(Debug, Clone)]
    enum Mutation {
        DeleteLine(usize),
        DuplicateLine(usize),
        SwapLines(usize, usize),
        ReplaceByte(usize, u8),
        Insert(usize, String),
        Truncate(usize),
    }

    fn mutation() -> impl Strategy<Value = Mutation> {
        let snippet = prop_oneof![
            Just("\n[[writable]]\n".to_owned()),
            Just("reason = \"\"\n".to_owned()),
            Just("{".to_owned()),
            Just("\"".to_owned()),
            Just("[".to_owned()),
            Just(" = ".to_owned()),
            Just("{home}/..".to_owned()),
            ".{0,12}",
        ];
        prop_oneof![
            any::<usize>().prop_map(Mutation::DeleteLine),
            any::<usize>().prop_map(Mutation::DuplicateLine),
            (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::SwapLines(a, b)),
            (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::ReplaceByte(i, b)),
            (any::<usize>(), snippet).prop_map(|(i, s)| Mutation::Insert(i, s)),
            any::<usize>().prop_map(Mutation::Truncate),
        ]
    }

    /// Apply `m` to `text`; byte-level edits are made lossy-UTF-8 again.
    fn apply(text: &str, m: &Mutation) -> String {
        let mut lines: Vec<&str> = text.lines().collect();
        let n = lines.len().max(1);
        match m {
            Mutation::DeleteLine(i) if !lines.is_empty() => {
                lines.remove(i % n);
            }
            Mutation::DuplicateLine(i) if !lines.is_empty() => lines.insert(i % n, lines[i % n]),
            Mutation::SwapLines(a, b) if !lines.is_empty() => lines.swap(a % n, b % n),
            Mutation::ReplaceByte(i, b) if !text.is_empty() => {
                let mut bytes = text.as_bytes().to_vec();
                let at = i % bytes.len();
                bytes[at] = *b;
                return String::from_utf8_lossy(&bytes).into_owned();
            }
            Mutation::Insert(i, s) => {
                let at = (0..=i % (text.len() + 1)).rev().find(|&k| text.is_char_boundary(k)).unwrap_or(0);
                return format!("{}{s}{}", &text[..at], &text[at..]);
            }
            Mutation::Truncate(i) => {
                let bytes = &text.as_bytes()[..i % (text.len() + 1)];
                return String::from_utf8_lossy(bytes).into_owned();
            }
            _ => {}
        }
        lines.join("\n") + "\n"
    }

    proptest! {
        #[test]
        fn arbitrary_strings_never_panic(text in "\\PC{0,400}") {
            let _ = Policy::from_toml("p.toml", &text);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = Policy::from_toml("p.toml", &String::from_utf8_lossy(&bytes));
        }

        #[test]
        fn mutated_builtins_never_panic(
            which in 0..builtin::BUILTIN.len(),
            mutations in proptest::collection::vec(mutation(), 1..6),
        ) {
            let mut text = builtin::BUILTIN[which].2.to_owned();
            for m in &mutations {
                text = apply(&text, m);
            }
            match Policy::from_toml("m.toml", &text) {
                Ok(p) => prop_assert!(p.writable.iter().all(|w| !w.reason.is_empty())),
                Err(e) => {
                    let at = e.location().expect("a text error has a location");
                    prop_assert!(at.line >= 1 && at.line <= text.lines().count() + 1, "{e}");
                    prop_assert!(!e.to_string().ends_with('.'), "{e}");
                }
            }
        }
    }
}
