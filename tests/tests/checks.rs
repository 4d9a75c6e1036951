//! Checks end to end: `check` runs a project's test runner as a job through the real stack, and its
//! result carries the routing and the runner's own counts and failing tests (issue 26). The runners are
//! real: cargo (test and nextest) from the toolchain, pytest from `target/checks-venv` and vitest from
//! `tests/checks-js/node_modules` (both installed by `.ci/test`). Go is not installed on these machines,
//! so no Go project is run here (its parser is tested on test2json-shaped input in the front).

use heddle_tests::{Client, Heddle};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Write `files` under `dir`, everything world-writable (the jobs run as an unprivileged uid).
fn project(dir: &Path, files: &[(&str, String)]) {
    std::fs::create_dir_all(dir).unwrap();
    for (f, text) in files {
        let p = dir.join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
    }
    assert!(std::process::Command::new("chmod").args(["-R", "a+rwX"]).arg(dir).status().unwrap().success());
}

fn open(c: &mut Client, cwd: &Path, env: Value) -> Value {
    c.call("session.open", json!({"cwd": cwd, "env": env})).expect("session.open")["session"].clone()
}

fn check(c: &mut Client, s: &Value, params: Value) -> Value {
    let mut p = json!({"session": s, "yield_ms": 300_000});
    p.as_object_mut().unwrap().extend(params.as_object().unwrap().clone());
    let r = c.call("check", p).expect("check");
    assert_ne!(r["state"], "running", "{r}");
    r
}

fn counts(r: &Value) -> [u64; 4] {
    let c = &r["check"]["parsed"]["counts"];
    ["passed", "failed", "skipped", "errors"].map(|k| c[k].as_u64().unwrap_or_else(|| panic!("no {k} in {r}")))
}

fn failing(r: &Value) -> Vec<String> {
    let mut v: Vec<String> = r["check"]["parsed"]["failures"]
        .as_array()
        .unwrap_or_else(|| panic!("no failures in {r}"))
        .iter()
        .map(|f| f["name"].as_str().unwrap().to_owned())
        .collect();
    v.sort();
    v
}

/// A crate with 50 passing tests, 2 failing and 1 ignored.
fn rust_crate() -> Vec<(&'static str, String)> {
    let mut lib = String::from("#[cfg(test)]\nmod tests {\n");
    for i in 1..=50 {
        lib += &format!("    #[test]\n    fn passes_{i}() {{ assert_eq!({i} + 1, {}); }}\n", i + 1);
    }
    lib += "    #[test]\n    fn fails_eq() { assert_eq!(1 + 1, 3, \"arithmetic is broken\"); }\n";
    lib += "    #[test]\n    fn fails_panic() { panic!(\"boom at the end\"); }\n";
    lib += "    #[test]\n    #[ignore]\n    fn skipped_one() {}\n}\n";
    let toml = "[package]\nname = \"fifty\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n".to_owned();
    vec![("Cargo.toml", toml), ("src/lib.rs", lib)]
}

