//! End-to-end tests of `heddle-supervisor` as root, with stand-in front and worker.
//!
//! This file is its own harness (`harness = false`): run as `heddle-front` or `heddle-worker` (the
//! supervisor sets `argv[0]`), the test binary *is* the stand-in; otherwise it runs the tests. The
//! stand-in front relays a tiny line protocol from the client socket to the control socket and
//! reads the worker's report out of the session's shared region; the stand-in worker reports what it
//! was given (uid, groups, no_new_privs, cgroup, fds, environment), starts two job processes in a
//! `job-1` cgroup (one of them `setsid`), and exits with code 3 when its `cmd_data` doorbell rings.
//!
//! These tests need root and a cgroup v2 hierarchy; they fail (never skip) without them. Each uses
//! its own cgroup root `.../heddle-suptest-<pid>-<n>` and removes it.

use shm_proto::control::{self, FromSupervisor, ToSupervisor};
use shm_proto::region::Region;
use shm_proto::sys::EventFd;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn main() {
    let arg0 = std::env::args().next().unwrap_or_default();
    match arg0.as_str() {
        "heddle-front" => fake_front(),
        "heddle-worker" => fake_worker(),
        _ => run_tests(),
    }
}

fn run_tests() {
    let tests: [(&str, fn()); 3] = [
        ("session_lifecycle_drops_privileges_places_and_kills", session_lifecycle_drops_privileges_places_and_kills),
        ("worker_death_is_reported_and_its_jobs_killed", worker_death_is_reported_and_its_jobs_killed),
        ("front_death_keeps_sessions_until_sigterm", front_death_keeps_sessions_until_sigterm),
    ];
    // Speak enough of libtest's command line for cargo test and nextest: `--list` (nothing is ignored
    // here, so `--ignored` lists nothing), and a name filter (`--exact NAME` runs just that test).
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        if !args.iter().any(|a| a == "--ignored") {
            for (name, _) in tests {
                println!("{name}: test");
            }
        }
        return;
    }
    let exact = args.iter().any(|a| a == "--exact");
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let selected = |name: &str| {
        filters.is_empty() || filters.iter().any(|f| if exact { name == *f } else { name.contains(f.as_str()) })
    };
    assert!(nix::unistd::geteuid().is_root(), "these tests need root (CI runs as root): run them with sudo");
    let (mut passed, mut failed) = (0, 0);
    for (name, test) in tests.into_iter().filter(|(n, _)| selected(n)) {
        match std::panic::catch_unwind(test) {
            Ok(()) => {
                println!("test {name} ... ok");
                passed += 1;
            }
            Err(_) => {
                println!("test {name} ... FAILED");
                failed += 1;
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    std::process::exit(i32::from(failed > 0));
}

// ---------------------------------------------------------------------------------------------
// The fixture: a supervisor on a temp dir and its own cgroup root.

struct Fixture {
    sup: Child,
    tmp: tempfile::TempDir,
    root: PathBuf,
    socket: PathBuf,
}

impl Fixture {
    fn start() -> Fixture {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let base = if Path::new("/sys/fs/cgroup/unified/cgroup.procs").exists() {
            "/sys/fs/cgroup/unified"
        } else {
            "/sys/fs/cgroup"
        };
        let root = PathBuf::from(format!("{base}/heddle-suptest-{}-{n}", std::process::id()));
        let tmp = tempfile::tempdir().unwrap();
        let bin = tmp.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let me = std::env::current_exe().unwrap();
        for name in ["heddle-front", "heddle-worker"] {
            std::os::unix::fs::symlink(&me, bin.join(name)).unwrap();
        }
        let socket = tmp.path().join("run/heddle.sock");
        let log = std::fs::File::create(tmp.path().join("supervisor.log")).unwrap();
        let sup = Command::new(env!("CARGO_BIN_EXE_heddle-supervisor"))
            .arg("--socket")
            .arg(&socket)
            .arg("--state-dir")
            .arg(tmp.path().join("state"))
            .arg("--cgroup-root")
            .arg(&root)
            .args(["--front-user", "nobody", "--worker-user", "nobody", "--bin-dir"])
            .arg(&bin)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("LANG", "C.UTF-8")
            .env("HEDDLE_TEST_SECRET", "must-not-leak")
            .stdin(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        Fixture { sup, tmp, root, socket }
    }

    fn connect(&self) -> Client {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(s) = UnixStream::connect(&self.socket) {
                s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                return Client { r: BufReader::new(s.try_clone().unwrap()), w: s };
            }
            assert!(Instant::now() < deadline, "no socket after 10 s; log:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.tmp.path().join("supervisor.log")).unwrap_or_default()
    }

    /// SIGTERM our supervisor child and wait (bounded) for its exit status.
    fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.sup.id()).expect("a pid fits in i32"));
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.sup.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "supervisor did not exit after SIGTERM; log:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if self.sup.try_wait().ok().flatten().is_none() {
            let _ = self.sup.kill();
            let _ = self.sup.wait();
        }
        if self.root.exists() {
            // Best effort after a failure: kill and remove whatever the test left.
            for entry in std::fs::read_dir(&self.root).into_iter().flatten().flatten() {
                if entry.path().is_dir() {
                    let _ = std::fs::write(entry.path().join("cgroup.kill"), "1");
                    std::thread::sleep(Duration::from_millis(200));
                    remove_tree(&entry.path());
                }
            }
            let _ = std::fs::remove_dir(&self.root);
        }
        // The v1 memory/pids directories the supervisor makes on hybrid hosts, named after our root: a
        // supervisor killed above never removed them; and the homes it made for job uids.
        if let Some(name) = self.root.file_name() {
            let _ =
                std::fs::remove_dir_all(std::env::temp_dir().join(format!("heddle-homes-{}", name.to_string_lossy())));
            for c in ["memory", "pids"] {
                remove_tree(&Path::new("/sys/fs/cgroup").join(c).join(name));
            }
        }
    }
}

