//! A session's shared region: one sealed memfd holding a versioned [`Header`] and two rings.
//!
//! ```text
//! 0      Header (one page; magic written last, with Release)
//! 4096   cmd RingCtl (front → worker) · 64-aligned data (cmd_capacity bytes)
//! …      evt RingCtl (worker → front) · 64-aligned data (evt_capacity bytes), page-aligned start
//! ```
//!
//! The supervisor creates the region ([`Region::create`]), seals its size (so a hostile mapper cannot
//! shrink it under a reader and fault it), and passes the fd to the worker and the front, which
//! [`Region::attach`] and validate every field before trusting the layout.
#![allow(unsafe_code)]

use crate::ring::{self, Consumer, Producer, RingCtl, ShmSafe};
use crate::sync::{AtomicU32, AtomicU64, Ordering};
use memmap2::MmapRaw;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

/// `b"HEDDLE\0\x01"` as a little-endian `u64`.
pub const MAGIC: u64 = u64::from_le_bytes(*b"HEDDLE\0\x01");
/// Layout version; bump on any change to [`Header`], [`RingCtl`] or the frame format.
pub const VERSION: u32 = 1;
const HEADER_BYTES: usize = 4096;
const CTL_BYTES: usize = 512;

/// The region header. Every field is atomic: the other side may write it at any time.
#[repr(C)]
#[derive(Debug)]
pub struct Header {
    /// [`MAGIC`], stored last (Release) once the rest of the header is written.
    pub magic: AtomicU64,
    pub version: AtomicU32,
    pub header_size: AtomicU32,
    pub region_size: AtomicU64,
    pub cmd_offset: AtomicU64,
    pub cmd_capacity: AtomicU64,
    pub evt_offset: AtomicU64,
    pub evt_capacity: AtomicU64,
    /// The front that reads the event ring (informational; the front writes it).
    pub front_pid: AtomicU32,
    /// The worker that writes the event ring (informational; the worker writes it).
    pub worker_pid: AtomicU32,
    /// Bumped by the worker on every pass of its loop (no timer: an idle worker costs nothing).
    pub heartbeat: AtomicU64,
}

// SAFETY: `#[repr(C)]`, atomics only, valid for every bit pattern.
unsafe impl ShmSafe for Header {}

/// Ring sizes for a new region.
#[derive(Clone, Copy, Debug)]
pub struct RegionConfig {
    /// Front → worker command ring, bytes (power of two).
    pub cmd_capacity: usize,
    /// Worker → front event ring, bytes (power of two).
    pub evt_capacity: usize,
}

impl Default for RegionConfig {
    fn default() -> Self {
        RegionConfig { cmd_capacity: 256 * 1024, evt_capacity: 4 * 1024 * 1024 }
    }
}

/// Errors creating a region.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CreateError {
    #[error("ring capacity {0} is not a power of two between 4 KiB and 1 GiB")]
    Capacity(usize),
    #[error("creating the memfd failed")]
    Io(#[source] std::io::Error),
}

/// Errors attaching to a region. Each failure has its own variant.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AttachError {
    #[error("mapping the region failed")]
    Io(#[source] std::io::Error),
    #[error("region is {0} bytes, smaller than a header")]
    TooSmall(u64),
    #[error("region is not sealed against shrinking")]
    NotSealed,
    #[error("bad magic {0:#x}: not a heddle region, or not initialised yet")]
    BadMagic(u64),
    #[error("region layout version {found}, this build speaks {VERSION}")]
    Version { found: u32 },
    #[error("region header is inconsistent: {0}")]
    Layout(&'static str),
}

struct Mapping(MmapRaw);

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region").finish_non_exhaustive()
    }
}

/// A mapped session region.
#[derive(Clone)]
pub struct Region {
    map: Arc<Mapping>,
    cmd: (usize, usize),
    evt: (usize, usize),
}

const fn align_up(n: usize, a: usize) -> usize {
    (n + a - 1) & !(a - 1)
}

fn valid_capacity(cap: usize) -> bool {
    cap.is_power_of_two() && (4096..=1 << 30).contains(&cap)
}

