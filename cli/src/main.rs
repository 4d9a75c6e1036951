//! `heddle`: start the stack (`up`) and drive it over the control socket (`run`, `wait`, `kill`, `jobs`,
//! `output`, `describe`, `close`, `call`). Glue only: the client and the launcher live in the library.
#![deny(unsafe_code)]

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use cli::client::Client;
use serde_json::{json, Value};
use std::io::Write;
use std::path::PathBuf;

/// Exit status of `heddle run`/`heddle wait` when the job is still running after the yield.
const EXIT_STILL_RUNNING: i32 = 75;

#[derive(Parser)]
#[command(name = "heddle", version, about = "A job system for AI agents' shell tools")]
struct Cli {
    /// Control socket (default: $HEDDLE_SOCKET, $XDG_RUNTIME_DIR/heddle/heddle.sock, or /run/heddle/heddle.sock for root).
    #[arg(long, global = true, env = "HEDDLE_SOCKET")]
    socket: Option<PathBuf>,
    /// Session name to use (reattached by name; `run`, `check`, `checks`, `describe` and `mcp` open it if
    /// missing, `jobs`, `wait`, `kill`, `output` and `keep` say it is not open) [default: "default"; for
    /// `mcp`, a fresh session].
    #[arg(long, global = true)]
    session: Option<String>,
    /// Print the raw JSON result instead of the text form.
    #[arg(long, global = true)]
    json: bool,
    /// Open the session with the network on (default: the policy's; both builtin profiles: off). Only a
    /// session this call opens: an existing one keeps its network (pick a new `--session` name).
    #[arg(long, global = true)]
    network: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start the supervisor and the front in the foreground; SIGINT/SIGTERM stop both.
    Up(cli::up::UpArgs),
    /// Run a command as a job and print its result in the text form a model reads; exit with the job's
    /// status (75 if still running after the yield).
    Run {
        /// Milliseconds to wait before returning with the job still running.
        #[arg(long = "yield")]
        yield_ms: Option<u64>,
        /// Working directory of the session when it is opened by this call (default: the current one).
        #[arg(long)]
        cwd: Option<PathBuf>,
        /// Pass one guard that refuses this command (its name, from the refusal), with `--reason`; audited.
        #[arg(long = "override", value_name = "RULE", requires = "reason")]
        override_rule: Option<String>,
        /// Why the guard is overridden (recorded in the audit log).
        #[arg(long, value_name = "TEXT", requires = "override_rule")]
        reason: Option<String>,
        /// The effects ledger: `paths` (default), `diff` (adds a bounded unified diff) or `none`.
        #[arg(long, value_name = "MODE", value_parser = ["paths", "diff", "none"])]
        effects: Option<String>,
        /// The command (several words are joined with spaces).
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        cmd: Vec<String>,
    },
    /// Wait for a job to end.
    Wait {
        job: u64,
        #[arg(long = "yield")]
        yield_ms: Option<u64>,
    },
    /// Kill a job (its whole cgroup).
    Kill {
        job: u64,
        /// SIGTERM first, then cgroup.kill after this many milliseconds.
        #[arg(long)]
        grace: Option<u64>,
    },
    /// List the session's jobs as a table (`--json` for the JSON): every job not yet ended and the
    /// newest ended ones (50 unless `--limit`); a last line says how many older ones were left out.
    Jobs {
        /// How many ended jobs to list (at most 10000).
        #[arg(long)]
        limit: Option<u64>,
        /// List only ended jobs older than this job id (the last line of a listing names it).
        #[arg(long)]
        before: Option<u64>,
    },
    /// Run one of the project's checks (`.heddle/checks.toml`, else detected) as a job: the routing,
    /// the runner's counts and failing tests, then the output. Words after `--` are added as arguments.
    Check {
        /// The check's name (`heddle checks` lists them); default: the first.
        name: Option<String>,
        #[arg(long = "yield")]
        yield_ms: Option<u64>,
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// List the project's checks, where each came from, and their last runs.
    Checks,
    /// Print a job's stored output through a view (redacted, like the model's): `--lines A:B`,
    /// `--tail N`, `--grep RE`, `--errors`; `--raw` prints the bytes as written, unredacted. Without
    /// one, the last 200 lines.
    Output {
        job: u64,
        /// Which stream: stdout, stderr or both (raw bytes: stdout or stderr).
        #[arg(long)]
        stream: Option<String>,
        /// Lines A to B (1-based, inclusive), as an omission marker names them: `--lines 120:480`.
        #[arg(long, value_name = "A:B")]
        lines: Option<String>,
        /// The last N lines.
        #[arg(long, value_name = "N")]
        tail: Option<u64>,
        /// Lines matching a regular expression, with `--context` lines around each.
        #[arg(long, value_name = "RE")]
        grep: Option<String>,
        #[arg(long, default_value_t = 2)]
        context: u32,
        /// Error-shaped lines with context.
        #[arg(long)]
        errors: bool,
        /// The raw bytes as the job wrote them, unredacted.
        #[arg(long)]
        raw: bool,
    },
    /// Describe the server and the session.
    Describe,
    /// Close a session (NAME, else `--session`, else `default`), killing what still runs in it; what
    /// ended unseen is shown. A session that is not open is an error (nothing is opened to be closed).
    Close {
        /// The session to close.
        name: Option<String>,
    },
    /// Call any method with JSON params (for scripting and debugging). A method that takes a session
    /// gets the `--session` one when the params name none; job and write results print as text
    /// (`--json`: the JSON), the rest as JSON.
    Call { method: String, params: Option<String> },
    /// Keep a job: move its processes out of the session (to `kept/NAME`) so they outlive it.
    Keep { job: u64, name: String },
    /// List kept jobs with their processes as a table (`--json` for the JSON); `heddle kept kill NAME`
    /// ends one.
    Kept {
        #[command(subcommand)]
        action: Option<KeptAction>,
    },
    /// Serve MCP on stdin/stdout for an agent's host (its MCP server `command`): one session per
    /// bridge, attached by `--session NAME` (opened if missing) or fresh, in the current directory.
    Mcp {
        /// Working directory of a session this opens (default: the current one).
        #[arg(long)]
        cwd: Option<PathBuf>,
        /// Close the session when the bridge exits (default: it stays, so a restarted host finds its jobs).
        #[arg(long)]
        close_on_exit: bool,
        /// Copy every message through this process instead of handing stdin and stdout to the server
        /// (the default when they are pipes or sockets: no extra hop per call).
        #[arg(long)]
        relay: bool,
    },
}

#[derive(Subcommand)]
enum KeptAction {
    /// End a kept job: cgroup.kill, verified empty, removed.
    Kill { name: String },
    /// Print the end of what a kept job wrote after its session ended.
    Log {
        name: String,
        /// How many bytes from the end (at most 1 MiB).
        #[arg(long, default_value_t = 16384)]
        tail_bytes: u64,
    },
}

/// Print to stdout; a reader that went away (`heddle jobs | head`) ends the CLI quietly with 141
/// (128 + SIGPIPE, what a shell reports for a command killed by it) instead of a panic.
fn write_out(text: &str) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(141);
        }
        eprintln!("heddle: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}

macro_rules! out {
    ($($t:tt)*) => { write_out(&format!($($t)*)) };
}

macro_rules! outln {
    ($($t:tt)*) => { write_out(&(format!($($t)*) + "\n")) };
}

fn main() {
    let cli = Cli::parse();
    // The session an error's suggested calls name (`heddle call` prints the server's sentence as is).
    let session = match &cli.cmd {
        Cmd::Close { name: Some(n) } => Some(n.clone()),
        Cmd::Call { .. } => None,
        _ => Some(cli.session.clone().unwrap_or_else(|| "default".to_owned())),
    };
    match real_main(cli) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            let broken_pipe = e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            });
            if broken_pipe {
                // The reader went away (`heddle output 3 --raw | head`): quiet, as SIGPIPE would be.
                std::process::exit(141);
            }
            let said = format!("{e:#}");
            match session {
                Some(s) => eprintln!("heddle: {}", cli::calls::error_for_the_cli(&said, &s)),
                None => eprintln!("heddle: {said}"),
            }
            std::process::exit(2);
        }
    }
}

