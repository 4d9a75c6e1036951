//! The shell-state capture: the byte format bash writes at the end of a state-carrying job (through the
//! worker) and the front parses. This module owns all of it: the bash text that writes it
//! ([`heddle_state_capture!`](crate::heddle_state_capture), [`heddle_scoped_capture!`](crate::heddle_scoped_capture),
//! used by the worker's wrappers and its persistent shell), the section tags ([`tag`]), the end marker
//! ([`END_MARKER`], which the worker checks before it forwards a capture), the parser the front uses
//! ([`parse`], [`parse_capture`]), and a writer in Rust ([`write()`]) for tests and benchmarks.
//!
//! The capture is NUL-framed sections in a fixed order, each `\0TAG\0` then its content —
//! `O` (`$SHELLOPTS` at the shell's start, NUL, `$SHELLOPTS` after the command), `V` (`declare -p`), `F`
//! (`declare -f`), `X` (`declare -Fx`: the exported functions), `A` (`alias -p`: `alias NAME='VALUE'`
//! lines, the value single-quoted by bash, `'\''` for a quote, newlines kept inside the quotes; `alias --
//! NAME=…` for a name starting with `-`), `D` (directory stack below the top, `dir\0` each),
//! `S` (`$BASHOPTS` at start and after, each NUL-terminated), `U` (`umask`), `P` (`pwd`), `R` (the failed
//! commands: status NUL command NUL each, at most 16; absent in captures of older workers), `E` (end).
//! A scoped capture (`worker::state::scope_line`, `front::shell::scope`) has `N` (the variables asked
//! for, each NUL-terminated) and `W` (their `declare -p` lines, each of one of those names) in place of
//! `V`, `F`, `X` and `A` ([`parse_capture`]).
//! Bash values cannot contain NUL, so no value can forge a frame. The bytes are untrusted (the job's
//! bash wrote them): anything that does not fit the format exactly is an error (and the job's state is
//! then unknown), never a panic.
//!
//! Items (key → value bytes): `cwd` (raw path), `dirstack` (entries joined by NUL), `umask`, `set:NAME`
//! (`-` on, `+` off) and `shopt:NAME` (`s`/`u`) only for options not at bash's default, `var:NAME` (its
//! `declare -p` line), `func:NAME` (its `declare -f` text), `fexport:NAME` (empty: the function is
//! exported), `alias:NAME` (raw value). Variables bash owns are not items (see [`bash_owned`]).
//!
//! ```
//! let cap = b"\0O\0hashall\0errexit:hashall\0V\0declare -x A=\"1\"\n\0F\0\0X\0\0A\0alias ll='ls -l'\n\0D\0\0S\0\0extglob\0\0U\0077\n\0P\0/tmp\n\0E\0";
//! let items = shm_proto::capture::parse(cap).unwrap();
//! assert_eq!(items["var:A"], b"declare -x A=\"1\"");
//! assert_eq!(items["cwd"], b"/tmp");
//! assert_eq!((&items["set:errexit"][..], &items["shopt:extglob"][..]), (&b"-"[..], &b"s"[..]));
//! assert!(!items.contains_key("set:hashall"), "options at their default are not items");
//! ```

/// The sections' tags: each section starts with `\0TAG\0`. The bash text of
/// [`heddle_state_capture!`](crate::heddle_state_capture) spells the same letters (it must be string
/// literals); this module's tests run it through bash and parse what it wrote.
pub mod tag {
    /// `$SHELLOPTS` at the shell's start, NUL, `$SHELLOPTS` after the command.
    pub const SET: u8 = b'O';
    /// `declare -p` (full capture).
    pub const VARIABLES: u8 = b'V';
    /// `declare -f` (full capture).
    pub const FUNCTIONS: u8 = b'F';
    /// `declare -Fx` (full capture).
    pub const EXPORTED_FUNCTIONS: u8 = b'X';
    /// `alias -p` (full capture).
    pub const ALIASES: u8 = b'A';
    /// The variables a scoped capture lists, each NUL-terminated.
    pub const SCOPE_NAMES: u8 = b'N';
    /// `declare -p NAME…` of the scoped names.
    pub const SCOPE_VARIABLES: u8 = b'W';
    /// The directory stack below its top, each entry NUL-terminated.
    pub const DIRSTACK: u8 = b'D';
    /// `$BASHOPTS` at the shell's start and after the command, each NUL-terminated.
    pub const SHOPT: u8 = b'S';
    /// `umask`.
    pub const UMASK: u8 = b'U';
    /// `pwd`.
    pub const PWD: u8 = b'P';
    /// The failed commands: status NUL command NUL each.
    pub const FAILURES: u8 = b'R';
    /// The end: a capture without it was cut short.
    pub const END: u8 = b'E';
}

