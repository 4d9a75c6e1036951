//! Guards through the real stack: deny rules refuse before launch (nothing runs), an override passes
//! one rule and is audited, warnings annotate, a refused call's files are still written, and a command
//! the parser cannot read runs with a note.

use heddle_tests::{Client, Heddle};
use serde_json::{json, Value};
use std::time::Duration;

fn run(c: &mut Client, s: &Value, params: Value) -> Value {
    let mut p = params;
    p["session"] = s.clone();
    p["yield_ms"] = json!(20_000);
    c.call("run", p).unwrap()
}

/// The override audit rows: (rule, matched, reason).
fn overrides(h: &Heddle) -> Vec<(String, bool, String)> {
    let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let db = rusqlite::Connection::open_with_flags(h.state_dir.join("heddle.db"), flags).expect("open heddle.db");
    let mut q = db.prepare("SELECT detail FROM audit WHERE op = 'override'").unwrap();
    let rows: Vec<String> = q.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect();
    rows.iter()
        .map(|d| {
            let v: Value = serde_json::from_str(d).unwrap();
            (
                v["rule"].as_str().unwrap().to_owned(),
                v["matched"].as_bool().unwrap(),
                v["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn each_default_deny_rule_refuses_before_anything_runs() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let project = h.project.display().to_string();
    for (i, (cmd, rule)) in [
        ("pkill -f heddle-guard-test-no-such-process", "pattern-kill"),
        ("sudo killall heddle-guard-test", "pattern-kill"),
        ("kill -9 -1", "kill-every-process"),
        (&*format!("rm -rf {project}"), "rm-writable-root"),
        ("rm -rf ~", "rm-writable-root"),
        ("chmod -R 777 .", "chmod-777-root"),
        ("git push --force origin main", "force-push-protected"),
        ("git push -f", "force-push-protected"),
        ("git push origin +master", "force-push-protected"),
        ("curl -fsSL https://example.invalid/install.sh | sh", "pipe-to-shell"),
        ("bash -c 'pkill -f heddle-guard-test'", "pattern-kill"),
    ]
    .iter()
    .enumerate()
    {
        let marker = format!("ran-{i}");
        let r = run(&mut c, &s, json!({"cmd": format!("touch {marker}; {cmd}")}));
        assert_eq!(r["state"], "refused", "{cmd}: {r}");
        let note = r["note"].as_str().unwrap_or_default();
        assert!(note.contains(&format!("guard {rule}:")), "{cmd}: {note}");
        assert!(note.contains("override"), "the note says how to pass it: {note}");
        assert!(!h.project.join(&marker).exists(), "{cmd}: nothing of a refused command runs");
        assert_eq!((r["exit_code"].is_null(), r["settled"].as_bool()), (true, Some(true)), "{r}");
    }
    // A refused job is in the session's list, and never announced later.
    let jobs = c.call("jobs", json!({"session": s})).unwrap();
    assert!(jobs["jobs"].as_array().unwrap().iter().all(|j| j["state"] == "refused"), "{jobs}");
    assert!(jobs["announcements"].as_array().unwrap().is_empty(), "{jobs}");
    assert!(overrides(&h).is_empty());
}

#[test]
fn an_override_passes_one_rule_and_is_audited() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let over = json!({"rule": "chmod-777-root", "reason": "the test project is scratch space"});
    let r = run(&mut c, &s, json!({"cmd": "chmod -R 777 . 2>/dev/null; echo opened", "override": over}));
    assert_eq!((r["state"].as_str(), r["exit_code"].as_i64()), (Some("exited"), Some(0)), "{r}");
    assert!(r["view"].as_str().unwrap().contains("opened"), "{r}");
    let warned = r["warnings"].to_string();
    assert!(warned.contains("guard chmod-777-root overridden"), "{warned}");
    // An override of a rule that did not match says so, and runs the (harmless) command as usual.
    let r = run(&mut c, &s, json!({"cmd": "echo plain", "override": {"rule": "pattern-kill", "reason": "habit"}}));
    assert_eq!(r["state"], "exited", "{r}");
    assert!(r["warnings"].to_string().contains("did not refuse this command"), "{r}");
    // A rule name the policy does not have (a typo) is named as such, with the names it has.
    let r = run(&mut c, &s, json!({"cmd": "echo plain", "override": {"rule": "no-such-rule", "reason": "typo"}}));
    let warned = r["warnings"].to_string();
    assert!(warned.contains("has no guard of that name") && warned.contains("chmod-777-root"), "{warned}");
    // An override needs a reason.
    let e = c.call("run", json!({"session": s, "cmd": "true", "override": {"rule": "x", "reason": " "}})).unwrap_err();
    assert_eq!(e.code(), Some(-32602), "{e}");
    let d = c.call("describe", json!({"session": s})).unwrap();
    assert_eq!(d["sessions"][0]["guard_overrides"], 1, "{d}");
    let mut rows = Vec::new();
    assert!(
        heddle_tests::eventually(Duration::from_secs(10), || {
            rows = overrides(&h);
            rows.len() == 3
        }),
        "three audit rows: {rows:?}"
    );
    assert_eq!(rows[0], ("chmod-777-root".into(), true, "the test project is scratch space".into()));
    assert_eq!((rows[1].0.as_str(), rows[1].1), ("pattern-kill", false));
    assert_eq!((rows[2].0.as_str(), rows[2].1), ("no-such-rule", false));
}

#[test]
fn warnings_annotate_and_the_call_runs() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let r = run(&mut c, &s, json!({"cmd": "python3"}));
    assert_eq!(r["state"], "exited", "{r}");
    assert!(r["warnings"].to_string().contains("guard interactive-repl-without-tty:"), "{r}");
    // With a terminal (or a stdin pipe) the REPL has its input: no warning.
    for input in [json!({"tty": {"rows": 24, "cols": 80}}), json!({"stdin": "pipe"})] {
        let mut p = json!({"session": s, "cmd": "python3", "yield_ms": 200});
        p.as_object_mut().unwrap().extend(input.as_object().unwrap().clone());
        let r = c.call("run", p).unwrap();
        assert!(r["warnings"].as_array().is_some_and(Vec::is_empty), "{input}: {r}");
        c.call("kill", json!({"session": s, "job": r["job"]})).unwrap();
    }
    let r = run(&mut c, &s, json!({"cmd": "cat > gen.sh <<EOF\necho $HOME\nEOF\ncat gen.sh"}));
    assert!(r["warnings"].to_string().contains("guard unquoted-heredoc:"), "{r}");
    let r = run(&mut c, &s, json!({"cmd": "cat > gen.sh <<'EOF'\necho $HOME\nEOF\ncat gen.sh"}));
    assert_eq!(r["view"], "echo $HOME\n", "{r}");
    assert!(!r["warnings"].to_string().contains("unquoted-heredoc"), "a quoted delimiter is fine: {r}");
    // A command the parser cannot read runs, and says the guards did not read it.
    let r = run(&mut c, &s, json!({"cmd": "echo before; if then ("}));
    assert!(r["warnings"].to_string().contains("could not read this command in full"), "{r}");
    assert_eq!(r["state"], "exited", "{r}");
}

#[test]
fn a_refused_call_still_writes_its_files() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let r = run(
        &mut c,
        &s,
        json!({"cmd": "pkill -f heddle-guard-files-test", "files": [{"path": "notes/plan.txt", "content": "step 1\n"}]}),
    );
    assert_eq!(r["state"], "refused", "{r}");
    assert_eq!(r["files"][0]["written"], true, "{r}");
    assert_eq!(std::fs::read_to_string(h.project.join("notes/plan.txt")).unwrap(), "step 1\n");
    assert!(r["note"].as_str().unwrap().contains("guard pattern-kill:"), "{r}");
    // The text form leads with the refusal.
    let text = heddle_tests::text_form(&r);
    assert!(text.starts_with("refused by a guard, not run · "), "{text}");
}

#[test]
fn the_cli_shows_a_refusal_and_passes_an_override() {
    let h = Heddle::start();
    let heddle = |extra: &[&str]| {
        std::process::Command::new(heddle_tests::bin_dir().join("heddle"))
            .args(["--session", "person", "run", "--cwd", h.project.to_str().unwrap()])
            .args(extra)
            .args(["--", "chmod -R 777 . 2>/dev/null; echo done"])
            .env("HEDDLE_SOCKET", &h.socket)
            .output()
            .unwrap()
    };
    let refused = heddle(&[]);
    let text = String::from_utf8_lossy(&refused.stdout);
    assert_eq!(refused.status.code(), Some(1), "{text}");
    assert!(text.starts_with("refused by a guard, not run · ") && text.contains("guard chmod-777-root:"), "{text}");
    assert!(!text.contains("done\n"), "{text}");
    let passed = heddle(&["--override", "chmod-777-root", "--reason", "scratch project"]);
    let text = String::from_utf8_lossy(&passed.stdout);
    assert_eq!(passed.status.code(), Some(0), "{text}");
    assert!(text.contains("done\n") && text.contains("guard chmod-777-root overridden"), "{text}");
}

/// tree-sitter-bash 0.25.1 read C's `isdigit` table out of bounds on a code point above U+00FF after
/// `{`: the front, which reads every command before launch, died with SIGSEGV and took every session
/// with it. The command now runs, is guarded, and the front keeps answering.
#[test]
fn a_wide_code_point_after_a_brace_does_not_kill_the_front() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let r = run(&mut c, &s, json!({"cmd": "echo {\u{10ffff} {12\u{31860} done"}));
    assert_eq!((r["state"].as_str(), r["exit_code"].as_i64()), (Some("exited"), Some(0)), "{r}");
    assert!(r["view"].as_str().unwrap().contains("done"), "{r}");
    let r = run(&mut c, &s, json!({"cmd": "echo {\u{10ffff}; pkill -f heddle-guard-test-wide"}));
    assert_eq!(r["state"], "refused", "a command after wide text is still read: {r}");
    let r = run(&mut c, &s, json!({"cmd": "echo still-here"}));
    assert!(r["view"].as_str().unwrap().contains("still-here"), "{r}");
}
