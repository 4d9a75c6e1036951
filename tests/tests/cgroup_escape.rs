//! Leaving the job cgroup (issue "Close the escapes", item 2), end to end through the real stack: a job
//! tries to start processes in its session's cgroup, its worker's cgroup and another job's cgroup, by
//! `clone3(CLONE_INTO_CGROUP)` on a directory fd and by writing a pid to their `cgroup.procs`. None of it
//! may work — not only because the job's seccomp filter and Landlock domain stop it, but because the
//! job's uid owns no `cgroup.procs` of the tree — and `kill` and `session.close` must leave nothing of the
//! job running, and say exactly what is left if anything is.

use heddle_tests::{alive, eventually, job_cgroup, pids_of, Heddle};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The attacker: for each target directory, a `clone3(CLONE_INTO_CGROUP)` child and a forked child that
/// writes its own pid to the target's `cgroup.procs`; each success leaves a `sleep <marker>` behind. One
/// line per attempt: `<how> <target> ok|<errno name>`. With a last argument `wait` it then waits to be
/// killed; with `placed` it first reads a line from stdin (the test places it in a job cgroup meanwhile).
const ATTACK: &str = r#"
import ctypes, errno, os, struct, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
CLONE_INTO_CGROUP = 0x200000000
def quiet_exec(marker):
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.execv("/bin/sleep", ["sleep", marker])
def clone3_into(target, marker):
    try:
        fd = os.open(target, os.O_PATH | os.O_DIRECTORY)
    except OSError as e:
        return errno.errorcode[e.errno]
    args = struct.pack("11Q", CLONE_INTO_CGROUP, 0, 0, 0, 17, 0, 0, 0, 0, 0, fd)
    buf = ctypes.create_string_buffer(args, len(args))
    pid = libc.syscall(435, buf, len(args))
    if pid == 0:
        quiet_exec(marker)
    err = ctypes.get_errno()
    os.close(fd)
    return "ok" if pid > 0 else errno.errorcode.get(err, str(err))
def write_into(target, marker):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            with open(os.path.join(target, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
            os.write(w, b"ok")
        except OSError as e:
            os.write(w, errno.errorcode[e.errno].encode())
            os._exit(0)
        os.close(w)
        quiet_exec(marker)
    os.close(w)
    return os.read(r, 64).decode() or "no answer"
n = 0
if sys.argv[4] == "placed":
    sys.stdin.readline()
for name, target in zip(["session", "worker", "sibling"], sys.argv[1:4]):
    for how, f in [("clone3", clone3_into), ("write", write_into)]:
        n += 1
        print(how, name, f(target, sys.argv[5] + "%02d" % n), flush=True)
print("attacked", flush=True)
if sys.argv[4] == "wait":
    time.sleep(600)
"#;

/// The six attempts, each refused: `clone3` and `write` into the session's, the worker's and a sibling
/// job's cgroup.
fn assert_all_refused(out: &str) {
    for line in ["session", "worker", "sibling"].iter().flat_map(|t| [format!("clone3 {t} "), format!("write {t} ")]) {
        assert!(out.contains(&line) && !out.contains(&format!("{line}ok")), "{line:?} was refused: {out}");
    }
}

/// Every live process whose command line is `sleep <prefix>NN` (what a successful attempt left running).
fn attackers_left(prefix: &str) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let args = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args = String::from_utf8_lossy(&args).replace('\0', " ");
        let marked = args.strip_prefix(&format!("sleep {prefix}")).is_some_and(|r| r.trim_end().len() == 2);
        if marked && alive(u64::from(pid)) {
            out.push((pid, args.trim_end().to_owned()));
        }
    }
    out
}

fn call(c: &mut heddle_tests::Client, method: &str, params: Value) -> Value {
    c.call(method, params).unwrap_or_else(|e| panic!("{method}: {e:?}"))
}

#[test]
fn a_job_cannot_start_processes_outside_its_cgroup_and_kill_leaves_none() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let script = h.project.join("attack.py");
    std::fs::write(&script, ATTACK).unwrap();
    // Another job of the session, whose cgroup the attacker tries to join.
    let other = call(&mut c, "run", json!({"session": s, "cmd": "sleep 600", "yield_ms": 200}));
    assert_eq!(other["state"], "running", "{other}");
    let sibling = job_cgroup(&mut c, &s, &other["job"]);
    let session_dir = sibling.parent().expect("a job cgroup lies in its session's").to_owned();
    let worker_dir = session_dir.join("worker");
    let targets = [&session_dir, &worker_dir, &sibling].map(|p| p.to_str().unwrap().to_owned());
    let cmd = format!("python3 {} {} wait 31", script.display(), targets.join(" "));
    let r = call(&mut c, "run", json!({"session": s, "cmd": cmd, "yield_ms": 10_000, "max_output_bytes": 100_000}));
    let mut out = r["output"].to_string();
    let seen = eventually(Duration::from_secs(20), || {
        let o = call(&mut c, "wait", json!({"session": s, "job": r["job"], "yield_ms": 500}));
        out = o.to_string();
        out.contains("attacked")
    });
    assert!(seen, "the attack ran to its end: {r}\n{out}");
    let killed = call(&mut c, "kill", json!({"session": s, "job": r["job"]}));
    assert_eq!(killed["state"], "killed", "{killed}");
    let left = attackers_left("31");
    assert!(
        left.is_empty(),
        "processes the job started elsewhere survived its kill: {left:?}\nattack: {out}\nkill answered: {killed}"
    );
    assert_all_refused(&out);
    let closed = call(&mut c, "session.close", json!({"session": s}));
    assert_eq!(closed["verified_empty"], true, "{closed}");
    let left = attackers_left("31");
    assert!(left.is_empty(), "nothing of the job outlives the session: {left:?}");
    assert!(!Path::new(&session_dir).exists(), "the session's cgroup is removed");
}