impl Region {
    /// Create, initialise and seal a new region; returns it and its memfd (close-on-exec).
    pub fn create(cfg: RegionConfig) -> Result<(Region, OwnedFd), CreateError> {
        for cap in [cfg.cmd_capacity, cfg.evt_capacity] {
            if !valid_capacity(cap) {
                return Err(CreateError::Capacity(cap));
            }
        }
        let cmd_off = HEADER_BYTES;
        let evt_off = align_up(cmd_off + CTL_BYTES + cfg.cmd_capacity, 4096);
        let size = align_up(evt_off + CTL_BYTES + cfg.evt_capacity, 4096);
        let fd = crate::sys::memfd_sized("heddle-session", size as u64).map_err(CreateError::Io)?;
        let map = MmapRaw::map_raw(&fd).map_err(CreateError::Io)?;
        let region =
            Region { map: Arc::new(Mapping(map)), cmd: (cmd_off, cfg.cmd_capacity), evt: (evt_off, cfg.evt_capacity) };
        let h = region.header();
        h.version.store(VERSION, Ordering::Relaxed);
        h.header_size.store(HEADER_BYTES as u32, Ordering::Relaxed);
        h.region_size.store(size as u64, Ordering::Relaxed);
        h.cmd_offset.store(cmd_off as u64, Ordering::Relaxed);
        h.cmd_capacity.store(cfg.cmd_capacity as u64, Ordering::Relaxed);
        h.evt_offset.store(evt_off as u64, Ordering::Relaxed);
        h.evt_capacity.store(cfg.evt_capacity as u64, Ordering::Relaxed);
        // SYNC POINT: Release pairs with the Acquire load of `magic` in `attach`: a mapper that sees the
        // magic sees the whole header.
        h.magic.store(MAGIC, Ordering::Release);
        crate::sys::seal(fd.as_fd()).map_err(CreateError::Io)?;
        Ok((region, fd))
    }

    /// Map a region received from the supervisor and validate its header.
    pub fn attach(fd: BorrowedFd<'_>) -> Result<Region, AttachError> {
        let size = crate::sys::fd_size(fd).map_err(AttachError::Io)?;
        if size < HEADER_BYTES as u64 {
            return Err(AttachError::TooSmall(size));
        }
        if !crate::sys::is_sealed(fd).map_err(AttachError::Io)? {
            return Err(AttachError::NotSealed);
        }
        let map = MmapRaw::map_raw(&fd).map_err(AttachError::Io)?;
        let probe = Region { map: Arc::new(Mapping(map)), cmd: (0, 0), evt: (0, 0) };
        let h = probe.header();
        // SYNC POINT: Acquire pairs with the Release store of `magic` in `create`.
        let magic = h.magic.load(Ordering::Acquire);
        if magic != MAGIC {
            return Err(AttachError::BadMagic(magic));
        }
        let found = h.version.load(Ordering::Relaxed);
        if found != VERSION {
            return Err(AttachError::Version { found });
        }
        if h.header_size.load(Ordering::Relaxed) as usize != HEADER_BYTES {
            return Err(AttachError::Layout("header size"));
        }
        if h.region_size.load(Ordering::Relaxed) != size {
            return Err(AttachError::Layout("region size differs from the memfd's size"));
        }
        let ring = |off: &AtomicU64, cap: &AtomicU64| -> Result<(usize, usize), AttachError> {
            let (off, cap) = (off.load(Ordering::Relaxed), cap.load(Ordering::Relaxed));
            let (Ok(off), Ok(cap)) = (usize::try_from(off), usize::try_from(cap)) else {
                return Err(AttachError::Layout("ring offset or capacity out of range"));
            };
            if !valid_capacity(cap) || off % 4096 != 0 || off < HEADER_BYTES {
                return Err(AttachError::Layout("ring offset or capacity not aligned"));
            }
            match off.checked_add(CTL_BYTES).and_then(|e| e.checked_add(cap)) {
                Some(end) if end as u64 <= size => Ok((off, cap)),
                _ => Err(AttachError::Layout("ring runs past the end of the region")),
            }
        };
        let cmd = ring(&h.cmd_offset, &h.cmd_capacity)?;
        let evt = ring(&h.evt_offset, &h.evt_capacity)?;
        let (first, second) = if cmd.0 < evt.0 { (cmd, evt) } else { (evt, cmd) };
        if first.0 + CTL_BYTES + first.1 > second.0 {
            return Err(AttachError::Layout("rings overlap"));
        }
        Ok(Region { map: probe.map, cmd, evt })
    }

