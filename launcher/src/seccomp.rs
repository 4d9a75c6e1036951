//! The session's seccomp filter, compiled once from a profile and installed once per process.
//!
//! [`build_filter`] turns a [`policies::Policy`] into a BPF program (with `seccompiler`): every denied
//! syscall of the profile returns `EPERM` (never a kill, so a job sees an ordinary error it can report);
//! `ioctl(fd, TIOCSTI, …)` returns `EPERM` when the profile says so; with network off, `socket(2)` and
//! `socketpair(2)` of any family but `AF_UNIX` return `EPERM`; and, ahead of seccompiler's own program,
//! a guard returns `EPERM` for every x86_64 syscall number with the x32 bit (`0x40000000`) set — a second
//! syscall table a filter keyed on x86_64 numbers would otherwise miss. A syscall of another
//! architecture (i386 `int 0x80`) fails seccompiler's architecture check, which kills the process.
//!
//! Installing a filter costs ~325 µs (the kernel pre-evaluates it), so heddle installs it once, in the
//! worker at startup, and every job inherits it at no cost; `heddle-launch --policy` installs it in
//! itself before it spawns ([`install`]).
//!
//! ```no_run
//! let policy = policies::Policy::builtin("workspace").unwrap();
//! let prog = launcher::seccomp::build_filter(&policy).unwrap();
//! launcher::seccomp::install(&prog).unwrap(); // this process and its children, from now on
//! ```

use policies::Policy;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
};
use std::collections::BTreeMap;

/// `ioctl` request that pushes a byte into a terminal's input queue.
pub const TIOCSTI: u64 = 0x5412;
/// The x32 ABI's syscall-number bit.
pub const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// Errors compiling or installing a filter.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SeccompError {
    #[error("cannot compile the seccomp filter")]
    Compile(#[source] seccompiler::BackendError),
    #[error("seccomp filters are only built for x86_64 here (the profile's syscall table is x86_64)")]
    Arch,
    #[error("cannot install the seccomp filter")]
    Install(#[source] seccompiler::Error),
    #[error("cannot set no_new_privs before installing the seccomp filter")]
    NoNewPrivs(#[source] std::io::Error),
}

/// Compile `policy`'s seccomp rules (and its network switch) into one BPF program.
pub fn build_filter(policy: &Policy) -> Result<BpfProgram, SeccompError> {
    if !cfg!(target_arch = "x86_64") {
        return Err(SeccompError::Arch);
    }
    let compile = SeccompError::Compile;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for rule in &policy.seccomp.deny {
        rules.insert(rule.nr, Vec::new());
    }
    if policy.seccomp.deny_tiocsti {
        let cond = SeccompCondition::new(1, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, TIOCSTI).map_err(compile)?;
        rules.insert(libc::SYS_ioctl, vec![SeccompRule::new(vec![cond]).map_err(compile)?]);
    }
    if !policy.network {
        for nr in [libc::SYS_socket, libc::SYS_socketpair] {
            let unix = libc::AF_UNIX as u64;
            let cond = SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, unix).map_err(compile)?;
            rules.insert(nr, vec![SeccompRule::new(vec![cond]).map_err(compile)?]);
        }
    }
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        seccompiler::TargetArch::x86_64,
    )
    .map_err(compile)?;
    let body: BpfProgram = filter.try_into().map_err(compile)?;
    let mut prog = if policy.seccomp.x32_guard { x32_guard() } else { Vec::new() };
    prog.extend(body);
    Ok(prog)
}

/// `if arch == x86_64 && nr >= X32_SYSCALL_BIT { return EPERM }`, falling through to the next program.
fn x32_guard() -> BpfProgram {
    use seccompiler::sock_filter;
    const LD_ABS_W: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JEQ_K: u16 = 0x05 | 0x10; // BPF_JMP | BPF_JEQ | BPF_K
    const JGE_K: u16 = 0x05 | 0x30;
    const RET_K: u16 = 0x06;
    const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
    const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
    let ins = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    vec![
        ins(LD_ABS_W, 0, 0, 4),              // A = seccomp_data.arch
        ins(JEQ_K, 0, 3, AUDIT_ARCH_X86_64), // not x86_64: on to the arch check (which kills)
        ins(LD_ABS_W, 0, 0, 0),              // A = seccomp_data.nr
        ins(JGE_K, 0, 1, X32_SYSCALL_BIT),   // an x32 number?
        ins(RET_K, 0, 0, SECCOMP_RET_ERRNO | libc::EPERM as u32),
    ]
}

/// Install `prog` on the calling thread (and so on every process it starts from now on), after setting
/// no_new_privs (the kernel requires one or the other of it and `CAP_SYS_ADMIN`).
pub fn install(prog: &BpfProgram) -> Result<(), SeccompError> {
    crate::sys::set_no_new_privs().map_err(SeccompError::NoNewPrivs)?;
    seccompiler::apply_filter(prog).map_err(SeccompError::Install)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workspace_filter_compiles_with_the_x32_guard_first() {
        let p = Policy::builtin("workspace").unwrap();
        let prog = build_filter(&p).unwrap();
        assert!(prog.len() > 40, "{} instructions", prog.len());
        assert_eq!(prog[3].k, X32_SYSCALL_BIT);
        assert_eq!(prog[4].k, 0x0005_0000 | libc::EPERM as u32);
    }

    #[test]
    fn network_on_drops_the_socket_rules() {
        let off = build_filter(&Policy::builtin("workspace").unwrap()).unwrap();
        let on = build_filter(&Policy::builtin("workspace").unwrap().with_network(true)).unwrap();
        assert!(on.len() < off.len());
    }
}
