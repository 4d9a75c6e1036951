//! Checks: test and gate commands run as jobs, with their routing shown and their results parsed
//! (docs/architecture.md, "Checks").
//!
//! This room owns reading test runners' output ([`parse`] and one module per runner), finding a
//! project's checks ([`config`]: `.heddle/checks.toml`, else detection), and the `check`/`checks`
//! methods. It uses the jobs, sessions and storage of the kernel as `run` does; nothing else depends on
//! it but the method table.

pub mod config;
pub mod gotest;
pub mod jest;
pub mod libtest;
pub mod nextest;
pub mod parse;
pub mod pytest;
