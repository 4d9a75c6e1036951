//! Shared helpers for heddle's end-to-end tests: a [`Heddle`] fixture that starts the real stack
//! (`heddle up` → `heddle-supervisor` → `heddle-front`) in a temp dir with a cgroup root of its own, and
//! stops it and removes that cgroup root afterwards.
//!
//! The tests need root (the supervisor owns a cgroup tree). CI runs as root; elsewhere they fail with a
//! message saying so rather than skipping. Project folders live under a world-traversable temp dir so the
//! unprivileged worker can enter them, wherever the checkout sits.
//!
//! ```no_run
//! let h = heddle_tests::Heddle::start();
//! let mut c = h.client();
//! let s = h.open_session(&mut c);
//! let r = c.call("run", serde_json::json!({"session": s, "cmd": "true"})).unwrap();
//! assert_eq!(r["exit_code"], 0);
//! ```
#![forbid(unsafe_code)]

pub mod http;

pub use cli::client::{CallError, Client};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Where the v2 hierarchy is mounted on this host (hybrid: `unified`; pure v2: the root).
pub fn cgroup2_mount() -> PathBuf {
    if Path::new("/sys/fs/cgroup/unified/cgroup.procs").exists() {
        PathBuf::from("/sys/fs/cgroup/unified")
    } else {
        PathBuf::from("/sys/fs/cgroup")
    }
}

/// The directory holding the workspace's built binaries: the running executable's own directory (a
/// benchmark binary), or the one above it (a test executable sits in `deps/`).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let own = exe.parent().expect("executable dir").to_path_buf();
    let dir =
        if own.join("heddle-supervisor").exists() { own } else { own.parent().expect("target dir").to_path_buf() };
    for b in ["heddle", "heddle-supervisor", "heddle-front", "heddle-worker", "heddle-launch"] {
        assert!(
            dir.join(b).exists(),
            "{} is missing: build the binaries first with `cargo build --workspace --bins`",
            dir.join(b).display()
        );
    }
    dir
}

/// Fail loudly (never skip) when not root: CI is root, and these tests exist to run there.
pub fn require_root() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "heddle's end-to-end tests need root (the supervisor owns a cgroup tree); run them as root, as CI does"
    );
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

impl std::fmt::Debug for Heddle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Heddle").finish_non_exhaustive()
    }
}

/// A running heddle stack for one test.
pub struct Heddle {
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub state_dir: PathBuf,
    pub cgroup_root: PathBuf,
    /// A world-writable project folder for sessions' jobs.
    pub project: PathBuf,
    up: Option<Child>,
}

