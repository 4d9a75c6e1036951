//! pytest's text report: the final `=== 3 failed, 200 passed, 1 error in 0.20s ===` line for the counts,
//! the `short test summary info` (`FAILED nodeid - message`, `ERROR nodeid - message`; on by default
//! since pytest 6) for the names, and the `___ title ___` sections of `FAILURES` and `ERRORS` for each
//! one's lines (its `E …` lines and its `file:line: Type` line).
//!
//! With `-q` the final line has no `=` around it (`1 failed, 1 passed in 0.03s`); with `-qq` there is
//! none, and the progress characters are counted.
//!
//! Counts: `passed` and `xpassed` are passed, `failed` failed, `skipped` and `xfailed` skipped, `error`
//! errors. Without a final line the progress characters (`.F E s x X` after the test file's name, or
//! alone with `-q`) are counted, and the result is `incomplete` unless the progress reached `[100%]`
//! (`-qq` prints no final line; a run killed midway never reaches it).

use super::parse::count_before;
use protocol::checks::{CheckCounts, CheckFailure, CheckParsed};

pub fn parse(out: &str, _err: &str) -> Option<CheckParsed> {
    let lines: Vec<&str> = out.lines().map(str::trim_end).collect();
    let summary = lines.iter().rev().find(|l| final_line(l)).copied();
    let finished = lines.iter().any(|l| l.ends_with("[100%]"));
    // `-q` prints no header: a progress line (`..F.  [ 40%]`) says the run started.
    let progress_line = |l: &str| {
        l.rsplit_once(" [").is_some_and(|(marks, pct)| {
            pct.ends_with("%]") && !marks.trim().is_empty() && marks.trim().bytes().all(|b| b".FEsxX".contains(&b))
        })
    };
    let started =
        finished || lines.iter().any(|l| l.contains("test session starts")) || lines.iter().any(|l| progress_line(l));
    let mut failures = short_summary(&lines);
    let sections = sections(&lines);
    for f in &mut failures {
        let title = section_title(&f.name, &f.kind);
        if let Some((_, body)) = sections.iter().find(|(t, _)| *t == title) {
            f.lines = body.iter().filter(|l| l.starts_with("E ") || location(l)).map(|l| tidy(l)).collect();
        }
    }
    let counts = match summary {
        Some(s) => {
            let n = |w| count_before(s, w).unwrap_or(0);
            CheckCounts {
                passed: n("passed") + n("xpassed"),
                failed: n("failed"),
                skipped: n("skipped") + n("xfailed"),
                errors: n("error") + n("errors"),
            }
        }
        None if started => progress(&lines),
        None => return None,
    };
    Some(CheckParsed {
        source: "pytest text".to_owned(),
        counts: Some(counts),
        failures,
        failures_more: 0,
        summary_line: summary.map(|s| s.trim_matches(|c| c == '=' || c == ' ').to_owned()),
        incomplete: summary.is_none() && !finished,
    })
}

/// `==== 3 failed, 200 passed in 0.20s ====` (also `no tests ran in 0.01s`).
/// With `-q`, the same line bare: `1 failed, 1 passed, 3 deselected in 0.03s` (every item `N word`, then
/// ` in ` and a duration), so a test's own output line that mentions `passed` is not taken for it.
fn final_line(l: &str) -> bool {
    if l.starts_with("==") && l.ends_with("==") {
        return l.contains(" in ")
            && (l.contains("passed")
                || l.contains("failed")
                || l.contains("error")
                || l.contains("no tests ran")
                || l.contains("skipped"));
    }
    let Some((items, took)) = l.rsplit_once(" in ") else { return false };
    let took = took.split_once(' ').map_or(took, |(t, _)| t); // `12.05s (0:00:12)`
    let duration = took.strip_suffix('s').is_some_and(|t| !t.is_empty() && t.parse::<f64>().is_ok());
    const WORDS: [&str; 11] = [
        "passed",
        "failed",
        "skipped",
        "error",
        "errors",
        "xfailed",
        "xpassed",
        "deselected",
        "warning",
        "warnings",
        "rerun",
    ];
    let item = |i: &str| i.trim().split_once(' ').is_some_and(|(n, w)| n.parse::<u64>().is_ok() && WORDS.contains(&w));
    duration && (items == "no tests ran" || (!items.is_empty() && items.split(',').all(item)))
}

