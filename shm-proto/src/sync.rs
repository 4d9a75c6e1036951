//! Atomics facade: `std` atomics normally, `loom`'s under `--cfg loom` so the ring's ordering and the
//! park/wake protocol can be model-checked (see `tests/loom_ring.rs`).

#[cfg(loom)]
pub use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
#[cfg(not(loom))]
pub use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