fn remove_tree(dir: &Path) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.path().is_dir() {
            remove_tree(&entry.path());
        }
    }
    let _ = std::fs::remove_dir(dir);
}

struct Client {
    r: BufReader<UnixStream>,
    w: UnixStream,
}

impl Client {
    fn ask(&mut self, line: &str) -> String {
        writeln!(self.w, "{line}").unwrap();
        let mut out = String::new();
        self.r.read_line(&mut out).unwrap();
        out.trim_end().to_owned()
    }
}

fn field<'a>(line: &'a str, key: &str) -> &'a str {
    let start = line.find(&format!("{key}=")).unwrap_or_else(|| panic!("no {key} in {line}")) + key.len() + 1;
    line[start..].split(' ').next().unwrap()
}

// ---------------------------------------------------------------------------------------------
// The tests.

fn session_lifecycle_drops_privileges_places_and_kills() {
    let mut fx = Fixture::start();
    let mut c = fx.connect();

    let front = c.ask("facts");
    assert_eq!(field(&front, "uid"), "65534", "{front}");
    assert_eq!(field(&front, "groups"), "65534", "{front}");
    assert_eq!(field(&front, "nnp"), "1", "{front}");
    assert_eq!(field(&front, "cwd"), "/", "{front}");
    assert_eq!(field(&front, "own_session"), "true", "{front}");
    assert_eq!(field(&front, "env"), "LANG-absent", "{front}");
    assert_eq!(field(&front, "fd3"), "seqpacket", "{front}");
    assert_eq!(field(&front, "statedir"), "65534:700", "{front}");

    let info = c.ask("describe");
    assert!(info.contains(&format!("cgroup_root: \"{}\"", fx.root.display())), "{info}");

    let opened = c.ask("open demo 0");
    assert!(opened.starts_with("SessionOpened"), "{opened}\n{}", fx.log());
    let dir = fx.root.join("session-demo");
    assert_eq!(field(&opened, "uid"), "65534", "{opened}");
    assert_eq!(field(&opened, "ruid"), "65532", "the worker's real uid is the cgroup owner: {opened}");
    assert_eq!(field(&opened, "groups"), "65534", "{opened}");
    assert_eq!(field(&opened, "nnp"), "1", "{opened}");
    assert_eq!(field(&opened, "cwd"), "/", "{opened}");
    assert_eq!(field(&opened, "own_session"), "true", "{opened}");
    let rel = dir.strip_prefix(fx.root.parent().unwrap()).unwrap();
    assert_eq!(field(&opened, "cgroup"), format!("/{}/worker", rel.display()), "{opened}");
    assert_eq!(field(&opened, "fds"), "memfd,eventfd,eventfd,eventfd,eventfd", "{opened}");
    assert_eq!(field(&opened, "fd8"), "closed", "{opened}");
    assert_eq!(field(&opened, "env"), "HOME,LANG,LOGNAME,PATH,USER", "{opened}");
    let base = std::env::var("TMPDIR").ok().filter(|v| !v.is_empty()).unwrap_or_else(|| "/tmp".into());
    let tmp = format!("{base}/heddle-sessions-{}/demo", fx.root.file_name().unwrap().to_string_lossy());
    // nobody's passwd home is /nonexistent: the supervisor made one, and says so (`--own-home`).
    let args =
        format!("--session,demo,--cgroup,{},--policy=workspace,--project=/,--tmp={tmp},--own-home", dir.display());
    assert_eq!(field(&opened, "args"), args, "{opened}");
    assert_eq!(field(&opened, "jobs"), "2", "{opened}");
    let owner = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(dir.join("cgroup.procs")).unwrap());
    assert_eq!(owner, 65532, "the cgroup owner's, never the jobs' uid");

    let again = c.ask("open demo 0");
    assert!(again.starts_with("SessionFailed") && again.contains("already open"), "{again}");
    let bad = c.ask("open .x 0");
    assert!(bad.starts_with("SessionFailed") && bad.contains("not valid"), "{bad}");
    let other = c.ask("open mine 4000123");
    assert!(other.starts_with("SessionOpened") && field(&other, "uid") == "4000123", "{other}");

    let closed = c.ask("close demo");
    assert!(closed.starts_with("SessionClosed"), "{closed}");
    assert!(closed.contains("verified_empty: true"), "{closed}");
    assert_eq!(closed.matches("cmdline: \"sleep 1000\"").count(), 2, "{closed}");
    assert!(!dir.exists(), "{} still exists", dir.display());

    let status = fx.terminate();
    assert!(status.success(), "exit {status:?}; log:\n{}", fx.log());
    assert!(!fx.root.join("session-mine").exists());
    assert!(!fx.root.exists(), "cgroup root left behind");
    assert!(!fx.socket.exists(), "socket left behind");
    assert!(fx.log().contains("the front exited with exit code 0"), "{}", fx.log());
}

