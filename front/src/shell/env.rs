//! Environment-borne restore: the parts of a state record that reach a fresh bash through its
//! environment instead of through the restore script.
//!
//! Bash imports environment entries at startup far more cheaply than it parses the same definitions from
//! a script (see docs/architecture.md, "Shell state"). So a job's restore is split:
//! - an exported variable with no other attribute whose `declare -p` value is a plain `"…"` string
//!   becomes an environment entry `NAME=value` (bash imports it exported, as it was);
//! - an exported function (`export -f`, a `fexport:` item) becomes a `BASH_FUNC_NAME%%=() { …` entry
//!   (bash imports it as an exported function, as it was);
//! - everything else (other variables, arrays, attributes, functions that are not exported, aliases,
//!   options, cwd, umask, the directory stack) stays in the script.
//!
//! Only what the session exported travels here: a process's initial environment stays readable in
//! `/proc/<pid>/environ` for its whole life (by its uid and root), so unexported state, which the user
//! kept from child processes, must not be put there (the script reaches bash through its private state
//! memfd, see `worker::state`). What is exported is in the environment of every program the job starts
//! anyway.
//!
//! Functions all stay in the script when any of them holds a heredoc (a heredoc body can imitate a
//! function start and split one function into two items, which only their concatenation restores), or
//! when one is named like a command the restore script itself runs. A function whose text looks like it
//! uses extglob patterns stays in the script too (bash parses imported functions before any `shopt`).
//! Variables bash treats specially at startup (`IFS`, `PS4`, `OLDPWD`, …) stay in the script.
//!
//! ```
//! use front::shell::env::split;
//! let mut items = shm_proto::capture::Items::new();
//! items.insert("var:A".into(), b"declare -x A=\"a \\\"b\\\" \\$c\"".to_vec());
//! items.insert("func:f".into(), b"f () \n{ \n    echo hi\n}\n".to_vec());
//! items.insert("fexport:f".into(), Vec::new());
//! items.insert("func:g".into(), b"g () \n{ \n    echo not exported\n}\n".to_vec());
//! let r = split(&items);
//! assert_eq!(r.env, [("A".to_owned(), "a \"b\" $c".to_owned()), ("BASH_FUNC_f%%".to_owned(), "() { \n    echo hi\n}\n".to_owned())]);
//! assert_eq!(r.funcs, ["f"]);
//! ```

use shm_proto::capture::{valid_name, Items};
use std::collections::BTreeSet;

/// What travels in the environment.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct EnvBorne {
    /// Entries for the job's environment (they override the job environment's own).
    pub env: Vec<(String, String)>,
    /// Variables carried in `env` (not in the script).
    pub vars: BTreeSet<String>,
    /// Functions carried in `env` (all of them exported ones).
    pub funcs: Vec<String>,
}

/// Variables bash reads or resets specially at startup: restored by the script. (A non-interactive bash
/// drops an inherited `PS1` and `PS2`: a venv's `activate` exports `PS1`, and the next job lost it.)
const SCRIPT_ONLY: &[&str] = &["OLDPWD", "IFS", "PS1", "PS2", "PS4", "POSIXLY_CORRECT", "ENV", "CDPATH", "GLOBIGNORE"];

/// Commands the restore script runs: a function of that name would take their place once imported.
const RESTORE_COMMANDS: &[&str] =
    &["declare", "builtin", "cd", "umask", "unset", "shopt", "set", "alias", "pushd", "export", "eval", "printf"];

/// Decide what of `items` goes through the environment.
pub fn split(items: &Items) -> EnvBorne {
    let mut r = EnvBorne::default();
    for (k, v) in items.range("var:".to_owned().."var;".to_owned()) {
        let name = &k[4..];
        if SCRIPT_ONLY.contains(&name) {
            continue;
        }
        if let Some(value) = exported_value(name, v) {
            r.env.push((name.to_owned(), value));
            r.vars.insert(name.to_owned());
        }
    }
    let funcs: Vec<(&str, &Vec<u8>)> =
        items.range("func:".to_owned().."func;".to_owned()).map(|(k, v)| (&k[5..], v)).collect();
    let blocked = funcs.iter().any(|(n, v)| contains(v, b"<<") || RESTORE_COMMANDS.contains(n));
    if blocked {
        return r;
    }
    for (name, text) in funcs {
        if !items.contains_key(&format!("fexport:{name}")) {
            continue; // not exported: the script defines it (see the module docs)
        }
        let Some(value) = function_value(name, text) else { continue };
        r.env.push((format!("BASH_FUNC_{name}%%"), value));
        r.funcs.push(name.to_owned());
    }
    r
}

