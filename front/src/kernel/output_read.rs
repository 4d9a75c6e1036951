//! `output {session, job, …}`: every cheap view of a job's stored output, chosen by one selector.
//!
//! - `lines: [a, b]`, `tail: n`, `grep: {pattern, context?, max?}`, `errors: true` — rendered,
//!   redacted, numbered lines (see [`crate::output::views`]); `stream` is `stdout`, `stderr` or `both`
//!   (default); the text is bounded by `max_output_bytes` (default 40000). `format: "text"` (default)
//!   answers them as one `text`, `format: "lines"` as `lines` objects: the text is carried once.
//! - `raw: {offset?, len?, unredacted: true}` — stored bytes of one stream (`stream` `stdout` default
//!   or `stderr`), UNREDACTED, so the flag is required; `len` at most 4 MiB (clamped with a note).
//! - no selector, with `unredacted: true` (and `offset`/`len` at the top level): the raw form of the
//!   first protocol version (its result also says `unredacted: true`). Without the flag, no selector is
//!   `invalid_params`: nothing answers unredacted bytes by default.
//!
//! Raw reads flush the job's buffered output first and read the file outside the session's lock.
//! `encoding` is `utf8` when the bytes are valid UTF-8, else `base64` (standard, padded). `total` is
//! the stream's exact byte count; if storing failed (disk full), `note` says from where bytes are missing.
//!
//! ```text
//! → {"jsonrpc":"2.0","id":6,"method":"output","params":{"session":"demo","job":1,"raw":{"offset":6,"len":5,"unredacted":true}}}
//! ← {"jsonrpc":"2.0","id":6,"result":{"session":"demo","job":1,"stream":"stdout","offset":6,"len":5,
//!    "total":12,"encoding":"utf8","data":"world","complete":true,"note":null,"announcements":[],"unredacted":true}}
//! ```

use crate::kernel::{unknown_job, Client, Kernel};
use crate::output::store::StoreError;
use crate::output::view::{stream_index, DEFAULT_BUDGET, MAX_BUDGET};
use crate::output::views::{self as views, GrepParams, Source, StreamSel};
use crate::rpc::results::{join_notes, OutputResult, OutputViewResult};
use crate::rpc::{self, RpcError};
use crate::sessions::supervisor::error_chain;
use base64::Engine;
use serde::Deserialize;
use serde_json::{json, Value};
use shm_proto::msg::{JobId, Stream};
use std::time::Instant;

/// Default and largest raw `len`.
pub const MAX_READ: u64 = 4 * 1024 * 1024;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawParams {
    #[serde(default)]
    offset: u64,
    #[serde(default)]
    len: Option<u64>,
    #[serde(default)]
    unredacted: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Params {
    session: String,
    job: JobId,
    #[serde(default)]
    stream: Option<StreamSel>,
    #[serde(default)]
    offset: Option<u64>,
    #[serde(default)]
    len: Option<u64>,
    #[serde(default)]
    raw: Option<RawParams>,
    #[serde(default)]
    lines: Option<[u64; 2]>,
    #[serde(default)]
    tail: Option<u64>,
    #[serde(default)]
    grep: Option<GrepParams>,
    #[serde(default)]
    errors: Option<bool>,
    #[serde(default)]
    max_output_bytes: Option<u64>,
    /// How a line view carries its lines: `text` (default, `N: text` in one string) or `lines` (one
    /// object per line). Never both: a reply carries its text once.
    #[serde(default)]
    format: Format,
    /// The one way to unredacted bytes (also accepted inside `raw`): `output` with no view and this flag
    /// reads raw bytes; without it, no view is an error, never raw bytes by default.
    #[serde(default)]
    unredacted: bool,
    /// False for an onlooker (a person's `heddle output`): the call takes no announcements, which stay
    /// for the session's next call.
    #[serde(default = "crate::rpc::yes")]
    announce: bool,
}

#[derive(Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Format {
    #[default]
    Text,
    Lines,
}

enum Selector {
    Raw { offset: u64, len: Option<u64> },
    Lines(u64, u64),
    Tail(u64),
    Grep(GrepParams),
    Errors,
}

