//! Test fakes: a supervisor that builds real regions and eventfds in-process, and a scripted worker
//! thread that plays the worker's side of the rings (with park/wake on both rings), so the kernel,
//! the pump and the methods run exactly as in production, without root, cgroups or bash.
//!
//! The fake worker understands commands of the form `VERB ARGS`:
//! `echo TEXT` (stdout line, exit 0), `err TEXT` (stderr line, exit 1), `exit N`, `big N` (N bytes of
//! stdout in 64 KiB chunks), `lines N` (N one-line chunks), `hang` (runs until killed), `sleep MS`
//! (exits 0 after MS), `fail` (cannot launch), `garbage` (an undecodable frame, then exit 0), `env`
//! (prints its cwd and environment).

use crate::kernel::{Client, Kernel, KernelConfig};
use crate::rpc::results::SupervisorFacts;
use crate::rpc::RpcError;
use crate::sessions::supervisor::{ClosedSession, LinkError, OpenedSession, SessionFds, SupervisorLink};
use serde_json::Value;
use shm_proto::msg::{Command, Event, JobId, Stream, MAX_OUTPUT_CHUNK};
use shm_proto::region::{Region, RegionConfig};
use shm_proto::ring::{Consumer, Producer, PushError};
use shm_proto::sys::EventFd;
use std::collections::HashMap;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

fn dup(e: &EventFd) -> EventFd {
    EventFd::from_owned(e.as_fd().try_clone_to_owned().unwrap())
}

struct WorkerHandle {
    stop: Arc<AtomicBool>,
    doorbell: EventFd,
    thread: Option<JoinHandle<()>>,
}

impl WorkerHandle {
    fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.doorbell.notify().unwrap();
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

/// A supervisor that opens sessions in-process.
pub(crate) struct FakeSupervisor {
    workers: Mutex<HashMap<String, WorkerHandle>>,
    /// The next `open_session` fails with this error.
    pub refuse: Mutex<Option<String>>,
    /// Workers started from now on never say hello.
    pub silent: AtomicBool,
    /// The supervisor is gone (as the control socket's end tells a real front).
    pub gone: AtomicBool,
    /// Times any worker found the front parked and rang its `evt_data` doorbell.
    pub wakes: Arc<AtomicUsize>,
    pub ring: RegionConfig,
}

impl FakeSupervisor {
    pub fn new(ring: RegionConfig) -> Arc<FakeSupervisor> {
        Arc::new(FakeSupervisor {
            workers: Mutex::default(),
            refuse: Mutex::default(),
            silent: AtomicBool::new(false),
            gone: AtomicBool::new(false),
            wakes: Arc::default(),
            ring,
        })
    }

    /// Stop a session's worker as if it had died (the kernel is not told; call `worker_died`).
    pub fn kill_worker(&self, session: &str) {
        if let Some(w) = self.workers.lock().unwrap().remove(session) {
            w.stop();
        }
    }
}

impl SupervisorLink for FakeSupervisor {
    fn open_session(
        &self,
        session: &str,
        client_uid: u32,
        _sandbox: &crate::sessions::sandbox::SandboxRequest,
        _limits: &shm_proto::control::SessionLimits,
    ) -> Result<OpenedSession, LinkError> {
        if let Some(e) = self.refuse.lock().unwrap().take() {
            return Err(LinkError::Refused(e));
        }
        let (region, memfd) = Region::create(self.ring).unwrap();
        let e = || EventFd::new().unwrap();
        let fds = SessionFds { memfd, cmd_data: e(), cmd_space: e(), evt_data: e(), evt_space: e() };
        let stop = Arc::new(AtomicBool::new(false));
        let worker = FakeWorker {
            cmds: region.cmd_consumer(),
            evts: region.evt_producer(),
            cmd_data: dup(&fds.cmd_data),
            cmd_space: dup(&fds.cmd_space),
            evt_data: dup(&fds.evt_data),
            evt_space: dup(&fds.evt_space),
            stop: stop.clone(),
            wakes: self.wakes.clone(),
            scratch: Vec::new(),
            hanging: Vec::new(),
            timers: Vec::new(),
        };
        let hello = !self.silent.load(Ordering::SeqCst);
        let thread = std::thread::spawn(move || worker.run(hello, client_uid));
        let handle = WorkerHandle { stop, doorbell: dup(&fds.cmd_data), thread: Some(thread) };
        self.workers.lock().unwrap().insert(session.to_owned(), handle);
        Ok(OpenedSession {
            fds,
            worker_pid: 4242,
            worker_uid: client_uid,
            cgroup: format!("/fake/session-{session}"),
            tmp: format!("/fake-tmp/{session}"),
        })
    }

    fn close_session(&self, session: &str) -> Result<ClosedSession, LinkError> {
        match self.workers.lock().unwrap().remove(session) {
            Some(w) => {
                w.stop();
                Ok(ClosedSession { killed: Default::default(), verified_empty: true })
            }
            None => Err(LinkError::Refused(format!("no session '{session}'"))),
        }
    }

