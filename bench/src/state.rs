//! `heddle-bench state`: what carrying shell state costs around one bash spawn.
//!
//! Every variant spawns through the launcher (the jobs' own spawn path), interleaved in one loop; the
//! capture goes to a memfd at fd 4, as in the worker:
//! - `bare`: `bash --noprofile --norc -c true` — the baseline;
//! - `wrapper, empty state`: the worker's state wrapper with nothing to restore, capture to the state pipe;
//! - `wrapper, typical state`: restore + capture of 20 exported variables, 5 functions, 10 aliases;
//! - `restore only`: the same restore (script + environment entries), no capture (where the time goes);
//! - `restore as a script alone`: the same state with everything in the script (no environment-borne
//!   part), no capture;
//! - `env | base64 capture`: the typical restore, then a forking capture (`env`, `declare -f`, `alias`
//!   through `base64`) — the style of capture the builtins replace;
//! - `pre-started shell`: the spare design in isolation (built in `worker::spare`, measured through the
//!   whole stack by `heddle-bench spare`): bash spawned ahead with the
//!   typical state restored, waiting on a pipe for its command; timed from writing the command to its
//!   exit (capture included), the next spare started untimed.
//! - then, without a spawn: the front's parse + apply of the typical capture (`front::jobs::shell_part`'s work at
//!   every job's end), unchanged and with one variable changed.

use anyhow::Result;
use heddle_bench::{report, time_us, Summary};
use launcher::{job_env, process_env, Prepared, Stdio};
use std::ffi::OsStr;
use std::io::{Read, Seek};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Spawn bash with `argv` (fd 4 = a memfd holding the restore script when `state`, as the worker does),
/// wait, read the memfd after the restore.
fn spawn(argv: &[&[u8]], state: Option<&[u8]>, env: &[(String, String)]) -> Vec<u8> {
    let null = std::fs::OpenOptions::new().write(true).open("/dev/null").expect("/dev/null");
    let stdio = Stdio::null_stdin(null.try_clone().expect("dup").into(), null.into()).expect("stdio");
    let args: Vec<&OsStr> = argv.iter().map(|a| OsStr::from_bytes(a)).collect();
    let mut p = Prepared::new(Path::new(launcher::BASH), &args, env, None, stdio).expect("prepare");
    let mut r = None;
    if let Some(restore) = state {
        let fd = worker::state::state_memfd().expect("memfd");
        let from = worker::state::write_restore(&fd, restore).expect("write the restore");
        p = p.with_extra_fd(fd.try_clone().expect("dup"), worker::state::STATE_FD).expect("extra fd");
        r = Some((fd, from));
    }
    let child = launcher::spawn(&p).expect("spawn");
    drop(p);
    let st = child.wait().expect("wait");
    assert_eq!(st.code(), Some(0), "bash failed");
    let mut data = Vec::new();
    if let Some((fd, from)) = r {
        let mut f = std::fs::File::from(fd);
        f.seek(std::io::SeekFrom::Start(from)).expect("seek");
        f.read_to_end(&mut data).expect("read state");
    }
    data
}

/// A spare bash with the typical state restored, waiting for its command on stdin: (child, stdin, memfd).
fn prestart(restore: &[u8], env: &[(String, String)]) -> (launcher::Child, std::fs::File, std::fs::File) {
    let null = std::fs::OpenOptions::new().write(true).open("/dev/null").expect("/dev/null");
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
    let stdio = Stdio { stdin: r, stdout: null.try_clone().expect("dup").into(), stderr: null.into() };
    let argv = worker::state::spare_argv();
    let args: Vec<&OsStr> = argv.iter().map(|a| OsStr::from_bytes(a)).collect();
    let fd = worker::state::state_memfd().expect("memfd");
    worker::state::write_restore(&fd, restore).expect("write the restore");
    let p = Prepared::new(Path::new(launcher::BASH), &args, env, None, stdio)
        .expect("prepare")
        .with_extra_fd(fd.try_clone().expect("dup"), worker::state::STATE_FD)
        .expect("extra fd");
    let child = launcher::spawn(&p).expect("spawn");
    (child, w.into(), fd.into())
}

/// Hand `true` to a spare and wait for it: the time from the command's write to the shell's exit.
/// `scoped`: with the capture scoped as the front scopes `true` (no variable; see `front::shell::scope`).
fn handover(spare: (launcher::Child, std::fs::File, std::fs::File), scoped: bool) -> f64 {
    use std::io::Write;
    let (child, mut stdin, state) = spare;
    let input = worker::state::spare_input("true", scoped.then_some(&[][..]));
    let t = time_us(|| {
        stdin.write_all(&input).expect("write command");
        drop(stdin); // the spare reads its command to end of file
        assert_eq!(child.wait().expect("wait").code(), Some(0), "bash failed");
    });
    assert!(state.metadata().expect("fstat").len() > 0, "the spare captured nothing");
    t
}

