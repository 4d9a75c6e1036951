//! What `/proc` says about a job's processes: their stats (age, CPU time), and what the busiest one is
//! doing, in words ("busy", "sleeping on a timer", "blocked reading stdin/tty", …).
//!
//! Everything read here is untrusted text (a job controls its own `comm`, so a name may contain `)` and
//! spaces): [`parse_stat`] splits at the *last* `)` and returns `None` for anything malformed; it is
//! property-tested on garbage. Nothing here signals or changes a process.
//!
//! ```
//! use worker::procinfo::{activity, parse_stat};
//! let st = parse_stat("42 (sleep) S 1 42 42 0 -1 0 0 0 0 0 3 2 0 0 20 0 1 0 500 0 0").unwrap();
//! assert_eq!((st.state, st.ppid, st.ticks, st.start_ticks), ('S', 1, 5, 500));
//! assert_eq!(activity('S', "hrtimer_nanosleep", Some(230), false), "sleeping on a timer");
//! ```

use shm_proto::msg::ProcStat;

pub use shm_proto::procs::{cmdline, cmdline_cut};

/// The fields of `/proc/PID/stat` the worker uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    pub state: char,
    pub ppid: u32,
    /// Process group (field 5).
    pub pgrp: i32,
    /// utime + stime, in clock ticks.
    pub ticks: u64,
    /// Start time after boot, in clock ticks.
    pub start_ticks: u64,
}

/// Parse one `/proc/PID/stat` line; `None` when it is not one.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let (_, rest) = text.rsplit_once(')')?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the comm: state(3) ppid(4) … utime(14) stime(15) … starttime(22); index = field - 3.
    let num = |i: usize| f.get(i)?.parse::<u64>().ok();
    let state = f.first()?.chars().next()?;
    Some(Stat {
        state,
        ppid: u32::try_from(num(1)?).ok()?,
        pgrp: f.get(2)?.parse().ok()?,
        ticks: num(11)?.checked_add(num(12)?)?,
        start_ticks: num(19)?,
    })
}

fn clock_ticks() -> u64 {
    match nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK) {
        Ok(Some(t)) if t > 0 => t as u64,
        _ => 100,
    }
}

fn uptime_ms() -> u64 {
    let text = std::fs::read_to_string("/proc/uptime").unwrap_or_default();
    let secs: f64 = text.split_whitespace().next().and_then(|s| s.parse().ok()).unwrap_or(0.0);
    (secs * 1000.0) as u64
}

/// The stat of a live process (`None`: gone).
pub fn stat(pid: u32) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Pid, command line, age and CPU time of each process in `pids` that still exists.
pub fn proc_stats(pids: &[u32]) -> Vec<ProcStat> {
    let (hz, now) = (clock_ticks(), uptime_ms());
    pids.iter()
        .filter_map(|&pid| {
            let st = stat(pid)?;
            Some(ProcStat {
                pid,
                cmdline: cmdline(pid),
                age_ms: now.saturating_sub(st.start_ticks * 1000 / hz),
                cpu_ms: st.ticks * 1000 / hz,
            })
        })
        .collect()
}

/// What a person should read for `pid`'s command: its command line, except for a job's own bash while
/// it runs heddle's wrapper (`bash -c __heddle_o=…`: the restore, the command and the capture), which is
/// named as the job's shell rather than shown as heddle's internals.
pub fn shown_cmdline(pid: u32) -> String {
    shown(cmdline_cut(pid))
}

fn shown(cmdline: String) -> String {
    let mut words = cmdline.split(' ');
    let bash = words.next().is_some_and(|w| w == "bash" || w.ends_with("/bash"));
    if bash && words.any(|w| w.starts_with("__heddle_")) {
        return "bash (the job's shell, running its command)".to_owned();
    }
    cmdline
}

/// The syscall a sleeping process is in (`/proc/PID/syscall`, first field), when readable.
pub fn syscall(pid: u32) -> Option<i64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/syscall")).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// True when the process sleeps in a `read` (`read`, `pread64`, `readv`) of a terminal: the fd it reads
/// (`/proc/PID/syscall`'s first argument) links to `/dev/pts/*` or `/dev/tty*`. A program whose stdin is a
/// terminal but reads a pipe or a socket (git reading its remote helper) is not reading its terminal.
pub fn reading_tty(pid: u32) -> bool {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/syscall")) else { return false };
    let mut fields = text.split_whitespace();
    let nr: Option<i64> = fields.next().and_then(|n| n.parse().ok());
    let fd = fields.next().and_then(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok());
    match (nr, fd) {
        (Some(0 | 17 | 19), Some(fd)) => std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).is_ok_and(|p| {
            let p = p.to_string_lossy();
            p.starts_with("/dev/pts/") || p.starts_with("/dev/tty")
        }),
        _ => false,
    }
}

