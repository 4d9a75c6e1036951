//! Interactive jobs (issue 24) end to end through the socket: real programs on a PTY the worker opens
//! (`run {tty}`), driven with `write` (text and named keys) and read through the headless screen.

use heddle_tests::{bin_dir, eventually, job_cgroup, pids_of, populated, Client, Heddle};
use serde_json::{json, Value};
use std::process::Command;
use std::time::{Duration, Instant};

fn run_tty(c: &mut Client, s: &Value, cmd: &str) -> Value {
    let r = c
        .call("run", json!({"session": s, "cmd": cmd, "tty": {"rows": 24, "cols": 80}, "yield_ms": 200}))
        .expect("run tty");
    assert_eq!(r["state"], "running", "{cmd}: {r}");
    r["job"].clone()
}

/// The screen's text now (the `screen` view).
fn screen(c: &mut Client, s: &Value, job: &Value) -> Value {
    c.call("output", json!({"session": s, "job": job, "screen": true})).expect("screen view")["terminal"].clone()
}

/// Wait (≤ 10 s) until the screen satisfies `ok`; the screen.
fn screen_until(c: &mut Client, s: &Value, job: &Value, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let t = screen(c, s, job);
        if ok(&t) {
            return t;
        }
        assert!(Instant::now() < deadline, "the screen never showed {what}: {t}");
        std::thread::sleep(Duration::from_millis(30));
    }
}

fn has_line(t: &Value, line: &str) -> bool {
    t["text"].as_str().unwrap_or_default().lines().any(|l| l.trim_end() == line)
}

fn write(c: &mut Client, s: &Value, job: &Value, params: Value) -> Value {
    let mut p = json!({"session": s, "job": job, "yield_ms": 5000});
    for (k, v) in params.as_object().unwrap() {
        p[k] = v.clone();
    }
    c.call("write", p).expect("write")
}

fn wait_end(c: &mut Client, s: &Value, job: &Value) -> Value {
    let r = c.call("wait", json!({"session": s, "job": job, "yield_ms": 10_000})).expect("wait");
    assert_ne!(r["state"], "running", "the job did not end: {r}");
    r
}

#[test]
fn python_repl_answers_on_the_screen_and_ctrl_d_ends_it() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let job = run_tty(&mut c, &s, "python3 -q");
    screen_until(&mut c, &s, &job, "the >>> prompt", |t| t["cursor_line"] == ">>>");
    let r = c.call("wait", json!({"session": s, "job": job, "yield_ms": 100})).unwrap();
    assert_eq!(r["liveness"]["activity"], "waiting for input: \">>>\"", "readline polls its terminal: {r}");
    let r = write(&mut c, &s, &job, json!({"text": "1+1", "keys": ["Enter"]}));
    let t = &r["terminal"];
    assert!(has_line(t, "2"), "1+1 → 2 on the screen: {t}");
    assert_eq!(t["alternate_screen"], false);
    assert_eq!(r["receipt"]["op"], "write");
    write(&mut c, &s, &job, json!({"text": "def twice(x):\n    return 2 * x\n\n"}));
    let r = write(&mut c, &s, &job, json!({"text": "twice(21)", "keys": ["Enter"]}));
    assert!(has_line(&r["terminal"], "42"), "a multi-line def works: {}", r["terminal"]);
    write(&mut c, &s, &job, json!({"keys": ["C-d"]}));
    let end = wait_end(&mut c, &s, &job);
    assert_eq!((end["state"].as_str(), end["exit_code"].as_i64()), (Some("exited"), Some(0)), "{end}");
    assert!(end["view"].as_str().unwrap().contains(">>> 1+1"), "the raw stream is kept and rendered: {end}");
}