fn worker_death_is_reported_and_its_jobs_killed() {
    let mut fx = Fixture::start();
    let mut c = fx.connect();
    let opened = c.ask("open w 0");
    assert!(opened.starts_with("SessionOpened"), "{opened}\n{}", fx.log());
    let died = c.ask("crash w");
    assert!(died.starts_with("WorkerDied"), "{died}");
    assert!(died.contains("code: Some(3)") && died.contains("signal: None"), "{died}");
    assert_eq!(died.matches("cmdline: \"sleep 1000\"").count(), 2, "{died}");
    assert!(died.contains("verified_empty: true"), "the subtree was verified empty at the death: {died}");
    assert!(!fx.root.join("session-w").exists());
    let closed = c.ask("close w");
    assert!(closed.starts_with("Error") && closed.contains("no open session"), "{closed}");
    assert!(fx.terminate().success());
    assert!(!fx.root.exists());
}

fn front_death_keeps_sessions_until_sigterm() {
    let mut fx = Fixture::start();
    let mut c = fx.connect();
    let opened = c.ask("open keep 0");
    assert!(opened.starts_with("SessionOpened"), "{opened}\n{}", fx.log());
    assert_eq!(c.ask("exit"), "bye");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !fx.log().contains("sessions stay alive") {
        assert!(Instant::now() < deadline, "front death not logged:\n{}", fx.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(fx.sup.try_wait().unwrap().is_none(), "the supervisor must outlive its front");
    let procs = std::fs::read_to_string(fx.root.join("session-keep/job-1/cgroup.procs")).unwrap();
    assert_eq!(procs.lines().count(), 2, "jobs must survive the front");
    assert!(fx.terminate().success(), "{}", fx.log());
    assert!(!fx.root.exists(), "{}", fx.log());
}

// ---------------------------------------------------------------------------------------------
// The stand-in front.

fn status_field(key: &str) -> String {
    status_nth(key, 1)
}

/// The `n`th word of `/proc/self/status`'s `key:` line (`Uid:` real 1, effective 2).
fn status_nth(key: &str, n: usize) -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with(&format!("{key}:"))).unwrap_or("");
    line.split_whitespace().nth(n).unwrap_or("").to_owned()
}