#[test]
fn a_rust_crate_checked_with_nextest_and_cargo_test_gives_the_runners_counts() {
    let h = Heddle::start();
    let mut c = h.client();
    let tc = heddle_tests::link_toolchain(&h);
    let dir = h.project.join("rs");
    project(&dir, &rust_crate());
    let home = h.project.join("home");
    project(&home, &[]);
    let path = format!("{}/bin:/usr/local/bin:/usr/bin:/bin", tc.display());
    let env = json!({"HOME": home, "CARGO_HOME": home.join(".cargo"), "PATH": path, "CARGO_NET_OFFLINE": "true"});
    let s = open(&mut c, &dir, env);

    // Detected: a Cargo.toml, and cargo-nextest on the job's PATH.
    let r = check(&mut c, &s, json!({}));
    let text = heddle_tests::text_form(&r);
    assert!(
        text.starts_with("check cargo → cargo nextest run --workspace --no-fail-fast (parser: nextest)\nexit 100 · "),
        "{text}"
    );
    assert_eq!(counts(&r), [50, 2, 1, 0], "{r}");
    assert_eq!(failing(&r), ["fifty tests::fails_eq", "fifty tests::fails_panic"]);
    let summary = r["check"]["parsed"]["summary_line"].as_str().unwrap();
    assert!(summary.ends_with("52 tests run: 50 passed, 2 failed, 1 skipped"), "{summary}");
    let view = r["view"].as_str().unwrap();
    assert!(view.starts_with("50 passed · 2 failed · 1 skipped · 0 errors (nextest text)\n"), "{view}");
    assert!(view.contains("  assertion `left == right` failed: arithmetic is broken\n"), "{view}");
    let errors = c.call("output", json!({"session": s, "job": r["job"], "errors": true})).unwrap();
    assert!(errors["text"].as_str().unwrap().contains("FAILED fifty tests::fails_panic\n  thread"), "{errors}");

    // Named in the checks file: plain cargo test, its parser guessed from the command.
    let checks = "[check.unit]\ncommand = \"cargo test\"\n\n[check.bad]\ncommand = \"x\"\nparser = \"nope\"\n";
    project(&dir, &[(".heddle/checks.toml", checks.to_owned())]);
    let r = check(&mut c, &s, json!({"name": "unit"}));
    assert!(heddle_tests::text_form(&r).starts_with("check unit → cargo test (parser: libtest)\n"), "{r}");
    assert_eq!(counts(&r), [50, 2, 1, 0], "{r}");
    assert_eq!(failing(&r), ["tests::fails_eq", "tests::fails_panic"]);
    assert!(r["check"]["parsed"]["summary_line"]
        .as_str()
        .unwrap()
        .starts_with("test result: FAILED. 50 passed; 2 failed; 1 ignored"));

    let l = c.call("checks", json!({"session": s})).unwrap();
    let names: Vec<&str> = l["checks"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["unit", "cargo"], "{l}");
    assert_eq!(l["errors"][0], ".heddle/checks.toml line 6, check bad, key parser: unknown parser 'nope'; use one of libtest, nextest, pytest, go, jest, vitest, none");
    let runs = &l["checks"][1]["last_runs"];
    assert_eq!((runs.as_array().unwrap().len(), runs[0]["exit_code"].as_i64()), (1, Some(100)), "{l}");
    assert_eq!(runs[0]["counts"]["passed"], 50);
    assert_eq!(runs[0]["session"], s, "{l}");
    // Runs are recorded per project: another session there sees this one's run, named as this session's
    // (its own job 1 would be another job).
    let other = open(&mut c, &dir, json!({}));
    let l = c.call("checks", json!({"session": other})).unwrap();
    assert_eq!(l["checks"][1]["last_runs"][0]["session"], s, "{l}");
    let text = protocol::text::checks(&l);
    assert!(text.contains(&format!("last run: job 2 of session '{}' · exit 101", s.as_str().unwrap())), "{text}");
    let mine = protocol::text::checks(&c.call("checks", json!({"session": s})).unwrap());
    assert!(mine.contains("last run: job 2 · exit 101") && !mine.contains(" of session "), "{mine}");
}

#[test]
fn a_pytest_project_gives_pytests_counts_and_failing_tests() {
    let venv = repo().join("target/checks-venv/bin");
    assert!(venv.join("pytest").exists(), "pytest is installed by .ci/test into {}", venv.display());
    let h = Heddle::start();
    let mut c = h.client();
    let mut t =
        String::from("import pytest\n\n@pytest.fixture\ndef broken():\n    raise RuntimeError('fixture broke')\n\n");
    for i in 0..200 {
        t += &format!("def test_pass_{i}():\n    assert {i} + 1 == {}\n\n", i + 1);
    }
    t += "def test_fail_eq():\n    assert 1 + 1 == 3\n\ndef test_fail_raise():\n    raise ValueError('bad value')\n\n";
    t += "class TestGroup:\n    def test_fail_in_class(self):\n        assert 'a' in 'bcd', 'no a here'\n\n";
    t += "def test_error(broken):\n    pass\n";
    let dir = h.project.join("py");
    project(
        &dir,
        &[("pyproject.toml", "[project]\nname = \"many\"\nversion = \"0\"\n".to_owned()), ("tests/test_many.py", t)],
    );
    let path = format!("{}:/usr/bin:/bin", venv.display());
    let s = open(&mut c, &dir, json!({"PATH": path, "PYTHONDONTWRITEBYTECODE": "1"}));
    let r = check(&mut c, &s, json!({"args": ["-p", "no:cacheprovider"]}));
    assert!(
        heddle_tests::text_form(&r)
            .starts_with("check pytest → pytest '-p' 'no:cacheprovider' (parser: pytest)\nexit 1 · "),
        "{r}"
    );
    assert_eq!(counts(&r), [200, 3, 0, 1], "{r}");
    assert_eq!(
        failing(&r),
        [
            "tests/test_many.py::TestGroup::test_fail_in_class",
            "tests/test_many.py::test_error",
            "tests/test_many.py::test_fail_eq",
            "tests/test_many.py::test_fail_raise"
        ]
    );
    let summary = r["check"]["parsed"]["summary_line"].as_str().unwrap();
    assert!(summary.starts_with("3 failed, 200 passed, 1 error in "), "{summary}");
}

