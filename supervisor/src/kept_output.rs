//! Kept jobs' output after their session ends: a kept job's stdout and stderr are pipes whose read
//! ends the session's worker holds. When the worker goes (session close, worker death, shutdown), a
//! kept job writing to them would get `SIGPIPE` and die: exactly the job the user asked to outlive the
//! session. So when a job is kept, the supervisor takes a duplicate of each such read end from the
//! worker (`pidfd_getfd`) and holds it, unread, while the worker lives (so even a SIGKILLed worker
//! leaves the pipes open); when the worker goes (its subtree frozen, or it died), it starts a small **drainer**
//! (`heddle-supervisor --drain-kept`) inside the kept job's own cgroup (`kept/NAME/drain`) that appends
//! what arrives to
//! `<state-dir>/kept/NAME.log`.
//!
//! - The drainer lives and dies with the kept job: `kept kill NAME` (`cgroup.kill`) ends it too, it
//!   survives a supervisor restart like the job does, and it exits once every writer has closed the
//!   pipes (the job ended).
//! - It runs unprivileged (`nobody`, no_new_privs) and holds only the pipes and the log file; it cannot
//!   open anything.
//! - The log is bounded: past [`LOG_CAP`] bytes, the oldest [`LOG_DROP`] bytes are cut from its head
//!   (`FALLOC_FL_COLLAPSE_RANGE`, or the whole file where the filesystem lacks it) and a line saying how
//!   many bytes were removed is appended, so a cut is never silent.
//! - Matching is by pipe inode: a kept process's fd 1 or 2 that is a pipe whose read end is open in the
//!   worker. Output the worker had read but not yet handed to the front is lost with the worker.
//!
//! ```no_run
//! use supervisor::kept_output::drain;
//! # let (log, pipe): (std::os::fd::OwnedFd, std::os::fd::OwnedFd) = unimplemented!();
//! drain(log, vec![pipe]).unwrap(); // returns when every writer has gone
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};
use std::path::Path;

/// The child cgroup of `kept/NAME` the drainer runs in (so listings of the job's processes skip it,
/// while `cgroup.kill` of `kept/NAME` still ends it).
pub const DRAIN_CGROUP: &str = "drain";
/// The first argument that turns `heddle-supervisor` into a drainer.
pub const DRAIN_ARG: &str = "--drain-kept";
/// A kept job's log is cut back once it grows past this.
pub const LOG_CAP: u64 = 64 << 20;
/// How much is cut from the head (a multiple of any filesystem block size).
pub const LOG_DROP: u64 = 32 << 20;

/// The read ends taken from a worker for one kept job.
#[derive(Debug)]
pub struct Rescue {
    pub name: String,
    pub fds: Vec<OwnedFd>,
}

/// `pipe:[123]` → `123`.
fn pipe_inode(link: &Path) -> Option<u64> {
    let target = std::fs::read_link(link).ok()?;
    let text = target.to_str()?;
    text.strip_prefix("pipe:[")?.strip_suffix(']')?.parse().ok()
}

/// The pipe inodes on any fd of any process in the cgroup `dir` (not only fds 1 and 2: a shell that is
/// running a redirected group, such as a pre-started shell's hand-over `{ …; } 2>/dev/null`, holds its
/// stderr pipe on a saved fd for that moment, and a job may have moved its output to other fds). Only
/// those whose read end the worker holds are taken, so other pipes of the job are left alone.
fn kept_pipes(dir: &Path) -> BTreeSet<u64> {
    let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    let mut out = BTreeSet::new();
    for pid in procs.lines().filter_map(|l| l.trim().parse::<u32>().ok()) {
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).into_iter().flatten().flatten();
        out.extend(fds.filter_map(|e| pipe_inode(&e.path())));
    }
    out
}

/// The worker's pipe read ends: inode → fd number.
fn read_ends(worker_pid: u32) -> BTreeMap<u64, RawFd> {
    let mut out = BTreeMap::new();
    let dir = format!("/proc/{worker_pid}/fd");
    for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let Some(fd) = entry.file_name().to_str().and_then(|n| n.parse::<RawFd>().ok()) else { continue };
        let Some(inode) = pipe_inode(&entry.path()) else { continue };
        let info = std::fs::read_to_string(format!("/proc/{worker_pid}/fdinfo/{fd}")).unwrap_or_default();
        let flags =
            info.lines().find_map(|l| l.strip_prefix("flags:")).and_then(|f| u32::from_str_radix(f.trim(), 8).ok());
        if flags.is_some_and(|f| f & libc::O_ACCMODE as u32 == libc::O_RDONLY as u32) {
            out.insert(inode, fd);
        }
    }
    out
}