/// The marker that ends a complete capture.
pub const END_MARKER: &[u8] = &[0, tag::END, 0];

/// The capture after `$__heddle_o` (options at start) and `$__heddle_p` (options now) are set, up to and
/// including the end marker, written to fd 4 (shared by the worker's wrappers and its persistent shell's
/// loop; `$__heddle_b` holds `$BASHOPTS` at start, the array `__heddle_e` the failed commands).
/// Lists go through `printf '%s\0'`, which repeats its format for every argument: one builtin call (and
/// one `write`) per list instead of a loop, which costs bash ~9 µs per element.
#[macro_export]
macro_rules! heddle_state_capture {
    () => {
        concat!(
            "{ builtin printf '\\0O\\0%s\\0%s\\0V\\0' \"$__heddle_o\" \"$__heddle_p\"; builtin declare -p;",
            " builtin printf '\\0F\\0'; builtin declare -f; builtin printf '\\0X\\0'; builtin declare -Fx;",
            " builtin printf '\\0A\\0'; builtin alias -p;",
            $crate::heddle_capture_rest!(),
        )
    };
}

/// The scoped capture ([`RunSpec::capture_only`](crate::msg::RunSpec::capture_only)): the variables
/// named in the array `__heddle_n` (their names first, then their `declare -p` lines: a name without a
/// line is unset), none of `declare -p`, `declare -f`, `alias -p`; the rest as in the full capture.
#[macro_export]
macro_rules! heddle_scoped_capture {
    () => {
        concat!(
            "{ builtin printf '\\0O\\0%s\\0%s\\0N\\0' \"$__heddle_o\" \"$__heddle_p\";",
            " builtin printf '%s\\0' \"${__heddle_n[@]}\" '' W; builtin declare -p \"${__heddle_n[@]}\";",
            $crate::heddle_capture_rest!(),
        )
    };
}

/// The common end of both captures: directory stack, shell options, umask, working directory, failed
/// commands, end marker.
#[macro_export]
#[doc(hidden)]
macro_rules! heddle_capture_rest {
    () => {
        concat!(
            " builtin printf '%s\\0' '' D \"${DIRSTACK[@]:1}\"",
            " '' S \"$__heddle_b\" \"$BASHOPTS\" '' U; builtin umask; builtin printf '\\0P\\0'; builtin pwd;",
            " builtin printf '%s\\0' '' R \"${__heddle_e[@]}\"; builtin printf '\\0E\\0'; } >&4;",
        )
    };
}

/// The full capture's bash text ([`heddle_state_capture!`](crate::heddle_state_capture)).
pub const FULL_CAPTURE: &str = crate::heddle_state_capture!();
/// The scoped capture's bash text ([`heddle_scoped_capture!`](crate::heddle_scoped_capture)).
pub const SCOPED_CAPTURE: &str = crate::heddle_scoped_capture!();

use std::collections::BTreeMap;

/// A session's state items: key → exact value bytes.
pub type Items = BTreeMap<String, Vec<u8>>;

/// Why a capture could not be read.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CaptureError {
    #[error("the capture lacks its {0} section")]
    Missing(&'static str),
    #[error("the capture has an unexpected line in its {section} section: {line:?}")]
    BadLine { section: &'static str, line: String },
}

struct Cursor<'a> {
    rest: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn tag(&mut self, tag: u8, name: &'static str) -> Result<(), CaptureError> {
        match self.rest.strip_prefix(&[0, tag, 0][..]) {
            Some(r) => {
                self.rest = r;
                Ok(())
            }
            None => Err(CaptureError::Missing(name)),
        }
    }

    fn at(&self, tag: u8) -> bool {
        self.rest.starts_with(&[0, tag, 0])
    }

    /// Bytes up to the next NUL (not consumed).
    fn text(&mut self) -> &'a [u8] {
        let end = self.rest.iter().position(|b| *b == 0).unwrap_or(self.rest.len());
        let (t, r) = self.rest.split_at(end);
        self.rest = r;
        t
    }

    /// Bytes up to the next NUL, which is consumed.
    fn token(&mut self, name: &'static str) -> Result<&'a [u8], CaptureError> {
        let t = self.text();
        self.rest = self.rest.strip_prefix(b"\0").ok_or(CaptureError::Missing(name))?;
        Ok(t)
    }
}

/// Parse a complete capture (the full one; a scoped capture is an error here: see [`parse_capture`]).
pub fn parse(data: &[u8]) -> Result<Items, CaptureError> {
    match parse_capture(data)? {
        Capture { items, scope: None, .. } => Ok(items),
        Capture { scope: Some(_), .. } => Err(CaptureError::Missing("declare -p")),
    }
}

