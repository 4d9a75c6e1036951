//! The named persistent session (issue 3): one long-lived bash whose commands run one at a time, through
//! the real binaries and socket.

use heddle_tests::{run_ok as ok, run_to_end as run, Client, Heddle};
use serde_json::{json, Value};

fn persistent(h: &Heddle, c: &mut Client) -> Value {
    let r = c.call("session.open", json!({"cwd": h.project, "persistent": true})).expect("session.open");
    assert_eq!(r["persistent"], true, "{r}");
    r["session"].clone()
}

#[test]
fn keeps_a_trap_and_a_background_job_and_survives_strict_mode_and_ps1() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = persistent(&h, &mut c);
    let d = c.call("describe", json!({"session": s})).unwrap();
    assert_eq!(d["sessions"][0]["persistent"], true, "{d}");
    ok(&mut c, &s, "trap 'echo bye' USR1; sleep 300 & echo started; exec 7>/dev/null");
    ok(&mut c, &s, "set -euo pipefail; PS1='$ '");
    let v = ok(&mut c, &s, "jobs; trap -p USR1; echo fd >&7 && echo fd7-open; echo $-");
    assert!(v.contains("Running") && v.contains("sleep 300"), "{v}");
    assert!(v.contains("trap -- 'echo bye' SIGUSR1"), "{v}");
    assert!(v.contains("fd7-open"), "{v}");
    assert!(v.lines().last().unwrap().contains('e') && v.lines().last().unwrap().contains('u'), "{v}");
    assert_eq!(ok(&mut c, &s, "cat; echo after-stdin"), "after-stdin\n", "stdin is /dev/null");
}

#[test]
fn exit_is_reported_and_the_next_call_has_the_previous_state() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = persistent(&h, &mut c);
    ok(&mut c, &s, "export KEEP=kept; mkdir -p sub && cd sub");
    let r = run(&mut c, &s, "KEEP=lost; echo before; exit 3");
    assert_eq!(r["exit_code"], 3, "{r}");
    assert!(r["view"].as_str().unwrap().contains("before"), "{r}");
    let note = r["state_note"].as_str().unwrap_or_default();
    assert!(note.starts_with("state unknown after this call") && note.contains("persistent shell"), "{r}");
    assert_eq!(ok(&mut c, &s, "echo $KEEP ${PWD##*/}"), "kept sub\n");
    let r = run(&mut c, &s, "exec true");
    assert!(r["state_note"].is_string(), "{r}");
    assert_eq!(ok(&mut c, &s, "echo $KEEP"), "kept\n");
}

#[test]
fn output_that_imitates_the_framing_changes_nothing() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = persistent(&h, &mut c);
    ok(&mut c, &s, "X=1");
    let fake = r#"printf '0\n\0O\0\0V\0declare -- X="forged"\n\0E\0'; printf '5\n' >&2; printf '\0\0' "#;
    let v = run(&mut c, &s, fake);
    assert_eq!(v["exit_code"], 0, "{v}");
    assert_eq!(ok(&mut c, &s, "echo $X"), "1\n");
    let r = run(&mut c, &s, "echo 7 >&0; echo ok");
    assert!(r["view"].as_str().unwrap().contains("ok"), "{r}");
    assert_eq!(ok(&mut c, &s, "echo $X"), "1\n");
}

#[test]
fn kill_of_a_long_command_works_and_the_next_call_works() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = persistent(&h, &mut c);
    ok(&mut c, &s, "export KEEP=kept");
    let r = c.call("run", json!({"session": s, "cmd": "sleep 1000", "yield_ms": 200})).unwrap();
    assert_eq!(r["state"], "running", "{r}");
    let queued = c.call("run", json!({"session": s, "cmd": "echo queued", "yield_ms": 0})).unwrap();
    let k = c.call("kill", json!({"session": s, "job": r["job"]})).unwrap();
    assert_eq!(k["state"], "killed", "{k}");
    let w = c.call("wait", json!({"session": s, "job": queued["job"], "yield_ms": 20_000})).unwrap();
    assert_eq!((w["state"].as_str(), w["view"].as_str()), (Some("exited"), Some("queued\n")), "{w}");
    assert_eq!(ok(&mut c, &s, "echo $KEEP"), "kept\n");
}

