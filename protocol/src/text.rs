//! The model-facing text form of a result: one deterministic rendering shared by the MCP tools and
//! `heddle run`, so what a model reads does not depend on the door it came through.
//!
//! Shape (docs/protocol.md, "The text form"):
//! 1. a first line with the outcome: `exit 2 · 1.4 s · job 7`, `killed by SIGKILL · 3.0 s · job 7`, or
//!    `still running after 10 s · job 7 · wait with {"job":7}`;
//! 2. the view (its omission marker, when output was left out, names the call that shows the rest);
//! 3. one line per note that matters: state unknown, shell-state changes and conflicts, survivors by
//!    command name and pid, refusals, warnings, files not written, OOM, kept, liveness of a running job;
//! 4. the announcements of other jobs that ended unseen, each with its last lines.
//!
//! Nothing in it a model cannot use: no wrapper text, no internal ids, no JSON beyond the call to make
//! next. The same input renders the same bytes.
//!
//! ```
//! use protocol::results::{JobResult, JobPhase};
//! let r = JobResult { job: 7, state: JobPhase::Exited, exit_code: Some(2), duration_ms: 1400.0,
//!                     view: "boom\n".into(), ..Default::default() };
//! assert_eq!(protocol::text::job_result(&r), "exit 2 · 1.4 s · job 7\nboom\n");
//! ```

use crate::results::{Announcement, JobPhase, JobResult, JobSummary, Liveness, Survivor};
use serde_json::Value;
use std::fmt::Write;

/// How many survivors a note names before it says how many more there are.
const SURVIVORS_NAMED: usize = 8;

/// The text form of a `run`, `wait` or `kill` result.
/// The effects ledger in a line (a short list past five paths), then the confidence's reason and the diff.
fn effects_lines(p: &crate::results::ProjectLedger) -> Vec<String> {
    let mut v = Vec::new();
    let Some(root) = &p.root else {
        if let Some(why) = &p.reason {
            v.push(format!("effects: none ({why})"));
        }
        return v;
    };
    let paths: Vec<String> = p
        .changed
        .iter()
        .map(|c| match (&c.from, c.under) {
            (Some(f), _) => format!("{} ({} from {f})", c.path, c.change),
            (None, 0) => format!("{} ({})", c.path, c.change),
            (None, n) => format!("{}/ ({n} {} paths below it)", c.path, c.change),
        })
        .collect();
    let more = if p.changed_more > 0 { format!(" and {} more", p.changed_more) } else { String::new() };
    if p.confidence == "none" {
        // Nothing was compared: the ledger knows nothing, so it must not say nothing changed.
        v.push(format!(
            "effects: unknown in {root}: {}",
            p.reason.as_deref().unwrap_or("the ledger could not be taken")
        ));
        return v;
    }
    let short = |c: &Option<String>| c.as_deref().map_or("(no commit)".to_owned(), |c| c.chars().take(10).collect());
    let at = |b: &Option<String>, c: &Option<String>| match b {
        Some(b) => format!("{b} at {}", short(c)),
        None => format!("detached at {}", short(c)),
    };
    let head = p.head_moved.as_ref().map(|h| match h.from_branch == h.to_branch {
        true => format!("HEAD moved {} → {}", short(&h.from), short(&h.to)),
        false => format!("HEAD moved {} → {}", at(&h.from_branch, &h.from), at(&h.to_branch, &h.to)),
    });
    match (paths.len(), &head) {
        (0, Some(head)) => v.push(format!("effects in {root}: {head}; no path differs from before")),
        (0, None) => v.push(format!("effects: nothing changed in {root}")),
        (1..=5, _) => v.push(format!("effects: {}{more}", paths.join(", "))),
        _ => {
            v.push(format!("effects in {root}:"));
            v.extend(paths.iter().map(|p| format!("  {p}")));
            if !more.is_empty() {
                v.push(format!("  …{more}"));
            }
        }
    }
    if let Some(head) = head.filter(|_| !paths.is_empty()) {
        v.push(format!("effects: {head}"));
    }
    match p.in_progress.as_deref() {
        Some("bisect") => v.push("effects: a bisect is in progress (`git bisect reset` ends it)".to_owned()),
        Some(op) => v.push(format!(
            "effects: a {op} is in progress: finish it (`git {op} --continue`) or undo it (`git {op} --abort`)"
        )),
        None => {}
    }
    if p.confidence != "complete" {
        v.push(format!("effects confidence {}: {}", p.confidence, p.reason.as_deref().unwrap_or("not said")));
    }
    if let Some(d) = p.diff.as_deref().filter(|d| !d.is_empty()) {
        v.push(d.trim_end().to_owned());
    }
    if let Some(n) = &p.diff_note {
        v.push(format!("diff: {n}"));
    }
    v
}

