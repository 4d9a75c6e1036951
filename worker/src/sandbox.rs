//! The session's sandbox as the worker holds it: built once at startup from the profile the supervisor
//! named, installed on the worker itself (seccomp, then its own Landlock domain), and applied to every
//! job (the job ruleset, restricted in the launcher's child just before exec).
//!
//! Order at startup ([`SessionSandbox::enter`]): no_new_privs (already set by the supervisor), the
//! seccomp filter on the worker — every job inherits it at no cost per spawn — then the worker's own
//! Landlock domain: read everywhere, write only beneath the session's cgroup subtree (job cgroups), the
//! session temp dir and the policy's writable roots. Each job's domain nests inside it, so Landlock's
//! signal scoping stops a job signalling the worker, the front or another session.
//!
//! A sandbox that cannot be built, or whose Landlock enforcement falls short of the profile's
//! `landlock.require`, does not stop the worker: it reports the refusal in [`SandboxInfo`] and every job
//! is refused with that sentence.
//!
//! ```no_run
//! use worker::sandbox::{SandboxArgs, SessionSandbox};
//! let args = SandboxArgs { policy: "workspace".into(), network: None, ptys: None, project: "/tmp/p".into(),
//!     tmp: "/tmp/t".into(), home: "/nonexistent".into(), writable: vec![], allow_writable: vec![], own_home: false };
//! let mut sb = SessionSandbox::build(&args);
//! let warnings = sb.enter(std::path::Path::new("/sys/fs/cgroup/unified/heddle/session-a"));
//! assert!(sb.info.refusal.is_none(), "{warnings:?}");
//! ```

use launcher::sandbox::Sandbox;
use policies::{LandlockRequirement, Policy, ResolveCtx};
use shm_proto::msg::{RootInfo, SandboxInfo};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};

/// What the supervisor told the worker about its session's sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxArgs {
    pub policy: String,
    pub network: Option<bool>,
    /// `Some`: the session switched the profile's `[seccomp.ptys]` (`false` refuses jobs their own).
    pub ptys: Option<bool>,
    pub project: PathBuf,
    pub tmp: PathBuf,
    pub home: PathBuf,
    /// Extra writable roots the session asked for (`session.open {writable}`).
    pub writable: Vec<PathBuf>,
    /// The server's allowance for them, checked again here after the supervisor's check.
    pub allow_writable: Vec<PathBuf>,
    /// `home` was made by heddle for this uid: it is a writable root as a whole.
    pub own_home: bool,
}

/// The session's sandbox and its report.
#[derive(Debug)]
pub struct SessionSandbox {
    /// `None` when it could not be built (then `info.refusal` says why).
    pub sandbox: Option<Sandbox>,
    pub info: SandboxInfo,
    /// With network off: where the jobs' refused `socket` calls wait for the worker's `EPERM`
    /// ([`crate::network`]), so each job's result can say the network is off.
    pub listener: Option<launcher::seccomp::NetworkListener>,
}

impl SessionSandbox {
    /// Resolve the profile and build the job ruleset and the seccomp program.
    pub fn build(args: &SandboxArgs) -> SessionSandbox {
        let mut info = SandboxInfo {
            policy: args.policy.clone(),
            network: args.network.unwrap_or(false),
            landlock_abi: 0,
            landlock_status: "not_enforced".into(),
            landlock_rights: Vec::new(),
            landlock_scopes: Vec::new(),
            landlock_require: String::new(),
            writable: Vec::new(),
            skipped: Vec::new(),
            seccomp_denied: Vec::new(),
            seccomp_installed: false,
            worker_confined: false,
            tmp: args.tmp.display().to_string(),
            home: args.home.display().to_string(),
            home_made: args.own_home,
            refusal: None,
        };
        match build(args) {
            Ok(sb) => {
                fill(&mut info, &sb);
                info.refusal = sb.refusal();
                SessionSandbox { sandbox: Some(sb), info, listener: None }
            }
            Err(why) => {
                info.refusal = Some(why);
                SessionSandbox { sandbox: None, info, listener: None }
            }
        }
    }

    /// Confine the worker itself: the seccomp filter, then its own Landlock domain (writable: the job
    /// roots plus `cgroup`, its session subtree). Returns warnings for what failed.
    pub fn enter(&mut self, cgroup: &Path) -> Vec<String> {
        let mut warnings = Vec::new();
        let Some(sb) = &self.sandbox else { return warnings };
        // Network off: the refused socket calls go through a listener first, so they are counted per job.
        // A chain that already has one (a nested worker) cannot get another: then plain EPERM, uncounted.
        if !self.info.network {
            let mut prog = launcher::seccomp::network_notify();
            prog.extend(sb.seccomp.iter().cloned());
            match launcher::seccomp::install_with_listener(&prog) {
                Ok(l) => {
                    self.listener = Some(l);
                    self.info.seccomp_installed = true;
                }
                Err(e) => tracing::debug!("no seccomp listener for refused sockets: {}", crate::emit::error_chain(&e)),
            }
        }
        let installed = if self.info.seccomp_installed { Ok(()) } else { launcher::seccomp::install(&sb.seccomp) };
        match installed {
            Ok(()) => self.info.seccomp_installed = true,
            Err(e) => {
                let why =
                    format!("the session's seccomp filter could not be installed: {}", crate::emit::error_chain(&e));
                self.info.refusal.get_or_insert_with(|| format!("{why}; jobs are refused"));
                warnings.push(why);
            }
        }
        let own = sb.worker_ruleset(&[cgroup.to_path_buf()]).map_err(|e| crate::emit::error_chain(&e));
        match own.and_then(|rs| rs.restrict_self().map(|_| rs.fd.is_some()).map_err(|e| e.to_string())) {
            Ok(confined) => self.info.worker_confined = confined,
            Err(e) => warnings.push(format!("the worker could not restrict itself with Landlock: {e}")),
        }
        warnings
    }

