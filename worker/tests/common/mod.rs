//! Shared test helpers: a minimal front (push commands, pop events, park/wake like the real one), an
//! event collector keyed by job, and two ways to run a worker: in a thread over heap rings with fake
//! cgroups (no root), or as the real `heddle-worker` binary in a real cgroup (root).
#![allow(dead_code)]

use shm_proto::msg::{Command, Event, JobId, RunSpec, StdinMode, Stream};
use shm_proto::ring::{heap_ring, Consumer, Producer, PushError};
use shm_proto::sys::EventFd;
use std::collections::HashMap;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

/// The front's ends of a session.
pub struct Front {
    pub cmd: Producer,
    pub evt: Consumer,
    pub cmd_data: EventFd,
    pub cmd_space: EventFd,
    pub evt_data: EventFd,
    pub evt_space: EventFd,
    scratch: Vec<u8>,
}

impl Front {
    pub fn new(cmd: Producer, evt: Consumer, bells: [EventFd; 4]) -> Front {
        let [cmd_data, cmd_space, evt_data, evt_space] = bells;
        Front { cmd, evt, cmd_data, cmd_space, evt_data, evt_space, scratch: Vec::new() }
    }

    /// Push one raw frame body (for garbage tests), then ring the worker if it is parked.
    pub fn send_raw(&mut self, body: &[u8]) {
        loop {
            match self.cmd.try_push(body) {
                Ok(()) => break,
                Err(PushError::Full) => {
                    if self.cmd.park_prepare(body.len()) {
                        self.cmd_space.wait(5000).unwrap();
                        self.cmd.park_done();
                        self.cmd_space.drain().unwrap();
                    }
                }
                Err(e) => panic!("push failed: {e}"),
            }
        }
        if self.cmd.wake_needed() {
            self.cmd_data.notify().unwrap();
        }
    }

    pub fn send(&mut self, cmd: &Command) {
        let mut body = Vec::new();
        shm_proto::frame::encode(cmd, &mut body).unwrap();
        self.send_raw(&body);
    }

    pub fn run(&mut self, job: JobId, cmd: &str) {
        self.run_in(job, cmd, "/", &[]);
    }

    pub fn run_in(&mut self, job: JobId, cmd: &str, cwd: &str, env: &[(&str, &str)]) {
        self.send(&Command::Run(spec(job, cmd, cwd, env)));
    }

    /// A stateful job's spec (`state: Some(restore)`), as the front sends it for a session's call.
    pub fn stateful(job: JobId, cmd: &str, cwd: &str, restore: &str) -> RunSpec {
        RunSpec { state: Some(restore.as_bytes().to_vec()), ..spec(job, cmd, cwd, &[]) }
    }

    /// The next event, or `None` after `timeout`.
    pub fn recv(&mut self, timeout: Duration) -> Option<Event> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(ev) = self.evt.pop_msg::<Event>(&mut self.scratch).expect("event ring broken") {
                if self.evt.producer_wake_needed() {
                    self.evt_space.notify().unwrap();
                }
                return Some(ev);
            }
            if self.evt.park_prepare() {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    self.evt.park_done();
                    return None;
                }
                self.evt_data.wait(left.as_millis().max(1) as i32).unwrap();
                self.evt.park_done();
                self.evt_data.drain().unwrap();
            }
        }
    }

    pub fn expect(&mut self, what: &str) -> Event {
        self.recv(Duration::from_secs(20)).unwrap_or_else(|| panic!("no event within 20 s while waiting for {what}"))
    }
}

/// A job's spec as `run_in` sends it (no state).
pub fn spec(job: JobId, cmd: &str, cwd: &str, env: &[(&str, &str)]) -> RunSpec {
    RunSpec {
        job,
        cmd: cmd.into(),
        cwd: cwd.as_bytes().to_vec(),
        env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        stdin: StdinMode::Null,
        state: None,
        files: Vec::new(),
        persistent: false,
        state_env: Vec::new(),
        capture_only: None,
        effects: Default::default(),
        state_cwd: None,
    }
}

