//! The line views of `output`: `lines: [a, b]`, `tail: n`, `grep: {pattern, context, max}` and
//! `errors: true`, each over the job's rendered, redacted, numbered lines (see [`crate::output::rendered`]),
//! optionally restricted to one `stream`. Line numbers are the ones the model view's marker names.
//!
//! Each view plans its read under the session's lock (flushing the line log first) and scans the log
//! outside it, so views work while the job runs and never block the pump for long. A view's text is
//! bounded by `max_output_bytes` (default 40000); when it stops early, `next` says how to continue.
//!
//! ```text
//! → {"jsonrpc":"2.0","id":7,"method":"output","params":{"session":"demo","job":1,"grep":{"pattern":"panic","context":1}}}
//! ← {"jsonrpc":"2.0","id":7,"result":{"session":"demo","job":1,"view":"grep","stream":"both",
//!    "text":"41: compiling\n42: thread 'main' panicked at src/main.rs:3\n43: done\n", "lines":[…], …}}
//! ```

use crate::output::linelog::{LinePlan, Run};
use crate::output::rendered::error_shaped;
pub use crate::rpc::results::ViewLine;
use crate::rpc::RpcError;
use regex::Regex;
use serde::Deserialize;
use std::collections::VecDeque;

/// Which stream's lines a view shows.
#[derive(Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum StreamSel {
    Stdout,
    Stderr,
    #[default]
    Both,
}

impl StreamSel {
    pub fn name(self) -> &'static str {
        match self {
            StreamSel::Stdout => "stdout",
            StreamSel::Stderr => "stderr",
            StreamSel::Both => "both",
        }
    }

    fn admits(self, stream: u8) -> bool {
        matches!((self, stream), (StreamSel::Both, _) | (StreamSel::Stdout, 0) | (StreamSel::Stderr, 1))
    }
}

/// `grep` parameters.
#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct GrepParams {
    pub pattern: String,
    #[serde(default)]
    pub context: Option<u32>,
    #[serde(default)]
    pub max: Option<u32>,
}

/// What a line view found.
#[derive(Debug, Default)]
pub struct Found {
    pub lines: Vec<ViewLine>,
    /// Matches seen in all (grep/errors), even past `max`.
    pub matches: u64,
    /// The view stopped at the byte budget or `max`; `next_line` is where to continue.
    pub cut: bool,
    /// A search stopped at `max` matches (else at the byte budget, when `cut`).
    pub cut_at_max: bool,
    pub next_line: Option<u64>,
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Source").finish_non_exhaustive()
    }
}

/// A prepared view: the log's planned scan plus the run not yet in the log.
pub struct Source {
    pub plan: LinePlan,
    pub pending: Option<Run>,
}

impl Source {
    fn scan(&self, mut f: impl FnMut(&Run) -> bool) -> Result<(), RpcError> {
        let mut go_on = true;
        self.plan
            .scan(|r| {
                go_on = f(&r);
                go_on
            })
            .map_err(|e| RpcError::internal(format!("reading the job's line log failed: {e}")))?;
        if go_on {
            if let Some(p) = &self.pending {
                f(p);
            }
        }
        Ok(())
    }
}

fn view_line(r: &Run, is_match: Option<bool>) -> ViewLine {
    ViewLine {
        line: r.first,
        count: r.count,
        stream: if r.stream == 0 { "stdout" } else { "stderr" },
        text: r.text.clone(),
        is_match,
    }
}

/// Lines `a..=b` of the selected stream.
pub fn lines(src: &Source, a: u64, b: u64, sel: StreamSel, budget: usize) -> Result<Found, RpcError> {
    let mut found = Found::default();
    let mut used = 0;
    src.scan(|r| {
        if r.first > b {
            return false;
        }
        if r.last() < a || !sel.admits(r.stream) {
            return true;
        }
        used += r.text.len() + 16;
        if used > budget && !found.lines.is_empty() {
            found.cut = true;
            found.next_line = Some(r.first);
            return false;
        }
        found.lines.push(view_line(r, None));
        true
    })?;
    Ok(found)
}

/// Runs matching `pred`, with `context` runs around each, at most `max` matches.
pub fn search(
    src: &Source,
    sel: StreamSel,
    context: usize,
    max: u64,
    budget: usize,
    pred: impl Fn(&Run) -> bool,
) -> Result<Found, RpcError> {
    let mut found = Found::default();
    let mut before: VecDeque<Run> = VecDeque::new();
    let (mut after, mut used, mut last_emitted) = (0usize, 0usize, 0u64);
    src.scan(|r| {
        if !sel.admits(r.stream) {
            return true;
        }
        let hit = pred(r);
        if hit {
            found.matches += 1;
        }
        let full = found.matches > max || used > budget;
        if hit && !full {
            for b in before.drain(..) {
                if b.first > last_emitted {
                    used += b.text.len() + 16;
                    found.lines.push(view_line(&b, Some(false)));
                }
            }
            used += r.text.len() + 16;
            found.lines.push(view_line(r, Some(true)));
            last_emitted = r.last();
            after = context;
        } else if after > 0 && !full {
            after -= 1;
            used += r.text.len() + 16;
            found.lines.push(view_line(r, Some(false)));
            last_emitted = r.last();
        } else {
            before.push_back(r.clone());
            if before.len() > context {
                before.pop_front();
            }
        }
        if full && hit && !found.cut {
            found.cut = true;
            found.cut_at_max = found.matches > max && used <= budget;
            found.next_line = Some(r.first);
        }
        true
    })?;
    Ok(found)
}

