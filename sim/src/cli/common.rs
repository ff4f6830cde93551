//! What several verbs share: flags, how they are read, and how a run is
//! shown. Verbs import from here, never from each other.

use crate::fuzz::Target;
use crate::outcome::Outcome;
use crate::runner::{self, PlanSource, RunError, RunSpec};
use crate::scenario;
use clap::Args;
use std::path::Path;

#[derive(Args, Debug, Clone)]
pub struct DefectArgs {
    /// Turn on a defect switch of the scenario's engine (of every scenario's,
    /// for a group) that re-creates a real bug (repeatable; see `cargo sim
    /// list`; another engine's switch is refused before any run).
    /// Example: --defect unfenced-completion
    // Its parser (a switch of a known engine) is set where the engines are
    // known (`cli::command`).
    #[arg(long = "defect", value_name = "NAME")]
    pub defects: Vec<String>,
}

impl DefectArgs {
    /// The switches, sorted and without repeats.
    pub fn set(&self) -> Vec<String> {
        let mut names = self.defects.clone();
        names.sort();
        names.dedup();
        names
    }
}

/// Pictures of one run: a Chrome trace and an SVG timeline.
#[derive(Args, Debug, Clone, Default)]
pub struct PictureArgs {
    /// Write the run in the Chrome trace event format (open it in Perfetto or
    /// chrome://tracing): a track per process, spans for leases, permits,
    /// executions, maintenance passes and outcome writes, instants for faults
    /// and violations. Example: --trace run.json
    #[arg(long, value_name = "FILE.json")]
    pub trace: Option<std::path::PathBuf>,
    /// Write a static SVG timeline: a lane per process, leases and permits as
    /// bars, faults, the heal and the violation marked. Example: --svg run.svg
    #[arg(long, value_name = "FILE.svg")]
    pub svg: Option<std::path::PathBuf>,
    /// The SVG timeline starts here (simulated time: 215562ms, 215s, 3m; a
    /// bare number is ms), so a long run's moment fills the width. Example: --from 200s
    #[arg(long, value_name = "TIME", value_parser = parse_instant_ms, requires = "svg")]
    pub from: Option<u64>,
    /// The SVG timeline ends here (as --from; past the run's end is the end).
    /// Example: --to 230s
    #[arg(long, value_name = "TIME", value_parser = parse_instant_ms, requires = "svg")]
    pub to: Option<u64>,
    /// Draw the SVG timeline around the run's first violation: from a little
    /// before the first grant of the task it names to a little after it (the
    /// whole run when nothing was violated). Example: --svg run.svg --around-violation
    #[arg(long, requires = "svg", conflicts_with_all = ["from", "to"])]
    pub around_violation: bool,
}

/// A simulated instant: `215562ms`, `215s`, `3m`, or a bare number of ms.
pub fn parse_instant_ms(text: &str) -> Result<u64, String> {
    let bad = || format!("'{text}' is not a simulated time (examples: 215562ms, 215s, 3m)");
    let (digits, unit_ms) = if let Some(d) = text.strip_suffix("ms") {
        (d, 1)
    } else if let Some(d) = text.strip_suffix('s') {
        (d, 1000)
    } else if let Some(d) = text.strip_suffix('m') {
        (d, 60_000)
    } else {
        (text, 1)
    };
    let n: u64 = digits.parse().map_err(|_| bad())?;
    n.checked_mul(unit_ms).filter(|&ms| ms <= leasesim_world::ranges::MAX_DURATION_MS).ok_or_else(bad)
}

impl PictureArgs {
    /// Refuses, before any run, an output path that is not a new path or a
    /// regular file (`export::check_output_path`).
    pub fn check(&self) -> Result<(), String> {
        if let (Some(from), Some(to)) = (self.from, self.to) {
            if to <= from {
                return Err(format!("--to: {to} ms is not after --from ({from} ms)"));
            }
        }
        if let Some(path) = &self.trace {
            crate::export::check_writable_output(path).map_err(|e| format!("--trace: {e}"))?;
        }
        if let Some(path) = &self.svg {
            crate::export::check_writable_output(path).map_err(|e| format!("--svg: {e}"))?;
        }
        Ok(())
    }