fn real_main(cli: Cli) -> Result<i32> {
    let socket = cli.socket.clone().unwrap_or_else(cli::paths::default_socket);
    if let Cmd::Up(args) = &cli.cmd {
        let mut args = args.clone();
        args.socket.get_or_insert(socket);
        return cli::up::run_up(&args);
    }
    if let Cmd::Run { cmd, .. } = &cli.cmd {
        // The command takes every word after the options, so a mistyped option became a command that
        // bash could only answer "command not found" (`heddle run --yield-ms 0 make`).
        if let Some(first) = cmd.first().filter(|w| w.starts_with('-') && w.len() > 1 && w.as_str() != "--") {
            anyhow::bail!(
                "`heddle run` has no option '{first}' (its options: --yield MS, --cwd DIR, --override RULE \
                 --reason TEXT, --effects MODE; see `heddle run --help`); nothing was run"
            );
        }
    }
    let mut client = connect(&socket, matches!(cli.cmd, Cmd::Run { .. } | Cmd::Mcp { .. }))?;
    if let Cmd::Mcp { cwd, close_on_exit, relay } = &cli.cmd {
        let cwd = match cwd {
            Some(c) => c.clone(),
            None => std::env::current_dir().context("the current directory is needed as the session's cwd")?,
        };
        let attach = cli::mcp_bridge::Attach {
            session: cli.session.clone(),
            cwd,
            close_on_exit: *close_on_exit,
            network: cli.network.then_some(true),
            relay: *relay,
            reconnect_to: Some(socket.clone()),
        };
        return cli::mcp_bridge::bridge(client, &attach);
    }
    if let Cmd::Kept { action } = &cli.cmd {
        let result = match action {
            None => {
                let r = client.call("kept", json!({}))?;
                if !cli.json {
                    out!("{}", kept_table(&r));
                    return Ok(0);
                }
                r
            }
            Some(KeptAction::Kill { name }) => {
                let r = client.call("kept.kill", json!({"name": name}))?;
                if !cli.json {
                    let killed: Vec<protocol::results::Survivor> =
                        serde_json::from_value(r["killed"].clone()).unwrap_or_default();
                    let what = match killed.is_empty() {
                        true => "nothing was left running".to_owned(),
                        false => format!("killed {}", protocol::text::survivors(&killed)),
                    };
                    let empty = match r["verified_empty"] == json!(true) {
                        true => "its cgroup is empty and removed",
                        false => "its cgroup was NOT seen empty: `heddle kept` lists what remains",
                    };
                    outln!("kept job {name}: {what}; {empty}");
                    return Ok(0);
                }
                r
            }
            Some(KeptAction::Log { name, tail_bytes }) => {
                let r = client.call("kept.log", json!({"name": name, "tail_bytes": tail_bytes}))?;
                if !cli.json {
                    out!("{}", r["text"].as_str().unwrap_or_default());
                    return Ok(0);
                }
                r
            }
        };
        outln!("{}", serde_json::to_string_pretty(&result)?);
        return Ok(0);
    }
    if let Cmd::Call { method, params } = &cli.cmd {
        return call(&mut client, &cli, method, params.as_deref());
    }
    if let Cmd::Close { name } = &cli.cmd {
        let name = name.as_deref().or(cli.session.as_deref()).unwrap_or("default");
        let r = client.call("session.close", json!({"session": name}))?;
        match cli.json {
            true => outln!("{}", serde_json::to_string_pretty(&r)?),
            false => out!("{}", close_text(&r)),
        }
        return Ok(0);
    }
    let cwd = match &cli.cmd {
        Cmd::Run { cwd: Some(c), .. } => c.clone(),
        _ => std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
    };
    let name = cli.session.as_deref().unwrap_or("default");
    let mut open_params = json!({"name": name, "cwd": cwd});
    if cli.network {
        open_params["network"] = json!(true);
    }
    // A command about jobs already run names its session; it does not open one (a typo in --session
    // opened an empty session and answered "no jobs in this session").
    let about_jobs = matches!(
        cli.cmd,
        Cmd::Wait { .. } | Cmd::Kill { .. } | Cmd::Jobs { .. } | Cmd::Output { .. } | Cmd::Keep { .. }
    );
    let open = match about_jobs {
        true => json!({"session": name}),
        false => client.call("session.open", open_params)?,
    };
    if cli.network && open["attached"] == json!(true) && !session_has_network(&mut client, &open["session"]) {
        eprintln!(
            "heddle: session '{name}' was already open with the network off, so --network changed nothing (a \
             session's network is fixed when it opens); close it (`heddle --session {name} close`) or name a new one with --session"
        );
    }
    if let (Cmd::Run { cwd: Some(_), .. }, Some(note)) = (&cli.cmd, open["note"].as_str()) {
        // A --cwd given to a session that already exists (or carries on after a restart) is not applied:
        // say so where a person looks (the job runs in the session's own cwd).
        eprintln!("heddle: {note} (a new session: --session NAME)");
    }
    if let (Cmd::Run { cwd: None, .. }, Some(note)) = (&cli.cmd, elsewhere_note(&open, &cwd)) {
        eprintln!("heddle: {note}");
    }
    let session = open["session"].clone();
    let (result, is_job) = match cli.cmd {
        Cmd::Up(_) | Cmd::Kept { .. } | Cmd::Mcp { .. } => unreachable!("handled above"),
        Cmd::Keep { job, name } => {
            let r = client.call("keep", json!({"session": session, "job": job, "name": name}))?;
            if !cli.json {
                let procs: Vec<protocol::results::Survivor> =
                    serde_json::from_value(r["procs"].clone()).unwrap_or_default();
                let what = match procs.is_empty() {
                    true => "nothing of it runs now".to_owned(),
                    false => protocol::text::survivors(&procs),
                };
                outln!(
                    "job {job} kept as {name}: its processes ({what}) live in kept/{name} and outlive the session; \
                     `heddle kept kill {name}` ends them, `heddle kept log {name}` shows what they write"
                );
                if let Some(n) = r["note"].as_str() {
                    outln!("{n}");
                }
                out!("{}", protocol::text::announcements_of(&r));
                return Ok(0);
            }
            (r, false)
        }
        Cmd::Run { yield_ms, cmd, override_rule, reason, effects, .. } => {
            let mut params = json!({"session": session, "cmd": cmd.join(" "), "yield_ms": yield_ms});
            if let Some(mode) = effects {
                params["effects"] = json!(mode);
            }
            if let (Some(rule), Some(reason)) = (override_rule, reason) {
                params["override"] = json!({"rule": rule, "reason": reason});
            }
            (client.call("run", params)?, true)
        }
        Cmd::Wait { job, yield_ms } => {
            (client.call("wait", json!({"session": session, "job": job, "yield_ms": yield_ms}))?, true)
        }
        Cmd::Kill { job, grace } => {
            (client.call("kill", json!({"session": session, "job": job, "grace_ms": grace}))?, true)
        }
        Cmd::Check { name, yield_ms, args } => {
            let params = json!({"session": session, "name": name, "args": args, "yield_ms": yield_ms});
            (client.call("check", params)?, true)
        }
        Cmd::Checks => {
            let r = client.call("checks", json!({"session": session}))?;
            if !cli.json {
                out!("{}{}", protocol::text::checks(&r), protocol::text::announcements_of(&r));
                return Ok(0);
            }
            (r, false)
        }
        Cmd::Jobs { limit, before } => {
            // A person looking takes no announcements: they stay for the session's next call (an agent's).
            let mut params = json!({"session": session, "announce": false});
            if let Some(n) = limit {
                params["limit"] = json!(n);
            }
            if let Some(b) = before {
                params["before"] = json!(b);
            }
            let r = client.call("jobs", params)?;
            if !cli.json {
                let jobs: protocol::results::JobsResult =
                    serde_json::from_value(r).context("the jobs result is not in the protocol's shape")?;
                let older = match jobs.older_before {
                    Some(b) if jobs.older > 0 => format!(
                        "… {} older ended job{} not listed: heddle jobs --before {b} [--limit N, up to 10000]\n",
                        jobs.older,
                        if jobs.older == 1 { "" } else { "s" }
                    ),
                    _ => String::new(),
                };
                out!(
                    "{}{}{}",
                    protocol::text::jobs_table(&jobs.jobs),
                    older,
                    protocol::text::announcements(&jobs.announcements)
                );
                return Ok(0);
            }
            (r, false)
        }
        Cmd::Output { job, stream, lines, tail, grep, context, errors, raw } => {
            let view = match (lines, tail, grep, errors, raw) {
                (Some(l), None, None, false, false) => {
                    let (a, b) = l.split_once([':', '-', ',']).context("--lines takes A:B, e.g. --lines 120:480")?;
                    let (a, b): (u64, u64) = (
                        a.trim().parse().context("--lines A:B: A is a line number")?,
                        b.trim().parse().context("--lines A:B: B is a line number")?,
                    );
                    json!({"lines": [a, b]})
                }
                (None, Some(n), None, false, false) => json!({"tail": n}),
                (None, None, Some(re), false, false) => json!({"grep": {"pattern": re, "context": context}}),
                (None, None, None, true, false) => json!({"errors": true}),
                (None, None, None, false, true) => {
                    return print_output(&mut client, &session, job, stream.as_deref().unwrap_or("stdout"))
                }
                (None, None, None, false, false) => json!({"tail": 200}),
                _ => anyhow::bail!("give one view: --lines A:B, --tail N, --grep RE, --errors or --raw"),
            };
            let mut params = view;
            params["session"] = session.clone();
            params["job"] = json!(job);
            params["announce"] = json!(false);
            if let Some(st) = stream {
                params["stream"] = json!(st);
            }
            let r = client.call("output", params)?;
            if cli.json {
                outln!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                print_view(&r);
            }
            return Ok(0);
        }
        Cmd::Describe => {
            // A person looking takes no announcements (they stay for the session's next call).
            let r = client.call("describe", json!({"session": session, "announce": false}))?;
            if !cli.json {
                out!(
                    "{}(`heddle --json describe`: the whole description, with the sandbox's rules)\n{}",
                    protocol::text::describe(&r),
                    protocol::text::announcements_of(&r)
                );
                return Ok(0);
            }
            (r, false)
        }
        Cmd::Close { .. } => unreachable!("handled above"),
        Cmd::Call { .. } => unreachable!("handled above"),
    };
    if cli.json || !is_job {
        outln!("{}", serde_json::to_string_pretty(&result)?);
        return Ok(0);
    }
    print_job(&result)
}