/// The watched part: the changed paths, and its confidence when not complete (an empty complete part
/// says nothing changed there: every entry was compared).
fn watched_lines(w: &crate::results::WatchedLedger) -> Vec<String> {
    let roots = w.roots.join(", ");
    let mut v = Vec::new();
    let paths: Vec<String> = w
        .changed
        .iter()
        .map(|c| match c.under {
            0 => format!("{} ({})", c.path, c.change),
            n => format!("{}/ ({}, with {n} {} below it)", c.path, c.change, if n == 1 { "path" } else { "paths" }),
        })
        .collect();
    let more = if w.changed_more > 0 { format!(" and {} more", w.changed_more) } else { String::new() };
    match paths.len() {
        0 if w.confidence == "complete" => v.push(format!("effects: nothing changed in {roots}")),
        0 => {}
        1..=5 => v.push(format!("effects: {}{more}", paths.join(", "))),
        _ => {
            v.push(format!("effects in {roots}:"));
            v.extend(paths.iter().map(|p| format!("  {p}")));
            if !more.is_empty() {
                v.push(format!("  …{more}"));
            }
        }
    }
    if w.confidence != "complete" {
        v.push(format!(
            "effects confidence {} in {roots}: {}",
            w.confidence,
            w.reason.as_deref().unwrap_or("not said")
        ));
    }
    v
}

pub fn job_result(r: &JobResult) -> String {
    let mut out = String::with_capacity(r.view.len() + 256);
    if let Some(c) = &r.check {
        out.push_str(&crate::checks::routing(c));
        out.push('\n');
    }
    out.push_str(&outcome(r));
    out.push('\n');
    match (&r.terminal, r.state) {
        // A running terminal job: its screen says more than the stream (a full-screen program redraws).
        (Some(t), JobPhase::Running) => out.push_str(&terminal(t)),
        _ => {
            out.push_str(&r.view);
            if !r.view.is_empty() && !r.view.ends_with('\n') {
                out.push('\n');
            }
        }
    }
    for note in notes(r) {
        out.push_str(&note);
        out.push('\n');
    }
    out.push_str(&announcements(&r.announcements));
    out
}

/// A terminal's model view: what scrolled by since the last look, then the screen between rules, with
/// the cursor and whether a full-screen program holds the alternate screen.
pub fn terminal(t: &crate::results::TerminalScreen) -> String {
    let mut out = String::new();
    if t.scrolled_more > 0 {
        out.push_str(&format!("[… {} earlier lines scrolled by; output shows them]\n", t.scrolled_more));
    }
    for l in &t.scrolled {
        out.push_str(l);
        out.push('\n');
    }
    let alt = if t.alternate_screen { ", alternate screen" } else { "" };
    out.push_str(&format!("── screen {}×{}, cursor {},{}{alt} ──\n", t.rows, t.cols, t.cursor[0], t.cursor[1]));
    out.push_str(&t.text);
    if !t.text.ends_with('\n') {
        out.push('\n');
    }
    out.push_str("──\n");
    out
}

/// A `write` or `resize` result: how the job is, then its screen (or, for a pipe job, what it wrote
/// since the write), liveness and notes. The job's own end, when the write ended it, is said on the
/// first line and its last lines are on the screen, so its announcement keeps only its line.
pub fn write_result(r: &crate::results::WriteResult) -> String {
    let (state, after) = match r.state {
        JobPhase::Running if r.settled && r.terminal.is_some() => ("running".to_owned(), "screen settled after"),
        JobPhase::Running if r.settled => ("running".to_owned(), "output quiet after"),
        JobPhase::Running if r.terminal.is_some() => ("running".to_owned(), "screen still changing after"),
        JobPhase::Running => ("running".to_owned(), "output still coming after"),
        s => (ending(s, r.exit_code, r.signal), "ended within"),
    };
    let typed = if r.bytes == 1 { "byte" } else { "bytes" };
    let mut out = format!("job {} {state} · {} {typed} typed · {after} {} ms\n", r.job, r.bytes, r.waited_ms);
    match (&r.terminal, r.new_output.as_deref()) {
        (Some(t), _) => out.push_str(&terminal(t)),
        (None, Some(new)) if !new.is_empty() => {
            out.push_str(new);
            if !new.ends_with('\n') {
                out.push('\n');
            }
        }
        (None, _) => out.push_str("(no output since the write)\n"),
    }
    if let Some(a) = r.liveness.as_ref().and_then(|l| l.activity.as_ref()) {
        out.push_str(&format!("liveness: {a}\n"));
    }
    if let Some(n) = &r.note {
        out.push_str(n);
        out.push('\n');
    }
    let mut others = r.announcements.clone();
    for a in others.iter_mut().filter(|a| a.job == r.job) {
        a.last_lines.clear();
    }
    out.push_str(&announcements(&others));
    out
}

