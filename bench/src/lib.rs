//! bench (being built)
