//! Shell state carried between fresh processes (issue 3), through the real binaries and socket: each
//! round trip sets something in one call and checks it in the next one.

use heddle_tests::{run_ok as ok, run_to_end as run, Client, Heddle};
use serde_json::{json, Value};

fn changes(r: &Value) -> Vec<String> {
    r["state_changes"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect()
}

/// A session whose first (recording) call already happened.
fn session(h: &Heddle, c: &mut Client) -> Value {
    let s = h.open_session(c);
    ok(c, &s, "true");
    s
}

#[test]
fn the_first_call_names_the_cwd_only_when_it_moved_from_where_the_session_was_opened() {
    let h = Heddle::start();
    let mut c = h.client();
    let stay = h.open_session(&mut c);
    let r = run(&mut c, &stay, "true");
    assert!(changes(&r).iter().any(|x| x.starts_with("state recorded (")), "{r}");
    assert_eq!(changes(&r).len(), 1, "a first call that changed nothing names nothing: {r}");
    let moved = h.open_session(&mut c);
    let r = run(&mut c, &moved, "cd /");
    assert!(changes(&r).contains(&"cwd → /".to_owned()), "{r}");
    // A first call that sets things says what it set, as any later call does (it said only the cwd).
    let busy = h.open_session(&mut c);
    let cmd = "export FOO=1 VIRTUAL_ENV=/v; PATH=/v/bin:$PATH; x=3; f() { :; }; alias ll='ls -l'";
    let r = run(&mut c, &busy, cmd);
    let said = changes(&r);
    for want in ["+export FOO", "+export VIRTUAL_ENV", "~var PATH", "+var x", "+function f", "+alias ll"] {
        assert!(said.contains(&want.to_owned()), "{want} is said: {said:?}");
    }
    assert_eq!(said.len(), 7, "and nothing of the fresh shell's own: {said:?}");
}

/// A venv's `activate` exports `PS1`; a non-interactive bash drops an inherited one, so it is restored by
/// the script: the next call keeps it and reports no `-var PS1` it never made.
#[test]
fn an_exported_prompt_is_carried_like_any_variable() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = session(&h, &mut c);
    let r = run(&mut c, &s, "export PS1='(.venv) '");
    assert!(changes(&r).contains(&"+export PS1".to_owned()), "{r}");
    let r = run(&mut c, &s, "declare -p PS1");
    assert_eq!(r["view"], "declare -x PS1=\"(.venv) \"\n", "{r}");
    assert!(changes(&r).is_empty(), "{r}");
}

#[test]
fn cwd_with_spaces_quotes_newline_and_non_ascii_and_cd_dash_and_the_directory_stack() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = session(&h, &mut c);
    let r = run(&mut c, &s, "mkdir -p $'a b \\'q\\' \"d\"\\nnl é' && cd $'a b \\'q\\' \"d\"\\nnl é'");
    assert!(changes(&r).iter().any(|x| x.starts_with("cwd → ")), "{r}");
    let pwd = ok(&mut c, &s, "printf '%s|' \"$PWD\"; pwd -P | od -c | head -1 >/dev/null; printf '%s' \"${PWD##*/}\"");
    assert!(pwd.ends_with("a b 'q' \"d\"\nnl é"), "{pwd:?}");
    ok(&mut c, &s, "cd /");
    assert_eq!(ok(&mut c, &s, "cd - >/dev/null; printf %s \"${PWD##*/}\""), "a b 'q' \"d\"\nnl é");
    ok(&mut c, &s, "mkdir -p d1 d2 && pushd d1 >/dev/null && pushd ../d2 >/dev/null");
    let dirs = ok(&mut c, &s, "echo ${#DIRSTACK[@]}; basename \"$PWD\"");
    assert_eq!(dirs, "3\nd2\n");
    let after = ok(&mut c, &s, "popd >/dev/null; basename \"$PWD\"");
    assert_eq!(after, "d1\n");
    assert_eq!(ok(&mut c, &s, "echo ${#DIRSTACK[@]}; basename \"$PWD\""), "2\nd1\n");
}