/// `checks` as a model reads it: a line per check (name, command, parser, origin), its last run, and
/// the checks file's problems.
pub fn checks(r: &Value) -> String {
    let st = |v: &Value| v.as_str().unwrap_or("?").to_owned();
    let mut out = Vec::new();
    for c in r["checks"].as_array().into_iter().flatten() {
        out.push(format!(
            "{} → {} (parser: {}; {})",
            st(&c["name"]),
            st(&c["command"]),
            st(&c["parser"]),
            st(&c["origin"])
        ));
        let runs = c["last_runs"].as_array().map_or(0, Vec::len);
        if let Some(last) = c["last_runs"].get(0) {
            let counts = &last["counts"];
            let counts = match counts.is_object() {
                true => format!(
                    " · {} passed, {} failed, {} skipped, {} errors",
                    counts["passed"], counts["failed"], counts["skipped"], counts["errors"]
                ),
                false => String::new(),
            };
            let ending = match (&last["exit_code"], st(&last["state"])) {
                (Value::Number(n), _) => format!("exit {n}"),
                (_, state) => state,
            };
            let took = last["duration_ms"].as_f64().map(duration).unwrap_or_default();
            // Runs are recorded per project: one of another session names it (its job number is that session's).
            let of = match last["session"].as_str().filter(|s| Some(*s) != r["session"].as_str()) {
                Some(other) => format!(" of session '{other}'"),
                None => String::new(),
            };
            out.push(format!(
                "  last run: job {}{of} · {ending} · {took}{counts}{}",
                last["job"],
                if runs > 1 { format!(" ({runs} runs recorded)") } else { String::new() }
            ));
        }
    }
    if out.is_empty() {
        out.push("no check found".to_owned());
    }
    out.extend(r["errors"].as_array().into_iter().flatten().map(|e| format!("problem: {}", st(e))));
    if let Some(n) = r["note"].as_str() {
        out.push(format!("note: {n}"));
    }
    out.join("\n") + "\n"
}

/// `describe` of one session as a model reads it: what the shell is, where it writes, its limits and
/// jobs, in a dozen lines (the JSON, several KiB, has the sandbox's rules and the environment allowlist).
pub fn describe(d: &Value) -> String {
    let s = &d["sessions"][0];
    let st = |v: &Value| v.as_str().unwrap_or("?").to_owned();
    let list = |v: &Value| -> Vec<String> { v.as_array().into_iter().flatten().map(&st).collect() };
    let mut out = vec![format!(
        "heddle {} · session {} ({}) · bash {} · jobs run as uid {}",
        st(&d["version"]),
        st(&s["session"]),
        st(&s["state"]),
        st(&s["shell"]["version"]),
        s["worker"]["uid"]
    )];
    let state = &s["shell_state"];
    out.push(format!("cwd: {} (the session was opened in {})", st(&state["cwd"]), st(&s["cwd"])));
    let mut carried = vec![format!("{} exported", list(&state["exported"]).len())];
    carried.push(format!("{} variables", state["variables"]));
    let functions = list(&state["functions"]);
    carried.push(match functions.len() {
        0 => "no functions".to_owned(),
        _ => format!("functions {}", functions.join(", ")),
    });
    carried.push(format!("{} aliases", state["aliases"]));
    let options: Vec<String> = list(&state["set_options"]).into_iter().chain(list(&state["shopt_options"])).collect();
    if !options.is_empty() {
        carried.push(format!("options {}", options.join(", ")));
    }
    carried.push(format!("umask {}", st(&state["umask"])));
    out.push(format!("shell state carried: {}", carried.join(", ")));
    out.push(format!("PATH: {}", st(&s["env"]["path"])));
    let sb = &s["sandbox"];
    if sb.is_object() {
        out.push(format!(
            "sandbox: policy {} · Landlock {} · seccomp {} · network {}",
            st(&sb["policy"]),
            st(&sb["landlock_status"]),
            if sb["seccomp_installed"] == true { "on" } else { "off" },
            if sb["network"] == true { "on" } else { "off" }
        ));
        let roots: Vec<String> = sb["writable"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| format!("{} ({})", st(&r["path"]), st(&r["template"])))
            .collect();
        let elsewhere = match sb["landlock_status"].as_str() {
            Some("not_enforced") | None => "Landlock is not enforced here, so writes elsewhere are not refused",
            Some(_) => "writes elsewhere are refused, reads are not",
        };
        out.push(format!(
            "writable: {} (TMPDIR {}, HOME {}); {elsewhere}",
            roots.join(", "),
            st(&sb["tmp"]),
            st(&sb["home"])
        ));
    }
    let l = &s["limits"];
    if l.is_object() {
        let mib = |v: &Value| v.as_f64().map_or("none".to_owned(), |b| format!("{:.0} MiB", b / 1048576.0));
        out.push(format!(
            "limits: memory {} (peak {}, {} OOM kills) · processes {} ({} forks refused)",
            mib(&l["memory_max"]),
            mib(&l["memory_peak"]),
            l["oom_kills"].as_u64().unwrap_or(0),
            l["pids_max"].as_u64().map_or("none".to_owned(), |n| n.to_string()),
            l["pids_limited"].as_u64().unwrap_or(0)
        ));
    }
    let by: Vec<String> =
        s["changes"]["jobs_by_state"].as_object().into_iter().flatten().map(|(k, v)| format!("{v} {k}")).collect();
    out.push(format!("jobs: {} run ({})", s["jobs_total"], by.join(", ")));
    for j in s["live_jobs"].as_array().into_iter().flatten() {
        let live = serde_json::from_value::<crate::results::Liveness>(j["liveness"].clone())
            .map(|l| liveness(&l).trim_start_matches("liveness: ").to_owned())
            .unwrap_or_else(|_| "running".to_owned());
        out.push(format!("  job {}: {} · {live}", j["job"], one_line(&st(&j["cmd"]), 80)));
    }
    let notes = [&s["note"], &s["env"]["note"], &d["note"]];
    out.extend(notes.into_iter().filter_map(|n| n.as_str()).map(|n| format!("note: {n}")));
    out.extend(list(&s["warnings"]).into_iter().map(|w| format!("warning: {w}")));
    out.join("\n") + "\n"
}

