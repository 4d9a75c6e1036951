//! A project's checks: the ones `.heddle/checks.toml` names, then the ones detected from the project's
//! files (those whose name the file does not take).
//!
//! ```toml
//! [check.unit]
//! command = "cargo nextest run --workspace"   # required: run by bash -c in the check's cwd
//! cwd = "crates/core"                          # optional, relative to the project (the directory holding `.heddle/`)
//! env = { RUST_LOG = "debug" }                 # optional, on top of the session's environment
//! timeout_ms = 300000                          # optional hint: the default yield of `check`; never kills
//! parser = "nextest"                           # optional: libtest nextest pytest go jest vitest none;
//!                                              # else guessed from the command
//! ```
//!
//! A file with errors is reported problem by problem (`.heddle/checks.toml line 4, key parser: …`); a
//! check with an error is left out, the others and the detected ones still work. Detection: a
//! `Cargo.toml` → `cargo nextest run --workspace --no-fail-fast` when `cargo-nextest` is on the job's
//! PATH, else `cargo test --workspace --no-fail-fast`; `pyproject.toml`, `pytest.ini`, `setup.cfg`
//! or `tox.ini` → `pytest`; `go.mod` → `go test -json ./...`; a `package.json` with a `test` script
//! → `npm test` (parser vitest or jest when the script names one).
//!
//! ```
//! let dir = tempfile::tempdir().unwrap();
//! std::fs::write(dir.path().join("go.mod"), "module x\n").unwrap();
//! let found = front::checks::config::find(dir.path(), None);
//! assert_eq!(found.checks[0].command, "go test -json ./...");
//! ```

use super::parse::Parser;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where a project keeps its checks, relative to the project.
pub const FILE: &str = ".heddle/checks.toml";
/// The largest checks file read.
const MAX_FILE: u64 = 256 * 1024;

/// One check, ready to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    pub name: String,
    pub command: String,
    /// Absolute: the project joined with the configured cwd, or the project.
    pub cwd: PathBuf,
    pub env: Vec<(String, String)>,
    pub timeout_ms: Option<u64>,
    pub parser: Parser,
    /// `.heddle/checks.toml line 3`, or what detection saw.
    pub origin: String,
}

/// What [`find`] found.
#[derive(Debug, Default)]
pub struct Found {
    pub checks: Vec<Check>,
    /// True when the checks file exists (errors or not).
    pub file: bool,
    /// The checks file's problems, each naming file, line and key.
    pub errors: Vec<String>,
    /// What detection looked at when it found nothing.
    pub note: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    check: BTreeMap<String, toml::Spanned<toml::Table>>,
}

/// The project's checks; `path` is the PATH the check's job will have (for finding cargo-nextest).
pub fn find(project: &Path, path: Option<&str>) -> Found {
    let mut found = Found::default();
    match read_file(&project.join(FILE)) {
        Ok(None) => {}
        Ok(Some(text)) => {
            found.file = true;
            parse_file(&text, project, &mut found);
        }
        Err(e) => {
            found.file = true;
            found.errors.push(format!("{FILE}: cannot be read ({e}); make it readable by the server, or remove it"));
        }
    }
    for d in detect(project, path) {
        if !found.checks.iter().any(|c| c.name == d.name) {
            found.checks.push(d);
        }
    }
    if found.checks.is_empty() {
        found.note = Some(format!(
            "no check found: {FILE} names none, and the project ({}) has no Cargo.toml, pyproject.toml, pytest.ini, \
             setup.cfg, tox.ini, go.mod or package.json with a test script; add {FILE} with a [check.NAME] table",
            project.display()
        ));
    }
    found
}

fn read_file(p: &Path) -> std::io::Result<Option<String>> {
    use std::io::Read;
    let f = match std::fs::File::open(p) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut text = String::new();
    f.take(MAX_FILE).read_to_string(&mut text)?;
    Ok(Some(text))
}

/// The 1-based line of byte `at` of `text`.
fn line_of(text: &str, at: usize) -> usize {
    text.as_bytes()[..at.min(text.len())].iter().filter(|&&b| b == b'\n').count() + 1
}

