//! The named persistent session: one long-lived `bash --noprofile --norc` whose commands run one at a time.
//!
//! The shell runs [`LOOP`] in its own cgroup (`<session>/shell`, [`SHELL_CGROUP`]). Its fds:
//! - fd 0: the worker's control socket (a `SOCK_STREAM` socketpair), a doorbell: the worker writes one
//!   newline when a command waits in the state memfd. After a command, bash writes its exit status as
//!   one line back on the same socket: that line is the command's boundary. Output is never scanned
//!   for markers.
//! - fd 1/2: one stdout and one stderr pipe for the shell's whole life, shared by its commands.
//! - fd 4: the state memfd ([`crate::state::STATE_FD`]). The worker writes each command at its start as
//!   three NUL-terminated blocks: the restore script (empty while the shell lives), the command text,
//!   and the capture's scope (`__heddle_n=(NAME…)`, see `crate::state::scope_line`, or empty for the
//!   full capture: the worker passes on the scope the front read from the command only while
//!   [`Persistent::scoped_ok`]). Bash values cannot hold NUL, so the framing cannot be forged. The loop
//!   reads them with one `mapfile` (a few `read`s of the whole memfd, where `read -d ''` from a socket
//!   takes a system call per byte). After each command the loop writes, right behind the blocks, the
//!   same capture as the fresh-process wrapper, so the front's record follows the shell. The worker's
//!   fd and bash's fd 4 share one open file description (one offset): when the status line arrives the
//!   worker reads the capture from behind the blocks, then truncates the memfd and moves the shared
//!   offset back to 0, so the next command's blocks start there. Before the capture the loop writes `trap -p` there: the bytes
//!   before the capture's first NUL are the shell's traps (see [`split_traps`]). A memfd, not a pipe: bash writes a capture in dozens of small
//!   `write`s, and each one on a pipe woke the worker (~50 wake-ups per command).
//!
//! The command runs as `eval "$cmd" 0</dev/null 4>&-`: its stdin is `/dev/null` and the control and
//! state fds are closed for it (bash keeps its saved copies close-on-exec). `set -euvx` are switched off
//! around the loop's own code and back on for the command (inside its `eval`, after the loop's `unset`, so
//! `set -x` traces only the command; with `set -v` the loop echoes the command's first line, which bash
//! had read before the option was back on, and bash echoes the rest), so `set -euo pipefail` or `set -x`
//! cannot break the loop; `PS1` means nothing to a non-interactive shell. The options come back on, and
//! `$?` takes the previous command's status, through a function the loop defines before each command and
//! that unsets itself when called (so neither the command nor the capture sees it); its `return` runs with
//! stderr at `/dev/null`, so a carried `set -x` does not trace it, and the call is the left side of an
//! `&& { builtin true; } 2>/dev/null` list (untraced; not `:`, which a user function may shadow), so a
//! non-zero status under `set -e` does not end the shell.
//!
//! Boundaries: when the status line arrives, every byte the command wrote is already in the pipes; the
//! worker notes how many bytes wait (`FIONREAD`), reads exactly those for the job, then sends `Exited` and
//! `StreamsClosed`. Bytes written later (a background job of the shell) belong to the next command.
//!
//! A shell that dies during a command (`exit`, `exec`, a signal, `set -e` tripping, `kill`) ends that job
//! with the shell's status and a state-unknown note; the shell's cgroup is killed (its background jobs go
//! with it) and the next command starts a new shell from the record's last known state.

use crate::job::{Job, Pipe, Source};
use launcher::Child;
use shm_proto::msg::{JobId, RunSpec};
use std::collections::VecDeque;
use std::os::fd::OwnedFd;

/// The cgroup id of the persistent shell (named `shell` under the session, see [`crate::cgroup`]).
pub const SHELL_CGROUP: JobId = JobId::MAX;