/// The session's cgroup directory and the job uid of session `s`, from `describe`.
fn session_cgroup_and_uid(c: &mut heddle_tests::Client, s: &Value) -> (PathBuf, u32) {
    let d = call(c, "describe", json!({"session": s}));
    let dir = PathBuf::from(d["sessions"][0]["cgroup"].as_str().expect("session cgroup"));
    let uid = d["sessions"][0]["worker"]["uid"].as_u64().unwrap_or_else(|| panic!("the worker's uid: {d}"));
    (dir, u32::try_from(uid).unwrap())
}

/// The same attack from a process of the job's uid in a job's cgroup, without the job's seccomp filter
/// and Landlock domain (what a job would be if either were missing: a kernel without Landlock, a profile
/// that allows new namespaces): ownership alone must refuse every attempt.
#[test]
fn the_jobs_uid_owns_no_cgroup_procs_it_could_move_into() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let script = h.project.join("attack.py");
    std::fs::write(&script, ATTACK).unwrap();
    let (session_dir, uid) = session_cgroup_and_uid(&mut c, &s);
    let mut slots = Vec::new();
    for _ in 0..2 {
        let r = call(&mut c, "run", json!({"session": s, "cmd": "sleep 600", "yield_ms": 200}));
        assert_eq!(r["state"], "running", "{r}");
        slots.push((r["job"].clone(), job_cgroup(&mut c, &s, &r["job"])));
    }
    let targets = [&session_dir, &session_dir.join("worker"), &slots[1].1].map(|p| p.to_str().unwrap().to_owned());
    let mut attacker = Command::new("python3")
        .arg(&script)
        .args(&targets)
        .args(["placed", "32"])
        .uid(uid)
        .gid(65534)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Placed by root (this test) in the first job's cgroup, as the job's own processes are.
    std::fs::write(slots[0].1.join("cgroup.procs"), attacker.id().to_string()).unwrap();
    attacker.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let mut out = String::new();
    attacker.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    attacker.wait().unwrap();
    let left = attackers_left("32");
    call(&mut c, "session.close", json!({"session": s}));
    assert_all_refused(&out);
    assert!(left.is_empty(), "nothing was started outside the job's cgroup: {left:?}");
}

/// Processes put into the session's and the worker's cgroup from outside (root can): `kill` of a job
/// names them in its answer instead of reporting a clean end, and `session.close` lists and kills them.
#[test]
fn kill_and_close_name_what_is_left_in_the_session_and_worker_cgroups() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let (session_dir, _) = session_cgroup_and_uid(&mut c, &s);
    let r = call(&mut c, "run", json!({"session": s, "cmd": "sleep 600", "yield_ms": 200}));
    assert_eq!(r["state"], "running", "{r}");
    let mut strays = Vec::new();
    for (dir, marker) in [(session_dir.join("worker"), "3198"), (session_dir.clone(), "3197")] {
        let child = Command::new("sleep").arg(marker).spawn().unwrap();
        let pid = child.id();
        strays.push((child, pid));
        std::fs::write(dir.join("cgroup.procs"), pid.to_string()).unwrap();
        assert!(pids_of(&dir).contains(&pid), "placed in {}", dir.display());
    }
    let killed = call(&mut c, "kill", json!({"session": s, "job": r["job"]}));
    assert_eq!(killed["state"], "killed", "{killed}");
    let note = killed["note"].as_str().unwrap_or_default();
    for (_, pid) in &strays {
        assert!(note.contains(&format!("pid {pid} ")), "the kill names pid {pid} as left: {killed}");
    }
    let closed = call(&mut c, "session.close", json!({"session": s}));
    let listed: Vec<u64> =
        closed["survivors"].as_array().into_iter().flatten().filter_map(|p| p["pid"].as_u64()).collect();
    for (child, pid) in &mut strays {
        assert!(listed.contains(&u64::from(*pid)), "session.close lists pid {pid}: {closed}");
        child.wait().unwrap();
    }
    assert_eq!(closed["verified_empty"], true, "{closed}");
}
