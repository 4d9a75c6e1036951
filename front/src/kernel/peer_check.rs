//! Refusing connections from heddle's own jobs.
//!
//! A job runs as its session's uid. When that uid is in the control socket's group, the job can
//! connect to the socket, and the per-uid rules alone would let it open a session outside its sandbox
//! roots, read another session's output or run jobs there. So every connection is placed once, at
//! accept ([`Kernel::client_of`]): the peer's pid (`SO_PEERCRED`) is looked up in `/proc/<pid>/cgroup`,
//! and a process inside heddle's job cgroups (`<root>/session-*/…`, `<root>/kept/…`) is a job — a job
//! cannot leave its cgroup (Landlock keeps it from writing cgroup files). Then every call is admitted
//! or refused ([`admit`]) with [`ErrorKind::JobPeerRefused`]:
//!
//! - a connection from outside heddle's job cgroups: admitted (the per-uid rules apply as before);
//! - from a job whose session allows nested use (`[nested] allow = true` in its profile, or
//!   `session.open {nested: true}`): admitted only for the session-scoped methods naming that session;
//! - from any other job, a kept job, or a peer that could not be placed: refused.
//!
//! The peer's pid is pinned with `SO_PEERPIDFD` while its cgroup is read: if the process is gone by the
//! end of the read, its pid may name another process, and the connection counts as not placed.
//! heddle's root comes from the supervisor (`heddle-front --cgroup-root`) and is turned into the path
//! `/proc/<pid>/cgroup` shows through the cgroup2 mount in `/proc/self/mountinfo`, once. A front not
//! told its root (tests, a front started by hand) takes no client for a job.
//!
//! ```
//! use front::kernel::peer_check::{v2_path, Place};
//! let text = "12:pids:/heddle/session-3\n0::/heddle/session-3/slot-1\n";
//! assert_eq!(v2_path(text), Some("/heddle/session-3/slot-1"));
//! assert_eq!(Place::of("/heddle/session-s3/slot-1", "/heddle"), Place::Session("session-s3"));
//! assert_eq!(Place::of("/user.slice/session-3.scope", "/heddle"), Place::Outside);
//! ```

use crate::kernel::{Client, Kernel};
use crate::rpc::{ErrorKind, RpcError};
use crate::sessions::session::Session;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{getsockopt, sockopt::PeerPidfd, UnixCredentials};
use serde_json::Value;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::OnceLock;

/// The connecting process of a socket client and where it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer {
    pub pid: i32,
    pub origin: Origin,
}

/// Where a connecting process runs, relative to heddle's cgroup tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Outside heddle's job cgroups.
    Outside,
    /// In a job cgroup: of the open session with this serial (`None`: a kept job, or a session that is
    /// no longer open).
    Job { session: Option<u64> },
    /// Could not be placed (why, in words); treated as a job of no session.
    Unplaced(&'static str),
}

/// Where a cgroup path lies below heddle's root.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place<'a> {
    /// Not in a job cgroup.
    Outside,
    /// In `<root>/kept/…`.
    Kept,
    /// In `<root>/<dir>/…`, `dir` being `session-…`.
    Session(&'a str),
}

impl<'a> Place<'a> {
    /// Place the cgroup `path` (as `/proc/<pid>/cgroup` shows it) against heddle's root `root` (same
    /// form): job cgroups are `<root>/session-*/…` and `<root>/kept/…`; the root itself (a service's own
    /// cgroup) and anything else below it are not.
    pub fn of(path: &'a str, root: &str) -> Place<'a> {
        let root = root.trim_end_matches('/');
        let Some(below) = path.strip_prefix(root).and_then(|r| r.strip_prefix('/')) else { return Place::Outside };
        let top = below.split('/').next().unwrap_or_default();
        if top == "kept" {
            Place::Kept
        } else if top.starts_with("session-") {
            Place::Session(top)
        } else {
            Place::Outside
        }
    }
}

/// The v2 entry (`0::PATH`) of a `/proc/<pid>/cgroup` text; `None` unless there is exactly one. Cgroup
/// names may hold a newline, which could forge a second `0::` line: two are refused, not guessed at.
pub fn v2_path(text: &str) -> Option<&str> {
    let mut found = text.lines().filter_map(|l| l.strip_prefix("0::"));
    let first = found.next()?;
    found.next().is_none().then_some(first)
}

/// heddle's cgroup root as `/proc/<pid>/cgroup` names it, found once.
#[derive(Default, Debug)]
pub struct Roots {
    root: OnceLock<Result<Option<String>, &'static str>>,
}

impl Roots {
    /// The root's path inside the cgroup2 hierarchy (`/heddle`): `None` when the front was not told
    /// its root ([`crate::kernel::KernelConfig::cgroup_root`]) or the root is on no cgroup2 mount (then
    /// no process can run below it).
    fn get(&self, k: &Kernel) -> Result<Option<&str>, &'static str> {
        let found = self.root.get_or_init(|| {
            let Some(full) = k.cfg.cgroup_root.as_ref().and_then(|p| p.to_str()) else { return Ok(None) };
            let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").map_err(|_| "mountinfo is unreadable")?;
            Ok(hierarchy_path(&mountinfo, full))
        });
        found.as_ref().map(Option::as_deref).map_err(|e| *e)
    }
}

