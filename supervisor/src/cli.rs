//! `heddle-supervisor`'s command line, as docs/architecture.md ("Command lines, inherited fds") fixes it.
//!
//! ```
//! use clap::Parser;
//! use supervisor::cli::Args;
//! let a = Args::parse_from(["heddle-supervisor", "--socket", "/run/h.sock", "--state-dir", "/var/lib/h"]);
//! assert!(a.worker_user.is_none(), "root-opened sessions get uids of their own");
//! assert!(a.cgroup_root.is_none());
//! ```

use std::path::PathBuf;

/// heddle's privileged supervisor: owns the delegated cgroup tree, spawns the front and one worker per
/// session. Must run as root.
#[derive(Clone, Debug, clap::Parser)]
#[command(name = "heddle-supervisor", version)]
pub struct Args {
    /// The client control socket to bind (the front serves it).
    #[arg(long, value_name = "PATH")]
    pub socket: PathBuf,
    /// The front's state directory (created 0700, owned by the front user).
    #[arg(long, value_name = "DIR")]
    pub state_dir: PathBuf,
    /// The cgroup under which sessions are created [default: pure v2: <own cgroup>/heddle; hybrid:
    /// /sys/fs/cgroup/unified/heddle; --delegated: <delegated cgroup>/heddle].
    #[arg(long, value_name = "DIR")]
    pub cgroup_root: Option<PathBuf>,
    /// This process's cgroup is delegated to heddle (a systemd unit with `Delegate=yes`): move every
    /// process in it into its `supervisor` leaf, enable memory/pids for its children, and default the
    /// cgroup root to `<that cgroup>/heddle` (docs/deploy.md).
    #[arg(long)]
    pub delegated: bool,
    /// The front's user [default: `heddle` if it exists, else `nobody`].
    #[arg(long, value_name = "NAME|UID")]
    pub front_user: Option<String>,
    /// One user for the workers and jobs of every session a root client opens (others always get the
    /// client's uid) [default: nobody, unless --session-uids gives each session a uid of its own].
    #[arg(long, value_name = "NAME|UID", conflicts_with = "session_uids")]
    pub worker_user: Option<String>,
    /// The uids given to sessions that root clients open, one per session (its gid the same number),
    /// skipping any the user or group database or /etc/subuid names (e.g. 1879048192-1879113727). Off by
    /// default: these uids have no passwd entry, and tools that look their user up (ssh-keygen,
    /// whoami) fail under them.
    #[arg(long, value_name = "FIRST-LAST")]
    pub session_uids: Option<String>,
    /// The directory holding heddle-front and heddle-worker [default: this executable's directory].
    #[arg(long, value_name = "DIR")]
    pub bin_dir: Option<PathBuf>,
    /// Default memory limit of a session, in bytes (hybrid hosts: v1 memory.limit_in_bytes).
    #[arg(long, value_name = "BYTES")]
    pub memory_max: Option<u64>,
    /// Default process limit of a session (hybrid hosts: v1 pids.max).
    #[arg(long, value_name = "N")]
    pub pids_max: Option<u64>,
    /// The group that may connect to the socket (name or gid): the socket is root:GROUP 0660, in a
    /// directory created root:GROUP 0750 [default: gid 0, so only root connects].
    #[arg(long, value_name = "NAME|GID")]
    pub socket_group: Option<String>,
    /// A directory beneath which sessions may add writable roots (`session.open {writable}`);
    /// repeatable [default: none, sessions write only their profile's roots].
    #[arg(long, value_name = "DIR")]
    pub allow_writable: Vec<PathBuf>,
    /// A directory holding projects other uids own (root's, in a container): a session opened by root
    /// (or by a project's owner) in a project beneath it sees the project as its jobs' uid's, through an
    /// idmapped mount in the worker's mount namespace; what jobs create is stored as the owner's.
    /// Repeatable [default: none].
    #[arg(long, value_name = "DIR")]
    pub allow_owned_projects: Vec<PathBuf>,
    /// Serve the HTTP door on this TCP address (`127.0.0.1:8080`; port 0 picks a free one, written to
    /// `<state-dir>/http-address`) [default: no door].
    #[arg(long, value_name = "ADDR")]
    pub http: Option<String>,
    /// Bearer tokens of the HTTP door: one file per user, mode 0600, owned by the user the token acts
    /// as. Required unless ADDR is loopback; given, every request needs a token.
    #[arg(long, value_name = "DIR", requires = "http")]
    pub http_token_dir: Option<PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn socket_and_state_dir_are_required() {
        assert!(Args::try_parse_from(["heddle-supervisor", "--socket", "/s"]).is_err());
        assert!(Args::try_parse_from(["heddle-supervisor", "--state-dir", "/d"]).is_err());
    }

    #[test]
    fn every_flag_parses() {
        let a = Args::try_parse_from([
            "heddle-supervisor",
            "--socket",
            "/s",
            "--state-dir",
            "/d",
            "--cgroup-root",
            "/sys/fs/cgroup/unified/heddle-x",
            "--front-user",
            "1000",
            "--worker-user",
            "agent",
            "--bin-dir",
            "/opt/heddle/bin",
            "--socket-group",
            "heddle-clients",
        ])
        .unwrap();
        assert_eq!(a.socket_group.as_deref(), Some("heddle-clients"));
        assert_eq!(a.front_user.as_deref(), Some("1000"));
        assert_eq!(a.worker_user.as_deref(), Some("agent"));
        let both = ["heddle-supervisor", "--socket", "/s", "--state-dir", "/d", "--worker-user", "x"];
        assert!(Args::try_parse_from(both.iter().chain(&["--session-uids", "5-9"])).is_err());
        assert_eq!(a.bin_dir, Some(PathBuf::from("/opt/heddle/bin")));
    }
}
