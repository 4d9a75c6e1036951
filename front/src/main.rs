//! `heddle-front`: started by the supervisor with fd 3 = control socket (SOCK_SEQPACKET), fd 4 = the
//! listening client socket and, with an HTTP door, fd 5 = its listening TCP socket (fd 6 = its tokens). Glue only: parse flags, adopt the fds, serve (see the `front` library).
#![forbid(unsafe_code)]

use anyhow::Context;
use clap::Parser;
use front::process::inherit::{adopt, check_socket};
use nix::sys::socket::SockType;
use std::path::PathBuf;

/// heddle's unprivileged front (started by heddle-supervisor).
#[derive(Parser)]
#[command(version)]
struct Args {
    /// Inherited SOCK_SEQPACKET control socket to the supervisor.
    #[arg(long, default_value_t = 3)]
    control_fd: i32,
    /// Inherited listening Unix stream socket for clients.
    #[arg(long, default_value_t = 4)]
    listen_fd: i32,
    /// Inherited listening TCP socket of the HTTP door (`heddle up --http`); none: no door.
    #[arg(long)]
    http_fd: Option<i32>,
    /// Inherited memfd listing the HTTP door's bearer tokens (`UID TOKEN` lines); given: every HTTP
    /// request needs one, even on loopback.
    #[arg(long)]
    http_tokens_fd: Option<i32>,
    /// Directory for session output (owned by the front's uid).
    #[arg(long)]
    state_dir: PathBuf,
    /// The client socket's path, reported by `describe`.
    #[arg(long)]
    socket: String,
    /// heddle's cgroup root (the supervisor's): a client whose process runs in a job cgroup below it
    /// is refused (`front::kernel::peer_check`). Without it, no client is taken for a job.
    #[arg(long)]
    cgroup_root: Option<PathBuf>,
    /// Output retention: bytes kept per job (raw log and line log each); the oldest go first.
    #[arg(long, env = "HEDDLE_RETAIN_JOB_BYTES", default_value_t = 4 << 30)]
    retain_job_bytes: u64,
    /// Output retention: bytes kept per session; ended jobs' output goes first, oldest job first.
    #[arg(long, env = "HEDDLE_RETAIN_SESSION_BYTES", default_value_t = 16 << 30)]
    retain_session_bytes: u64,
    /// Output retention: seconds an ended job's output is kept.
    #[arg(long, env = "HEDDLE_RETAIN_AGE_SECS", default_value_t = 7 * 24 * 3600)]
    retain_age_secs: u64,
    /// Output retention: the server's disk budget, bytes, all open sessions' output together; ended
    /// jobs' output goes first (the job that ended first first), then running jobs lose their oldest
    /// output, and are told. 0: 32 GiB, or half the state directory's file system when smaller.
    #[arg(long, env = "HEDDLE_RETAIN_DISK_BYTES", default_value_t = 0)]
    retain_disk_bytes: u64,
    /// Pre-start each session's next bash, state restored, before its command arrives (see
    /// `front::sessions::prestart`); `false`: every job's bash is spawned when its `run` arrives.
    #[arg(long, env = "HEDDLE_SPARES", default_value_t = true, action = clap::ArgAction::Set, value_parser = clap::builder::BoolishValueParser::new())]
    spares: bool,
    /// Once a session ran a job, its next pre-started bash waits for a free CPU (fewer runnable tasks on
    /// the host than CPUs) for at most this long, ms; 0: it starts at once. In a burst of short sessions
    /// the spare made after a job is most of the CPU the job costs, and is never used.
    #[arg(long, env = "HEDDLE_SPARE_CPU_WAIT_MS", default_value_t = front::sessions::prestart::DEFAULT_CPU_WAIT_MS)]
    spare_cpu_wait_ms: u32,
    /// How many of its newest jobs a session keeps in memory; older ones that are done with (ended,
    /// reported, settled) are read back from disk when looked at (`front::sessions::retired`).
    #[arg(long, env = "HEDDLE_JOBS_IN_MEMORY", default_value_t = front::sessions::retired::DEFAULT_WINDOW)]
    jobs_in_memory: usize,
    /// Client connections open at once, from every uid; one more is refused with a sentence and closed.
    #[arg(long, env = "HEDDLE_MAX_CONNECTIONS", default_value_t = front::transport::socket::DEFAULT_MAX_CONNECTIONS)]
    max_connections: usize,
    /// Client connections open at once from one uid; one more is refused with a sentence and closed.
    #[arg(long, env = "HEDDLE_MAX_CONNECTIONS_PER_UID", default_value_t = front::transport::socket::DEFAULT_MAX_CONNECTIONS_PER_UID)]
    max_connections_per_uid: usize,
}

fn main() {
    // Started as `/proc/self/fd/N` (the supervisor execs the binary it opened), the kernel would name
    // this process `N` in ps and top.
    let _ = nix::sys::prctl::set_name(c"heddle-front");
    shm_proto::log::init("heddle-front");
    let args = Args::parse();
    match run(args) {
        Ok(status) => std::process::exit(status),
        Err(e) => {
            tracing::error!("{e:#}");
            std::process::exit(2);
        }
    }
}

fn run(args: Args) -> anyhow::Result<i32> {
    let control = adopt(args.control_fd).context("taking the control socket")?;
    check_socket(&control, SockType::SeqPacket, false, "SOCK_SEQPACKET control")?;
    let listen = adopt(args.listen_fd).context("taking the listening socket")?;
    check_socket(&listen, SockType::Stream, true, "listening Unix stream")?;
    front::output::retention::set(front::output::retention::Retention {
        job_bytes: args.retain_job_bytes,
        session_bytes: args.retain_session_bytes,
        max_age: std::time::Duration::from_secs(args.retain_age_secs),
        disk_bytes: match args.retain_disk_bytes {
            0 => front::output::retention::default_disk_bytes(&args.state_dir),
            n => n,
        },
    });
    front::sessions::prestart::set(args.spares, args.spare_cpu_wait_ms);
    front::sessions::retired::set_window(args.jobs_in_memory);
    front::transport::socket::set_limits(front::transport::socket::Limits {
        total: args.max_connections.max(1),
        per_uid: args.max_connections_per_uid.max(1),
    });
    let http = match args.http_fd {
        None => None,
        Some(fd) => {
            let sock = adopt(fd).context("taking the HTTP door's socket")?;
            check_socket(&sock, SockType::Stream, true, "listening TCP")?;
            let auth = match args.http_tokens_fd {
                None => front::transport::http::Auth::SocketOwner,
                Some(fd) => {
                    let f = std::fs::File::from(adopt(fd).context("taking the HTTP door's tokens")?);
                    let text = std::io::read_to_string(f).context("reading the HTTP door's tokens")?;
                    front::transport::http::Auth::Tokens(front::transport::http::tokens::Tokens::parse(&text))
                }
            };
            Some((std::net::TcpListener::from(sock), auth))
        }
    };
    let cfg =
        front::kernel::KernelConfig { state_dir: args.state_dir, socket: args.socket, cgroup_root: args.cgroup_root };
    Ok(front::process::serve_with(cfg, control, listen.into(), http)?)
}
