//! The model view of a job's output (the `view` field of every job result): the rendered lines (see
//! [`crate::output::rendered`]) as head + tail within the call's budget, with one marker line saying exactly
//! which lines and how many bytes were left out and the `output` call that shows them, followed by a
//! short list of the error-shaped lines in the omitted part.
//!
//! Invariants: the view is at most `budget` bytes, the marker and the errors block included (lines are
//! given what is left after the longest marker the output could need and, when it has error-shaped
//! lines, a share for the errors block, which is cut to what is left); the omitted line range and byte
//! count are exact (`bytes` counts rendered text and newlines); a view
//! that omits nothing has no marker.
//!
//! ```
//! use front::output::rendered::RenderedOutput;
//! use front::output::view::render;
//! let dir = tempfile::tempdir().unwrap();
//! let mut out = RenderedOutput::new(dir.path().join("1.lines"));
//! out.push(0, b"hello\n");
//! assert_eq!(render(&out, 40_000, "s", 1).text, "hello\n");
//! ```

use crate::output::rendered::{Placed, RenderedOutput, ViewRuns};
use shm_proto::msg::{JobId, Stream};

/// Default view budget in bytes (about 10k tokens).
pub const DEFAULT_BUDGET: usize = 40_000;
/// Largest budget a call may ask for (the rendered head and tail windows hold more than this).
pub const MAX_BUDGET: usize = 400_000;
/// Smallest budget (a marker and a few lines).
pub const MIN_BUDGET: usize = 1_000;
/// Most bytes set aside for the errors block (a quarter of the budget when that is less), when the
/// output has error-shaped lines.
const ERRORS_ROOM: usize = 1_200;
/// Error lines listed under the marker.
const ERRORS_SHOWN: usize = 10;
/// Lines in an announcement's `last_lines`, and the longest line kept there.
pub const LAST_LINES: usize = 5;
const LAST_LINE_MAX: usize = 512;

/// Index of a stream in per-stream arrays.
pub fn stream_index(s: Stream) -> usize {
    match s {
        Stream::Stdout => 0,
        Stream::Stderr => 1,
    }
}

/// What a view left out: lines `first..=last`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Omission {
    pub first: u64,
    pub last: u64,
    pub bytes: u64,
    /// Error-shaped lines in the omitted part (known ones).
    pub errors: u64,
}

impl Omission {
    pub fn lines(&self) -> u64 {
        self.last + 1 - self.first
    }
}

/// A rendered view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    pub text: String,
    pub omitted: Option<Omission>,
}

/// The `output` call that shows lines `a..=b` of a job.
pub fn lines_call(session: &str, job: JobId, a: u64, b: u64) -> String {
    let session = serde_json::to_string(session).unwrap_or_default();
    format!("output {{\"session\": {session}, \"job\": {job}, \"lines\": [{a}, {b}]}}")
}

/// The `output` call that lists a job's errors.
pub fn errors_call(session: &str, job: JobId) -> String {
    let session = serde_json::to_string(session).unwrap_or_default();
    format!("output {{\"session\": {session}, \"job\": {job}, \"errors\": true}}")
}

/// The marker line for an omission (without newline).
pub fn marker(o: &Omission, session: &str, job: JobId) -> String {
    marker_of(o.lines(), o.bytes, o.first, o.last, session, job)
}

fn marker_of(lines: u64, bytes: u64, first: u64, last: u64, session: &str, job: JobId) -> String {
    format!(
        "[… heddle: {lines} lines, {bytes} bytes omitted (lines {first}–{last}); {} shows them …]",
        lines_call(session, job, first, last)
    )
}

/// Every line of `out` so far (open ones included) and their rendered bytes (`runs` is
/// `out.view_runs()`).
fn totals(out: &RenderedOutput, runs: &ViewRuns) -> (u64, u64) {
    let last = runs.tail().last().copied().or(runs.head.last()).map(|p| (p.run.last(), p.bytes_before + run_bytes(p)));
    let (lines, bytes) = last.unwrap_or_default();
    (lines.max(out.line_count()), bytes.max(out.rendered_bytes()))
}

