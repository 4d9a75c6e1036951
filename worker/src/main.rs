//! `heddle-worker --session ID --cgroup DIR`: one session's worker. Expects fds 3–7 from the supervisor
//! (see `docs/contract-wip.md`); exits 0 after `Shutdown`, non-zero on a fatal error.

use anyhow::Context;
use clap::Parser;
use std::path::PathBuf;
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
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let channels = Channels::inherited().context("cannot take the session's fds")?;
    let cgroups = SessionCgroup::open(&args.cgroup)
        .with_context(|| format!("cannot open the session cgroup {}", args.cgroup.display()))?;
    let settings = Settings::for_session(&args.cgroup);
    worker::serve(channels, cgroups, settings).with_context(|| format!("worker of session {} failed", args.session))
}
