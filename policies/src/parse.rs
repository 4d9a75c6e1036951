//! Text to [`RawProfile`]: TOML parsing, with every error placed at a file, line, column and key.
//!
//! The `toml` crate reports a byte span; this module turns it into a line and column
//! ([`crate::error::line_column`]) and finds the dotted key path at that span by walking the
//! spanned document tree ([`toml::de::DeTable`]), which the parser builds even for a document that
//! fails (best-effort recovery). Syntax errors, unknown keys and type errors each get their own
//! [`PolicyError`] variant.
//!
//! Invariant: this module never panics on any input; it returns `Ok` or `Err`.
//!
//! ```text
//! [[writable]]
//! pth = "/a"      -> p.toml:2:1: `writable[0].pth`: unknown key; expected one of `path`, ...
//! ```

use std::ops::Range;

use toml::de::{DeTable, DeValue};
use toml::Spanned;

use crate::error::{Location, PolicyError};
use crate::raw::RawProfile;

/// Parse `text` (named `file` in errors) into its raw form.
pub(crate) fn parse_raw(file: &str, text: &str) -> Result<RawProfile, PolicyError> {
    let (tree, errors) = DeTable::parse_recoverable(text);
    if let Some(err) = errors.first() {
        // The recovered tree's spans are unreliable after an error: guess the key from the text.
        let offset = err.span().map_or(0, |s| s.start);
        let at = Box::new(Location::new(file, text, offset, lexical_key(text, offset)));
        return Err(PolicyError::Syntax { at, message: err.message().to_owned() });
    }
    toml::from_str::<RawProfile>(text).map_err(|err| {
        let offset = err.span().map_or(0, |s| s.start);
        let at = Box::new(Location::new(file, text, offset, key_at(&tree, text, err.span())));
        let message = err.message();
        match message.strip_prefix("unknown field ") {
            Some(rest) => PolicyError::UnknownKey { at, expected: expected_keys(rest) },
            None => PolicyError::Type { at, message: message.to_owned() },
        }
    })
}

/// Turn serde's "`foo`, expected one of `a`, `b`" tail into "expected one of `a`, `b`".
fn expected_keys(rest: &str) -> String {
    match rest.split_once(", ") {
        Some((_, expected)) if expected.starts_with("expected") => expected.to_owned(),
        Some((_, "there are no fields")) => "this table takes no keys".to_owned(),
        _ => "see the keys this table takes".to_owned(),
    }
}

/// The dotted key path at `span` in `tree`, or a guess from the text when the tree has no entry
/// there, or "" at the top level.
fn key_at(tree: &Spanned<DeTable<'_>>, text: &str, span: Option<Range<usize>>) -> String {
    let Some(span) = span else { return String::new() };
    let mut best: Option<(usize, String)> = None;
    walk_table(tree.get_ref(), span.start, "", 0, &mut best);
    match best {
        Some((_, path)) => path,
        None => lexical_key(text, span.start),
    }
}

/// A best guess at the key at `offset` from the text alone: the last complete `[table]` or
/// `[[array]]` header before the offset's line, then the bare key before `=` on that line.
fn lexical_key(text: &str, offset: usize) -> String {
    let offset = offset.min(text.len());
    let line_start = text.as_bytes()[..offset].iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let header = text.as_bytes()[..line_start]
        .rsplit(|&b| b == b'\n')
        .filter_map(|line| std::str::from_utf8(line).ok())
        .map(str::trim)
        .find(|line| line.starts_with('[') && line.ends_with(']'))
        .map(|line| line.trim_matches(['[', ']']).trim().to_owned());
    let line_end =
        text.as_bytes()[line_start..].iter().position(|&b| b == b'\n').map_or(text.len(), |i| line_start + i);
    let line = text.get(line_start..line_end).unwrap_or("").trim();
    if line.starts_with('[') {
        // The error is in a header: name the table it opens.
        return line.trim_matches(['[', ']']).trim().to_owned();
    }
    let key = line.split_once('=').map(|(k, _)| k.trim()).filter(|k| is_bare_key(k));
    match (header, key) {
        (Some(h), Some(k)) => format!("{h}.{k}"),
        (Some(h), None) => h,
        (None, Some(k)) => k.to_owned(),
        (None, None) => String::new(),
    }
}

