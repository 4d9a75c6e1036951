//! Single-producer single-consumer byte ring in shared memory, with park/wake words.
//!
//! Layout: a [`RingCtl`] (three cache lines: consumer `head`, producer `tail`, parked words) followed by
//! `capacity` data bytes (a power of two, 64-byte aligned). `head` and `tail` are monotonically growing
//! byte counters; `tail - head` bytes are in flight. A frame is a [`FRAME_HEADER`]-byte slot holding the
//! body length (`u32`, little endian) followed by the body, the whole padded to [`FRAME_ALIGN`] so that
//! every body starts 64-byte aligned (memcpy into an unaligned destination is many times slower here).
//!
//! Park/wake (no lost wake-up, model-checked in `tests/loom_ring.rs`): a consumer that finds the ring
//! empty calls [`Consumer::park_prepare`], which sets `consumer_parked`, issues a SeqCst fence and checks
//! the ring again; it sleeps on its eventfd only if the ring is still empty. A producer, after publishing,
//! calls [`Producer::wake_needed`] (SeqCst fence, then reads the word) and writes the eventfd only when it
//! returns true. The same pair of words, mirrored, lets a producer facing a full ring park until the
//! consumer frees space. A full ring is backpressure: nothing is ever dropped.
//!
//! The consumer trusts nothing it reads: a `tail` that runs ahead of the capacity, a length beyond the
//! frame limit or beyond the published bytes are [`PopError::Corrupt`], and bytes are copied out with raw
//! copies, never through references into the shared data.
#![allow(unsafe_code)]

use crate::sync::{fence, AtomicU32, AtomicU64, Ordering};
use crossbeam_utils::CachePadded;
use std::sync::Arc;

/// Every frame (header slot included) starts at a multiple of this.
pub const FRAME_ALIGN: usize = 64;
/// Bytes of the header slot before each body (so bodies are [`FRAME_ALIGN`]-aligned).
pub const FRAME_HEADER: usize = 64;
/// The largest body any ring accepts, whatever its capacity.
pub const MAX_FRAME: usize = 1 << 20;

/// Types that may be placed in shared memory.
///
/// # Safety
/// Implementors are `#[repr(C)]`, contain no pointers or references, are valid for every bit pattern
/// the other side can write (atomics and plain integers only), and have the same layout in every process
/// that maps the region.
pub unsafe trait ShmSafe {}

/// The control block at the start of each ring.
#[repr(C)]
#[derive(Default, Debug)]
pub struct RingCtl {
    /// Bytes consumed so far; written only by the consumer.
    pub head: CachePadded<AtomicU64>,
    /// Bytes published so far; written only by the producer.
    pub tail: CachePadded<AtomicU64>,
    /// 1 while the consumer is (about to be) asleep waiting for data.
    pub consumer_parked: CachePadded<AtomicU32>,
    /// 1 while the producer is (about to be) asleep waiting for space.
    pub producer_parked: CachePadded<AtomicU32>,
}

// SAFETY: `RingCtl` is `#[repr(C)]` and holds only atomics (in cache-padded wrappers, themselves
// `#[repr(C)]`-compatible aligned newtypes); every bit pattern is a valid value.
#[cfg(not(loom))]
unsafe impl ShmSafe for RingCtl {}

/// Bytes a frame with a body of `len` bytes occupies in the ring.
pub const fn frame_size(len: usize) -> u64 {
    ((FRAME_HEADER + len + FRAME_ALIGN - 1) & !(FRAME_ALIGN - 1)) as u64
}

