//! No new namespaces from a job, by any call (issue "Close the escapes"): `unshare`/`setns` were refused
//! already, but `clone` with `CLONE_NEW*` flags and `clone3` created a user namespace in which the job's
//! child held every capability (and, with network on, could reach nf_tables). The session filter now
//! refuses `clone`'s namespace flags with `EPERM` and the jobs' own filter answers `clone3` with
//! `ENOSYS`, which glibc takes as "fall back to clone" — so the tools a job runs still spawn, fork and
//! start threads. Through the real stack, as root (CI).

use heddle_tests::{run_ok, Client, Heddle};
use serde_json::{json, Value};

/// Tries `clone(CLONE_NEWx | SIGCHLD)` for each namespace flag, then `clone3` with `CLONE_NEWUSER` and a
/// plain `clone3`, with ctypes (no compiler needed); prints one `name outcome` line each. A child that
/// was created exits at once; its parent reaps it and prints `created`.
const PROBE: &str = r#"import ctypes, os, struct
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
SIGCHLD = 17
FLAGS = {"user": 0x10000000, "net": 0x40000000, "mnt": 0x20000, "pid": 0x20000000, "ipc": 0x08000000,
         "uts": 0x04000000, "cgroup": 0x02000000, "user+net": 0x50000000}
def report(name, r):
    if r == 0:
        os._exit(0)
    if r > 0:
        os.waitpid(r, 0)
        print(name, "created")
    else:
        print(name, os.strerror(ctypes.get_errno()))
for name, f in FLAGS.items():
    ctypes.set_errno(0)
    report("clone-" + name, libc.syscall(56, ctypes.c_ulong(f | SIGCHLD), 0, 0, 0, 0))
for name, f in [("user", FLAGS["user"]), ("plain", 0)]:
    args = ctypes.create_string_buffer(struct.pack("11Q", f, 0, 0, 0, SIGCHLD, 0, 0, 0, 0, 0, 0), 88)
    ctypes.set_errno(0)
    report("clone3-" + name, libc.syscall(435, args, ctypes.c_size_t(88)))
"#;

const REFUSED: &str = "clone-user Operation not permitted
clone-net Operation not permitted
clone-mnt Operation not permitted
clone-pid Operation not permitted
clone-ipc Operation not permitted
clone-uts Operation not permitted
clone-cgroup Operation not permitted
clone-user+net Operation not permitted
clone3-user Function not implemented
clone3-plain Function not implemented
";

fn probe(c: &mut Client, s: &Value) -> String {
    let r = c
        .call(
            "run",
            json!({"session": s, "cmd": "python3 probe.py", "files": [{"path": "probe.py", "content": PROBE}],
                   "yield_ms": 60_000}),
        )
        .expect("run");
    assert_eq!(r["exit_code"], 0, "{r}");
    heddle_tests::stream_text(c, s, &r["job"], "stdout")
}

#[test]
fn clone_with_namespace_flags_and_clone3_are_refused_with_network_off_and_on() {
    let h = Heddle::start();
    let mut c = h.client();
    for network in [false, true] {
        let open = c.call("session.open", json!({"cwd": h.project, "network": network})).expect("session.open");
        let s = open["session"].clone();
        assert_eq!(probe(&mut c, &s), REFUSED, "network {network}");
        // The shapes a user would type: unshare(1) (unshare(2), refused before) and a user namespace
        // through a fresh clone.
        let out = run_ok(&mut c, &s, "unshare -Urn true 2>/dev/null; echo rc=$?");
        assert_eq!(out, "rc=1\n", "network {network}");
    }
}

#[test]
fn posix_spawn_fork_and_threads_still_work_in_a_job() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    // glibc's posix_spawn (behind subprocess) tries clone3 first and falls back to clone on ENOSYS.
    let out = run_ok(
        &mut c,
        &s,
        r#"python3 -c 'import subprocess; print(subprocess.run(["sh", "-c", "echo spawned"], capture_output=True, text=True).stdout.strip())'"#,
    );
    assert_eq!(out, "spawned\n");
    let out = run_ok(
        &mut c,
        &s,
        r#"python3 -c 'import os
pid = os.fork()
if pid == 0:
    os._exit(7)
print("forked", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))'"#,
    );
    assert_eq!(out, "forked 7\n");
    // pthread_create uses clone3 first in glibc ≥ 2.34, then clone.
    let out = run_ok(
        &mut c,
        &s,
        r#"python3 -c 'import threading
r = []
ts = [threading.Thread(target=r.append, args=(i,)) for i in range(4)]
[t.start() for t in ts]; [t.join() for t in ts]
print("threads", sorted(r))'"#,
    );
    assert_eq!(out, "threads [0, 1, 2, 3]\n");
    // bash's own forks: a pipeline, a subshell and a background job.
    let out = run_ok(&mut c, &s, "echo a | tr a b; (echo c); sleep 0 & wait; echo d");
    assert_eq!(out, "b\nc\nd\n");
}

#[test]
fn the_persistent_shell_gets_the_jobs_filter_too() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    probe(&mut c, &s); // writes probe.py into the project
    let open = c.call("session.open", json!({"cwd": h.project, "persistent": true})).expect("session.open");
    let p = open["session"].clone();
    assert_eq!(run_ok(&mut c, &p, "python3 probe.py"), REFUSED);
}