#[test]
fn variables_with_hard_values_arrays_attributes_and_unset() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = session(&h, &mut c);
    let set = concat!(
        "export EXP=$'line1\\nline2 \"q\" \\'s\\' $HOME \\\\ \\t tab'; PLAIN=$'p\\xff\\xfeq'; ",
        "declare -a IDX=(a 'b c'); SPARSE=([3]=x [10]=y); declare -A ASSOC=([k1]='v 1' [$'k\\n2']=v2); ",
        "declare -i NUM=6*7; declare -l LOW=ABC; declare -u UP=abc; declare -x XX=1; declare -r RO=fixed; ",
        "GONE=1; export PATH=\"$PATH:/opt/heddle-test-bin\""
    );
    let r = run(&mut c, &s, set);
    assert_eq!(r["exit_code"], 0, "{r}");
    let ch = changes(&r);
    assert!(ch.contains(&"+export EXP".to_owned()) && ch.contains(&"+var PLAIN".to_owned()), "{ch:?}");
    ok(&mut c, &s, "unset GONE");
    let check = concat!(
        "[[ $EXP == $'line1\\nline2 \"q\" \\'s\\' $HOME \\\\ \\t tab' ]] && echo exp; ",
        "env | grep -q '^EXP=line1' && echo exported; ",
        "[[ $PLAIN == $'p\\xff\\xfeq' ]] && echo plain; env | grep -q '^PLAIN=' || echo unexported; ",
        "echo ${#IDX[@]} \"${IDX[1]}\" ${!SPARSE[*]} \"${ASSOC[k1]}\" \"${ASSOC[$'k\\n2']}\"; ",
        "echo $NUM $LOW $UP; NUM=2+3; LOW=XYZ; UP=xyz; echo $NUM $LOW $UP; ",
        "declare -p XX RO | cut -d' ' -f2; (RO=changed) 2>/dev/null || echo refused; echo ${GONE-unset} ${PATH##*:}"
    );
    let out = ok(&mut c, &s, check);
    assert_eq!(
        out,
        "exp\nexported\nplain\nunexported\n2 b c 3 10 v 1 v2\n42 abc ABC\n5 xyz XYZ\n-x\n-r\nrefused\nunset /opt/heddle-test-bin\n"
    );
}

#[test]
fn functions_aliases_and_options() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = session(&h, &mut c);
    let define = concat!(
        "shopt -s extglob globstar nullglob; set -u -o pipefail\n",
        "outer() { inner() { echo \"inner $1\"; }; cat <<'EOF'\nheredoc $x }\nEOF\n",
        "  case $1 in @(a|b)*) echo ext;; esac; inner \"$1\"; }\n",
        "alias greet='echo hello from alias'"
    );
    let r = run(&mut c, &s, define);
    assert_eq!(r["exit_code"], 0, "{r}");
    assert!(changes(&r).contains(&"+function outer".to_owned()), "{r}");
    assert!(changes(&r).contains(&"+alias greet".to_owned()), "{r}");
    let out = ok(&mut c, &s, "outer abc; shopt -q extglob globstar nullglob && echo shopt; [[ $- == *u* ]] && echo u; [[ -o pipefail ]] && echo pf");
    assert_eq!(out, "heredoc $x }\next\ninner abc\nshopt\nu\npf\n");
    // Carried aliases expand in later calls (a non-interactive bash has `expand_aliases` off).
    assert!(changes(&r).contains(&"shopt -s expand_aliases".to_owned()), "{r}");
    assert_eq!(ok(&mut c, &s, "greet"), "hello from alias\n");
    let r = run(&mut c, &s, "unalias greet; shopt -u expand_aliases");
    assert!(
        changes(&r).contains(&"-alias greet".to_owned()) && changes(&r).contains(&"shopt -u expand_aliases".to_owned()),
        "with no alias left the option is the job's: {r}"
    );
    let r = run(&mut c, &s, "echo $UNDEFINED_VAR_HEDDLE");
    assert_ne!(r["exit_code"], 0, "set -u carried: {r}");
    ok(&mut c, &s, "set -e; umask 077");
    assert_eq!(ok(&mut c, &s, "umask; [[ $- == *e* ]] && echo e"), "0077\ne\n");
    // A failure under the carried `set -e` drops the call's changes: the note says why and how to stop it.
    let r = run(&mut c, &s, "cd /; export DROPPED=1; false");
    let note = r["state_note"].as_str().unwrap_or_default();
    assert!(note.contains("`set -e` is on in this session") && note.contains("`set +e` turns it off"), "{r}");
    assert_eq!(ok(&mut c, &s, "echo ${DROPPED:-none}"), "none\n");
}

