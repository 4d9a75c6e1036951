//! Shell state around a job: the wrapper bash runs, and the private state fd the worker reads.
//!
//! A job whose `RunSpec::state` is `Some(restore)` runs `bash --noprofile --norc -c WRAPPER bash CMD`
//! with a memfd at fd [`STATE_FD`] that holds the restore script ([`write_restore`]). The wrapper
//! ([`WRAPPER`]):
//!
//! 1. notes bash's default options (`$SHELLOPTS`, `$BASHOPTS`), takes the command from `$1` (never
//!    spliced into the wrapper's text), clears the positional parameters, reads the restore script from
//!    fd 4 (never from argv: `/proc/<pid>/cmdline` is world-readable, and the restore carries unexported
//!    variables, functions and aliases), `eval`s it (exported variables and most functions arrive in the environment
//!    instead: see `front::state_record`; the trace options `-x`/`-v` are only noted, in `$__heddle_t`);
//! 2. `eval`s the command with `4>&-`, after unsetting its own variables and switching on the noted trace
//!    options: for the command, fd 4 is closed (bash keeps its saved copy at fd ≥ 10 close-on-exec, so no
//!    program the command starts inherits it, and nothing the command prints reaches it);
//! 3. captures with builtins only (no fork, no loop; [`heddle_state_capture!`](shm_proto::heddle_state_capture),
//!    whose format [`shm_proto::capture`] owns):
//!    the enabled options at start and now (`$SHELLOPTS`), `declare -p`, `declare -f`, `declare -Fx`,
//!    `alias -p`, the directory stack from `DIRSTACK`, `$BASHOPTS` at start and now,
//!    `umask`, `pwd`, as NUL-framed sections ending with the `\0E\0` marker, to fd 4 (stderr silenced so
//!    `set -x` leaves no trace); when the array `__heddle_n` is set (the front read the command as
//!    unable to change anything but those variables, [`RunSpec::capture_only`](shm_proto::msg::RunSpec::capture_only),
//!    set by [`scope_line`]), it lists those variables with `declare -p NAME…` instead of `declare -p`,
//!    `declare -f`, `declare -Fx` and `alias -p` ([`heddle_scoped_capture!`](shm_proto::heddle_scoped_capture));
//! 4. exits with the command's status.
//!
//! All of it is one line of `-c` text, parsed before any of it runs (see [`WRAPPER`]).
//!
//! A command that never returns to the wrapper (`exec`, `exit`, a signal, `set -e` tripping) writes no
//! end marker: the worker reports [`Event::StateUnknown`] and the exit status stays the real one.
//!
//! The capture goes to a memfd, not a pipe: bash writes `declare -p`/`-f` one line per `write`, and a
//! pipe woke the worker for each (~120 µs per job on 2 cores); a memfd wakes nobody and never blocks
//! bash. The worker reads it once, at reap, before `Exited`, with `pread` from the restore's end (where
//! bash's read of the restore left the shared offset): every byte bash wrote precedes its exit. No process the command starts holds fd 4, so nothing writes to it later.
//! The persistent shell ([`crate::persistent`]) writes one capture per command and keeps a pipe.

use shm_proto::msg::{Event, JobId};
use std::io;
use std::os::fd::{AsFd, OwnedFd};

/// The fd number of the state pipe inside the job.
pub const STATE_FD: i32 = 4;

/// With `v` among the trace letters in `$__heddle_t`, echo the command's first line (`$__heddle_c`) to
/// stderr, as bash would have when reading it: the option comes on inside the command's `eval`, after that
/// line was read (shared by the fresh wrappers and the persistent shell's loop).
#[macro_export]
#[doc(hidden)]
macro_rules! heddle_echo_first_line {
    () => {
        " [[ $__heddle_t != *v* ]] || builtin printf '%s\\n' \"${__heddle_c%%$'\\n'*}\" >&2"
    };
}

