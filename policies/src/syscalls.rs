//! The syscalls a profile may name, with their x86_64 numbers.
//!
//! A declarative table: a profile's `seccomp.deny` groups may only name syscalls listed here, and
//! an unknown name is a validation error naming it. Numbers come from `libc::SYS_*` for the build
//! target, which must be x86_64 Linux (the x32 guard and these numbers are x86_64 facts; another
//! architecture needs its own table, and the build says so).
//!
//! Invariants: names are unique; [`PTRACE_FAMILY`] names are in the table.
//!
//! ```
//! assert_eq!(policies::syscalls::number("mount"), Some(libc::SYS_mount));
//! assert_eq!(policies::syscalls::number("mount2"), None);
//! ```

#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
compile_error!("policies' syscall table is for x86_64 Linux; add a table for this target");

/// Syscalls governed by the `seccomp.ptrace` switch (denied together when it denies), not by groups.
pub const PTRACE_FAMILY: [&str; 3] = ["ptrace", "process_vm_readv", "process_vm_writev"];

/// Every syscall a profile may name, and its number on x86_64.
pub const TABLE: &[(&str, libc::c_long)] = &[
    // mount family
    ("mount", libc::SYS_mount),
    ("umount2", libc::SYS_umount2),
    ("pivot_root", libc::SYS_pivot_root),
    ("chroot", libc::SYS_chroot),
    ("fsopen", libc::SYS_fsopen),
    ("fsconfig", libc::SYS_fsconfig),
    ("fsmount", libc::SYS_fsmount),
    ("fspick", libc::SYS_fspick),
    ("move_mount", libc::SYS_move_mount),
    ("open_tree", libc::SYS_open_tree),
    ("mount_setattr", libc::SYS_mount_setattr),
    // namespaces
    ("unshare", libc::SYS_unshare),
    ("setns", libc::SYS_setns),
    // kernel attack surface
    ("bpf", libc::SYS_bpf),
    ("perf_event_open", libc::SYS_perf_event_open),
    ("userfaultfd", libc::SYS_userfaultfd),
    ("io_uring_setup", libc::SYS_io_uring_setup),
    ("io_uring_enter", libc::SYS_io_uring_enter),
    ("io_uring_register", libc::SYS_io_uring_register),
    // kernel keyring
    ("keyctl", libc::SYS_keyctl),
    ("add_key", libc::SYS_add_key),
    ("request_key", libc::SYS_request_key),
    // file handles that bypass path checks
    ("open_by_handle_at", libc::SYS_open_by_handle_at),
    ("name_to_handle_at", libc::SYS_name_to_handle_at),
    // kernel and machine state
    ("kexec_load", libc::SYS_kexec_load),
    ("kexec_file_load", libc::SYS_kexec_file_load),
    ("init_module", libc::SYS_init_module),
    ("finit_module", libc::SYS_finit_module),
    ("delete_module", libc::SYS_delete_module),
    ("reboot", libc::SYS_reboot),
    ("swapon", libc::SYS_swapon),
    ("swapoff", libc::SYS_swapoff),
    ("acct", libc::SYS_acct),
    ("quotactl", libc::SYS_quotactl),
    ("quotactl_fd", libc::SYS_quotactl_fd),
    ("syslog", libc::SYS_syslog),
    ("vhangup", libc::SYS_vhangup),
    ("iopl", libc::SYS_iopl),
    ("ioperm", libc::SYS_ioperm),
    ("settimeofday", libc::SYS_settimeofday),
    ("clock_settime", libc::SYS_clock_settime),
    ("clock_adjtime", libc::SYS_clock_adjtime),
    ("adjtimex", libc::SYS_adjtimex),
    ("personality", libc::SYS_personality),
    ("fanotify_init", libc::SYS_fanotify_init),
    // obsolete calls nothing modern needs
    ("lookup_dcookie", libc::SYS_lookup_dcookie),
    ("uselib", libc::SYS_uselib),
    ("ustat", libc::SYS_ustat),
    ("sysfs", libc::SYS_sysfs),
    ("_sysctl", libc::SYS__sysctl),
    ("nfsservctl", libc::SYS_nfsservctl),
    // cross-process inspection
    ("ptrace", libc::SYS_ptrace),
    ("process_vm_readv", libc::SYS_process_vm_readv),
    ("process_vm_writev", libc::SYS_process_vm_writev),
    ("kcmp", libc::SYS_kcmp),
    ("pidfd_getfd", libc::SYS_pidfd_getfd),
];

/// The x86_64 number of syscall `name`, if the table has it.
pub fn number(name: &str) -> Option<libc::c_long> {
    TABLE.iter().find(|(n, _)| *n == name).map(|&(_, nr)| nr)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn names_and_numbers_are_unique() {
        let names: HashSet<_> = TABLE.iter().map(|(n, _)| n).collect();
        let numbers: HashSet<_> = TABLE.iter().map(|(_, nr)| nr).collect();
        assert_eq!(names.len(), TABLE.len());
        assert_eq!(numbers.len(), TABLE.len());
    }

    #[test]
    fn known_x86_64_numbers() {
        // Spot checks against the x86_64 syscall table (arch/x86/entry/syscalls/syscall_64.tbl).
        assert_eq!(number("ptrace"), Some(101));
        assert_eq!(number("mount"), Some(165));
        assert_eq!(number("unshare"), Some(272));
        assert_eq!(number("io_uring_setup"), Some(425));
        assert_eq!(number("mount_setattr"), Some(442));
    }

    #[test]
    fn ptrace_family_is_in_the_table() {
        for name in PTRACE_FAMILY {
            assert!(number(name).is_some(), "{name}");
        }
    }
}