/// A parsed capture.
#[derive(Debug, PartialEq, Eq)]
pub struct Capture {
    /// The items the capture lists. A scoped capture lists `cwd`, `dirstack`, `umask`, the options, and the
    /// `var:` items of `scope` only (a name in `scope` without an item is unset).
    pub items: Items,
    /// `Some(names)`: a scoped capture (`N` and `W` sections in place of `V`, `F`, `X`, `A`) of these
    /// variables (`worker::state::scope_line`).
    pub scope: Option<Vec<String>>,
    /// The commands that failed while the command ran, with their status, in order (the `R` section:
    /// `worker::state`'s `ERR` trap; at most 16), as `$BASH_COMMAND` wrote them.
    pub failures: Vec<(i32, String)>,
}

/// Parse a complete capture, full or scoped.
pub fn parse_capture(data: &[u8]) -> Result<Capture, CaptureError> {
    let mut items = Items::new();
    let mut c = Cursor { rest: data };
    c.tag(tag::SET, "set -o")?;
    let start = c.token("set -o")?;
    options(start, c.text(), "set:", (b"-", b"+"), &mut items)?;
    let scope = match c.at(tag::SCOPE_NAMES) {
        true => Some(scoped(&mut c, &mut items)?),
        false => {
            full(&mut c, &mut items)?;
            None
        }
    };
    c.tag(tag::DIRSTACK, "dirs")?;
    let mut dirs: Vec<&[u8]> = Vec::new();
    while !c.at(tag::SHOPT) {
        dirs.push(c.token("dirs")?);
    }
    items.insert("dirstack".into(), dirs.join(&b"\0"[..]));
    c.tag(tag::SHOPT, "shopt")?;
    let start = c.token("shopt")?;
    options(start, c.token("shopt")?, "shopt:", (b"s", b"u"), &mut items)?;
    c.tag(tag::UMASK, "umask")?;
    items.insert("umask".into(), trim_newline(c.text()).to_vec());
    c.tag(tag::PWD, "pwd")?;
    items.insert("cwd".into(), trim_newline(c.text()).to_vec());
    let mut failures = Vec::new();
    if c.at(tag::FAILURES) {
        c.tag(tag::FAILURES, "failures")?;
        while !c.at(tag::END) {
            let status = c.token("failures")?;
            let cmd = c.token("failures")?;
            let status = std::str::from_utf8(status).ok().and_then(|s| s.parse().ok());
            let Some(status) = status.filter(|_| failures.len() < 16) else {
                return Err(CaptureError::BadLine { section: "failures", line: lossy(cmd) });
            };
            failures.push((status, String::from_utf8_lossy(cmd).into_owned()));
        }
    }
    c.tag(tag::END, "end")?;
    if !c.rest.is_empty() {
        return Err(CaptureError::BadLine { section: "end", line: lossy(c.rest) });
    }
    Ok(Capture { items, scope, failures })
}

/// The full capture's variables, functions and aliases.
fn full(c: &mut Cursor<'_>, items: &mut Items) -> Result<(), CaptureError> {
    c.tag(tag::VARIABLES, "declare -p")?;
    lines(c.text(), "declare -p", |l| variable(l, items))?;
    c.tag(tag::FUNCTIONS, "declare -f")?;
    functions(c.text(), items);
    c.tag(tag::EXPORTED_FUNCTIONS, "declare -Fx")?;
    lines(c.text(), "declare -Fx", |l| {
        let name = l.strip_prefix(b"declare -fx ").filter(|n| !n.is_empty())?;
        items.insert(format!("fexport:{}", String::from_utf8_lossy(name)), Vec::new());
        Some(())
    })?;
    c.tag(tag::ALIASES, "alias")?;
    aliases(c.text(), items)
}

/// A scoped capture's names (`N`: each NUL-terminated) and their `declare -p` lines (`W`), each of
/// which must be one of the names.
fn scoped(c: &mut Cursor<'_>, items: &mut Items) -> Result<Vec<String>, CaptureError> {
    c.tag(tag::SCOPE_NAMES, "names")?;
    let mut names = Vec::new();
    while !c.at(tag::SCOPE_VARIABLES) {
        let name = c.token("names")?;
        match std::str::from_utf8(name).ok().filter(|n| valid_name(n)) {
            Some(n) => names.push(n.to_owned()),
            None => return Err(CaptureError::BadLine { section: "names", line: lossy(name) }),
        }
    }
    c.tag(tag::SCOPE_VARIABLES, "declare -p NAME")?;
    let mut listed = Items::new();
    lines(c.text(), "declare -p NAME", |l| variable(l, &mut listed))?;
    if let Some(k) = listed.keys().find(|k| !names.iter().any(|n| k[4..] == **n)) {
        return Err(CaptureError::BadLine { section: "declare -p NAME", line: k[4..].to_owned() });
    }
    items.extend(listed);
    Ok(names)
}

