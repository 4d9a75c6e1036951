//! A session's sandbox, built once from its resolved policy: the job Landlock ruleset, the seccomp
//! program, and the facts `describe` reports.
//!
//! The worker builds one [`Sandbox`] at startup, installs the seccomp program on itself (every job
//! inherits it), restricts itself with a wider Landlock domain of its own ([`Sandbox::worker_ruleset`]),
//! and hands the job ruleset and the jobs' own small seccomp filter to every spawn
//! ([`crate::Prepared::with_landlock`], [`crate::Prepared::with_seccomp`]), whose child calls
//! `landlock_restrict_self` and stacks the filter just before exec. Each job's domain nests inside the worker's, so signal
//! scoping stops a job signalling its worker, the front, or another session.
//!
//! [`Sandbox::refusal`] applies the profile's `landlock.require`: `full` refuses partial enforcement,
//! `best_effort` refuses only none at all, `off` runs anyway.
//!
//! ```no_run
//! # let dir = std::path::Path::new("/tmp");
//! use policies::{Policy, ResolveCtx};
//! let resolved = Policy::builtin("workspace").unwrap().resolve(&ResolveCtx::new(dir, dir, dir)).unwrap();
//! let sandbox = launcher::sandbox::Sandbox::build(&resolved).unwrap();
//! assert!(sandbox.refusal().is_none());
//! ```

use crate::landlock_rules::{Enforcement, Ruleset, RulesetError};
use crate::seccomp::SeccompError;
use policies::{LandlockRequirement, ResolvedPolicy};
use seccompiler::BpfProgram;
use std::path::PathBuf;

/// Errors building a sandbox.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    #[error("cannot build the job's Landlock ruleset")]
    Landlock(#[from] RulesetError),
    #[error(transparent)]
    Seccomp(#[from] SeccompError),
}

/// A session's sandbox.
#[derive(Debug)]
pub struct Sandbox {
    pub policy: ResolvedPolicy,
    /// The per-job ruleset (writable roots of the policy only).
    pub job: Ruleset,
    /// The session's seccomp program (install once with [`crate::seccomp::install`]).
    pub seccomp: BpfProgram,
    /// The jobs' own filter, stacked per job ([`crate::Prepared::with_seccomp`]); see
    /// [`crate::seccomp::build_job_filter`].
    pub job_seccomp: Option<BpfProgram>,
}

impl Sandbox {
    /// Build the job ruleset and the seccomp program of `policy`.
    pub fn build(policy: &ResolvedPolicy) -> Result<Sandbox, SandboxError> {
        let roots: Vec<PathBuf> = policy.writable.iter().map(|r| r.path.clone()).collect();
        let job = Ruleset::build(&roots, policy.policy.network)?;
        let seccomp = crate::seccomp::build_filter(&policy.policy)?;
        let job_seccomp = crate::seccomp::build_job_filter(&policy.policy)?;
        Ok(Sandbox { policy: policy.clone(), job, seccomp, job_seccomp })
    }

    /// The worker's own ruleset: the job's writable roots plus `extra` (its session cgroup subtree).
    pub fn worker_ruleset(&self, extra: &[PathBuf]) -> Result<Ruleset, RulesetError> {
        let mut roots: Vec<PathBuf> = self.policy.writable.iter().map(|r| r.path.clone()).collect();
        roots.extend(extra.iter().cloned());
        Ruleset::build(&roots, self.policy.policy.network)
    }

    /// Why jobs must not run under this sandbox on this kernel, if they must not.
    pub fn refusal(&self) -> Option<String> {
        let report = &self.job.report;
        let name = &self.policy.policy.name;
        match (self.policy.policy.landlock, report.status) {
            (LandlockRequirement::Off, _) | (_, Enforcement::Full) => None,
            (LandlockRequirement::BestEffort, Enforcement::Partial) => None,
            (LandlockRequirement::Full, _) => Some(format!(
                "policy '{name}' requires full Landlock enforcement (ABI ≥ {}), and this kernel has ABI {}; \
                 run on a newer kernel or use a profile with landlock.require = \"best_effort\"",
                crate::landlock_rules::WANTED_ABI,
                report.abi
            )),
            _ => Some(format!(
                "Landlock is not available on this kernel, so policy '{name}' cannot confine writes; jobs are \
                 refused (a profile may say landlock.require = \"off\" with a reason to run without it)"
            )),
        }
    }
}
