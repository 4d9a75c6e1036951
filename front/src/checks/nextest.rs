//! cargo-nextest: its libtest-JSON events when the output has them (`--message-format libtest-json`),
//! else its text on stderr: one status line per test (`PASS [ 0.005s] ( 1/52) crate tests::x`,
//! `FAIL …`, `SIGSEGV …`, `TIMEOUT …`), the test's captured stdout/stderr after a failing one, and the
//! final `Summary [ 0.157s] 52 tests run: 50 passed, 2 failed, 1 skipped`, after which the failures
//! are listed again (not counted twice). Names are nextest's own: `binary-id test::path`.

use super::parse::{count_before, failure};
use protocol::checks::{CheckCounts, CheckFailure, CheckParsed};

/// Status words of a finished test; anything else is not a result line.
const FAILING: [&str; 7] = ["FAIL", "SIGSEGV", "SIGABRT", "SIGBUS", "SIGKILL", "TIMEOUT", "ABORT"];

pub fn parse(out: &str, err: &str) -> Option<CheckParsed> {
    if let Some(mut p) = super::libtest::json(out) {
        p.source = "nextest libtest-json".to_owned();
        return Some(p);
    }
    text(err).or_else(|| text(out))
}

enum Status {
    Pass,
    Skip,
    Fail,
}

/// A status line: `(status, test name)`.
fn status_line(l: &str) -> Option<(Status, &str)> {
    let t = l.trim_start();
    let (word, rest) = t.split_once(" [")?;
    let word = word.trim();
    let word = word.rsplit(' ').next().unwrap_or(word); // `TRY 2 FAIL`
    let status = match word {
        "PASS" | "LEAK" => Status::Pass,
        "SKIP" => Status::Skip,
        w if FAILING.contains(&w) || w == "LEAK-FAIL" => Status::Fail,
        _ => return None,
    };
    let (_, rest) = rest.split_once(']')?;
    let rest = rest.trim_start();
    let name = match rest.strip_prefix('(') {
        Some(r) => r.split_once(')')?.1.trim(),
        None => rest.trim(),
    };
    (!name.is_empty()).then_some((status, name))
}

fn text(err: &str) -> Option<CheckParsed> {
    let mut seen = CheckCounts::default();
    let mut failures: Vec<CheckFailure> = Vec::new();
    let mut summary: Option<&str> = None;
    let mut started = false;
    let mut block: Option<Vec<String>> = None;
    for line in err.lines() {
        let l = line.trim_end();
        let t = l.trim_start();
        if summary.is_some() {
            continue;
        }
        if t.starts_with("Starting ") && t.contains(" test") {
            started = true;
            continue;
        }
        if t.starts_with("Summary [") {
            take_block(&mut block, &mut failures);
            summary = Some(t);
            continue;
        }
        if let Some((status, name)) = status_line(l) {
            take_block(&mut block, &mut failures);
            match status {
                Status::Pass => seen.passed += 1,
                Status::Skip => seen.skipped += 1,
                Status::Fail => {
                    seen.failed += 1;
                    failures.push(failure(name));
                    block = Some(Vec::new());
                }
            }
            continue;
        }
        if t.starts_with("────") || t.starts_with("Cancelling") || t.starts_with("Canceling") {
            take_block(&mut block, &mut failures);
        }
        if let Some(lines) = &mut block {
            lines.push(l.to_owned());
        }
    }
    take_block(&mut block, &mut failures);
    let counts = match summary {
        Some(s) => {
            let rest = s.split_once("run:").map_or(s, |(_, r)| r);
            let n = |w| count_before(rest, w).unwrap_or(0);
            CheckCounts { passed: n("passed"), failed: n("failed") + n("timed"), skipped: n("skipped"), errors: 0 }
        }
        None if started || seen != CheckCounts::default() => seen,
        None => return None,
    };
    Some(CheckParsed {
        source: "nextest text".to_owned(),
        counts: Some(counts),
        failures,
        failures_more: 0,
        summary_line: summary.map(str::to_owned),
        incomplete: summary.is_none(),
    })
}

/// The captured output after a failing status line: its stderr part (the panic) first, then what else
/// it printed, without libtest's per-test chrome.
fn take_block(block: &mut Option<Vec<String>>, failures: &mut [CheckFailure]) {
    let (Some(lines), Some(f)) = (block.take(), failures.last_mut()) else { return };
    let mut parts: [Vec<String>; 2] = [Vec::new(), Vec::new()];
    let mut at = 0;
    for l in lines {
        let t = l.trim();
        if t.starts_with("stdout ─") || t.starts_with("--- STDOUT:") {
            at = 1;
        } else if t.starts_with("stderr ─") || t.starts_with("--- STDERR:") {
            at = 0;
        } else if !(t.starts_with("running ")
            || t.starts_with("test result:")
            || t == "failures:"
            || t == f.name.rsplit(' ').next().unwrap_or("")
            || (t.starts_with("test ") && t.ends_with(" ... FAILED")))
        {
            parts[at].push(t.to_owned());
        }
    }
    let [stderr, stdout] = parts;
    f.lines = stderr.into_iter().chain(stdout).collect();
}

#[cfg(test)]
mod tests {
    use crate::checks::parse::{parse, Parser};
    use protocol::checks::CheckCounts;

    const ERR: &str = include_str!("fixtures/nextest.stderr");

    #[test]
    fn nextest_text_gives_the_summary_counts_and_failures() {
        let p = parse(Parser::Nextest, b"", ERR.as_bytes()).unwrap();
        assert_eq!(p.source, "nextest text");
        assert_eq!(p.counts, Some(CheckCounts { passed: 50, failed: 2, skipped: 1, errors: 0 }));
        let names: Vec<&str> = p.failures.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["fifty tests::fails_eq", "fifty tests::fails_panic"]);
        let first = &p.failures[0].lines;
        assert!(first[0].starts_with("thread 'tests::fails_eq'"), "{first:?}");
        assert_eq!(first[1..4], ["assertion `left == right` failed: arithmetic is broken", "left: 2", "right: 3"]);
        assert_eq!(p.summary_line.as_deref(), Some("Summary [   0.157s] 52 tests run: 50 passed, 2 failed, 1 skipped"));
        assert!(!p.incomplete);
    }

    #[test]
    fn a_run_cut_midway_counts_status_lines() {
        let cut: String = ERR.lines().take_while(|l| !l.contains("passes_40")).collect::<Vec<_>>().join("\n");
        let p = parse(Parser::Nextest, b"", cut.as_bytes()).unwrap();
        assert!(p.incomplete && p.summary_line.is_none());
        let c = p.counts.unwrap();
        assert!(c.passed > 0 && c.passed < 50, "{c:?}");
    }

    #[test]
    fn the_old_status_format_without_a_counter_is_read() {
        let err = "    Starting 2 tests across 1 binary\n        PASS [   0.003s] c t::a\n        FAIL [   0.004s] c t::b\n--- STDERR:              c t::b ---\nthread 't::b' panicked at src/lib.rs:5:9:\nno\n";
        let p = parse(Parser::Nextest, b"", err.as_bytes()).unwrap();
        assert_eq!(p.counts.unwrap().passed, 1);
        assert_eq!(p.failures[0].name, "c t::b");
        assert_eq!(p.failures[0].lines, ["thread 't::b' panicked at src/lib.rs:5:9:", "no"]);
    }
}
