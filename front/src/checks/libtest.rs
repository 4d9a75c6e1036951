//! libtest, the harness of `cargo test`: its JSON events (`-Z unstable-options --format json`, or
//! nextest's `--message-format libtest-json`) when the output has them, else its text.
//!
//! Text: `test NAME ... ok|FAILED|ignored` per test, a `---- NAME stdout ----` section per failure,
//! and one `test result: …. N passed; N failed; N ignored; …` line per test binary (summed: `cargo
//! test` runs several). Tests reported after the last `test result:` line (a binary killed midway) are
//! counted and the result is `incomplete`. When no test ran because the build failed, the compiler's
//! first error is the one failure (`build`), with no counts.

use super::parse::{count_before, failure};
use protocol::checks::{CheckCounts, CheckFailure, CheckParsed};
use serde_json::Value;

pub fn parse(out: &str, err: &str) -> Option<CheckParsed> {
    json(out).or_else(|| text(out)).or_else(|| build_failure(err))
}

/// libtest's JSON events, one object per line.
pub fn json(out: &str) -> Option<CheckParsed> {
    let mut counts = CheckCounts::default();
    let (mut suites, mut running, mut pending) = (0u32, 0u32, CheckCounts::default());
    let mut failures = Vec::new();
    for line in out.lines().map(str::trim).filter(|l| l.starts_with('{') && l.contains("\"type\"")) {
        let Ok(v) = serde_json::from_str::<Value>(line) else { continue };
        let (kind, event) = (v["type"].as_str().unwrap_or(""), v["event"].as_str().unwrap_or(""));
        match (kind, event) {
            ("suite", "started") => running += 1,
            ("suite", "ok" | "failed") => {
                suites += 1;
                running = running.saturating_sub(1);
                counts.passed += v["passed"].as_u64().unwrap_or(0);
                counts.failed += v["failed"].as_u64().unwrap_or(0);
                counts.skipped += v["ignored"].as_u64().unwrap_or(0);
                pending = CheckCounts::default();
            }
            ("test", "ok") => pending.passed += 1,
            ("test", "ignored") => pending.skipped += 1,
            ("test", "failed" | "timeout") => {
                pending.failed += 1;
                let mut f = failure(v["name"].as_str().unwrap_or("?"));
                let text = v["stdout"].as_str().or(v["message"].as_str()).unwrap_or("");
                f.lines = text.lines().map(str::to_owned).collect();
                failures.push(f);
            }
            _ => {}
        }
    }
    if suites == 0 && pending == CheckCounts::default() && failures.is_empty() {
        return None;
    }
    let incomplete = running > 0 || pending != CheckCounts::default();
    add(&mut counts, pending);
    Some(CheckParsed {
        source: "libtest json".to_owned(),
        counts: Some(counts),
        failures,
        failures_more: 0,
        summary_line: None,
        incomplete,
    })
}

/// libtest's text.
pub fn text(out: &str) -> Option<CheckParsed> {
    let mut counts = CheckCounts::default();
    let (mut results, mut pending, mut running) = (0u32, CheckCounts::default(), false);
    let mut summary: Option<&str> = None;
    let mut failures: Vec<CheckFailure> = Vec::new();
    let mut section: Option<(String, Vec<String>)> = None;
    let mut failed: Vec<&str> = Vec::new();
    for line in out.lines() {
        let l = line.trim_end();
        if let Some(name) = l.strip_prefix("---- ").and_then(|r| r.strip_suffix(" stdout ----")) {
            close(&mut section, &mut failures);
            section = Some((name.to_owned(), Vec::new()));
            continue;
        }
        if l == "failures:" || l.starts_with("test result: ") {
            close(&mut section, &mut failures);
        }
        if let Some((_, lines)) = &mut section {
            lines.push(l.to_owned());
            continue;
        }
        if l.starts_with("running ") && l.ends_with(" tests") || l == "running 1 test" {
            running = true;
        } else if let Some(rest) = l.strip_prefix("test result: ") {
            results += 1;
            running = false;
            pending = CheckCounts::default();
            let n = |w| count_before(rest, w).unwrap_or(0);
            add(
                &mut counts,
                CheckCounts { passed: n("passed"), failed: n("failed"), skipped: n("ignored"), errors: 0 },
            );
            if summary.is_none() || n("passed") + n("failed") + n("ignored") > 0 {
                summary = Some(l);
            }
        } else if let Some((name, outcome)) = l.strip_prefix("test ").and_then(|r| r.rsplit_once(" ... ")) {
            match outcome {
                "ok" => pending.passed += 1,
                "FAILED" => {
                    pending.failed += 1;
                    failed.push(name);
                }
                o if o.starts_with("ignored") => pending.skipped += 1,
                _ => {}
            }
        }
    }
    close(&mut section, &mut failures);
    // In the order of libtest's failure sections (its `failures:` list); any without one after them.
    for name in failed {
        if !failures.iter().any(|f| f.name == name) {
            failures.push(failure(name));
        }
    }
    if results == 0 && pending == CheckCounts::default() && !running {
        return None;
    }
    let incomplete = running || pending != CheckCounts::default();
    add(&mut counts, pending);
    Some(CheckParsed {
        source: "libtest text".to_owned(),
        counts: Some(counts),
        failures,
        failures_more: 0,
        summary_line: summary.map(str::to_owned),
        incomplete,
    })
}