    /// Writes the pictures that were asked for; returns what was written.
    pub fn write(
        &self,
        history: &[crate::history::Record],
        violations: &[crate::check::Violation],
        title: &str,
    ) -> Result<Vec<String>, String> {
        let mut written = Vec::new();
        if let Some(path) = &self.trace {
            crate::export::write_atomic(path, &crate::export::chrome_trace(history, violations))
                .map_err(|e| format!("--trace: {e}"))?;
            written.push(format!("trace: {} (open in https://ui.perfetto.dev)", path.display()));
        }
        if let Some(path) = &self.svg {
            let window_ms = if self.around_violation {
                crate::export::around_first_violation(history, violations)
            } else {
                (self.from.is_some() || self.to.is_some())
                    .then(|| (self.from.unwrap_or(0), self.to.unwrap_or(u64::MAX)))
            };
            let svg = crate::export::svg_timeline_window(history, violations, title, window_ms);
            crate::export::write_atomic(path, &svg).map_err(|e| format!("--svg: {e}"))?;
            let window = match window_ms {
                Some((from, to)) if self.around_violation => {
                    format!(" (around the first violation: {from} ms to {to} ms)")
                }
                None if self.around_violation => " (no violation: the whole run)".to_string(),
                _ => String::new(),
            };
            written.push(format!("timeline: {}{window}", path.display()));
        }
        Ok(written)
    }
}

/// `--faults`: where a seed's fault plan comes from (`run` and `fuzz`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultsArg {
    Swarm,
    None,
}

impl FaultsArg {
    pub fn plan(self) -> PlanSource {
        match self {
            FaultsArg::Swarm => PlanSource::Swarm,
            FaultsArg::None => PlanSource::None,
        }
    }
}

/// `--scenario`: a built-in name, a TOML path, or a group (`all`,
/// `graphile-all`, `apalis-all`: see `group_members`).
pub fn targets(arg: &str, engines: &crate::Engines) -> Result<Vec<Target>, String> {
    let Some(names) = group_members(arg) else {
        return Ok(vec![Target::resolve(arg, engines)?]);
    };
    let mut targets = Vec::new();
    for name in &names {
        targets.push(Target::resolve(name, engines)?);
    }
    if targets.is_empty() {
        return Err(format!("--scenario {arg}: no built-in scenario matches (see cargo sim list)"));
    }
    Ok(targets)
}

/// The built-in scenarios a group names, or `None` when `arg` is not a
/// group: `all` is the built-in engine's scenarios; `PREFIX-all` the
/// scenarios whose name starts with `PREFIX-` (`graphile-all`), whatever
/// their engine.
fn group_members(arg: &str) -> Option<Vec<String>> {
    let group = arg.strip_suffix("all")?;
    let names = if group.is_empty() { scenario::builtin_engine_names() } else { scenario::builtin_names() };
    Some(names.into_iter().filter(|n| n.starts_with(group)).collect())
}

/// Every group `--scenario` takes (`fuzz`, `bench`) with its scenarios:
/// `all`, then `PREFIX-all` for the name prefix of each other built-in
/// scenario (`apalis-all`, `graphile-all`).
pub fn groups() -> Vec<(String, Vec<String>)> {
    let builtin_engine = scenario::builtin_engine_names();
    let mut prefixes: Vec<String> = scenario::builtin_names()
        .into_iter()
        .filter(|name| !builtin_engine.contains(name))
        .filter_map(|name| name.split_once('-').map(|(prefix, _)| prefix.to_string()))
        .collect();
    prefixes.sort();
    prefixes.dedup();
    std::iter::once("all".to_string())
        .chain(prefixes.into_iter().map(|prefix| format!("{prefix}-all")))
        .filter_map(|group| group_members(&group).map(|names| (group, names)))
        .collect()
}