fn selector(p: &mut Params) -> Result<Selector, RpcError> {
    let bad = |m: &str| RpcError::invalid_params("output", m.to_owned());
    let mut picked = Vec::new();
    if let Some(r) = p.raw.take() {
        if !r.unredacted && !p.unredacted {
            return Err(bad("raw bytes are not redacted; pass raw: {offset, len, unredacted: true} to read them, or use lines/tail/grep/errors for redacted views"));
        }
        picked.push(Selector::Raw { offset: r.offset, len: r.len });
    }
    if let Some([a, b]) = p.lines {
        if a == 0 || b < a {
            return Err(bad("lines must be [first, last] with 1 <= first <= last (lines are numbered from 1)"));
        }
        picked.push(Selector::Lines(a, b));
    }
    if let Some(n) = p.tail {
        picked.push(Selector::Tail(n));
    }
    if let Some(g) = p.grep.take() {
        picked.push(Selector::Grep(g));
    }
    if p.errors == Some(true) {
        picked.push(Selector::Errors);
    }
    let legacy = p.offset.is_some() || p.len.is_some();
    let raw_picked = matches!(picked.first(), Some(Selector::Raw { .. }));
    match (picked.len(), legacy) {
        (0, _) if p.unredacted => Ok(Selector::Raw { offset: p.offset.unwrap_or(0), len: p.len }),
        (0, _) => Err(bad("no view given: output answers redacted views (lines, tail, grep, errors); raw bytes are not redacted and need unredacted: true (with offset/len, or raw: {offset, len})")),
        (1, false) if p.unredacted && !raw_picked => {
            Err(bad("unredacted: true applies to raw bytes only; line views are always redacted"))
        }
        (1, false) => Ok(picked.remove(0)),
        _ => Err(bad("give one view: lines, tail, grep, errors or raw")),
    }
}

pub(crate) fn call(k: &Kernel, client: &Client, params: Value) -> Result<Value, RpcError> {
    let mut p: Params = rpc::params("output", params)?;
    let sel = selector(&mut p)?;
    let encode = |v: Result<Value, serde_json::Error>| v.map_err(|e| RpcError::internal(e.to_string()));
    match sel {
        Selector::Raw { offset, len } => encode(serde_json::to_value(raw(k, client, &p, offset, len)?)),
        other => encode(serde_json::to_value(line_view(k, client, &p, other, p.announce)?)),
    }
}

/// The last `n` lines of a job's model view for an onlooker (the cockpit page): it takes no
/// announcements, so the session's next call still carries them.
pub(crate) fn look_tail(
    k: &Kernel,
    client: &Client,
    session: &str,
    job: u64,
    n: u64,
) -> Result<OutputViewResult, RpcError> {
    let p: Params = rpc::params("output", serde_json::json!({"session": session, "job": job, "tail": n}))?;
    line_view(k, client, &p, Selector::Tail(n), false)
}

fn raw(k: &Kernel, client: &Client, p: &Params, offset: u64, len: Option<u64>) -> Result<OutputResult, RpcError> {
    let (stream, name) = match p.stream.unwrap_or(StreamSel::Stdout) {
        StreamSel::Stdout => (Stream::Stdout, "stdout"),
        StreamSel::Stderr => (Stream::Stderr, "stderr"),
        StreamSel::Both => {
            return Err(RpcError::invalid_params(
                "output",
                "raw bytes are read one stream at a time: stream stdout or stderr".to_owned(),
            ))
        }
    };
    let mut notes = vec!["raw bytes are unredacted: do not paste them into a model's context".to_owned()];
    let len = match len {
        Some(l) if l > MAX_READ => {
            notes.push(format!("len {l} exceeds the maximum {MAX_READ}; read {MAX_READ} bytes at most"));
            MAX_READ
        }
        l => l.unwrap_or(MAX_READ),
    };
    let s = k.session(client, &p.session)?;
    let (plan, total, complete) = {
        let mut st = s.lock();
        let mut job = st.job_to_read(p.job).ok_or_else(|| unknown_job(&p.session, p.job))?;
        let (plan, stored) = job.plan_read(stream, offset);
        if let (Some(err), true) = (job.store_error(), offset.saturating_add(len) > stored) {
            notes.push(err.to_owned());
        }
        (plan, job.counts()[stream_index(stream)], job.settled())
    };
    let data = plan.read(len as usize).map_err(|e| match e {
        StoreError::Removed { removed, why } => RpcError::invalid_params(
            "output",
            format!(
                "bytes 0–{} of job {}'s {name} ({}) were removed by retention ({why}); offsets from {removed} on are still stored",
                removed - 1,
                p.job,
                crate::output::retention::exact_bytes(removed),
            ),
        ),
        e => RpcError::internal(format!("reading the stored output of job {} failed: {}", p.job, error_chain(&e))),
    })?;
    let n = data.len() as u64;
    let (encoding, data) = match String::from_utf8(data) {
        Ok(text) => ("utf8", text),
        Err(e) => ("base64", base64::engine::general_purpose::STANDARD.encode(e.into_bytes())),
    };
    let announcements = if p.announce { s.lock().take_announcements(Instant::now()) } else { Vec::new() };
    Ok(OutputResult {
        session: p.session.clone(),
        job: p.job,
        stream: name,
        offset,
        len: n,
        total,
        encoding,
        data,
        complete,
        note: join_notes(notes),
        announcements,
        unredacted: true,
    })
}

