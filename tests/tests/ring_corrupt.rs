//! A live session's event ring corrupted from outside, as a hostile worker would: the front reports the
//! session lost (never revived on a ring it cannot trust), its jobs end `lost`, and everything of it is
//! killed, while another session of the same server goes on.

use heddle_tests::{alive, eventually, require_root, Heddle};
use serde_json::json;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The entries of `/proc/PID/DIR` (`fd` or `map_files`) whose link target starts with `prefix`, as
/// paths and (for fds) numbers.
fn links_of(pid: u64, dir: &str, prefix: &str) -> Vec<(PathBuf, i32)> {
    std::fs::read_dir(format!("/proc/{pid}/{dir}"))
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            let target = std::fs::read_link(e.path()).ok()?;
            let n: i32 = e.file_name().to_str()?.parse().unwrap_or(-1);
            target.to_string_lossy().starts_with(prefix).then(|| (e.path(), n))
        })
        .collect()
}

/// A copy of fd `n` of process `pid` (`pidfd_getfd`: eventfds cannot be opened through /proc); `None`
/// when the process is gone (ESRCH): the front found the ring corrupt on a wake of its own first, and
/// the supervisor ended the worker.
fn steal_fd(pid: u64, n: i32) -> Option<OwnedFd> {
    // SAFETY: plain syscalls with integer arguments; a non-negative result is a new fd we now own.
    unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0);
        let gone = |e: std::io::Error| e.raw_os_error() == Some(libc::ESRCH);
        if pidfd < 0 {
            let e = std::io::Error::last_os_error();
            assert!(gone(e), "pidfd_open: {}", std::io::Error::last_os_error());
            return None;
        }
        let pidfd = OwnedFd::from_raw_fd(pidfd as i32);
        let fd = libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), n, 0);
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            assert!(e.raw_os_error() == Some(libc::ESRCH), "pidfd_getfd: {e}");
            return None;
        }
        Some(OwnedFd::from_raw_fd(fd as i32))
    }
}

#[test]
fn a_corrupt_event_ring_loses_its_session_and_nothing_else() {
    require_root();
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let other = c.call("session.open", json!({"name": "bystander"})).unwrap()["session"].clone();
    let long = c.call("run", json!({"session": s, "cmd": "sleep 600 & echo $!; wait", "yield_ms": 300})).unwrap();
    let job = long["job"].clone();
    assert_eq!(long["state"], "running", "{long}");
    let sleeper: u64 = long["view"].as_str().unwrap().trim().parse().expect("the job printed its sleep's pid");
    assert!(alive(sleeper));
    let facts = c.call("describe", json!({"session": s})).unwrap();
    let worker = facts["sessions"][0]["worker"]["pid"].as_u64().unwrap();

    // The worker's shared region (it keeps the mapping, not the fd), mapped here too, and its event
    // ring's tail set beyond the ring. The worker (of the stack this test started) is stopped meanwhile:
    // it owns the tail, and an event it published (a spare starting, say) would write a good tail over the
    // bad one before the front looked, and the ring would never be found corrupt.
    let stop = |sig| nix::sys::signal::kill(nix::unistd::Pid::from_raw(worker as i32), sig);
    stop(nix::sys::signal::Signal::SIGSTOP).unwrap();
    let memfds = links_of(worker, "map_files", "/memfd:heddle-session");
    assert_eq!(memfds.len(), 1, "the worker maps one session region: {memfds:?}");
    let file = std::fs::OpenOptions::new().read(true).write(true).open(&memfds[0].0).unwrap();
    let region = shm_proto::region::Region::attach(file.as_fd()).expect("the live region attaches");
    let ctl = region.evt_ctl();
    let head = ctl.head.load(Ordering::Acquire);
    let cap = region.header().evt_capacity.load(Ordering::Acquire);
    ctl.tail.store(head + 2 * cap, Ordering::Release);
    // Ring the doorbells (every eventfd of the worker: a spurious ring is harmless) so the front looks.
    for (_, n) in links_of(worker, "fd", "anon_inode:[eventfd]") {
        let Some(fd) = steal_fd(worker, n) else { break };
        nix::unistd::write(&fd, &1u64.to_ne_bytes()).unwrap();
    }

    // The session is lost and says why; its job too; nothing of it runs any more.
    let lost = eventually(Duration::from_secs(10), || {
        c.call("describe", json!({"session": s})).unwrap()["sessions"][0]["state"] == "lost"
    });
    let _ = stop(nix::sys::signal::Signal::SIGCONT); // it may be gone already: the front had it killed
    assert!(lost, "the front found the ring corrupt and lost the session");
    let refused = c.call("run", json!({"session": s, "cmd": "true"})).unwrap_err();
    assert_eq!(refused.code(), Some(-32003), "a run in the session is refused as session_lost: {refused:?}");
    assert!(format!("{refused:?}").contains("corrupt"), "the refusal says the ring was corrupt: {refused:?}");
    let ended = c.call("wait", json!({"session": s, "job": job, "yield_ms": 5000})).unwrap();
    assert_eq!(ended["state"], "lost", "the job running when the ring broke ends lost: {ended}");
    assert!(eventually(Duration::from_secs(10), || !alive(sleeper)), "the job's background sleep was killed");
    assert!(eventually(Duration::from_secs(10), || !alive(worker)), "the worker was killed, not revived");
    let facts = c.call("describe", json!({"session": s})).unwrap();
    let worker_now = &facts["sessions"][0]["worker"]["pid"];
    assert!(worker_now.as_u64().is_none_or(|p| p == worker), "no new worker took the session over: {facts}");

    // The other session of the same server is untouched.
    let fine = c.call("run", json!({"session": other, "cmd": "echo still-here"})).unwrap();
    assert_eq!(fine["exit_code"], 0, "{fine}");
    assert!(fine["view"].as_str().unwrap().contains("still-here"));
}
