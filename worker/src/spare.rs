//! Pre-started shells: one spare bash per session, started before its command arrives (docs/architecture.md).
//!
//! The front sends [`Command::Prestart`] with the `RunSpec` the session's next job would get if it ran
//! now: its id, cwd, environment and state restore, no command. When the loop next has nothing to do
//! (and no job started in the last [`YOUNG_JOB`] is still running, so a spare never competes with a job
//! that just began), the worker starts that bash exactly as [`Worker::start_job`] would start the job —
//! cgroup `job-<id>`, output pipes, environment, Landlock ruleset, state memfd at fd 4 holding the
//! restore script — except that it
//! runs [`crate::state::SPARE_WRAPPER`] with its stdin a pipe only the worker writes: it restores the
//! state, then blocks reading its command. No event names it; the front does not know it exists.
//!
//! A `Run` for that id whose inputs are the spare's (the same cwd, environment, restore script and
//! restore environment; no files are involved, they are written before either path) gets the spare: the
//! worker writes the command (after the line that scopes its capture, [`crate::state::spare_input`]) into
//! the pipe in one `write`, closes it, and from then on the shell is the
//! job (`Started { prestarted: true }`). Fresh-process semantics hold: the shell served no other command,
//! and what it was started from is byte for byte what a cold start would use now. Anything else — another
//! id, other inputs, a command of more than [`MAX_HANDOVER`] bytes or holding a NUL, a spare that died —
//! discards the spare (`cgroup.kill`, plus SIGKILL through the pidfd of the worker's own unreaped child,
//! then reap and `rmdir`) and the job starts cold. So does a file system that moved under the spare (its
//! logical `$PWD` no longer names its working directory, or the session's directory is gone: see
//! [`where_cold_would_be`]). A `Prestart` that differs from the spare replaces it.
//!
//! Once a job of the session has started, a spare also waits for a free CPU: it starts when fewer tasks
//! than CPUs are runnable on the host besides the worker (`/proc/loadavg`, looked at after 2 ms, then at
//! doubling delays up to 512 ms: about 17 looks in 5 s), or when the `Prestart`'s `cpu_wait_ms` is used
//! up (the front's `--spare-cpu-wait-ms`, default 5 s; 0: no wait). In a burst of short sessions on a
//! busy host, the spare made after a session's job was three quarters of the CPU the job cost, and the
//! session closed without using it (docs/performance.md, "Spares wait for a free CPU"). A call that comes
//! while its spare waits starts cold: ~2 ms more on a host that is busy anyway, for a spare that saves
//! about as much. The session's first spare does not wait: its call is on its way. On a quiet host an
//! agent's spare is ready as before.
//!
//! Each job's start, on the spare or cold, moves the wanted spare on to the next job id ([`Worker::rearm`]),
//! so the front sends a `Prestart` only when the session opens, its worker changed, or the state record
//! moved. A spare that dies or cannot start is retried after the next job starts, never in a loop.
//!
//! Costs: a waiting spare is one sleeping bash (no CPU; a few MiB, counted in the session's memory and
//! pids limits); a state change throws one spare away. `heddle-front --spares false` (or
//! `HEDDLE_SPARES=0`) sends no `Prestart`, and every job starts cold.

use crate::cgroup::CgroupOps;
use crate::emit::error_chain;
use crate::event_loop::WorkerError;
use crate::job_run::{output_pipe, StartError};
use crate::Worker;
use launcher::{Child, Stdio};
use mio::unix::SourceFd;
use mio::{Interest, Token};
use shm_proto::msg::{Event, JobId, RunSpec, StdinMode};
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// The poll token of the spare's pidfd (a spare that dies while waiting is discarded).
pub(crate) const SPARE_TOKEN: Token = Token(usize::MAX - 1);
/// A job younger than this keeps the spare from starting (the spare would compete with it for CPU).
pub(crate) const YOUNG_JOB: Duration = Duration::from_millis(20);
/// The largest command handed to a spare: one `write` into an empty pipe (64 KiB) always completes.
pub(crate) const MAX_HANDOVER: usize = 60 * 1024;

/// What a spare was started from; a `Run` gets the spare only if its inputs are exactly these.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SpareKey {
    job: JobId,
    cwd: Vec<u8>,
    env: Vec<(String, String)>,
    restore: Vec<u8>,
    state_env: Vec<(String, String)>,
}