/// Errors pushing a frame.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PushError {
    #[error("ring is full")]
    Full,
    #[error("frame body of {len} bytes exceeds this ring's limit of {max}")]
    TooLarge { len: usize, max: usize },
    #[error("ring control block is corrupt: {0}")]
    Corrupt(&'static str),
    #[error("message could not be encoded")]
    Encode(#[source] postcard::Error),
}

/// Errors popping a frame.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PopError {
    #[error("ring is corrupt: {0}")]
    Corrupt(&'static str),
    /// The frame was consumed but its body is not a valid message; later frames may still be read.
    #[error("frame body is not a valid message")]
    Frame(#[source] crate::frame::FrameError),
}

/// A ring's control block and data, and whatever keeps their memory alive.
struct RawRing {
    ctl: *const RingCtl,
    data: *mut u8,
    cap: u64,
    _owner: Arc<dyn Send + Sync>,
}

// SAFETY: the pointers refer to memory kept alive by `_owner` (itself `Send + Sync`); the control block is
// accessed only through atomics and the data bytes only by raw copies, split between exactly one producer
// and one consumer by the head/tail protocol.
unsafe impl Send for RawRing {}

impl RawRing {
    fn ctl(&self) -> &RingCtl {
        // SAFETY: `ctl` points to a live, aligned `RingCtl` (checked by whoever built the ring) for as long
        // as `_owner` lives; it holds only atomics, so a shared reference is sound under concurrent writes.
        unsafe { &*self.ctl }
    }

    fn max_frame(&self) -> usize {
        MAX_FRAME.min((self.cap as usize / 2).saturating_sub(FRAME_HEADER))
    }

    /// Copy `src` into the ring at counter position `pos`, wrapping at the end.
    fn write_at(&self, pos: u64, src: &[u8]) {
        let off = (pos & (self.cap - 1)) as usize;
        let first = src.len().min(self.cap as usize - off);
        // SAFETY: `off + first <= cap` and `src.len() - first <= cap - first`; the region `[pos, pos+len)`
        // lies in the free space the producer owns (checked by the caller against `head`), so the consumer
        // does not read it concurrently. `src` is local memory, never overlapping the ring.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.data.add(off), first);
            std::ptr::copy_nonoverlapping(src.as_ptr().add(first), self.data, src.len() - first);
        }
    }

    /// Copy ring bytes at counter position `pos` into `dst`, wrapping at the end.
    fn read_at(&self, pos: u64, dst: &mut [u8]) {
        let off = (pos & (self.cap - 1)) as usize;
        let first = dst.len().min(self.cap as usize - off);
        // SAFETY: bounds as in `write_at`; the bytes lie between `head` and the `tail` loaded with Acquire,
        // so the producer published them and will not rewrite them until `head` moves past. The bytes are
        // copied out raw; any value is acceptable for `u8`.
        unsafe {
            std::ptr::copy_nonoverlapping(self.data.add(off), dst.as_mut_ptr(), first);
            std::ptr::copy_nonoverlapping(self.data, dst.as_mut_ptr().add(first), dst.len() - first);
        }
    }
}

/// Build the two ends of a ring over memory the caller owns.
///
/// # Safety
/// `ctl` must point to a `RingCtl` aligned to 128 bytes and `data` to `cap` bytes (a power of two, at least
/// `2 * FRAME_ALIGN`), 64-byte aligned; both must stay valid while `owner` lives. At most one
/// `Producer` and one `Consumer` may exist for the ring across all processes at any time.
pub unsafe fn ring_ends(
    ctl: *const RingCtl,
    data: *mut u8,
    cap: usize,
    owner: Arc<dyn Send + Sync>,
) -> (Producer, Consumer) {
    // SAFETY: forwarded from the caller's contract.
    let p = unsafe { producer(ctl, data, cap, owner.clone()) };
    // SAFETY: forwarded from the caller's contract.
    let c = unsafe { consumer(ctl, data, cap, owner) };
    (p, c)
}

/// Build a ring's producer end.
///
/// # Safety
/// As for [`ring_ends`]; there must be no other producer for this ring.
pub unsafe fn producer(ctl: *const RingCtl, data: *mut u8, cap: usize, owner: Arc<dyn Send + Sync>) -> Producer {
    assert!(cap.is_power_of_two() && cap >= 2 * FRAME_ALIGN, "ring capacity must be a power of two");
    let ring = RawRing { ctl, data, cap: cap as u64, _owner: owner };
    let tail = ring.ctl().tail.load(Ordering::Acquire);
    Producer { ring, tail }
}

/// Build a ring's consumer end.
///
/// # Safety
/// As for [`ring_ends`]; there must be no other consumer for this ring.
pub unsafe fn consumer(ctl: *const RingCtl, data: *mut u8, cap: usize, owner: Arc<dyn Send + Sync>) -> Consumer {
    assert!(cap.is_power_of_two() && cap >= 2 * FRAME_ALIGN, "ring capacity must be a power of two");
    let ring = RawRing { ctl, data, cap: cap as u64, _owner: owner };
    let head = ring.ctl().head.load(Ordering::Acquire);
    Consumer { ring, head, poisoned: None, held: false }
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer").finish_non_exhaustive()
    }
}

/// The writing end of a ring.
pub struct Producer {
    ring: RawRing,
    /// Our own tail; the shared copy is only ever written from here.
    tail: u64,
}

