//! `write`, `resize`, the `screen` and `scrollback` views of `output`, and `run {tty, stdin}`'s checks.
//!
//! ```text
//! → {"jsonrpc":"2.0","id":3,"method":"write","params":{"session":"s","job":4,"text":"1+1","keys":["Enter"]}}
//! ← {"jsonrpc":"2.0","id":3,"result":{"session":"s","job":4,"state":"running","bytes":4,"settled":true,
//!    "terminal":{"text":">>> 1+1\n2\n>>>\n","cursor":[2,4],"alternate_screen":false,…},…}}
//! ```

use crate::kernel::{clamp_wait, deadline, unknown_job, Client, Kernel};
use crate::rpc::{self, RpcError};
use crate::sessions::session::Session;
use crate::terminal::keys;
use protocol::results::{JobPhase, TerminalScreen, WriteResult};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use shm_proto::msg::{Command, JobId, StdinMode, MAX_INPUT_CHUNK};
use std::time::{Duration, Instant};

/// Default `yield_ms` of `write` and `resize`: how long the screen may take to settle.
pub const DEFAULT_WRITE_YIELD_MS: u64 = 2_000;
/// Default quiet time after which the screen counts as settled.
pub const DEFAULT_QUIET_MS: u64 = 100;
/// Bytes of `new_output` (a pipe job's lines since the write), as a job view's default budget.
pub const NEW_OUTPUT_BUDGET: usize = crate::output::view::DEFAULT_BUDGET;
/// Most bytes one `write` takes (the worker queues them; a job that reads slowly gets them in order).
pub const MAX_WRITE_BYTES: usize = 1 << 20;

/// `run {tty: {rows, cols}}`.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TtySize {
    pub rows: u16,
    pub cols: u16,
}

/// Check a terminal size.
pub fn check_size(method: &str, rows: u16, cols: u16) -> Result<(), RpcError> {
    if rows == 0 || cols < 2 || rows > crate::terminal::MAX_ROWS || cols > crate::terminal::MAX_COLS {
        return Err(RpcError::invalid_params(
            method,
            format!(
                "a terminal of {rows} rows × {cols} columns is not possible; give 1..={} rows and 2..={} columns \
                 (24 × 80 is the classic size)",
                crate::terminal::MAX_ROWS,
                crate::terminal::MAX_COLS
            ),
        ));
    }
    Ok(())
}

/// The stdin mode `run` asked for: `tty` (a terminal), `stdin: "pipe"`, or `/dev/null`.
pub fn stdin_mode(tty: Option<TtySize>, stdin: Option<&str>, persistent: bool) -> Result<StdinMode, RpcError> {
    let mode = match (tty, stdin) {
        (Some(_), Some(s)) if s != "tty" => {
            return Err(RpcError::invalid_params("run", "tty and stdin: \"pipe\" exclude each other; give one"))
        }
        (Some(t), _) => {
            check_size("run", t.rows, t.cols)?;
            StdinMode::Tty { rows: t.rows, cols: t.cols }
        }
        (None, None | Some("null")) => StdinMode::Null,
        (None, Some("pipe")) => StdinMode::Pipe,
        (None, Some("tty")) => StdinMode::Tty { rows: 24, cols: 80 },
        (None, Some(other)) => {
            return Err(RpcError::invalid_params(
                "run",
                format!("stdin {other:?} is not a mode; use \"null\" (the default), \"pipe\" or tty: {{rows, cols}}"),
            ))
        }
    };
    if persistent && mode != StdinMode::Null {
        return Err(RpcError::invalid_params(
            "run",
            "a persistent session runs its commands in one shell whose stdin is /dev/null; open a session without \
             persistent for terminal or stdin-pipe jobs",
        ));
    }
    Ok(mode)
}