impl SpareKey {
    /// The key of a `Prestart` or `Run` spec; `None` when such a job never runs on a spare.
    pub(crate) fn of(spec: &RunSpec) -> Option<SpareKey> {
        let restore = spec.state.as_ref()?;
        if spec.persistent || spec.stdin != StdinMode::Null {
            return None;
        }
        Some(SpareKey {
            job: spec.job,
            cwd: spec.cwd.clone(),
            env: spec.env.clone(),
            restore: restore.clone(),
            state_env: spec.state_env.clone(),
        })
    }
}

/// A started spare, waiting for its command.
pub(crate) struct Spare {
    key: SpareKey,
    child: Child,
    out_r: OwnedFd,
    err_r: OwnedFd,
    state: OwnedFd,
    /// Where the restore script ends in `state` (the spare's `$PWD` follows it).
    restore_len: u64,
    /// The write end of the spare's stdin, where its command goes.
    cmd_w: OwnedFd,
    /// Started in its own cgroup (not so with the fakes of unit tests).
    placed: bool,
}

/// Whether the spare's working directory is still the one a cold start would reach now, and if so where
/// its capture will start in its state memfd. The file system may have moved since the spare started: the
/// session's directory removed (a cold start fails to enter it), or the restored directory removed,
/// recreated or renamed (a cold start's `cd` goes elsewhere or fails). The spare wrote its logical `$PWD`
/// and a NUL to its memfd after the restore script it read from there; it holds only if that path and
/// `/proc/<pid>/cwd` name the same inode and the session's directory is still a directory. The capture
/// then follows that NUL (the shell is blocked in `read`, not writing, and the offset it shares with the
/// worker is there), as a cold job's follows its restore script: the memfd is not emptied (a truncate freed
/// its pages on the job's start path, ~10 µs).
fn where_cold_would_be(spare: &Spare, session_cwd: &[u8]) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    let id = |m: &std::fs::Metadata| (m.dev(), m.ino());
    let mut buf = [0u8; libc::PATH_MAX as usize + 1];
    let n = nix::sys::uio::pread(&spare.state, &mut buf, i64::try_from(spare.restore_len).ok()?).ok()?;
    let end = buf[..n].iter().position(|&b| b == 0)?;
    let logical = &buf[..end];
    let there = std::fs::metadata(std::ffi::OsStr::from_bytes(logical)).ok()?;
    // The session's directory, statted once when the spare is in it (the usual case).
    let session_dir = match logical == session_cwd {
        true => there.is_dir(),
        false => std::fs::metadata(std::ffi::OsStr::from_bytes(session_cwd)).is_ok_and(|m| m.is_dir()),
    };
    let here = std::fs::metadata(format!("/proc/{}/cwd", spare.child.pid)).ok()?;
    (session_dir && id(&here) == id(&there)).then_some(spare.restore_len + end as u64 + 1)
}

/// The worker's spare: what it should be, and what runs.
#[derive(Default)]
pub(crate) struct Spares {
    /// The spec of the next spare to start (from the last `Prestart`).
    want: Option<RunSpec>,
    spare: Option<Spare>,
    /// Jobs whose spare cgroup could not be removed yet (retried before starting spares or jobs).
    stale: Vec<JobId>,
    /// The last spare died or could not start: wait for the next job before trying again (at most one
    /// attempt per call, so a spare the OOM killer keeps ending never loops).
    paused: bool,
    /// A job of this session has started: from now on a spare waits for a free CPU (see [`Spares::wait_for_cpu`]).
    ran_job: bool,
    /// How long a spare may wait for a free CPU (from the last `Prestart`).
    cpu_wait: Duration,
    /// The wanted spare is waiting for a free CPU.
    waiting: Option<Wait>,
    host: Host,
}

/// A spare's wait for a free CPU: since when, when to look at the host next, and the delay after that.
#[derive(Clone, Copy)]
struct Wait {
    since: Instant,
    look_at: Instant,
    delay: Duration,
}

/// The first look again at a busy host; each look doubles it, up to [`LAST_LOOK`].
const FIRST_LOOK: Duration = Duration::from_millis(2);
const LAST_LOOK: Duration = Duration::from_millis(512);

/// What the host is doing: `/proc/loadavg`, kept open (a `pread` per look), and the CPUs this worker may
/// run on. Where `/proc/loadavg` cannot be read, the host is never busy and spares never wait.
struct Host {
    loadavg: Option<std::fs::File>,
    cpus: usize,
}

