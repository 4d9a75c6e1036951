//! Reading a test runner's output: which parser, what it is given, and the helpers the parsers share.
//!
//! A parser takes the job's stdout and stderr as stored (untrusted bytes: anything a test prints) and
//! returns a [`CheckParsed`] or `None` when it recognised nothing. Counts come only from what the runner
//! printed: its final summary when there is one, else (a run killed midway) the per-test results it
//! reported, marked `incomplete`. Every parser is total: garbage in, `None` or a partial result out,
//! never a panic (property-tested in each parser's module).
//!
//! ```
//! use front::checks::parse::{parse, Parser};
//! let out = b"running 1 test\ntest t ... ok\n\ntest result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n";
//! let p = parse(Parser::Libtest, out, b"").unwrap();
//! assert_eq!(p.counts.unwrap().passed, 1);
//! assert!(parse(Parser::Pytest, b"nothing to see", b"").is_none());
//! ```

use protocol::checks::{CheckFailure, CheckParsed};

/// The parsers heddle has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parser {
    /// `cargo test` / a libtest binary: its JSON events (`--format json`) when present, else its text.
    Libtest,
    /// `cargo nextest run`: its libtest-JSON events when present, else its text (`PASS`/`FAIL` lines and
    /// `Summary`).
    Nextest,
    /// pytest's text report (the `short test summary info` and the final `=== … ===` line).
    Pytest,
    /// `go test -json` events, else `go test`'s text (`--- FAIL:` and `ok`/`FAIL` package lines).
    Go,
    /// jest's `--json` or vitest's `--reporter=json` object, else jest's or vitest's text summary.
    Jest,
    /// The same parser as [`Parser::Jest`] (vitest's reporters mirror jest's), named for the routing line.
    Vitest,
    /// No parser: the plain job view.
    None,
}

impl Parser {
    pub const ALL: [Parser; 7] =
        [Parser::Libtest, Parser::Nextest, Parser::Pytest, Parser::Go, Parser::Jest, Parser::Vitest, Parser::None];

    pub fn name(self) -> &'static str {
        match self {
            Parser::Libtest => "libtest",
            Parser::Nextest => "nextest",
            Parser::Pytest => "pytest",
            Parser::Go => "go",
            Parser::Jest => "jest",
            Parser::Vitest => "vitest",
            Parser::None => "none",
        }
    }

    pub fn from_name(name: &str) -> Option<Parser> {
        Parser::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// The most failures a result lists (the rest are counted in `failures_more`).
pub const MAX_FAILURES: usize = 50;
/// The most lines kept of one failure.
pub const FAILURE_LINES: usize = 8;
/// The longest line kept, in characters.
pub const LINE_CHARS: usize = 240;

/// Parse a job's output with `parser`; `None` when it found nothing it recognised.
pub fn parse(parser: Parser, stdout: &[u8], stderr: &[u8]) -> Option<CheckParsed> {
    let (out, err) = (String::from_utf8_lossy(stdout), String::from_utf8_lossy(stderr));
    let mut parsed = match parser {
        Parser::Libtest => super::libtest::parse(&out, &err),
        Parser::Nextest => super::nextest::parse(&out, &err),
        Parser::Pytest => super::pytest::parse(&out, &err),
        Parser::Go => super::gotest::parse(&out, &err),
        Parser::Jest | Parser::Vitest => super::jest::parse(&out, &err),
        Parser::None => None,
    }?;
    if parsed.failures.len() > MAX_FAILURES {
        parsed.failures_more += (parsed.failures.len() - MAX_FAILURES) as u64;
        parsed.failures.truncate(MAX_FAILURES);
    }
    for f in &mut parsed.failures {
        f.name = cut(&f.name);
        f.lines = first_lines(f.lines.iter().map(String::as_str));
    }
    parsed.summary_line = parsed.summary_line.map(|l| cut(&l));
    Some(parsed)
}

/// A failure named `name` of kind `failed` with no lines yet.
pub fn failure(name: &str) -> CheckFailure {
    CheckFailure { name: name.to_owned(), kind: "failed".to_owned(), lines: Vec::new() }
}

/// The first [`FAILURE_LINES`] lines worth reading: blank lines, backtrace frames and the runners'
/// hints about how to see more are skipped; each line cut at [`LINE_CHARS`].
pub fn first_lines<'a>(lines: impl Iterator<Item = &'a str>) -> Vec<String> {
    lines
        .map(str::trim_end)
        .filter(|l| !l.trim().is_empty() && !noise(l.trim_start()))
        .take(FAILURE_LINES)
        .map(cut)
        .collect()
}