/// Bytes a view of `out` within `budget` may give to lines: the budget less the longest marker line
/// the output could need (every number in it at most the output's totals) and, when the output has
/// error-shaped lines, the errors block's share.
fn line_room(out: &RenderedOutput, runs: &ViewRuns, budget: usize, session: &str, job: JobId, errors: bool) -> usize {
    let budget = budget.clamp(MIN_BUDGET, MAX_BUDGET);
    let (lines, bytes) = totals(out, runs);
    let marker = marker_of(lines, bytes, lines, lines, session, job).len() + 1;
    let errors = if errors { ERRORS_ROOM.min(budget / 4) } else { 0 };
    budget.saturating_sub(marker + errors)
}

fn run_bytes(p: &Placed) -> u64 {
    (p.run.text.len() as u64 + 1) * u64::from(p.run.count)
}

/// Render the model view of `out` within `budget` bytes.
pub fn render(out: &RenderedOutput, budget: usize, session: &str, job: JobId) -> View {
    let budget = budget.clamp(MIN_BUDGET, MAX_BUDGET);
    // The tail includes the lines still open, folded into runs (`RenderedOutput::view_runs`).
    let runs = out.view_runs();
    let (head, tail) = (&runs.head[..], runs.tail());
    let shown = |p: &Placed| p.display_len() + 1;
    let total: usize = head.iter().map(shown).sum::<usize>() + tail.iter().map(|p| shown(p)).sum::<usize>();
    if !runs.gap && total <= budget {
        let mut text = String::with_capacity(total);
        for line in head.iter().chain(tail.iter().copied()).map(|p| p.display()) {
            text.push_str(&line);
            text.push('\n');
        }
        return View { text, omitted: None };
    }
    let room = line_room(out, &runs, budget, session, job, !out.errors().0.is_empty());
    let (mut used, mut h) = (0, 0);
    while h < head.len() && used + shown(&head[h]) <= room / 2 {
        used += shown(&head[h]);
        h += 1;
    }
    // The tail, from the end, out of the runs after the head's shown part: the head's other runs (an
    // output too large for the budget may still fit the head's memory whole, and its last lines are the
    // ones that matter most), then the tail window. Where runs were dropped between the head and the
    // window, the head's unshown runs stay in the omitted part, so the shown lines join up with the
    // marker's range.
    let tail: Vec<&Placed> = match runs.gap {
        true => tail,
        false => head[h..].iter().chain(tail).collect(),
    };
    let mut t_runs = 0;
    while t_runs < tail.len() && used + shown(tail[tail.len() - 1 - t_runs]) <= room {
        used += shown(tail[tail.len() - 1 - t_runs]);
        t_runs += 1;
    }
    let (removed_lines, removed_bytes) = out.removed();
    let first = head[..h].last().map_or(removed_lines + 1, |p| p.run.last() + 1);
    let start_bytes = head[..h].last().map_or(removed_bytes, |p| p.bytes_before + run_bytes(p));
    let first_tail = (t_runs > 0).then(|| tail[tail.len() - t_runs]);
    // Every line so far, open ones included (they are the tail's last runs).
    let (all_lines, all_bytes) =
        tail.last().map_or((out.line_count(), out.rendered_bytes()), |p| (p.run.last(), p.bytes_before + run_bytes(p)));
    let last = first_tail.map_or(all_lines, |p| p.run.first - 1);
    let end_bytes = first_tail.map_or(all_bytes, |p| p.bytes_before);
    let mut text = String::with_capacity(budget);
    for p in &head[..h] {
        text.push_str(&p.display());
        text.push('\n');
    }
    let tail_bytes = used - text.len();
    let omitted = (last >= first).then(|| {
        let (errors, _) = out.errors();
        let inside: Vec<&&(u64, String)> = errors.iter().filter(|(l, _)| (first..=last).contains(l)).collect();
        let o = Omission { first, last, bytes: end_bytes - start_bytes, errors: inside.len() as u64 };
        text.push_str(&marker(&o, session, job));
        text.push('\n');
        let left = budget.saturating_sub(text.len() + tail_bytes);
        errors_block(&mut text, &inside, session, job, left);
        o
    });
    for p in &tail[tail.len() - t_runs..] {
        text.push_str(&p.display());
        text.push('\n');
    }
    View { text, omitted }
}