#[test]
fn a_read_prompt_is_told_as_waiting_for_input_and_answered() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let job = run_tty(&mut c, &s, "read -p 'Name? ' n; echo \"hi $n\"");
    screen_until(&mut c, &s, &job, "the prompt", |t| t["cursor_line"] == "Name?");
    let r = c.call("wait", json!({"session": s, "job": job, "yield_ms": 100})).unwrap();
    assert_eq!(r["liveness"]["activity"], "waiting for input: \"Name?\"", "{r}");
    assert_eq!(r["terminal"]["cursor"], json!([0, 6]));
    let tty = c.call("run", json!({"session": s, "cmd": "echo $TERM", "tty": {"rows": 5, "cols": 40}})).unwrap();
    assert!(tty["view"].as_str().unwrap().starts_with("xterm-256color"), "{tty}");
    write(&mut c, &s, &job, json!({"text": "Ada", "keys": ["Enter"]}));
    let end = wait_end(&mut c, &s, &job);
    assert_eq!(end["exit_code"], 0);
    assert!(end["view"].as_str().unwrap().contains("hi Ada"), "{end}");
}

#[test]
fn ssh_keygen_takes_both_passphrase_prompts() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let job = run_tty(&mut c, &s, "ssh-keygen -q -t ed25519 -C test -f KEY");
    screen_until(&mut c, &s, &job, "the first passphrase prompt", |t| {
        t["cursor_line"].as_str().unwrap_or_default().starts_with("Enter passphrase")
    });
    let r = c.call("wait", json!({"session": s, "job": job, "yield_ms": 100})).unwrap();
    let activity = r["liveness"]["activity"].as_str().unwrap_or_default().to_owned();
    assert!(activity.starts_with("waiting for input: \"Enter passphrase"), "{r}");
    let r = write(&mut c, &s, &job, json!({"text": "correct horse", "keys": ["Enter"]}));
    assert!(r["terminal"]["cursor_line"].as_str().unwrap().starts_with("Enter same passphrase"), "{r}");
    write(&mut c, &s, &job, json!({"text": "correct horse", "keys": ["Enter"]}));
    assert_eq!(wait_end(&mut c, &s, &job)["exit_code"], 0);
    let check =
        c.call("run", json!({"session": s, "cmd": "ssh-keygen -y -P 'correct horse' -f KEY | cut -d' ' -f1"})).unwrap();
    assert_eq!(check["view"], "ssh-ed25519\n", "the key opens with the passphrase typed: {check}");
}

#[test]
fn vi_edits_a_file_on_disk() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let file = h.project.join("notes.txt");
    std::fs::write(&file, "hello\n").unwrap();
    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    let job = run_tty(&mut c, &s, "vi -i NONE notes.txt");
    let t = screen_until(&mut c, &s, &job, "vi's screen", |t| t["alternate_screen"] == true && has_line(t, "hello"));
    assert_eq!(t["cursor"], json!([0, 0]));
    write(&mut c, &s, &job, json!({"text": "iedited ", "keys": ["Escape"]}));
    write(&mut c, &s, &job, json!({"text": ":wq", "keys": ["Enter"]}));
    assert_eq!(wait_end(&mut c, &s, &job)["exit_code"], 0);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "edited hello\n");
}

#[test]
fn less_pages_with_space_and_quits_with_q() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    c.call("run", json!({"session": s, "cmd": "seq 1 1000 > long.txt"})).unwrap();
    let job = run_tty(&mut c, &s, "less long.txt");
    let t = screen_until(&mut c, &s, &job, "the first page", |t| has_line(t, "1") && has_line(t, "23"));
    assert_eq!(t["alternate_screen"], true);
    let r = write(&mut c, &s, &job, json!({"keys": ["Space"]}));
    let text = r["terminal"]["text"].as_str().unwrap();
    assert_eq!(text.lines().next(), Some("24"), "one page on (23 lines): {text}");
    assert!(has_line(&r["terminal"], "46"), "{text}");
    write(&mut c, &s, &job, json!({"text": "q"}));
    let end = wait_end(&mut c, &s, &job);
    assert_eq!(end["exit_code"], 0, "{end}");
}

#[test]
fn top_shows_its_screen_and_quits_with_q() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let job = run_tty(&mut c, &s, "top");
    // procps-ng top (4.0) clears and redraws the main screen (it sends no smcup), so the header is the
    // screen's first line whichever screen it draws on.
    let t = screen_until(&mut c, &s, &job, "top's header", |t| {
        let text = t["text"].as_str().unwrap_or_default();
        text.starts_with("top - ") && text.lines().any(|l| l.starts_with("Tasks:"))
    });
    assert!(t["text"].as_str().unwrap().lines().any(|l| l.contains("PID") && l.contains("COMMAND")), "{t}");
    let r = c.call("wait", json!({"session": s, "job": job, "yield_ms": 100})).unwrap();
    assert_eq!(r["state"], "running", "top runs until told to quit: {r}");
    write(&mut c, &s, &job, json!({"text": "q"}));
    let end = wait_end(&mut c, &s, &job);
    assert_eq!((end["state"].as_str(), end["exit_code"].as_i64()), (Some("exited"), Some(0)), "{end}");
}