/// The first line: what happened to the job, how long it took, its id.
pub fn outcome(r: &JobResult) -> String {
    let took = duration(r.duration_ms);
    match r.state {
        JobPhase::Running if waits_for_input(r) => {
            format!("waiting for input after {took} · job {} · type into it with write {{\"job\":{}}}", r.job, r.job)
        }
        // Kept, and nothing more comes through the session: it was closed (the job's note says where
        // its output goes now).
        JobPhase::Running if r.settled && r.kept.is_some() => format!(
            "running on as kept job {} after {took} · job {} · its session was closed",
            r.kept.as_deref().unwrap_or_default(),
            r.job
        ),
        JobPhase::Running => {
            format!("still running after {took} · job {} · wait with {{\"job\":{}}}", r.job, r.job)
        }
        state => format!("{} · {took} · job {}", ending(state, r.exit_code, r.signal), r.job),
    }
}

/// A terminal job whose foreground process sleeps reading the terminal (its liveness says `waiting for
/// input: "PROMPT"`).
fn waits_for_input(r: &JobResult) -> bool {
    r.terminal.is_some()
        && r.liveness.as_ref().and_then(|l| l.activity.as_deref()).is_some_and(|a| a.starts_with("waiting for input"))
}

/// `exit 0`, `killed by SIGKILL`, `signal SIGSEGV`, `lost`, `failed to start`.
fn ending(state: JobPhase, exit_code: Option<i32>, signal: Option<i32>) -> String {
    match (state, exit_code, signal) {
        (JobPhase::Killed, _, Some(s)) => format!("killed by {}", signal_name(s)),
        // Asked to stop (SIGTERM with a grace period), it exited on its own with this status.
        (JobPhase::Killed, Some(code), None) => format!("killed (it exited {code})"),
        (JobPhase::Killed, _, None) => "killed".to_owned(),
        (JobPhase::Lost, ..) => "lost".to_owned(),
        (JobPhase::Failed, ..) => "failed to start".to_owned(),
        (JobPhase::Refused, ..) => "refused by a guard, not run".to_owned(),
        (_, Some(code), _) => format!("exit {code}"),
        (_, None, Some(s)) => format!("signal {}", signal_name(s)),
        (JobPhase::Running, None, None) => "running".to_owned(),
        (JobPhase::Exited, None, None) => "ended".to_owned(),
    }
}

/// The notes of a job result, one line each, in a fixed order.
pub fn notes(r: &JobResult) -> Vec<String> {
    let mut v = Vec::new();
    if let Some(n) = &r.state_note {
        v.push(n.clone());
    }
    // The session's first record ("state recorded (17 items)") tells a model nothing it can use.
    let changes: Vec<&str> =
        r.state_changes.iter().map(String::as_str).filter(|c| !c.starts_with("state recorded (")).collect();
    if !changes.is_empty() {
        v.push(format!("shell state: {}", changes.join(", ")));
    }
    for c in &r.state_conflicts {
        v.push(c.clone()); // each already begins `conflict:`
    }
    if let Some(l) = r.liveness.as_ref().filter(|_| r.state == JobPhase::Running) {
        v.push(liveness(l));
    }
    if !r.survivors.is_empty() {
        let verb = if r.state == JobPhase::Running { "running" } else { "still alive after the job's end" };
        let count = r.survivors.len() + r.survivors_more as usize;
        let mut named = survivors(&r.survivors);
        if r.survivors_more > 0 {
            named.push_str(&format!(" (and {} more not listed)", r.survivors_more));
        }
        // The advice the result's note gives on them is said here, once.
        let advice = if r.state == JobPhase::Running { "" } else { "; kill the job to end them, or keep it" };
        v.push(format!(
            "{count} process{} {verb} in job {}'s cgroup: {named}{advice}",
            if count == 1 { "" } else { "es" },
            r.job,
        ));
    }
    for f in r.files.iter().filter(|f| !f.written) {
        v.push(format!(
            "file not written: {}{}",
            f.path,
            f.error.as_deref().map(|e| format!(" ({e})")).unwrap_or_default()
        ));
    }
    for x in &r.refusals {
        v.push(format!("refused: {x}"));
    }
    for w in &r.warnings {
        v.push(format!("warning: {w}"));
    }
    if let Some(fx) = &r.effects {
        // Outside any work tree the watched part (the cwd) speaks for the project; inside one, the
        // watched roots (temp dir, home) are shown only when they changed or could not all be compared.
        let outside = fx.project.root.is_none() && fx.watched.is_some();
        if !outside {
            v.extend(effects_lines(&fx.project));
        }
        if let Some(w) = fx.watched.as_ref().filter(|w| outside || !w.changed.is_empty() || w.confidence != "complete")
        {
            v.extend(watched_lines(w));
        }
    }
    if r.oom_killed {
        v.push("out of memory: the kernel's OOM killer killed a process of this job".to_owned());
    }
    // The keep's own note says where the processes are and how to end them; this line is for a result
    // without it.
    if let Some(k) = r.kept.as_ref().filter(|_| !r.note.as_deref().unwrap_or_default().contains("kept as ")) {
        v.push(format!("kept as {k}: its processes outlive the session"));
    }
    if let (Some(k), true, true) = (&r.kept, r.state.ended(), r.settled) {
        // Kept, then ended with every process that held its output (a server that failed to start).
        v.push(format!(
            "kept job {k} has ended, and no process of it holds its output any more: it is likely not running \
             (`heddle kept` lists what still runs in kept/{k})"
        ));
    }
    if let Some(n) = r.note.as_deref().map(|n| without_survivors_note(n, !r.survivors.is_empty())) {
        if !n.is_empty() {
            v.push(n);
        }
    }
    v
}