/// The loop the persistent bash runs (`bash --noprofile --norc -c LOOP bash`). See the module docs.
pub const LOOP: &str = concat!(
    "__heddle_o=$SHELLOPTS __heddle_b=$BASHOPTS; builtin set +euvx; __heddle_f= __heddle_rc=0\n",
    "while builtin true; do\n",
    " IFS= builtin read -r __heddle_d || builtin exit 0\n",
    " builtin mapfile -t -d '' -u 4 __heddle_m\n",
    " __heddle_r=${__heddle_m[0]-} __heddle_c=${__heddle_m[1]-} __heddle_s=${__heddle_m[2]-}; builtin unset -v __heddle_m __heddle_d\n",
    " if [[ -n $__heddle_r ]]; then builtin eval \"$__heddle_r\" 0</dev/null 4>&-;",
    " { __heddle_f=$-; builtin set +euvx; } 2>/dev/null; fi\n",
    " __heddle_t=${__heddle_f//[!euvx]/}\n",
    crate::heddle_echo_first_line!(),
    "\n",
    " __heddle_status() { builtin unset -f __heddle_status; [[ -z $2 ]] || builtin set -$2; builtin return \"$1\"; } 2>/dev/null\n",
    " builtin eval \"$__heddle_s\"\n",
    " builtin eval \"builtin unset -v __heddle_c __heddle_r __heddle_t __heddle_s;__heddle_status $__heddle_rc $__heddle_t && { builtin true; } 2>/dev/null;",
    "$__heddle_c\" 0</dev/null 4>&-\n",
    " { __heddle_rc=$? __heddle_f=$- __heddle_p=$SHELLOPTS; builtin set +euvx; builtin trap -p >&4;",
    " if [[ ${__heddle_n-} ]]; then ",
    shm_proto::heddle_scoped_capture!(),
    " else ",
    shm_proto::heddle_state_capture!(),
    " fi; builtin unset -v __heddle_n; builtin printf '%s\\n' \"$__heddle_rc\" >&0; } 2>/dev/null\n",
    "done\n",
);

/// The idle shell between commands: everything a running command's [`Job`] borrows.
pub(crate) struct Shell {
    pub child: Child,
    pub ctl: OwnedFd,
    pub out: OwnedFd,
    pub err: OwnedFd,
    pub state: OwnedFd,
}

/// The session's persistent shell and the commands waiting their turn.
#[derive(Default)]
pub(crate) struct Persistent {
    /// The live shell while no command runs (`None` while one runs, or before the first / after a death).
    pub idle: Option<Shell>,
    /// A command is running in the shell.
    pub active: Option<JobId>,
    /// The next command may get the scoped capture the front asked for: the shell's last capture was
    /// read whole and the shell had no trap then (a trap, `DEBUG` above all, can change variables while
    /// any command runs, which a capture scoped to the command's own names would miss). False for a
    /// shell just started: its first command's capture is full.
    pub scoped_ok: bool,
    pub queue: VecDeque<RunSpec>,
}

/// A running command's hold on the shell: its control socket and the status line read so far.
pub(crate) struct ShellLink {
    pub ctl: OwnedFd,
    pub line: Vec<u8>,
}

impl Job {
    /// Build the job of one command from the idle shell's parts; its capture starts at `capture_at` in the
    /// state memfd (behind the command's blocks).
    pub(crate) fn in_shell(serial: usize, shell: Shell, capture_at: u64) -> Job {
        Job {
            input: None,
            net_refused: None,
            effects: None,
            serial,
            pid: shell.child.pid,
            child: Some(shell.child),
            pipes: [Some(Pipe::new(shell.out)), Some(Pipe::new(shell.err))],
            exit: None,
            exited_sent: false,
            closed_sent: false,
            kill_requested: false,
            state: Some(crate::state::StateFile::memfd(shell.state, capture_at)),
            shell: Some(ShellLink { ctl: shell.ctl, line: Vec::new() }),
            in_shell: true,
            started: std::time::Instant::now(),
            emptied_sent: false,
            kept: false,
            procs_seen: 1,
            oom_base: None,
            pids_base: None,
        }
    }
}

/// The poll sources a command of the shell watches (not its state memfd: epoll refuses regular files, and
/// bash's writes to it wake nobody; it is read when the status line arrives).
pub(crate) const SHELL_SOURCES: [Source; 4] = [Source::Stdout, Source::Stderr, Source::Pidfd, Source::Done];

/// Split what the loop wrote to the state memfd into the shell's traps (`trap -p`, before the capture's
/// first NUL; traps cannot hold NUL) and the capture: true when the shell has a trap.
pub(crate) fn split_traps(buf: &mut Vec<u8>) -> bool {
    let cut = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    buf.drain(..cut);
    cut > 0
}

#[cfg(test)]
mod tests {
    use super::split_traps;

    #[test]
    fn the_traps_before_the_capture_are_cut_off_and_reported() {
        let mut with = b"trap -- 'X=1' DEBUG\n\0O\0rest".to_vec();
        assert!(split_traps(&mut with));
        assert_eq!(with, b"\0O\0rest");
        let mut without = b"\0O\0rest".to_vec();
        assert!(!split_traps(&mut without));
        assert_eq!(without, b"\0O\0rest");
        let mut cut_short = b"trap -- '' INT\n".to_vec();
        assert!(split_traps(&mut cut_short));
        assert!(cut_short.is_empty(), "no capture after the traps: the verdict says the shell did not return");
    }
}
