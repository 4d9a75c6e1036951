//! `[[guard]]`: command-linter rules as data (the linter itself lives in the front).
//!
//! Invariants after this step: guard names are unique names; each guard has at least one program,
//! given by bare name (no `/`, no whitespace); every flag starts with `-` and appears once; flag
//! groups are non-empty; `message` and `reason` are not blank; no two guards of the same kind match
//! exactly the same commands.
//!
//! ```text
//! [[guard]]
//! name = "pattern-kill"
//! kind = "deny"
//! programs = ["pkill", "killall"]
//! message = "pattern kills can hit other sessions' processes; use `kill {session, job}`"
//! reason = "a pattern kill once took down other agents' jobs"
//! ```

use std::collections::HashSet;
use std::ops::Range;

use toml::Spanned;

use super::Src;
use crate::error::{PolicyError, Problem};
use crate::policy::{Guard, GuardKind, GuardPattern, GuardTarget};
use crate::raw::{RawGuard, RawGuardKind, RawGuardTarget};

/// Validate the `[[guard]]` entries in order.
pub(super) fn guards(src: &Src<'_>, raw: &[Spanned<RawGuard>]) -> Result<Vec<Guard>, PolicyError> {
    let mut out: Vec<(Guard, Range<usize>)> = Vec::with_capacity(raw.len());
    for (i, entry) in raw.iter().enumerate() {
        let key = format!("guard[{i}]");
        let g = entry.get_ref();
        let name = src.name(&g.name, format!("{key}.name"))?;
        if let Some((_, span)) = out.iter().find(|(prev, _)| prev.name == name) {
            let problem = Problem::DuplicateGuard { name, first_line: src.line(span.clone()) };
            return Err(src.invalid(g.name.span(), format!("{key}.name"), problem));
        }
        let kind = match g.kind {
            RawGuardKind::Deny => GuardKind::Deny,
            RawGuardKind::Warn => GuardKind::Warn,
        };
        let pattern = pattern(src, g, &key)?;
        if let Some((prev, span)) = out.iter().find(|(prev, _)| prev.kind == kind && prev.pattern == pattern) {
            let problem = Problem::RedundantGuard { other: prev.name.clone(), line: src.line(span.clone()) };
            return Err(src.invalid(entry.span(), key, problem));
        }
        let message = src.non_empty(&g.message, format!("{key}.message"))?;
        let reason = src.reason(entry.span(), &key, &g.reason)?;
        out.push((Guard { name, kind, pattern, message, reason }, g.name.span()));
    }
    Ok(out.into_iter().map(|(g, _)| g).collect())
}