#[test]
fn ctrl_c_ends_sleep_by_sigint_and_empties_its_cgroup() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let job = run_tty(&mut c, &s, "sleep 100");
    let dir = job_cgroup(&mut c, &s, &job);
    assert!(!pids_of(&dir).is_empty(), "sleep runs in the job's cgroup");
    let r = write(&mut c, &s, &job, json!({"keys": ["C-c"]}));
    assert!(r["terminal"]["text"].as_str().unwrap().contains("^C"), "the terminal echoes ^C: {r}");
    let end = wait_end(&mut c, &s, &job);
    assert_eq!((end["signal"].as_i64(), end["exit_code"].as_i64()), (Some(2), None), "ended by SIGINT: {end}");
    assert!(eventually(Duration::from_secs(5), || !populated(&dir)), "nothing left in {}", dir.display());
}

#[test]
fn a_retried_write_types_once() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let job = run_tty(&mut c, &s, "cat");
    let first = write(&mut c, &s, &job, json!({"text": "once", "keys": ["Enter"], "idempotency_key": "w-1"}));
    let again = write(&mut c, &s, &job, json!({"text": "once", "keys": ["Enter"], "idempotency_key": "w-1"}));
    assert_eq!(first["receipt"]["replayed"], false);
    assert_eq!(again["receipt"]["replayed"], true);
    assert_eq!(again["receipt"]["id"], first["receipt"]["id"]);
    write(&mut c, &s, &job, json!({"text": "then", "keys": ["Enter"]}));
    let t = screen(&mut c, &s, &job);
    let lines: Vec<&str> = t["text"].as_str().unwrap().lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(lines, ["once", "once", "then", "then"], "typed once (echo + cat's copy): {t}");
    let e = c.call("write", json!({"session": s, "job": job, "text": "other", "idempotency_key": "w-1"})).unwrap_err();
    assert!(e.to_string().contains("already used"), "{e}");
    write(&mut c, &s, &job, json!({"keys": ["C-d"]}));
    assert_eq!(wait_end(&mut c, &s, &job)["exit_code"], 0);
}

#[test]
fn a_stdin_pipe_is_fed_by_write_and_closed_by_eof() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let r = c.call("run", json!({"session": s, "cmd": "tr a-z A-Z", "stdin": "pipe", "yield_ms": 100})).unwrap();
    let job = r["job"].clone();
    let big = "x".repeat(300_000);
    write(&mut c, &s, &job, json!({"text": format!("hello\n{big}\n"), "eof": true, "quiet_ms": 0}));
    let end = wait_end(&mut c, &s, &job);
    assert_eq!(end["exit_code"], 0);
    assert_eq!(end["stdout_bytes"], 6 + 300_001, "a write larger than the pipe buffer is queued, not dropped");
    assert!(end["view"].as_str().unwrap().starts_with("HELLO\n"), "{end}");
}

