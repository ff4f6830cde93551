//! The command line: the verbs `run`, `fuzz`, `replay`, `shrink`, `bench`
//! and `list`, one module each. Verbs never import each other: what several
//! share (flags, how a run is shown) is in `common`.
//!
//! Words: a *seed* is a number; a *run* is one world of one scenario under
//! one seed; a *scenario* is a TOML world; a *group* (`all`, `graphile-all`,
//! `apalis-all`) is several scenarios, each seed running once per scenario.
//!
//! Exit codes: 0 success, 1 a run failed (a violation, a panic, a hang, a
//! resource limit), 2 bad input (a flag, a file, a name), 3 (`fuzz` only) no
//! run failed but a scenario never reached a coverage point it requires,
//! 130 (`fuzz` only) interrupted by Ctrl-C or SIGTERM before any failure
//! (after its summary). Errors are one line, naming the input.

mod bench;
mod bench_compare;
mod bench_false_alarms;
mod bench_suite;
mod common;
mod fuzz;
mod list;
mod replay;
mod run;
mod shrink;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

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
    /// Run many seeds of a scenario or a group, in parallel; exit 1 if any run failed.
    ///
    /// Each seed runs once per scenario: `--scenario all --seeds 300` is 300
    /// runs of each scenario of the group `all`.
    ///
    /// Exit codes: 0 every run passed; 1 a run failed (or --save could not
    /// write an entry: the summary still lists every failure); 2 bad input; 3
    /// a required coverage point was never reached; 130 interrupted (Ctrl-C or
    /// SIGTERM) before any failure, after printing the summary.
    ///
    /// Example: cargo sim fuzz --scenario all --seeds 2000 --jobs 2 --json
    Fuzz(fuzz::FuzzArgs),
    /// List the scenarios, scenario groups, engines, defect switches, fault kinds and invariants.
    ///
    /// Example: cargo sim list
    List(list::ListArgs),
    /// Replay one corpus entry exactly and check its expectation.
    ///
    /// Example: cargo sim replay corpus/swarm-pass-seed1.toml
    Replay(replay::ReplayArgs),
    /// Measure throughput (runs/s), time to find each defect, and more (one mode per WHAT).
    ///
    /// Example: cargo sim bench find --starts 20
    Bench(bench::BenchArgs),
    /// Shrink a failing corpus entry to a smaller case that fails the same way.
    ///
    /// Example: cargo sim shrink corpus/b-machines-fenced-completion-unfenced-completion-seed10.toml --out /tmp
    Shrink(shrink::ShrinkArgs),
}

/// A seed that hits the record cap unwinds with `LimitExceeded`, which the
/// runner turns into a tidy `resource-limit` failure: the default hook's
/// "Box<dyn Any>" and backtrace for it would only be noise. Every other
/// panic is printed as before.
fn quiet_resource_limits() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if info.payload().downcast_ref::<crate::history::LimitExceeded>().is_none() {
            default(info);
        }
    }));
}

/// Output into a pipe whose reader left (`cargo sim list | head -1`) ends
/// the process quietly, as it does any Unix tool, instead of a panic in
/// `println!` (Rust ignores SIGPIPE by default). Every failure a campaign
/// finds is saved as it is found, before anything is printed of it.
fn quiet_closed_pipe() {
    #[cfg(unix)]
    // SAFETY: setting a signal's disposition to its default, before any
    // thread of ours starts; no handler runs our code.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// The command line's grammar: every flag that takes a value takes one that
/// starts with `-` too, so `--seeds -1` is refused by the flag's own parser
/// ("invalid value '-1' for '--seeds'") rather than read as an unknown flag.
///
/// `--defect` names a switch of one of `engines` (each run checks its own
/// engine's): its parser is given here, where the engines are known.
fn command(engines: &crate::Engines) -> clap::Command {
    fn defect_names(cmd: clap::Command, engines: &crate::Engines) -> clap::Command {
        let cmd = if cmd.get_arguments().any(|a| a.get_id() == "defects") {
            let engines = engines.clone();
            cmd.mut_arg("defects", move |a| a.value_parser(move |name: &str| engines.known_defect(name)))
        } else {
            cmd
        };
        cmd.mut_subcommands(|sub| defect_names(sub, engines))
    }
    fn hyphen_values(cmd: clap::Command) -> clap::Command {
        cmd.mut_args(|a| {
            let flag_with_value = a.get_long().is_some() && a.get_action().takes_values();
            if flag_with_value {
                a.allow_hyphen_values(true)
            } else {
                a
            }
        })
        .mut_subcommands(hyphen_values)
    }
    defect_names(hyphen_values(Cli::command()), engines)
}

/// Parses the command line and runs the verb with the engines this crate
/// ships with; returns the exit code.
pub fn main() -> i32 {
    // Usage lines say what the user types (`cargo sim run ...`), not the
    // binary's file name.
    run_cli(crate::engines(), Some("cargo sim"))
}

/// The whole CLI (`run`, `fuzz`, `replay`, `shrink`, `bench`, `list`, and
/// pictures) for these engines: a crate testing its own engine gets it from
/// its own `main`:
///
/// ```text
/// fn main() {
///     let engines = leasesim_sim::engines(); // .with(my_engine::adapter())
///     std::process::exit(leasesim_sim::cli::main_with(engines));
/// }
/// ```
/// (the README's recipe, built and run by `tests/outside_crate.rs`)
pub fn main_with(engines: crate::Engines) -> i32 {
    run_cli(engines, None)
}

/// The CLI, its usage lines naming `bin_name` (else the executable).
fn run_cli(engines: crate::Engines, bin_name: Option<&'static str>) -> i32 {
    quiet_resource_limits();
    quiet_closed_pipe();
    let command = match bin_name {
        Some(name) => command(&engines).bin_name(name),
        None => command(&engines),
    };
    let cli = match command.try_get_matches().and_then(|m| Cli::from_arg_matches(&m)) {
        Ok(cli) => cli,
        Err(e) => {
            // clap prints help/version to stdout (exit 0) and errors to stderr (exit 2).
            if !e.use_stderr() {
                let _ = e.print();
                return 0;
            }
            // One line: clap's message (which names the flag) up to its usage hint.
            let rendered = e.render().to_string();
            let line: Vec<&str> = rendered
                .lines()
                .map(str::trim)
                .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
                .filter(|l| !l.is_empty())
                .collect();
            eprintln!("{}", line.join(" "));
            return 2;
        }
    };
    let result = match cli.command {
        Command::Run(args) => run::run(args, &engines),
        Command::Fuzz(args) => fuzz::run(args, &engines),
        Command::List(args) => list::run(&args, &engines),
        Command::Replay(args) => replay::run(args, &engines),
        Command::Bench(args) => bench::run(args, &engines),
        Command::Shrink(args) => shrink::run(args, &engines),
    };
    match result {
        Ok(code) => code,
        Err(message) => {
            eprintln!("error: {message}");
            2
        }
    }
}