/// A `session.close` result as a person reads it: what was killed, what lives on, what ended unseen.
fn close_text(r: &Value) -> String {
    let survivors: Vec<protocol::results::Survivor> =
        serde_json::from_value(r["survivors"].clone()).unwrap_or_default();
    let killed = r["killed"].as_u64().unwrap_or(0);
    let name = r["session"].as_str().unwrap_or("?");
    let more = r["survivors_more"].as_u64().unwrap_or(0);
    let processes = |n: u64| if n == 1 { "1 process".to_owned() } else { format!("{n} processes") };
    let what = match (killed, survivors.is_empty(), more) {
        (0, _, _) => "nothing was running".to_owned(),
        (n, true, _) => format!("killed {}", processes(n)),
        (n, false, 0) => format!("killed {}: {}", processes(n), protocol::text::survivors(&survivors)),
        (n, false, m) => {
            format!("killed {}: {}, and {m} more not listed", processes(n), protocol::text::survivors(&survivors))
        }
    };
    let verified = match r["verified_empty"].as_bool() {
        Some(true) => "its cgroups verified empty",
        _ => "its cgroups NOT verified empty",
    };
    let mut out = format!("session '{name}' closed: {what}; {verified}\n");
    if let Some(note) = r["note"].as_str() {
        out.push_str(&format!("note: {note}\n"));
    }
    let kept: Vec<&str> = r["kept"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    if !kept.is_empty() {
        out.push_str(&format!("kept jobs live on: {} (`heddle kept` lists them)\n", kept.join(", ")));
    }
    out.push_str(&protocol::text::announcements_of(r));
    out
}

fn connect(socket: &std::path::Path, may_start: bool) -> Result<Client> {
    match Client::connect(socket) {
        Ok(c) => Ok(c),
        Err(e)
            if may_start
                && matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused) =>
        {
            eprintln!("heddle: no server answers at {}; starting one in the background", socket.display());
            let log = cli::up::start_background(socket)?;
            eprintln!("heddle: server started (log: {})", log.display());
            Ok(Client::connect(socket)?)
        }
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Err(e).with_context(|| {
            format!(
                "permission denied connecting to heddle at {}: only root and the socket's group may connect \
                 (ask the administrator to add you to the group given to `heddle up --socket-group`)",
                socket.display()
            )
        }),
        Err(e) => {
            Err(e).with_context(|| format!("cannot reach heddle at {} (start it with `heddle up`)", socket.display()))
        }
    }
}

