//! Giving a closed session's memory back to the system.
//!
//! A session keeps every job it ran (a few KiB each once ended: docs/performance.md, "Front memory per
//! ended job"), and glibc's allocator keeps what the front frees in its arenas for reuse, so the front's
//! resident memory stayed at its high-water mark after the session closed: 3,000 ended jobs took the
//! front from 14 to 27 MiB, and closing the session gave back 3 MiB. When a session is let go
//! ([`want`], from its `Drop`), the retention thread (woken for it) calls `malloc_trim(0)`, which
//! returns every arena's free pages. A burst of closes costs one trim, not one each: the request is a
//! flag, taken by the next wake. Nothing runs on an answer path.
//!
//! ```
//! front::sessions::trim::want();
//! assert!(front::sessions::trim::trim_if_wanted(), "asked for: trims");
//! assert!(!front::sessions::trim::trim_if_wanted(), "once");
//! ```

use std::sync::atomic::{AtomicBool, Ordering};

static WANTED: AtomicBool = AtomicBool::new(false);

/// Memory was let go in bulk (a session's jobs): ask for a trim at the retention thread's next wake,
/// and wake it.
pub fn want() {
    WANTED.store(true, Ordering::Relaxed);
    crate::output::retention::wake_now();
}

/// Give free memory back to the system if [`want`] asked for it since the last call; whether it did.
pub fn trim_if_wanted() -> bool {
    if !WANTED.swap(false, Ordering::Relaxed) {
        return false;
    }
    trim();
    true
}

fn trim() {
    shm_proto::sys::give_back_free_memory();
}
