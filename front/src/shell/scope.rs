//! What a command can change of the shell state: the scope of its capture.
//!
//! Most agent commands run programs (`cargo test`, `git status | head`, `cd sub && make`): they cannot
//! change a function, an alias or a variable of the shell that runs them. For those, listing every
//! variable, function and alias after the command (`declare -p`, `declare -f`, `alias -p`: most of bash's
//! capture work, ~200 µs of a fresh bash's CPU) finds nothing new. Before a fresh bash runs a command, the
//! front reads it with a real bash parser (tree-sitter-bash) and [`scope`] answers either `None` (capture
//! everything) or `Some(names)`: the command can change no function, no alias and no variable outside
//! `names` (plus `OLDPWD`, which `cd` sets). The job's capture then lists those variables, and the
//! working directory, directory stack, options and umask, which it always lists (they are cheap); every
//! other item is carried over unchanged (`jobs::shell_part`).
//!
//! The reading is conservative: anything it does not understand means `None`. In particular:
//! - assignments (`X=1`, `X+=1`, prefix `X=1 cmd`, `for X in`, `read X`, `mapfile X`, `printf -v X`,
//!   `export`/`declare`/`local`/`readonly`/`typeset`/`unset` of plain names) add their names; an array
//!   element with a subscript that is not a number, a target that is a nameref or an integer variable in
//!   the record (its value is evaluated as arithmetic, which can assign anything), `declare -i`/`-n`/`-f`
//!   and `unset -f`/`-n` give `None`;
//! - a word may expand parameters (`$X`, `${X:-…}`, `${X#…}`, `${#X}`, `${X/…/…}`, `${A[@]}`, `${A[3]}`)
//!   and run command or process substitutions (a subshell: nothing it does reaches the shell), but
//!   arithmetic (`$((…))`, `((…))`, `[[ … -eq … ]]`, a `${X:1:2}` offset, a non-numeric subscript, a
//!   test's `-v`), bash 5.3's `${ …; }`, `${X:=…}`, `${!X}`, `${X@…}`, a nameref, `select` (it sets
//!   `REPLY`), and `{fd}>` redirections give `None`, as do here-document bodies holding `$` or a
//!   backquote the grammar did not read as an expansion, and the session's first call (`job_run`);
//! - a command word that is a function or an alias in the record, or is not a plain literal, gives
//!   `None`; so do function definitions, `eval`, `source`, `.`, `exec`, `exit`, `return`, `trap`,
//!   `kill`, `alias`, `unalias`, `command`, `builtin`, `enable`, `let`, `getopts`, `coproc`, and every
//!   builtin not named below; `echo`, `printf`, `test`, `[`, `true`, `false`, `:`, `pwd`, `cd`, `pushd`,
//!   `popd`, `dirs`, `set` (but not `set -k`), `shopt`, `umask`, `ulimit`, `hash`, `type`, `help`,
//!   `jobs`, `times`, `wait` (not `-p`), `shift`, `break`, `continue`, `caller`, `disown`, `bg`, `fg`
//!   change nothing outside what every capture lists; any other command word is a program;
//! - a subshell `( … )` changes nothing of the shell, whatever it runs;
//! - a command longer than [`MAX_READ`] bytes, or nested deeper than [`MAX_NESTING`], is not read, and
//!   a parse that takes longer than 5 ms is abandoned (tree-sitter's parser is iterative and
//!   error-tolerant: garbage parses, with error nodes, which mean `None`).
//!
//! `front/tests/state_scope_bash.rs` checks the reading against real bash: for a corpus of commands,
//! every item that a full capture shows changed is one the scope covers.
//!
//! ```
//! use front::shell::scope::scope;
//! let base = shm_proto::capture::Items::new();
//! assert_eq!(scope("cd src && cargo build 2>&1 | tail -5", &base), Some(vec![]));
//! assert_eq!(scope("for f in *.rs; do wc -l \"$f\"; done", &base), Some(vec!["f".to_owned()]));
//! assert_eq!(scope("source env.sh", &base), None);
//! ```

use shm_proto::capture::{bash_owned, valid_name, Items};
use std::collections::BTreeSet;
use tree_sitter::Node;

/// Commands longer than this are captured in full without being read.
pub const MAX_READ: usize = 16 * 1024;

