//! An ended job's record as bytes, and back: what a session writes to disk when it lets a job go from
//! memory ([`crate::sessions::retired`]) and reads back when the job is looked at again.
//!
//! The bytes are postcard of the [`Job`] itself, so nothing a view or a result reads is left out; what
//! is skipped is what an ended, parked job does not hold (open files, write buffers, the renderers'
//! live machines, the items of the shell-state snapshot it started from: only its version is kept).
//! Instants are written as nanoseconds from one instant fixed for the process's life, so a thawed job's
//! instants are the very ones it had (the retention ledger keys on them). The bytes are for this
//! process only: a restarted front rebuilds its jobs from their journals and logs.
//!
//! ```
//! use front::jobs::{frozen, job::Job};
//! let dir = tempfile::tempdir().unwrap();
//! let mut j = Job::new(7, "make".into(), dir.path().join("7.log"));
//! j.on_exited(Some(2), None, 0, false, std::time::Instant::now());
//! let back = frozen::thaw(&frozen::freeze(&j).unwrap()).unwrap();
//! assert_eq!((back.id(), back.cmd(), back.exit()), (7, "make", (Some(2), None)));
//! ```

use crate::jobs::job::Job;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

/// The instant every frozen instant is counted from.
static ANCHOR: LazyLock<Instant> = LazyLock::new(Instant::now);

/// `t` as signed nanoseconds from [`ANCHOR`].
fn to_ns(t: Instant) -> i64 {
    let a = *ANCHOR;
    match t.checked_duration_since(a) {
        Some(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        None => -i64::try_from(a.duration_since(t).as_nanos()).unwrap_or(i64::MAX),
    }
}

/// The instant `ns` nanoseconds from [`ANCHOR`] (clamped to it when the clock cannot go that far back).
fn from_ns(ns: i64) -> Instant {
    let a = *ANCHOR;
    match ns >= 0 {
        true => a + Duration::from_nanos(ns.unsigned_abs()),
        false => a.checked_sub(Duration::from_nanos(ns.unsigned_abs())).unwrap_or(a),
    }
}

/// `#[serde(with)]` for an [`Instant`].
pub mod instant {
    use super::*;
    pub fn serialize<S: Serializer>(t: &Instant, s: S) -> Result<S::Ok, S::Error> {
        to_ns(*t).serialize(s)
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Instant, D::Error> {
        i64::deserialize(d).map(from_ns)
    }
}

/// `#[serde(with)]` for an `Option<Instant>`.
pub mod opt_instant {
    use super::*;
    pub fn serialize<S: Serializer>(t: &Option<Instant>, s: S) -> Result<S::Ok, S::Error> {
        t.map(to_ns).serialize(s)
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Instant>, D::Error> {
        Option::<i64>::deserialize(d).map(|o| o.map(from_ns))
    }
}

/// `#[serde(with)]` for an `Option<(Instant, T)>`.
pub mod opt_instant_and {
    use super::*;
    pub fn serialize<S: Serializer, T: Serialize>(t: &Option<(Instant, T)>, s: S) -> Result<S::Ok, S::Error> {
        t.as_ref().map(|(i, x)| (to_ns(*i), x)).serialize(s)
    }
    pub fn deserialize<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<(Instant, T)>, D::Error> {
        Option::<(i64, T)>::deserialize(d).map(|o| o.map(|(i, x)| (from_ns(i), x)))
    }
}

/// Errors freezing or thawing a job.
#[derive(Debug, thiserror::Error)]
#[error("a job's record could not be {0}: {1}")]
pub struct FrozenError(&'static str, #[source] postcard::Error);

/// The job as bytes.
pub fn freeze(job: &Job) -> Result<Vec<u8>, FrozenError> {
    postcard::to_stdvec(job).map_err(|e| FrozenError("written", e))
}

/// The job [`freeze`] made these bytes of.
pub fn thaw(bytes: &[u8]) -> Result<Job, FrozenError> {
    postcard::from_bytes(bytes).map_err(|e| FrozenError("read back", e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// A record that is not one (a torn write, a disk error) is an error, never a panic.
        #[test]
        fn garbage_is_an_error_or_a_job_never_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
            let _ = thaw(&bytes);
        }

        /// Any prefix of a real record is refused or read as a job, never a panic.
        #[test]
        fn a_cut_record_never_panics(cut in 0usize..400) {
            let dir = tempfile::tempdir().unwrap();
            let mut j = Job::new(5, "make all".into(), dir.path().join("5.log"));
            j.on_exited(Some(1), None, 7, false, Instant::now());
            let bytes = freeze(&j).unwrap();
            let _ = thaw(&bytes[..cut.min(bytes.len())]);
        }
    }

    #[test]
    fn instants_before_and_after_the_anchor_read_back_exactly() {
        let now = Instant::now();
        for t in [now, now - Duration::from_secs(3), now + Duration::from_nanos(1)] {
            assert_eq!(from_ns(to_ns(t)), t);
        }
    }
}
