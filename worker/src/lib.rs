//! worker (being built)