#[test]
fn a_write_to_a_stdin_pipe_answers_with_what_the_job_printed_since() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let cmd = "echo ready; while read l; do if [ \"$l\" = many ]; then seq 1 100000; else echo \"got $l\"; echo \"err $l\" >&2; fi; done";
    let r = c.call("run", json!({"session": s, "cmd": cmd, "stdin": "pipe", "yield_ms": 300})).unwrap();
    let job = r["job"].clone();
    assert_eq!(r["view"], "ready\n", "{r}");
    let r = write(&mut c, &s, &job, json!({"text": "one\n"}));
    assert_eq!(r["terminal"], Value::Null, "a pipe job has no screen: {r}");
    assert_eq!(r["new_output"], "got one\nerr one\n", "what the job printed in answer, both streams: {r}");
    let r = write(&mut c, &s, &job, json!({"text": "two\n"}));
    assert_eq!(r["new_output"], "got two\nerr two\n", "only what came since this write: {r}");
    // An answer longer than the budget keeps its newest lines, the rest named with the call that shows it.
    let r = write(&mut c, &s, &job, json!({"text": "many\n", "quiet_ms": 500}));
    let out = r["new_output"].as_str().unwrap();
    assert!(out.len() <= 40_000, "bounded: {} bytes", out.len());
    assert!(out.ends_with("99999\n100000\n"), "{}", &out[out.len() - 100..]);
    let marker = out.lines().next().unwrap();
    let shown = out.lines().count() as u64 - 1;
    let first = 100_000 - shown + 1;
    // Lines 1–5 came before the write (ready, got/err one, got/err two); `seq`'s lines 1..first-1 are omitted.
    let bytes: usize = (1..first).map(|i| i.to_string().len() + 1).sum();
    let exact = format!("{} lines, {bytes} bytes omitted (lines 6–{}); ", first - 1, 5 + first - 1);
    assert!(marker.starts_with("[… heddle: ") && marker.contains(&exact), "{exact} in {marker}");
    write(&mut c, &s, &job, json!({"eof": true}));
    assert_eq!(wait_end(&mut c, &s, &job)["exit_code"], 0);
}

#[test]
fn lines_scrolled_past_a_full_scrollback_are_counted_exactly() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let r = c
        .call("run", json!({"session": s, "cmd": "seq 1 3000", "tty": {"rows": 5, "cols": 40}, "yield_ms": 10_000}))
        .unwrap();
    assert_eq!(r["exit_code"], 0, "{r}");
    let t = &r["terminal"];
    assert_eq!(t["text"], "2997\n2998\n2999\n3000\n\n", "{t}");
    // Lines 1–2996 left the 5-row screen (the cursor's empty line is the fifth), past the 1,000 kept.
    let scrolled: Vec<&str> = t["scrolled"].as_array().unwrap().iter().map(|l| l.as_str().unwrap()).collect();
    assert_eq!(scrolled.len(), 200, "{t}");
    assert_eq!(scrolled.first().copied(), Some("2797"));
    assert_eq!(scrolled.last().copied(), Some("2996"));
    assert_eq!(t["scrolled_more"], 2996 - 200, "every line counted once: {t}");
}

#[test]
fn a_terminal_job_that_floods_and_exits_answers_with_its_last_screen() {
    // A PTY master's FIONREAD counts the line discipline's 4 KiB at most: the rest of what a job wrote
    // waits in the terminal's flip buffers, and `Exited` went out before it was read. The worker is
    // stopped while the job writes ~11 KiB (what the terminal takes without a reader) and exits, so
    // all of it waits when the worker looks.
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let worker = c.call("describe", json!({"session": s})).unwrap()["sessions"][0]["worker"]["pid"].as_i64().unwrap();
    let worker = nix::unistd::Pid::from_raw(i32::try_from(worker).unwrap());
    let cmd = r"sleep 0.3; head -c 10000 /dev/zero | tr '\0' x; printf '\nEND\n'";
    for round in 0..3 {
        let r =
            c.call("run", json!({"session": s, "cmd": cmd, "tty": {"rows": 5, "cols": 40}, "yield_ms": 0})).unwrap();
        let job = r["job"].clone();
        nix::sys::signal::kill(worker, nix::sys::signal::Signal::SIGSTOP).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(1500));
        nix::sys::signal::kill(worker, nix::sys::signal::Signal::SIGCONT).unwrap();
        let r = c.call("wait", json!({"session": s, "job": job, "yield_ms": 10_000})).unwrap();
        assert_eq!(r["exit_code"], 0, "{r}");
        let text = r["terminal"]["text"].as_str().unwrap();
        assert!(text.contains("END"), "round {round}: the screen the answer shows lacks the job's last line: {text:?}");
    }
}

