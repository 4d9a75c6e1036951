//! `heddle-launch [--cgroup DIR] [--cwd DIR] -- CMD [ARGS...]`: run one command through heddle's launcher
//! (allowlisted environment, stdin from /dev/null, optional cgroup, optional `--policy` sandbox: Landlock +
//! seccomp + no_new_privs) and exit with its status.
#![deny(unsafe_code)]

use clap::Parser;
use std::ffi::OsString;
use std::path::PathBuf;

/// Run CMD the way heddle runs a job: stdin /dev/null, allowlisted environment, optional cgroup.
#[derive(Parser)]
#[command(name = "heddle-launch", version)]
struct Args {
    /// Existing cgroup v2 directory to start CMD in.
    #[arg(long, value_name = "DIR")]
    cgroup: Option<PathBuf>,
    /// Working directory for CMD (default: the current one).
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// Sandbox CMD with this policy profile: a TOML file, or a builtin's name (`workspace`, `readonly`).
    /// The working directory is the project; `TMPDIR` and `HOME` fill the other placeholders.
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    argv: Vec<OsString>,
}

fn main() {
    let args = Args::parse();
    let cmd =
        launcher::run_command::Command { cgroup: args.cgroup, cwd: args.cwd, argv: args.argv, policy: args.policy };
    match launcher::run_command::run(&cmd) {
        Ok(status) => std::process::exit(status.shell_code()),
        Err(err) => {
            let code = err.exit_code();
            eprintln!("heddle-launch: {:#}", anyhow::Error::new(err));
            std::process::exit(code);
        }
    }
}