/// The matching part of a guard.
fn pattern(src: &Src<'_>, g: &RawGuard, key: &str) -> Result<GuardPattern, PolicyError> {
    if g.programs.get_ref().is_empty() {
        return Err(src.invalid(g.programs.span(), format!("{key}.programs"), Problem::Empty));
    }
    let mut programs = Vec::new();
    for (j, p) in g.programs.get_ref().iter().enumerate() {
        let at_key = format!("{key}.programs[{j}]");
        let well_formed =
            !p.get_ref().is_empty() && !p.get_ref().contains(|c: char| c == '/' || c.is_whitespace() || c == '\0');
        if !well_formed {
            return Err(src.invalid(p.span(), at_key, Problem::BadProgram(p.get_ref().clone())));
        }
        if programs.contains(p.get_ref()) {
            return Err(src.invalid(p.span(), at_key, Problem::DuplicateItem(p.get_ref().clone())));
        }
        programs.push(p.get_ref().clone());
    }
    let mut seen = HashSet::new();
    let mut unless_flags = Vec::new();
    for (k, flag) in g.unless_flags.iter().enumerate() {
        let f = flag.get_ref();
        let invalid = |problem| src.invalid(flag.span(), format!("{key}.unless_flags[{k}]"), problem);
        if !is_flag(f) {
            return Err(invalid(Problem::BadFlag(f.clone())));
        }
        if unless_flags.contains(f) {
            return Err(invalid(Problem::DuplicateItem(f.clone())));
        }
        unless_flags.push(f.clone());
    }
    let mut flags = Vec::new();
    for (j, group) in g.flags.iter().enumerate() {
        if group.get_ref().is_empty() {
            return Err(src.invalid(group.span(), format!("{key}.flags[{j}]"), Problem::Empty));
        }
        let mut spellings = Vec::new();
        for (k, flag) in group.get_ref().iter().enumerate() {
            let invalid = |problem| src.invalid(flag.span(), format!("{key}.flags[{j}][{k}]"), problem);
            let f = flag.get_ref();
            if !is_flag(f) {
                return Err(invalid(Problem::BadFlag(f.clone())));
            }
            if !seen.insert(f.clone()) {
                return Err(invalid(Problem::DuplicateItem(f.clone())));
            }
            spellings.push(f.clone());
        }
        flags.push(spellings);
    }
    let args = words(src, &g.args, &format!("{key}.args"))?;
    let args_any = words(src, &g.args_any, &format!("{key}.args_any"))?;
    let piped_from = words(src, &g.piped_from, &format!("{key}.piped_from"))?;
    let target = g.target.map(|t| match t {
        RawGuardTarget::WritableRoot => GuardTarget::WritableRoot,
        RawGuardTarget::ForcePush => GuardTarget::ForcePush,
    });
    let branches = words(src, &g.branches, &format!("{key}.branches"))?;
    if let Some(first) = g.branches.first().filter(|_| target != Some(GuardTarget::ForcePush)) {
        return Err(src.invalid(first.span(), format!("{key}.branches"), Problem::BranchesWithoutForcePush));
    }
    Ok(GuardPattern {
        programs,
        flags,
        args,
        args_any,
        piped_from,
        max_operands: g.max_operands,
        unless_flags,
        target,
        branches,
        without_tty: g.without_tty,
        unless_stdin: g.unless_stdin,
    })
}

/// A flag's spelling: `-` and at least one more character, no whitespace, no NUL.
fn is_flag(f: &str) -> bool {
    f.len() >= 2 && f.starts_with('-') && !f.contains(|c: char| c.is_whitespace() || c == '\0')
}

