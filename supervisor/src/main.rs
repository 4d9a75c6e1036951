//! `heddle-supervisor`: parses the command line and runs the supervisor library (see `supervisor`).
use clap::Parser;

fn main() {
    let args = supervisor::cli::Args::parse();
    if let Err(e) = supervisor::run(args).map_err(anyhow::Error::from) {
        // One line, with every cause: "the supervisor could not start: cannot open …: No such file …".
        eprintln!("heddle-supervisor: {e:#}");
        std::process::exit(1);
    }
}
