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
//! New namespaces ([`policies::SeccompPolicy::deny_new_namespaces`]): the session filter refuses
//! `clone` with any `CLONE_NEW*` flag ([`CLONE_NAMESPACE_FLAGS`]) with `EPERM`. `clone3` takes its flags
//! in memory, which a seccomp filter cannot read, so it cannot be filtered by flag; and the worker needs
//! it (`clone3(CLONE_INTO_CGROUP)` places every job). So jobs get a second, tiny filter of their own
//! ([`build_job_filter`]): `clone3` answers `ENOSYS`, which glibc (posix_spawn, pthread_create), Go and
//! Rust's std take as "this kernel has no clone3" and fall back to `clone` — filtered by flag above. The
//! launcher's child stacks it just before `execve` ([`crate::Prepared::with_seccomp`]).
//!
//! Setuid and setgid bits ([`policies::SeccompPolicy::deny_setid`]): the session filter refuses
//! (`EPERM`) `chmod`, `fchmod`, `fchmodat`, `fchmodat2`, `creat`, `mknod`, `mknodat` whose mode has
//! `S_ISUID` or `S_ISGID`, and `open`/`openat` that create a file (`O_CREAT`, `O_TMPFILE`) with either;
//! jobs get `ENOSYS` from `openat2`. Extended-attribute writes ([`policies::SeccompPolicy::deny_xattr`])
//! answer `EOPNOTSUPP` in jobs (the job filter): the attribute's name is in memory, so `security.*`
//! cannot be told from `user.*`, and "not supported" is what copying and unpacking tools skip quietly.
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
use std::os::fd::AsFd;

/// One BPF instruction (the kernel's `struct sock_filter`), as [`BpfProgram`] holds them.
pub use seccompiler::sock_filter;

/// `ioctl` request that pushes a byte into a terminal's input queue.
pub const TIOCSTI: u64 = 0x5412;
/// `ioctl` request that locks or unlocks a pseudo-terminal's slave side (`unlockpt`), `_IOW('T', 0x31,
/// int)`.
pub const TIOCSPTLCK: u32 = 0x4004_5431;
/// The x32 ABI's syscall-number bit.
pub const X32_SYSCALL_BIT: u32 = 0x4000_0000;
/// `clone(2)`'s flags that create a namespace. `CLONE_NEWTIME` is not among them: in `clone(2)` its bit
/// (`0x80`) lies in the exit-signal byte, so only `unshare` and `clone3` can ask for a time namespace.
pub const CLONE_NAMESPACE_FLAGS: [(&str, u64); 7] = [
    ("CLONE_NEWNS", libc::CLONE_NEWNS as u64),
    ("CLONE_NEWCGROUP", libc::CLONE_NEWCGROUP as u64),
    ("CLONE_NEWUTS", libc::CLONE_NEWUTS as u64),
    ("CLONE_NEWIPC", libc::CLONE_NEWIPC as u64),
    ("CLONE_NEWUSER", libc::CLONE_NEWUSER as u64),
    ("CLONE_NEWPID", libc::CLONE_NEWPID as u64),
    ("CLONE_NEWNET", libc::CLONE_NEWNET as u64),
];

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
    #[error("cannot install the seccomp filter with a notification listener")]
    Listener(#[source] std::io::Error),
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
    if policy.seccomp.deny_new_namespaces {
        // One rule per flag (a rule matches when all its conditions do): `flags & F == F` for any F.
        // The kernel reads clone's flags as 32 bits, so a Dword comparison sees exactly what it sees.
        let flag = |f: u64| -> Result<SeccompRule, SeccompError> {
            let cond =
                SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::MaskedEq(f), f).map_err(compile)?;
            SeccompRule::new(vec![cond]).map_err(compile)
        };
        let clone = CLONE_NAMESPACE_FLAGS.iter().map(|&(_, f)| flag(f)).collect::<Result<Vec<_>, _>>()?;
        rules.insert(libc::SYS_clone, clone);
    }
    if policy.seccomp.deny_setid {
        for (nr, rules_of) in setid_rules()? {
            // A syscall the profile denies outright stays denied outright (an empty rule list).
            if let std::collections::btree_map::Entry::Vacant(e) = rules.entry(nr) {
                e.insert(rules_of);
            }
        }
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

/// `fchmodat2(2)` (Linux 6.6), which the `libc` crate may not name yet.
pub const SYS_FCHMODAT2: i64 = 452;
/// `setxattrat(2)` and `removexattrat(2)` (Linux 6.13).
pub const SYS_SETXATTRAT: i64 = 463;
pub const SYS_REMOVEXATTRAT: i64 = 466;
/// `open(2)`'s `__O_TMPFILE` bit (`O_TMPFILE` is it with `O_DIRECTORY`): an unnamed file with a mode.
const O_TMPFILE_BIT: u64 = 0o2000_0000;
/// The extended-attribute writes refused in jobs.
pub const XATTR_WRITES: [i64; 8] = [
    libc::SYS_setxattr,
    libc::SYS_lsetxattr,
    libc::SYS_fsetxattr,
    SYS_SETXATTRAT,
    libc::SYS_removexattr,
    libc::SYS_lremovexattr,
    libc::SYS_fremovexattr,
    SYS_REMOVEXATTRAT,
];

/// `EPERM` rules for setting a setuid or setgid bit: `(syscall, rules)`, a rule matching when the mode
/// argument has `S_ISUID` or `S_ISGID` (and, for the open family, the flags create a file).
fn setid_rules() -> Result<Vec<(i64, Vec<SeccompRule>)>, SeccompError> {
    let compile = SeccompError::Compile;
    let bit = |arg: u8, b: u64| {
        SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::MaskedEq(b), b).map_err(compile)
    };
    let setid = [u64::from(libc::S_ISUID), u64::from(libc::S_ISGID)];
    // chmod-like: (syscall, mode argument).
    let plain = [
        (libc::SYS_chmod, 1),
        (libc::SYS_fchmod, 1),
        (libc::SYS_fchmodat, 2),
        (SYS_FCHMODAT2, 2),
        (libc::SYS_creat, 1),
        (libc::SYS_mknod, 1),
        (libc::SYS_mknodat, 2),
    ];
    let mut out = Vec::new();
    for (nr, mode) in plain {
        let rules = setid.iter().map(|&b| SeccompRule::new(vec![bit(mode, b)?]).map_err(compile));
        out.push((nr, rules.collect::<Result<Vec<_>, _>>()?));
    }
    // open-like: (syscall, flags argument, mode argument); the mode counts only when a file is made.
    for (nr, flags, mode) in [(libc::SYS_open, 1, 2), (libc::SYS_openat, 2, 3)] {
        let mut rules = Vec::new();
        for create in [libc::O_CREAT as u64, O_TMPFILE_BIT] {
            for &b in &setid {
                rules.push(SeccompRule::new(vec![bit(flags, create)?, bit(mode, b)?]).map_err(compile)?);
            }
        }
        out.push((nr, rules));
    }
    Ok(out)
}

