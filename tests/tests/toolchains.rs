//! Real toolchains through heddle, and every failure saying why (issue 23): a job that the sandbox
//! refuses the network is told so, from what the kernel refused (the seccomp filter's refused `socket`
//! calls, counted per job by the worker), whatever the tool printed instead.

use heddle_tests::{run_to_end, text_form, Heddle};
use serde_json::{json, Value};

fn refusals(r: &Value) -> String {
    r["refusals"]
        .as_array()
        .map(|a| a.iter().map(|x| x.as_str().unwrap_or("")).collect::<Vec<_>>().join("\n"))
        .unwrap_or_default()
}

#[test]
fn network_off_a_refused_socket_says_the_network_is_off_and_how_to_turn_it_on() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    // curl looks the host up (AF_INET/AF_INET6 sockets of the resolver): it prints only "Could not
    // resolve host".
    let r = run_to_end(&mut c, &s, "curl -sS --max-time 5 https://pypi.org/simple/ 2>&1; echo rc=$?");
    let why = refusals(&r);
    assert!(why.contains("the network is off for this session"), "{r}");
    assert!(why.contains("--network"), "names the switch: {r}");
    assert!(text_form(&r).contains("the network is off"), "the text form carries it: {}", text_form(&r));
    // It exited 0 (`; echo`): said briefly, without the symptoms a failure would be explained by.
    assert_eq!(r["exit_code"], 0, "{r}");
    assert!(!why.contains("name lookups") && why.len() < 300, "briefly after an exit 0: {why}");
    // A job that fails on it (curl's exit 6) gets the whole sentence, beside any path refusals.
    let r = run_to_end(&mut c, &s, "curl -sS --max-time 5 https://pypi.org/simple/");
    assert_eq!(r["exit_code"], 6, "{r}");
    assert!(refusals(&r).contains("the network is off for this session"), "{r}");
    assert!(refusals(&r).contains("name lookups, connections and listening sockets fail"), "in full: {r}");
    // A direct socket in Python: the same sentence.
    let r = run_to_end(
        &mut c,
        &s,
        "python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 443), 3)' 2>&1 | tail -1",
    );
    assert!(refusals(&r).contains("the network is off"), "{r}");
    assert!(refusals(&r).contains("AF_INET"), "names the family: {r}");
    // A job that opens no socket has no such refusal; nor does a unix socket.
    let r = run_to_end(&mut c, &s, "python3 -c 'import socket; socket.socket(socket.AF_UNIX)'; echo ok");
    assert_eq!(refusals(&r), "", "{r}");
    // Network on: no refusal (the connection itself may fail on this machine; no claim is made about it).
    let on = c.call("session.open", json!({"cwd": h.project, "network": true})).unwrap()["session"].clone();
    let r = run_to_end(&mut c, &on, "python3 -c 'import socket; socket.socket()'; echo ok");
    assert_eq!(refusals(&r), "", "{r}");
}

#[test]
fn the_cli_opens_a_session_with_the_network_on_and_says_when_it_could_not() {
    let h = Heddle::start();
    let heddle = |args: &[&str]| {
        let out = std::process::Command::new(heddle_tests::bin_dir().join("heddle"))
            .arg("--socket")
            .arg(&h.socket)
            .args(args)
            .current_dir(&h.project)
            .output()
            .expect("heddle");
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let sock = "python3 -c 'import socket; socket.socket(); print(\"socket-ok\")' 2>&1 | tail -1";
    let (out, _) = heddle(&["--session", "off", "run", sock]);
    assert!(out.contains("the network is off") && out.contains("Operation not permitted"), "{out}");
    let (out, err) = heddle(&["--session", "on", "--network", "run", sock]);
    assert!(out.contains("socket-ok") && !out.contains("network is off"), "{out} {err}");
    assert_eq!(err, "", "a session this call opened needs no warning");
    let (_, err) = heddle(&["--session", "off", "--network", "run", "true"]);
    assert!(err.contains("already open with the network off"), "{err}");
}

/// A root-owned place for the denial tests: a file only root reads, a directory only root enters (with a
/// tool inside, like a root user's `~/.cargo/bin`), and a directory in the project only root writes.
fn root_only_places(h: &Heddle) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let secret = h.dir.path().join("secret.txt");
    std::fs::write(&secret, "s").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let home = h.dir.path().join("roothome");
    std::fs::create_dir_all(home.join(".tool/bin")).unwrap();
    let tool = home.join(".tool/bin/mytool");
    std::fs::write(&tool, "#!/bin/sh\necho tool-ran\n").unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
    let locked = h.project.join("locked");
    std::fs::create_dir(&locked).unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).unwrap();
    (secret, home, locked)
}