impl Default for Host {
    fn default() -> Host {
        Host {
            loadavg: std::fs::File::open("/proc/loadavg").ok(),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }
}

impl Host {
    /// Whether every CPU has a task to run besides the caller.
    fn busy(&self) -> bool {
        let Some(f) = &self.loadavg else { return false };
        let mut buf = [0u8; 128];
        let Ok(n) = std::os::unix::fs::FileExt::read_at(f, &mut buf, 0) else { return false };
        runnable_others(&buf[..n]).is_some_and(|others| others >= self.cpus)
    }
}

/// The host's runnable tasks other than the reader, from the text of `/proc/loadavg`
/// (`0.19 1.17 1.50 3/412 12345`: its fourth field counts them at the moment of the read, reader included).
fn runnable_others(text: &[u8]) -> Option<usize> {
    let field = text.split(|&b| b == b' ').nth(3)?;
    let running = field.split(|&b| b == b'/').next()?;
    let running: usize = std::str::from_utf8(running).ok()?.parse().ok()?;
    Some(running.saturating_sub(1))
}

impl Spares {
    /// `Some(delay)` while the wanted spare waits for a free CPU (look again after `delay`); `None` once it
    /// may start: the session's first spare, a free CPU, or the wait used up.
    /// The loop calls it whenever it has nothing else to do; it reads the host only when a look is due.
    fn wait_for_cpu(&mut self, now: Instant) -> Option<Duration> {
        if !self.ran_job || self.cpu_wait.is_zero() {
            return None;
        }
        let w = *self.waiting.get_or_insert(Wait { since: now, look_at: now, delay: FIRST_LOOK });
        let left = self.cpu_wait.checked_sub(now.duration_since(w.since)).filter(|d| !d.is_zero());
        let Some(left) = left else {
            self.waiting = None;
            return None;
        };
        if now < w.look_at {
            return Some((w.look_at - now).min(left));
        }
        if !self.host.busy() {
            self.waiting = None;
            return None;
        }
        self.waiting = Some(Wait { look_at: now + w.delay, delay: (w.delay * 2).min(LAST_LOOK), ..w });
        Some(w.delay.min(left))
    }
}

impl<C: CgroupOps> Worker<C> {
    /// `Prestart(spec)`: keep the spare if it matches, else drop it; start the wanted one later.
    pub(crate) fn prestart(&mut self, spec: RunSpec, cpu_wait_ms: u32) {
        self.spares.cpu_wait = Duration::from_millis(cpu_wait_ms.into());
        let key = SpareKey::of(&spec);
        if self.spares.spare.as_ref().is_some_and(|s| Some(&s.key) != key.as_ref()) {
            self.discard_spare();
        }
        self.spares.want = key.map(|_| spec);
    }

    /// On `Run(spec)`: hand the command to the spare if it was started for exactly this job; returns the
    /// job's record then. A spare for this job or an earlier one that does not match is discarded.
    pub(crate) fn take_spare(&mut self, spec: &RunSpec) -> Option<crate::job::Job> {
        let spare = self.spares.spare.as_ref()?;
        if spare.key.job > spec.job {
            return None; // a late `Run` of an earlier job: the spare waits for its own
        }
        let input = crate::state::spare_input(&spec.cmd, spec.capture_only.as_deref());
        let usable =
            SpareKey::of(spec).as_ref() == Some(&spare.key) && input.len() <= MAX_HANDOVER && !spec.cmd.contains('\0');
        let Some(capture_from) = usable.then(|| where_cold_would_be(spare, &spec.cwd)).flatten() else {
            self.discard_spare();
            return None;
        };
        let spare = self.spares.spare.take()?;
        let _ = self.poll.registry().deregister(&mut SourceFd(&spare.child.pidfd.as_raw_fd()));
        let handed = nix::unistd::write(&spare.cmd_w, &input).ok() == Some(input.len());
        drop(spare.cmd_w); // end of file: the spare's `read` returns with the whole command
        if !handed {
            Self::end_spare(&mut self.cgroups, &mut self.spares.stale, spare.key.job, &spare.child);
            return None;
        }
        match self.adopt(spec.job, spare.child, spare.out_r, spare.err_r, Some((spare.state, capture_from))) {
            Ok(job) => Some(job),
            Err(_) => {
                let _ = self.cgroups.remove(spec.job); // adopt killed and reaped it
                None
            }
        }
    }

