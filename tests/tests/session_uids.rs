//! Every root-opened session runs its worker and jobs as a uid of its own (issue 20, item 3): one
//! session's job cannot change the mode, owner or times of another session's files (Landlock does not
//! govern metadata, ownership does); the uid is freed, and its home removed, at close; a kept job holds
//! its uid past its session and across a supervisor restart, which frees every other. Through the real
//! stack, as root.

use heddle_tests::{eventually, run_ok, Client, Heddle};
use serde_json::json;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::time::Duration;

/// The range these tests give `heddle up --session-uids` (the suggested one), and its first uid.
const RANGE: &str = "1879048192-1879113727";
const FIRST: u32 = 0x7000_0000;

fn start() -> Heddle {
    Heddle::start_with(&["--session-uids", RANGE])
}

fn open(h: &Heddle, c: &mut Client, name: &str) -> u32 {
    let r = c.call("session.open", json!({"name": name, "cwd": h.project})).unwrap();
    r["worker"]["uid"].as_u64().unwrap() as u32
}

fn homes(h: &Heddle) -> PathBuf {
    let name = h.cgroup_root.file_name().unwrap().to_string_lossy().into_owned();
    std::env::temp_dir().join(format!("heddle-homes-{name}"))
}

#[test]
fn two_root_opened_sessions_run_as_different_uids_and_cannot_touch_each_others_files() {
    let h = start();
    let mut c = h.client();
    let (ua, ub) = (open(&h, &mut c, "a"), open(&h, &mut c, "b"));
    let (a, b) = (json!("a"), json!("b"));
    let tmp = run_ok(&mut c, &b, "echo \"$TMPDIR\"").trim().to_owned();
    let before = std::fs::metadata(&tmp).unwrap();
    assert_eq!((before.permissions().mode() & 0o7777, before.uid()), (0o700, ub));
    // What a job of another session tried on main (all as nobody), and did.
    let said = run_ok(
        &mut c,
        &a,
        &format!(
            "chmod 777 {tmp} 2>&1; echo chmod=$?; touch -h -d 2001-01-01 {tmp} 2>&1; echo touch=$?; \
             chown $(id -u) {tmp} 2>&1; echo chown=$?"
        ),
    );
    for op in ["chmod", "touch", "chown"] {
        assert!(!said.contains(&format!("{op}=0")), "{op} of session b's temp dir succeeded from a: {said}");
    }
    let after = std::fs::metadata(&tmp).unwrap();
    assert_eq!((after.permissions().mode() & 0o7777, after.uid()), (0o700, ub), "{said}");
    assert_eq!(after.mtime(), before.mtime(), "the times are b's: {said}");
    assert_ne!(ua, ub, "each session has a uid of its own");
    assert!(ua >= FIRST && ub >= FIRST, "taken from the session range, not nobody: {ua} {ub}");
    assert_eq!(run_ok(&mut c, &a, "id -u; id -g"), format!("{ua}\n{ua}\n"), "jobs run as the session's uid and gid");
    let d = c.call("describe", json!({"session": "b"})).unwrap();
    assert_eq!(d["sessions"][0]["worker"]["uid"], ub, "describe says the uid: {d}");
}

#[test]
fn a_session_uid_is_freed_at_close_with_its_home_and_given_again_clean() {
    let h = start();
    let mut c = h.client();
    let ua = open(&h, &mut c, "first");
    let home = run_ok(&mut c, &json!("first"), "echo secret > ~/.left-behind; echo \"$HOME\"").trim().to_owned();
    assert_eq!(PathBuf::from(&home), homes(&h).join(ua.to_string()), "a home heddle made for the session's uid");
    let ub = open(&h, &mut c, "second");
    assert_ne!(ua, ub);
    c.call("session.close", json!({"session": "first"})).unwrap();
    assert!(!PathBuf::from(&home).exists(), "the freed uid's home is removed at close");
    let uc = open(&h, &mut c, "third");
    assert_eq!(uc, ua, "the freed uid is given again");
    let seen = run_ok(&mut c, &json!("third"), "cat ~/.left-behind 2>/dev/null; echo \"[$HOME]\"");
    assert_eq!(seen, format!("[{home}]\n"), "nothing of the earlier session is left for the next");
}