/// The wrappers' common end, on the same line as their start: the command, with fd 4 closed for it, then
/// the capture and the exit with the command's status (shared by [`WRAPPER`] and [`SPARE_WRAPPER`]).
///
/// The trace options the record carries (`set -x`, `set -v`) are not switched on by the restore but by the
/// command's own `eval`, after the wrapper's `unset`, as the letters in `$__heddle_t` (the restore sets it,
/// see `front::state_record`): so a carried `set -x` traces the command and nothing of the wrapper, and a
/// carried `set -v` echoes the command's lines and no wrapper text (the command's first line is echoed by
/// `printf`, as bash would have echoed it when reading it; its later lines bash echoes itself).
/// `BASH_EXECUTION_STRING` is the command, as in `bash -c CMD` (and emptied before the capture, so a
/// long command does not travel in it).
macro_rules! wrapper_tail {
    ($stdin:literal) => {
        concat!(
            heddle_echo_first_line!(),
            ";",
            " BASH_EXECUTION_STRING=$__heddle_c;",
            heddle_err_trap!(),
            " builtin eval \"builtin unset __heddle_r __heddle_t __heddle_c __heddle_s;${__heddle_t:+builtin set -$__heddle_t;}$__heddle_c\" 4>&-",
            $stdin,
            ";",
            " { __heddle_rc=$? __heddle_p=$SHELLOPTS BASH_EXECUTION_STRING=; builtin set +euvx +o pipefail;",
            " builtin trap - DEBUG RETURN ERR; if [[ ${__heddle_n-} ]]; then ",
            shm_proto::heddle_scoped_capture!(),
            " else ",
            shm_proto::heddle_state_capture!(),
            " fi; } 2>/dev/null; builtin exit \"$__heddle_rc\"\n",
        )
    };
}

/// The runtime-warning record: an `ERR` trap, set just before the command's `eval`, appends the status
/// and `$BASH_COMMAND` of each failed command to the array `__heddle_e` (at most 16 failures; bash
/// restores `$?` after a trap, so the command's status flow is unchanged), which the capture lists in its
/// `R` section; the front keeps the failed simple commands of the top-level list that others followed
/// (`front::shell::failures`). Not inherited by functions or subshells (no `set -E`), so it fires for the
/// command's own list and the bodies of its compound commands; the wrapper's `eval` failing with the
/// command's last status is not recorded. Costs nothing until a command fails (a trap and an array append,
/// a few µs, then). The command sees the trap (`trap -p`) and may replace it: then nothing is recorded.
macro_rules! heddle_err_trap {
    () => {
        concat!(
            " __heddle_e=(); builtin trap '__heddle_x=$?; [[ ${#__heddle_e[@]} -lt 32 && $BASH_COMMAND != \"builtin eval \\\"builtin unset __heddle_r\"* ]]",
            " && __heddle_e+=(\"$__heddle_x\" \"$BASH_COMMAND\")' ERR;",
        )
    };
}

/// The wrappers' first read: the restore script, from the state memfd where the worker put it
/// ([`write_restore`]), up to its end (`read -N` reads a regular file in 4 KiB blocks; its status at end
/// of file is 1, which nothing checks). The memfd's offset is then the restore's length, where the spare's
/// `$PWD` or the capture goes (the worker reads from there: [`StateFile::memfd`]).
macro_rules! read_restore {
    () => {
        " builtin read -r -u 4 -N 2147483647 __heddle_r;"
    };
}

/// The wrapper script (`bash -c WRAPPER bash CMD`, the restore in the state memfd). See the module docs. It is one line, so bash
/// parses all of it before the restore or the command runs: nothing either defines (aliases, `set -v`,
/// an `eval` of text ending in a backslash, which leaves bash's parser unable to read a reserved word on
/// its next line) can change how the capture is read, and the command's `$LINENO` is that of `bash -c CMD`.
pub const WRAPPER: &str = concat!(
    "__heddle_o=$SHELLOPTS __heddle_b=$BASHOPTS __heddle_c=$1 __heddle_t=; builtin set --;",
    read_restore!(),
    " builtin eval \"$__heddle_r\";",
    wrapper_tail!(""),
);

