//! Errors from reading and validating a profile.
//!
//! Every error that concerns a profile's text carries a [`Location`]: the file (or the builtin's
//! source path), the 1-based line and column, and the dotted key path (`writable[2].path`) of the
//! offending entry. Messages are lowercase, have no final period, and say what to do next.
//!
//! Invariants: `line` and `column` are at least 1; `key` is empty only when the problem is not
//! inside any key (a missing top-level field, a syntax error before the first key).
//!
//! ```
//! let err = policies::Policy::from_toml("p.toml", "name = \"x\"\nbogus = 1\n").unwrap_err();
//! let at = err.location().unwrap();
//! assert_eq!((at.file.as_str(), at.line, at.key.as_str()), ("p.toml", 2, "bogus"));
//! assert!(err.to_string().starts_with("p.toml:2:1: `bogus`: unknown key"));
//! ```

use std::fmt;

/// Where in a profile a problem sits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The file name given to [`crate::Policy::from_toml`] (for builtins, their path in the repository).
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column, counted in characters.
    pub column: usize,
    /// Dotted key path such as `seccomp.deny[1].syscalls[0]`; empty at the top level.
    pub key: String,
}

impl Location {
    /// Locate byte `offset` of `text` (clamped to its length) in `file`, under `key`.
    pub(crate) fn new(file: &str, text: &str, offset: usize, key: impl Into<String>) -> Self {
        let (line, column) = line_column(text, offset);
        Location { file: file.to_owned(), line, column, key: key.into() }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)?;
        if !self.key.is_empty() {
            write!(f, ": `{}`", self.key)?;
        }
        Ok(())
    }
}

/// Convert a byte offset into a 1-based (line, column), the column counted in characters.
///
/// Works on bytes, so an offset that is out of range or inside a multi-byte character cannot panic.
pub(crate) fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let bytes = &text.as_bytes()[..offset.min(text.len())];
    let line_start = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let line = bytes.iter().filter(|&&b| b == b'\n').count() + 1;
    // Count UTF-8 leading bytes: every byte that is not a continuation byte starts a character.
    let column = bytes[line_start..].iter().filter(|&&b| (b & 0xC0) != 0x80).count() + 1;
    (line, column)
}

/// Errors from [`crate::Policy::from_toml`], [`crate::Policy::builtin`] and the other constructors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// The text is not valid TOML.
    #[error("{at}: {message}; fix the TOML syntax")]
    Syntax { at: Box<Location>, message: String },
    /// A key the profile format does not have (often a misspelling).
    #[error("{at}: unknown key; {expected} (check the spelling against docs/policies.md)")]
    UnknownKey { at: Box<Location>, expected: String },
    /// A value of the wrong type, a missing field, an unknown enum value.
    #[error("{at}: {message}; see docs/policies.md for the profile format")]
    Type { at: Box<Location>, message: String },
    /// Well-formed TOML describing an impossible, redundant or unexplained rule.
    #[error("{at}: {problem}")]
    Invalid { at: Box<Location>, problem: Problem },
    /// [`crate::Policy::builtin`] was asked for a name that is not built in.
    #[error("no builtin policy named `{name}`; use one of: {known}")]
    UnknownProfile { name: String, known: String },
}

impl PolicyError {
    /// The place in the profile text this error points at, if it concerns a profile's text.
    pub fn location(&self) -> Option<&Location> {
        match self {
            PolicyError::Syntax { at, .. }
            | PolicyError::UnknownKey { at, .. }
            | PolicyError::Type { at, .. }
            | PolicyError::Invalid { at, .. } => Some(at.as_ref()),
            PolicyError::UnknownProfile { .. } => None,
        }
    }

    /// The validation problem, for [`PolicyError::Invalid`].
    pub fn problem(&self) -> Option<&Problem> {
        match self {
            PolicyError::Invalid { problem, .. } => Some(problem),
            _ => None,
        }
    }
}

