//! `heddle-bench sandbox`: what heddle's sandbox adds to a spawn, vs a bare spawn and vs bubblewrap.
//!
//! Four spawn+wait loops of `bash --noprofile --norc -c true`, interleaved in batches so drift hits all
//! alike: (1) bare `posix_spawn` (std), the baseline; (2) the launcher with nothing added; (3) the
//! launcher with the `workspace` profile's Landlock ruleset (built once, `restrict_self` in the child),
//! the session seccomp filter (installed once, inherited), the jobs' own small filter (stacked in the
//! child; also measured without it, same run) and `clone3(CLONE_INTO_CGROUP)` into a
//! pre-made cgroup — measured in a child process of this bench (`sandbox-child`), which installs the
//! filter on itself as the worker does; (4) `bwrap --ro-bind / / --dev /dev --proc /proc`, when
//! bubblewrap is installed (the report says so when it is not). (2) and (3) are also run with the
//! launcher's fork-style clone (`Prepared::force_fork`), its path before the vfork-style `clone3`. The
//! cgroup's mkdir/rmdir (~20 + 11 µs per job in the worker) is not part of (3): it is the job model's cost,
//! not the sandbox's.

use heddle_bench::{time_us, Summary};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const BATCH: usize = 25;

fn bash_true(cmd: &mut Command) {
    let st = cmd.stdin(Stdio::null()).status().expect("spawn");
    assert!(st.success());
}

fn launcher_true(
    ruleset: Option<std::os::fd::BorrowedFd<'_>>,
    job_filter: Option<&[launcher::seccomp::sock_filter]>,
    cgroup: Option<&Path>,
    fork: bool,
) {
    let null = || std::fs::OpenOptions::new().write(true).open("/dev/null").unwrap().into();
    let stdio = launcher::Stdio::null_stdin(null(), null()).unwrap();
    let env = launcher::job_env(&launcher::process_env(), &[]);
    let mut p = launcher::Prepared::bash("true", &env, None, stdio).unwrap();
    if let Some(rs) = ruleset {
        p = p.with_landlock(rs).unwrap();
    }
    if let Some(prog) = job_filter {
        p = p.with_seccomp(prog);
    }
    if let Some(dir) = cgroup {
        let fd = std::fs::File::open(dir).unwrap();
        p = p.with_cgroup(fd.into());
    }
    if fork {
        p = p.force_fork();
    }
    let child = launcher::spawn(&p).unwrap();
    drop(p);
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

/// The sandboxed loop, in its own process: install the filter, build the ruleset, then answer each line
/// `N` on stdin with N timings (µs) on one line (`N fork`: fork-style; `N nojob`: without the jobs' own
/// seccomp filter, the path before it existed).
pub fn child(cgroup: PathBuf) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let ctx = policies::ResolveCtx::new(dir.path(), dir.path(), dir.path());
    let resolved = policies::Policy::builtin("workspace")?.resolve(&ctx)?;
    let sb = launcher::sandbox::Sandbox::build(&resolved)?;
    launcher::seccomp::install(&sb.seccomp)?;
    let rs = sb.job.fd.as_ref().map(std::os::fd::AsFd::as_fd);
    let mut out = std::io::stdout().lock();
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let mut words = line.split_whitespace();
        let n = words.next().unwrap_or("0").parse::<usize>()?;
        let mode = words.next().unwrap_or("");
        let job = if mode == "nojob" { None } else { sb.job_seccomp.as_deref() };
        let fork = mode == "fork";
        let times: Vec<String> =
            (0..n).map(|_| time_us(|| launcher_true(rs, job, Some(&cgroup), fork)).to_string()).collect();
        writeln!(out, "{}", times.join(" "))?;
        out.flush()?;
    }
    Ok(())
}

pub fn run(iterations: usize) -> anyhow::Result<()> {
    heddle_tests::require_root();
    let cgroup = heddle_tests::cgroup2_mount().join(format!("heddle-bench-{}", std::process::id()));
    std::fs::create_dir(&cgroup)?;
    let result = measure(iterations, &cgroup);
    let _ = std::fs::remove_dir(&cgroup);
    result
}

