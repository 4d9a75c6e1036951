//! Landlock rulesets for jobs and for the worker itself, built once, before any fork.
//!
//! A [`Ruleset`] handles every filesystem access right the running kernel's Landlock ABI knows (REFER,
//! TRUNCATE and IOCTL_DEV included), grants read, execute and device ioctls beneath `/`, and grants
//! every right beneath each writable root. A few device files (`/dev/null`, `/dev/zero`, `/dev/full`,
//! `/dev/tty`) stay writable so ordinary shell redirections work. Where the ABI has them (≥ 6), signals
//! and abstract unix sockets are scoped: a process inside the domain cannot signal, or connect to an
//! abstract socket of, anything outside it (its worker, the front, other sessions). With network off and
//! ABI ≥ 4, TCP bind and connect are handled too (and granted nowhere).
//!
//! The ruleset is kept as an fd; the launcher's child calls `landlock_restrict_self` on it (one
//! async-signal-safe syscall, ~19 µs) just before `execve`. What is enforced on this kernel is described
//! by [`LandlockReport`].
//!
//! ```no_run
//! let rs = launcher::landlock_rules::Ruleset::build(&["/tmp/project".into()], false).unwrap();
//! println!("Landlock ABI {}: {}", rs.report.abi, rs.report.status.as_str());
//! ```

use landlock::{
    Access, AccessFs, AccessNet, BitFlags, PathBeneath, PathFd, Ruleset as LlRuleset, RulesetAttr, RulesetCreatedAttr,
    Scope, ABI,
};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// The Landlock ABI whose rights heddle's design relies on (REFER, TRUNCATE, IOCTL_DEV, scoping).
pub const WANTED_ABI: i32 = 6;

/// Device files every job may write (redirections to `/dev/null` are everywhere in scripts).
/// `/dev/ptmx` and the devpts directory beneath it make pseudo-terminals usable: the worker opens a
/// terminal job's PTY, and jobs may open their own (`script`, `os.openpty()`); `TIOCSTI` stays refused by
/// seccomp.
pub const WRITABLE_DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/ptmx", "/dev/pts"];

/// How much of the ruleset the running kernel enforces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Enforcement {
    /// ABI ≥ [`WANTED_ABI`]: every right and both scopes heddle asks for.
    Full,
    /// An older ABI: some rights (e.g. REFER, TRUNCATE) or the scopes are missing.
    Partial,
    /// No Landlock on this kernel.
    NotEnforced,
}

impl Enforcement {
    pub fn as_str(self) -> &'static str {
        match self {
            Enforcement::Full => "fully_enforced",
            Enforcement::Partial => "partially_enforced",
            Enforcement::NotEnforced => "not_enforced",
        }
    }
}

/// What a ruleset enforces on this kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LandlockReport {
    /// The running kernel's Landlock ABI version (0: none).
    pub abi: i32,
    pub status: Enforcement,
    /// Handled filesystem rights, by name (`write_file`, `refer`, …).
    pub fs_rights: Vec<String>,
    /// Scopes in force (`signal`, `abstract_unix_socket`).
    pub scopes: Vec<String>,
    /// True when TCP bind/connect are handled (denied everywhere).
    pub net_denied: bool,
    /// The writable roots, as given.
    pub writable: Vec<PathBuf>,
}

/// Errors building a ruleset.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RulesetError {
    #[error("cannot open writable root {}", .path.display())]
    Root {
        path: PathBuf,
        #[source]
        source: landlock::PathFdError,
    },
    #[error("the kernel refused the Landlock ruleset")]
    Landlock(#[from] landlock::RulesetError),
}

/// A built ruleset: its fd (`None` without Landlock) and what it enforces.
#[derive(Debug)]
pub struct Ruleset {
    pub fd: Option<OwnedFd>,
    pub report: LandlockReport,
}