/// `full` (a directory on a cgroup2 mount) as a path inside the hierarchy: the longest cgroup2 mount
/// point of `mountinfo` that holds it, replaced by that mount's root (both octal-escaped there:
/// `\040` for a space).
pub fn hierarchy_path(mountinfo: &str, full: &str) -> Option<String> {
    let full = full.trim_end_matches('/');
    let mut best: Option<(usize, String)> = None;
    for line in mountinfo.lines() {
        let Some((fields, fs)) = line.split_once(" - ") else { continue };
        if fs.split(' ').next() != Some("cgroup2") {
            continue;
        }
        let f: Vec<&str> = fields.split(' ').collect();
        let (Some(base), Some(point)) = (f.get(3), f.get(4)) else { continue };
        let (base, point) = (unescape(base), unescape(point));
        let point = point.trim_end_matches('/');
        let Some(rest) = full.strip_prefix(point).filter(|r| r.is_empty() || r.starts_with('/')) else { continue };
        if best.as_ref().is_none_or(|(len, _)| point.len() > *len) {
            best = Some((point.len(), format!("{}{rest}", base.trim_end_matches('/'))));
        }
    }
    best.map(|(_, p)| if p.is_empty() { "/".to_owned() } else { p })
}

/// A mountinfo field with its `\NNN` octal escapes decoded (an escape that is not one stays as is).
fn unescape(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let code =
            b.get(i + 1..i + 4).and_then(|d| std::str::from_utf8(d).ok()).and_then(|d| u8::from_str_radix(d, 8).ok());
        match (b[i], code) {
            (b'\\', Some(c)) => {
                out.push(c);
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Kernel {
    /// The client behind an accepted connection: its uid and, placed against heddle's cgroup tree, its
    /// process (see the module docs).
    pub fn client_of(&self, stream: &UnixStream, cred: UnixCredentials) -> Client {
        let origin = match self.peers.get(self) {
            Ok(None) => Origin::Outside,
            Ok(Some(root)) => match read_cgroup(cred.pid(), getsockopt(stream, PeerPidfd).ok()) {
                Ok(path) => match Place::of(&path, root) {
                    Place::Outside => Origin::Outside,
                    Place::Kept => Origin::Job { session: None },
                    Place::Session(dir) => Origin::Job { session: self.session_in(dir) },
                },
                Err(why) => Origin::Unplaced(why),
            },
            Err(why) => Origin::Unplaced(why),
        };
        Client { uid: cred.uid(), pid: Some(Peer { pid: cred.pid(), origin }) }
    }

    /// The serial of the open session whose cgroup directory is `<root>/dir`.
    fn session_in(&self, dir: &str) -> Option<u64> {
        let mine = |s: &&std::sync::Arc<Session>| {
            std::path::Path::new(&s.spec().cgroup).file_name() == Some(std::ffi::OsStr::new(dir))
        };
        self.open_sessions().iter().find(mine).map(|s| s.spec().serial)
    }
}

/// The v2 cgroup path of process `pid` (pinned by `pidfd` where the kernel gives one).
fn read_cgroup(pid: i32, pidfd: Option<OwnedFd>) -> Result<String, &'static str> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .map_err(|_| "the connecting process's cgroup could not be read")?;
    if pidfd.as_ref().is_some_and(exited) {
        return Err("the connecting process exited before its cgroup could be checked");
    }
    v2_path(&text).map(str::to_owned).ok_or("the connecting process's cgroup could not be told")
}

/// Has the process behind `pidfd` exited? (A pidfd polls readable then.)
fn exited(pidfd: &OwnedFd) -> bool {
    let mut fds = [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
    !matches!(poll(&mut fds, PollTimeout::ZERO), Ok(0))
}

/// The methods a job of a session that allows nested use may call, each naming that session.
const NESTED_METHODS: [&str; 9] =
    ["session.open", "session.close", "run", "wait", "kill", "jobs", "output", "describe", "subscribe"];

/// Admit `method` from `client`, or refuse it (module docs). In-process callers and peers outside
/// heddle's job cgroups are always admitted.
pub(crate) fn admit(k: &Kernel, client: &Client, method: &str, params: &Value) -> Result<(), RpcError> {
    let Some(peer) = client.pid else { return Ok(()) };
    let session = match peer.origin {
        Origin::Outside => return Ok(()),
        Origin::Unplaced(why) => {
            return Err(refused(format!(
                "heddle could not tell whether this connection comes from one of its own jobs ({why}), and jobs \
                 may not drive heddle; connect from a process outside heddle's jobs"
            )))
        }
        Origin::Job { session } => session,
    };
    let own = session.and_then(|serial| k.open_sessions().into_iter().find(|s| s.spec().serial == serial));
    let Some(own) = own else {
        return Err(refused(
            "this connection comes from a process heddle runs as a job (a kept job, or one of a session that has \
             ended), and jobs may not drive heddle; run heddle commands from outside heddle's jobs",
        ));
    };
    let name = own.name().to_owned();
    let nested = own.lock().reopen().is_some_and(|r| r.sandbox.nested());
    if !nested {
        return Err(refused(format!(
            "this connection comes from a job of session '{name}', and jobs may not drive heddle: a job could \
             reach other sessions and paths outside its sandbox that way. Run heddle commands from outside the \
             job, or open the session with \"nested\": true to let its jobs act on session '{name}' alone"
        )));
    }
    let named = params.get("session").or_else(|| params.get("name")).and_then(Value::as_str);
    if NESTED_METHODS.contains(&method) && named == Some(name.as_str()) {
        return Ok(());
    }
    Err(refused(format!(
        "a job of session '{name}' may act on its own session alone: call one of {} with \"session\": \"{name}\" \
         (session.open with \"name\": \"{name}\")",
        NESTED_METHODS.join(", ")
    )))
}

/// Is `s` the session of the job behind `client`, and does it allow nested use? Such a job may act on
/// it whatever its uid (the session's opener let its jobs in); every other session stays as the per-uid
/// rules have it.
pub(crate) fn own_session(client: &Client, s: &Session) -> bool {
    let Some(Peer { origin: Origin::Job { session: Some(serial) }, .. }) = client.pid else { return false };
    serial == s.spec().serial && s.lock().reopen().is_some_and(|r| r.sandbox.nested())
}

fn refused(message: impl Into<String>) -> RpcError {
    RpcError::new(ErrorKind::JobPeerRefused, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn cgroups_below_the_root_are_jobs_by_their_top_directory() {
        let root = "/heddle-e2e-1-0";
        assert_eq!(Place::of("/heddle-e2e-1-0/session-s12/slot-3", root), Place::Session("session-s12"));
        assert_eq!(Place::of("/heddle-e2e-1-0/session-s12", root), Place::Session("session-s12"));
        assert_eq!(Place::of("/heddle-e2e-1-0/kept/web", root), Place::Kept);
        // The root itself (a service's own cgroup) and siblings sharing a prefix are not jobs.
        assert_eq!(Place::of("/heddle-e2e-1-0", root), Place::Outside);
        assert_eq!(Place::of("/heddle-e2e-1-0/supervisor", root), Place::Outside);
        assert_eq!(Place::of("/heddle-e2e-1-01/session-1/slot-1", root), Place::Outside);
        assert_eq!(Place::of("/session-1", "/"), Place::Session("session-1"));
    }

    #[test]
    fn only_a_single_v2_line_is_taken() {
        assert_eq!(v2_path("0::/a\n"), Some("/a"));
        assert_eq!(v2_path("3:memory:/x\n0::/a/b\n1:name=systemd:/y\n"), Some("/a/b"));
        assert_eq!(v2_path("0::/a/x\n0::/user.slice\n"), None, "a forged second line");
        assert_eq!(v2_path("3:memory:/x\n"), None);
    }

    #[test]
    fn hierarchy_paths_come_from_the_longest_cgroup2_mount() {
        let mi = "30 25 0:26 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n\
                  31 30 0:27 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw\n\
                  32 30 0:28 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
        assert_eq!(hierarchy_path(mi, "/sys/fs/cgroup/unified/heddle").as_deref(), Some("/heddle"));
        assert_eq!(hierarchy_path(mi, "/sys/fs/cgroup/unified").as_deref(), Some("/"));
        assert_eq!(hierarchy_path(mi, "/sys/fs/cgroup/memory/heddle"), None);
        let ns = "40 1 0:27 /system.slice /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        assert_eq!(hierarchy_path(ns, "/sys/fs/cgroup/heddle/").as_deref(), Some("/system.slice/heddle"));
        let spaced = "41 1 0:27 / /mnt/cg\\040two rw - cgroup2 cgroup2 rw\n";
        assert_eq!(hierarchy_path(spaced, "/mnt/cg two/heddle").as_deref(), Some("/heddle"));
        assert_eq!(unescape("a\\134b\\9"), "a\\b\\9");
    }

    #[test]
    fn this_process_is_read_and_placed_outside() {
        let pidfd = nix::sys::socket::getsockopt(&std::os::unix::net::UnixStream::pair().unwrap().0, PeerPidfd);
        let path =
            read_cgroup(i32::try_from(std::process::id()).expect("a pid fits in i32"), pidfd.ok()).expect("a v2 line");
        assert_eq!(Place::of(&path, "/heddle-nowhere-such"), Place::Outside, "{path}");
    }

    proptest! {
        #[test]
        fn garbage_never_panics(text in ".*", root in ".*", mi in ".*") {
            let _ = v2_path(&text).map(|p| Place::of(p, &root));
            let _ = hierarchy_path(&mi, &root);
        }
    }
}