    fn describe(&self) -> Result<SupervisorFacts, LinkError> {
        Ok(SupervisorFacts { pid: 1, cgroup_root: "/fake".into(), cgroup_mode: "v2".into() })
    }

    fn is_gone(&self) -> bool {
        self.gone.load(Ordering::SeqCst)
    }
}

impl Drop for FakeSupervisor {
    fn drop(&mut self) {
        for (_, w) in self.workers.lock().unwrap().drain() {
            w.stop();
        }
    }
}

/// The worker's side of one session.
struct FakeWorker {
    cmds: Consumer,
    evts: Producer,
    cmd_data: EventFd,
    cmd_space: EventFd,
    evt_data: EventFd,
    evt_space: EventFd,
    stop: Arc<AtomicBool>,
    wakes: Arc<AtomicUsize>,
    scratch: Vec<u8>,
    hanging: Vec<JobId>,
    timers: Vec<(Instant, JobId)>,
}

impl FakeWorker {
    fn run(mut self, hello: bool, uid: u32) {
        if hello {
            let bash = "/bin/bash".into();
            self.push(&Event::Hello {
                pid: 4242,
                uid,
                bash,
                bash_version: "5.2.15(1)-release".into(),
                cgroup: "/fake".into(),
            });
            self.push(&Event::BashFile { id: "1:2:3:4:5".into(), probed: true });
        }
        let mut buf = Vec::new();
        while !self.stop.load(Ordering::SeqCst) {
            self.fire_timers();
            match self.cmds.pop_msg::<Command>(&mut buf).unwrap() {
                Some(cmd) => {
                    if self.cmds.producer_wake_needed() {
                        self.cmd_space.notify().unwrap();
                    }
                    self.handle(cmd);
                }
                None => {
                    if self.cmds.park_prepare() {
                        let ms =
                            self.timers.iter().map(|t| t.0.saturating_duration_since(Instant::now()).as_millis()).min();
                        self.cmd_data.wait(ms.map_or(1000, |m| m.clamp(1, 1000) as i32)).unwrap();
                    }
                    self.cmds.park_done();
                    self.cmd_data.drain().unwrap();
                }
            }
        }
    }

    fn fire_timers(&mut self) {
        let now = Instant::now();
        let due: Vec<JobId> = self.timers.iter().filter(|t| t.0 <= now).map(|t| t.1).collect();
        self.timers.retain(|t| t.0 > now);
        for job in due {
            self.exit(job, Some(0), None, false);
        }
    }

    /// Push with backpressure: park on `evt_space` while the ring is full.
    fn push(&mut self, ev: &Event) {
        shm_proto::frame::encode(ev, &mut self.scratch).unwrap();
        loop {
            match self.evts.try_push(&self.scratch) {
                Ok(()) => break,
                Err(PushError::Full) => {
                    if self.evts.park_prepare(self.scratch.len()) {
                        self.evt_space.wait(100).unwrap();
                    }
                    self.evts.park_done();
                    self.evt_space.drain().unwrap();
                    if self.stop.load(Ordering::SeqCst) {
                        return;
                    }
                }
                Err(e) => panic!("{e}"),
            }
        }
        if self.evts.wake_needed() {
            self.wakes.fetch_add(1, Ordering::SeqCst);
            self.evt_data.notify().unwrap();
        }
    }

    fn out(&mut self, job: JobId, stream: Stream, data: &[u8]) {
        let (read_mono_ns, read_unix_ns) = (shm_proto::sys::monotonic_ns(), shm_proto::sys::unix_ns());
        self.push(&Event::Output { job, stream, read_mono_ns, read_unix_ns, data: data.to_vec() });
    }

    fn exit(&mut self, job: JobId, code: Option<i32>, signal: Option<i32>, killed: bool) {
        self.push(&Event::Exited { job, code, signal, at_unix_ns: crate::jobs::job::unix_ns(), killed });
        let usage = shm_proto::msg::JobUsage { cpu_usec: 1500, procs_seen: 1, memory_peak: None };
        self.push(&Event::Emptied { job, at_unix_ns: crate::jobs::job::unix_ns(), usage });
        self.push(&Event::StreamsClosed { job });
    }

