//! `leasesim run`: one seed, one scenario.

use super::common::{print_outcome, print_pictures, print_plan, run_and_show, FaultsArg};
use crate::runner::{self, RunSpec};
use crate::scenario;
use clap::Args;
use std::sync::Arc;

#[derive(Args, Debug)]
pub struct RunArgs {
    /// One scenario: a built-in scenario name (see `cargo sim list`) or a path
    /// to a scenario TOML file. The groups (`all`, `graphile-all`,
    /// `apalis-all`) are for fuzz and bench, not run.
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
    /// Run the same seed twice (and under madsim's draw-by-draw check) and
    /// report the first record where the two runs differ, if any.
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

pub fn run(args: RunArgs, engines: &crate::Engines) -> Result<i32, String> {
    let loaded = scenario::resolve(&args.scenario, engines).map_err(|e| match group_hint(&args.scenario, engines) {
        Some(hint) => format!("{e}; {hint}"),
        None => e,
    })?;
    let target = crate::fuzz::Target { arg: args.scenario.clone(), scenario: Arc::new(loaded.scenario.clone()) };
    super::common::check_defects(&[target], &args.defects.set())?;
    let mut spec = RunSpec::new(Arc::new(loaded.scenario), args.scenario.clone(), args.seed)
        .with_plan(args.faults.plan())
        .with_defects(args.defects.set());
    super::common::check_outputs(args.history.as_deref(), &args.pictures)?;
    spec.log_filter = std::env::var("RUST_LOG").ok().filter(|f| !f.is_empty());
    if !args.json {
        println!("seed: {}", args.seed);
        print_options(&spec, &loaded.path);
        print_plan(&spec.fault_plan());
    }
    if args.check_determinism {
        return check_determinism(&spec);
    }
    let title = |o: &crate::outcome::Outcome| format!("{} seed {}", o.scenario, o.seed);
    let (outcome, pictures) = match run_and_show(&spec, args.history.as_deref(), &args.pictures, title)? {
        Ok(shown) => shown,
        Err(e) => {
            eprintln!("seed {} failed: {e}", args.seed);
            eprintln!("replay: {}", spec.replay_command());
            return Ok(1);
        }
    };
    if args.json {
        println!("{}", serde_json::to_string(&outcome).expect("outcome serializes"));
    } else {
        print_outcome(&outcome);
        print_pictures(&outcome, &pictures);
    }
    Ok(if outcome.violations.is_empty() { 0 } else { 1 })
}

/// When `arg` is a group (`fuzz` and `bench` take those), what `run` takes.
fn group_hint(arg: &str, engines: &crate::Engines) -> Option<String> {
    let targets = super::common::targets(arg, engines).ok()?;
    let first = &targets.first()?.arg;
    Some(format!(
        "{arg} is a group of {} scenarios: run takes one (e.g. --scenario {first}), fuzz and bench take groups",
        targets.len()
    ))
}

fn print_options(spec: &RunSpec, path: &std::path::Path) {
    let s = &spec.scenario;
    let engine = s.engine.get();
    let w = &s.workload;
    println!("scenario: {} ({}), engine: {}", s.name, path.display(), engine.name());
    if !spec.defects.is_empty() {
        println!("  defects on: {}", spec.defects.join(", "));
    }
    // The engine's words, not the built-in one's: permits only where the
    // engine has them, and only the kinds of work this world asks for.
    let at_once = match engine.capabilities().permits {
        true => "permits",
        false => "tasks at once",
    };
    println!(
        "  topology: {} workers x {} {at_once}; phases: fault {} ms, heal {} ms{}",
        s.topology.workers,
        engine.promises().concurrency,
        s.phases.fault_phase_ms,
        s.phases.heal_phase_ms,
        s.phases.quiet_end_ms.map_or(String::new(), |q| format!(" (ends once quiet for {q} ms)"))
    );
    let kinds = [
        (w.jobs, "jobs".to_string()),
        (w.index_builds, "index builds".to_string()),
        (w.authz_materializations, "authz materializations".to_string()),
        (w.pipelines, format!("pipelines x {} stages", w.stages_per_pipeline)),
        (w.workflow_runs, format!("workflow runs x {} tasks", w.workflow_tasks_per_run)),
    ];
    let asked: Vec<String> = kinds.iter().filter(|(n, _)| *n > 0).map(|(n, what)| format!("{n} {what}")).collect();
    let scripted = match w.script.len() {
        0 => String::new(),
        n => format!(" and {n} scripted enqueues"),
    };
    println!("  workload: {}{scripted}", if asked.is_empty() { "nothing drawn".to_string() } else { asked.join(", ") });
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