#[test]
fn scroll_up_sequences_are_counted_exactly_also_in_a_flood() {
    // `CSI n S` scrolls n lines with 4 or 5 bytes: a piece of the output fed to the emulator could
    // scroll more lines than the scrollback holds, and the count stopped there.
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let cmd = r"printf 'top\n'; printf '\e[5S%.0s' $(seq 300); printf '\e[24S%.0s' $(seq 2000); printf 'end'";
    let r =
        c.call("run", json!({"session": s, "cmd": cmd, "tty": {"rows": 24, "cols": 80}, "yield_ms": 10_000})).unwrap();
    assert_eq!(r["exit_code"], 0, "{r}");
    let t = &r["terminal"];
    assert_eq!(t["text"], "\nend\n", "the cursor stayed on the second row: {t}");
    let scrolled = t["scrolled"].as_array().unwrap();
    assert_eq!(scrolled.len(), 200, "{t}");
    assert_eq!(scrolled.len() as u64 + t["scrolled_more"].as_u64().unwrap(), 300 * 5 + 2000 * 24, "{t}");
}

#[test]
fn bad_input_gets_clear_errors_and_the_session_goes_on() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let plain = c.call("run", json!({"session": s, "cmd": "sleep 30", "yield_ms": 0})).unwrap()["job"].clone();
    let e = c.call("write", json!({"session": s, "job": plain, "text": "x"})).unwrap_err();
    assert!(e.to_string().contains("stdin is /dev/null and cannot be written"), "{e}");
    assert!(e.to_string().contains("tty"), "{e}");
    let job = run_tty(&mut c, &s, "cat");
    let e = c.call("write", json!({"session": s, "job": job, "keys": ["Enterr"]})).unwrap_err();
    assert!(e.to_string().contains("unknown key name \"Enterr\""), "{e}");
    for (rows, cols) in [(0, 0), (5000, 80), (24, 100_000)] {
        let e = c.call("resize", json!({"session": s, "job": job, "rows": rows, "cols": cols})).unwrap_err();
        assert_eq!(e.code(), Some(-32602), "{rows}x{cols}: {e}");
    }
    let e = c.call("run", json!({"session": s, "cmd": "true", "tty": {"rows": 0, "cols": 80}})).unwrap_err();
    assert!(e.to_string().contains("0 rows × 80 columns is not possible"), "{e}");
    let r = write(&mut c, &s, &job, json!({"text": "a\u{3}"}));
    assert_eq!(r["control_in_text"], json!(["C-c (0x03)"]), "{r}");
    assert!(r["note"].as_str().unwrap().contains("control characters"), "{r}");
    let end = wait_end(&mut c, &s, &job);
    assert_eq!(end["signal"], 2, "the C-c typed in text reached the terminal as typed");
    let e = c.call("write", json!({"session": s, "job": job, "text": "x"})).unwrap_err();
    assert!(e.to_string().contains("has ended"), "{e}");
    let r = c.call("resize", json!({"session": s, "job": job, "rows": 30, "cols": 100}));
    assert!(r.unwrap_err().to_string().contains("has ended"));
    assert_eq!(c.call("run", json!({"session": s, "cmd": "echo still here"})).unwrap()["view"], "still here\n");
}

#[test]
fn resize_reaches_the_program() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let job = run_tty(&mut c, &s, "trap 'stty size' WINCH; while :; do sleep 0.05; done");
    let r = c.call("resize", json!({"session": s, "job": job, "rows": 30, "cols": 100, "yield_ms": 5000})).unwrap();
    assert!(has_line(&r["terminal"], "30 100"), "{r}");
    assert_eq!((r["terminal"]["rows"].as_u64(), r["terminal"]["cols"].as_u64()), (Some(30), Some(100)));
    c.call("kill", json!({"session": s, "job": job})).unwrap();
}

#[test]
fn jobs_may_open_their_own_terminals_but_not_push_input() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let r = c
        .call("run", json!({"session": s, "cmd": "python3 -c 'import os; m, s = os.openpty(); print(os.ttyname(s))'"}))
        .unwrap();
    assert_eq!(r["exit_code"], 0, "{r}");
    assert!(r["view"].as_str().unwrap().starts_with("/dev/pts/"), "{r}");
    let r = c.call("run", json!({"session": s, "cmd": "script -qc 'echo in-script' /dev/null"})).unwrap();
    assert!(r["view"].as_str().unwrap().contains("in-script"), "{r}");
    let sti =
        "import os, fcntl, termios\nm, s = os.openpty()\ntry:\n    fcntl.ioctl(s, termios.TIOCSTI, b'x')\n    print('pushed')\nexcept OSError as e:\n    print('refused', e.errno)\n";
    let r = c
        .call("run", json!({"session": s, "cmd": "python3 sti.py", "files": [{"path": "sti.py", "content": sti}]}))
        .unwrap();
    assert_eq!(r["view"], "refused 1\n", "TIOCSTI stays EPERM: {r}");
}

