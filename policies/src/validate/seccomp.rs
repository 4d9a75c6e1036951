//! `[seccomp]`: deny groups and the ptrace, TIOCSTI, x32, setid, xattr and ptys switches.
//!
//! Invariants after this step: every denied syscall is in [`crate::syscalls::TABLE`] and denied
//! once across all groups; group names are unique names; the ptrace family is only controlled by
//! the `seccomp.ptrace` switch, whose denial adds it to the flat deny list (group `ptrace`); every
//! group and switch carries a reason; denying `unshare` denies new namespaces by every call
//! ([`SeccompPolicy::deny_new_namespaces`]).
//!
//! ```text
//! [[seccomp.deny]]
//! group = "namespaces"
//! syscalls = ["unshare", "setns", "unshare"]   -> error: `unshare` is already denied on line 3
//! reason = "..."
//! ```

use std::collections::HashMap;
use std::ops::Range;

use toml::Spanned;

use super::Src;
use crate::error::{PolicyError, Problem};
use crate::policy::{SeccompPolicy, SyscallRule};
use crate::raw::{RawDenyGroup, RawSeccomp, RawSwitch};
use crate::syscalls::{self, PTRACE_FAMILY};

/// Validate the `[seccomp]` table.
pub(super) fn seccomp(src: &Src<'_>, raw: &Spanned<RawSeccomp>) -> Result<SeccompPolicy, PolicyError> {
    let r = raw.get_ref();
    let mut deny = Vec::new();
    // Where each group and syscall was first named: its span, turned into a line only for an error.
    let mut groups: HashMap<String, Range<usize>> = HashMap::new();
    let mut first_line: HashMap<&'static str, Range<usize>> = HashMap::new();
    for (i, entry) in r.deny.iter().enumerate() {
        let key = format!("seccomp.deny[{i}]");
        let group = src.name(&entry.get_ref().group, format!("{key}.group"))?;
        if let Some(span) = groups.get(&group) {
            let problem = Problem::DuplicateGroup { name: group, first_line: src.line(span.clone()) };
            return Err(src.invalid(entry.get_ref().group.span(), format!("{key}.group"), problem));
        }
        groups.insert(group.clone(), entry.get_ref().group.span());
        let reason = src.reason(entry.span(), &key, &entry.get_ref().reason)?;
        for (name, nr) in group_syscalls(src, entry, &key, &mut first_line)? {
            deny.push(SyscallRule { name, nr, group: group.clone(), reason: reason.clone() });
        }
    }
    let (deny_ptrace, ptrace_reason) = switch(src, &r.ptrace, "seccomp.ptrace")?;
    let (deny_tiocsti, tiocsti_reason) = switch(src, &r.tiocsti, "seccomp.tiocsti")?;
    let (x32_guard, x32_reason) = switch(src, &r.x32, "seccomp.x32")?;
    if deny_ptrace {
        for name in PTRACE_FAMILY {
            let nr = syscalls::number(name).unwrap_or_default();
            deny.push(SyscallRule { name, nr, group: "ptrace".into(), reason: ptrace_reason.clone() });
        }
    }
    let deny_new_namespaces = deny.iter().any(|r| r.name == "unshare");
    let optional = |raw: &Option<Spanned<RawSwitch>>, key: &str, default: &str| match raw {
        Some(raw) => switch(src, raw, key),
        None => Ok((true, default.to_owned())),
    };
    let (deny_setid, setid_reason) = optional(&r.setid, "seccomp.setid", crate::policy::SETID_DEFAULT_REASON)?;
    let (deny_xattr, xattr_reason) = optional(&r.xattr, "seccomp.xattr", crate::policy::XATTR_DEFAULT_REASON)?;
    let (deny_ptys, ptys_reason) = match &r.ptys {
        Some(raw) => switch(src, raw, "seccomp.ptys")?,
        None => (false, String::new()),
    };
    Ok(SeccompPolicy {
        deny,
        deny_ptrace,
        ptrace_reason,
        deny_tiocsti,
        tiocsti_reason,
        x32_guard,
        x32_reason,
        deny_new_namespaces,
        deny_setid,
        setid_reason,
        deny_xattr,
        xattr_reason,
        deny_ptys,
        ptys_reason,
    })
}

/// The syscalls of one group, each known, not ptrace-family, and not denied before.
fn group_syscalls(
    src: &Src<'_>,
    entry: &Spanned<RawDenyGroup>,
    key: &str,
    first_line: &mut HashMap<&'static str, Range<usize>>,
) -> Result<Vec<(&'static str, libc::c_long)>, PolicyError> {
    let list = &entry.get_ref().syscalls;
    if list.is_empty() {
        return Err(src.invalid(entry.span(), format!("{key}.syscalls"), Problem::Empty));
    }
    let mut out = Vec::with_capacity(list.len());
    for (j, name) in list.iter().enumerate() {
        let at_key = format!("{key}.syscalls[{j}]");
        let invalid = |problem| src.invalid(name.span(), at_key.clone(), problem);
        if PTRACE_FAMILY.contains(&name.get_ref().as_str()) {
            return Err(invalid(Problem::PtraceInGroup(name.get_ref().clone())));
        }
        let Some(&(known, nr)) = syscalls::TABLE.iter().find(|(n, _)| n == name.get_ref()) else {
            return Err(invalid(Problem::UnknownSyscall(name.get_ref().clone())));
        };
        if let Some(span) = first_line.get(known) {
            let line = src.line(span.clone());
            return Err(invalid(Problem::DuplicateSyscall { name: known.to_owned(), first_line: line }));
        }
        first_line.insert(known, name.span());
        out.push((known, nr));
    }
    Ok(out)
}

