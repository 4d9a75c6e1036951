//! The results of checks (docs/protocol.md, "check"): a test or gate command run as a job, with where it
//! came from (its routing) and what a parser read from the runner's output.
//!
//! Counts are the runner's own: a parser that found nothing leaves `counts` null and says so in
//! `note`, never a guess.
//!
//! ```
//! let c: protocol::checks::CheckReport = serde_json::from_str(
//!     r#"{"name":"unit","command":"cargo test","parser":"libtest","parsed":{"counts":{"passed":3,"failed":1}}}"#).unwrap();
//! assert_eq!(c.parsed.unwrap().counts.unwrap().failed, 1);
//! ```

use serde::{Deserialize, Serialize};

/// Test counts as the runner reported them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CheckCounts {
    pub passed: u64,
    pub failed: u64,
    /// Ignored, skipped, pending or todo tests.
    pub skipped: u64,
    /// Tests or files that could not run (pytest's errors, a Go package that failed to build, a jest
    /// suite that failed to load).
    pub errors: u64,
}

/// One failing (or erroring) test.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CheckFailure {
    /// The test's name as the runner prints it (`tests::adds`, `tests/test_x.py::test_a`).
    pub name: String,
    /// `failed` or `error`.
    pub kind: String,
    /// The first lines of its failure: assertion, panic message, file:line (at most 8, each cut at 240
    /// characters).
    pub lines: Vec<String>,
}

/// What a parser read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CheckParsed {
    /// Where the counts came from: `libtest json`, `libtest text`, `nextest text`, `pytest text`,
    /// `go test -json`, `jest json`, `vitest text`, …
    pub source: String,
    /// `null` when the parser found no counts.
    pub counts: Option<CheckCounts>,
    /// The failing tests, in the runner's order (at most 50; the rest counted in `failures_more`).
    pub failures: Vec<CheckFailure>,
    pub failures_more: u64,
    /// The runner's final summary line, as it printed it.
    pub summary_line: Option<String>,
    /// True when the runner never printed its final summary (killed, crashed): the counts are those of
    /// the tests whose end it reported.
    pub incomplete: bool,
}

/// The check part of a job result: the routing and what was parsed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CheckReport {
    pub name: String,
    /// The exact command the job ran.
    pub command: String,
    /// The parser chosen (`libtest`, `nextest`, `pytest`, `go`, `jest`, `vitest`, `none`).
    pub parser: String,
    /// Where the check came from: `.heddle/checks.toml line 3`, or what detection saw (`Cargo.toml
    /// with [workspace]; cargo-nextest installed`).
    pub origin: String,
    /// The project the check belongs to: the nearest directory from the session's carried cwd up that
    /// has `.heddle/checks.toml` or a detected project file, else the session's cwd.
    pub project: String,
    /// `null` while the job runs, and when the parser found nothing (`note` says so).
    pub parsed: Option<CheckParsed>,
    pub note: Option<String>,
}

/// One check as `checks` lists it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CheckEntry {
    pub name: String,
    pub command: String,
    pub cwd: Option<String>,
    pub parser: String,
    pub origin: String,
    pub timeout_ms: Option<u64>,
    /// The last runs, newest first (at most 5).
    pub last_runs: Vec<CheckRun>,
}

/// A past run of a check, from the database.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CheckRun {
    /// The session the run was a job of: runs are recorded per project, across the uid's sessions.
    pub session: String,
    pub job: u64,
    pub at_ms: u64,
    pub state: String,
    pub exit_code: Option<i32>,
    pub duration_ms: f64,
    pub counts: Option<CheckCounts>,
}

/// The result of `checks {session}`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ChecksList {
    pub session: String,
    /// `.heddle/checks.toml` when it was read, else `null`.
    pub file: Option<String>,
    pub checks: Vec<CheckEntry>,
    /// Problems of the checks file, each with file, line and key; the detected checks still work.
    pub errors: Vec<String>,
    /// Why nothing was detected, or what detection looked at.
    pub note: Option<String>,
    pub announcements: Vec<crate::results::Announcement>,
}

/// The routing line of a check: `check unit → cargo nextest run --workspace (parser: nextest)`.
pub fn routing(c: &CheckReport) -> String {
    format!("check {} → {} (parser: {})", c.name, c.command, c.parser)
}

/// `50 passed · 2 failed · 1 skipped · 0 errors`.
pub fn counts_line(c: &CheckCounts) -> String {
    format!("{} passed · {} failed · {} skipped · {} errors", c.passed, c.failed, c.skipped, c.errors)
}

/// The block a check's view leads with: the counts (or why there are none), each failure with its
/// first lines, and the runner's summary line; it ends with a blank line.
///
/// ```
/// use protocol::checks::*;
/// let p = CheckParsed { source: "libtest text".into(), counts: Some(CheckCounts { passed: 1, failed: 1, ..Default::default() }),
///     failures: vec![CheckFailure { name: "t::b".into(), kind: "failed".into(), lines: vec!["boom".into()] }], ..Default::default() };
/// assert_eq!(summary_block(Some(&p), None), "1 passed · 1 failed · 0 skipped · 0 errors (libtest text)\nFAILED t::b\n  boom\n\n");
/// ```
pub fn summary_block(parsed: Option<&CheckParsed>, note: Option<&str>) -> String {
    let mut out = String::new();
    let Some(p) = parsed else {
        if let Some(n) = note {
            out.push_str(n);
            out.push_str("\n\n");
        }
        return out;
    };
    match &p.counts {
        Some(c) => out.push_str(&format!("{} ({})", counts_line(c), p.source)),
        None => out.push_str(&format!("no test counts ({})", p.source)),
    }
    if p.incomplete {
        out.push_str(" · incomplete: the runner never printed its summary; these are the tests it finished");
    }
    out.push('\n');
    for f in &p.failures {
        out.push_str(if f.kind == "error" { "ERROR " } else { "FAILED " });
        out.push_str(&f.name);
        out.push('\n');
        for l in &f.lines {
            out.push_str("  ");
            out.push_str(l);
            out.push('\n');
        }
    }
    if p.failures_more > 0 {
        out.push_str(&format!(
            "… and {} more failing tests (output {{\"errors\": true}} lists them)\n",
            p.failures_more
        ));
    }
    if let Some(s) = &p.summary_line {
        out.push_str(s);
        out.push('\n');
    }
    if let Some(n) = note {
        out.push_str(n);
        out.push('\n');
    }
    out.push('\n');
    out
}
