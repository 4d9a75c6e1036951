//! `heddle-worker --session ID --cgroup DIR [--policy=NAME --project=DIR --tmp=DIR --network=BOOL
//! --bash-seen=ID --bash-version=V --writable=DIR… --allow-writable=DIR…]`: one
//! session's worker. Expects fds 3–7 from the supervisor (docs/architecture.md); exits 0 after
//! `Shutdown`, non-zero on a fatal error.
#![deny(unsafe_code)]

use anyhow::Context;
use clap::Parser;
use std::path::PathBuf;
use worker::sandbox::{SandboxArgs, SessionSandbox};
use worker::{cgroup::SessionCgroup, Channels, Settings};

/// heddle's per-session worker (started by heddle-supervisor).
#[derive(Parser)]
#[command(name = "heddle-worker", version)]
struct Args {
    /// The session id.
    #[arg(long)]
    session: String,
    /// The session's delegated cgroup directory; jobs go in DIR/job-<N>.
    #[arg(long, value_name = "DIR")]
    cgroup: PathBuf,
    /// The policy profile jobs run under.
    #[arg(long, default_value = "workspace")]
    policy: String,
    /// Switch the profile's network setting for this session.
    #[arg(long)]
    network: Option<bool>,
    /// Switch the profile's `[seccomp.ptys]`: `false` refuses jobs pseudo-terminals of their own.
    #[arg(long)]
    ptys: Option<bool>,
    /// The session's project directory (`{project}`).
    #[arg(long, value_name = "DIR", default_value = "/")]
    project: PathBuf,
    /// The session's temp dir (`{session_tmp}`, TMPDIR of jobs).
    #[arg(long, value_name = "DIR", default_value = "/tmp")]
    tmp: PathBuf,
    /// HOME is a home heddle made for this uid: the whole of it is a writable root.
    #[arg(long)]
    own_home: bool,
    /// The identity of the bash an earlier worker ran (its `Hello`'s `bash_id`), with `--bash-version`:
    /// while this worker's bash is the same file, it takes that version instead of running bash.
    #[arg(long, value_name = "ID", requires = "bash_version")]
    bash_seen: Option<String>,
    /// The `BASH_VERSION` that bash printed.
    #[arg(long, value_name = "VERSION", requires = "bash_seen")]
    bash_version: Option<String>,
    /// An extra writable root the session asked for (repeatable).
    #[arg(long, value_name = "DIR")]
    writable: Vec<PathBuf>,
    /// A directory the server allows extra roots beneath (repeatable); the worker checks again.
    #[arg(long, value_name = "DIR")]
    allow_writable: Vec<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    // Started as `/proc/self/fd/N` (the supervisor execs the binary it opened), the kernel would name
    // this process `N` in ps and top.
    let _ = nix::sys::prctl::set_name(c"heddle-worker");
    let args = Args::parse();
    let channels = Channels::inherited().context("cannot take the session's fds")?;
    let cgroups = SessionCgroup::open(&args.cgroup)
        .with_context(|| format!("cannot open the session cgroup {}", args.cgroup.display()))?;
    let seen = args.bash_seen.zip(args.bash_version);
    let mut settings = Settings::for_session(&args.cgroup, seen.as_ref().map(|(id, v)| (&**id, &**v)));
    settings.base_env.retain(|(k, _)| k != "TMPDIR");
    settings.base_env.push(("TMPDIR".into(), args.tmp.display().to_string()));
    let home = settings.base_env.iter().find(|(k, _)| k == "HOME").map(|(_, v)| PathBuf::from(v));
    let sb_args = SandboxArgs {
        policy: args.policy,
        network: args.network,
        ptys: args.ptys,
        project: args.project,
        tmp: args.tmp,
        home: home.unwrap_or_else(|| "/".into()),
        writable: args.writable,
        allow_writable: args.allow_writable,
        own_home: args.own_home,
    };
    let mut sandbox = SessionSandbox::build(&sb_args);
    settings.startup_warnings.extend(sandbox.enter(&args.cgroup));
    settings.sandbox = Some(std::sync::Arc::new(sandbox));
    worker::serve(channels, cgroups, settings).with_context(|| format!("worker of session {} failed", args.session))
}
