//! policies (being built)
