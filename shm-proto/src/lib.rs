//! heddle's shared-memory protocol: the one contract that the worker, the front and the supervisor link.
//!
//! A session owns one sealed memfd [`region`] holding a versioned header and two single-producer
//! single-consumer byte [`ring`]s: front→worker commands and worker→front events (job output among them).
//! Frames in a ring are length-prefixed postcard ([`frame`]) encodings of [`msg`] types. A consumer that
//! finds its ring empty parks by setting a word in shared memory and sleeping on an eventfd; a producer
//! writes the eventfd only when that word is set ([`ring::Producer::wake_needed`]), so a busy pair makes no
//! syscall per message. The supervisor↔front control messages (rare: open and close sessions, with fd
//! passing) live in [`control`].
//!
//! Invariants: everything in the region is hostile to the reader. Every index and length read from shared
//! memory is bounds-checked, bytes are copied out before use, and no reference to non-atomic shared data is
//! ever formed; a garbage frame yields an error, never a panic or an out-of-bounds access.
//!
//! ```
//! use shm_proto::region::{Region, RegionConfig};
//! let (region, _memfd) = Region::create(RegionConfig::default()).unwrap();
//! let (mut tx, mut rx) = (region.cmd_producer(), region.cmd_consumer());
//! tx.try_push(b"hello").unwrap();
//! let mut out = Vec::new();
//! assert!(rx.try_pop(&mut out).unwrap());
//! assert_eq!(out, b"hello");
//! ```
#![deny(unsafe_code)]

pub mod capture;
pub mod control;
pub mod frame;
pub mod log;
pub mod msg;
pub mod procs;
#[cfg(not(loom))]
pub mod region;
pub mod ring;
pub mod sync;
#[cfg(not(loom))]
pub mod sys;

/// An error and its sources as one line: `"outer: inner: os error"`.
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut s = err.to_string();
    let mut src = err.source();
    while let Some(e) = src {
        s.push_str(": ");
        s.push_str(&e.to_string());
        src = e.source();
    }
    s
}