/// An agent's usual Python project: its own `.venv` (the check runs without the session's activated
/// one, so the venv is used by its path) and `addopts = "-q"` (the final line bare, no `===`).
#[test]
fn a_pytest_project_with_its_own_venv_and_quiet_output_is_counted() {
    let venv = repo().join("target/checks-venv");
    assert!(venv.join("bin/pytest").exists(), "pytest is installed by .ci/test into {}", venv.display());
    let h = Heddle::start();
    let mut c = h.client();
    let dir = h.project.join("quiet");
    let tests = "def test_add():\n    assert 1 + 1 == 2\n\ndef test_mul():\n    assert 2 * 4 == 6\n".to_owned();
    let pyproject =
        "[project]\nname = \"q\"\nversion = \"0\"\n\n[tool.pytest.ini_options]\naddopts = \"-q -p no:cacheprovider\"\n";
    project(&dir, &[("pyproject.toml", pyproject.to_owned()), ("tests/test_q.py", tests)]);
    std::os::unix::fs::symlink(&venv, dir.join(".venv")).unwrap();
    let s = open(&mut c, &dir, json!({"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"}));
    let r = check(&mut c, &s, json!({}));
    let text = heddle_tests::text_form(&r);
    assert!(text.starts_with("check pytest → .venv/bin/python -m pytest (parser: pytest)\nexit 1 · "), "{text}");
    assert_eq!(counts(&r), [1, 1, 0, 0], "{r}");
    assert_eq!(failing(&r), ["tests/test_q.py::test_mul"]);
    assert_eq!(r["check"]["parsed"]["incomplete"], false, "{r}");
    let summary = r["check"]["parsed"]["summary_line"].as_str().unwrap_or_default();
    assert!(summary.starts_with("1 failed, 1 passed in "), "the bare final line: {r}");
}

#[test]
fn a_vitest_project_gives_vitests_counts_and_failing_tests() {
    let modules = repo().join("tests/checks-js/node_modules");
    assert!(modules.join(".bin/vitest").exists(), "vitest is installed by .ci/test into {}", modules.display());
    let h = Heddle::start();
    let mut c = h.client();
    let mut t = String::from("import { describe, it, expect } from 'vitest';\n");
    for i in 0..30 {
        t += &format!("it('passes {i}', () => {{ expect({i} + 1).toBe({}); }});\n", i + 1);
    }
    t += "describe('group', () => {\n  it('fails equal', () => { expect(1 + 1).toBe(3); });\n  it.skip('is skipped', () => {});\n});\n";
    t += "it('throws', () => { throw new Error('kaboom'); });\n";
    let dir = h.project.join("js");
    let pkg = r#"{"name":"many-js","private":true,"type":"module","scripts":{"test":"vitest run"}}"#.to_owned();
    project(&dir, &[("package.json", pkg), ("many.test.js", t)]);
    std::os::unix::fs::symlink(&modules, dir.join("node_modules")).unwrap();
    let home = h.project.join("home");
    project(&home, &[]);
    let s = open(&mut c, &dir, json!({"HOME": home}));
    let r = check(&mut c, &s, json!({}));
    assert!(heddle_tests::text_form(&r).starts_with("check npm → npm test (parser: vitest)\nexit 1 · "), "{r}");
    assert_eq!(counts(&r), [30, 2, 1, 0], "{r}");
    assert_eq!(failing(&r), ["many.test.js > group > fails equal", "many.test.js > throws"]);
    assert_eq!(r["check"]["parsed"]["summary_line"], "Tests  2 failed | 30 passed | 1 skipped (33)");
}

#[test]
fn a_check_killed_midway_reports_what_finished() {
    let h = Heddle::start();
    let mut c = h.client();
    let dir = h.project.join("slow");
    let cmd = r"printf 'running 4 tests\ntest a ... ok\ntest b ... FAILED\ntest c ... ok\n'; sleep 60";
    let toml = format!("[check.slow]\ncommand = \"{}\"\nparser = \"libtest\"\n", cmd.replace('\\', "\\\\"));
    project(&dir, &[(".heddle/checks.toml", toml)]);
    let s = open(&mut c, &dir, json!({}));
    let r = c.call("check", json!({"session": s, "yield_ms": 1000})).unwrap();
    assert_eq!(r["state"], "running", "{r}");
    assert_eq!(r["check"]["name"], "slow");
    let k = c.call("kill", json!({"session": s, "job": r["job"]})).unwrap();
    assert_eq!(k["state"], "killed", "{k}");
    assert_eq!(counts(&k), [2, 1, 0, 0], "{k}");
    assert_eq!(k["check"]["parsed"]["incomplete"], true);
    assert!(k["view"].as_str().unwrap().contains("incomplete: the runner never printed its summary"), "{k}");
}

