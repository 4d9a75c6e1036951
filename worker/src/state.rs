//! Shell state around a job: the wrapper bash runs, and the private state pipe the worker reads.
//!
//! A job whose `RunSpec::state` is `Some(restore)` runs
//! `bash --noprofile --norc -c WRAPPER bash RESTORE CMD` with the write end of a pipe at fd
//! [`STATE_FD`]. The wrapper ([`WRAPPER`]):
//!
//! 1. notes bash's default options (`$SHELLOPTS`, `$BASHOPTS`), takes the restore script and the
//!    command from `$1`/`$2` (never spliced into the wrapper's text), clears the positional parameters,
//!    `eval`s the restore script (exported variables and most functions arrive in the environment
//!    instead: see `front::state_record`);
//! 2. `eval`s the command with `4>&-`: for the command, fd 4 is closed (bash keeps its saved copy at
//!    fd ≥ 10 close-on-exec, so no program the command starts inherits it, and nothing the command
//!    prints reaches it);
//! 3. captures with builtins only (no fork): the enabled options at start and now (`$SHELLOPTS`),
//!    `declare -p`, `declare -f`, the aliases and the directory stack from `BASH_ALIASES`/`DIRSTACK`,
//!    `$BASHOPTS` at start and now, `umask`, `pwd`, as NUL-framed sections
//!    ending with the `\0E\0` marker, to fd 4 (stderr silenced so `set -x` leaves no trace);
//! 4. exits with the command's status.
//!
//! A command that never returns to the wrapper (`exec`, `exit`, a signal, `set -e` tripping) writes no
//! end marker: the worker reports [`Event::StateUnknown`] and the exit status stays the real one.
//!
//! The worker reads the pipe while the job runs (a large capture must not block bash), and decides at
//! reap time, before `Exited`: every byte bash wrote precedes its exit, so what is in the pipe then is all
//! of it. Later writers (a background subshell keeps a copy of the saved fd) are ignored: the read end is
//! closed at reap.

use shm_proto::msg::{Event, JobId};
use std::io;
use std::os::fd::{AsFd, OwnedFd};

/// The fd number of the state pipe inside the job.
pub const STATE_FD: i32 = 4;

/// The wrapper script (`bash -c WRAPPER bash RESTORE CMD`). See the module docs.
pub const WRAPPER: &str = concat!(
    "__heddle_o=$SHELLOPTS __heddle_b=$BASHOPTS __heddle_r=$1 __heddle_c=$2; builtin set --;",
    " builtin eval \"$__heddle_r\"; builtin unset __heddle_r\n",
    "builtin eval 'builtin unset __heddle_c;'\"$__heddle_c\" 4>&-\n",
    "{ __heddle_rc=$?; { builtin printf '\\0O\\0%s\\0%s\\0V\\0' \"$__heddle_o\" \"$SHELLOPTS\";",
    " builtin set +euvx +o pipefail; builtin trap - DEBUG RETURN ERR; builtin declare -p;",
    " builtin printf '\\0F\\0'; builtin declare -f; builtin printf '\\0A\\0';",
    " for __heddle_n in \"${!BASH_ALIASES[@]}\"; do builtin printf '%s\\0%s\\0' \"$__heddle_n\" \"${BASH_ALIASES[$__heddle_n]}\"; done;",
    " builtin printf '\\0D\\0'; for __heddle_n in \"${DIRSTACK[@]:1}\"; do builtin printf '%s\\0' \"$__heddle_n\"; done;",
    " builtin printf '\\0S\\0%s\\0%s\\0U\\0' \"$__heddle_b\" \"$BASHOPTS\"; builtin umask;",
    " builtin printf '\\0P\\0'; builtin pwd; builtin printf '\\0E\\0'; } >&4; } 2>/dev/null\n",
    "builtin exit \"$__heddle_rc\"\n",
);

/// The marker that ends a complete capture.
pub const END_MARKER: &[u8] = b"\0E\0";

/// The job's end of its state pipe and what was read so far.
pub(crate) struct StatePipe {
    pub fd: OwnedFd,
    pub buf: Vec<u8>,
    /// More than `limit` bytes arrived: the capture is dropped.
    pub overflow: bool,
}

impl StatePipe {
    pub(crate) fn new(fd: OwnedFd) -> StatePipe {
        StatePipe { fd, buf: Vec::new(), overflow: false }
    }

