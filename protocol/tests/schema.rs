//! Schema stability: the result types' field names (as serde writes them) against docs/protocol.md. A
//! field renamed in code without the docs, or in the docs without the code, fails here, naming it. (The
//! params, which the front's types parse, are checked the same way by the front's
//! `kernel::params_schema` tests.)

use protocol::doc_schema::{backticked_names, object_after, section, PROTOCOL_MD};
use protocol::results::*;
use serde::Serialize;
use std::collections::BTreeSet;

/// The keys `value` serializes to.
fn keys(value: impl Serialize) -> BTreeSet<String> {
    match serde_json::to_value(value).unwrap() {
        serde_json::Value::Object(m) => m.keys().cloned().collect(),
        v => panic!("not an object: {v}"),
    }
}

/// The keys of the documented object after `anchor`.
fn documented(anchor: &str) -> BTreeSet<String> {
    object_after(PROTOCOL_MD, anchor).unwrap_or_else(|| panic!("docs/protocol.md has no brace list after {anchor:?}"))
}

/// Fail naming every field one side has and the other lacks.
fn same(what: &str, code: &BTreeSet<String>, docs: &BTreeSet<String>) {
    let undocumented: Vec<_> = code.difference(docs).collect();
    let unknown: Vec<_> = docs.difference(code).collect();
    assert!(
        undocumented.is_empty() && unknown.is_empty(),
        "{what}: fields in the code but not in docs/protocol.md: {undocumented:?}; \
         in docs/protocol.md but not in the code: {unknown:?}"
    );
}

#[test]
fn nested_objects_of_the_job_result_match_the_docs() {
    same("liveness", &keys(Liveness::default()), &documented("- `liveness` (running jobs): "));
    same("survivors[]", &keys(Survivor::default()), &documented("- `survivors`: "));
    same("usage", &keys(Usage::default()), &documented("- `usage` (once the cgroup emptied): "));
    same("omitted", &keys(Omitted::default()), &documented("`omitted` is then "));
    same("announcements[]", &keys(Announcement::default()), &documented("- `announcements`: jobs of this session"));
    same("files[]", &keys(FileResult::default()), &documented("The result lists every file:"));
    same("terminal", &keys(TerminalScreen::default()), &documented("carries `terminal` (`null` for other jobs)"));
}

#[test]
fn jobs_write_and_their_rows_match_the_docs() {
    same("jobs", &keys(JobsResult::default()), &documented("### `jobs {session, limit?, before?, announce?}` →"));
    same("jobs[]", &keys(JobSummary::default()), &documented("`heddle jobs --before 12 [--limit N]`. Each row:"));
    // `receipt` is added to every mutation's result by the receipts layer ("Receipts and idempotency").
    let mut write = keys(WriteResult::default());
    write.insert("receipt".into());
    same("write", &write, &documented("Types into the job:"));
}

#[test]
fn every_job_result_field_is_documented_and_the_example_has_no_other() {
    let code = keys(JobResult::default());
    let docs = section(PROTOCOL_MD, "## The job result").expect("a job result section");
    let example = docs.split("```json").nth(1).and_then(|s| s.split("```").next()).expect("an example");
    let example: serde_json::Value = serde_json::from_str(example).expect("the example is JSON");
    let example = keys(example);
    let unknown: Vec<_> = example.difference(&code).collect();
    assert!(unknown.is_empty(), "the job result example in docs/protocol.md has fields the code lacks: {unknown:?}");
    let named = backticked_names(docs);
    let undocumented: Vec<_> = code.difference(&named).filter(|k| !example.contains(*k)).collect();
    assert!(
        undocumented.is_empty(),
        "job result fields not in docs/protocol.md's job result section: {undocumented:?}"
    );
}

#[test]
fn the_reader_finds_what_it_should() {
    assert_eq!(documented("- `usage` (once the cgroup emptied): ").len(), 4);
    assert!(section(PROTOCOL_MD, "## The job result").is_some_and(|s| !s.contains("\n## ")));
}
