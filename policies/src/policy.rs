//! The high-level, validated form of a profile: what the launcher, worker and front act on.
//!
//! A [`Policy`] can only be built by validation ([`crate::Policy::from_toml`],
//! [`crate::Policy::builtin`]), so holding one means: every grant has a non-empty reason, every
//! writable path is an absolute [`PathTemplate`] and none lies inside another of the same base,
//! environment rules are neither duplicated nor covered by one another, every denied syscall is
//! known and listed once, and limits are in range.
//!
//! ```
//! let p = policies::Policy::builtin("workspace").unwrap();
//! let env = p.env.filter([("PATH".to_string(), "/bin".to_string()), ("AWS_SECRET_ACCESS_KEY".into(), "x".into())]);
//! assert!(env.contains(&("PATH".into(), "/bin".into())));
//! assert!(env.contains(&("TERM".into(), "dumb".into())));
//! assert!(!env.iter().any(|(k, _)| k == "AWS_SECRET_ACCESS_KEY"));
//! ```

use std::collections::HashSet;

use crate::template::PathTemplate;

/// A validated policy profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// The profile's name (`workspace`).
    pub name: String,
    /// One line saying what the profile is for.
    pub description: String,
    /// Where it came from: a builtin's repository path or the name given to `from_toml`.
    pub source: String,
    /// Directories (and files) jobs may write beneath; everything else is read-only.
    pub writable: Vec<WritableRoot>,
    /// Which environment variables reach a job, and which are forced.
    pub env: EnvPolicy,
    /// Syscalls and ioctls denied to jobs.
    pub seccomp: SeccompPolicy,
    /// Whether jobs may open sockets other than `AF_UNIX`. When false, `socket(2)` and
    /// `socketpair(2)` are denied for every other address family.
    pub network: bool,
    /// Why `network` has its value.
    pub network_reason: String,
    /// Whether the session's jobs may drive heddle itself over its control socket — and then only
    /// their own session (`run`, `wait`, `output`, … naming it); when false (the default) the front
    /// refuses every call from a connection made inside one of heddle's job cgroups.
    pub nested: bool,
    /// Why `nested` has its value (empty when the profile has no `[nested]` table).
    pub nested_reason: String,
    /// cgroup limits for the session.
    pub limits: Limits,
    /// How much Landlock enforcement a job needs before it may run.
    pub landlock: LandlockRequirement,
    /// Why `landlock` has its value.
    pub landlock_reason: String,
    /// Command-linter rules, as data (the linter lives in the front).
    pub guards: Vec<Guard>,
}

/// One writable root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WritableRoot {
    /// The path, absolute once its placeholder is expanded.
    pub template: PathTemplate,
    /// A missing path (or an unset placeholder) is skipped instead of refusing the session.
    pub optional: bool,
    /// Why jobs may write here.
    pub reason: String,
}

/// The environment a job sees: the allowed variables of the caller's environment, then the forced ones.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EnvPolicy {
    /// Variables passed through when present.
    pub allow: Vec<EnvRule>,
    /// Variables forced to a value (they replace any inherited value).
    pub set: Vec<EnvSet>,
}

/// An allowlist rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvRule {
    /// What names the rule lets through.
    pub matcher: EnvMatch,
    /// Why jobs need it.
    pub reason: String,
}

/// How an [`EnvRule`] matches a variable name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum EnvMatch {
    /// Exactly this name.
    Name(String),
    /// Every name starting with this prefix (`LC_`).
    Prefix(String),
}

impl EnvMatch {
    /// Does the rule let `name` through?
    pub fn matches(&self, name: &str) -> bool {
        match self {
            EnvMatch::Name(n) => n == name,
            EnvMatch::Prefix(p) => name.starts_with(p.as_str()),
        }
    }
}

impl std::fmt::Display for EnvMatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EnvMatch::Name(n) => f.write_str(n),
            EnvMatch::Prefix(p) => write!(f, "{p}*"),
        }
    }
}

/// A forced variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvSet {
    pub name: String,
    pub value: String,
    /// Why it is forced.
    pub reason: String,
}