/// The wrapper of a pre-started shell (`bash -c SPARE_WRAPPER bash`, the restore in the state memfd, stdin a pipe only the
/// worker writes; see [`crate::spare`]). It is [`WRAPPER`] with two differences: after the restore, it
/// writes its logical working directory and a NUL to the state memfd (the worker checks at the hand-over
/// that the path still names the directory the shell is in, and the capture follows the NUL; see
/// [`crate::spare`]), reads the command from stdin up to end of file (`read -N` reads the pipe in 4 KiB
/// blocks, not byte by byte; its status at end of file is 1, answered by an assignment, which no user
/// function can shadow as one could `:`), and resets `SECONDS` (the shell has been waiting; a cold
/// shell's clock starts with it); and the command's `eval` has stdin at `/dev/null`, as a cold job's is
/// (a redirection of the `eval`, not `exec </dev/null`: a function named `exec` or `command`, restored
/// with the state, would have run instead). It is one line too, so `$LINENO` and `$_` match a cold job's.
pub const SPARE_WRAPPER: &str = concat!(
    "__heddle_o=$SHELLOPTS __heddle_b=$BASHOPTS __heddle_t=; builtin set --;",
    read_restore!(),
    " builtin eval \"$__heddle_r\"; { builtin printf '%s\\0' \"$PWD\" >&4;",
    " builtin read -r -N 2147483647 __heddle_c || __heddle_c=${__heddle_c-};",
    " __heddle_s=${__heddle_c%%$'\\n'*} __heddle_c=${__heddle_c#*$'\\n'}; builtin eval \"$__heddle_s\";",
    " SECONDS=0; } 2>/dev/null;",
    wrapper_tail!(" 0</dev/null"),
);

/// The marker that ends a complete capture (the format's owner is [`shm_proto::capture`]).
pub use shm_proto::capture::END_MARKER;

/// The job's end of its state memfd ([`state_memfd`]) and the capture read from it. The fd shares its
/// open file description, and so its offset, with bash's fd 4.
pub(crate) struct StateFile {
    pub fd: OwnedFd,
    pub buf: Vec<u8>,
    /// More than `limit` bytes arrived: the capture is dropped.
    pub overflow: bool,
    /// Where the capture starts: after the restore script the worker put before it (and, for a
    /// pre-started shell, after the `$PWD` it wrote; 0 for the persistent shell, whose restore comes
    /// on its control socket).
    from: u64,
}

impl StateFile {
    /// A state memfd whose capture starts at offset `from` (the restore's length).
    pub(crate) fn memfd(fd: OwnedFd, from: u64) -> StateFile {
        StateFile { fd, buf: Vec::new(), overflow: false, from }
    }

    /// Everything the memfd holds (read with `pread`: bash's writes move the shared offset), or
    /// `overflow` when it holds more than `limit` bytes.
    pub(crate) fn read_capture(&mut self, limit: usize) {
        let end = nix::sys::stat::fstat(self.fd.as_fd()).map_or(0, |st| st.st_size.max(0) as u64);
        let size = end.saturating_sub(self.from) as usize;
        if size > limit {
            self.overflow = true;
            self.buf = Vec::new();
            return;
        }
        self.buf.resize(size, 0);
        let mut at = 0;
        while at < size {
            match nix::sys::uio::pread(
                self.fd.as_fd(),
                &mut self.buf[at..],
                i64::try_from(self.from + at as u64).unwrap_or(i64::MAX),
            ) {
                Ok(0) => break,
                Ok(n) => at += n,
                Err(nix::errno::Errno::EINTR) => {}
                Err(_) => break,
            }
        }
        self.buf.truncate(at);
    }

