//! One job's record in the front: [`job`] (lifecycle, timing, output bookkeeping and the result it
//! answers with), [`shell_part`] (the snapshot of the shell state it started from and what its capture
//! did) and [`files`] (its output files on disk).
//!
//! May use: [`crate::output`], [`crate::shell`], [`crate::storage`], [`crate::rpc`].

pub mod files;
pub mod job;
pub mod shell_part;