/// What one job reported, in order.
#[derive(Debug, Default)]
pub struct Trace {
    pub pid: Option<u32>,
    pub spawn_failed: Option<String>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// `(code, signal, killed)`.
    pub exited: Option<(Option<i32>, Option<i32>, bool)>,
    /// Output bytes (both streams) seen before `Exited`.
    pub bytes_before_exit: usize,
    pub closed: bool,
    /// `Started` said the job ran on a pre-started shell.
    pub prestarted: bool,
    /// The state capture (`StateCaptured`), if any.
    pub state: Option<Vec<u8>>,
    /// Event kinds in arrival order, with runs of `Output` on one stream collapsed.
    pub kinds: Vec<&'static str>,
    /// `Emptied`'s CPU time (the event itself is also kept in `Collector::other`).
    pub cpu_usec: Option<u64>,
}

impl Trace {
    pub fn done(&self) -> bool {
        self.closed || self.spawn_failed.is_some()
    }

    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
}

/// Collects events by job; events without a job go to `other`.
#[derive(Debug, Default)]
pub struct Collector {
    pub jobs: HashMap<JobId, Trace>,
    pub other: Vec<Event>,
}

impl Collector {
    pub fn add(&mut self, ev: Event) {
        let push_kind = |t: &mut Trace, k: &'static str| {
            if !(k.starts_with("out") && t.kinds.last() == Some(&k)) {
                t.kinds.push(k);
            }
        };
        if let Event::Emptied { job, usage, .. } = &ev {
            self.jobs.entry(*job).or_default().cpu_usec = Some(usage.cpu_usec);
        }
        match ev {
            Event::Started { job, pid, prestarted, .. } => {
                let t = self.jobs.entry(job).or_default();
                t.pid = Some(pid);
                t.prestarted = prestarted;
                push_kind(t, "started");
            }
            Event::SpawnFailed { job, error } => {
                let t = self.jobs.entry(job).or_default();
                t.spawn_failed = Some(error);
                push_kind(t, "spawn_failed");
            }
            Event::Output { job, stream, data, .. } => {
                let t = self.jobs.entry(job).or_default();
                if t.exited.is_none() {
                    t.bytes_before_exit += data.len();
                }
                match stream {
                    Stream::Stdout => {
                        t.stdout.extend_from_slice(&data);
                        push_kind(t, "out")
                    }
                    Stream::Stderr => {
                        t.stderr.extend_from_slice(&data);
                        push_kind(t, "err")
                    }
                }
            }
            Event::Exited { job, code, signal, killed, .. } => {
                let t = self.jobs.entry(job).or_default();
                assert!(t.exited.is_none(), "job {job}: Exited twice");
                t.exited = Some((code, signal, killed));
                push_kind(t, "exited");
            }
            Event::StreamsClosed { job } => {
                let t = self.jobs.entry(job).or_default();
                assert!(t.exited.is_some(), "job {job}: StreamsClosed before Exited");
                t.closed = true;
                push_kind(t, "closed");
            }
            Event::StateCaptured { job, data, .. } => {
                self.jobs.entry(job).or_default().state = Some(data);
            }
            other => self.other.push(other),
        }
    }

    /// Receive events until `done(self)` holds.
    pub fn until(&mut self, front: &mut Front, what: &str, done: impl Fn(&Collector) -> bool) {
        while !done(self) {
            let ev = front.expect(what);
            self.add(ev);
        }
    }

    pub fn until_done(&mut self, front: &mut Front, job: JobId) -> &Trace {
        self.until(front, &format!("job {job} to finish"), |c| c.jobs.get(&job).is_some_and(Trace::done));
        &self.jobs[&job]
    }
}

fn dup(e: &EventFd) -> EventFd {
    EventFd::from_owned(e.as_fd().try_clone_to_owned().unwrap())
}

/// Four fresh doorbells and their duplicates: (front's, worker's).
pub fn doorbells() -> ([EventFd; 4], [EventFd; 4]) {
    let bells: [EventFd; 4] = std::array::from_fn(|_| EventFd::new().unwrap());
    let dups = std::array::from_fn(|i| dup(&bells[i]));
    (bells, dups)
}

/// A worker running in a thread of this process, over heap rings, with recording fake cgroups.
pub struct LocalWorker {
    pub front: Front,
    pub cgroups: worker::cgroup::RecordingCgroups,
    pub handle: Option<std::thread::JoinHandle<Result<(), worker::WorkerError>>>,
    /// The worker thread's kernel thread id (for `/proc/self/task/<tid>`).
    pub tid: i32,
}

