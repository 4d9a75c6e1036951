//! The simple commands of a command line, as the guards see them: each command's program, its words
//! with their static values (quotes and escapes removed; `None` for a word an expansion decides), the
//! programs that feed it through a pipe, whether its stdin is a pipe or an input redirect, and its
//! exact text.
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
    /// Its stdin is a pipe (it is not first in a pipeline) or an input redirect (`<`, `<<`, `<<<`), its
    /// own or one around it (`{ sh; } < f`), or that of the `bash -c` that runs it.
    pub stdin_fed: bool,
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
    read_into(cmd, 0, false, &mut out, &mut budget)?;
    Ok(out)
}

/// `fed`: the stdin of the shell that reads `cmd` is a pipe or a redirect.
fn read_into(cmd: &str, depth: usize, fed: bool, out: &mut Reading, budget: &mut usize) -> Result<(), Unread> {
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
                let fed = fed || stdin_fed(n, src);
                command(n, src, Feed { piped_from, fed }, depth, out, budget)?;
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

/// Whether `n` reads its stdin from a pipe or an input redirect: its own (`python3 <<< x`), or one of a
/// statement around it (`sh < f`, `{ sh; } < f`), or because a statement around it is not first in its
/// pipeline (`curl x | sh`, `curl x | { sh; }`).
fn stdin_fed(n: Node<'_>, src: &[u8]) -> bool {
    if input_redirect(n, src) {
        return true;
    }
    let mut inner = n;
    while let Some(p) = inner.parent() {
        let fed = match p.kind() {
            "pipeline" => p.named_child(0).is_some_and(|first| first.id() != inner.id()),
            "redirected_statement" => input_redirect(p, src),
            _ => false,
        };
        if fed {
            return true;
        }
        inner = p;
    }
    false
}

/// Whether one of `n`'s redirects feeds file descriptor 0: a here-document, a here-string, or `<`,
/// `<&`, `<>` without a descriptor or with `0`.
fn input_redirect(n: Node<'_>, src: &[u8]) -> bool {
    let mut c = n.walk();
    let kids: Vec<Node> = n.named_children(&mut c).collect();
    kids.into_iter().any(|r| match r.kind() {
        "heredoc_redirect" | "herestring_redirect" => true,
        "file_redirect" => {
            let mut c = r.walk();
            let parts: Vec<Node> = r.children(&mut c).collect();
            let stdin = parts.iter().all(|p| p.kind() != "file_descriptor" || text(*p, src) == "0");
            stdin && parts.iter().any(|p| matches!(p.kind(), "<" | "<&" | "<>"))
        }
        _ => false,
    })
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

/// What feeds one simple command's stdin.
struct Feed {
    piped_from: Vec<String>,
    fed: bool,
}

fn command(
    n: Node<'_>,
    src: &[u8],
    feed: Feed,
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
            piped_from: feed.piped_from.clone(),
            stdin_fed: feed.fed,
            text: whole.clone(),
        });
        if depth < MAX_DEPTH {
            if let Some(inner) = inner_script(&program, &rest) {
                // What the inner shell runs is read as its own command line; unreadable is not fatal.
                let _ = read_into(&inner, depth + 1, feed.fed, out, budget);
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
    fn stdin_fed_by_a_pipe_or_an_input_redirect() {
        let fed = |cmd: &str| -> Vec<(String, bool)> {
            simple_commands(cmd).unwrap().into_iter().map(|c| (c.program, c.stdin_fed)).collect()
        };
        let f = |p: &str, b: bool| (p.to_owned(), b);
        assert_eq!(fed("curl x | sudo sh"), [f("curl", false), f("sudo", true), f("sh", true)]);
        assert_eq!(fed("curl x | { sh; }"), [f("curl", false), f("sh", true)]);
        assert_eq!(fed("echo a | (cd x && python3)"), [f("echo", false), f("cd", true), f("python3", true)]);
        assert_eq!(fed("sh < run.sh"), [f("sh", true)]);
        assert_eq!(fed("{ sh; } < run.sh"), [f("sh", true)]);
        assert_eq!(fed("python3 <<'EOF'\nprint(1)\nEOF"), [f("python3", true)]);
        assert_eq!(fed("python3 <<< 'print(1)'"), [f("python3", true)]);
        assert_eq!(fed("curl x | bash -c 'python3'"), [f("curl", false), f("bash", true), f("python3", true)]);
        // Output redirects and other descriptors do not feed stdin.
        assert_eq!(fed("python3 2>&1 > out.txt"), [f("python3", false)]);
        assert_eq!(fed("python3 3< f"), [f("python3", false)]);
        assert_eq!(fed("python3; cat < f"), [f("python3", false), f("cat", true)]);
        assert_eq!(fed("python3 < f | cat"), [f("python3", true), f("cat", true)]);
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