/// Compile a grep pattern (bounded size), as a client error when it is not a valid regex.
pub fn compile(pattern: &str) -> Result<Regex, RpcError> {
    regex::RegexBuilder::new(pattern)
        .size_limit(1 << 22)
        .build()
        .map_err(|e| RpcError::invalid_params("output", format!("grep.pattern is not a valid regular expression: {e}")))
}

/// The `errors` predicate: stderr lines and error-shaped lines.
pub fn is_error(r: &Run) -> bool {
    r.stream == 1 || error_shaped().is_match(&r.text)
}

/// The view's lines as text: `N: text` (`N–M: text (×k)` for runs, `N–M: <k blank lines>` for runs of
/// blank lines), `--` between separate groups.
pub fn as_text(lines: &[ViewLine]) -> String {
    let mut out = String::new();
    let mut prev_end: Option<u64> = None;
    for l in lines {
        if prev_end.is_some_and(|e| l.line > e + 1) && l.is_match.is_some() {
            out.push_str("--\n");
        }
        let end = l.line + u64::from(l.count) - 1;
        if l.count > 1 && crate::output::rendered::blank(&l.text) {
            out.push_str(&format!("{}–{}: <{} blank lines>\n", l.line, end, l.count));
        } else if l.count > 1 {
            out.push_str(&format!("{}–{}: {} (×{})\n", l.line, end, l.text, l.count));
        } else {
            // grep's marks: `N:` a matching line, `N-` a line of context around one.
            let mark = if l.is_match == Some(false) { '-' } else { ':' };
            out.push_str(&format!("{}{mark} {}\n", l.line, l.text));
        }
        prev_end = Some(end);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::rendered::RenderedOutput;
    use proptest::prelude::*;

    fn source(text: &str, err: &str) -> (tempfile::TempDir, Source) {
        let dir = tempfile::tempdir().unwrap();
        let mut out = RenderedOutput::new(dir.path().join("1.lines"));
        out.push(0, text.as_bytes());
        out.push(1, err.as_bytes());
        out.finish();
        let (plan, pending) = out.plan(1);
        (dir, Source { plan, pending })
    }

    #[test]
    fn a_line_range_is_exact_and_streams_filter() {
        let text: String = (1..=1000).map(|i| format!("l{i}\n")).collect();
        let (_d, src) = source(&text, "oops\n");
        let f = lines(&src, 500, 502, StreamSel::Both, 40_000).unwrap();
        assert_eq!(f.lines.iter().map(|l| l.text.as_str()).collect::<Vec<_>>(), ["l500", "l501", "l502"]);
        let e = lines(&src, 1, 2000, StreamSel::Stderr, 40_000).unwrap();
        assert_eq!((e.lines.len(), e.lines[0].line, e.lines[0].stream), (1, 1001, "stderr"));
    }

    #[test]
    fn grep_gives_numbers_context_and_separators() {
        let (_d, src) = source("a\nb\nmatch 1\nc\nd\ne\nmatch 2\nf\n", "");
        let re = compile("match").unwrap();
        let f = search(&src, StreamSel::Both, 1, 100, 40_000, |r| re.is_match(&r.text)).unwrap();
        assert_eq!(as_text(&f.lines), "2- b\n3: match 1\n4- c\n--\n6- e\n7: match 2\n8- f\n");
        assert_eq!(f.matches, 2);
    }

    #[test]
    fn errors_are_stderr_and_error_shaped_lines() {
        let (_d, src) = source("fine\nerror: bad\nfine\n", "warning: x\n");
        let f = search(&src, StreamSel::Both, 0, 100, 40_000, is_error).unwrap();
        assert_eq!(f.lines.iter().map(|l| l.line).collect::<Vec<_>>(), [2, 4]);
    }

    #[test]
    fn max_cuts_and_says_where_to_go_on() {
        let text: String = (1..=100).map(|i| format!("hit {i}\n")).collect();
        let (_d, src) = source(&text, "");
        let f = search(&src, StreamSel::Both, 0, 10, 40_000, |_| true).unwrap();
        assert_eq!((f.lines.len(), f.matches, f.cut, f.next_line), (10, 100, true, Some(11)));
    }

    proptest! {
        #[test]
        fn garbage_patterns_are_errors_not_panics(p in "\\PC{0,50}") {
            let _ = compile(&p);
        }
    }
}
