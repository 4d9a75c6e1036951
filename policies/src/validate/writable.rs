//! `[[writable]]`: path templates, reasons, and no root inside another.
//!
//! Invariants after this step: every template is absolute (`/…` or `{placeholder}/…`), none is
//! `/`, and no two templates with the same base nest or repeat. Templates with different bases
//! (`{project}` and `{home}/.cache`) cannot be compared until a session gives them values; that
//! overlap is folded at resolution ([`crate::resolve`]).
//!
//! ```text
//! [[writable]]
//! path = "{home}/.cache"
//! reason = "tool caches"
//! [[writable]]
//! path = "{home}/.cache/uv"   -> error: lies inside writable root `{home}/.cache` (line 1)
//! reason = "uv's cache"
//! ```

use std::ops::Range;

use toml::Spanned;

use super::Src;
use crate::error::{PolicyError, Problem};
use crate::policy::WritableRoot;
use crate::raw::RawWritable;
use crate::template::PathTemplate;

/// Validate the `[[writable]]` entries in order.
pub(super) fn writable(src: &Src<'_>, raw: &[Spanned<RawWritable>]) -> Result<Vec<WritableRoot>, PolicyError> {
    let mut out: Vec<(WritableRoot, Range<usize>)> = Vec::with_capacity(raw.len());
    for (i, entry) in raw.iter().enumerate() {
        let key = format!("writable[{i}]");
        let path = &entry.get_ref().path;
        let template = PathTemplate::parse(path.get_ref())
            .map_err(|problem| src.invalid(path.span(), format!("{key}.path"), problem))?;
        if template.is_filesystem_root() {
            return Err(src.invalid(path.span(), format!("{key}.path"), Problem::WholeFilesystem));
        }
        for (prev, prev_span) in &out {
            if let Some(problem) = overlap(src, &prev.template, prev_span.clone(), &template) {
                return Err(src.invalid(path.span(), format!("{key}.path"), problem));
            }
        }
        let reason = src.reason(entry.span(), &key, &entry.get_ref().reason)?;
        out.push((WritableRoot { template, optional: entry.get_ref().optional, reason }, path.span()));
    }
    Ok(out.into_iter().map(|(root, _)| root).collect())
}

/// How `new` overlaps the earlier root `prev` (written at `prev_span`), if it does.
fn overlap(src: &Src<'_>, prev: &PathTemplate, prev_span: Range<usize>, new: &PathTemplate) -> Option<Problem> {
    // Counted only for an error: counting is a walk of the text up to the span.
    let line = || src.line(prev_span.clone());
    if prev == new {
        Some(Problem::DuplicateRoot { path: new.to_string(), first_line: line() })
    } else if prev.contains(new) {
        Some(Problem::NestedRoot { path: new.to_string(), outer: prev.to_string(), outer_line: line() })
    } else if new.contains(prev) {
        Some(Problem::ContainsRoot { path: new.to_string(), inner: prev.to_string(), inner_line: line() })
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use crate::error::Problem;
    use crate::template::Placeholder;

    fn root(path: &str, extra: &str) -> String {
        format!("\n[[writable]]\npath = \"{path}\"\nreason = \"r\"\n{extra}")
    }

    #[test]
    fn accepts_roots_with_placeholders_and_optional() {
        let p =
            with(&(root("{project}", "") + &root("{home}/.npm", "optional = true") + &root("/var/tmp", ""))).unwrap();
        assert_eq!(p.writable.len(), 3);
        assert_eq!(p.writable[0].template.placeholder(), Some(Placeholder::Project));
        assert!(p.writable[1].optional && !p.writable[0].optional);
        assert_eq!(p.writable[2].template.to_string(), "/var/tmp");
    }

    #[test]
    fn nested_root_is_redundant() {
        let line = first_extra_line();
        let (problem, at, key) = fails(&(root("{home}/.cache", "") + &root("{home}/.cache/uv", "")));
        assert_eq!(
            problem,
            Problem::NestedRoot {
                path: "{home}/.cache/uv".into(),
                outer: "{home}/.cache".into(),
                outer_line: line + 2
            }
        );
        assert_eq!((at, key.as_str()), (line + 6, "writable[1].path"));
    }

    #[test]
    fn outer_root_after_inner_is_redundant_too() {
        let (problem, _, _) = fails(&(root("{home}/.cache/pip", "") + &root("{home}/.cache/", "")));
        assert!(matches!(problem, Problem::ContainsRoot { ref inner, .. } if inner == "{home}/.cache/pip"));
    }

    #[test]
    fn duplicate_root_after_normalisation() {
        let (problem, _, _) = fails(&(root("{project}/a", "") + &root("{project}//a/", "")));
        assert!(matches!(problem, Problem::DuplicateRoot { .. }), "{problem:?}");
    }

    #[test]
    fn bad_paths_name_their_key() {
        let (problem, at, key) = fails(&root("relative/dir", ""));
        assert_eq!(problem, Problem::RelativePath("relative/dir".into()));
        assert_eq!((at, key.as_str()), (first_extra_line() + 2, "writable[0].path"));
        assert_eq!(fails(&root("{nowhere}/x", "")).0, Problem::UnknownPlaceholder("nowhere".into()));
        assert_eq!(fails(&root("/", "")).0, Problem::WholeFilesystem);
        assert_eq!(fails(&root("/srv/{project}", "")).0, Problem::PlaceholderNotFirst("project".into()));
        assert_eq!(fails(&root("{home}/../etc", "")).0, Problem::ParentComponent("{home}/../etc".into()));
    }

    #[test]
    fn missing_reason_points_at_the_entry() {
        let (problem, at, key) = fails("\n[[writable]]\npath = \"{project}\"\n");
        assert_eq!(problem, Problem::MissingReason);
        assert_eq!((at, key.as_str()), (first_extra_line() + 1, "writable[0]"));
    }
}
