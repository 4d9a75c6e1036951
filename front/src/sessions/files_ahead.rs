//! The `job-files` thread: it makes the next job's output files while a session waits for its next
//! call (see [`crate::jobs::files`] for why and for the invariants a pair keeps).

use crate::jobs::files::{Ahead, JobFiles};
use crate::sessions::session::Session;
use crossbeam_channel::{unbounded, Receiver, Sender};
use shm_proto::msg::JobId;
use std::sync::{Arc, Weak};

impl std::fmt::Debug for Maker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Maker").finish_non_exhaustive()
    }
}

/// The `job-files` thread's handle.
pub struct Maker {
    tx: Sender<(Weak<Session>, JobId)>,
}

impl Maker {
    /// Start the thread (it ends when the maker is dropped).
    pub fn start() -> std::io::Result<Maker> {
        let (tx, rx) = unbounded();
        std::thread::Builder::new().name("job-files".into()).spawn(move || {
            let _ = shm_proto::sys::background_thread();
            run(rx)
        })?;
        Ok(Maker { tx })
    }

    /// Have the files of `s`'s next job made, unless they are made or asked for already.
    pub fn ahead(&self, s: &Arc<Session>) {
        let mut st = s.lock();
        let next = st.last_job() + 1;
        let asked = match st.files_ahead() {
            Ahead::Asked(id) => *id == next,
            Ahead::Ready(f) => f.id == next,
            Ahead::None => false,
        };
        if asked || st.is_closing() {
            return;
        }
        st.set_files_ahead(Ahead::Asked(next));
        drop(st);
        let _ = self.tx.send((Arc::downgrade(s), next));
    }
}

fn run(rx: Receiver<(Weak<Session>, JobId)>) {
    for (session, id) in rx {
        let Some(s) = session.upgrade() else { continue };
        let made = JobFiles::open(&s.jobs_dir().join(format!("{id}.log")), id);
        let dirty = made.as_ref().is_ok_and(JobFiles::dirty);
        let mut st = s.lock();
        let wanted = matches!(st.files_ahead(), Ahead::Asked(a) if *a == id) && st.last_job() < id;
        if wanted {
            st.set_files_ahead(Ahead::None);
        }
        let Ok(files) = made else { continue };
        // Otherwise a job took the id and made (or is making) the same files itself, so they are its own
        // now; or the session closed, and the pair stays (empty) rather than be removed by path here,
        // where a session reopened under the same name may already own it.
        if wanted && !st.is_closing() {
            if dirty {
                let _ = files.log.set_len(0);
                let _ = files.lines.set_len(0);
            }
            st.set_files_ahead(Ahead::Ready(files));
        }
    }
}