/// Commands with more opening brackets than this (a bound on the depth of their syntax tree, which the
/// reading recurses on) are captured in full without being read.
pub const MAX_NESTING: usize = 200;

/// The variables `cmd` may change, if it can change no function, no alias and no other variable; see
/// the module docs. `base` is the state record the job starts from.
pub fn scope(cmd: &str, base: &Items) -> Option<Vec<String>> {
    let openers = cmd.bytes().filter(|b| matches!(b, b'(' | b'{' | b'[' | b'`')).count();
    // Arithmetic (`((…))`, `$((…))`, `$[…]`) can assign any variable; the grammar also reads `$((…))` in
    // a here-document as a command substitution, so it is ruled out on the text.
    let arithmetic = cmd.contains("((") || cmd.contains("$[");
    // Bash 5.3's `${ cmd; }` and `${| cmd; }` run in the shell itself.
    let funsub = ["${ ", "${\t", "${\n", "${|"].iter().any(|f| cmd.contains(f));
    // `set -k`: assignments anywhere among a command's arguments; an alias named like a reserved word
    // could rewrite the grammar before the parser's view of it applies.
    let keyword = base.get("set:keyword").is_some_and(|v| v == b"-");
    if cmd.len() > MAX_READ || openers > MAX_NESTING || arithmetic || funsub || keyword || has_reserved_alias(base) {
        return None;
    }
    let tree = crate::shell::parse::parse(cmd)?;
    let mut r = Reader { base, src: cmd.as_bytes(), names: BTreeSet::new() };
    r.node(tree.root_node()).ok()?;
    Some(r.names.into_iter().collect())
}

/// The names a scoped capture lists, in order ([`shm_proto::msg::capture_names`]).
pub fn listed(names: &[String]) -> Vec<String> {
    shm_proto::msg::capture_names(names)
}

fn has_reserved_alias(base: &Items) -> bool {
    const RESERVED: &[&str] = &[
        "!", "[[", "]]", "{", "}", "case", "coproc", "do", "done", "elif", "else", "esac", "fi", "for", "function",
        "if", "in", "select", "then", "time", "until", "while",
    ];
    RESERVED.iter().any(|w| base.contains_key(&format!("alias:{w}")))
}

/// "Not understood, or may change more than variables": capture everything.
struct Full;

type Read = Result<(), Full>;

struct Reader<'a> {
    base: &'a Items,
    src: &'a [u8],
    names: BTreeSet<String>,
}

/// Builtins that change nothing outside what every capture lists (the working directory and `OLDPWD`,
/// the directory stack, the options, the umask), given plain arguments.
const INERT_BUILTINS: &[&str] = &[
    ":", "[", "bg", "break", "caller", "cd", "continue", "dirs", "disown", "echo", "false", "fg", "hash", "help",
    "jobs", "popd", "printf", "pushd", "pwd", "set", "shift", "shopt", "test", "times", "true", "type", "ulimit",
    "umask", "wait",
];

/// Bash's other builtins and the reserved words the grammar reads as a command name: each means `Full`
/// unless read below (`read`, `mapfile`, `readarray`; the declaration builtins and `unset` have their own
/// nodes).
const OTHER_BUILTINS: &[&str] = &[
    ".", "alias", "bind", "builtin", "command", "compgen", "complete", "compopt", "coproc", "declare", "enable",
    "eval", "exec", "exit", "export", "fc", "function", "getopts", "history", "kill", "let", "local", "logout",
    "readonly", "return", "select", "source", "suspend", "time", "trap", "typeset", "unalias", "unset",
];

/// Node kinds that only group others: their children are read.
const GROUPS: &[&str] = &[
    "program",
    "list",
    "pipeline",
    "redirected_statement",
    "do_group",
    "if_statement",
    "elif_clause",
    "else_clause",
    "while_statement",
    "case_statement",
    "case_item",
    "string",
    "concatenation",
    "file_redirect",
    "herestring_redirect",
    "heredoc_body",
    "translated_string",
    "negated_command",
    "variable_assignments",
    "binary_expression",
    "unary_expression",
    "parenthesized_expression",
    "command_name",
];