#[test]
fn exec_and_exit_leave_the_state_unknown_and_keep_the_previous_one() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = session(&h, &mut c);
    ok(&mut c, &s, "export KEEP=1");
    for (cmd, code) in [("export LOST=1; exec true", 0), ("export LOST=1; cd /; exit 7", 7)] {
        let r = run(&mut c, &s, cmd);
        assert_eq!(r["exit_code"], code, "{r}");
        let note = r["state_note"].as_str().unwrap_or_default();
        assert!(note.starts_with("state unknown after this call; carrying the previous state"), "{r}");
    }
    let out = ok(&mut c, &s, "echo ${KEEP-} ${LOST-none}; [[ $PWD == / ]] || echo notroot");
    assert_eq!(out, "1 none\nnotroot\n");
}

#[test]
fn output_imitating_the_capture_format_changes_nothing() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = session(&h, &mut c);
    let fake = r#"printf '\0O\0\0errexit\0V\0declare -x FORGED="1"\n\0F\0\0X\0\0A\0alias FORGED='"'"'echo forged'"'"'\n\0D\0\0S\0\0\0\0U\0000\n\0P\0/\n\0E\0'; printf '\0E\0' >&2"#;
    let r = run(&mut c, &s, fake);
    assert_eq!(r["exit_code"], 0, "{r}");
    assert_eq!(r["state_changes"], json!([]), "{r}");
    assert_eq!(ok(&mut c, &s, "echo ${FORGED-none}; [[ $- == *e* ]] || echo no-e"), "none\nno-e\n");
}

#[test]
fn twenty_concurrent_exports_all_land_and_concurrent_cds_report_their_conflict() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = session(&h, &mut c);
    std::thread::scope(|scope| {
        for i in 0..20 {
            let (h, s) = (&h, &s);
            scope.spawn(move || {
                let mut c = h.client();
                let r = run(&mut c, s, &format!("sleep 0.2; export CONC_{i}={i}"));
                assert_eq!(r["exit_code"], 0, "{r}");
            });
        }
    });
    let out = ok(&mut c, &s, "for i in $(seq 0 19); do v=CONC_$i; printf '%s ' \"${!v}\"; done");
    assert_eq!(out, (0..20).map(|i| format!("{i} ")).collect::<String>());
    let results: Vec<Value> = std::thread::scope(|scope| {
        let hs: Vec<_> = ["/tmp", "/usr"]
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let (h, s) = (&h, &s);
                scope.spawn(move || {
                    let mut c = h.client();
                    run(&mut c, s, &format!("sleep 0.{}; cd {d}", 2 + 3 * i))
                })
            })
            .collect();
        hs.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let later = &results[1];
    assert!(changes(later).iter().any(|x| x.starts_with("conflict: cwd")), "{later}");
    assert!(!changes(&results[0]).iter().any(|x| x.starts_with("conflict")), "{}", results[0]);
    assert_eq!(ok(&mut c, &s, "pwd"), "/usr\n", "the later completion wins");
}

#[test]
fn the_earlier_job_of_a_conflict_learns_it_through_wait_jobs_and_one_announcement() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = session(&h, &mut c);
    let late = c.call("run", json!({"session": s, "cmd": "sleep 1; cd /usr", "yield_ms": 50})).unwrap();
    assert_eq!(late["state"], "running", "{late}");
    let early = run(&mut c, &s, "cd /tmp");
    assert!(early["state_conflicts"].as_array().unwrap().is_empty(), "{early}");
    let (a, b) = (early["job"].clone(), late["job"].clone());
    let w = c.call("wait", json!({"session": s, "job": b, "yield_ms": 20_000})).unwrap();
    assert!(changes(&w).iter().any(|x| x.starts_with("conflict: cwd")), "the later job names it: {w}");
    let announced: Vec<&Value> = w["announcements"].as_array().unwrap().iter().filter(|x| x["job"] == a).collect();
    assert_eq!(announced.len(), 1, "the session's next response announces the earlier job's conflict: {w}");
    let note = announced[0]["state_conflicts"][0].as_str().unwrap_or_default();
    assert!(note.starts_with("conflict: cwd") && note.contains(&format!("job {b}")), "{w}");
    let jobs = c.call("jobs", json!({"session": s})).unwrap();
    assert!(jobs["announcements"].as_array().unwrap().iter().all(|x| x["job"] != a), "announced once: {jobs}");
    let row = jobs["jobs"].as_array().unwrap().iter().find(|j| j["job"] == a).unwrap().clone();
    assert!(row["state_conflicts"][0].as_str().unwrap_or_default().starts_with("conflict: cwd"), "{jobs}");
    let again = c.call("wait", json!({"session": s, "job": a, "yield_ms": 100})).unwrap();
    assert_eq!(again["state_conflicts"], row["state_conflicts"], "{again}");
    assert_eq!(ok(&mut c, &s, "pwd"), "/usr\n", "the later completion wins");
}