/// `FAILED nodeid - message` and `ERROR nodeid - message` lines, in order.
fn short_summary(lines: &[&str]) -> Vec<CheckFailure> {
    let mut out = Vec::new();
    let Some(start) = lines.iter().position(|l| l.contains(" short test summary info ")) else { return out };
    for l in &lines[start + 1..] {
        let (kind, rest) = match (l.strip_prefix("FAILED "), l.strip_prefix("ERROR ")) {
            (Some(r), _) => ("failed", r),
            (_, Some(r)) => ("error", r),
            _ if l.starts_with("==") => break,
            _ => continue,
        };
        let name = rest.split_once(" - ").map_or(rest, |(n, _)| n).trim();
        out.push(CheckFailure { name: name.to_owned(), kind: kind.to_owned(), lines: Vec::new() });
    }
    out
}

/// The `___ title ___` sections and their lines.
fn sections<'a>(lines: &[&'a str]) -> Vec<(&'a str, Vec<&'a str>)> {
    let mut out: Vec<(&str, Vec<&str>)> = Vec::new();
    for l in lines {
        if l.starts_with("__") && l.ends_with("__") && l.len() > 4 {
            out.push((l.trim_matches('_').trim(), Vec::new()));
        } else if l.starts_with("==") {
            out.push(("", Vec::new()));
        } else if let Some((_, body)) = out.last_mut() {
            body.push(l);
        }
    }
    out
}

/// The title pytest gives the section of `nodeid`: `TestGroup.test_x` for `f.py::TestGroup::test_x`;
/// `ERROR at setup of test_x` (or teardown) for an error.
fn section_title(nodeid: &str, kind: &str) -> String {
    let mut parts = nodeid.split("::");
    parts.next();
    let title = parts.collect::<Vec<_>>().join(".");
    let title = if title.is_empty() { nodeid.to_owned() } else { title };
    match kind {
        "error" => format!("ERROR at setup of {}", title.rsplit('.').next().unwrap_or(&title)),
        _ => title,
    }
}

/// `tests/test_x.py:12: AssertionError`.
fn location(l: &str) -> bool {
    let mut it = l.splitn(3, ':');
    matches!((it.next(), it.next()), (Some(file), Some(line)) if file.ends_with(".py") && !line.is_empty() && line.bytes().all(|b| b.is_ascii_digit()))
}

fn tidy(l: &str) -> String {
    match l.strip_prefix('E') {
        Some(rest) if l.starts_with("E ") => rest.trim().to_owned(),
        _ => l.to_owned(),
    }
}