/// User + system CPU time of every reaped child so far, in µs.
fn children_cpu_us() -> f64 {
    use nix::sys::resource::{getrusage, UsageWho};
    let u = getrusage(UsageWho::RUSAGE_CHILDREN).expect("getrusage");
    let us = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 * 1e6 + t.tv_usec() as f64;
    us(u.user_time()) + us(u.system_time())
}

const TYPICAL: &str = r#"for i in $(seq 1 20); do export "HEDDLE_BENCH_VAR_$i=value number $i with /usr/local/bin:/opt/x"; done
for i in 1 2 3 4 5; do eval "fn$i() { local x=\$1; if [[ -n \$x ]]; then echo \"\$x\" | tr a-z A-Z; fi; for f in *.txt; do cat \"\$f\"; done; }"; done
for i in $(seq 1 10); do alias "a$i=ls -la --color=never $i"; done"#;

pub fn run(iterations: usize) -> Result<()> {
    let env = job_env(&process_env(), &[]);
    let wrap = worker::state::WRAPPER.as_bytes();
    let captured = spawn(&worker::state::argv(TYPICAL), Some(b""), &env);
    let items = shm_proto::capture::parse(&captured).map_err(|e| anyhow::anyhow!("{e}"))?;
    let all_script = front::shell::record::restore_script(&items);
    let borne = front::shell::record::restore(&items);
    let restore = borne.script;
    let mut state_env = env.clone();
    worker::state::add_state_env(&mut state_env, &borne.env);
    println!(
        "typical state: {} items; restore: script {} bytes + {} environment entries ({} bytes as a script alone); capture {} bytes",
        items.len(),
        restore.len(),
        borne.env.len(),
        all_script.len(),
        captured.len()
    );
    let base64_capture: &[u8] = b"true; { env; declare -f; alias; } | base64 >&4";
    let restore_then_base64 = [all_script.as_slice(), b"\n", base64_capture].concat();
    // What the front sends for `true` (a builtin that changes nothing): the capture scoped to no variable.
    let scoped = worker::state::scoped_restore(&restore, Some(&[])).into_owned();
    // The wrapper variants get their restore in the state memfd, as the worker's jobs do.
    type Variant<'a> = (&'a str, Vec<&'a [u8]>, Option<&'a [u8]>, &'a [(String, String)]);
    let wrapper = vec![&b"bash"[..], b"--noprofile", b"--norc", b"-c", wrap, b"bash", b"true"];
    let variants: Vec<Variant> = vec![
        ("bare bash -c true", vec![b"bash", b"--noprofile", b"--norc", b"-c", b"true"], None, &env),
        ("wrapper, empty state", wrapper.clone(), Some(b""), &env),
        ("wrapper, typical state", wrapper.clone(), Some(&restore), &state_env),
        (
            "wrapper, typical state, capture scoped (the command changes no variable)",
            wrapper.clone(),
            Some(&scoped),
            &state_env,
        ),
        (
            "restore only (typical), no capture",
            vec![b"bash", b"--noprofile", b"--norc", b"-c", &restore],
            None,
            &state_env,
        ),
        (
            "typical restore as a script alone, no capture",
            vec![b"bash", b"--noprofile", b"--norc", b"-c", &all_script],
            None,
            &env,
        ),
        (
            "typical restore + env|base64 capture",
            vec![b"bash", b"--noprofile", b"--norc", b"-c", &restore_then_base64],
            Some(b""),
            &env,
        ),
    ];
    for v in &variants {
        for _ in 0..20 {
            spawn(&v.1, v.2, v.3);
        }
    }
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    let mut cpu = vec![0.0; variants.len()];
    for _ in 0..iterations {
        for (i, v) in variants.iter().enumerate() {
            let before = children_cpu_us();
            samples[i].push(time_us(|| {
                spawn(&v.1, v.2, v.3);
            }));
            cpu[i] += children_cpu_us() - before;
        }
    }
    let cpu: Vec<f64> = cpu.into_iter().map(|c| c / iterations as f64).collect();
    let (mut handovers, mut scoped_handovers) = (Vec::new(), Vec::new());
    let mut spare = prestart(&restore, &state_env);
    for i in 0..2 * iterations {
        std::thread::sleep(std::time::Duration::from_millis(2)); // the spare is ready before its command
        match i % 2 {
            0 => handovers.push(handover(spare, false)),
            _ => scoped_handovers.push(handover(spare, true)),
        }
        spare = prestart(&restore, &state_env);
    }
    handover(spare, false);
    let sums: Vec<Summary> = samples.into_iter().map(Summary::of).collect();
    for (i, v) in variants.iter().enumerate().skip(1) {
        report(&format!("shell state: {}", v.0), variants[0].0, sums[0], v.0, sums[i]);
        println!(
            "incremental p50 cost: {:+.1} µs = {:.1}% of the bare spawn",
            sums[i].p50 - sums[0].p50,
            100.0 * (sums[i].p50 - sums[0].p50) / sums[0].p50
        );
        println!(
            "incremental CPU (bash's user+sys, mean; steadier than wall time on a loaded host): {:+.1} µs = {:.1}% of the bare spawn's {:.0} µs\n",
            cpu[i] - cpu[0],
            100.0 * (cpu[i] - cpu[0]) / cpu[0],
            cpu[0]
        );
    }
    let pre = Summary::of(handovers);
    let label = "pre-started shell, typical: command → exit";
    report(&format!("shell state: {label}"), variants[0].0, sums[0], label, pre);
    let pre = Summary::of(scoped_handovers);
    let label = "pre-started shell, typical, capture scoped: command → exit";
    report(&format!("shell state: {label}"), variants[0].0, sums[0], label, pre);
    println!("(the spare design in isolation: restore and spawn happen before the command arrives; `spare` measures it through the stack)");
    front_side(&captured, iterations, sums[0].p50)?;
    scope_cost(&items, iterations, sums[0].p50);
    Ok(())
}