/// A `---- NAME stdout ----` section ended: its lines go to the failure of that name.
fn close(section: &mut Option<(String, Vec<String>)>, failures: &mut Vec<CheckFailure>) {
    let Some((name, lines)) = section.take() else { return };
    failures.push(CheckFailure { lines, ..failure(&name) });
}

/// No test ran: cargo's first compile error, if the build failed.
fn build_failure(err: &str) -> Option<CheckParsed> {
    let summary = err.lines().rev().find(|l| l.starts_with("error: could not compile"))?;
    let first = err.lines().position(|l| l.starts_with("error"))?;
    let lines = err.lines().skip(first).take(12).map(str::to_owned).collect();
    Some(CheckParsed {
        source: "cargo build".to_owned(),
        counts: None,
        failures: vec![CheckFailure { name: "build".to_owned(), kind: "error".to_owned(), lines }],
        failures_more: 0,
        summary_line: Some(summary.to_owned()),
        incomplete: false,
    })
}

pub(crate) fn add(to: &mut CheckCounts, c: CheckCounts) {
    to.passed += c.passed;
    to.failed += c.failed;
    to.skipped += c.skipped;
    to.errors += c.errors;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::parse::{parse as parse_with, Parser};

    const OUT: &str = include_str!("fixtures/cargo_test.stdout");
    const ERR: &str = include_str!("fixtures/cargo_test.stderr");

    fn names(p: &CheckParsed) -> Vec<&str> {
        p.failures.iter().map(|f| f.name.as_str()).collect()
    }

    #[test]
    fn cargo_test_text_gives_the_runners_counts_and_failures() {
        let p = parse_with(Parser::Libtest, OUT.as_bytes(), ERR.as_bytes()).unwrap();
        assert_eq!(p.source, "libtest text");
        assert_eq!(p.counts, Some(CheckCounts { passed: 50, failed: 2, skipped: 1, errors: 0 }));
        // In the order of the failure sections, as libtest printed them.
        assert_eq!(names(&p), ["tests::fails_panic", "tests::fails_eq"]);
        let first = &p.failures[1].lines;
        assert!(
            first[0].starts_with("thread 'tests::fails_eq'") && first[0].ends_with("panicked at src/lib.rs:52:25:")
        );
        assert_eq!(first[1..], ["assertion `left == right` failed: arithmetic is broken", "  left: 2", " right: 3"]);
        assert!(p.failures[0].lines[1].contains("boom at the end"), "{:?}", p.failures[0]);
        assert!(p.summary_line.unwrap().starts_with("test result: FAILED. 50 passed; 2 failed; 1 ignored"));
        assert!(!p.incomplete);
    }

    #[test]
    fn libtest_json_events_give_the_same_counts() {
        let out = include_str!("fixtures/libtest_json.stdout");
        let p = parse_with(Parser::Libtest, out.as_bytes(), b"").unwrap();
        assert_eq!(p.source, "libtest json");
        assert_eq!(p.counts, Some(CheckCounts { passed: 50, failed: 2, skipped: 1, errors: 0 }));
        assert_eq!(names(&p), ["tests::fails_eq", "tests::fails_panic"]);
        assert!(p.failures[0].lines.iter().any(|l| l.contains("arithmetic is broken")));
        assert!(!p.incomplete);
    }

    #[test]
    fn a_run_cut_midway_counts_what_finished() {
        let cut: String =
            OUT.lines().take_while(|l| !l.starts_with("test tests::passes_30")).collect::<Vec<_>>().join("\n");
        let p = parse_with(Parser::Libtest, cut.as_bytes(), b"").unwrap();
        assert!(p.incomplete);
        let c = p.counts.unwrap();
        assert_eq!(c.failed, 2);
        assert!(c.passed > 0 && c.passed < 50, "{c:?}");
        let json = include_str!("fixtures/libtest_json.stdout");
        let cut: String = json.lines().take(40).collect::<Vec<_>>().join("\n");
        let p = parse_with(Parser::Libtest, cut.as_bytes(), b"").unwrap();
        assert!(p.incomplete);
    }

    #[test]
    fn a_failed_build_is_the_one_failure_with_no_counts() {
        let err = "   Compiling x v0.1.0\nerror[E0425]: cannot find value `y` in this scope\n --> src/lib.rs:3:5\n\nerror: could not compile `x` (lib test) due to 1 previous error\n";
        let p = parse_with(Parser::Libtest, b"", err.as_bytes()).unwrap();
        assert_eq!(p.counts, None);
        assert_eq!(p.failures[0].lines[0], "error[E0425]: cannot find value `y` in this scope");
        assert!(p.summary_line.unwrap().starts_with("error: could not compile"));
    }

    #[test]
    fn other_output_is_nothing() {
        assert!(parse_with(Parser::Libtest, b"hello\nworld\n", b"warning: x").is_none());
    }
}