/// `/proc/PID/wchan` (empty when running or unknown).
pub fn wchan(pid: u32) -> String {
    let w = std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
    if w.trim() == "0" {
        String::new()
    } else {
        w.trim().to_owned()
    }
}

/// True when the process's fd 0 is a terminal (`/dev/tty*`, `/dev/pts/*`).
pub fn stdin_is_tty(pid: u32) -> bool {
    std::fs::read_link(format!("/proc/{pid}/fd/0"))
        .map(|p| {
            let p = p.to_string_lossy();
            p.starts_with("/dev/pts/") || p.starts_with("/dev/tty")
        })
        .unwrap_or(false)
}

/// The state in words, from the state letter, the kernel function the process sleeps in, the syscall
/// it is in (x86_64 numbers) and whether its stdin is a terminal.
pub fn activity(state: char, wchan: &str, syscall: Option<i64>, reads_tty: bool) -> String {
    let words = match state {
        'R' => "busy (running on a CPU)",
        'D' => "blocked in uninterruptible I/O (disk or a network file system)",
        'T' | 't' => "stopped (by a signal or a debugger)",
        'Z' | 'X' => "exited, not yet reaped",
        _ => sleeping(wchan, syscall, reads_tty),
    };
    words.to_owned()
}

fn sleeping(wchan: &str, syscall: Option<i64>, reads_tty: bool) -> &'static str {
    let w = wchan;
    match syscall {
        Some(35 | 230) => return "sleeping on a timer",
        Some(0 | 17 | 19) if reads_tty || w.contains("tty") => return "blocked reading stdin/tty",
        Some(61 | 247) => return "waiting for a child process",
        _ => {}
    }
    if w.contains("nanosleep") || w.contains("hrtimer") {
        "sleeping on a timer"
    } else if w.contains("tty") {
        "blocked reading stdin/tty"
    } else if w.contains("pipe") {
        "blocked on a pipe (reading or writing)"
    } else if w.contains("do_wait") || w.contains("wait4") {
        "waiting for a child process"
    } else if w.contains("poll") || w.contains("select") {
        "waiting for I/O (poll/select)"
    } else if w.contains("futex") {
        "waiting on a lock or condition (futex)"
    } else if w.contains("sk_wait") || w.contains("unix_stream") || w.contains("accept") || w.contains("inet") {
        "waiting on a socket"
    } else {
        "sleeping"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_comm_with_parens_and_spaces_is_skipped_whole() {
        let st = parse_stat("7 (a) b (c) R 3 7 7 0 -1 0 0 0 0 0 10 20 0 0 20 0 1 0 99 0 0").unwrap();
        assert_eq!(st, Stat { state: 'R', ppid: 3, pgrp: 7, ticks: 30, start_ticks: 99 });
    }

    #[test]
    fn truncated_lines_are_none() {
        assert_eq!(parse_stat("7 (sleep) S 1 2 3"), None);
        assert_eq!(parse_stat("no paren"), None);
    }

    #[test]
    fn our_own_process_has_stats() {
        let got = proc_stats(&[std::process::id()]);
        assert_eq!(got.len(), 1);
        assert!(got[0].cmdline.contains("worker"), "{:?}", got[0]);
    }

    #[test]
    fn activities_in_words() {
        assert_eq!(activity('R', "", None, false), "busy (running on a CPU)");
        let wrapper = "bash -c __heddle_o=$SHELLOPTS __heddle_b=$BASHOPTS; builtin set +euvx".to_owned();
        assert_eq!(shown(wrapper), "bash (the job's shell, running its command)");
        assert_eq!(shown("sleep 300".into()), "sleep 300");
        assert_eq!(shown("python3 -c print('__heddle_x')".into()), "python3 -c print('__heddle_x')");
        assert_eq!(activity('S', "", Some(230), false), "sleeping on a timer");
        assert_eq!(activity('S', "n_tty_read", Some(0), true), "blocked reading stdin/tty");
        assert_eq!(activity('S', "do_wait", Some(61), false), "waiting for a child process");
        assert_eq!(activity('S', "pipe_read", Some(0), false), "blocked on a pipe (reading or writing)");
    }

    proptest! {
        #[test]
        fn garbage_stat_never_panics(s in ".{0,200}") {
            let _ = parse_stat(&s);
        }

        #[test]
        fn garbage_after_a_paren_never_panics(tail in "[ 0-9A-Za-z()-]{0,120}") {
            let _ = parse_stat(&format!("1 (x) {tail}"));
        }
    }
}