#[test]
fn a_pipe_job_that_wanted_a_terminal_is_pointed_to_tty_mode() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let r = c.call("run", json!({"session": s, "cmd": "python3 -c 'input(\"Name? \")'"})).unwrap();
    assert_eq!(r["exit_code"], 1, "{r}");
    let note = r["note"].as_str().unwrap_or_default();
    assert!(note.contains("tty: {rows, cols}"), "an EOF on stdin points to tty mode: {r}");
    let r = c.call("run", json!({"session": s, "cmd": "exit 3"})).unwrap();
    assert!(r["note"].is_null(), "a plain failure gets no such note: {r}");
}

#[test]
fn a_session_without_ptys_refuses_jobs_their_own_and_says_why_while_tty_jobs_work() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = c.call("session.open", json!({"cwd": h.project, "ptys": false})).unwrap()["session"].clone();
    let sb = c.call("describe", json!({"session": s})).unwrap();
    let denied = sb["sessions"][0]["sandbox"]["seccomp_denied"].to_string();
    assert!(denied.contains("[seccomp.ptys]"), "describe names the refusal: {sb}");
    for cmd in ["python3 -c 'import os; os.openpty()'", "script -qc true /dev/null"] {
        let r = c.call("run", json!({"session": s, "cmd": cmd, "yield_ms": 10_000})).unwrap();
        assert_ne!(r["exit_code"], 0, "{cmd}: {r}");
        assert!(r["view"].as_str().unwrap().contains("Operation not permitted"), "{cmd}: EPERM: {r}");
        let why = r["refusals"].to_string();
        assert!(why.contains("[seccomp.ptys] deny = true") && why.contains("\\\"tty\\\""), "{cmd}: explained: {r}");
    }
    // The worker opens a terminal job's PTY: it works under the same policy, and a PTY the job opens
    // inside it is still refused.
    let job = run_tty(&mut c, &s, "read -p 'Name? ' n; echo \"hi $n\"");
    screen_until(&mut c, &s, &job, "the prompt", |t| t["cursor_line"] == "Name?");
    let r = write(&mut c, &s, &job, json!({"text": "ada", "keys": ["Enter"]}));
    assert!(has_line(&r["terminal"], "hi ada"), "{r}");
    assert_eq!(wait_end(&mut c, &s, &job)["exit_code"], 0);
    let r = c
        .call("run", json!({"session": s, "cmd": "tty && python3 -c 'import os; os.openpty()'", "tty": {"rows": 24, "cols": 80}, "yield_ms": 10_000}))
        .unwrap();
    assert!(r["terminal"]["text"].as_str().unwrap().starts_with("/dev/pts/"), "{r}");
    assert_ne!(r["exit_code"], 0, "{r}");
    // Another session, the profile as it ships: jobs may open their own.
    let other = h.open_session(&mut c);
    let r =
        c.call("run", json!({"session": other, "cmd": "python3 -c 'import os; os.openpty(); print(\"ok\")'"})).unwrap();
    assert_eq!(r["view"], "ok\n", "{r}");
}

#[test]
fn a_write_that_waits_for_the_first_output_answers_without_a_probe() {
    // The liveness probe is a round trip to the worker; at `quiet_ms: 0` (a keystroke's echo) it was
    // most of the call's time, and the program is still answering then. A settled write still probes.
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let job = run_tty(&mut c, &s, "cat");
    let r = write(&mut c, &s, &job, json!({"text": "a", "quiet_ms": 0}));
    assert_eq!(r["settled"], true, "{r}");
    assert!(has_line(&r["terminal"], "a"), "the echo: {r}");
    let l = &r["liveness"];
    assert!(l["running_ms"].is_u64() && l["cpu_ms"].is_null() && l["activity"].is_null(), "no probe: {r}");
    let r = write(&mut c, &s, &job, json!({"text": "b"}));
    assert_eq!(r["settled"], true, "{r}");
    assert_eq!(r["liveness"]["activity"], "waiting for input: \"ab\"", "a settled screen is probed: {r}");
    write(&mut c, &s, &job, json!({"keys": ["C-d"]}));
    write(&mut c, &s, &job, json!({"keys": ["C-d"]}));
    wait_end(&mut c, &s, &job);
}