/// What is wrong with a well-formed profile. Each message says how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Problem {
    #[error("has no reason; add `reason = \"...\"` saying why this rule exists")]
    MissingReason,
    #[error("reason is empty; say why this rule exists")]
    EmptyReason,
    #[error("landlock `off` lets jobs write wherever their uid can; add a reason or use `best_effort`")]
    LandlockOffWithoutReason,
    #[error("is empty; give a value")]
    Empty,
    #[error(
        "path `{0}` is relative; start it with `/` or a placeholder such as `{{project}}` (or `{{home}}` for `~`)"
    )]
    RelativePath(String),
    #[error(
        "unknown placeholder `{{{0}}}`; use one of {{project}}, {{session_tmp}}, {{home}}, {{gitdir}}, {{git_common_dir}}"
    )]
    UnknownPlaceholder(String),
    #[error("placeholder `{{{0}}}` must start the path (it stands for an absolute path); move it to the front")]
    PlaceholderNotFirst(String),
    #[error("path `{0}` has an unbalanced `{{` or `}}`; write placeholders as `{{name}}`")]
    UnbalancedBrace(String),
    #[error("path `{0}` contains `..`; write the directory it leads to instead")]
    ParentComponent(String),
    #[error("path `{0}` contains a NUL byte; remove it")]
    NulInPath(String),
    #[error("`/` as a writable root makes everything writable; name the directories jobs need")]
    WholeFilesystem,
    #[error("`{path}` is listed twice (first on line {first_line}); remove this rule")]
    DuplicateRoot { path: String, first_line: usize },
    #[error("`{path}` lies inside writable root `{outer}` (line {outer_line}), so this rule is redundant; remove it")]
    NestedRoot { path: String, outer: String, outer_line: usize },
    #[error(
        "`{path}` contains writable root `{inner}` (line {inner_line}), which is then redundant; remove that rule"
    )]
    ContainsRoot { path: String, inner: String, inner_line: usize },
    #[error("give exactly one of `name` or `prefix`")]
    EnvRuleShape,
    #[error("`{0}` is not an environment variable name; use letters, digits and `_`, not starting with a digit")]
    InvalidEnvName(String),
    #[error("`{rule}` is already allowed on line {first_line}; remove this rule")]
    DuplicateEnvRule { rule: String, first_line: usize },
    #[error("`{rule}` is already covered by `{covered_by}` (line {line}), so this rule is redundant; remove it")]
    RedundantEnvRule { rule: String, covered_by: String, line: usize },
    #[error("`{name}` is forced by `env.set` (line {set_line}) so allowing it is redundant; remove one of the two")]
    SetAndAllowed { name: String, set_line: usize },
    #[error("`{name}` is already set on line {first_line}; remove this rule")]
    DuplicateSet { name: String, first_line: usize },
    #[error("the value contains a NUL byte, which no environment can carry; remove it")]
    NulInValue,
    #[error("unknown syscall `{0}`; use a name from the table in policies/src/syscalls.rs (or add it there)")]
    UnknownSyscall(String),
    #[error("syscall `{name}` is already denied on line {first_line}; remove this entry")]
    DuplicateSyscall { name: String, first_line: usize },
    #[error("`{0}` is governed by the `seccomp.ptrace` switch; remove it from this group")]
    PtraceInGroup(String),
    #[error("group `{name}` is already defined on line {first_line}; merge the two groups")]
    DuplicateGroup { name: String, first_line: usize },
    #[error(
        "`{0}` is not a size; write bytes as a positive integer or with a suffix K, M, G or T (binary), e.g. \"4G\""
    )]
    BadSize(String),
    #[error("{value} is out of range; use a value from {min} to {max}")]
    OutOfRange { value: String, min: u64, max: u64 },
    #[error("`{0}` is not an integer; write a whole number such as 4096")]
    NotAnInteger(String),
    #[error("`{0}` is not a name; use lowercase letters, digits, `-` and `_`, starting with a letter")]
    BadName(String),
    #[error("`{0}` is not a program name; give the bare name as typed in a command, e.g. `pkill`")]
    BadProgram(String),
    #[error("`{0}` is not a flag; flags start with `-`")]
    BadFlag(String),
    #[error("guard `{name}` is already defined on line {first_line}; rename or remove one")]
    DuplicateGuard { name: String, first_line: usize },
    #[error("guard matches exactly what guard `{other}` (line {line}) matches, so it is redundant; merge them")]
    RedundantGuard { other: String, line: usize },
    #[error("`{0}` is listed twice; remove one")]
    DuplicateItem(String),
    #[error("`branches` is read only by `target = \"force_push\"`; add that target or remove `branches`")]
    BranchesWithoutForcePush,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_column_counts_lines_and_characters() {
        let text = "a = 1\nbé = 2\n";
        assert_eq!(line_column(text, 0), (1, 1));
        assert_eq!(line_column(text, 6), (2, 1));
        // `=` after the two-byte `é` is the 4th character of line 2.
        assert_eq!(line_column(text, 10), (2, 4));
        // Out-of-range and mid-character offsets do not panic.
        assert_eq!(line_column(text, 1000).0, 3);
        let _ = line_column(text, 8);
    }

    #[test]
    fn location_renders_file_line_column_and_key() {
        let at = Location { file: "p.toml".into(), line: 3, column: 7, key: "network.allow".into() };
        assert_eq!(at.to_string(), "p.toml:3:7: `network.allow`");
        let top = Location { key: String::new(), ..at };
        assert_eq!(top.to_string(), "p.toml:3:7");
    }
}
