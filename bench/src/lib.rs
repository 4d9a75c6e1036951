//! heddle's benchmarks: every figure is a ratio against a baseline measured in the same run, on the same
//! machine, interleaved with it so that drift and noise hit both alike. Nothing here passes or fails.
//!
//! ```
//! let s = heddle_bench::Summary::of(vec![3.0, 1.0, 2.0]);
//! assert_eq!(s.p50, 2.0);
//! ```
#![forbid(unsafe_code)]

use std::sync::Mutex;
use std::time::Instant;

/// One figure of a run, as `heddle-bench all` tabulates it: a subject against its baseline, both
/// measured in the same run.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The subcommand that measured it.
    pub bench: String,
    pub figure: String,
    pub baseline: String,
    /// The baseline's value (p50 unless `unit` says otherwise).
    pub base: f64,
    /// The subject's value, in the same unit.
    pub subject: f64,
    /// subject ÷ baseline at p99, when the figure has a distribution.
    pub ratio_p99: Option<f64>,
    pub unit: &'static str,
}

impl Row {
    /// subject ÷ baseline.
    pub fn ratio(&self) -> f64 {
        self.subject / self.base
    }
}

/// What the current run has measured so far: its rows, its notes, and the subcommand running now.
struct Collected {
    bench: String,
    rows: Vec<Row>,
    notes: Vec<String>,
}

static COLLECTED: Mutex<Collected> =
    Mutex::new(Collected { bench: String::new(), rows: Vec::new(), notes: Vec::new() });

fn collected() -> std::sync::MutexGuard<'static, Collected> {
    COLLECTED.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Name the subcommand whose figures are recorded from now on.
pub fn set_bench(name: &str) {
    collected().bench = name.to_owned();
}

/// Record one figure for the run's table (printing it is the caller's business).
pub fn record(figure: &str, baseline: &str, base: f64, subject: f64, ratio_p99: Option<f64>, unit: &'static str) {
    let mut c = collected();
    let bench = c.bench.clone();
    c.rows.push(Row {
        bench,
        figure: figure.to_owned(),
        baseline: baseline.to_owned(),
        base,
        subject,
        ratio_p99,
        unit,
    });
}

/// Record a fact of the run that is not a ratio (how many calls ran on a pre-started shell, …), and print it.
pub fn note(text: String) {
    println!("{text}");
    let mut c = collected();
    let text = format!("`{}`: {text}", c.bench);
    c.notes.push(text);
}

/// Everything recorded so far, emptied: (rows, notes).
pub fn take() -> (Vec<Row>, Vec<String>) {
    let mut c = collected();
    (std::mem::take(&mut c.rows), std::mem::take(&mut c.notes))
}

/// The rows as a Markdown table (the form `docs/performance.md` keeps).
pub fn markdown(rows: &[Row]) -> String {
    let mut out = String::from(
        "| bench | figure | baseline | baseline | subject | ratio p50 | ratio p99 |\n|---|---|---|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let p99 = r.ratio_p99.map_or_else(|| "–".to_owned(), |x| format!("{x:.3}"));
        out.push_str(&format!(
            "| {} | {} | {} | {} {} | {} {} | **{:.3}** | {p99} |\n",
            r.bench,
            r.figure.replace('|', "\\|"),
            r.baseline.replace('|', "\\|"),
            short(r.base),
            r.unit,
            short(r.subject),
            r.unit,
            r.ratio()
        ));
    }
    out
}

/// A value with as many decimals as its size deserves.
fn short(x: f64) -> String {
    match x.abs() {
        a if a >= 100.0 => format!("{x:.0}"),
        a if a >= 10.0 => format!("{x:.1}"),
        a if a >= 1.0 => format!("{x:.2}"),
        _ => format!("{x:.3}"),
    }
}

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
/// The row is recorded for the run's table under `title`.
pub fn report(title: &str, baseline_name: &str, baseline: Summary, subject_name: &str, subject: Summary) {
    record(title, baseline_name, baseline.p50, subject.p50, Some(subject.p99 / baseline.p99), "µs");
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
    fn a_recorded_row_lands_in_the_table() {
        set_bench("spawn");
        record("a | b", "base", 200.0, 100.0, Some(2.0), "µs");
        let (rows, _) = take();
        let table = markdown(&rows);
        assert!(table.contains("| spawn | a \\| b | base | 200 µs | 100 µs | **0.500** | 2.000 |"), "{table}");
    }

    #[test]
    fn percentiles_use_nearest_rank() {
        let s = Summary::of((1..=100).map(f64::from).collect());
        assert_eq!((s.p50, s.p90, s.p99), (50.0, 90.0, 99.0));
    }
}
