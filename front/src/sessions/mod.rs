//! A live session as the front holds it: the [`session`] record (its region and doorbells, the
//! command path to its worker, its jobs), the [`supervisor`] link that opens and closes sessions, the
//! [`pump`] thread that drains every session's event ring, the [`journal`] a restarted front takes a
//! session over from, the live [`subscribers`], the [`sandbox`] request a session was opened with,
//! [`prestart`] hints, the files made ahead of the next job ([`files_ahead`]) and [`retain`], which
//! enforces a session's output budget, and [`trim`], which gives a let-go session's memory back to the system.
//!
//! May use: [`crate::jobs`], [`crate::output`], [`crate::shell`], [`crate::storage`], [`crate::rpc`].
//! Nothing here knows the method table or a transport.

pub mod files_ahead;
pub mod journal;
pub mod prestart;
pub mod pump;
pub mod refusal;
pub mod retain;
pub mod retired;
pub mod sandbox;
pub mod session;
pub mod subscribers;
pub mod supervisor;
pub mod trim;