/// The jobs' own filter, stacked on the session's in the launcher's child just before `execve`:
/// `clone3` answers `ENOSYS` (see the module doc); with [`policies::SeccompPolicy::deny_setid`],
/// `openat2` answers `ENOSYS` too (its mode sits in memory; the C library and runtimes fall back to
/// `openat`, filtered by mode); with [`policies::SeccompPolicy::deny_xattr`], every extended-attribute
/// write answers `EOPNOTSUPP` (the worker itself labels job cgroups, so this cannot be the session
/// filter); with [`policies::SeccompPolicy::deny_ptys`], `ioctl(fd, TIOCSPTLCK, ..)` answers `EPERM`
/// (the worker unlocks a terminal job's PTY itself, so this cannot be the session filter either).
/// `None` when nothing is switched on.
///
/// It is a short list of comparisons, so installing it per job costs little (the session filter, ~50
/// rules, is what makes an install expensive), and the kernel's per-syscall action cache skips it for
/// every syscall it does not name.
pub fn build_job_filter(policy: &Policy) -> Result<Option<BpfProgram>, SeccompError> {
    if !cfg!(target_arch = "x86_64") {
        return Err(SeccompError::Arch);
    }
    let sc = &policy.seccomp;
    let mut answers: Vec<(i64, i32)> = Vec::new();
    if sc.deny_new_namespaces {
        answers.push((libc::SYS_clone3, libc::ENOSYS));
    }
    if sc.deny_setid {
        answers.push((libc::SYS_openat2, libc::ENOSYS));
    }
    if sc.deny_xattr {
        answers.extend(XATTR_WRITES.iter().map(|&nr| (nr, libc::EOPNOTSUPP)));
    }
    let ioctls: &[(u32, i32)] = if sc.deny_ptys { &[(TIOCSPTLCK, libc::EPERM)] } else { &[] };
    if answers.is_empty() && ioctls.is_empty() {
        return Ok(None);
    }
    Ok(Some(errno_list(&answers, ioctls)))
}

