//! `heddle-supervisor`: parses the command line and runs the supervisor library (see `supervisor`).
#![deny(unsafe_code)]

use clap::Parser;

fn main() {
    if std::env::args_os().nth(1).is_some_and(|a| a == supervisor::kept_output::DRAIN_ARG) {
        // Started as `/proc/self/fd/N`, it would be named `N` in ps and top.
        let _ = nix::sys::prctl::set_name(c"heddle-drain");
        shm_proto::log::init("heddle-kept-drain");
        std::process::exit(supervisor::kept_output::drainer_main());
    }
    shm_proto::log::init("heddle-supervisor");
    let args = supervisor::cli::Args::parse();
    if let Err(e) = supervisor::run(args) {
        let code = if matches!(e, supervisor::Error::Start(_)) { supervisor::EXIT_START_FAILED } else { 1 };
        // One line, with every cause: "the supervisor could not start: cannot open …: No such file …".
        tracing::error!("{:#}", anyhow::Error::from(e));
        std::process::exit(code);
    }
}