/// The line of `key = …` in the check's table, which starts at byte `start` of `text` and runs to the
/// next table header; else the table's own line.
fn key_line(text: &str, start: usize, key: &str) -> usize {
    let body = text.get(start..).unwrap_or("");
    let mut at = start;
    for (i, l) in body.split_inclusive('\n').enumerate() {
        let t = l.trim_start();
        if i > 0 && t.starts_with('[') {
            break;
        }
        if t.strip_prefix(key).is_some_and(|r| r.trim_start().starts_with('=')) {
            return line_of(text, at);
        }
        at += l.len();
    }
    line_of(text, start)
}

fn parse_file(text: &str, project: &Path, found: &mut Found) {
    let raw: RawFile = match toml::from_str(text) {
        Ok(r) => r,
        Err(e) => {
            let line = e.span().map_or(String::new(), |s| format!(" line {}", line_of(text, s.start)));
            let msg = e.message().trim_end().replace('\n', "; ");
            found.errors.push(format!("{FILE}{line}: {msg}; fix the file (the detected checks still work)"));
            return;
        }
    };
    for (name, table) in raw.check {
        let span = table.span();
        let line = line_of(text, span.start);
        let err = |key: &str, why: String| {
            let l = if key.is_empty() { line } else { key_line(text, span.start, key) };
            let k = if key.is_empty() { String::new() } else { format!(", key {key}") };
            format!("{FILE} line {l}, check {name}{k}: {why}")
        };
        match check_from(&name, table.into_inner(), project, &err) {
            Ok(mut c) => {
                c.origin = format!("{FILE} line {line}");
                found.checks.push(c);
            }
            Err(errors) => found.errors.extend(errors),
        }
    }
}

fn check_from(
    name: &str,
    mut t: toml::Table,
    project: &Path,
    err: &dyn Fn(&str, String) -> String,
) -> Result<Check, Vec<String>> {
    let mut errors = Vec::new();
    if !valid_name(name) {
        errors.push(err("", "a check name is 1–64 of A-Z a-z 0-9 _ . - (not starting with .)".to_owned()));
    }
    let string = |t: &mut toml::Table, key: &str, errors: &mut Vec<String>| match t.remove(key) {
        None => None,
        Some(toml::Value::String(s)) => Some(s),
        Some(v) => {
            errors.push(err(key, format!("must be a string, not {}", v.type_str())));
            None
        }
    };
    let command = string(&mut t, "command", &mut errors);
    if command.as_deref().is_none_or(|c| c.trim().is_empty()) && !errors.iter().any(|e| e.contains("key command")) {
        errors.push(err("", "needs a non-empty `command`".to_owned()));
    }
    let cwd = match string(&mut t, "cwd", &mut errors) {
        Some(c) if c.contains('\0') => {
            errors.push(err("cwd", "must not contain NUL".to_owned()));
            project.to_path_buf()
        }
        Some(c) => project.join(c),
        None => project.to_path_buf(),
    };
    let parser = match string(&mut t, "parser", &mut errors) {
        Some(p) => Parser::from_name(&p).unwrap_or_else(|| {
            let all: Vec<&str> = Parser::ALL.iter().map(|p| p.name()).collect();
            errors.push(err("parser", format!("unknown parser '{p}'; use one of {}", all.join(", "))));
            Parser::None
        }),
        None => guess(command.as_deref().unwrap_or("")),
    };
    let timeout_ms = match t.remove("timeout_ms") {
        None => None,
        Some(toml::Value::Integer(n)) if n >= 0 => Some(n as u64),
        Some(v) => {
            errors.push(err("timeout_ms", format!("must be a number of milliseconds, not {v}")));
            None
        }
    };
    let mut env = Vec::new();
    match t.remove("env") {
        None => {}
        Some(toml::Value::Table(e)) => {
            for (k, v) in e {
                match v {
                    toml::Value::String(s) if valid_env_name(&k) => env.push((k, s)),
                    toml::Value::String(_) => errors.push(err("env", format!("'{k}' is not a usable variable name"))),
                    v => errors.push(err("env", format!("{k} must be a string, not {}", v.type_str()))),
                }
            }
        }
        Some(v) => errors.push(err("env", format!("must be a table of strings, not {}", v.type_str()))),
    }
    for key in t.keys() {
        errors.push(err(key, "unknown key; a check has command, cwd, env, timeout_ms and parser".to_owned()));
    }
    match (errors.is_empty(), command) {
        (true, Some(command)) => {
            Ok(Check { name: name.to_owned(), command, cwd, env, timeout_ms, parser, origin: String::new() })
        }
        _ => Err(errors),
    }
}

