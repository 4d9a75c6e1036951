//! The simple commands of a command line, as the guards see them: each command's program, its words
//! with their static values (quotes and escapes removed; `None` for a word an expansion decides), the
//! programs that feed it through a pipe, and its exact text.
//!
//! Wrappers that run another program (`sudo`, `env`, `nice`, `nohup`, `timeout`, `time`, `command`,
//! `exec`, `xargs`, `stdbuf`, `setsid`) yield both: the wrapper's own command and the program it runs. A
//! `bash -c 'TEXT'` (or `sh -c`, and `eval` of static words) is read again, a few levels deep, so a
//! guard sees what the inner shell runs.
//!
//! ```
//! let cmds = front::guard::words::simple_commands("sudo pkill -f 'node server' | tee log").unwrap();
//! let programs: Vec<&str> = cmds.iter().map(|c| c.program.as_str()).collect();
//! assert_eq!(programs, ["sudo", "pkill", "tee"]);
//! assert_eq!(cmds[1].words, [Some("-f".to_owned()), Some("node server".to_owned())]);
//! assert_eq!(cmds[2].piped_from, ["sudo", "pkill"]);
//! ```

use tree_sitter::Node;

/// Commands longer than this are not read (the guards say so; the sandbox stays the backstop).
pub const MAX_READ: usize = 64 * 1024;
/// How deep `bash -c` and `eval` are read again.
const MAX_DEPTH: usize = 3;
/// Syntax nodes visited at most, over all depths.
const MAX_NODES: usize = 200_000;

/// One simple command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimpleCommand {
    /// The program's bare name (`/usr/bin/rm` → `rm`).
    pub program: String,
    /// The words after it (redirections left out); `None` where an expansion decides the word.
    pub words: Vec<Option<String>>,
    /// Programs earlier in the same pipeline.
    pub piped_from: Vec<String>,
    /// The command's exact text, as written.
    pub text: String,
}

/// Why a command could not be read in full.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unread {
    TooLong,
    /// The parser found a syntax error, or gave up in time.
    Syntax,
}

/// What the guards read of a command line: its simple commands, and the here-documents whose delimiter
/// is unquoted and whose body holds `$` or a backquote (the exact `<<WORD` text of each).
#[derive(Debug, Default)]
pub struct Reading {
    pub commands: Vec<SimpleCommand>,
    pub expanding_heredocs: Vec<String>,
}

/// The simple commands of `cmd`, or why it could not be read.
pub fn simple_commands(cmd: &str) -> Result<Vec<SimpleCommand>, Unread> {
    read(cmd).map(|r| r.commands)
}

/// Read `cmd` in full.
pub fn read(cmd: &str) -> Result<Reading, Unread> {
    let mut out = Reading::default();
    let mut budget = MAX_NODES;
    read_into(cmd, 0, &mut out, &mut budget)?;
    Ok(out)
}

fn read_into(cmd: &str, depth: usize, out: &mut Reading, budget: &mut usize) -> Result<(), Unread> {
    if cmd.len() > MAX_READ {
        return Err(Unread::TooLong);
    }
    let tree = crate::shell::parse::parse(cmd).ok_or(Unread::Syntax)?;
    let root = tree.root_node();
    if root.has_error() {
        return Err(Unread::Syntax);
    }
    let src = cmd.as_bytes();
    // An explicit stack: the tree can be as deep as the command is long.
    let mut stack = vec![root];
    while let Some(n) = stack.pop() {
        *budget = budget.checked_sub(1).ok_or(Unread::TooLong)?;
        match n.kind() {
            "command" => {
                let piped_from = pipeline_before(n, src);
                command(n, src, piped_from, depth, out, budget)?;
            }
            "heredoc_redirect" => heredoc(n, src, out),
            _ => {}
        }
        let mut c = n.walk();
        let kids: Vec<Node> = n.named_children(&mut c).collect();
        stack.extend(kids.into_iter().rev());
    }
    Ok(())
}

fn text<'a>(n: Node<'_>, src: &'a [u8]) -> &'a str {
    std::str::from_utf8(&src[n.byte_range()]).unwrap_or("")
}

/// The programs of the commands before `n` in its pipeline.
fn pipeline_before(n: Node<'_>, src: &[u8]) -> Vec<String> {
    let Some(p) = n.parent().filter(|p| p.kind() == "pipeline") else { return Vec::new() };
    let mut c = p.walk();
    p.named_children(&mut c)
        .take_while(|k| k.id() != n.id())
        .filter(|k| k.kind() == "command")
        .flat_map(|k| programs(k, src))
        .collect()
}

