//! `leasesim fuzz`: many seeds, in parallel.

use super::run::FaultsArg;
use crate::fuzz::{self, Campaign, Summary, Target};
use crate::runner::{self, PlanSource};
use crate::scenario;
use clap::Args;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

#[derive(Args, Debug)]
pub struct FuzzArgs {
    /// A built-in scenario, a scenario TOML path, or `all` (every built-in scenario).
    /// Example: --scenario all
    #[arg(long)]
    pub scenario: String,
    /// How many seeds to run (against each scenario). Example: --seeds 2000
    #[arg(long)]
    pub seeds: u64,
    /// The first seed; seeds run from here upward. Example: --seed-start 100000
    #[arg(long, default_value_t = 1)]
    pub seed_start: u64,
    /// Seeds run at once (default: one per core). Example: --jobs 2
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Print one JSON summary object on stdout instead of text.
    #[arg(long)]
    pub json: bool,
    /// Where each seed's fault plan comes from: `swarm` (drawn from the seed) or `none`.
    #[arg(long, value_enum, default_value_t = FaultsArg::Swarm)]
    pub faults: FaultsArg,
    #[command(flatten)]
    pub defects: super::common::DefectArgs,
}

pub fn targets(arg: &str) -> Result<Vec<Target>, String> {
    let names = if arg == "all" { scenario::builtin_names() } else { vec![arg.to_string()] };
    names
        .into_iter()
        .map(|name| {
            let loaded = scenario::resolve(&name)?;
            Ok(Target { arg: name, scenario: Arc::new(loaded.scenario) })
        })
        .collect()
}

pub fn default_jobs() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

pub fn run(args: FuzzArgs) -> Result<i32, String> {
    if args.seeds == 0 {
        return Err("--seeds: must be at least 1".into());
    }
    if args.jobs == Some(0) {
        return Err("--jobs: must be at least 1".into());
    }
    let seed_end = args.seed_start.checked_add(args.seeds).ok_or("--seed-start + --seeds overflows u64")?;
    let campaign = Campaign {
        targets: targets(&args.scenario)?,
        seeds: (args.seed_start..seed_end).collect(),
        jobs: args.jobs.unwrap_or_else(default_jobs),
        plan: match args.faults {
            FaultsArg::Swarm => PlanSource::Swarm,
            FaultsArg::None => PlanSource::None,
        },
        watchdog: runner::DEFAULT_WATCHDOG,
        defects: args.defects.set(),
    };
    if !args.json {
        let names: Vec<&str> = campaign.targets.iter().map(|t| t.arg.as_str()).collect();
        println!(
            "seeds: {}..{} ({} seeds x {} scenarios: {}), jobs: {}",
            args.seed_start,
            seed_end - 1,
            args.seeds,
            names.len(),
            names.join(", "),
            campaign.jobs
        );
    }
    let stop = AtomicBool::new(false);
    let json = args.json;
    let summary = fuzz::run(&campaign, &stop, |p| {
        if json {
            return;
        }
        if let Ok(o) = p.last {
            if let Some(v) = o.violations.first() {
                println!(
                    "FAIL {} seed {}: [{}] {}  (replay: {})",
                    o.scenario, o.seed, v.invariant, v.message, o.replay
                );
            }
        } else if let Err(e) = p.last {
            println!("FAIL {} seed {}: {e}  (replay: {})", p.spec.scenario.name, p.spec.seed, p.spec.replay_command());
        }
    });
    if json {
        println!("{}", serde_json::to_string(&summary).expect("summary serializes"));
    } else {
        print_summary(&summary);
    }
    Ok(if summary.failures.is_empty() { 0 } else { 1 })
}

pub fn print_summary(s: &Summary) {
    println!(
        "runs: {}  failures: {}  events: {}  sim: {:.0} s  wall: {:.1} s  ({:.1} seeds/s, {:.0} events/s)",
        s.seeds,
        s.failures.len(),
        s.events,
        s.sim_seconds,
        s.wall_seconds,
        s.seeds_per_second,
        s.events_per_second
    );
    let faults: Vec<String> = s.fault_counts.iter().map(|(k, n)| format!("{k}={n}")).collect();
    println!("fault injections: {}", faults.join(" "));
    let checks: Vec<String> = s.checks.iter().map(|(k, n)| format!("{k}={n}")).collect();
    println!("checks: {}", checks.join(" "));
    for f in &s.failures {
        println!("failure: {} seed {} [{}] {}\n  replay: {}", f.scenario, f.seed, f.invariant, f.message, f.replay);
    }
}
