//! `heddle-bench long`: does a call cost more late in a long session than early in it? `run("true")`
//! through the socket at the session's start and again after N more jobs, each sample interleaved with
//! a bare `bash --noprofile --norc -c true` spawn (the baseline of both), in one session of one stack.
//! The stack runs without pre-started shells (`HEDDLE_SPARES=0`): back to back, a call finds its spare
//! ready or not by chance, and that bimodal noise would hide the effect measured here.

use anyhow::Result;
use heddle_bench::{report, time_us, Summary};
use serde_json::json;

pub fn run(jobs: usize, iterations: usize) -> Result<()> {
    let h = heddle_tests::Heddle::start_with_env(&[], &[("HEDDLE_SPARES", "0")]);
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let mut call = || {
        let r = c.call("run", json!({"session": s, "cmd": "true"})).expect("run");
        assert_eq!(r["exit_code"], 0, "{r}");
    };
    let sample = |call: &mut dyn FnMut()| {
        let (mut bare, mut heddle) = (Vec::new(), Vec::new());
        for _ in 0..iterations {
            bare.push(time_us(crate::bare_bash_true));
            heddle.push(time_us(&mut *call));
        }
        (Summary::of(bare), Summary::of(heddle))
    };
    let (bare_early, early) = sample(&mut call);
    for _ in 0..jobs {
        call();
    }
    let (bare_late, late) = sample(&mut call);
    let title = |at: &str| format!("run(\"true\") {at} of one session vs bare bash spawn+wait");
    report(&title("at the start"), "bare posix_spawn(bash -c true) + wait", bare_early, "jobs 1 on", early);
    let name = format!("jobs {} on", iterations + jobs + 1);
    report(&title(&format!("after {jobs} more jobs")), "bare posix_spawn(bash -c true) + wait", bare_late, &name, late);
    let (r0, r1) = (early.p50 / bare_early.p50, late.p50 / bare_late.p50);
    println!("p50 ratio late / early: {:.3} ({r1:.3} against {r0:.3})", r1 / r0);
    Ok(())
}
