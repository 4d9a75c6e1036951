//! The sandbox end to end (issue 5): Landlock write rules and signal scoping, the session seccomp filter,
//! no_new_privs, unprivileged uids, the environment allowlist, the files channel and refusal
//! explanations — through the real binaries and socket, as root (CI).

use heddle_tests::{alive, proc_uid, Client, Heddle};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

fn run(c: &mut Client, s: &Value, cmd: &str) -> Value {
    c.call("run", json!({"session": s, "cmd": cmd, "yield_ms": 120_000})).expect("run")
}

/// A world-writable directory outside the project (so only Landlock can stop a write there).
fn outside_dir(h: &Heddle, name: &str) -> PathBuf {
    let d = h.dir.path().join(name);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
    d
}

fn open(c: &mut Client, h: &Heddle, env: Value) -> Value {
    c.call("session.open", json!({"cwd": h.project, "env": env})).expect("session.open")["session"].clone()
}

#[test]
fn writes_outside_the_roots_are_refused_and_explained() {
    let h = Heddle::start();
    let mut c = h.client();
    let home = outside_dir(&h, "home");
    let s = open(&mut c, &h, json!({"HOME": home}));
    let r = run(&mut c, &s, "echo x > /etc/heddle-test");
    assert_ne!(r["exit_code"], 0, "{r}");
    assert!(!Path::new("/etc/heddle-test").exists());
    let why = r["refusals"][0].as_str().unwrap_or_default();
    assert!(why.starts_with("/etc/heddle-test: writing it was refused by the sandbox"), "{r}");
    assert!(why.contains(&format!("{} ({{project}})", h.project.display())), "{why}");
    assert!(!r["warnings"].to_string().contains("preflight"), "the refusal says it, once: {r}");
    // While the job runs, the preflight warning foretells it.
    let y = c.call("run", json!({"session": s, "cmd": "sleep 0.5; echo x > /etc/heddle-test", "yield_ms": 0})).unwrap();
    assert!(y["warnings"][0]
        .as_str()
        .unwrap()
        .starts_with("preflight: this command writes or deletes /etc/heddle-test"));
    c.call("wait", json!({"session": s, "job": y["job"], "yield_ms": 30_000})).unwrap();
    // A second path refused for the same reason is named briefly, with what would allow it.
    let r = run(&mut c, &s, "touch /etc/heddle-test; echo x > /usr/local/heddle-test");
    let refusals: Vec<&str> = r["refusals"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert_eq!(refusals.len(), 2, "{r}");
    assert!(refusals[0].contains("Landlock refuses writes anywhere else"), "{r}");
    assert_eq!(
        refusals[1],
        "/usr/local/heddle-test: refused by the sandbox as well (outside every writable root, as above); \
         session.open {\"writable\": [\"/usr/local\"]} would allow it where the server allows that directory \
         (`heddle up --allow-writable /usr/local`)"
    );

    // $HOME is world-writable here: only Landlock refuses it.
    let r = run(&mut c, &s, "echo 'alias ls=rm' >> $HOME/.bashrc");
    assert_ne!(r["exit_code"], 0, "{r}");
    assert!(r["view"].as_str().unwrap().contains("Permission denied"), "{r}");
    assert!(!home.join(".bashrc").exists());
    let bashrc = format!("{}/.bashrc: writing it was refused by the sandbox", home.display());
    assert!(r["refusals"][0].as_str().unwrap().starts_with(&bashrc), "{r}");

    // A relative path in the output is the shell's: after `cd /etc`, `./heddle-rel-test` is /etc's.
    assert_eq!(run(&mut c, &s, "cd /etc")["exit_code"], 0);
    let r = run(&mut c, &s, "echo x > ./heddle-rel-test");
    assert_ne!(r["exit_code"], 0, "{r}");
    let why = r["refusals"][0].as_str().unwrap_or_default();
    assert!(why.starts_with("/etc/heddle-rel-test: writing it was refused by the sandbox"), "{r}");
}

#[test]
fn create_rename_across_dirs_and_delete_work_inside_the_project_and_tmpdir() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let cmd = "set -e; mkdir -p a/deep b; echo 1 > a/deep/f; mv a/deep/f b/g; ln -s g b/l; mv a b/a; \
               truncate -s 0 b/g; rm b/l b/g; rm -r b; echo t > $TMPDIR/t; mv $TMPDIR/t ./t2; rm t2; \
               case $TMPDIR in /tmp/heddle-sessions-*) echo tmp-ok;; esac";
    let r = run(&mut c, &s, cmd);
    assert_eq!((r["exit_code"].as_i64(), r["view"].as_str()), (Some(0), Some("tmp-ok\n")), "{r}");
    assert_eq!(std::fs::read_dir(&h.project).unwrap().count(), 0);
    let tmp = c.call("describe", json!({"session": s})).unwrap()["sessions"][0]["sandbox"]["tmp"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(Path::new(&tmp).is_dir());
    c.call("session.close", json!({"session": s})).unwrap();
    assert!(!Path::new(&tmp).exists(), "the session temp dir is removed at close");
}

#[test]
fn cargo_new_and_build_and_git_commit_work_inside_the_project() {
    let h = Heddle::start();
    let mut c = h.client();
    let tc = heddle_tests::link_toolchain(&h);
    let home = h.project.join("home");
    let path = format!("{}/bin:/usr/local/bin:/usr/bin:/bin", tc.display());
    let env = json!({"HOME": home, "CARGO_HOME": home.join(".cargo"), "PATH": path, "CARGO_NET_OFFLINE": "true"});
    let s = open(&mut c, &h, env);
    let r = run(
        &mut c,
        &s,
        "mkdir -p $HOME && cargo new -q --vcs none tiny && cd tiny && cargo build -q && ./target/debug/tiny",
    );
    assert_eq!((r["exit_code"].as_i64(), r["view"].as_str()), (Some(0), Some("Hello, world!\n")), "{r}");

    let git = "set -e; export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@b GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@b; \
               git init -q repo; cd repo; echo 1 > f; git add f; git commit -qm one; \
               git worktree add -q ../wt; cd ../wt; echo 2 > g; git add g; git commit -qm two; \
               git -C ../repo log --all --format=%s | sort | tr '\\n' ' '";
    let r = run(&mut c, &s, git);
    assert_eq!((r["exit_code"].as_i64(), r["view"].as_str()), (Some(0), Some("one two\n")), "{r}");
}

#[test]
fn a_job_cannot_signal_its_worker_the_front_or_another_sessions_job() {
    let h = Heddle::start();
    let mut c = h.client();
    let a = h.open_session(&mut c);
    let b = h.open_session(&mut c);
    let other = c.call("run", json!({"session": b, "cmd": "sleep 60", "yield_ms": 200})).unwrap();
    let other_pid = other["liveness"]["pid"].as_u64().expect("pid of the other session's job");
    let d = c.call("describe", json!({})).unwrap();
    let front = d["front"]["pid"].as_u64().unwrap();
    let worker = d["sessions"].as_array().unwrap().iter().find(|x| x["session"] == a).unwrap()["worker"]["pid"]
        .as_u64()
        .unwrap();
    for pid in [worker, front, other_pid] {
        let r = run(&mut c, &a, &format!("kill -9 {pid}; echo rc=$?"));
        let view = r["view"].as_str().unwrap();
        assert!(view.contains("Operation not permitted") && view.contains("rc=1\n"), "kill -9 {pid}: {r}");
        assert!(alive(pid), "{pid} lives on");
    }
    assert_eq!(run(&mut c, &a, "echo still-served")["view"], "still-served\n");
    assert_eq!(run(&mut c, &a, "sleep 0.2 & kill $!; wait $!; echo $?")["view"], "143\n", "its own children: yes");
}

#[test]
fn a_secret_in_the_servers_environment_never_reaches_a_job() {
    let h = Heddle::start_with_env(&[], &[("AWS_SECRET_ACCESS_KEY", "heddle-e2e-secret-value")]);
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let sup = c.call("describe", json!({})).unwrap()["supervisor"]["pid"].as_u64().unwrap();
    let environ = std::fs::read(format!("/proc/{sup}/environ")).unwrap();
    assert!(String::from_utf8_lossy(&environ).contains("heddle-e2e-secret-value"), "the test is meaningful");
    let r = run(&mut c, &s, "env; cat /proc/$PPID/environ 2>/dev/null | tr '\\0' '\\n'");
    let view = r["view"].as_str().unwrap();
    assert!(!view.contains("heddle-e2e-secret-value") && !view.contains("AWS_SECRET"), "{view}");
    assert!(view.contains("TERM=dumb") && view.contains("TMPDIR=/tmp/heddle-sessions-"), "{view}");
}

#[test]
fn namespaces_mounts_and_x32_syscalls_are_refused() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    // One stream, so the order of the error and `rc=` is the order they were written.
    let r = run(&mut c, &s, "unshare -r true 2>&1; echo rc=$?");
    assert!(r["view"].as_str().unwrap().contains("Operation not permitted"), "{r}");
    assert!(r["view"].as_str().unwrap().ends_with("rc=1\n"), "{r}");
    // mount(2) directly: EPERM from the filter (perl's syscall() needs no privilege of its own).
    let r = run(
        &mut c,
        &s,
        r#"perl -e 'my ($s, $t, $f) = ("none", "/mnt", "tmpfs"); $!=0; syscall(165, $s, $t, $f, 0, 0); print "$!\n"'; mount -t tmpfs none /mnt 2>/dev/null; echo rc=$?"#,
    );
    let view = r["view"].as_str().unwrap();
    assert!(view.starts_with("Operation not permitted\n") && view.ends_with("rc=32\n"), "{r}");
    // x32 getpid (0x40000027): the x32 guard answers EPERM (without it: ENOSYS or a pid).
    let r = run(&mut c, &s, r#"perl -e '$!=0; my $r = syscall(0x40000027); print "$r $!\n"'"#);
    assert_eq!(r["view"], "-1 Operation not permitted\n", "{r}");
    let r = run(&mut c, &s, r#"python3 -c 'import socket; socket.socket()' 2>&1 | tail -1"#);
    assert!(r["view"].as_str().unwrap().contains("Operation not permitted"), "network off: {r}");
}

#[test]
fn workers_and_jobs_are_unprivileged_with_no_new_privs_and_a_filter_and_describe_says_what_is_enforced() {
    let h = Heddle::start();
    let mut c = h.client();
    let open = c.call("session.open", json!({"cwd": h.project})).unwrap();
    let s = open["session"].clone();
    let worker = open["worker"]["pid"].as_u64().unwrap();
    assert_ne!(proc_uid(worker), Some(0));
    let status = std::fs::read_to_string(format!("/proc/{worker}/status")).unwrap();
    assert!(status.contains("NoNewPrivs:\t1") && status.contains("Seccomp:\t2"), "worker: {status}");
    let r = run(&mut c, &s, "grep -E '^(Uid|NoNewPrivs|Seccomp):' /proc/self/status");
    let view = r["view"].as_str().unwrap();
    assert!(!view.starts_with("Uid:\t0\t"), "{view}");
    assert!(view.contains("NoNewPrivs:\t1") && view.contains("Seccomp:\t2"), "{view}");

    let sb = &c.call("describe", json!({"session": s})).unwrap()["sessions"][0]["sandbox"];
    assert!(sb["landlock_abi"].as_i64().unwrap() >= 6, "{sb}");
    assert_eq!(sb["landlock_status"], "fully_enforced");
    assert_eq!(sb["landlock_scopes"], json!(["abstract_unix_socket", "signal"]));
    assert!(sb["landlock_rights"].as_array().unwrap().contains(&json!("refer")));
    assert_eq!((sb["seccomp_installed"].as_bool(), sb["worker_confined"].as_bool()), (Some(true), Some(true)));
    assert_eq!((sb["policy"].as_str(), sb["network"].as_bool()), (Some("workspace"), Some(false)));
    assert!(sb["seccomp_denied"].as_array().unwrap().contains(&json!("unshare")));
    assert_eq!(sb["writable"][0]["template"], "{project}");
    assert_eq!(sb["refusal"], Value::Null);

    let e = c.call("session.open", json!({"cwd": h.project, "policy": "nope"})).unwrap_err();
    assert!(format!("{e:?}").contains("nope"), "{e:?}");
    let ro = c.call("session.open", json!({"cwd": h.project, "policy": "readonly", "network": true})).unwrap();
    let r = run(&mut c, &ro["session"], "touch ok; echo rc=$?; touch $TMPDIR/x && echo tmp-ok");
    // stdout and stderr are two pipes: their lines interleave in arrival order, which a fast job leaves
    // open, so each stream is checked on its own.
    assert_eq!(heddle_tests::read_stream(&mut c, &ro["session"], &r["job"], "stdout"), b"rc=1\ntmp-ok\n", "{r}");
    let err = String::from_utf8(heddle_tests::read_stream(&mut c, &ro["session"], &r["job"], "stderr")).unwrap();
    assert!(err.contains("Permission denied"), "readonly: the project is not writable: {err:?} {r}");
}

#[test]
fn the_files_channel_round_trips_nasty_contents_and_a_refused_file_does_not_block_the_others() {
    use base64::Engine;
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let text = "echo $HOME `id` $(rm -rf /)\ncat <<EOF\nEOF\n'\"\\\n";
    let binary: Vec<u8> = b"\0\xff\xfe\x80EOF\n\0$x`".to_vec();
    let b64 = base64::engine::general_purpose::STANDARD.encode(&binary);
    let files = json!([
        {"path": "src/../a.sh", "content": text, "mode": 0o750},
        {"path": "/etc/heddle-files-test", "content": "no"},
        {"path": format!("{}/bin.dat", h.project.display()), "content_base64": b64},
    ]);
    let cmd = "base64 -w0 a.sh; echo; base64 -w0 bin.dat; echo; stat -c %a a.sh";
    let r = c.call("run", json!({"session": s, "cmd": cmd, "files": files, "yield_ms": 30_000})).unwrap();
    let f = &r["files"];
    assert_eq!((f[0]["written"].as_bool(), f[2]["written"].as_bool()), (Some(true), Some(true)), "{r}");
    assert_eq!(f[1]["written"], false);
    let err = f[1]["error"].as_str().unwrap();
    assert!(err.contains("Permission denied") && err.contains("outside every writable root"), "{err}");
    assert!(!Path::new("/etc/heddle-files-test").exists());
    let lines: Vec<&str> = r["view"].as_str().unwrap().lines().collect();
    let std = base64::engine::general_purpose::STANDARD;
    assert_eq!(std.decode(lines[0]).unwrap(), text.as_bytes());
    assert_eq!(std.decode(lines[1]).unwrap(), binary);
    assert_eq!(lines[2], "750");
    assert_eq!(std::fs::read(h.project.join("bin.dat")).unwrap(), binary);
    let e = c.call("run", json!({"session": s, "cmd": "true", "files": [{"path": "x"}]})).unwrap_err();
    assert!(format!("{e:?}").contains("exactly one of content and content_base64"), "{e:?}");
}

/// A relative `files` path is taken from where the command starts: after `cd sub`, `notes.txt` lands
/// in `sub` and the command reads it there. (It used to land in the directory the session was opened in.)
#[test]
fn a_relative_file_path_follows_the_carried_cwd() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    assert_eq!(run(&mut c, &s, "mkdir sub && cd sub")["exit_code"], 0);
    let files = json!([{"path": "notes.txt", "content": "here\n"}]);
    let r = c.call("run", json!({"session": s, "cmd": "cat notes.txt", "files": files, "yield_ms": 30_000})).unwrap();
    assert_eq!((r["exit_code"].as_i64(), r["view"].as_str()), (Some(0), Some("here\n")), "{r}");
    assert_eq!(r["files"][0]["path"], h.project.join("sub/notes.txt").display().to_string(), "{r}");
    assert!(!h.project.join("notes.txt").exists(), "nothing is written where the session was opened");
}
