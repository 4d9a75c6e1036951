//! Reading command text with a real bash parser (tree-sitter-bash), shared by the capture scope
//! (`shell::scope`) and the guards (`guard`). One parser per thread, reused; a parse that takes longer
//! than [`PARSE_BUDGET`] is abandoned (the parser is reset so the next parse starts clean), and the
//! caller then treats the command as unread. tree-sitter's parser is iterative and error-tolerant:
//! garbage parses, with error nodes (`Node::has_error`). The thread's last command and its tree are
//! kept: a `run` reads its command twice on one thread (the capture scope, then the guards), and the
//! second reading reuses the tree (a copy is a reference count).
//!
//! The text reaches the grammar through [`Narrowed`], a UTF-8 decoding that hands every code point
//! above U+00FF to the grammar as one in U+0080..=U+00FF: tree-sitter-bash 0.25.1's scanner calls C's
//! `isdigit` on the code point after a `{` (brace ranges), which indexes a 384-entry table, so a code
//! point such as U+10FFFF there read far out of bounds and killed the front with SIGSEGV. In the C
//! locale the front runs in, every non-ASCII code point is neither space, letter nor digit to the
//! scanner, so the narrowing changes no parse; byte offsets are those of the real text.
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
        let tree = parser.parse_custom_encoding::<Narrowed, _, _>(&mut input, None, Some(options));
        if tree.is_none() {
            parser.reset(); // an abandoned parse would otherwise resume with the next command
        }
        tree
    })
}

/// UTF-8 decoding for the grammar: code points above U+00FF become U+0080..=U+00FF (see the module
/// doc); invalid bytes are tree-sitter's decode error (-1), one byte at a time.
struct Narrowed;

impl tree_sitter::Decode for Narrowed {
    fn decode(bytes: &[u8]) -> (i32, u32) {
        let width = match bytes.first() {
            None => return (-1, 0),
            Some(b) if *b < 0x80 => return (i32::from(*b), 1),
            Some(b) if *b >= 0xF0 => 4,
            Some(b) if *b >= 0xE0 => 3,
            Some(_) => 2,
        };
        let decoded = bytes.get(..width).and_then(|b| std::str::from_utf8(b).ok()).and_then(|s| s.chars().next());
        match decoded {
            Some(c) => match u8::try_from(c) {
                Ok(b) => (i32::from(b), width as u32),
                Err(_) => (i32::from(0x80 | (u32::from(c) & 0x7F) as u8), width as u32),
            },
            None => (-1, 1),
        }
    }
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

    /// tree-sitter-bash 0.25.1 read `isdigit` tables out of bounds on a code point above U+00FF
    /// after `{` (its issue 337): the front died with SIGSEGV on `echo {\u{10ffff}`.
    #[test]
    fn a_wide_code_point_after_a_brace_does_not_crash_the_parser() {
        for cmd in ["{\u{10ffff}", "echo {\u{31860}", "echo {12\u{10ffff}", "echo {1..2\u{10ffff}", "a{\u{e9}"] {
            let tree = super::parse(cmd).unwrap();
            assert_eq!(tree.root_node().end_byte(), cmd.len(), "{cmd:?} is read to its end");
        }
        let t = super::parse("echo {1..3} é{\u{10ffff}}").unwrap();
        assert!(!t.root_node().has_error(), "{}", t.root_node().to_sexp());
    }

    /// The narrowing keeps byte offsets: a word after wide text is cut out of the real text.
    #[test]
    fn words_after_wide_text_keep_their_bytes() {
        let cmd = "echo 完成 && rm -rf /";
        let tree = super::parse(cmd).unwrap();
        let last = tree.root_node().child(0).unwrap().child(2).unwrap();
        assert_eq!(&cmd[last.byte_range()], "rm -rf /");
    }

    fn garbage() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..400).prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
            any::<String>(),
            "[\\x00-\\x1f <>$(){}'\"`;|&a-z\\\\-]{0,200}",
            // Brace ranges next to any code point: tree-sitter-bash's scanner reads digits there.
            proptest::collection::vec(prop_oneof![Just('{'), Just('.'), Just('1'), any::<char>()], 0..20)
                .prop_map(|v| v.into_iter().collect()),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        /// Every reader of command text in this room, over any text (NUL bytes, control characters,
        /// invalid UTF-8 replaced, any Unicode): never a panic, never a crash in the C parser.
        #[test]
        fn any_text_never_panics_a_reader(cmd in garbage(), status in proptest::prelude::any::<i32>()) {
            let _ = super::parse(&cmd).map(|t| t.root_node().to_sexp());
            let _ = crate::shell::scope::scope(&cmd, &shm_proto::capture::Items::new());
            let failed: String = cmd.chars().take(20).collect();
            let _ = crate::shell::failures::warnings(&cmd, &[(status, failed)]);
        }
    }
}