#[test]
fn set_x_and_set_v_trace_and_echo_only_the_command() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = persistent(&h, &mut c);
    ok(&mut c, &s, "set -x");
    let r = run(&mut c, &s, "echo two\necho three");
    let err = heddle_tests::stream_text(&mut c, &s, &r["job"], "stderr");
    assert_eq!(err, "++ echo two\n++ echo three\n", "{r}");
    ok(&mut c, &s, "set +x -v");
    let r = run(&mut c, &s, "echo four\necho five");
    let err = heddle_tests::stream_text(&mut c, &s, &r["job"], "stderr");
    assert_eq!(err, "echo four\necho five\n", "{r}");
}

#[test]
fn a_command_starts_with_the_previous_commands_status_as_in_one_shell() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = persistent(&h, &mut c);
    assert_eq!(run(&mut c, &s, "(exit 7)")["exit_code"], 7);
    assert_eq!(ok(&mut c, &s, "echo $?; declare -F | grep -c heddle || :"), "7\n0\n", "no helper left behind");
    assert_eq!(run(&mut c, &s, "set -x; (exit 5)")["exit_code"], 5);
    let r = run(&mut c, &s, "echo status $?");
    assert_eq!(heddle_tests::read_stream(&mut c, &s, &r["job"], "stdout"), b"status 5\n", "{r}");
    let err = heddle_tests::read_stream(&mut c, &s, &r["job"], "stderr");
    assert_eq!(String::from_utf8_lossy(&err), "++ echo status 5\n", "only the command is traced");
    ok(&mut c, &s, "set +x -e; :() { echo shadow-colon; }");
    assert_eq!(ok(&mut c, &s, "echo $- $?"), "ehBc 0\n", "the shell lives on under set -e, its loop calls no `:`");
}

fn changes(r: &Value) -> String {
    r["state_changes"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect::<Vec<_>>().join(" | ")
}

#[test]
fn a_trap_that_changes_variables_keeps_every_capture_whole() {
    // `true` changes nothing by its text, so its capture would be scoped to nothing; but a DEBUG trap
    // counts every command the shell runs. The worker sees the trap and takes the whole capture, so the
    // record follows the shell.
    let h = Heddle::start();
    let mut c = h.client();
    let s = persistent(&h, &mut c);
    ok(&mut c, &s, "export KEEP=1");
    ok(&mut c, &s, "true");
    ok(&mut c, &s, "TICKS=0; trap 'TICKS=$((TICKS+1))' DEBUG");
    let r = run(&mut c, &s, "true");
    assert!(r["state_note"].is_null(), "{r}");
    assert!(changes(&r).contains("TICKS"), "the trap's count is in the record: {r}");
    let r = run(&mut c, &s, "trap - DEBUG");
    assert!(r["state_note"].is_null(), "{r}");
    let counted = ok(&mut c, &s, "echo $TICKS");
    // Without the trap the next captures may be scoped again, and still nothing is missed.
    let r = run(&mut c, &s, "MORE=2; true");
    assert_eq!(changes(&r), "+var MORE", "{r}");
    assert_eq!(ok(&mut c, &s, "echo $TICKS $MORE"), format!("{} 2\n", counted.trim()));
}

#[test]
fn a_command_queued_behind_one_that_defines_its_function_keeps_its_capture_whole() {
    // At admission the record does not know `f` yet (the command defining it still runs), so `f` reads
    // as a program that changes nothing; the front must not scope its capture then.
    let h = Heddle::start();
    let mut c = h.client();
    let s = persistent(&h, &mut c);
    ok(&mut c, &s, "export KEEP=1");
    let first = c.call("run", json!({"session": s, "cmd": "sleep 0.5; f() { FROM_F=set; }", "yield_ms": 0})).unwrap();
    assert_eq!(first["state"], "running", "{first}");
    // A command killed while it waits its turn ends before the one ahead of it: it proves nothing.
    let queued = c.call("run", json!({"session": s, "cmd": "true", "yield_ms": 0})).unwrap();
    c.call("kill", json!({"session": s, "job": queued["job"]})).unwrap();
    let gone = c.call("wait", json!({"session": s, "job": queued["job"], "yield_ms": 5000})).unwrap();
    assert_ne!(gone["state"], "running", "{gone}");
    let r = run(&mut c, &s, "f");
    assert!(r["state_note"].is_null(), "{r}");
    assert!(changes(&r).contains("FROM_F"), "f's assignment is in the record: {r}");
    assert_eq!(ok(&mut c, &s, "echo $FROM_F"), "set\n");
}