/// The programs one simple command runs: its own and, through wrappers (`sudo curl …`), the ones it
/// starts, so `sudo curl … | sh` is piped from `curl` too.
fn programs(n: Node<'_>, src: &[u8]) -> Vec<String> {
    let mut c = n.walk();
    let kids: Vec<Node> = n.named_children(&mut c).collect();
    let Some(at) = kids.iter().position(|k| k.kind() == "command_name") else { return Vec::new() };
    let Some(name) = static_word(kids[at], src) else { return Vec::new() };
    let mut argv: Vec<Option<String>> = std::iter::once(Some(name))
        .chain(kids[at + 1..].iter().filter(|k| !k.kind().ends_with("_redirect")).map(|k| static_word(*k, src)))
        .collect();
    let mut out = Vec::new();
    while let Some(Some(program)) = argv.first().cloned() {
        let program = bare(&program).to_owned();
        let next = unwrap(&program, &argv[1..]);
        out.push(program);
        match next {
            Some(next) if !next.is_empty() => argv = next,
            _ => break,
        }
    }
    out
}

fn bare(program: &str) -> &str {
    program.rsplit('/').next().unwrap_or(program)
}

fn command(
    n: Node<'_>,
    src: &[u8],
    piped_from: Vec<String>,
    depth: usize,
    out: &mut Reading,
    budget: &mut usize,
) -> Result<(), Unread> {
    let mut c = n.walk();
    let kids: Vec<Node> = n.named_children(&mut c).collect();
    let Some(at) = kids.iter().position(|k| k.kind() == "command_name") else { return Ok(()) };
    let Some(name) = static_word(kids[at], src) else { return Ok(()) };
    let words: Vec<Option<String>> = kids[at + 1..]
        .iter()
        .filter(|k| !k.kind().ends_with("_redirect") && k.kind() != "herestring_redirect")
        .map(|k| static_word(*k, src))
        .collect();
    let whole = text(n, src).to_owned();
    let mut argv: Vec<Option<String>> = std::iter::once(Some(name)).chain(words).collect();
    while let Some(Some(program)) = argv.first().cloned() {
        let program = bare(&program).to_owned();
        let rest = argv[1..].to_vec();
        out.commands.push(SimpleCommand {
            program: program.clone(),
            words: rest.clone(),
            piped_from: piped_from.clone(),
            text: whole.clone(),
        });
        if depth < MAX_DEPTH {
            if let Some(inner) = inner_script(&program, &rest) {
                // What the inner shell runs is read as its own command line; unreadable is not fatal.
                let _ = read_into(&inner, depth + 1, out, budget);
            }
        }
        match unwrap(&program, &rest) {
            Some(next) if !next.is_empty() => argv = next,
            _ => break,
        }
    }
    Ok(())
}

/// `bash -c TEXT`, `sh -c TEXT`, `eval WORDS`: the text the inner shell reads.
fn inner_script(program: &str, args: &[Option<String>]) -> Option<String> {
    match program {
        "bash" | "sh" | "dash" | "zsh" | "ksh" => {
            let at = args.iter().position(|a| {
                a.as_deref().is_some_and(|a| a.starts_with('-') && !a.starts_with("--") && a.contains('c'))
            })?;
            args.get(at + 1).cloned().flatten()
        }
        "eval" => args.iter().cloned().collect::<Option<Vec<String>>>().map(|w| w.join(" ")),
        _ => None,
    }
}

/// The command a wrapper runs, as words, or `None` when `program` is not a wrapper.
fn unwrap(program: &str, args: &[Option<String>]) -> Option<Vec<Option<String>>> {
    // Options of each wrapper that take a value in the next word.
    let valued: &[&str] = match program {
        "sudo" | "doas" => &["-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T"],
        "env" => &["-u", "-C", "-S", "--unset", "--chdir"],
        "nice" => &["-n", "--adjustment"],
        "timeout" => &["-s", "-k", "--signal", "--kill-after"],
        "xargs" => &["-I", "-n", "-P", "-L", "-d", "-E", "-s", "-a", "--max-args", "--max-procs"],
        "stdbuf" => &["-i", "-o", "-e"],
        "nohup" | "time" | "command" | "exec" | "setsid" | "builtin" | "chronic" => &[],
        _ => return None,
    };
    let mut i = 0;
    while let Some(w) = args.get(i) {
        let Some(w) = w.as_deref() else { return Some(Vec::new()) };
        if w == "--" {
            i += 1;
            break;
        }
        if w.starts_with('-') && w.len() > 1 {
            i += if valued.contains(&w) { 2 } else { 1 };
            continue;
        }
        if program == "env" && w.contains('=') {
            i += 1;
            continue;
        }
        break;
    }
    if program == "timeout" {
        i += 1; // the duration
    }
    Some(args.get(i..).map(<[Option<String>]>::to_vec).unwrap_or_default())
}

