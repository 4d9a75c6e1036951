//! The worker's event loop: one thread, one `mio` poll, no timers.
//!
//! Sources: the command doorbell (fd 4), the event-space doorbell (fd 7), and per job its stdout and
//! stderr read ends and its pidfd. Each pass: bump the heartbeat, pop commands, fire due kill deadlines,
//! move output (bounded work per pass, so commands are served even under an output flood), ring the
//! front's doorbell once if it is parked, then block — but only after advertising it:
//!
//! - command ring: `park_prepare()` right before `poll`; false means a command slipped in, so poll with
//!   a zero timeout. After waking: `park_done()`, drain fd 4.
//! - event ring full: `park_prepare(needed)` and wait for fd 7 in the same poll.
//! - the only timeout is the earliest kill-grace deadline; an idle worker sleeps in `epoll_wait`
//!   indefinitely and costs no CPU.
//!
//! Invariants: events of one job go out as `Started`, `Output`…, `Exited`, `Output`…, `StreamsClosed`;
//! output is never dropped or reordered within a stream (see [`crate::output`]).

use crate::cgroup::CgroupOps;
use crate::emit::{error_chain, warning, EmitError, EventOut};
use crate::job::{Job, Source, SOURCES};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use shm_proto::msg::{Command, Event, JobId, Stream};
use shm_proto::region::Region;
use shm_proto::ring::{Consumer, PopError, Producer};
use shm_proto::sync::Ordering;
use shm_proto::sys::EventFd;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::time::{Duration, Instant};

const CMD_TOKEN: Token = Token(0);
const SPACE_TOKEN: Token = Token(1);
/// Commands handled per pass before output gets its turn.
const COMMANDS_PER_PASS: usize = 64;
/// Output chunks moved per pass before commands and exits get their turn.
pub(crate) const CHUNKS_PER_PASS: usize = 16;

impl std::fmt::Debug for Channels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channels").finish_non_exhaustive()
    }
}

/// The worker's ends of a session's rings and doorbells.
pub struct Channels {
    pub cmd: Consumer,
    pub evt: Producer,
    /// fd 4: rung by the front after pushing commands.
    pub cmd_data: EventFd,
    /// fd 5: rung by the worker after freeing command space.
    pub cmd_space: EventFd,
    /// fd 6: rung by the worker after pushing events.
    pub evt_data: EventFd,
    /// fd 7: rung by the front after freeing event space.
    pub evt_space: EventFd,
    /// The region, for its header (`worker_pid`, `heartbeat`); `None` in tests over heap rings.
    pub region: Option<Region>,
}

/// What the worker needs besides its channels.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The worker's own environment; [`launcher::job_env`] filters it for every job.
    pub base_env: Vec<(String, String)>,
    /// The first event (`Event::Hello`).
    pub hello: Event,
    /// Sent right after it (`Event::BashFile`).
    pub bash_file: Option<Event>,
    /// Warnings to send right after `Hello` (e.g. the bash version probe failed).
    pub startup_warnings: Vec<String>,
    /// The session's sandbox (`None` in tests without one: jobs run unconfined).
    pub sandbox: Option<std::sync::Arc<crate::sandbox::SessionSandbox>>,
}