fn supervisor_pid(h: &Heddle) -> Option<u64> {
    let mut c = Client::connect(&h.socket).ok()?;
    c.call("describe", json!({})).ok()?["supervisor"]["pid"].as_u64()
}

#[test]
fn a_kept_job_holds_its_uid_across_a_supervisor_restart_which_frees_the_others() {
    let h = start();
    let mut c = h.client();
    let ua = open(&h, &mut c, "keeper");
    let ub = open(&h, &mut c, "plain");
    let r = c
        .call("run", json!({"session": "keeper", "cmd": "sleep 1000", "keep": true, "name": "held", "yield_ms": 200}))
        .unwrap();
    assert_eq!(r["state"], "running", "{r}");
    let record = h.state_dir.join("session-uids");
    let text = std::fs::read_to_string(&record).unwrap();
    assert!(text.contains(&format!("{ua} kept held\n")) && text.contains(&format!("{ub} session plain\n")), "{text}");
    assert_eq!(std::fs::metadata(&record).unwrap().uid(), 0, "the record is root's");
    run_ok(&mut c, &json!("plain"), "echo x > ~/.probe");
    assert!(homes(&h).join(ub.to_string()).join(".probe").exists());
    // The supervisor dies without closing anything; `heddle up` starts it again.
    let old = supervisor_pid(&h).unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(old as i32), nix::sys::signal::SIGKILL).unwrap();
    assert!(
        eventually(Duration::from_secs(30), || supervisor_pid(&h).is_some_and(|p| p != old)),
        "a new supervisor answers after the old one was killed"
    );
    let mut c = h.client();
    let kept = c.call("kept", json!({})).unwrap();
    let procs = &kept["kept"][0]["procs"];
    assert!(procs.as_array().is_some_and(|p| !p.is_empty()), "the kept job lives on: {kept}");
    let text = std::fs::read_to_string(&record).unwrap();
    assert_eq!(text, format!("{ua} kept held\n"), "only the kept job holds a uid after the restart");
    assert!(!homes(&h).join(ub.to_string()).exists(), "the freed uid's home was removed at start");
    let next = open(&h, &mut c, "next");
    assert_ne!(next, ua, "the kept job's uid is not given to a new session");
    let killed = c.call("kept.kill", json!({"name": "held"})).unwrap();
    assert_eq!(killed["verified_empty"], true, "{killed}");
    assert!(eventually(Duration::from_secs(5), || !std::fs::read_to_string(&record).unwrap().contains("held")));
    assert_eq!(open(&h, &mut c, "after"), ua, "freed by kept.kill, given again");
}

#[test]
fn a_session_whose_worker_died_keeps_its_uid_and_home_when_revived() {
    let h = start();
    let mut c = h.client();
    let ua = open(&h, &mut c, "phoenix");
    let s = json!("phoenix");
    run_ok(&mut c, &s, "echo cache > ~/.probe; echo mine > own.txt; chmod 600 own.txt");
    let d = c.call("describe", json!({"session": "phoenix"})).unwrap();
    let pid = d["sessions"][0]["worker"]["pid"].as_u64().unwrap() as i32;
    // The session's worker, a process of this test's stack, by its pid.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL).unwrap();
    let revived = eventually(Duration::from_secs(10), || {
        c.call("run", json!({"session": "phoenix", "cmd": "true", "yield_ms": 5000})).is_ok_and(|r| r["exit_code"] == 0)
    });
    assert!(revived, "the next run revives the session");
    let out = run_ok(&mut c, &s, "id -u; cat ~/.probe; cat own.txt && echo more >> own.txt && echo wrote");
    assert_eq!(out, format!("{ua}\ncache\nmine\nwrote\n"), "same uid: its home and its files are still its own");
    c.call("session.close", json!({"session": "phoenix"})).unwrap();
    assert!(!homes(&h).join(ua.to_string()).exists(), "freed at close");
}
