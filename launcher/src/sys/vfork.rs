//! The vfork-style `clone3(CLONE_VM | CLONE_VFORK | CLONE_PIDFD [| CLONE_INTO_CGROUP])`.
//!
//! A fork-style clone copies the launching process's page tables (and marks every private page
//! copy-on-write), which costs in proportion to the parent's mapped memory; `posix_spawn` avoids that
//! with `CLONE_VM | CLONE_VFORK`, and so does this path:
//!
//! - the child shares the parent's memory and runs on a dedicated stack ([`ChildStack`], one mapping per
//!   launching thread with a guard page below it, reused across spawns);
//! - the launching thread sleeps in the kernel until the child `execve`s or `_exit`s (`CLONE_VFORK`), so
//!   the stack is free again when [`clone3_vfork`] returns, and nothing the child reads (the
//!   [`ChildPlan`], on the parent's stack) changes under it;
//! - the child starts in a small assembly trampoline (the kernel hands it the new stack, so it cannot
//!   return into Rust code that expects the parent's frame), which calls [`vfork_child`] with the plan;
//! - the child runs exactly the same steps as the fork-style child ([`super::child_exec`]): raw system
//!   calls on data prepared before the clone, nothing allocated, no lock taken, nothing written but its
//!   own stack and the thread's `errno` (which the parent does not read after a successful clone);
//! - other threads of the parent keep running while the child runs; the child touches no heap, so they
//!   cannot race with it. Signals are blocked across the clone in the launching thread (the child
//!   inherits that mask and a private copy of the dispositions, which it resets before `execve`).
//!
//! The trampoline exists for x86_64 only ([`VFORK_BUILT`]); elsewhere the launcher uses its fork-style
//! path.
#![allow(unsafe_code)]

use super::{child_exec, BlockAll, ChildPlan, CloneArgs, CLONE_INTO_CGROUP};
use nix::errno::Errno;
use std::cell::RefCell;
use std::ffi::{c_int, c_long, c_void};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// True where this build has the trampoline (x86_64).
pub(crate) const VFORK_BUILT: bool = cfg!(target_arch = "x86_64");

/// Usable stack of the vfork child. The child's steps need well under 8 KiB (a few small frames and
/// raw system calls); the rest is margin.
const STACK_SIZE: usize = 64 * 1024;

/// A stack for vfork children: `STACK_SIZE` bytes above one inaccessible guard page.
struct ChildStack {
    base: *mut c_void,
    guard: usize,
}

impl ChildStack {
    fn map() -> Result<ChildStack, Errno> {
        // SAFETY: sysconf with a valid name only returns a number.
        let guard = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096).max(4096);
        // SAFETY: an anonymous private mapping at an address of the kernel's choosing; no existing memory is
        // affected.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                guard + STACK_SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(Errno::last());
        }
        let stack = ChildStack { base, guard };
        // SAFETY: the first page of the mapping we just created; making it inaccessible turns a stack
        // overflow of the child into a fault instead of a write into whatever lies below.
        if unsafe { libc::mprotect(base, guard, libc::PROT_NONE) } < 0 {
            return Err(Errno::last());
        }
        Ok(stack)
    }

    /// `(lowest usable address, size)` as `clone3` takes them; the top is page-aligned, so 16-aligned.
    fn clone_args(&self) -> (u64, u64) {
        (self.base as u64 + self.guard as u64, STACK_SIZE as u64)
    }
}

impl Drop for ChildStack {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping `map` created; no child runs on it (each spawn returns only
        // after its child exec'd or exited).
        unsafe { libc::munmap(self.base, self.guard + STACK_SIZE) };
    }
}

thread_local! {
    /// This thread's vfork child stack, mapped on first use.
    static STACK: RefCell<Option<ChildStack>> = const { RefCell::new(None) };
}