/// Verbatim words (`args`, `args_any`, `piped_from`, `branches`): not empty, no NUL, each once.
fn words(src: &Src<'_>, list: &[Spanned<String>], key: &str) -> Result<Vec<String>, PolicyError> {
    let mut out: Vec<String> = Vec::new();
    for (j, arg) in list.iter().enumerate() {
        let at_key = format!("{key}[{j}]");
        if arg.get_ref().is_empty() || arg.get_ref().contains('\0') {
            return Err(src.invalid(arg.span(), at_key, Problem::Empty));
        }
        if out.contains(arg.get_ref()) {
            return Err(src.invalid(arg.span(), at_key, Problem::DuplicateItem(arg.get_ref().clone())));
        }
        out.push(arg.get_ref().clone());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use crate::error::Problem;
    use crate::policy::{GuardKind, GuardTarget};

    fn guard(name: &str, body: &str) -> String {
        format!("\n[[guard]]\nname = \"{name}\"\nkind = \"deny\"\n{body}\nmessage = \"m\"\nreason = \"r\"\n")
    }

    #[test]
    fn guards_validate() {
        let rm = guard(
            "rm-root",
            "programs = [\"rm\"]\nflags = [[\"-r\", \"-R\", \"--recursive\"]]\ntarget = \"writable_root\"",
        );
        let kill = guard("kill-all", "programs = [\"kill\"]\nargs = [\"-1\"]");
        let p = with(&(rm + &kill)).unwrap();
        assert_eq!(p.guards[0].kind, GuardKind::Deny);
        assert_eq!(p.guards[0].pattern.flags, [["-r", "-R", "--recursive"]]);
        assert_eq!(p.guards[0].pattern.target, Some(GuardTarget::WritableRoot));
        assert_eq!(p.guards[1].pattern.args, ["-1"]);
    }

    #[test]
    fn force_push_target_takes_branches_and_stdin_switch_parses() {
        let push = guard("push", "programs = [\"git\"]\ntarget = \"force_push\"\nbranches = [\"main\"]");
        let repl = guard("repl", "programs = [\"python3\"]\nunless_stdin = true");
        let p = with(&(push + &repl)).unwrap();
        assert_eq!(p.guards[0].pattern.target, Some(GuardTarget::ForcePush));
        assert_eq!(p.guards[0].pattern.branches, ["main"]);
        assert!(p.guards[1].pattern.unless_stdin && !p.guards[0].pattern.unless_stdin);
        // `branches` means nothing to another target, or to none.
        let stray = guard("push", "programs = [\"git\"]\nbranches = [\"main\"]");
        let (problem, _, key) = fails(&stray);
        assert_eq!((problem, key.as_str()), (Problem::BranchesWithoutForcePush, "guard[0].branches"));
    }

    #[test]
    fn duplicate_and_redundant_guards() {
        let line = first_extra_line();
        let (problem, at, key) = fails(&(guard("a", "programs = [\"pkill\"]") + &guard("a", "programs = [\"top\"]")));
        assert_eq!(problem, Problem::DuplicateGuard { name: "a".into(), first_line: line + 2 });
        assert_eq!((at, key.as_str()), (line + 9, "guard[1].name"));
        let (problem, _, key) = fails(&(guard("a", "programs = [\"pkill\"]") + &guard("b", "programs = [\"pkill\"]")));
        assert_eq!(problem, Problem::RedundantGuard { other: "a".into(), line: line + 2 });
        assert_eq!(key, "guard[1]");
    }

    #[test]
    fn malformed_guards() {
        assert_eq!(fails(&guard("a", "programs = []")).0, Problem::Empty);
        assert_eq!(fails(&guard("a", "programs = [\"/bin/rm\"]")).0, Problem::BadProgram("/bin/rm".into()));
        assert_eq!(fails(&guard("a", "programs = [\"rm\", \"rm\"]")).0, Problem::DuplicateItem("rm".into()));
        assert_eq!(fails(&guard("a", "programs = [\"rm\"]\nflags = [[\"r\"]]")).0, Problem::BadFlag("r".into()));
        assert_eq!(fails(&guard("a", "programs = [\"rm\"]\nflags = [[]]")).0, Problem::Empty);
        let twice = guard("a", "programs = [\"rm\"]\nflags = [[\"-r\"], [\"-f\", \"-r\"]]");
        let (problem, _, key) = fails(&twice);
        assert_eq!((problem, key.as_str()), (Problem::DuplicateItem("-r".into()), "guard[0].flags[1][1]"));
        let blank =
            "\n[[guard]]\nname = \"a\"\nkind = \"warn\"\nprograms = [\"vim\"]\nmessage = \" \"\nreason = \"r\"\n";
        assert_eq!(fails(blank).0, Problem::Empty);
    }

    #[test]
    fn unknown_kind_is_a_type_error_naming_the_key() {
        let text = format!("{MINIMAL}\n[[guard]]\nname = \"a\"\nkind = \"block\"\nprograms = [\"x\"]\nmessage = \"m\"\nreason = \"r\"\n");
        let err = crate::Policy::from_toml("t.toml", &text).unwrap_err();
        let crate::PolicyError::Type { at, message } = &err else { panic!("{err:?}") };
        assert_eq!((at.line, at.key.as_str()), (first_extra_line() + 3, "guard[0].kind"));
        assert!(message.contains("unknown variant"), "{message}");
    }
}
