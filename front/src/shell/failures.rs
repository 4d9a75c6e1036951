//! Runtime warnings: a simple command of the top-level list failed, and the list went on (`;` or a newline
//! after it). The worker's wrapper records each failed command with its status (`$BASH_COMMAND`, an `ERR`
//! trap: see `worker::state`); this module keeps those that are simple commands of the command's top-level
//! list with something after them, and names what ran anyway.

use crate::shell::parse::parse;

/// Commands named after a failure (the rest counted).
const NAMED_AFTER: usize = 3;

/// Words with their whitespace collapsed: `$BASH_COMMAND` is bash's own rendering of the command.
fn squeeze(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// One warning per failed top-level simple command that other commands followed.
pub fn warnings(cmd: &str, failures: &[(i32, String)]) -> Vec<String> {
    if failures.is_empty() {
        return Vec::new();
    }
    let Some(tree) = parse(cmd) else { return Vec::new() };
    let root = tree.root_node();
    let mut cursor = root.walk();
    // The top-level statements, each with whether `&` ends it (a background job is not followed "anyway").
    let mut stmts: Vec<(tree_sitter::Node, bool)> = Vec::new();
    for n in root.children(&mut cursor) {
        match n.kind() {
            "&" => {
                if let Some(last) = stmts.last_mut() {
                    last.1 = true;
                }
            }
            "comment" | ";" | ";;" => {}
            _ if n.is_named() => stmts.push((n, false)),
            _ => {}
        }
    }
    let text = |n: &tree_sitter::Node| cmd.get(n.byte_range()).unwrap_or_default();
    let mut out = Vec::new();
    let mut from = 0usize;
    for (status, failed) in failures {
        let want = squeeze(failed);
        let Some(i) = (from..stmts.len())
            .find(|&i| stmts[i].0.kind() == "command" && !stmts[i].1 && squeeze(text(&stmts[i].0)) == want)
        else {
            continue;
        };
        from = i + 1;
        // The next command reads the status (`echo rc=$?`, `[ $? -eq 0 ]`): the list handles the failure.
        let reads_status = |t: &str| t.contains("$?") || t.contains("${?}") || t.contains("PIPESTATUS");
        if stmts.get(i + 1).is_some_and(|(n, _)| reads_status(text(n))) {
            continue;
        }
        let after: Vec<String> = stmts[i + 1..].iter().map(|(n, _)| format!("`{}`", squeeze(text(n)))).collect();
        if after.is_empty() {
            continue;
        }
        let more = match after.len().saturating_sub(NAMED_AFTER) {
            0 => String::new(),
            n => format!(" and {n} more"),
        };
        out.push(format!(
            "`{want}` failed with status {status}, and the list went on: {}{more} ran after it anyway (join with `&&` to stop at a failure)",
            after[..after.len().min(NAMED_AFTER)].join(", ")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(v: &[(i32, &str)]) -> Vec<(i32, String)> {
        v.iter().map(|(s, c)| (*s, (*c).to_owned())).collect()
    }

    #[test]
    fn a_failed_top_level_command_followed_by_others_is_named() {
        let w = warnings("cd nowhere; rm  -rf build\nmake", &f(&[(1, "cd nowhere")]));
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].starts_with("`cd nowhere` failed with status 1"), "{w:?}");
        assert!(w[0].contains("`rm -rf build`, `make` ran after it anyway"), "{w:?}");
    }

    #[test]
    fn failures_that_stopped_the_list_or_were_not_top_level_are_not_warned() {
        assert!(warnings("true; false", &f(&[(1, "false")])).is_empty(), "the last command");
        assert!(warnings("a && b; c", &f(&[(1, "b")])).is_empty(), "inside an and-list");
        assert!(warnings("for i in 1; do false; done; echo", &f(&[(1, "false")])).is_empty(), "inside a loop");
        assert!(warnings("false & echo", &f(&[(1, "false")])).is_empty(), "in the background");
        assert!(warnings("echo hi", &[]).is_empty());
        assert!(warnings("false; echo rc=$?", &f(&[(1, "false")])).is_empty(), "the next command reads $?");
        assert!(warnings("false\nrc=${PIPESTATUS[0]}; echo", &f(&[(1, "false")])).is_empty(), "PIPESTATUS");
        assert_eq!(warnings("false; true; echo $?", &f(&[(1, "false")])).len(), 1, "not the command right after");
    }

    proptest::proptest! {
        #[test]
        fn garbage_never_panics(cmd in "[ -~\\n]{0,120}", failed in "[ -~]{0,20}", status in proptest::prelude::any::<i32>()) {
            let _ = warnings(&cmd, &[(status, failed)]);
        }
    }
}