impl Heddle {
    /// The state of every row `heddle.db` stores for job `job` of sessions named `session`.
    pub fn job_rows(&self, session: &str, job: u64) -> Vec<String> {
        let db = rusqlite::Connection::open_with_flags(
            self.state_dir.join("heddle.db"),
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .expect("open heddle.db");
        let mut q = db.prepare("SELECT state FROM jobs WHERE session = ?1 AND job = ?2").unwrap();
        q.query_map(rusqlite::params![session, job], |r| r.get(0)).unwrap().map(Result::unwrap).collect()
    }

    /// Start the stack and wait until its socket answers.
    pub fn start() -> Heddle {
        Self::start_with(&[])
    }

    /// Start the stack with extra `heddle up` flags.
    pub fn start_with(extra: &[&str]) -> Heddle {
        Self::start_with_env(extra, &[])
    }

    /// Start the stack with extra `heddle up` flags and extra variables in its environment (what an
    /// operator's shell would have exported: tokens, keys).
    pub fn start_with_env(extra: &[&str], env: &[(&str, &str)]) -> Heddle {
        Self::start_prepared(extra, env, |_| {})
    }

    /// Start the stack after `prepare` filled its state directory (which does not exist yet): a state
    /// directory an earlier build wrote, say.
    pub fn start_prepared(extra: &[&str], env: &[(&str, &str)], prepare: impl FnOnce(&Path)) -> Heddle {
        Self::start_from(&bin_dir(), extra, env, prepare)
    }

    /// Start the stack from the binaries in `bins` (another build's, for a benchmark's baseline).
    pub fn start_from(bins: &Path, extra: &[&str], env: &[(&str, &str)], prepare: impl FnOnce(&Path)) -> Heddle {
        require_root();
        let dir = tempfile::Builder::new().prefix("heddle-e2e-").tempdir_in("/tmp").expect("temp dir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let project = dir.path().join("project");
        std::fs::create_dir(&project).unwrap();
        std::fs::set_permissions(&project, std::fs::Permissions::from_mode(0o777)).unwrap();
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let cgroup_root = cgroup2_mount().join(format!("heddle-e2e-{}-{n}", std::process::id()));
        let socket = dir.path().join("run/heddle.sock");
        let state_dir = dir.path().join("state");
        prepare(&state_dir);
        let up = spawn_up(bins, &socket, &state_dir, &cgroup_root, extra, env);
        let mut h = Heddle { dir, socket, state_dir, cgroup_root, project, up: Some(up) };
        h.wait_for_socket();
        h
    }

    fn wait_for_socket(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(mut c) = Client::connect(&self.socket) {
                if c.call("describe", json!({})).is_ok() {
                    return;
                }
            }
            if let Some(st) = self.up.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!("heddle up exited early with {st}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("heddle did not answer at {} within 20 s", self.socket.display());
    }

    /// Stop the stack (SIGTERM) and start it again on the same socket, state directory and cgroup root.
    pub fn restart(&mut self, extra: &[&str]) {
        self.stop();
        self.up = Some(spawn_up(&bin_dir(), &self.socket, &self.state_dir, &self.cgroup_root, extra, &[]));
        self.wait_for_socket();
    }

    /// The pids of the direct children of `pid` (from `/proc`).
    pub fn children(pid: u32) -> Vec<u32> {
        let path = format!("/proc/{pid}/task/{pid}/children");
        std::fs::read_to_string(path).unwrap_or_default().split_whitespace().filter_map(|p| p.parse().ok()).collect()
    }

    /// A new client connection.
    pub fn client(&self) -> Client {
        Client::connect(&self.socket).expect("connect to heddle")
    }

    /// The `heddle` CLI run as a person types it, against this stack's socket: its status and output.
    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        std::process::Command::new(bin_dir().join("heddle"))
            .args(args)
            .env("HEDDLE_SOCKET", &self.socket)
            .output()
            .expect("run the heddle CLI")
    }

    /// Open a fresh session whose jobs start in the project folder; returns its id.
    pub fn open_session(&self, c: &mut Client) -> Value {
        let r = c.call("session.open", json!({"cwd": self.project})).expect("session.open");
        r["session"].clone()
    }

    /// The pid of `heddle up` (our child).
    pub fn up_pid(&self) -> u32 {
        self.up.as_ref().map(Child::id).unwrap_or(0)
    }

    /// Stop the stack with SIGTERM (as a user would) and return `heddle up`'s exit status.
    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        let mut up = self.up.take()?;
        let pid = nix::unistd::Pid::from_raw(i32::try_from(up.id()).expect("a pid fits in i32"));
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(st)) = up.try_wait() {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = up.kill();
        let _ = up.wait();
        None
    }
}

impl Drop for Heddle {
    fn drop(&mut self) {
        self.stop();
        remove_cgroup_tree(&self.cgroup_root);
        // The v1 memory/pids directories the supervisor makes on hybrid hosts, named after our root.
        if let Some(name) = self.cgroup_root.file_name() {
            // The homes it made for job uids without one (they outlive a server by design).
            let homes = std::env::temp_dir().join(format!("heddle-homes-{}", name.to_string_lossy()));
            let _ = std::fs::remove_dir_all(homes);
            for c in ["memory", "pids"] {
                rmdir_tree(&Path::new("/sys/fs/cgroup").join(c).join(name));
            }
        }
    }
}

/// `heddle up --socket S --state-dir D --cgroup-root R`, without the caller's `HEDDLE_SOCKET`.
fn up_command(bins: &Path, socket: &Path, state: &Path, cgroup: &Path) -> Command {
    let mut c = Command::new(bins.join("heddle"));
    c.arg("up").arg("--socket").arg(socket).arg("--state-dir").arg(state).arg("--cgroup-root").arg(cgroup);
    c.env_remove("HEDDLE_SOCKET");
    c
}

fn spawn_up(bins: &Path, socket: &Path, state: &Path, cgroup: &Path, extra: &[&str], env: &[(&str, &str)]) -> Child {
    up_command(bins, socket, state, cgroup).args(extra).envs(env.iter().copied()).spawn().expect("spawn heddle up")
}

/// How a `heddle up` that was expected to refuse ended: its exit status and its stderr.
#[derive(Debug)]
pub struct Refused {
    pub status: std::process::ExitStatus,
    pub stderr: String,
}

/// Run `heddle up` on `socket`, `state` and `cgroup` and wait (≤ 20 s) for it to exit, as one that must
/// refuse to start does. One that is still running then (it started instead of refusing) is stopped with
/// SIGTERM, waited for, and reported by a panic naming what it printed.
pub fn up_expecting_refusal(socket: &Path, state: &Path, cgroup: &Path) -> Refused {
    let mut child = up_command(&bin_dir(), socket, state, cgroup)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn heddle up");
    let mut stderr = child.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
        text
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait for heddle up") {
            break Some(st);
        }
        if Instant::now() >= deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let Some(status) = status else {
        // Our own child, by the pid we spawned.
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("a pid fits in i32")),
            nix::sys::signal::SIGTERM,
        );
        let _ = child.wait();
        panic!("the second heddle up started instead of refusing; it printed: {}", reader.join().unwrap_or_default());
    };
    Refused { status, stderr: reader.join().unwrap_or_default() }
}