/// Methods whose params name a session: `heddle call` fills in the `--session` one (opened if
/// missing) when the params do not name one.
const SESSION_METHODS: [&str; 11] =
    ["run", "wait", "kill", "jobs", "output", "keep", "write", "resize", "check", "checks", "session.close"];

/// `heddle call METHOD [PARAMS]`: the method's JSON result (`--json` or not), except that results with
/// a text form (a job's, a write's) are printed as text unless `--json`; the session of `--session`
/// (default `default`) is filled in for methods that take one.
fn call(client: &mut Client, cli: &Cli, method: &str, params: Option<&str>) -> Result<i32> {
    let mut params: Value = match params {
        Some(p) => serde_json::from_str(p).context("params must be JSON")?,
        None => json!({}),
    };
    if SESSION_METHODS.contains(&method) && params.is_object() && params.get("session").is_none() {
        let name = cli.session.as_deref().unwrap_or("default");
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        let mut open = json!({"name": name, "cwd": cwd});
        if cli.network {
            open["network"] = json!(true);
        }
        params["session"] = client.call("session.open", open)?["session"].clone();
    }
    let result = client.call(method, params)?;
    if cli.json {
        outln!("{}", serde_json::to_string_pretty(&result)?);
        return Ok(0);
    }
    match method {
        "run" | "wait" | "kill" | "check" => print_job(&result),
        "write" | "resize" => {
            let r: protocol::results::WriteResult =
                serde_json::from_value(result).context("the write result is not in the protocol's shape")?;
            out!("{}", cli::calls::for_the_cli(&protocol::text::write_result(&r), &r.session));
            Ok(0)
        }
        _ => {
            outln!("{}", serde_json::to_string_pretty(&result)?);
            Ok(0)
        }
    }
}