/// `running 12.0 s · cpu 0.3 s · last output 1.2 s ago · sleeping on a timer: sleep 300 (pid 812)`.
pub fn liveness(l: &Liveness) -> String {
    let mut s = format!("liveness: running {}", duration(l.running_ms as f64));
    if let Some(c) = l.cpu_ms {
        let _ = write!(s, " · cpu {}", duration(c));
    }
    match l.last_output_ms_ago {
        Some(ago) => {
            let _ = write!(s, " · last output {} ago", duration(ago as f64));
        }
        None => s.push_str(" · no output yet"),
    }
    if let Some(a) = &l.activity {
        let _ = write!(s, " · {a}");
        if let (Some(pid), Some(cmd)) = (l.busy_pid, &l.busy_cmdline) {
            let _ = write!(s, ": {} (pid {pid})", command_name(cmd));
        }
    }
    s
}

/// A result's note without its sentence about the processes the job left running (`N process(es) of the
/// job outlived its main process … outlive the session`) when the survivors line says it.
fn without_survivors_note(note: &str, listed: bool) -> String {
    const MID: &str = " of the job outlived its main process";
    const END: &str = "to let them outlive the session";
    let Some(mid) = note.find(MID).filter(|_| listed) else { return note.to_owned() };
    let start = note[..mid].rfind("; ").map_or(0, |i| i + 2);
    let Some(end) = note[mid..].find(END).map(|e| mid + e + END.len()) else { return note.to_owned() };
    let (before, after) = (note[..start].trim_end_matches("; "), note[end..].trim_start_matches("; "));
    match (before.is_empty(), after.is_empty()) {
        (true, _) => after.to_owned(),
        (_, true) => before.to_owned(),
        _ => format!("{before}; {after}"),
    }
}

/// `sleep (pid 812), python3 (pid 813) and 4 more`.
pub fn survivors(s: &[Survivor]) -> String {
    let mut out: Vec<String> =
        s.iter().take(SURVIVORS_NAMED).map(|p| format!("{} (pid {})", command_name(&p.cmdline), p.pid)).collect();
    if s.len() > SURVIVORS_NAMED {
        out.push(format!("and {} more", s.len() - SURVIVORS_NAMED));
    }
    out.join(", ")
}

/// The announcements of jobs that ended unseen, each with its last lines indented.
pub fn announcements(a: &[Announcement]) -> String {
    let mut out = String::new();
    for x in a {
        if x.survivors_ended {
            let _ = writeln!(out, "job {}: the processes it left running ended · {}", x.job, one_line(&x.cmd, 120));
        } else {
            let _ = writeln!(
                out,
                "job {} ended: {} · {} · {}",
                x.job,
                ending(x.state, x.exit_code, x.signal),
                duration(x.duration_ms),
                one_line(&x.cmd, 120)
            );
        }
        for l in &x.last_lines {
            let _ = writeln!(out, "  {l}");
        }
        let changes: Vec<&str> =
            x.state_changes.iter().map(String::as_str).filter(|c| !c.starts_with("state recorded (")).collect();
        if !changes.is_empty() {
            let _ = writeln!(out, "  shell state: {}", changes.join(", "));
        }
        if let Some(n) = &x.state_note {
            let _ = writeln!(out, "  shell {n}");
        }
        for c in &x.state_conflicts {
            let _ = writeln!(out, "  {c}");
        }
    }
    out
}

/// The announcements a result in JSON carries (its `announcements`), as [`announcements`] renders them;
/// empty when it has none.
pub fn announcements_of(result: &Value) -> String {
    let a: Vec<Announcement> = serde_json::from_value(result["announcements"].clone()).unwrap_or_default();
    announcements(&a)
}