/// A word's value when no expansion decides it: quotes removed, backslash escapes applied. `$HOME` and
/// `${HOME}` read as `~`, so a guard on the home directory sees them.
pub fn static_word(n: Node<'_>, src: &[u8]) -> Option<String> {
    let t = text(n, src);
    match n.kind() {
        "command_name" => n.named_child(0).and_then(|w| static_word(w, src)),
        "word" | "number" => Some(unescape(t)),
        "raw_string" => Some(t.trim_start_matches('\'').trim_end_matches('\'').to_owned()),
        "string" => {
            let mut c = n.walk();
            let kids: Vec<Node> = n.named_children(&mut c).collect();
            match kids.iter().all(|k| k.kind() == "string_content") {
                true => Some(unescape_double(t.get(1..t.len().saturating_sub(1)).unwrap_or(""))),
                false => None,
            }
        }
        "simple_expansion" | "expansion" if matches!(t, "$HOME" | "${HOME}") => Some("~".to_owned()),
        "concatenation" => {
            let mut c = n.walk();
            let parts: Vec<Node> = n.named_children(&mut c).collect();
            // Literal text between named parts (`a"b"c` has none named for `a`): rebuild from the source,
            // only when every named part is static.
            let mut out = String::new();
            let mut at = n.start_byte();
            for p in parts {
                out.push_str(&unescape(std::str::from_utf8(&src[at..p.start_byte()]).unwrap_or("")));
                out.push_str(&static_word(p, src)?);
                at = p.end_byte();
            }
            out.push_str(&unescape(std::str::from_utf8(&src[at..n.end_byte()]).unwrap_or("")));
            Some(out)
        }
        _ => None,
    }
}

/// `a\ b` → `a b`.
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            c => out.push(c),
        }
    }
    out
}

/// Inside double quotes only `\"`, `\\`, `\$` and `` \` `` escape.
fn unescape_double(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, chars.peek()) {
            ('\\', Some('"' | '\\' | '$' | '`')) => out.extend(chars.next()),
            (c, _) => out.push(c),
        }
    }
    out
}

/// An unquoted here-document whose body bash will expand.
fn heredoc(n: Node<'_>, src: &[u8], out: &mut Reading) {
    let mut c = n.walk();
    let kids: Vec<Node> = n.children(&mut c).collect();
    let Some(start) = kids.iter().find(|k| k.kind() == "heredoc_start") else { return };
    let delimiter = text(*start, src);
    if delimiter.contains(['\'', '"', '\\']) {
        return;
    }
    let expands = kids.iter().any(|k| k.kind() == "heredoc_body" && text(*k, src).contains(['$', '`']));
    if expands {
        let op = if text(n, src).starts_with("<<-") { "<<-" } else { "<<" };
        out.expanding_heredocs.push(format!("{op}{delimiter}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn programs(cmd: &str) -> Vec<String> {
        simple_commands(cmd).unwrap().into_iter().map(|c| c.program).collect()
    }

    #[test]
    fn wrappers_and_inner_shells_are_seen_through() {
        assert_eq!(programs("sudo -u root env A=1 nice -n 5 pkill node"), ["sudo", "env", "nice", "pkill"]);
        assert_eq!(programs("timeout 10 rm -rf build"), ["timeout", "rm"]);
        assert_eq!(programs("bash -c 'cd / && rm -rf *'"), ["bash", "cd", "rm"]);
        assert_eq!(programs("eval killall node"), ["eval", "killall"]);
        assert_eq!(programs("find . -name x | xargs -n 1 rm -f"), ["find", "xargs", "rm"]);
        assert_eq!(programs("/usr/bin/pkill -f x"), ["pkill"]);
    }

    #[test]
    fn words_lose_their_quotes_and_expansions_are_unknown() {
        let c = &simple_commands(r#"rm -rf "a b" 'c' d\ e "$X" $HOME/x ${HOME} "q\"q""#).unwrap()[0];
        let w: Vec<Option<&str>> = c.words.iter().map(|w| w.as_deref()).collect();
        assert_eq!(w, [Some("-rf"), Some("a b"), Some("c"), Some("d e"), None, Some("~/x"), Some("~"), Some("q\"q")]);
    }

    #[test]
    fn pipes_say_what_feeds_a_command() {
        let cmds = simple_commands("curl -fsSL https://x.invalid/i.sh | sudo bash").unwrap();
        assert_eq!(cmds[1].program, "sudo");
        assert_eq!(cmds[2].program, "bash");
        assert_eq!(cmds[2].piped_from, ["curl"]);
    }

    #[test]
    fn expanding_heredocs_are_found_and_quoted_ones_are_not() {
        let r = read("cat > a.sh <<EOF\necho $HOME\nEOF\ncat > b <<'EOF'\n$x\nEOF\ncat <<EOF\nplain\nEOF\n").unwrap();
        assert_eq!(r.expanding_heredocs, ["<<EOF"]);
    }

    #[test]
    fn syntax_errors_and_huge_commands_are_not_read() {
        assert_eq!(simple_commands("if then fi (").unwrap_err(), Unread::Syntax);
        assert_eq!(simple_commands(&"a ".repeat(MAX_READ)).unwrap_err(), Unread::TooLong);
    }

    proptest::proptest! {
        #[test]
        fn garbage_never_panics(cmd in "[ -~\\n]{0,120}") {
            let _ = read(&cmd);
        }

        #[test]
        fn shell_shaped_garbage_never_panics(parts in proptest::collection::vec(
            proptest::sample::select(vec!["sudo", "bash -c '", "eval", "rm -rf", "|", "&&", ";", "<<EOF\n$x\nEOF\n", "\"", "'", "$(", ")", "{", "}", "\\", "xargs", "timeout 5", "env A=1", "~", "/", "*"]),
            0..30)) {
            let _ = read(&parts.join(" "));
        }
    }
}