/// Print a job result in the text form (the one a model reads through MCP); returns the exit status
/// to use.
fn print_job(r: &Value) -> Result<i32> {
    let r: protocol::results::JobResult =
        serde_json::from_value(r.clone()).context("the job result is not in the protocol's shape")?;
    let mut out = std::io::stdout().lock();
    let mut text = cli::calls::for_the_cli(&protocol::text::job_result(&r), &r.session);
    // A person's prompt comes next: never glued to the last line.
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(match r.state {
        protocol::results::JobPhase::Running => EXIT_STILL_RUNNING,
        _ => match (r.exit_code, r.signal) {
            (Some(code), _) => code,
            (None, Some(sig)) => 128 + sig,
            _ => 1,
        },
    })
}

/// `heddle kept` as a table: name, owner, processes, log.
fn kept_table(r: &Value) -> String {
    let kept = r["kept"].as_array().map(Vec::as_slice).unwrap_or_default();
    if kept.is_empty() {
        return "no kept jobs\n".to_owned();
    }
    // The processes last: the one column of any length.
    let mut out = format!("{:<24}  {:>6}  {:<10}  {}\n", "NAME", "OWNER", "LOG", "PROCESSES");
    for k in kept {
        let procs: Vec<protocol::results::Survivor> = serde_json::from_value(k["procs"].clone()).unwrap_or_default();
        let mut shown = if procs.is_empty() { "none (ended)".to_owned() } else { protocol::text::survivors(&procs) };
        if let Some(more) = k["procs_more"].as_u64().filter(|m| *m > 0) {
            shown.push_str(&format!(" and {more} more"));
        }
        let log = k["log_bytes"].as_u64().map_or("-".to_owned(), protocol::text::bytes);
        let owner = k["owner_uid"].as_u64().map_or("?".to_owned(), |u| u.to_string());
        out.push_str(&format!("{:<24}  {owner:>6}  {log:<10}  {shown}\n", k["name"].as_str().unwrap_or("?")));
    }
    out.push_str("(`heddle kept log NAME`: what one wrote; `heddle kept kill NAME`: end one)\n");
    out
}

