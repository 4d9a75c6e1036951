//! `go test`: its `-json` events (test2json: `{"Action","Package","Test","Output"}` per line) when the
//! output has them, else its text (`--- PASS|FAIL|SKIP: Name (0.00s)` and the `ok`/`FAIL` package lines).
//!
//! Every test with an end event counts, subtests included (`TestX/case`), as go's own `-v` report lists
//! them. A package that failed with no failing test (it did not build, or a test binary crashed) is one
//! error, named by the package. The summary line is the last package line (`FAIL\tpkg\t0.003s`). A run
//! with packages that never ended is `incomplete`.

use super::parse::failure;
use protocol::checks::{CheckCounts, CheckFailure, CheckParsed};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};

pub fn parse(out: &str, err: &str) -> Option<CheckParsed> {
    json(out).or_else(|| text(out)).or_else(|| text(err))
}

fn json(out: &str) -> Option<CheckParsed> {
    let mut c = CheckCounts::default();
    let mut output: HashMap<(String, String), Vec<String>> = HashMap::new();
    let mut failures = Vec::new();
    let (mut started, mut ended) = (BTreeSet::new(), BTreeSet::new());
    let (mut failed_tests_in, mut summary, mut any) = (BTreeSet::new(), None, false);
    for line in out.lines().map(str::trim).filter(|l| l.starts_with('{') && l.contains("\"Action\"")) {
        let Ok(v) = serde_json::from_str::<Value>(line) else { continue };
        let (Some(action), Some(pkg)) = (v["Action"].as_str(), v["Package"].as_str()) else { continue };
        any = true;
        let test = v["Test"].as_str().unwrap_or("");
        let key = (pkg.to_owned(), test.to_owned());
        match (action, test) {
            ("start", "") => {
                started.insert(pkg.to_owned());
            }
            ("output", _) => {
                let o = v["Output"].as_str().unwrap_or("").trim_end();
                if test.is_empty() && (o.starts_with("ok ") || o.starts_with("ok\t") || o.starts_with("FAIL\t")) {
                    summary = Some(o.replace('\t', "  "));
                }
                let keep = !o.trim_start().starts_with("=== ") && !o.trim_start().starts_with("--- ");
                if keep {
                    output.entry(key).or_default().push(o.trim().to_owned());
                }
            }
            ("pass", "") | ("skip", "") => {
                started.insert(pkg.to_owned());
                ended.insert(pkg.to_owned());
            }
            ("fail", "") => {
                started.insert(pkg.to_owned());
                ended.insert(pkg.to_owned());
                if !failed_tests_in.contains(pkg) {
                    c.errors += 1;
                    let mut f = failure(pkg);
                    f.kind = "error".to_owned();
                    f.lines = output.remove(&key).unwrap_or_default();
                    failures.push(f);
                }
            }
            ("pass", _) => c.passed += 1,
            ("skip", _) => c.skipped += 1,
            ("fail", _) => {
                c.failed += 1;
                failed_tests_in.insert(pkg.to_owned());
                let mut f = failure(test);
                f.lines = output.remove(&key).unwrap_or_default();
                failures.push(f);
            }
            _ => {}
        }
    }
    if !any {
        return None;
    }
    Some(CheckParsed {
        source: "go test -json".to_owned(),
        counts: Some(c),
        failures,
        failures_more: 0,
        summary_line: summary,
        incomplete: started.iter().any(|p| !ended.contains(p)) || ended.is_empty(),
    })
}

fn text(out: &str) -> Option<CheckParsed> {
    let mut c = CheckCounts::default();
    let mut failures: Vec<CheckFailure> = Vec::new();
    let (mut summary, mut current): (Option<String>, Vec<String>) = (None, Vec::new());
    for line in out.lines().map(str::trim_end) {
        let t = line.trim_start();
        if let Some(rest) = t.strip_prefix("--- ") {
            let Some((word, name)) = rest.split_once(": ") else { continue };
            let name = name.rsplit_once(" (").map_or(name, |(n, _)| n);
            match word {
                "PASS" => c.passed += 1,
                "SKIP" => c.skipped += 1,
                "FAIL" => {
                    c.failed += 1;
                    let mut f = failure(name);
                    f.lines = std::mem::take(&mut current);
                    failures.push(f);
                }
                _ => {}
            }
            current.clear();
        } else if t.starts_with("ok  ") || t.starts_with("ok\t") || t.starts_with("FAIL\t") {
            summary = Some(t.replace('\t', "  "));
            current.clear();
        } else if t.starts_with("=== ") {
            current.clear();
        } else if !t.is_empty() {
            current.push(t.to_owned());
        }
    }
    if c == CheckCounts::default() && summary.is_none() {
        return None;
    }
    let incomplete = summary.is_none();
    Some(CheckParsed {
        source: "go test text".to_owned(),
        counts: Some(c),
        failures,
        failures_more: 0,
        summary_line: summary,
        incomplete,
    })
}

#[cfg(test)]
mod tests {
    use crate::checks::parse::{parse, Parser};
    use protocol::checks::CheckCounts;

    // Written by hand in test2json's format: Go is not installed on the machines this was built on.
    const OUT: &str = include_str!("fixtures/gotest_json.handmade.stdout");

    #[test]
    fn go_test_json_counts_tests_and_a_package_that_did_not_build() {
        let p = parse(Parser::Go, OUT.as_bytes(), b"").unwrap();
        assert_eq!(p.counts, Some(CheckCounts { passed: 1, failed: 1, skipped: 1, errors: 1 }));
        assert_eq!(p.failures[0].name, "TestBroken");
        assert_eq!(p.failures[0].lines, ["many_test.go:12: got 2, want 3"]);
        assert_eq!((p.failures[1].name.as_str(), p.failures[1].kind.as_str()), ("example.com/broken", "error"));
        assert!(p.failures[1].lines.iter().any(|l| l.contains("syntax error")));
        assert_eq!(p.summary_line.as_deref(), Some("FAIL  example.com/broken [build failed]"));
        assert!(!p.incomplete);
    }

    #[test]
    fn go_test_text_is_the_fallback() {
        let out = "=== RUN   TestA\n--- PASS: TestA (0.00s)\n=== RUN   TestB\n    b_test.go:9: nope\n--- FAIL: TestB (0.00s)\nFAIL\nFAIL\texample.com/x\t0.002s\n";
        let p = parse(Parser::Go, out.as_bytes(), b"").unwrap();
        assert_eq!(p.counts, Some(CheckCounts { passed: 1, failed: 1, skipped: 0, errors: 0 }));
        assert_eq!(p.failures[0].lines, ["b_test.go:9: nope"]);
        assert_eq!(p.summary_line.as_deref(), Some("FAIL  example.com/x  0.002s"));
    }

    #[test]
    fn a_run_cut_midway_is_incomplete() {
        let cut: String = OUT.lines().take(9).collect::<Vec<_>>().join("\n");
        let p = parse(Parser::Go, cut.as_bytes(), b"").unwrap();
        assert!(p.incomplete);
        assert_eq!(p.counts.unwrap().passed, 1);
    }
}
