//! Supervisor ↔ front control messages: rare operations (open and close a session, report a worker's
//! death) over a `SOCK_SEQPACKET` socket pair, one postcard message per packet, with fds passed by
//! `SCM_RIGHTS`. Job traffic never goes this way: it goes through the session's region.
//!
//! The supervisor creates the socket pair and hands one end to the front it spawns (fd 3). Each request
//! carries a `req` number that the answer echoes; `WorkerDied` and `Shutdown` are unsolicited.

use crate::procs::ProcList;
use serde::{Deserialize, Serialize};
#[cfg(not(loom))]
use std::os::fd::{BorrowedFd, OwnedFd};

/// The largest control packet either side sends or accepts.
pub const MAX_CONTROL_PACKET: usize = 64 * 1024;

/// The fds that accompany [`FromSupervisor::SessionOpened`], in this order.
pub const SESSION_FDS: [&str; 5] = ["memfd", "cmd_data", "cmd_space", "evt_data", "evt_space"];

/// The front's exit status after a root client's `shutdown {}`: the supervisor shuts down too (any other
/// exit of the front leaves the sessions running).
pub const FRONT_EXIT_SHUTDOWN: i32 = 10;

/// A bash a worker ran: the identity of the file (`Event::Hello`'s `bash_id`: device, inode, size and
/// change times, so a bash replaced or rewritten since has another) and the `BASH_VERSION` it printed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BashSeen {
    pub id: String,
    pub version: String,
}

impl BashSeen {
    /// The longest `id` or `version` passed on: both become a worker's arguments.
    pub const MAX_LEN: usize = 128;

    /// True when both fields are short, non-empty printable ASCII (what a worker may take as arguments;
    /// anything else is dropped and the worker probes).
    pub fn is_plain(&self) -> bool {
        let plain = |v: &str| !v.is_empty() && v.len() <= Self::MAX_LEN && v.bytes().all(|b| b.is_ascii_graphic());
        plain(&self.id) && plain(&self.version)
    }
}

/// Front → supervisor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToSupervisor {
    /// Create a session's cgroup subtree, region and eventfds; spawn its worker.
    OpenSession {
        req: u64,
        session: String,
        /// The uid of the client that asked (the worker's default uid when it is not root).
        client_uid: u32,
        /// The policy profile's name (`workspace`, `readonly`), passed to the worker.
        policy: String,
        /// `Some` when the session switched the profile's network setting.
        network: Option<bool>,
        /// `Some` when the session switched the profile's `[seccomp.ptys]` (`false`: jobs may not open
        /// pseudo-terminals of their own).
        #[serde(default)]
        ptys: Option<bool>,
        /// The session's project directory (its cwd): the `{project}` writable root.
        project: String,
        /// Memory limit for the whole session, bytes (`None`: the supervisor's default).
        memory_max: Option<u64>,
        /// Process limit for the whole session (`None`: the supervisor's default).
        pids_max: Option<u64>,
        /// Extra writable roots the session asks for; the supervisor checks them against its
        /// `--allow-writable` directories.
        writable: Vec<String>,
        /// The bash an earlier worker of this front reported (its `Hello`), passed on to the new worker
        /// so it need not run bash to learn the version: it uses `version` only while the file it would
        /// run is still the one `id` names, and probes otherwise (see [`BashSeen`]).
        bash: Option<BashSeen>,
    },
    /// Kill everything in the session's cgroup subtree (worker included), verify it empty, remove it.
    CloseSession { req: u64, session: String },
    /// Ask for the supervisor's own facts.
    Describe { req: u64 },
    /// Move every process of the job's cgroup `<session>/<cgroup>` (`slot-<N>`, as the worker's `Started`
    /// named it) into `<root>/kept/<name>`, owned by `owner_uid`. Refused unless that cgroup is still
    /// the job's (its `user.heddle.job` attribute names `job`): an emptied job cgroup is reused.
    KeepJob { req: u64, session: String, job: u64, cgroup: String, name: String, owner_uid: u32 },
    /// List the kept jobs (`KeptList`).
    ListKept { req: u64 },
    /// End a kept job: `cgroup.kill`, verify empty, remove (`KeptKilled`).
    KillKept { req: u64, name: String },
    /// The session's accounting and limits (answered by `Usage`).
    SessionUsage { req: u64, session: String },
}

/// A kept job: a cgroup under `<root>/kept/` the supervisor owns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptInfo {
    pub name: String,
    /// The uid whose session kept it (the owner of the `kept/NAME` directory).
    pub owner_uid: u32,
    pub cgroup: String,
    pub procs: ProcList<ProcInfo>,
    /// True when it was found at startup, left by an earlier run of the supervisor.
    pub adopted: bool,
}

