//! `heddle-bench`: run one benchmark and print its figures as ratios against a baseline measured in the
//! same run. Needs root (it starts a real heddle stack). Build with `cargo build --release --workspace
//! --bins`, then `./target/release/heddle-bench spawn`.

mod output;
mod sandbox;

use anyhow::Result;
use clap::{Parser, Subcommand};
use heddle_bench::{report, time_us, Summary};
use serde_json::json;
use std::process::{Command, Stdio};

mod cgroup_bench;
mod checks_bench;
mod conns;
mod db_bench;
mod doors;
mod long;
mod spare;
mod state;
mod tty;

#[derive(Parser)]
#[command(about = "heddle benchmarks (ratios against a same-run baseline)")]
struct Args {
    #[command(subcommand)]
    bench: Bench,
}

#[derive(Subcommand)]
enum Bench {
    /// Parsing test runners' output per MiB vs copying it, and a check view's tokens vs the raw output.
    Checks {
        #[arg(long, default_value_t = 16)]
        mib: usize,
        #[arg(long, default_value_t = 5)]
        rounds: usize,
    },
    /// The front's threads and fds with `idle` idle connections open, and `run("true")` on a raw socket
    /// with and without them; with `--baseline-bins`, against another build's stack in the same run.
    Conns {
        #[arg(long, default_value_t = 300)]
        iterations: usize,
        #[arg(long, default_value_t = 1000)]
        idle: usize,
        /// A directory holding another build's `heddle`, `heddle-supervisor`, `heddle-front`,
        /// `heddle-worker` and `heddle-launch`.
        #[arg(long, value_name = "DIR")]
        baseline_bins: Option<std::path::PathBuf>,
    },
    /// `run("true")` end to end through the socket vs a bare spawn of `bash --noprofile --norc -c true`.
    Spawn {
        #[arg(long, default_value_t = 500)]
        iterations: usize,
    },
    /// `run("true")` at the start of a session and again after `jobs` more jobs in it, each vs a bare spawn:
    /// a call should cost the same late in a long session as early in it.
    Long {
        #[arg(long, default_value_t = 5000)]
        jobs: usize,
        #[arg(long, default_value_t = 300)]
        iterations: usize,
    },
    /// Pre-started shells at an agent's pace through the stack: spares on vs off, empty vs typical state,
    /// each vs a bare bash spawn.
    Spare {
        #[arg(long, default_value_t = 200)]
        iterations: usize,
        #[arg(long, default_value_t = 40)]
        pause_ms: u64,
    },
    /// Shell-state restore + capture around a bash spawn, vs the same spawn without them.
    State {
        #[arg(long, default_value_t = 400)]
        iterations: usize,
    },
    /// Per-job cgroup create + place + remove vs a bare spawn of the same program.
    Cgroup {
        #[arg(long, default_value_t = 2000)]
        iterations: usize,
    },
    /// Spawn+wait through the launcher with Landlock + seccomp + cgroup placement, vs bare, vs bwrap.
    Sandbox {
        #[arg(long, default_value_t = 500)]
        iterations: usize,
    },
    /// Internal: the sandboxed loop of `sandbox`, in its own process (the filter is installed on it).
    #[command(hide = true)]
    SandboxChild { cgroup: std::path::PathBuf },
    /// `head -c N /dev/zero | tr '\0' a` through the stack into the store vs a raw pipe read.
    Throughput {
        #[arg(long, default_value_t = 1024)]
        mib: u64,
        #[arg(long, default_value_t = 3)]
        rounds: usize,
    },
    /// A job's stamped line → a subscribed client, vs a Unix-socket hop and a direct pipe.
    Latency {
        #[arg(long, default_value_t = 2000)]
        lines: usize,
        /// Experiment: keep every CPU out of its idle halt with one idle-priority busy loop per CPU
        /// (`chrt -i 0 taskset -c N`) for the whole run, to show what waking halted CPUs costs.
        #[arg(long)]
        idle_spinners: bool,
    },
    /// Database rows, receipts and journal entries of one run (journal with and without fdatasync), vs
    /// `run("true")` through the stack.
    Db {
        #[arg(long, default_value_t = 500)]
        iterations: usize,
    },
    /// `run("true")` at an agent's pace through each door (MCP via `heddle mcp`, HTTP `/rpc` and `/mcp`)
    /// vs the raw control socket.
    Doors {
        #[arg(long, default_value_t = 200)]
        iterations: usize,
        #[arg(long, default_value_t = 20)]
        pause_ms: u64,
    },
    /// Keystroke echo latency on a PTY job (`write` → screen) vs a raw PTY round trip with `cat`; the
    /// headless terminal's cost per MiB of `ls --color -R /usr` vs a copy.
    Tty {
        #[arg(long, default_value_t = 1000)]
        iterations: usize,
        #[arg(long, default_value_t = 32)]
        mib: usize,
    },
    /// Model-view rendering per MiB of build output vs copy + line split.
    View {
        #[arg(long, default_value_t = 64)]
        mib: usize,
        #[arg(long, default_value_t = 5)]
        rounds: usize,
    },
}

fn main() -> Result<()> {
    match Args::parse().bench {
        Bench::Checks { mib, rounds } => checks_bench::run(mib, rounds),
        Bench::Spawn { iterations } => spawn(iterations),
        Bench::Conns { iterations, idle, baseline_bins } => conns::run(iterations, idle, baseline_bins.as_deref()),
        Bench::Long { jobs, iterations } => long::run(jobs, iterations),
        Bench::State { iterations } => state::run(iterations),
        Bench::Spare { iterations, pause_ms } => spare::run(iterations, pause_ms),
        Bench::Cgroup { iterations } => cgroup_bench::run(iterations),
        Bench::Sandbox { iterations } => sandbox::run(iterations),
        Bench::SandboxChild { cgroup } => sandbox::child(cgroup),
        Bench::Throughput { mib, rounds } => output::throughput(mib, rounds),
        Bench::Latency { lines, idle_spinners } => output::latency(lines, idle_spinners),
        Bench::View { mib, rounds } => output::view(mib, rounds),
        Bench::Db { iterations } => db_bench::run(iterations),
        Bench::Doors { iterations, pause_ms } => doors::run(iterations, pause_ms),
        Bench::Tty { iterations, mib } => tty::run(iterations, mib),
    }
}

pub(crate) fn bare_bash_true() {
    // std spawns with posix_spawn here (no pre_exec hooks), as the design's baseline says.
    let st = Command::new("bash")
        .args(["--noprofile", "--norc", "-c", "true"])
        .stdin(Stdio::null())
        .status()
        .expect("spawn bash");
    assert!(st.success());
}

fn spawn(iterations: usize) -> Result<()> {
    let h = heddle_tests::Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let mut call = || {
        let r = c.call("run", json!({"session": s, "cmd": "true"})).expect("run");
        assert_eq!(r["exit_code"], 0, "{r}");
    };
    for _ in 0..20 {
        bare_bash_true();
        call();
    }
    let (mut bare, mut heddle) = (Vec::new(), Vec::new());
    for _ in 0..iterations {
        bare.push(time_us(bare_bash_true));
        heddle.push(time_us(&mut call));
    }
    report(
        "run(\"true\") through the socket vs bare bash spawn+wait",
        "bare posix_spawn(bash -c true) + wait",
        Summary::of(bare),
        "heddle run(\"true\"), client kept connected",
        Summary::of(heddle),
    );
    Ok(())
}
