//! Field names as docs/protocol.md writes them, for the schema-stability tests (`protocol/tests/schema.rs`
//! for the results, the front's `kernel::params_schema` for the params): a field renamed in code without
//! the docs, or in the docs without the code, fails one of them, naming the field.
//!
//! The docs write an object as a brace list in backticks: `` `{session, jobs: [job summary…], announcements}` ``
//! (a name, maybe `?` for optional, maybe `: value`; `a | b` for alternatives), and a method's params as
//! `` `METHOD {…}` `` in a heading.
//!
//! ```
//! let names = protocol::doc_schema::names("a, b?: {c, d}, e | f, <one view>");
//! assert_eq!(names.into_iter().collect::<Vec<_>>(), ["a", "b", "e", "f"]);
//! ```

use std::collections::{BTreeMap, BTreeSet};

/// docs/protocol.md, as this crate was built with it.
pub const PROTOCOL_MD: &str = include_str!("../../docs/protocol.md");

/// The top-level names of a brace list's inside (`a, b?: {c}, d | e`): nested lists are skipped, `<…>`
/// placeholders too.
pub fn names(inside: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for part in split_top(inside, ',') {
        for alt in split_top(part, '|') {
            let alt = alt.trim();
            let end = alt.find([':', '?', ' ', '[', '{']).unwrap_or(alt.len());
            let name = &alt[..end];
            if !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                out.insert(name.to_owned());
            }
        }
    }
    out
}

/// Split at `sep` outside brackets and braces.
fn split_top(s: &str, sep: char) -> Vec<&str> {
    let (mut depth, mut from, mut out) = (0i32, 0, Vec::new());
    for (i, c) in s.char_indices() {
        match c {
            '{' | '[' | '(' => depth += 1,
            '}' | ']' | ')' => depth -= 1,
            c if c == sep && depth == 0 => {
                out.push(&s[from..i]);
                from = i + c.len_utf8();
            }
            _ => {}
        }
    }
    out.push(&s[from..]);
    out
}

/// The inside of the first `{…}` in `span` (matching braces), if any.
fn first_braces(span: &str) -> Option<&str> {
    let start = span.find('{')?;
    let mut depth = 0;
    for (i, c) in span[start..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(&span[start + 1..start + i]);
                }
            }
            _ => {}
        }
    }
    None
}

/// The backticked spans of `text`, in order.
fn spans(text: &str) -> impl Iterator<Item = &str> {
    text.split('`').skip(1).step_by(2)
}

/// The names of the first brace list in backticks after the first occurrence of `anchor` in `doc`.
pub fn object_after(doc: &str, anchor: &str) -> Option<BTreeSet<String>> {
    let at = doc.find(anchor)? + anchor.len();
    spans(&doc[at..]).find_map(first_braces).map(names)
}

/// Each method's params as the headings write them: the union of every `` `METHOD {…}` `` span in a
/// heading line, for the methods in `methods`.
pub fn params_in_headings(doc: &str, methods: &[&str]) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in doc.lines().filter(|l| l.starts_with('#')) {
        for span in spans(line) {
            let Some((method, rest)) = span.split_once(' ') else { continue };
            if !methods.contains(&method) || !rest.starts_with('{') {
                continue;
            }
            if let Some(inside) = first_braces(rest) {
                out.entry(method.to_owned()).or_default().extend(names(inside));
            }
        }
    }
    out
}

/// The text of the section that starts at the heading line containing `heading`, up to the next heading
/// of the same or a higher level.
pub fn section<'a>(doc: &'a str, heading: &str) -> Option<&'a str> {
    let start = doc.lines().find(|l| l.starts_with('#') && l.contains(heading))?;
    let level = start.bytes().take_while(|b| *b == b'#').count();
    let at = doc.find(start)?;
    let body = &doc[at + start.len()..];
    let end = body
        .match_indices('\n')
        .map(|(i, _)| i + 1)
        .find(|&i| {
            let l = &body[i..];
            let n = l.bytes().take_while(|b| *b == b'#').count();
            n > 0 && n <= level && l.as_bytes().get(n) == Some(&b' ')
        })
        .unwrap_or(body.len());
    Some(&body[..end])
}

/// The names a section documents as bullets: the first word of each `` - `NAME…` `` line.
pub fn bullet_names(section: &str) -> BTreeSet<String> {
    section
        .lines()
        .filter_map(|l| l.strip_prefix("- `"))
        .filter_map(|l| spans(&format!("`{l}")).next().map(|s| names(s).into_iter().next()))
        .flatten()
        .collect()
}

/// Every name written in backticks in `text` (`` `name` `` alone, or `` `name: …` ``).
pub fn backticked_names(text: &str) -> BTreeSet<String> {
    spans(text)
        .filter_map(|s| {
            let name = s.split([':', ' ', '.']).next()?;
            (!name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')).then(|| name.to_owned())
        })
        .collect()
}