/// A deny switch and its reason.
fn switch(src: &Src<'_>, raw: &Spanned<RawSwitch>, key: &str) -> Result<(bool, String), PolicyError> {
    let reason = src.reason(raw.span(), key, &raw.get_ref().reason)?;
    Ok((raw.get_ref().deny, reason))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use crate::error::Problem;

    fn group(name: &str, syscalls: &str) -> String {
        format!("\n[[seccomp.deny]]\ngroup = \"{name}\"\nsyscalls = [{syscalls}]\nreason = \"r\"\n")
    }

    #[test]
    fn groups_flatten_with_numbers_and_ptrace_switch_adds_its_family() {
        let p = with(&group("namespaces", "\"unshare\", \"setns\"")).unwrap();
        let names: Vec<_> = p.seccomp.deny.iter().map(|r| (r.name, r.group.as_str())).collect();
        assert_eq!(
            names,
            [
                ("unshare", "namespaces"),
                ("setns", "namespaces"),
                ("ptrace", "ptrace"),
                ("process_vm_readv", "ptrace"),
                ("process_vm_writev", "ptrace")
            ]
        );
        assert_eq!(p.seccomp.deny[0].nr, libc::SYS_unshare);
        assert!(p.seccomp.deny_ptrace && p.seccomp.deny_tiocsti && p.seccomp.x32_guard);
        assert!(p.seccomp.deny_new_namespaces, "denying unshare denies clone's namespace flags too");
        assert!(!with(&group("misc", "\"setns\"")).unwrap().seccomp.deny_new_namespaces);
        let allowed = MINIMAL.replacen("[seccomp.ptrace]\ndeny = true", "[seccomp.ptrace]\ndeny = false", 1);
        let p = crate::Policy::from_toml("t.toml", &allowed).unwrap();
        assert!(!p.seccomp.deny_ptrace && p.seccomp.deny.is_empty());
    }

    #[test]
    fn unknown_syscall_is_named_with_its_position() {
        let (problem, at, key) = fails(&group("misc", "\"mount\", \"mount2\""));
        assert_eq!(problem, Problem::UnknownSyscall("mount2".into()));
        assert_eq!((at, key.as_str()), (first_extra_line() + 3, "seccomp.deny[0].syscalls[1]"));
    }

    #[test]
    fn syscall_denied_twice_across_groups() {
        let line = first_extra_line();
        let (problem, at, key) = fails(&(group("a", "\"bpf\"") + &group("b", "\"keyctl\", \"bpf\"")));
        assert_eq!(problem, Problem::DuplicateSyscall { name: "bpf".into(), first_line: line + 3 });
        assert_eq!((at, key.as_str()), (line + 8, "seccomp.deny[1].syscalls[1]"));
    }

    #[test]
    fn group_shape_errors() {
        assert!(matches!(fails(&(group("a", "\"bpf\"") + &group("a", "\"kcmp\""))).0, Problem::DuplicateGroup { .. }));
        assert_eq!(fails(&group("a", "")).0, Problem::Empty);
        assert_eq!(fails(&group("a", "\"ptrace\"")).0, Problem::PtraceInGroup("ptrace".into()));
        assert_eq!(fails(&group("A B", "\"bpf\"")).0, Problem::BadName("A B".into()));
        let no_reason = "\n[[seccomp.deny]]\ngroup = \"a\"\nsyscalls = [\"bpf\"]\n";
        let (problem, _, key) = fails(no_reason);
        assert_eq!((problem, key.as_str()), (Problem::MissingReason, "seccomp.deny[0]"));
    }

    #[test]
    fn ptys_are_allowed_unless_the_profile_denies_them() {
        let p = crate::Policy::from_toml("t.toml", MINIMAL).unwrap();
        assert!(!p.seccomp.deny_ptys, "absent: jobs may open pseudo-terminals");
        let text =
            MINIMAL.replacen("[seccomp.x32]", "[seccomp.ptys]\ndeny = true\nreason = \"no ptys\"\n\n[seccomp.x32]", 1);
        let p = crate::Policy::from_toml("t.toml", &text).unwrap();
        assert!(p.seccomp.deny_ptys);
        assert_eq!(p.seccomp.ptys_reason, "no ptys");
        let text = MINIMAL.replacen("[seccomp.x32]", "[seccomp.ptys]\ndeny = true\n\n[seccomp.x32]", 1);
        let err = crate::Policy::from_toml("t.toml", &text).unwrap_err();
        assert_eq!(err.location().unwrap().key, "seccomp.ptys");
    }

    #[test]
    fn switch_without_reason() {
        let text = MINIMAL.replacen("[seccomp.x32]\ndeny = true\nreason = \"r\"", "[seccomp.x32]\ndeny = false", 1);
        let err = crate::Policy::from_toml("t.toml", &text).unwrap_err();
        assert_eq!(err.problem(), Some(&Problem::MissingReason));
        assert_eq!(err.location().unwrap().key, "seccomp.x32");
    }
}