fn line_view(
    k: &Kernel,
    client: &Client,
    p: &Params,
    sel: Selector,
    announce: bool,
) -> Result<OutputViewResult, RpcError> {
    let stream = p.stream.unwrap_or_default();
    let budget = p.max_output_bytes.map_or(DEFAULT_BUDGET, |b| (b as usize).clamp(1000, MAX_BUDGET));
    let s = k.session(client, &p.session)?;
    let (src, total, open, complete, removed_note, check) = {
        let mut st = s.lock();
        let mut job = st.job_to_read(p.job).ok_or_else(|| unknown_job(&p.session, p.job))?;
        let total = job.rendered().line_count();
        let open = job.rendered().open_lines();
        let from = match &sel {
            Selector::Lines(a, _) => *a,
            Selector::Tail(n) if stream == StreamSel::Both => total.saturating_sub(*n) + 1,
            _ => 1,
        };
        let (plan, pending) = job.rendered_mut().plan(from);
        let (_, gone) = job.removed();
        let why = job.removed_why.clone().unwrap_or_default();
        let removed_note = crate::output::retention::lines_note(gone, from, &why);
        let check = job.check.as_ref().and_then(|c| c.parsed.clone());
        (Source { plan, pending }, total, open, job.settled(), removed_note, check)
    };
    // A running job's last lines stay open (a cursor-up may redraw them) and have no numbers yet: the
    // tail of both streams in text shows them as they are now, after the numbered ones.
    let open_shown = match sel {
        Selector::Tail(n) if stream == StreamSel::Both && p.format == Format::Text => open.len().min(n as usize),
        _ => 0,
    };
    let asked_lines = match sel {
        Selector::Lines(a, b) => Some((a, b)),
        _ => None,
    };
    let mut max_matches = 200;
    let (view, found) = match sel {
        Selector::Lines(a, b) => ("lines", views::lines(&src, a, b, stream, budget)?),
        Selector::Tail(n) => ("tail", tail(&src, n - open_shown as u64, total, stream, budget)?),
        Selector::Grep(g) => {
            let re = views::compile(&g.pattern)?;
            let (ctx, max) = (g.context.unwrap_or(2).min(100) as usize, u64::from(g.max.unwrap_or(100)));
            max_matches = max;
            ("grep", views::search(&src, stream, ctx, max, budget, |r| re.is_match(&r.text))?)
        }
        Selector::Errors => ("errors", views::search(&src, stream, 2, max_matches, budget, views::is_error)?),
        Selector::Raw { .. } => unreachable!("raw is answered by raw()"),
    };
    let mut notes: Vec<String> = removed_note.into_iter().collect();
    if let Some(b) = p.max_output_bytes.filter(|b| *b as usize != budget) {
        notes.push(format!(
            "max_output_bytes {b} is outside what a view takes (1000 to {MAX_BUDGET}); {budget} was used"
        ));
    }
    if let Some((a, b)) = asked_lines {
        if a > total {
            let still = if complete { "" } else { " so far (the job is running)" };
            notes.push(format!("job {} has {total} numbered lines{still}: lines {a}–{b} are past them", p.job));
        }
    }
    // The open lines fit what the budget leaves (the newest first), and only after a tail shown whole.
    let mut room = if found.cut { 0 } else { budget.saturating_sub(views::as_text(&found.lines).len()) };
    let mut open_lines: Vec<String> = Vec::new();
    for l in open[open.len() - open_shown..].iter().rev() {
        let line = format!("open: {}\n", protocol::text::one_line(l, 500));
        if line.len() > room {
            break;
        }
        room -= line.len();
        open_lines.push(line);
    }
    let shown = open_lines.len();
    let open_text: String = open_lines.into_iter().rev().collect();
    match (open.len(), shown) {
        (0, _) => {}
        (n, 0) => notes.push(format!(
            "{n} more lines are still being drawn (the job is running) and get numbers when they are final"
        )),
        (_, n) => notes.push(format!(
            "the last {n} lines (`open:`) are still being drawn (the job is running): shown as they are now, \
             they get numbers when they are final"
        )),
    }
    let next = found.next_line.filter(|_| matches!(view, "lines" | "tail")).map(|n| next_call(p, n));
    if found.cut && matches!(view, "grep" | "errors") {
        notes.push(format!(
            "the view stopped early (at {}) with {} matches in all; raise max, narrow the pattern or read a line range",
            match (found.cut_at_max, view) {
                (true, "grep") => format!("max {max_matches}"),
                (true, _) => format!("its limit of {max_matches} matches"),
                (false, _) => "the byte budget".to_owned(),
            },
            found.matches
        ));
    }
    let announcements = if announce { s.lock().take_announcements(Instant::now()) } else { Vec::new() };
    Ok(OutputViewResult {
        session: p.session.clone(),
        job: p.job,
        view,
        stream: stream.name(),
        // A check's errors view leads with its failures' sections (`kernel::check_run`).
        text: (p.format == Format::Text).then(|| match check.filter(|c| view == "errors" && !c.failures.is_empty()) {
            Some(c) => protocol::checks::summary_block(Some(&c), None) + &views::as_text(&found.lines),
            None => views::as_text(&found.lines) + &open_text,
        }),
        lines: (p.format == Format::Lines).then_some(found.lines),
        total_lines: total,
        matches: matches!(view, "grep" | "errors").then_some(found.matches),
        next,
        complete,
        note: join_notes(notes),
        announcements,
    })
}