/// `alias -p` output: `alias [-- ]NAME='…'` per alias, the value made of `'…'` runs and `\'` (bash's
/// single quoting), ended by a newline outside the quotes.
fn aliases(mut text: &[u8], items: &mut Items) -> Result<(), CaptureError> {
    while !text.is_empty() {
        let (name, value, rest) = alias(text).ok_or_else(|| {
            let line = text.split(|b| *b == b'\n').next().unwrap_or_default();
            CaptureError::BadLine { section: "alias", line: lossy(line) }
        })?;
        items.insert(format!("alias:{}", String::from_utf8_lossy(name)), value);
        text = rest;
    }
    Ok(())
}

/// One `alias -p` entry: (name, value, the text after its newline).
fn alias(text: &[u8]) -> Option<(&[u8], Vec<u8>, &[u8])> {
    let r = text.strip_prefix(b"alias ")?;
    let r = r.strip_prefix(b"-- ").unwrap_or(r);
    let eq = r.iter().position(|b| *b == b'=')?;
    let name = &r[..eq];
    if name.is_empty() || name.iter().any(|b| matches!(b, b'\n' | b' ' | b'\'')) {
        return None;
    }
    let (mut r, mut value) = (&r[eq + 1..], Vec::new());
    loop {
        match r {
            [b'\'', quoted @ ..] => {
                let end = quoted.iter().position(|b| *b == b'\'')?;
                value.extend_from_slice(&quoted[..end]);
                r = &quoted[end + 1..];
            }
            [b'\\', b'\'', rest @ ..] => {
                value.push(b'\'');
                r = rest;
            }
            [b'\n', rest @ ..] => return Some((name, value, rest)),
            _ => return None,
        }
    }
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(&b[..b.len().min(120)]).into_owned()
}

fn trim_newline(b: &[u8]) -> &[u8] {
    b.strip_suffix(b"\n").unwrap_or(b)
}

fn lines(text: &[u8], section: &'static str, mut f: impl FnMut(&[u8]) -> Option<()>) -> Result<(), CaptureError> {
    for line in text.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        f(line).ok_or_else(|| CaptureError::BadLine { section, line: lossy(line) })?;
    }
    Ok(())
}

/// Options as bash lists the enabled ones (`$SHELLOPTS`, `$BASHOPTS`: `a:b:c`), at the shell's start
/// (bash's defaults) and after the command: an item for each option whose state differs from its
/// default (`on` / `off` value). Options left at their default are not items.
fn options(
    start: &[u8],
    end: &[u8],
    key: &str,
    (on, off): (&[u8], &[u8]),
    items: &mut Items,
) -> Result<(), CaptureError> {
    let list = |b: &[u8]| -> Result<std::collections::BTreeSet<String>, CaptureError> {
        let names = b.split(|c| *c == b':').filter(|n| !n.is_empty());
        names
            .map(|n| match n.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'-') {
                true => Ok(String::from_utf8_lossy(n).into_owned()),
                false => Err(CaptureError::BadLine { section: "options", line: lossy(b) }),
            })
            .collect()
    };
    let (start, end) = (list(start)?, list(end)?);
    for name in end.difference(&start) {
        items.insert(format!("{key}{name}"), on.to_vec());
    }
    for name in start.difference(&end) {
        items.insert(format!("{key}{name}"), off.to_vec());
    }
    Ok(())
}

/// One `declare -p` line: `declare -FLAGS NAME[=VALUE]`.
fn variable(line: &[u8], items: &mut Items) -> Option<()> {
    let rest = line.strip_prefix(b"declare -")?;
    let space = rest.iter().position(|b| *b == b' ')?;
    let after = &rest[space + 1..];
    let name_end = after.iter().position(|b| *b == b'=').unwrap_or(after.len());
    let name = std::str::from_utf8(&after[..name_end]).ok()?;
    if !valid_name(name) {
        return None;
    }
    if !bash_owned(name) {
        items.insert(format!("var:{name}"), line.to_vec());
    }
    Some(())
}