/// Why the worker stopped with an error (after telling the front, when it still could).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerError {
    #[error("the command ring is corrupt ({0}); the worker stops")]
    CommandRing(&'static str),
    #[error("cannot publish events")]
    Emit(#[from] EmitError),
    #[error("cannot set up the event loop")]
    Setup(#[source] io::Error),
    #[error("waiting for events failed")]
    Poll(#[source] io::Error),
}

/// Whether the loop goes on.
#[derive(PartialEq, Eq)]
pub(crate) enum Flow {
    Continue,
    Stop,
}

impl<C: CgroupOps> std::fmt::Debug for Worker<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker").finish_non_exhaustive()
    }
}

/// The worker's state: its channels, its jobs and what is waiting to be done.
pub struct Worker<C: CgroupOps> {
    pub(crate) poll: Poll,
    pub(crate) cmd: Consumer,
    cmd_scratch: Vec<u8>,
    pub(crate) out: EventOut,
    cmd_data: EventFd,
    cmd_space: EventFd,
    evt_data: EventFd,
    evt_space: EventFd,
    region: Option<Region>,
    pub(crate) cgroups: C,
    pub(crate) base_env: Vec<(String, String)>,
    pub(crate) sandbox: Option<std::sync::Arc<crate::sandbox::SessionSandbox>>,
    pub(crate) jobs: HashMap<JobId, Job>,
    pub(crate) serials: HashMap<usize, JobId>,
    pub(crate) next_serial: usize,
    /// Pipes that may have data (edge-triggered readiness not yet consumed), in arrival order.
    pub(crate) ready: VecDeque<(JobId, Stream)>,
    pub(crate) deadlines: BinaryHeap<Reverse<(Instant, JobId)>>,
    evt_parked: bool,
    /// The session's v1 memory/pids cgroups (hybrid hosts with limits).
    pub(crate) v1: crate::limits::V1Session,
    /// Its counter files, kept open.
    pub(crate) counters: crate::limits::Counters,
    /// The cgroup-events watch fd is in the poll.
    pub(crate) watch_registered: bool,
    pub(crate) persistent: crate::persistent::Persistent,
    /// The spawn path last reported (`Event::SpawnPath`).
    pub(crate) spawn_path: Option<String>,
    /// The pre-started shell (see [`crate::spare`]).
    pub(crate) spares: crate::spare::Spares,
    /// The effects ledger's last snapshot (see [`crate::effects`]).
    pub(crate) ledger: crate::effects::Ledger,
}

/// Run a session's worker until `Shutdown` (`Ok`) or a fatal error.
pub fn serve<C: CgroupOps>(ch: Channels, cgroups: C, settings: Settings) -> Result<(), WorkerError> {
    Worker::new(ch, cgroups, settings)?.run()
}

impl<C: CgroupOps> Worker<C> {
    /// Register the doorbells and publish `Hello` (and any startup warnings).
    pub fn new(ch: Channels, cgroups: C, settings: Settings) -> Result<Worker<C>, WorkerError> {
        let poll = Poll::new().map_err(WorkerError::Setup)?;
        for (fd, token) in [(ch.cmd_data.as_fd(), CMD_TOKEN), (ch.evt_space.as_fd(), SPACE_TOKEN)] {
            poll.registry()
                .register(&mut SourceFd(&fd.as_raw_fd()), token, Interest::READABLE)
                .map_err(WorkerError::Setup)?;
        }
        if let Some(r) = &ch.region {
            r.header().worker_pid.store(std::process::id(), Ordering::Relaxed);
        }
        let mut w = Worker {
            poll,
            cmd: ch.cmd,
            cmd_scratch: Vec::with_capacity(4096),
            out: EventOut::new(ch.evt),
            cmd_data: ch.cmd_data,
            cmd_space: ch.cmd_space,
            evt_data: ch.evt_data,
            evt_space: ch.evt_space,
            region: ch.region,
            cgroups,
            base_env: settings.base_env,
            sandbox: settings.sandbox.clone(),
            jobs: HashMap::new(),
            serials: HashMap::new(),
            next_serial: 0,
            ready: VecDeque::new(),
            deadlines: BinaryHeap::new(),
            evt_parked: false,
            v1: crate::limits::V1Session::default(),
            counters: Default::default(),
            watch_registered: false,
            persistent: Default::default(),
            spawn_path: None,
            spares: Default::default(),
            ledger: Default::default(),
        };
        if let Some(l) = settings.sandbox.as_ref().and_then(|s| s.listener.as_ref()) {
            w.poll
                .registry()
                .register(&mut SourceFd(&l.fd.as_raw_fd()), crate::network::NET_TOKEN, Interest::READABLE)
                .map_err(WorkerError::Setup)?;
        }
        w.v1 = crate::limits::V1Session::detect();
        w.counters = crate::limits::Counters::open(&w.v1);
        w.out.emit(&settings.hello)?;
        if let Some(b) = &settings.bash_file {
            w.out.emit(b)?;
        }
        if let Some(sb) = &settings.sandbox {
            w.out.emit(&Event::Sandbox(sb.info.clone()))?;
        }
        for msg in settings.startup_warnings {
            w.out.emit(&warning(None, msg))?;
        }
        w.flush_wake();
        Ok(w)
    }

    /// The loop. Returns `Ok` after `Shutdown`.
    pub fn run(&mut self) -> Result<(), WorkerError> {
        let mut events = Events::with_capacity(256);
        loop {
            if let Some(r) = &self.region {
                r.header().heartbeat.fetch_add(1, Ordering::Relaxed);
            }
            let (flow, more_cmds) = self.handle_commands()?;
            if flow == Flow::Stop {
                self.flush_wake();
                return Ok(());
            }
            self.fire_deadlines()?;
            let more_output = self.pump()?;
            self.flush_wake();
            let busy = more_cmds || more_output;
            let retry = if busy { None } else { self.refill_spare() };
            let timeout = [self.timeout(busy), retry, self.out.quiet_due_in()].into_iter().flatten().min();
            match self.poll.poll(&mut events, timeout) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(WorkerError::Poll(e)),
            }
            self.cmd.park_done();
            if std::mem::take(&mut self.evt_parked) {
                self.out.park_done();
            }
            for ev in events.iter() {
                self.dispatch(ev.token())?;
            }
        }
    }

    /// How long the next poll may block; parks on the rings when it may block at all.
    fn timeout(&mut self, busy: bool) -> Option<Duration> {
        if busy || !self.cmd.park_prepare() {
            return Some(Duration::ZERO);
        }
        if self.out.has_pending() || !self.ready.is_empty() {
            // Output (or a queued event) waits for ring space. Never decide "no space" from an earlier
            // look: `park_prepare` advertises the park, then re-checks (SeqCst), so space freed at any
            // point before it is seen here, and space freed after it rings fd 7.
            if !self.out.park_prepare() {
                return Some(Duration::ZERO);
            }
            self.evt_parked = true;
        }
        self.deadlines.peek().map(|Reverse((at, _))| at.saturating_duration_since(Instant::now()))
    }

    fn dispatch(&mut self, token: Token) -> Result<(), WorkerError> {
        match token {
            CMD_TOKEN => {
                let _ = self.cmd_data.drain();
            }
            SPACE_TOKEN => {
                let _ = self.evt_space.drain();
            }
            crate::job_settle::WATCH_TOKEN => self.cgroups_changed()?,
            crate::spare::SPARE_TOKEN => self.spare_died(),
            crate::network::NET_TOKEN => self.network_refused(),
            Token(t) => {
                let serial = (t - 2) / SOURCES;
                let Some(&job) = self.serials.get(&serial) else { return Ok(()) };
                match Source::from_index((t - 2) % SOURCES) {
                    Source::Stdout => self.mark_ready(job, Stream::Stdout),
                    Source::Stderr => self.mark_ready(job, Stream::Stderr),
                    Source::Pidfd => self.reap(job)?,
                    Source::Done => self.shell_status(job)?,
                    Source::Stdin => self.feed(job)?,
                }
            }
        }
        Ok(())
    }

    /// Pop and act on up to [`COMMANDS_PER_PASS`] commands; the bool says whether more may wait.
    fn handle_commands(&mut self) -> Result<(Flow, bool), WorkerError> {
        let mut n = 0;
        while n < COMMANDS_PER_PASS {
            let cmd = match self.cmd.pop_msg::<Command>(&mut self.cmd_scratch) {
                Ok(None) => break,
                Ok(Some(cmd)) => cmd,
                Err(PopError::Frame(e)) => {
                    n += 1;
                    let msg = format!("a command could not be decoded and was skipped: {}", error_chain(&e));
                    self.out.emit(&warning(None, msg))?;
                    continue;
                }
                Err(e) => {
                    let why = if let PopError::Corrupt(why) = e { why } else { "unknown ring error" };
                    return Err(self.corrupt_commands(why));
                }
            };
            n += 1;
            match cmd {
                Command::Run(spec) if spec.persistent => self.run_in_shell(spec)?,
                Command::Run(spec) => self.start_job(spec)?,
                Command::Kill { job, grace_ms } => self.kill_job(job, grace_ms)?,
                Command::Prestart { spec, cpu_wait_ms } => self.prestart(spec, cpu_wait_ms),
                Command::Shutdown => {
                    self.end_spares();
                    self.kill_all();
                    return Ok((Flow::Stop, false));
                }
                Command::Probe { job, probe } => self.probe(job, probe)?,
                Command::Forget { job } => self.forget(job)?,
                Command::Input { job, data, eof } => self.input(job, data, eof)?,
                Command::Resize { job, rows, cols } => self.resize(job, rows, cols)?,
            }
        }
        if n > 0 && self.cmd.producer_wake_needed() {
            let _ = self.cmd_space.notify();
        }
        Ok((Flow::Continue, n == COMMANDS_PER_PASS))
    }

    /// The command ring is unusable: tell the front (best effort), end every job, stop.
    fn corrupt_commands(&mut self, why: &'static str) -> WorkerError {
        let msg = format!("the command ring is corrupt ({why}); the worker stops and its jobs are killed");
        if self.out.emit(&warning(None, msg)).is_ok() {
            let _ = self.out.flush_pending();
        }
        self.end_spares();
        self.kill_all();
        self.flush_wake();
        WorkerError::CommandRing(why)
    }

    /// Ring the front's doorbell if it is parked and something was published since the last ask.
    pub(crate) fn flush_wake(&mut self) {
        if self.out.wake_needed() {
            let _ = self.evt_data.notify();
        }
    }

    /// The poll token of one source of the job with serial number `serial`.
    pub(crate) fn token(serial: usize, source: Source) -> Token {
        Token(2 + serial * SOURCES + source as usize)
    }
}