impl Ruleset {
    /// A ruleset granting writes beneath `writable` only; network (TCP) denied too when `!network`.
    pub fn build(writable: &[PathBuf], network: bool) -> Result<Ruleset, RulesetError> {
        let abi_num = crate::sys::landlock_abi();
        let abi = ABI::from(abi_num);
        let fs_all = AccessFs::from_all(abi);
        let read = AccessFs::from_read(abi);
        let scopes = Scope::from_all(abi);
        let net = if network { BitFlags::EMPTY } else { AccessNet::from_all(abi) };
        let report = LandlockReport {
            abi: abi_num.max(0),
            status: match abi_num {
                n if n >= WANTED_ABI => Enforcement::Full,
                n if n >= 1 => Enforcement::Partial,
                _ => Enforcement::NotEnforced,
            },
            fs_rights: fs_all.iter().map(fs_name).collect(),
            scopes: scopes.iter().map(scope_name).collect(),
            net_denied: !net.is_empty(),
            writable: writable.to_vec(),
        };
        if abi_num < 1 {
            return Ok(Ruleset { fd: None, report });
        }
        let mut rs = LlRuleset::default().handle_access(fs_all)?;
        if !net.is_empty() {
            rs = rs.handle_access(net)?;
        }
        if !scopes.is_empty() {
            rs = rs.scope(scopes)?;
        }
        let mut created = rs.create()?.add_rule(PathBeneath::new(open("/")?, read))?;
        for dev in WRITABLE_DEVICES.iter().filter(|d| Path::new(d).exists()) {
            let file_rights = AccessFs::from_file(abi);
            created = created.add_rule(PathBeneath::new(open(dev)?, file_rights))?;
        }
        for root in writable {
            created = created.add_rule(PathBeneath::new(open(root)?, fs_all))?;
        }
        let fd: Option<OwnedFd> = created.into();
        Ok(Ruleset { fd, report })
    }
}

impl Ruleset {
    /// Restrict the calling thread (and what it starts from now on) with this ruleset, after setting
    /// no_new_privs. Without Landlock (`fd` is `None`) this only sets no_new_privs.
    pub fn restrict_self(&self) -> std::io::Result<()> {
        crate::sys::set_no_new_privs()?;
        match &self.fd {
            Some(fd) => crate::sys::landlock_restrict_self(std::os::fd::AsFd::as_fd(fd)),
            None => Ok(()),
        }
    }
}

fn open(path: impl AsRef<Path>) -> Result<PathFd, RulesetError> {
    PathFd::new(path.as_ref()).map_err(|source| RulesetError::Root { path: path.as_ref().to_path_buf(), source })
}

fn fs_name(a: AccessFs) -> String {
    let s = format!("{a:?}");
    snake(&s)
}

fn scope_name(s: Scope) -> String {
    snake(&format!("{s:?}"))
}

/// `WriteFile` → `write_file`.
fn snake(camel: &str) -> String {
    let mut out = String::new();
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_snake_case() {
        assert_eq!(snake("WriteFile"), "write_file");
        assert_eq!(snake("AbstractUnixSocket"), "abstract_unix_socket");
    }

    #[test]
    fn this_kernel_has_the_wanted_abi_and_the_report_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let rs = Ruleset::build(&[dir.path().to_path_buf()], false).unwrap();
        assert!(rs.report.abi >= WANTED_ABI, "kernel ABI {} (CI kernels have ≥ 6)", rs.report.abi);
        assert_eq!(rs.report.status, Enforcement::Full);
        assert!(rs.fd.is_some());
        for right in ["refer", "truncate", "ioctl_dev", "write_file", "remove_file"] {
            assert!(rs.report.fs_rights.iter().any(|r| r == right), "{right}: {:?}", rs.report.fs_rights);
        }
        assert_eq!(rs.report.scopes, ["abstract_unix_socket", "signal"]);
        assert!(rs.report.net_denied);
    }

    #[test]
    fn a_missing_root_is_an_error_naming_it() {
        let err = Ruleset::build(&["/nonexistent-heddle-root".into()], true).unwrap_err();
        assert_eq!(err.to_string(), "cannot open writable root /nonexistent-heddle-root");
    }
}