/// Every target's engine has every switch asked for: `--defect` names a
/// switch of some known engine, but a run of another engine would have to
/// refuse it mid-campaign. Told before any seed runs, as bad input.
pub fn check_defects(targets: &[Target], defects: &[String]) -> Result<(), String> {
    if defects.is_empty() {
        return Ok(());
    }
    for target in targets {
        let engine = target.scenario.engine.get();
        engine
            .with_switches(defects)
            .map_err(|e| format!("--defect: scenario {} runs {}: {e}", target.arg, engine.name()))?;
    }
    Ok(())
}

/// `--jobs`, defaulting to one per core.
pub fn jobs(arg: Option<usize>) -> Result<usize, String> {
    let cores = crate::fuzz::default_jobs();
    // Each job is a thread running one seed's world at a time: more than a
    // few per core only costs memory and switches.
    let most = (cores * MAX_JOBS_PER_CORE).max(MIN_MAX_JOBS);
    match arg {
        None => Ok(cores),
        Some(0) => Err("--jobs: must be at least 1".into()),
        Some(n) if n > most => Err(format!(
            "--jobs: {n} is more than {most} ({MAX_JOBS_PER_CORE} per core on {cores} cores, or {MIN_MAX_JOBS})"
        )),
        Some(n) => Ok(n),
    }
}

/// `--jobs` may ask for at most this many jobs per core (or `MIN_MAX_JOBS`).
const MAX_JOBS_PER_CORE: usize = 8;
const MIN_MAX_JOBS: usize = 64;

/// The fault plan a run plays, one event a line.
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

/// One run's outcome, as `run` and `replay` print it.
pub fn print_outcome(o: &Outcome) {
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

/// `--history FILE`: every record of the run, one JSON object a line.
pub fn write_history(path: &std::path::Path, history: &[crate::history::Record]) -> Result<(), String> {
    let mut text = String::new();
    for rec in history {
        text.push_str(&serde_json::to_string(rec).expect("records serialize"));
        text.push('\n');
    }
    crate::export::write_atomic(path, &text).map_err(|e| format!("--history: {e}"))
}

/// Where a picture beats text: point a failing run at its timeline.
pub fn print_pictures(outcome: &Outcome, written: &[String]) {
    for line in written {
        println!("{line}");
    }
    if !outcome.violations.is_empty() && written.is_empty() {
        println!("to see it: {} --svg run.svg --around-violation --trace run.json", outcome.replay);
    }
}

/// Bad output paths are refused before the run (and before anything is
/// printed), not after it.
pub fn check_outputs(history: Option<&Path>, pictures: &PictureArgs) -> Result<(), String> {
    pictures.check()?;
    if let Some(path) = history {
        crate::export::check_writable_output(path).map_err(|e| format!("--history: {e}"))?;
    }
    Ok(())
}

/// Runs `spec`'s world once, writes the history (`--history`) and the
/// pictures asked for, and judges it. `title` names the pictures.
pub fn run_and_show(
    spec: &RunSpec,
    history: Option<&Path>,
    pictures: &PictureArgs,
    title: impl FnOnce(&Outcome) -> String,
) -> Result<Result<(Outcome, Vec<String>), RunError>, String> {
    check_outputs(history, pictures)?;
    let result = match runner::run_world(spec, runner::DEFAULT_WATCHDOG) {
        Ok(result) => result,
        Err(e) => return Ok(Err(e)),
    };
    if let Some(path) = history {
        write_history(path, &result.history)?;
    }
    let outcome = runner::judge(spec, &result);
    let written = pictures.write(&result.history, &outcome.violations, &title(&outcome))?;
    Ok(Ok((outcome, written)))
}