/// Register the job's fed stdin (under the session's lock, before the worker hears of the job).
pub fn register(s: &Session, job: JobId, mode: StdinMode) {
    let size = match mode {
        StdinMode::Null => return,
        StdinMode::Pipe => None,
        StdinMode::Tty { rows, cols } => Some((rows, cols)),
    };
    s.lock().terminals_mut().add(job, size);
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteParams {
    session: String,
    job: JobId,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    keys: Vec<String>,
    #[serde(default)]
    eof: bool,
    #[serde(default)]
    yield_ms: Option<u64>,
    /// Output-free time after which the screen counts as settled (0: return at the first output).
    #[serde(default)]
    quiet_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ResizeParams {
    session: String,
    job: JobId,
    rows: u16,
    cols: u16,
    #[serde(default)]
    yield_ms: Option<u64>,
    #[serde(default)]
    quiet_ms: Option<u64>,
}

/// Why `write` cannot feed `job`, if it cannot.
fn feedable(s: &Session, job: JobId, method: &str) -> Result<bool, RpcError> {
    let st = s.lock();
    let Some(j) = st.job(job) else { return Err(unknown_job(s.name(), job)) };
    if j.state().ended() {
        let (code, signal) = j.exit();
        let how = match (code, signal) {
            (Some(c), _) => format!("exited {c}"),
            (_, Some(sig)) => format!("ended by signal {sig}"),
            _ => format!("{:?}", j.state()).to_lowercase(),
        };
        return Err(RpcError::invalid_params(
            method,
            format!("job {job} has ended ({how}), so there is nothing to type into; read its output with wait or output, or start a new job with run"),
        ));
    }
    match st.terminals().by_job.get(&job) {
        None => Err(RpcError::invalid_params(
            method,
            format!(
                "job {job} was started without a terminal or a stdin pipe, so its stdin is /dev/null and cannot be \
                 written; run the command with tty: {{rows, cols}} (a terminal) or stdin: \"pipe\""
            ),
        )),
        Some(f) if f.closed => Err(RpcError::invalid_params(
            method,
            format!("job {job}'s stdin was closed by an earlier write with eof: true; nothing more can be written"),
        )),
        Some(f) => Ok(f.term.is_some() || f.broken),
    }
}

pub(crate) fn call_write(k: &Kernel, client: &Client, params: Value) -> Result<WriteResult, RpcError> {
    let p: WriteParams = rpc::params("write", params)?;
    k.admit()?;
    let s = k.live_session(client, &p.session)?;
    let tty = feedable(&s, p.job, "write")?;
    let app_cursor = {
        let st = s.lock();
        st.terminals().by_job.get(&p.job).and_then(|f| f.term.as_ref()).is_some_and(|t| t.application_cursor())
    };
    let mut bytes = p.text.as_deref().unwrap_or_default().as_bytes().to_vec();
    for name in &p.keys {
        // A terminal's line discipline turns Enter's carriage return into the newline a program
        // reads; a pipe has none, so a pipe job is sent the newline itself.
        let key = match name.as_str() {
            "Enter" | "Return" if !tty => b"\n".to_vec(),
            _ => keys::key_bytes(name, app_cursor).map_err(|e| RpcError::invalid_params("write", e))?,
        };
        bytes.extend(key);
    }
    if bytes.is_empty() && !p.eof {
        return Err(RpcError::invalid_params("write", "nothing to write: give text, keys or eof: true"));
    }
    if bytes.len() > MAX_WRITE_BYTES {
        return Err(RpcError::invalid_params(
            "write",
            format!("{} bytes in one write is more than {MAX_WRITE_BYTES}; split it over several writes (they are delivered in order)", bytes.len()),
        ));
    }
    let control = p.text.as_deref().map(keys::control_in_text).unwrap_or_default();
    let sent = send_input(&s, p.job, &bytes, p.eof && !tty)?;
    if p.eof && tty {
        send_input(&s, p.job, &[], true)?;
    }
    let mut notes = Vec::new();
    if !control.is_empty() {
        notes.push(format!(
            "text held control characters, sent as typed: {}; use keys for named keys",
            control.join(", ")
        ));
    }
    finish(k, &s, p.job, bytes.len(), control, sent, p.yield_ms, p.quiet_ms, notes)
}

pub(crate) fn call_resize(k: &Kernel, client: &Client, params: Value) -> Result<WriteResult, RpcError> {
    let p: ResizeParams = rpc::params("resize", params)?;
    k.admit()?;
    check_size("resize", p.rows, p.cols)?;
    let s = k.live_session(client, &p.session)?;
    if !feedable(&s, p.job, "resize")? {
        return Err(RpcError::invalid_params(
            "resize",
            format!("job {} has a stdin pipe, not a terminal; only terminal jobs have a size", p.job),
        ));
    }
    let sent = {
        let mut st = s.lock();
        let f = st.terminals_mut().by_job.get_mut(&p.job).ok_or_else(|| unknown_job(s.name(), p.job))?;
        if let Some(t) = f.term.as_mut() {
            t.resize(p.rows, p.cols);
        }
        let seq = f.seq;
        Sent::mark(&st, p.job, seq)
    };
    s.send(&Command::Resize { job: p.job, rows: p.rows, cols: p.cols }, crate::kernel::SEND_TIMEOUT)
        .map_err(|e| RpcError::internal(format!("the resize could not be handed to the worker: {e}")))?;
    finish(k, &s, p.job, 0, Vec::new(), sent, p.yield_ms, p.quiet_ms, Vec::new())
}

/// Where the job's output stood when input went: what the answer's wait and `new_output` start from.
struct Sent {
    /// The feed's output sequence number.
    seq: u64,
    at: Instant,
    /// The job's first rendered line not complete yet and the rendered bytes before it.
    line: u64,
    bytes: u64,
}

impl Sent {
    fn mark(st: &crate::sessions::session::SessionData, job: JobId, seq: u64) -> Sent {
        let (line, bytes) = st.job(job).map_or((1, 0), |j| j.rendered().mark());
        Sent { seq, at: Instant::now(), line, bytes }
    }
}

/// Hand `data` to the worker in ring-sized pieces, in order, `eof` with the last; where the job's output
/// stood before it.
fn send_input(s: &Session, job: JobId, data: &[u8], eof: bool) -> Result<Sent, RpcError> {
    let sent = {
        let mut st = s.lock();
        let Some(f) = st.terminals_mut().by_job.get_mut(&job) else { return Err(unknown_job(s.name(), job)) };
        if eof && f.term.is_none() {
            f.closed = true;
        }
        let seq = f.seq;
        Sent::mark(&st, job, seq)
    };
    let mut pieces: Vec<&[u8]> = data.chunks(MAX_INPUT_CHUNK).collect();
    if pieces.is_empty() {
        pieces.push(&[]);
    }
    let last = pieces.len() - 1;
    for (i, piece) in pieces.into_iter().enumerate() {
        let cmd = Command::Input { job, data: piece.to_vec(), eof: eof && i == last };
        s.send(&cmd, crate::kernel::SEND_TIMEOUT).map_err(|e| {
            RpcError::internal(format!(
                "the input could not be handed to the worker ({e}); {} of {} bytes went; the job may have stopped reading",
                i * MAX_INPUT_CHUNK,
                data.len()
            ))
        })?;
    }
    Ok(sent)
}

/// Wait for the screen to settle, then answer.
#[allow(clippy::too_many_arguments)]
fn finish(
    k: &Kernel,
    s: &Session,
    job: JobId,
    bytes: usize,
    control_in_text: Vec<String>,
    sent: Sent,
    yield_ms: Option<u64>,
    quiet_ms: Option<u64>,
    mut notes: Vec<String>,
) -> Result<WriteResult, RpcError> {
    let (d, clamp_note) = clamp_wait("yield_ms", yield_ms, DEFAULT_WRITE_YIELD_MS);
    notes.extend(clamp_note);
    let until = deadline(d);
    let quiet = Duration::from_millis(quiet_ms.unwrap_or(DEFAULT_QUIET_MS).min(60_000));
    let settled = settle(k, s, job, sent.seq, sent.at, until, quiet);
    let waited_ms = sent.at.elapsed().as_millis() as u64;
    let running = s.lock().job(job).is_some_and(|j| j.state() == JobPhase::Running);
    // The probe (a round trip to the worker) tells whether the job now waits reading its terminal. A
    // caller that asked for the first output (`quiet_ms: 0`, a keystroke's echo) and got it is not made
    // to wait for it: the program is still answering then, and the probe was most of the call's time.
    let probe_it = running && !(settled && quiet.is_zero());
    let probe = if probe_it { crate::kernel::job_probe::probe(k, s, job) } else { None };
    let now = Instant::now();
    let mut st = s.lock();
    let terminal = st.terminals_mut().view(job, true);
    let Some(j) = st.job(job) else { return Err(unknown_job(s.name(), job)) };
    let (state, (exit_code, signal)) = (j.state(), j.exit());
    let mut liveness = j.liveness(now, probe.as_ref());
    // A pipe job (or one whose emulator failed) answers with the rendered lines since the write.
    let new_output = terminal
        .is_none()
        .then(|| crate::output::view::since(j.rendered(), sent.line, sent.bytes, NEW_OUTPUT_BUDGET, s.name(), job));
    waiting_for_input(&mut liveness, terminal.as_ref());
    Ok(WriteResult {
        session: s.name().to_owned(),
        job,
        state,
        exit_code,
        signal,
        bytes: bytes as u64,
        control_in_text,
        waited_ms,
        settled,
        terminal,
        new_output,
        liveness,
        note: (!notes.is_empty()).then(|| notes.join("; ")),
        announcements: st.take_announcements(now),
    })
}

/// Wait until output stopped for `quiet` after the write (with `quiet` 0: until the first output), the
/// job ended, or `until`; true when it settled.
fn settle(k: &Kernel, s: &Session, job: JobId, seq0: u64, sent: Instant, until: Instant, quiet: Duration) -> bool {
    let look = |st: &crate::sessions::session::SessionData| {
        let ended = st.job(job).is_none_or(|j| j.state().ended());
        let f = st.terminals().by_job.get(&job);
        (ended, f.map_or(seq0, |f| f.seq), f.and_then(|f| f.last_output))
    };
    let mut st = s.lock();
    let (mut seen, mut last) = (seq0, sent);
    loop {
        let (ended, seq, last_output) = look(&st);
        if ended || k.is_shutting_down() {
            return false;
        }
        if seq != seen {
            seen = seq;
            last = last_output.unwrap_or_else(Instant::now).max(sent);
        }
        let now = Instant::now();
        if quiet.is_zero() && seen != seq0 {
            return true;
        }
        if !quiet.is_zero() && now >= last + quiet {
            return true;
        }
        if now >= until {
            return false;
        }
        let wake = if quiet.is_zero() { until } else { (last + quiet).min(until) };
        st = s.wait_until(st, wake, k.shutdown_flag(), |st| {
            let (e, q, _) = look(st);
            e || q != seen
        });
    }
}

/// A terminal job whose process waits reading the terminal: say so with the prompt line.
pub fn waiting_for_input(liveness: &mut Option<protocol::results::Liveness>, terminal: Option<&TerminalScreen>) {
    let (Some(l), Some(t)) = (liveness.as_mut(), terminal) else { return };
    if l.activity.as_deref().is_some_and(|a| a.contains("reading stdin/tty")) {
        l.activity = Some(format!("waiting for input: {:?}", t.cursor_line));
    }
}

/// `output {screen: true}` / `output {scrollback: {from?, max?}}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ViewParams {
    session: String,
    job: JobId,
    #[serde(default)]
    screen: bool,
    #[serde(default)]
    scrollback: Option<ScrollbackParams>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScrollbackParams {
    #[serde(default)]
    from: Option<usize>,
    #[serde(default)]
    max: Option<usize>,
}

/// The answer of a terminal view.
#[derive(Serialize, Debug)]
pub struct TerminalViewResult {
    pub session: String,
    pub job: JobId,
    pub view: &'static str,
    /// `screen`: the screen (without consuming what scrolled by: the model view's count goes on).
    pub terminal: Option<TerminalScreen>,
    /// `scrollback`: `{line, text}` from `from`, numbered from the oldest line kept.
    pub lines: Vec<NumberedLine>,
    pub total_lines: usize,
    pub next: Option<Value>,
    pub note: Option<String>,
    pub announcements: Vec<protocol::results::Announcement>,
}

#[derive(Serialize, Debug)]
pub struct NumberedLine {
    pub line: usize,
    pub text: String,
}

/// True when an `output` call asks for a terminal view.
pub fn is_terminal_view(params: &Value) -> bool {
    params.get("screen").is_some() || params.get("scrollback").is_some()
}

pub(crate) fn call_view(k: &Kernel, client: &Client, params: Value) -> Result<TerminalViewResult, RpcError> {
    let p: ViewParams = rpc::params("output", params)?;
    let s = k.session(client, &p.session)?;
    let now = Instant::now();
    let mut st = s.lock();
    if !st.has_job(p.job) {
        return Err(unknown_job(s.name(), p.job));
    }
    let not_tty = || {
        RpcError::invalid_params(
            "output",
            format!("job {} has no terminal (it was not run with tty), so it has no screen; use the line views", p.job),
        )
    };
    let term = st.terminals_mut().by_job.get_mut(&p.job).and_then(|f| f.term.as_mut()).ok_or_else(not_tty)?;
    let mut r = TerminalViewResult {
        session: s.name().to_owned(),
        job: p.job,
        view: "screen",
        terminal: None,
        lines: Vec::new(),
        total_lines: 0,
        next: None,
        note: None,
        announcements: Vec::new(),
    };
    match (p.screen, p.scrollback) {
        (true, None) => r.terminal = Some(term.view(false)),
        (false, Some(sb)) => {
            let from = sb.from.unwrap_or(1).max(1);
            let max = sb.max.unwrap_or(500).clamp(1, 5000);
            let (lines, total) = term.scrollback(from, max);
            let last = from + lines.len();
            r.view = "scrollback";
            r.lines = lines.into_iter().enumerate().map(|(i, text)| NumberedLine { line: from + i, text }).collect();
            r.total_lines = total;
            if last <= total {
                r.next = Some(
                    serde_json::json!({"session": s.name(), "job": p.job, "scrollback": {"from": last, "max": max}}),
                );
            }
            r.note = Some(format!(
                "the scrollback keeps the last {} lines that left the screen; every byte is in the raw view",
                crate::terminal::SCROLLBACK
            ));
        }
        _ => return Err(RpcError::invalid_params("output", "give one of screen: true or scrollback: {from?, max?}")),
    }
    r.announcements = st.take_announcements(now);
    Ok(r)
}

/// What a program says when it wanted a terminal or input and found `/dev/null` (lower case).
const WANTED_INPUT: [&str; 9] = [
    "not a tty",
    "not a terminal",
    "inappropriate ioctl for device",
    "no tty present",
    "eoferror",
    "unexpected end of input",
    "eof on stdin",
    "input is not from a terminal",
    "must be run from a terminal",
];

/// A pipe job that ended non-zero complaining about no terminal or EOF on stdin: say that `tty` mode
/// (or a stdin pipe) would have let it be answered.
pub fn point_to_tty(r: &mut protocol::results::JobResult) {
    if r.state == JobPhase::Running || r.exit_code == Some(0) {
        return;
    }
    let tail: String = r.view.lines().rev().take(20).collect::<Vec<_>>().join("\n");
    // ASCII lowering keeps byte offsets: the words are quoted as the command wrote them (`EOFError`).
    let lower = tail.to_ascii_lowercase();
    if let Some(hit) = WANTED_INPUT.iter().find_map(|w| lower.find(w).map(|i| &tail[i..i + w.len()])) {
        let note = format!(
            "the command seems to have wanted a terminal or input (its output says \"{hit}\"), and its stdin is \
             /dev/null; run it with tty: {{rows, cols}} and answer it with write (or stdin: \"pipe\")"
        );
        r.note = Some(match r.note.take() {
            Some(n) => format!("{n}; {note}"),
            None => note,
        });
    }
}