/// The front's reading of a command before it starts (`front::shell::scope::scope`), for commands an
/// agent runs, against the typical record.
fn scope_cost(items: &shm_proto::capture::Items, iterations: usize, bare_p50: f64) {
    for cmd in [
        "true",
        "cd src && cargo build --release 2>&1 | tail -20",
        "for f in *.rs; do wc -l \"$f\"; done",
        "git status --short | head -n 20; grep -rn 'fn main' --include='*.rs' . | wc -l",
    ] {
        let samples = (0..iterations.max(1) * 10)
            .map(|_| {
                time_us(|| drop(std::hint::black_box(front::shell::scope::scope(std::hint::black_box(cmd), items))))
            })
            .collect();
        let s = Summary::of(samples);
        let figure = format!("front: reading {cmd:?} for its capture scope");
        heddle_bench::record(&figure, "bare bash -c true, spawn + wait", bare_p50, s.p50, None, "µs");
        println!(
            "front: reading {cmd:?} for its capture scope ({:?}): p50 {:.1} µs, p99 {:.1} µs = {:.2}% of the bare spawn",
            front::shell::scope::scope(cmd, items),
            s.p50,
            s.p99,
            100.0 * s.p50 / bare_p50
        );
    }
}

/// The front's share of a call's state cost: parsing the typical capture and applying it as a diff
/// against the version the job started from (what `front::jobs::shell_part` does on every job's end), with
/// an unchanged capture (the common case: the record does not move) and with one variable changed.
fn front_side(captured: &[u8], iterations: usize, bare_p50: f64) -> Result<()> {
    let parse = |c: &[u8]| shm_proto::capture::parse(c).map_err(|e| anyhow::anyhow!("{e}"));
    let mut record = front::shell::record::StateRecord::default();
    let typical = parse(captured)?;
    let changed =
        String::from_utf8_lossy(captured).replacen("HEDDLE_BENCH_VAR_1=\"value", "HEDDLE_BENCH_VAR_1=\"new value", 1);
    anyhow::ensure!(changed.as_bytes() != captured, "the typical capture has no HEDDLE_BENCH_VAR_1");
    let rounds = iterations.max(1) * 10;
    for (label, cap) in [("unchanged capture", captured), ("one variable changed", changed.as_bytes())] {
        let mut samples = Vec::with_capacity(rounds);
        for job in 0..rounds as u64 {
            // Untimed: the record holds the typical state again, so every timed capture is measured
            // against the same record (a changed variable stays a change in every round).
            let (v, base) = record.snapshot();
            record.apply(v, &base, typical.clone(), 2 * job + 1);
            let (v, base) = record.snapshot();
            let mut result = Ok(());
            samples.push(time_us(|| {
                result = parse(std::hint::black_box(cap)).map(|items| {
                    std::hint::black_box(record.apply(v, &base, items, 2 * job + 2));
                });
            }));
            result?;
        }
        let s = Summary::of(samples);
        let figure = format!("front: parse + apply of the typical capture, {label}");
        heddle_bench::record(&figure, "bare bash -c true, spawn + wait", bare_p50, s.p50, None, "µs");
        println!(
            "front: parse + apply of the typical capture ({label}, {} bytes): p50 {:.1} µs, p99 {:.1} µs = {:.2}% of the bare spawn",
            cap.len(),
            s.p50,
            s.p99,
            100.0 * s.p50 / bare_p50
        );
    }
    Ok(())
}