/// A line view as text: its numbered lines, then where it continues and its note.
fn print_view(r: &Value) {
    let mut out = r["text"].as_str().unwrap_or_default().to_owned();
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    if out.is_empty() {
        out.push_str("(no output in this view)\n");
    }
    if let Some(next) = r.get("next").filter(|n| !n.is_null()) {
        out.push_str(&format!("[more: output {next} continues this view]\n"));
    }
    if let Some(n) = r["note"].as_str() {
        out.push_str(n);
        out.push('\n');
    }
    out.push_str(&protocol::text::announcements_of(r));
    out!("{out}");
}

fn print_output(client: &mut Client, session: &Value, job: u64, stream: &str) -> Result<i32> {
    let mut offset = 0u64;
    let mut out = std::io::stdout().lock();
    loop {
        let r = client.call(
            "output",
            json!({"session": session, "job": job, "stream": stream, "raw": {"offset": offset, "unredacted": true}, "announce": false}),
        )?;
        let data = r["data"].as_str().unwrap_or("");
        let bytes = if r["encoding"] == "base64" {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.decode(data).context("output data is not valid base64")?
        } else {
            data.as_bytes().to_vec()
        };
        out.write_all(&bytes)?;
        offset += bytes.len() as u64;
        if bytes.is_empty() || offset >= r["total"].as_u64().unwrap_or(0) {
            return Ok(0);
        }
    }
}