fn measure(iterations: usize, cgroup: &Path) -> anyhow::Result<()> {
    let bwrap = Path::new("/usr/bin/bwrap").exists().then_some("/usr/bin/bwrap");
    let mut child = Command::new(std::env::current_exe()?)
        .arg("sandbox-child")
        .arg(cgroup)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut to_child = child.stdin.take().expect("stdin");
    let mut from_child = BufReader::new(child.stdout.take().expect("stdout"));
    let mut sandboxed = |n: usize, mode: &str| -> anyhow::Result<Vec<f64>> {
        writeln!(to_child, "{n} {mode}")?;
        let mut line = String::new();
        from_child.read_line(&mut line)?;
        Ok(line.split_whitespace().map(|t| t.parse().unwrap_or(f64::NAN)).collect())
    };
    let bare = || bash_true(Command::new("bash").args(["--noprofile", "--norc", "-c", "true"]));
    let bw = |b: &str| {
        bash_true(Command::new(b).args(["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]).args([
            "bash",
            "--noprofile",
            "--norc",
            "-c",
            "true",
        ]))
    };
    sandboxed(20, "")?;
    let (mut s_bare, mut s_launch, mut s_sandbox, mut s_bwrap) = (vec![], vec![], vec![], vec![]);
    let (mut s_launch_fork, mut s_sandbox_fork, mut s_sandbox_nojob) = (vec![], vec![], vec![]);
    let mut done = 0;
    while done < iterations {
        let n = BATCH.min(iterations - done);
        for _ in 0..n {
            s_bare.push(time_us(bare));
            s_launch.push(time_us(|| launcher_true(None, None, None, false)));
            s_launch_fork.push(time_us(|| launcher_true(None, None, None, true)));
            if let Some(b) = bwrap {
                s_bwrap.push(time_us(|| bw(b)));
            }
        }
        s_sandbox.extend(sandboxed(n, "")?);
        s_sandbox_nojob.extend(sandboxed(n, "nojob")?);
        s_sandbox_fork.extend(sandboxed(n, "fork")?);
        done += n;
    }
    drop(to_child);
    let _ = child.wait();
    print(Summary::of(s_bare), Summary::of(s_launch), Summary::of(s_sandbox), bwrap.map(|_| Summary::of(s_bwrap)));
    let nojob = Summary::of(s_sandbox_nojob);
    println!(
        "{:<58} {:>9.1} {:>9.1} {:>9.1}",
        "  the same without the jobs' own filter (clone3 → ENOSYS)", nojob.p50, nojob.p90, nojob.p99
    );
    let (launch_fork, sandbox_fork) = (Summary::of(s_launch_fork), Summary::of(s_sandbox_fork));
    println!("-- the launcher's fork-style clone, same run (its path before the vfork-style clone3)");
    println!(
        "{:<58} {:>9.1} {:>9.1} {:>9.1}",
        "launcher fork-style, nothing added", launch_fork.p50, launch_fork.p90, launch_fork.p99
    );
    println!(
        "{:<58} {:>9.1} {:>9.1} {:>9.1}",
        "launcher fork-style + Landlock + seccomp + cgroup", sandbox_fork.p50, sandbox_fork.p90, sandbox_fork.p99
    );
    Ok(())
}

fn print(bare: Summary, launch: Summary, sandbox: Summary, bwrap: Option<Summary>) {
    println!("== sandbox cost: spawn+wait of `bash --noprofile --norc -c true` (n = {})", bare.n);
    println!("{:<58} {:>9} {:>9} {:>9} {:>9}", "", "p50 µs", "p90 µs", "p99 µs", "p50 ratio");
    let row = |name: &str, s: Summary| {
        println!("{name:<58} {:>9.1} {:>9.1} {:>9.1} {:>9.3}", s.p50, s.p90, s.p99, s.p50 / bare.p50);
        if s != bare {
            let base = "bare posix_spawn(bash -c true) + wait";
            heddle_bench::record(name, base, bare.p50, s.p50, Some(s.p99 / bare.p99), "µs");
        }
    };
    row("bare posix_spawn + wait (baseline)", bare);
    row("launcher, nothing added", launch);
    row("launcher + Landlock + seccomp (inherited + jobs' own) + cgroup", sandbox);
    match bwrap {
        Some(b) => row("bwrap --ro-bind / / --dev /dev --proc /proc", b),
        None => println!("bwrap: NOT INSTALLED (/usr/bin/bwrap missing; `apt-get install bubblewrap`), not measured"),
    }
    println!(
        "sandbox over bare: {:+.1}% at p50 (target ≤ +5%); over the launcher alone: {:+.1}%",
        (sandbox.p50 / bare.p50 - 1.0) * 100.0,
        (sandbox.p50 / launch.p50 - 1.0) * 100.0
    );
}
