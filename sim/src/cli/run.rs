//! `leasesim run`: one seed, one scenario.

use crate::outcome::Outcome;
use crate::runner::{self, PlanSource, RunSpec};
use crate::scenario;
use clap::Args;
use std::sync::Arc;

#[derive(Args, Debug)]
pub struct RunArgs {
    /// A built-in scenario name (see `cargo sim list`) or a path to a scenario TOML file.
    /// Example: --scenario swarm, --scenario scenarios/c-workflows.toml
    #[arg(long)]
    pub scenario: String,
    /// The seed: the same seed gives the same run, bit for bit. Example: --seed 7
    #[arg(long)]
    pub seed: u64,
    /// Print one JSON object (scenario, seed, trace_hash, events, sim_seconds,
    /// violations, tasks, fault_plan, ...) on stdout instead of the human
    /// summary. Example: --json | jq .trace_hash
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub pictures: super::common::PictureArgs,
    /// Also write the whole event history, one JSON record per line, to FILE.
    /// Example: --history run.jsonl
    #[arg(long, value_name = "FILE")]
    pub history: Option<std::path::PathBuf>,
    /// Run the seed twice (and under madsim's draw-by-draw check) and report
    /// the first record where the runs differ, if any.
    /// Example: cargo sim run --scenario swarm --seed 7 --check-determinism
    #[arg(long)]
    pub check_determinism: bool,
    /// Where the fault plan comes from: `swarm` draws it from the seed,
    /// `none` runs without faults. Example: --faults none
    #[arg(long, value_enum, default_value_t = FaultsArg::Swarm)]
    pub faults: FaultsArg,
    #[command(flatten)]
    pub defects: super::common::DefectArgs,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultsArg {
    Swarm,
    None,
}

pub fn run(args: RunArgs) -> Result<i32, String> {
    let loaded = scenario::resolve(&args.scenario)?;
    let plan = match args.faults {
        FaultsArg::Swarm => PlanSource::Swarm,
        FaultsArg::None => PlanSource::None,
    };
    let mut spec = RunSpec::new(Arc::new(loaded.scenario), args.scenario.clone(), args.seed)
        .with_plan(plan)
        .with_defects(args.defects.set());
    spec.log_filter = std::env::var("RUST_LOG").ok().filter(|f| !f.is_empty());
    if !args.json {
        println!("seed: {}", args.seed);
        print_options(&spec, &loaded.path);
        print_plan(&spec.fault_plan());
    }
    if args.check_determinism {
        return check_determinism(&spec);
    }
    let pictures;
    let outcome = match runner::run_world(&spec, runner::DEFAULT_WATCHDOG) {
        Ok(result) => {
            if let Some(path) = &args.history {
                write_history(path, &result.history)?;
            }
            let outcome = runner::judge(&spec, &result);
            let title = format!("{} seed {}", outcome.scenario, outcome.seed);
            pictures = args.pictures.write(&result.history, &outcome.violations, &title)?;
            outcome
        }
        Err(e) => {
            eprintln!("seed {} failed: {e}", args.seed);
            eprintln!("replay: {}", spec.replay_command());
            return Ok(1);
        }
    };
    if args.json {
        println!("{}", serde_json::to_string(&outcome).expect("outcome serializes"));
    } else {
        print_summary(&outcome);
        print_pictures(&outcome, &pictures);
    }
    Ok(if outcome.violations.is_empty() { 0 } else { 1 })
}

fn print_options(spec: &RunSpec, path: &std::path::Path) {
    let s = &spec.scenario;
    let e = &s.engine;
    let w = &s.workload;
    println!("scenario: {} ({})", s.name, path.display());
    if !spec.defects.0.is_empty() {
        println!("  defects on: {}", spec.defects.names().join(", "));
    }
    println!(
        "  topology: {} workers x {} permits; phases: fault {} ms, heal {} ms",
        s.topology.workers, e.concurrency, s.phases.fault_phase_ms, s.phases.heal_phase_ms
    );
    println!(
        "  workload: {} index builds, {} authz, {} jobs, {} pipelines x {} stages, {} workflow runs",
        w.index_builds, w.authz_materializations, w.jobs, w.pipelines, w.stages_per_pipeline, w.workflow_runs
    );
}

pub fn print_plan(plan: &crate::faults::FaultPlan) {
    if plan.events.is_empty() {
        println!("fault plan: none");
        return;
    }
    println!("fault plan: {} events ({} kinds)", plan.events.len(), plan.kinds().len());
    for e in &plan.events {
        println!("  {}", e.describe());
    }
}

pub fn print_summary(o: &Outcome) {
    println!("trace_hash: {}", o.trace_hash);
    println!("events: {}  sim_seconds: {:.1}", o.events, o.sim_seconds);
    let tasks: Vec<String> = o.tasks.iter().map(|(k, v)| format!("{k}={v}")).collect();
    println!(
        "tasks: {}  leftover leases: {}  leftover permits: {}",
        tasks.join(" "),
        o.leftover_leases,
        o.leftover_permits
    );
    let injected: Vec<String> =
        o.fault_counts.iter().filter(|(_, n)| **n > 0).map(|(k, n)| format!("{k}={n}")).collect();
    if !injected.is_empty() {
        println!("faults injected: {}", injected.join(" "));
    }
    let idle: Vec<&str> = o.checks.iter().filter(|(_, n)| **n == 0).map(|(k, _)| k.as_str()).collect();
    if !idle.is_empty() {
        println!("never evaluated (nothing in this run for them to judge): {}", idle.join(" "));
    }
    if o.violations.is_empty() {
        println!("violations: none");
    } else {
        println!("violations: {}", o.violations.len());
        for v in &o.violations {
            let mut who = Vec::new();
            if let Some(t) = v.task {
                who.push(format!("task {t}"));
            }
            if let Some(a) = v.attempt {
                who.push(format!("attempt {a}"));
            }
            if let Some(p) = &v.process {
                who.push(format!("process {p}"));
            }
            println!("  [{}] at {} ms ({}): {}", v.invariant, v.at_ms, who.join(", "), v.message);
        }
        println!("replay: {}", o.replay);
    }
}

pub fn write_history(path: &std::path::Path, history: &[crate::history::Record]) -> Result<(), String> {
    use std::io::Write;
    let file = std::fs::File::create(path).map_err(|e| format!("--history {}: {e}", path.display()))?;
    let mut out = std::io::BufWriter::new(file);
    for rec in history {
        let line = serde_json::to_string(rec).expect("records serialize");
        writeln!(out, "{line}").map_err(|e| format!("--history {}: {e}", path.display()))?;
    }
    out.flush().map_err(|e| format!("--history {}: {e}", path.display()))
}

fn check_determinism(spec: &RunSpec) -> Result<i32, String> {
    match runner::first_divergence(spec, runner::DEFAULT_WATCHDOG) {
        Err(e) => {
            println!("seed {} failed: {e}", spec.seed);
            Ok(1)
        }
        Ok(Some((i, a, b))) => {
            let show = |r: Option<crate::history::Record>| {
                r.map_or("(history ended)".to_string(), |r| serde_json::to_string(&r).expect("records serialize"))
            };
            println!(
                "NOT DETERMINISTIC: the two runs differ at record {i}:\n  first:  {}\n  second: {}",
                show(a),
                show(b)
            );
            Ok(1)
        }
        Ok(None) => {
            let hash = runner::check_determinism(spec);
            println!("deterministic: two runs agree record for record; madsim's check agrees; trace_hash {hash:016x}");
            Ok(0)
        }
    }
}

/// Where a picture beats text: point a failing run at its timeline.
pub fn print_pictures(outcome: &Outcome, written: &[String]) {
    for line in written {
        println!("{line}");
    }
    if !outcome.violations.is_empty() && written.is_empty() {
        println!("to see it: {} --svg run.svg --trace run.json", outcome.replay);
    }
}