/// Each session's worker has a devpts instance of its own: a job sees, and can open, only its own
/// session's terminals, never another session's (same uid or not).
#[test]
fn a_session_sees_only_its_own_terminals() {
    let h = Heddle::start();
    let mut c = h.client();
    let a = h.open_session(&mut c);
    let b = h.open_session(&mut c);
    let job = run_tty(&mut c, &a, "tty; sleep 30");
    let t = screen_until(&mut c, &a, &job, "the terminal's name", |t| {
        t["text"].as_str().unwrap_or_default().contains("/dev/pts/")
    });
    let name = t["text"].as_str().unwrap().lines().find(|l| l.starts_with("/dev/pts/")).unwrap().trim().to_owned();
    // Session a's own jobs see its terminal.
    let mine =
        c.call("run", json!({"session": a, "cmd": format!("ls /dev/pts; test -e {name} && echo present")})).unwrap();
    assert!(mine["view"].as_str().unwrap().contains("present"), "{mine}");
    // Session b's see only the instance's ptmx, and a's terminal by its path is not there.
    let other = c.call("run", json!({"session": b, "cmd": format!("ls /dev/pts; ls {name}")})).unwrap();
    let view = other["view"].as_str().unwrap();
    assert_eq!(view.lines().next(), Some("ptmx"), "{other}");
    assert!(view.contains("No such file or directory"), "{other}");
    assert_ne!(other["exit_code"], 0, "{other}");
    // Jobs still open terminals of their own there.
    let own = c
        .call("run", json!({"session": b, "cmd": "python3 -c 'import os; m, s = os.openpty(); print(os.ttyname(s))'"}))
        .unwrap();
    assert!(own["view"].as_str().unwrap().starts_with("/dev/pts/"), "{own}");
    c.call("kill", json!({"session": a, "job": job})).unwrap();
}

/// A command that wanted input and met `/dev/null` is pointed to `tty` (or a stdin pipe), quoting the
/// words it wrote as it wrote them.
#[test]
fn a_prompt_that_met_dev_null_is_pointed_to_tty_mode() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let r = c.call("run", json!({"session": s, "cmd": "python3 -c 'input(\"name? \")'", "yield_ms": 30_000})).unwrap();
    assert_eq!(r["exit_code"], 1, "{r}");
    let note = r["note"].as_str().unwrap_or_default();
    assert!(note.contains("its output says \"EOFError\""), "{r}");
    assert!(note.contains("run it with tty: {rows, cols} and answer it with write"), "{r}");
}