/// Emit helper: a job's own failure as a warning naming it.
pub(crate) fn job_warning(job: JobId, what: &str, err: &dyn std::error::Error) -> Event {
    warning(Some(job), format!("{what}: {}", error_chain(err)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::RecordingCgroups;
    use shm_proto::ring::heap_ring;

    fn worker(evt_capacity: usize) -> (Worker<RecordingCgroups>, Consumer) {
        let (_cmd_tx, cmd) = heap_ring(4096);
        let (evt, evt_rx) = heap_ring(evt_capacity);
        let bell = || EventFd::new().unwrap();
        let ch = Channels {
            cmd,
            evt,
            cmd_data: bell(),
            cmd_space: bell(),
            evt_data: bell(),
            evt_space: bell(),
            region: None,
        };
        let hello = Event::StreamsClosed { job: 0 };
        let settings =
            Settings { base_env: Vec::new(), hello, bash_file: None, startup_warnings: Vec::new(), sandbox: None };
        (Worker::new(ch, RecordingCgroups::default(), settings).unwrap(), evt_rx)
    }

    #[test]
    fn an_idle_worker_blocks_without_a_timeout() {
        let (mut w, _rx) = worker(1 << 16);
        assert_eq!(w.timeout(false), None);
    }

    #[test]
    fn queued_output_that_fits_never_blocks() {
        // Regression: the loop used to trust an earlier "no space" and block forever when the front freed
        // space between the pump and the poll (the front saw no parked producer, so rang nothing).
        let (mut w, _rx) = worker(1 << 16);
        w.ready.push_back((1, Stream::Stdout));
        assert!(w.out.output_ready());
        assert_eq!(w.timeout(false), Some(Duration::ZERO));
        assert!(!w.evt_parked);
    }

    #[test]
    fn queued_output_without_space_parks_and_is_woken_by_freed_space() {
        let (mut w, mut rx) = worker(1 << 16);
        while w.out.output_ready() {
            w.out.push_output(1, Stream::Stdout, crate::emit::ReadTime::now(), w.out.chunk()).unwrap();
        }
        w.ready.push_back((1, Stream::Stdout));
        assert_eq!(w.timeout(false), None, "blocks: only the front can free space");
        assert!(w.evt_parked);
        let mut buf = Vec::new();
        while rx.try_pop(&mut buf).unwrap() {}
        assert!(rx.producer_wake_needed(), "the front sees the parked worker and rings fd 7");
    }
}