    /// Read what is available (non-blocking) into the buffer, up to `limit` bytes in all.
    pub(crate) fn read_available(&mut self, limit: usize) {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            match nix::unistd::read(self.fd.as_fd(), &mut chunk) {
                Ok(0) => return,
                Ok(n) if self.overflow => {
                    let _ = n;
                }
                Ok(n) => {
                    if self.buf.len() + n > limit {
                        self.overflow = true;
                        self.buf = Vec::new();
                    } else {
                        self.buf.extend_from_slice(&chunk[..n]);
                    }
                }
                Err(nix::errno::Errno::EINTR) => {}
                Err(_) => return, // EAGAIN: nothing more for now
            }
        }
    }

    /// The event for this job once its bash has exited.
    pub(crate) fn verdict(&mut self, job: JobId, limit: usize) -> Event {
        if self.overflow {
            let reason = format!("the captured state is larger than the {limit} bytes a session carries");
            return Event::StateUnknown { job, reason };
        }
        if self.buf.is_empty() {
            let reason = "the command did not return to the shell (exec, exit, a signal, or set -e)".to_owned();
            return Event::StateUnknown { job, reason };
        }
        if !self.buf.ends_with(END_MARKER) {
            let reason = "the state capture was cut short (the shell ended or its fd closed while writing)".to_owned();
            return Event::StateUnknown { job, reason };
        }
        Event::StateCaptured { job, data: std::mem::take(&mut self.buf) }
    }
}

/// A close-on-exec pipe whose read end is non-blocking: `(read, write)`.
pub(crate) fn state_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let (r, w) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
    let flags = OFlag::from_bits_truncate(fcntl(r.as_fd(), FcntlArg::F_GETFL)?);
    fcntl(r.as_fd(), FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    Ok((r, w))
}

/// Put the restore's environment entries on top of the job environment (they replace its entries of the
/// same name). The front built them from the session's own state record; a session's `env` can never
/// hold a `BASH_FUNC_` name (the front refuses it), so only this restore defines functions this way.
pub fn add_state_env(env: &mut Vec<(String, String)>, state_env: &[(String, String)]) {
    env.retain(|(k, _)| !state_env.iter().any(|(s, _)| s == k));
    env.extend(state_env.iter().cloned());
}

/// `argv` of a state-carrying job.
pub fn argv<'a>(restore: &'a [u8], cmd: &'a str) -> [&'a [u8]; 8] {
    [b"bash", b"--noprofile", b"--norc", b"-c", WRAPPER.as_bytes(), b"bash", restore, cmd.as_bytes()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::ffi::OsStrExt;

    /// Run the wrapper the way the worker does and return (stdout+stderr, state bytes, exit status).
    fn run(restore: &str, cmd: &str) -> (String, Vec<u8>, launcher::ExitStatus) {
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let (sr, sw) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let stdio = launcher::Stdio::null_stdin(w.try_clone().unwrap(), w).unwrap();
        let args: Vec<&std::ffi::OsStr> =
            argv(restore.as_bytes(), cmd).iter().map(|a| std::ffi::OsStr::from_bytes(a)).collect();
        let env = launcher::job_env(&launcher::process_env(), &[]);
        let p = launcher::Prepared::new(std::path::Path::new(launcher::BASH), &args, &env, None, stdio)
            .unwrap()
            .with_extra_fd(sw, STATE_FD)
            .unwrap();
        let child = launcher::spawn(&p).unwrap();
        drop(p);
        let mut out = String::new();
        std::fs::File::from(r).read_to_string(&mut out).unwrap();
        let mut state = Vec::new();
        std::fs::File::from(sr).read_to_end(&mut state).unwrap();
        (out, state, child.wait().unwrap())
    }

    #[test]
    fn capture_follows_the_command_and_keeps_its_status() {
        let (out, state, st) = run("X=restored", "echo $X; FOO=1; return 3 2>/dev/null || (exit 3)");
        assert_eq!(out, "restored\n");
        assert_eq!(st, launcher::ExitStatus::Exited(3));
        assert!(state.starts_with(b"\0O\0") && state.ends_with(END_MARKER));
        let text = String::from_utf8_lossy(&state);
        assert!(text.contains("declare -- FOO=\"1\""), "{text}");
        assert!(!text.contains("declare -- __heddle_c="), "the command text is not left behind");
    }

    #[test]
    fn the_command_cannot_see_the_state_fd() {
        let (out, state, _) = run("", "ls /proc/self/fd | tr '\\n' ' '; echo x >&4");
        assert!(out.starts_with("0 1 2 3 "), "{out}");
        assert!(!out.starts_with("0 1 2 3 4"), "{out}");
        assert!(out.contains("Bad file descriptor"), "{out}");
        assert!(state.ends_with(END_MARKER));
    }

    #[test]
    fn exec_exit_and_errexit_leave_no_end_marker() {
        for cmd in ["exec true", "exit 7", "set -e; false", "kill -9 $$"] {
            let (_, state, _) = run("", cmd);
            assert!(!state.ends_with(END_MARKER), "{cmd}");
        }
        let (_, _, st) = run("", "exit 7");
        assert_eq!(st, launcher::ExitStatus::Exited(7));
    }

    #[test]
    fn xtrace_leaves_no_trace_of_the_capture() {
        let (out, state, _) = run("", "set -x; true");
        assert_eq!(out, "++ true\n", "one level deeper than bash -c: the command runs inside eval");
        assert!(String::from_utf8_lossy(&state).contains(":xtrace"));
    }
}
