//! front (being built)