/// Kill and remove a cgroup tree this test created (leaves first). Used only on our own roots.
pub fn remove_cgroup_tree(root: &Path) {
    if !root.exists() {
        return;
    }
    let _ = std::fs::write(root.join("cgroup.kill"), "1");
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline && populated(root) {
        std::thread::sleep(Duration::from_millis(10));
    }
    rmdir_tree(root);
}

fn rmdir_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                rmdir_tree(&e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// True when `cgroup.events` of `dir` says `populated 1`.
pub fn populated(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("cgroup.events")).map(|s| s.contains("populated 1")).unwrap_or(false)
}

/// The real uid of a live process, from `/proc/PID/status`.
pub fn proc_uid(pid: u64) -> Option<u32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The pids in the cgroup directory `dir` (empty when it is gone).
pub fn pids_of(dir: &Path) -> Vec<u32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// The cgroup directory of `job` in `session` now: describe's session cgroup joined with the job's
/// `cgroup` in `jobs` (job cgroups are reused once empty, so only the front knows which is the job's).
pub fn job_cgroup(c: &mut Client, session: &Value, job: &Value) -> PathBuf {
    let d = c.call("describe", json!({"session": session})).expect("describe");
    let dir = PathBuf::from(d["sessions"][0]["cgroup"].as_str().expect("session cgroup"));
    let jobs = c.call("jobs", json!({"session": session})).expect("jobs");
    let j =
        jobs["jobs"].as_array().expect("jobs").iter().find(|j| &j["job"] == job).cloned().expect("the job is listed");
    dir.join(j["cgroup"].as_str().unwrap_or_else(|| panic!("job {job} has a cgroup: {j}")))
}

/// True while `/proc/PID` exists and is not a zombie.
pub fn alive(pid: u64) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !s.rsplit_once(')').map(|(_, rest)| rest.trim_start().starts_with('Z')).unwrap_or(false),
        Err(_) => false,
    }
}

/// A result's `effects.project.changed` as `(path, change)` pairs; panics when there is no ledger.
pub fn project_changes(r: &Value) -> Vec<(String, String)> {
    r["effects"]["project"]["changed"]
        .as_array()
        .unwrap_or_else(|| panic!("no ledger: {r}"))
        .iter()
        .map(|c| (c["path"].as_str().unwrap().to_owned(), c["change"].as_str().unwrap().to_owned()))
        .collect()
}

