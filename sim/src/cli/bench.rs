//! `leasesim bench`: throughput and time-to-find, measured in one run.

use super::fuzz::{default_jobs, targets};
use crate::bench;
use clap::Args;
use leasesim::defects::Defect;

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// What to measure: `throughput` (seeds/s, 1 job and N jobs) or `find`
    /// (seeds needed to find each defect). Example: bench find
    #[arg(value_parser = ["throughput", "find"])]
    pub what: String,
    /// Throughput: the scenario. Example: --scenario swarm
    #[arg(long, default_value = "swarm")]
    pub scenario: String,
    /// Throughput: seeds per repeat. Example: --seeds 400
    #[arg(long, default_value_t = 400)]
    pub seeds: u64,
    /// Throughput: repeats (the median is reported). Example: --repeats 5
    #[arg(long, default_value_t = 5)]
    pub repeats: usize,
    /// Find: independent starting seeds per defect. Example: --starts 20
    #[arg(long, default_value_t = 20)]
    pub starts: u64,
    /// Find: give up after this many seeds from one start. Example: --cap 1000
    #[arg(long, default_value_t = 1000)]
    pub cap: u64,
    /// Find: measure on this scenario instead of each defect's own system
    /// (e.g. `swarm`). Example: --on swarm
    #[arg(long)]
    pub on: Option<String>,
    /// Find: only these defects (repeatable; default all).
    #[command(flatten)]
    pub defects: super::common::DefectArgs,
    /// Jobs (default: one per core). Example: --jobs 2
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Print JSON lines instead of a table. Example: --json
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: BenchArgs) -> Result<i32, String> {
    let jobs = args.jobs.unwrap_or_else(default_jobs);
    if jobs == 0 || args.seeds == 0 || args.repeats == 0 || args.starts == 0 || args.cap == 0 {
        return Err("--jobs, --seeds, --repeats, --starts and --cap must be at least 1".into());
    }
    if args.what == "throughput" {
        let target = targets(&args.scenario)?.remove(0);
        let one = bench::throughput(&target, args.seeds, args.repeats, 1);
        let many = bench::throughput(&target, args.seeds, args.repeats, jobs);
        if args.json {
            println!("{}", serde_json::to_string(&one).expect("serializes"));
            println!("{}", serde_json::to_string(&many).expect("serializes"));
        } else {
            for t in [&one, &many] {
                let runs: Vec<String> = t.seeds_per_second.iter().map(|r| format!("{r:.0}")).collect();
                println!(
                    "{}: {} jobs, {} seeds x {} repeats: median {:.1} seeds/s, {:.0} events/s (runs: {})",
                    t.scenario,
                    t.jobs,
                    t.seeds,
                    t.repeats,
                    t.median_seeds_per_second,
                    t.median_events_per_second,
                    runs.join(", ")
                );
            }
            println!(
                "speed-up {} jobs / 1 job: {:.2}x",
                jobs,
                many.median_seeds_per_second / one.median_seeds_per_second
            );
        }
        return Ok(0);
    }
    let defects: Vec<Defect> =
        if args.defects.defects.is_empty() { Defect::ALL.to_vec() } else { args.defects.defects.clone() };
    if !args.json {
        println!("| defect | scenario | invariant | found | median seeds to find | min..max |");
        println!("|---|---|---|---|---|---|");
    }
    for defect in defects {
        let scenario = args.on.clone().unwrap_or_else(|| bench::home_scenario(defect).to_string());
        let target = targets(&scenario)?.remove(0);
        let r = bench::time_to_find(defect, &target, args.starts, args.cap, jobs);
        if args.json {
            println!("{}", serde_json::to_string(&r).expect("serializes"));
        } else {
            let found: Vec<u64> = r.seeds_needed.iter().flatten().copied().collect();
            let range = match (found.iter().min(), found.iter().max()) {
                (Some(lo), Some(hi)) => format!("{lo}..{hi}"),
                _ => "-".into(),
            };
            let median = r.median.map_or(format!("> {}", args.cap), |m| {
                if m == u64::MAX {
                    format!("> {}", args.cap)
                } else {
                    m.to_string()
                }
            });
            println!(
                "| {} | {} | {} | {}/{} | {} | {} |",
                r.defect, r.scenario, r.invariant, r.found, r.starts, median, range
            );
        }
    }
    Ok(0)
}