#[test]
fn session_env_cannot_define_functions() {
    let h = Heddle::start();
    let mut c = h.client();
    let env = json!({"BASH_FUNC_ls%%": "() { echo owned; }"});
    let e = c.call("session.open", json!({"name": "f", "env": env})).unwrap_err();
    assert!(format!("{e:?}").contains("import it as a function"), "{e:?}");
    let s = session(&h, &mut c);
    let e = c.call("run", json!({"session": s, "cmd": "ls /", "env": env})).unwrap_err();
    assert!(format!("{e:?}").contains("import it as a function"), "{e:?}");
}

#[test]
fn environment_borne_functions_and_exports_behave_as_before() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = session(&h, &mut c);
    ok(&mut c, &s, "export EB='a \"b\" $c `d` \\e'; greet() { echo \"hi $1\"; }; plain() { :; }");
    let out = ok(&mut c, &s, "printf '%s\\n' \"$EB\"; greet x; env | grep -c '^BASH_FUNC_plain' || true; bash -c 'type -t plain || echo none'");
    assert_eq!(out, "a \"b\" $c `d` \\e\nhi x\n0\nnone\n", "functions are not exported to children by the restore");
}

#[test]
fn a_function_exported_with_export_f_stays_exported() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = session(&h, &mut c);
    let r = run(
        &mut c,
        &s,
        "shown() { echo \"child sees $1\"; }; export -f shown; hidden() { :; }; alias a1='echo 1' a2=\"it's\"",
    );
    assert!(changes(&r).contains(&"+export -f shown".to_owned()), "{r}");
    let out = ok(&mut c, &s, "bash -c 'shown x; type -t hidden || echo no-hidden'; alias a1 a2");
    assert_eq!(out, "child sees x\nno-hidden\nalias a1='echo 1'\nalias a2='it'\\''s'\n");
    ok(&mut c, &s, "export -nf shown");
    assert_eq!(ok(&mut c, &s, "shown y; bash -c 'type -t shown || echo gone'"), "child sees y\ngone\n");
}

#[test]
fn describe_and_session_open_report_the_state_version() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = session(&h, &mut c);
    ok(&mut c, &s, "export DESCRIBED=1; f() { :; }");
    let d = c.call("describe", json!({"session": s})).unwrap();
    let st = &d["sessions"][0]["shell_state"];
    assert_eq!(st["version"], 2, "{st}");
    assert!(st["exported"].as_array().unwrap().contains(&json!("DESCRIBED")), "{st}");
    assert_eq!(st["functions"], json!(["f"]));
    let name = d["sessions"][0]["session"].clone();
    let again = c.call("session.open", json!({"name": name})).unwrap();
    assert_eq!((again["attached"].as_bool(), again["state_version"].as_u64()), (Some(true), Some(2)));
}

/// One call's stdout and stderr, each whole.
fn streams(c: &mut Client, s: &Value, cmd: &str) -> (String, String) {
    let r = run(c, s, cmd);
    assert!(r["state_note"].is_null(), "{cmd}: {r}");
    let mut text = |stream| heddle_tests::stream_text(c, s, &r["job"], stream);
    (text("stdout"), text("stderr"))
}

#[test]
fn carried_set_x_and_set_v_trace_and_echo_only_the_command() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = session(&h, &mut c);
    assert_eq!(streams(&mut c, &s, "set -x; echo one"), ("one\n".into(), "++ echo one\n".into()));
    for _ in 0..2 {
        // Twice: the first call after the change runs cold or on a spare restored with it, the next on a spare.
        let (out, err) = streams(&mut c, &s, "echo two\nf() { echo in f; }; f");
        assert_eq!((out.as_str(), err.as_str()), ("two\nin f\n", "++ echo two\n++ f\n++ echo in f\n"));
    }
    ok(&mut c, &s, "set +x -v");
    for _ in 0..2 {
        let (out, err) = streams(&mut c, &s, "echo three\necho four");
        assert_eq!((out.as_str(), err.as_str()), ("three\nfour\n", "echo three\necho four\n"));
    }
    ok(&mut c, &s, "set +v");
    assert_eq!(streams(&mut c, &s, "echo five"), ("five\n".into(), String::new()));
}

