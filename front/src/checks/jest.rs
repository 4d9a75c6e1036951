//! jest and vitest: the JSON object of `jest --json` or `vitest run --reporter=json` when stdout has one
//! (found after whatever `npm test` prints before it), else their text summaries.
//!
//! JSON: `numPassedTests`, `numFailedTests`, `numPendingTests` + `numTodoTests` (skipped),
//! `numRuntimeErrorTestSuites` (errors: a test file that failed to load, listed by its path with its
//! message); failing tests by `fullName` with the first lines of their `failureMessages`.
//! Text: vitest's `Tests  2 failed | 30 passed | 1 skipped (33)` and its ` FAIL  file > suite > test`
//! sections; jest's `Tests:       2 failed, 30 passed, 32 total` and its `● suite › test` sections.

use super::parse::{count_before, failure};
use protocol::checks::{CheckCounts, CheckFailure, CheckParsed};
use serde_json::Value;

/// The most line starts tried as the start of the JSON object.
const MAX_TRIES: usize = 16;

pub fn parse(out: &str, err: &str) -> Option<CheckParsed> {
    json(out).or_else(|| vitest_text(out, err)).or_else(|| jest_text(err)).or_else(|| jest_text(out))
}

fn json(out: &str) -> Option<CheckParsed> {
    let starts = std::iter::once(0).chain(out.match_indices("\n{").map(|(i, _)| i + 1));
    let v = starts.filter(|&i| out[i..].starts_with('{')).take(MAX_TRIES).find_map(|i| {
        let mut it = serde_json::Deserializer::from_str(&out[i..]).into_iter::<Value>();
        it.next()?.ok().filter(|v| v.get("numTotalTests").is_some())
    })?;
    let n = |k: &str| v[k].as_u64().unwrap_or(0);
    let counts = CheckCounts {
        passed: n("numPassedTests"),
        failed: n("numFailedTests"),
        skipped: n("numPendingTests") + n("numTodoTests"),
        errors: n("numRuntimeErrorTestSuites"),
    };
    let mut failures = Vec::new();
    for file in v["testResults"].as_array().into_iter().flatten() {
        let asserts = file["assertionResults"].as_array().map(Vec::as_slice).unwrap_or_default();
        for a in asserts.iter().filter(|a| a["status"] == "failed") {
            let mut f = failure(a["fullName"].as_str().or(a["title"].as_str()).unwrap_or("?"));
            f.lines = messages(&a["failureMessages"]);
            failures.push(f);
        }
        if asserts.is_empty() && file["status"] == "failed" {
            let mut f = failure(file["name"].as_str().unwrap_or("?"));
            f.kind = "error".to_owned();
            f.lines = file["message"].as_str().unwrap_or("").lines().map(str::to_owned).collect();
            failures.push(f);
        }
    }
    Some(CheckParsed {
        source: "jest json".to_owned(),
        counts: Some(counts),
        failures,
        failures_more: 0,
        summary_line: None,
        incomplete: false,
    })
}

fn messages(v: &Value) -> Vec<String> {
    let all = v.as_array().into_iter().flatten().filter_map(Value::as_str);
    all.flat_map(str::lines).filter(|l| !l.contains("node_modules")).map(str::to_owned).collect()
}

/// vitest's default reporter.
fn vitest_text(out: &str, err: &str) -> Option<CheckParsed> {
    // The failures' sections go to stderr, the rest to stdout.
    let lines: Vec<&str> = out.lines().chain(err.lines()).map(str::trim_end).collect();
    let summary = lines.iter().find(|l| l.trim_start().starts_with("Tests  ") && l.ends_with(')')).map(|l| l.trim());
    let started = lines.iter().any(|l| l.trim_start().starts_with("RUN  v"));
    let mut failures: Vec<CheckFailure> = Vec::new();
    let mut seen = CheckCounts::default();
    let mut in_failed = false;
    for l in &lines {
        let t = l.trim_start();
        if t.starts_with('⎯') && t.contains("Failed Tests") {
            in_failed = true;
            continue;
        }
        if in_failed {
            if let Some(name) = t.strip_prefix("FAIL  ") {
                failures.push(failure(name.trim()));
            } else if t.starts_with('⎯') {
                in_failed = !t.contains("Unhandled");
            } else if let Some(f) = failures.last_mut() {
                f.lines.push(t.to_owned());
            }
            continue;
        }
        match t.chars().next() {
            Some('✓') => seen.passed += 1,
            Some('×') => seen.failed += 1,
            Some('↓') => seen.skipped += 1,
            _ => {}
        }
    }
    let counts = match summary {
        Some(s) => {
            let n = |w| count_before(s, w).unwrap_or(0);
            CheckCounts { passed: n("passed"), failed: n("failed"), skipped: n("skipped") + n("todo"), errors: 0 }
        }
        None if started => seen,
        None => return None,
    };
    Some(CheckParsed {
        source: "vitest text".to_owned(),
        counts: Some(counts),
        failures,
        failures_more: 0,
        summary_line: summary.map(str::to_owned),
        incomplete: summary.is_none(),
    })
}