/// Leaf kinds: plain text, unless the grammar left an expansion unread inside (`$` or a backquote).
const LEAVES: &[&str] = &[
    "word",
    "number",
    "regex",
    "extglob_pattern",
    "string_content",
    "heredoc_content",
    "heredoc_start",
    "heredoc_end",
    "file_descriptor",
    "test_operator",
    "special_variable_name",
    "variable_name",
];

impl<'a> Reader<'a> {
    fn text(&self, n: Node<'_>) -> &'a str {
        let src: &'a [u8] = self.src;
        n.utf8_text(src).unwrap_or("\u{0}")
    }

    /// The record's attribute letters of variable `name` (empty when it has none or is not recorded).
    fn flags(&self, name: &str) -> String {
        self.base.get(&format!("var:{name}")).map_or_else(String::new, |v| crate::shell::record::flags(v))
    }

    fn nameref(&self, name: &str) -> bool {
        self.flags(name).contains('n')
    }

    fn integer(&self, name: &str) -> bool {
        self.flags(name).contains('i')
    }

    /// A subscript that is not arithmetic: a number, `@` or `*`, or a plain key of an associative array.
    fn plain_index(&self, name: &str, index: &str) -> bool {
        let assoc = self.flags(name).contains('A') && !index.is_empty() && !index.contains(['$', '`', '\\']);
        assoc || matches!(index, "@" | "*") || numeric(index)
    }

    /// `name` may change (be assigned, exported, unset).
    fn target(&mut self, name: &str) -> Read {
        if !valid_name(name) || name.starts_with("__heddle_") || self.nameref(name) {
            return Err(Full); // a nameref's assignment changes the variable it names
        }
        if !bash_owned(name) {
            self.names.insert(name.to_owned());
        }
        Ok(())
    }

    /// `name` is assigned `value` (`None`: not known from the text alone).
    fn assigned(&mut self, name: &str, value: Option<&str>) -> Read {
        if self.integer(name) && !value.is_some_and(numeric) {
            return Err(Full); // the value is evaluated as arithmetic, which can assign any variable
        }
        self.target(name)
    }

    fn children(&mut self, n: Node) -> Read {
        let mut c = n.walk();
        let kids: Vec<Node> = n.named_children(&mut c).collect();
        kids.into_iter().try_for_each(|k| self.node(k))
    }

    /// Any node: what running it can change.
    fn node(&mut self, n: Node) -> Read {
        if n.is_error() || n.is_missing() {
            return Err(Full);
        }
        let kind = n.kind();
        match kind {
            // Their own process: nothing they do reaches this shell (`$((…))` was ruled out before).
            "command_substitution" | "process_substitution" | "subshell" => Ok(()),
            "command" => self.command(n),
            "declaration_command" => self.declaration(n),
            "unset_command" => self.unset(n),
            "variable_assignment" => self.assignment(n),
            "for_statement" => self.for_loop(n),
            "compound_statement" => match n.child(0).is_some_and(|c| c.kind() == "{") {
                true => self.children(n),
                false => Err(Full), // `((…))`
            },
            "test_command" => self.test(n),
            "expansion" => self.expansion(n),
            "simple_expansion" => self.children(n),
            "raw_string" | "ansi_c_string" | "comment" => Ok(()),
            "heredoc_redirect" => self.heredoc(n),
            k if LEAVES.contains(&k) => self.leaf(n),
            k if GROUPS.contains(&k) => {
                if braced_name(self.text(n)) {
                    return Err(Full); // `{fd}>file` assigns fd
                }
                self.children(n)
            }
            _ => Err(Full), // function definitions, arithmetic, and anything this reading does not know
        }
    }

    fn leaf(&mut self, n: Node) -> Read {
        let text = self.text(n);
        if text.contains(['$', '`']) || braced_name(text) {
            return Err(Full);
        }
        if matches!(n.kind(), "variable_name") && self.nameref(text) {
            return Err(Full); // reading a nameref evaluates the subscript it may name
        }
        Ok(())
    }

    /// A here-document: with its delimiter unquoted, its body expands (a body the grammar found no
    /// expansion in, but holding `$` or a backquote, is `Full`).
    fn heredoc(&mut self, n: Node) -> Read {
        let mut c = n.walk();
        let kids: Vec<Node> = n.named_children(&mut c).collect();
        let quoted = kids.iter().any(|k| k.kind() == "heredoc_start" && self.text(*k).contains(['\'', '"', '\\']));
        for k in kids {
            let unread = k.kind() == "heredoc_body" && k.named_child_count() == 0 && self.text(k).contains(['$', '`']);
            match k.kind() {
                "heredoc_body" if quoted => {}
                _ if unread => return Err(Full),
                _ => self.node(k)?,
            }
        }
        Ok(())
    }

    fn command(&mut self, n: Node) -> Read {
        self.children(n)?;
        let mut c = n.walk();
        let kids: Vec<Node> = n.named_children(&mut c).collect();
        let Some(at) = kids.iter().position(|k| k.kind() == "command_name") else { return Ok(()) };
        let name = self.text(kids[at]);
        let plain = |b: u8| b.is_ascii_alphanumeric() || b"_./+:@%,^-[".contains(&b);
        if name.is_empty() || !name.bytes().all(plain) {
            return Err(Full);
        }
        if self.base.contains_key(&format!("func:{name}")) || self.base.contains_key(&format!("alias:{name}")) {
            return Err(Full);
        }
        let redirect = |k: &Node| k.kind().ends_with("_redirect");
        let args: Vec<&str> = kids[at + 1..].iter().filter(|k| !redirect(k)).map(|k| self.text(*k)).collect();
        match name {
            "set" if args.iter().any(|a| a.contains('k')) => Err(Full), // `set -k`, `set -o keyword`
            "wait" if args.iter().any(|a| a.starts_with('-') && a.contains('p')) => Err(Full),
            "test" | "[" if args.iter().any(|a| matches!(*a, "-v" | "-R")) => Err(Full), // `-v A[i++]`
            "printf" => match args.first().is_some_and(|a| a.starts_with("-v")) {
                true if args[0] == "-v" && args.len() > 1 => self.assigned(args[1], None),
                true => Err(Full),
                false => Ok(()),
            },
            n if INERT_BUILTINS.contains(&n) => Ok(()),
            "read" => self.read(&args),
            "mapfile" | "readarray" => self.mapfile(&args),
            n if OTHER_BUILTINS.contains(&n) => Err(Full),
            _ => Ok(()), // a program: it cannot change this shell
        }
    }

    /// `export`/`declare`/`typeset`/`local`/`readonly`: options, then `NAME` or `NAME=VALUE`.
    fn declaration(&mut self, n: Node) -> Read {
        let allowed: &[u8] = match n.child(0).map(|c| c.kind()) {
            Some("export") => b"np",
            Some("declare" | "typeset" | "local" | "readonly") => b"xrpaAlutg",
            _ => return Err(Full),
        };
        let mut c = n.walk();
        let kids: Vec<Node> = n.named_children(&mut c).collect();
        for k in kids {
            match k.kind() {
                "variable_assignment" => self.assignment(k)?,
                "variable_name" => self.target(self.text(k))?,
                "word" => {
                    let t = self.text(k);
                    let letters = t.strip_prefix('-').or_else(|| t.strip_prefix('+')).ok_or(Full)?;
                    if !letters.bytes().all(|b| allowed.contains(&b)) {
                        return Err(Full);
                    }
                }
                _ => return Err(Full),
            }
        }
        Ok(())
    }

    fn unset(&mut self, n: Node) -> Read {
        if n.child(0).map(|c| c.kind()) != Some("unset") {
            return Err(Full); // `unsetenv`
        }
        let mut c = n.walk();
        let kids: Vec<Node> = n.named_children(&mut c).collect();
        for k in kids {
            let t = self.text(k);
            match k.kind() {
                "word" if t == "-v" => {}
                // Without `-v`, `unset NAME` removes the function NAME when no variable NAME is set.
                "variable_name" if !self.base.contains_key(&format!("func:{t}")) => self.target(t)?,
                _ => return Err(Full),
            }
        }
        Ok(())
    }

    fn assignment(&mut self, n: Node) -> Read {
        let mut c = n.walk();
        let kids: Vec<Node> = n.named_children(&mut c).collect();
        let (target, values) = kids.split_first().ok_or(Full)?;
        let name = match target.kind() {
            "variable_name" => self.text(*target),
            "subscript" => {
                let mut c = target.walk();
                let parts: Vec<Node> = target.named_children(&mut c).collect();
                match parts.as_slice() {
                    [name, index]
                        if name.kind() == "variable_name" && self.plain_index(self.text(*name), self.text(*index)) =>
                    {
                        self.text(*name)
                    }
                    _ => return Err(Full), // the subscript is arithmetic
                }
            }
            _ => return Err(Full),
        };
        let append = (0..n.child_count()).filter_map(|i| n.child(i)).any(|k| k.kind() == "+=");
        for v in values {
            match v.kind() {
                "array" => self.array(*v)?,
                _ => self.node(*v)?,
            }
        }
        let literal = match values {
            [] => Some(""),
            [v] if !append && matches!(v.kind(), "number" | "word") => Some(self.text(*v)),
            _ => None,
        };
        self.assigned(name, literal)
    }

    /// `(a b [3]=c)`: elements as words; a subscript must be a number (in an indexed array it is
    /// arithmetic).
    fn array(&mut self, n: Node) -> Read {
        let mut c = n.walk();
        let kids: Vec<Node> = n.named_children(&mut c).collect();
        for k in kids {
            let t = self.text(k);
            if let Some(rest) = t.strip_prefix('[') {
                let key = rest.split(']').next().unwrap_or_default();
                if !numeric(key) {
                    return Err(Full);
                }
            }
            self.node(k)?;
        }
        Ok(())
    }

    /// `for NAME in WORDS; do …; done` (`select` also sets `REPLY`, and reads stdin: `Full`).
    fn for_loop(&mut self, n: Node) -> Read {
        if n.child(0).map(|c| c.kind()) != Some("for") {
            return Err(Full);
        }
        let mut c = n.walk();
        let kids: Vec<Node> = n.named_children(&mut c).collect();
        let (name, rest) = kids.split_first().ok_or(Full)?;
        if name.kind() != "variable_name" {
            return Err(Full);
        }
        self.assigned(self.text(*name), None)?;
        rest.iter().try_for_each(|k| self.node(*k))
    }

    /// `[ … ]` and `test` compare numbers as numbers; `[[ … ]]` evaluates `-eq`…`-ge` operands as
    /// arithmetic; all three evaluate a `-v A[…]` subscript.
    fn test(&mut self, n: Node) -> Read {
        let double = n.child(0).map(|c| c.kind()) == Some("[[");
        let mut stack = vec![n];
        while let Some(x) = stack.pop() {
            let op = self.text(x);
            let arithmetic = matches!(op, "-eq" | "-ne" | "-lt" | "-le" | "-gt" | "-ge");
            if x.kind() == "test_operator" && (double && arithmetic || matches!(op, "-v" | "-R")) {
                return Err(Full);
            }
            let mut c = x.walk();
            stack.extend(x.named_children(&mut c));
        }
        self.children(n)
    }

    /// `${…}`: reading a parameter, with a default, an alternative, a pattern removed or replaced, a case
    /// change, or its length. `${X:=…}`, `${!X}`, `${X:1:2}`, `${X@…}` and non-numeric subscripts are
    /// `Full`.
    fn expansion(&mut self, n: Node) -> Read {
        const OPERATORS: &[&str] = &[
            "${", "}", "#", "##", "%", "%%", "/", "//", "/#", "/%", ":-", "-", ":+", "+", ":?", "?", "^", "^^", ",",
            ",,",
        ];
        for i in 0..n.child_count() {
            let Some(k) = n.child(i) else { return Err(Full) };
            if !k.is_named() {
                if !OPERATORS.contains(&k.kind()) {
                    return Err(Full);
                }
                continue;
            }
            if k.kind() == "subscript" {
                let mut c = k.walk();
                let parts: Vec<Node> = k.named_children(&mut c).collect();
                match parts.as_slice() {
                    [name, index]
                        if name.kind() == "variable_name" && self.plain_index(self.text(*name), self.text(*index)) =>
                    {
                        self.leaf(*name)?
                    }
                    _ => return Err(Full),
                }
                continue;
            }
            self.node(k)?;
        }
        Ok(())
    }

    fn read(&mut self, args: &[&str]) -> Read {
        let mut it = args.iter();
        let mut named = false;
        while let Some(a) = it.next() {
            let Some(cluster) = a.strip_prefix('-').filter(|c| !c.is_empty()) else {
                named = true;
                self.assigned(a, None)?;
                continue;
            };
            for (i, c) in cluster.char_indices() {
                match c {
                    'r' | 's' | 'e' => {}
                    'a' | 'd' | 'i' | 'n' | 'N' | 'p' | 't' | 'u' => {
                        let attached = &cluster[i + 1..];
                        let value = match attached.is_empty() {
                            true => *it.next().ok_or(Full)?,
                            false => attached,
                        };
                        if c == 'a' {
                            named = true;
                            self.assigned(value, None)?;
                        }
                        break;
                    }
                    _ => return Err(Full),
                }
            }
        }
        match named {
            true => Ok(()),
            false => self.assigned("REPLY", None),
        }
    }

    fn mapfile(&mut self, args: &[&str]) -> Read {
        let mut it = args.iter();
        let mut target = None;
        while let Some(a) = it.next() {
            match *a {
                "-t" => {}
                "-d" | "-n" | "-O" | "-s" | "-u" => {
                    it.next().ok_or(Full)?;
                }
                a if a.starts_with('-') || target.is_some() => return Err(Full),
                a => target = Some(a),
            }
        }
        self.assigned(target.unwrap_or("MAPFILE"), None)
    }
}

/// `{NAME}`: before a redirection, it assigns NAME the file descriptor.
fn braced_name(text: &str) -> bool {
    text.strip_prefix('{').and_then(|t| t.strip_suffix('}')).is_some_and(valid_name)
}

fn numeric(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn base() -> Items {
        let mut b = Items::new();
        b.insert("var:N".into(), b"declare -i N=\"3\"".to_vec());
        b.insert("var:R".into(), b"declare -n R=\"A[i++]\"".to_vec());
        b.insert("func:build".into(), b"build () \n{ \n    make\n}".to_vec());
        b.insert("alias:ll".into(), b"ls -l".to_vec());
        b
    }

    fn names(v: &[&str]) -> Option<Vec<String>> {
        Some(v.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn programs_and_inert_builtins_change_nothing_a_scoped_capture_misses() {
        let b = base();
        for (cmd, want) in [
            ("ls -la", &[][..]),
            ("cd 'my dir' && cargo build --release 2>&1 | tail -20", &[]),
            ("git status --short | head -n 20; grep -rn \"fn main\" --include='*.rs' . | wc -l", &[]),
            ("echo \"$HOME/${USER:-nobody}\" ${#PATH} ${A[@]} ${A[3]} ${X%.rs} ${X//a/b} $(cd /; x=1) `y=2`", &[]),
            ("set -euo pipefail; shopt -s globstar nullglob; umask 077; pushd /tmp; popd", &[]),
            ("cat <<'EOF'\n$x ${y:=1} `z`\nEOF\ncat <<EOF\n$HOME $(date)\nEOF", &[]),
            ("ls # $x `y` ${z:=1}", &[]),
            ("(cd /; export X=1; f() { :; })", &[]),
            (
                "if [[ -f Cargo.toml && $X == y* ]]; then make; elif test -d x; then :; else exit_code=1 true; fi",
                &["exit_code"],
            ),
            ("while false; do :; done; case $X in a|b) echo a;; *) echo b;; esac", &[]),
            ("python3 - <<< 'print(1)' > out.txt 2>&1 < /dev/null", &[]),
            ("FOO=1 BAR=2 env | sort", &["BAR", "FOO"]),
        ] {
            assert_eq!(scope(cmd, &b), names(want), "{cmd}");
        }
    }

    #[test]
    fn assignments_name_their_variables() {
        let b = base();
        for (cmd, want) in [
            ("X=1", &["X"][..]),
            ("A[3]=x; B=(1 2 [5]=3); C+=y", &["A", "B", "C"]),
            ("for f in *.rs; do wc -l \"$f\"; done", &["f"]),
            ("while IFS= read -r line; do echo \"$line\"; done < f", &["IFS", "line"]),
            ("read; read -rd '' -a arr; read -p prompt x y", &["REPLY", "arr", "x", "y"]),
            ("mapfile -t lines < f; readarray", &["MAPFILE", "lines"]),
            ("printf -v out '%s' 1", &["out"]),
            (
                "export PATH=\"$HOME/bin:$PATH\" EDITOR; declare -x -r Y=1; unset Z; unset -v W",
                &["EDITOR", "PATH", "W", "Y", "Z"],
            ),
            ("cd /tmp", &[]),
            ("N=42", &["N"]),
            ("OPTIND=1 RANDOM=4 __x=1", &["__x"]),
        ] {
            assert_eq!(scope(cmd, &b), names(want), "{cmd}");
        }
    }

    #[test]
    fn anything_else_is_captured_in_full() {
        let b = base();
        for cmd in [
            "source env.sh",
            ". env.sh",
            "eval \"$X\"",
            "build",
            "ll",
            "f() { X=1; }; f",
            "alias g=git",
            "unset build",
            "unset -f build",
            "echo $((i++))",
            "echo $[i+1]",
            "((i++))",
            "for ((i=0; i<3; i++)); do :; done",
            "[[ $X -eq 3 ]]",
            "[[ -v A[i++] ]]",
            "echo ${X:=1}",
            "echo ${X:1:2}",
            "echo ${!X}",
            "echo ${X@P}",
            "echo ${A[i]}",
            "echo $R",
            "R=1",
            "N=i++",
            "N+=1",
            "read N",
            "A[i]=1",
            "declare -i X=1",
            "declare -n Y=X",
            "export -f build",
            "exec 3>file",
            "exit 7",
            "trap 'X=1' ERR",
            "kill -9 $$",
            "let x=1",
            "command cd /",
            "builtin export X",
            "set -k",
            "wait -n -p pid",
            "printf -vout x",
            "$CMD arg",
            "\"cd\" /",
            "coproc cat",
            "getopts ab opt",
            "exec {fd}>file",
            "echo {fd}>file",
            "echo 'unterminated",
            "__heddle_n=()",
        ] {
            assert_eq!(scope(cmd, &b), None, "{cmd}");
        }
        assert_eq!(scope(&"(".repeat(MAX_NESTING + 1), &b), None);
        assert_eq!(scope(&format!("echo {}", "a".repeat(MAX_READ)), &b), None);
        let mut reserved = Items::new();
        reserved.insert("alias:if".into(), b"echo".to_vec());
        assert_eq!(scope("ls", &reserved), None);
    }

    #[test]
    fn a_scoped_capture_lists_oldpwd_first() {
        assert_eq!(listed(&["A".into(), "OLDPWD".into(), "B".into()]), ["OLDPWD", "A", "B"]);
    }

    proptest! {
        #[test]
        fn garbage_never_panics(cmd in "[ -~\\n]{0,80}") {
            let _ = scope(&cmd, &base());
        }

        #[test]
        fn shell_shaped_garbage_never_panics(parts in proptest::collection::vec(
            prop_oneof!["\\$\\(", "\\)", "\\$\\{", "\\}", "\\[\\[", "\\]\\]", "<<", "EOF\n", "'", "\"", "`", ";", "&&",
                "\\|", "[a-z=]{1,4}", " ", "\\(\\(", "\\$\\(\\(", "for ", "do ", "done", "case ", "esac"], 0..24)) {
            let _ = scope(&parts.concat(), &base());
        }
    }
}

#[cfg(test)]
mod depth {
    #[test]
    fn the_deepest_command_read_fits_a_small_stack() {
        let n = super::MAX_NESTING / 2;
        let cmds = [
            "(".repeat(n * 2),
            format!("{}true{}", "( ".repeat(n * 2), " )".repeat(n * 2)),
            format!("{}true{}", "{ ".repeat(n * 2), "; }".repeat(n * 2)),
            format!("echo {}x{}", "$(".repeat(n), ")".repeat(n)),
            format!("echo \"{}x{}\"", "${X:-".repeat(n), "}".repeat(n)),
            format!("{}true{}", "if true; then ".repeat(n * 2), "; fi".repeat(n * 2)),
            format!("{}x{}", "[[ ".repeat(n), " ]]".repeat(n)),
        ];
        for cmd in cmds {
            let base = shm_proto::capture::Items::new();
            let t = std::thread::Builder::new().stack_size(256 * 1024).spawn(move || super::scope(&cmd, &base));
            t.unwrap().join().unwrap();
        }
    }
}