fn noise(l: &str) -> bool {
    l.starts_with("note: run with `RUST_BACKTRACE")
        || l.starts_with("note: Some details are omitted")
        || l.starts_with("stack backtrace:")
        || (l.starts_with("at ")
            && ["/rustc/", "node_modules", "node:internal", "<anonymous>"].iter().any(|n| l.contains(n)))
        || l.split_once(": ")
            .is_some_and(|(n, rest)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && rest.contains("::"))
}

/// `s` cut at [`LINE_CHARS`] characters, with `…` when cut.
pub fn cut(s: &str) -> String {
    match s.char_indices().nth(LINE_CHARS) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

/// The number in front of `word` in `line` (`"3 failed"` → 3 for `failed`), if any.
pub fn count_before(line: &str, word: &str) -> Option<u64> {
    let mut words =
        line.split(|c: char| c.is_whitespace() || c == ',' || c == ';' || c == '|').filter(|w| !w.is_empty());
    let mut prev: Option<&str> = None;
    for w in words.by_ref() {
        if w.trim_end_matches([',', '.', ';']) == word {
            if let Some(n) = prev.and_then(|p| p.parse::<u64>().ok()) {
                return Some(n);
            }
        }
        prev = Some(w);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn counts_are_read_before_their_word() {
        assert_eq!(count_before("50 passed; 2 failed; 0 ignored", "failed"), Some(2));
        assert_eq!(count_before("3 failed, 200 passed, 1 error in 0.20s", "error"), Some(1));
        assert_eq!(count_before("Tests  2 failed | 30 passed | 1 skipped (33)", "skipped"), Some(1));
        assert_eq!(count_before("failed", "failed"), None);
    }

    #[test]
    fn failure_lines_skip_noise_and_are_cut() {
        let long = "x".repeat(300);
        let lines = ["", "thread 'a' panicked at src/lib.rs:1:1:", "note: run with `RUST_BACKTRACE=1`", &long];
        let got = first_lines(lines.into_iter());
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].chars().count(), LINE_CHARS + 1);
    }

    proptest! {
        #[test]
        fn no_parser_panics_on_garbage(out in proptest::collection::vec(any::<u8>(), 0..2000),
                                       err in proptest::collection::vec(any::<u8>(), 0..500)) {
            for p in Parser::ALL {
                let _ = parse(p, &out, &err);
            }
        }

        #[test]
        fn no_parser_panics_on_runner_shaped_garbage(lines in proptest::collection::vec(prop_oneof![
            Just("test result: FAILED. x passed; 2 failed;".to_owned()),
            Just("test a ... FAILED".to_owned()),
            Just("---- a stdout ----".to_owned()),
            Just("     Summary [   0.1s] 52 tests run: 50 passed, 2 failed".to_owned()),
            Just("        FAIL [   0.005s] ( 1/52) fifty tests::x".to_owned()),
            Just("=== 3 failed, 200 passed, 1 error in 0.20s ===".to_owned()),
            Just("FAILED a.py::b - x".to_owned()),
            Just("____ b ____".to_owned()),
            Just(r#"{"Action":"fail","Test":"T","Package":"p"}"#.to_owned()),
            Just(r#"{"type":"test","event":"failed","name":"a","stdout":7}"#.to_owned()),
            Just(r#"{"numTotalTests":"x","testResults":[{"assertionResults":[{}]}]}"#.to_owned()),
            Just("      Tests  2 failed | 30 passed (33)".to_owned()),
            Just(" FAIL  a.test.js > b".to_owned()),
            "[ -~]{0,60}",
        ], 0..40)) {
            let text = lines.join("\n");
            for p in Parser::ALL {
                let _ = parse(p, text.as_bytes(), text.as_bytes());
            }
        }
    }
}