/// The last `n` lines of the selected stream.
fn tail(src: &Source, n: u64, total: u64, stream: StreamSel, budget: usize) -> Result<views::Found, RpcError> {
    if stream == StreamSel::Both {
        return views::lines(src, total.saturating_sub(n) + 1, u64::MAX, stream, budget);
    }
    let mut all = views::lines(src, 1, u64::MAX, stream, usize::MAX)?;
    let keep = all.lines.len().saturating_sub(n as usize);
    all.lines.drain(..keep);
    let mut used = 0;
    let cut = all.lines.iter().rposition(|l| {
        used += l.text.len() + 16;
        used > budget
    });
    if let Some(i) = cut {
        all.lines.drain(..=i);
        all.cut = true;
    }
    Ok(all)
}

fn next_call(p: &Params, from: u64) -> Value {
    let last = p.lines.map_or(u64::MAX, |l| l[1]);
    let mut call = json!({"session": p.session, "job": p.job, "stream": p.stream.unwrap_or_default().name(), "lines": [from, last]});
    if p.format == Format::Lines {
        call["format"] = json!("lines");
    }
    call
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{big_byte, Harness};
    use serde_json::json;

    fn read(h: &Harness, params: Value) -> Value {
        h.ok("output", params)
    }

    #[test]
    fn streams_offsets_and_encodings() {
        let h = Harness::new();
        h.open("demo");
        h.run("demo", "echo hello world", 5000);
        h.run("demo", "err oops", 5000);
        let r = read(&h, json!({"session": "demo", "job": 1, "offset": 6, "len": 5, "unredacted": true}));
        assert_eq!(
            (r["data"].as_str(), r["encoding"].as_str(), r["len"].as_u64()),
            (Some("world"), Some("utf8"), Some(5))
        );
        assert_eq!(
            (r["total"].as_u64(), r["complete"].as_bool(), r["stream"].as_str()),
            (Some(12), Some(true), Some("stdout"))
        );
        let r = read(&h, json!({"session": "demo", "job": 2, "stream": "stderr", "unredacted": true}));
        assert_eq!(r["data"], "oops\n");
        let r = read(&h, json!({"session": "demo", "job": 1, "offset": 100, "unredacted": true}));
        assert_eq!((r["data"].as_str(), r["len"].as_u64()), (Some(""), Some(0)));
        let e = h.call("output", json!({"session": "demo", "job": 1, "stream": "stdin"})).unwrap_err();
        assert_eq!(e.kind, crate::rpc::ErrorKind::InvalidParams);
    }

    #[test]
    fn no_view_never_answers_unredacted_bytes_by_default() {
        let h = Harness::new();
        h.open("demo");
        h.run("demo", "echo AKIAIOSFODNN7EXAMPLE", 5000);
        for params in [json!({"session": "demo", "job": 1}), json!({"session": "demo", "job": 1, "offset": 0})] {
            let e = h.call("output", params).unwrap_err();
            assert_eq!(e.kind, crate::rpc::ErrorKind::InvalidParams);
            assert!(e.message.contains("unredacted: true"), "{}", e.message);
        }
        let e = h.call("output", json!({"session": "demo", "job": 1, "tail": 5, "unredacted": true})).unwrap_err();
        assert!(e.message.contains("raw bytes only"), "{}", e.message);
        let r = read(&h, json!({"session": "demo", "job": 1, "tail": 5}));
        assert!(r["text"].as_str().unwrap().contains("[redacted:aws-key]"), "{r}");
        let r = read(&h, json!({"session": "demo", "job": 1, "raw": {"offset": 0}, "unredacted": true}));
        assert_eq!((r["data"].as_str(), r["unredacted"].as_bool()), (Some("AKIAIOSFODNN7EXAMPLE\n"), Some(true)));
    }

    #[test]
    fn non_utf8_bytes_come_back_as_base64() {
        let h = Harness::new();
        h.open("demo");
        h.run("demo", "big 300", 5000);
        let r = read(&h, json!({"session": "demo", "job": 1, "offset": 120, "len": 10, "unredacted": true}));
        assert_eq!(r["encoding"], "base64");
        let bytes = base64::engine::general_purpose::STANDARD.decode(r["data"].as_str().unwrap()).unwrap();
        assert_eq!(bytes, (120..130).map(big_byte).collect::<Vec<_>>());
    }

    #[test]
    fn len_is_clamped_with_a_note() {
        let h = Harness::new();
        h.open("demo");
        h.run("demo", "echo x", 5000);
        let r = read(&h, json!({"session": "demo", "job": 1, "raw": {"len": 1u64 << 40, "unredacted": true}}));
        assert!(r["note"].as_str().unwrap().contains("exceeds the maximum 4194304"));
    }

    #[test]
    fn fifty_mib_round_trip_exactly_through_the_view_and_output() {
        let h = Harness::new();
        h.open("demo");
        let total: u64 = 50 * 1024 * 1024;
        let r = h.run("demo", &format!("big {total}"), 120_000);
        assert_eq!((r["state"].as_str(), r["stdout_bytes"].as_u64()), (Some("exited"), Some(total)));
        assert_eq!(r["view"], "<binary: 50.0 MiB, data>\n", "binary output is named, not printed");
        assert!(r["omitted"].is_null());
        let mut offset = 0u64;
        while offset < total {
            let r = read(&h, json!({"session": "demo", "job": 1, "offset": offset, "unredacted": true}));
            let data = base64::engine::general_purpose::STANDARD.decode(r["data"].as_str().unwrap()).unwrap();
            assert_eq!(data.len() as u64, (total - offset).min(MAX_READ));
            assert!(
                data.iter().enumerate().all(|(i, b)| *b == big_byte(offset + i as u64)),
                "bytes at {offset} differ"
            );
            offset += data.len() as u64;
        }
    }
}
