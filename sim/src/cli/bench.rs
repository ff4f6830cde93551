//! `leasesim bench`: throughput and time-to-find, measured in one run.

use super::common::{jobs, targets};
use crate::bench;
use clap::Args;
use leasesim::defects::Defect;

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// What to measure: `throughput` (seeds/s, 1 job and N jobs), `find`
    /// (seeds needed to find each defect) or `coverage` (runs needed to first
    /// reach the rarest coverage points, plain against guided).
    /// Example: bench find
    #[arg(value_parser = ["throughput", "find", "coverage"])]
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
    /// Find: also measure guided campaigns (`fuzz --guided`), side by side.
    /// Example: --guided
    #[arg(long)]
    pub guided: bool,
    /// Coverage: seeds of the plain reference campaign (over every built-in
    /// scenario) that ranks the points by how often it reached them.
    /// Example: --reference 500
    #[arg(long, default_value_t = 500)]
    pub reference: u64,
    /// Coverage: how many of the rarest points to measure. Example: --points 10
    #[arg(long, default_value_t = 10)]
    pub points: usize,
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
    let jobs = jobs(args.jobs);
    if jobs == 0 || args.seeds == 0 || args.repeats == 0 || args.starts == 0 || args.cap == 0 {
        return Err("--jobs, --seeds, --repeats, --starts and --cap must be at least 1".into());
    }
    match args.what.as_str() {
        "throughput" => throughput(&args, jobs),
        "coverage" => coverage(&args, jobs),
        _ => find(&args, jobs),
    }
}

/// Seeds/s at 1 job and at `jobs` jobs.
fn throughput(args: &BenchArgs, jobs: usize) -> Result<i32, String> {
    let target = targets(&args.scenario)?.remove(0);
    let one = bench::throughput(&target, args.seeds, args.repeats, 1);
    let many = bench::throughput(&target, args.seeds, args.repeats, jobs);
    if args.json {
        println!("{}", serde_json::to_string(&one).expect("serializes"));
        println!("{}", serde_json::to_string(&many).expect("serializes"));
        return Ok(0);
    }
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
    println!("speed-up {} jobs / 1 job: {:.2}x", jobs, many.median_seeds_per_second / one.median_seeds_per_second);
    Ok(0)
}

/// Seeds needed to find each defect, as a table (or JSON lines).
fn find(args: &BenchArgs, jobs: usize) -> Result<i32, String> {
    let defects: Vec<Defect> =
        if args.defects.defects.is_empty() { Defect::ALL.to_vec() } else { args.defects.defects.clone() };
    let modes: &[bench::Mode] =
        if args.guided { &[bench::Mode::Plain, bench::Mode::Guided] } else { &[bench::Mode::Plain] };
    if !args.json {
        println!("| defect | scenario | invariant | mode | found | median seeds to find | min..max |");
        println!("|---|---|---|---|---|---|---|");
    }
    for defect in defects {
        let scenario = args.on.clone().unwrap_or_else(|| bench::home_scenario(defect).to_string());
        let target = targets(&scenario)?.remove(0);
        for &mode in modes {
            let r = bench::time_to_find(defect, &target, args.starts, args.cap, jobs, mode);
            if args.json {
                println!("{}", serde_json::to_string(&r).expect("serializes"));
                continue;
            }
            let found: Vec<u64> = r.seeds_needed.iter().flatten().copied().collect();
            let range = match (found.iter().min(), found.iter().max()) {
                (Some(lo), Some(hi)) => format!("{lo}..{hi}"),
                _ => "-".into(),
            };
            println!(
                "| {} | {} | {} | {} | {}/{} | {} | {} |",
                r.defect,
                r.scenario,
                r.invariant,
                r.mode,
                r.found,
                r.starts,
                show_median(r.median, args.cap),
                range
            );
        }
    }
    Ok(0)
}

fn show_median(median: Option<u64>, cap: u64) -> String {
    match median {
        Some(m) if m != u64::MAX => m.to_string(),
        _ => format!("> {cap}"),
    }
}

/// Runs to first reach the rarest coverage points, plain against guided.
fn coverage(args: &BenchArgs, jobs: usize) -> Result<i32, String> {
    let all = targets("all")?;
    let rarest = bench::rarest_points(&all, args.reference, jobs, args.points);
    let points: Vec<String> = rarest.iter().map(|(p, _)| p.clone()).collect();
    let plain = bench::time_to_cover(&all, &points, args.starts, args.cap, jobs, bench::Mode::Plain);
    let guided = bench::time_to_cover(&all, &points, args.starts, args.cap, jobs, bench::Mode::Guided);
    let runs = args.cap * all.len() as u64;
    if args.json {
        for r in plain.iter().chain(&guided) {
            println!("{}", serde_json::to_string(r).expect("serializes"));
        }
        return Ok(0);
    }
    println!(
        "| point | reached in the reference ({} runs) | median runs to first reach: plain | guided | plain / guided | runs reaching it (of {runs}): plain | guided |",
        args.reference * all.len() as u64
    );
    println!("|---|---|---|---|---|---|---|");
    for ((p, g), (_, count)) in plain.iter().zip(&guided).zip(&rarest) {
        let ratio = match (p.median, g.median) {
            (Some(a), Some(b)) if a != u64::MAX && b != u64::MAX => format!("{:.1}x", a as f64 / b as f64),
            (_, Some(b)) if b != u64::MAX => format!("> {:.1}x", runs as f64 / b as f64),
            _ => "-".into(),
        };
        println!(
            "| {} | {count} | {} | {} | {ratio} | {} | {} |",
            p.point,
            show_median(p.median, runs),
            show_median(g.median, runs),
            p.median_reaching,
            g.median_reaching
        );
    }
    Ok(0)
}
