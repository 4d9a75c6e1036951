//! Checks: test and gate commands run as jobs, with their routing shown and their results parsed
//! (docs/architecture.md, "Checks").
//!
//! This room owns reading test runners' output ([`parse`] and one module per runner) and finding a
//! project's checks ([`config`]: `.heddle/checks.toml`, then detection). It uses no other room; the
//! `check` and `checks` methods (`kernel::check_run`, `kernel::checks_list`) use it.

pub mod config;
pub mod gotest;
pub mod jest;
pub mod libtest;
pub mod nextest;
pub mod parse;
pub mod pytest;