impl LocalWorker {
    pub fn start(evt_capacity: usize, base_env: Vec<(String, String)>) -> LocalWorker {
        let (cmd_tx, cmd_rx) = heap_ring(1 << 16);
        let (evt_tx, evt_rx) = heap_ring(evt_capacity);
        let (front_bells, [cmd_data, cmd_space, evt_data, evt_space]) = doorbells();
        let ch = worker::Channels { cmd: cmd_rx, evt: evt_tx, cmd_data, cmd_space, evt_data, evt_space, region: None };
        let hello = Event::Hello {
            pid: std::process::id(),
            uid: 0,
            bash: "/bin/bash".into(),
            bash_version: "test".into(),
            cgroup: "/fake".into(),
        };
        let settings =
            worker::Settings { base_env, hello, bash_file: None, startup_warnings: Vec::new(), sandbox: None };
        let cgroups = worker::cgroup::RecordingCgroups::default();
        let fake = cgroups.clone();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let handle = std::thread::spawn(move || {
            tid_tx.send(nix::unistd::gettid().as_raw()).unwrap();
            worker::serve(ch, fake, settings)
        });
        let tid = tid_rx.recv().unwrap();
        let mut front = Front::new(cmd_tx, evt_rx, front_bells);
        assert!(matches!(front.expect("Hello"), Event::Hello { .. }), "the first event is Hello");
        LocalWorker { front, cgroups, handle: Some(handle), tid }
    }

    /// Send Shutdown and return how the worker ended.
    pub fn shutdown(mut self) -> Result<(), worker::WorkerError> {
        self.front.send(&Command::Shutdown);
        self.handle.take().unwrap().join().unwrap()
    }
}

/// Send SIGKILL to a process this test started (through the worker), pinned by a pidfd.
pub fn kill_own_job(pid: u32) {
    if let Ok(fd) = worker::sys::pidfd_open(pid) {
        let _ = worker::sys::pidfd_send_signal(fd.as_fd(), libc::SIGKILL);
    }
}

/// `seq 1 n` as bytes.
pub fn seq(n: u64) -> Vec<u8> {
    let mut v = Vec::new();
    for i in 1..=n {
        v.extend_from_slice(i.to_string().as_bytes());
        v.push(b'\n');
    }
    v
}

/// The real `heddle-worker` binary serving a real session cgroup, started the way the supervisor does
/// (fds 3–7, placed in `<session>/worker`). Needs root; only touches
/// `/sys/fs/cgroup/unified/heddle-wtest-*` (or `/sys/fs/cgroup/heddle-wtest-*` on pure v2 hosts), which it
/// creates and removes.
pub struct ProcessWorker {
    pub front: Front,
    pub dir: std::path::PathBuf,
    pub region: shm_proto::region::Region,
    pub child: Option<std::process::Child>,
}

impl ProcessWorker {
    pub fn start(tag: &str) -> ProcessWorker {
        ProcessWorker::start_with(tag, false)
    }

