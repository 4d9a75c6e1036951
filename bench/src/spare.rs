//! `heddle-bench spare`: pre-started shells through the whole stack (socket → front → worker → bash →
//! result), at an agent's pace: every call comes after a pause (`--pause-ms`, default 40 ms; an agent
//! thinks for seconds), so the worker has time to start the next spare.
//!
//! Two stacks run side by side, one with spares (the default) and one with `HEDDLE_SPARES=0` (every job
//! cold); each has a session with an empty state and one carrying the typical state (20 exported
//! variables, 5 functions, 10 aliases). All variants, and the baseline, a bare posix_spawn of
//! `bash --noprofile --norc -c true` + wait, are interleaved in one loop, each after the same pause.
//! Each session runs `true` (which the front reads as changing nothing: its capture is scoped, see
//! `front::shell::scope`) and `eval true` (which it cannot read: the full capture).
//! Reported: each variant against the bare spawn, and what carrying the typical state adds to a call
//! (typical − empty, as a share of the bare spawn) with and without spares, for both captures.

use anyhow::Result;
use heddle_bench::{report, time_us, Summary};
use heddle_tests::{Client, Heddle};
use serde_json::{json, Value};
use std::time::Duration;

/// The typical state of issue 3: 20 exported variables, 5 functions, 10 aliases.
pub(crate) fn typical_state() -> String {
    let mut s = String::new();
    for i in 0..20 {
        s.push_str(&format!("export BENCH_VAR_{i}='value {i} with some text /usr/local/lib/x{i}'; "));
    }
    for i in 0..5 {
        s.push_str(&format!("bench_fn_{i}() {{ local a=$1; echo \"fn {i} $a\"; [[ -n $a ]] && return 0; }}; "));
    }
    for i in 0..10 {
        s.push_str(&format!("alias bench_al_{i}='ls -la --color=never {i}'; "));
    }
    s
}

struct Variant {
    name: &'static str,
    cmd: &'static str,
    client: Client,
    session: Value,
    prestarted: usize,
    times: Vec<f64>,
}

impl Variant {
    fn new(name: &'static str, cmd: &'static str, h: &Heddle, setup: &str) -> Variant {
        let mut client = h.client();
        let session = h.open_session(&mut client);
        let r = heddle_tests::run_to_end(&mut client, &session, setup);
        assert_eq!(r["exit_code"], 0, "{r}");
        Variant { name, cmd, client, session, prestarted: 0, times: Vec::new() }
    }

    fn call(&mut self) -> bool {
        let r = self.client.call("run", json!({"session": self.session, "cmd": self.cmd})).expect("run");
        assert_eq!(r["exit_code"], 0, "{r}");
        assert!(r["state_note"].is_null(), "{r}");
        r["prestarted"] == true
    }
}

pub fn run(iterations: usize, pause_ms: u64) -> Result<()> {
    let hot = Heddle::start();
    let cold = Heddle::start_with_env(&[], &[("HEDDLE_SPARES", "0")]);
    let typical = typical_state();
    // `true` changes nothing and the front reads it so: its capture is scoped (front::shell::scope);
    // `eval true` changes nothing either, but the front cannot tell: its capture is full.
    let mut variants = [
        Variant::new("spares, empty state", "true", &hot, "true"),
        Variant::new("spares, typical state", "true", &hot, &typical),
        Variant::new("cold, empty state", "true", &cold, "true"),
        Variant::new("cold, typical state", "true", &cold, &typical),
        Variant::new("spares, empty state, full capture", "eval true", &hot, "true"),
        Variant::new("spares, typical state, full capture", "eval true", &hot, &typical),
        Variant::new("cold, empty state, full capture", "eval true", &cold, "true"),
        Variant::new("cold, typical state, full capture", "eval true", &cold, &typical),
    ];
    let pause = Duration::from_millis(pause_ms);
    let mut bare = Vec::new();
    for i in 0..iterations + 10 {
        std::thread::sleep(pause);
        let t = time_us(crate::bare_bash_true);
        if i >= 10 {
            bare.push(t);
        }
        for v in variants.iter_mut() {
            std::thread::sleep(pause);
            let mut hot = false;
            let t = time_us(|| hot = v.call());
            if i >= 10 {
                v.times.push(t);
                v.prestarted += usize::from(hot);
            }
        }
    }
    let base = Summary::of(bare);
    println!("pause before every call: {pause_ms} ms; bare spawn p50 {:.1} µs", base.p50);
    let mut p50 = Vec::new();
    for v in &variants {
        heddle_bench::note(format!("{}: {} of {iterations} calls ran on a pre-started shell", v.name, v.prestarted));
        let s = Summary::of(v.times.clone());
        p50.push(s.p50);
        report(
            &format!("run({:?}) through the socket, {}", v.cmd, v.name),
            "bare posix_spawn(bash -c true) + wait",
            base,
            v.name,
            s,
        );
    }
    for (label, empty, typical) in [
        ("spares, scoped capture", p50[0], p50[1]),
        ("cold, scoped capture", p50[2], p50[3]),
        ("spares, full capture", p50[4], p50[5]),
        ("cold, full capture", p50[6], p50[7]),
    ] {
        let extra = typical - empty;
        println!(
            "typical state's cost per call, {label}: {extra:+.1} µs p50 = {:+.1}% of the bare spawn",
            100.0 * extra / base.p50
        );
    }
    Ok(())
}