    fn handle(&mut self, cmd: Command) {
        match cmd {
            Command::Run(spec) => {
                let (verb, arg) = spec.cmd.split_once(' ').unwrap_or((&spec.cmd, ""));
                let (verb, arg) = (verb.to_owned(), arg.to_owned());
                if verb == "fail" {
                    return self.push(&Event::SpawnFailed { job: spec.job, error: "no such file or directory".into() });
                }
                self.push(&Event::Started {
                    job: spec.job,
                    pid: 10_000 + spec.job as u32,
                    at_unix_ns: crate::jobs::job::unix_ns(),
                    prestarted: false,
                    cgroup: format!("slot-{}", spec.job),
                });
                let n: u64 = arg.parse().unwrap_or(0);
                let job = spec.job;
                match verb.as_str() {
                    "echo" => self.out(job, Stream::Stdout, format!("{arg}\n").as_bytes()),
                    "err" => self.out(job, Stream::Stderr, format!("{arg}\n").as_bytes()),
                    "big" => self.big(job, n),
                    "lines" => (0..n).for_each(|i| self.out(job, Stream::Stdout, format!("line {i}\n").as_bytes())),
                    "garbage" => {
                        self.evts.try_push(&[0xff; 8]).unwrap();
                    }
                    "env" => {
                        let text: String = spec.env.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
                        let cwd = String::from_utf8_lossy(&spec.cwd).into_owned();
                        self.out(job, Stream::Stdout, format!("cwd={cwd}\n{text}").as_bytes());
                    }
                    "hang" => return self.hanging.push(job),
                    "sleep" => return self.timers.push((Instant::now() + Duration::from_millis(n), job)),
                    _ => {}
                }
                let code = match verb.as_str() {
                    "exit" => n as i32,
                    "err" => 1,
                    _ => 0,
                };
                self.exit(job, Some(code), None, false);
            }
            Command::Kill { job, .. } => {
                if let Some(i) = self.hanging.iter().position(|j| *j == job) {
                    self.hanging.remove(i);
                    self.exit(job, None, Some(9), true);
                }
            }
            Command::Shutdown => self.stop.store(true, Ordering::SeqCst),
            Command::Probe { job, probe } => {
                let running = self.hanging.contains(&job) || self.timers.iter().any(|(_, j)| *j == job);
                let liveness = running.then(|| shm_proto::msg::JobLiveness {
                    cpu_usec: 2000,
                    procs: 1,
                    pid: 10_000 + job as u32,
                    cmdline: "fake".into(),
                    state: "S".into(),
                    wchan: "hrtimer_nanosleep".into(),
                    activity: "sleeping on a timer".into(),
                });
                self.push(&Event::Status { job, probe, liveness });
            }
            Command::Forget { job } => self.push(&Event::Forgotten { job }),
            Command::Prestart { .. } | Command::Input { .. } | Command::Resize { .. } => {}
        }
    }

    fn big(&mut self, job: JobId, n: u64) {
        let mut sent = 0u64;
        let mut chunk = vec![0u8; MAX_OUTPUT_CHUNK];
        while sent < n {
            let len = (n - sent).min(MAX_OUTPUT_CHUNK as u64) as usize;
            for (i, b) in chunk[..len].iter_mut().enumerate() {
                *b = ((sent + i as u64) % 251) as u8;
            }
            let (read_mono_ns, read_unix_ns) = (shm_proto::sys::monotonic_ns(), shm_proto::sys::unix_ns());
            let data = chunk[..len].to_vec();
            self.push(&Event::Output { job, stream: Stream::Stdout, read_mono_ns, read_unix_ns, data });
            sent += len as u64;
        }
    }
}

/// The byte `big N` writes at offset `i`.
pub(crate) fn big_byte(i: u64) -> u8 {
    (i % 251) as u8
}

/// A kernel over a fake supervisor in a temporary state directory.
pub(crate) struct Harness {
    pub kernel: Arc<Kernel>,
    pub sup: Arc<FakeSupervisor>,
    pub client: Client,
    pub dir: tempfile::TempDir,
}

impl Harness {
    pub fn new() -> Harness {
        Harness::with_ring(RegionConfig::default())
    }

    pub fn with_ring(ring: RegionConfig) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let sup = FakeSupervisor::new(ring);
        let cfg = KernelConfig {
            state_dir: dir.path().join("state"),
            socket: "/tmp/heddle-test.sock".into(),
            cgroup_root: None,
        };
        let kernel = Kernel::new(cfg, sup.clone()).unwrap();
        Harness { kernel, sup, client: Client { uid: 1000, pid: None }, dir }
    }

    pub fn call_as(&self, client: &Client, method: &str, params: Value) -> Result<Value, RpcError> {
        self.kernel.call(client, method, params).map(|raw| serde_json::from_str(raw.get()).unwrap())
    }

    pub fn call(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        self.call_as(&self.client, method, params)
    }

    pub fn ok(&self, method: &str, params: Value) -> Value {
        self.call(method, params.clone()).unwrap_or_else(|e| panic!("{method} {params}: {e}"))
    }

    /// Open session `name`.
    pub fn open(&self, name: &str) -> Value {
        self.ok("session.open", serde_json::json!({ "name": name }))
    }

    /// `run` with a yield in ms.
    pub fn run(&self, session: &str, cmd: &str, yield_ms: u64) -> Value {
        self.ok("run", serde_json::json!({ "session": session, "cmd": cmd, "yield_ms": yield_ms }))
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.kernel.begin_shutdown();
        self.kernel.finish();
    }
}

/// The job ids in a result's `announcements`.
pub(crate) fn announced(v: &Value) -> Vec<u64> {
    v["announcements"].as_array().unwrap().iter().map(|a| a["job"].as_u64().unwrap()).collect()
}
