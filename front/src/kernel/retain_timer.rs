//! The retention timer: checks every open session's output limits (see [`crate::sessions::retain`]),
//! and gives a closed session's memory back to the system ([`crate::sessions::trim`]).

use crate::kernel::Kernel;
use crate::output::retention::config;
use crate::output::retention::Retention;
use crate::sessions::retain::{enforce, enforce_disk};
use std::sync::Weak;
use std::time::{Duration, Instant};

/// How often the timer checks ages: a quarter of the age, between 100 ms and a minute.
pub fn timer_period(r: Retention) -> Duration {
    (r.max_age / 4).clamp(Duration::from_millis(100), Duration::from_secs(60))
}

/// Check every open session's limits every [`timer_period`] until the kernel is gone.
/// Also woken by the output path once a 32nd of the disk budget was written since the last check
/// (see [`crate::output::retention::wrote`]): then the server's disk budget is enforced too. A wake with
/// nothing written since the last check and before the period is up (a session let go, asking for its
/// memory back) only trims: the check looks at every closed session's directory, and a burst of closes
/// woke it once per close (two thirds of the front's CPU while 200 sessions closed, when each check also
/// walked every closed session's files).
pub fn start_timer(kernel: Weak<Kernel>) -> std::io::Result<()> {
    let period = timer_period(config());
    let wake = crate::output::retention::wake_channel();
    std::thread::Builder::new().name("retention".into()).spawn(move || {
        let _ = shm_proto::sys::background_thread();
        let mut checked = Instant::now();
        let mut closed_usage = ClosedUsage::default();
        loop {
            match &wake {
                Some(rx) => match rx.recv_timeout(period.saturating_sub(checked.elapsed())) {
                    Ok(()) | Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => std::thread::sleep(period),
                },
                None => std::thread::sleep(period),
            }
            let Some(k) = kernel.upgrade() else { return };
            if !check_due(crate::output::retention::take_written(), checked.elapsed(), period) {
                drop(k);
                crate::sessions::trim::trim_if_wanted();
                continue;
            }
            checked = Instant::now();
            let sessions = k.open_sessions();
            let totals: Vec<u64> = sessions.iter().map(|s| enforce(&mut s.lock(), config(), Instant::now())).collect();
            let budget = config().disk_bytes;
            let closed = closed_within(&k, budget.saturating_sub(totals.iter().sum()), &mut closed_usage);
            enforce_disk(&totals, |i| sessions.get(i).map(|s| s.lock()), budget.saturating_sub(closed));
            drop(sessions);
            crate::sessions::trim::trim_if_wanted();
        }
    })?;
    Ok(())
}

/// Whether a wake checks the limits: output was written since the last check, or the period is up.
fn check_due(written: u64, since_check: Duration, period: Duration) -> bool {
    written > 0 || since_check >= period
}

/// Closed sessions' output counts against the disk budget as the oldest ended output there is: a closed
/// session's directory (forgotten at `session.close`: no `session.json`, and no session of that name open
/// or opening) holds output no call can read any more. While the closed ones take more than `room`, the
/// least recently written directory goes, whole. Returns the bytes the closed ones still take. Done under
/// the registry's lock, so no session of the name opens meanwhile. A closed session's files are walked
/// once: `usage` keeps what they took, for as long as the directory is the same one, unchanged since.
fn closed_within(k: &Kernel, room: u64, usage: &mut ClosedUsage) -> u64 {
    let reg = k.registry();
    let mut closed: Vec<(std::time::SystemTime, u64, std::path::PathBuf)> = Vec::new();
    let mut seen = ClosedUsage::default();
    for e in std::fs::read_dir(k.cfg.state_dir.join("sessions")).into_iter().flatten().flatten() {
        let dir = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        let Ok(meta) = std::fs::metadata(&dir) else { continue };
        if reg.slots.contains_key(&name) || !meta.is_dir() || dir.join("session.json").exists() {
            continue;
        }
        let (bytes, newest) = usage.of(&dir, &meta, &mut seen);
        closed.push((newest, bytes, dir));
    }
    *usage = seen;
    drop(reg);
    closed.sort();
    let mut total: u64 = closed.iter().map(|c| c.1).sum();
    for (_, bytes, dir) in closed {
        if total <= room {
            break;
        }
        let reg = k.registry();
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if reg.slots.contains_key(&name) || dir.join("session.json").exists() {
            continue;
        }
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {
                total -= bytes;
                tracing::info!(
                    "the disk budget removed closed session '{name}''s output ({bytes} bytes): the oldest ended output"
                );
            }
            Err(e) => tracing::warn!("cannot remove closed session '{name}''s output at the disk budget: {e}"),
        }
    }
    total
}