/// Create a vfork-style child that runs `plan` and `execve`s (placed into `cgroup` by the kernel when
/// given); returns its pid and pidfd once the child has exec'd or exited.
pub(crate) fn clone3_vfork(plan: &ChildPlan<'_>, cgroup: Option<BorrowedFd<'_>>) -> Result<(u32, OwnedFd), Errno> {
    if !VFORK_BUILT {
        return Err(Errno::ENOSYS);
    }
    STACK.with(|cell| {
        let mut slot = cell.try_borrow_mut().map_err(|_| Errno::EBUSY)?;
        if slot.is_none() {
            *slot = Some(ChildStack::map()?);
        }
        // Never clone CLONE_VM without a stack of the child's own (it would run on ours).
        let Some((stack, stack_size)) = slot.as_ref().map(ChildStack::clone_args) else {
            return Err(Errno::ENOMEM);
        };
        let mut pidfd: c_int = -1;
        let mut args = CloneArgs {
            flags: (libc::CLONE_PIDFD | libc::CLONE_VM | libc::CLONE_VFORK) as u64,
            pidfd: &mut pidfd as *mut c_int as u64,
            exit_signal: libc::SIGCHLD as u64,
            stack,
            stack_size,
            ..CloneArgs::default()
        };
        if let Some(cg) = cgroup {
            args.flags |= CLONE_INTO_CGROUP;
            args.cgroup = cg.as_raw_fd() as u64;
        }
        let guard = BlockAll::new();
        // SAFETY: `args` is a valid clone_args naming a stack no other child uses (this thread's, free
        // because the previous vfork child is gone); `plan` and everything it borrows outlive the call, and
        // this thread does not run again until the child exec'd or exited (CLONE_VFORK).
        let ret = unsafe { clone3_trampoline(&mut args, std::ptr::from_ref(plan).cast::<c_void>()) };
        drop(guard);
        if ret < 0 {
            return Err(Errno::from_raw(i32::try_from(-ret).unwrap_or(libc::EINVAL)));
        }
        // SAFETY: the kernel stored a fresh pidfd (CLONE_PIDFD, close-on-exec) for the child it created;
        // nothing else owns it.
        let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
        Ok((ret as u32, pidfd))
    })
}

/// The child's first Rust frame: run the plan's steps.
///
/// # Safety
/// Only called by the trampoline in a vfork child, with `plan` pointing at a live [`ChildPlan`].
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
unsafe extern "C" fn vfork_child(plan: *const c_void) -> ! {
    // SAFETY: the trampoline passes the plan pointer given to `clone3_trampoline`; the parent's frame that
    // holds it is frozen until this child exec's or exits.
    unsafe { child_exec(&*plan.cast::<ChildPlan<'_>>()) }
}

/// `clone3(args)`; in the child (return value 0, on the new stack) call `vfork_child(plan)`, which never
/// returns. Returns the raw result in the parent: the child's pid, or `-errno`.
///
/// # Safety
/// `args` must be a valid `clone_args` with `CLONE_VM | CLONE_VFORK` and a stack of its own; `plan` as in
/// [`vfork_child`].
#[cfg(target_arch = "x86_64")]
unsafe fn clone3_trampoline(args: *mut CloneArgs, plan: *const c_void) -> c_long {
    let ret: c_long;
    // SAFETY: the syscall instruction preserves every register but rax, rcx and r11. The parent (rax ≠ 0)
    // falls through to label 2 with rdi, rsi, r12 and r13 unchanged. The child (rax = 0) starts on the new
    // stack with the parent's registers, clears the frame pointer (end of the backtrace), moves `plan`
    // into the first argument register and calls `vfork_child`, with rsp 16-aligned before the call as
    // the ABI requires; it never returns (ud2 would trap if it did).
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "xor ebp, ebp",
            "mov rdi, r13",
            "call r12",
            "ud2",
            "2:",
            inlateout("rax") libc::SYS_clone3 => ret,
            in("rdi") args,
            in("rsi") std::mem::size_of::<CloneArgs>(),
            in("r12") vfork_child as unsafe extern "C" fn(*const c_void) -> !,
            in("r13") plan,
            lateout("rcx") _,
            lateout("r11") _,
        );
    }
    ret
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn clone3_trampoline(_args: *mut CloneArgs, _plan: *const c_void) -> c_long {
    -(libc::ENOSYS as c_long)
}
