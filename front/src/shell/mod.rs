//! The shell state bash carries between jobs (cwd, variables, functions, aliases, options, umask): a
//! job's capture (untrusted bytes from the worker) is parsed by [`shm_proto::capture`], which owns its
//! format; [`record`] keeps a session's versioned record and its restore script, [`env`] the
//! environment-borne part of a restore, [`scope`] decides what a command can change (on the bash parse tree from [`parse`]), [`failures`]
//! turns the commands a job saw fail into runtime warnings.
//!
//! May use: [`crate::rpc`].

pub mod env;
pub mod failures;
pub mod parse;
pub mod record;
pub mod scope;