#[test]
fn a_read_denial_and_write_denials_are_each_named_by_the_rule_that_refused_them() {
    let h = Heddle::start();
    let (secret, home, locked) = root_only_places(&h);
    let mut c = h.client();
    let s = h.open_session(&mut c);
    // Read: the file's permissions, not the sandbox; no "not written".
    let r = run_to_end(&mut c, &s, &format!("cat {}", secret.display()));
    let why = refusals(&r);
    assert!(why.contains(&format!("{}: refused by file permissions", secret.display())), "{r}");
    assert!(why.contains("may not read it") && why.contains("uid 65534 (nobody)"), "{r}");
    assert!(!why.contains("not written") && !why.contains("writing it"), "a read is not a write: {r}");
    // Beneath a directory the uid cannot enter (a root user's toolchain).
    let r = run_to_end(&mut c, &s, &format!("{}/.tool/bin/mytool", home.display()));
    let why = refusals(&r);
    assert!(why.contains(&format!("cannot enter {}", home.display())) && why.contains("mode 0700"), "{r}");
    // Write outside the roots: the sandbox, with a remedy that exists (no made-up profile).
    let r = run_to_end(&mut c, &s, "touch /etc/heddle-refusal-test");
    let why = refusals(&r);
    assert!(why.contains("/etc/heddle-refusal-test: writing it was refused by the sandbox"), "{r}");
    assert!(why.contains("--allow-writable /etc") && !why.contains("a profile that lists"), "{r}");
    // Write inside the project, refused by the directory's owner and mode.
    let r = run_to_end(&mut c, &s, "touch locked/x");
    let why = refusals(&r);
    assert!(why.contains(&format!("{}/x: could not be created", locked.display())), "{r}");
    assert!(why.contains("may not write in") && why.contains("uid 65534"), "{r}");
    // npm-style errors (Node's `EACCES: permission denied, mkdir '…'`) are denials too.
    let r = run_to_end(&mut c, &s, "node -e \"require('fs').mkdirSync('/nonexistent-heddle')\"");
    assert!(refusals(&r).contains("/nonexistent-heddle: writing it was refused by the sandbox"), "{r}");
}

