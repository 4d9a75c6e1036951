//! The `heddle-front` binary, started the way the supervisor starts it (fd 3: SOCK_SEQPACKET control
//! socket, fd 4: listening Unix socket), with this test playing the supervisor and a minimal worker
//! that echoes each command back as its output. Needs no root.

use nix::fcntl::{fcntl, FcntlArg};
use nix::sys::signal::{kill, Signal};
use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
use nix::unistd::Pid;
use serde_json::{json, Value};
use shm_proto::control::{self, FromSupervisor, ToSupervisor};
use shm_proto::msg::{Command, Event, Stream};
use shm_proto::region::{Region, RegionConfig};
use shm_proto::sys::EventFd;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command as Process};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Spawning with inheritable fds must not overlap another spawn in this test binary.
static SPAWN: Mutex<()> = Mutex::new(());

struct Front {
    child: Child,
    control: OwnedFd,
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

/// Start the front with fds 3 and 4 set up, via bash redirections (no `unsafe` pre-exec hook).
fn start_front() -> Front {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("heddle.sock");
    let (ours, theirs) = socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC).unwrap();
    let listener = UnixListener::bind(&socket).unwrap();
    let _g = SPAWN.lock().unwrap();
    // Inheritable copies numbered 10 and up, so the redirections below never clobber 3 or 4.
    let a = fcntl(&theirs, FcntlArg::F_DUPFD(10)).unwrap();
    let b = fcntl(&listener, FcntlArg::F_DUPFD(10)).unwrap();
    let script =
        format!(r#"exec "$0" --control-fd 3 --listen-fd 4 --state-dir "$1" --socket "$2" 3<&{a} 4<&{b} {a}<&- {b}<&-"#);
    let child = Process::new("/bin/bash")
        .arg("-c")
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_heddle-front"))
        .arg(dir.path().join("state"))
        .arg(&socket)
        .spawn()
        .unwrap();
    nix::unistd::close(a).unwrap();
    nix::unistd::close(b).unwrap();
    Front { child, control: ours, socket, _dir: dir }
}

/// Wait for the child's exit status, at most `timeout`.
fn exit_code(child: &mut Child, timeout: Duration) -> Option<i32> {
    let until = Instant::now() + timeout;
    while Instant::now() < until {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = kill(Pid::from_raw(i32::try_from(child.id()).expect("a pid fits in i32")), Signal::SIGKILL);
    None
}

struct Client {
    r: BufReader<UnixStream>,
    w: UnixStream,
    id: u64,
}

impl Client {
    fn connect(path: &Path) -> Client {
        let until = Instant::now() + Duration::from_secs(10);
        let w = loop {
            match UnixStream::connect(path) {
                Ok(s) => break s,
                Err(e) if Instant::now() < until => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("connect: {e}"),
            }
        };
        w.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        Client { r: BufReader::new(w.try_clone().unwrap()), w, id: 0 }
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        self.id += 1;
        let req = json!({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params});
        self.w.write_all(format!("{req}\n").as_bytes()).unwrap();
        let mut line = String::new();
        self.r.read_line(&mut line).unwrap();
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["id"], self.id);
        v
    }
}

/// The supervisor's side: answers Describe, opens sessions with an echoing worker, closes them.
fn supervise(sock: OwnedFd) -> std::thread::JoinHandle<OwnedFd> {
    std::thread::spawn(move || {
        let mut workers: Vec<Arc<AtomicBool>> = Vec::new();
        while let Ok((msg, _)) = control::recv::<ToSupervisor>(sock.as_fd()) {
            match msg {
                ToSupervisor::Describe { req } => {
                    let info = FromSupervisor::Info {
                        req,
                        supervisor_pid: 1,
                        cgroup_root: "/t".into(),
                        cgroup_mode: "v2".into(),
                    };
                    control::send(sock.as_fd(), &info, &[]).unwrap();
                }
                ToSupervisor::OpenSession { req, session, client_uid, .. } => {
                    let (region, memfd) = Region::create(RegionConfig::default()).unwrap();
                    let efds: Vec<EventFd> = (0..4).map(|_| EventFd::new().unwrap()).collect();
                    let stop = Arc::new(AtomicBool::new(false));
                    workers.push(stop.clone());
                    let dup = |e: &EventFd| EventFd::from_owned(e.as_fd().try_clone_to_owned().unwrap());
                    let (cd, es) = (dup(&efds[0]), dup(&efds[2]));
                    std::thread::spawn(move || echo_worker(region, cd, es, stop, client_uid));
                    let mut fds = vec![memfd.as_fd()];
                    fds.extend(efds.iter().map(|e| e.as_fd()));
                    let opened = FromSupervisor::SessionOpened {
                        req,
                        session,
                        worker_pid: 9,
                        worker_uid: client_uid,
                        cgroup: "/t/s".into(),
                        tmp: "/t/tmp".into(),
                    };
                    control::send(sock.as_fd(), &opened, &fds).unwrap();
                }
                ToSupervisor::CloseSession { req, session } => {
                    workers.iter().for_each(|w| w.store(true, Ordering::SeqCst));
                    let closed = FromSupervisor::SessionClosed {
                        req,
                        session,
                        killed: Default::default(),
                        verified_empty: true,
                    };
                    control::send(sock.as_fd(), &closed, &[]).unwrap();
                }
                other => panic!("this fake supervisor does not expect {other:?}"),
            }
            if workers.len() > 100 {
                break;
            }
        }
        sock
    })
}

/// A worker that says hello and answers every `Run` with its command as stdout, exit 0.
fn echo_worker(region: Region, cmd_data: EventFd, evt_data: EventFd, stop: Arc<AtomicBool>, uid: u32) {
    let (mut cmds, mut evts) = (region.cmd_consumer(), region.evt_producer());
    let mut buf = Vec::new();
    let mut push = |ev: Event| {
        evts.push_msg(&ev, &mut Vec::new()).unwrap();
        if evts.wake_needed() {
            evt_data.notify().unwrap();
        }
    };
    push(Event::Hello { pid: 9, uid, bash: "/bin/bash".into(), bash_version: "5.2".into(), cgroup: "/t/s".into() });
    push(Event::BashFile { id: String::new(), probed: true });
    while !stop.load(Ordering::SeqCst) {
        match cmds.pop_msg::<Command>(&mut buf).unwrap() {
            Some(Command::Run(spec)) => {
                push(Event::Started {
                    job: spec.job,
                    pid: 100,
                    at_unix_ns: 1,
                    prestarted: false,
                    cgroup: "slot-1".into(),
                });
                push(Event::Output {
                    job: spec.job,
                    stream: Stream::Stdout,
                    read_mono_ns: 1,
                    read_unix_ns: 1,
                    data: spec.cmd.into_bytes(),
                });
                push(Event::Exited { job: spec.job, code: Some(0), signal: None, at_unix_ns: 2, killed: false });
                push(Event::Emptied { job: spec.job, at_unix_ns: 3, usage: Default::default() });
                push(Event::StreamsClosed { job: spec.job });
            }
            Some(_) => {}
            None => {
                if cmds.park_prepare() {
                    cmd_data.wait(50).unwrap();
                }
                cmds.park_done();
                cmd_data.drain().unwrap();
            }
        }
    }
}

#[test]
fn the_binary_serves_clients_and_exits_0_on_shutdown() {
    let mut front = start_front();
    let sup = supervise(front.control.try_clone().unwrap());
    let mut c = Client::connect(&front.socket);
    let d = c.call("describe", json!({}));
    assert_eq!(d["result"]["supervisor"]["cgroup_root"], "/t", "{d}");
    assert_eq!(d["result"]["front"]["pid"], front.child.id(), "exec'd in place of bash");
    let open = c.call("session.open", json!({"name": "demo"}));
    assert_eq!(open["result"]["shell"]["path"], "/bin/bash", "{open}");
    let run = c.call("run", json!({"session": "demo", "cmd": "hello from the ring"}));
    assert_eq!(run["result"]["view"], "hello from the ring\n", "the view ends every line with a newline: {run}");
    let out = c.call("output", json!({"session": "demo", "job": 1, "unredacted": true}));
    assert_eq!(out["result"]["data"], "hello from the ring");
    let log = front._dir.path().join("state/sessions/demo/jobs/1.log");
    assert_eq!(std::fs::read(log).unwrap().len(), 16 + "hello from the ring".len());
    let (busy, idle) = (cpu_ticks(front.child.id()), {
        std::thread::sleep(Duration::from_millis(1000));
        cpu_ticks(front.child.id())
    });
    assert!(idle - busy <= 2, "an idle front with a live session burnt {} ticks in 1 s", idle - busy);
    let closed = c.call("session.close", json!({"session": "demo"}));
    assert_eq!(closed["result"]["verified_empty"], true, "{closed}");
    control::send(front.control.as_fd(), &FromSupervisor::Shutdown, &[]).unwrap();
    assert_eq!(exit_code(&mut front.child, Duration::from_secs(10)), Some(0));
    drop(front.control);
    drop(sup);
}

/// utime + stime of a process, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after_comm = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after_comm.split(' ').collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

#[test]
fn sigterm_exits_0() {
    let mut front = start_front();
    let mut c = Client::connect(&front.socket);
    assert_eq!(c.call("jobs", json!({"session": "none"}))["error"]["code"], -32001, "the front is up");
    kill(Pid::from_raw(i32::try_from(front.child.id()).expect("a pid fits in i32")), Signal::SIGTERM).unwrap();
    assert_eq!(exit_code(&mut front.child, Duration::from_secs(10)), Some(0));
}

#[test]
fn a_vanished_supervisor_exits_non_zero() {
    let mut front = start_front();
    let _c = Client::connect(&front.socket);
    drop(front.control);
    assert_eq!(exit_code(&mut front.child, Duration::from_secs(10)), Some(1));
}
