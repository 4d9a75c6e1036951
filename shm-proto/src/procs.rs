//! Process listings that cross a process boundary, bounded by construction.
//!
//! A job decides how many processes it leaves behind and how long their command lines are (a fork bomb,
//! or 25 background processes with 100 KB arguments). Listed whole, such a job's survivors did not fit
//! one event frame (the worker exited) and the supervisor's death notice listing them did not fit one
//! control packet (it was dropped, and the front never learnt the worker had died). So every listing
//! is a [`ProcList`]: at most [`MAX_LISTED`] entries and a count of the rest, each entry's text cut to
//! [`MAX_CMDLINE`] bytes (its cgroup name to [`MAX_CGROUP`]) with [`CUT_MARKER`]. A decoder refuses a
//! listing over those bounds, so an entry that reached a reader is within them.
//!
//! Bounds (postcard): a [`ProcStat`] encodes to at most 539 bytes, a [`ProcInfo`] to at most 777, so a
//! listing of either stays under 50 KiB, inside an event frame and a control packet (property-tested
//! in `frame.rs`).
//!
//! ```
//! use shm_proto::msg::ProcStat;
//! use shm_proto::procs::{ProcList, MAX_CMDLINE, MAX_LISTED};
//! let all: Vec<ProcStat> = (0..100)
//!     .map(|pid| ProcStat { pid, cmdline: "x".repeat(100_000), age_ms: 0, cpu_ms: 0 })
//!     .collect();
//! let list = ProcList::new(all);
//! assert_eq!((list.len(), list.more(), list.total()), (MAX_LISTED, 36, 100));
//! assert!(list.iter().all(|p| p.cmdline.len() <= MAX_CMDLINE && p.cmdline.ends_with("[cut]")));
//! ```

use crate::control::ProcInfo;
use crate::msg::ProcStat;
use serde::{Deserialize, Serialize};

/// The most entries a listing carries; the rest are counted in [`ProcList::more`].
pub const MAX_LISTED: usize = 64;
/// The longest command line (bytes, marker included) an entry carries.
pub const MAX_CMDLINE: usize = 512;
/// The longest cgroup name (bytes, marker included) an entry carries.
pub const MAX_CGROUP: usize = 256;
/// What ends a text that was cut.
pub const CUT_MARKER: &str = "…[cut]";
/// How much of `/proc/PID/cmdline` a reader needs to cut it exactly: more than [`MAX_CMDLINE`].
pub const CMDLINE_READ: u64 = 2 * MAX_CMDLINE as u64;

/// `s` cut to at most `max` bytes on a character boundary, ending with [`CUT_MARKER`] when cut.
pub fn cut(s: &mut String, max: usize) {
    if s.len() <= max {
        return;
    }
    let mut end = max.saturating_sub(CUT_MARKER.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
    s.push_str(CUT_MARKER);
}

/// An entry of a listing: it can cut its texts to the bounds and say whether it is within them.
pub trait Listed {
    /// Cut every text of the entry to its bound.
    fn bound(&mut self);
    /// True when every text is within its bound.
    fn within_bounds(&self) -> bool;
}

impl Listed for ProcStat {
    fn bound(&mut self) {
        cut(&mut self.cmdline, MAX_CMDLINE);
    }
    fn within_bounds(&self) -> bool {
        self.cmdline.len() <= MAX_CMDLINE
    }
}

impl Listed for ProcInfo {
    fn bound(&mut self) {
        cut(&mut self.cmdline, MAX_CMDLINE);
        cut(&mut self.cgroup, MAX_CGROUP);
    }
    fn within_bounds(&self) -> bool {
        self.cmdline.len() <= MAX_CMDLINE && self.cgroup.len() <= MAX_CGROUP
    }
}

/// At most [`MAX_LISTED`] processes, each within its bounds, and how many more there were.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawList<T>", bound(deserialize = "T: Listed + Deserialize<'de>"))]
pub struct ProcList<T> {
    listed: Vec<T>,
    more: u32,
}

/// A listing as decoded, before its bounds are checked.
#[derive(Deserialize)]
struct RawList<T> {
    listed: Vec<T>,
    more: u32,
}

impl<T: Listed> TryFrom<RawList<T>> for ProcList<T> {
    type Error = String;

    fn try_from(raw: RawList<T>) -> Result<Self, String> {
        if raw.listed.len() > MAX_LISTED {
            return Err(format!("a process listing of {} entries is over {MAX_LISTED}", raw.listed.len()));
        }
        if !raw.listed.iter().all(Listed::within_bounds) {
            return Err("a process listing's entry is over its text bounds".to_owned());
        }
        Ok(ProcList { listed: raw.listed, more: raw.more })
    }
}

impl<T> Default for ProcList<T> {
    fn default() -> Self {
        ProcList { listed: Vec::new(), more: 0 }
    }
}

impl<T: Listed> ProcList<T> {
    /// The first [`MAX_LISTED`] of `all`, cut to their bounds; the rest counted.
    pub fn new(all: Vec<T>) -> Self {
        Self::with_unread(all, 0)
    }

    /// As [`ProcList::new`], plus `unread` processes known to exist but not read (a reader that stops
    /// after [`MAX_LISTED`] pids counts the rest this way).
    pub fn with_unread(mut all: Vec<T>, unread: usize) -> Self {
        let over = all.len().saturating_sub(MAX_LISTED);
        all.truncate(MAX_LISTED);
        for p in &mut all {
            p.bound();
        }
        let more = u32::try_from(over.saturating_add(unread)).unwrap_or(u32::MAX);
        ProcList { listed: all, more }
    }
}

impl<T> ProcList<T> {
    /// How many processes there were beyond the listed ones.
    pub fn more(&self) -> u32 {
        self.more
    }

    /// Listed and more.
    pub fn total(&self) -> u64 {
        self.listed.len() as u64 + u64::from(self.more)
    }

    /// Keep the first `n` entries; count the others in [`ProcList::more`].
    pub fn shrink_to(&mut self, n: usize) {
        let dropped = self.listed.len().saturating_sub(n);
        self.listed.truncate(n);
        self.more = self.more.saturating_add(u32::try_from(dropped).unwrap_or(u32::MAX));
    }

    /// The listed entries and the count of the rest.
    pub fn into_parts(self) -> (Vec<T>, u32) {
        (self.listed, self.more)
    }
}

impl<T> std::ops::Deref for ProcList<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        &self.listed
    }
}