    /// As [`ProcessWorker::start`]; `ignore_sigchld` starts the worker with `SIGCHLD` ignored, as a careless
    /// parent could leave it.
    pub fn start_with(tag: &str, ignore_sigchld: bool) -> ProcessWorker {
        use std::os::fd::{AsRawFd, OwnedFd};
        use std::os::unix::process::CommandExt;
        assert!(
            nix::unistd::geteuid().is_root(),
            "this test needs root: it creates cgroups and runs heddle-worker in them (CI runs as root)"
        );
        let base = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
            .into_iter()
            .map(std::path::Path::new)
            .find(|p| p.join("cgroup.subtree_control").exists())
            .expect("no cgroup v2 mount at /sys/fs/cgroup/unified or /sys/fs/cgroup");
        let dir = base.join(format!("heddle-wtest-{}-{tag}", std::process::id()));
        std::fs::create_dir(&dir).unwrap();
        std::fs::create_dir(dir.join("worker")).unwrap();
        let cfg = shm_proto::region::RegionConfig::default();
        let (region, memfd) = shm_proto::region::Region::create(cfg).unwrap();
        let (front_bells, worker_bells) = doorbells();
        // Park every fd the child needs far above 3..7 so the dup2s below cannot clobber one another.
        let high = |fd: std::os::fd::BorrowedFd<'_>| -> OwnedFd {
            let raw = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(100)).unwrap();
            // SAFETY: F_DUPFD_CLOEXEC just created `raw`; this is its only owner.
            unsafe { std::os::fd::FromRawFd::from_raw_fd(raw) }
        };
        let mut fds = vec![high(memfd.as_fd())];
        fds.extend(worker_bells.iter().map(|b| high(b.as_fd())));
        let procs = std::fs::OpenOptions::new().write(true).open(dir.join("worker/cgroup.procs")).unwrap();
        let raw: Vec<i32> = fds.iter().map(|f| f.as_raw_fd()).collect();
        let procs_raw = procs.as_raw_fd();
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_heddle-worker"));
        cmd.args(["--session", tag, "--cgroup"]).arg(&dir);
        cmd.env_clear().env("PATH", "/usr/local/bin:/usr/bin:/bin").env("HOME", "/root");
        cmd.env("SECRET_TOKEN", "must-not-reach-jobs");
        // SAFETY: the closure only calls dup2, signal and write on fds that stay open in the parent until
        // spawn returns; all three are async-signal-safe.
        unsafe {
            cmd.pre_exec(move || {
                for (i, fd) in raw.iter().enumerate() {
                    if libc::dup2(*fd, 3 + i32::try_from(i).unwrap_or(i32::MAX)) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                if ignore_sigchld {
                    libc::signal(libc::SIGCHLD, libc::SIG_IGN);
                }
                // Join <session>/worker, as the supervisor places the worker (this moves the child only).
                if libc::write(procs_raw, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        // The guard exists before anything can panic, so a failing start still cleans up.
        let front = Front::new(region.cmd_producer(), region.evt_consumer(), front_bells);
        let mut w = ProcessWorker { front, dir, region, child: None };
        w.child = Some(cmd.spawn().unwrap());
        drop((fds, procs, memfd));
        let hello = w.front.expect("Hello");
        let Event::Hello { pid, cgroup, bash, bash_version, .. } = &hello else { panic!("first event {hello:?}") };
        assert_eq!(*pid, w.child.as_ref().unwrap().id());
        assert_eq!((cgroup.as_str(), bash.as_str()), (w.dir.to_str().unwrap(), "/bin/bash"));
        assert!(bash_version.starts_with(|c: char| c.is_ascii_digit()), "{bash_version}");
        // Then its bash's file: nothing was passed on, so the worker ran bash for the version.
        let file = w.front.expect("BashFile");
        assert!(matches!(&file, Event::BashFile { id, probed: true } if !id.is_empty()), "second event {file:?}");
        // Then the sandbox report: the worker confined itself and refuses nothing on this kernel.
        let sb = w.front.expect("Sandbox");
        let Event::Sandbox(info) = &sb else { panic!("second event {sb:?}") };
        assert!(info.seccomp_installed && info.worker_confined && info.refusal.is_none(), "{info:?}");
        w
    }

    /// The cgroup path of `dir/sub` as `/proc/PID/cgroup` shows it (`0::/…`).
    pub fn cgroup_name(&self, sub: &str) -> String {
        format!("/{}/{sub}", self.dir.file_name().unwrap().to_string_lossy())
    }

    pub fn populated(&self, sub: &str) -> Option<bool> {
        let events = std::fs::read_to_string(self.dir.join(sub).join("cgroup.events")).ok()?;
        Some(events.lines().any(|l| l == "populated 1"))
    }

    /// Wait until `dir/sub` is empty of processes (or gone).
    pub fn wait_unpopulated(&self, sub: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while self.populated(sub) == Some(true) {
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    }

    /// Wait for the worker process to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + timeout;
        let child = self.child.as_mut().unwrap();
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                return st;
            }
            assert!(Instant::now() < deadline, "the worker did not exit");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// CPU ticks (utime + stime) the worker process has used.
    pub fn cpu_ticks(&self) -> u64 {
        let pid = self.child.as_ref().unwrap().id();
        let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let f: Vec<&str> = s.rsplit(')').next().unwrap().split_whitespace().collect();
        f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
    }
}

impl Drop for ProcessWorker {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if child.try_wait().ok().flatten().is_none() {
                let _ = child.kill(); // our own child, by its handle
            }
            let _ = child.wait();
        }
        // Kill what is left in the subtree we created, then remove it leaves first.
        let _ = std::fs::write(self.dir.join("cgroup.kill"), "1");
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let mut dirs: Vec<_> = std::fs::read_dir(&self.dir)
                .map(|rd| rd.flatten().filter(|e| e.path().is_dir()).map(|e| e.path()).collect())
                .unwrap_or_default();
            dirs.push(self.dir.clone());
            let all_gone = dirs.iter().all(|d| std::fs::remove_dir(d).is_ok() || !d.exists());
            if all_gone || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