/// A `jobs` listing as a table a person (or a model) reads: id, state, time, output, command.
/// The line after a job listing that leaves older ended jobs out: how many, and how to list them.
pub fn jobs_older(older: u64, before: Option<u64>) -> String {
    match (older, before) {
        (0, _) | (_, None) => String::new(),
        (1, Some(b)) => format!("… 1 older ended job not listed: list it with before={b}\n"),
        (n, Some(b)) => {
            format!("… {n} older ended jobs not listed: list them with before={b} (and a limit up to 10000)\n")
        }
    }
}

pub fn jobs_table(jobs: &[JobSummary]) -> String {
    if jobs.is_empty() {
        return "no jobs in this session\n".to_owned();
    }
    let states: Vec<String> = jobs
        .iter()
        .map(|j| {
            let mut state = ending(j.state, j.exit_code, j.signal);
            if j.state == JobPhase::Running {
                state = "running".to_owned();
            }
            if let Some(k) = &j.kept {
                state = format!("{state}, kept {k}");
            }
            if !j.survivors.is_empty() {
                state = format!("{state} +{}", j.survivors.len());
            }
            state
        })
        .collect();
    // The column is as wide as its widest state (a kept job's name makes it wider), at least 16.
    let w = states.iter().map(|s| s.chars().count()).max().unwrap_or(0).max(16);
    let mut out = format!("{:>4}  {:<w$}  {:>9}  {:>9}  {}\n", "JOB", "STATE", "TIME", "OUTPUT", "COMMAND");
    for (j, state) in jobs.iter().zip(states) {
        let _ = writeln!(
            out,
            "{:>4}  {:<w$}  {:>9}  {:>9}  {}",
            j.job,
            state,
            duration(j.duration_ms),
            bytes(j.stdout_bytes + j.stderr_bytes),
            one_line(&j.cmd, 80)
        );
    }
    out
}

/// `850 µs`, `12 ms`, `1.4 s`, `2 min 3 s`, `1 h 2 min`: one fixed rounding per range.
pub fn duration(ms: f64) -> String {
    let ms = if ms.is_finite() && ms > 0.0 { ms } else { 0.0 };
    if ms < 1.0 {
        format!("{:.0} µs", ms * 1000.0)
    } else if ms < 10.0 {
        format!("{ms:.1} ms")
    } else if ms < 1000.0 {
        format!("{ms:.0} ms")
    } else if ms < 60_000.0 {
        format!("{:.1} s", ms / 1000.0)
    } else if ms < 3_600_000.0 {
        let s = (ms / 1000.0).round() as u64;
        format!("{} min {} s", s / 60, s % 60)
    } else {
        let m = (ms / 60_000.0).round() as u64;
        format!("{} h {} min", m / 60, m % 60)
    }
}

/// `512 B`, `3.4 KiB`, `12.0 MiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

/// The program a command line runs, without its directory: `/usr/bin/python3 -m http.server` →
/// `python3`. A `bash -c …` names what bash runs, cut short.
pub fn command_name(cmdline: &str) -> String {
    let mut words = cmdline.split_whitespace();
    let first = words.next().unwrap_or("");
    let name = first.rsplit('/').next().unwrap_or(first);
    if matches!(name, "bash" | "sh") {
        let rest: Vec<&str> = words.collect();
        if let Some(i) = rest.iter().position(|w| *w == "-c") {
            let script = rest[i + 1..].join(" ");
            // heddle's own wrapper around a job's command is no name a person can use.
            if script.starts_with("__heddle_") {
                return format!("{name} (the job's shell)");
            }
            if !script.is_empty() {
                return format!("{name} -c {}", one_line(&script, 40));
            }
        }
    }
    if name.is_empty() {
        "?".to_owned()
    } else {
        name.to_owned()
    }
}

/// `s` on one line (newlines as `⏎`), cut to `max` characters with `…`.
pub fn one_line(s: &str, max: usize) -> String {
    let flat: String = s.chars().map(|c| if c == '\n' { '⏎' } else { c }).collect();
    if flat.chars().count() <= max {
        flat
    } else {
        let mut cut: String = flat.chars().take(max.saturating_sub(1)).collect();
        cut.push('…');
        cut
    }
}

