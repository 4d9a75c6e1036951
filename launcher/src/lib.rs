//! launcher (being built)