/// A shell variable name: `[A-Za-z_][A-Za-z0-9_]*`.
pub fn valid_name(name: &str) -> bool {
    let mut b = name.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// Variables bash sets or owns itself, the wrapper's own, and the ones other items carry (`PWD` is
/// `cwd`, `DIRSTACK` is `dirstack`, `BASH_ALIASES` the `alias:` items): never carried as variables.
pub fn bash_owned(name: &str) -> bool {
    const OWNED: &[&str] = &[
        "_",
        "BASHOPTS",
        "BASHPID",
        "COLUMNS",
        "COMP_WORDBREAKS",
        "DIRSTACK",
        "EPOCHREALTIME",
        "EPOCHSECONDS",
        "EUID",
        "FUNCNAME",
        "GROUPS",
        "HISTCMD",
        "HOSTNAME",
        "HOSTTYPE",
        "LINENO",
        "LINES",
        "MACHTYPE",
        "OPTERR",
        "OPTIND",
        "OSTYPE",
        "PIPESTATUS",
        "PPID",
        "PWD",
        "RANDOM",
        "SECONDS",
        "SHELLOPTS",
        "SHLVL",
        "SRANDOM",
        "UID",
    ];
    name.starts_with("BASH") || name.starts_with("__heddle_") || OWNED.contains(&name)
}

/// Split `declare -f` output into functions. A function starts at a line `NAME () ` followed by `{ `,
/// at the top or after a line `}`. A heredoc body that imitates that shape splits one function in two
/// items; their concatenation, which is what is restored, stays exact.
fn functions(text: &[u8], items: &mut Items) {
    let lines: Vec<&[u8]> = text.split_inclusive(|b| *b == b'\n').collect();
    let mut starts = Vec::new();
    for i in 0..lines.len() {
        let head = lines[i].strip_suffix(b" () \n");
        let brace = lines.get(i + 1).is_some_and(|l| *l == b"{ \n");
        let after_end = i == 0 || lines[i - 1] == b"}\n";
        if let (Some(name), true, true) = (head, brace, after_end) {
            if !name.is_empty() && !name.contains(&b' ') {
                starts.push((i, String::from_utf8_lossy(name).into_owned()));
            }
        }
    }
    for (k, (i, name)) in starts.iter().enumerate() {
        let end = starts.get(k + 1).map_or(lines.len(), |(j, _)| *j);
        items.insert(format!("func:{name}"), lines[*i..end].concat());
    }
}

/// A capture section by section, in the terms bash writes it: what [`write()`] frames. In a job, bash
/// writes the capture ([`FULL_CAPTURE`], [`SCOPED_CAPTURE`]); this is the same format written from Rust,
/// for tests and benchmarks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sections {
    /// `$SHELLOPTS` at the shell's start and after the command (`a:b:c`).
    pub set_options: (String, String),
    /// What lies between the `O` and `D` sections.
    pub body: Body,
    /// The directory stack below its top (no entry holds a NUL).
    pub dirs: Vec<Vec<u8>>,
    /// `$BASHOPTS` at the shell's start and after the command.
    pub shopt_options: (String, String),
    /// `umask`'s output, without its newline.
    pub umask: String,
    /// `pwd`'s output, without its newline.
    pub pwd: Vec<u8>,
    /// The failed commands (status, `$BASH_COMMAND`); `None`: no `R` section (an older worker's capture).
    pub failures: Option<Vec<(i32, Vec<u8>)>>,
}

/// The variables, functions and aliases of a full capture, or a scoped capture's names and lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// `V`, `F`, `X`, `A`.
    Full {
        /// `declare -p`'s output.
        variables: Vec<u8>,
        /// `declare -f`'s output.
        functions: Vec<u8>,
        /// The exported functions' names (`declare -Fx`).
        exported_functions: Vec<String>,
        /// Each alias's name and raw value (written in bash's single quoting, as `alias -p` does).
        aliases: Vec<(String, Vec<u8>)>,
    },
    /// `N`, `W`.
    Scoped {
        /// The variables asked for.
        names: Vec<String>,
        /// `declare -p NAME…`'s output.
        variables: Vec<u8>,
    },
}

impl Default for Body {
    fn default() -> Body {
        Body::Full { variables: Vec::new(), functions: Vec::new(), exported_functions: Vec::new(), aliases: Vec::new() }
    }
}