/// Duplicates of the read ends of kept job `name`'s stdout/stderr pipes, taken from the worker (live,
/// or frozen); `None` when the worker reads none of them. Failures are logged and skipped.
pub fn take_pipes(kept_root: &Path, name: &str, worker_pid: u32, worker_pidfd: BorrowedFd<'_>) -> Option<Rescue> {
    take_with(&read_ends(worker_pid), kept_root, name, worker_pidfd)
}

/// [`take_pipes`] with the worker's read ends already listed.
fn take_with(
    ends: &BTreeMap<u64, RawFd>,
    kept_root: &Path,
    name: &str,
    worker_pidfd: BorrowedFd<'_>,
) -> Option<Rescue> {
    let mut fds = Vec::new();
    for inode in kept_pipes(&kept_root.join(name)) {
        let Some(&fd) = ends.get(&inode) else { continue };
        match crate::sys::pidfd_getfd(worker_pidfd, fd) {
            Ok(dup) => fds.push(dup),
            Err(e) => tracing::warn!("kept job {name:?}: cannot take its output pipe: {e}"),
        }
    }
    (!fds.is_empty()).then(|| Rescue { name: name.to_owned(), fds })
}

/// [`take_pipes`] for every kept job under `kept_root` but those named in `skip`.
pub fn take_kept_pipes(kept_root: &Path, skip: &[&str], worker_pid: u32, worker_pidfd: BorrowedFd<'_>) -> Vec<Rescue> {
    let Ok(entries) = std::fs::read_dir(kept_root) else { return Vec::new() };
    let names: Vec<String> = entries
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| !skip.contains(&name.as_str()))
        .collect();
    if names.is_empty() {
        return Vec::new();
    }
    let ends = read_ends(worker_pid);
    names.iter().filter_map(|name| take_with(&ends, kept_root, name, worker_pidfd)).collect()
}

/// A partial line is held back at most this long (or until this big) before it is written anyway, so
/// a prompt without a newline still reaches the log.
const PARTIAL_WAIT_MS: u16 = 200;
const PARTIAL_MAX: usize = 64 << 10;

/// The log and its size, cut back past [`LOG_CAP`].
struct Log {
    file: File,
    size: u64,
}

impl Log {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        self.file.write_all(bytes)?;
        self.size += bytes.len() as u64;
        if self.size > LOG_CAP {
            self.size = cut_back(&mut self.file, self.size)?;
        }
        Ok(())
    }
}

/// One pipe and the partial line read from it but not yet written.
struct Pipe {
    file: File,
    partial: Vec<u8>,
}

/// Append everything the `pipes` deliver to `log` until every writer has closed them, whole lines at a
/// time (so stdout and stderr never mix inside a line; a partial line is written after
/// [`PARTIAL_WAIT_MS`] of quiet, at [`PARTIAL_MAX`], or at the end), cutting the log back past
/// [`LOG_CAP`].
pub fn drain(log: OwnedFd, pipes: Vec<OwnedFd>) -> io::Result<()> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let file = File::from(log);
    let mut log = Log { size: file.metadata()?.len(), file };
    let mut open: Vec<Pipe> = pipes.into_iter().map(|p| Pipe { file: File::from(p), partial: Vec::new() }).collect();
    let mut buf = vec![0u8; 64 << 10];
    while !open.is_empty() {
        let waiting = open.iter().any(|p| !p.partial.is_empty());
        let timeout = if waiting { PollTimeout::from(PARTIAL_WAIT_MS) } else { PollTimeout::NONE };
        let mut ready = Vec::new();
        {
            let mut fds: Vec<PollFd<'_>> =
                open.iter().map(|p| PollFd::new(p.file.as_fd(), PollFlags::POLLIN)).collect();
            match poll(&mut fds, timeout) {
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
            }
            ready.extend(
                fds.iter().enumerate().filter(|(_, p)| p.revents().is_some_and(|r| !r.is_empty())).map(|(i, _)| i),
            );
        }
        if ready.is_empty() {
            for p in &mut open {
                log.append(&std::mem::take(&mut p.partial))?;
            }
            continue;
        }
        let mut closed = Vec::new();
        for i in ready {
            let p = &mut open[i];
            match p.file.read(&mut buf) {
                Ok(0) => closed.push(i),
                Ok(n) => {
                    p.partial.extend_from_slice(&buf[..n]);
                    let cut = if p.partial.len() >= PARTIAL_MAX {
                        p.partial.len()
                    } else {
                        p.partial.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1)
                    };
                    log.append(&p.partial[..cut])?;
                    p.partial.drain(..cut);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => closed.push(i),
            }
        }
        for i in closed.into_iter().rev() {
            let p = open.remove(i);
            log.append(&p.partial)?;
        }
    }
    Ok(())
}