/// What closed sessions' directories take on disk, by directory, each with the directory's identity and
/// change time when its files were walked. Closing a session removes its `session.json` and opening one
/// creates it, so a directory whose inode and change time are as they were holds the same files.
#[derive(Default)]
struct ClosedUsage(std::collections::HashMap<std::path::PathBuf, (DirStamp, (u64, std::time::SystemTime))>);

type DirStamp = (u64, u64, i64, i64);

impl ClosedUsage {
    /// `dir`'s bytes and newest write: remembered if `meta` says it is unchanged, else walked. Recorded in
    /// `seen` (the next pass keeps only the directories this one saw).
    fn of(
        &self,
        dir: &std::path::Path,
        meta: &std::fs::Metadata,
        seen: &mut ClosedUsage,
    ) -> (u64, std::time::SystemTime) {
        use std::os::unix::fs::MetadataExt;
        let stamp = (meta.dev(), meta.ino(), meta.ctime(), meta.ctime_nsec());
        let found = match self.0.get(dir) {
            Some((s, found)) if *s == stamp => *found,
            _ => usage(dir),
        };
        seen.0.insert(dir.to_owned(), (stamp, found));
        found
    }
}

/// Bytes the files under `dir` take on disk, and when the newest of them was written.
fn usage(dir: &std::path::Path) -> (u64, std::time::SystemTime) {
    use std::os::unix::fs::MetadataExt;
    let mut bytes = 0;
    let mut newest = std::time::SystemTime::UNIX_EPOCH;
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(m) = e.metadata() else { continue };
        if m.is_dir() {
            let (b, n) = usage(&e.path());
            bytes += b;
            newest = newest.max(n);
        } else {
            bytes += m.blocks() * 512;
            newest = newest.max(m.modified().unwrap_or(newest));
        }
    }
    (bytes, newest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wake_checks_only_after_output_or_when_the_period_is_up() {
        let period = Duration::from_secs(60);
        assert!(!check_due(0, Duration::from_millis(5), period), "a session let go: trim only");
        assert!(check_due(1, Duration::from_millis(5), period), "output was written");
        assert!(check_due(0, period, period), "the period is up, however often it was woken");
    }

    #[test]
    fn a_closed_sessions_files_are_walked_again_only_when_its_directory_changed() {
        use std::io::Write;
        let top = tempfile::tempdir().unwrap();
        let dir = top.path().join("s1");
        std::fs::create_dir_all(dir.join("jobs")).unwrap();
        std::fs::File::create(dir.join("jobs/1.log")).unwrap().write_all(&[b'x'; 10_000]).unwrap();
        let meta = || std::fs::metadata(&dir).unwrap();
        let mut known = ClosedUsage::default();
        let mut seen = ClosedUsage::default();
        let (bytes, _) = known.of(&dir, &meta(), &mut seen);
        assert!(bytes >= 10_000, "{bytes}");
        known = seen;
        // Below an unchanged directory the walk is remembered, not done again.
        std::fs::File::create(dir.join("jobs/2.log")).unwrap().write_all(&[b'y'; 50_000]).unwrap();
        let mut seen = ClosedUsage::default();
        assert_eq!(known.of(&dir, &meta(), &mut seen).0, bytes, "remembered");
        known = seen;
        // A session of the name opening and closing again changes the directory: walked again.
        std::fs::write(dir.join("session.json"), "{}").unwrap();
        std::fs::remove_file(dir.join("session.json")).unwrap();
        let mut seen = ClosedUsage::default();
        assert!(known.of(&dir, &meta(), &mut seen).0 >= 60_000, "walked again");
        // A pass keeps only the directories it saw.
        assert_eq!(seen.0.len(), 1);
        assert_eq!(ClosedUsage::default().0.len(), 0);
    }
}
