//! `heddle up`: start the privileged supervisor (which binds the socket and starts the unprivileged
//! front) in the foreground, restart it when it dies unasked, forward SIGINT/SIGTERM to it, and exit with
//! its status. Also the background start that `heddle run` uses when no server answers.

use anyhow::{bail, Context, Result};
use signal_hook::consts::{SIGINT, SIGTERM};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Flags of `heddle up`, passed through to `heddle-supervisor`.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct UpArgs {
    /// Control socket to serve (default: see `heddle --help`).
    #[arg(long)]
    pub socket: Option<PathBuf>,
    /// Directory for heddle's state (job output, records).
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// cgroup directory heddle owns (default: `heddle` under the cgroup v2 mount).
    #[arg(long, env = "HEDDLE_CGROUP_ROOT")]
    pub cgroup_root: Option<PathBuf>,
    /// This process's cgroup is delegated to heddle (a systemd unit with `Delegate=yes`): the supervisor
    /// moves every process in it into `<cgroup>/supervisor` and puts sessions under `<cgroup>/heddle`.
    #[arg(long)]
    pub delegated: bool,
    /// User the front runs as (name or uid).
    #[arg(long)]
    pub front_user: Option<String>,
    /// One user for every root-opened session's worker and jobs (name or uid) [default: nobody, unless
    /// --session-uids gives each such session a uid of its own].
    #[arg(long, conflicts_with = "session_uids")]
    pub worker_user: Option<String>,
    /// Give each root-opened session a uid of its own from this range (e.g. 1879048192-1879113727).
    /// Off by default: the uids have no passwd entry, so tools that look their user up (ssh-keygen,
    /// whoami) fail under them.
    #[arg(long, value_name = "FIRST-LAST")]
    pub session_uids: Option<String>,
    /// Group allowed to connect to the socket (name or gid) [default: gid 0, only root].
    #[arg(long, value_name = "NAME|GID")]
    pub socket_group: Option<String>,
    /// A directory beneath which sessions may add writable roots (`session.open {writable}`);
    /// repeatable [default: none].
    #[arg(long, value_name = "DIR")]
    pub allow_writable: Vec<PathBuf>,
    /// A directory holding projects another uid owns (root's, in a container): sessions opened by root
    /// in a project beneath it see it as their jobs' uid's (an idmapped mount); repeatable [default: none].
    #[arg(long, value_name = "DIR")]
    pub allow_owned_projects: Vec<PathBuf>,
    /// Memory limit of a session, bytes [default: the session's policy profile's].
    #[arg(long, value_name = "BYTES")]
    pub memory_max: Option<u64>,
    /// Process limit of a session [default: the session's policy profile's].
    #[arg(long, value_name = "N")]
    pub pids_max: Option<u64>,
    /// Serve the HTTP door on this TCP address (`POST /rpc`, MCP on `/mcp`, `GET /events`); a loopback
    /// address maps each request to the uid owning the client's socket [default: no door].
    #[arg(long, value_name = "ADDR")]
    pub http: Option<String>,
    /// Bearer tokens of the HTTP door (one file per user, mode 0600, owned by that user); required for
    /// a non-loopback ADDR, and given, every request needs one.
    #[arg(long, value_name = "DIR", requires = "http")]
    pub http_token_dir: Option<PathBuf>,
    /// The server's disk budget for job output, all open sessions together (bytes, or with a K, M, G
    /// or T suffix): over it the output of ended jobs goes first, the job that ended first first, then
    /// running jobs lose their oldest output and are told [default: 32G, or half the state
    /// directory's file system when smaller].
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    pub disk_budget: Option<u64>,
    /// Client connections open at once, from every user; one more is answered with
    /// `too_many_connections` and closed [default: 8192, fewer if the open-file limit leaves no room].
    #[arg(long, value_name = "N", env = "HEDDLE_MAX_CONNECTIONS", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: Option<u32>,
    /// Client connections open at once from one user (uid); one more is answered with
    /// `too_many_connections` and closed [default: 1024].
    #[arg(long, value_name = "N", env = "HEDDLE_MAX_CONNECTIONS_PER_UID", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections_per_uid: Option<u32>,
}

/// `1048576`, `512K`, `64M`, `20G`, `1T` (powers of 1024).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, shift) = match s.char_indices().last() {
        Some((at, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                _ => return Err(format!("{s:?}: the suffix must be K, M, G or T")),
            };
            (&s[..at], shift)
        }
        _ => (s, 0),
    };
    let n: u64 = num.trim().parse().map_err(|_| format!("{s:?} is not a byte count (e.g. 20G)"))?;
    match n.checked_mul(1 << shift) {
        Some(b) if b > 0 => Ok(b),
        Some(_) => Err("the disk budget must be more than 0 bytes".to_owned()),
        None => Err(format!("{s:?} is too large")),
    }
}