#[test]
fn a_command_not_found_under_a_root_only_path_says_which_uid_jobs_run_as() {
    let dir = tempfile::Builder::new().prefix("heddle-e2e-roothome-").tempdir_in("/tmp").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let home = dir.path().join("root");
    std::fs::create_dir_all(home.join(".cargo/bin")).unwrap();
    std::fs::write(home.join(".cargo/bin/mytool"), "#!/bin/sh\necho ok\n").unwrap();
    std::fs::set_permissions(home.join(".cargo/bin/mytool"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
    // `heddle up` started from a root shell whose PATH holds the root-only directory.
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", home.join(".cargo/bin").display());
    let h = Heddle::start_with_env(&[], &[("PATH", &path)]);
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let r = run_to_end(&mut c, &s, "mytool");
    assert_eq!(r["exit_code"], 127, "{r}");
    assert_eq!(r["refusals"], serde_json::json!([]), "a command not found is no refusal: {r}");
    let why = r["warnings"].to_string();
    assert!(why.contains("mytool: command not found; if it is installed in "), "{r}");
    assert!(
        why.contains("run as uid 65534 (nobody)") && why.contains(&home.join(".cargo/bin").display().to_string()),
        "{r}"
    );
    assert!(why.contains(&format!("{} is owned by uid 0 with mode 0700", home.display())), "{r}");
    assert!(
        text_form(&r).contains("\nwarning: mytool: command not found; if it is installed in "),
        "{}",
        text_form(&r)
    );
}

/// A server-like process left running by a job: it waits for `crash` to appear in the project, then dies
/// with a Python traceback on the job's stderr (what a kept web server that crashes does).
const CRASHING_SERVER: &str = "python3 -c 'import os, time\nwhile not os.path.exists(\"crash\"):\n    time.sleep(0.05)\nraise KeyError(\"user_id\")' &\necho started";

/// Create `crash` (the call's own result may already carry the announcement), then poll `jobs` (any
/// call carries announcements) until one for `job` arrives; returns it and every announcement seen.
fn crash_and_wait_for_announcement(
    c: &mut heddle_tests::Client,
    s: &Value,
    job: &Value,
) -> (Option<Value>, Vec<Value>) {
    let r = run_to_end(c, s, "touch crash");
    assert_eq!(r["exit_code"], 0, "{r}");
    let mut seen = r["announcements"].as_array().cloned().unwrap_or_default();
    let found = heddle_tests::eventually(std::time::Duration::from_secs(10), || {
        let r = c.call("jobs", json!({"session": s})).unwrap();
        seen.extend(r["announcements"].as_array().cloned().unwrap_or_default());
        seen.iter().any(|a| &a["job"] == job)
    });
    (found.then(|| seen.iter().find(|a| &a["job"] == job).cloned()).flatten(), seen)
}

#[test]
fn a_survivor_that_dies_after_its_job_was_reported_is_announced_with_its_traceback() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let r = run_to_end(&mut c, &s, CRASHING_SERVER);
    assert_eq!(r["survivors"].as_array().map(Vec::len), Some(1), "the server outlives its job: {r}");
    let job = r["job"].clone();
    let (a, seen) = crash_and_wait_for_announcement(&mut c, &s, &job);
    let a = a.unwrap_or_else(|| panic!("the survivor's death is announced on a later call: {seen:?}"));
    assert_eq!(a["survivors_ended"], true, "{a}");
    let last = a["last_lines"].to_string();
    assert!(last.contains("KeyError: 'user_id'"), "the traceback's last line is in it: {a}");
    let text = protocol::text::announcements(&[serde_json::from_value(a.clone()).unwrap()]);
    assert!(text.contains("left running ended") && text.contains("KeyError"), "{text}");
    // Once: the next call does not carry it again.
    let r = c.call("jobs", json!({"session": s})).unwrap();
    assert!(r["announcements"].as_array().unwrap().iter().all(|x| x["job"] != job), "{r}");
}

#[test]
fn a_kept_server_that_crashes_is_announced_on_the_next_call() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let r = run_to_end(&mut c, &s, CRASHING_SERVER);
    let job = r["job"].clone();
    let k = c.call("keep", json!({"session": s, "job": job, "name": "webserver"})).unwrap();
    assert_eq!(k["procs"].as_array().map(Vec::len), Some(1), "{k}");
    let (a, seen) = crash_and_wait_for_announcement(&mut c, &s, &job);
    let a = a.unwrap_or_else(|| panic!("the kept server's crash is announced on a later call: {seen:?}"));
    assert_eq!(a["survivors_ended"], true, "{a}");
    assert!(a["last_lines"].to_string().contains("KeyError: 'user_id'"), "{a}");
}

#[test]
fn a_kept_server_ended_by_kept_kill_is_not_announced() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let r = run_to_end(&mut c, &s, "sleep 300 & echo started");
    let job = r["job"].clone();
    c.call("keep", json!({"session": s, "job": job, "name": "sleeper"})).unwrap();
    let k = c.call("kept.kill", json!({"name": "sleeper"})).unwrap();
    assert_eq!(k["verified_empty"], true, "{k}");
    // The end was asked for: no call in the next 2 s announces it.
    let mut seen = Vec::new();
    heddle_tests::eventually(std::time::Duration::from_secs(2), || {
        let r = c.call("jobs", json!({"session": s})).unwrap();
        seen.extend(r["announcements"].as_array().cloned().unwrap_or_default());
        false
    });
    assert!(seen.iter().all(|a| a["job"] != job), "{seen:?}");
}