impl Producer {
    /// The largest frame body this ring accepts.
    pub fn max_frame(&self) -> usize {
        self.ring.max_frame()
    }

    /// Bytes free for frames right now (a lower bound: the consumer may free more).
    pub fn free_bytes(&self) -> Result<u64, PushError> {
        // SYNC POINT: Acquire pairs with the consumer's Release store of `head` in `try_pop`: the bytes it
        // consumed are no longer read once we see the new head.
        let head = self.ring.ctl().head.load(Ordering::Acquire);
        let used = self.tail.wrapping_sub(head);
        if used > self.ring.cap {
            return Err(PushError::Corrupt("head is ahead of tail or beyond capacity"));
        }
        Ok(self.ring.cap - used)
    }

    /// True if a frame with a body of `len` bytes fits now.
    pub fn fits(&self, len: usize) -> bool {
        len <= self.max_frame() && self.free_bytes().is_ok_and(|f| f >= frame_size(len))
    }

    /// Push one frame; `Full` leaves the ring unchanged (backpressure, nothing dropped).
    pub fn try_push(&mut self, body: &[u8]) -> Result<(), PushError> {
        let max = self.max_frame();
        if body.len() > max {
            return Err(PushError::TooLarge { len: body.len(), max });
        }
        let need = frame_size(body.len());
        if self.free_bytes()? < need {
            return Err(PushError::Full);
        }
        let mut header = [0u8; 8];
        header[..4].copy_from_slice(&(body.len() as u32).to_le_bytes());
        self.ring.write_at(self.tail, &header);
        self.ring.write_at(self.tail + FRAME_HEADER as u64, body);
        self.tail = self.tail.wrapping_add(need);
        // SYNC POINT: Release pairs with the consumer's Acquire load of `tail` in `try_pop`: the frame's
        // bytes written above are visible before the new tail is.
        self.ring.ctl().tail.store(self.tail, Ordering::Release);
        Ok(())
    }

    /// Encode `msg` into `scratch` and push it.
    pub fn push_msg<T: serde::Serialize>(&mut self, msg: &T, scratch: &mut Vec<u8>) -> Result<(), PushError> {
        crate::frame::encode(msg, scratch).map_err(|e| match e {
            crate::frame::FrameError::Encode(e) => PushError::Encode(e),
            _ => PushError::Corrupt("encoder returned a decode error"),
        })?;
        self.try_push(scratch)
    }

    /// After publishing: true when the consumer is parked and must be woken (write its eventfd). Clears
    /// the parked word, so a burst of pushes wakes it once.
    pub fn wake_needed(&self) -> bool {
        // SYNC POINT: SeqCst fence pairs with the fence in `Consumer::park_prepare`: either the consumer
        // sees our tail, or we see its parked word.
        fence(Ordering::SeqCst);
        let ctl = self.ring.ctl();
        ctl.consumer_parked.load(Ordering::Relaxed) == 1 && ctl.consumer_parked.swap(0, Ordering::AcqRel) == 1
    }