    /// Ready the channel for the persistent shell's next capture: forget what was read, empty the memfd and
    /// move the offset it shares with bash back to 0.
    pub(crate) fn rewind(&mut self) -> io::Result<()> {
        self.buf.clear();
        self.overflow = false;
        nix::unistd::ftruncate(self.fd.as_fd(), 0)?;
        nix::unistd::lseek(self.fd.as_fd(), 0, nix::unistd::Whence::SeekSet)?;
        Ok(())
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
pub(crate) fn nonblocking_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let (r, w) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
    let flags = OFlag::from_bits_truncate(fcntl(r.as_fd(), FcntlArg::F_GETFL)?);
    fcntl(r.as_fd(), FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    Ok((r, w))
}

/// A close-on-exec memfd for one job's restore and capture: bash's writes to it wake nobody (a pipe
/// wakes the worker once per line bash writes), and the worker reads it once, at reap.
pub fn state_memfd() -> io::Result<OwnedFd> {
    use nix::sys::memfd::{memfd_create, MFdFlags};
    Ok(memfd_create(c"heddle-state", MFdFlags::MFD_CLOEXEC)?)
}

/// Put the restore script at the start of a fresh state memfd, where the wrapper reads it, leaving the
/// offset (shared with bash) at 0; returns its length, where the wrapper's own writes begin.
///
/// The restore travels here and not in argv: `/proc/<pid>/cmdline` is readable by every user of the
/// host, and the restore holds unexported variables, functions and aliases (tokens, among others).
pub fn write_restore(fd: &OwnedFd, restore: &[u8]) -> io::Result<u64> {
    let mut at = 0;
    while at < restore.len() {
        match nix::sys::uio::pwrite(fd, &restore[at..], i64::try_from(at).unwrap_or(i64::MAX)) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => at += n,
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(at as u64)
}

/// Put the restore's environment entries on top of the job environment (they replace its entries of the
/// same name). The front built them from the session's own state record; a session's `env` can never
/// hold a `BASH_FUNC_` name (the front refuses it), so only this restore defines functions this way.
pub fn add_state_env(env: &mut Vec<(String, String)>, state_env: &[(String, String)]) {
    env.retain(|(k, _)| !state_env.iter().any(|(s, _)| s == k));
    env.extend(state_env.iter().cloned());
}

/// The statement that scopes a job's capture ([`RunSpec::capture_only`](shm_proto::msg::RunSpec::capture_only)):
/// `__heddle_n=(OLDPWD NAME…)`; empty (the full capture) for `None` or when a name is not a shell
/// identifier (the front never sends one; the worker does not splice anything else into bash's input).
pub fn scope_line(only: Option<&[String]>) -> String {
    let Some(names) = only else { return String::new() };
    let ident = |n: &String| {
        n.bytes().next().is_some_and(|b| b == b'_' || b.is_ascii_alphabetic())
            && n.bytes().all(|b| b == b'_' || b.is_ascii_alphanumeric())
    };
    if !names.iter().all(ident) {
        return String::new();
    }
    format!("__heddle_n=({})", shm_proto::msg::capture_names(names).join(" "))
}

/// A cold job's restore script with its capture scope in front ([`scope_line`]).
pub fn scoped_restore<'a>(restore: &'a [u8], only: Option<&[String]>) -> std::borrow::Cow<'a, [u8]> {
    match scope_line(only) {
        line if line.is_empty() => std::borrow::Cow::Borrowed(restore),
        line => std::borrow::Cow::Owned([line.as_bytes(), b"\n", restore].concat()),
    }
}

/// What the worker writes into a spare's command pipe: the capture scope's statement ([`scope_line`],
/// maybe empty), a newline, the command.
pub fn spare_input(cmd: &str, only: Option<&[String]>) -> Vec<u8> {
    [scope_line(only).as_bytes(), b"\n", cmd.as_bytes()].concat()
}

/// `argv` of a state-carrying job (its restore goes into the state memfd: [`write_restore`]).
pub fn argv(cmd: &str) -> [&[u8]; 7] {
    [b"bash", b"--noprofile", b"--norc", b"-c", WRAPPER.as_bytes(), b"bash", cmd.as_bytes()]
}

/// `argv` of a pre-started shell ([`SPARE_WRAPPER`]; its restore goes into the state memfd).
pub fn spare_argv() -> [&'static [u8]; 6] {
    [b"bash", b"--noprofile", b"--norc", b"-c", SPARE_WRAPPER.as_bytes(), b"bash"]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::ffi::OsStrExt;

    /// Run the wrapper the way the worker does and return (stdout+stderr, state bytes, exit status).
    fn run(restore: &str, cmd: &str) -> (String, Vec<u8>, launcher::Exit) {
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let stdio = launcher::Stdio::null_stdin(w.try_clone().unwrap(), w).unwrap();
        let args: Vec<&std::ffi::OsStr> = argv(cmd).iter().map(|a| std::ffi::OsStr::from_bytes(a)).collect();
        let env = launcher::job_env(&launcher::process_env(), &[]);
        let fd = state_memfd().unwrap();
        let from = write_restore(&fd, restore.as_bytes()).unwrap();
        let p = launcher::Prepared::new(std::path::Path::new(launcher::BASH), &args, &env, None, stdio)
            .unwrap()
            .with_extra_fd(fd.try_clone().unwrap(), STATE_FD)
            .unwrap();
        let child = launcher::spawn(&p).unwrap();
        drop(p);
        let mut out = String::new();
        std::fs::File::from(r).read_to_string(&mut out).unwrap();
        let status = child.wait().unwrap();
        let mut state = StateFile::memfd(fd, from);
        state.read_capture(1 << 20);
        (out, std::mem::take(&mut state.buf), status)
    }

    #[test]
    fn capture_follows_the_command_and_keeps_its_status() {
        let (out, state, st) = run("X=restored", "echo $X; FOO=1; return 3 2>/dev/null || (exit 3)");
        assert_eq!(out, "restored\n");
        assert_eq!(st, launcher::Exit::Code(3));
        assert!(state.starts_with(b"\0O\0") && state.ends_with(END_MARKER));
        let text = String::from_utf8_lossy(&state);
        assert!(text.contains("declare -- FOO=\"1\""), "{text}");
        assert!(!text.contains("declare -- __heddle_c="), "the command text is not left behind");
    }

    #[test]
    fn failed_commands_are_recorded_with_their_status() {
        let (out, state, st) =
            run("", "false; echo ran; (exit 7)\nif false; then :; fi; x=$(false); grep -q zz /dev/null");
        assert_eq!(out, "ran\n");
        assert_eq!(st, launcher::Exit::Code(1));
        let text = String::from_utf8_lossy(&state);
        let r = text.split("\0R\0").nth(1).unwrap_or_else(|| panic!("no R section: {text:?}"));
        let want = ["1", "false", "7", "( exit 7 )", "1", "x=$(false)", "1", "grep -q zz /dev/null", "", "E", ""];
        assert_eq!(r, want.join("\0"), "{text:?}");
        // None: an empty section; the command's own ERR trap replaces the record's.
        let (_, state, _) = run("", "true");
        assert!(String::from_utf8_lossy(&state).ends_with("\0R\0\0E\0"));
        let (out, state, _) = run("", "trap 'echo mine' ERR; false; true");
        assert_eq!(out, "mine\n");
        assert!(String::from_utf8_lossy(&state).ends_with("\0R\0\0E\0"));
    }

    #[test]
    fn a_scoped_capture_lists_only_the_named_variables() {
        let only = ["X".to_owned(), "GONE".to_owned()];
        let restore = scoped_restore(b"GONE=1 KEPT=1", Some(&only)).into_owned();
        let (out, state, st) = run(std::str::from_utf8(&restore).unwrap(), "X=2; Y=3; unset GONE; cd /tmp; echo ok");
        assert_eq!((out.as_str(), st), ("ok\n", launcher::Exit::Code(0)));
        let text = String::from_utf8_lossy(&state);
        assert!(text.contains("\0N\0OLDPWD\0X\0GONE\0\0W\0declare -") && text.contains(" OLDPWD=\"/"), "{text:?}");
        assert!(text.contains("declare -- X=\"2\"\n\0D\0"), "{text:?}");
        assert!(!text.contains("Y=") && !text.contains("KEPT") && !text.contains("\0V\0"), "{text:?}");
        assert!(text.ends_with("\0P\0/tmp\n\0R\0\0E\0"), "{text:?}");
        assert_eq!(scope_line(Some(&["a b".to_owned()])), "", "a name that is no identifier: the full capture");
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
        assert_eq!(st, launcher::Exit::Code(7));
    }

    #[test]
    fn a_memfd_capture_is_read_whole_at_reap_or_dropped_when_too_large() {
        let fd = state_memfd().unwrap();
        let big = [b"x".repeat(100_000).as_slice(), END_MARKER].concat();
        nix::unistd::write(&fd, &big).unwrap(); // the writer's offset is the worker's too: pread ignores it
        let mut p = StateFile::memfd(fd.try_clone().unwrap(), 0);
        p.read_capture(1 << 20);
        assert!(matches!(p.verdict(1, 1 << 20), Event::StateCaptured { data, .. } if data == big));
        let mut small = StateFile::memfd(fd, 0);
        small.read_capture(1000);
        assert!(matches!(small.verdict(1, 1000), Event::StateUnknown { .. }));
    }

    #[test]
    fn a_rewound_memfd_takes_the_next_capture_at_its_start() {
        // The persistent shell's case: bash's fd 4 and the worker's fd share one offset.
        let fd = state_memfd().unwrap();
        let bash = fd.try_clone().unwrap();
        let mut p = StateFile::memfd(fd, 0);
        let first = [b"first, the longer capture".as_slice(), END_MARKER].concat();
        nix::unistd::write(&bash, &first).unwrap();
        p.read_capture(1 << 20);
        assert!(matches!(p.verdict(1, 1 << 20), Event::StateCaptured { data, .. } if data == first));
        p.rewind().unwrap();
        let second = [b"second".as_slice(), END_MARKER].concat();
        nix::unistd::write(&bash, &second).unwrap();
        p.read_capture(1 << 20);
        assert!(matches!(p.verdict(2, 1 << 20), Event::StateCaptured { data, .. } if data == second));
    }

    #[test]
    fn xtrace_leaves_no_trace_of_the_capture() {
        let (out, state, _) = run("", "set -x; true");
        assert_eq!(out, "++ true\n", "one level deeper than bash -c: the command runs inside eval");
        assert!(String::from_utf8_lossy(&state).contains(":xtrace"));
    }

    #[test]
    fn carried_trace_options_trace_and_echo_the_command_only() {
        let (out, state, _) = run("__heddle_t=x", "echo hi\necho $-");
        assert_eq!(out, "++ echo hi\nhi\n++ echo hxBc\nhxBc\n", "nothing of the wrapper is traced");
        assert!(String::from_utf8_lossy(&state).contains(":xtrace"), "the capture still sees xtrace on");
        let (out, _, _) = run("__heddle_t=v", "echo one; echo two\nfor i in 3; do\necho $i\ndone");
        assert_eq!(out, "echo one; echo two\none\ntwo\nfor i in 3; do\necho $i\ndone\n3\n", "each line once");
        let (out, _, _) = run("__heddle_t=xv", "echo a");
        assert_eq!(out, "echo a\n++ echo a\na\n");
    }

    #[test]
    fn the_command_sees_the_line_numbers_and_execution_string_of_bash_c() {
        let cmd = "echo $LINENO\nf() { echo $LINENO; }; f\necho \"$BASH_EXECUTION_STRING\" | wc -l";
        let (out, state, _) = run("", cmd);
        assert_eq!(out, "1\n2\n3\n");
        assert!(state.ends_with(END_MARKER));
    }

    #[test]
    fn nothing_the_command_defines_changes_how_the_capture_is_read() {
        // An `eval` of text ending in a backslash leaves bash's parser unable to read a reserved word on
        // the next line; an alias is expanded in every line read after it is defined; `set -v` echoes them.
        for cmd in ["echo a \\", "shopt -s expand_aliases; alias builtin=false '{=false'", "set -v; true"] {
            let (out, state, st) = run("", cmd);
            assert!(state.ends_with(END_MARKER), "{cmd}: {out}");
            assert_eq!(st, launcher::Exit::Code(0), "{cmd}: {out}");
            assert!(!out.contains("heddle"), "{cmd}: {out}");
        }
    }
}