fn common_facts() -> String {
    let groups = std::fs::read_to_string("/proc/self/status").unwrap();
    let groups = groups.lines().find_map(|l| l.strip_prefix("Groups:")).unwrap_or("").trim().replace(' ', ",");
    let cwd = std::env::current_dir().unwrap();
    let own_session = nix::unistd::getsid(None).unwrap() == nix::unistd::getpid();
    format!(
        "uid={} ruid={} groups={groups} nnp={} cwd={} own_session={own_session}",
        status_nth("Uid", 2),
        status_field("Uid"),
        status_field("NoNewPrivs"),
        cwd.display()
    )
}

fn fd_kind(fd: i32) -> String {
    match std::fs::read_link(format!("/proc/self/fd/{fd}")) {
        Ok(p) if p.to_string_lossy().starts_with("/memfd:") => "memfd".into(),
        Ok(p) if p.to_string_lossy() == "anon_inode:[eventfd]" => "eventfd".into(),
        Ok(p) => p.display().to_string(),
        Err(_) => "closed".into(),
    }
}

fn fake_front() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let state_dir = PathBuf::from(&args[5]);
    assert_eq!(
        (args[0].as_str(), args[1].as_str(), args[2].as_str(), args[3].as_str()),
        ("--control-fd", "3", "--listen-fd", "4")
    );
    // SAFETY: the supervisor placed the control socket at fd 3 and the listener at fd 4 for us; nothing
    // else in this process owns them.
    let (control, listener) = unsafe { (OwnedFd::from_raw_fd(3), UnixListener::from_raw_fd(4)) };
    let sock_type = nix::sys::socket::getsockopt(&control, nix::sys::socket::sockopt::SockType).unwrap();
    let fd3 = if sock_type == nix::sys::socket::SockType::SeqPacket { "seqpacket" } else { "other" };
    let meta = std::fs::metadata(&state_dir).unwrap();
    let statedir = format!(
        "{}:{:o}",
        std::os::unix::fs::MetadataExt::uid(&meta),
        std::os::unix::fs::MetadataExt::mode(&meta) & 0o777
    );
    let env = if std::env::var_os("LANG").is_some() || std::env::var_os("HEDDLE_TEST_SECRET").is_some() {
        "leaked"
    } else {
        "LANG-absent"
    };
    let facts = format!("{} env={env} fd3={fd3} statedir={statedir}", common_facts());

    let (tx, rx) = mpsc::channel::<(FromSupervisor, Vec<OwnedFd>)>();
    let reader = control.try_clone().unwrap();
    std::thread::spawn(move || loop {
        match control::recv::<FromSupervisor>(reader.as_fd()) {
            Ok((FromSupervisor::Shutdown, _)) => std::process::exit(0),
            // Handing over live sessions (to a restarted front): this stand-in takes none.
            Ok((FromSupervisor::AdoptDone { .. } | FromSupervisor::SessionAdopt { .. }, _)) => {}
            Ok(m) => tx.send(m).unwrap(),
            Err(_) => std::process::exit(1),
        }
    });
    let mut front = FakeFront { control, rx, req: 0, sessions: HashMap::new() };
    for conn in listener.incoming() {
        let conn = conn.unwrap();
        let mut w = conn.try_clone().unwrap();
        for line in BufReader::new(conn).lines() {
            let line = line.unwrap();
            let answer = if line == "facts" { facts.clone() } else { front.command(&line) };
            writeln!(w, "{answer}").unwrap();
            if line == "exit" {
                std::process::exit(0);
            }
        }
    }
}

struct FakeFront {
    control: OwnedFd,
    rx: mpsc::Receiver<(FromSupervisor, Vec<OwnedFd>)>,
    req: u64,
    sessions: HashMap<String, Vec<OwnedFd>>,
}

impl FakeFront {
    fn ask(&mut self, msg: ToSupervisor) -> (FromSupervisor, Vec<OwnedFd>) {
        control::send(self.control.as_fd(), &msg, &[]).unwrap();
        self.next()
    }

    fn next(&mut self) -> (FromSupervisor, Vec<OwnedFd>) {
        self.rx.recv_timeout(Duration::from_secs(15)).expect("no answer from the supervisor")
    }