/// Poll `f` every 10 ms until it is true or `timeout` passes; returns its last value.
pub fn eventually(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Read a job's whole stream through the `output` call.
pub fn read_stream(c: &mut Client, session: &Value, job: &Value, stream: &str) -> Vec<u8> {
    use base64::Engine;
    let mut out = Vec::new();
    loop {
        let r = c
            .call("output", json!({"session": session, "job": job, "stream": stream, "raw": {"offset": out.len(), "unredacted": true}}))
            .expect("output");
        let data = r["data"].as_str().expect("data");
        let bytes = if r["encoding"] == "base64" {
            base64::engine::general_purpose::STANDARD.decode(data).expect("base64")
        } else {
            data.as_bytes().to_vec()
        };
        if bytes.is_empty() {
            return out;
        }
        out.extend_from_slice(&bytes);
        if out.len() as u64 >= r["total"].as_u64().unwrap_or(0) {
            return out;
        }
    }
}

/// A job's whole stream as text (invalid UTF-8 replaced), through the `output` call.
pub fn stream_text(c: &mut Client, session: &Value, job: &Value, stream: &str) -> String {
    String::from_utf8_lossy(&read_stream(c, session, job, stream)).into_owned()
}

/// Run `cmd` in session `s`, waiting up to 20 s, and return its result, asserting it is no longer running.
pub fn run_to_end(c: &mut Client, s: &Value, cmd: &str) -> Value {
    let r = c.call("run", json!({"session": s, "cmd": cmd, "yield_ms": 20_000})).expect("run");
    assert_ne!(r["state"], "running", "{r}");
    r
}

/// Run `cmd` and return its exact stdout (the stored raw bytes, not the model view, which ends every line
/// with a newline), asserting it exited 0 and left the shell state known.
pub fn run_ok(c: &mut Client, s: &Value, cmd: &str) -> String {
    let r = run_to_end(c, s, cmd);
    assert_eq!(r["exit_code"], 0, "{cmd}: {r}");
    assert!(r["state_note"].is_null(), "{cmd}: {r}");
    String::from_utf8_lossy(&read_stream(c, s, &r["job"], "stdout")).into_owned()
}

/// The text form a model reads of a job result (`protocol::text`), as `heddle run` prints it.
pub fn text_form(r: &Value) -> String {
    let typed: protocol::results::JobResult = serde_json::from_value(r.clone()).expect("a job result");
    protocol::text::job_result(&typed)
}

/// The toolchain, hard-linked into a world-readable place (the tests run as root, whose ~/.rustup the
/// job's uid cannot traverse): `bin/cargo`, `bin/rustc`, `lib/`.
pub fn link_toolchain(h: &Heddle) -> std::path::PathBuf {
    let out = std::process::Command::new("rustc").args(["--print", "sysroot"]).output().expect("rustc");
    let sysroot = std::path::PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
    let dst = h.dir.path().join("toolchain");
    std::fs::create_dir_all(dst.join("bin")).unwrap();
    for b in ["cargo", "rustc"] {
        std::fs::hard_link(sysroot.join("bin").join(b), dst.join("bin").join(b))
            .or_else(|_| std::fs::copy(sysroot.join("bin").join(b), dst.join("bin").join(b)).map(|_| ()))
            .unwrap();
    }
    let st = std::process::Command::new("cp").arg("-al").arg(sysroot.join("lib")).arg(&dst).status().unwrap();
    if !st.success() {
        assert!(std::process::Command::new("cp")
            .arg("-a")
            .arg(sysroot.join("lib"))
            .arg(&dst)
            .status()
            .unwrap()
            .success());
    }
    assert!(std::process::Command::new("chmod").args(["-R", "a+rX"]).arg(&dst).status().unwrap().success());
    dst
}

/// A line-for-line relay run as uid/gid 65534: each request line in, its answer line out. Python, so the
/// connection is made by a process of that uid (`SO_PEERCRED` is taken at connect).
const RELAY: &str = r#"
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
f = s.makefile("rwb")
for line in sys.stdin.buffer:
    f.write(line); f.flush()
    sys.stdout.buffer.write(f.readline()); sys.stdout.flush()
"#;

/// Send `requests` (method, params) as nobody on one connection; the answers in order.
pub fn as_nobody(h: &Heddle, requests: &[(&str, Value)]) -> Vec<Value> {
    use std::io::Write;
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(RELAY)
        .arg(&h.socket)
        .uid(65534)
        .gid(65534)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs the relay");
    let mut input = String::new();
    for (i, (method, params)) in requests.iter().enumerate() {
        input += &json!({"jsonrpc": "2.0", "id": i, "method": method, "params": params}).to_string();
        input.push('\n');
    }
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let answers: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("an answer is one JSON line"))
        .collect();
    assert_eq!(answers.len(), requests.len(), "every request of nobody's was answered: {answers:?}");
    answers
}
