//! `Command::Run`: create the job's cgroup, its pipes, and launch `bash --noprofile --norc -c CMD` in it.
//!
//! Steps: `mkdir <session>/job-<N>` (0755) and open it; two close-on-exec pipes (read ends non-blocking,
//! write ends blocking for the job); the environment from [`launcher::job_env`]; [`launcher::spawn`] with
//! stdin `/dev/null` and `CLONE_INTO_CGROUP`; register both read ends and the pidfd; emit `Started`.
//! Any failure emits `SpawnFailed` with a sentence naming the failed step and removes the cgroup. Jobs of a
//! session run concurrently: nothing here waits for a job.

use crate::cgroup::CgroupOps;
use crate::emit::{error_chain, truncate};
use crate::event_loop::WorkerError;
use crate::job::{unix_ns, Job, Pipe, Source};
use crate::Worker;
use launcher::files::{FileError, FileSpec};
use launcher::{LaunchError, PrepareError, Prepared, Stdio};
use mio::unix::SourceFd;
use mio::Interest;
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use shm_proto::msg::{Event, FileOutcome, JobId, RunSpec, StdinMode};
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Why a job could not be started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    #[error("job {0} already exists in this session")]
    Duplicate(JobId),
    #[error("cannot create the job's cgroup {path}")]
    Cgroup {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("cannot create the job's output pipes or state memfd")]
    Pipes(#[source] io::Error),
    #[error("cannot open /dev/null for the job's stdin")]
    Stdin(#[source] io::Error),
    #[error("cannot open a pseudo-terminal for the job (/dev/ptmx)")]
    Tty(#[source] io::Error),
    #[error(transparent)]
    Prepare(#[from] PrepareError),
    #[error(transparent)]
    Launch(#[from] LaunchError),
    #[error("cannot watch the job's pipes and pidfd")]
    Register(#[source] io::Error),
    #[error("{0}")]
    Refused(String),
}

/// End a started job that never ran as one (or a spare): `cgroup.kill` of its own cgroup, SIGKILL through
/// the pidfd of the worker's own still-unreaped child (no pid can be reused while it is unreaped), reap.
pub(crate) fn kill_unreaped<C: CgroupOps>(cgroups: &mut C, job: JobId, child: &launcher::Child) {
    let _ = cgroups.kill(job);
    let _ = crate::sys::pidfd_send_signal(child.pidfd.as_fd(), libc::SIGKILL);
    let _ = child.wait();
}

/// `TERM` of a terminal job (instead of the profile's `dumb`).
pub const TERM: &str = "xterm-256color";

/// A job's three standard fds and the worker's ends of them.
struct JobStdio {
    stdio: Stdio,
    /// What the worker reads as the job's stdout: a pipe, or the PTY master (one merged stream).
    out_r: OwnedFd,
    /// stderr's read end; for a terminal job a pipe nobody writes (at end of file at once).
    err_r: OwnedFd,
    input: Option<crate::input::Input>,
}

fn set_flags(fd: &OwnedFd, cloexec: bool, nonblock: bool) -> io::Result<()> {
    use nix::fcntl::FdFlag;
    if cloexec {
        fcntl(fd.as_fd(), FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))?;
    }
    if nonblock {
        let flags = OFlag::from_bits_truncate(fcntl(fd.as_fd(), FcntlArg::F_GETFL)?);
        fcntl(fd.as_fd(), FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    }
    Ok(())
}

/// stdin `/dev/null` and two output pipes; a stdin pipe the worker feeds; or a new pseudo-terminal of
/// the asked size on all three (the master, non-blocking, read as stdout and written as input).
fn job_stdio(mode: StdinMode) -> Result<JobStdio, StartError> {
    match mode {
        StdinMode::Null | StdinMode::Pipe => {
            let (out_r, out_w) = output_pipe().map_err(StartError::Pipes)?;
            let (err_r, err_w) = output_pipe().map_err(StartError::Pipes)?;
            if mode == StdinMode::Null {
                let stdio = Stdio::null_stdin(out_w, err_w).map_err(StartError::Stdin)?;
                return Ok(JobStdio { stdio, out_r, err_r, input: None });
            }
            let (in_r, in_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| StartError::Pipes(e.into()))?;
            set_flags(&in_w, false, true).map_err(StartError::Pipes)?;
            let stdio = Stdio { stdin: in_r, stdout: out_w, stderr: err_w };
            Ok(JobStdio { stdio, out_r, err_r, input: Some(crate::input::Input::new(in_w, false)) })
        }
        StdinMode::Tty { rows, cols } => {
            let ws = nix::pty::Winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
            let pty = nix::pty::openpty(Some(&ws), None).map_err(|e| StartError::Tty(e.into()))?;
            let (master, slave) = (pty.master, pty.slave);
            set_flags(&master, true, true).map_err(StartError::Tty)?;
            set_flags(&slave, true, false).map_err(StartError::Tty)?;
            let dup = |fd: &OwnedFd| fd.try_clone().map_err(StartError::Tty);
            let stdio = Stdio { stdin: dup(&slave)?, stdout: dup(&slave)?, stderr: slave };
            let (err_r, err_w) = output_pipe().map_err(StartError::Pipes)?;
            drop(err_w);
            let out_r = dup(&master)?;
            Ok(JobStdio { stdio, out_r, err_r, input: Some(crate::input::Input::new(master, true)) })
        }
    }
}

/// A close-on-exec pipe whose read end is non-blocking: `(read, write)`.
pub(crate) fn output_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
    let flags = OFlag::from_bits_truncate(fcntl(r.as_fd(), FcntlArg::F_GETFL)?);
    fcntl(r.as_fd(), FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    Ok((r, w))
}

impl<C: CgroupOps> Worker<C> {
    /// Start a job and report `Started` or `SpawnFailed`.
    pub(crate) fn start_job(&mut self, spec: RunSpec) -> Result<(), WorkerError> {
        let job = spec.job;
        if self.jobs.contains_key(&job) {
            let error = error_chain(&StartError::Duplicate(job));
            return Ok(self.out.emit(&Event::SpawnFailed { job, error })?);
        }
        let effects = self.effects_before(&spec);
        if !spec.files.is_empty() {
            let files = self.write_files(&spec);
            self.out.emit(&Event::FilesWritten { job, files })?;
        }
        if let Some(why) = self.sandbox.as_ref().and_then(|s| s.refusal().map(str::to_owned)) {
            return Ok(self.out.emit(&Event::SpawnFailed { job, error: truncate(why) })?);
        }
        if let Some(j) = self.take_spare(&spec) {
            let pid = j.pid;
            self.jobs.insert(job, Job { effects, ..j });
            return self.spare_started(job, pid);
        }
        self.retry_stale();
        let cgroup = match self.cgroups.create(job) {
            Ok(fd) => fd,
            Err(source) => {
                let err = StartError::Cgroup { path: self.cgroups.job_path(job), source };
                return Ok(self.out.emit(&Event::SpawnFailed { job, error: truncate(error_chain(&err)) })?);
            }
        };
        let placed = cgroup.is_some();
        match self.launch(&spec, cgroup) {
            Ok(j) => {
                let pid = j.pid;
                if let Some(child) = j.child.as_ref().filter(|_| placed) {
                    self.report_spawn_path(child.describe_spawn(true))?;
                }
                self.jobs.insert(job, Job { effects, ..j });
                self.rearm(job);
                self.out.emit_quiet(&Event::Started {
                    job,
                    pid,
                    at_unix_ns: unix_ns(),
                    prestarted: false,
                    cgroup: self.cgroups.cgroup_name(job),
                })?;
            }
            Err(err) => {
                let _ = self.cgroups.remove(job);
                self.out.emit(&Event::SpawnFailed { job, error: truncate(error_chain(&err)) })?;
            }
        }
        Ok(())
    }

    /// Tell the front how jobs are spawned, the first time and whenever it changes (`describe` shows it).
    pub(crate) fn report_spawn_path(&mut self, path: String) -> Result<(), WorkerError> {
        if self.spawn_path.as_deref() != Some(path.as_str()) {
            self.spawn_path = Some(path.clone());
            self.out.emit(&Event::SpawnPath { path })?;
        }
        Ok(())
    }

    /// Pipes (or a terminal), environment, spawn, registration.
    fn launch(&mut self, spec: &RunSpec, cgroup: Option<OwnedFd>) -> Result<Job, StartError> {
        let JobStdio { stdio, out_r, err_r, input } = job_stdio(spec.stdin)?;
        let (prepared, state_r) = match &spec.state {
            None => {
                let env = self.spec_env(spec);
                let cwd = Path::new(OsStr::from_bytes(&spec.cwd));
                (self.confine(Prepared::bash(&spec.cmd, &env, Some(cwd), stdio)?, cgroup)?, None)
            }
            Some(restore) => {
                let restore = crate::state::scoped_restore(restore, spec.capture_only.as_deref());
                let (p, fd) = self.prepare_stateful(spec, &crate::state::argv(&spec.cmd), &restore, stdio, cgroup)?;
                (p, Some(fd))
            }
        };
        let prepared = match spec.stdin {
            StdinMode::Tty { .. } => prepared.with_controlling_tty(),
            _ => prepared,
        };
        let child = launcher::spawn(&prepared)?;
        drop(prepared); // the parent's copies of the write ends: EOF must depend on the job alone
        let mut job = self.adopt(spec.job, child, out_r, err_r, state_r)?;
        job.input = input;
        Ok(job)
    }

    /// The environment of a fresh bash for `spec`: the profile's rules (or the built-in allowlist), the
    /// session's entries, then the restore's entries for a state-carrying job.
    pub(crate) fn spec_env(&self, spec: &RunSpec) -> Vec<(String, String)> {
        let mut env = match self.sandbox.as_ref().and_then(|s| s.sandbox.as_ref()) {
            Some(sb) => launcher::policy_env(&sb.policy.policy.env, &self.base_env, &spec.env),
            None => launcher::job_env(&self.base_env, &spec.env),
        };
        if spec.state.is_some() {
            crate::state::add_state_env(&mut env, &spec.state_env);
        }
        if matches!(spec.stdin, StdinMode::Tty { .. }) {
            env.retain(|(k, _)| k != "TERM");
            env.push(("TERM".to_owned(), TERM.to_owned()));
        }
        env
    }

    /// A state-carrying bash for `spec` running `argv` (the wrapper), with a fresh state memfd at
    /// [`crate::state::STATE_FD`] holding `restore`, confined and placed; returns the worker's copy of
    /// the memfd and where the capture will start in it (the restore's length).
    pub(crate) fn prepare_stateful(
        &self,
        spec: &RunSpec,
        argv: &[&[u8]],
        restore: &[u8],
        stdio: Stdio,
        cgroup: Option<OwnedFd>,
    ) -> Result<(Prepared, (OwnedFd, u64)), StartError> {
        let env = self.spec_env(spec);
        let cwd = Path::new(OsStr::from_bytes(&spec.cwd));
        let fd = crate::state::state_memfd().map_err(StartError::Pipes)?;
        let from = crate::state::write_restore(&fd, restore).map_err(StartError::Pipes)?;
        let args: Vec<&OsStr> = argv.iter().map(|a| OsStr::from_bytes(a)).collect();
        let p = Prepared::new(Path::new(launcher::BASH), &args, &env, Some(cwd), stdio)?;
        let p = p.with_extra_fd(fd.try_clone().map_err(StartError::Pipes)?, crate::state::STATE_FD)?;
        Ok((self.confine(p, cgroup)?, (fd, from)))
    }

    /// The session's Landlock ruleset, the jobs' own seccomp filter and the job's cgroup.
    fn confine(&self, mut prepared: Prepared, cgroup: Option<OwnedFd>) -> Result<Prepared, StartError> {
        if let Some(rs) = self.sandbox.as_ref().and_then(|s| s.job_ruleset()) {
            prepared = prepared.with_landlock(rs)?;
        }
        if let Some(prog) = self.sandbox.as_ref().and_then(|s| s.job_seccomp()) {
            prepared = prepared.with_seccomp(prog);
        }
        if let Some(dir) = cgroup {
            prepared = prepared.with_cgroup(dir);
        }
        Ok(prepared)
    }

    /// Watch a started job's pipes and pidfd and make its record (on failure the job is killed).
    pub(crate) fn adopt(
        &mut self,
        job: JobId,
        child: launcher::Child,
        out_r: OwnedFd,
        err_r: OwnedFd,
        state_r: Option<(OwnedFd, u64)>,
    ) -> Result<Job, StartError> {
        let serial = self.next_serial;
        self.next_serial += 1;
        let registry = self.poll.registry();
        let sources = [(&out_r, Source::Stdout), (&err_r, Source::Stderr), (&child.pidfd, Source::Pidfd)];
        for (i, (fd, source)) in sources.iter().enumerate() {
            let token = Self::token(serial, *source);
            if let Err(e) = registry.register(&mut SourceFd(&fd.as_raw_fd()), token, Interest::READABLE) {
                for (fd, _) in &sources[..i] {
                    let _ = registry.deregister(&mut SourceFd(&fd.as_raw_fd()));
                }
                kill_unreaped(&mut self.cgroups, job, &child);
                return Err(StartError::Register(e));
            }
        }
        self.serials.insert(serial, job);
        let (oom_base, pids_base) = (self.counters.oom_kills(), self.counters.pids_failures());
        Ok(Job {
            serial,
            pid: child.pid,
            child: Some(child),
            pipes: [Some(Pipe::new(out_r)), Some(Pipe::new(err_r))],
            exit: None,
            exited_sent: false,
            closed_sent: false,
            kill_requested: false,
            state: state_r.map(|(fd, from)| crate::state::StateFile::memfd(fd, from)),
            emptied_sent: false,
            kept: false,
            procs_seen: 1,
            oom_base,
            pids_base,
            shell: None,
            in_shell: false,
            started: std::time::Instant::now(),
            input: None,
            net_refused: None,
            effects: None,
        })
    }
}
impl<C: CgroupOps> Worker<C> {
    /// The files channel: write the job's files under its Landlock ruleset (see [`launcher::files`]).
    fn write_files(&self, spec: &RunSpec) -> Vec<FileOutcome> {
        let files: Vec<FileSpec> = spec
            .files
            .iter()
            .map(|f| FileSpec {
                path: PathBuf::from(OsStr::from_bytes(&f.path)),
                content: f.content.clone(),
                mode: f.mode,
            })
            .collect();
        let refusal = self.sandbox.as_ref().and_then(|s| s.refusal().map(str::to_owned));
        let results = match &refusal {
            Some(_) => Vec::new(),
            None => launcher::files::write_files(self.sandbox.as_ref().and_then(|s| s.job_ruleset()), &files),
        };
        files
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let error = match (&refusal, results.get(i)) {
                    (Some(why), _) => Some(why.clone()),
                    (None, Some(Ok(()))) => None,
                    (None, Some(Err(e))) => Some(self.file_error(&f.path, e)),
                    (None, None) => Some("not attempted".into()),
                };
                FileOutcome { path: f.path.as_os_str().as_bytes().to_vec(), error }
            })
            .collect()
    }

    fn file_error(&self, path: &Path, e: &FileError) -> String {
        let denied = matches!(e, FileError::Io(io) if matches!(io.raw_os_error(), Some(libc::EACCES | libc::EPERM | libc::EROFS)));
        match (&self.sandbox, denied) {
            (Some(sb), true) if sb.sandbox.as_ref().is_some_and(|s| s.policy.root_for(path).is_none()) => {
                format!("{}: {}", error_chain(e), sb.explain_write(path))
            }
            _ => error_chain(e),
        }
    }
}