    /// Why jobs are refused, if they are.
    pub fn refusal(&self) -> Option<&str> {
        self.info.refusal.as_deref()
    }

    /// The job ruleset fd, when Landlock is in force.
    pub fn job_ruleset(&self) -> Option<BorrowedFd<'_>> {
        self.sandbox.as_ref().and_then(|s| s.job.fd.as_ref()).map(|f| f.as_fd())
    }

    /// The jobs' own seccomp filter (`clone3` → ENOSYS), stacked in each job's child before exec.
    pub fn job_seccomp(&self) -> Option<&[launcher::seccomp::sock_filter]> {
        self.sandbox.as_ref().and_then(|s| s.job_seccomp.as_deref())
    }

    /// A sentence explaining a refused write to `path`: which rule, and how to widen it.
    pub fn explain_write(&self, path: &Path) -> String {
        let Some(sb) = &self.sandbox else { return "the session's sandbox is not in force".into() };
        match sb.policy.root_for(path) {
            Some(root) => {
                format!("{} lies beneath writable root {} ({})", path.display(), root.path.display(), root.template)
            }
            None => format!(
                "{} is outside every writable root of policy '{}' ({}); Landlock refuses writes there. Write inside \
                 one of them, or open a session with a profile that lists the directory as a writable root",
                path.display(),
                sb.policy.policy.name,
                roots_list(&self.info)
            ),
        }
    }
}

/// `a ({project}), b ({session_tmp})`.
pub fn roots_list(info: &SandboxInfo) -> String {
    info.writable.iter().map(|r| format!("{} ({})", r.path, r.template)).collect::<Vec<_>>().join(", ")
}

fn build(args: &SandboxArgs) -> Result<Sandbox, String> {
    let mut policy = Policy::builtin(&args.policy).map_err(|e| e.to_string())?;
    if let Some(n) = args.network {
        policy = policy.with_network(n);
    }
    if let Some(allow) = args.ptys {
        policy = policy.with_ptys(allow);
    }
    let mut extra = policies::extra::check_extra(&args.writable, &args.allow_writable).map_err(|e| e.to_string())?;
    if args.own_home {
        // A home the supervisor made for this uid (its passwd home is missing or not its own): tools
        // write their caches and configuration there (`~/.cargo`, `~/.npm`, `~/.gitconfig`).
        extra.push(args.home.clone());
    }
    let ctx = ResolveCtx::new(&args.project, &args.tmp, &args.home).with_git_dirs().with_extra(extra);
    let resolved = policy.resolve(&ctx).map_err(|e| format!("the policy cannot be applied: {e}"))?;
    Sandbox::build(&resolved).map_err(|e| crate::emit::error_chain(&e))
}

fn fill(info: &mut SandboxInfo, sb: &Sandbox) {
    let r = &sb.job.report;
    info.network = sb.policy.policy.network;
    info.landlock_abi = r.abi;
    info.landlock_status = r.status.as_str().into();
    info.landlock_rights = r.fs_rights.clone();
    info.landlock_scopes = r.scopes.clone();
    info.landlock_require = match sb.policy.policy.landlock {
        LandlockRequirement::Full => "full",
        LandlockRequirement::BestEffort => "best_effort",
        LandlockRequirement::Off => "off",
    }
    .into();
    info.writable = sb
        .policy
        .writable
        .iter()
        .map(|w| RootInfo {
            path: w.path.display().to_string(),
            template: w.template.clone(),
            reason: w.reason.clone(),
        })
        .collect();
    info.skipped = sb.policy.skipped.iter().map(|s| format!("{}: {}", s.template, s.why)).collect();
    let sc = &sb.policy.policy.seccomp;
    info.seccomp_denied = sc.deny.iter().map(|d| d.name.to_owned()).collect();
    if sc.deny_tiocsti {
        info.seccomp_denied.push("ioctl(TIOCSTI)".into());
    }
    if sc.x32_guard {
        info.seccomp_denied.push("x32 syscalls".into());
    }
    if sc.deny_new_namespaces {
        info.seccomp_denied.push("clone(CLONE_NEW*)".into());
        info.seccomp_denied.push("clone3 (ENOSYS in jobs)".into());
    }
    if sc.deny_setid {
        info.seccomp_denied.push("setuid/setgid modes (chmod, open O_CREAT, mknod)".into());
        info.seccomp_denied.push("openat2 (ENOSYS in jobs)".into());
    }
    if sc.deny_xattr {
        info.seccomp_denied.push("xattr writes (EOPNOTSUPP in jobs)".into());
    }
    if sc.deny_ptys {
        info.seccomp_denied.push(shm_proto::msg::PTYS_DENIED.into());
    }
    if !sb.policy.policy.network {
        info.seccomp_denied.push("socket(non-AF_UNIX)".into());
    }
}