    /// Start the wanted spare if none runs, nothing else waits and no young job is running. Returns how
    /// long to wait before trying again (a young job is running), if at all.
    pub(crate) fn refill_spare(&mut self) -> Option<Duration> {
        self.retry_stale();
        let want = self.spares.want.as_ref()?;
        if self.spares.paused || self.spares.spare.is_some() || self.jobs.contains_key(&want.job) {
            return None;
        }
        let now = Instant::now();
        let youngest = self.jobs.values().filter(|j| j.exit.is_none()).map(|j| j.started).max();
        if let Some(at) = youngest.filter(|at| now.duration_since(*at) < YOUNG_JOB) {
            return Some(YOUNG_JOB - now.duration_since(at));
        }
        if let Some(again) = self.spares.wait_for_cpu(now) {
            return Some(again);
        }
        let spec = self.spares.want.take()?;
        if self.sandbox.as_ref().is_some_and(|s| s.refusal().is_some()) {
            return None;
        }
        match self.start_spare(&spec) {
            Ok(spare) => {
                if spare.placed {
                    let _ = self.report_spawn_path(spare.child.describe_spawn(true));
                }
                self.spares.spare = Some(spare);
            }
            Err(e) => {
                // Not fatal: the next job starts cold. Once per job, so a failing spare never loops.
                let why = format!("a pre-started shell could not be started ({}); jobs start cold", error_chain(&e));
                let _ = self.out.emit(&crate::emit::warning(None, why));
                self.spares.paused = true;
            }
        }
        self.spares.want = Some(spec); // the next job's start re-arms from it (see `rearm`)
        None
    }

    /// After job `job` started (on the spare or cold): the next spare is the same shell for the next job
    /// id (a `Prestart` from the front replaces it when the state changed).
    pub(crate) fn rearm(&mut self, job: JobId) {
        // `<=`: a hint made before the front gave out `job` can arrive after `job`'s `Run`.
        if let Some(w) = self.spares.want.as_mut().filter(|w| w.job <= job) {
            w.job = job + 1;
        }
        self.spares.paused = false;
        self.spares.waiting = None;
        self.spares.ran_job = true;
    }

    fn start_spare(&mut self, spec: &RunSpec) -> Result<Spare, StartError> {
        let key = SpareKey::of(spec).ok_or_else(|| StartError::Refused("not a job for a spare".into()))?;
        let cgroup = self
            .cgroups
            .create(spec.job)
            .map_err(|source| StartError::Cgroup { path: self.cgroups.job_path(spec.job), source })?;
        let started = self.launch_spare(spec, &key, cgroup);
        if started.is_err() {
            let _ = self.cgroups.remove(spec.job);
        }
        started
    }

    fn launch_spare(&mut self, spec: &RunSpec, key: &SpareKey, cgroup: Option<OwnedFd>) -> Result<Spare, StartError> {
        let placed = cgroup.is_some();
        let (out_r, out_w) = output_pipe().map_err(StartError::Pipes)?;
        let (err_r, err_w) = output_pipe().map_err(StartError::Pipes)?;
        let (cmd_r, cmd_w) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| StartError::Pipes(e.into()))?;
        let stdio = Stdio { stdin: cmd_r, stdout: out_w, stderr: err_w };
        let (prepared, (state, restore_len)) =
            self.prepare_stateful(spec, &crate::state::spare_argv(), &key.restore, stdio, cgroup)?;
        let child = launcher::spawn(&prepared)?;
        drop(prepared);
        let pidfd = child.pidfd.as_raw_fd();
        if let Err(e) = self.poll.registry().register(&mut SourceFd(&pidfd), SPARE_TOKEN, Interest::READABLE) {
            Self::end_spare(&mut self.cgroups, &mut self.spares.stale, spec.job, &child);
            return Err(StartError::Register(e));
        }
        Ok(Spare { key: key.clone(), child, out_r, err_r, state, restore_len, cmd_w, placed })
    }

    /// The spare's pidfd turned readable: it died waiting (killed from outside the session, the OOM
    /// killer). Drop it; another is started after the next job starts.
    pub(crate) fn spare_died(&mut self) {
        self.discard_spare();
        self.spares.paused = true;
    }

