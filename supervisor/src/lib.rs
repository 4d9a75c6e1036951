//! supervisor (being built)