/// A session's limits and accounting (v1 hierarchies on hybrid hosts).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionLimits {
    pub memory_max: Option<u64>,
    pub pids_max: Option<u64>,
    /// Peak memory of the session (v1 `memory.max_usage_in_bytes`), when known.
    pub memory_peak: Option<u64>,
    /// Times the OOM killer killed a process of the session.
    pub oom_kills: Option<u64>,
    /// Times a fork failed on the session's `pids.max`.
    pub pids_limited: Option<u64>,
    /// Where the limits live (the v1 directories, or the v2 session cgroup).
    pub dirs: Vec<String>,
}

/// A process found in a cgroup.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcInfo {
    pub pid: u32,
    pub cmdline: String,
    /// The cgroup it was in, relative to the session's directory (`slot-3`; empty for the session's own).
    pub cgroup: String,
}

/// Supervisor → front.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FromSupervisor {
    /// The session is up. Carries the fds named in [`SESSION_FDS`].
    SessionOpened {
        req: u64,
        session: String,
        worker_pid: u32,
        worker_uid: u32,
        /// The session's cgroup directory.
        cgroup: String,
        /// The session's private temp dir (owned by the worker's uid, removed at close).
        tmp: String,
    },
    /// The session could not be opened; nothing of it remains.
    SessionFailed { req: u64, session: String, error: String },
    /// The session's subtree was killed and removed.
    SessionClosed {
        req: u64,
        session: String,
        /// Processes that were alive in the subtree (worker excluded) and were killed.
        killed: ProcList<ProcInfo>,
        /// True once the subtree was verified empty and removed.
        verified_empty: bool,
    },
    /// A session's worker died without being asked to; its subtree was killed (the supervisor forgot the
    /// session then: a later `CloseSession` for it gets `Error`).
    WorkerDied {
        session: String,
        code: Option<i32>,
        signal: Option<i32>,
        /// Processes that were still alive in the session's job cgroups and were killed.
        killed: ProcList<ProcInfo>,
        /// True once the subtree was verified empty and removed, as in `SessionClosed`.
        verified_empty: bool,
    },
    /// Answer to `Describe`.
    Info {
        req: u64,
        supervisor_pid: u32,
        cgroup_root: String,
        /// `"v2"` or `"hybrid"`.
        cgroup_mode: String,
    },
    /// An error answering a request.
    Error { req: u64, error: String },
    /// The supervisor is shutting down: stop serving and exit.
    Shutdown,
    /// Answer to `KeepJob`: the job's processes now live in `kept/NAME`.
    JobKept { req: u64, kept: KeptInfo },
    /// Answer to `ListKept`; `more` kept jobs did not fit in the packet ([`FromSupervisor::fit`]).
    KeptList { req: u64, kept: Vec<KeptInfo>, more: u32 },
    /// Answer to `KillKept`.
    KeptKilled { req: u64, name: String, killed: ProcList<ProcInfo>, verified_empty: bool },
    /// Answer to `SessionUsage`.
    Usage { req: u64, session: String, limits: SessionLimits },
    /// Sent unasked to a (re)started front, once per live session, before [`FromSupervisor::AdoptDone`]:
    /// take this session over. Carries the fds named in [`SESSION_FDS`], as `SessionOpened` does.
    SessionAdopt { session: String, worker_pid: u32, worker_uid: u32, cgroup: String, tmp: String },
    /// Every live session was handed over (`sessions` of them); sent to every front the supervisor starts.
    AdoptDone { sessions: u32 },
}

/// The longest error text a `SessionFailed` or `Error` carries once [`FromSupervisor::fit`] cut it.
const MAX_ERROR_TEXT: usize = 4096;

impl FromSupervisor {
    /// Make the message fit in one control packet ([`MAX_CONTROL_PACKET`]), so that no answer and no
    /// notice is ever dropped for its size: process listings halve (what they drop is counted in their
    /// `more`), a list of kept jobs loses its last entries (counted in `more`), an error text is cut.
    /// Process listings are bounded by their type (under 50 KiB each), so in practice only a list of
    /// many kept jobs, or a long error, ever shrinks here.
    pub fn fit(&mut self) {
        let mut buf = Vec::new();
        while crate::frame::encode(&*self, &mut buf).is_ok() && buf.len() > MAX_CONTROL_PACKET {
            if !self.shrink() {
                return;
            }
        }
    }