/// jest's default reporter (it writes to stderr).
fn jest_text(out: &str) -> Option<CheckParsed> {
    let lines: Vec<&str> = out.lines().map(str::trim_end).collect();
    let summary = lines.iter().find(|l| l.starts_with("Tests:") && l.contains(" total")).copied()?;
    let n = |w| count_before(summary, w).unwrap_or(0);
    let counts = CheckCounts { passed: n("passed"), failed: n("failed"), skipped: n("skipped") + n("todo"), errors: 0 };
    let (mut failures, mut open): (Vec<CheckFailure>, bool) = (Vec::new(), false);
    for l in &lines {
        let t = l.trim_start();
        if let Some(name) = t.strip_prefix("● ").filter(|n| !n.starts_with("Console")) {
            failures.push(failure(name));
            open = true;
        } else if t.starts_with("Test Suites:")
            || t.starts_with("Tests:")
            || t.starts_with("PASS ")
            || t.starts_with("FAIL ")
        {
            open = false;
        } else if let Some(f) = failures.last_mut().filter(|_| open) {
            f.lines.push(t.to_owned());
        }
    }
    Some(CheckParsed {
        source: "jest text".to_owned(),
        counts: Some(counts),
        failures,
        failures_more: 0,
        summary_line: Some(summary.to_owned()),
        incomplete: false,
    })
}

#[cfg(test)]
mod tests {
    use crate::checks::parse::{parse, Parser};
    use protocol::checks::CheckCounts;

    const COUNTS: CheckCounts = CheckCounts { passed: 30, failed: 2, skipped: 1, errors: 0 };

    #[test]
    fn vitest_text_gives_counts_names_and_lines() {
        let out = include_str!("fixtures/vitest.stdout");
        let err = include_str!("fixtures/vitest.stderr");
        let p = parse(Parser::Vitest, out.as_bytes(), err.as_bytes()).unwrap();
        assert_eq!(p.source, "vitest text");
        assert_eq!(p.counts, Some(COUNTS));
        let names: Vec<&str> = p.failures.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["many.test.js > group > fails equal", "many.test.js > throws"]);
        assert_eq!(p.failures[0].lines[0], "AssertionError: expected 2 to be 3 // Object.is equality");
        assert!(p.failures[1].lines.contains(&"❯ many.test.js:36:28".to_owned()), "{:?}", p.failures[1]);
        assert_eq!(p.summary_line.as_deref(), Some("Tests  2 failed | 30 passed | 1 skipped (33)"));
    }

    #[test]
    fn vitest_json_after_npms_header_is_read() {
        let out = include_str!("fixtures/vitest_json.stdout");
        let p = parse(Parser::Jest, out.as_bytes(), b"").unwrap();
        assert_eq!(p.source, "jest json");
        assert_eq!(p.counts, Some(COUNTS));
        let names: Vec<&str> = p.failures.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["group fails equal", "throws"]);
        assert_eq!(p.failures[1].lines, ["Error: kaboom", "    at /tmp/p/js/many.test.js:36:28"]);
    }

    #[test]
    fn jest_text_summary_is_read() {
        let err = "FAIL ./sum.test.js\n  ● math › adds\n\n    expect(received).toBe(expected)\n\n    Expected: 3\n\nTests:       1 failed, 4 passed, 5 total\n";
        let p = parse(Parser::Jest, b"", err.as_bytes()).unwrap();
        assert_eq!(p.counts, Some(CheckCounts { passed: 4, failed: 1, skipped: 0, errors: 0 }));
        assert_eq!(p.failures[0].name, "math › adds");
        assert_eq!(p.failures[0].lines[0], "expect(received).toBe(expected)");
    }
}