impl UpArgs {
    fn supervisor_args(&self) -> Vec<std::ffi::OsString> {
        let mut v: Vec<std::ffi::OsString> = Vec::new();
        let socket = self.socket.clone().unwrap_or_else(crate::paths::default_socket);
        let state = self.state_dir.clone().unwrap_or_else(crate::paths::default_state_dir);
        v.extend(["--socket".into(), socket.into_os_string(), "--state-dir".into(), state.into_os_string()]);
        if let Some(c) = &self.cgroup_root {
            v.extend(["--cgroup-root".into(), c.clone().into_os_string()]);
        }
        if self.delegated {
            v.push("--delegated".into());
        }
        if let Some(u) = &self.front_user {
            v.extend(["--front-user".into(), u.into()]);
        }
        if let Some(u) = &self.worker_user {
            v.extend(["--worker-user".into(), u.into()]);
        }
        if let Some(r) = &self.session_uids {
            v.extend(["--session-uids".into(), r.into()]);
        }
        if let Some(g) = &self.socket_group {
            v.extend(["--socket-group".into(), g.into()]);
        }
        for dir in &self.allow_writable {
            v.extend(["--allow-writable".into(), dir.clone().into_os_string()]);
        }
        for dir in &self.allow_owned_projects {
            v.extend(["--allow-owned-projects".into(), dir.clone().into_os_string()]);
        }
        if let Some(m) = self.memory_max {
            v.extend(["--memory-max".into(), m.to_string().into()]);
        }
        if let Some(p) = self.pids_max {
            v.extend(["--pids-max".into(), p.to_string().into()]);
        }
        if let Some(a) = &self.http {
            v.extend(["--http".into(), a.into()]);
        }
        if let Some(d) = &self.http_token_dir {
            v.extend(["--http-token-dir".into(), d.clone().into_os_string()]);
        }
        v
    }

    /// The front's settings, passed on through the supervisor's environment.
    fn front_env(&self) -> Vec<(&'static str, String)> {
        let mut v = Vec::new();
        if let Some(n) = self.max_connections {
            v.push(("HEDDLE_MAX_CONNECTIONS", n.to_string()));
        }
        if let Some(n) = self.max_connections_per_uid {
            v.push(("HEDDLE_MAX_CONNECTIONS_PER_UID", n.to_string()));
        }
        v
    }
}

/// The directory holding heddle's binaries (the one this executable sits in).
pub fn bin_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("cannot find the heddle executable's own path")?;
    Ok(exe.parent().map(Path::to_path_buf).unwrap_or_default())
}

/// Run the supervisor in the foreground until it exits; returns its exit code. A supervisor that dies
/// without being asked to stop (no SIGINT/SIGTERM forwarded) and not with status 0 is started again
/// with backoff (0.1 s doubling to 5 s, reset after 60 s up); its recovery kills what it cannot adopt
/// and the front it starts marks vanished jobs `lost`. Nothing is re-run.
pub fn run_up(args: &UpArgs) -> Result<i32> {
    let sup = bin_dir()?.join("heddle-supervisor");
    if !sup.exists() {
        bail!("{} is missing: build every binary with `cargo build --workspace --bins`", sup.display());
    }
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM]).context("installing signal handlers")?;
    // The pid of the current supervisor (0: none) and whether a stop signal was forwarded to it.
    let current = Arc::new(AtomicI32::new(0));
    let stopping = Arc::new(AtomicBool::new(false));
    let handle = signals.handle();
    let forwarder = std::thread::spawn({
        let (current, stopping) = (Arc::clone(&current), Arc::clone(&stopping));
        move || {
            for sig in signals.forever() {
                stopping.store(true, Ordering::SeqCst);
                // The supervisor is our own child, named by the pid we spawned; it stops everything it started.
                let sig = nix::sys::signal::Signal::try_from(sig).unwrap_or(nix::sys::signal::SIGTERM);
                let pid = current.load(Ordering::SeqCst);
                if pid > 0 {
                    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
                }
            }
        }
    });
    let code = supervise(&sup, args, &current, &stopping);
    handle.close();
    let _ = forwarder.join();
    code
}