impl EnvPolicy {
    /// The environment for a job: the variables of `env` that a rule allows (first occurrence of a
    /// name wins; names with `=` or NUL and values with NUL are dropped), in input order, followed
    /// by every forced variable. A forced name never also appears from `env`.
    pub fn filter(&self, env: impl IntoIterator<Item = (String, String)>) -> Vec<(String, String)> {
        let forced: HashSet<&str> = self.set.iter().map(|s| s.name.as_str()).collect();
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for (name, value) in env {
            let well_formed = !name.is_empty() && !name.contains(['=', '\0']) && !value.contains('\0');
            if well_formed && !forced.contains(name.as_str()) && self.allows(&name) && seen.insert(name.clone()) {
                out.push((name, value));
            }
        }
        out.extend(self.set.iter().map(|s| (s.name.clone(), s.value.clone())));
        out
    }

    /// Does some allow rule let `name` through?
    pub fn allows(&self, name: &str) -> bool {
        self.allow.iter().any(|r| r.matcher.matches(name))
    }
}

/// What seccomp denies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeccompPolicy {
    /// Every denied syscall, once, in profile order; includes the ptrace family when `deny_ptrace`.
    pub deny: Vec<SyscallRule>,
    /// Deny `ptrace`, `process_vm_readv` and `process_vm_writev` entirely. When false, ptrace
    /// works but Landlock confines it to the job's own domain.
    pub deny_ptrace: bool,
    pub ptrace_reason: String,
    /// Deny `ioctl(fd, TIOCSTI, ..)` (pushing input into a terminal).
    pub deny_tiocsti: bool,
    pub tiocsti_reason: String,
    /// Refuse (`EPERM`) any syscall with the x32 bit (`__X32_SYSCALL_BIT`) set.
    pub x32_guard: bool,
    pub x32_reason: String,
    /// No new namespaces by any call: true when the profile denies `unshare`. Then `clone` with a
    /// `CLONE_NEW*` flag is refused (`EPERM`) too, and jobs get `ENOSYS` from `clone3` (whose flags
    /// seccomp cannot read), which the C library takes as "use `clone`". Without it, denying `unshare`
    /// alone would leave `clone(CLONE_NEWUSER)` open.
    pub deny_new_namespaces: bool,
    /// Refuse (`EPERM`) setting the setuid or setgid bit: `chmod`, `fchmod`, `fchmodat`, `fchmodat2`,
    /// and creating a file with either bit (`open`/`openat`/`creat` with `O_CREAT` or `O_TMPFILE`,
    /// `mknod`/`mknodat`); jobs get `ENOSYS` from `openat2`, whose mode sits in memory.
    pub deny_setid: bool,
    pub setid_reason: String,
    /// Refuse extended-attribute writes in jobs (`setxattr`, `removexattr` and their `l`, `f`, `at`
    /// forms) with `EOPNOTSUPP`, what tools take as "this file system has none": the attribute's name
    /// sits in memory, where seccomp cannot read it, so `security.*`/`trusted.*`/ACLs cannot be told
    /// from `user.*`.
    pub deny_xattr: bool,
    pub xattr_reason: String,
    /// Refuse jobs pseudo-terminals of their own (`script`, `expect`, `os.openpty()`): in jobs,
    /// `ioctl(fd, TIOCSPTLCK, ..)` (`unlockpt`) answers `EPERM`, and a pty that stays locked cannot be
    /// opened from its slave side by any path. The worker opens a terminal job's PTY (`run {tty}`)
    /// before the job's filter is stacked, so terminal jobs still work. Off unless the profile says so.
    pub deny_ptys: bool,
    pub ptys_reason: String,
}

/// `[seccomp.setid]`'s reason when a profile leaves the switch out (it is then on).
pub const SETID_DEFAULT_REASON: &str =
    "a setuid or setgid file a job makes runs as its owner for anyone who executes it, outside the sandbox";
/// `[seccomp.xattr]`'s reason when a profile leaves the switch out (it is then on).
pub const XATTR_DEFAULT_REASON: &str = "extended attributes (ACLs, security.*, trusted.*) change who may do what with a file, and seccomp cannot tell their names apart";

/// One denied syscall.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyscallRule {
    /// Name, from [`crate::syscalls::TABLE`].
    pub name: &'static str,
    /// Its x86_64 number.
    pub nr: libc::c_long,
    /// The profile group it came from (`mount`, or `ptrace` for the switch).
    pub group: String,
    /// Why it is denied.
    pub reason: String,
}

/// cgroup limits.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Limits {
    /// `memory.max` in bytes.
    pub memory_max: Option<Limit<u64>>,
    /// `pids.max`.
    pub pids_max: Option<Limit<u32>>,
}

