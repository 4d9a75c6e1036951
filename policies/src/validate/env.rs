//! `[[env.allow]]` and `[[env.set]]`: the environment allowlist and the forced variables.
//!
//! Invariants after this step: every allow rule has exactly one of `name` or `prefix`, both
//! well-formed variable names; no rule repeats or is covered by another (`LC_ALL` under `LC_`,
//! `XDG_DATA_` under `XDG_`); a forced name is set once and not also allowed by name (the forced
//! value always wins, so allowing it too would be dead). Forcing a name that a prefix allows is
//! fine: the prefix still lets the rest of its family through.
//!
//! ```text
//! [[env.allow]]
//! prefix = "LC_"
//! reason = "locale categories"
//! [[env.allow]]
//! name = "LC_ALL"       -> error: already covered by `LC_*`
//! reason = "..."
//! ```

use std::ops::Range;

use toml::Spanned;

use super::Src;
use crate::error::{PolicyError, Problem};
use crate::policy::{EnvMatch, EnvPolicy, EnvRule, EnvSet};
use crate::raw::{RawEnv, RawEnvAllow};

/// Validate the `[env]` table.
pub(super) fn env(src: &Src<'_>, raw: &RawEnv) -> Result<EnvPolicy, PolicyError> {
    let mut allow: Vec<(EnvRule, Range<usize>)> = Vec::with_capacity(raw.allow.len());
    for (i, entry) in raw.allow.iter().enumerate() {
        let key = format!("env.allow[{i}]");
        let matcher = matcher(src, entry, &key)?;
        for (j, (prev, prev_span)) in allow.iter().enumerate() {
            // Lines are counted only for an error: counting is a walk of the text up to the span.
            let line = || src.line(prev_span.clone());
            if prev.matcher == matcher {
                let problem = Problem::DuplicateEnvRule { rule: matcher.to_string(), first_line: line() };
                return Err(src.invalid(entry.span(), key, problem));
            }
            if covers(&prev.matcher, &matcher) {
                let problem = Problem::RedundantEnvRule {
                    rule: matcher.to_string(),
                    covered_by: prev.matcher.to_string(),
                    line: line(),
                };
                return Err(src.invalid(entry.span(), key, problem));
            }
            if covers(&matcher, &prev.matcher) {
                let problem = Problem::RedundantEnvRule {
                    rule: prev.matcher.to_string(),
                    covered_by: matcher.to_string(),
                    line: src.line(entry.span()),
                };
                return Err(src.invalid(prev_span.clone(), format!("env.allow[{j}]"), problem));
            }
        }
        let reason = src.reason(entry.span(), &key, &entry.get_ref().reason)?;
        allow.push((EnvRule { matcher, reason }, entry.span()));
    }
    let set = set(src, raw, &allow)?;
    Ok(EnvPolicy { allow: allow.into_iter().map(|(rule, _)| rule).collect(), set })
}

/// Does rule `outer` let through every name `inner` does (and is not the same rule)?
fn covers(outer: &EnvMatch, inner: &EnvMatch) -> bool {
    match (outer, inner) {
        (EnvMatch::Prefix(p), EnvMatch::Name(n)) => n.starts_with(p.as_str()),
        (EnvMatch::Prefix(p), EnvMatch::Prefix(q)) => q.starts_with(p.as_str()) && p != q,
        (EnvMatch::Name(_), _) => false,
    }
}

/// The matcher of one allow entry: exactly one of `name` and `prefix`, well-formed.
fn matcher(src: &Src<'_>, entry: &Spanned<RawEnvAllow>, key: &str) -> Result<EnvMatch, PolicyError> {
    match (&entry.get_ref().name, &entry.get_ref().prefix) {
        (Some(name), None) => Ok(EnvMatch::Name(var_name(src, name, &format!("{key}.name"))?)),
        (None, Some(prefix)) => Ok(EnvMatch::Prefix(var_name(src, prefix, &format!("{key}.prefix"))?)),
        _ => Err(src.invalid(entry.span(), key, Problem::EnvRuleShape)),
    }
}

/// A variable name (or prefix): `[A-Za-z_][A-Za-z0-9_]*`.
fn var_name(src: &Src<'_>, value: &Spanned<String>, key: &str) -> Result<String, PolicyError> {
    let name = value.get_ref();
    let well_formed = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !well_formed {
        return Err(src.invalid(value.span(), key, Problem::InvalidEnvName(name.clone())));
    }
    Ok(name.clone())
}