/// Whether the session's sandbox lets its jobs reach the network (from `describe`; unknown: no).
fn session_has_network(client: &mut Client, session: &serde_json::Value) -> bool {
    let d = client.call("describe", json!({"session": session})).unwrap_or_default();
    d["sessions"][0]["sandbox"]["network"] == json!(true)
}

/// For `heddle run` without `--cwd` in a session that already existed: a sentence when the job starts
/// somewhere other than `here` (the session carries its cwd from its earlier calls, so a person who
/// changed directory would otherwise see a command run in the old one without a word).
fn elsewhere_note(open: &serde_json::Value, here: &std::path::Path) -> Option<String> {
    let starts_in = open["starts_in"].as_str()?;
    if open["attached"] != json!(true) {
        return None;
    }
    let same = |a: &std::path::Path, b: &std::path::Path| match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    };
    if same(std::path::Path::new(starts_in), here) {
        return None;
    }
    let name = open["session"].as_str().unwrap_or("default");
    let here = here.display().to_string();
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+,:@%".contains(c);
    let quoted = match here.chars().all(plain) {
        true => here.clone(),
        false => format!("'{}'", here.replace('\'', "'\\''")),
    };
    Some(format!(
        "this runs in {starts_in}, where session '{name}' left off, not in this directory ({here}); to run it \
         here, begin the command with `cd {quoted} &&`, or give it a session of its own (--session NAME)"
    ))
}
