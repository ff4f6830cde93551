//! The command line: `run`, `list` (and the verbs later issues add).
//!
//! Exit codes: 0 success, 1 a seed failed (a violation, a panic, a hang),
//! 2 bad input (a flag, a file, a name). Errors are one line, naming the input.

mod fuzz;
mod run;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "leasesim", version, about = "Deterministic simulation testing of lease-based task engines", long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run one seed of one scenario and report what happened.
    ///
    /// Example: cargo sim run --scenario swarm --seed 7 --json
    Run(run::RunArgs),
    /// Run many seeds in parallel; exit 1 if any seed failed.
    ///
    /// Example: cargo sim fuzz --scenario all --seeds 2000 --jobs 2 --json
    Fuzz(fuzz::FuzzArgs),
}

/// Parses the command line and runs the verb; returns the exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // clap prints help/version to stdout (exit 0) and errors to stderr (exit 2).
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return code;
        }
    };
    let result = match cli.command {
        Command::Run(args) => run::run(args),
        Command::Fuzz(args) => fuzz::run(args),
    };
    match result {
        Ok(code) => code,
        Err(message) => {
            eprintln!("error: {message}");
            2
        }
    }
}