/// `if arch == x86_64 { for (nr, errno) in answers { if syscall == nr { return errno } } }`, then `if
/// syscall == ioctl { for (request, errno) in ioctls { if request == it { return errno } } }`, allow. A
/// foreign architecture is allowed here: the session filter below this one kills it. The request is
/// compared on its low 32 bits, as the kernel reads it (`unsigned int cmd`).
fn errno_list(answers: &[(i64, i32)], ioctls: &[(u32, i32)]) -> BpfProgram {
    const LD_ABS_W: u16 = 0x20;
    const JEQ_K: u16 = 0x05 | 0x10;
    const RET_K: u16 = 0x06;
    const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
    const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
    const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
    let ins = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    let mut prog = vec![
        ins(LD_ABS_W, 0, 0, 4),
        ins(JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
        ins(RET_K, 0, 0, SECCOMP_RET_ALLOW),
        ins(LD_ABS_W, 0, 0, 0),
    ];
    for &(nr, errno) in answers {
        prog.push(ins(JEQ_K, 0, 1, nr as u32));
        prog.push(ins(RET_K, 0, 0, SECCOMP_RET_ERRNO | errno as u32));
    }
    if !ioctls.is_empty() {
        // Not ioctl: past the request checks, to the final allow.
        prog.push(ins(JEQ_K, 0, (1 + 2 * ioctls.len()) as u8, libc::SYS_ioctl as u32));
        prog.push(ins(LD_ABS_W, 0, 0, 24)); // A = low 32 bits of args[1], the request
        for &(request, errno) in ioctls {
            prog.push(ins(JEQ_K, 0, 1, request));
            prog.push(ins(RET_K, 0, 0, SECCOMP_RET_ERRNO | errno as u32));
        }
    }
    prog.push(ins(RET_K, 0, 0, SECCOMP_RET_ALLOW));
    prog
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

/// `if arch == x86_64 && nr in (socket, socketpair) && family != AF_UNIX { return USER_NOTIF }`, falling
/// through to the next program otherwise. Prepended to the session filter when network is off, so the
/// worker hears of every refused socket ([`install_with_listener`], [`NetworkListener`]) and can tell
/// the job's result that the network is off; the answer stays `EPERM`. Without a listener (a nested
/// worker whose chain already has one) the kernel answers `ENOSYS` to a notify action, so this stanza
/// is only installed together with one.
pub fn network_notify() -> BpfProgram {
    const LD_ABS_W: u16 = 0x20;
    const JEQ_K: u16 = 0x05 | 0x10;
    const RET_K: u16 = 0x06;
    const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
    let ins = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    vec![
        ins(LD_ABS_W, 0, 0, 4),                         // A = seccomp_data.arch
        ins(JEQ_K, 0, 6, AUDIT_ARCH_X86_64),            // not x86_64: on to the next program
        ins(LD_ABS_W, 0, 0, 0),                         // A = seccomp_data.nr
        ins(JEQ_K, 1, 0, libc::SYS_socket as u32),      // socket: check the family
        ins(JEQ_K, 0, 3, libc::SYS_socketpair as u32),  // neither: on
        ins(LD_ABS_W, 0, 0, 16),                        // A = low 32 bits of args[0], the family
        ins(JEQ_K, 1, 0, libc::AF_UNIX as u32),         // AF_UNIX: on
        ins(RET_K, 0, 0, libc::SECCOMP_RET_USER_NOTIF), // any other family: ask the listener
    ]
}

/// Install `prog` like [`install`], asking the kernel for a user-notification listener: the fd on which
/// the calls `prog` answers with `SECCOMP_RET_USER_NOTIF` wait for their answer.
pub fn install_with_listener(prog: &BpfProgram) -> Result<NetworkListener, SeccompError> {
    crate::sys::set_no_new_privs().map_err(SeccompError::NoNewPrivs)?;
    let fd = crate::sys::seccomp_with_listener(prog).map_err(SeccompError::Listener)?;
    Ok(NetworkListener { fd })
}

/// A refused socket call, as the listener saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RefusedSocket {
    /// The calling thread's id (a pid in the caller's pid namespace, which is the worker's).
    pub pid: u32,
    /// The address family asked for (`AF_INET` = 2, `AF_INET6` = 10, `AF_NETLINK` = 16, …).
    pub family: u32,
}

/// The family's usual name (`AF_INET`), or its number.
pub fn family_name(family: u32) -> String {
    match i32::try_from(family).unwrap_or(-1) {
        libc::AF_INET => "AF_INET".into(),
        libc::AF_INET6 => "AF_INET6".into(),
        libc::AF_NETLINK => "AF_NETLINK".into(),
        libc::AF_PACKET => "AF_PACKET".into(),
        libc::AF_VSOCK => "AF_VSOCK".into(),
        n => format!("family {n}"),
    }
}

/// The worker's end of the network-off notifications: every refused `socket`/`socketpair` waits here
/// until [`NetworkListener::answer_pending`] answers it `EPERM`.
#[derive(Debug)]
pub struct NetworkListener {
    pub fd: std::os::fd::OwnedFd,
}

impl NetworkListener {
    /// Answer every call waiting now with `EPERM` and return them. Never blocks: the fd is polled before
    /// each receive (a receive with nothing pending would block).
    pub fn answer_pending(&self) -> Vec<RefusedSocket> {
        let mut seen = Vec::new();
        for _ in 0..4096 {
            match crate::sys::notif_answer_eperm(self.fd.as_fd()) {
                Some(Some((pid, family))) => seen.push(RefusedSocket { pid, family }),
                Some(None) => {}
                None => break,
            }
        }
        seen
    }
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
    fn new_namespaces_add_clone_rules_and_a_job_filter_only_when_unshare_is_denied() {
        let p = Policy::builtin("workspace").unwrap();
        assert!(p.seccomp.deny_new_namespaces);
        let job = build_job_filter(&p).unwrap().expect("a job filter");
        assert!(job.len() < 32, "{} instructions", job.len());
        assert!(job.iter().any(|i| i.k == libc::SYS_clone3 as u32));
        assert!(job.iter().any(|i| i.k == 0x0005_0000 | libc::ENOSYS as u32));
        let mut open = p.clone();
        open.seccomp.deny.retain(|r| r.name != "unshare");
        open.seccomp.deny_new_namespaces = false;
        assert!(!build_job_filter(&open).unwrap().unwrap().iter().any(|i| i.k == libc::SYS_clone3 as u32));
        open.seccomp.deny_setid = false;
        open.seccomp.deny_xattr = false;
        assert!(build_job_filter(&open).unwrap().is_none());
        assert!(build_filter(&open).unwrap().len() < build_filter(&p).unwrap().len());
    }

    #[test]
    fn setid_and_xattr_switches_add_rules_where_they_belong() {
        let p = Policy::builtin("workspace").unwrap();
        assert!(p.seccomp.deny_setid && p.seccomp.deny_xattr);
        let job = build_job_filter(&p).unwrap().unwrap();
        for nr in XATTR_WRITES {
            assert!(job.iter().any(|i| i.k == nr as u32), "job filter names {nr}");
        }
        assert!(job.iter().any(|i| i.k == 0x0005_0000 | libc::EOPNOTSUPP as u32));
        let mut off = p.clone();
        off.seccomp.deny_setid = false;
        assert!(build_filter(&off).unwrap().len() < build_filter(&p).unwrap().len());
    }

    #[test]
    fn the_ptys_switch_refuses_unlocking_in_jobs_only() {
        let mut p = Policy::builtin("workspace").unwrap();
        assert!(!p.seccomp.deny_ptys);
        let session = build_filter(&p).unwrap();
        let without = build_job_filter(&p).unwrap().unwrap();
        assert!(!without.iter().any(|i| i.k == TIOCSPTLCK));
        p.seccomp.deny_ptys = true;
        assert_eq!(build_filter(&p).unwrap().len(), session.len(), "the worker unlocks terminal jobs' PTYs");
        let job = build_job_filter(&p).unwrap().unwrap();
        let at = job.iter().position(|i| i.k == TIOCSPTLCK).expect("the request is compared");
        assert_eq!(job[at + 1].k, 0x0005_0000 | libc::EPERM as u32);
        assert_eq!(job[at - 1].k, 24, "args[1]");
        // Not ioctl jumps to the final allow.
        let jump = &job[at - 2];
        assert_eq!(jump.k, libc::SYS_ioctl as u32);
        assert_eq!(at - 2 + 1 + jump.jf as usize, job.len() - 1);
        p.seccomp.deny_new_namespaces = false;
        p.seccomp.deny_setid = false;
        p.seccomp.deny_xattr = false;
        assert!(build_job_filter(&p).unwrap().is_some(), "the ptys switch alone makes a job filter");
    }

    #[test]
    fn network_on_drops_the_socket_rules() {
        let off = build_filter(&Policy::builtin("workspace").unwrap()).unwrap();
        let on = build_filter(&Policy::builtin("workspace").unwrap().with_network(true)).unwrap();
        assert!(on.len() < off.len());
    }

    #[test]
    fn the_network_stanza_notifies_only_for_non_unix_sockets() {
        let prog = network_notify();
        assert_eq!(prog.last().unwrap().k, libc::SECCOMP_RET_USER_NOTIF);
        // Every jump lands inside the stanza or just past it (the next program).
        for (i, ins) in prog.iter().enumerate() {
            if ins.code == 0x15 {
                assert!(i + 1 + ins.jt as usize <= prog.len() && i + 1 + ins.jf as usize <= prog.len());
            }
        }
        assert_eq!(prog[1].jf as usize + 2, prog.len(), "a foreign arch skips the whole stanza");
        assert_eq!(family_name(2), "AF_INET");
    }
}
