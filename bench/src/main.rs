//! `heddle-bench`: run one benchmark and print its figures as ratios against a baseline measured in the
//! same run. Needs root (it starts a real heddle stack). Build with `cargo build --release --workspace
//! --bins`, then `./target/release/heddle-bench spawn`.
#![deny(unsafe_code)]

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
mod effects_bench;
mod fleet;
mod long;
mod memory;
mod persistent;
mod shm_sub;
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
    /// Every subcommand below in a size that fits about four minutes, then all their figures as one table
    /// of ratios (Markdown, as docs/performance.md keeps it), with the load average before and after.
    All {
        /// Sessions in the fleet burst.
        #[arg(long, default_value_t = 1000)]
        fleet_sessions: usize,
    },
    /// A fleet arriving at once: open N sessions, run one `true` in each, close them, over `--parallel`
    /// connections; jobs/s vs `xargs -P`, each phase's p50/p99, and the CPU of an idle stretch after.
    Fleet {
        #[arg(long, default_value_t = 100)]
        sessions: usize,
        #[arg(long, default_value_t = 64)]
        parallel: usize,
        /// Seconds of each idle stretch measured: two with the sessions open (right after their jobs, then
        /// the next), one after they closed (0: none).
        #[arg(long, default_value_t = 60)]
        idle_secs: u64,
    },
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
        /// Serve the HTTP door too, and make the idle connections HTTP ones.
        #[arg(long)]
        http: bool,
    },
    /// `run("true")` end to end through the socket vs a bare spawn of `bash --noprofile --norc -c true`,
    /// each call after a pause as an agent's are (so the worker can start the next pre-started shell).
    Spawn {
        #[arg(long, default_value_t = 300)]
        iterations: usize,
        /// The pause before every call and every bare spawn; 0 measures the back-to-back loop, where a
        /// call finds a pre-started shell ready or not by chance.
        #[arg(long, default_value_t = 40)]
        pause_ms: u64,
    },
    /// `run("true")` at the start of a session and again after `jobs` more jobs in it, each vs a bare spawn:
    /// a call should cost the same late in a long session as early in it.
    Long {
        #[arg(long, default_value_t = 5000)]
        jobs: usize,
        #[arg(long, default_value_t = 300)]
        iterations: usize,
    },
    /// What an ended job costs the front: VmRSS growth over N jobs of 3,000 lines, per job.
    Memory {
        #[arg(long, default_value_t = 200)]
        jobs: usize,
        /// Lines of 35 bytes each job prints (0: the jobs run `true`, the cost of a job without output).
        #[arg(long, default_value_t = 3000)]
        lines: usize,
        /// Run the jobs on a 24×80 terminal (`run {tty}`): what an ended terminal job costs.
        #[arg(long)]
        tty: bool,
    },
    /// Pre-started shells at an agent's pace through the stack: spares on vs off, empty vs typical state,
    /// each vs a bare bash spawn.
    Spare {
        #[arg(long, default_value_t = 200)]
        iterations: usize,
        #[arg(long, default_value_t = 40)]
        pause_ms: u64,
    },
    /// A named persistent session's `run("true")` round trip (empty and typical state, scoped and full
    /// capture, with and without the effects ledger) vs a raw persistent bash over pipes.
    Persistent {
        #[arg(long, default_value_t = 300)]
        iterations: usize,
        #[arg(long, default_value_t = 5)]
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
    /// `run("true")` with the effects ledger vs `effects: "none"`, in a clean repo of 10,000 files and in
    /// one with 100 dirty files, each vs a bare bash spawn; the guard linter's cost per call.
    Effects {
        #[arg(long, default_value_t = 200)]
        iterations: usize,
        #[arg(long, default_value_t = 20)]
        pause_ms: u64,
        #[arg(long, default_value_t = 2000)]
        lint_rounds: usize,
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
        /// Lines per round: each round runs the pipe, the socket and heddle once, in turn.
        #[arg(long, default_value_t = 100)]
        batch: usize,
        /// Experiment: keep every CPU out of its idle halt with one idle-priority busy loop per CPU
        /// (`chrt -i 0 taskset -c N`) for the whole run, to show what waking halted CPUs costs.
        #[arg(long)]
        idle_spinners: bool,
    },
    /// Would a shared-memory subscription beat the socket one? The front → local client hop both ways
    /// (a real shm-proto ring handed over with SCM_RIGHTS, park/wake by eventfd, vs a JSON notification
    /// on a Unix socket), between two processes, interleaved, plus heddle's own subscription for scale.
    ShmSub {
        #[arg(long, default_value_t = 2000)]
        samples: usize,
        /// Lines of heddle's own subscription measured in the same run.
        #[arg(long, default_value_t = 500)]
        heddle_lines: usize,
    },
    /// Internal: the subscriber process of `shm-sub`.
    #[command(hide = true)]
    ShmSubChild { socket: std::path::PathBuf },
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
        Bench::All { fleet_sessions } => all(fleet_sessions),
        Bench::Fleet { sessions, parallel, idle_secs } => fleet::run(sessions, parallel, idle_secs),
        Bench::Checks { mib, rounds } => checks_bench::run(mib, rounds),
        Bench::Spawn { iterations, pause_ms } => spawn(iterations, pause_ms),
        Bench::Conns { iterations, idle, baseline_bins, http } => {
            conns::run(iterations, idle, baseline_bins.as_deref(), http)
        }
        Bench::Long { jobs, iterations } => long::run(jobs, iterations),
        Bench::State { iterations } => state::run(iterations),
        Bench::Persistent { iterations, pause_ms } => persistent::run(iterations, pause_ms),
        Bench::Memory { jobs, lines, tty } => memory::run(jobs, lines, tty),
        Bench::Spare { iterations, pause_ms } => spare::run(iterations, pause_ms),
        Bench::Cgroup { iterations } => cgroup_bench::run(iterations),
        Bench::Sandbox { iterations } => sandbox::run(iterations),
        Bench::SandboxChild { cgroup } => sandbox::child(cgroup),
        Bench::Throughput { mib, rounds } => output::throughput(mib, rounds),
        Bench::Latency { lines, batch, idle_spinners } => output::latency(lines, batch, idle_spinners),
        Bench::View { mib, rounds } => output::view(mib, rounds),
        Bench::ShmSub { samples, heddle_lines } => shm_sub::run(samples, heddle_lines),
        Bench::ShmSubChild { socket } => shm_sub::child(&socket),
        Bench::Db { iterations } => db_bench::run(iterations),
        Bench::Doors { iterations, pause_ms } => doors::run(iterations, pause_ms),
        Bench::Tty { iterations, mib } => tty::run(iterations, mib),
        Bench::Effects { iterations, pause_ms, lint_rounds } => effects_bench::run(iterations, pause_ms, lint_rounds),
    }
}