fn valid_name(n: &str) -> bool {
    (1..=64).contains(&n.len())
        && !n.starts_with('.')
        && n.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

fn valid_env_name(n: &str) -> bool {
    !n.is_empty()
        && !n.starts_with("BASH_FUNC_")
        && !n.as_bytes()[0].is_ascii_digit()
        && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// The parser a command's words suggest.
pub fn guess(command: &str) -> Parser {
    let words: Vec<&str> = command.split_whitespace().collect();
    let has = |w: &str| words.iter().any(|x| x.rsplit('/').next() == Some(w));
    match () {
        _ if has("nextest") || has("cargo-nextest") => Parser::Nextest,
        _ if has("cargo") && has("test") => Parser::Libtest,
        _ if has("pytest") || has("py.test") => Parser::Pytest,
        _ if has("go") && has("test") => Parser::Go,
        _ if has("vitest") => Parser::Vitest,
        _ if has("jest") => Parser::Jest,
        _ => Parser::None,
    }
}

/// True when `name` is an executable file in one of `path`'s directories.
fn on_path(name: &str, path: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.split(':').filter(|d| !d.is_empty()).any(|d| {
        std::fs::metadata(Path::new(d).join(name)).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

fn detect(project: &Path, path: Option<&str>) -> Vec<Check> {
    let mut out = Vec::new();
    let exists = |f: &str| project.join(f).is_file();
    let check = |name: &str, command: &str, parser, origin: String| Check {
        name: name.to_owned(),
        command: command.to_owned(),
        cwd: project.to_path_buf(),
        env: Vec::new(),
        timeout_ms: None,
        parser,
        origin,
    };
    if exists("Cargo.toml") {
        let path = path.map(str::to_owned).or_else(|| std::env::var("PATH").ok()).unwrap_or_default();
        let (command, parser, why) = match on_path("cargo-nextest", &path) {
            true => ("cargo nextest run --workspace --no-fail-fast", Parser::Nextest, "cargo-nextest is on PATH"),
            false => ("cargo test --workspace --no-fail-fast", Parser::Libtest, "cargo-nextest is not on PATH"),
        };
        out.push(check("cargo", command, parser, format!("detected: Cargo.toml; {why}")));
    }
    if let Some(f) = ["pyproject.toml", "pytest.ini", "setup.cfg", "tox.ini"].into_iter().find(|f| exists(f)) {
        // A check runs without the session's shell state (no activated venv): the project's own virtual
        // environment is used by its path when pytest is installed in it.
        let venv = [".venv", "venv"].into_iter().find(|v| exists(&format!("{v}/bin/pytest")));
        let (command, why) = match venv {
            Some(v) => (format!("{v}/bin/python -m pytest"), format!("detected: {f}; pytest is installed in {v}")),
            None => ("pytest".to_owned(), format!("detected: {f}")),
        };
        out.push(check("pytest", &command, Parser::Pytest, why));
    }
    if exists("go.mod") {
        out.push(check("go", "go test -json ./...", Parser::Go, "detected: go.mod".to_owned()));
    }
    if let Some(script) = read_file(&project.join("package.json")).ok().flatten().and_then(|t| test_script(&t)) {
        let parser = guess(&script);
        let why = format!("detected: package.json with test script `{}`", super::parse::cut(&script));
        out.push(check("npm", "npm test", parser, why));
    }
    out
}

/// `scripts.test` of a package.json, unless it is npm's placeholder.
fn test_script(text: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    let s = v["scripts"]["test"].as_str()?;
    (!s.contains("no test specified")).then(|| s.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn project(files: &[(&str, &str)]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for (f, text) in files {
            let p = d.path().join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        d
    }

    #[test]
    fn a_checks_file_gives_its_checks_first_then_the_detected_ones() {
        let toml = "[check.unit]\ncommand = \"cargo nextest run --workspace\"\ncwd = \"sub\"\nenv = { A = \"1\" }\ntimeout_ms = 5000\n\n[check.lint]\ncommand = \"make lint\"\n";
        let d = project(&[(FILE, toml), ("pytest.ini", "")]);
        let f = find(d.path(), Some(""));
        assert!(f.errors.is_empty(), "{:?}", f.errors);
        let names: Vec<&str> = f.checks.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["lint", "unit", "pytest"]);
        let unit = &f.checks[1];
        assert_eq!(
            (unit.parser, unit.cwd.clone(), unit.timeout_ms),
            (Parser::Nextest, d.path().join("sub"), Some(5000))
        );
        assert_eq!(unit.env, [("A".to_owned(), "1".to_owned())]);
        assert_eq!(unit.origin, ".heddle/checks.toml line 1");
        assert_eq!(f.checks[0].parser, Parser::None);
    }

    #[test]
    fn errors_name_file_line_and_key_and_detection_still_works() {
        let toml = "[check.unit]\ncommand = \"x\"\nparser = \"bogus\"\n\n[check.two]\ncwd = 3\ncolour = \"red\"\n";
        let d = project(&[(FILE, toml), ("go.mod", "module x\n")]);
        let f = find(d.path(), None);
        assert_eq!(
            f.errors,
            [
                ".heddle/checks.toml line 5, check two: needs a non-empty `command`",
                ".heddle/checks.toml line 6, check two, key cwd: must be a string, not integer",
                ".heddle/checks.toml line 7, check two, key colour: unknown key; a check has command, cwd, env, timeout_ms and parser",
                ".heddle/checks.toml line 3, check unit, key parser: unknown parser 'bogus'; use one of libtest, nextest, pytest, go, jest, vitest, none",
            ]
        );
        assert_eq!(f.checks.len(), 1);
        assert_eq!(f.checks[0].name, "go");
    }

    #[test]
    fn a_file_that_is_not_toml_names_its_line() {
        let d = project(&[(FILE, "[check.unit]\ncommand = \"x\"\nnope nope\n")]);
        let f = find(d.path(), None);
        assert_eq!(f.errors.len(), 1);
        assert!(f.errors[0].starts_with(".heddle/checks.toml line 3: "), "{:?}", f.errors);
        assert!(f.note.is_some());
    }

    #[test]
    fn detection_follows_the_projects_files() {
        let d = project(&[("Cargo.toml", "[workspace]\n"), ("package.json", r#"{"scripts":{"test":"vitest run"}}"#)]);
        let bin = project(&[("cargo-nextest", "")]);
        std::fs::set_permissions(bin.path().join("cargo-nextest"), std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let f = find(d.path(), Some(&bin.path().display().to_string()));
        assert_eq!(f.checks[0].command, "cargo nextest run --workspace --no-fail-fast");
        assert_eq!((f.checks[1].command.as_str(), f.checks[1].parser), ("npm test", Parser::Vitest));
        let f = find(d.path(), Some("/nonexistent"));
        assert_eq!(
            (f.checks[0].command.as_str(), f.checks[0].parser),
            ("cargo test --workspace --no-fail-fast", Parser::Libtest)
        );
        let d = project(&[("pyproject.toml", ""), (".venv/bin/python", "")]);
        assert_eq!(find(d.path(), None).checks[0].command, "pytest", "a venv without pytest");
        std::fs::write(d.path().join(".venv/bin/pytest"), "").unwrap();
        let f = find(d.path(), None);
        assert_eq!(f.checks[0].command, ".venv/bin/python -m pytest");
        assert!(f.checks[0].origin.ends_with("pytest is installed in .venv"), "{}", f.checks[0].origin);
        let d = project(&[("package.json", r#"{"scripts":{"test":"echo \"Error: no test specified\" && exit 1"}}"#)]);
        assert!(find(d.path(), None).checks.is_empty());
    }

    proptest! {
        #[test]
        fn garbage_checks_files_never_panic(text in "(\\[check\\.[a-z]{0,3}\\]\n|[a-z_]{1,8} = (\"[a-z ]{0,5}\"|[0-9]{1,3}|\\{ ?\\}|\\[1\\])\n|[ -~]{0,20}\n){0,12}") {
            let d = project(&[(FILE, &text)]);
            let f = find(d.path(), None);
            for c in &f.checks {
                prop_assert!(!c.command.trim().is_empty());
            }
        }
    }
}