    /// The header (atomics only; safe to read while the other side writes).
    pub fn header(&self) -> &Header {
        // SAFETY: the mapping is at least HEADER_BYTES long (created so, or checked in `attach`), page
        // aligned, lives as long as `self`, and `Header` is `ShmSafe` (atomics only).
        unsafe { &*self.map.0.as_ptr().cast::<Header>() }
    }

    fn parts(&self, (off, cap): (usize, usize)) -> (*const RingCtl, *mut u8, usize, Arc<dyn Send + Sync>) {
        // SAFETY: `off + CTL_BYTES + cap` lies within the mapping (checked at create/attach).
        let base = unsafe { self.map.0.as_mut_ptr().add(off) };
        // SAFETY: as above; the data starts CTL_BYTES after the control block.
        let data = unsafe { base.add(CTL_BYTES) };
        (base.cast::<RingCtl>(), data, cap, self.map.clone())
    }

    /// The event ring's control block, for tools and tests that inspect (or, as an attacker would,
    /// corrupt) a live ring; the ends use [`Region::evt_producer`] and [`Region::evt_consumer`].
    pub fn evt_ctl(&self) -> &RingCtl {
        let (ctl, _, _, _) = self.parts(self.evt);
        // SAFETY: the control block lies page-aligned inside the mapping, which lives as long as `self`;
        // it holds only atomics, valid for every bit pattern and sound to share.
        unsafe { &*ctl }
    }

    /// The command ring's producer (the front's end). Call once per region per process.
    pub fn cmd_producer(&self) -> Producer {
        let (c, d, n, o) = self.parts(self.cmd);
        // SAFETY: control block page-aligned, data 64-aligned, both inside the mapping kept alive by `o`;
        // only the front takes this end.
        unsafe { ring::producer(c, d, n, o) }
    }

    /// The command ring's consumer (the worker's end).
    pub fn cmd_consumer(&self) -> Consumer {
        let (c, d, n, o) = self.parts(self.cmd);
        // SAFETY: as for `cmd_producer`; only the worker takes this end.
        unsafe { ring::consumer(c, d, n, o) }
    }

    /// The event ring's producer (the worker's end).
    pub fn evt_producer(&self) -> Producer {
        let (c, d, n, o) = self.parts(self.evt);
        // SAFETY: as for `cmd_producer`; only the worker takes this end.
        unsafe { ring::producer(c, d, n, o) }
    }

    /// The event ring's consumer (the front's end).
    pub fn evt_consumer(&self) -> Consumer {
        let (c, d, n, o) = self.parts(self.evt);
        // SAFETY: as for `cmd_producer`; only the front takes this end.
        unsafe { ring::consumer(c, d, n, o) }
    }
}

// SAFETY: `Mapping` wraps a shared mapping that is only accessed through atomics and raw copies.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attach_sees_what_create_wrote() {
        let (r, fd) = Region::create(RegionConfig::default()).unwrap();
        let a = Region::attach(fd.as_fd()).unwrap();
        let (mut tx, mut rx) = (r.evt_producer(), a.evt_consumer());
        tx.try_push(b"across mappings").unwrap();
        let mut out = Vec::new();
        assert!(rx.try_pop(&mut out).unwrap());
        assert_eq!(out, b"across mappings");
    }

    #[test]
    fn unsealed_memfd_is_refused() {
        let fd = crate::sys::memfd_sized("x", 1 << 20).unwrap();
        assert!(matches!(Region::attach(fd.as_fd()), Err(AttachError::NotSealed)));
    }

    #[test]
    fn bad_magic_is_refused() {
        let (r, fd) = Region::create(RegionConfig::default()).unwrap();
        r.header().magic.store(1, Ordering::Relaxed);
        assert!(matches!(Region::attach(fd.as_fd()), Err(AttachError::BadMagic(1))));
    }

    #[test]
    fn overlapping_rings_are_refused() {
        let (r, fd) = Region::create(RegionConfig::default()).unwrap();
        let cmd = r.header().cmd_offset.load(Ordering::Relaxed);
        r.header().evt_offset.store(cmd, Ordering::Relaxed);
        r.header().evt_capacity.store(4096, Ordering::Relaxed);
        assert!(matches!(Region::attach(fd.as_fd()), Err(AttachError::Layout(_))));
    }

    #[test]
    fn wrong_version_is_refused() {
        let (r, fd) = Region::create(RegionConfig::default()).unwrap();
        r.header().version.store(99, Ordering::Relaxed);
        assert!(matches!(Region::attach(fd.as_fd()), Err(AttachError::Version { found: 99 })));
    }
}