/// Validate `[[env.set]]`, checking each against the allow rules.
fn set(src: &Src<'_>, raw: &RawEnv, allow: &[(EnvRule, Range<usize>)]) -> Result<Vec<EnvSet>, PolicyError> {
    let mut out: Vec<(EnvSet, Range<usize>)> = Vec::with_capacity(raw.set.len());
    for (i, entry) in raw.set.iter().enumerate() {
        let key = format!("env.set[{i}]");
        let e = entry.get_ref();
        let name = var_name(src, &e.name, &format!("{key}.name"))?;
        if e.value.get_ref().contains('\0') {
            return Err(src.invalid(e.value.span(), format!("{key}.value"), Problem::NulInValue));
        }
        if let Some((_, span)) = out.iter().find(|(s, _)| s.name == name) {
            let problem = Problem::DuplicateSet { name, first_line: src.line(span.clone()) };
            return Err(src.invalid(entry.span(), key, problem));
        }
        if let Some(j) = allow.iter().position(|(r, _)| r.matcher == EnvMatch::Name(name.clone())) {
            let problem = Problem::SetAndAllowed { name, set_line: src.line(entry.span()) };
            return Err(src.invalid(allow[j].1.clone(), format!("env.allow[{j}]"), problem));
        }
        let reason = src.reason(entry.span(), &key, &e.reason)?;
        out.push((EnvSet { name, value: e.value.get_ref().clone(), reason }, entry.span()));
    }
    Ok(out.into_iter().map(|(s, _)| s).collect())
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use crate::error::Problem;
    use crate::policy::EnvMatch;

    fn allow(field: &str, value: &str) -> String {
        format!("\n[[env.allow]]\n{field} = \"{value}\"\nreason = \"r\"\n")
    }

    fn set(name: &str, value: &str) -> String {
        format!("\n[[env.set]]\nname = \"{name}\"\nvalue = \"{value}\"\nreason = \"r\"\n")
    }

    #[test]
    fn allow_and_set_validate() {
        let p = with(&(allow("name", "PATH") + &allow("prefix", "LC_") + &set("TERM", "dumb"))).unwrap();
        assert_eq!(p.env.allow[1].matcher, EnvMatch::Prefix("LC_".into()));
        assert_eq!((p.env.set[0].name.as_str(), p.env.set[0].value.as_str()), ("TERM", "dumb"));
    }

    #[test]
    fn duplicated_rule_is_an_error_on_the_second() {
        let line = first_extra_line();
        let (problem, at, key) = fails(&(allow("name", "PATH") + &allow("name", "PATH")));
        assert_eq!(problem, Problem::DuplicateEnvRule { rule: "PATH".into(), first_line: line + 1 });
        assert_eq!((at, key.as_str()), (line + 5, "env.allow[1]"));
    }

    #[test]
    fn rule_covered_by_a_prefix_is_redundant_either_way_round() {
        let (problem, _, key) = fails(&(allow("prefix", "LC_") + &allow("name", "LC_ALL")));
        assert!(matches!(problem, Problem::RedundantEnvRule { ref rule, .. } if rule == "LC_ALL"));
        assert_eq!(key, "env.allow[1]");
        let (problem, _, key) = fails(&(allow("name", "XDG_DATA_HOME") + &allow("prefix", "XDG_")));
        assert!(matches!(problem, Problem::RedundantEnvRule { ref rule, .. } if rule == "XDG_DATA_HOME"));
        assert_eq!(key, "env.allow[0]");
        let (problem, _, _) = fails(&(allow("prefix", "XDG_") + &allow("prefix", "XDG_DATA_")));
        assert!(matches!(problem, Problem::RedundantEnvRule { .. }), "{problem:?}");
    }

    #[test]
    fn malformed_rules() {
        assert_eq!(fails(&allow("name", "A-B")).0, Problem::InvalidEnvName("A-B".into()));
        assert_eq!(fails(&allow("prefix", "")).0, Problem::InvalidEnvName(String::new()));
        let both = "\n[[env.allow]]\nname = \"A\"\nprefix = \"B\"\nreason = \"r\"\n";
        assert_eq!(fails(both).0, Problem::EnvRuleShape);
        assert_eq!(fails(&set("A", "x\\u0000y")).0, Problem::NulInValue);
    }

    #[test]
    fn forced_variable_twice_or_also_allowed() {
        let (problem, _, key) = fails(&(set("TERM", "dumb") + &set("TERM", "xterm")));
        assert!(matches!(problem, Problem::DuplicateSet { .. }), "{problem:?}");
        assert_eq!(key, "env.set[1]");
        let (problem, _, key) = fails(&(allow("name", "TERM") + &set("TERM", "dumb")));
        assert!(matches!(problem, Problem::SetAndAllowed { .. }), "{problem:?}");
        assert_eq!(key, "env.allow[0]");
        // A forced member of an allowed family is fine.
        assert!(with(&(allow("prefix", "LC_") + &set("LC_ALL", "C.UTF-8"))).is_ok());
    }
}