#[test]
fn line_numbers_execution_string_and_a_trailing_backslash_are_those_of_bash_c() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = session(&h, &mut c);
    let cmd = "echo $LINENO\ng() { echo $LINENO; }; g\n[[ ${BASH_EXECUTION_STRING%%$'\\n'*} == 'echo $LINENO' ]] && echo $LINENO\nreturn 3";
    let r = run(&mut c, &s, cmd);
    assert_eq!(r["exit_code"], 2, "as `bash -c` exits: {r}");
    let out = heddle_tests::stream_text(&mut c, &s, &r["job"], "stdout");
    let err = heddle_tests::stream_text(&mut c, &s, &r["job"], "stderr");
    assert_eq!(out, "1\n2\n3\n", "{r}");
    assert!(err.starts_with("bash: line 4: return:"), "{err}");
    // bash's own quirk after an `eval` of text ending in a backslash must not cost the capture.
    let r = run(&mut c, &s, "export TRAIL=1; echo a \\");
    assert_eq!((r["exit_code"].as_i64(), r["state_note"].is_null()), (Some(0), true), "{r}");
    assert_eq!(ok(&mut c, &s, "echo $TRAIL"), "1\n");
}

#[test]
fn aliases_with_hard_values_round_trip() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = session(&h, &mut c);
    let define = "alias q=\"echo it\\'s\" nl=$'echo a\\necho b' eq='echo a=b' u=$'echo \\xc3\\xa9 \\xff' e=; alias -- -d='echo dash'";
    let check = "alias -p; shopt -s expand_aliases\nq\nnl\neq\nu\n-d";
    let r = run(&mut c, &s, define);
    assert_eq!(r["exit_code"], 0, "{r}");
    assert!(changes(&r).contains(&"+alias nl".to_owned()) && changes(&r).contains(&"+alias -d".to_owned()), "{r}");
    let r = run(&mut c, &s, check);
    // Raw bytes, so the \xff stays; the same two steps in one real bash are the reference.
    let out = heddle_tests::read_stream(&mut c, &s, &r["job"], "stdout");
    let both = format!("{define}\n{check}");
    let want = std::process::Command::new("bash").args(["--noprofile", "--norc", "-c", &both]).output().expect("bash");
    assert_eq!(out, want.stdout, "{}", String::from_utf8_lossy(&out));
    assert!(String::from_utf8_lossy(&out).contains("\nit's\na\nb\na=b\n"), "{r}");
    ok(&mut c, &s, "unalias nl");
    assert_eq!(ok(&mut c, &s, "alias nl 2>/dev/null || echo gone"), "gone\n");
}

#[test]
fn a_command_that_changes_only_variables_it_names_keeps_the_rest_and_carries_its_changes() {
    // `cd`, a loop variable, `unset`, assignments and programs: the front reads the command as unable to
    // change anything else, and its capture lists only those (docs/architecture.md, "Capture scope").
    let h = Heddle::start();
    let mut c = h.client();
    let s = session(&h, &mut c);
    ok(
        &mut c,
        &s,
        "export KEEP=1 GONE=1; N=5; f() { echo fn; }; shopt -s expand_aliases; alias al='echo al'; mkdir -p sub",
    );
    let r = run(&mut c, &s, "cd sub && ls >/dev/null; for i in 1 2; do :; done; unset GONE; C=3 true; D=\"$N$KEEP\"");
    assert_eq!((r["exit_code"].as_i64(), r["state_note"].is_null()), (Some(0), true), "{r}");
    let ch = changes(&r);
    for item in ["cwd → ", " i", "GONE", " D"] {
        assert!(ch.iter().any(|x| x.contains(item)), "{item}: {ch:?}");
    }
    let out = ok(&mut c, &s, "echo \"${PWD##*/} $i ${GONE-unset} ${C-none} $D $KEEP $N\"; f; al; env | grep -c ^KEEP=");
    assert_eq!(out, "sub 2 unset none 51 1 5\nfn\nal\n1\n");
    let r = run(&mut c, &s, "ls >/dev/null; echo \"$KEEP\" | tr 1 2");
    assert_eq!((changes(&r).len(), r["state_note"].is_null()), (0, true), "a program changes nothing: {r}");
}