    /// One step of [`FromSupervisor::fit`]; false when nothing is left to shrink.
    fn shrink(&mut self) -> bool {
        let halve = |l: &mut ProcList<ProcInfo>| {
            let n = l.len();
            l.shrink_to(n / 2);
            n > 0
        };
        match self {
            FromSupervisor::SessionClosed { killed, .. }
            | FromSupervisor::WorkerDied { killed, .. }
            | FromSupervisor::KeptKilled { killed, .. } => halve(killed),
            FromSupervisor::JobKept { kept, .. } => halve(&mut kept.procs),
            FromSupervisor::KeptList { kept, more, .. } => {
                let mut shrunk = false;
                for k in kept.iter_mut().filter(|k| k.procs.len() > 1) {
                    shrunk |= halve(&mut k.procs);
                }
                if !shrunk && kept.pop().is_some() {
                    *more = more.saturating_add(1);
                    shrunk = true;
                }
                shrunk
            }
            FromSupervisor::SessionFailed { error, .. } | FromSupervisor::Error { error, .. } => {
                let before = error.len();
                crate::procs::cut(error, (before / 2).min(MAX_ERROR_TEXT));
                error.len() < before
            }
            _ => false,
        }
    }
}

/// Errors sending or receiving a control packet.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ControlError {
    #[error("control socket i/o failed")]
    Io(#[source] std::io::Error),
    #[error("control packet could not be encoded or decoded")]
    Frame(#[source] crate::frame::FrameError),
    #[error("control packet of {0} bytes exceeds the limit")]
    TooLarge(usize),
    #[error("control packet was truncated")]
    Truncated,
    #[error("peer closed the control socket")]
    Closed,
}

/// Send one message with `fds` attached.
#[cfg(not(loom))]
pub fn send<T: Serialize>(sock: BorrowedFd<'_>, msg: &T, fds: &[BorrowedFd<'_>]) -> Result<(), ControlError> {
    let mut buf = Vec::new();
    crate::frame::encode(msg, &mut buf).map_err(ControlError::Frame)?;
    if buf.len() > MAX_CONTROL_PACKET {
        return Err(ControlError::TooLarge(buf.len()));
    }
    crate::sys::send_with_fds(sock, &buf, fds).map_err(ControlError::Io)
}

/// Receive one message and the fds that came with it. Blocks unless the socket is non-blocking.
#[cfg(not(loom))]
pub fn recv<T: serde::de::DeserializeOwned>(sock: BorrowedFd<'_>) -> Result<(T, Vec<OwnedFd>), ControlError> {
    let mut buf = vec![0u8; MAX_CONTROL_PACKET];
    let (n, fds, truncated) = crate::sys::recv_with_fds(sock, &mut buf).map_err(ControlError::Io)?;
    if truncated {
        return Err(ControlError::Truncated);
    }
    if n == 0 {
        return Err(ControlError::Closed);
    }
    let msg = crate::frame::decode(&buf[..n]).map_err(ControlError::Frame)?;
    Ok((msg, fds))
}

/// The `PATH` the supervisor gives every worker (fixed by the contract); jobs inherit it unless the
/// session's env or policy sets another.
pub const WORKER_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_short_printable_bash_seen_is_passed_to_a_worker() {
        let seen = |id: &str, version: &str| BashSeen { id: id.into(), version: version.into() };
        assert!(seen("65024:247003:1265648:1745016454000000000:1796676028603691407", "5.2.15(1)-release").is_plain());
        for bad in [
            seen("", "5.2"),
            seen("1:2", ""),
            seen("1:2", "5.2 --policy=none"),
            seen("1:2\0", "5.2"),
            seen("1:2", "5.2\n"),
            seen("1:2", "5.2é"),
            seen(&"1".repeat(BashSeen::MAX_LEN + 1), "5.2"),
        ] {
            assert!(!bad.is_plain(), "{bad:?}");
        }
    }

    #[test]
    fn fit_cuts_a_long_error_and_leaves_small_messages_alone() {
        let mut e = FromSupervisor::Error { req: 1, error: "e".repeat(1 << 20) };
        e.fit();
        let FromSupervisor::Error { error, .. } = &e else { unreachable!() };
        assert!(error.len() <= MAX_ERROR_TEXT && error.ends_with(crate::procs::CUT_MARKER), "{}", error.len());
        let mut small = FromSupervisor::Error { req: 1, error: "no such session".into() };
        small.fit();
        assert_eq!(small, FromSupervisor::Error { req: 1, error: "no such session".into() });
    }
}