/// `declare -x NAME="…"` → the value, when it is that simple form and decodes to UTF-8.
fn exported_value(name: &str, line: &[u8]) -> Option<String> {
    let quoted = line.strip_prefix(format!("declare -x {name}=").as_bytes())?;
    let inner = quoted.strip_prefix(b"\"")?.strip_suffix(b"\"")?;
    let mut out = Vec::with_capacity(inner.len());
    let mut it = inner.iter();
    while let Some(&c) = it.next() {
        match c {
            b'\\' => match it.next() {
                Some(&e @ (b'"' | b'\\' | b'$' | b'`')) => out.push(e),
                _ => return None,
            },
            b'"' | b'$' | b'`' => return None,
            _ => out.push(c),
        }
    }
    String::from_utf8(out).ok()
}

/// `NAME () ⏎{ …` → `() { …`, for a plain function that bash can import before any `shopt`.
fn function_value(name: &str, text: &[u8]) -> Option<String> {
    if !valid_name(name) {
        return None;
    }
    let body = text.strip_prefix(format!("{name} () \n{{").as_bytes())?;
    if [b"?(", b"*(", b"+(", b"@(", b"!("].iter().any(|p| contains(body, *p)) {
        return None;
    }
    let text = std::str::from_utf8(body).ok()?;
    Some(format!("() {{{text}"))
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn items(kv: &[(&str, &str)]) -> Items {
        kv.iter().map(|(k, v)| (k.to_string(), v.as_bytes().to_vec())).collect()
    }

    #[test]
    fn only_simple_exported_values_travel() {
        let it = items(&[
            ("var:A", "declare -x A=\"1\""),
            ("var:B", "declare -- B=\"2\""),
            ("var:C", "declare -xi C=\"3\""),
            ("var:D", "declare -x D=$'a\\nb'"),
            ("var:E", "declare -x E"),
            ("var:OLDPWD", "declare -x OLDPWD=\"/\""),
            ("var:F", ""),
        ]);
        let r = split(&it);
        assert_eq!(r.env, [("A".to_owned(), "1".to_owned())]);
    }

    #[test]
    fn heredocs_or_shadowing_names_keep_functions_in_the_script() {
        let (f, fx) = (("func:f", "f () \n{ \n    :\n}\n"), ("fexport:f", ""));
        assert_eq!(split(&items(&[f, fx])).funcs, ["f"]);
        assert!(split(&items(&[f, fx, ("func:g", "g () \n{ \n    cat <<E\nx\nE\n}\n")])).funcs.is_empty());
        assert!(split(&items(&[f, fx, ("func:cd", "cd () \n{ \n    :\n}\n")])).funcs.is_empty());
        let x = [("func:x", "x () \n{ \n    [[ a == @(a|b) ]]\n}\n"), ("fexport:x", "")];
        assert!(split(&items(&x)).funcs.is_empty());
    }

    #[test]
    fn functions_that_are_not_exported_never_travel_in_the_environment() {
        let it = items(&[("func:f", "f () \n{ \n    echo token-123\n}\n"), ("var:T", "declare -- T=\"s3cret\"")]);
        assert_eq!(split(&it), EnvBorne::default(), "/proc/PID/environ would show them for the job's life");
    }

    proptest! {
        #[test]
        fn decoding_inverts_bash_double_quoting(v in "[ -~]{0,40}") {
            let mut q = String::new();
            for c in v.chars() {
                if matches!(c, '"' | '\\' | '$' | '`') {
                    q.push('\\');
                }
                q.push(c);
            }
            let line = format!("declare -x V=\"{q}\"");
            prop_assert_eq!(exported_value("V", line.as_bytes()), Some(v));
        }

        #[test]
        fn garbage_never_panics(v in proptest::collection::vec(any::<u8>(), 0..128)) {
            let _ = exported_value("V", &v);
            let _ = function_value("f", &v);
        }
    }
}