#[test]
fn session_open_with_a_cwd_that_does_not_exist_is_refused_with_a_sentence() {
    let h = Heddle::start();
    let mut c = h.client();
    let missing = h.project.join("no-such-dir");
    let e = c.call("session.open", json!({"cwd": missing})).expect_err("a missing cwd is refused");
    let msg = e.to_string();
    assert!(msg.contains(&format!("{} does not exist", missing.display())), "{msg}");
    assert!(msg.contains("mkdir -p"), "says what to do: {msg}");
    let file = h.project.join("a-file");
    std::fs::write(&file, "x").unwrap();
    let msg = c.call("session.open", json!({"cwd": file})).expect_err("a file is no cwd").to_string();
    assert!(msg.contains("is not a directory"), "{msg}");
}

#[test]
fn runs_of_blank_lines_are_named_as_blank_lines() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let r = run_to_end(&mut c, &s, "printf 'a\\n\\n\\n\\nb\\n\\nc\\n'");
    let view = r["view"].as_str().unwrap();
    assert_eq!(view, "a\n<3 blank lines>\nb\n\nc\n", "{r}");
    let v = c.call("output", json!({"session": s, "job": r["job"], "lines": [1, 7]})).unwrap();
    assert_eq!(v["text"], "1: a\n2–4: <3 blank lines>\n5: b\n6: \n7: c\n", "{v}");
}

#[test]
fn a_line_view_carries_its_text_once() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    // 35 KB of text: 500 lines of 70 bytes.
    let r = run_to_end(
        &mut c,
        &s,
        "for i in $(seq 1 500); do printf 'line %03d %s\\n' $i $(printf 'x%.0s' $(seq 1 60)); done",
    );
    let v = c
        .call("output", json!({"session": s, "job": r["job"], "lines": [1, 500], "max_output_bytes": 400000}))
        .unwrap();
    let text = v["text"].as_str().unwrap();
    let reply = v.to_string().len();
    assert!(text.len() > 35_000, "{}", text.len());
    assert!(reply < text.len() + text.len() / 5, "reply {reply} bytes for {} bytes of text: {v:.300}", text.len());
    // The per-line form, asked for, carries the text there instead.
    let l = c
        .call(
            "output",
            json!({"session": s, "job": r["job"], "lines": [1, 500], "max_output_bytes": 400000, "format": "lines"}),
        )
        .unwrap();
    assert_eq!(l["lines"].as_array().map(Vec::len), Some(500), "{l:.300}");
    assert!(l["lines"][0]["text"].as_str().unwrap().starts_with("line 001 xxx"), "{l:.300}");
    assert!(l.get("text").is_none_or(Value::is_null), "{l:.300}");
    assert!(l.to_string().len() < text.len() * 2, "{}", l.to_string().len());
    let e = c.call("output", json!({"session": s, "job": r["job"], "tail": 1, "format": "both"}));
    assert!(e.expect_err("an unknown format is refused").to_string().contains("invalid params"), "{r}");
}

#[test]
fn calls_that_change_no_state_leave_state_version_alone() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    // The first job records the state (version 0 → 1): from there on, only a change bumps the version.
    let first = run_to_end(&mut c, &s, "true");
    assert_eq!(first["state_version"]["to"], 1, "{first}");
    let unchanged = |c: &mut heddle_tests::Client, cmds: &[&str], v: &Value| {
        for cmd in cmds {
            let r = run_to_end(c, &s, cmd);
            assert_eq!(&r["state_version"]["to"], v, "{cmd} changed nothing: {r}");
            assert_eq!(r["state_changes"], json!([]), "{cmd}: {r}");
        }
    };
    // `OLDPWD` is declared without a value until the first `cd`.
    unchanged(&mut c, &["true", "true", "echo hi", "false"], &json!(1));
    // The first `cd` sets `OLDPWD`: a change, though not worth a line of `state_changes`.
    let v = run_to_end(&mut c, &s, "cd .")["state_version"]["to"].clone();
    let cmds =
        ["true", "true", "echo hi", "cd .", "cd \"$PWD\"", "(cd /tmp)", "false", "sh -c 'exit 3'", "ls /no-such-path"];
    unchanged(&mut c, &cmds, &v);
    unchanged(&mut c, &["export PATH", "true"], &v);
    let r = run_to_end(&mut c, &s, "X=1");
    assert_ne!(r["state_version"]["to"], v, "a change still bumps it: {r}");
}
