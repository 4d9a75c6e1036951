//! tests (being built)