/// The lines numbered `from` and after — what a job printed since a mark taken when line `from` was
/// the next to commit and `from_bytes` rendered bytes preceded it (`write`'s `new_output`) — with the
/// lines still open, newest kept within `budget`. What does not fit (or left the memory) is named by a
/// marker line first, with its exact range, bytes and the `output` call that shows it. Empty when
/// nothing came.
pub fn since(out: &RenderedOutput, from: u64, from_bytes: u64, budget: usize, session: &str, job: JobId) -> String {
    let runs = out.view_runs();
    let room = line_room(out, &runs, budget, session, job, false);
    let tail = runs.tail();
    // Runs reaching line `from`, a run that straddles it cut to its lines from `from` on.
    let mut new: Vec<Placed> = Vec::new();
    for p in runs.head.iter().chain(tail) {
        if p.run.last() < from {
            continue;
        }
        let mut p = p.clone();
        if p.run.first < from {
            let skipped = from - p.run.first;
            p.bytes_before += (p.run.text.len() as u64 + 1) * skipped;
            p.run.count -= skipped as u32;
            p.run.first = from;
        }
        new.push(p);
    }
    let (mut used, mut shown) = (0, 0);
    for p in new.iter().rev() {
        let len = p.display_len() + 1;
        if used + len > room {
            break;
        }
        used += len;
        shown += 1;
    }
    let kept = &new[new.len() - shown..];
    let first_kept = kept.first().map(|p| (p.run.first, p.bytes_before));
    let all_end = new.last().map_or(from, |p| p.run.last() + 1);
    let (first_shown, bytes_before_shown) =
        first_kept.unwrap_or((all_end, new.last().map_or(from_bytes, |p| p.bytes_before + run_bytes(p))));
    let mut text = String::with_capacity(used + 256);
    if first_shown > from {
        let o = Omission {
            first: from,
            last: first_shown - 1,
            bytes: bytes_before_shown.saturating_sub(from_bytes),
            errors: 0,
        };
        text.push_str(&marker(&o, session, job));
        text.push('\n');
    }
    for p in kept {
        text.push_str(&p.display());
        text.push('\n');
    }
    text
}

/// The errors block, at most `left` bytes: its header, then as many of the listed lines as fit (the
/// header's call lists them all).
fn errors_block(text: &mut String, inside: &[&&(u64, String)], session: &str, job: JobId, left: usize) {
    if inside.is_empty() {
        return;
    }
    let mut block = String::new();
    let mut push = |line: String| {
        if block.len() + line.len() <= left {
            block.push_str(&line);
            true
        } else {
            false
        }
    };
    let header = format!(
        "[errors in omitted part: {} error-shaped line{}; {} lists {} with context]\n",
        inside.len(),
        if inside.len() == 1 { "" } else { "s" },
        errors_call(session, job),
        if inside.len() == 1 { "it" } else { "them all" }
    );
    if !push(header) {
        return;
    }
    let pick: Vec<&&&(u64, String)> = if inside.len() <= ERRORS_SHOWN {
        inside.iter().collect()
    } else {
        inside.iter().take(ERRORS_SHOWN / 2).chain(inside.iter().skip(inside.len() - ERRORS_SHOWN / 2)).collect()
    };
    for (i, (line, t)) in pick.iter().map(|e| (&e.0, &e.1)).enumerate() {
        if inside.len() > ERRORS_SHOWN && i == ERRORS_SHOWN / 2 && !push("  …\n".to_owned()) {
            break;
        }
        if !push(format!("  line {line}: {t}\n")) {
            break;
        }
    }
    text.push_str(&block);
}

