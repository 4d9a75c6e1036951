//! Parse a job's state capture (untrusted bytes from the worker) into state items.
//!
//! The capture is what the worker's wrapper (`worker::state::WRAPPER`) makes bash write: NUL-framed
//! sections in a fixed order, each `\0TAG\0` then its content —
//! `O` (`$SHELLOPTS` at the shell's start, NUL, `$SHELLOPTS` after the command), `V` (`declare -p`), `F`
//! (`declare -f`), `X` (`declare -Fx`: the exported functions), `A` (`alias -p`: `alias NAME='VALUE'`
//! lines, the value single-quoted by bash, `'\''` for a quote, newlines kept inside the quotes; `alias --
//! NAME=…` for a name starting with `-`), `D` (directory stack below the top, `dir\0` each),
//! `S` (`$BASHOPTS` at start and after, each NUL-terminated), `U` (`umask`), `P` (`pwd`), `E` (end).
//! A scoped capture (`worker::state::scope_line`, `front::shell::scope`) has `N` (the variables asked
//! for, each NUL-terminated) and `W` (their `declare -p` lines, each of one of those names) in place of
//! `V`, `F`, `X` and `A` ([`parse_capture`]).
//! Bash values cannot contain NUL, so no value can forge a frame. Anything that does not fit the format
//! exactly is an error (and the job's state is then unknown), never a panic.
//!
//! Items (key → value bytes): `cwd` (raw path), `dirstack` (entries joined by NUL), `umask`, `set:NAME`
//! (`-` on, `+` off) and `shopt:NAME` (`s`/`u`) only for options not at bash's default, `var:NAME` (its `declare -p` line), `func:NAME` (its
//! `declare -f` text), `fexport:NAME` (empty: the function is exported), `alias:NAME` (raw value). Variables bash owns are not items (see [`bash_owned`]).
//!
//! ```
//! let cap = b"\0O\0hashall\0errexit:hashall\0V\0declare -x A=\"1\"\n\0F\0\0X\0\0A\0alias ll='ls -l'\n\0D\0\0S\0\0extglob\0\0U\0077\n\0P\0/tmp\n\0E\0";
//! let items = front::shell::capture::parse(cap).unwrap();
//! assert_eq!(items["var:A"], b"declare -x A=\"1\"");
//! assert_eq!(items["cwd"], b"/tmp");
//! assert_eq!((&items["set:errexit"][..], &items["shopt:extglob"][..]), (&b"-"[..], &b"s"[..]));
//! assert!(!items.contains_key("set:hashall"), "options at their default are not items");
//! ```

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
    fn tag(&mut self, tag: &'static [u8], name: &'static str) -> Result<(), CaptureError> {
        let want = [b"\0".as_slice(), tag, b"\0"].concat();
        match self.rest.strip_prefix(want.as_slice()) {
            Some(r) => {
                self.rest = r;
                Ok(())
            }
            None => Err(CaptureError::Missing(name)),
        }
    }

    fn at(&self, tag: &[u8]) -> bool {
        self.rest.len() > tag.len() + 1
            && self.rest[0] == 0
            && self.rest[1..].starts_with(tag)
            && self.rest[tag.len() + 1] == 0
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
    c.tag(b"O", "set -o")?;
    let start = c.token("set -o")?;
    options(start, c.text(), "set:", (b"-", b"+"), &mut items)?;
    let scope = match c.at(b"N") {
        true => Some(scoped(&mut c, &mut items)?),
        false => {
            full(&mut c, &mut items)?;
            None
        }
    };
    c.tag(b"D", "dirs")?;
    let mut dirs: Vec<&[u8]> = Vec::new();
    while !c.at(b"S") {
        dirs.push(c.token("dirs")?);
    }
    items.insert("dirstack".into(), dirs.join(&b"\0"[..]));
    c.tag(b"S", "shopt")?;
    let start = c.token("shopt")?;
    options(start, c.token("shopt")?, "shopt:", (b"s", b"u"), &mut items)?;
    c.tag(b"U", "umask")?;
    items.insert("umask".into(), trim_newline(c.text()).to_vec());
    c.tag(b"P", "pwd")?;
    items.insert("cwd".into(), trim_newline(c.text()).to_vec());
    let mut failures = Vec::new();
    if c.at(b"R") {
        c.tag(b"R", "failures")?;
        while !c.at(b"E") {
            let status = c.token("failures")?;
            let cmd = c.token("failures")?;
            let status = std::str::from_utf8(status).ok().and_then(|s| s.parse().ok());
            let Some(status) = status.filter(|_| failures.len() < 16) else {
                return Err(CaptureError::BadLine { section: "failures", line: lossy(cmd) });
            };
            failures.push((status, String::from_utf8_lossy(cmd).into_owned()));
        }
    }
    c.tag(b"E", "end")?;
    if !c.rest.is_empty() {
        return Err(CaptureError::BadLine { section: "end", line: lossy(c.rest) });
    }
    Ok(Capture { items, scope, failures })
}

/// The full capture's variables, functions and aliases.
fn full(c: &mut Cursor<'_>, items: &mut Items) -> Result<(), CaptureError> {
    c.tag(b"V", "declare -p")?;
    lines(c.text(), "declare -p", |l| variable(l, items))?;
    c.tag(b"F", "declare -f")?;
    functions(c.text(), items);
    c.tag(b"X", "declare -Fx")?;
    lines(c.text(), "declare -Fx", |l| {
        let name = l.strip_prefix(b"declare -fx ").filter(|n| !n.is_empty())?;
        items.insert(format!("fexport:{}", String::from_utf8_lossy(name)), Vec::new());
        Some(())
    })?;
    c.tag(b"A", "alias")?;
    aliases(c.text(), items)
}

/// A scoped capture's names (`N`: each NUL-terminated) and their `declare -p` lines (`W`), each of
/// which must be one of the names.
fn scoped(c: &mut Cursor<'_>, items: &mut Items) -> Result<Vec<String>, CaptureError> {
    c.tag(b"N", "names")?;
    let mut names = Vec::new();
    while !c.at(b"W") {
        let name = c.token("names")?;
        match std::str::from_utf8(name).ok().filter(|n| valid_name(n)) {
            Some(n) => names.push(n.to_owned()),
            None => return Err(CaptureError::BadLine { section: "names", line: lossy(name) }),
        }
    }
    c.tag(b"W", "declare -p NAME")?;
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

    proptest! {
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