/// README's terminal example as a person types it: `heddle call run '{"cmd": "python3", "tty": …}'`
/// and `heddle call write '{"job": 1, …}'` with no session in the params (the `--session` one, default
/// `default`, is filled in; they failed with `missing field session`), printed as text (the screen),
/// not JSON; `--json` keeps the JSON.
#[test]
fn the_readmes_terminal_example_works_as_typed() {
    let h = Heddle::start();
    let heddle = |args: &[&str]| {
        let out = Command::new(bin_dir().join("heddle"))
            .args(args)
            .current_dir(&h.project)
            .env("HEDDLE_SOCKET", &h.socket)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, text, err) =
        heddle(&["call", "run", r#"{"cmd": "python3 -q", "tty": {"rows": 24, "cols": 80}, "yield_ms": 1500}"#]);
    assert_eq!(code, Some(75), "still running: {text}{err}");
    assert!(text.starts_with("waiting for input after ") && text.contains("── screen 24×80"), "{text}");
    let (code, text, err) =
        heddle(&["call", "write", r#"{"job": 1, "text": "6*7", "keys": ["Enter"], "quiet_ms": 300}"#]);
    assert_eq!(code, Some(0), "{text}{err}");
    assert!(text.starts_with("job 1 running · 4 bytes typed · screen settled after "), "{text}");
    assert!(text.contains("\n42\n"), "{text}");
    let (_, json_text, _) = heddle(&["--json", "call", "write", r#"{"job": 1, "eof": true}"#]);
    let r: Value = serde_json::from_str(&json_text).unwrap_or_else(|e| panic!("{e}: {json_text}"));
    assert_eq!((r["session"].as_str(), r["job"].as_u64()), (Some("default"), Some(1)), "{r}");
    // A --cwd that an existing session does not apply is said, not silently dropped.
    let (code, text, err) = heddle(&["run", "--cwd", "/tmp", "--", "pwd"]);
    assert_eq!(code, Some(0), "{text}{err}");
    assert_eq!(text.lines().nth(1), Some(h.project.to_str().unwrap()), "{text}");
    assert!(err.contains("already existed") && err.contains("--session NAME"), "{err}");
}

/// A terminal job that sits at a prompt answers the call then, not at the end of `yield_ms`: once its
/// screen is quiet and its foreground process reads the terminal, waiting longer changes nothing
/// until something is typed. A terminal job that is busy (or sleeping) is waited for as before; so is
/// a `wait` on a prompt that is already waiting.
#[test]
fn a_terminal_job_at_a_prompt_answers_run_and_wait_at_once() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let tty = json!({"rows": 24, "cols": 80});
    let started = Instant::now();
    let r = c
        .call("run", json!({"session": s, "cmd": "read -p 'Name? ' n; echo hi $n", "tty": tty, "yield_ms": 20000}))
        .unwrap();
    assert_eq!(r["state"], "running", "{r}");
    assert!(started.elapsed() < Duration::from_secs(10), "answered at the prompt, not after 20 s: {r}");
    let waiting = r["liveness"]["activity"].as_str().unwrap_or_default();
    assert_eq!(waiting, r#"waiting for input: "Name?""#, "{r}");
    let text = protocol::text::job_result(&serde_json::from_value(r.clone()).unwrap());
    assert!(
        text.starts_with("waiting for input after ")
            && text.contains(&format!("· job {} · type into it with write {{\"job\":{}}}", r["job"], r["job"])),
        "{text}"
    );
    let started = Instant::now();
    let w = c.call("wait", json!({"session": s, "job": r["job"], "yield_ms": 20000})).unwrap();
    assert_eq!(w["state"], "running", "{w}");
    assert!(started.elapsed() < Duration::from_secs(10), "wait answers at the prompt too: {w}");
    let w = write(&mut c, &s, &r["job"], json!({"text": "Ada", "keys": ["Enter"]}));
    assert_eq!(w["exit_code"], 0, "{w}");

    let started = Instant::now();
    let r =
        c.call("run", json!({"session": s, "cmd": "sleep 1.5; echo slept", "tty": tty, "yield_ms": 20000})).unwrap();
    assert_eq!(
        (r["state"].as_str(), r["exit_code"].as_i64()),
        (Some("exited"), Some(0)),
        "a sleeping job is waited for: {r}"
    );
    assert!(started.elapsed() >= Duration::from_millis(1500), "{r}");
    // Nor is a program whose stdin is the terminal but which waits on something else: a read of a pipe
    // (git reading its remote helper), a select on one in the terminal's canonical mode (curl, pip).
    for (cmd, code) in [
        (
            "python3 -c 'import os, threading; r, w = os.pipe(); threading.Timer(1.5, os.write, (w, b\"x\")).start(); os.read(r, 1)'",
            0,
        ),
        ("python3 -c 'import os, select; r, w = os.pipe(); select.select([r], [], [], 1.5)'", 0),
    ] {
        let r = c.call("run", json!({"session": s, "cmd": cmd, "tty": tty, "yield_ms": 20000})).unwrap();
        assert_eq!((r["state"].as_str(), r["exit_code"].as_i64()), (Some("exited"), Some(code)), "{cmd}: {r}");
    }
    // A REPL (readline: the terminal in raw mode, select on it) is at its prompt.
    let r = c.call("run", json!({"session": s, "cmd": "python3 -q", "tty": tty, "yield_ms": 20000})).unwrap();
    assert_eq!(r["state"], "running", "{r}");
    assert_eq!(r["liveness"]["activity"], r#"waiting for input: ">>>""#, "{r}");
    c.call("kill", json!({"session": s, "job": r["job"]})).unwrap();
}