    fn command(&mut self, line: &str) -> String {
        self.req += 1;
        let req = self.req;
        let words: Vec<&str> = line.split(' ').collect();
        match words.as_slice() {
            ["describe"] => format!("{:?}", self.ask(ToSupervisor::Describe { req }).0),
            ["open", id, uid] => {
                let msg = ToSupervisor::OpenSession {
                    req,
                    session: id.to_string(),
                    client_uid: uid.parse().unwrap(),
                    policy: "workspace".into(),
                    network: None,
                    ptys: None,
                    project: "/".into(),
                    memory_max: None,
                    pids_max: None,
                    writable: Vec::new(),
                    bash: None,
                };
                let (reply, fds) = self.ask(msg);
                if !matches!(reply, FromSupervisor::SessionOpened { .. }) {
                    return format!("{reply:?}");
                }
                assert_eq!(fds.len(), 5);
                let report = worker_report(&fds);
                self.sessions.insert(id.to_string(), fds);
                format!("{reply:?} {report}")
            }
            ["close", id] => format!("{:?}", self.ask(ToSupervisor::CloseSession { req, session: id.to_string() }).0),
            ["crash", id] => {
                let fds = &self.sessions[*id];
                EventFd::from_owned(fds[1].try_clone().unwrap()).notify().unwrap();
                format!("{:?}", self.next().0)
            }
            ["exit"] => "bye".into(),
            _ => format!("unknown command {line:?}"),
        }
    }
}

/// The worker's first event: its report, read from the region it was given.
fn worker_report(fds: &[OwnedFd]) -> String {
    let region = Region::attach(fds[0].as_fd()).unwrap();
    let mut evt = region.evt_consumer();
    let evt_data = EventFd::from_owned(fds[3].try_clone().unwrap());
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut out = Vec::new();
    while !evt.try_pop(&mut out).unwrap() {
        assert!(Instant::now() < deadline, "no report from the worker");
        evt_data.wait(100).unwrap();
    }
    String::from_utf8(out).unwrap()
}

// ---------------------------------------------------------------------------------------------
// The stand-in worker.

fn fake_worker() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cgroup = PathBuf::from(&args[3]);
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let own = own.lines().find_map(|l| l.strip_prefix("0::")).unwrap_or("?").to_owned();
    let mut env: Vec<String> = std::env::vars().map(|(k, _)| k).collect();
    env.sort();
    let fds: Vec<String> = (3..8).map(fd_kind).collect();
    let jobs = start_jobs(&cgroup);
    let report = format!(
        "{} cgroup={own} fds={} fd8={} env={} args={} jobs={jobs}",
        common_facts(),
        fds.join(","),
        fd_kind(8),
        env.join(","),
        args.join(",")
    );
    // SAFETY: the supervisor placed the region memfd at fd 3 and the eventfds at 4…7 for us.
    let owned: Vec<OwnedFd> = (3..8).map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }).collect();
    let region = Region::attach(owned[0].as_fd()).unwrap();
    region.evt_producer().try_push(report.as_bytes()).unwrap();
    EventFd::from_owned(owned[3].try_clone().unwrap()).notify().unwrap();
    let cmd_data = EventFd::from_owned(owned[1].try_clone().unwrap());
    while !cmd_data.wait(-1).unwrap() {}
    std::process::exit(3);
}

/// Two job processes in `<cgroup>/job-1`, one of them in its own session; returns how many are there.
#[expect(clippy::zombie_processes, reason = "the job runs until the supervisor's cgroup.kill")]
fn start_jobs(cgroup: &Path) -> usize {
    let job = cgroup.join("job-1");
    // As the real worker does: cgroups are made as the real uid (the owner), processes run as the other.
    // SAFETY: integer-only calls on this thread's file-system uid.
    unsafe { libc::setfsuid(libc::getuid()) };
    std::fs::create_dir(&job).unwrap();
    // Placed by this stand-in (the owner's fsuid), then told to go on: the job's own uid may not move it.
    let mut child = Command::new("/bin/sh")
        .args(["-c", "read go && (setsid sleep 1000 &) && exec sleep 1000"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::fs::write(job.join("cgroup.procs"), child.id().to_string()).unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), b"go\n").unwrap();
    // Wait until exactly the two sleeps are there (the subshell that starts `setsid` comes and goes).
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let procs = std::fs::read_to_string(job.join("cgroup.procs")).unwrap_or_default();
        let sleeps = procs
            .lines()
            .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == b"sleep\x001000\x00"))
            .count();
        if (sleeps == 2 && procs.lines().count() == 2) || Instant::now() > deadline {
            return sleeps;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