    /// Before sleeping for space to push `len` bytes: sets the parked word and checks again. Returns true
    /// if the caller may sleep on its space eventfd; false (word cleared) if the space is already there.
    pub fn park_prepare(&self, len: usize) -> bool {
        let ctl = self.ring.ctl();
        ctl.producer_parked.store(1, Ordering::Relaxed);
        // SYNC POINT: SeqCst fence pairs with the fence in `Consumer::producer_wake_needed`.
        fence(Ordering::SeqCst);
        if self.fits(len) || self.free_bytes().is_err() {
            ctl.producer_parked.store(0, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Clear the parked word after waking.
    pub fn park_done(&self) {
        self.ring.ctl().producer_parked.store(0, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer").finish_non_exhaustive()
    }
}

/// The reading end of a ring.
pub struct Consumer {
    ring: RawRing,
    /// Our own head; the shared copy is only ever written from here.
    head: u64,
    poisoned: Option<&'static str>,
    /// When set, popping does not publish `head`: [`Consumer::release`] does (see [`Consumer::hold`]).
    held: bool,
}

impl Consumer {
    /// Stop publishing `head` on every pop: frames popped stay owned by the ring (the producer cannot
    /// reuse their bytes, and a consumer attaching after a crash pops them again) until
    /// [`Consumer::release`]. A consumer that must store what it popped before the ring forgets it uses
    /// this.
    pub fn hold(&mut self) {
        self.held = true;
    }

    /// Publish `head` up to everything popped so far.
    pub fn release(&mut self) {
        // SYNC POINT: Release pairs with the producer's Acquire load of `head` in `free_bytes`.
        self.ring.ctl().head.store(self.head, Ordering::Release);
    }

    /// `(published head, head after what was popped)`: equal unless frames are held.
    pub fn positions(&self) -> (u64, u64) {
        (self.ring.ctl().head.load(Ordering::Acquire), self.head)
    }

    /// True when no published frame is waiting.
    pub fn is_empty(&self) -> bool {
        // SYNC POINT: Acquire pairs with the producer's Release store of `tail` in `try_push`.
        self.ring.ctl().tail.load(Ordering::Acquire) == self.head
    }

    /// Pop one frame's body into `out` (replacing its contents). `Ok(false)`: the ring is empty.
    pub fn try_pop(&mut self, out: &mut Vec<u8>) -> Result<bool, PopError> {
        if let Some(why) = self.poisoned {
            return Err(PopError::Corrupt(why));
        }
        match self.pop_inner(out) {
            Err(PopError::Corrupt(why)) => {
                self.poisoned = Some(why);
                Err(PopError::Corrupt(why))
            }
            other => other,
        }
    }

    fn pop_inner(&mut self, out: &mut Vec<u8>) -> Result<bool, PopError> {
        // SYNC POINT: Acquire pairs with the producer's Release store of `tail` in `try_push`: the frame
        // bytes are visible once the tail that covers them is.
        let tail = self.ring.ctl().tail.load(Ordering::Acquire);
        let avail = tail.wrapping_sub(self.head);
        if avail == 0 {
            return Ok(false);
        }
        if avail > self.ring.cap {
            return Err(PopError::Corrupt("tail is beyond capacity"));
        }
        if avail % FRAME_ALIGN as u64 != 0 {
            return Err(PopError::Corrupt("tail is not frame-aligned"));
        }
        let mut header = [0u8; 4];
        self.ring.read_at(self.head, &mut header);
        let len = u32::from_le_bytes(header) as usize;
        if len > self.ring.max_frame() {
            return Err(PopError::Corrupt("frame length exceeds the limit"));
        }
        let size = frame_size(len);
        if size > avail {
            return Err(PopError::Corrupt("frame runs past the published bytes"));
        }
        out.clear();
        out.resize(len, 0);
        self.ring.read_at(self.head + FRAME_HEADER as u64, out);
        self.head = self.head.wrapping_add(size);
        if !self.held {
            // SYNC POINT: Release pairs with the producer's Acquire load of `head` in `free_bytes`: we are
            // done reading the bytes we hand back.
            self.ring.ctl().head.store(self.head, Ordering::Release);
        }
        Ok(true)
    }

    /// Pop and decode one message. A frame that does not decode is consumed and reported as
    /// [`PopError::Frame`]; the ring stays usable.
    pub fn pop_msg<T: serde::de::DeserializeOwned>(&mut self, scratch: &mut Vec<u8>) -> Result<Option<T>, PopError> {
        if !self.try_pop(scratch)? {
            return Ok(None);
        }
        crate::frame::decode(scratch).map(Some).map_err(PopError::Frame)
    }

    /// Before sleeping on the data eventfd: sets the parked word and checks again. Returns true if the
    /// caller may sleep; false (word cleared) if data arrived meanwhile.
    pub fn park_prepare(&self) -> bool {
        let ctl = self.ring.ctl();
        ctl.consumer_parked.store(1, Ordering::Relaxed);
        // SYNC POINT: SeqCst fence pairs with the fence in `Producer::wake_needed`.
        fence(Ordering::SeqCst);
        if !self.is_empty() {
            ctl.consumer_parked.store(0, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Clear the parked word after waking (the producer may already have).
    pub fn park_done(&self) {
        self.ring.ctl().consumer_parked.store(0, Ordering::Relaxed);
    }

    /// After consuming: true when the producer is parked waiting for space and must be woken.
    pub fn producer_wake_needed(&self) -> bool {
        // SYNC POINT: SeqCst fence pairs with the fence in `Producer::park_prepare`.
        fence(Ordering::SeqCst);
        let ctl = self.ring.ctl();
        ctl.producer_parked.load(Ordering::Relaxed) == 1 && ctl.producer_parked.swap(0, Ordering::AcqRel) == 1
    }
}

/// A ring over heap memory, for tests and model checking.
pub fn heap_ring(cap: usize) -> (Producer, Consumer) {
    #[repr(C, align(128))]
    struct Block(RingCtl);
    struct Owner {
        ctl: Box<Block>,
        data: Box<[u128]>,
    }
    let mut owner = Owner { ctl: Box::new(Block(RingCtl::default())), data: vec![0u128; cap / 16].into_boxed_slice() };
    let ctl: *const RingCtl = &owner.ctl.0;
    let data = owner.data.as_mut_ptr().cast::<u8>();
    // SAFETY: `Owner` owns both allocations and moves into the `Arc` below without moving the boxed
    // contents; `data` is 16-byte aligned, which the heap ring accepts (alignment matters for speed only).
    let owner: Arc<dyn Send + Sync> = Arc::new(std::sync::Mutex::new(owner));
    // SAFETY: the pointers come from `owner`, which the ring ends keep alive; one producer, one consumer.
    unsafe { ring_ends(ctl, data, cap, owner) }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn push_pop_wraps_around() {
        let (mut p, mut c) = heap_ring(1024);
        let mut out = Vec::new();
        for i in 0..1000u32 {
            let body: Vec<u8> = (0..(i % 300) as usize).map(|b| (b as u32 ^ i) as u8).collect();
            p.try_push(&body).unwrap();
            assert!(c.try_pop(&mut out).unwrap());
            assert_eq!(out, body);
        }
        assert!(!c.try_pop(&mut out).unwrap());
    }

    #[test]
    fn full_ring_refuses_and_keeps_everything() {
        let (mut p, mut c) = heap_ring(1024);
        let mut n = 0;
        while p.try_push(&[n as u8; 100]).is_ok() {
            n += 1;
        }
        assert_eq!(p.try_push(&[0; 100]), Err(PushError::Full));
        let mut out = Vec::new();
        for i in 0..n {
            assert!(c.try_pop(&mut out).unwrap());
            assert_eq!(out, vec![i as u8; 100]);
        }
    }

    #[test]
    fn held_frames_keep_their_space_until_released() {
        let (mut p, mut c) = heap_ring(1024);
        c.hold();
        let mut n = 0;
        while p.try_push(&[n as u8; 100]).is_ok() {
            n += 1;
        }
        let mut out = Vec::new();
        assert!(c.try_pop(&mut out).unwrap());
        let (published, popped) = c.positions();
        assert!(published < popped);
        assert_eq!(p.try_push(&[0; 100]), Err(PushError::Full), "a held frame's bytes are not free");
        c.release();
        assert_eq!(c.positions().0, c.positions().1);
        p.try_push(&[0; 100]).unwrap();
    }

    #[test]
    fn too_large_is_an_error() {
        let (mut p, _c) = heap_ring(1024);
        assert!(matches!(p.try_push(&[0; 1000]), Err(PushError::TooLarge { .. })));
    }

    #[test]
    fn park_prepare_refuses_when_data_waits() {
        let (mut p, c) = heap_ring(1024);
        assert!(c.park_prepare());
        p.try_push(b"x").unwrap();
        assert!(p.wake_needed());
        assert!(!p.wake_needed(), "one wake per park");
        assert!(!c.park_prepare());
    }

    proptest! {
        /// Random bytes written over the control block and data never make the consumer panic or read
        /// out of bounds; it returns frames or errors.
        #[test]
        fn garbage_ring_never_panics(head in any::<u64>(), tail in any::<u64>(),
                                     data in proptest::collection::vec(any::<u8>(), 1024)) {
            let (p, mut c) = heap_ring(1024);
            p.ring.write_at(0, &data);
            p.ring.ctl().tail.store(tail, Ordering::Release);
            c.head = head;
            let mut out = Vec::new();
            for _ in 0..64 {
                match c.try_pop(&mut out) {
                    Ok(true) => prop_assert!(out.len() <= c.ring.max_frame()),
                    Ok(false) | Err(_) => break,
                }
            }
        }

        /// Each kind of corruption, placed after a random run of good frames, reaches the check it names:
        /// the good frames come out intact, then the consumer reports exactly that corruption (and keeps
        /// reporting it: the ring is poisoned), and the producer refuses a head ahead of its tail.
        #[test]
        fn every_corruption_reaches_its_check(good in proptest::collection::vec(0usize..300, 0..6),
                                              kind in 0usize..6, amount in 1u64..1_000_000,
                                              garbage in proptest::collection::vec(any::<u8>(), 1..200)) {
            let (mut p, mut c) = heap_ring(4096);
            for (i, len) in good.iter().enumerate() {
                p.try_push(&vec![i as u8; *len]).unwrap();
            }
            let mut out = Vec::new();
            let first = good.len();
            let tail = p.tail;
            let expect = match kind {
                0 => {
                    p.ring.ctl().tail.store(c.head + p.ring.cap + FRAME_ALIGN as u64 * amount, Ordering::Release);
                    Some("tail is beyond capacity")
                }
                1 => {
                    // A good frame's worth of published bytes plus a ragged end.
                    p.try_push(b"x").unwrap();
                    let ragged = p.tail + 1 + amount % (FRAME_ALIGN as u64 - 1);
                    p.ring.ctl().tail.store(ragged, Ordering::Release);
                    Some("tail is not frame-aligned")
                }
                2 => {
                    let len = (p.ring.max_frame() as u64 + amount).min(u64::from(u32::MAX)) as u32;
                    p.ring.write_at(tail, &len.to_le_bytes());
                    p.ring.ctl().tail.store(tail + FRAME_ALIGN as u64 * 2, Ordering::Release);
                    Some("frame length exceeds the limit")
                }
                3 => {
                    let len = FRAME_ALIGN as u32 + (amount % (p.ring.max_frame() as u64 - FRAME_ALIGN as u64)) as u32;
                    p.ring.write_at(tail, &len.to_le_bytes());
                    p.ring.ctl().tail.store(tail + FRAME_ALIGN as u64, Ordering::Release);
                    Some("frame runs past the published bytes")
                }
                4 => {
                    // A well-framed body that is not a message: consumed, reported, the ring goes on.
                    p.try_push(&garbage).unwrap();
                    p.try_push(&[]).unwrap();
                    None
                }
                _ => {
                    p.ring.ctl().head.store(p.tail + FRAME_ALIGN as u64 * amount, Ordering::Release);
                    prop_assert_eq!(p.try_push(b"y"),
                                    Err(PushError::Corrupt("head is ahead of tail or beyond capacity")));
                    p.ring.ctl().head.store(c.head, Ordering::Release);
                    None
                }
            };
            // A published span that is too long or ragged is refused whole; a bad frame header only once
            // the good frames before it are out.
            if kind >= 2 {
                for (i, len) in good.iter().enumerate() {
                    prop_assert!(c.try_pop(&mut out).unwrap(), "good frame {} of {} comes out", i, first);
                    prop_assert_eq!(&out, &vec![i as u8; *len]);
                }
            }
            match (kind, expect) {
                (_, Some(why)) => {
                    let got = c.try_pop(&mut out);
                    prop_assert!(matches!(got, Err(PopError::Corrupt(w)) if w == why), "{:?}", got);
                    let again = c.try_pop(&mut out);
                    prop_assert!(matches!(again, Err(PopError::Corrupt(w)) if w == why), "poisoned: {:?}", again);
                }
                (4, None) => {
                    let mut scratch = Vec::new();
                    let got = c.pop_msg::<crate::msg::Event>(&mut scratch);
                    // Random bytes can happen to decode as an event; otherwise the frame is reported.
                    prop_assert!(matches!(got, Ok(Some(_)) | Err(PopError::Frame(_))), "{:?}", got);
                    prop_assert!(c.try_pop(&mut out).unwrap(), "the frame after a bad one is read");
                    prop_assert!(out.is_empty());
                }
                _ => prop_assert!(!c.try_pop(&mut out).unwrap(), "the refused push left nothing"),
            }
        }

        /// Any sequence of pushes and pops returns exactly the pushed bodies in order.
        #[test]
        fn random_sequences_round_trip(ops in proptest::collection::vec((any::<bool>(), 0usize..500), 1..200)) {
            let (mut p, mut c) = heap_ring(2048);
            let mut expect = std::collections::VecDeque::new();
            let mut out = Vec::new();
            for (i, (push, len)) in ops.into_iter().enumerate() {
                if push {
                    let body = vec![i as u8; len];
                    match p.try_push(&body) {
                        Ok(()) => expect.push_back(body),
                        Err(PushError::Full) => {}
                        Err(e) => prop_assert!(false, "{e}"),
                    }
                } else {
                    let got = c.try_pop(&mut out).unwrap();
                    prop_assert_eq!(got, !expect.is_empty());
                    if got { prop_assert_eq!(&out, &expect.pop_front().unwrap()); }
                }
            }
        }
    }
}