/// Up to the last five lines of the output (each at most 512 bytes, longer ones cut with `…`).
pub fn last_lines(out: &RenderedOutput) -> Vec<String> {
    out.last_lines(LAST_LINES).iter().map(|l| shorten(l)).collect()
}

fn shorten(line: &str) -> String {
    if line.len() <= LAST_LINE_MAX {
        return line.to_owned();
    }
    let mut end = LAST_LINE_MAX;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &line[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rendered(chunks: &[&[u8]]) -> (tempfile::TempDir, RenderedOutput) {
        let dir = tempfile::tempdir().unwrap();
        let mut out = RenderedOutput::new(dir.path().join("1.lines"));
        for c in chunks {
            out.push(0, c);
        }
        out.finish();
        (dir, out)
    }

    #[test]
    fn small_output_is_shown_whole_without_marker() {
        let (_d, out) = rendered(&[b"a\nb\n"]);
        assert_eq!(render(&out, DEFAULT_BUDGET, "s", 1), View { text: "a\nb\n".into(), omitted: None });
    }

    #[test]
    fn large_output_has_head_marker_tail_and_exact_counts() {
        let all: String = (1..=100_000).map(|i| format!("line {i}\n")).collect();
        let (_d, out) = rendered(&[all.as_bytes()]);
        let v = render(&out, DEFAULT_BUDGET, "s", 7);
        let o = v.omitted.clone().unwrap();
        assert!(v.text.len() <= DEFAULT_BUDGET, "{}", v.text.len());
        assert!(v.text.starts_with("line 1\n") && v.text.ends_with("line 100000\n"));
        let (head, rest) = v.text.split_once("[… heddle:").unwrap();
        let tail = rest.split_once('\n').unwrap().1;
        assert_eq!(head.lines().count() as u64 + o.lines() + tail.lines().count() as u64, 100_000);
        assert_eq!(head.len() as u64 + o.bytes + tail.len() as u64, all.len() as u64);
        assert_eq!(head.lines().last().unwrap(), format!("line {}", o.first - 1));
        assert!(v.text.contains(&lines_call("s", 7, o.first, o.last)));
    }

    #[test]
    fn an_output_over_the_budget_that_the_head_holds_whole_still_shows_its_last_lines() {
        // 105 KB: over the default budget, under the head's 256 KiB, so no run reached the tail window.
        let all: String = (1..=3000).map(|i| format!("line {i:08} of some build output\n")).collect();
        let (_d, out) = rendered(&[all.as_bytes()]);
        assert!(out.view_runs().tail().is_empty(), "the head holds every run");
        let v = render(&out, DEFAULT_BUDGET, "s", 7);
        let o = v.omitted.clone().expect("a marker");
        assert!(v.text.ends_with("line 00003000 of some build output\n"), "{}", &v.text[v.text.len() - 200..]);
        let (head, rest) = v.text.split_once("[… heddle:").unwrap();
        let tail = rest.split_once('\n').unwrap().1;
        assert!(head.len() > 1000 && tail.len() > 1000, "both ends are shown: {} and {}", head.len(), tail.len());
        assert_eq!(head.lines().count() as u64 + o.lines() + tail.lines().count() as u64, 3000);
        assert_eq!(head.len() as u64 + o.bytes + tail.len() as u64, all.len() as u64);
        assert_eq!(tail.lines().next().unwrap(), format!("line {:08} of some build output", o.last + 1));
    }

    #[test]
    fn the_minimum_budget_shows_lines_and_the_marker_within_it() {
        let mut all: String = (1..=5000).map(|i| format!("line {i}\n")).collect();
        all.extend((1..=20).map(|i| format!("error: step {i} failed in a long way, {}\n", "x".repeat(200))));
        all.extend((1..=5000).map(|i| format!("more {i}\n")));
        all.push_str("the end\n");
        let (_d, out) = rendered(&[all.as_bytes()]);
        let session = "s".repeat(64);
        let v = render(&out, MIN_BUDGET, &session, u64::MAX);
        let o = v.omitted.clone().expect("a marker");
        assert!(v.text.len() <= MIN_BUDGET, "{} bytes: {}", v.text.len(), v.text);
        assert!(v.text.starts_with("line 1\nline 2\n") && v.text.ends_with("the end\n"), "{}", v.text);
        assert!(v.text.contains(&lines_call(&session, u64::MAX, o.first, o.last)), "{}", v.text);
        assert!(v.text.contains("[errors in omitted part: "), "{}", v.text);
        let v = since(&out, 1, 0, MIN_BUDGET, &session, u64::MAX);
        assert!(v.len() <= MIN_BUDGET && v.ends_with("the end\n") && v.starts_with("[… heddle: "), "{v}");
    }

    #[test]
    fn a_crash_in_the_omitted_middle_is_listed() {
        let mut all: String = (1..=50_000).map(|i| format!("line {i}\n")).collect();
        all.push_str("thread 'main' panicked at 'boom'\n");
        all.extend((1..=50_000).map(|i| format!("more {i}\n")));
        let (_d, out) = rendered(&[all.as_bytes()]);
        let v = render(&out, DEFAULT_BUDGET, "s", 1);
        assert_eq!(v.omitted.unwrap().errors, 1);
        assert!(v.text.contains("  line 50001: thread 'main' panicked at 'boom'\n"), "{}", &v.text[..200]);
    }

    #[test]
    fn since_a_mark_shows_only_later_lines_and_cuts_a_run_that_straddles_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut out = RenderedOutput::new(dir.path().join("1.lines"));
        out.push(0, b"same\nsame\nprompt> ");
        // The prompt being written is after the mark; the two complete lines are before it.
        assert_eq!(out.mark(), (3, 10));
        let (line, bytes) = out.mark();
        assert_eq!(since(&out, line, bytes, DEFAULT_BUDGET, "s", 1), "prompt>\n");
        out.push(0, b"\nsame\nnew\n");
        let (line, bytes) = (2, 5);
        assert_eq!(since(&out, line, bytes, DEFAULT_BUDGET, "s", 1), "same\nprompt>\nsame\nnew\n");
        let many: String = (0..5000).map(|i| format!("{i}\n")).collect();
        out.push(0, many.as_bytes());
        let v = since(&out, 1, 0, 4_000, "s", 1);
        assert!(v.starts_with("[… heddle: ") && v.ends_with("4999\n") && v.len() <= 4_000, "{v}");
        let shown = v.lines().count() - 1;
        assert!(v.contains(&format!("(lines 1–{}); ", 5005 - shown)), "{v}");
    }

    proptest! {
        #[test]
        fn any_output_fits_the_budget_and_accounts_for_every_line(
            lines in proptest::collection::vec((0usize..300, 0u8..3), 0..3000),
            budget in 1_000usize..60_000,
        ) {
            let text: String = lines.iter().enumerate().map(|(i, (len, kind))| match kind {
                0 => format!("{}\n", "x".repeat(*len)),
                1 => "same\n".to_owned(),
                _ => format!("{i}\n"),
            }).collect();
            let (_d, out) = rendered(&[text.as_bytes()]);
            let v = render(&out, budget, "s", 1);
            prop_assert!(v.text.len() <= budget.max(MIN_BUDGET), "{} bytes over {budget}", v.text.len());
            if let Some(o) = v.omitted {
                prop_assert!(o.first >= 1 && o.last <= out.line_count());
                // The last line is shown whenever it fits half the room (the head takes at most the other).
                let runs = out.view_runs();
                let last = runs.tail().last().copied().or(runs.head.last()).map(|p| p.display()).unwrap();
                let shown_last = v.text.ends_with(&format!("{last}\n"));
                let room = line_room(&out, &runs, budget, "s", 1, !out.errors().0.is_empty());
                prop_assert!(last.len() + 1 > room / 2 || shown_last, "the last line is missing");
            }
        }
    }
}