/// Start the supervisor, wait for it, and start it again while it dies unasked; returns the exit code
/// of the last one. A first start that fails on its flags (2) or its setup (3) is not retried: the
/// operator must fix it. A restart that fails so is retried (e.g. the dead supervisor's front still
/// holds the socket for a moment).
fn supervise(sup: &Path, args: &UpArgs, current: &AtomicI32, stopping: &AtomicBool) -> Result<i32> {
    let mut backoff = RESTART_MIN;
    let mut first = true;
    loop {
        let mut cmd = Command::new(sup);
        cmd.args(args.supervisor_args()).envs(args.front_env());
        if let Some(b) = args.disk_budget {
            // The supervisor passes `HEDDLE_RETAIN_*` on to the front, which enforces the budget.
            cmd.env("HEDDLE_RETAIN_DISK_BYTES", b.to_string());
        }
        let mut child = cmd.spawn().with_context(|| format!("starting {}", sup.display()))?;
        current.store(i32::try_from(child.id()).unwrap_or(0), Ordering::SeqCst);
        let started = Instant::now();
        if stopping.load(Ordering::SeqCst) {
            // A signal arrived between the spawn and the store: forward it now.
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("a pid fits in i32")),
                nix::sys::signal::SIGTERM,
            );
        }
        let status = child.wait().context("waiting for the supervisor")?;
        current.store(0, Ordering::SeqCst);
        let code = status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
        if stopping.load(Ordering::SeqCst) || status.success() {
            return Ok(code);
        }
        if first && matches!(status.code(), Some(2 | EXIT_START_FAILED)) {
            // Bad flags or a start that cannot succeed (not root, socket in use): retrying will not help.
            return Ok(code);
        }
        first = false;
        if started.elapsed() >= RESTART_RESET {
            backoff = RESTART_MIN;
        }
        eprintln!(
            "heddle up: the supervisor (pid {}) died unasked ({}); starting it again in {} ms",
            child.id(),
            describe_status(status),
            backoff.as_millis()
        );
        std::thread::sleep(backoff);
        backoff = (backoff * 2).min(RESTART_MAX);
        if stopping.load(Ordering::SeqCst) {
            return Ok(code);
        }
    }
}

/// `supervisor::EXIT_START_FAILED`: the supervisor could not start.
const EXIT_START_FAILED: i32 = 3;
const RESTART_MIN: Duration = Duration::from_millis(100);
const RESTART_MAX: Duration = Duration::from_secs(5);
const RESTART_RESET: Duration = Duration::from_secs(60);

/// "exit status 3" or "killed by SIGKILL".
fn describe_status(status: std::process::ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(s)) => match nix::sys::signal::Signal::try_from(s) {
            Ok(sig) => format!("killed by {sig}"),
            Err(_) => format!("killed by signal {s}"),
        },
        (None, None) => "unknown status".to_owned(),
    }
}

/// Start `heddle up` in the background (its own process group, output to a log file) and wait until the
/// socket answers. Returns the log file's path.
pub fn start_background(socket: &Path) -> Result<PathBuf> {
    if !nix::unistd::geteuid().is_root() {
        bail!(
            "no heddle server answers at {} and starting one needs root (the supervisor owns the cgroup tree); \
             ask an administrator to run `heddle up`",
            socket.display()
        );
    }
    let state = crate::paths::default_state_dir();
    std::fs::create_dir_all(&state).with_context(|| format!("creating {}", state.display()))?;
    let log_path = state.join("heddle-up.log");
    let log = std::fs::OpenOptions::new().create(true).append(true).open(&log_path)?;
    let exe = std::env::current_exe()?;
    let mut child = Command::new(exe)
        .args(["up", "--socket"])
        .arg(socket)
        .arg("--state-dir")
        .arg(&state)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .context("starting heddle up in the background")?;
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        if std::os::unix::net::UnixStream::connect(socket).is_ok() {
            return Ok(log_path);
        }
        if let Ok(Some(status)) = child.try_wait() {
            // It refused to start (e.g. another heddle holds the cgroup root): say why at once.
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            let why = log.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no reason logged");
            bail!("heddle up could not start ({}): {why}; see {}", describe_status(status), log_path.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!(
        "started heddle up in the background but {} did not answer within 15 s; see {}",
        socket.display(),
        log_path.display()
    )
}

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn disk_budgets_read_plain_and_suffixed_sizes() {
        assert_eq!(parse_bytes("1048576"), Ok(1 << 20));
        assert_eq!(parse_bytes("512K"), Ok(512 << 10));
        assert_eq!(parse_bytes("20g"), Ok(20 << 30));
        assert_eq!(parse_bytes("1T"), Ok(1 << 40));
        assert!(parse_bytes("0").unwrap_err().contains("more than 0"));
        assert!(parse_bytes("5X").unwrap_err().contains("suffix"));
        assert!(parse_bytes("1.5G").unwrap_err().contains("not a byte count"));
        assert!(parse_bytes("99999999999T").unwrap_err().contains("too large"));
    }
}