/// Remove [`LOG_DROP`] bytes from the head of the log (all of it where collapsing is unsupported) and
/// say so in the log; returns the new size.
fn cut_back(file: &mut File, size: u64) -> io::Result<u64> {
    let removed = match crate::sys::collapse_head(file.as_fd(), LOG_DROP) {
        Ok(()) => LOG_DROP,
        Err(_) => {
            file.set_len(0)?;
            size
        }
    };
    let line = format!(
        "\n[heddle: {removed} earlier bytes of this kept job's output were removed to keep this log under {} MiB]\n",
        LOG_CAP >> 20
    );
    file.write_all(line.as_bytes())?;
    Ok(size - removed + line.len() as u64)
}

/// The body of `heddle-supervisor --drain-kept`: fd 3 is the log, fds 4… the pipes. Detaches first (the
/// supervisor reaps the short-lived parent at once; the drainer itself is reparented).
pub fn drainer_main() -> i32 {
    match crate::sys::fork_detached() {
        Ok(false) => return 0,
        Ok(true) => {}
        Err(e) => {
            tracing::error!("cannot detach: {e}");
            return 1;
        }
    }
    let Ok(log) = shm_proto::sys::take_inherited_fd(3) else { return 1 };
    let pipes: Vec<OwnedFd> = (4..64).map_while(|fd| shm_proto::sys::take_inherited_fd(fd).ok()).collect();
    match drain(log, pipes) {
        Ok(()) => 0,
        Err(e) => {
            tracing::error!("{e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drain_appends_every_byte_until_all_writers_close() {
        let dir = tempfile::tempdir().unwrap();
        let log: OwnedFd =
            std::fs::OpenOptions::new().create(true).append(true).open(dir.path().join("x.log")).unwrap().into();
        let (r1, w1) = nix::unistd::pipe().unwrap();
        let (r2, w2) = nix::unistd::pipe().unwrap();
        let writer = std::thread::spawn(move || {
            let (mut a, mut b) = (File::from(w1), File::from(w2));
            for i in 0..1000 {
                writeln!(a, "out {i}").unwrap();
                writeln!(b, "err {i}").unwrap();
            }
        });
        drain(log, vec![r1, r2]).unwrap();
        writer.join().unwrap();
        let text = std::fs::read_to_string(dir.path().join("x.log")).unwrap();
        let whole = |prefix: &str| (0..1000).all(|i| text.lines().any(|l| l == format!("{prefix} {i}")));
        assert!(whole("out") && whole("err"), "every line whole, none mixed with the other stream");
        assert_eq!(text.lines().count(), 2000);
    }

    #[test]
    fn a_log_past_its_cap_loses_its_head_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.log");
        let mut file = std::fs::OpenOptions::new().create(true).append(true).read(true).open(&path).unwrap();
        let block: Vec<u8> = (0..=255u8).cycle().take(1 << 20).collect();
        for _ in 0..(LOG_DROP >> 20) + 1 {
            file.write_all(&block).unwrap();
        }
        let size = file.metadata().unwrap().len();
        let new = cut_back(&mut file, size).unwrap();
        assert_eq!(new, file.metadata().unwrap().len());
        assert!(new < size, "{new} < {size}");
        let text = std::fs::read(&path).unwrap();
        let tail = String::from_utf8_lossy(&text[text.len().saturating_sub(200)..]).into_owned();
        assert!(tail.contains("earlier bytes of this kept job's output were removed"), "{tail}");
        if new > (1 << 20) {
            // Collapsed: what is left starts where the removed head ended.
            assert_eq!(&text[..block.len()], &block[..]);
        }
    }

    #[test]
    fn a_partial_line_is_written_after_a_quiet_moment_and_at_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.log");
        let log: OwnedFd = std::fs::OpenOptions::new().create(true).append(true).open(&path).unwrap().into();
        let (r, w) = nix::unistd::pipe().unwrap();
        let drainer = std::thread::spawn(move || drain(log, vec![r]).unwrap());
        let mut w = File::from(w);
        w.write_all(b"password: ").unwrap();
        let shown = (0..100).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(20));
            std::fs::read(&path).unwrap() == b"password: "
        });
        assert!(shown, "a prompt without a newline reaches the log");
        w.write_all(b"tail without newline").unwrap();
        drop(w);
        drainer.join().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"password: tail without newline");
    }

    #[test]
    fn pipe_links_parse_and_others_do_not() {
        let (r, _w) = nix::unistd::pipe().unwrap();
        let link = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&r));
        assert!(pipe_inode(Path::new(&link)).is_some());
        assert_eq!(pipe_inode(Path::new("/proc/self/fd/0/nope")), None);
        let ends = read_ends(std::process::id());
        assert_eq!(ends.get(&pipe_inode(Path::new(&link)).unwrap()), Some(&std::os::fd::AsRawFd::as_raw_fd(&r)));
    }
}