/// Counts from the progress characters of a run that never printed its final line.
fn progress(lines: &[&str]) -> CheckCounts {
    let mut c = CheckCounts::default();
    for l in lines {
        let body = l.rsplit_once(" [").filter(|(_, pct)| pct.ends_with("%]")).map_or(*l, |(b, _)| b);
        let marks = match body.split_once(".py ") {
            Some((_, m)) => m.trim(),
            None => body.trim(),
        };
        if marks.is_empty() || !marks.bytes().all(|b| b".FEsxX".contains(&b)) {
            continue;
        }
        for b in marks.bytes() {
            match b {
                b'.' | b'X' => c.passed += 1,
                b'F' => c.failed += 1,
                b'E' => c.errors += 1,
                _ => c.skipped += 1,
            }
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use crate::checks::parse::{parse, Parser};
    use protocol::checks::CheckCounts;

    const OUT: &str = include_str!("fixtures/pytest.stdout");

    #[test]
    fn pytest_text_gives_counts_names_and_lines() {
        let p = parse(Parser::Pytest, OUT.as_bytes(), b"").unwrap();
        assert_eq!(p.counts, Some(CheckCounts { passed: 200, failed: 3, skipped: 0, errors: 1 }));
        let names: Vec<(&str, &str)> = p.failures.iter().map(|f| (f.name.as_str(), f.kind.as_str())).collect();
        assert_eq!(
            names,
            [
                ("tests/test_many.py::test_fail_eq", "failed"),
                ("tests/test_many.py::test_fail_raise", "failed"),
                ("tests/test_many.py::TestGroup::test_fail_in_class", "failed"),
                ("tests/test_many.py::test_error", "error"),
            ]
        );
        assert_eq!(p.failures[0].lines, ["assert (1 + 1) == 3", "tests/test_many.py:608: AssertionError"]);
        assert_eq!(p.failures[2].lines[0], "AssertionError: no a here");
        assert_eq!(p.failures[3].lines, ["RuntimeError: fixture broke", "tests/test_many.py:5: RuntimeError"]);
        assert_eq!(p.summary_line.as_deref(), Some("3 failed, 200 passed, 1 error in 0.20s"));
        assert!(!p.incomplete);
    }

    #[test]
    fn a_run_cut_midway_counts_progress_marks() {
        let cut: String = OUT.lines().take(8).collect::<Vec<_>>().join("\n");
        let p = parse(Parser::Pytest, cut.as_bytes(), b"").unwrap();
        assert!(p.incomplete);
        assert_eq!(p.counts, Some(CheckCounts { passed: 125, failed: 0, skipped: 0, errors: 0 }));
    }

    #[test]
    fn quiet_runs_give_counts_and_names_from_the_bare_final_line_or_the_progress() {
        let q = parse(Parser::Pytest, include_bytes!("fixtures/pytest-q.stdout"), b"").unwrap();
        assert_eq!(q.counts, Some(CheckCounts { passed: 1, failed: 1, skipped: 1, errors: 1 }));
        assert_eq!(q.summary_line.as_deref(), Some("1 failed, 1 passed, 1 skipped, 1 error in 0.05s"));
        let names: Vec<(&str, &str)> = q.failures.iter().map(|f| (f.name.as_str(), f.kind.as_str())).collect();
        assert_eq!(names, [("tests/test_a.py::test_mul", "failed"), ("tests/test_a.py::test_err", "error")]);
        assert_eq!(q.failures[0].lines, ["assert (2 * 4) == 6", "tests/test_a.py:3: AssertionError"]);
        assert!(!q.incomplete);
        // `-qq`: no final line; the progress reached 100 %, so the marks are the whole run.
        let qq = parse(Parser::Pytest, include_bytes!("fixtures/pytest-qq.stdout"), b"").unwrap();
        assert_eq!((qq.counts, qq.incomplete), (q.counts, false));
        assert_eq!(qq.failures.len(), 2);
        let collect = parse(Parser::Pytest, include_bytes!("fixtures/pytest-q-collect.stdout"), b"").unwrap();
        assert_eq!(collect.counts, Some(CheckCounts { passed: 0, failed: 0, skipped: 0, errors: 1 }));
        assert_eq!(collect.failures[0].name, "tests/test_b.py");
        let k = parse(
            Parser::Pytest,
            b".                                   [100%]\n1 passed, 3 deselected in 0.01s\n",
            b"",
        );
        assert_eq!(k.unwrap().counts, Some(CheckCounts { passed: 1, failed: 0, skipped: 0, errors: 0 }));
    }

    #[test]
    fn a_line_that_only_mentions_counts_is_no_final_line() {
        for l in ["it passed in 3 places", "2 passed in the end", "1 passed, then in 0.1s", "3 apples in 0.2s"] {
            assert!(!super::final_line(l), "{l}");
        }
        for l in ["no tests ran in 0.01s", "2 passed, 1 warning in 12.05s (0:00:12)", "=== 1 failed in 0.1s ==="] {
            assert!(super::final_line(l), "{l}");
        }
    }

    #[test]
    fn a_quiet_run_killed_midway_counts_its_marks_and_is_incomplete() {
        let p = parse(Parser::Pytest, b"....F...                                 [ 40%]\n..", b"").unwrap();
        // The marks of the line being written when it was killed count too.
        assert_eq!(p.counts, Some(CheckCounts { passed: 9, failed: 1, skipped: 0, errors: 0 }));
        assert!(p.incomplete);
    }

    #[test]
    fn other_output_is_nothing() {
        assert!(parse(Parser::Pytest, b"collected 0 items\n", b"").is_none());
    }
}
