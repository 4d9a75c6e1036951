//! The low-level form of a profile: serde structs that mirror the TOML exactly.
//!
//! These types only say what keys exist and what type each value has; every struct denies unknown
//! fields, so a misspelled key is an error with its position. Nothing here is checked for meaning
//! (reasons, paths, syscall names): [`crate::validate`] turns these into the typed values of
//! [`crate::policy`], the way ripgrep turns its low-level arguments into high-level ones.
//!
//! Invariant: every value whose position a later error may need to name is wrapped in
//! [`Spanned`], so validation errors point at the line of the offending entry.
//!
//! ```text
//! [[writable]]                      -> RawWritable { path, optional, reason }
//! path = "{home}/.cache"
//! reason = "tool caches"
//! ```

use serde::Deserialize;
use toml::Spanned;

/// A `reason = "..."` entry; optional here so that its absence is reported by validation with a
/// message of its own, not as a generic missing field.
pub(crate) type Reason = Option<Spanned<String>>;

/// A whole profile file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawProfile {
    pub name: Spanned<String>,
    pub description: Spanned<String>,
    #[serde(default)]
    pub writable: Vec<Spanned<RawWritable>>,
    #[serde(default)]
    pub env: RawEnv,
    pub seccomp: Spanned<RawSeccomp>,
    pub network: Spanned<RawNetwork>,
    /// `[nested]`: may the session's jobs drive heddle itself? Absent: no.
    #[serde(default)]
    pub nested: Option<Spanned<RawNested>>,
    #[serde(default)]
    pub limits: RawLimits,
    pub landlock: Spanned<RawLandlock>,
    #[serde(default, rename = "guard")]
    pub guards: Vec<Spanned<RawGuard>>,
}

/// One `[[writable]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawWritable {
    pub path: Spanned<String>,
    #[serde(default)]
    pub optional: bool,
    pub reason: Reason,
}

/// The `[env]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawEnv {
    #[serde(default)]
    pub allow: Vec<Spanned<RawEnvAllow>>,
    #[serde(default)]
    pub set: Vec<Spanned<RawEnvSet>>,
}

/// One `[[env.allow]]` entry: exactly one of `name` or `prefix`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawEnvAllow {
    pub name: Option<Spanned<String>>,
    pub prefix: Option<Spanned<String>>,
    pub reason: Reason,
}

/// One `[[env.set]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawEnvSet {
    pub name: Spanned<String>,
    pub value: Spanned<String>,
    pub reason: Reason,
}

/// The `[seccomp]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSeccomp {
    #[serde(default)]
    pub deny: Vec<Spanned<RawDenyGroup>>,
    pub ptrace: Spanned<RawSwitch>,
    pub tiocsti: Spanned<RawSwitch>,
    pub x32: Spanned<RawSwitch>,
    /// Absent: denied, with the built-in reason.
    #[serde(default)]
    pub setid: Option<Spanned<RawSwitch>>,
    /// Absent: denied, with the built-in reason.
    #[serde(default)]
    pub xattr: Option<Spanned<RawSwitch>>,
    /// Absent: allowed (jobs may open their own pseudo-terminals).
    #[serde(default)]
    pub ptys: Option<Spanned<RawSwitch>>,
}

/// One `[[seccomp.deny]]` group.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDenyGroup {
    pub group: Spanned<String>,
    pub syscalls: Vec<Spanned<String>>,
    pub reason: Reason,
}

/// A deny switch such as `[seccomp.ptrace]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSwitch {
    pub deny: bool,
    pub reason: Reason,
}

/// The `[network]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawNetwork {
    pub allow: bool,
    pub reason: Reason,
}

/// The `[nested]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawNested {
    pub allow: bool,
    pub reason: Reason,
}

/// The `[limits]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLimits {
    pub memory_max: Option<Spanned<RawLimit>>,
    pub pids_max: Option<Spanned<RawLimit>>,
}

/// One limit: `value` is an integer or (for sizes) a string with a suffix; validation decides.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLimit {
    pub value: Spanned<toml::Value>,
    pub reason: Reason,
}

/// The `[landlock]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLandlock {
    pub require: RawLandlockRequire,
    pub reason: Reason,
}

/// `landlock.require`.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum RawLandlockRequire {
    Full,
    BestEffort,
    Off,
}

/// One `[[guard]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawGuard {
    pub name: Spanned<String>,
    pub kind: RawGuardKind,
    pub programs: Spanned<Vec<Spanned<String>>>,
    #[serde(default)]
    pub flags: Vec<Spanned<Vec<Spanned<String>>>>,
    #[serde(default)]
    pub args: Vec<Spanned<String>>,
    #[serde(default)]
    pub args_any: Vec<Spanned<String>>,
    #[serde(default)]
    pub piped_from: Vec<Spanned<String>>,
    #[serde(default)]
    pub max_operands: Option<usize>,
    #[serde(default)]
    pub unless_flags: Vec<Spanned<String>>,
    pub target: Option<RawGuardTarget>,
    #[serde(default)]
    pub branches: Vec<Spanned<String>>,
    #[serde(default)]
    pub without_tty: bool,
    #[serde(default)]
    pub unless_stdin: bool,
    pub message: Spanned<String>,
    pub reason: Reason,
}

/// `guard.kind`.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum RawGuardKind {
    Deny,
    Warn,
}

/// `guard.target`.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum RawGuardTarget {
    WritableRoot,
    ForcePush,
}