/// Signal names for the numbers Linux uses on x86-64 and arm64.
pub fn signal_name(sig: i32) -> String {
    let name = match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        5 => "SIGTRAP",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        10 => "SIGUSR1",
        11 => "SIGSEGV",
        12 => "SIGUSR2",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        24 => "SIGXCPU",
        25 => "SIGXFSZ",
        31 => "SIGSYS",
        _ => return format!("signal {sig}"),
    };
    name.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::FileResult;

    fn exited(code: i32, view: &str) -> JobResult {
        JobResult {
            job: 7,
            state: JobPhase::Exited,
            exit_code: Some(code),
            duration_ms: 1400.0,
            view: view.into(),
            ..Default::default()
        }
    }

    #[test]
    fn the_watched_part_speaks_outside_a_repository_and_only_when_it_has_news_inside_one() {
        use crate::results::{ChangedPath, Effects, ProjectLedger, WatchedLedger};
        let watched = |changed: Vec<ChangedPath>| WatchedLedger {
            roots: vec!["/w".into()],
            confidence: "complete".into(),
            changed,
            ..Default::default()
        };
        let gone = ChangedPath { path: "/w/gone".into(), change: "deleted".into(), from: None, under: 0 };
        let outside =
            ProjectLedger { confidence: "none".into(), reason: Some("no work tree".into()), ..Default::default() };
        let mut r = exited(0, "");
        r.effects = Some(Effects {
            project: outside.clone(),
            watched: Some(watched(vec![gone.clone()])),
            ..Default::default()
        });
        assert_eq!(job_result(&r), "exit 0 · 1.4 s · job 7\neffects: /w/gone (deleted)\n");
        let folded = ChangedPath { path: ".venv".into(), change: "untracked-new".into(), from: None, under: 1834 };
        let p = ProjectLedger {
            root: Some("/p".into()),
            confidence: "complete".into(),
            changed: vec![folded],
            ..Default::default()
        };
        r.effects = Some(Effects { project: p, ..Default::default() });
        assert_eq!(job_result(&r), "exit 0 · 1.4 s · job 7\neffects: .venv/ (1834 untracked-new paths below it)\n");
        let venv = ChangedPath { path: "/w/.venv".into(), change: "added".into(), from: None, under: 1834 };
        r.effects =
            Some(Effects { project: outside.clone(), watched: Some(watched(vec![venv])), ..Default::default() });
        assert_eq!(job_result(&r), "exit 0 · 1.4 s · job 7\neffects: /w/.venv/ (added, with 1834 paths below it)\n");
        r.effects = Some(Effects { project: outside, watched: Some(watched(vec![])), ..Default::default() });
        assert_eq!(job_result(&r), "exit 0 · 1.4 s · job 7\neffects: nothing changed in /w\n");
        let inside = ProjectLedger { root: Some("/p".into()), confidence: "complete".into(), ..Default::default() };
        r.effects = Some(Effects { project: inside.clone(), watched: Some(watched(vec![])), ..Default::default() });
        assert_eq!(job_result(&r), "exit 0 · 1.4 s · job 7\neffects: nothing changed in /p\n");
        r.effects = Some(Effects { project: inside, watched: Some(watched(vec![gone])), ..Default::default() });
        assert!(job_result(&r).ends_with("effects: nothing changed in /p\neffects: /w/gone (deleted)\n"));
    }

    #[test]
    fn an_ended_job_leads_with_its_exit_and_ends_with_a_newline() {
        assert_eq!(job_result(&exited(2, "boom")), "exit 2 · 1.4 s · job 7\nboom\n");
        assert_eq!(job_result(&exited(0, "")), "exit 0 · 1.4 s · job 7\n");
    }

    #[test]
    fn a_running_job_names_the_call_that_waits_for_it() {
        let r = JobResult {
            job: 3,
            state: JobPhase::Running,
            duration_ms: 10_000.0,
            liveness: Some(Liveness {
                running_ms: 10_000,
                cpu_ms: Some(12.0),
                last_output_ms_ago: Some(950),
                activity: Some("sleeping on a timer".into()),
                busy_pid: Some(812),
                busy_cmdline: Some("/usr/bin/sleep 300".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let t = job_result(&r);
        assert_eq!(t.lines().next(), Some(r#"still running after 10.0 s · job 3 · wait with {"job":3}"#));
        assert!(
            t.contains(
                "liveness: running 10.0 s · cpu 12 ms · last output 950 ms ago · sleeping on a timer: sleep (pid 812)"
            ),
            "{t}"
        );
    }

    #[test]
    fn notes_come_one_per_line_in_a_fixed_order() {
        let mut r = exited(0, "ok\n");
        r.state_note = Some("state unknown after this call; carrying the previous state".into());
        r.state_changes = vec!["state recorded (17 items)".into(), "cwd → /tmp".into(), "+export FOO".into()];
        r.survivors = vec![Survivor { pid: 44, cmdline: "/bin/sleep 100".into(), ..Default::default() }];
        r.refusals = vec!["/etc/x was not written: outside the writable roots".into()];
        r.files = vec![FileResult { path: "a".into(), written: false, error: Some("exists".into()) }];
        r.oom_killed = true;
        let t = job_result(&r);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[2], "state unknown after this call; carrying the previous state");
        assert_eq!(lines[3], "shell state: cwd → /tmp, +export FOO");
        assert_eq!(
            lines[4],
            "1 process still alive after the job's end in job 7's cgroup: sleep (pid 44); kill the job to end them, or keep it"
        );
        assert_eq!(lines[5], "file not written: a (exists)");
        assert_eq!(lines[6], "refused: /etc/x was not written: outside the writable roots");
        assert!(lines[7].starts_with("out of memory"));
    }

    #[test]
    fn the_survivors_note_is_said_once_on_the_survivors_line() {
        let said = "1 process(es) of the job outlived its main process and still run in its cgroup; kill the job \
                    to end them, or keep it to let them outlive the session";
        for (note, left) in [
            (said.to_owned(), ""),
            (format!("first; {said}"), "first"),
            (format!("{said}; last"), "last"),
            (format!("a; {said}; b"), "a; b"),
        ] {
            assert_eq!(super::without_survivors_note(&note, true), left, "{note}");
            assert_eq!(super::without_survivors_note(&note, false), note, "no survivors line: the note stays");
        }
        let mut r = exited(0, "");
        r.survivors = vec![Survivor { pid: 44, cmdline: "sleep 100".into(), ..Default::default() }];
        r.note = Some(said.to_owned());
        assert!(!job_result(&r).contains("outlived"), "{}", job_result(&r));
    }

    #[test]
    fn announcements_follow_with_their_last_lines() {
        let mut r = exited(0, "");
        r.announcements = vec![Announcement {
            job: 5,
            cmd: "sleep 1; echo done".into(),
            state: JobPhase::Killed,
            signal: Some(9),
            duration_ms: 2500.0,
            last_lines: vec!["done".into()],
            ..Default::default()
        }];
        assert_eq!(
            job_result(&r),
            "exit 0 · 1.4 s · job 7\njob 5 ended: killed by SIGKILL · 2.5 s · sleep 1; echo done\n  done\n"
        );
    }

    #[test]
    fn many_survivors_are_counted_not_listed() {
        let s: Vec<Survivor> =
            (0..20).map(|i| Survivor { pid: i, cmdline: format!("worker {i}"), ..Default::default() }).collect();
        assert!(survivors(&s).ends_with("worker (pid 7), and 12 more"), "{}", survivors(&s));
    }

    #[test]
    fn a_listing_that_leaves_older_jobs_out_says_how_many_and_how_to_list_them() {
        assert_eq!(jobs_older(0, None), "");
        assert_eq!(jobs_older(3, None), "", "no page to name: nothing to say");
        assert_eq!(jobs_older(1, Some(9)), "… 1 older ended job not listed: list it with before=9\n");
        assert_eq!(
            jobs_older(1450, Some(51)),
            "… 1450 older ended jobs not listed: list them with before=51 (and a limit up to 10000)\n"
        );
    }

    #[test]
    fn durations_and_sizes_round_one_way() {
        let got: Vec<String> = [0.25, 1.5, 12.4, 1400.0, 123_000.0, 7_380_000.0].iter().map(|m| duration(*m)).collect();
        assert_eq!(got, ["250 µs", "1.5 ms", "12 ms", "1.4 s", "2 min 3 s", "2 h 3 min"]);
        assert_eq!(duration(f64::NAN), "0 µs");
        assert_eq!([bytes(10), bytes(3500), bytes(5 << 20)], ["10 B", "3.4 KiB", "5.0 MiB"]);
    }

    #[test]
    fn command_names_drop_directories_and_show_what_bash_runs() {
        assert_eq!(command_name("/usr/bin/python3 -m http.server"), "python3");
        assert_eq!(command_name("bash -c sleep 100 && echo"), "bash -c sleep 100 && echo");
        assert_eq!(command_name(""), "?");
        assert_eq!(command_name("bash -c __heddle_o=$SHELLOPTS __heddle_b=$BASHOPTS;"), "bash (the job's shell)");
    }

    #[test]
    fn a_jobs_table_has_a_header_and_a_row_per_job() {
        let j = JobSummary {
            job: 1,
            cmd: "make\ntest".into(),
            state: JobPhase::Exited,
            exit_code: Some(0),
            ..Default::default()
        };
        let t = jobs_table(&[j]);
        assert!(t.starts_with(" JOB  STATE"), "{t}");
        assert!(t.lines().nth(1).unwrap().ends_with("make⏎test"), "{t}");
        assert_eq!(jobs_table(&[]), "no jobs in this session\n");
        // A kept job's long state widens the column for every row: the times stay in one column.
        let kept = JobSummary {
            job: 2,
            cmd: "serve".into(),
            state: JobPhase::Running,
            kept: Some("a-long-server-name".into()),
            ..Default::default()
        };
        let t = jobs_table(&[
            JobSummary { job: 1, state: JobPhase::Exited, exit_code: Some(0), ..Default::default() },
            kept,
        ]);
        let at: Vec<usize> = t.lines().map(|l| l.find("µs").or_else(|| l.find("TIME")).unwrap()).collect();
        assert!(at[1] == at[2], "{t}");
    }

    proptest::proptest! {
        #[test]
        fn any_result_renders_deterministically(code in proptest::option::of(-300i32..300), sig in proptest::option::of(0i32..70),
                                                ms in proptest::num::f64::ANY, view in ".{0,200}", cmd in ".{0,300}") {
            for state in [JobPhase::Running, JobPhase::Exited, JobPhase::Killed, JobPhase::Lost, JobPhase::Failed, JobPhase::Refused] {
                let r = JobResult { job: 1, state, exit_code: code, signal: sig, duration_ms: ms, view: view.clone(),
                    announcements: vec![Announcement { cmd: cmd.clone(), state, exit_code: code, signal: sig, duration_ms: ms, ..Default::default() }],
                    ..Default::default() };
                let a = job_result(&r);
                proptest::prop_assert_eq!(&a, &job_result(&r));
                proptest::prop_assert!(a.ends_with('\n'));
                proptest::prop_assert!(a.contains(&view));
            }
        }
    }
}