fn is_bare_key(k: &str) -> bool {
    !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
}

/// Does `span` cover `offset`? An empty span covers its own start.
fn covers(span: &Range<usize>, offset: usize) -> bool {
    span.contains(&offset) || (span.is_empty() && span.start == offset)
}

/// Keep the deepest path whose key or value covers `offset`.
fn consider(best: &mut Option<(usize, String)>, depth: usize, path: &str) {
    if best.as_ref().is_none_or(|(d, _)| depth >= *d) {
        *best = Some((depth, path.to_owned()));
    }
}

fn walk_table(table: &DeTable<'_>, offset: usize, prefix: &str, depth: usize, best: &mut Option<(usize, String)>) {
    for (key, value) in table.iter() {
        let path = if prefix.is_empty() { key.get_ref().to_string() } else { format!("{prefix}.{}", key.get_ref()) };
        if covers(&key.span(), offset) || covers(&value.span(), offset) {
            consider(best, depth, &path);
        }
        walk_value(value, offset, &path, depth + 1, best);
    }
}

fn walk_value(
    value: &Spanned<DeValue<'_>>,
    offset: usize,
    path: &str,
    depth: usize,
    best: &mut Option<(usize, String)>,
) {
    match value.get_ref() {
        DeValue::Table(table) => walk_table(table, offset, path, depth, best),
        DeValue::Array(array) => {
            for (i, elem) in array.iter().enumerate() {
                let path = format!("{path}[{i}]");
                if covers(&elem.span(), offset) {
                    consider(best, depth, &path);
                }
                walk_value(elem, offset, &path, depth + 1, best);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> PolicyError {
        parse_raw("t.toml", text).unwrap_err()
    }

    #[test]
    fn unknown_key_names_file_line_and_key_path() {
        let e = err("name = \"x\"\n\n[[writable]]\npath = \"/a\"\nreasn = \"r\"\n");
        let PolicyError::UnknownKey { at, expected } = &e else { panic!("{e:?}") };
        assert_eq!((at.file.as_str(), at.line, at.column), ("t.toml", 5, 1));
        assert_eq!(at.key, "writable[0].reasn");
        assert!(expected.contains("`reason`"), "{expected}");
    }

    #[test]
    fn type_error_names_the_value_key() {
        let e = err("name = \"x\"\n[network]\nallow = \"yes\"\n");
        let PolicyError::Type { at, message } = &e else { panic!("{e:?}") };
        assert_eq!((at.line, at.column, at.key.as_str()), (3, 9, "network.allow"));
        assert!(message.contains("expected a boolean"), "{message}");
    }

    #[test]
    fn inline_tables_and_arrays_get_indexed_paths() {
        let e = err("writable = [ { path = \"/a\" }, { path = 7 } ]\n");
        let PolicyError::Type { at, .. } = &e else { panic!("{e:?}") };
        assert_eq!((at.line, at.key.as_str()), (1, "writable[1].path"));
    }

    #[test]
    fn syntax_errors_are_placed() {
        let e = err("name = \"x\"\n[network\n");
        let PolicyError::Syntax { at, .. } = &e else { panic!("{e:?}") };
        assert_eq!((at.line, at.key.as_str()), (2, "network"));
        let e = err("[limits.pids_max]\nvalue = 3 3\n");
        let PolicyError::Syntax { at, .. } = &e else { panic!("{e:?}") };
        assert_eq!((at.line, at.key.as_str()), (2, "limits.pids_max.value"));
        let e = err("name = \"x\"\nname = \"y\"\n");
        let PolicyError::Syntax { at, message } = &e else { panic!("{e:?}") };
        assert_eq!((at.line, at.key.as_str()), (2, "name"));
        assert!(message.contains("duplicate"), "{message}");
    }

    #[test]
    fn missing_top_level_field_has_an_empty_key() {
        let e = err("");
        let PolicyError::Type { at, message } = &e else { panic!("{e:?}") };
        assert_eq!((at.line, at.key.as_str()), (1, ""));
        assert!(message.contains("missing field"), "{message}");
    }
}
