//! Startup recovery: what an earlier run (killed, crashed) left under the cgroup root.
//!
//! - `session-*` subtrees: their front and sessions are gone, so nobody can reach their jobs; each is
//!   frozen, listed (logged), `cgroup.kill`ed, verified empty and removed, like a session close. Their
//!   v1 `memory`/`pids` directories are removed after them. (A new front knows none of their jobs; a
//!   client that asks for them gets `unknown_session`.)
//! - `kept/*`: kept on purpose to outlive sessions, so they are adopted: listed by `kept` with
//!   `adopted: true`, ended only by `kept.kill`.
//!
//! ```no_run
//! let adopted = supervisor::recovery::recover(std::path::Path::new("/sys/fs/cgroup/unified/heddle"), None);
//! println!("adopted {} kept jobs", adopted.len());
//! ```

use crate::cgroup::{CgroupTreeOps, RealCgroups};
use crate::limits::V1Root;
use shm_proto::error_chain;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

/// Kill and remove leftover sessions under `root`; return the names of the kept jobs found.
pub fn recover(root: &Path, v1: Option<&V1Root>) -> BTreeSet<String> {
    let cg = RealCgroups;
    for entry in std::fs::read_dir(root).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("session-") || !entry.path().is_dir() {
            continue;
        }
        let dir = entry.path();
        let _ = cg.freeze(&dir);
        let procs = cg.procs(&dir, Path::new("")).unwrap_or_default();
        let ended = cg.kill(&dir).and_then(|()| cg.wait_empty(&dir, Duration::from_secs(5)));
        let removed = matches!(ended, Ok(true)) && cg.remove_tree(&dir).is_ok();
        match ended {
            Err(e) => tracing::warn!("could not end the leftover {}: {}", dir.display(), error_chain(&e)),
            Ok(_) => tracing::info!(
                "ended the leftover {} of an earlier run: {} process(es) killed, removed: {removed}",
                dir.display(),
                procs.len()
            ),
        }
    }
    if let Some(v1) = v1 {
        v1.remove_stale_sessions();
    }
    let kept: BTreeSet<String> =
        crate::kept::list(root, &BTreeSet::new()).unwrap_or_default().into_iter().map(|k| k.name).collect();
    if !kept.is_empty() {
        tracing::info!("adopted {} kept jobs of an earlier run: {:?}", kept.len(), kept);
    }
    kept
}
