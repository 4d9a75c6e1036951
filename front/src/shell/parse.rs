//! Reading command text with a real bash parser (tree-sitter-bash), shared by the capture scope
//! (`shell::scope`) and the guards (`guard`). One parser per thread, reused; a parse that takes longer
//! than [`PARSE_BUDGET`] is abandoned (the parser is reset so the next parse starts clean), and the
//! caller then treats the command as unread. tree-sitter's parser is iterative and error-tolerant:
//! garbage parses, with error nodes (`Node::has_error`). The thread's last command and its tree are
//! kept: a `run` reads its command twice on one thread (the capture scope, then the guards), and the
//! second reading reuses the tree (a copy is a reference count).
//!
//! ```
//! let tree = front::shell::parse::parse("cd src && make").unwrap();
//! assert_eq!(tree.root_node().kind(), "program");
//! ```

use std::ops::ControlFlow;

/// A parse gives up after this long.
pub const PARSE_BUDGET: std::time::Duration = std::time::Duration::from_millis(5);

thread_local! {
    static PARSER: std::cell::RefCell<Option<tree_sitter::Parser>> = const { std::cell::RefCell::new(None) };
    static LAST: std::cell::RefCell<Option<(String, tree_sitter::Tree)>> = const { std::cell::RefCell::new(None) };
}

/// The syntax tree of `cmd`, or `None` when the parse ran out of time (or the grammar failed to load).
pub fn parse(cmd: &str) -> Option<tree_sitter::Tree> {
    let hit = LAST.with(|l| l.borrow().as_ref().filter(|(c, _)| c == cmd).map(|(_, t)| t.clone()));
    if hit.is_some() {
        return hit;
    }
    let tree = parse_new(cmd)?;
    LAST.with(|l| *l.borrow_mut() = Some((cmd.to_owned(), tree.clone())));
    Some(tree)
}

fn parse_new(cmd: &str) -> Option<tree_sitter::Tree> {
    PARSER.with(|p| {
        let mut p = p.borrow_mut();
        if p.is_none() {
            let mut parser = tree_sitter::Parser::new();
            parser.set_language(&tree_sitter_bash::LANGUAGE.into()).ok()?;
            *p = Some(parser);
        }
        let started = std::time::Instant::now();
        let mut in_time = |_: &tree_sitter::ParseState| match started.elapsed() > PARSE_BUDGET {
            true => ControlFlow::Break(()),
            false => ControlFlow::Continue(()),
        };
        let options = tree_sitter::ParseOptions::new().progress_callback(&mut in_time);
        let bytes = cmd.as_bytes();
        let mut input = |at: usize, _| bytes.get(at..).unwrap_or_default();
        let parser = p.as_mut()?;
        let tree = parser.parse_with_options(&mut input, None, Some(options));
        if tree.is_none() {
            parser.reset(); // an abandoned parse would otherwise resume with the next command
        }
        tree
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_second_reading_of_the_same_command_gets_the_same_tree() {
        let a = super::parse("cd src && make").unwrap();
        let b = super::parse("cd src && make").unwrap();
        assert_eq!(a.root_node().to_sexp(), b.root_node().to_sexp());
        let c = super::parse("ls").unwrap();
        assert_ne!(a.root_node().to_sexp(), c.root_node().to_sexp(), "another command is parsed anew");
    }
}
