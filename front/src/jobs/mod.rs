//! One job's record in the front: [`job`] (lifecycle, timing, survivors, notes and the results it
//! answers with), [`output_part`] (its output: raw store, rendered lines, counts, whether its streams
//! closed), [`shell_part`] (the snapshot of the shell state it started from and what its capture did)
//! and [`files`] (its output files made ahead).
//!
//! May use: [`crate::output`], [`crate::shell`], [`crate::storage`], [`crate::rpc`].

pub mod files;
pub mod frozen;
pub mod job;
pub mod output_part;
pub mod shell_part;