/// `/proc/PID/cmdline` with NULs as spaces; `[comm]` when it is empty (a zombie or kernel thread). Only
/// the first [`CMDLINE_READ`] bytes are read: a job sets its own command lines, up to megabytes, and a
/// listing cuts them to [`MAX_CMDLINE`] ([`cmdline_cut`]).
pub fn cmdline(pid: u32) -> String {
    use std::io::Read;
    let mut raw = Vec::new();
    if let Ok(f) = std::fs::File::open(format!("/proc/{pid}/cmdline")) {
        let _ = f.take(CMDLINE_READ).read_to_end(&mut raw);
    }
    let text = String::from_utf8_lossy(&raw).replace('\0', " ").trim_end().to_owned();
    if !text.is_empty() {
        return text;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/comm")) {
        Ok(comm) => format!("[{}]", comm.trim_end()),
        Err(_) => String::new(),
    }
}

/// [`cmdline`] cut to [`MAX_CMDLINE`] bytes with the cut marker.
pub fn cmdline_cut(pid: u32) -> String {
    let mut c = cmdline(pid);
    cut(&mut c, MAX_CMDLINE);
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_keeps_char_boundaries_and_marks() {
        let mut s = "é".repeat(400);
        cut(&mut s, MAX_CMDLINE);
        assert!(s.len() <= MAX_CMDLINE && s.ends_with(CUT_MARKER), "{}", s.len());
        let mut short = "sleep 300".to_owned();
        cut(&mut short, MAX_CMDLINE);
        assert_eq!(short, "sleep 300");
    }

    #[test]
    fn a_decoded_listing_over_its_bounds_is_refused() {
        let p = |cmdline: String| ProcInfo { pid: 1, cmdline, cgroup: "slot-1".into() };
        let long = RawList { listed: vec![p("x".repeat(MAX_CMDLINE + 1))], more: 0 };
        assert!(ProcList::try_from(long).is_err());
        let many = RawList { listed: (0..=MAX_LISTED).map(|_| p("x".into())).collect(), more: 0 };
        assert!(ProcList::try_from(many).is_err());
        let ok = RawList { listed: vec![p("x".into())], more: 3 };
        assert_eq!(ProcList::try_from(ok).unwrap().total(), 4);
    }

    #[test]
    fn shrink_counts_what_it_drops() {
        let all: Vec<ProcStat> =
            (0..10).map(|pid| ProcStat { pid, cmdline: String::new(), age_ms: 0, cpu_ms: 0 }).collect();
        let mut l = ProcList::with_unread(all, 5);
        l.shrink_to(4);
        assert_eq!((l.len(), l.more(), l.total()), (4, 11, 15));
    }
}