/// A limit value and why it was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit<T> {
    pub value: T,
    pub reason: String,
}

/// How much Landlock a job needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LandlockRequirement {
    /// Every access right the profile asks for must be enforced, or the job is refused.
    Full,
    /// Partial enforcement (an older kernel ABI) runs and is reported; none at all is refused.
    BestEffort,
    /// Run even where Landlock is not enforced at all.
    Off,
}

/// A command-linter rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guard {
    /// Stable name, used by `override` and the audit log.
    pub name: String,
    pub kind: GuardKind,
    pub pattern: GuardPattern,
    /// What the model is told; says what to do instead.
    pub message: String,
    /// Why the rule exists.
    pub reason: String,
}

/// Whether a guard refuses the command or annotates its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GuardKind {
    Deny,
    Warn,
}

/// What a guard matches. All present parts must match one simple command.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GuardPattern {
    /// The program, by bare name (`pkill`); any one matches.
    pub programs: Vec<String>,
    /// Flag groups: every group must be present, by any of its spellings (`["-r", "-R", "--recursive"]`).
    /// The linter expands combined short flags (`-rf`).
    pub flags: Vec<Vec<String>>,
    /// Arguments that must appear verbatim (`-1` for `kill -9 -1`).
    pub args: Vec<String>,
    /// Arguments of which at least one must appear verbatim (`main`, `master`); empty: no condition.
    pub args_any: Vec<String>,
    /// The command must read a pipe from one of these programs (`curl … | sh`); empty: no condition.
    pub piped_from: Vec<String>,
    /// Match only with at most this many operands (words not starting with `-`): `python3` alone.
    pub max_operands: Option<usize>,
    /// Match only when none of these flags is present (`--version`: the program prints and exits).
    /// Combined short flags count, as for `flags`.
    pub unless_flags: Vec<String>,
    /// An operand that must name something particular.
    pub target: Option<GuardTarget>,
    /// The protected branch names of [`GuardTarget::ForcePush`] (`main`, `master`); empty otherwise.
    pub branches: Vec<String>,
    /// Match only when the job has no terminal.
    pub without_tty: bool,
    /// Match only when the command's own stdin is neither a pipe nor an input redirect (`curl … | sh`,
    /// `sh < f`, `python3 <<EOF` read their input from there, not from a prompt).
    pub unless_stdin: bool,
}

/// What a guard's operand must name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GuardTarget {
    /// A writable root itself (or a parent of one), after resolution.
    WritableRoot,
    /// A `git push` that force-updates (`--force`, `-f`, `--force-with-lease`, a `+` refspec) one of the
    /// pattern's `branches`; or every branch (`--mirror`, `--all` forced); or a branch it does not name
    /// (`git push -f`, `git push -f origin HEAD`: the current branch, which a reading before launch
    /// cannot know).
    ForcePush,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_policy() -> EnvPolicy {
        let rule = |m: EnvMatch| EnvRule { matcher: m, reason: "r".into() };
        EnvPolicy {
            allow: vec![rule(EnvMatch::Name("PATH".into())), rule(EnvMatch::Prefix("LC_".into()))],
            set: vec![EnvSet { name: "TERM".into(), value: "dumb".into(), reason: "r".into() }],
        }
    }

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    #[test]
    fn filter_keeps_allowed_drops_the_rest_and_forces_set() {
        let env = pairs(&[("TERM", "xterm"), ("LC_ALL", "C"), ("SECRET", "s"), ("PATH", "/bin"), ("PATH", "/evil")]);
        let out = env_policy().filter(env);
        assert_eq!(out, pairs(&[("LC_ALL", "C"), ("PATH", "/bin"), ("TERM", "dumb")]));
    }

    #[test]
    fn filter_drops_malformed_entries() {
        let env = pairs(&[("LC_A=B", "x"), ("LC_B", "a\0b"), ("", "x")]);
        assert_eq!(env_policy().filter(env), pairs(&[("TERM", "dumb")]));
    }

    #[test]
    fn prefix_rule_does_not_match_the_bare_stem() {
        assert!(EnvMatch::Prefix("LC_".into()).matches("LC_"));
        assert!(!EnvMatch::Prefix("LC_".into()).matches("LC"));
        assert!(!EnvMatch::Name("PATH".into()).matches("PATHX"));
    }
}
