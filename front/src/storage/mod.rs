//! Durable storage: the embedded SQLite database ([`db`]) of sessions, jobs, shell-state rows,
//! receipts and the audit log. A session's journal lives with the session ([`crate::sessions::journal`]).
//!
//! May use: [`crate::rpc`].

pub mod db;