#[test]
fn output_no_parser_recognises_gives_the_plain_view_and_says_so() {
    let h = Heddle::start();
    let mut c = h.client();
    let dir = h.project.join("plain");
    project(
        &dir,
        &[(".heddle/checks.toml", "[check.lint]\ncommand = \"echo all good\"\nparser = \"pytest\"\n".to_owned())],
    );
    let s = open(&mut c, &dir, json!({}));
    let r = check(&mut c, &s, json!({"name": "lint"}));
    assert!(r["check"]["parsed"].is_null(), "never invented counts: {r}");
    assert_eq!(
        r["view"],
        "the pytest parser found nothing it recognised in the output: no counts; the view below is the job's\n\nall good\n"
    );
    let e = c.call("check", json!({"session": s, "name": "nope"})).unwrap_err();
    assert!(e.to_string().contains("no check named 'nope'; the project's checks are lint"), "{e}");
}

#[test]
fn heddle_check_prints_the_routing_and_the_counts() {
    let h = Heddle::start();
    let dir = h.project.join("cli");
    let cmd = r"printf 'running 2 tests\ntest a ... ok\ntest b ... FAILED\n\ntest result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n'; exit 101";
    let toml = format!("[check.unit]\ncommand = \"{}\"\nparser = \"libtest\"\n", cmd.replace('\\', "\\\\"));
    project(&dir, &[(".heddle/checks.toml", toml)]);
    let heddle = |args: &[&str]| {
        std::process::Command::new(heddle_tests::bin_dir().join("heddle"))
            .args(["--session", "person"])
            .args(args)
            .current_dir(&dir)
            .env("HEDDLE_SOCKET", &h.socket)
            .output()
            .unwrap()
    };
    let out = heddle(&["check", "unit"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("check unit → printf "), "{text}");
    assert!(text.contains("(parser: libtest)\nexit 101 · "), "{text}");
    assert!(text.contains("\n1 passed · 1 failed · 0 skipped · 0 errors (libtest text)\nFAILED b\n"), "{text}");
    let out = heddle(&["checks"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("unit → ") && text.contains("; .heddle/checks.toml line 1)\n"),
        "a line per check: {text}"
    );
    assert!(text.contains("\n  last run: job 1 · exit 101 · "), "{text}");
}

/// `check` and `checks` follow `cd`: in a session opened above two projects, `cd web/src` makes the
/// checks `web`'s (found upward from the carried cwd), and the run is recorded under `web`.
#[test]
fn the_project_of_check_is_found_from_the_carried_cwd_upward() {
    let h = Heddle::start();
    let mut c = h.client();
    let top = h.project.join("work");
    let toml = |name: &str| format!("[check.{name}]\ncommand = \"pwd\"\nparser = \"none\"\n");
    project(&top.join("api"), &[(".heddle/checks.toml", toml("api-unit"))]);
    project(&top.join("web"), &[(".heddle/checks.toml", toml("web-unit")), ("src/app.js", String::new())]);
    let s = open(&mut c, &top, json!({}));
    let e = c.call("check", json!({"session": s})).unwrap_err();
    assert!(e.to_string().contains("no check found"), "the opening directory has none: {e}");
    let r = c.call("run", json!({"session": s, "cmd": "cd web/src", "yield_ms": 30_000})).unwrap();
    assert_eq!(r["exit_code"], 0, "{r}");
    let r = check(&mut c, &s, json!({}));
    let web = top.join("web").display().to_string();
    assert_eq!(
        (r["check"]["name"].as_str(), r["check"]["project"].as_str()),
        (Some("web-unit"), Some(web.as_str())),
        "{r}"
    );
    assert!(r["view"].as_str().unwrap().contains(&format!("{web}\n")), "it ran in web: {r}");
    let listed = c.call("checks", json!({"session": s})).unwrap();
    let only = &listed["checks"][0];
    assert_eq!(
        (only["name"].as_str(), only["last_runs"].as_array().map(Vec::len)),
        (Some("web-unit"), Some(1)),
        "{listed}"
    );
}