    /// End the spare, if any, unseen.
    pub(crate) fn discard_spare(&mut self) {
        let Some(spare) = self.spares.spare.take() else { return };
        let _ = self.poll.registry().deregister(&mut SourceFd(&spare.child.pidfd.as_raw_fd()));
        drop(spare.cmd_w);
        Self::end_spare(&mut self.cgroups, &mut self.spares.stale, spare.key.job, &spare.child);
    }

    /// Kill a spare that never became a job (its cgroup, and its main process through the pidfd of the
    /// worker's own unreaped child: no pid can be reused while it is unreaped), reap it, remove its cgroup.
    fn end_spare(cgroups: &mut C, stale: &mut Vec<JobId>, job: JobId, child: &Child) {
        crate::job_run::kill_unreaped(cgroups, job, child);
        if cgroups.remove(job).is_err() {
            stale.push(job);
        }
    }

    /// Remove spare cgroups whose `rmdir` failed earlier (before a job of the same id is created).
    pub(crate) fn retry_stale(&mut self) {
        let cgroups = &mut self.cgroups;
        self.spares.stale.retain(|job| cgroups.remove(*job).is_err_and(|e| e.raw_os_error() == Some(libc::EBUSY)));
    }

    /// At shutdown: the spare goes with the jobs.
    pub(crate) fn end_spares(&mut self) {
        self.discard_spare();
        self.spares.want = None;
    }

    /// The `Started` of a job handed to a spare.
    pub(crate) fn spare_started(&mut self, job: JobId, pid: u32) -> Result<(), WorkerError> {
        self.rearm(job);
        Ok(self.out.emit_quiet(&Event::Started {
            job,
            pid,
            at_unix_ns: crate::job::unix_ns(),
            prestarted: true,
            cgroup: self.cgroups.cgroup_name(job),
        })?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spares that have run a job, waiting up to 1 s, on a host whose `/proc/loadavg` is `file`.
    fn waiting_spares(file: &std::path::Path) -> Spares {
        Spares {
            ran_job: true,
            cpu_wait: Duration::from_secs(1),
            host: Host { loadavg: Some(std::fs::File::open(file).unwrap()), cpus: 2 },
            ..Default::default()
        }
    }

    #[test]
    fn a_spare_waits_while_every_cpu_is_busy_looks_only_when_due_and_not_past_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("loadavg");
        let busy = |b: bool| std::fs::write(&file, if b { "3.0 1.0 1.0 3/200 9\n" } else { "0.1 0.1 0.1 2/200 9\n" });
        busy(true).unwrap();
        let mut s = waiting_spares(&file);
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        assert_eq!(s.wait_for_cpu(t0), Some(ms(2)), "busy: look again after 2 ms");
        busy(false).unwrap();
        assert_eq!(s.wait_for_cpu(t0 + ms(1)), Some(ms(1)), "no look before it is due");
        assert_eq!(s.wait_for_cpu(t0 + ms(2)), None, "a CPU is free: the spare starts");
        // Busy for good: the delays double, and the wait ends at its bound.
        busy(true).unwrap();
        let mut s = waiting_spares(&file);
        let mut at = t0;
        let mut delays = Vec::new();
        while let Some(d) = s.wait_for_cpu(at) {
            delays.push(d.as_millis());
            at += d;
        }
        assert_eq!(delays[..5], [2, 4, 8, 16, 32]);
        assert!(delays.iter().all(|&d| d <= 512), "{delays:?}");
        assert_eq!(at - t0, Duration::from_secs(1), "{delays:?}");
        // The session's first spare, or no bound, never waits.
        let mut s = waiting_spares(&file);
        s.ran_job = false;
        assert_eq!(s.wait_for_cpu(t0), None);
        let mut s = waiting_spares(&file);
        s.cpu_wait = Duration::ZERO;
        assert_eq!(s.wait_for_cpu(t0), None);
    }

    #[test]
    fn the_runnable_count_is_the_fourth_field_without_the_reader() {
        assert_eq!(super::runnable_others(b"0.19 1.17 1.50 3/412 12345\n"), Some(2));
        assert_eq!(super::runnable_others(b"0.00 0.00 0.00 1/80 7\n"), Some(0));
        assert_eq!(super::runnable_others(b"0.00 0.00 0.00 0/80 7\n"), Some(0));
        for garbage in [&b""[..], b"0.19 1.17", b"a b c x/y z", b"0.1 0.2 0.3 -1/5 9", b"1 2 3 \xff/4"] {
            assert_eq!(super::runnable_others(garbage), None, "{garbage:?}");
        }
    }
}
