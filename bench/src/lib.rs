//! heddle's benchmarks: every figure is a ratio against a baseline measured in the same run, on the same
//! machine, interleaved with it so that drift and noise hit both alike. Nothing here passes or fails.
//!
//! ```
//! let s = heddle_bench::Summary::of(vec![3.0, 1.0, 2.0]);
//! assert_eq!(s.p50, 2.0);
//! ```
#![forbid(unsafe_code)]

use std::time::Instant;

/// Percentiles of a sample, in the sample's unit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    pub n: usize,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
}

impl Summary {
    /// Summarise a sample (nearest-rank percentiles).
    pub fn of(mut v: Vec<f64>) -> Summary {
        assert!(!v.is_empty(), "empty sample");
        v.sort_by(f64::total_cmp);
        let at = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
        Summary { n: v.len(), p50: at(0.50), p90: at(0.90), p99: at(0.99), p999: at(0.999) }
    }
}

/// Time `f` once, in microseconds.
pub fn time_us(f: impl FnOnce()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_secs_f64() * 1e6
}

/// Print a two-row comparison with the p50/p90/p99 ratios of `subject` over `baseline`.
pub fn report(title: &str, baseline_name: &str, baseline: Summary, subject_name: &str, subject: Summary) {
    println!("== {title} (n = {})", subject.n);
    println!("{:<44} {:>10} {:>10} {:>10}", "", "p50 µs", "p90 µs", "p99 µs");
    for (name, s) in [(baseline_name, baseline), (subject_name, subject)] {
        println!("{name:<44} {:>10.1} {:>10.1} {:>10.1}", s.p50, s.p90, s.p99);
    }
    println!(
        "{:<44} {:>10.3} {:>10.3} {:>10.3}",
        "ratio",
        subject.p50 / baseline.p50,
        subject.p90 / baseline.p90,
        subject.p99 / baseline.p99
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let s = Summary::of((1..=100).map(f64::from).collect());
        assert_eq!((s.p50, s.p90, s.p99), (50.0, 90.0, 99.0));
    }
}
