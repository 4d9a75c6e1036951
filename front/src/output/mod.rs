//! Output, on disk and in memory: the [`store`] keeps every byte a job writes; [`rendered`] (with one
//! terminal [`screen`] per stream) turns chunks into model-facing lines, which the [`linelog`] keeps
//! on disk; [`view`] builds the budgeted model view; [`views`] answers the line views of `output`;
//! [`sniff`] names binary output; [`retention`] says how much is kept and what was removed.
//!
//! May use: [`crate::storage`], [`crate::rpc`].

pub mod linelog;
pub mod rendered;
pub mod retention;
pub mod screen;
pub mod sniff;
pub mod store;
pub mod view;
pub mod views;