type Run = Box<dyn FnOnce() -> Result<()>>;

/// `heddle-bench all`: every bench in one run, sized to fit about four minutes on a 2-vCPU host.
fn all(fleet_sessions: usize) -> Result<()> {
    let load = || std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim().to_owned();
    let load_before = load();
    let started = std::time::Instant::now();
    let benches: Vec<(&str, &str, Run)> = vec![
        ("spawn", "--iterations 150 --pause-ms 20", Box::new(|| spawn(150, 20))),
        ("spare", "--iterations 40 --pause-ms 20", Box::new(|| spare::run(40, 20))),
        ("long", "--jobs 1500 --iterations 100", Box::new(|| long::run(1500, 100))),
        ("state", "--iterations 100", Box::new(|| state::run(100))),
        ("persistent", "--iterations 200 --pause-ms 5", Box::new(|| persistent::run(200, 5))),
        ("memory", "--jobs 200 --lines 3000", Box::new(|| memory::run(200, 3000, false))),
        ("cgroup", "--iterations 500", Box::new(|| cgroup_bench::run(500))),
        ("sandbox", "--iterations 150", Box::new(|| sandbox::run(150))),
        ("latency", "--lines 1000 --batch 100", Box::new(|| output::latency(1000, 100, false))),
        ("throughput", "--mib 256 --rounds 3", Box::new(|| output::throughput(256, 3))),
        ("view", "--mib 16 --rounds 3", Box::new(|| output::view(16, 3))),
        ("db", "--iterations 200", Box::new(|| db_bench::run(200))),
        ("doors", "--iterations 60 --pause-ms 20", Box::new(|| doors::run(60, 20))),
        ("tty", "--iterations 300 --mib 8", Box::new(|| tty::run(300, 8))),
        ("checks", "--mib 4 --rounds 3", Box::new(|| checks_bench::run(4, 3))),
        ("effects", "--iterations 60 --pause-ms 20 --lint-rounds 2000", Box::new(|| effects_bench::run(60, 20, 2000))),
        ("fleet", "--sessions N --parallel 64 --idle-secs 5", Box::new(move || fleet::run(fleet_sessions, 64, 5))),
    ];
    let mut failed = Vec::new();
    let mut took = Vec::new();
    for (name, args, run) in benches {
        heddle_bench::set_bench(name);
        println!("\n######## heddle-bench {name} {args}");
        let t = std::time::Instant::now();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failed.push(format!("{name}: {e:#}")),
            Err(_) => failed.push(format!("{name}: panicked (its message is above)")),
        }
        took.push(format!("{name} {:.0} s", t.elapsed().as_secs_f64()));
    }
    let (rows, notes) = heddle_bench::take();
    println!("\n######## heddle-bench all: {} figures in {:.0} s", rows.len(), started.elapsed().as_secs_f64());
    println!("load average (1, 5, 15 min; runnable/total; last pid) before: {load_before}; after: {}", load());
    println!("time per bench: {}", took.join(", "));
    println!("\n{}", heddle_bench::markdown(&rows));
    for n in notes {
        println!("- {n}");
    }
    for f in &failed {
        println!("FAILED {f}");
    }
    anyhow::ensure!(failed.is_empty(), "{} bench(es) failed: see FAILED above", failed.len());
    Ok(())
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

fn spawn(iterations: usize, pause_ms: u64) -> Result<()> {
    let h = heddle_tests::Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let mut call = || {
        let r = c.call("run", json!({"session": s, "cmd": "true"})).expect("run");
        assert_eq!(r["exit_code"], 0, "{r}");
        r["prestarted"] == true
    };
    let pause = std::time::Duration::from_millis(pause_ms);
    for _ in 0..10 {
        std::thread::sleep(pause);
        bare_bash_true();
        std::thread::sleep(pause);
        call();
    }
    let (mut bare, mut heddle, mut prestarted) = (Vec::new(), Vec::new(), 0);
    for _ in 0..iterations {
        std::thread::sleep(pause);
        bare.push(time_us(bare_bash_true));
        std::thread::sleep(pause);
        let mut hot = false;
        heddle.push(time_us(|| hot = call()));
        prestarted += usize::from(hot);
    }
    heddle_bench::note(format!(
        "{prestarted} of {iterations} calls ran on a pre-started shell (pause before every call and spawn: {pause_ms} ms)"
    ));
    report(
        &format!("run(\"true\") at an agent's pace ({pause_ms} ms pause) vs bare bash spawn+wait"),
        "bare posix_spawn(bash -c true) + wait",
        Summary::of(bare),
        "heddle run(\"true\"), client kept connected",
        Summary::of(heddle),
    );
    Ok(())
}