/// Frame `s` as bash does.
pub fn write(s: &Sections) -> Vec<u8> {
    let mut out = Vec::new();
    let section = |out: &mut Vec<u8>, t: u8| out.extend_from_slice(&[0, t, 0]);
    let nul_each = |out: &mut Vec<u8>, items: &mut dyn Iterator<Item = &[u8]>| {
        for i in items {
            out.extend_from_slice(i);
            out.push(0);
        }
    };
    section(&mut out, tag::SET);
    out.extend_from_slice(s.set_options.0.as_bytes());
    out.push(0);
    out.extend_from_slice(s.set_options.1.as_bytes());
    match &s.body {
        Body::Full { variables, functions, exported_functions, aliases } => {
            section(&mut out, tag::VARIABLES);
            out.extend_from_slice(variables);
            section(&mut out, tag::FUNCTIONS);
            out.extend_from_slice(functions);
            section(&mut out, tag::EXPORTED_FUNCTIONS);
            for name in exported_functions {
                out.extend_from_slice(format!("declare -fx {name}\n").as_bytes());
            }
            section(&mut out, tag::ALIASES);
            for (name, value) in aliases {
                out.extend_from_slice(if name.starts_with('-') { b"alias -- " } else { b"alias " });
                out.extend_from_slice(name.as_bytes());
                out.extend_from_slice(b"='");
                for b in value {
                    match b {
                        b'\'' => out.extend_from_slice(b"'\\''"),
                        b => out.push(*b),
                    }
                }
                out.extend_from_slice(b"'\n");
            }
        }
        Body::Scoped { names, variables } => {
            section(&mut out, tag::SCOPE_NAMES);
            nul_each(&mut out, &mut names.iter().map(|n| n.as_bytes()));
            section(&mut out, tag::SCOPE_VARIABLES);
            out.extend_from_slice(variables);
        }
    }
    section(&mut out, tag::DIRSTACK);
    nul_each(&mut out, &mut s.dirs.iter().map(|d| d.as_slice()));
    section(&mut out, tag::SHOPT);
    nul_each(&mut out, &mut [s.shopt_options.0.as_bytes(), s.shopt_options.1.as_bytes()].into_iter());
    section(&mut out, tag::UMASK);
    out.extend_from_slice(s.umask.as_bytes());
    out.push(b'\n');
    section(&mut out, tag::PWD);
    out.extend_from_slice(&s.pwd);
    out.push(b'\n');
    if let Some(failures) = &s.failures {
        section(&mut out, tag::FAILURES);
        for (status, cmd) in failures {
            nul_each(&mut out, &mut [status.to_string().as_bytes(), cmd.as_slice()].into_iter());
        }
    }
    out.extend_from_slice(END_MARKER);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn capture(vars: &str, funcs: &str, aliases: &[u8], dirs: &[u8]) -> Vec<u8> {
        [
            b"\0O\0hashall:xtrace\0errexit:hashall\0V\0".as_slice(),
            vars.as_bytes(),
            b"\0F\0",
            funcs.as_bytes(),
            b"\0X\0declare -fx g2\n\0A\0",
            aliases,
            b"\0D\0",
            dirs,
            b"\0S\0nullglob:sourcepath\0extglob:sourcepath\0\0U\0",
            b"0077\n\0P\0/a dir/\n\n\0E\0",
        ]
        .concat()
    }

    #[test]
    fn every_section_becomes_items() {
        let vars =
            "declare -x FOO=\"1\"\ndeclare -ar BASH_VERSINFO=([0]=\"5\")\ndeclare -A H=([k]=\"v\" )\ndeclare -- X\n";
        let funcs = "f () \n{ \n    cat <<EOF\nx\ng () \n{ \nEOF\n\n}\ng2 () \n{ \n    :\n}\n";
        let aliases = b"alias -- -d='ls'\nalias e=''\nalias ll='ls -l'\nalias q='it'\\''s a\nb \xff'\n";
        let items = parse(&capture(vars, funcs, aliases, b"/x\0/y\0")).unwrap();
        assert_eq!(items["set:errexit"], b"-");
        assert_eq!(items["set:xtrace"], b"+");
        assert_eq!(items["var:FOO"], b"declare -x FOO=\"1\"");
        assert_eq!(items["var:X"], b"declare -- X");
        assert!(!items.contains_key("var:BASH_VERSINFO"));
        assert_eq!(items["alias:ll"], b"ls -l");
        assert_eq!(items["alias:e"], b"");
        assert_eq!(items["alias:-d"], b"ls");
        assert_eq!(items["alias:q"], b"it's a\nb \xff");
        assert_eq!(items["dirstack"], b"/x\0/y");
        assert_eq!(items["shopt:extglob"], b"s");
        assert_eq!(items["shopt:nullglob"], b"u");
        assert!(!items.contains_key("set:hashall") && !items.contains_key("shopt:sourcepath"));
        assert_eq!((items["umask"].as_slice(), items["cwd"].as_slice()), (&b"0077"[..], &b"/a dir/\n"[..]));
        assert_eq!(items["func:f"], b"f () \n{ \n    cat <<EOF\nx\ng () \n{ \nEOF\n\n}\n", "heredoc is not a start");
        assert_eq!(items["func:g2"], b"g2 () \n{ \n    :\n}\n");
        assert_eq!(items["fexport:g2"], b"");
    }

    #[test]
    fn a_cut_or_forged_capture_is_an_error() {
        let full = capture("declare -- A=\"1\"\n", "", b"alias a='b'\n", b"");
        for cut in 0..full.len() {
            assert!(parse(&full[..cut]).is_err(), "cut at {cut}");
        }
        let mut extra = full.clone();
        extra.extend_from_slice(b"\0V\0declare -- B=\"2\"\n\0E\0");
        assert!(parse(&extra).is_err());
        assert!(parse(&capture("echo hi\n", "", b"", b"")).is_err());
        for bad in [&b"alias x\n"[..], b"alias x='1\n", b"alias ='1'\n", b"alias x='1'", b"alias x=1\n", b"x='1'\n"] {
            assert!(parse(&capture("", "", bad, b"")).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    fn scoped(names: &[u8], lines: &[u8]) -> Vec<u8> {
        [&b"\0O\0\0\0N\0"[..], names, b"\0W\0", lines, b"\0D\0\0S\0\0\0\0U\x00022\n\0P\0/w\n\0E\0"].concat()
    }

    #[test]
    fn a_scoped_capture_lists_its_names_and_only_their_variables() {
        let c =
            parse_capture(&scoped(b"OLDPWD\0X\0GONE\0", b"declare -x OLDPWD=\"/a\"\ndeclare -- X=\"2\"\n")).unwrap();
        assert_eq!(c.scope.as_deref(), Some(&["OLDPWD".to_owned(), "X".to_owned(), "GONE".to_owned()][..]));
        assert_eq!(c.items["var:X"], b"declare -- X=\"2\"");
        assert!(!c.items.contains_key("var:GONE") && c.items["cwd"] == b"/w");
        assert!(parse(&scoped(b"X\0", b"")).is_err(), "parse takes full captures only");
        assert!(parse_capture(&scoped(b"X\0", b"declare -- Y=\"1\"\n")).is_err(), "a line of a name not asked for");
        assert!(parse_capture(&scoped(b"X Y\0", b"")).is_err(), "a name that is no identifier");
        let whole = scoped(b"X\0", b"declare -- X=\"1\"\n");
        for cut in 0..whole.len() {
            assert!(parse_capture(&whole[..cut]).is_err(), "cut at {cut}");
        }
    }

    /// Run `cmd` in bash, then the capture (full, or scoped to `scope`) to fd 4, which is bash's stdout.
    fn bash_capture(cmd: &str, scope: Option<&str>) -> Vec<u8> {
        let capture = match scope {
            Some(names) => format!("__heddle_n=({names}); {SCOPED_CAPTURE}"),
            None => FULL_CAPTURE.to_owned(),
        };
        let script = format!(
            "__heddle_o=$SHELLOPTS __heddle_b=$BASHOPTS; exec 4>&1 1>/dev/null; __heddle_e=(); {cmd}\n\
             __heddle_p=$SHELLOPTS; {capture}"
        );
        let out = std::process::Command::new("bash").args(["--noprofile", "--norc", "-c", &script]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        out.stdout
    }

    #[test]
    fn what_the_bash_text_writes_parses() {
        let cmd = "set -o errexit; shopt -s extglob; umask 027; FOO='a b'; f() { :; }; export -f f; \
                   alias ll='ls -l'; cd /tmp; pushd / >/dev/null; __heddle_e=(3 'false x')";
        let c = parse_capture(&bash_capture(cmd, None)).unwrap();
        assert_eq!(c.items["var:FOO"], b"declare -- FOO=\"a b\"");
        assert_eq!(
            c.items["func:f"], b"f () \n{ \n    :\n}\ndeclare -fx f\n",
            "bash marks the export in declare -f too"
        );
        assert_eq!(c.items["fexport:f"], b"");
        assert_eq!(c.items["alias:ll"], b"ls -l");
        assert_eq!((&c.items["set:errexit"][..], &c.items["shopt:extglob"][..]), (&b"-"[..], &b"s"[..]));
        assert_eq!(
            (&c.items["umask"][..], &c.items["cwd"][..], &c.items["dirstack"][..]),
            (&b"0027"[..], &b"/"[..], &b"/tmp"[..])
        );
        assert_eq!((c.scope, c.failures), (None, vec![(3, "false x".to_owned())]));
        let c = parse_capture(&bash_capture("X=1 Y=2", Some("X GONE"))).unwrap();
        assert_eq!(c.scope, Some(vec!["X".to_owned(), "GONE".to_owned()]));
        assert_eq!(c.items["var:X"], b"declare -- X=\"1\"");
        assert!(!c.items.contains_key("var:Y") && !c.items.contains_key("var:GONE"));
    }

    const OPTION: &str = "[a-z]{1,8}";
    const NAME: &str = "[a-z][a-z0-9_]{0,8}";

    fn sections() -> impl Strategy<Value = (Sections, Capture)> {
        use proptest::collection::{btree_map, btree_set, vec};
        let opts = || (btree_set(OPTION, 0..4), btree_set(OPTION, 0..4));
        let full = (
            btree_map(NAME, "[ -~]{0,16}", 0..4),
            btree_map(NAME, "[ -~]{0,12}", 0..4),
            btree_map("-?[a-z][a-z0-9]{0,6}", vec(1u8..=255, 0..16), 0..4),
            any::<bool>(),
        );
        let scoped = (btree_map(NAME, proptest::option::of("[ -~]{0,16}"), 0..4), any::<bool>());
        let body = prop_oneof![full.prop_map(|f| (Some(f), None)), scoped.prop_map(|s| (None, Some(s)))];
        let dirs = vec(vec(1u8..=255, 1..12), 0..3);
        let failures = proptest::option::of(vec((any::<i32>(), vec(1u8..=255, 0..16)), 0..16));
        (opts(), body, dirs, opts(), "0[0-7]{3}", vec(1u8..=255, 0..16), failures).prop_map(
            |(set, body, dirs, shopt, umask, pwd, failures)| {
                let join = |s: &std::collections::BTreeSet<String>| s.iter().cloned().collect::<Vec<_>>().join(":");
                let mut items = Items::new();
                for (key, (on, off), (start, now)) in [("set:", ("-", "+"), &set), ("shopt:", ("s", "u"), &shopt)] {
                    for n in now.difference(start) {
                        items.insert(format!("{key}{n}"), on.into());
                    }
                    for n in start.difference(now) {
                        items.insert(format!("{key}{n}"), off.into());
                    }
                }
                let declare = |n: &String, v: &String| format!("declare -- {n}=\"{v}\"");
                let (body, scope) = match body {
                    (Some((vars, funcs, aliases, export)), _) => {
                        let mut variables = String::new();
                        for (n, v) in &vars {
                            variables += &(declare(n, v) + "\n");
                            items.insert(format!("var:{n}"), declare(n, v).into());
                        }
                        let mut functions = String::new();
                        for (n, body) in &funcs {
                            let f = format!("{n} () \n{{ \n    echo {body}\n}}\n");
                            items.insert(format!("func:{n}"), f.clone().into());
                            functions += &f;
                        }
                        let exported: Vec<String> = funcs.keys().filter(|_| export).cloned().collect();
                        for n in &exported {
                            items.insert(format!("fexport:{n}"), Vec::new());
                        }
                        for (n, v) in &aliases {
                            items.insert(format!("alias:{n}"), v.clone());
                        }
                        let aliases = aliases.into_iter().collect();
                        let body = Body::Full {
                            variables: variables.into(),
                            functions: functions.into(),
                            exported_functions: exported,
                            aliases,
                        };
                        (body, None)
                    }
                    (None, Some((vars, _))) => {
                        let mut variables = String::new();
                        for (n, v) in vars.iter().filter_map(|(n, v)| Some((n, v.as_ref()?))) {
                            variables += &(declare(n, v) + "\n");
                            items.insert(format!("var:{n}"), declare(n, v).into());
                        }
                        let names: Vec<String> = vars.keys().cloned().collect();
                        (Body::Scoped { names: names.clone(), variables: variables.into() }, Some(names))
                    }
                    (None, None) => unreachable!(),
                };
                items.insert("dirstack".into(), dirs.join(&0u8));
                items.insert("umask".into(), umask.clone().into());
                items.insert("cwd".into(), pwd.clone());
                let failures_parsed =
                    failures.iter().flatten().map(|(s, c)| (*s, String::from_utf8_lossy(c).into_owned())).collect();
                let s = Sections {
                    set_options: (join(&set.0), join(&set.1)),
                    body,
                    dirs,
                    shopt_options: (join(&shopt.0), join(&shopt.1)),
                    umask,
                    pwd,
                    failures,
                };
                (s, Capture { items, scope, failures: failures_parsed })
            },
        )
    }

    proptest! {

        #[test]
        fn what_write_frames_parses_back((s, want) in sections()) {
            prop_assert_eq!(parse_capture(&write(&s)), Ok(want));
        }
        #[test]
        fn garbage_inside_a_scoped_frame_never_panics(n in proptest::collection::vec(any::<u8>(), 0..32), l in ".{0,64}") {
            let _ = parse_capture(&scoped(&n, l.as_bytes()));
        }

        #[test]
        fn garbage_never_panics(data in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = parse(&data);
        }

        #[test]
        fn garbage_inside_a_valid_frame_never_panics(v in ".{0,64}", a in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = parse(&capture(&v, &v, &a, &a));
        }
    }
}