#[test]
fn a_command_that_forges_the_capture_scope_gets_the_state_unknown_note() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = session(&h, &mut c);
    ok(&mut c, &s, "export KEEP=1");
    let r = run(&mut c, &s, "__heddle_n=(KEEP); KEEP=2");
    let note = r["state_note"].as_str().unwrap_or_default();
    assert!(note.starts_with("state unknown after this call; carrying the previous state"), "{r}");
    assert_eq!(r["exit_code"], 0, "{r}");
    assert_eq!(ok(&mut c, &s, "echo $KEEP"), "1\n");
}

#[test]
fn jobs_that_reach_the_same_values_report_no_conflict_and_returned_jobs_are_not_announced_again() {
    let h = Heddle::start();
    let mut c = h.client();
    // A job started before the session's first record, then the recording one overtakes it.
    let s = h.open_session(&mut c);
    let old = c.call("run", json!({"session": s, "cmd": "sleep 1; echo old", "yield_ms": 50})).unwrap();
    assert_eq!(old["state"], "running", "{old}");
    let first = run(&mut c, &s, "echo first");
    let w = c.call("wait", json!({"session": s, "job": old["job"], "yield_ms": 20_000})).unwrap();
    assert_eq!(w["state_conflicts"], json!([]), "{w}");
    assert!(changes(&w).is_empty(), "the older job changed nothing: {w}");
    let next = run(&mut c, &s, "true");
    let again: Vec<&Value> =
        next["announcements"].as_array().unwrap().iter().filter(|a| a["job"] == first["job"]).collect();
    assert!(again.is_empty(), "the returned recording job is not announced again: {next}");
    // In a warm session two overlapping `cd`s from the same directory move OLDPWD alike: cwd alone differs.
    ok(&mut c, &s, "mkdir -p one two");
    let late = c.call("run", json!({"session": s, "cmd": "sleep 1; cd two", "yield_ms": 50})).unwrap();
    let early = run(&mut c, &s, "cd one");
    assert_eq!(early["state_conflicts"], json!([]), "{early}");
    let w = c.call("wait", json!({"session": s, "job": late["job"], "yield_ms": 20_000})).unwrap();
    let named: Vec<String> = changes(&w).into_iter().filter(|x| x.starts_with("conflict")).collect();
    assert_eq!(named.len(), 1, "{w}");
    assert!(named[0].starts_with("conflict: cwd also changed"), "only cwd, not OLDPWD: {w}");
    let text = heddle_tests::text_form(&w);
    assert!(text.contains("\n  conflict: cwd changed again by job"), "the earlier job is told once: {text}");
    assert!(!text.contains("conflict: conflict:"), "{text}");
}

/// A job that ended while nobody waited on it changed the shell state the next calls run in: its
/// announcement says what it changed (and the text form shows it under the job's line).
#[test]
fn a_job_that_ended_unseen_announces_what_it_changed_in_the_shell_state() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = session(&h, &mut c);
    let cmd = "sleep 0.3; mkdir -p later && cd later && export FROM_BEHIND=1";
    let r = c.call("run", json!({"session": s, "cmd": cmd, "yield_ms": 0})).unwrap();
    assert_eq!(r["state"], "running", "{r}");
    std::thread::sleep(std::time::Duration::from_millis(1000));
    let r = run(&mut c, &s, "pwd");
    assert_eq!(r["view"], format!("{}/later\n", h.project.display()), "{r}");
    let a = &r["announcements"][0];
    assert_eq!(a["job"], r["job"].as_u64().unwrap() - 1, "{r}");
    let told: Vec<&str> = a["state_changes"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(told, [format!("cwd → {}/later", h.project.display()).as_str(), "+export FROM_BEHIND"], "{r}");
    let text = protocol::text::announcements(&serde_json::from_value::<Vec<_>>(r["announcements"].clone()).unwrap());
    assert!(
        text.contains(&format!("\n  shell state: cwd → {}/later, +export FROM_BEHIND\n", h.project.display())),
        "{text}"
    );
}
